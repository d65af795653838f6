/* test/sim/linz.c — see linz.h for the model, the search and its limits.
 *
 * Included (#include "../sim/linz.c") by the tests that use it, as sim.c is.
 *
 * Representation: keys and values are interned to small integers (values:
 * -1 = absent). A model state is a flat int64 array of S = 1 + 4 * keys
 * words: [revision, then per key: value, create, mod, version], so states
 * are copied, compared and hashed as plain memory.
 */
#include "linz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_PENDING = 0, ST_OK, ST_FAILED, ST_UNKNOWN };

struct lkv {
  int64_t value; /* -1: absent */
  int64_t create, mod, version;
};

struct lcmp {
  uint32_t key;
  uint8_t target, result;
  int64_t value; /* interned value, for VALUE */
  int64_t num;
};

struct ltxop {
  uint8_t kind;
  uint32_t key;
  int64_t value;
};

struct lop {
  int client;
  int64_t call_t, ret_t;
  uint64_t call_seq, ret_seq;
  uint8_t state, kind;
  bool prev_kv, serializable;
  uint32_t key;
  int64_t value;
  uint32_t cmp0, n_cmp, then0, n_then, els0, n_els; /* into h->cmps, h->txops */
  /* result (ST_OK) */
  int64_t revision, deleted;
  bool succeeded;
  struct lkv kv;
  uint32_t gets0, n_gets; /* into h->kvs */
};

struct kt_linz_hist {
  int64_t start_rev;
  uint64_t seq;
  struct lop *ops;
  uint32_t n_ops, cap_ops;
  struct lcmp *cmps;
  uint32_t n_cmps, cap_cmps;
  struct ltxop *txops;
  uint32_t n_txops, cap_txops;
  struct lkv *kvs;
  uint32_t n_kvs, cap_kvs;
  char *keys[KT_LINZ_MAX_KEYS];
  uint32_t n_keys;
  char **vals; /* interned values, id = index */
  uint32_t n_vals, cap_vals;
  uint32_t *vtab; /* hash: value id + 1, 0 = empty */
  uint32_t vtab_cap;
};

#define GROW(arr, n, cap)                                                                          \
  do {                                                                                             \
    if ((n) == (cap)) {                                                                            \
      (cap) = (cap) ? 2 * (cap) : 16;                                                              \
      (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));                                       \
      kt_assert(arr);                                                                              \
    }                                                                                              \
  } while (0)

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  kt_assert(d);
  memcpy(d, s, n);
  return d;
}

static uint32_t intern_key(struct kt_linz_hist *h, const char *k) {
  kt_assert(k);
  for (uint32_t i = 0; i < h->n_keys; i++)
    if (strcmp(h->keys[i], k) == 0)
      return i;
  kt_assert(h->n_keys < KT_LINZ_MAX_KEYS);
  h->keys[h->n_keys] = dupstr(k);
  return h->n_keys++;
}

static int64_t intern_val(struct kt_linz_hist *h, const char *v) {
  if (!v)
    v = "";
  if (2 * (h->n_vals + 1) > h->vtab_cap) { /* rehash at half full */
    uint32_t cap = h->vtab_cap ? 2 * h->vtab_cap : 256;
    uint32_t *t = calloc(cap, sizeof *t);
    kt_assert(t);
    for (uint32_t i = 0; i < h->n_vals; i++) {
      uint32_t s = (uint32_t)hash_bytes(h->vals[i], strlen(h->vals[i]), 14695981039346656037ull);
      while (t[s & (cap - 1)])
        s++;
      t[s & (cap - 1)] = i + 1;
    }
    free(h->vtab);
    h->vtab = t;
    h->vtab_cap = cap;
  }
  uint32_t s = (uint32_t)hash_bytes(v, strlen(v), 14695981039346656037ull);
  for (;; s++) {
    uint32_t e = h->vtab[s & (h->vtab_cap - 1)];
    if (!e)
      break;
    if (strcmp(h->vals[e - 1], v) == 0)
      return e - 1;
  }
  GROW(h->vals, h->n_vals, h->cap_vals);
  h->vals[h->n_vals] = dupstr(v);
  h->vtab[s & (h->vtab_cap - 1)] = h->n_vals + 1;
  return h->n_vals++;
}

struct kt_linz_hist *kt_linz_new(int64_t start_revision) {
  struct kt_linz_hist *h = calloc(1, sizeof *h);
  kt_assert(h);
  h->start_rev = start_revision;
  return h;
}

