/* test/unit/proto_test.c — the native protocol codec (net/proto.c). */
#include "../../net/proto.h"
#include "test.h"

#include <msgpack.h>
#include <stdlib.h>

#define B(s) ((struct kt_bytes){(const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)})

/* ---- structural equality ---- */

static bool beq(struct kt_bytes a, struct kt_bytes b) {
  return a.n == b.n && (!a.n || memcmp(a.p, b.p, a.n) == 0);
}

static bool op_eq(const struct kt_request_op *a, const struct kt_request_op *b);

static bool ops_eq(const struct kt_request_op *a, const struct kt_request_op *b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!op_eq(&a[i], &b[i]))
      return false;
  return true;
}

static bool op_eq(const struct kt_request_op *a, const struct kt_request_op *b) {
  if (a->type != b->type)
    return false;
  switch (a->type) {
  case KT_OP_RANGE: {
    const struct kt_range_req *x = &a->u.range, *y = &b->u.range;
    return beq(x->key, y->key) && beq(x->range_end, y->range_end) && x->limit == y->limit &&
           x->revision == y->revision && x->sort_order == y->sort_order &&
           x->sort_target == y->sort_target && x->serializable == y->serializable &&
           x->keys_only == y->keys_only && x->count_only == y->count_only &&
           x->min_mod_revision == y->min_mod_revision &&
           x->max_mod_revision == y->max_mod_revision &&
           x->min_create_revision == y->min_create_revision &&
           x->max_create_revision == y->max_create_revision;
  }
  case KT_OP_PUT: {
    const struct kt_put_req *x = &a->u.put, *y = &b->u.put;
    return beq(x->key, y->key) && beq(x->value, y->value) && x->lease == y->lease &&
           x->prev_kv == y->prev_kv && x->ignore_value == y->ignore_value &&
           x->ignore_lease == y->ignore_lease;
  }
  case KT_OP_DELETE: {
    const struct kt_delete_req *x = &a->u.del, *y = &b->u.del;
    return beq(x->key, y->key) && beq(x->range_end, y->range_end) && x->prev_kv == y->prev_kv;
  }
  case KT_OP_TXN: {
    const struct kt_txn_req *x = &a->u.txn, *y = &b->u.txn;
    if (x->n_compare != y->n_compare || x->n_success != y->n_success ||
        x->n_failure != y->n_failure)
      return false;
    for (uint32_t i = 0; i < x->n_compare; i++) {
      const struct kt_compare *c = &x->compare[i], *d = &y->compare[i];
      if (c->result != d->result || c->target != d->target || !beq(c->key, d->key) ||
          !beq(c->range_end, d->range_end) || c->int_value != d->int_value ||
          !beq(c->value, d->value))
        return false;
    }
    return ops_eq(x->success, y->success, x->n_success) &&
           ops_eq(x->failure, y->failure, x->n_failure);
  }
  }
  return false;
}

static bool req_eq(const struct kt_req *a, const struct kt_req *b) {
  if (a->type != b->type || a->id != b->id)
    return false;
  switch (a->type) {
  case KT_MSG_HELLO:
    return a->u.hello.version == b->u.hello.version && beq(a->u.hello.client, b->u.hello.client);
  case KT_MSG_COMPACT:
    return a->u.compact.revision == b->u.compact.revision &&
           a->u.compact.physical == b->u.compact.physical;
  case KT_MSG_STATUS:
  case KT_MSG_MEMBER_LIST:
  case KT_MSG_WATCH_PROGRESS:
    return true;
  case KT_MSG_MOVE_LEADER:
    return a->u.move_leader.target_id == b->u.move_leader.target_id;
  case KT_MSG_WATCH_CREATE: {
    const struct kt_watch_create_req *x = &a->u.watch_create, *y = &b->u.watch_create;
    return beq(x->key, y->key) && beq(x->range_end, y->range_end) &&
           x->start_revision == y->start_revision && x->prev_kv == y->prev_kv &&
           x->no_put == y->no_put && x->no_delete == y->no_delete &&
           x->progress_notify == y->progress_notify && x->fragment == y->fragment;
  }
  case KT_MSG_WATCH_CANCEL:
    return a->u.watch_cancel.watch_id == b->u.watch_cancel.watch_id;
  case KT_MSG_LEASE_GRANT:
  case KT_MSG_LEASE_REVOKE:
  case KT_MSG_LEASE_KEEPALIVE:
  case KT_MSG_LEASE_TTL:
  case KT_MSG_LEASE_LEASES:
    return a->u.lease.id == b->u.lease.id && a->u.lease.ttl == b->u.lease.ttl &&
           a->u.lease.keys == b->u.lease.keys;
  case KT_MSG_MEMBER_ADD:
  case KT_MSG_MEMBER_REMOVE:
  case KT_MSG_MEMBER_UPDATE:
  case KT_MSG_MEMBER_PROMOTE: {
    const struct kt_member_change_req *x = &a->u.member, *y = &b->u.member;
    if (x->id != y->id || !beq(x->name, y->name) || x->is_learner != y->is_learner ||
        x->n_peer_urls != y->n_peer_urls)
      return false;
    for (uint32_t i = 0; i < x->n_peer_urls; i++)
      if (!beq(x->peer_urls[i], y->peer_urls[i]))
        return false;
    return true;
  }
  case KT_MSG_MEMBER_PUBLISH: {
    const struct kt_member_publish_req *x = &a->u.publish, *y = &b->u.publish;
    if (x->member_id != y->member_id || !beq(x->name, y->name) ||
        x->n_client_urls != y->n_client_urls)
      return false;
    for (uint32_t i = 0; i < x->n_client_urls; i++)
      if (!beq(x->client_urls[i], y->client_urls[i]))
        return false;
    return true;
  }
  default:
    return op_eq(&a->u.op, &b->u.op);
  }
}

static bool members_eq(const struct kt_member_info *x, uint32_t nx, const struct kt_member_info *y,
                       uint32_t ny) {
  if (nx != ny)
    return false;
  for (uint32_t i = 0; i < nx; i++) {
    const struct kt_member_info *m = &x[i], *k = &y[i];
    if (m->id != k->id || !beq(m->name, k->name) || m->is_learner != k->is_learner ||
        m->n_peer_urls != k->n_peer_urls || m->n_client_urls != k->n_client_urls)
      return false;
    for (uint32_t j = 0; j < m->n_peer_urls; j++)
      if (!beq(m->peer_urls[j], k->peer_urls[j]))
        return false;
    for (uint32_t j = 0; j < m->n_client_urls; j++)
      if (!beq(m->client_urls[j], k->client_urls[j]))
        return false;
  }
  return true;
}

static bool kv_eq(const struct kt_kv *a, const struct kt_kv *b) {
  return beq(a->key, b->key) && beq(a->value, b->value) &&
         a->create_revision == b->create_revision && a->mod_revision == b->mod_revision &&
         a->version == b->version && a->lease == b->lease;
}
static bool kvs_eq(const struct kt_kv *a, const struct kt_kv *b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!kv_eq(&a[i], &b[i]))
      return false;
  return true;
}

static bool rop_eq(const struct kt_response_op *a, const struct kt_response_op *b) {
  if (a->type != b->type)
    return false;
  switch (a->type) {
  case KT_OP_RANGE:
    return a->u.range.n_kvs == b->u.range.n_kvs &&
           kvs_eq(a->u.range.kvs, b->u.range.kvs, a->u.range.n_kvs) &&
           a->u.range.more == b->u.range.more && a->u.range.count == b->u.range.count;
  case KT_OP_PUT:
    return a->u.put.has_prev_kv == b->u.put.has_prev_kv &&
           (!a->u.put.has_prev_kv || kv_eq(&a->u.put.prev_kv, &b->u.put.prev_kv));
  case KT_OP_DELETE:
    return a->u.del.deleted == b->u.del.deleted && a->u.del.n_prev_kvs == b->u.del.n_prev_kvs &&
           kvs_eq(a->u.del.prev_kvs, b->u.del.prev_kvs, a->u.del.n_prev_kvs);
  case KT_OP_TXN:
    if (a->u.txn.succeeded != b->u.txn.succeeded || a->u.txn.n_responses != b->u.txn.n_responses)
      return false;
    for (uint32_t i = 0; i < a->u.txn.n_responses; i++)
      if (!rop_eq(&a->u.txn.responses[i], &b->u.txn.responses[i]))
        return false;
    return true;
  }
  return false;
}

static bool resp_eq(const struct kt_resp *a, const struct kt_resp *b) {
  if (a->type != b->type || a->id != b->id)
    return false;
  if (a->type != KT_MSG_HELLO && a->type != KT_MSG_ERROR &&
      memcmp(&a->header, &b->header, sizeof a->header) != 0)
    return false;
  switch (a->type) {
  case KT_MSG_HELLO: {
    const struct kt_hello_resp *x = &a->u.hello, *y = &b->u.hello;
    return x->version == y->version && beq(x->server, y->server) &&
           x->cluster_id == y->cluster_id && x->member_id == y->member_id &&
           x->max_request_bytes == y->max_request_bytes;
  }
  case KT_MSG_COMPACT:
    return true;
  case KT_MSG_STATUS: {
    const struct kt_status_resp *x = &a->u.status, *y = &b->u.status;
    if (!beq(x->version, y->version) || x->db_size != y->db_size ||
        x->db_size_in_use != y->db_size_in_use || x->leader != y->leader ||
        x->raft_index != y->raft_index || x->raft_term != y->raft_term ||
        x->raft_applied_index != y->raft_applied_index || x->is_learner != y->is_learner ||
        x->n_errors != y->n_errors)
      return false;
    for (uint32_t i = 0; i < x->n_errors; i++)
      if (!beq(x->errors[i], y->errors[i]))
        return false;
    return true;
  }
  case KT_MSG_ERROR:
    return a->u.error.code == b->u.error.code && beq(a->u.error.message, b->u.error.message);
  case KT_MSG_MOVE_LEADER:
  case KT_MSG_WATCH_CANCEL:
  case KT_MSG_WATCH_PROGRESS:
    return true;
  case KT_MSG_WATCH_CREATE: {
    const struct kt_watch_resp *x = &a->u.watch, *y = &b->u.watch;
    if (x->watch_id != y->watch_id || x->created != y->created || x->canceled != y->canceled ||
        x->fragment != y->fragment || x->compact_revision != y->compact_revision ||
        !beq(x->cancel_reason, y->cancel_reason) || x->n_events != y->n_events)
      return false;
    for (uint32_t i = 0; i < x->n_events; i++) {
      const struct kt_event *m = &x->events[i], *k = &y->events[i];
      if (m->type != k->type || !kv_eq(&m->kv, &k->kv) || m->has_prev_kv != k->has_prev_kv ||
          (m->has_prev_kv && !kv_eq(&m->prev_kv, &k->prev_kv)))
        return false;
    }
    return true;
  }
  case KT_MSG_LEASE_GRANT:
  case KT_MSG_LEASE_REVOKE:
  case KT_MSG_LEASE_KEEPALIVE:
  case KT_MSG_LEASE_TTL:
  case KT_MSG_LEASE_LEASES: {
    const struct kt_lease_resp *x = &a->u.lease, *y = &b->u.lease;
    if (x->id != y->id || x->ttl != y->ttl || x->granted_ttl != y->granted_ttl ||
        x->n_keys != y->n_keys || x->n_leases != y->n_leases)
      return false;
    for (uint32_t i = 0; i < x->n_keys; i++)
      if (!beq(x->keys[i], y->keys[i]))
        return false;
    for (uint32_t i = 0; i < x->n_leases; i++)
      if (x->leases[i] != y->leases[i])
        return false;
    return true;
  }
  case KT_MSG_MEMBER_LIST:
    return members_eq(a->u.member_list.members, a->u.member_list.n_members,
                      b->u.member_list.members, b->u.member_list.n_members);
  case KT_MSG_MEMBER_ADD:
  case KT_MSG_MEMBER_REMOVE:
  case KT_MSG_MEMBER_UPDATE:
  case KT_MSG_MEMBER_PROMOTE:
    return members_eq(&a->u.member.member, 1, &b->u.member.member, 1) &&
           members_eq(a->u.member.members, a->u.member.n_members, b->u.member.members,
                      b->u.member.n_members);
  default:
    return rop_eq(&a->u.op, &b->u.op);
  }
}

/* ---- round-trip helpers ---- */

static struct kt_arena arena;

/* Encode as a frame, split it, decode, compare; re-encode and compare bytes. */
static bool rt_req(const struct kt_req *in) {
  struct kt_buf f = {0}, g = {0};
  kt_proto_encode_req(&f, in);
  const uint8_t *body;
  uint32_t blen;
  size_t used;
  bool ok =
      kt_frame_next(f.p, f.len, KT_MAX_FRAME_BYTES, &body, &blen, &used) == 1 && used == f.len;
  struct kt_req out;
  struct kt_err e;
  if (ok && kt_proto_decode_req(body, blen, &arena, &out, &e) != 0) {
    fprintf(stderr, "decode: %s\n", e.msg);
    ok = false;
  }
  ok = ok && req_eq(in, &out);
  if (ok) {
    kt_proto_encode_req(&g, &out);
    ok = g.len == f.len && memcmp(g.p, f.p, f.len) == 0;
  }
  kt_buf_free(&f);
  kt_buf_free(&g);
  return ok;
}

static bool rt_resp(const struct kt_resp *in) {
  struct kt_buf f = {0}, g = {0};
  kt_proto_encode_resp(&f, in);
  const uint8_t *body;
  uint32_t blen;
  size_t used;
  bool ok =
      kt_frame_next(f.p, f.len, KT_MAX_FRAME_BYTES, &body, &blen, &used) == 1 && used == f.len;
  struct kt_resp out;
  struct kt_err e;
  if (ok && kt_proto_decode_resp(body, blen, &arena, &out, &e) != 0) {
    fprintf(stderr, "decode: %s\n", e.msg);
    ok = false;
  }
  ok = ok && resp_eq(in, &out);
  if (ok) {
    kt_proto_encode_resp(&g, &out);
    ok = g.len == f.len && memcmp(g.p, f.p, f.len) == 0;
  }
  kt_buf_free(&f);
  kt_buf_free(&g);
  return ok;
}

