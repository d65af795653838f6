/* test/perf/snap_perf.c — snapshot write and load speed, by hand:
 *   make perf && build/perf/snap_perf [DIR] [RECORDS]
 * Writes RECORDS (default 1M) kvrev records (16-byte keys, 256-byte values,
 * 1 in 8 with a second revision) the way the node does: on the "loop
 * thread" in slices of 10k adds, each started only when
 * kt_snap_writer_can_add says so (else it waits for the writer's notify). Reports MB/s of raw
 * msgpack (before compression), the longest and p99 slice, then load and verify speed. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../snap/snap.h"

static sem_t notified;
static void on_notify(void *arg) {
  (void)arg;
  sem_post(&notified);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) { /* this thread's CPU time: work without preemption */
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t sink;
static int count_rec(void *arg, const struct kt_kvrev *r) {
  (void)arg;
  sink += r->key.n + r->value.n;
  return 0;
}

static int no_fsync(void *ctx, int fd) {
  (void)ctx;
  (void)fd;
  return 0;
}
static int no_fsync_dir(void *ctx, const char *dir) {
  (void)ctx;
  (void)dir;
  return 0;
}

static uint8_t *pool;
static size_t pool_n = 1 << 20;
static int write_once(const char *dir, uint64_t n, bool durable, char *path, size_t path_n,
                      double *raw_mb_out);

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
  sem_init(&notified, 0, 0);
  /* Values come from a 1 MiB random pool at varying offsets: realistic
   * entropy without 256 MB of test data. */
  pool = malloc(pool_n + 256);
  struct kt_rng rng;
  kt_rng_seed(&rng, 1);
  for (size_t i = 0; i < pool_n + 256; i += 8) {
    uint64_t x = kt_rng_next(&rng);
    memcpy(pool + i, &x, 8);
  }
  const char *shape = getenv("KT_PERF_VALUES"); /* "json": repetitive values */
  for (size_t i = 0; i < pool_n + 256; i++)     /* halve the entropy: text-like values */
    pool[i] = (uint8_t)('a' + (pool[i] & 15));
  if (shape && !strcmp(shape, "json"))
    for (size_t i = 0; i + 64 <= pool_n + 256; i += 64)
      memcpy(pool + i, "{\"name\":\"service-a\",\"addr\":\"10.0.0.1:2379\",\"ttl\":30,\"v\":", 56);
  char path[4096];
  double raw_mb, t0, t1;
  struct kt_err err;
  printf("-- fsync skipped (CPU pipeline: encode, lz4, BLAKE2b, write to page cache)\n");
  if (write_once(dir, n, false, path, sizeof path, &raw_mb))
    return 1;
  remove(path);
  printf("-- durable (fsync file and dir)\n");
  if (write_once(dir, n, true, path, sizeof path, &raw_mb))
    return 1;

  t0 = now_s();
  struct kt_snap_meta m;
  if (kt_snap_load(path, count_rec, NULL, &m, &err)) {
    fprintf(stderr, "load: %s\n", err.msg);
    return 1;
  }
  t1 = now_s();
  printf("load: %.3f s, %.0f MB/s raw, %.0f records/s\n", t1 - t0, raw_mb / (t1 - t0),
         (double)m.record_count / (t1 - t0));
  kt_snap_meta_free(&m);
  t0 = now_s();
  if (kt_snap_verify(path, &m, &err)) {
    fprintf(stderr, "verify: %s\n", err.msg);
    return 1;
  }
  t1 = now_s();
  printf("verify: %.3f s, %.0f MB/s raw\n", t1 - t0, raw_mb / (t1 - t0));
  kt_snap_meta_free(&m);
  remove(path);
  free(pool);
  return 0;
}

