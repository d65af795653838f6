/* net/proto.c — the native protocol codec; see proto.h and PROTOCOL.md.
 *
 * Schema-driven (net/schema.h): one decoder and one encoder walk the
 * descriptors of net/schema.c; nothing here is written per message but
 * the short cuts of the state thread's hottest ones, each held to the
 * generic codec byte for byte (test/unit/proto_fast_test.c, the proto fuzz
 * target): the AUTHED envelope, PUT and RANGE requests in the shape the
 * encoder writes (decoded by the generic readers without the walk; any
 * other shape goes to the generic decoder), and the replies to PUT,
 * DELETE, RANGE and LEASE_KEEPALIVE.
 *
 * Decoding uses a small hand-written msgpack reader (struct dec) that walks
 * the body once and fills the structs directly: no object tree, strings and
 * binaries point into the body (zero copy), arrays of structs come from the
 * arena. Every read checks the remaining length first; counts read from the
 * wire are checked against the remaining bytes before anything is allocated
 * (a list of messages needs min_bytes per element), so memory stays O(body).
 * A map's keys are matched against the message's fields, the field after
 * the last one matched first (encoders write them in table order), then the
 * others; unknown keys are skipped (at most 16 levels deep). Errors name the
 * field's path ("txn.success[2].put.lease" style, see fail()). The common
 * shapes (fixmap, fixarray, fixstr keys, positive fixints) are read inline,
 * everything else by the general readers (rd_*_any).
 * test/perf/proto_icount.sh counts instructions per message: a 16 B key /
 * 256 B value PUT request decodes in ~760 through the walk (~930 in the
 * hand-written codec this replaced), ~450 through its short cut.
 *
 * Encoding writes MessagePack directly into a struct kt_buf, with the
 * shortest formats msgpack-c's packer picks (the golden frames of
 * test/unit/proto_golden_test.c are byte for byte those of the msgpack-c
 * based encoder this replaced). Map fields equal to their zero value are
 * omitted; every payload map has at most 15 fields, so its header is one
 * byte (fixmap), written as a placeholder and patched at the end. A scalar
 * field's name and value, and a whole kv tuple, are written after one
 * check for room (put_*()).
 */
#include "proto.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "schema.h"

const char *kt_proto_type_name(int type) {
  const struct kt_type_desc *t = type >= 0 ? kt_schema_type((uint64_t)type) : NULL;
  return t ? t->name : "unknown";
}

/* ---- framing ---- */

int kt_frame_next(const uint8_t *p, size_t n, uint32_t max_frame, const uint8_t **body,
                  uint32_t *body_len, size_t *consumed) {
  if (n < KT_FRAME_HDR)
    return 0;
  uint32_t len = kt_get_u32be(p);
  if (len == 0)
    return -KT_EPROTO;
  if (len > max_frame)
    return -KT_ETOOLARGE;
  if (n - KT_FRAME_HDR < len)
    return 0;
  *body = p + KT_FRAME_HDR;
  *body_len = len;
  *consumed = KT_FRAME_HDR + (size_t)len;
  return 1;
}

/* ---- the reader ---- */

#define PATH_MAX_SEGS 24
#define SKIP_MAX_DEPTH 16

struct dec {
  const uint8_t *p, *end;
  struct kt_arena *a;
  struct kt_err *e;
  /* Where we are, for error messages; formatted only on error. */
  struct {
    const char *name;
    int64_t idx; /* -1: no index */
  } path[PATH_MAX_SEGS];
  int npath;
  int depth; /* txns entered (KT_MAX_TXN_DEPTH) */
};

/* A reader of [p, end). The path array is left as it is: only its first
 * npath entries are ever read, and zeroing its 400 bytes would cost more
 * than decoding a small request. */
static inline void dec_init(struct dec *d, const uint8_t *p, const uint8_t *end, struct kt_arena *a,
                            struct kt_err *e) {
  d->p = p, d->end = end, d->a = a, d->e = e;
  d->npath = 0, d->depth = 0;
}

static void path_push(struct dec *d, const char *name, int64_t idx) {
  if (d->npath < PATH_MAX_SEGS) {
    d->path[d->npath].name = name;
    d->path[d->npath].idx = idx;
  }
  d->npath++;
}
static void path_pop(struct dec *d) { d->npath--; }