/* ---- fixtures ---- */

static struct kt_request_op full_range(void) {
  struct kt_request_op op = {.type = KT_OP_RANGE};
  op.u.range = (struct kt_range_req){.key = B("a"),
                                     .range_end = B("z"),
                                     .limit = 10,
                                     .revision = 1LL << 40,
                                     .sort_order = KT_SORT_DESCEND,
                                     .sort_target = KT_SORT_VALUE,
                                     .serializable = true,
                                     .keys_only = true,
                                     .count_only = true,
                                     .min_mod_revision = 2,
                                     .max_mod_revision = 300,
                                     .min_create_revision = 4,
                                     .max_create_revision = 70000};
  return op;
}
static struct kt_request_op full_put(void) {
  struct kt_request_op op = {.type = KT_OP_PUT};
  op.u.put = (struct kt_put_req){.key = B("foo"),
                                 .value = B("bar\0baz"),
                                 .lease = 0x1234567890ll,
                                 .prev_kv = true,
                                 .ignore_value = true,
                                 .ignore_lease = true};
  return op;
}
static struct kt_request_op full_delete(void) {
  struct kt_request_op op = {.type = KT_OP_DELETE};
  op.u.del = (struct kt_delete_req){.key = B("k"), .range_end = B("\0"), .prev_kv = true};
  return op;
}

static struct kt_compare cmps[5];
static struct kt_request_op succ[4], fail_ops[2];

static struct kt_request_op full_txn(void) {
  for (int t = 0; t <= KT_CMP_LEASE; t++) {
    cmps[t] = (struct kt_compare){.result = (uint8_t)(t % 4),
                                  .target = (uint8_t)t,
                                  .key = B("ck"),
                                  .range_end = t == 2 ? B("cz") : B(""),
                                  .int_value = t == KT_CMP_VALUE ? 0 : -5 - t,
                                  .value = t == KT_CMP_VALUE ? B("v") : B("")};
  }
  succ[0] = full_range();
  succ[1] = full_put();
  succ[2] = full_delete();
  succ[3] = (struct kt_request_op){.type = KT_OP_TXN};
  succ[3].u.txn.success = &fail_ops[0];
  succ[3].u.txn.n_success = 1;
  fail_ops[0] = full_put();
  fail_ops[1] = full_delete();
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn = (struct kt_txn_req){.compare = cmps,
                                 .n_compare = 5,
                                 .success = succ,
                                 .n_success = 4,
                                 .failure = fail_ops,
                                 .n_failure = 2};
  return op;
}

static struct kt_req mkreq(uint8_t type, uint64_t id, struct kt_request_op op) {
  struct kt_req r = {.type = type, .id = id};
  r.u.op = op;
  return r;
}

/* ---- round trips ---- */

TEST(requests_round_trip_all_fields) {
  struct kt_req r = {.type = KT_MSG_HELLO, .id = 1};
  r.u.hello = (struct kt_hello_req){.version = 1, .client = B("libketch/0.1.0")};
  CHECK(rt_req(&r));
  r = mkreq(KT_MSG_RANGE, 2, full_range());
  CHECK(rt_req(&r));
  r = mkreq(KT_MSG_PUT, UINT64_MAX, full_put());
  CHECK(rt_req(&r));
  r = mkreq(KT_MSG_DELETE, 4, full_delete());
  CHECK(rt_req(&r));
  r = mkreq(KT_MSG_TXN, 5, full_txn());
  CHECK(rt_req(&r));
  r = (struct kt_req){.type = KT_MSG_COMPACT, .id = 6};
  r.u.compact = (struct kt_compact_req){.revision = 99, .physical = true};
  CHECK(rt_req(&r));
  r = (struct kt_req){.type = KT_MSG_STATUS, .id = 7};
  CHECK(rt_req(&r));
  kt_arena_reset(&arena);
}

TEST(requests_round_trip_no_fields) {
  for (uint8_t t = KT_MSG_HELLO; t <= KT_MSG_STATUS; t++) {
    struct kt_req r = {.type = t};
    if (t >= KT_MSG_RANGE && t <= KT_MSG_TXN)
      r.u.op.type = t;
    CHECK(rt_req(&r));
    /* the smallest body: [type, 0, {}] */
    struct kt_buf f = {0};
    kt_proto_encode_req(&f, &r);
    CHECK_EQ(f.len, 8);
    CHECK_EQ(f.p[3], 4);
    CHECK_EQ(f.p[4], 0x93);
    CHECK_EQ(f.p[7], 0x80);
    kt_buf_free(&f);
  }
  kt_arena_reset(&arena);
}

static struct kt_kv kvs3[3] = {
    {.key = {(const uint8_t *)"a", 1},
     .value = {(const uint8_t *)"1", 1},
     .create_revision = 2,
     .mod_revision = 3,
     .version = 2,
     .lease = 0},
    {.key = {(const uint8_t *)"b", 1},
     .value = {NULL, 0},
     .create_revision = 1LL << 33,
     .mod_revision = (1LL << 33) + 1,
     .version = 1,
     .lease = 77},
    {.key = {(const uint8_t *)"c\xff", 2},
     .value = {(const uint8_t *)"x", 1},
     .create_revision = 5,
     .mod_revision = 5,
     .version = 1,
     .lease = -1},
};

TEST(responses_round_trip_all_fields) {
  struct kt_header h = {
      .cluster_id = 0xdeadbeefcafe, .member_id = 42, .revision = 12345, .raft_term = 7};
  struct kt_resp r = {.type = KT_MSG_HELLO, .id = 1};
  r.u.hello = (struct kt_hello_resp){.version = 1,
                                     .server = B("ketch 0.1.0"),
                                     .cluster_id = 0xdeadbeefcafe,
                                     .member_id = 42,
                                     .max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES};
  CHECK(rt_resp(&r));

  r = (struct kt_resp){.type = KT_MSG_RANGE, .id = 2, .header = h};
  r.u.op.type = KT_OP_RANGE;
  r.u.op.u.range = (struct kt_range_resp){.kvs = kvs3, .n_kvs = 3, .more = true, .count = 9};
  CHECK(rt_resp(&r));

  r = (struct kt_resp){.type = KT_MSG_PUT, .id = 3, .header = h};
  r.u.op.type = KT_OP_PUT;
  r.u.op.u.put = (struct kt_put_resp){.has_prev_kv = true, .prev_kv = kvs3[2]};
  CHECK(rt_resp(&r));
  /* a prev_kv that is all zero is still present */
  r.u.op.u.put = (struct kt_put_resp){.has_prev_kv = true};
  CHECK(rt_resp(&r));

  r = (struct kt_resp){.type = KT_MSG_DELETE, .id = 4, .header = h};
  r.u.op.type = KT_OP_DELETE;
  r.u.op.u.del = (struct kt_delete_resp){.deleted = 3, .prev_kvs = kvs3, .n_prev_kvs = 3};
  CHECK(rt_resp(&r));

  struct kt_response_op inner[4] = {0}, deeper[1] = {0};
  inner[0].type = KT_OP_RANGE;
  inner[0].u.range = (struct kt_range_resp){.kvs = kvs3, .n_kvs = 2, .count = 2};
  inner[1].type = KT_OP_PUT;
  inner[1].u.put.has_prev_kv = true;
  inner[1].u.put.prev_kv = kvs3[0];
  inner[2].type = KT_OP_DELETE;
  inner[2].u.del.deleted = 1;
  inner[3].type = KT_OP_TXN;
  inner[3].u.txn = (struct kt_txn_resp){.succeeded = true, .responses = deeper, .n_responses = 1};
  deeper[0].type = KT_OP_PUT;
  r = (struct kt_resp){.type = KT_MSG_TXN, .id = 5, .header = h};
  r.u.op.type = KT_OP_TXN;
  r.u.op.u.txn = (struct kt_txn_resp){.succeeded = true, .responses = inner, .n_responses = 4};
  CHECK(rt_resp(&r));

  r = (struct kt_resp){.type = KT_MSG_COMPACT, .id = 6, .header = h};
  CHECK(rt_resp(&r));

  struct kt_bytes errs[2] = {B("NOSPACE"), B("CORRUPT")};
  r = (struct kt_resp){.type = KT_MSG_STATUS, .id = 7, .header = h};
  r.u.status = (struct kt_status_resp){.version = B("0.1.0"),
                                       .db_size = 1 << 20,
                                       .db_size_in_use = 1 << 19,
                                       .leader = 42,
                                       .raft_index = 1000,
                                       .raft_term = 7,
                                       .raft_applied_index = 999,
                                       .is_learner = true,
                                       .errors = errs,
                                       .n_errors = 2};
  CHECK(rt_resp(&r));

  r = (struct kt_resp){.type = KT_MSG_ERROR, .id = 8};
  r.u.error = (struct kt_error_msg){.code = KT_ECOMPACTED, .message = B("compacted")};
  CHECK(rt_resp(&r));
  kt_arena_reset(&arena);
}

TEST(responses_round_trip_no_fields) {
  uint8_t types[] = {KT_MSG_HELLO,           KT_MSG_RANGE,        KT_MSG_PUT,
                     KT_MSG_DELETE,          KT_MSG_TXN,          KT_MSG_COMPACT,
                     KT_MSG_STATUS,          KT_MSG_ERROR,        KT_MSG_MEMBER_LIST,
                     KT_MSG_MOVE_LEADER,     KT_MSG_WATCH_CREATE, KT_MSG_WATCH_CANCEL,
                     KT_MSG_WATCH_PROGRESS,  KT_MSG_LEASE_GRANT,  KT_MSG_LEASE_REVOKE,
                     KT_MSG_LEASE_KEEPALIVE, KT_MSG_LEASE_TTL,    KT_MSG_LEASE_LEASES};
  for (size_t i = 0; i < KT_ARRAY_LEN(types); i++) {
    struct kt_resp r = {.type = types[i]};
    if (types[i] >= KT_MSG_RANGE && types[i] <= KT_MSG_TXN)
      r.u.op.type = types[i];
    CHECK(rt_resp(&r));
  }
  kt_arena_reset(&arena);
}

TEST(req_body_for_wal_has_id_zero) {
  struct kt_req r = mkreq(KT_MSG_PUT, 12345, full_put()), out;
  struct kt_buf b = {0};
  kt_proto_encode_req_body(&b, &r);
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_req(b.p, b.len, &arena, &out, &e), 0);
  CHECK_EQ(out.id, 0);
  r.id = 0;
  CHECK(req_eq(&r, &out));
  /* the body of the frame is the same bytes except for the id */
  struct kt_buf f = {0};
  kt_proto_encode_req(&f, &r);
  CHECK_EQ(f.len, b.len + 4);
  CHECK(memcmp(f.p + 4, b.p, b.len) == 0);
  kt_buf_free(&b);
  kt_buf_free(&f);
  kt_arena_reset(&arena);
}

/* ---- nesting and limits ---- */

/* A chain of `depth` nested txns, each holding the next in success. */
static struct kt_request_op chain[KT_MAX_TXN_DEPTH + 2];
static struct kt_request_op make_chain(int depth) {
  for (int i = 0; i < depth; i++) {
    chain[i] = (struct kt_request_op){.type = KT_OP_TXN};
    if (i + 1 < depth) {
      chain[i].u.txn.success = &chain[i + 1];
      chain[i].u.txn.n_success = 1;
    }
  }
  return chain[0];
}

TEST(nested_txns_to_the_limit) {
  struct kt_req r = mkreq(KT_MSG_TXN, 9, make_chain(KT_MAX_TXN_DEPTH));
  CHECK(rt_req(&r));
  r = mkreq(KT_MSG_TXN, 9, make_chain(KT_MAX_TXN_DEPTH + 1));
  struct kt_buf f = {0};
  kt_proto_encode_req(&f, &r);
  struct kt_req out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_req(f.p + 4, f.len - 4, &arena, &out, &e), KT_EINVAL);
  CHECK_EQ(out.id, 9);
  CHECK(strstr(e.msg, "nested deeper than 8") != NULL);
  CHECK(strstr(e.msg, "txn.success[0].success[0]") != NULL);
  kt_buf_free(&f);
  kt_arena_reset(&arena);
}

TEST(too_many_ops) {
  static struct kt_request_op ops[KT_MAX_TXN_OPS + 1];
  static struct kt_compare cs[KT_MAX_TXN_OPS + 1];
  for (int i = 0; i <= KT_MAX_TXN_OPS; i++) {
    ops[i] = full_put();
    cs[i] = (struct kt_compare){.key = B("k"), .int_value = 1};
  }
  struct kt_request_op op = {.type = KT_OP_TXN};
  op.u.txn.success = ops;
  op.u.txn.n_success = KT_MAX_TXN_OPS;
  op.u.txn.compare = cs;
  op.u.txn.n_compare = KT_MAX_TXN_OPS;
  struct kt_req r = mkreq(KT_MSG_TXN, 3, op), out;
  CHECK(rt_req(&r));
  const char *which[] = {"txn.failure", "txn.compare"};
  for (int w = 0; w < 2; w++) {
    if (w == 0) {
      r.u.op.u.txn.failure = ops;
      r.u.op.u.txn.n_failure = KT_MAX_TXN_OPS + 1;
    } else {
      r.u.op.u.txn.n_failure = 0;
      r.u.op.u.txn.n_compare = KT_MAX_TXN_OPS + 1;
    }
    struct kt_buf f = {0};
    kt_proto_encode_req(&f, &r);
    struct kt_err e;
    CHECK_EQ(kt_proto_decode_req(f.p + 4, f.len - 4, &arena, &out, &e), KT_ETOOMANYOPS);
    CHECK_EQ(out.id, 3);
    CHECK(strstr(e.msg, which[w]) != NULL);
    kt_buf_free(&f);
  }
  kt_arena_reset(&arena);
}

/* ---- malformed input ---- */

static int pk_write(void *data, const char *p, size_t n) {
  kt_buf_append(data, p, n);
  return 0;
}

struct raw {
  struct kt_buf b;
  msgpack_packer pk;
};
static void raw_init(struct raw *r) {
  memset(r, 0, sizeof *r);
  msgpack_packer_init(&r->pk, &r->b, pk_write);
}
static void raw_str(struct raw *r, const char *s) {
  msgpack_pack_str_with_body(&r->pk, s, strlen(s));
}
static void raw_bytes(struct raw *r, const void *p, size_t n) { kt_buf_append(&r->b, p, n); }

