/* net/config.c — flags, KETCH_* environment and YAML file into struct
 * kt_config. See net/config.h for the precedence rules. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sched.h>
#include <unistd.h>
#include <yaml.h>

/* ---- the option table ---- */

enum opt_kind {
  K_STR,       /* non-empty string */
  K_NAME,      /* non-empty, no ',', '=' or control characters */
  K_URLS,      /* comma-separated URL list */
  K_CLUSTER,   /* name=url,... */
  K_U64,       /* decimal integer in [min, max] */
  K_U32,       /* same, stored in a uint32_t */
  K_BOOL,      /* true/false (and Go's 1/0/t/f, YAML's yes/no/on/off) */
  K_STATE,     /* new|existing */
  K_MODE,      /* periodic|revision */
  K_LEVEL,     /* debug|info|warn|error */
  K_RETENTION, /* raw; parsed once the mode is known */
  K_PATH,      /* --config-file */
  K_DURATION,  /* Go duration ("10m", "300ms"), stored as uint64 ms */
  K_FILE,      /* a file path; empty means none (NULL) */
  K_TLSVER,    /* TLS1.2|TLS1.3, stored as 12 / 13 */
  K_AUTHTOKEN, /* simple | signed,priv-key=F,pub-key=F,ttl=D (also etcd's jwt,...) */
  K_THREADS,   /* auto, or an integer in [min, max]; uint32_t, auto = KT_CONFIG_THREADS_AUTO */
};

enum {
  O_NAME,
  O_DATA_DIR,
  O_LISTEN_CLIENT,
  O_ADVERTISE_CLIENT,
  O_LISTEN_PEER,
  O_ADVERTISE_PEER,
  O_INITIAL_CLUSTER,
  O_CLUSTER_TOKEN,
  O_CLUSTER_STATE,
  O_SNAPSHOT_COUNT,
  O_HEARTBEAT,
  O_ELECTION,
  O_QUOTA,
  O_MAX_REQUEST,
  O_MAX_TXN_OPS,
  O_COMPACT_MODE,
  O_COMPACT_RETENTION,
  O_FORCE_NEW,
  O_WATCH_PROGRESS,
  O_CATCHUP,
  O_LISTEN_METRICS,
  O_LOG_LEVEL,
  O_AUTH_TOKEN,
  O_AUTH_TOKEN_TTL,
  O_AUTH_HASH_OPS,
  O_AUTH_HASH_MEM,
  O_AUTH_HASH_THREADS,
  O_IO_THREADS,
  O_CERT_FILE,
  O_KEY_FILE,
  O_CLIENT_CERT_AUTH,
  O_CLIENT_CRL_FILE,
  O_CLIENT_ALLOWED_HOST,
  O_TRUSTED_CA_FILE,
  O_AUTO_TLS,
  O_PEER_CERT_FILE,
  O_PEER_KEY_FILE,
  O_PEER_CLIENT_CERT_AUTH,
  O_PEER_TRUSTED_CA_FILE,
  O_PEER_ALLOWED_CN,
  O_PEER_ALLOWED_HOST,
  O_PEER_AUTO_TLS,
  O_PEER_CRL_FILE,
  O_CIPHER_SUITES,
  O_TLS_MIN_VERSION,
  O_TLS_MAX_VERSION,
  O_CONFIG_FILE,
  O_DISCOVERY_SRV,
  O_DISCOVERY_SRV_NAME,
  O_DISCOVERY_SRV_ETCD,
  O_DNS_SERVERS,
  O_DISCOVERY_ENDPOINTS,
  O_DISCOVERY_TOKEN,
  O_DISCOVERY_CACERT,
  O_DISCOVERY_CERT,
  O_DISCOVERY_KEY,
  O_DISCOVERY_USER,
  O_DISCOVERY_PASSWORD,
  O_DISCOVERY_DIAL_TIMEOUT,
  O_DISCOVERY_REQUEST_TIMEOUT,
  O_DISCOVERY_FALLBACK,
  O_VERSION,
  O_HELP,
  O_COUNT
};
/* A set of options (one bit each): which were given, which a file named. */
struct optset {
  uint64_t w[2];
};
_Static_assert(O_COUNT <= 128, "struct optset holds 128 options");
static bool optset_has(const struct optset *s, size_t i) { return s->w[i / 64] >> (i % 64) & 1; }
static void optset_add(struct optset *s, size_t i) { s->w[i / 64] |= 1ull << (i % 64); }

#define OPT_NOFILE 1u /* not a YAML key */
#define OPT_EMPTY 2u  /* an empty value is allowed (URL list) */
#define OPT_NOENV 4u  /* no KETCH_* variable (handled specially or none) */

struct opt {
  const char *name;
  int kind;
  size_t off; /* offset in struct kt_config */
  const char *def;
  uint64_t min, max;
  unsigned flags;
  const char *arg;  /* placeholder in the usage text */
  const char *help; /* one line */
};

