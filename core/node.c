/* core/node.c — see node.h for the data flow. */
#include "node.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "node_int.h"

/* Stops w, started and then ev_unref'd (it alone does not keep the loop
 * running): the reference it gave back is taken again first. */
#define STOP_UNREFFED(loop, w, stop)                                                               \
  do {                                                                                             \
    if (ev_is_active(w)) {                                                                         \
      ev_ref(loop);                                                                                \
      stop((loop), (w));                                                                           \
    }                                                                                              \
  } while (0)

static void fatal_stop(struct kt_node *n, int code, const char *what) {
  kt_log(KT_LOG_FATAL, "node", "member stopping: %s", what);
  n->fatal = code ? code : KT_EIO;
  ev_break(n->loop, EVBREAK_ALL);
}

void kt_node_stop_fatal(struct kt_node *n, int code, const char *what) {
  fatal_stop(n, code, what);
}

/* As etcd 3.4: the two lines it logs, and (in ketch_main) exit status 0. */
void kt_node_stop_removed(struct kt_node *n) {
  kt_log(KT_LOG_ERROR, "member", "the member has been permanently removed from the cluster");
  kt_log(KT_LOG_INFO, "member", "the data-dir used by this member must be removed.");
  n->fatal = KT_EMEMBERREMOVED;
  ev_break(n->loop, EVBREAK_ALL);
}

/* ---- replies ---- */

void kt_node_header(const struct kt_node *n, struct kt_header *h) {
  h->cluster_id = n->cluster_id;
  h->member_id = n->member_id;
  h->revision = kt_mvcc_revision(n->store);
  h->raft_term = kt_raft_term(n->raft);
}

void kt_node_send(struct kt_node *n, struct kt_conn *c, struct kt_resp *r) {
  kt_node_header(n, &r->header);
  kt_conn_send_resp(c, r);
}

void kt_node_reply(struct kt_node *n, struct kt_conn *c, uint64_t id, uint8_t type,
                   const struct kt_response_op *op) {
  struct kt_resp r = {.type = type, .id = id};
  if (op)
    r.u.op = *op;
  kt_node_send(n, c, &r);
}

void kt_node_reply_err(struct kt_conn *c, uint64_t id, int code, const struct kt_err *e) {
  kt_conn_send_error(c, id, code, e && e->code && e->msg[0] ? e->msg : kt_strerror(code));
}

/* A proposal of ours that will not be answered by its apply. */
static void pending_fail(struct kt_node *n, struct pending *p, int code, const char *msg) {
  n->stats.proposals_failed++;
  if (p->done) {
    struct kt_err e = {0};
    kt_err_set(&e, code, "%s", msg);
    kt_node_done_fn done = p->done;
    p->done = NULL;
    done(n, p->ctx, code, &e, NULL);
  } else if (p->conn) {
    kt_conn_send_error(p->conn, p->req_id, code, msg);
    kt_conn_unref(p->conn);
    p->conn = NULL;
  }
}

/* ---- apply (log order) ---- */

static void apply_req(struct kt_node *n, uint8_t ent_type, const struct kt_req *req,
                      struct kt_conn *c, uint64_t req_id, const struct pending *own) {
  struct kt_err e;
  kt_err_clear(&e);
  struct kt_sm sm = {n->store, n->leases, n->watches};
  struct kt_sm_result res;
  int rc;
  switch (req->type) {
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_TXN:
    n->stats.puts += req->type == KT_MSG_PUT;
    n->stats.deletes += req->type == KT_MSG_DELETE;
    n->stats.txns += req->type == KT_MSG_TXN;
    rc = kt_sm_apply(&sm, req, 0, &n->arena, &res, &e);
    if (own && own->done) {
      own->done(n, own->ctx, rc, &e, rc ? NULL : &res.op);
      return;
    }
    if (!c)
      return;
    if (rc)
      kt_node_reply_err(c, req_id, rc, &e);
    else
      kt_node_reply(n, c, req_id, req->type, &res.op);
    return;
  case KT_MSG_COMPACT:
    rc = kt_sm_apply(&sm, req, 0, &n->arena, &res, &e);
    if (rc == 0) {
      kt_log(KT_LOG_INFO, "mvcc", "compaction revision=%lld", (long long)req->u.compact.revision);
      ev_idle_start(n->loop, &n->idle_w);
    }
    if (!c)
      return;
    if (rc) {
      kt_node_reply_err(c, req_id, rc, &e);
    } else if (req->u.compact.physical && kt_mvcc_compact_pending(n->store)) {
      struct waiter *w = realloc(n->waiters, (n->n_waiters + 1) * sizeof *w);
      kt_assert(w);
      n->waiters = w;
      kt_conn_ref(c);
      n->waiters[n->n_waiters++] = (struct waiter){c, req_id};
    } else {
      kt_node_reply(n, c, req_id, KT_MSG_COMPACT, NULL);
    }
    return;
  case KT_MSG_MEMBER_PUBLISH:
  case KT_MSG_MEMBER_ADD:
  case KT_MSG_MEMBER_REMOVE:
  case KT_MSG_MEMBER_UPDATE:
  case KT_MSG_MEMBER_PROMOTE:
    kt_node_member_apply(n, ent_type, req, own);
    return;
  case KT_MSG_LEASE_GRANT:
  case KT_MSG_LEASE_REVOKE:
    kt_node_lease_apply(n, req, c, req_id);
    return;
  case KT_MSG_ALARM:
    kt_node_maint_apply_alarm(n, req, c, req_id);
    return;
  case KT_MSG_AUTH_ENABLE:
  case KT_MSG_AUTH_DISABLE:
  case KT_MSG_USER_ADD:
  case KT_MSG_USER_DELETE:
  case KT_MSG_USER_CHANGE_PASSWORD:
  case KT_MSG_USER_GRANT_ROLE:
  case KT_MSG_USER_REVOKE_ROLE:
  case KT_MSG_ROLE_ADD:
  case KT_MSG_ROLE_DELETE:
  case KT_MSG_ROLE_GRANT_PERMISSION:
  case KT_MSG_ROLE_REVOKE_PERMISSION:
    kt_node_auth_apply(n, req, c, req_id);
    return;
  default:
    kt_log(KT_LOG_WARN, "node", "entry of unexpected type %u ignored", req->type);
  }
}

/* A PUT of ours, as it was decoded when it arrived (struct pending_put),
 * into *req, if it may apply without being decoded and checked again: what
 * kt_proto_decode_req and kt_node_auth_unwrap would give for the entry. */
static bool own_put(struct kt_node *n, const struct kt_raft_entry *ent, const struct pending *own,
                    struct kt_req *req) {
  const struct pending_put *pp = &own->put;
  if (!pp->ent_len || pp->ent_len != ent->len || ent->type != KT_RAFT_ENTRY_NORMAL)
    return false;
  req->type = KT_MSG_PUT;
  req->id = own->req_id;
  req->u.op.type = KT_OP_PUT;
  req->u.op.u.put = pp->put;
  req->u.op.u.put.key.p = ent->data + pp->key_off;
  req->u.op.u.put.value.p = ent->data + pp->value_off;
  if (!kt_node_auth_settled(n, pp->auth_revision, req))
    return false;        /* decoded and checked again: refused, or a lease's keys to read */
  if (pp->auth_revision) /* as apply_committed counts an AUTHED entry */
    n->log_bytes_since_snap -= pp->body_off - DATA_HDR;
  return true;
}

/* Apply one committed entry; answer the client if this member proposed it.
 * Proposals of ours older than it that never applied were lost (a leader
 * change): their outcome is unknown. */
static void apply_committed(struct kt_node *n, const struct kt_raft_entry *ent) {
  struct kt_conn *c = NULL;
  uint64_t req_id = 0;
  n->applied_index = ent->index;
  n->applied_term = ent->term;
  n->log_bytes_since_snap += ent->len;
  if (ent->len == 0)
    return; /* a leader's empty entry */
  if (ent->len < DATA_HDR) {
    fatal_stop(n, KT_ECORRUPT, "committed entry shorter than its header");
    return;
  }
  struct pending own; /* a copy of ours: read only through done and put */
  own.done = NULL;
  own.put.ent_len = 0;
  if (kt_get_u64be(ent->data) == n->member_id &&
      (kt_get_u64be(ent->data + 8) & ~SEQ_MASK) == n->run_id) { /* ours, this run */
    uint64_t seq = kt_get_u64be(ent->data + 8);
    while (n->pend_head < n->n_pend && n->pend[n->pend_head].seq <= seq) {
      struct pending *p = &n->pend[n->pend_head++];
      if (p->seq == seq) {
        own = *p;
        c = p->conn;
        req_id = p->req_id;
      } else { /* (its done may propose: n->pend may move, p is not used after) */
        pending_fail(n, p, KT_EUNKNOWN,
                     "request outcome unknown: its proposal was lost (leader change)");
      }
    }
    if (n->pend_head == n->n_pend)
      n->pend_head = n->n_pend = 0;
  }
  struct kt_req req;
  struct kt_err de;
  kt_err_clear(&de);
  kt_arena_reset(&n->arena);
  if (own_put(n, ent, &own, &req)) {
    bool nospace = kt_mvcc_nospace(n->store);
    apply_req(n, ent->type, &req, c && kt_conn_open(c) ? c : NULL, req_id, &own);
    if (!nospace && kt_mvcc_nospace(n->store))
      kt_node_maint_nospace_raised(n, kt_get_u64be(ent->data));
  } else if (kt_proto_decode_req(ent->data + DATA_HDR, ent->len - DATA_HDR, &n->arena, &req, &de)) {
    /* Validated before it was proposed: this is a bug or a bad disk. */
    char msg[400];
    snprintf(msg, sizeof msg, "entry %llu: undecodable request: %s", (unsigned long long)ent->index,
             de.msg);
    fatal_stop(n, KT_ECORRUPT, msg);
  } else {
    /* The snapshot rule weighs the log against the store (snap_maybe_start):
     * an AUTHED entry counts as the body it carries, so a workload is
     * snapshotted as often with auth on as with it off. */
    if (req.type == KT_MSG_AUTHED)
      n->log_bytes_since_snap -= ent->len - DATA_HDR - req.u.authed.body.n;
    bool nospace = kt_mvcc_nospace(n->store), fatal = false;
    int rc = ent->type == KT_RAFT_ENTRY_NORMAL
                 ? kt_node_auth_unwrap(n, &req, &n->arena, &de, &fatal)
                 : 0;
    if (fatal) {
      char msg[400];
      snprintf(msg, sizeof msg, "entry %llu: undecodable request: %s",
               (unsigned long long)ent->index, de.msg);
      fatal_stop(n, KT_ECORRUPT, msg);
    } else if (rc) { /* refused by auth at apply: nothing applied */
      if (own.done)
        own.done(n, own.ctx, rc, &de, NULL);
      else if (c && kt_conn_open(c))
        kt_node_reply_err(c, req_id, rc, &de);
    } else {
      apply_req(n, ent->type, &req, c && kt_conn_open(c) ? c : NULL, req_id, &own);
    }
    if (!nospace && kt_mvcc_nospace(n->store))
      kt_node_maint_nospace_raised(n, kt_get_u64be(ent->data));
  }
  if (c)
    kt_conn_unref(c);
}

