/* net/schema.c — the native protocol's messages as data (see schema.h).
 * Field order is the encoding order; net/PROTOCOL.md's tables are checked
 * against these tables by test/unit/proto_schema_test.c. */
#include "schema.h"

#include <stddef.h>

#define NM(s) .name = s, .name_len = sizeof(s) - 1
#define AT(T, m) .off = offsetof(T, m)
#define SCALAR(T, m, s, k)                                                                         \
  { NM(s), .kind = k, AT(T, m), .aux = KT_NO_AUX }
#define U64(T, m, s) SCALAR(T, m, s, KT_F_U64)
#define U32(T, m, s) SCALAR(T, m, s, KT_F_U32)
#define I64(T, m, s) SCALAR(T, m, s, KT_F_I64)
#define BOOL(T, m, s) SCALAR(T, m, s, KT_F_BOOL)
#define BYTES(T, m, s) SCALAR(T, m, s, KT_F_BYTES)
#define TEXT(T, m, s) SCALAR(T, m, s, KT_F_TEXT)
#define ENUM(T, m, s, mx)                                                                          \
  { NM(s), .kind = KT_F_ENUM, AT(T, m), .aux = KT_NO_AUX, .max = mx }
/* A nested message, present iff not all zero / iff its flag is set. */
#define MSG(T, m, s, d)                                                                            \
  { NM(s), .kind = KT_F_MSG, AT(T, m), .aux = KT_NO_AUX, .sub = &d }
#define MSGF(T, m, flag, s, d)                                                                     \
  { NM(s), .kind = KT_F_MSG, AT(T, m), .aux = offsetof(T, flag), .sub = &d }
#define LIST(T, m, n, s, k)                                                                        \
  { NM(s), .kind = KT_F_LIST, .elem = k, AT(T, m), .aux = offsetof(T, n) }
#define LISTM(T, m, n, s, d, ...)                                                                  \
  {                                                                                                \
    NM(s), .kind = KT_F_LIST, .elem = KT_F_MSG, AT(T, m), .aux = offsetof(T, n), .sub = &d,        \
           __VA_ARGS__                                                                             \
  }
#define OPS(T, m, n, s, set, d)                                                                    \
  {                                                                                                \
    NM(s), .kind = KT_F_OPS, AT(T, m), .aux = offsetof(T, n), .ops = &set, .max = KT_MAX_TXN_OPS,  \
           .unit = "ops", .doc = d                                                                 \
  }
/* A compare operand: kept when the compare's target is t. */
#define SEL(T, m, s, k, t)                                                                         \
  { NM(s), .kind = k, AT(T, m), .aux = KT_NO_AUX, .sel = 1 + (t) }

#define N(a) (uint8_t)(sizeof(a) / sizeof(a[0]))
#define DESC(nm, T, f, ...)                                                                        \
  { .name = nm, .size = sizeof(T), .fields = f, .n_fields = N(f), __VA_ARGS__ }
#define EMPTY(nm)                                                                                  \
  { .name = nm }

/* ---- shared parts ---- */

#define KV_FIELD(k, m) SCALAR(struct kt_kv, m, #m, KT_F_##k),
static const struct kt_field kv_f[] = {KT_SCHEMA_KV_FIELDS(KV_FIELD)};
/* [key, value, create, mod, version, lease]: at least 7 bytes */
const struct kt_msg_desc kt_schema_kv =
    DESC("kv", struct kt_kv, kv_f, .form = KT_FORM_TUPLE, .min_elems = 6, .min_bytes = 7);

static const struct kt_field header_f[] = {
    U64(struct kt_header, cluster_id, "cluster_id"),
    U64(struct kt_header, member_id, "member_id"),
    I64(struct kt_header, revision, "revision"),
    U64(struct kt_header, raft_term, "raft_term"),
};
const struct kt_msg_desc kt_schema_header =
    DESC("header", struct kt_header, header_f, .form = KT_FORM_TUPLE, .min_elems = 4);

