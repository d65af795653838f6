/* core/node_lease.c — leases inside a member (etcd v3 leases over core/lease).
 *
 * Data flow:
 *   grant / revoke   client → check → raft proposal → apply on every member in
 *                    log order by kt_sm_apply (core/apply.c): kt_lease_grant,
 *                    or (revoke) the lease's keys deleted at ONE revision
 *                    then kt_lease_revoke. The proposer answers its client.
 *   put with lease   checked when proposed and again when applied (the
 *                    applied check is the one that counts: every member
 *                    holds the same leases at the same index); the store's
 *                    event hook attaches/detaches keys (kt_sm_on_event).
 *   expiry           leader only: every tick, at most REVOKES_PER_TICK
 *                    expired leases (kt_lease_expired, earliest first) are
 *                    proposed as LEASE_REVOKE entries: a storm of expiries is
 *                    spread over ticks and never stalls the loop.
 *   keep-alive, ttl  need the leader's timers: the leader answers a
 *                    keep-alive at once, a time-to-live once a read index
 *                    is applied (core/node.c's linearizable reads: it never
 *                    misses a grant or revoke acknowledged before it);
 *                    a follower forwards the request body to the leader over
 *                    the peer link (FWD_REQ) and relays the answer (FWD_RESP)
 *                    to its client; no leader, or none within two election
 *                    timeouts: ENOLEADER / ETIMEOUT.
 *   leases list      the member's applied state, after a read index.
 *   leadership       becoming the serving leader: kt_lease_promote (every
 *                    lease gets its full TTL plus an election timeout, so no
 *                    lease expires because of an election); losing it:
 *                    kt_lease_demote.
 *   snapshots        the lease table and id generator state go in the
 *                    snapshot's meta blob after the membership text; keys are
 *                    attached again from the restored store (records carry
 *                    their lease). Remaining TTLs restart in full (as etcd
 *                    without lease checkpoints).
 *
 * Peer messages of the node (not raft's, whose first byte is 1):
 *   FWD_REQ  = 2 | seq u64 BE | request body (msgpack, PROTOCOL.md)
 *   FWD_RESP = 3 | seq u64 BE | response body (its id = seq)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "node_int.h"

#define REVOKES_PER_TICK 200 /* 2000 expiries/s at the default 100 ms tick */
#define FWD_REQ 2
#define FWD_RESP 3
#define FWD_HDR 9
#define FWD_MAX 65536
#define BLOB_MAGIC "KTLEASE1"

struct fwd {
  uint64_t seq, to;     /* to: the leader it went to (only it may answer) */
  struct kt_conn *conn; /* NULL once answered */
  uint64_t req_id;
  ev_tstamp since;
};

struct restore_key {
  uint8_t *key;
  uint32_t n;
  int64_t lease;
};

