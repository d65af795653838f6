/* tools/bench/bench.h — ketch-bench, the load generator, shaped like etcd's
 * tools/benchmark (same global flags and subcommands), with two targets that
 * share one generator: ketch's native protocol (libketch) and etcd's v3 gRPC
 * API (tools/grpc), so one command measures both.
 *
 * Files: options.c (flags → struct bench_cfg), workload.c (the next request
 * of each workload), hist.c (latency histogram), target_ketch.c /
 * target_etcd.c (submit a request, poll integration), run.c (the loop:
 * closed or open loop, progress line), report.c (text and JSON), floor.c
 * (the disk + loopback floor), compare.c (ketch vs etcd side by side),
 * servers.c (the servers compare starts and measures), resources.c (RSS,
 * data dir and restart with many keys),
 * watch.c (watch, watch-latency: watchers + writers in one loop), lock.c
 * (lock: one thread per client, synchronous lock/unlock). lease-keepalive
 * is bench_run's loop after an unmeasured grant run (run.c).
 *
 * Data flow of a run: one ppoll() over every connection's fd → the target's
 * process() → completion callbacks record the latency (from the send time in
 * closed loop, from the SCHEDULED send time in open loop, so coordinated
 * omission is accounted for) and count ok / errors by code → the next
 * request is issued. One thread, or with --threads N, N such loops each on
 * its own connections and share of the clients, their results merged.
 *
 * Invariants: every request issued completes exactly once (ok or an error
 * code), so ok + errors == issued at the end of a run; no request is issued
 * beyond --total; no latency is recorded for an error.
 */
#ifndef KT_BENCH_H
#define KT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- histogram (hist.c) ----
 * HdrHistogram-style: values (ns) below 2^HIST_SUB_BITS are exact; above, each
 * power-of-two range has 2^(HIST_SUB_BITS-1) linear sub-buckets. A percentile
 * is reported as its bucket's midpoint, so its relative error is at most
 * HIST_REL_ERROR; min and max are exact. Values above 2^40 ns (18 min) are
 * clamped into the top bucket. */
#define HIST_SUB_BITS 8
#define HIST_HALF (1 << (HIST_SUB_BITS - 1))
#define HIST_MAX_EXP 40
#define HIST_BUCKETS ((1 << HIST_SUB_BITS) + (HIST_MAX_EXP - HIST_SUB_BITS) * HIST_HALF)
#define HIST_REL_ERROR (1.0 / (2 * HIST_HALF)) /* 0.39% */

struct hist {
  uint64_t n, min_ns, max_ns;
  double sum, sumsq;
  uint64_t b[HIST_BUCKETS];
};

void hist_reset(struct hist *h);
void hist_add(struct hist *h, uint64_t ns);
void hist_merge(struct hist *into, const struct hist *from);
/* The p-th percentile (0 < p <= 100) in ns; 0 for an empty histogram. */
double hist_pct(const struct hist *h, double p);
double hist_mean(const struct hist *h);
double hist_stddev(const struct hist *h);

/* ---- configuration (options.c) ---- */
enum {
  W_PUT,
  W_RANGE,
  W_TXN_PUT,
  W_TXN_MIXED,
  W_MIXED,
  W_LEASE_GRANT,     /* the setup of lease-keepalive (not a subcommand) */
  W_LEASE_KEEPALIVE, /* one keep-alive of lease i mod --leases per request */
  W_WATCH,           /* fan-out throughput (watch.c) */
  W_WATCH_LATENCY,   /* put-to-event latency (watch.c) */
  W_LOCK,            /* mutex contention (lock.c) */
};
enum { T_KETCH, T_ETCD };
static inline const char *target_name(int t) { return t == T_ETCD ? "etcd" : "ketch"; }

#define BENCH_MAX_TXN_OPS 128
#define BENCH_MAX_KEY 1024

struct bench_cfg {
  int target; /* T_KETCH / T_ETCD */
  const char *endpoints;
  int conns, clients;
  long total;        /* requests; 0 = until duration */
  double duration_s; /* 0 = until total */
  double rate;       /* requests/s; 0 = closed loop */
  bool precise, json, progress, progress_set;
  int timeout_ms;
  int workload; /* W_* */
  const char *workload_name;
  /* put, txn-put, mixed */
  int key_size, val_size;
  long key_space;
  bool sequential;
  int txn_ops;
  double rw_ratio, read_ratio;
  /* range */
  const char *range_key, *range_end;
  bool serializable, prefix;
  long limit;
  /* lease-keepalive: leases lease_base + 0 .. + leases-1, granted with
   * lease_ttl_s before the measured keep-alives */
  long leases;
  int64_t lease_base, lease_ttl_s;
  /* watch, watch-latency (watch.c) */
  long watchers, put_total;
  int streams, watch_per_stream;
  double put_rate; /* puts/s; 0 = as fast as --clients writers go */
  /* --storm N: N new TLS clients connect at once, --storm-after S seconds
   * into the run, from a child process (storm.c) */
  int storm;
  double storm_after_s;
  /* --threads N: generator threads, each with its share of the clients,
   * connections, --total and --rate (bench_run); gen_index / gen_count: this
   * thread's place (workload.c) */
  int threads, gen_index, gen_count;
  /* --server-pid PID: the ketch member whose state thread's CPU per request
   * the report gives (0: none) */
  int server_pid;
  /* --warmup S: S seconds of the same workload on the same connections
   * before the measured run, counted nowhere */
  double warmup_s;
};

