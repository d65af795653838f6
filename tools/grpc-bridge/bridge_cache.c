/* tools/grpc-bridge/bridge_cache.c — ketch-grpc's serializable range cache
 * (--cache-size N entries, default 2048, 0 disables; --cache-max-bytes;
 * --cache-max-staleness, default 100ms).
 *
 * Owns: the entries (answers of serializable Range requests), their LRU
 * order, a hash of their request bytes, an interval index of their keys (a
 * treap ordered by range start, each node knowing the largest range end
 * below it), ONE ketch_watch over the whole key space on the bridge's
 * default libketch handle, and a probe timer. Everything runs on the
 * bridge's loop; nothing here blocks.
 *
 * Data flow
 *   Range on the default handle (callers with no token and no client
 *   certificate identity; per-user handles never use the cache):
 *     kt_bridge_cache_get(the request's protobuf bytes, after --namespace)
 *       -> an entry stored for exactly these bytes that the rules below let
 *       be served -> the answer is a fresh header + the stored response body,
 *       done() at once: no member request (a hit). Only serializable
 *       requests are ever stored, so a linearizable one never matches.
 *     Otherwise bridge_kv.c decodes and sends the request as before (a
 *       miss); kt_bridge_cache_miss() makes a fill ticket (request bytes, key
 *       interval, revision, time sent) for a serializable one, and the
 *       member's answer goes through kt_bridge_cache_fill(), which stores it
 *       when the rules allow and frames the client's answer.
 *   The invalidation watch (started by the first serializable read, stopped
 *     after IDLE_S without one): each event at revision e on key k drops the
 *     entries whose interval holds k that were read before e. W: every event
 *     up to W has been delivered (the created header, each delivery's last
 *     event, progress notifications).
 *   Probes, every max-staleness/2 while the cache is in use: a serializable
 *     count-only range of one key on the default handle, at the lowest
 *     explicit revision cached (0: none), sent at time t, answered at
 *     revision Rx.
 *   S: the highest header revision the bridge has shown anyone — every
 *     answer to any client, unary or stream message, on any handle
 *     (kt_bridge_cache_seen), and every probe answer.
 *
 * Rules (an entry was read at revision Rr, its request sent at time tf)
 *   - stored only while the watch is live and only if Rr >= W: the events
 *     after Rr are all still to come, and will be applied to it.
 *   - an event at e drops the entries holding its key with Rr < e; requests
 *     at an explicit revision are not in the index (their data never
 *     changes): only compaction removes them.
 *   - served only while the watch is live and cur = max(Rr, W) >= S; the
 *     answer's header revision is cur.
 *   - revision 0: only if now - max(tf, fresh) <= max-staleness, fresh the
 *     send time of the last probe answered while the watch was live.
 *   - explicit revision X: only if X is at or above the compaction floor
 *     (raised by Compact through this bridge before it is sent, by a
 *     compacted answer and by a compacted probe), and now - tf <=
 *     max-staleness or a probe at a revision <= X sent less than
 *     max-staleness ago succeeded.
 *   - the watch canceled or failed, a probe refused (other than compacted,
 *     unavailable, timed out), an Auth call through the bridge: every entry
 *     is dropped (a canceled watch is opened again RETRY_S later).
 *
 * Why one watch over the whole key space rather than one per cached
 * interval: W must follow the store's revision for cur >= S to hold at all
 * (a watch on one key learns nothing while other keys change, so its W would
 * stay behind every answer showing a newer revision and nothing could be
 * served after any unrelated write); and one watch costs the member one
 * watcher whatever the number of entries, the bridge one index lookup per
 * event. Its price: while the cache is in use every write of the cluster
 * (its key and value) reaches the bridge.
 *
 * What a hit promises, and why
 *   (a) An honest header: the data is what a read at revision cur returns.
 *       Revision 0: no event in (Rr, W] touched the interval (it would have
 *       dropped the entry), so what was read at Rr is still the answer at W.
 *       An explicit revision's data never changes until compacted.
 *   (b) Never older than anything a client already saw through this bridge:
 *       whatever it saw had a revision <= S, and a hit is current at
 *       cur >= S. S is the bridge's, not the connection's: a put answered to
 *       one client is seen by every client's next read through the bridge
 *       (stronger than per client, and what a script running etcdctl twice
 *       needs). The price: right after a write through the bridge, reads
 *       miss until its event arrived (the watch and the put's answer come on
 *       the same connection, so about at once).
 *   (c) Staleness: a hit answers what the member the default handle reads
 *       from had at most max-staleness earlier (measured from request send
 *       times, so the bound holds whatever the network delay). A write that
 *       member applied before a probe was sent has a revision <= Rx <= S; a
 *       hit needs cur >= S, so the entry was read after the write or W
 *       passed the write and its event dropped the entry. A fresh entry's
 *       own send time works the same way. Compaction likewise: a probe at m
 *       that succeeds shows that no revision >= m was compacted when it was
 *       sent; compaction through this bridge is honoured at once.
 *   (d) When the watch breaks (the cache is dropped), lags (W < S: nothing
 *       is served until it catches up) or the member stops answering probes
 *       (nothing is served once max-staleness has passed), reads go to the
 *       member, as without a cache.
 *   Not promised: anything about members other than the one the default
 *   handle reads from (a serializable read never promised that); auth
 *   changes made elsewhere reach the cache as the member cancelling its
 *   watch or refusing a probe, so within max-staleness plus a probe.
 *
 * Several event loops (--loops, bridge.h "Event loops"): each loop has its
 * own cache (the state above is KT_LOOP_LOCAL: entries, watch, probes, W,
 * its default handle), filled and served only by that loop's connections.
 * What must hold across loops is shared as process-wide atomic registers
 * that any loop raises and every loop reads: S (promise (b) spans the
 * bridge, not the loop: a put answered on one loop keeps every loop's cache
 * from serving anything older), the compaction floor raised by a Compact
 * through the bridge, and the generation of Auth calls through the bridge
 * (a loop that sees it changed drops its entries before its next lookup).
 * The figures for /metrics are atomics written by their loop and summed
 * over the loops when scraped.
 *
 * Invariants: an entry is in the hash and the LRU list, and in the treap iff
 * its request revision is 0; n <= max_entries and bytes <= max_bytes after
 * every insertion; a fill ticket belongs to its miss until
 * kt_bridge_cache_fill / kt_bridge_cache_fill_failed consumes it. */
