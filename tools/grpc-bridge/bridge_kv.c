/* tools/grpc-bridge/bridge_kv.c — etcd's unary calls (KV, Lease, Cluster,
 * Maintenance.Status/MoveLeader/Alarm/Defragment/Hash/HashKV) mapped onto
 * libketch:
 * protobuf requests to ketch requests, ketch results to protobuf responses,
 * ketch errors to etcd's gRPC statuses (see bridge.h). */
#include "bridge.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grpc/grpc_client.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

#define MAX_TXN_OPS 128 /* etcd's --max-txn-ops default */
#define MAX_TXN_DEPTH 8

/* ---- the one error table: ketch code -> gRPC code + etcd's message ----
 * From etcd's api/v3rpc/rpctypes/error.go (3.4). */
static const struct {
  int ketch, grpc;
  const char *msg;
} errors[] = {
    {KETCH_EKEYEMPTY, KT_GRPC_INVALID_ARGUMENT, "etcdserver: key is not provided"},
    {KETCH_ETOOLARGE, KT_GRPC_INVALID_ARGUMENT, "etcdserver: request is too large"},
    {KETCH_ETOOMANYOPS, KT_GRPC_INVALID_ARGUMENT, "etcdserver: too many operations in txn request"},
    {KETCH_EDUPKEY, KT_GRPC_INVALID_ARGUMENT, "etcdserver: duplicate key given in txn request"},
    {KETCH_ECOMPACTED, KT_GRPC_OUT_OF_RANGE,
     "etcdserver: mvcc: required revision has been compacted"},
    {KETCH_EFUTUREREV, KT_GRPC_OUT_OF_RANGE,
     "etcdserver: mvcc: required revision is a future revision"},
    {KETCH_ENOSPACE, KT_GRPC_RESOURCE_EXHAUSTED, "etcdserver: mvcc: database space exceeded"},
    {KETCH_ELEASENOTFOUND, KT_GRPC_NOT_FOUND, "etcdserver: requested lease not found"},
    {KETCH_ELEASEEXISTS, KT_GRPC_FAILED_PRECONDITION, "etcdserver: lease already exists"},
    {KETCH_ENOLEADER, KT_GRPC_UNAVAILABLE, "etcdserver: no leader"},
    {KETCH_ETIMEOUT, KT_GRPC_UNAVAILABLE, "etcdserver: request timed out"},
    {KETCH_EUNKNOWN, KT_GRPC_UNAVAILABLE,
     "etcdserver: request timed out, possibly due to previous leader failure"},
    {KETCH_EBUSY, KT_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests"},
    {KETCH_EUNAVAILABLE, KT_GRPC_UNAVAILABLE, NULL},
    {KETCH_ECLOSED, KT_GRPC_UNAVAILABLE, NULL},
    {KETCH_ESTOPPED, KT_GRPC_UNAVAILABLE, "etcdserver: server stopped"},
    {KETCH_EINVAL, KT_GRPC_INVALID_ARGUMENT, NULL},
    {KETCH_EUNSUPPORTED, KT_GRPC_UNIMPLEMENTED, NULL},
    {KETCH_ECORRUPT, KT_GRPC_DATA_LOSS, "etcdserver: corrupt cluster"},
    {KETCH_ENOTFOUND, KT_GRPC_INVALID_ARGUMENT, "etcdserver: key not found"},
    {KETCH_EMEMBEREXISTS, KT_GRPC_FAILED_PRECONDITION, "etcdserver: member ID already exist"},
    {KETCH_EPEERURLEXISTS, KT_GRPC_FAILED_PRECONDITION, "etcdserver: Peer URLs already exists"},
    {KETCH_EMEMBERNOTFOUND, KT_GRPC_NOT_FOUND, "etcdserver: member not found"},
    {KETCH_EMEMBERNOTLEARNER, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: can only promote a learner member"},
    {KETCH_ELEARNERNOTREADY, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: can only promote a learner member which is in sync with leader"},
    {KETCH_EUNHEALTHY, KT_GRPC_UNAVAILABLE, "etcdserver: unhealthy cluster"},
    {KETCH_EMEMBERBADURLS, KT_GRPC_INVALID_ARGUMENT, "etcdserver: given member URLs are invalid"},
    {KETCH_ENOTENOUGHSTARTED, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: re-configuration failed due to not enough started members"},
    {KETCH_ETOOMANYLEARNERS, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: too many learner members in cluster"},
    /* etcd's membership.ErrIDRemoved becomes ErrGRPCMemberNotFound */
    {KETCH_EMEMBERREMOVED, KT_GRPC_NOT_FOUND, "etcdserver: member not found"},
    {KETCH_EROOTUSERNOTEXIST, KT_GRPC_FAILED_PRECONDITION, "etcdserver: root user does not exist"},
    {KETCH_EROOTROLENOTEXIST, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: root user does not have root role"},
    {KETCH_EUSEREXISTS, KT_GRPC_FAILED_PRECONDITION, "etcdserver: user name already exists"},
    {KETCH_EUSEREMPTY, KT_GRPC_INVALID_ARGUMENT, "etcdserver: user name is empty"},
    {KETCH_EUSERNOTFOUND, KT_GRPC_FAILED_PRECONDITION, "etcdserver: user name not found"},
    {KETCH_EROLEEXISTS, KT_GRPC_FAILED_PRECONDITION, "etcdserver: role name already exists"},
    {KETCH_EROLENOTFOUND, KT_GRPC_FAILED_PRECONDITION, "etcdserver: role name not found"},
    {KETCH_EROLEEMPTY, KT_GRPC_INVALID_ARGUMENT, "etcdserver: role name is empty"},
    {KETCH_EAUTHFAILED, KT_GRPC_INVALID_ARGUMENT,
     "etcdserver: authentication failed, invalid user ID or password"},
    {KETCH_EPERMDENIED, KT_GRPC_PERMISSION_DENIED, "etcdserver: permission denied"},
    {KETCH_EROLENOTGRANTED, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: role is not granted to the user"},
    {KETCH_EPERMNOTGRANTED, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: permission is not granted to the role"},
    {KETCH_EAUTHNOTENABLED, KT_GRPC_FAILED_PRECONDITION,
     "etcdserver: authentication is not enabled"},
    {KETCH_EINVALIDTOKEN, KT_GRPC_UNAUTHENTICATED, "etcdserver: invalid auth token"},
    {KETCH_EINVALIDAUTHMGMT, KT_GRPC_INVALID_ARGUMENT, "etcdserver: invalid auth management"},
    {KETCH_EAUTHOLDREVISION, KT_GRPC_INVALID_ARGUMENT, "etcdserver: revision of auth store is old"},
};

/* ketch errors whose etcd status depends on the server's message. */
static const struct {
  int ketch;
  const char *detail, *msg;
  int grpc;
} detail_errors[] = {
    {KETCH_EINVAL, "not leader", "etcdserver: not leader", KT_GRPC_FAILED_PRECONDITION},
    {KETCH_EINVAL, "bad leader transferee", "etcdserver: bad leader transferee",
     KT_GRPC_FAILED_PRECONDITION},
    {KETCH_ETIMEOUT, "leader transfer took too long",
     "etcdserver: request timed out, leader transfer took too long", KT_GRPC_UNAVAILABLE},
    {KETCH_EINVAL, "too large lease TTL", "etcdserver: too large lease TTL", KT_GRPC_OUT_OF_RANGE},
    /* etcd's raft drops a second configuration change while one is pending
     * and the caller waits for its deadline: etcd's server answers that
     * with ErrTimeout. ketch refuses it at once (not applied: retry). */
    {KETCH_EBUSY, "membership change is already in progress", "etcdserver: request timed out",
     KT_GRPC_UNAVAILABLE},
    /* etcd's maintenance server (defragment, hash, snapshot) returns the
     * auth store's errors as they are: gRPC's Unknown */
    {KETCH_EPERMDENIED, "auth: permission denied", "auth: permission denied", KT_GRPC_UNKNOWN},
    {KETCH_EUSEREMPTY, "auth: user name is empty", "auth: user name is empty", KT_GRPC_UNKNOWN},
    {KETCH_EINVALIDTOKEN, "auth: invalid auth token", "auth: invalid auth token", KT_GRPC_UNKNOWN},
};

const char *kt_bridge_error(int ketch_err, const char *detail, int *grpc_status) {
  for (size_t i = 0; detail && i < sizeof detail_errors / sizeof detail_errors[0]; i++) {
    if (detail_errors[i].ketch == ketch_err && strstr(detail, detail_errors[i].detail)) {
      *grpc_status = detail_errors[i].grpc;
      return detail_errors[i].msg;
    }
  }
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
    if (errors[i].ketch == ketch_err) {
      *grpc_status = errors[i].grpc;
      if (errors[i].msg)
        return errors[i].msg;
      return detail && *detail ? detail : ketch_strerror(ketch_err);
    }
  }
  *grpc_status = KT_GRPC_UNKNOWN;
  return detail && *detail ? detail : ketch_strerror(ketch_err);
}

int64_t kt_bridge_parse_timeout(const uint8_t *v, size_t n) {
  if (n < 2 || n > 9)
    return -1;
  int64_t x = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return -1;
    x = x * 10 + (v[i] - '0');
  }
  switch (v[n - 1]) {
  case 'H':
    return x * 3600000;
  case 'M':
    return x * 60000;
  case 'S':
    return x * 1000;
  case 'm':
    return x;
  case 'u':
    return (x + 999) / 1000;
  case 'n':
    return (x + 999999) / 1000000;
  default:
    return -1;
  }
}

/* ---- methods ---- */

enum {
  M_RANGE,
  M_PUT,
  M_DELETE,
  M_TXN,
  M_COMPACT,
  M_STATUS,
  M_LEASE_GRANT,
  M_LEASE_REVOKE,
  M_LEASE_TTL,
  M_LEASE_LEASES,
  M_MEMBER_LIST,
  M_MOVE_LEADER,
  M_ALARM,
  M_DEFRAGMENT,
  M_HASH,
  M_HASH_KV,
  M_N
};
static const char *const method_paths[M_N] = {
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.KV/Put",
    "/etcdserverpb.KV/DeleteRange",
    "/etcdserverpb.KV/Txn",
    "/etcdserverpb.KV/Compact",
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Lease/LeaseGrant",
    "/etcdserverpb.Lease/LeaseRevoke",
    "/etcdserverpb.Lease/LeaseTimeToLive",
    "/etcdserverpb.Lease/LeaseLeases",
    "/etcdserverpb.Cluster/MemberList",
    "/etcdserverpb.Maintenance/MoveLeader",
    "/etcdserverpb.Maintenance/Alarm",
    "/etcdserverpb.Maintenance/Defragment",
    "/etcdserverpb.Maintenance/Hash",
    "/etcdserverpb.Maintenance/HashKV",
};
/* Streaming methods, served by bridge_stream.c. */
static const char *const stream_paths[] = {
    "/etcdserverpb.Watch/Watch",
    "/etcdserverpb.Lease/LeaseKeepAlive",
    /* v3lock and v3election are unary but may wait long: bridge_stream.c
     * runs them, so a client that goes away is noticed (its key given up). */
    "/v3lockpb.Lock/Lock",
    "/v3lockpb.Lock/Unlock",
    "/v3electionpb.Election/Campaign",
    "/v3electionpb.Election/Proclaim",
    "/v3electionpb.Election/Leader",
    "/v3electionpb.Election/Observe",
    "/v3electionpb.Election/Resign",
    "/etcdserverpb.Maintenance/Snapshot",
};
/* Cluster's membership changes: their own table and member_call(). */
enum { MC_ADD, MC_REMOVE, MC_UPDATE, MC_PROMOTE, MC_N };
static const char *const member_paths[MC_N] = {
    "/etcdserverpb.Cluster/MemberAdd",
    "/etcdserverpb.Cluster/MemberRemove",
    "/etcdserverpb.Cluster/MemberUpdate",
    "/etcdserverpb.Cluster/MemberPromote",
};
/* etcd's largest lease TTL (lease.MaxLeaseTTL, seconds). */
#define MAX_LEASE_TTL_S 9000000000LL
static const char *const etcd_services[] = {
    "etcdserverpb.KV",          "etcdserverpb.Watch", "etcdserverpb.Lease", "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance", "etcdserverpb.Auth",  "v3lockpb.Lock",      "v3electionpb.Election",
};

static int method_index(const char *path) {
  for (int i = 0; i < M_N; i++)
    if (strcmp(path, method_paths[i]) == 0)
      return i;
  return -1;
}

static int member_index(const char *path) {
  for (int i = 0; i < MC_N; i++)
    if (strcmp(path, member_paths[i]) == 0)
      return i;
  return -1;
}

int kt_bridge_method(const char *path, char *msg, size_t msg_len) {
  if (method_index(path) >= 0 || member_index(path) >= 0 || kt_bridge_auth_method(path) >= 0)
    return KT_BRIDGE_UNARY;
  for (size_t i = 0; i < sizeof stream_paths / sizeof stream_paths[0]; i++)
    if (strcmp(path, stream_paths[i]) == 0)
      return KT_BRIDGE_STREAM;
  const char *svc = path[0] == '/' ? path + 1 : path;
  const char *slash = strchr(svc, '/');
  size_t svc_len = slash ? (size_t)(slash - svc) : strlen(svc);
  const char *meth = slash ? slash + 1 : "";
  for (size_t i = 0; i < sizeof etcd_services / sizeof etcd_services[0]; i++) {
    if (strlen(etcd_services[i]) == svc_len && memcmp(svc, etcd_services[i], svc_len) == 0) {
      snprintf(msg, msg_len,
               "ketch-grpc: %.*s/%.64s is not implemented (served: KV, Watch, Lease, "
               "Cluster, Maintenance, Auth, Lock, Election)",
               (int)svc_len, svc, meth);
      return KT_BRIDGE_UNIMPLEMENTED;
    }
  }
  snprintf(msg, msg_len, "unknown service %.*s", (int)(svc_len > 200 ? 200 : svc_len), svc);
  return KT_BRIDGE_UNKNOWN;
}

/* ---- a bump arena for building requests and responses ---- */

struct arena {
  struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
  } * head;
  bool oom;
};

static void *ar_alloc(struct arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < n) {
    size_t cap = n > 16384 ? n : 16384;
    struct chunk *c = malloc(sizeof *c + cap);
    if (!c) {
      a->oom = true;
      return NULL;
    }
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  memset(p, 0, n);
  return p;
}

static void ar_free(struct arena *a) {
  while (a->head) {
    struct chunk *c = a->head;
    a->head = c->next;
    free(c);
  }
}

/* ---- requests: protobuf -> libketch (validated as etcd's v3rpc does) ---- */

static int conv_range(const Etcdserverpb__RangeRequest *r, ketch_range_req *o) {
  if (r->key.len == 0)
    return KETCH_EKEYEMPTY;
  memset(o, 0, sizeof *o);
  o->key = r->key.data;
  o->key_len = r->key.len;
  o->range_end = r->range_end.data;
  o->range_end_len = r->range_end.len;
  o->limit = r->limit;
  o->revision = r->revision;
  o->sort_order = (int)r->sort_order;
  o->sort_target = (int)r->sort_target;
  o->serializable = r->serializable;
  o->keys_only = r->keys_only;
  o->count_only = r->count_only;
  o->min_mod_revision = r->min_mod_revision;
  o->max_mod_revision = r->max_mod_revision;
  o->min_create_revision = r->min_create_revision;
  o->max_create_revision = r->max_create_revision;
  return 0;
}

/* etcd's own messages for the two put checks that have no ketch code. */
static const char *put_check_msg;

static int conv_put(const Etcdserverpb__PutRequest *r, ketch_put_req *o) {
  if (r->key.len == 0)
    return KETCH_EKEYEMPTY;
  if (r->ignore_value && r->value.len != 0) {
    put_check_msg = "etcdserver: value is provided";
    return KETCH_EINVAL;
  }
  if (r->ignore_lease && r->lease != 0) {
    put_check_msg = "etcdserver: lease is provided";
    return KETCH_EINVAL;
  }
  memset(o, 0, sizeof *o);
  o->key = r->key.data;
  o->key_len = r->key.len;
  o->value = r->value.data;
  o->value_len = r->value.len;
  o->lease = r->lease;
  o->prev_kv = r->prev_kv;
  o->ignore_value = r->ignore_value;
  o->ignore_lease = r->ignore_lease;
  return 0;
}

static int conv_delete(const Etcdserverpb__DeleteRangeRequest *r, ketch_delete_req *o) {
  if (r->key.len == 0)
    return KETCH_EKEYEMPTY;
  memset(o, 0, sizeof *o);
  o->key = r->key.data;
  o->key_len = r->key.len;
  o->range_end = r->range_end.data;
  o->range_end_len = r->range_end.len;
  o->prev_kv = r->prev_kv;
  return 0;
}

static int conv_txn(struct arena *a, const Etcdserverpb__TxnRequest *r, ketch_txn_req *o,
                    int depth);

static int conv_ops(struct arena *a, Etcdserverpb__RequestOp *const *in, size_t n,
                    const ketch_op **out, int depth) {
  ketch_op *ops = ar_alloc(a, (n ? n : 1) * sizeof *ops);
  if (!ops)
    return KETCH_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const Etcdserverpb__RequestOp *op = in[i];
    int err;
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
      ops[i].type = KETCH_OP_RANGE;
      err = conv_range(op->request_range, &ops[i].range);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
      ops[i].type = KETCH_OP_PUT;
      err = conv_put(op->request_put, &ops[i].put);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
      ops[i].type = KETCH_OP_DELETE;
      err = conv_delete(op->request_delete_range, &ops[i].del);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
      ops[i].type = KETCH_OP_TXN;
      err = conv_txn(a, op->request_txn, &ops[i].txn, depth + 1);
      break;
    default:
      err = KETCH_EINVAL;
      break;
    }
    if (err)
      return err;
  }
  *out = ops;
  return 0;
}

static int conv_txn(struct arena *a, const Etcdserverpb__TxnRequest *r, ketch_txn_req *o,
                    int depth) {
  if (depth > MAX_TXN_DEPTH)
    return KETCH_EINVAL;
  if (r->n_compare > MAX_TXN_OPS || r->n_success > MAX_TXN_OPS || r->n_failure > MAX_TXN_OPS)
    return KETCH_ETOOMANYOPS;
  memset(o, 0, sizeof *o);
  ketch_compare *cmp = ar_alloc(a, (r->n_compare ? r->n_compare : 1) * sizeof *cmp);
  if (!cmp)
    return KETCH_ENOMEM;
  for (size_t i = 0; i < r->n_compare; i++) {
    const Etcdserverpb__Compare *c = r->compare[i];
    cmp[i].result = (int)c->result;
    cmp[i].target = (int)c->target;
    cmp[i].key = c->key.data;
    cmp[i].key_len = c->key.len;
    cmp[i].range_end = c->range_end.data;
    cmp[i].range_end_len = c->range_end.len;
    switch (c->target_union_case) {
    case ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION:
      cmp[i].int_value = c->version;
      break;
    case ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION:
      cmp[i].int_value = c->create_revision;
      break;
    case ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION:
      cmp[i].int_value = c->mod_revision;
      break;
    case ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE:
      cmp[i].int_value = c->lease;
      break;
    case ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE:
      cmp[i].value = c->value.data;
      cmp[i].value_len = c->value.len;
      break;
    default:
      break;
    }
  }
  o->compare = cmp;
  o->n_compare = r->n_compare;
  int err = conv_ops(a, r->success, r->n_success, &o->success, depth);
  if (!err)
    err = conv_ops(a, r->failure, r->n_failure, &o->failure, depth);
  o->n_success = r->n_success;
  o->n_failure = r->n_failure;
  return err;
}

/* ---- responses: libketch -> protobuf ---- */

static Etcdserverpb__ResponseHeader *mk_header(struct arena *a, const ketch_header *h, bool full) {
  Etcdserverpb__ResponseHeader *o = ar_alloc(a, sizeof *o);
  if (!o)
    return NULL;
  etcdserverpb__response_header__init(o);
  o->revision = h->revision;
  if (full) {
    o->cluster_id = h->cluster_id;
    o->member_id = h->member_id;
    o->raft_term = h->raft_term;
  }
  return o;
}

static Mvccpb__KeyValue **mk_kvs(struct arena *a, const ketch_kv *kv, size_t n) {
  Mvccpb__KeyValue **v = ar_alloc(a, (n ? n : 1) * sizeof *v);
  Mvccpb__KeyValue *o = ar_alloc(a, (n ? n : 1) * sizeof *o);
  if (!v || !o)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    mvccpb__key_value__init(&o[i]);
    o[i].key.data = (uint8_t *)kv[i].key;
    o[i].key.len = kv[i].key_len;
    o[i].value.data = (uint8_t *)kv[i].value;
    o[i].value.len = kv[i].value_len;
    o[i].create_revision = kv[i].create_revision;
    o[i].mod_revision = kv[i].mod_revision;
    o[i].version = kv[i].version;
    o[i].lease = kv[i].lease;
    v[i] = &o[i];
  }
  return v;
}

static Etcdserverpb__RangeResponse *mk_range(struct arena *a, Etcdserverpb__ResponseHeader *h,
                                             const ketch_range_result *r) {
  Etcdserverpb__RangeResponse *o = ar_alloc(a, sizeof *o);
  if (!o)
    return NULL;
  etcdserverpb__range_response__init(o);
  o->header = h;
  o->kvs = mk_kvs(a, r->kvs, r->n_kvs);
  o->n_kvs = r->n_kvs;
  o->more = r->more;
  o->count = r->count;
  return o;
}

static Etcdserverpb__PutResponse *mk_put(struct arena *a, Etcdserverpb__ResponseHeader *h,
                                         const ketch_put_result *r) {
  Etcdserverpb__PutResponse *o = ar_alloc(a, sizeof *o);
  if (!o)
    return NULL;
  etcdserverpb__put_response__init(o);
  o->header = h;
  if (r->prev_kv) {
    Mvccpb__KeyValue **v = mk_kvs(a, r->prev_kv, 1);
    o->prev_kv = v ? v[0] : NULL;
  }
  return o;
}

static Etcdserverpb__DeleteRangeResponse *
mk_delete(struct arena *a, Etcdserverpb__ResponseHeader *h, const ketch_delete_result *r) {
  Etcdserverpb__DeleteRangeResponse *o = ar_alloc(a, sizeof *o);
  if (!o)
    return NULL;
  etcdserverpb__delete_range_response__init(o);
  o->header = h;
  o->deleted = r->deleted;
  o->prev_kvs = mk_kvs(a, r->prev_kvs, r->n_prev_kvs);
  o->n_prev_kvs = r->n_prev_kvs;
  return o;
}

/* Nested responses carry etcd's sub-headers: only a revision, the one etcd's
 * write txn reports at that point — a range sees begin+1 once the txn has
 * changed something, a put is at begin+1, a delete at begin+1 if it or an
 * earlier op changed something; a nested txn's header is empty. `begin` is
 * the revision before the txn. */
struct txn_walk {
  int64_t begin;
  bool changed;
};

static bool txn_changes(const ketch_txn_result *r) {
  for (size_t i = 0; i < r->n_responses; i++) {
    const ketch_op_result *x = &r->responses[i];
    if (x->type == KETCH_OP_PUT || (x->type == KETCH_OP_DELETE && x->del.deleted > 0) ||
        (x->type == KETCH_OP_TXN && txn_changes(&x->txn)))
      return true;
  }
  return false;
}

static Etcdserverpb__TxnResponse *mk_txn(struct arena *a, Etcdserverpb__ResponseHeader *h,
                                         struct txn_walk *w, const ketch_txn_result *r) {
  Etcdserverpb__TxnResponse *o = ar_alloc(a, sizeof *o);
  Etcdserverpb__ResponseOp **v = ar_alloc(a, (r->n_responses ? r->n_responses : 1) * sizeof *v);
  if (!o || !v)
    return NULL;
  etcdserverpb__txn_response__init(o);
  o->header = h;
  o->succeeded = r->succeeded;
  o->responses = v;
  o->n_responses = r->n_responses;
  for (size_t i = 0; i < r->n_responses; i++) {
    const ketch_op_result *x = &r->responses[i];
    Etcdserverpb__ResponseOp *op = ar_alloc(a, sizeof *op);
    ketch_header kh = {0};
    if (!op)
      return NULL;
    etcdserverpb__response_op__init(op);
    v[i] = op;
    switch (x->type) {
    case KETCH_OP_RANGE:
      kh.revision = w->begin + (w->changed ? 1 : 0);
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
      op->response_range = mk_range(a, mk_header(a, &kh, false), &x->range);
      break;
    case KETCH_OP_PUT:
      w->changed = true;
      kh.revision = w->begin + 1;
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
      op->response_put = mk_put(a, mk_header(a, &kh, false), &x->put);
      break;
    case KETCH_OP_DELETE:
      w->changed = w->changed || x->del.deleted > 0;
      kh.revision = w->begin + (w->changed ? 1 : 0);
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE;
      op->response_delete_range = mk_delete(a, mk_header(a, &kh, false), &x->del);
      break;
    case KETCH_OP_TXN:
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
      op->response_txn = mk_txn(a, mk_header(a, &kh, false), w, &x->txn);
      break;
    default:
      break;
    }
  }
  return o;
}

/* ---- one call ---- */

struct call {
  int method;
  int64_t id;                        /* the lease of a lease request */
  struct kt_bridge_cache_fill *fill; /* a Range the cache may keep (bridge_cache.c) */
  ketch_client *kc;
  kt_bridge_done done;
  void *arg;
};

static int cmp_bytes(const void *a, const void *b) {
  const ProtobufCBinaryData *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->data, y->data, n) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

static Etcdserverpb__LeaseTimeToLiveResponse *
mk_ttl(struct arena *a, Etcdserverpb__ResponseHeader *h, const ketch_lease_result *r) {
  Etcdserverpb__LeaseTimeToLiveResponse *o = ar_alloc(a, sizeof *o);
  ProtobufCBinaryData *keys = ar_alloc(a, (r->n_keys ? r->n_keys : 1) * sizeof *keys);
  if (!o || !keys)
    return NULL;
  etcdserverpb__lease_time_to_live_response__init(o);
  o->header = h;
  o->id = r->id;
  o->ttl = r->ttl;
  o->grantedttl = r->granted_ttl;
  for (size_t i = 0; i < r->n_keys; i++) {
    keys[i].data = (uint8_t *)r->keys[i].key;
    keys[i].len = r->keys[i].key_len;
  }
  if (r->n_keys > 1) /* etcd's order is a Go map's; ascending is easier to read */
    qsort(keys, r->n_keys, sizeof *keys, cmp_bytes);
  o->keys = keys;
  o->n_keys = r->n_keys;
  return o;
}

/* etcd's Member list (membersToProtoMembers) of r; NULL if out of memory. */
static Etcdserverpb__Member **mk_member_array(struct arena *a, const ketch_member_list_result *r) {
  size_t n = r->n_members;
  Etcdserverpb__Member **v = ar_alloc(a, (n ? n : 1) * sizeof *v);
  Etcdserverpb__Member *m = ar_alloc(a, (n ? n : 1) * sizeof *m);
  if (!v || !m)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    const ketch_member *x = &r->members[i];
    etcdserverpb__member__init(&m[i]);
    m[i].id = x->id;
    m[i].name = (char *)(x->name ? x->name : "");
    m[i].peerurls = (char **)x->peer_urls;
    m[i].n_peerurls = x->n_peer_urls;
    m[i].clienturls = (char **)x->client_urls;
    m[i].n_clienturls = x->n_client_urls;
    m[i].islearner = x->is_learner;
    v[i] = &m[i];
  }
  return v;
}

static Etcdserverpb__MemberListResponse *
mk_members(struct arena *a, Etcdserverpb__ResponseHeader *h, const ketch_member_list_result *r) {
  Etcdserverpb__MemberListResponse *o = ar_alloc(a, sizeof *o);
  Etcdserverpb__Member **v = mk_member_array(a, r);
  if (!o || !v)
    return NULL;
  etcdserverpb__member_list_response__init(o);
  o->header = h;
  o->members = v;
  o->n_members = r->n_members;
  return o;
}

void kt_bridge_fail(kt_bridge_done done, void *arg, int err, const char *detail) {
  int st;
  const char *m = kt_bridge_error(err, detail, &st);
  done(arg, st, m, NULL, 0);
}

/* ---- Cluster: MemberAdd, MemberRemove, MemberUpdate, MemberPromote ----
 * As etcd's v3rpc ClusterServer: the header has cluster_id, member_id and
 * raft_term (no revision); MemberAdd's `member` has only ID, peerURLs and
 * isLearner; `members` is the membership after the change. */

#define SAME_SHAPE(T)                                                                              \
  (sizeof(T) == sizeof(Etcdserverpb__MemberRemoveResponse) &&                                      \
   offsetof(T, header) == offsetof(Etcdserverpb__MemberRemoveResponse, header) &&                  \
   offsetof(T, n_members) == offsetof(Etcdserverpb__MemberRemoveResponse, n_members) &&            \
   offsetof(T, members) == offsetof(Etcdserverpb__MemberRemoveResponse, members))
_Static_assert(SAME_SHAPE(Etcdserverpb__MemberUpdateResponse) &&
                   SAME_SHAPE(Etcdserverpb__MemberPromoteResponse),
               "Cluster's Remove/Update/Promote responses share one layout");
static const ProtobufCMessageDescriptor *const member_reply_desc[MC_N] = {
    [MC_ADD] = &etcdserverpb__member_add_response__descriptor,
    [MC_REMOVE] = &etcdserverpb__member_remove_response__descriptor,
    [MC_UPDATE] = &etcdserverpb__member_update_response__descriptor,
    [MC_PROMOTE] = &etcdserverpb__member_promote_response__descriptor,
};

struct member_call {
  int method; /* MC_* */
  kt_bridge_done done;
  void *arg;
};

static void on_member_result(void *arg, int err, const ketch_result *res) {
  struct member_call *mc = arg;
  kt_bridge_done done = mc->done;
  void *darg = mc->arg;
  int method = mc->method;
  free(mc);
  if (err) {
    kt_bridge_fail(done, darg, err, res->message);
    return;
  }
  struct arena a = {0};
  ketch_header kh = res->header;
  kh.revision = 0;
  Etcdserverpb__ResponseHeader *h = mk_header(&a, &kh, true);
  const ketch_member_list_result *r = &res->member_list;
  Etcdserverpb__Member **v = mk_member_array(&a, r);
  const ProtobufCMessage *m = NULL;
  switch (method) {
  case MC_ADD: {
    Etcdserverpb__MemberAddResponse *o = ar_alloc(&a, sizeof *o);
    Etcdserverpb__Member *added = ar_alloc(&a, sizeof *added);
    if (!o || !added || !r->added)
      break;
    etcdserverpb__member_add_response__init(o);
    etcdserverpb__member__init(added);
    added->id = r->added->id;
    added->peerurls = (char **)r->added->peer_urls;
    added->n_peerurls = r->added->n_peer_urls;
    added->islearner = r->added->is_learner;
    o->header = h;
    o->member = added;
    o->members = v;
    o->n_members = r->n_members;
    m = (const ProtobufCMessage *)o;
    break;
  }
  default: {
    /* Remove, Update and Promote answer one shape (header, members): built
     * as a MemberRemoveResponse under the method's own descriptor. */
    Etcdserverpb__MemberRemoveResponse *o = ar_alloc(&a, sizeof *o);
    if (!o)
      break;
    protobuf_c_message_init(member_reply_desc[method], o);
    o->header = h;
    o->members = v;
    o->n_members = r->n_members;
    m = (const ProtobufCMessage *)o;
    break;
  }
  }
  if (!m || !h || !v || a.oom)
    done(darg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
  else
    kt_bridge_finish(done, darg, m);
  ar_free(&a);
}

/* libketch takes at most 64 peer URLs; more cannot be a valid member (the
 * member refuses lists that long as invalid too). */
#define MAX_PEER_URLS 64

static void member_call(ketch_client *kc, int method, const uint8_t *msg, size_t len,
                        kt_bridge_done done, void *arg) {
  struct member_call *mc = malloc(sizeof *mc);
  if (!mc) {
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  *mc = (struct member_call){method, done, arg};
  ProtobufCMessage *req = NULL;
  int err = 0;
  switch (method) {
  case MC_ADD: {
    Etcdserverpb__MemberAddRequest *r = etcdserverpb__member_add_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r && r->n_peerurls > MAX_PEER_URLS)
      err = KETCH_EMEMBERBADURLS;
    else if (r)
      err = ketch_member_add_async(kc, (const char *const *)r->peerurls, r->n_peerurls,
                                   r->islearner, on_member_result, mc);
    break;
  }
  case MC_REMOVE: {
    Etcdserverpb__MemberRemoveRequest *r =
        etcdserverpb__member_remove_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_member_remove_async(kc, r->id, on_member_result, mc);
    break;
  }
  case MC_UPDATE: {
    Etcdserverpb__MemberUpdateRequest *r =
        etcdserverpb__member_update_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r && r->n_peerurls > MAX_PEER_URLS)
      err = KETCH_EMEMBERBADURLS;
    else if (r)
      err = ketch_member_update_async(kc, r->id, (const char *const *)r->peerurls, r->n_peerurls,
                                      on_member_result, mc);
    break;
  }
  case MC_PROMOTE: {
    Etcdserverpb__MemberPromoteRequest *r =
        etcdserverpb__member_promote_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_member_promote_async(kc, r->id, on_member_result, mc);
    break;
  }
  }
  /* libketch encoded the request when it was submitted */
  if (req)
    protobuf_c_message_free_unpacked(req, NULL);
  if (!req || err)
    free(mc);
  if (!req)
    done(arg, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf", NULL, 0);
  else if (err)
    kt_bridge_fail(done, arg, err, NULL);
}

static void on_result(void *arg, int err, const ketch_result *res) {
  struct call *c = arg;
  kt_bridge_done done = c->done;
  void *darg = c->arg;
  int method = c->method;
  int64_t lease_id = c->id;
  struct kt_bridge_cache_fill *fill = c->fill;
  ketch_header nf = {0};
  if (err == KETCH_ELEASENOTFOUND && method == M_LEASE_TTL) {
    /* etcd answers a time-to-live of an unknown lease with TTL -1. */
    nf.cluster_id = ketch_cluster_id(c->kc);
    nf.member_id = ketch_member_id(c->kc);
  }
  free(c);
  if (err && fill)
    kt_bridge_cache_fill_failed(fill, err);
  if (err && !nf.cluster_id) {
    kt_bridge_fail(done, darg, err, res->message);
    return;
  }
  struct arena a = {0};
  Etcdserverpb__ResponseHeader *h = mk_header(&a, err ? &nf : &res->header, true);
  const ProtobufCMessage *m = NULL;
  switch (method) {
  case M_RANGE:
    m = (const ProtobufCMessage *)mk_range(&a, h, &res->range);
    break;
  case M_PUT:
    m = (const ProtobufCMessage *)mk_put(&a, h, &res->put);
    break;
  case M_DELETE:
    m = (const ProtobufCMessage *)mk_delete(&a, h, &res->del);
    break;
  case M_TXN: {
    struct txn_walk w = {res->header.revision, false};
    if (txn_changes(&res->txn))
      w.begin--;
    m = (const ProtobufCMessage *)mk_txn(&a, h, &w, &res->txn);
    break;
  }
  case M_COMPACT: {
    Etcdserverpb__CompactionResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__compaction_response__init(o);
      o->header = h;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_STATUS: {
    Etcdserverpb__StatusResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      const ketch_status_result *s = &res->status;
      etcdserverpb__status_response__init(o);
      o->header = h;
      o->version = (char *)KT_BRIDGE_ETCD_VERSION; /* the member's own: s->version */
      o->dbsize = s->db_size;
      o->dbsizeinuse = s->db_size_in_use;
      o->leader = s->leader;
      o->raftindex = s->raft_index;
      o->raftterm = s->raft_term;
      o->raftappliedindex = s->raft_applied_index;
      o->islearner = s->is_learner;
      o->errors = (char **)s->errors;
      o->n_errors = s->n_errors;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_LEASE_GRANT: {
    Etcdserverpb__LeaseGrantResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__lease_grant_response__init(o);
      o->header = h;
      o->id = res->lease.id;
      o->ttl = res->lease.ttl;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_LEASE_REVOKE: {
    Etcdserverpb__LeaseRevokeResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__lease_revoke_response__init(o);
      o->header = h;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_LEASE_TTL: {
    ketch_lease_result gone = {.id = lease_id, .ttl = -1};
    m = (const ProtobufCMessage *)mk_ttl(&a, h, err ? &gone : &res->lease);
    break;
  }
  case M_LEASE_LEASES: {
    size_t n = res->lease.n_leases;
    Etcdserverpb__LeaseLeasesResponse *o = ar_alloc(&a, sizeof *o);
    Etcdserverpb__LeaseStatus **v = ar_alloc(&a, (n ? n : 1) * sizeof *v);
    Etcdserverpb__LeaseStatus *ls = ar_alloc(&a, (n ? n : 1) * sizeof *ls);
    if (o && v && ls) {
      etcdserverpb__lease_leases_response__init(o);
      o->header = h;
      for (size_t i = 0; i < n; i++) {
        etcdserverpb__lease_status__init(&ls[i]);
        ls[i].id = res->lease.leases[i];
        v[i] = &ls[i];
      }
      o->leases = v;
      o->n_leases = n;
      m = (const ProtobufCMessage *)o;
    }
    break;
  }
  case M_MEMBER_LIST:
    m = (const ProtobufCMessage *)mk_members(&a, h, &res->member_list);
    break;
  case M_ALARM: {
    /* GET: the connected member's list (the cluster's alarms, as every
     * member applies ACTIVATE/DEACTIVATE); ACTIVATE/DEACTIVATE: the alarm
     * changed. No header: etcd 3.4 sends none. */
    size_t n = res->alarm.n_alarms;
    Etcdserverpb__AlarmResponse *o = ar_alloc(&a, sizeof *o);
    Etcdserverpb__AlarmMember **v = ar_alloc(&a, (n ? n : 1) * sizeof *v);
    Etcdserverpb__AlarmMember *am = ar_alloc(&a, (n ? n : 1) * sizeof *am);
    if (!o || !v || !am)
      break;
    etcdserverpb__alarm_response__init(o);
    for (size_t i = 0; i < n; i++) {
      etcdserverpb__alarm_member__init(&am[i]);
      am[i].memberid = res->alarm.alarms[i].member_id;
      am[i].alarm = (Etcdserverpb__AlarmType)res->alarm.alarms[i].alarm;
      v[i] = &am[i];
    }
    o->alarms = v;
    o->n_alarms = n;
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_DEFRAGMENT: {
    Etcdserverpb__DefragmentResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__defragment_response__init(o);
      o->header = h;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_HASH: {
    /* etcd hashes its whole backend file; ketch answers the same hash as
     * HashKV at the current revision (the store is all it has). */
    Etcdserverpb__HashResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__hash_response__init(o);
      o->header = h;
      o->hash = res->hash_kv.hash;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_HASH_KV: {
    Etcdserverpb__HashKVResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__hash_kvresponse__init(o);
      o->header = h;
      o->hash = res->hash_kv.hash;
      /* etcd says -1 for a store never compacted */
      o->compact_revision = res->hash_kv.compact_revision ? res->hash_kv.compact_revision : -1;
      o->hash_revision = res->hash_kv.hash_revision;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  case M_MOVE_LEADER: {
    Etcdserverpb__MoveLeaderResponse *o = ar_alloc(&a, sizeof *o);
    if (o) {
      etcdserverpb__move_leader_response__init(o);
      o->header = h;
    }
    m = (const ProtobufCMessage *)o;
    break;
  }
  }
  uint8_t *framed = NULL;
  size_t framed_len = 0;
  if (fill && (!m || a.oom))
    kt_bridge_cache_fill_failed(fill, 0);
  else if (fill)
    framed = kt_bridge_cache_fill(fill, &res->header, (void *)m, &framed_len);
  if (!m || a.oom)
    done(darg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
  else if (framed)
    done(darg, KT_GRPC_OK, "", framed, framed_len);
  else
    kt_bridge_finish(done, darg, m);
  ar_free(&a);
}

/* Not etcd's isTxnReadonly: a put or delete anywhere in the txn (a txn
 * nested deeper than ketch takes counts as one: it is refused anyway). */
static bool txn_writes(const Etcdserverpb__TxnRequest *r, int depth) {
  if (depth > MAX_TXN_DEPTH)
    return true;
  for (int b = 0; b < 2; b++) {
    Etcdserverpb__RequestOp **ops = b ? r->failure : r->success;
    size_t n = b ? r->n_failure : r->n_success;
    for (size_t i = 0; i < n; i++) {
      if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT ||
          ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE ||
          (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN &&
           txn_writes(ops[i]->request_txn, depth + 1)))
        return true;
    }
  }
  return false;
}

void kt_bridge_call(ketch_client *kc, const char *path, const uint8_t *msg, size_t len,
                    size_t max_request_bytes, kt_bridge_done done, void *arg) {
  if (!strcmp(path, method_paths[M_RANGE]) && kt_bridge_cache_get(kc, msg, len, done, arg))
    return; /* a cache hit: answered without the member */
  if (member_index(path) >= 0) {
    member_call(kc, member_index(path), msg, len, done, arg);
    return;
  }
  if (kt_bridge_auth_method(path) >= 0) { /* Authenticate: bridge_main.c's */
    if (kt_bridge_auth_method(path) != KETCH_OP_AUTH_STATUS)
      kt_bridge_cache_clear(); /* what the default handle may read may change */
    kt_bridge_auth_call(kc, kt_bridge_auth_method(path), msg, len, done, arg);
    return;
  }
  int method = method_index(path);
  if (method < 0) {
    char m[256];
    kt_bridge_method(path, m, sizeof m);
    done(arg, KT_GRPC_UNIMPLEMENTED, m, NULL, 0);
    return;
  }
  /* etcd holds what it proposes (writes) to --max-request-bytes; reads
   * only to the gRPC receive limit (that + 512 KiB, bridge_main.c) */
  if ((method == M_PUT || method == M_DELETE) && len > max_request_bytes) {
    kt_bridge_fail(done, arg, KETCH_ETOOLARGE, NULL);
    return;
  }
  struct call *c = malloc(sizeof *c);
  if (!c) {
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  c->method = method;
  c->id = 0;
  c->fill = NULL;
  c->kc = kc;
  c->done = done;
  c->arg = arg;
  struct arena a = {0};
  ProtobufCMessage *req = NULL;
  int err = 0;
  put_check_msg = NULL;
  switch (method) {
  case M_RANGE: {
    Etcdserverpb__RangeRequest *r = etcdserverpb__range_request__unpack(NULL, len, msg);
    ketch_range_req q;
    req = (ProtobufCMessage *)r;
    if (r && !(err = conv_range(r, &q))) {
      c->fill = kt_bridge_cache_miss(kc, msg, len, &q);
      err = ketch_range_async(kc, &q, on_result, c);
    }
    break;
  }
  case M_PUT: {
    Etcdserverpb__PutRequest *r = etcdserverpb__put_request__unpack(NULL, len, msg);
    ketch_put_req q;
    req = (ProtobufCMessage *)r;
    if (r && !(err = conv_put(r, &q)))
      err = ketch_put_async(kc, &q, on_result, c);
    break;
  }
  case M_DELETE: {
    Etcdserverpb__DeleteRangeRequest *r =
        etcdserverpb__delete_range_request__unpack(NULL, len, msg);
    ketch_delete_req q;
    req = (ProtobufCMessage *)r;
    if (r && !(err = conv_delete(r, &q)))
      err = ketch_delete_async(kc, &q, on_result, c);
    break;
  }
  case M_TXN: {
    Etcdserverpb__TxnRequest *r = etcdserverpb__txn_request__unpack(NULL, len, msg);
    ketch_txn_req q;
    req = (ProtobufCMessage *)r;
    if (r && len > max_request_bytes && txn_writes(r, 0))
      err = KETCH_ETOOLARGE;
    else if (r && !(err = conv_txn(&a, r, &q, 0)))
      err = ketch_txn_async(kc, &q, on_result, c);
    break;
  }
  case M_COMPACT: {
    Etcdserverpb__CompactionRequest *r = etcdserverpb__compaction_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r) {
      kt_bridge_cache_compacting(r->revision);
      err = ketch_compact_async(kc, r->revision, r->physical, on_result, c);
    }
    break;
  }
  case M_STATUS: {
    Etcdserverpb__StatusRequest *r = etcdserverpb__status_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_status_async(kc, on_result, c);
    break;
  }
  case M_LEASE_GRANT: {
    Etcdserverpb__LeaseGrantRequest *r = etcdserverpb__lease_grant_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r && r->ttl > MAX_LEASE_TTL_S) {
      err = KETCH_EINVAL;
      put_check_msg = "too large lease TTL";
    } else if (r) {
      /* etcd raises a TTL below its minimum (0 and negative too) to the
       * minimum; libketch refuses ttl <= 0: ask for 1 s, the member raises
       * it to its own minimum. */
      err = ketch_lease_grant_async(kc, r->ttl > 0 ? r->ttl : 1, r->id, on_result, c);
    }
    break;
  }
  case M_LEASE_REVOKE: {
    Etcdserverpb__LeaseRevokeRequest *r =
        etcdserverpb__lease_revoke_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r) {
      kt_bridge_ka_forget(NULL, r->id); /* no cached renewal answers for it */
      err = ketch_lease_revoke_async(kc, r->id, on_result, c);
    }
    break;
  }
  case M_LEASE_TTL: {
    Etcdserverpb__LeaseTimeToLiveRequest *r =
        etcdserverpb__lease_time_to_live_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r) {
      c->id = r->id;
      err = ketch_lease_timetolive_async(kc, r->id, r->keys, on_result, c);
    }
    break;
  }
  case M_LEASE_LEASES: {
    Etcdserverpb__LeaseLeasesRequest *r =
        etcdserverpb__lease_leases_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_lease_leases_async(kc, on_result, c);
    break;
  }
  case M_MEMBER_LIST: {
    Etcdserverpb__MemberListRequest *r = etcdserverpb__member_list_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_member_list_async(kc, on_result, c);
    break;
  }
  case M_ALARM: {
    Etcdserverpb__AlarmRequest *r = etcdserverpb__alarm_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r && ((unsigned)r->action > ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE ||
              (unsigned)r->alarm > ETCDSERVERPB__ALARM_TYPE__CORRUPT)) {
      err = KETCH_EINVAL;
      put_check_msg = "ketch-grpc: unknown alarm action or type";
    } else if (r) {
      err = ketch_alarm_async(kc, (int)r->action, r->memberid, (int)r->alarm, on_result, c);
    }
    break;
  }
  case M_DEFRAGMENT: {
    Etcdserverpb__DefragmentRequest *r = etcdserverpb__defragment_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_defragment_async(kc, on_result, c);
    break;
  }
  case M_HASH: {
    Etcdserverpb__HashRequest *r = etcdserverpb__hash_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_hash_kv_async(kc, 0, on_result, c);
    break;
  }
  case M_HASH_KV: {
    Etcdserverpb__HashKVRequest *r = etcdserverpb__hash_kvrequest__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r && r->revision < 0) {
      /* etcd: a negative revision hashes the current one */
      err = ketch_hash_kv_async(kc, 0, on_result, c);
    } else if (r) {
      err = ketch_hash_kv_async(kc, r->revision, on_result, c);
    }
    break;
  }
  case M_MOVE_LEADER: {
    Etcdserverpb__MoveLeaderRequest *r = etcdserverpb__move_leader_request__unpack(NULL, len, msg);
    req = (ProtobufCMessage *)r;
    if (r)
      err = ketch_move_leader_async(kc, r->targetid, on_result, c);
    break;
  }
  }
  const char *detail = put_check_msg;
  ar_free(&a);
  if (req)
    protobuf_c_message_free_unpacked(req, NULL);
  if (!req) {
    free(c);
    done(arg, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf", NULL, 0);
  } else if (err) {
    kt_bridge_cache_fill_failed(c->fill, 0);
    free(c);
    if (detail && strncmp(detail, "etcdserver: ", 12) == 0)
      done(arg, KT_GRPC_INVALID_ARGUMENT, detail, NULL, 0);
    else
      kt_bridge_fail(done, arg, err, detail);
  }
}
