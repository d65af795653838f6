/* test/fuzz/bbolt_fuzz.c — arbitrary bytes as a bbolt file (snap/bbolt.c's
 * reader): the metas are checked, then every bucket is walked, nested
 * buckets too (to a depth of 8), every key and value read in full so ASan
 * sees any pointer outside the input. A refusal must name the file. Seeds:
 * files written by Debian's etcd 3.4.23 (`etcdctl snapshot save` and a
 * member's member/snap/db) and by kt_bbolt_writer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../snap/bbolt.h"

struct ctx {
  const struct kt_bbolt *db;
  struct kt_err *e;
  int depth;
  uint64_t sum;
};

static int visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                 bool is_bucket) {
  struct ctx *c = arg;
  for (size_t i = 0; i < kn; i++)
    c->sum += k[i];
  for (size_t i = 0; i < vn; i++)
    c->sum += v[i];
  if (!is_bucket || c->depth >= 8)
    return 0;
  struct kt_bbolt_bucket b;
  int rc = kt_bbolt_child(c->db, v, vn, &b, c->e);
  if (rc)
    return rc;
  c->depth++;
  rc = kt_bbolt_each(c->db, &b, visit, c, c->e);
  c->depth--;
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct kt_bbolt db;
  struct kt_err e = {0};
  int rc = kt_bbolt_open(&db, data, size, "fuzz.db", &e);
  if (!rc) {
    struct ctx c = {.db = &db, .e = &e};
    struct kt_bbolt_bucket root = kt_bbolt_root(&db);
    rc = kt_bbolt_each(&db, &root, visit, &c, &e);
  }
  if (rc != 0 && (e.code != rc || strncmp(e.msg, "fuzz.db: ", 9) != 0))
    abort(); /* every refusal names the file */
  return 0;
}
