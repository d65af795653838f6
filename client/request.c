/* client/request.c — libketch's requests: slots, submission, answers,
 * completion, deadlines; and synchronous calls.
 *
 * Owns: the slot array (max_outstanding entries, each with the encoded frame
 * kept for a resend), the free list, the FIFO pending list, the doomed list
 * (filled by conn.c), and res_arena, where results handed to callbacks are
 * built.
 *
 * Data flow: a call (calls.c, lease.c, auth.c) builds a struct kt_req
 * (enc_arena) and submits it: the frame is encoded into a free slot and,
 * when the connection is READY, appended to the output; otherwise it waits
 * for kt_cl_conn_ready (conn.c). An answer (kt_cl_on_reply) is matched to
 * its slot by id; errors that ask for a new authentication or a resend go
 * back to auth.c (kt_cl_auth_retry); anything else completes the slot: the
 * public result is built in res_arena, pointing into the input buffer, and
 * the callback runs. A slot whose deadline passed completes ETIMEOUT (or
 * EUNAVAILABLE when it never got a connection).
 *
 * A synchronous call is its asynchronous form with kt_cl_sync_cb, which
 * keeps a copy of the result (ketch_result_dup), then the library's own loop
 * (kt_cl_wait_turn) until it ran: one code path for both forms (ketch.h).
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pend_unlink(ketch_client *c, struct slot *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    c->pend_head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    c->pend_tail = s->prev;
  s->prev = s->next = NULL;
  c->n_pending--;
}

static void slot_free(ketch_client *c, struct slot *s) {
  s->id = 0;
  s->cb = NULL;
  s->arg = NULL;
  s->queued = false;
  s->doomed = false;
  s->stream = false;
  kt_buf_reset(&s->frame);
  s->next = c->free_list;
  c->free_list = s;
}

void kt_cl_slots_init(ketch_client *c) {
  for (uint32_t i = c->max_outstanding; i > 0; i--)
    slot_free(c, &c->slots[i - 1]);
}

void kt_cl_queue_slot(ketch_client *c, struct slot *s) {
  s->out_start = c->out_base + c->out.len;
  s->queued = true;
  kt_buf_append(&c->out, s->frame.p, s->frame.len);
}

void kt_cl_queue_unsent(ketch_client *c) {
  for (struct slot *s = c->pend_head; s; s = s->next)
    if (!s->queued && !s->doomed)
      kt_cl_queue_slot(c, s);
}

/* A txn whose every op (nested ones too) only reads. */
static bool txn_reads(const struct kt_txn_req *t) {
  const struct kt_request_op *lists[2] = {t->success, t->failure};
  const uint32_t counts[2] = {t->n_success, t->n_failure};
  for (int l = 0; l < 2; l++)
    for (uint32_t i = 0; i < counts[l]; i++) {
      const struct kt_request_op *o = &lists[l][i];
      if (o->type == KT_OP_PUT || o->type == KT_OP_DELETE ||
          (o->type == KT_OP_TXN && !txn_reads(&o->u.txn)))
        return false;
    }
  return true;
}

/* Safe to send again on the next connection after the one that carried it
 * was lost: it changes nothing, or nothing a second time would undo. A
 * write is never sent twice (ketch.h, "Failover"). */
bool kt_cl_resend_safe(const struct kt_req *req) {
  switch (req->type) {
  case KT_MSG_RANGE:
  case KT_MSG_STATUS:
  case KT_MSG_MEMBER_LIST:
  case KT_MSG_LEASE_KEEPALIVE: /* a renewal, a time-to-live, a list */
  case KT_MSG_LEASE_TTL:
  case KT_MSG_LEASE_LEASES:
  case KT_MSG_DEFRAGMENT:
  case KT_MSG_HASH_KV:
  case KT_MSG_AUTH_STATUS:
  case KT_MSG_AUTHENTICATE: /* a token; the member keeps nothing */
  case KT_MSG_USER_GET:
  case KT_MSG_USER_LIST:
  case KT_MSG_ROLE_GET:
  case KT_MSG_ROLE_LIST:
  case KT_MSG_AUTH_CHECK: /* a question */
    return true;
  case KT_MSG_TXN:
    return txn_reads(&req->u.op.u.txn);
  case KT_MSG_ALARM:
    return req->u.alarm.action == KT_ALARM_GET;
  default: /* writes, a lease grant (a second lease), snapshot streams */
    return false;
  }
}

