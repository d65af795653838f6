/* snap/bbolt.c — see bbolt.h for the format and the reading rule. */
#include "bbolt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_HDR 16
#define ELEM 16
#define META_BYTES 64 /* the meta struct after the page header */
#define F_BRANCH 0x01
#define F_LEAF 0x02
#define F_META 0x04
#define F_FREELIST 0x10
#define LEAF_BUCKET 0x01
#define BUCKET_HDR 16
#define MAX_KEY 32768
#define MAX_VALUE ((1ull << 31) - 2)

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  put16(p, (uint16_t)v);
  put16(p + 2, (uint16_t)(v >> 16));
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int cmp_keys(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : (an > bn) - (an < bn);
}

/* ---- reader ---- */

/* Why meta m (the 64 bytes after page i's header) is not usable, or NULL. */
static const char *meta_problem(const uint8_t *m, uint32_t *psz, int *code) {
  *code = KT_ECORRUPT;
  if (le32(m) != KT_BBOLT_MAGIC)
    return "bad magic (not a bbolt file)";
  if (le32(m + 4) != KT_BBOLT_VERSION) {
    *code = KT_EVERSION;
    return "format version is not 2";
  }
  uint64_t sum = le64(m + 56);
  if (sum != 0 && sum != fnv1a64(m, 56))
    return "checksum mismatch";
  uint32_t ps = le32(m + 8);
  if (ps < 512 || ps > 65536 || (ps & (ps - 1)))
    return "page size is not a power of two from 512 to 65536";
  *psz = ps;
  return NULL;
}

int kt_bbolt_open(struct kt_bbolt *db, const uint8_t *p, size_t n, const char *name,
                  struct kt_err *e) {
  memset(db, 0, sizeof *db);
  db->p = p;
  db->n = n;
  db->name = name;
  const char *why[2] = {NULL, NULL};
  int code[2] = {0, 0};
  uint32_t psz[2] = {0, 0};
  uint64_t off1 = 4096;
  if (n < PAGE_HDR + META_BYTES)
    return kt_err_set(e, KT_ECORRUPT, "%s: %zu bytes: too short for a bbolt file", name, n);
  why[0] = meta_problem(p + PAGE_HDR, &psz[0], &code[0]);
  if (!why[0])
    off1 = psz[0];
  if (n < off1 + PAGE_HDR + META_BYTES) {
    why[1] = "missing (the file ends before it)";
    code[1] = KT_ECORRUPT;
  } else {
    why[1] = meta_problem(p + off1 + PAGE_HDR, &psz[1], &code[1]);
    if (!why[1] && psz[1] != off1)
      why[1] = "page size differs from page 0's";
  }
  int use = -1;
  for (int i = 0; i < 2; i++) {
    if (why[i])
      continue;
    const uint8_t *pg = p + (i ? off1 : 0);
    const uint8_t *m = pg + PAGE_HDR;
    uint64_t pgid = le64(m + 40), root = le64(m + 16), fl = le64(m + 32);
    if (!(le16(pg + 8) & F_META))
      why[i] = "not a meta page", code[i] = KT_ECORRUPT;
    else if (pgid < 3 || pgid > n / psz[i])
      why[i] = "its page count runs past the end of the file (truncated?)", code[i] = KT_ECORRUPT;
    else if (root < 2 || root >= pgid || (fl != KT_BBOLT_NO_FREELIST && (fl < 2 || fl >= pgid)))
      why[i] = "root or freelist page out of range", code[i] = KT_ECORRUPT;
    else if (use < 0 || le64(m + 48) > db->txid) {
      use = i;
      db->page_size = psz[i];
      db->root = root;
      db->freelist = fl;
      db->pgid = pgid;
      db->txid = le64(m + 48);
    }
  }
  db->meta = use;
  if (use >= 0)
    return 0;
  return kt_err_set(e,
                    code[0] == KT_EVERSION ? KT_EVERSION
                    : code[1]              ? code[1]
                                           : KT_ECORRUPT,
                    "%s: no valid meta page: page 0: %s; page 1: %s", name, why[0], why[1]);
}

struct kt_bbolt_bucket kt_bbolt_root(const struct kt_bbolt *db) {
  return (struct kt_bbolt_bucket){.root = db->root};
}

