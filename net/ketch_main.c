/* net/ketch_main.c — the member process: config, logging, signals, the loop.
 *
 * Reads flags / KETCH_* env / config file (net/config.h), installs the log
 * sink ("time level module member message"), opens the node (recovery), listens
 * on the client URLs and runs the loop until SIGTERM/SIGINT, then shuts down
 * gracefully: stop accepting, finish in-flight syncs and replies, close. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <ev.h>
#include <sodium.h>

#include "../core/node.h"
#include "config.h"

extern char **environ;

static char member_name[64] = "-";

static void log_sink(int level, const char *module, const char *line) {
  static const char *const names[] = {"debug", "info", "warn", "error", "fatal"};
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[32];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ldZ %s %s %s %s\n", ts, (long)(tv.tv_usec / 1000),
          names[level < 0 || level > 4 ? 4 : level], module, member_name, line);
}

static struct kt_node *the_node;

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents) {
  (void)loop;
  (void)revents;
  kt_log(KT_LOG_INFO, "main", "received signal %d, shutting down", w->signum);
  kt_node_shutdown(the_node);
}

int main(int argc, char **argv) {
  struct kt_config cfg;
  struct kt_err e = {0};
  kt_log_set_sink(log_sink);
  if (kt_config_load(&cfg, argc, argv, environ, &e)) {
    fprintf(stderr, "ketch: %s\n", e.msg);
    kt_config_free(&cfg);
    return 2;
  }
  if (cfg.show_help) {
    kt_config_usage(stdout);
    kt_config_free(&cfg);
    return 0;
  }
  if (cfg.show_version) {
    printf("ketch Version: %s\n", KT_VERSION);
    kt_config_free(&cfg);
    return 0;
  }
  if (sodium_init() < 0) {
    fprintf(stderr, "ketch: libsodium failed to initialise\n");
    return 1;
  }
  kt_log_level = cfg.log_level;
  snprintf(member_name, sizeof member_name, "%s", cfg.name);
  signal(SIGPIPE, SIG_IGN);

  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  struct kt_node_peer initial[KT_NODE_MAX_MEMBERS * 4];
  size_t n_initial = 0;
  for (size_t i = 0; i < cfg.initial_cluster_n && n_initial < KT_ARRAY_LEN(initial); i++)
    initial[n_initial++] = (struct kt_node_peer){cfg.initial_cluster_peers[i].name,
                                                 cfg.initial_cluster_peers[i].url.raw};
  struct kt_node_config nc = {
      .name = cfg.name,
      .data_dir = cfg.data_dir,
      .cluster_token = cfg.initial_cluster_token,
      .peer_urls = cfg.initial_advertise_peer_urls.raw,
      .client_urls = cfg.advertise_client_urls.raw,
      .snapshot_count = cfg.snapshot_count,
      .quota_bytes = cfg.quota_backend_bytes,
      .max_request_bytes = cfg.max_request_bytes,
      .initial = initial,
      .n_initial = n_initial,
      .join_existing = cfg.initial_cluster_state == KT_CLUSTER_EXISTING,
      .force_new_cluster = cfg.force_new_cluster,
      .listen_peer_host = cfg.listen_peer_urls.n ? cfg.listen_peer_urls.v[0].host : NULL,
      .listen_peer_port = cfg.listen_peer_urls.n ? cfg.listen_peer_urls.v[0].port : 0,
      .heartbeat_ms = cfg.heartbeat_interval_ms,
      .election_timeout_ms = cfg.election_timeout_ms,
      .watch_progress_ms = cfg.watch_progress_notify_ms,
      .snapshot_catchup_entries = cfg.snapshot_catchup_entries,
      .auto_compaction_revision_mode = cfg.auto_compaction_mode == KT_COMPACT_REVISION,
      .auto_compaction_retention_ms = cfg.auto_compaction_retention_ms,
      .auto_compaction_retention_revs = cfg.auto_compaction_retention_revs,
  };
  if (kt_node_open(loop, &nc, &the_node, &e)) {
    kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
    kt_config_free(&cfg);
    return 1;
  }
  for (size_t i = 0; i < cfg.listen_client_urls.n; i++) {
    const struct kt_url *u = &cfg.listen_client_urls.v[i];
    if (u->scheme != KT_URL_HTTP) {
      kt_log(KT_LOG_FATAL, "main", "cannot listen on %s: only http:// client URLs for now", u->raw);
      return 1;
    }
    if (kt_node_listen(the_node, u->host, u->port, &e)) {
      kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
      kt_node_free(the_node);
      kt_config_free(&cfg);
      return 1;
    }
    kt_log(KT_LOG_INFO, "main", "serving client requests url=%s", u->raw);
  }
  ev_signal sigterm, sigint;
  ev_signal_init(&sigterm, on_signal, SIGTERM);
  ev_signal_init(&sigint, on_signal, SIGINT);
  ev_signal_start(loop, &sigterm);
  ev_signal_start(loop, &sigint);
  ev_unref(loop);
  ev_unref(loop);

  ev_run(loop, 0);

  int fatal = kt_node_fatal(the_node);
  ev_ref(loop);
  ev_ref(loop);
  ev_signal_stop(loop, &sigterm);
  ev_signal_stop(loop, &sigint);
  kt_node_free(the_node);
  bool removed = fatal == KT_EMEMBERREMOVED; /* etcd 3.4 exits 0 */
  kt_log(KT_LOG_INFO, "main",
         removed ? "stopped: removed from the cluster"
                 : (fatal ? "stopped on error" : "shutdown complete"));
  kt_config_free(&cfg);
  return fatal && !removed ? 1 : 0;
}
