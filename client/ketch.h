/* ketch.h — libketch, the C client library of the ketch key-value store.
 *
 * This header is the whole public API. It includes only libc headers and
 * never a server header. C11, usable from C++.
 *
 *   cc app.c $(pkg-config --cflags --libs ketch)
 *
 * The data model and the results are etcd v3's: a global revision, keys with
 * create/mod revision and version, range / put / delete / txn / compact,
 * response headers with cluster_id, member_id, revision and raft_term.
 *
 * Shape
 *   - ketch_open() a handle on a list of endpoints; ketch_close() it.
 *   - Every request exists in two forms that share one code path:
 *       asynchronous: ketch_X_async(c, req, cb, arg) queues the request and
 *         returns at once; the callback runs later from ketch_process().
 *       synchronous:  ketch_X(c, req, &res) = ketch_X_async + run the loop
 *         (poll + ketch_process) until that request completes or times out.
 *   - The asynchronous form plugs into the caller's own event loop:
 *       wait for ketch_events(c) on ketch_fd(c), at most ketch_timeout_ms(c),
 *       then call ketch_process(c). Re-read all three after every
 *       ketch_process() and after every submit (the fd changes on reconnect).
 *   - Many requests are outstanding at once on one connection (pipelining),
 *     matched by request id; queued frames leave in one write().
 *
 * Threads: a handle is used by one thread at a time; different handles are
 * independent. The library starts no thread and installs no signal handler
 * (it writes with MSG_NOSIGNAL).
 *
 * Failover: the handle holds one connection, to one endpoint at a time,
 * opened with a HELLO handshake. When connecting fails or the connection is
 * lost, it moves to the next endpoint of the list (round robin). Requests in
 * flight on the lost connection:
 *   - reads (range, status, a txn of only ranges) are sent again on the next
 *     connection: retrying a read is safe;
 *   - writes (put, delete, a txn with a write, compact) that had not reached
 *     the socket at all are sent on the next connection; a write of which any
 *     byte was written is NEVER retried: it completes with KETCH_EUNKNOWN
 *     ("request outcome unknown") — it may or may not have been applied.
 * Every request completes at the latest at its deadline (request_timeout_ms
 * after submission) with KETCH_ETIMEOUT (or KETCH_EUNAVAILABLE when no
 * endpoint could be reached meanwhile). A write that times out after being
 * sent has an unknown outcome too.
 *
 * Memory and lifetimes (who owns what, for how long)
 *   - Request structs and the bytes they point to belong to the caller and are
 *     only read during the submit call; they may be freed when it returns.
 *   - A ketch_result given to a callback, and everything it points to, belongs
 *     to the library and is valid only until the callback returns. Copy what
 *     you need, or keep the whole result with ketch_result_dup().
 *   - A ketch_result returned by a synchronous call belongs to the caller,
 *     who frees it (and everything it points to, in one go) with
 *     ketch_result_free(). It stays valid after ketch_close().
 *   - Strings from ketch_strerror() are static. ketch_errmsg(c) and
 *     ketch_endpoint(c) are valid until the next call on c.
 *   - Keys and values in results are byte strings, NOT NUL-terminated (print
 *     them with "%.*s", (int)kv->key_len, kv->key). Messages are
 *     NUL-terminated.
 *   In steady state the asynchronous path allocates nothing per request:
 *   request slots, encode/decode buffers and arenas are reused.
 *
 * Errors: functions return 0 or a KETCH_E* code (positive). The numbers are
 * ketch's wire codes (the same table as the server's). A result carries the
 * code and a message (the server's message when the server refused the
 * request, else the library's explanation).
 */
#ifndef KETCH_H
#define KETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KETCH_VERSION "0.1.0"
#define KETCH_DEFAULT_PORT 2479

/* ---- error codes (identical to the server's table; stable numbers) ---- */
enum {
  KETCH_OK = 0,
  KETCH_EINVAL = 1,             /* invalid argument */
  KETCH_EKEYEMPTY = 2,          /* key is not provided */
  KETCH_ETOOLARGE = 3,          /* request is too large */
  KETCH_ETOOMANYOPS = 4,        /* too many operations in txn request */
  KETCH_EDUPKEY = 5,            /* duplicate key given in txn request */
  KETCH_ECOMPACTED = 6,         /* mvcc: required revision has been compacted */
  KETCH_EFUTUREREV = 7,         /* mvcc: required revision is a future revision */
  KETCH_ENOSPACE = 8,           /* mvcc: database space exceeded */
  KETCH_ELEASENOTFOUND = 9,     /* requested lease not found */
  KETCH_ELEASEEXISTS = 10,      /* lease already exists */
  KETCH_ENOLEADER = 11,         /* no leader */
  KETCH_ETIMEOUT = 12,          /* request timed out */
  KETCH_EUNKNOWN = 13,          /* request outcome unknown (a write lost in flight) */
  KETCH_EPROTO = 14,            /* protocol error */
  KETCH_EUNSUPPORTED = 15,      /* unsupported request */
  KETCH_ECORRUPT = 16,          /* data corruption detected */
  KETCH_EIO = 17,               /* i/o error */
  KETCH_ENOMEM = 18,            /* out of memory */
  KETCH_ECLOSED = 19,           /* connection closed */
  KETCH_EUNAVAILABLE = 20,      /* no endpoint available */
  KETCH_ENOTFOUND = 21,         /* not found */
  KETCH_ESTOPPED = 22,          /* server stopped */
  KETCH_EBUSY = 23,             /* too many requests (max_outstanding reached) */
  KETCH_ECANCELED = 24,         /* canceled (handle closed with the request pending) */
  KETCH_EVERSION = 25,          /* unsupported protocol version */
  KETCH_EINTERNAL = 26,         /* internal error */
  KETCH_EMEMBEREXISTS = 27,     /* member ID already exist */
  KETCH_EPEERURLEXISTS = 28,    /* Peer URLs already exists */
  KETCH_EMEMBERNOTFOUND = 29,   /* member not found */
  KETCH_EMEMBERNOTLEARNER = 30, /* can only promote a learner member */
  KETCH_ELEARNERNOTREADY = 31,  /* ... a learner member which is in sync with leader */
  KETCH_EUNHEALTHY = 32,        /* unhealthy cluster (the change would lose quorum) */
  KETCH_EMEMBERBADURLS = 33,    /* given member URLs are invalid */
  KETCH_EMEMBERREMOVED = 34,    /* the member has been permanently removed */
  KETCH_ENOTENOUGHSTARTED = 35, /* re-configuration failed due to not enough started members */
  KETCH_ETOOMANYLEARNERS = 36,  /* too many learner members in cluster (one at a time) */
  KETCH_EAUTHNOTENABLED = 37,   /* authentication is not enabled */
  KETCH_EPERMDENIED = 38,       /* permission denied */
  KETCH_EINVALIDTOKEN = 39,     /* invalid auth token (expired, or signed by another key) */
  KETCH_EAUTHFAILED = 40,       /* authentication failed, invalid user ID or password */
  KETCH_EUSEREMPTY = 41,        /* user name is empty */
  KETCH_EUSEREXISTS = 42,       /* user name already exists */
  KETCH_EUSERNOTFOUND = 43,     /* user name not found */
  KETCH_EROLEEMPTY = 44,        /* role name is empty */
  KETCH_EROLEEXISTS = 45,       /* role name already exists */
  KETCH_EROLENOTFOUND = 46,     /* role name not found */
  KETCH_EROOTUSERNOTEXIST = 47, /* root user does not exist */
  KETCH_EROOTROLENOTEXIST = 48, /* root user does not have root role */
  KETCH_EROLENOTGRANTED = 49,   /* role is not granted to the user */
  KETCH_EPERMNOTGRANTED = 50,   /* permission is not granted to the role */
  KETCH_EAUTHOLDREVISION = 51,  /* revision of auth store is old (retry) */
  KETCH_EINVALIDAUTHMGMT = 52,  /* invalid auth management (e.g. deleting root) */
};

