/* test/sim/sim.c — deterministic simulation of a Raft cluster (core/raft).
 *
 * N raft cores in one process on a simulated clock, network and disk, all
 * driven by one seeded PRNG, so a seed replays exactly:
 *   - time: 10 units per tick; every member ticks once per 10 units
 *   - network: each message is encoded to bytes (kt_raft_msg_encode) and
 *     decoded on delivery; dropped, duplicated, delayed (which reorders) and
 *     cut by partitions that form and heal at random
 *   - disk: a ready batch's entries + hard state become durable after a random
 *     delay, in order; only then is raft told (kt_raft_persisted). A crash
 *     loses every write not yet durable, except that the write in progress
 *     may be torn (its hard state and a prefix of its entries reach the disk
 *     unreported); the member restarts from its disk.
 *   - clients propose entries and ask for ReadIndex reads on random members.
 *   - snapshots: each member snapshots its applied state now and then (the
 *     state machine is the applied prefix of the global log), compacts its
 *     in-memory log to its snapshot and purges its disk log; a leader asked
 *     for a snapshot (KT_RAFT_EV_NEED_SNAPSHOT) sends its own over the
 *     network (delayed, dropped like any message: then reported failed), and
 *     the follower installs it (disk log reset, kt_raft_install_snapshot).
 *     A snapshot carries the configuration at its index.
 *   - membership: the first n members bootstrap as the node does (log 1..n =
 *     one CONF ADD_VOTER each, committed, applied when handed out). With
 *     conf_changes, random one-at-a-time changes (add a learner, promote it,
 *     add a voter directly, remove a voter — the leader too — or a learner,
 *     now and then an invalid one) are proposed on random members
 *     (kt_raft_propose_conf); an added member is a spare id that starts
 *     with an empty log and no configuration. The state machine decodes
 *     CONF entries, applies them to its own configuration (by its own
 *     rules, which raft must agree with: kt_raft_apply_conf's result and
 *     kt_raft_members) and keeps 3..5 voters and removed ids out. A member
 *     that applied its own removal stays up but must never lead; when it
 *     crashes it is gone for good, as a removed node would be.
 * Checks, on every step: at most one leader per term; log matching; leader
 * completeness; committed entries never change (every (index, term, data)
 * any member commits is recorded globally and compared); every member
 * applies the same sequence; a read's index covers every commit that happened
 * before the read was asked; every member that applies the CONF entry at
 * index i has the same configuration after it (and snapshots carry it);
 * only a voter of its own configuration, never a removed member, becomes
 * leader. At the end the network heals, removed members are shut down, and
 * the cluster must make progress (a proposal applied on every member of the
 * leader's configuration).
 *
 * Included by test/unit/raft_sim_test.c (so `make test` builds and runs it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/raft.h"

#define SIM_MAX_N 16 /* member ids 1..SIM_MAX_N: the first n, then spares */

struct sim_opts {
  uint64_t seed;
  int n;              /* members at bootstrap: 3 or 5 */
  int ticks;          /* chaotic phase */
  bool crashes;       /* crash and restart members */
  uint32_t crash_x10; /* per-tick crash chance in tenths of a percent; 0 = 8 */
  bool conf_changes;  /* random membership changes between 3 and 5 voters */
  uint32_t conf_x10;  /* per-tick chance of proposing one, tenths of a percent; 0 = 25 */
  bool verbose;       /* print the trace */
};

struct sim_stats {
  uint64_t committed, elections, crashes, msgs, dropped, reads, transfers;
  uint64_t snapshots_sent, installs;
  uint64_t conf_proposed, conf_applied, conf_invalid, conf_as_normal, leader_removed;
};

/* A configuration as the state machine keeps it: voters then learners, each
 * in the order raft keeps them (kt_raft_members). */
struct sim_conf {
  uint8_t nv, nl;
  uint64_t v[SIM_MAX_N], l[SIM_MAX_N];
  uint32_t removed; /* bit id: removed once, never added again (as etcd) */
};

struct failed_snap {
  uint64_t from, to;
};

struct disk_write {
  uint64_t done_at;
  struct kt_raft_hard_state hs;
  struct kt_raft_entry *ents;
  size_t n;
};

struct sim_node {
  uint64_t id;
  struct kt_raft *r;
  bool alive;
  uint64_t restart_at;
  int group; /* partition group */
  /* disk: snapshot (snap_index, snap_term) then dlog[0..dn) = indexes
   * dfirst.. (dfirst == snap_index + 1 once the log was purged or reset) */
  struct kt_raft_hard_state hs;
  struct kt_raft_entry *dlog;
  size_t dn, dcap;
  uint64_t dfirst, snap_index, snap_term;
  struct disk_write *wq;
  size_t wq_n, wq_cap;
  /* state machine: applied sequence is checked against the global table */
  uint64_t applied, checked_commit;
  struct sim_conf conf, snap_conf; /* applied configuration; the snapshot's */
  bool started;                    /* spares start when first proposed */
  bool removed;                    /* applied its own removal: stays out */
  bool gone;                       /* removed and stopped for good */
};

struct net_msg {
  uint64_t at, seq;
  uint64_t to, from;
  uint64_t snap_index, snap_term; /* a snapshot delivery when snap_index > 0 */
  uint8_t *p;
  size_t n;
};

struct gentry {
  uint64_t term, commit_term;
  uint32_t len;
  uint8_t *data;
};

struct pending_read {
  uint64_t ctx, min_index;
};

struct conf_at {
  uint64_t index;
  struct sim_conf c;
};

struct sim {
  struct sim_opts o;
  struct kt_rng rng;
  uint64_t now;
  struct sim_node nodes[SIM_MAX_N];
  int n_nodes;    /* slots in use: ids 1..n_nodes */
  uint64_t spare; /* a started member not yet added (0: none) */
  /* global truth of configurations: after each CONF index, as first applied */
  struct conf_at *confs;
  size_t cn, ccap;
  bool removed[SIM_MAX_N + 1]; /* some member applied this id's removal */
  /* network: binary heap on (at, seq) */
  struct net_msg *heap;
  size_t hn, hcap;
  uint64_t seq;
  uint32_t drop_pct, dup_pct, max_delay;
  bool oneway[SIM_MAX_N + 1][SIM_MAX_N + 1]; /* from → to dropped */
  bool pre_vote, check_quorum;
  /* global truth */
  struct gentry *g;
  size_t gn, gcap;
  uint64_t *leader_of; /* by term */
  size_t leader_cap;
  uint64_t max_commit;
  struct pending_read *reads;
  size_t rn, rcap;
  uint64_t next_ctx, next_prop;
  struct sim_stats st;
  char why[512];
  bool failed;
  struct kt_buf enc;
  struct kt_arena arena;
  struct failed_snap *failed_snaps; /* reported at the next unit, outside ready */
  size_t n_failed_snaps, cap_failed_snaps;
};

