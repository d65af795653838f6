/* core/mvcc.c — the in-memory MVCC store; see mvcc.h for the contract and
 * the layout. */
#include "mvcc.h"
#include "index.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_QUOTA_BYTES (2ull << 30)
#define DEFAULT_MAX_BYTES (3u << 19) /* 1.5 MiB */
#define MAX_TXN_DEPTH 64

/* One older revision of a key. version == 0 means a tombstone. */
struct hrev {
  int64_t mod, create, version, lease;
  uint8_t *val; /* own allocation, NULL when vlen == 0 */
  uint32_t vlen, sub;
};

struct hist {
  uint32_t n, cap;
  struct hrev r[];
};

/* A key: the latest revision inline, then in the same allocation the
 * optional create revision + version (only when they are not implied), lease
 * (only when non-zero) and history pointer (only once the key has had more
 * than one revision), the key bytes and the latest value bytes. Older
 * revisions live in the history array, oldest first.
 * Create revision and version are implied for the two commonest latest
 * revisions: a key's first version (create = mod, version 1: no flag) and a
 * tombstone (F_TOMB: both 0); anything else stores them (F_CV). So a key
 * written once has a 20-byte header (a 16-byte key with a 256-byte value is
 * one 304-byte malloc chunk instead of 320). */
struct kent {
  int64_t mod;
  uint32_t kf; /* key length | F_LEASE | F_HIST | F_CV | F_TOMB */
  uint32_t vlen, sub;
  uint8_t data[]; /* [create version][lease][hist] key value, unaligned */
};
#define F_LEASE 0x80000000u
#define F_HIST 0x40000000u
#define F_CV 0x20000000u
#define F_TOMB 0x10000000u
#define KLEN_MASK 0x0fffffffu
#define MAX_KEY_LIMIT KLEN_MASK

static inline uint32_t k_klen(const struct kent *k) { return k->kf & KLEN_MASK; }
static inline size_t k_cv(const struct kent *k) { return k->kf & F_CV ? 16u : 0u; }
static inline size_t k_extra(const struct kent *k) {
  return k_cv(k) + (k->kf & F_LEASE ? 8u : 0u) + (k->kf & F_HIST ? 8u : 0u);
}
static inline uint8_t *k_key(const struct kent *k) { return (uint8_t *)k->data + k_extra(k); }
static inline uint8_t *k_val(const struct kent *k) { return k_key(k) + k_klen(k); }
static inline int64_t k_create(const struct kent *k) {
  int64_t c = k->kf & F_TOMB ? 0 : k->mod;
  if (k->kf & F_CV)
    memcpy(&c, k->data, 8);
  return c;
}
static inline int64_t k_version(const struct kent *k) {
  int64_t v = k->kf & F_TOMB ? 0 : 1;
  if (k->kf & F_CV)
    memcpy(&v, k->data + 8, 8);
  return v;
}
static inline int64_t k_lease(const struct kent *k) {
  int64_t l = 0;
  if (k->kf & F_LEASE)
    memcpy(&l, k->data + k_cv(k), 8);
  return l;
}
static inline struct hist *k_hist(const struct kent *k) {
  struct hist *h = NULL;
  if (k->kf & F_HIST)
    memcpy(&h, k->data + k_cv(k) + (k->kf & F_LEASE ? 8 : 0), sizeof h);
  return h;
}
static inline void k_set_hist(struct kent *k, struct hist *h) {
  kt_assert(k->kf & F_HIST);
  memcpy(k->data + k_cv(k) + (k->kf & F_LEASE ? 8 : 0), &h, sizeof h);
}
#define KENT_HDR offsetof(struct kent, data)

struct death {
  int64_t rev;
  uint64_t cum; /* bytes dying at revisions <= rev, since the store began */
};

struct kt_mvcc {
  struct kt_mvcc_config cfg;
  struct kt_index ix;
  int64_t rev, compact_rev;
  uint64_t size, live;
  uint64_t revs; /* revisions held in memory (latest + history) */
  bool nospace;
  /* accounting bytes that stop counting once compact_rev >= rev, in rev
   * order with running sums, so a compaction updates size in O(log n) */
  struct death *deaths;
  size_t dhead, dn, dcap;
  uint64_t death_total, dead_cum;
  /* records replaced by the last apply, freed at the next apply/step */
  void **garbage;
  size_t ngarbage, gcap;
  /* physical compaction: next key to visit is >= ckey (when cpending) */
  bool cpending;
  struct kt_buf ckey;
  /* restore */
  struct kent *rlast;
};

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  kt_assert(p != NULL);
  return p;
}

static struct kt_bytes kent_key_of(const void *item) {
  const struct kent *k = item;
  return (struct kt_bytes){k_key(k), k_klen(k)};
}

static inline struct kt_bytes kkey(const struct kent *k) {
  return (struct kt_bytes){k_key(k), k_klen(k)};
}

static inline struct hrev kent_latest(const struct kent *k) {
  return (struct hrev){k->mod,  k_create(k), k_version(k), k_lease(k), k->vlen ? k_val(k) : NULL,
                       k->vlen, k->sub};
}

/* Accounting charge of one revision (see mvcc.h). */
static inline uint64_t charge(uint32_t klen, uint32_t vlen) {
  return (uint64_t)klen + vlen + KT_MVCC_REV_OVERHEAD;
}

static void death_add(struct kt_mvcc *s, int64_t rev, uint64_t bytes) {
  s->death_total += bytes;
  if (s->dn > s->dhead && s->deaths[s->dn - 1].rev == rev) {
    s->deaths[s->dn - 1].cum = s->death_total;
    return;
  }
  kt_assert(s->dn == s->dhead || s->deaths[s->dn - 1].rev < rev);
  if (s->dn == s->dcap) {
    if (s->dhead > s->dn / 2) { /* amortized: drop the consumed head */
      memmove(s->deaths, s->deaths + s->dhead, (s->dn - s->dhead) * sizeof *s->deaths);
      s->dn -= s->dhead;
      s->dhead = 0;
    } else {
      s->dcap = s->dcap ? s->dcap * 2 : 64;
      s->deaths = realloc(s->deaths, s->dcap * sizeof *s->deaths);
      kt_assert(s->deaths != NULL);
    }
  }
  s->deaths[s->dn++] = (struct death){rev, s->death_total};
}

/* Stops counting every death at a revision <= upto. O(log n). */
static void deaths_pop(struct kt_mvcc *s, int64_t upto) {
  size_t lo = s->dhead, hi = s->dn; /* first entry with rev > upto */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->deaths[mid].rev <= upto)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == s->dhead)
    return;
  uint64_t cum = s->deaths[lo - 1].cum;
  kt_assert(s->size >= cum - s->dead_cum);
  s->size -= cum - s->dead_cum;
  s->dead_cum = cum;
  s->dhead = lo;
}

static void garbage_add(struct kt_mvcc *s, void *p) {
  if (s->ngarbage == s->gcap) {
    s->gcap = s->gcap ? s->gcap * 2 : 16;
    s->garbage = realloc(s->garbage, s->gcap * sizeof(void *));
    kt_assert(s->garbage != NULL);
  }
  s->garbage[s->ngarbage++] = p;
}

static void garbage_free(struct kt_mvcc *s) {
  for (size_t i = 0; i < s->ngarbage; i++)
    free(s->garbage[i]);
  s->ngarbage = 0;
}