/* decode r's bytes as a request; expect code and (if non-NULL) a substring */
static int dec_req_raw(struct raw *r, struct kt_req *out, struct kt_err *e) {
  return kt_proto_decode_req(r->b.p, r->b.len, &arena, out, e);
}

TEST(truncated_bodies_are_eproto) {
  struct kt_req r = mkreq(KT_MSG_TXN, 77, full_txn()), out;
  struct kt_buf f = {0};
  kt_proto_encode_req(&f, &r);
  size_t blen = f.len - 4;
  for (size_t n = 0; n < blen; n++) {
    /* a copy of exactly n bytes so ASan sees any over-read */
    uint8_t *cp = malloc(n ? n : 1);
    memcpy(cp, f.p + 4, n);
    struct kt_err e;
    int rc = kt_proto_decode_req(cp, n, &arena, &out, &e);
    free(cp);
    CHECK_EQ(rc, KT_EPROTO);
    CHECK(strstr(e.msg, "truncated") != NULL);
    if (n >= 4) /* [type, id, and the payload's first byte] */
      CHECK_EQ(out.id, 77);
  }
  kt_buf_free(&f);

  struct kt_resp rr = {.type = KT_MSG_RANGE, .id = 5}, rout;
  rr.u.op.type = KT_OP_RANGE;
  rr.u.op.u.range = (struct kt_range_resp){.kvs = kvs3, .n_kvs = 3, .more = true, .count = 9};
  kt_proto_encode_resp(&f, &rr);
  for (size_t n = 0; n < f.len - 4; n++) {
    uint8_t *cp = malloc(n ? n : 1);
    memcpy(cp, f.p + 4, n);
    struct kt_err e;
    int rc = kt_proto_decode_resp(cp, n, &arena, &rout, &e);
    free(cp);
    CHECK_EQ(rc, KT_EPROTO);
  }
  kt_buf_free(&f);
  kt_arena_reset(&arena);
}

TEST(wrong_top_level_shapes) {
  struct kt_req out;
  struct kt_err e;
  struct raw r;
  /* a map instead of the array */
  raw_init(&r);
  msgpack_pack_map(&r.pk, 0);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "body: expected array, got map") != NULL);
  kt_buf_free(&r.b);
  /* arrays of 2 and of 4 */
  for (int n = 2; n <= 4; n += 2) {
    raw_init(&r);
    msgpack_pack_array(&r.pk, (size_t)n);
    for (int i = 0; i < n; i++)
      msgpack_pack_uint8(&r.pk, 1);
    CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
    CHECK(strstr(e.msg, "expected [type, id, payload]") != NULL);
    kt_buf_free(&r.b);
  }
  /* the type is a string */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  raw_str(&r, "put");
  msgpack_pack_uint8(&r.pk, 1);
  msgpack_pack_map(&r.pk, 0);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "type: expected int, got str") != NULL);
  kt_buf_free(&r.b);
  /* a nil type or id (nil means zero only inside payloads) */
  for (int w = 0; w < 2; w++) {
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    if (w == 0)
      msgpack_pack_nil(&r.pk);
    else
      msgpack_pack_uint8(&r.pk, 2);
    if (w == 1)
      msgpack_pack_nil(&r.pk);
    else
      msgpack_pack_uint8(&r.pk, 46);
    msgpack_pack_map(&r.pk, 0);
    CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
    CHECK_STR(e.msg, w == 0 ? "type: expected int, got nil" : "id: expected int, got nil");
    kt_buf_free(&r.b);
  }
  /* a negative id */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_uint8(&r.pk, 2);
  msgpack_pack_int8(&r.pk, -1);
  msgpack_pack_map(&r.pk, 0);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "id: integer out of range") != NULL);
  kt_buf_free(&r.b);
  /* payload is an array */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_uint8(&r.pk, 2);
  msgpack_pack_uint8(&r.pk, 9);
  msgpack_pack_array(&r.pk, 0);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "put.payload: expected map, got array");
  CHECK_EQ(out.id, 9);
  kt_buf_free(&r.b);
  /* trailing bytes */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_uint8(&r.pk, 6);
  msgpack_pack_uint8(&r.pk, 9);
  msgpack_pack_map(&r.pk, 0);
  msgpack_pack_nil(&r.pk);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "1 trailing bytes") != NULL);
  kt_buf_free(&r.b);
  /* a map key that is not a string */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_uint8(&r.pk, 2);
  msgpack_pack_uint8(&r.pk, 9);
  msgpack_pack_map(&r.pk, 1);
  msgpack_pack_uint8(&r.pk, 1);
  msgpack_pack_uint8(&r.pk, 1);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "map key: expected str, got int") != NULL);
  kt_buf_free(&r.b);
  /* empty body */
  CHECK_EQ(kt_proto_decode_req((const uint8_t *)"", 0, &arena, &out, &e), KT_EPROTO);
  kt_arena_reset(&arena);
}

TEST(unknown_type_keeps_id) {
  int types[] = {7, 15, 19, 23, 29, 31, 75, 79, 126, 127, 200, 100000}; /* reserved, unassigned */
  for (size_t i = 0; i < KT_ARRAY_LEN(types); i++) {
    struct raw r;
    raw_init(&r);
    msgpack_pack_array(&r.pk, 3);
    msgpack_pack_int(&r.pk, types[i]);
    msgpack_pack_uint64(&r.pk, 0x123456789ull);
    msgpack_pack_map(&r.pk, 1);
    raw_str(&r, "whatever");
    msgpack_pack_array(&r.pk, 0);
    struct kt_req out;
    struct kt_err e;
    CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EUNSUPPORTED);
    CHECK_EQ(out.id, 0x123456789ull);
    CHECK(strstr(e.msg, "unknown request type") != NULL);
    kt_buf_free(&r.b);
  }
  /* a response decoder does the same, and a request type is not a response */
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, 20);
  msgpack_pack_uint64(&r.pk, 5);
  msgpack_pack_map(&r.pk, 0);
  struct kt_resp out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EUNSUPPORTED);
  CHECK_EQ(out.id, 5);
  kt_buf_free(&r.b);
  /* an unknown op type inside a txn */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 5);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "success");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_int(&r.pk, 5);
  msgpack_pack_map(&r.pk, 0);
  struct kt_req rq;
  CHECK_EQ(dec_req_raw(&r, &rq, &e), KT_EUNSUPPORTED);
  CHECK_STR(e.msg, "txn.success[0].type: unknown op type 5");
  CHECK_EQ(rq.id, 5);
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

/* A request of `type` whose payload has one field, written by fn. */
typedef void (*field_fn)(struct raw *r);
static int one_field(int type, const char *field, field_fn fn, struct kt_req *out,
                     struct kt_err *e) {
  static struct raw r; /* kept until the next call: out points into it */
  kt_buf_free(&r.b);
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, type);
  msgpack_pack_uint64(&r.pk, 31);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, field);
  fn(&r);
  return dec_req_raw(&r, out, e);
}
static void v_int(struct raw *r) { msgpack_pack_int(&r->pk, 5); }
static void v_neg(struct raw *r) { msgpack_pack_int(&r->pk, -5); }
static void v_str(struct raw *r) { raw_str(r, "x"); }
static void v_bin(struct raw *r) { msgpack_pack_bin_with_body(&r->pk, "x", 1); }
static void v_true(struct raw *r) { msgpack_pack_true(&r->pk); }
static void v_nil(struct raw *r) { msgpack_pack_nil(&r->pk); }
static void v_float(struct raw *r) { msgpack_pack_double(&r->pk, 1.5); }
static void v_map(struct raw *r) { msgpack_pack_map(&r->pk, 0); }
static void v_big(struct raw *r) { msgpack_pack_uint64(&r->pk, UINT64_MAX); }
static void v_99(struct raw *r) { msgpack_pack_int(&r->pk, 99); }

TEST(wrong_field_types_name_the_field) {
  struct {
    int type;
    const char *field;
    field_fn fn;
    int code;
    const char *msg;
  } cases[] = {
      {KT_MSG_PUT, "key", v_int, KT_EPROTO, "put.key: expected bin or str, got int"},
      {KT_MSG_PUT, "value", v_true, KT_EPROTO, "put.value: expected bin or str, got bool"},
      {KT_MSG_PUT, "lease", v_str, KT_EPROTO, "put.lease: expected int, got str"},
      {KT_MSG_PUT, "lease", v_big, KT_EPROTO, "put.lease: integer out of range"},
      {KT_MSG_PUT, "prev_kv", v_int, KT_EPROTO, "put.prev_kv: expected bool, got int"},
      {KT_MSG_RANGE, "limit", v_float, KT_EPROTO, "range.limit: expected int, got float"},
      {KT_MSG_RANGE, "range_end", v_map, KT_EPROTO,
       "range.range_end: expected bin or str, got map"},
      {KT_MSG_RANGE, "sort_order", v_99, KT_EINVAL, "range.sort_order: unknown value 99"},
      {KT_MSG_RANGE, "sort_target", v_neg, KT_EPROTO, "range.sort_target: integer out of range"},
      {KT_MSG_RANGE, "keys_only", v_bin, KT_EPROTO, "range.keys_only: expected bool, got bin"},
      {KT_MSG_DELETE, "prev_kv", v_str, KT_EPROTO, "delete.prev_kv: expected bool, got str"},
      {KT_MSG_TXN, "compare", v_map, KT_EPROTO, "txn.compare: expected array, got map"},
      {KT_MSG_TXN, "success", v_int, KT_EPROTO, "txn.success: expected array, got int"},
      {KT_MSG_COMPACT, "revision", v_str, KT_EPROTO, "compact.revision: expected int, got str"},
      {KT_MSG_COMPACT, "physical", v_int, KT_EPROTO, "compact.physical: expected bool, got int"},
      {KT_MSG_HELLO, "version", v_neg, KT_EPROTO, "hello.version: integer out of range"},
      {KT_MSG_HELLO, "version", v_big, KT_EPROTO, "hello.version: integer out of range"},
      {KT_MSG_HELLO, "client", v_int, KT_EPROTO, "hello.client: expected bin or str, got int"},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
    struct kt_req out;
    struct kt_err e;
    int rc = one_field(cases[i].type, cases[i].field, cases[i].fn, &out, &e);
    if (rc != cases[i].code || strcmp(e.msg, cases[i].msg) != 0)
      fprintf(stderr, "case %zu: rc %d msg \"%s\"\n", i, rc, e.msg);
    CHECK_EQ(rc, cases[i].code);
    CHECK_STR(e.msg, cases[i].msg);
    CHECK_EQ(out.id, 31);
  }
  /* accepted: str for keys, nil for anything, unknown fields of any type */
  struct kt_req out;
  struct kt_err e;
  CHECK_EQ(one_field(KT_MSG_PUT, "key", v_str, &out, &e), 0);
  CHECK_BYTES(out.u.op.u.put.key.p, out.u.op.u.put.key.n, "x");
  CHECK_EQ(one_field(KT_MSG_PUT, "lease", v_nil, &out, &e), 0);
  CHECK_EQ(out.u.op.u.put.lease, 0);
  CHECK_EQ(one_field(KT_MSG_PUT, "prev_kv", v_nil, &out, &e), 0);
  CHECK_EQ(one_field(KT_MSG_TXN, "success", v_nil, &out, &e), 0);
  CHECK_EQ(one_field(KT_MSG_PUT, "lease", v_neg, &out, &e), 0);
  CHECK_EQ(out.u.op.u.put.lease, -5);
  CHECK_EQ(one_field(KT_MSG_PUT, "future_field", v_float, &out, &e), 0);
  CHECK_EQ(one_field(KT_MSG_STATUS, "anything", v_map, &out, &e), 0);
  kt_arena_reset(&arena);
}

TEST(wrong_types_inside_txns_name_the_path) {
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 8);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "failure");
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_array(&r.pk, 2); /* failure[0]: a valid put */
  msgpack_pack_int(&r.pk, KT_OP_PUT);
  msgpack_pack_map(&r.pk, 0);
  msgpack_pack_array(&r.pk, 2); /* failure[1]: a txn with a bad put */
  msgpack_pack_int(&r.pk, KT_OP_TXN);
  msgpack_pack_map(&r.pk, 2);
  raw_str(&r, "compare");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "target");
  msgpack_pack_int(&r.pk, 3);
  raw_str(&r, "success");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_int(&r.pk, KT_OP_PUT);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "lease");
  raw_str(&r, "ten");
  struct kt_req out;
  struct kt_err e;
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "txn.failure[1].success[0].lease: expected int, got str");
  kt_buf_free(&r.b);

  /* a compare with an unknown target; an op that is not [type, payload] */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 8);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "compare");
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_map(&r.pk, 0);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "target");
  msgpack_pack_int(&r.pk, 5);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EINVAL);
  CHECK_STR(e.msg, "txn.compare[1].target: unknown value 5");
  kt_buf_free(&r.b);

  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 8);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "success");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, 2);
  msgpack_pack_map(&r.pk, 0);
  msgpack_pack_nil(&r.pk);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "txn.success[0]: expected [type, payload], got an array of 3");
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

TEST(compare_value_picks_the_target_field) {
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 8);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "compare");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_map(&r.pk, 5);
  raw_str(&r, "mod_revision"); /* before target: order does not matter */
  msgpack_pack_int(&r.pk, 17);
  raw_str(&r, "version");
  msgpack_pack_int(&r.pk, 3);
  raw_str(&r, "target");
  msgpack_pack_int(&r.pk, KT_CMP_MOD);
  raw_str(&r, "result");
  msgpack_pack_int(&r.pk, KT_CMP_LESS);
  raw_str(&r, "value");
  raw_str(&r, "ignored");
  struct kt_req out;
  struct kt_err e;
  CHECK_EQ(dec_req_raw(&r, &out, &e), 0);
  CHECK_EQ(out.u.op.u.txn.n_compare, 1);
  CHECK_EQ(out.u.op.u.txn.compare[0].int_value, 17);
  CHECK_EQ(out.u.op.u.txn.compare[0].result, KT_CMP_LESS);
  CHECK_EQ(out.u.op.u.txn.compare[0].value.n, 0);
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

