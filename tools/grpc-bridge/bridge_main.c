/* tools/grpc-bridge/bridge_main.c — ketch-grpc's server: flags, the libev
 * loop, the listener, one nghttp2 server session per connection (h2c with
 * prior knowledge), gRPC framing/trailers/deadlines, unary and streaming
 * calls, back pressure, and the libketch handle driven from the same loop
 * (see bridge.h).
 *
 * Every call's responses go through one per-stream queue of framed messages,
 * drained by nghttp2's data provider as HTTP/2 flow control allows (deferred
 * while empty, resumed by the next message); the trailers follow the last
 * message. A streaming call's request messages are handed to bridge_stream.c
 * one by one as soon as each is complete in the DATA frames.
 *
 * Memory bounds per connection: at most MAX_STREAMS concurrent streams
 * (SETTINGS_MAX_CONCURRENT_STREAMS); a request message is at most
 * max_request_bytes + 512 KiB (etcd's gRPC overhead allowance); reading from a
 * connection pauses while it has MAX_STREAMS calls waiting on ketch or more
 * than MAX_OUT_BYTES of responses the client has not taken yet, so a client
 * that does not read cannot make the bridge buffer without limit. Watch
 * responses are produced without reading: a stream may queue at most
 * --max-stream-queue-bytes (default 8 MiB) and the connection MAX_OUT_BYTES;
 * a watch delivery beyond that cancels the watch (bridge.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "bridge.h"
#include "../grpc/grpc_client.h"

#define MAX_STREAMS 1024
#define GRPC_OVERHEAD_BYTES (512u * 1024)
#define MAX_OUT_BYTES (32u << 20)
#define READ_CHUNK 65536
#define OUT_FLUSH 65536

static int log_level = 1; /* 0 debug, 1 info, 2 warn, 3 error */
static void logf_(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(int lvl, const char *fmt, ...) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  if (lvl < log_level)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ketch-grpc %s: ", names[lvl]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

struct bridge {
  struct ev_loop *loop;
  ketch_client *kc;
  ev_io kio;
  ev_timer ktimer;
  ev_prepare prep;
  ev_io lio;
  bool ksubmitted;
  size_t max_request_bytes;
  size_t max_stream_queue_bytes;
  struct conn *dirty; /* connections with frames to send, flushed in prep */
  struct conn *conns; /* every open connection */
};

struct stream;

struct conn {
  struct bridge *b;
  int fd;
  ev_io rio, wio;
  nghttp2_session *s;
  uint8_t *out;
  size_t out_len, out_off, out_cap;
  struct stream *streams; /* all open streams (doubly linked) */
  size_t waiting;         /* calls submitted to ketch, not answered */
  size_t resp_bytes;      /* response bytes not yet taken by nghttp2 */
  bool reading, is_dirty, dead;
  struct conn *next_dirty;
  struct conn *prev, *next; /* b->conns */
};

/* One queued response message. */
struct qmsg {
  struct qmsg *next;
  uint8_t *data;
  size_t len, off;
};

struct stream {
  struct conn *c;
  int32_t id;
  struct stream *prev, *next;
  char path[256];
  bool bad_path, not_grpc, dispatched;
  bool streaming;     /* a streaming method (bs is its bridge side) */
  bool headers_sent;  /* response HEADERS submitted (with the data provider) */
  bool responded;     /* finished: trailers follow the queue */
  bool deferred;      /* the data provider waits for a message */
  int64_t timeout_ms; /* -1: none */
  ev_timer deadline;
  uint8_t *body; /* request bytes not yet consumed */
  size_t body_len, body_cap;
  struct call_ref *call; /* the pending unary ketch call, if any */
  kt_bridge_stream *bs;  /* the streaming call, if any */
  size_t pending;        /* streaming: its calls pending on ketch */
  struct qmsg *q_head, *q_tail;
  size_t q_bytes; /* queued response bytes not yet taken by nghttp2 */
  int status;     /* final grpc-status, once responded */
  char message[512];
};

/* A call outlives its stream if the client resets it: the ketch callback then
 * finds st == NULL and only frees. */
struct call_ref {
  struct stream *st;
};

static void conn_close(struct conn *c);
static void conn_mark_dirty(struct conn *c);
static void conn_update_read(struct conn *c);

/* ---- libketch in the loop ---- */

static void ketch_rearm(struct bridge *b) {
  int fd = ketch_fd(b->kc);
  short want = ketch_events(b->kc);
  int ev = (want & POLLIN ? EV_READ : 0) | (want & POLLOUT ? EV_WRITE : 0);
  if (fd != b->kio.fd || ev != (b->kio.events & (EV_READ | EV_WRITE)) || !ev_is_active(&b->kio)) {
    ev_io_stop(b->loop, &b->kio);
    if (fd >= 0 && ev) {
      ev_io_set(&b->kio, fd, ev);
      ev_io_start(b->loop, &b->kio);
    }
  }
  ev_timer_stop(b->loop, &b->ktimer);
  int t = ketch_timeout_ms(b->kc);
  if (t >= 0) {
    ev_timer_set(&b->ktimer, t / 1000.0, 0);
    ev_timer_start(b->loop, &b->ktimer);
  }
}

static void ketch_run_once(struct bridge *b) {
  b->ksubmitted = false;
  ketch_process(b->kc);
  ketch_rearm(b);
}

static void on_ketch_io(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  ketch_run_once(w->data);
}

static void on_ketch_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  ketch_run_once(w->data);
}

