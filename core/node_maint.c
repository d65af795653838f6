/* core/node_maint.c — etcd's Maintenance services on a member: snapshot
 * save (a stream), defragment, hash-kv and alarms.
 *
 * SNAPSHOT: etcd sends the backend as it is at the time of the call; ketch
 *   sends a snapshot file (snap/FORMAT.md) that covers at least the entry
 *   applied when the request arrived. If the newest complete snapshot is
 *   older, a snapshot is started at once (written in slices off the loop, as
 *   every snapshot: kt_node_snapshot_now) and the stream waits for it. The
 *   file is then opened (an fd: a later purge does not cut the transfer) and
 *   sent as SNAPSHOT frames of CHUNK bytes while the connection's unsent
 *   output is under KT_CONN_OUT_SOFT; above it the stream asks for the
 *   drained callback and resumes there. A client that stops reading holds
 *   at most KT_CONN_OUT_SOFT + CHUNK bytes of the member's memory, and the
 *   server cuts its connection after KT_CONN_STALL_MS without progress.
 *   Blocking on the loop: one pread of CHUNK bytes per frame (the file was
 *   just written: page cache), as node_install.c does for followers.
 * DEFRAGMENT: the store is in memory, there is no file to rewrite. What
 *   etcd's defrag gives back (space held by compacted history), ketch gives
 *   back by: waiting until the physical compaction queued by COMPACT has
 *   freed every compacted revision, returning freed heap pages to the OS
 *   (malloc_trim), then writing a snapshot of the current state so that
 *   snapshot retention drops the WAL segments the previous snapshot covers.
 *   Answered once that snapshot is durable. Local to the member, as etcd's.
 * HASH_KV: kt_mvcc_hasher over every retained revision up to the asked
 *   revision, HASH_SLICE_KEYS keys per loop turn (a big store never stalls
 *   the loop; writes meanwhile do not change the result; a compaction
 *   meanwhile restarts it). Local, like etcd's.
 * ALARM: GET answers this member's list. ACTIVATE and DEACTIVATE go through
 *   raft like etcd's, and every member applies them: NOSPACE sets or clears
 *   the store's quota alarm (writes refused while any NOSPACE alarm is
 *   active), CORRUPT makes every member refuse KV and lease requests with
 *   ECORRUPT "corrupt cluster" until deactivated. The store raising NOSPACE
 *   itself (a put over the quota, applied on every member) records an alarm
 *   for the member that proposed that put. Alarms are replicated state
 *   (NOSPACE refuses puts when they are applied): they ride in snapshots
 *   (kt_node_maint_alarms_save / _adopt), so a member restarted from, or
 *   installing, a snapshot newer than the alarm's entry holds them too.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_int.h"

#define CHUNK (256u * 1024u)  /* snapshot bytes per SNAPSHOT frame */
#define MAX_STREAMS 4         /* snapshot streams at once per member */
#define MAX_HASH_JOBS 64      /* HASH_KV requests in progress */
#define HASH_SLICE_KEYS 8192  /* keys hashed per loop turn */
#define MAX_DEFRAG_WAITERS 64 /* DEFRAGMENT requests in progress */

struct snap_stream {
  struct kt_conn *conn; /* one reference held */
  uint64_t req_id;
  uint64_t need_index; /* the file must cover this applied entry */
  int fd;              /* -1 while waiting for a snapshot */
  uint64_t off, total;
};

struct hash_job {
  struct kt_conn *conn;
  uint64_t req_id;
  struct kt_mvcc_hasher hs;
};

struct defrag_wait {
  struct kt_conn *conn;
  uint64_t req_id;
  uint64_t need_index; /* 0: still waiting for physical compaction */
};

struct node_maint_state {
  struct snap_stream streams[MAX_STREAMS];
  size_t n_streams;
  struct hash_job *jobs[MAX_HASH_JOBS];
  size_t n_jobs;
  struct defrag_wait defrags[MAX_DEFRAG_WAITERS];
  size_t n_defrags;
  struct kt_alarm_member alarms[KT_NODE_MAX_ALARMS];
  size_t n_alarms;
  uint8_t *chunk;
};