/* ---- propose (the write path) ---- */

static int propose(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                   size_t body_len, bool conf, const struct kt_req *dec);

/* c may be NULL for the member's own proposals (auto-compaction). A
 * follower's proposal is forwarded to the leader by raft. */
int kt_node_propose(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                    size_t body_len) {
  return propose(n, c, req_id, body, body_len, false, NULL);
}

void kt_node_propose_conf(struct kt_node *n, const uint8_t *body, size_t len, kt_node_done_fn done,
                          void *ctx) {
  n->next_done = done;
  n->next_done_ctx = ctx;
  int rc = propose(n, NULL, 0, body, len, true, NULL);
  n->next_done = NULL;
  n->next_done_ctx = NULL;
  if (rc) {
    struct kt_err e = {0};
    kt_err_set(&e, rc, "%s",
               rc == KT_EBUSY ? "a membership change is already in progress" : kt_strerror(rc));
    done(n, ctx, rc, &e, NULL);
  }
}

/* Whether [p, p + len) lies inside [base, base + n). */
static bool within(const uint8_t *p, size_t len, const uint8_t *base, size_t n) {
  uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
  return a >= b && len <= n && a - b <= n - len;
}

/* Keeps dec, the PUT decoded from the body that ends the entry being
 * proposed (in n->scratch), in *pp, if its key and value lie in the body. */
static void keep_put(struct kt_node *n, struct pending_put *pp, const struct kt_req *dec,
                     const uint8_t *body, size_t body_len, uint64_t auth_revision) {
  const struct kt_put_req *put = &dec->u.op.u.put;
  if (!within(put->key.p, put->key.n, body, body_len) ||
      (put->value.n && !within(put->value.p, put->value.n, body, body_len)))
    return;
  uint32_t body_off = (uint32_t)(n->scratch.len - body_len);
  pp->body_off = body_off;
  pp->key_off = body_off + (uint32_t)(put->key.p - body);
  pp->value_off = put->value.n ? body_off + (uint32_t)(put->value.p - body) : body_off;
  pp->auth_revision = auth_revision;
  pp->put = *put;
  pp->ent_len = (uint32_t)n->scratch.len;
}

/* dec: the request decoded from body, or NULL. */
static int propose(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                   size_t body_len, bool conf, const struct kt_req *dec) {
  if (n->wal_failed) {
    if (c)
      kt_conn_send_error(c, req_id, n->wal_failed, n->wal_failed_msg);
    return n->wal_failed;
  }
  uint64_t seq = n->run_id | (++n->next_seq & SEQ_MASK);
  kt_buf_reset(&n->scratch);
  kt_buf_reserve(&n->scratch, DATA_HDR + body_len);
  kt_put_u64be(n->scratch.p, n->member_id);
  kt_put_u64be(n->scratch.p + 8, seq);
  n->scratch.len = DATA_HDR;
  /* an AUTHED entry (who asked, checked again when applied), or as it is */
  uint64_t checked_rev = 0;
  bool wrapped = !conf && kt_node_auth_wrap(n, c, body, body_len, &n->scratch, &checked_rev);
  if (!wrapped)
    kt_buf_append(&n->scratch, body, body_len);
  uint64_t index = 0;
  int rc = (conf ? kt_raft_propose_conf : kt_raft_propose)(n->raft, n->scratch.p,
                                                           (uint32_t)n->scratch.len, &index);
  if (rc) {
    if (c)
      kt_conn_send_error(c, req_id, rc, NULL);
    return rc;
  }
  if (c)
    kt_conn_ref(c);
  struct pending p = {seq, ev_now(n->loop), c, req_id, n->next_done, n->next_done_ctx, {0}};
  if (dec && dec->type == KT_MSG_PUT && (!wrapped || checked_rev))
    keep_put(n, &p.put, dec, body, body_len, checked_rev);
  FIFO_PUSH(n->pend, n->pend_head, n->n_pend, n->cap_pend, p);
  return 0;
}

static void propose_body(struct kt_node *n, struct kt_buf *body_buf, kt_node_done_fn done,
                         void *ctx);

void kt_node_propose_req(struct kt_node *n, const struct kt_req *req, kt_node_done_fn done,
                         void *ctx) {
  struct kt_buf body = {0};
  kt_proto_encode_req_body(&body, req);
  if (n->in_ready) { /* raft takes no proposal inside a ready batch: after it */
    struct deferred_prop d = {body, done, ctx};
    struct deferred_prop *v = realloc(n->dprops, (n->n_dprops + 1) * sizeof *v);
    kt_assert(v);
    n->dprops = v;
    n->dprops[n->n_dprops++] = d;
    return;
  }
  propose_body(n, &body, done, ctx);
}

static void propose_body(struct kt_node *n, struct kt_buf *body_buf, kt_node_done_fn done,
                         void *ctx) {
  struct kt_buf body = *body_buf;
  if (n->wal_failed || !n->serving) {
    struct kt_err e = {0};
    int code = n->wal_failed ? n->wal_failed : KT_ENOLEADER;
    kt_err_set(&e, code, "%s", n->wal_failed ? n->wal_failed_msg : "no leader");
    kt_buf_free(&body);
    done(n, ctx, code, &e, NULL);
    return;
  }
  n->next_done = done;
  n->next_done_ctx = ctx;
  int rc = kt_node_propose(n, NULL, 0, body.p, body.len);
  n->next_done = NULL;
  n->next_done_ctx = NULL;
  kt_buf_free(&body);
  if (rc) { /* raft refused it */
    struct kt_err e = {0};
    kt_err_set(&e, KT_ENOLEADER, "proposal refused: no leader");
    done(n, ctx, KT_ENOLEADER, &e, NULL);
  }
}

static size_t held_count(const struct held_queue *q) { return q->n - q->head; }

static void held_push(struct held_queue *q, struct held h, const uint8_t *body) {
  if (h.conn)
    kt_conn_ref(h.conn);
  FIFO_PUSH(q->v, q->head, q->n, q->cap, h);
  kt_buf_append(&q->bodies, body, h.len);
}

/* Take the oldest; *body stays valid until held_settle or the next push. */
static struct held held_pop(struct held_queue *q, const uint8_t **body) {
  struct held h = q->v[q->head++];
  *body = q->bodies.p + q->bodies_head;
  q->bodies_head += h.len;
  return h;
}

/* After a round of pops: an empty queue gives its buffers back to the start. */
static void held_settle(struct held_queue *q) {
  if (q->head == q->n) {
    q->head = q->n = 0;
    kt_buf_reset(&q->bodies);
    q->bodies_head = 0;
  }
}

static void held_free(struct held_queue *q) {
  for (size_t i = q->head; i < q->n; i++)
    if (q->v[i].conn && !q->v[i].done)
      kt_conn_unref(q->v[i].conn);
  free(q->v);
  kt_buf_free(&q->bodies);
}

/* Answer a waiting read with an error now; its slot is skipped later. */
static void read_fail(struct kt_node *n, struct held *r, int code, const char *msg) {
  if (r->done)
    return;
  r->done = true;
  if (r->from) {
    kt_node_fwd_reply(n, r->from, r->req_id, code, msg, NULL);
    return;
  }
  kt_conn_send_error(r->conn, r->req_id, code, msg);
  kt_conn_unref(r->conn);
}

static void serve_read(struct kt_node *n, struct kt_conn *c, const struct kt_req *req);

/* The auth revision the request being dispatched was checked at (its
 * caller's permission, by kt_node_auth_gate), or UINT64_MAX: not checked. */
static uint64_t checked_auth_rev(const struct kt_node *n) {
  return n->prop_as.set ? n->prop_as.rev : UINT64_MAX;
}

/* A linearized read whose read index is applied (or solo): answer it (its
 * caller's permission checked again against the auth store it is served
 * from, unless that store has not changed since the check at auth_rev). */
static void serve_linearized(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                             const uint8_t *body, size_t len, uint64_t auth_rev) {
  struct kt_err e;
  kt_err_clear(&e);
  int rc = auth_rev == kt_auth_revision(n->auth) ? 0 : kt_node_auth_recheck(n, c, req, &e);
  if (rc) {
    kt_node_reply_err(c, req->id, rc, &e);
    return;
  }
  switch (req->type) {
  case KT_MSG_LEASE_TTL:
  case KT_MSG_LEASE_LEASES:
    kt_node_lease_request(n, c, req, body, len);
    return;
  case KT_MSG_LEADER:
    kt_node_lock_request(n, c, req);
    return;
  case KT_MSG_AUTH_STATUS:
  case KT_MSG_USER_GET:
  case KT_MSG_USER_LIST:
  case KT_MSG_ROLE_GET:
  case KT_MSG_ROLE_LIST:
    kt_node_auth_read(n, c, req);
    return;
  default:
    serve_read(n, c, req);
  }
}

void kt_node_read_linearized(struct kt_node *n, struct kt_conn *c, uint64_t from, uint64_t req_id,
                             const struct kt_req *req, const uint8_t *body, size_t len) {
  if (kt_node_solo(n)) {
    if (from)
      kt_node_lease_fwd_answer(n, from, req_id, body, len);
    else
      serve_linearized(n, c, req, body, len, checked_auth_rev(n));
    return;
  }
  if (held_count(&n->reads) >= READ_MAX) {
    struct held r = {.conn = c, .req_id = req_id, .from = from};
    if (c)
      kt_conn_ref(c);
    read_fail(n, &r, KT_EBUSY, "too many linearizable reads waiting");
    return;
  }
  struct held h = {
      c, req_id, from, kt_reads_join(&n->rq), ev_now(n->loop), len, false, checked_auth_rev(n)};
  held_push(&n->reads, h, body);
}

