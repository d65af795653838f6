/* tools/grpc-bridge/bridge_main.c — ketch-grpc's server: flags, the event
 * loops (--loops; one thread and one libev loop each, bridge.h "Event
 * loops"), the listener and the hand-out of accepted connections, one
 * nghttp2 server session per connection (h2c with prior knowledge), gRPC
 * framing/trailers/deadlines, unary and streaming calls, back pressure, and
 * the libketch handles each loop drives (see bridge.h).
 *
 * A struct bridge is one loop: everything reachable from it (connections,
 * streams, upstreams, timers) is touched only by that loop's thread. The
 * exceptions are named where they are: the inbox (accepted sockets handed
 * from loop 0, under inbox_mu), `stop`, and the n_conns gauge read by
 * /metrics.
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
 * a watch delivery beyond that cancels the watch (bridge.h).
 *
 * Transport (net/tls.h, the table the members use too): a connection is a
 * struct kt_io, plain TCP (h2c) or TLS when --cert-file/--key-file or
 * --auto-tls are given. TLS offers ALPN "h2" (a client that offers ALPN
 * without h2 is refused; none at all is h2 by prior knowledge), verifies
 * client certificates with --trusted-ca-file / --client-cert-auth, and
 * starts at most KT_TLS_HANDSHAKES_PER_TURN handshakes per loop turn (the
 * rest wait on a FIFO drained after polling). Nothing but the connection
 * struct and OpenSSL's SSL exists before the handshake is done. A plaintext
 * client on the TLS listener and a TLS client on the plaintext one are
 * closed with one warning line naming them.
 *
 * Upstreams: the calls of a connection go to one libketch handle (an
 * "upstream"). Connections without a verified client certificate share the
 * default one; a verified certificate's Common Name gets an upstream of its
 * own whose HELLO names that identity to the member (net/PROTOCOL.md), when
 * the bridge itself presents a client certificate to the members
 * (--cert/--key: members believe an identity only from such a connection).
 * At most MAX_UPSTREAMS identities at once; one unused for UPSTREAM_IDLE_S is
 * closed. Toward the members: TLS for https:// endpoints, or for endpoints
 * without a scheme when --cacert, --cert or --key is given (etcd's
 * grpc-proxy flags). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "bridge.h"
#include "bridge_h2mem.h"
#include "../grpc/grpc_client.h"
#include "../../core/node.h" /* struct kt_node_health, for /health */
#include "../../net/http.h"
#include "../../net/sock.h"
#include "../../net/tls.h"
#include "../../net/tls_reload.h"

#define MAX_STREAMS 1024
#define GRPC_OVERHEAD_BYTES (512u * 1024)
#define MAX_OUT_BYTES (32u << 20)
#define READ_CHUNK 65536
#define OUT_FLUSH 65536
#define MAX_UPSTREAMS 256
#define UPSTREAM_IDLE_S 60.0
#define MAX_TOKEN_UPSTREAMS 4096   /* authenticated sessions at once */
#define TOKEN_IDLE_S 300.0         /* etcd's --auth-token-ttl default */
#define TOKEN_MAX_OUTSTANDING 1024 /* a session's requests in flight */
#define TOKEN_HEADER_MAX 1024
#define SPARE_BODY_BYTES 1024 /* a spare stream keeps a request buffer this small */
#define STREAM_SPARES 64      /* a stream is ~2 KB: calloc and free per call cost ~3% of a call */

static int log_level = 1; /* 0 debug, 1 info, 2 warn, 3 error; set before the loops */
static void logf_(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(int lvl, const char *fmt, ...) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  if (lvl < log_level)
    return;
  char line[1024]; /* one write per line: the loops' lines do not interleave */
  int n = snprintf(line, sizeof line, "ketch-grpc %s: ", names[lvl]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len =
      (size_t)n + (m < 0                                     ? 0
                   : (size_t)m < sizeof line - (size_t)n - 1 ? (size_t)m
                                                             : sizeof line - (size_t)n - 2);
  line[len++] = '\n';
  fwrite(line, 1, len, stderr);
}

/* One libketch handle driven from the loop (see the top comment). */
struct upstream {
  struct bridge *b;
  ketch_client *kc;
  ev_io kio;
  ev_timer ktimer;
  bool ksubmitted;
  char *identity; /* NULL: the default upstream */
  bool session;   /* an authenticated session (see "Auth sessions" below) */
  char *token;    /* the session's token; NULL while its Authenticate runs */
  bool dead;      /* a session whose Authenticate failed: freed by the reaper */
  size_t users;   /* connections (and streams, for a token's) using it */
  ev_tstamp unused_since;
  struct upstream *next;
};

#define INBOX_CAP 256 /* accepted sockets waiting for their loop */

struct inbox_conn {
  int fd;
  char peer[64];
};

struct bridge {
  struct ev_loop *loop;
  int idx;       /* 0: the main thread's, which also accepts */
  pthread_t th;  /* idx > 0 */
  ev_async wake; /* the inbox has sockets, or stop was set */
  pthread_mutex_t inbox_mu;
  struct inbox_conn inbox[INBOX_CAP]; /* under inbox_mu */
  size_t inbox_n;                     /* under inbox_mu */
  _Atomic bool stop;                  /* set by loop 0 at shutdown */
  _Atomic size_t n_conns;             /* open connections: written here, read by /metrics */
  struct upstream *up;                /* the default first, then one per identity or token */
  size_t n_identities, n_tokens;
  ketch_options ko; /* for new upstreams (identity set per upstream) */
  const char *endpoints;
  bool forward_identity;          /* the bridge presents a client certificate to members */
  struct kt_tls_ctx *tls;         /* the listener's, or NULL (h2c) */
  struct kt_tls_budget hs_budget; /* TLS handshakes: per turn, share of the time */
  ev_timer hs_w;                  /* waiting handshakes: when the budget has time again */
  struct conn *hs_head, *hs_tail; /* connections waiting for a handshake turn */
  ev_check turn_w;
  ev_idle spin_w;
  ev_timer reap_w;
  ev_prepare prep;
  ev_io lio;
  size_t max_request_bytes;
  size_t max_stream_queue_bytes;
  const char *ns; /* --namespace, NULL when none (bridge_ns.c) */
  size_t ns_len;
  const char *advertise;          /* --advertise-client-url, NULL: MemberList is the cluster's */
  ev_timer sync_w;                /* --endpoints-auto-sync-interval */
  bool sync_busy;                 /* a member list for it in flight */
  char *synced;                   /* the endpoints last synced (owned), or NULL */
  const char *resolver_prefix;    /* --resolver-prefix (bridge_reg.c), or NULL */
  struct conn *dirty;             /* connections with frames to send, flushed in prep */
  struct conn *conns;             /* every open connection */
  size_t cache_size, cache_bytes; /* --cache-size, --cache-max-bytes */
  double cache_stale_s;           /* --cache-max-staleness */
  double sync_s;                  /* --endpoints-auto-sync-interval */
  double progress_s;              /* --experimental-watch-progress-notify-interval */
};

struct stream;

struct conn {
  struct bridge *b;
  struct upstream *up; /* NULL until the TLS handshake is done */
  struct kt_io io;
  bool write_blocked;  /* output the socket did not take */
  bool hs_waiting;     /* on the handshake FIFO */
  ev_tstamp opened_at; /* accepted at (the TLS handshake deadline) */
  struct conn *hs_next;
  char peer[64];
  ev_io rio, wio;
  nghttp2_session *s;
  uint8_t *out;
  size_t out_len, out_off, out_cap;
  struct stream *streams; /* all open streams (doubly linked) */
  size_t waiting;         /* calls submitted to ketch, not answered */
  size_t resp_bytes;      /* response bytes not yet taken by nghttp2 */
  bool reading, is_dirty, dead;
  bool seen_bytes; /* its first read was looked at (http1) */
  struct conn *next_dirty;
  struct conn *prev, *next; /* b->conns */
  struct stream *spare;     /* freed streams kept for its next calls (spare->next) */
  size_t n_spare;           /* at most STREAM_SPARES */
  struct stream *cur;       /* the stream last made or looked up (conn_stream), or NULL */
};

/* One queued response message. */
struct qmsg {
  struct qmsg *next;
  uint8_t *data;
  size_t len, off;
};

struct stream {
  struct conn *c;
  struct upstream *up; /* a token's session (holds a use), else NULL: c->up */
  int32_t id;
  struct stream *prev, *next;
  bool bad_path, not_grpc, dispatched;
  bool streaming;     /* a streaming method (bs is its bridge side) */
  bool headers_sent;  /* response HEADERS submitted (with the data provider) */
  bool responded;     /* finished: trailers follow the queue */
  bool deferred;      /* the data provider waits for a message */
  bool want_room;     /* bs asked to hear when its queue drains */
  int64_t timeout_ms; /* -1: none */
  ev_timer deadline;
  uint8_t *body; /* request bytes not yet consumed */
  size_t body_len, body_cap;
  struct call_ref *call; /* the pending unary ketch call, if any */
  kt_bridge_stream *bs;  /* the streaming call, if any */
  size_t pending;        /* streaming: its calls pending on ketch */
  struct qmsg *q_head, *q_tail;
  struct qmsg q0; /* a stream's first queued message (a unary answer) needs no malloc */
  bool q0_busy;
  size_t q_bytes;                     /* queued response bytes not yet taken by nghttp2 */
  int status;                         /* final grpc-status, once responded */
  struct kt_bridge_method_stat *stat; /* a served method's counters (/metrics) */
  struct kt_bridge_req_hdrs hdrs;     /* its request headers' checks */
  /* The strings last: a reused stream clears only what is above them. */
  char token[TOKEN_HEADER_MAX]; /* the `token` metadata, "" when none */
  char path[256];
  char message[512];
};

/* A call outlives its stream if the client resets it: the ketch callback then
 * finds st == NULL and only frees. */
struct call_ref {
  struct stream *st;
  struct call_ref *next_spare;
};

/* Freed call_refs kept for the loop's next calls (each loop its own). */
#define MAX_SPARE_REFS 256
static KT_LOOP_LOCAL struct call_ref *spare_refs;
static KT_LOOP_LOCAL int n_spare_refs;

static struct call_ref *call_ref_new(void) {
  struct call_ref *r = spare_refs;
  if (!r)
    return malloc(sizeof *r);
  spare_refs = r->next_spare;
  n_spare_refs--;
  return r;
}

static void call_ref_free(struct call_ref *r) {
  if (n_spare_refs >= MAX_SPARE_REFS) {
    free(r);
    return;
  }
  r->next_spare = spare_refs;
  spare_refs = r;
  n_spare_refs++;
}

static void conn_close(struct conn *c);
static void conn_mark_dirty(struct conn *c);
static nghttp2_session_callbacks *callbacks;
static nghttp2_option *h2opt;
static void conn_update_read(struct conn *c);

/* ---- libketch in the loop ---- */

static void ketch_rearm(struct upstream *u) {
  struct ev_loop *loop = u->b->loop;
  int fd = ketch_fd(u->kc);
  short want = ketch_events(u->kc);
  int ev = (want & POLLIN ? EV_READ : 0) | (want & POLLOUT ? EV_WRITE : 0);
  if (fd != u->kio.fd || ev != (u->kio.events & (EV_READ | EV_WRITE)) || !ev_is_active(&u->kio)) {
    ev_io_stop(loop, &u->kio);
    if (fd >= 0 && ev) {
      ev_io_set(&u->kio, fd, ev);
      ev_io_start(loop, &u->kio);
    }
  }
  ev_timer_stop(loop, &u->ktimer);
  int t = ketch_timeout_ms(u->kc);
  if (t >= 0) {
    ev_timer_set(&u->ktimer, t / 1000.0, 0);
    ev_timer_start(loop, &u->ktimer);
  }
}

static void ketch_run_once(struct upstream *u) {
  u->ksubmitted = false;
  ketch_process(u->kc);
  ketch_rearm(u);
}

static bool conn_flush(struct conn *c);
static void conn_wake_streams(struct conn *c);

/* Before the loop sleeps: send what this turn submitted to ketch in one
 * write, then flush every connection that has frames to send. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct bridge *b = w->data;
  kt_tls_budget_turn(&b->hs_budget, ev_time());
  for (struct upstream *u = b->up; u; u = u->next)
    if (u->ksubmitted)
      ketch_run_once(u);
  while (b->dirty) {
    struct conn *c = b->dirty;
    b->dirty = c->next_dirty;
    c->is_dirty = false;
    if (conn_flush(c))
      conn_wake_streams(c);
  }
}

/* ---- /health, /livez, /readyz on --metrics-addr ---- */

/* As etcd's grpc-proxy: healthy when a linearizable Get of "health" through
 * the cluster succeeds within 1 s (net/http.h suspends the request meanwhile). */
struct hprobe {
  struct bridge *b;
  void (*done)(void *ctx, int code, const char *why);
  void *ctx;
  ev_timer t;
  bool answered;
};

static void hprobe_answer(struct hprobe *p, int code, const char *why) {
  if (p->answered)
    return;
  p->answered = true;
  ev_timer_stop(p->b->loop, &p->t);
  p->done(p->ctx, code, why);
}

static void hprobe_cb(void *arg, int err, const ketch_result *res) {
  (void)res;
  struct hprobe *p = arg;
  if (err == KETCH_EPERMDENIED) /* the cluster answered (auth on): healthy, as etcd */
    err = 0;
  hprobe_answer(p, err, err ? ketch_strerror(err) : "");
  free(p); /* libketch calls back once, at the latest from ketch_close */
}

static void hprobe_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  hprobe_answer(w->data, KETCH_ETIMEOUT, "no answer from the cluster within 1 s");
}

