/* tools/grpc-bridge/bridge_snap.c — Maintenance.Snapshot as etcd 3.4 serves
 * it: the member's state as an etcd database (bbolt) followed by its SHA-256,
 * so `etcdctl snapshot save` through the bridge keeps a file that `etcdctl
 * snapshot status|restore` (and ketchutl) take.
 *
 * Data flow: the request -> a job thread (the loop never waits on the disk
 * or on the transfer): its own libketch handle on the endpoint the bridge's
 * handle is connected to (then the others) -> ketch_snapshot_save into
 * TMPDIR (a ketch snapshot file, BLAKE2b checked) -> tools/etcddb's export
 * into an unlinked TMPDIR file, written strictly in order; its progress
 * (the final size first, then the bytes written) wakes the loop (ev_async,
 * every MiB) -> on the loop, while the file grows: 32 KiB SnapshotResponses
 * (etcd's snapshotSendBufferSize; remaining_bytes counts the database, as
 * etcd's) as fast as the stream has room (io->room; io->want_room asks to
 * be called again), then one response with the SHA-256 of all of it, then
 * OK. A slow client only slows the transfer: the bridge holds at most one
 * queue's worth of it in memory.
 *
 * Lifetimes: the loop owns a job; the thread writes only the database file,
 * the atomic progress fields and, before `finished`, err and msg. A stream
 * that goes away meanwhile leaves the job to end and be freed on the loop. Disk: about the ketch
 * snapshot plus the database, in TMPDIR, for the time of one transfer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>
#include <openssl/evp.h>

#include "../etcddb/etcddb.h"
#include "../grpc/grpc_client.h"
#include "bridge.h"
#include "rpc.pb-c.h"

#define CHUNK (32u * 1024u) /* etcd's snapshotSendBufferSize */
#define SHA_BYTES 32

static KT_LOOP_LOCAL struct ev_loop *snap_loop; /* this loop's; a job keeps its own */
/* set once before the loops start, read-only after */
static ketch_options snap_base; /* TLS toward the members (the strings are argv's) */
static char snap_endpoints[4096], snap_tmp[1024];

void kt_bridge_snap_loop(struct ev_loop *loop) { snap_loop = loop; }

void kt_bridge_snap_setup(const char *endpoints, const ketch_options *base) {
  snap_base = *base;
  snprintf(snap_endpoints, sizeof snap_endpoints, "%s", endpoints);
  const char *t = getenv("TMPDIR");
  snprintf(snap_tmp, sizeof snap_tmp, "%s", t && *t ? t : "/tmp");
}

struct kt_bridge_snap {
  struct ev_loop *loop; /* the stream's loop: where the job reports (fixed) */
  /* the loop's */
  const struct kt_bridge_stream_io *io; /* NULL once the stream is gone */
  void *arg;
  ev_async done;
  pthread_t th;
  bool joined;
  uint64_t sent;
  EVP_MD_CTX *sha;
  uint8_t buf[CHUNK];
  /* the thread's: endpoints set before it starts; the rest written by it */
  char endpoints[4200];
  char token[1024]; /* the caller's session token ("" when none): the job's handle presents it */
  int fd;           /* the database, unlinked; written by the thread, read by the loop */
  _Atomic uint64_t total;  /* the database's size, once planned (0 before) */
  _Atomic uint64_t length; /* bytes of it written so far */
  _Atomic bool finished;   /* err and msg are final (release/acquire) */
  uint64_t signalled;      /* the thread's: length at its last ev_async_send */
  int err;                 /* KETCH_E* */
  char msg[1400];
};

/* The export's progress: the loop may send what is written (a wake-up per
 * MiB, ev_async_send coalesces). */
static void on_progress(void *arg, uint64_t done, uint64_t total) {
  struct kt_bridge_snap *sn = arg;
  atomic_store(&sn->total, total);
  atomic_store(&sn->length, done);
  if (done == 0 || done - sn->signalled >= (1u << 20)) {
    sn->signalled = done;
    ev_async_send(sn->loop, &sn->done);
  }
}

