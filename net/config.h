/* net/config.h — the member's configuration: etcd-shaped flags, KETCH_*
 * environment variables and an etcd-style YAML config file, merged into one
 * validated struct kt_config.
 *
 * Data flow (kt_config_load):
 *   argv  --scan-->  raw flag values (unknown flag / missing value fail here)
 *   if --config-file (or KETCH_CONFIG_FILE) is given:
 *       defaults <- YAML file                 (flags and env are ignored, as etcd 3.4)
 *   else:
 *       defaults <- KETCH_* env <- flags      (a flag overrides its env variable)
 *   derived defaults (data-dir, advertise URLs, initial-cluster) <- cross checks
 *
 * Precedence, and where ketch differs from etcd 3.4 (checked against Debian's
 * etcd 3.4.23):
 *   - A config file takes over: every other flag and KETCH_* variable is
 *     ignored (logged once at info, once per ignored flag at warn). Flags are
 *     still syntax-checked, as etcd's Go flag parser does.
 *   - etcd exits when ETCD_X and --x are both set; ketch lets the flag win and
 *     logs a warning (the task asks for "flags override env").
 *   - Unknown KETCH_* variables and unknown YAML keys are logged at warn and
 *     ignored (etcd warns on the first and silently ignores the second).
 *   - etcd's YAML maps client-transport-security and peer-transport-security
 *     (cert-file, key-file, client-cert-auth, trusted-ca-file, auto-tls) set
 *     the flags of those names (peer-* for the second); every TLS flag is also
 *     a top-level key, and cipher-suites may be a YAML list as in etcd.
 *   - When --listen-client-urls (--listen-peer-urls) is set but
 *     --advertise-client-urls (--initial-advertise-peer-urls) is not, ketch
 *     advertises the listen URLs instead of etcd's error, unless a listen host
 *     is a wildcard (0.0.0.0, ::), which is an error as in etcd.
 *   - The member's name must appear in --initial-cluster, and its URLs there
 *     must equal --initial-advertise-peer-urls (etcd checks both at bootstrap;
 *     ketch compares host:port strings and does not resolve DNS names).
 *
 * Invariants after a successful load: every string is non-NULL (but the TLS
 * paths and names, NULL when not given), every URL list
 * the member needs (listen/advertise client and peer) has 1..KT_CONFIG_MAX_URLS
 * entries of scheme http, https or unix; an https listen URL has a certificate
 * (files or auto-tls) for its link; tls_min_version <= tls_max_version; 5*heartbeat_interval_ms <=
 * election_timeout_ms
 * <= 50000, and all numbers are within the ranges kt_config_usage prints.
 * Memory: everything hangs off c->arena; kt_config_free releases it all.
 */
#ifndef KT_CONFIG_H
#define KT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/base.h"

#define KT_CONFIG_MAX_URLS 16        /* per URL list */
#define KT_CONFIG_MAX_PEERS 64       /* name=url pairs in --initial-cluster */
#define KT_CONFIG_MAX_VALUE 4096     /* bytes in one flag/env/YAML value */
#define KT_CONFIG_MAX_FILE (1 << 20) /* bytes in a config file */

#define KT_CONFIG_DEFAULT_QUOTA_BYTES (2ull << 30)  /* quota-backend-bytes 0 means this */
#define KT_CONFIG_MAX_QUOTA_BYTES (1ull << 40)      /* hard cap; > 8 GiB warns as etcd */
#define KT_CONFIG_MAX_REQUEST_BYTES_CAP (64u << 20) /* max-request-bytes cap */
#define KT_CONFIG_MAX_ELECTION_MS 50000             /* etcd's maxElectionMs */
#define KT_CONFIG_THREADS_AUTO UINT32_MAX           /* --io-threads auto */

enum kt_url_scheme { KT_URL_HTTP = 1, KT_URL_UNIX = 2, KT_URL_HTTPS = 3 };

