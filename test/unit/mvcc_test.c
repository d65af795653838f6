/* Tests of core/mvcc against etcd v3's documented behaviour, and a
 * randomized comparison with a plain reference model. */
#include "../../core/mvcc.h"
#include "test.h"

#include <stdlib.h>

/* "\\0" (backslash zero) stands for the one-byte key "\0". */
static struct kt_bytes B(const char *s) {
  if (s && strcmp(s, "\\0") == 0)
    return (struct kt_bytes){(const uint8_t *)"", 1};
  return (struct kt_bytes){(const uint8_t *)s, s ? (uint32_t)strlen(s) : 0};
}

static struct kt_arena A;

/* Events, copied. */
struct ev {
  int type;
  char key[32], value[32], prev_value[32];
  int64_t mod, version, create;
  bool has_prev;
};
static struct ev evs[256];
static int nevs;
static void on_event(void *arg, const struct kt_event *e) {
  (void)arg;
  if (nevs >= 256)
    return;
  struct ev *x = &evs[nevs++];
  memset(x, 0, sizeof *x);
  x->type = e->type;
  snprintf(x->key, sizeof x->key, "%.*s", (int)e->kv.key.n, (const char *)e->kv.key.p);
  snprintf(x->value, sizeof x->value, "%.*s", (int)e->kv.value.n, (const char *)e->kv.value.p);
  x->mod = e->kv.mod_revision;
  x->version = e->kv.version;
  x->create = e->kv.create_revision;
  x->has_prev = e->has_prev_kv;
  if (e->has_prev_kv)
    snprintf(x->prev_value, sizeof x->prev_value, "%.*s", (int)e->prev_kv.value.n,
             (const char *)e->prev_kv.value.p);
}

static struct kt_mvcc *mk(uint64_t quota) {
  struct kt_mvcc_config c = {.quota_bytes = quota, .on_event = on_event};
  nevs = 0;
  kt_arena_reset(&A);
  return kt_mvcc_new(&c);
}

static struct kt_request_op PUT(const char *k, const char *v) {
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = B(k);
  op.u.put.value = B(v);
  return op;
} static struct kt_request_op DEL(const char *k, const char *end) {
  struct kt_request_op op = {.type = KT_OP_DELETE};
  op.u.del.key = B(k);
  op.u.del.range_end = B(end);
  op.u.del.prev_kv = true;
  return op;
} static struct kt_request_op GET(const char *k, const char *end) {
  struct kt_request_op op = {.type = KT_OP_RANGE};
  op.u.range.key = B(k);
  op.u.range.range_end = B(end);
  return op;
}

static int
apply(struct kt_mvcc *s, struct kt_request_op op, struct kt_response_op *out) {
  struct kt_response_op tmp;
  struct kt_err e = {0};
  return kt_mvcc_apply(s, &op, &A, out ? out : &tmp, &e);
}
static int put(struct kt_mvcc *s, const char *k, const char *v) {
  return apply(s, PUT(k, v), NULL);
}
static int64_t del(struct kt_mvcc *s, const char *k, const char *end) {
  struct kt_response_op out;
  int rc = apply(s, DEL(k, end), &out);
  return rc ? -rc : out.u.del.deleted;
}

/* Range with a request; returns rc. */
static int rng(struct kt_mvcc *s, struct kt_range_req r, struct kt_range_resp *out) {
  struct kt_err e = {0};
  return kt_mvcc_range(s, &r, &A, out, &e);
}
static struct kt_range_req RQ(const char *k, const char *end, int64_t rev) {
  struct kt_range_req r = {.key = B(k), .range_end = B(end), .revision = rev};
  return r;
}
/* "k1=v1,k2=v2" of a response */
static const char *
show(const struct kt_range_resp *r) {
  static char buf[1024];
  size_t o = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < r->n_kvs && o < sizeof buf - 64; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%.*s=%.*s", i ? "," : "",
                          (int)r->kvs[i].key.n, (const char *)r->kvs[i].key.p,
                          (int)r->kvs[i].value.n, (const char *)r->kvs[i].value.p);
  return buf;
}
static const char *getall(struct kt_mvcc *s, const char *k, const char *end, int64_t rev) {
  struct kt_range_resp r;
  if (rng(s, RQ(k, end, rev), &r))
    return "ERR";
  return show(&r);
}

TEST(revisions_versions_tombstones) {
  struct kt_mvcc *s = mk(0);
  CHECK_EQ(kt_mvcc_revision(s), 0);
  CHECK_EQ(put(s, "a", "1"), 0);  /* rev 1 */
  CHECK_EQ(put(s, "a", "2"), 0);  /* rev 2 */
  CHECK_EQ(put(s, "b", "x"), 0);  /* rev 3 */
  CHECK_EQ(del(s, "a", NULL), 1); /* rev 4 */
  CHECK_EQ(del(s, "a", NULL), 0); /* no key: no revision */
  CHECK_EQ(kt_mvcc_revision(s), 4);
  CHECK_EQ(put(s, "a", "3"), 0); /* rev 5 */
  CHECK_EQ(kt_mvcc_keys(s), 2);
  struct kt_range_resp r;
  CHECK_EQ(rng(s, RQ("a", NULL, 0), &r), 0);
  CHECK_EQ(r.n_kvs, 1);
  CHECK_EQ(r.kvs[0].create_revision, 5);
  CHECK_EQ(r.kvs[0].mod_revision, 5);
  CHECK_EQ(r.kvs[0].version, 1); /* reset by the delete */
  CHECK_EQ(rng(s, RQ("a", NULL, 2), &r), 0);
  CHECK_EQ(r.kvs[0].create_revision, 1);
  CHECK_EQ(r.kvs[0].mod_revision, 2);
  CHECK_EQ(r.kvs[0].version, 2);
  CHECK_BYTES(r.kvs[0].value.p, r.kvs[0].value.n, "2");
  /* historical reads at every revision */
  const char *want[] = {"", "a=1", "a=2", "a=2,b=x", "b=x", "a=3,b=x"};
  for (int rev = 1; rev <= 5; rev++)
    CHECK_STR(getall(s, "a", "z", rev), want[rev]);
  CHECK_EQ(rng(s, RQ("a", NULL, 6), &r), KT_EFUTUREREV);
  /* events */
  CHECK_EQ(nevs, 5);
  CHECK_EQ(evs[1].type, KT_EVENT_PUT);
  CHECK(evs[1].has_prev);
  CHECK_STR(evs[1].prev_value, "1");
  CHECK_EQ(evs[1].version, 2);
  CHECK_EQ(evs[3].type, KT_EVENT_DELETE);
  CHECK_STR(evs[3].key, "a");
  CHECK_EQ(evs[3].mod, 4);
  CHECK(evs[3].has_prev);
  CHECK_STR(evs[3].prev_value, "2");
  CHECK(!evs[4].has_prev);
  kt_mvcc_free(s);
}

TEST(range_kinds_and_options) {
  struct kt_mvcc *s = mk(0);
  /* rev 2..6: b c d e f; then c, b rewritten */
  put(s, "a", "5"); /* rev 1 */
  put(s, "b", "4");
  put(s, "c", "3");
  put(s, "d", "2");
  put(s, "e", "1"); /* rev 5 */
  put(s, "c", "9"); /* rev 6: c version 2 */
  put(s, "c", "8"); /* rev 7: c version 3 */
  put(s, "b", "7"); /* rev 8: b version 2 */
  CHECK_STR(getall(s, "b", NULL, 0), "b=7");
  CHECK_STR(getall(s, "b", "d", 0), "b=7,c=8");
  CHECK_STR(getall(s, "c", "\\0", 0), "c=8,d=2,e=1");
  CHECK_STR(getall(s, "\\0", "\\0", 0), "a=5,b=7,c=8,d=2,e=1");
  CHECK_STR(getall(s, "b", "b", 0), "");
  CHECK_STR(getall(s, "zz", NULL, 0), "");
  struct kt_range_resp r;
  struct kt_range_req q = RQ("\\0", "\\0", 0);
  q.limit = 2;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "a=5,b=7");
  CHECK(r.more);
  CHECK_EQ(r.count, 5);
  q.limit = 5;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK(!r.more);
  CHECK_EQ(r.count, 5);
  q.limit = -1; /* etcd: <= 0 is no limit */
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_EQ(r.n_kvs, 5);
  CHECK(!r.more);
  q.limit = 0;
  q.count_only = true;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_EQ(r.n_kvs, 0);
  CHECK_EQ(r.count, 5);
  q.count_only = false;
  q.keys_only = true;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "a=,b=,c=,d=,e=");
  q.keys_only = false;
  /* sort targets and orders */
  struct {
    int order, target;
    const char *want;
  } cases[] = {
      {KT_SORT_NONE, KT_SORT_KEY, "a=5,b=7,c=8,d=2,e=1"},
      {KT_SORT_ASCEND, KT_SORT_KEY, "a=5,b=7,c=8,d=2,e=1"},
      {KT_SORT_DESCEND, KT_SORT_KEY, "e=1,d=2,c=8,b=7,a=5"},
      {KT_SORT_NONE, KT_SORT_VALUE, "e=1,d=2,a=5,b=7,c=8"}, /* NONE + non-key = ascend */
      {KT_SORT_ASCEND, KT_SORT_VALUE, "e=1,d=2,a=5,b=7,c=8"},
      {KT_SORT_DESCEND, KT_SORT_VALUE, "c=8,b=7,a=5,d=2,e=1"},
      {KT_SORT_ASCEND, KT_SORT_VERSION, "a=5,d=2,e=1,b=7,c=8"},
      {KT_SORT_DESCEND, KT_SORT_VERSION, "c=8,b=7,a=5,d=2,e=1"},
      {KT_SORT_ASCEND, KT_SORT_CREATE, "a=5,b=7,c=8,d=2,e=1"},
      {KT_SORT_DESCEND, KT_SORT_CREATE, "e=1,d=2,c=8,b=7,a=5"},
      {KT_SORT_ASCEND, KT_SORT_MOD, "a=5,d=2,e=1,c=8,b=7"},
      {KT_SORT_DESCEND, KT_SORT_MOD, "b=7,c=8,e=1,d=2,a=5"},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
    q.sort_order = (uint8_t)cases[i].order;
    q.sort_target = (uint8_t)cases[i].target;
    CHECK_EQ(rng(s, q, &r), 0);
    if (strcmp(show(&r), cases[i].want) != 0)
      printf("case %zu: %s\n", i, show(&r));
    CHECK_STR(show(&r), cases[i].want);
  }
  /* sorted with a limit: sort everything, then cut */
  q.sort_order = KT_SORT_DESCEND;
  q.sort_target = KT_SORT_MOD;
  q.limit = 2;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "b=7,c=8");
  CHECK(r.more);
  CHECK_EQ(r.count, 5);
  /* etcd quirk: NONE + non-key target with a limit sorts only the first
   * limit+1 keys it fetched */
  q.sort_order = KT_SORT_NONE;
  q.sort_target = KT_SORT_VALUE;
  q.limit = 2;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "a=5,b=7"); /* of a=5,b=7,c=8 */
  q.sort_target = KT_SORT_KEY;
  q.limit = 0;
  /* min/max filters: count stays the total */
  q.min_mod_revision = 4;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "b=7,c=8,d=2,e=1");
  CHECK_EQ(r.count, 5);
  q.max_mod_revision = 5;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "d=2,e=1");
  q.min_mod_revision = q.max_mod_revision = 0;
  q.min_create_revision = 2;
  q.max_create_revision = 3;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "b=7,c=8");
  q.limit = 1;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "b=7");
  CHECK(r.more);
  /* past revision with options */
  q = RQ("\\0", "\\0", 5);
  q.sort_order = KT_SORT_DESCEND;
  q.sort_target = KT_SORT_VALUE;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_STR(show(&r), "a=5,b=4,c=3,d=2,e=1");
  /* invalid requests */
  q = RQ("", NULL, 0);
  CHECK_EQ(rng(s, q, &r), KT_EKEYEMPTY);
  q = RQ("b", "a", 0);
  CHECK_EQ(rng(s, q, &r), KT_EINVAL);
  q = RQ("a", NULL, 0);
  q.sort_order = 3;
  CHECK_EQ(rng(s, q, &r), KT_EINVAL);
  q.sort_order = 0;
  q.sort_target = 5;
  CHECK_EQ(rng(s, q, &r), KT_EINVAL);
  kt_mvcc_free(s);
}

