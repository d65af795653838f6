/* test/fuzz/proto_fuzz.c — fuzz target for the native protocol codec.
 *
 * The input is read twice: as a stream of frames (kt_frame_next, then each
 * body through both decoders) and as one bare body. Whatever decodes must
 * re-encode to bytes that decode again and re-encode to the same bytes (the
 * encoding is canonical, so equal bytes mean an equal message), and
 * kt_proto_peek_id must agree with the decoder on type and id, and every
 * decoded type must have a name. This covers every type, watch frames and
 * lease messages included. The codec's short cuts (requests decoded, replies
 * encoded without the schema walk) must agree with the generic decoder and
 * encoder on every input: the same answer, error message included, and the
 * same bytes. Any disagreement aborts. Seeds: test/fuzz/corpus/proto/ (written by
 * KT_WRITE_CORPUS=dir build/test/proto_test write_fuzz_corpus).
 */
#include "../../net/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct kt_arena arena;

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "proto_fuzz: %s\n", what);
    abort();
  }
}

static void check_peek(const uint8_t *body, size_t len, uint8_t type, uint64_t id) {
  uint8_t t;
  uint64_t i;
  check(kt_proto_peek_id(body, len, &t, &i) == 1 && t == type && i == id,
        "peek_id disagrees with the decoder");
}

static bool same_bytes(struct kt_bytes a, struct kt_bytes b) {
  return a.n == b.n && (!a.n || memcmp(a.p, b.p, a.n) == 0);
}

/* Whether two requests encode to the same bytes (canonical: the same
 * message). */
static bool same_req(const struct kt_req *x, const struct kt_req *y) {
  struct kt_buf a = {0}, b = {0};
  kt_proto_encode_req(&a, x);
  kt_proto_encode_req(&b, y);
  bool same = a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
  kt_buf_free(&a);
  kt_buf_free(&b);
  return same;
}

/* kt_proto_decode_req's short cuts (AUTHED, PUT and RANGE read without the
 * schema walk) answer as the generic decoder does, and
 * kt_proto_encode_authed writes what the schema encoder writes. */
static void check_short_cuts(const uint8_t *body, size_t len, int rc, const struct kt_req *r1,
                             const struct kt_err *e) {
  struct kt_req g;
  struct kt_err ge;
  int grc = kt_proto_decode_req_generic(body, len, &arena, &g, &ge);
  check(grc == rc && (rc ? strcmp(ge.msg, e->msg) == 0 : g.type == r1->type && g.id == r1->id),
        "a decoder short cut disagrees with the generic decoder");
  if (rc)
    return;
  check(same_req(r1, &g), "a decoder short cut decodes other fields");
  if (r1->type != KT_MSG_AUTHED)
    return;
  const struct kt_authed_req *x = &r1->u.authed, *y = &g.u.authed;
  check(same_bytes(x->user, y->user) && x->auth_revision == y->auth_revision &&
            same_bytes(x->body, y->body) && x->member == y->member,
        "the AUTHED short cut decodes other fields");
  struct kt_buf a = {0}, b = {0};
  struct kt_req w = *r1;
  w.id = 0;
  kt_proto_encode_req_body(&a, &w);
  kt_proto_encode_authed(&b, x);
  check(a.len == b.len && memcmp(a.p, b.p, a.len) == 0,
        "kt_proto_encode_authed differs from the schema encoder");
  kt_buf_free(&a);
  kt_buf_free(&b);
}

static void req_round_trip(const uint8_t *body, size_t len) {
  struct kt_req r1, r2;
  struct kt_err e;
  int rc = kt_proto_decode_req(body, len, &arena, &r1, &e);
  check(rc >= 0 && rc < KT_ERR_MAX, "bad error code");
  check(rc == 0 || e.code == rc, "kt_err not filled");
  check_short_cuts(body, len, rc, &r1, &e);
  if (rc != 0)
    return;
  check_peek(body, len, r1.type, r1.id);
  check(strcmp(kt_proto_type_name(r1.type), "unknown") != 0, "a decoded request has no name");
  struct kt_buf a = {0}, b = {0}, w = {0};
  kt_proto_encode_req(&a, &r1);
  const uint8_t *fb;
  uint32_t fl;
  size_t used;
  check(kt_frame_next(a.p, a.len, UINT32_MAX, &fb, &fl, &used) == 1 && used == a.len,
        "encoded request is not one frame");
  check(kt_proto_decode_req(fb, fl, &arena, &r2, &e) == 0, "re-encoded request does not decode");
  kt_proto_encode_req(&b, &r2);
  check(a.len == b.len && memcmp(a.p, b.p, a.len) == 0, "request re-encodes differently");
  /* the WAL form: the same body with id 0 */
  kt_proto_encode_req_body(&w, &r1);
  check(kt_proto_decode_req(w.p, w.len, &arena, &r2, &e) == 0 && r2.id == 0 && r2.type == r1.type,
        "WAL body does not decode");
  kt_buf_free(&a);
  kt_buf_free(&b);
  kt_buf_free(&w);
}

static void resp_round_trip(const uint8_t *body, size_t len) {
  struct kt_resp r1, r2;
  struct kt_err e;
  int rc = kt_proto_decode_resp(body, len, &arena, &r1, &e);
  check(rc >= 0 && rc < KT_ERR_MAX, "bad error code");
  if (rc != 0)
    return;
  check_peek(body, len, r1.type, r1.id);
  check(strcmp(kt_proto_type_name(r1.type), "unknown") != 0, "a decoded response has no name");
  struct kt_buf a = {0}, b = {0};
  kt_proto_encode_resp(&a, &r1);
  check(kt_get_u32be(a.p) == a.len - 4, "bad frame length");
  /* its short cuts (PUT, DELETE, RANGE, LEASE_KEEPALIVE) write the schema's bytes */
  kt_proto_encode_resp_generic(&b, &r1);
  check(a.len == b.len && memcmp(a.p, b.p, a.len) == 0,
        "an encoder short cut differs from the schema encoder");
  kt_buf_reset(&b);
  check(kt_proto_decode_resp(a.p + 4, a.len - 4, &arena, &r2, &e) == 0,
        "re-encoded response does not decode");
  kt_proto_encode_resp(&b, &r2);
  check(a.len == b.len && memcmp(a.p, b.p, a.len) == 0, "response re-encodes differently");
  kt_buf_free(&a);
  kt_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* as a stream of frames */
  size_t off = 0;
  for (;;) {
    const uint8_t *body;
    uint32_t len;
    size_t used;
    int rc =
        kt_frame_next(data + off, size - off, KT_DEFAULT_MAX_REQUEST_BYTES, &body, &len, &used);
    if (rc <= 0) {
      check(rc == 0 || rc == -KT_EPROTO || rc == -KT_ETOOLARGE, "bad frame result");
      break;
    }
    check(used == 4 + (size_t)len && used <= size - off, "bad frame size");
    req_round_trip(body, len);
    resp_round_trip(body, len);
    off += used;
  }
  /* as one bare body */
  req_round_trip(data, size);
  resp_round_trip(data, size);
  kt_arena_reset(&arena);
  return 0;
}