#include "bridge.h"

#include <ev.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/base.h"
#include "../grpc/grpc_client.h"
#include "rpc.pb-c.h"

#define IDLE_S 10.0 /* no serializable read this long: watch and probes stop */
#define RETRY_S 1.0 /* a failed watch is opened again after this */

struct centry {
  uint8_t *req; /* the request's bytes: the key of the cache */
  size_t req_len;
  uint64_t hash;
  uint8_t *lo, *hi; /* the interval [lo, hi) read (hi_inf: to the end) */
  size_t lo_len, hi_len;
  bool hi_inf, in_tree;
  int64_t revision; /* the request's (0: the current one) */
  int64_t read_rev; /* Rr: the answer's header revision */
  double fill_t;    /* tf: when the request was sent (monotonic s) */
  uint64_t gen;     /* C.gen when the ticket was made */
  uint64_t cluster_id, member_id, raft_term;
  uint8_t *body; /* the RangeResponse without its header */
  size_t body_len;
  size_t bytes; /* accounted */
  struct centry *hnext, *prev, *next;
  struct centry *left, *right, *maxe; /* treap; maxe: largest hi below */
  uint32_t prio;
};

struct cache_state {
  bool on;
  const uint8_t *hit_answer; /* the hit being answered (its revision is already in S) */
  size_t max_entries, max_bytes;
  double max_stale_s;
  struct ev_loop *loop;
  ketch_client *kc;
  bool *submitted;
  ev_timer tick;
  struct centry **buckets;
  size_t n_buckets;
  struct centry *head, *tail; /* LRU: head most recent */
  _Atomic size_t n, bytes;    /* atomics: read by the scrape */
  struct centry *root;
  uint32_t rng;
  uint64_t gen;
  /* the watch */
  bool live, watching;
  uint64_t wseq, wid;
  int64_t W;
  double retry_at;
  /* probes (S, what clients were shown, is shared_S below) */
  bool probing;
  uint64_t pseq;
  double probe_t, fresh_t, ok_t;
  int64_t probe_rev, ok_rev;
  int64_t floor; /* compaction floor: revisions below it are gone */
  double last_use;
  /* metrics (atomics: read by the scrape on loop 0) */
  _Atomic uint64_t hits, misses, invalidated, stale;
  /* a scratch list of entries an event touches */
  struct centry **hit;
  size_t n_hit, cap_hit;
  bool hit_oom;
  uint64_t shared_gen; /* the Auth generation last applied here */
};

