/* test/unit/mvcc_hash_test.c — the revision-bounded, sliced store hash
 * (kt_mvcc_hasher) that serves HASH_KV. */
#include "../../core/mvcc.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

static struct kt_arena A;

static struct kt_bytes B(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

static int
put(struct kt_mvcc *s, const char *k, const char *v) {
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = B(k);
  op.u.put.value = B(v);
  struct kt_response_op res;
  struct kt_err e = {0};
  kt_arena_reset(&A);
  return kt_mvcc_apply(s, &op, &A, &res, &e);
}

static int del(struct kt_mvcc *s, const char *k) {
  struct kt_request_op op = {.type = KT_OP_DELETE};
  op.u.del.key = B(k);
  struct kt_response_op res;
  struct kt_err e = {0};
  kt_arena_reset(&A);
  return kt_mvcc_apply(s, &op, &A, &res, &e);
}

static struct kt_mvcc *mk(void) {
  struct kt_mvcc_config c = {0};
  return kt_mvcc_new(&c);
}

/* The whole hash in slices of max_keys, calling between() after each. */
static uint64_t hash_at(struct kt_mvcc *s, int64_t rev, size_t max_keys,
                        void (*between)(struct kt_mvcc *, int), int *rc_out) {
  struct kt_mvcc_hasher hs = {0};
  struct kt_err e = {0};
  int rc = kt_mvcc_hash_start(s, rev, &hs, &e);
  int step = 0;
  while (rc == 0 && (rc = kt_mvcc_hash_step(s, &hs, max_keys)) == 1) {
    if (between)
      between(s, step++);
    rc = 0;
  }
  if (rc_out)
    *rc_out = rc;
  uint64_t h = hs.h;
  kt_mvcc_hash_done(&hs);
  return h;
}

static void fill(struct kt_mvcc *s, int n, const char *tag) {
  char k[32], v[32];
  for (int i = 0; i < n; i++) {
    snprintf(k, sizeof k, "key%05d", i * 7 % n);
    snprintf(v, sizeof v, "%s%d", tag, i);
    put(s, k, v);
  }
}

TEST(hasher_at_current_revision_equals_kt_mvcc_hash) {
  struct kt_mvcc *s = mk();
  fill(s, 500, "a");
  fill(s, 500, "b"); /* history */
  del(s, "key00003");
  int rc;
  CHECK(hash_at(s, 0, 7, NULL, &rc) == kt_mvcc_hash(s));
  CHECK_EQ(rc, 0);
  CHECK(hash_at(s, kt_mvcc_revision(s), 1, NULL, &rc) == kt_mvcc_hash(s));
  kt_mvcc_free(s);
}

static void write_more(struct kt_mvcc *s, int step) {
  char k[32];
  snprintf(k, sizeof k, "key%05d", step * 13 % 500);
  put(s, k, "later");
  put(s, "zzz-new", "later");
}

/* HashKV(R) equals the hash of a store that stopped at R, however many
 * writes land between the slices. */
TEST(hash_at_a_revision_ignores_later_writes) {
  struct kt_mvcc *a = mk(), *b = mk();
  fill(a, 500, "a");
  fill(b, 500, "a");
  int64_t r = kt_mvcc_revision(a);
  fill(a, 300, "c");
  int rc;
  uint64_t h = hash_at(a, r, 16, write_more, &rc);
  CHECK_EQ(rc, 0);
  CHECK(h == kt_mvcc_hash(b));
  CHECK(h != kt_mvcc_hash(a));
  /* and a different store at the same revision hashes differently */
  struct kt_mvcc *c = mk();
  fill(c, 500, "x");
  CHECK_EQ(kt_mvcc_revision(c), r);
  CHECK(kt_mvcc_hash(c) != h);
  kt_mvcc_free(a);
  kt_mvcc_free(b);
  kt_mvcc_free(c);
}

static int64_t compact_to;
static void compact_between(struct kt_mvcc *s, int step) {
  if (step == 3) {
    struct kt_err e = {0};
    kt_mvcc_compact(s, compact_to, &e);
  }
}

TEST(compaction_during_a_hash_restarts_or_fails_it) {
  struct kt_mvcc *s = mk(), *ref = mk();
  fill(s, 400, "a");
  fill(ref, 400, "a");
  fill(s, 400, "b");
  fill(ref, 400, "b");
  int64_t r = kt_mvcc_revision(s);
  /* compacted below the hashed revision: restarted, equals a store
   * compacted there before hashing */
  compact_to = r - 100;
  int rc;
  uint64_t h = hash_at(s, r, 10, compact_between, &rc);
  CHECK_EQ(rc, 0);
  struct kt_err e = {0};
  CHECK_EQ(kt_mvcc_compact(ref, r - 100, &e), 0);
  CHECK(h == kt_mvcc_hash(ref));
  /* physical compaction progress changes nothing */
  while (kt_mvcc_compact_step(s, 5))
    ;
  CHECK(hash_at(s, r, 10, NULL, &rc) == h);
  /* compacted past the hashed revision: ECOMPACTED */
  fill(s, 50, "c");
  compact_to = kt_mvcc_revision(s);
  hash_at(s, r, 10, compact_between, &rc);
  CHECK_EQ(rc, -KT_ECOMPACTED);
  kt_mvcc_free(s);
  kt_mvcc_free(ref);
}

TEST(hash_start_checks_the_revision) {
  struct kt_mvcc *s = mk();
  fill(s, 20, "a");
  struct kt_mvcc_hasher hs = {0};
  struct kt_err e = {0};
  CHECK_EQ(kt_mvcc_hash_start(s, kt_mvcc_revision(s) + 1, &hs, &e), KT_EFUTUREREV);
  CHECK_STR(e.msg, "mvcc: required revision is a future revision");
  CHECK_EQ(kt_mvcc_compact(s, 10, &e), 0);
  CHECK_EQ(kt_mvcc_hash_start(s, 9, &hs, &e), KT_ECOMPACTED);
  CHECK_EQ(kt_mvcc_hash_start(s, 10, &hs, &e), KT_ECOMPACTED); /* etcd: rev <= compact */
  CHECK_STR(e.msg, "mvcc: required revision has been compacted");
  CHECK_EQ(kt_mvcc_hash_start(s, 11, &hs, &e), 0);
  CHECK_EQ(hs.compact_rev, 10);
  kt_mvcc_hash_done(&hs);
  /* an empty store hashes too */
  struct kt_mvcc *z = mk();
  int rc;
  CHECK(hash_at(z, 0, 1, NULL, &rc) == kt_mvcc_hash(z));
  CHECK_EQ(rc, 0);
  kt_mvcc_free(z);
  kt_mvcc_free(s);
  kt_arena_free(&A);
}