static void sim_fail(struct sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sim_fail(struct sim *s, const char *fmt, ...) {
  if (s->failed)
    return;
  s->failed = true;
  int k = snprintf(s->why, sizeof s->why, "t=%llu: ", (unsigned long long)s->now);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->why + k, sizeof s->why - (size_t)k, fmt, ap);
  va_end(ap);
}

static bool chance(struct sim *s, uint32_t pct_x10) {
  return kt_rng_below(&s->rng, 1000) < pct_x10;
}

#define GROW(p, n, cap)                                                                            \
  do {                                                                                             \
    if ((n) == (cap)) {                                                                            \
      (cap) = (cap) ? (cap)*2 : 16;                                                                \
      (p) = realloc((p), (cap) * sizeof(*(p)));                                                    \
      kt_assert(p);                                                                                \
    }                                                                                              \
  } while (0)

/* ---- network heap */
static bool net_less(const struct net_msg *a, const struct net_msg *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}
static void net_push(struct sim *s, struct net_msg m) {
  GROW(s->heap, s->hn, s->hcap);
  size_t i = s->hn++;
  s->heap[i] = m;
  while (i && net_less(&s->heap[i], &s->heap[(i - 1) / 2])) {
    struct net_msg t = s->heap[i];
    s->heap[i] = s->heap[(i - 1) / 2];
    s->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}
static struct net_msg net_pop(struct sim *s) {
  struct net_msg top = s->heap[0];
  s->heap[0] = s->heap[--s->hn];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->hn && net_less(&s->heap[l], &s->heap[m]))
      m = l;
    if (r < s->hn && net_less(&s->heap[r], &s->heap[m]))
      m = r;
    if (m == i)
      break;
    struct net_msg t = s->heap[i];
    s->heap[i] = s->heap[m];
    s->heap[m] = t;
    i = m;
  }
  return top;
}

static struct sim_node *node_of(struct sim *s, uint64_t id) {
  return id >= 1 && id <= (uint64_t)s->n_nodes ? &s->nodes[id - 1] : NULL;
}

/* ---- configurations */

#define CONF_DATA_LEN 10 /* 'C', change, id (u64 big-endian) */

static void conf_encode(uint8_t *p, uint8_t change, uint64_t id) {
  p[0] = 'C';
  p[1] = change;
  kt_put_u64be(p + 2, id);
}

static int conf_find(const uint64_t *a, int n, uint64_t id) {
  for (int i = 0; i < n; i++)
    if (a[i] == id)
      return i;
  return -1;
}

static void conf_del(uint64_t *a, uint8_t *n, int at) {
  memmove(a + at, a + at + 1, (size_t)(*n - at - 1) * sizeof *a);
  (*n)--;
}

/* The state machine's own rules (the spec raft must agree with): 0 applied,
 * else KT_EINVAL and c unchanged. */
static int conf_model_apply(struct sim_conf *c, uint8_t change, uint64_t id) {
  int v = conf_find(c->v, c->nv, id), l = conf_find(c->l, c->nl, id);
  if (change == KT_RAFT_CONF_REMOVE && (v >= 0 ? c->nv > 1 : l >= 0))
    c->removed |= 1u << id;
  switch (change) {
  case KT_RAFT_CONF_ADD_VOTER:
  case KT_RAFT_CONF_ADD_LEARNER:
    if (!id || v >= 0 || l >= 0 || c->nv + c->nl >= SIM_MAX_N)
      return KT_EINVAL;
    if (change == KT_RAFT_CONF_ADD_VOTER)
      c->v[c->nv++] = id;
    else
      c->l[c->nl++] = id;
    return 0;
  case KT_RAFT_CONF_REMOVE:
    if (v >= 0 && c->nv > 1)
      conf_del(c->v, &c->nv, v);
    else if (l >= 0)
      conf_del(c->l, &c->nl, l);
    else
      return KT_EINVAL;
    return 0;
  case KT_RAFT_CONF_PROMOTE:
    if (l < 0)
      return KT_EINVAL;
    conf_del(c->l, &c->nl, l);
    c->v[c->nv++] = id;
    return 0;
  default:
    return KT_EINVAL;
  }
}

static bool conf_eq(const struct sim_conf *a, const struct sim_conf *b) {
  return a->nv == b->nv && a->nl == b->nl && a->removed == b->removed &&
         !memcmp(a->v, b->v, a->nv * sizeof a->v[0]) && !memcmp(a->l, b->l, a->nl * sizeof a->l[0]);
}

static bool conf_has(const struct sim_conf *c, uint64_t id) {
  return conf_find(c->v, c->nv, id) >= 0 || conf_find(c->l, c->nl, id) >= 0;
}

static void conf_str(const struct sim_conf *c, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "v{");
  for (int i = 0; i < c->nv && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)c->v[i]);
  if (k < n)
    k += (size_t)snprintf(buf + k, n - k, "} l{");
  for (int i = 0; i < c->nl && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)c->l[i]);
  if (k < n)
    snprintf(buf + k, n - k, "}");
}

/* raft's configuration, as the state machine would store it. */
static struct sim_conf conf_of_raft(const struct kt_raft *r) {
  struct kt_raft_member_state ms[KT_RAFT_MAX_MEMBERS];
  size_t n = kt_raft_members(r, ms, KT_RAFT_MAX_MEMBERS);
  struct sim_conf c = {0};
  for (size_t i = 0; i < n && i < SIM_MAX_N; i++) {
    if (ms[i].learner)
      c.l[c.nl++] = ms[i].id;
    else
      c.v[c.nv++] = ms[i].id;
  }
  return c;
}

/* The configuration in force at index i, by the global record (the latest
 * CONF index <= i that some member applied). */
static const struct sim_conf *conf_at(const struct sim *s, uint64_t i) {
  static const struct sim_conf empty;
  size_t lo = 0, hi = s->cn; /* first with index > i */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->confs[mid].index <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo ? &s->confs[lo - 1].c : &empty;
}

