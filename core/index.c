/* core/index.c — B+tree, see index.h. */
#include "index.h"

#include <stdlib.h>
#include <string.h>

#define LEAF_MAX 62
#define INNER_MAX 32 /* separators; children = INNER_MAX + 1 */

/* hint[i] is the 4 bytes of item i's key at offset lcp (zero-padded); every
 * key of the leaf shares its first lcp bytes, so hints are ordered like the
 * keys and a lookup binary-searches them without touching the items, then
 * follows one pointer to confirm. lcp may be smaller than the true common
 * prefix (still correct, less selective). */
struct leaf {
  uint32_t n, lcp;
  struct leaf *next;
  uint32_t hint[LEAF_MAX];
  void *items[LEAF_MAX];
};

/* A separator: a private copy of the key plus its first 8 bytes as a
 * big-endian number, so the descent compares inside the node and follows
 * the copy only when the prefixes are equal. */
struct sep {
  uint64_t pfx;
  struct kt_bytes k;
};

struct inner {
  uint32_t n; /* separators */
  struct sep sep[INNER_MAX];
  void *child[INNER_MAX + 1];
};

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  kt_assert(p != NULL);
  return p;
}

/* 4 bytes, not 2: keys that differ only in decimal digits after a long
 * shared prefix ("/registry/pods/p-000123") leave 2 bytes ~100 values, so
 * ~10 items of a leaf share a hint and a lookup follows ~5 item pointers
 * (cache misses) to confirm; 4 bytes make hints nearly unique for 2 more
 * bytes per slot. */
static inline uint32_t hint_of(struct kt_bytes k, uint32_t lcp) {
  uint32_t h = 0;
  for (uint32_t i = 0; i < 4; i++)
    h = h << 8 | (lcp + i < k.n ? k.p[lcp + i] : 0);
  return h;
}

static uint32_t lcp_of(struct kt_bytes a, struct kt_bytes b) {
  uint32_t n = a.n < b.n ? a.n : b.n, i = 0;
  while (i < n && a.p[i] == b.p[i])
    i++;
  return i;
}

/* Moves cnt items (and their hints) from s[si] to d[di]; counts untouched. */
static void lmove(struct leaf *d, uint32_t di, struct leaf *s, uint32_t si, uint32_t cnt) {
  memmove(d->items + di, s->items + si, cnt * sizeof(void *));
  memmove(d->hint + di, s->hint + si, cnt * sizeof(uint32_t));
}

static void rehint(const struct kt_index *ix, struct leaf *l, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; i++)
    l->hint[i] = hint_of(ix->key_of(l->items[i]), l->lcp);
}

/* After items [from, to) arrived from another leaf (hints computed at its
 * lcp): sets lcp to the true common prefix (first vs last key) and
 * recomputes what changed. */
static void refit(const struct kt_index *ix, struct leaf *l, uint32_t from, uint32_t to) {
  if (l->n == 0)
    return;
  uint32_t t = lcp_of(ix->key_of(l->items[0]), ix->key_of(l->items[l->n - 1]));
  if (t != l->lcp) {
    l->lcp = t;
    rehint(ix, l, 0, l->n);
  } else {
    rehint(ix, l, from, to);
  }
}

static inline uint64_t prefix8(struct kt_bytes k) {
  uint8_t b[8] = {0};
  if (k.n)
    memcpy(b, k.p, k.n < 8 ? k.n : 8);
  return kt_get_u64be(b);
}

static struct sep sep_copy(struct kt_index *ix, struct kt_bytes k) {
  uint8_t *p = xmalloc(k.n ? k.n : 1);
  memcpy(p, k.p, k.n);
  ix->node_bytes += k.n;
  return (struct sep){prefix8(k), (struct kt_bytes){p, k.n}};
}

static void sep_free(struct kt_index *ix, struct sep sp) {
  ix->node_bytes -= sp.k.n;
  free((void *)sp.k.p);
}

void kt_index_init(struct kt_index *ix, kt_index_key_fn key_of) {
  memset(ix, 0, sizeof *ix);
  ix->key_of = key_of;
}

