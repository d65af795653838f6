/* core/raft.c — see raft.h. Sections: log, messages (out + held), progress,
 * roles and elections, step, replication, reads, ready/advance, codec. */
#include "raft.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kt_raft_test_bug;

enum { PR_PROBE, PR_REPLICATE, PR_SNAPSHOT };
/* A follower in SNAPSHOT state that acked nothing for this many election
 * timeouts is probed again (the node's transfer failed or the peer died). */
#define SNAPSHOT_WAIT_ELECTIONS 3
/* entries a leader takes from one PROP message (a follower sends no more) */
#define MAX_PROP_ENTRIES 4096

struct progress {
  uint64_t id, match, next;
  uint8_t state;
  bool learner; /* receives replication; never counted in a quorum */
  bool probe_sent, recent_active, voted, granted;
  bool fresh;        /* added by a configuration change: probe it at once */
  uint64_t read_ack; /* highest read seq this peer confirmed */
  /* in-flight APPs in replicate state: ring of (last index, bytes) */
  uint64_t *infl_index, *infl_bytes;
  uint32_t infl_start, infl_count;
  uint64_t infl_total;
  uint32_t stall_ticks;  /* replicate with messages in flight and no ack */
  bool probed_compacted; /* probed at our compaction point since its last ack */
  /* leader: an append is due at the next ready (send_empty: even with no
   * entries, to carry the commit index) */
  bool send_due, send_empty;
};

struct held {
  struct kt_raft_msg m;
  uint64_t need_index, need_term; /* entries persisted up to need_index, still of need_term */
  uint64_t hs_term, hs_vote;      /* hard state that must be durable */
};

struct pending_read {
  uint64_t from, ctx, index, seq; /* seq 0: waits for a commit in this term */
};

#define VEC(T)                                                                                     \
  struct {                                                                                         \
    T *v;                                                                                          \
    size_t n, cap;                                                                                 \
  }
#define VEC_PUSH(vec, x)                                                                           \
  do {                                                                                             \
    if ((vec).n == (vec).cap) {                                                                    \
      (vec).cap = (vec).cap ? (vec).cap * 2 : 16;                                                  \
      (vec).v = realloc((vec).v, (vec).cap * sizeof(*(vec).v));                                    \
      kt_assert((vec).v);                                                                          \
    }                                                                                              \
    (vec).v[(vec).n++] = (x);                                                                      \
  } while (0)

struct kt_raft {
  uint64_t id;
  uint32_t election_ticks, heartbeat_ticks, max_msg_bytes, max_inflight_msgs;
  uint64_t max_inflight_bytes;
  bool pre_vote, check_quorum;
  struct kt_rng rng;

  enum kt_raft_role role;
  uint64_t term, vote, commit, lead;
  uint64_t d_term, d_vote; /* durable hard state (reported) */
  struct kt_raft_hard_state given_hs;

  /* log: ents[0] has index first; first-1 has term comp_term */
  VEC(struct kt_raft_entry) log;
  uint64_t first, comp_term;
  uint64_t persisted; /* durable prefix of the current log */
  uint64_t handed;    /* handed to the node for persisting */
  uint64_t applied;

  /* the configuration: prs[0..n_voters) voters, then learners, each in
   * configuration order; self's slot (if a member) is used only for votes */
  struct progress *prs; /* capacity KT_RAFT_MAX_MEMBERS */
  size_t n_prs, n_voters;
  uint64_t pending_conf; /* leader: last index that may hold an unapplied CONF entry */
  /* indexes of the last two CONF entries in the log (0: none; after a
   * truncation only those above commit are looked for), see
   * infer_conf_commit */
  uint64_t conf_last, conf_prev;
  bool conf_dirty; /* applied a change during ready: effects run at advance */

  uint32_t election_elapsed, heartbeat_elapsed, rand_timeout;
  uint64_t transferee;

  VEC(struct kt_raft_msg) out;
  VEC(struct held) held;
  VEC(struct kt_raft_event) events;
  VEC(struct kt_raft_event) late_events; /* emitted between ready and advance */
  VEC(struct pending_read) reads;        /* leader: waiting for confirmation */
  VEC(struct kt_raft_read_state) rwait;  /* confirmed, waiting for applied >= index */
  VEC(struct kt_raft_read_state) rready; /* handed in this ready */
  uint64_t read_seq;
  bool read_hb_pending;
  /* Appends (progress send_due) and forwarded proposals wait for the end of
   * the caller's turn (kt_raft_ready): all proposals of a turn travel in one
   * message per peer and the followers answer once per message, not once
   * per entry. */
  VEC(struct kt_raft_entry) fwd; /* follower: proposals for the leader (data in arena) */
  VEC(uint8_t *) grave;          /* entry data freed at advance */
  struct dchunk *dcur;           /* where entry data is allocated now */
  struct kt_arena arena;         /* message entry arrays, until advance */

  bool in_ready;
  uint64_t rd_last, rd_applied;
};

/* ---------------------------------------------------------------- log */

/* Entry data (one allocation per entry appended, every put's) comes from
 * 64 KiB chunks: bumped along the current one, each chunk counting its
 * live entries and freed when the last goes, each entry's data preceded by
 * its chunk's address. Entries go about in log order (compaction, and
 * truncation of the newest), so a chunk goes soon after the log passes it;
 * data over a quarter of a chunk has one of its own. A malloc and a free
 * per entry cost the state thread about 200 instructions per put. Under
 * ASan the freed data is poisoned, as free() would make it. */
#define DCHUNK_BYTES (64u << 10)
struct dchunk {
  size_t live, used, cap;
  alignas(16) uint8_t mem[];
};

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define DATA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define DATA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define DATA_POISON(p, n) ((void)(p), (void)(n))
#define DATA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static uint8_t *data_alloc(struct kt_raft *r, uint32_t len) {
  size_t need = 16 + (((size_t)len + 15) & ~(size_t)15); /* chunk address, length; data */
  struct dchunk *c = r->dcur;
  if (!c || c->cap - c->used < need) {
    bool own = need > DCHUNK_BYTES / 4;
    size_t cap = own ? need : DCHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    kt_assert(c);
    c->live = c->used = 0;
    c->cap = cap;
    DATA_POISON(c->mem, cap);
    if (!own) {
      if (r->dcur && !r->dcur->live)
        free(r->dcur);
      r->dcur = c;
    }
  }
  uint8_t *p = c->mem + c->used;
  c->used += need;
  c->live++;
  DATA_UNPOISON(p, 16 + len);
  memcpy(p, &c, sizeof c);
  memcpy(p + 8, &len, sizeof len);
  return p + 16;
}

static void data_free(struct kt_raft *r, uint8_t *d) {
  struct dchunk *c;
  uint32_t len;
  memcpy(&c, d - 16, sizeof c);
  memcpy(&len, d - 8, sizeof len);
  DATA_POISON(d - 16, 16 + len);
  if (--c->live == 0 && c != r->dcur)
    free(c);
}

static uint64_t last_index(const struct kt_raft *r) { return r->first + r->log.n - 1; }

static uint64_t term_at(const struct kt_raft *r, uint64_t i) {
  if (i == 0)
    return 0;
  if (i == r->first - 1)
    return r->comp_term;
  if (i < r->first || i > last_index(r))
    return 0;
  return r->log.v[i - r->first].term;
}

static uint64_t last_term(const struct kt_raft *r) { return term_at(r, last_index(r)); }

static void event(struct kt_raft *r, uint8_t type, uint64_t a, uint64_t b) {
  struct kt_raft_event ev = {type, r->term, a, b};
  if (r->in_ready) /* rd.events is the caller's until advance */
    VEC_PUSH(r->late_events, ev);
  else
    VEC_PUSH(r->events, ev);
}

/* Removes entries from index i on (i > commit). Data is freed at advance. */
static void truncate_from(struct kt_raft *r, uint64_t i) {
  kt_assert(i > r->commit && i >= r->first);
  for (uint64_t j = i; j <= last_index(r); j++)
    if (r->log.v[j - r->first].data)
      VEC_PUSH(r->grave, r->log.v[j - r->first].data);
  r->log.n = i - r->first;
  if (r->conf_last >= i) { /* find the last two CONF entries left above commit */
    r->conf_last = r->conf_prev = 0;
    for (uint64_t j = i - 1; j > r->commit && j >= r->first && !r->conf_prev; j--)
      if (r->log.v[j - r->first].type == KT_RAFT_ENTRY_CONF) {
        r->conf_prev = r->conf_last ? j : 0;
        r->conf_last = r->conf_last ? r->conf_last : j;
      }
  }
  r->persisted = KT_MIN(r->persisted, i - 1);
  r->handed = KT_MIN(r->handed, i - 1);
  event(r, KT_RAFT_EV_TRUNCATE, i, 0);
}

static void append_one(struct kt_raft *r, uint64_t term, uint8_t type, const void *data,
                       uint32_t len) {
  struct kt_raft_entry e = {term, last_index(r) + 1, type, len, NULL};
  if (len) {
    e.data = data_alloc(r, len);
    memcpy(e.data, data, len);
  }
  VEC_PUSH(r->log, e);
  if (type == KT_RAFT_ENTRY_CONF) {
    r->conf_prev = r->conf_last;
    r->conf_last = e.index;
  }
}

