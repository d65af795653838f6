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
 * `snapshot restore FILE --data-dir DIR` verifies FILE and lays out a new data
 * dir around it (member/snap/<term>-<index>.snap, an empty member/wal/): the
 * member started there recovers the snapshot and forms a new cluster from its
 * --initial-* flags, as `etcdutl snapshot restore` does. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Copy the first `len` bytes of `from` to `to` and fsync it (the snapshot
 * inside an etcd envelope is the file's first meta.file_bytes bytes). */
static int copy_file(const char *from, const char *to, uint64_t len) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return -1;
  int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    close(in);
    return -1;
  }
  char buf[1 << 16];
  ssize_t n = 0;
  int rc = 0;
  while (len && (n = read(in, buf, len < sizeof buf ? (size_t)len : sizeof buf)) > 0) {
    if (write(out, buf, (size_t)n) != n) {
      rc = -1;
      break;
    }
    len -= (uint64_t)n;
  }
  if (len)
    n = -1; /* shorter than verified */
  if (n < 0 || fsync(out) < 0)
    rc = -1;
  close(in);
  close(out);
  return rc;
}

/* A new data dir that starts from a snapshot: <dir>/member/snap/<term>-<index>.snap
 * and an empty WAL. The member started on it takes its name, ids and peers
 * from its --initial-* flags (a new cluster, as `etcdutl snapshot restore`). */
static int restore(const char *file, const char *dir) {
  struct kt_snap_meta meta = {0};
  struct kt_err e = {0};
  if (kt_snap_verify(file, &meta, &e)) {
    fprintf(stderr, "Error: %s\n", e.msg);
    kt_snap_meta_free(&meta);
    return 1;
  }
  struct stat st;
  if (stat(dir, &st) == 0) {
    fprintf(stderr, "Error: data-dir %s exists\n", dir);
    kt_snap_meta_free(&meta);
    return 1;
  }
  char path[4096], name[64];
  const char *sub[] = {"", "/member", "/member/snap", "/member/wal"};
  for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
    snprintf(path, sizeof path, "%s%s", dir, sub[i]);
    if (mkdir(path, 0700) < 0) {
      fprintf(stderr, "Error: mkdir %s: %s\n", path, strerror(errno));
      kt_snap_meta_free(&meta);
      return 1;
    }
  }
  kt_snap_name(meta.term, meta.index, name, sizeof name);
  snprintf(path, sizeof path, "%s/member/snap/%s", dir, name);
  if (copy_file(file, path, meta.file_bytes) < 0) {
    fprintf(stderr, "Error: copy to %s: %s\n", path, strerror(errno));
    kt_snap_meta_free(&meta);
    return 1;
  }
  printf("restored snapshot %s to %s (revision %lld, %llu keys); start a member with "
         "--data-dir %s and its --initial-cluster flags\n",
         file, dir, (long long)meta.revision, (unsigned long long)meta.live_keys, dir);
  kt_snap_meta_free(&meta);
  return 0;
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
    const char *file = NULL, *dir = NULL;
    for (int i = 2; i < argc; i++) {
      if (!strcmp(argv[i], "--data-dir") && i + 1 < argc)
        dir = argv[++i];
      else if (!strncmp(argv[i], "--data-dir=", 11))
        dir = argv[i] + 11;
      else if (argv[i][0] == '-' || file)
        return usage();
      else
        file = argv[i];
    }
    if (!file || !dir) {
      fprintf(stderr, "Error: snapshot restore needs a snapshot file and --data-dir\n");
      return 1;
    }
    return restore(file, dir);
  }
  return usage();
}
