/* test/unit/snap_test.c — snapshot files: round trip, corruption, truncation,
 * backpressure, injected I/O errors, listing and retention. Real files in
 * kt_test_tmpdir(), a real writer thread. */
#include "../../snap/snap.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <msgpack.h>
#include <pthread.h>
#include <semaphore.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a deterministic record generator ----
 * Key k (16 bytes) has 1..3 puts and, for every 8th key, a final tombstone.
 * Values are 256 bytes: 64 random, the rest a pattern (compressible). */
struct gen {
  uint64_t k;
  int j, nput, nrec_key;
  uint64_t rev;
  uint8_t key[16], val[256];
  uint64_t live;
};

static void gen_key_setup(struct gen *g) {
  g->nput = 1 + (g->k % 4 == 0) + (g->k % 16 == 0);
  g->nrec_key = g->nput + (g->k % 8 == 3);
  char k[32];
  snprintf(k, sizeof k, "key-%012llu", (unsigned long long)g->k);
  memcpy(g->key, k, 16);
}

static void gen_init(struct gen *g) {
  memset(g, 0, sizeof *g);
  g->rev = 1;
  gen_key_setup(g);
}

static void gen_next(struct gen *g, struct kt_kvrev *r) {
  if (g->j == g->nrec_key) { /* the previous record ended its key */
    g->k++;
    g->j = 0;
    g->rev += 32;
    gen_key_setup(g);
  }
  bool tomb = g->j >= g->nput;
  memset(r, 0, sizeof *r);
  r->key = (struct kt_bytes){g->key, 16};
  r->mod_revision = (int64_t)(g->rev + (uint64_t)g->j * 7);
  r->mod_sub = g->j % 2;
  r->tombstone = tomb;
  if (!tomb) {
    struct kt_rng rng;
    kt_rng_seed(&rng, g->k * 8 + (uint64_t)g->j);
    for (int i = 0; i < 8; i++) {
      uint64_t x = kt_rng_next(&rng);
      memcpy(g->val + 8 * i, &x, 8);
    }
    for (int i = 64; i < 256; i++)
      g->val[i] = (uint8_t)(i * 7 + g->k);
    r->value = (struct kt_bytes){g->val, 256};
    r->create_revision = (int64_t)g->rev;
    r->version = g->j + 1;
    r->lease = g->k % 5 == 0 ? (int64_t)(0x7000000000000000ull + g->k) : 0;
  }
  if (++g->j == g->nrec_key && !tomb)
    g->live++;
}

static bool kvrev_eq(const struct kt_kvrev *a, const struct kt_kvrev *b) {
  return kt_bytes_cmp(a->key, b->key) == 0 && kt_bytes_cmp(a->value, b->value) == 0 &&
         a->create_revision == b->create_revision && a->mod_revision == b->mod_revision &&
         a->mod_sub == b->mod_sub && a->version == b->version && a->lease == b->lease &&
         a->tombstone == b->tombstone;
}

/* ---- driving the writer as the node would ---- */

static sem_t notified;
static atomic_int notify_count;
static void on_notify(void *arg) {
  (void)arg;
  atomic_fetch_add(&notify_count, 1);
  sem_post(&notified);
}
__attribute__((constructor)) static void init_sem(void) { sem_init(&notified, 0, 0); }

static void base_meta(struct kt_snap_meta *m) {
  memset(m, 0, sizeof *m);
  m->term = 7;
  m->index = 123456;
  m->revision = 1ll << 40;
  m->compact_revision = 1000;
  static const char members[] = "cluster=abc;m1=http://127.0.0.1:2380";
  m->membership = (struct kt_bytes){(const uint8_t *)members, sizeof members - 1};
  m->created_unix_ms = 1795000000123ull;
  snprintf(m->creator, sizeof m->creator, "ketch test");
}

/* Write n generated records; returns the final state (DONE/FAILED). */
static enum kt_snap_state write_gen(const char *dir, const struct kt_snap_meta *meta, uint64_t n,
                                    struct kt_snap_writer_opts *opts, struct kt_snap_meta *out,
                                    struct kt_err *err, char *path, size_t path_n) {
  struct kt_snap_writer_opts o = opts ? *opts : (struct kt_snap_writer_opts){0};
  o.notify = on_notify;
  struct kt_snap_writer *w;
  if (kt_snap_writer_open(dir, meta, &o, &w, err) != 0)
    return KT_SNAP_FAILED;
  if (path)
    snprintf(path, path_n, "%s", kt_snap_writer_path(w));
  struct gen g;
  gen_init(&g);
  struct kt_kvrev r;
  enum kt_snap_state st = KT_SNAP_RUNNING;
  /* Slices of 1000 records, each started only when can_add says so. */
  for (uint64_t i = 0; i < n;) {
    while (!kt_snap_writer_can_add(w)) {
      if (kt_snap_writer_poll(w, NULL, NULL) != KT_SNAP_RUNNING)
        goto wait;
      sem_wait(&notified);
    }
    for (int m = 0; m < 1000 && i < n; m++, i++) {
      gen_next(&g, &r);
      if (kt_snap_writer_add(w, &r) != 0)
        goto wait;
    }
  }
  kt_snap_writer_finish(w);
wait:
  while ((st = kt_snap_writer_poll(w, out, err)) == KT_SNAP_RUNNING)
    sem_wait(&notified);
  if (st == KT_SNAP_FAILED) { /* the loop thread's next add and finish see it */
    gen_next(&g, &r);
    int add = kt_snap_writer_add(w, &r), fin = kt_snap_writer_finish(w);
    if (add != err->code || fin != err->code)
      kt_test_fail(__FILE__, __LINE__, "after the failure: add %d, finish %d, not %d", add, fin,
                   err->code);
  }
  kt_snap_writer_free(w);
  return st;
}

