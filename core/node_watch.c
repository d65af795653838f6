/* core/node_watch.c — watch streams on client connections (core/watch does
 * the matching, coalescing and catch-up; this file is the delivery).
 *
 * Data flow:
 *   WATCH_CREATE → kt_watch_create (owner = a struct nwatch) → a "created"
 *     WATCH frame on the request's id (the stream id), watch_id = hub id.
 *   apply → store event hook → kt_watch_publish / kt_watch_revision_done →
 *     on_ready(nwatch) → the nwatch joins the ready FIFO (once).
 *   end of each loop turn (node prepare) → kt_node_watch_flush: for each
 *     ready watch whose connection is under KT_CONN_OUT_SOFT, take events
 *     (kt_watch_take) into WATCH frames: a revision stays whole in one frame
 *     unless the client asked for `fragment`; frames hold ~FRAME_EVENTS
 *     events / FRAME_BYTES bytes. A connection over the soft limit is left
 *     alone (kt_conn_want_drain): its watchers' events stay in the hub, which
 *     moves a watcher that falls too far behind aside and later catches it
 *     up from history — memory stays bounded, the loop never waits.
 *   on_drained(conn) → its blocked watches rejoin the ready FIFO.
 *   WATCH_CANCEL / compaction / connection closed → the hub forgets the
 *     watcher; the stream ends with a "canceled" frame (not on close).
 *   WATCH_PROGRESS → a progress frame (no events) on every idle watch of the
 *     connection, header.revision = everything up to it was sent; the same
 *     for progress_notify watches every watch_progress_ms.
 * A start revision beyond this member's revision (a client resuming on a
 * member that lags the one it left) is served from now, with events below
 * the asked revision dropped: exactly once, no gap.
 *
 * Fan-out (issue 17; net/THREADS.md, "Watch fan-out"): the events of a
 * frame are encoded once into a shared, immutable batch (kt_wbatch_new),
 * and each watcher's frame is sent as a reference to it
 * (kt_conn_send_watch_batch): without I/O threads the frame is written
 * around the batch's bytes into the connection's output; with them the
 * batch goes once per I/O thread and turn to the I/O threads, which write
 * each watcher's frame. Watchers of one group (same key/range, filters and
 * prev_kv) at the same place in its log get the same frames: the first one
 * drained in a flush records its frames as a plan, keyed (log, first seq,
 * fragment), and the others of the same flush replay the plan: no take, no
 * copy, no encoding, one kt_watch_advance and one reference per frame.
 * A plan's frames are exactly those the first one's drain made (the cuts
 * depend only on the events and `fragment`); a replay stops between frames
 * where the connection is full, as a drain does. Plans live for one flush
 * (the frames' header, the current revision, is fixed during it).
 */
#include <stdlib.h>
#include <string.h>

#include "node_int.h"

#define FRAME_EVENTS 1000
#define TAKE 64 /* events per kt_watch_take: frames stop near FRAME_BYTES */
#define FRAME_BYTES (1u << 20)
#define STEP_BUDGET 4096 /* history events copied per loop turn for catch-up */
#define DEFAULT_PROGRESS_MS 600000
#define RECHECK_CONNS                                                                              \
  256 /* connections whose watches are checked per turn after an auth change                       \
       */

struct wconn;

struct nwatch {
  uint64_t hub_id;    /* = the watch_id the client sees */
  uint64_t stream_id; /* the WATCH_CREATE request's id */
  struct wconn *wc;   /* NULL once the connection closed or the watch ended */
  int64_t min_rev;
  bool fragment, progress_notify;
  bool queued, blocked;
  struct kt_bytes key, end; /* the watched range (owned), for auth checks */
};

struct wconn {
  struct kt_conn *conn; /* one reference held */
  struct nwatch **v;
  size_t n, cap;
  size_t at; /* its index in node_watch_state.conns */
};

/* A frame of a plan: its batch (a reference) and the log seq past its events. */
struct pframe {
  struct kt_wbatch *b;
  uint64_t end;
};

/* The frames the first watcher at (log, from, fragment) got in this flush,
 * pf[first .. first + n), covering the log up to `to`. */
struct plan {
  const void *log;
  uint64_t from, to;
  bool fragment;
  uint32_t first, n;
};

