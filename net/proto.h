/* net/proto.h — the native protocol codec (spec: net/PROTOCOL.md).
 *
 * Pure functions, no I/O: bytes in, structs out, and back. Shared by the
 * server (net/), the node (WAL entries carry an encoded request body) and the
 * client library (client/ links this file). Every decoder is bounds-checked
 * and fuzzed (test/fuzz/proto_fuzz.c); outside bytes never reach kt_assert.
 *
 * A frame is `u32 big-endian length | msgpack body`; the body is the msgpack
 * array [type, id, payload-map]. Decoded structs point into the input bytes
 * and into the arena passed in: valid while both live.
 *
 * Data flow: server: bytes -> kt_frame_next -> kt_proto_decode_req -> struct
 * kt_req -> (node, store) -> struct kt_resp -> kt_proto_encode_resp -> output
 * buffer. Client: the mirror image. Node: kt_proto_encode_req_body -> WAL
 * entry -> kt_proto_decode_req at apply time.
 *
 * Invariants: decoders never read outside [body, body + len) and allocate
 * from the arena at most O(len) bytes whatever the input claims; encoders
 * are canonical (zero fields omitted, shortest integers): for any bytes a
 * decoder accepts, x = decode(bytes) re-encodes to bytes that decode and
 * re-encode to the same bytes (test/fuzz/proto_fuzz.c checks it).
 * Both directions are driven by the schema (net/schema.h: every message's
 * fields as data; the structs are core's, core/msg.h): decoding is a
 * hand-written reader (no msgpack object tree: 2-3x faster, see
 * test/perf/proto_perf.c), encoding writes MessagePack into a kt_buf.
 * test/unit/proto_golden_test.c pins the bytes of every message type;
 * test/unit/proto_schema_test.c checks PROTOCOL.md's tables against the
 * schema.
 */
#ifndef KT_PROTO_H
#define KT_PROTO_H

#include "../core/msg.h"

#define KT_PROTO_VERSION 1
#define KT_FRAME_HDR 4
/* The largest request body a member takes by default, what HELLO's
 * max_request_bytes says (and libketch assumes before HELLO): etcd's
 * --max-request-bytes default, 1.5 MiB, which writes are held to, plus the
 * 512 KiB etcd's gRPC server receives beyond it (reads). */
#define KT_DEFAULT_MAX_REQUEST_BYTES (2048u * 1024u)
/* Largest frame either side accepts: a request is bounded by max request
 * bytes plus framing; responses (large ranges) by this. */
#define KT_MAX_FRAME_BYTES (64u * 1024u * 1024u)

/* "hello", "range", ... "error"; "unknown" for anything else. */
const char *kt_proto_type_name(int type);

/* Frame splitting. Given the bytes received so far, returns 1 and sets
 * body/body_len/consumed when a whole frame is present, 0 when more bytes are
 * needed, or -KT_ETOOLARGE when the length prefix (the body length, prefix
 * excluded) exceeds max_frame (and -KT_EPROTO for a zero length). The two
 * errors are reported as soon as the 4-byte prefix is in, before the body. */
int kt_frame_next(const uint8_t *p, size_t n, uint32_t max_frame, const uint8_t **body,
                  uint32_t *body_len, size_t *consumed);

/* Read type and id from the first bytes of a body (p, n: what has arrived),
 * e.g. to answer ETOOLARGE to a frame whose body is skipped unread. Returns 1
 * when both were read, 0 when more bytes are needed (at most 23 are), -1 when
 * the bytes cannot start a valid body. */
int kt_proto_peek_id(const uint8_t *p, size_t n, uint8_t *type, uint64_t *id);

/* Decode a request body (no length prefix). Absent fields are zero; unknown
 * fields are skipped. Errors (e->msg names the field with its path, e.g.
 * "txn.success[2].lease: expected int, got str"): EPROTO (malformed, truncated,
 * trailing bytes, a field of the wrong type or out of range), EUNSUPPORTED
 * (unknown or reserved type, unknown op type in a txn), ETOOMANYOPS (more than
 * KT_MAX_TXN_OPS in one compare/success/failure list), EINVAL (txns nested
 * deeper than KT_MAX_TXN_DEPTH, an enum value out of range). On error req->type
 * and req->id are set when they could be read (so the server can answer that
 * id), else 0. e may be NULL. */
