/* tools/bench/options.c — command-line flags → struct bench_cfg.
 * Global flags may come before the subcommand or after it; the subcommand's
 * positional arguments (range KEY [END]) anywhere after it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct bench_tls bench_tls;
struct bench_auth bench_auth;

void cfg_defaults(struct bench_cfg *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->target = T_KETCH;
  cfg->conns = 1;
  cfg->clients = 1;
  cfg->timeout_ms = 30000;
  cfg->key_size = 8;
  cfg->val_size = 8;
  cfg->key_space = 1;
  cfg->txn_ops = 1;
  cfg->rw_ratio = 1;
  cfg->read_ratio = 0.5;
  cfg->leases = 1000;
  cfg->lease_ttl_s = 300;
  cfg->watchers = -1; /* per subcommand: see parse_workload */
  cfg->streams = 10;
  cfg->watch_per_stream = -1;
  cfg->put_total = -1;
  cfg->put_rate = -1;
  cfg->storm_after_s = 1;
}

void usage(int status) {
  fprintf(
      status ? stderr : stdout,
      "usage: ketch-bench [global flags] COMMAND [flags]\n"
      "global flags (etcd benchmark's):\n"
      "  --endpoints E      comma-separated host:port (default 127.0.0.1:2479 for ketch,\n"
      "                     127.0.0.1:2379 for etcd); an etcd:// prefix selects --target etcd\n"
      "  --target T         ketch (native protocol, libketch) or etcd (v3 gRPC API)\n"
      "  --conns N          connections (default 1)   --clients N  concurrent requests (1)\n"
      "  --total N          requests (default 10000 unless --duration)\n"
      "  --duration S       run for S seconds (with --total: whichever ends first)\n"
      "  --warmup S         first S seconds of the same load on the same connections,\n"
      "                     not measured (caches, the server's and ours, warm up)\n"
      "  --rate R           open loop: R requests/s on a fixed schedule; latency from the\n"
      "                     scheduled send time (coordinated omission accounted for)\n"
      "  --precise          full precision in the text report\n"
      "  --json             one JSON object on stdout   --progress  progress line even with "
      "--json\n"
      "  --timeout-ms N     per-request deadline (default 30000)\n"
      "  --cacert F  --cert F  --key F  --insecure-skip-tls-verify\n"
      "                     TLS for both targets: https:// endpoints, or endpoints without a\n"
      "                     scheme when a file is given (as etcdctl)\n"
      "  --user NAME:PASSWORD  authenticate every connection (etcd: Auth/Authenticate, then\n"
      "                     its token on every call; ketch: libketch's login)\n"
      "  --storm N  --storm-after S  N new TLS clients connect at once S s (1) into the run,\n"
      "                     from a child process that reports how long they took (ketch)\n"
      "  --threads N        N generator threads, each with its share of the clients,\n"
      "                     connections, --total and --rate (when one cannot drive the load)\n"
      "  --server-pid PID   the ketch member's process: report its state thread's CPU per\n"
      "                     request and the throughput ceiling that implies (1e6 / us)\n"
      "commands:\n"
      "  put       [--key-size N] [--val-size N] [--key-space-size N] [--sequential-keys]\n"
      "  range KEY [END] [--consistency l|s] [--limit N] [--prefix]\n"
      "  txn-put   [--txn-ops N] [--key-size --val-size --key-space-size]\n"
      "  txn-mixed [--rw-ratio R] [--consistency l|s] [--key-size --val-size --key-space-size]\n"
      "  mixed     [--read-ratio F] [--consistency l|s] [--key-size --val-size --key-space-size]\n"
      "  floor     --data-dir DIR [--count N]   fdatasync + loopback round-trip floor\n"
      "  compare   [--rounds N] [--run-seconds S] [--keys N] [--json] [--out-dir D] [WORKLOAD...]\n"
      "  lease-keepalive [--leases N (1000)] [--lease-ttl S (300)]\n"
      "                    grants N leases (not measured), then --total keep-alives of them in\n"
      "                    turn (closed loop, or --rate); etcd: one LeaseKeepAlive stream per "
      "client\n"
      "  watch-latency [--watchers N (100)] [--streams N (10)] [--put-total N (1000)]\n"
      "                [--put-rate R (100)] [--val-size N]\n"
      "                    N watchers of one key over N streams (connections); one writer puts\n"
      "                    at R/s; latency = put sent -> each watcher's event received\n"
      "  watch     [--streams N (10)] [--watch-per-stream N (100)] [--put-total N (2000)]\n"
      "            [--put-rate R (0: --clients writers, closed loop)] [--key-space-size N]\n"
      "                    fan-out: watchers of a key range, puts into it; events/s over all\n"
      "                    watchers, each watcher must get every event\n"
      "            (both: --duration S puts for S seconds instead of --put-total)\n"
      "  lock [NAME] [--lease-ttl S (300)]\n"
      "                    --clients clients (threads, a connection and session each) lock and\n"
      "                    unlock mutex NAME (ketch-bench-lock) in turn; one request = one\n"
      "                    acquire + release (ketch: libketch's mutex recipe; etcd: v3lock)\n");
  exit(status);
}