struct node_lease_state {
  struct fwd *v; /* forwarded requests awaiting the leader: v[head..n) */
  size_t n, cap, head;
  uint64_t seq;
  struct restore_key *rk; /* keys to attach after a snapshot load */
  size_t n_rk, cap_rk;
  struct kt_arena arena;
  struct kt_buf buf;
  struct kt_buf fwd_buf; /* kt_node_fwd_reply's frame */
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t min_ttl_s(const struct kt_node *n) {
  /* etcd: 1.5 election timeouts, rounded up to whole seconds. */
  return (int64_t)ceil(1.5 * n->cfg.election_timeout_ms / 1000.0);
}

struct kt_lease_mgr *kt_node_lease_mgr_new(const struct kt_node *n) {
  struct kt_lease_cfg lc = {.id_seed = n->cluster_id};
  return kt_lease_new(&lc);
}

void kt_node_lease_init(struct kt_node *n) {
  n->leases = kt_node_lease_mgr_new(n);
  n->ls = calloc(1, sizeof *n->ls);
  kt_assert(n->ls);
  n->ls->seq = (uint64_t)randombytes_random() << 32; /* answers to an earlier run match nothing */
}

void kt_node_lease_free(struct kt_node *n) {
  struct node_lease_state *ls = n->ls;
  if (!ls)
    return;
  for (size_t i = ls->head; i < ls->n; i++)
    if (ls->v[i].conn)
      kt_conn_unref(ls->v[i].conn);
  free(ls->v);
  for (size_t i = 0; i < ls->n_rk; i++)
    free(ls->rk[i].key);
  free(ls->rk);
  kt_arena_free(&ls->arena);
  kt_buf_free(&ls->buf);
  kt_buf_free(&ls->fwd_buf);
  free(ls);
  kt_lease_free(n->leases);
}

/* ---- apply side ---- */

int kt_node_lease_check(struct kt_node *n, const struct kt_request_op *op, struct kt_err *e) {
  return kt_sm_check_leases(n->leases, op, e);
}

static void reply_lease(struct kt_node *n, struct kt_conn *c, uint64_t id, uint8_t type,
                        const struct kt_lease_resp *l) {
  struct kt_resp r = {.type = type, .id = id};
  if (l)
    r.u.lease = *l;
  kt_node_send(n, c, &r);
}

void kt_node_lease_apply(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                         uint64_t req_id) {
  struct kt_sm sm = {n->store, n->leases, n->watches};
  struct kt_sm_result res;
  struct kt_err e;
  int rc = kt_sm_apply(&sm, req, mono_ms(), &n->arena, &res, &e);
  n->stats.leases_granted += !rc && req->type == KT_MSG_LEASE_GRANT;
  if (!rc && req->type == KT_MSG_LEASE_GRANT)
    kt_log(KT_LOG_DEBUG, "lease", "granted id=%016llx ttl=%lld", (unsigned long long)res.lease_id,
           (long long)res.lease_ttl);
  if (!c)
    return;
  struct kt_lease_resp l = {.id = res.lease_id, .ttl = res.lease_ttl};
  if (rc)
    kt_conn_send_error(c, req_id, rc, NULL);
  else
    reply_lease(n, c, req_id, req->type, req->type == KT_MSG_LEASE_GRANT ? &l : NULL);
}

/* ---- answers that need the leader's timers ---- */

static void collect_id(void *arg, int64_t id, int64_t ttl) {
  (void)ttl;
  struct kt_buf *b = arg;
  kt_buf_append(b, &id, sizeof id);
}

struct keys_out {
  struct kt_bytes *v;
  uint32_t n;
  struct kt_arena *a;
};

static void key_out(void *arg, struct kt_bytes key) {
  struct keys_out *k = arg;
  k->v[k->n++] = (struct kt_bytes){kt_arena_dup(k->a, key.p, key.n), key.n};
}

/* The answer to KEEPALIVE / TTL / LEASES from this member's state. Returns
 * 0 and fills r, or an error code (ENOLEADER for keep-alive/ttl off the
 * leader). */
static int answer(struct kt_node *n, const struct kt_req *req, struct kt_resp *r,
                  struct kt_arena *a, struct kt_buf *tmp, struct kt_err *e) {
  struct kt_lease_resp *l = &r->u.lease;
  kt_node_header(n, &r->header);
  int64_t id = req->u.lease.id;
  int rc;
  switch (req->type) {
  case KT_MSG_LEASE_KEEPALIVE: {
    int64_t ttl = 0;
    rc = kt_lease_keepalive(n->leases, id, mono_ms(), &ttl);
    if (rc == KT_ENOLEADER)
      return kt_err_set(e, rc, "%s", kt_strerror(rc));
    l->id = id;
    l->ttl = rc ? 0 : ttl; /* etcd: TTL 0 for a lease not found */
    return 0;
  }
  case KT_MSG_LEASE_TTL: {
    if (!kt_lease_is_leader(n->leases))
      return kt_err_set(e, KT_ENOLEADER, "%s", kt_strerror(KT_ENOLEADER));
    struct kt_lease_info info;
    l->id = id;
    if (kt_lease_ttl(n->leases, id, mono_ms(), &info)) {
      l->ttl = -1; /* etcd: TTL -1 for a lease not found */
      return 0;
    }
    l->ttl = info.remaining_ttl_s;
    l->granted_ttl = info.granted_ttl_s;
    if (req->u.lease.keys && info.nkeys) {
      struct keys_out k = {kt_arena_alloc(a, info.nkeys * sizeof *k.v), 0, a};
      kt_lease_keys(n->leases, id, key_out, &k);
      l->keys = k.v;
      l->n_keys = k.n;
    }
    return 0;
  }
  case KT_MSG_LEASE_LEASES:
    kt_buf_reset(tmp);
    kt_lease_each(n->leases, collect_id, tmp);
    l->n_leases = (uint32_t)(tmp->len / sizeof(int64_t));
    l->leases = kt_arena_alloc(a, tmp->len ? tmp->len : 1);
    if (tmp->len) /* memcpy from NULL is UB even for 0 bytes (UBSan, lease list of none) */
      memcpy(l->leases, tmp->p, tmp->len);
    return 0;
  default:
    return kt_err_set(e, KT_EUNSUPPORTED, "not a lease query");
  }
}

void kt_node_forward(struct kt_node *n, struct kt_conn *c, uint64_t req_id, const uint8_t *body,
                     size_t body_len) {
  struct node_lease_state *ls = n->ls;
  uint64_t leader = kt_raft_leader(n->raft);
  if (!n->peers || !leader || leader == n->member_id) {
    kt_conn_send_error(c, req_id, KT_ENOLEADER, "no leader");
    return;
  }
  if (ls->n - ls->head >= FWD_MAX) {
    kt_conn_send_error(c, req_id, KT_EBUSY, "too many requests waiting for the leader");
    return;
  }
  struct fwd f = {++ls->seq, leader, c, req_id, ev_now(n->loop)};
  kt_conn_ref(c);
  FIFO_PUSH(ls->v, ls->head, ls->n, ls->cap, f);
  kt_buf_reset(&ls->buf);
  kt_buf_reserve(&ls->buf, FWD_HDR + body_len);
  ls->buf.p[0] = FWD_REQ;
  kt_put_u64be(ls->buf.p + 1, f.seq);
  memcpy(ls->buf.p + FWD_HDR, body, body_len);
  ls->buf.len = FWD_HDR + body_len;
  kt_peer_link_send(n->peers, leader, ls->buf.p, ls->buf.len);
}

void kt_node_lease_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len) {
  struct kt_err e = {0};
  switch (req->type) {
  case KT_MSG_LEASE_GRANT: {
    int64_t ttl = req->u.lease.ttl;
    if (ttl > KT_LEASE_MAX_TTL_S) {
      kt_conn_send_error(c, req->id, KT_EINVAL, "too large lease TTL");
      return;
    }
    if (req->u.lease.id < 0) {
      kt_conn_send_error(c, req->id, KT_EINVAL, "lease id must not be negative");
      return;
    }
    if (req->u.lease.id && kt_lease_exists(n->leases, req->u.lease.id)) {
      kt_conn_send_error(c, req->id, KT_ELEASEEXISTS, NULL);
      return;
    }
    if (ttl < min_ttl_s(n)) {
      /* Raised here, not at apply: members may run with other timeouts. */
      struct kt_req adj = *req;
      adj.u.lease.ttl = min_ttl_s(n);
      kt_buf_reset(&n->ls->buf);
      kt_proto_encode_req_body(&n->ls->buf, &adj);
      kt_node_propose(n, c, req->id, n->ls->buf.p, n->ls->buf.len); /* it copies them */
      return;
    }
    kt_node_propose(n, c, req->id, body, body_len);
    return;
  }
  case KT_MSG_LEASE_REVOKE:
    if (!kt_lease_exists(n->leases, req->u.lease.id)) {
      kt_conn_send_error(c, req->id, KT_ELEASENOTFOUND, NULL);
      return;
    }
    kt_node_propose(n, c, req->id, body, body_len);
    return;
  case KT_MSG_LEASE_KEEPALIVE:
  case KT_MSG_LEASE_TTL:
    if (!kt_lease_is_leader(n->leases)) {
      kt_node_forward(n, c, req->id, body, body_len);
      return;
    }
    /* fall through */
  case KT_MSG_LEASE_LEASES: {
    struct kt_resp r = {.type = req->type, .id = req->id};
    kt_arena_reset(&n->ls->arena);
    int rc = answer(n, req, &r, &n->ls->arena, &n->ls->buf, &e);
    if (rc) {
      kt_node_reply_err(c, req->id, rc, &e);
      return;
    }
    kt_conn_send_resp(c, &r); /* answer() filled the header */
    return;
  }
  default:
    kt_conn_send_error(c, req->id, KT_EUNSUPPORTED, "not a lease request");
  }
}