TEST(put_options) {
  struct kt_mvcc *s = mk(0);
  struct kt_response_op out;
  struct kt_request_op op = PUT("a", "1");
  op.u.put.lease = 77;
  CHECK_EQ(apply(s, op, &out), 0);
  CHECK(!out.u.put.has_prev_kv);
  op = PUT("a", "2");
  op.u.put.prev_kv = true;
  CHECK_EQ(apply(s, op, &out), 0);
  CHECK(out.u.put.has_prev_kv);
  CHECK_BYTES(out.u.put.prev_kv.value.p, out.u.put.prev_kv.value.n, "1");
  CHECK_EQ(out.u.put.prev_kv.lease, 77);
  CHECK_EQ(out.u.put.prev_kv.mod_revision, 1);
  /* lease was replaced by 0 */
  op = PUT("a", "3");
  op.u.put.ignore_lease = false;
  op.u.put.lease = 5;
  CHECK_EQ(apply(s, op, &out), 0);
  op = PUT("a", NULL);
  op.u.put.ignore_value = true;
  CHECK_EQ(apply(s, op, &out), 0);
  struct kt_range_resp r;
  CHECK_EQ(rng(s, RQ("a", NULL, 0), &r), 0);
  CHECK_BYTES(r.kvs[0].value.p, r.kvs[0].value.n, "3");
  CHECK_EQ(r.kvs[0].lease, 0);
  CHECK_EQ(r.kvs[0].version, 4);
  op = PUT("a", "4");
  op.u.put.lease = 0;
  CHECK_EQ(apply(s, PUT("a", "x"), NULL), 0);
  op = PUT("a", "y");
  op.u.put.ignore_lease = true;
  CHECK_EQ(apply(s, op, &out), 0);
  /* errors */
  struct kt_err e = {0};
  op = PUT("missing", NULL);
  op.u.put.ignore_value = true;
  CHECK_EQ(kt_mvcc_apply(s, &op, &A, &out, &e), KT_ENOTFOUND);
  CHECK_STR(e.msg, "key not found");
  op.u.put.ignore_value = false;
  op.u.put.ignore_lease = true;
  CHECK_EQ(kt_mvcc_apply(s, &op, &A, &out, &e), KT_ENOTFOUND);
  op = PUT("a", "v");
  op.u.put.ignore_value = true;
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EINVAL);
  CHECK_STR(e.msg, "value is provided");
  op = PUT("a", NULL);
  op.u.put.ignore_lease = true;
  op.u.put.lease = 3;
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EINVAL);
  op = PUT("", "v");
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EKEYEMPTY);
  CHECK_EQ(kt_mvcc_revision(s), 6);
  kt_mvcc_free(s);
}

TEST(delete_range_prev_kvs) {
  struct kt_mvcc *s = mk(0);
  put(s, "a", "1");
  put(s, "b", "2");
  put(s, "c", "3");
  put(s, "d", "4");
  struct kt_response_op out;
  CHECK_EQ(apply(s, DEL("b", "d"), &out), 0);
  CHECK_EQ(out.u.del.deleted, 2);
  CHECK_EQ(out.u.del.n_prev_kvs, 2);
  CHECK_BYTES(out.u.del.prev_kvs[1].key.p, out.u.del.prev_kvs[1].key.n, "c");
  CHECK_BYTES(out.u.del.prev_kvs[1].value.p, out.u.del.prev_kvs[1].value.n, "3");
  CHECK_EQ(kt_mvcc_revision(s), 5);
  CHECK_EQ(nevs, 6);
  CHECK_EQ(evs[4].mod, 5);
  CHECK_EQ(evs[5].mod, 5);
  CHECK_STR(evs[5].key, "c");
  CHECK_STR(getall(s, "\\0", "\\0", 0), "a=1,d=4");
  CHECK_EQ(del(s, "b", "d"), 0);
  CHECK_EQ(kt_mvcc_revision(s), 5);
  CHECK_EQ(del(s, "\\0", "\\0"), 2);
  CHECK_EQ(kt_mvcc_keys(s), 0);
  CHECK_STR(getall(s, "\\0", "\\0", 4), "a=1,b=2,c=3,d=4");
  struct kt_err e;
  struct kt_request_op op = DEL("c", "a");
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EINVAL);
  kt_mvcc_free(s);
}

static struct kt_compare CMP(const char *k, int target, int result, int64_t iv, const char *v) {
  struct kt_compare c = {.result = (uint8_t)result, .target = (uint8_t)target, .key = B(k)};
  c.int_value = iv;
  c.value = B(v);
  return c;
}

/* One-compare txn whose success puts "ok"=1 and failure puts "ko"=1. */
static int
cmp1(struct kt_mvcc *s, struct kt_compare c) {
  struct kt_request_op succ = PUT("ok", "1"), fail = PUT("ko", "1");
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){&c, 1, &succ, &fail, 1, 1};
  struct kt_response_op out;
  int rc = apply(s, op, &out);
  if (rc)
    return -rc;
  return out.u.txn.succeeded;
}

