/* test/perf/mvcc_perf.c — micro-benchmark of core/mvcc (run by hand).
 *
 *   build/perf/mvcc_perf [keys [decimal]]   (default 1000000; e.g. 10000000)
 *
 * 16-byte keys in scrambled order, 256-byte values. Prints put/s (new keys),
 * get/s (random single-key reads), overwrite put/s, time of a 1000-key range
 * scan, heap bytes per key beyond key+value (mallinfo2 delta), and the cost
 * of compaction steps of 1000 keys after every key got one overwrite. */
#include "../../core/mvcc.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool decimal_keys; /* ketch-bench's keys: "0000000000000042" */

static void mkkey(char *k, uint64_t i) { /* 16 bytes, scrambled order */
  uint64_t x = (i * 0x9E3779B97F4A7C15ull) & 0xFFFFFFFFFFFFull;
  char tmp[24];
  if (decimal_keys)
    snprintf(tmp, sizeof tmp, "%016llu", (unsigned long long)(x % 10000000000000000ull));
  else
    snprintf(tmp, sizeof tmp, "key-%012llx", (unsigned long long)x);
  memcpy(k, tmp, 16);
}

static size_t heap_used(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return rss * 4;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
  decimal_keys = argc > 2 && !strcmp(argv[2], "decimal");
  struct kt_mvcc_config cfg = {.quota_bytes = 1ull << 40};
  char key[16], val[256];
  memset(val, 'v', sizeof val);
  struct kt_arena a = {0};
  struct kt_err e;
  struct kt_response_op out;
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = (struct kt_bytes){(uint8_t *)key, 16};
  op.u.put.value = (struct kt_bytes){(uint8_t *)val, 256};

  size_t h0 = heap_used();
  long r0 = rss_kb();
  struct kt_mvcc *s = kt_mvcc_new(&cfg);
  double t = now_s();
  for (uint64_t i = 0; i < n; i++) {
    mkkey(key, i);
    if (kt_mvcc_apply(s, &op, &a, &out, &e) != 0) {
      fprintf(stderr, "put: %s\n", e.msg);
      return 1;
    }
    kt_arena_reset(&a);
  }
  double dt = now_s() - t;
  size_t h1 = heap_used();
  long r1 = rss_kb();
  printf("keys %llu: put (new keys) %.0f/s\n", (unsigned long long)n, (double)n / dt);
  printf("memory: heap %.1f B/key beyond key+value (index %.1f B/key), rss %.1f B/key total\n",
         ((double)(h1 - h0) - (double)n * (16 + 256)) / (double)n,
         (double)kt_mvcc_index_bytes(s) / (double)n, (double)(r1 - r0) * 1024.0 / (double)n);

  struct kt_range_req q = {.key = {(uint8_t *)key, 16}};
  struct kt_range_resp rr;
  uint64_t gets = n < 2000000 ? 2000000 : n;
  struct kt_rng rng;
  kt_rng_seed(&rng, 1);
  t = now_s();
  for (uint64_t i = 0; i < gets; i++) {
    mkkey(key, kt_rng_below(&rng, n));
    if (kt_mvcc_range(s, &q, &a, &rr, &e) != 0 || rr.n_kvs != 1) {
      fprintf(stderr, "get failed\n");
      return 1;
    }
    kt_arena_reset(&a);
  }
  dt = now_s() - t;
  printf("get (random key) %.0f/s\n", (double)gets / dt);

  /* range scans of ~1000 keys: keys are uniform over 48 bits, so
   * [x, x + 1000 * 2^48 / n) holds about 1000 keys */
  {
    char lo[17], hi[17];
    struct kt_range_req sq = {.key = {(uint8_t *)lo, 16}, .range_end = {(uint8_t *)hi, 16}};
    uint64_t span = (uint64_t)(1000.0 * 281474976710656.0 / (double)n);
    int scans = 2000;
    uint64_t total = 0;
    t = now_s();
    for (int i = 0; i < scans; i++) {
      uint64_t x = kt_rng_below(&rng, 0xFFFFFFFFFFFFull - span);
      snprintf(lo, sizeof lo, "key-%012llx", (unsigned long long)x);
      snprintf(hi, sizeof hi, "key-%012llx", (unsigned long long)(x + span));
      if (kt_mvcc_range(s, &sq, &a, &rr, &e) != 0) {
        fprintf(stderr, "scan failed\n");
        return 1;
      }
      total += rr.n_kvs;
      kt_arena_reset(&a);
    }
    dt = now_s() - t;
    printf("range scan of %.0f keys (avg): %.1f us (%.1f ns/key)\n", (double)total / scans,
           dt / scans * 1e6, dt / (double)total * 1e9);
  }

  /* overwrite every key once: history of one revision per key */
  t = now_s();
  for (uint64_t i = 0; i < n; i++) {
    mkkey(key, i);
    kt_mvcc_apply(s, &op, &a, &out, &e);
    kt_arena_reset(&a);
  }
  dt = now_s() - t;
  size_t h2 = heap_used();
  printf("put (overwrite, keeps history) %.0f/s; heap per extra revision %.1f B beyond value\n",
         (double)n / dt, ((double)(h2 - h1) - (double)n * 256) / (double)n);

  /* compaction at the current revision, in steps of 1000 keys */
  t = now_s();
  if (kt_mvcc_compact(s, kt_mvcc_revision(s), &e) != 0)
    return 1;
  double tc = now_s() - t, worst = 0;
  t = now_s();
  uint64_t steps = 0;
  for (;;) {
    double ts = now_s();
    bool more = kt_mvcc_compact_step(s, 1000);
    double d = now_s() - ts;
    if (d > worst)
      worst = d;
    steps++;
    if (!more)
      break;
  }
  dt = now_s() - t;
  printf("compact: mark %.1f us; %llu steps of 1000 keys, %.1f us/step avg, %.1f us worst, "
         "%.0f ns/key\n",
         tc * 1e6, (unsigned long long)steps, dt / (double)steps * 1e6, worst * 1e6,
         dt / (double)n * 1e9);
  printf("revisions in memory after compaction: %llu\n", (unsigned long long)kt_mvcc_revs(s));
  t = now_s();
  kt_mvcc_free(s);
  printf("free %.2f s\n", now_s() - t);
  kt_arena_free(&a);
  return 0;
}
