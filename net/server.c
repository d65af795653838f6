/* net/server.c — see server.h. */
#include "server.h"

#include "iothread.h"
#include "spsc.h"
#include "sock.h"
#include "tls.h"

#include "../core/auth.h"
#include "../core/mvcc.h"

#include <errno.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct kt_conn {
  struct kt_server *srv;
  struct kt_listener *l; /* accepted by */
  struct kt_io io;       /* the socket, plain TCP or TLS */
  int refs;
  bool closed, hello_done, reading, in_dirty_list;
  bool write_blocked; /* output left that the socket did not take */
  bool want_drain;    /* call cfg.on_drained once the output is written out */
  bool on_wait_list;  /* handshake waiting for a turn with room (hs_wait) */
  bool on_pending;    /* TLS holds bytes no poll event announces (pending) */
  bool sniffed;       /* the first byte was looked at (HTTP or a native frame) */
  void *udata;        /* the handler's per-connection state */
  char *cert_cn;      /* verified client certificate's CN, or NULL */
  char *identity;     /* a proxy's caller named in HELLO, or NULL */
  uint64_t skip;      /* bytes of an oversized request still to drop */
  ev_io rio, wio;
  struct kt_buf in, out;
  ev_tstamp opened_at;     /* accept time (for the handshake deadline) */
  ev_tstamp last_progress; /* last time output drained (for the stall cut) */
  struct kt_conn *dirty_next;
  struct kt_conn *wait_next, *pend_next;
  struct kt_conn *prev, *next; /* all open connections */
  char peer[64];
  /* AUTHENTICATE's outcome (kt_conn_set_user): the user, and the auth
   * revision it authenticated at; user_len 0: none */
  char user[KT_CONN_USER_MAX + 1];
  uint32_t user_len;
  uint64_t user_rev;
  char token[KT_CONN_TOKEN_MAX]; /* kt_conn_set_token */
  uint32_t token_len;
  int64_t token_expires_ms, token_checked_ms;
  struct kt_auth_grant grants[2]; /* kt_conn_grants */
  /* With I/O threads (net/THREADS.md): the socket side's shared part, and
   * nothing above from io to wio is used; c->out holds the replies encoded
   * this turn, handed to the I/O thread at its end. NULL: this struct owns
   * the socket (--io-threads 0). */
  struct kt_ioconn_shared *sh;
  bool threaded;    /* sh was set (it is NULL again once RELEASE went) */
  bool node_drain;  /* the handler asked kt_conn_want_drain */
  bool frames_wait; /* held frames wait for the output to drain */
  bool drain_due;   /* found drained: handle it at the end of the turn */
  bool tls;         /* a TLS connection (kt_conn_is_tls) */
  const char *tls_version;
  struct kt_iomsg *held, *held_tail; /* FRAMES not handled yet (backpressure), in order */
};

struct kt_listener {
  ev_io io;
  ev_timer pause; /* accept paused (out of file descriptors) */
  int fd;
  struct kt_tls_ctx *tls; /* NULL: plain TCP only */
  bool also_plain;        /* with tls: plaintext clients too */
  struct kt_server *srv;
  struct kt_listener *next;
};

struct kt_server {
  struct ev_loop *loop;
  struct kt_server_config cfg;
  struct kt_listener *listeners;
  struct kt_conn *conns;
  size_t n_conns;
  struct kt_conn *dirty;
  ev_prepare flush_w;
  ev_timer stall_w;
  ev_check turn_w;                       /* deferred handshakes and pending TLS bytes */
  ev_idle spin_w;                        /* active while turn_w has work: the loop does not sleep */
  ev_timer hs_w;                         /* waiting handshakes: when the budget has time again */
  struct kt_conn *wait_head, *wait_tail; /* handshakes deferred (FIFO) */
  struct kt_conn *pending;               /* TLS bytes to read */
  struct kt_tls_budget hs_budget;        /* handshake steps per turn, share of the time */
  struct kt_warn_log warned;
  struct kt_arena arena;
  uint64_t bytes_in, bytes_out; /* client bytes (after TLS), for /metrics */
  kt_server_http_fn on_http;    /* kt_server_set_http */
  void *http_arg;
  bool accepting;
  /* --io-threads N > 0: the threads, and the wake-up they send when they
   * published messages for this (the state) thread */
  struct kt_iothreads *iot;
  ev_async io_wake;
  struct kt_conn *tconns; /* connections the I/O threads told about, until CLOSED */
};

static void conn_close(struct kt_conn *c, const char *why);
static void st_close(struct kt_conn *c, const char *why, bool flush);
static void st_arm_drain(struct kt_conn *c);

static void conn_free(struct kt_conn *c) {
  while (c->held) {
    struct kt_iomsg *m = c->held;
    c->held = m->next;
    kt_iomsg_free(m);
  }
  kt_buf_free(&c->in);
  kt_buf_free(&c->out);
  free(c->cert_cn);
  free(c->identity);
  free(c);
}

