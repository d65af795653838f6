/* test/unit/raft_test.c — core/raft: elections, replication, flow control,
 * persistence gating, ReadIndex, transfer, compaction, and the message codec.
 *
 * A tiny in-process cluster (struct cl) moves messages through the codec in
 * FIFO order, persists at once unless a test holds a member's disk, and
 * records each member's trace events as text the tests search. */
#include <stdlib.h>

#include "../../core/raft.h"
#include "test.h"

#define MAXN 5

struct cl {
  int n, nv;                   /* members 1..n; voters 1..nv, learners after */
  struct kt_raft *r[MAXN + 1]; /* by id, 1-based */
  uint64_t voters[MAXN];
  bool hold_disk[MAXN + 1];     /* do not report persistence */
  bool cut[MAXN + 1][MAXN + 1]; /* drop messages from → to */
  struct kt_buf q[4096];        /* encoded messages in flight */
  int qh, qt;
  struct kt_buf ev[MAXN + 1]; /* trace, one event per line */
  uint64_t applied[MAXN + 1];
  uint64_t reads[MAXN + 1][64], read_index[MAXN + 1][64];
  int n_reads[MAXN + 1];
  int sent[MAXN + 1][KT_RAFT_MSG_TYPE_MAX]; /* by sender and type */
  int sent_to[MAXN + 1];                    /* by destination */
  int rejects;                              /* APP_RESP rejects seen */
  uint32_t max_app_entries;                 /* most entries in one APP */
  uint64_t hb_commit[MAXN + 1];             /* commit of the last heartbeat to */
  /* last unreported write of a held member */
  uint64_t pend_term[MAXN + 1], pend_index[MAXN + 1];
  struct kt_raft_hard_state pend_hs[MAXN + 1];
  struct kt_raft_msg last_msg; /* copy of the last message sent (no entries) */
  int conf_rc[MAXN + 1];       /* of the last CONF entry applied */
  int n_conf[MAXN + 1];        /* CONF entries applied */
};

static struct kt_raft_config cfg_for(struct cl *c, uint64_t id, bool pre_vote, bool cq) {
  struct kt_raft_config cfg = {.id = id,
                               .voters = c->voters,
                               .n_voters = (size_t)c->nv,
                               .learners = c->voters + c->nv,
                               .n_learners = (size_t)(c->n - c->nv),
                               .election_ticks = 10,
                               .heartbeat_ticks = 1,
                               .max_msg_bytes = 1 << 20,
                               .max_inflight_msgs = 256,
                               .pre_vote = pre_vote,
                               .check_quorum = cq,
                               .seed = 42};
  return cfg;
}

/* n members: voters 1..nv, learners nv+1..n. */
static struct cl *cl_new_learners(int n, int nv, bool pre_vote, bool cq) {
  struct cl *c = calloc(1, sizeof *c);
  c->n = n;
  c->nv = nv;
  for (int i = 0; i < n; i++)
    c->voters[i] = (uint64_t)i + 1;
  for (int i = 1; i <= n; i++) {
    struct kt_raft_config cfg = cfg_for(c, (uint64_t)i, pre_vote, cq);
    kt_assert(kt_raft_new(&cfg, &c->r[i]) == 0);
  }
  return c;
}

static struct cl *cl_new(int n, bool pre_vote, bool cq) {
  return cl_new_learners(n, n, pre_vote, cq);
}

static void cl_free(struct cl *c) {
  for (int i = 1; i <= c->n; i++) {
    kt_raft_free(c->r[i]);
    kt_buf_free(&c->ev[i]);
  }
  for (size_t i = 0; i < KT_ARRAY_LEN(c->q); i++)
    kt_buf_free(&c->q[i]);
  free(c);
}

static bool has_event(struct cl *c, int i, const char *s) {
  kt_buf_append(&c->ev[i], "", 1);
  c->ev[i].len--;
  return c->ev[i].p && strstr((const char *)c->ev[i].p, s) != NULL;
}

/* Takes every ready of member i: persist (unless held), send, apply. */
static void cl_ready(struct cl *c, int i) {
  struct kt_raft *r = c->r[i];
  while (kt_raft_has_ready(r)) {
    struct kt_raft_ready rd;
    kt_raft_ready(r, &rd);
    for (size_t k = 0; k < rd.n_events; k++) {
      char b[128];
      kt_raft_event_str(&rd.events[k], b, sizeof b);
      kt_buf_append(&c->ev[i], b, strlen(b));
      kt_buf_append(&c->ev[i], "\n", 1);
    }
    for (size_t k = 0; k < rd.n_msgs; k++) {
      const struct kt_raft_msg *m = &rd.msgs[k];
      c->sent[i][m->type]++;
      c->sent_to[m->to]++;
      c->last_msg = *m;
      c->last_msg.entries = NULL;
      if (m->type == KT_RAFT_MSG_APP_RESP && m->reject)
        c->rejects++;
      if (m->type == KT_RAFT_MSG_APP)
        c->max_app_entries = KT_MAX(c->max_app_entries, m->n_entries);
      if (m->type == KT_RAFT_MSG_HEARTBEAT)
        c->hb_commit[m->to] = m->commit;
      if (m->to > (uint64_t)c->n || c->cut[m->from][m->to])
        continue; /* no such member here (a learner added by a test) */
      struct kt_buf *b = &c->q[c->qt++ % KT_ARRAY_LEN(c->q)];
      kt_buf_reset(b);
      kt_raft_msg_encode(m, b);
    }
    for (size_t k = 0; k < rd.n_committed; k++) {
      const struct kt_raft_entry *e = &rd.committed[k];
      kt_assert(e->index == c->applied[i] + 1);
      c->applied[i] = e->index;
      if (e->type == KT_RAFT_ENTRY_CONF) { /* the tests' encoding: change, id */
        kt_assert(e->len == 2);
        c->conf_rc[i] = kt_raft_apply_conf(r, e->data[0], e->data[1]);
        c->n_conf[i]++;
      }
    }
    for (size_t k = 0; k < rd.n_reads && c->n_reads[i] < 64; k++) {
      c->reads[i][c->n_reads[i]] = rd.reads[k].context;
      c->read_index[i][c->n_reads[i]++] = rd.reads[k].index;
    }
    struct kt_raft_hard_state hs = rd.hs;
    uint64_t lt = rd.n_entries ? rd.entries[rd.n_entries - 1].term : 0;
    uint64_t li = rd.n_entries ? rd.entries[rd.n_entries - 1].index : 0;
    kt_raft_advance(r);
    if (c->hold_disk[i]) {
      if (li) {
        c->pend_term[i] = lt;
        c->pend_index[i] = li;
      }
      c->pend_hs[i] = hs;
    } else {
      if (li)
        kt_raft_persisted(r, lt, li);
      kt_raft_hs_persisted(r, &hs);
    }
  }
}

/* Reports member i's held writes as durable. */
static void cl_flush_disk(struct cl *c, int i) {
  if (c->pend_index[i])
    kt_raft_persisted(c->r[i], c->pend_term[i], c->pend_index[i]);
  kt_raft_hs_persisted(c->r[i], &c->pend_hs[i]);
  cl_ready(c, i);
}

static void cl_deliver(struct cl *c) {
  for (int i = 1; i <= c->n; i++)
    cl_ready(c, i);
  struct kt_arena a = {0};
  for (int guard = 0; guard < 100000 && c->qh != c->qt; guard++) {
    struct kt_buf *b = &c->q[c->qh++ % KT_ARRAY_LEN(c->q)];
    struct kt_raft_msg m;
    struct kt_err e;
    kt_arena_reset(&a);
    kt_assert(kt_raft_msg_decode(b->p, b->len, &a, &m, &e) == 0);
    if (c->cut[m.from][m.to])
      continue;
    kt_raft_step(c->r[m.to], &m);
    cl_ready(c, (int)m.to);
  }
  kt_arena_free(&a);
}

static void cl_tick(struct cl *c, int i, int k) {
  for (int j = 0; j < k; j++) {
    kt_raft_tick(c->r[i]);
    cl_deliver(c);
  }
}

static void cl_tick_all(struct cl *c, int k) {
  for (int j = 0; j < k; j++) {
    for (int i = 1; i <= c->n; i++)
      kt_raft_tick(c->r[i]);
    cl_deliver(c);
  }
}

static void cl_isolate(struct cl *c, int i, bool cut) {
  for (int j = 1; j <= c->n; j++)
    c->cut[i][j] = c->cut[j][i] = cut && i != j;
}

/* Makes member i leader while its own messages are cut: it campaigns (no
 * pre-vote) and member 2 (or 1) grants by a message stepped in directly. */
static void force_leader(struct cl *c, int i) {
  for (int k = 0; k < 25 && kt_raft_role(c->r[i]) != KT_RAFT_CANDIDATE; k++)
    cl_tick(c, i, 1);
  kt_assert(kt_raft_role(c->r[i]) == KT_RAFT_CANDIDATE);
  struct kt_raft_msg g = {.type = KT_RAFT_MSG_VOTE_RESP,
                          .from = i == 2 ? 1 : 2,
                          .to = (uint64_t)i,
                          .term = kt_raft_term(c->r[i])};
  kt_raft_step(c->r[i], &g);
  cl_deliver(c);
}

