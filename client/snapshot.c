/* client/snapshot.c — ketch_snapshot_save: a member's snapshot streamed to
 * a file, checked as it arrives.
 *
 * Owns: nothing across calls. The pieces of ketch_snapshot_async go to
 * PATH.part as they come, hashed on the way (BLAKE2b-256 of everything but
 * the last 32 bytes, which must equal them: snap/FORMAT.md's trailer); a
 * file that checks is synced and renamed to PATH, anything else is removed
 * and the call fails.
 */
#include "client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

/* snap/FORMAT.md, as far as a client checks it: the magic first, and the
 * last 32 bytes are BLAKE2b-256 of everything before them. */
#define SNAP_MAGIC "KETCHSNP"
#define SNAP_MIN_BYTES (82 + 65)
#define SNAP_HASH 32

struct snap_save {
  int fd;
  bool done;
  int err;
  char msg[300];
  uint64_t got;
  crypto_generichash_state st;
  uint8_t tail[SNAP_HASH]; /* the last bytes received, not hashed yet */
  size_t n_tail;
  ketch_header header;
};

static void snap_save_fail(struct snap_save *s, int err, const char *msg) {
  if (!s->err) {
    s->err = err;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
  }
}

/* Hash everything but the newest SNAP_HASH bytes, which stay in tail. */
static void snap_save_feed(struct snap_save *s, const uint8_t *p, size_t n) {
  if (n >= SNAP_HASH) {
    crypto_generichash_update(&s->st, s->tail, s->n_tail);
    crypto_generichash_update(&s->st, p, n - SNAP_HASH);
    memcpy(s->tail, p + n - SNAP_HASH, SNAP_HASH);
    s->n_tail = SNAP_HASH;
    return;
  }
  size_t over = s->n_tail + n > SNAP_HASH ? s->n_tail + n - SNAP_HASH : 0;
  crypto_generichash_update(&s->st, s->tail, over);
  memmove(s->tail, s->tail + over, s->n_tail - over);
  s->n_tail -= over;
  memcpy(s->tail + s->n_tail, p, n);
  s->n_tail += n;
}

static void snap_save_cb(void *arg, int err, const ketch_result *res) {
  struct snap_save *s = arg;
  if (err) {
    snap_save_fail(s, err, res->message);
    s->done = true;
    return;
  }
  const uint8_t *p = res->snapshot.blob;
  size_t n = res->snapshot.blob_len;
  if (s->got == 0 && (n < sizeof SNAP_MAGIC - 1 || memcmp(p, SNAP_MAGIC, sizeof SNAP_MAGIC - 1)))
    snap_save_fail(s, KETCH_ECORRUPT, "the member's answer is not a ketch snapshot (bad magic)");
  s->got += n;
  snap_save_feed(s, p, n);
  size_t off = 0;
  while (!s->err && off < n) {
    ssize_t w = write(s->fd, p + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      char m[200];
      snprintf(m, sizeof m, "write: %s", strerror(errno));
      snap_save_fail(s, KETCH_EIO, m);
      break;
    }
    off += (size_t)w;
  }
  if (res->snapshot.remaining_bytes == 0) {
    s->header = res->header;
    s->done = true;
  }
}

int ketch_snapshot_save(ketch_client *c, const char *path, ketch_result **out) {
  if (out)
    *out = NULL;
  if (c->in_cb)
    return KETCH_EINVAL;
  if (!path || !*path) {
    kt_cl_set_errmsg(c, "%s", "snapshot path is empty");
    return KETCH_EINVAL;
  }
  char part[4200];
  if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part) {
    kt_cl_set_errmsg(c, "%s", "snapshot path too long");
    return KETCH_EINVAL;
  }
  if (sodium_init() < 0) {
    kt_cl_set_errmsg(c, "%s", "libsodium failed to initialize");
    return KETCH_EINTERNAL;
  }
  struct snap_save s;
  memset(&s, 0, sizeof s);
  s.fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (s.fd < 0) {
    kt_cl_set_errmsg(c, "could not open %s: %s", part, strerror(errno));
    return KETCH_EIO;
  }
  crypto_generichash_init(&s.st, NULL, 0, SNAP_HASH);
  int err = ketch_snapshot_async(c, snap_save_cb, &s);
  if (err) {
    close(s.fd);
    unlink(part);
    return err;
  }
  kt_cl_process(c);
  while (!s.done)
    kt_cl_wait_turn(c, -1); /* every frame moves the deadline; the request ends by it */
  if (!s.err) {
    uint8_t h[SNAP_HASH];
    crypto_generichash_final(&s.st, h, sizeof h);
    if (s.got < SNAP_MIN_BYTES || s.n_tail != SNAP_HASH || sodium_memcmp(h, s.tail, SNAP_HASH))
      snap_save_fail(&s, KETCH_ECORRUPT,
                     "snapshot hash mismatch: the received file does not match its trailer hash");
  }
  if (!s.err && fsync(s.fd) != 0) {
    char m[200];
    snprintf(m, sizeof m, "fsync: %s", strerror(errno));
    snap_save_fail(&s, KETCH_EIO, m);
  }
  if (close(s.fd) != 0 && !s.err)
    snap_save_fail(&s, KETCH_EIO, "close failed");
  if (!s.err && rename(part, path) != 0) {
    char m[200];
    snprintf(m, sizeof m, "rename to %s: %s", path, strerror(errno));
    snap_save_fail(&s, KETCH_EIO, m);
  }
  if (s.err) {
    unlink(part);
    kt_cl_set_errmsg(c, "%s", s.msg);
    return s.err;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  c->errmsg[0] = 0;
  if (out) {
    struct owned_result *o = calloc(1, sizeof *o);
    if (!o)
      return KETCH_ENOMEM;
    o->res.type = KETCH_OP_SNAPSHOT;
    o->res.message = "";
    o->res.header = s.header;
    o->res.snapshot.size_bytes = s.got;
    *out = &o->res;
  }
  return 0;
}