static void copy_entry(struct kt_raft_entry *dst, const struct kt_raft_entry *src) {
  *dst = *src;
  dst->data = NULL;
  if (src->len) {
    dst->data = malloc(src->len);
    kt_assert(dst->data);
    memcpy(dst->data, src->data, src->len);
  }
}

static void node_start(struct sim *s, struct sim_node *nd) {
  struct kt_raft_config c = {
      .id = nd->id,
      .voters = nd->snap_conf.v,
      .n_voters = nd->snap_conf.nv,
      .learners = nd->snap_conf.l,
      .n_learners = nd->snap_conf.nl,
      .election_ticks = 10,
      .heartbeat_ticks = 1,
      .max_msg_bytes = 64,
      .max_inflight_msgs = 4,
      .max_inflight_bytes = 256,
      .pre_vote = s->pre_vote,
      .check_quorum = s->check_quorum,
      .seed = s->o.seed * 31 + s->now,
      .hs = nd->hs,
      .entries = nd->dlog,
      .n_entries = nd->dn,
      .first_index = nd->dfirst,
      .compacted_term = nd->dfirst > 1 ? nd->snap_term : 0,
      .applied = nd->snap_index,
  };
  int rc = kt_raft_new(&c, &nd->r);
  kt_assert(rc == 0);
  nd->alive = nd->started = true;
  nd->applied = nd->snap_index; /* the state machine restarts from the snapshot */
  nd->checked_commit = nd->snap_index;
  nd->conf = nd->snap_conf;
}

static void free_write(struct disk_write *w) {
  for (size_t i = 0; i < w->n; i++)
    free(w->ents[i].data);
  free(w->ents);
}

static void disk_apply(struct sim_node *nd, struct disk_write *w, size_t n);

static void node_crash(struct sim *s, struct sim_node *nd) {
  /* a torn write: the write in progress reached the disk in part (its hard
   * state first, then a prefix of its entries) without raft being told */
  if (nd->wq_n && chance(s, 500))
    disk_apply(nd, &nd->wq[0], (size_t)kt_rng_below(&s->rng, nd->wq[0].n + 1));
  for (size_t i = 0; i < nd->wq_n; i++)
    free_write(&nd->wq[i]);
  nd->wq_n = 0;
  kt_raft_free(nd->r);
  nd->r = NULL;
  nd->alive = false;
  nd->gone = nd->removed; /* the node of a removed member does not come back */
  nd->restart_at = s->now + 10 * (5 + kt_rng_below(&s->rng, 60));
  s->st.crashes++;
  if (s->o.verbose)
    printf("  t=%llu n%llu crash\n", (unsigned long long)s->now, (unsigned long long)nd->id);
}

/* Record (or compare) committed entry index of member nd. */
static void check_committed(struct sim *s, struct sim_node *nd, const struct kt_raft_entry *e,
                            const char *what) {
  if (e->index > s->gn + 1) {
    sim_fail(s, "n%llu %s index %llu but only %zu known committed", (unsigned long long)nd->id,
             what, (unsigned long long)e->index, s->gn);
    return;
  }
  if (e->index == s->gn + 1) {
    GROW(s->g, s->gn, s->gcap);
    struct gentry *g = &s->g[s->gn++];
    g->term = e->term;
    g->commit_term = kt_raft_term(nd->r);
    g->len = e->len;
    g->data = NULL;
    if (e->len) {
      g->data = malloc(e->len);
      memcpy(g->data, e->data, e->len);
    }
    s->st.committed++;
    return;
  }
  struct gentry *g = &s->g[e->index - 1];
  if (g->term != e->term || g->len != e->len || (e->len && memcmp(g->data, e->data, e->len)))
    sim_fail(s, "n%llu %s index %llu term %llu differs from committed term %llu",
             (unsigned long long)nd->id, what, (unsigned long long)e->index,
             (unsigned long long)e->term, (unsigned long long)g->term);
}

static void on_leader(struct sim *s, struct sim_node *nd, uint64_t term) {
  s->st.elections++;
  if (term >= s->leader_cap) {
    size_t nc = s->leader_cap ? s->leader_cap : 64;
    while (nc <= term)
      nc *= 2;
    s->leader_of = realloc(s->leader_of, nc * sizeof(uint64_t));
    memset(s->leader_of + s->leader_cap, 0, (nc - s->leader_cap) * sizeof(uint64_t));
    s->leader_cap = nc;
  }
  if (s->leader_of[term] && s->leader_of[term] != nd->id) {
    sim_fail(s, "two leaders in term %llu: n%llu and n%llu", (unsigned long long)term,
             (unsigned long long)s->leader_of[term], (unsigned long long)nd->id);
    return;
  }
  s->leader_of[term] = nd->id;
  if (nd->removed || !kt_raft_is_voter(nd->r, nd->id)) {
    sim_fail(s, "n%llu became leader of term %llu but is %s", (unsigned long long)nd->id,
             (unsigned long long)term, nd->removed ? "removed" : "not a voter");
    return;
  }
  /* leader completeness: every entry committed in an earlier term is here */
  for (size_t i = 0; i < s->gn; i++) {
    if (s->g[i].commit_term >= term || i + 1 < kt_raft_first_index(nd->r))
      continue; /* compacted entries were applied, hence checked */
    const struct kt_raft_entry *e = kt_raft_entry_at(nd->r, i + 1);
    if (!e || e->term != s->g[i].term) {
      sim_fail(s, "leader n%llu of term %llu lacks committed index %zu (term %llu)",
               (unsigned long long)nd->id, (unsigned long long)term, i + 1,
               (unsigned long long)s->g[i].term);
      return;
    }
  }
}

static void send_msg(struct sim *s, const struct kt_raft_msg *m) {
  s->st.msgs++;
  struct sim_node *from = node_of(s, m->from), *to = node_of(s, m->to);
  kt_assert(from);
  if (!to || !to->started || to->gone) { /* nobody there */
    s->st.dropped++;
    return;
  }
  if (from->group != to->group || s->oneway[m->from][m->to] || chance(s, s->drop_pct)) {
    s->st.dropped++;
    return;
  }
  kt_buf_reset(&s->enc);
  kt_raft_msg_encode(m, &s->enc);
  int copies = chance(s, s->dup_pct) ? 2 : 1;
  for (int c = 0; c < copies; c++) {
    struct net_msg nm = {.at = s->now + 1 + kt_rng_below(&s->rng, s->max_delay),
                         .seq = s->seq++,
                         .to = m->to,
                         .n = s->enc.len};
    if (chance(s, 20))
      nm.at += kt_rng_below(&s->rng, 200); /* a straggler */
    nm.p = malloc(nm.n);
    memcpy(nm.p, s->enc.p, nm.n);
    net_push(s, nm);
  }
}