static const struct kt_field leader_f[] = {
    BYTES(struct kt_leader_key, name, "name"),
    BYTES(struct kt_leader_key, key, "key"),
    I64(struct kt_leader_key, rev, "rev"),
    I64(struct kt_leader_key, lease, "lease"),
};
static const struct kt_msg_desc leader = DESC("leader", struct kt_leader_key, leader_f);

static const struct kt_field member_f[] = {
    U64(struct kt_member_info, id, "id"),
    TEXT(struct kt_member_info, name, "name"),
    LIST(struct kt_member_info, peer_urls, n_peer_urls, "peer_urls", KT_F_TEXT),
    LIST(struct kt_member_info, client_urls, n_client_urls, "client_urls", KT_F_TEXT),
    BOOL(struct kt_member_info, is_learner, "is_learner"),
};
static const struct kt_msg_desc member =
    DESC("member", struct kt_member_info, member_f, .zero_fill = true);

static const struct kt_field event_f[] = {
    ENUM(struct kt_event, type, "type", KT_EVENT_DELETE),
    {NM("kv"), .kind = KT_F_MSG, AT(struct kt_event, kv), .aux = KT_NO_AUX, .sub = &kt_schema_kv},
    MSGF(struct kt_event, prev_kv, has_prev_kv, "prev_kv", kt_schema_kv),
};
/* [type, 7-byte kv, nil]: at least 10 bytes */
static const struct kt_msg_desc event =
    DESC("event", struct kt_event, event_f, .form = KT_FORM_TUPLE, .min_elems = 3, .min_bytes = 10,
         .zero_fill = true);

static const struct kt_field alarm_f[] = {
    U64(struct kt_alarm_member, member_id, "member_id"),
    ENUM(struct kt_alarm_member, alarm, "alarm", KT_ALARM_CORRUPT),
};
static const struct kt_msg_desc alarm = DESC("alarm", struct kt_alarm_member, alarm_f,
                                             .form = KT_FORM_TUPLE, .min_elems = 2, .min_bytes = 3);

/* ---- KV requests (also the payloads of txn ops) ---- */

/* generated from their field lists (schema.h), like the kv's */
#define REQ_FIELD(T, k, m, mx) {NM(#m), .kind = KT_F_##k, AT(T, m), .aux = KT_NO_AUX, .max = mx},
#define RANGE_FIELD(k, m, mx) REQ_FIELD(struct kt_range_req, k, m, mx)
#define PUT_FIELD(k, m, mx) REQ_FIELD(struct kt_put_req, k, m, mx)
static const struct kt_field range_req_f[] = {KT_SCHEMA_RANGE_REQ_FIELDS(RANGE_FIELD)};
static const struct kt_msg_desc range_req = DESC("range", struct kt_range_req, range_req_f);

static const struct kt_field put_req_f[] = {KT_SCHEMA_PUT_REQ_FIELDS(PUT_FIELD)};
static const struct kt_msg_desc put_req = DESC("put", struct kt_put_req, put_req_f);

static const struct kt_field delete_req_f[] = {
    BYTES(struct kt_delete_req, key, "key"),
    BYTES(struct kt_delete_req, range_end, "range_end"),
    BOOL(struct kt_delete_req, prev_kv, "prev_kv"),
};
static const struct kt_msg_desc delete_req = DESC("delete", struct kt_delete_req, delete_req_f);