struct node_watch_state {
  struct nwatch **ready; /* ready[head..n) */
  size_t n, cap, head;
  struct kt_event *evs;
  size_t cap_evs;
  struct kt_arena arena;
  ev_tstamp last_progress;
  bool busy; /* the last kt_watch_step made progress: step again */
  /* Every connection with watches; after an auth change, conns[0..recheck)
   * still have theirs to check (from the end down, so that a connection
   * closing meanwhile, swapped in from the end, is never skipped). */
  struct wconn **conns;
  size_t n_conns, cap_conns, recheck;
  /* this flush's plans (fan-out), their frames, and an index of plans
   * (open addressing: plan index + 1, 0 = empty) */
  struct plan *plans;
  size_t n_plans, cap_plans;
  struct pframe *pf;
  size_t n_pf, cap_pf;
  uint32_t *pidx;
  size_t cap_pidx;
  struct kt_header hdr; /* the frames' header during a flush */
};

static void enqueue(struct kt_node *n, struct nwatch *w) {
  struct node_watch_state *s = n->ws;
  if (w->queued)
    return;
  w->queued = true;
  FIFO_PUSH(s->ready, s->head, s->n, s->cap, w);
}

static void on_ready(void *arg, void *owner, uint64_t id) {
  (void)id;
  enqueue(arg, owner);
}

void kt_node_watch_init(struct kt_node *n) {
  struct kt_watch_config wc = {.on_ready = on_ready, .arg = n};
  n->watches = kt_watch_hub_new(n->store, &wc);
  n->ws = calloc(1, sizeof *n->ws);
  kt_assert(n->ws);
}

/* ---- frames ---- */

static void send_frame(struct kt_node *n, struct nwatch *w, const struct kt_watch_resp *wr) {
  struct kt_resp r = {.type = KT_MSG_WATCH_CREATE, .id = w->stream_id};
  r.u.watch = *wr;
  r.u.watch.watch_id = (int64_t)w->hub_id;
  kt_node_send(n, w->wc->conn, &r);
}

/* Detach w from its connection; it is freed now, or when the ready FIFO
 * reaches it. */
static void watch_drop(struct kt_node *n, struct nwatch *w) {
  struct wconn *wc = w->wc;
  if (wc) {
    for (size_t i = 0; i < wc->n; i++)
      if (wc->v[i] == w) {
        wc->v[i] = wc->v[--wc->n];
        break;
      }
    w->wc = NULL;
  }
  (void)n;
  free((void *)w->key.p);
  free((void *)w->end.p);
  w->key = w->end = (struct kt_bytes){0};
  if (!w->queued)
    free(w);
}

static void end_stream(struct kt_node *n, struct nwatch *w, int64_t compact_rev,
                       const char *reason) {
  struct kt_watch_resp wr = {.canceled = true, .compact_revision = compact_rev};
  if (reason)
    wr.cancel_reason = (struct kt_bytes){(const uint8_t *)reason, (uint32_t)strlen(reason)};
  send_frame(n, w, &wr);
  watch_drop(n, w);
}

static size_t event_bytes(const struct kt_event *e) {
  size_t b = 64 + e->kv.key.n + e->kv.value.n;
  if (e->has_prev_kv)
    b += e->prev_kv.key.n + e->prev_kv.value.n;
  return b;
}

/* ---- fan-out plans ---- */

static size_t plan_slot(const struct node_watch_state *s, const void *log, uint64_t from,
                        bool fragment) {
  uint64_t h = ((uint64_t)(uintptr_t)log * 0x9E3779B97F4A7C15ull) ^ (from * 0xC2B2AE3D27D4EB4Full) ^
               (uint64_t)fragment;
  return (size_t)(h ^ (h >> 31)) & (s->cap_pidx - 1);
}

static struct plan *plan_find(struct node_watch_state *s, const void *log, uint64_t from,
                              bool fragment) {
  if (!s->n_plans)
    return NULL;
  for (size_t i = plan_slot(s, log, from, fragment); s->pidx[i]; i = (i + 1) & (s->cap_pidx - 1)) {
    struct plan *p = &s->plans[s->pidx[i] - 1];
    if (p->log == log && p->from == from && p->fragment == fragment)
      return p;
  }
  return NULL;
}

static void plan_index(struct node_watch_state *s, size_t at) {
  struct plan *p = &s->plans[at];
  size_t i = plan_slot(s, p->log, p->from, p->fragment);
  while (s->pidx[i])
    i = (i + 1) & (s->cap_pidx - 1);
  s->pidx[i] = (uint32_t)at + 1;
}

