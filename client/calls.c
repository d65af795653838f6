/* client/calls.c — libketch's requests into wire requests: KV and txn,
 * compaction, status, membership, move-leader, maintenance (defragment,
 * hash-kv, alarm, snapshot).
 *
 * Owns: nothing across calls. Each public call checks its arguments,
 * converts the public request struct into a struct kt_req (byte strings
 * point into the caller's memory, computed ones into enc_arena: valid for
 * the submit only) and submits it (request.c). The synchronous form of each
 * call is its asynchronous form plus a wait (KT_CL_SYNC).
 */
#include "client_int.h"

#include <string.h>

static int bytes_in(struct kt_bytes *b, const void *p, size_t n) {
  if (n > UINT32_MAX || (n && !p))
    return KETCH_EINVAL;
  b->p = n ? p : (const uint8_t *)"";
  b->n = (uint32_t)n;
  return 0;
}

static const uint8_t zero_byte[1] = {0};

int kt_cl_range_in(struct kt_arena *a, struct kt_bytes *key, struct kt_bytes *end, const void *k,
                   size_t kn, const void *e, size_t en, bool prefix, bool from_key) {
  if (bytes_in(key, k, kn) || bytes_in(end, e, en))
    return KETCH_EINVAL;
  if (!prefix && !from_key)
    return 0;
  if ((prefix && from_key) || en)
    return KETCH_EINVAL;
  if (kn == 0) { /* all keys */
    *key = (struct kt_bytes){zero_byte, 1};
    *end = (struct kt_bytes){zero_byte, 1};
    return 0;
  }
  if (from_key) {
    *end = (struct kt_bytes){zero_byte, 1};
    return 0;
  }
  uint8_t *o = kt_arena_alloc(a, kn);
  end->n = (uint32_t)ketch_prefix_end(k, kn, o);
  end->p = o;
  return 0;
}

static int op_in(struct kt_arena *a, struct kt_request_op *o, const ketch_op *op, int depth);

static int range_req_in(struct kt_arena *a, struct kt_range_req *r, const ketch_range_req *q) {
  memset(r, 0, sizeof *r);
  if (!q || q->sort_order < 0 || q->sort_order > KETCH_SORT_DESCEND || q->sort_target < 0 ||
      q->sort_target > KETCH_SORT_VALUE || q->limit < 0)
    return KETCH_EINVAL;
  int err = kt_cl_range_in(a, &r->key, &r->range_end, q->key, q->key_len, q->range_end,
                           q->range_end_len, q->prefix, q->from_key);
  if (err)
    return err;
  r->limit = q->limit;
  r->revision = q->revision;
  r->sort_order = (uint8_t)q->sort_order;
  r->sort_target = (uint8_t)q->sort_target;
  r->serializable = q->serializable;
  r->keys_only = q->keys_only;
  r->count_only = q->count_only;
  r->min_mod_revision = q->min_mod_revision;
  r->max_mod_revision = q->max_mod_revision;
  r->min_create_revision = q->min_create_revision;
  r->max_create_revision = q->max_create_revision;
  return 0;
}

static int put_req_in(struct kt_put_req *r, const ketch_put_req *q) {
  memset(r, 0, sizeof *r);
  if (!q || bytes_in(&r->key, q->key, q->key_len) || bytes_in(&r->value, q->value, q->value_len))
    return KETCH_EINVAL;
  r->lease = q->lease;
  r->prev_kv = q->prev_kv;
  r->ignore_value = q->ignore_value;
  r->ignore_lease = q->ignore_lease;
  return 0;
}

static int delete_req_in(struct kt_arena *a, struct kt_delete_req *r, const ketch_delete_req *q) {
  memset(r, 0, sizeof *r);
  if (!q)
    return KETCH_EINVAL;
  r->prev_kv = q->prev_kv;
  return kt_cl_range_in(a, &r->key, &r->range_end, q->key, q->key_len, q->range_end,
                        q->range_end_len, q->prefix, q->from_key);
}

static int ops_in(struct kt_arena *a, struct kt_request_op **out, uint32_t *n_out,
                  const ketch_op *ops, size_t n, int depth) {
  if (n > UINT32_MAX || (n && !ops))
    return KETCH_EINVAL;
  struct kt_request_op *o = n ? kt_arena_alloc(a, sizeof *o * n) : NULL;
  for (size_t i = 0; i < n; i++) {
    int err = op_in(a, &o[i], &ops[i], depth);
    if (err)
      return err;
  }
  *out = o;
  *n_out = (uint32_t)n;
  return 0;
}