static const char *tag_name(uint8_t b) {
  if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
    return "int";
  if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb))
    return "str";
  if (b >= 0xc4 && b <= 0xc6)
    return "bin";
  if ((b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd)
    return "array";
  if ((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf)
    return "map";
  if (b == 0xc0)
    return "nil";
  if (b == 0xc2 || b == 0xc3)
    return "bool";
  if (b == 0xca || b == 0xcb)
    return "float";
  if (b == 0xc1)
    return "invalid byte 0xc1";
  return "ext";
}

/* Fail with "path.field: message". field may be NULL. */
static int fail(struct dec *d, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct dec *d, int code, const char *field, const char *fmt, ...) {
  if (!d->e)
    return code;
  char where[160];
  size_t w = 0;
  where[0] = 0;
  for (int i = 0; i < d->npath && i < PATH_MAX_SEGS && w < sizeof where; i++) {
    int k;
    if (d->path[i].idx >= 0)
      k = snprintf(where + w, sizeof where - w, "%s%s[%lld]", i ? "." : "", d->path[i].name,
                   (long long)d->path[i].idx);
    else
      k = snprintf(where + w, sizeof where - w, "%s%s", i ? "." : "", d->path[i].name);
    if (k < 0)
      break;
    w += (size_t)k;
  }
  if (w >= sizeof where)
    w = sizeof where - 1;
  if (field)
    snprintf(where + w, sizeof where - w, "%s%s", w ? "." : "", field);
  char msg[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kt_err_set(d->e, code, "%s: %s", where[0] ? where : "body", msg);
}

static inline size_t left(const struct dec *d) { return (size_t)(d->end - d->p); }

static int truncated(struct dec *d, const char *field) {
  return fail(d, KT_EPROTO, field, "truncated");
}

static int wrong_type(struct dec *d, const char *field, const char *want) {
  return fail(d, KT_EPROTO, field, "expected %s, got %s", want, tag_name(*d->p));
}

/* Reads an n-byte big-endian unsigned after the tag byte. Caller checked left. */
static inline uint64_t be(const uint8_t *p, int n) {
  switch (n) {
  case 1:
    return p[0];
  case 2:
    return (uint64_t)p[0] << 8 | p[1];
  case 4:
    return kt_get_u32be(p);
  case 8:
    return kt_get_u64be(p);
  default: {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
      v = (v << 8) | p[i];
    return v;
  }
  }
}

/* An integer: neg says it is negative (then s holds it), else u does. */
struct ival {
  bool neg;
  int64_t s;
  uint64_t u;
};

static int rd_ival(struct dec *d, const char *field, struct ival *v) {
  if (left(d) < 1)
    return truncated(d, field);
  uint8_t b = *d->p;
  int n;
  bool sgn = false;
  if (b <= 0x7f) {
    d->p++;
    *v = (struct ival){false, 0, b};
    return 0;
  }
  if (b >= 0xe0) {
    d->p++;
    *v = (struct ival){true, (int8_t)b, 0};
    return 0;
  }
  switch (b) {
  case 0xcc:
    n = 1;
    break;
  case 0xcd:
    n = 2;
    break;
  case 0xce:
    n = 4;
    break;
  case 0xcf:
    n = 8;
    break;
  case 0xd0:
    n = 1, sgn = true;
    break;
  case 0xd1:
    n = 2, sgn = true;
    break;
  case 0xd2:
    n = 4, sgn = true;
    break;
  case 0xd3:
    n = 8, sgn = true;
    break;
  default:
    return wrong_type(d, field, "int");
  }
  if (left(d) < (size_t)n + 1)
    return truncated(d, field);
  uint64_t raw = be(d->p + 1, n);
  d->p += 1 + n;
  if (!sgn) {
    *v = (struct ival){false, 0, raw};
    return 0;
  }
  int64_t s;
  switch (n) {
  case 1:
    s = (int8_t)raw;
    break;
  case 2:
    s = (int16_t)raw;
    break;
  case 4:
    s = (int32_t)raw;
    break;
  default:
    s = (int64_t)raw;
    break;
  }
  if (s < 0)
    *v = (struct ival){true, s, 0};
  else
    *v = (struct ival){false, 0, (uint64_t)s};
  return 0;
}

static inline bool is_nil(struct dec *d) {
  if (left(d) >= 1 && *d->p == 0xc0) {
    d->p++;
    return true;
  }
  return false;
}

/* rd_i64 and rd_u64 past their positive fixint fast path. */
static int rd_i64_any(struct dec *d, const char *field, int64_t *out) {
  if (is_nil(d)) {
    *out = 0;
    return 0;
  }
  struct ival v;
  int rc = rd_ival(d, field, &v);
  if (rc)
    return rc;
  if (v.neg) {
    *out = v.s;
    return 0;
  }
  if (v.u > (uint64_t)INT64_MAX)
    return fail(d, KT_EPROTO, field, "integer out of range");
  *out = (int64_t)v.u;
  return 0;
}

static int rd_u64_any(struct dec *d, const char *field, uint64_t max, uint64_t *out) {
  if (is_nil(d)) {
    *out = 0;
    return 0;
  }
  struct ival v;
  int rc = rd_ival(d, field, &v);
  if (rc)
    return rc;
  if (v.neg || v.u > max)
    return fail(d, KT_EPROTO, field, "integer out of range");
  *out = v.u;
  return 0;
}

static inline int rd_i64(struct dec *d, const char *field, int64_t *out) {
  if (d->p < d->end && *d->p <= 0x7f) {
    *out = *d->p++;
    return 0;
  }
  return rd_i64_any(d, field, out);
}

/* max: at least 127 (every caller's is UINT32_MAX or more). */
static inline int rd_u64(struct dec *d, const char *field, uint64_t max, uint64_t *out) {
  if (d->p < d->end && *d->p <= 0x7f) {
    *out = *d->p++;
    return 0;
  }
  return rd_u64_any(d, field, max, out);
}

static int rd_u32(struct dec *d, const char *field, uint32_t *out) {
  uint64_t v = 0;
  int rc = rd_u64(d, field, UINT32_MAX, &v);
  *out = (uint32_t)v;
  return rc;
}

/* An enum field: out of range is EINVAL (well-formed, meaningless). */
static int rd_enum(struct dec *d, const char *field, uint8_t max, uint8_t *out) {
  uint64_t v = 0;
  int rc = rd_u64(d, field, UINT64_MAX, &v);
  if (rc)
    return rc;
  if (v > max)
    return fail(d, KT_EINVAL, field, "unknown value %llu", (unsigned long long)v);
  *out = (uint8_t)v;
  return 0;
}

static int rd_bool(struct dec *d, const char *field, bool *out) {
  if (left(d) < 1)
    return truncated(d, field);
  switch (*d->p) {
  case 0xc0:
  case 0xc2:
    *out = false;
    break;
  case 0xc3:
    *out = true;
    break;
  default:
    return wrong_type(d, field, "bool");
  }
  d->p++;
  return 0;
}

/* str or bin; the result points into the body. */
static int rd_bytes(struct dec *d, const char *field, struct kt_bytes *out) {
  if (left(d) < 1)
    return truncated(d, field);
  uint8_t b = *d->p;
  size_t hl, n;
  if (b >= 0xa0 && b <= 0xbf) {
    hl = 1;
    n = b & 0x1f;
  } else if (b == 0xd9 || b == 0xc4) {
    hl = 2;
  } else if (b == 0xda || b == 0xc5) {
    hl = 3;
  } else if (b == 0xdb || b == 0xc6) {
    hl = 5;
  } else if (b == 0xc0) {
    d->p++;
    *out = (struct kt_bytes){NULL, 0};
    return 0;
  } else {
    return wrong_type(d, field, "bin or str");
  }
  if (left(d) < hl)
    return truncated(d, field);
  if (hl > 1)
    n = (size_t)be(d->p + 1, (int)hl - 1);
  if (left(d) - hl < n)
    return truncated(d, field);
  out->p = d->p + hl;
  out->n = (uint32_t)n;
  d->p += hl + n;
  return 0;
}

/* Container header. min_elem_bytes: each element takes at least that many
 * bytes (1 per array element, 2 per map pair), so a count larger than the
 * rest of the body is rejected before anything is sized from it. */
static int rd_container_any(struct dec *d, const char *field, bool map, uint32_t *n) {
  if (left(d) < 1)
    return truncated(d, field);
  uint8_t b = *d->p;
  size_t hl;
  uint32_t cnt = 0;
  if (b == 0xc0) {
    d->p++;
    *n = 0;
    return 0;
  }
  if (!map && b >= 0x90 && b <= 0x9f) {
    hl = 1, cnt = b & 0x0f;
  } else if (map && b >= 0x80 && b <= 0x8f) {
    hl = 1, cnt = b & 0x0f;
  } else if (b == (map ? 0xde : 0xdc)) {
    hl = 3;
  } else if (b == (map ? 0xdf : 0xdd)) {
    hl = 5;
  } else {
    return wrong_type(d, field, map ? "map" : "array");
  }
  if (left(d) < hl)
    return truncated(d, field);
  if (hl > 1)
    cnt = (uint32_t)be(d->p + 1, (int)hl - 1);
  d->p += hl;
  if ((uint64_t)cnt * (map ? 2 : 1) > left(d))
    return truncated(d, field);
  *n = cnt;
  return 0;
}
/* With the fixarray / fixmap case (every message's) inline. */
static inline int rd_container(struct dec *d, const char *field, bool map, uint32_t *n) {
  if (d->p < d->end && (*d->p & 0xf0) == (map ? 0x80 : 0x90)) {
    uint32_t cnt = *d->p & 0x0f;
    if ((size_t)cnt * (map ? 2 : 1) < left(d)) {
      d->p++;
      *n = cnt;
      return 0;
    }
  }
  return rd_container_any(d, field, map, n);
}
static inline int rd_arr(struct dec *d, const char *field, uint32_t *n) {
  return rd_container(d, field, false, n);
}
static inline int rd_map(struct dec *d, const char *field, uint32_t *n) {
  return rd_container(d, field, true, n);
}

/* A map key: a str (a fixstr, inline, for every name the schema has). */
static inline int rd_key(struct dec *d, struct kt_bytes *k) {
  if (d->p < d->end && (*d->p & 0xe0) == 0xa0 && (size_t)(*d->p & 0x1f) < left(d)) {
    k->n = *d->p & 0x1f;
    k->p = d->p + 1;
    d->p += 1 + k->n;
    return 0;
  }
  if (left(d) < 1)
    return truncated(d, NULL);
  uint8_t b = *d->p;
  if (!((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb)))
    return fail(d, KT_EPROTO, NULL, "map key: expected str, got %s", tag_name(b));
  return rd_bytes(d, "map key", k);
}

/* Skip one value of any type (unknown fields). */
static int skip(struct dec *d, int depth) {
  if (depth > SKIP_MAX_DEPTH)
    return fail(d, KT_EPROTO, NULL, "unknown field nested too deep");
  if (left(d) < 1)
    return truncated(d, NULL);
  uint8_t b = *d->p;
  size_t n;
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    d->p++;
    return 0;
  }
  if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb) || (b >= 0xc4 && b <= 0xc6)) {
    struct kt_bytes x;
    return rd_bytes(d, NULL, &x);
  }
  if ((b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd || (b >= 0x80 && b <= 0x8f) || b == 0xde ||
      b == 0xdf) {
    bool map = (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
    uint32_t cnt;
    int rc = rd_container(d, NULL, map, &cnt);
    if (rc)
      return rc;
    uint64_t items = (uint64_t)cnt * (map ? 2 : 1);
    for (uint64_t i = 0; i < items; i++)
      if ((rc = skip(d, depth + 1)))
        return rc;
    return 0;
  }
  switch (b) {
  case 0xcc:
  case 0xd0:
    n = 2;
    break;
  case 0xcd:
  case 0xd1:
    n = 3;
    break;
  case 0xce:
  case 0xd2:
  case 0xca:
    n = 5;
    break;
  case 0xcf:
  case 0xd3:
  case 0xcb:
    n = 9;
    break;
  case 0xd4:
    n = 3;
    break;
  case 0xd5:
    n = 4;
    break;
  case 0xd6:
    n = 6;
    break;
  case 0xd7:
    n = 10;
    break;
  case 0xd8:
    n = 18;
    break;
  case 0xc7:
  case 0xc8:
  case 0xc9: {
    size_t ll = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
    if (left(d) < 1 + ll + 1)
      return truncated(d, NULL);
    n = 1 + ll + 1 + (size_t)be(d->p + 1, (int)ll);
    break;
  }
  default:
    return fail(d, KT_EPROTO, NULL, "invalid msgpack byte 0x%02x", b);
  }
  if (left(d) < n)
    return truncated(d, NULL);
  d->p += n;
  return 0;
}

/* ---- the generic decoder ---- */

static int dec_msg(struct dec *d, const struct kt_msg_desc *m, uint8_t *base, const char *field,
                   struct kt_header *hdr);

static int dec_tuple(struct dec *d, const struct kt_msg_desc *m, uint8_t *base, const char *field);

static inline bool name_is(const struct kt_field *f, struct kt_bytes k) {
  return f->name_len == k.n && memcmp(f->name, k.p, k.n) == 0;
}

static size_t elem_size(uint8_t kind) {
  switch (kind) {
  case KT_F_BYTES:
  case KT_F_TEXT:
    return sizeof(struct kt_bytes);
  default:
    return sizeof(int64_t);
  }
}

/* A scalar into p (field name: where errors point; NULL in a list). */
static inline __attribute__((always_inline)) int
dec_scalar(struct dec *d, uint8_t kind, uint64_t max, const char *name, void *p) {
  switch (kind) {
  case KT_F_U64:
    return rd_u64(d, name, UINT64_MAX, p);
  case KT_F_U32:
    return rd_u32(d, name, p);
  case KT_F_I64:
    return rd_i64(d, name, p);
  case KT_F_ENUM:
    return rd_enum(d, name, (uint8_t)max, p);
  case KT_F_BOOL:
    return rd_bool(d, name, p);
  default: /* BYTES, TEXT */
    return rd_bytes(d, name, p);
  }
}

/* A list of [type, payload] ops. */
static int dec_ops(struct dec *d, const struct kt_field *f, uint8_t *base) {
  const struct kt_op_set *os = f->ops;
  uint32_t n;
  int rc = rd_arr(d, f->name, &n);
  if (rc)
    return rc;
  if (n > f->max)
    return fail(d, KT_ETOOMANYOPS, f->name, "%u %s, at most %d", n, f->unit, (int)f->max);
  uint8_t *v = n ? kt_arena_alloc(d->a, (size_t)n * os->size) : NULL;
  if (n)
    memset(v, 0, (size_t)n * os->size);
  *(void **)(base + f->off) = v;
  *(uint32_t *)(base + f->aux) = n;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *op = v + (size_t)i * os->size;
    path_push(d, f->name, i);
    uint32_t m;
    uint64_t t;
    if ((rc = rd_arr(d, NULL, &m)))
      return rc;
    if (m != 2)
      return fail(d, KT_EPROTO, NULL, "expected [type, payload], got an array of %u", m);
    if ((rc = rd_u64(d, "type", UINT64_MAX, &t)))
      return rc;
    if (t < os->min_type || t > os->max_type)
      return fail(d, KT_EUNSUPPORTED, "type", "unknown op type %llu", (unsigned long long)t);
    op[os->type_off] = (uint8_t)t;
    if ((rc = dec_msg(d, os->by_type[t], op + os->payload_off, "payload", NULL)))
      return rc;
    path_pop(d);
  }
  return 0;
}

