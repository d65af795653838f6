/* tools/bench/resources.c — the resource figures of `ketch-bench compare`
 * (--resource-keys N): what each server costs to hold N keys.
 *
 * For etcd, then ketch (one at a time, so neither shares the cores with the
 * other): a fresh 1-member server on a fresh data dir under the run's
 * directory; N puts of distinct 16-byte keys with 256-byte values (64
 * clients, 16 connections, closed loop) → load rate and the server's CPU
 * seconds per 100k puts; RSS once loaded; stop (SIGTERM) → data dir size;
 * start again on the same dir → seconds until a linearizable range is
 * answered (restart to serving) and RSS then; stop; the data dir is removed.
 *
 * Aims (the benchmark issue): RSS <= raw data + 64 bytes per key, restart
 * <= 1/9 of etcd's. Where ketch falls short the report says so.
 */
#include <stdio.h>
#include <string.h>

#include "servers.h"

#define RAW_KEY_BYTES 272.0 /* a 16-byte key and its 256-byte value */

static int measure(struct server *s, int t, long keys, struct resource_figures *f, char *err,
                   size_t err_len) {
  static char ic[128];
  snprintf(ic, sizeof ic, "r1=http://127.0.0.1:%d", s->peer);
  const char *who = target_name(t);
  server_start(s, t, "r1", ic);
  if (s->pid < 0 || !wait_ready(t, s->endpoint, s->pid, 60)) {
    snprintf(err, err_len, "%s did not start (see %s)", who, s->log);
    return -1;
  }
  struct bench_cfg c;
  load_cfg(&c, t, s->endpoint, keys);
  static struct bench_result r;
  char berr[256] = "";
  fprintf(stderr, "compare: resources: loading %ld keys into %s\n", keys, who);
  double cpu0 = cluster_cpu_s(s, 1);
  if (bench_run(&c, &r, berr, sizeof berr) || r.errors || r.ok != keys) {
    snprintf(err, err_len, "loading %s: %s (%ld ok, %ld errors)", who, berr, r.ok, r.errors);
    return -1;
  }
  double cpu1 = cluster_cpu_s(s, 1);
  f->load_rps = r.seconds > 0 ? (double)r.ok / r.seconds : 0;
  f->cpu_per_100k = cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) / (double)keys * 1e5 : -1;
  f->rss_kb = rss_kb(s->pid);
  server_stop(s);
  f->data_dir_mb = (double)du_bytes(s->dir) / 1048576.0;
  uint64_t t0 = bench_now_ns();
  server_start(s, t, "r1", ic);
  if (s->pid < 0 || !wait_ready(t, s->endpoint, s->pid, 300)) {
    snprintf(err, err_len, "%s did not restart (see %s)", who, s->log);
    return -1;
  }
  f->restart_s = (double)(bench_now_ns() - t0) / 1e9;
  f->rss_restart_kb = rss_kb(s->pid);
  server_stop(s);
  rm_rf(s->dir);
  return 0;
}

int resources_measure(const char *dir, const char *const bins[2], long keys,
                      struct resource_figures out[2], char *err, size_t err_len) {
  for (int t = T_ETCD; t >= T_KETCH; t--) {
    struct server s;
    char sdir[PATH_MAX];
    snprintf(sdir, sizeof sdir, "%.3900s/res-%s", dir, target_name(t));
    server_init(&s, bins[t], sdir);
    memset(&out[t], 0, sizeof out[t]);
    int rc = measure(&s, t, keys, &out[t], err, err_len);
    server_stop(&s);
    if (rc)
      return -1;
  }
  return 0;
}

void resources_json(FILE *f, long keys, const struct resource_figures r[2]) {
  fprintf(f, "\"resources\":{\"keys\":%ld,\"raw_mb\":%.1f", keys, keys * RAW_KEY_BYTES / 1048576.0);
  for (int t = T_ETCD; t >= T_KETCH; t--)
    fprintf(f,
            ",\"%s\":{\"load_rps\":%.1f,\"load_cpu_s_per_100k\":%.3f,\"rss_kb\":%ld,"
            "\"data_dir_mb\":%.1f,\"restart_s\":%.3f,\"rss_restart_kb\":%ld}",
            target_name(t), r[t].load_rps, r[t].cpu_per_100k, r[t].rss_kb, r[t].data_dir_mb,
            r[t].restart_s, r[t].rss_restart_kb);
  fprintf(f, "}");
}

/* bytes per key beyond the raw keys and values */
static double over(long rss_kb, long keys) {
  return ((double)rss_kb * 1024 - (double)keys * RAW_KEY_BYTES) / (double)keys;
}

void resources_table(FILE *f, long keys, const struct resource_figures r[2]) {
  const struct resource_figures *e = &r[T_ETCD], *k = &r[T_KETCH];
  double raw_mb = keys * RAW_KEY_BYTES / 1048576.0,
         cap_mb = keys * (RAW_KEY_BYTES + 64) / 1048576.0;
  fprintf(f,
          "\nResources, 1 member each, one at a time: %ld keys of 16 B with 256 B values "
          "(raw %.1f MB) loaded by 64 clients, then a restart\n\n"
          "| figure | etcd | ketch | ketch/etcd | aim |\n|---|---|---|---|---|\n",
          keys, raw_mb);
  fprintf(f, "| load, puts/s | %.0f | %.0f | %.2fx | - |\n", e->load_rps, k->load_rps,
          e->load_rps > 0 ? k->load_rps / e->load_rps : 0);
  fprintf(f, "| server CPU s per 100k puts | %.1f | %.1f | %.2fx | - |\n", e->cpu_per_100k,
          k->cpu_per_100k, e->cpu_per_100k > 0 ? k->cpu_per_100k / e->cpu_per_100k : 0);
  const char *lbl[2] = {"RSS once loaded", "RSS after restart"};
  long rk[2] = {k->rss_kb, k->rss_restart_kb}, re[2] = {e->rss_kb, e->rss_restart_kb};
  for (int i = 0; i < 2; i++)
    fprintf(f,
            "| %s, MB (bytes per key beyond raw) | %.1f (%.0f) | %.1f (%.0f) | %.2fx | <= raw + 64 "
            "B/key = %.1f MB: %s |\n",
            lbl[i], (double)re[i] / 1024, over(re[i], keys), (double)rk[i] / 1024,
            over(rk[i], keys), re[i] > 0 ? (double)rk[i] / (double)re[i] : 0, cap_mb,
            (double)rk[i] / 1024 <= cap_mb ? "met" : "NOT MET");
  fprintf(f, "| data dir, MB | %.1f | %.1f | %.2fx | - |\n", e->data_dir_mb, k->data_dir_mb,
          e->data_dir_mb > 0 ? k->data_dir_mb / e->data_dir_mb : 0);
  double rr = e->restart_s > 0 ? k->restart_s / e->restart_s : 0;
  fprintf(f, "| restart to serving, s | %.2f | %.2f | %.2fx | <= 1/9x: %s |\n", e->restart_s,
          k->restart_s, rr, rr <= 1.0 / 9 ? "met" : "NOT MET");
}
