/* tools/grpc-bridge/bridge_kv.c — etcd's unary calls (KV, Lease, Cluster,
 * Maintenance.Status/MoveLeader/Alarm/Defragment/Hash/HashKV) mapped onto
 * libketch:
 * protobuf requests to ketch requests, ketch results to protobuf responses,
 * ketch errors to etcd's gRPC statuses (see bridge.h).
 *
 * One table (`unary`) names each method's path, request and response
 * messages and its two hooks: submit (the unpacked request to a libketch
 * call) and fill (a result to the response past its header). kt_bridge_call
 * and on_result are the one path every method takes: unpack, submit, answer
 * the error or build the header and the response, frame it. */
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
/* etcd's largest lease TTL (lease.MaxLeaseTTL, seconds). */
#define MAX_LEASE_TTL_S 9000000000LL

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

/* What converting one request needs: the arena its arrays live in, and
 * etcd's own message for a check that has no ketch code (NULL if none). */
struct conv {
  struct arena a;
  const char *detail;
};

/* A protobuf bytes field b into libketch's pointer and length (dst and
 * dst_len), and back. */
#define KT_BYTES(dst, b) ((dst) = (b).data, dst##_len = (b).len)
#define PB_BYTES(b, src) ((b).data = (uint8_t *)(src), (b).len = src##_len)

