#include "../../core/lease.h"
#include "test.h"

#include <stdlib.h>

static struct kt_bytes B(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

static struct kt_lease_mgr *
mk(uint64_t seed) {
  struct kt_lease_cfg c = {.id_seed = seed};
  return kt_lease_new(&c);
}

struct keylist {
  int n;
  char k[64][16];
};
static void collect_key(void *arg, struct kt_bytes key) {
  struct keylist *kl = arg;
  if (kl->n < 64) {
    snprintf(kl->k[kl->n], 16, "%.*s", (int)key.n, (const char *)key.p);
    kl->n++;
  }
}

struct idlist {
  size_t n;
  int64_t id[4096], ttl[4096];
};
static void collect_id(void *arg, int64_t id, int64_t ttl) {
  struct idlist *l = arg;
  if (l->n < 4096) {
    l->id[l->n] = id;
    l->ttl[l->n] = ttl;
  }
  l->n++;
}

TEST(grant_revoke_errors) {
  struct kt_lease_mgr *m = mk(1);
  int64_t id = 5, ttl = 10;
  CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  CHECK_EQ(id, 5);
  CHECK_EQ(ttl, 10);
  ttl = 3;
  CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), KT_ELEASEEXISTS);
  int64_t id2 = 6;
  ttl = 0;
  CHECK_EQ(kt_lease_grant(m, &id2, &ttl, 0), KT_EINVAL);
  ttl = -1;
  CHECK_EQ(kt_lease_grant(m, &id2, &ttl, 0), KT_EINVAL);
  ttl = KT_LEASE_MAX_TTL_S + 1;
  CHECK_EQ(kt_lease_grant(m, &id2, &ttl, 0), KT_EINVAL);
  ttl = KT_LEASE_MAX_TTL_S;
  CHECK_EQ(kt_lease_grant(m, &id2, &ttl, 0), 0);
  int64_t neg = -4;
  ttl = 5;
  CHECK_EQ(kt_lease_grant(m, &neg, &ttl, 0), KT_EINVAL);
  int64_t zero = 0;
  CHECK_EQ(kt_lease_grant(m, &zero, &ttl, 0), 0);
  CHECK(zero > 0 && zero != 5 && zero != 6);
  CHECK_EQ(kt_lease_count(m), 3);
  CHECK_EQ(kt_lease_revoke(m, 5), 0);
  CHECK_EQ(kt_lease_revoke(m, 5), KT_ELEASENOTFOUND);
  CHECK_EQ(kt_lease_revoke(m, 12345), KT_ELEASENOTFOUND);
  CHECK(!kt_lease_exists(m, 5));
  CHECK(kt_lease_exists(m, 6));
  CHECK_EQ(kt_lease_count(m), 2);
  struct kt_lease_info info;
  CHECK_EQ(kt_lease_ttl(m, 5, 0, &info), KT_ELEASENOTFOUND);
  kt_lease_free(m);

  /* min TTL raises a small grant, as etcd's minTTL. */
  struct kt_lease_cfg c = {.min_ttl_s = 5, .max_ttl_s = 100};
  m = kt_lease_new(&c);
  id = 1;
  ttl = 2;
  CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  CHECK_EQ(ttl, 5);
  id = 2;
  ttl = 101;
  CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), KT_EINVAL);
  kt_lease_free(m);
}