/* The leader's snapshot travels as one message (the node streams chunks on
 * its own channel; here one delayed delivery). Lost: reported failed. */
static void send_snapshot(struct sim *s, struct sim_node *from, uint64_t to_id) {
  struct sim_node *to = node_of(s, to_id);
  s->st.snapshots_sent++;
  if (!from->snap_index || !to || to->gone || from->group != to->group ||
      s->oneway[from->id][to_id] || chance(s, s->drop_pct)) {
    GROW(s->failed_snaps, s->n_failed_snaps, s->cap_failed_snaps);
    s->failed_snaps[s->n_failed_snaps++] = (struct failed_snap){from->id, to_id};
    return;
  }
  struct net_msg nm = {.at = s->now + 1 + kt_rng_below(&s->rng, 50),
                       .seq = s->seq++,
                       .to = to_id,
                       .from = from->id,
                       .snap_index = from->snap_index,
                       .snap_term = from->snap_term,
                       .n = sizeof(struct sim_conf)};
  nm.p = malloc(nm.n);
  memcpy(nm.p, &from->snap_conf, nm.n);
  net_push(s, nm);
}

/* A follower installs a snapshot: state machine = the committed prefix up
 * to its index, disk log reset after it, raft told. */
static void install_snapshot(struct sim *s, struct sim_node *nd, uint64_t index, uint64_t term,
                             const struct sim_conf *conf) {
  if (index > s->gn) {
    sim_fail(s, "snapshot at %llu beyond the %zu known committed", (unsigned long long)index,
             s->gn);
    return;
  }
  if (!conf_eq(conf, conf_at(s, index))) {
    char a[160], b[160];
    conf_str(conf, a, sizeof a);
    conf_str(conf_at(s, index), b, sizeof b);
    sim_fail(s, "snapshot at %llu carries configuration %s, committed %s",
             (unsigned long long)index, a, b);
    return;
  }
  if (index <= kt_raft_commit(nd->r)) { /* stale: raft tells the leader our commit */
    struct sim_conf before = conf_of_raft(nd->r);
    if (kt_raft_install_snapshot(nd->r, index, term, conf->v, conf->nv, conf->l, conf->nl) !=
        KT_EINVAL)
      sim_fail(s, "n%llu took a stale snapshot %llu", (unsigned long long)nd->id,
               (unsigned long long)index);
    struct sim_conf after = conf_of_raft(nd->r);
    if (!conf_eq(&before, &after))
      sim_fail(s, "n%llu: a stale snapshot changed the configuration", (unsigned long long)nd->id);
    return;
  }
  if (s->g[index - 1].term != term) {
    sim_fail(s, "snapshot at %llu has term %llu, committed term %llu", (unsigned long long)index,
             (unsigned long long)term, (unsigned long long)s->g[index - 1].term);
    return;
  }
  for (size_t i = 0; i < nd->wq_n; i++)
    free_write(&nd->wq[i]); /* superseded by the reset */
  nd->wq_n = 0;
  for (size_t i = 0; i < nd->dn; i++)
    free(nd->dlog[i].data);
  nd->dn = 0;
  nd->dfirst = index + 1;
  nd->snap_index = index;
  nd->snap_term = term;
  nd->hs.commit = KT_MAX(nd->hs.commit, index);
  nd->snap_conf = *conf;
  if (kt_raft_install_snapshot(nd->r, index, term, conf->v, conf->nv, conf->l, conf->nl) != 0) {
    sim_fail(s, "n%llu refused snapshot %llu", (unsigned long long)nd->id,
             (unsigned long long)index);
    return;
  }
  nd->applied = nd->checked_commit = index;
  nd->conf = *conf;
  if (!conf_eq(conf, &(struct sim_conf){0}) && !conf_has(conf, nd->id) && s->removed[nd->id])
    nd->removed = true; /* installed a state where it is gone */
  s->st.installs++;
  if (s->o.verbose)
    printf("  t=%llu n%llu installed snapshot %llu\n", (unsigned long long)s->now,
           (unsigned long long)nd->id, (unsigned long long)index);
}

/* The state machine applies a CONF entry: decodes it, applies it to its
 * own configuration and to raft's (both must agree, and agree with every
 * other member that applied this index). */