struct walk {
  const struct kt_bbolt *db;
  uint8_t *seen; /* one bit per page */
  kt_bbolt_fn fn;
  void *arg;
  struct kt_err *e;
  const uint8_t *prev; /* the last key handed out */
  size_t prev_n;
  bool have_prev;
};

/* The elements of a leaf page p[0..span): page pgid, or an inline bucket's
 * page (pgid 0). */
static int walk_leaf(struct walk *w, const uint8_t *p, size_t span, uint64_t pgid) {
  char where[48];
  if (pgid)
    snprintf(where, sizeof where, "page %llu", (unsigned long long)pgid);
  else
    snprintf(where, sizeof where, "an inline bucket's page");
  uint16_t count = le16(p + 10);
  if (PAGE_HDR + (size_t)count * ELEM > span)
    return kt_err_set(w->e, KT_ECORRUPT, "%s: %s: %u leaf elements do not fit its %zu bytes",
                      w->db->name, where, count, span);
  for (uint16_t i = 0; i < count; i++) {
    size_t el = PAGE_HDR + (size_t)i * ELEM;
    uint32_t flags = le32(p + el);
    uint64_t pos = le32(p + el + 4), ks = le32(p + el + 8), vs = le32(p + el + 12);
    if (el + pos + ks + vs > span)
      return kt_err_set(w->e, KT_ECORRUPT, "%s: %s: leaf element %u runs past its %zu bytes",
                        w->db->name, where, i, span);
    if (ks == 0)
      return kt_err_set(w->e, KT_ECORRUPT, "%s: %s: leaf element %u has an empty key", w->db->name,
                        where, i);
    const uint8_t *k = p + el + pos;
    if (w->have_prev && cmp_keys(w->prev, w->prev_n, k, ks) >= 0)
      return kt_err_set(w->e, KT_ECORRUPT, "%s: %s: leaf element %u: keys out of order",
                        w->db->name, where, i);
    w->prev = k, w->prev_n = ks, w->have_prev = true;
    int rc = w->fn(w->arg, k, ks, k + ks, vs, (flags & LEAF_BUCKET) != 0);
    if (rc)
      return rc;
  }
  return 0;
}

static int walk_page(struct walk *w, uint64_t pgid, int depth, uint16_t want) {
  const struct kt_bbolt *db = w->db;
  if (depth > KT_BBOLT_MAX_DEPTH)
    return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: more than %d levels deep", db->name,
                      (unsigned long long)pgid, KT_BBOLT_MAX_DEPTH);
  if (pgid < 2 || pgid >= db->pgid)
    return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: out of range (the database has %llu)",
                      db->name, (unsigned long long)pgid, (unsigned long long)db->pgid);
  const uint8_t *p = db->p + pgid * db->page_size;
  uint64_t overflow = le32(p + 12);
  if (le64(p) != pgid)
    return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: header says page %llu", db->name,
                      (unsigned long long)pgid, (unsigned long long)le64(p));
  if (pgid + 1 + overflow > db->pgid)
    return kt_err_set(w->e, KT_ECORRUPT,
                      "%s: page %llu: %llu overflow pages run past the database's %llu pages",
                      db->name, (unsigned long long)pgid, (unsigned long long)overflow,
                      (unsigned long long)db->pgid);
  for (uint64_t i = pgid; i <= pgid + overflow; i++) {
    if (w->seen[i / 8] & (1u << (i % 8)))
      return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: reached twice", db->name,
                        (unsigned long long)i);
    w->seen[i / 8] |= (uint8_t)(1u << (i % 8));
  }
  size_t span = (size_t)(1 + overflow) * db->page_size;
  uint16_t flags = le16(p + 8);
  if (!(flags & want) || (flags & (F_BRANCH | F_LEAF)) == (F_BRANCH | F_LEAF))
    return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: flags 0x%02x where a %s page belongs",
                      db->name, (unsigned long long)pgid, flags,
                      want == F_LEAF ? "leaf" : "branch or leaf");
  if (flags & F_LEAF)
    return walk_leaf(w, p, span, pgid);
  uint16_t count = le16(p + 10);
  if (count == 0 || PAGE_HDR + (size_t)count * ELEM > span)
    return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: %u branch elements in %zu bytes", db->name,
                      (unsigned long long)pgid, count, span);
  const uint8_t *prev = NULL;
  uint64_t prev_n = 0;
  for (uint16_t i = 0; i < count; i++) {
    size_t el = PAGE_HDR + (size_t)i * ELEM;
    uint64_t pos = le32(p + el), ks = le32(p + el + 4), child = le64(p + el + 8);
    if (el + pos + ks > span || ks == 0)
      return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: branch element %u: bad key", db->name,
                        (unsigned long long)pgid, i);
    if (prev && cmp_keys(prev, prev_n, p + el + pos, ks) >= 0)
      return kt_err_set(w->e, KT_ECORRUPT, "%s: page %llu: branch element %u: keys out of order",
                        db->name, (unsigned long long)pgid, i);
    prev = p + el + pos, prev_n = ks;
    int rc = walk_page(w, child, depth + 1, F_BRANCH | F_LEAF);
    if (rc)
      return rc;
  }
  return 0;
}

