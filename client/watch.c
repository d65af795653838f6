/* client/watch.c — libketch's watch streams, exactly once across reconnects.
 *
 * Owns: the watches (struct watch, one heap entry each in c->watches, the
 * index being the low bits of the stream id), watch_next_ms (the earliest
 * retry or cancel deadline), the pending progress request.
 *
 * A watch is not a request slot: it has no deadline and lives across
 * connections. Its WATCH_CREATE goes out on every connection that reaches
 * READY (id WATCH_BIT | seq | index), starting where the last delivered
 * event left it (see struct watch); its frames are filtered so that nothing
 * is delivered twice. A stream the server refuses or ends for a transient
 * reason is opened again after a backoff (at most WATCH_RETRY_MAX times in a
 * row). Its last delivery (canceled) runs from kt_cl_deliver_finals() at
 * the end of ketch_process(), never from a submit.
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WATCHES 65536
#define WATCH_RETRY_MAX 5 /* server refusals in a row before a watch gives up */

enum { W_UNSENT, W_SENT, W_ACTIVE, W_FINAL };

/* One watch (ketch_watch). Exactly-once bookkeeping: every event with
 * mod_revision <= done_rev was delivered; last_rev is the revision of the
 * last delivered event and n_at_last how many of its events were delivered;
 * mid_fragment: the last frame said the revision continues. A resumed stream
 * starts at last_rev (mid_fragment, skipping n_at_last events) or at
 * done_rev + 1. */
struct watch {
  uint64_t handle; /* public id; 0 = free entry */
  uint64_t req_id; /* stream id on the current connection, 0 = none */
  int64_t server_id;
  int state;
  bool created_delivered, cancel_wanted, cancel_sent, mid_fragment;
  uint8_t *key, *end; /* one allocation */
  uint32_t key_n, end_n;
  int64_t start_revision;
  bool prev_kv, no_put, no_delete, progress_notify, fragment;
  int64_t done_rev, last_rev, skip_rev;
  uint64_t n_at_last, skip_left;
  int retries;                /* refusals in a row (reset by created) */
  int64_t retry_at_ms;        /* UNSENT: not before (0 = at once) */
  int64_t cancel_deadline_ms; /* cancel sent: finish even without an answer */
  int final_err;
  int64_t compact_rev;
  ketch_header final_hdr; /* of the server's canceled frame, if any */
  char final_msg[200];
  ketch_cb cb;
  void *arg;
};

static uint64_t next_seq_bits(ketch_client *c) {
  c->seq++;
  return (c->seq << SLOT_BITS) & (CTRL_BIT - 1);
}

/* The revision a (re)created stream starts from (see struct watch). */
static int64_t watch_resume_rev(const struct watch *w) {
  if (w->mid_fragment)
    return w->last_rev;
  if (w->done_rev >= 0)
    return w->done_rev + 1;
  return w->start_revision;
}

/* Precondition: READY. Appends the WATCH_CREATE of w to the output. */
static void watch_send_create(ketch_client *c, struct watch *w, uint32_t idx) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_WATCH_CREATE;
  r.id = WATCH_BIT | next_seq_bits(c) | idx;
  struct kt_watch_create_req *q = &r.u.watch_create;
  q->key = (struct kt_bytes){w->key_n ? w->key : (const uint8_t *)"", w->key_n};
  q->range_end = (struct kt_bytes){w->end_n ? w->end : (const uint8_t *)"", w->end_n};
  q->start_revision = watch_resume_rev(w);
  q->prev_kv = w->prev_kv;
  q->no_put = w->no_put;
  q->no_delete = w->no_delete;
  q->progress_notify = w->progress_notify;
  q->fragment = w->fragment;
  kt_proto_encode_req(&c->out, &r);
  w->req_id = r.id;
  w->state = W_SENT;
  w->server_id = -1;
  w->cancel_sent = false;
  w->retry_at_ms = 0;
  w->skip_rev = w->last_rev;
  w->skip_left = w->mid_fragment ? w->n_at_last : 0;
}

/* Precondition: READY. WATCH_CANCEL (watch_id >= 0) or WATCH_PROGRESS. */
static void watch_send_ctrl(ketch_client *c, uint8_t type, int64_t watch_id) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = type;
  r.id = WATCH_BIT | CTRL_BIT | next_seq_bits(c) | 1;
  r.u.watch_cancel.watch_id = watch_id;
  kt_proto_encode_req(&c->out, &r);
}

/* Ends w: its last delivery (canceled, err) runs from deliver_finals(). */
static void watch_finish(ketch_client *c, struct watch *w, int err, const char *msg,
                         int64_t compact_rev) {
  if (w->state == W_FINAL)
    return;
  w->state = W_FINAL;
  w->final_err = err;
  w->compact_rev = compact_rev;
  snprintf(w->final_msg, sizeof w->final_msg, "%s", err && msg && *msg ? msg : "");
  if (err && !w->final_msg[0])
    snprintf(w->final_msg, sizeof w->final_msg, "%s", kt_strerror(err));
  c->n_live_watches--;
  c->finals_pending = true;
}

