/* test/unit/watch_test.c — the watch hub against a real kt_mvcc store.
 *
 * Every applied event is recorded (rev, sub, type, key, value, prev value) by
 * the test's own on_event hook, which also feeds the hub; each watcher's
 * received sequence must equal exactly the recorded events of its range and
 * filters from its start revision, in order, without gaps or duplicates. */
#include <malloc.h>
#include <stdlib.h>

#include "../../core/watch.h"
#include "test.h"

#define NKEYS 40
#define MAXEV 200000

struct rec {
  int64_t rev;
  uint32_t sub;
  uint8_t type;
  char key[16];
  uint32_t vh; /* value hash */
  bool has_prev;
  uint32_t ph;
};

static struct rec *hist;
static size_t nhist;
static uint32_t cur_sub;
static int64_t cur_rev;
static struct kt_watch_hub *hub;

static uint32_t vhash(struct kt_bytes b) {
  uint32_t h = 2166136261u;
  for (uint32_t i = 0; i < b.n; i++)
    h = (h ^ b.p[i]) * 16777619u;
  return h + b.n;
}

static void on_event(void *arg, const struct kt_event *ev) {
  (void)arg;
  if (ev->kv.mod_revision != cur_rev)
    cur_rev = ev->kv.mod_revision, cur_sub = 0;
  kt_assert(nhist < MAXEV);
  struct rec *r = &hist[nhist++];
  memset(r, 0, sizeof *r);
  r->rev = ev->kv.mod_revision;
  r->sub = cur_sub++;
  r->type = ev->type;
  kt_assert(ev->kv.key.n < sizeof r->key);
  memcpy(r->key, ev->kv.key.p, ev->kv.key.n);
  r->vh = vhash(ev->kv.value);
  r->has_prev = ev->has_prev_kv && ev->prev_kv.version > 0;
  r->ph = r->has_prev ? vhash(ev->prev_kv.value) : 0;
  if (hub)
    kt_watch_publish(hub, ev);
}

static struct kt_mvcc *new_store(void) {
  struct kt_mvcc_config c = {.on_event = on_event};
  nhist = 0;
  cur_rev = 0;
  if (!hist)
    hist = malloc(MAXEV * sizeof *hist);
  return kt_mvcc_new(&c);
}

