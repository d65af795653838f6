/* tools/ketchutl/snapshot.c — `ketchutl snapshot status FILE [-w simple|table|json]`.
 *
 * Shaped like `etcdctl snapshot status` (3.4): the same columns (HASH,
 * REVISION, TOTAL KEYS, TOTAL SIZE), the same json field names (hash,
 * revision, totalKey, totalSize) and the same size format ("20 kB").
 * Differences: HASH is the first 4 bytes (big-endian) of the file's BLAKE2b
 * hash, and TOTAL KEYS counts live keys at the snapshot's revision (etcd
 * counts every revision row of its key bucket). The file is verified in
 * full first; a corrupt file prints "Error: <what>" and exits 1.
 *
 * `snapshot restore` belongs to the node's data-dir layout and is not here
 * yet. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../snap/snap.h"
#include "util.h"

/* go-humanize's Bytes(): SI units, one decimal below 10. */
static void human_bytes(uint64_t s, char *buf, size_t n) {
  static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  if (s < 10) {
    snprintf(buf, n, "%llu B", (unsigned long long)s);
    return;
  }
  int e = (int)floor(log((double)s) / log(1000.0));
  if (e > 6)
    e = 6;
  double val = floor((double)s / pow(1000.0, e) * 10 + 0.5) / 10;
  snprintf(buf, n, val < 10 ? "%.1f %s" : "%.0f %s", val, units[e]);
}

static void table_row(const char *const cells[4], const int width[4], bool header) {
  putchar('|');
  for (int i = 0; i < 4; i++) {
    int len = (int)strlen(cells[i]);
    if (header) { /* centred, as tablewriter does */
      int left = (width[i] - len) / 2;
      printf(" %*s%s%*s |", left, "", cells[i], width[i] - len - left, "");
    } else {
      printf(" %*s |", width[i], cells[i]);
    }
  }
  putchar('\n');
}

static void table_rule(const int width[4]) {
  putchar('+');
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < width[i] + 2; j++)
      putchar('-');
    putchar('+');
  }
  putchar('\n');
}

static int status(const char *path, const char *format) {
  struct kt_snap_meta m;
  struct kt_err err = {0};
  int rc = kt_snap_verify(path, &m, &err);
  kt_snap_meta_free(&m);
  if (rc) {
    fprintf(stderr, "Error: %s\n", err.msg);
    return 1;
  }
  uint32_t hash = kt_snap_hash32(&m);
  if (!strcmp(format, "json")) {
    printf("{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":%llu}\n", hash,
           (long long)m.revision, (unsigned long long)m.live_keys,
           (unsigned long long)m.file_bytes);
    return 0;
  }
  char c0[16], c1[32], c2[32], c3[32];
  snprintf(c0, sizeof c0, "%x", hash);
  snprintf(c1, sizeof c1, "%lld", (long long)m.revision);
  snprintf(c2, sizeof c2, "%llu", (unsigned long long)m.live_keys);
  human_bytes(m.file_bytes, c3, sizeof c3);
  if (!strcmp(format, "simple")) {
    printf("%s, %s, %s, %s\n", c0, c1, c2, c3);
    return 0;
  }
  const char *head[4] = {"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"};
  const char *row[4] = {c0, c1, c2, c3};
  int width[4];
  for (int i = 0; i < 4; i++) {
    int a = (int)strlen(head[i]), b = (int)strlen(row[i]);
    width[i] = a > b ? a : b;
  }
  table_rule(width);
  table_row(head, width, true);
  table_rule(width);
  table_row(row, width, false);
  table_rule(width);
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: ketchutl snapshot status FILE [-w simple|table|json]\n");
  return 2;
}

int ketchutl_snapshot(int argc, char **argv) {
  if (argc < 2)
    return usage();
  if (!strcmp(argv[1], "status")) {
    const char *file = NULL, *format = "simple";
    for (int i = 2; i < argc; i++) {
      if ((!strcmp(argv[i], "-w") || !strcmp(argv[i], "--write-out")) && i + 1 < argc)
        format = argv[++i];
      else if (!strncmp(argv[i], "--write-out=", 12))
        format = argv[i] + 12;
      else if (argv[i][0] == '-' || file)
        return usage();
      else
        file = argv[i];
    }
    if (!file) {
      fprintf(stderr, "Error: snapshot status requires exactly one argument\n");
      return 1;
    }
    if (strcmp(format, "simple") && strcmp(format, "table") && strcmp(format, "json")) {
      fprintf(stderr, "Error: unknown output format %s (simple, table or json)\n", format);
      return 1;
    }
    return status(file, format);
  }
  if (!strcmp(argv[1], "restore")) {
    fprintf(stderr, "Error: snapshot restore is not implemented yet\n");
    return 1;
  }
  return usage();
}