struct check {
  struct gen g;
  uint64_t n, bad;
};
static int check_rec(void *arg, const struct kt_kvrev *rec) {
  struct check *c = arg;
  struct kt_kvrev want;
  gen_next(&c->g, &want);
  if (!kvrev_eq(rec, &want))
    c->bad++;
  c->n++;
  return 0;
}

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name), s = strlen(suffix);
    if (l >= s && strcmp(de->d_name + l - s, suffix) == 0)
      n++;
  }
  if (d)
    closedir(d);
  return n;
}

static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

/* ---- tests ---- */

TEST(roundtrip_1m_records) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta, done = {0}, got;
  base_meta(&meta);
  struct kt_err err = {0};
  char path[4096];
  const uint64_t n = 1000000;
  enum kt_snap_state st = write_gen(dir, &meta, n, NULL, &done, &err, path, sizeof path);
  if (st != KT_SNAP_DONE)
    printf("# %s\n", err.msg);
  CHECK_EQ(st, KT_SNAP_DONE);
  CHECK_EQ(done.record_count, n);
  CHECK_EQ(count_files(dir, ".tmp"), 0);
  char name[64];
  kt_snap_name(7, 123456, name, sizeof name);
  CHECK_STR(name, "0000000000000007-000000000001e240.snap");
  CHECK(strstr(path, name) != NULL);
  struct stat sb;
  CHECK(stat(path, &sb) == 0);
  CHECK_EQ(sb.st_size, done.file_bytes);

  struct check c = {.n = 0};
  gen_init(&c.g);
  int rc = kt_snap_load(path, check_rec, &c, &got, &err);
  if (rc)
    printf("# %s\n", err.msg);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.n, n);
  CHECK_EQ(c.bad, 0);
  CHECK_EQ(got.term, meta.term);
  CHECK_EQ(got.index, meta.index);
  CHECK_EQ(got.revision, meta.revision);
  CHECK_EQ(got.compact_revision, meta.compact_revision);
  CHECK_EQ(got.created_unix_ms, meta.created_unix_ms);
  CHECK_STR(got.creator, "ketch test");
  CHECK_EQ(kt_bytes_cmp(got.membership, meta.membership), 0);
  CHECK_EQ(got.record_count, n);
  CHECK_EQ(got.live_keys, c.g.live + (c.g.j < c.g.nrec_key)); /* a key cut mid-history is live */
  CHECK_EQ(got.live_keys, done.live_keys);
  CHECK_EQ(got.block_count, done.block_count);
  CHECK(got.block_count > 100); /* ~1 MiB blocks */
  CHECK_EQ(got.file_bytes, (uint64_t)sb.st_size);
  CHECK(memcmp(got.hash, done.hash, 32) == 0);
  kt_snap_meta_free(&got);
}

TEST(records_are_standard_msgpack) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_err err;
  char path[4096];
  CHECK_EQ(write_gen(dir, &meta, 50, NULL, NULL, &err, path, sizeof path), KT_SNAP_DONE);
  size_t n;
  uint8_t *f = read_file(path, &n);
  CHECK(f);
  uint32_t hlen = kt_get_u32be(f + 12);
  CHECK_EQ(f[hlen], 'B');
  uint32_t raw = kt_get_u32be(f + hlen + 1), comp = kt_get_u32be(f + hlen + 5);
  CHECK_EQ(kt_get_u32be(f + hlen + 9), 50);
  char *buf = malloc(raw);
  CHECK_EQ(LZ4_decompress_safe((char *)f + hlen + 13, buf, (int)comp, (int)raw), (int)raw);
  /* Decode with msgpack-c and compare with the generator. */
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  struct gen g;
  gen_init(&g);
  int recs = 0, bad = 0;
  while (msgpack_unpack_next(&u, buf, raw, &off) == MSGPACK_UNPACK_SUCCESS) {
    msgpack_object o = u.data;
    struct kt_kvrev want;
    gen_next(&g, &want);
    if (o.type != MSGPACK_OBJECT_ARRAY || o.via.array.size != 9 ||
        o.via.array.ptr[0].via.u64 != KT_SNAP_REC_KVREV ||
        o.via.array.ptr[1].type != MSGPACK_OBJECT_BIN ||
        o.via.array.ptr[1].via.bin.size != want.key.n ||
        memcmp(o.via.array.ptr[1].via.bin.ptr, want.key.p, want.key.n) != 0 ||
        o.via.array.ptr[4].via.i64 != want.mod_revision ||
        o.via.array.ptr[8].via.boolean != want.tombstone)
      bad++;
    recs++;
  }
  msgpack_unpacked_destroy(&u);
  free(buf);
  free(f);
  CHECK_EQ(recs, 50);
  CHECK_EQ(bad, 0);
  CHECK_EQ(off, raw);
}