void kt_cl_deliver_finals(ketch_client *c) {
  if (!c->n_live_watches)
    c->watch_next_ms = INT64_MAX; /* no stale wake-up for a watch that ended */
  while (c->finals_pending) {
    c->finals_pending = false;
    for (size_t i = 0; i < c->n_watches; i++) { /* callbacks may add watches */
      struct watch *w = c->watches[i];
      if (!w || w->state != W_FINAL)
        continue;
      ketch_result res = {.type = KETCH_OP_WATCH,
                          .err = w->final_err,
                          .message = w->final_msg,
                          .header = w->final_hdr};
      res.watch.watch_id = (int64_t)w->handle;
      res.watch.canceled = true;
      res.watch.compact_revision = w->compact_rev;
      c->watches[i] = NULL;
      kt_cl_callback(c, w->cb, w->arg, w->final_err, &res);
      free(w->key);
      free(w);
    }
  }
}

/* The connection is gone, and every stream with it. */
void kt_cl_watches_conn_lost(ketch_client *c) {
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (!w || w->state == W_FINAL)
      continue;
    if (w->cancel_wanted) {
      watch_finish(c, w, 0, NULL, 0); /* nothing left to cancel on the server */
      continue;
    }
    w->state = W_UNSENT;
    w->req_id = 0;
    w->retry_at_ms = 0;
  }
}

/* A connection is READY: (re)open every watch, ask for progress if wanted. */
void kt_cl_watches_ready(ketch_client *c) {
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (w && w->state == W_UNSENT)
      watch_send_create(c, w, (uint32_t)i);
  }
  if (c->progress_wanted) {
    c->progress_wanted = false;
    watch_send_ctrl(c, KT_MSG_WATCH_PROGRESS, 0);
  }
}

static void watch_deliver(ketch_client *c, struct watch *w, const struct kt_resp *r, bool created,
                          const ketch_event *ev, size_t n) {
  ketch_result res = {.type = KETCH_OP_WATCH, .message = ""};
  res.header = (ketch_header){r->header.cluster_id, r->header.member_id, r->header.revision,
                              r->header.raft_term};
  res.watch.watch_id = (int64_t)w->handle;
  res.watch.created = created;
  res.watch.events = ev;
  res.watch.n_events = n;
  kt_cl_callback(c, w->cb, w->arg, 0, &res);
  kt_arena_reset(&c->res_arena);
}

static bool watch_transient(int code) {
  return code == KETCH_ENOLEADER || code == KETCH_ESTOPPED || code == KETCH_EBUSY ||
         code == KETCH_ETIMEOUT || code == KETCH_EUNAVAILABLE;
}

/* The server ended or refused a stream w did not ask to end: open it again
 * after a backoff, or give up after WATCH_RETRY_MAX in a row. */
static void watch_retry(ketch_client *c, struct watch *w, int code, const char *msg) {
  w->state = W_UNSENT;
  w->req_id = 0;
  if (++w->retries > WATCH_RETRY_MAX) {
    watch_finish(c, w, code, msg, 0);
    return;
  }
  w->retry_at_ms = kt_cl_now_ms() + (50ll << w->retries);
  c->watch_next_ms = KT_MIN(c->watch_next_ms, w->retry_at_ms);
}