/* A warning about a connection, rate-limited (kt_warn_conn). */
static void conn_warn(struct kt_server *s, const char *peer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_warn(struct kt_server *s, const char *peer, const char *fmt, ...) {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  kt_warn_conn(&s->warned, ev_now(s->loop), peer, why);
}

/* The one place that decides which events a connection waits for. */
static void conn_arm(struct kt_conn *c) {
  if (c->closed)
    return;
  int ev = c->on_wait_list ? 0 : kt_io_events(&c->io, c->reading, c->write_blocked);
  kt_sock_arm(c->srv->loop, &c->rio, &c->wio, ev);
}

static void kick(struct kt_server *s) {
  if (!ev_is_active(&s->spin_w))
    ev_idle_start(s->loop, &s->spin_w);
}

/* Handshakes wait: at the next turn if only its step count is spent (the
 * loop keeps turning), else when the time budget has credit again (the loop
 * may sleep until then). */
static void hs_wake_later(struct kt_server *s) {
  double w = kt_tls_budget_wait_s(&s->hs_budget);
  if (w <= 0) {
    kick(s);
  } else if (!ev_is_active(&s->hs_w)) {
    ev_timer_set(&s->hs_w, w, 0);
    ev_timer_start(s->loop, &s->hs_w);
  }
}

/* TLS read ahead bytes no poll event will announce: read them this turn. */
static void mark_pending(struct kt_conn *c) {
  if (c->on_pending || c->closed)
    return;
  c->on_pending = true;
  kt_conn_ref(c);
  c->pend_next = c->srv->pending;
  c->srv->pending = c;
  kick(c->srv);
}

void kt_conn_ref(struct kt_conn *c) { c->refs++; }

void kt_conn_unref(struct kt_conn *c) {
  kt_assert(c->refs > 0);
  if (--c->refs == 0)
    conn_free(c);
}

bool kt_conn_open(const struct kt_conn *c) { return !c->closed; }

struct kt_buf *kt_conn_out(struct kt_conn *c) {
  return c->closed ? NULL : &c->out;
}

static void mark_dirty(struct kt_conn *c) {
  if (c->in_dirty_list || c->closed)
    return;
  c->in_dirty_list = true;
  kt_conn_ref(c);
  c->dirty_next = c->srv->dirty;
  c->srv->dirty = c;
}

static void set_reading(struct kt_conn *c, bool on) {
  if (c->closed || c->reading == on)
    return;
  c->reading = on;
  conn_arm(c);
  if (on && kt_io_pending(&c->io))
    mark_pending(c);
}

void kt_conn_sent(struct kt_conn *c) {
  if (c->closed)
    return;
  if (c->threaded) { /* the I/O thread stops reading above the soft limit */
    if (c->out.len + atomic_load_explicit(&c->sh->unsent, memory_order_relaxed) >
        KT_CONN_OUT_HARD) {
      st_close(c, "output buffer over hard limit (client not reading)", false);
      return;
    }
    mark_dirty(c);
    return;
  }
  if (c->out.len > KT_CONN_OUT_HARD) {
    conn_close(c, "output buffer over hard limit (client not reading)");
    return;
  }
  if (c->out.len > KT_CONN_OUT_SOFT)
    set_reading(c, false);
  mark_dirty(c);
}

size_t kt_conn_unsent(const struct kt_conn *c) {
  if (c->closed)
    return 0;
  return c->out.len + (c->threaded ? atomic_load(&c->sh->unsent) : 0);
}

void kt_conn_want_drain(struct kt_conn *c) {
  if (!c->threaded) {
    c->want_drain = true;
    return;
  }
  if (c->closed)
    return;
  c->node_drain = true;
  st_arm_drain(c);
}
void kt_conn_set_user(struct kt_conn *c, struct kt_bytes user, uint64_t auth_revision) {
  c->user_len = user.n <= KT_CONN_USER_MAX ? user.n : 0;
  if (c->user_len)
    memcpy(c->user, user.p, c->user_len);
  c->user[c->user_len] = 0;
  c->user_rev = auth_revision;
  c->token_len = 0;
  c->token_expires_ms = c->token_checked_ms = 0;
  c->grants[0].stamp = c->grants[1].stamp = 0;
}

struct kt_auth_grant *kt_conn_grants(struct kt_conn *c) {
  return c->grants;
}

void kt_conn_set_token(struct kt_conn *c, struct kt_bytes simple, int64_t expires_ms) {
  c->token_len = simple.n <= KT_CONN_TOKEN_MAX ? simple.n : 0;
  if (c->token_len)
    memcpy(c->token, simple.p, c->token_len);
  c->token_expires_ms = expires_ms;
  c->token_checked_ms = 0;
}

int64_t kt_conn_token_checked(const struct kt_conn *c) { return c->token_checked_ms; }
void kt_conn_set_token_checked(struct kt_conn *c, int64_t ms) { c->token_checked_ms = ms; }

void kt_conn_token(const struct kt_conn *c, struct kt_bytes *simple, int64_t *expires_ms) {
  *simple = (struct kt_bytes){(const uint8_t *)c->token, c->token_len};
  *expires_ms = c->token_expires_ms;
}

bool kt_conn_user(const struct kt_conn *c, struct kt_bytes *user, uint64_t *auth_revision) {
  if (!c->user_len)
    return false;
  *user = (struct kt_bytes){(const uint8_t *)c->user, c->user_len};
  *auth_revision = c->user_rev;
  return true;
}

void *kt_conn_udata(const struct kt_conn *c) { return c->udata; }
const char *kt_conn_identity(const struct kt_conn *c) {
  return c->identity ? c->identity : c->cert_cn;
}
void kt_conn_set_udata(struct kt_conn *c, void *udata) { c->udata = udata; }

void kt_conn_send_resp(struct kt_conn *c, const struct kt_resp *r) {
  struct kt_buf *b = kt_conn_out(c);
  if (!b)
    return;
  kt_proto_encode_resp(b, r);
  kt_conn_sent(c);
}

static void st_hand_out(struct kt_conn *c);

void kt_conn_send_watch_batch(struct kt_conn *c, uint64_t id, const struct kt_header *h,
                              int64_t watch_id, struct kt_wbatch *b) {
  if (c->closed)
    return;
  if (!c->threaded) {
    kt_proto_encode_watch_frame(&c->out, id, h, NULL, 0, watch_id, b->fragment, b->bytes, b->len);
    kt_conn_sent(c);
    return;
  }
  if (c->out.len + atomic_load_explicit(&c->sh->unsent, memory_order_relaxed) + b->len >
      KT_CONN_OUT_HARD) {
    st_close(c, "output buffer over hard limit (client not reading)", false);
    return;
  }
  st_hand_out(c); /* what was encoded for c before goes first */
  atomic_fetch_add(&c->sh->unsent, b->len);
  kt_iothreads_send_watch(c->srv->iot, c->sh, b, h, id, watch_id);
}

void kt_conn_send_error(struct kt_conn *c, uint64_t id, int code, const char *msg) {
  struct kt_buf *b = kt_conn_out(c);
  if (!b)
    return;
  kt_proto_encode_error(b, id, code, msg ? msg : kt_strerror(code));
  kt_conn_sent(c);
}

/* Write as much of c->out as the socket takes. Returns false if closed. */
static bool conn_flush(struct kt_conn *c) {
  if (!kt_io_ready(&c->io))
    return true; /* handshake first: the output waits */
  while (c->out.len) {
    struct kt_err e = {0};
    ssize_t w = kt_io_write(&c->io, c->out.p, c->out.len, &e);
    if (w > 0) {
      kt_buf_consume(&c->out, (size_t)w);
      c->srv->bytes_out += (size_t)w;
      c->last_progress = ev_now(c->srv->loop);
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
  if (c->want_drain && c->srv->cfg.on_drained) {
    c->want_drain = false;
    c->srv->cfg.on_drained(c->srv->cfg.arg, c);
    if (c->closed)
      return false;
    if (c->out.len)
      return true; /* refilled: mark_dirty flushes it this turn */
  }
  /* Output drained: release the read backpressure. Give the buffer back if
   * a large response made it big. */
  if (c->out.cap > 4 * KT_CONN_READ_CHUNK) {
    kt_buf_free(&c->out);
  }
  if (c->srv->accepting)
    set_reading(c, true);
  return true;
}

static void conn_close(struct kt_conn *c, const char *why) {
  if (c->threaded) {
    st_close(c, why, false);
    return;
  }
  if (c->closed)
    return;
  struct kt_server *s = c->srv;
  kt_log(KT_LOG_DEBUG, "server", "connection closed peer=%s reason=\"%s\"", c->peer, why);
  c->closed = true;
  if (c->udata && s->cfg.on_close)
    s->cfg.on_close(s->cfg.arg, c);
  ev_io_stop(s->loop, &c->rio);
  ev_io_stop(s->loop, &c->wio);
  kt_io_close(&c->io);
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->n_conns--;
  kt_buf_free(&c->in);
  kt_buf_free(&c->out);
  kt_conn_unref(c); /* the server's own reference */
}

/* Answer a fatal frame problem and close after flushing what we can. */
static void conn_fail(struct kt_conn *c, uint64_t id, int code, const char *msg) {
  kt_log(KT_LOG_WARN, "server", "closing connection peer=%s code=%s reason=\"%s\"", c->peer,
         kt_errname(code), msg);
  kt_proto_encode_error(&c->out, id, code, msg);
  if (c->threaded) { /* the error, then CLOSE: the I/O thread writes once and closes */
    st_close(c, msg, true);
    return;
  }
  /* Best effort: one flush attempt, then close. */
  struct kt_err e = {0};
  if (kt_io_ready(&c->io))
    (void)kt_io_write(&c->io, c->out.p, c->out.len, &e);
  conn_close(c, msg);
}

static void handle_hello(struct kt_conn *c, const struct kt_req *req) {
  struct kt_server *s = c->srv;
  if (c->hello_done) {
    conn_fail(c, req->id, KT_EPROTO, "HELLO sent twice");
    return;
  }
  if (req->u.hello.version != KT_PROTO_VERSION) {
    char msg[96];
    snprintf(msg, sizeof msg, "unsupported protocol version %u (server speaks %u)",
             req->u.hello.version, KT_PROTO_VERSION);
    conn_fail(c, req->id, KT_EVERSION, msg);
    return;
  }
  if (req->u.hello.identity.n) {
    /* A proxy (ketch-grpc) names the caller it verified. Believed only from a
     * connection that itself presented a verified client certificate. */
    if (!c->cert_cn) {
      conn_fail(c, req->id, KT_EINVAL,
                "HELLO names an identity but this connection presented no verified client "
                "certificate");
      return;
    }
    c->identity = strndup((const char *)req->u.hello.identity.p, req->u.hello.identity.n);
    kt_assert(c->identity);
  }
  c->hello_done = true;
  if (c->threaded ? c->tls : kt_io_is_tls(&c->io))
    kt_log(KT_LOG_DEBUG, "server", "client hello peer=%s tls=%s cert-cn=%s identity=%s", c->peer,
           c->threaded ? c->tls_version : kt_io_version(&c->io), c->cert_cn ? c->cert_cn : "-",
           kt_conn_identity(c) ? kt_conn_identity(c) : "-");
  static const char server_name[] = "ketch " KT_VERSION;
  struct kt_resp r = {.type = KT_MSG_HELLO, .id = req->id};
  r.u.hello.version = KT_PROTO_VERSION;
  r.u.hello.server = (struct kt_bytes){(const uint8_t *)server_name, sizeof server_name - 1};
  r.u.hello.cluster_id = s->cfg.cluster_id;
  r.u.hello.member_id = s->cfg.member_id;
  r.u.hello.max_request_bytes = s->cfg.max_request_bytes + KT_READ_EXTRA_BYTES;
  kt_proto_encode_resp(&c->out, &r);
  kt_conn_sent(c);
}

/* What the node proposes through the log (etcd's proposals): these are held
 * to --max-request-bytes; reads, watches and other local or read-index
 * requests only to the receive limit, as etcd's gRPC server. */
static bool proposes(const struct kt_req *req) {
  switch (req->type) {
  case KT_MSG_RANGE:
  case KT_MSG_STATUS:
  case KT_MSG_WATCH_CREATE:
  case KT_MSG_WATCH_CANCEL:
  case KT_MSG_WATCH_PROGRESS:
  case KT_MSG_AUTH_CHECK:
  case KT_MSG_LEASE_KEEPALIVE:
  case KT_MSG_LEASE_TTL:
  case KT_MSG_LEASE_LEASES:
  case KT_MSG_MEMBER_LIST:
  case KT_MSG_MOVE_LEADER:
  case KT_MSG_DEFRAGMENT:
  case KT_MSG_HASH_KV:
  case KT_MSG_SNAPSHOT:
  case KT_MSG_LEADER:
  case KT_MSG_OBSERVE:
    return false;
  case KT_MSG_TXN:
    return kt_mvcc_op_writes(&req->u.op);
  case KT_MSG_ALARM:
    return req->u.alarm.action != KT_ALARM_GET;
  default:
    return true;
  }
}

/* A request decoded (here, or on an I/O thread) with the decoder's outcome
 * rc and message: errors answered, the HELLO and limit checks of server.h,
 * then the handler. */
static void handle_req(struct kt_conn *c, const struct kt_req *req, int rc, const char *errmsg,
                       const uint8_t *body, uint32_t blen) {
  struct kt_server *s = c->srv;
  if (rc) {
    errmsg = errmsg && errmsg[0] ? errmsg : kt_strerror(rc);
    if (rc == KT_EUNSUPPORTED && c->hello_done)
      kt_conn_send_error(c, req->id, rc, errmsg);
    else if (rc == KT_EPROTO || !c->hello_done)
      conn_fail(c, req->id, rc, errmsg);
    else
      kt_conn_send_error(c, req->id, rc, errmsg);
    return;
  }
  if (req->type == KT_MSG_HELLO) {
    handle_hello(c, req);
    return;
  }
  if (!c->hello_done) {
    conn_fail(c, req->id, KT_EPROTO, "first request must be HELLO");
    return;
  }
  if (blen > s->cfg.max_request_bytes && proposes(req)) {
    char msg[128];
    snprintf(msg, sizeof msg, "request of %u bytes exceeds --max-request-bytes (%u)", blen,
             s->cfg.max_request_bytes);
    kt_log(KT_LOG_WARN, "server", "request too large peer=%s bytes=%u", c->peer, blen);
    kt_conn_send_error(c, req->id, KT_ETOOLARGE, msg);
    return;
  }
  s->cfg.on_request(s->cfg.arg, c, req, body, blen);
}

/* One whole request frame's body, decoded here (--io-threads 0). */
static void handle_frame(struct kt_conn *c, const uint8_t *body, uint32_t blen) {
  struct kt_server *s = c->srv;
  struct kt_req req;
  struct kt_err err;
  kt_err_clear(&err);
  kt_arena_reset(&s->arena);
  int rc = kt_proto_decode_req(body, blen, &s->arena, &req, &err);
  handle_req(c, &req, rc, err.msg, body, blen);
}

/* Decode and dispatch every whole frame in c->in. */
static void conn_process(struct kt_conn *c) {
  struct kt_server *s = c->srv;
  size_t off = 0;
  uint32_t max_frame = s->cfg.max_request_bytes + KT_READ_EXTRA_BYTES;
  kt_conn_ref(c);
  if (!c->hello_done && off == 0 && !kt_io_is_tls(&c->io) &&
      kt_tls_sniff(c->in.p, c->in.len) == 1) {
    conn_warn(s, c->peer,
              "a TLS handshake on a plaintext port (serve an https:// client URL for TLS "
              "clients)");
    conn_close(c, "TLS handshake on a plaintext port");
    kt_conn_unref(c);
    return;
  }
  while (!c->closed && c->reading) {
    const uint8_t *body;
    uint32_t blen;
    size_t used;
    int r = kt_frame_next(c->in.p + off, c->in.len - off, max_frame, &body, &blen, &used);
    if (r == 0)
      break;
    if (r < 0) {
      uint32_t flen = c->in.len - off >= 4 ? kt_get_u32be(c->in.p + off) : 0;
      if (-r == KT_ETOOLARGE && flen <= KT_MAX_FRAME_BYTES) {
        /* Over --max-request-bytes but a legal frame: answer ETOOLARGE with
         * the request's id (the first bytes of the body) and skip the body
         * without buffering it; the connection stays open. */
        uint8_t type;
        uint64_t id = 0;
        int pk = kt_proto_peek_id(c->in.p + off + KT_FRAME_HDR, c->in.len - off - KT_FRAME_HDR,
                                  &type, &id);
        if (pk == 0 && c->in.len - off - KT_FRAME_HDR < flen)
          break; /* wait for the id bytes */
        if (pk != 1) {
          conn_fail(c, 0, KT_EPROTO, "oversized frame does not start like a request body");
          break;
        }
        char msg[128];
        snprintf(msg, sizeof msg,
                 "request of %u bytes exceeds the largest request (--max-request-bytes + %u)", flen,
                 KT_READ_EXTRA_BYTES);
        kt_log(KT_LOG_WARN, "server", "request too large peer=%s bytes=%u", c->peer, flen);
        kt_conn_send_error(c, id, KT_ETOOLARGE, msg);
        uint64_t have = c->in.len - off;
        uint64_t want = (uint64_t)KT_FRAME_HDR + flen;
        if (have >= want) {
          off += want;
          continue;
        }
        off = c->in.len;
        c->skip = want - have;
        break;
      }
      char msg[128];
      if (-r == KT_ETOOLARGE)
        snprintf(msg, sizeof msg, "frame of %u bytes exceeds the largest frame (%u bytes)", flen,
                 KT_MAX_FRAME_BYTES);
      else
        snprintf(msg, sizeof msg, "malformed frame header (zero length)");
      conn_fail(c, 0, -r, msg);
      break;
    }
    off += used;
    handle_frame(c, body, blen);
  }
  if (!c->closed && off)
    kt_buf_consume(&c->in, off);
  kt_conn_unref(c);
}

/* Read what the socket (and TLS) has, up to one chunk, and process it. */
/* An HTTP request on a client connection (its first byte an ASCII
 * capital: "GET ", "HEAD "...; a native frame starts with its length's high
 * byte, 0): the connection (socket and TLS state) goes to the HTTP server
 * with what was read of it, and this connection closes. Plaintext: peeked
 * before the first read; TLS: the first decrypted bytes, after it.
 * Returns true if handed over. */
static bool conn_sniff_http(struct kt_conn *c) {
  c->sniffed = true;
  struct kt_server *s = c->srv;
  if (!s->on_http)
    return false;
  uint8_t b;
  if (kt_io_is_tls(&c->io)) {
    if (c->in.len == 0 || c->in.p[0] < 'A' || c->in.p[0] > 'Z')
      return false;
  } else if (c->in.len || recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1 || b < 'A' ||
             b > 'Z') {
    return false;
  }
  struct kt_io io;
  kt_io_move(&io, &c->io);
  ev_io_stop(s->loop, &c->rio);
  ev_io_stop(s->loop, &c->wio);
  s->on_http(s->http_arg, &io, c->in.p, c->in.len);
  conn_close(c, "an HTTP request: handed to the HTTP endpoints");
  return true;
}

static void conn_read(struct kt_conn *c) {
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
      if (tls && e.code == KT_EPROTO) /* a TLS protocol problem, not a disconnect */
        conn_warn(c->srv, c->peer, "%s", e.msg);
      conn_close(c, e.msg);
      return;
    }
    c->in.len += (size_t)n;
    got += (size_t)n;
    if (!tls || got >= KT_CONN_READ_CHUNK || c->in.len == c->in.cap || !kt_io_pending(&c->io))
      break; /* one read() per event (TLS: records read ahead are taken without one) */
  }
  if (got == 0)
    return;
  if (!c->sniffed && conn_sniff_http(c))
    return; /* TLS: decrypted "GET /metrics ..." */
  c->srv->bytes_in += got;
  if (c->skip) { /* the rest of an oversized request: dropped unread */
    size_t drop = c->in.len < c->skip ? c->in.len : (size_t)c->skip;
    kt_buf_consume(&c->in, drop);
    c->skip -= drop;
  }
  conn_process(c);
  /* A fully consumed big input buffer goes back to the allocator. */
  if (!c->closed && c->in.len == 0 && c->in.cap > 4 * KT_CONN_READ_CHUNK)
    kt_buf_free(&c->in);
  if (!c->closed && c->reading && kt_io_pending(&c->io))
    mark_pending(c);
}

/* The handshake is done: note the client certificate, start serving. */
static void conn_secured(struct kt_conn *c) {
  char cn[256];
  if (kt_io_peer_cn(&c->io, cn, sizeof cn)) {
    c->cert_cn = strdup(cn);
    kt_assert(c->cert_cn);
  }
  kt_log(KT_LOG_DEBUG, "server", "TLS handshake done peer=%s version=%s cert-cn=%s", c->peer,
         kt_io_version(&c->io), c->cert_cn ? c->cert_cn : "-");
  c->reading = false;
  set_reading(c, c->srv->accepting);
  conn_arm(c);
}

/* One handshake step (counted against the turn's budget). */
/* Whether this turn's handshake budget has room for one more step. */
static bool hs_room(const struct kt_server *s) { return kt_tls_budget_room(&s->hs_budget); }

static void conn_handshake(struct kt_conn *c) {
  struct kt_server *s = c->srv;
  struct kt_err e = {0};
  ev_tstamp t0 = ev_time();
  int r = kt_io_handshake(&c->io, &e);
  kt_tls_budget_spent(&s->hs_budget, ev_time() - t0);
  if (r == 1) {
    conn_secured(c); /* a first request read ahead with the handshake: pending */
    return;
  }
  if (r == KT_IO_AGAIN) {
    conn_arm(c);
    return;
  }
  if (r == KT_IO_PLAINTEXT && c->l->also_plain) {
    kt_io_to_plain(&c->io); /* this port serves plaintext clients too */
    conn_secured(c);
    return;
  }
  if (r == KT_IO_PLAINTEXT) {
    const char *msg = "this client URL serves TLS only: connect with TLS (an https:// endpoint, "
                      "--cacert)";
    conn_warn(s, c->peer, "a plaintext client on a TLS-only port (https:// client URL)");
    kt_io_to_plain(&c->io);
    kt_proto_encode_error(&c->out, 0, KT_EPROTO, msg);
    (void)kt_io_write(&c->io, c->out.p, c->out.len, &e);
    kt_io_close_refused(&c->io); /* the answer, then FIN */
    conn_close(c, "plaintext client on a TLS port");
    return;
  }
  conn_warn(s, c->peer, "TLS handshake failed: %s", e.msg);
  conn_close(c, e.msg);
}

/* A handshake step when this turn has room, else later (FIFO). */
static void conn_handshake_or_wait(struct kt_conn *c) {
  struct kt_server *s = c->srv;
  if (hs_room(s) && !c->on_wait_list) {
    conn_handshake(c);
    return;
  }
  if (c->on_wait_list)
    return;
  c->on_wait_list = true;
  kt_conn_ref(c);
  c->wait_next = NULL;
  if (s->wait_tail)
    s->wait_tail->wait_next = c;
  else
    s->wait_head = c;
  s->wait_tail = c;
  conn_arm(c); /* no events while it waits */
  hs_wake_later(s);
}

static void conn_event(struct kt_conn *c, int revents) {
  kt_conn_ref(c);
  if (!kt_io_ready(&c->io)) {
    conn_handshake_or_wait(c);
  } else {
    int rd = kt_io_events(&c->io, true, false), wr = kt_io_events(&c->io, false, true);
    if (c->write_blocked && (revents & wr)) {
      if (conn_flush(c) && !c->closed && c->reading && c->in.len)
        conn_process(c); /* frames held back by backpressure */
    }
    if (!c->closed && c->reading && (revents & rd))
      conn_read(c);
  }
  kt_conn_unref(c);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  conn_event(w->data, KT_IO_READ);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  conn_event(w->data, KT_IO_WRITE);
}

/* After polling: deferred handshakes (within this turn's budget) and TLS
 * bytes already read ahead. */
static void on_turn(struct ev_loop *loop, ev_check *w, int revents) {
  (void)revents;
  struct kt_server *s = w->data;
  while (s->wait_head && hs_room(s)) {
    struct kt_conn *c = s->wait_head;
    s->wait_head = c->wait_next;
    if (!s->wait_head)
      s->wait_tail = NULL;
    c->on_wait_list = false;
    if (!c->closed)
      conn_handshake(c);
    kt_conn_unref(c);
  }
  struct kt_conn *list = s->pending;
  s->pending = NULL;
  while (list) {
    struct kt_conn *c = list;
    list = c->pend_next;
    c->on_pending = false;
    if (!c->closed && c->reading)
      conn_read(c);
    kt_conn_unref(c);
  }
  bool spin = s->pending != NULL;
  if (s->wait_head) {
    if (kt_tls_budget_wait_s(&s->hs_budget) <= 0)
      spin = true;
    else
      hs_wake_later(s);
  }
  if (!spin && ev_is_active(&s->spin_w))
    ev_idle_stop(loop, &s->spin_w);
}

static void on_spin(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)loop, (void)w, (void)revents; /* its presence keeps poll from sleeping */
}