/* Keep the frames pf[first..n_pf) as the plan of (log, from, fragment). */
static void plan_add(struct node_watch_state *s, const void *log, uint64_t from, uint64_t to,
                     bool fragment, size_t first) {
  if (s->n_plans == s->cap_plans) {
    s->cap_plans = s->cap_plans ? 2 * s->cap_plans : 16;
    s->plans = realloc(s->plans, s->cap_plans * sizeof *s->plans);
    kt_assert(s->plans);
  }
  s->plans[s->n_plans++] = (struct plan){.log = log,
                                         .from = from,
                                         .to = to,
                                         .fragment = fragment,
                                         .first = (uint32_t)first,
                                         .n = (uint32_t)(s->n_pf - first)};
  if (2 * s->n_plans > s->cap_pidx) { /* grow and re-index */
    s->cap_pidx = s->cap_pidx ? 2 * s->cap_pidx : 64;
    free(s->pidx);
    s->pidx = calloc(s->cap_pidx, sizeof *s->pidx);
    kt_assert(s->pidx);
    for (size_t i = 0; i < s->n_plans; i++)
      plan_index(s, i);
  } else {
    plan_index(s, s->n_plans - 1);
  }
}

/* Drop pf[from..n_pf) (a drain that did not end at its run's end). */
static void pf_drop(struct node_watch_state *s, size_t from) {
  while (s->n_pf > from)
    kt_wbatch_unref(s->pf[--s->n_pf].b);
}

/* End of a flush: the plans go (the batches live on where they were sent). */
static void plans_clear(struct node_watch_state *s) {
  pf_drop(s, 0);
  if (s->n_plans)
    memset(s->pidx, 0, s->cap_pidx * sizeof *s->pidx);
  s->n_plans = 0;
}

/* A frame of events for w, as a shared batch; recorded in pf (ending at log
 * seq `end`) when `rec`. */
static void send_events(struct kt_node *n, struct nwatch *w, const struct kt_event *evs, size_t nev,
                        bool fragment, bool rec, uint64_t end) {
  struct node_watch_state *s = n->ws;
  struct kt_wbatch *b = kt_wbatch_new(evs, (uint32_t)nev, fragment);
  if (rec) {
    if (s->n_pf == s->cap_pf) {
      s->cap_pf = s->cap_pf ? 2 * s->cap_pf : 64;
      s->pf = realloc(s->pf, s->cap_pf * sizeof *s->pf);
      kt_assert(s->pf);
    }
    s->pf[s->n_pf++] = (struct pframe){.b = b, .end = end};
  }
  kt_conn_send_watch_batch(w->wc->conn, w->stream_id, &s->hdr, (int64_t)w->hub_id, b);
  if (!rec)
    kt_wbatch_unref(b);
}

/* Replay plan p for w (at p->from, with the same events ready up to p->to).
 * Returns as drain_one. */
static bool replay(struct kt_node *n, struct nwatch *w, const struct plan *p) {
  struct node_watch_state *s = n->ws;
  struct kt_conn *c = w->wc->conn;
  for (uint32_t i = 0; i < p->n; i++) {
    const struct pframe *f = &s->pf[p->first + i];
    kt_watch_advance(n->watches, w->hub_id, f->end); /* before a send that may close c */
    kt_conn_send_watch_batch(c, w->stream_id, &s->hdr, (int64_t)w->hub_id, f->b);
    if (!w->wc || !kt_conn_open(c))
      return false;
    if (i + 1 < p->n && kt_conn_unsent(c) > KT_CONN_OUT_SOFT)
      return true;
  }
  return false;
}

/* Moves ready events of w into frames while its connection has room:
 * events are taken TAKE at a time so a frame stops near FRAME_BYTES (at a
 * revision's end, or mid-revision with `fragment`). A revision too big for
 * one frame without `fragment` ends the watch with a reason instead of
 * building a frame the client cannot take. The caller keeps w and its
 * connection alive (w->queued, a reference) while this runs: a send may
 * close the connection. Returns true if w still has events ready and its
 * connection is full. */