int kt_bbolt_each(const struct kt_bbolt *db, const struct kt_bbolt_bucket *b, kt_bbolt_fn fn,
                  void *arg, struct kt_err *e) {
  struct walk w = {.db = db, .fn = fn, .arg = arg, .e = e};
  if (!b->root)
    return walk_leaf(&w, b->inline_page, b->inline_len, 0);
  w.seen = calloc(db->pgid / 8 + 1, 1);
  if (!w.seen)
    return kt_err_set(e, KT_ENOMEM, "%s: out of memory", db->name);
  int rc = walk_page(&w, b->root, 0, F_BRANCH | F_LEAF);
  free(w.seen);
  return rc;
}

int kt_bbolt_child(const struct kt_bbolt *db, const uint8_t *value, size_t vlen,
                   struct kt_bbolt_bucket *out, struct kt_err *e) {
  memset(out, 0, sizeof *out);
  if (vlen < BUCKET_HDR)
    return kt_err_set(e, KT_ECORRUPT, "%s: a bucket value of %zu bytes", db->name, vlen);
  out->root = le64(value);
  if (out->root)
    return 0;
  if (vlen < BUCKET_HDR + PAGE_HDR || !(le16(value + BUCKET_HDR + 8) & F_LEAF))
    return kt_err_set(e, KT_ECORRUPT, "%s: an inline bucket without a leaf page", db->name);
  out->inline_page = value + BUCKET_HDR;
  out->inline_len = vlen - BUCKET_HDR;
  return 0;
}

struct find {
  const char *name;
  size_t n;
  const uint8_t *v;
  size_t vn;
  bool found, bucket;
};

static int find_cb(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                   bool is_bucket) {
  struct find *f = arg;
  if (kn != f->n || memcmp(k, f->name, kn))
    return 0;
  f->v = v, f->vn = vn, f->found = true, f->bucket = is_bucket;
  return -1;
}

int kt_bbolt_bucket(const struct kt_bbolt *db, const struct kt_bbolt_bucket *parent,
                    const char *name, struct kt_bbolt_bucket *out, struct kt_err *e) {
  struct find f = {.name = name, .n = strlen(name)};
  int rc = kt_bbolt_each(db, parent, find_cb, &f, e);
  if (rc > 0)
    return rc;
  if (!f.found)
    return kt_err_set(e, KT_ENOTFOUND, "%s: no bucket \"%s\"", db->name, name);
  if (!f.bucket)
    return kt_err_set(e, KT_EINVAL, "%s: \"%s\" is a key, not a bucket", db->name, name);
  return kt_bbolt_child(db, f.v, f.vn, out, e);
}

/* ---- writer ---- */

struct ref { /* a written page and its first key, for the level above */
  uint64_t pgid;
  uint8_t *key;
  uint32_t klen;
};

struct wbucket {
  char *name;
  uint64_t root;
};

struct kt_bbolt_writer {
  kt_bbolt_sink sink; /* NULL: a dry run */
  void *sink_arg;
  const char *name;
  uint32_t ps;
  uint64_t next; /* the next page id */
  struct kt_bbolt_layout plan;
  bool failed, finished;
  struct kt_buf out; /* bytes not yet handed to the sink */
  /* the page being filled: elements (flags, klen, vlen), their keys and
   * (unless a dry run) values, and how many bytes those take */
  uint32_t *el;
  size_t nel, cap_el;
  struct kt_buf data;
  size_t data_len;
  bool in_bucket;
  struct ref *refs; /* pages of the current level */
  size_t nrefs, cap_refs;
  uint8_t *last; /* the last key put in this bucket */
  size_t last_n, last_cap;
  struct wbucket *buckets;
  size_t nb;
};

