/* test/unit/proto_fast_test.c — the codec's short cuts for the state
 * thread's hot messages agree with the schema-driven codec they bypass
 * (net/proto.c): kt_proto_decode_req's PUT and RANGE path against
 * kt_proto_decode_req_generic (the same answer for every body, error code
 * and message included, and the same fields), and kt_proto_encode_resp's
 * PUT, DELETE, RANGE and LEASE_KEEPALIVE replies against
 * kt_proto_encode_resp_generic (the same bytes). Messages are drawn from a
 * seeded PRNG (a failure prints its seed and case); request bodies come both
 * from the encoder and from a writer that picks any form the decoder might
 * meet (other integer and string formats, nil, explicit zeros, other key
 * orders, repeated and unknown keys, map16, wrong types, out-of-range
 * values), each also cut short and with a byte changed. The AUTHED short
 * cut has its own test in proto_golden_test.c. */
#include <stdlib.h>

#include "../../net/proto.h"
#include "../../net/schema.h"
#include "test.h"

#define SEED 0x17c4u
#define CASES 20000

static struct kt_rng rng;
static uint8_t blob[70000]; /* the bytes keys and values are cut from */

static uint64_t below(uint64_t n) { return kt_rng_below(&rng, n); }

/* An integer of any magnitude, edges (0, 127, 128, 255, ...) often. */
static int64_t rnd_i64(void) {
  unsigned w = (unsigned)below(65);
  uint64_t v = w ? kt_rng_next(&rng) >> (64 - w) : 0;
  if (below(4) == 0)
    v = below(2) ? (1ull << (w ? w - 1 : 0)) - 1 : (1ull << (w ? w - 1 : 0));
  return (int64_t)(below(3) == 0 ? 0 - v : v);
}

static struct kt_bytes rnd_bytes(void) {
  static const uint32_t edge[] = {0, 1, 31, 32, 255, 256, 65535, 65536};
  uint32_t n = below(4) == 0 ? edge[below(8)] : (uint32_t)below(below(2) ? 40 : 600);
  uint32_t at = (uint32_t)below(sizeof blob - n + 1);
  return (struct kt_bytes){n ? blob + at : NULL, n};
}

/* ---- the writer of any form ---- */

static void w8(struct kt_buf *b, uint8_t x) { kt_buf_append(b, &x, 1); }

static void wbe(struct kt_buf *b, uint8_t tag, uint64_t v, int n) {
  w8(b, tag);
  for (int i = n - 1; i >= 0; i--)
    w8(b, (uint8_t)(v >> (8 * i)));
}

/* v in one of the msgpack int formats that hold it, picked at random. */
static void w_int(struct kt_buf *b, int64_t v) {
  uint8_t forms[10];
  int n = 0;
  if (v >= 0 && v <= 127)
    forms[n++] = 0;
  if (v >= -32 && v < 0)
    forms[n++] = 1;
  for (int k = 0; k < 4; k++) {
    int bits = 8 << k;
    if (v >= 0 && (bits == 64 || (uint64_t)v < (1ull << bits)))
      forms[n++] = (uint8_t)(0xcc + k);
    if (bits == 64 || (v >= -(1ll << (bits - 1)) && v < (1ll << (bits - 1))))
      forms[n++] = (uint8_t)(0xd0 + k);
  }
  uint8_t f = forms[below((uint64_t)n)];
  if (f == 0 || f == 1)
    w8(b, (uint8_t)v);
  else
    wbe(b, f, (uint64_t)v, 1 << (f & 3));
}

/* A str or bin of x in any format that holds it (nil for an absent one). */
static void w_blob(struct kt_buf *b, struct kt_bytes x) {
  if (!x.p && below(2)) {
    w8(b, 0xc0);
    return;
  }
  bool str = below(2);
  int k = x.n < 32 && str && below(2) ? -1 : (int)below(3);
  if (x.n >= 256 && k == 0)
    k = 1;
  if (x.n >= 65536 && k == 1)
    k = 2;
  if (k < 0)
    w8(b, (uint8_t)(0xa0 | x.n));
  else
    wbe(b, (uint8_t)((str ? 0xd9 : 0xc4) + k), x.n, 1 << k);
  if (x.n)
    kt_buf_append(b, x.p, x.n);
}

enum { K_BYTES, K_I64, K_BOOL, K_ENUM };
struct tfield {
  const char *name;
  int kind;
  uint8_t max;
};
#define TFIELD(k, m, mx) {#m, K_##k, mx},
static const struct tfield put_fields[] = {KT_SCHEMA_PUT_REQ_FIELDS(TFIELD)};
static const struct tfield range_fields[] = {KT_SCHEMA_RANGE_REQ_FIELDS(TFIELD)};
#undef TFIELD