int kt_cl_submit(ketch_client *c, struct kt_req *req, ketch_cb cb, void *arg) {
  struct slot *s = c->free_list;
  if (!cb || !s) {
    kt_arena_reset(&c->enc_arena);
    return cb ? KETCH_EBUSY : KETCH_EINVAL;
  }
  c->seq++;
  req->id = (c->seq << SLOT_BITS) | (uint64_t)(s - c->slots);
  kt_buf_reset(&s->frame);
  kt_proto_encode_req(&s->frame, req);
  kt_arena_reset(&c->enc_arena);
  if (s->frame.len - KT_FRAME_HDR > c->max_request_bytes) {
    kt_buf_reset(&s->frame);
    return KETCH_ETOOLARGE;
  }
  c->free_list = s->next;
  s->id = req->id;
  s->type = req->type;
  s->is_read = kt_cl_resend_safe(req);
  s->cb = cb;
  s->arg = arg;
  s->queued = false;
  s->auth_tries = s->old_tries = 0;
  s->stream = req->type == KT_MSG_SNAPSHOT;
  s->deadline_ms = kt_cl_now_ms() + c->request_timeout_ms;
  s->next = NULL;
  s->prev = c->pend_tail;
  if (c->pend_tail)
    c->pend_tail->next = s;
  else
    c->pend_head = s;
  c->pend_tail = s;
  c->n_pending++;
  if (c->state == ST_READY)
    kt_cl_queue_slot(c, s);
  else if (c->state == ST_IDLE)
    kt_cl_conn_start(c);
  return 0;
}

void kt_cl_callback(ketch_client *c, ketch_cb cb, void *arg, int err, const ketch_result *res) {
  bool was_in_cb = c->in_cb;
  c->in_cb = true;
  cb(arg, err, res);
  c->in_cb = was_in_cb;
}

/* Builds the result in res_arena and runs cb with it. */
static void deliver(ketch_client *c, ketch_cb cb, void *arg, uint8_t type, int err, const char *msg,
                    size_t msg_len, const struct kt_resp *resp) {
  ketch_result res;
  kt_cl_result_build(&c->res_arena, &res, type, err, msg, msg_len, resp);
  kt_cl_callback(c, cb, arg, err, &res);
  kt_arena_reset(&c->res_arena);
}

void kt_cl_complete(ketch_client *c, struct slot *s, int err, const char *msg, size_t msg_len,
                    const struct kt_resp *resp) {
  ketch_cb cb = s->cb;
  void *arg = s->arg;
  uint8_t type = s->type;
  if (s->stream && err == KETCH_EUNKNOWN) { /* a transfer is never resumed elsewhere */
    err = KETCH_ECLOSED;
    msg = "connection lost during the snapshot transfer";
    msg_len = strlen(msg);
  }
  pend_unlink(c, s);
  slot_free(c, s);
  if (type == KT_MSG_AUTHENTICATE)
    kt_cl_auth_async_done(c, err, resp);
  if (!msg) {
    msg = kt_strerror(err);
    msg_len = strlen(msg);
  }
  deliver(c, cb, arg, type, err, msg, msg_len, resp);
}

