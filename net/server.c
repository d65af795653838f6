/* net/server.c — see server.h. */
#include "server.h"

#include "sock.h"

#include <errno.h>
#include <fcntl.h>
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
  int fd;
  int refs;
  bool closed, hello_done, reading, in_dirty_list;
  bool want_drain; /* call cfg.on_drained once the output is written out */
  void *udata;     /* the handler's per-connection state */
  uint64_t skip;   /* bytes of an oversized request still to drop */
  ev_io rio, wio;
  struct kt_buf in, out;
  ev_tstamp last_progress; /* last time output drained (for the stall cut) */
  struct kt_conn *dirty_next;
  struct kt_conn *prev, *next; /* all open connections */
  char peer[64];
};

struct kt_listener {
  ev_io io;
  int fd;
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
  struct kt_arena arena;
  bool accepting;
};

static void conn_close(struct kt_conn *c, const char *why);

static void conn_free(struct kt_conn *c) {
  kt_buf_free(&c->in);
  kt_buf_free(&c->out);
  free(c);
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
  if (on)
    ev_io_start(c->srv->loop, &c->rio);
  else
    ev_io_stop(c->srv->loop, &c->rio);
}

void kt_conn_sent(struct kt_conn *c) {
  if (c->closed)
    return;
  if (c->out.len > KT_CONN_OUT_HARD) {
    conn_close(c, "output buffer over hard limit (client not reading)");
    return;
  }
  if (c->out.len > KT_CONN_OUT_SOFT)
    set_reading(c, false);
  mark_dirty(c);
}

size_t kt_conn_unsent(const struct kt_conn *c) { return c->closed ? 0 : c->out.len; }
void kt_conn_want_drain(struct kt_conn *c) { c->want_drain = true; }
void *kt_conn_udata(const struct kt_conn *c) { return c->udata; }
void kt_conn_set_udata(struct kt_conn *c, void *udata) { c->udata = udata; }

void kt_conn_send_resp(struct kt_conn *c, const struct kt_resp *r) {
  struct kt_buf *b = kt_conn_out(c);
  if (!b)
    return;
  kt_proto_encode_resp(b, r);
  kt_conn_sent(c);
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
  while (c->out.len) {
    ssize_t w = write(c->fd, c->out.p, c->out.len);
    if (w > 0) {
      kt_buf_consume(&c->out, (size_t)w);
      c->last_progress = ev_now(c->srv->loop);
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!ev_is_active(&c->wio))
        ev_io_start(c->srv->loop, &c->wio);
      return true;
    }
    conn_close(c, w < 0 ? strerror(errno) : "write returned 0");
    return false;
  }
  if (ev_is_active(&c->wio))
    ev_io_stop(c->srv->loop, &c->wio);
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
  if (c->closed)
    return;
  struct kt_server *s = c->srv;
  kt_log(KT_LOG_DEBUG, "server", "connection closed peer=%s reason=\"%s\"", c->peer, why);
  c->closed = true;
  if (c->udata && s->cfg.on_close)
    s->cfg.on_close(s->cfg.arg, c);
  ev_io_stop(s->loop, &c->rio);
  ev_io_stop(s->loop, &c->wio);
  close(c->fd);
  c->fd = -1;
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
  /* Best effort: one flush attempt, then close. */
  (void)!write(c->fd, c->out.p, c->out.len);
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
  c->hello_done = true;
  static const char server_name[] = "ketch " KT_VERSION;
  struct kt_resp r = {.type = KT_MSG_HELLO, .id = req->id};
  r.u.hello.version = KT_PROTO_VERSION;
  r.u.hello.server = (struct kt_bytes){(const uint8_t *)server_name, sizeof server_name - 1};
  r.u.hello.cluster_id = s->cfg.cluster_id;
  r.u.hello.member_id = s->cfg.member_id;
  r.u.hello.max_request_bytes = s->cfg.max_request_bytes;
  kt_proto_encode_resp(&c->out, &r);
  kt_conn_sent(c);
}

