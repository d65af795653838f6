/* tools/ketchutl — the offline tool: WAL and snapshot inspection and repair,
 * restore, and moving data from etcd and back (snapshot export, migrate).
 * Each command group lives in its own file; this only dispatches. */
#include <stdio.h>
#include <string.h>

#include "util.h"

static int usage(void) {
  fprintf(stderr, "usage: ketchutl wal dump|verify|repair DIR\n"
                  "       ketchutl snapshot status FILE [-w simple|table|json]\n"
                  "       ketchutl snapshot restore FILE --data-dir DIR [--name NAME]\n"
                  "         [--initial-cluster NAME=URL,...] [--initial-cluster-token TOKEN]\n"
                  "         [--initial-advertise-peer-urls URL,...]\n"
                  "       ketchutl snapshot export FILE --etcd OUT.db\n"
                  "       ketchutl migrate from-etcd FILE --data-dir DIR [--name NAME ...]\n"
                  "       ketchutl version\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  if (!strcmp(argv[1], "version")) {
    printf("ketchutl version: %s\n", KT_VERSION);
    return 0;
  }
  if (!strcmp(argv[1], "wal") && ketchutl_wal)
    return ketchutl_wal(argc - 1, argv + 1);
  if (!strcmp(argv[1], "snapshot") && ketchutl_snapshot)
    return ketchutl_snapshot(argc - 1, argv + 1);
  if (!strcmp(argv[1], "migrate") && ketchutl_migrate)
    return ketchutl_migrate(argc - 1, argv + 1);
  return usage();
}
