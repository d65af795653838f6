/* core/node_install.c — snapshots sent to a follower whose next log entry the
 * leader no longer holds, and installed there.
 *
 * Leader: raft emits KT_RAFT_EV_NEED_SNAPSHOT(peer) → the newest complete
 *   snapshot file (raft's in-memory log always starts at or before it: the
 *   node never compacts raft past its newest snapshot) is streamed to the
 *   peer on the peer transport's snapshot channel, CHUNK bytes per message,
 *   as fast as the channel's queue takes them (on_snapshot_room resumes), so
 *   heartbeats on the raft channel are never delayed. The transfer lasts
 *   until the channel has written the last chunk to the socket (checked at
 *   each tick once all are queued), so raft asking again meanwhile does not
 *   start a second copy behind the first on a slow link. A transfer that cannot
 *   progress for STALL_S, or a peer that went away, is dropped and reported
 *   (kt_raft_report_snapshot_failed): raft asks again later.
 * Follower: chunks from the known leader are written in order to
 *   <snap>/<name>.recv; a chunk out of order restarts the receive. At the
 *   end the file is synced, renamed to its snapshot name and installed: it is
 *   loaded into a new store and lease table (verified while loading: lz4
 *   blocks and the BLAKE2b file hash), the WAL restarts after its index
 *   (kt_wal_reset), the store, lease table and watch hub switch over, and raft
 *   learns it (kt_raft_install_snapshot) and acks the leader.
 *
 * Chunk message (node-level, snapshot channel):
 *   6 | term u64 | index u64 | offset u64 | total u64 | bytes
 *
 * Progress: a transfer that lasts over PROGRESS_S logs one line per
 * PROGRESS_S on each side, as the tools' progress line (done, of total,
 * share, rate, time left): "snapshot send to <id>: 12.0 MiB of 48.0 MiB
 * (25%), 30.1 MiB/s, 1 s left" and "snapshot receive from <id>: ...". The
 * end lines say how long it took. Nothing is formatted between lines.
 *
 * Blocking on the loop (rare, bounded): reading a chunk (pread of 1 MiB),
 * writing it, and the install itself (loading the snapshot: ~0.7 s per 1M
 * keys; the WAL reset's fsync). A follower that needs a snapshot is not
 * serving current data anyway.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_int.h"

#define TAG_CHUNK 6
#define CHUNK_HDR 33
#define CHUNK (1u << 20)
#define STALL_S 30.0
#define RETRY_S 1.0
#define PROGRESS_S 1.0

struct send_state {
  uint64_t peer;
  int fd;
  uint64_t term, index, off, total;
  ev_tstamp last_progress;
  ev_tstamp started, logged; /* the transfer's start; its last progress line */
  uint64_t written;          /* bytes the channel wrote to the socket */
  bool queued;               /* every chunk is queued: waiting for them to be written */
};

struct node_install_state {
  uint64_t need[KT_NODE_MAX_MEMBERS]; /* peers raft asked a snapshot for */
  size_t n_need;
  struct send_state sends[KT_NODE_MAX_MEMBERS];
  size_t n_sends;
  struct {
    uint64_t peer;
    ev_tstamp at, wait_s; /* no new send to peer before at + wait_s */
  } tried[KT_NODE_MAX_MEMBERS];
  size_t n_tried;
  /* receiving */
  int rfd;
  uint64_t rterm, rindex, roff, rtotal, rfrom;
  ev_tstamp rstarted, rlogged;
  char rpath[4400];
  struct kt_buf buf;
};

void kt_node_install_init(struct kt_node *n) {
  n->inst = calloc(1, sizeof *n->inst);
  kt_assert(n->inst);
  n->inst->rfd = -1;
  /* receives a crash interrupted */
  DIR *d = opendir(n->snap_dir);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);
    if (l > 5 && strcmp(de->d_name + l - 5, ".recv") == 0) {
      unlinkat(dirfd(d), de->d_name, 0);
    }
  }
  if (d)
    closedir(d);
}

