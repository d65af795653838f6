/* snap/reader.c — the snapshot decoder, over a file (streamed) or a buffer.
 * Every rule it checks is a rule of snap/FORMAT.md; every length read from
 * the file is bounds-checked before it is used. */
#include "snap.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- byte sources ---- */

/* need(n): the next n bytes, or fewer at the end of input (*got says how
 * many). The pointer stays valid until the next call. Returns NULL and sets
 * errno on a read error. */
struct src {
  const uint8_t *(*need)(struct src *s, size_t n, size_t *got);
  /* mem */
  const uint8_t *p;
  size_t n, off;
  /* file: n (above) is its size at open; reads never go past it, so a
   * hostile length cannot make the reader allocate more than the file */
  int fd;
  uint8_t *buf;
  size_t cap;
};

static const uint8_t *mem_need(struct src *s, size_t n, size_t *got) {
  size_t left = s->n - s->off;
  *got = n < left ? n : left;
  const uint8_t *p = s->p + s->off;
  s->off += *got;
  return p;
}

static const uint8_t *file_need(struct src *s, size_t n, size_t *got) {
  if (n > s->n - s->off) /* never allocate more than the file holds */
    n = s->n - s->off;
  if (s->cap < n) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < n)
      cap *= 2;
    uint8_t *b = realloc(s->buf, cap);
    if (!b) {
      errno = ENOMEM;
      return NULL;
    }
    s->buf = b;
    s->cap = cap;
  }
  size_t have = 0;
  while (have < n) {
    ssize_t r = read(s->fd, s->buf + have, n - have);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return NULL;
    if (r == 0)
      break;
    have += (size_t)r;
  }
  s->off += have;
  *got = have;
  return s->buf;
}

/* ---- msgpack decoding (bounded cursor) ---- */

struct cur {
  const uint8_t *p, *end;
};

static bool rd_u(struct cur *c, size_t n, uint64_t *v) {
  if ((size_t)(c->end - c->p) < n)
    return false;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++)
    x = (x << 8) | c->p[i];
  c->p += n;
  *v = x;
  return true;
}

static bool rd_int(struct cur *c, int64_t *out) {
  if (c->p >= c->end)
    return false;
  uint8_t t = *c->p++;
  uint64_t u;
  if (t <= 0x7f) {
    *out = t;
    return true;
  }
  if (t >= 0xe0) {
    *out = (int8_t)t;
    return true;
  }
  switch (t) {
  case 0xcc:
  case 0xcd:
  case 0xce:
  case 0xcf:
    if (!rd_u(c, (size_t)1 << (t - 0xcc), &u) || u > INT64_MAX)
      return false;
    *out = (int64_t)u;
    return true;
  case 0xd0:
    if (!rd_u(c, 1, &u))
      return false;
    *out = (int8_t)u;
    return true;
  case 0xd1:
    if (!rd_u(c, 2, &u))
      return false;
    *out = (int16_t)u;
    return true;
  case 0xd2:
    if (!rd_u(c, 4, &u))
      return false;
    *out = (int32_t)u;
    return true;
  case 0xd3:
    if (!rd_u(c, 8, &u))
      return false;
    *out = (int64_t)u;
    return true;
  default:
    return false;
  }
}

static bool rd_bytes(struct cur *c, struct kt_bytes *out) {
  if (c->p >= c->end)
    return false;
  uint8_t t = *c->p++;
  uint64_t n;
  if (t >= 0xa0 && t <= 0xbf)
    n = t & 0x1f;
  else if (t == 0xc4 || t == 0xd9) {
    if (!rd_u(c, 1, &n))
      return false;
  } else if (t == 0xc5 || t == 0xda) {
    if (!rd_u(c, 2, &n))
      return false;
  } else if (t == 0xc6 || t == 0xdb) {
    if (!rd_u(c, 4, &n))
      return false;
  } else {
    return false;
  }
  if (n > (uint64_t)(c->end - c->p))
    return false;
  out->p = c->p;
  out->n = (uint32_t)n;
  c->p += n;
  return true;
}

static bool rd_bool(struct cur *c, bool *out) {
  if (c->p >= c->end || (*c->p != 0xc2 && *c->p != 0xc3))
    return false;
  *out = *c->p++ == 0xc3;
  return true;
}

