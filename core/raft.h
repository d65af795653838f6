/* core/raft.h — Raft as a pure state machine (in the manner of etcd's raft).
 *
 * Owns: one member's Raft state — term, vote, role, the in-memory log (every
 * entry from the last compaction point on, persisted or not), per-follower
 * progress on the leader, pending ReadIndex requests, and the messages that
 * wait for persistence. No sockets, files, clock, threads or logging: time is
 * kt_raft_tick(), randomness is a seeded struct kt_rng, I/O is the caller's.
 *
 * Data flow (the node drives it; nothing here blocks):
 *
 *   kt_raft_tick / kt_raft_step(msg) / kt_raft_propose / kt_raft_read_index
 *        │
 *        ▼
 *   kt_raft_ready(&rd)  one batch: rd.hs + rd.entries to persist,
 *        │              rd.msgs to send, rd.committed to apply,
 *        │              rd.reads to release, rd.events to log/assert on
 *        ├─► persist rd.hs and rd.entries in ONE durable write, hs first (so a
 *        │   torn write never keeps entries without their term; asynchronously,
 *        │   batches in order; an entry at or below the last written index
 *        │   replaces the log from there on); when durable:
 *        │   kt_raft_persisted(term, index) of its last entry and
 *        │   kt_raft_hs_persisted(&hs) — any later time, after advance
 *        ├─► send rd.msgs (all of them, at once: raft already held back what
 *        │   had to wait for the disk)
 *        ├─► apply rd.committed in order (entries with len 0 are the leader's
 *        │   empty entry: skip; a CONF entry: decode the change, then
 *        │   kt_raft_apply_conf), then answer rd.reads (applied >= their index)
 *        ▼
 *   kt_raft_advance()   the batch's pointers die here; the effects of the
 *                       batch's configuration changes (step down, probe
 *                       new members, commit on a smaller quorum) run here.
 *
 * Between kt_raft_ready and kt_raft_advance the caller must not call any
 * other kt_raft_* function that changes state (tick, step, propose,
 * read_index, persisted, compact, install_snapshot), except
 * kt_raft_apply_conf.
 *
 * Invariants (asserted):
 * - A vote grant or an append ack leaves only after the hard state (term,
 *   vote) and the entries it promises are reported persisted, and only if the
 *   entry it acks is still the one in the log (a truncation drops stale acks).
 * - The leader counts its own match index as its persisted index.
 * - A leader commits only an entry of its own term, replicated (persisted) on
 *   a quorum of voters; entries at or below commit are never truncated.
 * - Quorums (commit, votes, check-quorum, ReadIndex) are over the voters of
 *   this member's applied configuration only; learners and non-members get
 *   replication and may answer votes, but are never counted.
 * - committed entries handed out are <= min(commit, persisted index).
 *
 * Flow control (per follower, like etcd's Progress): PROBE sends one APP and
 * waits for its answer (or a heartbeat answer); REPLICATE pipelines up to
 * max_inflight_msgs / max_inflight_bytes; a REPLICATE stream with no ack for
 * election_ticks/2 ticks is assumed lost and falls back to PROBE from match+1.
 * A rejected APP carries a hint (index, log_term) so the leader skips a whole
 * term per round trip (etcd's findConflictByTerm).
 *
 * Log storage: the log lives here, in memory, from first_index on; the node
 * restarts raft from its disk through kt_raft_config (hs, entries, compaction
 * point) and drops old entries with kt_raft_compact once a snapshot covers
 * them. A follower whose next entry is compacted is probed once at the
 * compaction point; if it lacks that too, it is left in SNAPSHOT state and a
 * KT_RAFT_EV_NEED_SNAPSHOT event is emitted.
 *
 * For the node (core/node.c), one loop turn, in this order:
 *
 *   feed: kt_raft_step for each decoded peer message, kt_raft_tick on the
 *         heartbeat timer, kt_raft_propose / kt_raft_read_index for clients
 *   while (kt_raft_has_ready(r)) {
 *     kt_raft_ready(r, &rd);
 *     WAL: append an hs record (if rd.hs_changed) then rd.entries; remember
 *          (last entry term/index, rd.hs) for this write; flush at loop end
 *     net: encode and queue rd.msgs per peer (kt_raft_msg_encode)
 *     apply rd.committed to the store (a CONF entry: decode the change,
 *          then kt_raft_apply_conf; a change that comes back as a NORMAL
 *          entry was refused: another one was in progress); a proposal of
 *          this member succeeded iff the entry applied at its index has
 *          the term it was proposed in (kt_raft_term() right after
 *          kt_raft_propose); any other entry at that index means it is
 *          lost; timed out before its index is applied: the outcome is
 *          unknown (EUNKNOWN), never success
 *     answer rd.reads; log rd.events
 *     kt_raft_advance(r);
 *   }
 *   sync done (ev_async): kt_raft_persisted + kt_raft_hs_persisted, then the
 *   ready loop again (acks and votes released by the disk go out now)
 *
 * Proposals forwarded by a follower (propose returns index 0) and reads on a
 * follower travel as messages that may be lost: the node times them out.
 * What proposals send waits for the next kt_raft_ready: the proposals of a
 * loop turn go to each follower in one APP (leader) or to the leader in one
 * PROP (follower), and each APP is answered once.
 * Memory: entries stay here until kt_raft_compact; call it after applying
 * (keeping a tail for slow followers, like etcd's 5000 catch-up entries).
 *
 * Snapshots travel outside raft (the node streams the file on the peer
 * snapshot channel, then calls kt_raft_install_snapshot on the follower);
 * KT_RAFT_MSG_SNAP stays reserved.
 *
 * Membership (one change at a time, like etcd's ConfChange, not joint
 * consensus): the configuration is voters + learners. A change is a CONF
 * entry (kt_raft_propose_conf; its data is the node's encoding) that takes
 * effect when the node applies it (kt_raft_apply_conf), on every member in
 * log order, not when it is appended. Safe because consecutive
 * configurations differ by one member and two rules keep every member at
 * most one change behind the newest committed one:
 * - one change in flight: the leader refuses a CONF entry while any CONF
 *   entry in its log is above its applied index (a new leader counts its
 *   whole log at election as possibly pending — etcd's pendingConfIndex);
 * - no campaign while a committed CONF entry is not applied yet (and never
 *   by a member that is not a voter in its applied configuration).
 * The configuration at a snapshot's index travels with the snapshot
 * (kt_raft_install_snapshot); a restart passes it in kt_raft_config and the
 * CONF entries after it are applied again as they are handed out.
 * A follower also commits every CONF entry in its log but the last (the
 * leader appended the later one only after applying it), since a new
 * leader's commit index may lag behind its log.
 * Bootstrap: a new cluster's members start with n_voters = 0 and the log
 * 1..k of CONF entries (term 1, one ADD_VOTER each, hs = {1, 0, k}), applied
 * when raft hands them out; a member that joins starts empty and learns
 * everything from the leader (log or snapshot).
 * Removing the leader: once it applies its removal it sends TimeoutNow to a
 * voter that has its whole log, then steps down; it keeps answering votes.
 * A voter that has not applied the removal yet still counts the old leader,
 * so with two voters (2 → 1) the survivor needs the removed member's vote
 * until it learns the commit: keep a removed member up until the others
 * applied its removal (or transfer leadership first).
 */