static struct kt_bytes B(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

static char keys[NKEYS][16];

static void apply(struct kt_mvcc *s, struct kt_request_op *op) {
  struct kt_arena a = {0};
  struct kt_response_op out;
  struct kt_err e = {0};
  int64_t before = kt_mvcc_revision(s);
  kt_mvcc_apply(s, op, &a, &out, &e);
  if (hub && kt_mvcc_revision(s) != before)
    kt_watch_revision_done(hub, kt_mvcc_revision(s));
  kt_arena_free(&a);
}

static char vals[64][16];
static void rand_write(struct kt_mvcc *s, struct kt_rng *r) {
  uint64_t x = kt_rng_below(r, 10);
  struct kt_request_op op = {0};
  if (x < 6) {
    op.type = KT_OP_PUT;
    op.u.put.key = B(keys[kt_rng_below(r, NKEYS)]);
    op.u.put.value = B(vals[kt_rng_below(r, 64)]);
    op.u.put.prev_kv = true;
  } else if (x < 8) {
    op.type = KT_OP_DELETE;
    uint64_t k = kt_rng_below(r, NKEYS);
    op.u.del.key = B(keys[k]);
    if (kt_rng_below(r, 2) && k + 1 < NKEYS)
      op.u.del.range_end = B(keys[k + 1 + kt_rng_below(r, NKEYS - k - 1)]);
    op.u.del.prev_kv = true;
  } else { /* txn of distinct keys: puts and single deletes */
    struct kt_request_op ops[6];
    int n = 1 + (int)kt_rng_below(r, 6);
    uint64_t base = kt_rng_below(r, NKEYS - 6);
    for (int i = 0; i < n; i++) {
      memset(&ops[i], 0, sizeof ops[i]);
      if (kt_rng_below(r, 3)) {
        ops[i].type = KT_OP_PUT;
        ops[i].u.put.key = B(keys[base + (uint64_t)i]);
        ops[i].u.put.value = B(vals[kt_rng_below(r, 64)]);
      } else {
        ops[i].type = KT_OP_DELETE;
        ops[i].u.del.key = B(keys[base + (uint64_t)i]);
      }
    }
    op.type = KT_OP_TXN;
    op.u.txn.success = ops;
    op.u.txn.n_success = (uint32_t)n;
    apply(s, &op);
    return;
  }
  apply(s, &op);
}

struct got {
  struct rec *v;
  size_t n, cap;
};
struct wspec {
  uint64_t id;
  char key[16], end[16]; /* end "" single; "\1" from-key */
  int64_t start;
  bool no_put, no_delete, prev_kv;
  int speed; /* take every `speed` rounds */
  struct got got;
  bool compacted;
  int64_t crev;
};

static bool in_range(const struct wspec *w, const char *k) {
  if (!w->end[0])
    return strcmp(k, w->key) == 0;
  if (w->end[0] == 1)
    return strcmp(k, w->key) >= 0;
  return strcmp(k, w->key) >= 0 && strcmp(k, w->end) < 0;
}

static int drain(struct wspec *w, int max) {
  struct kt_event out[64];
  struct kt_arena a = {0};
  int total = 0;
  for (;;) {
    int64_t crev = 0;
    int n = kt_watch_take(hub, w->id, out, max < 64 ? max : 64, &a, &crev);
    if (n == -KT_ECOMPACTED) {
      w->compacted = true;
      w->crev = crev;
      break;
    }
    kt_assert(n >= 0);
    for (int i = 0; i < n; i++) {
      if (w->got.n == w->got.cap) {
        w->got.cap = w->got.cap ? w->got.cap * 2 : 64;
        w->got.v = realloc(w->got.v, w->got.cap * sizeof *w->got.v);
      }
      struct rec *r = &w->got.v[w->got.n++];
      memset(r, 0, sizeof *r);
      r->rev = out[i].kv.mod_revision;
      r->type = out[i].type;
      memcpy(r->key, out[i].kv.key.p, out[i].kv.key.n);
      r->vh = vhash(out[i].kv.value);
      r->has_prev = out[i].has_prev_kv;
      r->ph = r->has_prev ? vhash(out[i].prev_kv.value) : 0;
    }
    total += n;
    max -= n;
    if (n == 0 || max <= 0)
      break;
  }
  kt_arena_free(&a);
  return total;
}

/* Compare w's received events with the recorded history. */
static int verify(const struct wspec *w) {
  size_t j = 0;
  for (size_t i = 0; i < nhist; i++) {
    const struct rec *h = &hist[i];
    if (h->rev < w->start || !in_range(w, h->key))
      continue;
    if ((h->type == KT_EVENT_PUT && w->no_put) || (h->type == KT_EVENT_DELETE && w->no_delete))
      continue;
    if (j >= w->got.n)
      return -1;
    const struct rec *g = &w->got.v[j++];
    if (g->rev != h->rev || g->type != h->type || strcmp(g->key, h->key) != 0)
      return (int)j;
    if (h->type == KT_EVENT_PUT && g->vh != h->vh)
      return (int)j;
    if (w->prev_kv && (g->has_prev != h->has_prev || g->ph != h->ph))
      return (int)j;
    if (!w->prev_kv && g->has_prev)
      return (int)j;
  }
  return j == w->got.n ? 0 : -2;
}

static void setup_keys(void) {
  for (int i = 0; i < NKEYS; i++)
    snprintf(keys[i], sizeof keys[i], "k%02d", i);
  for (int i = 0; i < 64; i++)
    snprintf(vals[i], sizeof vals[i], "v%d", i * 7919);
}

static uint64_t mk(struct wspec *w, struct kt_watch_opts *o) {
  memset(o, 0, sizeof *o);
  o->key = B(w->key);
  if (w->end[0] == 1)
    o->range_end = (struct kt_bytes){(const uint8_t *)"", 1};
  else
    o->range_end = B(w->end);
  o->start_revision = w->start;
  o->no_put = w->no_put, o->no_delete = w->no_delete, o->prev_kv = w->prev_kv;
  o->max_pending = 8 + (uint32_t)(w->speed * 4);
  struct kt_err e = {0};
  uint64_t id = 0;
  kt_assert(kt_watch_create(hub, o, w, &id, &e) == 0);
  return id;
}

TEST(random_history_exact) {
  setup_keys();
  for (uint64_t seed = 1; seed <= 4; seed++) {
    struct kt_rng r;
    kt_rng_seed(&r, seed);
    hub = NULL;
    struct kt_mvcc *s = new_store();
    for (int i = 0; i < 200; i++)
      rand_write(s, &r);
    hub = kt_watch_hub_new(s, NULL);
    enum { NW = 120 };
    static struct wspec ws[NW];
    memset(ws, 0, sizeof ws);
    int nw = 0;
    for (int round = 0; round < 1500; round++) {
      if (nw < NW && round % 12 == 0) {
        struct wspec *w = &ws[nw++];
        uint64_t a = kt_rng_below(&r, NKEYS), kind = kt_rng_below(&r, 4);
        strcpy(w->key, keys[a]);
        if (kind == 1 && a + 1 < NKEYS)
          strcpy(w->end, keys[a + 1 + kt_rng_below(&r, NKEYS - a - 1)]);
        else if (kind == 2)
          strcpy(w->end, "\1");
        else if (kind == 3) { /* prefix "k1" */
          strcpy(w->key, "k1");
          strcpy(w->end, "k2");
        }
        int64_t cur = kt_mvcc_revision(s);
        w->start = kt_rng_below(&r, 2) ? 0 : 1 + (int64_t)kt_rng_below(&r, (uint64_t)cur + 1);
        w->no_put = kt_rng_below(&r, 6) == 0;
        w->no_delete = !w->no_put && kt_rng_below(&r, 6) == 0;
        w->prev_kv = kt_rng_below(&r, 2);
        w->speed = kt_rng_below(&r, 3) == 0 ? 50 : 1;
        struct kt_watch_opts o;
        if (w->start == 0)
          w->start = cur + 1;
        w->id = mk(w, &o);
      }
      rand_write(s, &r);
      if (round % 3 == 0)
        kt_watch_step(hub, 64);
      for (int i = 0; i < nw; i++)
        if (round % ws[i].speed == 0)
          drain(&ws[i], 1 + (int)kt_rng_below(&r, 40));
      if (round % 97 == 0 && nw > 0) { /* cancel/recreate one: same spec, starts after */
        struct wspec *w = &ws[kt_rng_below(&r, (uint64_t)nw)];
        (void)w;
      }
    }
    for (int k = 0; k < 10000 && kt_watch_step(hub, 1000); k++)
      for (int i = 0; i < nw; i++)
        drain(&ws[i], 1 << 30);
    for (int i = 0; i < nw; i++)
      drain(&ws[i], 1 << 30);
    struct kt_watch_stats st;
    kt_watch_stats(hub, &st);
    CHECK_EQ(st.unsynced, 0);
    CHECK(st.moved_aside > 0); /* slow consumers were moved aside */
    CHECK(st.groups < (uint64_t)nw);
    for (int i = 0; i < nw; i++) {
      int v = verify(&ws[i]);
      if (v)
        fprintf(stderr, "seed %llu watcher %d key %s end %s start %lld got %zu: %d\n",
                (unsigned long long)seed, i, ws[i].key, ws[i].end, (long long)ws[i].start,
                ws[i].got.n, v);
      CHECK_EQ(v, 0);
      CHECK(kt_watch_idle(hub, ws[i].id));
      CHECK(kt_watch_cancel(hub, ws[i].id));
      free(ws[i].got.v);
    }
    kt_watch_stats(hub, &st);
    CHECK_EQ(st.watchers, 0);
    CHECK_EQ(st.groups, 0);
    kt_watch_hub_free(hub);
    hub = NULL;
    kt_mvcc_free(s);
  }
}

TEST(compacted_start_cancels) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  struct kt_rng r;
  kt_rng_seed(&r, 9);
  for (int i = 0; i < 50; i++)
    rand_write(s, &r);
  hub = kt_watch_hub_new(s, NULL);
  struct kt_err e = {0};
  CHECK_EQ(kt_mvcc_compact(s, 30, &e), 0);
  struct wspec w = {.start = 10}, ok = {.start = 31};
  strcpy(w.key, "k0"), strcpy(w.end, "\1");
  strcpy(ok.key, "k0"), strcpy(ok.end, "\1");
  struct kt_watch_opts o;
  w.id = mk(&w, &o);
  ok.id = mk(&ok, &o);
  for (int k = 0; k < 1000 && kt_watch_step(hub, 100); k++)
    drain(&ok, 1000);
  drain(&w, 1000);
  drain(&ok, 1000);
  CHECK(w.compacted);
  CHECK_EQ(w.crev, 30);
  CHECK(!kt_watch_cancel(hub, w.id)); /* removed once reported */
  CHECK(!ok.compacted);
  CHECK_EQ(verify(&ok), 0);
  CHECK(ok.got.n > 0);
  /* future start */
  o.start_revision = kt_mvcc_revision(s) + 2;
  uint64_t id;
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &id, &e), KT_EFUTUREREV);
  free(ok.got.v);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