static void bridge_probe(void *arg, void (*done)(void *ctx, int code, const char *why), void *ctx) {
  struct bridge *b = arg;
  struct upstream *u = b->up; /* the default one */
  struct hprobe *p = calloc(1, sizeof *p);
  if (!p) {
    done(ctx, KETCH_ENOMEM, "out of memory");
    return;
  }
  *p = (struct hprobe){.b = b, .done = done, .ctx = ctx};
  ketch_range_req req = {.key = "health", .key_len = 6};
  int err = ketch_range_async(u->kc, &req, hprobe_cb, p);
  if (err) {
    free(p);
    done(ctx, err, ketch_strerror(err));
    return;
  }
  u->ksubmitted = true;
  ev_timer_init(&p->t, hprobe_timeout, 1.0, 0.);
  p->t.data = p;
  ev_timer_start(b->loop, &p->t);
}

static void bridge_health(void *arg, struct kt_node_health *h) {
  (void)arg;
  memset(h, 0, sizeof *h);
  h->leader = 1; /* the bridge knows no leader: the probe's read is what tells */
  h->serving = true;
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

/* grpc-status's value (every call ends with one), a static string: the
 * codes gRPC defines; any other (none is made) goes out as UNKNOWN. */
static const char *status_str(int status) {
  static const char *const codes[] = {"0", "1",  "2",  "3",  "4",  "5",  "6",  "7", "8",
                                      "9", "10", "11", "12", "13", "14", "15", "16"};
  return status >= 0 && status <= 16 ? codes[status] : codes[KT_GRPC_UNKNOWN];
}

#define NV(n, v)                                                                                   \
  { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME }
/* ... a value that outlives the frame (a literal, status_str's codes): not copied */
#define NV_STATIC(n, v)                                                                            \
  {                                                                                                \
    (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                                      \
        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                               \
  }

static struct qmsg *qmsg_new(struct stream *st) {
  if (st->q0_busy)
    return malloc(sizeof(struct qmsg));
  st->q0_busy = true;
  return &st->q0;
}

static void qmsg_free(struct stream *st, struct qmsg *m) {
  if (m == &st->q0)
    st->q0_busy = false;
  else
    free(m);
}

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
      qmsg_free(st, m);
    }
  }
  st->q_bytes -= n;
  st->c->resp_bytes -= n;
  if (!st->q_head) {
    if (st->responded) {
      char msg[800];
      const char *code = status_str(st->status);
      pct_encode(st->message, msg, sizeof msg);
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_nv tr[] = {NV_STATIC("grpc-status", code), NV("grpc-message", msg)};
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
  nghttp2_nv h[] = {NV_STATIC(":status", "200"), NV_STATIC("content-type", "application/grpc")};
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
  struct qmsg *m = st->responded ? NULL : qmsg_new(st);
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
  kt_bridge_stat_done(st->stat, status);
  st->stat = NULL;
  if (message && *message)
    snprintf(st->message, sizeof st->message, "%s", message);
  else
    st->message[0] = 0;
  if (status != KT_GRPC_OK)
    logf_(0, "stream %d %s: %s %s", st->id, st->path, kt_grpc_status_name(status), st->message);
  if (st->headers_sent) {
    stream_resume(st);
    return;
  }
  char msg[800];
  const char *code = status_str(status);
  pct_encode(st->message, msg, sizeof msg);
  nghttp2_nv h[] = {NV_STATIC(":status", "200"), NV_STATIC("content-type", "application/grpc"),
                    NV_STATIC("grpc-status", code), NV("grpc-message", msg)};
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

/* A response of a namespaced bridge loses the prefix (NULL: dropped, never
 * sent with keys of the whole cluster). */
static uint8_t *ns_response(const struct stream *st, uint8_t *framed, size_t *len) {
  const struct bridge *b = st->c->b;
  uint8_t *out = NULL;
  size_t out_len = 0;
  int rc = kt_bridge_ns_response(b->ns, b->ns_len, st->path, framed, *len, &out, &out_len);
  if (rc == 0)
    return framed;
  free(framed);
  if (rc < 0)
    logf_(2, "%s: a response could not be moved out of the namespace: dropped", st->path);
  *len = out_len;
  return out;
}

static void io_send(void *arg, uint8_t *framed, size_t len) {
  struct stream *st = arg;
  kt_bridge_cache_seen(framed, len); /* a revision a client saw */
  if (st->c->b->ns && !(framed = ns_response(st, framed, &len)))
    return;
  stream_send(st, framed, len);
}

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

static void io_want_room(void *arg) {
  struct stream *st = arg;
  st->want_room = true;
}

static const struct kt_bridge_stream_io stream_io = {io_send, io_room, io_finish, io_pending,
                                                     io_want_room};

/* Streams that asked (io_want_room) and have room again: told so. */
static void conn_wake_streams(struct conn *c) {
  for (struct stream *st = c->streams; st && !c->dead; st = st->next)
    if (st->want_room && st->bs && st->q_bytes <= c->b->max_stream_queue_bytes / 2 &&
        c->resp_bytes <= MAX_OUT_BYTES / 2) {
      st->want_room = false;
      kt_bridge_stream_room(st->bs);
    }
}

static void on_call_done(void *arg, int status, const char *message, uint8_t *framed,
                         size_t framed_len) {
  struct call_ref *ref = arg;
  struct stream *st = ref->st;
  call_ref_free(ref);
  if (!st) { /* the stream is gone (reset, deadline, connection closed) */
    free(framed);
    return;
  }
  st->call = NULL;
  st->c->waiting--;
  if (status == KT_GRPC_OK && framed)
    kt_bridge_cache_seen(framed, framed_len); /* a revision a client saw */
  if (status == KT_GRPC_OK && framed && st->c->b->ns &&
      !(framed = ns_response(st, framed, &framed_len))) {
    status = KT_GRPC_INTERNAL;
    message = "ketch-grpc: out of memory";
  }
  stream_respond(st, status, message, framed, framed_len);
  conn_update_read(st->c);
}

static struct upstream *stream_up(const struct stream *st) { return st->up ? st->up : st->c->up; }

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
    stream_up(st)->ksubmitted = true;
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
  /* etcd's KV, Lease and Watch servers map the context's error to
   * DeadlineExceeded; its lock and election servers return it as it is,
   * which gRPC answers as Unknown (the message is the same). */
  bool recipe = !strncmp(st->path, "/v3lockpb.", 10) || !strncmp(st->path, "/v3electionpb.", 14);
  stream_finish(st, recipe ? KT_GRPC_UNKNOWN : KT_GRPC_DEADLINE_EXCEEDED,
                "context deadline exceeded");
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
    uint8_t *nmsg = NULL;
    if (st->c->b->ns) {
      size_t nlen = 0;
      int rc = kt_bridge_ns_request(st->c->b->ns, st->c->b->ns_len, st->path, msg, msg_len, &nmsg,
                                    &nlen);
      if (rc < 0) {
        stream_close_bs(st);
        stream_finish(st, rc == -1 ? KT_GRPC_INTERNAL : KT_GRPC_RESOURCE_EXHAUSTED,
                      rc == -1 ? "grpc: error unmarshalling request: malformed protobuf"
                               : "ketch-grpc: out of memory");
        break;
      }
      if (nmsg)
        msg = nmsg, msg_len = nlen;
    }
    kt_bridge_stream_recv(st->bs, msg, msg_len);
    free(nmsg);
    stream_up(st)->ksubmitted = true; /* what it submitted leaves before the loop sleeps */
  }
  if (st->responded) {
    st->body_len = 0;
  } else if (off > 0) {
    memmove(st->body, st->body + off, st->body_len - off);
    st->body_len -= off;
  }
}

