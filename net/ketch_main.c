/* net/ketch_main.c — the member process: config, logging, signals, the loop.
 *
 * Reads flags / KETCH_* env / config file (net/config.h), installs the log
 * sink ("time level module member message"), builds the TLS contexts the
 * URLs need (net/tls.h: a missing or unreadable certificate, key, CA or CRL
 * stops the start with a line naming the flag and the file), opens the node
 * (recovery), listens on the client URLs and runs the loop until
 * SIGTERM/SIGINT, then shuts down gracefully: stop accepting, finish
 * in-flight syncs and replies, close. SIGHUP and changed certificate files
 * reload the TLS contexts (net/tls_reload.h).
 *
 * TLS contexts (each used by every listener or dialer of its kind):
 *   client   the https:// client listeners (--cert-file ... or --auto-tls);
 *            an address given both as http:// and https:// is one listener
 *            serving both (the first byte tells them apart)
 *   peer-in  the https:// peer listener (--peer-cert-file ... or
 *            --peer-auto-tls), verifying members' certificates when
 *            --peer-client-cert-auth or --peer-trusted-ca-file is given
 *   peer-out dialing https:// peer URLs (the same files; the peer URL's host
 *            is what the remote certificate must be valid for; not verified
 *            with --peer-auto-tls, as etcd) */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

#include <ev.h>
#include <sodium.h>

#include "../core/node.h"
#include "config.h"
#include "discovery.h"
#include "gateway.h"
#include "http.h"
#include "sdnotify.h"
#include "srv.h"
#include "tls.h"
#include "tls_reload.h"

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
  kt_sd_notify("STOPPING=1\nSTATUS=shutting down\n");
  kt_node_shutdown(the_node);
}

/* systemd (net/sdnotify.h): READY=1 at the end of the first loop turn in
 * which the member serves (a write would succeed), then this watcher stops. */
static void on_ready_check(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)revents;
  struct kt_node_health h;
  kt_node_health(the_node, &h);
  if (!h.serving)
    return;
  if (kt_sd_notify("READY=1\nSTATUS=serving\n") < 0)
    kt_log(KT_LOG_WARN, "main", "sd_notify READY=1 failed: %s", strerror(errno));
  ev_ref(loop);
  ev_prepare_stop(loop, w);
}

static void on_watchdog(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
  kt_sd_notify("WATCHDOG=1");
}

static void metrics_src(void *arg, struct kt_buf *out) {
  (void)arg;
  kt_node_metrics(the_node, out);
}

static void health_src(void *arg, struct kt_node_health *h) {
  (void)arg;
  kt_node_health(the_node, h);
}

static void probe_src(void *arg, void (*done)(void *ctx, int code, const char *why), void *ctx) {
  (void)arg;
  kt_node_probe_linearizable(the_node, done, ctx);
}

static void http_adopt(void *arg, struct kt_io *io, const uint8_t *pre, size_t n) {
  kt_http_adopt(arg, io, pre, n);
}

enum { TLS_CLIENT, TLS_PEER_IN, TLS_PEER_OUT, TLS_N };

/* --auto-tls / --peer-auto-tls: a certificate under <data-dir>/fixtures/
 * for the listen URLs' hosts, as etcd. */
static int auto_cert(const struct kt_config *cfg, const struct kt_url_list *urls, const char *kind,
                     char *cert, char *key, size_t cap, struct kt_err *e) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/fixtures/%s", cfg->data_dir, kind);
  const char *hosts[KT_CONFIG_MAX_URLS];
  size_t n = 0;
  for (size_t i = 0; i < urls->n; i++)
    if (urls->v[i].scheme != KT_URL_UNIX)
      hosts[n++] = urls->v[i].host;
  int rc = kt_tls_selfcert(dir, hosts, n, e);
  snprintf(cert, cap, "%s/cert.pem", dir);
  snprintf(key, cap, "%s/key.pem", dir);
  return rc;
}

static bool has_https(const struct kt_url_list *u) {
  for (size_t i = 0; i < u->n; i++)
    if (u->v[i].scheme == KT_URL_HTTPS)
      return true;
  return false;
}

