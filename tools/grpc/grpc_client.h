/* tools/grpc/grpc_client.h — a small gRPC client codec: unary and streaming
 * calls over one HTTP/2 connection (h2c with prior knowledge, or TLS with
 * ALPN h2 through net/tls.h), many concurrent streams, driven by
 * the caller's poll loop. Shared by ketch-bench's etcd target and (for the
 * framing) the gRPC bridge.
 *
 * Owns: one TCP connection, one nghttp2 client session, a fixed table of
 * stream slots (one per outstanding call), the output buffer.
 *
 * Data flow: kt_grpc_call() packs the 5-byte gRPC prefix + message into a slot
 * and submits a POST with it as the body; kt_grpc_process() reads the socket
 * into nghttp2, which fills the slot's response buffer and trailers; when the
 * stream closes the callback gets the grpc-status and, on OK, the message
 * bytes (the prefix checked and stripped); then pending frames are written.
 *
 * Invariants: every accepted call's callback runs exactly once (from inside
 * kt_grpc_process or kt_grpc_close, never from kt_grpc_call); a call finishes
 * at the latest at its deadline (DEADLINE_EXCEEDED, the stream is reset).
 * No reconnect: a lost connection fails every pending call with UNAVAILABLE and
 * later calls at once. Response size is capped (KT_GRPC_MAX_MSG).
 */
#ifndef KT_GRPC_CLIENT_H
#define KT_GRPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum {
  KT_GRPC_OK = 0,
  KT_GRPC_CANCELLED = 1,
  KT_GRPC_UNKNOWN = 2,
  KT_GRPC_INVALID_ARGUMENT = 3,
  KT_GRPC_DEADLINE_EXCEEDED = 4,
  KT_GRPC_NOT_FOUND = 5,
  KT_GRPC_ALREADY_EXISTS = 6,
  KT_GRPC_PERMISSION_DENIED = 7,
  KT_GRPC_RESOURCE_EXHAUSTED = 8,
  KT_GRPC_FAILED_PRECONDITION = 9,
  KT_GRPC_ABORTED = 10,
  KT_GRPC_OUT_OF_RANGE = 11,
  KT_GRPC_UNIMPLEMENTED = 12,
  KT_GRPC_INTERNAL = 13,
  KT_GRPC_UNAVAILABLE = 14,
  KT_GRPC_DATA_LOSS = 15,
  KT_GRPC_UNAUTHENTICATED = 16,
};

#define KT_GRPC_MAX_MSG (16u << 20) /* largest response message accepted */

/* The code's name ("UNAVAILABLE"); "UNKNOWN_CODE" outside 0..16. Static. */
const char *kt_grpc_status_name(int status);

/* Parses one gRPC length-prefixed message at the start of buf[0..len):
 * 1 byte compressed flag (must be 0: no compression is negotiated), 4 bytes
 * big-endian length, then the message. On success sets *msg and *msg_len (into
 * buf) and returns the bytes consumed (5 + length); returns 0 if more bytes
 * are needed, -1 if the prefix is invalid (compressed flag set, or a length
 * above max_len). Pure; never reads past buf[len). */
long kt_grpc_frame_parse(const uint8_t *buf, size_t len, size_t max_len, const uint8_t **msg,
                         size_t *msg_len);

typedef struct kt_grpc_client kt_grpc_client;

/* The result of one call. status is a KT_GRPC_* code; message is the
 * grpc-message (or a local explanation), NUL-terminated, never NULL. On OK,
 * msg/msg_len is the response message (unframed). Everything is valid only
 * until the callback returns. A callback may start new calls. */
typedef void (*kt_grpc_cb)(void *arg, int status, const char *message, const uint8_t *msg,
                           size_t msg_len);

/* Connects (blocking, at most timeout_ms) to "host:port" (numeric IPv4 or a
 * name) and sends the HTTP/2 preface and SETTINGS. max_outstanding bounds the
 * calls in flight. Returns 0 and *out, or -1 with err filled. */
int kt_grpc_open(kt_grpc_client **out, const char *host_port, int max_outstanding, int timeout_ms,
                 char *err, size_t err_len);
/* The same over TLS with a client context of net/tls.h (ALPN h2 offered; a
 * server that picks another protocol is refused); the handshake completes
 * here (blocking, within timeout_ms). tls NULL: kt_grpc_open. */
struct kt_tls_ctx;
int kt_grpc_open_tls(kt_grpc_client **out, const char *host_port, struct kt_tls_ctx *tls,
                     int max_outstanding, int timeout_ms, char *err, size_t err_len);

/* Fails every pending call with CANCELLED (callbacks run here), closes the
 * socket, frees everything. NULL is fine. Not from inside a callback. */
void kt_grpc_close(kt_grpc_client *c);

/* Every later call carries `token` as its `token` metadata (etcd's auth
 * token after Auth/Authenticate); "" stops it. -1 if longer than 511 bytes. */
int kt_grpc_set_token(kt_grpc_client *c, const char *token);

/* Starts a unary call of `path` (e.g. /etcdserverpb.KV/Put) with the
 * serialized request msg[0..len) (copied). timeout_ms > 0 sets a deadline
 * (sent as grpc-timeout too). Returns 0 (cb will run) or a KT_GRPC_* code
 * (cb will not run): RESOURCE_EXHAUSTED when max_outstanding calls are in
 * flight, UNAVAILABLE when the connection is gone, INTERNAL from nghttp2. */
int kt_grpc_call(kt_grpc_client *c, const char *path, const uint8_t *msg, size_t len,
                 int timeout_ms, kt_grpc_cb cb, void *arg);

/* Streaming calls (client, server or bidirectional streams: Watch,
 * LeaseKeepAlive). kt_grpc_stream_open starts `path` with no request message
 * yet and sets *stream (a handle valid until on_end has run). on_msg runs for
 * every response message as it arrives (msg valid during the call; it may
 * send on the stream); on_end runs exactly once, with the final grpc-status
 * (OK when the server ended the stream cleanly, CANCELLED from
 * kt_grpc_close, UNAVAILABLE when the connection is lost); nothing runs after
 * it. Streams have no deadline. Errors as kt_grpc_call. */
typedef void (*kt_grpc_msg_cb)(void *arg, const uint8_t *msg, size_t msg_len);
int kt_grpc_stream_open(kt_grpc_client *c, const char *path, kt_grpc_msg_cb on_msg,
                        kt_grpc_cb on_end, void *arg, int *stream);
/* Queues one request message msg[0..len) (copied) on an open stream; it
 * leaves in the next kt_grpc_process(). FAILED_PRECONDITION if the stream
 * has ended or its send side is closed, UNAVAILABLE without a connection. */
int kt_grpc_stream_send(kt_grpc_client *c, int stream, const uint8_t *msg, size_t len);
/* Half-closes the send side (END_STREAM after the queued messages). */
int kt_grpc_stream_close_send(kt_grpc_client *c, int stream);

/* Poll integration, as libketch: watch kt_grpc_events() on kt_grpc_fd() for at
 * most kt_grpc_timeout_ms() (-1: no deadline), then call kt_grpc_process(),
 * which never blocks: reads, dispatches completions, expires deadlines,
 * writes. Returns 0, or KT_GRPC_UNAVAILABLE once the connection is lost. */
int kt_grpc_fd(const kt_grpc_client *c);
short kt_grpc_events(const kt_grpc_client *c);
int kt_grpc_timeout_ms(const kt_grpc_client *c);
int kt_grpc_process(kt_grpc_client *c);
size_t kt_grpc_pending(const kt_grpc_client *c);

#endif