TEST(attach_detach_move_keys) {
  struct kt_lease_mgr *m = mk(1);
  int64_t a = 1, b = 2, ttl = 10;
  CHECK_EQ(kt_lease_grant(m, &a, &ttl, 0), 0);
  CHECK_EQ(kt_lease_grant(m, &b, &ttl, 0), 0);
  CHECK_EQ(kt_lease_attach(m, 3, B("x")), KT_ELEASENOTFOUND);
  CHECK_EQ(kt_lease_of_key(m, B("x")), 0);
  CHECK_EQ(kt_lease_attach(m, 1, B("x")), 0);
  CHECK_EQ(kt_lease_attach(m, 1, B("y")), 0);
  CHECK_EQ(kt_lease_attach(m, 1, B("x")), 0); /* idempotent */
  CHECK_EQ(kt_lease_attach(m, 2, B("z")), 0);
  CHECK_EQ(kt_lease_attach(m, 1, B("")), 0); /* empty bytes are still a key here */
  struct kt_lease_info info;
  CHECK_EQ(kt_lease_ttl(m, 1, 0, &info), 0);
  CHECK_EQ(info.nkeys, 3);
  CHECK_EQ(info.granted_ttl_s, 10);
  CHECK_EQ(info.remaining_ttl_s, -1); /* follower */
  CHECK_EQ(kt_lease_detach(m, B("")), 1);
  /* Re-put with another lease moves the key. */
  CHECK_EQ(kt_lease_attach(m, 2, B("x")), 0);
  CHECK_EQ(kt_lease_of_key(m, B("x")), 2);
  struct keylist kl = {0};
  CHECK_EQ(kt_lease_keys(m, 1, collect_key, &kl), 0);
  CHECK_EQ(kl.n, 1);
  CHECK_STR(kl.k[0], "y");
  kl.n = 0;
  CHECK_EQ(kt_lease_keys(m, 2, collect_key, &kl), 0);
  CHECK_EQ(kl.n, 2);
  CHECK_STR(kl.k[0], "x"); /* most recent first */
  CHECK_STR(kl.k[1], "z");
  CHECK_EQ(kt_lease_keys(m, 9, collect_key, &kl), KT_ELEASENOTFOUND);
  /* Put with lease 0 detaches; deleting an unattached key is a no-op. */
  CHECK_EQ(kt_lease_attach(m, 0, B("z")), 0);
  CHECK_EQ(kt_lease_of_key(m, B("z")), 0);
  CHECK_EQ(kt_lease_detach(m, B("nope")), 0);
  CHECK_EQ(kt_lease_detach(m, B("y")), 1);
  CHECK_EQ(kt_lease_ttl(m, 1, 0, &info), 0);
  CHECK_EQ(info.nkeys, 0);
  /* Revoke drops the lease's keys. */
  CHECK_EQ(kt_lease_revoke(m, 2), 0);
  CHECK_EQ(kt_lease_of_key(m, B("x")), 0);
  CHECK_EQ(kt_lease_attach(m, 1, B("x")), 0);
  CHECK_EQ(kt_lease_of_key(m, B("x")), 1);
  kt_lease_free(m); /* frees attached keys (ASan checks) */
}

TEST(list_sorted_by_id) {
  struct kt_lease_mgr *m = mk(1);
  int64_t ids[] = {50, 3, 7, 1000, 2};
  for (size_t i = 0; i < KT_ARRAY_LEN(ids); i++) {
    int64_t id = ids[i], ttl = (int64_t)i + 1;
    CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  }
  struct idlist l = {0};
  kt_lease_each(m, collect_id, &l);
  CHECK_EQ(l.n, 5);
  int64_t want[] = {2, 3, 7, 50, 1000}, wttl[] = {5, 2, 3, 1, 4};
  for (int i = 0; i < 5; i++) {
    CHECK_EQ(l.id[i], want[i]);
    CHECK_EQ(l.ttl[i], wttl[i]);
  }
  kt_lease_free(m);
}

TEST(ttl_remaining_on_leader) {
  struct kt_lease_mgr *m = mk(1);
  kt_lease_promote(m, 1000, 0);
  int64_t id = 1, ttl = 10;
  CHECK_EQ(kt_lease_grant(m, &id, &ttl, 1000), 0);
  struct kt_lease_info info;
  CHECK_EQ(kt_lease_ttl(m, 1, 1000, &info), 0);
  CHECK_EQ(info.remaining_ms, 10000);
  CHECK_EQ(info.remaining_ttl_s, 10);
  CHECK_EQ(kt_lease_ttl(m, 1, 4500, &info), 0);
  CHECK_EQ(info.remaining_ttl_s, 6);
  CHECK_EQ(info.remaining_ms, 6500);
  CHECK_EQ(kt_lease_next_expiry_ms(m), 11000);
  CHECK_EQ(kt_lease_ttl(m, 1, 20000, &info), 0);
  CHECK_EQ(info.remaining_ms, 0);
  kt_lease_demote(m);
  CHECK_EQ(kt_lease_next_expiry_ms(m), INT64_MAX);
  CHECK_EQ(kt_lease_ttl(m, 1, 4500, &info), 0);
  CHECK_EQ(info.remaining_ms, -1);
  kt_lease_free(m);
}

