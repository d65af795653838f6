/* test/unit/bbolt_test.c — snap/bbolt: real files written by Debian's etcd
 * 3.4.23 (committed in test/fuzz/corpus/bbolt/), the writer read back by the
 * reader, and damaged files refused with the page named. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../snap/bbolt.h"
#include "../../wal/wal.h"
#include "test.h"

static uint8_t *slurp(const char *path, size_t *n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return NULL;
  struct stat st;
  fstat(fd, &st);
  uint8_t *p = malloc((size_t)st.st_size + 1);
  *n = (size_t)read(fd, p, (size_t)st.st_size);
  close(fd);
  return p;
}

/* etcd's `snapshot status` (v3_snapshot.go Status): CRC-32C over every
 * bucket name, key and value; keys of every bucket counted; the revision of
 * the last key of "key". */
struct status {
  const struct kt_bbolt *db;
  uint32_t crc;
  uint64_t keys;
  uint64_t rev;
  bool in_key;
  struct kt_err *e;
};

static int status_kv(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                     bool is_bucket) {
  struct status *s = arg;
  (void)is_bucket;
  s->crc = kt_crc32c(s->crc, k, kn);
  s->crc = kt_crc32c(s->crc, v, vn);
  if (s->in_key && kn >= 8)
    s->rev = kt_get_u64be(k);
  s->keys++;
  return 0;
}

static int status_bucket(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                         bool is_bucket) {
  struct status *s = arg;
  struct kt_bbolt_bucket b;
  if (!is_bucket)
    return kt_err_set(s->e, KT_EINVAL, "fixture: a key at the top level");
  int rc = kt_bbolt_child(s->db, v, vn, &b, s->e);
  if (rc)
    return rc;
  s->crc = kt_crc32c(s->crc, k, kn);
  s->in_key = kn == 3 && !memcmp(k, "key", 3);
  return kt_bbolt_each(s->db, &b, status_kv, s, s->e);
}

static int status_of(const uint8_t *p, size_t n, struct status *s, struct kt_err *e) {
  static struct kt_bbolt db;
  memset(s, 0, sizeof *s);
  s->e = e;
  int rc = kt_bbolt_open(&db, p, n, "fixture", e);
  if (rc)
    return rc;
  s->db = &db;
  struct kt_bbolt_bucket root = kt_bbolt_root(&db);
  return kt_bbolt_each(&db, &root, status_bucket, s, e);
}

TEST(reads_a_real_etcd_snapshot) {
  size_t n;
  uint8_t *p = slurp("test/fuzz/corpus/bbolt/etcd-3.4.23-snapshot-save.db", &n);
  CHECK(p);
  struct status s;
  struct kt_err e = {0};
  CHECK_EQ(status_of(p, n, &s, &e), 0);
  /* what `etcdctl snapshot status` printed for this file: 4e04d6a3, 128, 144, 66 kB */
  CHECK_EQ(s.crc, 0x4e04d6a3);
  CHECK_EQ(s.rev, 128);
  CHECK_EQ(s.keys, 144);
  CHECK_EQ(s.db->pgid * s.db->page_size, 65536);
  CHECK_EQ(n, 65536 + 32); /* + the SHA-256 etcd appends */
  /* the lease bucket is inline in this file, "key" a branch over 4 leaves */
  struct kt_bbolt_bucket root = kt_bbolt_root(s.db), lease, key;
  CHECK_EQ(kt_bbolt_bucket(s.db, &root, "lease", &lease, &e), 0);
  CHECK(lease.root == 0 && lease.inline_page);
  CHECK_EQ(kt_bbolt_bucket(s.db, &root, "key", &key, &e), 0);
  CHECK(key.root != 0);
  CHECK_EQ(kt_bbolt_bucket(s.db, &root, "nope", &key, &e), KT_ENOTFOUND);
  free(p);
  p = slurp("test/fuzz/corpus/bbolt/etcd-3.4.23-member-snap-db", &n);
  CHECK(p);
  CHECK_EQ(status_of(p, n, &s, &e), 0);
  CHECK_EQ(s.rev, 128);
  CHECK_EQ(s.keys, 144);
  free(p);
}

/* Every cut of a real file, and every flipped byte of its pages, is either
 * read or refused with a message naming the file (never a crash: ASan). */