/* The message of a code ("mvcc: required revision has been compacted");
 * "unknown error" for a number outside the table. Static storage. */
const char *ketch_strerror(int err);
/* The code's name ("ECOMPACTED"). Static storage. */
const char *ketch_errname(int err);
/* The library version, KETCH_VERSION. */
const char *ketch_version(void);

/* ---- request and result types ---- */

/* Operation / result types (the same numbers as the wire's message types). */
enum {
  KETCH_OP_RANGE = 1,
  KETCH_OP_PUT = 2,
  KETCH_OP_DELETE = 3,
  KETCH_OP_TXN = 4,
  KETCH_OP_COMPACT = 5,
  KETCH_OP_STATUS = 6,
  KETCH_OP_WATCH = 16, /* a frame of a watch stream (ketch_watch_result) */
  KETCH_OP_WATCH_PROGRESS = 18,
  KETCH_OP_LEASE_GRANT = 24,
  KETCH_OP_LEASE_REVOKE = 25,
  KETCH_OP_LEASE_KEEPALIVE = 26,
  KETCH_OP_LEASE_TTL = 27,
  KETCH_OP_LEASE_LEASES = 28,
  KETCH_OP_MEMBER_LIST = 32,
  KETCH_OP_MEMBER_ADD = 33,
  KETCH_OP_MEMBER_REMOVE = 34,
  KETCH_OP_MEMBER_UPDATE = 35,
  KETCH_OP_MEMBER_PROMOTE = 36,
  KETCH_OP_ALARM = 40,
  KETCH_OP_MOVE_LEADER = 44,
  KETCH_OP_DEFRAGMENT = 45,
  KETCH_OP_HASH_KV = 46,
  KETCH_OP_SNAPSHOT = 47, /* a piece of a snapshot stream (ketch_snapshot_result) */
  /* etcd's Auth service (ketch_auth / ketch_authenticate; ketch_auth_result) */
  KETCH_OP_AUTH_ENABLE = 56,
  KETCH_OP_AUTH_DISABLE = 57,
  KETCH_OP_AUTH_STATUS = 58,
  KETCH_OP_AUTHENTICATE = 59,
  KETCH_OP_USER_ADD = 60,
  KETCH_OP_USER_GET = 61,
  KETCH_OP_USER_LIST = 62,
  KETCH_OP_USER_DELETE = 63,
  KETCH_OP_USER_CHANGE_PASSWORD = 64,
  KETCH_OP_USER_GRANT_ROLE = 65,
  KETCH_OP_USER_REVOKE_ROLE = 66,
  KETCH_OP_ROLE_ADD = 67,
  KETCH_OP_ROLE_GET = 68,
  KETCH_OP_ROLE_LIST = 69,
  KETCH_OP_ROLE_DELETE = 70,
  KETCH_OP_ROLE_GRANT_PERMISSION = 71,
  KETCH_OP_ROLE_REVOKE_PERMISSION = 72,
  KETCH_OP_AUTH_CHECK = 74, /* ketch_auth_check: the header only */
};

/* Permission types (etcd's authpb.Permission). */
enum { KETCH_PERM_READ = 0, KETCH_PERM_WRITE = 1, KETCH_PERM_READWRITE = 2 };

/* Alarm actions and types (etcd's numbers). */
enum { KETCH_ALARM_GET = 0, KETCH_ALARM_ACTIVATE = 1, KETCH_ALARM_DEACTIVATE = 2 };
enum { KETCH_ALARM_NONE = 0, KETCH_ALARM_NOSPACE = 1, KETCH_ALARM_CORRUPT = 2 };

enum { KETCH_SORT_NONE = 0, KETCH_SORT_ASCEND = 1, KETCH_SORT_DESCEND = 2 };
enum {
  KETCH_SORT_KEY = 0,
  KETCH_SORT_VERSION = 1,
  KETCH_SORT_CREATE = 2,
  KETCH_SORT_MOD = 3,
  KETCH_SORT_VALUE = 4,
};

/* Key ranges, as etcd: with range_end_len == 0 the request names the single
 * key `key`; range_end "\0" (len 1) means every key >= key; key "\0" with
 * range_end "\0" means all keys; otherwise [key, range_end).
 * The helpers `prefix` and `from_key` compute range_end for you (and then the
 * range_end fields must be empty, else KETCH_EINVAL):
 *   prefix:   every key starting with `key` (an empty key: all keys);
 *   from_key: every key >= key (an empty key: all keys). */

typedef struct ketch_range_req {
  const void *key;
  size_t key_len;
  const void *range_end;
  size_t range_end_len;
  bool prefix, from_key;
  int64_t limit;     /* 0 = no limit */
  int64_t revision;  /* 0 = current; else read the store as of this revision */
  int sort_order;    /* KETCH_SORT_NONE / ASCEND / DESCEND */
  int sort_target;   /* KETCH_SORT_KEY .. KETCH_SORT_VALUE */
  bool serializable; /* served by the member locally, without a quorum read */
  bool keys_only;    /* values are left empty */
  bool count_only;   /* only `count` is returned */
  int64_t min_mod_revision, max_mod_revision; /* 0 = no filter */
  int64_t min_create_revision, max_create_revision;
} ketch_range_req;

typedef struct ketch_put_req {
  const void *key;
  size_t key_len;
  const void *value;
  size_t value_len;
  int64_t lease; /* 0 = none */
  bool prev_kv;  /* return the previous key-value */
  bool ignore_value, ignore_lease;
} ketch_put_req;

typedef struct ketch_delete_req {
  const void *key;
  size_t key_len;
  const void *range_end;
  size_t range_end_len;
  bool prefix, from_key; /* as in ketch_range_req */
  bool prev_kv;          /* return the deleted key-values */
} ketch_delete_req;

enum { KETCH_CMP_EQUAL = 0, KETCH_CMP_GREATER = 1, KETCH_CMP_LESS = 2, KETCH_CMP_NOT_EQUAL = 3 };
enum {
  KETCH_CMP_VERSION = 0,
  KETCH_CMP_CREATE = 1, /* create_revision */
  KETCH_CMP_MOD = 2,    /* mod_revision */
  KETCH_CMP_VALUE = 3,
  KETCH_CMP_LEASE = 4,
};

