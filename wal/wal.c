/* wal/wal.c — segments, group commit on the sync thread, recovery, purge,
 * verify and repair. See wal.h for the contract and FORMAT.md for the bytes. */
#include "wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_BYTES 4096
#define BATCH_KEEP_BYTES (8u << 20) /* a batch buffer larger than this is freed */

/* ---- the POSIX file operations ---- */

static int px_open(void *ctx, const char *path, int flags, int mode) {
  (void)ctx;
  int fd = open(path, flags | O_CLOEXEC, mode);
  return fd < 0 ? -errno : fd;
}
static long px_pread(void *ctx, int fd, void *buf, size_t n, uint64_t off) {
  (void)ctx;
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      break;
    done += (size_t)r;
  }
  return (long)done;
}
static int px_pwrite(void *ctx, int fd, const void *buf, size_t n, uint64_t off) {
  (void)ctx;
  size_t done = 0;
  while (done < n) {
    ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      return -EIO;
    done += (size_t)r;
  }
  return 0;
}
static int px_fdatasync(void *ctx, int fd) {
  (void)ctx;
  return fdatasync(fd) ? -errno : 0;
}
static int px_fallocate(void *ctx, int fd, uint64_t off, uint64_t len) {
  (void)ctx;
  if (fallocate(fd, 0, (off_t)off, (off_t)len) == 0)
    return 0;
  if (errno != EOPNOTSUPP && errno != ENOSYS)
    return -errno;
  int r = posix_fallocate(fd, (off_t)off, (off_t)len);
  return -r;
}
static int px_ftruncate(void *ctx, int fd, uint64_t len) {
  (void)ctx;
  return ftruncate(fd, (off_t)len) ? -errno : 0;
}
static int px_fsize(void *ctx, int fd, uint64_t *size) {
  (void)ctx;
  struct stat st;
  if (fstat(fd, &st))
    return -errno;
  *size = (uint64_t)st.st_size;
  return 0;
}
static int px_close(void *ctx, int fd) {
  (void)ctx;
  return close(fd) ? -errno : 0;
}
static int px_rename(void *ctx, const char *from, const char *to) {
  (void)ctx;
  return rename(from, to) ? -errno : 0;
}
static int px_unlink(void *ctx, const char *path) {
  (void)ctx;
  return unlink(path) ? -errno : 0;
}
static int px_mkdir(void *ctx, const char *path) {
  (void)ctx;
  return mkdir(path, 0755) ? -errno : 0;
}
static int px_fsync_dir(void *ctx, const char *path) {
  (void)ctx;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int r = fsync(fd) ? -errno : 0;
  close(fd);
  return r;
}
static int px_readdir(void *ctx, const char *path, void (*fn)(void *arg, const char *name),
                      void *arg) {
  (void)ctx;
  DIR *d = opendir(path);
  if (!d)
    return -errno;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      fn(arg, de->d_name);
  closedir(d);
  return 0;
}

static const void *px_map(void *ctx, int fd, size_t len) {
  (void)ctx;
  void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    return NULL;
  return p;
}
static void px_unmap(void *ctx, const void *p, size_t len) {
  (void)ctx;
  munmap((void *)p, len);
}
/* The end of the last data extent (SEEK_DATA / SEEK_HOLE: an unwritten
 * preallocated range is a hole), or size if the file system cannot tell. */
static uint64_t px_data_end(void *ctx, int fd, uint64_t size) {
  (void)ctx;
  uint64_t end = 0;
  for (off_t pos = 0; (uint64_t)pos < size;) {
    off_t d = lseek(fd, pos, SEEK_DATA);
    if (d < 0)
      return errno == ENXIO ? end : size; /* ENXIO: no data after pos */
    off_t h = lseek(fd, d, SEEK_HOLE);
    if (h <= d)
      return size;
    end = (uint64_t)h;
    pos = h;
  }
  return end < size ? end : size;
}

const struct kt_wal_fileops kt_wal_posix_fileops = {
    .map = px_map,
    .unmap = px_unmap,
    .data_end = px_data_end,
    .open = px_open,
    .pread = px_pread,
    .pwrite = px_pwrite,
    .fdatasync = px_fdatasync,
    .fallocate = px_fallocate,
    .ftruncate = px_ftruncate,
    .fsize = px_fsize,
    .close = px_close,
    .rename = px_rename,
    .unlink = px_unlink,
    .mkdir = px_mkdir,
    .fsync_dir = px_fsync_dir,
    .readdir = px_readdir,
};

/* ---- state ---- */

struct chunk {
  bool is_new; /* create the segment file; data starts with its header */
  uint64_t seq, first_index;
  uint64_t off; /* file offset of data */
  size_t data_off, data_len;
};

struct batch {
  struct kt_buf data;
  struct chunk *chunks;
  size_t n, cap;
  uint64_t last_seq, last_seg_seq;
};

struct seg {
  uint64_t seq, first_index;
};

struct kt_wal {
  char *dir;
  const struct kt_wal_fileops *ops;
  uint64_t seg_bytes;
  uint32_t max_rec;
  void (*notify)(void *);
  void *notify_arg;

  /* loop thread */
  uint64_t next_seq, cur_seq, cur_off;
  struct seg *segs;
  size_t nsegs, segcap;
  int failed;
  struct kt_err ferr;
  struct batch b[2];
  struct batch *fill;
  bool ready;