static void conn_flush(struct conn *c);

/* Before the loop sleeps: send what this turn submitted to ketch in one
 * write, then flush every connection that has frames to send. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct bridge *b = w->data;
  if (b->ksubmitted)
    ketch_run_once(b);
  while (b->dirty) {
    struct conn *c = b->dirty;
    b->dirty = c->next_dirty;
    c->is_dirty = false;
    conn_flush(c);
  }
}

/* ---- responses ---- */

static void pct_encode(const char *in, char *out, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t j = 0;
  for (; *in && j + 4 < n; in++) {
    unsigned char ch = (unsigned char)*in;
    if (ch < 0x20 || ch > 0x7e || ch == '%') {
      out[j++] = '%';
      out[j++] = hex[ch >> 4];
      out[j++] = hex[ch & 15];
    } else {
      out[j++] = (char)ch;
    }
  }
  out[j] = 0;
}

#define NV(n, v)                                                                                   \
  { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME }

static ssize_t resp_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user) {
  (void)user;
  struct stream *st = src->ptr;
  size_t n = 0;
  while (n < len && st->q_head) {
    struct qmsg *m = st->q_head;
    size_t k = m->len - m->off;
    if (k > len - n)
      k = len - n;
    memcpy(buf + n, m->data + m->off, k);
    m->off += k;
    n += k;
    if (m->off == m->len) {
      st->q_head = m->next;
      if (!st->q_head)
        st->q_tail = NULL;
      free(m->data);
      free(m);
    }
  }
  st->q_bytes -= n;
  st->c->resp_bytes -= n;
  if (!st->q_head) {
    if (st->responded) {
      char code[16], msg[800];
      snprintf(code, sizeof code, "%d", st->status);
      pct_encode(st->message, msg, sizeof msg);
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_nv tr[] = {NV("grpc-status", code), NV("grpc-message", msg)};
      if (nghttp2_submit_trailer(s, id, tr, msg[0] ? 2 : 1) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    } else if (n == 0) {
      st->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  if (n)
    conn_update_read(st->c);
  return (ssize_t)n;
}

static void stream_submit_headers(struct stream *st) {
  if (st->headers_sent)
    return;
  st->headers_sent = true;
  nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
  nghttp2_data_provider p = {.source.ptr = st, .read_callback = resp_read};
  nghttp2_submit_response(st->c->s, st->id, h, 2, &p);
}

static void stream_resume(struct stream *st) {
  if (st->deferred) {
    st->deferred = false;
    nghttp2_session_resume_data(st->c->s, st->id);
  }
  conn_mark_dirty(st->c);
}

/* Queues one response message (framed, owned) of a call still running. */
static void stream_send(struct stream *st, uint8_t *framed, size_t framed_len) {
  struct qmsg *m = st->responded ? NULL : malloc(sizeof *m);
  if (!m) {
    free(framed);
    return;
  }
  m->next = NULL;
  m->data = framed;
  m->len = framed_len;
  m->off = 0;
  if (st->q_tail)
    st->q_tail->next = m;
  else
    st->q_head = m;
  st->q_tail = m;
  st->q_bytes += framed_len;
  st->c->resp_bytes += framed_len;
  stream_submit_headers(st);
  stream_resume(st);
}

/* Ends a call: grpc-status and message after the queued messages, or a
 * trailers-only response when nothing was sent. */
static void stream_finish(struct stream *st, int status, const char *message) {
  struct conn *c = st->c;
  if (st->responded)
    return;
  st->responded = true;
  ev_timer_stop(c->b->loop, &st->deadline);
  st->status = status;
  snprintf(st->message, sizeof st->message, "%s", message ? message : "");
  if (status != KT_GRPC_OK)
    logf_(0, "stream %d %s: %s %s", st->id, st->path, kt_grpc_status_name(status), st->message);
  if (st->headers_sent) {
    stream_resume(st);
    return;
  }
  char code[16], msg[800];
  snprintf(code, sizeof code, "%d", status);
  pct_encode(st->message, msg, sizeof msg);
  nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                    NV("grpc-status", code), NV("grpc-message", msg)};
  nghttp2_submit_response(c->s, st->id, h, msg[0] ? 4 : 3, NULL);
  conn_mark_dirty(c);
}

/* The answer of a unary call: a message + grpc-status 0, or trailers-only
 * with the status and message. `framed` (owned) is the response message. */
static void stream_respond(struct stream *st, int status, const char *message, uint8_t *framed,
                           size_t framed_len) {
  if (st->responded) {
    free(framed);
    return;
  }
  if (status == KT_GRPC_OK && framed)
    stream_send(st, framed, framed_len);
  else
    free(framed);
  stream_finish(st, status, message);
}

/* ---- the server side of streaming calls (kt_bridge_stream_io) ---- */

static void io_send(void *arg, uint8_t *framed, size_t len) { stream_send(arg, framed, len); }

static bool io_room(void *arg, size_t n) {
  struct stream *st = arg;
  return st->q_bytes + n <= st->c->b->max_stream_queue_bytes &&
         st->c->resp_bytes + n <= MAX_OUT_BYTES;
}

static void io_finish(void *arg, int status, const char *message) {
  stream_finish(arg, status, message);
}

static void io_pending(void *arg, int delta) {
  struct stream *st = arg;
  if (delta > 0) {
    st->pending++;
    st->c->waiting++;
  } else {
    st->pending--;
    st->c->waiting--;
  }
  conn_update_read(st->c);
}

static const struct kt_bridge_stream_io stream_io = {io_send, io_room, io_finish, io_pending};

static void on_call_done(void *arg, int status, const char *message, uint8_t *framed,
                         size_t framed_len) {
  struct call_ref *ref = arg;
  struct stream *st = ref->st;
  free(ref);
  if (!st) { /* the stream is gone (reset, deadline, connection closed) */
    free(framed);
    return;
  }
  st->call = NULL;
  st->c->waiting--;
  stream_respond(st, status, message, framed, framed_len);
  conn_update_read(st->c);
}

static void stream_detach_call(struct stream *st) {
  if (st->call) {
    st->call->st = NULL;
    st->call = NULL;
    st->c->waiting--;
  }
}

/* The streaming side is done: no more io calls from it. */
static void stream_close_bs(struct stream *st) {
  if (st->bs) {
    kt_bridge_stream_close(st->bs); /* cancels its watches */
    st->bs = NULL;
    st->c->b->ksubmitted = true;
    st->c->waiting -= st->pending;
    st->pending = 0;
  }
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct stream *st = w->data;
  stream_detach_call(st);
  stream_close_bs(st);
  stream_finish(st, KT_GRPC_DEADLINE_EXCEEDED, "context deadline exceeded");
  conn_update_read(st->c);
}

/* Hands every complete request message of a streaming call to its stream,
 * keeping a partial one. */
static void stream_feed(struct stream *st) {
  size_t max = st->c->b->max_request_bytes + GRPC_OVERHEAD_BYTES;
  size_t off = 0;
  while (st->bs && !st->responded && off < st->body_len) {
    const uint8_t *msg = NULL;
    size_t msg_len = 0;
    long n = kt_grpc_frame_parse(st->body + off, st->body_len - off, max, &msg, &msg_len);
    if (n < 0) {
      stream_close_bs(st);
      stream_finish(st, KT_GRPC_INTERNAL, "grpc: compressed or invalid message prefix");
      break;
    }
    if (n == 0)
      break;
    off += (size_t)n;
    kt_bridge_stream_recv(st->bs, msg, msg_len);
    st->c->b->ksubmitted = true; /* what it submitted leaves before the loop sleeps */
  }
  if (st->responded) {
    st->body_len = 0;
  } else if (off > 0) {
    memmove(st->body, st->body + off, st->body_len - off);
    st->body_len -= off;
  }
}

/* The request is complete (END_STREAM): decode and submit it. */
static void stream_dispatch(struct stream *st) {
  struct conn *c = st->c;
  if (st->dispatched || st->responded)
    return;
  st->dispatched = true;
  const uint8_t *msg = NULL;
  size_t msg_len = 0;
  size_t max = c->b->max_request_bytes + GRPC_OVERHEAD_BYTES;
  long n = kt_grpc_frame_parse(st->body, st->body_len, max, &msg, &msg_len);
  if (n <= 0 || (size_t)n != st->body_len) {
    stream_respond(st, KT_GRPC_INTERNAL,
                   n < 0 ? "grpc: compressed or invalid message prefix"
                         : "grpc: expected exactly one request message",
                   NULL, 0);
    return;
  }
  struct call_ref *ref = malloc(sizeof *ref);
  if (!ref) {
    stream_respond(st, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  ref->st = st;
  st->call = ref;
  c->waiting++;
  c->b->ksubmitted = true;
  kt_bridge_call(c->b->kc, st->path, msg, msg_len, c->b->max_request_bytes, on_call_done, ref);
  free(st->body);
  st->body = NULL;
  st->body_len = st->body_cap = 0;
  conn_update_read(c);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  struct conn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  struct stream *st = calloc(1, sizeof *st);
  if (!st)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  st->c = c;
  st->id = f->hd.stream_id;
  st->timeout_ms = -1;
  st->not_grpc = true;
  ev_timer_init(&st->deadline, on_deadline, 0, 0);
  st->deadline.data = st;
  st->next = c->streams;
  if (c->streams)
    c->streams->prev = st;
  c->streams = st;
  nghttp2_session_set_stream_user_data(s, st->id, st);
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user) {
  (void)flags;
  (void)user;
  if (f->hd.type != NGHTTP2_HEADERS)
    return 0;
  struct stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!st)
    return 0;
  if (nlen == 5 && memcmp(name, ":path", 5) == 0) {
    if (vlen >= sizeof st->path) {
      st->bad_path = true;
      vlen = sizeof st->path - 1;
    }
    memcpy(st->path, value, vlen);
    st->path[vlen] = 0;
  } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
    st->not_grpc = !(vlen >= 16 && memcmp(value, "application/grpc", 16) == 0);
  } else if (nlen == 12 && memcmp(name, "grpc-timeout", 12) == 0) {
    st->timeout_ms = kt_bridge_parse_timeout(value, vlen);
  }
  return 0;
}

/* All request headers are in: refuse what is not a served unary call now
 * (streaming calls such as Watch never end their request stream). */
static void stream_headers_done(struct stream *st) {
  struct conn *c = st->c;
  if (st->not_grpc) {
    nghttp2_nv h[] = {NV(":status", "415"), NV("content-type", "text/plain")};
    st->responded = true;
    nghttp2_submit_response(c->s, st->id, h, 2, NULL);
    conn_mark_dirty(c);
    return;
  }
  char msg[256];
  int kind = st->bad_path ? KT_BRIDGE_UNKNOWN : kt_bridge_method(st->path, msg, sizeof msg);
  if (st->bad_path)
    snprintf(msg, sizeof msg, "malformed method name");
  if (kind != KT_BRIDGE_UNARY && kind != KT_BRIDGE_STREAM) {
    stream_respond(st, KT_GRPC_UNIMPLEMENTED, msg, NULL, 0);
    return;
  }
  if (kind == KT_BRIDGE_STREAM) {
    st->streaming = true;
    st->bs = kt_bridge_stream_open(c->b->kc, st->path, c->b->max_request_bytes, &stream_io, st);
    if (!st->bs) {
      stream_respond(st, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
      return;
    }
  }
  if (st->timeout_ms >= 0) {
    ev_timer_set(&st->deadline, st->timeout_ms / 1000.0, 0);
    ev_timer_start(c->b->loop, &st->deadline);
  }
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  (void)user;
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
    return 0;
  struct stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!st)
    return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
    stream_headers_done(st);
  if (st->streaming) {
    if (f->hd.type == NGHTTP2_DATA)
      stream_feed(st);
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->responded && st->bs) {
      if (st->body_len) {
        stream_close_bs(st);
        stream_finish(st, KT_GRPC_INTERNAL, "grpc: the stream ended inside a message");
      } else {
        kt_bridge_stream_eof(st->bs);
      }
    }
    return 0;
  }
  if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->responded)
    stream_dispatch(st);
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user) {
  (void)flags;
  struct conn *c = user;
  struct stream *st = nghttp2_session_get_stream_user_data(s, id);
  if (!st || st->responded || st->dispatched)
    return 0;
  size_t max = c->b->max_request_bytes + GRPC_OVERHEAD_BYTES + 5;
  if (st->body_len + len > max && st->streaming) {
    /* Only the partial message is kept: more than one message's worth. */
    char m[128];
    snprintf(m, sizeof m, "grpc: received message larger than max (%zu vs. %zu)",
             st->body_len + len - 5, max - 5);
    st->body_len = 0;
    stream_close_bs(st);
    stream_finish(st, KT_GRPC_RESOURCE_EXHAUSTED, m);
    return 0;
  }
  if (st->body_len + len > max) {
    char m[128];
    snprintf(m, sizeof m, "grpc: received message larger than max (%zu vs. %zu)",
             st->body_len + len - 5, max - 5);
    free(st->body);
    st->body = NULL;
    st->body_len = st->body_cap = 0;
    stream_respond(st, KT_GRPC_RESOURCE_EXHAUSTED, m, NULL, 0);
    return 0;
  }
  if (st->body_len + len > st->body_cap) {
    size_t cap = st->body_cap ? st->body_cap * 2 : 256;
    while (cap < st->body_len + len)
      cap *= 2;
    if (cap > max)
      cap = max;
    uint8_t *nb = realloc(st->body, cap);
    if (!nb)
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    st->body = nb;
    st->body_cap = cap;
  }
  memcpy(st->body + st->body_len, data, len);
  st->body_len += len;
  return 0;
}