/* One txn comparison: `target(key) result operand`, e.g. version(k) > 0.
 * The operand is int_value for VERSION/CREATE/MOD/LEASE, value for VALUE.
 * With a range_end it applies to every key of the range. */
typedef struct ketch_compare {
  int result; /* KETCH_CMP_EQUAL .. NOT_EQUAL */
  int target; /* KETCH_CMP_VERSION .. LEASE */
  const void *key;
  size_t key_len;
  const void *range_end;
  size_t range_end_len;
  int64_t int_value;
  const void *value;
  size_t value_len;
} ketch_compare;

typedef struct ketch_op ketch_op;

/* A transaction: if every compare holds, run `success`, else `failure`,
 * atomically at one revision. Ops may be nested txns (depth <= 8); at most
 * 128 ops per list (the server's --max-txn-ops). */
typedef struct ketch_txn_req {
  const ketch_compare *compare;
  size_t n_compare;
  const ketch_op *success;
  size_t n_success;
  const ketch_op *failure;
  size_t n_failure;
} ketch_txn_req;

/* One operation of a txn: set `type` and the matching member. */
struct ketch_op {
  int type; /* KETCH_OP_RANGE / PUT / DELETE / TXN */
  union {
    ketch_range_req range;
    ketch_put_req put;
    ketch_delete_req del;
    ketch_txn_req txn;
  };
};

/* Convenience constructors for txn op lists (they copy the struct). */
static inline ketch_op ketch_op_range(ketch_range_req r) {
  ketch_op o;
  o.type = KETCH_OP_RANGE;
  o.range = r;
  return o;
}
static inline ketch_op ketch_op_put(ketch_put_req r) {
  ketch_op o;
  o.type = KETCH_OP_PUT;
  o.put = r;
  return o;
}
static inline ketch_op ketch_op_delete(ketch_delete_req r) {
  ketch_op o;
  o.type = KETCH_OP_DELETE;
  o.del = r;
  return o;
}
static inline ketch_op ketch_op_txn(ketch_txn_req r) {
  ketch_op o;
  o.type = KETCH_OP_TXN;
  o.txn = r;
  return o;
}

/* etcd's ResponseHeader. */
typedef struct ketch_header {
  uint64_t cluster_id, member_id;
  int64_t revision; /* the store's revision when the request was served */
  uint64_t raft_term;
} ketch_header;

/* etcd's mvccpb.KeyValue. key/value are not NUL-terminated. */
typedef struct ketch_kv {
  const char *key;
  size_t key_len;
  const char *value;
  size_t value_len;
  int64_t create_revision, mod_revision, version, lease;
} ketch_kv;

typedef struct ketch_range_result {
  const ketch_kv *kvs; /* n_kvs entries (none when count_only) */
  size_t n_kvs;
  bool more;     /* more keys matched than `limit` allowed */
  int64_t count; /* keys in the range (regardless of limit) */
} ketch_range_result;

typedef struct ketch_put_result {
  const ketch_kv *prev_kv; /* NULL unless prev_kv was asked and the key existed */
} ketch_put_result;

typedef struct ketch_delete_result {
  int64_t deleted;          /* number of keys deleted */
  const ketch_kv *prev_kvs; /* n_prev_kvs entries when prev_kv was asked */
  size_t n_prev_kvs;
} ketch_delete_result;

typedef struct ketch_op_result ketch_op_result;

typedef struct ketch_txn_result {
  bool succeeded;                   /* the compares held: `success` ran */
  const ketch_op_result *responses; /* one per op of the branch that ran */
  size_t n_responses;
} ketch_txn_result;

/* The response of one txn op. */
struct ketch_op_result {
  int type; /* KETCH_OP_RANGE / PUT / DELETE / TXN */
  union {
    ketch_range_result range;
    ketch_put_result put;
    ketch_delete_result del;
    ketch_txn_result txn;
  };
};

typedef struct ketch_status_result {
  const char *version; /* server version, NUL-terminated */
  int64_t db_size, db_size_in_use;
  uint64_t leader; /* member id of the leader, 0 = none known */
  uint64_t raft_index, raft_term, raft_applied_index;
  bool is_learner;
  const char *const *errors; /* n_errors NUL-terminated strings (alarms) */
  size_t n_errors;
} ketch_status_result;

/* One member of the cluster (etcd's Member). Strings are NUL-terminated.
 * A member added but not started yet has an empty name and no client_urls
 * (etcd's "unstarted"); client_urls are known once the member published them
 * (each time it starts serving). */
typedef struct ketch_member {
  uint64_t id;
  const char *name;
  const char *const *peer_urls; /* n_peer_urls */
  size_t n_peer_urls;
  const char *const *client_urls; /* n_client_urls */
  size_t n_client_urls;
  bool is_learner;
} ketch_member;

/* member_list, and the member_add/remove/update/promote results: the
 * members (after the change), and for member_add the member added. */
typedef struct ketch_member_list_result {
  const ketch_member *members; /* sorted by id, as etcd */
  size_t n_members;
  const ketch_member *added; /* member_add: the new member (its id); else NULL */
} ketch_member_list_result;

/* The result of a lease request; fields a type does not use are zero.
 * grant: id, ttl (granted seconds). revoke: header only. keepalive: id, ttl
 * (renewed TTL; 0 = the lease was not found or had expired, as etcd).
 * timetolive: id, ttl (remaining seconds; -1 = not found, as etcd),
 * granted_ttl, and with keys: n_keys kvs of which only key/key_len are set.
 * leases: n_leases ids, ascending. */
typedef struct ketch_lease_result {
  int64_t id, ttl, granted_ttl;
  const ketch_kv *keys;
  size_t n_keys;
  const int64_t *leases;
  size_t n_leases;
} ketch_lease_result;

enum { KETCH_EVENT_PUT = 0, KETCH_EVENT_DELETE = 1 };
/* One change (etcd's mvccpb.Event). For DELETE, kv has the key and
 * mod_revision (the deleting revision) only. prev_kv is NULL unless the
 * watch asked for it and the key existed before. */
typedef struct ketch_event {
  int type; /* KETCH_EVENT_PUT / KETCH_EVENT_DELETE */
  ketch_kv kv;
  const ketch_kv *prev_kv;
} ketch_event;

/* One delivery of a watch (etcd's WatchResponse). header.revision is the
 * store's revision when it was sent; for a progress notification (no events,
 * not created, not canceled) every event up to header.revision was
 * delivered. */
typedef struct ketch_watch_result {
  int64_t watch_id;          /* the watch's handle (ketch_watch's *out) */
  bool created;              /* the watch is established (first delivery) */
  bool canceled;             /* last delivery: the watch ended (see err/compact_revision) */
  int64_t compact_revision;  /* canceled because start_revision was compacted */
  const ketch_event *events; /* in revision order; one revision's events may
                                span deliveries only with fragment */
  size_t n_events;
} ketch_watch_result;