static void *job(void *arg) {
  struct kt_bridge_snap *sn = arg;
  char path[1100];
  snprintf(path, sizeof path, "%s/ketch-grpc-snap-XXXXXX", snap_tmp);
  int tfd = mkstemp(path);
  ketch_client *kc = NULL;
  ketch_result *res = NULL;
  if (tfd < 0) {
    sn->err = KETCH_EIO;
    snprintf(sn->msg, sizeof sn->msg, "ketch-grpc: %s: %s", path, strerror(errno));
    goto out;
  }
  close(tfd);
  ketch_options o;
  ketch_options_init(&o);
  o.tls = snap_base.tls; /* toward the members as the bridge's own handles */
  o.ca_file = snap_base.ca_file;
  o.cert_file = snap_base.cert_file;
  o.key_file = snap_base.key_file;
  o.server_name = snap_base.server_name;
  o.insecure_skip_verify = snap_base.insecure_skip_verify;
  o.token = sn->token[0] ? sn->token : NULL; /* Snapshot is root's: as the caller */
  char why[256] = "";
  if ((sn->err = ketch_open(&kc, sn->endpoints, &o, why, sizeof why))) {
    snprintf(sn->msg, sizeof sn->msg, "%s", why);
    goto out;
  }
  if ((sn->err = ketch_snapshot_save(kc, path, &res))) {
    snprintf(sn->msg, sizeof sn->msg, "%s", res ? res->message : ketch_errmsg(kc));
    goto out;
  }
  /* unlinked at once (a bridge that dies leaves nothing), read through /proc */
  int sfd = open(path, O_RDONLY | O_CLOEXEC);
  unlink(path);
  char src[64];
  snprintf(src, sizeof src, "/proc/self/fd/%d", sfd);
  struct kt_err e = {0};
  if (sfd < 0 ||
      kt_etcddb_export(src, sn->fd, "snapshot", snap_tmp, false, on_progress, sn, NULL, &e)) {
    sn->err = sfd < 0 ? KETCH_EIO : e.code;
    snprintf(sn->msg, sizeof sn->msg, "ketch-grpc: %s", sfd < 0 ? strerror(errno) : e.msg);
  }
  if (sfd >= 0)
    close(sfd);
out:
  ketch_result_free(res);
  if (kc)
    ketch_close(kc);
  if (tfd >= 0) {
    unlink(path);
    char part[1200];
    snprintf(part, sizeof part, "%s.part", path);
    unlink(part); /* left by a transfer that failed */
  }
  atomic_store(&sn->finished, true);
  ev_async_send(sn->loop, &sn->done);
  return NULL;
}

static void snap_free(struct kt_bridge_snap *sn) {
  ev_async_stop(sn->loop, &sn->done);
  EVP_MD_CTX_free(sn->sha);
  if (sn->fd >= 0)
    close(sn->fd);
  free(sn);
}

/* Ends the call (the stream is still there). */
static void snap_end(struct kt_bridge_snap *sn, int status, const char *msg) {
  const struct kt_bridge_stream_io *io = sn->io;
  sn->io = NULL;
  io->finish(sn->arg, status, msg);
  io->pending(sn->arg, -1);
}

static void send_resp(struct kt_bridge_snap *sn, const uint8_t *p, size_t n, uint64_t remaining) {
  Etcdserverpb__SnapshotResponse r;
  etcdserverpb__snapshot_response__init(&r);
  r.remaining_bytes = remaining;
  r.blob.data = (uint8_t *)p;
  r.blob.len = n;
  size_t flen;
  uint8_t *f = kt_bridge_frame(&r, &flen);
  if (f)
    sn->io->send(sn->arg, f, flen);
}

/* As much of the database as is written and the stream has room for; after
 * the whole of it, the SHA-256; a failed job ends the call with its error. */
