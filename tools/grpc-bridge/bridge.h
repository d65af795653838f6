/* tools/grpc-bridge/bridge.h — ketch-grpc: etcd's v3 gRPC API in front of a
 * ketch cluster.
 *
 * Two halves:
 *   bridge_main.c  the server: flags, the event loops ("Event loops"
 *                  below), TCP listener, one nghttp2 server session per
 *                  connection (h2c, prior knowledge), gRPC framing,
 *                  deadlines, trailers, back pressure; each loop's libketch
 *                  handles driven from that loop.
 *   bridge_kv.c    the etcd side of unary calls: which gRPC methods exist,
 *                  protobuf request -> libketch request, libketch result ->
 *                  protobuf response (KV, Lease, Cluster.MemberList,
 *                  Maintenance), and the ONE table of ketch error -> (gRPC
 *                  code, etcd message).
 *   bridge_frame.c a protobuf message framed for gRPC; a unary call's answer.
 *   bridge_snap.c  Maintenance.Snapshot: the member's state as an etcd
 *                  database (tools/etcddb) made by a job thread, streamed as
 *                  the client takes it.
 *   bridge_stream.c  the etcd side of streaming calls: Watch.Watch (handed
 *                  to bridge_watch.c), Lease.LeaseKeepAlive, and
 *                  v3lock.Lock / v3election.Election (etcd's concurrency
 *                  recipes run asynchronously on KV, Watch and the caller's
 *                  lease; their unary calls take this path too, so a client
 *                  that gives up while waiting is noticed).
 *   bridge_watch.c Watch.Watch: client watches of one range share one
 *                  upstream ketch_watch (etcd's grpc-proxy coalescing; its
 *                  header comment is the design: the shared-watch table,
 *                  per-client state, the join protocol by revision).
 *
 * Data flow of a unary call: HEADERS (path, grpc-timeout) -> DATA (one
 * length-prefixed message, at END_STREAM) -> kt_bridge_call() decodes and
 * submits to libketch -> libketch's callback encodes the response ->
 * done() -> the server sends HEADERS(:status 200) DATA trailers(grpc-status).
 *
 * Data flow of a streaming call: HEADERS -> kt_bridge_stream_open(); every
 * complete request message in DATA -> kt_bridge_stream_recv() at once; the
 * stream answers through its kt_bridge_stream_io: send() queues response
 * messages (sent as HTTP/2 flow control allows), finish() ends the call with
 * trailers after them. END_STREAM from the client -> kt_bridge_stream_eof();
 * reset, deadline or a closed connection -> kt_bridge_stream_close().
 *
 * Back pressure of streams: responses queue in the server per stream; a
 * watch delivery that does not fit (io->room() false: more than the stream's
 * or the connection's bound queued, because the client stops reading) CANCELS
 * that watch: the bridge cancels its ketch_watch and sends a canceled
 * WatchResponse with cancel_reason "ketch-grpc: watcher too slow ...". It
 * does not pause libketch (one handle serves every client of its loop).
 *
 * Invariants: done() runs exactly once per kt_bridge_call(), either inside it
 * (a request refused before reaching ketch, or a cache hit: then the call
 * submitted nothing to ketch, and the server skips ketch_process for it) or
 * later from ketch_process().
 * After kt_bridge_stream_close() the stream never calls io again; it frees
 * itself once libketch has completed its last callback.
 *
 * Event loops (--loops N; default `auto`: cores - 1, at most 8, and 1 below
 * 4 cores, as the member's --io-threads; KETCH_GRPC_LOOPS is the flag's
 * environment form). Each loop is one thread (ketch-grpc-N in `top -H`;
 * loop 0 is the main thread) with its own libev loop, and owns for its whole
 * life: the connections it was given (socket, TLS, nghttp2 session, streams),
 * its libketch handles (the default one, one per certificate identity, one
 * per auth session) and everything those handles carry: unary calls, watches,
 * lease keep-alives, lock/election recipes, snapshot jobs. A connection never
 * changes loops, so every per-stream guarantee (watch order, no duplicate or
 * lost event, keep-alive answers in order) is the single-loop one.
 *
 *   accept (loop 0 owns the one listening socket: a second process binding
 *   the port still fails with "address in use")
 *     -> round robin over the loops: loop 0 keeps its turn; another loop's
 *        turn goes into that loop's inbox (a mutex-guarded array, touched
 *        once per accepted connection, never per request) and its ev_async
 *     -> the loop makes the connection (TLS handshake budget per loop) and
 *        serves it alone from then on.
 *
 * Per loop (KT_LOOP_LOCAL: thread-local; no other thread reads it but the
 * /metrics scrape, which reads its counters, atomics, see below): the
 * watch coalescing table (client watches of one range share an upstream
 * watch only within their loop), the lease keep-alive coalescing table
 * (bridge_stream.c), the range cache's entries, its invalidation watch and
 * probes (bridge_cache.c: one watch per loop), auth sessions (a token
 * learnt on another loop gets a session that presents it, as a token from
 * another bridge does), the --endpoints-auto-sync timer (each loop syncs its
 * own handles), the snapshot jobs' loop, the watch progress tickers'
 * loop (bridge_watch.c), nghttp2's free lists (bridge_h2mem.c).
 * Shared, with one owner each: flags and the TLS contexts (read-only after
 * start; kt_tls_ctx swaps its SSL_CTX under its own mutex, so SIGHUP or a
 * file change reloaded by loop 0's kt_tls_reloader reaches every loop's next
 * handshake); the registration (--resolver-prefix) and /metrics, /health on
 * loop 0 (its default handle answers the health probe); the range cache's
 * promises across loops: S (the highest revision any client was shown),
 * the compaction floor and an Auth-call generation are process-wide atomic
 * registers any loop may raise, so a hit on one loop is never older than
 * what another loop showed (bridge_cache.c); a LeaseRevoke through any loop
 * reaches every loop's keep-alive table before that loop answers from it
 * again (a shared ring of revoked ids and its atomic count,
 * bridge_stream.c). Metrics: every loop counts in
 * its own counters (atomics written only by their loop); a scrape on loop 0
 * sums them (bridge_metrics.c), so /metrics adds up across loops.
 * Shutdown: SIGINT/SIGTERM stops loop 0, which asks each other loop to stop
 * (ev_async) and joins it; each loop closes its own connections and handles.
 */
