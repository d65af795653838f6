/* tools/grpc-bridge/bridge_ns.c — --namespace PREFIX: every key a client
 * sends is prefixed, every key it gets back has the prefix stripped, so a
 * tenant sees only its own part of the cluster's key space (etcd's
 * `grpc-proxy start --namespace`, extended to lock, election and auth).
 *
 * It works on the gRPC messages themselves, in front of the rest of the
 * bridge: bridge_main.c hands each request message (unary and streaming)
 * to kt_bridge_ns_request before decoding it, and each framed response
 * message to kt_bridge_ns_response before queueing it. A method without
 * keys passes through untouched (no copy).
 *
 * Key rules (etcd's clientv3/namespace prefixInterval):
 *   key K               -> PFX+K
 *   range end "\0"      -> prefix end of PFX (from-key clamped to the
 *                          namespace; "\0" when PFX is all 0xff)
 *   range end E (other) -> PFX+E (never beyond the namespace: PFX+anything
 *                          sorts before PFX's prefix end)
 *   empty key and no range end: left empty, so the member answers "key is
 *   not provided" as it does without a namespace.
 * Responses: keys that start with PFX lose it; a key outside the namespace
 * (a lease's keys attached by another tenant, a role's permission granted
 * outside) is left out, as etcd's namespace does for lease keys. A range
 * end equal to PFX's prefix end comes back as "\0".
 *
 * Which messages carry keys: KV Range/Put/DeleteRange/Txn (compares, ops,
 * nested txns, prev_kv), Watch (create key and range end; events' kv and
 * prev_kv), LeaseTimeToLive's keys, v3lock Lock name / Unlock key / the
 * returned key, v3election names, leader keys and leader kvs, and Auth
 * RoleGrantPermission / RoleRevokePermission / RoleGet permission keys.
 * Every input is unpacked by protobuf-c (bounds-checked); fuzzed by
 * test/fuzz/grpc_ns_fuzz.c. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bridge.h"
#include "auth.pb-c.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

struct ns {
  const uint8_t *p;
  size_t n;
  bool oom;
};

/* b := PFX + b (b's data is protobuf-c's malloc'd copy, freed with it). */
static void ns_add(struct ns *ns, ProtobufCBinaryData *b) {
  uint8_t *d = malloc(ns->n + b->len);
  if (!d) {
    ns->oom = true;
    return;
  }
  memcpy(d, ns->p, ns->n);
  if (b->len)
    memcpy(d + ns->n, b->data, b->len);
  free(b->data);
  b->data = d;
  b->len += ns->n;
}

/* b := PFX's prefix end ("\0" when there is none). */
static void ns_end(struct ns *ns, ProtobufCBinaryData *b) {
  uint8_t *d = malloc(ns->n ? ns->n : 1);
  if (!d) {
    ns->oom = true;
    return;
  }
  size_t len = ns->n;
  memcpy(d, ns->p, ns->n);
  while (len > 0 && d[len - 1] == 0xff)
    len--;
  if (len == 0) {
    d[0] = 0;
    len = 1;
  } else {
    d[len - 1]++;
  }
  free(b->data);
  b->data = d;
  b->len = len;
}

static bool is_nul(const ProtobufCBinaryData *b) { return b->len == 1 && b->data[0] == 0; }

/* An interval of a request: key and optional range end. */
static void ns_interval(struct ns *ns, ProtobufCBinaryData *key, ProtobufCBinaryData *end) {
  if (key->len == 0 && (!end || end->len == 0))
    return;
  ns_add(ns, key);
  if (!end || end->len == 0)
    return;
  if (is_nul(end))
    ns_end(ns, end);
  else
    ns_add(ns, end);
}

/* Strips PFX from a response key: false when the key is outside. */
static bool ns_strip(const struct ns *ns, ProtobufCBinaryData *b) {
  if (b->len < ns->n || (ns->n && memcmp(b->data, ns->p, ns->n) != 0))
    return false;
  if (b->len > ns->n)
    memmove(b->data, b->data + ns->n, b->len - ns->n);
  b->len -= ns->n;
  return true;
}

static bool ns_strip_kv(const struct ns *ns, Mvccpb__KeyValue *kv) {
  return !kv || ns_strip(ns, &kv->key);
}