static int conv_range(const Etcdserverpb__RangeRequest *r, ketch_range_req *o) {
  if (r->key.len == 0)
    return KETCH_EKEYEMPTY;
  memset(o, 0, sizeof *o);
  KT_BYTES(o->key, r->key);
  KT_BYTES(o->range_end, r->range_end);
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

static int conv_put(struct conv *cv, const Etcdserverpb__PutRequest *r, ketch_put_req *o) {
  if (r->key.len == 0)
    return KETCH_EKEYEMPTY;
  if (r->ignore_value && r->value.len != 0) {
    cv->detail = "etcdserver: value is provided";
    return KETCH_EINVAL;
  }
  if (r->ignore_lease && r->lease != 0) {
    cv->detail = "etcdserver: lease is provided";
    return KETCH_EINVAL;
  }
  memset(o, 0, sizeof *o);
  KT_BYTES(o->key, r->key);
  KT_BYTES(o->value, r->value);
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
  KT_BYTES(o->key, r->key);
  KT_BYTES(o->range_end, r->range_end);
  o->prev_kv = r->prev_kv;
  return 0;
}

static int conv_txn(struct conv *cv, const Etcdserverpb__TxnRequest *r, ketch_txn_req *o,
                    int depth);

static int conv_ops(struct conv *cv, Etcdserverpb__RequestOp *const *in, size_t n,
                    const ketch_op **out, int depth) {
  ketch_op *ops = ar_alloc(&cv->a, (n ? n : 1) * sizeof *ops);
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
      err = conv_put(cv, op->request_put, &ops[i].put);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
      ops[i].type = KETCH_OP_DELETE;
      err = conv_delete(op->request_delete_range, &ops[i].del);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
      ops[i].type = KETCH_OP_TXN;
      err = conv_txn(cv, op->request_txn, &ops[i].txn, depth + 1);
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

static int conv_txn(struct conv *cv, const Etcdserverpb__TxnRequest *r, ketch_txn_req *o,
                    int depth) {
  if (depth > MAX_TXN_DEPTH)
    return KETCH_EINVAL;
  if (r->n_compare > MAX_TXN_OPS || r->n_success > MAX_TXN_OPS || r->n_failure > MAX_TXN_OPS)
    return KETCH_ETOOMANYOPS;
  memset(o, 0, sizeof *o);
  ketch_compare *cmp = ar_alloc(&cv->a, (r->n_compare ? r->n_compare : 1) * sizeof *cmp);
  if (!cmp)
    return KETCH_ENOMEM;
  for (size_t i = 0; i < r->n_compare; i++) {
    const Etcdserverpb__Compare *c = r->compare[i];
    cmp[i].result = (int)c->result;
    cmp[i].target = (int)c->target;
    KT_BYTES(cmp[i].key, c->key);
    KT_BYTES(cmp[i].range_end, c->range_end);
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
      KT_BYTES(cmp[i].value, c->value);
      break;
    default:
      break;
    }
  }
  o->compare = cmp;
  o->n_compare = r->n_compare;
  int err = conv_ops(cv, r->success, r->n_success, &o->success, depth);
  if (!err)
    err = conv_ops(cv, r->failure, r->n_failure, &o->failure, depth);
  o->n_success = r->n_success;
  o->n_failure = r->n_failure;
  return err;
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

/* ---- responses: libketch -> protobuf ---- */

#define PB(name) (&etcdserverpb__##name##__descriptor)

/* etcd's ResponseHeader of h (a field that is 0 is not sent: a txn op's
 * sub-header, with only a revision, is this too). */
static Etcdserverpb__ResponseHeader *mk_header(struct arena *a, const ketch_header *h) {
  Etcdserverpb__ResponseHeader *o = ar_alloc(a, sizeof *o);
  if (!o)
    return NULL;
  etcdserverpb__response_header__init(o);
  o->cluster_id = h->cluster_id;
  o->member_id = h->member_id;
  o->revision = h->revision;
  o->raft_term = h->raft_term;
  return o;
}

/* A message of type d, its `header` (every etcd response has one) set to h
 * unless h is NULL; NULL if out of memory. */
static void *mk_msg(struct arena *a, const ProtobufCMessageDescriptor *d,
                    Etcdserverpb__ResponseHeader *h) {
  ProtobufCMessage *o = ar_alloc(a, d->sizeof_message);
  if (!o)
    return NULL;
  protobuf_c_message_init(d, o);
  const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, "header");
  if (h && f)
    memcpy((char *)o + f->offset, &h, sizeof h);
  return o;
}

static Mvccpb__KeyValue **mk_kvs(struct arena *a, const ketch_kv *kv, size_t n) {
  Mvccpb__KeyValue **v = ar_alloc(a, (n ? n : 1) * sizeof *v);
  Mvccpb__KeyValue *o = ar_alloc(a, (n ? n : 1) * sizeof *o);
  if (!v || !o)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    mvccpb__key_value__init(&o[i]);
    PB_BYTES(o[i].key, kv[i].key);
    PB_BYTES(o[i].value, kv[i].value);
    o[i].create_revision = kv[i].create_revision;
    o[i].mod_revision = kv[i].mod_revision;
    o[i].version = kv[i].version;
    o[i].lease = kv[i].lease;
    v[i] = &o[i];
  }
  return v;
}

/* The bodies of KV's responses, alone or as txn ops. */
static void range_body(struct arena *a, Etcdserverpb__RangeResponse *o,
                       const ketch_range_result *r) {
  o->kvs = mk_kvs(a, r->kvs, r->n_kvs);
  o->n_kvs = r->n_kvs;
  o->more = r->more;
  o->count = r->count;
}

static void put_body(struct arena *a, Etcdserverpb__PutResponse *o, const ketch_put_result *r) {
  if (r->prev_kv) {
    Mvccpb__KeyValue **v = mk_kvs(a, r->prev_kv, 1);
    o->prev_kv = v ? v[0] : NULL;
  }
}