static KT_LOOP_LOCAL struct cache_state C;

/* The loops' caches, for /metrics (slots taken in order at setup). */
static struct cache_state *_Atomic caches[KT_BRIDGE_MAX_LOOPS];
static _Atomic int n_caches;

/* Shared by the loops (see the top comment): S, the floor raised by a
 * Compact through the bridge, the generation of Auth calls. */
static _Atomic int64_t shared_S, shared_floor;
static _Atomic uint64_t shared_gen;

static void atomic_raise(_Atomic int64_t *x, int64_t v) {
  int64_t cur = atomic_load(x);
  while (v > cur && !atomic_compare_exchange_weak(x, &cur, v)) {
  }
}

static double cache_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t cache_hash(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return h ^ (h >> 29);
}

static int cache_bcmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  size_t n = an < bn ? an : bn;
  int c = n ? memcmp(a, b, n) : 0;
  return c ? c : (an > bn) - (an < bn);
}

/* ---- the interval index: a treap by (lo, address), max hi per subtree ---- */

static int tree_hi_cmp(const struct centry *a, const struct centry *b) {
  if (a->hi_inf || b->hi_inf)
    return (int)a->hi_inf - (int)b->hi_inf;
  return cache_bcmp(a->hi, a->hi_len, b->hi, b->hi_len);
}

static int tree_node_cmp(const struct centry *a, const struct centry *b) {
  int c = cache_bcmp(a->lo, a->lo_len, b->lo, b->lo_len);
  if (c)
    return c;
  return (a > b) - (a < b);
}

static void tree_fix(struct centry *t) {
  t->maxe = t;
  if (t->left && tree_hi_cmp(t->left->maxe, t->maxe) > 0)
    t->maxe = t->left->maxe;
  if (t->right && tree_hi_cmp(t->right->maxe, t->maxe) > 0)
    t->maxe = t->right->maxe;
}

static struct centry *tree_insert(struct centry *t, struct centry *e) {
  if (!t) {
    e->left = e->right = NULL;
    tree_fix(e);
    return e;
  }
  if (tree_node_cmp(e, t) < 0) {
    t->left = tree_insert(t->left, e);
    if (t->left->prio > t->prio) { /* rotate right */
      struct centry *l = t->left;
      t->left = l->right;
      l->right = t;
      tree_fix(t);
      tree_fix(l);
      return l;
    }
  } else {
    t->right = tree_insert(t->right, e);
    if (t->right->prio > t->prio) { /* rotate left */
      struct centry *r = t->right;
      t->right = r->left;
      r->left = t;
      tree_fix(t);
      tree_fix(r);
      return r;
    }
  }
  tree_fix(t);
  return t;
}

static struct centry *tree_merge(struct centry *a, struct centry *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  if (a->prio > b->prio) {
    a->right = tree_merge(a->right, b);
    tree_fix(a);
    return a;
  }
  b->left = tree_merge(a, b->left);
  tree_fix(b);
  return b;
}

static struct centry *tree_remove(struct centry *t, struct centry *e) {
  if (!t)
    return NULL;
  if (t == e)
    return tree_merge(t->left, t->right);
  if (tree_node_cmp(e, t) < 0)
    t->left = tree_remove(t->left, e);
  else
    t->right = tree_remove(t->right, e);
  tree_fix(t);
  return t;
}

/* Whether key k lies below e's range end. */
static bool tree_below_hi(const struct centry *e, const uint8_t *k, size_t kn) {
  return e->hi_inf || cache_bcmp(k, kn, e->hi, e->hi_len) < 0;
}

static void cache_hit_push(struct centry *e) {
  if (C.n_hit == C.cap_hit) {
    size_t cap = C.cap_hit ? 2 * C.cap_hit : 64;
    struct centry **v = realloc(C.hit, cap * sizeof *v);
    if (!v) {
      C.hit_oom = true; /* cache_invalidate() drops everything instead */
      return;
    }
    C.hit = v;
    C.cap_hit = cap;
  }
  C.hit[C.n_hit++] = e;
}

/* Every entry whose interval holds k, into C.hit. */
static void tree_stab(const struct centry *t, const uint8_t *k, size_t kn) {
  while (t && tree_below_hi(t->maxe, k, kn)) {
    tree_stab(t->left, k, kn);
    if (cache_bcmp(t->lo, t->lo_len, k, kn) > 0)
      return; /* this node and everything right of it start after k */
    if (tree_below_hi(t, k, kn))
      cache_hit_push((struct centry *)t);
    t = t->right;
  }
}