enum {
  O_EP = 1,
  O_TARGET,
  O_CONNS,
  O_CLIENTS,
  O_TOTAL,
  O_DURATION,
  O_WARMUP,
  O_RATE,
  O_PRECISE,
  O_JSON,
  O_PROGRESS,
  O_TIMEOUT,
  O_KS,
  O_VS,
  O_KSP,
  O_SEQ,
  O_CONS,
  O_LIMIT,
  O_PREFIX,
  O_TXN_OPS,
  O_RW,
  O_READ,
  O_LEASES,
  O_LEASE_TTL,
  O_WATCHERS,
  O_STREAMS,
  O_WPS,
  O_PUT_TOTAL,
  O_PUT_RATE,
  O_HELP,
  O_CACERT,
  O_CERT,
  O_KEY,
  O_SKIP_VERIFY,
  O_STORM,
  O_STORM_AFTER,
  O_USER,
  O_THREADS,
  O_SERVER_PID,
};

static const struct option opts[] = {{"endpoints", 1, 0, O_EP},
                                     {"target", 1, 0, O_TARGET},
                                     {"conns", 1, 0, O_CONNS},
                                     {"clients", 1, 0, O_CLIENTS},
                                     {"total", 1, 0, O_TOTAL},
                                     {"duration", 1, 0, O_DURATION},
                                     {"warmup", 1, 0, O_WARMUP},
                                     {"rate", 1, 0, O_RATE},
                                     {"precise", 0, 0, O_PRECISE},
                                     {"json", 0, 0, O_JSON},
                                     {"progress", 0, 0, O_PROGRESS},
                                     {"timeout-ms", 1, 0, O_TIMEOUT},
                                     {"key-size", 1, 0, O_KS},
                                     {"val-size", 1, 0, O_VS},
                                     {"key-space-size", 1, 0, O_KSP},
                                     {"sequential-keys", 0, 0, O_SEQ},
                                     {"consistency", 1, 0, O_CONS},
                                     {"limit", 1, 0, O_LIMIT},
                                     {"prefix", 0, 0, O_PREFIX},
                                     {"txn-ops", 1, 0, O_TXN_OPS},
                                     {"rw-ratio", 1, 0, O_RW},
                                     {"read-ratio", 1, 0, O_READ},
                                     {"leases", 1, 0, O_LEASES},
                                     {"lease-ttl", 1, 0, O_LEASE_TTL},
                                     {"watchers", 1, 0, O_WATCHERS},
                                     {"streams", 1, 0, O_STREAMS},
                                     {"watch-per-stream", 1, 0, O_WPS},
                                     {"watchers-per-stream", 1, 0, O_WPS},
                                     {"put-total", 1, 0, O_PUT_TOTAL},
                                     {"put-rate", 1, 0, O_PUT_RATE},
                                     {"help", 0, 0, O_HELP},
                                     {"cacert", 1, 0, O_CACERT},
                                     {"cert", 1, 0, O_CERT},
                                     {"key", 1, 0, O_KEY},
                                     {"insecure-skip-tls-verify", 0, 0, O_SKIP_VERIFY},
                                     {"storm", 1, 0, O_STORM},
                                     {"storm-after", 1, 0, O_STORM_AFTER},
                                     {"user", 1, 0, O_USER},
                                     {"threads", 1, 0, O_THREADS},
                                     {"server-pid", 1, 0, O_SERVER_PID},
                                     {0, 0, 0, 0}};

static long num(const char *flag, const char *s, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) {
    fprintf(stderr, "ketch-bench: --%s %s: expected an integer in [%ld, %ld]\n", flag, s, lo, hi);
    exit(2);
  }
  return v;
}

