/* client/auth.c — libketch's authentication: the handle's credentials, each
 * connection's AUTHENTICATE, and etcd's Auth calls.
 *
 * Owns: user, password, token (wiped when dropped), the credentials of a
 * ketch_authenticate_async in flight, the last authentication's outcome.
 *
 * A connection authenticates after HELLO (state AUTH, request id AUTH_ID),
 * with the last token if there is one (EINVALIDTOKEN: once more with the
 * password), and again when an answer says its user is no longer valid
 * (kt_cl_auth_retry). Only one AUTHENTICATE is in flight; requests wait
 * unsent meanwhile (they are queued by kt_cl_conn_ready once it is done).
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define AUTH_OLD_TRIES 3 /* EAUTHOLDREVISION: a request is sent again this often */

static struct kt_bytes cstr(const char *p) {
  return (struct kt_bytes){(const uint8_t *)p, p ? (uint32_t)strlen(p) : 0};
}

static void str_wipe(char **p) {
  if (*p)
    sodium_memzero(*p, strlen(*p));
  free(*p);
  *p = NULL;
}

void kt_cl_creds_free(ketch_client *c) {
  str_wipe(&c->user);
  str_wipe(&c->password);
  sodium_memzero(c->token, sizeof c->token);
  c->token_only = false;
}

/* 0, or KETCH_ENOMEM / KETCH_EINVAL (a name the member would refuse). */
int kt_cl_creds_set(ketch_client *c, const char *user, const char *password) {
  kt_cl_creds_free(c);
  if (!user)
    return 0;
  if (!*user || strlen(user) > 256 || (password && strlen(password) > 1024)) {
    kt_cl_set_errmsg(c, "%s", !*user ? "user name is empty" : "user name or password too long");
    return KETCH_EINVAL;
  }
  c->user = strdup(user);
  c->password = password ? strdup(password) : NULL;
  if (!c->user || (password && !c->password)) {
    kt_cl_creds_free(c);
    return KETCH_ENOMEM;
  }
  return 0;
}

static void token_set(ketch_client *c, struct kt_bytes t) {
  size_t n = t.n < sizeof c->token ? t.n : 0;
  memcpy(c->token, t.p, n);
  c->token[n] = 0;
}

/* ---- a connection's authentication ---- */

static void auth_send(ketch_client *c, bool with_token) {
  struct kt_req req = {.type = KT_MSG_AUTHENTICATE, .id = AUTH_ID};
  if (with_token) {
    req.u.auth.token = cstr(c->token);
  } else {
    req.u.auth.name = cstr(c->user);
    req.u.auth.password = cstr(c->password);
  }
  c->auth_with_token = with_token;
  kt_proto_encode_req(&c->out, &req);
}

void kt_cl_auth_start(ketch_client *c) {
  c->state = ST_AUTH;
  c->auth_again = false;
  c->auth_err = -1;
  c->conn_deadline_ms = kt_cl_now_ms() + KT_MAX(c->dial_timeout_ms, c->request_timeout_ms);
  auth_send(c, c->token[0] != 0);
}

/* The maintenance calls etcd answers with its auth store's own texts ("auth:
 * invalid auth token", as the member answers them natively). */
const char *kt_cl_refusal_text(uint8_t type, int code, const char *msg) {
  bool maint = type == KT_MSG_DEFRAGMENT || type == KT_MSG_HASH_KV || type == KT_MSG_SNAPSHOT;
  return maint && code == KETCH_EINVALIDTOKEN ? "auth: invalid auth token" : msg;
}

/* Authentication was refused: requests waiting for it complete with the
 * refusal; the connection carries on unauthenticated (a later request that
 * the member refuses for that tries once more; with a token alone, which
 * nothing renews, it gets the refusal again). */
static void auth_refused(ketch_client *c, int code, const char *msg) {
  c->auth_err = code;
  snprintf(c->auth_msg, sizeof c->auth_msg, "%s", msg);
  kt_cl_set_errmsg(c, "%s", msg);
  c->state = ST_READY; /* what callbacks submit goes out */
  c->fails_in_round = 0;
  struct slot *next;
  for (struct slot *s = c->pend_head; s; s = next) {
    next = s->next; /* callbacks only append */
    if (!s->queued && !s->doomed) {
      const char *m = kt_cl_refusal_text(s->type, code, msg);
      kt_cl_complete(c, s, code, m, strlen(m), NULL);
    }
  }
  kt_cl_queue_unsent(c);
  kt_cl_watches_ready(c);
}

