/* tools/grpc-bridge/bridge_watch.c — etcd's Watch service, coalesced: client
 * watches of one range share one upstream ketch_watch (etcd's grpc-proxy
 * feature, with its flaws fixed: progress requests are answered, a slow
 * client loses its own watch only, a watch from an old revision is merged in
 * by revision).
 *
 * Owns (all on the bridge's one loop thread, no locks):
 *   - per Watch stream a kt_bridge_wstream: its client watches (struct cw,
 *     ids per stream as etcd), its pending progress requests;
 *   - per client watch a struct cw: its id and per-client options (filters,
 *     prev_kv, fragment, progress_notify) and `sent`, the revision up to
 *     which it was sent every event of its range (or filtered it out);
 *   - the SHARED-WATCH TABLE (this file's hash table `tab`): one group per
 *     (ketch handle, key, range_end, prev_kv), each a struct uw holding ONE
 *     ketch_watch from "now" (start revision 0, progress_notify on, no
 *     filters: filters and fragments are per client, here) and three lists
 *     of client watches: WAIT (no start revision, group not created yet),
 *     PRIV (catching up on a private upstream watch), MEMB (members: the
 *     group's deliveries are theirs). A client without prev_kv joins the
 *     group with prev_kv when none without exists (stripped for it). The
 *     handle is part of the key: a
 *     handle is one identity toward the members (bridge_main.c), so clients
 *     of different users never share what the member checked for one;
 *   - per client catching up, a PRIVATE upstream ketch_watch (struct uw,
 *     !shared) from its start revision, with its filters and prev_kv;
 *   - per ketch handle a struct wkc: the progress rounds on that handle.
 *
 * Revisions. An upstream watch u has u->rev: every event of its range up to
 * u->rev has been delivered to the bridge. A group's rev starts at its
 * created header's revision (a watch from now covers what comes after it),
 * a private's at start-1; events raise it to their revision (without
 * fragment a ketch delivery holds whole revisions), progress notifications
 * to their header's revision. A member c gets a group delivery's events with
 * revision > c->sent, then c->sent = max(c->sent, rev): never a duplicate,
 * and no gap because a member always has c->sent >= group rev.
 *
 * Join protocol (client watch c with start revision S, group g found or made
 * for its key):
 *   g made by c, S == 0 -> WAIT; when g's created arrives, c becomes a
 *                         member with c->sent = g's created revision, which
 *                         its own created response carries.
 *   g found, S == 0 or (g created and S-1 >= g->rev)
 *                      -> CHECK: nothing of c reaches the member otherwise,
 *                         so the member is asked whether c's caller may watch
 *                         the range now (cw_check: an AUTH_CHECK of it, which
 *                         the member answers as it would check a watch
 *                         create of it, token and READ, without reading a
 *                         key, so a refusal is the member's, as if nothing
 *                         were shared). Once it answers, as at create:
 *     S == 0, g created  -> member at once at the newest revision the
 *                         bridge has seen (seen_rev: g->rev, the header of
 *                         g's last delivery, any other watch's): c->sent =
 *                         that, and its created response carries it, as
 *                         etcd's carries its current revision (events after
 *                         it follow; g's events up to it are older than the
 *                         watch). Not g->rev alone: clientv3 resumes a watch
 *                         from now at its created revision, and g->rev is
 *                         often the key's last change, made before c existed.
 *     S == 0, g not yet  -> WAIT, as above.
 *     S > 0, g created and S-1 >= g->rev -> member at once with c->sent = S-1
 *                         (g will deliver everything after g->rev).
 *     S > 0 otherwise    -> PRIV (g passed S meanwhile).
 *   otherwise          -> PRIV: a private upstream watch p from S serves c
 *                         (the member checks it as any watch); once p is
 *                         created, after each of p's deliveries (and when g
 *                         is created) c joins g as soon as p->rev >= g->rev,
 *                         with c->sent = p->rev (events of g <= p->rev are
 *                         skipped for c), and p is cancelled.
 * A cancel of a watch not created yet is answered right after its created
 * response (etcd answers a create before it reads the next request).
 * Once p's history is replayed and p is idle, nothing may come on p for a
 * while (a quiet key): so p's deliveries ask for a PROGRESS ROUND on the
 * handle (ketch_watch_progress, then a status call as a barrier: the member
 * answers it after the progress frames): idle watches get a progress frame
 * at the member's revision, g and p get the same one, and c joins.
 *
 * Progress requests from a client stream are answered from a round too:
 * once the barrier is back, the answer (watch_id -1, etcd 3.4's shape) is
 * the smallest `sent` of the stream's created watches (never a revision
 * whose events the client was not sent; ketch's member has just told every
 * idle upstream watch its revision), or the member's revision when it has
 * none; and never beyond the newest revision of the cluster the bridge has
 * seen (a watch from a revision not reached yet has `sent` = start - 1: it
 * is answered the cluster's revision, as etcd does). Requests arriving while
 * a round is in flight wait for the next one (one round in flight per
 * handle, however many streams ask).
 *
 * progress_notify, as etcd's server: each stream has a ticker (the
 * interval of kt_bridge_watch_setup, 10 min by default, plus up to 10%
 * jitter); a tick marks each of its watches with progress_notify that was
 * sent no events since the last tick (pn_ok) as due (pn_due) and asks for a
 * round; a due watch gets one notification with the next progress frame of
 * its upstream watch (the revision as for a progress request), and events
 * sent to it meanwhile make it not due. Progress frames the bridge's own
 * rounds bring are never sent on otherwise.
 *
 * Back pressure: a delivery that does not fit a client's stream
 * (io->room()) cancels that client's watch alone ("watcher too slow ...");
 * the group and its other members go on. Nothing is buffered here: a
 * delivery is fanned out at once (a member's memory is the server's bounded
 * stream queue). A group whose last client leaves (cancel, stream closed,
 * too slow) is removed from the table and its upstream watch cancelled;
 * structs of upstream watches live until their last (canceled) delivery.
 * An upstream watch that ends without being asked to (compaction after a
 * failover, permission revoked, the handle closed) ends every client watch
 * on it with that reason (etcd's answers, as before coalescing).
 *
 * Fan-out cost: a group delivery is encoded once per variant (prev_kv kept or
 * stripped x filter): header and events protobuf bytes, and each member's
 * message is those bytes around its watch_id (protobuf fields 1, 2, 11 in
 * order: the bytes protobuf-c would produce). Members needing a subset
 * (just joined with c->sent inside the delivery) or fragments take the
 * general path.
 *
 * Metrics (etcd's proxy names): kt_bridge_watchers_coalescing, the client
 * watches served by a group beyond its first member (etcd's
 * watchers_coalescing_total gauge), and kt_bridge_events_coalescing, for
 * each group delivery of events to n members, n-1 (etcd's
 * events_coalescing_total; etcd counts its progress notifications too, but
 * here most progress frames are the bridge's own rounds, never sent on).
 */
