/* core/lease.c — see lease.h for the contract and the structures. */
#include "lease.h"

#include <stdlib.h>
#include <string.h>

#define NO_HEAP UINT32_MAX

struct kt_lease_key;

struct kt_lease {
  int64_t id;
  int64_t ttl_s;
  int64_t expiry_ms; /* leader only */
  uint32_t heap_i;   /* NO_HEAP when not in the heap */
  bool expiring;     /* handed out by kt_lease_expired, revoke pending */
  struct kt_lease_key *keys;
  uint64_t nkeys;
};

struct kt_lease_key {
  struct kt_lease_key *prev, *next;
  struct kt_lease *lease;
  uint64_t h;
  uint32_t n;
  uint8_t p[];
};

/* Open addressing, linear probing, backward-shift deletion; load <= 1/2. */
struct slot {
  uint64_t h;
  void *p; /* NULL = empty */
};
struct tab {
  struct slot *s;
  size_t cap, len; /* cap a power of two */
};

struct kt_lease_mgr {
  struct kt_lease_cfg cfg;
  struct kt_rng rng;
  struct tab leases, keys;
  struct kt_lease **heap;
  size_t heap_len, heap_cap;
  bool leader;
  struct kt_lease_stats stats;
};

static void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n, sz);
  kt_assert(p != NULL);
  return p;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

static uint64_t hash_bytes(struct kt_bytes k) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t i = 0; i < k.n; i++)
    h = (h ^ k.p[i]) * 0x100000001b3ULL;
  return mix64(h ^ k.n);
}

static void tab_free(struct tab *t) {
  free(t->s);
  memset(t, 0, sizeof *t);
}

static void tab_put_raw(struct tab *t, uint64_t h, void *p) {
  size_t mask = t->cap - 1, i = h & mask;
  while (t->s[i].p)
    i = (i + 1) & mask;
  t->s[i].h = h;
  t->s[i].p = p;
  t->len++;
}

static void tab_grow(struct tab *t) {
  if (t->cap && (t->len + 1) * 2 <= t->cap)
    return;
  struct tab n = {xcalloc(t->cap ? t->cap * 2 : 16, sizeof(struct slot)), t->cap ? t->cap * 2 : 16,
                  0};
  for (size_t i = 0; i < t->cap; i++)
    if (t->s[i].p)
      tab_put_raw(&n, t->s[i].h, t->s[i].p);
  free(t->s);
  *t = n;
}

/* Removes slot i and shifts the following run back (no tombstones). */
static void tab_del_at(struct tab *t, size_t i) {
  size_t mask = t->cap - 1, j = i;
  t->s[i].p = NULL;
  t->len--;
  for (;;) {
    j = (j + 1) & mask;
    if (!t->s[j].p)
      return;
    size_t home = t->s[j].h & mask;
    /* Move j into the hole i if its home is not in (i, j] (cyclically). */
    bool in = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!in) {
      t->s[i] = t->s[j];
      t->s[j].p = NULL;
      i = j;
    }
  }
}

static size_t lease_slot(const struct tab *t, int64_t id) {
  if (!t->cap)
    return SIZE_MAX;
  uint64_t h = mix64((uint64_t)id);
  size_t mask = t->cap - 1;
  for (size_t i = h & mask; t->s[i].p; i = (i + 1) & mask)
    if (((struct kt_lease *)t->s[i].p)->id == id)
      return i;
  return SIZE_MAX;
}

static struct kt_lease *lease_get(const struct kt_lease_mgr *m, int64_t id) {
  size_t i = lease_slot(&m->leases, id);
  return i == SIZE_MAX ? NULL : m->leases.s[i].p;
}

static size_t key_slot(const struct tab *t, struct kt_bytes k, uint64_t h) {
  if (!t->cap)
    return SIZE_MAX;
  size_t mask = t->cap - 1;
  for (size_t i = h & mask; t->s[i].p; i = (i + 1) & mask) {
    struct kt_lease_key *e = t->s[i].p;
    if (t->s[i].h == h && e->n == k.n && (k.n == 0 || memcmp(e->p, k.p, k.n) == 0))
      return i;
  }
  return SIZE_MAX;
}

/* Heap ---------------------------------------------------------------------- */

static bool heap_less(const struct kt_lease *a, const struct kt_lease *b) {
  return a->expiry_ms < b->expiry_ms || (a->expiry_ms == b->expiry_ms && a->id < b->id);
}

static void heap_set(struct kt_lease_mgr *m, size_t i, struct kt_lease *l) {
  m->heap[i] = l;
  l->heap_i = (uint32_t)i;
}

static void heap_up(struct kt_lease_mgr *m, size_t i) {
  struct kt_lease *l = m->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    m->stats.heap_steps++;
    if (!heap_less(l, m->heap[p]))
      break;
    heap_set(m, i, m->heap[p]);
    i = p;
  }
  heap_set(m, i, l);
}