/* An error answer to s: sent again (auth), or s completes with it. */
static void on_error_reply(ketch_client *c, struct slot *s, const struct kt_resp *r) {
  int code = (int)r->u.error.code;
  const char *m = (const char *)r->u.error.message.p;
  size_t mn = r->u.error.message.n;
  char unk[300];
  if (r->u.error.code == 0 || r->u.error.code >= KT_ERR_MAX) {
    snprintf(unk, sizeof unk, "server sent unknown error code %u: %.*s", r->u.error.code,
             (int)KT_MIN(mn, 200), m ? m : "");
    code = KETCH_EINTERNAL;
    m = unk;
    mn = strlen(unk);
  } else if (!mn) {
    m = kt_strerror(code);
    mn = strlen(m);
  }
  if (kt_cl_auth_retry(c, s, code))
    return;
  if (code == KETCH_EUSEREMPTY && c->token_only && c->auth_err == KETCH_EINVALIDTOKEN) {
    code = KETCH_EINVALIDTOKEN; /* sent unauthenticated: the token was refused */
    m = kt_cl_refusal_text(s->type, code, c->auth_msg);
    mn = strlen(m);
  }
  kt_cl_complete(c, s, code, m, mn, NULL);
}

bool kt_cl_on_reply(ketch_client *c, const struct kt_resp *r) {
  uint32_t idx = (uint32_t)(r->id & SLOT_MASK);
  if (idx >= c->max_outstanding || c->slots[idx].id != r->id || !c->slots[idx].queued)
    return true; /* a request that already timed out */
  struct slot *s = &c->slots[idx];
  if (r->type == KT_MSG_ERROR) {
    on_error_reply(c, s, r);
  } else if (s->stream && r->type == s->type && r->u.snapshot.remaining_bytes > 0) {
    /* one piece of a stream: its callback runs, its deadline moves, the slot stays */
    s->deadline_ms = kt_cl_now_ms() + c->request_timeout_ms;
    deliver(c, s->cb, s->arg, s->type, 0, NULL, 0, r);
  } else if (r->type != s->type) {
    char why[100];
    snprintf(why, sizeof why, "response type %u to a request of type %u", r->type, s->type);
    kt_cl_conn_fail(c, why);
    return false;
  } else {
    kt_cl_complete(c, s, 0, NULL, 0, r);
  }
  return true;
}

void kt_cl_expire(ketch_client *c, int64_t now) {
  while (c->pend_head && c->pend_head->deadline_ms <= now) {
    struct slot *s = c->pend_head;
    if (c->state == ST_READY || c->state == ST_AUTH || s->queued) {
      char msg[200];
      snprintf(msg, sizeof msg, "request timed out after %d ms%s", c->request_timeout_ms,
               s->queued && !s->is_read ? " (outcome unknown)"
               : c->state == ST_AUTH    ? " (waiting for authentication)"
                                        : "");
      kt_cl_complete(c, s, KETCH_ETIMEOUT, msg, strlen(msg), NULL);
    } else {
      char msg[1200];
      snprintf(msg, sizeof msg, "no endpoint available: %s",
               c->round_err[0] ? c->round_err : "not connected");
      kt_cl_complete(c, s, KETCH_EUNAVAILABLE, msg, strlen(msg), NULL);
    }
  }
}

/* ---- synchronous calls ---- */

void kt_cl_sync_cb(void *arg, int err, const ketch_result *res) {
  struct kt_cl_waiter *w = arg;
  w->done = true;
  w->err = err;
  w->res = ketch_result_dup(res); /* ours now; NULL: out of memory */
}

int kt_cl_sync_wait(ketch_client *c, int err, struct kt_cl_waiter *w, ketch_result **out) {
  if (out)
    *out = NULL;
  if (err)
    return err;
  kt_cl_process(c); /* send at once */
  while (!w->done)
    kt_cl_wait_turn(c, -1); /* every request completes by its deadline */
  if (!w->res) {
    kt_cl_set_errmsg(c, "%s", "out of memory");
    return KETCH_ENOMEM;
  }
  if (w->err) {
    kt_cl_set_errmsg(c, "%s", w->res->message);
    ketch_result_free(w->res);
    return w->err;
  }
  c->errmsg[0] = 0;
  if (out)
    *out = w->res;
  else
    ketch_result_free(w->res);
  return 0;
}