static int cl_leader(struct cl *c) {
  int l = 0;
  for (int i = 1; i <= c->n; i++)
    if (kt_raft_role(c->r[i]) == KT_RAFT_LEADER)
      l = i;
  return l;
}

static void cl_propose(struct cl *c, int i, const char *s) {
  uint64_t idx;
  kt_assert(kt_raft_propose(c->r[i], s, (uint32_t)strlen(s), &idx) == 0);
  cl_deliver(c);
}

/* ------------------------------------------------------------ elections */

TEST(raft_single_member_commits_only_after_persist) {
  struct cl *c = cl_new(1, true, true);
  c->hold_disk[1] = true;
  cl_tick(c, 1, 25);
  /* its own vote is not durable: still a candidate */
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_CANDIDATE);
  cl_flush_disk(c, 1);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_LEADER);
  CHECK(has_event(c, 1, "became leader term=1 last=1"));
  uint64_t idx;
  CHECK_EQ(kt_raft_propose(c->r[1], "x", 1, &idx), 0);
  CHECK_EQ(idx, 2);
  cl_ready(c, 1);
  CHECK_EQ(kt_raft_commit(c->r[1]), 0);
  CHECK_EQ(c->applied[1], 0);
  cl_flush_disk(c, 1);
  CHECK_EQ(kt_raft_commit(c->r[1]), 2);
  CHECK_EQ(c->applied[1], 2);
  cl_free(c);
}

TEST(raft_elects_one_leader) {
  for (int pv = 0; pv < 2; pv++) {
    struct cl *c = cl_new(3, pv, true);
    cl_tick(c, 1, 25);
    CHECK_EQ(cl_leader(c), 1);
    CHECK(has_event(c, 1, "became leader term=1"));
    CHECK(has_event(c, 2, "leader term=1 id=1"));
    CHECK_EQ(!!has_event(c, 1, "became pre-candidate term=0"), pv);
    CHECK_EQ(kt_raft_leader(c->r[3]), 1);
    /* the empty entry of the new term commits everywhere */
    cl_tick_all(c, 3);
    for (int i = 1; i <= 3; i++) {
      CHECK_EQ(kt_raft_commit(c->r[i]), 1);
      CHECK_EQ(c->applied[i], 1);
    }
    cl_free(c);
  }
}

TEST(raft_vote_granted_only_after_persisted) {
  struct cl *c = cl_new(3, false, false);
  c->hold_disk[2] = c->hold_disk[3] = true;
  cl_tick(c, 1, 25);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_CANDIDATE);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_VOTE_RESP], 0);
  CHECK_EQ(c->sent[3][KT_RAFT_MSG_VOTE_RESP], 0);
  CHECK_EQ(kt_raft_term(c->r[2]), kt_raft_term(c->r[1])); /* term and vote taken, unsent */
  cl_flush_disk(c, 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_VOTE_RESP], 1);
  cl_deliver(c);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_LEADER);
  CHECK(has_event(c, 2, "vote granted"));
  cl_free(c);
}

TEST(raft_prevote_keeps_isolated_term) {
  for (int pv = 0; pv < 2; pv++) {
    struct cl *c = cl_new(3, pv, true);
    cl_tick(c, 1, 25);
    CHECK_EQ(cl_leader(c), 1);
    uint64_t t = kt_raft_term(c->r[1]);
    cl_isolate(c, 3, true);
    for (int k = 0; k < 100; k++)
      cl_tick_all(c, 1);
    if (pv)
      CHECK_EQ(kt_raft_term(c->r[3]), t);
    else
      CHECK(kt_raft_term(c->r[3]) > t + 2);
    cl_isolate(c, 3, false);
    cl_tick_all(c, 30);
    /* with pre-vote the rejoining member does not depose the leader */
    if (pv) {
      CHECK_EQ(cl_leader(c), 1);
      CHECK_EQ(kt_raft_term(c->r[1]), t);
    } else {
      CHECK(kt_raft_term(c->r[1]) > t);
    }
    CHECK(cl_leader(c) != 0);
    cl_free(c);
  }
}

TEST(raft_check_quorum_steps_down) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  cl_isolate(c, 1, true);
  cl_tick(c, 1, 25);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  CHECK(has_event(c, 1, "step down term=1 reason=no-quorum"));
  cl_free(c);
}

TEST(raft_higher_term_steps_down) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  struct kt_raft_msg m = {.type = KT_RAFT_MSG_APP_RESP, .from = 2, .to = 1, .term = 7};
  kt_raft_step(c->r[1], &m);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  CHECK_EQ(kt_raft_term(c->r[1]), 7);
  cl_free(c);
}

TEST(raft_lease_ignores_disruptive_vote) {
  struct cl *c = cl_new(3, false, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 1);
  /* a follower in lease ignores a higher-term vote request */
  struct kt_raft_msg v = {
      .type = KT_RAFT_MSG_VOTE, .from = 3, .to = 2, .term = 9, .index = 100, .log_term = 9};
  kt_raft_step(c->r[2], &v);
  CHECK_EQ(kt_raft_term(c->r[2]), 1);
  cl_free(c);
}

/* ------------------------------------------------------------ replication */

TEST(raft_replicates_and_applies_everywhere) {
  struct cl *c = cl_new(5, true, true);
  cl_tick(c, 2, 25);
  CHECK_EQ(cl_leader(c), 2);
  char buf[16];
  for (int k = 0; k < 50; k++) {
    snprintf(buf, sizeof buf, "v%d", k);
    cl_propose(c, 2, buf);
  }
  cl_tick_all(c, 2);
  for (int i = 1; i <= 5; i++) {
    CHECK_EQ(c->applied[i], 51);
    const struct kt_raft_entry *e = kt_raft_entry_at(c->r[i], 51);
    CHECK(e != NULL);
    CHECK_BYTES(e->data, e->len, "v49");
  }
  cl_free(c);
}

TEST(raft_follower_forwards_proposals) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  uint64_t idx = 99;
  CHECK_EQ(kt_raft_propose(c->r[3], "fw", 2, &idx), 0);
  CHECK_EQ(idx, 0);
  cl_deliver(c);
  cl_tick_all(c, 2);
  const struct kt_raft_entry *e = kt_raft_entry_at(c->r[3], 2);
  CHECK(e != NULL);
  CHECK_BYTES(e->data, e->len, "fw");
  CHECK_EQ(c->applied[3], 2);
  /* no leader known: refused */
  struct cl *d = cl_new(3, true, true);
  CHECK_EQ(kt_raft_propose(d->r[1], "x", 1, &idx), KT_ENOLEADER);
  CHECK_EQ(kt_raft_read_index(d->r[1], 1), KT_ENOLEADER);
  cl_free(d);
  cl_free(c);
}

TEST(raft_ack_withheld_until_persisted) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  c->hold_disk[2] = c->hold_disk[3] = true;
  int acks2 = c->sent[2][KT_RAFT_MSG_APP_RESP];
  cl_propose(c, 1, "a");
  CHECK_EQ(kt_raft_last_index(c->r[2]), 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], acks2);
  CHECK_EQ(kt_raft_commit(c->r[1]), 1); /* leader persisted, followers not: no quorum */
  cl_flush_disk(c, 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], acks2 + 1);
  cl_deliver(c);
  CHECK_EQ(kt_raft_commit(c->r[1]), 2);
  cl_free(c);
}

TEST(raft_leader_counts_own_persisted_index) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  c->hold_disk[1] = c->hold_disk[2] = true;
  cl_propose(c, 1, "a");
  /* only member 3 persisted: 1 of 3 */
  CHECK_EQ(kt_raft_commit(c->r[1]), 1);
  cl_flush_disk(c, 1);
  CHECK_EQ(kt_raft_commit(c->r[1]), 2);
  CHECK_EQ(c->applied[1], 2);
  cl_free(c);
}

TEST(raft_truncation_drops_stale_ack) {
  /* follower 2 gets entries of term 1 it has not persisted; a term-2 leader
   * overwrites them; the old durable report must not ack the new entries. */
  struct cl *c = cl_new(3, false, false);
  struct kt_raft *f = c->r[2];
  uint8_t d = 'x';
  struct kt_raft_entry e1[2] = {{1, 1, 0, 1, &d}, {1, 2, 0, 1, &d}};
  struct kt_raft_msg app = {
      .type = KT_RAFT_MSG_APP, .from = 1, .to = 2, .term = 1, .n_entries = 2, .entries = e1};
  c->hold_disk[2] = true;
  kt_raft_step(f, &app);
  cl_ready(c, 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], 0);
  struct kt_raft_entry e2[1] = {{2, 1, 0, 1, &d}};
  struct kt_raft_msg app2 = {
      .type = KT_RAFT_MSG_APP, .from = 3, .to = 2, .term = 2, .n_entries = 1, .entries = e2};
  kt_raft_step(f, &app2);
  cl_ready(c, 2);
  CHECK(has_event(c, 2, "truncate term=2 from=1"));
  kt_raft_persisted(f, 1, 2); /* the old write became durable: no longer our log */
  kt_raft_hs_persisted(f, &c->pend_hs[2]);
  cl_ready(c, 2);
  CHECK_EQ(kt_raft_persisted_index(f), 0);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], 0);
  kt_raft_persisted(f, 2, 1);
  cl_ready(c, 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], 1);
  CHECK_EQ(c->last_msg.to, 3);
  CHECK_EQ(c->last_msg.index, 1);
  CHECK_EQ(c->last_msg.term, 2);
  cl_free(c);
}