#ifndef KT_RAFT_H
#define KT_RAFT_H

#include "base.h"

enum kt_raft_role {
  KT_RAFT_FOLLOWER,
  KT_RAFT_PRE_CANDIDATE,
  KT_RAFT_CANDIDATE,
  KT_RAFT_LEADER,
};

enum kt_raft_msg_type {
  KT_RAFT_MSG_APP = 1,         /* leader → follower: entries after (log_term, index), commit */
  KT_RAFT_MSG_APP_RESP,        /* ack: index = last matching index; reject: hint, log_term */
  KT_RAFT_MSG_VOTE,            /* candidate: term, last (log_term, index); context 1 = transfer */
  KT_RAFT_MSG_VOTE_RESP,       /* reject = refused */
  KT_RAFT_MSG_PREVOTE,         /* like VOTE at term+1, changes nobody's term */
  KT_RAFT_MSG_PREVOTE_RESP,    /* */
  KT_RAFT_MSG_HEARTBEAT,       /* commit = min(follower match, leader commit); context = read seq */
  KT_RAFT_MSG_HEARTBEAT_RESP,  /* context echoed */
  KT_RAFT_MSG_PROP,            /* follower → leader: forwarded proposals (entries) */
  KT_RAFT_MSG_READ_INDEX,      /* follower → leader: context = the follower's read ctx */
  KT_RAFT_MSG_READ_INDEX_RESP, /* index = read index, context echoed; reject = not leader */
  KT_RAFT_MSG_TIMEOUT_NOW,     /* leader → transferee: campaign now */
  KT_RAFT_MSG_SNAP,            /* reserved (snapshot install, next session) */
  KT_RAFT_MSG_TYPE_MAX
};