/* etcd's rule: compaction at C removes revisions below C; a watch from C
 * itself replays what the store keeps of C (its puts; its tombstones went
 * with the compaction, as in etcd's bbolt) and what follows. */
TEST(start_at_compact_revision_served) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  kt_mvcc_restore_done(s, 1, 0);
  struct kt_request_op p0 = {.type = KT_OP_PUT, .u.put = {.key = B("k00"), .value = B("a")}};
  struct kt_request_op p1 = {.type = KT_OP_PUT, .u.put = {.key = B("k01"), .value = B("b")}};
  apply(s, &p0); /* rev 2 */
  apply(s, &p1); /* rev 3 */
  struct kt_request_op ops[2] = {{.type = KT_OP_PUT, .u.put = {.key = B("k00"), .value = B("c")}},
                                 {.type = KT_OP_DELETE, .u.del = {.key = B("k01")}}};
  struct kt_request_op txn = {.type = KT_OP_TXN, .u.txn = {.success = ops, .n_success = 2}};
  apply(s, &txn); /* rev 4: put k00, delete k01 */
  struct kt_request_op p2 = {.type = KT_OP_PUT, .u.put = {.key = B("k02"), .value = B("d")}};
  apply(s, &p2); /* rev 5 */
  hub = kt_watch_hub_new(s, NULL);
  struct kt_err e = {0};
  CHECK_EQ(kt_mvcc_compact(s, 4, &e), 0);
  struct wspec at = {.start = 4}, below = {.start = 3};
  strcpy(at.key, "k0"), strcpy(at.end, "\1");
  strcpy(below.key, "k0"), strcpy(below.end, "\1");
  struct kt_watch_opts o;
  at.id = mk(&at, &o);
  below.id = mk(&below, &o);
  for (int k = 0; k < 100 && kt_watch_step(hub, 100); k++)
    drain(&at, 1000);
  drain(&at, 1000);
  drain(&below, 1000);
  CHECK(below.compacted);
  CHECK_EQ(below.crev, 4);
  CHECK(!at.compacted);
  CHECK_EQ(at.got.n, 2);
  CHECK_EQ(at.got.v[0].rev, 4);
  CHECK_STR(at.got.v[0].key, "k00");
  CHECK_EQ(at.got.v[0].type, KT_EVENT_PUT);
  CHECK_EQ(at.got.v[1].rev, 5);
  CHECK_STR(at.got.v[1].key, "k02");
  /* live events follow */
  apply(s, &p1); /* rev 6 */
  drain(&at, 1000);
  CHECK_EQ(at.got.n, 3);
  CHECK_EQ(at.got.v[2].rev, 6);
  free(at.got.v);
  free(below.got.v);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