static const struct kt_field compare_f[] = {
    ENUM(struct kt_compare, result, "result", KT_CMP_NOT_EQUAL),
    ENUM(struct kt_compare, target, "target", KT_CMP_LEASE),
    BYTES(struct kt_compare, key, "key"),
    BYTES(struct kt_compare, range_end, "range_end"),
    SEL(struct kt_compare, int_value, "version", KT_F_I64, KT_CMP_VERSION),
    SEL(struct kt_compare, int_value, "create_revision", KT_F_I64, KT_CMP_CREATE),
    SEL(struct kt_compare, int_value, "mod_revision", KT_F_I64, KT_CMP_MOD),
    SEL(struct kt_compare, value, "value", KT_F_BYTES, KT_CMP_VALUE),
    SEL(struct kt_compare, int_value, "lease", KT_F_I64, KT_CMP_LEASE),
};
static const struct kt_msg_desc compare =
    DESC("compare", struct kt_compare, compare_f, .selected = true,
         .selector = offsetof(struct kt_compare, target), .zero_fill = true);

static const struct kt_msg_desc txn_req;
static const struct kt_msg_desc *const req_ops_by_type[] = {
    [KT_OP_RANGE] = &range_req,
    [KT_OP_PUT] = &put_req,
    [KT_OP_DELETE] = &delete_req,
    [KT_OP_TXN] = &txn_req,
};
static const struct kt_op_set req_ops = {sizeof(struct kt_request_op),
                                         offsetof(struct kt_request_op, type),
                                         offsetof(struct kt_request_op, u),
                                         KT_OP_RANGE,
                                         KT_OP_TXN,
                                         req_ops_by_type};

static const struct kt_field txn_req_f[] = {
    LISTM(struct kt_txn_req, compare, n_compare, "compare", compare, .max = KT_MAX_TXN_OPS,
          .unit = "compares", .doc = "array of compare maps"),
    OPS(struct kt_txn_req, success, n_success, "success", req_ops, "array of ops"),
    OPS(struct kt_txn_req, failure, n_failure, "failure", req_ops, "array of ops"),
};
static const struct kt_msg_desc txn_req = DESC("txn", struct kt_txn_req, txn_req_f, .nest = true);

/* ---- KV responses ---- */

static const struct kt_field range_resp_f[] = {
    LISTM(struct kt_range_resp, kvs, n_kvs, "kvs", kt_schema_kv),
    BOOL(struct kt_range_resp, more, "more"),
    I64(struct kt_range_resp, count, "count"),
};
static const struct kt_msg_desc range_resp = DESC("range", struct kt_range_resp, range_resp_f);

static const struct kt_field put_resp_f[] = {
    MSGF(struct kt_put_resp, prev_kv, has_prev_kv, "prev_kv", kt_schema_kv),
};
static const struct kt_msg_desc put_resp = DESC("put", struct kt_put_resp, put_resp_f);

static const struct kt_field delete_resp_f[] = {
    I64(struct kt_delete_resp, deleted, "deleted"),
    LISTM(struct kt_delete_resp, prev_kvs, n_prev_kvs, "prev_kvs", kt_schema_kv),
};
static const struct kt_msg_desc delete_resp = DESC("delete", struct kt_delete_resp, delete_resp_f);

static const struct kt_msg_desc txn_resp;
static const struct kt_msg_desc *const resp_ops_by_type[] = {
    [KT_OP_RANGE] = &range_resp,
    [KT_OP_PUT] = &put_resp,
    [KT_OP_DELETE] = &delete_resp,
    [KT_OP_TXN] = &txn_resp,
};
static const struct kt_op_set resp_ops = {sizeof(struct kt_response_op),
                                          offsetof(struct kt_response_op, type),
                                          offsetof(struct kt_response_op, u),
                                          KT_OP_RANGE,
                                          KT_OP_TXN,
                                          resp_ops_by_type};

static const struct kt_field txn_resp_f[] = {
    BOOL(struct kt_txn_resp, succeeded, "succeeded"),
    {NM("responses"), .kind = KT_F_OPS, AT(struct kt_txn_resp, responses),
     .aux = offsetof(struct kt_txn_resp, n_responses), .ops = &resp_ops, .max = KT_MAX_TXN_OPS,
     .unit = "responses", .doc = "array of `[op_type, payload]`"},
};
static const struct kt_msg_desc txn_resp =
    DESC("txn", struct kt_txn_resp, txn_resp_f, .nest = true);