enum kt_raft_entry_type { KT_RAFT_ENTRY_NORMAL = 0, KT_RAFT_ENTRY_CONF = 1 };

/* A membership change, as the node decodes it from a CONF entry. */
enum kt_raft_conf_change {
  KT_RAFT_CONF_ADD_VOTER = 1,
  KT_RAFT_CONF_ADD_LEARNER = 2,
  KT_RAFT_CONF_REMOVE = 3,  /* a voter or a learner */
  KT_RAFT_CONF_PROMOTE = 4, /* learner → voter */
};

#define KT_RAFT_MAX_MEMBERS 64 /* voters + learners */

struct kt_raft_entry {
  uint64_t term, index;
  uint8_t type;
  uint32_t len;
  uint8_t *data; /* len bytes; owned by whoever owns the entry array */
};

struct kt_raft_msg {
  uint8_t type;
  bool reject;
  uint64_t from, to, term;
  uint64_t log_term, index; /* meaning per type, see enum */
  uint64_t commit;
  uint64_t hint; /* APP_RESP reject: the follower's suggested probe index */
  uint64_t context;
  uint32_t n_entries;
  struct kt_raft_entry *entries;
};

struct kt_raft_hard_state {
  uint64_t term, vote, commit;
};

struct kt_raft_read_state {
  uint64_t index;   /* apply up to here, then the read is linearizable */
  uint64_t context; /* the caller's ctx from kt_raft_read_index */
};

enum kt_raft_event_type {
  KT_RAFT_EV_BECAME_FOLLOWER = 1,  /* term, a = leader (0 unknown) */
  KT_RAFT_EV_BECAME_PRE_CANDIDATE, /* term */
  KT_RAFT_EV_BECAME_CANDIDATE,     /* term */
  KT_RAFT_EV_BECAME_LEADER,        /* term, a = last index */
  KT_RAFT_EV_COMMIT,               /* term, a = new commit index */
  KT_RAFT_EV_VOTE_GRANTED,         /* term, a = candidate (sent when persisted) */
  KT_RAFT_EV_TRUNCATE,             /* term, a = first index removed */
  KT_RAFT_EV_STEP_DOWN_NO_QUORUM,  /* term (check-quorum) */
  KT_RAFT_EV_PROBE,                /* term, a = peer, b = next index (peer rejected) */
  KT_RAFT_EV_REPLICATE,            /* term, a = peer, b = match */
  KT_RAFT_EV_TRANSFER,             /* term, a = transferee */
  KT_RAFT_EV_NEED_SNAPSHOT,        /* term, a = peer, b = its next index (compacted) */
  KT_RAFT_EV_LEADER_KNOWN,         /* term, a = leader (a follower heard from it) */
  KT_RAFT_EV_CONF_CHANGE,          /* term, a = member id, b = enum kt_raft_conf_change */
  KT_RAFT_EV_STEP_DOWN_REMOVED,    /* term (no longer a voter of the applied config) */
};

/* A trace event: what raft would have logged. */
struct kt_raft_event {
  uint8_t type;
  uint64_t term, a, b;
};
/* "became leader term=3 last=7". Returns buf. */
const char *kt_raft_event_str(const struct kt_raft_event *ev, char *buf, size_t n);

/* One batch of work. Every pointer is raft's and valid until kt_raft_advance. */
struct kt_raft_ready {
  struct kt_raft_hard_state hs;  /* hs.commit may lag: it covers only entries
                                    handed out in earlier batches */
  bool hs_changed;               /* persist hs (together with or after entries) */
  struct kt_raft_entry *entries; /* append to the log: may start below the last
                                    persisted index, which truncates from there */
  size_t n_entries;
  struct kt_raft_msg *msgs;
  size_t n_msgs;
  struct kt_raft_entry *committed; /* to apply, in order */
  size_t n_committed;
  struct kt_raft_read_state *reads;
  size_t n_reads;
  struct kt_raft_event *events;
  size_t n_events;
  enum kt_raft_role role; /* soft state, for the node's status */
  uint64_t leader;
};