static void pump(struct kt_bridge_snap *sn) {
  bool finished = atomic_load(&sn->finished);
  if (finished && !sn->joined) {
    pthread_join(sn->th, NULL);
    sn->joined = true;
  }
  if (finished && sn->err) {
    int st;
    const char *m = kt_bridge_error(sn->err, sn->msg, &st);
    snap_end(sn, st, m);
    return;
  }
  uint64_t total = atomic_load(&sn->total), length = atomic_load(&sn->length);
  while (total && sn->io->room(sn->arg, CHUNK + 64)) {
    if (sn->sent == total) {
      if (!finished)
        return; /* written in full; the job is about to end */
      uint8_t sum[SHA_BYTES];
      EVP_DigestFinal_ex(sn->sha, sum, NULL);
      send_resp(sn, sum, sizeof sum, 0);
      snap_end(sn, KT_GRPC_OK, "");
      return;
    }
    uint64_t avail = length - sn->sent;
    if (avail < CHUNK && length < total)
      return; /* wait for a whole piece */
    size_t want = avail < CHUNK ? (size_t)avail : CHUNK;
    ssize_t r = pread(sn->fd, sn->buf, want, (off_t)sn->sent);
    if (r <= 0) {
      char m[200];
      snprintf(m, sizeof m, "ketch-grpc: reading the snapshot back: %s",
               r < 0 ? strerror(errno) : "short file");
      snap_end(sn, KT_GRPC_INTERNAL, m);
      return;
    }
    EVP_DigestUpdate(sn->sha, sn->buf, (size_t)r);
    sn->sent += (uint64_t)r;
    send_resp(sn, sn->buf, (size_t)r, total - sn->sent);
  }
  if (total)
    sn->io->want_room(sn->arg);
}

static void on_done(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_bridge_snap *sn = w->data;
  if (!sn->io) { /* the stream went away meanwhile: free once the job ended */
    if (atomic_load(&sn->finished)) {
      pthread_join(sn->th, NULL);
      snap_free(sn);
    }
    return;
  }
  pump(sn);
}

kt_bridge_snap *kt_bridge_snap_start(ketch_client *kc, const struct kt_bridge_stream_io *io,
                                     void *arg, int *grpc_status, const char **msg) {
  if (!snap_loop) {
    *grpc_status = KT_GRPC_UNAVAILABLE;
    *msg = "ketch-grpc: snapshots are not set up";
    return NULL;
  }
  struct kt_bridge_snap *sn = calloc(1, sizeof *sn);
  char out[1100];
  snprintf(out, sizeof out, "%s/ketch-grpc-etcd-XXXXXX", snap_tmp);
  if (sn)
    sn->fd = mkstemp(out);
  if (sn && sn->fd >= 0)
    unlink(out);
  if (sn && sn->fd >= 0)
    sn->sha = EVP_MD_CTX_new();
  if (!sn || sn->fd < 0 || !sn->sha || !EVP_DigestInit_ex(sn->sha, EVP_sha256(), NULL)) {
    if (sn && sn->fd >= 0)
      close(sn->fd);
    if (sn)
      EVP_MD_CTX_free(sn->sha);
    free(sn);
    *grpc_status = KT_GRPC_RESOURCE_EXHAUSTED;
    *msg = "ketch-grpc: cannot make a snapshot file in TMPDIR";
    return NULL;
  }
  sn->loop = snap_loop;
  sn->io = io;
  sn->arg = arg;
  /* the member the bridge's handle talks to first, then the others */
  const char *cur = kc ? ketch_endpoint(kc) : NULL;
  snprintf(sn->endpoints, sizeof sn->endpoints, "%s%s%s", cur ? cur : "", cur ? "," : "",
           snap_endpoints);
  const char *tok = kc ? ketch_token(kc) : NULL;
  if (tok && strlen(tok) < sizeof sn->token)
    snprintf(sn->token, sizeof sn->token, "%s", tok);
  ev_async_init(&sn->done, on_done);
  sn->done.data = sn;
  ev_async_start(sn->loop, &sn->done);
  if (pthread_create(&sn->th, NULL, job, sn)) {
    ev_async_stop(sn->loop, &sn->done);
    close(sn->fd);
    EVP_MD_CTX_free(sn->sha);
    free(sn);
    *grpc_status = KT_GRPC_RESOURCE_EXHAUSTED;
    *msg = "ketch-grpc: cannot start a snapshot thread";
    return NULL;
  }
  io->pending(arg, +1);
  return sn;
}

void kt_bridge_snap_room(kt_bridge_snap *sn) {
  if (sn && sn->io)
    pump(sn);
}

void kt_bridge_snap_close(kt_bridge_snap *sn) {
  if (!sn)
    return;
  sn->io = NULL; /* the server side forgets the stream's pending calls itself */
  if (sn->joined) {
    snap_free(sn);
  } else if (atomic_load(&sn->finished)) {
    pthread_join(sn->th, NULL);
    snap_free(sn);
  } /* else on_done frees it once the job ends */
}