TEST(huge_declared_lengths) {
  struct kt_req out;
  struct kt_err e;
  /* bin32 / str32 / array32 / map32 claiming 4 GiB in a tiny body */
  static const uint8_t put_hdr[] = {0x93, 0x02, 0x07, 0x81, 0xa3, 'k', 'e', 'y'};
  const uint8_t tails[][5] = {{0xc6, 0xff, 0xff, 0xff, 0xff},
                              {0xdb, 0xff, 0xff, 0xff, 0xff},
                              {0xdd, 0xff, 0xff, 0xff, 0xff},
                              {0xdf, 0xff, 0xff, 0xff, 0xff}};
  for (size_t i = 0; i < KT_ARRAY_LEN(tails); i++) {
    struct raw r;
    raw_init(&r);
    raw_bytes(&r, put_hdr, sizeof put_hdr);
    raw_bytes(&r, tails[i], 5);
    raw_bytes(&r, "abc", 3);
    int rc = dec_req_raw(&r, &out, &e);
    CHECK_EQ(rc, KT_EPROTO);
    CHECK_EQ(out.id, 7);
    CHECK(strstr(e.msg, "put.key: ") != NULL);
    kt_buf_free(&r.b);
  }
  /* a txn success list claiming 2^32-1 ops: ETOOMANYOPS before any allocation */
  struct raw r;
  raw_init(&r);
  static const uint8_t txn_hdr[] = {0x93, 0x04, 0x07, 0x81, 0xa7, 's',
                                    'u',  'c',  'c',  'e',  's',  's'};
  raw_bytes(&r, txn_hdr, sizeof txn_hdr);
  raw_bytes(&r, tails[2], 5);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO); /* truncated: count > bytes left */
  kt_buf_free(&r.b);
  /* a kvs array claiming many kvs in a response */
  raw_init(&r);
  static const uint8_t resp_hdr[] = {0x93, 0x01, 0x07, 0x81, 0xa3, 'k', 'v', 's', 0xdc, 0xff, 0xff};
  raw_bytes(&r, resp_hdr, sizeof resp_hdr);
  for (int i = 0; i < 100; i++)
    raw_bytes(&r, "\x96", 1);
  struct kt_resp rout;
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &rout, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "range.kvs: truncated") != NULL);
  kt_buf_free(&r.b);
  /* a frame prefix of 4 GiB and one just above the limit */
  const uint8_t *body;
  uint32_t blen;
  size_t used;
  CHECK_EQ(kt_frame_next((const uint8_t *)"\xff\xff\xff\xff", 4, KT_MAX_FRAME_BYTES, &body, &blen,
                         &used),
           -KT_ETOOLARGE);
  uint8_t hdr[4];
  kt_put_u32be(hdr, 1001);
  CHECK_EQ(kt_frame_next(hdr, 4, 1000, &body, &blen, &used), -KT_ETOOLARGE);
  kt_put_u32be(hdr, 1000);
  CHECK_EQ(kt_frame_next(hdr, 4, 1000, &body, &blen, &used), 0);
  CHECK_EQ(kt_frame_next((const uint8_t *)"\0\0\0\0", 4, 1000, &body, &blen, &used), -KT_EPROTO);
  CHECK_EQ(kt_frame_next((const uint8_t *)"\0\0\0", 3, 1000, &body, &blen, &used), 0);
  kt_arena_reset(&arena);
}

TEST(unknown_fields_deep_and_odd_are_skipped) {
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_PUT);
  msgpack_pack_uint64(&r.pk, 1);
  msgpack_pack_map(&r.pk, 6);
  raw_str(&r, "x1");
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "a");
  msgpack_pack_double(&r.pk, 2.5);
  msgpack_pack_float(&r.pk, 1.0f);
  msgpack_pack_ext_with_body(&r.pk, "abcdefgh", 8, 3); /* fixext8 */
  raw_str(&r, "x2");
  msgpack_pack_ext_with_body(&r.pk, "abc", 3, 1); /* ext8 */
  raw_str(&r, "x3");
  msgpack_pack_int64(&r.pk, INT64_MIN);
  raw_str(&r, "key");
  msgpack_pack_bin_with_body(&r.pk, "K", 1);
  raw_str(&r, "x4");
  msgpack_pack_str_with_body(&r.pk, "12345678901234567890123456789012345", 35);
  raw_str(&r, "x5");
  msgpack_pack_false(&r.pk);
  struct kt_req out;
  struct kt_err e;
  CHECK_EQ(dec_req_raw(&r, &out, &e), 0);
  CHECK_BYTES(out.u.op.u.put.key.p, out.u.op.u.put.key.n, "K");
  kt_buf_free(&r.b);

  /* an unknown field nested 40 deep is refused, not recursed into forever */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_PUT);
  msgpack_pack_uint64(&r.pk, 1);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "x");
  for (int i = 0; i < 40; i++)
    msgpack_pack_array(&r.pk, 1);
  msgpack_pack_nil(&r.pk);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "nested too deep") != NULL);
  kt_buf_free(&r.b);
  /* the reserved byte 0xc1 */
  raw_init(&r);
  static const uint8_t bad[] = {0x93, 0x02, 0x07, 0x81, 0xa1, 'x', 0xc1};
  raw_bytes(&r, bad, sizeof bad);
  CHECK_EQ(dec_req_raw(&r, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "0xc1") != NULL);
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

TEST(peek_id) {
  struct kt_req r = mkreq(KT_MSG_PUT, 0xabcdef0123ull, full_put());
  struct kt_buf f = {0};
  kt_proto_encode_req(&f, &r);
  uint8_t type;
  uint64_t id;
  for (size_t n = 0; n < 15; n++)
    CHECK_EQ(kt_proto_peek_id(f.p + 4, n, &type, &id), n < 11 ? 0 : 1);
  CHECK_EQ(type, KT_MSG_PUT);
  CHECK_EQ(id, 0xabcdef0123ull);
  CHECK_EQ(kt_proto_peek_id((const uint8_t *)"\x81", 1, &type, &id), -1);
  CHECK_EQ(kt_proto_peek_id((const uint8_t *)"\x93\xa1", 2, &type, &id), -1);
  kt_buf_free(&f);
}

/* ---- frame splitting ---- */

/* Build n random requests, encode them back to back. */
static void random_stream(struct kt_rng *rng, int n, struct kt_req *reqs, struct kt_buf *out) {
  for (int i = 0; i < n; i++) {
    switch (kt_rng_below(rng, 4)) {
    case 0:
      reqs[i] = mkreq(KT_MSG_PUT, (uint64_t)i, full_put());
      reqs[i].u.op.u.put.lease = (int64_t)kt_rng_below(rng, 1000000);
      break;
    case 1:
      reqs[i] = mkreq(KT_MSG_RANGE, (uint64_t)i, full_range());
      reqs[i].u.op.u.range.limit = (int64_t)kt_rng_below(rng, 300);
      break;
    case 2:
      reqs[i] = mkreq(KT_MSG_TXN, (uint64_t)i, full_txn());
      break;
    default:
      reqs[i] = (struct kt_req){.type = KT_MSG_STATUS, .id = (uint64_t)i};
      break;
    }
    kt_proto_encode_req(out, &reqs[i]);
  }
}

/* Feed the stream into a receive buffer in chunks chosen by rng (max_chunk
 * 1 = a byte at a time); decode every frame as soon as it is whole. */
static int split_and_check(struct kt_rng *rng, const struct kt_buf *s, size_t max_chunk,
                           const struct kt_req *reqs, int n) {
  struct kt_buf in = {0};
  size_t pos = 0;
  int got = 0;
  while (pos < s->len) {
    size_t c = 1 + kt_rng_below(rng, max_chunk);
    if (c > s->len - pos)
      c = s->len - pos;
    kt_buf_append(&in, s->p + pos, c);
    pos += c;
    for (;;) {
      const uint8_t *body;
      uint32_t blen;
      size_t used;
      int rc = kt_frame_next(in.p, in.len, KT_DEFAULT_MAX_REQUEST_BYTES, &body, &blen, &used);
      if (rc < 0)
        return -1;
      if (rc == 0)
        break;
      struct kt_req out;
      struct kt_err e;
      if (got >= n || kt_proto_decode_req(body, blen, &arena, &out, &e) != 0 ||
          !req_eq(&reqs[got], &out))
        return -2;
      got++;
      kt_buf_consume(&in, used);
      kt_arena_reset(&arena);
    }
  }
  int left = (int)in.len;
  kt_buf_free(&in);
  return left ? -3 : got;
}

TEST(frames_split_at_any_boundary) {
  enum { N = 300 };
  static struct kt_req reqs[N];
  struct kt_rng rng;
  kt_rng_seed(&rng, 7);
  struct kt_buf s = {0};
  random_stream(&rng, N, reqs, &s);
  CHECK_EQ(split_and_check(&rng, &s, 1, reqs, N), N);
  size_t chunks[] = {2, 3, 7, 64, 1000, 100000};
  for (size_t i = 0; i < KT_ARRAY_LEN(chunks); i++)
    CHECK_EQ(split_and_check(&rng, &s, chunks[i], reqs, N), N);
  kt_buf_free(&s);
}

/* ---- the exact bytes (PROTOCOL.md's examples) ---- */

static char *hex(const struct kt_buf *b) {
  char *s = malloc(b->len * 3 + 1);
  s[0] = 0;
  for (size_t i = 0; i < b->len; i++)
    sprintf(s + 3 * i, "%02x%s", b->p[i], i + 1 < b->len ? " " : "");
  return s;
}

static bool golden(const struct kt_buf *b, const char *want, const char *what) {
  char *h = hex(b);
  bool ok = strcmp(h, want) == 0;
  if (!ok || getenv("KT_PRINT_EXAMPLES"))
    fprintf(stderr, "%s (%zu bytes):\n%s\n", what, b->len, h);
  free(h);
  return ok;
}

TEST(protocol_md_examples_are_exact) {
  struct kt_buf b = {0};
  bool all = true;
  struct kt_req hello = {.type = KT_MSG_HELLO, .id = 1};
  hello.u.hello = (struct kt_hello_req){.version = 1, .client = B("libketch/0.1.0")};
  kt_proto_encode_req(&b, &hello);
  all &= golden(&b,
                "00 00 00 23 93 00 01 82 a7 76 65 72 73 69 6f 6e 01 a6 63 6c 69 65 6e 74 ae 6c 69 "
                "62 6b 65 74 63 68 2f 30 2e 31 2e 30",
                "HELLO request");
  kt_buf_reset(&b);

  struct kt_resp hr = {.type = KT_MSG_HELLO, .id = 1};
  hr.u.hello = (struct kt_hello_resp){.version = 1,
                                      .server = B("ketch 0.1.0"),
                                      .cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                      .member_id = 0x8e9f0a1b2c3d4e5full,
                                      .max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES};
  kt_proto_encode_resp(&b, &hr);
  all &= golden(&b,
                "00 00 00 5e 93 00 01 85 a7 76 65 72 73 69 6f 6e 01 a6 73 65 72 76 65 72 ab 6b 65 "
                "74 63 68 20 30 2e 31 2e 30 aa 63 6c 75 73 74 65 72 5f 69 64 cf 1c 2d 3e 4f 5a 6b "
                "7c 8d a9 6d 65 6d 62 65 72 5f 69 64 cf 8e 9f 0a 1b 2c 3d 4e 5f b1 6d 61 78 5f 72 "
                "65 71 75 65 73 74 5f 62 79 74 65 73 ce 00 20 00 00",
                "HELLO response");
  kt_buf_reset(&b);

  struct kt_req put = {.type = KT_MSG_PUT, .id = 2};
  put.u.op.type = KT_OP_PUT;
  put.u.op.u.put = (struct kt_put_req){.key = B("foo"), .value = B("bar"), .prev_kv = true};
  kt_proto_encode_req(&b, &put);
  all &= golden(&b,
                "00 00 00 21 93 02 02 83 a3 6b 65 79 c4 03 66 6f 6f a5 76 61 6c 75 65 c4 03 62 61 "
                "72 a7 70 72 65 76 5f 6b 76 c3",
                "PUT request");
  kt_buf_reset(&b);

  struct kt_header h = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                        .member_id = 0x8e9f0a1b2c3d4e5full,
                        .revision = 8,
                        .raft_term = 2};
  struct kt_resp pr = {.type = KT_MSG_PUT, .id = 2, .header = h};
  pr.u.op.type = KT_OP_PUT;
  pr.u.op.u.put.has_prev_kv = true;
  pr.u.op.u.put.prev_kv = (struct kt_kv){.key = B("foo"),
                                         .value = B("old"),
                                         .create_revision = 5,
                                         .mod_revision = 7,
                                         .version = 3,
                                         .lease = 0};
  kt_proto_encode_resp(&b, &pr);
  all &= golden(
      &b,
      "00 00 00 37 93 02 02 82 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf 8e 9f 0a 1b "
      "2c 3d 4e 5f 08 02 a7 70 72 65 76 5f 6b 76 96 c4 03 66 6f 6f c4 03 6f 6c 64 05 07 03 00",
      "PUT response");
  kt_buf_reset(&b);

  struct kt_kv kv2[2] = {
      {.key = B("foo"), .value = B("bar"), .create_revision = 5, .mod_revision = 8, .version = 4},
      {.key = B("fop"),
       .value = B("x"),
       .create_revision = 6,
       .mod_revision = 6,
       .version = 1,
       .lease = 0x694d77d1a3f0c207ll}};
  struct kt_resp rr = {.type = KT_MSG_RANGE, .id = 3, .header = h};
  rr.u.op.type = KT_OP_RANGE;
  rr.u.op.u.range = (struct kt_range_resp){.kvs = kv2, .n_kvs = 2, .more = false, .count = 2};
  kt_proto_encode_resp(&b, &rr);
  all &=
      golden(&b,
             "00 00 00 50 93 01 03 83 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf 8e 9f "
             "0a 1b 2c 3d 4e 5f 08 02 a3 6b 76 73 92 96 c4 03 66 6f 6f c4 03 62 61 72 05 08 04 00 "
             "96 c4 03 66 6f 70 c4 01 78 06 06 01 cf 69 4d 77 d1 a3 f0 c2 07 a5 63 6f 75 6e 74 02",
             "RANGE response");
  kt_buf_reset(&b);

  kt_proto_encode_error(&b, 4, KT_ECOMPACTED, kt_strerror(KT_ECOMPACTED));
  all &= golden(&b,
                "00 00 00 3e 93 7f 04 82 a4 63 6f 64 65 06 a7 6d 65 73 73 61 67 65 d9 2a 6d 76 63 "
                "63 3a 20 72 65 71 75 69 72 65 64 20 72 65 76 69 73 69 6f 6e 20 68 61 73 20 62 65 "
                "65 6e 20 63 6f 6d 70 61 63 74 65 64",
                "ERROR response");
  kt_buf_free(&b);
  CHECK(all);
}