/* Largest i <= index whose term is <= term (etcd's findConflictByTerm). */
static uint64_t find_conflict_by_term(const struct kt_raft *r, uint64_t index, uint64_t term) {
  if (index > last_index(r))
    index = last_index(r);
  while (index >= r->first && term_at(r, index) > term)
    index--;
  return index;
}

static bool up_to_date(const struct kt_raft *r, uint64_t lterm, uint64_t lindex) {
  return lterm > last_term(r) || (lterm == last_term(r) && lindex >= last_index(r));
}

/* ---------------------------------------------------------------- messages */

static void send(struct kt_raft *r, struct kt_raft_msg m) {
  m.from = r->id;
  if (m.term == 0 && m.type != KT_RAFT_MSG_PROP && m.type != KT_RAFT_MSG_READ_INDEX)
    m.term = r->term;
  VEC_PUSH(r->out, m);
}

/* Queues m until the hard state of now and the entries up to need_index are
 * durable. */
static void hold(struct kt_raft *r, struct kt_raft_msg m, uint64_t need_index) {
  m.from = r->id;
  if (m.term == 0)
    m.term = r->term;
  bool bug = (kt_raft_test_bug == 1 && m.type == KT_RAFT_MSG_APP_RESP) ||
             (kt_raft_test_bug == 3 && m.type == KT_RAFT_MSG_VOTE_RESP && m.to != r->id);
  if (bug) {
    VEC_PUSH(r->out, m);
    return;
  }
  struct held h = {m, need_index, term_at(r, need_index), r->term, r->vote};
  VEC_PUSH(r->held, h);
}

static void step_internal(struct kt_raft *r, const struct kt_raft_msg *m);

/* Sends (or steps, if to self) held messages whose promise is now durable. */
static void release_held(struct kt_raft *r) {
  for (int round = 0; round < 8 && r->held.n; round++) {
    size_t keep = 0, n = r->held.n;
    struct kt_raft_msg self[4];
    size_t n_self = 0;
    bool again = false;
    for (size_t i = 0; i < n; i++) {
      struct held *h = &r->held.v[i];
      int st; /* 0 wait, 1 release, 2 drop */
      if (r->d_term > h->hs_term)
        st = 2;
      else if (r->d_term < h->hs_term || (h->hs_vote && r->d_vote != h->hs_vote))
        st = 0;
      else if (h->need_index == 0)
        st = 1;
      else if (term_at(r, h->need_index) != h->need_term)
        st = 2;
      else
        st = r->persisted >= h->need_index ? 1 : 0;
      if (st == 0) {
        r->held.v[keep++] = *h;
      } else if (st == 1) {
        if (h->m.to == r->id) {
          if (n_self < KT_ARRAY_LEN(self))
            self[n_self++] = h->m;
          else
            r->held.v[keep++] = *h, again = true;
        } else {
          if (h->m.type == KT_RAFT_MSG_VOTE_RESP && !h->m.reject)
            event(r, KT_RAFT_EV_VOTE_GRANTED, h->m.to, 0);
          VEC_PUSH(r->out, h->m);
        }
      }
    }
    r->held.n = keep;
    for (size_t i = 0; i < n_self; i++)
      step_internal(r, &self[i]);
    if (!again && n_self == 0)
      break;
  }
}

/* ---------------------------------------------------------------- progress */

static struct progress *pr_get(struct kt_raft *r, uint64_t id) {
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].id == id)
      return &r->prs[i];
  return NULL;
}

static size_t quorum(const struct kt_raft *r) { return r->n_voters / 2 + 1; }

static bool is_voter(const struct kt_raft *r, uint64_t id) {
  for (size_t i = 0; i < r->n_voters; i++)
    if (r->prs[i].id == id)
      return true;
  return false;
}

/* A CONF entry in (from, to]: the configuration there is not applied yet. */
static bool conf_entry_in(const struct kt_raft *r, uint64_t from, uint64_t to) {
  uint64_t last = r->first + r->log.n - 1;
  to = to < last ? to : last;
  for (uint64_t i = (from + 1 > r->first ? from + 1 : r->first); i <= to; i++)
    if (r->log.v[i - r->first].type == KT_RAFT_ENTRY_CONF)
      return true;
  return false;
}

static void infl_reset(struct progress *pr) {
  pr->infl_start = pr->infl_count = 0;
  pr->infl_total = 0;
}

static bool pr_paused(const struct kt_raft *r, const struct progress *pr) {
  switch (pr->state) {
  case PR_PROBE:
    return pr->probe_sent;
  case PR_REPLICATE:
    return pr->infl_count >= r->max_inflight_msgs ||
           (r->max_inflight_bytes && pr->infl_total >= r->max_inflight_bytes);
  default:
    return true;
  }
}

static void infl_add(const struct kt_raft *r, struct progress *pr, uint64_t index, uint64_t bytes) {
  kt_assert(pr->infl_count < r->max_inflight_msgs);
  uint32_t at = (pr->infl_start + pr->infl_count) % r->max_inflight_msgs;
  pr->infl_index[at] = index;
  pr->infl_bytes[at] = bytes;
  pr->infl_count++;
  pr->infl_total += bytes;
}

static void infl_free_to(const struct kt_raft *r, struct progress *pr, uint64_t index) {
  while (pr->infl_count && pr->infl_index[pr->infl_start] <= index) {
    pr->infl_total -= pr->infl_bytes[pr->infl_start];
    pr->infl_start = (pr->infl_start + 1) % r->max_inflight_msgs;
    pr->infl_count--;
  }
}

static void pr_become_probe(struct kt_raft *r, struct progress *pr) {
  pr->state = PR_PROBE;
  pr->probe_sent = false;
  pr->next = pr->match + 1;
  infl_reset(pr);
  event(r, KT_RAFT_EV_PROBE, pr->id, pr->next);
}

static void pr_become_replicate(struct kt_raft *r, struct progress *pr) {
  pr->state = PR_REPLICATE;
  pr->probe_sent = false;
  pr->next = pr->match + 1;
  infl_reset(pr);
  event(r, KT_RAFT_EV_REPLICATE, pr->id, pr->match);
}

/* Adds a member's progress: voters go after the last voter, learners last. */
static void pr_add(struct kt_raft *r, uint64_t id, bool learner) {
  kt_assert(r->n_prs < KT_RAFT_MAX_MEMBERS && id != 0);
  size_t at = learner ? r->n_prs : r->n_voters;
  memmove(&r->prs[at + 1], &r->prs[at], (r->n_prs - at) * sizeof *r->prs);
  struct progress *pr = &r->prs[at];
  memset(pr, 0, sizeof *pr);
  pr->id = id;
  pr->learner = learner;
  pr->next = last_index(r) + 1;
  pr->state = PR_PROBE;
  pr->recent_active = true; /* not counted as lost before it could answer */
  pr->fresh = true;
  pr->infl_index = calloc(r->max_inflight_msgs, sizeof(uint64_t));
  pr->infl_bytes = calloc(r->max_inflight_msgs, sizeof(uint64_t));
  kt_assert(pr->infl_index && pr->infl_bytes);
  r->n_prs++;
  if (!learner)
    r->n_voters++;
}

static void pr_remove(struct kt_raft *r, size_t at) {
  kt_assert(at < r->n_prs);
  free(r->prs[at].infl_index);
  free(r->prs[at].infl_bytes);
  if (at < r->n_voters)
    r->n_voters--;
  memmove(&r->prs[at], &r->prs[at + 1], (r->n_prs - at - 1) * sizeof *r->prs);
  r->n_prs--;
}

/* Learner at `at` becomes the last voter; its replication state stays. */
static void pr_promote(struct kt_raft *r, size_t at) {
  kt_assert(at >= r->n_voters && at < r->n_prs);
  struct progress pr = r->prs[at];
  memmove(&r->prs[r->n_voters + 1], &r->prs[r->n_voters], (at - r->n_voters) * sizeof *r->prs);
  pr.learner = false;
  r->prs[r->n_voters++] = pr;
}

static size_t pr_index(const struct kt_raft *r, uint64_t id) {
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].id == id)
      return i;
  return SIZE_MAX;
}

/* Voters and learners: non-zero, no duplicates, disjoint, at most
 * KT_RAFT_MAX_MEMBERS in all. */
static bool conf_valid(const uint64_t *voters, size_t n_voters, const uint64_t *learners,
                       size_t n_learners) {
  if (n_voters + n_learners > KT_RAFT_MAX_MEMBERS || (n_voters && !voters) ||
      (n_learners && !learners))
    return false;
  uint64_t all[KT_RAFT_MAX_MEMBERS];
  size_t n = 0;
  for (size_t i = 0; i < n_voters + n_learners; i++) {
    uint64_t id = i < n_voters ? voters[i] : learners[i - n_voters];
    if (!id)
      return false;
    for (size_t j = 0; j < n; j++)
      if (all[j] == id)
        return false;
    all[n++] = id;
  }
  return true;
}

static void conf_set(struct kt_raft *r, const uint64_t *voters, size_t n_voters,
                     const uint64_t *learners, size_t n_learners) {
  while (r->n_prs)
    pr_remove(r, r->n_prs - 1);
  for (size_t i = 0; i < n_voters; i++)
    pr_add(r, voters[i], false);
  for (size_t i = 0; i < n_learners; i++)
    pr_add(r, learners[i], true);
}

