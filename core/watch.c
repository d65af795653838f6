/* core/watch.c — the watch hub (see watch.h for the design). */
#include "watch.h"

#include <stdlib.h>
#include <string.h>

#define SUB_ALL UINT32_MAX /* (rev, SUB_ALL): every event of rev */

struct wev { /* one copied event; bytes follow */
  int64_t rev;
  uint32_t sub;
  uint8_t type;
  bool has_prev;
  struct kt_kv kv, prev;
};

struct watcher;
struct group {
  struct group *hnext; /* chain of the key-hash map */
  uint64_t khash;
  struct kt_bytes key, end; /* copies, in the same allocation */
  bool single, inf;         /* end.n == 0; end == "\0" (to the last key) */
  uint8_t flags;            /* GF_* */
  bool touched;
  struct group *tnext; /* touched in the current revision */
  struct wev **log;    /* log[head .. head + n) has seqs base .. base + n */
  uint32_t head, n, cap;
  uint64_t base, committed; /* seq just past the last ready event */
  struct watcher *members;  /* synced members (doubly linked) */
  uint32_t refs;            /* watchers (synced or not) using this group */
  uint32_t holds;           /* unsynced watchers replaying history that */
  uint64_t hold_min;        /* need the log from seq hold_min on */
};
#define GF_NOPUT 1
#define GF_NODEL 2
#define GF_PREV 4

struct watcher {
  uint64_t id;
  void *owner;
  struct group *g;
  struct watcher *prev, *next; /* group members or the unsynced list */
  uint64_t pos;                /* next seq in g's log (synced) */
  int64_t last_rev, q_rev;     /* last taken / last queued (rev, sub) */
  uint32_t last_sub, q_sub;
  uint32_t max_pending;
  bool synced, canceled;
  int64_t compact_rev;
  struct wev **buf; /* private catch-up buffer buf[bh .. bh + bn) */
  uint32_t bh, bn, bcap;
  struct pass *pass; /* history scan in progress (unsynced) */
  bool reg;          /* holds g's log from reg_pos (= events after reg_rev) */
  uint64_t reg_pos;
  int64_t reg_rev;
};

struct kt_watch_hub {
  struct kt_mvcc *store;
  struct kt_watch_config cfg;
  int64_t rev;
  uint32_t sub;
  uint64_t next_id;
  struct watcher **ids; /* open addressing, linear probing */
  uint32_t ids_cap, ids_n;
  struct group **kb; /* key-hash buckets */
  uint32_t kb_cap, ngroups;
  struct group **rg; /* range groups sorted by key; rmax[i] = max end of rg[0..i] */
  struct group **rmax;
  uint32_t rn, rcap;
  struct watcher *unsynced;
  struct group *touched;
  struct kt_watch_stats st;
};

static void *xalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  kt_assert(p);
  return p;
}
static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  kt_assert(p);
  return p;
}

static uint64_t hash_bytes(struct kt_bytes b) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < b.n; i++)
    h = (h ^ b.p[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}
static bool bytes_eq(struct kt_bytes a, struct kt_bytes b) {
  return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}
/* Compare two range ends (inf = past every key). */
static int end_cmp(const struct group *a, const struct group *b) {
  if (a->inf || b->inf)
    return (int)a->inf - (int)b->inf;
  return kt_bytes_cmp(a->end, b->end);
}
static bool group_has(const struct group *g, struct kt_bytes k) {
  if (g->single)
    return bytes_eq(g->key, k);
  return kt_bytes_cmp(k, g->key) >= 0 && (g->inf || kt_bytes_cmp(k, g->end) < 0);
}
static bool after(int64_t r, uint32_t s, int64_t r0, uint32_t s0) { /* (r,s) > (r0,s0) */
  if (s0 == SUB_ALL)
    return r > r0;
  return r > r0 || (r == r0 && s > s0);
}

/* ---- id map ---------------------------------------------------------------- */

static uint32_t id_slot(uint64_t id, uint32_t cap) {
  return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}
static void ids_put(struct kt_watch_hub *h, struct watcher *w);
static void ids_grow(struct kt_watch_hub *h) {
  struct watcher **old = h->ids;
  uint32_t oc = h->ids_cap;
  h->ids_cap = oc ? oc * 2 : 64;
  h->ids = calloc(h->ids_cap, sizeof *h->ids);
  kt_assert(h->ids);
  h->ids_n = 0;
  for (uint32_t i = 0; i < oc; i++)
    if (old[i])
      ids_put(h, old[i]);
  free(old);
}
static void ids_put(struct kt_watch_hub *h, struct watcher *w) {
  if ((h->ids_n + 1) * 4 > h->ids_cap * 3)
    ids_grow(h);
  uint32_t i = id_slot(w->id, h->ids_cap);
  while (h->ids[i])
    i = (i + 1) & (h->ids_cap - 1);
  h->ids[i] = w;
  h->ids_n++;
}
static struct watcher *ids_get(const struct kt_watch_hub *h, uint64_t id) {
  if (!h->ids_cap)
    return NULL;
  for (uint32_t i = id_slot(id, h->ids_cap); h->ids[i]; i = (i + 1) & (h->ids_cap - 1))
    if (h->ids[i]->id == id)
      return h->ids[i];
  return NULL;
}
static void ids_del(struct kt_watch_hub *h, uint64_t id) {
  uint32_t m = h->ids_cap - 1, i = id_slot(id, h->ids_cap);
  while (h->ids[i]->id != id)
    i = (i + 1) & m;
  h->ids[i] = NULL;
  h->ids_n--;
  for (uint32_t j = (i + 1) & m; h->ids[j]; j = (j + 1) & m) { /* backward shift */
    uint32_t k = id_slot(h->ids[j]->id, h->ids_cap);
    if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
      h->ids[i] = h->ids[j];
      h->ids[j] = NULL;
      i = j;
    }
  }
}

