/* core/node_metrics.c — the member's /metrics text and its health checks.
 *
 * Runs on the state thread when a scrape asks (net/http.c calls it from the
 * loop): the counters of struct kt_node_stats are plain fields that the
 * state thread increments where things happen; nothing is formatted until
 * here. The only value from another thread, the WAL's fsync histogram, is
 * copied under the WAL's lock (kt_wal_fsync_hist).
 *
 * Names, types, labels and buckets are etcd 3.5's where etcd has the figure
 * (so its dashboards and alert rules work unchanged); ketch_* is what only
 * ketch has. Peer labels are member ids in hex, as etcd's types.ID prints. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "node_int.h"

__attribute__((format(printf, 2, 3))) static void out_f(struct kt_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[512];
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0)
    return;
  if ((size_t)k < sizeof tmp) {
    kt_buf_append(b, tmp, (size_t)k);
    return;
  }
  kt_buf_reserve(b, (size_t)k + 1);
  va_start(ap, fmt);
  vsnprintf((char *)b->p + b->len, (size_t)k + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)k;
}

static void head(struct kt_buf *b, const char *name, const char *type, const char *help) {
  out_f(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric_u(struct kt_buf *b, const char *name, const char *type, const char *help,
                     uint64_t v) {
  head(b, name, type, help);
  out_f(b, "%s %llu\n", name, (unsigned long long)v);
}

void kt_node_render_hist(struct kt_buf *b, const char *name, const char *help,
                         const struct kt_hist *h) {
  head(b, name, "histogram", help);
  uint64_t cum = 0;
  double bound = h->start;
  for (uint32_t i = 0; i < h->n; i++, bound *= 2) {
    cum += h->b[i];
    out_f(b, "%s_bucket{le=\"%.15g\"} %llu\n", name, bound, (unsigned long long)cum);
  }
  out_f(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
  out_f(b, "%s_sum %.15g\n", name, h->sum);
  out_f(b, "%s_count %llu\n", name, (unsigned long long)h->count);
}

/* ---- /health's linearizable read ---- */

static void probe_finish(struct kt_node *n, size_t i, int code, const char *why) {
  struct kt_node_probe p = n->probes[i];
  n->probes[i] = n->probes[--n->n_probes]; /* order does not matter */
  p.done(p.ctx, code, why);
}

void kt_node_probe_linearizable(struct kt_node *n, kt_node_probe_fn done, void *ctx) {
  if (kt_node_solo(n)) {
    done(ctx, 0, "");
    return;
  }
  if (!n->known_leader) {
    done(ctx, KT_ENOLEADER, "no leader");
    return;
  }
  if (n->n_probes == KT_NODE_MAX_PROBES) {
    done(ctx, KT_EBUSY, "too many health checks waiting");
    return;
  }
  n->probes[n->n_probes++] =
      (struct kt_node_probe){done, ctx, kt_reads_join(&n->rq), ev_now(n->loop)};
}

void kt_node_probes_failed(struct kt_node *n, uint64_t failed, int code) {
  for (size_t i = n->n_probes; i-- > 0;)
    if (n->probes[i].batch == failed)
      probe_finish(n, i, code, "no leader");
}

void kt_node_probes_step(struct kt_node *n) {
  for (size_t i = n->n_probes; i-- > 0;)
    if (kt_reads_ready(&n->rq, n->probes[i].batch, n->applied_index))
      probe_finish(n, i, 0, "");
}

void kt_node_probes_expire(struct kt_node *n) {
  for (size_t i = n->n_probes; i-- > 0;)
    if (ev_now(n->loop) - n->probes[i].since > 1.0)
      probe_finish(n, i, KT_ETIMEOUT, "no read index within 1 s");
}

void kt_node_probes_cancel(struct kt_node *n, int code) {
  while (n->n_probes)
    probe_finish(n, n->n_probes - 1, code, "member stopped");
}

void kt_node_serve_http(struct kt_node *n,
                        void (*fn)(void *arg, struct kt_io *io, const uint8_t *pre, size_t n),
                        void *arg) {
  kt_server_set_http(n->server, fn, arg);
}