/* ---- the peer link: forwarded requests and their answers ---- */

/* The leader's answer to a forwarded request: r (its id becomes seq) or the
 * error rc/msg. */
void kt_node_fwd_reply(struct kt_node *n, uint64_t to, uint64_t seq, int rc, const char *msg,
                       const struct kt_resp *r) {
  struct node_lease_state *ls = n->ls;
  if (!n->peers)
    return;
  struct kt_buf *b = &ls->fwd_buf;
  kt_buf_reset(b);
  uint8_t hdr[FWD_HDR] = {FWD_RESP};
  kt_put_u64be(hdr + 1, seq);
  kt_buf_append(b, hdr, FWD_HDR);
  size_t off = b->len;
  if (rc) {
    kt_proto_encode_error(b, seq, rc, msg && *msg ? msg : kt_strerror(rc));
  } else {
    struct kt_resp x = *r;
    x.id = seq;
    kt_proto_encode_resp(b, &x);
  }
  /* Frames carry a length prefix: drop it, the peer frame has its own. */
  memmove(b->p + off, b->p + off + KT_FRAME_HDR, b->len - off - KT_FRAME_HDR);
  b->len -= KT_FRAME_HDR;
  kt_peer_link_send(n->peers, to, b->p, b->len);
}

/* A request a follower forwarded: membership changes answer when applied,
 * a time-to-live once a read index is applied (as the leader's own),
 * keep-alives now. */
