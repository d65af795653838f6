/* test/unit/config_test.c — flags, KETCH_* env, YAML file, precedence and
 * every validation message of net/config. */
#include "../../net/config.h"
#include "test.h"

#include <stddef.h>
#include <stdlib.h>

/* ---- helpers ---- */

/* Captured warn/info log lines (the config module logs, never prints). */
static char logbuf[8192];
static void capture_sink(int level, const char *module, const char *line) {
  size_t n = strlen(logbuf);
  snprintf(logbuf + n, sizeof logbuf - n, "%d %s %s\n", level, module, line);
}
static void capture_start(void) {
  logbuf[0] = 0;
  kt_log_set_sink(capture_sink);
}
static void capture_stop(void) { kt_log_set_sink(NULL); }

/* Loads with argv = "ketch" + args (NULL-terminated) and envp (may be NULL). */
static int load_v(struct kt_config *c, struct kt_err *e, char **envp, const char *const *args) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = "ketch";
  for (; args && *args; args++)
    argv[argc++] = (char *)*args;
  argv[argc] = NULL;
  memset(e, 0, sizeof *e);
  int rc = kt_config_load(c, argc, argv, envp, e);
  if (e->code != rc)
    kt_test_fail(__FILE__, __LINE__, "rc %d but e->code %d", rc, e->code);
  return rc;
}
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOARGS ((const char *const[]){NULL})
#define ENV(...) ((char *[]){__VA_ARGS__, NULL})

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    abort();
  fputs(text, f);
  fclose(f);
}

/* Renders the config field that option `name` sets, for table-driven tests. */
static const char *field(const struct kt_config *c, const char *name, char *b, size_t n) {
#define U(f) (snprintf(b, n, "%llu", (unsigned long long)(c->f)), b)
  if (!strcmp(name, "name"))
    return c->name;
  if (!strcmp(name, "data-dir"))
    return c->data_dir;
  if (!strcmp(name, "listen-client-urls"))
    return c->listen_client_urls.raw;
  if (!strcmp(name, "advertise-client-urls"))
    return c->advertise_client_urls.raw;
  if (!strcmp(name, "listen-peer-urls"))
    return c->listen_peer_urls.raw;
  if (!strcmp(name, "initial-advertise-peer-urls"))
    return c->initial_advertise_peer_urls.raw;
  if (!strcmp(name, "listen-metrics-urls"))
    return c->listen_metrics_urls.raw;
  if (!strcmp(name, "initial-cluster"))
    return c->initial_cluster;
  if (!strcmp(name, "initial-cluster-token"))
    return c->initial_cluster_token;
  if (!strcmp(name, "initial-cluster-state"))
    return c->initial_cluster_state == KT_CLUSTER_NEW ? "new" : "existing";
  if (!strcmp(name, "snapshot-count"))
    return U(snapshot_count);
  if (!strcmp(name, "heartbeat-interval"))
    return U(heartbeat_interval_ms);
  if (!strcmp(name, "election-timeout"))
    return U(election_timeout_ms);
  if (!strcmp(name, "quota-backend-bytes"))
    return U(quota_backend_bytes);
  if (!strcmp(name, "max-request-bytes"))
    return U(max_request_bytes);
  if (!strcmp(name, "max-txn-ops"))
    return U(max_txn_ops);
  if (!strcmp(name, "auto-compaction-mode"))
    return c->auto_compaction_mode == KT_COMPACT_PERIODIC ? "periodic" : "revision";
  if (!strcmp(name, "auto-compaction-retention"))
    return c->auto_compaction_retention;
  if (!strcmp(name, "force-new-cluster"))
    return c->force_new_cluster ? "true" : "false";
  if (!strcmp(name, "log-level"))
    return U(log_level);
  static const struct {
    const char *n;
    size_t off;
  } strs[] = {
      {"cert-file", offsetof(struct kt_config, client_tls.cert_file)},
      {"key-file", offsetof(struct kt_config, client_tls.key_file)},
      {"trusted-ca-file", offsetof(struct kt_config, client_tls.trusted_ca_file)},
      {"client-crl-file", offsetof(struct kt_config, client_tls.crl_file)},
      {"client-cert-allowed-hostname", offsetof(struct kt_config, client_tls.allowed_hostname)},
      {"peer-cert-file", offsetof(struct kt_config, peer_tls.cert_file)},
      {"peer-key-file", offsetof(struct kt_config, peer_tls.key_file)},
      {"peer-trusted-ca-file", offsetof(struct kt_config, peer_tls.trusted_ca_file)},
      {"peer-crl-file", offsetof(struct kt_config, peer_tls.crl_file)},
      {"peer-cert-allowed-cn", offsetof(struct kt_config, peer_tls.allowed_cn)},
      {"peer-cert-allowed-hostname", offsetof(struct kt_config, peer_tls.allowed_hostname)},
      {"cipher-suites", offsetof(struct kt_config, cipher_suites)},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(strs); i++)
    if (!strcmp(name, strs[i].n)) {
      const char *v = *(const char *const *)((const char *)c + strs[i].off);
      return v ? v : "(null)";
    }
  if (!strcmp(name, "client-cert-auth"))
    return c->client_tls.client_cert_auth ? "true" : "false";
  if (!strcmp(name, "peer-client-cert-auth"))
    return c->peer_tls.client_cert_auth ? "true" : "false";
  if (!strcmp(name, "auto-tls"))
    return c->client_tls.auto_tls ? "true" : "false";
  if (!strcmp(name, "peer-auto-tls"))
    return c->peer_tls.auto_tls ? "true" : "false";
  if (!strcmp(name, "tls-min-version"))
    return U(tls_min_version);
  if (!strcmp(name, "tls-max-version"))
    return U(tls_max_version);
  return "?";
#undef U
}

/* One non-default value per option, and how `field` renders it. The extra
 * flags keep the result valid (e.g. a renamed member needs its cluster). */
