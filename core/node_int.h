/* core/node_int.h — the member's state, shared by the files of the node:
 * node.c (requests, raft, WAL, snapshots, recovery), node_lease.c (leases:
 * apply, leader expiry, keep-alive/time-to-live forwarded to the leader) and
 * node_watch.c (watch streams on client connections). Not a public header:
 * struct kt_node has one owner per field group, named in comments. */
#ifndef KT_NODE_INT_H
#define KT_NODE_INT_H

#include <ev.h>
#include <string.h>

#include "../net/peerlink.h"
#include "../net/proto.h"
#include "../net/server.h"
#include "../snap/snap.h"
#include "../wal/wal.h"
#include "apply.h"
#include "auth.h"
#include "lease.h"
#include "mvcc.h"
#include "node.h"
#include "raft.h"
#include "reads.h"
#include "stats.h"
#include "watch.h"

/* WAL record types written by the node (the record's index is the entry's). */
enum {
  REC_ENTRY = 2,     /* term u64 BE | entry type u8 | data (a client request body) */
  REC_HARDSTATE = 3, /* term u64 | vote u64 | commit u64 (BE) */
};
#define ENTRY_HDR 9
/* An entry's data: origin member id u64 | proposal seq u64 | request body.
 * The member that proposed it answers its client when it applies it. */
#define DATA_HDR 16
#define READ_MAX 65536           /* linearizable reads waiting for their read index */
#define RAFT_KEEP_ENTRIES 100000 /* applied entries kept for lagging followers */
#define DEFER_MAX 65536          /* requests waiting for a leader */

#define SNAP_SLICE_KEYS 256
#define SNAP_MAX_INFLIGHT 16
#define COMPACT_SLICE_KEYS 4096
#define SNAP_KEEP 2
#define META_MAGIC "KTMEMBER"

/* A client write proposed to raft, waiting for its entry to be applied. */
/* The outcome of an internal proposal (node_lock.c): rc 0 and res once
 * applied (res NULL for non-KV types), or the error (EUNKNOWN when the
 * proposal was lost, ENOSPACE...). Called once. */
typedef void (*kt_node_done_fn)(struct kt_node *n, void *ctx, int rc, const struct kt_err *e,
                                const struct kt_response_op *res);

/* A FIFO of structs with a head, grown or slid down in place. */
#define FIFO_PUSH(arr, head, n, cap, item)                                                         \
  do {                                                                                             \
    if ((n) == (cap)) {                                                                            \
      if ((head) > (n) / 2) {                                                                      \
        memmove((arr), (arr) + (head), ((n) - (head)) * sizeof *(arr));                            \
        (n) -= (head);                                                                             \
        (head) = 0;                                                                                \
      } else {                                                                                     \
        (cap) = (cap) ? (cap)*2 : 256;                                                             \
        (arr) = realloc((arr), (cap) * sizeof *(arr));                                             \
        kt_assert(arr);                                                                            \
      }                                                                                            \
    }                                                                                              \
    (arr)[(n)++] = (item);                                                                         \
  } while (0)

#define SEQ_MASK ((1ull << 40) - 1) /* a seq: run id (24 bits) | counter (40 bits) */

struct deferred_prop {
  struct kt_buf body;
  kt_node_done_fn done;
  void *ctx;
};

/* A PUT as it was decoded when it arrived, kept with its proposal so that
 * its entry is not decoded again when it applies here (core/node.c,
 * apply_committed). The body is the entry's tail, byte for byte, so its
 * key and value are kept as offsets into the entry. */
struct pending_put {
  uint32_t ent_len;                      /* the entry's length; 0: nothing kept */
  uint32_t body_off, key_off, value_off; /* in the entry's data */
  uint64_t auth_revision;                /* AUTHED: the revision it was checked at; 0: not AUTHED */
  struct kt_put_req put;                 /* key.p and value.p unset: the offsets above */
};

struct pending {
  uint64_t seq; /* this member's proposal number (in the entry's data) */
  ev_tstamp since;
  struct kt_conn *conn; /* NULL for the member's own proposals */
  uint64_t req_id;
  kt_node_done_fn done; /* instead of conn: an internal proposal */
  void *ctx;
  struct pending_put put;
};

/* A request kept with a copy of its body until it can run: a linearizable
 * read waiting for its read index (several members), or any request waiting
 * for the member to serve. */