static void stream_free(struct stream *st) {
  struct conn *c = st->c;
  stream_detach_call(st);
  stream_close_bs(st);
  ev_timer_stop(c->b->loop, &st->deadline);
  c->resp_bytes -= st->q_bytes;
  while (st->q_head) {
    struct qmsg *m = st->q_head;
    st->q_head = m->next;
    free(m->data);
    free(m);
  }
  free(st->body);
  if (st->prev)
    st->prev->next = st->next;
  else
    c->streams = st->next;
  if (st->next)
    st->next->prev = st->prev;
  free(st);
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t err, void *user) {
  (void)err;
  struct conn *c = user;
  struct stream *st = nghttp2_session_get_stream_user_data(s, id);
  if (st) {
    nghttp2_session_set_stream_user_data(s, id, NULL);
    stream_free(st);
    conn_update_read(c);
  }
  return 0;
}

/* ---- connections ---- */

static bool conn_should_read(const struct conn *c) {
  return c->waiting < MAX_STREAMS && c->resp_bytes < MAX_OUT_BYTES &&
         c->out_len - c->out_off < MAX_OUT_BYTES;
}

static void conn_update_read(struct conn *c) {
  if (c->dead)
    return;
  bool want = conn_should_read(c);
  if (want && !c->reading)
    ev_io_start(c->b->loop, &c->rio);
  else if (!want && c->reading)
    ev_io_stop(c->b->loop, &c->rio);
  c->reading = want;
}

