/* tools/etcddb/etcddb.c — see etcddb.h for the schema and the data flow. */
#include "etcddb.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "../../core/lease.h"
#include "../../snap/bbolt.h"
#include "../../snap/snap.h"
#include "../../wal/wal.h"
#include "kv.pb-c.h"
#include "lease.pb-c.h"

#define REV_BYTES 17
#define SHA_BYTES 32
#define SPILL_FLUSH (1u << 20)

static void *pb_alloc(void *data, size_t n) { return kt_arena_alloc(data, n); }
static void pb_free(void *data, void *p) {
  (void)data;
  (void)p;
}

static void rev_bytes(uint8_t *b, int64_t main, int64_t sub) {
  kt_put_u64be(b, (uint64_t)main);
  b[8] = '_';
  kt_put_u64be(b + 9, (uint64_t)sub);
}

/* etcd's snapshot files end in a SHA-256 of the rest when their size is
 * 512*k + 32 (clientv3/snapshot's hasChecksum). */
static bool has_trailer(size_t n) { return n >= SHA_BYTES && n % 512 == SHA_BYTES; }

bool kt_etcddb_is_bbolt(const uint8_t *p, size_t n) {
  return n >= 24 && p[16] == 0xED && p[17] == 0xDA && p[18] == 0x0C && p[19] == 0xED;
}

/* ---- status ---- */

struct status_ctx {
  const struct kt_bbolt *db;
  struct kt_etcddb_status *st;
  struct kt_err *e;
  bool in_key;
};

static int status_kv(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                     bool is_bucket) {
  struct status_ctx *c = arg;
  c->st->hash = kt_crc32c(c->st->hash, k, kn);
  if (!is_bucket) /* bbolt hands etcd a nil value for a nested bucket */
    c->st->hash = kt_crc32c(c->st->hash, v, vn);
  if (c->in_key) {
    if (kn < REV_BYTES)
      return kt_err_set(c->e, KT_ECORRUPT, "%s: bucket \"key\": a key of %zu bytes", c->db->name,
                        kn);
    c->st->revision = (int64_t)kt_get_u64be(k);
  }
  c->st->total_keys++;
  return 0;
}

static int status_bucket(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                         bool is_bucket) {
  struct status_ctx *c = arg;
  struct kt_bbolt_bucket b;
  if (!is_bucket)
    return kt_err_set(c->e, KT_ECORRUPT, "%s: a key outside every bucket", c->db->name);
  int rc = kt_bbolt_child(c->db, v, vn, &b, c->e);
  if (rc)
    return rc;
  c->st->hash = kt_crc32c(c->st->hash, k, kn);
  c->in_key = kn == 3 && !memcmp(k, "key", 3);
  return kt_bbolt_each(c->db, &b, status_kv, c, c->e);
}

int kt_etcddb_status(const uint8_t *p, size_t n, const char *name, struct kt_etcddb_status *st,
                     struct kt_err *e) {
  memset(st, 0, sizeof *st);
  struct kt_bbolt db;
  int rc = kt_bbolt_open(&db, p, has_trailer(n) ? n - SHA_BYTES : n, name, e);
  if (rc)
    return rc;
  struct status_ctx c = {.db = &db, .st = st, .e = e};
  struct kt_bbolt_bucket root = kt_bbolt_root(&db);
  rc = kt_bbolt_each(&db, &root, status_bucket, &c, e);
  st->total_size = db.pgid * db.page_size;
  return rc;
}

/* ---- import: decode and check ---- */

struct rec {
  uint64_t kpre; /* the key's first 8 bytes, big-endian: most comparisons end here */
  const uint8_t *key, *val;
  uint32_t klen, vlen, sub;
  bool tomb;
  int64_t main, create, version, lease;
};

struct decoded {
  const char *name;
  struct kt_err *e;
  const struct kt_bbolt *db;
  struct rec *v;
  size_t n, cap;
  struct kt_arena data, scratch;
  int64_t last_rev, finished, scheduled;
  uint64_t consistent_index;
  struct kt_lease_mgr *leases;
  uint64_t n_leases;
};

static void decoded_free(struct decoded *d) {
  free(d->v);
  kt_arena_free(&d->data);
  kt_arena_free(&d->scratch);
  if (d->leases)
    kt_lease_free(d->leases);
}

