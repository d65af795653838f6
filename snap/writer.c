/* snap/writer.c — the snapshot writer: msgpack encoding on the loop thread,
 * lz4 + BLAKE2b + write/fsync/rename on one writer thread. See snap.h and
 * snap/FORMAT.md. */
#include "snap.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- posix file ops ---- */

static int px_open(void *ctx, const char *path, int flags, mode_t mode) {
  (void)ctx;
  return open(path, flags | O_CLOEXEC, mode);
}
static ssize_t px_write(void *ctx, int fd, const void *p, size_t n) {
  (void)ctx;
  return write(fd, p, n);
}
static int px_fsync(void *ctx, int fd) {
  (void)ctx;
  return fsync(fd);
}
static int px_close(void *ctx, int fd) {
  (void)ctx;
  return close(fd);
}
static int px_rename(void *ctx, const char *from, const char *to) {
  (void)ctx;
  return rename(from, to);
}
static int px_unlink(void *ctx, const char *path) {
  (void)ctx;
  return unlink(path);
}
static int px_fsync_dir(void *ctx, const char *dir) {
  (void)ctx;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  errno = saved;
  return rc;
}

const struct kt_snap_fileops kt_snap_fileops_posix = {
    px_open, px_write, px_fsync, px_close, px_rename, px_unlink, px_fsync_dir, NULL,
};

/* ---- msgpack encoding (the subset FORMAT.md uses) ---- */

static inline uint8_t *enc_int(uint8_t *p, int64_t v) {
  if (v >= 0) {
    uint64_t u = (uint64_t)v;
    if (u < 128) {
      *p++ = (uint8_t)u;
    } else if (u <= 0xff) {
      *p++ = 0xcc;
      *p++ = (uint8_t)u;
    } else if (u <= 0xffff) {
      *p++ = 0xcd;
      *p++ = (uint8_t)(u >> 8);
      *p++ = (uint8_t)u;
    } else if (u <= 0xffffffffu) {
      *p++ = 0xce;
      kt_put_u32be(p, (uint32_t)u);
      p += 4;
    } else {
      *p++ = 0xcf;
      kt_put_u64be(p, u);
      p += 8;
    }
  } else if (v >= -32) {
    *p++ = (uint8_t)(int8_t)v;
  } else if (v >= INT8_MIN) {
    *p++ = 0xd0;
    *p++ = (uint8_t)(int8_t)v;
  } else if (v >= INT16_MIN) {
    *p++ = 0xd1;
    *p++ = (uint8_t)((uint16_t)v >> 8);
    *p++ = (uint8_t)(uint16_t)v;
  } else if (v >= INT32_MIN) {
    *p++ = 0xd2;
    kt_put_u32be(p, (uint32_t)v);
    p += 4;
  } else {
    *p++ = 0xd3;
    kt_put_u64be(p, (uint64_t)v);
    p += 8;
  }
  return p;
}

static inline uint8_t *enc_bin(uint8_t *p, struct kt_bytes b) {
  if (b.n <= 0xff) {
    *p++ = 0xc4;
    *p++ = (uint8_t)b.n;
  } else if (b.n <= 0xffff) {
    *p++ = 0xc5;
    *p++ = (uint8_t)(b.n >> 8);
    *p++ = (uint8_t)b.n;
  } else {
    *p++ = 0xc6;
    kt_put_u32be(p, b.n);
    p += 4;
  }
  if (b.n)
    memcpy(p, b.p, b.n);
  return p + b.n;
}

/* Upper bound of one encoded kvrev record. */
static size_t kvrev_bound(const struct kt_kvrev *r) {
  return 2 + 2 * 5 + (size_t)r->key.n + r->value.n + 5 * 9 + 1;
}

/* ---- the writer ---- */

struct block {
  struct block *next;
  uint8_t *p;
  size_t len, cap;
  uint32_t nrec;
};

struct kt_snap_writer {
  const struct kt_snap_fileops *ops;
  size_t block_bytes;
  int max_inflight;
  void (*notify)(void *arg);
  void *notify_arg;
  size_t keep; /* opts->keep */
  char *dir, *tmp_path, *final_path;
  int fd;
  struct kt_buf header; /* encoded header, written first by the thread */
  pthread_t thread;

  /* Loop thread only. */
  struct block *cur; /* being filled; NULL until the first add */
  struct kt_buf prev_key;
  int64_t prev_rev, prev_sub, revision;
  bool have_prev, prev_tomb, end_sent;
  uint64_t record_count, live_keys;