static void authenticate(struct stream *st, const uint8_t *msg, size_t len, struct call_ref *ref);
static struct upstream *upstream_for_token(struct bridge *b, const char *token, struct conn *c);

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
  uint8_t *nmsg = NULL;
  if (c->b->ns) {
    size_t nlen = 0;
    int rc = kt_bridge_ns_request(c->b->ns, c->b->ns_len, st->path, msg, msg_len, &nmsg, &nlen);
    if (rc < 0) {
      stream_respond(st, rc == -1 ? KT_GRPC_INTERNAL : KT_GRPC_RESOURCE_EXHAUSTED,
                     rc == -1 ? "grpc: error unmarshalling request: malformed protobuf"
                              : "ketch-grpc: out of memory",
                     NULL, 0);
      return;
    }
    if (nmsg)
      msg = nmsg, msg_len = nlen;
  }
  struct call_ref *ref = call_ref_new();
  if (!ref) {
    free(nmsg);
    stream_respond(st, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  ref->st = st;
  st->call = ref;
  c->waiting++;
  if (kt_bridge_auth_method(st->path) == KETCH_OP_AUTHENTICATE) {
    authenticate(st, msg, msg_len, ref);
  } else if (c->b->advertise && !strcmp(st->path, "/etcdserverpb.Cluster/MemberList")) {
    stream_up(st)->ksubmitted = true;
    kt_bridge_reg_member_list(stream_up(st)->kc, c->b->ns, c->b->resolver_prefix, c->b->advertise,
                              on_call_done, ref);
  } else {
    struct upstream *u = stream_up(st);
    kt_bridge_call(u->kc, st->path, msg, msg_len, c->b->max_request_bytes, on_call_done, ref);
    /* Answered inside the call (a cache hit, a request refused before ketch:
     * bridge.h's invariant), nothing was submitted, so ketch_process (a read
     * that finds nothing) need not run for it; the cache flags its own
     * probes and watch. */
    if (st->call == ref)
      u->ksubmitted = true;
  }
  free(nmsg);
  st->body_len = 0; /* its buffer stays for the stream's next use (stream_free) */
  conn_update_read(c);
}

/* ---- nghttp2 callbacks ---- */

/* Stream id's stream, or NULL: most often the one on_begin_headers just
 * made or the last one asked for (a request's headers, its DATA, its end),
 * which takes no lookup in nghttp2's stream map. */
static struct stream *conn_stream(struct conn *c, int32_t id) {
  if (c->cur && c->cur->id == id)
    return c->cur;
  struct stream *st = nghttp2_session_get_stream_user_data(c->s, id);
  if (st)
    c->cur = st;
  return st;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  struct conn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  struct stream *st = c->spare;
  if (st) {
    c->spare = st->next;
    c->n_spare--;
    uint8_t *body = st->body; /* a small request buffer is kept (stream_free) */
    size_t body_cap = st->body_cap;
    memset(st, 0, offsetof(struct stream, token));
    st->body = body;
    st->body_cap = body_cap;
    st->token[0] = st->path[0] = st->message[0] = 0;
  } else if (!(st = calloc(1, sizeof *st))) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
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
  c->cur = st;
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user) {
  (void)s;
  (void)flags;
  struct conn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0; /* a request's trailers: nothing in them is read */
  struct stream *st = conn_stream(c, f->hd.stream_id);
  if (!st)
    return 0;
  switch (kt_bridge_req_header(&st->hdrs, name, nlen, value, vlen)) {
  case KT_HDR_PATH:
    if (vlen >= sizeof st->path) {
      st->bad_path = true;
      vlen = sizeof st->path - 1;
    }
    memcpy(st->path, value, vlen);
    st->path[vlen] = 0;
    break;
  case KT_HDR_CONTENT_TYPE:
    st->not_grpc = !(vlen >= 16 && memcmp(value, "application/grpc", 16) == 0);
    break;
  case KT_HDR_TIMEOUT:
    st->timeout_ms = kt_bridge_parse_timeout(value, vlen);
    break;
  case KT_HDR_TOKEN: {
    /* etcd clients' auth token; one that does not fit is no token of ours */
    size_t n = vlen < sizeof st->token ? vlen : 0;
    memcpy(st->token, value, n);
    st->token[n] = 0;
    break;
  }
  default:
    break;
  }
  return 0;
}

/* All request headers are in: refuse what is not a served unary call now
 * (streaming calls such as Watch never end their request stream). */
static void stream_headers_done(struct stream *st) {
  struct conn *c = st->c;
  const char *why;
  int req = kt_bridge_req_check(&st->hdrs, &why);
  if (req == KT_REQ_MALFORMED) { /* RFC 9113 8.1.1: a stream error */
    logf_(0, "connection %s stream %d: malformed request (%s): reset with PROTOCOL_ERROR", c->peer,
          st->id, why);
    st->responded = true;
    nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_PROTOCOL_ERROR);
    conn_mark_dirty(c);
    return;
  }
  if (st->not_grpc) {
    nghttp2_nv h[] = {NV(":status", "415"), NV("content-type", "text/plain")};
    st->responded = true;
    nghttp2_submit_response(c->s, st->id, h, 2, NULL);
    conn_mark_dirty(c);
    return;
  }
  char msg[256];
  if (req == KT_REQ_NOT_POST) { /* grpc-go's answer, with its code */
    snprintf(msg, sizeof msg, "ketch-grpc: :method %s: a gRPC call is a POST", st->hdrs.method);
    stream_respond(st, KT_GRPC_INTERNAL, msg, NULL, 0);
    return;
  }
  int kind = st->bad_path ? KT_BRIDGE_UNKNOWN : kt_bridge_method(st->path, msg, sizeof msg);
  if (st->bad_path)
    snprintf(msg, sizeof msg, "malformed method name");
  if (kind != KT_BRIDGE_UNARY && kind != KT_BRIDGE_STREAM) {
    stream_respond(st, KT_GRPC_UNIMPLEMENTED, msg, NULL, 0);
    return;
  }
  st->stat = kt_bridge_stat_start(st->path, kind == KT_BRIDGE_STREAM);
  if (c->b->ns && kt_bridge_ns_refused(st->path)) {
    stream_respond(st, KT_GRPC_PERMISSION_DENIED,
                   "ketch-grpc: Snapshot is refused under --namespace (it holds every tenant's "
                   "keys)",
                   NULL, 0);
    return;
  }
  if (st->token[0] && kt_bridge_auth_method(st->path) != KETCH_OP_AUTHENTICATE) {
    st->up = upstream_for_token(c->b, st->token, c);
    if (!st->up) {
      stream_respond(st, KT_GRPC_RESOURCE_EXHAUSTED,
                     "ketch-grpc: too many authenticated sessions at once", NULL, 0);
      return;
    }
    st->up->users++;
  }
  if (kind == KT_BRIDGE_STREAM) {
    st->streaming = true;
    st->bs =
        kt_bridge_stream_open(stream_up(st)->kc, st->path, c->b->max_request_bytes, &stream_io, st);
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
  (void)s;
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
    return 0;
  struct stream *st = conn_stream(user, f->hd.stream_id);
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
  (void)s;
  (void)flags;
  struct conn *c = user;
  struct stream *st = conn_stream(c, id);
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
  if (c->cur == st)
    c->cur = NULL;
  stream_detach_call(st);
  stream_close_bs(st);
  ev_timer_stop(c->b->loop, &st->deadline);
  c->resp_bytes -= st->q_bytes;
  while (st->q_head) {
    struct qmsg *m = st->q_head;
    st->q_head = m->next;
    free(m->data);
    qmsg_free(st, m);
  }
  if (st->up && --st->up->users == 0)
    st->up->unused_since = ev_now(c->b->loop);
  if (st->prev)
    st->prev->next = st->next;
  else
    c->streams = st->next;
  if (st->next)
    st->next->prev = st->prev;
  if (!c->dead && c->n_spare < STREAM_SPARES) {
    if (st->body_cap > SPARE_BODY_BYTES) {
      free(st->body);
      st->body = NULL;
      st->body_cap = 0;
    }
    st->next = c->spare;
    c->spare = st;
    c->n_spare++;
    return;
  }
  free(st->body);
  free(st);
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t err, void *user) {
  (void)s;
  (void)err;
  struct conn *c = user;
  struct stream *st = conn_stream(c, id);
  if (st) { /* nghttp2 forgets the stream (and its user data) after this */
    stream_free(st);
    conn_update_read(c);
  }
  return 0;
}

/* ---- connections ---- */

static bool conn_should_read(const struct conn *c) {
  return c->up && c->waiting < MAX_STREAMS && c->resp_bytes < MAX_OUT_BYTES &&
         c->out_len - c->out_off < MAX_OUT_BYTES;
}

/* The one place that decides which events a connection waits for. */
static void conn_arm(struct conn *c) {
  if (c->dead)
    return;
  int ev = c->hs_waiting ? 0 : kt_io_events(&c->io, c->reading, c->write_blocked);
  kt_sock_arm(c->b->loop, &c->rio, &c->wio, ev);
}

static void kick(struct bridge *b) {
  if (!ev_is_active(&b->spin_w))
    ev_idle_start(b->loop, &b->spin_w);
}

static void conn_read(struct conn *c);

/* Waiting handshakes: at the next turn if only its step count is spent (the
 * loop keeps turning), else when the time budget has credit again. */
static void hs_wake_later(struct bridge *b) {
  double w = kt_tls_budget_wait_s(&b->hs_budget);
  if (w <= 0) {
    kick(b);
  } else if (!ev_is_active(&b->hs_w)) {
    ev_timer_set(&b->hs_w, w, 0);
    ev_timer_start(b->loop, &b->hs_w);
  }
}

static void on_hs_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents; /* it woke the loop: on_turn runs the handshakes */
}