static const char *rev_str(const uint8_t *k, size_t kn, char *buf, size_t n) {
  if (kn >= REV_BYTES)
    snprintf(buf, n, "revision %lld_%lld%s", (long long)kt_get_u64be(k),
             (long long)kt_get_u64be(k + 9), kn == REV_BYTES + 1 ? " (tombstone)" : "");
  else
    snprintf(buf, n, "a key of %zu bytes", kn);
  return buf;
}

static int key_cb(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                  bool is_bucket) {
  struct decoded *d = arg;
  char where[80];
  if (is_bucket || (kn != REV_BYTES && kn != REV_BYTES + 1) || k[8] != '_' ||
      (kn == REV_BYTES + 1 && k[REV_BYTES] != 't'))
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"key\": %s is not a revision", d->name,
                      rev_str(k, kn, where, sizeof where));
  int64_t main = (int64_t)kt_get_u64be(k), sub = (int64_t)kt_get_u64be(k + 9);
  if (main < 1 || sub < 0 || sub > UINT32_MAX)
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"key\": %s is out of range", d->name,
                      rev_str(k, kn, where, sizeof where));
  kt_arena_reset(&d->scratch);
  ProtobufCAllocator al = {pb_alloc, pb_free, &d->scratch};
  Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(&al, vn, v);
  bool tomb = kn == REV_BYTES + 1;
  const char *bad = NULL;
  if (!kv)
    bad = "its value is not an mvccpb.KeyValue";
  else if (!kv->key.len)
    bad = "its key is empty";
  else if (!tomb && kv->mod_revision != main)
    bad = "its mod_revision differs from the revision";
  else if (!tomb && (kv->create_revision < 1 || kv->create_revision > main || kv->version < 1))
    bad = "its create_revision or version is out of range";
  if (bad)
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"key\": %s: %s", d->name,
                      rev_str(k, kn, where, sizeof where), bad);
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 4096;
    struct rec *nv = realloc(d->v, d->cap * sizeof *nv);
    if (!nv)
      return kt_err_set(d->e, KT_ENOMEM, "%s: out of memory at %zu revisions", d->name, d->n);
    d->v = nv;
  }
  struct rec *r = &d->v[d->n++];
  memset(r, 0, sizeof *r);
  uint8_t pre[8] = {0};
  memcpy(pre, kv->key.data, kv->key.len < 8 ? kv->key.len : 8);
  r->kpre = kt_get_u64be(pre);
  r->key = kt_arena_dup(&d->data, kv->key.data, kv->key.len);
  r->klen = (uint32_t)kv->key.len;
  r->main = main;
  r->sub = (uint32_t)sub;
  r->tomb = tomb;
  if (!tomb) {
    r->val = kv->value.len ? kt_arena_dup(&d->data, kv->value.data, kv->value.len) : NULL;
    r->vlen = (uint32_t)kv->value.len;
    r->create = kv->create_revision;
    r->version = kv->version;
    r->lease = kv->lease;
  }
  d->last_rev = main;
  return 0;
}

static int meta_cb(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                   bool is_bucket) {
  struct decoded *d = arg;
  int64_t *rev = NULL;
  if (kn == 16 && !memcmp(k, "consistent_index", 16)) {
    if (is_bucket || vn != 8)
      return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"meta\": consistent_index of %zu bytes",
                        d->name, vn);
    d->consistent_index = kt_get_u64be(v);
    return 0;
  }
  if (kn == 18 && !memcmp(k, "finishedCompactRev", 18))
    rev = &d->finished;
  else if (kn == 19 && !memcmp(k, "scheduledCompactRev", 19))
    rev = &d->scheduled;
  else
    return 0; /* etcd 3.5's term, confState...: not needed */
  if (is_bucket || vn != REV_BYTES || (int64_t)kt_get_u64be(v) < 0)
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"meta\": %.*s is not a revision", d->name,
                      (int)kn, (const char *)k);
  *rev = (int64_t)kt_get_u64be(v);
  return 0;
}

static int lease_cb(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                    bool is_bucket) {
  struct decoded *d = arg;
  if (is_bucket || kn != 8)
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"lease\": a key of %zu bytes", d->name, kn);
  int64_t id = (int64_t)kt_get_u64be(k);
  kt_arena_reset(&d->scratch);
  ProtobufCAllocator al = {pb_alloc, pb_free, &d->scratch};
  Leasepb__Lease *l = leasepb__lease__unpack(&al, vn, v);
  const char *bad = !l            ? "its value is not a leasepb.Lease"
                    : l->id != id ? "its ID differs from its key"
                                  : NULL;
  if (!bad && kt_lease_restore(d->leases, id, l->ttl))
    bad = "ketch cannot hold its TTL";
  if (bad)
    return kt_err_set(d->e, KT_ECORRUPT, "%s: bucket \"lease\": lease %016llx: %s", d->name,
                      (unsigned long long)id, bad);
  d->n_leases++;
  return 0;
}