/* ---- the other requests ---- */

static const struct kt_field hello_req_f[] = {
    U32(struct kt_hello_req, version, "version"),
    TEXT(struct kt_hello_req, client, "client"),
    TEXT(struct kt_hello_req, identity, "identity"),
};
static const struct kt_msg_desc hello_req = DESC("hello", struct kt_hello_req, hello_req_f);

static const struct kt_field compact_req_f[] = {
    I64(struct kt_compact_req, revision, "revision"),
    BOOL(struct kt_compact_req, physical, "physical"),
};
static const struct kt_msg_desc compact_req = DESC("compact", struct kt_compact_req, compact_req_f);

static const struct kt_msg_desc empty = EMPTY("empty");

static const struct kt_field publish_req_f[] = {
    U64(struct kt_member_publish_req, member_id, "member_id"),
    TEXT(struct kt_member_publish_req, name, "name"),
    LIST(struct kt_member_publish_req, client_urls, n_client_urls, "client_urls", KT_F_TEXT),
};
static const struct kt_msg_desc publish_req =
    DESC("member_publish", struct kt_member_publish_req, publish_req_f);

static const struct kt_field member_req_f[] = {
    U64(struct kt_member_change_req, id, "id"),
    TEXT(struct kt_member_change_req, name, "name"),
    LIST(struct kt_member_change_req, peer_urls, n_peer_urls, "peer_urls", KT_F_TEXT),
    BOOL(struct kt_member_change_req, is_learner, "is_learner"),
};
static const struct kt_msg_desc member_req =
    DESC("member_change", struct kt_member_change_req, member_req_f);

static const struct kt_field move_leader_req_f[] = {
    U64(struct kt_move_leader_req, target_id, "target_id"),
};
static const struct kt_msg_desc move_leader_req =
    DESC("move_leader", struct kt_move_leader_req, move_leader_req_f);

static const struct kt_field watch_create_req_f[] = {
    BYTES(struct kt_watch_create_req, key, "key"),
    BYTES(struct kt_watch_create_req, range_end, "range_end"),
    I64(struct kt_watch_create_req, start_revision, "start_revision"),
    BOOL(struct kt_watch_create_req, prev_kv, "prev_kv"),
    BOOL(struct kt_watch_create_req, no_put, "no_put"),
    BOOL(struct kt_watch_create_req, no_delete, "no_delete"),
    BOOL(struct kt_watch_create_req, progress_notify, "progress_notify"),
    BOOL(struct kt_watch_create_req, fragment, "fragment"),
};
static const struct kt_msg_desc watch_create_req =
    DESC("watch_create", struct kt_watch_create_req, watch_create_req_f);

static const struct kt_field watch_cancel_req_f[] = {
    I64(struct kt_watch_cancel_req, watch_id, "watch_id"),
};
static const struct kt_msg_desc watch_cancel_req =
    DESC("watch_cancel", struct kt_watch_cancel_req, watch_cancel_req_f);

static const struct kt_field lease_req_f[] = {
    I64(struct kt_lease_req, id, "id"),
    I64(struct kt_lease_req, ttl, "ttl"),
    BOOL(struct kt_lease_req, keys, "keys"),
};
static const struct kt_msg_desc lease_req = DESC("lease", struct kt_lease_req, lease_req_f);

static const struct kt_field lock_req_f[] = {
    BYTES(struct kt_lock_req, name, "name"),           BYTES(struct kt_lock_req, key, "key"),
    BYTES(struct kt_lock_req, value, "value"),         I64(struct kt_lock_req, lease, "lease"),
    MSG(struct kt_lock_req, leader, "leader", leader),
};
static const struct kt_msg_desc lock_req = DESC("lock", struct kt_lock_req, lock_req_f);

