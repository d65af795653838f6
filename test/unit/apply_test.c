#include "../../core/apply.h"
#include "test.h"

#include <stdlib.h>

static struct kt_bytes B(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

/* A member's state machine as the node builds it: store at revision 1 whose
 * event hook is kt_sm_on_event, a lease manager, a watch hub. */
struct fix {
  struct kt_sm sm;
  struct kt_arena a;
};

static void fix_init(struct fix *f, uint64_t lease_seed) {
  memset(f, 0, sizeof *f);
  struct kt_mvcc_config mc = {.on_event = kt_sm_on_event, .event_arg = &f->sm};
  f->sm.store = kt_mvcc_new(&mc);
  kt_mvcc_restore_done(f->sm.store, 1, 0);
  struct kt_lease_cfg lc = {.id_seed = lease_seed};
  f->sm.leases = kt_lease_new(&lc);
  struct kt_watch_config wc = {0};
  f->sm.watches = kt_watch_hub_new(f->sm.store, &wc);
}

static void fix_free(struct fix *f) {
  kt_watch_hub_free(f->sm.watches);
  kt_lease_free(f->sm.leases);
  kt_mvcc_free(f->sm.store);
  kt_arena_free(&f->a);
}

static struct kt_req put_req(const char *k, const char *v, int64_t lease) {
  struct kt_req r = {.type = KT_MSG_PUT};
  r.u.op.type = KT_OP_PUT;
  r.u.op.u.put = (struct kt_put_req){.key = B(k), .value = B(v), .lease = lease, .prev_kv = true};
  return r;
}

static struct kt_req del_req(const char *k) {
  struct kt_req r = {.type = KT_MSG_DELETE};
  r.u.op.type = KT_OP_DELETE;
  r.u.op.u.del = (struct kt_delete_req){.key = B(k), .prev_kv = true};
  return r;
}

static struct kt_req lease_req(uint8_t type, int64_t id, int64_t ttl) {
  struct kt_req r = {.type = type};
  r.u.lease = (struct kt_lease_req){.id = id, .ttl = ttl};
  return r;
}

static int apply(struct fix *f, const struct kt_req *r, struct kt_sm_result *res,
                 struct kt_err *e) {
  kt_arena_reset(&f->a);
  return kt_sm_apply(&f->sm, r, 1000, &f->a, res, e);
}

/* The live value of key k ("" if absent), and its lease. */
static const char *get(struct fix *f, const char *k, int64_t *lease) {
  static char buf[64];
  struct kt_range_req q = {.key = B(k)};
  struct kt_range_resp out;
  struct kt_err e = {0};
  struct kt_arena a = {0};
  buf[0] = 0;
  if (lease)
    *lease = -1;
  if (kt_mvcc_range(f->sm.store, &q, &a, &out, &e) == 0 && out.n_kvs == 1) {
    snprintf(buf, sizeof buf, "%.*s", (int)out.kvs[0].value.n, (const char *)out.kvs[0].value.p);
    if (lease)
      *lease = out.kvs[0].lease;
  }
  kt_arena_free(&a);
  return buf;
}

TEST(put_delete_txn) {
  struct fix f;
  fix_init(&f, 1);
  struct kt_sm_result res;
  struct kt_err e;
  struct kt_req r = put_req("a", "1", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.type, KT_MSG_PUT);
  CHECK_EQ(res.revision, 2);
  CHECK(!res.op.u.put.has_prev_kv);
  r = put_req("a", "2", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.revision, 3);
  CHECK(res.op.u.put.has_prev_kv);
  CHECK_BYTES(res.op.u.put.prev_kv.value.p, res.op.u.put.prev_kv.value.n, "1");

  /* txn: if a == "2" then put b=x, get a; else delete a */
  struct kt_compare cmp = {
      .result = KT_CMP_EQUAL, .target = KT_CMP_VALUE, .key = B("a"), .value = B("2")};
  struct kt_request_op succ[2] = {{.type = KT_OP_PUT}, {.type = KT_OP_RANGE}};
  succ[0].u.put = (struct kt_put_req){.key = B("b"), .value = B("x")};
  succ[1].u.range = (struct kt_range_req){.key = B("a")};
  struct kt_request_op fail[1] = {{.type = KT_OP_DELETE}};
  fail[0].u.del = (struct kt_delete_req){.key = B("a")};
  struct kt_req t = {.type = KT_MSG_TXN};
  t.u.op.type = KT_OP_TXN;
  t.u.op.u.txn = (struct kt_txn_req){.compare = &cmp,
                                     .n_compare = 1,
                                     .success = succ,
                                     .n_success = 2,
                                     .failure = fail,
                                     .n_failure = 1};
  CHECK_EQ(apply(&f, &t, &res, &e), 0);
  CHECK_EQ(res.revision, 4);
  CHECK(res.op.u.txn.succeeded);
  CHECK_EQ(res.op.u.txn.n_responses, 2);
  CHECK_EQ(res.op.u.txn.responses[1].u.range.n_kvs, 1);
  CHECK_EQ(res.op.u.txn.responses[1].u.range.kvs[0].mod_revision, 3);
  CHECK_STR(get(&f, "b", NULL), "x");
  /* Same txn again with a compare that fails: the delete branch. */
  cmp.value = B("nope");
  CHECK_EQ(apply(&f, &t, &res, &e), 0);
  CHECK(!res.op.u.txn.succeeded);
  CHECK_EQ(res.revision, 5);
  CHECK_STR(get(&f, "a", NULL), "");

  r = del_req("b");
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.op.u.del.deleted, 1);
  CHECK_EQ(res.revision, 6);
  r = del_req("b"); /* nothing to delete: the revision stays */
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.op.u.del.deleted, 0);
  CHECK_EQ(res.revision, 6);

  /* The store's own errors come through with its message. */
  r = put_req("", "v", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_EKEYEMPTY);
  CHECK_EQ(e.code, KT_EKEYEMPTY);
  CHECK(e.msg[0]);
  CHECK_EQ(res.revision, 6);
  r = (struct kt_req){.type = KT_MSG_STATUS};
  CHECK_EQ(apply(&f, &r, &res, &e), KT_EUNSUPPORTED);
  fix_free(&f);
}