static void fwd_answer_leader(struct kt_node *n, uint64_t from, uint64_t seq, const uint8_t *body,
                              size_t len) {
  struct node_lease_state *ls = n->ls;
  struct kt_req req;
  struct kt_err e = {0};
  kt_arena_reset(&ls->arena);
  int rc = kt_proto_decode_req(body, len, &ls->arena, &req, &e);
  if (!rc && req.type >= KT_MSG_MEMBER_ADD && req.type <= KT_MSG_MEMBER_PROMOTE) {
    kt_node_member_request(n, NULL, from, seq, &req); /* answers when applied */
    return;
  }
  if (!rc && req.type == KT_MSG_LEASE_TTL && kt_lease_is_leader(n->leases)) {
    kt_node_read_linearized(n, NULL, from, seq, &req, body, len);
    return;
  }
  kt_node_lease_fwd_answer(n, from, seq, body, len);
}

void kt_node_lease_fwd_answer(struct kt_node *n, uint64_t from, uint64_t seq, const uint8_t *body,
                              size_t len) {
  struct node_lease_state *ls = n->ls;
  struct kt_req req;
  struct kt_err e = {0};
  struct kt_resp r = {0};
  kt_arena_reset(&ls->arena);
  int rc = kt_proto_decode_req(body, len, &ls->arena, &req, &e);
  if (!rc && req.type != KT_MSG_LEASE_KEEPALIVE && req.type != KT_MSG_LEASE_TTL)
    rc = kt_err_set(&e, KT_EUNSUPPORTED, "not a forwardable request");
  if (!rc) {
    r.type = req.type;
    struct kt_buf tmp = {0};
    rc = answer(n, &req, &r, &ls->arena, &tmp, &e);
    kt_buf_free(&tmp);
  }
  kt_node_fwd_reply(n, from, seq, rc, e.msg, &r);
}

static void fwd_relay(struct kt_node *n, uint64_t from, uint64_t seq, const uint8_t *body,
                      size_t len) {
  struct node_lease_state *ls = n->ls;
  struct fwd *f = NULL;
  for (size_t i = ls->head; i < ls->n; i++) /* answers come nearly in order */
    if (ls->v[i].seq == seq) {
      f = &ls->v[i];
      break;
    }
  if (!f || !f->conn || f->to != from)
    return; /* timed out already, or not from the member it was sent to */
  struct kt_resp r;
  struct kt_err e = {0};
  kt_arena_reset(&ls->arena);
  if (kt_proto_decode_resp(body, len, &ls->arena, &r, &e)) {
    kt_conn_send_error(f->conn, f->req_id, KT_EINTERNAL, "undecodable answer from the leader");
  } else if (r.type == KT_MSG_ERROR) {
    char msg[512];
    snprintf(msg, sizeof msg, "%.*s", (int)r.u.error.message.n, r.u.error.message.p);
    kt_conn_send_error(f->conn, f->req_id, (int)r.u.error.code, msg);
  } else {
    r.id = f->req_id;
    kt_conn_send_resp(f->conn, &r); /* the leader's header */
  }
  kt_conn_unref(f->conn);
  f->conn = NULL;
  while (ls->head < ls->n && !ls->v[ls->head].conn)
    ls->head++;
  if (ls->head == ls->n)
    ls->head = ls->n = 0;
}