static const struct kt_field alarm_req_f[] = {
    ENUM(struct kt_alarm_req, action, "action", KT_ALARM_DEACTIVATE),
    U64(struct kt_alarm_req, member_id, "member_id"),
    ENUM(struct kt_alarm_req, alarm, "alarm", KT_ALARM_CORRUPT),
};
static const struct kt_msg_desc alarm_req = DESC("alarm", struct kt_alarm_req, alarm_req_f);

static const struct kt_field hash_kv_req_f[] = {
    I64(struct kt_hash_kv_req, revision, "revision"),
};
static const struct kt_msg_desc hash_kv_req = DESC("hash_kv", struct kt_hash_kv_req, hash_kv_req_f);

/* ---- the other responses (their `header` is the codec's) ---- */

static const struct kt_field hello_resp_f[] = {
    U32(struct kt_hello_resp, version, "version"),
    TEXT(struct kt_hello_resp, server, "server"),
    U64(struct kt_hello_resp, cluster_id, "cluster_id"),
    U64(struct kt_hello_resp, member_id, "member_id"),
    U32(struct kt_hello_resp, max_request_bytes, "max_request_bytes"),
};
static const struct kt_msg_desc hello_resp = DESC("hello", struct kt_hello_resp, hello_resp_f);

static const struct kt_field status_resp_f[] = {
    TEXT(struct kt_status_resp, version, "version"),
    I64(struct kt_status_resp, db_size, "db_size"),
    I64(struct kt_status_resp, db_size_in_use, "db_size_in_use"),
    U64(struct kt_status_resp, leader, "leader"),
    U64(struct kt_status_resp, raft_index, "raft_index"),
    U64(struct kt_status_resp, raft_term, "raft_term"),
    U64(struct kt_status_resp, raft_applied_index, "raft_applied_index"),
    BOOL(struct kt_status_resp, is_learner, "is_learner"),
    LIST(struct kt_status_resp, errors, n_errors, "errors", KT_F_TEXT),
};
static const struct kt_msg_desc status_resp = DESC("status", struct kt_status_resp, status_resp_f);

static const struct kt_field member_list_resp_f[] = {
    LISTM(struct kt_member_list_resp, members, n_members, "members", member),
};
static const struct kt_msg_desc member_list_resp =
    DESC("member_list", struct kt_member_list_resp, member_list_resp_f);

/* ADD's answer names the member added (always); the others do not. */
static const struct kt_field member_add_resp_f[] = {
    {NM("member"), .kind = KT_F_MSG, AT(struct kt_member_change_resp, member), .aux = KT_NO_AUX,
     .sub = &member, .always = true},
    LISTM(struct kt_member_change_resp, members, n_members, "members", member),
};
static const struct kt_msg_desc member_add_resp =
    DESC("member_add", struct kt_member_change_resp, member_add_resp_f);
static const struct kt_msg_desc member_change_resp = {.name = "member_change",
                                                      .size = sizeof(struct kt_member_change_resp),
                                                      .fields = member_add_resp_f + 1,
                                                      .n_fields = 1};

static const struct kt_field watch_resp_f[] = {
    I64(struct kt_watch_resp, watch_id, "watch_id"),
    BOOL(struct kt_watch_resp, created, "created"),
    BOOL(struct kt_watch_resp, canceled, "canceled"),
    BOOL(struct kt_watch_resp, fragment, "fragment"),
    I64(struct kt_watch_resp, compact_revision, "compact_revision"),
    TEXT(struct kt_watch_resp, cancel_reason, "cancel_reason"),
    LISTM(struct kt_watch_resp, events, n_events, "events", event),
};
static const struct kt_msg_desc watch_resp = DESC("watch", struct kt_watch_resp, watch_resp_f);