  /* shared, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  struct batch *inflight;
  bool stop;
  uint64_t done_seq, done_seg_seq;
  int done_code;
  struct kt_err done_err;
  struct kt_hist fsync_hist; /* fdatasync durations (s), for /metrics */

  /* sync thread: durations of this batch's fdatasyncs, folded into
   * fsync_hist under mu */
  double fsync_s[4];
  int n_fsync_s;

  /* sync thread (set before it starts, and never again from the loop:
   * anything that re-seeds the chain while it runs must go through mu) */
  uint32_t seal_crc; /* the chain: the crc of the last record or header sealed */
  int fd;
  uint64_t fd_seq, fd_first;
  pthread_t thr;
  bool thr_started;

  /* purge thread: removes the segments purge and reset hand it (oldest
   * first), so that neither the loop nor the syncs wait for an unlink (one of
   * a 64 MiB segment in the page cache takes ~16 ms). doomed and purge_code /
   * purge_err are under mu. */
  pthread_cond_t cv_purge;
  struct seg *doomed;
  size_t ndoomed;
  bool purge_kick; /* doomed has news: work through it */
  bool purging;    /* the thread is removing a list it took */
  int purge_code;
  struct kt_err purge_err;
  pthread_t purge_thr;
  bool purge_started;
};

static int errno_code(int neg) { return neg == -ENOSPC ? KT_ENOSPACE : KT_EIO; }

static void seg_path(char *out, const char *dir, uint64_t seq, uint64_t first_index) {
  snprintf(out, PATH_BYTES, "%s/%016llx-%016llx.wal", dir, (unsigned long long)seq,
           (unsigned long long)first_index);
}

static int io_err(struct kt_err *e, int neg, const char *what, const char *path) {
  return kt_err_set(e, errno_code(neg), "wal: %s %s: %s", what, path, strerror(-neg));
}

/* Create segment seq: write data (header first) into <name>.tmp preallocated
 * to seg_bytes, sync it, rename it into place, sync the directory. */
static int create_segment(const struct kt_wal_fileops *ops, const char *dir, uint64_t seg_bytes,
                          uint64_t seq, uint64_t first_index, const uint8_t *data, size_t len,
                          int *fd_out, struct kt_err *e) {
  char path[PATH_BYTES], tmp[PATH_BYTES + 8];
  seg_path(path, dir, seq, first_index);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = ops->open(ops->ctx, tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return io_err(e, fd, "create", tmp);
  int r = ops->fallocate(ops->ctx, fd, 0, seg_bytes);
  const char *what = "preallocate";
  if (!r) {
    what = "write";
    r = ops->pwrite(ops->ctx, fd, data, len, 0);
  }
  if (!r) {
    what = "fdatasync";
    r = ops->fdatasync(ops->ctx, fd);
  }
  if (!r) {
    what = "rename";
    r = ops->rename(ops->ctx, tmp, path);
  }
  if (r) {
    ops->close(ops->ctx, fd);
    ops->unlink(ops->ctx, tmp);
    return io_err(e, r, what, what[0] == 'r' ? path : tmp);
  }
  r = ops->fsync_dir(ops->ctx, dir);
  if (r) {
    ops->close(ops->ctx, fd);
    return io_err(e, r, "fsync directory", dir);
  }
  *fd_out = fd;
  return 0;
}

/* ---- sync thread ---- */

/* fdatasync, its duration noted for the histogram (a batch has at most
 * two: the segment it fills and the one it starts). */
static int timed_fdatasync(struct kt_wal *w, int fd) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int r = w->ops->fdatasync(w->ops->ctx, fd);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (w->n_fsync_s < (int)KT_ARRAY_LEN(w->fsync_s))
    w->fsync_s[w->n_fsync_s++] = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  return r;
}

/* Chains the batch's records and segment headers, in order, to what was
 * sealed before: the loop thread wrote them without prev_crc and crc
 * (kt_wal_write_record), so their checksums cost it nothing. */
static void seal_batch(struct kt_wal *w, struct batch *b) {
  uint32_t crc = w->seal_crc;
  for (size_t i = 0; i < b->n; i++) {
    const struct chunk *c = &b->chunks[i];
    uint8_t *p = b->data.p + c->data_off, *end = p + c->data_len;
    if (c->is_new) {
      crc = kt_wal_seal_seghdr(p, crc);
      p += KT_WAL_SEG_HDR_BYTES;
    }
    while (p < end) {
      crc = kt_wal_seal_record(p, crc);
      p += kt_wal_record_bytes(kt_get_u32be(p));
    }
    kt_assert(p == end);
  }
  w->seal_crc = crc;
}

static int write_batch(struct kt_wal *w, struct batch *b, struct kt_err *e) {
  const struct kt_wal_fileops *ops = w->ops;
  seal_batch(w, b);
  char path[PATH_BYTES];
  bool dirty = false;
  for (size_t i = 0; i < b->n; i++) {
    struct chunk *c = &b->chunks[i];
    const uint8_t *p = b->data.p + c->data_off;
    if (c->is_new) {
      if (dirty) {
        int r = timed_fdatasync(w, w->fd);
        if (r) {
          seg_path(path, w->dir, w->fd_seq, w->fd_first);
          return io_err(e, r, "fdatasync", path);
        }
        dirty = false;
      }
      int fd;
      int r =
          create_segment(ops, w->dir, w->seg_bytes, c->seq, c->first_index, p, c->data_len, &fd, e);
      if (r)
        return r;
      ops->close(ops->ctx, w->fd);
      w->fd = fd;
      w->fd_seq = c->seq;
      w->fd_first = c->first_index;
    } else {
      kt_assert(c->seq == w->fd_seq);
      int r = ops->pwrite(ops->ctx, w->fd, p, c->data_len, c->off);
      if (r) {
        seg_path(path, w->dir, w->fd_seq, w->fd_first);
        return kt_err_set(e, errno_code(r), "wal: write %s offset %llu: %s", path,
                          (unsigned long long)c->off, strerror(-r));
      }
      dirty = true;
    }
  }
  if (dirty) {
    int r = timed_fdatasync(w, w->fd);
    if (r) {
      seg_path(path, w->dir, w->fd_seq, w->fd_first);
      return io_err(e, r, "fdatasync", path);
    }
  }
  return 0;
}