static void on_hs_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents; /* it woke the loop: on_turn runs the handshakes */
}

/* ---- with I/O threads: the state side (net/THREADS.md) ---- */

#define TAKE_BUDGET 1024 /* messages taken from one I/O thread per wake-up */

static void drop_held(struct kt_conn *c) {
  while (c->held) {
    struct kt_iomsg *m = c->held;
    c->held = m->next;
    kt_iomsg_free(m);
  }
  c->held_tail = NULL;
  c->frames_wait = false;
}

/* The replies encoded so far go to the connection's I/O thread (unsent
 * counts them until the socket took them). */
static void st_hand_out(struct kt_conn *c) {
  size_t len = c->out.len;
  if (!len)
    return;
  atomic_fetch_add(&c->sh->unsent, len);
  struct kt_iomsg *m;
  if (len >= 16384) { /* a big buffer moves whole */
    m = kt_iomsg_new(KT_IOM_WRITE, c->sh, 0);
    m->ext = true;
    m->p = c->out.p;
    m->len = len;
    m->cap = c->out.cap;
    c->out = (struct kt_buf){0};
  } else {
    m = kt_iomsg_new(KT_IOM_WRITE, c->sh, len);
    memcpy(m->data, c->out.p, len);
    m->len = len;
    c->out.len = 0;
  }
  kt_iothreads_send(c->srv->iot, m);
}