static void apply_conf_entry(struct sim *s, struct sim_node *nd, const struct kt_raft_entry *e) {
  if (e->len != CONF_DATA_LEN || e->data[0] != 'C') {
    sim_fail(s, "n%llu: CONF entry %llu is not a change", (unsigned long long)nd->id,
             (unsigned long long)e->index);
    return;
  }
  uint8_t change = e->data[1];
  uint64_t id = kt_get_u64be(e->data + 2);
  /* the node's own rules, checked before raft is asked: a removed id never
   * comes back (as etcd), and 3..5 voters (a change proposed on a stale
   * view could go beyond; the liveness of removing the leader of two
   * voters rests on the removed member staying up, see raft.h) */
  const struct sim_conf *c = &nd->conf;
  bool voter = conf_find(c->v, c->nv, id) >= 0;
  bool refuse =
      ((change == KT_RAFT_CONF_ADD_VOTER || change == KT_RAFT_CONF_ADD_LEARNER) &&
       id <= SIM_MAX_N && (c->removed >> id & 1)) ||
      ((change == KT_RAFT_CONF_ADD_VOTER || change == KT_RAFT_CONF_PROMOTE) && c->nv >= 5) ||
      (change == KT_RAFT_CONF_REMOVE && voter && c->nv <= 3);
  int want = refuse ? KT_EINVAL : conf_model_apply(&nd->conf, change, id);
  int rc = refuse ? KT_EINVAL : kt_raft_apply_conf(nd->r, change, id);
  struct sim_conf got = conf_of_raft(nd->r);
  got.removed = nd->conf.removed;
  char a[160], b[160];
  if (rc != want || !conf_eq(&got, &nd->conf)) {
    conf_str(&got, a, sizeof a);
    conf_str(&nd->conf, b, sizeof b);
    sim_fail(s, "n%llu applies change %u of %llu at %llu: raft rc %d %s, state machine rc %d %s",
             (unsigned long long)nd->id, change, (unsigned long long)id,
             (unsigned long long)e->index, rc, a, want, b);
    return;
  }
  if (s->o.verbose)
    printf("  t=%llu n%llu applies conf change %u of n%llu at %llu: rc %d\n",
           (unsigned long long)s->now, (unsigned long long)nd->id, change, (unsigned long long)id,
           (unsigned long long)e->index, rc);
  if (s->cn == 0 || s->confs[s->cn - 1].index < e->index) { /* first to apply it */
    GROW(s->confs, s->cn, s->ccap);
    s->confs[s->cn++] = (struct conf_at){e->index, nd->conf};
    if (e->index <= (uint64_t)s->o.n) {
      /* bootstrap entries: not counted */
    } else if (rc == 0) {
      s->st.conf_applied++;
      if (change == KT_RAFT_CONF_REMOVE && id <= (uint64_t)s->n_nodes &&
          kt_raft_leader(nd->r) == id)
        s->st.leader_removed++;
    } else {
      s->st.conf_invalid++;
    }
    if (change == KT_RAFT_CONF_REMOVE && rc == 0 && id <= SIM_MAX_N)
      s->removed[id] = true;
    if ((change == KT_RAFT_CONF_ADD_VOTER || change == KT_RAFT_CONF_ADD_LEARNER) && rc == 0 &&
        id == s->spare)
      s->spare = 0;
  } else if (!conf_eq(conf_at(s, e->index), &nd->conf)) {
    conf_str(&nd->conf, a, sizeof a);
    conf_str(conf_at(s, e->index), b, sizeof b);
    sim_fail(s, "n%llu has configuration %s at %llu, others had %s", (unsigned long long)nd->id, a,
             (unsigned long long)e->index, b);
  }
  if (rc == 0 && change == KT_RAFT_CONF_REMOVE && id == nd->id)
    nd->removed = true;
}

static void process_ready(struct sim *s, struct sim_node *nd) {
  for (int guard = 0; guard < 100 && nd->alive && kt_raft_has_ready(nd->r); guard++) {
    struct kt_raft_ready rd;
    kt_raft_ready(nd->r, &rd);
    for (size_t i = 0; i < rd.n_events && !s->failed; i++) {
      if (s->o.verbose) {
        char b[128];
        printf("  t=%llu n%llu %s\n", (unsigned long long)s->now, (unsigned long long)nd->id,
               kt_raft_event_str(&rd.events[i], b, sizeof b));
      }
      if (rd.events[i].type == KT_RAFT_EV_BECAME_LEADER)
        on_leader(s, nd, rd.events[i].term);
      if (rd.events[i].type == KT_RAFT_EV_NEED_SNAPSHOT)
        send_snapshot(s, nd, rd.events[i].a);
    }
    if (rd.n_entries || rd.hs_changed) {
      GROW(nd->wq, nd->wq_n, nd->wq_cap);
      struct disk_write *w = &nd->wq[nd->wq_n];
      uint64_t prev = nd->wq_n ? nd->wq[nd->wq_n - 1].done_at : s->now;
      w->done_at = KT_MAX(prev, s->now + 1 + kt_rng_below(&s->rng, 30));
      w->hs = rd.hs;
      w->n = rd.n_entries;
      w->ents = rd.n_entries ? malloc(rd.n_entries * sizeof *w->ents) : NULL;
      for (size_t i = 0; i < rd.n_entries; i++)
        copy_entry(&w->ents[i], &rd.entries[i]);
      nd->wq_n++;
    }
    for (size_t i = 0; i < rd.n_msgs; i++)
      send_msg(s, &rd.msgs[i]);
    for (size_t i = 0; i < rd.n_committed && !s->failed; i++) {
      const struct kt_raft_entry *e = &rd.committed[i];
      if (e->index != nd->applied + 1) {
        sim_fail(s, "n%llu applies index %llu after %llu", (unsigned long long)nd->id,
                 (unsigned long long)e->index, (unsigned long long)nd->applied);
        break;
      }
      check_committed(s, nd, e, "applies");
      nd->applied = e->index;
      if (e->type == KT_RAFT_ENTRY_CONF && !s->failed)
        apply_conf_entry(s, nd, e);
      else if (e->len == CONF_DATA_LEN && e->data[0] == 'C')
        s->st.conf_as_normal++; /* refused: one change was in flight */
    }
    for (size_t i = 0; i < rd.n_reads && !s->failed; i++) {
      s->st.reads++;
      const struct kt_raft_read_state *rs = &rd.reads[i];
      if (rs->index > nd->applied)
        sim_fail(s, "n%llu read state index %llu above applied %llu", (unsigned long long)nd->id,
                 (unsigned long long)rs->index, (unsigned long long)nd->applied);
      for (size_t j = 0; j < s->rn; j++)
        if (s->reads[j].ctx == rs->context && rs->index < s->reads[j].min_index)
          sim_fail(s, "n%llu read ctx %llu at index %llu misses commit %llu made before it",
                   (unsigned long long)nd->id, (unsigned long long)rs->context,
                   (unsigned long long)rs->index, (unsigned long long)s->reads[j].min_index);
    }
    kt_raft_advance(nd->r);
  }
  if (!nd->alive || s->failed)
    return;
  /* every entry at or below commit is the committed one */
  uint64_t c = kt_raft_commit(nd->r);
  for (uint64_t i = nd->checked_commit + 1; i <= c && !s->failed; i++) {
    const struct kt_raft_entry *e = kt_raft_entry_at(nd->r, i);
    if (!e) {
      sim_fail(s, "n%llu commit %llu beyond its log", (unsigned long long)nd->id,
               (unsigned long long)c);
      break;
    }
    check_committed(s, nd, e, "commits");
  }
  nd->checked_commit = KT_MAX(nd->checked_commit, c);
  s->max_commit = KT_MAX(s->max_commit, c);
}

/* Makes the first n entries of w (and its hard state, written first)
 * durable on nd's disk; the entries' data moves to the disk. */