static void meta_pages(uint32_t ps, const struct kt_bbolt_layout *l, struct kt_buf *out) {
  size_t at = out->len;
  kt_buf_reserve(out, 2 * (size_t)ps);
  memset(out->p + at, 0, 2 * (size_t)ps);
  for (int i = 0; i < 2; i++) {
    uint8_t *page = out->p + at + (size_t)i * ps;
    put64(page, (uint64_t)i);
    put16(page + 8, F_META);
    uint8_t *m = page + PAGE_HDR;
    put32(m, KT_BBOLT_MAGIC);
    put32(m + 4, KT_BBOLT_VERSION);
    put32(m + 8, ps);
    put64(m + 16, l->root);
    put64(m + 32, l->freelist);
    put64(m + 40, l->pgid);
    put64(m + 48, (uint64_t)i + 1);
    put64(m + 56, fnv1a64(m, 56));
  }
  out->len += 2 * (size_t)ps;
}

struct kt_bbolt_writer *kt_bbolt_writer_new(kt_bbolt_sink sink, void *arg, const char *name,
                                            const struct kt_bbolt_layout *plan) {
  if (!sink != !plan)
    return NULL;
  struct kt_bbolt_writer *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->sink = sink;
  w->sink_arg = arg;
  w->name = name;
  w->ps = KT_BBOLT_PAGE_SIZE;
  w->next = 2; /* after the metas */
  if (plan) {
    w->plan = *plan;
    meta_pages(w->ps, plan, &w->out);
  }
  return w;
}

static int flush_out(struct kt_bbolt_writer *w, struct kt_err *e) {
  if (!w->out.len)
    return 0;
  int rc = w->sink(w->sink_arg, w->out.p, w->out.len, e);
  if (rc)
    w->failed = true;
  kt_buf_reset(&w->out);
  return rc;
}

/* Lays out the pending elements as one page (with overflow pages when they
 * need more room) of type flags (a dry run only counts the pages); a branch
 * element's u64 is its child's page id. Returns the page id, or 0 when the
 * sink failed. */
static uint64_t emit(struct kt_bbolt_writer *w, uint16_t flags, const uint64_t *children,
                     struct kt_err *e) {
  size_t size = PAGE_HDR + w->nel * ELEM + w->data_len;
  size_t pages = (size + w->ps - 1) / w->ps;
  uint64_t pgid = w->next;
  if (w->sink) {
    size_t at = w->out.len;
    kt_buf_reserve(&w->out, pages * w->ps);
    uint8_t *p = w->out.p + at;
    memset(p, 0, pages * w->ps);
    w->out.len += pages * w->ps;
    put64(p, pgid);
    put16(p + 8, flags);
    put16(p + 10, (uint16_t)w->nel);
    put32(p + 12, (uint32_t)(pages - 1));
    size_t doff = PAGE_HDR + w->nel * ELEM;
    if (w->data.len)
      memcpy(p + doff, w->data.p, w->data.len);
    for (size_t i = 0; i < w->nel; i++) {
      uint8_t *el = p + PAGE_HDR + i * ELEM;
      uint32_t pos = (uint32_t)(doff - (PAGE_HDR + i * ELEM));
      uint32_t klen = w->el[3 * i + 1], vlen = w->el[3 * i + 2];
      if (flags == F_LEAF) {
        put32(el, w->el[3 * i]);
        put32(el + 4, pos);
        put32(el + 8, klen);
        put32(el + 12, vlen);
      } else {
        put32(el, pos);
        put32(el + 4, klen);
        put64(el + 8, children[i]);
      }
      doff += klen + vlen;
    }
  }
  w->next += pages;
  w->nel = 0;
  w->data_len = 0;
  kt_buf_reset(&w->data);
  if (w->out.len >= (1u << 20) && flush_out(w, e))
    return 0;
  return pgid;
}

