/* tools/bench/main.c — ketch-bench: dispatch to a subcommand (see bench.h). */
#include <stdio.h>
#include <string.h>

#include "bench.h"

int parse_globals(struct bench_cfg *cfg, int argc, char **argv);

int main(int argc, char **argv) {
  struct bench_cfg cfg;
  cfg_defaults(&cfg);
  int i = parse_globals(&cfg, argc, argv);
  if (i >= argc)
    usage(2);
  const char *cmd = argv[i];
  if (!strcmp(cmd, "help"))
    usage(0);
  if (!strcmp(cmd, "floor"))
    return floor_main(&cfg, argc - i, argv + i);
  if (!strcmp(cmd, "compare"))
    return compare_main(&cfg, argc - i, argv + i);
  static const char *const later[] = {"watch-get", "stm", "mvcc"};
  for (size_t j = 0; j < sizeof later / sizeof later[0]; j++)
    if (!strcmp(cmd, later[j])) {
      fprintf(stderr, "ketch-bench: %s: not supported by this tool yet; no numbers reported\n",
              cmd);
      return 2;
    }
  parse_workload(&cfg, cmd, argc - i, argv + i);
  char err[512] = "";
  if (cfg.workload == W_WATCH || cfg.workload == W_WATCH_LATENCY) {
    static struct watch_result wr;
    int rc = watch_run(&cfg, &wr, err, sizeof err);
    if (rc) {
      fprintf(stderr, "ketch-bench: %s\n", err);
      return 1;
    }
    watch_report(&cfg, &wr);
    return wr.put_errors || wr.events != wr.expected || wr.foreign || wr.ended ||
                   wr.min_per_watcher != wr.max_per_watcher
               ? 1
               : 0;
  }
  static struct bench_result r, g; /* large (histograms): not on the stack */
  int rc;
  if (cfg.workload == W_LEASE_KEEPALIVE)
    rc = bench_lease_keepalive(&cfg, &g, &r, err, sizeof err);
  else if (cfg.workload == W_LOCK)
    rc = lock_run(&cfg, &r, err, sizeof err);
  else {
    pid_t storm = storm_spawn(&cfg);
    rc = bench_run(&cfg, &r, err, sizeof err);
    storm_stop(storm);
  }
  if (rc) {
    fprintf(stderr, "ketch-bench: %s\n", err);
    return 1;
  }
  if (cfg.json)
    report_json(&cfg, &r);
  else
    report_text(&cfg, &r);
  return r.errors ? 1 : 0;
}