/* An alarm (etcd's AlarmMember). */
typedef struct ketch_alarm_member {
  uint64_t member_id;
  int alarm; /* KETCH_ALARM_NOSPACE, KETCH_ALARM_CORRUPT */
} ketch_alarm_member;

/* get: every active alarm; activate / deactivate: the alarm raised or
 * cleared (n_alarms 0 if there was nothing to clear). */
typedef struct ketch_alarm_result {
  const ketch_alarm_member *alarms;
  size_t n_alarms;
} ketch_alarm_result;

/* etcd's HashKVResponse: a 32-bit hash of every key's revisions up to
 * hash_revision (those compaction kept), equal on every member at the same
 * revision. */
typedef struct ketch_hash_kv_result {
  uint32_t hash;
  int64_t compact_revision; /* the member's compaction revision when hashed */
  int64_t hash_revision;    /* the revision hashed */
} ketch_hash_kv_result;

/* A snapshot. From ketch_snapshot_async, each delivery: blob/blob_len are
 * the next bytes of the snapshot file and remaining_bytes what follows them
 * (0 in the last delivery). From ketch_snapshot_save: size_bytes, the saved
 * file's size (blob NULL). */
typedef struct ketch_snapshot_result {
  const void *blob;
  size_t blob_len;
  uint64_t remaining_bytes;
  uint64_t size_bytes;
} ketch_snapshot_result;

/* One permission of a role: perm_type on [key, range_end) with etcd's range
 * rules (range_end_len 0: the key alone; "\0": every key from key on). */
typedef struct ketch_auth_perm {
  int perm_type; /* KETCH_PERM_* */
  const char *key;
  size_t key_len;
  const char *range_end;
  size_t range_end_len;
} ketch_auth_perm;

/* An Auth result; fields a type does not use are zero. authenticate: token
 * (NUL-terminated). auth_status: enabled, auth_revision. user_get: roles
 * (the user's). user_list: users. role_list: roles. role_get: perms. Names
 * are NUL-terminated, sorted. The changes have only the header. */
typedef struct ketch_auth_result {
  const char *token;
  bool enabled;
  uint64_t auth_revision;
  const char *const *users;
  size_t n_users;
  const char *const *roles;
  size_t n_roles;
  const ketch_auth_perm *perms;
  size_t n_perms;
} ketch_auth_result;

/* The result of one request. `type` says which union member is filled.
 * When err != 0 the header and the union are zero and `message` explains
 * (except a watch's last delivery: watch.canceled, watch_id and
 * compact_revision are set, and the header of the server's canceled frame
 * when there was one). */
typedef struct ketch_result {
  int type;            /* KETCH_OP_* of the request */
  int err;             /* 0 or KETCH_E* */
  const char *message; /* never NULL; "" when err == 0 */
  ketch_header header; /* for every successful result */
  union {
    ketch_range_result range;
    ketch_put_result put;
    ketch_delete_result del;
    ketch_txn_result txn;
    ketch_status_result status;           /* compact and move_leader have only the header */
    ketch_member_list_result member_list; /* also member_add/remove/update/promote */
    ketch_lease_result lease;
    ketch_watch_result watch; /* type KETCH_OP_WATCH, given to a watch callback */
    ketch_alarm_result alarm; /* defragment has only the header */
    ketch_hash_kv_result hash_kv;
    ketch_snapshot_result snapshot;
    ketch_auth_result auth; /* KETCH_OP_AUTH_ENABLE .. ROLE_REVOKE_PERMISSION */
  };
} ketch_result;

/* Frees a result returned by a synchronous call or ketch_result_dup (and
 * all memory it points to). NULL is fine. Never call it on a result given to
 * a callback. */
void ketch_result_free(ketch_result *res);

/* A deep copy of any result (e.g. one given to a callback, to keep it past
 * the callback), owned by the caller: free it with ketch_result_free().
 * NULL if out of memory. */
ketch_result *ketch_result_dup(const ketch_result *res);

/* ---- opening and closing ---- */

typedef struct ketch_client ketch_client;

typedef struct ketch_options {
  int dial_timeout_ms;    /* connect + handshake, per endpoint; 0 = 2000 */
  int request_timeout_ms; /* submit to completion, per request; 0 = 5000 */
  int max_outstanding;    /* requests submitted and not completed; 0 = 4096 */
  bool nonblocking_open;  /* ketch_open does not connect; the first request does */
  /* Credentials (etcdctl's --user / --password), for a cluster with auth
   * enabled. Every connection the handle opens authenticates with them
   * before it carries a request: with the token the last authentication
   * returned (a signed token is good on every member) or else the password.
   * When the member says the connection's user is no longer valid (password
   * changed, user deleted, auth enabled again: KETCH_EINVALIDTOKEN; or auth
   * was enabled after the connection opened: KETCH_EUSEREMPTY), the handle
   * authenticates again and sends the request again, once; when the auth
   * store moved while a write was in flight (KETCH_EAUTHOLDREVISION: nothing
   * was applied) the write is sent again, at most 3 times — as clientv3.
   * Authentication is refused (wrong password): ketch_open returns
   * KETCH_EAUTHFAILED, later requests complete with it. With auth disabled
   * on the cluster the credentials are not used. Copied by ketch_open. */
  const char *user, *password;
  /* Or a token alone (one an Authenticate returned, e.g. to a proxy): every
   * connection presents it; when the member refuses it (expired, another
   * member's simple token, its user's password changed) requests complete
   * with KETCH_EINVALIDTOKEN. Ignored when user is set. */
  const char *token;
  /* TLS, as etcdctl's flags. An endpoint written "https://" uses TLS, one
   * written "http://" never does, one without a scheme does when `tls` is
   * set or any of the three files is given. The server's certificate is
   * verified against ca_file (NULL: the system's CAs) and must be valid for
   * server_name (NULL: the endpoint's host, a name or an IP address). */
  bool tls;
  const char *ca_file;              /* --cacert */
  const char *cert_file, *key_file; /* --cert / --key: a client certificate */
  const char *server_name;
  bool insecure_skip_verify; /* --insecure-skip-tls-verify: tests only */
  /* A proxy's verified caller (the Common Name of the client certificate it
   * checked), sent in HELLO; the member believes it only on a connection
   * that presented a verified client certificate (net/PROTOCOL.md). NULL:
   * none. */
  const char *identity;
  /* Proxies registered under a resolver prefix (ketchctl's
   * --resolver-prefix; etcd's grpc-proxy --resolver-prefix layout): with a
   * prefix P, ketch_open's `endpoints` are the cluster's, where it reads the
   * registrations (ketch_resolve_prefix, blocking even with
   * nonblocking_open), and the handle's endpoints are the registered
   * proxies, tried from a random one (many clients spread over them) and
   * round robin from there, as any endpoint list. They are read again, as
   * ketch_open_srv's records, before a new connection when the last reading
   * is more than KETCH_SRV_REFRESH_MS old and when every proxy failed in a
   * row (blocking for about a dial timeout per cluster endpoint, not in
   * handles opened with nonblocking_open). NULL: none. Added after the
   * fields above: a program built against an older ketch.h must be built
   * again (its ketch_options is smaller). */
  const char *resolver_prefix;
} ketch_options;