static int write_once(const char *dir, uint64_t n, bool durable, char *path, size_t path_n,
                      double *raw_mb_out) {
  struct kt_snap_meta meta = {.term = 3, .index = n, .revision = (int64_t)n * 2 + 10};
  snprintf(meta.creator, sizeof meta.creator, "snap_perf");
  struct kt_snap_fileops ops = kt_snap_fileops_posix;
  if (!durable) {
    ops.fsync = no_fsync;
    ops.fsync_dir = no_fsync_dir;
  }
  struct kt_snap_writer_opts opts = {.notify = on_notify, .ops = &ops};
  struct kt_snap_writer *w;
  struct kt_err err;
  double t0 = now_s();
  if (kt_snap_writer_open(dir, &meta, &opts, &w, &err)) {
    fprintf(stderr, "open: %s\n", err.msg);
    return 1;
  }
  size_t max_slices = (size_t)(n / 100 + 1000), n_slices = 0;
  double *slice_s = malloc(max_slices * sizeof *slice_s);
  double *slice_cpu = malloc(max_slices * sizeof *slice_cpu);
  uint64_t i = 0, k = 0, waits = 0;
  int j = 0;
  uint8_t key[17];
  while (i < n) {
    if (!kt_snap_writer_can_add(w)) {
      if (kt_snap_writer_poll(w, NULL, &err) != KT_SNAP_RUNNING) {
        fprintf(stderr, "write: %s\n", err.msg);
        return 1;
      }
      waits++;
      sem_wait(&notified);
      continue;
    }
    double s0 = now_s(), c0 = cpu_s();
    int rc = 0;
    for (int m = 0; m < 10000 && i < n; m++) {
      snprintf((char *)key, sizeof key, "k%015llu", (unsigned long long)k);
      int nrev = k % 8 == 0 ? 2 : 1;
      struct kt_kvrev r = {
          .key = {key, 16},
          .value = {pool + (k * 4099 + (uint64_t)j * 97) % pool_n, 256},
          .create_revision = (int64_t)k * 2 + 1,
          .mod_revision = (int64_t)k * 2 + 1 + j,
          .version = j + 1,
      };
      if ((rc = kt_snap_writer_add(w, &r)) != 0)
        break;
      i++;
      if (++j == nrev) {
        j = 0;
        k++;
      }
    }
    if (n_slices < max_slices) {
      slice_cpu[n_slices] = cpu_s() - c0;
      slice_s[n_slices++] = now_s() - s0;
    }
    if (rc) {
      fprintf(stderr, "add: %s\n", kt_strerror(rc));
      return 1;
    }
  }
  double add_done = now_s();
  kt_snap_writer_finish(w);
  struct kt_snap_meta done;
  enum kt_snap_state st;
  while ((st = kt_snap_writer_poll(w, &done, &err)) == KT_SNAP_RUNNING)
    sem_wait(&notified);
  double t1 = now_s();
  if (st != KT_SNAP_DONE) {
    fprintf(stderr, "write: %s\n", err.msg);
    return 1;
  }
  snprintf(path, path_n, "%s", kt_snap_writer_path(w));
  kt_snap_writer_free(w);
  double slices_total = 0;
  for (size_t q = 0; q < n_slices; q++)
    slices_total += slice_s[q];
  qsort(slice_s, n_slices, sizeof *slice_s, cmp_double);
  qsort(slice_cpu, n_slices, sizeof *slice_cpu, cmp_double);
  double raw_mb = (double)done.raw_bytes / 1e6;
  printf("write: %llu records, %.1f MB raw msgpack -> %.1f MB file (%.2fx), %.3f s total "
         "(incl. fsync), %.0f MB/s raw\n",
         (unsigned long long)n, raw_mb, (double)done.file_bytes / 1e6,
         (double)done.raw_bytes / (double)done.file_bytes, t1 - t0, raw_mb / (t1 - t0));
  printf("loop thread: adds took %.3f s of which slices %.3f s; %zu slices of <=10k adds, "
         "%llu waits for room; slice p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
         add_done - t0, slices_total, n_slices, (unsigned long long)waits,
         slice_s[n_slices / 2] * 1e3, slice_s[n_slices * 99 / 100] * 1e3,
         slice_s[n_slices - 1] * 1e3);
  printf("loop thread CPU per slice (preemption excluded): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
         slice_cpu[n_slices / 2] * 1e3, slice_cpu[n_slices * 99 / 100] * 1e3,
         slice_cpu[n_slices - 1] * 1e3);
  free(slice_s);
  free(slice_cpu);
  *raw_mb_out = raw_mb;
  return 0;
}