/* Decode and dispatch every whole frame in c->in. */
static void conn_process(struct kt_conn *c) {
  struct kt_server *s = c->srv;
  size_t off = 0;
  uint32_t max_frame = s->cfg.max_request_bytes;
  kt_conn_ref(c);
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
        snprintf(msg, sizeof msg, "request of %u bytes exceeds --max-request-bytes (%u)", flen,
                 max_frame);
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
    struct kt_req req;
    struct kt_err err = {0};
    kt_arena_reset(&s->arena);
    int rc = kt_proto_decode_req(body, blen, &s->arena, &req, &err);
    if (rc == KT_EUNSUPPORTED && c->hello_done) {
      kt_conn_send_error(c, req.id, rc, err.msg[0] ? err.msg : kt_strerror(rc));
      continue;
    }
    if (rc) {
      if (rc == KT_EPROTO || !c->hello_done)
        conn_fail(c, req.id, rc, err.msg[0] ? err.msg : kt_strerror(rc));
      else
        kt_conn_send_error(c, req.id, rc, err.msg[0] ? err.msg : kt_strerror(rc));
      continue;
    }
    if (req.type == KT_MSG_HELLO) {
      handle_hello(c, &req);
      continue;
    }
    if (!c->hello_done) {
      conn_fail(c, req.id, KT_EPROTO, "first request must be HELLO");
      break;
    }
    s->cfg.on_request(s->cfg.arg, c, &req, body, blen);
  }
  if (!c->closed && off)
    kt_buf_consume(&c->in, off);
  kt_conn_unref(c);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_conn *c = w->data;
  kt_buf_reserve(&c->in, KT_CONN_READ_CHUNK);
  ssize_t n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
  if (n == 0) {
    conn_close(c, "peer closed");
    return;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      conn_close(c, strerror(errno));
    return;
  }
  c->in.len += (size_t)n;
  if (c->skip) { /* the rest of an oversized request: dropped unread */
    size_t drop = c->in.len < c->skip ? c->in.len : (size_t)c->skip;
    kt_buf_consume(&c->in, drop);
    c->skip -= drop;
  }
  kt_conn_ref(c);
  conn_process(c);
  /* A fully consumed big input buffer goes back to the allocator. */
  if (!c->closed && c->in.len == 0 && c->in.cap > 4 * KT_CONN_READ_CHUNK)
    kt_buf_free(&c->in);
  kt_conn_unref(c);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_conn *c = w->data;
  kt_conn_ref(c);
  if (conn_flush(c) && !c->closed && c->reading && c->in.len)
    conn_process(c); /* frames held back by backpressure */
  kt_conn_unref(c);
}

/* End of a loop turn: one write per connection that got replies. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_server *s = w->data;
  while (s->dirty) {
    struct kt_conn *c = s->dirty;
    s->dirty = c->dirty_next;
    c->in_dirty_list = false;
    if (!c->closed && conn_flush(c) && !c->closed && c->reading && c->in.len &&
        c->out.len <= KT_CONN_OUT_SOFT)
      conn_process(c);
    kt_conn_unref(c);
  }
}

static void on_stall_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_server *s = w->data;
  ev_tstamp now = ev_now(loop);
  struct kt_conn *c = s->conns;
  while (c) {
    struct kt_conn *next = c->next;
    if (c->out.len && now - c->last_progress > KT_CONN_STALL_MS / 1000.0)
      conn_close(c, "client not reading its replies");
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
      if (fd == -2)
        kt_log(KT_LOG_WARN, "server", "accept failed: %s", strerror(errno));
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
    c->srv = s;
    c->fd = fd;
    c->refs = 1;
    c->last_progress = ev_now(loop);
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    ev_io_init(&c->rio, on_readable, fd, EV_READ);
    ev_io_init(&c->wio, on_writable, fd, EV_WRITE);
    c->rio.data = c->wio.data = c;
    c->next = s->conns;
    if (s->conns)
      s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    set_reading(c, true);
  }
}

struct kt_server *kt_server_new(struct ev_loop *loop, const struct kt_server_config *cfg) {
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
  return s;
}

int kt_server_listen(struct kt_server *s, const char *host, int port, struct kt_err *e) {
  int fd = kt_sock_listen(host, port, 1024, e);
  if (fd < 0)
    return e->code;
  struct kt_listener *l = calloc(1, sizeof *l);
  kt_assert(l);
  l->fd = fd;
  l->srv = s;
  ev_io_init(&l->io, on_accept, fd, EV_READ);
  l->io.data = l;
  ev_io_start(s->loop, &l->io);
  l->next = s->listeners;
  s->listeners = l;
  return 0;
}

void kt_server_stop_accepting(struct kt_server *s) {
  s->accepting = false;
  for (struct kt_listener *l = s->listeners; l; l = l->next)
    if (ev_is_active(&l->io))
      ev_io_stop(s->loop, &l->io);
  for (struct kt_conn *c = s->conns; c; c = c->next)
    set_reading(c, false);
}

size_t kt_server_unsent(const struct kt_server *s) {
  size_t n = 0;
  for (const struct kt_conn *c = s->conns; c; c = c->next)
    n += c->out.len;
  return n;
}

size_t kt_server_conn_count(const struct kt_server *s) { return s->n_conns; }

void kt_server_free(struct kt_server *s) {
  if (!s)
    return;
  on_prepare(s->loop, &s->flush_w, 0);
  while (s->conns)
    conn_close(s->conns, "server shutting down");
  while (s->listeners) {
    struct kt_listener *l = s->listeners;
    s->listeners = l->next;
    ev_io_stop(s->loop, &l->io);
    close(l->fd);
    free(l);
  }
  ev_prepare_stop(s->loop, &s->flush_w);
  ev_ref(s->loop);
  ev_timer_stop(s->loop, &s->stall_w);
  kt_arena_free(&s->arena);
  free(s);
}