static const struct {
  const char *flag, *value, *want;
} cases[] = {
    {"name", "n1", "n1"},
    {"data-dir", "/var/lib/k", "/var/lib/k"},
    {"listen-client-urls", "http://127.0.0.1:7001,http://localhost:7002",
     "http://127.0.0.1:7001,http://localhost:7002"},
    {"advertise-client-urls", "http://10.0.0.1:7001", "http://10.0.0.1:7001"},
    {"listen-peer-urls", "http://127.0.0.1:7003", "http://127.0.0.1:7003"},
    {"initial-cluster-token", "tok", "tok"},
    {"initial-cluster-state", "existing", "existing"},
    {"snapshot-count", "5", "5"},
    {"heartbeat-interval", "50", "50"},
    {"election-timeout", "2000", "2000"},
    {"quota-backend-bytes", "1048576", "1048576"},
    {"max-request-bytes", "1024", "1024"},
    {"max-txn-ops", "7", "7"},
    {"auto-compaction-mode", "revision", "revision"},
    {"auto-compaction-retention", "2h", "2h"},
    {"force-new-cluster", "true", "true"},
    {"listen-metrics-urls", "http://127.0.0.1:7009", "http://127.0.0.1:7009"},
    {"log-level", "debug", "0"},
    {"trusted-ca-file", "/etc/k/ca.pem", "/etc/k/ca.pem"},
    {"client-crl-file", "/etc/k/crl.pem", "/etc/k/crl.pem"},
    {"client-cert-allowed-hostname", "c.example", "c.example"},
    {"client-cert-auth", "true", "true"},
    {"auto-tls", "true", "true"},
    {"peer-trusted-ca-file", "/etc/k/pca.pem", "/etc/k/pca.pem"},
    {"peer-crl-file", "/etc/k/pcrl.pem", "/etc/k/pcrl.pem"},
    {"peer-cert-allowed-cn", "member", "member"},
    {"peer-cert-allowed-hostname", "m.example", "m.example"},
    {"peer-client-cert-auth", "true", "true"},
    {"peer-auto-tls", "true", "true"},
    {"cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
     "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
    {"tls-min-version", "TLS1.3", "13"},
};

/* ---- defaults ---- */

TEST(config_defaults) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, NOARGS), 0);
  CHECK_STR(c.name, "default");
  CHECK_STR(c.data_dir, "default.ketch");
  CHECK_STR(c.listen_client_urls.raw, "http://127.0.0.1:2479");
  CHECK_EQ(c.listen_client_urls.n, 1);
  CHECK_EQ(c.listen_client_urls.v[0].scheme, KT_URL_HTTP);
  CHECK_STR(c.listen_client_urls.v[0].host, "127.0.0.1");
  CHECK_EQ(c.listen_client_urls.v[0].port, 2479);
  CHECK_STR(c.advertise_client_urls.raw, "http://127.0.0.1:2479");
  CHECK_STR(c.listen_peer_urls.raw, "http://127.0.0.1:2480");
  CHECK_EQ(c.listen_peer_urls.v[0].port, 2480);
  CHECK_STR(c.initial_advertise_peer_urls.raw, "http://127.0.0.1:2480");
  CHECK_STR(c.initial_cluster, "default=http://127.0.0.1:2480");
  CHECK_EQ(c.initial_cluster_n, 1);
  CHECK_STR(c.initial_cluster_peers[0].name, "default");
  CHECK_EQ(c.initial_cluster_peers[0].url.port, 2480);
  CHECK_STR(c.initial_cluster_token, "ketch-cluster");
  CHECK_EQ(c.initial_cluster_state, KT_CLUSTER_NEW);
  CHECK_EQ(c.snapshot_count, 10000);
  CHECK_EQ(c.heartbeat_interval_ms, 100);
  CHECK_EQ(c.election_timeout_ms, 1000);
  CHECK_EQ(c.quota_backend_bytes, 2ull << 30);
  CHECK_EQ(c.max_request_bytes, 1572864);
  CHECK_EQ(c.max_txn_ops, 128);
  CHECK_EQ(c.auto_compaction_mode, KT_COMPACT_PERIODIC);
  CHECK_STR(c.auto_compaction_retention, "0");
  CHECK_EQ(c.auto_compaction_retention_ms, 0);
  CHECK_EQ(c.force_new_cluster, false);
  CHECK_EQ(c.listen_metrics_urls.n, 0);
  CHECK_EQ(c.log_level, KT_LOG_INFO);
  CHECK(c.config_file == NULL);
  CHECK(!c.show_help && !c.show_version);
  kt_config_free(&c);
}

TEST(config_name_drives_derived_defaults) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--name", "infra1")), 0);
  CHECK_STR(c.data_dir, "infra1.ketch");
  CHECK_STR(c.initial_cluster, "infra1=http://127.0.0.1:2480");
  kt_config_free(&c);
  /* Several advertised peer URLs give several initial-cluster entries. */
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--name=a", "--initial-advertise-peer-urls",
                       "http://127.0.0.1:7001,http://127.0.0.2:7001")),
           0);
  CHECK_STR(c.initial_cluster, "a=http://127.0.0.1:7001,a=http://127.0.0.2:7001");
  CHECK_EQ(c.initial_cluster_n, 2);
  kt_config_free(&c);
}

/* ---- each flag in both forms, and as KETCH_* ---- */

TEST(config_each_flag_both_forms_and_env) {
  for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
    char buf[64], eq[256], env[256], en[64];
    snprintf(buf, sizeof buf, "--%s", cases[i].flag);
    snprintf(eq, sizeof eq, "--%s=%s", cases[i].flag, cases[i].value);
    size_t j = (size_t)snprintf(en, sizeof en, "KETCH_");
    for (const char *p = cases[i].flag; *p; p++)
      en[j++] = *p == '-' ? '_' : (char)(*p - 'a' + 'A');
    en[j] = 0;
    snprintf(env, sizeof env, "%s=%s", en, cases[i].value);
    for (int form = 0; form < 3; form++) {
      struct kt_config c;
      struct kt_err e;
      int rc;
      bool boolean = !strcmp(cases[i].flag, "force-new-cluster") ||
                     strstr(cases[i].flag, "auto-tls") || strstr(cases[i].flag, "cert-auth");
      if (form == 0 && boolean)
        rc = load_v(&c, &e, NULL, ARGS(buf)); /* a boolean alone means true */
      else if (form == 0)
        rc = load_v(&c, &e, NULL, ARGS(buf, cases[i].value));
      else if (form == 1)
        rc = load_v(&c, &e, NULL, ARGS(eq));
      else
        rc = load_v(&c, &e, ENV(env), NOARGS);
      if (rc)
        kt_test_fail(__FILE__, __LINE__, "%s form %d: %s", cases[i].flag, form, e.msg);
      char b[64];
      const char *got = rc ? "(error)" : field(&c, cases[i].flag, b, sizeof b);
      if (strcmp(got, cases[i].want) != 0)
        kt_test_fail(__FILE__, __LINE__, "%s form %d: got \"%s\" want \"%s\"", cases[i].flag, form,
                     got, cases[i].want);
      bool bad = rc || strcmp(got, cases[i].want) != 0;
      kt_config_free(&c);
      if (bad)
        return;
    }
  }
}