TEST(empty_snapshot) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta, got, done = {0};
  base_meta(&meta);
  meta.membership = (struct kt_bytes){0};
  meta.creator[0] = 0;
  meta.revision = meta.compact_revision = 0;
  struct kt_err err;
  char path[4096];
  CHECK_EQ(write_gen(dir, &meta, 0, NULL, &done, &err, path, sizeof path), KT_SNAP_DONE);
  CHECK_EQ(kt_snap_verify(path, &got, &err), 0);
  CHECK_EQ(got.record_count, 0);
  CHECK_EQ(got.block_count, 0);
  CHECK_EQ(got.live_keys, 0);
  CHECK_EQ(got.membership.n, 0);
  CHECK_STR(got.creator, "");
  CHECK_EQ(got.file_bytes, 82 + 65);
  kt_snap_meta_free(&got);
}

/* Writes a small multi-block snapshot and returns its bytes. */
static uint8_t *small_snapshot(const char *dir, uint64_t nrec, size_t *n, char *path,
                               size_t path_n) {
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_snap_writer_opts o = {.block_bytes = 2048};
  struct kt_err err;
  if (write_gen(dir, &meta, nrec, &o, NULL, &err, path, path_n) != KT_SNAP_DONE)
    return NULL;
  return read_file(path, n);
}

TEST(any_corrupt_byte_is_refused) {
  const char *dir = kt_test_tmpdir();
  char path[4096];
  size_t n;
  uint8_t *f = small_snapshot(dir, 60, &n, path, sizeof path);
  CHECK(f);
  struct kt_err err;
  CHECK_EQ(kt_snap_load_mem(f, n, "x.snap", NULL, NULL, NULL, &err), 0);
  /* Every byte of the file, one at a time, with two different flips. */
  int accepted = 0, wrong_code = 0, unnamed = 0;
  for (size_t i = 0; i < n; i++) {
    for (int flip = 0; flip < 2; flip++) {
      uint8_t old = f[i];
      f[i] ^= flip ? 0xff : 0x01;
      memset(&err, 0, sizeof err);
      int rc = kt_snap_load_mem(f, n, "x.snap", NULL, NULL, NULL, &err);
      f[i] = old;
      if (rc == 0)
        accepted++;
      else if (rc != KT_ECORRUPT && !(rc == KT_EVERSION && i >= 8 && i < 12)) {
        if (!wrong_code)
          printf("# offset %zu: %s\n", i, err.msg);
        wrong_code++;
      }
      if (rc && strncmp(err.msg, "x.snap: ", 8) != 0)
        unnamed++;
    }
  }
  CHECK_EQ(accepted, 0);
  CHECK_EQ(wrong_code, 0);
  CHECK_EQ(unnamed, 0);

  /* Through real files: header, body and trailer, each named in the error. */
  uint32_t hlen = kt_get_u32be(f + 12);
  size_t spots[] = {3, 20, hlen - 1, hlen + 5, hlen + 40, n / 2, n - 60, n - 1};
  const char *what[] = {"bad magic", "header checksum", "header checksum", NULL, NULL, NULL,
                        NULL,        "hash mismatch"};
  for (size_t s = 0; s < KT_ARRAY_LEN(spots); s++) {
    f[spots[s]] ^= 0x20;
    write_file(path, f, n);
    f[spots[s]] ^= 0x20;
    memset(&err, 0, sizeof err);
    struct kt_snap_meta m;
    CHECK_EQ(kt_snap_verify(path, &m, &err), KT_ECORRUPT);
    kt_snap_meta_free(&m);
    CHECK(strstr(err.msg, path) == err.msg);
    if (what[s] && !strstr(err.msg, what[s])) {
      kt_test_fail(__FILE__, __LINE__, "offset %zu: %s", spots[s], err.msg);
      return;
    }
  }
  free(f);
}