static int dec_list(struct dec *d, const struct kt_field *f, uint8_t *base) {
  uint32_t n;
  int rc = rd_arr(d, f->name, &n);
  if (rc)
    return rc;
  if (f->max && n > f->max)
    return fail(d, KT_ETOOMANYOPS, f->name, "%u %s, at most %d", n, f->unit, (int)f->max);
  const struct kt_msg_desc *sub = f->elem == KT_F_MSG ? f->sub : NULL;
  if (sub && sub->min_bytes > 1 && (uint64_t)n * sub->min_bytes > left(d))
    return truncated(d, f->name);
  size_t size = sub ? sub->size : elem_size(f->elem);
  uint8_t *v = n ? kt_arena_alloc(d->a, (size_t)n * size) : NULL;
  if (n && sub && sub->zero_fill)
    memset(v, 0, (size_t)n * size);
  *(void **)(base + f->off) = v;
  *(uint32_t *)(base + f->aux) = n;
  for (uint32_t i = 0; i < n; i++) {
    path_push(d, f->name, i);
    uint8_t *p = v + (size_t)i * size;
    rc = !sub                         ? dec_scalar(d, f->elem, f->max, NULL, p)
         : sub->form == KT_FORM_TUPLE ? dec_tuple(d, sub, p, NULL)
                                      : dec_msg(d, sub, p, NULL, NULL);
    if (rc)
      return rc;
    path_pop(d);
  }
  return 0;
}

/* One field's value into p (base + off, or a selector's scratch slot);
 * in_tuple: a nested message without a present flag is required. */
static int dec_field(struct dec *d, const struct kt_field *f, uint8_t *base, void *p,
                     bool in_tuple) {
  int rc;
  switch (f->kind) {
  case KT_F_MSG:
    if (f->aux != KT_NO_AUX) {
      bool *present = (bool *)(base + f->aux);
      if ((*present = !is_nil(d)) == false)
        return 0;
    } else if (!in_tuple && is_nil(d)) {
      return 0;
    }
    path_push(d, f->name, -1);
    if ((rc = dec_msg(d, f->sub, p, NULL, NULL)))
      return rc;
    path_pop(d);
    return 0;
  case KT_F_LIST:
    return dec_list(d, f, base);
  case KT_F_OPS:
    return dec_ops(d, f, base);
  default:
    return dec_scalar(d, f->kind, f->max, f->name, p);
  }
}