TEST(damaged_real_files_are_refused) {
  size_t n;
  uint8_t *p = slurp("test/fuzz/corpus/bbolt/etcd-3.4.23-snapshot-save.db", &n);
  CHECK(p);
  struct status s;
  struct kt_err e = {0};
  for (size_t cut = 0; cut < 65536; cut += 512) {
    memset(&e, 0, sizeof e);
    int rc = status_of(p, cut, &s, &e);
    CHECK(rc != 0);
    CHECK(!strncmp(e.msg, "fixture: ", 9));
  }
  status_of(p, 65536 - 4096, &s, &e);
  CHECK(strstr(e.msg, "page 0: its page count runs past the end of the file (truncated?)"));
  for (size_t i = 0; i < 65536; i += 7) {
    p[i] ^= 0x5a;
    memset(&e, 0, sizeof e);
    int rc = status_of(p, n, &s, &e);
    CHECK(rc == 0 || !strncmp(e.msg, "fixture: ", 9));
    p[i] ^= 0x5a;
  }
  free(p);
}

struct collect {
  uint8_t *keys;
  size_t n, bytes;
  uint64_t sum;
};

static int collect_kv(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn,
                      bool is_bucket) {
  struct collect *c = arg;
  (void)is_bucket;
  c->n++;
  c->bytes += kn + vn;
  for (size_t i = 0; i < vn; i += 97)
    c->sum += v[i];
  c->sum += k[kn - 1];
  return 0;
}

static void mk_key(uint8_t *k, size_t *kn, uint32_t i) {
  /* some long keys (branch pages with few elements, more levels) */
  *kn = i % 50 == 0 ? 3000 : 17;
  memset(k, 'k', *kn);
  kt_put_u32be(k, i);
}

static int fd_sink(void *arg, const uint8_t *p, size_t n, struct kt_err *e) {
  (void)e;
  return write(*(int *)arg, p, n) == (ssize_t)n ? 0 : KT_EIO;
}

/* The test file's buckets and keys, into w (a dry run or the real one). */
static void feed(struct kt_bbolt_writer *w, uint32_t nkeys, uint64_t *sum, size_t *total) {
  struct kt_err e = {0};
  static uint8_t v[20000];
  memset(v, 'v', sizeof v);
  *sum = 0, *total = 0;
  kt_assert(kt_bbolt_writer_bucket(w, "meta", &e) == 0);
  kt_assert(kt_bbolt_writer_put(w, (const uint8_t *)"a", 1, (const uint8_t *)"1", 1, &e) == 0);
  kt_assert(kt_bbolt_writer_bucket(w, "empty", &e) == 0);
  kt_assert(kt_bbolt_writer_bucket(w, "key", &e) == 0);
  for (uint32_t i = 0; i < nkeys; i++) {
    uint8_t k[3000];
    size_t kn;
    mk_key(k, &kn, i);
    size_t vn = i % 333 == 0 ? 20000 : 40 + i % 200; /* some values need overflow pages */
    v[0] = (uint8_t)i;
    kt_assert(kt_bbolt_writer_put(w, k, kn, v, vn, &e) == 0);
    for (size_t j = 0; j < vn; j += 97)
      *sum += v[j];
    *sum += k[kn - 1];
    *total += kn + vn;
  }
  uint8_t k[8] = {0};
  kt_assert(kt_bbolt_writer_put(w, k, 8, v, 1, &e) == KT_EINVAL); /* not ascending */
  kt_assert(kt_bbolt_writer_bucket(w, "meta", &e) == KT_EINVAL);  /* twice */
}

static const char *write_file(uint32_t nkeys, uint64_t *bytes, uint64_t *sum, size_t *total) {
  static char path[4300];
  snprintf(path, sizeof path, "%s/w.db", kt_test_tmpdir());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  kt_assert(fd >= 0);
  struct kt_err e = {0};
  struct kt_bbolt_layout plan, got;
  struct kt_bbolt_writer *w = kt_bbolt_writer_new(NULL, NULL, path, NULL); /* dry run */
  feed(w, nkeys, sum, total);
  kt_assert(kt_bbolt_writer_finish(w, &plan, &e) == 0);
  kt_bbolt_writer_free(w);
  w = kt_bbolt_writer_new(fd_sink, &fd, path, &plan);
  feed(w, nkeys, sum, total);
  kt_assert(kt_bbolt_writer_finish(w, &got, &e) == 0);
  kt_assert(got.pgid == plan.pgid && got.root == plan.root);
  kt_bbolt_writer_free(w);
  close(fd);
  *bytes = kt_bbolt_layout_bytes(&plan);
  return path;
}