TEST(truncated_or_extended_is_refused) {
  const char *dir = kt_test_tmpdir();
  char path[4096];
  size_t n;
  uint8_t *f = small_snapshot(dir, 30, &n, path, sizeof path);
  CHECK(f);
  struct kt_err err;
  int accepted = 0, unclear = 0;
  for (size_t len = 0; len < n; len++) {
    memset(&err, 0, sizeof err);
    int rc = kt_snap_load_mem(f, len, "t.snap", NULL, NULL, NULL, &err);
    if (rc == 0)
      accepted++;
    else if (rc != KT_ECORRUPT || !strstr(err.msg, "truncated"))
      unclear++;
  }
  CHECK_EQ(accepted, 0);
  CHECK_EQ(unclear, 0);
  /* A real truncated file. */
  CHECK(truncate(path, (off_t)n - 1) == 0);
  CHECK_EQ(kt_snap_verify(path, NULL, &err), KT_ECORRUPT);
  CHECK(strstr(err.msg, path) && strstr(err.msg, "truncated"));
  /* Bytes after the trailer. */
  uint8_t *g = malloc(n + 1);
  memcpy(g, f, n);
  g[n] = 0;
  write_file(path, g, n + 1);
  CHECK_EQ(kt_snap_verify(path, NULL, &err), KT_ECORRUPT);
  CHECK(strstr(err.msg, "after the trailer"));
  free(g);
  free(f);
  /* Missing file. */
  CHECK_EQ(kt_snap_verify("/nonexistent/x.snap", NULL, &err), KT_ENOTFOUND);
}

/* File ops that block writes until released, and fail on demand. */
struct faulty {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool gate_closed;
  int64_t fail_after_bytes; /* -1 = never */
  int fail_errno;
  bool fail_fsync, fail_rename, fail_fsync_dir;
  int64_t written;
};
static ssize_t f_write(void *ctx, int fd, const void *p, size_t n) {
  struct faulty *f = ctx;
  pthread_mutex_lock(&f->mu);
  while (f->gate_closed)
    pthread_cond_wait(&f->cv, &f->mu);
  if (f->fail_after_bytes >= 0 && f->written + (int64_t)n > f->fail_after_bytes) {
    pthread_mutex_unlock(&f->mu);
    errno = f->fail_errno;
    return -1;
  }
  f->written += (int64_t)n;
  pthread_mutex_unlock(&f->mu);
  return kt_snap_fileops_posix.write(NULL, fd, p, n);
}
static int f_fsync(void *ctx, int fd) {
  struct faulty *f = ctx;
  if (f->fail_fsync) {
    errno = EIO;
    return -1;
  }
  return kt_snap_fileops_posix.fsync(NULL, fd);
}
static int f_rename(void *ctx, const char *a, const char *b) {
  struct faulty *f = ctx;
  if (f->fail_rename) {
    errno = EXDEV;
    return -1;
  }
  return kt_snap_fileops_posix.rename(NULL, a, b);
}
static int f_fsync_dir(void *ctx, const char *d) {
  struct faulty *f = ctx;
  if (f->fail_fsync_dir) {
    errno = EIO;
    return -1;
  }
  return kt_snap_fileops_posix.fsync_dir(NULL, d);
}
static struct kt_snap_fileops faulty_ops(struct faulty *f) {
  struct kt_snap_fileops o = kt_snap_fileops_posix;
  o.write = f_write;
  o.fsync = f_fsync;
  o.rename = f_rename;
  o.fsync_dir = f_fsync_dir;
  o.ctx = f;
  return o;
}
static void faulty_init(struct faulty *f) {
  memset(f, 0, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->fail_after_bytes = -1;
}

TEST(backpressure_bounds_memory) {
  const char *dir = kt_test_tmpdir();
  static struct faulty fl; /* outlives a failed CHECK (the thread may hold it) */
  faulty_init(&fl);
  fl.gate_closed = true;
  struct kt_snap_fileops ops = faulty_ops(&fl);
  struct kt_snap_writer_opts o = {
      .block_bytes = 4096, .max_inflight = 2, .ops = &ops, .notify = on_notify};
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_snap_writer *w;
  struct kt_err err;
  CHECK_EQ(kt_snap_writer_open(dir, &meta, &o, &w, &err), 0);
  struct gen g;
  gen_init(&g);
  struct kt_kvrev r;
  uint64_t accepted = 0;
  /* The writer thread is stuck in the header write: can_add turns false
   * once max_inflight (2) blocks are queued. */
  while (kt_snap_writer_can_add(w) && accepted < 10000) {
    gen_next(&g, &r);
    CHECK_EQ(kt_snap_writer_add(w, &r), 0);
    accepted++;
  }
  CHECK(!kt_snap_writer_can_add(w));
  CHECK(accepted >= 2 * (4096 / 300)); /* two blocks of puts (and a few tombstones) */
  CHECK(accepted <= 2 * (4096 / 250) + 6);
  /* A slice already started is finished: add never refuses for room. */
  for (int i = 0; i < 200; i++) {
    gen_next(&g, &r);
    CHECK_EQ(kt_snap_writer_add(w, &r), 0);
    accepted++;
  }
  CHECK(!kt_snap_writer_can_add(w));
  CHECK_EQ(kt_snap_writer_poll(w, NULL, &err), KT_SNAP_RUNNING);
  pthread_mutex_lock(&fl.mu);
  fl.gate_closed = false;
  pthread_cond_broadcast(&fl.cv);
  pthread_mutex_unlock(&fl.mu);
  uint64_t total = 3000;
  while (accepted < total) {
    while (!kt_snap_writer_can_add(w))
      sem_wait(&notified);
    for (int i = 0; i < 100 && accepted < total; i++, accepted++) {
      gen_next(&g, &r);
      CHECK_EQ(kt_snap_writer_add(w, &r), 0);
    }
  }
  CHECK_EQ(kt_snap_writer_finish(w), 0);
  enum kt_snap_state st;
  struct kt_snap_meta done;
  while ((st = kt_snap_writer_poll(w, &done, &err)) == KT_SNAP_RUNNING)
    sem_wait(&notified);
  CHECK_EQ(st, KT_SNAP_DONE);
  char path[4096];
  snprintf(path, sizeof path, "%s", kt_snap_writer_path(w));
  kt_snap_writer_free(w);
  struct check c = {.n = 0};
  gen_init(&c.g);
  CHECK_EQ(kt_snap_load(path, check_rec, &c, NULL, &err), 0);
  CHECK_EQ(c.n, total);
  CHECK_EQ(c.bad, 0);
}

static void check_failure(struct faulty *fl, const char *want_msg) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_fileops ops = faulty_ops(fl);
  struct kt_snap_writer_opts o = {.block_bytes = 8192, .ops = &ops};
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_err err = {0};
  enum kt_snap_state st = write_gen(dir, &meta, 5000, &o, NULL, &err, NULL, 0);
  CHECK_EQ(st, KT_SNAP_FAILED);
  CHECK_EQ(err.code, KT_EIO);
  if (!strstr(err.msg, want_msg)) {
    kt_test_fail(__FILE__, __LINE__, "message %s lacks %s", err.msg, want_msg);
    return;
  }
  CHECK_EQ(count_files(dir, ".snap"), 0);
  CHECK_EQ(count_files(dir, ".tmp"), 0);
}

