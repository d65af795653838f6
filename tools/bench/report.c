/* tools/bench/report.c — a run's report: etcd benchmark's text layout, or one
 * JSON object (--json). Latencies in the JSON are milliseconds. */
#include <stdio.h>

#include "bench.h"

static double rps(const struct bench_result *r) {
  return r->seconds > 0 ? (double)r->ok / r->seconds : 0;
}

static void lat_text(const char *title, const struct hist *h, bool precise) {
  static const double ps[] = {10, 25, 50, 75, 90, 95, 99, 99.9};
  printf("%s (relative error <= %.2f%%):\n", title, HIST_REL_ERROR * 100);
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
    printf(precise ? "  %g%% in %.9f secs.\n" : "  %g%% in %.4f secs.\n", ps[i],
           hist_pct(h, ps[i]) / 1e9);
  printf(precise ? "  max in %.9f secs.\n" : "  max in %.4f secs.\n", (double)h->max_ns / 1e9);
}

void report_text(const struct bench_cfg *cfg, const struct bench_result *r) {
  const struct hist *h = &r->all;
  const char *f = cfg->precise ? "%.9f" : "%.4f";
  printf("Target: %s %s (%d clients, %d conns%s)\n", target_name(cfg->target), cfg->endpoints,
         cfg->clients, cfg->conns, cfg->rate ? ", open loop" : ", closed loop");
  if (cfg->rate)
    printf("Offered rate: %.1f requests/s (latency from the scheduled send time)\n", cfg->rate);
  if (r->leases)
    printf("Leases: %ld granted (TTL %lld s) in %.3f s before the run; each request below is one "
           "keep-alive\n",
           r->leases, (long long)cfg->lease_ttl_s, r->grant_s);
  printf("\nSummary:\n  Total:\t");
  printf(f, r->seconds);
  printf(" secs.\n  Slowest:\t");
  printf(f, (double)h->max_ns / 1e9);
  printf(" secs.\n  Fastest:\t");
  printf(f, (double)h->min_ns / 1e9);
  printf(" secs.\n  Average:\t");
  printf(f, hist_mean(h) / 1e9);
  printf(" secs.\n  Stddev:\t");
  printf(f, hist_stddev(h) / 1e9);
  printf(" secs.\n  Requests/sec:\t%.4f\n\n", rps(r));
  lat_text("Latency distribution", h, cfg->precise);
  if (r->read.n && r->write.n) {
    lat_text("\nReads", &r->read, cfg->precise);
    lat_text("\nWrites", &r->write, cfg->precise);
  }
  printf("\nRequests: %ld issued, %ld ok, %ld errors\n", r->issued, r->ok, r->errors);
  printf("Generator CPU: %.2f s in %.2f s (%.0f%% of one core)\n", r->cpu_s, r->seconds,
         r->seconds > 0 ? 100 * r->cpu_s / r->seconds : 0);
  for (int i = 0; i < r->n_err; i++)
    printf("  %s: %ld\n", r->err[i].name, r->err[i].n);
  if (r->state_cpu_s >= 0 && r->ok) {
    double us = r->state_cpu_s * 1e6 / (double)r->ok;
    printf("Server state thread: %.3f us CPU per request: ceiling %.0f requests/s (process: %.3f "
           "us per request)\n",
           us, us > 0 ? 1e6 / us : 0, r->server_cpu_s * 1e6 / (double)r->ok);
  }
}

static void lat_json(const char *name, const struct hist *h) {
  printf("\"%s\":{\"n\":%llu,\"p50_ms\":%.4f,\"p90_ms\":%.4f,\"p99_ms\":%.4f,\"p999_ms\":%.4f,"
         "\"max_ms\":%.4f,\"min_ms\":%.4f,\"mean_ms\":%.4f,\"stddev_ms\":%.4f}",
         name, (unsigned long long)h->n, hist_pct(h, 50) / 1e6, hist_pct(h, 90) / 1e6,
         hist_pct(h, 99) / 1e6, hist_pct(h, 99.9) / 1e6, (double)h->max_ns / 1e6,
         (double)h->min_ns / 1e6, hist_mean(h) / 1e6, hist_stddev(h) / 1e6);
}

void report_json(const struct bench_cfg *cfg, const struct bench_result *r) {
  const struct hist *h = &r->all;
  printf("{\"target\":\"%s\",\"workload\":\"%s\",\"endpoints\":\"%s\",\"clients\":%d,\"conns\":%d,"
         "\"rate\":%.3f,\"total\":%ld,\"duration_s\":%.3f,\"issued\":%ld,\"ok\":%ld,\"errors\":%ld,"
         "\"errors_by_code\":{",
         target_name(cfg->target), cfg->workload_name, cfg->endpoints, cfg->clients, cfg->conns,
         cfg->rate, cfg->total, cfg->duration_s, r->issued, r->ok, r->errors);
  for (int i = 0; i < r->n_err; i++)
    printf("%s\"%s\":%ld", i ? "," : "", r->err[i].name, r->err[i].n);
  printf(
      "},\"seconds\":%.6f,\"rps\":%.1f,\"p50_ms\":%.4f,\"p90_ms\":%.4f,\"p99_ms\":%.4f,"
      "\"p999_ms\":%.4f,\"max_ms\":%.4f,\"mean_ms\":%.4f,\"hist_rel_error\":%.5f,\"cpu_s\":%.3f,",
      r->seconds, rps(r), hist_pct(h, 50) / 1e6, hist_pct(h, 90) / 1e6, hist_pct(h, 99) / 1e6,
      hist_pct(h, 99.9) / 1e6, (double)h->max_ns / 1e6, hist_mean(h) / 1e6, HIST_REL_ERROR,
      r->cpu_s);
  lat_json("latency", h);
  printf(",");
  lat_json("read", &r->read);
  printf(",");
  lat_json("write", &r->write);
  if (r->leases)
    printf(",\"leases\":%ld,\"grant_s\":%.3f", r->leases, r->grant_s);
  if (r->state_cpu_s >= 0 && r->ok) {
    double us = r->state_cpu_s * 1e6 / (double)r->ok;
    printf(",\"server_state_us_per_req\":%.4f,\"server_state_ceiling_rps\":%.0f,"
           "\"server_cpu_us_per_req\":%.4f",
           us, us > 0 ? 1e6 / us : 0, r->server_cpu_s * 1e6 / (double)r->ok);
  }
  printf("}\n");
}