#ifndef KT_BRIDGE_H
#define KT_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../client/ketch.h"

/* State owned by one event loop (thread-local; see "Event loops" above). */
#define KT_LOOP_LOCAL _Thread_local
/* The most --loops. */
#define KT_BRIDGE_MAX_LOOPS 64
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

/* The etcd server version the bridge reports where etcd reports its own
 * (Maintenance.Status.version, what `etcdctl endpoint status` shows and
 * clients gate features on): the etcd API level ketch-grpc implements,
 * etcd 3.4's v3 API as etcd 3.4.23 (Debian's etcd-server, which the tests
 * compare with) serves it. ketch's own version is in the bridge's start-up
 * log line, `ketchctl version`, the native STATUS and /metrics. */
#define KT_BRIDGE_ETCD_VERSION "3.4.23"
/* ... and the cluster version etcd 3.4 reports beside it (GET /version) */
#define KT_BRIDGE_ETCD_CLUSTER_VERSION "3.4.0"

/* The first bytes of a connection (n of them, p): when they begin an HTTP/1
 * request line (etcd's client port answers GET /version), the whole HTTP
 * answer to write before closing, in out (cap bytes); else 0 (HTTP/2: for
 * nghttp2). bridge_http1.c. */
size_t kt_bridge_http1(const uint8_t *p, size_t n, char *out, size_t cap);

/* Completion of one call. status is a gRPC status code; message is the
 * grpc-message (static or valid until done returns; "" on OK). On OK, framed
 * is a malloc'd gRPC length-prefixed message (5-byte prefix + protobuf) of
 * framed_len bytes whose ownership passes to done; otherwise NULL. */
typedef void (*kt_bridge_done)(void *arg, int status, const char *message, uint8_t *framed,
                               size_t framed_len);

enum {
  KT_BRIDGE_STREAM = 2,
  KT_BRIDGE_UNARY = 1,
  KT_BRIDGE_UNIMPLEMENTED = 0,
  KT_BRIDGE_UNKNOWN = -1
};

/* What the bridge does with a :path: KT_BRIDGE_UNARY (a served unary
 * method), KT_BRIDGE_STREAM (a served streaming method), KT_BRIDGE_UNIMPLEMENTED (an etcd service
 * not served: msg gets a clear UNIMPLEMENTED message), KT_BRIDGE_UNKNOWN (not an etcd method: msg
 * gets grpc-go's "unknown service" message). */