static void free_node(struct kt_index *ix, void *node, int h, void (*free_item)(void *)) {
  if (h == 0) {
    struct leaf *l = node;
    if (free_item)
      for (uint32_t i = 0; i < l->n; i++)
        free_item(l->items[i]);
    free(l);
    return;
  }
  struct inner *in = node;
  for (uint32_t i = 0; i <= in->n; i++)
    free_node(ix, in->child[i], h - 1, free_item);
  for (uint32_t i = 0; i < in->n; i++)
    sep_free(ix, in->sep[i]);
  free(in);
}

void kt_index_free(struct kt_index *ix, void (*free_item)(void *)) {
  if (ix->root)
    free_node(ix, ix->root, ix->height, free_item);
  kt_index_key_fn k = ix->key_of;
  kt_index_init(ix, k);
}

/* sep <= key (kp: prefix8(key)), following the separator's copy only
 * when the prefixes are equal. */
static inline bool sep_le(const struct sep *sp, struct kt_bytes key, uint64_t kp) {
  return sp->pfx < kp || (sp->pfx == kp && kt_bytes_cmp(sp->k, key) <= 0);
}

/* Index of the child of `in` that may hold key: number of seps <= key. */
static uint32_t inner_pos(const struct inner *in, struct kt_bytes key, uint64_t kp) {
  uint32_t lo = 0, hi = in->n;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (sep_le(&in->sep[mid], key, kp))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* First position in leaf with item key >= key; *eq set if equal. */
static uint32_t leaf_pos(const struct kt_index *ix, const struct leaf *l, struct kt_bytes key,
                         bool *eq) {
  uint32_t lo = 0, hi = l->n;
  *eq = false;
  /* fast path for a key that is present: search the hints, confirm */
  uint32_t hk = hint_of(key, l->lcp);
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (l->hint[mid] < hk)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (uint32_t i = lo; i < l->n && l->hint[i] == hk; i++) {
    int c = kt_bytes_cmp(ix->key_of(l->items[i]), key);
    if (c == 0) {
      *eq = true;
      return i;
    }
    if (c > 0)
      break;
  }
  lo = 0;
  hi = l->n;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = kt_bytes_cmp(ix->key_of(l->items[mid]), key);
    if (c < 0) {
      lo = mid + 1;
    } else {
      if (c == 0) {
        *eq = true;
        return mid;
      }
      hi = mid;
    }
  }
  return lo;
}

static struct leaf *find_leaf(const struct kt_index *ix, struct kt_bytes key) {
  void *node = ix->root;
  uint64_t kp = prefix8(key);
  for (int h = ix->height; h > 0; h--) {
    struct inner *in = node;
    node = in->child[inner_pos(in, key, kp)];
  }
  return node;
}

void **kt_index_get(const struct kt_index *ix, struct kt_bytes key) {
  if (!ix->root)
    return NULL;
  struct leaf *l = find_leaf(ix, key);
  bool eq;
  uint32_t p = leaf_pos(ix, l, key, &eq);
  return eq ? &l->items[p] : NULL;
}

/* Before splitting the full leaf child ci, moves part of it to a sibling
 * with room (B*-tree style), which keeps leaves ~80% full under random
 * inserts instead of ~69%. Returns true if it moved anything. */
static bool rebalance(struct kt_index *ix, struct inner *in, uint32_t ci) {
  struct leaf *c = in->child[ci];
  if (ci < in->n) {
    struct leaf *r = in->child[ci + 1];
    uint32_t m = (LEAF_MAX - r->n) / 2;
    if (m > 0) {
      lmove(r, m, r, 0, r->n);
      lmove(r, 0, c, c->n - m, m);
      r->n += m;
      c->n -= m;
      refit(ix, r, 0, m);
      sep_free(ix, in->sep[ci]);
      in->sep[ci] = sep_copy(ix, ix->key_of(r->items[0]));
      return true;
    }
  }
  if (ci > 0) {
    struct leaf *l = in->child[ci - 1];
    uint32_t m = (LEAF_MAX - l->n) / 2;
    if (m > 0) {
      lmove(l, l->n, c, 0, m);
      lmove(c, 0, c, m, c->n - m);
      l->n += m;
      c->n -= m;
      refit(ix, l, l->n - m, l->n);
      sep_free(ix, in->sep[ci - 1]);
      in->sep[ci - 1] = sep_copy(ix, ix->key_of(c->items[0]));
      return true;
    }
  }
  return false;
}