/* Keep a request for when the member serves (bounded). */
static void defer_request(struct kt_node *n, struct kt_conn *c, uint64_t req_id,
                          const uint8_t *body, size_t len) {
  if (held_count(&n->defer) >= DEFER_MAX) {
    kt_conn_send_error(c, req_id, KT_ENOLEADER, "no leader (too many requests waiting)");
    return;
  }
  held_push(&n->defer, (struct held){c, req_id, 0, 0, ev_now(n->loop), len, false, UINT64_MAX},
            body);
}

static void answer_status(struct kt_node *n, struct kt_conn *c, uint64_t id) {
  struct kt_buf *out = kt_conn_out(c);
  if (!out)
    return;
  struct kt_resp r = {.type = KT_MSG_STATUS, .id = id};
  kt_node_header(n, &r.header);
  static const char version[] = KT_VERSION;
  char alarm_text[8][64];
  struct kt_bytes alarms[8];
  struct kt_status_resp *s = &r.u.status;
  s->version = (struct kt_bytes){(const uint8_t *)version, sizeof version - 1};
  s->db_size = (int64_t)kt_mvcc_size_bytes(n->store);
  s->db_size_in_use = s->db_size;
  s->leader = kt_raft_leader(n->raft);
  s->is_learner = kt_node_member_is_learner(n);
  s->raft_index = kt_raft_last_index(n->raft);
  s->raft_term = kt_raft_term(n->raft);
  s->raft_applied_index = n->applied_index;
  size_t na = kt_node_maint_alarm_texts(n, alarm_text, KT_ARRAY_LEN(alarm_text) - 1);
  for (size_t i = 0; i < na; i++)
    alarms[i] = (struct kt_bytes){(const uint8_t *)alarm_text[i], (uint32_t)strlen(alarm_text[i])};
  if (n->wal_failed)
    alarms[na++] =
        (struct kt_bytes){(const uint8_t *)n->wal_failed_msg, (uint32_t)strlen(n->wal_failed_msg)};
  s->errors = na ? alarms : NULL;
  s->n_errors = (uint32_t)na;
  kt_proto_encode_resp(out, &r);
  kt_conn_sent(c);
}

/* A range or a read-only txn, from the applied state. */
/* req may live in n->arena (a held read decoded again, its txn ops there):
 * the arena is reset once the answer is out, not before. */
static void serve_read(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  struct kt_response_op res = {.type = req->type};
  struct kt_err e;
  kt_err_clear(&e);
  int rc;
  if (req->type == KT_MSG_RANGE) {
    rc = kt_mvcc_check(n->store, &req->u.op, &e);
    if (!rc)
      rc = kt_mvcc_range(n->store, &req->u.op.u.range, &n->arena, &res.u.range, &e);
  } else {
    rc = kt_mvcc_apply(n->store, &req->u.op, &n->arena, &res, &e);
  }
  if (rc)
    kt_node_reply_err(c, req->id, rc, &e);
  else
    kt_node_reply(n, c, req->id, req->type, &res);
  kt_arena_reset(&n->arena);
}

/* ---- member list and leadership transfer (etcd MemberList, MoveLeader) ---- */

/* Splits a comma-separated URL list into arena-allocated bytes. */
static void move_answer(struct kt_node *n, int code, const char *msg) {
  struct kt_conn *c = n->move.conn;
  n->move.conn = NULL;
  if (code) {
    kt_conn_send_error(c, n->move.req_id, code, msg);
  } else {
    struct kt_buf *out = kt_conn_out(c);
    if (out) {
      struct kt_resp r = {.type = KT_MSG_MOVE_LEADER, .id = n->move.req_id};
      kt_node_header(n, &r.header);
      kt_proto_encode_resp(out, &r);
      kt_conn_sent(c);
    }
  }
  kt_conn_unref(c);
}

/* etcd: only the leader moves leadership ("not leader" elsewhere); the
 * answer comes once the transferee is known to lead, or after two election
 * timeouts ("request timed out, leader transfer took too long"). */
static void move_leader(struct kt_node *n, struct kt_conn *c, uint64_t id, uint64_t target) {
  const struct kt_node_member *tm = kt_node_member_find(n, target);
  bool member = tm && !tm->learner;
  if (kt_raft_role(n->raft) != KT_RAFT_LEADER) {
    kt_conn_send_error(c, id, KT_EINVAL, "not leader");
    return;
  }
  if (!member) {
    kt_conn_send_error(c, id, KT_EINVAL, "bad leader transferee");
    return;
  }
  if (n->move.conn) {
    kt_conn_send_error(c, id, KT_EBUSY, "a leader transfer is already in progress");
    return;
  }
  kt_conn_ref(c);
  n->move.conn = c;
  n->move.req_id = id;
  n->move.target = target;
  n->move.since = ev_now(n->loop);
  if (target == n->member_id) {
    move_answer(n, 0, NULL);
    return;
  }
  int rc = kt_raft_transfer_leader(n->raft, target);
  if (rc)
    move_answer(n, rc, rc == KT_EINVAL ? "bad leader transferee" : kt_strerror(rc));
}

/* After each ready batch and each tick: the transfer is done or timed out. */
static void move_check(struct kt_node *n) {
  if (!n->move.conn)
    return;
  if (n->known_leader == n->move.target)
    move_answer(n, 0, NULL);
  else if (ev_now(n->loop) - n->move.since > 2.0 * n->cfg.election_timeout_ms / 1000.0)
    move_answer(n, KT_ETIMEOUT, "request timed out, leader transfer took too long");
}

static void dispatch(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                     const uint8_t *body, size_t body_len);

/* Every request: refused while stopping; then who sends it and whether it
 * may (core/node_auth.c: the one check, every path); then handled. */
static void on_request(void *arg, struct kt_conn *c, const struct kt_req *req, const uint8_t *body,
                       size_t body_len) {
  struct kt_node *n = arg;
  if (n->stopping) {
    kt_conn_send_error(c, req->id, KT_ESTOPPED, "member is shutting down");
    return;
  }
  if (kt_node_auth_gate(n, c, req, body, body_len))
    return;
  dispatch(n, c, req, body, body_len);
  kt_ident_clear(&n->prop_as); /* proposals from now on are the member's */
}

static void dispatch(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                     const uint8_t *body, size_t body_len) {
  struct kt_err e;
  kt_err_clear(&e);
  int rc;
  if (req->type == KT_MSG_MEMBER_LIST) {
    kt_node_member_list(n, c, req->id);
    return;
  }
  if (req->type == KT_MSG_MOVE_LEADER) {
    move_leader(n, c, req->id, req->u.move_leader.target_id);
    return;
  }
  /* Watches are served from this member's applied state, like serializable
   * reads, with or without a leader. */
  if (req->type >= KT_MSG_WATCH_CREATE && req->type <= KT_MSG_WATCH_PROGRESS) {
    kt_node_watch_request(n, c, req);
    return;
  }
  /* AUTH_CHECK: kt_node_auth_gate has answered whether its caller may watch
   * the range; passing it is the answer (the header only, no key read),
   * with or without a leader, as the watch it stands for. */
  if (req->type == KT_MSG_AUTH_CHECK) {
    kt_node_reply(n, c, req->id, KT_MSG_AUTH_CHECK, NULL);
    return;
  }
  /* Maintenance (snapshot, hash, defragment, alarm list) is served from
   * this member's state, with or without a leader. */
  if (kt_node_maint_request(n, c, req, body, body_len))
    return;
  /* Until this member leads and has applied its first entry, only status and
   * serializable reads are answered; the rest waits (bounded). */
  if (!n->serving && req->type != KT_MSG_STATUS &&
      !(req->type == KT_MSG_RANGE && req->u.op.u.range.serializable)) {
    defer_request(n, c, req->id, body, body_len);
    return;
  }
  switch (req->type) {
  case KT_MSG_RANGE:
    n->stats.ranges++;
    if (req->u.op.u.range.serializable)
      serve_read(n, c, req);
    else
      kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    return;
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_TXN:
    rc = kt_mvcc_check(n->store, &req->u.op, &e);
    if (!rc)
      rc = kt_node_lease_check(n, &req->u.op, &e);
    if (rc) {
      kt_node_reply_err(c, req->id, rc, &e);
      return;
    }
    if (req->type == KT_MSG_TXN && !kt_mvcc_op_writes(&req->u.op)) {
      /* A read-only txn changes nothing: a read. */
      kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
      return;
    }
    propose(n, c, req->id, body, body_len, false, req);
    return;
  case KT_MSG_COMPACT:
    if (req->u.compact.revision > kt_mvcc_revision(n->store)) {
      kt_conn_send_error(c, req->id, KT_EFUTUREREV, NULL);
      return;
    }
    if (req->u.compact.revision <= kt_mvcc_compact_revision(n->store)) {
      kt_conn_send_error(c, req->id, KT_ECOMPACTED, NULL);
      return;
    }
    kt_node_propose(n, c, req->id, body, body_len);
    return;
  case KT_MSG_STATUS:
    answer_status(n, c, req->id);
    return;
  case KT_MSG_LEASE_TTL:
    /* the leader's lease timers answer; a follower forwards (the leader
     * holds it for a read index, as its own) */
    if (kt_lease_is_leader(n->leases))
      kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    else
      kt_node_lease_request(n, c, req, body, body_len);
    return;
  case KT_MSG_LEASE_LEASES:
    kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    return;
  case KT_MSG_LEASE_GRANT:
  case KT_MSG_LEASE_REVOKE:
  case KT_MSG_LEASE_KEEPALIVE:
    kt_node_lease_request(n, c, req, body, body_len);
    return;
  case KT_MSG_MEMBER_ADD:
  case KT_MSG_MEMBER_REMOVE:
  case KT_MSG_MEMBER_UPDATE:
  case KT_MSG_MEMBER_PROMOTE:
    kt_node_member_client(n, c, req, body, body_len);
    return;
  case KT_MSG_LEADER:
    kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    return;
  case KT_MSG_LOCK:
  case KT_MSG_UNLOCK:
  case KT_MSG_CAMPAIGN:
  case KT_MSG_PROCLAIM:
  case KT_MSG_OBSERVE:
  case KT_MSG_RESIGN:
    kt_node_lock_request(n, c, req);
    return;
  default:
    kt_conn_send_error(c, req->id, KT_EUNSUPPORTED, "request type not supported by this member");
  }
}