/* ---- the fuzz corpus ----
 * KT_WRITE_CORPUS=test/fuzz/corpus/proto build/test/proto_test write_fuzz_corpus
 * (re)writes the seeds of test/fuzz/proto_fuzz.c; without the variable this
 * test does nothing. */

static void write_seed(const char *dir, const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(p, 1, n, f);
    fclose(f);
  }
}

static void seed_req(const char *dir, const char *name, const struct kt_req *r) {
  struct kt_buf b = {0};
  kt_proto_encode_req(&b, r);
  write_seed(dir, name, b.p, b.len);
  kt_buf_free(&b);
}

static void seed_resp(const char *dir, const char *name, const struct kt_resp *r) {
  struct kt_buf b = {0};
  kt_proto_encode_resp(&b, r);
  write_seed(dir, name, b.p, b.len);
  kt_buf_free(&b);
}

static struct kt_event events3[3]; /* defined with the watch tests below */

TEST(write_fuzz_corpus) {
  const char *dir = getenv("KT_WRITE_CORPUS");
  if (!dir)
    return;
  /* requests, every type, full and empty */
  struct kt_req r = {.type = KT_MSG_HELLO, .id = 1};
  r.u.hello = (struct kt_hello_req){.version = 1, .client = B("libketch/0.1.0")};
  seed_req(dir, "req_hello", &r);
  r = mkreq(KT_MSG_RANGE, 2, full_range());
  seed_req(dir, "req_range_full", &r);
  r = mkreq(KT_MSG_PUT, 3, full_put());
  seed_req(dir, "req_put_full", &r);
  r = mkreq(KT_MSG_DELETE, 4, full_delete());
  seed_req(dir, "req_delete_full", &r);
  r = mkreq(KT_MSG_TXN, 5, full_txn());
  seed_req(dir, "req_txn_full", &r);
  r = mkreq(KT_MSG_TXN, 5, make_chain(KT_MAX_TXN_DEPTH));
  seed_req(dir, "req_txn_depth8", &r);
  r = mkreq(KT_MSG_TXN, 5, make_chain(KT_MAX_TXN_DEPTH + 1));
  seed_req(dir, "bad_txn_depth9", &r);
  r = (struct kt_req){.type = KT_MSG_COMPACT, .id = 6};
  r.u.compact = (struct kt_compact_req){.revision = 99, .physical = true};
  seed_req(dir, "req_compact", &r);
  static const uint8_t more[] = {KT_MSG_MEMBER_LIST, KT_MSG_MOVE_LEADER, KT_MSG_MEMBER_PUBLISH};
  for (size_t i = 0; i < KT_ARRAY_LEN(more); i++) {
    char name[40];
    snprintf(name, sizeof name, "req_%s_empty", kt_proto_type_name(more[i]));
    r = (struct kt_req){.type = more[i], .id = 1100 + i};
    seed_req(dir, name, &r);
  }
  r = (struct kt_req){.type = KT_MSG_MOVE_LEADER, .id = 12};
  r.u.move_leader.target_id = 0x8e9f0a1b2c3d4e5full;
  seed_req(dir, "req_move_leader", &r);
  struct kt_bytes seed_urls[2] = {B("http://127.0.0.1:2479"), B("http://[::1]:2479")};
  r = (struct kt_req){.type = KT_MSG_MEMBER_PUBLISH, .id = 0};
  r.u.publish = (struct kt_member_publish_req){7, B("m1"), seed_urls, 2};
  seed_req(dir, "req_member_publish", &r);
  r = (struct kt_req){.type = KT_MSG_MEMBER_ADD, .id = 13};
  r.u.member = (struct kt_member_change_req){0, B(""), seed_urls, 2, true};
  seed_req(dir, "req_member_add", &r);
  r = (struct kt_req){.type = KT_MSG_MEMBER_PROMOTE, .id = 14};
  r.u.member.id = 0x8e9f0a1b2c3d4e5full;
  seed_req(dir, "req_member_promote", &r);
  for (uint8_t t = KT_MSG_HELLO; t <= KT_MSG_STATUS; t++) {
    char name[32];
    snprintf(name, sizeof name, "req_%s_empty", kt_proto_type_name(t));
    r = (struct kt_req){.type = t, .id = 1000 + t};
    r.u.op.type = t;
    seed_req(dir, name, &r);
  }
  /* responses */
  struct kt_header h = {
      .cluster_id = 0xdeadbeefcafe, .member_id = 42, .revision = 12345, .raft_term = 7};
  struct kt_resp s = {.type = KT_MSG_HELLO, .id = 1};
  s.u.hello = (struct kt_hello_resp){.version = 1,
                                     .server = B("ketch 0.1.0"),
                                     .cluster_id = 1,
                                     .member_id = 2,
                                     .max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES};
  seed_resp(dir, "resp_hello", &s);
  s = (struct kt_resp){.type = KT_MSG_RANGE, .id = 2, .header = h};
  s.u.op.type = KT_OP_RANGE;
  s.u.op.u.range = (struct kt_range_resp){.kvs = kvs3, .n_kvs = 3, .more = true, .count = 9};
  seed_resp(dir, "resp_range", &s);
  s = (struct kt_resp){.type = KT_MSG_PUT, .id = 3, .header = h};
  s.u.op.type = KT_OP_PUT;
  s.u.op.u.put = (struct kt_put_resp){.has_prev_kv = true, .prev_kv = kvs3[2]};
  seed_resp(dir, "resp_put", &s);
  s = (struct kt_resp){.type = KT_MSG_DELETE, .id = 4, .header = h};
  s.u.op.type = KT_OP_DELETE;
  s.u.op.u.del = (struct kt_delete_resp){.deleted = 3, .prev_kvs = kvs3, .n_prev_kvs = 3};
  seed_resp(dir, "resp_delete", &s);
  struct kt_response_op inner[3] = {0};
  inner[0].type = KT_OP_RANGE;
  inner[0].u.range = (struct kt_range_resp){.kvs = kvs3, .n_kvs = 1, .count = 1};
  inner[1].type = KT_OP_PUT;
  inner[2].type = KT_OP_TXN;
  inner[2].u.txn = (struct kt_txn_resp){.succeeded = true, .responses = inner, .n_responses = 2};
  s = (struct kt_resp){.type = KT_MSG_TXN, .id = 5, .header = h};
  s.u.op.type = KT_OP_TXN;
  s.u.op.u.txn = (struct kt_txn_resp){.succeeded = true, .responses = inner, .n_responses = 3};
  seed_resp(dir, "resp_txn", &s);
  s = (struct kt_resp){.type = KT_MSG_COMPACT, .id = 6, .header = h};
  seed_resp(dir, "resp_compact", &s);
  struct kt_bytes errs[1] = {B("NOSPACE")};
  s = (struct kt_resp){.type = KT_MSG_STATUS, .id = 7, .header = h};
  s.u.status = (struct kt_status_resp){.version = B("0.1.0"),
                                       .db_size = 4096,
                                       .leader = 42,
                                       .raft_index = 10,
                                       .raft_term = 7,
                                       .is_learner = true,
                                       .errors = errs,
                                       .n_errors = 1};
  seed_resp(dir, "resp_status", &s);
  struct kt_bytes murls[2] = {B("http://127.0.0.1:2480"), B("http://127.0.0.1:2580")};
  struct kt_member_info minfo[2] = {
      {.id = 42, .name = B("m0"), .peer_urls = murls, .n_peer_urls = 2},
      {.id = 43,
       .name = B("m1"),
       .peer_urls = murls + 1,
       .n_peer_urls = 1,
       .client_urls = murls,
       .n_client_urls = 1,
       .is_learner = true}};
  s = (struct kt_resp){.type = KT_MSG_MEMBER_LIST, .id = 9, .header = h};
  s.u.member_list = (struct kt_member_list_resp){minfo, 2};
  seed_resp(dir, "resp_member_list", &s);
  s = (struct kt_resp){.type = KT_MSG_MOVE_LEADER, .id = 10, .header = h};
  seed_resp(dir, "resp_move_leader", &s);
  struct kt_buf b = {0};
  kt_proto_encode_error(&b, 8, KT_ECOMPACTED, kt_strerror(KT_ECOMPACTED));
  write_seed(dir, "resp_error", b.p, b.len);
  /* a stream of several frames */
  kt_buf_reset(&b);
  for (int i = 0; i < 4; i++) {
    r = mkreq(KT_MSG_PUT, (uint64_t)i, full_put());
    kt_proto_encode_req(&b, &r);
  }
  kt_proto_encode_error(&b, 9, KT_EPROTO, "x");
  write_seed(dir, "stream_5_frames", b.p, b.len);
  /* broken ones */
  kt_buf_reset(&b);
  r = mkreq(KT_MSG_TXN, 5, full_txn());
  kt_proto_encode_req(&b, &r);
  write_seed(dir, "bad_truncated_txn", b.p, b.len / 2);
  kt_put_u32be(b.p, (uint32_t)(b.len - 4 - 10)); /* the prefix says less than the body */
  write_seed(dir, "bad_short_prefix", b.p, b.len);
  write_seed(dir, "bad_zero_length", "\0\0\0\0\x93\x02\x01\x80", 8);
  write_seed(dir, "bad_huge_length", "\xff\xff\xff\xf0\x93\x02\x01\x80", 8);
  write_seed(dir, "bad_unknown_type", "\0\0\0\x04\x93\x13\x07\x80", 8); /* 19: reserved */
  write_seed(dir, "bad_not_array", "\0\0\0\x04\x83\x10\x07\x80", 8);
  write_seed(dir, "bad_key_int", "\0\0\0\x09\x93\x02\x07\x81\xa3key\x05", 13);
  write_seed(dir, "bad_bin32_len", "\0\0\0\x0f\x93\x02\x07\x81\xa3key\xc6\xff\xff\xff\xff\x00", 19);
  write_seed(dir, "bad_array32_ops", "\0\0\0\x11\x93\x04\x07\x81\xa7success\xdd\xff\xff\xff\xff",
             21);
  write_seed(dir, "bad_trailing", "\0\0\0\x05\x93\x06\x07\x80\xc0", 9);
  write_seed(dir, "bad_c1", "\0\0\0\x07\x93\x02\x07\x81\xa1x\xc1", 11);
  static struct kt_request_op ops[KT_MAX_TXN_OPS + 1];
  for (int i = 0; i <= KT_MAX_TXN_OPS; i++)
    ops[i] = (struct kt_request_op){.type = KT_OP_DELETE};
  r = (struct kt_req){.type = KT_MSG_TXN, .id = 10};
  r.u.op.type = KT_OP_TXN;
  r.u.op.u.txn.success = ops;
  r.u.op.u.txn.n_success = KT_MAX_TXN_OPS + 1;
  seed_req(dir, "bad_129_ops", &r);
  /* watch and lease messages */
  r = (struct kt_req){.type = KT_MSG_WATCH_CREATE, .id = 20};
  r.u.watch_create = (struct kt_watch_create_req){.key = B("a"),
                                                  .range_end = B("\0"),
                                                  .start_revision = 7,
                                                  .prev_kv = true,
                                                  .no_put = true,
                                                  .no_delete = true,
                                                  .progress_notify = true,
                                                  .fragment = true};
  seed_req(dir, "req_watch_create", &r);
  r = (struct kt_req){.type = KT_MSG_WATCH_CANCEL, .id = 21};
  r.u.watch_cancel.watch_id = 3;
  seed_req(dir, "req_watch_cancel", &r);
  r = (struct kt_req){.type = KT_MSG_WATCH_PROGRESS, .id = 22};
  seed_req(dir, "req_watch_progress", &r);
  r = (struct kt_req){.type = KT_MSG_LEASE_GRANT, .id = 23};
  r.u.lease = (struct kt_lease_req){.id = 0x694d77d1a3f0c207ll, .ttl = 60};
  seed_req(dir, "req_lease_grant", &r);
  r = (struct kt_req){.type = KT_MSG_LEASE_TTL, .id = 24};
  r.u.lease = (struct kt_lease_req){.id = 5, .keys = true};
  seed_req(dir, "req_lease_ttl", &r);
  s = (struct kt_resp){.type = KT_MSG_WATCH_CREATE, .id = 20, .header = h};
  s.u.watch = (struct kt_watch_resp){.watch_id = 3, .created = true};
  seed_resp(dir, "resp_watch_created", &s);
  s.u.watch =
      (struct kt_watch_resp){.watch_id = 3, .fragment = true, .events = events3, .n_events = 3};
  seed_resp(dir, "resp_watch_events", &s);
  s.u.watch = (struct kt_watch_resp){
      .watch_id = 3, .canceled = true, .compact_revision = 4, .cancel_reason = B("compacted")};
  seed_resp(dir, "resp_watch_canceled", &s);
  s = (struct kt_resp){.type = KT_MSG_WATCH_PROGRESS, .id = 22, .header = h};
  seed_resp(dir, "resp_watch_progress", &s);
  struct kt_bytes lkeys[2] = {B("k1"), B("k2")};
  int64_t lids[3] = {1, 1LL << 40, -1};
  s = (struct kt_resp){.type = KT_MSG_LEASE_TTL, .id = 24, .header = h};
  s.u.lease =
      (struct kt_lease_resp){.id = 5, .ttl = 30, .granted_ttl = 60, .keys = lkeys, .n_keys = 2};
  seed_resp(dir, "resp_lease_ttl", &s);
  s = (struct kt_resp){.type = KT_MSG_LEASE_LEASES, .id = 25, .header = h};
  s.u.lease = (struct kt_lease_resp){.leases = lids, .n_leases = 3};
  seed_resp(dir, "resp_lease_leases", &s);
  r = (struct kt_req){.type = KT_MSG_CAMPAIGN, .id = 26};
  r.u.lock = (struct kt_lock_req){.name = B("el"), .value = B("v"), .lease = 5};
  seed_req(dir, "req_campaign", &r);
  r = (struct kt_req){.type = KT_MSG_PROCLAIM, .id = 27};
  r.u.lock.leader = (struct kt_leader_key){B("el"), B("el/5"), 9, 5};
  seed_req(dir, "req_proclaim", &r);
  s = (struct kt_resp){.type = KT_MSG_OBSERVE, .id = 28, .header = h, .u.lock.has_kv = true};
  s.u.lock.kv = (struct kt_kv){B("el/5"), B("v"), 9, 9, 1, 5};
  seed_resp(dir, "resp_observe", &s);
  /* an event of type 2 (EINVAL) */
  write_seed(dir, "bad_watch_event_type2",
             "\0\0\0\x18\x93\x10\x01\x81\xa6"
             "events\x91\x93\x02\x96\xa1k\xa1v\x01\x02\x03\x00\xc0",
             28);
  kt_buf_free(&b);
}