/* Applies the same op list to a manager and returns the granted ids. */
static void run_ops(struct kt_lease_mgr *m, int64_t *out, int n) {
  for (int i = 0; i < n; i++) {
    int64_t id = 0, ttl = 1 + i % 7;
    kt_assert(kt_lease_grant(m, &id, &ttl, 0) == 0);
    out[i] = id;
    char k[16];
    snprintf(k, sizeof k, "k%d", i % 13);
    kt_lease_attach(m, id, B(k));
    if (i % 5 == 4)
      kt_lease_revoke(m, out[i - 2]);
  }
}

TEST(determinism_same_ops_same_state) {
  struct kt_lease_mgr *a = mk(99), *b = mk(99), *c = mk(100);
  int64_t ia[200], ib[200], ic[200];
  /* b is a leader, a a follower: expiry timers must not change the applied state. */
  kt_lease_promote(b, 0, 0);
  run_ops(a, ia, 200);
  run_ops(b, ib, 200);
  run_ops(c, ic, 200);
  CHECK(memcmp(ia, ib, sizeof ia) == 0);
  CHECK(memcmp(ia, ic, sizeof ia) != 0);
  static struct idlist la, lb;
  memset(&la, 0, sizeof la);
  memset(&lb, 0, sizeof lb);
  kt_lease_each(a, collect_id, &la);
  kt_lease_each(b, collect_id, &lb);
  CHECK_EQ(la.n, lb.n);
  CHECK_EQ(la.n, 160);
  for (size_t i = 0; i < la.n; i++) {
    CHECK_EQ(la.id[i], lb.id[i]);
    CHECK_EQ(la.ttl[i], lb.ttl[i]);
    struct keylist ka = {0}, kb = {0};
    kt_lease_keys(a, la.id[i], collect_key, &ka);
    kt_lease_keys(b, lb.id[i], collect_key, &kb);
    CHECK_EQ(ka.n, kb.n);
    for (int j = 0; j < ka.n; j++)
      CHECK_STR(ka.k[j], kb.k[j]);
  }
  kt_lease_free(a);
  kt_lease_free(b);
  kt_lease_free(c);
}

TEST(expiry_order_and_bounded_batches) {
  struct kt_lease_mgr *m = mk(1);
  kt_lease_promote(m, 0, 0);
  /* ids 1..10, ttl 10-id+1 seconds: id 10 expires first. Plus 3 ties at 5 s. */
  for (int64_t i = 1; i <= 10; i++) {
    int64_t id = i, ttl = 11 - i;
    CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  }
  for (int64_t i = 23; i >= 21; i--) {
    int64_t id = i, ttl = 5;
    CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  }
  int64_t out[16];
  CHECK_EQ(kt_lease_expired(m, 999, 16, out), 0);
  CHECK_EQ(kt_lease_expired(m, 1000, 16, out), 1);
  CHECK_EQ(out[0], 10);
  /* 10 is not revoked (its proposal was lost): re-armed at 1000 + retry_ms (3 s).
   * At 5 s: 9 (2000), 8 (3000), 7 and 10 (4000, tie by id), 6, 21, 22, 23 (5000),
   * 3 per call. */
  CHECK_EQ(kt_lease_expired(m, 5000, 3, out), 3);
  CHECK_EQ(out[0], 9);
  CHECK_EQ(out[1], 8);
  CHECK_EQ(out[2], 7);
  CHECK_EQ(kt_lease_expired(m, 5000, 3, out), 3);
  CHECK_EQ(out[0], 10);
  CHECK_EQ(out[1], 6);
  CHECK_EQ(out[2], 21);
  CHECK_EQ(kt_lease_expired(m, 5000, 3, out), 2);
  CHECK_EQ(out[0], 22);
  CHECK_EQ(out[1], 23);
  CHECK_EQ(kt_lease_expired(m, 5000, 3, out), 0);
  /* An expiring lease cannot be kept alive. */
  int64_t ttl;
  CHECK_EQ(kt_lease_keepalive(m, 9, 5000, &ttl), KT_ELEASENOTFOUND);
  for (int64_t id = 6; id <= 9; id++)
    CHECK_EQ(kt_lease_revoke(m, id), 0);
  for (int64_t id = 21; id <= 23; id++)
    CHECK_EQ(kt_lease_revoke(m, id), 0);
  /* 5 (6000) and 4 (7000) expire; 10, lost again, is handed out once more at
   * 5000 + 3000, together with 3 (8000). */
  CHECK_EQ(kt_lease_expired(m, 7999, 16, out), 2);
  CHECK_EQ(out[0], 5);
  CHECK_EQ(out[1], 4);
  CHECK_EQ(kt_lease_expired(m, 8000, 16, out), 2);
  CHECK_EQ(out[0], 3);
  CHECK_EQ(out[1], 10);
  for (int64_t id = 3; id <= 5; id++)
    CHECK_EQ(kt_lease_revoke(m, id), 0);
  CHECK_EQ(kt_lease_revoke(m, 10), 0);
  CHECK_EQ(kt_lease_next_expiry_ms(m), 9000); /* id 2, ttl 9 */
  CHECK_EQ(kt_lease_count(m), 2);
  /* A follower reports nothing. */
  kt_lease_demote(m);
  CHECK_EQ(kt_lease_expired(m, INT64_MAX, 16, out), 0);
  kt_lease_free(m);
}

