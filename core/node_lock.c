/* core/node_lock.c — the lock and election services (etcd's v3lock and
 * v3election), run inside the member for thin clients and the gRPC bridge.
 * They are etcd's concurrency recipes done server-side, with the same keys,
 * so they interoperate with clients that run the recipes themselves
 * (libketch's ketch_mutex_* / ketch_election_*, etcdctl lock/elect).
 *
 * Data flow of LOCK (name, lease) and CAMPAIGN (name, lease, value):
 *   key = name "/" lease-in-hex; one txn is proposed through raft:
 *     if create_revision(key) == 0 then put(key, value, lease)
 *     else [CAMPAIGN: put(key, value, lease)] range(key)
 *   → its outcome (kt_node_propose_req's callback) gives my revision (the
 *   key's create revision) → check: the newest key under name/ created
 *   before mine, read from the applied store. None: held (answer the
 *   client, after checking my key is still there: its lease may have
 *   expired meanwhile). Else wait for THAT key's deletion only (no thundering
 *   herd): the waiter sits in a map key → waiters; the store's event hook
 *   marks the waiters of a deleted key, and kt_node_lock_flush (end of each
 *   loop turn) checks them again.
 *   A waiter whose client went away deletes its key (a tick sweeps them).
 * UNLOCK (key) and RESIGN (leader) propose a delete (RESIGN only if the key
 * still has the leader's create revision); PROCLAIM puts the value under the
 * same guard ("election: not leader" otherwise). LEADER answers the oldest
 * key under name/ from the applied store. OBSERVE streams the leader's kv
 * each time the oldest key under name/ changes or is written: observers sit
 * in the same map under "name/", marked by events on keys "name/...".
 *
 * Limits: every check is a range over name/ (O(keys under the name)), like
 * etcd's recipe; waiters and observers are bounded by client connections.
 * LEADER is linearizable: core/node.c holds it for a read index, then
 * calls in here. OBSERVE streams from this member's applied state, as a
 * watch does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node_int.h"

#define BUCKETS 1024

enum op_kind { K_LOCK = 1, K_CAMPAIGN, K_OBSERVE, K_WRITE /* unlock, resign, proclaim */ };

struct lockop {
  enum op_kind kind;
  struct kt_conn *conn; /* a reference held */
  uint64_t req_id;
  struct kt_buf name, key, value, wait; /* wait: the key (or name/) watched */
  int64_t lease, rev;
  uint8_t type;       /* K_WRITE: the request type */
  struct kt_buf last; /* OBSERVE: the last leader key sent */
  int64_t last_mod;
  bool waiting, marked, dead;
  struct lockop *hnext; /* chain in the map bucket of `wait` */
  struct lockop *mnext; /* marked list */
  struct lockop *all_next;
};

struct node_lock_state {
  struct lockop *buckets[BUCKETS];
  struct lockop *marked;
  struct lockop *all; /* every live op (for the tick sweep) */
  size_t n_waiting;
  struct kt_arena arena;
};

static uint32_t hash(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 16777619u;
  return h & (BUCKETS - 1);
}

static struct kt_bytes kb(const struct kt_buf *b) {
  return (struct kt_bytes){b->p, (uint32_t)b->len};
}

void kt_node_lock_init(struct kt_node *n) {
  n->lk = calloc(1, sizeof *n->lk);
  kt_assert(n->lk);
}

static void op_free(struct lockop *o) {
  kt_buf_free(&o->name);
  kt_buf_free(&o->key);
  kt_buf_free(&o->value);
  kt_buf_free(&o->wait);
  kt_buf_free(&o->last);
  if (o->conn)
    kt_conn_unref(o->conn);
  free(o);
}

void kt_node_lock_free(struct kt_node *n) {
  if (!n->lk)
    return;
  for (struct lockop *o = n->lk->all, *nx; o; o = nx) {
    nx = o->all_next;
    op_free(o);
  }
  kt_arena_free(&n->lk->arena);
  free(n->lk);
  n->lk = NULL;
}