/* ---- WAL completion ---- */

static void wal_notify(void *arg) {
  struct kt_node *n = arg;
  ev_async_send(n->loop, &n->wal_async);
}

void kt_node_fail_pending(struct kt_node *n, int code, const char *msg) {
  size_t end = n->n_pend;
  for (size_t i = n->pend_head; i < end; i++)
    pending_fail(n, &n->pend[i], code, msg);
  /* done callbacks may have proposed again: keep those */
  if (n->n_pend > end) /* (memmove of NULL is UB even for 0 bytes) */
    memmove(n->pend, n->pend + end, (n->n_pend - end) * sizeof *n->pend);
  n->n_pend -= end;
  n->pend_head = 0;
}

static void on_wal_synced(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_node *n = w->data;
  uint64_t durable = 0;
  struct kt_err e = {0};
  int rc = kt_wal_poll(n->wal, &durable, &e);
  /* Tell raft what is durable; the next ready (end of this turn) commits,
   * applies and answers. */
  while (n->pers_head < n->n_pers && n->pers[n->pers_head].seq <= durable) {
    struct persisting *p = &n->pers[n->pers_head++];
    if (p->has_hs)
      kt_raft_hs_persisted(n->raft, &p->hs);
    if (p->index)
      kt_raft_persisted(n->raft, p->term, p->index);
  }
  if (n->pers_head == n->n_pers)
    n->pers_head = n->n_pers = 0;
  if (rc) {
    if (rc == KT_ENOSPACE) {
      /* Disk full: what is not durable was not acknowledged; refuse writes
       * from now on, keep serving reads. */
      n->wal_failed = rc;
      snprintf(n->wal_failed_msg, sizeof n->wal_failed_msg,
               "no space left on device: the member refuses writes (%s)", e.msg);
      kt_log(KT_LOG_ERROR, "wal", "%s", n->wal_failed_msg);
      kt_node_fail_pending(n, KT_ENOSPACE, n->wal_failed_msg);
    } else {
      fatal_stop(n, rc, e.msg); /* a failed fdatasync stops the member */
    }
  }
}

/* ---- the raft ready loop (end of each loop turn) ---- */

static void snap_maybe_start(struct kt_node *n);
static void run_deferred(struct kt_node *n);

/* Hard state then entries, one batch: raft hears back in on_wal_synced. */
static void persist_ready(struct kt_node *n, const struct kt_raft_ready *rd) {
  if (n->wal_failed)
    return;
  struct persisting p = {0};
  uint64_t seq = 0;
  int rc = 0;
  /* A hard state that only moves the commit index needs no sync of its own
   * (as etcd's MustSync): raft can always learn the commit again, and it
   * waits only for term and vote. Its record rides with the next batch. */
  bool must_sync =
      rd->n_entries ||
      (rd->hs_changed && (rd->hs.term != n->hs_synced.term || rd->hs.vote != n->hs_synced.vote));
  if (rd->hs_changed) {
    uint8_t b[24];
    kt_put_u64be(b, rd->hs.term);
    kt_put_u64be(b + 8, rd->hs.vote);
    kt_put_u64be(b + 16, rd->hs.commit);
    /* indexed like the entry before it, so segment indexes never go down */
    rc = kt_wal_append(n->wal, REC_HARDSTATE, n->wal_last_index, b, sizeof b, &seq);
    p.has_hs = true;
    p.hs = rd->hs;
  }
  for (size_t i = 0; i < rd->n_entries && !rc; i++) {
    const struct kt_raft_entry *ent = &rd->entries[i];
    kt_buf_reset(&n->scratch);
    kt_buf_reserve(&n->scratch, ENTRY_HDR + ent->len);
    kt_put_u64be(n->scratch.p, ent->term);
    n->scratch.p[8] = ent->type;
    if (ent->len)
      memcpy(n->scratch.p + ENTRY_HDR, ent->data, ent->len);
    rc = kt_wal_append(n->wal, REC_ENTRY, ent->index, n->scratch.p, ENTRY_HDR + ent->len, &seq);
    p.term = ent->term;
    p.index = n->wal_last_index = ent->index;
  }
  if (rc) {
    fatal_stop(n, rc, "the write-ahead log refused an append");
    return;
  }
  if (!must_sync)
    return;
  if (rd->hs_changed)
    n->hs_synced = rd->hs;
  if (rd->n_entries)
    kt_hist_observe(&n->stats.wal_batch, (double)rd->n_entries);
  p.seq = seq;
  FIFO_PUSH(n->pers, n->pers_head, n->n_pers, n->cap_pers, p);
}

static void raft_event(struct kt_node *n, const struct kt_raft_event *ev) {
  char buf[160];
  int level = KT_LOG_INFO;
  uint64_t leader = n->known_leader;
  if (ev->type == KT_RAFT_EV_BECAME_FOLLOWER || ev->type == KT_RAFT_EV_LEADER_KNOWN)
    leader = ev->a;
  else if (ev->type == KT_RAFT_EV_BECAME_LEADER)
    leader = n->member_id;
  else if (ev->type == KT_RAFT_EV_BECAME_PRE_CANDIDATE || ev->type == KT_RAFT_EV_BECAME_CANDIDATE)
    leader = 0;
  if (leader != n->known_leader) {
    /* Proposals sent to (or made as) the old leader may or may not commit:
     * their clients hear so now instead of at the request timeout. */
    if (n->pend_head < n->n_pend)
      kt_node_fail_pending(n, KT_EUNKNOWN, "request outcome unknown: leader changed");
    n->known_leader = leader;
    n->stats.leader_changes += leader != 0;
  }
  switch (ev->type) {
  case KT_RAFT_EV_COMMIT:
  case KT_RAFT_EV_PROBE:
  case KT_RAFT_EV_REPLICATE:
  case KT_RAFT_EV_LEADER_KNOWN:
    level = KT_LOG_DEBUG;
    break;
  case KT_RAFT_EV_BECAME_LEADER:
    n->lead_index = ev->a;
    break;
  case KT_RAFT_EV_NEED_SNAPSHOT:
    kt_node_install_need(n, ev->a);
    break;
  default:
    break;
  }
  kt_log(level, "raft", "%s", kt_raft_event_str(ev, buf, sizeof buf));
}

/* Reads whose batch has a read index of this life that is applied (a
 * later batch's index covers the earlier batches too: core/reads.h). */
static void serve_ready_reads(struct kt_node *n) {
  struct held_queue *q = &n->reads;
  while (q->head < q->n && kt_reads_ready(&n->rq, q->v[q->head].batch, n->applied_index)) {
    const uint8_t *body;
    struct held r = held_pop(q, &body);
    struct kt_req req;
    struct kt_err e = {0};
    kt_arena_reset(&n->arena);
    if (r.done)
      continue; /* failed earlier */
    if (r.from) {
      kt_node_lease_fwd_answer(n, r.from, r.req_id, body, r.len);
      continue;
    }
    if (kt_conn_open(r.conn) && kt_proto_decode_req(body, r.len, &n->arena, &req, &e) == 0)
      serve_linearized(n, r.conn, &req, body, r.len, r.auth_rev);
    kt_conn_unref(r.conn);
  }
  held_settle(q);
}

/* The reads of this turn ask for one read index together. */
static void request_read_index(struct kt_node *n) {
  uint64_t failed = 0;
  int rc = kt_reads_ask(&n->rq, n->raft, &failed);
  if (rc) { /* no leader: this batch fails */
    for (size_t i = n->reads.head; i < n->reads.n; i++)
      if (n->reads.v[i].batch == failed)
        read_fail(n, &n->reads.v[i], rc, "no leader");
    kt_node_probes_failed(n, failed, rc);
  }
}

static void process_ready(struct kt_node *n) {
  while (!n->fatal && kt_raft_has_ready(n->raft)) {
    struct kt_raft_ready rd;
    kt_raft_ready(n->raft, &rd);
    n->in_ready = true;
    for (size_t i = 0; i < rd.n_events; i++)
      raft_event(n, &rd.events[i]);
    if (rd.hs_changed || rd.n_entries)
      persist_ready(n, &rd);
    /* The leader sends while its own write is in flight (raft held back
     * what must wait for the disk). */
    kt_raft_ents_enc_reset(&n->ents_enc);
    for (size_t i = 0; i < rd.n_msgs && n->peers; i++) {
      /* the header per message; the entries encoded once for every
       * follower that gets them (byte for byte kt_raft_msg_encode) */
      uint8_t h[KT_RAFT_MSG_HEADER_BYTES];
      const uint8_t *ents;
      size_t ents_len;
      kt_raft_msg_encode_header(&rd.msgs[i], h);
      kt_raft_ents_enc_get(&n->ents_enc, rd.msgs[i].entries, rd.msgs[i].n_entries, &ents,
                           &ents_len);
      bool hb = rd.msgs[i].type == KT_RAFT_MSG_HEARTBEAT;
      if (kt_peer_link_send2(n->peers, rd.msgs[i].to, h, sizeof h, ents, ents_len))
        n->stats.heartbeat_fails += hb;
      else if (hb)
        kt_node_rtt_sent(n, rd.msgs[i].to, rd.msgs[i].context);
    }
    if (rd.n_committed) {
      ev_tstamp t0 = ev_time();
      for (size_t i = 0; i < rd.n_committed && !n->fatal; i++)
        apply_committed(n, &rd.committed[i]);
      ev_tstamp took = ev_time() - t0;
      kt_hist_observe(&n->stats.apply_batch_s, took);
      n->stats.slow_applies += took > 0.1;
    }
    for (size_t i = 0; i < rd.n_reads; i++)
      kt_reads_answered(&n->rq, &rd.reads[i]);
    bool was = n->serving;
    n->serving = kt_reads_serving(&rd, n->lead_index, n->applied_index);
    kt_node_lease_role(n, rd.role == KT_RAFT_LEADER && n->serving);
    if (n->serving && !was)
      kt_node_member_serving(n);
    if (n->serving && !was)
      kt_log(KT_LOG_INFO, "node", "serving as %s leader=%016llx term=%llu applied-index=%llu",
             kt_raft_role_name(rd.role), (unsigned long long)rd.leader,
             (unsigned long long)kt_raft_term(n->raft), (unsigned long long)n->applied_index);
    kt_raft_advance(n->raft);
    n->in_ready = false;
    /* proposals made while applying (internal recipes): now */
    for (size_t i = 0; i < n->n_dprops; i++)
      propose_body(n, &n->dprops[i].body, n->dprops[i].done, n->dprops[i].ctx);
    n->n_dprops = 0;
    kt_node_member_after_ready(n);
  }
  /* Raft keeps applied entries in memory only for followers to catch up
   * from: none with one member; a window of RAFT_KEEP_ENTRIES with several
   * (further behind needs a snapshot install: the cluster issue). */
  if (n->n_members == 1) {
    if (n->applied_index >= kt_raft_first_index(n->raft) + 1024)
      kt_raft_compact(n->raft, n->applied_index);
  } else {
    /* never past the newest snapshot: a follower further behind gets that
     * snapshot and continues from the entries after it */
    uint64_t keep =
        n->cfg.snapshot_catchup_entries ? n->cfg.snapshot_catchup_entries : RAFT_KEEP_ENTRIES;
    uint64_t to = n->applied_index > keep ? n->applied_index - keep : 0;
    if (to > n->durable_snap_index)
      to = n->durable_snap_index;
    if (to >= kt_raft_first_index(n->raft) + 1024)
      kt_raft_compact(n->raft, to);
  }
  if (n->serving && !n->trimmed) {
    /* once, when the recovery is over: the pages freed by it (the replayed
     * log, the snapshot's buffers) go back to the OS (~10 MB with 1M keys,
     * a few ms) */
    n->trimmed = true;
    malloc_trim(0);
  }
  serve_ready_reads(n);
  kt_node_probes_step(n);
  move_check(n);
  if (n->serving && held_count(&n->defer))
    run_deferred(n);
  snap_maybe_start(n);
}