static const struct kt_field lease_resp_f[] = {
    I64(struct kt_lease_resp, id, "id"),
    I64(struct kt_lease_resp, ttl, "ttl"),
    I64(struct kt_lease_resp, granted_ttl, "granted_ttl"),
    LIST(struct kt_lease_resp, keys, n_keys, "keys", KT_F_BYTES),
    LIST(struct kt_lease_resp, leases, n_leases, "leases", KT_F_I64),
};
static const struct kt_msg_desc lease_resp = DESC("lease", struct kt_lease_resp, lease_resp_f);

static const struct kt_field lock_resp_f[] = {
    BYTES(struct kt_lock_resp, key, "key"),
    MSG(struct kt_lock_resp, leader, "leader", leader),
    MSGF(struct kt_lock_resp, kv, has_kv, "kv", kt_schema_kv),
};
static const struct kt_msg_desc lock_resp = DESC("lock", struct kt_lock_resp, lock_resp_f);

static const struct kt_field alarm_resp_f[] = {
    LISTM(struct kt_alarm_resp, alarms, n_alarms, "alarms", alarm),
};
static const struct kt_msg_desc alarm_resp = DESC("alarm", struct kt_alarm_resp, alarm_resp_f);

static const struct kt_field hash_kv_resp_f[] = {
    U32(struct kt_hash_kv_resp, hash, "hash"),
    I64(struct kt_hash_kv_resp, compact_revision, "compact_revision"),
    I64(struct kt_hash_kv_resp, hash_revision, "hash_revision"),
};
static const struct kt_msg_desc hash_kv_resp =
    DESC("hash_kv", struct kt_hash_kv_resp, hash_kv_resp_f);

static const struct kt_field snapshot_resp_f[] = {
    U64(struct kt_snapshot_resp, remaining_bytes, "remaining_bytes"),
    BYTES(struct kt_snapshot_resp, blob, "blob"),
};
static const struct kt_msg_desc snapshot_resp =
    DESC("snapshot", struct kt_snapshot_resp, snapshot_resp_f);

static const struct kt_field error_f[] = {
    U32(struct kt_error_msg, code, "code"),
    TEXT(struct kt_error_msg, message, "message"),
};
static const struct kt_msg_desc error_resp = DESC("error", struct kt_error_msg, error_f);

/* ---- auth (one request shape, one response shape, as the lease calls) ---- */

static const struct kt_field auth_req_f[] = {
    TEXT(struct kt_auth_req, name, "name"),
    TEXT(struct kt_auth_req, password, "password"),
    TEXT(struct kt_auth_req, hash, "hash"),
    TEXT(struct kt_auth_req, token, "token"),
    TEXT(struct kt_auth_req, role, "role"),
    BOOL(struct kt_auth_req, no_password, "no_password"),
    ENUM(struct kt_auth_req, perm_type, "perm_type", 2),
    BYTES(struct kt_auth_req, key, "key"),
    BYTES(struct kt_auth_req, range_end, "range_end"),
};
static const struct kt_msg_desc auth_req = DESC("auth", struct kt_auth_req, auth_req_f);

static const struct kt_field authed_req_f[] = {
    TEXT(struct kt_authed_req, user, "user"),
    U64(struct kt_authed_req, auth_revision, "auth_revision"),
    BYTES(struct kt_authed_req, body, "body"),
    BOOL(struct kt_authed_req, member, "member"),
};
static const struct kt_msg_desc authed_req = DESC("authed", struct kt_authed_req, authed_req_f);

static const struct kt_field permission_f[] = {
    ENUM(struct kt_auth_perm, type, "type", 2),
    BYTES(struct kt_auth_perm, key, "key"),
    BYTES(struct kt_auth_perm, range_end, "range_end"),
};
static const struct kt_msg_desc permission =
    DESC("permission", struct kt_auth_perm, permission_f, .zero_fill = true);