static void hist_push(struct kent *k, struct hrev r) {
  struct hist *h = k_hist(k);
  if (!h || h->n == h->cap) {
    uint32_t cap = h ? h->cap * 2 : 1;
    bool fresh = h == NULL;
    h = realloc(h, sizeof *h + cap * sizeof(struct hrev));
    kt_assert(h != NULL);
    if (fresh)
      h->n = 0;
    h->cap = cap;
    k_set_hist(k, h);
  }
  h->r[h->n++] = r;
}

static void kent_free(void *p) {
  struct kent *k = p;
  struct hist *h = k_hist(k);
  if (h) {
    for (uint32_t i = 0; i < h->n; i++)
      free(h->r[i].val);
    free(h);
  }
  free(k);
}

/* The newest revision of k with main <= rev (possibly a tombstone). */
static bool kent_at(const struct kent *k, int64_t rev, struct hrev *out) {
  if (k->mod <= rev) {
    *out = kent_latest(k);
    return true;
  }
  const struct hist *h = k_hist(k);
  if (!h)
    return false;
  uint32_t lo = 0, hi = h->n; /* first index with mod > rev */
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (h->r[mid].mod <= rev)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return false;
  *out = h->r[lo - 1];
  return true;
}

static inline bool kent_live_at(const struct kent *k, int64_t rev, struct hrev *out) {
  return kent_at(k, rev, out) && out->version != 0;
}

static struct kt_kv to_kv(const struct kent *k, const struct hrev *r) {
  return (struct kt_kv){kkey(k), (struct kt_bytes){r->val, r->vlen}, r->create, r->mod, r->version,
                        r->lease};
}

/* ---- lifecycle ---------------------------------------------------------- */

struct kt_mvcc *kt_mvcc_new(const struct kt_mvcc_config *cfg) {
  struct kt_mvcc *s = xmalloc(sizeof *s);
  memset(s, 0, sizeof *s);
  if (cfg)
    s->cfg = *cfg;
  if (!s->cfg.quota_bytes)
    s->cfg.quota_bytes = DEFAULT_QUOTA_BYTES;
  if (!s->cfg.max_key_bytes)
    s->cfg.max_key_bytes = DEFAULT_MAX_BYTES;
  if (s->cfg.max_key_bytes > MAX_KEY_LIMIT)
    s->cfg.max_key_bytes = MAX_KEY_LIMIT;
  if (!s->cfg.max_value_bytes)
    s->cfg.max_value_bytes = DEFAULT_MAX_BYTES;
  kt_index_init(&s->ix, kent_key_of);
  return s;
}

void kt_mvcc_free(struct kt_mvcc *s) {
  if (!s)
    return;
  garbage_free(s);
  free(s->garbage);
  kt_index_free(&s->ix, kent_free);
  free(s->deaths);
  kt_buf_free(&s->ckey);
  free(s);
}

int64_t kt_mvcc_revision(const struct kt_mvcc *s) { return s->rev; }
int64_t kt_mvcc_compact_revision(const struct kt_mvcc *s) { return s->compact_rev; }
uint64_t kt_mvcc_size_bytes(const struct kt_mvcc *s) { return s->size; }
uint64_t kt_mvcc_keys(const struct kt_mvcc *s) { return s->live; }
uint64_t kt_mvcc_revs(const struct kt_mvcc *s) { return s->revs; }
uint64_t kt_mvcc_index_bytes(const struct kt_mvcc *s) { return s->ix.node_bytes; }
bool kt_mvcc_nospace(const struct kt_mvcc *s) { return s->nospace; }
void kt_mvcc_disarm_nospace(struct kt_mvcc *s) { s->nospace = false; }
void kt_mvcc_raise_nospace(struct kt_mvcc *s) { s->nospace = true; }

/* ---- key ranges ---------------------------------------------------------- */

static inline bool is_nul(struct kt_bytes b) { return b.n == 1 && b.p[0] == 0; }

/* A resolved range: single key, or [lo, hi) with hi_inf for "to the end". */
struct krange {
  struct kt_bytes lo, hi;
  bool single, hi_inf;
};

static struct krange mk_range(struct kt_bytes key, struct kt_bytes end) {
  struct krange r = {key, end, end.n == 0, false};
  if (is_nul(end))
    r.hi_inf = true;
  return r;
}

static inline bool in_range(const struct krange *r, struct kt_bytes k) {
  if (r->single)
    return kt_bytes_cmp(k, r->lo) == 0;
  return kt_bytes_cmp(k, r->lo) >= 0 && (r->hi_inf || kt_bytes_cmp(k, r->hi) < 0);
}

/* Visits every key record in r in order; fn returns false to stop. fn must
 * not insert or remove keys (replacing a slot is fine). */
typedef bool (*visit_fn)(void *arg, struct kent *k);
static void visit(const struct kt_mvcc *s, const struct krange *r, visit_fn fn, void *arg) {
  if (r->single) {
    void **slot = kt_index_get(&s->ix, r->lo);
    if (slot)
      fn(arg, *slot);
    return;
  }
  struct kt_index_it it;
  kt_index_seek(&s->ix, r->lo, &it);
  for (; kt_index_valid(&it); kt_index_next(&it)) {
    struct kent *k = kt_index_item(&it);
    if (!r->hi_inf && kt_bytes_cmp(kkey(k), r->hi) >= 0)
      break;
    if (!fn(arg, k))
      break;
  }
}

/* ---- range --------------------------------------------------------------- */

struct kvvec {
  struct kt_kv *v;
  uint32_t n, cap;
  struct kt_arena *a;
};

static void kvvec_push(struct kvvec *vv, struct kt_kv kv) {
  if (vv->n == vv->cap) {
    uint32_t cap = vv->cap ? vv->cap * 2 : 16;
    struct kt_kv *nv = kt_arena_alloc(vv->a, cap * sizeof *nv);
    if (vv->n)
      memcpy(nv, vv->v, vv->n * sizeof *nv);
    vv->v = nv;
    vv->cap = cap;
  }
  vv->v[vv->n++] = kv;
}

struct range_walk {
  int64_t rev;
  int64_t count;
  uint32_t fetch; /* stop collecting after this many; 0 = all */
  bool collect;
  struct kvvec out;
};

static bool range_visit(void *arg, struct kent *k) {
  struct range_walk *w = arg;
  struct hrev r;
  if (!kent_live_at(k, w->rev, &r))
    return true;
  w->count++;
  if (w->collect && (w->fetch == 0 || w->out.n < w->fetch))
    kvvec_push(&w->out, to_kv(k, &r));
  return true;
}

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

static int kv_cmp(const struct kt_kv *a, const struct kt_kv *b, int target) {
  int c = 0;
  switch (target) {
  case KT_SORT_VERSION:
    c = cmp_i64(a->version, b->version);
    break;
  case KT_SORT_CREATE:
    c = cmp_i64(a->create_revision, b->create_revision);
    break;
  case KT_SORT_MOD:
    c = cmp_i64(a->mod_revision, b->mod_revision);
    break;
  case KT_SORT_VALUE:
    c = kt_bytes_cmp(a->value, b->value);
    break;
  default:
    break;
  }
  return c;
}

/* Stable merge sort by target (ties keep key order); desc reverses the
 * target order only. */