/* Fills *opts with the defaults (a zeroed struct means the same). */
void ketch_options_init(ketch_options *opts);

/* Opens a handle. `endpoints` is a comma-separated list of host:port
 * ("127.0.0.1:2479,127.0.0.1:2579"); an "http://" or "https://" prefix picks
 * plaintext or TLS (see ketch_options), a trailing "/" is ignored, a missing
 * port means 2479, IPv6
 * literals are written [::1]:2479. Names are resolved with getaddrinfo at
 * connect time (which may block for a non-numeric host). opts may be NULL.
 *
 * Unless opts->nonblocking_open, it connects before returning: it tries each
 * endpoint in order, each for at most dial_timeout_ms, until one completes
 * the HELLO handshake.
 * Returns 0 and sets *out, or: KETCH_EINVAL (bad endpoint list or option, a
 * TLS file missing or unreadable; `errmsg`, if not NULL, gets the reason),
 * KETCH_EUNAVAILABLE (no endpoint completed the handshake; errmsg names each
 * endpoint's failure, e.g. refused, timed out, a protocol version mismatch,
 * or why TLS failed: "server certificate rejected: certificate has expired
 * ...", "the server refused the TLS handshake: ... alert unknown ca ..."),
 * KETCH_ENOMEM.
 * errmsg_len is the size of errmsg. *out is NULL on error. */
int ketch_open(ketch_client **out, const char *endpoints, const ketch_options *opts, char *errmsg,
               size_t errmsg_len);

/* DNS SRV discovery of the endpoints (etcdctl --discovery-srv, clientv3's
 * srv.GetClient): the targets of _ketch-client-ssl[-SUFFIX]._tcp.DOMAIN
 * (written "https://ADDRESS:port") and _ketch-client[-SUFFIX]._tcp.DOMAIN
 * ("http://ADDRESS:port"), resolved with c-ares and ordered by SRV priority,
 * then weight (highest first). suffix may be NULL; dns_servers
 * ("host:port,...") NULL uses /etc/resolv.conf. Blocks for at most
 * timeout_ms (0 = 5000). Writes the comma-separated list into buf (buf_len
 * bytes). For TLS, the certificate is checked against ADDRESS unless
 * ketch_options.server_name is set.
 * Returns 0, or KETCH_ENOTFOUND (no record with a resolvable target),
 * KETCH_ETIMEOUT, KETCH_EUNAVAILABLE (the resolver failed), KETCH_EINVAL
 * (bad argument or dns_servers, buf too small); errmsg gets the reason. Not
 * thread-safe on its first call (c-ares' library init). */
int ketch_srv_endpoints(const char *domain, const char *suffix, const char *dns_servers,
                        int timeout_ms, char *buf, size_t buf_len, char *errmsg, size_t errmsg_len);

/* ketch_srv_endpoints, then ketch_open on the list (errors of either).
 * The handle looks the records up again (c-ares 1.18 does not give the SRV
 * records' TTL, so on a fixed interval rather than at the TTL) before it
 * opens a new connection when the last lookup is more than
 * KETCH_SRV_REFRESH_MS old, and whenever every endpoint of the list failed
 * in a row; a list that differs (and needs no TLS the handle lacks) replaces
 * the endpoints and is tried from its first. A connection that works is kept
 * whatever the records say. The lookup blocks the calling thread for at most
 * min(dial_timeout_ms, 2 s), so a handle opened with nonblocking_open keeps
 * the list it was opened with. */
#define KETCH_SRV_REFRESH_MS 30000
int ketch_open_srv(ketch_client **out, const char *domain, const char *suffix,
                   const char *dns_servers, const ketch_options *opts, char *errmsg,
                   size_t errmsg_len);

/* The native endpoints registered under `prefix` in the cluster at
 * `endpoints` (opts as ketch_open's; its resolver_prefix is ignored): one
 * linearizable range of PREFIX/ on a blocking handle. The registrations are
 * etcd's grpc-proxy ones (key PREFIX/ADDR on a lease, value
 * {"Op":0,"Addr":ADDR,"Metadata":...}); only those whose Metadata carries
 * \"Protocol\":\"ketch\" (what `ketch gateway start --resolver-prefix`
 * writes) are endpoints libketch can talk to: ketch-grpc's speak gRPC and
 * are skipped. Writes "ADDR,ADDR,..." into buf (buf_len bytes), rotated to
 * start at a random entry. Returns 0, KETCH_ENOTFOUND (none registered;
 * errmsg says whether gRPC proxies were), KETCH_EINVAL (bad argument, buf
 * too small), or ketch_open's and the range's errors (errmsg: why). */
int ketch_resolve_prefix(const char *endpoints, const char *prefix, const ketch_options *opts,
                         char *buf, size_t buf_len, char *errmsg, size_t errmsg_len);

/* Closes the connection and frees the handle. Pending asynchronous requests
 * complete first, from inside this call, with KETCH_ECANCELED (writes among
 * them may have been applied). Results returned earlier by synchronous calls
 * stay valid. Not to be called from inside a callback. NULL is fine. */
void ketch_close(ketch_client *c);

/* Replaces the handle's endpoint list (clientv3's SetEndpoints; what an
 * endpoint auto-sync from the member list calls), in the format of
 * ketch_open's. Nothing pending is disturbed: the connection in use stays;
 * if its endpoint is not in the new list it is kept at the list's end until
 * the handle leaves it (a failure), then dropped by the next call. Failover
 * goes round the new list. Returns 0, KETCH_EINVAL (a bad endpoint, an empty
 * list, an https:// one on a handle opened without TLS; errmsg says which,
 * the list is unchanged) or KETCH_ENOMEM. */
int ketch_set_endpoints(ketch_client *c, const char *endpoints, char *errmsg, size_t errmsg_len);

/* The endpoint ("host:port") of the current connection, or NULL when not
 * connected. Valid until the next call on c. */
const char *ketch_endpoint(const ketch_client *c);
/* cluster_id and member_id the connected member announced in its HELLO;
 * 0 when not connected. */
uint64_t ketch_cluster_id(const ketch_client *c);
uint64_t ketch_member_id(const ketch_client *c);
/* A message for the last error returned by a synchronous call or ketch_open
 * on c (the server's message when there is one); "" if none. NUL-terminated,
 * valid until the next call on c. */
const char *ketch_errmsg(const ketch_client *c);

/* ---- synchronous calls ----
 * Each blocks until the request completes or request_timeout_ms passes.
 * Returns 0 and, if out is not NULL, sets *out to a result the caller frees
 * with ketch_result_free(). On error returns the KETCH_E* code, sets *out to
 * NULL and ketch_errmsg(c) explains. While a synchronous call waits,
 * callbacks of asynchronous requests pending on c may run. Must not be called
 * from inside a callback (returns KETCH_EINVAL). */

