/* tools/bench/hist.c — the latency histogram (see bench.h for its error bound).
 * Bucket index of v (ns): v < 2^SUB_BITS: v itself; else with m = msb(v) and
 * e = m - (SUB_BITS - 1) >= 1: 2^SUB_BITS + (e - 1) * HALF + (v >> e) - HALF.
 * Bucket [lo, lo + 2^e) with lo = (v >> e) << e; reported as its midpoint. */
#include <math.h>
#include <string.h>

#include "bench.h"

void hist_reset(struct hist *h) { memset(h, 0, sizeof *h); }

static int index_of(uint64_t v) {
  if (v < (1u << HIST_SUB_BITS))
    return (int)v;
  if (v >= (1ull << HIST_MAX_EXP))
    v = (1ull << HIST_MAX_EXP) - 1;
  int m = 63 - __builtin_clzll(v);
  int e = m - (HIST_SUB_BITS - 1);
  return (1 << HIST_SUB_BITS) + (e - 1) * HIST_HALF + (int)(v >> e) - HIST_HALF;
}

static double midpoint(int idx) {
  if (idx < (1 << HIST_SUB_BITS))
    return idx;
  int e = (idx - (1 << HIST_SUB_BITS)) / HIST_HALF + 1;
  uint64_t sub = (uint64_t)((idx - (1 << HIST_SUB_BITS)) % HIST_HALF + HIST_HALF);
  double lo = (double)(sub << e), width = (double)(1ull << e);
  return lo + (width - 1) / 2;
}

void hist_add(struct hist *h, uint64_t ns) {
  h->b[index_of(ns)]++;
  if (!h->n || ns < h->min_ns)
    h->min_ns = ns;
  if (ns > h->max_ns)
    h->max_ns = ns;
  h->n++;
  h->sum += (double)ns;
  h->sumsq += (double)ns * (double)ns;
}

void hist_merge(struct hist *into, const struct hist *from) {
  if (!from->n)
    return;
  for (int i = 0; i < HIST_BUCKETS; i++)
    into->b[i] += from->b[i];
  if (!into->n || from->min_ns < into->min_ns)
    into->min_ns = from->min_ns;
  if (from->max_ns > into->max_ns)
    into->max_ns = from->max_ns;
  into->n += from->n;
  into->sum += from->sum;
  into->sumsq += from->sumsq;
}

double hist_pct(const struct hist *h, double p) {
  if (!h->n)
    return 0;
  uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->n);
  if (rank < 1)
    rank = 1;
  if (rank >= h->n)
    return (double)h->max_ns;
  uint64_t seen = 0;
  for (int i = 0; i < HIST_BUCKETS; i++) {
    seen += h->b[i];
    if (seen >= rank) {
      double v = midpoint(i);
      if (v < (double)h->min_ns)
        v = (double)h->min_ns;
      if (v > (double)h->max_ns)
        v = (double)h->max_ns;
      return v;
    }
  }
  return (double)h->max_ns;
}

double hist_mean(const struct hist *h) { return h->n ? h->sum / (double)h->n : 0; }

double hist_stddev(const struct hist *h) {
  if (!h->n)
    return 0;
  double m = hist_mean(h);
  return sqrt(fmax(0, h->sumsq / (double)h->n - m * m));
}