static void kv_sort(struct kt_kv *v, uint32_t n, int target, bool desc, struct kt_arena *a) {
  if (n < 2)
    return;
  struct kt_kv *tmp = kt_arena_alloc(a, n * sizeof *tmp);
  for (uint32_t w = 1; w < n; w *= 2) {
    for (uint32_t lo = 0; lo < n; lo += 2 * w) {
      uint32_t mid = KT_MIN(lo + w, n), hi = KT_MIN(lo + 2 * w, n);
      uint32_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) {
        int c =
            target == KT_SORT_KEY ? kt_bytes_cmp(v[i].key, v[j].key) : kv_cmp(&v[i], &v[j], target);
        if (desc)
          c = -c;
        tmp[o++] = c <= 0 ? v[i++] : v[j++];
      }
      while (i < mid)
        tmp[o++] = v[i++];
      while (j < hi)
        tmp[o++] = v[j++];
    }
    memcpy(v, tmp, n * sizeof *v);
  }
}

/* etcd's applierV3backend.Range over the view at revision `cur`. */
static int do_range(const struct kt_mvcc *s, const struct kt_range_req *r, int64_t cur,
                    struct kt_arena *a, struct kt_range_resp *out, struct kt_err *e) {
  memset(out, 0, sizeof *out);
  int64_t rev = r->revision;
  if (rev > cur)
    return kt_err_set(e, KT_EFUTUREREV, "%s", kt_strerror(KT_EFUTUREREV));
  if (rev <= 0)
    rev = cur;
  if (rev < s->compact_rev)
    return kt_err_set(e, KT_ECOMPACTED, "%s", kt_strerror(KT_ECOMPACTED));
  bool filters = r->min_mod_revision || r->max_mod_revision || r->min_create_revision ||
                 r->max_create_revision;
  int64_t limit = r->limit;
  if (r->sort_order != KT_SORT_NONE || filters)
    limit = 0;
  if (limit > 0)
    limit++;
  struct range_walk w = {.rev = rev, .collect = !r->count_only, .out = {.a = a}};
  w.fetch = limit > 0 && limit < UINT32_MAX ? (uint32_t)limit : 0;
  struct krange kr = mk_range(r->key, r->range_end);
  visit(s, &kr, range_visit, &w);
  struct kt_kv *v = w.out.v;
  uint32_t n = w.out.n;
  if (filters) {
    uint32_t o = 0;
    for (uint32_t i = 0; i < n; i++) {
      const struct kt_kv *kv = &v[i];
      if (r->max_mod_revision && kv->mod_revision > r->max_mod_revision)
        continue;
      if (r->min_mod_revision && kv->mod_revision < r->min_mod_revision)
        continue;
      if (r->max_create_revision && kv->create_revision > r->max_create_revision)
        continue;
      if (r->min_create_revision && kv->create_revision < r->min_create_revision)
        continue;
      v[o++] = *kv;
    }
    n = o;
  }
  int order = r->sort_order;
  if (r->sort_target != KT_SORT_KEY && order == KT_SORT_NONE)
    order = KT_SORT_ASCEND;
  if (order == KT_SORT_DESCEND || (order == KT_SORT_ASCEND && r->sort_target != KT_SORT_KEY))
    kv_sort(v, n, r->sort_target, order == KT_SORT_DESCEND, a);
  if (r->limit > 0 && n > r->limit) {
    n = (uint32_t)r->limit;
    out->more = true;
  }
  if (r->keys_only)
    for (uint32_t i = 0; i < n; i++)
      v[i].value = (struct kt_bytes){NULL, 0};
  out->kvs = v;
  out->n_kvs = n;
  out->count = w.count;
  return 0;
}

int kt_mvcc_range(const struct kt_mvcc *s, const struct kt_range_req *r, struct kt_arena *a,
                  struct kt_range_resp *out, struct kt_err *e) {
  int rc = kt_mvcc_check_range(s, r, e);
  if (rc)
    return rc;
  return do_range(s, r, s->rev, a, out, e);
}

/* ---- check ------------------------------------------------------------------ */

struct kset {
  struct kt_bytes *k;
  uint32_t n, cap;
};
struct iset {
  struct krange *v;
  uint32_t n, cap;
};

static void kset_add(struct kt_arena *a, struct kset *s, struct kt_bytes k) {
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 8;
    struct kt_bytes *nk = kt_arena_alloc(a, cap * sizeof *nk);
    if (s->n)
      memcpy(nk, s->k, s->n * sizeof *nk);
    s->k = nk;
    s->cap = cap;
  }
  s->k[s->n++] = k;
}
static bool kset_has(const struct kset *s, struct kt_bytes k) {
  for (uint32_t i = 0; i < s->n; i++)
    if (kt_bytes_cmp(s->k[i], k) == 0)
      return true;
  return false;
}
static void iset_add(struct kt_arena *a, struct iset *s, struct krange r) {
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 8;
    struct krange *nv = kt_arena_alloc(a, cap * sizeof *nv);
    if (s->n)
      memcpy(nv, s->v, s->n * sizeof *nv);
    s->v = nv;
    s->cap = cap;
  }
  s->v[s->n++] = r;
}
static bool iset_has(const struct iset *s, struct kt_bytes k) {
  for (uint32_t i = 0; i < s->n; i++)
    if (in_range(&s->v[i], k))
      return true;
  return false;
}

/* etcd's checkIntervals (v3rpc/key.go): the puts of one op list (with its
 * nested txns) must not repeat a key nor fall in a delete of the same level
 * or of an earlier nested txn; then and else branches may repeat each other.
 * As etcd, a put may precede a delete of the same key in a later nested txn,
 * and a from-key delete conflicts with nothing. */
static int check_intervals(const struct kt_request_op *ops, uint32_t n, struct kt_arena *a,
                           struct kset *puts, struct iset *dels) {
  memset(puts, 0, sizeof *puts);
  memset(dels, 0, sizeof *dels);
  for (uint32_t i = 0; i < n; i++) {
    /* etcd builds the interval [key, "\0") for a from-key delete, which
     * holds no key: such deletes never conflict (checked against etcd
     * 3.4: put b + delete from a succeeds and deletes b at a later sub) */
    if (ops[i].type == KT_OP_DELETE && !is_nul(ops[i].u.del.range_end))
      iset_add(a, dels, mk_range(ops[i].u.del.key, ops[i].u.del.range_end));
  }
  for (uint32_t i = 0; i < n; i++) {
    if (ops[i].type != KT_OP_TXN)
      continue;
    const struct kt_txn_req *t = &ops[i].u.txn;
    struct kset pt, pe;
    struct iset dt, de;
    if (check_intervals(t->success, t->n_success, a, &pt, &dt) ||
        check_intervals(t->failure, t->n_failure, a, &pe, &de))
      return KT_EDUPKEY;
    uint32_t before = puts->n;
    for (uint32_t j = 0; j < pt.n; j++) {
      if (kset_has(puts, pt.k[j]) || iset_has(dels, pt.k[j]))
        return KT_EDUPKEY;
      kset_add(a, puts, pt.k[j]);
    }
    for (uint32_t j = 0; j < pe.n; j++) {
      /* a key from this txn's then-branch is fine: the branches exclude
       * each other; one from an earlier op is not */
      struct kset earlier = {puts->k, before, before};
      if (kset_has(&earlier, pe.k[j]) || iset_has(dels, pe.k[j]))
        return KT_EDUPKEY;
      if (!kset_has(&pt, pe.k[j]))
        kset_add(a, puts, pe.k[j]);
    }
    for (uint32_t j = 0; j < dt.n; j++)
      iset_add(a, dels, dt.v[j]);
    for (uint32_t j = 0; j < de.n; j++)
      iset_add(a, dels, de.v[j]);
  }
  for (uint32_t i = 0; i < n; i++) {
    if (ops[i].type != KT_OP_PUT)
      continue;
    struct kt_bytes k = ops[i].u.put.key;
    if (kset_has(puts, k) || iset_has(dels, k))
      return KT_EDUPKEY;
    kset_add(a, puts, k);
  }
  return 0;
}