  /* Shared, under mu. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct block *q_head, *q_tail; /* queued for the thread */
  struct block *free_blocks;     /* written blocks, for reuse */
  int inflight;                  /* queued + the one being written */
  bool end_queued, stop;
  uint64_t end_records, end_live;
  enum kt_snap_state state;
  struct kt_err err;
  struct kt_snap_meta done; /* trailer fields and hash, once DONE */
  /* err.code once FAILED, else 0: stored with the state, read by the loop
   * thread's every add without taking mu (an uncontended lock and unlock
   * per record cost it ~80 instructions per put at full load) */
  _Atomic int fail_code;
};

static struct block *block_get(struct kt_snap_writer *w) {
  pthread_mutex_lock(&w->mu);
  struct block *b = w->free_blocks;
  if (b)
    w->free_blocks = b->next;
  pthread_mutex_unlock(&w->mu);
  if (!b) { /* sized once for a full block: no realloc copies while filling */
    b = calloc(1, sizeof *b);
    kt_assert(b);
    b->cap = w->block_bytes + 4096;
    b->p = malloc(b->cap);
    kt_assert(b->p);
  }
  b->next = NULL;
  b->len = 0;
  b->nrec = 0;
  return b;
}

static void block_reserve(struct block *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra)
    cap *= 2;
  b->p = realloc(b->p, cap);
  kt_assert(b->p);
  b->cap = cap;
}

static void block_free(struct block *b) {
  if (b) {
    free(b->p);
    free(b);
  }
}

/* ---- writer thread ---- */

static int write_all(struct kt_snap_writer *w, const void *p, size_t n,
                     crypto_generichash_state *h) {
  if (h)
    crypto_generichash_update(h, p, n);
  const uint8_t *q = p;
  while (n > 0) {
    ssize_t r = w->ops->write(w->ops->ctx, w->fd, q, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      return kt_err_set(&w->err, KT_EIO, "%s: write: %s", w->tmp_path, strerror(e));
    }
    q += r;
    n -= (size_t)r;
  }
  return 0;
}

static void finish_state(struct kt_snap_writer *w, enum kt_snap_state st) {
  pthread_mutex_lock(&w->mu);
  w->state = st;
  if (st == KT_SNAP_FAILED)
    atomic_store_explicit(&w->fail_code, w->err.code, memory_order_release);
  pthread_mutex_unlock(&w->mu);
  if (w->notify)
    w->notify(w->notify_arg);
}