TEST(response_errors_name_the_path) {
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_PUT);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "prev_kv");
  msgpack_pack_array(&r.pk, 6);
  raw_str(&r, "k");
  msgpack_pack_int(&r.pk, 1); /* value: wrong type */
  for (int i = 0; i < 4; i++)
    msgpack_pack_int(&r.pk, 1);
  struct kt_resp out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "put.prev_kv.value: expected bin or str, got int");
  kt_buf_free(&r.b);

  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_TXN);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "responses");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_int(&r.pk, KT_OP_RANGE);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "kvs");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 5);
  for (int i = 0; i < 5; i++)
    msgpack_pack_int(&r.pk, 1);
  msgpack_pack_nil(&r.pk); /* padding so the count check passes */
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "txn.responses[0].kvs[0]: expected [key, value, create_revision") != NULL);
  kt_buf_free(&r.b);

  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_STATUS);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "header");
  msgpack_pack_array(&r.pk, 4);
  msgpack_pack_int(&r.pk, -1); /* cluster_id is unsigned */
  for (int i = 0; i < 3; i++)
    msgpack_pack_int(&r.pk, 1);
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "status.header.cluster_id: integer out of range");
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

/* PROTOCOL.md 11: the MOVE_LEADER and MEMBER_LIST examples */
#define MOVE_LEADER_HEX                                                                            \
  "00 00 00 17 93 2c 09 81 a9 74 61 72 67 65 74 5f 69 64 cf 8e 9f 0a 1b 2c 3d 4e "                 \
  "5f"
#define MEMBER_LIST_HEX                                                                            \
  "00 00 00 80 93 20 0a 82 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 00 02 a7 6d 65 6d 62 65 72 73 91 84 a2 69 64 cf 8e 9f "                 \
  "0a 1b 2c 3d 4e 5f a4 6e 61 6d 65 a2 6d 31 a9 70 65 65 72 5f 75 72 6c 73 91 b4 "                 \
  "68 74 74 70 3a 2f 2f 31 30 2e 30 2e 30 2e 31 3a 32 34 38 30 ab 63 6c 69 65 6e "                 \
  "74 5f 75 72 6c 73 91 b4 68 74 74 70 3a 2f 2f 31 30 2e 30 2e 30 2e 31 3a 32 34 "                 \
  "37 39"
#define MEMBER_ADD_HEX                                                                             \
  "00 00 00 30 93 21 0d 82 a9 70 65 65 72 5f 75 72 6c 73 91 b4 68 74 74 70 3a 2f 2f 31 30 2e 30 "  \
  "2e 30 2e 34 3a 32 34 38 30 aa 69 73 5f 6c 65 61 72 6e 65 72 c3"
/* ---- cluster messages: MEMBER_LIST, MOVE_LEADER, MEMBER_PUBLISH, MEMBER_ADD .. PROMOTE ---- */

TEST(member_messages_round_trip) {
  struct kt_req q = {.type = KT_MSG_MEMBER_LIST, .id = 1};
  CHECK(rt_req(&q));
  q = (struct kt_req){.type = KT_MSG_MOVE_LEADER, .id = 2};
  q.u.move_leader.target_id = UINT64_MAX;
  CHECK(rt_req(&q));
  q.u.move_leader.target_id = 0;
  CHECK(rt_req(&q));
  struct kt_bytes urls[3] = {B("http://127.0.0.1:2479"), B("http://10.0.0.1:2479"), B("")};
  q = (struct kt_req){.type = KT_MSG_MEMBER_PUBLISH, .id = 3};
  q.u.publish = (struct kt_member_publish_req){0xabcdef, B("m9"), urls, 3};
  CHECK(rt_req(&q));
  static const uint8_t change[] = {KT_MSG_MEMBER_ADD, KT_MSG_MEMBER_REMOVE, KT_MSG_MEMBER_UPDATE,
                                   KT_MSG_MEMBER_PROMOTE};
  for (size_t i = 0; i < sizeof change; i++) {
    q = (struct kt_req){.type = change[i], .id = 10 + i};
    CHECK(rt_req(&q)); /* no fields */
    q.u.member = (struct kt_member_change_req){UINT64_MAX, B("new"), urls, 2, true};
    CHECK(rt_req(&q));
  }

  struct kt_header h = {.cluster_id = 1, .member_id = 2, .raft_term = 3};
  struct kt_member_info ms[3] = {
      {.id = 5, .name = B("m0"), .peer_urls = urls, .n_peer_urls = 2},
      {.id = 6, .name = B("m1"), .client_urls = urls + 1, .n_client_urls = 1, .is_learner = true},
      {.id = 7}};
  struct kt_resp r = {.type = KT_MSG_MEMBER_LIST, .id = 4, .header = h};
  r.u.member_list = (struct kt_member_list_resp){ms, 3};
  CHECK(rt_resp(&r));
  r = (struct kt_resp){.type = KT_MSG_MOVE_LEADER, .id = 5, .header = h};
  CHECK(rt_resp(&r));
  for (size_t i = 0; i < sizeof change; i++) {
    r = (struct kt_resp){.type = change[i], .id = 20 + i, .header = h};
    CHECK(rt_resp(&r));
    r.u.member.members = ms;
    r.u.member.n_members = 3;
    if (change[i] == KT_MSG_MEMBER_ADD) /* the added member travels in ADD only */
      r.u.member.member = ms[1];
    CHECK(rt_resp(&r));
  }
  /* MEMBER_PUBLISH is a request only (it lives in WAL entries) */
  struct kt_buf b = {0};
  struct kt_req pq = {.type = KT_MSG_MEMBER_PUBLISH, .id = 6};
  kt_proto_encode_req(&b, &pq);
  struct kt_resp out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(b.p + 4, b.len - 4, &arena, &out, &e), KT_EUNSUPPORTED);
  kt_buf_free(&b);
  CHECK_STR(kt_proto_type_name(KT_MSG_MEMBER_LIST), "member_list");
  CHECK_STR(kt_proto_type_name(KT_MSG_MOVE_LEADER), "move_leader");
  CHECK_STR(kt_proto_type_name(KT_MSG_MEMBER_PROMOTE), "member_promote");
  kt_arena_reset(&arena);
}

TEST(member_list_errors_name_the_path) {
  struct raw r;
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_MEMBER_LIST);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "members");
  msgpack_pack_array(&r.pk, 2);
  msgpack_pack_map(&r.pk, 0);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "peer_urls");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_int(&r.pk, 1); /* a URL that is not a string */
  struct kt_resp out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "member_list.members[1].peer_urls[0]: expected bin or str, got int");
  kt_buf_free(&r.b);
  /* a member count larger than the body: refused before allocating */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_MEMBER_LIST);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "members");
  msgpack_pack_array(&r.pk, 0x7fffffff);
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &out, &e), KT_EPROTO);
  kt_buf_free(&r.b);
  /* move_leader.target_id must be a non-negative integer */
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, KT_MSG_MOVE_LEADER);
  msgpack_pack_uint64(&r.pk, 3);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, "target_id");
  msgpack_pack_int(&r.pk, -1);
  struct kt_req q;
  CHECK_EQ(dec_req_raw(&r, &q, &e), KT_EPROTO);
  CHECK_STR(e.msg, "move_leader.target_id: integer out of range");
  CHECK_EQ(q.id, 3);
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

TEST(protocol_md_member_examples_are_exact) {
  struct kt_buf b = {0};
  bool all = true;
  struct kt_req ml = {.type = KT_MSG_MOVE_LEADER, .id = 9};
  ml.u.move_leader.target_id = 0x8e9f0a1b2c3d4e5full;
  kt_proto_encode_req(&b, &ml);
  all &= golden(&b, MOVE_LEADER_HEX, "MOVE_LEADER request");
  kt_buf_reset(&b);
  struct kt_bytes purl = B("http://10.0.0.1:2480"), curl = B("http://10.0.0.1:2479");
  struct kt_member_info m = {.id = 0x8e9f0a1b2c3d4e5full,
                             .name = B("m1"),
                             .peer_urls = &purl,
                             .n_peer_urls = 1,
                             .client_urls = &curl,
                             .n_client_urls = 1};
  struct kt_resp r = {.type = KT_MSG_MEMBER_LIST,
                      .id = 10,
                      .header = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                 .member_id = 0x8e9f0a1b2c3d4e5full,
                                 .raft_term = 2}};
  r.u.member_list = (struct kt_member_list_resp){&m, 1};
  kt_proto_encode_resp(&b, &r);
  all &= golden(&b, MEMBER_LIST_HEX, "MEMBER_LIST response");
  kt_buf_reset(&b);
  struct kt_bytes newurl = B("http://10.0.0.4:2480");
  struct kt_req add = {.type = KT_MSG_MEMBER_ADD, .id = 13};
  add.u.member =
      (struct kt_member_change_req){.peer_urls = &newurl, .n_peer_urls = 1, .is_learner = true};
  kt_proto_encode_req(&b, &add);
  all &= golden(&b, MEMBER_ADD_HEX, "MEMBER_ADD request");
  kt_buf_free(&b);
  CHECK(all);
}

/* ---- watch and lease messages (types 16-18, 24-28) ---- */

static const uint8_t lease_types[] = {KT_MSG_LEASE_GRANT, KT_MSG_LEASE_REVOKE,
                                      KT_MSG_LEASE_KEEPALIVE, KT_MSG_LEASE_TTL,
                                      KT_MSG_LEASE_LEASES};

TEST(watch_lease_requests_round_trip) {
  struct kt_req r = {.type = KT_MSG_WATCH_CREATE, .id = 1};
  r.u.watch_create = (struct kt_watch_create_req){.key = B("a\0b"),
                                                  .range_end = B("\0"),
                                                  .start_revision = INT64_MAX,
                                                  .prev_kv = true,
                                                  .no_put = true,
                                                  .no_delete = true,
                                                  .progress_notify = true,
                                                  .fragment = true};
  CHECK(rt_req(&r));
  r.u.watch_create = (struct kt_watch_create_req){.key = B("k"), .start_revision = -1};
  CHECK(rt_req(&r));
  r = (struct kt_req){.type = KT_MSG_WATCH_CANCEL, .id = UINT64_MAX};
  r.u.watch_cancel.watch_id = INT64_MAX;
  CHECK(rt_req(&r));
  r.u.watch_cancel.watch_id = INT64_MIN;
  CHECK(rt_req(&r));
  r = (struct kt_req){.type = KT_MSG_WATCH_PROGRESS, .id = 3};
  CHECK(rt_req(&r));
  for (size_t i = 0; i < KT_ARRAY_LEN(lease_types); i++) {
    r = (struct kt_req){.type = lease_types[i], .id = 10 + i};
    r.u.lease = (struct kt_lease_req){.id = INT64_MAX, .ttl = INT64_MAX, .keys = true};
    CHECK(rt_req(&r));
    r.u.lease = (struct kt_lease_req){.id = 0x694d77d1a3f0c207ll, .ttl = 60};
    CHECK(rt_req(&r));
  }
  /* all zero: the smallest body [type, id, {}] */
  uint8_t all[] = {KT_MSG_WATCH_CREATE, KT_MSG_WATCH_CANCEL, KT_MSG_WATCH_PROGRESS,
                   KT_MSG_LEASE_GRANT,  KT_MSG_LEASE_REVOKE, KT_MSG_LEASE_KEEPALIVE,
                   KT_MSG_LEASE_TTL,    KT_MSG_LEASE_LEASES};
  for (size_t i = 0; i < KT_ARRAY_LEN(all); i++) {
    r = (struct kt_req){.type = all[i], .id = 0};
    CHECK(rt_req(&r));
    struct kt_buf f = {0};
    kt_proto_encode_req(&f, &r);
    CHECK_EQ(f.len, 8);
    CHECK_EQ(f.p[5], all[i]);
    CHECK_EQ(f.p[7], 0x80);
    kt_buf_free(&f);
    /* the WAL form decodes to the same request */
    r.id = 77;
    kt_proto_encode_req_body(&f, &r);
    struct kt_req out;
    struct kt_err e;
    CHECK_EQ(kt_proto_decode_req(f.p, f.len, &arena, &out, &e), 0);
    CHECK_EQ(out.type, all[i]);
    CHECK_EQ(out.id, 0);
    kt_buf_free(&f);
  }
  CHECK_STR(kt_proto_type_name(KT_MSG_WATCH_CREATE), "watch_create");
  CHECK_STR(kt_proto_type_name(KT_MSG_WATCH_CANCEL), "watch_cancel");
  CHECK_STR(kt_proto_type_name(KT_MSG_WATCH_PROGRESS), "watch_progress");
  CHECK_STR(kt_proto_type_name(KT_MSG_LEASE_GRANT), "lease_grant");
  CHECK_STR(kt_proto_type_name(KT_MSG_LEASE_REVOKE), "lease_revoke");
  CHECK_STR(kt_proto_type_name(KT_MSG_LEASE_KEEPALIVE), "lease_keepalive");
  CHECK_STR(kt_proto_type_name(KT_MSG_LEASE_TTL), "lease_ttl");
  CHECK_STR(kt_proto_type_name(KT_MSG_LEASE_LEASES), "lease_leases");
  CHECK_STR(kt_proto_type_name(19), "unknown");
  CHECK_STR(kt_proto_type_name(29), "unknown");
  kt_arena_reset(&arena);
}