static void disk_apply(struct sim_node *nd, struct disk_write *w, size_t n) {
  nd->hs = w->hs;
  if (n == 0)
    return;
  uint64_t first = w->ents[0].index;
  kt_assert(first >= nd->dfirst && first <= nd->dfirst + nd->dn);
  for (size_t i = first - nd->dfirst; i < nd->dn; i++)
    free(nd->dlog[i].data);
  nd->dn = first - nd->dfirst;
  for (size_t i = 0; i < n; i++) {
    GROW(nd->dlog, nd->dn, nd->dcap);
    nd->dlog[nd->dn++] = w->ents[i];
    w->ents[i].data = NULL;
  }
}

static void complete_writes(struct sim *s, struct sim_node *nd) {
  size_t done = 0;
  while (done < nd->wq_n && nd->wq[done].done_at <= s->now) {
    struct disk_write *w = &nd->wq[done++];
    disk_apply(nd, w, w->n);
    if (w->n)
      kt_raft_persisted(nd->r, nd->dlog[nd->dn - 1].term, nd->dlog[nd->dn - 1].index);
    kt_raft_hs_persisted(nd->r, &w->hs);
    free_write(w);
  }
  if (done)
    memmove(nd->wq, nd->wq + done, (nd->wq_n - done) * sizeof *nd->wq);
  nd->wq_n -= done;
}

static void check_log_matching(struct sim *s) {
  for (int a = 0; a < s->n_nodes; a++)
    for (int b = a + 1; b < s->n_nodes; b++) {
      struct sim_node *x = &s->nodes[a], *y = &s->nodes[b];
      if (!x->alive || !y->alive)
        continue;
      uint64_t top = KT_MIN(kt_raft_last_index(x->r), kt_raft_last_index(y->r));
      uint64_t i = top;
      while (i > 0 && kt_raft_term_at(x->r, i) != kt_raft_term_at(y->r, i))
        i--;
      for (uint64_t j = i; j > 0; j--) {
        const struct kt_raft_entry *e = kt_raft_entry_at(x->r, j), *f = kt_raft_entry_at(y->r, j);
        if (!e || !f)
          break;
        if (e->term != f->term || e->len != f->len ||
            (e->len && memcmp(e->data, f->data, e->len))) {
          sim_fail(s, "log matching: n%llu and n%llu agree at %llu but differ at %llu",
                   (unsigned long long)x->id, (unsigned long long)y->id, (unsigned long long)i,
                   (unsigned long long)j);
          return;
        }
      }
    }
}

/* Each member snapshots its applied state now and then and compacts its
 * in-memory log to the snapshot (keeping a small random tail, like the
 * node's catch-up window), and purges its disk log up to it: followers that
 * fall behind need a snapshot. */
static void snapshot_and_compact(struct sim *s) {
  for (int i = 0; i < s->n_nodes; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (!nd->alive || nd->applied < nd->snap_index + 4 || !chance(s, 500))
      continue;
    const struct kt_raft_entry *e = kt_raft_entry_at(nd->r, nd->applied);
    if (!e || nd->applied > nd->dfirst - 1 + nd->dn)
      continue; /* not durable on its disk yet */
    nd->snap_index = nd->applied;
    nd->snap_term = e->term;
    nd->snap_conf = nd->conf; /* the configuration at the snapshot's index */
    uint64_t keep = kt_rng_below(&s->rng, 8);
    uint64_t to = nd->snap_index > keep ? nd->snap_index - keep : 0;
    if (to >= kt_raft_first_index(nd->r) && kt_raft_compact(nd->r, to) != 0)
      sim_fail(s, "n%llu refused to compact to %llu", (unsigned long long)nd->id,
               (unsigned long long)to);
    /* purge the disk log up to the snapshot */
    uint64_t drop = nd->snap_index + 1 - nd->dfirst;
    for (uint64_t j = 0; j < drop; j++)
      free(nd->dlog[j].data);
    memmove(nd->dlog, nd->dlog + drop, (nd->dn - drop) * sizeof *nd->dlog);
    nd->dn -= drop;
    nd->dfirst = nd->snap_index + 1;
  }
}

static void propose(struct sim *s, struct sim_node *nd) {
  char buf[32];
  int len = snprintf(buf, sizeof buf, "p%llu", (unsigned long long)++s->next_prop);
  uint64_t idx;
  (void)kt_raft_propose(nd->r, buf, (uint32_t)len, &idx);
}

static void read_index(struct sim *s, struct sim_node *nd) {
  uint64_t ctx = ++s->next_ctx;
  if (kt_raft_read_index(nd->r, ctx) == 0) {
    GROW(s->reads, s->rn, s->rcap);
    s->reads[s->rn++] = (struct pending_read){ctx, s->max_commit};
  }
}

/* A spare member to add: started (empty log, empty configuration) the
 * first time it is proposed; 0 when every id is used. */
static uint64_t spare_member(struct sim *s) {
  if (s->spare)
    return s->spare;
  if (s->n_nodes >= SIM_MAX_N)
    return 0;
  struct sim_node *nd = &s->nodes[s->n_nodes++];
  nd->id = (uint64_t)s->n_nodes;
  nd->dfirst = 1;
  node_start(s, nd);
  s->spare = nd->id;
  return nd->id;
}

/* A random change that nd's configuration allows, keeping 3..5 voters
 * (now and then an invalid one, which every member must refuse alike),
 * proposed on nd. */
static void propose_conf_change(struct sim *s, struct sim_node *nd) {
  const struct sim_conf *c = &nd->conf;
  uint8_t change = 0;
  uint64_t id = 0;
  switch (kt_rng_below(&s->rng, 6)) {
  case 0: /* add a learner, promoted later */
  case 1:
    if (c->nv + c->nl < 6 && c->nl < 2)
      change = KT_RAFT_CONF_ADD_LEARNER, id = spare_member(s);
    break;
  case 2:
    if (c->nl && c->nv < 5)
      change = KT_RAFT_CONF_PROMOTE, id = c->l[kt_rng_below(&s->rng, c->nl)];
    else if (c->nv < 5)
      change = KT_RAFT_CONF_ADD_VOTER, id = spare_member(s);
    break;
  case 3:
  case 4:
    if (c->nv > 3)
      change = KT_RAFT_CONF_REMOVE, id = c->v[kt_rng_below(&s->rng, c->nv)];
    else if (c->nl)
      change = KT_RAFT_CONF_REMOVE, id = c->l[kt_rng_below(&s->rng, c->nl)];
    break;
  default: /* invalid: promote a voter, add id 0, remove an absent member */
    if (chance(s, 500) && c->nv)
      change = KT_RAFT_CONF_PROMOTE, id = c->v[kt_rng_below(&s->rng, c->nv)];
    else if (chance(s, 500))
      change = KT_RAFT_CONF_ADD_LEARNER, id = 0;
    else
      change = KT_RAFT_CONF_REMOVE, id = 1000;
    break;
  }
  if (!change || (!id && change != KT_RAFT_CONF_ADD_LEARNER))
    return;
  uint8_t data[CONF_DATA_LEN];
  conf_encode(data, change, id);
  uint64_t idx;
  if (kt_raft_propose_conf(nd->r, data, sizeof data, &idx) == 0)
    s->st.conf_proposed++;
  if (s->o.verbose)
    printf("  t=%llu n%llu propose conf change %u of n%llu\n", (unsigned long long)s->now,
           (unsigned long long)nd->id, change, (unsigned long long)id);
  process_ready(s, nd);
}