#define OFF(f) offsetof(struct kt_config, f)
static const struct opt opts[O_COUNT] = {
    [O_NAME] = {"name", K_NAME, OFF(name), "default", 0, 0, 0, "NAME",
                "Human-readable name for this member."},
    [O_DATA_DIR] = {"data-dir", K_STR, OFF(data_dir), NULL, 0, 0, 0, "PATH",
                    "Path to the data directory (default \"<name>.ketch\")."},
    [O_LISTEN_CLIENT] = {"listen-client-urls", K_URLS, OFF(listen_client_urls),
                         "http://127.0.0.1:2479", 0, 0, 0, "URLS",
                         "List of URLs to listen on for client traffic."},
    [O_ADVERTISE_CLIENT] = {"advertise-client-urls", K_URLS, OFF(advertise_client_urls),
                            "http://127.0.0.1:2479", 0, 0, 0, "URLS",
                            "Client URLs to advertise to the cluster (default: the listen "
                            "client URLs when those are given)."},
    [O_LISTEN_PEER] = {"listen-peer-urls", K_URLS, OFF(listen_peer_urls), "http://127.0.0.1:2480",
                       0, 0, 0, "URLS", "List of URLs to listen on for peer traffic."},
    [O_ADVERTISE_PEER] = {"initial-advertise-peer-urls", K_URLS, OFF(initial_advertise_peer_urls),
                          "http://127.0.0.1:2480", 0, 0, 0, "URLS",
                          "This member's peer URLs to advertise to the cluster (default: the "
                          "listen peer URLs when those are given)."},
    [O_INITIAL_CLUSTER] = {"initial-cluster", K_CLUSTER, OFF(initial_cluster), NULL, 0, 0, 0,
                           "NAME=URL,...",
                           "Initial cluster configuration for bootstrapping (default "
                           "\"<name>=<initial-advertise-peer-urls>\")."},
    [O_CLUSTER_TOKEN] = {"initial-cluster-token", K_STR, OFF(initial_cluster_token),
                         "ketch-cluster", 0, 0, 0, "TOKEN",
                         "Initial cluster token for the cluster during bootstrap."},
    [O_CLUSTER_STATE] = {"initial-cluster-state", K_STATE, OFF(initial_cluster_state), "new", 0, 0,
                         0, "new|existing",
                         "Initial cluster state: new, or existing to join a running cluster."},
    [O_SNAPSHOT_COUNT] = {"snapshot-count", K_U64, OFF(snapshot_count), "10000", 1, UINT64_MAX, 0,
                          "N", "Number of committed transactions to trigger a snapshot."},
    [O_HEARTBEAT] = {"heartbeat-interval", K_U32, OFF(heartbeat_interval_ms), "100", 1,
                     KT_CONFIG_MAX_ELECTION_MS, 0, "MS",
                     "Time (in milliseconds) of a heartbeat interval."},
    [O_ELECTION] = {"election-timeout", K_U32, OFF(election_timeout_ms), "1000", 1,
                    KT_CONFIG_MAX_ELECTION_MS, 0, "MS",
                    "Time (in milliseconds) for an election to timeout (>= 5 x "
                    "heartbeat-interval)."},
    [O_QUOTA] = {"quota-backend-bytes", K_U64, OFF(quota_backend_bytes), "0", 0,
                 KT_CONFIG_MAX_QUOTA_BYTES, 0, "BYTES",
                 "Raise an alarm when the backend size exceeds this (0 = 2 GiB)."},
    [O_MAX_REQUEST] = {"max-request-bytes", K_U32, OFF(max_request_bytes), "1572864", 1,
                       KT_CONFIG_MAX_REQUEST_BYTES_CAP, 0, "BYTES",
                       "Maximum client request size in bytes the server will accept."},
    [O_MAX_TXN_OPS] = {"max-txn-ops", K_U32, OFF(max_txn_ops), "128", 1, 65536, 0, "N",
                       "Maximum number of operations permitted in a transaction."},
    [O_COMPACT_MODE] = {"auto-compaction-mode", K_MODE, OFF(auto_compaction_mode), "periodic", 0, 0,
                        0, "periodic|revision",
                        "Interpret auto-compaction-retention as a duration (periodic) or a "
                        "revision count (revision)."},
    [O_COMPACT_RETENTION] = {"auto-compaction-retention", K_RETENTION,
                             OFF(auto_compaction_retention), "0", 0, 0, 0, "VALUE",
                             "Auto compaction retention: \"1h\", \"30m\", or hours when a bare "
                             "integer (periodic); revisions (revision). 0 disables."},
    [O_FORCE_NEW] = {"force-new-cluster", K_BOOL, OFF(force_new_cluster), "false", 0, 0, 0, "",
                     "Force to create a new one-member cluster."},
    [O_WATCH_PROGRESS] = {"experimental-watch-progress-notify-interval", K_DURATION,
                          OFF(watch_progress_notify_ms), "10m", 0, 0, 0, "DURATION",
                          "Interval of progress notifications to watches that asked for them."},
    [O_CATCHUP] = {"experimental-snapshot-catchup-entries", K_U64, OFF(snapshot_catchup_entries),
                   "100000", 1, UINT64_MAX, 0, "N",
                   "Entries kept for slow followers to catch up from; further behind, they "
                   "receive a snapshot."},
    [O_LISTEN_METRICS] = {"listen-metrics-urls", K_URLS, OFF(listen_metrics_urls), "", 0, 0,
                          OPT_EMPTY, "URLS",
                          "List of URLs to listen on for the metrics and health endpoints."},
    [O_AUTH_TOKEN] = {"auth-token", K_AUTHTOKEN, OFF(auth_token), "simple", 0, 0, 0, "SPEC",
                      "Auth token type: simple (valid on the issuing member), or "
                      "signed,priv-key=PEM,pub-key=PEM[,ttl=5m] (Ed25519; every member holding "
                      "the public key verifies them; etcd's jwt,... is read the same way)."},
    [O_AUTH_TOKEN_TTL] = {"auth-token-ttl", K_U32, OFF(auth_token_ttl_s), "300", 1, 31536000, 0,
                          "SECONDS", "Seconds a simple token lives without being used."},
    [O_AUTH_HASH_OPS] = {"auth-hash-opslimit", K_U64, OFF(auth_hash_opslimit), "2", 1, UINT32_MAX,
                         0, "N", "Argon2id passes per password hash (libsodium's opslimit)."},
    [O_AUTH_HASH_MEM] = {"auth-hash-memlimit", K_U64, OFF(auth_hash_memlimit), "67108864", 8192,
                         1ull << 32, 0, "BYTES",
                         "Argon2id memory per password hash (libsodium's memlimit)."},
    [O_AUTH_HASH_THREADS] = {"auth-hash-threads", K_U32, OFF(auth_hash_threads), "1", 1, 64, 0, "N",
                             "Threads hashing passwords off the state thread."},
    [O_IO_THREADS] = {"io-threads", K_THREADS, OFF(io_threads), "auto", 0, 64, 0, "N|auto",
                      "Threads that own the client connections (accept, TLS, reading, "
                      "writing); 0: the state thread does that work too; auto: cores - 1, "
                      "at most 8, and 0 below 4 cores."},
    [O_LOG_LEVEL] = {"log-level", K_LEVEL, OFF(log_level), "info", 0, 0, 0, "debug|info|warn|error",
                     "Log level."},
    [O_CERT_FILE] = {"cert-file", K_FILE, OFF(client_tls.cert_file), "", 0, 0, OPT_EMPTY, "PATH",
                     "Path to the client server TLS cert file."},
    [O_KEY_FILE] = {"key-file", K_FILE, OFF(client_tls.key_file), "", 0, 0, OPT_EMPTY, "PATH",
                    "Path to the client server TLS key file."},
    [O_CLIENT_CERT_AUTH] = {"client-cert-auth", K_BOOL, OFF(client_tls.client_cert_auth), "false",
                            0, 0, 0, "", "Enable client cert authentication."},
    [O_CLIENT_CRL_FILE] = {"client-crl-file", K_FILE, OFF(client_tls.crl_file), "", 0, 0, OPT_EMPTY,
                           "PATH", "Path to the client certificate revocation list file."},
    [O_CLIENT_ALLOWED_HOST] = {"client-cert-allowed-hostname", K_STR,
                               OFF(client_tls.allowed_hostname), "", 0, 0, OPT_EMPTY, "NAME",
                               "Allowed TLS hostname for client cert authentication."},
    [O_TRUSTED_CA_FILE] = {"trusted-ca-file", K_FILE, OFF(client_tls.trusted_ca_file), "", 0, 0,
                           OPT_EMPTY, "PATH",
                           "Path to the client server TLS trusted CA cert file (client "
                           "certificates are then required, as etcd)."},
    [O_AUTO_TLS] = {"auto-tls", K_BOOL, OFF(client_tls.auto_tls), "false", 0, 0, 0, "",
                    "Client TLS using generated certificates."},
    [O_PEER_CERT_FILE] = {"peer-cert-file", K_FILE, OFF(peer_tls.cert_file), "", 0, 0, OPT_EMPTY,
                          "PATH", "Path to the peer server TLS cert file."},
    [O_PEER_KEY_FILE] = {"peer-key-file", K_FILE, OFF(peer_tls.key_file), "", 0, 0, OPT_EMPTY,
                         "PATH", "Path to the peer server TLS key file."},
    [O_PEER_CLIENT_CERT_AUTH] = {"peer-client-cert-auth", K_BOOL, OFF(peer_tls.client_cert_auth),
                                 "false", 0, 0, 0, "", "Enable peer client cert authentication."},
    [O_PEER_TRUSTED_CA_FILE] = {"peer-trusted-ca-file", K_FILE, OFF(peer_tls.trusted_ca_file), "",
                                0, 0, OPT_EMPTY, "PATH",
                                "Path to the peer server TLS trusted CA file."},
    [O_PEER_ALLOWED_CN] = {"peer-cert-allowed-cn", K_STR, OFF(peer_tls.allowed_cn), "", 0, 0,
                           OPT_EMPTY, "CN",
                           "Required CN for client certs connecting to the peer endpoint."},
    [O_PEER_ALLOWED_HOST] = {"peer-cert-allowed-hostname", K_STR, OFF(peer_tls.allowed_hostname),
                             "", 0, 0, OPT_EMPTY, "NAME",
                             "Allowed TLS hostname for inter peer authentication."},
    [O_PEER_AUTO_TLS] = {"peer-auto-tls", K_BOOL, OFF(peer_tls.auto_tls), "false", 0, 0, 0, "",
                         "Peer TLS using self-generated certificates if --peer-key-file and "
                         "--peer-cert-file are not provided."},
    [O_PEER_CRL_FILE] = {"peer-crl-file", K_FILE, OFF(peer_tls.crl_file), "", 0, 0, OPT_EMPTY,
                         "PATH", "Path to the peer certificate revocation list file."},
    [O_CIPHER_SUITES] = {"cipher-suites", K_STR, OFF(cipher_suites), "", 0, 0, OPT_EMPTY, "NAMES",
                         "Comma-separated list of supported TLS cipher suites between "
                         "client/server and peers (empty: OpenSSL's defaults)."},
    [O_TLS_MIN_VERSION] = {"tls-min-version", K_TLSVER, OFF(tls_min_version), "TLS1.2", 0, 0, 0,
                           "TLS1.2|TLS1.3",
                           "Minimum TLS version supported by the client and peer links."},
    [O_TLS_MAX_VERSION] = {"tls-max-version", K_TLSVER, OFF(tls_max_version), "TLS1.3", 0, 0, 0,
                           "TLS1.2|TLS1.3",
                           "Maximum TLS version supported by the client and peer links."},
    [O_CONFIG_FILE] = {"config-file", K_PATH, OFF(config_file), NULL, 0, 0, OPT_NOFILE, "PATH",
                       "Path to the YAML configuration file. If given, other flags and "
                       "environment variables are ignored."},
    /* Bootstrap by DNS SRV (net/srv.h) or by a discovery service (net/discovery.h). */
    [O_DISCOVERY_SRV] = {"discovery-srv", K_STR, OFF(discovery_srv), "", 0, 0, OPT_EMPTY, "DOMAIN",
                         "DNS domain whose SRV records bootstrap the cluster."},
    [O_DISCOVERY_SRV_NAME] = {"discovery-srv-name", K_STR, OFF(discovery_srv_name), "", 0, 0,
                              OPT_EMPTY, "SUFFIX",
                              "Suffix of the SRV names (_ketch-server-SUFFIX._tcp.DOMAIN)."},
    [O_DISCOVERY_SRV_ETCD] = {"discovery-srv-etcd-names", K_BOOL, OFF(discovery_srv_etcd_names),
                              "false", 0, 0, 0, "",
                              "Read etcd's SRV names (_etcd-server...) instead of ketch's."},
    [O_DNS_SERVERS] = {"dns-servers", K_STR, OFF(dns_servers), "", 0, 0, OPT_EMPTY, "HOST:PORT,...",
                       "DNS servers for --discovery-srv instead of /etc/resolv.conf."},
    [O_DISCOVERY_ENDPOINTS] = {"discovery-endpoints", K_STR, OFF(discovery_endpoints), "", 0, 0,
                               OPT_EMPTY, "ENDPOINTS",
                               "Client endpoints of the ketch cluster serving as discovery."},
    [O_DISCOVERY_TOKEN] = {"discovery-token", K_STR, OFF(discovery_token), "", 0, 0, OPT_EMPTY,
                           "TOKEN", "Discovery token of the cluster to bootstrap."},
    [O_DISCOVERY_CACERT] = {"discovery-cacert", K_FILE, OFF(discovery_cacert), "", 0, 0, OPT_EMPTY,
                            "PATH", "CA bundle verifying the discovery service."},
    [O_DISCOVERY_CERT] = {"discovery-cert", K_FILE, OFF(discovery_cert), "", 0, 0, OPT_EMPTY,
                          "PATH", "Client certificate for the discovery service."},
    [O_DISCOVERY_KEY] = {"discovery-key", K_FILE, OFF(discovery_key), "", 0, 0, OPT_EMPTY, "PATH",
                         "Client key for the discovery service."},
    [O_DISCOVERY_USER] = {"discovery-user", K_STR, OFF(discovery_user), "", 0, 0, OPT_EMPTY, "NAME",
                          "User for the discovery service."},
    [O_DISCOVERY_PASSWORD] = {"discovery-password", K_STR, OFF(discovery_password), "", 0, 0,
                              OPT_EMPTY, "PASSWORD", "Password for the discovery service."},
    [O_DISCOVERY_DIAL_TIMEOUT] = {"discovery-dial-timeout", K_DURATION,
                                  OFF(discovery_dial_timeout_ms), "2s", 0, 0, 0, "DURATION",
                                  "Dial timeout to the discovery service."},
    [O_DISCOVERY_REQUEST_TIMEOUT] = {"discovery-request-timeout", K_DURATION,
                                     OFF(discovery_request_timeout_ms), "5s", 0, 0, 0, "DURATION",
                                     "Request timeout on the discovery service."},
    [O_DISCOVERY_FALLBACK] = {"discovery-fallback", K_STR, OFF(discovery_fallback), "exit", 0, 0, 0,
                              "exit", "What to do when discovery fails: exit (the only choice)."},
    [O_VERSION] = {"version", K_BOOL, OFF(show_version), "false", 0, 0, OPT_NOFILE, "",
                   "Print the version and exit."},
    [O_HELP] = {"help", K_BOOL, OFF(show_help), "false", 0, 0, OPT_NOFILE | OPT_NOENV, "",
                "Show this help and exit (also -h)."},
};
#undef OFF