static void conn_update_read(struct conn *c) {
  if (c->dead)
    return;
  bool want = conn_should_read(c);
  bool was = c->reading;
  c->reading = want;
  conn_arm(c);
  if (want && !was && kt_io_pending(&c->io))
    kick(c->b); /* bytes TLS read ahead: the turn watcher reads them */
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
static bool conn_flush(struct conn *c) {
  if (c->dead || !c->up)
    return false;
  for (;;) {
    while (c->out_len - c->out_off < OUT_FLUSH) {
      const uint8_t *d;
      ssize_t n = nghttp2_session_mem_send(c->s, &d);
      if (n < 0) {
        conn_close(c);
        return false;
      }
      if (n == 0)
        break;
      if (!out_append(c, d, (size_t)n)) {
        conn_close(c);
        return false;
      }
    }
    if (c->out_off == c->out_len)
      break;
    struct kt_err e = {0};
    ssize_t w = kt_io_write(&c->io, c->out + c->out_off, c->out_len - c->out_off, &e);
    if (w == KT_IO_AGAIN) {
      c->write_blocked = true;
      conn_update_read(c);
      return true;
    }
    if (w < 0) {
      logf_(0, "connection %s: %s", c->peer, e.msg);
      conn_close(c);
      return false;
    }
    c->out_off += (size_t)w;
    if (c->out_off == c->out_len)
      c->out_off = c->out_len = 0;
  }
  c->write_blocked = false;
  if (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)) {
    conn_close(c);
    return false;
  }
  conn_update_read(c);
  return true;
}

/* A connection's first bytes are an HTTP/1 request (GET /version): answered
 * and closed. The server's HTTP/2 preface has not gone out yet (it goes with
 * the first answer to the client's, conn_secured). */
static bool http1(struct conn *c, const uint8_t *buf, size_t n) {
  c->seen_bytes = true;
  char out[512];
  size_t len = kt_bridge_http1(buf, n, out, sizeof out);
  if (!len)
    return false;
  struct kt_err e = {0};
  (void)kt_io_write(&c->io, out, len, &e); /* a fresh socket takes 300 bytes */
  logf_(1, "connection %s: HTTP/1 request answered: %.*s", c->peer, (int)strcspn(out + 9, "\r"),
        out + 9);
  conn_close(c);
  return true;
}

/* Feeds what the socket (and TLS) has to nghttp2: one read for plain TCP,
 * up to READ_CHUNK for TLS (one record per call). */
static void conn_read(struct conn *c) {
  uint8_t buf[READ_CHUNK];
  size_t got = 0;
  bool tls = kt_io_is_tls(&c->io);
  while (!c->dead && c->reading) {
    struct kt_err e = {0};
    ssize_t n = kt_io_read(&c->io, buf, sizeof buf, &e);
    if (n == KT_IO_AGAIN)
      break;
    if (n <= 0) {
      if (n < 0)
        logf_(tls && e.code == KT_EPROTO ? 2 : 0, "connection %s: %s", c->peer, e.msg);
      conn_close(c);
      return;
    }
    if (!tls && got == 0 && (size_t)n >= 2 && kt_tls_sniff(buf, (size_t)n) == 1) {
      logf_(2,
            "connection %s: a TLS handshake on the plaintext (h2c) listener: start ketch-grpc "
            "with --cert-file/--key-file for TLS clients",
            c->peer);
      conn_close(c);
      return;
    }
    if (!c->seen_bytes && http1(c, buf, (size_t)n))
      return;
    got += (size_t)n;
    ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
    if (r < 0) {
      logf_(0, "connection %s: %s", c->peer, nghttp2_strerror((int)r));
      /* Tell the peer (GOAWAY) if the session still can, then close. */
      nghttp2_session_terminate_session(c->s, NGHTTP2_PROTOCOL_ERROR);
      const uint8_t *d;
      ssize_t k = nghttp2_session_mem_send(c->s, &d);
      if (k > 0)
        (void)kt_io_write(&c->io, d, (size_t)k, &e);
      conn_close(c);
      return;
    }
    conn_mark_dirty(c);
    if (!tls || got >= READ_CHUNK || !kt_io_pending(&c->io))
      break;             /* one read per event (TLS: records read ahead are taken without one) */
    conn_update_read(c); /* nghttp2 may have asked for back pressure */
  }
  if (!c->dead && c->reading && kt_io_pending(&c->io))
    kick(c->b);
}

static struct upstream *upstream_for(struct bridge *b, const char *identity);

/* The TLS handshake is done (or the connection is plain TCP): check ALPN,
 * pick the upstream by the client certificate's CN, start HTTP/2. */
static void conn_secured(struct conn *c) {
  struct bridge *b = c->b;
  char alpn[32], cn[256];
  kt_io_alpn(&c->io, alpn, sizeof alpn);
  kt_io_peer_cn(&c->io, cn, sizeof cn);
  if (kt_io_is_tls(&c->io))
    logf_(0, "connection %s: %s alpn=%s cn=%s", c->peer, kt_io_version(&c->io),
          alpn[0] ? alpn : "-", cn[0] ? cn : "-");
  c->up = upstream_for(b, cn[0] && b->forward_identity ? cn : NULL);
  if (!c->up) {
    logf_(2, "connection %s refused: more than %d client identities at once", c->peer,
          MAX_UPSTREAMS);
    conn_close(c);
    return;
  }
  c->up->users++;
  if (nghttp2_session_server_new3(&c->s, callbacks, c, h2opt, kt_bridge_h2_mem()) != 0) {
    conn_close(c);
    return;
  }
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1}, /* RFC 9218's simpler scheduler */
  };
  nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, 16 << 20);
  conn_update_read(c); /* the SETTINGS go out once the client has spoken (http1) */
}

static bool hs_room(const struct bridge *b) { return kt_tls_budget_room(&b->hs_budget); }

static void conn_handshake(struct conn *c) {
  struct bridge *b = c->b;
  struct kt_err e = {0};
  ev_tstamp t0 = ev_time();
  int r = kt_io_handshake(&c->io, &e);
  kt_tls_budget_spent(&b->hs_budget, ev_time() - t0);
  if (r == KT_IO_AGAIN) {
    conn_arm(c);
    return;
  }
  if (r == 1) {
    conn_secured(c);
    if (!c->dead && c->reading)
      conn_read(c); /* the preface may have come with the handshake */
    return;
  }
  if (r == KT_IO_PLAINTEXT)
    logf_(2,
          "connection %s: a plaintext (h2c) client on the TLS listener: it must use TLS "
          "(etcdctl --cacert ...)",
          c->peer);
  else
    logf_(2, "connection %s: TLS handshake failed: %s", c->peer, e.msg);
  if (r == KT_IO_PLAINTEXT)
    kt_io_close_refused(&c->io);
  conn_close(c);
}

static void conn_event(struct conn *c, int revents) {
  if (!c->up) {
    struct bridge *b = c->b;
    if (hs_room(b)) {
      conn_handshake(c);
    } else if (!c->hs_waiting) { /* this turn's budget is spent: wait for the next */
      c->hs_waiting = true;
      c->hs_next = NULL;
      if (b->hs_tail)
        b->hs_tail->hs_next = c;
      else
        b->hs_head = c;
      b->hs_tail = c;
      conn_arm(c);
      hs_wake_later(b);
    }
    return;
  }
  int rd = kt_io_events(&c->io, true, false), wr = kt_io_events(&c->io, false, true);
  if (c->write_blocked && (revents & wr) && conn_flush(c))
    conn_wake_streams(c);
  if (!c->dead && c->reading && (revents & rd))
    conn_read(c);
}

static void on_conn_read(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  conn_event(w->data, KT_IO_READ);
}

static void on_conn_write(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  conn_event(w->data, KT_IO_WRITE);
}

/* After polling: handshakes that waited for a turn with room, and
 * connections with bytes TLS read ahead. */
static void on_turn(struct ev_loop *loop, ev_check *w, int revents) {
  (void)revents;
  struct bridge *b = w->data;
  while (b->hs_head && hs_room(b)) {
    struct conn *c = b->hs_head;
    b->hs_head = c->hs_next;
    if (!b->hs_head)
      b->hs_tail = NULL;
    c->hs_waiting = false;
    conn_handshake(c);
  }
  bool more = false;
  if (b->hs_head) {
    if (kt_tls_budget_wait_s(&b->hs_budget) <= 0)
      more = true;
    else
      hs_wake_later(b);
  }
  for (struct conn *c = b->conns, *next; c; c = next) {
    next = c->next;
    if (c->up && c->reading && kt_io_pending(&c->io)) {
      conn_read(c);
      more = true;
    }
  }
  if (!more && ev_is_active(&b->spin_w))
    ev_idle_stop(loop, &b->spin_w);
}

static void on_spin(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)loop, (void)w, (void)revents; /* its presence keeps poll from sleeping */
}