TEST(missing_lease_changes_nothing) {
  struct fix f;
  fix_init(&f, 1);
  struct kt_sm_result res;
  struct kt_err e;
  struct kt_req r = put_req("a", "1", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  uint64_t h = kt_mvcc_hash(f.sm.store);
  r = put_req("a", "2", 77);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_ELEASENOTFOUND);
  CHECK_EQ(e.code, KT_ELEASENOTFOUND);
  CHECK_STR(e.msg, "requested lease not found");
  CHECK_EQ(res.revision, 2);
  CHECK_EQ(kt_mvcc_hash(f.sm.store), h);
  CHECK_STR(get(&f, "a", NULL), "1");

  /* A txn whose NOT taken branch names the missing lease fails too (the
   * rule looks at both branches, as the node always did). */
  struct kt_request_op succ[1] = {{.type = KT_OP_PUT}};
  succ[0].u.put = (struct kt_put_req){.key = B("b"), .value = B("x")};
  struct kt_request_op fail[1] = {{.type = KT_OP_PUT}};
  fail[0].u.put = (struct kt_put_req){.key = B("c"), .value = B("y"), .lease = 77};
  struct kt_req t = {.type = KT_MSG_TXN};
  t.u.op.type = KT_OP_TXN;
  t.u.op.u.txn =
      (struct kt_txn_req){.success = succ, .n_success = 1, .failure = fail, .n_failure = 1};
  CHECK_EQ(apply(&f, &t, &res, &e), KT_ELEASENOTFOUND);
  CHECK_EQ(kt_mvcc_hash(f.sm.store), h);
  CHECK_STR(get(&f, "b", NULL), "");
  /* ignore_lease skips the rule (the store then keeps the key's lease). */
  r = put_req("a", "3", 77);
  r.u.op.u.put.lease = 0;
  r.u.op.u.put.ignore_lease = true;
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_STR(get(&f, "a", NULL), "3");
  fix_free(&f);
}