static bool rd_array(struct cur *c, uint64_t *n) {
  if (c->p >= c->end)
    return false;
  uint8_t t = *c->p++;
  if (t >= 0x90 && t <= 0x9f) {
    *n = t & 0x0f;
    return true;
  }
  if (t == 0xdc)
    return rd_u(c, 2, n);
  if (t == 0xdd)
    return rd_u(c, 4, n);
  return false;
}

/* ---- the decoder ---- */

struct dec {
  struct src *s;
  const char *name;
  kt_snap_rec_fn fn;
  void *arg;
  struct kt_snap_meta *m;
  struct kt_err *err;
  crypto_generichash_state h;
  uint64_t off; /* file offset of the next byte */
  uint8_t *raw;
  size_t raw_cap;
  /* order and live-key tracking */
  uint8_t *prev_key;
  size_t prev_cap;
  uint32_t prev_n;
  int64_t prev_rev, prev_sub;
  bool have_prev, prev_tomb;
  uint64_t records, blocks, live, raw_bytes;
};

#define CORRUPT(d, ...) dec_fail((d), KT_ECORRUPT, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static int dec_fail(struct dec *d, int code, const char *fmt,
                                                          ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return kt_err_set(d->err, code, "%s: %s", d->name, what);
}

/* Exactly n bytes or a truncation error naming `what`. */
static const uint8_t *need(struct dec *d, size_t n, const char *what, int *rc) {
  size_t got = 0;
  const uint8_t *p = d->s->need(d->s, n, &got);
  if (!p) {
    *rc =
        dec_fail(d, KT_EIO, "read at offset %llu: %s", (unsigned long long)d->off, strerror(errno));
    return NULL;
  }
  if (got < n) {
    *rc = CORRUPT(d, "truncated: %s at offset %llu needs %zu bytes, file has %zu", what,
                  (unsigned long long)d->off, n, got);
    return NULL;
  }
  d->off += n;
  return p;
}

static int dec_header(struct dec *d) {
  int rc = 0;
  const uint8_t *p = need(d, 16, "header", &rc);
  if (!p)
    return rc;
  if (memcmp(p, KT_SNAP_MAGIC, 8) != 0)
    return CORRUPT(d, "not a ketch snapshot (bad magic at offset 0)");
  uint32_t ver = kt_get_u32be(p + 8);
  if (ver != KT_SNAP_FORMAT_VERSION)
    return dec_fail(d, KT_EVERSION, "format version %u at offset 8 is not supported (want %u)", ver,
                    KT_SNAP_FORMAT_VERSION);
  uint32_t hlen = kt_get_u32be(p + 12);
  if (hlen < 82 || hlen > 82 + KT_SNAP_MAX_MEMBERSHIP + KT_SNAP_MAX_CREATOR)
    return CORRUPT(d, "bad header length %u at offset 12", hlen);
  uint8_t first[16];
  memcpy(first, p, 16);
  p = need(d, hlen - 16, "header", &rc);
  if (!p)
    return rc;
    /* p holds header bytes [16, hlen): Q(o) is header offset o. */
#define Q(o) (p + (o)-16)
  uint8_t check[16];
  crypto_generichash_state hh;
  crypto_generichash_init(&hh, NULL, 0, 16);
  crypto_generichash_update(&hh, first, 16);
  crypto_generichash_update(&hh, p, hlen - 32);
  crypto_generichash_final(&hh, check, 16);
  if (sodium_memcmp(check, Q(hlen - 16), 16) != 0)
    return CORRUPT(d, "header checksum mismatch (header bytes 0..%u)", hlen - 1);
  struct kt_snap_meta *m = d->m;
  m->term = kt_get_u64be(Q(16));
  m->index = kt_get_u64be(Q(24));
  m->revision = (int64_t)kt_get_u64be(Q(32));
  m->compact_revision = (int64_t)kt_get_u64be(Q(40));
  m->created_unix_ms = kt_get_u64be(Q(48));
  uint32_t flags = kt_get_u32be(Q(56));
  uint32_t mlen = kt_get_u32be(Q(60));
  if (flags != 0)
    return CORRUPT(d, "unknown header flags 0x%x at offset 56", flags);
  if (m->revision < 0 || m->compact_revision < 0 || m->compact_revision > m->revision)
    return CORRUPT(d, "bad revisions in header: revision %lld, compact revision %lld",
                   (long long)m->revision, (long long)m->compact_revision);
  if (mlen > KT_SNAP_MAX_MEMBERSHIP || 82 + (uint64_t)mlen > hlen)
    return CORRUPT(d, "bad membership length %u at offset 60", mlen);
  uint32_t clen = (uint32_t)*Q(64 + mlen) << 8 | *Q(65 + mlen);
  if (clen > KT_SNAP_MAX_CREATOR || 82 + mlen + clen != hlen)
    return CORRUPT(d, "bad creator length %u at offset %u", clen, 64 + mlen);
  if (mlen) {
    uint8_t *mb = malloc(mlen);
    if (!mb)
      return dec_fail(d, KT_ENOMEM, "out of memory");
    memcpy(mb, Q(64), mlen);
    m->membership.p = mb;
    m->membership.n = mlen;
  }
  memcpy(m->creator, Q(66 + mlen), clen);
  m->creator[clen] = 0;
  crypto_generichash_update(&d->h, first, 16);
  crypto_generichash_update(&d->h, p, hlen - 16);
  return 0;
#undef Q
}