static void *writer_main(void *arg) {
  struct kt_snap_writer *w = arg;
  pthread_setname_np(pthread_self(), "ketch-snap");
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, KT_SNAP_HASH_BYTES);
  uint8_t *comp = NULL;
  size_t comp_cap = 0;
  uint64_t blocks = 0, raw_bytes = 0, file_bytes = 0;
  int rc = write_all(w, w->header.p, w->header.len, &h);
  file_bytes += w->header.len;

  while (rc == 0) {
    pthread_mutex_lock(&w->mu);
    while (!w->q_head && !w->end_queued && !w->stop)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    struct block *b = w->q_head;
    if (b) {
      w->q_head = b->next;
      if (!w->q_head)
        w->q_tail = NULL;
    }
    uint64_t nrec_total = w->end_records, live = w->end_live;
    pthread_mutex_unlock(&w->mu);

    if (b) {
      size_t bound = (size_t)LZ4_compressBound((int)b->len);
      if (comp_cap < 13 + bound) {
        free(comp);
        comp_cap = 13 + bound;
        comp = malloc(comp_cap);
        kt_assert(comp);
      }
      int clen =
          LZ4_compress_default((const char *)b->p, (char *)comp + 13, (int)b->len, (int)bound);
      kt_assert(clen > 0);
      comp[0] = 'B';
      kt_put_u32be(comp + 1, (uint32_t)b->len);
      kt_put_u32be(comp + 5, (uint32_t)clen);
      kt_put_u32be(comp + 9, b->nrec);
      rc = write_all(w, comp, 13 + (size_t)clen, &h);
      blocks++;
      raw_bytes += b->len;
      file_bytes += 13 + (size_t)clen;
      pthread_mutex_lock(&w->mu);
      w->inflight--;
      b->next = w->free_blocks;
      w->free_blocks = b;
      pthread_mutex_unlock(&w->mu);
      if (rc == 0 && w->notify)
        w->notify(w->notify_arg);
      continue;
    }

    /* End: trailer, fsync, rename, fsync dir. */
    uint8_t tr[1 + 32 + KT_SNAP_HASH_BYTES];
    tr[0] = 'E';
    kt_put_u64be(tr + 1, nrec_total);
    kt_put_u64be(tr + 9, blocks);
    kt_put_u64be(tr + 17, live);
    kt_put_u64be(tr + 25, raw_bytes);
    crypto_generichash_update(&h, tr, 33);
    crypto_generichash_final(&h, tr + 33, KT_SNAP_HASH_BYTES);
    rc = write_all(w, tr, sizeof tr, NULL);
    file_bytes += sizeof tr;
    if (rc == 0 && w->ops->fsync(w->ops->ctx, w->fd) != 0)
      rc = kt_err_set(&w->err, KT_EIO, "%s: fsync: %s", w->tmp_path, strerror(errno));
    if (rc == 0) {
      int fd = w->fd;
      w->fd = -1;
      if (w->ops->close(w->ops->ctx, fd) != 0)
        rc = kt_err_set(&w->err, KT_EIO, "%s: close: %s", w->tmp_path, strerror(errno));
    }
    if (rc == 0 && w->ops->rename(w->ops->ctx, w->tmp_path, w->final_path) != 0)
      rc = kt_err_set(&w->err, KT_EIO, "%s: rename to %s: %s", w->tmp_path, w->final_path,
                      strerror(errno));
    if (rc == 0 && w->ops->fsync_dir(w->ops->ctx, w->dir) != 0) {
      rc = kt_err_set(&w->err, KT_EIO, "%s: fsync dir: %s", w->dir, strerror(errno));
      w->ops->unlink(w->ops->ctx, w->final_path); /* not durable: do not leave it */
    }
    if (rc == 0) {
      pthread_mutex_lock(&w->mu);
      w->done.record_count = nrec_total;
      w->done.block_count = blocks;
      w->done.live_keys = live;
      w->done.raw_bytes = raw_bytes;
      w->done.file_bytes = file_bytes;
      memcpy(w->done.hash, tr + 33, KT_SNAP_HASH_BYTES);
      pthread_mutex_unlock(&w->mu);
      free(comp);
      struct kt_err pe = {0};
      if (w->keep && kt_snap_purge(w->dir, w->keep, NULL, &pe))
        kt_log(KT_LOG_WARN, "snap", "retention failed: %s", pe.msg);
      finish_state(w, KT_SNAP_DONE);
      return NULL;
    }
  }
  free(comp);
  if (w->fd >= 0) {
    w->ops->close(w->ops->ctx, w->fd);
    w->fd = -1;
  }
  if (rc != 0) {
    w->ops->unlink(w->ops->ctx, w->tmp_path);
    kt_log(KT_LOG_ERROR, "snap", "snapshot write failed: %s", w->err.msg);
    finish_state(w, KT_SNAP_FAILED);
  }
  return NULL;
}

/* ---- loop thread ---- */

