/* net/proto.h — the native protocol codec (spec: net/PROTOCOL.md).
 *
 * Pure functions, no I/O: bytes in, structs out, and back. Shared by the
 * server (net/), the node (WAL entries carry an encoded request body) and the
 * client library (client/ links this file). Every decoder is bounds-checked
 * and fuzzed (test/fuzz/proto_fuzz.c); outside bytes never reach kt_assert.
 *
 * A frame is `u32 big-endian length | msgpack body`; the body is the msgpack
 * array [type, id, payload-map]. Decoded structs point into the input bytes
 * and into the arena passed in: valid while both live.
 *
 * Data flow: server: bytes -> kt_frame_next -> kt_proto_decode_req -> struct
 * kt_req -> (node, store) -> struct kt_resp -> kt_proto_encode_resp -> output
 * buffer. Client: the mirror image. Node: kt_proto_encode_req_body -> WAL
 * entry -> kt_proto_decode_req at apply time.
 *
 * Invariants: decoders never read outside [body, body + len) and allocate
 * from the arena at most O(len) bytes whatever the input claims; encoders
 * are canonical (zero fields omitted, shortest integers): for any bytes a
 * decoder accepts, x = decode(bytes) re-encodes to bytes that decode and
 * re-encode to the same bytes (test/fuzz/proto_fuzz.c checks it).
 * Decoding is a hand-written reader (no msgpack object tree: 2-3x faster, see
 * test/perf/proto_perf.c); encoding is msgpack-c's packer into a kt_buf.
 */
#ifndef KT_PROTO_H
#define KT_PROTO_H

#include "../core/ops.h"

#define KT_PROTO_VERSION 1
#define KT_FRAME_HDR 4
#define KT_DEFAULT_MAX_REQUEST_BYTES (1536u * 1024u) /* 1.5 MiB, etcd's default */
/* Largest frame either side accepts: a request is bounded by max request
 * bytes plus framing; responses (large ranges) by this. */
#define KT_MAX_FRAME_BYTES (64u * 1024u * 1024u)

enum kt_msg_type {
  KT_MSG_HELLO = 0,
  KT_MSG_RANGE = 1, /* = KT_OP_RANGE .. KT_OP_TXN */
  KT_MSG_PUT = 2,
  KT_MSG_DELETE = 3,
  KT_MSG_TXN = 4,
  KT_MSG_COMPACT = 5,
  KT_MSG_STATUS = 6,
  KT_MSG_WATCH_CREATE = 16,   /* opens a watch stream: WATCH frames on its id */
  KT_MSG_WATCH_CANCEL = 17,   /* ends a watch stream */
  KT_MSG_WATCH_PROGRESS = 18, /* etcd WatchProgressRequest */
  KT_MSG_LEASE_GRANT = 24,
  KT_MSG_LEASE_REVOKE = 25,
  KT_MSG_LEASE_KEEPALIVE = 26, /* one renewal per request (pipeline them) */
  KT_MSG_LEASE_TTL = 27,       /* etcd LeaseTimeToLive */
  KT_MSG_LEASE_LEASES = 28,    /* etcd LeaseLeases */
  KT_MSG_MEMBER_LIST = 32,     /* etcd Cluster.MemberList */
  KT_MSG_MEMBER_ADD = 33,      /* etcd Cluster.MemberAdd (also a WAL entry) */
  KT_MSG_MEMBER_REMOVE = 34,   /* etcd Cluster.MemberRemove (also a WAL entry) */
  KT_MSG_MEMBER_UPDATE = 35,   /* etcd Cluster.MemberUpdate (also a WAL entry) */
  KT_MSG_MEMBER_PROMOTE = 36,  /* etcd Cluster.MemberPromote (also a WAL entry) */
  KT_MSG_MEMBER_PUBLISH = 39,  /* member -> cluster, only inside WAL entries */
  KT_MSG_ALARM = 40,           /* etcd Maintenance.Alarm (GET local; ACTIVATE/DEACTIVATE raft) */
  KT_MSG_MOVE_LEADER = 44,     /* etcd Maintenance.MoveLeader */
  KT_MSG_DEFRAGMENT = 45,      /* etcd Maintenance.Defragment */
  KT_MSG_HASH_KV = 46,         /* etcd Maintenance.HashKV (and Hash) */
  KT_MSG_SNAPSHOT = 47,        /* etcd Maintenance.Snapshot: a stream of SNAPSHOT frames */
  KT_MSG_LOCK = 80,            /* etcd v3lock.Lock: waits until held */
  KT_MSG_UNLOCK = 81,          /* etcd v3lock.Unlock */
  KT_MSG_CAMPAIGN = 82,        /* etcd v3election.Campaign: waits until leader */
  KT_MSG_PROCLAIM = 83,        /* etcd v3election.Proclaim */
  KT_MSG_LEADER = 84,          /* etcd v3election.Leader */
  KT_MSG_OBSERVE = 85,         /* etcd v3election.Observe: a stream */
  KT_MSG_RESIGN = 86,          /* etcd v3election.Resign */
  /* Reserved for later messages (PROTOCOL.md "Type numbers"); decoders answer
   * them EUNSUPPORTED until they are specified. */
  KT_MSG_RESERVED_WATCH_FIRST = 19,  /* 19..23 watch */
  KT_MSG_RESERVED_LEASE_FIRST = 29,  /* 29..31 lease */
  KT_MSG_RESERVED_MEMBER_FIRST = 37, /* 37..38 member */
  KT_MSG_RESERVED_ALARM_FIRST = 41,  /* 41..43 alarm */
  KT_MSG_RESERVED_MAINT_FIRST = 48,  /* 48..55 maintenance */
  KT_MSG_RESERVED_AUTH_FIRST = 56,   /* 56..79 auth */
  KT_MSG_ERROR = 127,
};