/* ---------------------------------------------------------------- roles */

static void reset(struct kt_raft *r, uint64_t term) {
  if (term != r->term) {
    r->term = term;
    r->vote = 0;
  }
  r->lead = 0;
  r->election_elapsed = r->heartbeat_elapsed = 0;
  r->rand_timeout = r->election_ticks + (uint32_t)kt_rng_below(&r->rng, r->election_ticks);
  r->transferee = 0;
  r->reads.n = 0;
  r->read_seq = 0;
  r->read_hb_pending = false;
  for (size_t i = 0; i < r->n_prs; i++) {
    struct progress *pr = &r->prs[i];
    pr->match = 0;
    pr->next = last_index(r) + 1;
    pr->state = PR_PROBE;
    pr->probe_sent = pr->recent_active = pr->voted = pr->granted = false;
    pr->read_ack = 0;
    pr->stall_ticks = 0;
    pr->probed_compacted = false;
    infl_reset(pr);
  }
}

static void become_follower(struct kt_raft *r, uint64_t term, uint64_t lead) {
  reset(r, term);
  r->lead = lead;
  r->role = KT_RAFT_FOLLOWER;
  event(r, KT_RAFT_EV_BECAME_FOLLOWER, lead, 0);
}

static void bcast_append(struct kt_raft *r);

static void become_leader(struct kt_raft *r) {
  kt_assert(r->role == KT_RAFT_CANDIDATE);
  reset(r, r->term);
  r->lead = r->id;
  r->role = KT_RAFT_LEADER;
  for (size_t i = 0; i < r->n_prs; i++)
    r->prs[i].recent_active = true;
  r->pending_conf = last_index(r); /* any of it may be a CONF entry not applied yet */
  append_one(r, r->term, KT_RAFT_ENTRY_NORMAL, NULL, 0);
  event(r, KT_RAFT_EV_BECAME_LEADER, last_index(r), 0);
  bcast_append(r);
}

static void campaign(struct kt_raft *r, bool pre, bool transfer) {
  if (pre) {
    r->role = KT_RAFT_PRE_CANDIDATE;
    r->lead = 0;
    for (size_t i = 0; i < r->n_prs; i++)
      r->prs[i].voted = r->prs[i].granted = false;
    event(r, KT_RAFT_EV_BECAME_PRE_CANDIDATE, 0, 0);
    struct progress *self = pr_get(r, r->id);
    if (self) /* NULL only under test bug 7 */
      self->voted = self->granted = true;
    if (quorum(r) == 1) {
      campaign(r, false, false);
      return;
    }
  } else {
    reset(r, r->term + 1);
    r->vote = r->id;
    r->role = KT_RAFT_CANDIDATE;
    event(r, KT_RAFT_EV_BECAME_CANDIDATE, 0, 0);
    struct kt_raft_msg self = {.type = KT_RAFT_MSG_VOTE_RESP, .to = r->id};
    hold(r, self, 0); /* our own vote counts once it is durable */
  }
  for (size_t i = 0; i < r->n_voters; i++) {
    if (r->prs[i].id == r->id)
      continue;
    struct kt_raft_msg m = {.type = pre ? KT_RAFT_MSG_PREVOTE : KT_RAFT_MSG_VOTE,
                            .to = r->prs[i].id,
                            .term = pre ? r->term + 1 : r->term,
                            .index = last_index(r),
                            .log_term = last_term(r),
                            .context = transfer ? 1 : 0};
    send(r, m);
  }
}

/* Campaigns if this member is a voter. Not while a committed CONF entry is
 * unapplied: votes are counted in the applied configuration, which must be
 * at most one change behind the newest committed one (etcd's hup guard). */
static void hup(struct kt_raft *r, bool transfer) {
  if (r->role == KT_RAFT_LEADER || (!is_voter(r, r->id) && kt_raft_test_bug != 7))
    return;
  if (conf_entry_in(r, r->applied, r->commit))
    return;
  campaign(r, r->pre_vote && !transfer, transfer);
}

/* Records a (pre)vote answer; wins or loses when a quorum is known. */
static void poll(struct kt_raft *r, uint64_t from, bool granted) {
  struct progress *pr = pr_get(r, from);
  if (!pr || pr->learner || pr->voted)
    return;
  pr->voted = true;
  pr->granted = granted;
  size_t yes = 0, no = 0;
  for (size_t i = 0; i < r->n_voters; i++)
    if (r->prs[i].voted)
      r->prs[i].granted ? yes++ : no++;
  if (yes >= quorum(r)) {
    if (r->role == KT_RAFT_PRE_CANDIDATE)
      campaign(r, false, false);
    else
      become_leader(r);
  } else if (no >= quorum(r)) {
    become_follower(r, r->term, 0);
  }
}

/* ---------------------------------------------------------------- replication */

/* Sends one APP to pr if it is not paused; false if nothing was sent. */
static bool send_append(struct kt_raft *r, struct progress *pr, bool if_empty) {
  if (pr_paused(r, pr))
    return false;
  uint64_t prev = pr->next - 1;
  if (prev + 1 < r->first) {
    /* entries after prev are compacted. The follower may still hold our
     * compaction point (it acked less than it has): probe there once; if it
     * does not, the snapshot path (next session) takes over. */
    if (!pr->probed_compacted) {
      pr->probed_compacted = true;
      pr->state = PR_PROBE;
      infl_reset(pr);
      pr->next = r->first;
      prev = r->first - 1;
    } else {
      pr->state = PR_SNAPSHOT;
      event(r, KT_RAFT_EV_NEED_SNAPSHOT, pr->id, pr->next);
      return false;
    }
  }
  uint64_t prev_term = term_at(r, prev);
  kt_assert(prev == 0 || prev_term != 0);
  uint64_t last = last_index(r), bytes = 0;
  uint32_t n = 0;
  for (uint64_t i = pr->next; i <= last; i++) {
    uint32_t len = r->log.v[i - r->first].len;
    if (n > 0 && bytes + len > r->max_msg_bytes)
      break;
    bytes += len;
    n++;
  }
  if (n == 0 && !if_empty)
    return false;
  struct kt_raft_msg m = {.type = KT_RAFT_MSG_APP,
                          .to = pr->id,
                          .index = prev,
                          .log_term = prev_term,
                          .commit = r->commit,
                          .n_entries = n};
  if (n) {
    m.entries = kt_arena_alloc(&r->arena, n * sizeof(struct kt_raft_entry));
    memcpy(m.entries, &r->log.v[pr->next - r->first], n * sizeof(struct kt_raft_entry));
    if (pr->state == PR_REPLICATE) {
      pr->next += n;
      infl_add(r, pr, pr->next - 1, bytes);
    } else {
      pr->probe_sent = true;
    }
  } else if (pr->state == PR_PROBE) {
    pr->probe_sent = true;
  }
  send(r, m);
  return true;
}

static void send_append_all(struct kt_raft *r, struct progress *pr, bool if_empty) {
  if (!send_append(r, pr, if_empty))
    return;
  for (int i = 0; i < 1024 && send_append(r, pr, false); i++)
    ;
}

static void bcast_append(struct kt_raft *r) {
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].id != r->id)
      send_append_all(r, &r->prs[i], true);
}

/* send_append_all at the next ready; `empty` as its if_empty. */
static void append_due(struct progress *pr, bool empty) {
  pr->send_due = true;
  pr->send_empty |= empty;
}

static bool any_append_due(const struct kt_raft *r) {
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].send_due)
      return true;
  return false;
}

static void bcast_append_due(struct kt_raft *r, bool empty) {
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].id != r->id)
      append_due(&r->prs[i], empty);
}

static void flush_due(struct kt_raft *r) {
  for (size_t i = 0; i < r->n_prs; i++) {
    struct progress *pr = &r->prs[i];
    if (pr->send_due && r->role == KT_RAFT_LEADER && pr->id != r->id)
      send_append_all(r, pr, pr->send_empty);
    pr->send_due = pr->send_empty = false;
  }
  if (r->fwd.n) {
    if (r->role == KT_RAFT_FOLLOWER && r->lead && r->lead != r->id) {
      struct kt_raft_msg m = {
          .type = KT_RAFT_MSG_PROP, .to = r->lead, .n_entries = (uint32_t)r->fwd.n};
      m.entries = kt_arena_alloc(&r->arena, r->fwd.n * sizeof *m.entries);
      memcpy(m.entries, r->fwd.v, r->fwd.n * sizeof *m.entries);
      send(r, m);
    } /* else the leader went: lost like a dropped message (the node times them out) */
    r->fwd.n = 0;
  }
}