static char *path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  kt_assert(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static void encode_header(struct kt_buf *b, const struct kt_snap_meta *m) {
  size_t clen = strlen(m->creator);
  size_t hlen = 82 + m->membership.n + clen;
  kt_buf_reserve(b, hlen);
  uint8_t *p = b->p;
  memcpy(p, KT_SNAP_MAGIC, 8);
  kt_put_u32be(p + 8, KT_SNAP_FORMAT_VERSION);
  kt_put_u32be(p + 12, (uint32_t)hlen);
  kt_put_u64be(p + 16, m->term);
  kt_put_u64be(p + 24, m->index);
  kt_put_u64be(p + 32, (uint64_t)m->revision);
  kt_put_u64be(p + 40, (uint64_t)m->compact_revision);
  kt_put_u64be(p + 48, m->created_unix_ms);
  kt_put_u32be(p + 56, 0);
  kt_put_u32be(p + 60, m->membership.n);
  if (m->membership.n)
    memcpy(p + 64, m->membership.p, m->membership.n);
  size_t o = 64 + m->membership.n;
  p[o] = (uint8_t)(clen >> 8);
  p[o + 1] = (uint8_t)clen;
  memcpy(p + o + 2, m->creator, clen);
  o += 2 + clen;
  crypto_generichash(p + o, 16, p, o, NULL, 0);
  b->len = hlen;
}

int kt_snap_writer_open(const char *dir, const struct kt_snap_meta *meta,
                        const struct kt_snap_writer_opts *opts, struct kt_snap_writer **out,
                        struct kt_err *err) {
  static const struct kt_snap_writer_opts defaults = {0};
  if (!opts)
    opts = &defaults;
  *out = NULL;
  if (meta->revision < 0 || meta->compact_revision < 0 || meta->compact_revision > meta->revision)
    return kt_err_set(err, KT_EINVAL, "snapshot: bad revisions %lld (compacted %lld)",
                      (long long)meta->revision, (long long)meta->compact_revision);
  if (meta->membership.n > KT_SNAP_MAX_MEMBERSHIP)
    return kt_err_set(err, KT_EINVAL, "snapshot: membership of %u bytes exceeds %u",
                      meta->membership.n, KT_SNAP_MAX_MEMBERSHIP);
  if (strnlen(meta->creator, sizeof meta->creator) > KT_SNAP_MAX_CREATOR)
    return kt_err_set(err, KT_EINVAL, "snapshot: creator string too long");
  if (opts->block_bytes > KT_SNAP_MAX_BLOCK_RAW || opts->max_inflight < 0)
    return kt_err_set(err, KT_EINVAL, "snapshot: bad writer options");
  if (sodium_init() < 0)
    return kt_err_set(err, KT_EINTERNAL, "snapshot: libsodium init failed");

  struct kt_snap_writer *w = calloc(1, sizeof *w);
  kt_assert(w);
  w->ops = opts->ops ? opts->ops : &kt_snap_fileops_posix;
  w->block_bytes = opts->block_bytes ? opts->block_bytes : KT_SNAP_BLOCK_BYTES_DEFAULT;
  w->max_inflight = opts->max_inflight ? opts->max_inflight : KT_SNAP_MAX_INFLIGHT_DEFAULT;
  w->notify = opts->notify;
  w->notify_arg = opts->notify_arg;
  w->keep = opts->keep;
  w->revision = meta->revision;
  char name[64], tmpname[80];
  kt_snap_name(meta->term, meta->index, name, sizeof name);
  snprintf(tmpname, sizeof tmpname, "%s.tmp", name);
  w->dir = strdup(dir);
  kt_assert(w->dir);
  w->tmp_path = path_join(dir, tmpname);
  w->final_path = path_join(dir, name);

  struct kt_snap_meta m = *meta;
  if (!m.created_unix_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m.created_unix_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  }
  encode_header(&w->header, &m);

  w->fd = w->ops->open(w->ops->ctx, w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) {
    int rc = kt_err_set(err, KT_EIO, "%s: create: %s", w->tmp_path, strerror(errno));
    kt_buf_free(&w->header);
    free(w->dir);
    free(w->tmp_path);
    free(w->final_path);
    free(w);
    return rc;
  }
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->state = KT_SNAP_RUNNING;
  atomic_init(&w->fail_code, 0);
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    w->ops->close(w->ops->ctx, w->fd);
    w->ops->unlink(w->ops->ctx, w->tmp_path);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    kt_buf_free(&w->header);
    free(w->dir);
    free(w->tmp_path);
    free(w->final_path);
    free(w);
    return kt_err_set(err, KT_ENOMEM, "snapshot: cannot start the writer thread");
  }
  *out = w;
  return 0;
}

/* Hand the current block to the thread. The queue itself is unbounded:
 * backpressure is kt_snap_writer_can_add, asked between slices. */