static void *sync_main(void *arg) {
  struct kt_wal *w = arg;
  pthread_setname_np(pthread_self(), "ketch-wal-sync"); /* top -H, /proc/PID/task/TID/comm */
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->inflight && !w->stop)
      pthread_cond_wait(&w->cv_work, &w->mu);
    struct batch *b = w->inflight;
    bool failed = w->done_code != 0;
    pthread_mutex_unlock(&w->mu);
    if (!b)
      return NULL;
    struct kt_err e = {0};
    w->n_fsync_s = 0;
    int code = failed ? 0 : write_batch(w, b, &e);
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n_fsync_s; i++)
      kt_hist_observe(&w->fsync_hist, w->fsync_s[i]);
    if (code) {
      w->done_code = code;
      w->done_err = e;
    } else if (!failed) {
      w->done_seq = KT_MAX(w->done_seq, b->last_seq);
      w->done_seg_seq = KT_MAX(w->done_seg_seq, b->last_seg_seq);
    }
    w->inflight = NULL;
    pthread_cond_broadcast(&w->cv_done);
    pthread_mutex_unlock(&w->mu);
    if (w->notify)
      w->notify(w->notify_arg);
  }
}

/* ---- purge thread ---- */

/* Unlinks what it is handed, oldest first, then syncs the directory once. A
 * failed unlink stops the run there: that segment and the rest stay first
 * in the list for the next kick, so the files on disk always stay one
 * contiguous run of sequences (older records in front, which open delivers
 * and the node skips); the error goes to the next kt_wal_purge. */