/* An empty store at revision 1 (no hub yet) and the put of "k00" the
 * tests below repeat. */
static struct kt_mvcc *k00_store(struct kt_request_op *put) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  kt_mvcc_restore_done(s, 1, 0);
  *put = (struct kt_request_op){.type = KT_OP_PUT, .u.put = {.key = B("k00"), .value = B("v")}};
  return s;
}

static void hub_store_free(struct kt_mvcc *s) {
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

/* A slow watcher moved aside right after it took a whole revision resumes
 * after that revision: compacting that revision must not cancel it (it
 * lost nothing), in both ways of moving aside (group log, catch-up
 * buffer). Found by the simulation (test/sim/sim.c). */
TEST(moved_aside_after_whole_revision_not_cancelled) {
  struct kt_request_op put;
  struct kt_mvcc *s = k00_store(&put);
  hub = kt_watch_hub_new(s, NULL);
  struct wspec w = {.start = 0};
  strcpy(w.key, "k00");
  struct kt_watch_opts o;
  mk(&w, &o);
  o.max_pending = 1;
  struct kt_err e = {0};
  CHECK_EQ(kt_watch_create(hub, &o, &w, &w.id, &e), 0);
  w.start = 2;
  apply(s, &put); /* rev 2 */
  CHECK_EQ(drain(&w, 1000), 1);
  apply(s, &put); /* rev 3 */
  apply(s, &put); /* rev 4: two pending > 1: moved aside after taking rev 2 whole */
  CHECK_EQ(kt_mvcc_compact(s, 2, &e), 0);
  for (int k = 0; k < 10; k++) {
    kt_watch_step(hub, 100);
    drain(&w, 1000);
  }
  CHECK(!w.compacted);
  CHECK_EQ(verify(&w), 0);
  CHECK_EQ(w.got.n, 3);
  /* from the catch-up buffer: a watcher from rev 3 queues rev 3..4 (its
   * max_pending 2) and joins the group with them buffered; rev 5 moves it
   * aside; it takes rev 3..4, then rev 4 is compacted */
  struct wspec v = {.start = 3};
  strcpy(v.key, "k00");
  mk(&v, &o);
  o.max_pending = 2;
  CHECK_EQ(kt_watch_create(hub, &o, &v, &v.id, &e), 0);
  for (int k = 0; k < 10 && kt_watch_step(hub, 100); k++)
    ;
  apply(s, &put); /* rev 5 */
  CHECK_EQ(drain(&v, 1000), 2);
  CHECK_EQ(kt_mvcc_compact(s, 4, &e), 0);
  for (int k = 0; k < 10 && kt_watch_step(hub, 100); k++)
    ;
  drain(&v, 1000);
  CHECK(!v.compacted);
  CHECK_EQ(verify(&v), 0);
  CHECK_EQ(v.got.n, 3);
  free(v.got.v);
  free(w.got.v);
  hub_store_free(s);
}

/* Freeing the hub while a watcher replays history and holds its group's
 * log frees that log too (a leak under `make asan` before). */
TEST(hub_free_while_replaying) {
  struct kt_request_op put;
  struct kt_mvcc *s = k00_store(&put);
  for (int i = 0; i < 40; i++)
    apply(s, &put);
  hub = kt_watch_hub_new(s, NULL);
  struct wspec w = {.start = 2};
  strcpy(w.key, "k00");
  struct kt_watch_opts o;
  w.id = mk(&w, &o);
  kt_watch_step(hub, 1); /* a pass begins: the group's log is held from here */
  apply(s, &put);        /* kept in the log for the replaying watcher */
  struct kt_watch_stats st;
  kt_watch_stats(hub, &st);
  CHECK_EQ(st.unsynced, 1);
  CHECK(st.buffered_events >= 1);
  hub_store_free(s);
}

static int ready_calls;
static void on_ready(void *arg, void *owner, uint64_t id) {
  (void)arg, (void)owner, (void)id;
  ready_calls++;
}

TEST(cost_and_coalescing) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  struct kt_watch_config cfg = {.on_ready = on_ready};
  hub = kt_watch_hub_new(s, &cfg);
  /* 10k watchers on one prefix share one group; 2000 on distinct other keys */
  struct kt_watch_opts o = {.key = B("p/"), .range_end = B("p0"), .max_pending = 100000};
  struct kt_err e = {0};
  static uint64_t pid[10000];
  for (int i = 0; i < 10000; i++)
    CHECK_EQ(kt_watch_create(hub, &o, NULL, &pid[i], &e), 0);
  char kb[32];
  for (int i = 0; i < 2000; i++) {
    snprintf(kb, sizeof kb, "q/%05d", i);
    struct kt_watch_opts q = {.key = B(kb)};
    uint64_t id;
    CHECK_EQ(kt_watch_create(hub, &q, NULL, &id, &e), 0);
  }
  struct kt_watch_stats st;
  kt_watch_stats(hub, &st);
  CHECK_EQ(st.groups, 2001);
  /* a put on one q key visits one group */
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = B("q/00042");
  op.u.put.value = B("x");
  apply(s, &op);
  kt_watch_stats(hub, &st);
  CHECK(st.publish_visits <= 2);
  CHECK_EQ(ready_calls, 1);
  CHECK_EQ(st.buffered_events, 1);
  /* a put under the prefix: one group visited, one copy, 10k ready */
  uint64_t v0 = st.publish_visits;
  op.u.put.key = B("p/a");
  apply(s, &op);
  kt_watch_stats(hub, &st);
  CHECK(st.publish_visits - v0 <= 2);
  CHECK_EQ(st.buffered_events, 2);
  CHECK_EQ(ready_calls, 10001);
  /* a put elsewhere touches nothing */
  v0 = st.publish_visits;
  op.u.put.key = B("z");
  apply(s, &op);
  kt_watch_stats(hub, &st);
  CHECK_EQ(st.publish_visits - v0, 0);
  struct kt_event out[4];
  struct kt_arena a = {0};
  CHECK_EQ(kt_watch_take(hub, pid[7], out, 4, &a, NULL), 1);
  CHECK_BYTES(out[0].kv.key.p, out[0].kv.key.n, "p/a");
  CHECK_EQ(out[0].kv.mod_revision, 2);
  CHECK_EQ(kt_watch_take(hub, pid[7], out, 4, &a, NULL), 0);
  CHECK(kt_watch_idle(hub, pid[7]));
  CHECK(!kt_watch_idle(hub, pid[8]));
  CHECK_EQ(kt_watch_revision(hub), 3);
  kt_arena_free(&a);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

static size_t heap(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks;
}

TEST(memory_per_watcher) {
  hub = NULL;
  struct kt_mvcc *s = new_store();
  hub = kt_watch_hub_new(s, NULL);
  struct kt_err e = {0};
  char kb[32];
  size_t h0 = heap();
  enum { N = 100000 };
  for (int i = 0; i < N; i++) {
    snprintf(kb, sizeof kb, "key/%08d", i);
    struct kt_watch_opts o = {.key = B(kb)};
    uint64_t id;
    CHECK_EQ(kt_watch_create(hub, &o, NULL, &id, &e), 0);
  }
  size_t h1 = heap();
  struct kt_watch_opts o = {.key = B("pre/"), .range_end = B("pre0")};
  for (int i = 0; i < 10000; i++) {
    uint64_t id;
    CHECK_EQ(kt_watch_create(hub, &o, NULL, &id, &e), 0);
  }
  size_t h2 = heap();
  double distinct = (double)(h1 - h0) / N, shared = (double)(h2 - h1) / 10000;
  printf("watch memory: %.0f B/watcher on 100k distinct keys, %.0f B/watcher on one prefix (10k)\n",
         distinct, shared);
  CHECK(distinct < 1024);
  CHECK(shared < 1024);
  /* delivery to 10k prefix watchers: one event each */
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = B("pre/x");
  op.u.put.value = B("v");
  apply(s, &op);
  struct kt_watch_stats st;
  kt_watch_stats(hub, &st);
  CHECK_EQ(st.buffered_events, 1);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
  free(hist);
  hist = NULL;
}

static int progress_n;
static void on_progress(void *arg, void *owner, uint64_t id, int64_t rev) {
  (void)arg, (void)owner, (void)id;
  CHECK_EQ(rev, kt_watch_revision(hub));
  progress_n++;
}

TEST(txn_ready_together_and_progress) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  hub = kt_watch_hub_new(s, NULL);
  struct kt_watch_opts o = {.key = B("k"), .range_end = B("l")};
  struct kt_err e = {0};
  uint64_t id, id2;
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &id, &e), 0);
  o.key = B("zz");
  o.range_end = (struct kt_bytes){0};
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &id2, &e), 0);
  struct kt_request_op ops[3] = {{.type = KT_OP_PUT}, {.type = KT_OP_PUT}, {.type = KT_OP_PUT}};
  ops[0].u.put.key = B("k05"), ops[1].u.put.key = B("k01"), ops[2].u.put.key = B("k09");
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn.success = ops;
  op.u.txn.n_success = 3;
  struct kt_arena a = {0};
  struct kt_response_op out;
  CHECK_EQ(kt_mvcc_apply(s, &op, &a, &out, &e), 0); /* published, batch not closed */
  struct kt_event ev[8];
  CHECK_EQ(kt_watch_take(hub, id, ev, 8, &a, NULL), 0);
  kt_watch_revision_done(hub, kt_mvcc_revision(s));
  CHECK_EQ(kt_watch_take(hub, id, ev, 2, &a, NULL), 2); /* fragment of one revision */
  CHECK_EQ(kt_watch_take(hub, id, ev + 2, 8, &a, NULL), 1);
  CHECK_BYTES(ev[0].kv.key.p, ev[0].kv.key.n, "k05"); /* txn order, not key order */
  CHECK_BYTES(ev[1].kv.key.p, ev[1].kv.key.n, "k01");
  CHECK_BYTES(ev[2].kv.key.p, ev[2].kv.key.n, "k09");
  progress_n = 0;
  kt_watch_progress_all(hub, on_progress, NULL);
  CHECK_EQ(progress_n, 2);
  CHECK_EQ(kt_watch_take(hub, 999, ev, 8, &a, NULL), -KT_ENOTFOUND);
  kt_arena_free(&a);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