static void seal(struct kt_snap_writer *w) {
  struct block *b = w->cur;
  if (!b || !b->len)
    return;
  w->cur = NULL;
  pthread_mutex_lock(&w->mu);
  if (w->q_tail)
    w->q_tail->next = b;
  else
    w->q_head = b;
  w->q_tail = b;
  w->inflight++;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static int failed(struct kt_snap_writer *w) {
  return atomic_load_explicit(&w->fail_code, memory_order_acquire);
}

bool kt_snap_writer_can_add(struct kt_snap_writer *w) {
  pthread_mutex_lock(&w->mu);
  bool ok = w->state == KT_SNAP_RUNNING && w->inflight < w->max_inflight;
  pthread_mutex_unlock(&w->mu);
  return ok && !w->end_sent;
}

int kt_snap_writer_add(struct kt_snap_writer *w, const struct kt_kvrev *r) {
  int code = failed(w);
  if (code)
    return code;
  if (w->end_sent)
    return KT_EINVAL;
  size_t bound = kvrev_bound(r);
  if (bound > KT_SNAP_MAX_BLOCK_RAW)
    return KT_ETOOLARGE;
  /* Validate the order and the fields (FORMAT.md, "record rules"). */
  if (r->key.n == 0 || r->mod_revision < 1 || r->mod_revision > w->revision || r->mod_sub < 0)
    return KT_EINVAL;
  if (r->tombstone
          ? (r->value.n || r->create_revision || r->version)
          : (r->create_revision < 1 || r->create_revision > r->mod_revision || r->version < 1))
    return KT_EINVAL;
  struct kt_bytes prev = {w->prev_key.p, (uint32_t)w->prev_key.len};
  int c = w->have_prev ? kt_bytes_cmp(r->key, prev) : 1;
  if (c < 0 || (c == 0 && (r->mod_revision < w->prev_rev ||
                           (r->mod_revision == w->prev_rev && r->mod_sub <= w->prev_sub))))
    return KT_EINVAL;
  if (w->cur && w->cur->len + bound > KT_SNAP_MAX_BLOCK_RAW)
    seal(w);
  if (!w->cur)
    w->cur = block_get(w);
  struct block *b = w->cur;
  block_reserve(b, bound);
  uint8_t *p = b->p + b->len;
  *p++ = 0x99; /* fixarray of 9 */
  *p++ = KT_SNAP_REC_KVREV;
  p = enc_bin(p, r->key);
  p = enc_bin(p, r->value);
  p = enc_int(p, r->create_revision);
  p = enc_int(p, r->mod_revision);
  p = enc_int(p, r->mod_sub);
  p = enc_int(p, r->version);
  p = enc_int(p, r->lease);
  *p++ = r->tombstone ? 0xc3 : 0xc2;
  b->len = (size_t)(p - b->p);
  b->nrec++;

  if (c != 0) {
    if (w->have_prev && !w->prev_tomb)
      w->live_keys++;
    kt_buf_reset(&w->prev_key);
    kt_buf_append(&w->prev_key, r->key.p, r->key.n);
  }
  w->have_prev = true;
  w->prev_rev = r->mod_revision;
  w->prev_sub = r->mod_sub;
  w->prev_tomb = r->tombstone;
  w->record_count++;
  if (b->len >= w->block_bytes)
    seal(w);
  return 0;
}

int kt_snap_writer_finish(struct kt_snap_writer *w) {
  int code = failed(w);
  if (code)
    return code;
  if (w->end_sent)
    return 0;
  seal(w);
  uint64_t live = w->live_keys + (w->have_prev && !w->prev_tomb);
  pthread_mutex_lock(&w->mu);
  w->end_records = w->record_count;
  w->end_live = live;
  w->end_queued = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  w->end_sent = true;
  return 0;
}

enum kt_snap_state kt_snap_writer_poll(struct kt_snap_writer *w, struct kt_snap_meta *meta_out,
                                       struct kt_err *err) {
  pthread_mutex_lock(&w->mu);
  enum kt_snap_state st = w->state;
  if (st == KT_SNAP_FAILED && err)
    *err = w->err;
  if (st == KT_SNAP_DONE && meta_out) {
    meta_out->record_count = w->done.record_count;
    meta_out->block_count = w->done.block_count;
    meta_out->live_keys = w->done.live_keys;
    meta_out->raw_bytes = w->done.raw_bytes;
    meta_out->file_bytes = w->done.file_bytes;
    memcpy(meta_out->hash, w->done.hash, KT_SNAP_HASH_BYTES);
  }
  pthread_mutex_unlock(&w->mu);
  return st;
}

const char *kt_snap_writer_path(const struct kt_snap_writer *w) { return w->final_path; }

void kt_snap_writer_free(struct kt_snap_writer *w) {
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  if (w->state != KT_SNAP_DONE) {
    if (w->fd >= 0)
      w->ops->close(w->ops->ctx, w->fd);
    if (w->state == KT_SNAP_RUNNING)
      w->ops->unlink(w->ops->ctx, w->tmp_path);
  }
  for (struct block *b = w->q_head, *n; b; b = n) {
    n = b->next;
    block_free(b);
  }
  for (struct block *b = w->free_blocks, *n; b; b = n) {
    n = b->next;
    block_free(b);
  }
  block_free(w->cur);
  kt_buf_free(&w->prev_key);
  kt_buf_free(&w->header);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->dir);
  free(w->tmp_path);
  free(w->final_path);
  free(w);
}