void kt_cl_auth_on_frame(ketch_client *c, const struct kt_resp *r) {
  if (c->state != ST_AUTH)
    return;
  if (r->type == KT_MSG_AUTHENTICATE) {
    token_set(c, r->u.auth.token);
    if (c->auth_again) {
      kt_cl_auth_start(c); /* ketch_authenticate changed the credentials meanwhile */
      return;
    }
    c->auth_err = 0;
    kt_cl_conn_ready(c);
    return;
  }
  if (r->type != KT_MSG_ERROR) {
    kt_cl_conn_fail(c, "protocol error: expected an AUTHENTICATE response");
    return;
  }
  int code = (int)r->u.error.code;
  if (c->auth_again) {
    kt_cl_auth_start(c);
    return;
  }
  if (code == KETCH_EINVALIDTOKEN && c->auth_with_token && c->user) {
    c->token[0] = 0; /* expired, or issued by another member: the password */
    auth_send(c, false);
    return;
  }
  if (code == KETCH_EAUTHNOTENABLED) { /* nothing to do: carry on without */
    c->auth_err = code;
    snprintf(c->auth_msg, sizeof c->auth_msg, "%s", kt_strerror(code));
    kt_cl_conn_ready(c);
    return;
  }
  bool known = code > 0 && code < KT_ERR_MAX;
  char msg[200];
  snprintf(msg, sizeof msg, "%.*s", (int)KT_MIN(r->u.error.message.n, 190),
           r->u.error.message.n ? (const char *)r->u.error.message.p : "");
  if (!msg[0] || !known)
    snprintf(msg, sizeof msg, "%s", kt_strerror(known ? code : KETCH_EPROTO));
  if (code == KETCH_EBUSY || code == KETCH_ETIMEOUT || code == KETCH_ESTOPPED) {
    char why[260];
    snprintf(why, sizeof why, "authentication: %s", msg);
    kt_cl_conn_fail(c, why); /* this member cannot check it now: another one */
    return;
  }
  auth_refused(c, known ? code : KETCH_EPROTO, msg);
}

bool kt_cl_auth_retry(ketch_client *c, struct slot *s, int code) {
  if (code == KETCH_EAUTHOLDREVISION) {
    if (s->old_tries >= AUTH_OLD_TRIES)
      return false;
    s->old_tries++;
    s->queued = false;
    if (c->state == ST_READY)
      kt_cl_queue_slot(c, s);
    return true;
  }
  if (!c->user || s->auth_tries || /* a token alone cannot be renewed here */
      !(code == KETCH_EINVALIDTOKEN || (code == KETCH_EUSEREMPTY && s->type != KT_MSG_USER_ADD)))
    return false;
  s->auth_tries++;
  s->queued = false;
  if (c->state == ST_READY) {
    c->token[0] = 0; /* the connection's binding is gone: so is its token */
    kt_cl_auth_start(c);
  }
  return true;
}

/* ---- changing the handle's user ---- */

/* ketch_authenticate_async ended: on success the handle is that user from
 * now on (its connections authenticate with the token, then the password). */
void kt_cl_auth_async_done(ketch_client *c, int err, const struct kt_resp *resp) {
  if (!err && resp && c->pend_user) {
    kt_cl_creds_free(c);
    c->user = c->pend_user;
    c->password = c->pend_password;
    c->pend_user = c->pend_password = NULL;
    token_set(c, resp->u.auth.token);
    c->auth_err = 0;
  }
  str_wipe(&c->pend_user);
  str_wipe(&c->pend_password);
}

int ketch_authenticate_async(ketch_client *c, const char *user, const char *password, ketch_cb cb,
                             void *arg) {
  /* an empty name goes to the member: it answers "not enabled" or "failed" */
  if (!user || strlen(user) > 256 || (password && strlen(password) > 1024)) {
    kt_cl_set_errmsg(c, "%s", "user name too long, or password too long");
    return KETCH_EINVAL;
  }
  if (c->pend_user)
    return KETCH_EBUSY; /* one at a time */
  struct kt_req r = {.type = KT_MSG_AUTHENTICATE};
  r.u.auth.name = cstr(user);
  r.u.auth.password = cstr(password);
  c->pend_user = strdup(user);
  c->pend_password = password ? strdup(password) : NULL;
  int err = !c->pend_user || (password && !c->pend_password) ? KETCH_ENOMEM
                                                             : kt_cl_submit(c, &r, cb, arg);
  if (err)
    kt_cl_auth_async_done(c, err, NULL);
  return err;
}

const char *ketch_token(const ketch_client *c) { return c->token[0] ? c->token : NULL; }