static void *purge_main(void *arg) {
  struct kt_wal *w = arg;
  pthread_setname_np(pthread_self(), "ketch-wal-purge");
  const struct kt_wal_fileops *ops = w->ops;
  char path[PATH_BYTES];
  pthread_mutex_lock(&w->mu);
  while (!w->stop || w->purge_kick) {
    if (!w->purge_kick) {
      pthread_cond_wait(&w->cv_purge, &w->mu);
      continue;
    }
    w->purge_kick = false;
    struct seg *v = w->doomed;
    size_t n = w->ndoomed;
    w->doomed = NULL;
    w->ndoomed = 0;
    w->purging = true;
    pthread_mutex_unlock(&w->mu);
    struct kt_err e = {0};
    int code = 0;
    size_t gone = 0;
    while (gone < n && !code) {
      seg_path(path, w->dir, v[gone].seq, v[gone].first_index);
      int r = ops->unlink(ops->ctx, path);
      if (r && r != -ENOENT)
        code = io_err(&e, r, "unlink", path);
      else
        gone++;
    }
    if (gone) {
      int r = ops->fsync_dir(ops->ctx, w->dir);
      if (r && !code)
        code = io_err(&e, r, "fsync directory", w->dir);
    }
    pthread_mutex_lock(&w->mu);
    if (code) {
      w->purge_code = code;
      w->purge_err = e;
    }
    /* what is left goes back in front of anything handed over meanwhile */
    size_t left = n - gone, total = left + w->ndoomed;
    if (left) {
      memmove(v, v + gone, left * sizeof *v);
      v = realloc(v, total * sizeof *v);
      kt_assert(v);
      if (w->ndoomed)
        memcpy(v + left, w->doomed, w->ndoomed * sizeof *v);
      free(w->doomed);
      w->doomed = v;
      w->ndoomed = total;
    } else {
      free(v);
    }
    w->purging = false;
    pthread_cond_broadcast(&w->cv_done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Hands the oldest n segments of w->segs to the purge thread and drops them
 * from the list. */
static void doom_oldest(struct kt_wal *w, size_t n) {
  if (!n)
    return;
  pthread_mutex_lock(&w->mu);
  w->doomed = realloc(w->doomed, (w->ndoomed + n) * sizeof *w->doomed); /* rare, short */
  kt_assert(w->doomed);
  memcpy(w->doomed + w->ndoomed, w->segs, n * sizeof *w->segs);
  w->ndoomed += n;
  w->purge_kick = true;
  pthread_cond_signal(&w->cv_purge);
  pthread_mutex_unlock(&w->mu);
  memmove(w->segs, w->segs + n, (w->nsegs - n) * sizeof *w->segs);
  w->nsegs -= n;
}

/* ---- loop thread: append, flush, poll ---- */

static struct chunk *batch_chunk(struct batch *b) {
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4;
    b->chunks = realloc(b->chunks, b->cap * sizeof *b->chunks);
    kt_assert(b->chunks);
  }
  struct chunk *c = &b->chunks[b->n++];
  memset(c, 0, sizeof *c);
  c->data_off = b->data.len;
  return c;
}

static void segs_push(struct kt_wal *w, uint64_t seq, uint64_t first_index) {
  if (w->nsegs == w->segcap) {
    w->segcap = w->segcap ? w->segcap * 2 : 8;
    w->segs = realloc(w->segs, w->segcap * sizeof *w->segs);
    kt_assert(w->segs);
  }
  w->segs[w->nsegs++] = (struct seg){seq, first_index};
}

/* Start segment cur_seq + 1 (first index first_index) in the filling batch. */
static void cut(struct kt_wal *w, uint64_t first_index) {
  struct batch *b = w->fill;
  struct kt_wal_seghdr h = {.seq = w->cur_seq + 1, /* chained when sealed: seal_batch */
                            .first_index = first_index,
                            .segment_bytes = (uint32_t)KT_MIN(w->seg_bytes, UINT32_MAX)};
  struct chunk *c = batch_chunk(b);
  c->is_new = true;
  c->seq = h.seq;
  c->first_index = first_index;
  kt_buf_reserve(&b->data, KT_WAL_SEG_HDR_BYTES);
  kt_wal_write_seghdr(&h, b->data.p + b->data.len);
  b->data.len += KT_WAL_SEG_HDR_BYTES;
  c->data_len = KT_WAL_SEG_HDR_BYTES;
  w->cur_seq = h.seq;
  w->cur_off = KT_WAL_SEG_HDR_BYTES;
  b->last_seg_seq = h.seq;
  segs_push(w, h.seq, first_index);
}

int kt_wal_append(struct kt_wal *w, uint8_t type, uint64_t index, const void *payload, size_t len,
                  uint64_t *seq) {
  if (w->failed)
    return w->failed;
  if (type == 0)
    return KT_EINVAL;
  if (len > w->max_rec)
    return KT_ETOOLARGE;
  struct batch *b = w->fill;
  uint64_t rb = kt_wal_record_bytes(len);
  if (w->cur_off + rb > w->seg_bytes && w->cur_off > KT_WAL_SEG_HDR_BYTES) {
    cut(w, index); /* the record starts a new segment */
  }
  struct chunk *c = b->n ? &b->chunks[b->n - 1] : NULL;
  if (!c || c->seq != w->cur_seq) {
    c = batch_chunk(b);
    c->seq = w->cur_seq;
    c->off = w->cur_off;
  }
  kt_buf_reserve(&b->data, (size_t)rb);
  kt_wal_write_record(b->data.p + b->data.len, type, index, payload, (uint32_t)len);
  b->data.len += (size_t)rb;
  c->data_len += (size_t)rb;
  w->cur_off += rb;
  b->last_seq = ++w->next_seq;
  b->last_seg_seq = w->cur_seq;
  if (seq)
    *seq = w->next_seq;
  return 0;
}

/* Under mu, nothing in flight: hand the filling batch to the sync thread. */
static void handoff(struct kt_wal *w) {
  kt_assert(!w->inflight);
  w->inflight = w->fill;
  w->fill = w->fill == &w->b[0] ? &w->b[1] : &w->b[0];
  w->fill->data.len = 0;
  w->fill->n = 0;
  if (w->fill->data.cap > BATCH_KEEP_BYTES) /* after a burst of large records */
    kt_buf_free(&w->fill->data);
  w->ready = false;
  pthread_cond_signal(&w->cv_work);
}

int kt_wal_flush(struct kt_wal *w) {
  if (w->failed)
    return w->failed;
  if (!w->fill->n)
    return 0;
  pthread_mutex_lock(&w->mu);
  if (w->inflight)
    w->ready = true;
  else
    handoff(w);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

int kt_wal_poll(struct kt_wal *w, uint64_t *durable_seq, struct kt_err *err) {
  pthread_mutex_lock(&w->mu);
  uint64_t d = w->done_seq;
  int code = w->done_code;
  if (code && !w->failed) {
    w->failed = code;
    w->ferr = w->done_err;
  }
  if (!code && !w->inflight && w->ready && w->fill->n)
    handoff(w);
  pthread_mutex_unlock(&w->mu);
  if (durable_seq)
    *durable_seq = d;
  if (w->failed) {
    if (err)
      *err = w->ferr;
    return w->failed;
  }
  return 0;
}

void kt_wal_fsync_hist(struct kt_wal *w, struct kt_hist *out) {
  pthread_mutex_lock(&w->mu);
  *out = w->fsync_hist;
  pthread_mutex_unlock(&w->mu);
}

int kt_wal_sync(struct kt_wal *w, struct kt_err *err) {
  uint64_t target = w->next_seq, d = 0;
  for (;;) {
    int rc = kt_wal_poll(w, &d, err);
    if (rc)
      return rc;
    if (d >= target && !w->fill->n) {
      pthread_mutex_lock(&w->mu);
      bool idle = !w->inflight;
      while (idle && (w->purge_kick || w->purging)) /* and the removals handed over */
        pthread_cond_wait(&w->cv_done, &w->mu);
      pthread_mutex_unlock(&w->mu);
      if (idle)
        return 0;
    }
    kt_wal_flush(w);
    pthread_mutex_lock(&w->mu);
    while (w->inflight)
      pthread_cond_wait(&w->cv_done, &w->mu);
    pthread_mutex_unlock(&w->mu);
  }
}

uint64_t kt_wal_last_seq(const struct kt_wal *w) { return w->next_seq; }

size_t kt_wal_buffered_bytes(const struct kt_wal *w) { return w->fill->data.len; }

int kt_wal_purge(struct kt_wal *w, uint64_t index, int *removed, struct kt_err *err) {
  pthread_mutex_lock(&w->mu);
  uint64_t durable_seg = w->done_seg_seq;
  int code = w->purge_code;
  if (code && err)
    *err = w->purge_err;
  w->purge_code = 0;
  pthread_mutex_unlock(&w->mu);
  size_t n = 0;
  while (n + 2 <= w->nsegs && w->segs[n + 1].seq <= durable_seg &&
         w->segs[n + 1].first_index <= index + 1)
    n++;
  doom_oldest(w, n);
  if (removed)
    *removed = (int)n;
  return code;
}

int kt_wal_reset(struct kt_wal *w, uint64_t first_index, const struct kt_wal_rec *first,
                 struct kt_err *err) {
  if (w->failed) {
    if (err)
      *err = w->ferr;
    return w->failed;
  }
  cut(w, first_index);
  if (first) {
    int rc = kt_wal_append(w, first->type, first->index, first->payload, first->len, NULL);
    if (rc)
      return rc;
  }
  uint64_t keep = w->cur_seq;
  int rc = kt_wal_sync(w, err);
  if (rc)
    return rc;
  size_t n = 0;
  while (n + 1 < w->nsegs && w->segs[n].seq < keep)
    n++;
  doom_oldest(w, n);
  return 0;
}

static void wal_free(struct kt_wal *w) {
  for (int i = 0; i < 2; i++) {
    kt_buf_free(&w->b[i].data);
    free(w->b[i].chunks);
  }
  free(w->segs);
  free(w->doomed);
  free(w->dir);
  free(w);
}

int kt_wal_close(struct kt_wal *w) {
  if (!w)
    return 0;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv_work);
  pthread_cond_signal(&w->cv_purge);
  pthread_mutex_unlock(&w->mu);
  if (w->thr_started)
    pthread_join(w->thr, NULL);
  if (w->purge_started)
    pthread_join(w->purge_thr, NULL); /* it removes what it was handed first */
  int code = w->failed ? w->failed : w->done_code;
  if (w->fd >= 0)
    w->ops->close(w->ops->ctx, w->fd);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv_work);
  pthread_cond_destroy(&w->cv_done);
  pthread_cond_destroy(&w->cv_purge);
  wal_free(w);
  return code;
}

/* ---- listing and loading ---- */

struct listing {
  struct seg *v;
  size_t n, cap;
  char **tmps;
  size_t ntmp;
};

static void list_cb(void *arg, const char *name) {
  struct listing *l = arg;
  uint64_t seq, fi;
  size_t nl = strlen(name);
  if (nl > 8 && !strcmp(name + nl - 8, ".wal.tmp")) {
    l->tmps = realloc(l->tmps, (l->ntmp + 1) * sizeof *l->tmps);
    kt_assert(l->tmps);
    l->tmps[l->ntmp] = strdup(name);
    kt_assert(l->tmps[l->ntmp]);
    l->ntmp++;
    return;
  }
  if (!kt_wal_parse_name(name, &seq, &fi))
    return;
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 16;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    kt_assert(l->v);
  }
  l->v[l->n++] = (struct seg){seq, fi};
}