struct held {
  struct kt_conn *conn; /* a client's (a reference held), or NULL: forwarded */
  uint64_t req_id;      /* the client's id, or the forwarding member's seq */
  uint64_t from;        /* forwarded by this member (a lease time-to-live), or 0 */
  uint64_t batch;       /* reads: the read batch it rides on (core/reads.h) */
  ev_tstamp since;
  size_t len; /* its body's bytes in the queue's `bodies`, in order */
  bool done;  /* answered with an error already: skipped */
  /* reads: the auth revision its caller's permission was checked at, or
   * UINT64_MAX (not checked yet: core/node.c serve_linearized) */
  uint64_t auth_rev;
};

struct held_queue {
  struct held *v;
  size_t n, cap, head; /* v[head..n) waiting */
  struct kt_buf bodies;
  size_t bodies_head;
};

/* A WAL batch part whose durability raft waits for. */
struct persisting {
  uint64_t seq;         /* WAL sequence of its last record */
  uint64_t term, index; /* last entry written (index 0: none) */
  bool has_hs;
  struct kt_raft_hard_state hs;
};

/* What the WAL holds after the snapshot: raft's restart state. */
struct replay {
  struct kt_node *n;
  struct kt_raft_hard_state hs;
  struct kt_raft_entry *ents;
  size_t n_ents, cap_ents;
  struct kt_arena data;
  uint64_t first_seen;
  struct kt_err *e;
};

/* Appends a WAL entry record (term | type | data, `len` bytes in all) to
 * the replayed log at index (the next one). */
void kt_node_replay_push(struct replay *r, uint64_t index, const uint8_t *rec, uint32_t len);

/* A member table as a snapshot carries it. */
struct kt_node_members {
  struct kt_node_member v[KT_NODE_MAX_MEMBERS];
  size_t n;
  uint64_t removed[64];
  size_t n_removed;
};

#define KT_NODE_MAX_ALARMS 64 /* (member, alarm) pairs */
/* The active alarms, as a snapshot carries them (node_maint.c). */
struct kt_node_alarms {
  struct kt_alarm_member v[KT_NODE_MAX_ALARMS];
  size_t n;
};

/* Who a request or a proposal comes from (core/node_auth.c): a user and the
 * auth revision its permissions were checked at, or the member itself. */
struct kt_node_ident {
  bool set;                        /* a user (auth enabled when it was checked) */
  bool member;                     /* the member's own */
  char user[KT_AUTH_NAME_MAX + 1]; /* user[0..user_len): the rest is not kept */
  uint32_t user_len;
  uint64_t rev;
};

/* Cleared and copied field by field: the gate does both per request, and
 * the whole 280-byte struct cost more than the permission check. */
static inline void kt_ident_clear(struct kt_node_ident *id) {
  id->set = id->member = false;
  id->user_len = 0;
  id->rev = 0;
}

static inline void kt_ident_copy(struct kt_node_ident *d, const struct kt_node_ident *s) {
  d->set = s->set;
  d->member = s->member;
  d->user_len = s->user_len;
  d->rev = s->rev;
  memcpy(d->user, s->user, s->user_len);
}

struct waiter { /* a physical compaction waiting for its slices */
  struct kt_conn *conn;
  uint64_t req_id;
};

/* Counters for /metrics (core/node_metrics.c): plain fields of the state
 * thread, incremented where the event happens, read only when scraped. */
struct kt_node_stats {
  uint64_t leader_changes;      /* a new non-zero leader seen */
  uint64_t proposals_failed;    /* our proposals failed (lost, timed out, no space) */
  uint64_t slow_applies;        /* an apply batch over 100 ms (etcd's warn threshold) */
  uint64_t heartbeat_fails;     /* heartbeats the transport refused */
  uint64_t puts, deletes, txns; /* applied (every member) */
  uint64_t ranges;              /* served by this member */
  uint64_t leases_granted;      /* applied */
  struct kt_hist apply_batch_s; /* seconds to apply one batch of committed entries */
  struct kt_hist snapshot_s;    /* seconds from a snapshot's start to its file on disk */
  struct kt_hist wal_batch;     /* entries per WAL sync (group commit) */
  double snap_started;          /* ev_now() when the snapshot in progress started */
  /* Round trips to each peer, timed on heartbeats: one probe at a time per
   * peer (the heartbeat's context, echoed by its response). */
  struct kt_node_rtt {
    uint64_t id, ctx;
    double sent; /* ev_time() of the probe's heartbeat; 0: none out */
    struct kt_hist h;
  } rtt[KT_NODE_MAX_MEMBERS];
  size_t n_rtt;
};

