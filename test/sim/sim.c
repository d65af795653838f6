/* test/sim/sim.c — deterministic simulation of a ketch cluster: each member
 * the real core (core/raft + the state machine of core/apply over core/mvcc,
 * core/lease and core/watch + the WAL record codec of wal/) over a simulated
 * clock, network and disk, with clients whose history is checked for
 * linearizability (test/sim/linz.h), watch clients checked against the
 * committed history, and lease clients checked against what the leaders
 * promised.
 *
 * Everything is driven by one seeded PRNG, so a seed replays exactly:
 *   - time: 10 units per tick (a tick = 100 ms of the state machine's clock);
 *     every member ticks once per 10 units
 *   - network: each message is encoded to bytes (kt_raft_msg_encode) and
 *     decoded on delivery; dropped, duplicated (never a forwarded proposal,
 *     MSG_PROP: the member would apply a client's request twice — entries
 *     carry no dedup key — and the node's TCP links neither duplicate nor
 *     resend), delayed (which reorders) and cut by partitions, one-way too,
 *     that form and heal at random (all at once, or one member at a time:
 *     "swizzle", so partitions heal in random order)
 *   - disk: a ready batch's entries + hard state become durable after a random
 *     delay, in order; only then is raft told (kt_raft_persisted). The disk
 *     is WAL bytes: each completed write appends its records (REC_HARDSTATE
 *     term|vote|commit first, then one REC_ENTRY term|type|data per entry,
 *     8-aligned, CRC32C-chained: kt_wal_encode_record), as core/node.c
 *     persist_ready. A crash first checks that the bytes decode to exactly
 *     what raft was told is durable, then (half the time) appends a prefix of
 *     the write in progress cut at a random byte, and loses the rest; the
 *     restart decodes the bytes (kt_wal_scan_segment: the first invalid
 *     record ends the log, the tail is cut off) and rebuilds raft's restart
 *     state by the node's replay rules (records the snapshot covers skipped,
 *     a rewritten index replaces the log from there, a gap is an error).
 *     Purging after a snapshot and resetting at an install rewrite the WAL as
 *     one new segment chained to the old (the node drops whole segments).
 *   - the state machine: every committed NORMAL entry is origin member u64 |
 *     proposal seq u64 | a kt_req body (kt_proto_encode_req_body), as the
 *     node's; each member decodes it and applies it with kt_sm_apply to its
 *     own kt_mvcc store, kt_lease_mgr and kt_watch_hub (the store's event
 *     hook calls kt_sm_on_event, as the node's on_store_event; the first
 *     member to apply an index also records its events in the global event
 *     log: the committed history's events by revision, the ground truth of
 *     the watches). CONF entries ('C' | change | id) are applied by the
 *     sim's membership model below. The leader now and then proposes COMPACT
 *     a few revisions back (revisions do not move); every member runs
 *     physical compaction steps.
 *   - snapshots: each member snapshots now and then at its applied index —
 *     the store (kt_mvcc_iter records, revision, compact revision), the
 *     leases (id, granted TTL) and the lease id generator — compacts its
 *     in-memory log (keeping a small random tail) and purges its disk; a
 *     leader asked for a snapshot (KT_RAFT_EV_NEED_SNAPSHOT) sends its own
 *     (delayed, dropped like any message: then reported failed), and the
 *     follower installs it: state machine loaded as the node loads one
 *     (records restored, leases restored, keys re-attached to the lease
 *     their newest record names), WAL reset, kt_raft_install_snapshot. A
 *     restart loads the member's own snapshot, then raft hands out the rest.
 *     A snapshot carries the configuration at its index.
 *   - clients: 3..5 per seed (300 requests in all), each bound to a random
 *     member, one request at a time: puts (prev_kv at random), deletes,
 *     compare-and-swap txns (value / version / mod revision as last read,
 *     then put + get, else get), linearizable gets through the node's
 *     read path (core/reads.h, as core/node.c: a get waits in the defer
 *     queue until its member serves — kt_reads_serving —, joins the open
 *     batch, the batch asks raft at the end of the member's turn, and the
 *     get is answered from the member's store once kt_reads_ready; two
 *     election timeouts without that fail it) and serializable gets (its
 *     store, at once), on the keys "a".."d" with
 *     unique values (revisions as the checker sees them: the lease
 *     workload's revisions taken out, see linz_rev). A write is answered
 *     when the member that proposed it applies its own entry (origin, seq),
 *     with kt_sm_apply's result or error (an error: nothing happened); a
 *     proposal made on the leader must then sit at the index and term it
 *     got (raft.h's rule, checked). Its outcome is unknown when the member
 *     crashes or installs a snapshot,
 *     when another entry is applied at its index, or after 150 ticks — never
 *     a success. A linearizable get whose member crashes is sent again to
 *     that member once it restarts (half the time, as libketch resends
 *     reads after a reconnect; else the client gives up), and a get for a
 *     member that is down half the time waits for it (as ketch-grpc holds
 *     a request until its member accepts connections): the restarted
 *     member, with an old log, holds reads from before its crash. At the end, an unknown write
 * whose entry never reached the committed log is recorded as failed (it never took effect; the
 *     simulator knows, and the search shrinks); its result is never
 *     invented. A refused proposal or read (no leader) fails the request
 *     and the client moves to another member. Calls and returns carry the
 *     simulated clock.
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
 *   - watches: 4 watch clients at a time (40 in all), each on a random
 *     member's hub (kt_watch_create, as core/node_watch.c) with a random key,
 *     prefix, range or from-key, from now, from an older revision or from a
 *     compacted one, with no_put / no_delete / prev_kv now and then; some are
 *     slow (max_pending 1..4, take a revision or two every few ticks), so
 *     the hub moves them aside and catches them up from history. Every tick
 *     each hub runs kt_watch_step (a small budget: history passes take
 *     several steps), and each client takes as the node's drain_one does
 *     (kt_watch_take until nothing is ready; a revision never split; a
 *     start beyond the member's revision + 1 served from now, events below
 *     it dropped). A client whose member crashes (its hub dies with it) or
 *     is removed, or that gives up (its member knows no leader; or just
 *     reconnects), resumes on a random member from the revision after the
 *     last it got (as libketch). A snapshot install keeps the hub
 *     (kt_watch_hub_set_store, as the node): its watchers continue.
 *   - leases: 2 lease clients each grant a lease (their own ids, TTL 2..5 s,
 *     LEASE_GRANT through raft), wait for their member to apply it (its
 *     answer), put keys "l0".."l7" with it, keep it alive every TTL/3 for up
 *     to three TTLs, then walk away and let it expire. A keep-alive is
 *     answered by the member if its lease manager is leader, else forwarded
 *     to the leader the member knows (delayed, dropped, cut like a message;
 *     the answer counts where the leader handles it), as core/node_lease.c.
 *     After each ready a leader that serves (applied its first index of the
 *     term) promotes its lease manager (kt_lease_promote, extended by an
 *     election timeout, 1000 ms), any other demotes it; every tick each
 *     serving leader proposes LEASE_REVOKE for kt_lease_expired's leases
 *     (kt_node_lease_tick). The lease keys are disjoint from "a".."d", and
 *     the checker's revisions leave the lease revisions out (linz_rev): the
 *     history projected on "a".."d", revisions renumbered, must be
 *     linearizable, and revokes need no place in it.
 * Checks, on every step: at most one leader per term; log matching; leader
 * completeness; committed entries never change (every (index, term, data)
 * any member commits is recorded globally and compared); every member
 * applies the same sequence; every member's state machine after applying
 * index i (store hash kt_mvcc_hash + leases with their keys + lease id
 * generator) equals the first one's, and so does a loaded snapshot's; a
 * read's index covers every commit that happened before the read was
 * asked; every member that applies the CONF entry at index i has the same
 * configuration after it (and snapshots carry it); only a voter of its own
 * configuration, never a removed member, becomes leader; at each crash the
 * WAL decodes to what raft was told is durable.
 * Watches: every event a client takes is the next event of its range (and
 * filters) in the global log after the last one it got (across resumes on
 * other members too): no gap, no duplicate, in order, equal kv and prev_kv
 * (present iff asked and the key was live); after each take the last
 * revision's events have all come (a txn's and a revoke's events arrive
 * together); a client that asked for a compacted revision (below the
 * member's compaction revision C: etcd's rule) gets a cancel, never an
 * event; one that asks for C itself is served (without C's deletes, which
 * compaction removed); a cancel names a compact revision the member has and
 * one above the revision the client needs (on a lagging member served from
 * now the hub's own start may be it).
 * Leases: a revoke's deletes, on every member, are exactly the lease's keys
 * at ONE new revision (events counted on the store's hook). The leader's
 * rule (core/lease.c), checked when it proposes an expiry: a lease expires a
 * TTL after its last renewal by this leader in this term of service (a
 * renewal sets now + TTL, replacing the extension, as etcd's Renew); with
 * none, a TTL after its grant if applied while this leader served; else a
 * TTL plus an election timeout after this leader's promotion. The client's
 * view, checked when a revoke is first applied: not before a TTL has passed
 * since the grant was first applied or since the last renewal by the newest
 * leader (no later term had a leader). A renewal answered by a deposed
 * leader (the node answers keep-alives without confirming its leadership)
 * is honored only through the new leader's extension, which covers a
 * deposed leader until check_quorum makes it step down (etcd-io/etcd#4778):
 * with check_quorum (as the node runs) a revoke before such a renewal's TTL
 * ran out fails the seed; without it (a quarter of the seeds) it is only
 * counted (lease_stale_unhonored): a deposed leader may then answer
 * keep-alives for as long as it is cut off (etcd now confirms leadership
 * before renewing: ensureLeadership, etcd-io/etcd#15247). TTLs are counted
 * from the leader's renewal, not from when the client hears it.
 * At the end the network
 * heals, removed members are shut down, and the cluster must make progress
 * (a proposal — a delete of a key nobody writes, which moves no revision —
 * applied on every member of the leader's configuration); then one
 * linearizable get per key on the leader (asked again of a new leader if
 * an election loses it); lease liveness: with nobody keeping leases alive,
 * every lease is revoked on every member of the leader's configuration
 * within 400 ticks; watch liveness: every watch client (moved to the
 * leader's configuration) has every event of its range up to its member's
 * revision within 200 ticks, and none that asked for a compacted revision
 * is left uncancelled; and kt_linz_check on the whole history: a
 * VIOLATION fails the seed with the checker's explanation, and so does
 * GAVE_UP (counted; the history is bounded so that it does not happen).
 *
 * Injected member bugs (opts.member_bug, above raft, invisible to the raft
 * checks): linearizable gets served from the local store without ReadIndex;
 * a write answered by whatever entry applies at its index (an empty leader
 * entry or another request's), its term and seq unchecked; now and then an
 * event not published to the watch hub, or published twice (found by the
 * watch check); a keep-alive answered without renewing, a new leader that
 * does not extend leases (found by the lease checks).
 *
 * Not simulated (yet): clients' own revokes, server-chosen lease ids, TTL
 * queries, the answer of a forwarded keep-alive travelling back, watch
 * progress notifications and fragments, watch cancels by the client.
 *
 * Included by test/unit/raft_sim_test.c (so `make test` builds and runs it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/apply.h"
#include "../../core/auth.h"
#include "../../core/raft.h"
#include "../../core/reads.h"
#include "../../net/proto.h"
#include "../../wal/wal.h"
#include "linz.c"

#define SIM_MAX_N 16 /* member ids 1..SIM_MAX_N: the first n, then spares */
#define SIM_KEYS 4   /* the linearizability-checked keys "a".."d" */
#define SIM_MAX_CLIENTS 8
#define DATA_HDR 16    /* a NORMAL entry: origin member u64 | proposal seq u64 | request body */
#define MS_PER_UNIT 10 /* a tick (10 units) is 100 ms: an election timeout ~1 s */

struct sim_opts {
  uint64_t seed;
  int n;              /* members at bootstrap: 3 or 5 */
  int ticks;          /* chaotic phase */
  bool crashes;       /* crash and restart members */
  uint32_t crash_x10; /* per-tick crash chance in tenths of a percent; 0 = 8 */
  bool conf_changes;  /* random membership changes between 3 and 5 voters */
  uint32_t conf_x10;  /* per-tick chance of proposing one, tenths of a percent; 0 = 25 */
  bool verbose;       /* print the trace */
  int clients;        /* concurrent clients; 0 = 3..5 at random */
  int max_ops;        /* client operations per seed (the linz history); 0 = 300 */
  int member_bug;     /* injected member (not raft) bug, see enum sim_member_bug */
};

#define SIM_WATCHES 4    /* watch clients at a time */
#define SIM_LESSEES 2    /* lease clients */
#define ELECTION_MS 1000 /* election_ticks (10) x 100 ms: a new leader's lease extension */

/* Bugs injected into the simulated member (above raft), which only the
 * linearizability checker can see. */
enum sim_member_bug {
  SIM_BUG_LOCAL_READ = 1,     /* linearizable gets answered from the local store, no ReadIndex */
  SIM_BUG_MATCH_BY_INDEX = 2, /* a write answered by whatever entry applies at its index */
  SIM_BUG_WATCH_SKIP = 3,     /* now and then an event never reaches the watch hub */
  SIM_BUG_WATCH_DUP = 4,      /* now and then an event reaches the watch hub twice */
  SIM_BUG_LEASE_NO_RENEW = 5, /* a keep-alive answered by the leader without renewing */
  SIM_BUG_LEASE_NO_EXTEND = 6 /* a new leader gives leases no election timeout extra */
};