TEST(txn_compares) {
  struct kt_mvcc *s = mk(0);
  put(s, "a", "m"); /* rev 1 */
  put(s, "a", "m"); /* rev 2, version 2 */
  struct kt_request_op lp = PUT("b", "z");
  lp.u.put.lease = 9;
  apply(s, lp, NULL); /* rev 3 */
  /* target x result on a present key */
  struct {
    const char *key;
    int target, result;
    int64_t iv;
    const char *v;
    int want;
  } cases[] = {
      {"a", KT_CMP_VALUE, KT_CMP_EQUAL, 0, "m", 1},
      {"a", KT_CMP_VALUE, KT_CMP_NOT_EQUAL, 0, "m", 0},
      {"a", KT_CMP_VALUE, KT_CMP_GREATER, 0, "l", 1},
      {"a", KT_CMP_VALUE, KT_CMP_LESS, 0, "ma", 1},
      {"a", KT_CMP_VALUE, KT_CMP_LESS, 0, "m", 0},
      {"a", KT_CMP_VERSION, KT_CMP_EQUAL, 2, NULL, 1},
      {"a", KT_CMP_VERSION, KT_CMP_NOT_EQUAL, 2, NULL, 0},
      {"a", KT_CMP_VERSION, KT_CMP_GREATER, 1, NULL, 1},
      {"a", KT_CMP_VERSION, KT_CMP_LESS, 2, NULL, 0},
      {"a", KT_CMP_CREATE, KT_CMP_EQUAL, 1, NULL, 1},
      {"a", KT_CMP_CREATE, KT_CMP_GREATER, 0, NULL, 1},
      {"a", KT_CMP_CREATE, KT_CMP_LESS, 1, NULL, 0},
      {"a", KT_CMP_CREATE, KT_CMP_NOT_EQUAL, 1, NULL, 0},
      {"a", KT_CMP_MOD, KT_CMP_EQUAL, 2, NULL, 1},
      {"a", KT_CMP_MOD, KT_CMP_LESS, 3, NULL, 1},
      {"a", KT_CMP_MOD, KT_CMP_GREATER, 2, NULL, 0},
      {"a", KT_CMP_MOD, KT_CMP_NOT_EQUAL, 1, NULL, 1},
      {"b", KT_CMP_LEASE, KT_CMP_EQUAL, 9, NULL, 1},
      {"b", KT_CMP_LEASE, KT_CMP_NOT_EQUAL, 9, NULL, 0},
      {"b", KT_CMP_LEASE, KT_CMP_GREATER, 8, NULL, 1},
      {"b", KT_CMP_LEASE, KT_CMP_LESS, 8, NULL, 0},
      /* missing key: zero KeyValue; a value compare always fails */
      {"zz", KT_CMP_VERSION, KT_CMP_EQUAL, 0, NULL, 1},
      {"zz", KT_CMP_CREATE, KT_CMP_EQUAL, 0, NULL, 1},
      {"zz", KT_CMP_MOD, KT_CMP_LESS, 1, NULL, 1},
      {"zz", KT_CMP_LEASE, KT_CMP_EQUAL, 0, NULL, 1},
      {"zz", KT_CMP_VERSION, KT_CMP_GREATER, 0, NULL, 0},
      {"zz", KT_CMP_VALUE, KT_CMP_EQUAL, 0, "", 0},
      {"zz", KT_CMP_VALUE, KT_CMP_NOT_EQUAL, 0, "x", 0},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
    int got = cmp1(s, CMP(cases[i].key, cases[i].target, cases[i].result, cases[i].iv, cases[i].v));
    if (got != cases[i].want)
      printf("case %zu got %d\n", i, got);
    CHECK_EQ(got, cases[i].want);
  }
  /* range compares: every key in [a, c) must match */
  struct kt_compare c = CMP("a", KT_CMP_CREATE, KT_CMP_GREATER, 0, NULL);
  c.range_end = B("c");
  CHECK_EQ(cmp1(s, c), 1);
  c.target = KT_CMP_VALUE;
  c.result = KT_CMP_EQUAL;
  c.value = B("m");
  CHECK_EQ(cmp1(s, c), 0); /* b=z */
  c.range_end = B("b");
  CHECK_EQ(cmp1(s, c), 1);
  c = CMP("x", KT_CMP_VERSION, KT_CMP_EQUAL, 0, NULL); /* empty range: zero values */
  c.range_end = B("y");
  CHECK_EQ(cmp1(s, c), 1);
  /* a deleted key compares as missing */
  del(s, "a", NULL);
  CHECK_EQ(cmp1(s, CMP("a", KT_CMP_VERSION, KT_CMP_EQUAL, 0, NULL)), 1);
  /* bad enums */
  struct kt_err e;
  c = CMP("a", 5, KT_CMP_EQUAL, 0, NULL);
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){&c, 1, NULL, NULL, 0, 0};
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EINVAL);
  c = CMP("a", KT_CMP_VERSION, 4, 0, NULL);
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EINVAL);
  c = CMP("", KT_CMP_VERSION, 0, 0, NULL);
  CHECK_EQ(kt_mvcc_check(s, &op, &e), KT_EKEYEMPTY);
  kt_mvcc_free(s);
}

TEST(txn_revisions_own_writes_nested) {
  struct kt_mvcc *s = mk(0);
  put(s, "a", "1"); /* rev 1 */
  nevs = 0;
  /* success: put b, get b (sees own write), delete a, get a..z, nested txn
   * whose compare sees the state before the txn (b missing) */
  struct kt_compare nc = CMP("b", KT_CMP_VERSION, KT_CMP_EQUAL, 0, NULL);
  struct kt_request_op nsucc[] = {PUT("c", "3")};
  struct kt_request_op nfail[] = {PUT("d", "4")};
  struct kt_request_op ops[5];
  ops[0] = PUT("b", "2");
  ops[1] = GET("b", NULL);
  ops[2] = DEL("a", NULL);
  ops[3] = GET("a", "z");
  ops[4] = (struct kt_request_op){.type = KT_OP_TXN};
  ops[4].u.txn = (struct kt_txn_req){&nc, 1, nsucc, nfail, 1, 1};
  struct kt_compare c = CMP("a", KT_CMP_VALUE, KT_CMP_EQUAL, 0, "1");
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){&c, 1, ops, NULL, 5, 0};
  struct kt_err e = {0};
  CHECK_EQ(kt_mvcc_check(s, &op, &e), 0);
  struct kt_response_op out;
  CHECK_EQ(apply(s, op, &out), 0);
  CHECK(out.u.txn.succeeded);
  CHECK_EQ(out.u.txn.n_responses, 5);
  struct kt_response_op *rs = out.u.txn.responses;
  CHECK_EQ(rs[1].u.range.n_kvs, 1);
  CHECK_EQ(rs[1].u.range.kvs[0].mod_revision, 2);
  CHECK_STR(show(&rs[3].u.range), "b=2");
  CHECK_EQ(rs[2].u.del.deleted, 1);
  CHECK(rs[4].u.txn.succeeded);
  CHECK_EQ(kt_mvcc_revision(s), 2);
  CHECK_STR(getall(s, "\\0", "\\0", 0), "b=2,c=3");
  CHECK_EQ(nevs, 3);
  CHECK_STR(evs[0].key, "b");
  CHECK_STR(evs[1].key, "a");
  CHECK_STR(evs[2].key, "c");
  /* sub revisions: iterate and look at the subs */
  /* read-only txn and a txn whose deletes match nothing: no revision */
  struct kt_request_op ro[] = {GET("b", NULL), DEL("nothing", NULL)};
  op.u.txn = (struct kt_txn_req){NULL, 0, ro, NULL, 2, 0};
  CHECK_EQ(apply(s, op, &out), 0);
  CHECK(out.u.txn.succeeded);
  CHECK_EQ(kt_mvcc_revision(s), 2);
  /* a range at a future revision inside a txn fails the whole txn */
  struct kt_request_op bad[] = {PUT("x", "1"), GET("b", NULL)};
  bad[1].u.range.revision = 3;
  op.u.txn = (struct kt_txn_req){NULL, 0, bad, NULL, 2, 0};
  CHECK_EQ(apply(s, op, &out), KT_EFUTUREREV);
  CHECK_EQ(kt_mvcc_revision(s), 2);
  CHECK_STR(getall(s, "x", NULL, 0), "");
  /* ignore_value on a missing key inside a txn */
  struct kt_request_op iv[] = {PUT("y", "1"), PUT("nokey", NULL)};
  iv[1].u.put.ignore_value = true;
  op.u.txn = (struct kt_txn_req){NULL, 0, iv, NULL, 2, 0};
  CHECK_EQ(apply(s, op, &out), KT_ENOTFOUND);
  CHECK_EQ(kt_mvcc_revision(s), 2);
  kt_mvcc_free(s);
}

TEST(txn_sub_revisions_in_snapshot_records) {
  struct kt_mvcc *s = mk(0);
  struct kt_request_op ops[] = {PUT("a", "1"), PUT("b", "2"), PUT("c", "3")};
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){NULL, 0, ops, NULL, 3, 0};
  CHECK_EQ(apply(s, op, NULL), 0);
  CHECK_EQ(kt_mvcc_revision(s), 1);
  struct kt_range_resp r;
  CHECK_EQ(rng(s, RQ("a", "\\0", 0), &r), 0);
  CHECK_EQ(r.n_kvs, 3);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(r.kvs[i].mod_revision, 1);
  kt_mvcc_free(s);
}

static int check_op(struct kt_mvcc *s, struct kt_request_op op) {
  struct kt_err e = {0};
  return kt_mvcc_check(s, &op, &e);
}
static struct kt_request_op TXN(struct kt_request_op *succ, uint32_t ns, struct kt_request_op *fail,
                                uint32_t nf) {
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){NULL, 0, succ, fail, ns, nf};
  return op;
}