static void conn_mark_dirty(struct conn *c) {
  if (c->is_dirty || c->dead)
    return;
  c->is_dirty = true;
  c->next_dirty = c->b->dirty;
  c->b->dirty = c;
}

static bool out_append(struct conn *c, const uint8_t *d, size_t n) {
  if (c->out_len + n > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : OUT_FLUSH * 2;
    while (cap < c->out_len + n)
      cap *= 2;
    uint8_t *nb = realloc(c->out, cap);
    if (!nb)
      return false;
    c->out = nb;
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, d, n);
  c->out_len += n;
  return true;
}

/* Moves nghttp2's frames to the socket; keeps the rest for EV_WRITE. Closes
 * the connection when both sides are done or on error. */
static void conn_flush(struct conn *c) {
  if (c->dead)
    return;
  for (;;) {
    while (c->out_len - c->out_off < OUT_FLUSH) {
      const uint8_t *d;
      ssize_t n = nghttp2_session_mem_send(c->s, &d);
      if (n < 0) {
        conn_close(c);
        return;
      }
      if (n == 0)
        break;
      if (!out_append(c, d, (size_t)n)) {
        conn_close(c);
        return;
      }
    }
    if (c->out_off == c->out_len)
      break;
    ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ev_io_start(c->b->loop, &c->wio);
        conn_update_read(c);
        return;
      }
      conn_close(c);
      return;
    }
    c->out_off += (size_t)w;
    if (c->out_off == c->out_len)
      c->out_off = c->out_len = 0;
  }
  ev_io_stop(c->b->loop, &c->wio);
  if (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)) {
    conn_close(c);
    return;
  }
  conn_update_read(c);
}