/* The state thread closes c: nothing more is sent on it; the I/O thread
 * writes what it has once (flush: this turn's replies too, e.g. an error
 * frame) and answers CLOSED. */
static void st_close(struct kt_conn *c, const char *why, bool flush) {
  if (c->closed)
    return;
  struct kt_server *s = c->srv;
  kt_log(KT_LOG_DEBUG, "server", "connection closed peer=%s reason=\"%s\"", c->peer, why);
  c->closed = true;
  if (c->udata && s->cfg.on_close)
    s->cfg.on_close(s->cfg.arg, c);
  if (flush)
    st_hand_out(c);
  kt_buf_free(&c->out);
  drop_held(c);
  kt_iothreads_send(s->iot, kt_iomsg_new(KT_IOM_CLOSE, c->sh, 0));
}

/* Wait until every byte handed over is written (the I/O thread then sends
 * DRAINED), or note it now if that is already so. */
static void st_arm_drain(struct kt_conn *c) {
  atomic_store(&c->sh->want_drain, true);
  if (c->out.len == 0 && atomic_load(&c->sh->unsent) == 0 &&
      atomic_exchange(&c->sh->want_drain, false)) {
    c->drain_due = true; /* handled at the end of the turn */
    mark_dirty(c);
  }
}

/* Handle held frames in order until done or the output passes the soft
 * limit (then they wait for DRAINED, as the single-threaded server stops
 * reading a connection's buffer). */