static void conn_close(struct conn *c) {
  if (c->dead)
    return;
  c->dead = true;
  struct bridge *b = c->b;
  struct ev_loop *loop = b->loop;
  ev_io_stop(loop, &c->rio);
  ev_io_stop(loop, &c->wio);
  while (c->streams)
    stream_free(c->streams);
  for (struct stream *st = c->spare, *next; st; st = next) {
    next = st->next;
    free(st->body);
    free(st);
  }
  c->spare = NULL;
  if (c->prev)
    c->prev->next = c->next;
  else
    b->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  if (c->hs_waiting) {
    struct conn **pp = &b->hs_head, *prev = NULL;
    while (*pp && *pp != c)
      prev = *pp, pp = &(*pp)->hs_next;
    if (*pp)
      *pp = c->hs_next;
    if (b->hs_tail == c)
      b->hs_tail = prev;
  }
  if (c->up && --c->up->users == 0)
    c->up->unused_since = ev_now(loop);
  if (c->s)
    nghttp2_session_del(c->s);
  kt_io_close(&c->io);
  atomic_fetch_sub(&b->n_conns, 1);
  free(c->out);
  /* Still in the dirty list? unlink before freeing. */
  for (struct conn **p = &b->dirty; *p; p = &(*p)->next_dirty) {
    if (*p == c) {
      *p = c->next_dirty;
      break;
    }
  }
  free(c);
}

/* The loops (bridge.h "Event loops"): set up before any thread starts,
 * then read-only (each struct bridge's own fields stay its thread's). */
static struct bridge *loops;
static int n_loops;

/* Loop b takes the accepted socket fd (its peer's address in peer) and
 * serves it from now on. */
static void conn_new(struct bridge *b, int fd, const char *peer) {
  struct ev_loop *loop = b->loop;
  struct conn *c = calloc(1, sizeof *c); /* the HTTP/2 session comes after TLS */
  if (!c) {
    close(fd);
    return;
  }
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  struct kt_err e = {0};
  if (b->tls && kt_io_init_tls(&c->io, fd, b->tls, NULL, &e)) {
    logf_(2, "connection %s refused: %s", c->peer, e.msg);
    free(c);
    close(fd);
    return;
  }
  if (!b->tls)
    kt_io_init_plain(&c->io, fd);
  atomic_fetch_add(&b->n_conns, 1);
  c->b = b;
  c->opened_at = ev_now(loop);
  c->next = b->conns;
  if (b->conns)
    b->conns->prev = c;
  b->conns = c;
  ev_io_init(&c->rio, on_conn_read, fd, EV_READ);
  ev_io_init(&c->wio, on_conn_write, fd, EV_WRITE);
  c->rio.data = c->wio.data = c;
  if (b->tls)
    conn_arm(c); /* the handshake first */
  else
    conn_secured(c);
}

/* Loop 0: accepts, and hands the connections out round robin (its own
 * turns it serves itself; a loop whose inbox is full is skipped). */
static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  static unsigned next; /* loop 0's */
  struct bridge *b = w->data;
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(w->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        logf_(2, "accept: %s", strerror(errno));
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char host[46] = "?", port[8] = "?"; /* numeric: they fit a peer[64] */
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    char peer[64];
    snprintf(peer, sizeof peer, "%s:%s", host, port);
    struct bridge *to = &loops[next++ % (unsigned)n_loops];
    bool handed = false;
    if (to != b) {
      pthread_mutex_lock(&to->inbox_mu);
      if (to->inbox_n < INBOX_CAP) {
        struct inbox_conn *ic = &to->inbox[to->inbox_n++];
        ic->fd = fd;
        memcpy(ic->peer, peer, sizeof peer);
        handed = true;
      }
      pthread_mutex_unlock(&to->inbox_mu);
      if (handed)
        ev_async_send(to->loop, &to->wake);
    }
    if (!handed)
      conn_new(b, fd, peer);
  }
}

/* Another loop: the sockets loop 0 handed over, or stop. */
static void on_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)revents;
  struct bridge *b = w->data;
  struct inbox_conn got[INBOX_CAP];
  pthread_mutex_lock(&b->inbox_mu);
  size_t n = b->inbox_n;
  memcpy(got, b->inbox, n * sizeof got[0]);
  b->inbox_n = 0;
  pthread_mutex_unlock(&b->inbox_mu);
  for (size_t i = 0; i < n; i++)
    conn_new(b, got[i].fd, got[i].peer);
  if (atomic_load(&b->stop))
    ev_break(loop, EVBREAK_ALL);
}

/* ---- upstreams ---- */

static void on_ketch_io_up(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  ketch_run_once(w->data);
}

static void on_ketch_timer_up(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)revents;
  ketch_run_once(w->data);
}

/* A new upstream on ko, linked in after the others; NULL on failure. */
static struct upstream *upstream_open(struct bridge *b, const ketch_options *ko) {
  struct upstream *u = calloc(1, sizeof *u);
  if (!u)
    return NULL;
  u->b = b;
  char err[512] = "";
  if (ketch_open(&u->kc, b->endpoints, ko, err, sizeof err) != 0) {
    logf_(3, "--endpoints %s: %s", b->endpoints, err);
    free(u);
    return NULL;
  }
  ev_io_init(&u->kio, on_ketch_io_up, -1, 0);
  u->kio.data = u;
  ev_timer_init(&u->ktimer, on_ketch_timer_up, 0, 0);
  u->ktimer.data = u;
  u->unused_since = ev_now(b->loop);
  /* the default first, identities after it */
  struct upstream **tail = &b->up;
  while (*tail)
    tail = &(*tail)->next;
  *tail = u;
  ketch_run_once(u);
  return u;
}

/* The upstream of `identity` (NULL: the default one), made on first use. */
static struct upstream *upstream_for(struct bridge *b, const char *identity) {
  for (struct upstream *u = b->up; u; u = u->next)
    if (!u->session && ((!identity && !u->identity) ||
                        (identity && u->identity && !strcmp(identity, u->identity))))
      return u;
  if (identity && b->n_identities >= MAX_UPSTREAMS)
    return NULL;
  ketch_options ko = b->ko;
  ko.identity = identity;
  struct upstream *u = upstream_open(b, &ko);
  if (u && identity) {
    u->identity = strdup(identity);
    b->n_identities++;
    logf_(0, "upstream for identity %s", identity);
  }
  return u;
}

/* ---- Auth sessions ----
 * etcd clients authenticate (Auth/Authenticate) and then send the token in
 * every call's `token` metadata. The member binds the connection that
 * authenticated, so a session is an upstream of its own: Authenticate opens
 * one and authenticates it (the member checks the password off its loop)
 * and answers the member's token; calls carrying that token go to it. A
 * session forgets the password once it has its token (ketch_drop_password):
 * what the member stops honouring (the user's password changed, the user
 * deleted) shows as "invalid auth token" and the client authenticates
 * again, as clientv3 does. A token the bridge does not know (its session
 * was reaped, another bridge or a native client got it) gets a session that
 * presents it: a signed token is good on every member, a simple one only on
 * the member that issued it (elsewhere: "invalid auth token", and the client
 * authenticates again). Sessions idle for TOKEN_IDLE_S are closed; at most
 * MAX_TOKEN_UPSTREAMS at once. */

static struct upstream *session_open(struct bridge *b, const char *token, struct conn *c) {
  if (b->n_tokens >= MAX_TOKEN_UPSTREAMS)
    return NULL;
  ketch_options ko = b->ko;
  ko.max_outstanding = TOKEN_MAX_OUTSTANDING;
  ko.identity = c->up ? c->up->identity : NULL;
  ko.token = token;
  struct upstream *u = upstream_open(b, &ko);
  if (!u)
    return NULL;
  u->session = true;
  b->n_tokens++;
  if (token && !(u->token = strdup(token)))
    u->dead = true;
  return u;
}

static struct upstream *upstream_for_token(struct bridge *b, const char *token, struct conn *c) {
  for (struct upstream *u = b->up; u; u = u->next)
    if (u->session && !u->dead && u->token && !strcmp(u->token, token))
      return u;
  return session_open(b, token, c);
}

struct authn {
  struct call_ref *ref;
  struct upstream *u;
};

static void on_authenticated(void *arg, int err, const ketch_result *res) {
  struct authn *x = arg;
  struct upstream *u = x->u;
  if (!err && res->auth.token && *res->auth.token && (u->token = strdup(res->auth.token)))
    ketch_drop_password(u->kc);
  else
    u->dead = true; /* closed by the reaper (not from inside its own callback) */
  if (--u->users == 0)
    u->unused_since = ev_now(u->b->loop);
  kt_bridge_authenticate_done(res, on_call_done, x->ref);
  free(x);
}

static void authenticate(struct stream *st, const uint8_t *msg, size_t len, struct call_ref *ref) {
  struct conn *c = st->c;
  char *name, *password;
  if (kt_bridge_authenticate_decode(msg, len, &name, &password)) {
    on_call_done(ref, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf",
                 NULL, 0);
    return;
  }
  int st_code;
  const char *m = NULL;
  struct upstream *u = NULL;
  struct authn *x = NULL;
  if (!(u = session_open(c->b, NULL, c)) || !(x = malloc(sizeof *x))) {
    st_code = KT_GRPC_RESOURCE_EXHAUSTED;
    m = "ketch-grpc: too many authenticated sessions at once";
  } else {
    *x = (struct authn){ref, u};
    u->users++;
    int err = ketch_authenticate_async(u->kc, name, password, on_authenticated, x);
    if (err) {
      m = kt_bridge_error(err == KETCH_EINVAL ? KETCH_EAUTHFAILED : err, NULL, &st_code);
      u->users--;
      free(x);
    } else {
      u->ksubmitted = true;
    }
  }
  if (m && u)
    u->dead = true;
  explicit_bzero(password, strlen(password));
  free(name);
  free(password);
  if (m)
    on_call_done(ref, st_code, m, NULL, 0);
}

static void upstream_free(struct upstream *u) {
  kt_bridge_ka_forget(u->kc, 0); /* idle entries; in-flight ones go with ketch_close */
  ev_io_stop(u->b->loop, &u->kio);
  ev_timer_stop(u->b->loop, &u->ktimer);
  ketch_close(u->kc); /* pending calls complete, finding their streams gone */
  free(u->identity);
  free(u->token);
  free(u);
}

/* Every second: TLS handshakes past their deadline are cut; identities
 * nobody used for a while lose their handles. */
