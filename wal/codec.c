/* wal/codec.c — pure encode/decode of segment headers and records, and the
 * segment scanner that classifies a segment's end (clean / torn / corrupt).
 * No I/O; every read is bounds-checked against the caller's buffer. The
 * format and the validity rule are in wal/FORMAT.md. */
#include "wal.h"

#include <string.h>

static uint32_t seghdr_crc(const uint8_t *b) { return kt_crc32c(0, b, 36); }

void kt_wal_write_seghdr(const struct kt_wal_seghdr *h, uint8_t *out) {
  memcpy(out, KT_WAL_MAGIC, 8);
  kt_put_u32be(out + 8, KT_WAL_VERSION);
  kt_put_u32be(out + 12, 0); /* prev_crc and crc: kt_wal_seal_seghdr's */
  kt_put_u64be(out + 16, h->seq);
  kt_put_u64be(out + 24, h->first_index);
  kt_put_u32be(out + 32, h->segment_bytes);
  kt_put_u32be(out + 36, 0);
}

void kt_wal_encode_seghdr(struct kt_wal_seghdr *h, uint8_t *out) {
  kt_wal_write_seghdr(h, out);
  h->crc = kt_wal_seal_seghdr(out, h->prev_crc);
}

uint32_t kt_wal_seal_seghdr(uint8_t *hdr, uint32_t prev_crc) {
  kt_put_u32be(hdr + 12, prev_crc);
  uint32_t crc = seghdr_crc(hdr);
  kt_put_u32be(hdr + 36, crc);
  return crc;
}

int kt_wal_decode_seghdr(const uint8_t *buf, size_t len, struct kt_wal_seghdr *h,
                         const char **why) {
  if (len < KT_WAL_SEG_HDR_BYTES)
    return *why = "segment header truncated", KT_ECORRUPT;
  if (memcmp(buf, KT_WAL_MAGIC, 8) != 0)
    return *why = "bad segment magic", KT_ECORRUPT;
  if (kt_get_u32be(buf + 8) != KT_WAL_VERSION)
    return *why = "unsupported segment version", KT_ECORRUPT;
  if (kt_get_u32be(buf + 36) != seghdr_crc(buf))
    return *why = "segment header checksum mismatch", KT_ECORRUPT;
  h->prev_crc = kt_get_u32be(buf + 12);
  h->seq = kt_get_u64be(buf + 16);
  h->first_index = kt_get_u64be(buf + 24);
  h->segment_bytes = kt_get_u32be(buf + 32);
  h->crc = kt_get_u32be(buf + 36);
  return 0;
}

static uint32_t record_crc(const uint8_t *hdr, const uint8_t *payload, uint32_t len) {
  uint32_t c = kt_crc32c(0, hdr, 4);
  c = kt_crc32c(c, hdr + 8, 16);
  return kt_crc32c(c, payload, len);
}

void kt_wal_write_record(uint8_t *out, uint8_t type, uint64_t index, const void *payload,
                         uint32_t len) {
  kt_assert(type != 0 && len <= KT_WAL_MAX_PAYLOAD);
  kt_put_u32be(out, len);
  kt_put_u32be(out + 4, 0); /* crc and prev_crc: kt_wal_seal_record's */
  kt_put_u64be(out + 8, index);
  out[16] = type;
  out[17] = out[18] = out[19] = 0;
  kt_put_u32be(out + 20, 0);
  if (len)
    memcpy(out + KT_WAL_REC_HDR_BYTES, payload, len);
  size_t total = (size_t)kt_wal_record_bytes(len);
  memset(out + KT_WAL_REC_HDR_BYTES + len, 0, total - KT_WAL_REC_HDR_BYTES - len);
}

uint32_t kt_wal_seal_record(uint8_t *rec, uint32_t prev_crc) {
  kt_put_u32be(rec + 20, prev_crc);
  uint32_t crc = record_crc(rec, rec + KT_WAL_REC_HDR_BYTES, kt_get_u32be(rec));
  kt_put_u32be(rec + 4, crc);
  return crc;
}

uint32_t kt_wal_encode_record(uint8_t *out, uint8_t type, uint64_t index, const void *payload,
                              uint32_t len, uint32_t prev_crc) {
  kt_wal_write_record(out, type, index, payload, len);
  return kt_wal_seal_record(out, prev_crc);
}

static bool all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