static void heap_down(struct kt_lease_mgr *m, size_t i) {
  struct kt_lease *l = m->heap[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m->heap_len)
      break;
    m->stats.heap_steps++;
    if (c + 1 < m->heap_len && heap_less(m->heap[c + 1], m->heap[c]))
      c++;
    if (!heap_less(m->heap[c], l))
      break;
    heap_set(m, i, m->heap[c]);
    i = c;
  }
  heap_set(m, i, l);
}

/* Re-sorts lease l after its expiry changed (or it was moved into a slot). */
static void heap_update(struct kt_lease_mgr *m, struct kt_lease *l) {
  size_t i = l->heap_i;
  heap_up(m, i);
  if (l->heap_i == i)
    heap_down(m, i);
}

static void heap_push(struct kt_lease_mgr *m, struct kt_lease *l) {
  if (m->heap_len == m->heap_cap) {
    m->heap_cap = m->heap_cap ? m->heap_cap * 2 : 64;
    m->heap = realloc(m->heap, m->heap_cap * sizeof *m->heap);
    kt_assert(m->heap != NULL);
  }
  kt_assert(m->heap_len < NO_HEAP);
  heap_set(m, m->heap_len++, l);
  heap_up(m, m->heap_len - 1);
}

static void heap_remove(struct kt_lease_mgr *m, struct kt_lease *l) {
  size_t i = l->heap_i;
  kt_assert(i < m->heap_len && m->heap[i] == l);
  l->heap_i = NO_HEAP;
  struct kt_lease *last = m->heap[--m->heap_len];
  if (last == l)
    return;
  heap_set(m, i, last);
  heap_update(m, last);
}

/* Manager ------------------------------------------------------------------- */

struct kt_lease_mgr *kt_lease_new(const struct kt_lease_cfg *cfg) {
  struct kt_lease_mgr *m = xcalloc(1, sizeof *m);
  if (cfg)
    m->cfg = *cfg;
  if (m->cfg.max_ttl_s <= 0)
    m->cfg.max_ttl_s = KT_LEASE_MAX_TTL_S;
  if (m->cfg.retry_ms <= 0)
    m->cfg.retry_ms = 3000;
  if (m->cfg.min_ttl_s < 0)
    m->cfg.min_ttl_s = 0;
  kt_rng_seed(&m->rng, m->cfg.id_seed);
  return m;
}

static void lease_drop_keys(struct kt_lease_mgr *m, struct kt_lease *l) {
  struct kt_lease_key *e = l->keys;
  while (e) {
    struct kt_lease_key *next = e->next;
    size_t i = key_slot(&m->keys, (struct kt_bytes){e->p, e->n}, e->h);
    kt_assert(i != SIZE_MAX);
    tab_del_at(&m->keys, i);
    free(e);
    e = next;
  }
  l->keys = NULL;
  l->nkeys = 0;
}

void kt_lease_free(struct kt_lease_mgr *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->leases.cap; i++) {
    struct kt_lease *l = m->leases.s[i].p;
    if (!l)
      continue;
    struct kt_lease_key *e = l->keys;
    while (e) {
      struct kt_lease_key *next = e->next;
      free(e);
      e = next;
    }
    free(l);
  }
  tab_free(&m->leases);
  tab_free(&m->keys);
  free(m->heap);
  free(m);
}

static int64_t expiry_of(int64_t now_ms, int64_t ttl_s, int64_t extend_ms) {
  /* ttl_s <= 9e9 so ttl_s * 1000 fits; saturate the sum. */
  int64_t d = ttl_s * 1000;
  if (extend_ms > 0)
    d = d > INT64_MAX - extend_ms ? INT64_MAX : d + extend_ms;
  return now_ms > INT64_MAX - d ? INT64_MAX : now_ms + d;
}

static int add_lease(struct kt_lease_mgr *m, int64_t id, int64_t ttl_s, int64_t now_ms) {
  struct kt_lease *l = xcalloc(1, sizeof *l);
  l->id = id;
  l->ttl_s = ttl_s;
  l->heap_i = NO_HEAP;
  l->expiry_ms = INT64_MAX;
  tab_grow(&m->leases);
  tab_put_raw(&m->leases, mix64((uint64_t)id), l);
  if (m->leader) {
    l->expiry_ms = expiry_of(now_ms, ttl_s, 0);
    heap_push(m, l);
  }
  return 0;
}