/* ---- the map of watched keys ---- */

static void wait_on(struct kt_node *n, struct lockop *o, struct kt_bytes key) {
  kt_buf_reset(&o->wait);
  kt_buf_append(&o->wait, key.p, key.n);
  uint32_t h = hash(key.p, key.n);
  o->hnext = n->lk->buckets[h];
  n->lk->buckets[h] = o;
  o->waiting = true;
  n->lk->n_waiting++;
}

static void unwait(struct kt_node *n, struct lockop *o) {
  if (!o->waiting)
    return;
  struct lockop **pp = &n->lk->buckets[hash(o->wait.p, o->wait.len)];
  while (*pp && *pp != o)
    pp = &(*pp)->hnext;
  if (*pp)
    *pp = o->hnext;
  o->waiting = false;
  n->lk->n_waiting--;
}

static void mark_key(struct kt_node *n, const uint8_t *p, size_t len) {
  for (struct lockop *o = n->lk->buckets[hash(p, len)]; o; o = o->hnext)
    if (!o->marked && o->wait.len == len && memcmp(o->wait.p, p, len) == 0) {
      o->marked = true;
      o->mnext = n->lk->marked;
      n->lk->marked = o;
    }
}

/* Store hook: a deleted key frees its waiters; any change of name/x marks
 * the observers of name/. */
void kt_node_lock_event(struct kt_node *n, const struct kt_event *ev) {
  if (!n->lk || !n->lk->n_waiting)
    return;
  struct kt_bytes k = ev->kv.key;
  if (ev->type == KT_EVENT_DELETE)
    mark_key(n, k.p, k.n);
  const uint8_t *slash = NULL;
  for (uint32_t i = k.n; i > 0; i--)
    if (k.p[i - 1] == '/') {
      slash = k.p + i - 1;
      break;
    }
  if (slash)
    mark_key(n, k.p, (size_t)(slash - k.p) + 1); /* "name/" */
}

/* ---- reads of the applied store ---- */

/* The kv under `name`/ with the largest create revision < before (before
 * 0: the smallest create revision overall). Returns false if none. The
 * range is [name "/", name "0"): '0' is the byte after '/'. */
static bool first_or_pred(struct kt_node *n, struct kt_bytes name, int64_t before,
                          struct kt_kv *out) {
  kt_arena_reset(&n->lk->arena);
  uint8_t *k = kt_arena_alloc(&n->lk->arena, 2 * ((size_t)name.n + 1));
  memcpy(k, name.p, name.n);
  k[name.n] = '/';
  memcpy(k + name.n + 1, name.p, name.n);
  k[2 * name.n + 1] = '0';
  struct kt_range_req r = {.key = {k, name.n + 1}, .limit = 1};
  r.range_end = (struct kt_bytes){k + name.n + 1, name.n + 1};
  r.sort_target = KT_SORT_CREATE;
  r.sort_order = before ? KT_SORT_DESCEND : KT_SORT_ASCEND;
  if (before)
    r.max_create_revision = before - 1;
  struct kt_range_resp res;
  struct kt_err e = {0};
  if (kt_mvcc_range(n->store, &r, &n->lk->arena, &res, &e) || res.n_kvs == 0)
    return false;
  *out = res.kvs[0];
  return true;
}

static bool key_is_mine(struct kt_node *n, struct lockop *o) {
  struct kt_range_req r = {.key = kb(&o->key)};
  struct kt_range_resp res;
  struct kt_err e = {0};
  kt_arena_reset(&n->lk->arena);
  return kt_mvcc_range(n->store, &r, &n->lk->arena, &res, &e) == 0 && res.n_kvs == 1 &&
         res.kvs[0].create_revision == o->rev;
}

/* ---- answers ---- */

static void send_lock_resp(struct kt_node *n, struct kt_conn *c, uint64_t id, uint8_t type,
                           const struct kt_lock_resp *l) {
  struct kt_resp r = {.type = type, .id = id};
  if (l)
    r.u.lock = *l;
  kt_node_send(n, c, &r);
}