static void bcast_heartbeat(struct kt_raft *r, uint64_t ctx) {
  for (size_t i = 0; i < r->n_prs; i++) {
    struct progress *pr = &r->prs[i];
    if (pr->id == r->id)
      continue;
    struct kt_raft_msg m = {.type = KT_RAFT_MSG_HEARTBEAT,
                            .to = pr->id,
                            .commit = KT_MIN(pr->match, r->commit),
                            .context = ctx};
    send(r, m);
  }
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void check_reads(struct kt_raft *r);
static void start_waiting_reads(struct kt_raft *r);

/* Leader: commit the highest index persisted on a quorum, if of this term. */
static bool maybe_commit(struct kt_raft *r) {
  uint64_t m[KT_RAFT_MAX_MEMBERS];
  /* bug 5 counts learners' matches as if they were votes */
  size_t n = kt_raft_test_bug == 5 ? r->n_prs : r->n_voters;
  kt_assert(n <= KT_ARRAY_LEN(m) && r->n_voters > 0);
  for (size_t i = 0; i < n; i++)
    m[i] = r->prs[i].id == r->id ? r->persisted : r->prs[i].match;
  qsort(m, n, sizeof m[0], cmp_desc);
  uint64_t idx = m[quorum(r) - 1];
  if (kt_raft_test_bug == 2)
    idx = r->persisted;
  if (idx > r->commit && term_at(r, idx) == r->term) {
    bool first_in_term = term_at(r, r->commit) != r->term;
    r->commit = idx;
    event(r, KT_RAFT_EV_COMMIT, idx, 0);
    if (first_in_term)
      start_waiting_reads(r);
    return true;
  }
  return false;
}

static void commit_to(struct kt_raft *r, uint64_t c) {
  if (c > r->commit) {
    kt_assert(c <= last_index(r));
    r->commit = c;
    event(r, KT_RAFT_EV_COMMIT, c, 0);
  }
}

/* Every CONF entry but the last in any log is committed: a leader appends
 * one only after applying every earlier one. A follower may not know it (a
 * new leader's commit index can lag behind its log), but must: it counts
 * votes in its applied configuration, and with two unapplied changes it
 * could be two configurations behind (see hup). */
static void infer_conf_commit(struct kt_raft *r) {
  if (r->conf_prev > r->commit)
    commit_to(r, r->conf_prev);
}

static void handle_append(struct kt_raft *r, const struct kt_raft_msg *m) {
  struct kt_raft_msg resp = {.type = KT_RAFT_MSG_APP_RESP, .to = m->from};
  /* entries must follow index contiguously and not exceed the sender's term */
  for (uint32_t i = 0; i < m->n_entries; i++)
    if (m->entries[i].index != m->index + 1 + i || m->entries[i].term > m->term ||
        m->entries[i].term < m->log_term)
      return;
  if (m->index < r->commit) {
    resp.index = r->commit;
    hold(r, resp, r->commit);
    return;
  }
  if (m->index <= last_index(r) && term_at(r, m->index) == m->log_term) {
    uint64_t last_new = m->index + m->n_entries;
    for (uint32_t i = 0; i < m->n_entries; i++) {
      const struct kt_raft_entry *e = &m->entries[i];
      if (e->index <= last_index(r) && term_at(r, e->index) == e->term)
        continue;
      if (e->index <= last_index(r))
        truncate_from(r, e->index);
      for (uint32_t j = i; j < m->n_entries; j++)
        append_one(r, m->entries[j].term, m->entries[j].type, m->entries[j].data,
                   m->entries[j].len);
      break;
    }
    commit_to(r, KT_MIN(m->commit, last_new));
    infer_conf_commit(r);
    resp.index = last_new;
    hold(r, resp, last_new);
    return;
  }
  uint64_t hint = KT_MIN(m->index, last_index(r));
  hint = find_conflict_by_term(r, hint, m->log_term);
  resp.reject = true;
  resp.index = m->index;
  resp.hint = hint;
  resp.log_term = term_at(r, hint);
  send(r, resp);
}

static void handle_append_resp(struct kt_raft *r, struct progress *pr,
                               const struct kt_raft_msg *m) {
  pr->recent_active = true;
  if (m->reject) {
    uint64_t probe = m->hint;
    if (m->log_term > 0)
      probe = find_conflict_by_term(r, m->hint, m->log_term);
    bool decr = false;
    if (pr->state == PR_REPLICATE) {
      if (m->index > pr->match) {
        decr = true;
        pr_become_probe(r, pr);
        pr->next = KT_MAX(KT_MIN(m->index, probe + 1), pr->match + 1);
      }
    } else if (pr->next - 1 == m->index) {
      decr = true;
      pr->next = KT_MAX(KT_MIN(m->index, probe + 1), pr->match + 1);
      pr->probe_sent = false;
    }
    if (decr)
      send_append(r, pr, true);
    return;
  }
  if (m->index > last_index(r))
    return; /* acks more than we ever sent: ignore */
  bool was_paused = pr_paused(r, pr);
  bool updated = false;
  if (pr->match < m->index) {
    pr->match = m->index;
    pr->stall_ticks = 0;
    pr->probed_compacted = false;
    updated = true;
  }
  if (pr->next < m->index + 1)
    pr->next = m->index + 1;
  if (updated) {
    if (pr->state == PR_PROBE || (pr->state == PR_SNAPSHOT && pr->match + 1 >= r->first))
      pr_become_replicate(r, pr); /* from SNAPSHOT: it caught up (installed one) */
    else if (pr->state == PR_REPLICATE)
      infl_free_to(r, pr, m->index);
    if (maybe_commit(r))
      bcast_append_due(r, true);
    else /* a follower that was paused missed the commit broadcast: an
          * empty append tells it (as etcd's sendAppend after oldPaused) */
      append_due(pr, was_paused);
    if (r->transferee == pr->id && pr->match == last_index(r)) {
      struct kt_raft_msg t = {.type = KT_RAFT_MSG_TIMEOUT_NOW, .to = pr->id};
      send(r, t);
    }
  } else if (pr->state == PR_PROBE) {
    pr->probe_sent = false;
    send_append(r, pr, false);
  }
}

/* ---------------------------------------------------------------- reads */

static void read_done(struct kt_raft *r, uint64_t from, uint64_t ctx, uint64_t index) {
  if (from == r->id) {
    struct kt_raft_read_state rs = {index, ctx};
    VEC_PUSH(r->rwait, rs);
  } else {
    struct kt_raft_msg m = {
        .type = KT_RAFT_MSG_READ_INDEX_RESP, .to = from, .index = index, .context = ctx};
    send(r, m);
  }
}

static void start_waiting_reads(struct kt_raft *r) {
  for (size_t i = 0; i < r->reads.n; i++)
    if (r->reads.v[i].seq == 0) {
      r->reads.v[i].seq = ++r->read_seq;
      r->reads.v[i].index = r->commit;
      r->read_hb_pending = true;
    }
  check_reads(r);
}

static void check_reads(struct kt_raft *r) {
  size_t done = 0;
  for (; done < r->reads.n; done++) {
    struct pending_read *p = &r->reads.v[done];
    if (p->seq == 0)
      break;
    size_t acks = 0;
    for (size_t i = 0; i < r->n_voters; i++)
      if (r->prs[i].id == r->id || r->prs[i].read_ack >= p->seq)
        acks++;
    if (acks < quorum(r))
      break;
    read_done(r, p->from, p->ctx, p->index);
  }
  if (done)
    memmove(r->reads.v, r->reads.v + done, (r->reads.n - done) * sizeof(*r->reads.v));
  r->reads.n -= done;
}

static void leader_read(struct kt_raft *r, uint64_t from, uint64_t ctx) {
  struct pending_read p = {from, ctx, 0, 0};
  if (kt_raft_test_bug == 4) { /* answers without confirming leadership */
    read_done(r, from, ctx, r->commit);
    return;
  }
  if (term_at(r, r->commit) == r->term) {
    p.seq = ++r->read_seq;
    p.index = r->commit;
    r->read_hb_pending = true;
  }
  VEC_PUSH(r->reads, p);
  check_reads(r);
}

/* ---------------------------------------------------------------- step */

static void set_leader(struct kt_raft *r, uint64_t id) {
  if (r->lead != id)
    event(r, KT_RAFT_EV_LEADER_KNOWN, id, 0);
  r->lead = id;
}

/* propose_conf would say KT_EBUSY: a CONF entry above applied (a leader
 * counts everything up to its last index at election). */
static bool conf_busy(const struct kt_raft *r) {
  if (kt_raft_test_bug == 6) /* lets two changes be in flight */
    return false;
  if (r->role == KT_RAFT_LEADER)
    return r->pending_conf > r->applied;
  return conf_entry_in(r, r->applied, last_index(r));
}

static void step_internal(struct kt_raft *r, const struct kt_raft_msg *m) {
  /* from is NULL for a non-member: a member that joins hears the leader
   * before it applies its own addition; votes are answered for anyone */
  struct progress *from = pr_get(r, m->from);
  if (m->from == 0 || m->type == 0 || m->type >= KT_RAFT_MSG_TYPE_MAX)
    return;
  if (m->term == 0) {
    if (m->type != KT_RAFT_MSG_PROP && m->type != KT_RAFT_MSG_READ_INDEX)
      return;
  } else if (m->term > r->term) {
    if (m->type == KT_RAFT_MSG_VOTE || m->type == KT_RAFT_MSG_PREVOTE) {
      bool force = m->type == KT_RAFT_MSG_VOTE && m->context == 1;
      bool in_lease = r->check_quorum && r->lead != 0 && r->election_elapsed < r->election_ticks;
      if (!force && in_lease)
        return;
    }
    if (m->type == KT_RAFT_MSG_PREVOTE) {
      /* never changes our term */
    } else if (m->type == KT_RAFT_MSG_PREVOTE_RESP && !m->reject) {
      /* our pre-campaign's term: counted below */
    } else if (m->type == KT_RAFT_MSG_APP || m->type == KT_RAFT_MSG_HEARTBEAT ||
               m->type == KT_RAFT_MSG_SNAP) {
      become_follower(r, m->term, m->from);
    } else {
      become_follower(r, m->term, 0);
    }
  } else if (m->term < r->term) {
    if ((r->check_quorum || r->pre_vote) &&
        (m->type == KT_RAFT_MSG_HEARTBEAT || m->type == KT_RAFT_MSG_APP)) {
      struct kt_raft_msg resp = {.type = KT_RAFT_MSG_APP_RESP, .to = m->from};
      send(r, resp); /* tells a stale leader about our term */
    } else if (m->type == KT_RAFT_MSG_PREVOTE) {
      struct kt_raft_msg resp = {.type = KT_RAFT_MSG_PREVOTE_RESP, .to = m->from, .reject = true};
      send(r, resp);
    }
    return;
  }

  if (m->type == KT_RAFT_MSG_VOTE || m->type == KT_RAFT_MSG_PREVOTE) {
    bool pre = m->type == KT_RAFT_MSG_PREVOTE;
    bool can = r->vote == m->from || (r->vote == 0 && r->lead == 0) || (pre && m->term > r->term);
    struct kt_raft_msg resp = {.type = pre ? KT_RAFT_MSG_PREVOTE_RESP : KT_RAFT_MSG_VOTE_RESP,
                               .to = m->from};
    if (can && up_to_date(r, m->log_term, m->index)) {
      if (pre) {
        resp.term = m->term;
        send(r, resp);
      } else {
        r->election_elapsed = 0;
        r->vote = m->from;
        hold(r, resp, 0);
      }
    } else {
      resp.reject = true;
      send(r, resp);
    }
    return;
  }

  switch (r->role) {
  case KT_RAFT_LEADER:
    switch (m->type) {
    case KT_RAFT_MSG_APP_RESP:
      if (from)
        handle_append_resp(r, from, m);
      break;
    case KT_RAFT_MSG_HEARTBEAT_RESP:
      if (!from)
        break;
      from->recent_active = true;
      from->probe_sent = false;
      /* a probe goes even without entries to send: a member whose next is
       * past our log (one added while down, or just empty) answers it with
       * a rejection and a hint, and replication starts */
      if (from->match < last_index(r))
        send_append(r, from, from->state == PR_PROBE);
      if (m->context > from->read_ack && m->context <= r->read_seq) {
        from->read_ack = m->context;
        check_reads(r);
      }
      break;
    case KT_RAFT_MSG_PROP:
      if (r->transferee)
        break;
      for (uint32_t i = 0; i < m->n_entries && i < MAX_PROP_ENTRIES; i++) {
        /* a CONF entry while one is pending goes in as NORMAL: the node
         * sees its request come back as a plain entry and refuses it */
        bool conf = m->entries[i].type == KT_RAFT_ENTRY_CONF && !conf_busy(r);
        append_one(r, r->term, conf ? KT_RAFT_ENTRY_CONF : KT_RAFT_ENTRY_NORMAL, m->entries[i].data,
                   m->entries[i].len);
        if (conf)
          r->pending_conf = last_index(r);
      }
      bcast_append_due(r, false);
      break;
    case KT_RAFT_MSG_READ_INDEX:
      leader_read(r, m->from, m->context);
      break;
    default:
      break;
    }
    break;
  case KT_RAFT_CANDIDATE:
  case KT_RAFT_PRE_CANDIDATE:
    switch (m->type) {
    case KT_RAFT_MSG_APP:
    case KT_RAFT_MSG_HEARTBEAT:
      become_follower(r, m->term, m->from);
      step_internal(r, m);
      break;
    case KT_RAFT_MSG_VOTE_RESP:
      if (r->role == KT_RAFT_CANDIDATE)
        poll(r, m->from, !m->reject);
      break;
    case KT_RAFT_MSG_PREVOTE_RESP:
      if (r->role == KT_RAFT_PRE_CANDIDATE && (m->reject || m->term == r->term + 1))
        poll(r, m->from, !m->reject);
      break;
    default:
      break;
    }
    break;
  case KT_RAFT_FOLLOWER:
    switch (m->type) {
    case KT_RAFT_MSG_APP:
      r->election_elapsed = 0;
      set_leader(r, m->from);
      handle_append(r, m);
      break;
    case KT_RAFT_MSG_HEARTBEAT: {
      r->election_elapsed = 0;
      set_leader(r, m->from);
      commit_to(r, KT_MIN(m->commit, last_index(r)));
      struct kt_raft_msg resp = {
          .type = KT_RAFT_MSG_HEARTBEAT_RESP, .to = m->from, .context = m->context};
      send(r, resp);
      break;
    }
    case KT_RAFT_MSG_PROP:
      if (r->lead && r->lead != r->id) {
        struct kt_raft_msg f = *m;
        f.to = r->lead;
        f.term = 0;
        f.entries = kt_arena_alloc(&r->arena, (m->n_entries + 1) * sizeof(struct kt_raft_entry));
        for (uint32_t i = 0; i < m->n_entries; i++) {
          f.entries[i] = m->entries[i];
          f.entries[i].data = m->entries[i].len
                                  ? kt_arena_dup(&r->arena, m->entries[i].data, m->entries[i].len)
                                  : NULL;
        }
        send(r, f);
      }
      break;
    case KT_RAFT_MSG_READ_INDEX_RESP:
      if (!m->reject) {
        struct kt_raft_read_state rs = {m->index, m->context};
        VEC_PUSH(r->rwait, rs);
      }
      break;
    case KT_RAFT_MSG_TIMEOUT_NOW:
      hup(r, true);
      break;
    default:
      break;
    }
    break;
  }
}

void kt_raft_step(struct kt_raft *r, const struct kt_raft_msg *m) {
  kt_assert(!r->in_ready);
  if (m->to != r->id || m->from == r->id)
    return;
  step_internal(r, m);
  release_held(r);
}

/* ---------------------------------------------------------------- API */

int kt_raft_new(const struct kt_raft_config *cfg, struct kt_raft **out) {
  if (!cfg->id || cfg->heartbeat_ticks < 1 || cfg->election_ticks <= cfg->heartbeat_ticks ||
      cfg->max_inflight_msgs < 1 ||
      !conf_valid(cfg->voters, cfg->n_voters, cfg->learners, cfg->n_learners))
    return KT_EINVAL;
  uint64_t first = cfg->first_index ? cfg->first_index : 1;
  for (size_t i = 0; i < cfg->n_entries; i++)
    if (cfg->entries[i].index != first + i || cfg->entries[i].term > cfg->hs.term)
      return KT_EINVAL;
  struct kt_raft *r = calloc(1, sizeof *r);
  kt_assert(r);
  r->id = cfg->id;
  r->election_ticks = cfg->election_ticks;
  r->heartbeat_ticks = cfg->heartbeat_ticks;
  r->max_msg_bytes = cfg->max_msg_bytes ? cfg->max_msg_bytes : 1 << 20;
  r->max_inflight_msgs = cfg->max_inflight_msgs;
  r->max_inflight_bytes = cfg->max_inflight_bytes;
  r->pre_vote = cfg->pre_vote;
  r->check_quorum = cfg->check_quorum;
  kt_rng_seed(&r->rng, cfg->seed ^ (cfg->id * 0x9e3779b97f4a7c15ull));
  r->first = first;
  r->comp_term = first > 1 ? cfg->compacted_term : 0;
  for (size_t i = 0; i < cfg->n_entries; i++)
    append_one(r, cfg->entries[i].term, cfg->entries[i].type, cfg->entries[i].data,
               cfg->entries[i].len);
  r->persisted = r->handed = last_index(r);
  r->applied = KT_MAX(cfg->applied, first - 1);
  r->prs = calloc(KT_RAFT_MAX_MEMBERS, sizeof *r->prs);
  kt_assert(r->prs);
  conf_set(r, cfg->voters, cfg->n_voters, cfg->learners, cfg->n_learners);
  r->term = cfg->hs.term;
  r->vote = cfg->hs.vote;
  r->d_term = cfg->hs.term;
  r->d_vote = cfg->hs.vote;
  r->commit = KT_MAX(KT_MIN(cfg->hs.commit, last_index(r)), r->applied);
  r->commit = KT_MAX(r->commit, r->conf_prev);
  r->given_hs = cfg->hs;
  become_follower(r, r->term, 0);
  *out = r;
  return 0;
}

void kt_raft_free(struct kt_raft *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->log.n; i++)
    if (r->log.v[i].data)
      data_free(r, r->log.v[i].data);
  for (size_t i = 0; i < r->grave.n; i++)
    data_free(r, r->grave.v[i]);
  free(r->dcur);
  while (r->n_prs)
    pr_remove(r, r->n_prs - 1);
  free(r->prs);
  free(r->log.v);
  free(r->out.v);
  free(r->held.v);
  free(r->fwd.v);
  free(r->events.v);
  free(r->late_events.v);
  free(r->reads.v);
  free(r->rwait.v);
  free(r->rready.v);
  free(r->grave.v);
  kt_arena_free(&r->arena);
  free(r);
}