static const struct kt_field auth_resp_f[] = {
    TEXT(struct kt_auth_resp, token, "token"),
    BOOL(struct kt_auth_resp, enabled, "enabled"),
    U64(struct kt_auth_resp, auth_revision, "auth_revision"),
    LIST(struct kt_auth_resp, users, n_users, "users", KT_F_TEXT),
    LIST(struct kt_auth_resp, roles, n_roles, "roles", KT_F_TEXT),
    LISTM(struct kt_auth_resp, perms, n_perms, "perms", permission),
};
static const struct kt_msg_desc auth_resp = DESC("auth", struct kt_auth_resp, auth_resp_f);

static const struct kt_field auth_check_req_f[] = {
    BYTES(struct kt_auth_check_req, key, "key"),
    BYTES(struct kt_auth_check_req, range_end, "range_end"),
};
static const struct kt_msg_desc auth_check_req =
    DESC("auth_check", struct kt_auth_check_req, auth_check_req_f);

/* ---- the types ---- */

#define RQ(m) offsetof(struct kt_req, u.m)
#define RS(m) offsetof(struct kt_resp, u.m)
#define H KT_MT_HEADER
#define T(num, nm, fl, rq, rqo, rs, rso)                                                           \
  [num] = {.type = num,                                                                            \
           .flags = fl,                                                                            \
           .name = nm,                                                                             \
           .resp_path = nm,                                                                        \
           .req = rq,                                                                              \
           .resp = rs,                                                                             \
           .req_off = rqo,                                                                         \
           .resp_off = rso}
#define OP(num, nm, rq, rs) T(num, nm, H | KT_MT_OP, &rq, RQ(op.u), &rs, RS(op.u))
#define LEASE(num, nm) T(num, nm, H, &lease_req, RQ(lease), &lease_resp, RS(lease))
#define LOCK(num, nm) T(num, nm, H, &lock_req, RQ(lock), &lock_resp, RS(lock))
#define HDR_ONLY(num, nm, rq, rqo) T(num, nm, H, rq, rqo, &empty, 0)
#define AUTH(num, nm) T(num, nm, H, &auth_req, RQ(auth), &auth_resp, RS(auth))