static struct kt_event events3[3] = {
    {.type = KT_EVENT_PUT,
     .kv = {.key = {(const uint8_t *)"a", 1},
            .value = {(const uint8_t *)"1", 1},
            .create_revision = 2,
            .mod_revision = 3,
            .version = 2}},
    {.type = KT_EVENT_PUT,
     .kv = {.key = {(const uint8_t *)"b", 1},
            .value = {(const uint8_t *)"new", 3},
            .create_revision = 1,
            .mod_revision = INT64_MAX,
            .version = INT64_MAX,
            .lease = INT64_MAX},
     .has_prev_kv = true,
     .prev_kv = {.key = {(const uint8_t *)"b", 1},
                 .value = {(const uint8_t *)"old", 3},
                 .create_revision = 1,
                 .mod_revision = 1,
                 .version = 1,
                 .lease = INT64_MIN}},
    {.type = KT_EVENT_DELETE,
     .kv = {.key = {(const uint8_t *)"c\xff", 2}, .mod_revision = 1LL << 40},
     .has_prev_kv = true}, /* an all-zero prev_kv is still present */
};

TEST(watch_frames_round_trip) {
  struct kt_header h = {
      .cluster_id = UINT64_MAX, .member_id = 42, .revision = INT64_MAX, .raft_term = 7};
  /* created */
  struct kt_resp r = {.type = KT_MSG_WATCH_CREATE, .id = 5, .header = h};
  r.u.watch = (struct kt_watch_resp){.watch_id = 0, .created = true};
  CHECK(rt_resp(&r));
  /* events, with and without prev_kv */
  r.u.watch = (struct kt_watch_resp){
      .watch_id = INT64_MAX, .fragment = true, .events = events3, .n_events = 3};
  CHECK(rt_resp(&r));
  /* progress: no events at all */
  r.u.watch = (struct kt_watch_resp){.watch_id = 7};
  CHECK(rt_resp(&r));
  /* canceled by compaction */
  r.u.watch = (struct kt_watch_resp){.watch_id = 7,
                                     .canceled = true,
                                     .compact_revision = INT64_MAX,
                                     .cancel_reason = B("mvcc: required revision has been "
                                                        "compacted")};
  CHECK(rt_resp(&r));
  r.u.watch = (struct kt_watch_resp){.watch_id = INT64_MIN, .created = true, .canceled = true};
  CHECK(rt_resp(&r));
  /* the decoded events: nil prev_kv reads as absent */
  struct kt_buf f = {0};
  r.u.watch = (struct kt_watch_resp){.watch_id = 1, .events = events3, .n_events = 3};
  kt_proto_encode_resp(&f, &r);
  struct kt_resp out;
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(f.p + 4, f.len - 4, &arena, &out, &e), 0);
  CHECK_EQ(out.type, KT_MSG_WATCH_CREATE);
  CHECK_EQ(out.u.watch.n_events, 3);
  CHECK(!out.u.watch.events[0].has_prev_kv);
  CHECK(out.u.watch.events[1].has_prev_kv);
  CHECK_EQ(out.u.watch.events[1].prev_kv.lease, INT64_MIN);
  CHECK_EQ(out.u.watch.events[2].type, KT_EVENT_DELETE);
  CHECK(out.u.watch.events[2].has_prev_kv);
  CHECK_EQ(out.u.watch.events[2].kv.mod_revision, 1LL << 40);
  kt_buf_free(&f);

  /* a big frame: 5000 events with 1 KiB values and prev_kvs */
  enum { N = 5000 };
  static struct kt_event big[N];
  static char val[1024];
  memset(val, 'v', sizeof val);
  for (int i = 0; i < N; i++) {
    big[i] = events3[1];
    big[i].kv.value = (struct kt_bytes){(const uint8_t *)val, sizeof val};
    big[i].prev_kv.value = (struct kt_bytes){(const uint8_t *)val, (uint32_t)(i % 300)};
    big[i].has_prev_kv = i % 2;
    big[i].type = (uint8_t)(i % 2);
  }
  r.u.watch = (struct kt_watch_resp){.watch_id = 9, .events = big, .n_events = N};
  CHECK(rt_resp(&r));
  kt_arena_reset(&arena);

  /* fan-out: events encoded once, the frame around them per watcher, byte
   * for byte what kt_proto_encode_resp makes (header given or pre-encoded;
   * watch_id zero, small, negative, large; with and without fragment) */
  struct kt_buf ev = {0}, head = {0};
  kt_proto_encode_watch_header(&head, &h);
  const int64_t wids[] = {0, 1, 127, 128, -1, INT64_MIN, INT64_MAX};
  const uint64_t ids[] = {0, 5, 200, UINT64_MAX};
  const uint32_t counts[] = {1, 3, 16, N};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    const struct kt_event *evs = counts[c] <= 3 ? events3 : big;
    kt_buf_reset(&ev);
    kt_proto_encode_watch_events(&ev, evs, counts[c]);
    for (size_t i = 0; i < sizeof wids / sizeof *wids; i++)
      for (size_t j = 0; j < sizeof ids / sizeof *ids; j++)
        for (int frag = 0; frag < 2; frag++) {
          struct kt_buf want = {0}, got = {0}, got2 = {0};
          r = (struct kt_resp){.type = KT_MSG_WATCH_CREATE, .id = ids[j], .header = h};
          r.u.watch = (struct kt_watch_resp){.watch_id = wids[i],
                                             .fragment = frag,
                                             .events = (struct kt_event *)evs,
                                             .n_events = counts[c]};
          kt_proto_encode_resp(&want, &r);
          kt_proto_encode_watch_frame(&got, ids[j], &h, NULL, 0, wids[i], frag, ev.p, ev.len);
          kt_proto_encode_watch_frame(&got2, ids[j], NULL, head.p, head.len, wids[i], frag, ev.p,
                                      ev.len);
          CHECK(got.len == want.len && memcmp(got.p, want.p, want.len) == 0);
          CHECK(got2.len == want.len && memcmp(got2.p, want.p, want.len) == 0);
          kt_buf_free(&want);
          kt_buf_free(&got);
          kt_buf_free(&got2);
        }
  }
  kt_buf_free(&ev);
  kt_buf_free(&head);

  /* CANCEL and PROGRESS responses: the header only */
  r = (struct kt_resp){.type = KT_MSG_WATCH_CANCEL, .id = 6, .header = h};
  CHECK(rt_resp(&r));
  r = (struct kt_resp){.type = KT_MSG_WATCH_PROGRESS, .id = 7, .header = h};
  CHECK(rt_resp(&r));
  kt_arena_reset(&arena);
}

TEST(lease_responses_round_trip) {
  struct kt_header h = {.cluster_id = 1, .member_id = 2, .revision = 3, .raft_term = 4};
  struct kt_bytes keys[3] = {B("k1"), B(""), B("\xff\x00")};
  int64_t ids[4] = {1, INT64_MAX, INT64_MIN, -1};
  for (size_t i = 0; i < KT_ARRAY_LEN(lease_types); i++) {
    struct kt_resp r = {.type = lease_types[i], .id = 100 + i, .header = h};
    CHECK(rt_resp(&r));
    r.u.lease = (struct kt_lease_resp){.id = INT64_MAX,
                                       .ttl = -1,
                                       .granted_ttl = INT64_MAX,
                                       .keys = keys,
                                       .n_keys = 3,
                                       .leases = ids,
                                       .n_leases = 4};
    CHECK(rt_resp(&r));
  }
  kt_arena_reset(&arena);
}

/* A response of `type` whose payload is the one field `field`, written by fn. */
static int one_resp_field(int type, const char *field, field_fn fn, struct kt_resp *out,
                          struct kt_err *e) {
  static struct raw r;
  kt_buf_free(&r.b);
  raw_init(&r);
  msgpack_pack_array(&r.pk, 3);
  msgpack_pack_int(&r.pk, type);
  msgpack_pack_uint64(&r.pk, 31);
  msgpack_pack_map(&r.pk, 1);
  raw_str(&r, field);
  fn(&r);
  return kt_proto_decode_resp(r.b.p, r.b.len, &arena, out, e);
}

/* events: [[type, kv, prev_kv]] with the given parts */
static int ev_type = 0, ev_len = 3;
static bool ev_prev_bad = false;
static void v_events(struct raw *r) {
  msgpack_pack_array(&r->pk, 1);
  msgpack_pack_array(&r->pk, (size_t)ev_len);
  msgpack_pack_int(&r->pk, ev_type);
  if (ev_len < 2)
    return;
  msgpack_pack_array(&r->pk, 6);
  raw_str(r, "k");
  raw_str(r, "v");
  for (int i = 0; i < 4; i++)
    msgpack_pack_int(&r->pk, i + 1);
  if (ev_len < 3)
    return;
  if (ev_prev_bad)
    msgpack_pack_array(&r->pk, 5);
  else
    msgpack_pack_nil(&r->pk);
  for (int i = 0; ev_prev_bad && i < 5; i++)
    msgpack_pack_int(&r->pk, 1);
  for (int i = 3; i < ev_len; i++) /* extras: skipped */
    msgpack_pack_map(&r->pk, 0);
}
static void v_leases_str(struct raw *r) {
  msgpack_pack_array(&r->pk, 2);
  msgpack_pack_int(&r->pk, 1);
  raw_str(r, "x");
}
static void v_keys_int(struct raw *r) {
  msgpack_pack_array(&r->pk, 1);
  msgpack_pack_int(&r->pk, 1);
}