/* Inserts into the subtree; if the node splits, returns the new right node
 * and its separator in *sep. *slot receives the item's slot. */
static void *ins(struct kt_index *ix, void *node, int h, struct kt_bytes key, void *item,
                 struct sep *sep, void ***slot) {
  if (h == 0) {
    struct leaf *l = node;
    bool eq = false;
    /* keys arriving in order (a restore, sequential puts) go after the last
     * one: one comparison instead of a search */
    uint32_t p = l->n && kt_bytes_cmp(key, ix->key_of(l->items[l->n - 1])) > 0
                     ? l->n
                     : leaf_pos(ix, l, key, &eq);
    kt_assert(!eq);
    struct leaf *r = NULL, *dst = l;
    if (l->n == LEAF_MAX) {
      r = xmalloc(sizeof *r);
      ix->node_bytes += sizeof *r;
      /* split in the middle, or, for a key after every key of the leaf,
       * leave this leaf full and start the new one with the key alone, so
       * keys inserted in order fill leaves instead of leaving them half
       * empty */
      uint32_t half = p == LEAF_MAX ? LEAF_MAX : LEAF_MAX / 2;
      r->n = LEAF_MAX - half;
      lmove(r, 0, l, half, r->n);
      r->lcp = l->lcp; /* same offset: hints stay valid; refit tightens */
      l->n = half;
      refit(ix, l, 0, 0);
      refit(ix, r, 0, 0);
      r->next = l->next;
      l->next = r;
      if (p > half || p == LEAF_MAX) {
        dst = r;
        p -= half;
      }
    }
    lmove(dst, p + 1, dst, p, dst->n - p);
    dst->items[p] = item;
    if (dst->n == 0) {
      dst->lcp = key.n;
    } else if (p == 0 || p == dst->n) { /* at an end: the common prefix may shrink */
      uint32_t t = lcp_of(key, ix->key_of(dst->items[p == 0 ? 1 : p - 1]));
      if (t < dst->lcp) {
        dst->lcp = t;
        dst->n++;
        rehint(ix, dst, 0, dst->n);
        dst->n--;
      }
    }
    dst->hint[p] = hint_of(key, dst->lcp);
    dst->n++;
    *slot = &dst->items[p];
    if (r)
      *sep = sep_copy(ix, ix->key_of(r->items[0]));
    return r;
  }
  struct inner *in = node;
  uint64_t kp = prefix8(key);
  /* in order (see the leaf case): after the last separator, one comparison */
  uint32_t ci = in->n && sep_le(&in->sep[in->n - 1], key, kp) ? in->n : inner_pos(in, key, kp);
  if (h == 1 && ((struct leaf *)in->child[ci])->n == LEAF_MAX && rebalance(ix, in, ci))
    ci = inner_pos(in, key, kp);
  struct sep csep;
  void *cr = ins(ix, in->child[ci], h - 1, key, item, &csep, slot);
  if (!cr)
    return NULL;
  /* insert csep at ci, child cr at ci + 1 */
  if (in->n < INNER_MAX) {
    memmove(in->sep + ci + 1, in->sep + ci, (in->n - ci) * sizeof(struct sep));
    memmove(in->child + ci + 2, in->child + ci + 1, (in->n - ci) * sizeof(void *));
    in->sep[ci] = csep;
    in->child[ci + 1] = cr;
    in->n++;
    return NULL;
  }
  /* full: build a temporary of INNER_MAX + 1 seps, split in the middle */
  struct sep ts[INNER_MAX + 1];
  void *tc[INNER_MAX + 2];
  memcpy(ts, in->sep, ci * sizeof(struct sep));
  ts[ci] = csep;
  memcpy(ts + ci + 1, in->sep + ci, (in->n - ci) * sizeof(struct sep));
  memcpy(tc, in->child, (ci + 1) * sizeof(void *));
  tc[ci + 1] = cr;
  memcpy(tc + ci + 2, in->child + ci + 1, (in->n - ci) * sizeof(void *));
  /* (a child added at the right end: this node stays nearly full, as for
   * leaves) */
  uint32_t total = INNER_MAX + 1, mid = ci == INNER_MAX ? INNER_MAX - 1 : total / 2;
  struct inner *r = xmalloc(sizeof *r);
  ix->node_bytes += sizeof *r;
  in->n = mid;
  memcpy(in->sep, ts, mid * sizeof(struct sep));
  memcpy(in->child, tc, (mid + 1) * sizeof(void *));
  r->n = total - mid - 1;
  memcpy(r->sep, ts + mid + 1, r->n * sizeof(struct sep));
  memcpy(r->child, tc + mid + 1, (r->n + 1) * sizeof(void *));
  *sep = ts[mid];
  return r;
}