TEST(txn_duplicate_keys_and_limits) {
  struct kt_mvcc *s = mk(0);
  struct kt_request_op two[] = {PUT("a", "1"), PUT("a", "2")};
  CHECK_EQ(check_op(s, TXN(two, 2, NULL, 0)), KT_EDUPKEY);
  struct kt_request_op pd[] = {PUT("b", "1"), DEL("a", "c")};
  CHECK_EQ(check_op(s, TXN(pd, 2, NULL, 0)), KT_EDUPKEY);
  /* etcd 3.4 quirk (checked with etcdctl): a from-key or all-keys delete
   * conflicts with nothing; the put applies, then the delete removes it */
  struct kt_request_op pdall[] = {PUT("b", "1"), DEL("a", "\\0")};
  CHECK_EQ(check_op(s, TXN(pdall, 2, NULL, 0)), 0);
  struct kt_response_op pout;
  CHECK_EQ(apply(s, TXN(pdall, 2, NULL, 0), &pout), 0);
  CHECK_EQ(pout.u.txn.responses[1].u.del.deleted, 1);
  CHECK_EQ(kt_mvcc_revision(s), 1);
  CHECK_STR(getall(s, "b", NULL, 0), "");
  /* ... and a put with ignore_value after such a delete finds no key: the
   * txn fails before any change (etcd 3.4 panics there) */
  CHECK_EQ(put(s, "b", "2"), 0); /* rev 2 */
  struct kt_request_op div[] = {DEL("a", "\\0"), PUT("b", NULL)};
  div[1].u.put.ignore_value = true;
  CHECK_EQ(check_op(s, TXN(div, 2, NULL, 0)), 0);
  CHECK_EQ(apply(s, TXN(div, 2, NULL, 0), NULL), KT_ENOTFOUND);
  CHECK_EQ(kt_mvcc_revision(s), 2);
  struct kt_request_op pdout[] = {PUT("c", "1"), DEL("a", "c")};
  CHECK_EQ(check_op(s, TXN(pdout, 2, NULL, 0)), 0);
  struct kt_request_op dd[] = {DEL("a", NULL), DEL("a", "c")};
  CHECK_EQ(check_op(s, TXN(dd, 2, NULL, 0)), 0);
  struct kt_request_op gp[] = {GET("a", NULL), PUT("a", "1")};
  CHECK_EQ(check_op(s, TXN(gp, 2, NULL, 0)), 0);
  /* then and else may write the same key */
  struct kt_request_op t1[] = {PUT("a", "1")}, e1[] = {PUT("a", "2")};
  CHECK_EQ(check_op(s, TXN(t1, 1, e1, 1)), 0);
  /* nested: a put in a nested txn and one at this level */
  struct kt_request_op lvl[] = {PUT("a", "1"), TXN(t1, 1, NULL, 0)};
  CHECK_EQ(check_op(s, TXN(lvl, 2, NULL, 0)), KT_EDUPKEY);
  struct kt_request_op lvl2[] = {TXN(t1, 1, NULL, 0), TXN(NULL, 0, e1, 1)};
  CHECK_EQ(check_op(s, TXN(lvl2, 2, NULL, 0)), KT_EDUPKEY);
  struct kt_request_op nd[] = {DEL("a", NULL)};
  struct kt_request_op lvl3[] = {TXN(nd, 1, NULL, 0), TXN(t1, 1, NULL, 0)};
  CHECK_EQ(check_op(s, TXN(lvl3, 2, NULL, 0)), KT_EDUPKEY); /* put after nested delete */
  struct kt_request_op lvl4[] = {DEL("a", NULL), TXN(t1, 1, NULL, 0)};
  CHECK_EQ(check_op(s, TXN(lvl4, 2, NULL, 0)), KT_EDUPKEY);
  /* etcd lets a nested put come before a later nested delete of the key:
   * both apply at one revision, the delete last */
  struct kt_request_op lvl5[] = {TXN(t1, 1, NULL, 0), TXN(nd, 1, NULL, 0)};
  CHECK_EQ(check_op(s, TXN(lvl5, 2, NULL, 0)), 0);
  CHECK_EQ(put(s, "a", "0"), 0); /* rev 3 */
  CHECK_EQ(apply(s, TXN(lvl5, 2, NULL, 0), NULL), 0);
  CHECK_EQ(kt_mvcc_revision(s), 4);
  CHECK_STR(getall(s, "a", NULL, 0), "");
  CHECK_STR(getall(s, "a", NULL, 3), "a=0");
  /* too many ops */
  static struct kt_request_op many[KT_MAX_TXN_OPS + 1];
  char keys[KT_MAX_TXN_OPS + 1][16];
  for (int i = 0; i <= KT_MAX_TXN_OPS; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    many[i] = PUT(keys[i], "v");
  }
  CHECK_EQ(check_op(s, TXN(many, KT_MAX_TXN_OPS, NULL, 0)), 0);
  CHECK_EQ(check_op(s, TXN(many, KT_MAX_TXN_OPS + 1, NULL, 0)), KT_ETOOMANYOPS);
  /* nested: the child gets what the parent left (128 - 2) */
  struct kt_request_op par[] = {TXN(many, 126, NULL, 0), GET("x", NULL)};
  CHECK_EQ(check_op(s, TXN(par, 2, NULL, 0)), 0);
  par[0] = TXN(many, 127, NULL, 0);
  CHECK_EQ(check_op(s, TXN(par, 2, NULL, 0)), KT_ETOOMANYOPS);
  /* bad op type, sizes */
  struct kt_request_op bad = {.type = 9};
  CHECK_EQ(check_op(s, bad), KT_EINVAL);
  kt_mvcc_free(s);
  struct kt_mvcc_config c = {.max_key_bytes = 4, .max_value_bytes = 4};
  s = kt_mvcc_new(&c);
  CHECK_EQ(check_op(s, PUT("abcd", "abcd")), 0);
  CHECK_EQ(check_op(s, PUT("abcde", "a")), KT_ETOOLARGE);
  CHECK_EQ(check_op(s, PUT("a", "abcde")), KT_ETOOLARGE);
  CHECK_EQ(put(s, "a", "abcde"), KT_ETOOLARGE);
  kt_mvcc_free(s);
}

TEST(compaction_semantics_and_slices) {
  struct kt_mvcc *s = mk(0);
  put(s, "a", "1");  /* 1 */
  put(s, "a", "2");  /* 2 */
  put(s, "b", "1");  /* 3 */
  del(s, "b", NULL); /* 4 */
  put(s, "c", "1");  /* 5 */
  put(s, "a", "3");  /* 6 */
  del(s, "c", NULL); /* 7 */
  put(s, "c", "2");  /* 8 */
  struct kt_err e;
  uint64_t size0 = kt_mvcc_size_bytes(s);
  CHECK_EQ(kt_mvcc_compact(s, 9, &e), KT_EFUTUREREV);
  CHECK_EQ(kt_mvcc_compact(s, 0, &e), KT_ECOMPACTED);
  uint64_t h_before = kt_mvcc_hash(s);
  CHECK_EQ(kt_mvcc_compact(s, 4, &e), 0);
  CHECK_EQ(kt_mvcc_compact(s, 4, &e), KT_ECOMPACTED);
  CHECK_EQ(kt_mvcc_compact(s, 3, &e), KT_ECOMPACTED);
  CHECK(kt_mvcc_hash(s) != h_before);
  /* a=1 (rev1) and b (rev3 put, rev4 tombstone) are gone at once */
  CHECK(kt_mvcc_size_bytes(s) < size0);
  uint64_t h_logical = kt_mvcc_hash(s);
  struct kt_range_resp r;
  CHECK_EQ(rng(s, RQ("a", NULL, 3), &r), KT_ECOMPACTED);
  CHECK_EQ(rng(s, RQ("a", NULL, 4), &r), 0); /* the compact revision itself is readable */
  CHECK_STR(getall(s, "\\0", "\\0", 4), "a=2");
  CHECK_STR(getall(s, "\\0", "\\0", 5), "a=2,c=1");
  CHECK_STR(getall(s, "\\0", "\\0", 7), "a=3");
  CHECK_STR(getall(s, "\\0", "\\0", 0), "a=3,c=2");
  CHECK(kt_mvcc_compact_pending(s));
  int steps = 0;
  while (kt_mvcc_compact_step(s, 1))
    steps++;
  CHECK(steps >= 3);
  CHECK(!kt_mvcc_compact_pending(s));
  CHECK_EQ(kt_mvcc_hash(s), h_logical);
  CHECK_STR(getall(s, "\\0", "\\0", 4), "a=2");
  CHECK_STR(getall(s, "\\0", "\\0", 5), "a=2,c=1");
  CHECK_STR(getall(s, "\\0", "\\0", 7), "a=3");
  /* b is gone entirely; versions survive compaction */
  CHECK_EQ(rng(s, RQ("a", NULL, 0), &r), 0);
  CHECK_EQ(r.kvs[0].version, 3);
  CHECK_EQ(r.kvs[0].create_revision, 1);
  /* compact at 7: c's tombstone at 7 is the newest <= 7: dropped */
  CHECK_EQ(kt_mvcc_compact(s, 7, &e), 0);
  while (kt_mvcc_compact_step(s, 1))
    ;
  CHECK_STR(getall(s, "\\0", "\\0", 7), "a=3");
  CHECK_STR(getall(s, "\\0", "\\0", 8), "a=3,c=2");
  /* compact at the current revision with everything deleted frees it all */
  del(s, "\\0", "\\0"); /* 9 */
  CHECK_EQ(kt_mvcc_compact(s, 9, &e), 0);
  CHECK_EQ(kt_mvcc_size_bytes(s), 0);
  while (kt_mvcc_compact_step(s, 100))
    ;
  CHECK_STR(getall(s, "\\0", "\\0", 9), "");
  CHECK_EQ(kt_mvcc_keys(s), 0);
  CHECK_EQ(kt_mvcc_revision(s), 9);
  /* a new compaction restarts the pass; interleaved writes are fine */
  for (int i = 0; i < 50; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%02d", i);
    put(s, k, "1");
    put(s, k, "2");
  }
  CHECK_EQ(kt_mvcc_compact(s, 30, &e), 0);
  kt_mvcc_compact_step(s, 3);
  CHECK_EQ(kt_mvcc_compact(s, 60, &e), 0);
  int n = 0;
  while (kt_mvcc_compact_step(s, 7)) {
    put(s, "k00", "x");
    n++;
  }
  CHECK(n >= 7);
  CHECK_EQ(rng(s, RQ("k00", "k99", 0), &r), 0);
  CHECK_EQ(r.count, 50);
  kt_mvcc_free(s);
}

TEST(quota_nospace) {
  /* each revision costs key + value + 64 */
  struct kt_mvcc *s = mk(1000);
  char v[200];
  memset(v, 'x', sizeof v - 1);
  v[sizeof v - 1] = 0;
  CHECK_EQ(put(s, "a", v), 0); /* 1 + 199 + 64 = 264 */
  CHECK_EQ(kt_mvcc_size_bytes(s), 264);
  CHECK_EQ(put(s, "b", v), 0); /* 528 */
  CHECK_EQ(put(s, "c", v), 0); /* 792 */
  CHECK(!kt_mvcc_nospace(s));
  CHECK_EQ(put(s, "d", v), KT_ENOSPACE);
  CHECK(kt_mvcc_nospace(s));
  CHECK_EQ(kt_mvcc_revision(s), 3);
  CHECK_EQ(put(s, "e", "1"), KT_ENOSPACE); /* small puts too while raised */
  struct kt_err e;
  struct kt_request_op p = PUT("e", "1");
  CHECK_EQ(kt_mvcc_check(s, &p, &e), KT_ENOSPACE);
  struct kt_request_op t1[] = {PUT("e", "1")};
  CHECK_EQ(apply(s, TXN(NULL, 0, t1, 1), NULL), KT_ENOSPACE);
  /* reads, deletes and compaction work */
  struct kt_range_resp rr;
  CHECK_EQ(rng(s, RQ("a", NULL, 0), &rr), 0);
  CHECK_EQ(rr.n_kvs, 1);
  CHECK_EQ(rr.kvs[0].value.n, 199);
  struct kt_request_op ro[] = {GET("a", NULL)};
  CHECK_EQ(apply(s, TXN(ro, 1, NULL, 0), NULL), 0);
  CHECK_EQ(del(s, "a", "c"), 2); /* rev 4 */
  CHECK_EQ(kt_mvcc_size_bytes(s), 792 + 2 * 65);
  CHECK_EQ(kt_mvcc_compact(s, 4, &e), 0);
  CHECK_EQ(kt_mvcc_size_bytes(s), 264);
  CHECK(kt_mvcc_nospace(s));
  kt_mvcc_disarm_nospace(s);
  CHECK_EQ(put(s, "d", v), 0);
  /* a txn whose taken branch puts past the quota raises it */
  struct kt_request_op big[] = {PUT("x", v), PUT("y", v), PUT("z", v)};
  CHECK_EQ(apply(s, TXN(big, 3, NULL, 0), NULL), KT_ENOSPACE);
  CHECK(kt_mvcc_nospace(s));
  CHECK_EQ(kt_mvcc_revision(s), 5);
  kt_mvcc_disarm_nospace(s);
  /* the untaken branch does not count */
  struct kt_compare c = CMP("d", KT_CMP_VERSION, KT_CMP_EQUAL, 1, NULL);
  struct kt_request_op op = TXN(t1, 1, big, 3);
  op.u.txn.compare = &c;
  op.u.txn.n_compare = 1;
  CHECK_EQ(apply(s, op, NULL), 0);
  CHECK(!kt_mvcc_nospace(s));
  kt_mvcc_free(s);
}