int kt_lease_grant(struct kt_lease_mgr *m, int64_t *id, int64_t *ttl_s, int64_t now_ms) {
  if (*id < 0 || *ttl_s <= 0 || *ttl_s > m->cfg.max_ttl_s)
    return KT_EINVAL;
  if (*id == 0) {
    do
      *id = (int64_t)(kt_rng_next(&m->rng) >> 1);
    while (*id == 0 || lease_get(m, *id));
  } else if (lease_get(m, *id)) {
    return KT_ELEASEEXISTS;
  }
  if (*ttl_s < m->cfg.min_ttl_s)
    *ttl_s = KT_MIN(m->cfg.min_ttl_s, m->cfg.max_ttl_s);
  return add_lease(m, *id, *ttl_s, now_ms);
}

int kt_lease_restore(struct kt_lease_mgr *m, int64_t id, int64_t granted_ttl_s) {
  if (id <= 0 || granted_ttl_s <= 0 || granted_ttl_s > m->cfg.max_ttl_s)
    return KT_EINVAL;
  if (lease_get(m, id))
    return KT_ELEASEEXISTS;
  return add_lease(m, id, granted_ttl_s, 0);
}

int kt_lease_revoke(struct kt_lease_mgr *m, int64_t id) {
  size_t i = lease_slot(&m->leases, id);
  if (i == SIZE_MAX)
    return KT_ELEASENOTFOUND;
  struct kt_lease *l = m->leases.s[i].p;
  tab_del_at(&m->leases, i);
  if (l->heap_i != NO_HEAP)
    heap_remove(m, l);
  lease_drop_keys(m, l);
  free(l);
  return 0;
}

static void key_unlink(struct kt_lease_key *e) {
  struct kt_lease *l = e->lease;
  if (e->prev)
    e->prev->next = e->next;
  else
    l->keys = e->next;
  if (e->next)
    e->next->prev = e->prev;
  l->nkeys--;
  e->prev = e->next = NULL;
}

static void key_link(struct kt_lease *l, struct kt_lease_key *e) {
  e->lease = l;
  e->prev = NULL;
  e->next = l->keys;
  if (l->keys)
    l->keys->prev = e;
  l->keys = e;
  l->nkeys++;
}

int kt_lease_attach(struct kt_lease_mgr *m, int64_t id, struct kt_bytes key) {
  if (id == 0) {
    kt_lease_detach(m, key);
    return 0;
  }
  struct kt_lease *l = lease_get(m, id);
  if (!l)
    return KT_ELEASENOTFOUND;
  uint64_t h = hash_bytes(key);
  size_t i = key_slot(&m->keys, key, h);
  if (i != SIZE_MAX) {
    struct kt_lease_key *e = m->keys.s[i].p;
    if (e->lease == l)
      return 0;
    key_unlink(e);
    key_link(l, e);
    return 0;
  }
  struct kt_lease_key *e = malloc(sizeof *e + key.n);
  kt_assert(e != NULL);
  e->h = h;
  e->n = key.n;
  if (key.n)
    memcpy(e->p, key.p, key.n);
  tab_grow(&m->keys);
  tab_put_raw(&m->keys, h, e);
  key_link(l, e);
  return 0;
}

int64_t kt_lease_detach(struct kt_lease_mgr *m, struct kt_bytes key) {
  if (!m->keys.len) /* no key has a lease: every put without one, no hashing */
    return 0;
  uint64_t h = hash_bytes(key);
  size_t i = key_slot(&m->keys, key, h);
  if (i == SIZE_MAX)
    return 0;
  struct kt_lease_key *e = m->keys.s[i].p;
  int64_t id = e->lease->id;
  tab_del_at(&m->keys, i);
  key_unlink(e);
  free(e);
  return id;
}

bool kt_lease_exists(const struct kt_lease_mgr *m, int64_t id) { return lease_get(m, id) != NULL; }

size_t kt_lease_count(const struct kt_lease_mgr *m) { return m->leases.len; }

int64_t kt_lease_of_key(const struct kt_lease_mgr *m, struct kt_bytes key) {
  size_t i = key_slot(&m->keys, key, hash_bytes(key));
  return i == SIZE_MAX ? 0 : ((struct kt_lease_key *)m->keys.s[i].p)->lease->id;
}

int kt_lease_ttl(const struct kt_lease_mgr *m, int64_t id, int64_t now_ms,
                 struct kt_lease_info *out) {
  const struct kt_lease *l = lease_get(m, id);
  if (!l)
    return KT_ELEASENOTFOUND;
  out->id = id;
  out->granted_ttl_s = l->ttl_s;
  out->nkeys = l->nkeys;
  if (m->leader) {
    int64_t left = l->expiring || l->expiry_ms <= now_ms ? 0 : l->expiry_ms - now_ms;
    out->remaining_ms = left;
    out->remaining_ttl_s = left / 1000;
  } else {
    out->remaining_ms = -1;
    out->remaining_ttl_s = -1;
  }
  return 0;
}