/* A /health linearizable read waiting for its batch (node_metrics.c). */
struct kt_node_probe {
  kt_node_probe_fn done;
  void *ctx;
  uint64_t batch;
  ev_tstamp since;
};

struct kt_node {
  struct ev_loop *loop;
  struct kt_node_stats stats;
  struct kt_node_probe probes[KT_NODE_MAX_PROBES];
  size_t n_probes;
  struct kt_node_config cfg;
  char member_dir[4096], wal_dir[4200], snap_dir[4200];
  uint64_t cluster_id, member_id;
  /* The membership (node_member.c): the table at the applied index, the
   * ids removed from it (never reused). */
  struct kt_node_member members[KT_NODE_MAX_MEMBERS];
  size_t n_members;
  uint64_t removed[64];
  size_t n_removed;
  struct node_member_state *mem;
  struct kt_peer_link *peers; /* NULL with one member */
  struct kt_mvcc *store;
  struct kt_wal *wal;
  struct kt_server *server;
  struct kt_arena arena, msg_arena;
  struct kt_buf scratch;
  struct kt_raft_ents_enc ents_enc; /* a ready batch's entries, encoded once for its appends */

  struct kt_raft *raft;
  uint64_t applied_index, applied_term; /* last entry applied to the store */
  uint64_t lead_index;                  /* first entry of our leadership: serve once applied */
  uint64_t wal_last_index;              /* index of the last entry appended to the WAL */
  bool serving;                         /* leader and lead_index applied */
  bool trimmed;                         /* malloc_trim after the recovery done */
  uint64_t known_leader;                /* 0 during an election */
  struct kt_raft_hard_state hs_synced;  /* last hard state appended with a sync */

  /* Proposed writes, in proposal order: pend[pend_head..n_pend). */
  struct pending *pend;
  size_t n_pend, cap_pend, pend_head;
  uint64_t next_seq;
  uint64_t run_id;              /* high 24 bits of every seq this run (never 0) */
  bool in_ready;                /* between kt_raft_ready and kt_raft_advance */
  struct deferred_prop *dprops; /* kt_node_propose_req calls made in_ready */
  size_t n_dprops;
  kt_node_done_fn next_done; /* for kt_node_propose_req's proposal */
  void *next_done_ctx;
  /* Linearizable reads (several members), in arrival order: the reads of
   * one loop turn share one read index; `rq` (core/reads.h) numbers the
   * batches and says when one may be served. */
  struct held_queue reads;
  struct kt_reads rq;
  /* WAL appends raft waits on, in order. */
  struct persisting *pers;
  size_t n_pers, cap_pers, pers_head;
  /* Requests that arrived while there was no leader (or before this leader
   * applied its first entry): run once the member serves, or failed with
   * ENOLEADER after two election timeouts. */
  struct held_queue defer;
  ev_timer tick_w;

  struct waiter *waiters;
  size_t n_waiters;

  /* Snapshot in progress. */
  struct kt_snap_writer *snap_w;
  struct kt_mvcc_cursor snap_cursor;
  struct kt_arena snap_arena;
  bool snap_iter_done, snap_finish_sent;
  uint64_t snap_index, last_snap_index, prev_snap_index;
  uint64_t durable_snap_index;     /* newest snapshot file complete on disk */
  struct node_install_state *inst; /* snapshot transfers (node_install.c) */
  uint64_t log_bytes_since_snap;   /* entry bytes applied since the last snapshot started */
  uint64_t snap_store_bytes;       /* store size when the last snapshot started / was loaded */
  int64_t snap_rev;

  /* Auto-compaction: (time, revision) samples, oldest first. */
  ev_timer compact_w;
  struct {
    ev_tstamp at;
    int64_t rev;
  } samples[16];
  int n_samples;

  ev_async wal_async, snap_async;
  ev_prepare prepare_w;
  ev_idle idle_w;
  /* A MOVE_LEADER waiting for the transferee to lead (one at a time). */
  struct {
    struct kt_conn *conn; /* NULL: none */
    uint64_t req_id, target;
    ev_tstamp since;
  } move;