static void on_request(void *arg, struct kt_conn *c, const struct kt_req *req, const uint8_t *body,
                       size_t body_len);

/* The member serves now: run what waited, in arrival order. */
static void run_deferred(struct kt_node *n) {
  while (n->serving && held_count(&n->defer)) {
    const uint8_t *body;
    struct held d = held_pop(&n->defer, &body);
    struct kt_req req;
    struct kt_err e = {0};
    kt_arena_reset(&n->arena);
    if (kt_conn_open(d.conn) && kt_proto_decode_req(body, d.len, &n->arena, &req, &e) == 0)
      on_request(n, d.conn, &req, body, d.len);
    kt_conn_unref(d.conn);
  }
  held_settle(&n->defer);
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_node *n = w->data;
  kt_raft_tick(n->raft);
  kt_node_lease_tick(n);
  kt_node_watch_tick(n);
  kt_node_install_tick(n);
  kt_node_lock_tick(n);
  kt_node_maint_tick(n);
  kt_node_probes_expire(n);
  move_check(n);
  /* Requests that waited two election timeouts for a leader fail. */
  ev_tstamp limit = 2.0 * n->cfg.election_timeout_ms / 1000.0;
  const uint8_t *body;
  while (held_count(&n->defer) && ev_now(loop) - n->defer.v[n->defer.head].since > limit) {
    struct held d = held_pop(&n->defer, &body);
    kt_conn_send_error(d.conn, d.req_id, KT_ENOLEADER, "no leader");
    kt_conn_unref(d.conn);
  }
  held_settle(&n->defer);
  /* Reads whose read index never came (a lost message, a partition). */
  while (held_count(&n->reads) && ev_now(loop) - n->reads.v[n->reads.head].since > limit) {
    struct held r = held_pop(&n->reads, &body);
    read_fail(n, &r, KT_ETIMEOUT, "linearizable read timed out: no read index from the leader");
  }
  held_settle(&n->reads);
  /* Writes not applied in etcd's request timeout (5 s + two election
   * timeouts): the proposal may or may not commit later. */
  ev_tstamp wlimit = 5.0 + limit;
  while (n->pend_head < n->n_pend && ev_now(loop) - n->pend[n->pend_head].since > wlimit) {
    struct pending p = n->pend[n->pend_head++];
    pending_fail(n, &p, KT_EUNKNOWN,
                 "request outcome unknown: not committed within the request timeout");
  }
}

/* ---- snapshots ---- */

static void snap_notify(void *arg) {
  struct kt_node *n = arg;
  ev_async_send(n->loop, &n->snap_async);
}

static int snap_feed(void *arg, const struct kt_kvrev *rec) {
  return kt_snap_writer_add((struct kt_snap_writer *)arg, rec);
}

static void snap_abort(struct kt_node *n, const char *why) {
  kt_log(KT_LOG_ERROR, "snap", "snapshot at index %llu abandoned: %s",
         (unsigned long long)n->snap_index, why);
  kt_snap_writer_free(n->snap_w);
  n->snap_w = NULL;
  kt_arena_free(&n->snap_arena);
  n->last_snap_index = n->snap_index; /* try again after another snapshot_count */
  kt_node_maint_snap_done(n, false);
}

/* One slice of snapshot work (bounded: SNAP_SLICE_KEYS keys). */
static void snap_slice(struct kt_node *n) {
  if (!n->snap_w)
    return;
  if (!n->snap_iter_done) {
    if (!kt_snap_writer_can_add(n->snap_w))
      return; /* writer thread busy: wait for its notify */
    int rc = kt_mvcc_iter(n->store, n->snap_rev, &n->snap_cursor, SNAP_SLICE_KEYS, &n->snap_arena,
                          snap_feed, n->snap_w);
    if (rc < 0) {
      snap_abort(n, "the writer refused a record");
      return;
    }
    if (rc == 0)
      n->snap_iter_done = true;
  }
  if (n->snap_iter_done && !n->snap_finish_sent) {
    int rc = kt_snap_writer_finish(n->snap_w);
    if (rc == 0)
      n->snap_finish_sent = true;
    else if (rc != KT_EBUSY)
      snap_abort(n, kt_strerror(rc));
  }
}

static void on_snap_progress(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_node *n = w->data;
  if (!n->snap_w)
    return;
  struct kt_err e = {0};
  enum kt_snap_state st = kt_snap_writer_poll(n->snap_w, NULL, &e);
  if (st == KT_SNAP_RUNNING) {
    ev_idle_start(n->loop, &n->idle_w); /* room for more blocks */
    return;
  }
  if (st == KT_SNAP_FAILED) {
    snap_abort(n, e.msg);
    return;
  }
  kt_log(KT_LOG_INFO, "snap", "snapshot saved file=%s index=%llu revision=%lld",
         kt_snap_writer_path(n->snap_w), (unsigned long long)n->snap_index, (long long)n->snap_rev);
  kt_snap_writer_free(n->snap_w);
  n->snap_w = NULL;
  kt_arena_free(&n->snap_arena);
  n->prev_snap_index = n->last_snap_index;
  n->last_snap_index = n->durable_snap_index = n->snap_index;
  kt_hist_observe(&n->stats.snapshot_s, ev_now(n->loop) - n->stats.snap_started);
  /* Keep two snapshots (the writer removed older ones), and the WAL from
   * the older one on, so a corrupt newest snapshot still recovers from the
   * older one + WAL. */
  int removed = 0;
  if (n->prev_snap_index && kt_wal_purge(n->wal, n->prev_snap_index, &removed, &e))
    kt_log(KT_LOG_WARN, "wal", "purge failed: %s", e.msg);
  else if (removed)
    kt_log(KT_LOG_INFO, "wal", "purging %d old segment(s) up to index %llu", removed,
           (unsigned long long)n->prev_snap_index);
  kt_node_maint_snap_done(n, true);
}

/* The snapshot's meta blob: a line for people (ketchutl snapshot status),
 * NUL, the member table (node_member.c), the lease table (node_lease.c), the
 * alarms (node_maint.c), the auth store (core/auth.c; both absent from
 * snapshots older than them). */
static void meta_blob(struct kt_node *n, struct kt_buf *out) {
  char line[1024];
  int len = snprintf(line, sizeof line, "cluster_id=%016llx member_id=%016llx members=%zu %s=%s",
                     (unsigned long long)n->cluster_id, (unsigned long long)n->member_id,
                     n->n_members, n->cfg.name, n->cfg.peer_urls);
  if (len >= (int)sizeof line)
    len = (int)sizeof line - 1;
  kt_buf_append(out, line, (size_t)len + 1);
  kt_node_member_save(n, out);
  kt_node_lease_save(n, out);
  kt_node_maint_alarms_save(n, out);
  kt_node_auth_save(n, out);
}

static void snap_start(struct kt_node *n);

/* This member's place (0 .. n-1) among the members ordered by id. */
static uint64_t member_rank(const struct kt_node *n) {
  uint64_t rank = 0;
  for (size_t i = 0; i < n->n_members; i++)
    rank += n->members[i].id < n->member_id;
  return rank;
}

static void snap_maybe_start(struct kt_node *n) {
  if (n->snap_w || n->stopping)
    return;
  if (!n->snap_force) {
    if (!n->cfg.snapshot_count || n->applied_index - n->last_snap_index < n->cfg.snapshot_count)
      return;
    /* A snapshot copies the whole store, so it also waits until the log
     * since the last one (its entries' bytes, AUTHED ones as their body:
     * apply_committed) is half the store's size times 1 + rank/members
     * (writing snapshots then costs at most 2x the writes; the members,
     * which apply the same log, do not all copy their stores at the same
     * moment: 3 members, 256 clients, p99 9-10.7 -> 5.5-6.2 ms), or, as a
     * backstop, twice the store's size at the last snapshot: the store may
     * grow about as fast as the log (no compaction, entries small next to
     * what each revision holds), and then the first rule is never met. */
    uint64_t num = n->n_members + member_rank(n), den = KT_MAX(n->n_members, 1);
    uint64_t half = kt_mvcc_size_bytes(n->store) / 2 * num / den;
    if (n->log_bytes_since_snap < half && n->log_bytes_since_snap < 2 * n->snap_store_bytes)
      return;
  }
  if (n->applied_index <= n->durable_snap_index) {
    n->snap_force = false;
    return;
  }
  n->snap_force = false;
  snap_start(n);
}

bool kt_node_snapshot_now(struct kt_node *n) {
  if (n->stopping)
    return false;
  if (!n->snap_w)
    snap_start(n);
  return true;
}