struct sim_stats {
  uint64_t committed, elections, crashes, msgs, dropped, reads, transfers;
  uint64_t snapshots_sent, installs;
  uint64_t conf_proposed, conf_applied, conf_invalid, conf_as_normal, leader_removed;
  uint64_t applied_reqs, hashes_checked, compactions, wal_torn_cut;
  uint64_t auth_proposed, auth_applied;
  uint64_t ops, ops_ok, ops_failed, ops_unknown, ops_never_committed, sreads, linz_steps,
      linz_gave_up;
  uint64_t watch_created, watch_resumed, watch_events, watch_compacted, watch_moved_aside;
  uint64_t leases_granted, lease_renewals, lease_renewals_fwd, lease_stale_renewals,
      lease_stale_unhonored, lease_revoked, lease_keys_revoked;
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

/* A member's state machine as a snapshot holds it (immutable once made,
 * shared by reference between a member's disk and messages in flight): every
 * retained store revision in kt_mvcc_iter order, the store's revisions, the
 * leases (id, granted TTL) and the lease id generator's state. */
struct sm_snap {
  int refs;
  int64_t revision, compact_revision;
  struct kt_kvrev *recs;
  size_t n_recs, cap_recs;
  int64_t (*leases)[2];
  size_t n_leases, cap_leases;
  uint64_t id_state[4];
  struct kt_buf auth; /* kt_auth_save */
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
  /* the same disk as WAL bytes: one segment, rewritten at a purge or reset */
  struct kt_buf wal;
  uint32_t wal_crc; /* of the last record */
  uint64_t wal_seq;
  /* state machine: applied sequence is checked against the global table */
  uint64_t applied, checked_commit;
  struct sim_conf conf, snap_conf; /* applied configuration; the snapshot's */
  struct kt_mvcc *store;           /* the real state machine (core/apply.h) */
  struct kt_lease_mgr *leases;
  struct kt_auth *auth; /* the real auth store (core/auth.h): replicated state too */
  struct kt_sm sm;
  struct sm_snap *snap_sm; /* the disk snapshot's state machine (NULL: empty) */
  bool started;            /* spares start when first proposed */
  bool removed;            /* applied its own removal: stays out */
  bool gone;               /* removed and stopped for good */
  struct sim *sim;
  struct kt_watch_hub *hub; /* the real watch hub over the store (kt_sm.watches) */
  uint64_t lead_index;      /* BECAME_LEADER's index: leases promoted once applied */
  bool serving;             /* kt_reads_serving after its last ready (as the node) */
  struct kt_reads rq;       /* its linearizable reads' batches, this life (as the node) */
  int64_t promote_ms;       /* when its lease manager last became leader */
  /* events the store published during the current apply (revoke check) */
  uint32_t ev_count, ev_puts;
  int64_t ev_lo, ev_hi;
};

struct net_msg {
  uint64_t at, seq;
  uint64_t to, from;
  uint64_t snap_index, snap_term; /* a snapshot delivery when snap_index > 0 */
  struct sm_snap *sm;             /* its state machine (a reference) */
  uint8_t *p;
  size_t n;
};

struct gentry {
  uint64_t term, commit_term;
  uint64_t sm_hash; /* the state machine after applying it (first member to) */
  bool hashed;
  uint32_t len;
  uint8_t *data;
};

struct pending_read { /* a read batch asked of raft: its index must cover min_index */
  uint64_t member, ctx, min_index;
};

/* A simulated client: one request at a time, bound to one member, moving
 * to another after a failure or an unknown outcome. */
enum { CL_IDLE, CL_WRITE, CL_READ };
enum { CL_NONE, CL_OK, CL_FAILED, CL_UNKNOWN }; /* the last op's outcome */
/* Where a linearizable read is, as the node holds it: on its way to a
 * member that is down (the client connects again, then resends it, as
 * libketch and ketch-grpc do), waiting for the member to serve (the node's
 * defer queue), in a read batch waiting for its read index. */
enum read_phase { R_CONNECTING = 1, R_DEFERRED, R_BATCH };
struct sim_client {
  uint64_t member;
  int state, outcome;
  uint64_t next_at, deadline; /* idle until; give up (unknown) at */
  uint32_t lid;               /* the op in the linz history */
  uint8_t kind;               /* KT_LINZ_* */
  bool prev_kv;
  uint64_t seq;         /* write: the proposal seq in its entry's header */
  uint64_t index, term; /* write proposed on a leader: its index and term (0: forwarded) */
  int rphase;           /* linearizable read: enum read_phase */
  uint64_t batch;       /* R_BATCH: the member's read batch it joined (core/reads.h) */
  uint64_t rsince;      /* R_DEFERRED / R_BATCH: since when (the node's 2 election timeouts) */
  int key;
  /* what the client last read of each key, for compare-and-swap */
  struct {
    bool present;
    int64_t mod, lmod, version; /* lmod: mod as the checker counts (linz_rev) */
    char value[32];
  } seen[SIM_KEYS];
};

struct conf_at {
  uint64_t index;
  struct sim_conf c;
};

/* One event of the committed history, as the first member to apply its
 * entry published it (bytes in sim.ev_arena). */
struct gev {
  uint8_t type;
  bool has_prev;
  struct kt_kv kv, prev;
};

/* A watch client: attached to one member's hub, resuming on another from
 * the revision after the last one it got (as libketch). */
struct sim_watch {
  bool active;
  uint64_t member, hub_id; /* hub_id 0: detached (resumes at the next tick) */
  const char *key, *end;   /* end NULL: one key; "" with en 1: from key on */
  uint32_t kn, en;
  bool no_put, no_del, prev_kv, slow;
  uint32_t max_pending;
  int64_t next_rev; /* the first revision it still wants */
  int64_t min_rev;  /* the node's rule on a lagging member: events below dropped */
  bool must_cancel; /* asked for a compacted revision: the next outcome is a cancel */
  size_t pos;       /* next event of the global log to consider */
  uint64_t next_at; /* slow: takes now and then; inactive: starts again */
};

/* A lease client: grants a lease (its own id), puts keys with it, keeps it
 * alive for a while through its member, then walks away. */
enum { LS_IDLE, LS_GRANTING, LS_HOLDING };
struct sim_lessee {
  uint64_t member;
  int state;
  int64_t id;
  uint64_t next_at, deadline, keep_until, next_ka;
};

/* What the leaders promised of a lease (ids LEASE_ID0 + k). */
struct lease_truth {
  int64_t ttl_s;
  int64_t granted_ms; /* its grant first applied (0: never) */
  int64_t honored_ms; /* no revoke may take effect before */
  int64_t stale_ms;   /* keep-alives answered by a stale leader reach this */
  uint64_t stale_by;  /* ... the last of them: by, when */
  int64_t stale_at;
  uint64_t renew_by; /* the last renewal: by, when */
  int64_t renew_ms;
  /* by member: its last renewal, and its promote time then (which term of service) */
  int64_t by_ms[SIM_MAX_N + 1], by_epoch[SIM_MAX_N + 1];
  bool revoked;
};

/* A keep-alive a follower forwarded to the leader (the node's FWD_REQ). */
struct fwd_ka {
  uint64_t at, to;
  int64_t id;
  int lessee;
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
  uint64_t next_prop;
  struct sim_stats st;
  char why[6144];
  bool failed;
  /* clients and their history */
  struct sim_client clients[SIM_MAX_CLIENTS + SIM_KEYS]; /* + the final readers */
  int n_clients;
  int ops_called, max_ops;
  struct kt_linz_hist *hist;
  struct unknown_write {
    uint32_t lid;
    uint64_t seq;
  } * unknown_w;
  size_t n_unknown_w, cap_unknown_w;
  uint8_t *seq_committed; /* by proposal seq: its entry is in the committed log */
  size_t seq_cap;
  uint64_t next_seq, next_val;
  struct kt_arena apply_arena;
  struct kt_buf body, body2;
  struct kt_buf enc, enc2, wbytes;
  struct kt_arena arena;
  struct failed_snap *failed_snaps; /* reported at the next unit, outside ready */
  size_t n_failed_snaps, cap_failed_snaps;
  /* the committed history's events (first applier), by revision */
  struct gev *ev;
  size_t evn, evcap;
  struct kt_arena ev_arena;
  int64_t ev_rev;     /* the last revision in ev */
  size_t *rev_off;    /* by revision: its first event in ev */
  int64_t *rev_lease; /* by revision: how many revisions <= it were lease work */
  size_t rev_cap;
  uint64_t ev_index; /* the highest log index some member applied */
  bool first_apply;  /* the member applying now is the first at this index */
  /* watch clients */
  struct sim_watch watches[SIM_WATCHES];
  int watch_creates;
  struct kt_arena warena;
  /* lease clients and what leaders promised */
  struct sim_lessee lessees[SIM_LESSEES];
  struct lease_truth *lt;
  size_t ltn, ltcap;
  struct fwd_ka *fwd;
  size_t fwdn, fwdcap;
  uint64_t top_term; /* the highest term that had a leader */
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

#undef GROW /* linz.c has its own */
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

/* ---- the disk as WAL bytes (wal/wal.h codec, the node's record types) */

enum { REC_ENTRY = 2, REC_HARDSTATE = 3 }; /* as core/node_int.h */
#define ENTRY_HDR 9                        /* REC_ENTRY payload: term u64 | type u8 | data */

/* Appends one record to buf, chained to *crc. */
static void wal_put(struct kt_buf *buf, uint32_t *crc, uint8_t type, uint64_t index,
                    const uint8_t *payload, uint32_t len) {
  size_t size = (size_t)kt_wal_record_bytes(len);
  kt_buf_reserve(buf, size);
  *crc = kt_wal_encode_record(buf->p + buf->len, type, index, payload, len, *crc);
  buf->len += size;
}

static void wal_put_hs(struct kt_buf *buf, uint32_t *crc, uint64_t index,
                       const struct kt_raft_hard_state *hs) {
  uint8_t b[24];
  kt_put_u64be(b, hs->term);
  kt_put_u64be(b + 8, hs->vote);
  kt_put_u64be(b + 16, hs->commit);
  wal_put(buf, crc, REC_HARDSTATE, index, b, sizeof b);
}

static void wal_put_entry(struct kt_buf *buf, struct kt_buf *tmp, uint32_t *crc,
                          const struct kt_raft_entry *e) {
  kt_buf_reset(tmp);
  uint8_t h[ENTRY_HDR];
  kt_put_u64be(h, e->term);
  h[8] = e->type;
  kt_buf_append(tmp, h, sizeof h);
  if (e->len)
    kt_buf_append(tmp, e->data, e->len);
  wal_put(buf, crc, REC_ENTRY, e->index, tmp->p, (uint32_t)tmp->len);
}

/* The WAL becomes one new segment from the disk state (first index
 * dfirst): a hard state record, then the entries. Used at bootstrap, after
 * a snapshot (the node purges whole segments; here the segment is
 * rewritten) and at an install (the node's kt_wal_reset). */
static void wal_rewrite(struct sim *s, struct sim_node *nd) {
  struct kt_wal_seghdr h = {
      .prev_crc = nd->wal_crc, .seq = ++nd->wal_seq, .first_index = nd->dfirst};
  kt_buf_reset(&nd->wal);
  kt_buf_reserve(&nd->wal, KT_WAL_SEG_HDR_BYTES);
  kt_wal_encode_seghdr(&h, nd->wal.p);
  nd->wal.len = KT_WAL_SEG_HDR_BYTES;
  nd->wal_crc = h.crc;
  wal_put_hs(&nd->wal, &nd->wal_crc, nd->dfirst - 1, &nd->hs);
  for (size_t i = 0; i < nd->dn; i++)
    wal_put_entry(&nd->wal, &s->enc2, &nd->wal_crc, &nd->dlog[i]);
}

/* A write's records (hard state first, then its entries) into out, chained
 * from the WAL's last checksum; returns the checksum of the last one. */
static uint32_t wal_encode_write(struct sim *s, struct sim_node *nd, const struct disk_write *w,
                                 struct kt_buf *out) {
  uint32_t crc = nd->wal_crc;
  kt_buf_reset(out);
  uint64_t last = w->n ? w->ents[w->n - 1].index : nd->dfirst + nd->dn - 1;
  wal_put_hs(out, &crc, last, &w->hs);
  for (size_t i = 0; i < w->n; i++)
    wal_put_entry(out, &s->enc2, &crc, &w->ents[i]);
  return crc;
}

/* Restart state decoded from the WAL, by the node's replay rules
 * (core/node.c replay_rec): the last hard state; entries after the
 * snapshot, a rewritten index replacing the log from there, a gap an error. */
struct wal_replay {
  uint64_t snap_index;
  struct kt_raft_hard_state hs;
  bool have_hs;
  struct kt_raft_entry *ents;
  size_t n, cap;
  char err[160];
};

static int wal_replay_rec(void *arg, const struct kt_wal_rec *rec) {
  struct wal_replay *r = arg;
  if (rec->type == REC_HARDSTATE) {
    if (rec->len != 24) {
      snprintf(r->err, sizeof r->err, "hard state record of %u bytes", rec->len);
      return 1;
    }
    r->hs = (struct kt_raft_hard_state){kt_get_u64be(rec->payload), kt_get_u64be(rec->payload + 8),
                                        kt_get_u64be(rec->payload + 16)};
    r->have_hs = true;
    return 0;
  }
  if (rec->type != REC_ENTRY || rec->len < ENTRY_HDR) {
    snprintf(r->err, sizeof r->err, "record type %u of %u bytes at index %llu", rec->type, rec->len,
             (unsigned long long)rec->index);
    return 1;
  }
  if (rec->index <= r->snap_index)
    return 0;
  uint64_t first = r->snap_index + 1;
  if (rec->index > first + r->n) {
    snprintf(r->err, sizeof r->err, "entry %llu follows %llu: entries are missing",
             (unsigned long long)rec->index, (unsigned long long)(first + r->n - 1));
    return 1;
  }
  while (r->n > rec->index - first)
    free(r->ents[--r->n].data);
  GROW(r->ents, r->n, r->cap);
  uint32_t dlen = rec->len - ENTRY_HDR;
  struct kt_raft_entry e = {kt_get_u64be(rec->payload), rec->index, rec->payload[8], dlen, NULL};
  copy_entry(&r->ents[r->n++], &(struct kt_raft_entry){e.term, e.index, e.type, dlen,
                                                       (uint8_t *)rec->payload + ENTRY_HDR});
  return 0;
}

static void wal_replay_free(struct wal_replay *r) {
  for (size_t i = 0; i < r->n; i++)
    free(r->ents[i].data);
  free(r->ents);
}

/* Decodes nd's WAL (kt_wal_scan_segment: every record checked and chained,
 * cut at the first invalid one). A torn tail (only ever at the end: the
 * simulated disk tears, it does not rot) is cut off the bytes. Returns 0,
 * or -1 with the sim failed. */
static int wal_decode(struct sim *s, struct sim_node *nd, struct wal_replay *r, bool cut) {
  *r = (struct wal_replay){.snap_index = nd->snap_index};
  struct kt_wal_scan sc;
  int rc = kt_wal_scan_segment(nd->wal.p, nd->wal.len, &sc, wal_replay_rec, r);
  if (rc || sc.status == KT_WAL_SCAN_CORRUPT || sc.status == KT_WAL_SCAN_BADHDR || !r->have_hs) {
    sim_fail(s, "n%llu: WAL unreadable: %s (status %d at %llu%s)", (unsigned long long)nd->id,
             rc       ? r->err
             : sc.why ? sc.why
                      : "",
             (int)sc.status, (unsigned long long)sc.bad_off, r->have_hs ? "" : ", no hard state");
    wal_replay_free(r);
    return -1;
  }
  if (cut && nd->wal.len > sc.end_off) { /* a torn tail, or the zeros of one */
    nd->wal.len = (size_t)sc.end_off;
    s->st.wal_torn_cut++;
  }
  if (cut)
    nd->wal_crc = sc.last_crc;
  return 0;
}

/* Before a crash: the WAL decodes to exactly the disk state raft was told
 * about (hard state, entries after the snapshot). */
static void wal_check(struct sim *s, struct sim_node *nd) {
  struct wal_replay r;
  if (wal_decode(s, nd, &r, false))
    return;
  bool same = r.n == nd->dn && !memcmp(&r.hs, &nd->hs, sizeof r.hs);
  for (size_t i = 0; same && i < r.n; i++) {
    const struct kt_raft_entry *a = &r.ents[i], *b = &nd->dlog[i];
    same = a->index == b->index && a->term == b->term && a->type == b->type && a->len == b->len &&
           (!a->len || !memcmp(a->data, b->data, a->len));
  }
  if (!same)
    sim_fail(s,
             "n%llu: WAL decodes to %zu entries, hs term %llu commit %llu; disk has %zu, %llu %llu",
             (unsigned long long)nd->id, r.n, (unsigned long long)r.hs.term,
             (unsigned long long)r.hs.commit, nd->dn, (unsigned long long)nd->hs.term,
             (unsigned long long)nd->hs.commit);
  wal_replay_free(&r);
}

/* At a restart: the disk state is what the WAL decodes to. */
static void wal_load(struct sim *s, struct sim_node *nd) {
  struct wal_replay r;
  if (wal_decode(s, nd, &r, true))
    return;
  for (size_t i = 0; i < nd->dn; i++)
    free(nd->dlog[i].data);
  free(nd->dlog);
  nd->dlog = r.ents;
  nd->dn = r.n;
  nd->dcap = r.cap;
  nd->dfirst = nd->snap_index + 1;
  nd->hs = r.hs;
}

/* ---- the state machine: the real apply step (core/apply.h), one per member */

#define LEASE_ID_SEED 0x6b65746368ull /* the same on every member, as the node's cluster id */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static struct sm_snap *snap_ref(struct sm_snap *sn) {
  if (sn)
    sn->refs++;
  return sn;
}

static void snap_unref(struct sm_snap *sn) {
  if (!sn || --sn->refs > 0)
    return;
  for (size_t i = 0; i < sn->n_recs; i++) {
    free((void *)sn->recs[i].key.p);
    free((void *)sn->recs[i].value.p);
  }
  free(sn->recs);
  free(sn->leases);
  kt_buf_free(&sn->auth);
  free(sn);
}

static struct kt_bytes dup_bytes(struct kt_bytes b) {
  uint8_t *p = malloc(b.n ? b.n : 1);
  kt_assert(p);
  if (b.n)
    memcpy(p, b.p, b.n);
  return (struct kt_bytes){p, b.n};
}

/* ---- the committed history's events: the ground truth of the watches */

#define LEASE_KEY_PREFIX 'l' /* the lease clients' keys "l0".."l7" */

static void rev_reserve(struct sim *s, int64_t rev) {
  if ((size_t)rev < s->rev_cap)
    return;
  size_t cap = s->rev_cap ? s->rev_cap : 256;
  while (cap <= (size_t)rev)
    cap *= 2;
  s->rev_off = realloc(s->rev_off, cap * sizeof *s->rev_off);
  s->rev_lease = realloc(s->rev_lease, cap * sizeof *s->rev_lease);
  kt_assert(s->rev_off && s->rev_lease);
  s->rev_cap = cap;
}

static struct kt_kv kv_dup(struct kt_arena *a, const struct kt_kv *kv) {
  struct kt_kv c = *kv;
  c.key.p = kv->key.n ? kt_arena_dup(a, kv->key.p, kv->key.n) : NULL;
  c.value.p = kv->value.n ? kt_arena_dup(a, kv->value.p, kv->value.n) : NULL;
  return c;
}

/* An event of the member that is first to apply the current entry. */
static void glog_add(struct sim *s, const struct kt_event *ev) {
  int64_t rev = ev->kv.mod_revision;
  if (rev != s->ev_rev) {
    if (rev != s->ev_rev + 1) {
      sim_fail(s, "an event at revision %lld follows revision %lld", (long long)rev,
               (long long)s->ev_rev);
      return;
    }
    rev_reserve(s, rev);
    s->rev_off[rev] = s->evn;
    s->rev_lease[rev] =
        s->rev_lease[rev - 1] + (ev->kv.key.n && ev->kv.key.p[0] == LEASE_KEY_PREFIX);
    s->ev_rev = rev;
  }
  GROW(s->ev, s->evn, s->evcap);
  struct gev *g = &s->ev[s->evn++];
  g->type = ev->type;
  g->has_prev = ev->has_prev_kv;
  g->kv = kv_dup(&s->ev_arena, &ev->kv);
  g->prev = ev->has_prev_kv ? kv_dup(&s->ev_arena, &ev->prev_kv) : (struct kt_kv){0};
}

/* The first event of revision rev or later in the global log. */
static size_t glog_first(const struct sim *s, int64_t rev) {
  return rev > s->ev_rev ? s->evn : rev < 2 ? 0 : s->rev_off[rev];
}

/* A revision as the linearizability checker counts them: the lease
 * workload's revisions (its puts on "l*" keys, revokes) are not in the
 * history, so they are taken out (the keys are disjoint: the projection of
 * the history on "a".."d" with revisions renumbered is what must be
 * linearizable). */
static int64_t linz_rev(const struct sim *s, int64_t rev) {
  return rev >= 1 && rev <= s->ev_rev ? rev - s->rev_lease[rev] : rev;
}

/* The store's event hook on a member: kt_sm_on_event (watch hub, lease
 * keys: the node's on_store_event), the global log when this member is the
 * first to apply the entry, and the counts of the revoke check. */
static void sim_store_event(void *arg, const struct kt_event *ev) {
  struct sim_node *nd = arg;
  struct sim *s = nd->sim;
  int64_t rev = ev->kv.mod_revision;
  if (s->first_apply)
    glog_add(s, ev);
  nd->ev_lo = nd->ev_count++ ? KT_MIN(nd->ev_lo, rev) : rev;
  nd->ev_hi = KT_MAX(nd->ev_hi, rev);
  nd->ev_puts += ev->type == KT_EVENT_PUT;
  struct kt_sm sm = nd->sm;
  int bug = s->o.member_bug;
  if (nd->hub && rev % 7 == 3 && (bug == SIM_BUG_WATCH_SKIP || bug == SIM_BUG_WATCH_DUP)) {
    sm.watches = NULL; /* the injected bug: the hub misses the event, or gets it twice */
    if (bug == SIM_BUG_WATCH_DUP) {
      kt_watch_publish(nd->hub, ev);
      kt_watch_publish(nd->hub, ev);
    }
  }
  kt_sm_on_event(&sm, ev);
}

static void hub_free(struct sim_node *nd) {
  if (!nd->hub)
    return;
  struct kt_watch_stats ws;
  kt_watch_stats(nd->hub, &ws);
  nd->sim->st.watch_moved_aside += ws.moved_aside;
  kt_watch_hub_free(nd->hub);
  nd->hub = NULL;
}

static void sm_close(struct sim_node *nd) {
  hub_free(nd); /* its watchers die with the member's process */
  if (nd->store)
    kt_mvcc_free(nd->store);
  if (nd->leases)
    kt_lease_free(nd->leases);
  kt_auth_free(nd->auth);
  nd->store = NULL;
  nd->leases = NULL;
  nd->auth = NULL;
}

/* The member's state machine becomes sn's (NULL: empty, revision 1), as the
 * node loads a snapshot: records into a new store, the lease table, the id
 * generator, then every live key attached to the lease its newest record
 * names. The watch hub (a new one at a start) then follows the new store, as
 * the node's install does (kt_watch_hub_set_store: its watchers resume from
 * the new store's history, or are cancelled if it was compacted). */
static void sm_open(struct sim *s, struct sim_node *nd, const struct sm_snap *sn) {
  struct kt_mvcc *old_store = nd->store;
  struct kt_lease_mgr *old_leases = nd->leases;
  struct kt_mvcc_config mc = {.on_event = sim_store_event, .event_arg = nd};
  nd->store = kt_mvcc_new(&mc);
  struct kt_lease_cfg lc = {.id_seed = LEASE_ID_SEED};
  nd->leases = kt_lease_new(&lc);
  nd->sm = (struct kt_sm){nd->store, nd->leases, NULL};
  kt_auth_free(nd->auth);
  nd->auth = kt_auth_new();
  if (!sn) {
    kt_mvcc_restore_done(nd->store, 1, 0);
  } else {
    struct kt_err e = {0};
    size_t used = 0;
    if (kt_auth_load(nd->auth, sn->auth.p, sn->auth.len, &used, &e) || used != sn->auth.len)
      sim_fail(s, "n%llu: snapshot auth store refused: %s", (unsigned long long)nd->id, e.msg);
    for (size_t i = 0; i < sn->n_recs; i++)
      if (kt_mvcc_restore_rec(nd->store, &sn->recs[i], &e))
        sim_fail(s, "n%llu: snapshot record %zu refused: %s", (unsigned long long)nd->id, i, e.msg);
    kt_mvcc_restore_done(nd->store, sn->revision, sn->compact_revision);
    for (size_t i = 0; i < sn->n_leases; i++)
      if (kt_lease_restore(nd->leases, sn->leases[i][0], sn->leases[i][1]))
        sim_fail(s, "n%llu: snapshot lease %lld refused", (unsigned long long)nd->id,
                 (long long)sn->leases[i][0]);
    kt_lease_set_id_state(nd->leases, sn->id_state);
    for (size_t i = 0; i < sn->n_recs; i++) {
      const struct kt_kvrev *r = &sn->recs[i], *next = i + 1 < sn->n_recs ? r + 1 : NULL;
      bool newest = !next || next->key.n != r->key.n || memcmp(next->key.p, r->key.p, r->key.n);
      if (newest && !r->tombstone && r->lease && kt_lease_attach(nd->leases, r->lease, r->key))
        sim_fail(s, "n%llu: snapshot key of unknown lease %lld", (unsigned long long)nd->id,
                 (long long)r->lease);
    }
  }
  if (nd->hub)
    kt_watch_hub_set_store(nd->hub, nd->store);
  else
    nd->hub = kt_watch_hub_new(nd->store, NULL);
  nd->sm.watches = nd->hub;
  if (old_store)
    kt_mvcc_free(old_store);
  if (old_leases)
    kt_lease_free(old_leases);
}

static int save_rec(void *arg, const struct kt_kvrev *rec) {
  struct sm_snap *sn = arg;
  GROW(sn->recs, sn->n_recs, sn->cap_recs);
  struct kt_kvrev *r = &sn->recs[sn->n_recs++];
  *r = *rec;
  r->key = dup_bytes(rec->key);
  r->value = dup_bytes(rec->value);
  return 0;
}

static void save_lease(void *arg, int64_t id, int64_t ttl) {
  struct sm_snap *sn = arg;
  GROW(sn->leases, sn->n_leases, sn->cap_leases);
  sn->leases[sn->n_leases][0] = id;
  sn->leases[sn->n_leases++][1] = ttl;
}

/* A snapshot of the member's state machine as it is now (at nd->applied). */
static struct sm_snap *sm_save(struct sim_node *nd) {
  struct sm_snap *sn = calloc(1, sizeof *sn);
  kt_assert(sn);
  sn->refs = 1;
  sn->revision = kt_mvcc_revision(nd->store);
  sn->compact_revision = kt_mvcc_compact_revision(nd->store);
  struct kt_arena a = {0};
  struct kt_mvcc_cursor cur = {0};
  while (kt_mvcc_iter(nd->store, sn->revision, &cur, 64, &a, save_rec, sn) == 1)
    ;
  kt_arena_free(&a);
  kt_lease_each_unsorted(nd->leases, save_lease, sn);
  kt_lease_id_state(nd->leases, sn->id_state);
  kt_auth_save(nd->auth, &sn->auth);
  return sn;
}

struct lease_digest {
  const struct kt_lease_mgr *m;
  uint64_t sum;
};

static void digest_lease(void *arg, int64_t id, int64_t ttl) {
  struct lease_digest *d = arg;
  struct kt_lease_info li = {0};
  (void)kt_lease_ttl(d->m, id, 0, &li);
  d->sum += mix64((uint64_t)id ^ mix64((uint64_t)ttl ^ mix64(li.nkeys)));
}

/* The replicated state: the store's hash, the leases (id, TTL, keys
 * attached) in any order, and the lease id generator. */
static uint64_t sm_hash(const struct sim_node *nd) {
  struct lease_digest d = {nd->leases, kt_lease_count(nd->leases)};
  kt_lease_each_unsorted(nd->leases, digest_lease, &d);
  uint64_t st[4];
  kt_lease_id_state(nd->leases, st);
  for (int i = 0; i < 4; i++)
    d.sum = mix64(d.sum ^ st[i]);
  struct kt_buf a = {0}; /* the auth store, every byte */
  kt_auth_save(nd->auth, &a);
  uint64_t ah = 0;
  for (size_t i = 0; i < a.len; i++)
    ah = mix64(ah ^ a.p[i]);
  kt_buf_free(&a);
  return kt_mvcc_hash(nd->store) ^ d.sum ^ mix64(ah);
}

/* Every member's state machine after applying index i is the same: the
 * first one to get there records its hash, the others must match. */
static void check_sm_hash(struct sim *s, struct sim_node *nd, uint64_t index) {
  if (index == 0 || index > s->gn)
    return;
  struct gentry *g = &s->g[index - 1];
  uint64_t h = sm_hash(nd);
  s->st.hashes_checked++;
  if (!g->hashed) {
    g->hashed = true;
    g->sm_hash = h;
  } else if (g->sm_hash != h) {
    sim_fail(s,
             "n%llu: state machine at index %llu differs (hash %016llx, others %016llx; "
             "revision %lld)",
             (unsigned long long)nd->id, (unsigned long long)index, (unsigned long long)h,
             (unsigned long long)g->sm_hash, (long long)kt_mvcc_revision(nd->store));
  }
}

static void node_start(struct sim *s, struct sim_node *nd) {
  if (nd->wal_seq)
    wal_load(s, nd); /* a restart: the disk state is what the WAL decodes to */
  else
    wal_rewrite(s, nd); /* a new member: its first segment */
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
  nd->sim = s;
  nd->lead_index = 0;
  nd->serving = false;
  /* a new life: its read contexts (random high bits, as the node's run id) */
  uint64_t tag = ((kt_rng_next(&s->rng) & 0xffffff) | 1u) << 40;
  kt_reads_init(&nd->rq, tag, 1 + ((tag >> 40) << 6)); /* no draw of its own: seeds replay */
  nd->alive = nd->started = true;
  nd->applied = nd->snap_index; /* the state machine restarts from the snapshot */
  nd->checked_commit = nd->snap_index;
  nd->conf = nd->snap_conf;
  sm_open(s, nd, nd->snap_sm);
  check_sm_hash(s, nd, nd->snap_index);
  /* reads sent to it while it was down arrive now that it listens again */
  for (int i = 0; i < s->n_clients + SIM_KEYS; i++) {
    struct sim_client *cl = &s->clients[i];
    if (cl->state == CL_READ && cl->rphase == R_CONNECTING && cl->member == nd->id) {
      cl->rsince = s->now;
      cl->rphase = R_DEFERRED; /* it serves only once it hears a leader */
    }
  }
}

static void free_write(struct disk_write *w) {
  for (size_t i = 0; i < w->n; i++)
    free(w->ents[i].data);
  free(w->ents);
}

static void disk_apply(struct sim_node *nd, struct disk_write *w, size_t n);

/* ---- clients and their history (test/sim/linz.h) */

static const char *const SIM_KEY[SIM_KEYS] = {"a", "b", "c", "d"};
#define CLIENT_TIMEOUT (10 * 150) /* units: no outcome by then is unknown */

static void process_ready(struct sim *s, struct sim_node *nd);

static struct kt_bytes B(const char *p) {
  return (struct kt_bytes){(const uint8_t *)p, (uint32_t)strlen(p)};
}

static uint64_t
random_member(struct sim *s) {
  for (int tries = 0; tries < 8; tries++) {
    struct sim_node *nd = &s->nodes[kt_rng_below(&s->rng, (uint64_t)s->n_nodes)];
    if (nd->started && !nd->gone)
      return nd->id;
  }
  return 1;
}

static bool is_final(const struct sim *s, const struct sim_client *c) {
  return c - s->clients >= s->n_clients;
}

/* The op is over (whatever its outcome): idle for a while; after a failure
 * or an unknown outcome the client tries another member. */
static void client_done(struct sim *s, struct sim_client *c, int outcome) {
  c->state = CL_IDLE;
  c->rphase = 0;
  c->outcome = outcome;
  s->st.ops_ok += outcome == CL_OK;
  s->st.ops_failed += outcome == CL_FAILED;
  c->next_at = s->now + 10 * kt_rng_below(&s->rng, 12);
  if (outcome != CL_OK && !is_final(s, c))
    c->member = random_member(s);
}

/* An unknown read is dropped; an unknown write is settled at the end of the
 * run (check_history): the simulator knows whether its entry ever reached
 * the committed log, and one that did not never took effect. */
static void client_unknown(struct sim *s, struct sim_client *c) {
  if (c->state == CL_WRITE) {
    GROW(s->unknown_w, s->n_unknown_w, s->cap_unknown_w);
    s->unknown_w[s->n_unknown_w++] = (struct unknown_write){c->lid, c->seq};
  } else {
    kt_linz_unknown(s->hist, c->lid);
  }
  client_done(s, c, CL_UNKNOWN);
}

static void client_fail(struct sim *s, struct sim_client *c) {
  kt_linz_fail(s->hist, c->lid);
  client_done(s, c, CL_FAILED);
}

static void kv_to_linz(const struct sim *s, const struct kt_kv *kv, struct kt_linz_kv *out,
                       char *buf, size_t n) {
  snprintf(buf, n, "%.*s", (int)kv->value.n, (const char *)kv->value.p);
  *out = (struct kt_linz_kv){true, buf, linz_rev(s, kv->create_revision),
                             linz_rev(s, kv->mod_revision), kv->version};
}

/* A get answered from nd's store as it is now (the read index, if any, is
 * applied). */
static void answer_get(struct sim *s, struct sim_client *c, struct sim_node *nd) {
  struct kt_range_req rr = {.key = B(SIM_KEY[c->key])};
  struct kt_range_resp resp = {0};
  struct kt_err e = {0};
  struct kt_arena a = {0};
  if (kt_mvcc_range(nd->store, &rr, &a, &resp, &e)) {
    sim_fail(s, "n%llu: get %s: %s", (unsigned long long)nd->id, SIM_KEY[c->key], e.msg);
    kt_arena_free(&a);
    return;
  }
  struct kt_linz_result r = {.revision = linz_rev(s, kt_mvcc_revision(nd->store))};
  char buf[32];
  if (resp.n_kvs) {
    kv_to_linz(s, &resp.kvs[0], &r.kv, buf, sizeof buf);
    c->seen[c->key].present = true;
    c->seen[c->key].mod = resp.kvs[0].mod_revision;
    c->seen[c->key].lmod = r.kv.mod_revision;
    c->seen[c->key].version = r.kv.version;
    snprintf(c->seen[c->key].value, sizeof c->seen[c->key].value, "%s", buf);
  } else {
    c->seen[c->key].present = false;
  }
  kt_arena_free(&a);
  kt_linz_return(s->hist, c->lid, (int64_t)s->now, &r);
  client_done(s, c, CL_OK);
}

/* The outcome of a write, as kt_sm_apply gave it to the member that
 * proposed it. */
static void answer_write(struct sim *s, struct sim_client *c, int rc,
                         const struct kt_sm_result *res) {
  if (rc) { /* the store refused it: nothing changed */
    client_fail(s, c);
    return;
  }
  struct kt_linz_result r = {.revision = linz_rev(s, res->revision)};
  struct kt_linz_kv gets[KT_LINZ_MAX_TXN_OPS];
  char buf[KT_LINZ_MAX_TXN_OPS + 1][32];
  if (c->kind == KT_LINZ_PUT && c->prev_kv && res->op.u.put.has_prev_kv)
    kv_to_linz(s, &res->op.u.put.prev_kv, &r.kv, buf[0], sizeof buf[0]);
  if (c->kind == KT_LINZ_DELETE)
    r.deleted = res->op.u.del.deleted;
  if (c->kind == KT_LINZ_TXN) {
    r.succeeded = res->op.u.txn.succeeded;
    for (uint32_t i = 0; i < res->op.u.txn.n_responses && r.n_gets < KT_LINZ_MAX_TXN_OPS; i++) {
      const struct kt_response_op *x = &res->op.u.txn.responses[i];
      if (x->type != KT_OP_RANGE)
        continue;
      gets[r.n_gets] = (struct kt_linz_kv){0};
      if (x->u.range.n_kvs)
        kv_to_linz(s, &x->u.range.kvs[0], &gets[r.n_gets], buf[1 + r.n_gets], sizeof buf[0]);
      r.n_gets++;
    }
    r.gets = gets;
  }
  kt_linz_return(s->hist, c->lid, (int64_t)s->now, &r);
  client_done(s, c, CL_OK);
}

/* Proposes req on nd as the node does: entry data = origin member | seq |
 * request body. Returns kt_raft_propose's code. */
static int propose_req(struct sim *s, struct sim_node *nd, const struct kt_req *req, uint64_t seq,
                       uint64_t *index) {
  kt_buf_reset(&s->body);
  kt_proto_encode_req_body(&s->body, req);
  kt_buf_reset(&s->body2);
  uint8_t h[DATA_HDR];
  kt_put_u64be(h, nd->id);
  kt_put_u64be(h + 8, seq);
  kt_buf_append(&s->body2, h, sizeof h);
  kt_buf_append(&s->body2, s->body.p, s->body.len);
  *index = 0;
  return kt_raft_propose(nd->r, s->body2.p, (uint32_t)s->body2.len, index);
}

static void client_write(struct sim *s, struct sim_client *c, struct sim_node *nd,
                         const struct kt_req *req, const struct kt_linz_op *op) {
  c->lid = kt_linz_call(s->hist, (int)(c - s->clients), (int64_t)s->now, op);
  c->kind = op->kind;
  c->prev_kv = op->prev_kv;
  c->seq = ++s->next_seq;
  if (propose_req(s, nd, req, c->seq, &c->index)) { /* refused: never appended */
    client_fail(s, c);
    return;
  }
  c->term = c->index ? kt_raft_term(nd->r) : 0;
  c->state = CL_WRITE;
  c->deadline = s->now + CLIENT_TIMEOUT;
  process_ready(s, nd);
}

/* A linearizable read reaches member nd (alive), as the node's on_request:
 * it joins the open read batch if the member serves, else it waits in the
 * defer queue; the batch asks raft at the end of the turn (process_ready). */
static void read_arrives(struct sim *s, struct sim_client *c, struct sim_node *nd) {
  c->rsince = s->now;
  if (!nd->serving) {
    c->rphase = R_DEFERRED;
    return;
  }
  c->rphase = R_BATCH;
  c->batch = kt_reads_join(&nd->rq);
  process_ready(s, nd);
}

static void client_get(struct sim *s, struct sim_client *c, struct sim_node *nd, int key,
                       bool serializable) {
  struct kt_linz_op op = {.kind = KT_LINZ_GET, .key = SIM_KEY[key], .serializable = serializable};
  c->lid = kt_linz_call(s->hist, (int)(c - s->clients), (int64_t)s->now, &op);
  c->kind = KT_LINZ_GET;
  c->key = key;
  if (serializable || (s->o.member_bug == SIM_BUG_LOCAL_READ && !is_final(s, c))) {
    answer_get(s, c, nd);
    return;
  }
  c->state = CL_READ;
  c->deadline = s->now + CLIENT_TIMEOUT;
  read_arrives(s, c, nd);
}

/* A new request from an idle client: puts, deletes, compare-and-swap txns
 * (on value, version or mod revision, as last read; gets in both branches),
 * linearizable and serializable gets, on SIM_KEYS keys. */
static void client_start(struct sim *s, struct sim_client *c) {
  struct sim_node *nd = node_of(s, c->member);
  if (nd && !nd->alive && !nd->gone && chance(s, 500) && s->ops_called < s->max_ops) {
    /* a linearizable get for a member that is down: the client (libketch,
     * ketch-grpc) sends it once the member accepts connections again */
    s->ops_called++;
    int k = (int)kt_rng_below(&s->rng, SIM_KEYS);
    struct kt_linz_op op = {.kind = KT_LINZ_GET, .key = SIM_KEY[k]};
    c->lid = kt_linz_call(s->hist, (int)(c - s->clients), (int64_t)s->now, &op);
    c->kind = KT_LINZ_GET;
    c->key = k;
    c->state = CL_READ;
    c->rphase = R_CONNECTING;
    c->deadline = s->now + CLIENT_TIMEOUT;
    return;
  }
  if (!nd || !nd->alive) { /* cannot connect: try another member */
    c->member = random_member(s);
    c->next_at = s->now + 10;
    return;
  }
  s->ops_called++;
  int k = (int)kt_rng_below(&s->rng, SIM_KEYS);
  uint64_t x = kt_rng_below(&s->rng, 100);
  char val[24];
  snprintf(val, sizeof val, "v%llu", (unsigned long long)++s->next_val);
  struct kt_req req = {0};
  struct kt_linz_op op = {0};
  if (x < 20) {
    bool prev = kt_rng_below(&s->rng, 2);
    req.type = KT_MSG_PUT;
    req.u.op = (struct kt_request_op){
        .type = KT_OP_PUT, .u.put = {.key = B(SIM_KEY[k]), .value = B(val), .prev_kv = prev}};
    op = (struct kt_linz_op){.kind = KT_LINZ_PUT, .key = SIM_KEY[k], .value = val, .prev_kv = prev};
    client_write(s, c, nd, &req, &op);
  } else if (x < 30) {
    req.type = KT_MSG_DELETE;
    req.u.op = (struct kt_request_op){.type = KT_OP_DELETE, .u.del = {.key = B(SIM_KEY[k])}};
    op = (struct kt_linz_op){.kind = KT_LINZ_DELETE, .key = SIM_KEY[k]};
    client_write(s, c, nd, &req, &op);
  } else if (x < 50) {
    int k2 = (int)kt_rng_below(&s->rng, SIM_KEYS);
    uint8_t target =
        (uint8_t[]){KT_CMP_VALUE, KT_CMP_VERSION, KT_CMP_MOD}[kt_rng_below(&s->rng, 3)];
    uint8_t result =
        kt_rng_below(&s->rng, 4)
            ? KT_CMP_EQUAL
            : (uint8_t[]){KT_CMP_NOT_EQUAL, KT_CMP_LESS, KT_CMP_GREATER}[kt_rng_below(&s->rng, 3)];
    const char *cv = c->seen[k].present ? c->seen[k].value : "v0";
    int64_t num = !c->seen[k].present    ? 0
                  : target == KT_CMP_MOD ? c->seen[k].mod
                                         : c->seen[k].version;
    struct kt_compare rc = {.result = result,
                            .target = target,
                            .key = B(SIM_KEY[k]),
                            .value = target == KT_CMP_VALUE ? B(cv) : (struct kt_bytes){0},
                            .int_value = num};
    struct kt_request_op then[2] = {
        {.type = KT_OP_PUT, .u.put = {.key = B(SIM_KEY[k]), .value = B(val)}},
        {.type = KT_OP_RANGE, .u.range = {.key = B(SIM_KEY[k2])}}};
    struct kt_request_op els[1] = {{.type = KT_OP_RANGE, .u.range = {.key = B(SIM_KEY[k])}}};
    req.type = KT_MSG_TXN;
    req.u.op = (struct kt_request_op){.type = KT_OP_TXN,
                                      .u.txn = {.compare = &rc,
                                                .n_compare = 1,
                                                .success = then,
                                                .n_success = 2,
                                                .failure = els,
                                                .n_failure = 1}};
    int64_t lnum = target == KT_CMP_MOD && c->seen[k].present ? c->seen[k].lmod : num;
    struct kt_linz_cmp lc = {SIM_KEY[k], target, result, cv, lnum};
    struct kt_linz_txop lthen[2] = {{KT_LINZ_PUT, SIM_KEY[k], val},
                                    {KT_LINZ_GET, SIM_KEY[k2], NULL}};
    struct kt_linz_txop lels[1] = {{KT_LINZ_GET, SIM_KEY[k], NULL}};
    op = (struct kt_linz_op){.kind = KT_LINZ_TXN,
                             .cmp = &lc,
                             .n_cmp = 1,
                             .then = lthen,
                             .n_then = 2,
                             .els = lels,
                             .n_els = 1};
    client_write(s, c, nd, &req, &op);
  } else {
    client_get(s, c, nd, k, x >= 85);
  }
}

/* Once per tick: timeouts (unknown outcome), then idle clients start their
 * next request (new ones only while `issue`). */
static void clients_tick(struct sim *s, bool issue) {
  for (int i = 0; i < s->n_clients + SIM_KEYS && !s->failed; i++) {
    struct sim_client *c = &s->clients[i];
    if (c->state != CL_IDLE) {
      if (s->now >= c->deadline)
        client_unknown(s, c);
      else if (c->state == CL_READ && (c->rphase == R_DEFERRED || c->rphase == R_BATCH) &&
               s->now - c->rsince > 2 * 10 * 10)
        client_fail(s, c); /* the node's ENOLEADER / ETIMEOUT after two election timeouts */
    } else if (issue && i < s->n_clients && s->ops_called < s->max_ops && s->now >= c->next_at) {
      client_start(s, c);
    }
  }
}

/* nd crashed or replaced its state (snapshot install): its clients' writes
 * may or may not have happened; a crash loses their reads, which half the
 * clients send again once the member is back (as libketch resends reads
 * after a reconnect), the others give up. */
static void clients_lose(struct sim *s, struct sim_node *nd, bool reads) {
  for (int i = 0; i < s->n_clients + SIM_KEYS; i++) {
    struct sim_client *c = &s->clients[i];
    if (c->member != nd->id)
      continue;
    if (c->state == CL_WRITE)
      client_unknown(s, c);
    else if (reads && c->state == CL_READ && !nd->gone && !is_final(s, c) && chance(s, 500))
      c->rphase = R_CONNECTING;
    else if (reads && c->state == CL_READ)
      client_unknown(s, c);
  }
}

/* nd applied entry e (origin, seq from its header; res NULL for an entry
 * that is no request: empty, CONF) with this outcome: the client whose
 * proposal it is gets it; a client whose proposal on the leader had this
 * index, but is not this entry, lost it (unknown). */
static void clients_applied(struct sim *s, struct sim_node *nd, const struct kt_raft_entry *e,
                            uint64_t origin, uint64_t seq, int rc, const struct kt_sm_result *res) {
  for (int i = 0; i < s->n_clients; i++) {
    struct sim_client *c = &s->clients[i];
    if (c->state != CL_WRITE || c->member != nd->id)
      continue;
    bool mine = origin == nd->id && c->seq == seq;
    bool at_index = c->index && c->index == e->index;
    if (s->o.member_bug == SIM_BUG_MATCH_BY_INDEX && c->index)
      mine = at_index; /* the bug: trusts the index, not what is there */
    if (mine) {
      if (c->index && (c->index != e->index || c->term != e->term) &&
          s->o.member_bug != SIM_BUG_MATCH_BY_INDEX) {
        sim_fail(
            s, "n%llu: proposal seq %llu made at index %llu term %llu applied at %llu term %llu",
            (unsigned long long)nd->id, (unsigned long long)seq, (unsigned long long)c->index,
            (unsigned long long)c->term, (unsigned long long)e->index, (unsigned long long)e->term);
        return;
      }
      struct kt_sm_result none = {.revision = kt_mvcc_revision(nd->store)};
      answer_write(s, c, res ? rc : 0, res ? res : &none);
    } else if (at_index) {
      client_unknown(s, c); /* another entry at its index: lost */
    }
  }
}

/* Reads on nd whose batch may be served (core/reads.h) are answered. */
static void clients_reads(struct sim *s, struct sim_node *nd) {
  for (int i = 0; i < s->n_clients + SIM_KEYS; i++) {
    struct sim_client *c = &s->clients[i];
    if (c->state == CL_READ && c->rphase == R_BATCH && c->member == nd->id &&
        kt_reads_ready(&nd->rq, c->batch, nd->applied))
      answer_get(s, c, nd);
  }
}

/* The node's end of a turn for reads: once nd serves, the reads that
 * waited for it join the open batch (run_deferred); the open batch asks
 * raft for its read index (request_read_index), and a refusal fails its
 * reads. Returns true if raft was asked (a ready may follow). */
static bool reads_turn(struct sim *s, struct sim_node *nd) {
  if (nd->serving)
    for (int i = 0; i < s->n_clients + SIM_KEYS; i++) {
      struct sim_client *c = &s->clients[i];
      if (c->state == CL_READ && c->rphase == R_DEFERRED && c->member == nd->id) {
        c->rphase = R_BATCH;
        c->rsince = s->now;
        c->batch = kt_reads_join(&nd->rq);
      }
    }
  if (!kt_reads_pending_ask(&nd->rq))
    return false;
  GROW(s->reads, s->rn, s->rcap);
  s->reads[s->rn++] = (struct pending_read){nd->id, nd->rq.tag | nd->rq.open, s->max_commit};
  uint64_t failed = 0;
  if (kt_reads_ask(&nd->rq, nd->r, &failed))
    for (int i = 0; i < s->n_clients + SIM_KEYS; i++) {
      struct sim_client *c = &s->clients[i];
      if (c->state == CL_READ && c->rphase == R_BATCH && c->member == nd->id && c->batch == failed)
        client_fail(s, c); /* no leader: a definite error, nothing read */
    }
  return true;
}

/* ---- leases: what the leaders promised (the checks) */

#define LEASE_ID0 1000 /* the lease clients' ids: LEASE_ID0 + k, never reused */

static struct lease_truth *lease_truth(struct sim *s, int64_t id) {
  return id >= LEASE_ID0 && (size_t)(id - LEASE_ID0) < s->ltn ? &s->lt[id - LEASE_ID0] : NULL;
}

/* A lease entry applied on nd (rev0: the store's revision before; nkeys:
 * the keys attached to a revoked lease before). A grant, first applied,
 * starts the lease's TTL. A revoke deletes the lease's keys at ONE revision
 * on every member (its events: nkeys deletes, all at rev0 + 1); first
 * applied, it must not take effect before the TTL has run out since the
 * grant or the last renewal by the newest leader. */
static void lease_applied(struct sim *s, struct sim_node *nd, const struct kt_raft_entry *e,
                          const struct kt_req *req, int rc, const struct kt_sm_result *res,
                          bool first, uint64_t nkeys, int64_t rev0) {
  int64_t now_ms = (int64_t)s->now * MS_PER_UNIT, id = req->u.lease.id;
  struct lease_truth *t = lease_truth(s, id);
  if (req->type == KT_MSG_LEASE_GRANT) {
    if (!rc && first && t) {
      t->ttl_s = res->lease_ttl;
      t->granted_ms = now_ms;
      t->honored_ms = now_ms + t->ttl_s * 1000;
      s->st.leases_granted++;
    }
    return;
  }
  if (rc) /* an unknown lease: its revoke came twice (an expiry handed out again) */
    return;
  int64_t rev = kt_mvcc_revision(nd->store);
  if (nd->ev_count != nkeys || nd->ev_puts || rev != rev0 + (nkeys > 0) ||
      (nkeys && (nd->ev_lo != rev || nd->ev_hi != rev))) {
    sim_fail(s,
             "n%llu: lease %lld revoked at index %llu: %llu keys, %u events (%u puts) at "
             "revisions %lld..%lld, store revision %lld -> %lld",
             (unsigned long long)nd->id, (long long)id, (unsigned long long)e->index,
             (unsigned long long)nkeys, nd->ev_count, nd->ev_puts, (long long)nd->ev_lo,
             (long long)nd->ev_hi, (long long)rev0, (long long)rev);
    return;
  }
  if (!first || !t)
    return;
  t->revoked = true;
  s->st.lease_revoked++;
  s->st.lease_keys_revoked += nkeys;
  s->st.lease_stale_unhonored += now_ms < t->stale_ms;
  if (now_ms < t->stale_ms && s->check_quorum) /* as the node runs */
    sim_fail(s,
             "lease %lld (TTL %llds) revoked at index %llu at %lld ms, %lld ms before the TTL of "
             "a keep-alive deposed leader n%llu answered at %lld ms (check_quorum: a new "
             "leader's election timeout extension should cover it)",
             (long long)id, (long long)t->ttl_s, (unsigned long long)e->index, (long long)now_ms,
             (long long)(t->stale_ms - now_ms), (unsigned long long)t->stale_by,
             (long long)t->stale_at);
  else if (now_ms < t->honored_ms)
    sim_fail(s,
             "lease %lld (TTL %llds) revoked at index %llu at %lld ms, %lld ms before its TTL ran "
             "out: granted at %lld ms, last renewed by n%llu at %lld ms",
             (long long)id, (long long)t->ttl_s, (unsigned long long)e->index, (long long)now_ms,
             (long long)(t->honored_ms - now_ms), (long long)t->granted_ms,
             (unsigned long long)t->renew_by, (long long)t->renew_ms);
}

/* A committed NORMAL entry: the member's state machine applies it. */
static void apply_normal_entry(struct sim *s, struct sim_node *nd, const struct kt_raft_entry *e) {
  if (e->len == 0) { /* a leader's empty entry */
    clients_applied(s, nd, e, 0, 0, 0, NULL);
    return;
  }
  if (e->len == CONF_DATA_LEN && e->data[0] == 'C') {
    s->st.conf_as_normal++; /* a change refused: one was in flight */
    clients_applied(s, nd, e, 0, 0, 0, NULL);
    return;
  }
  if (e->len < DATA_HDR) {
    sim_fail(s, "n%llu: entry %llu shorter than its header", (unsigned long long)nd->id,
             (unsigned long long)e->index);
    return;
  }
  struct kt_req req;
  struct kt_err de = {0}, err = {0};
  kt_arena_reset(&s->apply_arena);
  if (kt_proto_decode_req(e->data + DATA_HDR, e->len - DATA_HDR, &s->apply_arena, &req, &de)) {
    sim_fail(s, "n%llu: entry %llu undecodable: %s", (unsigned long long)nd->id,
             (unsigned long long)e->index, de.msg);
    return;
  }
  struct kt_sm_result res;
  nd->ev_count = nd->ev_puts = 0;
  nd->ev_lo = nd->ev_hi = 0;
  bool first = s->first_apply = e->index > s->ev_index;
  int64_t rev0 = kt_mvcc_revision(nd->store);
  struct kt_lease_info li = {0};
  if (req.type == KT_MSG_LEASE_REVOKE)
    (void)kt_lease_ttl(nd->leases, req.u.lease.id, 0, &li);
  if (req.type >= KT_MSG_AUTH_ENABLE && req.type <= KT_MSG_ROLE_REVOKE_PERMISSION) {
    /* an auth change, as the node applies it (core/node_auth.c) */
    if (kt_auth_apply(nd->auth, &req, &err) == 0)
      s->st.auth_applied += first;
    clients_applied(s, nd, e, kt_get_u64be(e->data), kt_get_u64be(e->data + 8), 0, NULL);
    return;
  }
  int rc = kt_sm_apply(&nd->sm, &req, (int64_t)s->now * MS_PER_UNIT, &s->apply_arena, &res, &err);
  s->first_apply = false;
  s->st.applied_reqs++;
  if (req.type == KT_MSG_LEASE_GRANT || req.type == KT_MSG_LEASE_REVOKE)
    lease_applied(s, nd, e, &req, rc, &res, first, li.nkeys, rev0);
  clients_applied(s, nd, e, kt_get_u64be(e->data), kt_get_u64be(e->data + 8), rc, &res);
}

static void node_crash(struct sim *s, struct sim_node *nd) {
  /* a torn write: the write in progress reached the disk in part (its hard
   * state first, then a prefix of its entries) without raft being told */
  wal_check(s, nd); /* what raft was told is durable is what the WAL holds */
  if (nd->wq_n && chance(s, 500)) {
    (void)wal_encode_write(s, nd, &nd->wq[0], &s->wbytes);
    kt_buf_append(&nd->wal, s->wbytes.p, (size_t)kt_rng_below(&s->rng, s->wbytes.len + 1));
  }
  for (size_t i = 0; i < nd->wq_n; i++)
    free_write(&nd->wq[i]);
  nd->wq_n = 0;
  kt_raft_free(nd->r);
  nd->r = NULL;
  sm_close(nd); /* memory: the restart loads the snapshot on its disk */
  for (int i = 0; i < SIM_WATCHES; i++)
    if (s->watches[i].member == nd->id)
      s->watches[i].hub_id = 0; /* its hub is gone: the client resumes elsewhere */
  nd->alive = false;
  nd->gone = nd->removed; /* the node of a removed member does not come back */
  nd->restart_at = s->now + 10 * (5 + kt_rng_below(&s->rng, 60));
  s->st.crashes++;
  clients_lose(s, nd, true);
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
    g->hashed = false;
    if (e->type == KT_RAFT_ENTRY_NORMAL && e->len >= DATA_HDR) { /* a request: note its seq */
      uint64_t seq = kt_get_u64be(e->data + 8);
      if (seq >= s->seq_cap) {
        size_t cap = s->seq_cap ? s->seq_cap : 1024;
        while (cap <= seq)
          cap *= 2;
        s->seq_committed = realloc(s->seq_committed, cap);
        kt_assert(s->seq_committed);
        memset(s->seq_committed + s->seq_cap, 0, cap - s->seq_cap);
        s->seq_cap = cap;
      }
      s->seq_committed[seq] = 1;
    }
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
  s->top_term = KT_MAX(s->top_term, term);
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
  /* Never a forwarded proposal twice: the member would apply a client's
   * request twice (entries carry no dedup key raft or apply checks), and
   * the node's TCP peer links neither duplicate nor resend. */
  int copies = chance(s, s->dup_pct) && m->type != KT_RAFT_MSG_PROP ? 2 : 1;
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
                       .sm = snap_ref(from->snap_sm),
                       .n = sizeof(struct sim_conf)};
  nm.p = malloc(nm.n);
  memcpy(nm.p, &from->snap_conf, nm.n);
  net_push(s, nm);
}