/* Strips every kv of a list, leaving out those outside the namespace. */
static void ns_strip_kvs(const struct ns *ns, Mvccpb__KeyValue **kvs, size_t *n) {
  size_t j = 0;
  for (size_t i = 0; i < *n; i++) {
    if (ns_strip_kv(ns, kvs[i]))
      kvs[j++] = kvs[i];
    else
      protobuf_c_message_free_unpacked(&kvs[i]->base, NULL);
  }
  *n = j;
}

static void ns_strip_one(const struct ns *ns, Mvccpb__KeyValue **kv) {
  if (*kv && !ns_strip_kv(ns, *kv)) {
    protobuf_c_message_free_unpacked(&(*kv)->base, NULL);
    *kv = NULL;
  }
}

/* ---- requests ---- */

static void rq_range(struct ns *ns, void *m) {
  Etcdserverpb__RangeRequest *r = m;
  ns_interval(ns, &r->key, &r->range_end);
}
static void rq_put(struct ns *ns, void *m) {
  Etcdserverpb__PutRequest *r = m;
  ns_interval(ns, &r->key, NULL);
}
static void rq_delete(struct ns *ns, void *m) {
  Etcdserverpb__DeleteRangeRequest *r = m;
  ns_interval(ns, &r->key, &r->range_end);
}
static void rq_ops(struct ns *ns, Etcdserverpb__RequestOp **ops, size_t n, int depth);
static void rq_txn_depth(struct ns *ns, Etcdserverpb__TxnRequest *r, int depth) {
  for (size_t i = 0; i < r->n_compare; i++)
    ns_interval(ns, &r->compare[i]->key, &r->compare[i]->range_end);
  rq_ops(ns, r->success, r->n_success, depth);
  rq_ops(ns, r->failure, r->n_failure, depth);
}
static void rq_ops(struct ns *ns, Etcdserverpb__RequestOp **ops, size_t n, int depth) {
  if (depth > 64) /* protobuf-c's own recursion bound is far below; a guard */
    return;
  for (size_t i = 0; i < n; i++) {
    Etcdserverpb__RequestOp *op = ops[i];
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
      rq_range(ns, op->request_range);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
      rq_put(ns, op->request_put);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
      rq_delete(ns, op->request_delete_range);
      break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
      rq_txn_depth(ns, op->request_txn, depth + 1);
      break;
    default:
      break;
    }
  }
}
static void rq_txn(struct ns *ns, void *m) { rq_txn_depth(ns, m, 0); }
static void rq_watch(struct ns *ns, void *m) {
  Etcdserverpb__WatchRequest *r = m;
  if (r->request_union_case == ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST) {
    Etcdserverpb__WatchCreateRequest *c = r->create_request;
    /* a watch of "" alone is a watch of the key PFX: still inside */
    if (c->key.len == 0 && c->range_end.len == 0)
      ns_add(ns, &c->key);
    else
      ns_interval(ns, &c->key, &c->range_end);
  }
}
static void rq_lock(struct ns *ns, void *m) {
  V3lockpb__LockRequest *r = m;
  ns_add(ns, &r->name);
}
static void rq_unlock(struct ns *ns, void *m) {
  V3lockpb__UnlockRequest *r = m;
  ns_add(ns, &r->key);
}
static void leader_key_add(struct ns *ns, V3electionpb__LeaderKey *k) {
  if (k) {
    ns_add(ns, &k->name);
    ns_add(ns, &k->key);
  }
}
static void rq_campaign(struct ns *ns, void *m) {
  V3electionpb__CampaignRequest *r = m;
  ns_add(ns, &r->name);
}
static void rq_proclaim(struct ns *ns, void *m) {
  V3electionpb__ProclaimRequest *r = m;
  leader_key_add(ns, r->leader);
}
static void rq_resign(struct ns *ns, void *m) {
  V3electionpb__ResignRequest *r = m;
  leader_key_add(ns, r->leader);
}
static void rq_leader(struct ns *ns, void *m) {
  V3electionpb__LeaderRequest *r = m;
  ns_add(ns, &r->name);
}
static void rq_grant(struct ns *ns, void *m) {
  Etcdserverpb__AuthRoleGrantPermissionRequest *r = m;
  if (r->perm)
    ns_interval(ns, &r->perm->key, &r->perm->range_end);
}
static void rq_revoke(struct ns *ns, void *m) {
  Etcdserverpb__AuthRoleRevokePermissionRequest *r = m;
  ns_interval(ns, &r->key, &r->range_end);
}