static struct kt_node_rtt *rtt_of(struct kt_node *n, uint64_t id, bool add) {
  struct kt_node_stats *s = &n->stats;
  for (size_t i = 0; i < s->n_rtt; i++)
    if (s->rtt[i].id == id)
      return &s->rtt[i];
  if (!add || s->n_rtt == KT_ARRAY_LEN(s->rtt))
    return NULL;
  struct kt_node_rtt *r = &s->rtt[s->n_rtt++];
  *r = (struct kt_node_rtt){.id = id, .h = KT_HIST_RTT};
  return r;
}

void kt_node_rtt_sent(struct kt_node *n, uint64_t to, uint64_t ctx) {
  struct kt_node_rtt *r = rtt_of(n, to, true);
  double now = ev_time();
  if (!r || (r->sent > 0 && now - r->sent < 5.0)) /* one probe out (a lost one: 5 s) */
    return;
  r->ctx = ctx;
  r->sent = now;
}

void kt_node_rtt_answered(struct kt_node *n, uint64_t from, uint64_t ctx) {
  struct kt_node_rtt *r = rtt_of(n, from, false);
  if (!r || r->sent <= 0 || r->ctx != ctx)
    return;
  kt_hist_observe(&r->h, ev_time() - r->sent);
  r->sent = 0;
}

void kt_node_health(const struct kt_node *n, struct kt_node_health *h) {
  memset(h, 0, sizeof *h);
  h->leader = n->known_leader;
  h->is_leader = n->known_leader && n->known_leader == n->member_id;
  h->serving = n->serving;
  h->learner = kt_node_member_is_learner(n);
  h->nospace = kt_node_maint_has_alarm(n, KT_ALARM_NOSPACE) || n->wal_failed == KT_ENOSPACE;
  h->corrupt = kt_node_maint_has_alarm(n, KT_ALARM_CORRUPT);
  h->stopping = n->stopping || n->fatal;
  h->applied_index = n->applied_index;
  h->commit_index = kt_raft_commit(n->raft);
}