static void on_conn_read(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct conn *c = w->data;
  uint8_t buf[READ_CHUNK];
  ssize_t n = read(c->fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (n <= 0) {
    conn_close(c);
    return;
  }
  ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
  if (r < 0) {
    logf_(0, "connection %d: %s", c->fd, nghttp2_strerror((int)r));
    /* Tell the peer (GOAWAY) if the session still can, then close. */
    nghttp2_session_terminate_session(c->s, NGHTTP2_PROTOCOL_ERROR);
    const uint8_t *d;
    ssize_t k = nghttp2_session_mem_send(c->s, &d);
    if (k > 0 && write(c->fd, d, (size_t)k) < 0) {
      /* closing anyway */
    }
    conn_close(c);
    return;
  }
  conn_mark_dirty(c);
}

static void on_conn_write(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  conn_flush(w->data);
}

static void conn_close(struct conn *c) {
  if (c->dead)
    return;
  c->dead = true;
  struct ev_loop *loop = c->b->loop;
  ev_io_stop(loop, &c->rio);
  ev_io_stop(loop, &c->wio);
  while (c->streams)
    stream_free(c->streams);
  if (c->prev)
    c->prev->next = c->next;
  else
    c->b->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  nghttp2_session_del(c->s);
  close(c->fd);
  free(c->out);
  /* Still in the dirty list? unlink before freeing. */
  for (struct conn **p = &c->b->dirty; *p; p = &(*p)->next_dirty) {
    if (*p == c) {
      *p = c->next_dirty;
      break;
    }
  }
  free(c);
}

static nghttp2_session_callbacks *callbacks;

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  struct bridge *b = w->data;
  for (int i = 0; i < 64; i++) {
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        logf_(2, "accept: %s", strerror(errno));
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (!c || nghttp2_session_server_new(&c->s, callbacks, c) != 0) {
      free(c);
      close(fd);
      continue;
    }
    c->b = b;
    c->fd = fd;
    c->next = b->conns;
    if (b->conns)
      b->conns->prev = c;
    b->conns = c;
    ev_io_init(&c->rio, on_conn_read, fd, EV_READ);
    ev_io_init(&c->wio, on_conn_write, fd, EV_WRITE);
    c->rio.data = c->wio.data = c;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 3);
    nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    conn_update_read(c);
    conn_mark_dirty(c);
    (void)loop;
  }
}