int kt_proto_decode_req(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_req *req,
                        struct kt_err *e);
/* Append a whole frame (length prefix + body) for req to out. req must be
 * well-formed (type HELLO..STATUS, WATCH_*, LEASE_*, MEMBER_LIST,
 * MEMBER_PUBLISH, MOVE_LEADER, LOCK..RESIGN, ALARM (action and alarm in
 * range), DEFRAGMENT, HASH_KV or SNAPSHOT; op.type == type for KV types):
 * anything else is a caller bug (kt_assert). */
void kt_proto_encode_req(struct kt_buf *out, const struct kt_req *req);

/* Decode a response body; errors as kt_proto_decode_req (types HELLO..STATUS,
 * WATCH_* (type WATCH_CREATE: a WATCH frame, u.watch), LEASE_*, MEMBER_LIST,
 * MOVE_LEADER, LOCK..RESIGN, ALARM, DEFRAGMENT, HASH_KV, SNAPSHOT (one frame
 * of the stream) and ERROR). An event type other than PUT/DELETE, an alarm
 * type other than NONE/NOSPACE/CORRUPT is EINVAL. */
int kt_proto_decode_resp(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_resp *resp,
                         struct kt_err *e);
/* resp must be well-formed as for kt_proto_encode_req (events of type PUT or
 * DELETE only). */
void kt_proto_encode_resp(struct kt_buf *out, const struct kt_resp *resp);
/* kt_proto_encode_resp without its short cuts (PUT, DELETE, RANGE and
 * LEASE_KEEPALIVE replies written straight, byte for byte the same): the
 * schema encoder alone, for the tests that compare the two. */
void kt_proto_encode_resp_generic(struct kt_buf *out, const struct kt_resp *resp);
/* A WATCH frame with events, in parts, for fan-out (the events encoded
 * once, the header once per turn, the frame around them once per watcher):
 * kt_proto_encode_watch_events appends the value of the frame's events
 * field (n > 0); kt_proto_encode_watch_header the frame's header field (name
 * and value); kt_proto_encode_watch_frame the whole frame (type
 * WATCH_CREATE, stream id, the header field: head[0..head_len) if head is
 * not NULL, else encoded from hdr; watch_id, fragment) around such events
 * bytes. Byte for byte what kt_proto_encode_resp makes of the same frame
 * (proto_test checks it). */
void kt_proto_encode_watch_events(struct kt_buf *out, const struct kt_event *events, uint32_t n);
void kt_proto_encode_watch_header(struct kt_buf *out, const struct kt_header *hdr);
void kt_proto_encode_watch_frame(struct kt_buf *out, uint64_t id, const struct kt_header *hdr,
                                 const uint8_t *head, size_t head_len, int64_t watch_id,
                                 bool fragment, const uint8_t *events, size_t events_len);
/* Shorthand for an ERROR frame. */
void kt_proto_encode_error(struct kt_buf *out, uint64_t id, int code, const char *message);

/* The body of a request without a frame prefix and with id 0: what the node
 * stores in a WAL entry. Decode with kt_proto_decode_req. */
void kt_proto_encode_req_body(struct kt_buf *out, const struct kt_req *req);

/* Appends to out exactly what kt_proto_encode_req_body writes for an AUTHED
 * request {id 0, u.authed = *w}, without walking the schema: the envelope
 * of every write proposed while auth is enabled. kt_proto_decode_req reads
 * this shape back without the walk too (any other shape takes the generic
 * path); test/unit/proto_golden_test.c and the proto fuzz target hold both
 * to the generic encoder and decoder. */
void kt_proto_encode_authed(struct kt_buf *out, const struct kt_authed_req *w);
/* kt_proto_decode_req without its short cuts (AUTHED above; PUT and RANGE
 * in the shape the encoder writes, read without the schema walk): the
 * generic decoder alone (for the tests that compare the two). */
int kt_proto_decode_req_generic(const uint8_t *body, size_t len, struct kt_arena *a,
                                struct kt_req *req, struct kt_err *e);

#endif