static int dec_record(struct dec *d, struct cur *c, uint64_t boff, uint32_t i) {
  uint64_t n;
  int64_t type;
  if (!rd_array(c, &n) || n < 1 || !rd_int(c, &type))
    return CORRUPT(d, "block at offset %llu, record %u: not a msgpack record array",
                   (unsigned long long)boff, i);
  if (type != KT_SNAP_REC_KVREV)
    return CORRUPT(d,
                   "block at offset %llu, record %u: record type %lld is not in format version %u",
                   (unsigned long long)boff, i, (long long)type, KT_SNAP_FORMAT_VERSION);
  struct kt_kvrev r;
  if (n != 9 || !rd_bytes(c, &r.key) || !rd_bytes(c, &r.value) || !rd_int(c, &r.create_revision) ||
      !rd_int(c, &r.mod_revision) || !rd_int(c, &r.mod_sub) || !rd_int(c, &r.version) ||
      !rd_int(c, &r.lease) || !rd_bool(c, &r.tombstone))
    return CORRUPT(d, "block at offset %llu, record %u: malformed kv record",
                   (unsigned long long)boff, i);
  if (r.key.n == 0 || r.mod_revision < 1 || r.mod_revision > d->m->revision || r.mod_sub < 0 ||
      (r.tombstone
           ? (r.value.n || r.create_revision || r.version)
           : (r.create_revision < 1 || r.create_revision > r.mod_revision || r.version < 1)))
    return CORRUPT(d, "block at offset %llu, record %u: invalid kv record fields",
                   (unsigned long long)boff, i);
  struct kt_bytes prev = {d->prev_key, d->prev_n};
  int cmp = d->have_prev ? kt_bytes_cmp(r.key, prev) : 1;
  if (cmp < 0 || (cmp == 0 && (r.mod_revision < d->prev_rev ||
                               (r.mod_revision == d->prev_rev && r.mod_sub <= d->prev_sub))))
    return CORRUPT(d, "block at offset %llu, record %u: records out of order",
                   (unsigned long long)boff, i);
  if (cmp != 0) {
    if (d->have_prev && !d->prev_tomb)
      d->live++;
    if (d->prev_cap < r.key.n) {
      uint8_t *k = realloc(d->prev_key, r.key.n);
      if (!k)
        return dec_fail(d, KT_ENOMEM, "out of memory");
      d->prev_key = k;
      d->prev_cap = r.key.n;
    }
    memcpy(d->prev_key, r.key.p, r.key.n);
    d->prev_n = r.key.n;
  }
  d->have_prev = true;
  d->prev_rev = r.mod_revision;
  d->prev_sub = r.mod_sub;
  d->prev_tomb = r.tombstone;
  d->records++;
  if (d->fn) {
    int rc = d->fn(d->arg, &r);
    if (rc)
      return kt_err_set(d->err, rc, "%s: record callback failed (%s)", d->name, kt_strerror(rc));
  }
  return 0;
}

