/* core/node.h — one member: joins the store (core/mvcc), the WAL (wal/),
 * snapshots (snap/) and the client server (net/server) on one libev loop.
 *
 * The node is the ONLY place that decides the order persist → apply → reply:
 *
 *   request ─check─► kt_raft_propose (the body as the entry's data)
 *   end of loop turn (ev_prepare): kt_raft_ready →
 *      hard state + entries appended to the WAL (ENTRY = term | type | body,
 *      HARDSTATE = term | vote | commit), then kt_wal_flush → sync thread:
 *      write + ONE fdatasync for the whole batch
 *   sync done (ev_async) → kt_raft_persisted / kt_raft_hs_persisted
 *   next ready: committed entries → applied in index order to the store →
 *      replies appended to their connections; the server's own prepare (lower
 *      priority) then does one write() per connection.
 *
 * Serving (kt_reads_serving): a leader once it has applied the first entry
 * of its term, a follower while it knows a leader; until then requests wait
 * (bounded: two election timeouts, then "no leader"), except status and
 * serializable reads. A lone voter elects itself at start (ticks
 * fast-forwarded). Followers forward proposals to the leader.
 *
 * Linearizable reads (range, a txn without writes, lease time-to-live on
 * the leader, leases list, election leader): the reads of a loop turn form
 * one batch that asks raft for one read index at the end of the turn; a
 * read is answered from the applied state once a read state for its batch
 * (or a later one) asked in THIS life of the member came back and is
 * applied (core/reads.h). A restarted member therefore never answers from
 * the state it recovered. A lone voter that leads answers them at once.
 *
 * Background work in slices (never a long stall of the loop): snapshots every
 * snapshot_count entries, once the log since the last snapshot is also at
 * least half the store's size (a snapshot copies the whole store, so this
 * bounds its cost per byte written) (kt_mvcc_iter slices → snap writer
 * thread), physical
 * compaction (kt_mvcc_compact_step), WAL/snapshot retention, and the
 * maintenance services of core/node_maint.c (hash-kv slices, a snapshot
 * taken on demand for snapshot save and defragment, snapshot files streamed
 * under each connection's soft limit).
 *
 * Data dir: <data-dir>/member/wal/ (segments) and <data-dir>/member/snap/ (snapshots).
 * Recovery: newest snapshot that verifies (else the one before it), then the
 * WAL records after its index become raft's restart state (hard state and
 * log); raft hands the committed ones back to be applied before serving.
 * --force-new-cluster (core/node_force.c) appends, between the replay and
 * raft's start, the entries that leave this member alone, and commits the
 * whole log.
 * Two snapshots are kept and the WAL is purged only up to the older one, so a
 * corrupt newest snapshot still recovers.
 */
#ifndef KT_NODE_H
#define KT_NODE_H

#include <ev.h>

#include "base.h"

struct kt_node;
struct kt_tls_ctx; /* net/tls.h: passed through to net/, never looked into */

#define KT_NODE_MAX_MEMBERS 16

/* One name=url of --initial-cluster. */
struct kt_node_peer {
  const char *name, *url;
};

/* A member of the cluster (core/node_member.c owns the table). peer_urls
 * and client_urls are comma-separated; the first peer URL is dialled. */
struct kt_node_member {
  uint64_t id;
  bool learner;
  char name[128], peer_urls[512], client_urls[512];
};

struct kt_node_config {
  const char *name;
  const char *data_dir;
  const char *cluster_token;
  const char *peer_urls;   /* for the member id and membership */
  const char *client_urls; /* advertised */
  uint64_t snapshot_count;
  uint64_t quota_bytes;
  uint32_t max_request_bytes;
  uint64_t wal_segment_bytes;                 /* 0 = default */
  uint32_t heartbeat_ms, election_timeout_ms; /* raft timing; 0 = 100 / 1000 */
  /* Bootstrap (read only when the data dir is new): --initial-cluster, and
   * --initial-cluster-state existing. */
  const struct kt_node_peer *initial;
  size_t n_initial;
  bool join_existing;
  /* --force-new-cluster: on an existing data dir, become a one-member
   * cluster keeping the whole log (core/node_force.c); ignored on a new one. */
  bool force_new_cluster;
  const char *listen_peer_host; /* --listen-peer-urls (first); NULL: no peer listener */
  int listen_peer_port;
  /* Peer TLS (opaque here; owned by the caller): the listener's context (it
   * then serves TLS only), and the one for dialing https:// peer URLs (and
   * the JOIN exchange). NULL: plaintext. */
  struct kt_tls_ctx *peer_tls_server, *peer_tls_client;
  /* Auto-compaction, as etcd's --auto-compaction-mode/-retention: periodic
   * keeps `retention_ms` of history (compacting to the revision current that
   * long ago, checked every retention/10, at least every second); revision
   * keeps the last `retention_revs` revisions (checked every 5 minutes). 0 = off. */
  bool auto_compaction_revision_mode;
  uint64_t auto_compaction_retention_ms;
  uint64_t auto_compaction_retention_revs;
  /* Progress notifications of watches created with progress_notify, every
   * this many ms (etcd's --experimental-watch-progress-notify-interval);
   * 0 = 10 minutes. */
  uint64_t watch_progress_ms;
  /* Entries kept in memory behind the applied index for followers to catch
   * up from (etcd's --experimental-snapshot-catchup-entries); one further
   * behind gets a snapshot. 0 = 100000. */
  uint64_t snapshot_catchup_entries;
  /* Auth (core/node_auth.c): --auth-token simple (default) or signed with
   * Ed25519 PEM key files; --auth-token-ttl (0: 300 s); Argon2id cost and
   * worker threads (0: libsodium's interactive cost, 1 thread). */
  bool auth_token_signed;
  const char *auth_token_priv_key, *auth_token_pub_key;
  uint32_t auth_token_ttl_s;
  uint64_t auth_hash_opslimit;
  size_t auth_hash_memlimit;
  int auth_hash_threads;
  /* Threads that own the client sockets (net/THREADS.md); 0: the loop's
   * thread does that work too. */
  int io_threads;
};