static int rec_cmp(const void *a, const void *b) {
  const struct rec *x = a, *y = b;
  if (x->kpre != y->kpre)
    return x->kpre < y->kpre ? -1 : 1;
  int c = memcmp(x->key, y->key, x->klen < y->klen ? x->klen : y->klen);
  if (c || x->klen != y->klen)
    return c ? c : x->klen < y->klen ? -1 : 1;
  if (x->main != y->main)
    return x->main < y->main ? -1 : 1;
  return (x->sub > y->sub) - (x->sub < y->sub);
}

static bool same_key(const struct rec *a, const struct rec *b) {
  return a->klen == b->klen && a->kpre == b->kpre && !memcmp(a->key, b->key, a->klen);
}

/* Sorts the records into ketch's order and drops, per key, what compaction
 * at c removes (etcd's keyIndex.compact); counts the live keys. */
static int arrange(struct decoded *d, int64_t c, uint64_t *live) {
  if (d->n)
    qsort(d->v, d->n, sizeof *d->v, rec_cmp);
  size_t out = 0;
  *live = 0;
  for (size_t i = 0, j; i < d->n; i = j) {
    j = i + 1;
    while (j < d->n && same_key(&d->v[i], &d->v[j])) {
      if (d->v[j].main == d->v[j - 1].main && d->v[j].sub == d->v[j - 1].sub)
        return kt_err_set(d->e, KT_ECORRUPT,
                          "%s: bucket \"key\": revision %lld_%u holds one key twice", d->name,
                          (long long)d->v[j].main, d->v[j].sub);
      j++;
    }
    size_t from = i;
    for (size_t m = i; m < j && d->v[m].main <= c; m++)
      from = d->v[m].tomb ? m + 1 : m;
    if (from < j && d->v[i].main > c)
      from = i;
    for (size_t m = from; m < j; m++)
      d->v[out++] = d->v[m];
    if (from < j && !d->v[j - 1].tomb)
      (*live)++;
  }
  d->n = out;
  return 0;
}

static int decode(struct decoded *d, const uint8_t *p, size_t n, struct kt_etcddb_stats *st) {
  struct kt_bbolt db;
  int rc = kt_bbolt_open(&db, p, n, d->name, d->e);
  if (rc)
    return rc;
  d->db = &db;
  struct kt_bbolt_bucket root = kt_bbolt_root(&db), b;
  rc = kt_bbolt_bucket(&db, &root, "key", &b, d->e);
  if (rc == KT_ENOTFOUND || rc == KT_EINVAL)
    return kt_err_set(d->e, KT_EINVAL,
                      "%s: a bbolt file without etcd's \"key\" bucket: not an etcd v3 database",
                      d->name);
  if (!rc)
    rc = kt_bbolt_each(&db, &b, key_cb, d, d->e);
  if (!rc && !(rc = kt_bbolt_bucket(&db, &root, "meta", &b, d->e)))
    rc = kt_bbolt_each(&db, &b, meta_cb, d, d->e);
  if (rc == KT_ENOTFOUND) /* a database that never saved its meta */
    rc = 0, d->e->code = 0;
  uint8_t seed[8];
  randombytes_buf(seed, sizeof seed);
  d->leases = kt_lease_new(&(struct kt_lease_cfg){.id_seed = kt_get_u64be(seed)});
  if (!rc && !(rc = kt_bbolt_bucket(&db, &root, "lease", &b, d->e)))
    rc = kt_bbolt_each(&db, &b, lease_cb, d, d->e);
  if (rc == KT_ENOTFOUND)
    rc = 0, d->e->code = 0;
  if (rc)
    return rc;
  int64_t c = d->finished > d->scheduled ? d->finished : d->scheduled;
  memset(st, 0, sizeof *st);
  st->compact_revision = c;
  st->revision = d->last_rev > c ? d->last_rev : c;
  if (st->revision < 1)
    st->revision = 1; /* an empty store is at revision 1, as etcd's */
  st->raft_index = d->consistent_index;
  st->leases = d->n_leases;
  rc = arrange(d, c, &st->live_keys);
  st->revisions = d->n;
  return rc;
}