static double fnum(const char *flag, const char *s, double lo, double hi) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "ketch-bench: --%s %s: expected a number in [%g, %g]\n", flag, s, lo, hi);
    exit(2);
  }
  return v;
}

/* One flag. Returns 0, or -1 for an unknown one. */
static int apply(struct bench_cfg *c, int o, const char *arg) {
  switch (o) {
  case O_EP:
    c->endpoints = arg;
    if (!strncmp(arg, "etcd://", 7)) {
      c->target = T_ETCD;
      c->endpoints = arg + 7;
    }
    break;
  case O_CACERT:
    bench_tls.cacert = *arg ? arg : NULL;
    break;
  case O_CERT:
    bench_tls.cert = *arg ? arg : NULL;
    break;
  case O_KEY:
    bench_tls.key = *arg ? arg : NULL;
    break;
  case O_SKIP_VERIFY:
    bench_tls.skip_verify = true;
    break;
  case O_USER: {
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg) {
      fprintf(stderr, "ketch-bench: --user %s: expected NAME:PASSWORD\n", arg);
      exit(2);
    }
    bench_auth.user = strndup(arg, (size_t)(colon - arg));
    bench_auth.password = colon + 1;
    break;
  }
  case O_THREADS:
    c->threads = (int)num("threads", arg, 1, 256);
    break;
  case O_SERVER_PID:
    c->server_pid = (int)num("server-pid", arg, 1, 1 << 30);
    break;
  case O_STORM:
    c->storm = (int)num("storm", arg, 1, 100000);
    break;
  case O_STORM_AFTER:
    c->storm_after_s = fnum("storm-after", arg, 0, 3600);
    break;
  case O_TARGET:
    if (!strcmp(arg, "ketch"))
      c->target = T_KETCH;
    else if (!strcmp(arg, "etcd"))
      c->target = T_ETCD;
    else {
      fprintf(stderr, "ketch-bench: --target %s: expected ketch or etcd\n", arg);
      exit(2);
    }
    break;
  case O_CONNS:
    c->conns = (int)num("conns", arg, 1, 1024);
    break;
  case O_CLIENTS:
    c->clients = (int)num("clients", arg, 1, 100000);
    break;
  case O_TOTAL:
    c->total = num("total", arg, 1, 1000000000000L);
    break;
  case O_DURATION:
    c->duration_s = fnum("duration", arg, 0.001, 1e6);
    break;
  case O_WARMUP:
    c->warmup_s = fnum("warmup", arg, 0, 3600);
    break;
  case O_RATE:
    c->rate = fnum("rate", arg, 0.001, 1e9);
    break;
  case O_PRECISE:
    c->precise = true;
    break;
  case O_JSON:
    c->json = true;
    break;
  case O_PROGRESS:
    c->progress_set = true;
    break;
  case O_TIMEOUT:
    c->timeout_ms = (int)num("timeout-ms", arg, 1, 3600000);
    break;
  case O_KS:
    c->key_size = (int)num("key-size", arg, 1, BENCH_MAX_KEY);
    break;
  case O_VS:
    c->val_size = (int)num("val-size", arg, 0, 64 << 20);
    break;
  case O_KSP:
    c->key_space = num("key-space-size", arg, 1, 1000000000000L);
    break;
  case O_SEQ:
    c->sequential = true;
    break;
  case O_CONS:
    if (strcmp(arg, "l") && strcmp(arg, "s")) {
      fprintf(stderr, "ketch-bench: --consistency %s: expected l or s\n", arg);
      exit(2);
    }
    c->serializable = arg[0] == 's';
    break;
  case O_LIMIT:
    c->limit = num("limit", arg, 0, 1000000000000L);
    break;
  case O_PREFIX:
    c->prefix = true;
    break;
  case O_TXN_OPS:
    c->txn_ops = (int)num("txn-ops", arg, 1, BENCH_MAX_TXN_OPS);
    break;
  case O_RW:
    c->rw_ratio = fnum("rw-ratio", arg, 0, 1e6);
    break;
  case O_READ:
    c->read_ratio = fnum("read-ratio", arg, 0, 1);
    break;
  case O_LEASES:
    c->leases = num("leases", arg, 1, 10000000);
    break;
  case O_LEASE_TTL:
    c->lease_ttl_s = num("lease-ttl", arg, 1, 1000000);
    break;
  case O_WATCHERS:
    c->watchers = num("watchers", arg, 1, 1000000);
    break;
  case O_STREAMS:
    c->streams = (int)num("streams", arg, 1, 1024);
    break;
  case O_WPS:
    c->watch_per_stream = (int)num("watch-per-stream", arg, 1, 100000);
    break;
  case O_PUT_TOTAL:
    c->put_total = num("put-total", arg, 1, 100000000);
    break;
  case O_PUT_RATE:
    c->put_rate = fnum("put-rate", arg, 0, 1e9);
    break;
  case O_HELP:
    usage(0);
    break;
  default:
    return -1;
  }
  return 0;
}