static int dec_block(struct dec *d) {
  int rc = 0;
  uint64_t boff = d->off - 1;
  const uint8_t *p = need(d, 12, "block header", &rc);
  if (!p)
    return rc;
  uint8_t hdr[13];
  hdr[0] = 'B';
  memcpy(hdr + 1, p, 12);
  uint32_t raw_len = kt_get_u32be(p), comp_len = kt_get_u32be(p + 4), nrec = kt_get_u32be(p + 8);
  if (raw_len < 1 || raw_len > KT_SNAP_MAX_BLOCK_RAW)
    return CORRUPT(d, "block at offset %llu: bad raw length %u", (unsigned long long)boff, raw_len);
  if (comp_len < 1 || comp_len > (uint32_t)LZ4_COMPRESSBOUND(raw_len) ||
      (uint64_t)raw_len > (uint64_t)comp_len * 256 + 1024)
    return CORRUPT(d, "block at offset %llu: bad compressed length %u for raw length %u",
                   (unsigned long long)boff, comp_len, raw_len);
  if (nrec < 1 || nrec > raw_len)
    return CORRUPT(d, "block at offset %llu: bad record count %u", (unsigned long long)boff, nrec);
  p = need(d, comp_len, "block data", &rc);
  if (!p)
    return rc;
  crypto_generichash_update(&d->h, hdr, 13);
  crypto_generichash_update(&d->h, p, comp_len);
  if (d->raw_cap < raw_len) {
    free(d->raw);
    d->raw = malloc(raw_len);
    d->raw_cap = d->raw ? raw_len : 0;
    if (!d->raw)
      return dec_fail(d, KT_ENOMEM, "out of memory for a block of %u bytes", raw_len);
  }
  int got = LZ4_decompress_safe((const char *)p, (char *)d->raw, (int)comp_len, (int)raw_len);
  if (got != (int)raw_len)
    return CORRUPT(d, "block at offset %llu: lz4 data is corrupt", (unsigned long long)boff);
  struct cur c = {d->raw, d->raw + raw_len};
  for (uint32_t i = 0; i < nrec; i++) {
    if (c.p >= c.end)
      return CORRUPT(d, "block at offset %llu: %u records announced, %u found",
                     (unsigned long long)boff, nrec, i);
    if ((rc = dec_record(d, &c, boff, i)) != 0)
      return rc;
  }
  if (c.p != c.end)
    return CORRUPT(d, "block at offset %llu: %zu bytes after the last record",
                   (unsigned long long)boff, (size_t)(c.end - c.p));
  d->blocks++;
  d->raw_bytes += raw_len;
  return 0;
}

static int dec_trailer(struct dec *d) {
  int rc = 0;
  uint64_t toff = d->off - 1;
  const uint8_t *p = need(d, 32 + KT_SNAP_HASH_BYTES, "trailer", &rc);
  if (!p)
    return rc;
  uint8_t tag = 'E';
  crypto_generichash_update(&d->h, &tag, 1);
  crypto_generichash_update(&d->h, p, 32);
  uint8_t hash[KT_SNAP_HASH_BYTES];
  crypto_generichash_final(&d->h, hash, sizeof hash);
  if (sodium_memcmp(hash, p + 32, KT_SNAP_HASH_BYTES) != 0)
    return CORRUPT(d, "hash mismatch: the BLAKE2b hash at offset %llu does not match the file",
                   (unsigned long long)toff + 33);
  struct kt_snap_meta *m = d->m;
  memcpy(m->hash, hash, sizeof hash);
  m->record_count = kt_get_u64be(p);
  m->block_count = kt_get_u64be(p + 8);
  m->live_keys = kt_get_u64be(p + 16);
  m->raw_bytes = kt_get_u64be(p + 24);
  uint64_t live = d->live + (d->have_prev && !d->prev_tomb);
  if (m->record_count != d->records || m->block_count != d->blocks || m->live_keys != live ||
      m->raw_bytes != d->raw_bytes)
    return CORRUPT(d,
                   "trailer at offset %llu does not match the body (records %llu/%llu, "
                   "blocks %llu/%llu, live keys %llu/%llu)",
                   (unsigned long long)toff, (unsigned long long)m->record_count,
                   (unsigned long long)d->records, (unsigned long long)m->block_count,
                   (unsigned long long)d->blocks, (unsigned long long)m->live_keys,
                   (unsigned long long)live);
  size_t got = 0;
  uint64_t end = d->off;
  if (!d->s->need(d->s, 1, &got))
    return dec_fail(d, KT_EIO, "read: %s", strerror(errno));
  if (got)
    return CORRUPT(d, "bytes after the trailer at offset %llu", (unsigned long long)end);
  m->file_bytes = end;
  return 0;
}