TEST(grant_attach_revoke_one_revision) {
  struct fix f;
  fix_init(&f, 1);
  struct kt_sm_result res;
  struct kt_err e;
  struct kt_req r = lease_req(KT_MSG_LEASE_GRANT, 0, 10);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK(res.lease_id > 0);
  CHECK_EQ(res.lease_ttl, 10);
  int64_t chosen = res.lease_id;
  r = lease_req(KT_MSG_LEASE_GRANT, 100, 5);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.lease_id, 100);
  CHECK_EQ(res.lease_ttl, 5);
  CHECK_EQ(res.revision, 1); /* grants do not touch the store */
  r = lease_req(KT_MSG_LEASE_GRANT, 100, 7);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_ELEASEEXISTS);
  CHECK_STR(e.msg, "lease already exists");
  r = lease_req(KT_MSG_LEASE_GRANT, 101, 0);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_EINVAL);
  CHECK_EQ(kt_lease_count(f.sm.leases), 2);

  /* k1..k3 on lease 100, k4 on none, k5 on the chosen lease. */
  const char *keys[] = {"k1", "k2", "k3"};
  for (int i = 0; i < 3; i++) {
    r = put_req(keys[i], "v", 100);
    CHECK_EQ(apply(&f, &r, &res, &e), 0);
    CHECK_EQ(kt_lease_of_key(f.sm.leases, B(keys[i])), 100);
  }
  r = put_req("k4", "v", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  r = put_req("k5", "v", chosen);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  /* Re-putting k3 without a lease detaches it (the event hook). */
  r = put_req("k3", "w", 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(kt_lease_of_key(f.sm.leases, B("k3")), 0);
  r = put_req("k3", "v", 100);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  int64_t rev = res.revision;

  struct kt_watch_opts wo = {.key = B("k"), .range_end = B("l")};
  uint64_t wid;
  struct kt_err we = {0};
  CHECK_EQ(kt_watch_create(f.sm.watches, &wo, NULL, &wid, &we), 0);

  r = lease_req(KT_MSG_LEASE_REVOKE, 100, 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.revision, rev + 1); /* three keys, ONE revision */
  CHECK_STR(get(&f, "k1", NULL), "");
  CHECK_STR(get(&f, "k2", NULL), "");
  CHECK_STR(get(&f, "k3", NULL), "");
  CHECK_STR(get(&f, "k4", NULL), "v");
  int64_t l5;
  CHECK_STR(get(&f, "k5", &l5), "v");
  CHECK_EQ(l5, chosen);
  CHECK(!kt_lease_exists(f.sm.leases, 100));
  CHECK_EQ(kt_lease_count(f.sm.leases), 1);

  /* The watcher got the three deletes, all at that revision, ready at once,
   * in key order (not the lease's attach order, k3 last: a snapshot load
   * attaches in key order, and every member must give the deletes the same
   * sub-revisions). */
  struct kt_event ev[8];
  struct kt_arena wa = {0};
  int64_t crev = 0;
  int got = kt_watch_take(f.sm.watches, wid, ev, 8, &wa, &crev);
  CHECK_EQ(got, 3);
  for (int i = 0; i < got; i++) {
    CHECK_EQ(ev[i].type, KT_EVENT_DELETE);
    CHECK_EQ(ev[i].kv.mod_revision, rev + 1);
    CHECK(ev[i].kv.key.n == 2 && !memcmp(ev[i].kv.key.p, keys[i], 2));
  }
  CHECK_EQ(kt_watch_revision(f.sm.watches), rev + 1);
  kt_arena_free(&wa);

  /* Revoking again: not found, nothing changes. A lease without keys is
   * revoked without a new revision. */
  r = lease_req(KT_MSG_LEASE_REVOKE, 100, 0);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_ELEASENOTFOUND);
  CHECK_STR(e.msg, "requested lease not found");
  CHECK_EQ(res.revision, rev + 1);
  r = lease_req(KT_MSG_LEASE_GRANT, 200, 5);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  r = lease_req(KT_MSG_LEASE_REVOKE, 200, 0);
  CHECK_EQ(apply(&f, &r, &res, &e), 0);
  CHECK_EQ(res.revision, rev + 1);
  /* A put naming the revoked lease now fails. */
  r = put_req("k1", "v", 100);
  CHECK_EQ(apply(&f, &r, &res, &e), KT_ELEASENOTFOUND);
  fix_free(&f);
}