TEST(enospc_leaves_no_file) {
  struct faulty fl;
  faulty_init(&fl);
  fl.fail_after_bytes = 100000;
  fl.fail_errno = ENOSPC;
  check_failure(&fl, "No space left on device");
}

TEST(enospc_in_header_or_trailer_leaves_no_file) {
  struct faulty fl;
  faulty_init(&fl);
  fl.fail_after_bytes = 10;
  fl.fail_errno = ENOSPC;
  check_failure(&fl, ".snap.tmp: write");
}

TEST(fsync_rename_and_dir_sync_errors_leave_no_file) {
  struct faulty fl;
  faulty_init(&fl);
  fl.fail_fsync = true;
  check_failure(&fl, "fsync");
  faulty_init(&fl);
  fl.fail_rename = true;
  check_failure(&fl, "rename");
  faulty_init(&fl);
  fl.fail_fsync_dir = true;
  check_failure(&fl, "fsync dir");
}

TEST(abort_leaves_no_file) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_snap_writer *w;
  struct kt_err err;
  struct kt_snap_writer_opts o = {.block_bytes = 4096};
  CHECK_EQ(kt_snap_writer_open(dir, &meta, &o, &w, &err), 0);
  struct gen g;
  gen_init(&g);
  struct kt_kvrev r;
  for (int i = 0; i < 100; i++) {
    gen_next(&g, &r);
    CHECK_EQ(kt_snap_writer_add(w, &r), 0);
  }
  kt_snap_writer_free(w);
  CHECK_EQ(count_files(dir, ".snap"), 0);
  CHECK_EQ(count_files(dir, ".tmp"), 0);
}