static void st_run_frames(struct kt_conn *c) {
  kt_conn_ref(c);
  while (!c->closed && c->held) {
    struct kt_iomsg *m = c->held;
    while (!c->closed && m->next_req < m->n_reqs) {
      if (c->out.len + atomic_load_explicit(&c->sh->unsent, memory_order_relaxed) >
          KT_CONN_OUT_SOFT) {
        c->frames_wait = true;
        st_arm_drain(c);
        goto out;
      }
      const struct kt_ioreq *r = &m->reqs[m->next_req++]; /* decoded by the I/O thread */
      handle_req(c, &r->req, r->rc, r->err, r->body, r->len);
    }
    if (c->closed)
      break;
    c->held = m->next;
    if (!c->held)
      c->held_tail = NULL;
    kt_iomsg_free(m);
  }
out:
  kt_conn_unref(c);
}

/* Everything handed over is written (DRAINED, or found so when asked). */
static void st_drained(struct kt_conn *c) {
  struct kt_server *s = c->srv;
  if (c->closed)
    return;
  if (c->out.len || atomic_load(&c->sh->unsent)) { /* more went out since: wait again */
    if (c->node_drain || c->frames_wait)
      st_arm_drain(c);
    return;
  }
  kt_conn_ref(c);
  if (c->node_drain && s->cfg.on_drained) {
    c->node_drain = false;
    s->cfg.on_drained(s->cfg.arg, c); /* a stream refills */
  }
  if (!c->closed && c->frames_wait) {
    if (c->out.len) {
      st_arm_drain(c); /* refilled: the frames wait for this to go too */
    } else {
      c->frames_wait = false;
      st_run_frames(c);
    }
  }
  kt_conn_unref(c);
}