static int compare_in(struct kt_compare *m, const ketch_compare *k) {
  memset(m, 0, sizeof *m);
  if (k->result < 0 || k->result > KETCH_CMP_NOT_EQUAL || k->target < 0 ||
      k->target > KETCH_CMP_LEASE || bytes_in(&m->key, k->key, k->key_len) ||
      bytes_in(&m->range_end, k->range_end, k->range_end_len) ||
      bytes_in(&m->value, k->value, k->value_len))
    return KETCH_EINVAL;
  m->result = (uint8_t)k->result;
  m->target = (uint8_t)k->target;
  m->int_value = k->int_value;
  return 0;
}

static int txn_req_in(struct kt_arena *a, struct kt_txn_req *r, const ketch_txn_req *q, int depth) {
  memset(r, 0, sizeof *r);
  if (!q || depth > KT_MAX_TXN_DEPTH || q->n_compare > UINT32_MAX || (q->n_compare && !q->compare))
    return KETCH_EINVAL;
  if (q->n_compare) {
    r->compare = kt_arena_alloc(a, sizeof *r->compare * q->n_compare);
    for (size_t i = 0; i < q->n_compare; i++)
      if (compare_in(&r->compare[i], &q->compare[i]))
        return KETCH_EINVAL;
    r->n_compare = (uint32_t)q->n_compare;
  }
  int err = ops_in(a, &r->success, &r->n_success, q->success, q->n_success, depth);
  return err ? err : ops_in(a, &r->failure, &r->n_failure, q->failure, q->n_failure, depth);
}

static int op_in(struct kt_arena *a, struct kt_request_op *o, const ketch_op *op, int depth) {
  memset(o, 0, sizeof *o);
  o->type = (uint8_t)op->type;
  switch (op->type) {
  case KETCH_OP_RANGE:
    return range_req_in(a, &o->u.range, &op->range);
  case KETCH_OP_PUT:
    return put_req_in(&o->u.put, &op->put);
  case KETCH_OP_DELETE:
    return delete_req_in(a, &o->u.del, &op->del);
  case KETCH_OP_TXN:
    return txn_req_in(a, &o->u.txn, &op->txn, depth + 1);
  default:
    return KETCH_EINVAL;
  }
}

/* RANGE, PUT, DELETE, TXN: req is the public request of that type. */
static int submit_op(ketch_client *c, int type, const void *req, ketch_cb cb, void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = r.u.op.type = (uint8_t)type;
  struct kt_arena *a = &c->enc_arena;
  int err;
  switch (type) {
  case KETCH_OP_RANGE:
    err = range_req_in(a, &r.u.op.u.range, req);
    break;
  case KETCH_OP_PUT:
    err = put_req_in(&r.u.op.u.put, req);
    break;
  case KETCH_OP_DELETE:
    err = delete_req_in(a, &r.u.op.u.del, req);
    break;
  default:
    err = txn_req_in(a, &r.u.op.u.txn, req, 1);
    break;
  }
  if (err) {
    kt_arena_reset(a);
    kt_cl_set_errmsg(c, "%s", "invalid request (see ketch.h for the fields' rules)");
    return err;
  }
  return kt_cl_submit(c, &r, cb, arg);
}

int ketch_get_async(ketch_client *c, const void *key, size_t key_len, ketch_cb cb, void *arg) {
  ketch_range_req q = {.key = key, .key_len = key_len};
  return submit_op(c, KETCH_OP_RANGE, &q, cb, arg);
}
int ketch_range_async(ketch_client *c, const ketch_range_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_RANGE, req, cb, arg);
}
int ketch_put_async(ketch_client *c, const ketch_put_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_PUT, req, cb, arg);
}
int ketch_delete_async(ketch_client *c, const ketch_delete_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_DELETE, req, cb, arg);
}
int ketch_txn_async(ketch_client *c, const ketch_txn_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_TXN, req, cb, arg);
}

int ketch_compact_async(ketch_client *c, int64_t revision, bool physical, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_COMPACT};
  r.u.compact.revision = revision;
  r.u.compact.physical = physical;
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_status_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_STATUS};
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_member_list_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_MEMBER_LIST};
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_move_leader_async(ketch_client *c, uint64_t target_id, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_MOVE_LEADER};
  r.u.move_leader.target_id = target_id;
  return kt_cl_submit(c, &r, cb, arg);
}