/* The id a new cluster gives the member `name` (a hash of the cluster
 * token and the name; net/discovery.c registers under it). */
uint64_t kt_node_member_id_of(const char *cluster_token, const char *name);

/* ---- for tools that make or read a member's files (ketchutl, ketch-grpc) ---- */

struct kt_lease_mgr;

/* A snapshot meta blob (snap/FORMAT.md) for a store built outside a member
 * (ketchutl migrate from-etcd): the text line, NUL, the leases of `leases`
 * (granted TTLs, restored with kt_lease_restore) with its id state; no member
 * table (the data dir's member file gives the members) and no alarms. */
void kt_node_blob_make(const char *text, const struct kt_lease_mgr *leases, struct kt_buf *out);

/* The leases of a snapshot's meta blob: fn(arg, id, granted TTL) for each,
 * in the blob's order; a non-zero return stops (ECORRUPT "bad lease"). A blob
 * without tables has none. Errors: ECORRUPT (the message says what). */
int kt_node_blob_leases(const uint8_t *blob, size_t len,
                        int (*fn)(void *arg, int64_t id, int64_t ttl), void *arg, struct kt_err *e);

/* The member file a new member started with cfg (name, initial, n_initial,
 * cluster_token) would write in member_dir (<data-dir>/member), made ahead of
 * that start (ketchutl snapshot restore / migrate from-etcd with --name and
 * --initial-cluster, as etcdutl snapshot restore): the member then starts
 * from the snapshot already in member_dir/snap (at restore_index) with these
 * members, whatever its --initial-* flags say. Errors: EINVAL (the name is
 * not in initial), EIO (naming the file). */
int kt_node_member_write_initial(const struct kt_node_config *cfg, const char *member_dir,
                                 uint64_t restore_index, struct kt_err *e);

/* Recover from the data dir (creating it if new) and start serving on the
 * listeners the caller adds with kt_node_listen. Errors name the file. */
int kt_node_open(struct ev_loop *loop, const struct kt_node_config *cfg, struct kt_node **out,
                 struct kt_err *e);
/* tls: NULL for plain TCP, else the listener's TLS context (net/tls.h,
 * opaque here; owned by the caller, outliving the node); also_plain: serve
 * plaintext clients on the same port too. */
int kt_node_listen(struct kt_node *n, const char *host, int port, struct kt_tls_ctx *tls,
                   bool also_plain, struct kt_err *e);
/* Graceful stop: stop accepting, finish in-flight syncs and replies, then
 * break the loop. */
void kt_node_shutdown(struct kt_node *n);
void kt_node_free(struct kt_node *n);
/* ---- monitoring (core/node_metrics.c), on the loop's thread only ---- */

/* What /health, /livez and /readyz judge (net/http.c). */
struct kt_node_health {
  uint64_t leader; /* the leader this member knows, 0: none */
  bool is_leader;  /* this member leads */
  bool serving;    /* serves linearizable requests now */
  bool learner;    /* this member is a learner */
  bool nospace;    /* a NOSPACE alarm is active (any member's), or this WAL's disk is full */
  bool corrupt;    /* a CORRUPT alarm is active */
  bool stopping;   /* shutting down or stopped on an error */
  uint64_t applied_index, commit_index;
};
void kt_node_health(const struct kt_node *n, struct kt_node_health *h);
/* Appends the member's metrics in Prometheus' text format (version 0.0.4)
 * to out: etcd's names, types and buckets, and ketch_* ones. */
void kt_node_metrics(struct kt_node *n, struct kt_buf *out);
/* A linearizable read for /health and /readyz, as etcd's: done(ctx, 0, "")
 * once a read index of this life taken after the call is applied (at once
 * on a lone voter that leads), or done(ctx, code, why) when it cannot be
 * (no leader) or has not within 1 s (ETIMEOUT), or the node is freed
 * (ESTOPPED). done may run inside this call. At most KT_NODE_MAX_PROBES wait
 * (EBUSY beyond). */
#define KT_NODE_MAX_PROBES 64
typedef void (*kt_node_probe_fn)(void *ctx, int code, const char *why);
void kt_node_probe_linearizable(struct kt_node *n, kt_node_probe_fn done, void *ctx);
/* HTTP requests on the client URLs go to fn (net/server.h,
 * kt_server_set_http), as etcd serves /metrics and /health there too. */
struct kt_io;
void kt_node_serve_http(struct kt_node *n,
                        void (*fn)(void *arg, struct kt_io *io, const uint8_t *pre, size_t n),
                        void *arg);
struct kt_hist;
/* Appends one histogram `name` (HELP, TYPE, cumulative buckets, sum, count). */
void kt_node_render_hist(struct kt_buf *out, const char *name, const char *help,
                         const struct kt_hist *h);

/* Non-zero if the member stopped on a fatal error (failed fdatasync...), or
 * KT_EMEMBERREMOVED if it stopped because it was removed from the cluster
 * (etcd 3.4 exits 0 then: the operator asked for it). */
int kt_node_fatal(const struct kt_node *n);

#endif
