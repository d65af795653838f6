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
  static const char *const later[] = {"watch",           "watch-latency", "watch-get",
                                      "lease-keepalive", "lock",          "stm"};
  for (size_t j = 0; j < sizeof later / sizeof later[0]; j++)
    if (!strcmp(cmd, later[j])) {
      fprintf(stderr,
              "ketch-bench: %s: not supported by this server yet (ketch has no %s); no numbers "
              "reported\n",
              cmd,
              !strcmp(cmd, "lease-keepalive") ? "leases"
              : !strcmp(cmd, "lock")          ? "lock service"
                                              : "watch");
      return 2;
    }
  parse_workload(&cfg, cmd, argc - i, argv + i);
  char err[512] = "";
  static struct bench_result r; /* large (histograms): not on the stack */
  if (bench_run(&cfg, &r, err, sizeof err)) {
    fprintf(stderr, "ketch-bench: %s\n", err);
    return 1;
  }
  if (cfg.json)
    report_json(&cfg, &r);
  else
    report_text(&cfg, &r);
  return r.errors ? 1 : 0;
}