int kt_bridge_method(const char *path, char *msg, size_t msg_len);

/* Decodes the protobuf request msg[0..len) of the unary method `path`,
 * submits it to c and arranges for done(arg, ...) to run once (see above).
 * max_request_bytes: larger write requests get etcd's "request is too large". */
void kt_bridge_call(ketch_client *c, const char *path, const uint8_t *msg, size_t len,
                    size_t max_request_bytes, kt_bridge_done done, void *arg);

/* ---- streaming calls ---- */

/* What a stream needs from the server. arg is the server's stream. */
struct kt_bridge_stream_io {
  /* Queues one framed response message (ownership of framed passes). */
  void (*send)(void *arg, uint8_t *framed, size_t len);
  /* Whether n more bytes may be queued now (the stream's and the
   * connection's bounds). */
  bool (*room)(void *arg, size_t n);
  /* Ends the call: trailers with status and message after every queued
   * message. The stream calls nothing on io after finish. */
  void (*finish)(void *arg, int status, const char *message);
  /* delta (+1/-1) of the stream's calls pending on ketch (the server pauses
   * reading a connection with too many). */
  void (*pending)(void *arg, int delta);
  /* Asks for kt_bridge_stream_room once the stream's queue has drained
   * (after room() said no). May be NULL (then nothing calls back). */
  void (*want_room)(void *arg);
};

typedef struct kt_bridge_stream kt_bridge_stream;

/* Opens the streaming call `path` (kt_bridge_method said KT_BRIDGE_STREAM).
 * io must outlive the stream; arg is passed to it. NULL if out of memory. */
kt_bridge_stream *kt_bridge_stream_open(ketch_client *c, const char *path, size_t max_request_bytes,
                                        const struct kt_bridge_stream_io *io, void *arg);
/* One request message msg[0..len) (unframed protobuf): handled at once (a
 * malformed one finishes the call with INTERNAL, as grpc-go). */
void kt_bridge_stream_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len);
/* The client half-closed: LeaseKeepAlive finishes OK once its pending
 * renewals are answered; Watch keeps running (as etcd) until closed. */
void kt_bridge_stream_eof(kt_bridge_stream *s);
/* The stream asked io->want_room and its queue drained: it may send more. */
void kt_bridge_stream_room(kt_bridge_stream *s);
/* The server side is gone (reset, deadline, connection closed, finished):
 * no io call after this; watches are cancelled; memory is freed once
 * libketch has delivered their last callbacks. NULL is fine. */
void kt_bridge_stream_close(kt_bridge_stream *s);

/* Lease keep-alive coalescing (bridge_stream.c, --coalesce-lease-keepalives):
 * on when kt_bridge_ka_coalesce; keep-alives from clients and renewals sent
 * to the members (/metrics). kt_bridge_ka_forget drops what is cached for a
 * handle (kc NULL: any) and lease (id 0: any): a handle closing, a lease
 * revoked through the bridge. */
extern bool kt_bridge_ka_coalesce;
extern KT_LOOP_LOCAL _Atomic uint64_t kt_bridge_ka_requests, kt_bridge_ka_upstream;
void kt_bridge_ka_forget(ketch_client *kc, int64_t id);

/* A response header from a ketch header (k NULL: ids of kc, revision and
 * term 0; zero ids in k: kc's) and a KeyValue from a ketch kv (pointing at
 * its bytes). bridge_stream.c. */
void kt_bridge_fill_header(Etcdserverpb__ResponseHeader *h, const ketch_header *k,
                           ketch_client *kc);
void kt_bridge_fill_kv(Mvccpb__KeyValue *o, const ketch_kv *kv);

/* ---- Watch (bridge_watch.c) ---- */

/* One Watch stream on handle kc, answering through io/arg (as a
 * kt_bridge_stream's); fragment_bytes: etcd's fragment limit. NULL if out
 * of memory. recv: one WatchRequest message; close: no io call after it, its
 * watches leave their shared upstream watches (the last one leaving cancels
 * it); memory is freed once no progress round refers to it. */