/* One load in progress: which options were set explicitly, and where the
 * retention value came from (it is checked once the mode is known). */
struct loader {
  struct kt_config *c;
  struct optset set;
  char retention_where[160];
};

#define VAL_FMT "\"%.120s\"" /* values are cut in messages so they fit kt_err */

static char *adup(struct kt_arena *a, const char *s, size_t n) {
  char *d = kt_arena_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static const struct opt *opt_find(const char *name, size_t n) {
  for (int i = 0; i < O_COUNT; i++)
    if (strlen(opts[i].name) == n && memcmp(opts[i].name, name, n) == 0)
      return &opts[i];
  return NULL;
}

static void env_name(const struct opt *o, char *buf, size_t cap) {
  size_t j = (size_t)snprintf(buf, cap, "KETCH_");
  for (const char *p = o->name; *p && j + 1 < cap; p++)
    buf[j++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
  buf[j] = 0;
}

/* ---- scalar parsers ---- */

static int parse_u64(const char *s, uint64_t *v) {
  if (!*s)
    return -1;
  uint64_t x = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    unsigned d = (unsigned)(*s - '0');
    if (x > (UINT64_MAX - d) / 10)
      return -1;
    x = x * 10 + d;
  }
  *v = x;
  return 0;
}

static int parse_bool(const char *s, bool *v) {
  static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True", "yes", "on"};
  static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False", "no", "off"};
  for (size_t i = 0; i < KT_ARRAY_LEN(yes); i++) {
    if (strcmp(s, yes[i]) == 0)
      return *v = true, 0;
    if (strcmp(s, no[i]) == 0)
      return *v = false, 0;
  }
  return -1;
}

int kt_duration_parse_ms(const char *s, uint64_t *ms) {
  /* Go's time.ParseDuration, non-negative: [+]{digits[.digits]unit}+ or "0". */
  static const struct {
    const char *u;
    uint64_t ns;
  } units[] = {
      {"ns", 1},           {"us", 1000},         {"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
      {"\xce\xbcs", 1000},                                            /* U+03BC greek mu */
      {"ms", 1000000},     {"s", 1000000000ull}, {"m", 60000000000ull}, {"h", 3600000000000ull}};
  const uint64_t limit = INT64_MAX; /* Go's Duration is int64 nanoseconds */
  if (*s == '+')
    s++;
  if (strcmp(s, "0") == 0)
    return *ms = 0, 0;
  if (!*s)
    return -1;
  uint64_t total = 0;
  while (*s) {
    uint64_t whole = 0;
    const char *start = s;
    bool overflow = false;
    while (*s >= '0' && *s <= '9') {
      unsigned d = (unsigned)(*s++ - '0');
      if (whole > (UINT64_MAX - d) / 10)
        overflow = true;
      else
        whole = whole * 10 + d;
    }
    const char *frac = NULL, *frac_end = NULL;
    if (*s == '.') {
      frac = ++s;
      while (*s >= '0' && *s <= '9')
        s++;
      frac_end = s;
    }
    if (s == start || (frac && s == start + 1)) /* no digits at all ("." or "h") */
      return -1;
    size_t best = 0;
    uint64_t unit = 0;
    for (size_t i = 0; i < KT_ARRAY_LEN(units); i++) {
      size_t n = strlen(units[i].u);
      if (n > best && strncmp(s, units[i].u, n) == 0)
        best = n, unit = units[i].ns;
    }
    if (!best)
      return -1; /* missing or unknown unit */
    s += best;
    if (overflow || whole > limit / unit)
      return -1;
    uint64_t v = whole * unit;
    uint64_t scale = unit;
    for (const char *p = frac; p && p < frac_end && scale; p++) {
      scale /= 10;
      v += (uint64_t)(*p - '0') * scale;
    }
    if (v > limit || total > limit - v)
      return -1;
    total += v;
  }
  *ms = total / 1000000;
  return 0;
}

/* ---- URLs ---- */

static int url_err(struct kt_err *e, const char *where, const char *s, const char *why) {
  return kt_err_set(e, KT_EINVAL, "%s: invalid URL " VAL_FMT " (%s)", where, s, why);
}

int kt_url_parse(struct kt_arena *a, const char *where, const char *s, struct kt_url *u,
                 struct kt_err *e) {
  const char *sep = strstr(s, "://");
  if (!sep)
    return url_err(e, where, s, "want http://host:port");
  size_t sl = (size_t)(sep - s);
  const char *rest = sep + 3;
  memset(u, 0, sizeof *u);
  u->raw = adup(a, s, strlen(s));
  if (sl == 5 && strncasecmp(s, "unixs", 5) == 0)
    return url_err(e, where, s, "TLS on unix sockets is not supported; use https://host:port");
  if (sl == 4 && strncasecmp(s, "unix", 4) == 0) {
    size_t n = strlen(rest);
    if (n == 0)
      return url_err(e, where, s, "empty unix socket path");
    if (n > 107)
      return url_err(e, where, s, "unix socket path longer than 107 bytes");
    u->scheme = KT_URL_UNIX;
    u->host = adup(a, rest, n);
    u->port = 0;
    return 0;
  }
  bool https = sl == 5 && strncasecmp(s, "https", 5) == 0;
  if (!(sl == 4 && strncasecmp(s, "http", 4) == 0) && !https)
    return url_err(e, where, s, "unsupported scheme; want http, https or unix");
  u->scheme = https ? KT_URL_HTTPS : KT_URL_HTTP;
  size_t alen = strcspn(rest, "/?#");
  if (rest[alen])
    return url_err(e, where, s, "URL must not contain a path");
  if (memchr(rest, '@', alen))
    return url_err(e, where, s, "user info not allowed");
  const char *host, *colon;
  size_t hlen;
  if (rest[0] == '[') {
    const char *rb = memchr(rest, ']', alen);
    if (!rb)
      return url_err(e, where, s, "missing ']' in IPv6 address");
    host = rest + 1;
    hlen = (size_t)(rb - host);
    for (size_t i = 0; i < hlen; i++)
      if (!isxdigit((unsigned char)host[i]) && host[i] != ':' && host[i] != '.')
        return url_err(e, where, s, "bad IPv6 address");
    if (hlen == 0 || !memchr(host, ':', hlen))
      return url_err(e, where, s, "bad IPv6 address");
    colon = rb + 1;
    if (*colon != ':')
      return url_err(e, where, s, "missing port; want http://host:port");
  } else {
    colon = memrchr(rest, ':', alen);
    if (!colon)
      return url_err(e, where, s, "missing port; want http://host:port");
    host = rest;
    hlen = (size_t)(colon - rest);
    if (hlen == 0)
      return url_err(e, where, s, "missing host");
    if (memchr(host, ':', hlen))
      return url_err(e, where, s, "an IPv6 address needs [brackets]");
    for (size_t i = 0; i < hlen; i++)
      if (!isalnum((unsigned char)host[i]) && host[i] != '-' && host[i] != '.' && host[i] != '_')
        return url_err(e, where, s, "bad host name");
  }
  const char *port = colon + 1;
  size_t plen = (size_t)(rest + alen - port);
  uint64_t pv = 0;
  if (plen == 0 || plen > 5)
    return url_err(e, where, s, "want a port from 1 to 65535");
  for (size_t i = 0; i < plen; i++) {
    if (port[i] < '0' || port[i] > '9')
      return url_err(e, where, s, "want a port from 1 to 65535");
    pv = pv * 10 + (uint64_t)(port[i] - '0');
  }
  if (pv < 1 || pv > 65535)
    return url_err(e, where, s, "want a port from 1 to 65535");
  u->host = adup(a, host, hlen);
  u->port = (uint16_t)pv;
  return 0;
}

/* Splits s on ',' into trimmed, non-empty parts; calls fn on each. */
static int split_list(const char *s, int (*fn)(void *arg, const char *part, size_t n), void *arg) {
  for (;;) {
    const char *end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    const char *p = s;
    while (n && isspace((unsigned char)*p))
      p++, n--;
    while (n && isspace((unsigned char)p[n - 1]))
      n--;
    int rc = fn(arg, p, n);
    if (rc)
      return rc;
    if (!end)
      return 0;
    s = end + 1;
  }
}

struct url_split {
  struct kt_arena *a;
  const char *where;
  struct kt_url *v;
  size_t n, cap;
  struct kt_peer *peers; /* for --initial-cluster */
  const char *whole;
  struct kt_err *e;
};

static int url_part(void *arg, const char *p, size_t n) {
  struct url_split *x = arg;
  if (n == 0)
    return kt_err_set(x->e, KT_EINVAL, "%s: invalid value " VAL_FMT " (empty URL in list)",
                      x->where, x->whole);
  if (x->n == x->cap)
    return kt_err_set(x->e, KT_EINVAL, "%s: too many URLs (max %zu)", x->where, x->cap);
  char tmp[KT_CONFIG_MAX_VALUE + 1];
  memcpy(tmp, p, n);
  tmp[n] = 0;
  return kt_url_parse(x->a, x->where, tmp, &x->v[x->n++], x->e);
}

static int parse_urls(struct kt_arena *a, const char *where, const char *s, bool allow_empty,
                      struct kt_url_list *out, struct kt_err *e) {
  memset(out, 0, sizeof *out);
  out->raw = adup(a, s, strlen(s));
  bool blank = true;
  for (const char *p = s; *p; p++)
    if (!isspace((unsigned char)*p))
      blank = false;
  if (blank) {
    if (allow_empty)
      return 0;
    return kt_err_set(e, KT_EINVAL, "%s: invalid value " VAL_FMT " (want at least one URL)", where,
                      s);
  }
  struct url_split x = {a, where, NULL, 0, KT_CONFIG_MAX_URLS, NULL, s, e};
  x.v = kt_arena_alloc(a, sizeof(struct kt_url) * KT_CONFIG_MAX_URLS);
  int rc = split_list(s, url_part, &x);
  if (rc)
    return rc;
  out->v = x.v;
  out->n = x.n;
  return 0;
}

static int peer_part(void *arg, const char *p, size_t n) {
  struct url_split *x = arg;
  const char *eq = memchr(p, '=', n);
  if (n == 0 || !eq || eq == p)
    return kt_err_set(x->e, KT_EINVAL,
                      "%s: invalid value " VAL_FMT " (want name=url pairs separated by commas)",
                      x->where, x->whole);
  if (x->n == x->cap)
    return kt_err_set(x->e, KT_EINVAL, "%s: too many members (max %zu)", x->where, x->cap);
  char tmp[KT_CONFIG_MAX_VALUE + 1];
  size_t ul = n - (size_t)(eq + 1 - p);
  memcpy(tmp, eq + 1, ul);
  tmp[ul] = 0;
  struct kt_peer *pe = &x->peers[x->n];
  pe->name = adup(x->a, p, (size_t)(eq - p));
  int rc = kt_url_parse(x->a, x->where, tmp, &pe->url, x->e);
  if (rc)
    return rc;
  x->n++;
  return 0;
}

static int parse_cluster(struct kt_config *c, const char *where, const char *s, struct kt_err *e) {
  struct url_split x = {&c->arena, where, NULL, 0, KT_CONFIG_MAX_PEERS, NULL, s, e};
  x.peers = kt_arena_alloc(&c->arena, sizeof(struct kt_peer) * KT_CONFIG_MAX_PEERS);
  int rc = split_list(s, peer_part, &x);
  if (rc)
    return rc;
  c->initial_cluster = adup(&c->arena, s, strlen(s));
  c->initial_cluster_peers = x.peers;
  c->initial_cluster_n = x.n;
  return 0;
}

/* ---- setting one option ---- */

static int bad_value(struct kt_err *e, const char *where, const char *v, const char *want) {
  return kt_err_set(e, KT_EINVAL, "%s: invalid value " VAL_FMT " (want %s)", where, v, want);
}

/* --auth-token: "simple", or "signed" (or etcd's "jwt") with comma-separated
 * priv-key=, pub-key=, ttl= (a Go duration) and sign-method= (EdDSA only:
 * ketch signs with Ed25519). */
static int parse_auth_token(struct kt_config *c, const char *where, const char *v,
                            struct kt_err *e) {
  c->auth_token = adup(&c->arena, v, strlen(v));
  c->auth_token_signed = false;
  c->auth_token_priv_key = c->auth_token_pub_key = NULL;
  c->auth_token_signed_ttl_s = 300;
  if (strcmp(v, "simple") == 0)
    return 0;
  const char *comma = strchr(v, ',');
  size_t kl = comma ? (size_t)(comma - v) : strlen(v);
  if (!((kl == 6 && memcmp(v, "signed", 6) == 0) || (kl == 3 && memcmp(v, "jwt", 3) == 0)))
    return bad_value(e, where, v, "simple, or signed,priv-key=FILE,pub-key=FILE[,ttl=DURATION]");
  c->auth_token_signed = true;
  for (const char *p = comma; p && *p;) {
    p++;
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    if (!eq || eq == p + n - 1)
      return kt_err_set(e, KT_EINVAL, "%s: option \"%.*s\" is not name=value", where,
                        (int)(n > 60 ? 60 : n), p);
    size_t nl = (size_t)(eq - p), vl = n - nl - 1;
    char *val = adup(&c->arena, eq + 1, vl);
    if (nl == 8 && memcmp(p, "priv-key", 8) == 0) {
      c->auth_token_priv_key = val;
    } else if (nl == 7 && memcmp(p, "pub-key", 7) == 0) {
      c->auth_token_pub_key = val;
    } else if (nl == 3 && memcmp(p, "ttl", 3) == 0) {
      uint64_t ms;
      if (kt_duration_parse_ms(val, &ms) || ms < 1000 || ms / 1000 > UINT32_MAX)
        return kt_err_set(e, KT_EINVAL, "%s: ttl " VAL_FMT " is not a duration of 1s or more",
                          where, val);
      c->auth_token_signed_ttl_s = (uint32_t)(ms / 1000);
    } else if (nl == 11 && memcmp(p, "sign-method", 11) == 0) {
      if (strcmp(val, "EdDSA") != 0)
        return kt_err_set(e, KT_EINVAL,
                          "%s: sign-method " VAL_FMT " is not supported (ketch signs tokens "
                          "with Ed25519: EdDSA)",
                          where, val);
    } else {
      return kt_err_set(e, KT_EINVAL,
                        "%s: unknown option \"%.*s\" (want priv-key, pub-key, ttl or "
                        "sign-method)",
                        where, (int)(nl > 40 ? 40 : nl), p);
    }
    p = end;
  }
  if (!c->auth_token_priv_key && !c->auth_token_pub_key)
    return kt_err_set(e, KT_EINVAL, "%s: signed tokens need priv-key=FILE and/or pub-key=FILE",
                      where);
  return 0;
}

static int opt_set(struct loader *l, const struct opt *o, const char *where, const char *v,
                   struct kt_err *e) {
  struct kt_config *c = l->c;
  void *field = (char *)c + o->off;
  size_t vlen = strlen(v);
  if (vlen > KT_CONFIG_MAX_VALUE)
    return kt_err_set(e, KT_EINVAL, "%s: value too long (%zu bytes, max %d)", where, vlen,
                      KT_CONFIG_MAX_VALUE);
  int rc = 0;
  switch (o->kind) {
  case K_FILE:
    *(const char **)field = *v ? adup(&c->arena, v, vlen) : NULL;
    break;
  case K_AUTHTOKEN:
    rc = parse_auth_token(c, where, v, e);
    break;
  case K_TLSVER:
    if (strcmp(v, "TLS1.2") == 0)
      *(int *)field = 12;
    else if (strcmp(v, "TLS1.3") == 0)
      *(int *)field = 13;
    else
      return bad_value(e, where, v, "TLS1.2 or TLS1.3");
    break;
  case K_NAME:
    for (const char *p = v; *p; p++)
      if (*p == ',' || *p == '=' || iscntrl((unsigned char)*p))
        return bad_value(e, where, v, "a name without ',', '=' or control characters");
    __attribute__((fallthrough));
  case K_STR:
  case K_PATH:
    if (!*v && (o->flags & OPT_EMPTY)) {
      *(const char **)field = NULL;
      break;
    }
    if (!*v)
      return bad_value(e, where, v, "a non-empty string");
    *(const char **)field = adup(&c->arena, v, vlen);
    break;
  case K_URLS:
    rc = parse_urls(&c->arena, where, v, o->flags & OPT_EMPTY, field, e);
    break;
  case K_CLUSTER:
    rc = parse_cluster(c, where, v, e);
    break;
  case K_U64:
  case K_U32: {
    uint64_t x;
    if (parse_u64(v, &x) || x < o->min || x > o->max) {
      char want[96];
      if (o->min == 1 && o->max == UINT64_MAX)
        snprintf(want, sizeof want, "a positive integer");
      else
        snprintf(want, sizeof want, "an integer from %" PRIu64 " to %" PRIu64, o->min, o->max);
      return bad_value(e, where, v, want);
    }
    if (o->kind == K_U64)
      *(uint64_t *)field = x;
    else
      *(uint32_t *)field = (uint32_t)x;
    break;
  }
  case K_THREADS: {
    uint64_t x;
    if (strcmp(v, "auto") == 0)
      *(uint32_t *)field = KT_CONFIG_THREADS_AUTO;
    else if (parse_u64(v, &x) || x < o->min || x > o->max)
      return bad_value(e, where, v, "auto or an integer from 0 to 64");
    else
      *(uint32_t *)field = (uint32_t)x;
    break;
  }
  case K_BOOL:
    if (parse_bool(v, field))
      return bad_value(e, where, v, "true or false");
    break;
  case K_STATE:
    if (strcmp(v, "new") == 0)
      c->initial_cluster_state = KT_CLUSTER_NEW;
    else if (strcmp(v, "existing") == 0)
      c->initial_cluster_state = KT_CLUSTER_EXISTING;
    else
      return bad_value(e, where, v, "new or existing");
    break;
  case K_MODE:
    if (strcmp(v, "periodic") == 0)
      c->auto_compaction_mode = KT_COMPACT_PERIODIC;
    else if (strcmp(v, "revision") == 0)
      c->auto_compaction_mode = KT_COMPACT_REVISION;
    else
      return bad_value(e, where, v, "periodic or revision");
    break;
  case K_LEVEL: {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    static const int levels[] = {KT_LOG_DEBUG, KT_LOG_INFO, KT_LOG_WARN, KT_LOG_ERROR};
    size_t i = 0;
    while (i < KT_ARRAY_LEN(names) && strcmp(v, names[i]) != 0)
      i++;
    if (i == KT_ARRAY_LEN(names))
      return bad_value(e, where, v, "debug, info, warn or error");
    c->log_level = levels[i];
    break;
  }
  case K_DURATION: {
    uint64_t ms;
    if (kt_duration_parse_ms(v, &ms) || ms == 0)
      return bad_value(e, where, v, "a positive duration like \"10m\" or \"500ms\"");
    *(uint64_t *)field = ms;
    break;
  }
  case K_RETENTION:
    if (!*v)
      return bad_value(e, where, v, "hours, a duration like \"1h\", or a revision count");
    c->auto_compaction_retention = adup(&c->arena, v, vlen);
    snprintf(l->retention_where, sizeof l->retention_where, "%s", where);
    break;
  default:
    kt_assert(!"unknown option kind");
  }
  if (rc)
    return rc;
  if (strcmp(where, "default") != 0)
    optset_add(&l->set, (size_t)(o - opts));
  return 0;
}

static void set_defaults(struct loader *l) {
  struct kt_err e;
  for (int i = 0; i < O_COUNT; i++)
    if (opts[i].def)
      kt_assert(opt_set(l, &opts[i], "default", opts[i].def, &e) == 0);
}

/* ---- derived defaults and cross checks ---- */

static bool is_set(const struct loader *l, int id) { return optset_has(&l->set, (size_t)id); }

static bool url_eq(const struct kt_url *a, const struct kt_url *b) {
  return a->scheme == b->scheme && a->port == b->port && strcmp(a->host, b->host) == 0;
}

static bool wildcard(const struct kt_url_list *ul) {
  for (size_t i = 0; i < ul->n; i++)
    if (ul->v[i].scheme != KT_URL_UNIX &&
        (strcmp(ul->v[i].host, "0.0.0.0") == 0 || strcmp(ul->v[i].host, "::") == 0))
      return true;
  return false;
}

static int finish(struct loader *l, struct kt_err *e) {
  struct kt_config *c = l->c;
  if (!is_set(l, O_DATA_DIR)) {
    size_t n = strlen(c->name);
    char *d = kt_arena_alloc(&c->arena, n + 7);
    memcpy(d, c->name, n);
    memcpy(d + n, ".ketch", 7);
    c->data_dir = d;
  }
  if (!is_set(l, O_ADVERTISE_CLIENT) && is_set(l, O_LISTEN_CLIENT)) {
    if (wildcard(&c->listen_client_urls))
      return kt_err_set(e, KT_EINVAL,
                        "--advertise-client-urls is required when --listen-client-urls is set "
                        "to a wildcard address (%.120s)",
                        c->listen_client_urls.raw);
    c->advertise_client_urls = c->listen_client_urls;
  }
  if (!is_set(l, O_ADVERTISE_PEER) && is_set(l, O_LISTEN_PEER)) {
    if (wildcard(&c->listen_peer_urls))
      return kt_err_set(e, KT_EINVAL,
                        "--initial-advertise-peer-urls is required when --listen-peer-urls is "
                        "set to a wildcard address (%.120s)",
                        c->listen_peer_urls.raw);
    c->initial_advertise_peer_urls = c->listen_peer_urls;
  }
  /* Bootstrap by discovery: the initial cluster is found at start, so the
   * checks of --initial-cluster below do not apply (etcd refuses both). */
  bool by_srv = c->discovery_srv != NULL, by_service = c->discovery_endpoints != NULL;
  if (by_srv || by_service || c->discovery_token) {
    if (by_srv && by_service)
      return kt_err_set(e, KT_EINVAL,
                        "--discovery-srv and --discovery-endpoints cannot both be given");
    if (is_set(l, O_INITIAL_CLUSTER))
      return kt_err_set(e, KT_EINVAL,
                        "--initial-cluster cannot be given with --discovery-srv or "
                        "--discovery-endpoints");
    if (by_service != (c->discovery_token != NULL))
      return kt_err_set(e, KT_EINVAL, "--discovery-endpoints and --discovery-token go together");
    if (strcmp(c->discovery_fallback, "exit") != 0)
      return kt_err_set(e, KT_EINVAL, "--discovery-fallback: invalid value \"%.80s\" (want exit)",
                        c->discovery_fallback);
    c->initial_cluster = "";
    c->initial_cluster_n = 0;
    goto tls_checks;
  }
  if (!is_set(l, O_INITIAL_CLUSTER)) {
    struct kt_buf b = {0};
    const struct kt_url_list *ap = &c->initial_advertise_peer_urls;
    for (size_t i = 0; i < ap->n; i++) {
      if (i)
        kt_buf_append(&b, ",", 1);
      kt_buf_append(&b, c->name, strlen(c->name));
      kt_buf_append(&b, "=", 1);
      kt_buf_append(&b, ap->v[i].raw, strlen(ap->v[i].raw));
    }
    kt_buf_append(&b, "", 1);
    int rc = parse_cluster(c, "--initial-cluster", (const char *)b.p, e);
    kt_buf_free(&b);
    if (rc)
      return rc;
  }

  /* The member's own entries in --initial-cluster must be exactly its
   * advertised peer URLs (etcd's messages). */
  const struct kt_url_list *ap = &c->initial_advertise_peer_urls;
  size_t mine = 0;
  for (size_t i = 0; i < c->initial_cluster_n; i++) {
    const struct kt_peer *p = &c->initial_cluster_peers[i];
    if (strcmp(p->name, c->name) != 0)
      continue;
    mine++;
    size_t j = 0;
    while (j < ap->n && !url_eq(&p->url, &ap->v[j]))
      j++;
    if (j == ap->n)
      return kt_err_set(e, KT_EINVAL,
                        "--initial-cluster has %.80s but missing from "
                        "--initial-advertise-peer-urls=%.80s",
                        p->url.raw, ap->raw);
  }
  if (!mine)
    return kt_err_set(e, KT_EINVAL,
                      "couldn't find local name \"%.80s\" in the initial cluster configuration "
                      "(--initial-cluster=%.80s)",
                      c->name, c->initial_cluster);
  for (size_t j = 0; j < ap->n; j++) {
    size_t i = 0;
    for (; i < c->initial_cluster_n; i++)
      if (strcmp(c->initial_cluster_peers[i].name, c->name) == 0 &&
          url_eq(&c->initial_cluster_peers[i].url, &ap->v[j]))
        break;
    if (i == c->initial_cluster_n)
      return kt_err_set(e, KT_EINVAL,
                        "--initial-advertise-peer-urls has %.80s but missing from "
                        "--initial-cluster=%.80s",
                        ap->v[j].raw, c->initial_cluster);
  }

tls_checks:; /* a declaration follows: C11 needs a statement after a label */
  /* TLS: an https:// URL needs a certificate for its link (etcd's message);
   * certificate and key go together. */
  struct {
    const struct kt_config_tls *t;
    const struct kt_url_list *urls;
    const char *cert, *key, *autof;
  } links[2] = {{&c->client_tls, &c->listen_client_urls, "--cert-file", "--key-file", "--auto-tls"},
                {&c->peer_tls, &c->listen_peer_urls, "--peer-cert-file", "--peer-key-file",
                 "--peer-auto-tls"}};
  for (int k = 0; k < 2; k++) {
    const struct kt_config_tls *t = links[k].t;
    if (!t->cert_file != !t->key_file)
      return kt_err_set(e, KT_EINVAL, "%s and %s go together (only %s is given)", links[k].cert,
                        links[k].key, t->cert_file ? links[k].cert : links[k].key);
    if (t->allowed_cn && t->allowed_hostname)
      return kt_err_set(e, KT_EINVAL,
                        "--peer-cert-allowed-cn and --peer-cert-allowed-hostname are mutually "
                        "exclusive");
    for (size_t i = 0; i < links[k].urls->n; i++)
      if (links[k].urls->v[i].scheme == KT_URL_HTTPS && !t->cert_file && !t->auto_tls)
        return kt_err_set(e, KT_EINVAL,
                          "TLS key/cert (%s, %s) must be provided for %s url %.120s with HTTPS "
                          "scheme (or %s)",
                          links[k].cert, links[k].key, k ? "peer" : "client",
                          links[k].urls->v[i].raw, links[k].autof);
  }
  for (size_t i = 0; i < c->listen_metrics_urls.n; i++) /* served with the client TLS info */
    if (c->listen_metrics_urls.v[i].scheme == KT_URL_HTTPS && !c->client_tls.cert_file &&
        !c->client_tls.auto_tls)
      return kt_err_set(e, KT_EINVAL,
                        "TLS key/cert (--cert-file, --key-file) must be provided for metrics url "
                        "%.120s with HTTPS scheme (or --auto-tls)",
                        c->listen_metrics_urls.v[i].raw);
  if (c->tls_min_version > c->tls_max_version)
    return kt_err_set(e, KT_EINVAL, "--tls-min-version TLS1.%d is above --tls-max-version TLS1.%d",
                      c->tls_min_version - 10, c->tls_max_version - 10);
  if (c->cipher_suites && c->tls_min_version == 13)
    return kt_err_set(e, KT_EINVAL,
                      "cipher suites cannot be configured when only TLS1.3 is enabled");

  /* etcd's tick checks, with etcd's wording. */
  if (5ull * c->heartbeat_interval_ms > c->election_timeout_ms)
    return kt_err_set(e, KT_EINVAL,
                      "--election-timeout[%" PRIu32 "ms] should be at least as 5 times as "
                      "--heartbeat-interval[%" PRIu32 "ms]",
                      c->election_timeout_ms, c->heartbeat_interval_ms);

  if (c->quota_backend_bytes == 0)
    c->quota_backend_bytes = KT_CONFIG_DEFAULT_QUOTA_BYTES;
  else if (c->quota_backend_bytes > (8ull << 30))
    kt_log(KT_LOG_WARN, "config",
           "quota-backend-bytes %" PRIu64 " exceeds the recommended maximum of 8 GiB",
           c->quota_backend_bytes);

  /* Retention: etcd 3.4's rules. Periodic: a bare integer is hours, else a
   * duration; revision: a revision count. */
  const char *r = c->auto_compaction_retention;
  const char *rw = l->retention_where[0] ? l->retention_where : "--auto-compaction-retention";
  uint64_t v;
  c->auto_compaction_retention_ms = c->auto_compaction_retention_revs = 0;
  if (c->auto_compaction_mode == KT_COMPACT_REVISION) {
    if (parse_u64(r, &v) || v > INT64_MAX)
      return bad_value(e, rw, r, "a revision count in revision mode");
    c->auto_compaction_retention_revs = v;
  } else if (parse_u64(r, &v) == 0) {
    if (v > INT64_MAX / 3600000000000ll)
      return bad_value(e, rw, r, "hours, or a duration like \"1h\" or \"30m\"");
    c->auto_compaction_retention_ms = v * 3600000;
  } else if (kt_duration_parse_ms(r, &v) == 0) {
    c->auto_compaction_retention_ms = v;
  } else {
    return bad_value(e, rw, r, "hours, or a duration like \"1h\" or \"30m\"");
  }
  return 0;
}

/* ---- YAML ---- */

static int yaml_fail(struct kt_err *e, const char *label, yaml_parser_t *p) {
  return kt_err_set(e, KT_EINVAL, "%s: line %zu: %s", label, p->problem_mark.line + 1,
                    p->problem ? p->problem : "YAML parse error");
}

/* Text of a scalar, or NULL if it is YAML null (empty, ~, null). */
static const char *yaml_text(yaml_node_t *n) {
  const char *v = (const char *)n->data.scalar.value;
  if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
      (n->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
       strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0))
    return NULL;
  return v;
}

/* etcd's config file keeps the TLS files in two maps, client-transport-security
 * and peer-transport-security, whose keys are cert-file, key-file,
 * client-cert-auth, trusted-ca-file and auto-tls: each sets the flag of that
 * name (peer-*, for the peer map). */
static int apply_yaml_security(struct loader *l, const char *label, yaml_document_t *doc,
                               yaml_node_t *map, bool peer, struct optset *seen, struct kt_err *e) {
  static const char *const keys[] = {"cert-file", "key-file", "client-cert-auth", "trusted-ca-file",
                                     "auto-tls"};
  for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = yaml_document_get_node(doc, pr->key);
    yaml_node_t *v = yaml_document_get_node(doc, pr->value);
    if (!k || !v || k->type != YAML_SCALAR_NODE)
      return kt_err_set(e, KT_EINVAL, "%s: line %zu: want a plain key", label,
                        k ? k->start_mark.line + 1 : 0);
    const char *key = (const char *)k->data.scalar.value;
    size_t i = 0;
    while (i < KT_ARRAY_LEN(keys) && strcmp(key, keys[i]) != 0)
      i++;
    if (i == KT_ARRAY_LEN(keys)) {
      kt_log(KT_LOG_WARN, "config", "%s: line %zu: unknown key \"%.80s\" in %s ignored", label,
             k->start_mark.line + 1, key,
             peer ? "peer-transport-security" : "client-transport-security");
      continue;
    }
    char name[64];
    snprintf(name, sizeof name, "%s%s", peer ? "peer-" : "", keys[i]);
    const struct opt *o = opt_find(name, strlen(name));
    kt_assert(o);
    char where[160];
    snprintf(where, sizeof where, "%.80s: %s.%s", label,
             peer ? "peer-transport-security" : "client-transport-security", keys[i]);
    if (optset_has(seen, (size_t)(o - opts)))
      return kt_err_set(e, KT_EINVAL, "%s: line %zu: key defined twice", where,
                        k->start_mark.line + 1);
    optset_add(seen, (size_t)(o - opts));
    if (v->type != YAML_SCALAR_NODE)
      return kt_err_set(e, KT_EINVAL, "%s: line %zu: want a single value", where,
                        v->start_mark.line + 1);
    const char *text = yaml_text(v);
    if (!text)
      continue; /* "cert-file:" with no value keeps the default, as etcd's sample */
    int rc = opt_set(l, o, where, text, e);
    if (rc)
      return rc;
  }
  return 0;
}

