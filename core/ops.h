/* core/ops.h — the KV operations and their results, as plain structs.
 *
 * One vocabulary for the whole write path: net/proto decodes a client's frame
 * into a struct kt_request_op, the node encodes the same op into a WAL entry
 * (net/proto's kt_proto_encode_op), and core/mvcc applies it. Semantics are
 * etcd v3's (etcdserverpb.RangeRequest, PutRequest, DeleteRangeRequest,
 * TxnRequest, CompactionRequest); field names follow etcd's.
 *
 * Ownership: every struct kt_bytes and array here points into memory owned by
 * someone else (the decoded frame, an arena, or the store). Results produced
 * by the store point into the store and stay valid until the next call that
 * writes or compacts the store.
 *
 * Key ranges, as etcd: range_end.n == 0 means the single key `key`;
 * range_end == "\0" (n == 1, byte 0) means every key >= key; key == "\0" and
 * range_end == "\0" means all keys; otherwise [key, range_end).
 */
#ifndef KT_OPS_H
#define KT_OPS_H

#include "base.h"

#define KT_MAX_TXN_OPS 128 /* etcd's --max-txn-ops default */

enum kt_op_type {
  KT_OP_RANGE = 1,
  KT_OP_PUT = 2,
  KT_OP_DELETE = 3,
  KT_OP_TXN = 4,
};

enum kt_sort_order { KT_SORT_NONE = 0, KT_SORT_ASCEND = 1, KT_SORT_DESCEND = 2 };
enum kt_sort_target {
  KT_SORT_KEY = 0,
  KT_SORT_VERSION = 1,
  KT_SORT_CREATE = 2,
  KT_SORT_MOD = 3,
  KT_SORT_VALUE = 4,
};

struct kt_range_req {
  struct kt_bytes key, range_end;
  int64_t limit;    /* 0 = no limit */
  int64_t revision; /* 0 = current */
  uint8_t sort_order, sort_target;
  bool serializable, keys_only, count_only;
  int64_t min_mod_revision, max_mod_revision; /* 0 = no filter */
  int64_t min_create_revision, max_create_revision;
};

struct kt_put_req {
  struct kt_bytes key, value;
  int64_t lease;
  bool prev_kv, ignore_value, ignore_lease;
};

struct kt_delete_req {
  struct kt_bytes key, range_end;
  bool prev_kv;
};

enum kt_cmp_result { KT_CMP_EQUAL = 0, KT_CMP_GREATER = 1, KT_CMP_LESS = 2, KT_CMP_NOT_EQUAL = 3 };
enum kt_cmp_target {
  KT_CMP_VERSION = 0,
  KT_CMP_CREATE = 1,
  KT_CMP_MOD = 2,
  KT_CMP_VALUE = 3,
  KT_CMP_LEASE = 4,
};

struct kt_compare {
  uint8_t result, target;
  struct kt_bytes key, range_end;
  int64_t int_value;     /* version, create/mod revision or lease */
  struct kt_bytes value; /* for KT_CMP_VALUE */
};

struct kt_request_op;
struct kt_txn_req {
  struct kt_compare *compare;
  uint32_t n_compare;
  struct kt_request_op *success, *failure;
  uint32_t n_success, n_failure;
};

struct kt_request_op {
  uint8_t type; /* enum kt_op_type */
  union {
    struct kt_range_req range;
    struct kt_put_req put;
    struct kt_delete_req del;
    struct kt_txn_req txn;
  } u;
};

struct kt_compact_req {
  int64_t revision;
  bool physical;
};

/* A key-value as etcd's mvccpb.KeyValue. */
struct kt_kv {
  struct kt_bytes key, value;
  int64_t create_revision, mod_revision, version, lease;
};

struct kt_range_resp {
  struct kt_kv *kvs;
  uint32_t n_kvs;
  bool more;
  int64_t count;
};

struct kt_put_resp {
  bool has_prev_kv;
  struct kt_kv prev_kv;
};

struct kt_delete_resp {
  int64_t deleted;
  struct kt_kv *prev_kvs;
  uint32_t n_prev_kvs;
};

struct kt_response_op;
struct kt_txn_resp {
  bool succeeded;
  struct kt_response_op *responses;
  uint32_t n_responses;
};

struct kt_response_op {
  uint8_t type; /* enum kt_op_type */
  union {
    struct kt_range_resp range;
    struct kt_put_resp put;
    struct kt_delete_resp del;
    struct kt_txn_resp txn;
  } u;
};

/* Response header, as etcd's ResponseHeader. */
struct kt_header {
  uint64_t cluster_id, member_id;
  int64_t revision;
  uint64_t raft_term;
};

/* One retained revision of one key: the unit of snapshots and of history.
 * A tombstone (delete) has tombstone = true, empty value, create_revision 0,
 * version 0. (mod_revision, mod_sub) is etcd's revision (main, sub). */
struct kt_kvrev {
  struct kt_bytes key, value;
  int64_t create_revision, mod_revision, mod_sub, version, lease;
  bool tombstone;
};

/* A change produced by applying a write, for the watch hub (issue: watch).
 * Events of one write come out in (mod_revision, mod_sub) order. */
enum kt_event_type { KT_EVENT_PUT = 0, KT_EVENT_DELETE = 1 };
struct kt_event {
  uint8_t type;
  struct kt_kv kv; /* for DELETE: key and mod_revision only */
  bool has_prev_kv;
  struct kt_kv prev_kv;
};

#endif