static void on_reap(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct bridge *b = w->data;
  for (struct conn *c = b->conns, *next; c; c = next) {
    next = c->next;
    if (!c->up && ev_now(loop) - c->opened_at > KT_TLS_HANDSHAKE_MS / 1000.0) {
      logf_(2, "connection %s: TLS handshake not done in %d s", c->peer,
            KT_TLS_HANDSHAKE_MS / 1000);
      conn_close(c);
    }
  }
  for (struct upstream **pp = &b->up; *pp;) {
    struct upstream *u = *pp;
    double idle = ev_now(loop) - u->unused_since;
    if ((u->identity || u->session) && !u->users && ketch_pending(u->kc) == 0 &&
        (u->session ? u->dead || idle > TOKEN_IDLE_S : idle > UPSTREAM_IDLE_S)) {
      *pp = u->next;
      if (u->session)
        b->n_tokens--;
      else
        b->n_identities--;
      upstream_free(u);
      continue;
    }
    pp = &u->next;
  }
}

/* ---- --endpoints-auto-sync-interval ---- */

/* The member list's client URLs (voters with a name, as clientv3's Sync)
 * become every upstream's endpoints, and those of upstreams opened later. */
static void on_sync_list(void *arg, int err, const ketch_result *res) {
  struct bridge *b = arg;
  b->sync_busy = false;
  if (err) {
    if (err != KETCH_ECANCELED)
      logf_(2, "endpoints auto-sync: member list: %s", ketch_strerror(err));
    return;
  }
  struct kt_buf eps = {0};
  const ketch_member_list_result *ml = &res->member_list;
  for (size_t i = 0; i < ml->n_members; i++) {
    const ketch_member *m = &ml->members[i];
    if (m->is_learner || !m->name || !*m->name)
      continue;
    for (size_t j = 0; j < m->n_client_urls; j++) {
      if (eps.len)
        kt_buf_append(&eps, ",", 1);
      kt_buf_append(&eps, m->client_urls[j], strlen(m->client_urls[j]));
    }
  }
  if (!eps.len ||
      (b->synced && eps.len == strlen(b->synced) && memcmp(b->synced, eps.p, eps.len) == 0)) {
    kt_buf_free(&eps);
    return;
  }
  kt_buf_append(&eps, "", 1);
  const char *list = (const char *)eps.p;
  for (struct upstream *u = b->up; u; u = u->next) {
    char why[400] = "";
    if (ketch_set_endpoints(u->kc, list, why, sizeof why) != 0) {
      logf_(2, "endpoints auto-sync: %s: %s", list, why);
      kt_buf_free(&eps);
      return;
    }
  }
  logf_(1, "endpoints auto-sync: members now %s", list);
  free(b->synced);
  b->synced = strdup(list);
  if (b->synced)
    b->endpoints = b->synced;
  kt_buf_free(&eps);
}

static void on_sync(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct bridge *b = w->data;
  if (b->sync_busy)
    return;
  if (ketch_member_list_async(b->up->kc, on_sync_list, b) == 0) {
    b->sync_busy = true;
    b->up->ksubmitted = true;
  }
}

/* A Go duration as etcd's flag takes it ("30s", "1m", "500ms", "1h"; a bare
 * number is seconds): seconds, or -1. */
static double parse_duration_s(const char *v) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || x < 0)
    return -1;
  if (!*end || !strcmp(end, "s"))
    return x;
  if (!strcmp(end, "ms"))
    return x / 1000;
  if (!strcmp(end, "m"))
    return x * 60;
  if (!strcmp(end, "h"))
    return x * 3600;
  return -1;
}

/* A watch stream's progress ticker queued work on kc (bridge_watch.c). */
static void mark_submitted(ketch_client *kc, void *arg) {
  struct bridge *b = arg;
  for (struct upstream *u = b->up; u; u = u->next)
    if (u->kc == kc)
      u->ksubmitted = true;
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

/* --loops: N (1..KT_BRIDGE_MAX_LOOPS) or "auto" (0), else -1. */
static int parse_loops(const char *v) {
  if (!strcmp(v, "auto"))
    return 0;
  char *end;
  long n = strtol(v, &end, 10);
  return *end || end == v || n < 1 || n > KT_BRIDGE_MAX_LOOPS ? -1 : (int)n;
}

/* auto: cores - 1, at most 8, and 1 below 4 cores. Why one below 4 cores:
 * a loop's work is mostly its clients' (HTTP/2, protobuf) and the
 * members'; with 2 or 3 cores shared with a member and clients a second
 * loop mostly adds wake-ups and smaller batches (the member's --io-threads
 * default, net/THREADS.md, for the same reason). */
static int auto_loops(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 4)
    return 1;
  return cores - 1 > 8 ? 8 : (int)cores - 1;
}

/* /metrics: the loops and their connections (summed, they are the bridge's). */
static void loops_metrics(void *arg, struct kt_buf *out) {
  (void)arg;
  char t[160];
  int k = snprintf(t, sizeof t,
                   "# HELP ketch_grpc_loops Event loops serving connections (--loops).\n"
                   "# TYPE ketch_grpc_loops gauge\nketch_grpc_loops %d\n",
                   n_loops);
  kt_buf_append(out, t, (size_t)k);
  static const char h[] = "# HELP ketch_grpc_loop_connections Open client connections of each "
                          "event loop.\n# TYPE ketch_grpc_loop_connections gauge\n";
  kt_buf_append(out, h, sizeof h - 1);
  for (int i = 0; i < n_loops; i++) {
    k = snprintf(t, sizeof t, "ketch_grpc_loop_connections{loop=\"%d\"} %zu\n", i,
                 atomic_load_explicit(&loops[i].n_conns, memory_order_relaxed));
    kt_buf_append(out, t, (size_t)k);
  }
}

/* The loop's watchers and its default upstream (on the main thread, before
 * the loop's thread starts). 0, or -1 (logged). */
static int loop_init(struct bridge *b) {
  if (pthread_mutex_init(&b->inbox_mu, NULL))
    return -1;
  ev_check_init(&b->turn_w, on_turn);
  b->turn_w.data = b;
  ev_check_start(b->loop, &b->turn_w);
  ev_idle_init(&b->spin_w, on_spin);
  b->spin_w.data = b;
  ev_timer_init(&b->hs_w, on_hs_timer, 0, 0);
  b->hs_w.data = b;
  ev_timer_init(&b->reap_w, on_reap, 1, 1);
  b->reap_w.data = b;
  ev_timer_start(b->loop, &b->reap_w);
  ev_prepare_init(&b->prep, on_prepare);
  b->prep.data = b;
  ev_prepare_start(b->loop, &b->prep);
  ev_async_init(&b->wake, on_wake);
  b->wake.data = b;
  ev_async_start(b->loop, &b->wake);
  ev_timer_init(&b->sync_w, on_sync, b->sync_s, b->sync_s);
  b->sync_w.data = b;
  if (b->sync_s > 0)
    ev_timer_start(b->loop, &b->sync_w);
  if (!upstream_for(b, NULL)) {
    fprintf(stderr, "ketch-grpc: --endpoints %s: cannot open a client\n", b->endpoints);
    return -1;
  }
  return 0;
}

/* On the loop's own thread, before it serves: what is thread-local. */
static int loop_local_init(struct bridge *b) {
  kt_bridge_metrics_register_loop();
  kt_bridge_snap_loop(b->loop);
  kt_bridge_watch_setup(b->loop, b->progress_s, mark_submitted, b);
  if (kt_bridge_cache_setup(b->loop, b->up->kc, &b->up->ksubmitted, b->cache_size, b->cache_bytes,
                            b->cache_stale_s)) {
    fprintf(stderr, "ketch-grpc: --cache-size: out of memory\n");
    return -1;
  }
  return 0;
}

/* On the loop's own thread, after its ev_run: closes what it owns. */
static void loop_fini(struct bridge *b) {
  ev_timer_stop(b->loop, &b->sync_w);
  while (b->conns) /* streams go first: their watches are cancelled */
    conn_close(b->conns);
  pthread_mutex_lock(&b->inbox_mu); /* handed over, never served */
  for (size_t i = 0; i < b->inbox_n; i++)
    close(b->inbox[i].fd);
  b->inbox_n = 0;
  pthread_mutex_unlock(&b->inbox_mu);
  kt_bridge_cache_stop();
  while (b->up) {
    struct upstream *u = b->up;
    b->up = u->next;
    upstream_free(u);
  }
  free(b->synced);
  b->synced = NULL;
  ev_check_stop(b->loop, &b->turn_w);
  ev_idle_stop(b->loop, &b->spin_w);
  ev_timer_stop(b->loop, &b->hs_w);
  ev_timer_stop(b->loop, &b->reap_w);
  ev_prepare_stop(b->loop, &b->prep);
  ev_async_stop(b->loop, &b->wake);
  while (spare_refs) { /* after the upstreams: their failed calls return refs */
    struct call_ref *r = spare_refs;
    spare_refs = r->next_spare;
    free(r);
  }
  n_spare_refs = 0;
}