void kt_node_maint_init(struct kt_node *n) {
  n->mt = calloc(1, sizeof *n->mt);
  kt_assert(n->mt);
}

static void stream_end(struct kt_node *n, size_t i) {
  struct node_maint_state *m = n->mt;
  struct snap_stream *s = &m->streams[i];
  if (s->fd >= 0)
    close(s->fd);
  kt_conn_unref(s->conn);
  m->streams[i] = m->streams[--m->n_streams];
}

static void stream_fail(struct kt_node *n, size_t i, int code, const char *msg) {
  kt_conn_send_error(n->mt->streams[i].conn, n->mt->streams[i].req_id, code, msg);
  stream_end(n, i);
}

static void hash_end(struct kt_node *n, size_t i) {
  struct node_maint_state *m = n->mt;
  kt_mvcc_hash_done(&m->jobs[i]->hs);
  kt_conn_unref(m->jobs[i]->conn);
  free(m->jobs[i]);
  memmove(m->jobs + i, m->jobs + i + 1, (m->n_jobs - i - 1) * sizeof *m->jobs);
  m->n_jobs--;
}

void kt_node_maint_free(struct kt_node *n) {
  struct node_maint_state *m = n->mt;
  if (!m)
    return;
  while (m->n_streams)
    stream_end(n, m->n_streams - 1);
  while (m->n_jobs)
    hash_end(n, m->n_jobs - 1);
  for (size_t i = 0; i < m->n_defrags; i++)
    kt_conn_unref(m->defrags[i].conn);
  free(m->chunk);
  free(m);
  n->mt = NULL;
}

/* ---- snapshot streams ---- */

/* Sends frames while the connection takes them; ends the stream at EOF. */
static void stream_pump(struct kt_node *n, size_t i) {
  struct node_maint_state *m = n->mt;
  struct snap_stream *s = &m->streams[i];
  if (!kt_conn_open(s->conn)) {
    stream_end(n, i);
    return;
  }
  if (!m->chunk) {
    m->chunk = malloc(CHUNK);
    kt_assert(m->chunk);
  }
  while (kt_conn_unsent(s->conn) < KT_CONN_OUT_SOFT) {
    size_t want = (size_t)KT_MIN((uint64_t)CHUNK, s->total - s->off);
    ssize_t r = want ? pread(s->fd, m->chunk, want, (off_t)s->off) : 0;
    if (r < 0 || (size_t)r != want) {
      char msg[200];
      snprintf(msg, sizeof msg, "snapshot read failed at offset %llu: %s",
               (unsigned long long)s->off, r < 0 ? strerror(errno) : "file shorter than expected");
      kt_log(KT_LOG_ERROR, "snap", "%s", msg);
      stream_fail(n, i, KT_EIO, msg);
      return;
    }
    s->off += (uint64_t)r;
    struct kt_resp resp = {.type = KT_MSG_SNAPSHOT, .id = s->req_id};
    resp.u.snapshot.remaining_bytes = s->total - s->off;
    resp.u.snapshot.blob = (struct kt_bytes){m->chunk, (uint32_t)r};
    kt_node_send(n, s->conn, &resp);
    if (s->off == s->total) {
      kt_log(KT_LOG_INFO, "snap", "snapshot sent to a client (%llu bytes)",
             (unsigned long long)s->total);
      stream_end(n, i);
      return;
    }
  }
  kt_conn_want_drain(s->conn); /* resumed by kt_node_maint_drained */
}

/* The newest complete snapshot file covers s->need_index: open it and send.
 * Returns false if there is none yet (the caller starts one). */
static bool stream_open(struct kt_node *n, size_t i) {
  struct snap_stream *s = &n->mt->streams[i];
  if (n->durable_snap_index < s->need_index || n->durable_snap_index == 0)
    return false;
  struct kt_snap_entry *list = NULL;
  size_t cnt = 0;
  struct kt_err e = {0};
  if (kt_snap_list(n->snap_dir, &list, &cnt, &e) || cnt == 0 || list[0].index < s->need_index) {
    free(list);
    return false;
  }
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", n->snap_dir, list[0].name);
  free(list);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    char msg[4400];
    snprintf(msg, sizeof msg, "cannot open snapshot %s: %s", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    stream_fail(n, i, KT_EIO, msg);
    return true;
  }
  s->fd = fd;
  s->off = 0;
  s->total = (uint64_t)st.st_size;
  kt_log(KT_LOG_INFO, "snap", "snapshot save: sending %s (%llu bytes)", path,
         (unsigned long long)s->total);
  stream_pump(n, i);
  return true;
}