int kt_lease_keys(const struct kt_lease_mgr *m, int64_t id,
                  void (*fn)(void *arg, struct kt_bytes key), void *arg) {
  const struct kt_lease *l = lease_get(m, id);
  if (!l)
    return KT_ELEASENOTFOUND;
  for (const struct kt_lease_key *e = l->keys; e; e = e->next)
    fn(arg, (struct kt_bytes){e->p, e->n});
  return 0;
}

static int cmp_lease_id(const void *a, const void *b) {
  int64_t x = (*(struct kt_lease *const *)a)->id, y = (*(struct kt_lease *const *)b)->id;
  return (x > y) - (x < y);
}

void kt_lease_each(const struct kt_lease_mgr *m,
                   void (*fn)(void *arg, int64_t id, int64_t granted_ttl_s), void *arg) {
  size_t n = m->leases.len, k = 0;
  if (!n)
    return;
  struct kt_lease **v = malloc(n * sizeof *v);
  kt_assert(v != NULL);
  for (size_t i = 0; i < m->leases.cap; i++)
    if (m->leases.s[i].p)
      v[k++] = m->leases.s[i].p;
  kt_assert(k == n);
  qsort(v, n, sizeof *v, cmp_lease_id);
  for (size_t i = 0; i < n; i++)
    fn(arg, v[i]->id, v[i]->ttl_s);
  free(v);
}

void kt_lease_each_unsorted(const struct kt_lease_mgr *m,
                            void (*fn)(void *arg, int64_t id, int64_t granted_ttl_s), void *arg) {
  for (size_t i = 0; i < m->leases.cap; i++) {
    const struct kt_lease *l = m->leases.s[i].p;
    if (l)
      fn(arg, l->id, l->ttl_s);
  }
}

void kt_lease_promote(struct kt_lease_mgr *m, int64_t now_ms, int64_t extend_ms) {
  kt_lease_demote(m);
  m->leader = true;
  if (m->heap_cap < m->leases.len) {
    m->heap_cap = m->leases.len;
    m->heap = realloc(m->heap, m->heap_cap * sizeof *m->heap);
    kt_assert(m->heap != NULL);
  }
  for (size_t i = 0; i < m->leases.cap; i++) {
    struct kt_lease *l = m->leases.s[i].p;
    if (!l)
      continue;
    l->expiry_ms = expiry_of(now_ms, l->ttl_s, extend_ms);
    l->expiring = false;
    heap_set(m, m->heap_len++, l);
  }
  /* Floyd's heapify: O(n). */
  for (size_t i = m->heap_len / 2; i-- > 0;)
    heap_down(m, i);
}

void kt_lease_demote(struct kt_lease_mgr *m) {
  for (size_t i = 0; i < m->heap_len; i++) {
    m->heap[i]->heap_i = NO_HEAP;
    m->heap[i]->expiry_ms = INT64_MAX;
    m->heap[i]->expiring = false;
  }
  m->heap_len = 0;
  m->leader = false;
}

bool kt_lease_is_leader(const struct kt_lease_mgr *m) { return m->leader; }

int kt_lease_keepalive(struct kt_lease_mgr *m, int64_t id, int64_t now_ms, int64_t *ttl_s) {
  if (!m->leader)
    return KT_ENOLEADER;
  struct kt_lease *l = lease_get(m, id);
  if (!l || l->expiring || l->expiry_ms <= now_ms)
    return KT_ELEASENOTFOUND;
  l->expiry_ms = expiry_of(now_ms, l->ttl_s, 0);
  heap_update(m, l);
  *ttl_s = l->ttl_s;
  return 0;
}

size_t kt_lease_expired(struct kt_lease_mgr *m, int64_t now_ms, size_t max, int64_t *out) {
  size_t n = 0;
  if (!m->leader)
    return 0;
  while (n < max && m->heap_len && m->heap[0]->expiry_ms <= now_ms) {
    struct kt_lease *l = m->heap[0];
    out[n++] = l->id;
    l->expiring = true;
    l->expiry_ms = now_ms > INT64_MAX - m->cfg.retry_ms ? INT64_MAX : now_ms + m->cfg.retry_ms;
    heap_down(m, 0);
  }
  m->stats.expired_out += n;
  return n;
}

int64_t kt_lease_next_expiry_ms(const struct kt_lease_mgr *m) {
  return m->leader && m->heap_len ? m->heap[0]->expiry_ms : INT64_MAX;
}

void kt_lease_id_state(const struct kt_lease_mgr *m, uint64_t state[4]) {
  memcpy(state, m->rng.s, sizeof m->rng.s);
}

void kt_lease_set_id_state(struct kt_lease_mgr *m, const uint64_t state[4]) {
  memcpy(m->rng.s, state, sizeof m->rng.s);
}

void kt_lease_stats(const struct kt_lease_mgr *m, struct kt_lease_stats *out) { *out = m->stats; }