/* Starts writing a snapshot of the applied state (no snapshot running). */
static void snap_start(struct kt_node *n) {
  struct kt_snap_meta meta = {0};
  /* The member and lease tables at this index ride in the meta blob
   * (O(leases) here, on the loop: ~10 ms per 100k leases). */
  struct kt_buf blob = {0};
  meta_blob(n, &blob);
  meta.term = n->applied_term;
  meta.index = n->applied_index;
  meta.revision = kt_mvcc_revision(n->store);
  meta.compact_revision = kt_mvcc_compact_revision(n->store);
  meta.membership = (struct kt_bytes){blob.p, (uint32_t)blob.len};
  snprintf(meta.creator, sizeof meta.creator, "ketch %s member=%s", KT_VERSION, n->cfg.name);
  struct kt_snap_writer_opts o = {
      .max_inflight = SNAP_MAX_INFLIGHT, .notify = snap_notify, .notify_arg = n, .keep = SNAP_KEEP};
  struct kt_err e = {0};
  int orc = kt_snap_writer_open(n->snap_dir, &meta, &o, &n->snap_w, &e);
  kt_buf_free(&blob); /* the writer copied it */
  if (orc) {
    kt_log(KT_LOG_ERROR, "snap", "cannot start snapshot: %s", e.msg);
    n->snap_w = NULL;
    n->last_snap_index = n->applied_index;
    kt_node_maint_snap_done(n, false);
    return;
  }
  kt_log(KT_LOG_INFO, "snap", "snapshot started index=%llu revision=%lld",
         (unsigned long long)meta.index, (long long)meta.revision);
  n->snap_index = meta.index;
  n->snap_rev = meta.revision;
  n->stats.snap_started = ev_now(n->loop);
  n->log_bytes_since_snap = 0;
  n->snap_store_bytes = kt_mvcc_size_bytes(n->store);
  n->snap_cursor = (struct kt_mvcc_cursor){0};
  n->snap_iter_done = n->snap_finish_sent = false;
  ev_idle_start(n->loop, &n->idle_w);
}

/* ---- auto-compaction ---- */

static void propose_compaction(struct kt_node *n, int64_t rev) {
  if (rev <= kt_mvcc_compact_revision(n->store) || rev > kt_mvcc_revision(n->store))
    return;
  struct kt_req req = {.type = KT_MSG_COMPACT};
  req.u.compact.revision = rev;
  struct kt_buf body = {0};
  kt_proto_encode_req_body(&body, &req);
  kt_log(KT_LOG_INFO, "node", "auto-compaction proposed revision=%lld", (long long)rev);
  kt_node_propose(n, NULL, 0, body.p, body.len);
  kt_buf_free(&body);
}

static void on_compact_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_node *n = w->data;
  int64_t rev = kt_mvcc_revision(n->store);
  if (n->cfg.auto_compaction_revision_mode) {
    propose_compaction(n, rev - (int64_t)n->cfg.auto_compaction_retention_revs);
    return;
  }
  /* periodic: sample now; compact to the newest sample at least a retention old */
  ev_tstamp now = ev_now(loop), window = n->cfg.auto_compaction_retention_ms / 1000.0;
  int64_t target = 0;
  int keep = 0;
  for (int i = 0; i < n->n_samples; i++) {
    if (now - n->samples[i].at >= window)
      target = n->samples[i].rev;
    else
      n->samples[keep++] = n->samples[i];
  }
  n->n_samples = keep;
  if (n->n_samples == (int)KT_ARRAY_LEN(n->samples))
    memmove(n->samples, n->samples + 1, --n->n_samples * sizeof n->samples[0]);
  n->samples[n->n_samples].at = now;
  n->samples[n->n_samples++].rev = rev;
  if (target)
    propose_compaction(n, target);
}

static void start_auto_compaction(struct kt_node *n) {
  double every;
  if (n->cfg.auto_compaction_revision_mode) {
    if (!n->cfg.auto_compaction_retention_revs)
      return;
    every = 300.0; /* etcd's revision compactor runs every 5 minutes */
  } else {
    if (!n->cfg.auto_compaction_retention_ms)
      return;
    every = n->cfg.auto_compaction_retention_ms / 10000.0;
    if (every < 1.0)
      every = 1.0;
  }
  ev_timer_init(&n->compact_w, on_compact_timer, every, every);
  n->compact_w.data = n;
  ev_timer_start(n->loop, &n->compact_w);
  ev_unref(n->loop);
  kt_log(KT_LOG_INFO, "node", "auto-compaction mode=%s every=%.1fs",
         n->cfg.auto_compaction_revision_mode ? "revision" : "periodic", every);
}

/* ---- background slices and the end of each loop turn ---- */

static void background_slice(struct kt_node *n) {
  if (kt_node_watch_busy(n))
    kt_node_watch_step(n); /* watchers catching up from history */
  snap_slice(n);
  kt_node_maint_step(n); /* hash-kv slices, defragment progress */
  /* Physical compaction waits while a snapshot iterates the store. */
  if (!n->snap_w && kt_mvcc_compact_pending(n->store)) {
    if (!kt_mvcc_compact_step(n->store, COMPACT_SLICE_KEYS)) {
      for (size_t i = 0; i < n->n_waiters; i++) {
        if (kt_conn_open(n->waiters[i].conn))
          kt_node_reply(n, n->waiters[i].conn, n->waiters[i].req_id, KT_MSG_COMPACT, NULL);
        kt_conn_unref(n->waiters[i].conn);
      }
      n->n_waiters = 0;
    }
  }
}

static bool background_pending(const struct kt_node *n) {
  return kt_node_watch_busy(n) || kt_node_maint_busy(n) ||
         (n->snap_w && !n->snap_iter_done && kt_snap_writer_can_add(n->snap_w)) ||
         (n->snap_w && n->snap_iter_done && !n->snap_finish_sent) ||
         (!n->snap_w && kt_mvcc_compact_pending(n->store));
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)revents;
  struct kt_node *n = w->data;
  background_slice(n);
  if (!background_pending(n))
    ev_idle_stop(loop, w);
}

static void maybe_finish_shutdown(struct kt_node *n);

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_node *n = w->data;
  if (background_pending(n))
    background_slice(n); /* one slice per turn even when never idle */
  request_read_index(n);
  process_ready(n);
  if (kt_reads_pending_ask(&n->rq)) { /* reads that waited for a leader ran just now */
    request_read_index(n);
    process_ready(n);
  }
  kt_node_lock_flush(n);  /* lock waiters whose predecessor went */
  kt_node_watch_step(n);  /* catch-up from history, one slice */
  kt_node_watch_flush(n); /* events of what this turn applied */
  if (n->pers_head < n->n_pers) {
    int rc = kt_wal_flush(n->wal);
    if (rc && rc != KT_ENOSPACE)
      fatal_stop(n, rc, "write-ahead log failed");
  }
  if (n->stopping)
    maybe_finish_shutdown(n);
}

/* ---- open / recovery ---- */

static int mkdir_p(const char *path, struct kt_err *e) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
        return kt_err_set(e, KT_EIO, "mkdir %s: %s", tmp, strerror(errno));
      *p = '/';
    }
  }
  if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
    return kt_err_set(e, KT_EIO, "mkdir %s: %s", tmp, strerror(errno));
  return 0;
}

/* Snapshot records go to the store; the newest record of each key tells
 * which lease the key is attached to (attached once the lease table is
 * loaded from the snapshot's meta). */
struct restore {
  struct kt_node *n;
  struct kt_mvcc *store;
  struct kt_buf key; /* the key of the last record */
  int64_t lease;     /* its lease, 0 if none or a tombstone */
  bool have;
};

static void restore_flush(struct restore *r) {
  if (r->have && r->lease)
    kt_node_lease_note_key(r->n, (struct kt_bytes){r->key.p, (uint32_t)r->key.len}, r->lease);
  r->have = false;
}

static int restore_rec(void *arg, const struct kt_kvrev *rec) {
  struct restore *r = arg;
  struct kt_err e;
  if (r->have && (r->key.len != rec->key.n || memcmp(r->key.p, rec->key.p, rec->key.n) != 0))
    restore_flush(r);
  kt_buf_reset(&r->key);
  kt_buf_append(&r->key, rec->key.p, rec->key.n);
  r->lease = rec->tombstone ? 0 : rec->lease;
  r->have = true;
  return kt_mvcc_restore_rec(r->store, rec, &e) ? KT_ECORRUPT : 0;
}

/* Every change the store applies: to the watch hub and the lease table. */
static void on_store_event(void *arg, const struct kt_event *ev) {
  struct kt_node *n = arg;
  struct kt_sm sm = {n->store, n->leases, n->watches};
  kt_sm_on_event(&sm, ev);
  kt_node_lock_event(n, ev);
}

/* An empty store at revision 1, as etcd's: the first write gets revision 2. */
static struct kt_mvcc *new_store(struct kt_node *n) {
  /* Keys and values are held back by --max-request-bytes when proposed, as
   * etcd's; the store's own limits (re-checked when every member applies)
   * must not depend on a member's flags: the largest that flag allows. */
  struct kt_mvcc_config mc = {.quota_bytes = n->cfg.quota_bytes,
                              .max_key_bytes = 64u << 20,
                              .max_value_bytes = 64u << 20,
                              .on_event = on_store_event,
                              .event_arg = n};
  struct kt_mvcc *s = kt_mvcc_new(&mc);
  kt_mvcc_restore_done(s, 1, 0);
  return s;
}

/* The snapshot meta blob (meta_blob): the text line, NUL, the member table
 * (into *t; t->n == 0 if the snapshot has none), the lease table, the
 * alarms (into *al; none if the snapshot has none), the auth store (into
 * auth; left empty if the snapshot has none). */
static int load_snapshot_blob(struct kt_node *n, const struct kt_snap_meta *meta,
                              struct kt_node_members *t, struct kt_node_alarms *al,
                              struct kt_auth *auth, struct kt_err *e) {
  t->n = t->n_removed = 0;
  al->n = 0;
  const uint8_t *nul =
      meta->membership.n ? memchr(meta->membership.p, 0, meta->membership.n) : NULL;
  if (!nul)
    return 0;
  size_t off = (size_t)(nul + 1 - meta->membership.p), len = meta->membership.n;
  if (len - off >= 8 && !memcmp(meta->membership.p + off, "KTMEMBS1", 8)) {
    size_t used;
    int rc = kt_node_member_decode(meta->membership.p + off, len - off, &used, t, e);
    if (rc)
      return rc;
    off += used;
  }
  size_t used = 0;
  int rc = kt_node_lease_load(n, meta->membership.p + off, len - off, &used, e);
  if (rc || off + used == len)
    return rc;
  off += used;
  if ((rc = kt_node_maint_alarms_decode(meta->membership.p + off, len - off, &used, al, e)) ||
      off + used == len)
    return rc;
  off += used;
  if ((rc = kt_auth_load(auth, meta->membership.p + off, len - off, &used, e)))
    return rc;
  if (off + used != len)
    return kt_err_set(e, KT_ECORRUPT, "snapshot meta: %zu unknown bytes at its end",
                      len - off - used);
  return 0;
}