static int check_key(const struct kt_mvcc *s, struct kt_bytes key, struct kt_bytes end,
                     struct kt_err *e) {
  (void)s; /* a key that is only compared (range, delete, compare) has no size limit, as etcd */
  if (key.n == 0)
    return kt_err_set(e, KT_EKEYEMPTY, "%s", kt_strerror(KT_EKEYEMPTY));
  if (end.n && !is_nul(end) && kt_bytes_cmp(end, key) < 0)
    return kt_err_set(e, KT_EINVAL, "range end is before key");
  return 0;
}

int kt_mvcc_check_range(const struct kt_mvcc *s, const struct kt_range_req *r, struct kt_err *e) {
  int rc = check_key(s, r->key, r->range_end, e);
  if (rc)
    return rc;
  if (r->sort_order > KT_SORT_DESCEND)
    return kt_err_set(e, KT_EINVAL, "invalid sort order %u", r->sort_order);
  if (r->sort_target > KT_SORT_VALUE)
    return kt_err_set(e, KT_EINVAL, "invalid sort target %u", r->sort_target);
  return 0;
}

bool kt_mvcc_op_writes(const struct kt_request_op *op) {
  switch (op->type) {
  case KT_OP_PUT:
  case KT_OP_DELETE:
    return true;
  case KT_OP_TXN:
    for (uint32_t i = 0; i < op->u.txn.n_success; i++)
      if (kt_mvcc_op_writes(&op->u.txn.success[i]))
        return true;
    for (uint32_t i = 0; i < op->u.txn.n_failure; i++)
      if (kt_mvcc_op_writes(&op->u.txn.failure[i]))
        return true;
    return false;
  default:
    return false;
  }
}

static bool has_put(const struct kt_request_op *ops, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (ops[i].type == KT_OP_PUT)
      return true;
    if (ops[i].type == KT_OP_TXN && (has_put(ops[i].u.txn.success, ops[i].u.txn.n_success) ||
                                     has_put(ops[i].u.txn.failure, ops[i].u.txn.n_failure)))
      return true;
  }
  return false;
}

static bool op_has_put(const struct kt_request_op *op) { return has_put(op, 1); }

static int check_op(const struct kt_mvcc *s, const struct kt_request_op *op, int64_t max_ops,
                    int depth, struct kt_err *e) {
  int rc;
  switch (op->type) {
  case KT_OP_RANGE:
    return kt_mvcc_check_range(s, &op->u.range, e);
  case KT_OP_PUT: {
    const struct kt_put_req *p = &op->u.put;
    if ((rc = check_key(s, p->key, (struct kt_bytes){0}, e)))
      return rc;
    if (p->key.n > s->cfg.max_key_bytes)
      return kt_err_set(e, KT_ETOOLARGE, "key is larger than %u bytes", s->cfg.max_key_bytes);
    if (p->value.n > s->cfg.max_value_bytes)
      return kt_err_set(e, KT_ETOOLARGE, "value is larger than %u bytes", s->cfg.max_value_bytes);
    if (p->ignore_value && p->value.n)
      return kt_err_set(e, KT_EINVAL, "value is provided");
    if (p->ignore_lease && p->lease)
      return kt_err_set(e, KT_EINVAL, "lease is provided");
    return 0;
  }
  case KT_OP_DELETE:
    return check_key(s, op->u.del.key, op->u.del.range_end, e);
  case KT_OP_TXN: {
    const struct kt_txn_req *t = &op->u.txn;
    if (depth >= MAX_TXN_DEPTH)
      return kt_err_set(e, KT_EINVAL, "txn nested deeper than %d", MAX_TXN_DEPTH);
    int64_t opc = KT_MAX(t->n_compare, KT_MAX(t->n_success, t->n_failure));
    if (opc > max_ops)
      return kt_err_set(e, KT_ETOOMANYOPS, "%s", kt_strerror(KT_ETOOMANYOPS));
    for (uint32_t i = 0; i < t->n_compare; i++) {
      const struct kt_compare *c = &t->compare[i];
      if ((rc = check_key(s, c->key, c->range_end, e)))
        return rc;
      if (c->result > KT_CMP_NOT_EQUAL)
        return kt_err_set(e, KT_EINVAL, "invalid compare result %u", c->result);
      if (c->target > KT_CMP_LEASE)
        return kt_err_set(e, KT_EINVAL, "invalid compare target %u", c->target);
    }
    for (uint32_t i = 0; i < t->n_success; i++)
      if ((rc = check_op(s, &t->success[i], max_ops - opc, depth + 1, e)))
        return rc;
    for (uint32_t i = 0; i < t->n_failure; i++)
      if ((rc = check_op(s, &t->failure[i], max_ops - opc, depth + 1, e)))
        return rc;
    return 0;
  }
  default:
    return kt_err_set(e, KT_EINVAL, "invalid op type %u", op->type);
  }
}

int kt_mvcc_check(const struct kt_mvcc *s, const struct kt_request_op *op, struct kt_err *e) {
  int rc = check_op(s, op, KT_MAX_TXN_OPS, 0, e);
  if (rc)
    return rc;
  if (op->type == KT_OP_TXN) {
    struct kt_arena a = {0};
    struct kset p;
    struct iset d;
    rc = check_intervals(op->u.txn.success, op->u.txn.n_success, &a, &p, &d);
    if (!rc)
      rc = check_intervals(op->u.txn.failure, op->u.txn.n_failure, &a, &p, &d);
    kt_arena_free(&a);
    if (rc)
      return kt_err_set(e, rc, "%s", kt_strerror(rc));
  }
  if (s->nospace && op_has_put(op))
    return kt_err_set(e, KT_ENOSPACE, "%s", kt_strerror(KT_ENOSPACE));
  return 0;
}

/* ---- writes ----------------------------------------------------------------- */

struct wctx {
  struct kt_mvcc *s;
  uint32_t changes; /* next sub revision */
  struct kt_arena *a;
};

static inline int64_t view_rev(const struct wctx *w) {
  return w->s->rev + (w->changes > 0 ? 1 : 0);
}

static void emit(struct kt_mvcc *s, const struct kt_event *ev) {
  if (s->cfg.on_event)
    s->cfg.on_event(s->cfg.event_arg, ev);
}

/* The revision fields of a new latest revision (version 0: a tombstone). */
struct krev {
  int64_t mod, create, version;
  uint32_t sub;
};