static int apply_yaml(struct loader *l, const char *label, const char *buf, size_t len,
                      struct kt_err *e) {
  if (len > KT_CONFIG_MAX_FILE)
    return kt_err_set(e, KT_EINVAL, "%s: file too large (%zu bytes, max %d)", label, len,
                      KT_CONFIG_MAX_FILE);
  yaml_parser_t p;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&p))
    return kt_err_set(e, KT_ENOMEM, "%s: cannot initialise the YAML parser", label);
  yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
  if (!yaml_parser_load(&p, &doc)) {
    int rc = yaml_fail(e, label, &p);
    yaml_parser_delete(&p);
    return rc;
  }
  int rc = 0;
  struct optset seen = {{0}};
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    goto out; /* empty file: defaults */
  if (root->type != YAML_MAPPING_NODE) {
    rc = kt_err_set(e, KT_EINVAL, "%s: want a mapping of key: value at the top level", label);
    goto out;
  }
  for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = yaml_document_get_node(&doc, pr->key);
    yaml_node_t *v = yaml_document_get_node(&doc, pr->value);
    if (!k || !v || k->type != YAML_SCALAR_NODE) {
      rc = kt_err_set(e, KT_EINVAL, "%s: line %zu: want a plain key", label,
                      k ? k->start_mark.line + 1 : 0);
      goto out;
    }
    const char *key = (const char *)k->data.scalar.value;
    if (v->type == YAML_MAPPING_NODE &&
        (!strcmp(key, "client-transport-security") || !strcmp(key, "peer-transport-security"))) {
      if ((rc = apply_yaml_security(l, label, &doc, v, key[0] == 'p', &seen, e)))
        goto out;
      continue;
    }
    const struct opt *o = opt_find(key, k->data.scalar.length);
    if (!o || (o->flags & OPT_NOFILE)) {
      kt_log(KT_LOG_WARN, "config", "%s: line %zu: unknown key \"%.80s\" ignored", label,
             k->start_mark.line + 1, key);
      continue;
    }
    char where[160];
    snprintf(where, sizeof where, "%.100s: %s", label, o->name);
    if (optset_has(&seen, (size_t)(o - opts))) {
      rc = kt_err_set(e, KT_EINVAL, "%s: line %zu: key defined twice", where,
                      k->start_mark.line + 1);
      goto out;
    }
    optset_add(&seen, (size_t)(o - opts));
    if (v->type == YAML_SCALAR_NODE) {
      const char *text = yaml_text(v);
      if (!text)
        continue; /* "key:" with no value keeps the default, as etcd's sample */
      if (strlen(text) != v->data.scalar.length) {
        rc = kt_err_set(e, KT_EINVAL, "%s: value contains a NUL byte", where);
        goto out;
      }
      if ((rc = opt_set(l, o, where, text, e)))
        goto out;
    } else if (v->type == YAML_SEQUENCE_NODE &&
               (o->kind == K_URLS || o->kind == K_CLUSTER || o - opts == O_CIPHER_SUITES)) {
      /* A list of URLs is accepted as well as one comma-separated string. */
      struct kt_buf b = {0};
      for (yaml_node_item_t *it = v->data.sequence.items.start;
           it < v->data.sequence.items.top && !rc; it++) {
        yaml_node_t *item = yaml_document_get_node(&doc, *it);
        if (!item || item->type != YAML_SCALAR_NODE || !yaml_text(item) ||
            strlen(yaml_text(item)) != item->data.scalar.length || b.len > KT_CONFIG_MAX_VALUE)
          rc = kt_err_set(e, KT_EINVAL, "%s: want a list of URL strings", where);
        else {
          if (b.len)
            kt_buf_append(&b, ",", 1);
          kt_buf_append(&b, item->data.scalar.value, item->data.scalar.length);
        }
      }
      kt_buf_append(&b, "", 1);
      if (!rc)
        rc = opt_set(l, o, where, (const char *)b.p, e);
      kt_buf_free(&b);
      if (rc)
        goto out;
    } else {
      rc = kt_err_set(e, KT_EINVAL, "%s: line %zu: want a single value", where,
                      v->start_mark.line + 1);
      goto out;
    }
  }
  /* A second document in the same file is not read (etcd reads one). */