TEST(config_single_dash_and_last_wins) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("-snapshot-count", "7", "--snapshot-count=9")), 0);
  CHECK_EQ(c.snapshot_count, 9);
  kt_config_free(&c);
}

TEST(config_booleans) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--force-new-cluster")), 0);
  CHECK_EQ(c.force_new_cluster, true);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--force-new-cluster=true")), 0);
  CHECK_EQ(c.force_new_cluster, true);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--force-new-cluster=false")), 0);
  CHECK_EQ(c.force_new_cluster, false);
  kt_config_free(&c);
  /* Env true, flag false: the flag wins. */
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_FORCE_NEW_CLUSTER=1"), ARGS("--force-new-cluster=0")), 0);
  CHECK_EQ(c.force_new_cluster, false);
  kt_config_free(&c);
  /* A boolean never takes the next argument (Go's flag rule). */
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--force-new-cluster", "false")), KT_EINVAL);
  CHECK_STR(e.msg, "unexpected argument \"false\"");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--force-new-cluster=maybe")), KT_EINVAL);
  CHECK_STR(e.msg, "--force-new-cluster: invalid value \"maybe\" (want true or false)");
  kt_config_free(&c);
}

TEST(config_flag_overrides_env) {
  struct kt_config c;
  struct kt_err e;
  capture_start();
  int rc = load_v(&c, &e, ENV("PATH=/bin", "KETCH_NAME=envname", "KETCH_SNAPSHOT_COUNT=77"),
                  ARGS("--name", "flagname"));
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK_STR(c.name, "flagname");
  CHECK_STR(c.data_dir, "flagname.ketch");
  CHECK_EQ(c.snapshot_count, 77);
  CHECK(strstr(logbuf, "environment variable KETCH_NAME is shadowed by the command-line flag "
                       "--name") != NULL);
  kt_config_free(&c);
}

TEST(config_env_unknown_and_errors) {
  struct kt_config c;
  struct kt_err e;
  capture_start();
  int rc = load_v(&c, &e, ENV("KETCH_BOGUS=1", "KETCHUP=2"), NOARGS);
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK(strstr(logbuf, "unrecognized environment variable KETCH_BOGUS=1") != NULL);
  CHECK(strstr(logbuf, "KETCHUP") == NULL);
  kt_config_free(&c);
  /* A bad env value names the variable. */
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_MAX_TXN_OPS=lots"), NOARGS), KT_EINVAL);
  CHECK_STR(e.msg, "KETCH_MAX_TXN_OPS: invalid value \"lots\" (want an integer from 1 to 65536)");
  kt_config_free(&c);
  /* ...unless a flag shadows it. */
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_MAX_TXN_OPS=lots"), ARGS("--max-txn-ops=3")), 0);
  CHECK_EQ(c.max_txn_ops, 3);
  kt_config_free(&c);
}

/* ---- YAML ---- */

static const char full_yaml[] = "# an etcd-style config file\n"
                                "name: 'y1'\n"
                                "data-dir: /tmp/y1-data\n"
                                "listen-client-urls: http://127.0.0.1:6001,http://[::1]:6002\n"
                                "advertise-client-urls: http://127.0.0.1:6001\n"
                                "listen-peer-urls: http://127.0.0.1:6003\n"
                                "initial-advertise-peer-urls: http://127.0.0.1:6003\n"
                                "initial-cluster: y1=http://127.0.0.1:6003,y2=http://h2:6003\n"
                                "initial-cluster-token: \"tok-y\"\n"
                                "initial-cluster-state: existing\n"
                                "snapshot-count: 123\n"
                                "heartbeat-interval: 20\n"
                                "election-timeout: 200\n"
                                "quota-backend-bytes: 4096\n"
                                "max-request-bytes: 2048\n"
                                "max-txn-ops: 64\n"
                                "auto-compaction-mode: periodic\n"
                                "auto-compaction-retention: \"30m\"\n"
                                "force-new-cluster: true\n"
                                "listen-metrics-urls: http://127.0.0.1:6009\n"
                                "log-level: warn\n"
                                "wal-dir:\n"
                                "enable-v2: false\n"
                                "client-transport-security:\n"
                                "  cert-file: /etc/k/c.pem\n"
                                "  key-file: /etc/k/c-key.pem\n"
                                "  client-cert-auth: true\n"
                                "  trusted-ca-file: /etc/k/ca.pem\n"
                                "  auto-tls: false\n"
                                "  crl-file: /etc/k/crl.pem\n"
                                "peer-transport-security:\n"
                                "  cert-file: /etc/k/p.pem\n"
                                "  key-file: /etc/k/p-key.pem\n"
                                "  client-cert-auth: true\n"
                                "  trusted-ca-file:\n"
                                "  auto-tls: false\n"
                                "cipher-suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,\n"
                                "                TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n";