static int dec_tuple(struct dec *d, const struct kt_msg_desc *m, uint8_t *base, const char *field) {
  uint32_t n;
  int rc = rd_arr(d, field, &n);
  if (rc)
    return rc;
  if (n == 0 && m == &kt_schema_header) /* a nil or empty header reads as zeros */
    return 0;
  if (n < m->min_elems) {
    char names[160];
    size_t w = 0;
    for (uint8_t i = 0; i < m->n_fields && w < sizeof names; i++)
      w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", i ? ", " : "", m->fields[i].name);
    return fail(d, KT_EPROTO, field, "expected [%s], got an array of %u", names, n);
  }
  if (m == &kt_schema_kv) { /* generated from the same field list (schema.h) */
    struct kt_kv *kv = (struct kt_kv *)base;
#define RD_BYTES rd_bytes
#define RD_I64 rd_i64
#define KV_FIELD(k, m)                                                                             \
  if ((rc = RD_##k(d, #m, &kv->m)))                                                                \
    return rc;
    KT_SCHEMA_KV_FIELDS(KV_FIELD)
#undef KV_FIELD
  } else {
    for (uint8_t i = 0; i < m->n_fields; i++) {
      const struct kt_field *f = &m->fields[i];
      rc = f->kind < KT_F_MSG ? dec_scalar(d, f->kind, f->max, f->name, base + f->off)
                              : dec_field(d, f, base, base + f->off, true);
      if (rc)
        return rc;
    }
  }
  for (uint32_t i = m->n_fields; i < n; i++)
    if ((rc = skip(d, 1)))
      return rc;
  return 0;
}

/* A message into base. field: what a wrong container is reported as
 * ("payload" for a request's or an op's payload, NULL under a path pushed
 * by the caller). hdr: where a top-level response's "header" goes. */
static int dec_msg(struct dec *d, const struct kt_msg_desc *m, uint8_t *base, const char *field,
                   struct kt_header *hdr) {
  int rc;
  if (m->nest && ++d->depth > KT_MAX_TXN_DEPTH)
    return fail(d, KT_EINVAL, NULL, "txns nested deeper than %d", KT_MAX_TXN_DEPTH);
  if (m->form == KT_FORM_TUPLE)
    return dec_tuple(d, m, base, field);
  uint32_t nf;
  if ((rc = rd_map(d, field, &nf)))
    return rc;
  union {
    int64_t i;
    struct kt_bytes b;
  } scratch[16];
  if (m->selected) {
    kt_assert(m->n_fields <= 16);
    memset(scratch, 0, sizeof scratch);
  }
  uint8_t next = 0; /* the field expected next */
  while (nf--) {
    struct kt_bytes k;
    if ((rc = rd_key(d, &k)))
      return rc;
    const struct kt_field *f = NULL;
    if (next < m->n_fields && name_is(&m->fields[next], k)) {
      f = &m->fields[next];
    } else {
      for (uint8_t i = 0; i < m->n_fields; i++)
        if (name_is(&m->fields[i], k)) {
          f = &m->fields[i];
          break;
        }
    }
    if (f) {
      next = (uint8_t)(f - m->fields + 1);
      void *p = f->sel ? (void *)&scratch[f - m->fields] : (void *)(base + f->off);
      rc = f->kind < KT_F_MSG ? dec_scalar(d, f->kind, f->max, f->name, p)
                              : dec_field(d, f, base, p, false);
    } else if (hdr && k.n == 6 && memcmp(k.p, "header", 6) == 0) {
      path_push(d, "header", -1);
      if (!(rc = dec_msg(d, &kt_schema_header, (uint8_t *)hdr, NULL, NULL)))
        path_pop(d);
    } else {
      rc = skip(d, 0);
    }
    if (rc)
      return rc;
  }
  if (m->selected) /* keep the operand the selector names */
    for (uint8_t i = 0; i < m->n_fields; i++) {
      const struct kt_field *f = &m->fields[i];
      if (f->sel && f->sel - 1 == base[m->selector])
        memcpy(base + f->off, &scratch[i], elem_size(f->kind));
    }
  if (m->nest)
    d->depth--;
  return 0;
}

/* The [type, id, payload] envelope. */
static int dec_envelope(struct dec *d, uint8_t *type, uint64_t *id, uint64_t *rawtype) {
  uint32_t n;
  int rc = rd_arr(d, "body", &n);
  if (rc)
    return rc;
  if (n != 3)
    return fail(d, KT_EPROTO, "body", "expected [type, id, payload], got an array of %u", n);
  /* type and id are integers, never nil (kt_proto_peek_id relies on it) */
  if (left(d) >= 1 && *d->p == 0xc0)
    return wrong_type(d, "type", "int");
  if ((rc = rd_u64(d, "type", UINT64_MAX, rawtype)))
    return rc;
  *type = *rawtype > 255 ? 255 : (uint8_t)*rawtype;
  if (left(d) >= 1 && *d->p == 0xc0)
    return wrong_type(d, "id", "int");
  return rd_u64(d, "id", UINT64_MAX, id);
}

static int dec_finish(struct dec *d) {
  if (d->p != d->end)
    return fail(d, KT_EPROTO, NULL, "%zu trailing bytes after the body", left(d));
  return 0;
}

/* A body: the envelope, the type's payload (request or response, into the
 * struct at out: type and id first, payloads at the type's offset), then
 * nothing. */
static int decode(const uint8_t *body, size_t len, struct kt_arena *a, bool request, void *out,
                  uint8_t *type, uint64_t *id, struct kt_header *hdr, struct kt_err *e) {
  struct dec d;
  dec_init(&d, body, body + len, a, e);
  if (e)
    e->code = 0, e->msg[0] = 0;
  uint64_t rawtype = 0;
  int rc = dec_envelope(&d, type, id, &rawtype);
  if (rc)
    return rc;
  const struct kt_type_desc *t = kt_schema_type(rawtype);
  const struct kt_msg_desc *m = t ? (request ? t->req : t->resp) : NULL;
  if (!m)
    return kt_err_set(e, KT_EUNSUPPORTED, "type: unknown %s type %llu",
                      request ? "request" : "response", (unsigned long long)rawtype);
  path_push(&d, request ? t->name : t->resp_path, -1);
  uint8_t *base = (uint8_t *)out + (request ? t->req_off : t->resp_off);
  if (t->flags & KT_MT_OP) /* u.op.type, just before the payload union */
    ((uint8_t *)out)[(request ? offsetof(struct kt_req, u.op.type)
                              : offsetof(struct kt_resp, u.op.type))] = t->type;
  if ((rc = dec_msg(&d, m, base, "payload", t->flags & KT_MT_HEADER ? hdr : NULL)))
    return rc;
  return dec_finish(&d);
}

int kt_proto_decode_req_generic(const uint8_t *body, size_t len, struct kt_arena *a,
                                struct kt_req *req, struct kt_err *e) {
  memset(req, 0, sizeof *req);
  return decode(body, len, a, true, req, &req->type, &req->id, NULL, e);
}

/* ---- AUTHED without the walk ----
 * kt_proto_encode_authed's output: [73, 0, {user?, auth_revision?, body?,
 * member?}] in schema order, each field present and nonzero, in the kinds
 * the generic encoder picks (user str, auth_revision uint, body bin, member
 * true). authed_blob and authed_fast accept exactly that and nothing else:
 * anything they do not accept goes to the generic decoder, which then
 * decides (errors included), so the two can never disagree on an answer. */
_Static_assert(KT_MSG_AUTHED < 0x80, "AUTHED's type is a positive fixint");

/* A nonempty str (text) or bin (!text) at *p: 1 (into *out), 0 not that. */
static int authed_blob(const uint8_t **pp, const uint8_t *end, bool text, struct kt_bytes *out) {
  const uint8_t *p = *pp;
  if (p >= end)
    return 0;
  size_t hl, n;
  uint8_t b = *p;
  if (text && b >= 0xa0 && b <= 0xbf)
    hl = 1, n = b & 0x1f;
  else if (b == (text ? 0xd9 : 0xc4))
    hl = 2;
  else if (b == (text ? 0xda : 0xc5))
    hl = 3;
  else if (b == (text ? 0xdb : 0xc6))
    hl = 5;
  else
    return 0;
  if ((size_t)(end - p) < hl)
    return 0;
  if (hl > 1)
    n = (size_t)be(p + 1, (int)hl - 1);
  if (!n || (size_t)(end - p) - hl < n)
    return 0;
  *out = (struct kt_bytes){p + hl, (uint32_t)n};
  *pp = p + hl + n;
  return 1;
}

static inline bool authed_key(const uint8_t *p, const uint8_t *end, const char *name, size_t n) {
  return (size_t)(end - p) > n && p[0] == (0xa0 | n) && memcmp(p + 1, name, n) == 0;
}

static int authed_fast(const uint8_t *p, size_t len, struct kt_req *req) {
  const uint8_t *end = p + len;
  if (len < 4 || p[0] != 0x93 || p[1] != KT_MSG_AUTHED || p[2] != 0 || (p[3] & 0xf0) != 0x80)
    return 0;
  unsigned nf = p[3] & 0x0f;
  p += 4;
  struct kt_authed_req w = {0};
  int next = 0; /* schema order: user, auth_revision, body, member */
  while (nf--) {
    if (next < 1 && authed_key(p, end, "user", 4)) {
      p += 5;
      if (!authed_blob(&p, end, true, &w.user))
        return 0;
      next = 1;
    } else if (next < 2 && authed_key(p, end, "auth_revision", 13)) {
      p += 14;
      if (p >= end)
        return 0;
      int n = *p >= 0xcc && *p <= 0xcf ? 1 << (*p - 0xcc) : 0;
      if (*p > 0 && *p < 0x80)
        w.auth_revision = *p++;
      else if (n && (size_t)(end - p) > (size_t)n)
        w.auth_revision = be(p + 1, n), p += 1 + n;
      if (!w.auth_revision)
        return 0;
      next = 2;
    } else if (next < 3 && authed_key(p, end, "body", 4)) {
      p += 5;
      if (!authed_blob(&p, end, false, &w.body))
        return 0;
      next = 3;
    } else if (next < 4 && authed_key(p, end, "member", 6)) {
      p += 7;
      if (p >= end || *p++ != 0xc3)
        return 0;
      w.member = true;
      next = 4;
    } else {
      return 0;
    }
  }
  if (p != end)
    return 0;
  /* not the whole struct: an AUTHED request is read only through
   * type, id and u.authed, and its body is then decoded into it again */
  req->type = KT_MSG_AUTHED;
  req->id = 0;
  req->u.authed = w;
  return 1;
}

/* ---- PUT and RANGE requests without the walk ----
 * The requests the state thread decodes most (with --io-threads 0, and a
 * write's body again at apply time). The payload's fields are read with
 * the generic decoder's own readers, in the schema's order (the code is
 * generated from the same field lists, schema.h), with no error reporting
 * (e NULL: fail() only returns the code). op_fast takes [type, id, fixmap]
 * with an int id and each key a fixstr naming a field after the previous
 * one, then nothing: for such a body every value goes through the reader
 * dec_msg would pick for it, so the struct is the generic decoder's. On
 * anything else (another key, order or container form, a reader's error,
 * trailing bytes) it gives up and the generic decoder decides, errors
 * included. proto_golden_test and the proto fuzz target compare the two. */

/* The key `name` (a fixstr of n bytes) next: skip it, true. */
static inline bool fast_key(struct dec *d, const char *name, size_t n) {
  if (left(d) <= n || d->p[0] != (0xa0 | n) || memcmp(d->p + 1, name, n) != 0)
    return false;
  d->p += 1 + n;
  return true;
}

#define FAST_RD_BYTES(d, v, mx) rd_bytes(d, NULL, v)
#define FAST_RD_I64(d, v, mx) rd_i64(d, NULL, v)
#define FAST_RD_BOOL(d, v, mx) rd_bool(d, NULL, v)
#define FAST_RD_ENUM(d, v, mx) rd_enum(d, NULL, mx, v)
/* One of the *nf fields left, if its key is next. */
#define FAST_FIELD(k, m, mx)                                                                       \
  if (*nf && fast_key(d, #m, sizeof #m - 1)) {                                                     \
    if (FAST_RD_##k(d, &x->m, mx))                                                                 \
      return false;                                                                                \
    --*nf;                                                                                         \
  }

static bool put_fast(struct dec *d, unsigned *nf, struct kt_put_req *x) {
  KT_SCHEMA_PUT_REQ_FIELDS(FAST_FIELD)
  return true;
}

static bool range_fast(struct dec *d, unsigned *nf, struct kt_range_req *x) {
  KT_SCHEMA_RANGE_REQ_FIELDS(FAST_FIELD)
  return true;
}
#undef FAST_FIELD

static bool op_fast(const uint8_t *body, size_t len, struct kt_req *req) {
  uint8_t type = body[1];
  struct dec d;
  dec_init(&d, body + 2, body + len, NULL, NULL);
  uint64_t id;
  if (body[0] != 0x93 || !left(&d) || *d.p == 0xc0 || rd_u64(&d, NULL, UINT64_MAX, &id) ||
      !left(&d) || (*d.p & 0xf0) != 0x80)
    return false;
  unsigned nf = *d.p++ & 0x0f;
  memset(req, 0, sizeof *req);
  req->type = req->u.op.type = type;
  req->id = id;
  bool ok = type == KT_MSG_PUT ? put_fast(&d, &nf, &req->u.op.u.put)
                               : range_fast(&d, &nf, &req->u.op.u.range);
  return ok && nf == 0 && d.p == d.end;
}

int kt_proto_decode_req(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_req *req,
                        struct kt_err *e) {
  bool fast = false;
  if (len > 1 && body[1] == KT_MSG_AUTHED)
    fast = authed_fast(body, len, req);
  else if (len > 1 && (body[1] == KT_MSG_PUT || body[1] == KT_MSG_RANGE))
    fast = op_fast(body, len, req);
  if (!fast)
    return kt_proto_decode_req_generic(body, len, a, req, e);
  if (e)
    e->code = 0, e->msg[0] = 0;
  return 0;
}

int kt_proto_decode_resp(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_resp *resp,
                         struct kt_err *e) {
  memset(resp, 0, sizeof *resp);
  return decode(body, len, a, false, resp, &resp->type, &resp->id, &resp->header, e);
}

/* One non-negative integer at p[*off]: 1 read, 0 need more, -1 invalid. */
static int peek_uint(const uint8_t *p, size_t n, size_t *off, uint64_t *v) {
  if (*off >= n)
    return 0;
  uint8_t b = p[*off];
  size_t need;
  if (b <= 0x7f)
    need = 1;
  else if (b == 0xcc || b == 0xd0)
    need = 2;
  else if (b == 0xcd || b == 0xd1)
    need = 3;
  else if (b == 0xce || b == 0xd2)
    need = 5;
  else if (b == 0xcf || b == 0xd3)
    need = 9;
  else
    return -1;
  if (n - *off < need)
    return 0;
  struct dec d;
  dec_init(&d, p + *off, p + *off + need, NULL, NULL);
  struct ival iv;
  if (rd_ival(&d, NULL, &iv) || iv.neg)
    return -1;
  *v = iv.u;
  *off += need;
  return 1;
}

int kt_proto_peek_id(const uint8_t *p, size_t n, uint8_t *type, uint64_t *id) {
  /* the envelope array: fixarray, array16 or array32 of 3 */
  static const uint8_t a16[] = {0xdc, 0, 3}, a32[] = {0xdd, 0, 0, 0, 3};
  size_t off;
  if (n < 1)
    return 0;
  if (p[0] == 0x93) {
    off = 1;
  } else if (p[0] == 0xdc || p[0] == 0xdd) {
    const uint8_t *want = p[0] == 0xdc ? a16 : a32;
    off = p[0] == 0xdc ? sizeof a16 : sizeof a32;
    if (memcmp(p, want, KT_MIN(n, off)) != 0)
      return -1;
    if (n < off)
      return 0;
  } else {
    return -1;
  }
  uint64_t v[2];
  for (int i = 0; i < 2; i++) {
    int rc = peek_uint(p, n, &off, &v[i]);
    if (rc <= 0)
      return rc;
  }
  *type = v[0] > 255 ? 255 : (uint8_t)v[0];
  *id = v[1];
  return 1;
}

/* ---- the writer: MessagePack into a kt_buf, msgpack-c's formats ----
 * put_*() write at p, where the caller made room (INT_ROOM for an integer,
 * BLOB_ROOM for a blob), and return the end; w_*() do the same into a
 * kt_buf. A message's fixed part takes one room() check, not one a value. */

#define INT_ROOM 9
#define BLOB_ROOM(x) (5 + (size_t)(x).n)

static inline uint8_t *room(struct kt_buf *b, size_t n) {
  if (b->cap - b->len < n)
    kt_buf_reserve(b, n);
  return b->p + b->len;
}

static inline void w_end(struct kt_buf *b, const uint8_t *end) { b->len = (size_t)(end - b->p); }

/* A tag byte then an n-byte (1, 2, 4 or 8) big-endian value. */
static inline uint8_t *put_tagged(uint8_t *p, uint8_t tag, uint64_t v, int n) {
  p[0] = tag;
  if (n == 1)
    p[1] = (uint8_t)v;
  else if (n == 2)
    p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)v;
  else if (n == 4)
    kt_put_u32be(p + 1, (uint32_t)v);
  else
    kt_put_u64be(p + 1, v);
  return p + 1 + n;
}

static inline uint8_t *put_uint(uint8_t *p, uint64_t v) {
  if (v < 128) {
    *p = (uint8_t)v;
    return p + 1;
  }
  if (v < 256)
    return put_tagged(p, 0xcc, v, 1);
  if (v < 65536)
    return put_tagged(p, 0xcd, v, 2);
  if (v < (1ull << 32))
    return put_tagged(p, 0xce, v, 4);
  return put_tagged(p, 0xcf, v, 8);
}

static inline uint8_t *put_int(uint8_t *p, int64_t v) {
  if (v >= 0)
    return put_uint(p, (uint64_t)v); /* msgpack-c packs non-negative int64s as uints */
  if (v >= -32) {
    *p = (uint8_t)(int8_t)v;
    return p + 1;
  }
  if (v >= -128)
    return put_tagged(p, 0xd0, (uint64_t)v, 1);
  if (v >= -32768)
    return put_tagged(p, 0xd1, (uint64_t)v, 2);
  if (v >= -(1ll << 31))
    return put_tagged(p, 0xd2, (uint64_t)v, 4);
  return put_tagged(p, 0xd3, (uint64_t)v, 8);
}

/* bin (text false) or str with its bytes. */
static inline uint8_t *put_blob(uint8_t *p, struct kt_bytes x, bool text) {
  if (text && x.n < 32)
    *p++ = (uint8_t)(0xa0 | x.n);
  else if (x.n < 256)
    p = put_tagged(p, text ? 0xd9 : 0xc4, x.n, 1);
  else if (x.n < 65536)
    p = put_tagged(p, text ? 0xda : 0xc5, x.n, 2);
  else
    p = put_tagged(p, text ? 0xdb : 0xc6, x.n, 4);
  if (x.n)
    memcpy(p, x.p, x.n);
  return p + x.n;
}

static inline uint8_t *put_array(uint8_t *p, uint32_t n) {
  if (n < 16) {
    *p = (uint8_t)(0x90 | n);
    return p + 1;
  }
  return n < 65536 ? put_tagged(p, 0xdc, n, 2) : put_tagged(p, 0xdd, n, 4);
}

/* A map key (every field name is a fixstr); room: 1 + n. */
static inline uint8_t *put_name(uint8_t *p, const char *s, uint8_t n) {
  *p = (uint8_t)(0xa0 | n);
  memcpy(p + 1, s, n);
  return p + 1 + n;
}

static inline void w_byte(struct kt_buf *b, uint8_t x) {
  *room(b, 1) = x;
  b->len++;
}

static void w_uint(struct kt_buf *b, uint64_t v) { w_end(b, put_uint(room(b, INT_ROOM), v)); }

static void w_array(struct kt_buf *b, uint32_t n) { w_end(b, put_array(room(b, 5), n)); }

static void w_name(struct kt_buf *b, const char *s, uint8_t n) {
  w_end(b, put_name(room(b, 1 + (size_t)n), s, n));
}

/* ---- the generic encoder ---- */

static void enc_msg(struct kt_buf *b, const struct kt_msg_desc *m, const uint8_t *base,
                    const struct kt_header *hdr);

static bool msg_is_zero(const struct kt_msg_desc *m, const uint8_t *base);

static bool field_is_zero(const struct kt_field *f, const uint8_t *base) {
  const uint8_t *p = base + f->off;
  switch (f->kind) {
  case KT_F_U64:
  case KT_F_I64:
    return *(const uint64_t *)p == 0;
  case KT_F_U32:
    return *(const uint32_t *)p == 0;
  case KT_F_ENUM:
    return *p == 0;
  case KT_F_BOOL:
    return !*(const bool *)p;
  case KT_F_BYTES:
  case KT_F_TEXT:
    return ((const struct kt_bytes *)p)->n == 0;
  case KT_F_MSG:
    return f->aux != KT_NO_AUX ? !*(const bool *)(base + f->aux) : msg_is_zero(f->sub, p);
  default: /* LIST, OPS */
    return *(const uint32_t *)(base + f->aux) == 0;
  }
}

static bool msg_is_zero(const struct kt_msg_desc *m, const uint8_t *base) {
  for (uint8_t i = 0; i < m->n_fields; i++)
    if (!field_is_zero(&m->fields[i], base))
      return false;
  return true;
}

/* The room a scalar of that kind at p takes at most. */
static inline size_t scalar_room(uint8_t kind, const void *p) {
  return kind == KT_F_BYTES || kind == KT_F_TEXT ? BLOB_ROOM(*(const struct kt_bytes *)p)
                                                 : INT_ROOM;
}

static inline __attribute__((always_inline)) uint8_t *put_scalar(uint8_t *w, uint8_t kind,
                                                                 uint64_t max, const void *p) {
  switch (kind) {
  case KT_F_U64:
    return put_uint(w, *(const uint64_t *)p);
  case KT_F_U32:
    return put_uint(w, *(const uint32_t *)p);
  case KT_F_I64:
    return put_int(w, *(const int64_t *)p);
  case KT_F_ENUM:
    kt_assert(*(const uint8_t *)p <= max);
    return put_uint(w, *(const uint8_t *)p);
  case KT_F_BOOL:
    *w = *(const bool *)p ? 0xc3 : 0xc2;
    return w + 1;
  default: /* BYTES, TEXT */
    return put_blob(w, *(const struct kt_bytes *)p, kind == KT_F_TEXT);
  }
}

static void enc_scalar(struct kt_buf *b, uint8_t kind, uint64_t max, const void *p) {
  w_end(b, put_scalar(room(b, scalar_room(kind, p)), kind, max, p));
}

/* A kv tuple, generated from its field list (schema.h) like its decoder:
 * a RANGE response repeats it thousands of times. One room() for all;
 * inlined into each caller (a call per kv costs ~40 instructions). */
static inline __attribute__((always_inline)) void enc_kv(struct kt_buf *b, const struct kt_kv *kv) {
#define ROOM_BYTES(x) +BLOB_ROOM(x)
#define ROOM_I64(x) +INT_ROOM
#define PUT_BYTES(w, x) put_blob(w, x, false)
#define PUT_I64(w, x) put_int(w, x)
#define KV_ONE(k, m) +1
#define KV_ROOM(k, m) ROOM_##k(kv->m)
#define KV_PUT(k, m) w = PUT_##k(w, kv->m);
  uint8_t *w = room(b, 1 KT_SCHEMA_KV_FIELDS(KV_ROOM));
  *w++ = (uint8_t)(0x90 | (0 KT_SCHEMA_KV_FIELDS(KV_ONE)));
  KT_SCHEMA_KV_FIELDS(KV_PUT)
  w_end(b, w);
#undef ROOM_BYTES
#undef ROOM_I64
#undef PUT_BYTES
#undef PUT_I64
#undef KV_ONE
#undef KV_ROOM
#undef KV_PUT
}

static void enc_value(struct kt_buf *b, const struct kt_field *f, const uint8_t *base) {
  const uint8_t *p = base + f->off;
  switch (f->kind) {
  case KT_F_MSG:
    if (f->aux != KT_NO_AUX && !*(const bool *)(base + f->aux))
      w_byte(b, 0xc0); /* an absent optional message in a tuple */
    else
      enc_msg(b, f->sub, p, NULL);
    return;
  case KT_F_LIST: {
    uint32_t n = *(const uint32_t *)(base + f->aux);
    const uint8_t *v = *(const uint8_t *const *)p;
    size_t size = f->elem == KT_F_MSG ? f->sub->size : elem_size(f->elem);
    w_array(b, n);
    for (uint32_t i = 0; i < n; i++) {
      if (f->elem == KT_F_MSG)
        enc_msg(b, f->sub, v + (size_t)i * size, NULL);
      else
        enc_scalar(b, f->elem, f->max, v + (size_t)i * size);
    }
    return;
  }
  case KT_F_OPS: {
    const struct kt_op_set *os = f->ops;
    uint32_t n = *(const uint32_t *)(base + f->aux);
    const uint8_t *v = *(const uint8_t *const *)p;
    w_array(b, n);
    for (uint32_t i = 0; i < n; i++) {
      const uint8_t *op = v + (size_t)i * os->size;
      uint8_t t = op[os->type_off];
      kt_assert(t >= os->min_type && t <= os->max_type);
      w_array(b, 2);
      w_uint(b, t);
      enc_msg(b, os->by_type[t], op + os->payload_off, NULL);
    }
    return;
  }
  default:
    enc_scalar(b, f->kind, f->max, p);
  }
}

static void enc_msg(struct kt_buf *b, const struct kt_msg_desc *m, const uint8_t *base,
                    const struct kt_header *hdr) {
  if (m == &kt_schema_kv) {
    enc_kv(b, (const struct kt_kv *)base);
    return;
  }
  if (m->form == KT_FORM_TUPLE) {
    w_array(b, m->n_fields);
    for (uint8_t i = 0; i < m->n_fields; i++)
      enc_value(b, &m->fields[i], base);
    return;
  }
  size_t at = b->len;
  unsigned n = 0;
  w_byte(b, 0x80); /* patched below */
  if (hdr) {
    w_name(b, "header", 6);
    enc_msg(b, &kt_schema_header, (const uint8_t *)hdr, NULL);
    n++;
  }
  for (uint8_t i = 0; i < m->n_fields; i++) {
    const struct kt_field *f = &m->fields[i];
    if (f->sel && f->sel - 1 != base[m->selector])
      continue; /* an operand the selector does not name */
    if (!f->always && field_is_zero(f, base))
      continue;
    n++;
    if (f->kind < KT_F_MSG) { /* name and value after one room() */
      const uint8_t *p = base + f->off;
      uint8_t *w = room(b, 1 + (size_t)f->name_len + scalar_room(f->kind, p));
      w = put_name(w, f->name, f->name_len);
      w_end(b, put_scalar(w, f->kind, f->max, p));
      continue;
    }
    w_name(b, f->name, f->name_len);
    enc_value(b, f, base);
  }
  kt_assert(n <= 15);
  b->p[at] = (uint8_t)(0x80 | n);
}

/* [type, id, payload] */
static void enc_body(struct kt_buf *b, const struct kt_type_desc *t, const struct kt_msg_desc *m,
                     const uint8_t *payload, uint64_t id, const struct kt_header *hdr) {
  w_byte(b, 0x93);
  w_uint(b, t->type);
  w_uint(b, id);
  enc_msg(b, m, payload, hdr);
}

/* Frame prefix placeholder; returns its offset. */
static size_t frame_begin(struct kt_buf *out) {
  size_t off = out->len;
  static const uint8_t zero[KT_FRAME_HDR];
  kt_buf_append(out, zero, KT_FRAME_HDR);
  return off;
}
static void frame_end(struct kt_buf *out, size_t off) {
  size_t n = out->len - off - KT_FRAME_HDR;
  kt_assert(n <= UINT32_MAX);
  kt_put_u32be(out->p + off, (uint32_t)n);
}

static void enc_req_body(struct kt_buf *out, const struct kt_req *req, uint64_t id) {
  const struct kt_type_desc *t = kt_schema_type(req->type);
  kt_assert(t && t->req); /* kt_proto_encode_req: not a request type */
  kt_assert(!(t->flags & KT_MT_OP) || req->u.op.type == req->type);
  enc_body(out, t, t->req, (const uint8_t *)req + t->req_off, id, NULL);
}

void kt_proto_encode_req(struct kt_buf *out, const struct kt_req *req) {
  size_t off = frame_begin(out);
  enc_req_body(out, req, req->id);
  frame_end(out, off);
}

void kt_proto_encode_req_body(struct kt_buf *out, const struct kt_req *req) {
  enc_req_body(out, req, 0);
}

void kt_proto_encode_authed(struct kt_buf *out, const struct kt_authed_req *w) {
  unsigned nf = (w->user.n != 0) + (w->auth_revision != 0) + (w->body.n != 0) + w->member;
  /* one room() for it all: the envelope, four names, two blobs, a uint */
  uint8_t *p = room(out, 4 + 32 + BLOB_ROOM(w->user) + INT_ROOM + BLOB_ROOM(w->body) + 1);
  *p++ = 0x93, *p++ = KT_MSG_AUTHED, *p++ = 0, *p++ = (uint8_t)(0x80 | nf);
  if (w->user.n)
    p = put_blob(put_name(p, "user", 4), w->user, true);
  if (w->auth_revision)
    p = put_uint(put_name(p, "auth_revision", 13), w->auth_revision);
  if (w->body.n)
    p = put_blob(put_name(p, "body", 4), w->body, false);
  if (w->member)
    p = put_name(p, "member", 6), *p++ = 0xc3;
  w_end(out, p);
}

void kt_proto_encode_resp_generic(struct kt_buf *out, const struct kt_resp *resp) {
  const struct kt_type_desc *t = kt_schema_type(resp->type);
  kt_assert(t && t->resp); /* kt_proto_encode_resp: not a response type */
  kt_assert(!(t->flags & KT_MT_OP) || resp->u.op.type == resp->type);
  size_t off = frame_begin(out);
  enc_body(out, t, t->resp, (const uint8_t *)resp + t->resp_off, resp->id,
           t->flags & KT_MT_HEADER ? &resp->header : NULL);
  frame_end(out, off);
}

/* ---- the replies of a put, a delete, a range and a keep-alive, without
 * the walk ----
 * What enc_body writes for them, written straight: the frame prefix, then
 * [type, id, {header: [cluster_id, member_id, revision, raft_term], the
 * payload's nonzero fields in schema order}]. kt_kv lists go through
 * enc_kv as in the generic encoder. proto_golden_test and the proto fuzz
 * target compare the bytes with kt_proto_encode_resp_generic's. */

#define PUT_NAME(p, s) put_name(p, s, sizeof s - 1)
/* The frame up to the header's end (the prefix is patched by frame_end). */
#define HEAD_ROOM (KT_FRAME_HDR + 2 + INT_ROOM + 1 + 7 + 1 + 4 * INT_ROOM)
/* A scalar field (name of at most 11 bytes, an int or a bool). */
#define FIELD_ROOM (12 + INT_ROOM)

static uint8_t *put_head(uint8_t *p, const struct kt_resp *r, unsigned nf) {
  const struct kt_header *h = &r->header;
  p += KT_FRAME_HDR;
  *p++ = 0x93;
  *p++ = r->type; /* < 0x80: a positive fixint */
  p = put_uint(p, r->id);
  *p++ = (uint8_t)(0x80 | (1 + nf));
  p = PUT_NAME(p, "header");
  *p++ = 0x94;
  p = put_uint(p, h->cluster_id);
  p = put_uint(p, h->member_id);
  p = put_int(p, h->revision);
  return put_uint(p, h->raft_term);
}

static void enc_kvs(struct kt_buf *b, const char *name, uint8_t name_len, const struct kt_kv *kvs,
                    uint32_t n) {
  w_name(b, name, name_len);
  w_array(b, n);
  for (uint32_t i = 0; i < n; i++)
    enc_kv(b, &kvs[i]);
}

/* false: not one of those (nothing written). */
static bool encode_resp_fast(struct kt_buf *out, const struct kt_resp *r) {
  _Static_assert(KT_MSG_LEASE_KEEPALIVE < 0x80, "types are positive fixints");
  const struct kt_response_op *op = &r->u.op;
  const struct kt_lease_resp *ls = &r->u.lease;
  switch (r->type) {
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_RANGE:
    kt_assert(op->type == r->type);
    break;
  case KT_MSG_LEASE_KEEPALIVE:
    if (ls->n_keys || ls->n_leases)
      return false;
    break;
  default:
    return false;
  }
  size_t at = out->len;
  uint8_t *p = room(out, HEAD_ROOM + 3 * FIELD_ROOM);
  switch (r->type) {
  case KT_MSG_PUT:
    w_end(out, put_head(p, r, op->u.put.has_prev_kv));
    if (op->u.put.has_prev_kv) {
      w_name(out, "prev_kv", 7);
      enc_kv(out, &op->u.put.prev_kv);
    }
    break;
  case KT_MSG_DELETE: {
    const struct kt_delete_resp *x = &op->u.del;
    p = put_head(p, r, (x->deleted != 0) + (x->n_prev_kvs != 0));
    if (x->deleted)
      p = put_int(PUT_NAME(p, "deleted"), x->deleted);
    w_end(out, p);
    if (x->n_prev_kvs)
      enc_kvs(out, "prev_kvs", 8, x->prev_kvs, x->n_prev_kvs);
    break;
  }
  case KT_MSG_RANGE: {
    const struct kt_range_resp *x = &op->u.range;
    w_end(out, put_head(p, r, (x->n_kvs != 0) + x->more + (x->count != 0)));
    if (x->n_kvs)
      enc_kvs(out, "kvs", 3, x->kvs, x->n_kvs);
    p = room(out, 2 * FIELD_ROOM);
    if (x->more)
      p = PUT_NAME(p, "more"), *p++ = 0xc3;
    if (x->count)
      p = put_int(PUT_NAME(p, "count"), x->count);
    w_end(out, p);
    break;
  }
  default: /* LEASE_KEEPALIVE */
    p = put_head(p, r, (ls->id != 0) + (ls->ttl != 0) + (ls->granted_ttl != 0));
    if (ls->id)
      p = put_int(PUT_NAME(p, "id"), ls->id);
    if (ls->ttl)
      p = put_int(PUT_NAME(p, "ttl"), ls->ttl);
    if (ls->granted_ttl)
      p = put_int(PUT_NAME(p, "granted_ttl"), ls->granted_ttl);
    w_end(out, p);
  }
  frame_end(out, at);
  return true;
}

void kt_proto_encode_resp(struct kt_buf *out, const struct kt_resp *resp) {
  if (!encode_resp_fast(out, resp))
    kt_proto_encode_resp_generic(out, resp);
}

/* The events field of a WATCH frame (the last one of its map). */
static const struct kt_field *watch_events_field(void) {
  const struct kt_type_desc *t = kt_schema_type(KT_MSG_WATCH_CREATE);
  const struct kt_msg_desc *m = t->resp;
  const struct kt_field *f = &m->fields[m->n_fields - 1];
  kt_assert(f->kind == KT_F_LIST && f->off == offsetof(struct kt_watch_resp, events));
  return f;
}

void kt_proto_encode_watch_events(struct kt_buf *out, const struct kt_event *events, uint32_t n) {
  struct kt_watch_resp wr = {.events = (struct kt_event *)events, .n_events = n};
  enc_value(out, watch_events_field(), (const uint8_t *)&wr);
}

void kt_proto_encode_watch_header(struct kt_buf *out, const struct kt_header *hdr) {
  w_name(out, "header", 6);
  enc_msg(out, &kt_schema_header, (const uint8_t *)hdr, NULL);
}

/* Written by hand for speed (one per watcher per frame): the map's fields
 * in the schema's order (header, watch_id, fragment, events), zero ones
 * left out, as enc_msg writes them; proto_test compares the two. */
void kt_proto_encode_watch_frame(struct kt_buf *out, uint64_t id, const struct kt_header *hdr,
                                 const uint8_t *head, size_t head_len, int64_t watch_id,
                                 bool fragment, const uint8_t *events, size_t events_len) {
  size_t off = frame_begin(out);
  w_byte(out, 0x93);
  w_uint(out, KT_MSG_WATCH_CREATE);
  w_uint(out, id);
  w_byte(out, (uint8_t)(0x80 | (2 + (watch_id != 0) + fragment)));
  if (head)
    kt_buf_append(out, head, head_len);
  else
    kt_proto_encode_watch_header(out, hdr);
  if (watch_id) {
    w_name(out, "watch_id", 8);
    w_end(out, put_int(room(out, INT_ROOM), watch_id));
  }
  if (fragment) {
    w_name(out, "fragment", 8);
    w_byte(out, 0xc3);
  }
  w_name(out, "events", 6);
  kt_buf_append(out, events, events_len);
  frame_end(out, off);
}

void kt_proto_encode_error(struct kt_buf *out, uint64_t id, int code, const char *message) {
  struct kt_resp r = {.type = KT_MSG_ERROR, .id = id};
  r.u.error.code = (uint32_t)code;
  r.u.error.message.p = (const uint8_t *)message;
  r.u.error.message.n = message ? (uint32_t)strlen(message) : 0;
  kt_proto_encode_resp(out, &r);
}