TEST(writer_rejects_bad_records_and_meta) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_err err;
  struct kt_snap_writer *w;
  meta.compact_revision = meta.revision + 1;
  CHECK_EQ(kt_snap_writer_open(dir, &meta, NULL, &w, &err), KT_EINVAL);
  base_meta(&meta);
  CHECK_EQ(kt_snap_writer_open("/nonexistent/dir", &meta, NULL, &w, &err), KT_EIO);
  CHECK(strstr(err.msg, "/nonexistent/dir/"));
  meta.revision = 100;
  meta.compact_revision = 0;
  CHECK_EQ(kt_snap_writer_open(dir, &meta, NULL, &w, &err), 0);
  struct kt_kvrev r = {.key = {(const uint8_t *)"b", 1},
                       .value = {(const uint8_t *)"v", 1},
                       .create_revision = 5,
                       .mod_revision = 5,
                       .version = 1};
  CHECK_EQ(kt_snap_writer_add(w, &r), 0);
  CHECK_EQ(kt_snap_writer_add(w, &r), KT_EINVAL); /* same revision again */
  r.key = (struct kt_bytes){(const uint8_t *)"a", 1};
  CHECK_EQ(kt_snap_writer_add(w, &r), KT_EINVAL); /* key order */
  r.key = (struct kt_bytes){(const uint8_t *)"c", 1};
  r.mod_revision = 101;
  CHECK_EQ(kt_snap_writer_add(w, &r), KT_EINVAL); /* beyond the snapshot revision */
  r.mod_revision = 6;
  r.tombstone = true;
  CHECK_EQ(kt_snap_writer_add(w, &r), KT_EINVAL); /* tombstone with a value */
  r.value.n = 0;
  r.create_revision = r.version = 0;
  CHECK_EQ(kt_snap_writer_add(w, &r), 0);
  CHECK_EQ(kt_snap_writer_finish(w), 0);
  CHECK_EQ(kt_snap_writer_add(w, &r), KT_EINVAL); /* after finish */
  enum kt_snap_state st;
  struct kt_snap_meta done;
  while ((st = kt_snap_writer_poll(w, &done, &err)) == KT_SNAP_RUNNING)
    usleep(1000);
  CHECK_EQ(st, KT_SNAP_DONE);
  CHECK_EQ(done.record_count, 2);
  CHECK_EQ(done.live_keys, 1);
  kt_snap_writer_free(w);
}

TEST(list_newest_first_and_purge) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta;
  base_meta(&meta);
  uint64_t ti[][2] = {{1, 10}, {2, 5}, {1, 20}, {3, 1}, {2, 300}, {1, 2}, {10, 0x100}};
  for (size_t i = 0; i < KT_ARRAY_LEN(ti); i++) {
    meta.term = ti[i][0];
    meta.index = ti[i][1];
    struct kt_err err;
    CHECK_EQ(write_gen(dir, &meta, 3, NULL, NULL, &err, NULL, 0), KT_SNAP_DONE);
  }
  char p[4096];
  snprintf(p, sizeof p, "%s/notes.txt", dir);
  write_file(p, (const uint8_t *)"x", 1);
  snprintf(p, sizeof p, "%s/0000000000000009-0000000000000009.snap.tmp", dir);
  write_file(p, (const uint8_t *)"x", 1);
  snprintf(p, sizeof p, "%s/000000000000000G-0000000000000009.snap", dir);
  write_file(p, (const uint8_t *)"x", 1);
  struct kt_snap_entry *v;
  size_t n;
  struct kt_err err;
  CHECK_EQ(kt_snap_list(dir, &v, &n, &err), 0);
  CHECK_EQ(n, 7);
  CHECK_STR(v[0].name, "000000000000000a-0000000000000100.snap");
  uint64_t want[][2] = {{10, 0x100}, {3, 1}, {2, 300}, {2, 5}, {1, 20}, {1, 10}, {1, 2}};
  for (size_t i = 0; i < n; i++) {
    CHECK_EQ(v[i].term, want[i][0]);
    CHECK_EQ(v[i].index, want[i][1]);
  }
  free(v);
  size_t removed;
  CHECK_EQ(kt_snap_purge(dir, 5, &removed, &err), 0);
  CHECK_EQ(removed, 2);
  CHECK_EQ(kt_snap_list(dir, &v, &n, &err), 0);
  CHECK_EQ(n, 5);
  CHECK_EQ(v[4].term, 1);
  CHECK_EQ(v[4].index, 20);
  free(v);
  CHECK_EQ(kt_snap_clean_tmp(dir, &removed, &err), 0);
  CHECK_EQ(removed, 1);
  CHECK_EQ(count_files(dir, ".tmp"), 0);
  CHECK_EQ(count_files(dir, ".txt"), 1);
  CHECK_EQ(kt_snap_list("/nonexistent", &v, &n, &err), KT_EIO);
}

/* opts.keep: the writer thread removes the older snapshots once the new one
 * is durable (the node's retention, off its loop), and only then. */
TEST(writer_keeps_the_newest) {
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta;
  base_meta(&meta);
  struct kt_snap_writer_opts o = {.keep = 2};
  struct kt_err err;
  for (uint64_t i = 1; i <= 4; i++) {
    meta.index = i * 10;
    CHECK_EQ(write_gen(dir, &meta, 50, &o, NULL, &err, NULL, 0), KT_SNAP_DONE);
    CHECK_EQ(count_files(dir, ".snap"), i < 2 ? (int)i : 2);
  }
  struct kt_snap_entry *v;
  size_t n;
  CHECK_EQ(kt_snap_list(dir, &v, &n, &err), 0);
  CHECK_EQ(n, 2);
  CHECK_EQ(v[0].index, 40);
  CHECK_EQ(v[1].index, 30);
  free(v);
  o.keep = 0; /* none removed */
  meta.index = 50;
  CHECK_EQ(write_gen(dir, &meta, 50, &o, NULL, &err, NULL, 0), KT_SNAP_DONE);
  CHECK_EQ(count_files(dir, ".snap"), 3);
}