bool kt_node_lease_peer_message(struct kt_node *n, uint64_t from, const uint8_t *msg, size_t len) {
  if (len < FWD_HDR || (msg[0] != FWD_REQ && msg[0] != FWD_RESP))
    return false;
  uint64_t seq = kt_get_u64be(msg + 1);
  if (msg[0] == FWD_REQ)
    fwd_answer_leader(n, from, seq, msg + FWD_HDR, len - FWD_HDR);
  else
    fwd_relay(n, from, seq, msg + FWD_HDR, len - FWD_HDR);
  return true;
}

/* ---- leader timers ---- */

void kt_node_lease_role(struct kt_node *n, bool leader) {
  if (leader == kt_lease_is_leader(n->leases))
    return;
  if (leader) {
    kt_lease_promote(n->leases, mono_ms(), n->cfg.election_timeout_ms);
    kt_log(KT_LOG_INFO, "lease", "leader: %zu lease(s) extended by the election timeout",
           kt_lease_count(n->leases));
  } else {
    kt_lease_demote(n->leases);
  }
}

void kt_node_lease_tick(struct kt_node *n) {
  struct node_lease_state *ls = n->ls;
  /* Forwarded requests the leader never answered (lost, or a new leader). */
  ev_tstamp limit = 2.0 * n->cfg.election_timeout_ms / 1000.0;
  while (ls->head < ls->n &&
         (!ls->v[ls->head].conn || ev_now(n->loop) - ls->v[ls->head].since > limit)) {
    struct fwd *f = &ls->v[ls->head++];
    if (f->conn) {
      kt_conn_send_error(f->conn, f->req_id, KT_ETIMEOUT,
                         "request timed out: no answer from the leader");
      kt_conn_unref(f->conn);
    }
  }
  if (ls->head == ls->n)
    ls->head = ls->n = 0;
  if (!kt_lease_is_leader(n->leases) || n->wal_failed)
    return;
  int64_t ids[REVOKES_PER_TICK];
  size_t k = kt_lease_expired(n->leases, mono_ms(), REVOKES_PER_TICK, ids);
  for (size_t i = 0; i < k; i++) {
    struct kt_req req = {.type = KT_MSG_LEASE_REVOKE};
    req.u.lease.id = ids[i];
    kt_buf_reset(&ls->buf);
    kt_proto_encode_req_body(&ls->buf, &req);
    kt_node_propose(n, NULL, 0, ls->buf.p, ls->buf.len);
  }
  if (k)
    kt_log(KT_LOG_DEBUG, "lease", "%zu expired lease(s) proposed for revocation", k);
}

/* ---- snapshots ---- */

static void save_one(void *arg, int64_t id, int64_t ttl) {
  uint8_t b[16];
  kt_put_u64be(b, (uint64_t)id);
  kt_put_u64be(b + 8, (uint64_t)ttl);
  kt_buf_append(arg, b, sizeof b);
}

/* Blob: "KTLEASE1" | id state 4 x u64 | count u64 | count x (id u64, ttl u64). */
static void lease_table_save(const struct kt_lease_mgr *m, struct kt_buf *out) {
  uint8_t h[8 + 32 + 8];
  uint64_t st[4];
  memcpy(h, BLOB_MAGIC, 8);
  kt_lease_id_state(m, st);
  for (int i = 0; i < 4; i++)
    kt_put_u64be(h + 8 + 8 * i, st[i]);
  kt_put_u64be(h + 40, kt_lease_count(m));
  kt_buf_append(out, h, sizeof h);
  kt_buf_reserve(out, 16 * kt_lease_count(m));
  kt_lease_each_unsorted(m, save_one, out);
}

void kt_node_lease_save(struct kt_node *n, struct kt_buf *out) { lease_table_save(n->leases, out); }