static void restart_with_log(struct cl *c, int id, uint64_t term, const uint64_t *terms, int n) {
  struct kt_raft_entry ents[256];
  for (int i = 0; i < n; i++)
    ents[i] = (struct kt_raft_entry){terms[i], (uint64_t)i + 1, 0, 0, NULL};
  struct kt_raft_config cfg = cfg_for(c, (uint64_t)id, false, false);
  cfg.hs.term = term;
  cfg.entries = ents;
  cfg.n_entries = (size_t)n;
  kt_raft_free(c->r[id]);
  kt_assert(kt_raft_new(&cfg, &c->r[id]) == 0);
}

TEST(raft_fast_backtracking) {
  struct cl *c = cl_new(3, false, false);
  uint64_t lead[100], div[150];
  for (int i = 0; i < 100; i++)
    lead[i] = i < 50 ? 1 : 3;
  for (int i = 0; i < 150; i++)
    div[i] = i < 50 ? 1 : 2;
  restart_with_log(c, 1, 5, lead, 100);
  restart_with_log(c, 2, 4, div, 150);
  restart_with_log(c, 3, 5, lead, 100);
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  cl_tick_all(c, 3);
  CHECK(c->rejects <= 2); /* one-by-one backtracking would take ~50 */
  CHECK_EQ(kt_raft_last_index(c->r[2]), 101);
  CHECK_EQ(kt_raft_term_at(c->r[2], 60), 3);
  CHECK_EQ(kt_raft_commit(c->r[2]), 101);
  cl_free(c);
}

TEST(raft_commits_only_current_term_entries) {
  /* leader of term 3 with an uncommitted term-1 entry at 2 */
  struct cl *c = cl_new(3, false, false);
  uint64_t l[2] = {1, 1};
  restart_with_log(c, 1, 2, l, 2);
  restart_with_log(c, 2, 2, l, 1);
  restart_with_log(c, 3, 2, l, 1);
  c->cut[1][2] = c->cut[1][3] = true; /* hold appends; votes go as separate steps */
  force_leader(c, 1);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_LEADER);
  CHECK_EQ(kt_raft_term(c->r[1]), 3);
  struct kt_raft_msg ack = {
      .type = KT_RAFT_MSG_APP_RESP, .from = 2, .to = 1, .term = 3, .index = 2};
  kt_raft_step(c->r[1], &ack);
  cl_ready(c, 1);
  CHECK_EQ(kt_raft_commit(c->r[1]), 0); /* index 2 is of term 1: not directly */
  ack.index = 3;
  kt_raft_step(c->r[1], &ack);
  cl_ready(c, 1);
  CHECK_EQ(kt_raft_commit(c->r[1]), 3);
  cl_free(c);
}

TEST(raft_batching_and_inflight_limits) {
  struct cl *c = cl_new(3, false, false);
  for (int i = 1; i <= 3; i++) {
    kt_raft_free(c->r[i]);
    struct kt_raft_config cfg = cfg_for(c, (uint64_t)i, false, false);
    cfg.max_msg_bytes = 100;
    cfg.max_inflight_msgs = 2;
    kt_assert(kt_raft_new(&cfg, &c->r[i]) == 0);
  }
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 1);
  /* cut the leader's output, propose 10 × 40 bytes */
  c->cut[1][2] = c->cut[1][3] = true;
  int apps = c->sent[1][KT_RAFT_MSG_APP];
  char v[41];
  memset(v, 'v', 40);
  v[40] = 0;
  for (int k = 0; k < 10; k++)
    cl_propose(c, 1, v);
  /* replicate state: each proposal goes at once, but only 2 messages in
   * flight per follower */
  CHECK_EQ(c->sent[1][KT_RAFT_MSG_APP] - apps, 4);
  CHECK_EQ(c->max_app_entries, 1);
  c->cut[1][2] = c->cut[1][3] = false;
  /* a stalled stream falls back to probing and then catches up */
  cl_tick_all(c, 20);
  for (int i = 1; i <= 3; i++)
    CHECK_EQ(c->applied[i], 11);
  CHECK(has_event(c, 1, "probe term=1 peer=2"));
  CHECK_EQ(c->max_app_entries, 2); /* the catch-up: 2 × 40 B fit in 100 B, 3 do not */
  cl_free(c);
}

/* Proposals of one turn (no ready between them) travel together: one APP
 * per follower from the leader, one PROP from a follower, and one APP_RESP
 * back per APP, not one message per entry each way. */
TEST(raft_proposals_of_a_turn_travel_in_one_message) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 1);
  uint64_t base = c->applied[1];
  int apps = c->sent[1][KT_RAFT_MSG_APP], resps = c->sent[2][KT_RAFT_MSG_APP_RESP];
  c->max_app_entries = 0;
  uint64_t idx = 0;
  for (int k = 0; k < 5; k++)
    CHECK_EQ(kt_raft_propose(c->r[1], "L", 1, &idx), 0);
  CHECK_EQ(idx, base + 5); /* in the leader's log at once */
  cl_deliver(c);
  CHECK_EQ(c->sent[1][KT_RAFT_MSG_APP] - apps, 2 + 2); /* entries, then the commit */
  CHECK_EQ(c->max_app_entries, 5);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP] - resps, 2);
  int props = c->sent[3][KT_RAFT_MSG_PROP];
  for (int k = 0; k < 4; k++)
    CHECK_EQ(kt_raft_propose(c->r[3], "F", 1, &idx), 0);
  cl_deliver(c);
  CHECK_EQ(c->sent[3][KT_RAFT_MSG_PROP] - props, 1);
  CHECK_EQ(c->max_app_entries, 5);
  cl_tick_all(c, 2);
  for (int i = 1; i <= 3; i++)
    CHECK_EQ(c->applied[i], base + 9);
  const struct kt_raft_entry *e = kt_raft_entry_at(c->r[2], base + 9);
  CHECK(e != NULL);
  CHECK_BYTES(e->data, e->len, "F");
  cl_free(c);
}

TEST(raft_heartbeat_carries_commit) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  c->cut[1][3] = true;
  cl_propose(c, 1, "a");
  CHECK_EQ(kt_raft_commit(c->r[1]), 2);
  CHECK_EQ(kt_raft_commit(c->r[3]), 1);
  c->cut[1][3] = false;
  cl_tick(c, 1, 1); /* heartbeat: 3 has not got the entry yet, commit capped by its match */
  CHECK_EQ(c->hb_commit[3], 1);
  CHECK_EQ(c->hb_commit[2], 2);
  cl_tick(c, 1, 8); /* the lost APP: the stalled stream is probed again */
  CHECK_EQ(c->hb_commit[3], 2);
  CHECK_EQ(kt_raft_commit(c->r[3]), 2);
  CHECK_EQ(c->applied[3], 2);
  cl_free(c);
}

/* ------------------------------------------------------------ reads */

TEST(raft_read_index_on_leader_waits_for_heartbeat_quorum) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  cl_propose(c, 1, "a");
  cl_isolate(c, 1, true);
  CHECK_EQ(kt_raft_read_index(c->r[1], 77), 0);
  cl_deliver(c);
  CHECK_EQ(c->n_reads[1], 0); /* no quorum confirmed leadership */
  cl_isolate(c, 1, false);
  cl_tick(c, 1, 1);
  CHECK_EQ(c->n_reads[1], 1);
  CHECK_EQ(c->reads[1][0], 77);
  CHECK_EQ(c->read_index[1][0], 2);
  cl_free(c);
}

TEST(raft_read_index_on_follower) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  c->cut[1][3] = true;
  cl_propose(c, 1, "a");
  c->cut[1][3] = false;
  /* follower 3 has not applied index 2 yet: the read waits for it */
  c->cut[1][3] = false;
  CHECK_EQ(kt_raft_read_index(c->r[3], 5), 0);
  cl_deliver(c);
  CHECK_EQ(c->n_reads[3], 0);
  cl_tick_all(c, 8);
  CHECK_EQ(c->n_reads[3], 1);
  CHECK_EQ(c->reads[3][0], 5);
  CHECK_EQ(c->read_index[3][0], 2);
  CHECK(c->applied[3] >= 2);
  cl_free(c);
}

TEST(raft_read_index_waits_for_commit_in_term) {
  struct cl *c = cl_new(3, false, false);
  c->cut[1][2] = c->cut[1][3] = true;
  force_leader(c, 1);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_LEADER);
  CHECK_EQ(kt_raft_read_index(c->r[1], 9), 0);
  cl_deliver(c);
  CHECK_EQ(c->n_reads[1], 0);
  c->cut[1][2] = c->cut[1][3] = false;
  cl_tick_all(c, 3);
  CHECK_EQ(c->n_reads[1], 1);
  CHECK_EQ(c->read_index[1][0], 1);
  cl_free(c);
}

