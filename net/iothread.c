/* net/iothread.c — see iothread.h and net/THREADS.md.
 *
 * One struct iothr per thread. Its fields fall in three groups, each with
 * one owner: the thread's own (its loop, connections, lists, budget), the
 * state thread's (sbox: messages for this thread waiting for room in `out`),
 * and the shared ones (the rings, the atomics, the hand-off list under mu).
 *
 * The socket side of a connection (struct ioconn) follows net/server.c's
 * single-threaded connection closely (the same TLS handshake budget, pending
 * list, sniffing, limits and stall cut); what differs is where frames go
 * (FRAMES messages) and where replies come from (WRITE messages).
 */
#include "iothread.h"

#include "proto.h"
#include "server.h"
#include "sock.h"
#include "spsc.h"
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RING_CAP 4096u     /* messages each way per thread */
#define RELAY_BYTES 65536u /* an HTTP relay's buffer each way */

struct iothr;

struct listener {
  ev_io io;
  ev_timer pause; /* accept paused (out of file descriptors) */
  int fd;
  struct kt_tls_ctx *tls; /* NULL: plain TCP only */
  bool also_plain;
  struct iothr *thr;
  struct listener *next;
};

/* A socket handed from the accepting thread (or a listener from the state
 * thread) to a thread, under its mu. */
struct handoff {
  struct handoff *next;
  struct listener *l; /* a listener for thread 0, or NULL: a connection */
  int fd;
  struct kt_tls_ctx *tls;
  bool also_plain;
  char peer[64];
};

struct ioconn {
  struct kt_ioconn_shared sh; /* first: what messages name */
  struct iothr *thr;
  struct kt_io io;
  int refs;        /* the owner's (until freed) + one per list it is on */
  bool also_plain; /* a TLS port that serves plaintext clients too */
  bool closed, reading, write_blocked, in_dirty, on_wait_list, on_pending, on_blocked;
  bool sniffed;    /* the first byte was looked at (HTTP or a native frame) */
  bool introduced; /* a message named it: the state thread knows it */
  uint64_t skip;   /* bytes of an oversized request still to drop */
  ev_io rio, wio;
  struct kt_buf in, out;
  ev_tstamp opened_at, last_progress;
  /* An HTTP request on this client port (/metrics, /health): the connection
   * stays on this thread and relays bytes to and from one end of a
   * socketpair (rfd) whose other end the state thread's HTTP endpoints
   * serve: in holds client bytes for them, out their bytes for the client
   * (each at most RELAY_BYTES). -1: a native connection. */
  int rfd;
  ev_io rrio, rwio;
  bool client_eof, http_eof, rfd_blocked, rfd_shut;
  struct ioconn *dirty_next, *wait_next, *pend_next, *block_next;
  struct ioconn *prev, *next; /* open connections, or zombies (closed, introduced) */
};

struct iothr {
  struct kt_iothreads *t;
  int idx;
  pthread_t th;
  bool started;
  /* ---- this thread's ---- */
  struct ev_loop *loop;
  ev_async wake;      /* the state thread (or the acceptor) has something */
  ev_prepare flush_w; /* end of a turn: writes, then publish to the state */
  ev_timer stall_w;
  ev_check turn_w; /* deferred handshakes and pending TLS bytes */
  ev_idle spin_w;  /* active while turn_w has work */
  ev_timer hs_w;   /* waiting handshakes: when the budget has time again */
  struct ioconn *conns, *zombies, *dirty, *pending, *blocked;
  struct ioconn *wait_head, *wait_tail;
  struct kt_iomsg *obox, *obox_tail; /* for the state, waiting for room in `in` */
  struct kt_tls_budget hs_budget;
  struct kt_warn_log warned;
  struct listener *listeners;
  unsigned rr; /* thread 0: the next thread to get a connection */
  bool accepting;
  /* ---- the state thread's ---- */
  struct kt_iomsg *sbox, *sbox_tail; /* for this thread, waiting for room in `out` */
  struct kt_iomsg *fan;              /* the WATCH message being filled (kt_iothreads_send_watch) */
  /* ---- shared ---- */
  struct kt_spsc in;  /* this thread -> state */
  struct kt_spsc out; /* state -> this thread */
  pthread_mutex_t mu; /* guards handoff */
  struct handoff *handoff;
  atomic_bool quit, stop_accepting;
  atomic_bool io_wants_room;    /* `in` was full: wake this thread when you take */
  atomic_bool state_wants_room; /* `out` was full: wake the state when you take */
  _Atomic uint64_t bytes_in, bytes_out;
  _Atomic size_t n_conns;
};

struct kt_iothreads {
  struct kt_iothreads_config cfg;
  atomic_bool http_on;
  struct iothr *thr;
};

struct kt_iomsg *kt_iomsg_new(uint8_t type, struct kt_ioconn_shared *sh, size_t len) {
  struct kt_iomsg *m = malloc(sizeof *m + len);
  kt_assert(m);
  m->next = NULL;
  m->type = type;
  m->ext = false;
  m->sh = sh;
  m->io.ops = NULL;
  m->io.ssl = NULL;
  m->io.fd = -1;
  m->p = m->data;
  m->len = 0;
  m->cap = len;
  m->reqs = NULL;
  m->n_reqs = m->next_req = 0;
  m->arena = (struct kt_arena){0};
  m->batch = NULL;
  m->targets = NULL;
  m->n_targets = m->cap_targets = 0;
  m->thread = sh ? sh->thread : -1;
  return m;
}

void kt_iomsg_free(struct kt_iomsg *m) {
  if (!m)
    return;
  if (m->ext)
    free(m->p);
  kt_arena_free(&m->arena);
  if (m->batch)
    kt_wbatch_unref(m->batch);
  free(m->targets);
  free(m);
}

/* ---- watch batches (any thread) ---- */

struct kt_wbatch *kt_wbatch_new(const struct kt_event *events, uint32_t n, bool fragment) {
  struct kt_buf b = {0};
  kt_proto_encode_watch_events(&b, events, n);
  struct kt_wbatch *w = malloc(sizeof *w + b.len);
  kt_assert(w);
  atomic_init(&w->refs, 1);
  w->n_events = n;
  w->fragment = fragment;
  w->len = b.len;
  memcpy(w->bytes, b.p, b.len);
  kt_buf_free(&b);
  return w;
}

