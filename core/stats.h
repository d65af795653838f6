/* core/stats.h — counters and histograms the member exports on /metrics.
 *
 * Pure: libc only. A histogram is owned by ONE thread that observes into it
 * (the state thread, or the WAL's sync thread under the WAL's own lock); it
 * is plain memory: no atomics, no locks, no formatting. The renderer
 * (core/node_metrics.c) reads it on the thread that owns it (or copies it
 * under the owner's lock) at scrape time.
 *
 * Buckets are exponential as Prometheus' ExponentialBuckets(start, 2, n),
 * the layouts etcd uses, so etcd's dashboards and alert rules apply:
 *   KT_HIST_FSYNC     0.001 * 2^k s, k = 0..13 (1 ms .. 8.192 s): WAL fsync,
 *                     backend commit (ketch: one apply batch)
 *   KT_HIST_SNAPSHOT  0.01 * 2^k s, k = 0..13 (10 ms .. 81.92 s)
 *   KT_HIST_BATCH     1 * 2^k entries, k = 0..13 (ketch's group commit)
 *   KT_HIST_RTT       0.0001 * 2^k s, k = 0..15 (100 us .. 3.2768 s): peer round trips
 * b[i] counts observations <= bound(i) and > bound(i-1); b[n] the rest (+Inf). */
#ifndef KT_STATS_H
#define KT_STATS_H

#include <stdint.h>

#define KT_HIST_MAX_BUCKETS 16

struct kt_hist {
  double start; /* first upper bound; bound(i) = start * 2^i */
  uint32_t n;   /* finite buckets, <= KT_HIST_MAX_BUCKETS */
  uint64_t b[KT_HIST_MAX_BUCKETS + 1];
  uint64_t count;
  double sum;
};

#define KT_HIST_FSYNC                                                                              \
  { .start = 0.001, .n = 14 }
#define KT_HIST_SNAPSHOT                                                                           \
  { .start = 0.01, .n = 14 }
#define KT_HIST_BATCH                                                                              \
  { .start = 1, .n = 14 }
#define KT_HIST_RTT                                                                                \
  { .start = 0.0001, .n = 16 }

static inline void kt_hist_observe(struct kt_hist *h, double v) {
  double bound = h->start;
  uint32_t i = 0;
  while (i < h->n && v > bound) {
    bound *= 2;
    i++;
  }
  h->b[i]++;
  h->count++;
  h->sum += v;
}

#endif