typedef struct kt_bridge_wstream kt_bridge_wstream;
kt_bridge_wstream *kt_bridge_watch_open(ketch_client *kc, size_t fragment_bytes,
                                        const struct kt_bridge_stream_io *io, void *arg);
void kt_bridge_watch_recv(kt_bridge_wstream *s, const uint8_t *msg, size_t len);
void kt_bridge_watch_close(kt_bridge_wstream *s);
/* On each event loop's thread (its own setting, bridge.h "Event loops"):
 * streams opened after this get etcd's progress ticker on loop: every
 * progress_interval_s (plus up to 10% jitter, as etcd) each watch with
 * progress_notify that was sent no events since the last tick gets a progress
 * notification (etcd's --experimental-watch-progress-notify-interval, 10 min
 * by default). submitted(kc, arg) runs when a tick queued work on kc (for the
 * server to flush it). Without setup, no notifications. */
struct ev_loop;
void kt_bridge_watch_setup(struct ev_loop *loop, double progress_interval_s,
                           void (*submitted)(ketch_client *kc, void *arg), void *arg);
/* etcd's grpc-proxy figures (/metrics): client watches sharing an upstream
 * watch beyond each one's first (gauge), and responses fanned out beyond
 * the first per upstream delivery (counter). */
extern KT_LOOP_LOCAL _Atomic int64_t kt_bridge_watchers_coalescing;
extern KT_LOOP_LOCAL _Atomic uint64_t kt_bridge_events_coalescing;

/* ---- Auth (bridge_auth.c) ---- */

/* The KETCH_OP_* of an Auth method's path (KETCH_OP_AUTHENTICATE for
 * Authenticate), or -1. */
int kt_bridge_auth_method(const char *path);
/* An Auth call other than Authenticate, as kt_bridge_call. */
void kt_bridge_auth_call(ketch_client *kc, int op, const uint8_t *msg, size_t len,
                         kt_bridge_done done, void *arg);
/* Authenticate's request: malloc'd name and password (0), or -1 (malformed
 * or out of memory). */
int kt_bridge_authenticate_decode(const uint8_t *msg, size_t len, char **name, char **password);
/* Authenticate's answer from a KETCH_OP_AUTHENTICATE result (or its error). */
void kt_bridge_authenticate_done(const ketch_result *res, kt_bridge_done done, void *arg);

/* ---- Maintenance.Snapshot (bridge_snap.c) ---- */

struct ev_loop;
typedef struct kt_bridge_snap kt_bridge_snap;
/* The members snapshot jobs may ask (--endpoints) and how (base: the TLS
 * options of the bridge's own handles; its strings must outlive the
 * bridge): once, before the loops start. Then, on each loop's thread, where
 * that loop's jobs report (kt_bridge_snap_loop). Without both every
 * Snapshot call is UNAVAILABLE. */
void kt_bridge_snap_setup(const char *endpoints, const ketch_options *base);
void kt_bridge_snap_loop(struct ev_loop *loop);
/* Starts one Snapshot call on the stream io/arg (counted as pending); kc: the
 * bridge's handle, whose member is asked first. NULL with *grpc_status and
 * *msg set when it cannot start. */
kt_bridge_snap *kt_bridge_snap_start(ketch_client *kc, const struct kt_bridge_stream_io *io,
                                     void *arg, int *grpc_status, const char **msg);
/* The stream has room again (io->want_room was asked). */
void kt_bridge_snap_room(kt_bridge_snap *sn);
/* The stream is gone: no io call after this; the job frees itself. */
void kt_bridge_snap_close(kt_bridge_snap *sn);

/* Internal to the bridge's services (bridge_frame.c, and kt_bridge_fail
 * bridge_kv.c's): frame a message (malloc'd, NULL if out of memory); answer
 * a call with a framed message, or with the error (code and etcd's message)
 * for a ketch error code. */
uint8_t *kt_bridge_frame(const void *protobuf_c_message, size_t *len);
void kt_bridge_finish(kt_bridge_done done, void *arg, const void *protobuf_c_message);
void kt_bridge_fail(kt_bridge_done done, void *arg, int err, const char *detail);
/* gRPC's 5-byte prefix of a message of n bytes (not compressed), at p. */
static inline void kt_bridge_frame_prefix(uint8_t *p, size_t n) {
  p[0] = 0;
  p[1] = (uint8_t)(n >> 24);
  p[2] = (uint8_t)(n >> 16);
  p[3] = (uint8_t)(n >> 8);
  p[4] = (uint8_t)n;
}

