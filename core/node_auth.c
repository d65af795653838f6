/* core/node_auth.c — authentication and authorization in the member (etcd's
 * auth, issue 16). The store itself is core/auth.c; tokens net/token.c;
 * password hashing off the loop net/pwhash.c.
 *
 * Who a request comes from (kt_node_auth_gate, before anything else in
 * on_request): with auth disabled, nobody in particular. Enabled: the user
 * the connection authenticated as (AUTHENTICATE with a password or a token)
 * while that binding holds (kt_auth_bound_valid: the user not deleted, its
 * password not changed, auth not enabled again since; else EINVALIDTOKEN
 * and the client authenticates again, as clientv3 does), else the verified client
 * certificate's Common Name (kt_conn_identity), else EUSEREMPTY ("user name
 * is empty", etcd's answer to a request without a token). The binding also
 * lives only as long as the token it came with (token_alive): a simple
 * token is renewed by each request on the connection and ends unused for
 * its TTL; a signed one ends at its expiry.
 *
 * What it may do: kt_node_authorize, the ONE check every request kind goes
 * through, at the member that takes the request and again when a write
 * applies (so a permission revoked while the write was in flight never lets
 * it through):
 *   RANGE               READ on [key, range_end)
 *   PUT                 WRITE on the key; READ too with prev_kv; with a
 *                       lease: WRITE on every key already attached to it
 *   DELETE              WRITE on the range; READ too with prev_kv
 *   TXN                 READ on every compare's key range; every op of both
 *                       branches, nested txns at any depth, as above
 *   COMPACT             root
 *   LEASE_REVOKE        WRITE on every key attached to the lease, or root
 *   LEASE_TTL with keys READ on each attached key
 *   LEASE_GRANT, _KEEPALIVE, _LEASES, STATUS, MEMBER_LIST, ALARM GET,
 *   WATCH_CANCEL, WATCH_PROGRESS: any authenticated user
 *   WATCH_CREATE        READ on the watched range (and when a later auth
 *                       change takes that away, the watch is cancelled with
 *                       "permission denied": node_watch.c)
 *   AUTH_CHECK          as a WATCH_CREATE of its range, and nothing else:
 *                       the answer ketch-grpc asks for when a client watch
 *                       joins an upstream watch it shares (no key is read)
 *   LOCK, CAMPAIGN      READ on the name's prefix, WRITE on the lock's key
 *   UNLOCK              WRITE on the key; PROCLAIM, RESIGN: READ and WRITE
 *                       on the leader's key; LEADER, OBSERVE: READ on the
 *                       name's prefix
 *   MEMBER_ADD .. PROMOTE, MOVE_LEADER, DEFRAGMENT, HASH_KV, SNAPSHOT,
 *   ALARM ACTIVATE / DEACTIVATE, AUTH_ENABLE, AUTH_DISABLE, USER_*, ROLE_*:
 *                       root; except USER_GET of oneself and ROLE_GET of a
 *                       role one has
 *   AUTHENTICATE, AUTH_STATUS: anyone
 * Its answers are remembered in one way only: a connection bound to a user
 * keeps the permission interval its last allowed RANGE and PUT fell in,
 * with the auth store's stamp (core/auth.h: new with every change and
 * load), and a RANGE, or a PUT without prev_kv or lease, inside it is
 * allowed without the lookups while the stamp holds (kt_node_auth_gate);
 * a denial is never remembered.
 * Writes proposed by an authenticated connection go into the log as AUTHED
 * {user, auth revision, body}; the member's own proposals as AUTHED {member}
 * (never checked); a plain body applied while auth is enabled was proposed
 * before it was enabled: EAUTHOLDREVISION (etcd refuses those too).
 *
 * Passwords: AUTHENTICATE verifies on a worker thread (no log entry);
 * USER_ADD and USER_CHANGE_PASSWORD hash on one and propose the hash. The
 * state thread only queues and takes results (net/pwhash.h).
 *
 * Audit: one "audit" log line per authentication failure, permission denial
 * and auth change (who, what, which key range, the decision); never a
 * password or a token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "../net/pwhash.h"
#include "../net/token.h"
#include "node_int.h"

struct pw_ctx {
  struct kt_conn *conn; /* a reference held */
  uint64_t req_id;
  uint8_t type; /* AUTHENTICATE, USER_ADD, USER_CHANGE_PASSWORD */
  uint64_t rev; /* AUTHENTICATE: the auth revision the hash was read at */
  struct kt_node_ident as;
  char name[KT_AUTH_NAME_MAX + 1];
  uint32_t name_len;
  bool no_password;
};

struct node_auth_state {
  struct kt_tokens *tokens;
  struct kt_pwhash *pw;
  ev_async pw_async;
  struct kt_arena arena;
  struct kt_buf buf;
};

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- audit ---- */