static struct kt_conn *st_conn_new(struct kt_server *s, struct kt_ioconn_shared *sh) {
  struct kt_conn *c = calloc(1, sizeof *c);
  kt_assert(c);
  c->srv = s;
  c->refs = 1; /* the server's, dropped on CLOSED */
  c->threaded = true;
  c->sh = sh;
  sh->sc = c;
  c->io.fd = -1;
  c->reading = true;
  c->tls = sh->tls;
  c->tls_version = sh->tls_version;
  snprintf(c->peer, sizeof c->peer, "%s", sh->peer);
  if (sh->cert_cn[0]) {
    c->cert_cn = strdup(sh->cert_cn);
    kt_assert(c->cert_cn);
  }
  c->next = s->tconns;
  if (s->tconns)
    s->tconns->prev = c;
  s->tconns = c;
  return c;
}

static void st_unlink(struct kt_server *s, struct kt_conn *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    s->tconns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

/* The I/O thread closed c (its last message about it): RELEASE the socket
 * side, drop the server's reference. */
static void st_closed(struct kt_server *s, struct kt_iomsg *m) {
  struct kt_conn *c = m->sh->sc;
  kt_assert(c && c->sh == m->sh);
  if (!c->closed) {
    kt_log(KT_LOG_DEBUG, "server", "connection closed peer=%s", c->peer);
    c->closed = true;
    if (c->udata && s->cfg.on_close)
      s->cfg.on_close(s->cfg.arg, c);
    kt_buf_free(&c->out);
    drop_held(c);
  }
  m->type = KT_IOM_RELEASE;
  kt_iothreads_send(s->iot, m);
  c->sh = NULL;
  st_unlink(s, c);
  kt_conn_unref(c);
}

static void st_message(struct kt_server *s, struct kt_iomsg *m) {
  struct kt_conn *c;
  switch (m->type) {
  case KT_IOM_FRAMES:
    c = m->sh->sc ? m->sh->sc : st_conn_new(s, m->sh);
    if (c->closed) {
      kt_iomsg_free(m);
      return;
    }
    KT_FIFO_PUSH(c->held, c->held_tail, m);
    if (!c->frames_wait)
      st_run_frames(c);
    return;
  case KT_IOM_DRAINED:
    c = m->sh->sc;
    kt_iomsg_free(m);
    if (c && !c->closed)
      st_drained(c);
    return;
  case KT_IOM_CLOSED:
    st_closed(s, m);
    return;
  case KT_IOM_HTTP:
    if (s->on_http)
      s->on_http(s->http_arg, &m->io, m->p, m->len);
    else
      kt_io_close(&m->io);
    kt_iomsg_free(m);
    return;
  default:
    kt_assert(!"unexpected message from an I/O thread");
  }
}

/* The I/O threads published messages: take them, within a budget per
 * thread (the rest next turn). */
static void on_io_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)revents;
  struct kt_server *s = w->data;
  bool more = false;
  for (int i = 0; i < kt_iothreads_count(s->iot); i++) {
    int k = 0;
    struct kt_iomsg *m;
    while (k < TAKE_BUDGET && (m = kt_iothreads_take(s->iot, i))) {
      st_message(s, m);
      k++;
    }
    if (k)
      kt_iothreads_taken(s->iot, i);
    more |= k == TAKE_BUDGET;
  }
  if (more)
    ev_async_send(loop, w);
}