/* ADD (urls, learner), REMOVE/PROMOTE (id), UPDATE (id, urls). */
static int member_change(ketch_client *c, uint8_t type, uint64_t id, const char *const *urls,
                         size_t n_urls, bool learner, ketch_cb cb, void *arg) {
  if (n_urls > 64 || (n_urls && !urls))
    return KETCH_EINVAL;
  struct kt_req r = {.type = type};
  r.u.member.id = id;
  r.u.member.is_learner = learner;
  struct kt_bytes v[64];
  for (size_t i = 0; i < n_urls; i++) {
    if (!urls[i])
      return KETCH_EINVAL;
    v[i] = (struct kt_bytes){(const uint8_t *)urls[i], (uint32_t)strlen(urls[i])};
  }
  r.u.member.peer_urls = v;
  r.u.member.n_peer_urls = (uint32_t)n_urls;
  return kt_cl_submit(c, &r, cb, arg);
}

int ketch_member_add_async(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                           bool is_learner, ketch_cb cb, void *arg) {
  return member_change(c, KT_MSG_MEMBER_ADD, 0, peer_urls, n_peer_urls, is_learner, cb, arg);
}
int ketch_member_remove_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg) {
  return member_change(c, KT_MSG_MEMBER_REMOVE, id, NULL, 0, false, cb, arg);
}
int ketch_member_update_async(ketch_client *c, uint64_t id, const char *const *peer_urls,
                              size_t n_peer_urls, ketch_cb cb, void *arg) {
  return member_change(c, KT_MSG_MEMBER_UPDATE, id, peer_urls, n_peer_urls, false, cb, arg);
}
int ketch_member_promote_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg) {
  return member_change(c, KT_MSG_MEMBER_PROMOTE, id, NULL, 0, false, cb, arg);
}

int ketch_snapshot_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_SNAPSHOT};
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_defragment_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_DEFRAGMENT};
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_hash_kv_async(ketch_client *c, int64_t revision, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_HASH_KV};
  r.u.hash_kv.revision = revision;
  return kt_cl_submit(c, &r, cb, arg);
}
int ketch_alarm_async(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_cb cb,
                      void *arg) {
  if (action < KETCH_ALARM_GET || action > KETCH_ALARM_DEACTIVATE || alarm < KETCH_ALARM_NONE ||
      alarm > KETCH_ALARM_CORRUPT) {
    kt_cl_set_errmsg(c, "%s", "unknown alarm action or type");
    return KETCH_EINVAL;
  }
  struct kt_req r = {.type = KT_MSG_ALARM};
  r.u.alarm = (struct kt_alarm_req){(uint8_t)action, member_id, (uint8_t)alarm};
  return kt_cl_submit(c, &r, cb, arg);
}

/* ---- the synchronous forms ---- */

int ketch_get(ketch_client *c, const void *key, size_t key_len, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_get_async(c, key, key_len, kt_cl_sync_cb, &w));
}
int ketch_range(ketch_client *c, const ketch_range_req *req, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_range_async(c, req, kt_cl_sync_cb, &w));
}
int ketch_put(ketch_client *c, const ketch_put_req *req, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_put_async(c, req, kt_cl_sync_cb, &w));
}
int ketch_delete(ketch_client *c, const ketch_delete_req *req, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_delete_async(c, req, kt_cl_sync_cb, &w));
}
int ketch_txn(ketch_client *c, const ketch_txn_req *req, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_txn_async(c, req, kt_cl_sync_cb, &w));
}
int ketch_compact(ketch_client *c, int64_t revision, bool physical, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_compact_async(c, revision, physical, kt_cl_sync_cb, &w));
}
int ketch_status(ketch_client *c, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_status_async(c, kt_cl_sync_cb, &w));
}
int ketch_member_list(ketch_client *c, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_member_list_async(c, kt_cl_sync_cb, &w));
}
int ketch_member_add(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                     bool is_learner, ketch_result **out) {
  KT_CL_SYNC(c, out,
             ketch_member_add_async(c, peer_urls, n_peer_urls, is_learner, kt_cl_sync_cb, &w));
}
int ketch_member_remove(ketch_client *c, uint64_t id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_member_remove_async(c, id, kt_cl_sync_cb, &w));
}
int ketch_member_update(ketch_client *c, uint64_t id, const char *const *peer_urls,
                        size_t n_peer_urls, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_member_update_async(c, id, peer_urls, n_peer_urls, kt_cl_sync_cb, &w));
}
int ketch_member_promote(ketch_client *c, uint64_t id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_member_promote_async(c, id, kt_cl_sync_cb, &w));
}
int ketch_move_leader(ketch_client *c, uint64_t target_id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_move_leader_async(c, target_id, kt_cl_sync_cb, &w));
}
int ketch_defragment(ketch_client *c, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_defragment_async(c, kt_cl_sync_cb, &w));
}
int ketch_hash_kv(ketch_client *c, int64_t revision, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_hash_kv_async(c, revision, kt_cl_sync_cb, &w));
}
int ketch_alarm(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_alarm_async(c, action, member_id, alarm, kt_cl_sync_cb, &w));
}