TEST(keepalive_holds_lease_for_10x_ttl) {
  struct kt_lease_mgr *m = mk(1);
  int64_t ttl = 2, out[4];
  int64_t held = 1, idle = 2;
  CHECK_EQ(kt_lease_keepalive(m, held, 0, &ttl), KT_ENOLEADER);
  kt_lease_promote(m, 0, 0);
  CHECK_EQ(kt_lease_grant(m, &held, &ttl, 0), 0);
  CHECK_EQ(kt_lease_grant(m, &idle, &ttl, 0), 0);
  CHECK_EQ(kt_lease_attach(m, held, B("svc/a")), 0);
  int64_t idle_expired_at = -1;
  /* Simulated time in 100 ms steps up to 20 s (10× TTL); keep-alive every 500 ms. */
  for (int64_t now = 0; now <= 20000; now += 100) {
    if (now % 500 == 0) {
      int64_t got = 0;
      CHECK_EQ(kt_lease_keepalive(m, held, now, &got), 0);
      CHECK_EQ(got, 2);
    }
    size_t n = kt_lease_expired(m, now, 4, out);
    for (size_t i = 0; i < n; i++) {
      CHECK_EQ(out[i], idle);
      idle_expired_at = now;
      CHECK_EQ(kt_lease_revoke(m, out[i]), 0);
    }
  }
  CHECK_EQ(idle_expired_at, 2000);
  CHECK(kt_lease_exists(m, held));
  CHECK_EQ(kt_lease_of_key(m, B("svc/a")), held);
  /* Stop keeping it alive: expires 2 s after the last renewal (20000). */
  CHECK_EQ(kt_lease_expired(m, 21999, 4, out), 0);
  CHECK_EQ(kt_lease_expired(m, 22000, 4, out), 1);
  CHECK_EQ(out[0], held);
  /* A renewal after the deadline is refused even if not yet handed out. */
  int64_t x = 3;
  CHECK_EQ(kt_lease_grant(m, &x, &ttl, 30000), 0);
  CHECK_EQ(kt_lease_keepalive(m, x, 32000, &ttl), KT_ELEASENOTFOUND);
  CHECK_EQ(kt_lease_keepalive(m, 77, 30000, &ttl), KT_ELEASENOTFOUND);
  kt_lease_free(m);
}