/* A frame on a watch id. Returns false when the connection failed. */
bool kt_cl_watch_on_frame(ketch_client *c, const struct kt_resp *r) {
  if (r->id & CTRL_BIT)
    return true; /* the answer to a WATCH_CANCEL / WATCH_PROGRESS: nothing to do */
  uint32_t idx = (uint32_t)(r->id & SLOT_MASK);
  struct watch *w = idx < c->n_watches ? c->watches[idx] : NULL;
  if (!w || w->req_id != r->id || w->state == W_FINAL || w->state == W_UNSENT)
    return true; /* a stream of an earlier life of this entry */
  if (r->type == KT_MSG_ERROR) {
    int code = (int)r->u.error.code;
    char msg[200];
    snprintf(msg, sizeof msg, "%.*s", (int)KT_MIN(r->u.error.message.n, 190),
             r->u.error.message.p ? (const char *)r->u.error.message.p : "");
    if (code <= 0 || code >= KT_ERR_MAX)
      code = KETCH_EINTERNAL;
    if (w->cancel_wanted)
      watch_finish(c, w, 0, NULL, 0);
    else if (watch_transient(code))
      watch_retry(c, w, code, msg);
    else
      watch_finish(c, w, code, msg, 0);
    return true;
  }
  if (r->type != KT_MSG_WATCH_CREATE) {
    char why[100];
    snprintf(why, sizeof why, "response type %u on a watch stream", r->type);
    kt_cl_conn_fail(c, why);
    return false;
  }
  const struct kt_watch_resp *wr = &r->u.watch;
  if (wr->canceled) {
    w->final_hdr = (ketch_header){r->header.cluster_id, r->header.member_id, r->header.revision,
                                  r->header.raft_term};
    if (wr->compact_revision > 0) {
      watch_finish(c, w, KETCH_ECOMPACTED, kt_strerror(KT_ECOMPACTED), wr->compact_revision);
    } else if (w->cancel_wanted) {
      watch_finish(c, w, 0, NULL, 0);
    } else {
      char msg[200];
      snprintf(msg, sizeof msg, "watch canceled by the server: %.*s",
               (int)KT_MIN(wr->cancel_reason.n, 150),
               wr->cancel_reason.p ? (const char *)wr->cancel_reason.p : "");
      watch_retry(c, w, KETCH_ECANCELED, msg);
    }
    return true;
  }
  if (wr->created) {
    w->state = W_ACTIVE;
    w->server_id = wr->watch_id;
    w->retries = 0;
    if (w->done_rev < 0 && w->start_revision == 0)
      w->done_rev = r->header.revision; /* the watch covers what comes after */
    if (w->cancel_wanted) {
      watch_send_ctrl(c, KT_MSG_WATCH_CANCEL, w->server_id);
      w->cancel_sent = true;
      w->cancel_deadline_ms = kt_cl_now_ms() + c->request_timeout_ms;
      c->watch_next_ms = KT_MIN(c->watch_next_ms, w->cancel_deadline_ms);
      return true;
    }
    if (!w->created_delivered) {
      w->created_delivered = true;
      watch_deliver(c, w, r, true, NULL, 0);
    }
    return true;
  }
  if (w->cancel_wanted)
    return true;           /* nothing is delivered after a cancel but the canceled */
  if (wr->n_events == 0) { /* progress: every event up to header.revision was sent */
    if (!w->mid_fragment && r->header.revision > w->done_rev)
      w->done_rev = r->header.revision;
    if (w->created_delivered)
      watch_deliver(c, w, r, false, NULL, 0);
    return true;
  }
  ketch_event *ev = kt_arena_alloc(&c->res_arena, sizeof *ev * wr->n_events);
  size_t n = 0;
  int64_t max_rev = 0;
  for (uint32_t i = 0; i < wr->n_events; i++) {
    const struct kt_event *e = &wr->events[i];
    int64_t rev = e->kv.mod_revision;
    max_rev = KT_MAX(max_rev, rev);
    if (rev > w->skip_rev)
      w->skip_left = 0;
    if (rev <= w->done_rev || rev < w->last_rev)
      continue; /* delivered before the stream was opened again */
    if (rev == w->skip_rev && w->skip_left) {
      w->skip_left--;
      continue;
    }
    if (rev == w->last_rev) {
      w->n_at_last++;
    } else {
      w->last_rev = rev;
      w->n_at_last = 1;
    }
    ev[n].type = e->type;
    kt_cl_kv_out(&ev[n].kv, &e->kv);
    ev[n].prev_kv = e->has_prev_kv ? kt_cl_kvs_out(&c->res_arena, &e->prev_kv, 1) : NULL;
    n++;
  }
  w->mid_fragment = wr->fragment;
  w->done_rev = KT_MAX(w->done_rev, wr->fragment ? max_rev - 1 : max_rev);
  if (n)
    watch_deliver(c, w, r, false, ev, n);
  else
    kt_arena_reset(&c->res_arena);
  return true;
}

/* Watch retries that are due, cancels that got no answer; recomputes
 * watch_next_ms. */
void kt_cl_watch_timers(ketch_client *c, int64_t now) {
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (!w || w->state == W_FINAL)
      continue;
    if (w->cancel_sent) {
      if (now >= w->cancel_deadline_ms)
        watch_finish(c, w, 0, NULL, 0); /* the server never confirmed: ended anyway */
      else
        next = KT_MIN(next, w->cancel_deadline_ms);
    } else if (w->state == W_UNSENT && w->retry_at_ms) {
      if (now < w->retry_at_ms)
        next = KT_MIN(next, w->retry_at_ms);
      else if (c->state == ST_READY)
        watch_send_create(c, w, (uint32_t)i);
      else
        w->retry_at_ms = 0; /* sent by watches_ready() on the next connection */
    }
  }
  c->watch_next_ms = next;
}