/* Global flags before the subcommand: returns the index of the subcommand. */
int parse_globals(struct bench_cfg *cfg, int argc, char **argv);
int parse_globals(struct bench_cfg *cfg, int argc, char **argv) {
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1)
    if (apply(cfg, o, optarg))
      usage(2);
  return optind;
}

void parse_workload(struct bench_cfg *cfg, const char *name, int argc, char **argv) {
  static const struct {
    const char *name;
    int w;
  } names[] = {{"put", W_PUT},         {"range", W_RANGE},
               {"txn-put", W_TXN_PUT}, {"txn-mixed", W_TXN_MIXED},
               {"mixed", W_MIXED},     {"lease-keepalive", W_LEASE_KEEPALIVE},
               {"watch", W_WATCH},     {"watch-latency", W_WATCH_LATENCY},
               {"lock", W_LOCK}};
  cfg->workload = -1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(name, names[i].name))
      cfg->workload = names[i].w, cfg->workload_name = names[i].name;
  if (cfg->workload < 0)
    usage(2);
  int o;
  optind = 0; /* GNU: full reinit (permutation state); argv[0] is the subcommand */
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1)
    if (apply(cfg, o, optarg))
      usage(2);
  int npos = argc - optind;
  if (cfg->workload == W_LOCK) {
    if (npos > 1) {
      fprintf(stderr, "ketch-bench: lock takes one NAME at most\n");
      exit(2);
    }
    cfg->range_key = npos ? argv[optind] : "ketch-bench-lock";
  } else if (cfg->workload == W_RANGE) {
    if (npos < 1 || npos > 2) {
      fprintf(stderr, "ketch-bench: range needs KEY [END]\n");
      exit(2);
    }
    cfg->range_key = argv[optind];
    cfg->range_end = npos == 2 ? argv[optind + 1] : NULL;
    if (cfg->prefix && cfg->range_end) {
      fprintf(stderr, "ketch-bench: range: --prefix and END exclude each other\n");
      exit(2);
    }
  } else if (npos) {
    fprintf(stderr, "ketch-bench: %s: unexpected argument %s\n", name, argv[optind]);
    exit(2);
  }
  if (cfg->workload == W_TXN_PUT && cfg->txn_ops > cfg->key_space) {
    fprintf(stderr,
            "ketch-bench: txn-put: --txn-ops %d needs --key-space-size >= it (distinct keys)\n",
            cfg->txn_ops);
    exit(2);
  }
  if (cfg->workload == W_WATCH_LATENCY || cfg->workload == W_WATCH) {
    bool lat = cfg->workload == W_WATCH_LATENCY;
    if (cfg->watch_per_stream > 0)
      cfg->watchers = (long)cfg->watch_per_stream * cfg->streams;
    else if (cfg->watchers < 0)
      cfg->watchers = lat ? 100 : 1000;
    if (cfg->put_total < 0) /* with --duration: puts until it ends */
      cfg->put_total = cfg->duration_s ? 1000000000000L : lat ? 1000 : 2000;
    if (cfg->put_rate < 0)
      cfg->put_rate = lat ? 100 : 0;
    if (cfg->val_size < 20)
      cfg->val_size = 20; /* the put's sequence number, in decimal */
    if (cfg->streams > cfg->watchers)
      cfg->streams = (int)cfg->watchers;
  }
  if (!cfg->total && !cfg->duration_s)
    cfg->total = 10000;
  if (!cfg->endpoints)
    cfg->endpoints = cfg->target == T_ETCD ? "127.0.0.1:2379" : "127.0.0.1:2479";
  if (cfg->conns > cfg->clients)
    cfg->conns = cfg->clients;
  cfg->progress = cfg->progress_set || !cfg->json;
}