struct kt_raft_config {
  uint64_t id; /* this member, non-zero; need not be in voters or learners */
  /* The configuration (of the snapshot, on a restart). Voters and learners
   * are non-zero, disjoint, without duplicates, at most KT_RAFT_MAX_MEMBERS
   * in all. n_voters may be 0 (a member that joins an existing cluster, or
   * bootstraps from CONF entries in its log): a member campaigns only while
   * it is a voter of its applied configuration. */
  const uint64_t *voters;
  size_t n_voters;
  const uint64_t *learners;
  size_t n_learners;
  uint32_t election_ticks;     /* > heartbeat_ticks; randomized in [e, 2e) */
  uint32_t heartbeat_ticks;    /* >= 1 */
  uint32_t max_msg_bytes;      /* entry bytes per APP (at least one entry goes) */
  uint32_t max_inflight_msgs;  /* per follower in replicate state */
  uint64_t max_inflight_bytes; /* per follower; 0 = no byte limit */
  bool pre_vote, check_quorum;
  uint64_t seed; /* election timeout randomness */
  /* Restart state: what the node read back from its disk. Entries must be
   * contiguous from first_index with terms <= hs.term, else KT_EINVAL. */
  struct kt_raft_hard_state hs;
  const struct kt_raft_entry *entries; /* contiguous, copied */
  size_t n_entries;
  uint64_t first_index;    /* index of entries[0] or, if none, last compacted + 1; 0 = 1 */
  uint64_t compacted_term; /* term of first_index - 1 (0 if first_index <= 1) */
  uint64_t applied;        /* already applied by the node (e.g. from a snapshot) */
};

struct kt_raft;

/* Creates a member from cfg (a fresh one, or a restart from persisted state).
 * Returns KT_EINVAL on a bad config; *out owned by the caller (kt_raft_free). */
int kt_raft_new(const struct kt_raft_config *cfg, struct kt_raft **out);
void kt_raft_free(struct kt_raft *r);

/* One unit of time: election and heartbeat timers. */
void kt_raft_tick(struct kt_raft *r);
/* An incoming message (decoded from a peer). Messages not addressed to this
 * member or of an unknown type are ignored. m and its entries are copied. */
void kt_raft_step(struct kt_raft *r, const struct kt_raft_msg *m);
/* Appends data as a new entry (leader) or forwards it to the leader (follower).
 * *index gets the entry's index on the leader, 0 when forwarded (the caller
 * matches its own request ids in applied data). Errors: KT_ENOLEADER (no known
 * leader), KT_EBUSY (leadership transfer in progress). Data is copied. */
int kt_raft_propose(struct kt_raft *r, const void *data, uint32_t len, uint64_t *index);
/* Like kt_raft_propose, for a membership change: a CONF entry whose data is
 * the node's encoding of the change (opaque here). One change in flight:
 * KT_EBUSY while a CONF entry in the log is above the applied index (on a
 * new leader: anything up to its last index at election). A follower
 * forwards it; a leader that gets a forwarded CONF entry while one is
 * pending appends it as a NORMAL entry with the same data (the node sees
 * its request applied as NORMAL and answers "a membership change is
 * already in progress"). Errors: KT_ENOLEADER, KT_EBUSY (change pending or
 * leadership transfer). Data is copied. */
int kt_raft_propose_conf(struct kt_raft *r, const void *data, uint32_t len, uint64_t *index);
/* The node applies a committed CONF entry (in log order, as it applies
 * rd.committed — allowed between kt_raft_ready and kt_raft_advance, and
 * when replaying a restart's log) and tells raft the change it decoded.
 * Returns 0, or KT_EINVAL with nothing changed if the change is invalid for
 * the current configuration: id 0, adding a member already present (voter
 * or learner), removing or promoting an absent one, promoting a voter,
 * removing the last voter, more than KT_RAFT_MAX_MEMBERS. Deterministic:
 * every member applies the same changes in the same order with the same
 * results. Effects (at kt_raft_advance if called inside a batch): the
 * leader probes an added member from its last index + 1 and forgets a
 * removed one, and may commit at once on a smaller quorum; a member no
 * longer a voter (a removed leader or candidate) becomes a follower with no
 * known leader and never campaigns unless added again. Emits
 * KT_RAFT_EV_CONF_CHANGE (and KT_RAFT_EV_STEP_DOWN_REMOVED). */