/* One unit of simulated time. */
static void sim_unit(struct sim *s, bool chaos) {
  s->now++;
  while (s->hn && s->heap[0].at <= s->now && !s->failed) {
    struct net_msg nm = net_pop(s);
    struct sim_node *to = node_of(s, nm.to);
    if (!to->alive) {
      /* lost */
    } else if (nm.snap_index) {
      struct sim_conf c;
      memcpy(&c, nm.p, sizeof c);
      install_snapshot(s, to, nm.snap_index, nm.snap_term, &c);
      process_ready(s, to);
    } else {
      struct kt_raft_msg m;
      struct kt_err e;
      kt_arena_reset(&s->arena);
      if (kt_raft_msg_decode(nm.p, nm.n, &s->arena, &m, &e) != 0)
        sim_fail(s, "decode: %s", e.msg);
      else
        kt_raft_step(to->r, &m);
      process_ready(s, to);
    }
    free(nm.p);
  }
  for (size_t i = 0; i < s->n_failed_snaps; i++) {
    struct sim_node *from = node_of(s, s->failed_snaps[i].from);
    if (from->alive) {
      kt_raft_report_snapshot_failed(from->r, s->failed_snaps[i].to);
      process_ready(s, from);
    }
  }
  s->n_failed_snaps = 0;
  for (int i = 0; i < s->n_nodes && !s->failed; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (!nd->started || nd->gone)
      continue;
    if (!nd->alive) {
      if (!chaos || s->now >= nd->restart_at) {
        node_start(s, nd);
        if (s->o.verbose)
          printf("  t=%llu n%llu restart\n", (unsigned long long)s->now,
                 (unsigned long long)nd->id);
      } else {
        continue;
      }
    }
    complete_writes(s, nd);
    if ((s->now + (uint64_t)i * 3) % 10 == 0)
      kt_raft_tick(nd->r);
    process_ready(s, nd);
  }
  if (s->now % 10 != 0 || s->failed)
    return;
  /* once per tick: clients and faults */
  struct sim_node *nd = &s->nodes[kt_rng_below(&s->rng, (uint64_t)s->n_nodes)];
  if (nd->alive && chance(s, 300)) {
    propose(s, nd);
    process_ready(s, nd);
  }
  nd = &s->nodes[kt_rng_below(&s->rng, (uint64_t)s->n_nodes)];
  if (nd->alive && chance(s, 60)) {
    read_index(s, nd);
    process_ready(s, nd);
  }
  if (!chaos)
    return;
  if (s->o.conf_changes && chance(s, s->o.conf_x10 ? s->o.conf_x10 : 25)) {
    nd = &s->nodes[kt_rng_below(&s->rng, (uint64_t)s->n_nodes)];
    if (nd->alive)
      propose_conf_change(s, nd);
  }
  if (chance(s, 15)) { /* new partition */
    int groups = 1 + (int)kt_rng_below(&s->rng, 3);
    for (int i = 0; i < SIM_MAX_N; i++)
      s->nodes[i].group = (int)kt_rng_below(&s->rng, (uint64_t)groups);
  } else if (chance(s, 8)) { /* a one-way cut */
    uint64_t a = 1 + kt_rng_below(&s->rng, (uint64_t)s->n_nodes);
    uint64_t b = 1 + kt_rng_below(&s->rng, (uint64_t)s->n_nodes);
    s->oneway[a][b] = true;
  } else if (chance(s, 20)) { /* heal */
    for (int i = 0; i < SIM_MAX_N; i++)
      s->nodes[i].group = 0;
    memset(s->oneway, 0, sizeof s->oneway);
  }
  if (chance(s, 10)) { /* leadership transfer */
    for (int i = 0; i < s->n_nodes; i++)
      if (s->nodes[i].alive && kt_raft_role(s->nodes[i].r) == KT_RAFT_LEADER) {
        uint64_t to = 1 + kt_rng_below(&s->rng, (uint64_t)s->n_nodes);
        if (kt_raft_transfer_leader(s->nodes[i].r, to) == 0)
          s->st.transfers++;
        process_ready(s, &s->nodes[i]);
        break;
      }
  }
  if (s->o.crashes && chance(s, s->o.crash_x10 ? s->o.crash_x10 : 8)) {
    nd = &s->nodes[kt_rng_below(&s->rng, (uint64_t)s->n_nodes)];
    if (nd->alive)
      node_crash(s, nd);
  }
  if ((s->now / 10) % 50 == 0)
    check_log_matching(s);
  if ((s->now / 10) % 20 == 0)
    snapshot_and_compact(s);
}

static void sim_free(struct sim *s) {
  free(s->confs);
  for (int i = 0; i < s->n_nodes; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (nd->r) {
      for (size_t j = 0; j < nd->wq_n; j++)
        free_write(&nd->wq[j]);
      kt_raft_free(nd->r);
    }
    for (size_t j = 0; j < nd->dn; j++)
      free(nd->dlog[j].data);
    free(nd->dlog);
    free(nd->wq);
  }
  for (size_t i = 0; i < s->hn; i++)
    free(s->heap[i].p);
  free(s->heap);
  for (size_t i = 0; i < s->gn; i++)
    free(s->g[i].data);
  free(s->g);
  free(s->leader_of);
  free(s->reads);
  free(s->failed_snaps);
  kt_buf_free(&s->enc);
  kt_arena_free(&s->arena);
}