void kt_linz_free(struct kt_linz_hist *h) {
  if (!h)
    return;
  for (uint32_t i = 0; i < h->n_keys; i++)
    free(h->keys[i]);
  for (uint32_t i = 0; i < h->n_vals; i++)
    free(h->vals[i]);
  free(h->vals);
  free(h->vtab);
  free(h->ops);
  free(h->cmps);
  free(h->txops);
  free(h->kvs);
  free(h);
}

static uint32_t add_txops(struct kt_linz_hist *h, const struct kt_linz_txop *v, uint32_t n) {
  kt_assert(n <= KT_LINZ_MAX_TXN_OPS);
  uint32_t first = h->n_txops;
  for (uint32_t i = 0; i < n; i++) {
    kt_assert(v[i].kind == KT_LINZ_PUT || v[i].kind == KT_LINZ_DELETE || v[i].kind == KT_LINZ_GET);
    GROW(h->txops, h->n_txops, h->cap_txops);
    h->txops[h->n_txops++] =
        (struct ltxop){v[i].kind, intern_key(h, v[i].key),
                       v[i].kind == KT_LINZ_PUT ? intern_val(h, v[i].value) : -1};
  }
  return first;
}

uint32_t kt_linz_call(struct kt_linz_hist *h, int client, int64_t time,
                      const struct kt_linz_op *op) {
  kt_assert(op->kind >= KT_LINZ_PUT && op->kind <= KT_LINZ_TXN);
  GROW(h->ops, h->n_ops, h->cap_ops);
  struct lop *o = &h->ops[h->n_ops];
  memset(o, 0, sizeof *o);
  o->client = client;
  o->call_t = time;
  o->call_seq = ++h->seq;
  o->kind = op->kind;
  o->prev_kv = op->prev_kv;
  o->serializable = op->kind == KT_LINZ_GET && op->serializable;
  o->value = -1;
  if (op->kind != KT_LINZ_TXN)
    o->key = intern_key(h, op->key);
  if (op->kind == KT_LINZ_PUT)
    o->value = intern_val(h, op->value);
  if (op->kind == KT_LINZ_TXN) {
    kt_assert(op->n_cmp <= KT_LINZ_MAX_TXN_OPS);
    o->cmp0 = h->n_cmps;
    o->n_cmp = op->n_cmp;
    for (uint32_t i = 0; i < op->n_cmp; i++) {
      const struct kt_linz_cmp *c = &op->cmp[i];
      kt_assert(c->target == KT_CMP_VALUE || c->target == KT_CMP_VERSION ||
                c->target == KT_CMP_CREATE || c->target == KT_CMP_MOD);
      kt_assert(c->result <= KT_CMP_NOT_EQUAL);
      GROW(h->cmps, h->n_cmps, h->cap_cmps);
      h->cmps[h->n_cmps++] =
          (struct lcmp){intern_key(h, c->key), c->target, c->result,
                        c->target == KT_CMP_VALUE ? intern_val(h, c->value) : -1, c->num};
    }
    o->then0 = add_txops(h, op->then, op->n_then);
    o->n_then = op->n_then;
    o->els0 = add_txops(h, op->els, op->n_els);
    o->n_els = op->n_els;
  }
  return h->n_ops++;
}

static struct lkv to_lkv(struct kt_linz_hist *h, const struct kt_linz_kv *kv) {
  if (!kv->present)
    return (struct lkv){-1, 0, 0, 0};
  return (struct lkv){intern_val(h, kv->value), kv->create_revision, kv->mod_revision, kv->version};
}

void kt_linz_return(struct kt_linz_hist *h, uint32_t id, int64_t time,
                    const struct kt_linz_result *res) {
  kt_assert(id < h->n_ops && h->ops[id].state == ST_PENDING);
  struct lop *o = &h->ops[id];
  o->state = ST_OK;
  o->ret_t = time;
  o->ret_seq = ++h->seq;
  o->revision = res->revision;
  o->deleted = res->deleted;
  o->succeeded = res->succeeded;
  o->kv = to_lkv(h, &res->kv);
  o->gets0 = h->n_kvs;
  o->n_gets = res->n_gets;
  for (uint32_t i = 0; i < res->n_gets; i++) {
    struct lkv kv = to_lkv(h, &res->gets[i]); /* may grow h->vals, not h->kvs */
    GROW(h->kvs, h->n_kvs, h->cap_kvs);
    h->kvs[h->n_kvs++] = kv;
  }
}