out:
  yaml_document_delete(&doc);
  yaml_parser_delete(&p);
  return rc;
}

static int read_file(const char *path, char **buf, size_t *len, struct kt_err *e) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return kt_err_set(e, KT_EIO, "--config-file: cannot open \"%.150s\": %s", path,
                      strerror(errno));
  size_t cap = KT_CONFIG_MAX_FILE + 1;
  char *p = malloc(cap);
  if (!p) {
    fclose(f);
    return kt_err_set(e, KT_ENOMEM, "--config-file: out of memory");
  }
  size_t n = fread(p, 1, cap, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(p);
    return kt_err_set(e, KT_EIO, "--config-file: cannot read \"%.150s\"", path);
  }
  if (n > KT_CONFIG_MAX_FILE) {
    free(p);
    return kt_err_set(e, KT_EINVAL, "--config-file: \"%.150s\" is larger than %d bytes", path,
                      KT_CONFIG_MAX_FILE);
  }
  *buf = p;
  *len = n;
  return 0;
}

/* ---- the entry points ---- */

static void loader_init(struct loader *l, struct kt_config *c) {
  memset(c, 0, sizeof *c);
  memset(l, 0, sizeof *l);
  l->c = c;
  set_defaults(l);
}

int kt_config_load_yaml(struct kt_config *c, const char *label, const char *buf, size_t len,
                        struct kt_err *e) {
  struct loader l;
  loader_init(&l, c);
  int rc = apply_yaml(&l, label, buf, len, e);
  return rc ? rc : finish(&l, e);
}

