/* test/fuzz/wal_record_fuzz.c — arbitrary bytes through the WAL's pure
 * decoders: as a whole segment file image (kt_wal_scan_segment: header,
 * records, torn/corrupt classification and the hunt for valid data after a
 * bad record), as a single record chained to a checksum taken from the input,
 * and as a segment file name. Must never crash or read out of bounds; checks
 * a few properties of what it accepts. */
#include "../../wal/wal.h"

#include <stdlib.h>
#include <string.h>

struct acc {
  uint64_t n;
  uint32_t prev;
  const uint8_t *lo, *hi;
};

static int on_rec(void *arg, const struct kt_wal_rec *r) {
  struct acc *a = arg;
  /* every delivered record chains to the one before and lies in the input */
  if (a->n && r->prev_crc != a->prev)
    abort();
  if (r->type == 0 || r->payload < a->lo || r->payload + r->len > a->hi)
    abort();
  a->prev = r->crc;
  a->n++;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* 1. a segment image; copy so ASan sees the exact bounds */
  uint8_t *buf = malloc(size ? size : 1);
  if (size)
    memcpy(buf, data, size);
  struct acc a = {0, 0, buf, buf + size};
  struct kt_wal_scan s;
  kt_wal_scan_segment(buf, size, &s, on_rec, &a);
  if (a.n != s.records || s.end_off > size)
    abort();
  if (s.status == KT_WAL_SCAN_CORRUPT && (s.next_off <= s.bad_off || s.next_off >= size))
    abort();

  /* 2. one record; the first 4 bytes are the previous checksum */
  if (size >= 4) {
    uint32_t prev = kt_get_u32be(buf);
    struct kt_wal_rec r;
    size_t n = 0;
    const char *why = NULL;
    int rc = kt_wal_decode_record(buf + 4, size - 4, prev, &r, &n, &why);
    if (rc == 0) {
      if (n > size - 4 || r.prev_crc != prev)
        abort();
      /* re-encoding gives the same bytes */
      uint8_t *re = malloc(n);
      kt_wal_encode_record(re, r.type, r.index, r.payload, r.len, prev);
      if (memcmp(re, buf + 4, n) != 0)
        abort();
      free(re);
    } else if (rc == KT_ECORRUPT && !why) {
      abort();
    }
  }

  /* 3. a file name */
  char name[64];
  size_t k = size < sizeof name - 1 ? size : sizeof name - 1;
  memcpy(name, data, k);
  name[k] = 0;
  uint64_t seq, fi;
  kt_wal_parse_name(name, &seq, &fi);
  free(buf);
  return 0;
}
