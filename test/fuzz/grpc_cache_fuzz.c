/* test/fuzz/grpc_cache_fuzz.c — ketch-grpc's range cache
 * (tools/grpc-bridge/bridge_cache.c) driven by bytes: its index, LRU bounds
 * and serving rules, checked against brute force after every step, and its
 * one parser of response bytes (framed_revision) over the raw input.
 *
 * Input: byte 0 picks max entries (1..16), byte 1 max bytes; then ops of a
 * few bytes each: a miss + fill of a request (key, kind point / range /
 * from-key, explicit revision or not), an event on a key (the revision
 * moves on), a lookup, changes of W, S, the clock and the probes'
 * freshness, a compaction, a clear. Checks: n and bytes within bounds and
 * equal to the LRU list's; the treap is ordered, its max-end fields right
 * and it holds exactly the revision-0 entries; stab == a linear scan; an
 * event leaves no entry holding its key read before it; a lookup serves
 * only what the rules allow, with header revision max(Rr, W) >= S, and the
 * answer unpacks as a RangeResponse whose body is the one stored and whose
 * header bytes are what protobuf-c packs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/grpc-bridge/bridge_cache.c"
#include "auth.pb-c.c"
#include "kv.pb-c.c"
#include "rpc.pb-c.c"

static int64_t g_rev;
static double g_now;

static size_t walk(const struct centry *t, size_t depth) {
  if (!t)
    return 0;
  if (depth > 4096)
    abort();
  const struct centry *m = t;
  if (t->left && tree_hi_cmp(t->left->maxe, m) > 0)
    m = t->left->maxe;
  if (t->right && tree_hi_cmp(t->right->maxe, m) > 0)
    m = t->right->maxe;
  if (tree_hi_cmp(m, t->maxe) != 0 || !t->in_tree || t->revision != 0)
    abort();
  if (t->left && (tree_node_cmp(t->left, t) >= 0 || t->left->prio > t->prio))
    abort();
  if (t->right && (tree_node_cmp(t->right, t) <= 0 || t->right->prio > t->prio))
    abort();
  return 1 + walk(t->left, depth + 1) + walk(t->right, depth + 1);
}

static void check(void) {
  size_t n = 0, bytes = 0, in_tree = 0;
  const struct centry *prev = NULL;
  for (const struct centry *e = C.head; e; e = e->next) {
    if (e->prev != prev || cache_find(e->req, e->req_len, e->hash) != e)
      abort();
    n++;
    bytes += e->bytes;
    in_tree += e->in_tree;
    if (e->in_tree != (e->revision == 0))
      abort();
    prev = e;
  }
  if (C.tail != prev || n != C.n || bytes != C.bytes || n > C.max_entries || bytes > C.max_bytes)
    abort();
  if (walk(C.root, 0) != in_tree)
    abort();
}

static bool holds(const struct centry *e, const uint8_t *k, size_t kn) {
  return cache_bcmp(e->lo, e->lo_len, k, kn) <= 0 && tree_below_hi(e, k, kn);
}

static void check_stab(const uint8_t *k, size_t kn) {
  C.n_hit = 0;
  C.hit_oom = false;
  tree_stab(C.root, k, kn);
  size_t want = 0;
  for (const struct centry *e = C.head; e; e = e->next)
    if (e->in_tree && holds(e, k, kn)) {
      want++;
      bool found = false;
      for (size_t i = 0; i < C.n_hit; i++)
        found |= C.hit[i] == e;
      if (!found)
        abort();
    }
  if (want != C.n_hit && !C.hit_oom)
    abort();
}

/* A request's bytes and its decoded range: key k (1..3 bytes of a small
 * alphabet), kind 0 point, 1 [k, k+"b"), 2 from k, revision rev. */
struct rq {
  uint8_t msg[16];
  size_t len;
  uint8_t key[4], end[5];
  ketch_range_req q;
};

static const uint8_t *take(const uint8_t **p, const uint8_t *end, size_t n) {
  if ((size_t)(end - *p) < n)
    return NULL;
  const uint8_t *r = *p;
  *p += n;
  return r;
}