static void *loop_thread(void *arg) {
  struct bridge *b = arg;
  char name[16];
  snprintf(name, sizeof name, "ketch-grpc-%d", b->idx);
  pthread_setname_np(pthread_self(), name);
  if (loop_local_init(b))
    exit(1);
  ev_run(b->loop, 0);
  loop_fini(b);
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f, "usage: ketch-grpc [--listen-addr HOST:PORT] [--endpoints LIST]\n"
             "                  [--max-request-bytes N] [--max-stream-queue-bytes N]\n"
             "                  [--log-level debug|info|warn|error] [TLS flags]\n"
             "etcd's v3 gRPC API (KV, Watch, Lease, Cluster.MemberList, Maintenance, v3lock,\n"
             "v3election) in front of a ketch cluster.\n"
             "  --listen-addr        gRPC listen address (default 127.0.0.1:2379): h2c, or TLS\n"
             "                       with --cert-file/--key-file or --auto-tls\n"
             "  --endpoints          ketch members, comma separated (default 127.0.0.1:2479);\n"
             "                       https:// ones are dialled with TLS\n"
             "  --max-request-bytes  largest write request accepted (default 1572864)\n"
             "  --max-stream-queue-bytes  responses a stream may queue for a client that\n"
             "                       does not read; a watch or snapshot beyond it is\n"
             "                       cancelled\n"
             "                       (default 8388608)\n"
             "  --log-level          debug, info, warn or error (default info)\n"
             "  --metrics-addr       [http[s]://]HOST:PORT for /metrics (grpc_server_*_total,\n"
             "                       process_*); https:// with the listener's TLS settings;\n"
             "                       default: none\n"
             "  --namespace PREFIX   every key of every request is under PREFIX and comes back\n"
             "                       without it: KV, watch, lease keys, lock, election, role\n"
             "                       permissions (etcd grpc-proxy's flag); Snapshot refused\n"
             "  --resolver-prefix P  register as P/ADDR under a lease kept alive (etcd\n"
             "                       grpc-proxy's); MemberList then lists the live proxies\n"
             "  --resolver-ttl S     that lease's TTL in seconds (default 60)\n"
             "  --advertise-client-url ADDR  the address registered and answered by\n"
             "                       MemberList (default: --listen-addr with a resolver\n"
             "                       prefix; none: MemberList is the cluster's)\n"
             "  --endpoints-auto-sync-interval D  every D (30s, 1m, 500ms) the members'\n"
             "                       client URLs from the member list become the endpoints\n"
             "                       (default 0: never)\n"
             "  --cache-size N       serializable Range answers cached (default 2048; 0: no\n"
             "                       cache), invalidated by a watch of the cluster\n"
             "  --cache-max-bytes N  bytes those answers may hold (default 67108864)\n"
             "  --cache-max-staleness D  a cached answer is at most D older than the\n"
             "                       member's (default 100ms; 10ms..10s)\n"
             "  --coalesce-lease-keepalives  keep-alives of one lease from any number of\n"
             "                       clients cost the members one renewal per TTL/3\n"
             "  --experimental-watch-progress-notify-interval D  how often watches with\n"
             "                       progress_notify get one (etcd's flag; default 10m)\n"
             "  --loops N|auto       event loops (threads), each serving its share of the\n"
             "                       connections with its own handles to the members\n"
             "                       (default auto: cores - 1, at most 8, and 1 below 4\n"
             "                       cores; KETCH_GRPC_LOOPS sets the default)\n"
             "TLS toward clients (etcd's flags):\n"
             "  --cert-file, --key-file  the listener's certificate and key (PEM)\n"
             "  --trusted-ca-file    CAs of client certificates (client certificates are then\n"
             "                       required, as etcd)\n"
             "  --client-cert-auth   require a verified client certificate\n"
             "  --auto-tls           a self-signed certificate under --data-dir\n"
             "  --data-dir           where --auto-tls keeps it (default default.proxy)\n"
             "TLS toward the members (etcd's grpc-proxy flags):\n"
             "  --cacert             CAs to verify the members with\n"
             "  --cert, --key        the bridge's client certificate; with it, the Common\n"
             "                       Name of each caller's verified certificate is passed\n"
             "                       on to the member as the caller's identity\n"
             "  --insecure-skip-tls-verify  do not verify the members (tests only)\n");
}