int kt_raft_apply_conf(struct kt_raft *r, uint8_t change, uint64_t id);

/* Asks for a linearizable read point; a later ready carries a read state with
 * this ctx once it is safe (on the leader after a heartbeat round confirms
 * leadership, on a follower after the leader answers). Lost messages mean no
 * answer: the caller times out. Errors: KT_ENOLEADER. */
int kt_raft_read_index(struct kt_raft *r, uint64_t ctx);
/* Leader: hands leadership to voter `to` (TimeoutNow once it has caught up);
 * abandoned after an election timeout (or when `to` is removed). Errors:
 * KT_EINVAL (self, a learner, not a member), KT_ENOLEADER. */
int kt_raft_transfer_leader(struct kt_raft *r, uint64_t to);

bool kt_raft_has_ready(const struct kt_raft *r);
/* Fills rd (always succeeds; it may be empty). See the data flow above. */
void kt_raft_ready(struct kt_raft *r, struct kt_raft_ready *rd);
void kt_raft_advance(struct kt_raft *r);

/* The node made entries up to (term, index) durable (the last entry of a
 * batch it wrote). Ignored if the log no longer has that entry. */
void kt_raft_persisted(struct kt_raft *r, uint64_t term, uint64_t index);
/* The node made hs durable. */
void kt_raft_hs_persisted(struct kt_raft *r, const struct kt_raft_hard_state *hs);

/* Log storage: entries are kept in memory from first_index on. Drops entries
 * up to and including index (index <= applied). The node calls this after
 * it saved a snapshot at index. Errors: KT_EINVAL. */
int kt_raft_compact(struct kt_raft *r, uint64_t index);

/* Snapshot install, follower side: the node made a snapshot covering
 * `index` (entry term `term`) durable, restored its state machine from it and
 * restarted its log after it (WAL reset). The log is dropped; commit,
 * persisted and applied become index; the configuration becomes the
 * snapshot's (voters, learners: rules as in kt_raft_config); the leader
 * hears an append ack at index (so it replicates from index + 1). Errors:
 * KT_EINVAL (term 0 or beyond the current term, a bad configuration; or
 * stale: index not past commit — then the leader is told our commit index
 * instead, and nothing else changes). */
int kt_raft_install_snapshot(struct kt_raft *r, uint64_t index, uint64_t term,
                             const uint64_t *voters, size_t n_voters, const uint64_t *learners,
                             size_t n_learners);
/* Leader side: the node's transfer of a snapshot to peer failed (etcd's
 * ReportSnapshot failure): it is probed again, which asks for a snapshot
 * again if still needed (KT_RAFT_EV_NEED_SNAPSHOT). A follower that does not
 * ack for 3 election timeouts after NEED_SNAPSHOT is probed again too (a
 * transfer still running is not restarted: the node dedups). */
void kt_raft_report_snapshot_failed(struct kt_raft *r, uint64_t peer);

/* Read-only accessors (for the node's status and for tests). */
enum kt_raft_role kt_raft_role(const struct kt_raft *r);
uint64_t kt_raft_term(const struct kt_raft *r);
uint64_t kt_raft_vote(const struct kt_raft *r);
uint64_t kt_raft_leader(const struct kt_raft *r);
uint64_t kt_raft_commit(const struct kt_raft *r);
uint64_t kt_raft_applied(const struct kt_raft *r);
uint64_t kt_raft_first_index(const struct kt_raft *r);
uint64_t kt_raft_last_index(const struct kt_raft *r);
uint64_t kt_raft_persisted_index(const struct kt_raft *r);
/* Term of the entry at index; 0 if not in the log (compacted or beyond). */
uint64_t kt_raft_term_at(const struct kt_raft *r, uint64_t index);
/* The entry at index or NULL; valid until the next state-changing call. */
const struct kt_raft_entry *kt_raft_entry_at(const struct kt_raft *r, uint64_t index);