static void delete_body(struct arena *a, Etcdserverpb__DeleteRangeResponse *o,
                        const ketch_delete_result *r) {
  o->deleted = r->deleted;
  o->prev_kvs = mk_kvs(a, r->prev_kvs, r->n_prev_kvs);
  o->n_prev_kvs = r->n_prev_kvs;
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

/* A txn op's response of type d under a sub-header at `revision`. */
static void *mk_sub(struct arena *a, const ProtobufCMessageDescriptor *d, int64_t revision) {
  ketch_header kh = {.revision = revision};
  return mk_msg(a, d, mk_header(a, &kh));
}

static void txn_body(struct arena *a, Etcdserverpb__TxnResponse *o, struct txn_walk *w,
                     const ketch_txn_result *r) {
  Etcdserverpb__ResponseOp **v = ar_alloc(a, (r->n_responses ? r->n_responses : 1) * sizeof *v);
  if (!v)
    return;
  o->succeeded = r->succeeded;
  o->responses = v;
  o->n_responses = r->n_responses;
  for (size_t i = 0; i < r->n_responses; i++) {
    const ketch_op_result *x = &r->responses[i];
    Etcdserverpb__ResponseOp *op = ar_alloc(a, sizeof *op);
    if (!op)
      return;
    etcdserverpb__response_op__init(op);
    v[i] = op;
    switch (x->type) {
    case KETCH_OP_RANGE:
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
      op->response_range = mk_sub(a, PB(range_response), w->begin + (w->changed ? 1 : 0));
      if (op->response_range)
        range_body(a, op->response_range, &x->range);
      break;
    case KETCH_OP_PUT:
      w->changed = true;
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
      op->response_put = mk_sub(a, PB(put_response), w->begin + 1);
      if (op->response_put)
        put_body(a, op->response_put, &x->put);
      break;
    case KETCH_OP_DELETE:
      w->changed = w->changed || x->del.deleted > 0;
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE;
      op->response_delete_range =
          mk_sub(a, PB(delete_range_response), w->begin + (w->changed ? 1 : 0));
      if (op->response_delete_range)
        delete_body(a, op->response_delete_range, &x->del);
      break;
    case KETCH_OP_TXN:
      op->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
      op->response_txn = mk_sub(a, PB(txn_response), 0);
      if (op->response_txn)
        txn_body(a, op->response_txn, w, &x->txn);
      break;
    default:
      break;
    }
  }
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

static int cmp_bytes(const void *a, const void *b) {
  const ProtobufCBinaryData *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->data, y->data, n) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* ---- each method's response past its header: o (of the method's type)
 * from res; false if it cannot be answered (out of memory shows in the
 * arena's oom) ---- */

static bool fill_range(struct arena *a, void *o, const ketch_result *res) {
  range_body(a, o, &res->range);
  return true;
}

static bool fill_put(struct arena *a, void *o, const ketch_result *res) {
  put_body(a, o, &res->put);
  return true;
}

static bool fill_delete(struct arena *a, void *o, const ketch_result *res) {
  delete_body(a, o, &res->del);
  return true;
}

static bool fill_txn(struct arena *a, void *o, const ketch_result *res) {
  struct txn_walk w = {res->header.revision, false};
  if (txn_changes(&res->txn))
    w.begin--;
  txn_body(a, o, &w, &res->txn);
  return true;
}

static bool fill_status(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__StatusResponse *x = o;
  const ketch_status_result *s = &res->status;
  (void)a;
  x->version = (char *)KT_BRIDGE_ETCD_VERSION; /* the member's own: s->version */
  x->dbsize = s->db_size;
  x->dbsizeinuse = s->db_size_in_use;
  x->leader = s->leader;
  x->raftindex = s->raft_index;
  x->raftterm = s->raft_term;
  x->raftappliedindex = s->raft_applied_index;
  x->islearner = s->is_learner;
  x->errors = (char **)s->errors;
  x->n_errors = s->n_errors;
  return true;
}

static bool fill_lease_grant(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__LeaseGrantResponse *x = o;
  (void)a;
  x->id = res->lease.id;
  x->ttl = res->lease.ttl;
  return true;
}

static bool fill_ttl(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__LeaseTimeToLiveResponse *x = o;
  const ketch_lease_result *r = &res->lease;
  ProtobufCBinaryData *keys = ar_alloc(a, (r->n_keys ? r->n_keys : 1) * sizeof *keys);
  if (!keys)
    return false;
  x->id = r->id;
  x->ttl = r->ttl;
  x->grantedttl = r->granted_ttl;
  for (size_t i = 0; i < r->n_keys; i++) {
    PB_BYTES(keys[i], r->keys[i].key);
  }
  if (r->n_keys > 1) /* etcd's order is a Go map's; ascending is easier to read */
    qsort(keys, r->n_keys, sizeof *keys, cmp_bytes);
  x->keys = keys;
  x->n_keys = r->n_keys;
  return true;
}

static bool fill_leases(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__LeaseLeasesResponse *x = o;
  size_t n = res->lease.n_leases;
  Etcdserverpb__LeaseStatus **v = ar_alloc(a, (n ? n : 1) * sizeof *v);
  Etcdserverpb__LeaseStatus *ls = ar_alloc(a, (n ? n : 1) * sizeof *ls);
  if (!v || !ls)
    return false;
  for (size_t i = 0; i < n; i++) {
    etcdserverpb__lease_status__init(&ls[i]);
    ls[i].id = res->lease.leases[i];
    v[i] = &ls[i];
  }
  x->leases = v;
  x->n_leases = n;
  return true;
}

/* MemberList, MemberRemove, MemberUpdate and MemberPromote answer one shape
 * (header, members): each is filled as a MemberListResponse. */
#define SAME_SHAPE(T)                                                                              \
  (sizeof(T) == sizeof(Etcdserverpb__MemberListResponse) &&                                        \
   offsetof(T, header) == offsetof(Etcdserverpb__MemberListResponse, header) &&                    \
   offsetof(T, n_members) == offsetof(Etcdserverpb__MemberListResponse, n_members) &&              \
   offsetof(T, members) == offsetof(Etcdserverpb__MemberListResponse, members))
_Static_assert(SAME_SHAPE(Etcdserverpb__MemberRemoveResponse) &&
                   SAME_SHAPE(Etcdserverpb__MemberUpdateResponse) &&
                   SAME_SHAPE(Etcdserverpb__MemberPromoteResponse),
               "Cluster's List/Remove/Update/Promote responses share one layout");

static bool fill_members(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__MemberListResponse *x = o;
  x->members = mk_member_array(a, &res->member_list);
  x->n_members = res->member_list.n_members;
  return true;
}

/* MemberAdd's `member` has only ID, peerURLs and isLearner, as etcd's. */
static bool fill_member_add(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__MemberAddResponse *x = o;
  const ketch_member *m = res->member_list.added;
  Etcdserverpb__Member *added = ar_alloc(a, sizeof *added);
  if (!added || !m)
    return false;
  etcdserverpb__member__init(added);
  added->id = m->id;
  added->peerurls = (char **)m->peer_urls;
  added->n_peerurls = m->n_peer_urls;
  added->islearner = m->is_learner;
  x->member = added;
  x->members = mk_member_array(a, &res->member_list);
  x->n_members = res->member_list.n_members;
  return true;
}

/* GET: the connected member's list (the cluster's alarms, as every member
 * applies ACTIVATE/DEACTIVATE); ACTIVATE/DEACTIVATE: the alarm changed. */
static bool fill_alarm(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__AlarmResponse *x = o;
  size_t n = res->alarm.n_alarms;
  Etcdserverpb__AlarmMember **v = ar_alloc(a, (n ? n : 1) * sizeof *v);
  Etcdserverpb__AlarmMember *am = ar_alloc(a, (n ? n : 1) * sizeof *am);
  if (!v || !am)
    return false;
  for (size_t i = 0; i < n; i++) {
    etcdserverpb__alarm_member__init(&am[i]);
    am[i].memberid = res->alarm.alarms[i].member_id;
    am[i].alarm = (Etcdserverpb__AlarmType)res->alarm.alarms[i].alarm;
    v[i] = &am[i];
  }
  x->alarms = v;
  x->n_alarms = n;
  return true;
}

/* etcd hashes its whole backend file; ketch answers the same hash as HashKV
 * at the current revision (the store is all it has). */
static bool fill_hash(struct arena *a, void *o, const ketch_result *res) {
  (void)a;
  ((Etcdserverpb__HashResponse *)o)->hash = res->hash_kv.hash;
  return true;
}

static bool fill_hash_kv(struct arena *a, void *o, const ketch_result *res) {
  Etcdserverpb__HashKVResponse *x = o;
  (void)a;
  x->hash = res->hash_kv.hash;
  /* etcd says -1 for a store never compacted */
  x->compact_revision = res->hash_kv.compact_revision ? res->hash_kv.compact_revision : -1;
  x->hash_revision = res->hash_kv.hash_revision;
  return true;
}

/* ---- one call ---- */

struct call {
  const struct method *m;
  int64_t id;                        /* the lease of a LeaseTimeToLive */
  struct kt_bridge_cache_fill *fill; /* a Range the cache may keep (bridge_cache.c) */
  ketch_client *kc;
  kt_bridge_done done;
  void *arg;
};

/* One request on its way to libketch: the handle, the call its answer
 * completes, the request's bytes and their conversion. */
struct req {
  ketch_client *kc;
  struct call *c;
  const uint8_t *msg;
  size_t len, max_request_bytes;
  struct conv cv;
};

static void on_result(void *arg, int err, const ketch_result *res);

/* ---- each method's request pb (of the method's type) to libketch: 0 once
 * submitted, else a KETCH_E* code (and maybe q->cv.detail) ---- */

static int submit_range(struct req *q, const void *pb) {
  ketch_range_req o;
  int err = conv_range(pb, &o);
  if (err)
    return err;
  q->c->fill = kt_bridge_cache_miss(q->kc, q->msg, q->len, &o);
  return ketch_range_async(q->kc, &o, on_result, q->c);
}

static int submit_put(struct req *q, const void *pb) {
  ketch_put_req o;
  int err = conv_put(&q->cv, pb, &o);
  return err ? err : ketch_put_async(q->kc, &o, on_result, q->c);
}

static int submit_delete(struct req *q, const void *pb) {
  ketch_delete_req o;
  int err = conv_delete(pb, &o);
  return err ? err : ketch_delete_async(q->kc, &o, on_result, q->c);
}

static int submit_txn(struct req *q, const void *pb) {
  ketch_txn_req o;
  /* etcd holds a txn that writes to --max-request-bytes, as Put and Delete */
  if (q->len > q->max_request_bytes && txn_writes(pb, 0))
    return KETCH_ETOOLARGE;
  int err = conv_txn(&q->cv, pb, &o, 0);
  return err ? err : ketch_txn_async(q->kc, &o, on_result, q->c);
}

static int submit_compact(struct req *q, const void *pb) {
  const Etcdserverpb__CompactionRequest *r = pb;
  kt_bridge_cache_compacting(r->revision);
  return ketch_compact_async(q->kc, r->revision, r->physical, on_result, q->c);
}

static int submit_lease_grant(struct req *q, const void *pb) {
  const Etcdserverpb__LeaseGrantRequest *r = pb;
  if (r->ttl > MAX_LEASE_TTL_S) {
    q->cv.detail = "too large lease TTL";
    return KETCH_EINVAL;
  }
  /* etcd raises a TTL below its minimum (0 and negative too) to the
   * minimum; libketch refuses ttl <= 0: ask for 1 s, the member raises it
   * to its own minimum. */
  return ketch_lease_grant_async(q->kc, r->ttl > 0 ? r->ttl : 1, r->id, on_result, q->c);
}

static int submit_lease_revoke(struct req *q, const void *pb) {
  const Etcdserverpb__LeaseRevokeRequest *r = pb;
  kt_bridge_ka_forget(NULL, r->id); /* no cached renewal answers for it */
  return ketch_lease_revoke_async(q->kc, r->id, on_result, q->c);
}

static int submit_lease_ttl(struct req *q, const void *pb) {
  const Etcdserverpb__LeaseTimeToLiveRequest *r = pb;
  q->c->id = r->id;
  return ketch_lease_timetolive_async(q->kc, r->id, r->keys, on_result, q->c);
}

static int submit_alarm(struct req *q, const void *pb) {
  const Etcdserverpb__AlarmRequest *r = pb;
  if ((unsigned)r->action > ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE ||
      (unsigned)r->alarm > ETCDSERVERPB__ALARM_TYPE__CORRUPT) {
    q->cv.detail = "ketch-grpc: unknown alarm action or type";
    return KETCH_EINVAL;
  }
  return ketch_alarm_async(q->kc, (int)r->action, r->memberid, (int)r->alarm, on_result, q->c);
}

static int submit_hash(struct req *q, const void *pb) {
  (void)pb;
  return ketch_hash_kv_async(q->kc, 0, on_result, q->c);
}

static int submit_hash_kv(struct req *q, const void *pb) {
  const Etcdserverpb__HashKVRequest *r = pb;
  /* etcd: a negative revision hashes the current one */
  return ketch_hash_kv_async(q->kc, r->revision < 0 ? 0 : r->revision, on_result, q->c);
}

static int submit_move_leader(struct req *q, const void *pb) {
  const Etcdserverpb__MoveLeaderRequest *r = pb;
  return ketch_move_leader_async(q->kc, r->targetid, on_result, q->c);
}

/* libketch takes at most 64 peer URLs; more cannot be a valid member (the
 * member refuses lists that long as invalid too). */
#define MAX_PEER_URLS 64

static int submit_member_add(struct req *q, const void *pb) {
  const Etcdserverpb__MemberAddRequest *r = pb;
  if (r->n_peerurls > MAX_PEER_URLS)
    return KETCH_EMEMBERBADURLS;
  return ketch_member_add_async(q->kc, (const char *const *)r->peerurls, r->n_peerurls,
                                r->islearner, on_result, q->c);
}

static int submit_member_remove(struct req *q, const void *pb) {
  const Etcdserverpb__MemberRemoveRequest *r = pb;
  return ketch_member_remove_async(q->kc, r->id, on_result, q->c);
}

static int submit_member_update(struct req *q, const void *pb) {
  const Etcdserverpb__MemberUpdateRequest *r = pb;
  if (r->n_peerurls > MAX_PEER_URLS)
    return KETCH_EMEMBERBADURLS;
  return ketch_member_update_async(q->kc, r->id, (const char *const *)r->peerurls, r->n_peerurls,
                                   on_result, q->c);
}

static int submit_member_promote(struct req *q, const void *pb) {
  const Etcdserverpb__MemberPromoteRequest *r = pb;
  return ketch_member_promote_async(q->kc, r->id, on_result, q->c);
}

/* ---- the unary methods ---- */

/* The header a response carries: the member's (HDR_FULL); the member's
 * without a revision (HDR_NO_REVISION: Cluster's changes, as etcd's v3rpc
 * ClusterServer); none (HDR_NONE: Alarm, as etcd 3.4). */
enum { HDR_FULL, HDR_NO_REVISION, HDR_NONE };

/* One unary method: its path, its request and response messages, how the
 * request becomes a libketch call (submit; call0 where there is nothing to
 * pass), how a result fills the response past its header (fill; NULL: the
 * header alone). */
static const struct method {
  const char *path;
  const ProtobufCMessageDescriptor *req, *resp;
  int (*submit)(struct req *q, const void *pb);
  int (*call0)(ketch_client *kc, ketch_cb cb, void *arg);
  bool (*fill)(struct arena *a, void *o, const ketch_result *res);
  int header; /* HDR_* */
  bool write; /* held to --max-request-bytes before it is decoded, as etcd
               * holds what it proposes (reads only to the gRPC receive
               * limit, that + 512 KiB: bridge_main.c) */
} unary[] = {
#define RPC(svc_method, request, response)                                                         \
  .path = "/etcdserverpb." svc_method, .req = PB(request), .resp = PB(response)
    /* first: a Range is looked up in the cache before anything else */
    {RPC("KV/Range", range_request, range_response), .submit = submit_range, .fill = fill_range},
    {RPC("KV/Put", put_request, put_response), .submit = submit_put, .fill = fill_put,
     .write = true},
    {RPC("KV/DeleteRange", delete_range_request, delete_range_response), .submit = submit_delete,
     .fill = fill_delete, .write = true},
    {RPC("KV/Txn", txn_request, txn_response), .submit = submit_txn, .fill = fill_txn},
    {RPC("KV/Compact", compaction_request, compaction_response), .submit = submit_compact},
    {RPC("Lease/LeaseGrant", lease_grant_request, lease_grant_response),
     .submit = submit_lease_grant, .fill = fill_lease_grant},
    {RPC("Lease/LeaseRevoke", lease_revoke_request, lease_revoke_response),
     .submit = submit_lease_revoke},
    {RPC("Lease/LeaseTimeToLive", lease_time_to_live_request, lease_time_to_live_response),
     .submit = submit_lease_ttl, .fill = fill_ttl},
    {RPC("Lease/LeaseLeases", lease_leases_request, lease_leases_response),
     .call0 = ketch_lease_leases_async, .fill = fill_leases},
    {RPC("Cluster/MemberList", member_list_request, member_list_response),
     .call0 = ketch_member_list_async, .fill = fill_members},
    {RPC("Cluster/MemberAdd", member_add_request, member_add_response), .submit = submit_member_add,
     .fill = fill_member_add, .header = HDR_NO_REVISION},
    {RPC("Cluster/MemberRemove", member_remove_request, member_remove_response),
     .submit = submit_member_remove, .fill = fill_members, .header = HDR_NO_REVISION},
    {RPC("Cluster/MemberUpdate", member_update_request, member_update_response),
     .submit = submit_member_update, .fill = fill_members, .header = HDR_NO_REVISION},
    {RPC("Cluster/MemberPromote", member_promote_request, member_promote_response),
     .submit = submit_member_promote, .fill = fill_members, .header = HDR_NO_REVISION},
    {RPC("Maintenance/Status", status_request, status_response), .call0 = ketch_status_async,
     .fill = fill_status},
    {RPC("Maintenance/MoveLeader", move_leader_request, move_leader_response),
     .submit = submit_move_leader},
    {RPC("Maintenance/Alarm", alarm_request, alarm_response), .submit = submit_alarm,
     .fill = fill_alarm, .header = HDR_NONE},
    {RPC("Maintenance/Defragment", defragment_request, defragment_response),
     .call0 = ketch_defragment_async},
    {RPC("Maintenance/Hash", hash_request, hash_response), .submit = submit_hash,
     .fill = fill_hash},
    {RPC("Maintenance/HashKV", hash_kvrequest, hash_kvresponse), .submit = submit_hash_kv,
     .fill = fill_hash_kv},
#undef RPC
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
static const char *const etcd_services[] = {
    "etcdserverpb.KV",          "etcdserverpb.Watch", "etcdserverpb.Lease", "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance", "etcdserverpb.Auth",  "v3lockpb.Lock",      "v3electionpb.Election",
};

static const struct method *find_method(const char *path) {
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
    if (strcmp(path, unary[i].path) == 0)
      return &unary[i];
  return NULL;
}

int kt_bridge_method(const char *path, char *msg, size_t msg_len) {
  if (find_method(path) || kt_bridge_auth_method(path) >= 0)
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

void kt_bridge_fail(kt_bridge_done done, void *arg, int err, const char *detail) {
  int st;
  const char *m = kt_bridge_error(err, detail, &st);
  done(arg, st, m, NULL, 0);
}

static void on_result(void *arg, int err, const ketch_result *res) {
  struct call c = *(struct call *)arg;
  free(arg);
  ketch_result gone;
  if (err == KETCH_ELEASENOTFOUND && c.m->fill == fill_ttl && ketch_cluster_id(c.kc)) {
    /* etcd answers a time-to-live of an unknown lease with TTL -1. */
    gone = (ketch_result){
        .header = {.cluster_id = ketch_cluster_id(c.kc), .member_id = ketch_member_id(c.kc)},
        .lease = {.id = c.id, .ttl = -1}};
    res = &gone;
    err = 0;
  }
  if (err) {
    if (c.fill)
      kt_bridge_cache_fill_failed(c.fill, err);
    kt_bridge_fail(c.done, c.arg, err, res->message);
    return;
  }
  struct arena a = {0};
  ketch_header kh = res->header;
  if (c.m->header == HDR_NO_REVISION)
    kh.revision = 0;
  Etcdserverpb__ResponseHeader *h = c.m->header == HDR_NONE ? NULL : mk_header(&a, &kh);
  void *o = mk_msg(&a, c.m->resp, h);
  const ProtobufCMessage *m = o && (!c.m->fill || c.m->fill(&a, o, res)) ? o : NULL;
  uint8_t *framed = NULL;
  size_t framed_len = 0;
  if (c.fill && (!m || a.oom))
    kt_bridge_cache_fill_failed(c.fill, 0);
  else if (c.fill)
    framed = kt_bridge_cache_fill(c.fill, &res->header, (void *)m, &framed_len);
  if (!m || a.oom)
    c.done(c.arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
  else if (framed)
    c.done(c.arg, KT_GRPC_OK, "", framed, framed_len);
  else
    kt_bridge_finish(c.done, c.arg, m);
  ar_free(&a);
}

void kt_bridge_call(ketch_client *kc, const char *path, const uint8_t *msg, size_t len,
                    size_t max_request_bytes, kt_bridge_done done, void *arg) {
  if (!strcmp(path, unary[0].path) && kt_bridge_cache_get(kc, msg, len, done, arg))
    return;                               /* a cache hit: answered without the member */
  if (kt_bridge_auth_method(path) >= 0) { /* Authenticate: bridge_main.c's */
    if (kt_bridge_auth_method(path) != KETCH_OP_AUTH_STATUS)
      kt_bridge_cache_clear(); /* what the default handle may read may change */
    kt_bridge_auth_call(kc, kt_bridge_auth_method(path), msg, len, done, arg);
    return;
  }
  const struct method *m = find_method(path);
  if (!m) {
    char e[256] = "";
    kt_bridge_method(path, e, sizeof e);
    done(arg, KT_GRPC_UNIMPLEMENTED, e, NULL, 0);
    return;
  }
  if (m->write && len > max_request_bytes) {
    kt_bridge_fail(done, arg, KETCH_ETOOLARGE, NULL);
    return;
  }
  struct call *c = malloc(sizeof *c);
  if (!c) {
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  *c = (struct call){.m = m, .kc = kc, .done = done, .arg = arg};
  struct req q = {.kc = kc, .c = c, .msg = msg, .len = len, .max_request_bytes = max_request_bytes};
  ProtobufCMessage *r = protobuf_c_message_unpack(m->req, NULL, len, msg);
  int err = !r ? 0 : m->submit ? m->submit(&q, r) : m->call0(kc, on_result, c);
  /* libketch encoded the request when it was submitted */
  ar_free(&q.cv.a);
  if (!r) {
    free(c);
    done(arg, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf", NULL, 0);
    return;
  }
  protobuf_c_message_free_unpacked(r, NULL);
  if (err) {
    const char *detail = q.cv.detail;
    kt_bridge_cache_fill_failed(c->fill, 0);
    free(c);
    if (detail && strncmp(detail, "etcdserver: ", 12) == 0)
      done(arg, KT_GRPC_INVALID_ARGUMENT, detail, NULL, 0);
    else
      kt_bridge_fail(done, arg, err, detail);
  }
}