/* ---- main ---- */

static int listen_on(const char *addr) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= sizeof host)
    return -1;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  char *h = host;
  if (h[0] == '[') { /* [::1]:2379 */
    h++;
    h[strlen(h) - 1] = 0;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *res;
  if (getaddrinfo(*h ? h : NULL, colon + 1, &hints, &res) != 0)
    return -1;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents) {
  (void)w;
  (void)revents;
  ev_break(loop, EVBREAK_ALL);
}

static void usage(FILE *f) {
  fprintf(f, "usage: ketch-grpc [--listen-addr HOST:PORT] [--endpoints LIST]\n"
             "                  [--max-request-bytes N] [--max-stream-queue-bytes N]\n"
             "                  [--log-level debug|info|warn|error]\n"
             "etcd's v3 gRPC API (KV, Watch, Lease, Cluster.MemberList, Maintenance, v3lock,\n"
             "v3election) in front of a ketch cluster.\n"
             "  --listen-addr        gRPC (h2c) listen address (default 127.0.0.1:2379)\n"
             "  --endpoints          ketch members, comma separated (default 127.0.0.1:2479)\n"
             "  --max-request-bytes  largest write request accepted (default 1572864)\n"
             "  --max-stream-queue-bytes  responses a stream may queue for a client that\n"
             "                       does not read; a watch or snapshot beyond it is\n"
             "                       cancelled\n"
             "                       (default 8388608)\n"
             "  --log-level          debug, info, warn or error (default info)\n");
}