/* ------------------------------------------------------------ transfer, compaction */

TEST(raft_leadership_transfer) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  cl_propose(c, 1, "a");
  uint64_t t = kt_raft_term(c->r[1]);
  CHECK_EQ(kt_raft_transfer_leader(c->r[1], 3), 0);
  CHECK_EQ(kt_raft_propose(c->r[1], "b", 1, NULL), KT_EBUSY);
  cl_deliver(c);
  CHECK_EQ(cl_leader(c), 3);
  CHECK_EQ(kt_raft_term(c->r[3]), t + 1);
  CHECK(has_event(c, 1, "transfer leadership term=1 to=3"));
  CHECK_EQ(kt_raft_transfer_leader(c->r[1], 2), KT_ENOLEADER);
  CHECK_EQ(kt_raft_transfer_leader(c->r[3], 3), KT_EINVAL);
  cl_free(c);
}

TEST(raft_compaction_and_snapshot_seam) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  cl_isolate(c, 3, true);
  for (int k = 0; k < 10; k++)
    cl_propose(c, 1, "x");
  CHECK_EQ(c->applied[1], 11);
  CHECK_EQ(kt_raft_compact(c->r[1], 12), KT_EINVAL); /* beyond applied */
  CHECK_EQ(kt_raft_compact(c->r[1], 8), 0);
  CHECK_EQ(kt_raft_first_index(c->r[1]), 9);
  CHECK_EQ(kt_raft_term_at(c->r[1], 8), 1);
  CHECK_EQ(kt_raft_term_at(c->r[1], 7), 0);
  CHECK(kt_raft_entry_at(c->r[1], 8) == NULL);
  CHECK_EQ(kt_raft_compact(c->r[1], 5), KT_EINVAL); /* already compacted */
  cl_isolate(c, 3, false);
  cl_tick_all(c, 5);
  CHECK(has_event(c, 1, "need snapshot term=1 peer=3"));
  CHECK_EQ(c->applied[2], 11);
  cl_free(c);
}

TEST(raft_restart_from_persisted_state) {
  struct cl *c = cl_new(1, false, false);
  cl_tick(c, 1, 25);
  cl_propose(c, 1, "a");
  CHECK_EQ(c->applied[1], 2);
  struct kt_raft_entry ents[2];
  memcpy(ents, kt_raft_entry_at(c->r[1], 1), sizeof ents[0]);
  memcpy(ents + 1, kt_raft_entry_at(c->r[1], 2), sizeof ents[0]);
  struct kt_raft_config cfg = cfg_for(c, 1, false, false);
  cfg.hs = (struct kt_raft_hard_state){kt_raft_term(c->r[1]), 1, 9 /* beyond log: capped */};
  cfg.entries = ents;
  cfg.n_entries = 2;
  struct kt_raft *r2;
  CHECK_EQ(kt_raft_new(&cfg, &r2), 0);
  CHECK_EQ(kt_raft_commit(r2), 2);
  CHECK_EQ(kt_raft_last_index(r2), 2);
  struct kt_raft_ready rd;
  kt_raft_ready(r2, &rd);
  CHECK_EQ(rd.n_entries, 0);
  CHECK_EQ(rd.n_committed, 2);
  CHECK_BYTES(rd.committed[1].data, rd.committed[1].len, "a");
  kt_raft_advance(r2);
  kt_raft_free(r2);
  /* bad configs */
  uint64_t bad[2] = {1, 1};
  cfg = cfg_for(c, 1, false, false);
  cfg.voters = bad;
  cfg.n_voters = 2;
  CHECK_EQ(kt_raft_new(&cfg, &r2), KT_EINVAL);
  uint64_t zero[1] = {0}, two[1] = {2};
  cfg = cfg_for(c, 1, false, false);
  cfg.voters = zero;
  cfg.n_voters = 1;
  CHECK_EQ(kt_raft_new(&cfg, &r2), KT_EINVAL);
  cfg = cfg_for(c, 1, false, false);
  cfg.voters = two;
  cfg.n_voters = 1;
  cfg.learners = two; /* a voter and a learner at once */
  cfg.n_learners = 1;
  CHECK_EQ(kt_raft_new(&cfg, &r2), KT_EINVAL);
  cfg.learners = NULL;
  cfg.n_learners = 0;
  CHECK_EQ(kt_raft_new(&cfg, &r2), 0); /* id need not be a member */
  kt_raft_free(r2);
  cfg = cfg_for(c, 1, false, false);
  cfg.election_ticks = 1;
  CHECK_EQ(kt_raft_new(&cfg, &r2), KT_EINVAL);
  cl_free(c);
}

/* ------------------------------------------------------------ codec */

/* Header plus shared entries, as core/node.c sends them, against
 * kt_raft_msg_encode of the same message. */
static bool shared_encoding_same(struct kt_raft_ents_enc *c, const struct kt_raft_msg *m) {
  struct kt_buf want = {0}, got = {0};
  kt_raft_msg_encode(m, &want);
  uint8_t h[KT_RAFT_MSG_HEADER_BYTES];
  const uint8_t *p;
  size_t len;
  kt_raft_msg_encode_header(m, h);
  kt_raft_ents_enc_get(c, m->entries, m->n_entries, &p, &len);
  kt_buf_append(&got, h, sizeof h);
  kt_buf_append(&got, p, len);
  bool same = want.len == got.len && memcmp(want.p, got.p, want.len) == 0;
  kt_buf_free(&want);
  kt_buf_free(&got);
  return same;
}

TEST(raft_msg_shared_entries_encoding_is_byte_identical) {
  enum { N = 40 };
  static uint8_t data[N][64];
  struct kt_raft_entry log[N];
  for (int i = 0; i < N; i++) {
    uint32_t len = (uint32_t)(i * 7 % 50);
    memset(data[i], 'a' + i % 26, sizeof data[i]);
    log[i] = (struct kt_raft_entry){.term = 3 + i / 20,
                                    .index = 100 + i,
                                    .type = i == 17 ? KT_RAFT_ENTRY_CONF : 0,
                                    .len = len,
                                    .data = len ? data[i] : NULL};
  }
  /* each message gets its own copy of its entries, as raft's arena does */
  struct kt_raft_entry copy[8][N];
  struct kt_raft_msg m = {.type = KT_RAFT_MSG_APP, .from = 1, .term = 4, .commit = 90};
  struct kt_raft_ents_enc c = {0};
  kt_raft_ents_enc_reset(&c);

  /* 0 entries (a heartbeat, an empty append) */
  m.to = 2;
  m.index = 139;
  m.log_term = 4;
  CHECK(shared_encoding_same(&c, &m));
  struct kt_raft_msg hb = {
      .type = KT_RAFT_MSG_HEARTBEAT, .from = 1, .to = 3, .term = 4, .commit = 90, .context = 77};
  CHECK(shared_encoding_same(&c, &hb));

  /* 1 entry, to two followers: encoded once */
  memcpy(copy[0], &log[N - 1], sizeof log[0]);
  memcpy(copy[1], &log[N - 1], sizeof log[0]);
  m.n_entries = 1;
  m.entries = copy[0];
  m.index = 138;
  CHECK(shared_encoding_same(&c, &m));
  m.to = 3;
  m.commit = 91; /* the per-message header may differ */
  m.entries = copy[1];
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 1);
  CHECK_EQ(c.hits, 1);

  /* many entries to two followers, then followers behind them: a suffix
   * and a middle run share the same bytes */
  kt_raft_ents_enc_reset(&c);
  memcpy(copy[2], log, sizeof log);
  memcpy(copy[3], log, sizeof log);
  memcpy(copy[4], &log[10], 30 * sizeof log[0]);
  memcpy(copy[5], &log[5], 10 * sizeof log[0]);
  m.to = 2;
  m.index = 99;
  m.log_term = 3;
  m.n_entries = N;
  m.entries = copy[2];
  CHECK(shared_encoding_same(&c, &m));
  m.to = 3;
  m.entries = copy[3];
  CHECK(shared_encoding_same(&c, &m));
  m.to = 4;
  m.index = 109;
  m.n_entries = 30;
  m.entries = copy[4];
  CHECK(shared_encoding_same(&c, &m));
  m.to = 5;
  m.index = 104;
  m.n_entries = 10;
  m.entries = copy[5];
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 2);
  CHECK_EQ(c.hits, 4);

  /* differing ranges: the same indexes with other contents (another term,
   * other data, other length) or past the cached ones are encoded anew */
  memcpy(copy[6], &log[20], 10 * sizeof log[0]);
  copy[6][3].term = 9;
  m.to = 6;
  m.index = 119;
  m.entries = copy[6];
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 3);
  memcpy(copy[7], &log[20], 10 * sizeof log[0]);
  copy[7][9].data = data[0];
  m.entries = copy[7];
  CHECK(shared_encoding_same(&c, &m));
  memcpy(copy[1], &log[20], 10 * sizeof log[0]); /* entries' memory never changes in a batch */
  copy[1][9].len = 3;
  m.entries = copy[1];
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 5);
  CHECK_EQ(c.hits, 4);
  /* now cached: copy[1] (indexes 120..129); 125..134 runs past it */
  memcpy(copy[6], &log[25], 10 * sizeof log[0]);
  m.entries = copy[6];
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 6);
  /* indexes that are not consecutive: encoded, never cached */
  copy[5][0] = log[3];
  copy[5][1] = log[1];
  m.n_entries = 2;
  m.entries = copy[5];
  CHECK(shared_encoding_same(&c, &m));
  CHECK(shared_encoding_same(&c, &m));
  CHECK_EQ(c.misses, 6);
  CHECK_EQ(c.hits, 4);
  kt_raft_ents_enc_free(&c);
}