/* ---- snapshot round trip ---------------------------------------------------- */

struct sink {
  struct kt_mvcc *dst;
  int n, rc;
};
static int sink_rec(void *arg, const struct kt_kvrev *rec) {
  struct sink *k = arg;
  struct kt_err e;
  k->n++;
  k->rc = kt_mvcc_restore_rec(k->dst, rec, &e);
  return k->rc;
}

/* Copies s at its current revision into a new store, in slices of max_keys,
 * calling between() between slices. */
static struct kt_mvcc *clone(struct kt_mvcc *s, size_t max_keys, void (*between)(struct kt_mvcc *),
                             int *n_out) {
  struct kt_mvcc *d = kt_mvcc_new(NULL);
  int64_t at = kt_mvcc_revision(s), crev = kt_mvcc_compact_revision(s);
  struct kt_mvcc_cursor cur = {0};
  struct sink k = {d, 0, 0};
  struct kt_arena a = {0};
  int rc;
  while ((rc = kt_mvcc_iter(s, at, &cur, max_keys, &a, sink_rec, &k)) == 1)
    if (between)
      between(s);
  kt_assert(rc == 0 && k.rc == 0);
  kt_mvcc_restore_done(d, at, crev);
  kt_arena_free(&a);
  if (n_out)
    *n_out = k.n;
  return d;
}

static int between_n;
static void between_writes(struct kt_mvcc *s) {
  char k[16];
  snprintf(k, sizeof k, "k%03d", between_n++ % 40);
  put(s, k, "new");
  del(s, "k005", NULL);
}

TEST(snapshot_round_trip) {
  struct kt_mvcc *s = mk(0);
  for (int i = 0; i < 40; i++) {
    char k[16], v[16];
    snprintf(k, sizeof k, "k%03d", i);
    snprintf(v, sizeof v, "v%d", i);
    put(s, k, v);
    if (i % 3 == 0)
      put(s, k, "again");
    if (i % 5 == 0)
      del(s, k, NULL);
  }
  struct kt_err e;
  CHECK_EQ(kt_mvcc_compact(s, 20, &e), 0);
  kt_mvcc_compact_step(s, 5); /* partly done: must not matter */
  int64_t at = kt_mvcc_revision(s);
  uint64_t h = kt_mvcc_hash(s);
  uint64_t size = kt_mvcc_size_bytes(s);
  int n;
  between_n = 0;
  struct kt_mvcc *d = clone(s, 3, between_writes, &n);
  CHECK(n > 40);
  CHECK(between_n > 10);
  CHECK_EQ(kt_mvcc_hash(d), h);
  CHECK_EQ(kt_mvcc_size_bytes(d), size);
  CHECK_EQ(kt_mvcc_revision(d), at);
  CHECK_EQ(kt_mvcc_compact_revision(d), 20);
  for (int64_t rev = 20; rev <= at; rev++) {
    char want[2048];
    snprintf(want, sizeof want, "%s", getall(s, "\\0", "\\0", rev));
    CHECK_STR(getall(d, "\\0", "\\0", rev), want);
    struct kt_range_req q = RQ("\\0", "\\0", rev);
    q.sort_target = KT_SORT_MOD;
    struct kt_range_resp r1, r2;
    CHECK_EQ(rng(s, q, &r1), 0);
    CHECK_EQ(rng(d, q, &r2), 0);
    CHECK_EQ(r1.count, r2.count);
    for (uint32_t i = 0; i < r1.n_kvs; i++) {
      CHECK_EQ(r1.kvs[i].version, r2.kvs[i].version);
      CHECK_EQ(r1.kvs[i].create_revision, r2.kvs[i].create_revision);
      CHECK_EQ(r1.kvs[i].mod_revision, r2.kvs[i].mod_revision);
    }
  }
  CHECK_EQ(rng(d, RQ("a", NULL, 19), &(struct kt_range_resp){0}), KT_ECOMPACTED);
  /* the copy keeps working: writes, compaction, and same answers */
  CHECK_EQ(put(d, "k001", "z"), 0);
  CHECK_EQ(kt_mvcc_revision(d), at + 1);
  CHECK_EQ(kt_mvcc_compact(d, at, &e), 0);
  while (kt_mvcc_compact_step(d, 2))
    ;
  /* restore rejects records out of order */
  struct kt_mvcc *x = kt_mvcc_new(NULL);
  struct kt_kvrev r1 = {
      .key = B("b"), .value = B("1"), .create_revision = 1, .mod_revision = 1, .version = 1};
  struct kt_kvrev r0 = r1;
  r0.key = B("a");
  CHECK_EQ(kt_mvcc_restore_rec(x, &r1, &e), 0);
  CHECK_EQ(kt_mvcc_restore_rec(x, &r0, &e), KT_ECORRUPT);
  CHECK_EQ(kt_mvcc_restore_rec(x, &r1, &e), KT_ECORRUPT);
  kt_mvcc_free(x);
  kt_mvcc_free(d);
  kt_mvcc_free(s);
}

/* ---- randomized comparison with a reference model ----------------------------
 * The model is a plain array of every retained revision in apply order;
 * reads scan it. Compaction removes entries from it at once. */

struct mrev {
  char key[8], val[8];
  int64_t mod, sub, create, version, lease;
};
#define MMAX 20000
static struct mrev M[MMAX];
static int nM;
static int64_t m_rev, m_compact;
static const char *mkeys[] = {"ka", "kb", "kc", "kd", "ke", "kf", "kg", "kh", "ki", "kj"};
#define NK 10

static int m_at(const char *key, int64_t rev) { /* newest entry <= rev, or -1 */
  int f = -1;
  for (int i = 0; i < nM; i++)
    if (M[i].mod <= rev && strcmp(M[i].key, key) == 0)
      f = i;
  return f;
}
static int m_live(const char *key, int64_t rev) {
  int i = m_at(key, rev);
  return i >= 0 && M[i].version ? i : -1;
}
static bool m_in(const char *k, const char *key, const char *end) {
  if (!end)
    return strcmp(k, key) == 0;
  if (strcmp(end, "\\0") == 0)
    return strcmp(k, key) >= 0;
  return strcmp(k, key) >= 0 && strcmp(k, end) < 0;
}

struct mctx {
  int64_t changes;
};
static int64_t m_view(struct mctx *c) { return m_rev + (c->changes > 0); }

static void m_put(struct mctx *c, const struct kt_put_req *p) {
  char key[8];
  snprintf(key, sizeof key, "%.*s", (int)p->key.n, (const char *)p->key.p);
  int o = m_live(key, m_view(c));
  struct mrev r = {.mod = m_rev + 1, .sub = c->changes++};
  snprintf(r.key, sizeof r.key, "%s", key);
  snprintf(r.val, sizeof r.val, "%.*s", (int)p->value.n, (const char *)p->value.p);
  r.lease = p->lease;
  if (p->ignore_value)
    snprintf(r.val, sizeof r.val, "%s", M[o].val);
  if (p->ignore_lease)
    r.lease = M[o].lease;
  r.create = o >= 0 ? M[o].create : r.mod;
  r.version = o >= 0 ? M[o].version + 1 : 1;
  kt_assert(nM < MMAX);
  M[nM++] = r;
}
static int64_t m_del(struct mctx *c, const char *key, const char *end) {
  int64_t n = 0, view = m_view(c);
  for (int k = 0; k < NK; k++) {
    if (!m_in(mkeys[k], key, end) || m_live(mkeys[k], view) < 0)
      continue;
    struct mrev r = {.mod = m_rev + 1, .sub = c->changes++};
    snprintf(r.key, sizeof r.key, "%s", mkeys[k]);
    M[nM++] = r;
    n++;
  }
  return n;
}