static bool drain_one(struct kt_node *n, struct nwatch *w) {
  struct node_watch_state *s = n->ws;
  struct kt_conn *c = w->wc->conn;
  size_t nev = 0, bytes = 0;
  /* the fan-out fast path: every ready event is in the group's log */
  const void *log = NULL;
  uint64_t from = 0, to = 0, at = 0;
  bool rec = !w->min_rev && kt_watch_run(n->watches, w->hub_id, &log, &from, &to);
  if (rec) {
    if (from == to)
      return false;
    const struct plan *p = plan_find(s, log, from, w->fragment);
    if (p && p->to == to)
      return replay(n, w, p);
    rec = !p; /* a plan that ends elsewhere stays; this drain is not recorded */
  }
  size_t first = s->n_pf;
  at = from;
  kt_arena_reset(&s->arena);
  for (;;) {
    if (s->cap_evs - nev < TAKE) {
      s->cap_evs = s->cap_evs ? 2 * s->cap_evs : 4 * TAKE;
      s->evs = realloc(s->evs, s->cap_evs * sizeof *s->evs);
      kt_assert(s->evs);
    }
    int64_t crev = 0;
    int k = kt_watch_take(n->watches, w->hub_id, s->evs + nev, TAKE, &s->arena, &crev);
    if (k < 0) {
      if (rec)
        pf_drop(s, first);
      if (nev)
        send_events(n, w, s->evs, nev, false, false, 0);
      end_stream(n, w, k == -KT_ECOMPACTED ? crev : 0,
                 k == -KT_ECOMPACTED ? kt_strerror(KT_ECOMPACTED) : "watch removed");
      return false;
    }
    size_t kept = 0;
    for (int i = 0; i < k; i++) {
      struct kt_event *e = &s->evs[nev + (size_t)i];
      if (e->kv.mod_revision < w->min_rev)
        continue;
      bytes += event_bytes(e);
      s->evs[nev + kept++] = *e;
    }
    if (kept && w->min_rev) /* every later event is past it too */
      w->min_rev = 0;
    nev += kept;
    int64_t next = kt_watch_next_rev(n->watches, w->hub_id);
    if (!next)
      break;
    bool mid_revision = nev && next == s->evs[nev - 1].kv.mod_revision;
    if (nev < FRAME_EVENTS && bytes < FRAME_BYTES)
      continue;
    if (mid_revision && !w->fragment) {
      if (bytes < KT_MAX_FRAME_BYTES / 2)
        continue; /* a revision stays whole in one frame */
      if (rec)
        pf_drop(s, first);
      kt_watch_cancel(n->watches, w->hub_id);
      end_stream(n, w, 0, "a revision is too large for one frame: watch with fragment");
      return false;
    }
    at += nev;
    send_events(n, w, s->evs, nev, mid_revision, rec, at);
    nev = bytes = 0;
    kt_arena_reset(&s->arena);
    if (!w->wc || !kt_conn_open(c)) {
      if (rec)
        pf_drop(s, first);
      return false;
    }
    if (kt_conn_unsent(c) > KT_CONN_OUT_SOFT) {
      if (rec)
        pf_drop(s, first);
      return true;
    }
  }
  if (nev) {
    at += nev;
    send_events(n, w, s->evs, nev, false, rec, at);
  }
  if (rec) {
    if (at == to && s->n_pf > first)
      plan_add(s, log, from, to, w->fragment, first);
    else
      pf_drop(s, first);
  }
  return false;
}

void kt_node_watch_flush(struct kt_node *n) {
  struct node_watch_state *s = n->ws;
  size_t end = s->n; /* watches queued while flushing wait for the next turn */
  kt_node_header(n, &s->hdr);
  if (s->head < end && !s->busy) { /* takes make room for catch-up: step again */
    s->busy = true;
    ev_idle_start(n->loop, &n->idle_w);
  }
  while (s->head < end) {
    struct nwatch *w = s->ready[s->head++];
    w->queued = false;
    if (!w->wc) {
      free(w);
      continue;
    }
    struct kt_conn *c = w->wc->conn;
    if (!kt_conn_open(c))
      continue; /* on_close is about to drop it */
    kt_conn_ref(c);
    w->queued = true; /* a send that closes c detaches w but cannot free it */
    bool full = kt_conn_unsent(c) > KT_CONN_OUT_SOFT || drain_one(n, w);
    w->queued = false;
    if (!w->wc) {
      free(w);
    } else if (full && kt_conn_open(c)) {
      w->blocked = true;
      kt_conn_want_drain(c);
    }
    kt_conn_unref(c);
  }
  plans_clear(s);
  if (s->head == s->n)
    s->head = s->n = 0;
}