void **kt_index_insert(struct kt_index *ix, void *item) {
  struct kt_bytes key = ix->key_of(item);
  void **slot = NULL;
  if (!ix->root) {
    struct leaf *l = xmalloc(sizeof *l);
    ix->node_bytes += sizeof *l;
    l->n = 0;
    l->lcp = 0;
    l->next = NULL;
    ix->root = l;
    ix->height = 0;
  }
  struct sep sep;
  void *r = ins(ix, ix->root, ix->height, key, item, &sep, &slot);
  if (r) {
    struct inner *nr = xmalloc(sizeof *nr);
    ix->node_bytes += sizeof *nr;
    nr->n = 1;
    nr->sep[0] = sep;
    nr->child[0] = ix->root;
    nr->child[1] = r;
    ix->root = nr;
    ix->height++;
  }
  ix->count++;
  return slot;
}

static uint32_t node_n(void *node, int h) {
  return h == 0 ? ((struct leaf *)node)->n : ((struct inner *)node)->n;
}

/* Merges child i+1 of `in` into child i if they fit; returns true if merged. */
static bool try_merge(struct kt_index *ix, struct inner *in, uint32_t i, int ch) {
  void *a = in->child[i], *b = in->child[i + 1];
  if (ch == 0) {
    struct leaf *la = a, *lb = b;
    if (la->n + lb->n > LEAF_MAX)
      return false;
    lmove(la, la->n, lb, 0, lb->n);
    la->n += lb->n;
    refit(ix, la, la->n - lb->n, la->n);
    la->next = lb->next;
    free(lb);
    ix->node_bytes -= sizeof *lb;
    sep_free(ix, in->sep[i]);
  } else {
    struct inner *ia = a, *ib = b;
    if (ia->n + ib->n + 1 > INNER_MAX)
      return false;
    ia->sep[ia->n] = in->sep[i]; /* pulled down */
    memcpy(ia->sep + ia->n + 1, ib->sep, ib->n * sizeof(struct sep));
    memcpy(ia->child + ia->n + 1, ib->child, (ib->n + 1) * sizeof(void *));
    ia->n += ib->n + 1;
    free(ib);
    ix->node_bytes -= sizeof *ib;
  }
  memmove(in->sep + i, in->sep + i + 1, (in->n - i - 1) * sizeof(struct sep));
  memmove(in->child + i + 1, in->child + i + 2, (in->n - i - 1) * sizeof(void *));
  in->n--;
  return true;
}

static void *rem(struct kt_index *ix, void *node, int h, struct kt_bytes key) {
  if (h == 0) {
    struct leaf *l = node;
    bool eq;
    uint32_t p = leaf_pos(ix, l, key, &eq);
    if (!eq)
      return NULL;
    void *item = l->items[p];
    lmove(l, p, l, p + 1, l->n - p - 1);
    l->n--;
    return item;
  }
  struct inner *in = node;
  uint32_t ci = inner_pos(in, key, prefix8(key));
  void *item = rem(ix, in->child[ci], h - 1, key);
  if (!item)
    return NULL;
  uint32_t min = (h - 1 == 0) ? LEAF_MAX / 4 : INNER_MAX / 4;
  uint32_t cn = node_n(in->child[ci], h - 1);
  if (cn < min || (h - 1 == 0 && cn == 0)) {
    if (!(ci < in->n && try_merge(ix, in, ci, h - 1)) && ci > 0)
      try_merge(ix, in, ci - 1, h - 1);
  }
  return item;
}