void kt_wbatch_ref(struct kt_wbatch *b) {
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

/* acq_rel: the freeing thread sees every other thread's use of it done. */
void kt_wbatch_unref(struct kt_wbatch *b) {
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
    free(b);
}

/* ---- the thread's side ---- */

static void conn_close(struct ioconn *c, const char *why);

static void conn_ref(struct ioconn *c) { c->refs++; }

static void conn_unref(struct ioconn *c) {
  kt_assert(c->refs > 0);
  if (--c->refs == 0) {
    kt_buf_free(&c->in);
    kt_buf_free(&c->out);
    free(c);
  }
}

static void list_unlink(struct ioconn **head, struct ioconn *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    *head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void list_push(struct ioconn **head, struct ioconn *c) {
  c->prev = NULL;
  c->next = *head;
  if (*head)
    (*head)->prev = c;
  *head = c;
}

/* For the state thread, in order: into the ring unless older messages wait. */
static void to_state(struct iothr *thr, struct kt_iomsg *m) {
  if (!thr->obox && kt_spsc_push(&thr->in, m))
    return;
  KT_FIFO_PUSH(thr->obox, thr->obox_tail, m);
}

/* A warning about a connection, rate-limited per thread (kt_warn_conn). */
static void conn_warn(struct iothr *thr, const char *peer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_warn(struct iothr *thr, const char *peer, const char *fmt, ...) {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  kt_warn_conn(&thr->warned, ev_now(thr->loop), peer, why);
}

static void conn_arm(struct ioconn *c) {
  if (c->closed)
    return;
  int ev = c->on_wait_list ? 0 : kt_io_events(&c->io, c->reading, c->write_blocked);
  kt_sock_arm(c->thr->loop, &c->rio, &c->wio, ev);
}

static void kick(struct iothr *thr) {
  if (!ev_is_active(&thr->spin_w))
    ev_idle_start(thr->loop, &thr->spin_w);
}

static void hs_wake_later(struct iothr *thr) {
  double w = kt_tls_budget_wait_s(&thr->hs_budget);
  if (w <= 0) {
    kick(thr);
  } else if (!ev_is_active(&thr->hs_w)) {
    ev_timer_set(&thr->hs_w, w, 0);
    ev_timer_start(thr->loop, &thr->hs_w);
  }
}

static void mark_pending(struct ioconn *c) {
  if (c->on_pending || c->closed)
    return;
  c->on_pending = true;
  conn_ref(c);
  c->pend_next = c->thr->pending;
  c->thr->pending = c;
  kick(c->thr);
}

static void mark_dirty(struct ioconn *c) {
  if (c->in_dirty || c->closed)
    return;
  c->in_dirty = true;
  conn_ref(c);
  c->dirty_next = c->thr->dirty;
  c->thr->dirty = c;
}

static void set_reading(struct ioconn *c, bool on) {
  if (c->closed || c->reading == on)
    return;
  c->reading = on;
  conn_arm(c);
  if (on && kt_io_pending(&c->io))
    mark_pending(c);
}

/* The one rule for reading a connection: the member accepts, the handshake
 * is done, the state thread can take messages, and the replies not yet
 * written are under the soft limit. */
static void update_reading(struct ioconn *c) {
  if (c->closed || !kt_io_ready(&c->io) || c->rfd >= 0)
    return;
  set_reading(c, c->thr->accepting && !c->on_blocked &&
                     atomic_load_explicit(&c->sh.unsent, memory_order_relaxed) <= KT_CONN_OUT_SOFT);
}

/* Reply bytes this thread makes itself (errors) count as unsent too. */
static void out_error(struct ioconn *c, uint64_t id, int code, const char *msg) {
  size_t before = c->out.len;
  kt_proto_encode_error(&c->out, id, code, msg);
  atomic_fetch_add(&c->sh.unsent, c->out.len - before);
  mark_dirty(c);
}

/* Write as much of c->out as the socket takes. Returns false if closed. */
static bool conn_flush(struct ioconn *c) {
  if (!kt_io_ready(&c->io))
    return true;
  struct iothr *thr = c->thr;
  while (c->out.len) {
    struct kt_err e = {0};
    ssize_t w = kt_io_write(&c->io, c->out.p, c->out.len, &e);
    if (w > 0) {
      kt_buf_consume(&c->out, (size_t)w);
      atomic_fetch_sub(&c->sh.unsent, (size_t)w);
      atomic_fetch_add_explicit(&thr->bytes_out, (uint64_t)w, memory_order_relaxed);
      c->last_progress = ev_now(thr->loop);
      continue;
    }
    if (w == KT_IO_AGAIN) {
      if (!c->write_blocked) {
        c->write_blocked = true;
        conn_arm(c);
      }
      return true;
    }
    conn_close(c, e.msg);
    return false;
  }
  if (c->write_blocked) {
    c->write_blocked = false;
    conn_arm(c);
  }
  if (c->out.cap > 4 * KT_CONN_READ_CHUNK)
    kt_buf_free(&c->out);
  /* everything handed over is written: the state thread may be waiting */
  if (c->introduced && atomic_load(&c->sh.unsent) == 0 && atomic_load(&c->sh.want_drain) &&
      atomic_exchange(&c->sh.want_drain, false))
    to_state(thr, kt_iomsg_new(KT_IOM_DRAINED, &c->sh, 0));
  update_reading(c);
  return true;
}

static void conn_close(struct ioconn *c, const char *why) {
  if (c->closed)
    return;
  struct iothr *thr = c->thr;
  kt_log(KT_LOG_DEBUG, "server", "connection closed peer=%s reason=\"%s\"", c->sh.peer, why);
  c->closed = true;
  ev_io_stop(thr->loop, &c->rio);
  ev_io_stop(thr->loop, &c->wio);
  kt_io_close(&c->io);
  if (c->rfd >= 0) {
    ev_io_stop(thr->loop, &c->rrio);
    ev_io_stop(thr->loop, &c->rwio);
    close(c->rfd);
    c->rfd = -1;
  }
  list_unlink(&thr->conns, c);
  atomic_fetch_sub_explicit(&thr->n_conns, 1, memory_order_relaxed);
  kt_buf_free(&c->in);
  kt_buf_free(&c->out);
  if (c->introduced) { /* a zombie until the state thread's RELEASE */
    list_push(&thr->zombies, c);
    to_state(thr, kt_iomsg_new(KT_IOM_CLOSED, &c->sh, 0));
  } else {
    conn_unref(c); /* the owner's: nobody else names it */
  }
}

/* A fatal framing problem: the error, one write attempt, close. */
static void conn_fail(struct ioconn *c, uint64_t id, int code, const char *msg) {
  kt_log(KT_LOG_WARN, "server", "closing connection peer=%s code=%s reason=\"%s\"", c->sh.peer,
         kt_errname(code), msg);
  kt_proto_encode_error(&c->out, id, code, msg);
  struct kt_err e = {0};
  if (kt_io_ready(&c->io))
    (void)kt_io_write(&c->io, c->out.p, c->out.len, &e);
  conn_close(c, msg);
}

/* Whole frames p[0..n) for the state thread, in one message, each decoded
 * here into a struct kt_req (the state thread answers decoding errors). */
static void emit_frames(struct ioconn *c, const uint8_t *p, size_t n) {
  if (!n)
    return;
  uint32_t count = 0;
  for (size_t off = 0; off < n; off += KT_FRAME_HDR + (size_t)kt_get_u32be(p + off))
    count++;
  /* the frames, then the decoded requests, in one allocation; the arena is
   * for what a request needs beyond its struct (txn ops...), often nothing */
  size_t reqs_at = (n + 15) & ~(size_t)15;
  struct kt_iomsg *m =
      kt_iomsg_new(KT_IOM_FRAMES, &c->sh, reqs_at + (size_t)count * sizeof(struct kt_ioreq));
  memcpy(m->data, p, n);
  m->len = n;
  m->reqs = (struct kt_ioreq *)(void *)(m->data + reqs_at);
  size_t off = 0;
  for (uint32_t i = 0; i < count; i++) {
    struct kt_ioreq *r = &m->reqs[i];
    r->len = kt_get_u32be(m->data + off);
    r->body = m->data + off + KT_FRAME_HDR;
    off += KT_FRAME_HDR + (size_t)r->len;
    struct kt_err e;
    kt_err_clear(&e);
    r->rc = kt_proto_decode_req(r->body, r->len, &m->arena, &r->req, &e);
    r->err = r->rc && e.msg[0] ? kt_arena_dup(&m->arena, e.msg, strlen(e.msg) + 1) : NULL;
  }
  kt_assert(off == n);
  m->n_reqs = count;
  c->introduced = true;
  to_state(c->thr, m);
}

/* Split c->in into whole frames for the state thread; oversized requests are
 * answered here and skipped, a bad length prefix closes the connection (the
 * rules of net/server.h). */
static void conn_frames(struct ioconn *c) {
  struct kt_iothreads *t = c->thr->t;
  if (!c->introduced && !kt_io_is_tls(&c->io) && kt_tls_sniff(c->in.p, c->in.len) == 1) {
    conn_warn(c->thr, c->sh.peer,
              "a TLS handshake on a plaintext port (serve an https:// client URL for TLS "
              "clients)");
    conn_close(c, "TLS handshake on a plaintext port");
    return;
  }
  size_t off = 0, start = 0;
  while (!c->closed) {
    const uint8_t *body;
    uint32_t blen;
    size_t used;
    int r = kt_frame_next(c->in.p + off, c->in.len - off, t->cfg.max_frame, &body, &blen, &used);
    if (r == 0)
      break;
    if (r > 0) {
      off += used;
      continue;
    }
    uint32_t flen = c->in.len - off >= 4 ? kt_get_u32be(c->in.p + off) : 0;
    if (-r == KT_ETOOLARGE && flen <= KT_MAX_FRAME_BYTES) {
      uint8_t type;
      uint64_t id = 0;
      int pk = kt_proto_peek_id(c->in.p + off + KT_FRAME_HDR, c->in.len - off - KT_FRAME_HDR, &type,
                                &id);
      if (pk == 0 && c->in.len - off - KT_FRAME_HDR < flen)
        break; /* wait for the id bytes */
      emit_frames(c, c->in.p + start, off - start);
      if (pk != 1) {
        conn_fail(c, 0, KT_EPROTO, "oversized frame does not start like a request body");
        return;
      }
      char msg[128];
      snprintf(msg, sizeof msg,
               "request of %u bytes exceeds the largest request (--max-request-bytes + %u)", flen,
               KT_READ_EXTRA_BYTES);
      kt_log(KT_LOG_WARN, "server", "request too large peer=%s bytes=%u", c->sh.peer, flen);
      out_error(c, id, KT_ETOOLARGE, msg);
      uint64_t have = c->in.len - off, want = (uint64_t)KT_FRAME_HDR + flen;
      if (have >= want) {
        off += want;
        start = off;
        continue;
      }
      c->skip = want - have;
      kt_buf_consume(&c->in, c->in.len);
      return;
    }
    emit_frames(c, c->in.p + start, off - start);
    char msg[128];
    if (-r == KT_ETOOLARGE)
      snprintf(msg, sizeof msg, "frame of %u bytes exceeds the largest frame (%u bytes)", flen,
               KT_MAX_FRAME_BYTES);
    else
      snprintf(msg, sizeof msg, "malformed frame header (zero length)");
    conn_fail(c, 0, -r, msg);
    return;
  }
  if (c->closed)
    return;
  emit_frames(c, c->in.p + start, off - start);
  if (off)
    kt_buf_consume(&c->in, off);
}

/* The state thread cannot take more now: this connection waits. */
static void conn_block(struct ioconn *c) {
  if (c->on_blocked || c->closed)
    return;
  c->on_blocked = true;
  conn_ref(c);
  c->block_next = c->thr->blocked;
  c->thr->blocked = c;
  update_reading(c);
}

static void relay_pump(struct ioconn *c);

static void on_relay(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  struct ioconn *c = w->data;
  conn_ref(c);
  relay_pump(c);
  conn_unref(c);
}

/* The relay's watchers follow what each side can take. */
static void relay_arm(struct ioconn *c) {
  if (c->closed)
    return;
  c->reading = !c->client_eof && c->in.len < RELAY_BYTES;
  conn_arm(c);
  int ev = (!c->http_eof && c->out.len < RELAY_BYTES ? KT_IO_READ : 0) |
           (c->in.len && c->rfd_blocked ? KT_IO_WRITE : 0);
  kt_sock_arm(c->thr->loop, &c->rrio, &c->rwio, ev);
}

/* Move bytes both ways as far as they go: client bytes (c->in) to the
 * endpoints, theirs (c->out) to the client; the client's EOF is passed on
 * (shutdown), theirs ends the connection once its bytes are out. */
static void relay_pump(struct ioconn *c) {
  struct iothr *thr = c->thr;
  for (int round = 0; round < 16 && !c->closed; round++) {
    bool progress = false;
    if (c->in.len) {
      ssize_t w = send(c->rfd, c->in.p, c->in.len, MSG_NOSIGNAL);
      if (w > 0) {
        kt_buf_consume(&c->in, (size_t)w);
        progress = true;
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->rfd_blocked = true;
      } else {
        conn_close(c, "HTTP relay: the endpoints went away");
        return;
      }
      c->rfd_blocked = c->in.len > 0;
    }
    if (c->client_eof && !c->in.len && !c->rfd_shut) {
      shutdown(c->rfd, SHUT_WR);
      c->rfd_shut = true;
    }
    if (!c->http_eof && c->out.len < RELAY_BYTES) {
      kt_buf_reserve(&c->out, RELAY_BYTES - c->out.len);
      ssize_t r = recv(c->rfd, c->out.p + c->out.len, RELAY_BYTES - c->out.len, 0);
      if (r > 0) {
        c->out.len += (size_t)r;
        progress = true;
      } else if (r == 0) {
        c->http_eof = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        conn_close(c, "HTTP relay: the endpoints went away");
        return;
      }
    }
    while (c->out.len) {
      struct kt_err e = {0};
      ssize_t w = kt_io_write(&c->io, c->out.p, c->out.len, &e);
      if (w > 0) {
        kt_buf_consume(&c->out, (size_t)w);
        atomic_fetch_add_explicit(&thr->bytes_out, (uint64_t)w, memory_order_relaxed);
        c->last_progress = ev_now(thr->loop);
        progress = true;
        continue;
      }
      if (w != KT_IO_AGAIN) {
        conn_close(c, e.msg);
        return;
      }
      break;
    }
    c->write_blocked = c->out.len > 0;
    if (c->http_eof && !c->out.len) {
      conn_close(c, "HTTP relay done");
      return;
    }
    if (!progress)
      break;
  }
  relay_arm(c);
}

/* Client bytes for the endpoints (TLS: decrypted). */
static void relay_read_client(struct ioconn *c) {
  if (c->in.len < RELAY_BYTES && !c->client_eof) {
    kt_buf_reserve(&c->in, RELAY_BYTES - c->in.len);
    struct kt_err e = {0};
    ssize_t n = kt_io_read(&c->io, c->in.p + c->in.len, RELAY_BYTES - c->in.len, &e);
    if (n > 0) {
      c->in.len += (size_t)n;
      atomic_fetch_add_explicit(&c->thr->bytes_in, (uint64_t)n, memory_order_relaxed);
    } else if (n == 0) {
      c->client_eof = true;
    } else if (n != KT_IO_AGAIN) {
      conn_close(c, e.msg);
      return;
    }
  }
  relay_pump(c);
  if (!c->closed && c->reading && kt_io_pending(&c->io))
    mark_pending(c);
}

/* An HTTP request (net/server.c's conn_sniff_http, the same rule): a
 * socketpair's end goes to the state thread's HTTP endpoints (served there
 * as a plain connection), and this connection relays to the other end from
 * now on; what was read of it (TLS: decrypted) goes first. The client socket
 * never leaves this thread: another thread closing or reusing a descriptor
 * this loop's epoll still holds would race with it (libev leaves stopped
 * descriptors registered until an event shows they are gone). */
static bool conn_sniff_http(struct ioconn *c) {
  c->sniffed = true;
  struct kt_iothreads *t = c->thr->t;
  if (!atomic_load_explicit(&t->http_on, memory_order_acquire))
    return false;
  uint8_t b;
  if (kt_io_is_tls(&c->io)) {
    if (c->in.len == 0 || c->in.p[0] < 'A' || c->in.p[0] > 'Z')
      return false;
  } else if (c->in.len || recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1 || b < 'A' ||
             b > 'Z') {
    return false;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0) {
    conn_close(c, "an HTTP request, but no socketpair to relay it");
    return true;
  }
  struct kt_iomsg *m = kt_iomsg_new(KT_IOM_HTTP, NULL, 0);
  kt_io_init_plain(&m->io, sp[1]);
  to_state(c->thr, m);
  c->rfd = sp[0];
  ev_io_init(&c->rrio, on_relay, sp[0], EV_READ);
  ev_io_init(&c->rwio, on_relay, sp[0], EV_WRITE);
  c->rrio.data = c->rwio.data = c;
  kt_log(KT_LOG_DEBUG, "server", "HTTP request peer=%s: relayed to the HTTP endpoints", c->sh.peer);
  relay_pump(c);
  return true;
}

static void conn_read(struct ioconn *c) {
  struct iothr *thr = c->thr;
  if (c->rfd >= 0) {
    relay_read_client(c);
    return;
  }
  if (thr->obox) { /* the state thread's ring is full: read later */
    conn_block(c);
    return;
  }
  bool tls = kt_io_is_tls(&c->io);
  if (!c->sniffed && !tls && conn_sniff_http(c))
    return;
  kt_buf_reserve(&c->in, KT_CONN_READ_CHUNK);
  size_t got = 0;
  for (;;) {
    struct kt_err e = {0};
    ssize_t n = kt_io_read(&c->io, c->in.p + c->in.len, c->in.cap - c->in.len, &e);
    if (n == 0) {
      conn_close(c, "peer closed");
      return;
    }
    if (n == KT_IO_AGAIN)
      break;
    if (n < 0) {
      if (tls && e.code == KT_EPROTO)
        conn_warn(thr, c->sh.peer, "%s", e.msg);
      conn_close(c, e.msg);
      return;
    }
    c->in.len += (size_t)n;
    got += (size_t)n;
    if (!tls || got >= KT_CONN_READ_CHUNK || c->in.len == c->in.cap || !kt_io_pending(&c->io))
      break;
  }
  if (got == 0)
    return;
  if (!c->sniffed && conn_sniff_http(c))
    return; /* TLS: decrypted "GET /metrics ..." */
  atomic_fetch_add_explicit(&thr->bytes_in, got, memory_order_relaxed);
  if (c->skip) {
    size_t drop = c->in.len < c->skip ? c->in.len : (size_t)c->skip;
    kt_buf_consume(&c->in, drop);
    c->skip -= drop;
  }
  conn_frames(c);
  if (!c->closed && c->in.len == 0 && c->in.cap > 4 * KT_CONN_READ_CHUNK)
    kt_buf_free(&c->in);
  if (!c->closed && c->reading && kt_io_pending(&c->io))
    mark_pending(c);
}

static void conn_secured(struct ioconn *c) {
  char cn[256];
  if (kt_io_peer_cn(&c->io, cn, sizeof cn))
    snprintf(c->sh.cert_cn, sizeof c->sh.cert_cn, "%s", cn);
  c->sh.tls = kt_io_is_tls(&c->io);
  c->sh.tls_version = kt_io_version(&c->io);
  kt_log(KT_LOG_DEBUG, "server", "TLS handshake done peer=%s version=%s cert-cn=%s", c->sh.peer,
         c->sh.tls_version, c->sh.cert_cn[0] ? c->sh.cert_cn : "-");
  c->reading = false;
  update_reading(c);
  conn_arm(c);
}

static void conn_handshake(struct ioconn *c) {
  struct iothr *thr = c->thr;
  struct kt_err e = {0};
  ev_tstamp t0 = ev_time();
  int r = kt_io_handshake(&c->io, &e);
  kt_tls_budget_spent(&thr->hs_budget, ev_time() - t0);
  if (r == 1) {
    conn_secured(c);
    return;
  }
  if (r == KT_IO_AGAIN) {
    conn_arm(c);
    return;
  }
  if (r == KT_IO_PLAINTEXT && c->also_plain) {
    kt_io_to_plain(&c->io);
    conn_secured(c);
    return;
  }
  if (r == KT_IO_PLAINTEXT) {
    const char *msg = "this client URL serves TLS only: connect with TLS (an https:// endpoint, "
                      "--cacert)";
    conn_warn(thr, c->sh.peer, "a plaintext client on a TLS-only port (https:// client URL)");
    kt_io_to_plain(&c->io);
    kt_proto_encode_error(&c->out, 0, KT_EPROTO, msg);
    (void)kt_io_write(&c->io, c->out.p, c->out.len, &e);
    kt_io_close_refused(&c->io);
    conn_close(c, "plaintext client on a TLS port");
    return;
  }
  conn_warn(thr, c->sh.peer, "TLS handshake failed: %s", e.msg);
  conn_close(c, e.msg);
}

static void conn_handshake_or_wait(struct ioconn *c) {
  struct iothr *thr = c->thr;
  if (kt_tls_budget_room(&thr->hs_budget) && !c->on_wait_list) {
    conn_handshake(c);
    return;
  }
  if (c->on_wait_list)
    return;
  c->on_wait_list = true;
  conn_ref(c);
  c->wait_next = NULL;
  if (thr->wait_tail)
    thr->wait_tail->wait_next = c;
  else
    thr->wait_head = c;
  thr->wait_tail = c;
  conn_arm(c);
  hs_wake_later(thr);
}

static void conn_event(struct ioconn *c, int revents) {
  conn_ref(c);
  if (!kt_io_ready(&c->io)) {
    conn_handshake_or_wait(c);
  } else {
    int rd = kt_io_events(&c->io, true, false), wr = kt_io_events(&c->io, false, true);
    if (c->rfd >= 0 && (revents & wr))
      relay_pump(c);
    else if (c->write_blocked && (revents & wr))
      conn_flush(c);
    if (!c->closed && c->reading && (revents & rd))
      conn_read(c);
  }
  conn_unref(c);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  conn_event(w->data, KT_IO_READ);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  conn_event(w->data, KT_IO_WRITE);
}

static void conn_new(struct iothr *thr, int fd, const char *peer, struct kt_tls_ctx *tls,
                     bool also_plain) {
  struct ioconn *c = calloc(1, sizeof *c);
  kt_assert(c);
  struct kt_err e = {0};
  if (tls && kt_io_init_tls(&c->io, fd, tls, NULL, &e)) {
    kt_log(KT_LOG_WARN, "server", "connection from %s refused: %s", peer, e.msg);
    close(fd);
    free(c);
    return;
  }
  if (!tls)
    kt_io_init_plain(&c->io, fd);
  c->thr = thr;
  c->refs = 1;
  c->rfd = -1;
  c->also_plain = tls && also_plain;
  atomic_init(&c->sh.unsent, 0);
  atomic_init(&c->sh.want_drain, false);
  c->sh.thread = thr->idx;
  c->sh.tls_version = "plain";
  snprintf(c->sh.peer, sizeof c->sh.peer, "%s", peer);
  c->opened_at = c->last_progress = ev_now(thr->loop);
  ev_io_init(&c->rio, on_readable, fd, EV_READ);
  ev_io_init(&c->wio, on_writable, fd, EV_WRITE);
  c->rio.data = c->wio.data = c;
  list_push(&thr->conns, c);
  atomic_fetch_add_explicit(&thr->n_conns, 1, memory_order_relaxed);
  if (tls)
    conn_arm(c); /* the handshake first */
  else
    update_reading(c);
}

/* ---- the thread's loop ---- */

static void on_turn(struct ev_loop *loop, ev_check *w, int revents) {
  (void)revents;
  struct iothr *thr = w->data;
  while (thr->wait_head && kt_tls_budget_room(&thr->hs_budget)) {
    struct ioconn *c = thr->wait_head;
    thr->wait_head = c->wait_next;
    if (!thr->wait_head)
      thr->wait_tail = NULL;
    c->on_wait_list = false;
    if (!c->closed)
      conn_handshake(c);
    conn_unref(c);
  }
  struct ioconn *list = thr->pending;
  thr->pending = NULL;
  while (list) {
    struct ioconn *c = list;
    list = c->pend_next;
    c->on_pending = false;
    if (!c->closed && c->reading)
      conn_read(c);
    conn_unref(c);
  }
  bool spin = thr->pending != NULL;
  if (thr->wait_head) {
    if (kt_tls_budget_wait_s(&thr->hs_budget) <= 0)
      spin = true;
    else
      hs_wake_later(thr);
  }
  if (!spin && ev_is_active(&thr->spin_w))
    ev_idle_stop(loop, &thr->spin_w);
}

static void on_spin(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)loop, (void)w, (void)revents;
}

static void on_hs_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents;
}

static void unblock_all(struct iothr *thr) {
  struct ioconn *list = thr->blocked;
  thr->blocked = NULL;
  while (list) {
    struct ioconn *c = list;
    list = c->block_next;
    c->on_blocked = false;
    update_reading(c);
    conn_unref(c);
  }
}

/* End of a turn: one write per connection that got bytes, then what this
 * turn made for the state thread goes out with one wake-up. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)revents;
  struct iothr *thr = w->data;
  kt_tls_budget_turn(&thr->hs_budget, ev_time());
  while (thr->dirty) {
    struct ioconn *c = thr->dirty;
    thr->dirty = c->dirty_next;
    c->in_dirty = false;
    if (!c->closed)
      conn_flush(c);
    conn_unref(c);
  }
  KT_FIFO_FEED(&thr->in, thr->obox, thr->obox_tail);
  if (kt_spsc_publish(&thr->in))
    ev_async_send(thr->t->cfg.state_loop, thr->t->cfg.state_wake);
  if (thr->obox) {
    atomic_store(&thr->io_wants_room, true);
    if (kt_spsc_room(&thr->in))
      kick(thr); /* the state thread made room meanwhile: again next turn */
  } else if (thr->blocked) {
    unblock_all(thr);
  }
  (void)loop;
}