#include "bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "../grpc/grpc_client.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

#define WS_MAX_WATCHES_PER_STREAM 4096

KT_LOOP_LOCAL _Atomic int64_t kt_bridge_watchers_coalescing;
KT_LOOP_LOCAL _Atomic uint64_t kt_bridge_events_coalescing;

enum { C_WAIT, C_PRIV, C_MEMB, C_CHECK, C_NONE };

struct cw;

/* A member check in flight (cw_check): c is NULL once the watch ended. */
struct wcheck {
  struct cw *c;
};

struct uw;
struct wkc;

struct cw {
  kt_bridge_wstream *s;
  struct cw *prev, *next;   /* the stream's watches */
  struct cw *gprev, *gnext; /* g->list[state] */
  struct uw *g;             /* its group (NULL once detached) */
  struct uw *p;             /* its private upstream watch (PRIV only) */
  struct wcheck *check;     /* its member check in flight (CHECK only) */
  int state;
  int64_t id, start, sent;
  bool fragment, progress_notify, prev_kv, no_put, no_delete;
  bool created;        /* its created response was sent */
  bool cancel_pending; /* the client cancelled it before created: answered after */
  /* progress_notify, as etcd's sendLoop: pn_ok is etcd's progress[id] (no
   * events sent since the stream's last tick); pn_due: a tick asked for a
   * notification, sent with the next progress frame its upstream gets */
  bool pn_ok, pn_due;
};

struct uw {
  struct wkc *k;
  uint64_t handle;
  bool shared;  /* a group (else a client's private catch-up watch) */
  bool created; /* ketch delivered created */
  bool ending;  /* cancelled by the bridge, or its last delivery came */
  bool in_table;
  bool prev_kv;
  int64_t rev;      /* every event up to rev delivered to the bridge */
  ketch_header hdr; /* the newest header of its deliveries */
  /* group */
  uint8_t *key, *end;
  size_t key_len, end_len;
  uint64_t hash;
  struct uw *hnext;
  struct cw *list[4]; /* by state: C_WAIT, C_PRIV, C_MEMB, C_CHECK */
  size_t n[4];
  /* private */
  struct cw *owner; /* NULL once the client left or joined */
};

/* Progress rounds of one ketch handle. */
struct wkc {
  ketch_client *kc;
  struct wkc *next;
  size_t n_uw;                /* upstream watches on kc not yet at their last delivery */
  bool inflight;              /* ketch_watch_progress + status barrier sent */
  bool want;                  /* a private watch moved: one more round */
  kt_bridge_wstream *list[2]; /* [0]: answered by the round in flight, [1]: the next */
};

struct kt_bridge_wstream {
  ketch_client *kc;
  const struct kt_bridge_stream_io *io; /* NULL once closed */
  void *arg;
  int refs;
  bool finished;
  size_t fragment_bytes;
  struct cw *watches;
  size_t n_watches;
  int64_t next_id;
  /* progress requests waiting for a round: count and link per list of wkc */
  int preq[2];
  bool plisted[2];
  kt_bridge_wstream *plink[2];
  ev_timer pn_w; /* etcd's progressTicker (started when wloop is set) */
};

/* kt_bridge_watch_setup's: the loop of the streams' tickers, their period
 * (etcd's --experimental-watch-progress-notify-interval, 10 min) and who to
 * tell that a ticker submitted work on a handle. */
static KT_LOOP_LOCAL struct ev_loop *wloop; /* each event loop's own (bridge.h) */
static KT_LOOP_LOCAL double pn_interval_s = 600;
static KT_LOOP_LOCAL void (*wsubmitted)(ketch_client *kc, void *arg);
static KT_LOOP_LOCAL void *wsubmitted_arg;

void kt_bridge_watch_setup(struct ev_loop *loop, double progress_interval_s,
                           void (*submitted)(ketch_client *kc, void *arg), void *arg) {
  wloop = loop;
  pn_interval_s = progress_interval_s;
  wsubmitted = submitted;
  wsubmitted_arg = arg;
}

/* The newest header of any delivery: canceled deliveries carry none, and
 * etcd's cancel responses still name the term and revision. */
static KT_LOOP_LOCAL ketch_header wlast_hdr;