static int decode(struct src *s, const char *name, kt_snap_rec_fn fn, void *arg,
                  struct kt_snap_meta *meta, struct kt_err *err) {
  struct kt_snap_meta local;
  if (!meta)
    meta = &local;
  memset(meta, 0, sizeof *meta);
  if (sodium_init() < 0)
    return kt_err_set(err, KT_EINTERNAL, "libsodium init failed");
  struct dec d = {.s = s, .name = name, .fn = fn, .arg = arg, .m = meta, .err = err};
  crypto_generichash_init(&d.h, NULL, 0, KT_SNAP_HASH_BYTES);
  int rc = dec_header(&d);
  while (rc == 0) {
    const uint8_t *t = need(&d, 1, "trailer", &rc);
    if (!t)
      break;
    if (*t == 'B') {
      rc = dec_block(&d);
    } else if (*t == 'E') {
      rc = dec_trailer(&d);
      break;
    } else {
      rc =
          CORRUPT(&d, "unknown block tag 0x%02x at offset %llu", *t, (unsigned long long)d.off - 1);
    }
  }
  free(d.raw);
  free(d.prev_key);
  if (meta == &local)
    kt_snap_meta_free(&local);
  return rc;
}

/* The etcd envelope (snap.h): given a file's size and its last
 * KT_SNAP_ENV_TAIL bytes, the length of the snapshot inside, or `size` when
 * it is not an envelope (then the decoder judges the bytes as they are).
 * The caller then checks that the bytes in [len, size - KT_SNAP_ENV_TAIL)
 * (fewer than 512) are zero. */
static size_t envelope_len(size_t size, const uint8_t *tail) {
  if (size < 512 + 32 || size % 512 != 32 || memcmp(tail, KT_SNAP_ENV_MAGIC, 8) != 0)
    return size;
  uint64_t len = kt_get_u64be(tail + 8);
  if (len > size || kt_snap_env_size(len) != size)
    return size;
  return (size_t)len;
}

static bool all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

static size_t envelope_inner_mem(const uint8_t *p, size_t size) {
  if (size < KT_SNAP_ENV_TAIL)
    return size;
  size_t len = envelope_len(size, p + size - KT_SNAP_ENV_TAIL);
  return len != size && all_zero(p + len, size - KT_SNAP_ENV_TAIL - len) ? len : size;
}

static size_t envelope_inner(int fd, size_t size) {
  uint8_t tail[KT_SNAP_ENV_TAIL], zeros[512];
  if (size < KT_SNAP_ENV_TAIL ||
      pread(fd, tail, sizeof tail, (off_t)(size - sizeof tail)) != (ssize_t)sizeof tail)
    return size;
  size_t len = envelope_len(size, tail);
  size_t pad = size - KT_SNAP_ENV_TAIL - len; /* < 512 by the size rule */
  if (len == size || pread(fd, zeros, pad, (off_t)len) != (ssize_t)pad || !all_zero(zeros, pad))
    return size;
  return len;
}

int kt_snap_load_mem(const uint8_t *p, size_t n, const char *name, kt_snap_rec_fn fn, void *arg,
                     struct kt_snap_meta *meta, struct kt_err *err) {
  struct src s = {.need = mem_need, .p = p, .n = envelope_inner_mem(p, n), .fd = -1};
  return decode(&s, name, fn, arg, meta, err);
}

int kt_snap_load(const char *path, kt_snap_rec_fn fn, void *arg, struct kt_snap_meta *meta,
                 struct kt_err *err) {
  if (meta)
    memset(meta, 0, sizeof *meta);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return kt_err_set(err, errno == ENOENT ? KT_ENOTFOUND : KT_EIO, "%s: open: %s", path,
                      strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = kt_err_set(err, KT_EIO, "%s: stat: %s", path, strerror(errno));
    close(fd);
    return rc;
  }
  struct src s = {.need = file_need, .fd = fd, .n = (size_t)st.st_size};
  s.n = envelope_inner(fd, s.n);
  int rc = decode(&s, path, fn, arg, meta, err);
  free(s.buf);
  close(fd);
  return rc;
}

int kt_snap_verify(const char *path, struct kt_snap_meta *meta, struct kt_err *err) {
  return kt_snap_load(path, NULL, NULL, meta, err);
}