static struct kent *kent_alloc(struct kt_bytes key, const uint8_t *val, uint32_t vlen,
                               int64_t lease, bool with_hist, struct krev r) {
  kt_assert(key.n <= KLEN_MASK);
  kt_assert(r.version != 0 || (r.create == 0 && lease == 0 && vlen == 0));
  uint32_t form = r.version == 0 ? F_TOMB : r.version == 1 && r.create == r.mod ? 0 : F_CV;
  size_t cv = form == F_CV ? 16u : 0u;
  size_t extra = cv + (lease ? 8u : 0u) + (with_hist ? 8u : 0u);
  struct kent *k = xmalloc(KENT_HDR + extra + key.n + vlen);
  k->mod = r.mod;
  k->sub = r.sub;
  k->kf = key.n | (lease ? F_LEASE : 0) | (with_hist ? F_HIST : 0) | form;
  k->vlen = vlen;
  if (cv) {
    memcpy(k->data, &r.create, 8);
    memcpy(k->data + 8, &r.version, 8);
  }
  if (lease)
    memcpy(k->data + cv, &lease, 8);
  if (with_hist)
    k_set_hist(k, NULL);
  memcpy(k_key(k), key.p, key.n);
  if (vlen)
    memcpy(k_val(k), val, vlen);
  return k;
}

/* Moves the latest revision of old into the history of nk (allocated with
 * a history slot), which takes over old's history; old goes to the garbage
 * list. */
static void kent_push_old(struct kt_mvcc *s, struct kent *old, struct kent *nk) {
  struct hrev r = kent_latest(old);
  if (r.vlen) {
    r.val = xmalloc(r.vlen);
    memcpy(r.val, k_val(old), r.vlen);
  }
  struct hist *h = k_hist(old);
  k_set_hist(nk, h);
  if (h)
    k_set_hist(old, NULL);
  hist_push(nk, r);
  garbage_add(s, old);
}

static void kent_supersede(struct kt_mvcc *s, struct kent *old, struct kent *nk, int64_t rev) {
  death_add(s, rev, charge(k_klen(old), old->vlen));
  kent_push_old(s, old, nk);
}

static void do_put(struct wctx *w, const struct kt_put_req *p, struct kt_put_resp *resp) {
  struct kt_mvcc *s = w->s;
  int64_t main = s->rev + 1;
  void **slot = kt_index_get(&s->ix, p->key);
  struct kent *old = slot ? *slot : NULL;
  bool live = old && k_version(old) != 0;
  const uint8_t *val = p->value.p;
  uint32_t vlen = p->value.n;
  int64_t lease = p->lease;
  if (p->ignore_value || p->ignore_lease)
    kt_assert(live); /* checked before any write */
  if (p->ignore_value) {
    val = k_val(old);
    vlen = old->vlen;
  }
  if (p->ignore_lease)
    lease = k_lease(old);
  struct krev kr = {main, live ? k_create(old) : main, live ? k_version(old) + 1 : 1, w->changes++};
  struct kent *nk = kent_alloc(p->key, val, vlen, lease, old != NULL, kr);
  struct kt_event ev = {.type = KT_EVENT_PUT};
  if (live) {
    struct hrev pr = kent_latest(old);
    ev.has_prev_kv = true;
    ev.prev_kv = to_kv(old, &pr); /* old stays allocated until the next apply */
  }
  if (resp) {
    memset(resp, 0, sizeof *resp);
    if (p->prev_kv && live) {
      resp->has_prev_kv = true;
      resp->prev_kv = ev.prev_kv;
    }
  }
  if (old) {
    if (live)
      kent_supersede(s, old, nk, main);
    else
      kent_push_old(s, old, nk); /* a tombstone's death is already recorded */
    *slot = nk;
  } else {
    kt_index_insert(&s->ix, nk);
  }
  if (!live)
    s->live++;
  s->size += charge(k_klen(nk), nk->vlen);
  s->revs++;
  struct hrev nr = kent_latest(nk);
  ev.kv = to_kv(nk, &nr);
  emit(s, &ev);
}

struct del_walk {
  struct wctx *w;
  int64_t rev;
  struct kvvec prev;
  int64_t deleted;
};

static bool del_visit(void *arg, struct kent *k) {
  struct del_walk *d = arg;
  struct hrev r;
  if (!kent_live_at(k, d->rev, &r))
    return true;
  kt_assert(r.mod == k->mod && r.sub == k->sub); /* live view is the latest */
  struct kt_mvcc *s = d->w->s;
  int64_t main = s->rev + 1;
  struct kent *nk =
      kent_alloc(kkey(k), NULL, 0, 0, true, (struct krev){main, 0, 0, d->w->changes++});
  struct kt_event ev = {.type = KT_EVENT_DELETE, .has_prev_kv = true, .prev_kv = to_kv(k, &r)};
  kvvec_push(&d->prev, ev.prev_kv);
  void **slot = kt_index_get(&s->ix, kkey(k));
  kt_assert(slot && *slot == k);
  kent_supersede(s, k, nk, main);
  *slot = nk;
  s->live--;
  s->size += charge(k_klen(nk), 0);
  s->revs++;
  death_add(s, main, charge(k_klen(nk), 0)); /* a tombstone goes at the next compaction */
  ev.kv = (struct kt_kv){.key = kkey(nk), .mod_revision = main};
  emit(s, &ev);
  d->deleted++;
  return true;
}

static void do_delete(struct wctx *w, const struct kt_delete_req *r, struct kt_delete_resp *resp) {
  struct del_walk d = {.w = w, .rev = view_rev(w), .prev = {.a = w->a}};
  struct krange kr = mk_range(r->key, r->range_end);
  visit(w->s, &kr, del_visit, &d);
  memset(resp, 0, sizeof *resp);
  resp->deleted = d.deleted;
  if (r->prev_kv) {
    resp->prev_kvs = d.prev.v;
    resp->n_prev_kvs = d.prev.n;
  }
}

/* ---- txn -------------------------------------------------------------------- */

/* The branch each txn takes, decided before any write (etcd compareToPath):
 * for a txn, `succ`, and for each op of the taken branch that is a txn, its
 * own path. */
struct tpath {
  bool succ;
  struct tpath **sub; /* indexed like the taken branch's ops */
};

struct cmp_walk {
  const struct kt_compare *c;
  int64_t rev;
  bool any, ok;
};

static bool compare_kv(const struct kt_compare *c, const struct kt_kv *kv) {
  int res = 0;
  switch (c->target) {
  case KT_CMP_VALUE:
    res = kt_bytes_cmp(kv->value, c->value);
    break;
  case KT_CMP_CREATE:
    res = cmp_i64(kv->create_revision, c->int_value);
    break;
  case KT_CMP_MOD:
    res = cmp_i64(kv->mod_revision, c->int_value);
    break;
  case KT_CMP_VERSION:
    res = cmp_i64(kv->version, c->int_value);
    break;
  case KT_CMP_LEASE:
    res = cmp_i64(kv->lease, c->int_value);
    break;
  default:
    break;
  }
  switch (c->result) {
  case KT_CMP_EQUAL:
    return res == 0;
  case KT_CMP_NOT_EQUAL:
    return res != 0;
  case KT_CMP_GREATER:
    return res > 0;
  case KT_CMP_LESS:
    return res < 0;
  default:
    return false;
  }
}

static bool cmp_visit(void *arg, struct kent *k) {
  struct cmp_walk *w = arg;
  struct hrev r;
  if (!kent_live_at(k, w->rev, &r))
    return true;
  w->any = true;
  struct kt_kv kv = to_kv(k, &r);
  if (!compare_kv(w->c, &kv)) {
    w->ok = false;
    return false;
  }
  return true;
}

/* etcd applyCompare: every key in the range must satisfy the compare; no key
 * compares as a zero KeyValue, except that a VALUE compare then fails. */