/* Build the contexts the configuration needs (see the top comment). */
static int make_tls(const struct kt_config *cfg, struct kt_tls_ctx *out[TLS_N], struct kt_err *e) {
  char cert[4200], key[4200];
  const struct kt_config_tls *ct = &cfg->client_tls, *pt = &cfg->peer_tls;
  if (has_https(&cfg->listen_client_urls) || has_https(&cfg->listen_metrics_urls)) {
    struct kt_tls_config c = {
        .server = true,
        .cert_file = ct->cert_file,
        .key_file = ct->key_file,
        .ca_file = ct->trusted_ca_file,
        .crl_file = ct->crl_file,
        .verify_peer = ct->client_cert_auth || ct->trusted_ca_file,
        .allowed_hostname = ct->allowed_hostname,
        .cipher_suites = cfg->cipher_suites,
        .min_version = cfg->tls_min_version,
        .max_version = cfg->tls_max_version,
        .cert_flag = "--cert-file",
        .key_flag = "--key-file",
        .ca_flag = "--trusted-ca-file",
        .crl_flag = "--client-crl-file",
    };
    if (!ct->cert_file && ct->auto_tls) {
      if (auto_cert(cfg, &cfg->listen_client_urls, "client", cert, key, sizeof cert, e))
        return e->code;
      c.cert_file = cert, c.key_file = key;
    } else if (ct->auto_tls) {
      kt_log(KT_LOG_WARN, "main", "ignoring client auto TLS since certs given");
    }
    if (kt_tls_ctx_new(&c, &out[TLS_CLIENT], e))
      return e->code;
  } else if (ct->cert_file || ct->client_cert_auth) {
    kt_log(KT_LOG_WARN, "main",
           "scheme is HTTP while key and cert files are present; ignoring key and cert files "
           "(client-urls=%s)",
           cfg->listen_client_urls.raw);
  }
  bool peer_tls = pt->cert_file || pt->auto_tls;
  if (!peer_tls)
    return 0;
  struct kt_tls_config c = {
      .cert_file = pt->cert_file,
      .key_file = pt->key_file,
      .ca_file = pt->trusted_ca_file,
      .crl_file = pt->crl_file,
      .allowed_cn = pt->allowed_cn,
      .allowed_hostname = pt->allowed_hostname,
      .cipher_suites = cfg->cipher_suites,
      .min_version = cfg->tls_min_version,
      .max_version = cfg->tls_max_version,
      .cert_flag = "--peer-cert-file",
      .key_flag = "--peer-key-file",
      .ca_flag = "--peer-trusted-ca-file",
      .crl_flag = "--peer-crl-file",
  };
  if (!pt->cert_file) {
    if (auto_cert(cfg, &cfg->listen_peer_urls, "peer", cert, key, sizeof cert, e))
      return e->code;
    c.cert_file = cert, c.key_file = key;
    c.skip_verify = true; /* a self-signed peer: encryption only, as etcd */
  } else if (pt->auto_tls) {
    kt_log(KT_LOG_WARN, "main", "ignoring peer auto TLS since certs given");
  }
  if (has_https(&cfg->listen_peer_urls)) {
    c.server = true;
    c.verify_peer = pt->client_cert_auth || pt->trusted_ca_file;
    if (kt_tls_ctx_new(&c, &out[TLS_PEER_IN], e))
      return e->code;
  } else {
    kt_log(KT_LOG_WARN, "main",
           "scheme is HTTP while peer key and cert files are present; the peer listener %s "
           "serves plaintext",
           cfg->listen_peer_urls.raw);
  }
  c.server = false;
  c.verify_peer = false;
  if (kt_tls_ctx_new(&c, &out[TLS_PEER_OUT], e))
    return e->code;
  return 0;
}

/* A member that has written its log before restarts from it and ignores
 * --discovery-srv / --discovery-endpoints (etcd's rule). */
static bool has_wal(const char *data_dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/member/wal", data_dir);
  DIR *d = opendir(path);
  if (!d)
    return false;
  bool found = false;
  for (struct dirent *de; !found && (de = readdir(d));) {
    size_t l = strlen(de->d_name);
    found = l > 4 && strcmp(de->d_name + l - 4, ".wal") == 0;
  }
  closedir(d);
  return found;
}