static void on_stall_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct iothr *thr = w->data;
  ev_tstamp now = ev_now(loop);
  struct ioconn *c = thr->conns;
  while (c) {
    struct ioconn *next = c->next;
    if (!kt_io_ready(&c->io) && now - c->opened_at > KT_TLS_HANDSHAKE_MS / 1000.0) {
      conn_warn(thr, c->sh.peer, "TLS handshake not done in %d s", KT_TLS_HANDSHAKE_MS / 1000);
      conn_close(c, "TLS handshake timed out");
    } else if (c->out.len && now - c->last_progress > KT_CONN_STALL_MS / 1000.0) {
      conn_close(c, "client not reading its replies");
    }
    c = next;
  }
}

static void accept_pause(struct listener *l) {
  ev_io_stop(l->thr->loop, &l->io);
  ev_timer_set(&l->pause, 0.1, 0);
  ev_timer_start(l->thr->loop, &l->pause);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  struct listener *l = w->data;
  struct iothr *thr = l->thr;
  struct kt_iothreads *t = thr->t;
  for (int i = 0; i < 64; i++) {
    char peer[64];
    int fd = kt_sock_accept(l->fd, peer, sizeof peer);
    if (fd < 0) {
      if (fd == -2 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
        kt_log(KT_LOG_WARN, "server", "accept failed: %s; not accepting for 100 ms",
               strerror(errno));
        accept_pause(l);
      } else if (fd == -2) {
        kt_log(KT_LOG_WARN, "server", "accept failed: %s", strerror(errno));
      }
      return;
    }
    if (kt_iothreads_conns(t) >= KT_MAX_CONNS) {
      close(fd);
      kt_log(KT_LOG_WARN, "server", "connection refused: %d connections open", KT_MAX_CONNS);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct iothr *to = &t->thr[thr->rr++ % (unsigned)t->cfg.n];
    if (to == thr) {
      conn_new(thr, fd, peer, l->tls, l->also_plain);
      continue;
    }
    struct handoff *h = calloc(1, sizeof *h);
    kt_assert(h);
    h->fd = fd;
    h->tls = l->tls;
    h->also_plain = l->also_plain;
    snprintf(h->peer, sizeof h->peer, "%s", peer);
    pthread_mutex_lock(&to->mu);
    h->next = to->handoff;
    to->handoff = h;
    pthread_mutex_unlock(&to->mu);
    ev_async_send(to->loop, &to->wake);
  }
}

static void on_accept_resume(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct listener *l = w->data;
  if (l->thr->accepting)
    ev_io_start(loop, &l->io);
}

static void stop_accepting_now(struct iothr *thr) {
  thr->accepting = false;
  for (struct listener *l = thr->listeners; l; l = l->next) {
    ev_io_stop(thr->loop, &l->io);
    ev_timer_stop(thr->loop, &l->pause);
  }
  for (struct ioconn *c = thr->conns; c; c = c->next)
    set_reading(c, false);
}

static void take_handoffs(struct iothr *thr) {
  pthread_mutex_lock(&thr->mu);
  struct handoff *h = thr->handoff;
  thr->handoff = NULL;
  pthread_mutex_unlock(&thr->mu);
  /* the list is newest first: serve the oldest first */
  struct handoff *rev = NULL;
  while (h) {
    struct handoff *next = h->next;
    h->next = rev;
    rev = h;
    h = next;
  }
  while (rev) {
    h = rev;
    rev = h->next;
    if (h->l) {
      struct listener *l = h->l;
      l->thr = thr;
      ev_io_init(&l->io, on_accept, l->fd, EV_READ);
      l->io.data = l;
      ev_timer_init(&l->pause, on_accept_resume, 0.1, 0);
      l->pause.data = l;
      l->next = thr->listeners;
      thr->listeners = l;
      if (thr->accepting)
        ev_io_start(thr->loop, &l->io);
    } else if (!thr->accepting) {
      close(h->fd);
    } else {
      conn_new(thr, h->fd, h->peer, h->tls, h->also_plain);
    }
    free(h);
  }
}

/* A message from the state thread. */
static void from_state(struct iothr *thr, struct kt_iomsg *m) {
  struct ioconn *c = (struct ioconn *)m->sh;
  switch (m->type) {
  case KT_IOM_WRITE:
    if (c->closed) { /* a zombie: the bytes have nowhere to go */
      kt_iomsg_free(m);
      return;
    }
    if (!c->out.len && m->ext) { /* adopt the buffer whole */
      kt_buf_free(&c->out);
      c->out = (struct kt_buf){.p = m->p, .len = m->len, .cap = m->cap};
      m->ext = false;
    } else {
      kt_buf_append(&c->out, m->p, m->len);
    }
    kt_iomsg_free(m);
    mark_dirty(c);
    update_reading(c);
    return;
  case KT_IOM_CLOSE:
    kt_iomsg_free(m);
    if (!c->closed) {
      struct kt_err e = {0};
      if (c->out.len && kt_io_ready(&c->io)) /* the last replies (an error): one attempt */
        (void)kt_io_write(&c->io, c->out.p, c->out.len, &e);
      conn_close(c, "closed by the server");
    }
    return;
  case KT_IOM_WATCH: /* one frame per watcher around the shared events */
    for (uint32_t i = 0; i < m->n_targets; i++) {
      const struct kt_wtarget *w = &m->targets[i];
      struct ioconn *wc = (struct ioconn *)w->sh;
      if (wc->closed)
        continue; /* a zombie: the frame has nowhere to go */
      size_t before = wc->out.len;
      kt_proto_encode_watch_frame(&wc->out, w->id, NULL, m->p, m->len, w->watch_id,
                                  m->batch->fragment, m->batch->bytes, m->batch->len);
      /* the state thread counted the events; the head is counted here */
      atomic_fetch_add(&wc->sh.unsent, wc->out.len - before - m->batch->len);
      mark_dirty(wc);
      update_reading(wc);
    }
    kt_iomsg_free(m);
    return;
  case KT_IOM_RELEASE:
    kt_iomsg_free(m);
    kt_assert(c->closed && c->introduced);
    list_unlink(&thr->zombies, c);
    conn_unref(c);
    return;
  default:
    kt_assert(!"unexpected message for an I/O thread");
  }
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)revents;
  struct iothr *thr = w->data;
  if (atomic_load(&thr->quit)) {
    ev_break(loop, EVBREAK_ALL);
    return;
  }
  if (thr->accepting && atomic_load(&thr->stop_accepting))
    stop_accepting_now(thr);
  take_handoffs(thr);
  struct kt_iomsg *m;
  bool any = false;
  while ((m = kt_spsc_pop(&thr->out))) {
    from_state(thr, m);
    any = true;
  }
  if (any) {
    kt_spsc_release(&thr->out);
    if (atomic_load_explicit(&thr->state_wants_room, memory_order_relaxed) &&
        atomic_exchange(&thr->state_wants_room, false))
      ev_async_send(thr->t->cfg.state_loop, thr->t->cfg.state_wake);
  }
}