static void snapshot_request(struct kt_node *n, struct kt_conn *c, uint64_t req_id) {
  struct node_maint_state *m = n->mt;
  if (m->n_streams == MAX_STREAMS) {
    kt_conn_send_error(c, req_id, KT_EBUSY, "too many snapshot transfers in progress");
    return;
  }
  kt_conn_ref(c);
  size_t i = m->n_streams++;
  m->streams[i] = (struct snap_stream){c, req_id, n->applied_index, -1, 0, 0};
  if (!stream_open(n, i) && !kt_node_snapshot_now(n))
    stream_fail(n, i, KT_EUNAVAILABLE, "member is stopping: no snapshot can be taken");
}

/* ---- defragment ---- */

static void defrag_reply(struct kt_node *n, size_t i, int code, const char *msg) {
  struct node_maint_state *m = n->mt;
  struct defrag_wait *d = &m->defrags[i];
  if (code)
    kt_conn_send_error(d->conn, d->req_id, code, msg);
  else {
    struct kt_resp r = {.type = KT_MSG_DEFRAGMENT, .id = d->req_id};
    kt_node_send(n, d->conn, &r);
  }
  kt_conn_unref(d->conn);
  m->defrags[i] = m->defrags[--m->n_defrags];
}

/* Moves each waiting defragment along: compaction done → trim → snapshot. */
static void defrag_progress(struct kt_node *n) {
  struct node_maint_state *m = n->mt;
  for (size_t i = 0; i < m->n_defrags;) {
    struct defrag_wait *d = &m->defrags[i];
    if (d->need_index == 0) {
      if (kt_mvcc_compact_pending(n->store)) {
        i++;
        continue;
      }
      malloc_trim(0); /* freed history back to the OS */
      d->need_index = n->applied_index ? n->applied_index : 1;
    }
    if (n->durable_snap_index >= d->need_index) {
      kt_log(KT_LOG_INFO, "node", "defragment done (snapshot index=%llu)",
             (unsigned long long)n->durable_snap_index);
      defrag_reply(n, i, 0, NULL);
      continue;
    }
    if (!kt_node_snapshot_now(n)) {
      defrag_reply(n, i, KT_EUNAVAILABLE, "member is stopping");
      continue;
    }
    i++;
  }
}

/* ---- hash ---- */

static void hash_reply(struct kt_node *n, size_t i) {
  struct hash_job *j = n->mt->jobs[i];
  struct kt_resp r = {.type = KT_MSG_HASH_KV, .id = j->req_id};
  r.u.hash_kv.hash = kt_mvcc_hash32(j->hs.h);
  r.u.hash_kv.compact_revision = j->hs.compact_rev;
  r.u.hash_kv.hash_revision = j->hs.rev;
  kt_node_send(n, j->conn, &r);
  hash_end(n, i);
}

/* One slice of the oldest hash job. */
static void hash_slice(struct kt_node *n) {
  struct node_maint_state *m = n->mt;
  if (!m->n_jobs)
    return;
  struct hash_job *j = m->jobs[0];
  if (!kt_conn_open(j->conn)) {
    hash_end(n, 0);
    return;
  }
  int rc = kt_mvcc_hash_step(n->store, &j->hs, HASH_SLICE_KEYS);
  if (rc == 0)
    hash_reply(n, 0);
  else if (rc < 0) {
    kt_conn_send_error(j->conn, j->req_id, -rc, kt_strerror(-rc));
    hash_end(n, 0);
  }
}