/* Indexed by type number; entries without a name are not types. */
static const struct kt_type_desc types[128] = {
    T(KT_MSG_HELLO, "hello", 0, &hello_req, RQ(hello), &hello_resp, RS(hello)),
    OP(KT_MSG_RANGE, "range", range_req, range_resp),
    OP(KT_MSG_PUT, "put", put_req, put_resp),
    OP(KT_MSG_DELETE, "delete", delete_req, delete_resp),
    OP(KT_MSG_TXN, "txn", txn_req, txn_resp),
    HDR_ONLY(KT_MSG_COMPACT, "compact", &compact_req, RQ(compact)),
    T(KT_MSG_STATUS, "status", H, &empty, 0, &status_resp, RS(status)),
    [KT_MSG_WATCH_CREATE] = {.type = KT_MSG_WATCH_CREATE,
                             .flags = H,
                             .name = "watch_create",
                             .resp_path = "watch",
                             .req = &watch_create_req,
                             .resp = &watch_resp,
                             .req_off = RQ(watch_create),
                             .resp_off = RS(watch)},
    HDR_ONLY(KT_MSG_WATCH_CANCEL, "watch_cancel", &watch_cancel_req, RQ(watch_cancel)),
    HDR_ONLY(KT_MSG_WATCH_PROGRESS, "watch_progress", &empty, 0),
    LEASE(KT_MSG_LEASE_GRANT, "lease_grant"),
    LEASE(KT_MSG_LEASE_REVOKE, "lease_revoke"),
    LEASE(KT_MSG_LEASE_KEEPALIVE, "lease_keepalive"),
    LEASE(KT_MSG_LEASE_TTL, "lease_ttl"),
    LEASE(KT_MSG_LEASE_LEASES, "lease_leases"),
    T(KT_MSG_MEMBER_LIST, "member_list", H, &empty, 0, &member_list_resp, RS(member_list)),
    T(KT_MSG_MEMBER_ADD, "member_add", H, &member_req, RQ(member), &member_add_resp, RS(member)),
    T(KT_MSG_MEMBER_REMOVE, "member_remove", H, &member_req, RQ(member), &member_change_resp,
      RS(member)),
    T(KT_MSG_MEMBER_UPDATE, "member_update", H, &member_req, RQ(member), &member_change_resp,
      RS(member)),
    T(KT_MSG_MEMBER_PROMOTE, "member_promote", H, &member_req, RQ(member), &member_change_resp,
      RS(member)),
    T(KT_MSG_MEMBER_PUBLISH, "member_publish", 0, &publish_req, RQ(publish), NULL, 0),
    T(KT_MSG_ALARM, "alarm", H, &alarm_req, RQ(alarm), &alarm_resp, RS(alarm)),
    HDR_ONLY(KT_MSG_MOVE_LEADER, "move_leader", &move_leader_req, RQ(move_leader)),
    HDR_ONLY(KT_MSG_DEFRAGMENT, "defragment", &empty, 0),
    T(KT_MSG_HASH_KV, "hash_kv", H, &hash_kv_req, RQ(hash_kv), &hash_kv_resp, RS(hash_kv)),
    T(KT_MSG_SNAPSHOT, "snapshot", H, &empty, 0, &snapshot_resp, RS(snapshot)),
    AUTH(KT_MSG_AUTH_ENABLE, "auth_enable"),
    AUTH(KT_MSG_AUTH_DISABLE, "auth_disable"),
    AUTH(KT_MSG_AUTH_STATUS, "auth_status"),
    AUTH(KT_MSG_AUTHENTICATE, "authenticate"),
    AUTH(KT_MSG_USER_ADD, "user_add"),
    AUTH(KT_MSG_USER_GET, "user_get"),
    AUTH(KT_MSG_USER_LIST, "user_list"),
    AUTH(KT_MSG_USER_DELETE, "user_delete"),
    AUTH(KT_MSG_USER_CHANGE_PASSWORD, "user_change_password"),
    AUTH(KT_MSG_USER_GRANT_ROLE, "user_grant_role"),
    AUTH(KT_MSG_USER_REVOKE_ROLE, "user_revoke_role"),
    AUTH(KT_MSG_ROLE_ADD, "role_add"),
    AUTH(KT_MSG_ROLE_GET, "role_get"),
    AUTH(KT_MSG_ROLE_LIST, "role_list"),
    AUTH(KT_MSG_ROLE_DELETE, "role_delete"),
    AUTH(KT_MSG_ROLE_GRANT_PERMISSION, "role_grant_permission"),
    AUTH(KT_MSG_ROLE_REVOKE_PERMISSION, "role_revoke_permission"),
    T(KT_MSG_AUTHED, "authed", 0, &authed_req, RQ(authed), NULL, 0),
    HDR_ONLY(KT_MSG_AUTH_CHECK, "auth_check", &auth_check_req, RQ(auth_check)),
    LOCK(KT_MSG_LOCK, "lock"),
    LOCK(KT_MSG_UNLOCK, "unlock"),
    LOCK(KT_MSG_CAMPAIGN, "campaign"),
    LOCK(KT_MSG_PROCLAIM, "proclaim"),
    LOCK(KT_MSG_LEADER, "leader"),
    LOCK(KT_MSG_OBSERVE, "observe"),
    LOCK(KT_MSG_RESIGN, "resign"),
    T(KT_MSG_ERROR, "error", 0, NULL, 0, &error_resp, RS(error)),
};

const struct kt_type_desc *kt_schema_type(uint64_t type) {
  return type < 128 && types[type].name ? &types[type] : NULL;
}

const struct kt_type_desc *kt_schema_types(size_t *n) {
  *n = sizeof types / sizeof types[0];
  return types;
}