static int check_full_yaml(const struct kt_config *c) {
  return !strcmp(c->name, "y1") && !strcmp(c->data_dir, "/tmp/y1-data") &&
         c->listen_client_urls.n == 2 && !strcmp(c->listen_client_urls.v[1].host, "::1") &&
         c->listen_client_urls.v[1].port == 6002 &&
         !strcmp(c->advertise_client_urls.raw, "http://127.0.0.1:6001") &&
         c->listen_peer_urls.v[0].port == 6003 && c->initial_cluster_n == 2 &&
         !strcmp(c->initial_cluster_peers[1].name, "y2") &&
         !strcmp(c->initial_cluster_peers[1].url.host, "h2") &&
         !strcmp(c->initial_cluster_token, "tok-y") &&
         c->initial_cluster_state == KT_CLUSTER_EXISTING && c->snapshot_count == 123 &&
         c->heartbeat_interval_ms == 20 && c->election_timeout_ms == 200 &&
         c->quota_backend_bytes == 4096 && c->max_request_bytes == 2048 && c->max_txn_ops == 64 &&
         c->auto_compaction_retention_ms == 30 * 60000 && c->force_new_cluster &&
         c->listen_metrics_urls.n == 1 && c->log_level == KT_LOG_WARN &&
         !strcmp(c->client_tls.cert_file, "/etc/k/c.pem") &&
         !strcmp(c->client_tls.key_file, "/etc/k/c-key.pem") && c->client_tls.client_cert_auth &&
         !strcmp(c->client_tls.trusted_ca_file, "/etc/k/ca.pem") && !c->client_tls.auto_tls &&
         !strcmp(c->peer_tls.cert_file, "/etc/k/p.pem") && c->peer_tls.client_cert_auth &&
         !c->peer_tls.trusted_ca_file &&
         !strcmp(c->cipher_suites, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                                   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
}

TEST(config_yaml_file) {
  char path[512];
  snprintf(path, sizeof path, "%s/ketch.yml", kt_test_tmpdir());
  write_file(path, full_yaml);
  struct kt_config c;
  struct kt_err e;
  capture_start();
  int rc = load_v(&c, &e, NULL, ARGS("--config-file", path));
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK(check_full_yaml(&c));
  CHECK_STR(c.config_file, path);
  /* Unknown keys (etcd's other settings) warn and are ignored. */
  CHECK(strstr(logbuf, "unknown key \"enable-v2\" ignored") != NULL);
  /* etcd's TLS maps are read; a key etcd 3.4 does not have there warns. */
  CHECK(strstr(logbuf, "unknown key \"crl-file\" in client-transport-security ignored") != NULL);
  kt_config_free(&c);
  /* KETCH_CONFIG_FILE names it as well. */
  char env[600];
  snprintf(env, sizeof env, "KETCH_CONFIG_FILE=%s", path);
  capture_start();
  rc = load_v(&c, &e, ENV(env), NOARGS);
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK(check_full_yaml(&c));
  kt_config_free(&c);
}

TEST(config_file_precedence) {
  char path[512];
  snprintf(path, sizeof path, "%s/p.yml", kt_test_tmpdir());
  write_file(path, "name: filename\nsnapshot-count: 42\n");
  struct kt_config c;
  struct kt_err e;
  /* etcd 3.4: a config file takes over; flags and env are ignored. */
  capture_start();
  int rc = load_v(&c, &e, ENV("KETCH_MAX_TXN_OPS=5", "KETCH_NAME=envname"),
                  ARGS("--name", "flagname", "--config-file", path, "--heartbeat-interval=10"));
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK_STR(c.name, "filename");
  CHECK_STR(c.data_dir, "filename.ketch");
  CHECK_EQ(c.snapshot_count, 42);
  CHECK_EQ(c.max_txn_ops, 128);
  CHECK_EQ(c.heartbeat_interval_ms, 100);
  CHECK(strstr(logbuf, "flag --name ignored because a config file is given") != NULL);
  CHECK(strstr(logbuf, "loading server configuration from") != NULL);
  kt_config_free(&c);
  /* The flag beats KETCH_CONFIG_FILE. */
  char other[512], env[600];
  snprintf(other, sizeof other, "%s/other.yml", kt_test_tmpdir());
  write_file(other, "name: othername\n");
  snprintf(env, sizeof env, "KETCH_CONFIG_FILE=%s", other);
  capture_start();
  rc = load_v(&c, &e, ENV(env), ARGS("--config-file=" /* joined below */));
  capture_stop();
  CHECK_EQ(rc, KT_EINVAL); /* an empty --config-file= is an error, not "no file" */
  CHECK_STR(e.msg, "--config-file: invalid value \"\" (want a non-empty string)");
  kt_config_free(&c);
  capture_start();
  rc = load_v(&c, &e, ENV(env), ARGS("--config-file", path));
  capture_stop();
  CHECK_EQ(rc, 0);
  CHECK_STR(c.name, "filename");
  kt_config_free(&c);
  /* Ignored flags are still type-checked, as etcd's flag parser does. */
  capture_start();
  rc = load_v(&c, &e, NULL, ARGS("--config-file", path, "--snapshot-count", "abc"));
  capture_stop();
  CHECK_EQ(rc, KT_EINVAL);
  CHECK_STR(e.msg, "--snapshot-count: invalid value \"abc\" (want a positive integer)");
  kt_config_free(&c);
}

static int yaml(struct kt_config *c, struct kt_err *e, const char *text) {
  memset(e, 0, sizeof *e);
  capture_start();
  int rc = kt_config_load_yaml(c, "k.yml", text, strlen(text), e);
  capture_stop();
  return rc;
}

TEST(config_yaml_shapes_and_errors) {
  struct kt_config c;
  struct kt_err e;
  /* A YAML list of URLs is accepted as well as one comma-separated string. */
  CHECK_EQ(yaml(&c, &e,
                "listen-client-urls:\n  - http://127.0.0.1:1\n  - http://127.0.0.1:2\n"
                "advertise-client-urls: [http://127.0.0.1:1]\n"),
           0);
  CHECK_STR(c.listen_client_urls.raw, "http://127.0.0.1:1,http://127.0.0.1:2");
  CHECK_EQ(c.listen_client_urls.n, 2);
  kt_config_free(&c);
  /* An empty value keeps the default (etcd's sample file has many). */
  CHECK_EQ(yaml(&c, &e, "name:\ninitial-cluster: ~\nsnapshot-count:\n"), 0);
  CHECK_STR(c.name, "default");
  CHECK_EQ(c.snapshot_count, 10000);
  kt_config_free(&c);
  /* Empty file: all defaults. */
  CHECK_EQ(yaml(&c, &e, ""), 0);
  CHECK_STR(c.name, "default");
  kt_config_free(&c);

  CHECK_EQ(yaml(&c, &e, "snapshot-count: abc\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: snapshot-count: invalid value \"abc\" (want a positive integer)");
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "name: a\nname: b\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: name: line 2: key defined twice");
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "name: a\n  bad: [\n"), KT_EINVAL);
  CHECK(strncmp(e.msg, "k.yml: line ", 12) == 0);
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "- a\n- b\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: want a mapping of key: value at the top level");
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "name:\n  x: 1\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: name: line 2: want a single value");
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "snapshot-count: [1, 2]\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: snapshot-count: line 1: want a single value");
  kt_config_free(&c);
  CHECK_EQ(yaml(&c, &e, "auto-compaction-retention: 1x\n"), KT_EINVAL);
  CHECK_STR(e.msg, "k.yml: auto-compaction-retention: invalid value \"1x\" (want hours, or a "
                   "duration like \"1h\" or \"30m\")");
  kt_config_free(&c);
  /* config-file is not a key of the file itself: warned and ignored. */
  CHECK_EQ(yaml(&c, &e, "config-file: x.yml\n"), 0);
  CHECK(strstr(logbuf, "unknown key \"config-file\" ignored") != NULL);
  kt_config_free(&c);

  /* A missing file is an I/O error naming the path. */
  char path[512];
  snprintf(path, sizeof path, "%s/missing.yml", kt_test_tmpdir());
  capture_start();
  int rc = load_v(&c, &e, NULL, ARGS("--config-file", path));
  capture_stop();
  CHECK_EQ(rc, KT_EIO);
  CHECK(strstr(e.msg, "--config-file: cannot open") != NULL);
  CHECK(strstr(e.msg, "missing.yml") != NULL);
  kt_config_free(&c);
}

