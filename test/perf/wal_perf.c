/* test/perf/wal_perf.c — WAL throughput by hand: appends/s and fdatasyncs/s
 * for 256-byte records in batches of 1, 16, 64 and 256 (one flush per batch,
 * then wait for the sync thread's notify, as the node's loop does), plus the
 * loop-thread cost of kt_wal_append alone. Real files, real fdatasync.
 *   make perf && build/perf/wal_perf [DIR] [SECONDS_PER_CASE]   */
#include "../../wal/wal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned long notified;

static void notify(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  notified++;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  char dir[512];
  bool own = argc <= 1 || !argv[1][0];
  if (!own)
    snprintf(dir, sizeof dir, "%s", argv[1]);
  else {
    snprintf(dir, sizeof dir, "%s/kt-walperf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      return 1;
    }
  }
  double secs = argc > 2 ? atof(argv[2]) : 2.0;
  struct kt_wal_opts o = {.notify = notify, .first_index = 1};
  struct kt_wal *w;
  struct kt_err err = {0};
  if (kt_wal_open(dir, &o, NULL, NULL, &w, &err)) {
    fprintf(stderr, "open: %s\n", err.msg);
    return 1;
  }
  uint8_t rec[256];
  memset(rec, 0xab, sizeof rec);
  uint64_t index = 0;
  printf("wal_perf: dir=%s record=256B segment=64MiB\n", dir);
  printf("%-8s %12s %12s %12s\n", "batch", "appends/s", "fsyncs/s", "MB/s");
  static const int batches[] = {1, 16, 64, 256};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    int n = batches[b];
    uint64_t recs = 0, syncs = 0;
    double t0 = now_s(), t;
    do {
      for (int i = 0; i < n; i++)
        kt_wal_append(w, 1, ++index, rec, sizeof rec, NULL);
      pthread_mutex_lock(&mu);
      unsigned long seen = notified;
      pthread_mutex_unlock(&mu);
      kt_wal_flush(w);
      uint64_t d = 0, want = kt_wal_last_seq(w);
      while (d < want) {
        pthread_mutex_lock(&mu);
        while (notified == seen)
          pthread_cond_wait(&cv, &mu);
        seen = notified;
        pthread_mutex_unlock(&mu);
        if (kt_wal_poll(w, &d, &err)) {
          fprintf(stderr, "poll: %s\n", err.msg);
          return 1;
        }
      }
      recs += (uint64_t)n;
      syncs++;
      t = now_s() - t0;
    } while (t < secs);
    printf("%-8d %12.0f %12.0f %12.2f\n", n, (double)recs / t, (double)syncs / t,
           (double)recs * kt_wal_record_bytes(256) / t / 1e6);
    fflush(stdout);
  }
  /* loop-thread cost of append alone (no flush): encode + CRC32C + copy */
  {
    int n = 200000;
    double t0 = now_s();
    for (int i = 0; i < n; i++)
      kt_wal_append(w, 1, ++index, rec, sizeof rec, NULL);
    double t = now_s() - t0;
    printf("append only (loop thread): %.0f ns/record, %.0f appends/s\n", t / n * 1e9, n / t);
    kt_wal_sync(w, &err);
  }
  kt_wal_close(w);
  if (own) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", dir);
  }
  return 0;
}