/* The gRPC code and etcd's message for a ketch error code (the one table).
 * `detail` (may be NULL) is used for errors etcd has no fixed message for. */
const char *kt_bridge_error(int ketch_err, const char *detail, int *grpc_status);

/* The milliseconds of a grpc-timeout header value (1-8 ASCII digits and a
 * unit H M S m u n, rounded up), or -1 if it is malformed. Pure. */
int64_t kt_bridge_parse_timeout(const uint8_t *v, size_t n);

/* ---- a request's header block (bridge_hdrs.c) ----
 * The server's nghttp2 sessions skip nghttp2's HTTP checks of every header
 * (nghttp2_option_set_no_http_messaging); these are the ones the bridge
 * needs. Each header of a request's header block, in order, goes to
 * kt_bridge_req_header (h zeroed first), which says whether it is one the
 * bridge reads (KT_HDR_*; KT_HDR_OTHER also for one that made the block
 * malformed); then kt_bridge_req_check: KT_REQ_OK, KT_REQ_NOT_POST (a
 * well-formed request whose :method, h->method, is not POST: a gRPC error)
 * or KT_REQ_MALFORMED (*why says why: RST_STREAM PROTOCOL_ERROR, RFC 9113
 * 8.1.1). Pure. */
enum { KT_HDR_OTHER, KT_HDR_PATH, KT_HDR_CONTENT_TYPE, KT_HDR_TIMEOUT, KT_HDR_TOKEN };
enum { KT_REQ_OK, KT_REQ_NOT_POST, KT_REQ_MALFORMED };
struct kt_bridge_req_hdrs {
  uint8_t seen;          /* the pseudo-headers seen (bridge_hdrs.c) */
  bool regular;          /* a regular header came */
  bool post;             /* :method is POST */
  const char *malformed; /* the first reason the block is malformed, or NULL */
  char method[16];       /* :method as sent (cut short) */
};
int kt_bridge_req_header(struct kt_bridge_req_hdrs *h, const uint8_t *name, size_t nlen,
                         const uint8_t *value, size_t vlen);
int kt_bridge_req_check(const struct kt_bridge_req_hdrs *h, const char **why);

/* ---- bridge_ns.c: --namespace PREFIX ---- */
/* The request message msg[0..len) (unframed protobuf) of method `path` with
 * every key moved into the namespace pfx[0..pfx_len): 0 and *out NULL (a
 * method without keys: use msg), 0 and a malloc'd *out and *out_len, -1 (msg
 * does not unpack) or -2 (out of memory). Pure. */
int kt_bridge_ns_request(const char *pfx, size_t pfx_len, const char *path, const uint8_t *msg,
                         size_t len, uint8_t **out, size_t *out_len);
/* The framed response message of `path` with the namespace stripped from
 * its keys (keys outside it left out): 0 (no keys: keep framed), 1 (a
 * malloc'd framed *out and *out_len), -1 (does not unpack, or out of memory:
 * the message must not be sent). Pure. */
int kt_bridge_ns_response(const char *pfx, size_t pfx_len, const char *path, const uint8_t *framed,
                          size_t len, uint8_t **out, size_t *out_len);
/* Methods a namespaced bridge refuses (Maintenance.Snapshot: it would hand
 * out every tenant's keys). */
bool kt_bridge_ns_refused(const char *path);

/* ---- bridge_reg.c: --resolver-prefix, --resolver-ttl, --advertise-client-url ---- */
struct kt_bridge_reg;
/* Registers [ns]prefix/addr under a lease of ttl_s seconds kept alive on kc
 * (registering again whenever it is lost); *submitted is set when kc has
 * work for ketch_process. NULL if out of memory. */
struct kt_bridge_reg *kt_bridge_reg_start(struct ev_loop *loop, ketch_client *kc, bool *submitted,
                                          const char *ns, const char *prefix, const char *addr,
                                          int ttl_s);
/* Stops and revokes the registration's lease (a last blocking call: only at
 * exit). NULL is fine. */
void kt_bridge_reg_stop(struct kt_bridge_reg *r);
/* MemberList as etcd's grpc-proxy with an advertised address addr: the
 * registered proxies under [ns]prefix/ (prefix may be NULL), or the bridge
 * itself alone; done as kt_bridge_call's. */