/* One parsed URL. raw is the string as given ("http://[::1]:2479"); host has
 * no brackets ("::1"); for unix:// URLs host is the socket path and port 0. */
struct kt_url {
  const char *raw;
  int scheme; /* enum kt_url_scheme */
  const char *host;
  uint16_t port;
};

/* A comma-separated list: raw is the whole string, v[0..n) its parts. */
struct kt_url_list {
  const char *raw;
  struct kt_url *v;
  size_t n;
};

/* One name=url pair of --initial-cluster (a name may repeat, one URL each). */
struct kt_peer {
  const char *name;
  struct kt_url url;
};

enum kt_cluster_state { KT_CLUSTER_NEW = 1, KT_CLUSTER_EXISTING = 2 };

/* One link's TLS flags, etcd's: the client link (--cert-file ...) or the
 * peer link (--peer-cert-file ...). Paths are NULL when not given. */
struct kt_config_tls {
  const char *cert_file, *key_file, *trusted_ca_file, *crl_file;
  const char *allowed_cn;       /* peer link only: --peer-cert-allowed-cn */
  const char *allowed_hostname; /* --client-cert-allowed-hostname / --peer-cert-allowed-hostname */
  bool client_cert_auth;        /* --client-cert-auth / --peer-client-cert-auth */
  bool auto_tls;                /* --auto-tls / --peer-auto-tls */
};
enum kt_compaction_mode { KT_COMPACT_PERIODIC = 1, KT_COMPACT_REVISION = 2 };

struct kt_config {
  const char *name;                               /* --name, default "default" */
  const char *data_dir;                           /* --data-dir, default "<name>.ketch" */
  struct kt_url_list listen_client_urls;          /* http://127.0.0.1:2479 */
  struct kt_url_list advertise_client_urls;       /* http://127.0.0.1:2479 */
  struct kt_url_list listen_peer_urls;            /* http://127.0.0.1:2480 */
  struct kt_url_list initial_advertise_peer_urls; /* http://127.0.0.1:2480 */
  struct kt_url_list listen_metrics_urls;         /* may be empty (n == 0) */
  const char *initial_cluster;                    /* raw; default name=<adv peer urls> */
  struct kt_peer *initial_cluster_peers;
  size_t initial_cluster_n;
  const char *initial_cluster_token;       /* "ketch-cluster" */
  int initial_cluster_state;               /* enum kt_cluster_state, default NEW */
  uint64_t snapshot_count;                 /* 10000, >= 1 */
  uint32_t heartbeat_interval_ms;          /* 100 */
  uint32_t election_timeout_ms;            /* 1000 */
  uint64_t quota_backend_bytes;            /* effective: 0 given -> 2 GiB */
  uint32_t max_request_bytes;              /* 1572864, 1..64 MiB */
  uint32_t max_txn_ops;                    /* 128, 1..65536 */
  int auto_compaction_mode;                /* enum kt_compaction_mode, default PERIODIC */
  const char *auto_compaction_retention;   /* raw, "0" = off */
  uint64_t watch_progress_notify_ms;       /* 600000 (10m) */
  uint64_t snapshot_catchup_entries;       /* 100000 */
  uint64_t auto_compaction_retention_ms;   /* periodic mode; 0 = off */
  uint64_t auto_compaction_retention_revs; /* revision mode; 0 = off */
  bool force_new_cluster;
  struct kt_config_tls client_tls, peer_tls;
  const char *cipher_suites;            /* --cipher-suites, NULL: OpenSSL's */
  int tls_min_version, tls_max_version; /* 12 or 13 (TLS1.2 / TLS1.3) */
  const char *auth_token;               /* --auth-token raw, "simple" */
  bool auth_token_signed;               /* signed (or jwt) */
  const char *auth_token_priv_key;      /* signed: priv-key=, NULL: verify only */
  const char *auth_token_pub_key;       /* signed: pub-key=, NULL: from priv-key */
  uint32_t auth_token_signed_ttl_s;     /* signed: ttl=, 300 */
  uint32_t auth_token_ttl_s;            /* --auth-token-ttl (simple), 300 */
  uint64_t auth_hash_opslimit;          /* --auth-hash-opslimit, 2 */
  uint64_t auth_hash_memlimit;          /* --auth-hash-memlimit, 64 MiB */
  uint32_t auth_hash_threads;           /* --auth-hash-threads, 1 */
  uint32_t io_threads;                  /* --io-threads, KT_CONFIG_THREADS_AUTO (net/THREADS.md) */
  int log_level;                        /* KT_LOG_DEBUG..KT_LOG_ERROR, default KT_LOG_INFO */
  const char *config_file;              /* the file used, or NULL */
  /* Bootstrap by DNS SRV or by a discovery service (NULL when not given);
   * with either, initial_cluster is "" and filled at start. */
  const char *discovery_srv, *discovery_srv_name, *dns_servers;
  bool discovery_srv_etcd_names;
  const char *discovery_endpoints, *discovery_token;
  const char *discovery_cacert, *discovery_cert, *discovery_key;
  const char *discovery_user, *discovery_password;
  uint64_t discovery_dial_timeout_ms, discovery_request_timeout_ms; /* 2s, 5s */
  const char *discovery_fallback;                                   /* "exit" */
  bool show_help;    /* --help / -h given: print kt_config_usage, exit 0 */
  bool show_version; /* --version given */