/* ---- validation: every error's code and message ---- */

TEST(config_validation_messages) {
  static const struct {
    const char *a[6];
    const char *msg;
  } bad[] = {
      {{"--foo"}, "unknown flag: --foo"},
      {{"--foo=1"}, "unknown flag: --foo"},
      {{"--name"}, "--name: missing value"},
      {{"stray"}, "unexpected argument \"stray\""},
      {{"--", "x"}, "unexpected argument \"x\""},
      {{"---name=x"}, "bad flag syntax: ---name=x"},
      {{"--snapshot-count", "abc"},
       "--snapshot-count: invalid value \"abc\" (want a positive integer)"},
      {{"--snapshot-count=0"}, "--snapshot-count: invalid value \"0\" (want a positive integer)"},
      {{"--snapshot-count=-5"}, "--snapshot-count: invalid value \"-5\" (want a positive integer)"},
      {{"--snapshot-count=99999999999999999999"},
       "--snapshot-count: invalid value \"99999999999999999999\" (want a positive integer)"},
      {{"--heartbeat-interval=0"},
       "--heartbeat-interval: invalid value \"0\" (want an integer from 1 to 50000)"},
      {{"--election-timeout=50001"},
       "--election-timeout: invalid value \"50001\" (want an integer from 1 to 50000)"},
      {{"--heartbeat-interval", "300"},
       "--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"},
      {{"--election-timeout", "499"},
       "--election-timeout[499ms] should be at least as 5 times as --heartbeat-interval[100ms]"},
      {{"--quota-backend-bytes=1099511627777"},
       "--quota-backend-bytes: invalid value \"1099511627777\" (want an integer from 0 to "
       "1099511627776)"},
      {{"--max-request-bytes=67108865"},
       "--max-request-bytes: invalid value \"67108865\" (want an integer from 1 to 67108864)"},
      {{"--max-request-bytes=0"},
       "--max-request-bytes: invalid value \"0\" (want an integer from 1 to 67108864)"},
      {{"--max-txn-ops= 5"},
       "--max-txn-ops: invalid value \" 5\" (want an integer from 1 to 65536)"},
      {{"--initial-cluster-state", "old"},
       "--initial-cluster-state: invalid value \"old\" (want new or existing)"},
      {{"--log-level=verbose"},
       "--log-level: invalid value \"verbose\" (want debug, info, warn or error)"},
      {{"--auto-compaction-mode=hourly"},
       "--auto-compaction-mode: invalid value \"hourly\" (want periodic or revision)"},
      {{"--auto-compaction-retention=-1h"},
       "--auto-compaction-retention: invalid value \"-1h\" (want hours, or a duration like "
       "\"1h\" or \"30m\")"},
      {{"--auto-compaction-mode=revision", "--auto-compaction-retention=1h"},
       "--auto-compaction-retention: invalid value \"1h\" (want a revision count in revision "
       "mode)"},
      {{"--name="}, "--name: invalid value \"\" (want a non-empty string)"},
      {{"--name=a,b"},
       "--name: invalid value \"a,b\" (want a name without ',', '=' or control characters)"},
      {{"--data-dir="}, "--data-dir: invalid value \"\" (want a non-empty string)"},
      {{"--initial-cluster-token="},
       "--initial-cluster-token: invalid value \"\" (want a non-empty string)"},
      {{"--listen-client-urls="},
       "--listen-client-urls: invalid value \"\" (want at least one URL)"},
      {{"--listen-client-urls=https://127.0.0.1:2479"},
       "TLS key/cert (--cert-file, --key-file) must be provided for client url "
       "https://127.0.0.1:2479 with HTTPS scheme (or --auto-tls)"},
      {{"--listen-peer-urls=https://127.0.0.1:2480", "--initial-cluster",
        "default=https://127.0.0.1:2480"},
       "TLS key/cert (--peer-cert-file, --peer-key-file) must be provided for peer url "
       "https://127.0.0.1:2480 with HTTPS scheme (or --peer-auto-tls)"},
      {{"--cert-file=/x/c.pem"},
       "--cert-file and --key-file go together (only --cert-file is given)"},
      {{"--peer-key-file=/x/k.pem"},
       "--peer-cert-file and --peer-key-file go together (only --peer-key-file is given)"},
      {{"--tls-min-version=TLS1.1"},
       "--tls-min-version: invalid value \"TLS1.1\" (want TLS1.2 or TLS1.3)"},
      {{"--tls-min-version=TLS1.3", "--tls-max-version=TLS1.2"},
       "--tls-min-version TLS1.3 is above --tls-max-version TLS1.2"},
      {{"--tls-min-version=TLS1.3", "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
       "cipher suites cannot be configured when only TLS1.3 is enabled"},
      {{"--peer-cert-allowed-cn=a", "--peer-cert-allowed-hostname=b"},
       "--peer-cert-allowed-cn and --peer-cert-allowed-hostname are mutually exclusive"},
      {{"--listen-peer-urls=unixs://x"},
       "--listen-peer-urls: invalid URL \"unixs://x\" (TLS on unix sockets is not supported; use "
       "https://host:port)"},
      {{"--listen-client-urls=127.0.0.1:2479"},
       "--listen-client-urls: invalid URL \"127.0.0.1:2479\" (want http://host:port)"},
      {{"--listen-client-urls=ftp://a:1"},
       "--listen-client-urls: invalid URL \"ftp://a:1\" (unsupported scheme; want http, https "
       "or unix)"},
      {{"--listen-client-urls=http://a"},
       "--listen-client-urls: invalid URL \"http://a\" (missing port; want http://host:port)"},
      {{"--listen-client-urls=http://a:0"},
       "--listen-client-urls: invalid URL \"http://a:0\" (want a port from 1 to 65535)"},
      {{"--listen-client-urls=http://a:65536"},
       "--listen-client-urls: invalid URL \"http://a:65536\" (want a port from 1 to 65535)"},
      {{"--listen-client-urls=http://a:1x"},
       "--listen-client-urls: invalid URL \"http://a:1x\" (want a port from 1 to 65535)"},
      {{"--listen-client-urls=http://a:1/v3"},
       "--listen-client-urls: invalid URL \"http://a:1/v3\" (URL must not contain a path)"},
      {{"--listen-client-urls=http://:1"},
       "--listen-client-urls: invalid URL \"http://:1\" (missing host)"},
      {{"--listen-client-urls=http://u@a:1"},
       "--listen-client-urls: invalid URL \"http://u@a:1\" (user info not allowed)"},
      {{"--listen-client-urls=http://::1:5"},
       "--listen-client-urls: invalid URL \"http://::1:5\" (an IPv6 address needs [brackets])"},
      {{"--listen-client-urls=http://[::1:5"},
       "--listen-client-urls: invalid URL \"http://[::1:5\" (missing ']' in IPv6 address)"},
      {{"--listen-client-urls=http://[zz]:5"},
       "--listen-client-urls: invalid URL \"http://[zz]:5\" (bad IPv6 address)"},
      {{"--listen-client-urls=unix://"},
       "--listen-client-urls: invalid URL \"unix://\" (empty unix socket path)"},
      {{"--listen-client-urls=http://a:1,,http://b:2"},
       "--listen-client-urls: invalid value \"http://a:1,,http://b:2\" (empty URL in list)"},
      {{"--listen-client-urls=http://a:1,"},
       "--listen-client-urls: invalid value \"http://a:1,\" (empty URL in list)"},
      {{"--listen-client-urls", "http://0.0.0.0:2479"},
       "--advertise-client-urls is required when --listen-client-urls is set to a wildcard "
       "address (http://0.0.0.0:2479)"},
      {{"--listen-peer-urls", "http://[::]:2480"},
       "--initial-advertise-peer-urls is required when --listen-peer-urls is set to a wildcard "
       "address (http://[::]:2480)"},
      {{"--initial-cluster", "x"},
       "--initial-cluster: invalid value \"x\" (want name=url pairs separated by commas)"},
      {{"--initial-cluster", "=http://a:1"},
       "--initial-cluster: invalid value \"=http://a:1\" (want name=url pairs separated by "
       "commas)"},
      {{"--initial-cluster", "default=https://a:1"},
       "--initial-cluster has https://a:1 but missing from "
       "--initial-advertise-peer-urls=http://127.0.0.1:2480"},
      {{"--initial-cluster", "other=http://127.0.0.1:2480"},
       "couldn't find local name \"default\" in the initial cluster configuration "
       "(--initial-cluster=other=http://127.0.0.1:2480)"},
      {{"--initial-cluster", "default=http://127.0.0.1:9999"},
       "--initial-cluster has http://127.0.0.1:9999 but missing from "
       "--initial-advertise-peer-urls=http://127.0.0.1:2480"},
      {{"--initial-advertise-peer-urls", "http://127.0.0.1:2480,http://127.0.0.2:2480",
        "--initial-cluster", "default=http://127.0.0.1:2480"},
       "--initial-advertise-peer-urls has http://127.0.0.2:2480 but missing from "
       "--initial-cluster=default=http://127.0.0.1:2480"},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
    const char *args[7] = {0};
    for (int j = 0; j < 6 && bad[i].a[j]; j++)
      args[j] = bad[i].a[j];
    struct kt_config c;
    struct kt_err e;
    int rc = load_v(&c, &e, NULL, args);
    kt_config_free(&c);
    if (rc != KT_EINVAL || strcmp(e.msg, bad[i].msg) != 0) {
      kt_test_fail(__FILE__, __LINE__, "case %zu (%s): rc %d msg \"%s\", want \"%s\"", i,
                   bad[i].a[0], rc, e.msg, bad[i].msg);
      return;
    }
  }
}

TEST(config_value_too_long) {
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  char arg[5100];
  snprintf(arg, sizeof arg, "--name=%s", big);
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, ARGS(arg)), KT_EINVAL);
  CHECK_STR(e.msg, "--name: value too long (4999 bytes, max 4096)");
  kt_config_free(&c);
  /* Too many URLs in one list. */
  char list[4000] = "";
  for (int i = 0; i < 17; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%shttp://127.0.0.1:%d", i ? "," : "",
             7000 + i);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--listen-metrics-urls", list)), KT_EINVAL);
  CHECK_STR(e.msg, "--listen-metrics-urls: too many URLs (max 16)");
  kt_config_free(&c);
}