/* Printable bytes as they are, the others as \xNN, at most 64 bytes. */
static const char *shown(struct kt_bytes b, char *out, size_t cap) {
  size_t w = 0;
  for (uint32_t i = 0; i < b.n && i < 64 && w + 5 < cap; i++) {
    uint8_t c = b.p[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
      out[w++] = (char)c;
    else
      w += (size_t)snprintf(out + w, cap - w, "\\x%02x", c);
  }
  if (b.n > 64 && w + 4 < cap)
    memcpy(out + w, "...", 3), w += 3;
  out[w] = 0;
  return out;
}

static void audit_deny(const struct kt_node_ident *id, const char *op, struct kt_bytes key,
                       struct kt_bytes end, int code) {
  char u[300], k[300], e[300];
  kt_log(KT_LOG_WARN, "audit",
         "decision=deny user=\"%s\" op=%s key=\"%s\" range_end=\"%s\" reason=%s",
         shown((struct kt_bytes){(const uint8_t *)id->user, id->user_len}, u, sizeof u), op,
         shown(key, k, sizeof k), shown(end, e, sizeof e), kt_errname(code));
}

/* ---- lifetime ---- */

static void pw_notify(void *arg) {
  struct kt_node *n = arg;
  ev_async_send(n->loop, &n->as->pw_async);
}

static void on_pw_done(struct ev_loop *loop, ev_async *w, int revents);

int kt_node_auth_init(struct kt_node *n, struct kt_err *e) {
  struct node_auth_state *as = calloc(1, sizeof *as);
  kt_assert(as);
  n->as = as;
  n->auth = kt_auth_new();
  struct kt_token_opts to = {.kind = n->cfg.auth_token_signed ? KT_TOKEN_SIGNED : KT_TOKEN_SIMPLE,
                             .ttl_s = n->cfg.auth_token_ttl_s,
                             .priv_key = n->cfg.auth_token_priv_key,
                             .pub_key = n->cfg.auth_token_pub_key};
  int rc = kt_tokens_new(&to, &as->tokens, e);
  if (rc) {
    char why[sizeof e->msg];
    snprintf(why, sizeof why, "%s", e->msg);
    return kt_err_set(e, rc, "--auth-token: %s", why);
  }
  struct kt_pwhash_opts po = {.threads = n->cfg.auth_hash_threads,
                              .opslimit = n->cfg.auth_hash_opslimit,
                              .memlimit = n->cfg.auth_hash_memlimit,
                              .notify = pw_notify,
                              .notify_arg = n};
  if ((rc = kt_pwhash_new(&po, &as->pw, e)))
    return rc;
  ev_async_init(&as->pw_async, on_pw_done);
  as->pw_async.data = n;
  ev_async_start(n->loop, &as->pw_async);
  ev_unref(n->loop); /* it does not keep the loop alive */
  return 0;
}

static void drop_job(struct kt_pwhash_job *job, void *arg) {
  (void)arg;
  struct pw_ctx *x = job->ctx;
  kt_conn_unref(x->conn);
  free(x);
}

void kt_node_auth_free(struct kt_node *n) {
  struct node_auth_state *as = n->as;
  if (!as)
    return;
  kt_pwhash_free(as->pw, drop_job, NULL);
  if (ev_is_active(&as->pw_async)) {
    ev_ref(n->loop);
    ev_async_stop(n->loop, &as->pw_async);
  }
  kt_tokens_free(as->tokens);
  kt_arena_free(&as->arena);
  kt_buf_free(&as->buf);
  free(as);
  n->as = NULL;
  kt_auth_free(n->auth);
  n->auth = NULL;
}

/* ---- identity ---- */

static void ident_set(struct kt_node_ident *id, struct kt_bytes user, uint64_t rev) {
  id->set = true;
  id->member = false;
  id->user_len = user.n <= KT_AUTH_NAME_MAX ? user.n : KT_AUTH_NAME_MAX;
  memcpy(id->user, user.p, id->user_len);
  id->rev = rev;
}

static struct kt_bytes ident_user(const struct kt_node_ident *id) {
  return (struct kt_bytes){(const uint8_t *)id->user, id->user_len};
}

/* The connection's token still lives: a simple one is in the table (a
 * request is a use, renewing it; unused for its TTL it is gone), a signed
 * one has not expired. A connection bound without a token has none. Per
 * request, so cheap: the loop's clock, and the table looked up (and the
 * token renewed) at most once a second per connection — a token evicted or
 * expired meanwhile keeps its connection at most that second longer. */
static bool token_alive(struct kt_node *n, struct kt_conn *c) {
  struct kt_bytes tok;
  int64_t exp, now = (int64_t)(ev_now(n->loop) * 1000);
  kt_conn_token(c, &tok, &exp);
  if (tok.n && now - kt_conn_token_checked(c) >= 1000) {
    struct kt_token_info info;
    if (kt_tokens_check(n->as->tokens, tok, now, &info))
      return false;
    kt_conn_set_token_checked(c, now);
  }
  return !exp || now < exp;
}

/* Binds c to user for the token it authenticated with (its lifetime:
 * expires_ms of a signed one, else the simple token's text). */
static void bind_conn(struct kt_conn *c, struct kt_bytes user, uint64_t rev, struct kt_bytes token,
                      int64_t expires_ms) {
  kt_conn_set_user(c, user, rev);
  kt_conn_set_token(c, expires_ms ? (struct kt_bytes){0} : token, expires_ms);
}

/* Who sends on c (auth enabled): 0 and *id, or the error to answer. */
static int ident_of(struct kt_node *n, struct kt_conn *c, struct kt_node_ident *id,
                    struct kt_err *e) {
  struct kt_bytes user;
  uint64_t rev;
  if (kt_conn_user(c, &user, &rev)) {
    /* checked now, at the store's revision (as etcd's simple tokens): a
     * write applied after a later auth change is refused there */
    ident_set(id, user, kt_auth_revision(n->auth));
    if (!kt_auth_bound_valid(n->auth, user, rev) || !token_alive(n, c))
      return kt_err_set(e, KT_EINVALIDTOKEN, "%s", kt_strerror(KT_EINVALIDTOKEN));
    return 0;
  }
  const char *cn = kt_conn_identity(c);
  if (cn && *cn) {
    ident_set(id, (struct kt_bytes){(const uint8_t *)cn, (uint32_t)strlen(cn)},
              kt_auth_revision(n->auth));
    return 0;
  }
  kt_ident_clear(id);
  return kt_err_set(e, KT_EUSEREMPTY, "%s", kt_strerror(KT_EUSEREMPTY));
}

/* ---- the check ---- */

static int deny(const struct kt_node_ident *id, const char *op, struct kt_bytes key,
                struct kt_bytes end, struct kt_err *e) {
  audit_deny(id, op, key, end, KT_EPERMDENIED);
  return kt_err_set(e, KT_EPERMDENIED, "%s", kt_strerror(KT_EPERMDENIED));
}

static int need(struct kt_node *n, const struct kt_node_ident *id, uint8_t type, const char *op,
                struct kt_bytes key, struct kt_bytes end, struct kt_err *e) {
  if (kt_auth_allows(n->auth, ident_user(id), type, key, end))
    return 0;
  return deny(id, op, key, end, e);
}

static int need_root(struct kt_node *n, const struct kt_node_ident *id, const char *op,
                     struct kt_err *e) {
  if (kt_auth_is_root(n->auth, ident_user(id)))
    return 0;
  if (!kt_auth_user_exists(n->auth, ident_user(id))) { /* a CN naming nobody: etcd's answer */
    audit_deny(id, op, (struct kt_bytes){0}, (struct kt_bytes){0}, KT_EUSERNOTFOUND);
    return kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
  }
  return deny(id, op, (struct kt_bytes){0}, (struct kt_bytes){0}, e);
}

struct lease_keys_check {
  struct kt_node *n;
  const struct kt_node_ident *id;
  bool ok;
};

static void lease_key_writable(void *arg, struct kt_bytes key) {
  struct lease_keys_check *x = arg;
  if (x->ok &&
      !kt_auth_allows(x->n->auth, ident_user(x->id), KT_PERM_WRITE, key, (struct kt_bytes){0}))
    x->ok = false;
}

static void lease_key_readable(void *arg, struct kt_bytes key) {
  struct lease_keys_check *x = arg;
  if (x->ok &&
      !kt_auth_allows(x->n->auth, ident_user(x->id), KT_PERM_READ, key, (struct kt_bytes){0}))
    x->ok = false;
}

/* Every key attached to lease `id` passes fn (or the user is root). */
static int lease_keys(struct kt_node *n, const struct kt_node_ident *id, int64_t lease,
                      void (*fn)(void *, struct kt_bytes), const char *op, struct kt_err *e) {
  if (!lease || kt_auth_is_root(n->auth, ident_user(id)))
    return 0;
  struct lease_keys_check x = {n, id, true};
  kt_lease_keys(n->leases, lease, fn, &x);
  if (x.ok)
    return 0;
  char what[32];
  snprintf(what, sizeof what, "%016llx", (unsigned long long)lease);
  return deny(id, op, (struct kt_bytes){(const uint8_t *)what, (uint32_t)strlen(what)},
              (struct kt_bytes){0}, e);
}

static int check_op(struct kt_node *n, const struct kt_node_ident *id,
                    const struct kt_request_op *op, struct kt_err *e) {
  int rc;
  switch (op->type) {
  case KT_OP_RANGE:
    return need(n, id, KT_PERM_READ, "range", op->u.range.key, op->u.range.range_end, e);
  case KT_OP_PUT:
    if ((rc = need(n, id, KT_PERM_WRITE, "put", op->u.put.key, (struct kt_bytes){0}, e)))
      return rc;
    if (op->u.put.prev_kv &&
        (rc = need(n, id, KT_PERM_READ, "put prev_kv", op->u.put.key, (struct kt_bytes){0}, e)))
      return rc;
    return lease_keys(n, id, op->u.put.lease, lease_key_writable, "put with lease", e);
  case KT_OP_DELETE:
    if ((rc = need(n, id, KT_PERM_WRITE, "delete", op->u.del.key, op->u.del.range_end, e)))
      return rc;
    return op->u.del.prev_kv
               ? need(n, id, KT_PERM_READ, "delete prev_kv", op->u.del.key, op->u.del.range_end, e)
               : 0;
  default: { /* TXN: every compare, every op of both branches */
    const struct kt_txn_req *t = &op->u.txn;
    for (uint32_t i = 0; i < t->n_compare; i++)
      if ((rc = need(n, id, KT_PERM_READ, "txn compare", t->compare[i].key, t->compare[i].range_end,
                     e)))
        return rc;
    for (uint32_t i = 0; i < t->n_success; i++)
      if ((rc = check_op(n, id, &t->success[i], e)))
        return rc;
    for (uint32_t i = 0; i < t->n_failure; i++)
      if ((rc = check_op(n, id, &t->failure[i], e)))
        return rc;
    return 0;
  }
  }
}

/* [name/, name0): the prefix a lock or an election keeps its keys under. */
static struct kt_bytes name_prefix(struct kt_node *n, struct kt_bytes name, struct kt_bytes *end) {
  struct kt_arena *a = &n->as->arena;
  uint8_t *k = kt_arena_alloc(a, name.n + 1), *x = kt_arena_alloc(a, name.n + 1);
  if (name.n)
    memcpy(k, name.p, name.n);
  k[name.n] = '/';
  memcpy(x, k, name.n + 1);
  x[name.n] = '/' + 1;
  *end = (struct kt_bytes){x, name.n + 1};
  return (struct kt_bytes){k, name.n + 1};
}

/* etcd's maintenance server (defragment, hash, hash-kv, snapshot) answers
 * with the auth store's own error texts (auth.ErrPermissionDenied,
 * ErrUserEmpty, ErrInvalidAuthToken), not the etcdserver ones. */
static bool maint_type(uint8_t type) {
  return type == KT_MSG_DEFRAGMENT || type == KT_MSG_HASH_KV || type == KT_MSG_SNAPSHOT;
}

static void maint_err(struct kt_err *e) {
  switch (e->code) {
  case KT_EPERMDENIED:
    kt_err_set(e, KT_EPERMDENIED, "auth: permission denied");
    break;
  case KT_EUSEREMPTY:
    kt_err_set(e, KT_EUSEREMPTY, "auth: user name is empty");
    break;
  case KT_EINVALIDTOKEN:
    kt_err_set(e, KT_EINVALIDTOKEN, "auth: invalid auth token");
    break;
  default:
    break;
  }
}

int kt_node_authorize(struct kt_node *n, const struct kt_node_ident *id, const struct kt_req *req,
                      struct kt_err *e) {
  if (!kt_auth_enabled(n->auth) || (id && id->member))
    return 0;
  kt_assert(id && id->set);
  const struct kt_bytes none = {0};
  struct kt_bytes end;
  int rc;
  switch (req->type) {
  case KT_MSG_RANGE:
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_TXN:
    return check_op(n, id, &req->u.op, e);
  case KT_MSG_COMPACT:
  case KT_MSG_MEMBER_ADD:
  case KT_MSG_MEMBER_REMOVE:
  case KT_MSG_MEMBER_UPDATE:
  case KT_MSG_MEMBER_PROMOTE:
  case KT_MSG_MOVE_LEADER:
  case KT_MSG_AUTH_ENABLE:
  case KT_MSG_AUTH_DISABLE:
  case KT_MSG_USER_ADD:
  case KT_MSG_USER_LIST:
  case KT_MSG_USER_DELETE:
  case KT_MSG_USER_CHANGE_PASSWORD:
  case KT_MSG_USER_GRANT_ROLE:
  case KT_MSG_USER_REVOKE_ROLE:
  case KT_MSG_ROLE_ADD:
  case KT_MSG_ROLE_LIST:
  case KT_MSG_ROLE_DELETE:
  case KT_MSG_ROLE_GRANT_PERMISSION:
  case KT_MSG_ROLE_REVOKE_PERMISSION:
    return need_root(n, id, kt_proto_type_name(req->type), e);
  case KT_MSG_DEFRAGMENT:
  case KT_MSG_HASH_KV:
  case KT_MSG_SNAPSHOT:
    if ((rc = need_root(n, id, kt_proto_type_name(req->type), e)))
      maint_err(e);
    return rc;
  case KT_MSG_USER_GET: /* oneself, or root */
    if (req->u.auth.name.n == id->user_len &&
        memcmp(req->u.auth.name.p, id->user, id->user_len) == 0)
      return 0;
    return need_root(n, id, "user_get", e);
  case KT_MSG_ROLE_GET: /* a role one has, or root */
    if (kt_auth_has_role(n->auth, ident_user(id), req->u.auth.name))
      return 0;
    return need_root(n, id, "role_get", e);
  case KT_MSG_ALARM:
    return req->u.alarm.action == KT_ALARM_GET ? 0 : need_root(n, id, "alarm", e);
  case KT_MSG_LEASE_REVOKE:
    return lease_keys(n, id, req->u.lease.id, lease_key_writable, "lease_revoke", e);
  case KT_MSG_LEASE_TTL:
    return req->u.lease.keys
               ? lease_keys(n, id, req->u.lease.id, lease_key_readable, "lease_ttl keys", e)
               : 0;
  case KT_MSG_WATCH_CREATE:
    return need(n, id, KT_PERM_READ, "watch", req->u.watch_create.key,
                req->u.watch_create.range_end, e);
  case KT_MSG_AUTH_CHECK: /* a watch of the range (a bridge's client joining a shared one) */
    return need(n, id, KT_PERM_READ, "watch", req->u.auth_check.key, req->u.auth_check.range_end,
                e);
  case KT_MSG_LOCK:
  case KT_MSG_CAMPAIGN: {
    struct kt_bytes pre = name_prefix(n, req->u.lock.name, &end);
    if ((rc = need(n, id, KT_PERM_READ, kt_proto_type_name(req->type), pre, end, e)))
      return rc;
    /* the lock's key: name/<lease in hex> */
    char hex[24];
    int hn = snprintf(hex, sizeof hex, "%llx", (unsigned long long)req->u.lock.lease);
    uint8_t *k = kt_arena_alloc(&n->as->arena, pre.n + (size_t)hn);
    memcpy(k, pre.p, pre.n);
    memcpy(k + pre.n, hex, (size_t)hn);
    return need(n, id, KT_PERM_WRITE, kt_proto_type_name(req->type),
                (struct kt_bytes){k, pre.n + (uint32_t)hn}, none, e);
  }
  case KT_MSG_UNLOCK:
    return need(n, id, KT_PERM_WRITE, "unlock", req->u.lock.key, none, e);
  case KT_MSG_PROCLAIM:
  case KT_MSG_RESIGN:
    if ((rc = need(n, id, KT_PERM_READ, kt_proto_type_name(req->type), req->u.lock.leader.key, none,
                   e)))
      return rc;
    return need(n, id, KT_PERM_WRITE, kt_proto_type_name(req->type), req->u.lock.leader.key, none,
                e);
  case KT_MSG_LEADER:
  case KT_MSG_OBSERVE: {
    struct kt_bytes pre = name_prefix(n, req->u.lock.name, &end);
    return need(n, id, KT_PERM_READ, kt_proto_type_name(req->type), pre, end, e);
  }
  default: /* STATUS, MEMBER_LIST, LEASE_GRANT/KEEPALIVE/LEASES, WATCH_CANCEL/PROGRESS,
              AUTHENTICATE, AUTH_STATUS: anyone authenticated */
    return 0;
  }
}

/* Who sends req on c, and whether they may: 0 and *id, or the error. */
static int check_conn(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                      struct kt_node_ident *id, struct kt_err *e) {
  kt_arena_reset(&n->as->arena);
  int rc = ident_of(n, c, id, e);
  if (rc && maint_type(req->type))
    maint_err(e);
  return rc ? rc : kt_node_authorize(n, id, req, e);
}

_Static_assert(KT_PERM_READ == 0 && KT_PERM_WRITE == 1, "kt_conn_grants: [0] READ, [1] WRITE");

/* A request whose whole check is one kt_auth_allows: a RANGE, or a PUT
 * without prev_kv or a lease (those read more than one permission or the
 * lease's keys). Its permission type, key and range end. */
static bool one_check(const struct kt_req *req, uint8_t *type, struct kt_bytes *key,
                      struct kt_bytes *end) {
  if (req->type == KT_MSG_RANGE) {
    *type = KT_PERM_READ, *key = req->u.op.u.range.key, *end = req->u.op.u.range.range_end;
    return true;
  }
  if (req->type == KT_MSG_PUT && !req->u.op.u.put.prev_kv && !req->u.op.u.put.lease) {
    *type = KT_PERM_WRITE, *key = req->u.op.u.put.key, *end = (struct kt_bytes){0};
    return true;
  }
  return false;
}

/* The gate, for one request. A connection bound to a user keeps the
 * permission interval its last allowed RANGE (PUT) fell in, with the auth
 * store's stamp (core/auth.h): while the store is unchanged (every change,
 * a revoke, a deleted user, a new password, gives a new stamp) a request of
 * one_check's kinds inside that interval is allowed as kt_node_authorize
 * would (the binding's validity and the permission depend on the store
 * only); the token is still checked each time; anything else, and every
 * denial, takes the whole check. */
int kt_node_auth_gate(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                      const uint8_t *body, size_t body_len) {
  kt_ident_clear(&n->prop_as);
  if (req->type >= KT_MSG_AUTH_ENABLE && req->type <= KT_MSG_ROLE_REVOKE_PERMISSION) {
    kt_node_auth_request(n, c, req, body, body_len);
    return 1;
  }
  if (!kt_auth_enabled(n->auth))
    return 0;
  uint8_t type;
  struct kt_bytes key, end, user;
  uint64_t rev;
  struct kt_auth_grant *g = NULL;
  if (one_check(req, &type, &key, &end) && kt_conn_user(c, &user, &rev)) {
    g = &kt_conn_grants(c)[type];
    if (g->stamp == kt_auth_stamp(n->auth) && kt_auth_grant_covers(g, key, end) &&
        token_alive(n, c)) {
      ident_set(&n->prop_as, user, kt_auth_revision(n->auth));
      return 0;
    }
  }
  struct kt_err e = {0};
  struct kt_node_ident id;
  int rc = check_conn(n, c, req, &id, &e);
  if (rc) {
    kt_node_reply_err(c, req->id, rc, &e);
    return 1;
  }
  if (g) /* set only for a connection bound to `user` */
    kt_auth_grant_of(n->auth, user, type, key, g);
  kt_ident_copy(&n->prop_as, &id);
  return 0;
}

/* ---- proposals: AUTHED bodies ---- */

bool kt_node_auth_wrap(struct kt_node *n, struct kt_conn *c, const uint8_t *body, size_t len,
                       struct kt_buf *out, uint64_t *checked_rev) {
  struct kt_authed_req w = {.body = {body, (uint32_t)len}};
  *checked_rev = 0;
  if (n->prop_as.set && kt_auth_enabled(n->auth)) {
    w.user = ident_user(&n->prop_as);
    w.auth_revision = n->prop_as.rev;
    *checked_rev = w.user.n ? w.auth_revision : 0;
  } else if (!c && !n->prop_as.set) {
    w.member = true; /* the member's own */
  } else {
    return false;
  }
  kt_proto_encode_authed(out, &w);
  return true;
}

/* Whether op's permission check reads a lease's keys (a put with a lease,
 * anywhere in a txn). */
static bool op_uses_lease(const struct kt_request_op *op) {
  switch (op->type) {
  case KT_OP_RANGE:
  case KT_OP_DELETE:
    return false;
  case KT_OP_PUT:
    return op->u.put.lease != 0;
  default: {
    const struct kt_txn_req *t = &op->u.txn;
    for (uint32_t i = 0; i < t->n_success; i++)
      if (op_uses_lease(&t->success[i]))
        return true;
    for (uint32_t i = 0; i < t->n_failure; i++)
      if (op_uses_lease(&t->failure[i]))
        return true;
    return false;
  }
  }
}

/* Whether kt_node_authorize(req) depends on more than the auth store and
 * the request itself. */
static bool lease_dependent(const struct kt_req *req) {
  switch (req->type) {
  case KT_MSG_RANGE:
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_TXN:
    return op_uses_lease(&req->u.op);
  case KT_MSG_LEASE_REVOKE:
  case KT_MSG_LEASE_TTL:
    return true;
  default:
    return false;
  }
}

bool kt_node_auth_settled(struct kt_node *n, uint64_t auth_revision, const struct kt_req *req) {
  if (!kt_auth_enabled(n->auth))
    return true;
  /* Checked at the gate against this very auth store (the entry carries
   * the revision it was checked at, and every auth change bumps it): the
   * same check gives the same answer now, unless it also looked at the
   * keys of a lease, which may have changed since. */
  return auth_revision && auth_revision == kt_auth_revision(n->auth) && !lease_dependent(req);
}

int kt_node_auth_unwrap(struct kt_node *n, struct kt_req *req, struct kt_arena *a, struct kt_err *e,
                        bool *fatal) {
  *fatal = false;
  if (req->type != KT_MSG_AUTHED) {
    if (kt_auth_enabled(n->auth))
      /* a client's write proposed before auth was enabled */
      return kt_err_set(e, KT_EAUTHOLDREVISION, "%s", kt_strerror(KT_EAUTHOLDREVISION));
    return 0;
  }
  struct kt_authed_req w = req->u.authed;
  if (kt_proto_decode_req(w.body.p, w.body.n, a, req, e) || req->type == KT_MSG_AUTHED) {
    *fatal = true; /* validated before it was proposed: a bug or a bad disk */
    return e->code ? e->code : kt_err_set(e, KT_ECORRUPT, "an AUTHED entry inside one");
  }
  if (w.member)
    return 0;
  if (kt_auth_enabled(n->auth) && (!w.user.n || w.auth_revision < kt_auth_revision(n->auth)))
    return kt_err_set(e, KT_EAUTHOLDREVISION, "%s", kt_strerror(KT_EAUTHOLDREVISION));
  if (kt_node_auth_settled(n, w.auth_revision, req))
    return 0;
  struct kt_node_ident id;
  ident_set(&id, w.user, w.auth_revision);
  kt_arena_reset(&n->as->arena);
  return kt_node_authorize(n, &id, req, e);
}

int kt_node_auth_recheck(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                         struct kt_err *e) {
  if (!kt_auth_enabled(n->auth))
    return 0;
  struct kt_node_ident id;
  return check_conn(n, c, req, &id, e);
}

bool kt_node_auth_may_read(struct kt_node *n, struct kt_conn *c, struct kt_bytes key,
                           struct kt_bytes end) {
  if (!kt_auth_enabled(n->auth))
    return true;
  struct kt_node_ident id;
  struct kt_bytes user;
  uint64_t rev;
  if (kt_conn_user(c, &user, &rev)) {
    if (!kt_auth_bound_valid(n->auth, user, rev))
      return false;
    ident_set(&id, user, rev);
  } else {
    const char *cn = kt_conn_identity(c);
    if (!cn || !*cn)
      return false;
    ident_set(&id, (struct kt_bytes){(const uint8_t *)cn, (uint32_t)strlen(cn)}, 0);
  }
  return kt_auth_allows(n->auth, ident_user(&id), KT_PERM_READ, key, end);
}

/* ---- AUTH_* requests ---- */

static void reply_auth(struct kt_node *n, struct kt_conn *c, uint64_t id, uint8_t type,
                       const struct kt_auth_resp *r) {
  struct kt_resp resp = {.type = type, .id = id};
  if (r)
    resp.u.auth = *r;
  kt_node_send(n, c, &resp);
}

static void propose_auth(struct kt_node *n, struct kt_conn *c, uint64_t req_id,
                         const struct kt_req *q) {
  struct kt_buf *b = &n->as->buf;
  kt_buf_reset(b);
  kt_proto_encode_req_body(b, q);
  kt_node_propose(n, c, req_id, b->p, b->len);
}

static void submit(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                   const struct kt_node_ident *as, const char *hash) {
  const struct kt_auth_req *r = &req->u.auth;
  struct pw_ctx *x = calloc(1, sizeof *x);
  kt_assert(x);
  x->conn = c;
  x->req_id = req->id;
  x->type = req->type;
  x->rev = kt_auth_revision(n->auth);
  if (as)
    kt_ident_copy(&x->as, as);
  x->name_len = r->name.n <= KT_AUTH_NAME_MAX ? r->name.n : KT_AUTH_NAME_MAX;
  memcpy(x->name, r->name.p, x->name_len);
  x->no_password = r->no_password;
  struct kt_pwhash_job *j = calloc(1, sizeof *j);
  kt_assert(j);
  j->kind = hash ? KT_PWHASH_VERIFY : KT_PWHASH_HASH;
  j->ctx = x;
  memcpy(j->password, r->password.p, r->password.n);
  j->password_len = r->password.n;
  if (hash)
    snprintf(j->hash, sizeof j->hash, "%s", hash);
  int rc = kt_pwhash_submit(n->as->pw, j);
  sodium_memzero(j, sizeof *j);
  free(j);
  if (rc) {
    kt_conn_send_error(c, req->id, rc,
                       rc == KT_EBUSY ? "too many password checks waiting" : "password too long");
    free(x);
    return;
  }
  kt_conn_ref(c);
}

static void on_pw_done(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_node *n = w->data;
  struct kt_pwhash_job j;
  while (kt_pwhash_take(n->as->pw, &j)) {
    struct pw_ctx *x = j.ctx;
    struct kt_bytes name = {(const uint8_t *)x->name, x->name_len};
    char u[300];
    if (!kt_conn_open(x->conn)) {
      /* the client left: nothing to answer (a hash is not proposed) */
    } else if (x->type == KT_MSG_AUTHENTICATE) {
      if (j.rc) {
        kt_log(KT_LOG_WARN, "audit", "decision=deny user=\"%s\" op=authenticate reason=%s",
               shown(name, u, sizeof u), kt_errname(KT_EAUTHFAILED));
        kt_conn_send_error(x->conn, x->req_id, KT_EAUTHFAILED, kt_strerror(KT_EAUTHFAILED));
      } else {
        struct kt_auth_resp r = {0};
        char tok[KT_TOKEN_MAX];
        /* bound at the revision the hash was read at: a password changed
         * (or the user deleted) meanwhile makes the binding invalid */
        uint64_t rev = x->rev;
        int64_t expires_ms = 0;
        int rc = kt_auth_bound_valid(n->auth, name, rev)
                     ? kt_tokens_issue(n->as->tokens, name, rev, wall_ms(), tok, &expires_ms)
                     : KT_EAUTHFAILED;
        if (rc == KT_EAUTHFAILED) {
          kt_conn_send_error(x->conn, x->req_id, rc, kt_strerror(rc));
        } else if (rc) {
          kt_conn_send_error(x->conn, x->req_id, rc, "cannot issue a token on this member");
        } else {
          r.token = (struct kt_bytes){(const uint8_t *)tok, (uint32_t)strlen(tok)};
          bind_conn(x->conn, name, rev, r.token, expires_ms);
          kt_log(KT_LOG_INFO, "audit", "decision=allow user=\"%s\" op=authenticate",
                 shown(name, u, sizeof u));
          reply_auth(n, x->conn, x->req_id, KT_MSG_AUTHENTICATE, &r);
        }
      }
    } else if (j.rc) {
      kt_conn_send_error(x->conn, x->req_id, j.rc, "cannot hash the password");
    } else { /* USER_ADD / USER_CHANGE_PASSWORD: the hash goes into the log */
      struct kt_req q = {.type = x->type};
      q.u.auth.name = name;
      q.u.auth.no_password = x->no_password;
      q.u.auth.hash = (struct kt_bytes){(const uint8_t *)j.hash, (uint32_t)strlen(j.hash)};
      kt_ident_copy(&n->prop_as, &x->as);
      propose_auth(n, x->conn, x->req_id, &q);
      kt_ident_clear(&n->prop_as);
    }
    sodium_memzero(&j, sizeof j);
    kt_conn_unref(x->conn);
    free(x);
  }
}

static void authenticate(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  const struct kt_auth_req *r = &req->u.auth;
  if (!kt_auth_enabled(n->auth)) {
    kt_conn_send_error(c, req->id, KT_EAUTHNOTENABLED, NULL);
    return;
  }
  if (!r->name.n && r->token.n) { /* a token from another connection */
    struct kt_token_info info;
    if (kt_tokens_check(n->as->tokens, r->token, wall_ms(), &info) ||
        !kt_auth_bound_valid(
            n->auth, (struct kt_bytes){(const uint8_t *)info.user, (uint32_t)strlen(info.user)},
            info.auth_revision)) {
      kt_log(KT_LOG_WARN, "audit", "decision=deny op=authenticate reason=%s",
             kt_errname(KT_EINVALIDTOKEN));
      kt_conn_send_error(c, req->id, KT_EINVALIDTOKEN, NULL);
      return;
    }
    struct kt_bytes user = {(const uint8_t *)info.user, (uint32_t)strlen(info.user)};
    bind_conn(c, user, info.auth_revision, r->token, info.expires_ms);
    struct kt_auth_resp resp = {.token = r->token};
    reply_auth(n, c, req->id, KT_MSG_AUTHENTICATE, &resp);
    return;
  }
  bool no_password = false;
  const char *hash = kt_auth_user_hash(n->auth, r->name, &no_password);
  if (!hash) { /* no such user, or one without a password: etcd's one answer */
    char u[300];
    kt_log(KT_LOG_WARN, "audit", "decision=deny user=\"%s\" op=authenticate reason=%s",
           shown(r->name, u, sizeof u), kt_errname(KT_EAUTHFAILED));
    kt_conn_send_error(c, req->id, KT_EAUTHFAILED, NULL);
    return;
  }
  submit(n, c, req, NULL, hash);
}

void kt_node_auth_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                          const uint8_t *body, size_t body_len) {
  const struct kt_auth_req *r = &req->u.auth;
  struct kt_err e = {0};
  struct kt_node_ident id = {0};
  if (req->type == KT_MSG_AUTHENTICATE) {
    authenticate(n, c, req);
    return;
  }
  if (r->hash.n) {
    kt_conn_send_error(c, req->id, KT_EINVAL, "hash: set by the member, not by a client");
    return;
  }
  if (req->type == KT_MSG_AUTH_STATUS) { /* anyone (etcd) */
    kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    return;
  }
  if (kt_auth_enabled(n->auth)) {
    int rc = check_conn(n, c, req, &id, &e);
    if (rc) {
      kt_node_reply_err(c, req->id, rc, &e);
      return;
    }
  }
  switch (req->type) {
  case KT_MSG_USER_GET:
  case KT_MSG_USER_LIST:
  case KT_MSG_ROLE_GET:
  case KT_MSG_ROLE_LIST:
    kt_node_read_linearized(n, c, 0, req->id, req, body, body_len);
    return;
  case KT_MSG_USER_ADD:
    if (!r->name.n) {
      kt_conn_send_error(c, req->id, KT_EUSEREMPTY, NULL);
      return;
    }
    if (r->no_password) {
      if (r->password.n) {
        kt_conn_send_error(c, req->id, KT_EINVAL, "password given for a user without one");
        return;
      }
      break;
    }
    /* fall through */
  case KT_MSG_USER_CHANGE_PASSWORD:
    if (req->type == KT_MSG_USER_CHANGE_PASSWORD && !kt_auth_user_exists(n->auth, r->name)) {
      kt_conn_send_error(c, req->id, KT_EUSERNOTFOUND, NULL); /* etcd's order */
      return;
    }
    if (!r->password.n) {
      kt_conn_send_error(c, req->id, KT_EINVAL, "password is empty");
      return;
    }
    submit(n, c, req, kt_auth_enabled(n->auth) ? &id : NULL, NULL);
    return;
  default:
    break;
  }
  /* the other changes: through the log (n->prop_as: who asked, if anyone) */
  kt_ident_copy(&n->prop_as, &id);
  kt_node_propose(n, c, req->id, body, body_len);
  kt_ident_clear(&n->prop_as);
}