static void hash_request(struct kt_node *n, struct kt_conn *c, uint64_t req_id, int64_t rev) {
  struct node_maint_state *m = n->mt;
  if (rev < 0) {
    kt_conn_send_error(c, req_id, KT_EINVAL, "hash_kv: negative revision");
    return;
  }
  if (m->n_jobs == MAX_HASH_JOBS) {
    kt_conn_send_error(c, req_id, KT_EBUSY, "too many hash requests in progress");
    return;
  }
  struct hash_job *j = calloc(1, sizeof *j);
  kt_assert(j);
  struct kt_err e = {0};
  int rc = kt_mvcc_hash_start(n->store, rev, &j->hs, &e);
  if (rc) {
    kt_node_reply_err(c, req_id, rc, &e);
    kt_mvcc_hash_done(&j->hs);
    free(j);
    return;
  }
  kt_conn_ref(c);
  j->conn = c;
  j->req_id = req_id;
  m->jobs[m->n_jobs++] = j;
  if (m->n_jobs == 1)
    hash_slice(n); /* a small store answers at once */
  if (m->n_jobs)
    ev_idle_start(n->loop, &n->idle_w);
}

/* ---- alarms ---- */

static const char *const alarm_names[] = {"NONE", "NOSPACE", "CORRUPT"};

static bool has_alarm(const struct node_maint_state *m, uint8_t type) {
  for (size_t i = 0; i < m->n_alarms; i++)
    if (m->alarms[i].alarm == type)
      return true;
  return false;
}

static ssize_t find_alarm(const struct node_maint_state *m, uint64_t member, uint8_t type) {
  for (size_t i = 0; i < m->n_alarms; i++)
    if (m->alarms[i].member_id == member && m->alarms[i].alarm == type)
      return (ssize_t)i;
  return -1;
}

static void add_alarm(struct node_maint_state *m, uint64_t member, uint8_t type) {
  if (find_alarm(m, member, type) >= 0 || m->n_alarms == KT_NODE_MAX_ALARMS)
    return;
  m->alarms[m->n_alarms++] = (struct kt_alarm_member){member, type};
}

/* The store's quota alarm is the truth for NOSPACE: a store replaced by a
 * snapshot install, or restored at start, carries none; one raised where
 * no entry recorded it (recovery) is listed for this member. */
static void sync_nospace(struct kt_node *n) {
  struct node_maint_state *m = n->mt;
  if (!kt_mvcc_nospace(n->store)) {
    size_t k = 0;
    for (size_t i = 0; i < m->n_alarms; i++)
      if (m->alarms[i].alarm != KT_ALARM_NOSPACE)
        m->alarms[k++] = m->alarms[i];
    m->n_alarms = k;
  } else if (!has_alarm(m, KT_ALARM_NOSPACE)) {
    add_alarm(m, n->member_id, KT_ALARM_NOSPACE);
  }
}

void kt_node_maint_nospace_raised(struct kt_node *n, uint64_t origin) {
  if (!has_alarm(n->mt, KT_ALARM_NOSPACE)) {
    kt_log(KT_LOG_WARN, "mvcc", "alarm raised: NOSPACE (quota %s exceeded by a write of %016llx)",
           "--quota-backend-bytes", (unsigned long long)origin);
    add_alarm(n->mt, origin, KT_ALARM_NOSPACE);
  }
}

#define ALARM_MAGIC "KTALARM1"

void kt_node_maint_alarms_save(struct kt_node *n, struct kt_buf *out) {
  struct node_maint_state *m = n->mt;
  sync_nospace(n);
  uint8_t h[12];
  memcpy(h, ALARM_MAGIC, 8);
  kt_put_u32be(h + 8, (uint32_t)m->n_alarms);
  kt_buf_append(out, h, sizeof h);
  for (size_t i = 0; i < m->n_alarms; i++) {
    uint8_t r[9];
    kt_put_u64be(r, m->alarms[i].member_id);
    r[8] = m->alarms[i].alarm;
    kt_buf_append(out, r, sizeof r);
  }
}