/* ---- entries ---- */

static void cache_entry_free(struct centry *e) {
  if (e) {
    free(e->body);
    free(e);
  }
}

static void cache_unlink(struct centry *e) {
  struct centry **pp = &C.buckets[e->hash & (C.n_buckets - 1)];
  while (*pp != e)
    pp = &(*pp)->hnext;
  *pp = e->hnext;
  if (e->prev)
    e->prev->next = e->next;
  else
    C.head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    C.tail = e->prev;
  if (e->in_tree)
    C.root = tree_remove(C.root, e);
  C.n--;
  C.bytes -= e->bytes;
  cache_entry_free(e);
}

static void cache_clear_all(void) {
  while (C.head)
    cache_unlink(C.head);
  C.gen++;
  C.fresh_t = C.ok_t = -1e18;
  C.ok_rev = 0;
}

static struct centry *cache_find(const uint8_t *req, size_t n, uint64_t h) {
  for (struct centry *e = C.buckets ? C.buckets[h & (C.n_buckets - 1)] : NULL; e; e = e->hnext)
    if (e->hash == h && e->req_len == n && !memcmp(e->req, req, n))
      return e;
  return NULL;
}

static void cache_lru_front(struct centry *e) {
  if (C.head == e)
    return;
  e->prev->next = e->next; /* e is not the head: it has a prev */
  if (e->next)
    e->next->prev = e->prev;
  else
    C.tail = e->prev;
  e->prev = NULL;
  e->next = C.head;
  C.head->prev = e;
  C.head = e;
}

/* Stores e (a filled ticket), replacing an entry of the same request read
 * earlier, then evicts from the LRU tail down to the bounds. */
static void cache_store(struct centry *e) {
  struct centry *old = cache_find(e->req, e->req_len, e->hash);
  if (old) {
    if (old->read_rev > e->read_rev) {
      cache_entry_free(e);
      return;
    }
    cache_unlink(old);
  }
  size_t b = e->hash & (C.n_buckets - 1);
  e->hnext = C.buckets[b];
  C.buckets[b] = e;
  e->prev = NULL;
  e->next = C.head;
  if (C.head)
    C.head->prev = e;
  C.head = e;
  if (!C.tail)
    C.tail = e;
  if (e->revision == 0) {
    C.rng ^= C.rng << 13;
    C.rng ^= C.rng >> 17;
    C.rng ^= C.rng << 5;
    e->prio = C.rng;
    e->in_tree = true;
    C.root = tree_insert(C.root, e);
  }
  C.n++;
  C.bytes += e->bytes;
  while (C.n > C.max_entries || C.bytes > C.max_bytes)
    cache_unlink(C.tail);
}

/* An event at revision rev on key k: drops the entries it makes stale. */
static void cache_invalidate(const uint8_t *k, size_t kn, int64_t rev) {
  if (!C.root)
    return;
  C.n_hit = 0;
  C.hit_oom = false;
  tree_stab(C.root, k, kn);
  if (C.hit_oom) {
    cache_clear_all();
    return;
  }
  for (size_t i = 0; i < C.n_hit; i++)
    if (C.hit[i]->read_rev < rev) {
      C.invalidated++;
      cache_unlink(C.hit[i]);
    }
}

/* Drops the explicit-revision entries below the compaction floor. */
static void cache_drop_compacted(void) {
  for (struct centry *e = C.head, *next; e; e = next) {
    next = e->next;
    if (e->revision > 0 && e->revision < C.floor)
      cache_unlink(e);
  }
}

/* The entry of request req that may be served now, and its header revision
 * (*cur); NULL when none. */
static struct centry *cache_lookup(const uint8_t *req, size_t n, double now, int64_t *cur) {
  struct centry *e = cache_find(req, n, cache_hash(req, n));
  if (!e)
    return NULL;
  int64_t c = e->read_rev > C.W ? e->read_rev : C.W;
  bool ok = C.live && c >= atomic_load(&shared_S);
  if (ok && e->revision == 0) {
    ok = now - (e->fill_t > C.fresh_t ? e->fill_t : C.fresh_t) <= C.max_stale_s;
  } else if (ok) {
    ok = e->revision >= C.floor &&
         (now - e->fill_t <= C.max_stale_s ||
          (C.ok_rev > 0 && e->revision >= C.ok_rev && now - C.ok_t <= C.max_stale_s));
  }
  if (!ok) {
    C.stale++;
    return NULL;
  }
  cache_lru_front(e);
  *cur = c;
  return e;
}