static int seg_cmp(const void *a, const void *b) {
  const struct seg *x = a, *y = b;
  if (x->seq != y->seq)
    return x->seq < y->seq ? -1 : 1;
  return x->first_index < y->first_index ? -1 : x->first_index > y->first_index;
}

static void listing_free(struct listing *l) {
  for (size_t i = 0; i < l->ntmp; i++)
    free(l->tmps[i]);
  free(l->tmps);
  free(l->v);
}

static int list_dir(const struct kt_wal_fileops *ops, const char *dir, struct listing *l,
                    struct kt_err *err) {
  memset(l, 0, sizeof *l);
  int r = ops->readdir(ops->ctx, dir, list_cb, l);
  if (r)
    return io_err(err, r, "read directory", dir);
  if (l->n)
    qsort(l->v, l->n, sizeof *l->v, seg_cmp);
  return 0;
}

/* Sequence check: consecutive, no duplicates. Returns the index i of the
 * first segment that breaks it (l->n if none) and describes it in err. */
static size_t check_sequence(const char *dir, const struct listing *l, struct kt_err *err) {
  for (size_t i = 1; i < l->n; i++) {
    char a[PATH_BYTES], b[PATH_BYTES];
    seg_path(a, dir, l->v[i - 1].seq, l->v[i - 1].first_index);
    seg_path(b, dir, l->v[i].seq, l->v[i].first_index);
    if (l->v[i].seq == l->v[i - 1].seq) {
      kt_err_set(err, KT_ECORRUPT, "wal: duplicated segment sequence %llu: %s and %s",
                 (unsigned long long)l->v[i].seq, a, b);
      return i;
    }
    if (l->v[i].seq != l->v[i - 1].seq + 1) {
      kt_err_set(err, KT_ECORRUPT, "wal: missing segment sequence %llu between %s and %s",
                 (unsigned long long)l->v[i - 1].seq + 1, a, b);
      return i;
    }
  }
  return l->n;
}

/* A whole segment in memory: mapped read-only when the file operations can
 * map (no copy, no zeroed buffer: a restart reads several 64 MiB segments),
 * else read into a buffer; only up to the end of its data when the file
 * operations can tell it (the rest reads as zeros, so scanning it changes
 * nothing: the unwritten tail of the last segment is most of the file). */
struct seg_buf {
  const uint8_t *p;
  size_t len;
  bool mapped;
};