static void make_rq(struct rq *r, uint8_t a, uint8_t b) {
  memset(r, 0, sizeof *r);
  size_t kn = 1 + (a & 3) % 3;
  for (size_t i = 0; i < kn; i++)
    r->key[i] = (uint8_t)('a' + ((a >> (2 + i)) & 3));
  int kind = (b & 3) % 3;
  int64_t rev = (b >> 2) & 1 ? (b >> 3) : 0;
  r->q.key = r->key;
  r->q.key_len = kn;
  r->q.serializable = true;
  r->q.revision = rev;
  if (kind == 1) {
    memcpy(r->end, r->key, kn);
    r->end[kn - 1]++;
    r->q.range_end = r->end;
    r->q.range_end_len = kn;
  } else if (kind == 2) {
    r->q.range_end = (const uint8_t *)"";
    r->q.range_end_len = 1; /* "\0" */
  }
  r->len = 0;
  memcpy(r->msg, r->key, kn);
  r->len = kn;
  r->msg[r->len++] = (uint8_t)kind;
  r->msg[r->len++] = (uint8_t)rev;
}

static void check_answer(const uint8_t *framed, size_t len, int64_t rev, const struct centry *e) {
  if (len < 5 || cache_framed_revision(framed, len) != rev)
    abort();
  Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, len - 5, framed + 5);
  if (!r || !r->header || r->header->revision != rev)
    abort();
  Etcdserverpb__ResponseHeader hdr = *r->header;
  uint8_t a[64], b[64];
  size_t an = etcdserverpb__response_header__pack(&hdr, a);
  size_t bn = cache_put_header(b, hdr.cluster_id, hdr.member_id, hdr.revision, hdr.raft_term);
  if (an != bn || memcmp(a, b, an))
    abort();
  if (e && (len - 5 < e->body_len || memcmp(framed + len - e->body_len, e->body, e->body_len)))
    abort();
  etcdserverpb__range_response__free_unpacked(r, NULL);
}

static void fill(const struct rq *r, uint8_t nkv) {
  struct kt_bridge_cache_fill *f = kt_bridge_cache_miss(C.kc, r->msg, r->len, &r->q);
  if (!f)
    return;
  Etcdserverpb__RangeResponse resp = ETCDSERVERPB__RANGE_RESPONSE__INIT;
  Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
  Mvccpb__KeyValue kv[3], *kvp[3];
  for (size_t i = 0; i < 3; i++) {
    mvccpb__key_value__init(&kv[i]);
    kv[i].key.data = (uint8_t *)r->key;
    kv[i].key.len = r->q.key_len;
    kv[i].value.data = (uint8_t *)"value";
    kv[i].value.len = 5;
    kv[i].mod_revision = g_rev;
    kvp[i] = &kv[i];
  }
  ketch_header kh = {7, 9, g_rev, 2};
  h.cluster_id = 7;
  h.member_id = 9;
  h.revision = g_rev;
  h.raft_term = 2;
  resp.header = &h;
  resp.kvs = kvp;
  resp.n_kvs = nkv % 4;
  resp.count = (int64_t)(nkv % 4);
  size_t len = 0;
  uint8_t *framed = kt_bridge_cache_fill(f, &kh, &resp, &len);
  if (resp.header != &h)
    abort();
  if (framed) {
    /* the client's answer is byte for byte what protobuf-c packs */
    size_t want = etcdserverpb__range_response__get_packed_size(&resp);
    uint8_t *buf = malloc(want ? want : 1);
    if (!buf)
      abort();
    etcdserverpb__range_response__pack(&resp, buf);
    if (len != want + 5 || memcmp(framed + 5, buf, want))
      abort();
    free(buf);
    check_answer(framed, len, g_rev, NULL);
    free(framed);
  }
}