/* "hello", "range", ... "error"; "unknown" for anything else. */
const char *kt_proto_type_name(int type);

/* Nesting limit of txns inside txns (a top-level TXN is depth 1). */
#define KT_MAX_TXN_DEPTH 8

/* Frame splitting. Given the bytes received so far, returns 1 and sets
 * body/body_len/consumed when a whole frame is present, 0 when more bytes are
 * needed, or -KT_ETOOLARGE when the length prefix (the body length, prefix
 * excluded) exceeds max_frame (and -KT_EPROTO for a zero length). The two
 * errors are reported as soon as the 4-byte prefix is in, before the body. */
int kt_frame_next(const uint8_t *p, size_t n, uint32_t max_frame, const uint8_t **body,
                  uint32_t *body_len, size_t *consumed);

/* Read type and id from the first bytes of a body (p, n: what has arrived),
 * e.g. to answer ETOOLARGE to a frame whose body is skipped unread. Returns 1
 * when both were read, 0 when more bytes are needed (at most 23 are), -1 when
 * the bytes cannot start a valid body. */
int kt_proto_peek_id(const uint8_t *p, size_t n, uint8_t *type, uint64_t *id);

struct kt_hello_req {
  uint32_t version;
  struct kt_bytes client; /* free text, e.g. "libketch/0.1.0" */
};

struct kt_hello_resp {
  uint32_t version;
  struct kt_bytes server; /* "ketch 0.1.0" */
  uint64_t cluster_id, member_id;
  uint32_t max_request_bytes;
};

struct kt_status_resp {
  struct kt_bytes version; /* server version string, "0.1.0" */
  int64_t db_size, db_size_in_use;
  uint64_t leader, raft_index, raft_term, raft_applied_index;
  bool is_learner;
  struct kt_bytes *errors; /* alarms / errors as text */
  uint32_t n_errors;
};

/* One member of MEMBER_LIST (etcd's etcdserverpb.Member). client_urls is
 * empty for a member whose client URLs this member does not know
 * (PROTOCOL.md 7.10). */
struct kt_member_info {
  uint64_t id;
  struct kt_bytes name;
  struct kt_bytes *peer_urls, *client_urls;
  uint32_t n_peer_urls, n_client_urls;
  bool is_learner;
};

struct kt_member_list_resp {
  struct kt_member_info *members;
  uint32_t n_members;
};

/* MEMBER_ADD / _REMOVE / _UPDATE / _PROMOTE responses (etcd's
 * MemberAddResponse ...): the members after the change; ADD also the member
 * it added. */
struct kt_member_change_resp {
  struct kt_member_info member; /* ADD only */
  struct kt_member_info *members;
  uint32_t n_members;
};

/* MEMBER_ADD (peer_urls, is_learner; id: 0 from a client — the member that
 * proposes the change picks a fresh one — and name: empty until the new
 * member publishes it, as etcd), MEMBER_REMOVE (id), MEMBER_UPDATE (id,
 * peer_urls), MEMBER_PROMOTE (id). */
struct kt_member_change_req {
  uint64_t id;
  struct kt_bytes name;
  struct kt_bytes *peer_urls;
  uint32_t n_peer_urls;
  bool is_learner;
};

/* A member's attributes, proposed by the member itself once it serves (etcd's
 * publish): every member learns its name and client URLs when the entry
 * applies. */
struct kt_member_publish_req {
  uint64_t member_id;
  struct kt_bytes name;
  struct kt_bytes *client_urls;
  uint32_t n_client_urls;
};

struct kt_move_leader_req {
  uint64_t target_id; /* the member to hand leadership to */
};