static void op_end(struct kt_node *n, struct lockop *o) {
  unwait(n, o);
  o->dead = true; /* freed by the sweep (it may still be on the marked list) */
}

static void release_key(struct kt_node *n, struct lockop *o);

/* Is o's key the oldest (lock) / are all older keys gone (campaign)? */
static void check(struct kt_node *n, struct lockop *o) {
  unwait(n, o);
  if (!kt_conn_open(o->conn)) {
    release_key(n, o);
    return;
  }
  struct kt_kv pred;
  if (first_or_pred(n, kb(&o->name), o->rev, &pred)) {
    wait_on(n, o, pred.key);
    return;
  }
  if (!key_is_mine(n, o)) {
    kt_conn_send_error(o->conn, o->req_id, KT_ELEASENOTFOUND,
                       "session expired: the lock key was deleted while waiting");
    op_end(n, o);
    return;
  }
  struct kt_lock_resp l = {.key = kb(&o->key)};
  if (o->kind == K_CAMPAIGN)
    l.leader = (struct kt_leader_key){kb(&o->name), kb(&o->key), o->rev, o->lease};
  send_lock_resp(n, o->conn, o->req_id, o->kind == K_LOCK ? KT_MSG_LOCK : KT_MSG_CAMPAIGN, &l);
  op_end(n, o);
}

static void txn_done(struct kt_node *n, void *ctx, int rc, const struct kt_err *e,
                     const struct kt_response_op *res) {
  struct lockop *o = ctx;
  if (rc) {
    kt_node_reply_err(o->conn, o->req_id, rc, e);
    op_end(n, o);
    return;
  }
  const struct kt_txn_resp *t = &res->u.txn;
  if (t->succeeded) {
    o->rev = kt_mvcc_revision(n->store); /* the txn's revision: applied just now */
  } else {
    const struct kt_response_op *last = &t->responses[t->n_responses - 1];
    if (last->type != KT_OP_RANGE || last->u.range.n_kvs != 1) {
      kt_conn_send_error(o->conn, o->req_id, KT_EINTERNAL, "lock key vanished");
      op_end(n, o);
      return;
    }
    o->rev = last->u.range.kvs[0].create_revision;
  }
  check(n, o);
}

static struct lockop *op_new(struct kt_node *n, enum op_kind kind, struct kt_conn *c,
                             uint64_t req_id) {
  struct lockop *o = calloc(1, sizeof *o);
  kt_assert(o);
  o->kind = kind;
  o->conn = c;
  kt_conn_ref(c);
  o->req_id = req_id;
  o->all_next = n->lk->all;
  n->lk->all = o;
  return o;
}

/* LOCK / CAMPAIGN: put my key (once) and find my place. */
static void acquire(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  const struct kt_lock_req *q = &req->u.lock;
  if (!q->name.n) {
    kt_conn_send_error(c, req->id, KT_EINVAL, "name is required");
    return;
  }
  if (!kt_lease_exists(n->leases, q->lease)) {
    kt_conn_send_error(c, req->id, KT_ELEASENOTFOUND, NULL);
    return;
  }
  struct lockop *o = op_new(n, req->type == KT_MSG_LOCK ? K_LOCK : K_CAMPAIGN, c, req->id);
  char hex[24];
  int hl = snprintf(hex, sizeof hex, "/%llx", (unsigned long long)q->lease);
  kt_buf_append(&o->name, q->name.p, q->name.n);
  kt_buf_append(&o->key, q->name.p, q->name.n);
  kt_buf_append(&o->key, hex, (size_t)hl);
  kt_buf_append(&o->value, q->value.p, q->value.n);
  o->lease = q->lease;
  struct kt_compare cmp = {.result = KT_CMP_EQUAL, .target = KT_CMP_CREATE, .key = kb(&o->key)};
  struct kt_request_op put = {.type = KT_OP_PUT};
  put.u.put = (struct kt_put_req){.key = kb(&o->key), .value = kb(&o->value), .lease = o->lease};
  struct kt_request_op get = {.type = KT_OP_RANGE};
  get.u.range.key = kb(&o->key);
  struct kt_request_op fail_ops[2] = {put, get};
  struct kt_req t = {.type = KT_MSG_TXN};
  t.u.op.type = KT_OP_TXN;
  t.u.op.u.txn =
      (struct kt_txn_req){.compare = &cmp, .n_compare = 1, .success = &put, .n_success = 1};
  if (o->kind == K_CAMPAIGN) { /* campaigning again: the new value */
    t.u.op.u.txn.failure = fail_ops;
    t.u.op.u.txn.n_failure = 2;
  } else {
    t.u.op.u.txn.failure = &fail_ops[1];
    t.u.op.u.txn.n_failure = 1;
  }
  kt_node_propose_req(n, &t, txn_done, o);
}