int kt_config_load(struct kt_config *c, int argc, char **argv, char **envp, struct kt_err *e) {
  struct loader l;
  loader_init(&l, c);
  if (e)
    e->code = 0, e->msg[0] = 0;

  /* 1. Scan argv. Like Go's flag package: -flag or --flag, =value or the next
   * argument; a boolean takes only =value; the first non-flag is an error. */
  const char *flagval[O_COUNT] = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      if (i + 1 < argc)
        return kt_err_set(e, KT_EINVAL, "unexpected argument \"%.120s\"", argv[i + 1]);
      break;
    }
    if (a[0] != '-' || a[1] == 0)
      return kt_err_set(e, KT_EINVAL, "unexpected argument \"%.120s\"", a);
    const char *name = a + (a[1] == '-' ? 2 : 1);
    if (*name == '-' || *name == '=' || *name == 0)
      return kt_err_set(e, KT_EINVAL, "bad flag syntax: %.120s", a);
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const struct opt *o = (nlen == 1 && name[0] == 'h') ? &opts[O_HELP] : opt_find(name, nlen);
    if (!o)
      return kt_err_set(e, KT_EINVAL, "unknown flag: --%.*s", (int)KT_MIN(nlen, 120), name);
    const char *v;
    if (eq)
      v = eq + 1;
    else if (o->kind == K_BOOL)
      v = "true";
    else if (i + 1 < argc)
      v = argv[++i];
    else
      return kt_err_set(e, KT_EINVAL, "--%s: missing value", o->name);
    flagval[o - opts] = v;
  }
  char where[160];
  for (int id = O_VERSION; id <= O_HELP; id++) {
    if (flagval[id]) {
      snprintf(where, sizeof where, "--%s", opts[id].name);
      int rc = opt_set(&l, &opts[id], where, flagval[id], e);
      if (rc)
        return rc;
    }
  }
  if (c->show_help || c->show_version) {
    bool h = c->show_help, v = c->show_version;
    kt_assert(finish(&l, e) == 0); /* defaults are valid */
    c->show_help = h, c->show_version = v;
    return 0;
  }

  /* 2. The config file, from the flag or KETCH_CONFIG_FILE. */
  const char *file = flagval[O_CONFIG_FILE];
  for (char **ep = envp; !file && ep && *ep; ep++)
    if (strncmp(*ep, "KETCH_CONFIG_FILE=", 18) == 0)
      file = *ep + 18;
  if (file) {
    if (!*file)
      return bad_value(e, flagval[O_CONFIG_FILE] ? "--config-file" : "KETCH_CONFIG_FILE", file,
                       "a non-empty string");
    /* Flags are still checked (etcd's flag parser types them), then dropped. */
    struct kt_config scratch;
    struct loader sl;
    loader_init(&sl, &scratch);
    int rc = 0;
    for (int id = 0; id < O_VERSION && !rc; id++) {
      if (!flagval[id] || id == O_CONFIG_FILE)
        continue;
      snprintf(where, sizeof where, "--%s", opts[id].name);
      rc = opt_set(&sl, &opts[id], where, flagval[id], e);
      if (!rc)
        kt_log(KT_LOG_WARN, "config", "flag --%s ignored because a config file is given",
               opts[id].name);
    }
    kt_config_free(&scratch);
    if (rc)
      return rc;
    kt_log(KT_LOG_INFO, "config",
           "loading server configuration from \"%.200s\"; other configuration command line "
           "flags and environment variables will be ignored if provided",
           file);
    char *buf = NULL;
    size_t len = 0;
    if ((rc = read_file(file, &buf, &len, e)))
      return rc;
    rc = apply_yaml(&l, file, buf, len, e);
    free(buf);
    if (rc)
      return rc;
    c->config_file = adup(&c->arena, file, strlen(file));
    return finish(&l, e);
  }

  /* 3. KETCH_* environment, then flags over it. */
  for (char **ep = envp; ep && *ep; ep++) {
    if (strncmp(*ep, "KETCH_", 6) != 0)
      continue;
    const char *eq = strchr(*ep, '=');
    if (!eq)
      continue;
    size_t klen = (size_t)(eq - *ep);
    const struct opt *o = NULL;
    char en[64];
    for (int id = 0; id < O_COUNT && !o; id++) {
      if (opts[id].flags & OPT_NOENV)
        continue;
      env_name(&opts[id], en, sizeof en);
      if (strlen(en) == klen && memcmp(en, *ep, klen) == 0)
        o = &opts[id];
    }
    if (o == &opts[O_CONFIG_FILE])
      continue;
    if (!o) {
      kt_log(KT_LOG_WARN, "config", "unrecognized environment variable %.120s", *ep);
      continue;
    }
    if (flagval[o - opts]) {
      kt_log(KT_LOG_WARN, "config",
             "environment variable %s is shadowed by the command-line flag --%s", en, o->name);
      continue;
    }
    int rc = opt_set(&l, o, en, eq + 1, e);
    if (rc)
      return rc;
  }
  for (int id = 0; id < O_VERSION; id++) {
    if (!flagval[id])
      continue;
    snprintf(where, sizeof where, "--%s", opts[id].name);
    int rc = opt_set(&l, &opts[id], where, flagval[id], e);
    if (rc)
      return rc;
  }
  return finish(&l, e);
}