/* ---- URLs and initial-cluster ---- */

TEST(config_urls) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--listen-client-urls",
                       " http://localhost:1 , http://[fe80::1%25]:2 ,unix://sock/k.sock",
                       "--advertise-client-urls=HTTP://127.0.0.1:1")),
           KT_EINVAL); /* '%' is not a valid IPv6 character here */
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--listen-client-urls",
                       " http://localhost:1 , http://[fe80::1]:2 ,unix:///tmp/k.sock",
                       "--advertise-client-urls=HTTP://127.0.0.1:1")),
           0);
  const struct kt_url_list *l = &c.listen_client_urls;
  CHECK_EQ(l->n, 3);
  CHECK_STR(l->v[0].raw, "http://localhost:1");
  CHECK_STR(l->v[0].host, "localhost");
  CHECK_EQ(l->v[0].port, 1);
  CHECK_STR(l->v[1].host, "fe80::1");
  CHECK_EQ(l->v[1].port, 2);
  CHECK_EQ(l->v[2].scheme, KT_URL_UNIX);
  CHECK_STR(l->v[2].host, "/tmp/k.sock");
  CHECK_EQ(l->v[2].port, 0);
  CHECK_EQ(c.advertise_client_urls.v[0].scheme, KT_URL_HTTP);
  kt_config_free(&c);
}

TEST(config_listen_urls_become_advertised) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--name", "m1", "--listen-client-urls", "http://127.0.0.1:7101",
                       "--listen-peer-urls", "http://127.0.0.1:7102")),
           0);
  CHECK_STR(c.advertise_client_urls.raw, "http://127.0.0.1:7101");
  CHECK_STR(c.initial_advertise_peer_urls.raw, "http://127.0.0.1:7102");
  CHECK_STR(c.initial_cluster, "m1=http://127.0.0.1:7102");
  kt_config_free(&c);
  /* Explicit advertise URLs are kept even with a wildcard listener. */
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--listen-client-urls", "http://0.0.0.0:7101", "--advertise-client-urls",
                       "http://10.1.2.3:7101")),
           0);
  CHECK_STR(c.advertise_client_urls.raw, "http://10.1.2.3:7101");
  CHECK_STR(c.listen_client_urls.v[0].host, "0.0.0.0");
  kt_config_free(&c);
}