/* Model range answer as "k=v@mod/ver" text plus count and more. */
static void m_range(const struct kt_range_req *q, int64_t view, char *out, size_t cap) {
  char key[8], end[8];
  snprintf(key, sizeof key, "%.*s", (int)q->key.n, (const char *)q->key.p);
  const char *endp = NULL;
  if (q->range_end.n) {
    if (q->range_end.n == 1 && q->range_end.p[0] == 0)
      endp = "\\0";
    else {
      snprintf(end, sizeof end, "%.*s", (int)q->range_end.n, (const char *)q->range_end.p);
      endp = end;
    }
  }
  int64_t rev = q->revision > 0 ? q->revision : view;
  int idx[NK], n = 0;
  for (int k = 0; k < NK; k++) {
    int i;
    if (m_in(mkeys[k], key, endp) && (i = m_live(mkeys[k], rev)) >= 0)
      idx[n++] = i;
  }
  int count = n;
  bool filters = q->min_mod_revision || q->max_mod_revision || q->min_create_revision ||
                 q->max_create_revision;
  if (q->count_only)
    n = 0;
  if (q->limit > 0 && q->sort_order == KT_SORT_NONE && !filters && n > q->limit + 1)
    n = (int)q->limit + 1;
  int m = 0;
  for (int i = 0; i < n; i++) {
    struct mrev *r = &M[idx[i]];
    if ((q->max_mod_revision && r->mod > q->max_mod_revision) ||
        (q->min_mod_revision && r->mod < q->min_mod_revision) ||
        (q->max_create_revision && r->create > q->max_create_revision) ||
        (q->min_create_revision && r->create < q->min_create_revision))
      continue;
    idx[m++] = idx[i];
  }
  n = m;
  int order = q->sort_order;
  if (order == KT_SORT_NONE && q->sort_target != KT_SORT_KEY)
    order = KT_SORT_ASCEND;
  if (order != KT_SORT_NONE) { /* stable insertion sort */
    for (int i = 1; i < n; i++) {
      for (int j = i; j > 0; j--) {
        struct mrev *a = &M[idx[j - 1]], *b = &M[idx[j]];
        int c = 0;
        switch (q->sort_target) {
        case KT_SORT_KEY:
          c = strcmp(a->key, b->key);
          break;
        case KT_SORT_VALUE:
          c = strcmp(a->val, b->val);
          break;
        case KT_SORT_VERSION:
          c = (a->version > b->version) - (a->version < b->version);
          break;
        case KT_SORT_CREATE:
          c = (a->create > b->create) - (a->create < b->create);
          break;
        default:
          c = (a->mod > b->mod) - (a->mod < b->mod);
          break;
        }
        if (order == KT_SORT_DESCEND)
          c = -c;
        if (c <= 0)
          break;
        int t = idx[j];
        idx[j] = idx[j - 1];
        idx[j - 1] = t;
      }
    }
  }
  bool more = false;
  if (q->limit > 0 && n > q->limit) {
    n = (int)q->limit;
    more = true;
  }
  size_t o = (size_t)snprintf(out, cap, "count=%d more=%d:", count, more);
  for (int i = 0; i < n; i++) {
    struct mrev *r = &M[idx[i]];
    o += (size_t)snprintf(out + o, cap - o, " %s=%s@%lld/%lld/%lld/%lld", r->key,
                          q->keys_only ? "" : r->val, (long long)r->mod, (long long)r->version,
                          (long long)r->create, (long long)r->lease);
  }
}
static void s_range_text(const struct kt_range_resp *r, char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "count=%lld more=%d:", (long long)r->count, r->more);
  for (uint32_t i = 0; i < r->n_kvs; i++) {
    const struct kt_kv *kv = &r->kvs[i];
    o += (size_t)snprintf(out + o, cap - o, " %.*s=%.*s@%lld/%lld/%lld/%lld", (int)kv->key.n,
                          (const char *)kv->key.p, (int)kv->value.n, (const char *)kv->value.p,
                          (long long)kv->mod_revision, (long long)kv->version,
                          (long long)kv->create_revision, (long long)kv->lease);
  }
}

static bool m_compare(const struct kt_compare *c) {
  char key[8], end[8];
  snprintf(key, sizeof key, "%.*s", (int)c->key.n, (const char *)c->key.p);
  const char *endp = NULL;
  if (c->range_end.n) {
    snprintf(end, sizeof end, "%.*s", (int)c->range_end.n, (const char *)c->range_end.p);
    endp = end;
  }
  bool any = false;
  struct mrev zero = {0};
  for (int k = 0; k <= NK; k++) {
    struct mrev *r;
    if (k < NK) {
      int i;
      if (!m_in(mkeys[k], key, endp) || (i = m_live(mkeys[k], m_rev)) < 0)
        continue;
      r = &M[i];
      any = true;
    } else {
      if (any)
        break;
      if (c->target == KT_CMP_VALUE)
        return false;
      r = &zero;
    }
    int res;
    char v[16];
    snprintf(v, sizeof v, "%.*s", (int)c->value.n, (const char *)c->value.p);
    switch (c->target) {
    case KT_CMP_VALUE:
      res = strcmp(r->val, v);
      break;
    case KT_CMP_VERSION:
      res = (r->version > c->int_value) - (r->version < c->int_value);
      break;
    case KT_CMP_CREATE:
      res = (r->create > c->int_value) - (r->create < c->int_value);
      break;
    case KT_CMP_MOD:
      res = (r->mod > c->int_value) - (r->mod < c->int_value);
      break;
    default:
      res = (r->lease > c->int_value) - (r->lease < c->int_value);
      break;
    }
    bool ok = c->result == KT_CMP_EQUAL     ? res == 0
              : c->result == KT_CMP_GREATER ? res > 0
              : c->result == KT_CMP_LESS    ? res < 0
                                            : res != 0;
    if (!ok)
      return false;
  }
  return true;
}

/* Random request generation; strings live in a per-op pool. */
static char pool[4096][8];
static int npool;
static const char *pstr(const char *fmt, int v) {
  char *p = pool[npool++ % 4096];
  snprintf(p, 8, fmt, v);
  return p;
}
static const char *rkey(struct kt_rng *g) { return mkeys[kt_rng_below(g, NK)]; }
static const char *rend(struct kt_rng *g, const char *key) {
  int x = (int)kt_rng_below(g, 4);
  if (x == 0)
    return NULL;
  if (x == 1)
    return "\\0";
  const char *e = rkey(g);
  return strcmp(e, key) >= 0 ? e : NULL;
}
static struct kt_request_op rput(struct kt_rng *g) {
  struct kt_request_op op = PUT(rkey(g), pstr("v%d", (int)kt_rng_below(g, 50)));
  op.u.put.lease = (int64_t)kt_rng_below(g, 3);
  op.u.put.prev_kv = kt_rng_below(g, 2);
  if (kt_rng_below(g, 8) == 0) {
    op.u.put.ignore_value = true;
    op.u.put.value = B(NULL);
  }
  if (kt_rng_below(g, 8) == 0) {
    op.u.put.ignore_lease = true;
    op.u.put.lease = 0;
  }
  return op;
}
static struct kt_range_req rrange(struct kt_rng *g, int64_t lo, int64_t hi) {
  const char *k = rkey(g);
  struct kt_range_req q = RQ(k, rend(g, k), 0);
  if (kt_rng_below(g, 2) && hi >= lo && lo > 0)
    q.revision = lo + (int64_t)kt_rng_below(g, (uint64_t)(hi - lo + 1));
  if (kt_rng_below(g, 3) == 0)
    q.limit = (int64_t)kt_rng_below(g, 5);
  if (kt_rng_below(g, 2)) {
    q.sort_order = (uint8_t)kt_rng_below(g, 3);
    q.sort_target = (uint8_t)kt_rng_below(g, 5);
  }
  q.keys_only = kt_rng_below(g, 6) == 0;
  q.count_only = kt_rng_below(g, 8) == 0;
  if (kt_rng_below(g, 5) == 0)
    q.min_mod_revision = (int64_t)kt_rng_below(g, (uint64_t)hi + 2);
  if (kt_rng_below(g, 5) == 0)
    q.max_mod_revision = (int64_t)kt_rng_below(g, (uint64_t)hi + 2);
  if (kt_rng_below(g, 5) == 0)
    q.min_create_revision = (int64_t)kt_rng_below(g, (uint64_t)hi + 2);
  if (kt_rng_below(g, 5) == 0)
    q.max_create_revision = (int64_t)kt_rng_below(g, (uint64_t)hi + 2);
  return q;
}
static struct kt_request_op rsimple(struct kt_rng *g) {
  int x = (int)kt_rng_below(g, 3);
  if (x == 0)
    return rput(g);
  if (x == 1) {
    const char *k = rkey(g);
    return DEL(k, rend(g, k));
  }
  struct kt_request_op op = {.type = KT_OP_RANGE};
  op.u.range = rrange(g, 0, 0); /* current view only: revision checks covered elsewhere */
  op.u.range.revision = 0;
  return op;
}
static struct kt_compare rcmp(struct kt_rng *g) {
  const char *k = rkey(g);
  struct kt_compare c = CMP(k, (int)kt_rng_below(g, 5), (int)kt_rng_below(g, 4),
                            (int64_t)kt_rng_below(g, 6), pstr("v%d", (int)kt_rng_below(g, 50)));
  if (kt_rng_below(g, 4) == 0) {
    const char *e = rkey(g);
    if (strcmp(e, k) > 0)
      c.range_end = B(e);
  }
  return c;
}
static struct kt_compare cmp_pool[64];
static struct kt_request_op op_pool[256];
static int ncmp, nops;
static struct kt_request_op rtxn(struct kt_rng *g, int depth) {
  struct kt_request_op op = {.type = KT_OP_TXN};
  uint32_t nc = (uint32_t)kt_rng_below(g, 3), ns = (uint32_t)kt_rng_below(g, 4),
           nf = (uint32_t)kt_rng_below(g, 3);
  op.u.txn.compare = &cmp_pool[ncmp];
  for (uint32_t i = 0; i < nc; i++)
    cmp_pool[ncmp++] = rcmp(g);
  op.u.txn.n_compare = nc;
  struct kt_request_op *br = &op_pool[nops];
  nops += (int)(ns + nf);
  for (uint32_t i = 0; i < ns + nf; i++)
    br[i] = depth < 1 && kt_rng_below(g, 6) == 0 ? rtxn(g, depth + 1) : rsimple(g);
  op.u.txn.success = br;
  op.u.txn.n_success = ns;
  op.u.txn.failure = br + ns;
  op.u.txn.n_failure = nf;
  return op;
}

/* Model apply of a txn; compares use the state before it. Returns text of
 * the responses (ranges and delete counts) for comparison. */
static bool m_txn_path_ok(const struct kt_txn_req *t, int64_t view);
static void m_txn(struct mctx *c, const struct kt_txn_req *t, char *out, size_t cap, size_t *o);
static bool m_txn_succ(const struct kt_txn_req *t) {
  for (uint32_t i = 0; i < t->n_compare; i++)
    if (!m_compare(&t->compare[i]))
      return false;
  return true;
}
/* ignore_value/ignore_lease keys must exist before the txn, on the path,
 * and not fall in a delete that runs before them */