/* One value for f, now and then one the decoder refuses. */
static void w_value(struct kt_buf *b, const struct tfield *f) {
  if (below(40) == 0) { /* a wrong type, an int beyond int64, an odd byte */
    static const uint8_t odd[][9] = {
        {0x91, 0x01}, {0xcf, 0xff, 0, 0, 0, 0, 0, 0, 1}, {0xc1}, {0xa1, 'x'}, {0xc3}, {0x80}};
    const uint8_t *o = odd[below(6)];
    kt_buf_append(b, o, o[0] == 0xcf ? 9 : o[0] == 0xc1 || o[0] == 0xc3 || o[0] == 0x80 ? 1 : 2);
    return;
  }
  switch (f->kind) {
  case K_BYTES:
    w_blob(b, rnd_bytes());
    break;
  case K_I64:
    if (below(8) == 0)
      w8(b, 0xc0);
    else
      w_int(b, rnd_i64());
    break;
  case K_BOOL:
    w8(b, (uint8_t[]){0xc2, 0xc3, 0xc0}[below(3)]);
    break;
  default:
    w_int(b, (int64_t)below(f->max + 2u));
  }
}

/* A body of a PUT or RANGE request in some form the decoder may meet. */
static void w_req(struct kt_buf *b, uint8_t type) {
  const struct tfield *fs = type == KT_MSG_PUT ? put_fields : range_fields;
  size_t nfs = type == KT_MSG_PUT ? KT_ARRAY_LEN(put_fields) : KT_ARRAY_LEN(range_fields);
  if (below(20))
    w8(b, 0x93);
  else
    wbe(b, 0xdc, 3, 2);
  w_int(b, below(20) ? type : -(int64_t)type);
  if (below(30))
    w_int(b, rnd_i64() & INT64_MAX);
  else
    w8(b, 0xc0);
  /* fields: in schema order mostly, some skipped, now and then shuffled,
   * repeated or unknown */
  int order[20], n = 0;
  for (size_t i = 0; i < nfs; i++)
    if (below(2))
      order[n++] = (int)i;
  if (below(10) == 0 && n > 1) {
    int i = (int)below((uint64_t)n), j = (int)below((uint64_t)n), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  if (below(15) == 0 && n) {
    int again = order[below((uint64_t)n)];
    order[n++] = again;
  }
  if (below(15) == 0)
    order[n++] = -1;
  int count = n + (below(25) == 0 ? (below(2) ? 1 : -1) : 0);
  if (count < 0)
    count = 0;
  if (below(15))
    w8(b, (uint8_t)(0x80 | count));
  else
    wbe(b, 0xde, (uint64_t)count, 2);
  for (int i = 0; i < n; i++) {
    const struct tfield *f = order[i] >= 0 ? &fs[order[i]] : NULL;
    const char *name = f ? f->name : "zz";
    size_t nl = strlen(name);
    if (below(30))
      w8(b, (uint8_t)(0xa0 | nl));
    else
      wbe(b, 0xd9, nl, 1);
    kt_buf_append(b, name, nl);
    if (f)
      w_value(b, f);
    else
      w_int(b, rnd_i64());
  }
  if (below(30) == 0)
    w8(b, 0xc0); /* a trailing byte */
}

/* A request the encoder writes (its canonical form). */
static void rnd_req(struct kt_req *r, uint8_t type) {
  memset(r, 0, sizeof *r);
  r->type = r->u.op.type = type;
  r->id = (uint64_t)rnd_i64() & INT64_MAX;
  if (type == KT_MSG_PUT) { /* one draw after the other: the seed replays anywhere */
    struct kt_put_req *x = &r->u.op.u.put;
    x->key = rnd_bytes();
    x->value = rnd_bytes();
    x->lease = below(2) ? rnd_i64() : 0;
    x->prev_kv = below(2), x->ignore_value = below(4) == 0, x->ignore_lease = below(4) == 0;
  } else {
    struct kt_range_req *x = &r->u.op.u.range;
    x->key = rnd_bytes();
    x->range_end = rnd_bytes();
    x->limit = below(2) ? rnd_i64() : 0;
    x->revision = below(2) ? rnd_i64() : 0;
    x->sort_order = (uint8_t)below(KT_SORT_DESCEND + 1);
    x->sort_target = (uint8_t)below(KT_SORT_VALUE + 1);
    x->serializable = below(2), x->keys_only = below(3) == 0, x->count_only = below(4) == 0;
    x->min_mod_revision = below(4) ? 0 : rnd_i64();
    x->max_mod_revision = below(4) ? 0 : rnd_i64();
    x->min_create_revision = below(4) ? 0 : rnd_i64();
    x->max_create_revision = below(4) ? 0 : rnd_i64();
  }
}

/* ---- comparing the two decoders ---- */

#define SAME_BYTES(a, b) ((a).n == (b).n && (a).p == (b).p)
#define SAME_I64(a, b) ((a) == (b))
#define SAME_BOOL(a, b) ((a) == (b))
#define SAME_ENUM(a, b) ((a) == (b))
#define SAME_FIELD(k, m, mx) &&SAME_##k(x->m, y->m)
static bool same_put(const struct kt_put_req *x, const struct kt_put_req *y) {
  return true KT_SCHEMA_PUT_REQ_FIELDS(SAME_FIELD);
}
static bool same_range(const struct kt_range_req *x, const struct kt_range_req *y) {
  return true KT_SCHEMA_RANGE_REQ_FIELDS(SAME_FIELD);
}
#undef SAME_FIELD

static struct kt_arena arena;

/* Both decoders on body: 0 if they agree (*ok: it decoded), else -1 with
 * a message. */
static int same_decode(const uint8_t *body, size_t len, bool *ok, char *why, size_t why_n) {
  struct kt_req x, y;
  struct kt_err e1 = {0}, e2 = {0};
  int r1 = kt_proto_decode_req(body, len, &arena, &x, &e1);
  int r2 = kt_proto_decode_req_generic(body, len, &arena, &y, &e2);
  *ok = r1 == 0;
  if (r1 != r2 || e1.code != e2.code || strcmp(e1.msg, e2.msg) != 0) {
    snprintf(why, why_n, "rc %d != %d (\"%s\" / \"%s\")", r1, r2, e1.msg, e2.msg);
    return -1;
  }
  if (r1 == 0 && (x.type != y.type || x.id != y.id || x.u.op.type != y.u.op.type ||
                  (x.type == KT_MSG_PUT && !same_put(&x.u.op.u.put, &y.u.op.u.put)) ||
                  (x.type == KT_MSG_RANGE && !same_range(&x.u.op.u.range, &y.u.op.u.range)))) {
    snprintf(why, why_n, "decoded type %u id %llu: other fields", x.type, (unsigned long long)x.id);
    return -1;
  }
  return 0;
}

static void setup(void) {
  for (size_t i = 0; i < sizeof blob; i++)
    blob[i] = (uint8_t)(i * 7 + (i >> 8));
}

/* Every body, written by the encoder or by the any-form writer, and each
 * cut short and with one byte changed, gets the same answer from both. */
TEST(put_and_range_short_cut_decode_as_the_generic_decoder) {
  setup();
  kt_rng_seed(&rng, SEED);
  struct kt_buf b = {0};
  long decoded = 0, canonical = 0;
  for (int i = 0; i < CASES; i++) {
    uint8_t type = below(2) ? KT_MSG_PUT : KT_MSG_RANGE;
    bool canon = below(2);
    kt_buf_reset(&b);
    if (canon) {
      struct kt_req r;
      rnd_req(&r, type);
      if (below(2)) { /* a WAL entry's */
        r.id = 0;
        kt_proto_encode_req_body(&b, &r);
      } else {
        kt_proto_encode_req(&b, &r);
        memmove(b.p, b.p + KT_FRAME_HDR, b.len - KT_FRAME_HDR);
        b.len -= KT_FRAME_HDR;
      }
    } else {
      w_req(&b, type);
    }
    char why[1024];
    bool ok;
    if (same_decode(b.p, b.len, &ok, why, sizeof why)) {
      kt_test_fail(__FILE__, __LINE__, "seed %#x case %d: %s", SEED, i, why);
      break;
    }
    decoded += ok;
    canonical += canon;
    if (canon && !ok) {
      kt_test_fail(__FILE__, __LINE__, "seed %#x case %d: an encoded request fails", SEED, i);
      break;
    }
    /* cut short, and one byte changed */
    size_t cut = (size_t)below(b.len);
    if (same_decode(b.p, cut, &ok, why, sizeof why)) {
      kt_test_fail(__FILE__, __LINE__, "seed %#x case %d cut at %zu: %s", SEED, i, cut, why);
      break;
    }
    size_t at = (size_t)below(KT_MIN(b.len, 64));
    b.p[at] = below(2) ? (uint8_t)kt_rng_next(&rng) : (uint8_t)(b.p[at] ^ (1u << below(8)));
    if (same_decode(b.p, b.len, &ok, why, sizeof why)) {
      kt_test_fail(__FILE__, __LINE__, "seed %#x case %d byte %zu changed: %s", SEED, i, at, why);
      break;
    }
    kt_arena_reset(&arena);
  }
  /* both kinds of bodies were met, most of them valid */
  printf("%ld of %d bodies decoded, %ld of them the encoder's\n", decoded, CASES, canonical);
  CHECK(canonical > CASES / 3);
  CHECK(decoded > canonical + CASES / 10);
  kt_buf_free(&b);
  kt_arena_free(&arena);
}

/* ---- the replies ---- */

static void rnd_kv(struct kt_kv *kv) {
  kv->key = rnd_bytes();
  kv->value = rnd_bytes();
  kv->create_revision = rnd_i64();
  kv->mod_revision = rnd_i64();
  kv->version = rnd_i64();
  kv->lease = rnd_i64();
}

static void rnd_resp(struct kt_resp *r, struct kt_kv *kvs, uint32_t max_kvs,
                     struct kt_bytes *keys) {
  static const uint8_t types[] = {KT_MSG_PUT,       KT_MSG_DELETE,          KT_MSG_RANGE,
                                  KT_MSG_LEASE_TTL, KT_MSG_LEASE_KEEPALIVE, KT_MSG_LEASE_GRANT};
  memset(r, 0, sizeof *r);
  r->type = types[below(sizeof types)];
  r->id = (uint64_t)rnd_i64();
  r->header =
      (struct kt_header){(uint64_t)rnd_i64(), (uint64_t)rnd_i64(), rnd_i64(), (uint64_t)rnd_i64()};
  uint32_t n = (uint32_t)below(below(8) ? 4 : max_kvs + 1);
  for (uint32_t i = 0; i < n; i++)
    rnd_kv(&kvs[i]);
  struct kt_response_op *op = &r->u.op;
  switch (r->type) {
  case KT_MSG_PUT:
    op->type = KT_OP_PUT;
    op->u.put.has_prev_kv = below(2);
    if (op->u.put.has_prev_kv)
      rnd_kv(&op->u.put.prev_kv);
    break;
  case KT_MSG_DELETE:
    op->type = KT_OP_DELETE;
    op->u.del.deleted = below(2) ? rnd_i64() : 0;
    op->u.del.prev_kvs = n ? kvs : NULL, op->u.del.n_prev_kvs = n;
    break;
  case KT_MSG_RANGE:
    op->type = KT_OP_RANGE;
    op->u.range.kvs = n ? kvs : NULL, op->u.range.n_kvs = n;
    op->u.range.more = below(2);
    op->u.range.count = below(2) ? rnd_i64() : 0;
    break;
  default: { /* a lease reply; now and then with keys or ids (not the short cut's) */
    struct kt_lease_resp *x = &r->u.lease;
    x->id = below(4) ? rnd_i64() : 0;
    x->ttl = below(4) ? rnd_i64() : 0;
    x->granted_ttl = below(4) ? rnd_i64() : 0;
    if (below(4) == 0) {
      keys[0] = rnd_bytes();
      x->keys = keys, x->n_keys = 1;
    }
    if (below(4) == 0) {
      static int64_t ids[2] = {7, -1};
      x->leases = ids, x->n_leases = 2;
    }
  }
  }
}

/* kt_proto_encode_resp appends, after what the buffer holds, the bytes
 * kt_proto_encode_resp_generic does. */
TEST(reply_short_cuts_write_the_schema_encoders_bytes) {
  setup();
  kt_rng_seed(&rng, SEED + 1);
  static struct kt_kv kvs[40];
  struct kt_bytes keys[1];
  struct kt_buf fast = {0}, slow = {0};
  for (int i = 0; i < CASES; i++) {
    struct kt_resp r;
    rnd_resp(&r, kvs, KT_ARRAY_LEN(kvs), keys);
    kt_buf_reset(&fast);
    kt_buf_reset(&slow);
    size_t pre = (size_t)below(8);
    kt_buf_append(&fast, blob, pre);
    kt_buf_append(&slow, blob, pre);
    kt_proto_encode_resp(&fast, &r);
    kt_proto_encode_resp_generic(&slow, &r);
    if (fast.len != slow.len || memcmp(fast.p, slow.p, fast.len) != 0) {
      kt_test_fail(__FILE__, __LINE__, "seed %#x case %d (type %u): %zu bytes, want %zu", SEED + 1,
                   i, r.type, fast.len, slow.len);
      break;
    }
  }
  kt_buf_free(&fast);
  kt_buf_free(&slow);
}