int ketch_watch(ketch_client *c, const ketch_watch_req *req, ketch_cb cb, void *arg,
                uint64_t *out) {
  if (out)
    *out = 0;
  if (!req || !cb || req->start_revision < 0)
    return KETCH_EINVAL;
  struct kt_bytes key, end;
  int err = kt_cl_range_in(&c->enc_arena, &key, &end, req->key, req->key_len, req->range_end,
                           req->range_end_len, req->prefix, req->from_key);
  if (err) {
    kt_arena_reset(&c->enc_arena);
    kt_cl_set_errmsg(c, "%s", "invalid watch request (see ketch.h for the fields' rules)");
    return err;
  }
  if ((uint64_t)key.n + end.n + 64 > c->max_request_bytes) {
    kt_arena_reset(&c->enc_arena);
    return KETCH_ETOOLARGE;
  }
  if (c->n_live_watches >= MAX_WATCHES) {
    kt_arena_reset(&c->enc_arena);
    return KETCH_EBUSY;
  }
  size_t idx = 0;
  while (idx < c->n_watches && c->watches[idx])
    idx++;
  if (idx == c->n_watches && c->n_watches == c->cap_watches) {
    size_t cap = c->cap_watches ? c->cap_watches * 2 : 8;
    struct watch **ws = realloc(c->watches, cap * sizeof *ws);
    if (!ws) {
      kt_arena_reset(&c->enc_arena);
      return KETCH_ENOMEM;
    }
    c->watches = ws;
    c->cap_watches = cap;
  }
  struct watch *w = calloc(1, sizeof *w);
  uint8_t *bytes = malloc((size_t)key.n + end.n + 1);
  if (!w || !bytes) {
    free(w);
    free(bytes);
    kt_arena_reset(&c->enc_arena);
    return KETCH_ENOMEM;
  }
  memcpy(bytes, key.p, key.n);
  memcpy(bytes + key.n, end.p, end.n);
  kt_arena_reset(&c->enc_arena);
  w->key = bytes;
  w->key_n = key.n;
  w->end = bytes + key.n;
  w->end_n = end.n;
  w->start_revision = req->start_revision;
  w->prev_kv = req->prev_kv;
  w->no_put = req->no_put;
  w->no_delete = req->no_delete;
  w->progress_notify = req->progress_notify;
  w->fragment = req->fragment;
  w->done_rev = req->start_revision > 0 ? req->start_revision - 1 : -1;
  w->server_id = -1;
  w->state = W_UNSENT;
  w->handle = ++c->next_handle;
  w->cb = cb;
  w->arg = arg;
  if (idx == c->n_watches)
    c->n_watches++;
  c->watches[idx] = w;
  c->n_live_watches++;
  if (c->state == ST_READY)
    watch_send_create(c, w, (uint32_t)idx);
  else if (c->state == ST_IDLE)
    kt_cl_conn_start(c);
  if (out)
    *out = w->handle;
  return 0;
}

static struct watch *watch_find(ketch_client *c, uint64_t handle) {
  for (size_t i = 0; i < c->n_watches; i++)
    if (c->watches[i] && c->watches[i]->handle == handle)
      return c->watches[i];
  return NULL;
}

int ketch_watch_cancel(ketch_client *c, uint64_t handle) {
  struct watch *w = handle ? watch_find(c, handle) : NULL;
  if (!w)
    return KETCH_ENOTFOUND;
  if (w->state == W_FINAL || w->cancel_wanted)
    return 0; /* already ending */
  w->cancel_wanted = true;
  if (w->state == W_UNSENT) {
    watch_finish(c, w, 0, NULL, 0);
  } else if (w->state == W_ACTIVE) {
    watch_send_ctrl(c, KT_MSG_WATCH_CANCEL, w->server_id);
    w->cancel_sent = true;
    w->cancel_deadline_ms = kt_cl_now_ms() + c->request_timeout_ms;
    c->watch_next_ms = KT_MIN(c->watch_next_ms, w->cancel_deadline_ms);
  } /* W_SENT: the cancel goes out when `created` arrives with the watch_id */
  return 0;
}

int ketch_watch_progress(ketch_client *c) {
  if (c->state == ST_READY)
    watch_send_ctrl(c, KT_MSG_WATCH_PROGRESS, 0);
  else
    c->progress_wanted = true;
  return 0;
}

void kt_cl_watches_close(ketch_client *c, const char *msg) {
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (w && w->handle && w->state != W_FINAL) {
      w->state = W_FINAL;
      w->final_err = KETCH_ECANCELED;
      snprintf(w->final_msg, sizeof w->final_msg, "%s", msg);
      c->n_live_watches--;
      c->finals_pending = true;
    }
  }
}

void kt_cl_watch_free_all(ketch_client *c) {
  for (size_t i = 0; i < c->n_watches; i++) {
    if (c->watches[i])
      free(c->watches[i]->key);
    free(c->watches[i]);
  }
  free(c->watches);
  c->watches = NULL;
  c->n_watches = c->cap_watches = 0;
}