void kt_raft_tick(struct kt_raft *r) {
  kt_assert(!r->in_ready);
  r->election_elapsed++;
  if (r->role != KT_RAFT_LEADER) {
    if (r->election_elapsed >= r->rand_timeout) {
      r->election_elapsed = 0;
      hup(r, false);
    }
  } else {
    r->heartbeat_elapsed++;
    if (r->election_elapsed >= r->election_ticks) {
      r->election_elapsed = 0;
      if (r->check_quorum) {
        size_t active = 0;
        for (size_t i = 0; i < r->n_voters; i++)
          if (r->prs[i].id == r->id || r->prs[i].recent_active)
            active++;
        for (size_t i = 0; i < r->n_prs; i++)
          r->prs[i].recent_active = false;
        if (active < quorum(r)) {
          event(r, KT_RAFT_EV_STEP_DOWN_NO_QUORUM, 0, 0);
          become_follower(r, r->term, 0);
          release_held(r);
          return;
        }
      }
      r->transferee = 0;
    }
    /* a replicate stream whose messages got lost: resend from match + 1 */
    for (size_t i = 0; r->role == KT_RAFT_LEADER && i < r->n_prs; i++) {
      struct progress *pr = &r->prs[i];
      if (pr->state == PR_SNAPSHOT) { /* no install reported for long: ask again */
        if (++pr->stall_ticks >= SNAPSHOT_WAIT_ELECTIONS * r->election_ticks) {
          pr->stall_ticks = 0;
          pr->probed_compacted = false;
          pr_become_probe(r, pr);
          send_append(r, pr, true);
        }
        continue;
      }
      if (pr->state != PR_REPLICATE || pr->infl_count == 0) {
        pr->stall_ticks = 0;
      } else if (++pr->stall_ticks >= KT_MAX(r->election_ticks / 2, 2)) {
        pr->stall_ticks = 0;
        pr_become_probe(r, pr);
        send_append(r, pr, true);
      }
    }
    if (r->role == KT_RAFT_LEADER && r->heartbeat_elapsed >= r->heartbeat_ticks) {
      r->heartbeat_elapsed = 0;
      bcast_heartbeat(r, r->read_seq);
      r->read_hb_pending = false;
    }
  }
  release_held(r);
}