int kt_node_maint_alarms_decode(const uint8_t *p, size_t len, size_t *used,
                                struct kt_node_alarms *out, struct kt_err *e) {
  out->n = 0;
  if (len < 12 || memcmp(p, ALARM_MAGIC, 8) != 0)
    return kt_err_set(e, KT_ECORRUPT, "snapshot alarms: bad header");
  uint32_t cnt = kt_get_u32be(p + 8);
  if (cnt > KT_NODE_MAX_ALARMS || len < 12 + (size_t)cnt * 9)
    return kt_err_set(e, KT_ECORRUPT, "snapshot alarms: %u alarms in %zu bytes", cnt, len);
  *used = 12 + (size_t)cnt * 9;
  for (uint32_t i = 0; i < cnt; i++) {
    const uint8_t *r = p + 12 + (size_t)i * 9;
    if (r[8] != KT_ALARM_NOSPACE && r[8] != KT_ALARM_CORRUPT)
      return kt_err_set(e, KT_ECORRUPT, "snapshot alarms: unknown alarm %u", r[8]);
    out->v[out->n++] = (struct kt_alarm_member){kt_get_u64be(r), r[8]};
  }
  return 0;
}

void kt_node_maint_alarms_adopt(struct kt_node *n, const struct kt_node_alarms *a) {
  struct node_maint_state *m = n->mt;
  m->n_alarms = 0;
  for (size_t i = 0; i < a->n; i++)
    add_alarm(m, a->v[i].member_id, a->v[i].alarm);
  if (has_alarm(m, KT_ALARM_NOSPACE))
    kt_mvcc_raise_nospace(n->store);
  if (m->n_alarms)
    kt_log(KT_LOG_WARN, "node", "%zu alarm(s) active from the snapshot", m->n_alarms);
}

size_t kt_node_maint_alarm_texts(struct kt_node *n, char (*out)[64], size_t cap) {
  sync_nospace(n);
  struct node_maint_state *m = n->mt;
  size_t k = 0;
  for (size_t i = 0; i < m->n_alarms && k < cap; i++)
    snprintf(out[k++], 64, "memberID:%llu alarm:%s", (unsigned long long)m->alarms[i].member_id,
             alarm_names[m->alarms[i].alarm]);
  return k;
}

static void alarm_reply(struct kt_node *n, struct kt_conn *c, uint64_t req_id,
                        struct kt_alarm_member *v, uint32_t cnt) {
  struct kt_resp r = {.type = KT_MSG_ALARM, .id = req_id};
  r.u.alarm = (struct kt_alarm_resp){v, cnt};
  kt_node_send(n, c, &r);
}

void kt_node_maint_apply_alarm(struct kt_node *n, const struct kt_req *req, struct kt_conn *c,
                               uint64_t req_id) {
  struct node_maint_state *m = n->mt;
  const struct kt_alarm_req *a = &req->u.alarm;
  struct kt_alarm_member changed = {a->member_id, a->alarm};
  uint32_t cnt = 0;
  sync_nospace(n);
  if (a->alarm != KT_ALARM_NONE && a->action == KT_ALARM_ACTIVATE) {
    add_alarm(m, a->member_id, a->alarm);
    cnt = find_alarm(m, a->member_id, a->alarm) >= 0;
    if (a->alarm == KT_ALARM_NOSPACE && !kt_mvcc_nospace(n->store))
      kt_mvcc_raise_nospace(n->store);
    kt_log(KT_LOG_WARN, "node", "alarm activated: %s for member %016llx", alarm_names[a->alarm],
           (unsigned long long)a->member_id);
  } else if (a->alarm != KT_ALARM_NONE && a->action == KT_ALARM_DEACTIVATE) {
    ssize_t i = find_alarm(m, a->member_id, a->alarm);
    if (i >= 0) {
      m->alarms[i] = m->alarms[--m->n_alarms];
      cnt = 1;
      kt_log(KT_LOG_INFO, "node", "alarm deactivated: %s for member %016llx", alarm_names[a->alarm],
             (unsigned long long)a->member_id);
    }
    if (a->alarm == KT_ALARM_NOSPACE && !has_alarm(m, KT_ALARM_NOSPACE))
      kt_mvcc_disarm_nospace(n->store);
  }
  if (c)
    alarm_reply(n, c, req_id, cnt ? &changed : NULL, cnt);
}

/* ---- requests ---- */