int main(int argc, char **argv) {
  struct kt_config cfg;
  struct kt_err e = {0};
  kt_log_set_sink(log_sink);
  if (argc > 1 && strcmp(argv[1], "gateway") == 0) { /* ketch gateway start ... (net/gateway.h) */
    snprintf(member_name, sizeof member_name, "gateway");
    return kt_gateway_main(argc - 1, argv + 1);
  }
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
  /* Thousands of clients need descriptors: the soft limit up to the hard one
   * (what Go does for etcd since 1.19). */
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (!setrlimit(RLIMIT_NOFILE, &rl))
      kt_log(KT_LOG_DEBUG, "main", "open files limit %llu -> %llu", (unsigned long long)was,
             (unsigned long long)rl.rlim_cur);
  }

  struct kt_tls_ctx *tls[TLS_N] = {0};
  if (make_tls(&cfg, tls, &e)) {
    kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
    for (int i = 0; i < TLS_N; i++)
      kt_tls_ctx_free(tls[i]);
    kt_config_free(&cfg);
    return 1;
  }

  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  struct kt_node_peer initial[KT_NODE_MAX_MEMBERS * 4];
  size_t n_initial = 0;
  for (size_t i = 0; i < cfg.initial_cluster_n && n_initial < KT_ARRAY_LEN(initial); i++)
    initial[n_initial++] = (struct kt_node_peer){cfg.initial_cluster_peers[i].name,
                                                 cfg.initial_cluster_peers[i].url.raw};
  const char *node_name = cfg.name;
  static struct kt_srv_member srv_members[KT_NODE_MAX_MEMBERS];
  bool discovering = cfg.discovery_srv || cfg.discovery_endpoints;
  if (discovering && has_wal(cfg.data_dir)) {
    kt_log(KT_LOG_INFO, "main", "data dir %s has a log: ignoring discovery", cfg.data_dir);
  } else if (cfg.discovery_srv) {
    size_t n_srv = 0, self = 0;
    if (kt_srv_bootstrap(loop, &cfg, srv_members, KT_ARRAY_LEN(srv_members), &n_srv, &self, &e)) {
      kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
      kt_config_free(&cfg);
      return 1;
    }
    n_initial = 0;
    for (size_t i = 0; i < n_srv; i++) {
      initial[n_initial++] = (struct kt_node_peer){srv_members[i].name, srv_members[i].url};
      kt_log(KT_LOG_INFO, "main", "initial cluster from SRV: %s=%s%s", srv_members[i].name,
             srv_members[i].url, i == self ? " (this member)" : "");
    }
    node_name = srv_members[self].name;
    if (strcmp(node_name, cfg.name) != 0)
      kt_log(KT_LOG_WARN, "main",
             "with --discovery-srv this member is named \"%s\" (its SRV target), not --name "
             "\"%s\"",
             node_name, cfg.name);
  }
  static struct kt_discovery_peer disc_peers[KT_NODE_MAX_MEMBERS * 4];
  const char *cluster_token = cfg.initial_cluster_token;
  if (cfg.discovery_endpoints && !has_wal(cfg.data_dir)) {
    size_t n_disc = 0;
    kt_log(KT_LOG_INFO, "main", "bootstrapping through the discovery service %s",
           cfg.discovery_endpoints);
    if (kt_discovery_bootstrap(&cfg, disc_peers, KT_ARRAY_LEN(disc_peers), &n_disc, &e)) {
      kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
      fprintf(stderr, "ketch: %s\n", e.msg);
      kt_config_free(&cfg);
      return 1;
    }
    n_initial = 0;
    for (size_t i = 0; i < n_disc; i++) {
      initial[n_initial++] = (struct kt_node_peer){disc_peers[i].name, disc_peers[i].url};
      kt_log(KT_LOG_INFO, "main", "initial cluster from discovery: %s=%s", disc_peers[i].name,
             disc_peers[i].url);
    }
    cluster_token = cfg.discovery_token; /* member ids are hashes of token and name */
  }
  struct kt_node_config nc = {
      .name = node_name,
      .data_dir = cfg.data_dir,
      .cluster_token = cluster_token,
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
      .peer_tls_server = tls[TLS_PEER_IN],
      .peer_tls_client = tls[TLS_PEER_OUT],
      .auth_token_signed = cfg.auth_token_signed,
      .auth_token_priv_key = cfg.auth_token_priv_key,
      .auth_token_pub_key = cfg.auth_token_pub_key,
      .auth_token_ttl_s =
          cfg.auth_token_signed ? cfg.auth_token_signed_ttl_s : cfg.auth_token_ttl_s,
      .auth_hash_opslimit = cfg.auth_hash_opslimit,
      .auth_hash_memlimit = (size_t)cfg.auth_hash_memlimit,
      .auth_hash_threads = (int)cfg.auth_hash_threads,
      .io_threads = (int)kt_config_io_threads(&cfg, 0),
  };
  if (kt_node_open(loop, &nc, &the_node, &e)) {
    kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
    kt_config_free(&cfg);
    return 1;
  }
  const struct kt_url_list *lc = &cfg.listen_client_urls;
  for (size_t i = 0; i < lc->n; i++) {
    const struct kt_url *u = &lc->v[i];
    if (u->scheme == KT_URL_UNIX) {
      kt_log(KT_LOG_FATAL, "main", "cannot listen on %s: unix:// client URLs are not served",
             u->raw);
      return 1;
    }
    /* One listener per address: http:// and https:// of the same one share it. */
    bool dup = false, tls_here = false, plain_here = false;
    for (size_t j = 0; j < lc->n; j++) {
      const struct kt_url *v = &lc->v[j];
      if (v->scheme == KT_URL_UNIX || v->port != u->port || strcmp(v->host, u->host) != 0)
        continue;
      dup |= j < i;
      tls_here |= v->scheme == KT_URL_HTTPS;
      plain_here |= v->scheme == KT_URL_HTTP;
    }
    if (dup)
      continue;
    if (kt_node_listen(the_node, u->host, u->port, tls_here ? tls[TLS_CLIENT] : NULL,
                       tls_here && plain_here, &e)) {
      kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
      kt_node_free(the_node);
      kt_config_free(&cfg);
      return 1;
    }
    kt_log(KT_LOG_INFO, "main", "serving client requests url=%s tls=%s", u->raw,
           !tls_here    ? "no"
           : plain_here ? "yes, and plaintext"
                        : "yes");
  }
  /* /metrics, /health, /livez, /readyz (net/http.h) on --listen-metrics-urls
   * and on the plaintext client URLs (an HTTP request's first byte) */
  static const struct kt_http_source src = {metrics_src, health_src, probe_src, NULL};
  struct kt_http *http = kt_http_new(loop, &src, &e);
  if (!http) {
    kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
    return 1;
  }
  kt_node_serve_http(the_node, http_adopt, http);
  for (size_t i = 0; i < cfg.listen_metrics_urls.n; i++) {
    const struct kt_url *u = &cfg.listen_metrics_urls.v[i];
    if (u->scheme != KT_URL_HTTP && u->scheme != KT_URL_HTTPS) {
      kt_log(KT_LOG_FATAL, "main", "cannot listen on %s: metrics URLs are http:// or https://",
             u->raw);
      return 1;
    }
    if (u->scheme == KT_URL_HTTPS ? kt_http_listen_tls(http, u->host, u->port, tls[TLS_CLIENT], &e)
                                  : kt_http_listen(http, u->host, u->port, &e)) {
      kt_log(KT_LOG_FATAL, "main", "cannot start: %s", e.msg);
      return 1;
    }
    kt_log(KT_LOG_INFO, "main", "serving metrics and health url=%s", u->raw);
  }
  static const char *const tls_names[TLS_N] = {"client", "peer listener", "peer dialer"};
  struct kt_tls_reloader *reloader = kt_tls_reloader_new(loop, tls, tls_names, TLS_N);
  ev_signal sigterm, sigint;
  ev_signal_init(&sigterm, on_signal, SIGTERM);
  ev_signal_init(&sigint, on_signal, SIGINT);
  ev_signal_start(loop, &sigterm);
  ev_signal_start(loop, &sigint);
  ev_unref(loop);
  ev_unref(loop);
  ev_prepare ready_w;
  ev_timer wd_w;
  ev_prepare_init(&ready_w, on_ready_check);
  ev_timer_init(&wd_w, on_watchdog, 0., 0.);
  if (getenv("NOTIFY_SOCKET")) {
    ev_prepare_start(loop, &ready_w);
    ev_unref(loop);
    uint64_t wd_us = kt_sd_watchdog_usec();
    if (wd_us) {
      ev_timer_set(&wd_w, 0., wd_us / 2e6);
      ev_timer_start(loop, &wd_w);
      ev_unref(loop);
      kt_log(KT_LOG_INFO, "main", "systemd watchdog: a ping every %.3f s", wd_us / 2e6);
    }
  }

  ev_run(loop, 0);

  if (ev_is_active(&ready_w)) {
    ev_ref(loop);
    ev_prepare_stop(loop, &ready_w);
  }
  if (ev_is_active(&wd_w)) {
    ev_ref(loop);
    ev_timer_stop(loop, &wd_w);
  }
  int fatal = kt_node_fatal(the_node);
  ev_ref(loop);
  ev_ref(loop);
  ev_signal_stop(loop, &sigterm);
  ev_signal_stop(loop, &sigint);
  kt_node_free(the_node); /* first: it answers the health checks still waiting */
  kt_http_free(http);
  kt_tls_reloader_free(reloader);
  for (int i = 0; i < TLS_N; i++)
    kt_tls_ctx_free(tls[i]);
  bool removed = fatal == KT_EMEMBERREMOVED; /* etcd 3.4 exits 0 */
  kt_log(KT_LOG_INFO, "main",
         removed ? "stopped: removed from the cluster"
                 : (fatal ? "stopped on error" : "shutdown complete"));
  kt_config_free(&cfg);
  return fatal && !removed ? 1 : 0;
}