TEST(watch_lease_malformed_inputs) {
  struct {
    int type;
    const char *field;
    field_fn fn;
    int code;
    const char *msg;
  } cases[] = {
      {KT_MSG_WATCH_CREATE, "start_revision", v_str, KT_EPROTO,
       "watch_create.start_revision: expected int, got str"},
      {KT_MSG_WATCH_CREATE, "start_revision", v_big, KT_EPROTO,
       "watch_create.start_revision: integer out of range"},
      {KT_MSG_WATCH_CREATE, "key", v_int, KT_EPROTO,
       "watch_create.key: expected bin or str, got int"},
      {KT_MSG_WATCH_CREATE, "range_end", v_true, KT_EPROTO,
       "watch_create.range_end: expected bin or str, got bool"},
      {KT_MSG_WATCH_CREATE, "prev_kv", v_int, KT_EPROTO,
       "watch_create.prev_kv: expected bool, got int"},
      {KT_MSG_WATCH_CREATE, "no_put", v_str, KT_EPROTO,
       "watch_create.no_put: expected bool, got str"},
      {KT_MSG_WATCH_CREATE, "no_delete", v_map, KT_EPROTO,
       "watch_create.no_delete: expected bool, got map"},
      {KT_MSG_WATCH_CREATE, "progress_notify", v_bin, KT_EPROTO,
       "watch_create.progress_notify: expected bool, got bin"},
      {KT_MSG_WATCH_CREATE, "fragment", v_float, KT_EPROTO,
       "watch_create.fragment: expected bool, got float"},
      {KT_MSG_WATCH_CANCEL, "watch_id", v_true, KT_EPROTO,
       "watch_cancel.watch_id: expected int, got bool"},
      {KT_MSG_LEASE_GRANT, "ttl", v_str, KT_EPROTO, "lease_grant.ttl: expected int, got str"},
      {KT_MSG_LEASE_REVOKE, "id", v_big, KT_EPROTO, "lease_revoke.id: integer out of range"},
      {KT_MSG_LEASE_KEEPALIVE, "id", v_float, KT_EPROTO,
       "lease_keepalive.id: expected int, got float"},
      {KT_MSG_LEASE_TTL, "keys", v_int, KT_EPROTO, "lease_ttl.keys: expected bool, got int"},
      {KT_MSG_LEASE_LEASES, "id", v_map, KT_EPROTO, "lease_leases.id: expected int, got map"},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
    struct kt_req out;
    struct kt_err e;
    int rc = one_field(cases[i].type, cases[i].field, cases[i].fn, &out, &e);
    if (rc != cases[i].code || strcmp(e.msg, cases[i].msg) != 0)
      fprintf(stderr, "case %zu: rc %d msg \"%s\"\n", i, rc, e.msg);
    CHECK_EQ(rc, cases[i].code);
    CHECK_STR(e.msg, cases[i].msg);
    CHECK_EQ(out.id, 31);
    CHECK_EQ(out.type, cases[i].type);
  }
  /* accepted: nil, str keys, unknown fields; WATCH_PROGRESS ignores fields */
  struct kt_req q;
  struct kt_err e;
  CHECK_EQ(one_field(KT_MSG_WATCH_CREATE, "start_revision", v_nil, &q, &e), 0);
  CHECK_EQ(one_field(KT_MSG_WATCH_CREATE, "key", v_str, &q, &e), 0);
  CHECK_BYTES(q.u.watch_create.key.p, q.u.watch_create.key.n, "x");
  CHECK_EQ(one_field(KT_MSG_WATCH_CREATE, "start_revision", v_neg, &q, &e), 0);
  CHECK_EQ(q.u.watch_create.start_revision, -5);
  CHECK_EQ(one_field(KT_MSG_WATCH_PROGRESS, "watch_id", v_str, &q, &e), 0);
  CHECK_EQ(one_field(KT_MSG_LEASE_GRANT, "future", v_float, &q, &e), 0);
  CHECK_EQ(one_field(KT_MSG_LEASE_GRANT, "ttl", v_99, &q, &e), 0);
  CHECK_EQ(q.u.lease.ttl, 99);

  /* responses */
  struct kt_resp out;
  ev_type = 2, ev_len = 3, ev_prev_bad = false;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_events, &out, &e), KT_EINVAL);
  CHECK_STR(e.msg, "watch.events[0].type: unknown value 2");
  CHECK_EQ(out.id, 31);
  ev_type = -1;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_events, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.events[0].type: integer out of range");
  ev_type = 1, ev_len = 2;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_events, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.events[0]: expected [type, kv, prev_kv], got an array of 2");
  ev_len = 3, ev_prev_bad = true;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_events, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "watch.events[0].prev_kv: expected [key, value, create_revision") != NULL);
  /* a longer event array is accepted, its extras ignored */
  ev_len = 5, ev_prev_bad = false;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_events, &out, &e), 0);
  CHECK_EQ(out.u.watch.n_events, 1);
  CHECK_EQ(out.u.watch.events[0].type, KT_EVENT_DELETE);
  CHECK(!out.u.watch.events[0].has_prev_kv);
  CHECK_BYTES(out.u.watch.events[0].kv.key.p, out.u.watch.events[0].kv.key.n, "k");
  CHECK_EQ(out.u.watch.events[0].kv.lease, 4);
  ev_type = 0, ev_len = 3;
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "watch_id", v_str, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.watch_id: expected int, got str");
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "created", v_int, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.created: expected bool, got int");
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "cancel_reason", v_int, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.cancel_reason: expected bin or str, got int");
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CREATE, "events", v_map, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.events: expected array, got map");
  CHECK_EQ(one_resp_field(KT_MSG_LEASE_LEASES, "leases", v_leases_str, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "lease_leases.leases[1]: expected int, got str");
  CHECK_EQ(one_resp_field(KT_MSG_LEASE_TTL, "keys", v_keys_int, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "lease_ttl.keys[0]: expected bin or str, got int");
  CHECK_EQ(one_resp_field(KT_MSG_LEASE_GRANT, "granted_ttl", v_big, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "lease_grant.granted_ttl: integer out of range");
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_CANCEL, "header", v_str, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch_cancel.header: expected array, got str");
  CHECK_EQ(one_resp_field(KT_MSG_WATCH_PROGRESS, "anything", v_map, &out, &e), 0);
  kt_arena_reset(&arena);
}

TEST(watch_lease_truncated_and_huge) {
  /* every prefix of a WATCH frame and of a LEASE_TTL response is EPROTO */
  struct kt_resp r = {.type = KT_MSG_WATCH_CREATE, .id = 5, .header = {.revision = 9}}, out;
  r.u.watch = (struct kt_watch_resp){.watch_id = 3,
                                     .canceled = true,
                                     .compact_revision = 4,
                                     .cancel_reason = B("x"),
                                     .events = events3,
                                     .n_events = 3};
  struct kt_bytes keys[2] = {B("k1"), B("k2")};
  int64_t ids[2] = {5, 1LL << 50};
  struct kt_resp l = {.type = KT_MSG_LEASE_TTL, .id = 6};
  l.u.lease = (struct kt_lease_resp){
      .id = 5, .ttl = 9, .keys = keys, .n_keys = 2, .leases = ids, .n_leases = 2};
  const struct kt_resp *which[2] = {&r, &l};
  for (int w = 0; w < 2; w++) {
    struct kt_buf f = {0};
    kt_proto_encode_resp(&f, which[w]);
    for (size_t n = 0; n < f.len - 4; n++) {
      uint8_t *cp = malloc(n ? n : 1);
      memcpy(cp, f.p + 4, n);
      struct kt_err e;
      int rc = kt_proto_decode_resp(cp, n, &arena, &out, &e);
      free(cp);
      CHECK_EQ(rc, KT_EPROTO);
    }
    kt_buf_free(&f);
  }
  /* and of a WATCH_CREATE request */
  struct kt_req q = {.type = KT_MSG_WATCH_CREATE, .id = 8}, qout;
  q.u.watch_create = (struct kt_watch_create_req){
      .key = B("foo"), .range_end = B("fop"), .start_revision = 3, .fragment = true};
  struct kt_buf f = {0};
  kt_proto_encode_req(&f, &q);
  for (size_t n = 0; n < f.len - 4; n++) {
    uint8_t *cp = malloc(n ? n : 1);
    memcpy(cp, f.p + 4, n);
    struct kt_err e;
    int rc = kt_proto_decode_req(cp, n, &arena, &qout, &e);
    free(cp);
    CHECK_EQ(rc, KT_EPROTO);
    CHECK(strstr(e.msg, "truncated") != NULL);
  }
  kt_buf_free(&f);
  /* counts larger than the body: refused before anything is allocated */
  static const char *fields[] = {"events", "keys", "leases"};
  static const int types[] = {KT_MSG_WATCH_CREATE, KT_MSG_LEASE_TTL, KT_MSG_LEASE_LEASES};
  for (int i = 0; i < 3; i++) {
    struct raw w;
    raw_init(&w);
    msgpack_pack_array(&w.pk, 3);
    msgpack_pack_int(&w.pk, types[i]);
    msgpack_pack_uint64(&w.pk, 3);
    msgpack_pack_map(&w.pk, 1);
    raw_str(&w, fields[i]);
    msgpack_pack_array(&w.pk, 0xffffffffu);
    for (int j = 0; j < 20; j++) /* a few bytes: fewer than 10 per claimed event */
      msgpack_pack_nil(&w.pk);
    struct kt_err e;
    size_t used = arena.used_total;
    CHECK_EQ(kt_proto_decode_resp(w.b.p, w.b.len, &arena, &out, &e), KT_EPROTO);
    CHECK(strstr(e.msg, "truncated") != NULL);
    CHECK(arena.used_total - used < 4096);
    kt_buf_free(&w.b);
  }
  /* 3 claimed events in 29 bytes: fewer than 10 bytes each */
  struct raw w;
  raw_init(&w);
  msgpack_pack_array(&w.pk, 3);
  msgpack_pack_int(&w.pk, KT_MSG_WATCH_CREATE);
  msgpack_pack_uint64(&w.pk, 3);
  msgpack_pack_map(&w.pk, 1);
  raw_str(&w, "events");
  msgpack_pack_array(&w.pk, 3);
  for (int j = 0; j < 29; j++)
    msgpack_pack_nil(&w.pk);
  struct kt_err e;
  CHECK_EQ(kt_proto_decode_resp(w.b.p, w.b.len, &arena, &out, &e), KT_EPROTO);
  CHECK_STR(e.msg, "watch.events: truncated");
  kt_buf_free(&w.b);
  kt_arena_reset(&arena);
}

/* PROTOCOL.md 11: the WATCH_CREATE request, WATCH frame and LEASE_GRANT examples */
#define WATCH_CREATE_HEX                                                                           \
  "00 00 00 25 93 10 0b 83 a3 6b 65 79 c4 03 66 6f 6f a9 72 61 6e 67 65 5f 65 6e "                 \
  "64 c4 03 66 6f 70 a7 70 72 65 76 5f 6b 76 c3"
#define WATCH_FRAME_HEX                                                                            \
  "00 00 00 52 93 10 0b 83 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 09 02 a8 77 61 74 63 68 5f 69 64 03 a6 65 76 65 6e 74 "                 \
  "73 91 93 00 96 c4 03 66 6f 6f c4 03 62 61 72 05 09 05 00 96 c4 03 66 6f 6f c4 "                 \
  "03 6f 6c 64 05 08 04 00"
#define LEASE_GRANT_HEX                                                                            \
  "00 00 00 31 93 18 0c 83 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 09 02 a2 69 64 cf 69 4d 77 d1 a3 f0 c2 07 a3 74 74 6c "                 \
  "3c"

TEST(protocol_md_watch_examples_are_exact) {
  struct kt_buf b = {0};
  bool all = true;
  struct kt_req wc = {.type = KT_MSG_WATCH_CREATE, .id = 11};
  wc.u.watch_create =
      (struct kt_watch_create_req){.key = B("foo"), .range_end = B("fop"), .prev_kv = true};
  kt_proto_encode_req(&b, &wc);
  all &= golden(&b, WATCH_CREATE_HEX, "WATCH_CREATE request");
  kt_buf_reset(&b);
  struct kt_event ev = {.type = KT_EVENT_PUT,
                        .kv = {.key = B("foo"),
                               .value = B("bar"),
                               .create_revision = 5,
                               .mod_revision = 9,
                               .version = 5},
                        .has_prev_kv = true,
                        .prev_kv = {.key = B("foo"),
                                    .value = B("old"),
                                    .create_revision = 5,
                                    .mod_revision = 8,
                                    .version = 4}};
  struct kt_resp wr = {.type = KT_MSG_WATCH_CREATE,
                       .id = 11,
                       .header = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                  .member_id = 0x8e9f0a1b2c3d4e5full,
                                  .revision = 9,
                                  .raft_term = 2}};
  wr.u.watch = (struct kt_watch_resp){.watch_id = 3, .events = &ev, .n_events = 1};
  kt_proto_encode_resp(&b, &wr);
  all &= golden(&b, WATCH_FRAME_HEX, "WATCH frame");
  kt_buf_reset(&b);
  struct kt_resp lg = {.type = KT_MSG_LEASE_GRANT,
                       .id = 12,
                       .header = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                  .member_id = 0x8e9f0a1b2c3d4e5full,
                                  .revision = 9,
                                  .raft_term = 2}};
  lg.u.lease = (struct kt_lease_resp){.id = 0x694d77d1a3f0c207ll, .ttl = 60};
  kt_proto_encode_resp(&b, &lg);
  all &= golden(&b, LEASE_GRANT_HEX, "LEASE_GRANT response");
  kt_buf_free(&b);
  CHECK(all);
}

/* The hex of each example above is the first paragraph of a code block in
 * net/PROTOCOL.md, exactly (run from the repository root, as `make test`
 * does). */
TEST(protocol_md_holds_the_checked_examples) {
  FILE *f = fopen("net/PROTOCOL.md", "rb");
  CHECK(f != NULL);
  static char md[1 << 17];
  size_t n = fread(md, 1, sizeof md - 1, f);
  fclose(f);
  CHECK(n < sizeof md - 1);
  md[n] = 0;
  /* collect each code block's first paragraph, whitespace runs as one space */
  static char paras[64][2048];
  int np = 0;
  bool in_code = false;
  for (char *line = strtok(md, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "```", 3) == 0) {
      in_code = !in_code;
      if (in_code && np < 64)
        paras[np++][0] = 0;
      continue;
    }
    /* strtok skips empty lines: a paragraph ends at a line that is not hex */
    if (!in_code || np == 0)
      continue;
    char *p = paras[np - 1];
    if (p[0] == '!')
      continue; /* this block's first paragraph is closed */
    bool hexline = true;
    for (const char *c = line; *c && hexline; c++)
      hexline = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == ' ';
    if (!hexline) {
      memmove(p + 1, p, strlen(p) + 1);
      p[0] = '!'; /* closed */
      continue;
    }
    size_t len = strlen(p);
    if (len + strlen(line) + 2 < sizeof paras[0])
      snprintf(p + len, sizeof paras[0] - len, "%s%s", len ? " " : "", line);
  }
  const char *want[] = {MOVE_LEADER_HEX,  MEMBER_LIST_HEX, MEMBER_ADD_HEX,
                        WATCH_CREATE_HEX, WATCH_FRAME_HEX, LEASE_GRANT_HEX};
  for (size_t i = 0; i < KT_ARRAY_LEN(want); i++) {
    bool found = false;
    for (int j = 0; j < np && !found; j++)
      found = strcmp(paras[j] + (paras[j][0] == '!'), want[i]) == 0;
    if (!found)
      fprintf(stderr, "not in PROTOCOL.md: %s\n", want[i]);
    CHECK(found);
  }
}

static bool leader_eq(const struct kt_leader_key *a, const struct kt_leader_key *b) {
  return beq(a->name, b->name) && beq(a->key, b->key) && a->rev == b->rev && a->lease == b->lease;
}

/* LOCK .. RESIGN: every request and response field survives encode/decode and
 * re-encodes to the same bytes. */
TEST(lock_election_round_trip) {
  struct kt_leader_key ld = {B("elec"), B("elec/694d"), INT64_MAX, -7};
  for (int t = KT_MSG_LOCK; t <= KT_MSG_RESIGN; t++) {
    struct kt_req q = {.type = (uint8_t)t, .id = 9};
    q.u.lock = (struct kt_lock_req){B("name"), B("k\x00y"), B("val"), INT64_MIN, ld};
    struct kt_buf f = {0}, g = {0};
    kt_proto_encode_req(&f, &q);
    struct kt_req out;
    struct kt_err e = {0};
    CHECK_EQ(kt_proto_decode_req(f.p + 4, f.len - 4, &arena, &out, &e), 0);
    CHECK_EQ(out.type, t);
    CHECK(beq(out.u.lock.name, q.u.lock.name) && beq(out.u.lock.key, q.u.lock.key) &&
          beq(out.u.lock.value, q.u.lock.value) && out.u.lock.lease == INT64_MIN &&
          leader_eq(&out.u.lock.leader, &ld));
    kt_proto_encode_req(&g, &out);
    CHECK(g.len == f.len && memcmp(g.p, f.p, f.len) == 0);
    kt_buf_free(&f);
    kt_buf_free(&g);
    struct kt_resp r = {.type = (uint8_t)t, .id = 10, .header = {1, 2, 3, 4}};
    r.u.lock = (struct kt_lock_resp){.key = B("elec/694d"), .leader = ld, .has_kv = true};
    r.u.lock.kv = (struct kt_kv){B("elec/694d"), B("v"), 5, 6, 1, 77};
    kt_proto_encode_resp(&f, &r);
    struct kt_resp ro;
    CHECK_EQ(kt_proto_decode_resp(f.p + 4, f.len - 4, &arena, &ro, &e), 0);
    CHECK(beq(ro.u.lock.key, r.u.lock.key) && leader_eq(&ro.u.lock.leader, &ld) &&
          ro.u.lock.has_kv && ro.u.lock.kv.lease == 77 && ro.header.revision == 3);
    kt_proto_encode_resp(&g, &ro);
    CHECK(g.len == f.len && memcmp(g.p, f.p, f.len) == 0);
    kt_buf_free(&f);
    kt_buf_free(&g);
  }
  /* a leader of the wrong type names its path */
  const uint8_t bad[] = {0x93, 0x53, 0x01, 0x81, 0xa6, 'l', 'e', 'a', 'd', 'e', 'r', 0x05};
  struct kt_req out;
  struct kt_err e = {0};
  CHECK_EQ(kt_proto_decode_req(bad, sizeof bad, &arena, &out, &e), KT_EPROTO);
  CHECK(strstr(e.msg, "proclaim.leader") != NULL);
  kt_arena_reset(&arena);
}