static void fmt_bytes(uint64_t b, char *out, size_t n) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, u++;
  snprintf(out, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

/* One progress line of a transfer at `done` of `total` bytes, `secs` after
 * it started; at most one per PROGRESS_S (*logged: when the last was). */
static void log_progress(const char *what, uint64_t peer, uint64_t done, uint64_t total,
                         ev_tstamp now, ev_tstamp started, ev_tstamp *logged) {
  if (now - *logged < PROGRESS_S || done >= total)
    return;
  *logged = now;
  double secs = now - started, rate = secs > 0 ? (double)done / secs : 0;
  char d[32], t[32], r[32];
  fmt_bytes(done, d, sizeof d);
  fmt_bytes(total, t, sizeof t);
  fmt_bytes((uint64_t)rate, r, sizeof r);
  kt_log(KT_LOG_INFO, "snap", "%s %016llx: %s of %s (%.0f%%), %s/s, %.0f s left", what,
         (unsigned long long)peer, d, t, 100.0 * (double)done / (double)total, r,
         rate > 0 ? (double)(total - done) / rate : 0.);
}

static void recv_abort(struct kt_node *n, const char *why) {
  struct node_install_state *s = n->inst;
  if (s->rfd < 0)
    return;
  kt_log(KT_LOG_WARN, "snap", "snapshot receive from %016llx abandoned: %s",
         (unsigned long long)s->rfrom, why);
  close(s->rfd);
  unlink(s->rpath);
  s->rfd = -1;
}

static void send_end(struct kt_node *n, size_t i, bool failed, const char *why) {
  struct node_install_state *s = n->inst;
  struct send_state *x = &s->sends[i];
  if (failed) {
    kt_log(KT_LOG_WARN, "snap", "snapshot send to %016llx failed at %llu/%llu bytes: %s",
           (unsigned long long)x->peer, (unsigned long long)x->off, (unsigned long long)x->total,
           why);
    kt_raft_report_snapshot_failed(n->raft, x->peer);
  } else {
    /* Written to the socket is not yet received: the socket buffers and the
     * network still hold up to a few MiB, drained at about the pace of the
     * transfer. Raft asks again every few heartbeats until the follower
     * acks; a new copy waits as long as this one took (at most STALL_S). */
    ev_tstamp now = ev_now(n->loop), took = now - x->started;
    for (size_t t = 0; t < s->n_tried; t++)
      if (s->tried[t].peer == x->peer) {
        s->tried[t].at = now;
        s->tried[t].wait_s = took < RETRY_S ? RETRY_S : took > STALL_S ? STALL_S : took;
      }
    kt_log(KT_LOG_INFO, "snap", "snapshot index=%llu sent to %016llx (%llu bytes) in %.1f s",
           (unsigned long long)x->index, (unsigned long long)x->peer, (unsigned long long)x->total,
           ev_now(n->loop) - x->started);
  }
  close(x->fd);
  s->sends[i] = s->sends[--s->n_sends];
}

void kt_node_install_free(struct kt_node *n) {
  struct node_install_state *s = n->inst;
  if (!s)
    return;
  while (s->n_sends) {
    close(s->sends[s->n_sends - 1].fd);
    s->n_sends--;
  }
  recv_abort(n, "member stopping");
  kt_buf_free(&s->buf);
  free(s);
  n->inst = NULL;
}

/* How far the channel got writing send i (the progress and the stall
 * clock follow it); ends the transfer once all is written, or failed if the
 * channel went down. Returns whether it ended (i is then gone). */
static bool written_check(struct kt_node *n, size_t i) {
  struct node_install_state *s = n->inst;
  struct send_state *x = &s->sends[i];
  long long unsent = kt_peer_link_snapshot_unsent(n->peers, x->peer);
  if (unsent < 0) {
    send_end(n, i, true, "snapshot connection lost");
    return true;
  }
  uint64_t written = x->off - ((uint64_t)unsent < x->off ? (uint64_t)unsent : x->off);
  ev_tstamp now = ev_now(n->loop);
  if (written > x->written) {
    x->written = written;
    x->last_progress = now;
  }
  if (x->queued && unsent == 0) {
    send_end(n, i, false, NULL);
    return true;
  }
  log_progress("snapshot send to", x->peer, x->written, x->total, now, x->started, &x->logged);
  return false;
}

/* Queue chunks while the channel takes them. */
static void pump(struct kt_node *n, size_t i) {
  struct node_install_state *s = n->inst;
  struct send_state *x = &s->sends[i];
  while (x->off < x->total) {
    size_t len = x->total - x->off < CHUNK ? (size_t)(x->total - x->off) : CHUNK;
    kt_buf_reset(&s->buf);
    kt_buf_reserve(&s->buf, CHUNK_HDR + len);
    uint8_t *p = s->buf.p;
    p[0] = TAG_CHUNK;
    kt_put_u64be(p + 1, x->term);
    kt_put_u64be(p + 9, x->index);
    kt_put_u64be(p + 17, x->off);
    kt_put_u64be(p + 25, x->total);
    ssize_t r = pread(x->fd, p + CHUNK_HDR, len, (off_t)x->off);
    if (r != (ssize_t)len) {
      send_end(n, i, true, r < 0 ? strerror(errno) : "short read");
      return;
    }
    int rc = kt_peer_link_send_snapshot(n->peers, x->peer, p, CHUNK_HDR + len);
    if (rc == KT_EBUSY || rc == KT_EUNAVAILABLE)
      return; /* on_snapshot_room calls again */
    if (rc) {
      send_end(n, i, true, kt_strerror(rc));
      return;
    }
    x->off += len;
  }
  x->queued = true;
  (void)written_check(n, i);
}

/* From raft_event (inside a ready batch): only noted; started at the tick. */
void kt_node_install_need(struct kt_node *n, uint64_t peer) {
  struct node_install_state *s = n->inst;
  for (size_t i = 0; i < s->n_need; i++)
    if (s->need[i] == peer)
      return;
  if (s->n_need < KT_NODE_MAX_MEMBERS)
    s->need[s->n_need++] = peer;
}

static void start_send(struct kt_node *n, uint64_t peer) {
  struct node_install_state *s = n->inst;
  if (!n->peers)
    return;
  for (size_t i = 0; i < s->n_sends; i++)
    if (s->sends[i].peer == peer)
      return; /* already on its way */
  size_t t = 0;
  while (t < s->n_tried && s->tried[t].peer != peer)
    t++;
  if (t < s->n_tried && ev_now(n->loop) - s->tried[t].at < s->tried[t].wait_s)
    return;
  if (t == s->n_tried) {
    if (s->n_tried == KT_NODE_MAX_MEMBERS)
      return;
    s->n_tried++;
  }
  s->tried[t].peer = peer;
  s->tried[t].at = ev_now(n->loop);
  s->tried[t].wait_s = RETRY_S;
  struct kt_snap_entry *list = NULL;
  size_t cnt = 0;
  struct kt_err e = {0};
  if (kt_snap_list(n->snap_dir, &list, &cnt, &e) || cnt == 0 ||
      list[0].index + 1 < kt_raft_first_index(n->raft)) {
    /* none, or the log was compacted past the newest one (a lone member
     * compacts freely): take one now; raft asks again later */
    kt_log(KT_LOG_INFO, "snap", "peer %016llx needs a snapshot: taking one",
           (unsigned long long)peer);
    free(list);
    n->snap_force = true;
    kt_raft_report_snapshot_failed(n->raft, peer);
    return;
  }
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", n->snap_dir, list[0].name);
  struct send_state x = {.peer = peer, .term = list[0].term, .index = list[0].index};
  free(list);
  x.fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (x.fd < 0 || fstat(x.fd, &st) != 0) {
    kt_log(KT_LOG_ERROR, "snap", "cannot read %s to send: %s", path, strerror(errno));
    if (x.fd >= 0)
      close(x.fd);
    kt_raft_report_snapshot_failed(n->raft, peer);
    return;
  }
  x.total = (uint64_t)st.st_size;
  x.last_progress = x.started = x.logged = ev_now(n->loop);
  kt_log(KT_LOG_INFO, "snap", "sending snapshot index=%llu term=%llu (%llu bytes) to %016llx",
         (unsigned long long)x.index, (unsigned long long)x.term, (unsigned long long)x.total,
         (unsigned long long)peer);
  s->sends[s->n_sends++] = x;
  pump(n, s->n_sends - 1);
}

void kt_node_install_room(struct kt_node *n, uint64_t peer) {
  struct node_install_state *s = n->inst;
  for (size_t i = 0; i < s->n_sends; i++)
    if (s->sends[i].peer == peer) {
      pump(n, i);
      return;
    }
}

void kt_node_install_tick(struct kt_node *n) {
  struct node_install_state *s = n->inst;
  while (s->n_need)
    start_send(n, s->need[--s->n_need]);
  for (size_t i = 0; i < s->n_sends;) {
    if (kt_raft_role(n->raft) != KT_RAFT_LEADER)
      send_end(n, i, true, "no longer leader");
    else if (written_check(n, i))
      continue; /* ended: another send is at i now */
    else if (ev_now(n->loop) - s->sends[i].last_progress > STALL_S)
      send_end(n, i, true, "no progress");
    else
      i++;
  }
}

/* ---- follower ---- */

/* kt_raft_install_snapshot of a stale snapshot (it only tells the leader our
 * commit): raft's configuration stays. */
static int raft_install(struct kt_node *n, uint64_t index, uint64_t term) {
  struct kt_raft_member_state ms[KT_RAFT_MAX_MEMBERS];
  uint64_t voters[KT_RAFT_MAX_MEMBERS], learners[KT_RAFT_MAX_MEMBERS];
  size_t nv = 0, nl = 0, n_ms = kt_raft_members(n->raft, ms, KT_RAFT_MAX_MEMBERS);
  for (size_t i = 0; i < n_ms; i++) {
    if (ms[i].learner)
      learners[nl++] = ms[i].id;
    else
      voters[nv++] = ms[i].id;
  }
  return kt_raft_install_snapshot(n->raft, index, term, voters, nv, learners, nl);
}

static void install(struct kt_node *n, const char *path, uint64_t index, uint64_t term) {
  struct kt_snap_meta meta = {0};
  struct kt_err e = {0};
  struct kt_mvcc *store;
  struct kt_lease_mgr *leases;
  if (index <= kt_raft_commit(n->raft) || term > kt_raft_term(n->raft))
    return; /* raft would refuse it: change nothing (stale is checked by the caller) */
  struct kt_node_members *tab = malloc(sizeof *tab);
  kt_assert(tab);
  struct kt_node_alarms al;
  struct kt_auth *auth = NULL;
  if (kt_node_load_snapshot_file(n, path, &meta, &store, &leases, tab, &al, &auth, &e)) {
    kt_log(KT_LOG_ERROR, "snap", "received snapshot refused: %s", e.msg);
    kt_snap_meta_free(&meta);
    unlink(path);
    free(tab);
    return;
  }
  if (meta.index != index || meta.term != term || !tab->n) {
    kt_log(KT_LOG_ERROR, "snap",
           "received snapshot says index %llu term %llu (expected %llu/%llu), %zu members",
           (unsigned long long)meta.index, (unsigned long long)meta.term, (unsigned long long)index,
           (unsigned long long)term, tab->n);
    kt_mvcc_free(store);
    kt_lease_free(leases);
    kt_auth_free(auth);
    kt_snap_meta_free(&meta);
    unlink(path);
    free(tab);
    return;
  }
  kt_snap_meta_free(&meta);
  /* The log restarts after the snapshot; the old one is of no use, but the
   * hard state (term, vote) must stay durable: it opens the new segment. */
  struct kt_raft_hard_state hs = {kt_raft_term(n->raft), kt_raft_vote(n->raft), index};
  uint8_t hb[24];
  kt_put_u64be(hb, hs.term);
  kt_put_u64be(hb + 8, hs.vote);
  kt_put_u64be(hb + 16, hs.commit);
  struct kt_wal_rec hrec = {.type = REC_HARDSTATE, .index = index, .payload = hb, .len = 24};
  if (kt_wal_reset(n->wal, index + 1, &hrec, &e)) {
    kt_log(KT_LOG_FATAL, "wal", "reset after snapshot install failed: %s", e.msg);
    kt_mvcc_free(store);
    kt_lease_free(leases);
    kt_auth_free(auth);
    free(tab);
    n->fatal = e.code ? e.code : KT_EIO;
    ev_break(n->loop, EVBREAK_ALL);
    return;
  }
  if (n->snap_w) { /* a snapshot of the old store in progress: moot */
    kt_snap_writer_free(n->snap_w);
    n->snap_w = NULL;
  }
  for (size_t i = 0; i < n->n_waiters; i++) { /* physical compaction of the old store */
    kt_conn_send_error(n->waiters[i].conn, n->waiters[i].req_id, KT_EUNKNOWN,
                       "store replaced by a snapshot install");
    kt_conn_unref(n->waiters[i].conn);
  }
  n->n_waiters = 0;
  kt_watch_hub_set_store(n->watches, store);
  kt_mvcc_free(n->store);
  n->store = store;
  kt_node_maint_alarms_adopt(n, &al);
  kt_auth_free(n->auth);
  n->auth = auth;
  auth = NULL;
  kt_node_watch_auth_changed(n);
  kt_lease_free(n->leases);
  n->leases = leases;
  n->pers_head = n->n_pers = 0; /* WAL appends raft waited on: superseded */
  n->applied_index = n->wal_last_index = index;
  n->applied_term = term;
  n->last_snap_index = n->durable_snap_index = index;
  n->log_bytes_since_snap = 0;
  n->snap_store_bytes = kt_mvcc_size_bytes(store);
  kt_node_member_adopt(n, tab, index);
  free(tab);
  uint64_t voters[KT_NODE_MAX_MEMBERS], learners[KT_NODE_MAX_MEMBERS];
  size_t nv, nl;
  kt_node_member_conf(n, voters, &nv, learners, &nl);
  int rc = kt_raft_install_snapshot(n->raft, index, term, voters, nv, learners, nl);
  if (kt_node_member_sync_peers(n, &e))
    kt_log(KT_LOG_ERROR, "peer", "peer transport: %s", e.msg);
  n->hs_synced = hs;
  kt_raft_hs_persisted(n->raft, &hs); /* in-flight hard states were superseded */
  /* Our proposals may or may not be in the snapshot; lock waiters re-check
   * (the swap emitted no delete events). */
  kt_node_fail_pending(n, KT_EUNKNOWN, "request outcome unknown: a snapshot was installed");
  kt_node_lock_recheck_all(n);
  kt_log(rc ? KT_LOG_ERROR : KT_LOG_INFO, "snap",
         "installed snapshot index=%llu term=%llu revision=%lld keys=%llu%s",
         (unsigned long long)index, (unsigned long long)term, (long long)kt_mvcc_revision(n->store),
         (unsigned long long)kt_mvcc_keys(n->store), rc ? " (raft refused it)" : "");
}

void kt_node_install_chunk(struct kt_node *n, uint64_t from, const uint8_t *msg, size_t len) {
  struct node_install_state *s = n->inst;
  if (len < CHUNK_HDR || msg[0] != TAG_CHUNK) {
    kt_log(KT_LOG_WARN, "snap", "bad snapshot chunk from %016llx (%zu bytes)",
           (unsigned long long)from, len);
    return;
  }
  uint64_t term = kt_get_u64be(msg + 1), index = kt_get_u64be(msg + 9);
  uint64_t off = kt_get_u64be(msg + 17), total = kt_get_u64be(msg + 25);
  const uint8_t *data = msg + CHUNK_HDR;
  size_t dlen = len - CHUNK_HDR;
  if (from != kt_raft_leader(n->raft) || kt_raft_role(n->raft) == KT_RAFT_LEADER) {
    recv_abort(n, "chunk not from the leader");
    return;
  }
  if (off == 0) {
    recv_abort(n, "a new transfer started");
    char name[64];
    kt_snap_name(term, index, name, sizeof name);
    snprintf(s->rpath, sizeof s->rpath, "%s/%s.recv", n->snap_dir, name);
    s->rfd = open(s->rpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (s->rfd < 0) {
      kt_log(KT_LOG_ERROR, "snap", "cannot create %s: %s", s->rpath, strerror(errno));
      return;
    }
    s->rterm = term, s->rindex = index, s->roff = 0, s->rtotal = total, s->rfrom = from;
    s->rstarted = s->rlogged = ev_now(n->loop);
    kt_log(KT_LOG_INFO, "snap", "receiving snapshot index=%llu term=%llu (%llu bytes) from %016llx",
           (unsigned long long)index, (unsigned long long)term, (unsigned long long)total,
           (unsigned long long)from);
  }
  if (s->rfd < 0)
    return; /* waiting for the start of a transfer */
  if (term != s->rterm || index != s->rindex || total != s->rtotal || off != s->roff ||
      off + dlen > total) {
    recv_abort(n, "chunk out of order");
    return;
  }
  for (size_t done = 0; done < dlen;) {
    ssize_t w = write(s->rfd, data + done, dlen - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      recv_abort(n, w < 0 ? strerror(errno) : "write returned 0");
      return;
    }
    done += (size_t)w;
  }
  s->roff += dlen;
  log_progress("snapshot receive from", from, s->roff, s->rtotal, ev_now(n->loop), s->rstarted,
               &s->rlogged);
  if (s->roff < s->rtotal)
    return;
  kt_log(KT_LOG_INFO, "snap", "received snapshot index=%llu (%llu bytes) from %016llx in %.1f s",
         (unsigned long long)s->rindex, (unsigned long long)s->rtotal, (unsigned long long)from,
         ev_now(n->loop) - s->rstarted);
  if (s->rindex <= kt_raft_commit(n->raft)) {
    /* we got that far meanwhile; never rename over a snapshot of our own */
    kt_log(KT_LOG_INFO, "snap", "received snapshot index=%llu is not ahead of commit %llu",
           (unsigned long long)s->rindex, (unsigned long long)kt_raft_commit(n->raft));
    (void)raft_install(n, s->rindex, s->rterm); /* tells the leader */
    close(s->rfd);
    unlink(s->rpath);
    s->rfd = -1;
    return;
  }
  int rc = fsync(s->rfd);
  close(s->rfd);
  s->rfd = -1;
  char final[4400];
  size_t pl = strlen(s->rpath) - strlen(".recv");
  snprintf(final, sizeof final, "%.*s", (int)pl, s->rpath);
  int dfd = -1;
  if (rc || rename(s->rpath, final) || (dfd = open(n->snap_dir, O_RDONLY | O_DIRECTORY)) < 0 ||
      fsync(dfd)) {
    kt_log(KT_LOG_ERROR, "snap", "cannot keep received snapshot %s: %s", final, strerror(errno));
    if (dfd >= 0)
      close(dfd);
    unlink(s->rpath);
    return;
  }
  close(dfd);
  install(n, final, s->rindex, s->rterm);
}