/* ---- group index ------------------------------------------------------------ */

static void kb_insert(struct kt_watch_hub *h, struct group *g) {
  if (h->ngroups + 1 > h->kb_cap) {
    uint32_t nc = h->kb_cap ? h->kb_cap * 2 : 64;
    struct group **nb = calloc(nc, sizeof *nb);
    kt_assert(nb);
    for (uint32_t i = 0; i < h->kb_cap; i++)
      for (struct group *x = h->kb[i], *nx; x; x = nx) {
        nx = x->hnext;
        x->hnext = nb[x->khash & (nc - 1)];
        nb[x->khash & (nc - 1)] = x;
      }
    free(h->kb);
    h->kb = nb;
    h->kb_cap = nc;
  }
  struct group **b = &h->kb[g->khash & (h->kb_cap - 1)];
  g->hnext = *b;
  *b = g;
  h->ngroups++;
}
static void kb_remove(struct kt_watch_hub *h, struct group *g) {
  struct group **p = &h->kb[g->khash & (h->kb_cap - 1)];
  while (*p != g)
    p = &(*p)->hnext;
  *p = g->hnext;
  h->ngroups--;
}
static uint32_t rg_lower(const struct kt_watch_hub *h, struct kt_bytes k, bool upper) {
  uint32_t lo = 0, hi = h->rn;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = kt_bytes_cmp(h->rg[mid]->key, k);
    if (c < 0 || (upper && c == 0))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
static void rg_fix(struct kt_watch_hub *h, uint32_t from) {
  for (uint32_t i = from; i < h->rn; i++)
    h->rmax[i] = (i == 0 || end_cmp(h->rg[i], h->rmax[i - 1]) > 0) ? h->rg[i] : h->rmax[i - 1];
}
static void rg_insert(struct kt_watch_hub *h, struct group *g) {
  if (h->rn == h->rcap) {
    h->rcap = h->rcap ? h->rcap * 2 : 16;
    h->rg = xrealloc(h->rg, h->rcap * sizeof *h->rg);
    h->rmax = xrealloc(h->rmax, h->rcap * sizeof *h->rmax);
  }
  uint32_t i = rg_lower(h, g->key, true);
  memmove(&h->rg[i + 1], &h->rg[i], (h->rn - i) * sizeof *h->rg);
  h->rg[i] = g;
  h->rn++;
  rg_fix(h, i);
}
static void rg_remove(struct kt_watch_hub *h, struct group *g) {
  uint32_t i = rg_lower(h, g->key, false);
  while (h->rg[i] != g)
    i++;
  memmove(&h->rg[i], &h->rg[i + 1], (h->rn - i - 1) * sizeof *h->rg);
  h->rn--;
  rg_fix(h, i);
}

static struct group *group_get(struct kt_watch_hub *h, const struct kt_watch_opts *o) {
  bool single = o->range_end.n == 0;
  bool inf = o->range_end.n == 1 && o->range_end.p[0] == 0;
  uint8_t flags = (uint8_t)((o->no_put ? GF_NOPUT : 0) | (o->no_delete ? GF_NODEL : 0) |
                            (o->prev_kv ? GF_PREV : 0));
  uint64_t kh = hash_bytes(o->key);
  if (h->kb_cap)
    for (struct group *g = h->kb[kh & (h->kb_cap - 1)]; g; g = g->hnext)
      if (g->khash == kh && g->flags == flags && g->single == single && g->inf == inf &&
          bytes_eq(g->key, o->key) && (single || inf || bytes_eq(g->end, o->range_end)))
        return g;
  size_t en = (single || inf) ? 0 : o->range_end.n;
  struct group *g = calloc(1, sizeof *g + o->key.n + en);
  kt_assert(g);
  uint8_t *p = (uint8_t *)(g + 1);
  memcpy(p, o->key.p, o->key.n);
  g->key = (struct kt_bytes){p, o->key.n};
  if (en)
    memcpy(p + o->key.n, o->range_end.p, en);
  g->end = (struct kt_bytes){p + o->key.n, (uint32_t)en};
  g->single = single;
  g->inf = inf;
  g->flags = flags;
  g->khash = kh;
  kb_insert(h, g);
  if (!single)
    rg_insert(h, g);
  return g;
}

static void log_free_upto(struct group *g, uint64_t upto) { /* free seqs < upto */
  while (g->n && g->base < upto) {
    free(g->log[g->head]);
    g->head++, g->n--, g->base++;
  }
  if (!g->n)
    g->head = 0;
}
static void log_trim(struct group *g, uint64_t upto) { /* ... but what holders need */
  if (g->holds && upto > g->hold_min)
    upto = g->hold_min;
  log_free_upto(g, upto);
}
static void group_unref(struct kt_watch_hub *h, struct group *g) {
  if (--g->refs)
    return;
  if (g->touched) /* keep until revision_done walks the touched list */
    return;
  log_free_upto(g, UINT64_MAX);
  free(g->log);
  kb_remove(h, g);
  if (!g->single)
    rg_remove(h, g);
  free(g);
}

/* ---- events ----------------------------------------------------------------- */

static struct wev *wev_new(int64_t rev, uint32_t sub, uint8_t type, const struct kt_kv *kv,
                           const struct kt_kv *prev) {
  size_t n = kv->key.n + kv->value.n + (prev ? prev->key.n + prev->value.n : 0);
  struct wev *e = xalloc(sizeof *e + n);
  uint8_t *p = (uint8_t *)(e + 1);
  e->rev = rev, e->sub = sub, e->type = type, e->has_prev = prev != NULL;
  e->kv = *kv;
#define CP(dst, src)                                                                               \
  do {                                                                                             \
    if ((src).n)                                                                                   \
      memcpy(p, (src).p, (src).n);                                                                 \
    (dst) = (struct kt_bytes){p, (src).n};                                                         \
    p += (src).n;                                                                                  \
  } while (0)
  CP(e->kv.key, kv->key);
  CP(e->kv.value, kv->value);
  if (prev) {
    e->prev = *prev;
    CP(e->prev.key, prev->key);
    CP(e->prev.value, prev->value);
  } else {
    memset(&e->prev, 0, sizeof e->prev);
  }
#undef CP
  return e;
}

static bool filtered(uint8_t flags, uint8_t type) {
  return (type == KT_EVENT_PUT && (flags & GF_NOPUT)) ||
         (type == KT_EVENT_DELETE && (flags & GF_NODEL));
}

static void group_append(struct kt_watch_hub *h, struct group *g, const struct kt_event *ev) {
  if (filtered(g->flags, ev->type))
    return;
  if (!g->members && !g->holds) /* nobody synced or replaying: history has it */
    return;
  if (g->head + g->n == g->cap) {
    if (g->head) {
      memmove(g->log, g->log + g->head, g->n * sizeof *g->log);
      g->head = 0;
    } else {
      g->cap = g->cap ? g->cap * 2 : 4;
      g->log = xrealloc(g->log, g->cap * sizeof *g->log);
    }
  }
  g->log[g->head + g->n++] = wev_new(ev->kv.mod_revision, h->sub, ev->type, &ev->kv,
                                     (g->flags & GF_PREV) && ev->has_prev_kv ? &ev->prev_kv : NULL);
  if (!g->touched) {
    g->touched = true;
    g->tnext = h->touched;
    h->touched = g;
  }
}

/* ---- lists ------------------------------------------------------------------ */

static void list_add(struct watcher **head, struct watcher *w) {
  w->prev = NULL;
  w->next = *head;
  if (*head)
    (*head)->prev = w;
  *head = w;
}
static void list_del(struct watcher **head, struct watcher *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    *head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  w->prev = w->next = NULL;
}

/* ---- public ----------------------------------------------------------------- */

struct kt_watch_hub *kt_watch_hub_new(struct kt_mvcc *store, const struct kt_watch_config *cfg) {
  struct kt_watch_hub *h = calloc(1, sizeof *h);
  kt_assert(h);
  h->store = store;
  if (cfg)
    h->cfg = *cfg;
  h->rev = kt_mvcc_revision(store);
  h->next_id = 1;
  return h;
}

static void pass_free(struct watcher *w);
static void buf_clear(struct watcher *w) {
  pass_free(w);
  for (uint32_t i = 0; i < w->bn; i++)
    free(w->buf[w->bh + i]);
  free(w->buf);
  w->buf = NULL;
  w->bh = w->bn = w->bcap = 0;
}

void kt_watch_hub_free(struct kt_watch_hub *h) {
  if (!h)
    return;
  for (uint32_t i = 0; i < h->ids_cap; i++)
    if (h->ids[i]) {
      buf_clear(h->ids[i]);
      free(h->ids[i]);
    }
  for (uint32_t i = 0; i < h->kb_cap; i++)
    for (struct group *g = h->kb[i], *n; g; g = n) {
      n = g->hnext;
      log_free_upto(g, UINT64_MAX); /* all of it: log_trim would keep what holders need */
      free(g->log);
      free(g);
    }
  free(h->ids);
  free(h->kb);
  free(h->rg);
  free(h->rmax);
  free(h);
}

int64_t kt_watch_revision(const struct kt_watch_hub *h) { return h->rev; }

int kt_watch_create(struct kt_watch_hub *h, const struct kt_watch_opts *o, void *owner,
                    uint64_t *id, struct kt_err *e) {
  if (o->key.n == 0)
    return kt_err_set(e, KT_EKEYEMPTY, "%s", kt_strerror(KT_EKEYEMPTY));
  bool inf = o->range_end.n == 1 && o->range_end.p[0] == 0;
  if (o->range_end.n && !inf && kt_bytes_cmp(o->range_end, o->key) <= 0)
    return kt_err_set(e, KT_EINVAL, "watch: range_end <= key");
  if (o->start_revision > h->rev + 1 || o->start_revision < 0)
    return kt_err_set(e, KT_EFUTUREREV, "%s", kt_strerror(KT_EFUTUREREV));
  struct watcher *w = calloc(1, sizeof *w);
  kt_assert(w);
  w->id = h->next_id++;
  w->owner = owner;
  w->max_pending = o->max_pending ? o->max_pending : 1024;
  w->g = group_get(h, o);
  w->g->refs++;
  int64_t start = o->start_revision ? o->start_revision : h->rev + 1;
  w->last_rev = w->q_rev = start - 1;
  w->last_sub = w->q_sub = SUB_ALL;
  if (start == h->rev + 1) {
    w->synced = true;
    w->pos = w->g->base + w->g->n;
    list_add(&w->g->members, w);
  } else {
    list_add(&h->unsynced, w);
  }
  ids_put(h, w);
  *id = w->id;
  return 0;
}

static void hold_release(struct kt_watch_hub *h, struct watcher *w);

static void watcher_free(struct kt_watch_hub *h, struct watcher *w) {
  hold_release(h, w);
  if (w->synced)
    list_del(&w->g->members, w);
  else if (!w->canceled)
    list_del(&h->unsynced, w);
  ids_del(h, w->id);
  buf_clear(w);
  group_unref(h, w->g);
  free(w);
}

bool kt_watch_cancel(struct kt_watch_hub *h, uint64_t id) {
  struct watcher *w = ids_get(h, id);
  if (!w)
    return false;
  watcher_free(h, w);
  return true;
}

void kt_watch_publish(struct kt_watch_hub *h, const struct kt_event *ev) {
  struct kt_bytes k = ev->kv.key;
  if (h->ngroups) { /* single-key groups: the key's hash finds its own */
    uint64_t kh = hash_bytes(k);
    for (struct group *g = h->kb[kh & (h->kb_cap - 1)]; g; g = g->hnext)
      if (g->single && g->khash == kh) {
        h->st.publish_visits++;
        if (bytes_eq(g->key, k))
          group_append(h, g, ev);
      }
  }
  if (h->rn) {
    uint32_t i = rg_lower(h, k, true); /* rg[0 .. i) have key <= k */
    while (i-- > 0) {
      if (!h->rmax[i]->inf && kt_bytes_cmp(h->rmax[i]->end, k) <= 0)
        break;
      h->st.publish_visits++;
      if (group_has(h->rg[i], k))
        group_append(h, h->rg[i], ev);
    }
  }
  h->sub++;
}

static uint64_t pending(const struct watcher *w) {
  return w->bn + (w->synced ? w->g->committed - w->pos : 0);
}

static void move_aside(struct kt_watch_hub *h, struct watcher *w) {
  list_del(&w->g->members, w);
  w->synced = false;
  if (w->bn) { /* catch_up queues whole revisions */
    w->q_rev = w->buf[w->bh + w->bn - 1]->rev, w->q_sub = SUB_ALL;
  } else {
    w->q_rev = w->last_rev, w->q_sub = w->last_sub;
    /* the log holds whole revisions: if nothing of last_rev waits, it was
     * taken whole (resuming at it would cancel a watcher that lost nothing
     * once last_rev is compacted) */
    struct group *g = w->g;
    if (w->pos >= g->committed || g->log[g->head + (w->pos - g->base)]->rev != w->last_rev)
      w->q_sub = SUB_ALL;
  }
  list_add(&h->unsynced, w);
  h->st.moved_aside++;
}

void kt_watch_revision_done(struct kt_watch_hub *h, int64_t rev) {
  h->rev = rev;
  h->sub = 0;
  struct group *g = h->touched, *next;
  h->touched = NULL;
  for (; g; g = next) {
    next = g->tnext;
    g->touched = false;
    g->tnext = NULL;
    if (!g->refs) {
      g->refs = 1;
      group_unref(h, g);
      continue;
    }
    g->committed = g->base + g->n;
    uint64_t minpos = g->committed; /* log_trim keeps what holders need */
    for (struct watcher *w = g->members, *wn; w; w = wn) {
      wn = w->next;
      if (pending(w) > w->max_pending) {
        move_aside(h, w);
        continue;
      }
      if (w->pos < minpos)
        minpos = w->pos;
      if (h->cfg.on_ready && pending(w))
        h->cfg.on_ready(h->cfg.arg, w->owner, w->id);
    }
    log_trim(g, minpos);
  }
}

/* ---- catch-up from history ------------------------------------------------------ */

struct hrec {
  struct kt_kvrev r;
  bool has_prev;
  struct kt_kvrev prev;
};

/* A history pass of one unsynced watcher, done in slices so that no step
 * scans more than `budget` keys: the range is read at revision `target`
 * (fixed when the pass starts) key by key from a cursor; records after the
 * watcher's queued position are copied into the pass; once the cursor is
 * past the range they are sorted by revision and handed to the watcher's
 * buffer as room allows. If more than PASS_CAP records pile up, the target
 * is lowered to keep the oldest whole revisions (a later pass reads the
 * rest), so a pass holds O(PASS_CAP) records whatever the history size.
 * Compaction between slices is caught by the check at each step. */
#define PASS_CAP 65536
struct pass {
  int64_t target;
  struct kt_buf ckey; /* cursor: the next key to read */
  bool scanned;
  struct hrec *v;
  size_t n, cap, d; /* v[d..n) still to hand over once scanned */
  struct kt_arena a;
};

static void pass_free(struct watcher *w) {
  if (!w->pass)
    return;
  free(w->pass->v);
  kt_buf_free(&w->pass->ckey);
  kt_arena_free(&w->pass->a);
  free(w->pass);
  w->pass = NULL;
}

struct scan {
  const struct group *g;
  const struct watcher *w;
  struct pass *p;
  struct kt_kvrev last; /* previous record of the current key */
  bool have_last;
};

static struct kt_kvrev rev_copy(struct kt_arena *a, const struct kt_kvrev *r) {
  struct kt_kvrev c = *r;
  c.key.p = kt_arena_dup(a, r->key.p, r->key.n);
  c.value.p = r->value.n ? kt_arena_dup(a, r->value.p, r->value.n) : NULL;
  return c;
}

static int hrec_cmp(const void *a, const void *b) {
  const struct kt_kvrev *x = &((const struct hrec *)a)->r, *y = &((const struct hrec *)b)->r;
  if (x->mod_revision != y->mod_revision)
    return x->mod_revision < y->mod_revision ? -1 : 1;
  return x->mod_sub < y->mod_sub ? -1 : x->mod_sub > y->mod_sub;
}

/* Keep the oldest whole revisions, about half the cap; lower the target. */
static void pass_shrink(struct pass *p) {
  qsort(p->v, p->n, sizeof *p->v, hrec_cmp);
  size_t keep = PASS_CAP / 2;
  int64_t cut = p->v[keep].r.mod_revision;
  if (cut == p->v[0].r.mod_revision) { /* one huge revision: keep it whole */
    while (keep < p->n && p->v[keep].r.mod_revision == cut)
      keep++;
    if (keep == p->n)
      return;
    cut = p->v[keep].r.mod_revision;
  } else {
    while (keep > 0 && p->v[keep - 1].r.mod_revision == cut)
      keep--;
  }
  p->n = keep;
  p->target = cut - 1;
}

static int scan_fn(void *arg, const struct kt_kvrev *rec) {
  struct scan *s = arg;
  struct pass *p = s->p;
  if (!group_has(s->g, rec->key)) {
    if (s->g->single || (!s->g->inf && kt_bytes_cmp(rec->key, s->g->end) >= 0))
      return 1; /* past the range */
    return 0;
  }
  if (s->have_last && !bytes_eq(s->last.key, rec->key))
    s->have_last = false;
  uint8_t type = rec->tombstone ? KT_EVENT_DELETE : KT_EVENT_PUT;
  if (rec->mod_revision <= p->target &&
      after(rec->mod_revision, (uint32_t)rec->mod_sub, s->w->q_rev, s->w->q_sub) &&
      !filtered(s->g->flags, type)) {
    if (p->n == p->cap) {
      p->cap = p->cap ? p->cap * 2 : 64;
      p->v = xrealloc(p->v, p->cap * sizeof *p->v);
    }
    struct hrec *x = &p->v[p->n++];
    x->r = rev_copy(&p->a, rec);
    x->has_prev = s->have_last && !s->last.tombstone && (s->g->flags & GF_PREV);
    if (x->has_prev)
      x->prev = rev_copy(&p->a, &s->last);
    if (p->n > PASS_CAP)
      pass_shrink(p);
  }
  s->last = *rec;
  s->have_last = true;
  return 0;
}

static void buf_push(struct watcher *w, struct wev *e) {
  if (w->bh + w->bn == w->bcap) {
    if (w->bh) {
      memmove(w->buf, w->buf + w->bh, w->bn * sizeof *w->buf);
      w->bh = 0;
    } else {
      w->bcap = w->bcap ? w->bcap * 2 : 16;
      w->buf = xrealloc(w->buf, w->bcap * sizeof *w->buf);
    }
  }
  w->buf[w->bh + w->bn++] = e;
}

static struct kt_kv kv_of(const struct kt_kvrev *r) {
  return (struct kt_kv){r->key,          r->value,   r->create_revision,
                        r->mod_revision, r->version, r->lease};
}

#define HOLD_CAP 65536 /* events a replaying watcher may hold in its group's log */

/* w stops holding its group's log; the group's hold_min is recomputed from
 * the other holders (O(unsynced watchers), only when a hold ends). */
static void hold_release(struct kt_watch_hub *h, struct watcher *w) {
  if (!w->reg)
    return;
  struct group *g = w->g;
  w->reg = false;
  g->holds--;
  g->hold_min = UINT64_MAX;
  for (struct watcher *x = h->unsynced; x && g->holds; x = x->next)
    if (x->g == g && x->reg && x->reg_pos < g->hold_min)
      g->hold_min = x->reg_pos;
}

/* One slice of w's history pass: at most `budget` keys read or events
 * handed over. Returns the work done (>= 1 while the pass goes on). */
static size_t catch_up(struct kt_watch_hub *h, struct watcher *w, size_t budget) {
  int64_t crev = kt_mvcc_compact_revision(h->store);
  int64_t need = w->q_sub == SUB_ALL ? w->q_rev + 1 : w->q_rev;
  /* As etcd: revision crev stays readable, so a watcher whose next revision
   * is crev (a start at the compaction revision) replays what the store
   * keeps of it (compaction dropped its tombstones, as etcd's does); one
   * that took part of crev already cannot be resumed inside it. */
  if (crev > 0 && (need < crev || (need == crev && w->q_sub != SUB_ALL))) {
    hold_release(h, w);
    list_del(&h->unsynced, w);
    w->canceled = true;
    w->compact_rev = crev;
    buf_clear(w);
    if (h->cfg.on_ready)
      h->cfg.on_ready(h->cfg.arg, w->owner, w->id);
    return 1;
  }
  uint32_t room = w->bn < w->max_pending ? w->max_pending - w->bn : 0;
  if (!room)
    return 0; /* the consumer has not taken what it has */
  if (budget == 0)
    budget = 1;
  size_t work = 0, pushed = 0;
  struct group *g = w->g;
  if (w->reg && g->committed - w->reg_pos > HOLD_CAP)
    hold_release(h, w); /* too slow: the log is not held for it any longer */
  if (!w->pass) {
    if (h->rev <= w->q_rev)
      goto synced;
    if (!w->reg) { /* the log keeps what comes after this pass's target */
      w->reg = true;
      w->reg_pos = g->base + g->n;
      w->reg_rev = h->rev;
      g->hold_min = g->holds++ ? KT_MIN(g->hold_min, w->reg_pos) : w->reg_pos;
    }
    w->pass = calloc(1, sizeof *w->pass);
    kt_assert(w->pass);
    w->pass->target = w->reg_rev;
    kt_buf_append(&w->pass->ckey, w->g->key.p, w->g->key.n);
  }
  struct pass *p = w->pass;
  if (!p->scanned) {
    struct kt_arena a = {0};
    struct scan s = {.g = w->g, .w = w, .p = p};
    struct kt_mvcc_cursor cur = {.key = {p->ckey.p, (uint32_t)p->ckey.len}, .started = true};
    int rc = kt_mvcc_iter(h->store, p->target, &cur, budget, &a, scan_fn, &s);
    if (rc == 1) {
      kt_buf_reset(&p->ckey);
      kt_buf_append(&p->ckey, cur.key.p, cur.key.n);
    } else {
      p->scanned = true;
      if (p->n)
        qsort(p->v, p->n, sizeof *p->v, hrec_cmp);
    }
    kt_arena_free(&a);
    work += budget; /* keys read, counted as the slice's whole budget */
  }
  if (p->scanned) {
    /* a revision goes to the buffer whole (it may pass `room`): the node
     * keeps a revision in one message unless the client allows fragments */
    while (p->d < p->n && (pushed < room || (pushed && p->v[p->d].r.mod_revision == w->q_rev))) {
      struct hrec *x = &p->v[p->d++];
      struct kt_kv kv = kv_of(&x->r), pv;
      if (x->r.tombstone)
        kv = (struct kt_kv){.key = x->r.key, .mod_revision = x->r.mod_revision};
      if (x->has_prev)
        pv = kv_of(&x->prev);
      buf_push(w, wev_new(x->r.mod_revision, (uint32_t)x->r.mod_sub,
                          x->r.tombstone ? KT_EVENT_DELETE : KT_EVENT_PUT, &kv,
                          x->has_prev ? &pv : NULL));
      w->q_rev = x->r.mod_revision;
      w->q_sub = (uint32_t)x->r.mod_sub;
      pushed++;
    }
    if (pushed) /* it stops at a revision's end: q_rev is queued whole */
      w->q_sub = SUB_ALL;
    if (p->d == p->n) { /* everything up to target is queued */
      w->q_rev = p->target;
      w->q_sub = SUB_ALL;
      pass_free(w);
      if (w->reg && w->q_rev == w->reg_rev) { /* the held log has the rest */
        uint64_t pos = w->reg_pos;
        hold_release(h, w);
        list_del(&h->unsynced, w);
        w->synced = true;
        w->pos = pos;
        list_add(&g->members, w);
        if (h->cfg.on_ready)
          h->cfg.on_ready(h->cfg.arg, w->owner, w->id);
        return work + pushed + 1;
      }
      if (h->rev == w->q_rev)
        goto synced_notify;
    }
  }
  if (pushed && h->cfg.on_ready)
    h->cfg.on_ready(h->cfg.arg, w->owner, w->id);
  return work + pushed;
synced_notify:
  if (pushed && h->cfg.on_ready)
    h->cfg.on_ready(h->cfg.arg, w->owner, w->id);
synced: /* caught up to h->rev: join the group at its tail */
  list_del(&h->unsynced, w);
  w->synced = true;
  w->pos = w->g->base + w->g->n;
  w->g->committed = w->pos;
  list_add(&w->g->members, w);
  return work + pushed + 1;
}

void kt_watch_hub_set_store(struct kt_watch_hub *h, struct kt_mvcc *store) {
  kt_assert(!h->touched);
  for (uint32_t i = 0; i < h->ids_cap; i++) {
    struct watcher *w = h->ids[i];
    if (!w || w->canceled)
      continue;
    if (w->synced)
      move_aside(h, w); /* resumes after what it has, from the new history */
    pass_free(w);
    hold_release(h, w);
  }
  h->store = store;
  h->rev = kt_mvcc_revision(store);
  h->sub = 0;
}

bool kt_watch_step(struct kt_watch_hub *h, size_t budget) {
  kt_assert(!h->touched); /* not between a publish and its revision_done */
  size_t used = 0;
  struct watcher *w = h->unsynced, *next;
  size_t progress = 0;
  for (; w && used < budget; w = next) {
    next = w->next;
    size_t k = catch_up(h, w, budget - used);
    used += k;
    progress += k;
  }
  /* rotate so the next step starts where this one stopped */
  if (w && w != h->unsynced) {
    struct watcher *last = w;
    while (last->next)
      last = last->next;
    struct watcher *first = h->unsynced;
    w->prev->next = NULL;
    w->prev = NULL;
    last->next = first;
    first->prev = last;
    h->unsynced = w;
  }
  return progress > 0 && h->unsynced != NULL;
}

static void copy_out(struct kt_event *o, const struct wev *e, struct kt_arena *a) {
  memset(o, 0, sizeof *o);
  o->type = e->type;
  o->kv = e->kv;
  o->kv.key.p = kt_arena_dup(a, e->kv.key.p, e->kv.key.n);
  o->kv.value.p = kt_arena_dup(a, e->kv.value.p, e->kv.value.n);
  o->has_prev_kv = e->has_prev;
  if (e->has_prev) {
    o->prev_kv = e->prev;
    o->prev_kv.key.p = kt_arena_dup(a, e->prev.key.p, e->prev.key.n);
    o->prev_kv.value.p = kt_arena_dup(a, e->prev.value.p, e->prev.value.n);
  }
}

int kt_watch_take(struct kt_watch_hub *h, uint64_t id, struct kt_event *out, int max,
                  struct kt_arena *a, int64_t *compact_rev) {
  struct watcher *w = ids_get(h, id);
  if (!w)
    return -KT_ENOTFOUND;
  if (w->canceled) {
    if (compact_rev)
      *compact_rev = w->compact_rev;
    watcher_free(h, w);
    return -KT_ECOMPACTED;
  }
  int n = 0;
  while (n < max && w->bn) {
    struct wev *e = w->buf[w->bh];
    copy_out(&out[n++], e, a);
    w->last_rev = e->rev, w->last_sub = e->sub;
    free(e);
    w->bh++, w->bn--;
  }
  if (!w->bn) {
    free(w->buf);
    w->buf = NULL;
    w->bh = w->bcap = 0;
  }
  if (w->synced) {
    struct group *g = w->g;
    while (n < max && w->pos < g->committed) {
      struct wev *e = g->log[g->head + (w->pos - g->base)];
      copy_out(&out[n++], e, a);
      w->last_rev = e->rev, w->last_sub = e->sub;
      w->pos++;
    }
    if (g->members == w && !w->next) /* sole member: free what it took */
      log_trim(g, w->pos);
  }
  return n;
}

bool kt_watch_run(const struct kt_watch_hub *h, uint64_t id, const void **log, uint64_t *from,
                  uint64_t *to) {
  const struct watcher *w = ids_get(h, id);
  if (!w || w->canceled || !w->synced || w->bn)
    return false;
  *log = w->g;
  *from = w->pos;
  *to = w->g->committed;
  return true;
}

void kt_watch_advance(struct kt_watch_hub *h, uint64_t id, uint64_t upto) {
  struct watcher *w = ids_get(h, id);
  kt_assert(w && w->synced && !w->bn && upto > w->pos && upto <= w->g->committed);
  struct group *g = w->g;
  const struct wev *e = g->log[g->head + (upto - 1 - g->base)];
  w->last_rev = e->rev, w->last_sub = e->sub;
  w->pos = upto;
  if (g->members == w && !w->next) /* sole member: free what it took */
    log_trim(g, w->pos);
}

int64_t kt_watch_next_rev(const struct kt_watch_hub *h, uint64_t id) {
  const struct watcher *w = ids_get(h, id);
  if (!w || w->canceled)
    return 0;
  if (w->bn)
    return w->buf[w->bh]->rev;
  if (w->synced && w->pos < w->g->committed)
    return w->g->log[w->g->head + (w->pos - w->g->base)]->rev;
  return 0;
}

bool kt_watch_idle(const struct kt_watch_hub *h, uint64_t id) {
  const struct watcher *w = ids_get(h, id);
  return w && w->synced && !pending(w);
}

void kt_watch_progress_all(struct kt_watch_hub *h,
                           void (*fn)(void *arg, void *owner, uint64_t id, int64_t rev),
                           void *arg) {
  for (uint32_t i = 0; i < h->ids_cap; i++) {
    struct watcher *w = h->ids[i];
    if (w && w->synced && !pending(w))
      fn(arg, w->owner, w->id, h->rev);
  }
}

void kt_watch_stats(const struct kt_watch_hub *h, struct kt_watch_stats *out) {
  *out = h->st;
  out->watchers = h->ids_n;
  out->groups = h->ngroups;
  out->unsynced = 0;
  for (const struct watcher *w = h->unsynced; w; w = w->next)
    out->unsynced++;
  out->buffered_events = 0;
  for (uint32_t i = 0; i < h->kb_cap; i++)
    for (const struct group *g = h->kb[i]; g; g = g->hnext)
      out->buffered_events += g->n;
  for (uint32_t i = 0; i < h->ids_cap; i++)
    if (h->ids[i])
      out->buffered_events += h->ids[i]->bn;
}
