/* tools/grpc-bridge/bridge.h — ketch-grpc: etcd's v3 gRPC API in front of a
 * ketch cluster.
 *
 * Two halves:
 *   bridge_main.c  the server: flags, one libev loop, TCP listener, one
 *                  nghttp2 server session per connection (h2c, prior
 *                  knowledge), gRPC framing, deadlines, trailers, back
 *                  pressure; one libketch handle driven from the same loop.
 *   bridge_kv.c    the etcd side: which gRPC methods exist, protobuf request
 *                  -> libketch request, libketch result -> protobuf response,
 *                  and the ONE table of ketch error -> (gRPC code, etcd message).
 *
 * Data flow of a unary call: HEADERS (path, grpc-timeout) -> DATA (one
 * length-prefixed message, at END_STREAM) -> kt_bridge_call() decodes and
 * submits to libketch -> libketch's callback encodes the response ->
 * done() -> the server sends HEADERS(:status 200) DATA trailers(grpc-status).
 *
 * Invariants: done() runs exactly once per kt_bridge_call(), either inside it
 * (a request refused before reaching ketch) or later from ketch_process().
 */
#ifndef KT_BRIDGE_H
#define KT_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "../../client/ketch.h"

/* Completion of one call. status is a gRPC status code; message is the
 * grpc-message (static or valid until done returns; "" on OK). On OK, framed
 * is a malloc'd gRPC length-prefixed message (5-byte prefix + protobuf) of
 * framed_len bytes whose ownership passes to done; otherwise NULL. */
typedef void (*kt_bridge_done)(void *arg, int status, const char *message, uint8_t *framed,
                               size_t framed_len);

enum { KT_BRIDGE_UNARY = 1, KT_BRIDGE_UNIMPLEMENTED = 0, KT_BRIDGE_UNKNOWN = -1 };

/* What the bridge does with a :path: KT_BRIDGE_UNARY (a served unary
 * method), KT_BRIDGE_UNIMPLEMENTED (an etcd service not served: msg gets a
 * clear UNIMPLEMENTED message), KT_BRIDGE_UNKNOWN (not an etcd method: msg
 * gets grpc-go's "unknown service" message). */
int kt_bridge_method(const char *path, char *msg, size_t msg_len);

/* Decodes the protobuf request msg[0..len) of the unary method `path`,
 * submits it to c and arranges for done(arg, ...) to run once (see above).
 * max_request_bytes: larger write requests get etcd's "request is too large". */
void kt_bridge_call(ketch_client *c, const char *path, const uint8_t *msg, size_t len,
                    size_t max_request_bytes, kt_bridge_done done, void *arg);

/* The gRPC code and etcd's message for a ketch error code (the one table).
 * `detail` (may be NULL) is used for errors etcd has no fixed message for. */
const char *kt_bridge_error(int ketch_err, const char *detail, int *grpc_status);

/* The milliseconds of a grpc-timeout header value (1-8 ASCII digits and a
 * unit H M S m u n, rounded up), or -1 if it is malformed. Pure. */
int64_t kt_bridge_parse_timeout(const uint8_t *v, size_t n);

#endif