void *kt_index_remove(struct kt_index *ix, struct kt_bytes key) {
  if (!ix->root)
    return NULL;
  void *item = rem(ix, ix->root, ix->height, key);
  if (!item)
    return NULL;
  ix->count--;
  while (ix->height > 0 && ((struct inner *)ix->root)->n == 0) {
    struct inner *in = ix->root;
    ix->root = in->child[0];
    ix->height--;
    free(in);
    ix->node_bytes -= sizeof *in;
  }
  if (ix->height == 0 && ((struct leaf *)ix->root)->n == 0) {
    free(ix->root);
    ix->node_bytes -= sizeof(struct leaf);
    ix->root = NULL;
  }
  return item;
}

void kt_index_seek(const struct kt_index *ix, struct kt_bytes key, struct kt_index_it *it) {
  it->leaf = NULL;
  it->pos = 0;
  if (!ix->root)
    return;
  struct leaf *l = find_leaf(ix, key);
  bool eq;
  uint32_t p = leaf_pos(ix, l, key, &eq);
  while (l && p >= l->n) { /* past this leaf (or an empty leaf) */
    l = l->next;
    p = 0;
  }
  it->leaf = l;
  it->pos = p;
}

void *kt_index_item(const struct kt_index_it *it) {
  const struct leaf *l = it->leaf;
  return l->items[it->pos];
}

void kt_index_next(struct kt_index_it *it) {
  struct leaf *l = it->leaf;
  it->pos++;
  while (l && it->pos >= l->n) {
    l = l->next;
    it->pos = 0;
  }
  it->leaf = l;
}

/* Checks the subtree's keys lie in [lo, hi) (NULL bounds = open); counts items. */
static const char *verify(const struct kt_index *ix, void *node, int h, const struct kt_bytes *lo,
                          const struct kt_bytes *hi, uint64_t *count, struct leaf **prev) {
  if (h == 0) {
    struct leaf *l = node;
    if (*prev && (*prev)->next != l)
      return "leaf chain broken";
    *prev = l;
    for (uint32_t i = 0; i < l->n; i++) {
      struct kt_bytes k = ix->key_of(l->items[i]);
      if (lo && kt_bytes_cmp(k, *lo) < 0)
        return "leaf key below separator";
      if (hi && kt_bytes_cmp(k, *hi) >= 0)
        return "leaf key above separator";
      if (i > 0 && kt_bytes_cmp(ix->key_of(l->items[i - 1]), k) >= 0)
        return "leaf keys not increasing";
      if (lcp_of(k, ix->key_of(l->items[0])) < l->lcp)
        return "leaf key does not share the leaf prefix";
      if (l->hint[i] != hint_of(k, l->lcp))
        return "leaf hint wrong";
    }
    *count += l->n;
    return NULL;
  }
  struct inner *in = node;
  if (in->n > INNER_MAX)
    return "inner overfull";
  for (uint32_t i = 0; i <= in->n; i++) {
    const struct kt_bytes *clo = i == 0 ? lo : &in->sep[i - 1].k;
    const struct kt_bytes *chi = i == in->n ? hi : &in->sep[i].k;
    if (i < in->n && in->sep[i].pfx != prefix8(in->sep[i].k))
      return "separator prefix wrong";
    const char *err = verify(ix, in->child[i], h - 1, clo, chi, count, prev);
    if (err)
      return err;
  }
  return NULL;
}

const char *kt_index_verify(const struct kt_index *ix) {
  if (!ix->root)
    return ix->count == 0 ? NULL : "empty root with count";
  uint64_t count = 0;
  struct leaf *prev = NULL;
  const char *err = verify(ix, ix->root, ix->height, NULL, NULL, &count, &prev);
  if (err)
    return err;
  if (prev->next != NULL)
    return "last leaf has next";
  return count == ix->count ? NULL : "count mismatch";
}