  struct kt_arena arena; /* owns every string and array above */
};

/* Fills *c from argv (argv[0] is the program name and skipped), envp (a
 * NULL-terminated "K=V" array as main's third argument or `environ`; may be
 * NULL) and the config file they name. *c needs no initialisation and must be
 * released with kt_config_free whatever this returns.
 * With --help or --version the scan of argv still rejects unknown flags, then
 * this returns 0 with show_help/show_version set and the defaults filled in,
 * skipping env, file and validation.
 * Errors: KT_EINVAL with a message naming the flag (or KETCH_* variable, or
 * "FILE: key") and the bad value; KT_EIO when the config file cannot be read. */
int kt_config_load(struct kt_config *c, int argc, char **argv, char **envp, struct kt_err *e);

/* Like the file step of kt_config_load, on bytes in memory: defaults, then the
 * YAML document buf[0..len), then validation. label names the source in
 * messages. For tests and the fuzz target. */
int kt_config_load_yaml(struct kt_config *c, const char *label, const char *buf, size_t len,
                        struct kt_err *e);

void kt_config_free(struct kt_config *c);

/* The I/O threads --io-threads asks for on a machine with `cores` usable
 * cores: the number given, or for auto cores - 1, at most 8, and 0 below 4
 * cores (measured on 2 cores: one I/O thread beside the state thread and a
 * client on the same cores cost 10-35% of the throughput of puts and
 * serializable reads; net/THREADS.md). cores 0: this process's CPU
 * affinity. */
uint32_t kt_config_io_threads(const struct kt_config *c, int cores);

/* Help text: every flag, its default and its environment variable. */
void kt_config_usage(FILE *f);

/* Parses one URL ("http://host:port", "unix://path") into *u; strings are
 * allocated from a. where names the source in messages.
 * Errors: KT_EINVAL (unixs:// is refused: TLS on unix sockets is not served). */
int kt_url_parse(struct kt_arena *a, const char *where, const char *s, struct kt_url *u,
                 struct kt_err *e);

/* Parses a Go-style duration ("1h", "30m", "1h30m", "1.5s", "250ms", "0")
 * into milliseconds, truncating below 1 ms. Returns 0, or -1 if s is not a
 * duration or exceeds Go's limit (2^63-1 ns, ~292 years). A bare integer without a unit is not
 * accepted here (auto-compaction-retention treats it as hours itself). */
int kt_duration_parse_ms(const char *s, uint64_t *ms);

#endif