/* Get one key, linearizably: *out->range has 0 or 1 kv. */
int ketch_get(ketch_client *c, const void *key, size_t key_len, ketch_result **out);
int ketch_range(ketch_client *c, const ketch_range_req *req, ketch_result **out);
int ketch_put(ketch_client *c, const ketch_put_req *req, ketch_result **out);
int ketch_delete(ketch_client *c, const ketch_delete_req *req, ketch_result **out);
int ketch_txn(ketch_client *c, const ketch_txn_req *req, ketch_result **out);
/* Compacts history before `revision`; `physical`: return once the space is
 * reclaimed. KETCH_ECOMPACTED / KETCH_EFUTUREREV as etcd. */
int ketch_compact(ketch_client *c, int64_t revision, bool physical, ketch_result **out);
/* Status of the connected member (version, db size, leader, raft index/term). */
int ketch_status(ketch_client *c, ketch_result **out);
/* The cluster's members as the connected member knows them (etcd's
 * MemberList: answered locally, even without a leader). *out->member_list. */
int ketch_member_list(ketch_client *c, ketch_result **out);
/* Membership changes (etcd's MemberAdd/Remove/Update/Promote), one at a time
 * cluster-wide: any member takes them (a follower forwards to the leader) and
 * answers once the change applied there; out->member_list has the members
 * after it (and `added` for add). Errors: KETCH_EBUSY "a membership change is
 * already in progress", KETCH_EPEERURLEXISTS, KETCH_EMEMBERBADURLS (peer URLs
 * must be http://host:port), KETCH_EMEMBERNOTFOUND, KETCH_EMEMBERNOTLEARNER,
 * KETCH_ELEARNERNOTREADY (the learner is still catching up: retry),
 * KETCH_EUNHEALTHY (the change would leave too few connected voters for a
 * quorum), KETCH_ENOLEADER; never retried once sent (KETCH_EUNKNOWN). The
 * new member of an add is started with --initial-cluster-state existing and
 * an --initial-cluster listing every member (ketchctl member add prints it). */
int ketch_member_add(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                     bool is_learner, ketch_result **out);
int ketch_member_remove(ketch_client *c, uint64_t id, ketch_result **out);
int ketch_member_update(ketch_client *c, uint64_t id, const char *const *peer_urls,
                        size_t n_peer_urls, ketch_result **out);
int ketch_member_promote(ketch_client *c, uint64_t id, ketch_result **out);
/* Hands leadership to member `target_id` (etcd's MoveLeader). Must reach the
 * leader: any other member answers KETCH_EINVAL "not leader" (find the
 * leader with ketch_status first). Completes once the target leads (result
 * with only the header), or with KETCH_EINVAL "bad leader transferee" (not a
 * voting member), KETCH_ETIMEOUT "request timed out, leader transfer took too
 * long" (two election timeouts passed), KETCH_EBUSY (a transfer is already
 * running). Never retried on another endpoint once sent (KETCH_EUNKNOWN). */
int ketch_move_leader(ketch_client *c, uint64_t target_id, ketch_result **out);

/* The callback of asynchronous requests, watches and keep-alives (see
 * "asynchronous calls" below). */
typedef void (*ketch_cb)(void *arg, int err, const ketch_result *res);

/* ---- maintenance (etcd's Maintenance service) ----
 * These talk to the member the handle is connected to (etcdctl's
 * per-endpoint commands open one handle per endpoint).
 *
 * ketch_snapshot_save streams the member's state as a ketch snapshot file
 * (net/PROTOCOL.md SNAPSHOT; the member takes a fresh snapshot first if its
 * newest one is older than the call) into path + ".part", checks the
 * file's magic and its BLAKE2b trailer hash while receiving, fsyncs it,
 * renames it to path and fsyncs the directory. `ketchutl snapshot restore
 * path --data-dir DIR` makes a new member's data dir from it. The result's
 * snapshot.size_bytes is the file's size. Errors: the server's, ECORRUPT
 * (the bytes received do not form a snapshot file: the .part file is
 * removed), EIO (path cannot be written: ketch_errmsg says why), ECLOSED
 * (the connection was lost during the transfer; a transfer is never
 * restarted on another endpoint), ETIMEOUT (no data for request_timeout_ms).
 * Blocks the calling thread for the whole transfer.
 *
 * ketch_defragment: the member finishes freeing compacted history, gives
 * freed memory back to the OS and writes a snapshot (so its WAL before the
 * previous snapshot is purged); answered when that is durable.
 * ketch_hash_kv: revision 0 = the member's current revision; ECOMPACTED /
 * EFUTUREREV as etcd. ketch_alarm: action KETCH_ALARM_GET lists alarms
 * (answered locally); ACTIVATE / DEACTIVATE go through the cluster's log
 * (deactivating the last NOSPACE alarm lets writes in again; they succeed
 * once compaction brought the store under its quota). */
int ketch_snapshot_save(ketch_client *c, const char *path, ketch_result **out);
int ketch_defragment(ketch_client *c, ketch_result **out);
int ketch_hash_kv(ketch_client *c, int64_t revision, ketch_result **out);
int ketch_alarm(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_result **out);
/* ---- authentication and RBAC (etcd's Auth service) ----
 * ketch_authenticate: from now on the handle is `user` (see ketch_options'
 * user/password): it authenticates now, on the current connection (opening
 * one if needed), and returns 0, KETCH_EAUTHFAILED ("authentication failed,
 * invalid user ID or password"), KETCH_EAUTHNOTENABLED (auth is disabled:
 * the credentials are kept for when it is enabled), or a connection error.
 * password may be NULL for a user identified by its client certificate.
 *
 * ketch_auth runs one of etcd's Auth calls, `op` one of KETCH_OP_AUTH_ENABLE,
 * _AUTH_DISABLE, _AUTH_STATUS, _USER_ADD (name, password or no_password),
 * _USER_GET, _USER_DELETE, _USER_CHANGE_PASSWORD (name, password),
 * _USER_LIST, _USER_GRANT_ROLE / _USER_REVOKE_ROLE (name, role), _ROLE_ADD,
 * _ROLE_GET, _ROLE_DELETE (name), _ROLE_LIST, _ROLE_GRANT_PERMISSION (name,
 * perm_type, key, range_end), _ROLE_REVOKE_PERMISSION (name, key,
 * range_end). Errors are etcd's (KETCH_EUSERNOTFOUND "user name not found",
 * KETCH_EROOTUSERNOTEXIST, KETCH_EPERMDENIED, ...). The reads and changes
 * other than AUTH_STATUS need root, except USER_GET of oneself and ROLE_GET
 * of one's own role. */
typedef struct ketch_auth_req {
  const char *name; /* the user, or the role for ROLE_* */
  const char *password;
  bool no_password; /* USER_ADD: a user only a client certificate names */
  const char *role; /* USER_GRANT_ROLE / USER_REVOKE_ROLE */
  int perm_type;    /* ROLE_GRANT_PERMISSION: KETCH_PERM_* */
  const void *key;
  size_t key_len;
  const void *range_end;
  size_t range_end_len;
} ketch_auth_req;
int ketch_authenticate(ketch_client *c, const char *user, const char *password);
/* The same without waiting: cb gets a KETCH_OP_AUTHENTICATE result whose
 * auth.token is the member's token; on success the handle is `user` from
 * then on (as ketch_authenticate). KETCH_EBUSY while another one is in
 * flight. A wrong password leaves the handle as it was. */