void kt_node_watch_drained(struct kt_node *n, struct kt_conn *c) {
  struct wconn *wc = kt_conn_udata(c);
  if (!wc)
    return;
  for (size_t i = 0; i < wc->n; i++)
    if (wc->v[i]->blocked) {
      wc->v[i]->blocked = false;
      enqueue(n, wc->v[i]);
    }
  kt_node_watch_flush(n);
}

/* ---- requests ---- */

static struct wconn *wconn_of(struct kt_node *n, struct kt_conn *c) {
  struct wconn *wc = kt_conn_udata(c);
  if (!wc) {
    struct node_watch_state *s = n->ws;
    wc = calloc(1, sizeof *wc);
    kt_assert(wc);
    wc->conn = c;
    kt_conn_ref(c);
    kt_conn_set_udata(c, wc);
    if (s->n_conns == s->cap_conns) {
      s->cap_conns = s->cap_conns ? 2 * s->cap_conns : 16;
      s->conns = realloc(s->conns, s->cap_conns * sizeof *s->conns);
      kt_assert(s->conns);
    }
    wc->at = s->n_conns;
    s->conns[s->n_conns++] = wc;
  }
  return wc;
}

static struct kt_bytes copy(struct kt_bytes b) {
  uint8_t *p = malloc(b.n ? b.n : 1);
  kt_assert(p);
  if (b.n)
    memcpy(p, b.p, b.n);
  return (struct kt_bytes){p, b.n};
}

static void watch_create(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  const struct kt_watch_create_req *q = &req->u.watch_create;
  struct wconn *wc = kt_conn_udata(c);
  for (size_t i = 0; wc && i < wc->n; i++)
    if (wc->v[i]->stream_id == req->id) {
      kt_conn_send_error(c, req->id, KT_EINVAL, "a watch with this request id is open");
      return;
    }
  struct kt_watch_opts o = {.key = q->key,
                            .range_end = q->range_end,
                            .start_revision = q->start_revision,
                            .no_put = q->no_put,
                            .no_delete = q->no_delete,
                            .prev_kv = q->prev_kv};
  int64_t min_rev = 0;
  if (q->start_revision < 0) {
    kt_conn_send_error(c, req->id, KT_EINVAL, "start_revision must not be negative");
    return;
  }
  if (q->start_revision > kt_watch_revision(n->watches) + 1) {
    min_rev = q->start_revision; /* this member has not applied it yet */
    o.start_revision = 0;
  }
  struct nwatch *w = calloc(1, sizeof *w);
  kt_assert(w);
  struct kt_err e = {0};
  uint64_t id;
  if (kt_watch_create(n->watches, &o, w, &id, &e)) {
    free(w);
    kt_node_reply_err(c, req->id, e.code, &e);
    return;
  }
  wc = wconn_of(n, c);
  *w = (struct nwatch){.hub_id = id,
                       .stream_id = req->id,
                       .wc = wc,
                       .min_rev = min_rev,
                       .fragment = q->fragment,
                       .progress_notify = q->progress_notify,
                       .key = copy(q->key),
                       .end = copy(q->range_end)};
  if (wc->n == wc->cap) {
    wc->cap = wc->cap ? 2 * wc->cap : 4;
    wc->v = realloc(wc->v, wc->cap * sizeof *wc->v);
    kt_assert(wc->v);
  }
  wc->v[wc->n++] = w;
  send_frame(n, w, &(struct kt_watch_resp){.created = true});
}

static struct nwatch *find(struct wconn *wc, int64_t watch_id) {
  for (size_t i = 0; wc && i < wc->n; i++)
    if ((int64_t)wc->v[i]->hub_id == watch_id)
      return wc->v[i];
  return NULL;
}

static void send_progress(struct kt_node *n, struct nwatch *w) {
  send_frame(n, w, &(struct kt_watch_resp){0});
}

void kt_node_watch_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req) {
  switch (req->type) {
  case KT_MSG_WATCH_CREATE:
    watch_create(n, c, req);
    return;
  case KT_MSG_WATCH_CANCEL: {
    struct nwatch *w = find(kt_conn_udata(c), req->u.watch_cancel.watch_id);
    if (!w) {
      kt_conn_send_error(c, req->id, KT_ENOTFOUND, "watch not found");
      return;
    }
    kt_watch_cancel(n->watches, w->hub_id);
    end_stream(n, w, 0, NULL);
    kt_node_reply(n, c, req->id, KT_MSG_WATCH_CANCEL, NULL);
    return;
  }
  case KT_MSG_WATCH_PROGRESS: {
    struct wconn *wc = kt_conn_udata(c);
    for (size_t i = 0; wc && i < wc->n; i++)
      if (kt_watch_idle(n->watches, wc->v[i]->hub_id))
        send_progress(n, wc->v[i]);
    kt_node_reply(n, c, req->id, KT_MSG_WATCH_PROGRESS, NULL);
    return;
  }
  default:
    kt_conn_send_error(c, req->id, KT_EUNSUPPORTED, "not a watch request");
  }
}