bool kt_node_maint_request(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len) {
  struct node_maint_state *m = n->mt;
  switch (req->type) {
  case KT_MSG_SNAPSHOT:
    snapshot_request(n, c, req->id);
    return true;
  case KT_MSG_HASH_KV:
    hash_request(n, c, req->id, req->u.hash_kv.revision);
    return true;
  case KT_MSG_DEFRAGMENT:
    if (m->n_defrags == MAX_DEFRAG_WAITERS) {
      kt_conn_send_error(c, req->id, KT_EBUSY, "too many defragment requests in progress");
      return true;
    }
    kt_conn_ref(c);
    m->defrags[m->n_defrags++] = (struct defrag_wait){c, req->id, 0};
    kt_log(KT_LOG_INFO, "node", "defragment requested");
    defrag_progress(n);
    ev_idle_start(n->loop, &n->idle_w);
    return true;
  case KT_MSG_ALARM:
    if (req->u.alarm.action == KT_ALARM_GET) {
      sync_nospace(n);
      alarm_reply(n, c, req->id, m->n_alarms ? m->alarms : NULL, (uint32_t)m->n_alarms);
      return true;
    }
    if (!n->serving)
      return false; /* proposals wait for a leader like any write */
    kt_node_propose(n, c, req->id, body, body_len);
    return true;
  default:
    break;
  }
  /* A CORRUPT alarm stops the KV and lease services (etcd's corrupt
   * applier); maintenance, status and member calls still answer. */
  if (m->n_alarms && has_alarm(m, KT_ALARM_CORRUPT) &&
      ((req->type >= KT_MSG_RANGE && req->type <= KT_MSG_COMPACT) ||
       (req->type >= KT_MSG_LEASE_GRANT && req->type <= KT_MSG_LEASE_LEASES))) {
    kt_conn_send_error(c, req->id, KT_ECORRUPT, "corrupt cluster");
    return true;
  }
  return false;
}

/* ---- hooks ---- */

void kt_node_maint_snap_done(struct kt_node *n, bool ok) {
  struct node_maint_state *m = n->mt;
  for (size_t i = 0; i < m->n_streams;) {
    struct snap_stream *s = &m->streams[i];
    size_t before = m->n_streams;
    if (s->fd >= 0) {
      i++;
      continue;
    }
    if (!stream_open(n, i)) {
      if (!ok) {
        stream_fail(n, i, KT_EIO, "the snapshot could not be written (see the member's log)");
        continue;
      }
      kt_node_snapshot_now(n); /* that one was older than the request */
    }
    if (m->n_streams == before)
      i++;
  }
  if (!ok) {
    for (size_t i = 0; i < m->n_defrags;) {
      if (m->defrags[i].need_index)
        defrag_reply(n, i, KT_EIO, "the snapshot could not be written (see the member's log)");
      else
        i++;
    }
  }
  defrag_progress(n);
  ev_idle_start(n->loop, &n->idle_w);
}

void kt_node_maint_drained(struct kt_node *n, struct kt_conn *c) {
  struct node_maint_state *m = n->mt;
  for (size_t i = 0; i < m->n_streams; i++)
    if (m->streams[i].conn == c && m->streams[i].fd >= 0) {
      stream_pump(n, i);
      return;
    }
}

bool kt_node_maint_has_alarm(const struct kt_node *n, uint8_t type) {
  return has_alarm(n->mt, type);
}

bool kt_node_maint_busy(const struct kt_node *n) {
  const struct node_maint_state *m = n->mt;
  if (m->n_jobs)
    return true;
  for (size_t i = 0; i < m->n_defrags; i++)
    if (m->defrags[i].need_index == 0 && !kt_mvcc_compact_pending(n->store))
      return true;
  return false;
}

void kt_node_maint_step(struct kt_node *n) {
  hash_slice(n);
  if (n->mt->n_defrags)
    defrag_progress(n);
}

void kt_node_maint_tick(struct kt_node *n) {
  struct node_maint_state *m = n->mt;
  for (size_t i = 0; i < m->n_streams;) {
    if (!kt_conn_open(m->streams[i].conn))
      stream_end(n, i);
    else
      i++;
  }
  for (size_t i = 0; i < m->n_defrags;) {
    if (!kt_conn_open(m->defrags[i].conn)) {
      kt_conn_unref(m->defrags[i].conn);
      m->defrags[i] = m->defrags[--m->n_defrags];
    } else {
      i++;
    }
  }
}