/* WATCH_CREATE (etcd WatchCreateRequest). The watch's stream is the
 * request's id: every WATCH frame of this watch carries it, from the
 * `created` one to the `canceled` one. */
struct kt_watch_create_req {
  struct kt_bytes key, range_end; /* etcd's range rules (core/ops.h) */
  int64_t start_revision;         /* 0 = from the next revision */
  bool prev_kv, no_put, no_delete;
  bool progress_notify; /* periodic progress frames while idle */
  bool fragment;        /* split a huge revision across frames */
};

/* WATCH_CANCEL: the watch to end, by its watch_id (from its created frame). */
struct kt_watch_cancel_req {
  int64_t watch_id;
};

/* A WATCH frame (etcd WatchResponse), type KT_MSG_WATCH_CREATE, with the id
 * of the WATCH_CREATE request. Exactly one of: created (first frame),
 * events (n_events > 0), a progress notification (no events, not created,
 * not canceled: header.revision says every event up to it was sent), or
 * canceled (last frame; compact_revision > 0 when cancelled by compaction). */
struct kt_watch_resp {
  int64_t watch_id;
  bool created, canceled;
  bool fragment; /* more frames of the same revision follow */
  int64_t compact_revision;
  struct kt_bytes cancel_reason;
  struct kt_event *events; /* in (mod_revision, sub) order */
  uint32_t n_events;
};

/* LEASE_GRANT (ttl, id: 0 = server-chosen), LEASE_REVOKE (id),
 * LEASE_KEEPALIVE (id), LEASE_TTL (id, keys), LEASE_LEASES (nothing). */
struct kt_lease_req {
  int64_t id;
  int64_t ttl; /* seconds, grant only */
  bool keys;   /* LEASE_TTL: list the attached keys */
};

/* The response of every lease request; fields unused by a type are zero.
 * GRANT: id, ttl (granted). REVOKE: header only. KEEPALIVE: id, ttl (the
 * renewed TTL; 0 = the lease is not found or expired, as etcd). TTL: id,
 * ttl (remaining seconds; -1 = not found, as etcd), granted_ttl, keys.
 * LEASES: leases (ids, ascending). */
struct kt_lease_resp {
  int64_t id, ttl, granted_ttl;
  struct kt_bytes *keys;
  uint32_t n_keys;
  int64_t *leases;
  uint32_t n_leases;
};

/* etcd's v3election LeaderKey: the key a campaign created. */
struct kt_leader_key {
  struct kt_bytes name, key;
  int64_t rev, lease;
};

/* LOCK (name, lease), UNLOCK (key), CAMPAIGN (name, lease, value), PROCLAIM
 * (leader, value), LEADER (name), OBSERVE (name), RESIGN (leader). */
struct kt_lock_req {
  struct kt_bytes name, key, value;
  int64_t lease;
  struct kt_leader_key leader;
};

/* LOCK: key (the lock's key: name/<lease in hex>). CAMPAIGN: leader. LEADER
 * and OBSERVE frames: kv (the leader's key-value). Others: header only. */
struct kt_lock_resp {
  struct kt_bytes key;
  struct kt_leader_key leader;
  bool has_kv;
  struct kt_kv kv;
};

/* ALARM (etcd AlarmRequest / AlarmResponse). Action and alarm type have
 * etcd's numbers. */
enum kt_alarm_action { KT_ALARM_GET = 0, KT_ALARM_ACTIVATE = 1, KT_ALARM_DEACTIVATE = 2 };
enum kt_alarm_type { KT_ALARM_NONE = 0, KT_ALARM_NOSPACE = 1, KT_ALARM_CORRUPT = 2 };

struct kt_alarm_req {
  uint8_t action;     /* enum kt_alarm_action */
  uint64_t member_id; /* ACTIVATE/DEACTIVATE: the member the alarm is for */
  uint8_t alarm;      /* enum kt_alarm_type */
};

struct kt_alarm_member {
  uint64_t member_id;
  uint8_t alarm; /* enum kt_alarm_type */
};

/* GET: every active alarm. ACTIVATE/DEACTIVATE: the alarm raised or
 * cleared (none if nothing changed). */
struct kt_alarm_resp {
  struct kt_alarm_member *alarms;
  uint32_t n_alarms;
};

/* HASH_KV: revision 0 = the current one. */
struct kt_hash_kv_req {
  int64_t revision;
};

struct kt_hash_kv_resp {
  uint32_t hash;            /* over every retained revision <= hash_revision */
  int64_t compact_revision; /* the store's compaction revision when hashed */
  int64_t hash_revision;    /* the revision hashed (the request's, or the current one) */
};

/* A SNAPSHOT stream frame: a piece of the snapshot file, in order.
 * remaining_bytes is what follows this frame's blob; 0 in the last frame. */
struct kt_snapshot_resp {
  uint64_t remaining_bytes;
  struct kt_bytes blob;
};