static const struct kt_request_op *m_dels[256];
static int m_ndels;
static bool m_txn_path_ok(const struct kt_txn_req *t, int64_t view) {
  bool s = m_txn_succ(t);
  const struct kt_request_op *ops = s ? t->success : t->failure;
  uint32_t n = s ? t->n_success : t->n_failure;
  for (uint32_t i = 0; i < n; i++) {
    if (ops[i].type == KT_OP_PUT && (ops[i].u.put.ignore_value || ops[i].u.put.ignore_lease)) {
      char key[8];
      snprintf(key, sizeof key, "%.*s", (int)ops[i].u.put.key.n, (const char *)ops[i].u.put.key.p);
      if (m_live(key, view) < 0)
        return false;
      for (int d = 0; d < m_ndels; d++) {
        char dk[8], de[8];
        const struct kt_delete_req *dr = &m_dels[d]->u.del;
        snprintf(dk, sizeof dk, "%.*s", (int)dr->key.n, (const char *)dr->key.p);
        const char *endp = NULL;
        if (dr->range_end.n == 1 && dr->range_end.p[0] == 0)
          endp = "\\0";
        else if (dr->range_end.n) {
          snprintf(de, sizeof de, "%.*s", (int)dr->range_end.n, (const char *)dr->range_end.p);
          endp = de;
        }
        if (m_in(key, dk, endp))
          return false;
      }
    }
    if (ops[i].type == KT_OP_DELETE)
      m_dels[m_ndels++] = &ops[i];
    if (ops[i].type == KT_OP_TXN && !m_txn_path_ok(&ops[i].u.txn, view))
      return false;
  }
  return true;
}
/* Precomputed branch choices (compares see the state before the txn). */
static bool m_paths[64];
static int m_npaths, m_pathi;
static void m_collect_paths(const struct kt_txn_req *t) {
  bool s = m_txn_succ(t);
  m_paths[m_npaths++] = s;
  const struct kt_request_op *ops = s ? t->success : t->failure;
  uint32_t n = s ? t->n_success : t->n_failure;
  for (uint32_t i = 0; i < n; i++)
    if (ops[i].type == KT_OP_TXN)
      m_collect_paths(&ops[i].u.txn);
}
static void m_txn(struct mctx *c, const struct kt_txn_req *t, char *out, size_t cap, size_t *o) {
  bool s = m_paths[m_pathi++];
  *o += (size_t)snprintf(out + *o, cap - *o, "[%d", s);
  const struct kt_request_op *ops = s ? t->success : t->failure;
  uint32_t n = s ? t->n_success : t->n_failure;
  for (uint32_t i = 0; i < n; i++) {
    const struct kt_request_op *op = &ops[i];
    if (op->type == KT_OP_PUT) {
      m_put(c, &op->u.put);
      *o += (size_t)snprintf(out + *o, cap - *o, " put");
    } else if (op->type == KT_OP_DELETE) {
      char key[8], end[8];
      snprintf(key, sizeof key, "%.*s", (int)op->u.del.key.n, (const char *)op->u.del.key.p);
      const char *endp = NULL;
      if (op->u.del.range_end.n == 1 && op->u.del.range_end.p[0] == 0)
        endp = "\\0";
      else if (op->u.del.range_end.n) {
        snprintf(end, sizeof end, "%.*s", (int)op->u.del.range_end.n,
                 (const char *)op->u.del.range_end.p);
        endp = end;
      }
      *o += (size_t)snprintf(out + *o, cap - *o, " del=%lld", (long long)m_del(c, key, endp));
    } else if (op->type == KT_OP_RANGE) {
      char buf[1024];
      m_range(&op->u.range, m_view(c), buf, sizeof buf);
      *o += (size_t)snprintf(out + *o, cap - *o, " {%s}", buf);
    } else {
      m_txn(c, &op->u.txn, out, cap, o);
    }
  }
  *o += (size_t)snprintf(out + *o, cap - *o, "]");
}
static void s_txn_text(const struct kt_txn_resp *t, char *out, size_t cap, size_t *o) {
  *o += (size_t)snprintf(out + *o, cap - *o, "[%d", t->succeeded);
  for (uint32_t i = 0; i < t->n_responses; i++) {
    const struct kt_response_op *r = &t->responses[i];
    if (r->type == KT_OP_PUT) {
      *o += (size_t)snprintf(out + *o, cap - *o, " put");
    } else if (r->type == KT_OP_DELETE) {
      *o += (size_t)snprintf(out + *o, cap - *o, " del=%lld", (long long)r->u.del.deleted);
    } else if (r->type == KT_OP_RANGE) {
      char buf[1024];
      s_range_text(&r->u.range, buf, sizeof buf);
      *o += (size_t)snprintf(out + *o, cap - *o, " {%s}", buf);
    } else {
      s_txn_text(&r->u.txn, out, cap, o);
    }
  }
  *o += (size_t)snprintf(out + *o, cap - *o, "]");
}

static void m_do_compact(int64_t rev) {
  for (int k = 0; k < NK; k++) {
    int j = m_at(mkeys[k], rev);
    if (j < 0)
      continue;
    bool drop_j = M[j].version == 0;
    int o = 0;
    for (int i = 0; i < nM; i++) {
      bool same = strcmp(M[i].key, mkeys[k]) == 0;
      if (same && (i < j || (i == j && drop_j)))
        continue;
      M[o++] = M[i];
    }
    nM = o;
  }
  m_compact = rev;
}

static uint64_t m_size(void) {
  uint64_t n = 0;
  for (int i = 0; i < nM; i++)
    n += strlen(M[i].key) + strlen(M[i].val) + KT_MVCC_REV_OVERHEAD;
  return n;
}
static uint64_t m_keys(void) {
  uint64_t n = 0;
  for (int k = 0; k < NK; k++)
    n += m_live(mkeys[k], m_rev) >= 0;
  return n;
}

/* KT_SEED=n in the environment replays another seed. */
TEST(random_against_model) {
  struct kt_mvcc *s = mk(0);
  nM = 0;
  m_rev = m_compact = 0;
  struct kt_rng g;
  kt_rng_seed(&g, getenv("KT_SEED") ? strtoull(getenv("KT_SEED"), NULL, 10) : 20261122);
  char want[8192], got[8192];
  int n_txn = 0, n_succ = 0, n_dup = 0, n_ranges = 0;
  for (int step = 0; step < 6000; step++) {
    kt_arena_reset(&A);
    npool = ncmp = nops = 0;
    int x = (int)kt_rng_below(&g, 100);
    struct kt_err e = {0};
    struct kt_response_op out;
    nevs = 0;
    if (x < 35) { /* put */
      struct kt_request_op op = rput(&g);
      char key[8];
      snprintf(key, sizeof key, "%.*s", (int)op.u.put.key.n, (const char *)op.u.put.key.p);
      int o = m_live(key, m_rev);
      int rc = kt_mvcc_apply(s, &op, &A, &out, &e);
      if ((op.u.put.ignore_value || op.u.put.ignore_lease) && o < 0) {
        CHECK_EQ(rc, KT_ENOTFOUND);
        continue;
      }
      CHECK_EQ(rc, 0);
      CHECK_EQ(out.u.put.has_prev_kv, op.u.put.prev_kv && o >= 0);
      if (out.u.put.has_prev_kv)
        CHECK_EQ(out.u.put.prev_kv.mod_revision, M[o].mod);
      struct mctx c = {0};
      m_put(&c, &op.u.put);
      m_rev++;
      CHECK_EQ(nevs, 1);
      CHECK_EQ(evs[0].mod, m_rev);
    } else if (x < 50) { /* delete */
      const char *k = rkey(&g);
      struct kt_request_op op = DEL(k, rend(&g, k));
      CHECK_EQ(kt_mvcc_apply(s, &op, &A, &out, &e), 0);
      struct mctx c = {0};
      char key[8], end[8];
      snprintf(key, sizeof key, "%.*s", (int)op.u.del.key.n, (const char *)op.u.del.key.p);
      const char *endp = NULL;
      if (op.u.del.range_end.n == 1 && op.u.del.range_end.p[0] == 0)
        endp = "\\0";
      else if (op.u.del.range_end.n) {
        snprintf(end, sizeof end, "%.*s", (int)op.u.del.range_end.n,
                 (const char *)op.u.del.range_end.p);
        endp = end;
      }
      int64_t n = m_del(&c, key, endp);
      CHECK_EQ(out.u.del.deleted, n);
      CHECK_EQ(out.u.del.n_prev_kvs, n);
      CHECK_EQ(nevs, n);
      if (n)
        m_rev++;
    } else if (x < 70) { /* txn */
      struct kt_request_op op = rtxn(&g, 0);
      int crc = kt_mvcc_check(s, &op, &e);
      if (crc == KT_EDUPKEY) {
        n_dup++;
        CHECK_EQ(kt_mvcc_apply(s, &op, &A, &out, &e), KT_EDUPKEY);
        continue;
      }
      CHECK_EQ(crc, 0);
      n_txn++;
      int rc = kt_mvcc_apply(s, &op, &A, &out, &e);
      m_ndels = 0;
      if (!m_txn_path_ok(&op.u.txn, m_rev)) {
        CHECK_EQ(rc, KT_ENOTFOUND);
        continue;
      }
      CHECK_EQ(rc, 0);
      n_succ += out.u.txn.succeeded;
      m_npaths = m_pathi = 0;
      m_collect_paths(&op.u.txn);
      struct mctx c = {0};
      size_t o = 0;
      m_txn(&c, &op.u.txn, want, sizeof want, &o);
      o = 0;
      s_txn_text(&out.u.txn, got, sizeof got, &o);
      if (strcmp(want, got) != 0)
        printf("step %d txn\nwant %s\ngot  %s\n", step, want, got);
      CHECK_STR(got, want);
      CHECK_EQ(nevs, c.changes);
      if (c.changes)
        m_rev++;
    } else if (x < 75) { /* compact */
      if (m_rev > m_compact) {
        int64_t rev = m_compact + 1 + (int64_t)kt_rng_below(&g, (uint64_t)(m_rev - m_compact));
        CHECK_EQ(kt_mvcc_compact(s, rev, &e), 0);
        m_do_compact(rev);
      } else {
        CHECK_EQ(kt_mvcc_compact(s, m_rev, &e), m_rev == 0 ? KT_ECOMPACTED : KT_ECOMPACTED);
      }
    } else if (x < 80) {
      kt_mvcc_compact_step(s, 1 + kt_rng_below(&g, 3));
    } else { /* range */
      n_ranges++;
      struct kt_range_req q = rrange(&g, m_compact > 0 ? m_compact : 1, m_rev);
      if (kt_rng_below(&g, 20) == 0)
        q.revision = m_rev + 1;
      if (kt_rng_below(&g, 20) == 0 && m_compact > 1)
        q.revision = m_compact - 1;
      struct kt_range_resp r;
      int rc = kt_mvcc_range(s, &q, &A, &r, &e);
      if (q.revision > m_rev) {
        CHECK_EQ(rc, KT_EFUTUREREV);
        continue;
      }
      if (q.revision > 0 && q.revision < m_compact) {
        CHECK_EQ(rc, KT_ECOMPACTED);
        continue;
      }
      CHECK_EQ(rc, 0);
      m_range(&q, m_rev, want, sizeof want);
      s_range_text(&r, got, sizeof got);
      if (strcmp(want, got) != 0)
        printf("step %d range rev=%lld limit=%lld order=%d target=%d\nwant %s\ngot  %s\n", step,
               (long long)q.revision, (long long)q.limit, q.sort_order, q.sort_target, want, got);
      CHECK_STR(got, want);
    }
    CHECK_EQ(kt_mvcc_revision(s), m_rev);
    CHECK_EQ(kt_mvcc_size_bytes(s), m_size());
    CHECK_EQ(kt_mvcc_keys(s), m_keys());
    if (!kt_mvcc_compact_pending(s))
      CHECK_EQ(kt_mvcc_revs(s), nM); /* physical removal done exactly */
    if (step % 500 == 499) {         /* snapshot round trip and full history */
      struct kt_mvcc *d = clone(s, 2, NULL, NULL);
      CHECK_EQ(kt_mvcc_hash(d), kt_mvcc_hash(s));
      CHECK_EQ(kt_mvcc_size_bytes(d), m_size());
      for (int64_t rev = KT_MAX(m_compact, 1); rev <= m_rev; rev++) {
        struct kt_range_req q = RQ("\\0", "\\0", rev);
        struct kt_range_resp r;
        CHECK_EQ(kt_mvcc_range(d, &q, &A, &r, &e), 0);
        s_range_text(&r, got, sizeof got);
        m_range(&q, m_rev, want, sizeof want);
        CHECK_STR(got, want);
      }
      kt_mvcc_free(d);
    }
  }
  printf("# txns %d (succeeded %d, dup-rejected %d), ranges %d, final rev %lld\n", n_txn, n_succ,
         n_dup, n_ranges, (long long)m_rev);
  CHECK(n_txn > 500 && n_succ > 100 && n_succ < n_txn);
  kt_mvcc_free(s);
}