TEST(compaction) {
  struct fix f;
  fix_init(&f, 1);
  struct kt_sm_result res;
  struct kt_err e;
  for (int i = 0; i < 5; i++) {
    struct kt_req r = put_req("a", "v", 0);
    CHECK_EQ(apply(&f, &r, &res, &e), 0);
  }
  CHECK_EQ(res.revision, 6);
  struct kt_req c = {.type = KT_MSG_COMPACT};
  c.u.compact.revision = 4;
  CHECK_EQ(apply(&f, &c, &res, &e), 0);
  CHECK_EQ(kt_mvcc_compact_revision(f.sm.store), 4);
  CHECK_EQ(res.revision, 6);
  struct kt_range_req q = {.key = B("a"), .revision = 3};
  struct kt_range_resp out;
  struct kt_err re = {0};
  CHECK_EQ(kt_mvcc_range(f.sm.store, &q, &f.a, &out, &re), KT_ECOMPACTED);
  c.u.compact.revision = 4;
  CHECK_EQ(apply(&f, &c, &res, &e), KT_ECOMPACTED);
  CHECK_EQ(e.code, KT_ECOMPACTED);
  c.u.compact.revision = 7;
  CHECK_EQ(apply(&f, &c, &res, &e), KT_EFUTUREREV);
  fix_free(&f);
}

/* A random committed request over a few keys and leases (txns nest one
 * compare and up to two ops per branch). Bytes point into static strings. */
static const char *const KEYS[] = {"a", "b", "c", "d", "e"};
static const char *const VALS[] = {"0", "1", "2", "3"};

static void rand_simple(struct kt_rng *g, struct kt_request_op *op) {
  int k = (int)kt_rng_below(g, 5);
  switch (kt_rng_below(g, 3)) {
  case 0:
    op->type = KT_OP_PUT;
    op->u.put = (struct kt_put_req){.key = B(KEYS[k]),
                                    .value = B(VALS[kt_rng_below(g, 4)]),
                                    .lease = (int64_t)kt_rng_below(g, 4) * 10};
    break;
  case 1:
    op->type = KT_OP_DELETE;
    op->u.del = (struct kt_delete_req){.key = B(KEYS[k])};
    break;
  default:
    op->type = KT_OP_RANGE;
    op->u.range = (struct kt_range_req){.key = B(KEYS[k])};
  }
}

struct rand_req {
  struct kt_req r;
  struct kt_compare cmp;
  struct kt_request_op succ[1], fail[1];
};

static void rand_req(struct kt_rng *g, struct rand_req *q, int64_t rev) {
  memset(q, 0, sizeof *q);
  uint64_t kind = kt_rng_below(g, 10);
  if (kind < 4) {
    rand_simple(g, &q->r.u.op);
    if (q->r.u.op.type == KT_OP_RANGE) { /* not a committed type: a put instead */
      q->r.u.op.type = KT_OP_PUT;
      q->r.u.op.u.put = (struct kt_put_req){.key = B("z"), .value = B("z")};
    }
    q->r.type = q->r.u.op.type;
  } else if (kind < 7) {
    q->r.type = KT_MSG_TXN;
    q->r.u.op.type = KT_OP_TXN;
    q->cmp = (struct kt_compare){.result = (uint8_t)kt_rng_below(g, 4),
                                 .target = KT_CMP_VALUE,
                                 .key = B(KEYS[kt_rng_below(g, 5)]),
                                 .value = B(VALS[kt_rng_below(g, 4)])};
    rand_simple(g, &q->succ[0]);
    rand_simple(g, &q->fail[0]);
    q->r.u.op.u.txn = (struct kt_txn_req){.compare = &q->cmp,
                                          .n_compare = 1,
                                          .success = q->succ,
                                          .n_success = 1,
                                          .failure = q->fail,
                                          .n_failure = 1};
  } else if (kind < 8) {
    q->r = lease_req(KT_MSG_LEASE_GRANT, (int64_t)kt_rng_below(g, 4) * 10, 5);
  } else if (kind < 9) {
    q->r = lease_req(KT_MSG_LEASE_REVOKE, (int64_t)kt_rng_below(g, 4) * 10, 0);
  } else {
    q->r.type = KT_MSG_COMPACT;
    q->r.u.compact.revision = rev > 3 ? rev - (int64_t)kt_rng_below(g, 3) : rev + 1;
  }
}

