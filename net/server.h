/* net/server.h — client listeners and connections on the member's libev loop.
 *
 * Owns: listening sockets, every client connection, its bounded input and
 * output buffers, and the per-turn flush of replies.
 *
 * Data flow: readable socket → one read() into conn->in → split frames
 * (kt_frame_next) → decode (kt_proto_decode_req) → handler (the node) →
 * the handler answers now or later with kt_conn_send → bytes appended to
 * conn->out → at the end of the loop turn (ev_prepare) one write() per dirty
 * connection.
 *
 * Limits (net/PROTOCOL.md section 9): a request body over max_request_bytes
 * gets ETOOLARGE with its id, its bytes are dropped unread and the connection
 * stays open; a length prefix over KT_MAX_FRAME_BYTES or of zero, a malformed
 * body, a request before HELLO or a second HELLO get an error and the
 * connection is closed; an unknown request type gets EUNSUPPORTED and the
 * connection stays. When a connection's unsent output passes
 * KT_CONN_OUT_SOFT, the server stops reading from it (backpressure); when it
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

#define KT_CONN_READ_CHUNK (64u * 1024u)
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
};

struct kt_server *kt_server_new(struct ev_loop *loop, const struct kt_server_config *cfg);
/* Listen on host:port (numeric or "localhost"). Errors name the address. */
int kt_server_listen(struct kt_server *s, const char *host, int port, struct kt_err *e);
/* Stop accepting and reading; pending replies still flush. */
void kt_server_stop_accepting(struct kt_server *s);
/* Bytes not yet written on any connection (shutdown waits for 0). */
size_t kt_server_unsent(const struct kt_server *s);
void kt_server_free(struct kt_server *s);
size_t kt_server_conn_count(const struct kt_server *s);

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
/* Bytes appended and not yet written (0 when closed). Streams stop
 * producing above KT_CONN_OUT_SOFT and ask kt_conn_want_drain. */
size_t kt_conn_unsent(const struct kt_conn *c);
void kt_conn_want_drain(struct kt_conn *c);
/* The handler's per-connection pointer (NULL until set); see on_close. */
void *kt_conn_udata(const struct kt_conn *c);
void kt_conn_set_udata(struct kt_conn *c, void *udata);

#endif