static void release_done(struct kt_node *n, void *ctx, int rc, const struct kt_err *e,
                         const struct kt_response_op *res) {
  (void)res;
  struct lockop *o = ctx;
  if (rc)
    kt_log(KT_LOG_WARN, "lock", "releasing the key of a gone waiter failed: %s", e->msg);
  op_end(n, o);
}

/* The client of a waiting lock/campaign left: its key goes (etcd's recipe
 * does the same when the caller's context ends). */
static void release_key(struct kt_node *n, struct lockop *o) {
  unwait(n, o);
  struct kt_compare cmp = {
      .result = KT_CMP_EQUAL, .target = KT_CMP_CREATE, .key = kb(&o->key), .int_value = o->rev};
  struct kt_request_op del = {.type = KT_OP_DELETE};
  del.u.del.key = kb(&o->key);
  struct kt_req t = {.type = KT_MSG_TXN};
  t.u.op.type = KT_OP_TXN;
  t.u.op.u.txn =
      (struct kt_txn_req){.compare = &cmp, .n_compare = 1, .success = &del, .n_success = 1};
  kt_node_propose_req(n, &t, release_done, o);
}

/* UNLOCK / RESIGN / PROCLAIM: one guarded write, answered when applied. */
static void simple_done(struct kt_node *n, void *ctx, int rc, const struct kt_err *e,
                        const struct kt_response_op *res) {
  struct lockop *o = ctx;
  if (rc)
    kt_node_reply_err(o->conn, o->req_id, rc, e);
  else if (o->type == KT_MSG_PROCLAIM && !res->u.txn.succeeded)
    kt_conn_send_error(o->conn, o->req_id, KT_EINVAL, "election: not leader");
  else
    send_lock_resp(n, o->conn, o->req_id, o->type, NULL);
  op_end(n, o);
}

static void guarded_write(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  const struct kt_lock_req *q = &req->u.lock;
  struct kt_bytes key = req->type == KT_MSG_UNLOCK ? q->key : q->leader.key;
  if (!key.n) {
    kt_conn_send_error(c, req->id, KT_EKEYEMPTY, NULL);
    return;
  }
  struct lockop *o = op_new(n, K_WRITE, c, req->id);
  o->type = req->type;
  kt_buf_append(&o->key, key.p, key.n);
  kt_buf_append(&o->value, q->value.p, q->value.n);
  struct kt_compare cmp = {.result = KT_CMP_EQUAL,
                           .target = KT_CMP_CREATE,
                           .key = kb(&o->key),
                           .int_value = q->leader.rev};
  struct kt_request_op w = {.type = KT_OP_DELETE};
  w.u.del.key = kb(&o->key);
  if (req->type == KT_MSG_PROCLAIM) {
    w.type = KT_OP_PUT;
    w.u.put =
        (struct kt_put_req){.key = kb(&o->key), .value = kb(&o->value), .lease = q->leader.lease};
  }
  struct kt_req t = {.type = KT_MSG_TXN};
  t.u.op.type = KT_OP_TXN;
  t.u.op.u.txn = (struct kt_txn_req){.success = &w, .n_success = 1};
  if (req->type != KT_MSG_UNLOCK) { /* only while it is still the leader's key */
    t.u.op.u.txn.compare = &cmp;
    t.u.op.u.txn.n_compare = 1;
  }
  kt_node_propose_req(n, &t, simple_done, o);
}