int kt_etcddb_check(const uint8_t *p, size_t n, const char *name, struct kt_etcddb_stats *st,
                    struct kt_err *e) {
  struct decoded d = {.name = name, .e = e};
  int rc = decode(&d, p, has_trailer(n) ? n - SHA_BYTES : n, st);
  decoded_free(&d);
  return rc;
}

/* ---- import: write ---- */

struct mapped {
  int fd;
  uint8_t *p;
  size_t n;
};

static int map_file(const char *path, struct mapped *m, struct kt_err *e) {
  memset(m, 0, sizeof *m);
  m->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (m->fd < 0)
    return kt_err_set(e, errno == ENOENT ? KT_ENOTFOUND : KT_EIO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(m->fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(m->fd);
    return kt_err_set(e, KT_EIO, "%s: not a regular file", path);
  }
  m->n = (size_t)sb.st_size;
  if (m->n == 0) {
    close(m->fd);
    return kt_err_set(e, KT_ECORRUPT, "%s: empty file", path);
  }
  m->p = mmap(NULL, m->n, PROT_READ, MAP_PRIVATE, m->fd, 0);
  if (m->p == MAP_FAILED) {
    close(m->fd);
    return kt_err_set(e, KT_EIO, "%s: mmap: %s", path, strerror(errno));
  }
  return 0;
}

static void unmap_file(struct mapped *m) {
  if (m->p && m->p != MAP_FAILED)
    munmap(m->p, m->n);
  if (m->fd >= 0)
    close(m->fd);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static sem_t writer_sem;
static void writer_notify(void *arg) {
  (void)arg;
  sem_post(&writer_sem);
}

static int write_snapshot(struct decoded *d, const char *snap_dir, const struct kt_etcddb_stats *st,
                          const char *file, struct kt_err *e) {
  struct kt_buf blob = {0};
  char text[512];
  snprintf(text, sizeof text, "migrated from etcd database %s revision=%lld", file,
           (long long)st->revision);
  kt_node_blob_make(text, d->leases, &blob);
  struct kt_snap_meta meta = {.term = 1,
                              .index = st->raft_index ? st->raft_index : 1,
                              .revision = st->revision,
                              .compact_revision = st->compact_revision,
                              .membership = {blob.p, (uint32_t)blob.len}};
  snprintf(meta.creator, sizeof meta.creator, "ketchutl %s migrate from-etcd", KT_VERSION);
  sem_init(&writer_sem, 0, 0);
  struct kt_snap_writer_opts o = {.notify = writer_notify};
  struct kt_snap_writer *w;
  int rc = kt_snap_writer_open(snap_dir, &meta, &o, &w, e);
  kt_buf_free(&blob);
  if (rc)
    return rc;
  for (size_t i = 0; i < d->n && !rc;) {
    while (!kt_snap_writer_can_add(w) && kt_snap_writer_poll(w, NULL, NULL) == KT_SNAP_RUNNING)
      sem_wait(&writer_sem);
    for (size_t k = 0; k < 1024 && i < d->n && !rc; k++, i++) {
      const struct rec *r = &d->v[i];
      struct kt_kvrev kr = {.key = {r->key, r->klen},
                            .value = {r->val, r->vlen},
                            .create_revision = r->create,
                            .mod_revision = r->main,
                            .mod_sub = r->sub,
                            .version = r->version,
                            .lease = r->lease,
                            .tombstone = r->tomb};
      rc = kt_snap_writer_add(w, &kr);
      if (rc && rc != KT_EIO)
        kt_err_set(e, KT_ECORRUPT, "%s: revision %lld_%u of key \"%.*s\": not a valid record (%s)",
                   file, (long long)r->main, r->sub, (int)(r->klen > 64 ? 64 : r->klen),
                   (const char *)r->key, kt_strerror(rc));
    }
  }
  if (!rc)
    rc = kt_snap_writer_finish(w);
  enum kt_snap_state s;
  struct kt_err we = {0};
  while ((s = kt_snap_writer_poll(w, NULL, &we)) == KT_SNAP_RUNNING)
    sem_wait(&writer_sem);
  if (s == KT_SNAP_FAILED && !e->code)
    *e = we, rc = we.code ? we.code : KT_EIO;
  kt_snap_writer_free(w);
  sem_destroy(&writer_sem);
  return rc ? (e->code ? e->code : rc) : 0;
}

int kt_etcddb_import(const char *file, const char *data_dir, const struct kt_node_config *members,
                     struct kt_etcddb_stats *st, struct kt_err *e) {
  struct mapped m;
  int rc = map_file(file, &m, e);
  if (rc)
    return rc;
  size_t n = m.n;
  if (has_trailer(n)) { /* as etcdutl snapshot restore: the SHA-256 must match */
    uint8_t sum[SHA_BYTES];
    EVP_Digest(m.p, n - SHA_BYTES, sum, NULL, EVP_sha256(), NULL);
    n -= SHA_BYTES;
    if (memcmp(sum, m.p + n, SHA_BYTES)) {
      unmap_file(&m);
      return kt_err_set(e, KT_ECORRUPT,
                        "%s: the SHA-256 at its end does not match the database (damaged or "
                        "truncated)",
                        file);
    }
  }
  struct decoded d = {.name = file, .e = e};
  rc = decode(&d, m.p, n, st);
  struct stat sb;
  if (!rc && stat(data_dir, &sb) == 0)
    rc = kt_err_set(e, KT_EINVAL, "data-dir %s exists", data_dir);
  bool made = false;
  char path[4200];
  if (!rc) {
    const char *sub[] = {"", "/member", "/member/snap", "/member/wal"};
    for (size_t i = 0; i < KT_ARRAY_LEN(sub) && !rc; i++) {
      snprintf(path, sizeof path, "%s%s", data_dir, sub[i]);
      if (mkdir(path, 0700) < 0)
        rc = kt_err_set(e, KT_EIO, "mkdir %s: %s", path, strerror(errno));
      made = true;
    }
  }
  if (!rc && members) {
    snprintf(path, sizeof path, "%s/member", data_dir);
    rc = kt_node_member_write_initial(members, path, st->raft_index ? st->raft_index : 1, e);
  }
  if (!rc) {
    snprintf(path, sizeof path, "%s/member/snap", data_dir);
    rc = write_snapshot(&d, path, st, file, e);
  }
  decoded_free(&d);
  unmap_file(&m);
  if (rc && made)
    nftw(data_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}

/* ---- export ---- */

struct idx {
  int64_t main;
  uint64_t off;
  uint32_t len; /* top bit: tombstone */
  uint32_t sub;
};

struct lease_pair {
  int64_t id, ttl;
};

struct exp {
  const char *name;
  struct kt_err *e;
  int spill;
  struct kt_buf buf; /* spill bytes not yet written */
  uint64_t off;      /* spill file size, written and buffered */
  struct idx *v;
  size_t n, cap;
  struct lease_pair *leases;
  size_t nl, capl;
};

static int spill_flush(struct exp *x) {
  size_t done = 0;
  while (done < x->buf.len) {
    ssize_t r = write(x->spill, x->buf.p + done, x->buf.len - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return kt_err_set(x->e, KT_EIO, "%s: spill file: %s", x->name,
                        r < 0 ? strerror(errno) : "no progress");
    done += (size_t)r;
  }
  kt_buf_reset(&x->buf);
  return 0;
}

static int export_rec(void *arg, const struct kt_kvrev *r) {
  struct exp *x = arg;
  Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT;
  kv.key = (ProtobufCBinaryData){r->key.n, (uint8_t *)r->key.p};
  if (!r->tombstone) { /* etcd's tombstone: the key alone */
    kv.create_revision = r->create_revision;
    kv.mod_revision = r->mod_revision;
    kv.version = r->version;
    kv.value = (ProtobufCBinaryData){r->value.n, (uint8_t *)r->value.p};
    kv.lease = r->lease;
  }
  size_t len = mvccpb__key_value__get_packed_size(&kv);
  if (len >= (1u << 31))
    return kt_err_set(x->e, KT_ETOOLARGE, "%s: a record of %zu bytes", x->name, len);
  kt_buf_reserve(&x->buf, len);
  mvccpb__key_value__pack(&kv, x->buf.p + x->buf.len);
  x->buf.len += len;
  if (x->n == x->cap) {
    x->cap = x->cap ? 2 * x->cap : 4096;
    struct idx *nv = realloc(x->v, x->cap * sizeof *nv);
    if (!nv)
      return kt_err_set(x->e, KT_ENOMEM, "%s: out of memory at %zu revisions", x->name, x->n);
    x->v = nv;
  }
  x->v[x->n++] =
      (struct idx){r->mod_revision, x->off, (uint32_t)len | (r->tombstone ? 0x80000000u : 0),
                   (uint32_t)r->mod_sub};
  x->off += len;
  return x->buf.len >= SPILL_FLUSH ? spill_flush(x) : 0;
}

static int lease_pair_add(void *arg, int64_t id, int64_t ttl) {
  struct exp *x = arg;
  if (x->nl == x->capl) {
    x->capl = x->capl ? 2 * x->capl : 64;
    x->leases = realloc(x->leases, x->capl * sizeof *x->leases);
    kt_assert(x->leases);
  }
  x->leases[x->nl++] = (struct lease_pair){id, ttl};
  return 0;
}

static int idx_cmp(const void *a, const void *b) {
  const struct idx *x = a, *y = b;
  if (x->main != y->main)
    return x->main < y->main ? -1 : 1;
  return (x->sub > y->sub) - (x->sub < y->sub);
}

static int lease_cmp(const void *a, const void *b) {
  uint64_t x = (uint64_t)((const struct lease_pair *)a)->id;
  uint64_t y = (uint64_t)((const struct lease_pair *)b)->id;
  return (x > y) - (x < y);
}

/* The buckets and keys of the database, into w (the dry run, spill NULL,
 * or the real one). */
static int feed(struct kt_bbolt_writer *w, const struct exp *x, const uint8_t *spill,
                const struct kt_snap_meta *meta, struct kt_err *e) {
  int rc = kt_bbolt_writer_bucket(w, "key", e);
  uint8_t k[REV_BYTES + 1];
  for (size_t i = 0; i < x->n && !rc; i++) {
    const struct idx *r = &x->v[i];
    bool tomb = r->len & 0x80000000u;
    rev_bytes(k, r->main, r->sub);
    k[REV_BYTES] = 't';
    rc = kt_bbolt_writer_put(w, k, REV_BYTES + tomb, spill ? spill + r->off : NULL,
                             r->len & 0x7fffffffu, e);
    if (rc == KT_EINVAL) /* two records at one revision */
      rc = kt_err_set(e, KT_ECORRUPT, "%s: revision %lld_%u appears twice", x->name,
                      (long long)r->main, r->sub);
  }
  if (!rc)
    rc = kt_bbolt_writer_bucket(w, "lease", e);
  for (size_t i = 0; i < x->nl && !rc; i++) {
    Leasepb__Lease l = LEASEPB__LEASE__INIT;
    l.id = x->leases[i].id;
    l.ttl = x->leases[i].ttl;
    uint8_t v[64];
    size_t vn = leasepb__lease__pack(&l, v);
    kt_put_u64be(k, (uint64_t)l.id);
    rc = kt_bbolt_writer_put(w, k, 8, v, vn, e);
  }
  if (!rc)
    rc = kt_bbolt_writer_bucket(w, "meta", e);
  uint8_t ci[8];
  kt_put_u64be(ci, meta->index);
  if (!rc)
    rc = kt_bbolt_writer_put(w, (const uint8_t *)"consistent_index", 16, ci, 8, e);
  rev_bytes(k, meta->compact_revision, 0);
  if (!rc && meta->compact_revision > 0)
    rc = kt_bbolt_writer_put(w, (const uint8_t *)"finishedCompactRev", 18, k, REV_BYTES, e);
  if (!rc && meta->compact_revision > 0)
    rc = kt_bbolt_writer_put(w, (const uint8_t *)"scheduledCompactRev", 19, k, REV_BYTES, e);
  return rc;
}

/* Where the real run's bytes go: the file, in order, hashed on the way. */
struct out {
  int fd;
  const char *name;
  uint64_t done, total;
  EVP_MD_CTX *sha;
  kt_etcddb_progress_fn progress;
  void *parg;
};

static int out_sink(void *arg, const uint8_t *p, size_t n, struct kt_err *e) {
  struct out *o = arg;
  for (size_t off = 0; off < n;) {
    ssize_t r = write(o->fd, p + off, n - off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return kt_err_set(e, KT_EIO, "%s: write: %s", o->name,
                        r < 0 ? strerror(errno) : "no progress");
    off += (size_t)r;
  }
  EVP_DigestUpdate(o->sha, p, n);
  o->done += n;
  if (o->progress)
    o->progress(o->parg, o->done, o->total);
  return 0;
}

static int write_bbolt(struct exp *x, const uint8_t *spill, const struct kt_snap_meta *meta,
                       struct out *o, bool trailer, struct kt_err *e) {
  struct kt_bbolt_layout plan;
  struct kt_bbolt_writer *w = kt_bbolt_writer_new(NULL, NULL, o->name, NULL); /* dry run */
  if (!w)
    return kt_err_set(e, KT_ENOMEM, "%s: out of memory", o->name);
  int rc = feed(w, x, NULL, meta, e);
  if (!rc)
    rc = kt_bbolt_writer_finish(w, &plan, e);
  kt_bbolt_writer_free(w);
  if (rc)
    return rc;
  o->total = kt_bbolt_layout_bytes(&plan);
  if (o->progress)
    o->progress(o->parg, 0, o->total);
  w = kt_bbolt_writer_new(out_sink, o, o->name, &plan);
  if (!w)
    return kt_err_set(e, KT_ENOMEM, "%s: out of memory", o->name);
  rc = feed(w, x, spill, meta, e);
  if (!rc)
    rc = kt_bbolt_writer_finish(w, NULL, e);
  kt_bbolt_writer_free(w);
  if (!rc && trailer) { /* etcd's: the SHA-256 of the database, appended */
    uint8_t sum[SHA_BYTES];
    EVP_DigestFinal_ex(o->sha, sum, NULL);
    kt_etcddb_progress_fn p = o->progress;
    o->progress = NULL; /* progress counts the database */
    rc = out_sink(o, sum, sizeof sum, e);
    o->progress = p;
  }
  return rc;
}

int kt_etcddb_export(const char *snap_file, int out_fd, const char *out_name, const char *tmp_dir,
                     bool trailer, kt_etcddb_progress_fn progress, void *parg,
                     struct kt_etcddb_stats *st, struct kt_err *e) {
  struct exp x = {.name = snap_file, .e = e, .spill = -1};
  char tmpl[4200];
  snprintf(tmpl, sizeof tmpl, "%s/ketch-etcd-export-XXXXXX", tmp_dir);
  x.spill = mkstemp(tmpl);
  if (x.spill < 0)
    return kt_err_set(e, KT_EIO, "%s: %s", tmpl, strerror(errno));
  unlink(tmpl);
  struct kt_snap_meta meta = {0};
  int rc = kt_snap_load(snap_file, export_rec, &x, &meta, e);
  if (!rc)
    rc = spill_flush(&x);
  if (!rc)
    rc = kt_node_blob_leases(meta.membership.p, meta.membership.n, lease_pair_add, &x, e);
  uint8_t *spill = NULL;
  if (!rc && x.off) {
    spill = mmap(NULL, x.off, PROT_READ, MAP_PRIVATE, x.spill, 0);
    if (spill == MAP_FAILED)
      spill = NULL, rc = kt_err_set(e, KT_EIO, "%s: mmap: %s", tmpl, strerror(errno));
  }
  struct out o = {
      .fd = out_fd, .name = out_name, .sha = EVP_MD_CTX_new(), .progress = progress, .parg = parg};
  if (!rc && (!o.sha || !EVP_DigestInit_ex(o.sha, EVP_sha256(), NULL)))
    rc = kt_err_set(e, KT_ENOMEM, "%s: out of memory", out_name);
  if (!rc) {
    if (x.n)
      qsort(x.v, x.n, sizeof *x.v, idx_cmp);
    if (x.nl)
      qsort(x.leases, x.nl, sizeof *x.leases, lease_cmp);
    rc = write_bbolt(&x, spill, &meta, &o, trailer, e);
  }
  if (!rc && st)
    *st = (struct kt_etcddb_stats){.revision = meta.revision,
                                   .compact_revision = meta.compact_revision,
                                   .revisions = x.n,
                                   .live_keys = meta.live_keys,
                                   .leases = x.nl,
                                   .raft_index = meta.index,
                                   .bytes = o.total};
  EVP_MD_CTX_free(o.sha);
  if (spill)
    munmap(spill, x.off);
  close(x.spill);
  kt_buf_free(&x.buf);
  free(x.v);
  free(x.leases);
  kt_snap_meta_free(&meta);
  return rc;
}