/* ---- answers ---- */

static size_t cache_put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* etcd's ResponseHeader (cluster_id 1, member_id 2, revision 3, raft_term 4;
 * zero fields left out, as protobuf-c packs it) into p (>= 44 bytes). */
static size_t cache_put_header(uint8_t *p, uint64_t cluster_id, uint64_t member_id,
                               int64_t revision, uint64_t raft_term) {
  size_t n = 0;
  const uint64_t v[4] = {cluster_id, member_id, (uint64_t)revision, raft_term};
  for (int i = 0; i < 4; i++) {
    if (v[i]) {
      p[n++] = (uint8_t)((i + 1) << 3);
      n += cache_put_varint(p + n, v[i]);
    }
  }
  return n;
}

/* The framed RangeResponse: e's body under a header at revision rev. */
static uint8_t *cache_frame_answer(const struct centry *e, int64_t rev, size_t *len) {
  uint8_t hdr[48], hl[10];
  size_t hn = cache_put_header(hdr, e->cluster_id, e->member_id, rev, e->raft_term);
  size_t ln = cache_put_varint(hl, hn);
  size_t n = 1 + ln + hn + e->body_len;
  if (n > 0xffffffffu)
    return NULL;
  uint8_t *f = malloc(5 + n);
  if (!f)
    return NULL;
  kt_bridge_frame_prefix(f, n);
  f[5] = 0x0a; /* field 1 (header), length-delimited */
  memcpy(f + 6, hl, ln);
  memcpy(f + 6 + ln, hdr, hn);
  if (e->body_len)
    memcpy(f + 6 + ln + hn, e->body, e->body_len);
  *len = 5 + n;
  return f;
}

/* The revision in the header of a framed etcd response (every etcd response
 * has its ResponseHeader as field 1, which protobuf-c packs first), or 0.
 * Bounded: reads only within len. */