/* Membership, for the node's status and for tests. */
struct kt_raft_member_state {
  uint64_t id;
  bool learner;
  uint64_t match, next; /* leader only (0 elsewhere); self: match = its persisted index */
  bool recent_active;   /* leader only: heard from within the election timeout */
};
/* Voters then learners, in configuration order (a promoted learner becomes
 * the last voter). Fills at most cap; returns how many members there are. */
size_t kt_raft_members(const struct kt_raft *r, struct kt_raft_member_state *out, size_t cap);
bool kt_raft_is_voter(const struct kt_raft *r, uint64_t id);
bool kt_raft_is_learner(const struct kt_raft *r, uint64_t id);
/* kt_raft_propose_conf would say KT_EBUSY (a change not applied yet). */
bool kt_raft_conf_pending(const struct kt_raft *r);

const char *kt_raft_role_name(enum kt_raft_role role);
const char *kt_raft_msg_type_name(int type);

/* Fault injection for the simulator's own test (never set in production):
 * 1 = ack appends before they are persisted, 2 = leader commits without a
 * quorum (its own persisted index), 3 = grant votes before persisting,
 * 4 = the leader answers ReadIndex without a heartbeat round, 5 = learners
 * count toward the commit quorum, 6 = no limit of one configuration change
 * in flight, 7 = members outside the voters campaign. */
extern int kt_raft_test_bug;

/* ---- Wire format of a message (all integers big-endian) ----
 *
 *   off  size
 *   0    1    version = 1
 *   1    1    type (1..KT_RAFT_MSG_TYPE_MAX-1)
 *   2    1    flags: bit 0 = reject; other bits must be 0
 *   3    1    reserved, 0
 *   4    64   from, to, term, log_term, index, commit, hint, context (u64 each)
 *   68   4    n_entries
 *   72   ...  n_entries × { u64 term, u64 index, u8 type, u32 len, len bytes }
 *
 * Valid iff: the version and flags are as above, every entry lies within the
 * input, and the input ends exactly after the last entry. */
#define KT_RAFT_MSG_HEADER_BYTES 72
#define KT_RAFT_ENTRY_HEADER_BYTES 21
/* Appends m's encoding to out. */
void kt_raft_msg_encode(const struct kt_raft_msg *m, struct kt_buf *out);
/* m's first KT_RAFT_MSG_HEADER_BYTES: kt_raft_msg_encode's output is this
 * header followed by kt_raft_ents_enc_get's bytes for m's entries. */
void kt_raft_msg_encode_header(const struct kt_raft_msg *m, uint8_t h[KT_RAFT_MSG_HEADER_BYTES]);

/* The entries of one ready batch's messages, encoded once: the appends to
 * every follower that gets the same entries (or a consecutive run of them)
 * share one encoding. An entry counts as the same when its index, term,
 * type, len and data address are; so the cache is valid only while the
 * entries' memory does not change: kt_raft_ents_enc_reset before each
 * batch's messages (and before kt_raft_advance frees them). Zero-init. */
struct kt_raft_ents_enc {
  const struct kt_raft_entry *ents; /* what bytes encodes (borrowed), n of them */
  uint32_t n;
  struct kt_buf bytes;
  size_t *off; /* off[i]: where entry i starts in bytes; off[n]: the end */
  size_t off_cap;
  uint64_t hits, misses; /* served from the cache / encoded */
};
void kt_raft_ents_enc_reset(struct kt_raft_ents_enc *c);
void kt_raft_ents_enc_free(struct kt_raft_ents_enc *c);
/* Sets *p, *len to the encoding of ents[0..n) (NULL, 0 for none): from
 * the cache when every entry is one it holds, else encoded now (and cached
 * if the indexes are consecutive). *p is valid until the next call, reset
 * or free. */
void kt_raft_ents_enc_get(struct kt_raft_ents_enc *c, const struct kt_raft_entry *ents, uint32_t n,
                          const uint8_t **p, size_t *len);
/* Decodes p[0..n). Entries are allocated from arena and their data points
 * into p (valid while p and the arena live). Errors: KT_EPROTO (e filled). */
int kt_raft_msg_decode(const uint8_t *p, size_t n, struct kt_arena *arena, struct kt_raft_msg *m,
                       struct kt_err *e);

#endif