/* Results point into the store and must stay readable until the next apply:
 * a txn reads a key, then overwrites and deletes keys whose records are
 * replaced (ASan would flag a use after free). */
TEST(results_valid_until_next_apply) {
  struct kt_mvcc *s = mk(0);
  put(s, "a", "old-a");
  put(s, "b", "old-b");
  struct kt_request_op t1[] = {GET("a", "c"), PUT("a", "new-a"), DEL("b", NULL)};
  t1[2].u.del.prev_kv = true;
  struct kt_response_op out;
  CHECK_EQ(apply(s, TXN(t1, 3, NULL, 0), &out), 0);
  const struct kt_response_op *r = out.u.txn.responses;
  CHECK_STR(show(&r[0].u.range), "a=old-a,b=old-b");
  CHECK_BYTES(r[2].u.del.prev_kvs[0].value.p, r[2].u.del.prev_kvs[0].value.n, "old-b");
  struct kt_request_op p = PUT("a", "newer");
  p.u.put.prev_kv = true;
  CHECK_EQ(apply(s, p, &out), 0);
  CHECK_BYTES(out.u.put.prev_kv.value.p, out.u.put.prev_kv.value.n, "new-a");
  struct kt_range_resp rr;
  CHECK_EQ(rng(s, RQ("a", NULL, 1), &rr), 0); /* history values live until compaction */
  CHECK_BYTES(rr.kvs[0].value.p, rr.kvs[0].value.n, "old-a");
  kt_mvcc_free(s);
}

/* Restoring records that include revisions below the compact revision
 * (e.g. from a store whose physical compaction had not run) hides them at
 * once and queues their removal. */
TEST(restore_with_compacted_records) {
  struct kt_mvcc *s = kt_mvcc_new(NULL);
  struct kt_err e;
  struct kt_kvrev recs[] = {
      {.key = B("a"), .value = B("1"), .create_revision = 1, .mod_revision = 1, .version = 1},
      {.key = B("a"), .value = B("2"), .create_revision = 1, .mod_revision = 3, .version = 2},
      {.key = B("b"), .value = B("1"), .create_revision = 2, .mod_revision = 2, .version = 1},
      {.key = B("b"), .mod_revision = 4, .tombstone = true},
      {.key = B("c"), .value = B("x"), .create_revision = 5, .mod_revision = 5, .version = 1},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(recs); i++)
    CHECK_EQ(kt_mvcc_restore_rec(s, &recs[i], &e), 0);
  kt_mvcc_restore_done(s, 5, 4);
  CHECK(kt_mvcc_compact_pending(s));
  CHECK_EQ(kt_mvcc_keys(s), 2);
  CHECK_EQ(kt_mvcc_size_bytes(s), 2 * (2 + KT_MVCC_REV_OVERHEAD));
  {
    struct kt_range_resp r;
    CHECK_EQ(rng(s, RQ("\\0", "\\0", 4), &r), 0);
    CHECK_STR(show(&r), "a=2");
    CHECK_EQ(rng(s, RQ("a", NULL, 3), &r), KT_ECOMPACTED);
  }
  uint64_t h = kt_mvcc_hash(s);
  while (kt_mvcc_compact_step(s, 1))
    ;
  CHECK_EQ(kt_mvcc_revs(s), 2);
  CHECK_EQ(kt_mvcc_hash(s), h);
  CHECK_EQ(put(s, "b", "again"), 0);
  CHECK_EQ(kt_mvcc_revision(s), 6);
  struct kt_range_resp r;
  CHECK_EQ(rng(s, RQ("b", NULL, 0), &r), 0);
  CHECK_EQ(r.kvs[0].version, 1);
  CHECK_EQ(r.kvs[0].create_revision, 6);
  kt_mvcc_free(s);
}

/* Thousands of keys (a multi-level index): deletes, overwrites, compaction
 * in small slices that remove keys while the tree shrinks, and a sliced
 * snapshot round trip. */
TEST(many_keys_compaction_and_snapshot) {
  struct kt_mvcc *s = mk(0);
  enum { N = 3000 };
  char k[16];
  for (int i = 0; i < N; i++) {
    snprintf(k, sizeof k, "key%05d", (i * 7919) % N);
    CHECK_EQ(put(s, k, "v1"), 0);
  }
  for (int i = 0; i < N; i++) {
    snprintf(k, sizeof k, "key%05d", i);
    if (i % 3 == 0)
      CHECK_EQ(del(s, k, NULL), 1);
    else if (i % 2 == 0)
      CHECK_EQ(put(s, k, "v2"), 0);
  }
  int64_t rev = kt_mvcc_revision(s);
  int live = N - (N + 2) / 3;
  CHECK_EQ(kt_mvcc_keys(s), live);
  struct kt_err e;
  uint64_t h0 = kt_mvcc_hash(s);
  CHECK_EQ(kt_mvcc_compact(s, rev, &e), 0);
  uint64_t h1 = kt_mvcc_hash(s);
  CHECK(h1 != h0);
  int steps = 0;
  while (kt_mvcc_compact_step(s, 7))
    steps++;
  CHECK(steps >= N / 7 - 1);
  CHECK_EQ(kt_mvcc_hash(s), h1);
  CHECK_EQ(kt_mvcc_revs(s), live); /* one revision per live key, tombstones gone */
  CHECK_EQ(kt_mvcc_size_bytes(s), kt_mvcc_revs(s) * (8 + 2 + KT_MVCC_REV_OVERHEAD));
  struct kt_range_req q = RQ("\\0", "\\0", 0);
  q.count_only = true;
  struct kt_range_resp r;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_EQ(r.count, live);
  q = RQ("key01000", "key02000", 0);
  q.limit = 10;
  CHECK_EQ(rng(s, q, &r), 0);
  CHECK_EQ(r.n_kvs, 10);
  CHECK(r.more);
  CHECK_BYTES(r.kvs[0].key.p, r.kvs[0].key.n, "key01000"); /* 1000 % 3 != 0, even */
  CHECK_BYTES(r.kvs[0].value.p, r.kvs[0].value.n, "v2");
  CHECK_BYTES(r.kvs[1].key.p, r.kvs[1].key.n, "key01001");
  CHECK_BYTES(r.kvs[1].value.p, r.kvs[1].value.n, "v1");
  CHECK_BYTES(r.kvs[2].key.p, r.kvs[2].key.n, "key01003"); /* 1002 deleted */
  CHECK_EQ(r.count, 1000 - 333);
  between_n = 0;
  struct kt_mvcc *d = clone(s, 100, between_writes, NULL);
  CHECK_EQ(kt_mvcc_hash(d), h1);
  CHECK_EQ(kt_mvcc_keys(d), live);
  kt_mvcc_free(d);
  kt_mvcc_free(s);
}