/* A follower installs a snapshot: state machine = the committed prefix up
 * to its index, disk log reset after it, raft told. */
static void install_snapshot(struct sim *s, struct sim_node *nd, uint64_t index, uint64_t term,
                             const struct sim_conf *conf, struct sm_snap *sm) {
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
  wal_rewrite(s, nd); /* the node's kt_wal_reset after the snapshot */
  nd->snap_conf = *conf;
  if (kt_raft_install_snapshot(nd->r, index, term, conf->v, conf->nv, conf->l, conf->nl) != 0) {
    sim_fail(s, "n%llu refused snapshot %llu", (unsigned long long)nd->id,
             (unsigned long long)index);
    return;
  }
  nd->applied = nd->checked_commit = index;
  nd->conf = *conf;
  snap_unref(nd->snap_sm); /* the new snapshot replaces the old on disk */
  nd->snap_sm = snap_ref(sm);
  sm_open(s, nd, sm);
  check_sm_hash(s, nd, index);
  clients_lose(s, nd, false);
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

/* The node's kt_node_lease_role after each ready: a leader's lease manager
 * is promoted once the leader serves (applied its first index of the term),
 * every lease extended by an election timeout; demoted when not leader. */
static void lease_role(struct sim *s, struct sim_node *nd) {
  bool lead =
      kt_raft_role(nd->r) == KT_RAFT_LEADER && nd->lead_index && nd->applied >= nd->lead_index;
  if (lead == kt_lease_is_leader(nd->leases))
    return;
  int64_t now_ms = (int64_t)s->now * MS_PER_UNIT;
  if (lead) {
    kt_lease_promote(nd->leases, now_ms,
                     s->o.member_bug == SIM_BUG_LEASE_NO_EXTEND ? 0 : ELECTION_MS);
    nd->promote_ms = now_ms;
  } else {
    kt_lease_demote(nd->leases);
  }
}

static void ready_loop(struct sim *s, struct sim_node *nd);

/* The node's turn: ready batches until none, then the reads' end of turn
 * (which may ask raft, and so bring another ready). */
static void process_ready(struct sim *s, struct sim_node *nd) {
  for (int guard = 0; guard < 4 && nd->alive && !s->failed; guard++) {
    ready_loop(s, nd);
    if (!nd->alive || s->failed || !reads_turn(s, nd))
      break;
  }
}

static void ready_loop(struct sim *s, struct sim_node *nd) {
  for (int guard = 0; guard < 100 && nd->alive && kt_raft_has_ready(nd->r); guard++) {
    struct kt_raft_ready rd;
    kt_raft_ready(nd->r, &rd);
    for (size_t i = 0; i < rd.n_events && !s->failed; i++) {
      if (s->o.verbose) {
        char b[128];
        printf("  t=%llu n%llu %s\n", (unsigned long long)s->now, (unsigned long long)nd->id,
               kt_raft_event_str(&rd.events[i], b, sizeof b));
      }
      if (rd.events[i].type == KT_RAFT_EV_BECAME_LEADER) {
        on_leader(s, nd, rd.events[i].term);
        nd->lead_index = rd.events[i].a; /* serving once applied (the node's lead_index) */
      }
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
      if (s->failed)
        break;
      if (e->type == KT_RAFT_ENTRY_CONF) {
        apply_conf_entry(s, nd, e);
        clients_applied(s, nd, e, 0, 0, 0, NULL);
      } else {
        apply_normal_entry(s, nd, e);
      }
      s->ev_index = KT_MAX(s->ev_index, e->index);
      check_sm_hash(s, nd, e->index);
    }
    for (size_t i = 0; i < rd.n_reads && !s->failed; i++) {
      s->st.reads++;
      const struct kt_raft_read_state *rs = &rd.reads[i];
      if (rs->index > nd->applied)
        sim_fail(s, "n%llu read state index %llu above applied %llu", (unsigned long long)nd->id,
                 (unsigned long long)rs->index, (unsigned long long)nd->applied);
      for (size_t j = 0; j < s->rn; j++)
        if (s->reads[j].member == nd->id && s->reads[j].ctx == rs->context &&
            rs->index < s->reads[j].min_index)
          sim_fail(s, "n%llu read ctx %llx at index %llu misses commit %llu made before it",
                   (unsigned long long)nd->id, (unsigned long long)rs->context,
                   (unsigned long long)rs->index, (unsigned long long)s->reads[j].min_index);
      kt_reads_answered(&nd->rq, rs);
    }
    nd->serving = kt_reads_serving(&rd, nd->lead_index, nd->applied);
    if (!s->failed)
      clients_reads(s, nd);
    lease_role(s, nd);
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
    nd->wal_crc = wal_encode_write(s, nd, w, &s->wbytes);
    kt_buf_append(&nd->wal, s->wbytes.p, s->wbytes.len);
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
    snap_unref(nd->snap_sm);
    nd->snap_sm = sm_save(nd); /* the state machine at the snapshot's index */
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
    wal_rewrite(s, nd);
  }
}

/* The operator's compaction, as the node's auto-compaction: the leader
 * proposes COMPACT a few revisions behind its store's. Revisions do not
 * move, so the history needs no entry for it. */
/* An auth change by the leader now and then: users, roles and permissions
 * from small sets of names, so that adds, grants, revokes and deletes meet
 * each other (errors included: every member must refuse the same ones). The
 * store is replicated state: sm_hash covers it, snapshots carry it. */
static void propose_auth_change(struct sim *s) {
  static const char *const users[] = {"root", "u1", "u2"}, *const roles[] = {"root", "r1", "r2"};
  static const char *const keys[] = {"a", "b", "l"};
  for (int i = 0; i < s->n_nodes; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (!nd->alive || kt_raft_role(nd->r) != KT_RAFT_LEADER)
      continue;
    static const uint8_t types[] = {
        KT_MSG_USER_ADD,        KT_MSG_USER_DELETE,           KT_MSG_USER_CHANGE_PASSWORD,
        KT_MSG_USER_GRANT_ROLE, KT_MSG_USER_REVOKE_ROLE,      KT_MSG_ROLE_ADD,
        KT_MSG_ROLE_DELETE,     KT_MSG_ROLE_GRANT_PERMISSION, KT_MSG_ROLE_REVOKE_PERMISSION,
        KT_MSG_AUTH_ENABLE,     KT_MSG_AUTH_DISABLE};
    struct kt_req req = {.type = types[kt_rng_below(&s->rng, sizeof types)]};
    struct kt_auth_req *a = &req.u.auth;
    bool role = req.type >= KT_MSG_ROLE_ADD;
    a->name = B(role ? roles[kt_rng_below(&s->rng, 3)] : users[kt_rng_below(&s->rng, 3)]);
    a->role = B(roles[kt_rng_below(&s->rng, 3)]);
    a->hash = B(kt_rng_below(&s->rng, 2) ? "$argon2id$h1" : "$argon2id$h2");
    a->perm_type = (uint8_t)kt_rng_below(&s->rng, 3);
    a->key = B(keys[kt_rng_below(&s->rng, 3)]);
    uint64_t end = kt_rng_below(&s->rng, 4);
    a->range_end = end == 3 ? (struct kt_bytes){(const uint8_t *)"", 1}
                   : end    ? B(keys[end])
                            : (struct kt_bytes){0};
    uint64_t idx;
    if (propose_req(s, nd, &req, ++s->next_seq, &idx) == 0)
      s->st.auth_proposed++;
    process_ready(s, nd);
    return;
  }
}

static void propose_compaction(struct sim *s) {
  for (int i = 0; i < s->n_nodes; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (!nd->alive || kt_raft_role(nd->r) != KT_RAFT_LEADER)
      continue;
    int64_t rev = kt_mvcc_revision(nd->store) - (int64_t)kt_rng_below(&s->rng, 8);
    if (rev <= kt_mvcc_compact_revision(nd->store))
      return;
    struct kt_req req = {.type = KT_MSG_COMPACT};
    req.u.compact.revision = rev;
    uint64_t idx;
    if (propose_req(s, nd, &req, ++s->next_seq, &idx) == 0)
      s->st.compactions++;
    process_ready(s, nd);
    return;
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

static void sim_unit(struct sim *s, bool chaos);

/* The live leader of the highest term (-1: none), as a slot index. */
static int find_leader(const struct sim *s) {
  int lead = -1;
  for (int i = 0; i < s->n_nodes; i++)
    if (s->nodes[i].alive && kt_raft_role(s->nodes[i].r) == KT_RAFT_LEADER &&
        (lead < 0 || kt_raft_term(s->nodes[i].r) > kt_raft_term(s->nodes[lead].r)))
      lead = i;
  return lead;
}

/* ---- watch clients: each member's real hub (core/watch), checked against
 * the global event log */

static const struct {
  const char *key, *end; /* end NULL: one key; "" (one NUL byte): from key on */
  uint32_t en;
} WATCH_RANGES[] = {{"a", NULL, 0}, {"c", NULL, 0}, {"l1", NULL, 0}, {"l", "m", 1},
                    {"a", "c", 1},  {"b", "l4", 2}, {"a", "", 1}};

static bool watch_covers(const struct sim_watch *w, const struct gev *g) {
  if (g->type == KT_EVENT_PUT ? w->no_put : w->no_del)
    return false;
  struct kt_bytes k = g->kv.key, lo = {(const uint8_t *)w->key, w->kn};
  if (!w->en)
    return k.n == lo.n && !memcmp(k.p, lo.p, k.n);
  return kt_bytes_cmp(k, lo) >= 0 &&
         ((w->en == 1 && !w->end[0]) ||
          kt_bytes_cmp(k, (struct kt_bytes){(const uint8_t *)w->end, w->en}) < 0);
}

/* The first event of w's range at global log index i or later (s->evn: none). */
static size_t watch_next(const struct sim *s, const struct sim_watch *w, size_t i) {
  while (i < s->evn && !watch_covers(w, &s->ev[i]))
    i++;
  return i;
}

static bool kv_same(const struct kt_kv *a, const struct kt_kv *b) {
  return a->key.n == b->key.n && a->value.n == b->value.n &&
         !memcmp(a->key.p, b->key.p, a->key.n) &&
         (!a->value.n || !memcmp(a->value.p, b->value.p, a->value.n)) &&
         a->create_revision == b->create_revision && a->mod_revision == b->mod_revision &&
         a->version == b->version && a->lease == b->lease;
}

static const char *ev_str(char *buf, size_t n, uint8_t type, const struct kt_kv *kv, bool has_prev,
                          const struct kt_kv *prev) {
  snprintf(buf, n, "%s %.*s=%.*s (c %lld m %lld v %lld lease %lld)%s%.*s",
           type == KT_EVENT_PUT ? "put" : "delete", (int)kv->key.n,
           kv->key.n ? (const char *)kv->key.p : "", (int)kv->value.n,
           kv->value.n ? (const char *)kv->value.p : "", (long long)kv->create_revision,
           (long long)kv->mod_revision, (long long)kv->version, (long long)kv->lease,
           has_prev ? " prev " : "", has_prev ? (int)prev->value.n : 0,
           has_prev && prev->value.n ? (const char *)prev->value.p : "");
  return buf;
}

static const char *watch_str(const struct sim_watch *w, char *buf, size_t n) {
  const char *end = !w->en ? "" : w->en == 1 && !w->end[0] ? ", \\0" : NULL;
  snprintf(buf, n, "watch [%s%s%.*s) of n%llu%s%s%s%s", w->key, end ? end : ", ",
           end ? 0 : (int)w->en, end ? "" : w->end, (unsigned long long)w->member,
           w->no_put ? " no_put" : "", w->no_del ? " no_delete" : "", w->prev_kv ? " prev_kv" : "",
           w->slow ? " slow" : "");
  return buf;
}

/* Attaches w to nd from w->next_rev, as the node's watch_create: a start
 * beyond the member's revision + 1 (it lags the member the client left) is
 * served from now, events below it dropped. */
static void watch_attach(struct sim *s, struct sim_watch *w, struct sim_node *nd) {
  struct kt_watch_opts o = {.key = {(const uint8_t *)w->key, w->kn},
                            .range_end = {(const uint8_t *)w->end, w->en},
                            .no_put = w->no_put,
                            .no_delete = w->no_del,
                            .prev_kv = w->prev_kv,
                            .max_pending = w->max_pending};
  int64_t hrev = kt_watch_revision(nd->hub);
  w->min_rev = w->next_rev > hrev + 1 ? w->next_rev : 0;
  o.start_revision = w->min_rev ? 0 : w->next_rev;
  /* etcd's rule: compaction at C removes the revisions below C */
  w->must_cancel = !w->min_rev && w->next_rev < kt_mvcc_compact_revision(nd->store);
  w->member = nd->id;
  w->pos = KT_MAX(w->pos, glog_first(s, w->next_rev));
  struct kt_err e = {0};
  char b[128];
  if (kt_watch_create(nd->hub, &o, NULL, &w->hub_id, &e))
    sim_fail(s, "%s from revision %lld refused: %s", watch_str(w, b, sizeof b),
             (long long)w->next_rev, e.msg);
}

/* The member a (re)attaching watch client goes to: a random one (the
 * leader once the chaos is over); NULL if it is down. */
static struct sim_node *watch_member(struct sim *s, bool chaos) {
  int lead = chaos ? -1 : find_leader(s);
  struct sim_node *nd = lead >= 0 ? &s->nodes[lead] : node_of(s, random_member(s));
  return nd && nd->alive && !nd->removed ? nd : NULL;
}

/* A new watch client: a random range and options, from now, from an older
 * revision, or from a compacted one (which must be cancelled). */
static void watch_new(struct sim *s, struct sim_watch *w) {
  struct sim_node *nd = watch_member(s, true);
  if (!nd) {
    w->next_at = s->now + 10;
    return;
  }
  int r = (int)kt_rng_below(&s->rng, sizeof WATCH_RANGES / sizeof WATCH_RANGES[0]);
  *w = (struct sim_watch){.active = true,
                          .key = WATCH_RANGES[r].key,
                          .kn = (uint32_t)strlen(WATCH_RANGES[r].key),
                          .end = WATCH_RANGES[r].end,
                          .en = WATCH_RANGES[r].en};
  w->no_put = chance(s, 100);
  w->no_del = !w->no_put && chance(s, 100);
  w->prev_kv = chance(s, 300);
  w->slow = chance(s, 300);
  w->max_pending = w->slow ? 1 + (uint32_t)kt_rng_below(&s->rng, 4) : 0;
  int64_t rev = kt_mvcc_revision(nd->store), crev = kt_mvcc_compact_revision(nd->store);
  uint64_t how = kt_rng_below(&s->rng, 4);
  if (how == 0 && rev > crev)
    w->next_rev = crev + 1 + (int64_t)kt_rng_below(&s->rng, (uint64_t)(rev - crev));
  else if (how == 1 && crev >= 1)
    w->next_rev = 1 + (int64_t)kt_rng_below(&s->rng, (uint64_t)crev);
  else
    w->next_rev = kt_watch_revision(nd->hub) + 1; /* from now */
  s->watch_creates++;
  s->st.watch_created++;
  watch_attach(s, w, nd);
}

/* One event taken from the hub: it must be the next event of w's range in
 * the committed history (no gap, no duplicate, in order), with its prev_kv
 * when asked. */
static void watch_deliver(struct sim *s, struct sim_watch *w, const struct kt_event *ev) {
  char b[128], x[160], y[160];
  if (w->must_cancel) {
    sim_fail(s, "%s asked for compacted revision %lld: got %s, not a cancel",
             watch_str(w, b, sizeof b), (long long)w->next_rev,
             ev_str(x, sizeof x, ev->type, &ev->kv, ev->has_prev_kv, &ev->prev_kv));
    return;
  }
  size_t j = watch_next(s, w, w->pos);
  const struct gev *g = j < s->evn ? &s->ev[j] : NULL;
  /* A watch replayed from the member's compaction revision C (served, as
   * etcd) gets C without its deletes: compaction at C removed tombstones at
   * C. Such a delete may be missing, never any other event. */
  int64_t crev = kt_mvcc_compact_revision(node_of(s, w->member)->store);
  while (g && g->type == KT_EVENT_DELETE && g->kv.mod_revision <= crev &&
         (g->type != ev->type || !kv_same(&g->kv, &ev->kv))) {
    j = watch_next(s, w, j + 1);
    g = j < s->evn ? &s->ev[j] : NULL;
  }
  /* ... and their prev_kv (at C - 1, compacted) is absent, as etcd's. */
  bool want_prev =
      w->prev_kv && g && g->has_prev && !(g->kv.mod_revision <= crev && !ev->has_prev_kv);
  if (!g || g->type != ev->type || !kv_same(&g->kv, &ev->kv) || ev->has_prev_kv != want_prev ||
      (ev->has_prev_kv && !kv_same(&g->prev, &ev->prev_kv))) {
    sim_fail(s, "%s: got %s, expected %s", watch_str(w, b, sizeof b),
             ev_str(x, sizeof x, ev->type, &ev->kv, ev->has_prev_kv, &ev->prev_kv),
             g ? ev_str(y, sizeof y, g->type, &g->kv, w->prev_kv && g->has_prev, &g->prev)
               : "nothing");
    return;
  }
  w->pos = j + 1;
  w->next_rev = ev->kv.mod_revision + 1;
  s->st.watch_events++;
}

/* The hub cancelled w (take: -KT_ECOMPACTED): only if a revision it needs
 * was compacted (on a lagging member served from now, the hub's own start
 * may be the compacted one: allowed), never beyond the member's compaction. */
static void watch_cancelled(struct sim *s, struct sim_watch *w, struct sim_node *nd, int k,
                            int64_t crev) {
  char b[128];
  if (k != -KT_ECOMPACTED || crev > kt_mvcc_compact_revision(nd->store) ||
      (crev <= w->next_rev && !w->min_rev)) {
    sim_fail(s, "%s cancelled (%s) at compact revision %lld (the member's %lld), wants %lld",
             watch_str(w, b, sizeof b), kt_strerror(-k), (long long)crev,
             (long long)kt_mvcc_compact_revision(nd->store), (long long)w->next_rev);
    return;
  }
  s->st.watch_compacted++;
  w->active = false;
  w->next_at = s->now + 10 * (1 + kt_rng_below(&s->rng, 20));
}

/* Delivery as the node's drain_one: events taken until none is ready or the
 * limit is reached at a revision's end (a revision is never split), those
 * below the start it asked for dropped. After a batch the last revision's
 * events must all have come (they are made ready together). */
static void watch_take(struct sim *s, struct sim_watch *w, struct sim_node *nd, int limit) {
  struct kt_event evs[8];
  int got = 0;
  int64_t last = 0;
  for (;;) {
    kt_arena_reset(&s->warena);
    int64_t crev = 0;
    int k = kt_watch_take(nd->hub, w->hub_id, evs, 8, &s->warena, &crev);
    if (k < 0) {
      watch_cancelled(s, w, nd, k, crev);
      return;
    }
    for (int i = 0; i < k && !s->failed; i++) {
      if (evs[i].kv.mod_revision < w->min_rev)
        continue;
      watch_deliver(s, w, &evs[i]);
      last = evs[i].kv.mod_revision;
      got++;
    }
    int64_t next = kt_watch_next_rev(nd->hub, w->hub_id);
    if (s->failed || !next || (got >= limit && next != last))
      break;
  }
  size_t j = watch_next(s, w, w->pos);
  if (got && !s->failed && j < s->evn && s->ev[j].kv.mod_revision == last) {
    char b[128], x[160];
    sim_fail(s, "%s: revision %lld split, %s not delivered with the rest",
             watch_str(w, b, sizeof b), (long long)last,
             ev_str(x, sizeof x, s->ev[j].type, &s->ev[j].kv, false, NULL));
  }
}

/* Once per tick: each hub's catch-up step (a small budget in the chaos, so
 * history passes take several steps), then each watch client: a lost one
 * (its member crashed, was removed, knows no leader and the client gives
 * up, or just reconnects) resumes elsewhere from its next revision; the
 * others take what is ready (slow ones now and then, a few events). */
static void watches_tick(struct sim *s, bool chaos) {
  for (int i = 0; i < s->n_nodes; i++)
    if (s->nodes[i].alive)
      (void)kt_watch_step(s->nodes[i].hub, chaos ? 8 : 4096);
  for (int i = 0; i < SIM_WATCHES && !s->failed; i++) {
    struct sim_watch *w = &s->watches[i];
    if (!w->active) {
      if (chaos && s->now >= w->next_at && s->watch_creates < 10 * SIM_WATCHES)
        watch_new(s, w);
      continue;
    }
    struct sim_node *nd = node_of(s, w->member);
    bool lost = !w->hub_id || !nd->alive || nd->removed;
    if (!lost && chaos && (chance(s, 5) || (!kt_raft_leader(nd->r) && chance(s, 30)))) {
      kt_watch_cancel(nd->hub, w->hub_id); /* the client gives up on it */
      lost = true;
    }
    if (lost) {
      w->hub_id = 0;
      struct sim_node *to = watch_member(s, chaos);
      if (to) {
        s->st.watch_resumed++;
        watch_attach(s, w, to);
      }
      continue;
    }
    if (w->slow && chaos && s->now < w->next_at)
      continue;
    watch_take(s, w, nd, w->slow && chaos ? 2 : 1 << 30);
    w->next_at = s->now + 10 * (1 + kt_rng_below(&s->rng, 5));
  }
}

/* The first event w should have had from its member by now (NULL: none). */
static const struct gev *watch_missing(struct sim *s, const struct sim_watch *w) {
  const struct sim_node *nd = node_of(s, w->member);
  size_t j = watch_next(s, w, w->pos);
  while (j < s->evn && s->ev[j].type == KT_EVENT_DELETE &&
         s->ev[j].kv.mod_revision <= kt_mvcc_compact_revision(nd->store))
    j = watch_next(s, w, j + 1); /* see watch_deliver */
  return j < s->evn && nd->alive && s->ev[j].kv.mod_revision <= kt_mvcc_revision(nd->store)
             ? &s->ev[j]
             : NULL;
}

/* At the end (healed, leases drained): every watch client moves to the
 * leader's configuration and catches up; it must have had every event of
 * its range up to its member's revision, and one that asked for a
 * compacted revision must have been cancelled. */
static void watch_final(struct sim *s) {
  int lead = find_leader(s);
  struct sim_conf c = lead >= 0 ? conf_of_raft(s->nodes[lead].r) : (struct sim_conf){0};
  for (int i = 0; i < SIM_WATCHES; i++) {
    struct sim_watch *w = &s->watches[i];
    struct sim_node *nd = node_of(s, w->member);
    if (w->active && w->hub_id && !conf_has(&c, w->member)) {
      if (nd->alive)
        kt_watch_cancel(nd->hub, w->hub_id);
      w->hub_id = 0;
    }
  }
  for (int t = 0; t < 200 && !s->failed; t++) {
    bool done = true;
    for (int i = 0; i < SIM_WATCHES; i++) {
      const struct sim_watch *w = &s->watches[i];
      done &= !w->active || (w->hub_id && !w->must_cancel && !watch_missing(s, w));
    }
    if (done)
      break;
    for (int u = 0; u < 10 && !s->failed; u++)
      sim_unit(s, false);
  }
  for (int i = 0; i < SIM_WATCHES && !s->failed; i++) {
    const struct sim_watch *w = &s->watches[i];
    const struct gev *g = w->active ? watch_missing(s, w) : NULL;
    char b[128], x[160];
    if (w->active && !w->hub_id)
      sim_fail(s, "%s: not attached 200 ticks after healing", watch_str(w, b, sizeof b));
    else if (w->active && w->must_cancel)
      sim_fail(s, "%s asked for compacted revision %lld: never cancelled",
               watch_str(w, b, sizeof b), (long long)w->next_rev);
    else if (g)
      sim_fail(s, "%s never got %s (its member is at revision %lld)", watch_str(w, b, sizeof b),
               ev_str(x, sizeof x, g->type, &g->kv, false, NULL),
               (long long)kt_mvcc_revision(node_of(s, w->member)->store));
  }
}

/* ---- lease clients and the leaders' expiry */

/* The leader answers a keep-alive (the node's answer(): kt_lease_keepalive
 * on its timers). A renewal by the newest leader (no later term has a
 * leader) must be honored by every leader after it; one by a stale leader
 * only under check_quorum (see the header). */
static int lease_renew(struct sim *s, struct sim_node *nd, int64_t id) {
  int64_t now_ms = (int64_t)s->now * MS_PER_UNIT, ttl = 0;
  int rc;
  if (s->o.member_bug == SIM_BUG_LEASE_NO_RENEW) { /* acknowledged, not renewed */
    struct kt_lease_info li = {0};
    rc = kt_lease_ttl(nd->leases, id, now_ms, &li);
    rc = rc ? rc : li.remaining_ms > 0 ? 0 : KT_ELEASENOTFOUND;
    ttl = li.granted_ttl_s;
  } else {
    rc = kt_lease_keepalive(nd->leases, id, now_ms, &ttl);
  }
  struct lease_truth *t = lease_truth(s, id);
  if (rc || !t)
    return rc ? rc : KT_ELEASENOTFOUND;
  s->st.lease_renewals++;
  int64_t until = now_ms + ttl * 1000;
  if (kt_raft_term(nd->r) >= s->top_term) {
    t->honored_ms = KT_MAX(t->honored_ms, until);
  } else {
    t->stale_ms = KT_MAX(t->stale_ms, until);
    t->stale_by = nd->id;
    t->stale_at = now_ms;
    s->st.lease_stale_renewals++;
  }
  t->renew_by = nd->id;
  t->renew_ms = t->by_ms[nd->id] = now_ms;
  t->by_epoch[nd->id] = nd->promote_ms;
  return 0;
}

/* A lease client's keep-alive through its member nd (the node's
 * kt_node_lease_request): the leader answers at once; a follower forwards
 * it to the leader it knows (delayed, cut and dropped like a message), whose
 * answer counts when it gets there. Returns 0 (renewed or forwarded),
 * KT_ELEASENOTFOUND (gone) or KT_ENOLEADER. */
static int lease_keepalive(struct sim *s, struct sim_node *nd, int lessee, int64_t id) {
  if (kt_lease_is_leader(nd->leases))
    return lease_renew(s, nd, id);
  uint64_t to = kt_raft_leader(nd->r);
  struct sim_node *ld = node_of(s, to);
  if (!ld || to == nd->id)
    return KT_ENOLEADER;
  if (ld->group == nd->group && !s->oneway[nd->id][to] && !chance(s, s->drop_pct)) {
    GROW(s->fwd, s->fwdn, s->fwdcap);
    s->fwd[s->fwdn++] =
        (struct fwd_ka){s->now + 1 + kt_rng_below(&s->rng, s->max_delay), to, id, lessee};
  }
  return 0;
}

/* A lease client hears its keep-alive's answer: gone, or ask another member. */
static void lessee_answer(struct sim *s, struct sim_lessee *c, int64_t id, int rc) {
  if (c->state != LS_HOLDING || c->id != id || !rc)
    return;
  if (rc == KT_ENOLEADER) {
    c->member = random_member(s);
    return;
  }
  c->state = LS_IDLE;
  c->next_at = s->now + 10 * kt_rng_below(&s->rng, 10);
}

/* Forwarded keep-alives that reached their leader. */
static void lease_fwd_tick(struct sim *s) {
  size_t k = 0;
  for (size_t i = 0; i < s->fwdn; i++) {
    struct fwd_ka f = s->fwd[i];
    struct sim_node *ld = node_of(s, f.to);
    if (f.at > s->now) {
      s->fwd[k++] = f;
    } else if (ld->alive) {
      int rc = kt_lease_is_leader(ld->leases) ? lease_renew(s, ld, f.id) : KT_ENOLEADER;
      s->st.lease_renewals_fwd += rc == 0;
      lessee_answer(s, &s->lessees[f.lessee], f.id, rc);
    }
  }
  s->fwdn = k;
}

/* A put of one of the lease keys "l0".."l7" with c's lease (fire and
 * forget: its outcome is in the global event log). */
static void lessee_put(struct sim *s, struct sim_lessee *c, struct sim_node *nd) {
  char key[4], val[24];
  snprintf(key, sizeof key, "%c%d", LEASE_KEY_PREFIX, (int)kt_rng_below(&s->rng, 8));
  snprintf(val, sizeof val, "lv%llu", (unsigned long long)++s->next_val);
  struct kt_req req = {.type = KT_MSG_PUT};
  req.u.op = (struct kt_request_op){.type = KT_OP_PUT,
                                    .u.put = {.key = B(key), .value = B(val), .lease = c->id}};
  uint64_t idx;
  if (propose_req(s, nd, &req, ++s->next_seq, &idx) == 0)
    process_ready(s, nd);
}

static void lessee_grant(struct sim *s, struct sim_lessee *c, struct sim_node *nd) {
  GROW(s->lt, s->ltn, s->ltcap);
  s->lt[s->ltn++] = (struct lease_truth){.ttl_s = 2 + (int64_t)kt_rng_below(&s->rng, 4)};
  c->id = LEASE_ID0 + (int64_t)s->ltn - 1;
  struct kt_req req = {.type = KT_MSG_LEASE_GRANT};
  req.u.lease.id = c->id;
  req.u.lease.ttl = s->lt[s->ltn - 1].ttl_s;
  uint64_t idx;
  if (propose_req(s, nd, &req, ++s->next_seq, &idx)) { /* refused: no leader */
    c->member = random_member(s);
    c->next_at = s->now + 10;
    return;
  }
  c->state = LS_GRANTING;
  c->deadline = s->now + CLIENT_TIMEOUT;
  process_ready(s, nd);
}

/* Once per tick: each lease client grants a lease (TTL 2..5 s) on its
 * member, waits for it to be applied there (its answer), puts keys with it,
 * keeps it alive every TTL/3 for up to three TTLs (or not at all), then
 * walks away and lets it expire. A client whose member is down goes to
 * another one (a grant in flight is forgotten: if it commits, nobody keeps
 * that lease alive). Only while `issue`: afterwards nobody keeps a lease
 * alive. */
static void lessees_tick(struct sim *s, bool issue) {
  for (int i = 0; i < SIM_LESSEES && !s->failed; i++) {
    struct sim_lessee *c = &s->lessees[i];
    struct sim_node *nd = node_of(s, c->member);
    if (!nd || !nd->alive || nd->removed) { /* keeps a held lease alive elsewhere */
      c->member = random_member(s);
      c->state = c->state == LS_HOLDING ? LS_HOLDING : LS_IDLE;
      continue;
    }
    struct lease_truth *t = lease_truth(s, c->id);
    if (c->state == LS_IDLE) {
      if (issue && s->now >= c->next_at && s->ltn < 40)
        lessee_grant(s, c, nd);
    } else if (c->state == LS_GRANTING) {
      if (kt_lease_exists(nd->leases, c->id)) {
        c->state = LS_HOLDING;
        c->keep_until = s->now + 10 * kt_rng_below(&s->rng, (uint64_t)t->ttl_s * 30);
        c->next_ka = s->now + (uint64_t)t->ttl_s * 100 / 3;
        lessee_put(s, c, nd);
      } else if (s->now >= c->deadline) {
        c->state = LS_IDLE;
      }
    } else if (!issue || s->now >= c->keep_until) {
      c->state = LS_IDLE; /* walks away: the lease expires */
      c->next_at = s->now + 10 * kt_rng_below(&s->rng, 30);
    } else {
      if (chance(s, 30))
        lessee_put(s, c, nd);
      if (s->now >= c->next_ka) {
        c->next_ka = s->now + (uint64_t)t->ttl_s * 100 / 3;
        lessee_answer(s, c, c->id, lease_keepalive(s, nd, i, c->id));
      }
    }
  }
}

/* The rule the node's leader implements (core/lease.c): a lease expires a
 * TTL after its last renewal by this leader in this term of service (a
 * renewal sets now + TTL, replacing the extension, as etcd's Renew); if
 * none, a TTL after its grant applied while this leader served; else a TTL
 * and an election timeout after this leader's promotion. */
static void lease_check_expiry(struct sim *s, struct sim_node *nd, int64_t id, int64_t now_ms) {
  struct lease_truth *t = lease_truth(s, id);
  if (!t)
    return;
  int64_t ttl_ms = t->ttl_s * 1000;
  bool renewed = t->by_ms[nd->id] && t->by_epoch[nd->id] == nd->promote_ms;
  int64_t due = renewed                           ? t->by_ms[nd->id] + ttl_ms
                : t->granted_ms >= nd->promote_ms ? t->granted_ms + ttl_ms
                                                  : nd->promote_ms + ttl_ms + ELECTION_MS;
  if (now_ms < due)
    sim_fail(s,
             "leader n%llu expires lease %lld (TTL %llds) at %lld ms, due at %lld ms: promoted "
             "at %lld ms, granted at %lld ms, renewed by it at %lld ms (last by n%llu at %lld ms)",
             (unsigned long long)nd->id, (long long)id, (long long)t->ttl_s, (long long)now_ms,
             (long long)due, (long long)nd->promote_ms, (long long)t->granted_ms,
             (long long)t->by_ms[nd->id], (unsigned long long)t->renew_by, (long long)t->renew_ms);
}

/* The node's kt_node_lease_tick on every serving leader: expired leases
 * proposed for revocation (LEASE_REVOKE through raft), each checked
 * against the leader's rule first. */
static void lease_expiry_tick(struct sim *s) {
  int64_t now_ms = (int64_t)s->now * MS_PER_UNIT;
  for (int i = 0; i < s->n_nodes && !s->failed; i++) {
    struct sim_node *nd = &s->nodes[i];
    if (!nd->alive || !kt_lease_is_leader(nd->leases))
      continue;
    int64_t ids[16];
    size_t k = kt_lease_expired(nd->leases, now_ms, 16, ids);
    for (size_t j = 0; j < k; j++) {
      lease_check_expiry(s, nd, ids[j], now_ms);
      struct kt_req req = {.type = KT_MSG_LEASE_REVOKE};
      req.u.lease.id = ids[j];
      uint64_t idx;
      (void)propose_req(s, nd, &req, ++s->next_seq, &idx);
    }
    if (k)
      process_ready(s, nd);
  }
}

/* Liveness: nobody keeps a lease alive any more (the clients stopped with
 * the chaos); with the cluster healed every lease is revoked on every member
 * of the leader's configuration within 400 ticks. */
static void lease_final(struct sim *s) {
  uint64_t until = s->now + 10 * 400;
  int left = -1;
  while (!s->failed && s->now < until) {
    sim_unit(s, false);
    int lead = s->now % 10 ? -1 : find_leader(s);
    if (lead < 0)
      continue;
    struct sim_conf c = conf_of_raft(s->nodes[lead].r);
    left = -1;
    for (int i = 0; i < s->n_nodes && left < 0; i++)
      if (conf_has(&c, (uint64_t)i + 1) &&
          (!s->nodes[i].alive || kt_lease_count(s->nodes[i].leases)))
        left = i;
    if (left < 0)
      break;
  }
  if (!s->failed && left >= 0)
    sim_fail(s, "lease liveness: n%d still has %zu lease(s) 400 ticks after healing", left + 1,
             s->nodes[left].alive ? kt_lease_count(s->nodes[left].leases) : 0);
  for (size_t i = 0; i < s->ltn && !s->failed; i++)
    if (s->lt[i].granted_ms && !s->lt[i].revoked)
      sim_fail(s, "lease %lld granted at %lld ms was never revoked", (long long)(LEASE_ID0 + i),
               (long long)s->lt[i].granted_ms);
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
      install_snapshot(s, to, nm.snap_index, nm.snap_term, &c, nm.sm);
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
    snap_unref(nm.sm);
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
  /* once per tick: clients, the physical compaction steps, faults */
  clients_tick(s, chaos);
  lessees_tick(s, chaos);
  lease_fwd_tick(s);
  lease_expiry_tick(s);
  watches_tick(s, chaos);
  for (int i = 0; i < s->n_nodes; i++)
    if (s->nodes[i].alive)
      (void)kt_mvcc_compact_step(s->nodes[i].store, 4);
  if (!chaos || s->failed)
    return;
  struct sim_node *nd;
  if (chance(s, 25))
    propose_compaction(s);
  if (chance(s, 20))
    propose_auth_change(s);
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
  } else if (chance(s, 20)) { /* swizzle: one member rejoins, its cuts heal */
    int k = (int)kt_rng_below(&s->rng, (uint64_t)s->n_nodes);
    s->nodes[k].group = 0;
    for (int i = 0; i <= SIM_MAX_N; i++)
      s->oneway[k + 1][i] = s->oneway[i][k + 1] = false;
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
    sm_close(nd);
    snap_unref(nd->snap_sm);
    kt_buf_free(&nd->wal);
  }
  for (size_t i = 0; i < s->hn; i++) {
    free(s->heap[i].p);
    snap_unref(s->heap[i].sm);
  }
  free(s->heap);
  for (size_t i = 0; i < s->gn; i++)
    free(s->g[i].data);
  free(s->g);
  free(s->leader_of);
  free(s->reads);
  free(s->failed_snaps);
  kt_buf_free(&s->enc);
  kt_buf_free(&s->body);
  kt_buf_free(&s->enc2);
  kt_buf_free(&s->wbytes);
  kt_buf_free(&s->body2);
  kt_arena_free(&s->arena);
  kt_arena_free(&s->apply_arena);
  kt_linz_free(s->hist);
  free(s->ev);
  kt_arena_free(&s->ev_arena);
  kt_arena_free(&s->warena);
  free(s->rev_off);
  free(s->rev_lease);
  free(s->lt);
  free(s->fwd);
  free(s->unknown_w);
  free(s->seq_committed);
}

/* Every acknowledged write is visible: once the cluster is healed, one
 * linearizable get per key on the leader (the checker then places them
 * after everything that returned before). A get lost to a leader change
 * (the healed cluster may still hold an election) is asked again of the
 * new leader, within 600 ticks. */
static void final_reads(struct sim *s) {
  uint64_t until = s->now + 10 * 600;
  for (int k = 0; k < SIM_KEYS; k++)
    s->clients[s->n_clients + k].outcome = CL_NONE;
  while (!s->failed && s->now < until) {
    int lead = find_leader(s);
    bool done = true;
    for (int k = 0; k < SIM_KEYS && !s->failed; k++) {
      struct sim_client *c = &s->clients[s->n_clients + k];
      done &= c->outcome == CL_OK;
      if (c->state == CL_IDLE && c->outcome != CL_OK && lead >= 0 && s->now % 10 == 0) {
        c->member = (uint64_t)lead + 1;
        client_get(s, c, &s->nodes[lead], k, false);
      }
    }
    if (done)
      return;
    sim_unit(s, false);
  }
  for (int k = 0; k < SIM_KEYS && !s->failed; k++)
    if (s->clients[s->n_clients + k].outcome != CL_OK)
      sim_fail(s, "final linearizable get of %s: no answer in 600 ticks", SIM_KEY[k]);
}

/* The client history must be linearizable (test/sim/linz.h). */
static void check_history(struct sim *s) {
  for (size_t i = 0; i < s->n_unknown_w; i++) {
    uint64_t seq = s->unknown_w[i].seq;
    if (seq < s->seq_cap && s->seq_committed[seq]) {
      kt_linz_unknown(s->hist, s->unknown_w[i].lid);
    } else {
      kt_linz_fail(s->hist, s->unknown_w[i].lid);
      s->st.ops_never_committed++;
    }
  }
  struct kt_linz_report *rep = malloc(sizeof *rep);
  kt_assert(rep);
  int v = kt_linz_check(s->hist, 0, rep);
  s->st.ops += rep->ops;
  s->st.ops_unknown += rep->unknown;
  s->st.sreads += rep->sreads;
  s->st.linz_steps += rep->steps;
  if (v == KT_LINZ_VIOLATION)
    sim_fail(s, "not linearizable (%u ops, %u unknown):\n%s", rep->ops, rep->unknown, rep->explain);
  else if (v == KT_LINZ_GAVE_UP) {
    s->st.linz_gave_up++;
    sim_fail(s, "linearizability checker GAVE UP after %llu steps (%u ops, %u unknown): %s",
             (unsigned long long)rep->steps, rep->ops, rep->unknown, rep->explain);
  }
  free(rep);
}

/* Runs one seed. Returns 0 if every check held, else 1 with why filled. */
static int sim_run(const struct sim_opts *o, struct sim_stats *st, char *why, size_t why_n) {
  struct sim *s = calloc(1, sizeof *s);
  kt_assert(s);
  s->o = *o;
  kt_assert(o->n >= 1 && o->n <= SIM_MAX_N);
  kt_rng_seed(&s->rng, o->seed);
  s->ev_rev = 1; /* an empty store is at revision 1 */
  rev_reserve(s, 1);
  s->rev_lease[0] = s->rev_lease[1] = 0;
  s->drop_pct = (uint32_t)kt_rng_below(&s->rng, 100);     /* 0..10% */
  s->dup_pct = (uint32_t)kt_rng_below(&s->rng, 50);       /* 0..5% */
  s->max_delay = 1 + (uint32_t)kt_rng_below(&s->rng, 30); /* up to 3 ticks */
  s->pre_vote = kt_rng_below(&s->rng, 4) != 0;
  s->check_quorum = kt_rng_below(&s->rng, 4) != 0;
  s->hist = kt_linz_new(1);
  s->max_ops = o->max_ops ? o->max_ops : 300;
  s->n_clients = o->clients ? o->clients : 3 + (int)kt_rng_below(&s->rng, 3);
  kt_assert(s->n_clients <= SIM_MAX_CLIENTS);
  for (int i = 0; i < s->n_clients; i++)
    s->clients[i].member = 1 + kt_rng_below(&s->rng, (uint64_t)o->n);
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
      /* a delete of a key nobody writes: applied, the revision stays */
      struct kt_req req = {.type = KT_MSG_DELETE};
      req.u.op = (struct kt_request_op){.type = KT_OP_DELETE, .u.del = {.key = B("zz")}};
      if (propose_req(s, &s->nodes[lead], &req, ++s->next_seq, &goal) == 0)
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
  if (!s->failed)
    final_reads(s);
  if (!s->failed)
    lease_final(s);
  if (!s->failed)
    watch_final(s);
  if (!s->failed)
    check_history(s);
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