TEST(raft_msg_codec_roundtrip) {
  uint8_t d[3] = {'a', 'b', 'c'};
  struct kt_raft_entry es[2] = {{3, 10, 0, 3, d}, {3, 11, 1, 0, NULL}};
  struct kt_raft_msg m = {.type = KT_RAFT_MSG_APP,
                          .reject = true,
                          .from = 1,
                          .to = 2,
                          .term = 3,
                          .log_term = 2,
                          .index = 9,
                          .commit = 8,
                          .hint = 7,
                          .context = 0xdeadbeefcafeull,
                          .n_entries = 2,
                          .entries = es};
  struct kt_buf b = {0};
  kt_raft_msg_encode(&m, &b);
  CHECK_EQ(b.len, KT_RAFT_MSG_HEADER_BYTES + 2 * KT_RAFT_ENTRY_HEADER_BYTES + 3);
  struct kt_arena a = {0};
  struct kt_raft_msg o;
  struct kt_err e;
  CHECK_EQ(kt_raft_msg_decode(b.p, b.len, &a, &o, &e), 0);
  CHECK_EQ(o.type, KT_RAFT_MSG_APP);
  CHECK(o.reject);
  CHECK_EQ(o.from, 1);
  CHECK_EQ(o.to, 2);
  CHECK_EQ(o.term, 3);
  CHECK_EQ(o.log_term, 2);
  CHECK_EQ(o.index, 9);
  CHECK_EQ(o.commit, 8);
  CHECK_EQ(o.hint, 7);
  CHECK_EQ(o.context, 0xdeadbeefcafeull);
  CHECK_EQ(o.n_entries, 2);
  CHECK_BYTES(o.entries[0].data, o.entries[0].len, "abc");
  CHECK_EQ(o.entries[1].type, 1);
  CHECK_EQ(o.entries[1].index, 11);
  /* every truncation and one trailing byte are refused */
  for (size_t n = 0; n < b.len; n++)
    CHECK_EQ(kt_raft_msg_decode(b.p, n, &a, &o, &e), KT_EPROTO);
  kt_buf_append(&b, "", 1);
  CHECK_EQ(kt_raft_msg_decode(b.p, b.len, &a, &o, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "trailing") != NULL);
  b.len--;
  b.p[0] = 2;
  CHECK_EQ(kt_raft_msg_decode(b.p, b.len, &a, &o, &e), KT_EPROTO);
  b.p[0] = 1;
  b.p[1] = KT_RAFT_MSG_TYPE_MAX;
  CHECK_EQ(kt_raft_msg_decode(b.p, b.len, &a, &o, &e), KT_EPROTO);
  b.p[1] = KT_RAFT_MSG_APP;
  kt_put_u32be(b.p + 68, 0xffffffffu); /* absurd entry count */
  CHECK_EQ(kt_raft_msg_decode(b.p, b.len, &a, &o, &e), KT_EPROTO);
  kt_arena_free(&a);
  kt_buf_free(&b);
}

TEST(raft_restart_after_compaction) {
  /* the node restarts from a snapshot at 8 (term 1) and entries 9..11 */
  struct cl *c = cl_new(1, false, false);
  uint8_t d = 'z';
  struct kt_raft_entry ents[3] = {{1, 9, 0, 1, &d}, {2, 10, 0, 1, &d}, {2, 11, 0, 0, NULL}};
  struct kt_raft_config cfg = cfg_for(c, 1, false, false);
  cfg.hs = (struct kt_raft_hard_state){2, 1, 10};
  cfg.entries = ents;
  cfg.n_entries = 3;
  cfg.first_index = 9;
  cfg.compacted_term = 1;
  cfg.applied = 8;
  struct kt_raft *r;
  CHECK_EQ(kt_raft_new(&cfg, &r), 0);
  CHECK_EQ(kt_raft_first_index(r), 9);
  CHECK_EQ(kt_raft_term_at(r, 8), 1);
  CHECK_EQ(kt_raft_term_at(r, 7), 0);
  CHECK_EQ(kt_raft_applied(r), 8);
  struct kt_raft_ready rd;
  kt_raft_ready(r, &rd);
  CHECK_EQ(rd.n_committed, 2); /* 9 and 10: commit 10 */
  CHECK_EQ(rd.committed[0].index, 9);
  kt_raft_advance(r);
  CHECK_EQ(kt_raft_compact(r, 10), 0);
  CHECK_EQ(kt_raft_compact(r, 11), KT_EINVAL); /* not applied */
  /* entries newer than the hard state's term are refused */
  cfg.hs.term = 1;
  struct kt_raft *r2;
  CHECK_EQ(kt_raft_new(&cfg, &r2), KT_EINVAL);
  kt_raft_free(r);
  cl_free(c);
}

TEST(raft_hard_state_commit_never_covers_its_own_batch) {
  /* if the write tears after the hard state, the entries that would have
   * replaced a stale tail are lost: hs.commit must not reach them */
  struct cl *c = cl_new(3, false, false);
  struct kt_raft *f = c->r[2];
  uint8_t d = 'x';
  struct kt_raft_entry e[3] = {{1, 1, 0, 1, &d}, {1, 2, 0, 1, &d}, {1, 3, 0, 1, &d}};
  struct kt_raft_msg app = {.type = KT_RAFT_MSG_APP,
                            .from = 1,
                            .to = 2,
                            .term = 1,
                            .commit = 3,
                            .n_entries = 3,
                            .entries = e};
  kt_raft_step(f, &app);
  CHECK_EQ(kt_raft_commit(f), 3);
  struct kt_raft_ready rd;
  kt_raft_ready(f, &rd);
  CHECK_EQ(rd.n_entries, 3);
  CHECK_EQ(rd.hs.term, 1);
  CHECK_EQ(rd.hs.commit, 0);
  CHECK_EQ(rd.n_committed, 0); /* not persisted yet */
  kt_raft_advance(f);
  kt_raft_persisted(f, 1, 3);
  CHECK(kt_raft_has_ready(f));
  kt_raft_ready(f, &rd);
  CHECK(rd.hs_changed);
  CHECK_EQ(rd.hs.commit, 3);
  CHECK_EQ(rd.n_committed, 3);
  kt_raft_advance(f);
  cl_free(c);
}

TEST(raft_stale_leader_learns_newer_term) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 1);
  /* member 2 moved on to term 5 (as if a new leader was elected there) */
  struct kt_raft_msg hb = {.type = KT_RAFT_MSG_HEARTBEAT, .from = 3, .to = 2, .term = 5};
  kt_raft_step(c->r[2], &hb);
  cl_ready(c, 2);
  CHECK_EQ(kt_raft_term(c->r[2]), 5);
  c->cut[3][1] = c->cut[1][3] = true;
  cl_tick(c, 1, 1); /* the old leader's heartbeat to 2 is answered with term 5 */
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  CHECK_EQ(kt_raft_term(c->r[1]), 5);
  cl_free(c);
}

TEST(raft_duplicate_append_is_idempotent) {
  struct cl *c = cl_new(3, false, false);
  struct kt_raft *f = c->r[2];
  uint8_t d = 'x';
  struct kt_raft_entry e[3] = {{1, 1, 0, 1, &d}, {1, 2, 0, 1, &d}, {1, 3, 0, 1, &d}};
  struct kt_raft_msg app = {
      .type = KT_RAFT_MSG_APP, .from = 1, .to = 2, .term = 1, .n_entries = 3, .entries = e};
  kt_raft_step(f, &app);
  cl_ready(c, 2);
  struct kt_raft_msg old = app; /* a delayed copy of an earlier, shorter APP */
  old.n_entries = 1;
  kt_raft_step(f, &old);
  kt_raft_step(f, &app);
  cl_ready(c, 2);
  CHECK_EQ(kt_raft_last_index(f), 3);
  CHECK(!has_event(c, 2, "truncate"));
  CHECK_EQ(c->last_msg.type, KT_RAFT_MSG_APP_RESP);
  CHECK_EQ(c->last_msg.index, 3);
  /* entries that do not follow index are refused outright */
  e[1].index = 7;
  app.n_entries = 2;
  int before = c->sent[2][KT_RAFT_MSG_APP_RESP];
  kt_raft_step(f, &app);
  cl_ready(c, 2);
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP_RESP], before);
  cl_free(c);
}

/* ------------------------------------------------------------ membership */

/* Proposes a change (the tests' encoding: change, id) on member i. */
static int cl_conf(struct cl *c, int i, uint8_t change, uint64_t id) {
  uint8_t d[2] = {change, (uint8_t)id};
  uint64_t idx;
  int rc = kt_raft_propose_conf(c->r[i], d, 2, &idx);
  cl_deliver(c);
  return rc;
}