/* End of the turn for a connection with replies (or a drain to tell). */
static void st_flush(struct kt_conn *c) {
  if (c->drain_due) {
    c->drain_due = false;
    st_drained(c);
  }
  if (!c->closed)
    st_hand_out(c);
}

/* End of a loop turn: one write per connection that got replies. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_server *s = w->data;
  kt_tls_budget_turn(&s->hs_budget, ev_time());
  while (s->dirty) {
    struct kt_conn *c = s->dirty;
    s->dirty = c->dirty_next;
    c->in_dirty_list = false;
    if (c->threaded) {
      if (!c->closed)
        st_flush(c);
    } else if (!c->closed && conn_flush(c) && !c->closed && c->reading && c->in.len &&
               c->out.len <= KT_CONN_OUT_SOFT) {
      conn_process(c);
    }
    kt_conn_unref(c);
  }
  if (s->iot) /* this turn's messages to the I/O threads, one wake-up each */
    kt_iothreads_publish(s->iot);
}

static void on_stall_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_server *s = w->data;
  ev_tstamp now = ev_now(loop);
  struct kt_conn *c = s->conns;
  while (c) {
    struct kt_conn *next = c->next;
    if (!kt_io_ready(&c->io) && now - c->opened_at > KT_TLS_HANDSHAKE_MS / 1000.0) {
      conn_warn(s, c->peer, "TLS handshake not done in %d s", KT_TLS_HANDSHAKE_MS / 1000);
      conn_close(c, "TLS handshake timed out");
    } else if (c->out.len && now - c->last_progress > KT_CONN_STALL_MS / 1000.0) {
      conn_close(c, "client not reading its replies");
    }
    c = next;
  }
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  struct kt_listener *l = w->data;
  struct kt_server *s = l->srv;
  for (int i = 0; i < 64; i++) {
    char peer[64];
    int fd = kt_sock_accept(l->fd, peer, sizeof peer);
    if (fd < 0) {
      if (fd == -2 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
        /* Out of descriptors: the connection stays queued and the listener
         * would be readable at once again. Pause it for a moment. */
        kt_log(KT_LOG_WARN, "server", "accept failed: %s; not accepting for 100 ms",
               strerror(errno));
        ev_io_stop(loop, &l->io);
        ev_timer_set(&l->pause, 0.1, 0);
        ev_timer_start(loop, &l->pause);
      } else if (fd == -2) {
        kt_log(KT_LOG_WARN, "server", "accept failed: %s", strerror(errno));
      }
      return;
    }
    if (s->n_conns >= KT_MAX_CONNS) {
      close(fd);
      kt_log(KT_LOG_WARN, "server", "connection refused: %d connections open", KT_MAX_CONNS);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct kt_conn *c = calloc(1, sizeof *c);
    kt_assert(c);
    struct kt_err e = {0};
    if (l->tls && kt_io_init_tls(&c->io, fd, l->tls, NULL, &e)) {
      kt_log(KT_LOG_WARN, "server", "connection from %s refused: %s", peer, e.msg);
      close(fd);
      free(c);
      continue;
    }
    if (!l->tls)
      kt_io_init_plain(&c->io, fd);
    c->srv = s;
    c->l = l;
    c->refs = 1;
    c->opened_at = c->last_progress = ev_now(loop);
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    ev_io_init(&c->rio, on_readable, fd, EV_READ);
    ev_io_init(&c->wio, on_writable, fd, EV_WRITE);
    c->rio.data = c->wio.data = c;
    c->next = s->conns;
    if (s->conns)
      s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (l->tls)
      conn_arm(c); /* the handshake first: readable when the ClientHello comes */
    else
      set_reading(c, true);
  }
}