/* ---- responses ---- */

static void rs_range(struct ns *ns, void *m) {
  Etcdserverpb__RangeResponse *r = m;
  ns_strip_kvs(ns, r->kvs, &r->n_kvs);
}
static void rs_put(struct ns *ns, void *m) {
  Etcdserverpb__PutResponse *r = m;
  ns_strip_one(ns, &r->prev_kv);
}
static void rs_delete(struct ns *ns, void *m) {
  Etcdserverpb__DeleteRangeResponse *r = m;
  ns_strip_kvs(ns, r->prev_kvs, &r->n_prev_kvs);
}
static void rs_txn_depth(struct ns *ns, Etcdserverpb__TxnResponse *r, int depth) {
  if (depth > 64)
    return;
  for (size_t i = 0; i < r->n_responses; i++) {
    Etcdserverpb__ResponseOp *op = r->responses[i];
    switch (op->response_case) {
    case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
      rs_range(ns, op->response_range);
      break;
    case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
      rs_put(ns, op->response_put);
      break;
    case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
      rs_delete(ns, op->response_delete_range);
      break;
    case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN:
      rs_txn_depth(ns, op->response_txn, depth + 1);
      break;
    default:
      break;
    }
  }
}
static void rs_txn(struct ns *ns, void *m) { rs_txn_depth(ns, m, 0); }
static void rs_watch(struct ns *ns, void *m) {
  Etcdserverpb__WatchResponse *r = m;
  size_t j = 0;
  for (size_t i = 0; i < r->n_events; i++) {
    Mvccpb__Event *e = r->events[i];
    if (ns_strip_kv(ns, e->kv)) {
      ns_strip_one(ns, &e->prev_kv);
      r->events[j++] = e;
    } else {
      protobuf_c_message_free_unpacked(&e->base, NULL);
    }
  }
  r->n_events = j;
}
static void rs_ttl(struct ns *ns, void *m) {
  Etcdserverpb__LeaseTimeToLiveResponse *r = m;
  size_t j = 0;
  for (size_t i = 0; i < r->n_keys; i++) {
    if (ns_strip(ns, &r->keys[i])) {
      r->keys[j++] = r->keys[i];
    } else {
      free(r->keys[i].data);
    }
  }
  r->n_keys = j;
}
static void rs_lock(struct ns *ns, void *m) {
  V3lockpb__LockResponse *r = m;
  ns_strip(ns, &r->key);
}
static void rs_campaign(struct ns *ns, void *m) {
  V3electionpb__CampaignResponse *r = m;
  if (r->leader) {
    ns_strip(ns, &r->leader->name);
    ns_strip(ns, &r->leader->key);
  }
}
static void rs_leader(struct ns *ns, void *m) {
  V3electionpb__LeaderResponse *r = m;
  ns_strip_one(ns, &r->kv);
}
static void rs_role_get(struct ns *ns, void *m) {
  Etcdserverpb__AuthRoleGetResponse *r = m;
  size_t j = 0;
  ProtobufCBinaryData pend = {0, NULL};
  ns_end(ns, &pend);
  for (size_t i = 0; i < r->n_perm; i++) {
    Authpb__Permission *p = r->perm[i];
    bool from_key = pend.data && p->range_end.len == pend.len &&
                    memcmp(p->range_end.data, pend.data, pend.len) == 0;
    if (ns_strip(ns, &p->key) &&
        (p->range_end.len == 0 || from_key || ns_strip(ns, &p->range_end))) {
      if (from_key) {
        p->range_end.data[0] = 0;
        p->range_end.len = 1;
      }
      r->perm[j++] = p;
    } else {
      protobuf_c_message_free_unpacked(&p->base, NULL);
    }
  }
  r->n_perm = j;
  free(pend.data);
}