static int read_all(const struct kt_wal_fileops *ops, int fd, const char *path, struct seg_buf *out,
                    struct kt_err *err) {
  uint64_t size;
  int r = ops->fsize(ops->ctx, fd, &size);
  if (r)
    return io_err(err, r, "stat", path);
  if (ops->data_end)
    size = ops->data_end(ops->ctx, fd, size);
  *out = (struct seg_buf){0};
  if (size && size <= SIZE_MAX && ops->map) {
    out->p = ops->map(ops->ctx, fd, (size_t)size);
    if (out->p) {
      out->len = (size_t)size;
      out->mapped = true;
      return 0;
    }
  }
  uint8_t *buf = malloc(size ? (size_t)size : 1);
  if (!buf)
    return kt_err_set(err, KT_ENOMEM, "wal: no memory to read %s", path);
  long got = ops->pread(ops->ctx, fd, buf, (size_t)size, 0);
  if (got < 0) {
    free(buf);
    return io_err(err, (int)got, "read", path);
  }
  out->p = buf;
  out->len = (size_t)got;
  return 0;
}

static void seg_buf_free(const struct kt_wal_fileops *ops, struct seg_buf *b) {
  if (b->mapped)
    ops->unmap(ops->ctx, b->p, b->len);
  else
    free((void *)b->p);
  *b = (struct seg_buf){0};
}

enum load_mode { LOAD_OPEN, LOAD_VERIFY };

struct load_res {
  int fd; /* LOAD_OPEN: the last segment, open read-write */
  uint64_t cur_seq, cur_off, records;
  uint32_t last_crc;
  struct kt_err torn;
};

/* Read every segment in order; deliver records; classify. In LOAD_OPEN mode
 * a torn tail is cut. Segments go into w->segs when w is not NULL. */
static int load(const struct kt_wal_fileops *ops, const char *dir, const struct listing *l,
                enum load_mode mode, uint64_t seg_bytes, kt_wal_record_fn fn, void *arg,
                struct kt_wal *w, struct load_res *res, struct kt_err *err) {
  res->fd = -1;
  if (check_sequence(dir, l, err) != l->n)
    return err->code;
  uint32_t last_crc = 0;
  for (size_t i = 0; i < l->n; i++) {
    char path[PATH_BYTES];
    seg_path(path, dir, l->v[i].seq, l->v[i].first_index);
    bool last = i + 1 == l->n;
    int fd = ops->open(ops->ctx, path, mode == LOAD_OPEN && last ? O_RDWR : O_RDONLY, 0);
    if (fd < 0)
      return io_err(err, fd, "open", path);
    struct seg_buf buf;
    int rc = read_all(ops, fd, path, &buf, err);
    struct kt_wal_scan s;
    if (!rc) {
      rc = kt_wal_scan_segment(buf.p, buf.len, &s, fn, arg);
      seg_buf_free(ops, &buf);
    }
    if (rc) {
      ops->close(ops->ctx, fd);
      return rc;
    }
    res->records += s.records;
    if (s.status == KT_WAL_SCAN_BADHDR)
      rc = kt_err_set(err, KT_ECORRUPT, "wal: %s offset 0: %s", path, s.why);
    else if (s.hdr.seq != l->v[i].seq || s.hdr.first_index != l->v[i].first_index)
      rc = kt_err_set(err, KT_ECORRUPT,
                      "wal: %s offset 16: header says sequence %llu first index %llu", path,
                      (unsigned long long)s.hdr.seq, (unsigned long long)s.hdr.first_index);
    else if (i > 0 && s.hdr.prev_crc != last_crc)
      rc = kt_err_set(err, KT_ECORRUPT,
                      "wal: %s offset 12: previous checksum %08x does not match the end of the "
                      "previous segment (%08x)",
                      path, s.hdr.prev_crc, last_crc);
    else if (s.status == KT_WAL_SCAN_CORRUPT)
      rc = kt_err_set(err, KT_ECORRUPT,
                      "wal: %s offset %llu: %s; valid data follows at offset %llu (%llu "
                      "records); refusing to drop it (ketchutl wal repair cuts the log here)",
                      path, (unsigned long long)s.bad_off, s.why, (unsigned long long)s.next_off,
                      (unsigned long long)s.records_after);
    else if (s.status == KT_WAL_SCAN_TORN && !last)
      rc = kt_err_set(err, KT_ECORRUPT,
                      "wal: %s offset %llu: %s, in a segment that is not the last "
                      "(ketchutl wal repair cuts the log here)",
                      path, (unsigned long long)s.bad_off, s.why);
    if (rc) {
      ops->close(ops->ctx, fd);
      return rc;
    }
    if (s.status == KT_WAL_SCAN_TORN) {
      uint64_t bytes = s.dirty_end > s.bad_off ? s.dirty_end - s.bad_off : 0;
      kt_err_set(&res->torn, KT_ECORRUPT, "wal: torn tail in %s at offset %llu: %s (%llu bytes)",
                 path, (unsigned long long)s.bad_off, s.why, (unsigned long long)bytes);
      if (mode == LOAD_OPEN) {
        kt_log(KT_LOG_WARN, "wal", "cutting torn tail: file=%s offset=%llu bytes=%llu why=\"%s\"",
               path, (unsigned long long)s.bad_off, (unsigned long long)bytes, s.why);
        int r = ops->ftruncate(ops->ctx, fd, s.bad_off);
        if (!r)
          r = ops->fallocate(ops->ctx, fd, 0, KT_MAX(seg_bytes, s.bad_off));
        if (!r)
          r = ops->fdatasync(ops->ctx, fd);
        if (r) {
          ops->close(ops->ctx, fd);
          return io_err(err, r, "cut torn tail of", path);
        }
      }
    }
    last_crc = s.last_crc;
    if (w)
      segs_push(w, l->v[i].seq, l->v[i].first_index);
    if (last && mode == LOAD_OPEN) {
      res->fd = fd;
      res->cur_seq = l->v[i].seq;
      res->cur_off = s.end_off;
    } else {
      ops->close(ops->ctx, fd);
    }
  }
  res->last_crc = last_crc;
  return 0;
}