void kt_node_metrics(struct kt_node *n, struct kt_buf *b) {
  const struct kt_node_stats *s = &n->stats;
  struct kt_node_health h;
  kt_node_health(n, &h);

  /* etcd_server_* */
  metric_u(b, "etcd_server_has_leader", "gauge",
           "Whether or not a leader exists. 1 is existence, 0 is not.", h.leader != 0);
  metric_u(b, "etcd_server_is_leader", "gauge",
           "Whether or not this member is a leader. 1 if is, 0 otherwise.", h.is_leader);
  metric_u(b, "etcd_server_is_learner", "gauge",
           "Whether or not this member is a learner. 1 if is, 0 otherwise.", h.learner);
  metric_u(b, "etcd_server_leader_changes_seen_total", "counter",
           "The number of leader changes seen.", s->leader_changes);
  metric_u(b, "etcd_server_proposals_committed_total", "gauge",
           "The total number of consensus proposals committed.", h.commit_index);
  metric_u(b, "etcd_server_proposals_applied_total", "gauge",
           "The total number of consensus proposals applied.", h.applied_index);
  metric_u(b, "etcd_server_proposals_pending", "gauge",
           "The current number of pending proposals to commit.", n->n_pend - n->pend_head);
  metric_u(b, "etcd_server_proposals_failed_total", "counter",
           "The total number of failed proposals seen.", s->proposals_failed);
  metric_u(b, "etcd_server_slow_apply_total", "counter",
           "The total number of slow apply requests (likely overloaded from slow disk).",
           s->slow_applies);
  metric_u(b, "etcd_server_heartbeat_send_failures_total", "counter",
           "The total number of leader heartbeat send failures (likely overloaded from slow "
           "disk).",
           s->heartbeat_fails);
  metric_u(b, "etcd_server_quota_backend_bytes", "gauge",
           "Current backend storage quota size in bytes.", n->cfg.quota_bytes);
  head(b, "etcd_server_version", "gauge",
       "Which version is running. 1 for 'server_version' label with current version.");
  out_f(b, "etcd_server_version{server_version=\"%s\"} 1\n", KT_VERSION);
  head(b, "etcd_cluster_version", "gauge",
       "Which version is running. 1 for 'cluster_version' label with current cluster version");
  {
    char v[32];
    snprintf(v, sizeof v, "%s", KT_VERSION);
    char *dot = strchr(v, '.');
    if (dot && strchr(dot + 1, '.'))
      *strchr(dot + 1, '.') = 0; /* major.minor, as etcd */
    out_f(b, "etcd_cluster_version{cluster_version=\"%s\"} 1\n", v);
  }
  head(b, "etcd_server_id", "gauge",
       "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.");
  out_f(b, "etcd_server_id{server_id=\"%llx\"} 1\n", (unsigned long long)n->member_id);

  /* disk */
  struct kt_hist fs;
  kt_wal_fsync_hist(n->wal, &fs);
  kt_node_render_hist(b, "etcd_disk_wal_fsync_duration_seconds",
                      "The latency distributions of fsync called by WAL.", &fs);
  kt_node_render_hist(b, "etcd_disk_backend_commit_duration_seconds",
                      "The latency distributions of commit called by backend (ketch: applying one "
                      "batch of committed entries to the in-memory store).",
                      &s->apply_batch_s);
  kt_node_render_hist(b, "etcd_disk_backend_snapshot_duration_seconds",
                      "The latency distribution of backend snapshots.", &s->snapshot_s);

  /* network */
  if (n->peers) {
    uint64_t ids[KT_NODE_MAX_MEMBERS * 4];
    size_t np = kt_peer_link_ids(n->peers, ids, KT_ARRAY_LEN(ids));
    struct kt_peer_status st[KT_ARRAY_LEN(ids)];
    size_t k = 0;
    for (size_t i = 0; i < np; i++)
      if (kt_peer_link_status(n->peers, ids[i], &st[k]) == 0)
        k++;
    head(b, "etcd_network_peer_sent_bytes_total", "counter",
         "The total number of bytes sent to peers.");
    for (size_t i = 0; i < k; i++)
      out_f(b, "etcd_network_peer_sent_bytes_total{To=\"%llx\"} %llu\n",
            (unsigned long long)st[i].id, (unsigned long long)st[i].bytes_written);
    head(b, "etcd_network_peer_received_bytes_total", "counter",
         "The total number of bytes received from peers.");
    for (size_t i = 0; i < k; i++)
      out_f(b, "etcd_network_peer_received_bytes_total{From=\"%llx\"} %llu\n",
            (unsigned long long)st[i].id, (unsigned long long)st[i].bytes_received);
    head(b, "etcd_network_peer_sent_failures_total", "counter",
         "The total number of send failures from peers.");
    for (size_t i = 0; i < k; i++)
      out_f(b, "etcd_network_peer_sent_failures_total{To=\"%llx\"} %llu\n",
            (unsigned long long)st[i].id,
            (unsigned long long)(st[i].msgs_dropped_full + st[i].msgs_dropped_unreachable));
    /* round trips, one histogram family with a To label per peer */
    head(b, "etcd_network_peer_round_trip_time_seconds", "histogram",
         "Round-Trip-Time histogram between peers (ketch: heartbeat to its response, timed by "
         "the leader).");
    for (size_t i = 0; i < n->stats.n_rtt; i++) {
      const struct kt_node_rtt *r = &n->stats.rtt[i];
      uint64_t cum = 0;
      double bound = r->h.start;
      for (uint32_t j = 0; j < r->h.n; j++, bound *= 2) {
        cum += r->h.b[j];
        out_f(b,
              "etcd_network_peer_round_trip_time_seconds_bucket{To=\"%llx\",le=\"%.15g\"} %llu\n",
              (unsigned long long)r->id, bound, (unsigned long long)cum);
      }
      out_f(b, "etcd_network_peer_round_trip_time_seconds_bucket{To=\"%llx\",le=\"+Inf\"} %llu\n",
            (unsigned long long)r->id, (unsigned long long)r->h.count);
      out_f(b, "etcd_network_peer_round_trip_time_seconds_sum{To=\"%llx\"} %.15g\n",
            (unsigned long long)r->id, r->h.sum);
      out_f(b, "etcd_network_peer_round_trip_time_seconds_count{To=\"%llx\"} %llu\n",
            (unsigned long long)r->id, (unsigned long long)r->h.count);
    }
    head(b, "ketch_network_peer_connected", "gauge",
         "Whether the raft channel to the peer is connected (1) or not (0).");
    for (size_t i = 0; i < k; i++)
      out_f(b, "ketch_network_peer_connected{To=\"%llx\"} %d\n", (unsigned long long)st[i].id,
            st[i].connected ? 1 : 0);
    head(b, "ketch_network_peer_received_dropped_total", "counter",
         "Messages received from the peer and dropped because the state thread was behind "
         "(the peer thread's bound on bytes not yet taken).");
    for (size_t i = 0; i < k; i++)
      out_f(b, "ketch_network_peer_received_dropped_total{From=\"%llx\"} %llu\n",
            (unsigned long long)st[i].id, (unsigned long long)st[i].msgs_dropped_received);
  }
  uint64_t cin = 0, cout = 0;
  if (n->server)
    kt_server_bytes(n->server, &cin, &cout);
  metric_u(b, "etcd_network_client_grpc_received_bytes_total", "counter",
           "The total number of bytes received from grpc clients (ketch: native clients).", cin);
  metric_u(b, "etcd_network_client_grpc_sent_bytes_total", "counter",
           "The total number of bytes sent to grpc clients (ketch: native clients).", cout);

  /* mvcc */
  uint64_t db = kt_mvcc_size_bytes(n->store);
  metric_u(b, "etcd_mvcc_db_total_size_in_bytes", "gauge",
           "Total size of the underlying database physically allocated in bytes (ketch: the "
           "store's quota accounting).",
           db);
  metric_u(b, "etcd_mvcc_db_total_size_in_use_in_bytes", "gauge",
           "Total size of the underlying database logically in use in bytes.", db);
  metric_u(b, "etcd_mvcc_put_total", "counter", "Total number of puts seen by this member.",
           s->puts);
  metric_u(b, "etcd_mvcc_delete_total", "counter", "Total number of deletes seen by this member.",
           s->deletes);
  metric_u(b, "etcd_mvcc_txn_total", "counter", "Total number of txns seen by this member.",
           s->txns);
  metric_u(b, "etcd_mvcc_range_total", "counter", "Total number of ranges seen by this member.",
           s->ranges);
  head(b, "etcd_debugging_mvcc_current_revision", "gauge", "The current revision of store.");
  out_f(b, "etcd_debugging_mvcc_current_revision %lld\n", (long long)kt_mvcc_revision(n->store));
  head(b, "etcd_debugging_mvcc_compact_revision", "gauge",
       "The revision of the last compaction in store.");
  out_f(b, "etcd_debugging_mvcc_compact_revision %lld\n",
        (long long)kt_mvcc_compact_revision(n->store));
  metric_u(b, "etcd_debugging_mvcc_keys_total", "gauge", "Total number of keys.",
           kt_mvcc_keys(n->store));
  struct kt_watch_stats ws;
  kt_watch_stats(n->watches, &ws);
  metric_u(b, "etcd_debugging_mvcc_watcher_total", "gauge", "Total number of watchers.",
           ws.watchers);
  metric_u(b, "etcd_debugging_mvcc_slow_watcher_total", "gauge",
           "Total number of unsynced slow watchers.", ws.unsynced);
  metric_u(b, "etcd_debugging_lease_granted_total", "counter",
           "The total number of granted leases.", s->leases_granted);

  /* ketch_* */
  metric_u(b, "ketch_watch_groups", "gauge",
           "Watch groups: watchers of the same key range and state share one.", ws.groups);
  metric_u(b, "ketch_watch_slow_moved_total", "counter",
           "Watchers moved aside to the unsynced set because their client did not read.",
           ws.moved_aside);
  kt_node_render_hist(b, "ketch_wal_batch_entries",
                      "Entries written by one WAL batch (one fdatasync: group commit).",
                      &s->wal_batch);
  metric_u(b, "ketch_client_connections", "gauge", "Open native client connections.",
           n->server ? kt_server_conn_count(n->server) : 0);
  metric_u(b, "ketch_server_serving", "gauge",
           "1 while this member serves linearizable requests (knows an up-to-date leader).",
           h.serving);
}