/* A watcher from revision 1 over a big history (more records than one
 * history pass holds) while writes go on: caught up in bounded slices,
 * every event exactly once and in order, then live. */
TEST(big_history_catch_up_in_slices) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  char k[16], v[16];
  for (int i = 0; i < 150000; i++) {
    snprintf(k, sizeof k, "b%05d", i % 30000);
    snprintf(v, sizeof v, "%d", i);
    struct kt_request_op op = {.type = KT_OP_PUT};
    op.u.put.key = B(k);
    op.u.put.value = B(v);
    apply(s, &op);
  }
  hub = kt_watch_hub_new(s, NULL);
  struct wspec w = {0};
  strcpy(w.key, "b");
  strcpy(w.end, "c");
  w.start = 1;
  w.speed = 1000;
  struct kt_watch_opts o;
  w.id = mk(&w, &o);
  struct kt_rng r;
  kt_rng_seed(&r, 7);
  int steps = 0;
  while (kt_watch_step(hub, 2000) && steps < 100000) {
    steps++;
    drain(&w, 1 << 30);
    if (steps % 10 == 0) { /* writes during the catch-up */
      snprintf(k, sizeof k, "b%05d", (int)kt_rng_below(&r, 30000));
      struct kt_request_op op = {.type = KT_OP_PUT};
      op.u.put.key = B(k);
      op.u.put.value = B("live");
      apply(s, &op);
    }
  }
  drain(&w, 1 << 30);
  CHECK(steps > 50); /* it took many bounded slices, not one big scan */
  CHECK_EQ(verify(&w), 0);
  CHECK(kt_watch_idle(hub, w.id));
  free(w.got.v);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}