static void add_el(struct kt_bbolt_writer *w, uint32_t flags, const uint8_t *k, size_t kn,
                   const uint8_t *v, size_t vn) {
  if (w->nel == w->cap_el) {
    w->cap_el = w->cap_el ? 2 * w->cap_el : 64;
    w->el = realloc(w->el, w->cap_el * 3 * sizeof *w->el);
    kt_assert(w->el);
  }
  w->el[3 * w->nel] = flags;
  w->el[3 * w->nel + 1] = (uint32_t)kn;
  w->el[3 * w->nel + 2] = (uint32_t)vn;
  w->nel++;
  kt_buf_append(&w->data, k, kn);
  if (vn && w->sink)
    kt_buf_append(&w->data, v, vn);
  w->data_len += kn + vn;
}

static void push_ref(struct ref **v, size_t *n, size_t *cap, uint64_t pgid, const uint8_t *k,
                     size_t kn) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    *v = realloc(*v, *cap * sizeof **v);
    kt_assert(*v);
  }
  uint8_t *copy = malloc(kn ? kn : 1);
  kt_assert(copy);
  if (kn)
    memcpy(copy, k, kn);
  (*v)[(*n)++] = (struct ref){pgid, copy, (uint32_t)kn};
}

/* The pending leaf page out, its first key remembered for the branch above
 * (the page's bytes start with that key, in a dry run too). */
static int flush_leaf(struct kt_bbolt_writer *w, struct kt_err *e) {
  if (!w->nel)
    return 0;
  uint8_t first[MAX_KEY];
  size_t fn = w->el[1];
  memcpy(first, w->data.p, fn);
  uint64_t pgid = emit(w, F_LEAF, NULL, e);
  if (!pgid)
    return KT_EIO;
  push_ref(&w->refs, &w->nrefs, &w->cap_refs, pgid, first, fn);
  return 0;
}

static void free_refs(struct ref *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i].key);
  free(v);
}

/* Branch levels over w->refs until one page is left: the bucket's root. */
static int end_bucket(struct kt_bbolt_writer *w, struct kt_err *e) {
  if (!w->in_bucket)
    return 0;
  w->in_bucket = false;
  int rc = flush_leaf(w, e);
  if (!rc && !w->nrefs) { /* an empty bucket: one empty leaf */
    uint64_t pgid = emit(w, F_LEAF, NULL, e);
    if (!pgid)
      rc = KT_EIO;
    else
      push_ref(&w->refs, &w->nrefs, &w->cap_refs, pgid, (const uint8_t *)"", 0);
  }
  while (!rc && w->nrefs > 1) {
    struct ref *up = NULL;
    size_t nup = 0, capup = 0;
    uint64_t *kids = malloc(w->nrefs * sizeof *kids);
    kt_assert(kids);
    size_t first = 0; /* refs[first..i) are pending in this page */
    for (size_t i = 0; i <= w->nrefs && !rc; i++) {
      /* at least two children per branch page (bbolt's minKeysPerPage), so
       * each level has at most half the pages of the one below */
      bool fits =
          i < w->nrefs &&
          (w->nel < 2 || PAGE_HDR + (w->nel + 1) * ELEM + w->data_len + w->refs[i].klen <= w->ps);
      if (w->nel && (i == w->nrefs || !fits)) {
        uint64_t pgid = emit(w, F_BRANCH, kids + first, e);
        if (!pgid) {
          rc = KT_EIO;
          break;
        }
        push_ref(&up, &nup, &capup, pgid, w->refs[first].key, w->refs[first].klen);
        first = i;
      }
      if (i < w->nrefs) {
        kids[i] = w->refs[i].pgid;
        add_el(w, 0, w->refs[i].key, w->refs[i].klen, NULL, 0);
      }
    }
    free(kids);
    kt_assert(rc || nup < w->nrefs);
    free_refs(w->refs, w->nrefs);
    w->refs = up, w->nrefs = nup, w->cap_refs = capup;
  }
  if (!rc)
    w->buckets[w->nb - 1].root = w->refs[0].pgid;
  free_refs(w->refs, w->nrefs);
  w->refs = NULL, w->nrefs = w->cap_refs = 0;
  return rc;
}