  /* Leases (node_lease.c) and watch streams (node_watch.c). */
  struct kt_lease_mgr *leases;
  struct kt_watch_hub *watches;
  struct node_watch_state *ws;
  struct node_lease_state *ls;
  struct node_lock_state *lk;
  struct node_maint_state *mt; /* node_maint.c */
  /* Auth (node_auth.c): the replicated store, tokens and password workers;
   * prop_as: who the proposals made now are for (set around a request's
   * handling, cleared after). */
  struct kt_auth *auth;
  struct node_auth_state *as;
  struct kt_node_ident prop_as;

  bool snap_force; /* take a snapshot now (a new member needs one) */
  bool stopping;
  int wal_failed; /* KT_ENOSPACE: writes refused, reads go on */
  char wal_failed_msg[512];
  int fatal;
};

/* node.c */
void kt_node_header(const struct kt_node *n, struct kt_header *h);
/* Send r (its header filled here) to c; a no-op when c is closed. */
void kt_node_send(struct kt_node *n, struct kt_conn *c, struct kt_resp *r);
void kt_node_reply(struct kt_node *n, struct kt_conn *c, uint64_t id, uint8_t type,
                   const struct kt_response_op *op);
void kt_node_reply_err(struct kt_conn *c, uint64_t id, int code, const struct kt_err *e);
/* Propose a request body through raft (c NULL: the member's own). */
int kt_node_propose(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                    size_t body_len); /* 0, or the error already sent to c */
/* Every proposal of ours still waiting fails with code (the clients hear it). */
void kt_node_fail_pending(struct kt_node *n, int code, const char *msg);
/* Propose req (encoded here); done(ctx, ...) runs once with the outcome. */
void kt_node_propose_req(struct kt_node *n, const struct kt_req *req, kt_node_done_fn done,
                         void *ctx);

/* Propose a membership change body (a CONF entry); done runs once. */
void kt_node_propose_conf(struct kt_node *n, const uint8_t *body, size_t len, kt_node_done_fn done,
                          void *ctx);
/* Stop the member: a fatal condition (failed fsync, removed from the cluster). */
void kt_node_stop_fatal(struct kt_node *n, int code, const char *what);
/* Stop because this member was removed from the cluster (kt_node_fatal
 * says KT_EMEMBERREMOVED; not an error: the process exits 0, as etcd). */
void kt_node_stop_removed(struct kt_node *n);
/* A lone voter elects itself without waiting an election timeout. */
void kt_node_campaign_now(struct kt_node *n);
/* Linearizable reads need a read index unless this member is the only voter,
 * leads and serves (it has applied its term's first entry: restarted, it
 * may lead before it has applied writes it acknowledged in its last run). */
bool kt_node_solo(const struct kt_node *n);
/* A linearizable read (RANGE, a read-only TXN, LEASE_TTL on the leader,
 * LEASE_LEASES, LEADER): answered once a read index of this life is applied
 * (at once when solo). from != 0: a LEASE_TTL forwarded by member `from`
 * (c NULL, req_id its seq), answered with kt_node_lease_fwd_answer. */
void kt_node_read_linearized(struct kt_node *n, struct kt_conn *c, uint64_t from, uint64_t req_id,
                             const struct kt_req *req, const uint8_t *body, size_t len);
/* Peer transport callbacks (node.c). */
void kt_node_on_peer_message(void *arg, uint64_t from, const uint8_t *msg, size_t len);
void kt_node_on_peer_snapshot(void *arg, uint64_t from, const uint8_t *msg, size_t len);
void kt_node_on_snapshot_room(void *arg, uint64_t peer);

/* node_member.c: the member table, bootstrap/join, membership changes. */
void kt_node_member_init(struct kt_node *n);
void kt_node_member_free(struct kt_node *n);
/* Member file: read it, or create it (new cluster from --initial-cluster, or
 * join an existing one: blocking JOIN exchange with its members). */
int kt_node_member_open(struct kt_node *n, struct kt_err *e);
/* After the WAL opened: a new cluster's first entries (written and synced). */
int kt_node_member_bootstrap(struct kt_node *n, struct replay *r, struct kt_err *e);
/* Appends a CONF entry (nobody's proposal) with req as its body to the WAL
 * (not synced) and to r, at the index after r's last, of term `term`. */