/* TLS, etcd benchmark's flags (--cacert, --cert, --key) and
 * --insecure-skip-tls-verify, for both targets: an endpoint written https://
 * uses TLS, http:// never does, one without a scheme does when a file is
 * given (etcdctl's rule). One per process: compare sets it for its servers. */
struct bench_tls {
  const char *cacert, *cert, *key;
  bool skip_verify;
};
extern struct bench_tls bench_tls;
/* --user NAME:PASSWORD (etcd benchmark's flag): every connection of either
 * target authenticates as this user; NULL: none. */
struct bench_auth {
  const char *user, *password;
};
extern struct bench_auth bench_auth;
/* The etcd target's TLS client context from bench_tls (made on first use;
 * ALPN h2), or NULL with err filled. */
struct kt_tls_ctx *bench_etcd_tls(char *err, size_t err_len);

void cfg_defaults(struct bench_cfg *cfg);
/* storm.c: fork the --storm child (0 when none); stop it. */
#include <sys/types.h>
pid_t storm_spawn(const struct bench_cfg *cfg);
void storm_stop(pid_t pid);
void usage(int status);
/* Parses argv[i..] options of a workload subcommand (and global ones given
 * after it) into cfg. Exits 2 with a message on a bad flag. */
void parse_workload(struct bench_cfg *cfg, const char *name, int argc, char **argv);

/* ---- one request (workload.c) ---- */
enum { OP_PUT, OP_RANGE, OP_TXN, OP_LEASE_GRANT, OP_KEEPALIVE };
struct bench_kv {
  const char *key;
  size_t key_len;
};
struct bench_op {
  int kind;
  bool is_read; /* for the read / write split of mixed workloads */
  /* OP_PUT: key, val; OP_RANGE: key, end, limit, serializable;
   * OP_TXN: n_puts puts of keys[] = val, or (n_puts == 0) one range of key */
  const char *key, *end;
  size_t key_len, end_len;
  const char *val;
  size_t val_len;
  long limit;
  bool serializable;
  int n_puts;
  struct bench_kv keys[BENCH_MAX_TXN_OPS];
  /* OP_LEASE_GRANT: lease with ttl_s; OP_KEEPALIVE: lease */
  int64_t lease, ttl_s;
  /* the issuing client's slot for a target's per-client state (the etcd
   * target's keep-alive stream), -1 until the target sets it; NULL when the
   * request has no client (then the target uses a shared state) */
  int *client_state;
};

struct workload_state {
  uint64_t seq, rng;
  char *val;
  char keybuf[BENCH_MAX_TXN_OPS][BENCH_MAX_KEY + 1];
  char endbuf[BENCH_MAX_KEY + 1];
};
int workload_init(struct workload_state *w, const struct bench_cfg *cfg);
void workload_free(struct workload_state *w);
/* Fills *op with the next request; pointers stay valid until the next call. */
void workload_next(struct workload_state *w, const struct bench_cfg *cfg, struct bench_op *op);
/* Key number k formatted as the workload's key (zero-padded decimal). */
size_t workload_key(char *out, int key_size, uint64_t k);

/* ---- targets (target_ketch.c, target_etcd.c) ----
 * A target completes every accepted request exactly once by calling
 * bench_done(arg, err): err is NULL for success, else a static error name
 * ("ETIMEOUT", "UNAVAILABLE"). arg is a struct bench_req (the submitter's),
 * and bench_done calls its done. */
struct bench_req {
  void (*done)(struct bench_req *r, const char *err);
};
void bench_done(void *arg, const char *err);

/* Watch deliveries (watch.c): for an accepted watch the target calls
 * bench_watch_created(arg) once when the server confirms it, then
 * bench_watch_event(arg, value) for every event in order, and
 * bench_watch_end(arg, err) if the watch ends (canceled, stream lost); err
 * names why. Nothing runs after bench_watch_end. */