static bool apply_compare(const struct kt_mvcc *s, const struct kt_compare *c, int64_t rev) {
  struct cmp_walk w = {c, rev, false, true};
  struct krange kr = mk_range(c->key, c->range_end);
  visit(s, &kr, cmp_visit, &w);
  if (!w.any) {
    if (c->target == KT_CMP_VALUE)
      return false;
    struct kt_kv zero = {0};
    return compare_kv(c, &zero);
  }
  return w.ok;
}

static struct tpath *compare_to_path(const struct kt_mvcc *s, const struct kt_txn_req *t,
                                     struct kt_arena *a) {
  struct tpath *p = kt_arena_alloc(a, sizeof *p);
  p->succ = true;
  for (uint32_t i = 0; i < t->n_compare && p->succ; i++)
    p->succ = apply_compare(s, &t->compare[i], s->rev);
  const struct kt_request_op *ops = p->succ ? t->success : t->failure;
  uint32_t n = p->succ ? t->n_success : t->n_failure;
  p->sub = n ? kt_arena_alloc(a, n * sizeof *p->sub) : NULL;
  for (uint32_t i = 0; i < n; i++)
    p->sub[i] = ops[i].type == KT_OP_TXN ? compare_to_path(s, &ops[i].u.txn, a) : NULL;
  return p;
}

/* Checks along the taken path against the state before the txn (etcd
 * checkRequests with checkPut/checkRange) and sums the quota cost of its puts. */
static int check_path(const struct kt_mvcc *s, const struct kt_txn_req *t, const struct tpath *p,
                      struct kt_arena *a, struct iset *dels, uint64_t *cost, struct kt_err *e) {
  const struct kt_request_op *ops = p->succ ? t->success : t->failure;
  uint32_t n = p->succ ? t->n_success : t->n_failure;
  for (uint32_t i = 0; i < n; i++) {
    const struct kt_request_op *op = &ops[i];
    int rc;
    if (op->type == KT_OP_RANGE) {
      int64_t rev = op->u.range.revision;
      if (rev > s->rev)
        return kt_err_set(e, KT_EFUTUREREV, "%s", kt_strerror(KT_EFUTUREREV));
      if (rev > 0 && rev < s->compact_rev)
        return kt_err_set(e, KT_ECOMPACTED, "%s", kt_strerror(KT_ECOMPACTED));
    } else if (op->type == KT_OP_PUT) {
      const struct kt_put_req *pr = &op->u.put;
      uint32_t vlen = pr->value.n;
      if (pr->ignore_value || pr->ignore_lease) {
        void **slot = kt_index_get(&s->ix, pr->key);
        const struct kent *k = slot ? *slot : NULL;
        /* a delete earlier in the txn removes it first (only a from-key
         * delete can, see check_intervals); etcd panics there */
        if (!k || k_version(k) == 0 || iset_has(dels, pr->key))
          return kt_err_set(e, KT_ENOTFOUND, "key not found");
        if (pr->ignore_value)
          vlen = k->vlen;
      }
      *cost += charge(pr->key.n, vlen);
    } else if (op->type == KT_OP_DELETE) {
      iset_add(a, dels, mk_range(op->u.del.key, op->u.del.range_end));
    } else if (op->type == KT_OP_TXN) {
      if ((rc = check_path(s, &op->u.txn, p->sub[i], a, dels, cost, e)))
        return rc;
    }
  }
  return 0;
}

static void apply_ops(struct wctx *w, const struct kt_txn_req *t, const struct tpath *p,
                      struct kt_txn_resp *resp);

static void apply_one(struct wctx *w, const struct kt_request_op *op, const struct tpath *p,
                      struct kt_response_op *out) {
  struct kt_err e = {0};
  memset(out, 0, sizeof *out);
  out->type = op->type;
  switch (op->type) {
  case KT_OP_RANGE: {
    int rc = do_range(w->s, &op->u.range, view_rev(w), w->a, &out->u.range, &e);
    kt_assert(rc == 0); /* revision checked before any write */
    break;
  }
  case KT_OP_PUT:
    do_put(w, &op->u.put, &out->u.put);
    break;
  case KT_OP_DELETE:
    do_delete(w, &op->u.del, &out->u.del);
    break;
  case KT_OP_TXN:
    apply_ops(w, &op->u.txn, p, &out->u.txn);
    break;
  default:
    kt_assert(0);
  }
}

static void apply_ops(struct wctx *w, const struct kt_txn_req *t, const struct tpath *p,
                      struct kt_txn_resp *resp) {
  const struct kt_request_op *ops = p->succ ? t->success : t->failure;
  uint32_t n = p->succ ? t->n_success : t->n_failure;
  resp->succeeded = p->succ;
  resp->n_responses = n;
  resp->responses = n ? kt_arena_alloc(w->a, n * sizeof *resp->responses) : NULL;
  for (uint32_t i = 0; i < n; i++)
    apply_one(w, &ops[i], p->sub[i], &resp->responses[i]);
}

static int quota_check(struct kt_mvcc *s, uint64_t cost, struct kt_err *e) {
  if (cost == 0)
    return 0;
  if (s->nospace)
    return kt_err_set(e, KT_ENOSPACE, "%s", kt_strerror(KT_ENOSPACE));
  if (s->size + cost > s->cfg.quota_bytes) {
    s->nospace = true;
    return kt_err_set(e, KT_ENOSPACE, "%s", kt_strerror(KT_ENOSPACE));
  }
  return 0;
}

int kt_mvcc_apply(struct kt_mvcc *s, const struct kt_request_op *op, struct kt_arena *a,
                  struct kt_response_op *out, struct kt_err *e) {
  garbage_free(s);
  memset(out, 0, sizeof *out);
  out->type = op->type;
  int rc = kt_mvcc_check(s, op, e); /* includes the NOSPACE rule */
  if (rc)
    return rc;
  struct wctx w = {.s = s, .a = a};
  switch (op->type) {
  case KT_OP_RANGE:
    return do_range(s, &op->u.range, s->rev, a, &out->u.range, e);
  case KT_OP_PUT: {
    const struct kt_put_req *p = &op->u.put;
    uint32_t vlen = p->value.n;
    if (p->ignore_value || p->ignore_lease) {
      void **slot = kt_index_get(&s->ix, p->key);
      const struct kent *k = slot ? *slot : NULL;
      if (!k || k_version(k) == 0)
        return kt_err_set(e, KT_ENOTFOUND, "key not found");
      if (p->ignore_value)
        vlen = k->vlen;
    }
    if ((rc = quota_check(s, charge(p->key.n, vlen), e)))
      return rc;
    do_put(&w, p, &out->u.put);
    break;
  }
  case KT_OP_DELETE:
    do_delete(&w, &op->u.del, &out->u.del);
    break;
  case KT_OP_TXN: {
    struct tpath *p = compare_to_path(s, &op->u.txn, a);
    uint64_t cost = 0;
    struct iset dels = {0};
    if ((rc = check_path(s, &op->u.txn, p, a, &dels, &cost, e)))
      return rc;
    if ((rc = quota_check(s, cost, e)))
      return rc;
    apply_ops(&w, &op->u.txn, p, &out->u.txn);
    break;
  }
  default:
    return kt_err_set(e, KT_EINVAL, "invalid op type %u", op->type);
  }
  if (w.changes > 0)
    s->rev++;
  return 0;
}

