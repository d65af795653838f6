/* core/msg.h — the request model: every message a client, a peer or the
 * WAL carries, as the plain structs the state machine consumes and
 * produces. net/proto.c encodes and decodes them (spec: net/PROTOCOL.md;
 * its schema, net/schema.c, describes each struct's wire form); the node
 * stores request bodies in WAL entries and applies them; core/apply.c and
 * the node answer with the response structs.
 *
 * Pure: libc and core/ops.h only. Ownership as core/ops.h: struct kt_bytes
 * and arrays point into memory owned by someone else (a decoded frame and
 * the arena it was decoded with, or the store).
 */
#ifndef KT_MSG_H
#define KT_MSG_H

#include "ops.h"

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
  KT_MSG_AUTH_ENABLE = 56,     /* etcd Auth.AuthEnable (a log entry) */
  KT_MSG_AUTH_DISABLE = 57,    /* etcd Auth.AuthDisable (a log entry) */
  KT_MSG_AUTH_STATUS = 58,     /* etcd Auth.AuthStatus */
  KT_MSG_AUTHENTICATE = 59,    /* etcd Auth.Authenticate: a token, no log entry */
  KT_MSG_USER_ADD = 60,        /* etcd Auth.UserAdd (a log entry, with the hash) */
  KT_MSG_USER_GET = 61,        /* etcd Auth.UserGet */
  KT_MSG_USER_LIST = 62,       /* etcd Auth.UserList */
  KT_MSG_USER_DELETE = 63,     /* etcd Auth.UserDelete (a log entry) */
  KT_MSG_USER_CHANGE_PASSWORD = 64,   /* etcd Auth.UserChangePassword (a log entry) */
  KT_MSG_USER_GRANT_ROLE = 65,        /* etcd Auth.UserGrantRole (a log entry) */
  KT_MSG_USER_REVOKE_ROLE = 66,       /* etcd Auth.UserRevokeRole (a log entry) */
  KT_MSG_ROLE_ADD = 67,               /* etcd Auth.RoleAdd (a log entry) */
  KT_MSG_ROLE_GET = 68,               /* etcd Auth.RoleGet */
  KT_MSG_ROLE_LIST = 69,              /* etcd Auth.RoleList */
  KT_MSG_ROLE_DELETE = 70,            /* etcd Auth.RoleDelete (a log entry) */
  KT_MSG_ROLE_GRANT_PERMISSION = 71,  /* etcd Auth.RoleGrantPermission (a log entry) */
  KT_MSG_ROLE_REVOKE_PERMISSION = 72, /* etcd Auth.RoleRevokePermission (a log entry) */
  KT_MSG_AUTHED = 73,                 /* a log entry: another body and who proposed it */
  KT_MSG_AUTH_CHECK = 74, /* may this connection's caller watch (read) a range now? No scan */
  /* Reserved for later messages (PROTOCOL.md "Type numbers"); decoders answer
   * them EUNSUPPORTED until they are specified. */
  KT_MSG_RESERVED_WATCH_FIRST = 19,  /* 19..23 watch */
  KT_MSG_RESERVED_LEASE_FIRST = 29,  /* 29..31 lease */
  KT_MSG_RESERVED_MEMBER_FIRST = 37, /* 37..38 member */
  KT_MSG_RESERVED_ALARM_FIRST = 41,  /* 41..43 alarm */
  KT_MSG_RESERVED_MAINT_FIRST = 48,  /* 48..55 maintenance */
  KT_MSG_RESERVED_AUTH_FIRST = 75,   /* 75..79 auth */
  KT_MSG_ERROR = 127,
};

/* Nesting limit of txns inside txns (a top-level TXN is depth 1). */
#define KT_MAX_TXN_DEPTH 8

struct kt_hello_req {
  uint32_t version;
  struct kt_bytes client;   /* free text, e.g. "libketch/0.1.0" */
  struct kt_bytes identity; /* a proxy's caller (PROTOCOL.md 6.1); empty: none */
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

/* AUTH_* / USER_* / ROLE_* (etcd's Auth service), one shape: name is the
 * user (AUTHENTICATE, USER_*) or the role (ROLE_*); password goes from a
 * client to a member only (AUTHENTICATE, USER_ADD, USER_CHANGE_PASSWORD);
 * the member proposes USER_ADD / USER_CHANGE_PASSWORD with the password's
 * Argon2id hash in `hash` instead, so no password reaches the log. */
struct kt_auth_req {
  struct kt_bytes name, password, hash;
  struct kt_bytes token;          /* AUTHENTICATE without name: bind the connection to a token */
  struct kt_bytes role;           /* USER_GRANT_ROLE, USER_REVOKE_ROLE */
  bool no_password;               /* USER_ADD: a user that only a certificate names */
  uint8_t perm_type;              /* ROLE_GRANT_PERMISSION: 0 READ, 1 WRITE, 2 READWRITE */
  struct kt_bytes key, range_end; /* ROLE_GRANT/REVOKE_PERMISSION (etcd's range rules) */
};

/* AUTHED: the body of a request proposed through the log by a connection
 * authenticated as `user`, checked against auth revision `auth_revision`
 * (apply refuses it, EAUTHOLDREVISION, if the store moved on since). */
struct kt_authed_req {
  struct kt_bytes user;
  uint64_t auth_revision;
  struct kt_bytes body;
  bool member; /* the member's own proposal (auto-compaction, lease expiry...): not checked */
};

struct kt_auth_perm {
  uint8_t type; /* enum kt_perm_type (core/auth.h) */
  struct kt_bytes key, range_end;
};

/* AUTHENTICATE: token. AUTH_STATUS: enabled, auth_revision. USER_GET: roles
 * (the user's). USER_LIST: users. ROLE_GET: perms. ROLE_LIST: roles. The
 * others: the header only. */
struct kt_auth_resp {
  struct kt_bytes token;
  bool enabled;
  uint64_t auth_revision;
  struct kt_bytes *users, *roles;
  uint32_t n_users, n_roles;
  struct kt_auth_perm *perms;
  uint32_t n_perms;
};

/* AUTH_CHECK: the range a WATCH_CREATE of it would watch (etcd's range
 * rules). The member answers as kt_node_authorize answers a WATCH_CREATE
 * of it (READ on the range, the caller's token still good), from its auth
 * store alone: no key is read. The response is the header only. */
struct kt_auth_check_req {
  struct kt_bytes key, range_end;
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
    struct kt_auth_req auth;                 /* AUTH_ENABLE .. ROLE_REVOKE_PERMISSION */
    struct kt_authed_req authed;             /* AUTHED */
    struct kt_auth_check_req auth_check;     /* AUTH_CHECK */
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
    struct kt_auth_resp auth;               /* AUTH_ENABLE .. ROLE_REVOKE_PERMISSION */
    struct kt_error_msg error;
  } u;
};

#endif