/* Appends (leader) or forwards (follower) one entry of `type`; a CONF entry
 * only when no change is pending. */
static int propose(struct kt_raft *r, uint8_t type, const void *data, uint32_t len,
                   uint64_t *index) {
  kt_assert(!r->in_ready);
  bool conf = type == KT_RAFT_ENTRY_CONF;
  if (index)
    *index = 0;
  if (r->role == KT_RAFT_LEADER) {
    if (r->transferee || (conf && conf_busy(r)))
      return KT_EBUSY;
    append_one(r, r->term, type, data, len);
    if (conf)
      r->pending_conf = last_index(r);
    if (index)
      *index = last_index(r);
    bcast_append_due(r, false);
    return 0;
  }
  if (!r->lead)
    return KT_ENOLEADER;
  if (conf && conf_busy(r))
    return KT_EBUSY;
  struct kt_raft_entry e = {0, 0, type, len, len ? kt_arena_dup(&r->arena, data, len) : NULL};
  VEC_PUSH(r->fwd, e);
  if (r->fwd.n >= MAX_PROP_ENTRIES)
    flush_due(r);
  return 0;
}

int kt_raft_propose(struct kt_raft *r, const void *data, uint32_t len, uint64_t *index) {
  return propose(r, KT_RAFT_ENTRY_NORMAL, data, len, index);
}

int kt_raft_propose_conf(struct kt_raft *r, const void *data, uint32_t len, uint64_t *index) {
  return propose(r, KT_RAFT_ENTRY_CONF, data, len, index);
}

/* What a configuration change implies for this member's role and, on the
 * leader, for replication, commit and reads. Runs outside ready/advance. */
static void conf_effects(struct kt_raft *r) {
  r->conf_dirty = false;
  if (r->transferee && !is_voter(r, r->transferee))
    r->transferee = 0;
  if (!is_voter(r, r->id)) {
    if (r->role == KT_RAFT_LEADER) {
      /* hand over (TimeoutNow, as in a transfer) to a remaining voter
       * that has our whole log: no election timeout to wait out, and it
       * wins even before it applies our removal (then it needs our vote,
       * which we give while we are still up) */
      struct progress *best = NULL;
      for (size_t i = 0; i < r->n_voters; i++)
        if (!best || r->prs[i].match > best->match)
          best = &r->prs[i];
      if (best && best->match == last_index(r)) {
        struct kt_raft_msg t = {.type = KT_RAFT_MSG_TIMEOUT_NOW, .to = best->id};
        send(r, t);
      }
    }
    if (r->role != KT_RAFT_FOLLOWER) {
      event(r, KT_RAFT_EV_STEP_DOWN_REMOVED, 0, 0);
      become_follower(r, r->term, 0);
    }
    return;
  }
  if (r->role != KT_RAFT_LEADER) {
    for (size_t i = 0; i < r->n_prs; i++)
      r->prs[i].fresh = false;
    return;
  }
  bool committed = maybe_commit(r); /* a removal may shrink the quorum */
  for (size_t i = 0; i < r->n_prs; i++) {
    struct progress *pr = &r->prs[i];
    if (pr->id != r->id && (committed || pr->fresh))
      send_append_all(r, pr, true);
    pr->fresh = false;
  }
  check_reads(r);
}

int kt_raft_apply_conf(struct kt_raft *r, uint8_t change, uint64_t id) {
  size_t at = pr_index(r, id);
  bool present = at != SIZE_MAX;
  switch (change) {
  case KT_RAFT_CONF_ADD_VOTER:
  case KT_RAFT_CONF_ADD_LEARNER:
    if (!id || present || r->n_prs >= KT_RAFT_MAX_MEMBERS)
      return KT_EINVAL;
    pr_add(r, id, change == KT_RAFT_CONF_ADD_LEARNER);
    break;
  case KT_RAFT_CONF_REMOVE:
    if (!present || (at < r->n_voters && r->n_voters == 1))
      return KT_EINVAL;
    pr_remove(r, at);
    break;
  case KT_RAFT_CONF_PROMOTE:
    if (!present || at < r->n_voters)
      return KT_EINVAL;
    pr_promote(r, at);
    break;
  default:
    return KT_EINVAL;
  }
  event(r, KT_RAFT_EV_CONF_CHANGE, id, change);
  r->conf_dirty = true;
  if (!r->in_ready) {
    conf_effects(r);
    release_held(r);
  }
  return 0;
}

int kt_raft_read_index(struct kt_raft *r, uint64_t ctx) {
  kt_assert(!r->in_ready);
  if (r->role == KT_RAFT_LEADER) {
    leader_read(r, r->id, ctx);
    return 0;
  }
  if (!r->lead)
    return KT_ENOLEADER;
  struct kt_raft_msg m = {.type = KT_RAFT_MSG_READ_INDEX, .to = r->lead, .context = ctx};
  send(r, m);
  return 0;
}

int kt_raft_transfer_leader(struct kt_raft *r, uint64_t to) {
  kt_assert(!r->in_ready);
  if (r->role != KT_RAFT_LEADER)
    return KT_ENOLEADER;
  struct progress *pr = pr_get(r, to);
  if (!pr || pr->learner || to == r->id)
    return KT_EINVAL;
  r->transferee = to;
  r->election_elapsed = 0;
  event(r, KT_RAFT_EV_TRANSFER, to, 0);
  if (pr->match == last_index(r)) {
    struct kt_raft_msg t = {.type = KT_RAFT_MSG_TIMEOUT_NOW, .to = to};
    send(r, t);
  } else {
    send_append_all(r, pr, true);
  }
  return 0;
}

void kt_raft_persisted(struct kt_raft *r, uint64_t term, uint64_t index) {
  kt_assert(!r->in_ready);
  if (index > r->persisted && index <= r->handed && term_at(r, index) == term) {
    r->persisted = index;
    if (r->role == KT_RAFT_LEADER && maybe_commit(r))
      bcast_append_due(r, true);
  }
  release_held(r);
}

void kt_raft_hs_persisted(struct kt_raft *r, const struct kt_raft_hard_state *hs) {
  kt_assert(!r->in_ready);
  if (hs->term > r->d_term || (hs->term == r->d_term && hs->vote != 0 && r->d_vote == 0)) {
    r->d_term = hs->term;
    r->d_vote = hs->vote;
  }
  release_held(r);
}

int kt_raft_install_snapshot(struct kt_raft *r, uint64_t index, uint64_t term,
                             const uint64_t *voters, size_t n_voters, const uint64_t *learners,
                             size_t n_learners) {
  kt_assert(!r->in_ready);
  if (term == 0 || term > r->term || !conf_valid(voters, n_voters, learners, n_learners))
    return KT_EINVAL;
  if (index <= r->commit) {
    /* stale: tell the leader how far we are (as etcd), so it replicates
     * from there instead of asking for snapshots again */
    if (r->lead && r->lead != r->id) {
      struct kt_raft_msg resp = {.type = KT_RAFT_MSG_APP_RESP, .to = r->lead, .index = r->commit};
      hold(r, resp, r->commit);
    }
    return KT_EINVAL;
  }
  for (size_t i = 0; i < r->log.n; i++)
    if (r->log.v[i].data)
      VEC_PUSH(r->grave, r->log.v[i].data);
  r->log.n = 0;
  r->conf_last = r->conf_prev = 0;
  r->first = index + 1;
  r->comp_term = term;
  r->commit = r->persisted = r->handed = r->applied = index;
  conf_set(r, voters, n_voters, learners, n_learners);
  if (r->role != KT_RAFT_FOLLOWER) /* progress and votes were of the old configuration */
    become_follower(r, r->term, 0);
  conf_effects(r);
  if (r->lead && r->lead != r->id) {
    struct kt_raft_msg resp = {.type = KT_RAFT_MSG_APP_RESP, .to = r->lead, .index = index};
    send(r, resp);
  }
  return 0;
}