static const struct {
  const char *path;
  const ProtobufCMessageDescriptor *rq, *rs;
  void (*req)(struct ns *, void *);
  void (*resp)(struct ns *, void *);
} methods[] = {
    {"/etcdserverpb.KV/Range", &etcdserverpb__range_request__descriptor,
     &etcdserverpb__range_response__descriptor, rq_range, rs_range},
    {"/etcdserverpb.KV/Put", &etcdserverpb__put_request__descriptor,
     &etcdserverpb__put_response__descriptor, rq_put, rs_put},
    {"/etcdserverpb.KV/DeleteRange", &etcdserverpb__delete_range_request__descriptor,
     &etcdserverpb__delete_range_response__descriptor, rq_delete, rs_delete},
    {"/etcdserverpb.KV/Txn", &etcdserverpb__txn_request__descriptor,
     &etcdserverpb__txn_response__descriptor, rq_txn, rs_txn},
    {"/etcdserverpb.Watch/Watch", &etcdserverpb__watch_request__descriptor,
     &etcdserverpb__watch_response__descriptor, rq_watch, rs_watch},
    {"/etcdserverpb.Lease/LeaseTimeToLive", NULL,
     &etcdserverpb__lease_time_to_live_response__descriptor, NULL, rs_ttl},
    {"/v3lockpb.Lock/Lock", &v3lockpb__lock_request__descriptor,
     &v3lockpb__lock_response__descriptor, rq_lock, rs_lock},
    {"/v3lockpb.Lock/Unlock", &v3lockpb__unlock_request__descriptor, NULL, rq_unlock, NULL},
    {"/v3electionpb.Election/Campaign", &v3electionpb__campaign_request__descriptor,
     &v3electionpb__campaign_response__descriptor, rq_campaign, rs_campaign},
    {"/v3electionpb.Election/Proclaim", &v3electionpb__proclaim_request__descriptor, NULL,
     rq_proclaim, NULL},
    {"/v3electionpb.Election/Leader", &v3electionpb__leader_request__descriptor,
     &v3electionpb__leader_response__descriptor, rq_leader, rs_leader},
    {"/v3electionpb.Election/Observe", &v3electionpb__leader_request__descriptor,
     &v3electionpb__leader_response__descriptor, rq_leader, rs_leader},
    {"/v3electionpb.Election/Resign", &v3electionpb__resign_request__descriptor, NULL, rq_resign,
     NULL},
    {"/etcdserverpb.Auth/RoleGrantPermission",
     &etcdserverpb__auth_role_grant_permission_request__descriptor, NULL, rq_grant, NULL},
    {"/etcdserverpb.Auth/RoleRevokePermission",
     &etcdserverpb__auth_role_revoke_permission_request__descriptor, NULL, rq_revoke, NULL},
    {"/etcdserverpb.Auth/RoleGet", NULL, &etcdserverpb__auth_role_get_response__descriptor, NULL,
     rs_role_get},
};

static int find(const char *path) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (!strcmp(methods[i].path, path))
      return (int)i;
  return -1;
}

bool kt_bridge_ns_refused(const char *path) {
  return !strcmp(path, "/etcdserverpb.Maintenance/Snapshot");
}

int kt_bridge_ns_request(const char *pfx, size_t pfx_len, const char *path, const uint8_t *msg,
                         size_t len, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  int i = find(path);
  if (i < 0 || !methods[i].req)
    return 0;
  ProtobufCMessage *m = protobuf_c_message_unpack(methods[i].rq, NULL, len, msg);
  if (!m)
    return -1;
  struct ns ns = {(const uint8_t *)pfx, pfx_len, false};
  methods[i].req(&ns, m);
  int rc = -2;
  if (!ns.oom) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf) {
      protobuf_c_message_pack(m, buf);
      *out = buf;
      *out_len = n;
      rc = 0;
    }
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return rc;
}

int kt_bridge_ns_response(const char *pfx, size_t pfx_len, const char *path, const uint8_t *framed,
                          size_t len, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  int i = find(path);
  if (i < 0 || !methods[i].resp)
    return 0;
  if (len < 5 || framed[0] != 0)
    return -1;
  ProtobufCMessage *m = protobuf_c_message_unpack(methods[i].rs, NULL, len - 5, framed + 5);
  if (!m)
    return -1;
  struct ns ns = {(const uint8_t *)pfx, pfx_len, false};
  methods[i].resp(&ns, m);
  uint8_t *buf = ns.oom ? NULL : kt_bridge_frame(m, out_len);
  protobuf_c_message_free_unpacked(m, NULL);
  if (!buf)
    return -1;
  *out = buf;
  return 1;
}