TEST(promote_extends_every_lease) {
  struct kt_lease_mgr *m = mk(1);
  int64_t out[8];
  for (int64_t i = 1; i <= 5; i++) {
    int64_t id = i, ttl = i;
    CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  }
  /* Old leader: lease 1 was about to expire. A new leader at t=100000 with a
   * 1 s election timeout: nothing expires before now + ttl + 1000. */
  kt_lease_promote(m, 100000, 1000);
  CHECK_EQ(kt_lease_expired(m, 101999, 8, out), 0);
  struct kt_lease_info info;
  for (int64_t i = 1; i <= 5; i++) {
    CHECK_EQ(kt_lease_ttl(m, i, 100000, &info), 0);
    CHECK_EQ(info.remaining_ms, i * 1000 + 1000);
  }
  CHECK_EQ(kt_lease_expired(m, 102000, 8, out), 1);
  CHECK_EQ(out[0], 1);
  /* Re-election resets the expiring mark too: a new leader re-decides. */
  kt_lease_demote(m);
  kt_lease_promote(m, 200000, 500);
  CHECK_EQ(kt_lease_expired(m, 201499, 8, out), 0);
  CHECK_EQ(kt_lease_expired(m, 206500, 8, out), 5);
  for (int i = 0; i < 5; i++)
    CHECK_EQ(out[i], i + 1);
  kt_lease_free(m);
}

TEST(many_leases_same_ms_bounded_batches) {
  enum { N = 100000, BATCH = 500 };
  struct kt_lease_mgr *m = mk(7);
  kt_lease_promote(m, 0, 0);
  for (int i = 0; i < N; i++) {
    int64_t id = 0, ttl = 5;
    CHECK_EQ(kt_lease_grant(m, &id, &ttl, 0), 0);
  }
  CHECK_EQ(kt_lease_count(m), N);
  static int64_t out[BATCH];
  struct kt_lease_stats st;
  int64_t prev = 0;
  size_t total = 0, calls = 0, maxsteps = 0;
  /* log2(100k) ~ 17; a pop is one sift-down (<= 17 levels, 1 step each). */
  const size_t bound = BATCH * 18;
  for (;;) {
    kt_lease_stats(m, &st);
    uint64_t before = st.heap_steps;
    size_t n = kt_lease_expired(m, 5000, BATCH, out);
    kt_lease_stats(m, &st);
    size_t steps = (size_t)(st.heap_steps - before);
    CHECK(steps <= bound);
    maxsteps = KT_MAX(maxsteps, steps);
    CHECK(n <= BATCH);
    if (!n)
      break;
    calls++;
    for (size_t i = 0; i < n; i++) {
      CHECK(out[i] > prev); /* ties at the same ms come out in id order */
      prev = out[i];
      CHECK_EQ(kt_lease_revoke(m, out[i]), 0);
    }
    total += n;
  }
  CHECK_EQ(total, N);
  CHECK_EQ(calls, N / BATCH);
  CHECK_EQ(kt_lease_count(m), 0);
  printf("  100k leases at one ms: %zu calls of <= %d, max %zu heap steps per call (bound %zu)\n",
         calls, BATCH, maxsteps, bound);
  kt_lease_free(m);
}

TEST(snapshot_round_trip) {
  struct kt_lease_mgr *a = mk(3);
  kt_lease_promote(a, 0, 0);
  for (int i = 0; i < 100; i++) {
    int64_t id = 0, ttl = 1 + i;
    CHECK_EQ(kt_lease_grant(a, &id, &ttl, 0), 0);
    char k[16];
    snprintf(k, sizeof k, "key%d", i);
    CHECK_EQ(kt_lease_attach(a, id, B(k)), 0);
  }
  /* Snapshot: leases + id state; keys come back from the store (simulated). */
  static struct idlist l;
  memset(&l, 0, sizeof l);
  kt_lease_each(a, collect_id, &l);
  uint64_t st[4];
  kt_lease_id_state(a, st);

  struct kt_lease_mgr *b = mk(12345); /* different seed: the state is restored */
  for (size_t i = 0; i < l.n; i++)
    CHECK_EQ(kt_lease_restore(b, l.id[i], l.ttl[i]), 0);
  CHECK_EQ(kt_lease_restore(b, l.id[0], 5), KT_ELEASEEXISTS);
  CHECK_EQ(kt_lease_restore(b, 0, 5), KT_EINVAL);
  kt_lease_set_id_state(b, st);
  for (size_t i = 0; i < l.n; i++) {
    struct keylist kl = {0};
    CHECK_EQ(kt_lease_keys(a, l.id[i], collect_key, &kl), 0);
    for (int j = 0; j < kl.n; j++)
      CHECK_EQ(kt_lease_attach(b, l.id[i], B(kl.k[j])), 0);
  }
  static struct idlist l2;
  memset(&l2, 0, sizeof l2);
  kt_lease_each(b, collect_id, &l2);
  CHECK_EQ(l2.n, l.n);
  for (size_t i = 0; i < l.n; i++) {
    CHECK_EQ(l2.id[i], l.id[i]);
    CHECK_EQ(l2.ttl[i], l.ttl[i]);
  }
  CHECK_EQ(kt_lease_of_key(b, B("key42")), kt_lease_of_key(a, B("key42")));
  /* Next server-chosen id agrees. */
  int64_t ia = 0, ib = 0, ttl = 3;
  CHECK_EQ(kt_lease_grant(a, &ia, &ttl, 0), 0);
  CHECK_EQ(kt_lease_grant(b, &ib, &ttl, 0), 0);
  CHECK_EQ(ia, ib);
  /* Remaining TTL restarts in full on recovery (etcd): promote at t gives t + ttl. */
  kt_lease_promote(b, 50000, 0);
  struct kt_lease_info info;
  CHECK_EQ(kt_lease_ttl(b, l.id[0], 50000, &info), 0);
  CHECK_EQ(info.remaining_ms, l.ttl[0] * 1000);
  kt_lease_free(a);
  kt_lease_free(b);
}