int64_t kt_mvcc_delete_keys(struct kt_mvcc *s, const struct kt_bytes *keys, size_t n,
                            struct kt_arena *a) {
  garbage_free(s);
  struct wctx w = {.s = s, .a = a};
  for (size_t i = 0; i < n; i++) {
    struct kt_delete_req r = {.key = keys[i]};
    struct kt_delete_resp res;
    do_delete(&w, &r, &res);
  }
  if (w.changes > 0)
    s->rev++;
  return w.changes;
}

/* ---- compaction ----------------------------------------------------------- */

int kt_mvcc_compact(struct kt_mvcc *s, int64_t rev, struct kt_err *e) {
  if (rev <= s->compact_rev)
    return kt_err_set(e, KT_ECOMPACTED, "%s", kt_strerror(KT_ECOMPACTED));
  if (rev > s->rev)
    return kt_err_set(e, KT_EFUTUREREV, "%s", kt_strerror(KT_EFUTUREREV));
  s->compact_rev = rev;
  deaths_pop(s, rev);
  s->cpending = true; /* (re)start the physical pass from the first key */
  kt_buf_reset(&s->ckey);
  return 0;
}

bool kt_mvcc_compact_pending(const struct kt_mvcc *s) { return s->cpending; }

/* Drops the revisions of k that compaction at rev removes; returns true if
 * nothing remains (the caller removes and frees the key). */
static bool kent_compact(struct kt_mvcc *s, struct kent *k, int64_t rev) {
  struct hist *h = k_hist(k);
  if (k->mod <= rev) { /* the latest is the newest <= rev: all history goes */
    if (h) {
      for (uint32_t i = 0; i < h->n; i++)
        free(h->r[i].val);
      s->revs -= h->n;
      free(h);
      k_set_hist(k, NULL);
    }
    return k_version(k) == 0;
  }
  if (!h)
    return false;
  uint32_t lo = 0, hi = h->n; /* first index with mod > rev */
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (h->r[mid].mod <= rev)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return false;
  uint32_t keep_from = lo - 1; /* newest <= rev */
  if (h->r[keep_from].version == 0)
    keep_from++; /* a tombstone goes too */
  for (uint32_t i = 0; i < keep_from; i++)
    free(h->r[i].val);
  s->revs -= keep_from;
  h->n -= keep_from;
  memmove(h->r, h->r + keep_from, h->n * sizeof(struct hrev));
  if (h->n == 0) {
    free(h);
    k_set_hist(k, NULL);
  } else if (h->n < h->cap / 4) {
    h->cap = KT_MAX(h->n, 2u);
    h = realloc(h, sizeof *h + h->cap * sizeof(struct hrev));
    kt_assert(h != NULL);
    k_set_hist(k, h);
  }
  return false;
}

bool kt_mvcc_compact_step(struct kt_mvcc *s, size_t max_keys) {
  garbage_free(s);
  if (!s->cpending)
    return false;
  /* Collect a batch with one seek (removal invalidates iterators; the
   * records themselves do not move), then compact each key. */
  enum { BATCH = 256 };
  struct kent *batch[BATCH];
  size_t done = 0;
  while (done < max_keys) {
    struct kt_index_it it;
    kt_index_seek(&s->ix, (struct kt_bytes){s->ckey.p, (uint32_t)s->ckey.len}, &it);
    size_t n = 0, want = KT_MIN((size_t)BATCH, max_keys - done);
    for (; n < want && kt_index_valid(&it); kt_index_next(&it))
      batch[n++] = kt_index_item(&it);
    if (n == 0) {
      s->cpending = false;
      kt_buf_reset(&s->ckey);
      return false;
    }
    /* next cursor: the smallest key after the last one is key + "\0" */
    struct kent *last = batch[n - 1];
    kt_buf_reset(&s->ckey);
    kt_buf_append(&s->ckey, k_key(last), k_klen(last));
    kt_buf_append(&s->ckey, "", 1);
    for (size_t i = 0; i < n; i++) {
      struct kent *k = batch[i];
      if (kent_compact(s, k, s->compact_rev)) {
        void *r = kt_index_remove(&s->ix, kkey(k));
        kt_assert(r == k);
        kent_free(k);
        s->revs--;
      }
    }
    done += n;
  }
  return true;
}

/* ---- snapshot: iterate and restore -------------------------------------- */

/* Calls fn for each revision of k that is <= at_rev and survives compaction
 * at compact_rev (the state compaction will leave, whatever its progress). */
static int kent_each(const struct kent *k, int64_t at_rev, int64_t compact_rev,
                     int (*fn)(void *, const struct kt_kvrev *), void *arg) {
  const struct hist *h = k_hist(k);
  uint32_t nh = h ? h->n : 0;
  for (uint32_t i = 0; i <= nh; i++) {
    struct hrev r = i < nh ? h->r[i] : kent_latest(k);
    if (r.mod > at_rev)
      break;
    int64_t next_mod = i + 1 < nh ? h->r[i + 1].mod : (i + 1 == nh ? k->mod : INT64_MAX);
    if (next_mod <= compact_rev)
      continue; /* superseded at or before the compaction */
    if (r.version == 0 && r.mod <= compact_rev)
      continue; /* tombstone compacted away */
    struct kt_kvrev rec = {
        kkey(k),       (struct kt_bytes){r.val, r.vlen}, r.create, r.mod, r.sub, r.version, r.lease,
        r.version == 0};
    int rc = fn(arg, &rec);
    if (rc)
      return rc;
  }
  return 0;
}

int kt_mvcc_iter(const struct kt_mvcc *s, int64_t at_rev, struct kt_mvcc_cursor *cursor,
                 size_t max_keys, struct kt_arena *a,
                 int (*fn)(void *arg, const struct kt_kvrev *rec), void *arg) {
  if (max_keys == 0)
    max_keys = 1;
  struct kt_index_it it;
  kt_index_seek(&s->ix, cursor->started ? cursor->key : (struct kt_bytes){0}, &it);
  for (size_t n = 0; kt_index_valid(&it); kt_index_next(&it), n++) {
    const struct kent *k = kt_index_item(&it);
    if (n == max_keys) {
      cursor->started = true;
      cursor->key.p = kt_arena_dup(a, k_key(k), k_klen(k));
      cursor->key.n = k_klen(k);
      return 1;
    }
    if (kent_each(k, at_rev, s->compact_rev, fn, arg))
      return -1;
  }
  return 0;
}

