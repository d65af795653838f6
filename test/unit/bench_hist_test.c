/* test/unit/bench_hist_test.c — ketch-bench's latency histogram against known
 * distributions: every percentile within the stated relative error
 * (HIST_REL_ERROR) of the exact order statistic, min/max exact, merge. */
#include <math.h>
#include <stdlib.h>

#include "../../tools/bench/hist.c"
#include "test.h"

static struct hist h, h2;

/* |got - want| <= rel * want (plus 1 ns for the exact low range) */
static int close_to(double got, double want, double rel) {
  return fabs(got - want) <= rel * want + 1;
}

TEST(hist_uniform_us) {
  /* uniform 1..1000 µs, each value once: the p-th percentile is p * 10 µs */
  hist_reset(&h);
  for (uint64_t us = 1; us <= 1000; us++)
    hist_add(&h, us * 1000);
  CHECK_EQ(h.n, 1000);
  CHECK_EQ(h.min_ns, 1000);
  CHECK_EQ(h.max_ns, 1000000);
  static const double ps[] = {1, 10, 25, 50, 75, 90, 99, 99.9};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    double want = ceil(ps[i] * 10) * 1000; /* rank ceil(p/100 * n) */
    double got = hist_pct(&h, ps[i]);
    if (!close_to(got, want, HIST_REL_ERROR)) {
      kt_test_fail(__FILE__, __LINE__, "p%g: got %.0f ns, want %.0f ns +- %.2f%%", ps[i], got, want,
                   HIST_REL_ERROR * 100);
      return;
    }
  }
  CHECK(hist_pct(&h, 100) == 1000000);
  CHECK(close_to(hist_mean(&h), 500500, 1e-9));
}

TEST(hist_wide_range_error_bound) {
  /* every value from 1 ns to ~17 min on a geometric grid, alone: the
   * reported median must be within the bound of the value itself */
  for (double v = 1; v < 1e12; v *= 1.37) {
    hist_reset(&h);
    hist_add(&h, (uint64_t)v);
    hist_add(&h, (uint64_t)v);
    hist_add(&h, (uint64_t)v);
    double got = hist_pct(&h, 50);
    if (!close_to(got, (double)(uint64_t)v, HIST_REL_ERROR)) {
      kt_test_fail(__FILE__, __LINE__, "value %.0f reported as %.0f", v, got);
      return;
    }
  }
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

TEST(hist_random_exponential_and_merge) {
  /* 200k exponential samples (mean 2 ms) split across two histograms, merged;
   * compare with the exact order statistics of the sorted samples */
  enum { N = 200000 };
  uint64_t *v = malloc(N * sizeof *v);
  CHECK(v != NULL);
  uint64_t x = 88172645463325252ull;
  hist_reset(&h);
  hist_reset(&h2);
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
    v[i] = (uint64_t)(-log(u) * 2e6) + 1;
    hist_add(i % 2 ? &h : &h2, v[i]);
  }
  hist_merge(&h, &h2);
  CHECK_EQ(h.n, N);
  qsort(v, N, sizeof *v, cmp);
  static const double ps[] = {50, 90, 99, 99.9};
  for (size_t i = 0; i < 4; i++) {
    double want = (double)v[(size_t)ceil(ps[i] / 100 * N) - 1];
    double got = hist_pct(&h, ps[i]);
    if (!close_to(got, want, HIST_REL_ERROR)) {
      kt_test_fail(__FILE__, __LINE__, "p%g: got %.0f want %.0f", ps[i], got, want);
      free(v);
      return;
    }
  }
  CHECK(h.max_ns == v[N - 1]);
  CHECK(h.min_ns == v[0]);
  free(v);
}

TEST(hist_empty_and_huge) {
  hist_reset(&h);
  CHECK(hist_pct(&h, 50) == 0);
  hist_add(&h, UINT64_MAX / 2); /* clamped into the top bucket, max exact */
  CHECK(h.max_ns == UINT64_MAX / 2);
  CHECK(hist_pct(&h, 100) == (double)(UINT64_MAX / 2));
}