/* `ketchutl snapshot status`, when the tool has been built (make test does). */
static int run_cmd(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(ketchutl_snapshot_status) {
  const char *bin = getenv("KETCH_BIN");
  char tool[4096];
  snprintf(tool, sizeof tool, "%s/ketchutl", bin ? bin : "bin");
  if (access(tool, X_OK) != 0) {
    printf("# skipped: %s not built\n", tool);
    return;
  }
  const char *dir = kt_test_tmpdir();
  struct kt_snap_meta meta, done;
  base_meta(&meta);
  struct kt_err err;
  char path[4096], cmd[16384], out[4096], want[256];
  CHECK_EQ(write_gen(dir, &meta, 100, NULL, &done, &err, path, sizeof path), KT_SNAP_DONE);
  snprintf(cmd, sizeof cmd, "%s snapshot status %s -w json 2>&1", tool, path);
  CHECK_EQ(run_cmd(cmd, out, sizeof out), 0);
  snprintf(want, sizeof want,
           "{\"hash\":%u,\"revision\":%lld,\"totalKey\":%llu,\"totalSize\":%llu}\n",
           kt_snap_hash32(&done), (long long)meta.revision, (unsigned long long)done.live_keys,
           (unsigned long long)done.file_bytes);
  CHECK_STR(out, want);
  snprintf(cmd, sizeof cmd, "%s snapshot status %s 2>&1", tool, path);
  CHECK_EQ(run_cmd(cmd, out, sizeof out), 0);
  snprintf(want, sizeof want, "%x, %lld, %llu, ", kt_snap_hash32(&done), (long long)meta.revision,
           (unsigned long long)done.live_keys);
  CHECK(strncmp(out, want, strlen(want)) == 0);
  snprintf(cmd, sizeof cmd, "%s snapshot status %s -w table 2>&1", tool, path);
  CHECK_EQ(run_cmd(cmd, out, sizeof out), 0);
  CHECK(strncmp(out, "+----------+---", 15) == 0);
  CHECK(strstr(out, "\n|   HASH   |   REVISION    | TOTAL KEYS | TOTAL SIZE |\n"));
  snprintf(want, sizeof want, "\n| %8x | %lld |", kt_snap_hash32(&done), (long long)meta.revision);
  CHECK(strstr(out, want));
  /* A corrupt file: non-zero exit and "Error: " naming the file. */
  size_t n;
  uint8_t *f = read_file(path, &n);
  f[n / 2] ^= 1;
  write_file(path, f, n);
  free(f);
  snprintf(cmd, sizeof cmd, "%s snapshot status %s 2>&1", tool, path);
  CHECK(run_cmd(cmd, out, sizeof out) != 0);
  CHECK(strncmp(out, "Error: ", 7) == 0 && strstr(out, path));
}

/* Writes the fuzz seed corpus when KT_SNAP_GEN_CORPUS=dir is set. */
TEST(gen_fuzz_corpus) {
  const char *out = getenv("KT_SNAP_GEN_CORPUS");
  if (!out)
    return;
  const char *dir = kt_test_tmpdir();
  char path[4096], p[4096];
  size_t n;
  uint64_t sizes[] = {0, 1, 5, 40};
  for (size_t s = 0; s < KT_ARRAY_LEN(sizes); s++) {
    uint8_t *f = small_snapshot(dir, sizes[s], &n, path, sizeof path);
    CHECK(f);
    snprintf(p, sizeof p, "%s/valid-%llu", out, (unsigned long long)sizes[s]);
    write_file(p, f, n);
    if (sizes[s] == 5) {
      for (size_t i = 0; i < 12; i++) {
        size_t at = i * (n / 12);
        f[at] ^= 0x5a;
        snprintf(p, sizeof p, "%s/flip-%zu", out, at);
        write_file(p, f, n);
        f[at] ^= 0x5a;
        snprintf(p, sizeof p, "%s/trunc-%zu", out, at);
        write_file(p, f, at);
      }
    }
    free(f);
  }
}

/* A tiny file announcing a 64 MiB block is refused as truncated (the file
 * reader never allocates past the file's size). */
TEST(huge_block_length_in_tiny_file) {
  const char *dir = kt_test_tmpdir();
  char path[4096];
  size_t n;
  uint8_t *f = small_snapshot(dir, 0, &n, path, sizeof path);
  CHECK(f);
  uint32_t hlen = kt_get_u32be(f + 12);
  uint8_t blk[13 + 8] = {'B'};
  kt_put_u32be(blk + 1, KT_SNAP_MAX_BLOCK_RAW);
  kt_put_u32be(blk + 5, KT_SNAP_MAX_BLOCK_RAW);
  kt_put_u32be(blk + 9, 1);
  uint8_t *g = malloc(hlen + sizeof blk);
  memcpy(g, f, hlen);
  memcpy(g + hlen, blk, sizeof blk);
  write_file(path, g, hlen + sizeof blk);
  struct kt_err err;
  CHECK_EQ(kt_snap_verify(path, NULL, &err), KT_ECORRUPT);
  CHECK(strstr(err.msg, "truncated: block data"));
  kt_put_u32be(g + hlen + 1, KT_SNAP_MAX_BLOCK_RAW + 1);
  CHECK_EQ(kt_snap_load_mem(g, hlen + sizeof blk, "m", NULL, NULL, NULL, &err), KT_ECORRUPT);
  CHECK(strstr(err.msg, "bad raw length"));
  free(g);
  free(f);
}

/* The etcd envelope (snap.h) that ketch-grpc wraps a snapshot in for
 * etcdctl: read as the snapshot inside; anything else after the trailer is
 * still refused. */
static size_t envelope(const uint8_t *f, size_t n, uint8_t *out) {
  size_t total = (size_t)kt_snap_env_size(n), pad = total - n - KT_SNAP_ENV_TAIL;
  memcpy(out, f, n);
  memset(out + n, 0, pad);
  memcpy(out + n + pad, KT_SNAP_ENV_MAGIC, 8);
  kt_put_u64be(out + n + pad + 8, n);
  crypto_hash_sha256(out + total - 32, out, total - 32);
  return total;
}

TEST(etcd_envelope_reads_as_the_snapshot_inside) {
  const char *dir = kt_test_tmpdir();
  char path[4096], env[4200];
  size_t n;
  uint8_t *f = small_snapshot(dir, 40, &n, path, sizeof path);
  CHECK(f);
  uint8_t *e = malloc(n + 1024);
  size_t total = envelope(f, n, e);
  CHECK_EQ(total % 512, 32);
  snprintf(env, sizeof env, "%s/etcdctl.db", dir);
  write_file(env, e, total);
  struct kt_snap_meta plain = {0}, got = {0};
  struct kt_err err = {0};
  CHECK_EQ(kt_snap_verify(path, &plain, &err), 0);
  CHECK_EQ(kt_snap_verify(env, &got, &err), 0);
  CHECK_EQ(got.file_bytes, n);
  kt_snap_meta_free(&got);
  CHECK_EQ(kt_snap_load_mem(e, total, "env", NULL, NULL, &got, &err), 0); /* the fuzzed path */
  CHECK_EQ(got.file_bytes, n);
  CHECK(memcmp(got.hash, plain.hash, sizeof got.hash) == 0 && got.live_keys == plain.live_keys);
  kt_snap_meta_free(&plain);
  kt_snap_meta_free(&got);
  /* a non-zero padding byte, a wrong length, a wrong magic: not an
   * envelope, so bytes after the trailer */
  size_t spots[] = {n, total - 40, total - 48};
  for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
    e[spots[i]] ^= 0x01;
    write_file(env, e, total);
    memset(&err, 0, sizeof err);
    CHECK_EQ(kt_snap_verify(env, NULL, &err), KT_ECORRUPT);
    CHECK(strstr(err.msg, "bytes after the trailer") != NULL);
    CHECK_EQ(kt_snap_load_mem(e, total, "env", NULL, NULL, NULL, &err), KT_ECORRUPT);
    e[spots[i]] ^= 0x01;
  }
  /* a damaged snapshot inside an intact envelope is refused by its hash */
  e[n / 2] ^= 0x40;
  write_file(env, e, total);
  CHECK_EQ(kt_snap_verify(env, NULL, &err), KT_ECORRUPT);
  free(e);
  free(f);
}

/* Fuzz seeds of the envelope (KT_SNAP_GEN_CORPUS=dir ... gen_envelope): a
 * whole one, and ones whose padding, length or magic is wrong. */
TEST(gen_envelope_fuzz_corpus) {
  const char *out = getenv("KT_SNAP_GEN_CORPUS");
  if (!out)
    return;
  char path[4096], p[4200];
  size_t n;
  uint8_t *f = small_snapshot(kt_test_tmpdir(), 5, &n, path, sizeof path);
  CHECK(f);
  uint8_t *e = malloc(n + 1024);
  size_t total = envelope(f, n, e);
  static const char *const names[] = {"env-valid", "env-bad-pad", "env-bad-len", "env-bad-magic"};
  size_t spots[] = {0, n, total - 40, total - 48};
  for (size_t i = 0; i < 4; i++) {
    if (i)
      e[spots[i]] ^= 0x01;
    snprintf(p, sizeof p, "%s/%s", out, names[i]);
    write_file(p, e, total);
    if (i)
      e[spots[i]] ^= 0x01;
  }
  free(e);
  free(f);
}