static void lookup_one(const struct rq *r) {
  struct centry *e = cache_find(r->msg, r->len, cache_hash(r->msg, r->len));
  int64_t S = atomic_load(&shared_S);
  bool may = e && C.live;
  if (may) {
    int64_t cur = e->read_rev > C.W ? e->read_rev : C.W;
    double t = e->fill_t > C.fresh_t ? e->fill_t : C.fresh_t;
    may = cur >= S &&
          (e->revision == 0 ? g_now - t <= C.max_stale_s
                            : e->revision >= C.floor && (g_now - e->fill_t <= C.max_stale_s ||
                                                         (C.ok_rev > 0 && e->revision >= C.ok_rev &&
                                                          g_now - C.ok_t <= C.max_stale_s)));
  }
  int64_t cur = 0;
  struct centry *got = C.n ? cache_lookup(r->msg, r->len, g_now, &cur) : NULL;
  if ((got != NULL) != may || (got && got != e))
    abort();
  if (got) {
    size_t len;
    uint8_t *framed = cache_frame_answer(got, cur, &len);
    if (framed) {
      check_answer(framed, len, cur, got);
      free(framed);
    }
    if (C.head != got)
      abort();
  }
}

/* cache_now_s() is the real clock; the fuzz target's own clock drives lookup
 * directly, and fill times are moved onto it after each fill. */
static void retime(double before) {
  for (struct centry *e = C.head; e; e = e->next)
    if (e->fill_t >= before)
      e->fill_t = g_now;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the parser of response bytes: over anything (bounded), and exact on
   * what protobuf-c packs */
  uint8_t *framed = malloc(size + 5);
  if (!framed)
    return 0;
  framed[0] = 0;
  memcpy(framed + 5, data, size);
  (void)cache_framed_revision(framed, size + 5);
  free(framed);
  Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, size, data);
  if (rr) {
    size_t n = etcdserverpb__range_response__get_packed_size(rr);
    uint8_t *f = malloc(n + 5);
    if (f) {
      f[0] = 0;
      etcdserverpb__range_response__pack(rr, f + 5);
      int64_t want = rr->header && rr->header->revision > 0 ? rr->header->revision : 0;
      if (cache_framed_revision(f, n + 5) != want)
        abort();
      free(f);
    }
    etcdserverpb__range_response__free_unpacked(rr, NULL);
  }
  if (size < 2)
    return 0;

  static int dummy;
  bool submitted = false;
  memset(&C, 0, sizeof C);
  atomic_store(&shared_S, 0); /* the loops' registers (one loop here) */
  atomic_store(&shared_floor, 0);
  atomic_store(&shared_gen, 0);
  atomic_store(&n_caches, 0);
  if (kt_bridge_cache_setup(NULL, (ketch_client *)&dummy, &submitted, 1 + data[0] % 16,
                            4096 + (size_t)data[1] * 64, 0.1))
    return 0;
  C.live = true;
  g_rev = 1;
  g_now = 1000;
  C.W = 1;
  const uint8_t *p = data + 2, *end = data + size;
  const uint8_t *op;
  while ((op = take(&p, end, 3))) {
    struct rq r;
    make_rq(&r, op[1], op[2]);
    switch (op[0] % 9) {
    case 0: { /* a miss answered at the current revision */
      double before = cache_now_s();
      fill(&r, op[1]);
      retime(before);
      break;
    }
    case 1: { /* an event on r's key at the next revision */
      g_rev++;
      cache_invalidate(r.key, r.q.key_len, g_rev);
      if (op[2] & 1)
        C.W = g_rev;
      for (const struct centry *e = C.head; e; e = e->next)
        if (e->in_tree && holds(e, r.key, r.q.key_len) && e->read_rev < g_rev)
          abort();
      break;
    }
    case 2:
      lookup_one(&r);
      break;
    case 3: /* a client saw a revision */
      atomic_store(&shared_S, g_rev - (op[1] % 3));
      break;
    case 4: /* time passes */
      g_now += (op[1] % 16) * 0.01;
      break;
    case 5: /* a probe answered */
      C.fresh_t = g_now - (op[1] % 8) * 0.02;
      if (op[2] & 1) {
        C.ok_rev = op[2] >> 1;
        C.ok_t = C.fresh_t;
      }
      break;
    case 6:
      kt_bridge_cache_compacting(op[1] % 32);
      for (const struct centry *e = C.head; e; e = e->next)
        if (e->revision > 0 && e->revision < C.floor)
          abort();
      break;
    case 7:
      if (op[1] % 8 == 0)
        kt_bridge_cache_clear();
      else
        C.live = op[1] & 1;
      break;
    case 8:
      check_stab(r.key, r.q.key_len);
      break;
    }
    check();
  }
  kt_bridge_cache_stop();
  return 0;
}