struct kv_dump {
  char s[4096];
  size_t n;
};
static int dump_rec(void *arg, const struct kt_kvrev *rec) {
  struct kv_dump *d = arg;
  int w =
      snprintf(d->s + d->n, sizeof d->s - d->n, "%.*s=%.*s@%lld/%lld/%lld/%lld%s;", (int)rec->key.n,
               (const char *)rec->key.p, (int)rec->value.n, (const char *)rec->value.p,
               (long long)rec->mod_revision, (long long)rec->create_revision,
               (long long)rec->version, (long long)rec->lease, rec->tombstone ? "T" : "");
  if (w > 0 && (size_t)w < sizeof d->s - d->n)
    d->n += (size_t)w;
  return 0;
}

/* Every live key at the current revision, as text. */
static void dump(struct fix *f, struct kv_dump *d) {
  d->n = 0;
  d->s[0] = 0;
  struct kt_bytes zero = {(const uint8_t *)"", 1}; /* "\0": every key */
  struct kt_range_req q = {.key = zero, .range_end = zero};
  struct kt_range_resp out;
  struct kt_err e = {0};
  kt_arena_reset(&f->a);
  if (kt_mvcc_range(f->sm.store, &q, &f->a, &out, &e))
    return;
  for (uint32_t i = 0; i < out.n_kvs; i++) {
    struct kt_kvrev r = {.key = out.kvs[i].key,
                         .value = out.kvs[i].value,
                         .create_revision = out.kvs[i].create_revision,
                         .mod_revision = out.kvs[i].mod_revision,
                         .version = out.kvs[i].version,
                         .lease = out.kvs[i].lease};
    dump_rec(d, &r);
  }
}

TEST(same_requests_same_state) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    struct fix f1, f2;
    fix_init(&f1, 42);
    fix_init(&f2, 42);
    struct kt_rng g;
    kt_rng_seed(&g, seed);
    int ok = 0, failed = 0;
    for (int i = 0; i < 400; i++) {
      struct rand_req q;
      rand_req(&g, &q, kt_mvcc_revision(f1.sm.store));
      struct kt_sm_result r1, r2;
      struct kt_err e1, e2;
      int rc1 = apply(&f1, &q.r, &r1, &e1);
      int rc2 = apply(&f2, &q.r, &r2, &e2);
      CHECK_EQ(rc1, rc2);
      CHECK_STR(e1.msg, e2.msg);
      CHECK_EQ(r1.revision, r2.revision);
      CHECK_EQ(r1.lease_id, r2.lease_id);
      if (rc1 == 0 && (q.r.type == KT_MSG_TXN))
        CHECK_EQ(r1.op.u.txn.succeeded, r2.op.u.txn.succeeded);
      if (rc1)
        failed++;
      else
        ok++;
    }
    /* The generator exercises both outcomes. */
    CHECK(ok > 100);
    CHECK(failed > 10);
    CHECK(kt_mvcc_revision(f1.sm.store) > 50);
    CHECK_EQ(kt_mvcc_hash(f1.sm.store), kt_mvcc_hash(f2.sm.store));
    CHECK_EQ(kt_mvcc_compact_revision(f1.sm.store), kt_mvcc_compact_revision(f2.sm.store));
    CHECK_EQ(kt_lease_count(f1.sm.leases), kt_lease_count(f2.sm.leases));
    static struct kv_dump d1, d2;
    dump(&f1, &d1);
    dump(&f2, &d2);
    CHECK(d1.n > 0);
    CHECK_STR(d1.s, d2.s);
    /* The comparison can tell states apart: one more put on one side. */
    struct kt_req extra = put_req("a", "different", 0);
    struct kt_sm_result rx;
    struct kt_err ex;
    CHECK_EQ(apply(&f2, &extra, &rx, &ex), 0);
    CHECK(kt_mvcc_hash(f1.sm.store) != kt_mvcc_hash(f2.sm.store));
    dump(&f2, &d2);
    CHECK(strcmp(d1.s, d2.s) != 0);
    fix_free(&f1);
    fix_free(&f2);
  }
}