/* ---- background and teardown ---- */

bool kt_node_watch_busy(const struct kt_node *n) {
  return n->ws && (n->ws->busy || n->ws->recheck);
}

void kt_node_watch_auth_changed(struct kt_node *n) {
  if (!n->ws)
    return;
  n->ws->recheck = n->ws->n_conns;
  if (n->ws->recheck)
    ev_idle_start(n->loop, &n->idle_w);
}

/* One slice of the check after an auth change: watches their caller may no
 * longer read end with a reason (etcd keeps them going). */
static void recheck_slice(struct kt_node *n) {
  struct node_watch_state *s = n->ws;
  for (int k = 0; k < RECHECK_CONNS && s->recheck; k++) {
    if (s->recheck > s->n_conns)
      s->recheck = s->n_conns;
    if (!s->recheck)
      break;
    struct wconn *wc = s->conns[--s->recheck];
    for (size_t i = wc->n; i-- > 0;) {
      struct nwatch *w = wc->v[i];
      if (kt_node_auth_may_read(n, wc->conn, w->key, w->end))
        continue;
      kt_log(KT_LOG_WARN, "audit",
             "decision=deny op=watch stream=%llu reason=EPERMDENIED "
             "(permission revoked: watch cancelled)",
             (unsigned long long)w->stream_id);
      kt_watch_cancel(n->watches, w->hub_id);
      end_stream(n, w, 0, "permission denied");
    }
  }
}

/* Once per loop turn (and per idle slice while it makes progress): watchers
 * created with a past revision or moved aside catch up from history. One
 * that waits for its consumer costs nothing until a later turn. */
void kt_node_watch_step(struct kt_node *n) {
  if (n->ws->recheck)
    recheck_slice(n);
  n->ws->busy = kt_watch_step(n->watches, STEP_BUDGET);
  if (n->ws->busy)
    ev_idle_start(n->loop, &n->idle_w);
}

void kt_node_watch_conn_closed(struct kt_node *n, struct kt_conn *c) {
  struct wconn *wc = kt_conn_udata(c);
  if (!wc)
    return;
  while (wc->n) {
    struct nwatch *w = wc->v[wc->n - 1];
    kt_watch_cancel(n->watches, w->hub_id);
    watch_drop(n, w);
  }
  free(wc->v);
  kt_conn_set_udata(c, NULL);
  struct node_watch_state *s = n->ws;
  s->conns[wc->at] = s->conns[--s->n_conns];
  s->conns[wc->at]->at = wc->at;
  free(wc);
  kt_conn_unref(c);
}

static void progress_one(void *arg, void *owner, uint64_t id, int64_t rev) {
  (void)id;
  (void)rev;
  struct nwatch *w = owner;
  if (w->progress_notify && w->wc && kt_conn_unsent(w->wc->conn) <= KT_CONN_OUT_SOFT)
    send_progress(arg, w);
}

void kt_node_watch_tick(struct kt_node *n) {
  struct node_watch_state *s = n->ws;
  double every = (n->cfg.watch_progress_ms ? n->cfg.watch_progress_ms : DEFAULT_PROGRESS_MS) / 1e3;
  if (ev_now(n->loop) - s->last_progress < every)
    return;
  s->last_progress = ev_now(n->loop);
  kt_watch_progress_all(n->watches, progress_one, n); /* O(watchers), once per interval */
}

void kt_node_watch_free(struct kt_node *n) {
  struct node_watch_state *s = n->ws;
  if (!s)
    return;
  for (size_t i = s->head; i < s->n; i++)
    if (!s->ready[i]->wc)
      free(s->ready[i]);
    else
      s->ready[i]->queued = false;
  free(s->ready);
  free(s->conns);
  free(s->evs);
  plans_clear(s);
  free(s->plans);
  free(s->pf);
  free(s->pidx);
  kt_arena_free(&s->arena);
  free(s);
  n->ws = NULL;
  kt_watch_hub_free(n->watches);
}