TEST(config_initial_cluster_parsing) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--name", "b", "--initial-advertise-peer-urls",
                       "http://127.0.0.2:2480,http://10.0.0.2:2480", "--initial-cluster",
                       "a=http://127.0.0.1:2480,b=http://127.0.0.2:2480,b=http://10.0.0.2:2480,"
                       "c=http://[::1]:2482",
                       "--initial-cluster-state=existing")),
           0);
  CHECK_EQ(c.initial_cluster_n, 4);
  CHECK_STR(c.initial_cluster_peers[0].name, "a");
  CHECK_STR(c.initial_cluster_peers[0].url.host, "127.0.0.1");
  CHECK_STR(c.initial_cluster_peers[1].name, "b");
  CHECK_STR(c.initial_cluster_peers[2].name, "b");
  CHECK_STR(c.initial_cluster_peers[2].url.raw, "http://10.0.0.2:2480");
  CHECK_STR(c.initial_cluster_peers[3].name, "c");
  CHECK_STR(c.initial_cluster_peers[3].url.host, "::1");
  CHECK_EQ(c.initial_cluster_peers[3].url.port, 2482);
  CHECK_EQ(c.initial_cluster_state, KT_CLUSTER_EXISTING);
  kt_config_free(&c);
}

/* ---- durations and retention ---- */

TEST(config_durations) {
  static const struct {
    const char *s;
    uint64_t ms;
  } ok[] = {{"0", 0},          {"0s", 0},         {"1h", 3600000},
            {"30m", 1800000},  {"90s", 90000},    {"1h30m", 5400000},
            {"1.5h", 5400000}, {"250ms", 250},    {"1500us", 1},
            {"999us", 0},      {"+2s", 2000},     {".5s", 500},
            {"2\xc2\xb5s", 0}, {"1m0.5s", 60500}, {"2562047h", 2562047ull * 3600000}};
  for (size_t i = 0; i < KT_ARRAY_LEN(ok); i++) {
    uint64_t ms = 12345;
    if (kt_duration_parse_ms(ok[i].s, &ms) != 0 || ms != ok[i].ms) {
      kt_test_fail(__FILE__, __LINE__, "\"%s\" -> %llu, want %llu", ok[i].s, (unsigned long long)ms,
                   (unsigned long long)ok[i].ms);
      return;
    }
  }
  static const char *const bad[] = {"",  "1",  "h",  "-1h", "1x",       "1h-",
                                    ".", ".s", "1d", "1 h", "2562048h", "99999999999999999999s"};
  for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
    uint64_t ms;
    if (kt_duration_parse_ms(bad[i], &ms) == 0) {
      kt_test_fail(__FILE__, __LINE__, "\"%s\" accepted", bad[i]);
      return;
    }
  }
}

TEST(config_retention) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--auto-compaction-retention", "5")), 0);
  CHECK_EQ(c.auto_compaction_retention_ms, 5 * 3600000ull); /* bare integer = hours */
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--auto-compaction-retention=1h30m")), 0);
  CHECK_EQ(c.auto_compaction_retention_ms, 5400000);
  CHECK_STR(c.auto_compaction_retention, "1h30m");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--auto-compaction-retention=1000", "--auto-compaction-mode=revision")),
           0);
  CHECK_EQ(c.auto_compaction_retention_revs, 1000);
  CHECK_EQ(c.auto_compaction_retention_ms, 0);
  kt_config_free(&c);
  /* The message names where the value came from. */
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_AUTO_COMPACTION_RETENTION=soon"), NOARGS), KT_EINVAL);
  CHECK_STR(e.msg, "KETCH_AUTO_COMPACTION_RETENTION: invalid value \"soon\" (want hours, or a "
                   "duration like \"1h\" or \"30m\")");
  kt_config_free(&c);
}

TEST(config_io_threads) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, NOARGS), 0);
  CHECK_EQ(c.io_threads, KT_CONFIG_THREADS_AUTO);
  /* auto: cores - 1, at most 8; none below 4 cores */
  static const int cores[] = {1, 2, 3, 4, 5, 9, 16, 64}, want[] = {0, 0, 0, 3, 4, 8, 8, 8};
  for (size_t i = 0; i < KT_ARRAY_LEN(cores); i++)
    CHECK_EQ(kt_config_io_threads(&c, cores[i]), (uint32_t)want[i]);
  CHECK(kt_config_io_threads(&c, 0) <= 8);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_IO_THREADS=0"), ARGS("--io-threads", "4")), 0);
  CHECK_EQ(kt_config_io_threads(&c, 16), 4);
  CHECK_EQ(kt_config_io_threads(&c, 2), 4); /* given: as given */
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_IO_THREADS=0"), NOARGS), 0);
  CHECK_EQ(kt_config_io_threads(&c, 16), 0);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--io-threads=65")), KT_EINVAL);
  CHECK_STR(e.msg, "--io-threads: invalid value \"65\" (want auto or an integer from 0 to 64)");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--io-threads", "many")), KT_EINVAL);
  kt_config_free(&c);
}

TEST(config_auth_token) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, NOARGS), 0);
  CHECK(!c.auth_token_signed);
  CHECK_EQ(c.auth_token_ttl_s, 300);
  CHECK_EQ(c.auth_hash_opslimit, 2);
  CHECK_EQ(c.auth_hash_memlimit, 64ull << 20);
  CHECK_EQ(c.auth_hash_threads, 1);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--auth-token", "signed,priv-key=/k/a.pem,pub-key=/k/b.pem,ttl=10m")),
           0);
  CHECK(c.auth_token_signed);
  CHECK_STR(c.auth_token_priv_key, "/k/a.pem");
  CHECK_STR(c.auth_token_pub_key, "/k/b.pem");
  CHECK_EQ(c.auth_token_signed_ttl_s, 600);
  kt_config_free(&c);
  /* etcd's spelling; a verify-only member */
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--auth-token=jwt,pub-key=/k/b.pem,sign-method=EdDSA")), 0);
  CHECK(c.auth_token_signed && !c.auth_token_priv_key);
  CHECK_EQ(c.auth_token_signed_ttl_s, 300);
  kt_config_free(&c);
  static const struct {
    const char *v, *msg;
  } bad[] = {
      {"bcrypt", "--auth-token: invalid value \"bcrypt\" (want simple, or "
                 "signed,priv-key=FILE,pub-key=FILE[,ttl=DURATION])"},
      {"signed", "--auth-token: signed tokens need priv-key=FILE and/or pub-key=FILE"},
      {"jwt,priv-key=a,sign-method=RS256",
       "--auth-token: sign-method \"RS256\" is not supported (ketch signs tokens with Ed25519: "
       "EdDSA)"},
      {"signed,priv-key=a,ttl=1ms", "--auth-token: ttl \"1ms\" is not a duration of 1s or more"},
      {"signed,priv-key=a,colour=red",
       "--auth-token: unknown option \"colour\" (want priv-key, pub-key, ttl or sign-method)"},
      {"signed,priv-key", "--auth-token: option \"priv-key\" is not name=value"},
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
    CHECK_EQ(load_v(&c, &e, NULL, ARGS("--auth-token", bad[i].v)), KT_EINVAL);
    CHECK_STR(e.msg, bad[i].msg);
    kt_config_free(&c);
  }
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_AUTH_HASH_MEMLIMIT=100"), NOARGS), KT_EINVAL);
  CHECK_STR(e.msg, "KETCH_AUTH_HASH_MEMLIMIT: invalid value \"100\" (want an integer from 8192 "
                   "to 4294967296)");
  kt_config_free(&c);
}

