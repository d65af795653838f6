/* tools/ketchutl/wal.c — `ketchutl wal dump|verify|repair DIR`: offline
 * inspection and repair of a WAL directory (e.g. <data-dir>/member/wal). */
#include "../../wal/wal.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wal_usage(void) {
  fprintf(stderr, "usage: ketchutl wal dump DIR      one line per record\n"
                  "       ketchutl wal verify DIR    exit 0 if the log opens cleanly\n"
                  "       ketchutl wal repair DIR    cut the log at the first invalid record\n");
  return 2;
}

struct names {
  char **v;
  size_t n;
};

static void add_name(void *arg, const char *name) {
  struct names *ns = arg;
  uint64_t s, f;
  if (!kt_wal_parse_name(name, &s, &f))
    return;
  ns->v = realloc(ns->v, (ns->n + 1) * sizeof *ns->v);
  ns->v[ns->n++] = strdup(name);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

struct dump_ctx {
  const char *name;
  const uint8_t *base;
};

static int dump_rec(void *arg, const struct kt_wal_rec *r) {
  struct dump_ctx *c = arg;
  size_t off = (size_t)(r->payload - c->base) - KT_WAL_REC_HDR_BYTES;
  printf("%s offset=%zu type=%u index=%llu len=%u crc=%08x ok payload=", c->name, off, r->type,
         (unsigned long long)r->index, r->len, r->crc);
  for (uint32_t i = 0; i < r->len && i < 16; i++)
    printf("%02x", r->payload[i]);
  printf("%s\n", r->len > 16 ? "..." : "");
  return 0;
}

static int dump(const char *dir) {
  struct names ns = {0};
  const struct kt_wal_fileops *ops = &kt_wal_posix_fileops;
  if (ops->readdir(NULL, dir, add_name, &ns)) {
    fprintf(stderr, "ketchutl: cannot read directory %s\n", dir);
    return 1;
  }
  qsort(ns.v, ns.n, sizeof *ns.v, cmp_name);
  int bad = 0;
  for (size_t i = 0; i < ns.n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ns.v[i]);
    FILE *f = fopen(path, "rb");
    if (!f) {
      fprintf(stderr, "ketchutl: cannot open %s\n", path);
      bad = 1;
      continue;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = fread(buf, 1, (size_t)(len > 0 ? len : 0), f);
    fclose(f);
    struct dump_ctx c = {ns.v[i], buf};
    struct kt_wal_scan s;
    kt_wal_scan_segment(buf, got, &s, dump_rec, &c);
    if (s.status == KT_WAL_SCAN_BADHDR) {
      printf("%s offset=0 BAD HEADER: %s\n", ns.v[i], s.why);
      bad = 1;
    } else {
      printf("%s segment seq=%llu first_index=%llu prev_crc=%08x header_crc=%08x records=%llu "
             "end=%llu\n",
             ns.v[i], (unsigned long long)s.hdr.seq, (unsigned long long)s.hdr.first_index,
             s.hdr.prev_crc, s.hdr.crc, (unsigned long long)s.records,
             (unsigned long long)s.end_off);
      if (s.status == KT_WAL_SCAN_TORN)
        printf("%s offset=%llu INVALID (torn tail: nothing valid after it): %s\n", ns.v[i],
               (unsigned long long)s.bad_off, s.why);
      if (s.status == KT_WAL_SCAN_CORRUPT) {
        printf("%s offset=%llu INVALID: %s; %llu self-consistent records after it, the first at "
               "offset %llu\n",
               ns.v[i], (unsigned long long)s.bad_off, s.why, (unsigned long long)s.records_after,
               (unsigned long long)s.next_off);
        bad = 1;
      }
    }
    free(buf);
    free(ns.v[i]);
  }
  free(ns.v);
  return bad;
}

int ketchutl_wal(int argc, char **argv) {
  if (argc != 3)
    return wal_usage();
  const char *cmd = argv[1], *dir = argv[2];
  struct kt_err err = {0};
  if (!strcmp(cmd, "dump"))
    return dump(dir);
  if (!strcmp(cmd, "verify")) {
    struct kt_err torn = {0};
    uint64_t n = 0;
    if (kt_wal_verify(dir, NULL, &n, &torn, &err)) {
      printf("corrupt: %s\n", err.msg);
      return 1;
    }
    if (torn.code)
      printf("ok: %llu records; %s — cut automatically on open\n", (unsigned long long)n, torn.msg);
    else
      printf("ok: %llu records, clean\n", (unsigned long long)n);
    return 0;
  }
  if (!strcmp(cmd, "repair")) {
    struct kt_wal_repair_report rep;
    if (kt_wal_repair(dir, NULL, &rep, &err)) {
      printf("repair failed: %s\n", err.msg);
      return 1;
    }
    if (!rep.cut) {
      printf("nothing to repair\n");
      return 0;
    }
    printf("cut %s at offset %llu (%s): dropped %llu bytes, %llu records after it, %d later "
           "segment files removed\n",
           rep.file, (unsigned long long)rep.offset, rep.why, (unsigned long long)rep.bytes_dropped,
           (unsigned long long)rep.records_dropped, rep.segments_removed);
    return 0;
  }
  return wal_usage();
}