void kt_linz_fail(struct kt_linz_hist *h, uint32_t id) {
  kt_assert(id < h->n_ops && h->ops[id].state == ST_PENDING);
  h->ops[id].state = ST_FAILED;
}

void kt_linz_unknown(struct kt_linz_hist *h, uint32_t id) {
  kt_assert(id < h->n_ops && h->ops[id].state == ST_PENDING);
  h->ops[id].state = ST_UNKNOWN;
}

/* ---- describing ops and states ---- */

static void bp(char *buf, size_t n, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void bp(char *buf, size_t n, size_t *off, const char *fmt, ...) {
  if (*off + 1 >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *off, n - *off, fmt, ap);
  va_end(ap);
  if (w > 0)
    *off = KT_MIN(n - 1, *off + (size_t)w);
}

static void bp_kv(const struct kt_linz_hist *h, char *buf, size_t n, size_t *off,
                  const struct lkv *kv) {
  if (kv->value < 0)
    bp(buf, n, off, "absent");
  else
    bp(buf, n, off, "\"%s\" (c %lld m %lld v %lld)", h->vals[kv->value], (long long)kv->create,
       (long long)kv->mod, (long long)kv->version);
}

static const char *const CMP_TARGET[] = {"version", "create", "mod", "value"};
static const char *const CMP_OP[] = {"==", ">", "<", "!="};

static void bp_txops(const struct kt_linz_hist *h, char *buf, size_t n, size_t *off, uint32_t first,
                     uint32_t cnt) {
  for (uint32_t i = 0; i < cnt; i++) {
    const struct ltxop *t = &h->txops[first + i];
    const char *k = h->keys[t->key];
    if (t->kind == KT_LINZ_PUT)
      bp(buf, n, off, "%sput %s=\"%s\"", i ? ", " : "", k, h->vals[t->value]);
    else
      bp(buf, n, off, "%s%s %s", i ? ", " : "", t->kind == KT_LINZ_GET ? "get" : "delete", k);
  }
}

const char *kt_linz_describe(const struct kt_linz_hist *h, uint32_t id, char *buf, size_t n) {
  size_t off = 0;
  buf[0] = 0;
  kt_assert(id < h->n_ops);
  const struct lop *o = &h->ops[id];
  bp(buf, n, &off, "#%u c%d ", id, o->client);
  const char *k = o->kind == KT_LINZ_TXN ? "" : h->keys[o->key];
  switch (o->kind) {
  case KT_LINZ_PUT:
    bp(buf, n, &off, "put(%s=\"%s\"%s)", k, h->vals[o->value], o->prev_kv ? ", prev_kv" : "");
    break;
  case KT_LINZ_DELETE:
    bp(buf, n, &off, "delete(%s)", k);
    break;
  case KT_LINZ_GET:
    bp(buf, n, &off, "%s(%s)", o->serializable ? "serializable get" : "get", k);
    break;
  default:
    bp(buf, n, &off, "txn(if ");
    for (uint32_t i = 0; i < o->n_cmp; i++) {
      const struct lcmp *c = &h->cmps[o->cmp0 + i];
      bp(buf, n, &off, "%s%s.%s %s ", i ? " && " : "", h->keys[c->key], CMP_TARGET[c->target],
         CMP_OP[c->result]);
      if (c->target == KT_CMP_VALUE)
        bp(buf, n, &off, "\"%s\"", h->vals[c->value]);
      else
        bp(buf, n, &off, "%lld", (long long)c->num);
    }
    bp(buf, n, &off, " then ");
    bp_txops(h, buf, n, &off, o->then0, o->n_then);
    bp(buf, n, &off, " else ");
    bp_txops(h, buf, n, &off, o->els0, o->n_els);
    bp(buf, n, &off, ")");
  }
  bp(buf, n, &off, " -> ");
  if (o->state == ST_FAILED) {
    bp(buf, n, &off, "failed (dropped)");
  } else if (o->state != ST_OK) {
    bp(buf, n, &off, "? (outcome unknown) [t=%lld..]", (long long)o->call_t);
  } else {
    switch (o->kind) {
    case KT_LINZ_PUT:
      if (o->prev_kv) {
        bp(buf, n, &off, "prev ");
        bp_kv(h, buf, n, &off, &o->kv);
        bp(buf, n, &off, " ");
      }
      break;
    case KT_LINZ_DELETE:
      bp(buf, n, &off, "deleted %lld ", (long long)o->deleted);
      break;
    case KT_LINZ_GET:
      bp_kv(h, buf, n, &off, &o->kv);
      bp(buf, n, &off, " ");
      break;
    default:
      bp(buf, n, &off, "%s ", o->succeeded ? "succeeded" : "failed compare");
      for (uint32_t i = 0; i < o->n_gets; i++) {
        bp(buf, n, &off, "get[%u] ", i);
        bp_kv(h, buf, n, &off, &h->kvs[o->gets0 + i]);
        bp(buf, n, &off, " ");
      }
    }
    bp(buf, n, &off, "rev %lld [t=%lld..%lld]", (long long)o->revision, (long long)o->call_t,
       (long long)o->ret_t);
  }
  return buf;
}

/* ---- the model ---- */

/* Key k's record in state st. */
#define KREC(st, k) ((struct lkv *)((st) + 1 + 4 * (size_t)(k)))

static bool kv_eq(const struct lkv *a, const struct lkv *b) {
  if (a->value < 0 || b->value < 0)
    return a->value < 0 && b->value < 0;
  return a->value == b->value && a->create == b->create && a->mod == b->mod &&
         a->version == b->version;
}

static void m_put(int64_t *st, uint32_t k, int64_t v, int64_t rev) {
  struct lkv *r = KREC(st, k);
  if (r->value < 0) {
    r->create = rev;
    r->version = 1;
  } else {
    r->version++;
  }
  r->mod = rev;
  r->value = v;
}

static bool m_delete(int64_t *st, uint32_t k) {
  struct lkv *r = KREC(st, k);
  if (r->value < 0)
    return false;
  *r = (struct lkv){-1, 0, 0, 0};
  return true;
}

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

static bool m_compare(const struct kt_linz_hist *h, const int64_t *st, const struct lcmp *c) {
  const struct lkv *r = KREC(st, c->key);
  int res;
  if (c->target == KT_CMP_VALUE) {
    if (r->value < 0)
      return false; /* etcd: a VALUE compare on an absent key is false */
    res = strcmp(h->vals[r->value], h->vals[c->value]);
  } else {
    int64_t x = c->target == KT_CMP_VERSION  ? r->version
                : c->target == KT_CMP_CREATE ? r->create
                                             : r->mod;
    res = cmp_i64(x, c->num);
  }
  switch (c->result) {
  case KT_CMP_EQUAL:
    return res == 0;
  case KT_CMP_NOT_EQUAL:
    return res != 0;
  case KT_CMP_GREATER:
    return res > 0;
  default:
    return res < 0;
  }
}

struct why {
  const struct kt_linz_hist *h;
  char *buf; /* NULL: the search (no text) */
  size_t n, off;
};

static bool mismatch(struct why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool mismatch(struct why *w, const char *fmt, ...) {
  if (w->buf && w->off + 1 < w->n) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(w->buf + w->off, w->n - w->off, fmt, ap);
    va_end(ap);
    if (k > 0)
      w->off = KT_MIN(w->n - 1, w->off + (size_t)k);
  }
  return false;
}

static bool kv_check(struct why *w, const char *what, const struct lkv *got,
                     const struct lkv *model) {
  if (kv_eq(got, model))
    return true;
  if (w->buf) {
    mismatch(w, "%s: saw ", what);
    bp_kv(w->h, w->buf, w->n, &w->off, got);
    mismatch(w, ", the model has ");
    bp_kv(w->h, w->buf, w->n, &w->off, model);
  }
  return false;
}

static bool rev_check(struct why *w, const struct lop *o, int64_t model_rev) {
  if (o->revision == model_rev)
    return true;
  return mismatch(w, "header revision %lld, the model gives %lld", (long long)o->revision,
                  (long long)model_rev);
}

/* Applies op o to state `in`, writing `out`; with check (a returned op),
 * true iff the recorded result is the model's. Unknown-outcome ops only
 * change the state. w->buf, when set, gets the reason of a mismatch. */
static bool step(const struct kt_linz_hist *h, size_t S, const int64_t *in, int64_t *out,
                 const struct lop *o, struct why *w) {
  memcpy(out, in, S * sizeof *out);
  bool check = o->state == ST_OK;
  int64_t rev = in[0];
  switch (o->kind) {
  case KT_LINZ_PUT: {
    struct lkv prev = *KREC(out, o->key);
    m_put(out, o->key, o->value, rev + 1);
    out[0] = rev + 1;
    if (!check)
      return true;
    if (!rev_check(w, o, rev + 1))
      return false;
    return !o->prev_kv || kv_check(w, "prev_kv", &o->kv, &prev);
  }
  case KT_LINZ_DELETE: {
    bool d = m_delete(out, o->key);
    if (d)
      out[0] = rev + 1;
    if (!check)
      return true;
    if (o->deleted != (int64_t)d)
      return mismatch(w, "deleted %lld, the model deletes %d", (long long)o->deleted, (int)d);
    return rev_check(w, o, out[0]);
  }
  case KT_LINZ_GET:
    return !check || (kv_check(w, "value", &o->kv, KREC(in, o->key)) && rev_check(w, o, rev));
  default:
    break;
  }
  bool ok = true;
  for (uint32_t i = 0; i < o->n_cmp && ok; i++)
    ok = m_compare(h, in, &h->cmps[o->cmp0 + i]);
  if (check && ok != o->succeeded)
    return mismatch(w, "%s, the model's compares %s", o->succeeded ? "succeeded" : "failed",
                    ok ? "hold" : "fail");
  uint32_t first = ok ? o->then0 : o->els0, cnt = ok ? o->n_then : o->n_els, gets = 0;
  bool changed = false;
  for (uint32_t i = 0; i < cnt; i++) {
    const struct ltxop *t = &h->txops[first + i];
    if (t->kind == KT_LINZ_PUT) {
      m_put(out, t->key, t->value, rev + 1);
      changed = true;
    } else if (t->kind == KT_LINZ_DELETE) {
      changed |= m_delete(out, t->key);
    } else if (check) {
      if (gets >= o->n_gets)
        return mismatch(w, "%u gets returned, the branch has more", o->n_gets);
      char what[32];
      snprintf(what, sizeof what, "get[%u]", gets);
      if (!kv_check(w, what, &h->kvs[o->gets0 + gets], KREC(out, t->key)))
        return false;
      gets++;
    }
  }
  if (changed)
    out[0] = rev + 1;
  if (!check)
    return true;
  if (gets != o->n_gets)
    return mismatch(w, "%u gets returned, the branch has %u", o->n_gets, gets);
  return rev_check(w, o, out[0]);
}

/* ---- the search ---- */

/* Revision pruning: a returned op with header revision R can only take
 * effect while the model revision is <= R (R - 1 for a write that changes
 * something, R otherwise), and the model revision never goes down. So once
 * the model revision passes R with that op not placed, the branch is dead.
 * A Fenwick tree counts the unplaced returned ops by R; a step that raises
 * the revision to r' is refused if any has R < r'. */
struct fenwick {
  uint32_t *t;
  size_t n;
  int64_t base; /* revision of index 1 */
};

static size_t fen_idx(const struct fenwick *f, int64_t rev) {
  if (rev < f->base)
    return 1;
  if (rev - f->base + 1 >= (int64_t)f->n)
    return f->n;
  return (size_t)(rev - f->base + 1);
}

static void fen_add(struct fenwick *f, int64_t rev, int32_t d) {
  for (size_t i = fen_idx(f, rev); i <= f->n; i += i & (~i + 1))
    f->t[i] = (uint32_t)((int32_t)f->t[i] + d);
}

/* How many unplaced returned ops have R <= rev. */
static uint32_t fen_upto(const struct fenwick *f, int64_t rev) {
  uint32_t s = 0;
  for (size_t i = fen_idx(f, rev); i > 0; i -= i & (~i + 1))
    s += f->t[i];
  return s;
}

struct lev {
  uint32_t op; /* dense index */
  bool call;
  int64_t t;
  uint64_t seq;
};

static int lev_cmp(const void *pa, const void *pb) {
  const struct lev *a = pa, *b = pb;
  if (a->t != b->t)
    return a->t < b->t ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The memo: (linearized bitset, state) pairs already explored. */
struct memo {
  size_t W, S;    /* words per bitset, per state */
  uint64_t *data; /* entries of W + S words */
  size_t n, cap;  /* entries */
  uint32_t *tab;  /* entry + 1, 0 = empty */
  size_t tab_cap; /* power of two */
};

static uint64_t memo_hash(const struct memo *m, const uint64_t *bits, const int64_t *st) {
  uint64_t h = hash_bytes(bits, m->W * 8, 14695981039346656037ull);
  h = hash_bytes(st, m->S * 8, h);
  return h ^ (h >> 29);
}

/* Adds the pair; false if it was there. */
static bool memo_add(struct memo *m, const uint64_t *bits, const int64_t *st) {
  size_t E = m->W + m->S;
  if (2 * (m->n + 1) > m->tab_cap) {
    size_t cap = m->tab_cap ? 2 * m->tab_cap : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    kt_assert(t);
    for (size_t i = 0; i < m->n; i++) {
      const uint64_t *e = m->data + i * E;
      size_t s = memo_hash(m, e, (const int64_t *)(e + m->W));
      while (t[s & (cap - 1)])
        s++;
      t[s & (cap - 1)] = (uint32_t)(i + 1);
    }
    free(m->tab);
    m->tab = t;
    m->tab_cap = cap;
  }
  size_t s = memo_hash(m, bits, st);
  for (;; s++) {
    uint32_t e = m->tab[s & (m->tab_cap - 1)];
    if (!e)
      break;
    const uint64_t *d = m->data + (size_t)(e - 1) * E;
    if (memcmp(d, bits, m->W * 8) == 0 && memcmp(d + m->W, st, m->S * 8) == 0)
      return false;
  }
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 256;
    m->data = realloc(m->data, m->cap * E * sizeof *m->data);
    kt_assert(m->data);
  }
  memcpy(m->data + m->n * E, bits, m->W * 8);
  memcpy(m->data + m->n * E + m->W, st, m->S * 8);
  m->tab[s & (m->tab_cap - 1)] = (uint32_t)(++m->n);
  return true;
}

static void bp_state(const struct kt_linz_hist *h, char *buf, size_t n, size_t *off,
                     const int64_t *st) {
  bp(buf, n, off, "rev %lld", (long long)st[0]);
  for (uint32_t k = 0; k < h->n_keys; k++) {
    bp(buf, n, off, ", %s=", h->keys[k]);
    bp_kv(h, buf, n, off, KREC(st, k));
  }
}

/* For a violation's explanation: why op d (dense) cannot go next from the
 * state after the longest order found. */
struct explain {
  const struct kt_linz_hist *h;
  size_t S;
  const uint32_t *orig;
  uint32_t m;
  const bool *placed;
  const struct lev *evs;
  const uint32_t *ret_node, *call_node;
  const int64_t *st;
  int64_t *tmp; /* 2 * S scratch */
  struct why w;
};

static void explain_candidate(struct explain *x, uint32_t d) {
  const struct kt_linz_hist *h = x->h;
  const struct lop *o = &h->ops[x->orig[d]];
  if (!step(h, x->S, x->st, x->tmp, o, &x->w))
    return; /* the reason is written */
  int64_t rev = x->tmp[0];
  /* The unplaced returned op with the smallest revision below the new one. */
  uint32_t blocker = UINT32_MAX;
  for (uint32_t e = 0; e < x->m; e++) {
    const struct lop *b = &h->ops[x->orig[e]];
    if (e != d && !x->placed[e] && b->state == ST_OK && b->revision < rev &&
        (blocker == UINT32_MAX || b->revision < h->ops[x->orig[blocker]].revision))
      blocker = e;
  }
  if (blocker == UINT32_MAX) {
    mismatch(&x->w, "it fits here, but no order of the remaining ops does after it");
    return;
  }
  char desc[512];
  const struct lop *b = &h->ops[x->orig[blocker]];
  mismatch(&x->w, "it would raise the revision to %lld, past header revision %lld of\n  %s\n  ",
           (long long)rev, (long long)b->revision,
           kt_linz_describe(h, x->orig[blocker], desc, sizeof desc));
  if (x->call_node[blocker] > x->ret_node[d]) {
    mismatch(&x->w, "which was called after this op returned");
  } else {
    mismatch(&x->w, "which cannot take effect first: ");
    if (step(h, x->S, x->st, x->tmp + x->S, b, &x->w))
      mismatch(&x->w, "it fits, but no order of the remaining ops does after it");
  }
}

int kt_linz_check(const struct kt_linz_hist *h, uint64_t max_steps, struct kt_linz_report *out) {
  memset(out, 0, sizeof *out);
  if (!max_steps)
    max_steps = 5000000;
  const size_t S = 1 + 4 * (size_t)h->n_keys;
  /* Dense indices of the ops that count (failed ones are dropped). */
  uint32_t m = 0, *orig = malloc((h->n_ops + 1) * sizeof *orig);
  kt_assert(orig);
  for (uint32_t i = 0; i < h->n_ops; i++) {
    const struct lop *o = &h->ops[i];
    if (o->state == ST_FAILED || (o->state != ST_OK && o->kind == KT_LINZ_GET))
      continue; /* failed: nothing happened; an unknown read: nothing to check */
    orig[m++] = i;
    out->unknown += o->state != ST_OK;
    out->sreads += o->serializable;
  }
  out->ops = m;
  /* Events sorted by (time, recording order); unknown returns last. */
  struct lev *evs = malloc((2 * (size_t)m + 1) * sizeof *evs);
  kt_assert(evs);
  for (uint32_t d = 0; d < m; d++) {
    const struct lop *o = &h->ops[orig[d]];
    bool known = o->state == ST_OK;
    evs[2 * d] = (struct lev){d, true, o->serializable ? INT64_MIN : o->call_t,
                              o->serializable ? d : o->call_seq};
    evs[2 * d + 1] = (struct lev){d, false, known ? o->ret_t : INT64_MAX,
                                  known ? o->ret_seq : UINT64_MAX - (m - d)};
  }
  qsort(evs, 2 * (size_t)m, sizeof *evs, lev_cmp);
  /* The doubly linked list: nodes 0..2m-1 (sorted events), head = 2m. */
  const uint32_t HEAD = 2 * m, NIL = UINT32_MAX;
  uint32_t *next = malloc((2 * (size_t)m + 1) * 5 * sizeof *next);
  kt_assert(next);
  uint32_t *prev = next + 2 * m + 1, *match = prev + 2 * m + 1, *ret_node = match + 2 * m + 1;
  uint32_t *call_node = ret_node + 2 * m + 1;
  for (uint32_t i = 0; i < 2 * m; i++)
    *(evs[i].call ? &call_node[evs[i].op] : &ret_node[evs[i].op]) = i;
  for (uint32_t i = 0; i < 2 * m; i++) {
    next[i] = i + 1 < 2 * m ? i + 1 : NIL;
    prev[i] = i ? i - 1 : HEAD;
    match[i] = evs[i].call ? ret_node[evs[i].op] : NIL;
  }
  next[HEAD] = m ? 0 : NIL;
  prev[HEAD] = NIL;

  struct memo memo = {.W = (m + 63) / 64 ? (m + 63) / 64 : 1, .S = S};
  uint64_t *bits = calloc(memo.W, sizeof *bits);
  int64_t *states = malloc(((size_t)m + 1) * S * sizeof *states); /* states[depth] */
  uint32_t *calls = malloc(((size_t)m + 1) * sizeof *calls);      /* call node per depth */
  bool *eager = malloc(((size_t)m + 1) * sizeof *eager);          /* placed without choice */
  uint32_t *best = malloc(((size_t)m + 1) * sizeof *best);        /* deepest dead end */
  int64_t *best_state = malloc(S * sizeof *best_state);
  kt_assert(bits && states && calls && eager && best && best_state);
  states[0] = h->start_rev;
  for (uint32_t k = 0; k < h->n_keys; k++)
    *KREC(states, k) = (struct lkv){-1, 0, 0, 0};
  /* Index 1: revisions below start (never placeable); the last index holds
   * every revision beyond what the ops could reach. */
  struct fenwick fen = {calloc((size_t)m + 4, sizeof *fen.t), (size_t)m + 3, h->start_rev - 1};
  kt_assert(fen.t);
  for (uint32_t d = 0; d < m; d++)
    if (h->ops[orig[d]].state == ST_OK)
      fen_add(&fen, h->ops[orig[d]].revision, 1);
  uint32_t depth = 0, best_depth = 0, best_block = NIL;
  struct why nowhy = {h, NULL, 0, 0};
  int verdict = KT_LINZ_OK;
  uint32_t node = next[HEAD];
  while (node != NIL) {
    uint32_t d = evs[node].op;
    const struct lop *o = &h->ops[orig[d]];
    if (evs[node].call) {
      if (++out->steps > max_steps) {
        verdict = KT_LINZ_GAVE_UP;
        break;
      }
      int64_t *cur = states + (size_t)depth * S, *nxt = cur + S;
      if (step(h, S, cur, nxt, o, &nowhy)) {
        bool known = o->state == ST_OK;
        /* A get that fits here goes here, with no alternative tried: if
         * some order places it later, moving it here keeps that order valid
         * (what must precede it is placed — it is a candidate — and it
         * changes nothing wherever it goes). Without this, gets that fit at
         * one revision (serializable ones especially, callable from the
         * start) multiply the orders tried by every subset of them. Not for
         * writes that happen to change nothing here (a delete of an absent
         * key, unknown outcome): placed later they might. */
        bool same = o->kind == KT_LINZ_GET;
        if (known)
          fen_add(&fen, o->revision, -1);
        bits[d / 64] |= 1ull << (d % 64);
        if ((nxt[0] == cur[0] || fen_upto(&fen, nxt[0] - 1) == 0) && memo_add(&memo, bits, nxt)) {
          eager[depth] = same;
          calls[depth++] = node;
          uint32_t r = match[node]; /* lift the call and its return */
          next[prev[node]] = next[node];
          prev[next[node]] = prev[node];
          next[prev[r]] = next[r];
          if (next[r] != NIL)
            prev[next[r]] = prev[r];
          node = next[HEAD];
          continue;
        }
        bits[d / 64] &= ~(1ull << (d % 64));
        if (known)
          fen_add(&fen, o->revision, 1);
        if (same && best_block != NIL) { /* explored already from here: so was this level */
          node = NIL;
          goto backtrack;
        }
      }
      node = next[node];
      continue;
    }
    if (o->state != ST_OK)
      break; /* only unknown-outcome ops left: they never happened */
    if (best_block == NIL || depth > best_depth) {
      best_depth = depth;
      best_block = d;
      for (uint32_t i = 0; i < depth; i++)
        best[i] = evs[calls[i]].op;
      memcpy(best_state, states + (size_t)depth * S, S * sizeof *best_state);
    }
  backtrack:
    if (depth == 0) {
      verdict = KT_LINZ_VIOLATION;
      break;
    }
    uint32_t c = calls[--depth], r = match[c]; /* unlift, in reverse */
    bits[evs[c].op / 64] &= ~(1ull << (evs[c].op % 64));
    if (h->ops[orig[evs[c].op]].state == ST_OK)
      fen_add(&fen, h->ops[orig[evs[c].op]].revision, 1);
    next[prev[r]] = r;
    if (next[r] != NIL)
      prev[next[r]] = r;
    next[prev[c]] = c;
    prev[next[c]] = c;
    if (eager[depth])
      goto backtrack; /* it had no alternative at its level: neither has this one */
    node = next[c];
  }
  out->verdict = verdict;

  char *ex = out->explain;
  size_t n = sizeof out->explain, off = 0;
  char desc[512];
  if (verdict == KT_LINZ_GAVE_UP) {
    bp(ex, n, &off,
       "gave up: search budget of %llu model steps spent (%u ops, %u of unknown outcome, "
       "%u serializable gets; deepest order placed %u ops)",
       (unsigned long long)max_steps, m, out->unknown, out->sreads, best_depth);
  } else if (verdict == KT_LINZ_VIOLATION) {
    bp(ex, n, &off,
       "not linearizable: %u ops (%u of unknown outcome, %u serializable gets); the longest "
       "valid order places %u.\n",
       m, out->unknown, out->sreads, best_depth);
    uint32_t from = best_depth > 6 ? best_depth - 6 : 0;
    if (best_depth)
      bp(ex, n, &off, "that order ends:\n");
    for (uint32_t i = from; i < best_depth; i++)
      bp(ex, n, &off, "  %s\n", kt_linz_describe(h, orig[best[i]], desc, sizeof desc));
    bp(ex, n, &off, "model state then: ");
    bp_state(h, ex, n, &off, best_state);
    bool *placed = calloc(m + 1, sizeof *placed);
    kt_assert(placed);
    for (uint32_t i = 0; i < best_depth; i++)
      placed[best[i]] = true;
    struct explain x = {h,        S,         orig,       m,      placed,         evs,
                        ret_node, call_node, best_state, states, {h, ex, n, off}};
    bp(ex, n, &x.w.off, "\nthis op returned but cannot take effect next:\n  %s\n  because: ",
       kt_linz_describe(h, orig[best_block], desc, sizeof desc));
    explain_candidate(&x, best_block);
    /* The other candidates: called before best_block returned, not placed. */
    uint32_t shown = 0;
    for (uint32_t i = 0; i < 2 * m && i < ret_node[best_block]; i++) {
      uint32_t d = evs[i].op;
      if (!evs[i].call || placed[d] || d == best_block)
        continue;
      if (shown++ == 8) {
        bp(ex, n, &x.w.off, "\n(more pending ops not shown)");
        break;
      }
      bp(ex, n, &x.w.off, "\nnor can the pending\n  %s\n  because: ",
         kt_linz_describe(h, orig[d], desc, sizeof desc));
      explain_candidate(&x, d);
    }
    free(placed);
  }
  free(fen.t);
  free(evs);
  free(next);
  free(bits);
  free(states);
  free(calls);
  free(eager);
  free(best);
  free(best_state);
  free(memo.data);
  free(memo.tab);
  free(orig);
  return verdict;
}