void kt_raft_report_snapshot_failed(struct kt_raft *r, uint64_t peer) {
  kt_assert(!r->in_ready);
  if (r->role != KT_RAFT_LEADER)
    return;
  for (size_t i = 0; i < r->n_prs; i++)
    if (r->prs[i].id == peer && r->prs[i].state == PR_SNAPSHOT) {
      r->prs[i].stall_ticks = 0;
      r->prs[i].probed_compacted = false; /* probe at our compaction point first */
      pr_become_probe(r, &r->prs[i]);
    }
}

int kt_raft_compact(struct kt_raft *r, uint64_t index) {
  kt_assert(!r->in_ready);
  if (index < r->first || index > r->applied || index > r->persisted)
    return KT_EINVAL;
  uint64_t n = index - r->first + 1;
  for (uint64_t i = 0; i < n; i++)
    if (r->log.v[i].data)
      VEC_PUSH(r->grave, r->log.v[i].data);
  r->comp_term = r->log.v[n - 1].term;
  memmove(r->log.v, r->log.v + n, (r->log.n - n) * sizeof(*r->log.v));
  r->log.n -= n;
  r->first = index + 1;
  return 0;
}

static uint64_t apply_to(const struct kt_raft *r) { return KT_MIN(r->commit, r->persisted); }

/* The hard state to persist. Its commit never covers entries of the batch it
 * is written with (only entries handed out before): if that write tears after
 * the hard state, the disk may still hold a stale tail the lost entries would
 * have replaced, and a restart must not treat that tail as committed. */
static struct kt_raft_hard_state hs_now(const struct kt_raft *r) {
  struct kt_raft_hard_state hs = {r->term, r->vote, KT_MIN(r->commit, r->handed)};
  return hs;
}

bool kt_raft_has_ready(const struct kt_raft *r) {
  if (r->out.n || r->events.n || r->late_events.n || r->read_hb_pending || r->fwd.n ||
      any_append_due(r) || r->handed < last_index(r) || apply_to(r) > r->applied)
    return true;
  struct kt_raft_hard_state hs = hs_now(r);
  if (memcmp(&hs, &r->given_hs, sizeof hs) != 0)
    return true;
  for (size_t i = 0; i < r->rwait.n; i++)
    if (r->rwait.v[i].index <= apply_to(r))
      return true;
  return false;
}

void kt_raft_ready(struct kt_raft *r, struct kt_raft_ready *rd) {
  kt_assert(!r->in_ready);
  if (r->read_hb_pending && r->role == KT_RAFT_LEADER)
    bcast_heartbeat(r, r->read_seq);
  r->read_hb_pending = false;
  flush_due(r);
  memset(rd, 0, sizeof *rd);
  r->in_ready = true;
  struct kt_raft_hard_state hs = hs_now(r);
  rd->hs = hs;
  rd->hs_changed = memcmp(&hs, &r->given_hs, sizeof hs) != 0;
  r->given_hs = hs;
  r->rd_last = last_index(r);
  if (r->handed < r->rd_last) {
    rd->entries = &r->log.v[r->handed + 1 - r->first];
    rd->n_entries = r->rd_last - r->handed;
  }
  rd->msgs = r->out.v;
  rd->n_msgs = r->out.n;
  r->rd_applied = KT_MAX(apply_to(r), r->applied);
  if (r->rd_applied > r->applied) {
    kt_assert(r->applied + 1 >= r->first);
    rd->committed = &r->log.v[r->applied + 1 - r->first];
    rd->n_committed = r->rd_applied - r->applied;
  }
  r->rready.n = 0;
  size_t keep = 0;
  for (size_t i = 0; i < r->rwait.n; i++) {
    if (r->rwait.v[i].index <= r->rd_applied)
      VEC_PUSH(r->rready, r->rwait.v[i]);
    else
      r->rwait.v[keep++] = r->rwait.v[i];
  }
  r->rwait.n = keep;
  rd->reads = r->rready.v;
  rd->n_reads = r->rready.n;
  rd->events = r->events.v;
  rd->n_events = r->events.n;
  rd->role = r->role;
  rd->leader = r->lead;
}

void kt_raft_advance(struct kt_raft *r) {
  kt_assert(r->in_ready);
  r->in_ready = false;
  r->handed = KT_MAX(r->handed, r->rd_last);
  r->applied = KT_MAX(r->applied, r->rd_applied);
  r->out.n = 0;
  r->events.n = 0;
  for (size_t i = 0; i < r->late_events.n; i++)
    VEC_PUSH(r->events, r->late_events.v[i]);
  r->late_events.n = 0;
  r->rready.n = 0;
  for (size_t i = 0; i < r->grave.n; i++)
    data_free(r, r->grave.v[i]);
  r->grave.n = 0;
  kt_arena_reset(&r->arena);
  if (r->conf_dirty) {
    conf_effects(r);
    release_held(r);
  }
}

enum kt_raft_role kt_raft_role(const struct kt_raft *r) { return r->role; }
uint64_t kt_raft_term(const struct kt_raft *r) { return r->term; }
uint64_t kt_raft_vote(const struct kt_raft *r) { return r->vote; }
uint64_t kt_raft_leader(const struct kt_raft *r) { return r->lead; }
uint64_t kt_raft_commit(const struct kt_raft *r) { return r->commit; }
uint64_t kt_raft_applied(const struct kt_raft *r) { return r->applied; }
uint64_t kt_raft_first_index(const struct kt_raft *r) { return r->first; }
uint64_t kt_raft_last_index(const struct kt_raft *r) { return last_index(r); }
uint64_t kt_raft_persisted_index(const struct kt_raft *r) { return r->persisted; }
uint64_t kt_raft_term_at(const struct kt_raft *r, uint64_t index) { return term_at(r, index); }

size_t kt_raft_members(const struct kt_raft *r, struct kt_raft_member_state *out, size_t cap) {
  bool lead = r->role == KT_RAFT_LEADER;
  for (size_t i = 0; i < r->n_prs && i < cap; i++) {
    const struct progress *pr = &r->prs[i];
    struct kt_raft_member_state ms = {pr->id, pr->learner, 0, 0, false};
    if (pr->id == r->id) {
      ms.match = r->persisted;
      ms.next = lead ? last_index(r) + 1 : 0;
      ms.recent_active = lead;
    } else if (lead) {
      ms.match = pr->match;
      ms.next = pr->next;
      ms.recent_active = pr->recent_active;
    }
    out[i] = ms;
  }
  return r->n_prs;
}

bool kt_raft_is_voter(const struct kt_raft *r, uint64_t id) { return id && is_voter(r, id); }
bool kt_raft_is_learner(const struct kt_raft *r, uint64_t id) {
  size_t at = pr_index(r, id);
  return id && at != SIZE_MAX && r->prs[at].learner;
}
bool kt_raft_conf_pending(const struct kt_raft *r) { return conf_busy(r); }
const struct kt_raft_entry *kt_raft_entry_at(const struct kt_raft *r, uint64_t index) {
  if (index < r->first || index > last_index(r))
    return NULL;
  return &r->log.v[index - r->first];
}

const char *kt_raft_role_name(enum kt_raft_role role) {
  static const char *names[] = {"follower", "pre-candidate", "candidate", "leader"};
  return (unsigned)role < KT_ARRAY_LEN(names) ? names[role] : "?";
}

const char *kt_raft_msg_type_name(int type) {
  static const char *names[] = {"?",           "app",     "app-resp",     "vote",
                                "vote-resp",   "prevote", "prevote-resp", "heartbeat",
                                "hb-resp",     "prop",    "read-index",   "read-index-resp",
                                "timeout-now", "snap"};
  return type > 0 && type < KT_RAFT_MSG_TYPE_MAX ? names[type] : "?";
}

