/* net/server.h — client listeners and connections on the member's libev loop.
 *
 * Threads (net/THREADS.md): with io_threads 0 (below) everything here runs
 * on the loop's thread. With io_threads N > 0, N I/O threads
 * (net/iothread.c) own the sockets — accept, TLS, reads, framing, writes —
 * and this file keeps the state side of each connection: frames arrive in
 * batches and are decoded and handled here, replies are encoded here and
 * handed over at the end of the turn. Every call below is made on the loop's
 * (the state) thread in both modes; the data flow and limits below hold in
 * both.
 *
 * Owns: listening sockets, every client connection, its bounded input and
 * output buffers, and the per-turn flush of replies.
 *
 * Data flow: readable socket → one read (plain TCP: one read(); TLS: records
 * up to KT_CONN_READ_CHUNK) into conn->in → split frames (kt_frame_next) →
 * decode (kt_proto_decode_req) → handler (the node) → the handler answers
 * now or later with kt_conn_send → bytes appended to conn->out → at the end
 * of the loop turn (ev_prepare) one write per dirty connection.
 *
 * Transport (net/tls.h): every connection is a struct kt_io, plain TCP or
 * TLS, reached through the same calls; the watchers a connection needs come
 * from kt_io_events (one function: conn_arm). A listener serves plain TCP,
 * TLS, or both on one port (the first byte tells a TLS ClientHello from a
 * native frame). TLS connections:
 *   - handshake before anything else: nothing but the connection struct and
 *     OpenSSL's SSL object exists until it is done (no buffers);
 *   - at most KT_TLS_HANDSHAKES_PER_TURN handshake steps per loop turn; the
 *     rest wait on a FIFO drained by an ev_check watcher in later turns (an
 *     idle watcher keeps the loop from sleeping meanwhile), so a storm of new
 *     clients cannot stall the loop's other work;
 *   - a handshake not done within KT_TLS_HANDSHAKE_MS is cut;
 *   - records OpenSSL read ahead raise no poll event: a connection left with
 *     such bytes goes on the pending list, drained by the same ev_check;
 *   - a plaintext client on a TLS-only port gets one native ERROR frame in
 *     plaintext naming the problem; a TLS client on a plaintext-only port is
 *     closed; both sides log one line (warnings at most 10 a second).
 * The verified client certificate's Common Name is the connection's identity
 * (kt_conn_identity); a HELLO may carry a proxied caller's identity, taken
 * only on a connection that presented a verified client certificate
 * (net/PROTOCOL.md, HELLO).
 *
 * Limits (net/PROTOCOL.md section 9), etcd's: a request the node proposes
 * through the log (a write) whose body is over max_request_bytes gets
 * ETOOLARGE with its id and the connection stays open; reads (range, a txn
 * without writes, watch, ...) may be up to max_request_bytes +
 * KT_READ_EXTRA_BYTES (etcd's gRPC receive limit); a body over that gets
 * ETOOLARGE too, its bytes dropped unread; a length prefix over KT_MAX_FRAME_BYTES or of zero, a
 * malformed body, a request before HELLO or a second HELLO get an error and the connection is
 * closed; an unknown request type gets EUNSUPPORTED and the connection stays. When a connection's
 * unsent output passes KT_CONN_OUT_SOFT, the server stops reading from it (backpressure); when it
 * passes KT_CONN_OUT_HARD, or no byte could be written for
 * KT_CONN_STALL_MS while output is pending, the connection is cut.
 *
 * Lifetime: a handler that answers later takes a reference (kt_conn_ref);
 * sending to a closed connection is a no-op; the memory goes with the last
 * reference.
 */
#ifndef KT_SERVER_H
#define KT_SERVER_H

#include <ev.h>

#include "proto.h"

struct kt_tls_ctx;

#define KT_CONN_READ_CHUNK (64u * 1024u)
/* Beyond --max-request-bytes for requests that are not proposals: etcd's
 * gRPC server receives max-request-bytes + 512 KiB and applies the limit
 * itself to proposals only. HELLO advertises the sum. */
#define KT_READ_EXTRA_BYTES (512u * 1024u)
#define KT_CONN_OUT_SOFT (4u * 1024u * 1024u)
#define KT_CONN_OUT_HARD (KT_MAX_FRAME_BYTES + KT_CONN_OUT_SOFT)
#define KT_CONN_STALL_MS 10000
#define KT_MAX_CONNS 65536

struct kt_conn;
struct kt_server;

/* Called for each decoded request. `req` and `body` (the frame's raw msgpack
 * body, which the node stores in the WAL as is) point into the connection's
 * input buffer: valid only during the call. */
typedef void (*kt_request_fn)(void *arg, struct kt_conn *c, const struct kt_req *req,
                              const uint8_t *body, size_t body_len);

struct kt_server_config {
  uint32_t max_request_bytes;
  kt_request_fn on_request;
  void *arg;
  /* A connection with udata set is closing (its fd already closed; sends are
   * no-ops): release the handler's state. May be NULL. */
  void (*on_close)(void *arg, struct kt_conn *c);
  /* The output of a connection that asked with kt_conn_want_drain is fully
   * written: the handler may append more (streams: watch events). */
  void (*on_drained)(void *arg, struct kt_conn *c);
  /* Filled into HELLO answers. */
  uint64_t cluster_id, member_id;
  /* I/O threads (net/THREADS.md): 0 = this loop's thread does the socket
   * work too; N > 0 = N threads own the sockets, this thread never touches
   * one (handlers and every kt_conn call still run here). */
  int io_threads;
};

/* NULL with e set when its I/O threads cannot start. */
struct kt_server *kt_server_new(struct ev_loop *loop, const struct kt_server_config *cfg,
                                struct kt_err *e);