/* check_chain = false: "self-consistent" (everything but the chain link). */
static int decode(const uint8_t *buf, size_t len, bool check_chain, uint32_t prev_crc,
                  struct kt_wal_rec *rec, size_t *size, const char **why) {
  if (len < KT_WAL_REC_HDR_BYTES) {
    if (all_zero(buf, len))
      return KT_ENOTFOUND;
    return *why = "record header truncated", KT_ECORRUPT;
  }
  if (all_zero(buf, KT_WAL_REC_HDR_BYTES))
    return KT_ENOTFOUND;
  uint32_t n = kt_get_u32be(buf);
  if (buf[16] == 0)
    return *why = "record type 0", KT_ECORRUPT;
  if (buf[17] | buf[18] | buf[19])
    return *why = "reserved header bytes not zero", KT_ECORRUPT;
  if (n > KT_WAL_MAX_PAYLOAD)
    return *why = "record length too large", KT_ECORRUPT;
  uint64_t total = kt_wal_record_bytes(n);
  if (total > len)
    return *why = "record extends past the end of the file", KT_ECORRUPT;
  const uint8_t *payload = buf + KT_WAL_REC_HDR_BYTES;
  if (!all_zero(payload + n, (size_t)total - KT_WAL_REC_HDR_BYTES - n))
    return *why = "record padding not zero", KT_ECORRUPT;
  uint32_t crc = kt_get_u32be(buf + 4);
  if (crc != record_crc(buf, payload, n))
    return *why = "record checksum mismatch", KT_ECORRUPT;
  uint32_t prev = kt_get_u32be(buf + 20);
  if (check_chain && prev != prev_crc)
    return *why = "record does not chain to the previous checksum", KT_ECORRUPT;
  rec->type = buf[16];
  rec->index = kt_get_u64be(buf + 8);
  rec->payload = payload;
  rec->len = n;
  rec->crc = crc;
  rec->prev_crc = prev;
  *size = (size_t)total;
  return 0;
}

int kt_wal_decode_record(const uint8_t *buf, size_t len, uint32_t prev_crc, struct kt_wal_rec *rec,
                         size_t *size, const char **why) {
  return decode(buf, len, true, prev_crc, rec, size, why);
}

/* Cheap structural test before computing a checksum while hunting for valid
 * data after a bad record. */
static bool plausible(const uint8_t *p, size_t avail) {
  if (avail < KT_WAL_REC_HDR_BYTES || p[16] == 0 || (p[17] | p[18] | p[19]))
    return false;
  uint32_t n = kt_get_u32be(p);
  return n <= KT_WAL_MAX_PAYLOAD && kt_wal_record_bytes(n) <= avail;
}

int kt_wal_scan_segment(const uint8_t *buf, size_t len, struct kt_wal_scan *s, kt_wal_record_fn fn,
                        void *arg) {
  memset(s, 0, sizeof *s);
  size_t dirty = len;
  while (dirty >= 8) {
    uint64_t w8;
    memcpy(&w8, buf + dirty - 8, 8);
    if (w8)
      break;
    dirty -= 8;
  }
  while (dirty > 0 && buf[dirty - 1] == 0)
    dirty--;
  s->dirty_end = dirty;
  if (kt_wal_decode_seghdr(buf, len, &s->hdr, &s->why) != 0) {
    s->status = KT_WAL_SCAN_BADHDR;
    return 0;
  }
  size_t off = KT_WAL_SEG_HDR_BYTES;
  uint32_t prev = s->hdr.crc;
  for (;;) {
    struct kt_wal_rec rec;
    size_t size = 0;
    const char *why = NULL;
    int r = decode(buf + off, len - off, true, prev, &rec, &size, &why);
    if (r == 0) {
      if (fn) {
        int rc = fn(arg, &rec);
        if (rc) {
          s->end_off = off;
          s->last_crc = prev;
          return rc;
        }
      }
      prev = rec.crc;
      off += size;
      s->records++;
      continue;
    }
    s->end_off = off;
    s->last_crc = prev;
    if (r == KT_ENOTFOUND) {
      if (dirty <= off) {
        s->status = KT_WAL_SCAN_CLEAN;
        return 0;
      }
      why = "non-zero bytes after the end of the records";
    }
    s->bad_off = off;
    s->why = why;
    s->status = KT_WAL_SCAN_TORN;
    /* Is any self-consistent record after it? Records are 8-aligned. The
     * bytes checksummed while hunting are bounded (hostile input could make
     * every offset a plausible header over a long payload); past the budget
     * the answer is "maybe", and maybe counts as corrupt. */
    uint64_t budget = 4 * (uint64_t)len + (1u << 20);
    for (size_t y = off + KT_WAL_ALIGN; y + KT_WAL_REC_HDR_BYTES <= dirty;) {
      if (!plausible(buf + y, len - y)) {
        y += KT_WAL_ALIGN;
        continue;
      }
      uint64_t cost = kt_wal_record_bytes(kt_get_u32be(buf + y));
      if (cost > budget) {
        if (s->status != KT_WAL_SCAN_CORRUPT) {
          s->status = KT_WAL_SCAN_CORRUPT;
          s->next_off = y;
          s->why = "too many candidate records after an invalid one to tell a torn tail";
        }
        break;
      }
      budget -= cost;
      if (decode(buf + y, len - y, false, 0, &rec, &size, &why) == 0) {
        if (s->status != KT_WAL_SCAN_CORRUPT) {
          s->status = KT_WAL_SCAN_CORRUPT;
          s->next_off = y;
        }
        s->records_after++;
        y += size;
      } else {
        y += KT_WAL_ALIGN;
      }
    }
    return 0;
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

int kt_wal_parse_name(const char *name, uint64_t *seq, uint64_t *first_index) {
  if (strlen(name) != 37 || name[16] != '-' || strcmp(name + 33, ".wal") != 0)
    return 0;
  uint64_t v[2] = {0, 0};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 16; i++) {
      int h = hexval(name[k * 17 + i]);
      if (h < 0)
        return 0;
      v[k] = (v[k] << 4) | (uint64_t)h;
    }
  *seq = v[0];
  *first_index = v[1];
  return 1;
}