TEST(writer_output_reads_back) {
  uint64_t bytes, sum;
  size_t total;
  const char *path = write_file(20000, &bytes, &sum, &total);
  size_t n;
  uint8_t *p = slurp(path, &n);
  CHECK(p);
  CHECK_EQ(n, bytes);
  CHECK_EQ(n % 4096, 0);
  struct kt_bbolt db;
  struct kt_err e = {0};
  CHECK_EQ(kt_bbolt_open(&db, p, n, "w.db", &e), 0);
  CHECK_EQ(db.pgid * 4096, n);
  struct kt_bbolt_bucket root = kt_bbolt_root(&db), b;
  CHECK_EQ(kt_bbolt_bucket(&db, &root, "key", &b, &e), 0);
  struct collect c = {0};
  CHECK_EQ(kt_bbolt_each(&db, &b, collect_kv, &c, &e), 0);
  CHECK_EQ(c.n, 20000);
  CHECK_EQ(c.bytes, total);
  CHECK_EQ(c.sum, sum);
  CHECK_EQ(kt_bbolt_bucket(&db, &root, "empty", &b, &e), 0);
  memset(&c, 0, sizeof c);
  CHECK_EQ(kt_bbolt_each(&db, &b, collect_kv, &c, &e), 0);
  CHECK_EQ(c.n, 0);
  /* every page is reachable from the metas: a walk of all buckets visits
   * pgid - 3 pages (two metas and the freelist aside) */
  struct status s;
  CHECK_EQ(status_of(p, n, &s, &e), 0);
  CHECK_EQ(s.keys, 20001);
  free(p);
}

TEST(damaged_written_files_name_the_page) {
  uint64_t bytes, sum;
  size_t total;
  const char *path = write_file(3000, &bytes, &sum, &total);
  size_t n;
  uint8_t *p = slurp(path, &n);
  CHECK(p);
  struct status s;
  struct kt_err e = {0};
  CHECK_EQ(status_of(p, n, &s, &e), 0);
  /* a leaf's element pointing past its page */
  struct kt_bbolt db;
  CHECK_EQ(kt_bbolt_open(&db, p, n, "w.db", &e), 0);
  uint8_t *leaf = p + 3 * 4096;  /* "meta" wrote page 2, "empty" page 3: an empty leaf */
  uint8_t *kleaf = p + 4 * 4096; /* the first leaf of "key" (a 20000-byte value: 6 pages) */
  CHECK_EQ(kleaf[8], 0x02);
  kleaf[16 + 7] = 0x7f; /* element 0's pos, made huge */
  memset(&e, 0, sizeof e);
  CHECK_EQ(status_of(p, n, &s, &e), KT_ECORRUPT);
  CHECK_STR(e.msg, "fixture: page 4: leaf element 0 runs past its 24576 bytes");
  kleaf[16 + 7] = 0;
  /* a branch child reached twice */
  leaf[8] = 0x01; /* page 3 made a branch ... */
  leaf[10] = 2;   /* of two elements ... */
  memset(leaf + 16, 0, 32);
  leaf[16] = 32, leaf[20] = 1, leaf[24] = 4; /* "a" -> page 4 */
  leaf[32] = 17, leaf[36] = 1, leaf[40] = 4; /* "b" -> page 4 */
  leaf[48] = 'a', leaf[49] = 'b';
  memset(&e, 0, sizeof e);
  CHECK_EQ(status_of(p, n, &s, &e), KT_ECORRUPT);
  CHECK(strstr(e.msg, "page 4: reached twice") || strstr(e.msg, "keys out of order"));
  /* a bad meta checksum on both: refused, naming both */
  p[16 + 20] ^= 1;
  p[4096 + 16 + 20] ^= 1;
  memset(&e, 0, sizeof e);
  CHECK_EQ(kt_bbolt_open(&db, p, n, "w.db", &e), KT_ECORRUPT);
  CHECK_STR(e.msg,
            "w.db: no valid meta page: page 0: checksum mismatch; page 1: checksum mismatch");
  memset(p, 0, 4096);
  memset(&e, 0, sizeof e);
  CHECK_EQ(kt_bbolt_open(&db, p, n, "w.db", &e), KT_ECORRUPT);
  CHECK(strstr(e.msg, "page 0: bad magic (not a bbolt file)"));
  free(p);
}

/* The real run must make the same puts as the dry run that planned it. */
TEST(real_run_must_match_its_plan) {
  char path[4300];
  snprintf(path, sizeof path, "%s/p.db", kt_test_tmpdir());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  uint64_t sum;
  size_t total;
  struct kt_err e = {0};
  struct kt_bbolt_layout plan;
  struct kt_bbolt_writer *w = kt_bbolt_writer_new(NULL, NULL, "p.db", NULL);
  feed(w, 500, &sum, &total);
  CHECK_EQ(kt_bbolt_writer_finish(w, &plan, &e), 0);
  kt_bbolt_writer_free(w);
  CHECK(kt_bbolt_writer_new(fd_sink, &fd, "p.db", NULL) == NULL); /* a sink needs a plan */
  w = kt_bbolt_writer_new(fd_sink, &fd, "p.db", &plan);
  feed(w, 600, &sum, &total);
  CHECK_EQ(kt_bbolt_writer_finish(w, NULL, &e), KT_EINVAL);
  CHECK_STR(e.msg, "p.db: the pages differ from the dry run's");
  kt_bbolt_writer_free(w);
  close(fd);
}