void kt_bridge_reg_member_list(ketch_client *kc, const char *ns, const char *prefix,
                               const char *addr, kt_bridge_done done, void *arg);
/* The Name in a registration's value (etcd's naming.Update JSON), "" when
 * absent; out is always terminated. Pure, bounded. */
void kt_bridge_reg_name(const uint8_t *v, size_t n, char *out, size_t out_len);

/* ---- bridge_cache.c: the serializable range cache (--cache-size) ----
 * Its header comment has the data flow, the rules and what a hit promises.
 * Off (every call a no-op) unless kt_bridge_cache_setup ran with entries. */
struct kt_bridge_cache_fill;
/* On the calling loop's thread (the cache is per loop): caches on kc (that
 * loop's default handle; *submitted set when it queued work)
 * at most max_entries answers and max_bytes bytes, none older than
 * max_stale_s. 0 (max_entries 0: off), -1 out of memory. */
int kt_bridge_cache_setup(struct ev_loop *loop, ketch_client *kc, bool *submitted,
                          size_t max_entries, size_t max_bytes, double max_stale_s);
/* At exit, on the loop's thread, before kc closes: drops everything,
 * cancels the watch. */
void kt_bridge_cache_stop(void);
/* A Range request msg[0..len) (after --namespace) on kc: true when it was
 * answered from the cache (done ran), false to send it to the member. */
bool kt_bridge_cache_get(ketch_client *kc, const uint8_t *msg, size_t len, kt_bridge_done done,
                         void *arg);
/* The miss of a decoded Range q on kc: a fill ticket when its answer may be
 * cached (serializable, the cache on and its watch live), else NULL. */
struct kt_bridge_cache_fill *kt_bridge_cache_miss(ketch_client *kc, const uint8_t *msg, size_t len,
                                                  const ketch_range_req *q);
/* The member answered ticket f with header h and resp (an
 * Etcdserverpb__RangeResponse whose header is h; left as it was): consumes
 * f, may store the answer, and returns the framed answer for the client
 * (malloc'd, *len bytes), or NULL (too large to keep, or out of memory: frame resp yourself). */
uint8_t *kt_bridge_cache_fill(struct kt_bridge_cache_fill *f, const ketch_header *h, void *resp,
                              size_t *len);
/* The ticket's request failed with err (0: not sent): consumes f (NULL is
 * fine); KETCH_ECOMPACTED raises the compaction floor. */
void kt_bridge_cache_fill_failed(struct kt_bridge_cache_fill *f, int err);
/* A Compact to revision is about to be sent: cached reads below it go. */
void kt_bridge_cache_compacting(int64_t revision);
/* Drops every entry, on every loop (an Auth call: what the default handles
 * may read may change; the other loops drop theirs at their next lookup). */
void kt_bridge_cache_clear(void);
/* A framed response message a client is about to get: its header revision
 * is something a client saw (S). */
void kt_bridge_cache_seen(const uint8_t *framed, size_t len);
/* Appends etcd_grpc_proxy_cache_{keys,hits,misses}_total and ketch's own
 * cache figures to /metrics, summed over the loops. */
struct kt_buf;
void kt_bridge_cache_metrics(struct kt_buf *out);

/* ---- bridge_metrics.c: /metrics on --metrics-addr ---- */
struct kt_buf;
struct kt_bridge_method_stat;
/* A served method's call started (path: a served method's :path); the
 * record to finish it with, or NULL when the table is full. */
struct kt_bridge_method_stat *kt_bridge_stat_start(const char *path, bool stream);
/* ... and ended with grpc status code (NULL: no-op). */
void kt_bridge_stat_done(struct kt_bridge_method_stat *s, int code);
/* Appends grpc_server_started_total / grpc_server_handled_total and the
 * coalescing figures, summed over the loops, then the server's own
 * (extra(arg, out): per-loop connections), then the cache's. */
void kt_bridge_metrics(void *arg, struct kt_buf *out);
/* On each loop's thread, before it serves: makes its counters part of the
 * sums (at most KT_BRIDGE_MAX_LOOPS). */
void kt_bridge_metrics_register_loop(void);
/* What kt_bridge_metrics appends after its own (set before the loops). */
extern void (*kt_bridge_metrics_extra)(void *arg, struct kt_buf *out);

#endif