/* The newest snapshot that loads whole; older ones are the fallback. */
int kt_node_load_snapshot_file(struct kt_node *n, const char *path, struct kt_snap_meta *meta,
                               struct kt_mvcc **store, struct kt_lease_mgr **leases,
                               struct kt_node_members *members, struct kt_node_alarms *alarms,
                               struct kt_auth **auth, struct kt_err *e) {
  struct kt_lease_mgr *old = n->leases;
  *auth = kt_auth_new();
  n->leases = kt_node_lease_mgr_new(n); /* restore_done attaches keys into it */
  struct kt_mvcc *s = new_store(n);
  struct restore rs = {.n = n, .store = s};
  int rc = kt_snap_load(path, restore_rec, &rs, meta, e);
  restore_flush(&rs);
  kt_buf_free(&rs.key);
  if (!rc)
    rc = load_snapshot_blob(n, meta, members, alarms, *auth, e);
  kt_node_lease_restore_done(n, rc == 0);
  if (rc) {
    kt_auth_free(*auth);
    *auth = NULL;
    kt_lease_free(n->leases);
    n->leases = old;
    kt_mvcc_free(s);
    return rc;
  }
  kt_mvcc_restore_done(s, meta->revision, meta->compact_revision);
  *store = s;
  *leases = n->leases;
  n->leases = old;
  return 0;
}

static int load_snapshot(struct kt_node *n, struct kt_err *e) {
  struct kt_snap_entry *list = NULL;
  size_t cnt = 0;
  if (kt_snap_clean_tmp(n->snap_dir, NULL, e) || kt_snap_list(n->snap_dir, &list, &cnt, e))
    return e->code;
  for (size_t i = 0; i < cnt; i++) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", n->snap_dir, list[i].name);
    struct kt_snap_meta meta = {0};
    struct kt_err le = {0};
    struct kt_mvcc *s;
    struct kt_lease_mgr *lm;
    struct kt_node_members *tab = malloc(sizeof *tab);
    kt_assert(tab);
    struct kt_node_alarms al;
    struct kt_auth *auth;
    if (kt_node_load_snapshot_file(n, path, &meta, &s, &lm, tab, &al, &auth, &le)) {
      free(tab);
      kt_log(KT_LOG_ERROR, "snap", "snapshot refused: %s%s", le.msg,
             i + 1 < cnt ? " (falling back to an older snapshot)" : "");
      kt_snap_meta_free(&meta);
      continue;
    }
    kt_mvcc_free(n->store);
    n->store = s;
    kt_node_maint_alarms_adopt(n, &al);
    kt_auth_free(n->auth);
    n->auth = auth;
    kt_lease_free(n->leases);
    n->leases = lm;
    n->applied_term = meta.term;
    n->applied_index = n->last_snap_index = n->durable_snap_index = meta.index;
    n->snap_store_bytes = kt_mvcc_size_bytes(s);
    kt_node_member_adopt(n, tab, meta.index);
    free(tab);
    kt_log(KT_LOG_INFO, "snap",
           "recovered from snapshot file=%s index=%llu revision=%lld keys=%llu", list[i].name,
           (unsigned long long)meta.index, (long long)meta.revision,
           (unsigned long long)kt_mvcc_keys(s));
    kt_snap_meta_free(&meta);
    free(list);
    return 0;
  }
  bool had = cnt > 0;
  free(list);
  if (had)
    return kt_err_set(e, KT_ECORRUPT, "every snapshot in %s failed verification", n->snap_dir);
  return 0;
}

static int replay_rec(void *arg, const struct kt_wal_rec *rec) {
  struct replay *r = arg;
  struct kt_node *n = r->n;
  if (rec->type == REC_HARDSTATE) {
    if (rec->len != 24)
      return kt_err_set(r->e, KT_ECORRUPT, "%s: hard state record of %u bytes", n->wal_dir,
                        rec->len);
    r->hs = (struct kt_raft_hard_state){kt_get_u64be(rec->payload), kt_get_u64be(rec->payload + 8),
                                        kt_get_u64be(rec->payload + 16)};
    return 0;
  }
  if (rec->type != REC_ENTRY)
    return 0;
  if (rec->len < ENTRY_HDR)
    return kt_err_set(r->e, KT_ECORRUPT, "%s: entry %llu of %u bytes is too short", n->wal_dir,
                      (unsigned long long)rec->index, rec->len);
  if (!r->first_seen)
    r->first_seen = rec->index;
  if (rec->index <= n->applied_index)
    return 0; /* covered by the snapshot */
  uint64_t first = n->applied_index + 1;
  if (rec->index > first + r->n_ents)
    return kt_err_set(r->e, KT_ECORRUPT,
                      "%s: entry %llu follows %llu: entries are missing (no snapshot covers them)",
                      n->wal_dir, (unsigned long long)rec->index,
                      (unsigned long long)(first + r->n_ents - 1));
  r->n_ents = rec->index - first; /* a rewritten index replaces the log from there */
  kt_node_replay_push(r, rec->index, rec->payload, rec->len);
  return 0;
}

void kt_node_replay_push(struct replay *r, uint64_t index, const uint8_t *rec, uint32_t len) {
  if (r->n_ents == r->cap_ents) {
    r->cap_ents = r->cap_ents ? r->cap_ents * 2 : 1024;
    r->ents = realloc(r->ents, r->cap_ents * sizeof *r->ents);
    kt_assert(r->ents);
  }
  uint32_t dlen = len - ENTRY_HDR;
  r->ents[r->n_ents++] =
      (struct kt_raft_entry){.term = kt_get_u64be(rec),
                             .index = index,
                             .type = rec[8],
                             .len = dlen,
                             .data = dlen ? kt_arena_dup(&r->data, rec + ENTRY_HDR, dlen) : NULL};
}

/* ---- peers ---- */

void kt_node_on_peer_message(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  struct kt_node *n = arg;
  struct kt_raft_msg m;
  struct kt_err e = {0};
  if (kt_node_lease_peer_message(n, from, msg, len))
    return;
  kt_arena_reset(&n->msg_arena);
  if (kt_raft_msg_decode(msg, len, &n->msg_arena, &m, &e)) {
    kt_log(KT_LOG_WARN, "peer", "undecodable raft message from %016llx: %s",
           (unsigned long long)from, e.msg);
    return;
  }
  if (m.from != from) {
    kt_log(KT_LOG_WARN, "peer", "raft message from %016llx claims to be from %016llx",
           (unsigned long long)from, (unsigned long long)m.from);
    return;
  }
  if (m.type == KT_RAFT_MSG_HEARTBEAT_RESP)
    kt_node_rtt_answered(n, from, m.context);
  kt_raft_step(n->raft, &m);
}

void kt_node_on_peer_snapshot(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  kt_node_install_chunk(arg, from, msg, len);
}
void kt_node_on_snapshot_room(void *arg, uint64_t peer) { kt_node_install_room(arg, peer); }

/* Raft from the snapshot and the WAL; one member campaigns at once (as
 * etcd's initial-election-tick-advance). */
static int start_raft(struct kt_node *n, struct replay *r, struct kt_err *e) {
  uint64_t voters[KT_NODE_MAX_MEMBERS], learners[KT_NODE_MAX_MEMBERS];
  size_t nv, nl;
  kt_node_member_conf(n, voters, &nv, learners, &nl);
  struct kt_raft_hard_state hs = r->hs;
  if (hs.commit < n->applied_index) /* the snapshot outran the hard state's record */
    hs.commit = n->applied_index;
  if (hs.term < n->applied_term)
    hs.term = n->applied_term;
  if (r->n_ents && hs.commit > r->ents[r->n_ents - 1].index)
    hs.commit = r->ents[r->n_ents - 1].index;
  uint32_t hb = n->cfg.heartbeat_ms ? n->cfg.heartbeat_ms : 100;
  uint32_t et = n->cfg.election_timeout_ms ? n->cfg.election_timeout_ms : 1000;
  struct kt_raft_config rc = {.id = n->member_id,
                              .voters = voters,
                              .n_voters = nv,
                              .learners = learners,
                              .n_learners = nl,
                              .election_ticks = et / hb > 1 ? et / hb : 2,
                              .heartbeat_ticks = 1,
                              .max_msg_bytes = 1u << 20,
                              .max_inflight_msgs = 256,
                              .max_inflight_bytes = 64u << 20,
                              .pre_vote = true,
                              .check_quorum = true,
                              .seed = randombytes_random() | ((uint64_t)randombytes_random() << 32),
                              .hs = hs,
                              .entries = r->ents,
                              .n_entries = r->n_ents,
                              .first_index = n->applied_index + 1,
                              .compacted_term = n->applied_term,
                              .applied = n->applied_index};
  int rc_ = kt_raft_new(&rc, &n->raft);
  if (rc_)
    return kt_err_set(e, rc_, "%s: the log does not make a valid raft state", n->wal_dir);
  kt_log(KT_LOG_INFO, "node", "log recovered snapshot-index=%llu entries=%zu term=%llu commit=%llu",
         (unsigned long long)n->applied_index, r->n_ents, (unsigned long long)hs.term,
         (unsigned long long)hs.commit);
  return 0;
}

/* A lone voter elects itself without waiting an election timeout (as etcd's
 * initial-election-tick-advance). Outside a ready batch. */
void kt_node_campaign_now(struct kt_node *n) {
  uint32_t hb = n->cfg.heartbeat_ms ? n->cfg.heartbeat_ms : 100;
  uint32_t et = n->cfg.election_timeout_ms ? n->cfg.election_timeout_ms : 1000;
  uint32_t ticks = et / hb > 1 ? et / hb : 2;
  for (uint32_t i = 0; i < 2 * ticks; i++)
    kt_raft_tick(n->raft);
}

bool kt_node_solo(const struct kt_node *n) {
  return kt_raft_role(n->raft) == KT_RAFT_LEADER && kt_node_member_voters(n) == 1 && n->serving;
}