int kt_node_member_log_conf(struct kt_node *n, struct replay *r, uint64_t term,
                            const struct kt_req *req, struct kt_err *e);
/* Appends r->hs to the WAL and syncs everything appended so far. */
int kt_node_member_log_hs(struct kt_node *n, struct replay *r, struct kt_err *e);
/* The member file was created by this run (a new data dir). */
bool kt_node_member_new_dir(const struct kt_node *n);

/* node_force.c: --force-new-cluster on an existing data dir (after the WAL
 * replay, before raft starts); a no-op on a new one. */
int kt_node_force_new_cluster(struct kt_node *n, struct replay *r, struct kt_err *e);
/* The transport's peers follow the table (created when a peer first appears). */
int kt_node_member_sync_peers(struct kt_node *n, struct kt_err *e);
void kt_node_member_conf(const struct kt_node *n, uint64_t *voters, size_t *nv, uint64_t *learners,
                         size_t *nl);
const struct kt_node_member *kt_node_member_find(const struct kt_node *n, uint64_t id);
bool kt_node_member_removed(const struct kt_node *n, uint64_t id);
bool kt_node_member_is_learner(const struct kt_node *n);
size_t kt_node_member_voters(const struct kt_node *n);
void kt_node_member_list(struct kt_node *n, struct kt_conn *c, uint64_t id);
/* A client's MEMBER_ADD..PROMOTE (followers forward to the leader). */
void kt_node_member_client(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len);
/* The leader's handling; from/seq != 0: forwarded by follower `from`. */
void kt_node_member_request(struct kt_node *n, struct kt_conn *c, uint64_t from, uint64_t seq,
                            const struct kt_req *req);
/* A committed MEMBER_* or MEMBER_PUBLISH entry; own: our proposal, if it is. */
void kt_node_member_apply(struct kt_node *n, uint8_t entry_type, const struct kt_req *req,
                          const struct pending *own);
void kt_node_member_after_ready(struct kt_node *n);
void kt_node_member_serving(struct kt_node *n); /* started serving: publish */
/* Snapshot meta blob part; decode checks bounds (outside bytes). */
void kt_node_member_save(const struct kt_node *n, struct kt_buf *out);
int kt_node_member_decode(const uint8_t *p, size_t len, size_t *used, struct kt_node_members *t,
                          struct kt_err *e);
void kt_node_member_adopt(struct kt_node *n, const struct kt_node_members *t,
                          uint64_t snapshot_index);
int kt_node_member_join_decode(const uint8_t *p, size_t len, struct kt_node_member *out,
                               size_t *n_out, struct kt_err *e);

/* node_lease.c's forwarding link, shared: a follower forwards a request to
 * the leader (answered when the leader replies, ETIMEOUT after two election
 * timeouts); the leader answers with kt_node_fwd_reply. */
void kt_node_forward(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                     size_t body_len);
void kt_node_fwd_reply(struct kt_node *n, uint64_t to, uint64_t seq, int rc, const char *msg,
                       const struct kt_resp *r);
/* The leader answers a forwarded LEASE_KEEPALIVE / LEASE_TTL (body) now. */
void kt_node_lease_fwd_answer(struct kt_node *n, uint64_t from, uint64_t seq, const uint8_t *body,
                              size_t len);

/* node_lock.c: lock and election services (LOCK .. RESIGN). */
void kt_node_lock_init(struct kt_node *n);
void kt_node_lock_free(struct kt_node *n);
void kt_node_lock_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req);
void kt_node_lock_event(struct kt_node *n, const struct kt_event *ev); /* store hook */
void kt_node_lock_flush(struct kt_node *n); /* end of turn: waiters whose predecessor went */
void kt_node_lock_tick(struct kt_node *n);
void kt_node_lock_recheck_all(struct kt_node *n); /* the store was replaced */

/* Loads a snapshot file into a new store and lease table and decodes its
 * member table into *members (n == 0 if it carries none), its alarms into
 * *alarms and its auth store into *auth (a new one; empty if it carries
 * none; the caller frees it). */
int kt_node_load_snapshot_file(struct kt_node *n, const char *path, struct kt_snap_meta *meta,
                               struct kt_mvcc **store, struct kt_lease_mgr **leases,
                               struct kt_node_members *members, struct kt_node_alarms *alarms,
                               struct kt_auth **auth, struct kt_err *e);