int kt_bbolt_writer_bucket(struct kt_bbolt_writer *w, const char *name, struct kt_err *e) {
  if (w->failed || w->finished || !name[0])
    return kt_err_set(e, KT_EINVAL, "%s: bucket \"%s\": bad name or writer ended", w->name, name);
  for (size_t i = 0; i < w->nb; i++)
    if (!strcmp(w->buckets[i].name, name))
      return kt_err_set(e, KT_EINVAL, "%s: bucket \"%s\" twice", w->name, name);
  int rc = end_bucket(w, e);
  if (rc)
    return rc;
  w->buckets = realloc(w->buckets, (w->nb + 1) * sizeof *w->buckets);
  kt_assert(w->buckets);
  w->buckets[w->nb].name = strdup(name);
  kt_assert(w->buckets[w->nb].name);
  w->buckets[w->nb++].root = 0;
  w->in_bucket = true;
  w->last_n = 0;
  return 0;
}

int kt_bbolt_writer_put(struct kt_bbolt_writer *w, const uint8_t *key, size_t klen,
                        const uint8_t *value, size_t vlen, struct kt_err *e) {
  if (!w->in_bucket || w->failed)
    return kt_err_set(e, KT_EINVAL, "%s: a key outside a bucket", w->name);
  if (klen == 0 || klen > MAX_KEY || vlen > MAX_VALUE)
    return kt_err_set(e, KT_EINVAL, "%s: bucket \"%s\": key of %zu bytes or value of %zu bytes",
                      w->name, w->buckets[w->nb - 1].name, klen, vlen);
  if (w->last_n && cmp_keys(w->last, w->last_n, key, klen) >= 0)
    return kt_err_set(e, KT_EINVAL, "%s: bucket \"%s\": keys not ascending", w->name,
                      w->buckets[w->nb - 1].name);
  if (w->nel && PAGE_HDR + (w->nel + 1) * ELEM + w->data_len + klen + vlen > w->ps) {
    int rc = flush_leaf(w, e);
    if (rc)
      return rc;
  }
  add_el(w, 0, key, klen, value, vlen);
  if (klen > w->last_cap) {
    w->last_cap = klen > 64 ? klen : 64;
    w->last = realloc(w->last, w->last_cap);
    kt_assert(w->last);
  }
  memcpy(w->last, key, klen);
  w->last_n = klen;
  return 0;
}

static int cmp_bucket(const void *a, const void *b) {
  return strcmp(((const struct wbucket *)a)->name, ((const struct wbucket *)b)->name);
}

int kt_bbolt_writer_finish(struct kt_bbolt_writer *w, struct kt_bbolt_layout *layout,
                           struct kt_err *e) {
  if (w->failed || w->finished)
    return kt_err_set(e, KT_EINVAL, "%s: writer already ended", w->name);
  int rc = end_bucket(w, e);
  if (rc)
    return rc;
  w->finished = true;
  if (w->nb)
    qsort(w->buckets, w->nb, sizeof *w->buckets, cmp_bucket);
  for (size_t i = 0; i < w->nb; i++) { /* the root bucket: one leaf of bucket values */
    uint8_t v[BUCKET_HDR] = {0};
    put64(v, w->buckets[i].root);
    add_el(w, LEAF_BUCKET, (const uint8_t *)w->buckets[i].name, strlen(w->buckets[i].name), v,
           sizeof v);
  }
  struct kt_bbolt_layout l = {.root = emit(w, F_LEAF, NULL, e)};
  l.freelist = l.root ? emit(w, F_FREELIST, NULL, e) : 0;
  l.pgid = w->next;
  if (!l.freelist || (w->sink && flush_out(w, e)))
    return KT_EIO;
  if (w->sink &&
      (l.root != w->plan.root || l.freelist != w->plan.freelist || l.pgid != w->plan.pgid))
    return kt_err_set(e, KT_EINVAL, "%s: the pages differ from the dry run's", w->name);
  if (layout)
    *layout = l;
  return 0;
}

uint64_t kt_bbolt_layout_bytes(const struct kt_bbolt_layout *l) {
  return l->pgid * KT_BBOLT_PAGE_SIZE;
}

void kt_bbolt_writer_free(struct kt_bbolt_writer *w) {
  if (!w)
    return;
  kt_buf_free(&w->out);
  kt_buf_free(&w->data);
  free(w->el);
  free_refs(w->refs, w->nrefs);
  free(w->last);
  for (size_t i = 0; i < w->nb; i++)
    free(w->buckets[i].name);
  free(w->buckets);
  free(w);
}