/* Reference model: arrays, linear scans. */
enum { RN = 64, RK = 32 };
struct ref {
  int64_t id[RN], ttl[RN], exp[RN];
  bool used[RN], expiring[RN];
  int64_t key_lease[RK];
};

static int ref_find(struct ref *r, int64_t id) {
  for (int i = 0; i < RN; i++)
    if (r->used[i] && r->id[i] == id)
      return i;
  return -1;
}

TEST(randomized_against_reference_model) {
  struct kt_rng rng;
  kt_rng_seed(&rng, 20261122);
  struct kt_lease_mgr *m = mk(5);
  static struct ref r;
  memset(&r, 0, sizeof r);
  bool leader = false;
  int64_t now = 0;
  for (int step = 0; step < 200000; step++) {
    now += (int64_t)kt_rng_below(&rng, 50);
    int64_t id = 1 + (int64_t)kt_rng_below(&rng, 80); /* some beyond RN slots: not found */
    int op = (int)kt_rng_below(&rng, 100);
    if (op < 20) { /* grant */
      int64_t ttl = (int64_t)kt_rng_below(&rng, 12) - 1, gid = id;
      int s = ref_find(&r, id), free_i = -1;
      for (int i = 0; i < RN; i++)
        if (!r.used[i]) {
          free_i = i;
          break;
        }
      if (s < 0 && free_i < 0)
        continue;
      int rc = kt_lease_grant(m, &gid, &ttl, now);
      int want = ttl <= 0 ? KT_EINVAL : s >= 0 ? KT_ELEASEEXISTS : 0;
      CHECK_EQ(rc, want);
      if (!rc) {
        r.used[free_i] = true;
        r.id[free_i] = id;
        r.ttl[free_i] = ttl;
        r.exp[free_i] = leader ? now + ttl * 1000 : INT64_MAX;
        r.expiring[free_i] = false;
      }
    } else if (op < 30) { /* revoke */
      int s = ref_find(&r, id);
      CHECK_EQ(kt_lease_revoke(m, id), s < 0 ? KT_ELEASENOTFOUND : 0);
      if (s >= 0) {
        r.used[s] = false;
        for (int k = 0; k < RK; k++)
          if (r.key_lease[k] == id)
            r.key_lease[k] = 0;
      }
    } else if (op < 50) { /* put key with lease (or 0) */
      int k = (int)kt_rng_below(&rng, RK);
      if (kt_rng_below(&rng, 5) == 0)
        id = 0;
      char kb[16];
      snprintf(kb, sizeof kb, "k%d", k);
      int s = id ? ref_find(&r, id) : 0;
      CHECK_EQ(kt_lease_attach(m, id, B(kb)), s < 0 ? KT_ELEASENOTFOUND : 0);
      if (s >= 0)
        r.key_lease[k] = id;
    } else if (op < 58) { /* delete key */
      int k = (int)kt_rng_below(&rng, RK);
      char kb[16];
      snprintf(kb, sizeof kb, "k%d", k);
      CHECK_EQ(kt_lease_detach(m, B(kb)), r.key_lease[k]);
      r.key_lease[k] = 0;
    } else if (op < 78) { /* keep-alive */
      int64_t ttl = 0;
      int s = ref_find(&r, id);
      int want = !leader                                     ? KT_ENOLEADER
                 : s < 0 || r.expiring[s] || r.exp[s] <= now ? KT_ELEASENOTFOUND
                                                             : 0;
      CHECK_EQ(kt_lease_keepalive(m, id, now, &ttl), want);
      if (!want) {
        CHECK_EQ(ttl, r.ttl[s]);
        r.exp[s] = now + r.ttl[s] * 1000;
      }
    } else if (op < 93) { /* expire + revoke what came out */
      size_t max = 1 + kt_rng_below(&rng, 4);
      int64_t out[4];
      size_t n = kt_lease_expired(m, now, max, out);
      /* Reference: the max smallest (exp, id) with exp <= now. */
      size_t want = 0;
      for (;;) {
        int best = -1;
        for (int i = 0; i < RN; i++)
          if (leader && r.used[i] && r.exp[i] <= now &&
              (best < 0 || r.exp[i] < r.exp[best] ||
               (r.exp[i] == r.exp[best] && r.id[i] < r.id[best])))
            best = i;
        if (best < 0 || want == max)
          break;
        CHECK(want < n);
        CHECK_EQ(out[want], r.id[best]);
        r.expiring[best] = true;
        r.exp[best] = now + 3000;
        want++;
      }
      CHECK_EQ(n, want);
      /* Revoke most of them; drop some proposals (lost) to exercise the retry. */
      for (size_t i = 0; i < n; i++) {
        if (kt_rng_below(&rng, 4) == 0)
          continue;
        int s = ref_find(&r, out[i]);
        CHECK_EQ(kt_lease_revoke(m, out[i]), 0);
        r.used[s] = false;
        for (int k = 0; k < RK; k++)
          if (r.key_lease[k] == out[i])
            r.key_lease[k] = 0;
      }
    } else if (op < 95) { /* leadership change */
      if (leader) {
        kt_lease_demote(m);
        leader = false;
        for (int i = 0; i < RN; i++)
          r.exp[i] = INT64_MAX, r.expiring[i] = false;
      } else {
        int64_t ext = (int64_t)kt_rng_below(&rng, 2000);
        kt_lease_promote(m, now, ext);
        leader = true;
        for (int i = 0; i < RN; i++)
          r.exp[i] = now + r.ttl[i] * 1000 + ext, r.expiring[i] = false;
      }
    } else { /* queries */
      int s = ref_find(&r, id);
      struct kt_lease_info info;
      CHECK_EQ(kt_lease_ttl(m, id, now, &info), s < 0 ? KT_ELEASENOTFOUND : 0);
      CHECK_EQ(kt_lease_exists(m, id), s >= 0);
      if (s >= 0) {
        CHECK_EQ(info.granted_ttl_s, r.ttl[s]);
        uint64_t nk = 0;
        for (int k = 0; k < RK; k++)
          nk += r.key_lease[k] == id;
        CHECK_EQ(info.nkeys, nk);
        int64_t left = !leader ? -1 : r.expiring[s] || r.exp[s] <= now ? 0 : r.exp[s] - now;
        CHECK_EQ(info.remaining_ms, left);
      }
      size_t cnt = 0;
      for (int i = 0; i < RN; i++)
        cnt += r.used[i];
      CHECK_EQ(kt_lease_count(m), cnt);
      int64_t next = INT64_MAX;
      for (int i = 0; i < RN; i++)
        if (leader && r.used[i] && r.exp[i] < next)
          next = r.exp[i];
      CHECK_EQ(kt_lease_next_expiry_ms(m), next);
      for (int k = 0; k < RK; k++) {
        char kb[16];
        snprintf(kb, sizeof kb, "k%d", k);
        CHECK_EQ(kt_lease_of_key(m, B(kb)), r.key_lease[k]);
      }
    }
  }
  kt_lease_free(m);
}