/* A linearized AUTH_STATUS / USER_GET / USER_LIST / ROLE_GET / ROLE_LIST. */
void kt_node_auth_read(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  struct kt_err e = {0};
  if (req->type != KT_MSG_AUTH_STATUS && kt_auth_enabled(n->auth)) {
    struct kt_node_ident id;
    int rc = check_conn(n, c, req, &id, &e);
    if (rc) {
      kt_node_reply_err(c, req->id, rc, &e);
      return;
    }
  }
  struct kt_auth_resp r;
  kt_arena_reset(&n->as->arena);
  int rc = kt_auth_read(n->auth, req, &n->as->arena, &r, &e);
  if (rc)
    kt_node_reply_err(c, req->id, rc, &e);
  else
    reply_auth(n, c, req->id, req->type, &r);
}

/* ---- apply ---- */

void kt_node_auth_apply(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                        uint64_t req_id) {
  struct kt_err e = {0};
  uint64_t before = kt_auth_revision(n->auth);
  int rc = kt_auth_apply(n->auth, req, &e);
  char u[300];
  kt_log(rc ? KT_LOG_WARN : KT_LOG_INFO, "audit", "decision=%s op=%s name=\"%s\" revision=%llu%s%s",
         rc ? "refused" : "applied", kt_proto_type_name(req->type),
         shown(req->u.auth.name, u, sizeof u), (unsigned long long)kt_auth_revision(n->auth),
         rc ? " reason=" : "", rc ? kt_errname(rc) : "");
  if (!rc && (req->type == KT_MSG_USER_DELETE || req->type == KT_MSG_USER_CHANGE_PASSWORD))
    kt_tokens_drop_user(n->as->tokens, req->u.auth.name);
  if (!rc && kt_auth_revision(n->auth) != before)
    kt_node_watch_auth_changed(n);
  if (!c)
    return;
  if (rc)
    kt_node_reply_err(c, req_id, rc, &e);
  else
    reply_auth(n, c, req_id, req->type, NULL);
}

/* ---- snapshots ---- */

void kt_node_auth_save(struct kt_node *n, struct kt_buf *out) { kt_auth_save(n->auth, out); }

int kt_node_auth_load(struct kt_node *n, const uint8_t *p, size_t len, size_t *used,
                      struct kt_err *e) {
  return kt_auth_load(n->auth, p, len, used, e);
}