int main(int argc, char **argv) {
  const char *listen_addr = "127.0.0.1:2379", *endpoints = "127.0.0.1:2479";
  const char *cert_file = NULL, *key_file = NULL, *ca_file = NULL, *data_dir = "default.proxy";
  const char *up_ca = NULL, *up_cert = NULL, *up_key = NULL, *metrics_addr = NULL;
  const char *ns = NULL, *resolver_prefix = NULL, *advertise = NULL;
  int resolver_ttl = 60;
  double sync_s = 0;
  bool client_cert_auth = false, auto_tls = false, up_skip = false;
  size_t max_req = 1572864, max_queue = 8u << 20;
  size_t cache_size = 2048, cache_bytes = 64u << 20;
  double cache_stale_s = 0.1, progress_s = 600;
  int n_want = 0; /* --loops: 0 auto */
  const char *loops_env = getenv("KETCH_GRPC_LOOPS");
  if (loops_env && *loops_env && (n_want = parse_loops(loops_env)) < 0) {
    fprintf(stderr, "ketch-grpc: KETCH_GRPC_LOOPS=%s: want auto or 1..%d\n", loops_env,
            KT_BRIDGE_MAX_LOOPS);
    return 2;
  }
  enum {
    O_CERT = 256,
    O_KEY,
    O_CA,
    O_CCA,
    O_AUTO,
    O_DIR,
    O_UCA,
    O_UCERT,
    O_UKEY,
    O_USKIP,
    O_METRICS,
    O_NS,
    O_RPREFIX,
    O_RTTL,
    O_ADVERTISE,
    O_AUTOSYNC,
    O_KACOALESCE,
    O_CACHE,
    O_CACHE_BYTES,
    O_CACHE_STALE,
    O_PROGRESS,
    O_LOOPS
  };
  static const struct option opts[] = {
      {"listen-addr", required_argument, 0, 'l'},
      {"endpoints", required_argument, 0, 'e'},
      {"max-request-bytes", required_argument, 0, 'm'},
      {"max-stream-queue-bytes", required_argument, 0, 'q'},
      {"log-level", required_argument, 0, 'v'},
      {"cert-file", required_argument, 0, O_CERT},
      {"key-file", required_argument, 0, O_KEY},
      {"trusted-ca-file", required_argument, 0, O_CA},
      {"client-cert-auth", no_argument, 0, O_CCA},
      {"auto-tls", no_argument, 0, O_AUTO},
      {"data-dir", required_argument, 0, O_DIR},
      {"cacert", required_argument, 0, O_UCA},
      {"cert", required_argument, 0, O_UCERT},
      {"key", required_argument, 0, O_UKEY},
      {"insecure-skip-tls-verify", no_argument, 0, O_USKIP},
      {"metrics-addr", required_argument, 0, O_METRICS},
      {"namespace", required_argument, 0, O_NS},
      {"resolver-prefix", required_argument, 0, O_RPREFIX},
      {"resolver-ttl", required_argument, 0, O_RTTL},
      {"advertise-client-url", required_argument, 0, O_ADVERTISE},
      {"endpoints-auto-sync-interval", required_argument, 0, O_AUTOSYNC},
      {"coalesce-lease-keepalives", no_argument, 0, O_KACOALESCE},
      {"cache-size", required_argument, 0, O_CACHE},
      {"cache-max-bytes", required_argument, 0, O_CACHE_BYTES},
      {"cache-max-staleness", required_argument, 0, O_CACHE_STALE},
      {"experimental-watch-progress-notify-interval", required_argument, 0, O_PROGRESS},
      {"loops", required_argument, 0, O_LOOPS},
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
    case O_METRICS:
      metrics_addr = optarg;
      break;
    case O_NS:
      ns = *optarg ? optarg : NULL; /* "" is etcd's default: no namespace */
      break;
    case O_RPREFIX:
      resolver_prefix = *optarg ? optarg : NULL;
      break;
    case O_ADVERTISE:
      advertise = *optarg ? optarg : NULL;
      break;
    case O_KACOALESCE:
      kt_bridge_ka_coalesce = true;
      break;
    case O_LOOPS:
      if ((n_want = parse_loops(optarg)) < 0) {
        fprintf(stderr, "ketch-grpc: --loops: want auto or 1..%d\n", KT_BRIDGE_MAX_LOOPS);
        return 2;
      }
      break;
    case O_CACHE:
    case O_CACHE_BYTES: {
      char *end;
      unsigned long long v = strtoull(optarg, &end, 10);
      bool entries = o == O_CACHE;
      if (*end || optarg[0] == '-' || (entries ? v > (1u << 24) : v < 4096 || v > (1ull << 40))) {
        fprintf(stderr, entries ? "ketch-grpc: --cache-size: want 0..16777216 entries\n"
                                : "ketch-grpc: --cache-max-bytes: want 4096..2^40\n");
        return 2;
      }
      *(entries ? &cache_size : &cache_bytes) = (size_t)v;
      break;
    }
    case O_CACHE_STALE:
      cache_stale_s = parse_duration_s(optarg);
      if (cache_stale_s < 0.01 || cache_stale_s > 10) {
        fprintf(stderr, "ketch-grpc: --cache-max-staleness: want a duration from 10ms to 10s\n");
        return 2;
      }
      break;
    case O_PROGRESS: /* etcd's server flag; as etcd, at least 100ms */
      progress_s = parse_duration_s(optarg);
      if (progress_s <= 0) {
        fprintf(stderr, "ketch-grpc: --experimental-watch-progress-notify-interval: want a "
                        "duration such as 10m or 1s\n");
        return 2;
      }
      progress_s = progress_s < 0.1 ? 0.1 : progress_s;
      break;
    case O_AUTOSYNC:
      sync_s = parse_duration_s(optarg);
      if (sync_s < 0 || (sync_s > 0 && sync_s < 0.1)) {
        fprintf(stderr, "ketch-grpc: --endpoints-auto-sync-interval: want a duration such as "
                        "30s, 1m or 500ms (at least 100ms; 0 disables)\n");
        return 2;
      }
      break;
    case O_RTTL: {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 0 || v > 86400) {
        fprintf(stderr, "ketch-grpc: --resolver-ttl: want 0..86400 seconds (0: 60)\n");
        return 2;
      }
      resolver_ttl = v ? (int)v : 60;
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
    case O_CERT:
      cert_file = *optarg ? optarg : NULL;
      break;
    case O_KEY:
      key_file = *optarg ? optarg : NULL;
      break;
    case O_CA:
      ca_file = *optarg ? optarg : NULL;
      break;
    case O_CCA:
      client_cert_auth = true;
      break;
    case O_AUTO:
      auto_tls = true;
      break;
    case O_DIR:
      data_dir = optarg;
      break;
    case O_UCA:
      up_ca = *optarg ? optarg : NULL;
      break;
    case O_UCERT:
      up_cert = *optarg ? optarg : NULL;
      break;
    case O_UKEY:
      up_key = *optarg ? optarg : NULL;
      break;
    case O_USKIP:
      up_skip = true;
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
  /* Large buffers (a 1.5 MiB put, big watch events) are mmap'd and given
   * back when freed: glibc's default raises this threshold as such blocks
   * are freed, and then each loop thread's malloc arena keeps its own
   * high-water mark of them, so the bridge's memory would grow with --loops
   * instead of with what it holds. */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);

  struct bridge b = {.max_request_bytes = max_req,
                     .max_stream_queue_bytes = max_queue,
                     .ns = ns,
                     .ns_len = ns ? strlen(ns) : 0,
                     .resolver_prefix = resolver_prefix,
                     .advertise = advertise         ? advertise
                                  : resolver_prefix ? listen_addr
                                                    : NULL,
                     .cache_size = cache_size,
                     .cache_bytes = cache_bytes,
                     .cache_stale_s = cache_stale_s,
                     .sync_s = sync_s,
                     .progress_s = progress_s}; /* the template of every loop's */
  n_loops = n_want ? n_want : auto_loops();
  /* The listener's TLS: its files are read now; a problem stops the start. */
  char auto_cert[4200], auto_key[4200];
  if (!cert_file && auto_tls) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fixtures/proxy", data_dir);
    char host[256];
    snprintf(host, sizeof host, "%s", listen_addr);
    char *colon = strrchr(host, ':');
    if (colon)
      *colon = 0;
    const char *h = host[0] == '[' ? host + 1 : host;
    if (host[0] == '[' && host[strlen(host) - 1] == ']')
      host[strlen(host) - 1] = 0;
    struct kt_err e = {0};
    if (kt_tls_selfcert(dir, &h, 1, &e)) {
      fprintf(stderr, "ketch-grpc: --auto-tls: %s\n", e.msg);
      return 1;
    }
    snprintf(auto_cert, sizeof auto_cert, "%s/cert.pem", dir);
    snprintf(auto_key, sizeof auto_key, "%s/key.pem", dir);
    cert_file = auto_cert, key_file = auto_key;
  }
  if (cert_file || key_file) {
    struct kt_tls_config tc = {.server = true,
                               .cert_file = cert_file,
                               .key_file = key_file,
                               .ca_file = ca_file,
                               .verify_peer = client_cert_auth || ca_file,
                               .alpn_h2 = true,
                               .cert_flag = "--cert-file",
                               .key_flag = "--key-file",
                               .ca_flag = "--trusted-ca-file"};
    struct kt_err e = {0};
    if (kt_tls_ctx_new(&tc, &b.tls, &e)) {
      fprintf(stderr, "ketch-grpc: %s\n", e.msg);
      return 1;
    }
  } else if (ca_file || client_cert_auth) {
    fprintf(stderr, "ketch-grpc: --trusted-ca-file/--client-cert-auth need --cert-file and "
                    "--key-file (or --auto-tls)\n");
    return 2;
  }
  ketch_options_init(&b.ko);
  b.ko.nonblocking_open = true;
  b.ko.max_outstanding = 65536;
  b.ko.ca_file = up_ca;
  b.ko.cert_file = up_cert;
  b.ko.key_file = up_key;
  b.ko.insecure_skip_verify = up_skip;
  b.endpoints = endpoints;
  b.forward_identity = up_cert != NULL;
  if (b.tls && (client_cert_auth || ca_file) && !b.forward_identity)
    logf_(2, "callers' certificate names are not passed on to the members: the bridge has no "
             "client certificate toward them (--cert/--key)");
  char err[512] = "";
  ketch_client *probe = NULL; /* the endpoints and TLS files are checked now, as before */
  if (ketch_open(&probe, endpoints, &b.ko, err, sizeof err) != 0) {
    fprintf(stderr, "ketch-grpc: --endpoints %s: %s\n", endpoints, err);
    return 2;
  }
  ketch_close(probe);
  int lfd = listen_on(listen_addr);
  if (lfd < 0) {
    fprintf(stderr, "ketch-grpc: cannot listen on %s: %s\n", listen_addr, strerror(errno));
    return 1;
  }
  loops = calloc((size_t)n_loops, sizeof *loops);
  if (!loops) {
    fprintf(stderr, "ketch-grpc: out of memory\n");
    return 1;
  }
  for (int i = 0; i < n_loops; i++) {
    loops[i] = b;
    loops[i].idx = i;
    loops[i].loop = i ? ev_loop_new(EVFLAG_AUTO) : EV_DEFAULT;
    if (!loops[i].loop || loop_init(&loops[i]))
      return 2;
  }
  kt_bridge_snap_setup(endpoints, &b.ko);
  kt_bridge_metrics_extra = loops_metrics;
  struct bridge *b0 = &loops[0];
  if (loop_local_init(b0))
    return 1;
  struct kt_bridge_reg *reg = NULL;
  if (resolver_prefix && !(reg = kt_bridge_reg_start(b0->loop, b0->up->kc, &b0->up->ksubmitted, ns,
                                                     resolver_prefix, b.advertise, resolver_ttl))) {
    fprintf(stderr, "ketch-grpc: --resolver-prefix: out of memory\n");
    return 1;
  }
  struct kt_http *http = NULL;
  struct kt_tls_ctx *metrics_tls = NULL; /* https://: the listener's settings without ALPN h2 */
  if (metrics_addr) {
    /* etcd's grpc-proxy takes a URL; a bare HOST:PORT is accepted too */
    bool https = strncmp(metrics_addr, "https://", 8) == 0;
    const char *a = https                                      ? metrics_addr + 8
                    : strncmp(metrics_addr, "http://", 7) == 0 ? metrics_addr + 7
                                                               : metrics_addr;
    char host[256];
    const char *colon = strrchr(a, ':');
    size_t hl = colon ? (size_t)(colon - a) : 0;
    if (hl && a[0] == '[' && a[hl - 1] == ']')
      a++, hl -= 2; /* [::1]:port */
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || hl == 0 || hl >= sizeof host || *end || port < 0 || port > 65535) {
      fprintf(stderr, "ketch-grpc: --metrics-addr %s: want [http[s]://]HOST:PORT\n", metrics_addr);
      return 2;
    }
    memcpy(host, a, hl);
    host[hl] = 0;
    struct kt_http_source src = {kt_bridge_metrics, bridge_health, bridge_probe, b0};
    struct kt_err e = {0};
    if (https) {
      if (!b.tls) {
        fprintf(stderr,
                "ketch-grpc: --metrics-addr %s: https needs --cert-file and --key-file (or "
                "--auto-tls)\n",
                metrics_addr);
        return 2;
      }
      struct kt_tls_config mc = *kt_tls_ctx_config(b.tls);
      mc.alpn_h2 = false; /* HTTP/1.1 (libmicrohttpd); the gRPC listener's context selects h2 */
      if (kt_tls_ctx_new(&mc, &metrics_tls, &e)) {
        fprintf(stderr, "ketch-grpc: --metrics-addr %s: %s\n", metrics_addr, e.msg);
        return 1;
      }
    }
    if (!(http = kt_http_new(b0->loop, &src, &e)) ||
        (https ? kt_http_listen_tls(http, host, (int)port, metrics_tls, &e)
               : kt_http_listen(http, host, (int)port, &e))) {
      fprintf(stderr, "ketch-grpc: --metrics-addr %s: %s\n", metrics_addr, e.msg);
      return 1;
    }
  }
  nghttp2_session_callbacks_new(&callbacks);
  /* nghttp2's HTTP checks of every request header are bridge_hdrs.c's few
   * (~15% of a cache hit's instructions); no closed streams kept for RFC
   * 7540 priorities, which the bridge does not use (SETTINGS below). */
  if (nghttp2_option_new(&h2opt) != 0) {
    fprintf(stderr, "ketch-grpc: out of memory\n");
    return 1;
  }
  nghttp2_option_set_no_http_messaging(h2opt, 1);
  nghttp2_option_set_no_closed_streams(h2opt, 1);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);

  ev_io_init(&b0->lio, on_accept, lfd, EV_READ);
  b0->lio.data = b0;
  ev_io_start(b0->loop, &b0->lio);
  ev_signal sint, sterm;
  ev_signal_init(&sint, on_signal, SIGINT);
  ev_signal_init(&sterm, on_signal, SIGTERM);
  ev_signal_start(b0->loop, &sint);
  ev_signal_start(b0->loop, &sterm);
  static const char *const tls_names[2] = {"listener", "metrics"};
  struct kt_tls_ctx *const reload_ctxs[2] = {b.tls, metrics_tls};
  struct kt_tls_reloader *reloader = kt_tls_reloader_new(b0->loop, reload_ctxs, tls_names, 2);
  /* The other loops' threads: signals stay with the main thread (loop 0). */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  for (int i = 1; i < n_loops; i++)
    if (pthread_create(&loops[i].th, NULL, loop_thread, &loops[i])) {
      fprintf(stderr, "ketch-grpc: cannot start event loop %d\n", i);
      return 1;
    }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  logf_(1,
        "ketch-grpc %s serving etcd v3 gRPC (API %s) on %s (%s), %d event loop%s, ketch members "
        "%s%s%s%s",
        KT_VERSION, KT_BRIDGE_ETCD_VERSION, listen_addr, b.tls ? "TLS, ALPN h2" : "h2c", n_loops,
        n_loops == 1 ? "" : "s", endpoints, ns ? ", namespace \"" : "", ns ? ns : "",
        ns ? "\"" : "");
  ev_run(b0->loop, 0);
  logf_(1, "stopping");
  ev_io_stop(b0->loop, &b0->lio);
  close(lfd);
  kt_bridge_reg_stop(reg); /* deregisters before the handles close */
  for (int i = 1; i < n_loops; i++) {
    atomic_store(&loops[i].stop, true);
    ev_async_send(loops[i].loop, &loops[i].wake);
  }
  for (int i = 1; i < n_loops; i++) {
    pthread_join(loops[i].th, NULL);
    ev_loop_destroy(loops[i].loop);
    pthread_mutex_destroy(&loops[i].inbox_mu);
  }
  loop_fini(b0);
  ev_signal_stop(b0->loop, &sint);
  ev_signal_stop(b0->loop, &sterm);
  kt_http_free(http); /* after: closing libketch answered the health checks waiting */
  kt_tls_reloader_free(reloader);
  kt_tls_ctx_free(b.tls);
  kt_tls_ctx_free(metrics_tls);
  pthread_mutex_destroy(&b0->inbox_mu);
  free(loops);
  nghttp2_session_callbacks_del(callbacks);
  nghttp2_option_del(h2opt);
  return 0;
}