void ketch_drop_password(ketch_client *c) {
  if (!c->user || !c->token[0])
    return;
  str_wipe(&c->user);
  str_wipe(&c->password);
  c->token_only = true;
}

int ketch_authenticate(ketch_client *c, const char *user, const char *password) {
  if (c->in_cb)
    return KETCH_EINVAL;
  if (!user) {
    kt_cl_set_errmsg(c, "%s", "user name is empty");
    return KETCH_EINVAL;
  }
  int err = kt_cl_creds_set(c, user, password);
  if (err)
    return err;
  if (c->state == ST_READY)
    kt_cl_auth_start(c);
  else if (c->state == ST_AUTH)
    c->auth_again = true;
  else
    c->auth_err = -1; /* the next connection authenticates */
  int64_t end = kt_cl_now_ms() + c->dial_timeout_ms + c->request_timeout_ms;
  kt_cl_process(c);
  while (!(c->state == ST_READY && c->auth_err >= 0)) {
    int64_t left = end - kt_cl_now_ms();
    if (left <= 0) {
      kt_cl_set_errmsg(c, "authentication did not finish in %d ms%s%s",
                       c->dial_timeout_ms + c->request_timeout_ms, c->round_err[0] ? ": " : "",
                       c->round_err);
      return c->state == ST_AUTH ? KETCH_ETIMEOUT : KETCH_EUNAVAILABLE;
    }
    if (c->state == ST_IDLE)
      kt_cl_conn_start(c);
    else
      kt_cl_wait_turn(c, (int)KT_MIN(left, INT32_MAX));
  }
  if (c->auth_err) {
    kt_cl_set_errmsg(c, "%s", c->auth_msg);
    return c->auth_err;
  }
  c->errmsg[0] = 0;
  return 0;
}

/* ---- etcd's Auth calls ---- */

int ketch_auth_async(ketch_client *c, int op, const ketch_auth_req *req, ketch_cb cb, void *arg) {
  static const ketch_auth_req none;
  const ketch_auth_req *q = req ? req : &none;
  if (op < KETCH_OP_AUTH_ENABLE || op > KETCH_OP_ROLE_REVOKE_PERMISSION ||
      op == KETCH_OP_AUTHENTICATE || q->perm_type < KETCH_PERM_READ ||
      q->perm_type > KETCH_PERM_READWRITE || (q->name && strlen(q->name) > 256) ||
      (q->role && strlen(q->role) > 256) || (q->password && strlen(q->password) > 1024) ||
      q->key_len > UINT32_MAX || q->range_end_len > UINT32_MAX || (q->key_len && !q->key) ||
      (q->range_end_len && !q->range_end)) {
    kt_cl_set_errmsg(c, "%s", "invalid auth request (see ketch.h for ketch_auth's fields)");
    return KETCH_EINVAL;
  }
  struct kt_req r = {.type = (uint8_t)op};
  struct kt_auth_req *a = &r.u.auth;
  a->name = cstr(q->name);
  a->password = cstr(q->password);
  a->role = cstr(q->role);
  a->no_password = q->no_password;
  a->perm_type = (uint8_t)q->perm_type;
  a->key = (struct kt_bytes){q->key, (uint32_t)q->key_len};
  a->range_end = (struct kt_bytes){q->range_end, (uint32_t)q->range_end_len};
  return kt_cl_submit(c, &r, cb, arg);
}

int ketch_auth(ketch_client *c, int op, const ketch_auth_req *req, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_auth_async(c, op, req, kt_cl_sync_cb, &w));
}

int ketch_auth_check_async(ketch_client *c, const void *key, size_t key_len, const void *range_end,
                           size_t range_end_len, ketch_cb cb, void *arg) {
  if (key_len > UINT32_MAX || range_end_len > UINT32_MAX || (key_len && !key) ||
      (range_end_len && !range_end)) {
    kt_cl_set_errmsg(c, "%s", "invalid auth check (a length without its bytes, or over 4 GiB)");
    return KETCH_EINVAL;
  }
  struct kt_req r = {.type = KT_MSG_AUTH_CHECK};
  r.u.auth_check.key = (struct kt_bytes){key, (uint32_t)key_len};
  r.u.auth_check.range_end = (struct kt_bytes){range_end, (uint32_t)range_end_len};
  return kt_cl_submit(c, &r, cb, arg);
}

int ketch_auth_check(ketch_client *c, const void *key, size_t key_len, const void *range_end,
                     size_t range_end_len, ketch_result **out) {
  KT_CL_SYNC(c, out,
             ketch_auth_check_async(c, key, key_len, range_end, range_end_len, kt_cl_sync_cb, &w));
}