uint32_t kt_config_io_threads(const struct kt_config *c, int cores) {
  if (c->io_threads != KT_CONFIG_THREADS_AUTO)
    return c->io_threads;
  if (cores <= 0) {
    cpu_set_t set;
    cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                        : (int)sysconf(_SC_NPROCESSORS_ONLN);
  }
  if (cores < 4)
    return 0;
  return cores - 1 < 8 ? (uint32_t)(cores - 1) : 8;
}

void kt_config_free(struct kt_config *c) {
  kt_arena_free(&c->arena);
  memset(c, 0, sizeof *c);
}

void kt_config_usage(FILE *f) {
  fprintf(f, "Usage: ketch [flags]\n"
             "  Start a ketch member. Every flag can also be set with the environment\n"
             "  variable shown (a flag overrides it), or in a YAML file given with\n"
             "  --config-file, whose keys are the flag names; when a config file is\n"
             "  given, other flags and KETCH_* variables are ignored.\n\n");
  for (int i = 0; i < O_COUNT; i++) {
    const struct opt *o = &opts[i];
    char en[64];
    env_name(o, en, sizeof en);
    fprintf(f, "  --%s%s%s\n      %s\n", o->name, o->arg[0] ? " " : "", o->arg, o->help);
    if (o->def)
      fprintf(f, "      default: \"%s\"", o->def);
    else if (i == O_DATA_DIR)
      fprintf(f, "      default: \"<name>.ketch\"");
    else if (i == O_INITIAL_CLUSTER)
      fprintf(f, "      default: \"<name>=<initial-advertise-peer-urls>\"");
    else
      fprintf(f, "      default: none");
    if (!(o->flags & OPT_NOENV))
      fprintf(f, "; env %s", en);
    fprintf(f, "\n");
  }
}