/* OBSERVE: the current leader now, then at each change. */
static void observe_send(struct kt_node *n, struct lockop *o) {
  struct kt_kv kv;
  if (!first_or_pred(n, kb(&o->name), 0, &kv))
    return;
  if (o->last.len == kv.key.n && memcmp(o->last.p, kv.key.p, kv.key.n) == 0 &&
      o->last_mod == kv.mod_revision)
    return;
  kt_buf_reset(&o->last);
  kt_buf_append(&o->last, kv.key.p, kv.key.n);
  o->last_mod = kv.mod_revision;
  struct kt_lock_resp l = {.has_kv = true, .kv = kv};
  send_lock_resp(n, o->conn, o->req_id, KT_MSG_OBSERVE, &l);
}

static void observe(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  if (!req->u.lock.name.n) {
    kt_conn_send_error(c, req->id, KT_EINVAL, "name is required");
    return;
  }
  struct lockop *o = op_new(n, K_OBSERVE, c, req->id);
  kt_buf_append(&o->name, req->u.lock.name.p, req->u.lock.name.n);
  struct kt_buf prefix = {0};
  kt_buf_append(&prefix, o->name.p, o->name.len);
  kt_buf_append(&prefix, "/", 1);
  wait_on(n, o, kb(&prefix));
  kt_buf_free(&prefix);
  observe_send(n, o);
}

static void leader(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  struct kt_kv kv;
  if (!req->u.lock.name.n || !first_or_pred(n, req->u.lock.name, 0, &kv)) {
    kt_conn_send_error(c, req->id, KT_ENOTFOUND, "election: no leader");
    return;
  }
  send_lock_resp(n, c, req->id, KT_MSG_LEADER, &(struct kt_lock_resp){.has_kv = true, .kv = kv});
}

void kt_node_lock_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  switch (req->type) {
  case KT_MSG_LOCK:
  case KT_MSG_CAMPAIGN:
    acquire(n, c, req);
    return;
  case KT_MSG_UNLOCK:
  case KT_MSG_RESIGN:
  case KT_MSG_PROCLAIM:
    guarded_write(n, c, req);
    return;
  case KT_MSG_LEADER:
    leader(n, c, req);
    return;
  case KT_MSG_OBSERVE:
    observe(n, c, req);
    return;
  default:
    kt_conn_send_error(c, req->id, KT_EUNSUPPORTED, "not a lock request");
  }
}

/* ---- end of turn and tick ---- */

void kt_node_lock_flush(struct kt_node *n) {
  struct node_lock_state *s = n->lk;
  while (s->marked) {
    struct lockop *o = s->marked;
    s->marked = o->mnext;
    o->marked = false;
    if (o->dead)
      continue;
    if (o->kind == K_OBSERVE) {
      if (kt_conn_open(o->conn))
        observe_send(n, o);
    } else if (o->waiting) {
      check(n, o);
    }
  }
}

void kt_node_lock_recheck_all(struct kt_node *n) {
  for (struct lockop *o = n->lk->all; o; o = o->all_next)
    if (!o->dead && o->waiting && !o->marked) {
      o->marked = true;
      o->mnext = n->lk->marked;
      n->lk->marked = o;
    }
}

void kt_node_lock_tick(struct kt_node *n) {
  struct node_lock_state *s = n->lk;
  struct lockop **pp = &s->all;
  while (*pp) {
    struct lockop *o = *pp;
    if (!o->dead && o->waiting && !kt_conn_open(o->conn)) {
      if (o->kind == K_OBSERVE)
        op_end(n, o);
      else
        release_key(n, o);
    }
    if (o->dead && !o->marked) {
      *pp = o->all_next;
      op_free(o);
      continue;
    }
    pp = &o->all_next;
  }
}
