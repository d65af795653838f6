/* tools/ketchutl/snapshot.c — `ketchutl snapshot status FILE [-w simple|table|json]`,
 * `snapshot restore FILE --data-dir DIR [member flags]`, `snapshot export FILE
 * --etcd OUT.db`.
 *
 * Shaped like `etcdctl snapshot status` (3.4): the same columns (HASH,
 * REVISION, TOTAL KEYS, TOTAL SIZE), the same json field names (hash,
 * revision, totalKey, totalSize) and the same size format ("20 kB").
 * Differences: HASH is the first 4 bytes (big-endian) of the file's BLAKE2b
 * hash, and TOTAL KEYS counts live keys at the snapshot's revision (etcd
 * counts every revision row of its key bucket). The file is verified in
 * full first; a corrupt file prints "Error: <what>" and exits 1. An etcd
 * database (a bbolt file: `etcdctl snapshot save`'s, also through
 * ketch-grpc, or a member/snap/db) gets etcd's own numbers, the ones
 * `etcdctl snapshot status` prints (tools/etcddb/etcddb.h).
 *
 * `snapshot restore FILE --data-dir DIR` verifies FILE and lays out a new data
 * dir around it (member/snap/<term>-<index>.snap, an empty member/wal/): the
 * member started there recovers the snapshot and forms a new cluster from its
 * --initial-* flags, as `etcdutl snapshot restore` does; with --name and
 * --initial-cluster (etcdutl's flags) the member file is written now with
 * those members instead (migrate.c). An etcd database is migrated
 * (`migrate from-etcd`).
 *
 * `snapshot export FILE --etcd OUT.db` writes the ketch snapshot FILE as an
 * etcd 3.4 database with etcd's SHA-256 trailer, as `etcdctl snapshot save`
 * would have saved it: `etcdctl snapshot status|restore` take it. It is
 * written to OUT.db.part, fsynced and renamed. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "../../snap/snap.h"
#include "../etcddb/etcddb.h"
#include "util.h"
#include "../common/progress.h"

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

/* Whether path starts like a bbolt file (an etcd database). */
static bool is_bbolt(const char *path) {
  uint8_t head[24];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  return n == (ssize_t)sizeof head && kt_etcddb_is_bbolt(head, sizeof head);
}

/* etcd's numbers for an etcd database. */
static int etcd_status(const char *path, struct kt_etcddb_status *st, struct kt_err *e) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0) {
    int rc = kt_err_set(e, KT_EIO, "%s: %s", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return rc;
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return kt_err_set(e, KT_EIO, "%s: mmap: %s", path, strerror(errno));
  int rc = kt_etcddb_status(p, (size_t)sb.st_size, path, st, e);
  munmap(p, (size_t)sb.st_size);
  return rc;
}

static int status(const char *path, const char *format) {
  struct kt_err err = {0};
  uint32_t hash;
  int64_t revision;
  uint64_t keys, size;
  int rc;
  if (is_bbolt(path)) {
    struct kt_etcddb_status st;
    rc = etcd_status(path, &st, &err);
    hash = st.hash, revision = st.revision, keys = st.total_keys, size = st.total_size;
  } else {
    struct kt_snap_meta m;
    rc = kt_snap_verify(path, &m, &err);
    kt_snap_meta_free(&m);
    hash = kt_snap_hash32(&m), revision = m.revision, keys = m.live_keys, size = m.file_bytes;
  }
  if (rc) {
    fprintf(stderr, "Error: %s\n", err.msg);
    return 1;
  }
  if (!strcmp(format, "json")) {
    printf("{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":%llu}\n", hash,
           (long long)revision, (unsigned long long)keys, (unsigned long long)size);
    return 0;
  }
  char c0[16], c1[32], c2[32], c3[32];
  snprintf(c0, sizeof c0, "%x", hash);
  snprintf(c1, sizeof c1, "%lld", (long long)revision);
  snprintf(c2, sizeof c2, "%llu", (unsigned long long)keys);
  human_bytes(size, c3, sizeof c3);
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
  fprintf(stderr, "usage: ketchutl snapshot status FILE [-w simple|table|json]\n"
                  "       ketchutl snapshot restore FILE --data-dir DIR [--name NAME]\n"
                  "         [--initial-cluster NAME=URL,...] [--initial-cluster-token TOKEN]\n"
                  "         [--initial-advertise-peer-urls URL,...]\n"
                  "       ketchutl snapshot export FILE --etcd OUT.db\n");
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
  uint64_t total = len;
  struct kt_progress pr;
  kt_progress_init(&pr, "restore", total);
  while (len && (n = read(in, buf, len < sizeof buf ? (size_t)len : sizeof buf)) > 0) {
    if (write(out, buf, (size_t)n) != n) {
      rc = -1;
      break;
    }
    len -= (uint64_t)n;
    kt_progress_update(&pr, total - len);
  }
  kt_progress_end(&pr, total - len);
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
static int restore(const char *file, const char *dir, struct ketchutl_members *mf) {
  if (is_bbolt(file))
    return ketchutl_from_etcd(file, dir, mf);
  struct kt_snap_meta meta = {0};
  struct kt_err e = {0};
  struct kt_node_config *nc = NULL;
  struct stat st;
  char path[4096], name[64];
  const char *sub[] = {"", "/member", "/member/snap", "/member/wal"};
  if (ketchutl_members_config(mf, dir, &nc, &e) || kt_snap_verify(file, &meta, &e))
    goto fail;
  if (stat(dir, &st) == 0) {
    kt_err_set(&e, KT_EINVAL, "data-dir %s exists", dir);
    goto fail;
  }
  for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
    snprintf(path, sizeof path, "%s%s", dir, sub[i]);
    if (mkdir(path, 0700) < 0) {
      kt_err_set(&e, KT_EIO, "mkdir %s: %s", path, strerror(errno));
      goto fail;
    }
  }
  kt_snap_name(meta.term, meta.index, name, sizeof name);
  snprintf(path, sizeof path, "%s/member/snap/%s", dir, name);
  if (copy_file(file, path, meta.file_bytes) < 0) {
    kt_err_set(&e, KT_EIO, "copy to %s: %s", path, strerror(errno));
    goto fail;
  }
  snprintf(path, sizeof path, "%s/member", dir);
  if (nc && kt_node_member_write_initial(nc, path, meta.index, &e))
    goto fail;
  printf("restored snapshot %s to %s (revision %lld, %llu keys); start a member with "
         "--data-dir %s%s\n",
         file, dir, (long long)meta.revision, (unsigned long long)meta.live_keys, dir,
         nc ? "" : " and its --initial-cluster flags");
  kt_snap_meta_free(&meta);
  ketchutl_members_free(mf);
  return 0;
fail:
  fprintf(stderr, "Error: %s\n", e.msg);
  kt_snap_meta_free(&meta);
  ketchutl_members_free(mf);
  return 1;
}