int ketch_authenticate_async(ketch_client *c, const char *user, const char *password, ketch_cb cb,
                             void *arg);
/* For a proxy that hands the token to its own client: from now on the
 * handle forgets the password and authenticates with its token alone (as
 * ketch_options.token), so a token the member stops honouring (expired, its
 * user's password changed, the user deleted) shows as KETCH_EINVALIDTOKEN
 * instead of being renewed. No effect without a token. */
void ketch_drop_password(ketch_client *c);
/* The token the handle's last authentication got (to hand to another
 * handle as ketch_options.token), or NULL. Valid until the next call on c. */
const char *ketch_token(const ketch_client *c);
int ketch_auth(ketch_client *c, int op, const ketch_auth_req *req, ketch_result **out);
int ketch_auth_async(ketch_client *c, int op, const ketch_auth_req *req, ketch_cb cb, void *arg);
/* Whether the handle's user may watch [key, range_end) now (ketch's own
 * request, no etcd counterpart; for a proxy that serves a watch from one it
 * already has): 0 with the member's header, or the error a watch of that
 * range would get from the member (KETCH_EPERMDENIED, KETCH_EINVALIDTOKEN,
 * KETCH_EUSEREMPTY, ...). The member decides from its auth store alone and
 * reads no key, so it costs it the same for one key or for all of them.
 * range_end as ketch_range_req's. Result type KETCH_OP_AUTH_CHECK. */
int ketch_auth_check(ketch_client *c, const void *key, size_t key_len, const void *range_end,
                     size_t range_end_len, ketch_result **out);
int ketch_auth_check_async(ketch_client *c, const void *key, size_t key_len, const void *range_end,
                           size_t range_end_len, ketch_cb cb, void *arg);

/* Asynchronous forms. ketch_snapshot_async's cb runs once per piece of the
 * file (type KETCH_OP_SNAPSHOT), in order; the last run has remaining_bytes
 * 0, or err set (then nothing follows). Each piece resets the request's
 * deadline: a transfer ends with ETIMEOUT only after request_timeout_ms
 * without data. The caller checks the file (kt_snap_verify or
 * `ketchutl snapshot status`). */
int ketch_snapshot_async(ketch_client *c, ketch_cb cb, void *arg);
int ketch_defragment_async(ketch_client *c, ketch_cb cb, void *arg);
int ketch_hash_kv_async(ketch_client *c, int64_t revision, ketch_cb cb, void *arg);
int ketch_alarm_async(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_cb cb,
                      void *arg);

/* ---- leases (etcd's Lease service) ----
 * grant: ttl_s > 0 seconds; id 0 lets the server choose (else
 * KETCH_ELEASEEXISTS if taken). revoke deletes the lease's keys in one
 * revision (KETCH_ELEASENOTFOUND). keepalive_once renews once (ttl 0 in the
 * result if the lease is gone). timetolive with keys lists the attached keys.
 * Any member answers (followers forward keep-alive and time-to-live to the
 * leader, which alone knows the remaining TTLs). */
int ketch_lease_grant(ketch_client *c, int64_t ttl_s, int64_t id, ketch_result **out);
int ketch_lease_revoke(ketch_client *c, int64_t id, ketch_result **out);
int ketch_lease_keepalive_once(ketch_client *c, int64_t id, ketch_result **out);
int ketch_lease_timetolive(ketch_client *c, int64_t id, bool keys, ketch_result **out);
int ketch_lease_leases(ketch_client *c, ketch_result **out);

/* Library-driven keep-alive (clientv3's KeepAlive): from now on the handle
 * renews lease `id` every ttl/3 seconds from inside ketch_process() (its
 * deadline counts in ketch_timeout_ms), across reconnects, until
 * ketch_lease_keepalive_stop() or the lease is found gone. cb (may be NULL)
 * runs after each renewal with type KETCH_OP_LEASE_KEEPALIVE; a result with
 * ttl 0 (lease gone) is the last one. A renewal that fails (timeout, no
 * endpoint) is retried every 0.5 s without a callback; once a whole TTL has
 * passed without a successful renewal the lease is presumed lost and cb gets
 * that error as its last result. Starting a lease that is already kept alive
 * replaces its cb/arg. Returns KETCH_EINVAL for id <= 0, KETCH_EBUSY if the
 * handle already keeps 65536 leases alive. */
int ketch_lease_keepalive_start(ketch_client *c, int64_t id, ketch_cb cb, void *arg);
int ketch_lease_keepalive_stop(ketch_client *c, int64_t id); /* KETCH_ENOTFOUND */

/* ---- watch (etcd's Watch service) ----
 * ketch_watch opens a watch; cb runs (from ketch_process) for every delivery:
 * first created, then events and progress notifications, and finally one
 * with canceled (after ketch_watch_cancel, a compacted start revision
 * (err KETCH_ECOMPACTED, compact_revision set), or ketch_close: err
 * KETCH_ECANCELED). Nothing runs after the canceled delivery.
 * Exactly once, in order: when the connection is lost the library opens the
 * watch again on the next endpoint from the revision after the last one it
 * delivered, and drops events it already delivered, so the callback sees no
 * gap and no repeat across failover (created is not delivered again).
 * *out gets the watch's handle id (> 0, the library's, stable across
 * failover; not the server's watch_id) for ketch_watch_cancel. */
typedef struct ketch_watch_req {
  const void *key;
  size_t key_len;
  const void *range_end;
  size_t range_end_len;
  bool prefix, from_key;  /* as in ketch_range_req */
  int64_t start_revision; /* 0 = from the next revision */
  bool prev_kv, no_put, no_delete;
  bool progress_notify; /* periodic progress notifications while idle */
  bool fragment;        /* allow a huge revision to be split across deliveries */
} ketch_watch_req;
int ketch_watch(ketch_client *c, const ketch_watch_req *req, ketch_cb cb, void *arg, uint64_t *out);
int ketch_watch_cancel(ketch_client *c, uint64_t watch);
/* Asks for a progress notification on every watch of the handle. */
int ketch_watch_progress(ketch_client *c);

/* ---- concurrency recipes (etcd's concurrency package) ----
 * A session is a lease kept alive by the handle (ketch_lease_keepalive_start):
 * if the process dies, its locks and candidacies go away after the TTL.
 * ketch_session_open with ttl_s <= 0 uses 60 s (etcd's default).
 * The member offers the same lock and election as services (native LOCK ..
 * RESIGN, net/PROTOCOL.md 6.15) with the same keys: both kinds interoperate.
 *
 * Mutex: key = name + "/" + lease id in hex; waiters are ordered by create
 * revision and each waits on (watches) only its predecessor's deletion.
 * lock blocks until held or timeout_ms (-1 = no limit: KETCH_ETIMEOUT);
 * try_lock returns KETCH_EBUSY ("locked by another session") at once.
 * *out_key / *out_rev (if not NULL): the lock's key (malloc'ed, NUL-terminated,
 * caller frees) and its create revision — a fencing token. A waiter whose
 * session expired while it waited gets KETCH_ELEASENOTFOUND, not the lock
 * (etcd 3.4 would report it held); on timeout or error its key is deleted. */