static int mkdir_p(const struct kt_wal_fileops *ops, const char *dir, struct kt_err *err) {
  char p[PATH_BYTES];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char c = *s;
      *s = 0;
      int r = ops->mkdir(ops->ctx, p);
      if (r && r != -EEXIST)
        return io_err(err, r, "mkdir", p);
      *s = c;
      if (!c)
        return 0;
    }
  }
}

int kt_wal_open(const char *dir, const struct kt_wal_opts *opts, kt_wal_record_fn fn, void *arg,
                struct kt_wal **out, struct kt_err *err) {
  static const struct kt_wal_opts defaults = {0};
  if (!opts)
    opts = &defaults;
  *out = NULL;
  if (strlen(dir) > PATH_BYTES - 64)
    return kt_err_set(err, KT_EINVAL, "wal: directory name too long");
  struct kt_wal *w = calloc(1, sizeof *w);
  kt_assert(w);
  w->dir = strdup(dir);
  kt_assert(w->dir);
  w->ops = opts->ops ? opts->ops : &kt_wal_posix_fileops;
  w->seg_bytes = opts->segment_bytes ? opts->segment_bytes : KT_WAL_DEFAULT_SEGMENT_BYTES;
  if (w->seg_bytes < KT_WAL_SEG_HDR_BYTES + KT_WAL_REC_HDR_BYTES)
    w->seg_bytes = KT_WAL_SEG_HDR_BYTES + KT_WAL_REC_HDR_BYTES;
  w->max_rec = opts->max_record_bytes ? opts->max_record_bytes : (64u << 20);
  if (w->max_rec > KT_WAL_MAX_PAYLOAD)
    w->max_rec = KT_WAL_MAX_PAYLOAD;
  w->notify = opts->notify;
  w->notify_arg = opts->notify_arg;
  w->fill = &w->b[0];
  w->fd = -1;
  pthread_mutex_init(&w->mu, NULL);
  w->fsync_hist = (struct kt_hist)KT_HIST_FSYNC;
  pthread_cond_init(&w->cv_work, NULL);
  pthread_cond_init(&w->cv_done, NULL);
  pthread_cond_init(&w->cv_purge, NULL);
  const struct kt_wal_fileops *ops = w->ops;

  int rc = mkdir_p(ops, dir, err);
  struct listing l;
  if (!rc)
    rc = list_dir(ops, dir, &l, err);
  if (rc) {
    kt_wal_close(w);
    return rc;
  }
  for (size_t i = 0; i < l.ntmp; i++) {
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, l.tmps[i]);
    kt_log(KT_LOG_INFO, "wal", "removing unfinished segment file=%s", path);
    ops->unlink(ops->ctx, path);
  }
  if (l.n == 0) {
    uint8_t hdr[KT_WAL_SEG_HDR_BYTES];
    struct kt_wal_seghdr h = {.seq = 0,
                              .first_index = opts->first_index,
                              .segment_bytes = (uint32_t)KT_MIN(w->seg_bytes, UINT32_MAX)};
    kt_wal_encode_seghdr(&h, hdr);
    rc = create_segment(ops, dir, w->seg_bytes, 0, opts->first_index, hdr, sizeof hdr, &w->fd, err);
    w->cur_seq = 0;
    w->cur_off = KT_WAL_SEG_HDR_BYTES;
    w->seal_crc = h.crc;
    segs_push(w, 0, opts->first_index);
  } else {
    struct load_res res = {0};
    rc = load(ops, dir, &l, LOAD_OPEN, w->seg_bytes, fn, arg, w, &res, err);
    w->fd = res.fd;
    w->cur_seq = res.cur_seq;
    w->cur_off = res.cur_off;
    w->seal_crc = res.last_crc;
  }
  listing_free(&l);
  if (rc) {
    kt_wal_close(w);
    return rc;
  }
  w->fd_seq = w->cur_seq;
  w->fd_first = w->segs[w->nsegs - 1].first_index;
  w->done_seg_seq = w->cur_seq;
  if (pthread_create(&w->thr, NULL, sync_main, w) != 0) {
    kt_wal_close(w);
    return kt_err_set(err, KT_EIO, "wal: cannot start the sync thread");
  }
  w->thr_started = true;
  if (pthread_create(&w->purge_thr, NULL, purge_main, w) != 0) {
    kt_wal_close(w);
    return kt_err_set(err, KT_EIO, "wal: cannot start the purge thread");
  }
  w->purge_started = true;
  *out = w;
  return 0;
}