TEST(raft_learner_replicated_not_counted) {
  struct cl *c = cl_new_learners(4, 3, true, true);
  CHECK(kt_raft_is_learner(c->r[1], 4));
  CHECK(!kt_raft_is_voter(c->r[1], 4));
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  cl_propose(c, 1, "a");
  cl_tick_all(c, 2);
  CHECK_EQ(c->applied[4], 2); /* replicated to the learner */
  struct kt_raft_member_state ms[8];
  CHECK_EQ(kt_raft_members(c->r[1], ms, 8), 4);
  CHECK(ms[3].id == 4 && ms[3].learner && ms[3].match == 2 && ms[3].recent_active);
  CHECK(ms[0].id == 1 && !ms[0].learner && ms[0].match == 2);
  /* leader + learner persisted: 1 of 3 voters, no commit */
  c->cut[1][2] = c->cut[1][3] = true;
  cl_propose(c, 1, "b");
  CHECK_EQ(kt_raft_last_index(c->r[4]), 3);
  CHECK_EQ(kt_raft_commit(c->r[1]), 2);
  /* leader + voter 2: commits */
  c->cut[1][2] = false;
  cl_tick(c, 1, 8);
  CHECK_EQ(kt_raft_commit(c->r[1]), 3);
  cl_free(c);
}

TEST(raft_learner_never_campaigns) {
  struct cl *c = cl_new_learners(4, 3, false, false);
  cl_tick(c, 4, 100);
  CHECK_EQ(kt_raft_role(c->r[4]), KT_RAFT_FOLLOWER);
  CHECK_EQ(kt_raft_term(c->r[4]), 0);
  CHECK_EQ(c->sent[4][KT_RAFT_MSG_VOTE], 0);
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  CHECK_EQ(kt_raft_transfer_leader(c->r[1], 4), KT_EINVAL);
  CHECK_EQ(kt_raft_transfer_leader(c->r[1], 9), KT_EINVAL);
  struct kt_raft_msg t = {.type = KT_RAFT_MSG_TIMEOUT_NOW, .from = 1, .to = 4, .term = 1};
  kt_raft_step(c->r[4], &t);
  cl_deliver(c);
  CHECK_EQ(kt_raft_role(c->r[4]), KT_RAFT_FOLLOWER);
  CHECK_EQ(kt_raft_term(c->r[4]), 1);
  CHECK_EQ(cl_leader(c), 1);
  /* a learner's vote is not counted: 1 + learner is not a quorum of 3 */
  struct cl *d = cl_new_learners(4, 3, false, false);
  d->cut[1][2] = d->cut[1][3] = true;
  for (int k = 0; k < 25 && kt_raft_role(d->r[1]) != KT_RAFT_CANDIDATE; k++)
    cl_tick(d, 1, 1);
  struct kt_raft_msg g = {
      .type = KT_RAFT_MSG_VOTE_RESP, .from = 4, .to = 1, .term = kt_raft_term(d->r[1])};
  kt_raft_step(d->r[1], &g);
  CHECK_EQ(kt_raft_role(d->r[1]), KT_RAFT_CANDIDATE);
  g.from = 2;
  kt_raft_step(d->r[1], &g);
  CHECK_EQ(kt_raft_role(d->r[1]), KT_RAFT_LEADER);
  cl_free(d);
  cl_free(c);
}

TEST(raft_promote_learner_is_counted) {
  struct cl *c = cl_new_learners(4, 3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_conf(c, 1, KT_RAFT_CONF_PROMOTE, 4), 0);
  cl_tick_all(c, 2);
  for (int i = 1; i <= 4; i++) {
    CHECK_EQ(c->n_conf[i], 1);
    CHECK_EQ(c->conf_rc[i], 0);
    CHECK(kt_raft_is_voter(c->r[i], 4));
  }
  CHECK(has_event(c, 1, "conf change term=1 id=4 promote"));
  /* 4 voters: the leader and 4 are 2 of 4, not a quorum; with 2 they are */
  c->cut[1][2] = c->cut[1][3] = true;
  cl_propose(c, 1, "a");
  uint64_t before = kt_raft_commit(c->r[1]);
  CHECK(kt_raft_last_index(c->r[1]) > before);
  c->cut[1][2] = false;
  cl_tick(c, 1, 8);
  CHECK_EQ(kt_raft_commit(c->r[1]), kt_raft_last_index(c->r[1]));
  cl_free(c);
}

TEST(raft_remove_follower_commits_with_remaining_quorum) {
  struct cl *c = cl_new(4, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_conf(c, 2, KT_RAFT_CONF_REMOVE, 4), 0); /* forwarded by a follower */
  cl_tick_all(c, 2);
  CHECK(!kt_raft_is_voter(c->r[1], 4));
  CHECK_EQ(c->conf_rc[1], 0);
  CHECK(!kt_raft_conf_pending(c->r[1]));
  struct kt_raft_member_state ms[8];
  CHECK_EQ(kt_raft_members(c->r[1], ms, 8), 3);
  /* 3 voters: 1 and 2 commit although 3 and 4 are cut off */
  cl_isolate(c, 3, true);
  cl_isolate(c, 4, true);
  int to3 = c->sent_to[3], to4 = c->sent_to[4];
  cl_propose(c, 1, "a");
  CHECK_EQ(kt_raft_commit(c->r[1]), kt_raft_last_index(c->r[1]));
  /* no longer tracked: 3 gets appends and heartbeats, 4 nothing */
  cl_tick(c, 1, 1);
  CHECK(c->sent_to[3] > to3);
  CHECK_EQ(c->sent_to[4], to4);
  cl_free(c);
}

TEST(raft_remove_leader_steps_down) {
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_conf(c, 1, KT_RAFT_CONF_REMOVE, 1), 0);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  CHECK_EQ(kt_raft_leader(c->r[1]), 0);
  CHECK(has_event(c, 1, "conf change term=1 id=1 remove"));
  CHECK(has_event(c, 1, "step down term=1 reason=removed"));
  CHECK(!kt_raft_is_voter(c->r[1], 1));
  /* handed over at once (TimeoutNow to a voter with the whole log) */
  CHECK_EQ(c->sent[1][KT_RAFT_MSG_TIMEOUT_NOW], 1);
  CHECK(cl_leader(c) == 2 || cl_leader(c) == 3);
  int votes1 = c->sent[1][KT_RAFT_MSG_PREVOTE] + c->sent[1][KT_RAFT_MSG_VOTE];
  for (int k = 0; k < 60; k++)
    cl_tick_all(c, 1);
  int l = cl_leader(c);
  CHECK(l == 2 || l == 3);
  CHECK_EQ(c->sent[1][KT_RAFT_MSG_PREVOTE] + c->sent[1][KT_RAFT_MSG_VOTE], votes1);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  cl_propose(c, l, "after");
  CHECK_EQ(kt_raft_commit(c->r[l]), kt_raft_last_index(c->r[l]));
  cl_free(c);
}

TEST(raft_remove_leader_of_two_voters) {
  /* the remaining voter may not have applied the removal when it is told
   * to campaign: it still counts the old leader, which still answers */
  struct cl *c = cl_new(2, true, true);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 1);
  CHECK_EQ(cl_conf(c, 1, KT_RAFT_CONF_REMOVE, 1), 0);
  cl_tick_all(c, 2);
  CHECK_EQ(cl_leader(c), 2);
  CHECK(kt_raft_is_voter(c->r[2], 2) && !kt_raft_is_voter(c->r[2], 1));
  cl_propose(c, 2, "alone");
  CHECK_EQ(kt_raft_commit(c->r[2]), kt_raft_last_index(c->r[2]));
  cl_free(c);
}

TEST(raft_one_conf_change_in_flight) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  c->cut[1][2] = c->cut[1][3] = true;
  uint8_t d[2] = {KT_RAFT_CONF_ADD_LEARNER, 4};
  uint64_t idx;
  CHECK(!kt_raft_conf_pending(c->r[1]));
  CHECK_EQ(kt_raft_propose_conf(c->r[1], d, 2, &idx), 0);
  CHECK_EQ(idx, 2);
  CHECK(kt_raft_conf_pending(c->r[1]));
  CHECK_EQ(kt_raft_propose_conf(c->r[1], d, 2, &idx), KT_EBUSY);
  CHECK_EQ(kt_raft_propose(c->r[1], "n", 1, &idx), 0); /* normal proposals go on */
  c->cut[1][2] = c->cut[1][3] = false;
  cl_tick_all(c, 3);
  CHECK(!kt_raft_conf_pending(c->r[1]));
  CHECK(kt_raft_is_learner(c->r[2], 4));
  /* a new leader counts its whole log at election as possibly pending */
  struct cl *e = cl_new(3, false, false);
  uint64_t l[2] = {1, 1};
  restart_with_log(e, 1, 2, l, 2);
  restart_with_log(e, 2, 2, l, 2);
  e->cut[1][2] = e->cut[1][3] = true;
  force_leader(e, 1);
  CHECK_EQ(kt_raft_role(e->r[1]), KT_RAFT_LEADER);
  CHECK(kt_raft_conf_pending(e->r[1]));
  CHECK_EQ(kt_raft_propose_conf(e->r[1], d, 2, &idx), KT_EBUSY);
  e->cut[1][2] = e->cut[1][3] = false;
  cl_tick_all(e, 3);
  CHECK_EQ(e->applied[1], 3);
  CHECK(!kt_raft_conf_pending(e->r[1]));
  CHECK_EQ(kt_raft_propose_conf(e->r[1], d, 2, &idx), 0);
  cl_free(e);
  cl_free(c);
}