/* node_install.c: snapshot transfer to followers behind the log, install. */
void kt_node_install_init(struct kt_node *n);
void kt_node_install_free(struct kt_node *n);
void kt_node_install_need(struct kt_node *n, uint64_t peer); /* raft: NEED_SNAPSHOT */
void kt_node_install_room(struct kt_node *n, uint64_t peer); /* peer: chunk room */
void kt_node_install_chunk(struct kt_node *n, uint64_t from, const uint8_t *msg, size_t len);
void kt_node_install_tick(struct kt_node *n);

/* node_lease.c */
void kt_node_lease_init(struct kt_node *n);
struct kt_lease_mgr *kt_node_lease_mgr_new(const struct kt_node *n);
void kt_node_lease_free(struct kt_node *n);
/* Apply-time lease check of a KV write: every put names an existing lease. */
int kt_node_lease_check(struct kt_node *n, const struct kt_request_op *op, struct kt_err *e);
/* Apply a committed LEASE_GRANT / LEASE_REVOKE; answers c if not NULL. */
void kt_node_lease_apply(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                         uint64_t req_id);
/* A client's lease request (any type), the member serving. */
void kt_node_lease_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len);
/* Leadership changes, ticks (expiry, forwarded-request timeouts). */
void kt_node_lease_role(struct kt_node *n, bool leader);
void kt_node_lease_tick(struct kt_node *n);
/* A node-level peer message (forwarded lease request/answer); false if not one. */
bool kt_node_lease_peer_message(struct kt_node *n, uint64_t from, const uint8_t *msg, size_t len);
/* Snapshot: the leases as a blob appended to the snapshot's meta; restore. */
void kt_node_lease_save(struct kt_node *n, struct kt_buf *out);
/* Loads the lease blob at p (at most len bytes); *used = its size. */
int kt_node_lease_load(struct kt_node *n, const uint8_t *p, size_t len, size_t *used,
                       struct kt_err *e);
/* During snapshot restore: key k (current version) carries lease id. */
void kt_node_lease_note_key(struct kt_node *n, struct kt_bytes key, int64_t lease);
void kt_node_lease_restore_done(struct kt_node *n, bool attach); /* false: discard */

/* node.c: start a snapshot of the applied state now unless one is being
 * written (the caller waits for kt_node_maint_snap_done); false when the
 * member is stopping. */
bool kt_node_snapshot_now(struct kt_node *n);

/* node_maint.c: SNAPSHOT, DEFRAGMENT, HASH_KV, ALARM (etcd Maintenance). */
void kt_node_maint_init(struct kt_node *n);
void kt_node_maint_free(struct kt_node *n);
/* Before the serving gate: answers maintenance requests (and refuses KV and
 * lease requests while a CORRUPT alarm is active); false: not handled. */
bool kt_node_maint_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len);
void kt_node_maint_apply_alarm(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                               uint64_t req_id);
/* The store raised NOSPACE applying an entry proposed by member `origin`. */
void kt_node_maint_nospace_raised(struct kt_node *n, uint64_t origin);
/* The alarms in a snapshot's meta blob: "KTALARM1" | u32 n | n x (u64
 * member | u8 alarm). They are replicated state (NOSPACE refuses puts at
 * apply), so a member restored from a snapshot must hold the same ones. */
void kt_node_maint_alarms_save(struct kt_node *n, struct kt_buf *out);
int kt_node_maint_alarms_decode(const uint8_t *p, size_t len, size_t *used,
                                struct kt_node_alarms *out, struct kt_err *e);
/* After the store was replaced by a snapshot's: its alarms become ours (and
 * the store's quota alarm is raised if NOSPACE is among them). */
void kt_node_maint_alarms_adopt(struct kt_node *n, const struct kt_node_alarms *a);
/* "memberID:<id> alarm:<NAME>" for each active alarm (STATUS errors). */
size_t kt_node_maint_alarm_texts(struct kt_node *n, char (*out)[64], size_t cap);
void kt_node_maint_snap_done(struct kt_node *n, bool ok); /* a snapshot finished or failed */
void kt_node_maint_drained(struct kt_node *n, struct kt_conn *c);
bool kt_node_maint_busy(const struct kt_node *n);                    /* slices pending */
bool kt_node_maint_has_alarm(const struct kt_node *n, uint8_t type); /* any member's */