struct kt_server *kt_server_new(struct ev_loop *loop, const struct kt_server_config *cfg,
                                struct kt_err *e) {
  struct kt_server *s = calloc(1, sizeof *s);
  kt_assert(s);
  s->loop = loop;
  s->cfg = *cfg;
  s->accepting = true;
  ev_prepare_init(&s->flush_w, on_prepare);
  s->flush_w.data = s;
  ev_set_priority(&s->flush_w, EV_MINPRI); /* after the node's prepare made replies */
  ev_prepare_start(loop, &s->flush_w);
  ev_timer_init(&s->stall_w, on_stall_timer, 1.0, 1.0);
  s->stall_w.data = s;
  ev_timer_start(loop, &s->stall_w);
  ev_unref(loop); /* the stall timer alone does not keep the loop alive */
  ev_check_init(&s->turn_w, on_turn);
  s->turn_w.data = s;
  ev_check_start(loop, &s->turn_w);
  ev_unref(loop);
  ev_idle_init(&s->spin_w, on_spin);
  s->spin_w.data = s;
  ev_timer_init(&s->hs_w, on_hs_timer, 0, 0);
  s->hs_w.data = s;
  if (cfg->io_threads > 0) {
    ev_async_init(&s->io_wake, on_io_wake);
    s->io_wake.data = s;
    ev_async_start(loop, &s->io_wake);
    struct kt_iothreads_config ic = {.n = cfg->io_threads,
                                     .max_frame = cfg->max_request_bytes + KT_READ_EXTRA_BYTES,
                                     .max_request_bytes = cfg->max_request_bytes,
                                     .state_loop = loop,
                                     .state_wake = &s->io_wake};
    s->iot = kt_iothreads_start(&ic, e);
    if (!s->iot) {
      ev_async_stop(loop, &s->io_wake);
      kt_server_free(s);
      return NULL;
    }
    kt_log(KT_LOG_INFO, "server", "client connections on %d I/O threads", cfg->io_threads);
  }
  return s;
}

static void on_accept_resume(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_listener *l = w->data;
  if (l->srv->accepting)
    ev_io_start(loop, &l->io);
}

int kt_server_listen(struct kt_server *s, const char *host, int port, struct kt_tls_ctx *tls,
                     bool also_plain, struct kt_err *e) {
  int fd = kt_sock_listen(host, port, 1024, e);
  if (fd < 0)
    return e->code;
  if (s->iot) { /* accepted on I/O thread 0 */
    kt_iothreads_listen(s->iot, fd, tls, also_plain);
    return 0;
  }
  struct kt_listener *l = calloc(1, sizeof *l);
  kt_assert(l);
  l->fd = fd;
  l->tls = tls;
  l->also_plain = tls && also_plain;
  l->srv = s;
  ev_io_init(&l->io, on_accept, fd, EV_READ);
  l->io.data = l;
  ev_timer_init(&l->pause, on_accept_resume, 0.1, 0);
  l->pause.data = l;
  ev_io_start(s->loop, &l->io);
  l->next = s->listeners;
  s->listeners = l;
  return 0;
}

void kt_server_stop_accepting(struct kt_server *s) {
  s->accepting = false;
  if (s->iot)
    kt_iothreads_stop_accepting(s->iot);
  for (struct kt_listener *l = s->listeners; l; l = l->next) {
    if (ev_is_active(&l->io))
      ev_io_stop(s->loop, &l->io);
    ev_timer_stop(s->loop, &l->pause);
  }
  for (struct kt_conn *c = s->conns; c; c = c->next)
    set_reading(c, false);
}

static void drop_lists(struct kt_server *s) {
  while (s->wait_head) {
    struct kt_conn *c = s->wait_head;
    s->wait_head = c->wait_next;
    c->on_wait_list = false;
    kt_conn_unref(c);
  }
  s->wait_tail = NULL;
  while (s->pending) {
    struct kt_conn *c = s->pending;
    s->pending = c->pend_next;
    c->on_pending = false;
    kt_conn_unref(c);
  }
}

size_t kt_server_unsent(const struct kt_server *s) {
  size_t n = 0;
  for (const struct kt_conn *c = s->conns; c; c = c->next)
    n += c->out.len;
  for (const struct kt_conn *c = s->tconns; c; c = c->next)
    n += kt_conn_unsent(c);
  return n;
}

size_t kt_server_conn_count(const struct kt_server *s) {
  return s->iot ? kt_iothreads_conns(s->iot) : s->n_conns;
}

/* With I/O threads: stop them first; then every connection closes here. */
static void st_free(struct kt_server *s) {
  kt_iothreads_join(s->iot);
  while (s->tconns) {
    struct kt_conn *c = s->tconns;
    st_unlink(s, c);
    if (!c->closed) {
      c->closed = true;
      if (c->udata && s->cfg.on_close)
        s->cfg.on_close(s->cfg.arg, c);
      kt_buf_free(&c->out);
      drop_held(c);
    }
    c->sh = NULL;
    kt_conn_unref(c);
  }
  while (s->dirty) { /* closed now: nothing to hand over */
    struct kt_conn *c = s->dirty;
    s->dirty = c->dirty_next;
    c->in_dirty_list = false;
    kt_conn_unref(c);
  }
  kt_iothreads_free(s->iot); /* messages left in the rings, the sockets */
  s->iot = NULL;
  ev_async_stop(s->loop, &s->io_wake);
}

void kt_server_free(struct kt_server *s) {
  if (!s)
    return;
  if (s->iot)
    st_free(s);
  on_prepare(s->loop, &s->flush_w, 0);
  while (s->conns)
    conn_close(s->conns, "server shutting down");
  drop_lists(s);
  ev_idle_stop(s->loop, &s->spin_w);
  ev_timer_stop(s->loop, &s->hs_w);
  ev_ref(s->loop);
  ev_check_stop(s->loop, &s->turn_w);
  while (s->listeners) {
    struct kt_listener *l = s->listeners;
    s->listeners = l->next;
    ev_io_stop(s->loop, &l->io);
    ev_timer_stop(s->loop, &l->pause);
    close(l->fd);
    free(l);
  }
  ev_prepare_stop(s->loop, &s->flush_w);
  ev_ref(s->loop);
  ev_timer_stop(s->loop, &s->stall_w);
  kt_arena_free(&s->arena);
  free(s);
}

void kt_server_bytes(const struct kt_server *s, uint64_t *in, uint64_t *out) {
  if (s->iot) {
    kt_iothreads_bytes(s->iot, in, out);
    return;
  }
  *in = s->bytes_in;
  *out = s->bytes_out;
}

void kt_server_set_http(struct kt_server *s, kt_server_http_fn fn, void *arg) {
  s->on_http = fn;
  s->http_arg = arg;
  if (s->iot)
    kt_iothreads_set_http(s->iot, fn != NULL);
}