const char *kt_raft_event_str(const struct kt_raft_event *ev, char *buf, size_t n) {
  unsigned long long t = ev->term, a = ev->a, b = ev->b;
  switch (ev->type) {
  case KT_RAFT_EV_BECAME_FOLLOWER:
    snprintf(buf, n, "became follower term=%llu leader=%llu", t, a);
    break;
  case KT_RAFT_EV_BECAME_PRE_CANDIDATE:
    snprintf(buf, n, "became pre-candidate term=%llu", t);
    break;
  case KT_RAFT_EV_BECAME_CANDIDATE:
    snprintf(buf, n, "became candidate term=%llu", t);
    break;
  case KT_RAFT_EV_BECAME_LEADER:
    snprintf(buf, n, "became leader term=%llu last=%llu", t, a);
    break;
  case KT_RAFT_EV_COMMIT:
    snprintf(buf, n, "commit term=%llu index=%llu", t, a);
    break;
  case KT_RAFT_EV_VOTE_GRANTED:
    snprintf(buf, n, "vote granted term=%llu to=%llu", t, a);
    break;
  case KT_RAFT_EV_TRUNCATE:
    snprintf(buf, n, "truncate term=%llu from=%llu", t, a);
    break;
  case KT_RAFT_EV_STEP_DOWN_NO_QUORUM:
    snprintf(buf, n, "step down term=%llu reason=no-quorum", t);
    break;
  case KT_RAFT_EV_PROBE:
    snprintf(buf, n, "probe term=%llu peer=%llu next=%llu", t, a, b);
    break;
  case KT_RAFT_EV_REPLICATE:
    snprintf(buf, n, "replicate term=%llu peer=%llu match=%llu", t, a, b);
    break;
  case KT_RAFT_EV_TRANSFER:
    snprintf(buf, n, "transfer leadership term=%llu to=%llu", t, a);
    break;
  case KT_RAFT_EV_LEADER_KNOWN:
    snprintf(buf, n, "leader term=%llu id=%llu", t, a);
    break;
  case KT_RAFT_EV_CONF_CHANGE: {
    static const char *names[] = {"?", "add-voter", "add-learner", "remove", "promote"};
    snprintf(buf, n, "conf change term=%llu id=%llu %s", t, a, b < 5 ? names[b] : "?");
    break;
  }
  case KT_RAFT_EV_STEP_DOWN_REMOVED:
    snprintf(buf, n, "step down term=%llu reason=removed", t);
    break;
  case KT_RAFT_EV_NEED_SNAPSHOT:
    snprintf(buf, n, "need snapshot term=%llu peer=%llu next=%llu", t, a, b);
    break;
  default:
    snprintf(buf, n, "event %u term=%llu a=%llu b=%llu", ev->type, t, a, b);
  }
  return buf;
}

/* ---------------------------------------------------------------- codec */

void kt_raft_msg_encode_header(const struct kt_raft_msg *m, uint8_t h[KT_RAFT_MSG_HEADER_BYTES]) {
  h[0] = 1;
  h[1] = m->type;
  h[2] = m->reject ? 1 : 0;
  h[3] = 0;
  kt_put_u64be(h + 4, m->from);
  kt_put_u64be(h + 12, m->to);
  kt_put_u64be(h + 20, m->term);
  kt_put_u64be(h + 28, m->log_term);
  kt_put_u64be(h + 36, m->index);
  kt_put_u64be(h + 44, m->commit);
  kt_put_u64be(h + 52, m->hint);
  kt_put_u64be(h + 60, m->context);
  kt_put_u32be(h + 68, m->n_entries);
}

/* Appends the encoding of ents[0..n); if off, off[i] gets the offset in out
 * where entry i starts and off[n] where the last one ends. */
static void entries_encode(const struct kt_raft_entry *ents, uint32_t n, struct kt_buf *out,
                           size_t *off) {
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++)
    total += KT_RAFT_ENTRY_HEADER_BYTES + (size_t)ents[i].len;
  kt_buf_reserve(out, total);
  uint8_t *w = out->p + out->len;
  for (uint32_t i = 0; i < n; i++) {
    const struct kt_raft_entry *e = &ents[i];
    if (off)
      off[i] = (size_t)(w - out->p);
    kt_put_u64be(w, e->term);
    kt_put_u64be(w + 8, e->index);
    w[16] = e->type;
    kt_put_u32be(w + 17, e->len);
    w += KT_RAFT_ENTRY_HEADER_BYTES;
    if (e->len)
      memcpy(w, e->data, e->len);
    w += e->len;
  }
  if (off)
    off[n] = (size_t)(w - out->p);
  out->len = (size_t)(w - out->p);
}

void kt_raft_msg_encode(const struct kt_raft_msg *m, struct kt_buf *out) {
  uint8_t h[KT_RAFT_MSG_HEADER_BYTES];
  kt_raft_msg_encode_header(m, h);
  kt_buf_append(out, h, sizeof h);
  entries_encode(m->entries, m->n_entries, out, NULL);
}

/* Same entry: the same encoding. data is compared by address: within one
 * ready batch the entries' memory does not change. */
static bool entry_same(const struct kt_raft_entry *a, const struct kt_raft_entry *b) {
  return a->index == b->index && a->term == b->term && a->type == b->type && a->len == b->len &&
         a->data == b->data;
}

void kt_raft_ents_enc_reset(struct kt_raft_ents_enc *c) {
  c->ents = NULL;
  c->n = 0;
  kt_buf_reset(&c->bytes);
}

void kt_raft_ents_enc_free(struct kt_raft_ents_enc *c) {
  kt_buf_free(&c->bytes);
  free(c->off);
  memset(c, 0, sizeof *c);
}

void kt_raft_ents_enc_get(struct kt_raft_ents_enc *c, const struct kt_raft_entry *ents, uint32_t n,
                          const uint8_t **p, size_t *len) {
  if (n == 0) {
    *p = NULL;
    *len = 0;
    return;
  }
  /* Within what is cached? Entry indexes are consecutive in a message. */
  if (c->n && ents[0].index >= c->ents[0].index && ents[0].index - c->ents[0].index < c->n &&
      n <= c->n - (ents[0].index - c->ents[0].index)) {
    uint32_t k = (uint32_t)(ents[0].index - c->ents[0].index);
    uint32_t i = 0;
    while (i < n && entry_same(&ents[i], &c->ents[k + i]))
      i++;
    if (i == n) {
      c->hits++;
      *p = c->bytes.p + c->off[k];
      *len = c->off[k + n] - c->off[k];
      return;
    }
  }
  for (uint32_t i = 1; i < n; i++) /* not consecutive: encode, never cache */
    if (ents[i].index != ents[0].index + i) {
      kt_buf_reset(&c->bytes);
      entries_encode(ents, n, &c->bytes, NULL);
      c->ents = NULL;
      c->n = 0;
      *p = c->bytes.p;
      *len = c->bytes.len;
      return;
    }
  if (c->off_cap < (size_t)n + 1) {
    size_t cap = c->off_cap ? c->off_cap : 64;
    while (cap < (size_t)n + 1)
      cap *= 2;
    size_t *no = realloc(c->off, cap * sizeof *no);
    kt_assert(no);
    c->off = no;
    c->off_cap = cap;
  }
  kt_buf_reset(&c->bytes);
  entries_encode(ents, n, &c->bytes, c->off);
  c->ents = ents;
  c->n = n;
  c->misses++;
  *p = c->bytes.p;
  *len = c->bytes.len;
}

int kt_raft_msg_decode(const uint8_t *p, size_t n, struct kt_arena *arena, struct kt_raft_msg *m,
                       struct kt_err *e) {
  memset(m, 0, sizeof *m);
  if (n < KT_RAFT_MSG_HEADER_BYTES)
    return kt_err_set(e, KT_EPROTO, "raft message: %zu bytes, header needs %d", n,
                      KT_RAFT_MSG_HEADER_BYTES);
  if (p[0] != 1)
    return kt_err_set(e, KT_EPROTO, "raft message: version %u", p[0]);
  if (p[1] == 0 || p[1] >= KT_RAFT_MSG_TYPE_MAX)
    return kt_err_set(e, KT_EPROTO, "raft message: unknown type %u", p[1]);
  if ((p[2] & ~1u) || p[3])
    return kt_err_set(e, KT_EPROTO, "raft message: bad flags %u/%u", p[2], p[3]);
  m->type = p[1];
  m->reject = p[2] & 1;
  uint64_t *f[8] = {&m->from,  &m->to,     &m->term, &m->log_term,
                    &m->index, &m->commit, &m->hint, &m->context};
  for (int i = 0; i < 8; i++)
    *f[i] = kt_get_u64be(p + 4 + 8 * i);
  uint32_t cnt = kt_get_u32be(p + 68);
  size_t off = KT_RAFT_MSG_HEADER_BYTES;
  if (cnt > (n - off) / KT_RAFT_ENTRY_HEADER_BYTES)
    return kt_err_set(e, KT_EPROTO, "raft message: %u entries in %zu bytes", cnt, n - off);
  m->n_entries = cnt;
  if (cnt)
    m->entries = kt_arena_alloc(arena, cnt * sizeof(struct kt_raft_entry));
  for (uint32_t i = 0; i < cnt; i++) {
    if (n - off < KT_RAFT_ENTRY_HEADER_BYTES)
      return kt_err_set(e, KT_EPROTO, "raft message: entry %u header truncated at %zu", i, off);
    struct kt_raft_entry *en = &m->entries[i];
    en->term = kt_get_u64be(p + off);
    en->index = kt_get_u64be(p + off + 8);
    en->type = p[off + 16];
    en->len = kt_get_u32be(p + off + 17);
    off += KT_RAFT_ENTRY_HEADER_BYTES;
    if (en->type > KT_RAFT_ENTRY_CONF)
      return kt_err_set(e, KT_EPROTO, "raft message: entry %u type %u", i, en->type);
    if (en->len > n - off)
      return kt_err_set(e, KT_EPROTO, "raft message: entry %u len %u beyond end at %zu", i, en->len,
                        off);
    en->data = en->len ? (uint8_t *)(p + off) : NULL;
    off += en->len;
  }
  if (off != n)
    return kt_err_set(e, KT_EPROTO, "raft message: %zu trailing bytes", n - off);
  return 0;
}