static void wnote_header(const ketch_header *h) {
  if (h->revision >= wlast_hdr.revision && h->raft_term)
    wlast_hdr = *h;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The newest revision of the cluster the bridge has seen on g or on any
 * watch: a revision every one up to which was committed before now. */
static int64_t seen_rev(const struct uw *g) {
  return max64(max64(g->rev, g->hdr.revision), wlast_hdr.revision);
}

/* The revision a progress response names for a client sent everything up
 * to `sent`: no later than the cluster's newest revision the bridge knows
 * (h: a header just received, may be NULL). A watch from a start revision
 * the cluster has not reached has sent = start - 1, ahead of the cluster:
 * etcd answers its store's revision there, never a future one. */
static int64_t progress_rev(int64_t sent, const ketch_header *h) {
  int64_t top = max64(h ? h->revision : 0, wlast_hdr.revision);
  return sent < top ? sent : top;
}

/* ---- handles ---- */

static KT_LOOP_LOCAL struct wkc *wkcs;

static struct wkc *wkc_get(ketch_client *kc) {
  for (struct wkc *k = wkcs; k; k = k->next)
    if (k->kc == kc)
      return k;
  struct wkc *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
  k->kc = kc;
  k->next = wkcs;
  wkcs = k;
  return k;
}

static void wkc_maybe_free(struct wkc *k) {
  if (k->n_uw || k->inflight || k->list[0] || k->list[1])
    return;
  for (struct wkc **pp = &wkcs; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  free(k);
}

/* ---- the shared-watch table ---- */

static KT_LOOP_LOCAL struct uw **tab;
static KT_LOOP_LOCAL size_t tab_cap, tab_n;

static uint64_t grp_hash(const ketch_client *kc, const void *key, size_t key_len, const void *end,
                         size_t end_len, bool prev_kv) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)kc ^ (prev_kv ? 0x9e37u : 0);
  const uint8_t *p = key;
  for (size_t i = 0; i < key_len; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull ^ end_len;
  p = end;
  for (size_t i = 0; i < end_len; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static struct uw *grp_find(ketch_client *kc, const void *key, size_t key_len, const void *end,
                           size_t end_len, bool prev_kv) {
  if (!tab_cap)
    return NULL;
  uint64_t h = grp_hash(kc, key, key_len, end, end_len, prev_kv);
  for (struct uw *g = tab[h & (tab_cap - 1)]; g; g = g->hnext)
    if (g->hash == h && g->k->kc == kc && g->prev_kv == prev_kv && g->key_len == key_len &&
        g->end_len == end_len && !memcmp(g->key, key, key_len) &&
        (!end_len || !memcmp(g->end, end, end_len)))
      return g;
  return NULL;
}

static bool tab_insert(struct uw *g) {
  if (tab_n + 1 > tab_cap / 2) { /* grow (power of two, load <= 1/2) */
    size_t cap = tab_cap ? tab_cap * 2 : 64;
    struct uw **t = calloc(cap, sizeof *t);
    if (!t)
      return false;
    for (size_t i = 0; i < tab_cap; i++)
      for (struct uw *x = tab[i], *next; x; x = next) {
        next = x->hnext;
        x->hnext = t[x->hash & (cap - 1)];
        t[x->hash & (cap - 1)] = x;
      }
    free(tab);
    tab = t;
    tab_cap = cap;
  }
  struct uw **b = &tab[g->hash & (tab_cap - 1)];
  g->hnext = *b;
  *b = g;
  g->in_table = true;
  tab_n++;
  return true;
}

static void tab_remove(struct uw *g) {
  if (!g->in_table)
    return;
  for (struct uw **pp = &tab[g->hash & (tab_cap - 1)]; *pp; pp = &(*pp)->hnext)
    if (*pp == g) {
      *pp = g->hnext;
      break;
    }
  g->in_table = false;
  if (--tab_n == 0) {
    free(tab);
    tab = NULL;
    tab_cap = 0;
  }
}

/* ---- messages ---- */

static void ws_finish(kt_bridge_wstream *s, int status, const char *message) {
  if (s->finished || !s->io)
    return;
  s->finished = true;
  s->io->finish(s->arg, status, message);
}

static bool ws_live(const kt_bridge_wstream *s) { return s->io && !s->finished; }

static void ws_send(kt_bridge_wstream *s, const void *m) {
  if (!ws_live(s))
    return;
  size_t n;
  uint8_t *f = kt_bridge_frame(m, &n);
  if (!f) {
    ws_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return;
  }
  s->io->send(s->arg, f, n);
}

/* A control response: created / canceled / progress, no events. */
static void ws_ctrl(kt_bridge_wstream *s, const ketch_header *kh, int64_t id, bool created,
                    bool canceled, int64_t compact_revision, const char *reason) {
  Etcdserverpb__ResponseHeader h;
  Etcdserverpb__WatchResponse r;
  kt_bridge_fill_header(&h, kh, s->kc);
  etcdserverpb__watch_response__init(&r);
  r.header = &h;
  r.watch_id = id;
  r.created = created;
  r.canceled = canceled;
  r.compact_revision = compact_revision;
  r.cancel_reason = (char *)(reason ? reason : "");
  ws_send(s, &r);
}

/* ---- client watches ---- */

static void grp_link(struct uw *g, struct cw *c, int state) {
  c->state = state;
  c->gprev = NULL;
  c->gnext = g->list[state];
  if (c->gnext)
    c->gnext->gprev = c;
  g->list[state] = c;
  if (state == C_MEMB && g->n[C_MEMB] > 0)
    kt_bridge_watchers_coalescing++;
  g->n[state]++;
}

static void grp_unlink(struct cw *c) {
  struct uw *g = c->g;
  if (c->gprev)
    c->gprev->gnext = c->gnext;
  else
    g->list[c->state] = c->gnext;
  if (c->gnext)
    c->gnext->gprev = c->gprev;
  g->n[c->state]--;
  if (c->state == C_MEMB && g->n[C_MEMB] > 0)
    kt_bridge_watchers_coalescing--;
  c->state = C_NONE;
  c->gprev = c->gnext = NULL;
}

static void uw_cancel(struct uw *u) {
  if (u->ending)
    return;
  u->ending = true;
  ketch_watch_cancel(u->k->kc, u->handle);
}

/* A group nobody uses any more leaves the table; its upstream watch ends. */
static void grp_release(struct uw *g) {
  if (g->n[C_WAIT] + g->n[C_PRIV] + g->n[C_MEMB] + g->n[C_CHECK] > 0)
    return;
  tab_remove(g);
  uw_cancel(g);
}

/* c leaves its group and its private watch (no message). */
static void cw_detach(struct cw *c) {
  if (c->check) { /* its answer finds nobody */
    c->check->c = NULL;
    c->check = NULL;
  }
  if (c->p) {
    c->p->owner = NULL;
    uw_cancel(c->p);
    c->p = NULL;
  }
  struct uw *g = c->g;
  if (g) {
    grp_unlink(c);
    c->g = NULL;
    grp_release(g);
  }
}

/* c ends: detached, off its stream, freed. */
static void cw_end(struct cw *c) {
  kt_bridge_wstream *s = c->s;
  cw_detach(c);
  if (c->prev)
    c->prev->next = c->next;
  else
    s->watches = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->n_watches--;
  free(c);
}

/* Sends c's created response (once). A cancel the client sent before it is
 * answered right after it, as etcd orders them (its recvLoop answers a
 * create before it reads the cancel): c ends, and false is returned. */
static bool cw_created(struct cw *c, const ketch_header *h, int64_t rev) {
  ketch_header x = *h;
  x.revision = rev;
  if (!c->created) {
    c->created = true;
    ws_ctrl(c->s, &x, c->id, true, false, 0, NULL);
  }
  if (!c->cancel_pending)
    return true;
  ws_ctrl(c->s, &x, c->id, false, true, 0, NULL);
  cw_end(c);
  return false;
}

/* An upstream watch ended c's watch (etcd's answers, as ketch reported). */
static void cw_ended_by(struct cw *c, int err, const ketch_result *res) {
  kt_bridge_wstream *s = c->s;
  if (ws_live(s)) {
    ketch_header h = wlast_hdr;
    if (err == KETCH_ECOMPACTED || res->watch.compact_revision) {
      /* compact_revision: the compaction revision, where a new watch may
       * start (as etcd: its clients resume there). */
      h.revision = 0; /* as etcd's compacted response */
      if (!c->created)
        ws_ctrl(s, &wlast_hdr, c->id, true, false, 0, NULL);
      ws_ctrl(s, &h, c->id, false, true, res->watch.compact_revision, NULL);
    } else {
      int st;
      const char *m = kt_bridge_error(err ? err : KETCH_ECANCELED, res->message, &st);
      ws_ctrl(s, &h, c->id, !c->created, true, 0, m);
    }
  }
  cw_end(c);
}

/* The client does not take the events of res: its watch alone is
 * cancelled, naming the first revision it was not sent. */
static void cw_too_slow(struct cw *c, const ketch_result *res) {
  const ketch_watch_result *wr = &res->watch;
  int64_t from = INT64_MAX;
  for (size_t i = 0; i < wr->n_events; i++)
    if (wr->events[i].kv.mod_revision > c->sent && wr->events[i].kv.mod_revision < from)
      from = wr->events[i].kv.mod_revision;
  char m[160];
  snprintf(m, sizeof m,
           "ketch-grpc: watcher too slow: its stream has more queued than the bridge "
           "holds (the client does not read); watch again from revision %lld",
           (long long)from);
  ws_ctrl(c->s, &res->header, c->id, false, true, 0, m);
  cw_end(c);
}

/* A progress frame came for c's upstream watch: c's notification, when its
 * stream's ticker asked for one (etcd sends them per tick only, not for every
 * progress the bridge's own rounds bring). */
static void cw_progress(struct cw *c, const ketch_header *h) {
  if (!c->pn_due || !c->created || !ws_live(c->s) || !c->s->io->room(c->s->arg, 64))
    return;
  c->pn_due = false;
  ketch_header x = *h;
  x.revision = progress_rev(c->sent, h);
  ws_ctrl(c->s, &x, c->id, false, false, 0, NULL);
}

/* The protobuf events of a delivery: those after revision `after` that
 * pass the filters, with prev_kv when `prev` (pointing at wr's bytes). */
struct evset {
  Mvccpb__Event *ev, **evp;
  Mvccpb__KeyValue *kv;
  size_t n;
};

static bool ev_pass(const ketch_event *e, int64_t after, bool no_put, bool no_delete) {
  if (e->kv.mod_revision <= after)
    return false;
  return e->type == KETCH_EVENT_DELETE ? !no_delete : !no_put;
}

static void evset_free(struct evset *x) {
  free(x->ev);
  free(x->evp);
  free(x->kv);
}

/* Returns false if out of memory (x freed). x->n may be 0. */
static bool evset_build(struct evset *x, const ketch_watch_result *wr, int64_t after, bool no_put,
                        bool no_delete, bool prev) {
  size_t n = 0;
  for (size_t i = 0; i < wr->n_events; i++)
    n += ev_pass(&wr->events[i], after, no_put, no_delete);
  *x = (struct evset){.n = n};
  if (n == 0)
    return true;
  x->ev = calloc(n, sizeof *x->ev);
  x->evp = calloc(n, sizeof *x->evp);
  x->kv = calloc(2 * n, sizeof *x->kv);
  if (!x->ev || !x->evp || !x->kv) {
    evset_free(x);
    return false;
  }
  size_t j = 0;
  for (size_t i = 0; i < wr->n_events; i++) {
    const ketch_event *e = &wr->events[i];
    if (!ev_pass(e, after, no_put, no_delete))
      continue;
    mvccpb__event__init(&x->ev[j]);
    x->ev[j].type = e->type == KETCH_EVENT_DELETE ? MVCCPB__EVENT__EVENT_TYPE__DELETE
                                                  : MVCCPB__EVENT__EVENT_TYPE__PUT;
    kt_bridge_fill_kv(&x->kv[2 * j], &e->kv);
    x->ev[j].kv = &x->kv[2 * j];
    if (e->prev_kv && prev) {
      kt_bridge_fill_kv(&x->kv[2 * j + 1], e->prev_kv);
      x->ev[j].prev_kv = &x->kv[2 * j + 1];
    }
    x->evp[j] = &x->ev[j];
    j++;
  }
  return true;
}

/* The events of res that c wants, as etcd's sendFragments when c asked for
 * fragments and they are larger than etcd's limit. Returns false if they did
 * not fit the stream (nothing sent). */
static bool cw_send_events(struct cw *c, const ketch_result *res) {
  kt_bridge_wstream *s = c->s;
  const ketch_watch_result *wr = &res->watch;
  if (!ws_live(s))
    return true;
  struct evset x;
  if (!evset_build(&x, wr, c->sent, c->no_put, c->no_delete, c->prev_kv)) {
    ws_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return true;
  }
  if (x.n == 0)
    return true;
  size_t n = x.n;
  Mvccpb__Event **evp = x.evp;
  Etcdserverpb__ResponseHeader h;
  Etcdserverpb__WatchResponse r;
  bool ok = true;
  kt_bridge_fill_header(&h, &res->header, s->kc);
  etcdserverpb__watch_response__init(&r);
  r.header = &h;
  r.watch_id = c->id;
  r.events = evp;
  r.n_events = n;
  size_t total = etcdserverpb__watch_response__get_packed_size(&r);
  c->pn_ok = c->pn_due = false; /* etcd: events elide the next notification */
  if (!s->io->room(s->arg, total + 5)) {
    ok = false;
  } else if (!c->fragment || total < s->fragment_bytes || n < 2) {
    ws_send(s, &r);
  } else {
    /* etcd's sendFragments: as many events as fit under the limit (at least
     * one) per response, fragment=true on all but the last. */
    size_t idx = 0;
    while (idx < n) {
      size_t k = 1;
      r.events = evp + idx;
      for (; idx + k < n; k++) {
        r.n_events = k + 1;
        if (etcdserverpb__watch_response__get_packed_size(&r) >= s->fragment_bytes)
          break;
      }
      r.n_events = k;
      idx += k;
      r.fragment = idx < n;
      ws_send(s, &r);
    }
  }
  evset_free(&x);
  return ok;
}

/* ---- one group delivery, encoded once per variant ---- */

struct dvar {
  bool done;
  uint8_t *p; /* the events as WatchResponse field 11, n bytes; NULL: none */
  size_t n;
};

struct dcache {
  const ketch_result *res;
  ketch_client *kc;
  int64_t min_rev; /* the delivery's smallest event revision */
  bool hdr_done, failed;
  uint8_t *hdr; /* field 1 (the header), hdr_len bytes */
  size_t hdr_len;
  struct dvar v[2][3]; /* [prev_kv kept][filter: none, no put, no delete] */
};

static size_t varint_put(uint8_t *o, uint64_t v) {
  size_t i = 0;
  while (v >= 0x80) {
    o[i++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  o[i++] = (uint8_t)v;
  return i;
}

static bool dc_header(struct dcache *d) {
  if (d->hdr_done)
    return !d->failed;
  d->hdr_done = true;
  Etcdserverpb__ResponseHeader h;
  kt_bridge_fill_header(&h, &d->res->header, d->kc);
  size_t n = etcdserverpb__response_header__get_packed_size(&h);
  d->hdr = malloc(n + 11);
  if (!d->hdr) {
    d->failed = true;
    return false;
  }
  d->hdr[0] = 0x0a; /* field 1, length-delimited */
  size_t k = 1 + varint_put(d->hdr + 1, n);
  etcdserverpb__response_header__pack(&h, d->hdr + k);
  d->hdr_len = k + n;
  return true;
}

static struct dvar *dc_variant(struct dcache *d, bool prev, int filt) {
  struct dvar *v = &d->v[prev][filt];
  if (v->done)
    return v;
  v->done = true;
  struct evset x;
  if (!evset_build(&x, &d->res->watch, -1, filt == 1, filt == 2, prev)) {
    d->failed = true;
    return v;
  }
  if (x.n == 0)
    return v;
  Etcdserverpb__WatchResponse r;
  etcdserverpb__watch_response__init(&r);
  r.events = x.evp;
  r.n_events = x.n;
  size_t sz = etcdserverpb__watch_response__get_packed_size(&r);
  v->p = malloc(sz ? sz : 1);
  if (v->p) {
    etcdserverpb__watch_response__pack(&r, v->p);
    v->n = sz;
  } else {
    d->failed = true;
  }
  evset_free(&x);
  return v;
}

static void dc_free(struct dcache *d) {
  free(d->hdr);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      free(d->v[i][j].p);
}

/* A group delivery's events to member c. Returns false if they did not fit. */
static bool cw_deliver(struct cw *c, struct dcache *d) {
  kt_bridge_wstream *s = c->s;
  if (!ws_live(s) || (c->no_put && c->no_delete))
    return true;
  if (c->sent >= d->min_rev || d->failed) /* a part of it only: the general path */
    return cw_send_events(c, d->res);
  struct dvar *v = dc_variant(d, c->prev_kv, c->no_put ? 1 : c->no_delete ? 2 : 0);
  if (!dc_header(d) || (!v->p && d->failed))
    return cw_send_events(c, d->res);
  if (!v->p)
    return true; /* every event filtered out */
  uint8_t idb[11];
  size_t idn = 0;
  if (c->id != 0) {
    idb[0] = 0x10; /* field 2, varint */
    idn = 1 + varint_put(idb + 1, (uint64_t)c->id);
  }
  size_t body = d->hdr_len + idn + v->n;
  if (c->fragment && body >= s->fragment_bytes)
    return cw_send_events(c, d->res);
  if (!s->io->room(s->arg, body + 5))
    return false;
  uint8_t *f = malloc(body + 5);
  if (!f) {
    ws_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return true;
  }
  kt_bridge_frame_prefix(f, body);
  memcpy(f + 5, d->hdr, d->hdr_len);
  memcpy(f + 5 + d->hdr_len, idb, idn);
  memcpy(f + 5 + d->hdr_len + idn, v->p, v->n);
  s->io->send(s->arg, f, body + 5);
  c->pn_ok = c->pn_due = false; /* etcd: events elide the next notification */
  return true;
}

/* ---- progress rounds ---- */

static void round_start(struct wkc *k);

static void ws_unref(kt_bridge_wstream *s) {
  if (--s->refs == 0)
    free(s);
}

/* Answers the n progress requests of s: the smallest revision its created
 * watches were sent everything up to; h (may be NULL): the member's header
 * for a stream without one. */
static void ws_progress_answer(kt_bridge_wstream *s, int n, const ketch_header *h) {
  if (!s->io)
    return;
  s->io->pending(s->arg, -n);
  int64_t rev = INT64_MAX;
  for (struct cw *c = s->watches; c; c = c->next)
    if (c->created && c->sent < rev)
      rev = c->sent;
  if (rev == INT64_MAX) {
    if (!h)
      return;
    rev = h->revision;
  }
  ketch_header x = h && h->raft_term ? *h : wlast_hdr;
  x.revision = progress_rev(rev, h);
  for (int i = 0; i < n; i++)
    ws_ctrl(s, &x, -1, false, false, 0, NULL);
}

/* Answers every stream of list li of k. */
static void round_answer(struct wkc *k, int li, const ketch_header *h) {
  while (k->list[li]) {
    kt_bridge_wstream *s = k->list[li];
    k->list[li] = s->plink[li];
    s->plink[li] = NULL;
    s->plisted[li] = false;
    int n = s->preq[li];
    s->preq[li] = 0;
    ws_progress_answer(s, n, h);
    ws_unref(s);
  }
}

static void on_round(void *arg, int err, const ketch_result *res) {
  struct wkc *k = arg;
  k->inflight = false;
  round_answer(k, 0, err ? NULL : &res->header);
  /* the next round's streams move up */
  k->list[0] = k->list[1];
  k->list[1] = NULL;
  for (kt_bridge_wstream *s = k->list[0]; s; s = s->plink[0]) {
    s->plink[0] = s->plink[1];
    s->plink[1] = NULL;
    s->plisted[0] = true;
    s->plisted[1] = false;
    s->preq[0] = s->preq[1];
    s->preq[1] = 0;
  }
  if (err) { /* no new round (the handle may be closing): answer from what is known */
    k->want = false;
    round_answer(k, 0, NULL);
  } else {
    round_start(k);
  }
  wkc_maybe_free(k);
}

static void round_start(struct wkc *k) {
  if (k->inflight || (!k->want && !k->list[0]))
    return;
  k->want = false;
  ketch_watch_progress(k->kc);
  if (ketch_status_async(k->kc, on_round, k) == 0) {
    k->inflight = true;
    return;
  }
  round_answer(k, 0, NULL);
}

static void want_round(struct wkc *k) {
  k->want = true;
  round_start(k);
}

/* ---- upstream deliveries ---- */

/* c (PRIV) joins its group if its private watch has delivered at least as
 * far as the group (see the join protocol above). Returns true if it did. */
static bool cw_try_join(struct cw *c) {
  struct uw *g = c->g, *p = c->p;
  if (c->state != C_PRIV || !g->created || g->ending || !p->created || p->rev < g->rev)
    return false;
  grp_unlink(c);
  c->g = g;
  grp_link(g, c, C_MEMB);
  c->sent = max64(c->sent, p->rev);
  p->owner = NULL;
  uw_cancel(p);
  c->p = NULL; /* its created was sent at p's (the member's answer) */
  return true;
}

static void uw_final(struct uw *u, int err, const ketch_result *res) {
  if (!u->ending) { /* not asked for: every client watch on it ends too */
    u->ending = true;
    if (u->shared) {
      tab_remove(u);
      for (int st = 0; st < 4; st++)
        while (u->list[st])
          cw_ended_by(u->list[st], err, res);
    } else if (u->owner) {
      struct cw *c = u->owner;
      u->owner = NULL;
      c->p = NULL;
      cw_ended_by(c, err, res);
    }
  }
  struct wkc *k = u->k;
  k->n_uw--;
  free(u->key);
  free(u);
  wkc_maybe_free(k);
}

static int64_t max_event_rev(const ketch_watch_result *wr) {
  int64_t m = 0;
  for (size_t i = 0; i < wr->n_events; i++)
    m = max64(m, wr->events[i].kv.mod_revision);
  return m;
}

static void grp_delivery(struct uw *g, const ketch_result *res) {
  const ketch_watch_result *wr = &res->watch;
  if (res->header.raft_term)
    g->hdr = res->header;
  if (wr->created) {
    g->created = true;
    g->rev = max64(g->rev, res->header.revision);
    while (g->list[C_WAIT]) {
      struct cw *c = g->list[C_WAIT];
      grp_unlink(c);
      grp_link(g, c, C_MEMB);
      c->sent = g->rev;
      cw_created(c, &res->header, g->rev);
    }
    bool waiting = false;
    for (struct cw *c = g->list[C_PRIV], *next; c; c = next) {
      next = c->gnext;
      waiting |= !cw_try_join(c);
    }
    if (waiting)
      want_round(g->k);
  } else if (wr->n_events > 0) {
    int64_t top = max_event_rev(wr);
    size_t n = g->n[C_MEMB];
    struct dcache d = {.res = res, .kc = g->k->kc, .min_rev = wr->events[0].kv.mod_revision};
    for (size_t i = 1; i < wr->n_events; i++)
      if (wr->events[i].kv.mod_revision < d.min_rev)
        d.min_rev = wr->events[i].kv.mod_revision;
    for (struct cw *c = g->list[C_MEMB], *next; c; c = next) {
      next = c->gnext;
      if (!cw_deliver(c, &d)) {
        cw_too_slow(c, res);
        continue;
      }
      c->sent = max64(c->sent, top);
    }
    dc_free(&d);
    g->rev = max64(g->rev, top);
    if (n > 1)
      kt_bridge_events_coalescing += n - 1;
  } else { /* a progress notification: every event up to header.revision came */
    g->rev = max64(g->rev, res->header.revision);
    for (struct cw *c = g->list[C_MEMB], *next; c; c = next) {
      next = c->gnext;
      c->sent = max64(c->sent, g->rev);
      cw_progress(c, &res->header);
    }
  }
}

static void priv_delivery(struct uw *p, const ketch_result *res) {
  struct cw *c = p->owner;
  const ketch_watch_result *wr = &res->watch;
  if (res->header.raft_term)
    p->hdr = res->header;
  if (!c)
    return;
  if (wr->created) {
    p->created = true;
    if (!cw_created(c, &res->header, res->header.revision))
      return; /* cancelled before it was created: ended */
  } else if (wr->n_events > 0) {
    int64_t top = max_event_rev(wr);
    if (!cw_send_events(c, res)) {
      cw_too_slow(c, res);
      return;
    }
    p->rev = max64(p->rev, top);
    c->sent = max64(c->sent, p->rev);
  } else {
    p->rev = max64(p->rev, res->header.revision);
    c->sent = max64(c->sent, p->rev);
    cw_progress(c, &res->header);
    cw_try_join(c);
    return; /* a progress frame asks for no round (rounds would not end) */
  }
  if (!cw_try_join(c))
    want_round(p->k);
}

static void on_upstream(void *arg, int err, const ketch_result *res) {
  struct uw *u = arg;
  if (err || res->watch.canceled) {
    uw_final(u, err, res);
    return;
  }
  wnote_header(&res->header);
  if (u->ending)
    return;
  if (u->shared)
    grp_delivery(u, res);
  else
    priv_delivery(u, res);
}

/* A new upstream watch on s's handle; NULL with *err set when it failed. */
static struct uw *uw_start(kt_bridge_wstream *s, const ketch_watch_req *q, bool shared, int *err) {
  struct wkc *k = wkc_get(s->kc);
  struct uw *u = k ? calloc(1, sizeof *u) : NULL;
  if (!u) {
    if (k)
      wkc_maybe_free(k);
    *err = KETCH_ENOMEM;
    return NULL;
  }
  u->k = k;
  u->shared = shared;
  u->prev_kv = q->prev_kv;
  u->rev = q->start_revision > 0 ? q->start_revision - 1 : 0;
  *err = ketch_watch(s->kc, q, on_upstream, u, &u->handle);
  if (*err) {
    free(u);
    wkc_maybe_free(k);
    return NULL;
  }
  k->n_uw++;
  return u;
}

/* The group of q's range on s's handle: found (prev_kv: one with prev_kv
 * serves a client without, which gets them stripped) or made (*made set). */
static struct uw *grp_get(kt_bridge_wstream *s, const ketch_watch_req *q, bool *made, int *err) {
  struct uw *g = grp_find(s->kc, q->key, q->key_len, q->range_end, q->range_end_len, q->prev_kv);
  if (!g && !q->prev_kv)
    g = grp_find(s->kc, q->key, q->key_len, q->range_end, q->range_end_len, true);
  *made = !g;
  if (g)
    return g;
  ketch_watch_req gq = *q;
  gq.start_revision = 0;
  gq.no_put = gq.no_delete = false;
  gq.progress_notify = true;
  gq.fragment = false;
  uint8_t *key = malloc(q->key_len + q->range_end_len + 1);
  if (!key) {
    *err = KETCH_ENOMEM;
    return NULL;
  }
  memcpy(key, q->key, q->key_len);
  if (q->range_end_len)
    memcpy(key + q->key_len, q->range_end, q->range_end_len);
  g = uw_start(s, &gq, true, err);
  if (!g) {
    free(key);
    return NULL;
  }
  g->key = key;
  g->key_len = q->key_len;
  g->end = key + q->key_len;
  g->end_len = q->range_end_len;
  g->hash = grp_hash(s->kc, q->key, q->key_len, q->range_end, q->range_end_len, q->prev_kv);
  if (!tab_insert(g)) {
    uw_cancel(g); /* freed by its last delivery */
    *err = KETCH_ENOMEM;
    return NULL;
  }
  return g;
}

/* ---- the member's check of a watch that joins a group ---- */

/* c passed the member's check: the join protocol as at its create (now: the
 * group may have been created, or passed c's start, meanwhile). */
static void cw_join(struct cw *c) {
  struct uw *g = c->g;
  grp_unlink(c);
  c->g = g;
  if (c->start == 0 && !g->created) {
    grp_link(g, c, C_WAIT);
  } else if (c->start == 0 || (g->created && c->start - 1 >= g->rev)) {
    c->sent = c->start ? c->start - 1 : seen_rev(g);
    grp_link(g, c, C_MEMB);
    cw_created(c, &g->hdr, c->start ? seen_rev(g) : c->sent);
  } else { /* the group passed c's start meanwhile: a private watch from it */
    ketch_watch_req q = {.key = g->key,
                         .key_len = g->key_len,
                         .range_end = g->end_len ? g->end : NULL,
                         .range_end_len = g->end_len,
                         .start_revision = c->start,
                         .prev_kv = c->prev_kv,
                         .no_put = c->no_put,
                         .no_delete = c->no_delete,
                         .progress_notify = true};
    int err;
    struct uw *p = uw_start(c->s, &q, false, &err);
    if (!p) {
      static const ketch_result none = {.message = ""};
      grp_link(g, c, C_CHECK);
      cw_ended_by(c, err, &none);
      return;
    }
    p->owner = c;
    c->p = p;
    c->sent = c->start - 1;
    grp_link(g, c, C_PRIV);
  }
}

static void on_check(void *arg, int err, const ketch_result *res) {
  struct wcheck *x = arg;
  struct cw *c = x->c;
  free(x);
  if (!c)
    return;
  c->check = NULL;
  if (err) { /* refused as the member refuses the watch (the same error) */
    cw_ended_by(c, err, res);
    return;
  }
  wnote_header(&res->header);
  cw_join(c);
}

/* A watch that joins a group asks nothing of the member, so the member is
 * asked whether this caller may watch the range now (token, permission):
 * an AUTH_CHECK of it, answered by kt_node_authorize as a WATCH_CREATE of
 * it would be (the same error), from the auth store alone. Not a Range
 * (etcd's grpc-proxy checks each watch with one): a Range counts every key
 * of its range on the member's state thread, a watch of a large prefix
 * joined by many clients a long scan each. 0 or a ketch error. */
static int cw_check(struct cw *c) {
  struct wcheck *x = malloc(sizeof *x);
  if (!x)
    return KETCH_ENOMEM;
  x->c = c;
  struct uw *g = c->g;
  int err = ketch_auth_check_async(c->s->kc, g->key, g->key_len, g->end_len ? g->end : NULL,
                                   g->end_len, on_check, x);
  if (err) {
    free(x);
    return err;
  }
  c->check = x;
  return 0;
}

/* ---- requests of a Watch stream ---- */

static struct cw *find_watch(kt_bridge_wstream *s, int64_t id) {
  for (struct cw *c = s->watches; c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

static int64_t next_auto_id(kt_bridge_wstream *s) {
  while (find_watch(s, s->next_id))
    s->next_id++;
  return s->next_id++;
}

static void watch_fail(kt_bridge_wstream *s, int err) {
  int st;
  const char *m = kt_bridge_error(err, err == KETCH_ENOMEM ? NULL : ketch_errmsg(s->kc), &st);
  ws_ctrl(s, NULL, -1, true, true, 0, m);
}

static void watch_create(kt_bridge_wstream *s, const Etcdserverpb__WatchCreateRequest *r) {
  static const uint8_t zero = 0;
  ketch_watch_req q;
  memset(&q, 0, sizeof q);
  q.key = r->key.len ? r->key.data : &zero; /* etcd: "\0" is the smallest key */
  q.key_len = r->key.len ? r->key.len : 1;
  q.range_end = r->range_end.data;
  q.range_end_len = r->range_end.len;
  q.start_revision = r->start_revision;
  q.prev_kv = r->prev_kv;
  q.progress_notify = true; /* forwarded to the clients that asked */
  q.fragment = false;       /* the bridge fragments itself (ketch's deliveries have no flag) */
  for (size_t i = 0; i < r->n_filters; i++) {
    if (r->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT)
      q.no_put = true;
    else if (r->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE)
      q.no_delete = true;
  }
  /* mvcc's checks, with its messages. */
  bool from_key = q.range_end_len == 1 && ((const uint8_t *)q.range_end)[0] == 0;
  if (q.range_end_len && !from_key) {
    size_t m = q.key_len < q.range_end_len ? q.key_len : q.range_end_len;
    int cmp = memcmp(q.key, q.range_end, m);
    if (cmp > 0 || (cmp == 0 && q.key_len >= q.range_end_len)) {
      ws_ctrl(s, NULL, -1, true, true, 0, "mvcc: watcher range is empty");
      return;
    }
  }
  if (r->watch_id != 0 && find_watch(s, r->watch_id)) {
    ws_ctrl(s, NULL, -1, true, true, 0, "mvcc: duplicate watch ID provided on the WatchStream");
    return;
  }
  if (s->n_watches >= WS_MAX_WATCHES_PER_STREAM) {
    ws_ctrl(s, NULL, -1, true, true, 0,
            "ketch-grpc: too many watches on one stream (4096); open another stream");
    return;
  }
  struct cw *c = calloc(1, sizeof *c);
  if (!c) {
    watch_fail(s, KETCH_ENOMEM);
    return;
  }
  int err = 0;
  bool made;
  struct uw *g = grp_get(s, &q, &made, &err), *p = NULL;
  if (!g) {
    free(c);
    watch_fail(s, err);
    return;
  }
  /* the join protocol (top of this file) */
  bool wait = made && q.start_revision == 0;
  bool check = !made && (q.start_revision == 0 || (g->created && q.start_revision - 1 >= g->rev));
  if (!wait && !check && !(p = uw_start(s, &q, false, &err))) {
    free(c);
    grp_release(g);
    watch_fail(s, err);
    return;
  }
  c->s = s;
  c->g = g;
  c->id = r->watch_id != 0 ? r->watch_id : next_auto_id(s);
  c->start = q.start_revision;
  c->fragment = r->fragment;
  c->progress_notify = r->progress_notify;
  c->prev_kv = q.prev_kv;
  c->no_put = q.no_put;
  c->no_delete = q.no_delete;
  c->pn_ok = true; /* etcd: progress[id] = true at create */
  c->next = s->watches;
  if (s->watches)
    s->watches->prev = c;
  s->watches = c;
  s->n_watches++;
  if (p) {
    p->owner = c;
    c->p = p;
    c->sent = c->start - 1;
    grp_link(g, c, C_PRIV);
  } else if (wait) {
    grp_link(g, c, C_WAIT);
  } else {
    grp_link(g, c, C_CHECK);
    if ((err = cw_check(c)) != 0) {
      static const ketch_result none = {.message = ""};
      cw_ended_by(c, err, &none);
    }
  }
}

static void watch_progress(kt_bridge_wstream *s) {
  struct wkc *k = wkc_get(s->kc);
  if (!k) {
    s->io->pending(s->arg, +1);
    ws_progress_answer(s, 1, NULL);
    return;
  }
  int li = k->inflight ? 1 : 0;
  if (!s->plisted[li]) {
    s->plisted[li] = true;
    s->plink[li] = k->list[li];
    k->list[li] = s;
    s->refs++;
  }
  if (s->preq[li] < 1024) { /* more unanswered requests than that are one answer */
    s->preq[li]++;
    s->io->pending(s->arg, +1);
  }
  round_start(k);
  wkc_maybe_free(k);
}

/* etcd's progressTicker: every watch with progress_notify that was sent no
 * events since the last tick gets a notification at the cluster's revision
 * (a progress round on the handle brings one to every idle upstream watch:
 * cw_progress); one that was sent events is skipped once. */
static void on_pn_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  kt_bridge_wstream *s = w->data;
  bool any = false;
  for (struct cw *c = s->watches; c; c = c->next) {
    if (!c->progress_notify)
      continue;
    if (c->pn_ok && c->created) {
      c->pn_due = true;
      any = true;
    }
    c->pn_ok = true;
  }
  struct wkc *k = any && ws_live(s) ? wkc_get(s->kc) : NULL;
  if (!k)
    return;
  want_round(k);
  wkc_maybe_free(k);
  if (wsubmitted)
    wsubmitted(s->kc, wsubmitted_arg);
}

kt_bridge_wstream *kt_bridge_watch_open(ketch_client *kc, size_t fragment_bytes,
                                        const struct kt_bridge_stream_io *io, void *arg) {
  kt_bridge_wstream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->kc = kc;
  s->io = io;
  s->arg = arg;
  s->refs = 1;
  s->fragment_bytes = fragment_bytes;
  if (wloop) { /* etcd's ticker: its period plus up to 10% jitter, per stream */
    double t = pn_interval_s * (1 + (double)(random() % 1000) / 10000);
    ev_timer_init(&s->pn_w, on_pn_tick, t, t);
    s->pn_w.data = s;
    ev_timer_start(wloop, &s->pn_w);
  }
  return s;
}

void kt_bridge_watch_recv(kt_bridge_wstream *s, const uint8_t *msg, size_t len) {
  if (!ws_live(s))
    return;
  Etcdserverpb__WatchRequest *r = etcdserverpb__watch_request__unpack(NULL, len, msg);
  if (!r) {
    ws_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
    return;
  }
  switch (r->request_union_case) {
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST:
    watch_create(s, r->create_request);
    break;
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST: {
    struct cw *c = find_watch(s, r->cancel_request->watch_id);
    if (c && !c->created) { /* answered after its created (cw_created), as etcd */
      c->cancel_pending = true;
    } else if (c) { /* answered at once: nothing more comes for this id */
      ws_ctrl(s, &wlast_hdr, c->id, false, true, 0, NULL);
      cw_end(c);
    }
    break;
  }
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST:
    watch_progress(s);
    break;
  default: /* etcd ignores what it does not know */
    break;
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

void kt_bridge_watch_close(kt_bridge_wstream *s) {
  if (!s)
    return;
  s->io = NULL;
  if (wloop)
    ev_timer_stop(wloop, &s->pn_w);
  while (s->watches)
    cw_end(s->watches);
  ws_unref(s);
}