/* The table at p: fn per lease (stops at its first non-zero return), the id
 * state into st; *used = its size. */
static int lease_table_load(const uint8_t *p, size_t len, size_t *used, uint64_t st[4],
                            int (*fn)(void *arg, int64_t id, int64_t ttl), void *arg,
                            struct kt_err *e) {
  if (len < 48 || memcmp(p, BLOB_MAGIC, 8) != 0)
    return kt_err_set(e, KT_ECORRUPT, "snapshot lease table: bad header");
  for (int i = 0; i < 4; i++)
    st[i] = kt_get_u64be(p + 8 + 8 * i);
  uint64_t cnt = kt_get_u64be(p + 40);
  if (cnt > (len - 48) / 16)
    return kt_err_set(e, KT_ECORRUPT, "snapshot lease table: %llu leases in %zu bytes",
                      (unsigned long long)cnt, len);
  for (uint64_t i = 0; i < cnt; i++) {
    int64_t id = (int64_t)kt_get_u64be(p + 48 + 16 * i);
    int64_t ttl = (int64_t)kt_get_u64be(p + 56 + 16 * i);
    if (fn(arg, id, ttl))
      return kt_err_set(e, KT_ECORRUPT, "snapshot lease table: bad lease %lld ttl %lld",
                        (long long)id, (long long)ttl);
  }
  *used = 48 + cnt * 16;
  return 0;
}

static int restore_one(void *arg, int64_t id, int64_t ttl) {
  return kt_lease_restore(arg, id, ttl);
}

int kt_node_lease_load(struct kt_node *n, const uint8_t *p, size_t len, size_t *used,
                       struct kt_err *e) {
  uint64_t st[4];
  int rc = lease_table_load(p, len, used, st, restore_one, n->leases, e);
  if (!rc)
    kt_lease_set_id_state(n->leases, st);
  return rc;
}

/* ---- the meta blob for tools (node.h) ---- */

void kt_node_blob_make(const char *text, const struct kt_lease_mgr *leases, struct kt_buf *out) {
  kt_buf_append(out, text, strlen(text) + 1);
  lease_table_save(leases, out);
}

int kt_node_blob_leases(const uint8_t *blob, size_t len,
                        int (*fn)(void *arg, int64_t id, int64_t ttl), void *arg,
                        struct kt_err *e) {
  const uint8_t *nul = len ? memchr(blob, 0, len) : NULL;
  if (!nul)
    return 0; /* no tables: no leases */
  size_t off = (size_t)(nul + 1 - blob), used = 0;
  if (len - off >= 8 && !memcmp(blob + off, "KTMEMBS1", 8)) {
    struct kt_node_members *t = malloc(sizeof *t);
    kt_assert(t);
    int rc = kt_node_member_decode(blob + off, len - off, &used, t, e);
    free(t);
    if (rc)
      return rc;
    off += used;
  }
  uint64_t st[4];
  return lease_table_load(blob + off, len - off, &used, st, fn, arg, e);
}

void kt_node_lease_note_key(struct kt_node *n, struct kt_bytes key, int64_t lease) {
  struct node_lease_state *ls = n->ls;
  if (ls->n_rk == ls->cap_rk) {
    ls->cap_rk = ls->cap_rk ? 2 * ls->cap_rk : 64;
    ls->rk = realloc(ls->rk, ls->cap_rk * sizeof *ls->rk);
    kt_assert(ls->rk);
  }
  uint8_t *k = malloc(key.n ? key.n : 1);
  kt_assert(k);
  memcpy(k, key.p, key.n);
  ls->rk[ls->n_rk++] = (struct restore_key){k, key.n, lease};
}

void kt_node_lease_restore_done(struct kt_node *n, bool attach) {
  struct node_lease_state *ls = n->ls;
  for (size_t i = 0; i < ls->n_rk; i++) {
    if (attach &&
        kt_lease_attach(n->leases, ls->rk[i].lease, (struct kt_bytes){ls->rk[i].key, ls->rk[i].n}))
      kt_log(KT_LOG_WARN, "lease", "snapshot key of unknown lease %016llx left unattached",
             (unsigned long long)ls->rk[i].lease);
    free(ls->rk[i].key);
  }
  free(ls->rk);
  ls->rk = NULL;
  ls->n_rk = ls->cap_rk = 0;
}