/* OUT.part, fsynced, renamed to OUT, the directory fsynced. */
static int export_etcd(const char *file, const char *out) {
  char part[4200], dirbuf[4200];
  snprintf(part, sizeof part, "%s.part", out);
  snprintf(dirbuf, sizeof dirbuf, "%s", out);
  const char *dir = dirname(dirbuf);
  struct kt_err e = {0};
  int fd = open(part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "Error: %s: %s\n", part, strerror(errno));
    return 1;
  }
  struct kt_etcddb_stats st;
  int rc = kt_etcddb_export(file, fd, part, dir, true, NULL, NULL, &st, &e);
  if (!rc && fsync(fd) < 0)
    rc = kt_err_set(&e, KT_EIO, "%s: fsync: %s", part, strerror(errno));
  close(fd);
  if (!rc && rename(part, out) < 0)
    rc = kt_err_set(&e, KT_EIO, "rename %s: %s", part, strerror(errno));
  if (rc) {
    unlink(part);
    fprintf(stderr, "Error: %s\n", e.msg);
    return 1;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  printf("exported snapshot %s to %s as an etcd 3.4 database: revision %lld, compacted at %lld, "
         "%llu keys, %llu revisions, %llu leases, %llu bytes + SHA-256\n",
         file, out, (long long)st.revision, (long long)st.compact_revision,
         (unsigned long long)st.live_keys, (unsigned long long)st.revisions,
         (unsigned long long)st.leases, (unsigned long long)st.bytes);
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
    const char *file, *dir;
    struct ketchutl_members mf = {0};
    if (ketchutl_restore_args(argc, argv, &file, &dir, &mf))
      return usage();
    if (!file || !dir) {
      fprintf(stderr, "Error: snapshot restore needs a snapshot file and --data-dir\n");
      return 1;
    }
    if (sodium_init() < 0) {
      fprintf(stderr, "Error: libsodium failed to initialise\n");
      return 1;
    }
    return restore(file, dir, &mf);
  }
  if (!strcmp(argv[1], "export")) {
    const char *file = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
      if (!strcmp(argv[i], "--etcd") && i + 1 < argc)
        out = argv[++i];
      else if (!strncmp(argv[i], "--etcd=", 7))
        out = argv[i] + 7;
      else if (argv[i][0] == '-' || file)
        return usage();
      else
        file = argv[i];
    }
    if (!file || !out) {
      fprintf(stderr, "Error: snapshot export needs a snapshot file and --etcd OUT.db\n");
      return 1;
    }
    if (sodium_init() < 0) {
      fprintf(stderr, "Error: libsodium failed to initialise\n");
      return 1;
    }
    return export_etcd(file, out);
  }
  return usage();
}