TEST(raft_forwarded_conf_while_pending_becomes_normal) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  uint8_t a[2] = {KT_RAFT_CONF_ADD_LEARNER, 4}, b[2] = {KT_RAFT_CONF_ADD_LEARNER, 5};
  uint64_t idx, fidx = 9;
  CHECK_EQ(kt_raft_propose_conf(c->r[1], a, 2, &idx), 0);
  CHECK_EQ(kt_raft_propose_conf(c->r[2], b, 2, &fidx), 0); /* 2 does not know of a yet */
  CHECK_EQ(fidx, 0);
  cl_deliver(c);
  cl_tick_all(c, 2);
  const struct kt_raft_entry *e = kt_raft_entry_at(c->r[3], idx + 1);
  CHECK(e != NULL);
  CHECK_EQ(e->type, KT_RAFT_ENTRY_NORMAL);
  CHECK_BYTES(e->data, e->len, "\x02\x05");
  CHECK_EQ(kt_raft_entry_at(c->r[3], idx)->type, KT_RAFT_ENTRY_CONF);
  for (int i = 1; i <= 3; i++) {
    CHECK_EQ(c->n_conf[i], 1);
    CHECK(kt_raft_is_learner(c->r[i], 4));
    CHECK(!kt_raft_is_learner(c->r[i], 5));
  }
  /* a follower with a CONF entry above its applied index refuses at once */
  c->hold_disk[3] = true;
  CHECK_EQ(kt_raft_propose_conf(c->r[1], b, 2, &idx), 0);
  cl_deliver(c);
  CHECK(kt_raft_conf_pending(c->r[3]));
  CHECK_EQ(kt_raft_propose_conf(c->r[3], b, 2, &idx), KT_EBUSY);
  cl_free(c);
}

TEST(raft_apply_conf_invalid_changes_nothing) {
  struct cl *c = cl_new_learners(3, 2, false, false);
  struct kt_raft *r = c->r[1];
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_VOTER, 2), KT_EINVAL);   /* a voter */
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_LEARNER, 3), KT_EINVAL); /* a learner */
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_VOTER, 3), KT_EINVAL);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_VOTER, 0), KT_EINVAL);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_REMOVE, 9), KT_EINVAL);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_PROMOTE, 9), KT_EINVAL);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_PROMOTE, 1), KT_EINVAL); /* a voter */
  CHECK_EQ(kt_raft_apply_conf(r, 0, 5), KT_EINVAL);
  CHECK_EQ(kt_raft_apply_conf(r, 9, 5), KT_EINVAL);
  struct kt_raft_member_state ms[8];
  CHECK_EQ(kt_raft_members(r, ms, 8), 3);
  CHECK(ms[0].id == 1 && ms[1].id == 2 && ms[2].id == 3 && ms[2].learner);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_REMOVE, 2), 0);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_REMOVE, 1), KT_EINVAL); /* the last voter */
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_REMOVE, 3), 0);         /* a learner */
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_LEARNER, 2), 0);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_ADD_VOTER, 5), 0);
  CHECK_EQ(kt_raft_members(r, ms, 1), 3); /* cap: fills 1, says 3 */
  CHECK_EQ(kt_raft_members(r, ms, 8), 3);
  CHECK(ms[0].id == 1 && ms[1].id == 5 && ms[2].id == 2 && ms[2].learner);
  CHECK_EQ(kt_raft_apply_conf(r, KT_RAFT_CONF_PROMOTE, 2), 0);
  CHECK(kt_raft_is_voter(r, 2));
  CHECK(!kt_raft_is_voter(r, 0) && !kt_raft_is_learner(r, 0));
  cl_free(c);
}

/* A member restarted as the node does it: no configuration (the log's CONF
 * entries make it), hard state hs, log ents[0..n) from index 1. */
static struct kt_raft *from_log(uint64_t id, struct kt_raft_hard_state hs,
                                const struct kt_raft_entry *ents, size_t n) {
  struct kt_raft_config cfg = {.id = id,
                               .election_ticks = 10,
                               .heartbeat_ticks = 1,
                               .max_inflight_msgs = 16,
                               .pre_vote = true,
                               .check_quorum = true,
                               .seed = 7,
                               .hs = hs,
                               .entries = ents,
                               .n_entries = n};
  struct kt_raft *r;
  kt_assert(kt_raft_new(&cfg, &r) == 0);
  return r;
}

/* A member started as the node bootstraps a cluster: no configuration, a log
 * of one ADD_VOTER per initial member, committed. */
static struct kt_raft *bootstrap(uint64_t id, int n, uint8_t (*d)[2], struct kt_raft_entry *ents) {
  for (int j = 0; j < n; j++) {
    d[j][0] = KT_RAFT_CONF_ADD_VOTER;
    d[j][1] = (uint8_t)(j + 1);
    ents[j] = (struct kt_raft_entry){1, (uint64_t)j + 1, KT_RAFT_ENTRY_CONF, 2, d[j]};
  }
  return from_log(id, (struct kt_raft_hard_state){1, 0, (uint64_t)n}, ents, (size_t)n);
}

TEST(raft_bootstrap_from_conf_entries) {
  uint8_t d[3][2];
  struct kt_raft_entry ents[3];
  /* single member: not a voter until it applies its own ADD_VOTER */
  struct cl *c = cl_new(1, true, true);
  kt_raft_free(c->r[1]);
  c->r[1] = bootstrap(1, 1, d, ents);
  for (int k = 0; k < 30; k++)
    kt_raft_tick(c->r[1]); /* committed CONF entry not applied: no campaign */
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_FOLLOWER);
  CHECK(!kt_raft_is_voter(c->r[1], 1));
  cl_ready(c, 1);
  CHECK_EQ(c->applied[1], 1);
  CHECK_EQ(c->conf_rc[1], 0);
  CHECK(kt_raft_is_voter(c->r[1], 1));
  cl_tick(c, 1, 25);
  CHECK_EQ(kt_raft_role(c->r[1]), KT_RAFT_LEADER);
  cl_propose(c, 1, "x");
  CHECK_EQ(c->applied[1], 3);
  cl_free(c);
  /* three members */
  c = cl_new(3, true, true);
  for (int i = 1; i <= 3; i++) {
    kt_raft_free(c->r[i]);
    c->r[i] = bootstrap((uint64_t)i, 3, d, ents);
  }
  cl_tick_all(c, 40);
  int l = cl_leader(c);
  CHECK(l != 0);
  cl_propose(c, l, "x");
  cl_tick_all(c, 2);
  for (int i = 1; i <= 3; i++) {
    CHECK_EQ(c->n_conf[i], 3);
    CHECK_EQ(c->applied[i], 5);
  }
  cl_free(c);
}

TEST(raft_snapshot_install_replaces_configuration) {
  struct cl *c = cl_new(3, false, false);
  cl_tick(c, 1, 25);
  cl_tick_all(c, 2);
  struct kt_raft *f = c->r[3];
  uint64_t v[4] = {1, 2, 3, 4}, l[1] = {5}, dup[2] = {1, 1};
  CHECK_EQ(kt_raft_install_snapshot(f, 10, 1, dup, 2, NULL, 0), KT_EINVAL);
  CHECK_EQ(kt_raft_install_snapshot(f, 10, 1, v, 4, v, 1), KT_EINVAL); /* 1 twice */
  CHECK_EQ(kt_raft_install_snapshot(f, 1, 1, v, 4, l, 1), KT_EINVAL);  /* stale */
  CHECK(!kt_raft_is_voter(f, 4));
  CHECK_EQ(kt_raft_install_snapshot(f, 10, 1, v, 4, l, 1), 0);
  struct kt_raft_member_state ms[8];
  CHECK_EQ(kt_raft_members(f, ms, 8), 5);
  CHECK(ms[3].id == 4 && !ms[3].learner && ms[4].id == 5 && ms[4].learner);
  CHECK_EQ(kt_raft_commit(f), 10);
  /* a snapshot in which this member is gone: it never campaigns */
  uint64_t v2[2] = {1, 2};
  CHECK_EQ(kt_raft_install_snapshot(f, 12, 1, v2, 2, NULL, 0), 0);
  CHECK(!kt_raft_is_voter(f, 3));
  for (int k = 0; k < 50; k++)
    kt_raft_tick(f);
  cl_ready(c, 3);
  CHECK_EQ(kt_raft_role(f), KT_RAFT_FOLLOWER);
  CHECK_EQ(c->sent[3][KT_RAFT_MSG_VOTE], 0);
  cl_free(c);
}