static bool cache_get_varint(const uint8_t *p, size_t n, size_t *off, uint64_t *v) {
  uint64_t x = 0;
  for (int s = 0; s < 64 && *off < n; s += 7) {
    uint8_t b = p[(*off)++];
    x |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

static int64_t cache_framed_revision(const uint8_t *f, size_t len) {
  if (len < 7 || f[0] != 0 || f[5] != 0x0a)
    return 0;
  const uint8_t *p = f + 5;
  size_t n = len - 5, off = 1;
  uint64_t hl;
  if (!cache_get_varint(p, n, &off, &hl) || hl > n - off)
    return 0;
  size_t end = off + (size_t)hl;
  while (off < end) {
    uint64_t tag, v;
    if (!cache_get_varint(p, end, &off, &tag))
      return 0;
    if ((tag & 7) != 0 || !cache_get_varint(p, end, &off, &v))
      return 0; /* the header has only varints */
    if (tag >> 3 == 3)
      return (int64_t)v > 0 ? (int64_t)v : 0;
  }
  return 0;
}

/* ---- the watch and the probes ---- */

static void cache_watch_down(double now) {
  if (C.live || C.watching)
    cache_clear_all();
  C.live = C.watching = false;
  C.wseq++; /* deliveries of the old watch are ignored */
  C.retry_at = now + RETRY_S;
}

static void cache_on_watch(void *arg, int err, const ketch_result *res) {
  if ((uintptr_t)arg != C.wseq || !C.on)
    return; /* a watch stopped before */
  const ketch_watch_result *w = &res->watch;
  if (err || w->canceled) {
    cache_watch_down(cache_now_s());
    return;
  }
  if (w->created) {
    C.W = res->header.revision;
    C.live = true;
    return;
  }
  int64_t last = 0;
  for (size_t i = 0; i < w->n_events; i++) {
    const ketch_kv *kv = &w->events[i].kv;
    cache_invalidate((const uint8_t *)kv->key, kv->key_len, kv->mod_revision);
    if (kv->mod_revision > last)
      last = kv->mod_revision;
  }
  if (!w->n_events)
    last = res->header.revision; /* progress: everything up to it was sent */
  if (last > C.W)
    C.W = last;
}

static void cache_watch_start(void) {
  static const uint8_t all[1] = {0};
  ketch_watch_req q = {.key = all, .key_len = 1, .range_end = all, .range_end_len = 1};
  C.wseq++;
  if (ketch_watch(C.kc, &q, cache_on_watch, (void *)(uintptr_t)C.wseq, &C.wid) == 0) {
    C.watching = true;
    *C.submitted = true;
  } else {
    C.retry_at = cache_now_s() + RETRY_S;
  }
}

static void cache_watch_stop(void) {
  if (C.watching)
    ketch_watch_cancel(C.kc, C.wid);
  C.watching = C.live = false;
  C.wseq++;
  *C.submitted = true;
  cache_clear_all();
}

static void cache_on_probe(void *arg, int err, const ketch_result *res) {
  if ((uintptr_t)arg != C.pseq || !C.on)
    return;
  C.probing = false;
  if (!err) {
    atomic_raise(&shared_S, res->header.revision);
    if (C.live && C.probe_t > C.fresh_t)
      C.fresh_t = C.probe_t;
    if (C.probe_rev > 0) {
      C.ok_rev = C.probe_rev;
      C.ok_t = C.probe_t;
    }
    return;
  }
  switch (err) {
  case KETCH_ECOMPACTED: /* the lowest cached revision is gone: probe the next one now */
    if (C.probe_rev + 1 > C.floor)
      C.floor = C.probe_rev + 1;
    cache_drop_compacted();
    ev_feed_event(C.loop, &C.tick, EV_TIMER);
    break;
  case KETCH_EFUTUREREV: /* a member behind the one the entries came from */
  case KETCH_ETIMEOUT:
  case KETCH_EUNAVAILABLE:
  case KETCH_ECLOSED:
  case KETCH_EBUSY:
  case KETCH_ENOLEADER:
    break; /* freshness ages: nothing served past max-staleness */
  default:
    cache_clear_all(); /* e.g. auth enabled: the default handle may read nothing now */
    break;
  }
}

static void cache_probe_send(double now) {
  int64_t m = 0;
  for (const struct centry *e = C.head; e; e = e->next)
    if (e->revision > 0 && (m == 0 || e->revision < m))
      m = e->revision;
  static const uint8_t key[1] = {0};
  ketch_range_req q = {
      .key = key, .key_len = 1, .revision = m, .serializable = true, .count_only = true};
  C.pseq++;
  if (ketch_range_async(C.kc, &q, cache_on_probe, (void *)(uintptr_t)C.pseq) == 0) {
    C.probing = true;
    C.probe_t = now;
    C.probe_rev = m;
    *C.submitted = true;
  }
}

static void cache_on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  double now = cache_now_s();
  if (now - C.last_use > IDLE_S) {
    cache_watch_stop();
    ev_timer_stop(loop, w);
    return;
  }
  if (!C.watching && now >= C.retry_at)
    cache_watch_start();
  if (!C.probing)
    cache_probe_send(now);
}

static void cache_use(double now) {
  C.last_use = now;
  if (C.loop && !ev_is_active(&C.tick)) {
    ev_timer_set(&C.tick, 0., C.max_stale_s / 2);
    ev_timer_start(C.loop, &C.tick);
  }
}

/* ---- the bridge's side (bridge.h) ---- */

int kt_bridge_cache_setup(struct ev_loop *loop, ketch_client *kc, bool *submitted,
                          size_t max_entries, size_t max_bytes, double max_stale_s) {
  if (!max_entries)
    return 0;
  size_t nb = 16;
  while (nb < max_entries && nb < ((size_t)1 << 22))
    nb <<= 1;
  C.buckets = calloc(nb, sizeof *C.buckets);
  if (!C.buckets)
    return -1;
  C.n_buckets = nb;
  C.on = true;
  C.loop = loop;
  C.kc = kc;
  C.submitted = submitted;
  C.max_entries = max_entries;
  C.max_bytes = max_bytes;
  C.max_stale_s = max_stale_s;
  C.rng = 0x9e3779b9u;
  C.fresh_t = C.ok_t = C.retry_at = -1e18;
  C.shared_gen = atomic_load(&shared_gen);
  ev_timer_init(&C.tick, cache_on_tick, 0., max_stale_s / 2);
  int slot = atomic_fetch_add(&n_caches, 1);
  if (slot < KT_BRIDGE_MAX_LOOPS)
    atomic_store_explicit(&caches[slot], &C, memory_order_release);
  return 0;
}

void kt_bridge_cache_stop(void) {
  if (!C.on)
    return;
  if (C.loop)
    ev_timer_stop(C.loop, &C.tick);
  if (C.watching)
    ketch_watch_cancel(C.kc, C.wid);
  C.watching = C.live = false;
  cache_clear_all();
  C.on = false;
  C.wseq++;
  C.pseq++;
  free(C.buckets);
  C.buckets = NULL;
  free(C.hit);
  C.hit = NULL;
  C.cap_hit = C.n_hit = 0;
}

/* What other loops changed: an Auth call (drop everything), a Compact. */
static void cache_sync_shared(void) {
  uint64_t g = atomic_load_explicit(&shared_gen, memory_order_acquire);
  if (g != C.shared_gen) {
    C.shared_gen = g;
    cache_clear_all();
  }
  int64_t f = atomic_load(&shared_floor);
  if (f > C.floor) {
    C.floor = f;
    cache_drop_compacted();
  }
}

bool kt_bridge_cache_get(ketch_client *kc, const uint8_t *msg, size_t len, kt_bridge_done done,
                         void *arg) {
  if (!C.on || kc != C.kc)
    return false;
  cache_sync_shared();
  if (!C.n)
    return false;
  double now = cache_now_s();
  int64_t cur;
  struct centry *e = cache_lookup(msg, len, now, &cur);
  if (!e)
    return false;
  size_t n;
  uint8_t *framed = cache_frame_answer(e, cur, &n);
  if (!framed)
    return false;
  cache_use(now);
  C.hits++;
  atomic_raise(&shared_S, cur);
  C.hit_answer = framed; /* kt_bridge_cache_seen need not parse it again */
  done(arg, KT_GRPC_OK, "", framed, n);
  C.hit_answer = NULL;
  return true;
}

struct kt_bridge_cache_fill *kt_bridge_cache_miss(ketch_client *kc, const uint8_t *msg, size_t len,
                                                  const ketch_range_req *q) {
  if (!C.on || kc != C.kc || !q->serializable)
    return NULL;
  cache_sync_shared();
  double now = cache_now_s();
  cache_use(now);
  C.misses++;
  int64_t rev = q->revision > 0 ? q->revision : 0;
  if (!C.live || (rev > 0 && rev < C.floor))
    return NULL;
  bool point = q->range_end_len == 0;
  bool inf = q->range_end_len == 1 && ((const uint8_t *)q->range_end)[0] == 0;
  size_t hi_len = point ? q->key_len + 1 : inf ? 0 : q->range_end_len;
  size_t bytes = sizeof(struct centry) + len + q->key_len + hi_len;
  if (bytes > C.max_bytes / 8)
    return NULL;
  struct centry *e = calloc(1, sizeof *e + len + q->key_len + hi_len);
  if (!e)
    return NULL;
  uint8_t *p = (uint8_t *)(e + 1);
  e->req = p;
  e->req_len = len;
  memcpy(p, msg, len);
  e->hash = cache_hash(msg, len);
  e->lo = p + len;
  e->lo_len = q->key_len;
  memcpy(e->lo, q->key, q->key_len);
  e->hi = e->lo + q->key_len;
  e->hi_len = hi_len;
  e->hi_inf = inf;
  if (point) {
    memcpy(e->hi, q->key, q->key_len);
    e->hi[q->key_len] = 0; /* the key's successor: [key, key+"\0") holds only key */
  } else if (!inf) {
    memcpy(e->hi, q->range_end, q->range_end_len);
  }
  e->revision = rev;
  e->fill_t = now;
  e->gen = C.gen;
  e->bytes = bytes;
  return (struct kt_bridge_cache_fill *)e;
}

uint8_t *kt_bridge_cache_fill(struct kt_bridge_cache_fill *f, const ketch_header *h, void *resp,
                              size_t *len) {
  struct centry *e = (struct centry *)f;
  Etcdserverpb__RangeResponse *r = resp;
  Etcdserverpb__ResponseHeader *hdr = r->header;
  r->header = NULL;
  size_t bn = protobuf_c_message_get_packed_size(&r->base);
  if (e->bytes + bn > C.max_bytes / 8) { /* never kept: framed the usual way */
    r->header = hdr;
    cache_entry_free(e);
    return NULL;
  }
  e->body = malloc(bn ? bn : 1);
  if (e->body)
    protobuf_c_message_pack(&r->base, e->body);
  r->header = hdr;
  if (!e->body) {
    cache_entry_free(e);
    return NULL;
  }
  e->body_len = bn;
  e->bytes += bn;
  e->read_rev = h->revision;
  e->cluster_id = h->cluster_id;
  e->member_id = h->member_id;
  e->raft_term = h->raft_term;
  uint8_t *framed = cache_frame_answer(e, h->revision, len);
  if (C.on && e->gen == C.gen && C.live && e->read_rev >= C.W && e->bytes <= C.max_bytes / 8 &&
      (e->revision == 0 || e->revision >= C.floor))
    cache_store(e);
  else
    cache_entry_free(e);
  return framed;
}

void kt_bridge_cache_fill_failed(struct kt_bridge_cache_fill *f, int err) {
  struct centry *e = (struct centry *)f;
  if (!e)
    return;
  if (C.on && err == KETCH_ECOMPACTED && e->revision > 0 && e->revision + 1 > C.floor) {
    C.floor = e->revision + 1;
    cache_drop_compacted();
  }
  cache_entry_free(e);
}

void kt_bridge_cache_compacting(int64_t revision) {
  atomic_raise(&shared_floor, revision);
  if (C.on && revision > C.floor) {
    C.floor = revision;
    cache_drop_compacted();
  }
}

void kt_bridge_cache_clear(void) {
  C.shared_gen = atomic_fetch_add(&shared_gen, 1) + 1;
  if (C.on)
    cache_clear_all();
}

void kt_bridge_cache_seen(const uint8_t *framed, size_t len) {
  if (C.on && framed != C.hit_answer) {
    atomic_raise(&shared_S, cache_framed_revision(framed, len));
  }
}

void kt_bridge_cache_metrics(struct kt_buf *b) {
  size_t n = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, invalidated = 0, stale = 0;
  int nc = atomic_load_explicit(&n_caches, memory_order_acquire);
  for (int i = 0; i < nc && i < KT_BRIDGE_MAX_LOOPS; i++) {
    struct cache_state *c = atomic_load_explicit(&caches[i], memory_order_acquire);
    if (!c)
      continue;
    n += atomic_load_explicit(&c->n, memory_order_relaxed);
    bytes += atomic_load_explicit(&c->bytes, memory_order_relaxed);
    hits += atomic_load_explicit(&c->hits, memory_order_relaxed);
    misses += atomic_load_explicit(&c->misses, memory_order_relaxed);
    invalidated += atomic_load_explicit(&c->invalidated, memory_order_relaxed);
    stale += atomic_load_explicit(&c->stale, memory_order_relaxed);
  }
  char t[1024];
  int k = snprintf(t, sizeof t,
                   "# HELP etcd_grpc_proxy_cache_keys_total Total number of keys/ranges cached\n"
                   "# TYPE etcd_grpc_proxy_cache_keys_total gauge\n"
                   "etcd_grpc_proxy_cache_keys_total %zu\n"
                   "# HELP etcd_grpc_proxy_cache_hits_total Total number of cache hits\n"
                   "# TYPE etcd_grpc_proxy_cache_hits_total gauge\n"
                   "etcd_grpc_proxy_cache_hits_total %llu\n"
                   "# HELP etcd_grpc_proxy_cache_misses_total Total number of cache misses\n"
                   "# TYPE etcd_grpc_proxy_cache_misses_total gauge\n"
                   "etcd_grpc_proxy_cache_misses_total %llu\n"
                   "# HELP ketch_grpc_cache_bytes Bytes held by the range cache's entries.\n"
                   "# TYPE ketch_grpc_cache_bytes gauge\n"
                   "ketch_grpc_cache_bytes %zu\n"
                   "# HELP ketch_grpc_cache_invalidations_total Cache entries dropped by an "
                   "event of the cache's watch.\n"
                   "# TYPE ketch_grpc_cache_invalidations_total counter\n"
                   "ketch_grpc_cache_invalidations_total %llu\n"
                   "# HELP ketch_grpc_cache_stale_total Lookups that found an entry it could "
                   "not serve (watch down or behind, older than --cache-max-staleness).\n"
                   "# TYPE ketch_grpc_cache_stale_total counter\n"
                   "ketch_grpc_cache_stale_total %llu\n",
                   n, (unsigned long long)hits, (unsigned long long)misses, bytes,
                   (unsigned long long)invalidated, (unsigned long long)stale);
  if (k > 0)
    kt_buf_append(b, t, (size_t)k < sizeof t ? (size_t)k : sizeof t - 1);
}
