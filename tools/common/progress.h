/* tools/common/progress.h — a one-line progress display for long operations
 * of the command line tools (snapshot save, snapshot restore): bytes done,
 * of how many when known, rate and time left, redrawn in place at most five
 * times a second on stderr — only when stderr is a terminal (and TERM is
 * not "dumb"); otherwise every call is a no-op, so scripts and logs stay
 * quiet. Header-only; one struct per operation, used from one thread. */
#ifndef KT_TOOLS_PROGRESS_H
#define KT_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct kt_progress {
  const char *what;
  uint64_t total; /* 0: unknown */
  double start, last;
  bool on;
};

static inline double kt_progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void kt_progress_init(struct kt_progress *p, const char *what, uint64_t total) {
  const char *term = getenv("TERM");
  p->what = what;
  p->total = total;
  p->start = kt_progress_now();
  p->last = 0;
  p->on = isatty(STDERR_FILENO) && !(term && !strcmp(term, "dumb"));
}

static inline void kt_progress_bytes(uint64_t b, char *out, size_t n) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, u++;
  snprintf(out, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static inline void kt_progress_draw(struct kt_progress *p, uint64_t done, bool final) {
  double now = kt_progress_now(), secs = now - p->start;
  char d[32], t[32], r[32], eta[32] = "";
  double rate = secs > 0 ? done / secs : 0;
  kt_progress_bytes(done, d, sizeof d);
  kt_progress_bytes((uint64_t)rate, r, sizeof r);
  if (p->total) {
    kt_progress_bytes(p->total, t, sizeof t);
    if (!final && rate > 0 && done < p->total)
      snprintf(eta, sizeof eta, ", %.0f s left", (double)(p->total - done) / rate);
    fprintf(stderr, "\r\033[K%s: %s of %s (%.0f%%), %s/s%s", p->what, d, t,
            100.0 * (double)done / (double)p->total, r, eta);
  } else {
    fprintf(stderr, "\r\033[K%s: %s, %s/s", p->what, d, r);
  }
  if (final)
    fprintf(stderr, " in %.1f s\n", secs);
  fflush(stderr);
  p->last = now;
}

/* done bytes so far (redrawn at most every 0.2 s). */
static inline void kt_progress_update(struct kt_progress *p, uint64_t done) {
  if (p->on && kt_progress_now() - p->last >= 0.2)
    kt_progress_draw(p, done, false);
}

/* The last line, with a newline (only if something was drawn or on a terminal). */
static inline void kt_progress_end(struct kt_progress *p, uint64_t done) {
  if (p->on)
    kt_progress_draw(p, done, true);
}

#endif