struct kt_error_msg {
  uint32_t code; /* KT_E* */
  struct kt_bytes message;
};

/* A request (client -> server). */
struct kt_req {
  uint8_t type; /* enum kt_msg_type */
  uint64_t id;
  union {
    struct kt_hello_req hello;
    struct kt_request_op op; /* RANGE, PUT, DELETE, TXN: op.type == type */
    struct kt_compact_req compact;
    struct kt_move_leader_req move_leader;
    struct kt_member_publish_req publish;
    struct kt_member_change_req member; /* MEMBER_ADD .. MEMBER_PROMOTE */
    struct kt_watch_create_req watch_create;
    struct kt_watch_cancel_req watch_cancel; /* WATCH_PROGRESS: no fields */
    struct kt_lease_req lease;               /* LEASE_* */
    struct kt_lock_req lock;                 /* LOCK .. RESIGN */
    struct kt_alarm_req alarm;               /* ALARM */
    struct kt_hash_kv_req hash_kv;           /* HASH_KV (DEFRAGMENT, SNAPSHOT: no fields) */
  } u;
};

/* A response (server -> client). `header` is present for every type but
 * HELLO and ERROR. */
struct kt_resp {
  uint8_t type;
  uint64_t id;
  struct kt_header header;
  union {
    struct kt_hello_resp hello;
    struct kt_response_op op; /* RANGE, PUT, DELETE, TXN */
    struct kt_status_resp status;
    struct kt_member_list_resp member_list; /* MOVE_LEADER has only the header */
    struct kt_member_change_resp member;    /* MEMBER_ADD .. MEMBER_PROMOTE */
    struct kt_watch_resp watch;             /* WATCH_CREATE (CANCEL, PROGRESS: header) */
    struct kt_lease_resp lease;             /* LEASE_* */
    struct kt_lock_resp lock;               /* LOCK .. RESIGN */
    struct kt_alarm_resp alarm;             /* ALARM (DEFRAGMENT: header only) */
    struct kt_hash_kv_resp hash_kv;         /* HASH_KV */
    struct kt_snapshot_resp snapshot;       /* each SNAPSHOT frame */
    struct kt_error_msg error;
  } u;
};

/* Decode a request body (no length prefix). Absent fields are zero; unknown
 * fields are skipped. Errors (e->msg names the field with its path, e.g.
 * "txn.success[2].lease: expected int, got str"): EPROTO (malformed, truncated,
 * trailing bytes, a field of the wrong type or out of range), EUNSUPPORTED
 * (unknown or reserved type, unknown op type in a txn), ETOOMANYOPS (more than
 * KT_MAX_TXN_OPS in one compare/success/failure list), EINVAL (txns nested
 * deeper than KT_MAX_TXN_DEPTH, an enum value out of range). On error req->type
 * and req->id are set when they could be read (so the server can answer that
 * id), else 0. e may be NULL. */
int kt_proto_decode_req(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_req *req,
                        struct kt_err *e);
/* Append a whole frame (length prefix + body) for req to out. req must be
 * well-formed (type HELLO..STATUS, WATCH_*, LEASE_*, MEMBER_LIST,
 * MEMBER_PUBLISH, MOVE_LEADER, LOCK..RESIGN, ALARM (action and alarm in
 * range), DEFRAGMENT, HASH_KV or SNAPSHOT; op.type == type for KV types):
 * anything else is a caller bug (kt_assert). */
void kt_proto_encode_req(struct kt_buf *out, const struct kt_req *req);

/* Decode a response body; errors as kt_proto_decode_req (types HELLO..STATUS,
 * WATCH_* (type WATCH_CREATE: a WATCH frame, u.watch), LEASE_*, MEMBER_LIST,
 * MOVE_LEADER, LOCK..RESIGN, ALARM, DEFRAGMENT, HASH_KV, SNAPSHOT (one frame
 * of the stream) and ERROR). An event type other than PUT/DELETE, an alarm
 * type other than NONE/NOSPACE/CORRUPT is EINVAL. */
int kt_proto_decode_resp(const uint8_t *body, size_t len, struct kt_arena *a, struct kt_resp *resp,
                         struct kt_err *e);
/* resp must be well-formed as for kt_proto_encode_req (events of type PUT or
 * DELETE only). */
void kt_proto_encode_resp(struct kt_buf *out, const struct kt_resp *resp);
/* Shorthand for an ERROR frame. */
void kt_proto_encode_error(struct kt_buf *out, uint64_t id, int code, const char *message);

/* The body of a request without a frame prefix and with id 0: what the node
 * stores in a WAL entry. Decode with kt_proto_decode_req. */
void kt_proto_encode_req_body(struct kt_buf *out, const struct kt_req *req);

#endif