int kt_wal_verify(const char *dir, const struct kt_wal_fileops *ops, uint64_t *records,
                  struct kt_err *torn, struct kt_err *err) {
  if (!ops)
    ops = &kt_wal_posix_fileops;
  struct listing l;
  int rc = list_dir(ops, dir, &l, err);
  if (rc)
    return rc;
  struct load_res res = {0};
  rc = load(ops, dir, &l, LOAD_VERIFY, 0, NULL, NULL, NULL, &res, err);
  listing_free(&l);
  if (records)
    *records = res.records;
  if (torn)
    *torn = res.torn;
  return rc;
}

/* ---- repair ---- */

int kt_wal_repair(const char *dir, const struct kt_wal_fileops *ops,
                  struct kt_wal_repair_report *rep, struct kt_err *err) {
  if (!ops)
    ops = &kt_wal_posix_fileops;
  memset(rep, 0, sizeof *rep);
  struct listing l;
  int rc = list_dir(ops, dir, &l, err);
  if (rc)
    return rc;
  struct kt_err seqerr = {0};
  size_t seq_bad = check_sequence(dir, &l, &seqerr);
  size_t cut_seg = l.n;    /* first segment to touch */
  bool remove_cut = false; /* remove cut_seg entirely instead of truncating it */
  bool count_cut = false;  /* cut_seg's records are not counted yet */
  uint64_t cut_off = 0, seg_bytes = KT_WAL_DEFAULT_SEGMENT_BYTES;
  uint32_t last_crc = 0;
  for (size_t i = 0; i < l.n && cut_seg == l.n; i++) {
    char path[PATH_BYTES];
    seg_path(path, dir, l.v[i].seq, l.v[i].first_index);
    if (i == seq_bad) {
      cut_seg = i;
      remove_cut = true;
      count_cut = true;
      snprintf(rep->why, sizeof rep->why, "%s", "segment sequence broken");
      break;
    }
    int fd = ops->open(ops->ctx, path, O_RDONLY, 0);
    if (fd < 0) {
      rc = io_err(err, fd, "open", path);
      break;
    }
    struct seg_buf buf;
    rc = read_all(ops, fd, path, &buf, err);
    ops->close(ops->ctx, fd);
    if (rc)
      break;
    struct kt_wal_scan s;
    kt_wal_scan_segment(buf.p, buf.len, &s, NULL, NULL);
    seg_buf_free(ops, &buf);
    if (s.status == KT_WAL_SCAN_BADHDR || s.hdr.seq != l.v[i].seq ||
        s.hdr.first_index != l.v[i].first_index || (i > 0 && s.hdr.prev_crc != last_crc)) {
      cut_seg = i;
      remove_cut = true;
      rep->bytes_dropped += s.dirty_end;
      rep->records_dropped += s.records + s.records_after;
      snprintf(rep->why, sizeof rep->why, "%s",
               s.status == KT_WAL_SCAN_BADHDR ? s.why : "segment header does not fit the log");
    } else if (s.status != KT_WAL_SCAN_CLEAN) {
      cut_seg = i;
      cut_off = s.bad_off;
      if (s.hdr.segment_bytes)
        seg_bytes = s.hdr.segment_bytes;
      rep->bytes_dropped += s.dirty_end > s.bad_off ? s.dirty_end - s.bad_off : 0;
      rep->records_dropped += s.records_after;
      snprintf(rep->why, sizeof rep->why, "%s", s.why);
    }
    last_crc = s.last_crc;
  }
  if (rc || cut_seg == l.n) {
    listing_free(&l);
    return rc;
  }
  rep->cut = true;
  seg_path(rep->file, dir, l.v[cut_seg].seq, l.v[cut_seg].first_index);
  rep->offset = cut_off;
  /* Count what the later segments hold, then remove them newest first so a
   * crash midway leaves a consecutive run of segments. */
  for (size_t i = cut_seg + (count_cut ? 0 : 1); i < l.n; i++) {
    char path[PATH_BYTES];
    seg_path(path, dir, l.v[i].seq, l.v[i].first_index);
    int fd = ops->open(ops->ctx, path, O_RDONLY, 0);
    if (fd < 0)
      continue;
    struct seg_buf buf;
    if (!read_all(ops, fd, path, &buf, err)) {
      struct kt_wal_scan s;
      kt_wal_scan_segment(buf.p, buf.len, &s, NULL, NULL);
      rep->bytes_dropped += s.dirty_end;
      rep->records_dropped += s.records + s.records_after;
      seg_buf_free(ops, &buf);
    }
    ops->close(ops->ctx, fd);
  }
  for (size_t i = l.n; i-- > cut_seg + (remove_cut ? 0 : 1);) {
    char path[PATH_BYTES];
    seg_path(path, dir, l.v[i].seq, l.v[i].first_index);
    int r = ops->unlink(ops->ctx, path);
    if (r) {
      rc = io_err(err, r, "unlink", path);
      break;
    }
    rep->segments_removed++;
  }
  if (!rc && !remove_cut) {
    int fd = ops->open(ops->ctx, rep->file, O_RDWR, 0);
    int r = fd < 0 ? fd : ops->ftruncate(ops->ctx, fd, cut_off);
    if (!r)
      r = ops->fallocate(ops->ctx, fd, 0, KT_MAX(seg_bytes, cut_off));
    if (!r)
      r = ops->fdatasync(ops->ctx, fd);
    if (fd >= 0)
      ops->close(ops->ctx, fd);
    if (r)
      rc = io_err(err, r, "cut", rep->file);
  }
  if (!rc) {
    int r = ops->fsync_dir(ops->ctx, dir);
    if (r)
      rc = io_err(err, r, "fsync directory", dir);
  }
  listing_free(&l);
  return rc;
}