static void on_conn_close(void *arg, struct kt_conn *c) { kt_node_watch_conn_closed(arg, c); }
static void on_conn_drained(void *arg, struct kt_conn *c) {
  kt_node_watch_drained(arg, c);
  kt_node_maint_drained(arg, c);
}

int kt_node_open(struct ev_loop *loop, const struct kt_node_config *cfg, struct kt_node **out,
                 struct kt_err *e) {
  struct kt_node *n = calloc(1, sizeof *n);
  kt_assert(n);
  n->loop = loop;
  n->stats.apply_batch_s = (struct kt_hist)KT_HIST_FSYNC;
  n->stats.snapshot_s = (struct kt_hist)KT_HIST_SNAPSHOT;
  n->stats.wal_batch = (struct kt_hist)KT_HIST_BATCH;
  /* proposal numbers carry a random run id: an entry proposed by an earlier
   * run of this member, applied after a restart, answers nobody (and is
   * never applied from a proposal's kept form: own_put). The counter starts
   * anywhere below 2^38 too, so two runs that drew the same run id (1 in
   * 2^23) would also need overlapping counters to take one entry for the
   * other; 2^39 or more proposals remain before it would wrap. */
  n->run_id = ((uint64_t)(randombytes_random() & 0xffffff) | 1u) << 40;
  n->next_seq = (uint64_t)randombytes_random() << 6;
  /* read contexts of an earlier run are ignored too */
  kt_reads_init(&n->rq, n->run_id, 1 + ((uint64_t)randombytes_random() << 6));
  n->cfg = *cfg;
  if (strlen(cfg->data_dir) > 3900) {
    free(n);
    return kt_err_set(e, KT_EINVAL, "--data-dir: path too long");
  }
  snprintf(n->member_dir, sizeof n->member_dir, "%s/member", cfg->data_dir);
  snprintf(n->wal_dir, sizeof n->wal_dir, "%s/wal", n->member_dir);
  snprintf(n->snap_dir, sizeof n->snap_dir, "%s/snap", n->member_dir);
  kt_node_member_init(n);
  int rc;
  if ((rc = mkdir_p(n->wal_dir, e)) || (rc = mkdir_p(n->snap_dir, e)) ||
      (rc = kt_node_member_open(n, e)))
    goto fail;
  kt_node_lease_init(n);
  kt_node_lock_init(n);
  kt_node_maint_init(n);
  kt_node_install_init(n);
  if ((rc = kt_node_auth_init(n, e)))
    goto fail;
  n->store = new_store(n);
  if ((rc = load_snapshot(n, e)))
    goto fail;
  kt_node_watch_init(n); /* on the store that recovery keeps */
  ev_async_init(&n->wal_async, on_wal_synced);
  n->wal_async.data = n;
  ev_async_start(loop, &n->wal_async);
  ev_unref(loop);
  ev_async_init(&n->snap_async, on_snap_progress);
  n->snap_async.data = n;
  ev_async_start(loop, &n->snap_async);
  ev_unref(loop);
  struct kt_wal_opts wo = {.segment_bytes = cfg->wal_segment_bytes,
                           .max_record_bytes = cfg->max_request_bytes + 64, /* hdr + body */
                           .first_index = n->applied_index + 1,
                           .notify = wal_notify,
                           .notify_arg = n};
  struct replay r = {.n = n, .e = e};
  e->code = 0;
  rc = kt_wal_open(n->wal_dir, &wo, replay_rec, &r, &n->wal, e);
  if (rc) {
    if (!e->code)
      kt_err_set(e, rc, "%s: %s", n->wal_dir, kt_strerror(rc));
    free(r.ents);
    kt_arena_free(&r.data);
    goto fail;
  }
  if (r.first_seen > n->applied_index + 1) {
    rc = kt_err_set(e, KT_ECORRUPT,
                    "%s starts at entry %llu but the newest valid snapshot ends at %llu: "
                    "entries are missing",
                    n->wal_dir, (unsigned long long)r.first_seen,
                    (unsigned long long)n->applied_index);
  } else {
    rc = kt_node_member_bootstrap(n, &r, e);
    if (!rc && cfg->force_new_cluster)
      rc = kt_node_force_new_cluster(n, &r, e);
    if (!rc)
      rc = start_raft(n, &r, e);
  }
  free(r.ents);
  kt_arena_free(&r.data);
  if (rc)
    goto fail;
  /* Physical compaction of a recovered compact entry goes on in slices. */
  ev_idle_init(&n->idle_w, on_idle);
  n->idle_w.data = n;
  if (kt_mvcc_compact_pending(n->store))
    ev_idle_start(loop, &n->idle_w);
  ev_prepare_init(&n->prepare_w, on_prepare);
  n->prepare_w.data = n;
  ev_set_priority(&n->prepare_w, EV_MAXPRI); /* replies before the server flushes */
  ev_prepare_start(loop, &n->prepare_w);
  ev_unref(loop);
  double tick = (cfg->heartbeat_ms ? cfg->heartbeat_ms : 100) / 1000.0;
  ev_timer_init(&n->tick_w, on_tick, tick, tick);
  n->tick_w.data = n;
  ev_timer_start(loop, &n->tick_w);
  ev_unref(loop);
  if ((rc = kt_node_member_sync_peers(n, e)))
    goto fail;
  process_ready(n); /* committed entries of the log: applied before serving */
  /* a transport the log's membership changes wanted and could not start
   * (they only log it): the member does not start without it */
  if ((rc = kt_node_member_sync_peers(n, e)))
    goto fail;

  struct kt_server_config sc = {.max_request_bytes = cfg->max_request_bytes,
                                .on_request = on_request,
                                .on_close = on_conn_close,
                                .on_drained = on_conn_drained,
                                .arg = n,
                                .cluster_id = n->cluster_id,
                                .member_id = n->member_id,
                                .io_threads = cfg->io_threads};
  n->server = kt_server_new(loop, &sc, e);
  if (!n->server) {
    rc = e->code;
    goto fail;
  }
  start_auto_compaction(n);
  kt_log(
      KT_LOG_INFO, "node",
      "member started name=%s data-dir=%s cluster-id=%016llx member-id=%016llx applied-index=%llu "
      "revision=%lld keys=%llu",
      cfg->name, cfg->data_dir, (unsigned long long)n->cluster_id, (unsigned long long)n->member_id,
      (unsigned long long)n->applied_index, (long long)kt_mvcc_revision(n->store),
      (unsigned long long)kt_mvcc_keys(n->store));
  *out = n;
  return 0;
fail:
  STOP_UNREFFED(loop, &n->prepare_w, ev_prepare_stop);
  STOP_UNREFFED(loop, &n->tick_w, ev_timer_stop);
  ev_idle_stop(loop, &n->idle_w);
  if (n->peers)
    kt_peer_link_free(n->peers);
  if (n->raft)
    kt_raft_free(n->raft);
  if (n->wal)
    kt_wal_close(n->wal);
  STOP_UNREFFED(loop, &n->wal_async, ev_async_stop);
  STOP_UNREFFED(loop, &n->snap_async, ev_async_stop);
  kt_node_watch_free(n);
  kt_node_lock_free(n);
  kt_node_maint_free(n);
  kt_node_install_free(n);
  kt_node_auth_free(n);
  kt_node_lease_free(n);
  kt_node_member_free(n);
  if (n->store)
    kt_mvcc_free(n->store);
  free(n);
  return rc;
}

int kt_node_listen(struct kt_node *n, const char *host, int port, struct kt_tls_ctx *tls,
                   bool also_plain, struct kt_err *e) {
  return kt_server_listen(n->server, host, port, tls, also_plain, e);
}

/* ---- shutdown ---- */

static void maybe_finish_shutdown(struct kt_node *n) {
  if (n->pend_head < n->n_pend || n->pers_head < n->n_pers)
    return; /* in-flight syncs finish first */
  if (kt_server_unsent(n->server))
    return; /* replies still going out (bounded by the stall cut) */
  kt_log(KT_LOG_INFO, "node", "shutdown: in-flight writes done, closing");
  ev_break(n->loop, EVBREAK_ALL);
}

void kt_node_shutdown(struct kt_node *n) {
  if (n->stopping)
    return;
  n->stopping = true;
  kt_server_stop_accepting(n->server);
  /* Keep the loop alive until the prepare watcher breaks it. */
  ev_ref(n->loop);
}

int kt_node_fatal(const struct kt_node *n) { return n->fatal; }

void kt_node_free(struct kt_node *n) {
  if (!n)
    return;
  kt_node_probes_cancel(n, KT_ESTOPPED);
  STOP_UNREFFED(n->loop, &n->compact_w, ev_timer_stop);
  STOP_UNREFFED(n->loop, &n->tick_w, ev_timer_stop);
  if (n->move.conn)
    kt_conn_unref(n->move.conn);
  held_free(&n->defer);
  free(n->pers);
  held_free(&n->reads);
  kt_server_free(n->server); /* closes connections: their watches go */
  kt_node_watch_free(n);
  kt_node_lock_free(n);
  kt_node_maint_free(n);
  kt_node_install_free(n);
  kt_node_auth_free(n);
  kt_node_lease_free(n);
  kt_node_member_free(n);
  if (n->peers)
    kt_peer_link_free(n->peers);
  kt_arena_free(&n->msg_arena);
  if (n->snap_w)
    kt_snap_writer_free(n->snap_w); /* removes the unfinished tmp file */
  struct kt_err e = {0};
  if (!n->fatal && kt_wal_sync(n->wal, &e))
    kt_log(KT_LOG_ERROR, "wal", "final sync failed: %s", e.msg);
  kt_wal_close(n->wal);
  for (size_t i = n->pend_head; i < n->n_pend; i++)
    if (n->pend[i].conn)
      kt_conn_unref(n->pend[i].conn);
  for (size_t i = 0; i < n->n_waiters; i++)
    kt_conn_unref(n->waiters[i].conn);
  free(n->waiters);
  free(n->pend);
  for (size_t i = 0; i < n->n_dprops; i++)
    kt_buf_free(&n->dprops[i].body);
  free(n->dprops);
  kt_raft_free(n->raft);
  kt_buf_free(&n->scratch);
  kt_raft_ents_enc_free(&n->ents_enc);
  kt_arena_free(&n->arena);
  kt_arena_free(&n->snap_arena);
  kt_mvcc_free(n->store);
  free(n);
}