/* Runs one seed. Returns 0 if every check held, else 1 with why filled. */
static int sim_run(const struct sim_opts *o, struct sim_stats *st, char *why, size_t why_n) {
  struct sim *s = calloc(1, sizeof *s);
  kt_assert(s);
  s->o = *o;
  kt_assert(o->n >= 1 && o->n <= SIM_MAX_N);
  kt_rng_seed(&s->rng, o->seed);
  s->drop_pct = (uint32_t)kt_rng_below(&s->rng, 100);     /* 0..10% */
  s->dup_pct = (uint32_t)kt_rng_below(&s->rng, 50);       /* 0..5% */
  s->max_delay = 1 + (uint32_t)kt_rng_below(&s->rng, 30); /* up to 3 ticks */
  s->pre_vote = kt_rng_below(&s->rng, 4) != 0;
  s->check_quorum = kt_rng_below(&s->rng, 4) != 0;
  /* bootstrap as the node does: log 1..n = one ADD_VOTER each (term 1),
   * committed, applied by the state machine when raft hands them out */
  s->n_nodes = o->n;
  for (int i = 0; i < o->n; i++) {
    struct sim_node *nd = &s->nodes[i];
    nd->id = (uint64_t)i + 1;
    nd->dfirst = 1;
    nd->hs = (struct kt_raft_hard_state){1, 0, (uint64_t)o->n};
    for (int j = 0; j < o->n; j++) {
      GROW(nd->dlog, nd->dn, nd->dcap);
      struct kt_raft_entry *e = &nd->dlog[nd->dn++];
      *e = (struct kt_raft_entry){1, (uint64_t)j + 1, KT_RAFT_ENTRY_CONF, CONF_DATA_LEN,
                                  malloc(CONF_DATA_LEN)};
      conf_encode(e->data, KT_RAFT_CONF_ADD_VOTER, (uint64_t)j + 1);
    }
  }
  for (int i = 0; i < o->n; i++)
    node_start(s, &s->nodes[i]);
  uint64_t end = (uint64_t)o->ticks * 10;
  while (s->now < end && !s->failed)
    sim_unit(s, true);
  if (!s->failed)
    check_log_matching(s);
  /* liveness: heal everything (the nodes of removed members are shut down),
   * then one proposal must reach every member of the leader's configuration */
  for (int i = 0; i < SIM_MAX_N; i++) {
    struct sim_node *nd = &s->nodes[i];
    nd->group = 0;
    if (s->removed[i + 1] && nd->alive)
      node_crash(s, nd);
    if (s->removed[i + 1])
      nd->gone = true;
  }
  memset(s->oneway, 0, sizeof s->oneway);
  s->drop_pct = s->dup_pct = 0;
  uint64_t heal = s->now, goal = 0;
  int lead = -1;
  while (!s->failed && s->now < heal + 10 * 400) {
    sim_unit(s, false);
    if (s->now % 10)
      continue;
    lead = -1;
    for (int i = 0; i < s->n_nodes; i++)
      if (s->nodes[i].alive && kt_raft_role(s->nodes[i].r) == KT_RAFT_LEADER)
        lead = i;
    if (lead < 0)
      continue;
    struct kt_raft *lr = s->nodes[lead].r;
    if (!goal || kt_raft_term_at(lr, goal) == 0) {
      char buf[32];
      int len = snprintf(buf, sizeof buf, "final%llu", (unsigned long long)kt_raft_term(lr));
      if (kt_raft_propose(lr, buf, (uint32_t)len, &goal) == 0)
        process_ready(s, &s->nodes[lead]);
      continue;
    }
    struct sim_conf c = conf_of_raft(lr);
    bool all = true;
    for (int i = 0; i < s->n_nodes; i++)
      if (conf_has(&c, (uint64_t)i + 1))
        all &= s->nodes[i].applied >= goal;
    if (all)
      break;
  }
  if (!s->failed) {
    check_log_matching(s);
    struct sim_conf c = {0};
    if (lead >= 0)
      c = conf_of_raft(s->nodes[lead].r);
    char cs[160];
    conf_str(&c, cs, sizeof cs);
    for (int i = 0; i < s->n_nodes && !s->failed; i++)
      if (!goal || lead < 0 || (conf_has(&c, (uint64_t)i + 1) && s->nodes[i].applied < goal))
        sim_fail(s,
                 "no progress after healing: n%d applied %llu, goal %llu, leader n%d conf %s "
                 "(role %s term %llu commit %llu persisted %llu first %llu last %llu)",
                 i + 1, (unsigned long long)s->nodes[i].applied, (unsigned long long)goal, lead + 1,
                 cs, s->nodes[i].r ? kt_raft_role_name(kt_raft_role(s->nodes[i].r)) : "down",
                 s->nodes[i].r ? (unsigned long long)kt_raft_term(s->nodes[i].r) : 0,
                 s->nodes[i].r ? (unsigned long long)kt_raft_commit(s->nodes[i].r) : 0,
                 s->nodes[i].r ? (unsigned long long)kt_raft_persisted_index(s->nodes[i].r) : 0,
                 s->nodes[i].r ? (unsigned long long)kt_raft_first_index(s->nodes[i].r) : 0,
                 s->nodes[i].r ? (unsigned long long)kt_raft_last_index(s->nodes[i].r) : 0);
  }
  if (s->failed && o->verbose)
    for (int i = 0; i < s->n_nodes; i++) {
      struct sim_node *nd = &s->nodes[i];
      char cs[160];
      conf_str(&nd->conf, cs, sizeof cs);
      printf("  end n%d: %s%s%s applied %llu conf %s", i + 1, nd->alive ? "up" : "down",
             nd->removed ? " removed" : "", nd->gone ? " gone" : "",
             (unsigned long long)nd->applied, cs);
      if (nd->alive)
        printf(" role %s term %llu lead %llu commit %llu last %llu",
               kt_raft_role_name(kt_raft_role(nd->r)), (unsigned long long)kt_raft_term(nd->r),
               (unsigned long long)kt_raft_leader(nd->r), (unsigned long long)kt_raft_commit(nd->r),
               (unsigned long long)kt_raft_last_index(nd->r));
      printf("\n");
    }
  int rc = s->failed;
  if (rc)
    snprintf(why, why_n, "%s", s->why);
  s->st.committed = s->gn;
  if (st)
    *st = s->st;
  sim_free(s);
  free(s);
  return rc;
}