/* ---- help, version, usage ---- */

TEST(config_help_version) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_SNAPSHOT_COUNT=bad"), ARGS("--help")), 0);
  CHECK(c.show_help);
  CHECK_STR(c.name, "default");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("-h")), 0);
  CHECK(c.show_help);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--version", "--heartbeat-interval=900")), 0);
  CHECK(c.show_version && !c.show_help);
  kt_config_free(&c);
  /* Unknown flags are still reported. */
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--help", "--nope")), KT_EINVAL);
  CHECK_STR(e.msg, "unknown flag: --nope");
  kt_config_free(&c);
}

TEST(config_usage_lists_every_flag) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  CHECK(f != NULL);
  kt_config_usage(f);
  fclose(f);
  static const char *const want[] = {
      "--name NAME",
      "KETCH_NAME",
      "--data-dir",
      "\"<name>.ketch\"",
      "KETCH_DATA_DIR",
      "--listen-client-urls",
      "default: \"http://127.0.0.1:2479\"; env KETCH_LISTEN_CLIENT_URLS",
      "KETCH_ADVERTISE_CLIENT_URLS",
      "default: \"http://127.0.0.1:2480\"; env KETCH_LISTEN_PEER_URLS",
      "KETCH_INITIAL_ADVERTISE_PEER_URLS",
      "\"<name>=<initial-advertise-peer-urls>\"; env KETCH_INITIAL_CLUSTER",
      "default: \"ketch-cluster\"; env KETCH_INITIAL_CLUSTER_TOKEN",
      "default: \"new\"; env KETCH_INITIAL_CLUSTER_STATE",
      "default: \"10000\"; env KETCH_SNAPSHOT_COUNT",
      "default: \"100\"; env KETCH_HEARTBEAT_INTERVAL",
      "default: \"1000\"; env KETCH_ELECTION_TIMEOUT",
      "default: \"0\"; env KETCH_QUOTA_BACKEND_BYTES",
      "default: \"1572864\"; env KETCH_MAX_REQUEST_BYTES",
      "default: \"128\"; env KETCH_MAX_TXN_OPS",
      "default: \"periodic\"; env KETCH_AUTO_COMPACTION_MODE",
      "default: \"0\"; env KETCH_AUTO_COMPACTION_RETENTION",
      "default: \"false\"; env KETCH_FORCE_NEW_CLUSTER",
      "default: \"\"; env KETCH_LISTEN_METRICS_URLS",
      "default: \"info\"; env KETCH_LOG_LEVEL",
      "--config-file PATH",
      "KETCH_CONFIG_FILE",
      "--version",
      "--help",
  };
  for (size_t i = 0; i < KT_ARRAY_LEN(want); i++) {
    if (!strstr(text, want[i])) {
      kt_test_fail(__FILE__, __LINE__, "usage lacks \"%s\"", want[i]);
      free(text);
      return;
    }
  }
  free(text);
}

/* ---- bootstrap by discovery (--discovery-srv, --discovery-endpoints) ---- */

TEST(config_discovery_flags) {
  struct kt_config c;
  struct kt_err e;
  CHECK_EQ(load_v(&c, &e, NULL, NOARGS), 0);
  CHECK(c.discovery_srv == NULL && c.discovery_endpoints == NULL && c.dns_servers == NULL);
  CHECK_EQ(c.discovery_dial_timeout_ms, 2000);
  CHECK_EQ(c.discovery_request_timeout_ms, 5000);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, ENV("KETCH_DNS_SERVERS=127.0.0.1:5353"),
                  ARGS("--name", "m1", "--discovery-srv", "example.com", "--discovery-srv-name",
                       "prod", "--discovery-srv-etcd-names")),
           0);
  CHECK_STR(c.discovery_srv, "example.com");
  CHECK_STR(c.discovery_srv_name, "prod");
  CHECK_STR(c.dns_servers, "127.0.0.1:5353");
  CHECK(c.discovery_srv_etcd_names);
  CHECK_EQ(c.initial_cluster_n, 0); /* found at start */
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--discovery-endpoints", "127.0.0.1:2479", "--discovery-token", "t1",
                       "--discovery-dial-timeout", "1s")),
           0);
  CHECK_STR(c.discovery_token, "t1");
  CHECK_EQ(c.discovery_dial_timeout_ms, 1000);
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--discovery-srv", "example.com", "--initial-cluster",
                       "default=http://127.0.0.1:2480")),
           KT_EINVAL);
  CHECK_STR(e.msg,
            "--initial-cluster cannot be given with --discovery-srv or --discovery-endpoints");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--discovery-endpoints", "127.0.0.1:2479")), KT_EINVAL);
  CHECK_STR(e.msg, "--discovery-endpoints and --discovery-token go together");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL,
                  ARGS("--discovery-srv", "a", "--discovery-endpoints", "x:1", "--discovery-token",
                       "t")),
           KT_EINVAL);
  CHECK_STR(e.msg, "--discovery-srv and --discovery-endpoints cannot both be given");
  kt_config_free(&c);
  CHECK_EQ(load_v(&c, &e, NULL, ARGS("--discovery-srv", "a", "--discovery-fallback", "proxy")),
           KT_EINVAL);
  CHECK_STR(e.msg, "--discovery-fallback: invalid value \"proxy\" (want exit)");
  kt_config_free(&c);
}