static void *thr_main(void *arg) {
  struct iothr *thr = arg;
  char name[16];
  snprintf(name, sizeof name, "ketch-io-%d", thr->idx);
  pthread_setname_np(pthread_self(), name);
  ev_run(thr->loop, 0);
  return NULL;
}

struct kt_iothreads *kt_iothreads_start(const struct kt_iothreads_config *cfg, struct kt_err *e) {
  kt_assert(cfg->n >= 1);
  struct kt_iothreads *t = calloc(1, sizeof *t);
  kt_assert(t);
  t->cfg = *cfg;
  atomic_init(&t->http_on, false);
  t->thr = calloc((size_t)cfg->n, sizeof *t->thr);
  kt_assert(t->thr);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* signals go to the state thread */
  for (int i = 0; i < cfg->n; i++) {
    struct iothr *thr = &t->thr[i];
    thr->t = t;
    thr->idx = i;
    thr->accepting = true;
    thr->loop = ev_loop_new(EVFLAG_AUTO);
    kt_assert(thr->loop);
    kt_spsc_init(&thr->in, RING_CAP);
    kt_spsc_init(&thr->out, RING_CAP);
    pthread_mutex_init(&thr->mu, NULL);
    atomic_init(&thr->quit, false);
    atomic_init(&thr->stop_accepting, false);
    atomic_init(&thr->io_wants_room, false);
    atomic_init(&thr->state_wants_room, false);
    atomic_init(&thr->bytes_in, 0);
    atomic_init(&thr->bytes_out, 0);
    atomic_init(&thr->n_conns, 0);
    ev_async_init(&thr->wake, on_wake);
    thr->wake.data = thr;
    ev_async_start(thr->loop, &thr->wake);
    ev_prepare_init(&thr->flush_w, on_prepare);
    thr->flush_w.data = thr;
    ev_prepare_start(thr->loop, &thr->flush_w);
    ev_timer_init(&thr->stall_w, on_stall_timer, 1.0, 1.0);
    thr->stall_w.data = thr;
    ev_timer_start(thr->loop, &thr->stall_w);
    ev_check_init(&thr->turn_w, on_turn);
    thr->turn_w.data = thr;
    ev_check_start(thr->loop, &thr->turn_w);
    ev_idle_init(&thr->spin_w, on_spin);
    thr->spin_w.data = thr;
    ev_timer_init(&thr->hs_w, on_hs_timer, 0, 0);
    thr->hs_w.data = thr;
    int rc = pthread_create(&thr->th, NULL, thr_main, thr);
    if (rc) {
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      kt_err_set(e, KT_EIO, "cannot start I/O thread ketch-io-%d: %s", i, strerror(rc));
      t->cfg.n = i + 1; /* the threads set up so far: joined and freed */
      kt_iothreads_free(t);
      return NULL;
    }
    thr->started = true;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return t;
}

int kt_iothreads_count(const struct kt_iothreads *t) { return t->cfg.n; }

/* ---- the state thread's side ---- */

void kt_iothreads_set_http(struct kt_iothreads *t, bool on) {
  atomic_store_explicit(&t->http_on, on, memory_order_release);
}

void kt_iothreads_listen(struct kt_iothreads *t, int fd, struct kt_tls_ctx *tls, bool also_plain) {
  struct listener *l = calloc(1, sizeof *l);
  kt_assert(l);
  l->fd = fd;
  l->tls = tls;
  l->also_plain = tls && also_plain;
  struct handoff *h = calloc(1, sizeof *h);
  kt_assert(h);
  h->l = l;
  struct iothr *thr = &t->thr[0];
  pthread_mutex_lock(&thr->mu);
  h->next = thr->handoff;
  thr->handoff = h;
  pthread_mutex_unlock(&thr->mu);
  ev_async_send(thr->loop, &thr->wake);
}

struct kt_iomsg *kt_iothreads_take(struct kt_iothreads *t, int i) {
  return kt_spsc_pop(&t->thr[i].in);
}

void kt_iothreads_taken(struct kt_iothreads *t, int i) {
  struct iothr *thr = &t->thr[i];
  kt_spsc_release(&thr->in);
  if (atomic_load_explicit(&thr->io_wants_room, memory_order_relaxed) &&
      atomic_exchange(&thr->io_wants_room, false))
    ev_async_send(thr->loop, &thr->wake);
}

static void queue_out(struct iothr *thr, struct kt_iomsg *m) {
  if (!thr->sbox && kt_spsc_push(&thr->out, m))
    return;
  KT_FIFO_PUSH(thr->sbox, thr->sbox_tail, m);
}

/* The WATCH message being filled goes out before anything newer. */
static void fan_close(struct iothr *thr) {
  if (!thr->fan)
    return;
  queue_out(thr, thr->fan);
  thr->fan = NULL;
}

void kt_iothreads_send(struct kt_iothreads *t, struct kt_iomsg *m) {
  struct iothr *thr = &t->thr[m->thread];
  fan_close(thr);
  queue_out(thr, m);
}

static bool header_eq(const struct kt_header *a, const struct kt_header *b) {
  return a->cluster_id == b->cluster_id && a->member_id == b->member_id &&
         a->revision == b->revision && a->raft_term == b->raft_term;
}

void kt_iothreads_send_watch(struct kt_iothreads *t, struct kt_ioconn_shared *sh,
                             struct kt_wbatch *b, const struct kt_header *h, uint64_t id,
                             int64_t watch_id) {
  struct iothr *thr = &t->thr[sh->thread];
  struct kt_iomsg *m = thr->fan;
  if (m && (m->batch != b || !header_eq(&m->hdr, h))) {
    fan_close(thr);
    m = NULL;
  }
  if (!m) {
    struct kt_buf head = {0}; /* the frames' header field, encoded once */
    kt_proto_encode_watch_header(&head, h);
    m = thr->fan = kt_iomsg_new(KT_IOM_WATCH, NULL, head.len);
    memcpy(m->data, head.p, head.len);
    m->len = head.len;
    kt_buf_free(&head);
    m->thread = sh->thread;
    kt_wbatch_ref(b);
    m->batch = b;
    m->hdr = *h;
  }
  if (m->n_targets == m->cap_targets) {
    m->cap_targets = m->cap_targets ? 2 * m->cap_targets : 16;
    m->targets = realloc(m->targets, m->cap_targets * sizeof *m->targets);
    kt_assert(m->targets);
  }
  m->targets[m->n_targets++] = (struct kt_wtarget){.sh = sh, .id = id, .watch_id = watch_id};
}

void kt_iothreads_publish(struct kt_iothreads *t) {
  for (int i = 0; i < t->cfg.n; i++) {
    struct iothr *thr = &t->thr[i];
    fan_close(thr);
    KT_FIFO_FEED(&thr->out, thr->sbox, thr->sbox_tail);
    if (kt_spsc_publish(&thr->out))
      ev_async_send(thr->loop, &thr->wake);
    if (thr->sbox) {
      atomic_store(&thr->state_wants_room, true);
      if (kt_spsc_room(&thr->out)) /* room appeared meanwhile: come back next turn */
        ev_async_send(t->cfg.state_loop, t->cfg.state_wake);
    }
  }
}

void kt_iothreads_stop_accepting(struct kt_iothreads *t) {
  for (int i = 0; i < t->cfg.n; i++) {
    atomic_store(&t->thr[i].stop_accepting, true);
    ev_async_send(t->thr[i].loop, &t->thr[i].wake);
  }
}

size_t kt_iothreads_conns(const struct kt_iothreads *t) {
  size_t n = 0;
  for (int i = 0; i < t->cfg.n; i++)
    n += atomic_load_explicit(&t->thr[i].n_conns, memory_order_relaxed);
  return n;
}

void kt_iothreads_bytes(const struct kt_iothreads *t, uint64_t *in, uint64_t *out) {
  *in = *out = 0;
  for (int i = 0; i < t->cfg.n; i++) {
    *in += atomic_load_explicit(&t->thr[i].bytes_in, memory_order_relaxed);
    *out += atomic_load_explicit(&t->thr[i].bytes_out, memory_order_relaxed);
  }
}

void kt_iothreads_join(struct kt_iothreads *t) {
  for (int i = 0; i < t->cfg.n; i++) {
    struct iothr *thr = &t->thr[i];
    if (!thr->started)
      continue;
    atomic_store(&thr->quit, true);
    ev_async_send(thr->loop, &thr->wake);
    pthread_join(thr->th, NULL);
    thr->started = false;
  }
}

static void free_msg(struct kt_iomsg *m) {
  if (m->type == KT_IOM_HTTP)
    kt_io_close(&m->io);
  kt_iomsg_free(m);
}

static void free_msgs(struct kt_spsc *q, struct kt_iomsg *box) {
  kt_spsc_publish(q); /* the producer is gone: what it pushed is ours */
  struct kt_iomsg *m;
  while ((m = kt_spsc_pop(q)))
    free_msg(m);
  while (box) {
    m = box;
    box = m->next;
    free_msg(m);
  }
}

/* After the join: the references the thread's lists hold. */
static void drop_lists(struct iothr *thr) {
  while (thr->dirty) {
    struct ioconn *c = thr->dirty;
    thr->dirty = c->dirty_next;
    conn_unref(c);
  }
  while (thr->pending) {
    struct ioconn *c = thr->pending;
    thr->pending = c->pend_next;
    conn_unref(c);
  }
  while (thr->blocked) {
    struct ioconn *c = thr->blocked;
    thr->blocked = c->block_next;
    conn_unref(c);
  }
  while (thr->wait_head) {
    struct ioconn *c = thr->wait_head;
    thr->wait_head = c->wait_next;
    conn_unref(c);
  }
  thr->wait_tail = NULL;
}

/* The open connections and the zombies: only their owner's reference is
 * left. */
static void free_conns(struct iothr *thr, struct ioconn *list) {
  while (list) {
    struct ioconn *c = list;
    list = c->next;
    if (!c->closed) {
      ev_io_stop(thr->loop, &c->rio);
      ev_io_stop(thr->loop, &c->wio);
      kt_io_close(&c->io);
      if (c->rfd >= 0) {
        ev_io_stop(thr->loop, &c->rrio);
        ev_io_stop(thr->loop, &c->rwio);
        close(c->rfd);
      }
    }
    kt_buf_free(&c->in);
    kt_buf_free(&c->out);
    free(c);
  }
}

void kt_iothreads_free(struct kt_iothreads *t) {
  if (!t)
    return;
  kt_iothreads_join(t);
  for (int i = 0; i < t->cfg.n; i++) {
    struct iothr *thr = &t->thr[i];
    free_msgs(&thr->in, thr->obox);
    fan_close(thr);
    free_msgs(&thr->out, thr->sbox);
    drop_lists(thr);
    free_conns(thr, thr->conns);
    free_conns(thr, thr->zombies);
    while (thr->handoff) {
      struct handoff *h = thr->handoff;
      thr->handoff = h->next;
      if (h->l) {
        close(h->l->fd);
        free(h->l);
      } else {
        close(h->fd);
      }
      free(h);
    }
    while (thr->listeners) {
      struct listener *l = thr->listeners;
      thr->listeners = l->next;
      ev_io_stop(thr->loop, &l->io);
      ev_timer_stop(thr->loop, &l->pause);
      close(l->fd);
      free(l);
    }
    ev_loop_destroy(thr->loop);
    kt_spsc_free(&thr->in);
    kt_spsc_free(&thr->out);
    pthread_mutex_destroy(&thr->mu);
  }
  free(t->thr);
  free(t);
}