/* node_metrics.c: a heartbeat with context ctx sent to peer `to`; a
 * heartbeat response from `from` echoing ctx (peer round-trip times). */
void kt_node_rtt_sent(struct kt_node *n, uint64_t to, uint64_t ctx);
void kt_node_rtt_answered(struct kt_node *n, uint64_t from, uint64_t ctx);
/* Probes: batch `failed` could not ask (no leader); the ready ones after an
 * apply; the ones older than 1 s (tick); all (code) when the node goes. */
void kt_node_probes_failed(struct kt_node *n, uint64_t failed, int code);
void kt_node_probes_step(struct kt_node *n);
void kt_node_probes_expire(struct kt_node *n);
void kt_node_probes_cancel(struct kt_node *n, int code);
void kt_node_maint_step(struct kt_node *n);
void kt_node_maint_tick(struct kt_node *n);

/* node_auth.c: users, roles, permissions, tokens (see its header). */
int kt_node_auth_init(struct kt_node *n, struct kt_err *e);
void kt_node_auth_free(struct kt_node *n);
/* Before a request is handled: answers AUTH_* requests and refusals itself
 * (returns 1); else returns 0 with n->prop_as set to the caller. */
int kt_node_auth_gate(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                      const uint8_t *body, size_t body_len);
/* The one permission check: 0, or EPERMDENIED (e says so; audited). */
int kt_node_authorize(struct kt_node *n, const struct kt_node_ident *id, const struct kt_req *req,
                      struct kt_err *e);
/* A proposal's body as an AUTHED entry appended to out (true), or false:
 * propose it as it is (auth disabled, a client's request). *checked_rev:
 * the revision the entry says its user was checked at, or 0 (none, or the
 * member's own). */
bool kt_node_auth_wrap(struct kt_node *n, struct kt_conn *c, const uint8_t *body, size_t len,
                       struct kt_buf *out, uint64_t *checked_rev);
/* A committed NORMAL entry's request: unwraps AUTHED into *req (decoded in
 * a) and checks it; 0 to apply *req, or the error to answer its proposer
 * with (nothing applied). *fatal: the entry cannot be decoded. */
int kt_node_auth_unwrap(struct kt_node *n, struct kt_req *req, struct kt_arena *a, struct kt_err *e,
                        bool *fatal);
/* Whether a write checked when it arrived (auth_revision: the revision it
 * was checked at, 0 if it was proposed as it is) may apply now without
 * being checked again: kt_node_auth_unwrap's answer for it is 0. */
bool kt_node_auth_settled(struct kt_node *n, uint64_t auth_revision, const struct kt_req *req);
void kt_node_auth_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                          const uint8_t *body, size_t body_len);
void kt_node_auth_read(struct kt_node *n, struct kt_conn *c, const struct kt_req *req);
void kt_node_auth_apply(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                        uint64_t req_id);
/* Who sends on c, and may they send req (auth enabled): for a request
 * answered later than it was taken (a linearizable read). */
int kt_node_auth_recheck(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                         struct kt_err *e);
/* May the caller on c still read [key, end) (an open watch, after an auth
 * change)? True with auth disabled. */
bool kt_node_auth_may_read(struct kt_node *n, struct kt_conn *c, struct kt_bytes key,
                           struct kt_bytes end);
void kt_node_auth_save(struct kt_node *n, struct kt_buf *out);
int kt_node_auth_load(struct kt_node *n, const uint8_t *p, size_t len, size_t *used,
                      struct kt_err *e);

/* node_watch.c */
void kt_node_watch_init(struct kt_node *n);
void kt_node_watch_free(struct kt_node *n);
void kt_node_watch_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req);
/* End of a loop turn: deliver ready events (bounded by connection buffers). */
void kt_node_watch_flush(struct kt_node *n);
bool kt_node_watch_busy(const struct kt_node *n); /* catch-up work pending */
void kt_node_watch_step(struct kt_node *n);
void kt_node_watch_conn_closed(struct kt_node *n, struct kt_conn *c);
void kt_node_watch_drained(struct kt_node *n, struct kt_conn *c);
void kt_node_watch_tick(struct kt_node *n);
/* The auth store changed: open watches are checked again (in slices);
 * those their caller may no longer read are cancelled ("permission denied"). */
void kt_node_watch_auth_changed(struct kt_node *n);

#endif