void bench_watch_created(void *arg);
void bench_watch_event(void *arg, const char *value, size_t value_len);
void bench_watch_end(void *arg, const char *err);
struct bench_watch_req {
  const char *key, *end; /* end NULL: the one key */
  size_t key_len, end_len;
};
struct target {
  const char *name;
  int (*open)(void **conn, const char *endpoints, int max_outstanding, int timeout_ms, char *err,
              size_t err_len);
  void (*close)(void *conn);
  /* 0 = accepted (bench_done runs later, never from inside submit); else
   * *err_name says why and bench_done will not run. */
  int (*submit)(void *conn, const struct bench_op *op, int timeout_ms, void *arg,
                const char **err_name);
  int (*fd)(const void *conn);
  short (*events)(const void *conn);
  int (*timeout_ms)(const void *conn);
  void (*process)(void *conn);
  /* Opens a watch on conn (each connection is one watch stream). 0 =
   * accepted, else *err_name says why and nothing will be delivered. */
  int (*watch)(void *conn, const struct bench_watch_req *req, void *arg, const char **err_name);
};
extern const struct target target_ketch, target_etcd;

/* ---- a run (run.c) ---- */
#define BENCH_MAX_ERR_KINDS 32
struct bench_result {
  long issued, ok, errors;
  double seconds;
  double cpu_s; /* this process's user + system CPU during the run: near
                 * `seconds` means the generator itself is saturated */
  struct hist all, read, write;
  struct {
    const char *name;
    long n;
  } err[BENCH_MAX_ERR_KINDS];
  int n_err;
  long leases;    /* lease-keepalive: leases granted before the run */
  double grant_s; /* ... in this many seconds */
  /* with --server-pid: CPU seconds during the run of the member's state
   * thread and of the whole process (-1: not measured) */
  double state_cpu_s, server_cpu_s;
  /* the same two clocks when the measured part began (after --warmup) */
  double st_mark, pc_mark;
};
/* Runs cfg's workload. Returns 0, or 1 with err filled (could not connect).
 * The result is filled either way (counts of what ran). */
int bench_run(const struct bench_cfg *cfg, struct bench_result *res, char *err, size_t err_len);

/* ---- output (report.c) ---- */
void report_text(const struct bench_cfg *cfg, const struct bench_result *r);
void report_json(const struct bench_cfg *cfg, const struct bench_result *r);

/* ---- other subcommands ---- */
/* argv[0] is the subcommand; cfg holds the global flags given before it. */
int floor_main(const struct bench_cfg *cfg, int argc, char **argv);   /* floor.c */
int compare_main(const struct bench_cfg *cfg, int argc, char **argv); /* compare.c */
/* lease-keepalive: grants cfg->leases leases (unmeasured, counted in
 * *grant), then runs the keep-alives as bench_run does. 0, or 1 with err. */
int bench_lease_keepalive(struct bench_cfg *cfg, struct bench_result *grant,
                          struct bench_result *res, char *err, size_t err_len);

/* ---- watch, watch-latency (watch.c) ---- */
struct watch_result {
  long watchers, created, put_issued, put_ok, put_errors;
  long events, expected, foreign;               /* expected = watchers x put_ok */
  long min_per_watcher, max_per_watcher, ended; /* events of the poorest / richest watcher */
  double seconds; /* first put sent .. last event received (or the end) */
  double setup_s; /* creating the watches */
  double cpu_s;
  struct hist lat, put_lat; /* put sent -> event received; put latency */
  struct {
    const char *name;
    long n;
  } err[BENCH_MAX_ERR_KINDS];
  int n_err;
};
int watch_run(const struct bench_cfg *cfg, struct watch_result *res, char *err, size_t err_len);
void watch_report(const struct bench_cfg *cfg, const struct watch_result *r);

/* ---- lock (lock.c) ----
 * --clients threads contend for the mutex cfg->range_key; fills res as
 * bench_run does (one request = one acquire + release). 0, or 1 with err
 * (a client could not connect or open its session). */
int lock_run(const struct bench_cfg *cfg, struct bench_result *res, char *err, size_t err_len);
uint64_t bench_now_ns(void);
/* servers.c: user + system CPU seconds so far of process pid, and of its
 * state thread (the thread named ketch-state, else the main thread: tid ==
 * pid); -1 if unknown. */
double proc_cpu_s(int pid);
double state_thread_cpu_s(int pid);
/* The floor (floor.c): count x (write 256 B + fdatasync) on a preallocated
 * file in dir, and count loopback TCP round trips. 0, or -1 with err. */
int floor_measure(const char *dir, int count, struct hist *fsync_h, struct hist *rtt_h, char *err,
                  size_t err_len);

#endif