/* Fan-out (kt_watch_run / kt_watch_advance): two watchers of one group at
 * the same place describe the same log run; advancing one by the run is
 * the same as taking it (the other still takes every event itself, and
 * later events come to both); a watcher with a catch-up buffer has no run. */
TEST(run_and_advance_share_the_group_log) {
  setup_keys();
  hub = NULL;
  struct kt_mvcc *s = new_store();
  hub = kt_watch_hub_new(s, NULL);
  struct kt_watch_opts o = {.key = B("k")};
  struct kt_err e = {0};
  uint64_t a1, a2, old;
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &a1, &e), 0);
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &a2, &e), 0);
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put.key = B("k");
  op.u.put.value = B("v1");
  apply(s, &op);
  op.u.put.value = B("v2");
  apply(s, &op);
  const void *l1, *l2;
  uint64_t f1, t1, f2, t2;
  CHECK(kt_watch_run(hub, a1, &l1, &f1, &t1));
  CHECK(kt_watch_run(hub, a2, &l2, &f2, &t2));
  CHECK(l1 == l2 && f1 == f2 && t1 == t2 && t1 - f1 == 2);
  kt_watch_advance(hub, a1, f1 + 1); /* one event "sent" by other means */
  CHECK(kt_watch_run(hub, a1, &l1, &f1, &t1));
  CHECK_EQ(t1 - f1, 1);
  CHECK_EQ(kt_watch_next_rev(hub, a1), kt_mvcc_revision(s));
  kt_watch_advance(hub, a1, t1);
  CHECK_EQ(kt_watch_next_rev(hub, a1), 0);
  CHECK(kt_watch_idle(hub, a1));
  struct kt_arena ar = {0};
  struct kt_event ev[8];
  CHECK_EQ(kt_watch_take(hub, a1, ev, 8, &ar, NULL), 0);
  CHECK_EQ(kt_watch_take(hub, a2, ev, 8, &ar, NULL), 2); /* the other keeps its own */
  CHECK_BYTES(ev[0].kv.value.p, ev[0].kv.value.n, "v1");
  CHECK_BYTES(ev[1].kv.value.p, ev[1].kv.value.n, "v2");
  op.u.put.value = B("v3");
  apply(s, &op);
  CHECK_EQ(kt_watch_take(hub, a1, ev, 8, &ar, NULL), 1);
  CHECK_BYTES(ev[0].kv.value.p, ev[0].kv.value.n, "v3");
  /* a watcher from the past has its events in a buffer of its own: no run */
  o.start_revision = 1;
  CHECK_EQ(kt_watch_create(hub, &o, NULL, &old, &e), 0);
  while (kt_watch_step(hub, 64))
    ;
  CHECK(!kt_watch_run(hub, old, &l1, &f1, &t1));
  CHECK_EQ(kt_watch_take(hub, old, ev, 8, &ar, NULL), 3);
  CHECK(kt_watch_run(hub, old, &l1, &f1, &t1)); /* caught up: synced in the group */
  CHECK(l1 == l2 && f1 == t1);
  kt_arena_free(&ar);
  kt_watch_hub_free(hub);
  hub = NULL;
  kt_mvcc_free(s);
}