int main(int argc, char **argv) {
  const char *listen_addr = "127.0.0.1:2379", *endpoints = "127.0.0.1:2479";
  size_t max_req = 1572864, max_queue = 8u << 20;
  static const struct option opts[] = {
      {"listen-addr", required_argument, 0, 'l'},
      {"endpoints", required_argument, 0, 'e'},
      {"max-request-bytes", required_argument, 0, 'm'},
      {"max-stream-queue-bytes", required_argument, 0, 'q'},
      {"log-level", required_argument, 0, 'v'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  int o;
  while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (o) {
    case 'l':
      listen_addr = optarg;
      break;
    case 'e':
      endpoints = optarg;
      break;
    case 'm': {
      char *end;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (*end || v == 0 || v > (64u << 20)) {
        fprintf(stderr, "ketch-grpc: --max-request-bytes: want 1..%u\n", 64u << 20);
        return 2;
      }
      max_req = (size_t)v;
      break;
    }
    case 'q': {
      char *end;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (*end || v < 1024 || v > (1u << 30)) {
        fprintf(stderr, "ketch-grpc: --max-stream-queue-bytes: want 1024..%u\n", 1u << 30);
        return 2;
      }
      max_queue = (size_t)v;
      break;
    }
    case 'v':
      if (!strcmp(optarg, "debug"))
        log_level = 0;
      else if (!strcmp(optarg, "info"))
        log_level = 1;
      else if (!strcmp(optarg, "warn"))
        log_level = 2;
      else if (!strcmp(optarg, "error"))
        log_level = 3;
      else {
        fprintf(stderr, "ketch-grpc: --log-level: want debug, info, warn or error\n");
        return 2;
      }
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind != argc) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  struct bridge b = {.max_request_bytes = max_req, .max_stream_queue_bytes = max_queue};
  b.loop = EV_DEFAULT;
  ketch_options ko;
  ketch_options_init(&ko);
  ko.nonblocking_open = true;
  ko.max_outstanding = 65536;
  char err[512] = "";
  if (ketch_open(&b.kc, endpoints, &ko, err, sizeof err) != 0) {
    fprintf(stderr, "ketch-grpc: --endpoints %s: %s\n", endpoints, err);
    return 2;
  }
  int lfd = listen_on(listen_addr);
  if (lfd < 0) {
    fprintf(stderr, "ketch-grpc: cannot listen on %s: %s\n", listen_addr, strerror(errno));
    return 1;
  }
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);

  ev_io_init(&b.kio, on_ketch_io, -1, 0);
  b.kio.data = &b;
  ev_timer_init(&b.ktimer, on_ketch_timer, 0, 0);
  b.ktimer.data = &b;
  ev_prepare_init(&b.prep, on_prepare);
  b.prep.data = &b;
  ev_prepare_start(b.loop, &b.prep);
  ev_io_init(&b.lio, on_accept, lfd, EV_READ);
  b.lio.data = &b;
  ev_io_start(b.loop, &b.lio);
  ev_signal sint, sterm;
  ev_signal_init(&sint, on_signal, SIGINT);
  ev_signal_init(&sterm, on_signal, SIGTERM);
  ev_signal_start(b.loop, &sint);
  ev_signal_start(b.loop, &sterm);
  ketch_run_once(&b);
  logf_(1, "serving etcd v3 gRPC on %s, ketch members %s", listen_addr, endpoints);
  ev_run(b.loop, 0);
  logf_(1, "stopping");
  ev_io_stop(b.loop, &b.lio);
  close(lfd);
  while (b.conns) /* streams go first: their watches are cancelled */
    conn_close(b.conns);
  ketch_close(b.kc); /* pending calls complete, finding their streams gone */
  nghttp2_session_callbacks_del(callbacks);
  return 0;
}