int ketch_session_open(ketch_client *c, int64_t ttl_s, int64_t *lease_out);
int ketch_session_close(ketch_client *c, int64_t lease); /* revokes the lease */
int ketch_mutex_lock(ketch_client *c, const char *name, int64_t lease, int timeout_ms,
                     char **out_key, int64_t *out_rev);
int ketch_mutex_try_lock(ketch_client *c, const char *name, int64_t lease, char **out_key,
                         int64_t *out_rev);
int ketch_mutex_unlock(ketch_client *c, const char *key);
/* Election (etcd's concurrency.Election): campaign blocks until this session
 * leads (its key is the oldest under name/), then the value is proclaimed.
 * proclaim returns KETCH_ENOTFOUND once this session no longer leads (its
 * key is gone or was recreated). leader returns the current leader's kv
 * (KETCH_ENOTFOUND: none). observe runs cb for every leader change or new
 * value (result type KETCH_OP_WATCH, one put event of the leader's key) until
 * ketch_watch_cancel(*out); the final canceled delivery is passed on too. */
int ketch_election_campaign(ketch_client *c, const char *name, int64_t lease, const void *value,
                            size_t value_len, int timeout_ms, char **out_key, int64_t *out_rev);
int ketch_election_proclaim(ketch_client *c, const char *key, int64_t rev, const void *value,
                            size_t value_len);
int ketch_election_resign(ketch_client *c, const char *key);
int ketch_election_leader(ketch_client *c, const char *name, ketch_result **out);
int ketch_election_observe(ketch_client *c, const char *name, ketch_cb cb, void *arg,
                           uint64_t *out);

/* ---- asynchronous calls ----
 * `cb` runs exactly once per accepted request, from inside ketch_process(),
 * a synchronous call, ketch_run() or ketch_close() — never from inside the
 * submit function. err is 0 or a KETCH_E* code; res is never NULL, and
 * res->err == err. res and all it points to are valid only until cb returns.
 * A callback may submit more asynchronous requests; it must not call a
 * synchronous function, ketch_run() or ketch_close().
 *
 * Submit functions return 0 (accepted: cb will run) or an error, in which
 * case cb never runs: KETCH_EINVAL (bad request: e.g. prefix with a
 * range_end, unknown sort order), KETCH_ETOOLARGE (larger than the server's
 * max request bytes), KETCH_EBUSY (max_outstanding requests pending),
 * KETCH_ENOMEM. A request that the server refuses (e.g. KETCH_EKEYEMPTY)
 * is accepted here and completes with that error and the server's message.
 *
 * Submitting only queues the frame; it leaves in the next ketch_process()
 * (many frames, one write()). */
int ketch_get_async(ketch_client *c, const void *key, size_t key_len, ketch_cb cb, void *arg);
int ketch_range_async(ketch_client *c, const ketch_range_req *req, ketch_cb cb, void *arg);
int ketch_put_async(ketch_client *c, const ketch_put_req *req, ketch_cb cb, void *arg);
int ketch_delete_async(ketch_client *c, const ketch_delete_req *req, ketch_cb cb, void *arg);
int ketch_txn_async(ketch_client *c, const ketch_txn_req *req, ketch_cb cb, void *arg);
int ketch_compact_async(ketch_client *c, int64_t revision, bool physical, ketch_cb cb, void *arg);
int ketch_status_async(ketch_client *c, ketch_cb cb, void *arg);
int ketch_member_list_async(ketch_client *c, ketch_cb cb, void *arg);
int ketch_member_add_async(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                           bool is_learner, ketch_cb cb, void *arg);
int ketch_member_remove_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg);
int ketch_member_update_async(ketch_client *c, uint64_t id, const char *const *peer_urls,
                              size_t n_peer_urls, ketch_cb cb, void *arg);
int ketch_member_promote_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg);
int ketch_move_leader_async(ketch_client *c, uint64_t target_id, ketch_cb cb, void *arg);
int ketch_lease_grant_async(ketch_client *c, int64_t ttl_s, int64_t id, ketch_cb cb, void *arg);
int ketch_lease_revoke_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg);
int ketch_lease_keepalive_once_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg);
int ketch_lease_timetolive_async(ketch_client *c, int64_t id, bool keys, ketch_cb cb, void *arg);
int ketch_lease_leases_async(ketch_client *c, ketch_cb cb, void *arg);

/* ---- event-loop integration ----
 * Typical loop (poll; libev/libuv/epoll are the same idea):
 *
 *   for (;;) {
 *     struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
 *     poll(&p, p.fd >= 0, ketch_timeout_ms(c));
 *     ketch_process(c);
 *   }
 *
 * ketch_fd: the socket to watch, or -1 when there is none right now (then
 * only the timeout matters). It changes when the library reconnects: read it
 * again after each ketch_process() and submit.
 * ketch_events: POLLIN and/or POLLOUT (<poll.h> values) wanted on ketch_fd.
 * ketch_timeout_ms: milliseconds until ketch_process() must run even without
 * I/O (a request or dial deadline, a reconnect backoff); 0 = now; -1 = no
 * deadline (nothing pending).
 * ketch_process: never blocks. Connects, writes queued frames, reads and
 * dispatches every complete response, expires deadlines, fails over. Calling
 * it when nothing is ready is harmless. Returns 0, or KETCH_EUNAVAILABLE when
 * the handle is between endpoints (no connection right now: informational,
 * the pending requests keep their deadlines), or KETCH_EINVAL from inside a
 * callback. */
int ketch_fd(const ketch_client *c);
short ketch_events(const ketch_client *c);
int ketch_timeout_ms(const ketch_client *c);
int ketch_process(ketch_client *c);

/* Number of requests submitted and not yet completed. Watches are not
 * requests (nor are keep-alives, but a renewal in flight is): ketch_run()
 * does not wait for them. */
size_t ketch_pending(const ketch_client *c);

/* A small loop of its own for programs without one: poll + ketch_process
 * until no request is pending or timeout_ms passes (-1 = no limit). Returns
 * 0 when nothing is pending any more, KETCH_ETIMEOUT otherwise. Not from
 * inside a callback (KETCH_EINVAL). */
int ketch_run(ketch_client *c, int timeout_ms);

/* ---- helpers ---- */

/* The range_end that makes [prefix, end) cover every key starting with
 * prefix (etcd's GetPrefixRangeEnd): prefix with its last byte below 0xff
 * incremented and what follows dropped; "\0" (length 1) when every byte is
 * 0xff or n == 0 (all keys). out needs room for max(n, 1) bytes. Returns the
 * length written. */
size_t ketch_prefix_end(const void *prefix, size_t n, void *out);

#ifdef __cplusplus
}
#endif

#endif