/* Listen on host:port (numeric or "localhost"). tls NULL: plain TCP; else
 * TLS with that context (owned by the caller, outliving the server), and
 * plaintext clients too when also_plain. Errors name the address. */
int kt_server_listen(struct kt_server *s, const char *host, int port, struct kt_tls_ctx *tls,
                     bool also_plain, struct kt_err *e);
/* Stop accepting and reading; pending replies still flush. */
void kt_server_stop_accepting(struct kt_server *s);
/* Bytes not yet written on any connection (shutdown waits for 0). */
size_t kt_server_unsent(const struct kt_server *s);
void kt_server_free(struct kt_server *s);
size_t kt_server_conn_count(const struct kt_server *s);
/* HTTP on the client URLs (as etcd serves /metrics and /health there): a
 * connection whose first byte (after TLS's handshake on an https:// URL) is
 * an ASCII capital letter is an HTTP request (a native frame starts with 0).
 * fn(arg, io, pre, n) takes the connection: io, moved out of the server
 * (plain TCP, or TLS with its handshake done: fn owns and closes it), and
 * pre[0..n) the bytes already read from it (TLS: decrypted; plain: none,
 * they are still in the socket); the native connection closes. NULL fn:
 * off (such a connection gets the native protocol's error for a bad length
 * prefix). */
struct kt_io;
typedef void (*kt_server_http_fn)(void *arg, struct kt_io *io, const uint8_t *pre, size_t n);
void kt_server_set_http(struct kt_server *s, kt_server_http_fn fn, void *arg);
/* Client bytes received and sent since start (after TLS), for /metrics. */
void kt_server_bytes(const struct kt_server *s, uint64_t *in, uint64_t *out);

void kt_conn_ref(struct kt_conn *c);
void kt_conn_unref(struct kt_conn *c);
bool kt_conn_open(const struct kt_conn *c);
/* The output buffer to append whole frames to (with kt_proto_encode_*),
 * then kt_conn_sent. NULL if the connection is closed. */
struct kt_buf *kt_conn_out(struct kt_conn *c);
void kt_conn_sent(struct kt_conn *c);
void kt_conn_send_error(struct kt_conn *c, uint64_t id, int code, const char *msg);
/* Encode r to c's output (a no-op when closed). */
void kt_conn_send_resp(struct kt_conn *c, const struct kt_resp *r);
/* Watch fan-out (net/THREADS.md, "Watch fan-out"): one frame's events,
 * encoded once (kt_proto_encode_watch_events) into an immutable,
 * reference-counted batch that every watcher at the same place in the same
 * group's log gets. kt_wbatch_new returns it with one reference (the
 * caller's); kt_conn_send_watch_batch takes references of its own where it
 * keeps it. Thread-safe: the last unref, on any thread, frees it. */
struct kt_wbatch;
struct kt_wbatch *kt_wbatch_new(const struct kt_event *events, uint32_t n, bool fragment);
void kt_wbatch_unref(struct kt_wbatch *b);
/* A WATCH frame with b's events for stream `id`, watch `watch_id`, with
 * header h, in order with everything else sent on c (a no-op when closed).
 * Without I/O threads it is encoded into c's output now; with them the
 * batch goes to c's I/O thread, once for a run of consecutive
 * watchers of it on that thread, and the I/O thread writes the frame
 * around it. */
void kt_conn_send_watch_batch(struct kt_conn *c, uint64_t id, const struct kt_header *h,
                              int64_t watch_id, struct kt_wbatch *b);
/* Bytes appended and not yet written (0 when closed). Streams stop
 * producing above KT_CONN_OUT_SOFT and ask kt_conn_want_drain. */
size_t kt_conn_unsent(const struct kt_conn *c);
void kt_conn_want_drain(struct kt_conn *c);
/* The user an AUTHENTICATE bound the connection to, and the auth revision
 * it authenticated at (user.n 0: unbind). kt_conn_user: false when none. */
#define KT_CONN_USER_MAX 256
void kt_conn_set_user(struct kt_conn *c, struct kt_bytes user, uint64_t auth_revision);
bool kt_conn_user(const struct kt_conn *c, struct kt_bytes *user, uint64_t *auth_revision);
/* The token that binding came with, for its lifetime (core/node_auth.c
 * checks it on each request): a simple token's text (renewed by each use,
 * ended by its TTL unused), or a signed token's expiry (unix ms). */
#define KT_CONN_TOKEN_MAX 32
void kt_conn_set_token(struct kt_conn *c, struct kt_bytes simple, int64_t expires_ms);
void kt_conn_token(const struct kt_conn *c, struct kt_bytes *simple, int64_t *expires_ms);
/* When the simple token was last found alive in the member's table (ms, the
 * caller's clock; 0: never): the caller looks it up at most once a second. */
int64_t kt_conn_token_checked(const struct kt_conn *c);
void kt_conn_set_token_checked(struct kt_conn *c, int64_t ms);
/* The permissions core/node_auth.c keeps for the bound user ([0] READ,
 * [1] WRITE: core/auth.h); kt_conn_set_user forgets them. */
struct kt_auth_grant *kt_conn_grants(struct kt_conn *c);
/* The caller's identity: the Common Name of the verified client certificate,
 * or the identity a proxy with such a certificate named in its HELLO; NULL
 * when there is none. Valid while the connection is referenced. */
const char *kt_conn_identity(const struct kt_conn *c);
/* The handler's per-connection pointer (NULL until set); see on_close. */
void *kt_conn_udata(const struct kt_conn *c);
void kt_conn_set_udata(struct kt_conn *c, void *udata);

#endif