int kt_mvcc_restore_rec(struct kt_mvcc *s, const struct kt_kvrev *rec, struct kt_err *e) {
  garbage_free(s);
  if (rec->key.n == 0 || rec->key.n > s->cfg.max_key_bytes || rec->value.n > s->cfg.max_value_bytes)
    return kt_err_set(e, KT_ECORRUPT, "snapshot record: bad key or value size");
  if (rec->mod_revision <= 0 || rec->mod_sub < 0 || rec->mod_sub > UINT32_MAX ||
      (rec->tombstone && (rec->version != 0 || rec->value.n)) ||
      (!rec->tombstone && (rec->version <= 0 || rec->create_revision <= 0 ||
                           rec->create_revision > rec->mod_revision)))
    return kt_err_set(e, KT_ECORRUPT, "snapshot record: bad revision fields");
  struct kent *last = s->rlast;
  int c = last ? kt_bytes_cmp(rec->key, kkey(last)) : 1;
  if (c < 0 || (c == 0 && (rec->mod_revision < last->mod || (rec->mod_revision == last->mod &&
                                                             (uint32_t)rec->mod_sub <= last->sub))))
    return kt_err_set(e, KT_ECORRUPT, "snapshot record out of order");
  struct krev kr = {rec->mod_revision, rec->tombstone ? 0 : rec->create_revision,
                    rec->tombstone ? 0 : rec->version, (uint32_t)rec->mod_sub};
  struct kent *nk =
      kent_alloc(rec->key, rec->value.p, rec->value.n, rec->tombstone ? 0 : rec->lease, c == 0, kr);
  if (c == 0) {
    void **slot = kt_index_get(&s->ix, rec->key);
    kt_assert(slot && *slot == last);
    if (k_version(last) != 0)
      s->live--;
    kent_push_old(s, last, nk); /* deaths are rebuilt by restore_done */
    *slot = nk;
  } else {
    kt_index_insert(&s->ix, nk);
  }
  s->rlast = nk;
  if (k_version(nk) != 0)
    s->live++;
  s->size += charge(k_klen(nk), nk->vlen);
  s->revs++;
  return 0;
}

struct rdeath {
  int64_t rev;
  uint64_t bytes;
};

static int death_cmp(const void *a, const void *b) {
  const struct rdeath *x = a, *y = b;
  return x->rev < y->rev ? -1 : x->rev > y->rev;
}

void kt_mvcc_restore_done(struct kt_mvcc *s, int64_t revision, int64_t compact_revision) {
  garbage_free(s);
  s->rev = revision;
  s->compact_rev = compact_revision;
  s->rlast = NULL;
  /* Rebuild the accounting deaths from the restored history: each revision
   * dies at its successor's main revision, a tombstone at its own. */
  free(s->deaths);
  s->deaths = NULL;
  s->dhead = s->dn = s->dcap = 0;
  s->death_total = s->dead_cum = 0;
  size_t n = 0, cap = 0;
  struct rdeath *d = NULL;
  struct kt_index_it it;
  kt_index_seek(&s->ix, (struct kt_bytes){0}, &it);
  for (; kt_index_valid(&it); kt_index_next(&it)) {
    const struct kent *k = kt_index_item(&it);
    const struct hist *h = k_hist(k);
    uint32_t nh = h ? h->n : 0;
    for (uint32_t i = 0; i <= nh; i++) {
      struct hrev r = i < nh ? h->r[i] : kent_latest(k);
      int64_t at = i + 1 < nh ? h->r[i + 1].mod : (i + 1 == nh ? k->mod : 0);
      if (r.version == 0)
        at = r.mod;
      if (at == 0)
        continue;
      if (n == cap) {
        cap = cap ? cap * 2 : 64;
        d = realloc(d, cap * sizeof *d);
        kt_assert(d != NULL);
      }
      d[n++] = (struct rdeath){at, charge(k_klen(k), r.vlen)};
    }
  }
  if (n)
    qsort(d, n, sizeof *d, death_cmp);
  for (size_t i = 0; i < n; i++)
    death_add(s, d[i].rev, d[i].bytes);
  free(d);
  size_t before = s->dhead;
  deaths_pop(s, compact_revision);
  if (s->dhead != before) { /* the records held compacted revisions */
    s->cpending = true;
    kt_buf_reset(&s->ckey);
  }
}

/* ---- hash ---------------------------------------------------------------- */

static void h_bytes(uint64_t *h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) {
    *h ^= b[i];
    *h *= 0x100000001b3ull;
  }
}
static void h_u64(uint64_t *h, uint64_t v) {
  uint8_t b[8];
  kt_put_u64be(b, v);
  h_bytes(h, b, 8);
}

static int hash_rec(void *arg, const struct kt_kvrev *r) {
  uint64_t *h = arg;
  h_u64(h, r->key.n);
  h_bytes(h, r->key.p, r->key.n);
  h_u64(h, r->value.n);
  h_bytes(h, r->value.p, r->value.n);
  h_u64(h, (uint64_t)r->create_revision);
  h_u64(h, (uint64_t)r->mod_revision);
  h_u64(h, (uint64_t)r->mod_sub);
  h_u64(h, (uint64_t)r->version);
  h_u64(h, (uint64_t)r->lease);
  h_u64(h, r->tombstone);
  return 0;
}

static uint64_t hash_seed(int64_t rev, int64_t compact_rev) {
  uint64_t h = 0xcbf29ce484222325ull;
  h_u64(&h, (uint64_t)rev);
  h_u64(&h, (uint64_t)compact_rev);
  return h;
}

uint64_t kt_mvcc_hash(const struct kt_mvcc *s) {
  uint64_t h = hash_seed(s->rev, s->compact_rev);
  struct kt_index_it it;
  kt_index_seek(&s->ix, (struct kt_bytes){0}, &it);
  for (; kt_index_valid(&it); kt_index_next(&it))
    kent_each(kt_index_item(&it), s->rev, s->compact_rev, hash_rec, &h);
  return h;
}

int kt_mvcc_hash_start(const struct kt_mvcc *s, int64_t rev, struct kt_mvcc_hasher *hs,
                       struct kt_err *e) {
  if (rev <= 0)
    rev = s->rev; /* the current revision: fine even if it is the compacted one */
  else if (rev <= s->compact_rev)
    return kt_err_set(e, KT_ECOMPACTED, "%s", kt_strerror(KT_ECOMPACTED));
  if (rev > s->rev)
    return kt_err_set(e, KT_EFUTUREREV, "%s", kt_strerror(KT_EFUTUREREV));
  kt_buf_reset(&hs->key);
  hs->rev = rev;
  hs->compact_rev = s->compact_rev;
  hs->h = hash_seed(rev, s->compact_rev);
  hs->cursor = (struct kt_mvcc_cursor){0};
  hs->done = false;
  return 0;
}

int kt_mvcc_hash_step(const struct kt_mvcc *s, struct kt_mvcc_hasher *hs, size_t max_keys) {
  if (hs->done)
    return 0;
  if (hs->compact_rev != s->compact_rev) { /* a compaction applied meanwhile */
    if (hs->rev <= s->compact_rev)
      return -KT_ECOMPACTED;
    kt_buf_reset(&hs->key);
    hs->compact_rev = s->compact_rev;
    hs->h = hash_seed(hs->rev, s->compact_rev);
    hs->cursor = (struct kt_mvcc_cursor){0};
  }
  if (max_keys == 0)
    max_keys = 1;
  struct kt_index_it it;
  kt_index_seek(&s->ix, hs->cursor.started ? hs->cursor.key : (struct kt_bytes){0}, &it);
  for (size_t n = 0; kt_index_valid(&it); kt_index_next(&it), n++) {
    const struct kent *k = kt_index_item(&it);
    if (n == max_keys) {
      kt_buf_reset(&hs->key);
      kt_buf_append(&hs->key, k_key(k), k_klen(k));
      hs->cursor.started = true;
      hs->cursor.key = (struct kt_bytes){hs->key.p, (uint32_t)hs->key.len};
      return 1;
    }
    kent_each(k, hs->rev, s->compact_rev, hash_rec, &hs->h);
  }
  hs->done = true;
  return 0;
}

void kt_mvcc_hash_done(struct kt_mvcc_hasher *hs) {
  kt_buf_free(&hs->key);
  hs->cursor = (struct kt_mvcc_cursor){0};
}