TEST(raft_restart_with_configuration_replays_conf_entries) {
  /* snapshot at 5 with voters {1, 2, 3}; the log after it adds learner 4 at
   * 7 and removes 3 at 8, both committed */
  struct cl *c = cl_new(1, false, false);
  uint8_t add[2] = {KT_RAFT_CONF_ADD_LEARNER, 4}, rm[2] = {KT_RAFT_CONF_REMOVE, 3};
  struct kt_raft_entry ents[3] = {
      {2, 6, 0, 0, NULL}, {2, 7, KT_RAFT_ENTRY_CONF, 2, add}, {2, 8, KT_RAFT_ENTRY_CONF, 2, rm}};
  uint64_t v[3] = {1, 2, 3};
  struct kt_raft_config cfg = cfg_for(c, 2, false, false);
  cfg.voters = v;
  cfg.n_voters = 3;
  cfg.learners = NULL;
  cfg.n_learners = 0;
  cfg.hs = (struct kt_raft_hard_state){2, 0, 8};
  cfg.entries = ents;
  cfg.n_entries = 3;
  cfg.first_index = 6;
  cfg.compacted_term = 1;
  cfg.applied = 5;
  struct kt_raft *r;
  CHECK_EQ(kt_raft_new(&cfg, &r), 0);
  CHECK(kt_raft_is_voter(r, 3));
  for (int k = 0; k < 30; k++)
    kt_raft_tick(r); /* committed CONF entries not applied yet: no campaign */
  CHECK_EQ(kt_raft_role(r), KT_RAFT_FOLLOWER);
  struct kt_raft_ready rd;
  kt_raft_ready(r, &rd);
  CHECK_EQ(rd.n_committed, 3);
  for (size_t k = 0; k < rd.n_committed; k++)
    if (rd.committed[k].type == KT_RAFT_ENTRY_CONF)
      CHECK_EQ(kt_raft_apply_conf(r, rd.committed[k].data[0], rd.committed[k].data[1]), 0);
  kt_raft_advance(r);
  CHECK(kt_raft_is_learner(r, 4));
  CHECK(!kt_raft_is_voter(r, 3) && !kt_raft_is_learner(r, 3));
  CHECK(kt_raft_is_voter(r, 1) && kt_raft_is_voter(r, 2));
  kt_raft_ready(r, &rd);
  bool saw = false;
  char b[128];
  for (size_t k = 0; k < rd.n_events; k++)
    saw |= strstr(kt_raft_event_str(&rd.events[k], b, sizeof b), "id=4 add-learner") != NULL;
  CHECK(saw);
  kt_raft_advance(r);
  kt_raft_free(r);
  cl_free(c);
}

TEST(raft_follower_infers_commit_of_all_but_the_last_conf_entry) {
  /* a leader whose commit index lags (it restarted) sends two CONF entries
   * with commit 0: the first is committed (the second was appended only
   * after it was applied), so the follower commits and applies it and does
   * not campaign two configurations behind */
  struct cl *c = cl_new(3, false, false);
  struct kt_raft *f = c->r[2];
  uint8_t a[2] = {KT_RAFT_CONF_ADD_LEARNER, 4}, b[2] = {KT_RAFT_CONF_PROMOTE, 4};
  struct kt_raft_entry e[3] = {{1, 1, KT_RAFT_ENTRY_CONF, 2, a},
                               {1, 2, KT_RAFT_ENTRY_NORMAL, 0, NULL},
                               {1, 3, KT_RAFT_ENTRY_CONF, 2, b}};
  struct kt_raft_msg app = {
      .type = KT_RAFT_MSG_APP, .from = 1, .to = 2, .term = 1, .n_entries = 3, .entries = e};
  kt_raft_step(f, &app);
  CHECK_EQ(kt_raft_commit(f), 1);
  cl_ready(c, 2);
  CHECK_EQ(c->applied[2], 1);
  CHECK(kt_raft_is_learner(f, 4));
  CHECK(kt_raft_conf_pending(f)); /* the promotion is not known committed */
  cl_free(c);
}

TEST(raft_member_added_while_down_catches_up_from_heartbeats) {
  /* a learner added while unreachable: the leader's probe (nothing after
   * its next index to send) was lost; once the member answers heartbeats
   * the leader must probe again, empty, so replication starts */
  struct cl *c = cl_new(3, true, true);
  cl_tick(c, 1, 25);
  CHECK_EQ(cl_leader(c), 1);
  cl_propose(c, 1, "a");
  struct kt_raft_config cfg = cfg_for(c, 4, true, true);
  cfg.n_voters = cfg.n_learners = 0; /* joins empty, as a new member */
  CHECK_EQ(kt_raft_new(&cfg, &c->r[4]), 0);
  c->n = 4;
  cl_isolate(c, 4, true);
  CHECK_EQ(cl_conf(c, 1, KT_RAFT_CONF_ADD_LEARNER, 4), 0);
  cl_tick_all(c, 3); /* commit + apply the change; probes to 4 are lost */
  CHECK(kt_raft_is_learner(c->r[1], 4));
  uint64_t last = kt_raft_last_index(c->r[1]);
  cl_isolate(c, 4, false);
  cl_tick_all(c, 5);
  CHECK_EQ(kt_raft_last_index(c->r[4]), last);
  CHECK_EQ(c->applied[4], last);
  cl_free(c);
}

/* --force-new-cluster as the node does it (core/node_force.c), seen by raft:
 * member 2 of {1, 2, 3} restarts from its own log — entries 5 and 6 are
 * persisted past its recorded commit index 4 — with REMOVE 1 and REMOVE 3
 * appended at 7 and 8 and the hard state's commit moved to 8. Raft needs no
 * special mode: it hands back all 8 entries as committed, applying them
 * leaves 2 the only voter, it elects itself and commits alone; a restart
 * from the same log (no force) comes back as the same one-member cluster. */
static struct kt_raft *forced(uint8_t (*d)[2], struct kt_raft_entry *ents) {
  static const uint8_t conf[5][2] = {{KT_RAFT_CONF_ADD_VOTER, 1},
                                     {KT_RAFT_CONF_ADD_VOTER, 2},
                                     {KT_RAFT_CONF_ADD_VOTER, 3},
                                     {KT_RAFT_CONF_REMOVE, 1},
                                     {KT_RAFT_CONF_REMOVE, 3}};
  static const uint64_t at[5] = {1, 2, 3, 7, 8};
  for (uint64_t i = 1; i <= 8; i++)
    ents[i - 1] = (struct kt_raft_entry){i <= 3 ? 1 : 2, i, KT_RAFT_ENTRY_NORMAL, 1, d[5]};
  d[5][0] = 'x';
  for (int j = 0; j < 5; j++) {
    memcpy(d[j], conf[j], 2);
    ents[at[j] - 1].type = KT_RAFT_ENTRY_CONF;
    ents[at[j] - 1].len = 2;
    ents[at[j] - 1].data = d[j];
  }
  return from_log(2, (struct kt_raft_hard_state){2, 1, 8}, ents, 8);
}

/* Starts member 2 of the isolated cluster c from r: applies what it hands
 * back, elects itself, commits a proposal alone. */
static void forced_run(struct cl *c, struct kt_raft *r, uint64_t applied, uint64_t term) {
  kt_raft_free(c->r[2]);
  c->r[2] = r;
  cl_isolate(c, 1, true); /* 1 and 3 are gone */
  cl_isolate(c, 3, true);
  cl_ready(c, 2);
  CHECK_EQ(c->applied[2], applied);
  struct kt_raft_member_state ms[4];
  CHECK_EQ(kt_raft_members(c->r[2], ms, 4), 1);
  CHECK(ms[0].id == 2 && !ms[0].learner);
  cl_tick(c, 2, 25);
  CHECK_EQ(kt_raft_role(c->r[2]), KT_RAFT_LEADER);
  CHECK_EQ(kt_raft_term(c->r[2]), term);
  cl_propose(c, 2, "after");
  CHECK_EQ(c->applied[2], applied + 2); /* its empty entry and the proposal */
  CHECK_EQ(c->sent[2][KT_RAFT_MSG_APP] + c->sent[2][KT_RAFT_MSG_VOTE], 0);
}

TEST(raft_forced_one_member_configuration_from_own_log) {
  uint8_t d[6][2];
  struct kt_raft_entry ents[8];
  struct cl *c = cl_new(3, true, true);
  struct kt_raft *r = forced(d, ents);
  CHECK_EQ(kt_raft_commit(r), 8);
  forced_run(c, r, 8, 3); /* 5 and 6 are applied too */
  CHECK_EQ(c->n_conf[2], 5);
  CHECK_EQ(c->conf_rc[2], 0);
  /* a plain restart from what it persisted: entries 1..10, commit 10 */
  struct kt_raft_entry log[10];
  for (uint64_t i = 1; i <= 10; i++)
    log[i - 1] = *kt_raft_entry_at(c->r[2], i);
  struct cl *c2 = cl_new(3, true, true);
  r = from_log(2, (struct kt_raft_hard_state){3, 2, 10}, log, 10); /* entries copied */
  cl_free(c);
  forced_run(c2, r, 10, 4);
  cl_free(c2);
}
