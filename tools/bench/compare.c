/* tools/bench/compare.c — `ketch-bench compare`: ketch vs etcd, side by side,
 * in one run on this machine.
 *
 * Starts a fresh 1-member etcd (Debian etcd-server, `etcd` on PATH or --etcd)
 * and a fresh 1-member ketch (bin/ketch next to this binary, or --ketch) on
 * free loopback ports with fresh data dirs (under --data-dir-base, default
 * $TMPDIR or /tmp: the same disk for both; both fsync every batch by
 * default), loads the same keys into both (--keys, 16-byte keys, 256-byte
 * values), measures the disk + loopback floor, then runs every workload
 * alternately — etcd, ketch, etcd, ketch... — for --rounds rounds of
 * --run-seconds each, and prints per workload the medians and the ratio
 * ketch/etcd, with the targets beside them, the servers' CPU seconds
 * per 100k requests. With --resource-keys N (1 member), first what each
 * server costs to hold N keys (resources.c: RSS, data dir, restart to
 * serving), each alone. The same generator drives
 * both (etcd through its v3 gRPC API, ketch through libketch).
 *
 * Workloads: put:C (C clients; put:C@R: open loop at R requests/s offered
 * to both, where the aim is p99 <= 1/10 of etcd's), range-l:C / range-s:C (one loaded key,
 * linearizable / serializable), txn-put:C, mixed:C (90% reads),
 * lease-keepalive:C (keep-alives of --leases leases granted once per server
 * before the first round, not measured), watch-latency:W (W watchers of one
 * key over min(W, 10) streams, one writer at 100 puts/s: events/s and the
 * put-to-event latency), watch:W (fan-out: W watchers of a key range over 10
 * streams, 16 writers as fast as they go: events/s). Connections: 1 for one
 * client, else 16 (etcd's benchmark defaults in the anchors). For the watch
 * lock:C (C clients lock and unlock one mutex in turn: libketch's recipe vs
 * etcd's v3lock service). For the watch
 * workloads every event missing from a watcher (watchers x ok puts minus
 * events received) counts as an error.
 *
 * Steady state: both servers run with the same auto-compaction
 * (--compaction RETENTION, default 10s: --auto-compaction-mode periodic
 * --auto-compaction-retention 10s; 0 = off). Without it every revision of a
 * long put run stays in memory until ketch's quota raises NOSPACE (at 250k
 * puts/s of 256 B values the 2 GiB quota lasts ~25 s of puts: the failures
 * of issue 17's 1024-client row). Failed requests are named by error code in
 * the table and the JSON (errors_by_code). For ketch the table also gives the
 * busiest member's state-thread CPU per request (/proc/PID/task/TID/stat)
 * and the requests/s that cost allows one state thread (the ceiling, on any
 * machine). --ketch-flag F (repeatable) passes F to every ketch member.
 *
 * --tls: both servers also serve an https:// client URL (a self-signed
 * server certificate and a self-signed client certificate made under the
 * run's directory by net/tls's auto-tls code, client certificates required:
 * --cert-file, --key-file, --trusted-ca-file, --client-cert-auth), and every
 * workload runs twice in each round, over plaintext and over TLS (TLS 1.3,
 * the generator verifying the server and presenting its certificate), so the
 * cost of TLS is read from one run: ketch over TLS as a share of ketch over
 * plaintext, and the ketch/etcd ratio over TLS beside the plaintext one.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../net/tls.h"
#include "servers.h"

#define MAX_WL 32
#define MAX_ROUNDS 15

struct wl {
  char name[32];
  int workload; /* W_* */
  int clients;
  double rate; /* offered requests/s (open loop); 0 = closed loop */
  bool serializable;
  bool tls;  /* over the https:// URLs (compare --tls) */
  int plain; /* tls: the index of its plaintext twin */
  double rps[2][MAX_ROUNDS], p50[2][MAX_ROUNDS], p99[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS];
  double st[MAX_ROUNDS]; /* ketch: the busiest member's state thread, us CPU per request */
  long errors[2];
  struct { /* the failures by error code ("ENOSPACE", gRPC's "RESOURCE_EXHAUSTED"...) */
    const char *name;
    long n;
  } errk[2][8];
  int n_errk[2];
  double med_rps[2], med_p50[2], med_p99[2], med_cpu[2]; /* cpu: server s per 100k requests */
  double med_st;
  int64_t lease_base[2]; /* lease-keepalive: leases granted on that server, 0 = not yet */
};

static void count_errors(struct wl *w, int t, const char *name, long n) {
  if (n <= 0)
    return;
  int i = 0;
  while (i < w->n_errk[t] && strcmp(w->errk[t][i].name, name))
    i++;
  if (i == w->n_errk[t]) {
    if (i == 8) /* the last slot collects the rest */
      i = 7, name = "OTHER";
    else
      w->n_errk[t]++;
    w->errk[t][i].name = name;
  }
  w->errk[t][i].n += n;
}

/* "ENOSPACE 1234, ETIMEOUT 5" */
static const char *error_list(const struct wl *w, int t, char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < w->n_errk[t]; i++)
    snprintf(buf + strlen(buf), len - strlen(buf), "%s%s %ld", i ? ", " : "", w->errk[t][i].name,
             w->errk[t][i].n);
  return buf;
}

/* The busiest member's state thread CPU seconds so far, per member: st[m]. */
static void state_cpu(struct server *m, int n, double *st) {
  for (int i = 0; i < n; i++)
    st[i] = state_thread_cpu_s(m[i].pid);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
  double t[MAX_ROUNDS];
  memcpy(t, v, (size_t)n * sizeof *v);
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static int parse_wl(const char *s, struct wl *w) {
  memset(w, 0, sizeof *w);
  const char *colon = strchr(s, ':'), *at = strchr(s, '@');
  int clients = colon ? atoi(colon + 1) : 64;
  w->rate = at ? atof(at + 1) : 0;
  if (at && !(w->rate > 0 && w->rate <= 1e7))
    return -1;
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  if (clients < 1 || clients > 100000)
    return -1;
  w->clients = clients;
  if (n == 3 && !strncmp(s, "put", 3))
    w->workload = W_PUT;
  else if (n == 7 && !strncmp(s, "range-l", 7))
    w->workload = W_RANGE;
  else if (n == 7 && !strncmp(s, "range-s", 7))
    w->workload = W_RANGE, w->serializable = true;
  else if (n == 7 && !strncmp(s, "txn-put", 7))
    w->workload = W_TXN_PUT;
  else if (n == 5 && !strncmp(s, "mixed", 5))
    w->workload = W_MIXED;
  else if (n == 4 && !strncmp(s, "lock", 4))
    w->workload = W_LOCK;
  else if (n == 15 && !strncmp(s, "lease-keepalive", 15))
    w->workload = W_LEASE_KEEPALIVE;
  else if (n == 13 && !strncmp(s, "watch-latency", 13))
    w->workload = W_WATCH_LATENCY, w->clients = colon ? clients : 100;
  else if (n == 5 && !strncmp(s, "watch", 5))
    w->workload = W_WATCH, w->clients = colon ? clients : 1000;
  else
    return -1;
  if (w->workload >= W_WATCH && w->clients > 100000)
    return -1;
  if (w->workload < W_WATCH && w->clients > 4096)
    return -1;
  if (w->rate && w->workload != W_PUT && w->workload != W_RANGE && w->workload != W_MIXED)
    return -1;
  snprintf(w->name, sizeof w->name, "%.*s:%d", (int)n, s, w->clients);
  if (w->rate)
    snprintf(w->name + strlen(w->name), sizeof w->name - strlen(w->name), "@%.0f", w->rate);
  return 0;
}

static bool is_watch(const struct wl *w) {
  return w->workload == W_WATCH || w->workload == W_WATCH_LATENCY;
}

static const char *wl_title(const struct wl *w, char *buf, size_t len) {
  static const char *const kinds[] = {"put", "range 1 key", "txn-put", "txn-mixed",
                                      "mixed 90% read"};
  if (w->workload == W_LEASE_KEEPALIVE || w->workload == W_LOCK) {
    snprintf(buf, len, "%s, %d client%s",
             w->workload == W_LOCK ? "lock + unlock one mutex" : "lease keep-alive", w->clients,
             w->clients == 1 ? "" : "s");
    return buf;
  }
  if (w->workload == W_WATCH_LATENCY) {
    snprintf(buf, len, "watch latency, %d watchers, 100 puts/s (events/s)", w->clients);
    return buf;
  }
  if (w->workload == W_WATCH) {
    snprintf(buf, len, "watch fan-out, %d watchers, 16 writers (events/s)", w->clients);
    return buf;
  }
  snprintf(buf, len, "%s%s, %d client%s", kinds[w->workload],
           w->workload == W_RANGE ? (w->serializable ? " serializable" : " linearizable") : "",
           w->clients, w->clients == 1 ? "" : "s");
  if (w->rate)
    snprintf(buf + strlen(buf), len - strlen(buf), ", %.0f/s offered", w->rate);
  if (w->tls)
    snprintf(buf + strlen(buf), len - strlen(buf), ", TLS");
  return buf;
}

/* The aim for a workload's throughput ratio, 0 = none stated (at an
 * offered rate the aim is on p99 instead: see p99_aim_met). */
static double aim(const struct wl *w) {
  if (w->rate)
    return 0;
  if (w->workload == W_PUT)
    return 10;
  if (w->workload == W_RANGE)
    return 20;
  return 0;
}

static void usage_compare(void) {
  fprintf(stderr, "usage: ketch-bench compare [--rounds N] [--run-seconds S] [--keys N] [--json]\n"
                  "         [--out-dir DIR] [--ketch PATH] [--etcd PATH] [--data-dir-base DIR]\n"
                  "         [--leases N] [--resource-keys N] [--tls] [--compaction RETENTION]\n"
                  "         [--ketch-flag FLAG]... [WORKLOAD...]   (put:C range-l:C range-s:C "
                  "txn-put:C\n"
                  "         mixed:C lease-keepalive:C watch-latency:W watch:W lock:C; put, range\n"
                  "         and mixed take @R: open loop at R requests/s; default put:1\n"
                  "         put:16 put:64 put:256 range-l:64 range-s:64 lease-keepalive:64\n"
                  "         watch-latency:100 watch:1000 lock:8)\n");
  exit(2);
}

int compare_main(const struct bench_cfg *gcfg, int argc, char **argv) {
  int rounds = 3;
  double run_s = 3;
  long keys = 100000, leases = 10000, res_keys = 0;
  int members = 1;
  bool json = gcfg->json, tls = false;
  const char *out_dir = NULL, *etcd_bin = "etcd", *base = getenv("TMPDIR");
  char ketch_bin[PATH_MAX] = "";
  const char *compaction = "10s";
  int n_kflags = 0;
  static struct wl wls[MAX_WL];
  int n_wl = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool more = i + 1 < argc;
    if (!strcmp(a, "--rounds") && more)
      rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--run-seconds") && more)
      run_s = atof(argv[++i]);
    else if (!strcmp(a, "--keys") && more)
      keys = atol(argv[++i]);
    else if (!strcmp(a, "--resource-keys") && more)
      res_keys = atol(argv[++i]);
    else if (!strcmp(a, "--leases") && more)
      leases = atol(argv[++i]);
    else if (!strcmp(a, "--json"))
      json = true;
    else if (!strcmp(a, "--out-dir") && more)
      out_dir = argv[++i];
    else if (!strcmp(a, "--etcd") && more)
      etcd_bin = argv[++i];
    else if (!strcmp(a, "--ketch") && more)
      snprintf(ketch_bin, sizeof ketch_bin, "%s", argv[++i]);
    else if (!strcmp(a, "--data-dir-base") && more)
      base = argv[++i];
    else if (!strcmp(a, "--members") && more)
      members = atoi(argv[++i]);
    else if (!strcmp(a, "--tls"))
      tls = true;
    else if (!strcmp(a, "--compaction") && more)
      compaction = argv[++i];
    else if (!strcmp(a, "--ketch-flag") && more && n_kflags < 8)
      server_ketch_flags[n_kflags++] = argv[++i];
    else if (a[0] != '-' && n_wl < MAX_WL && !parse_wl(a, &wls[n_wl]))
      n_wl++;
    else
      usage_compare();
  }
  if (rounds < 1 || rounds > MAX_ROUNDS || !(run_s > 0) || keys < 1 || leases < 1 || res_keys < 0 ||
      (res_keys && members != 1) || leases > 10000000 || (members != 1 && members != 3))
    usage_compare();
  if (!n_wl) {
    static const char *const def[] = {"put:1",
                                      "put:16",
                                      "put:64",
                                      "put:256",
                                      "range-l:64",
                                      "range-s:64",
                                      "lease-keepalive:64",
                                      "watch-latency:100",
                                      "watch:1000",
                                      "lock:8"};
    for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
      parse_wl(def[i], &wls[n_wl++]);
  }
  if (tls) { /* each workload of put, range, txn-put and mixed again over TLS, right after
              * it in every round (the two are measured within seconds of each other) */
    static struct wl both[MAX_WL];
    int n = 0;
    for (int i = 0; i < n_wl && n < MAX_WL; i++) {
      both[n++] = wls[i];
      if (wls[i].workload > W_MIXED || n == MAX_WL)
        continue;
      both[n] = wls[i];
      both[n].tls = true;
      both[n].plain = n - 1;
      snprintf(both[n].name + strlen(both[n].name), sizeof both[n].name - strlen(both[n].name),
               "+tls");
      n++;
    }
    memcpy(wls, both, sizeof both);
    n_wl = n;
  }
  if (!ketch_bin[0]) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
      *slash = 0;
    snprintf(ketch_bin, sizeof ketch_bin, "%.*s/ketch", (int)(sizeof ketch_bin - 8), self);
  }
  if (!base)
    base = "/tmp";
  /* Both servers keep the same history (a steady state: without compaction
   * every revision stays until the quota's NOSPACE, which ketch reaches in
   * tens of seconds at 100k+ puts/s) */
  server_compaction = strcmp(compaction, "0") && strcmp(compaction, "off") ? compaction : NULL;
  static struct server all[2][3]; /* [T_KETCH / T_ETCD][member] */
  memset(all, 0, sizeof all);
  static char eps[2][256], ics[2][512]; /* endpoint lists, --initial-cluster */
  char tmpl[PATH_MAX];
  snprintf(tmpl, sizeof tmpl, "%s/ketch-bench-compare-XXXXXX", base);
  if (!mkdtemp(tmpl)) {
    fprintf(stderr, "ketch-bench compare: mkdtemp %s: %s\n", tmpl, strerror(errno));
    return 1;
  }
  int rc = 1;
  static struct bench_result r;
  char err[512];
  struct resource_figures res[2];
  const char *const bins[2] = {ketch_bin, etcd_bin}; /* [T_KETCH], [T_ETCD] */
  if (res_keys && resources_measure(tmpl, bins, res_keys, res, err, sizeof err)) {
    fprintf(stderr, "ketch-bench compare: resources: %s\n", err);
    goto out;
  }
  static char tls_files[4][PATH_MAX + 32];
  if (tls) {
    const char *hosts[] = {"127.0.0.1"};
    struct kt_err e = {0};
    char sdir[PATH_MAX], cdir[PATH_MAX];
    snprintf(sdir, sizeof sdir, "%.4000s/tls/server", tmpl);
    snprintf(cdir, sizeof cdir, "%.4000s/tls/client", tmpl);
    if (kt_tls_selfcert(sdir, hosts, 1, &e) || kt_tls_selfcert(cdir, hosts, 1, &e)) {
      fprintf(stderr, "ketch-bench compare: certificates: %s\n", e.msg);
      goto out;
    }
    snprintf(tls_files[0], sizeof tls_files[0], "%s/cert.pem", sdir);
    snprintf(tls_files[1], sizeof tls_files[1], "%s/key.pem", sdir);
    snprintf(tls_files[2], sizeof tls_files[2], "%s/cert.pem", cdir);
    snprintf(tls_files[3], sizeof tls_files[3], "%s/key.pem", cdir);
    server_tls = (struct server_tls){tls_files[0], tls_files[1], tls_files[2]};
    bench_tls.cacert = tls_files[0]; /* the server's self-signed certificate is its CA */
    bench_tls.cert = tls_files[2];
    bench_tls.key = tls_files[3];
  }
  static char teps[2][256]; /* the https:// endpoint lists */
  for (int t = 0; t < 2; t++) {
    eps[t][0] = ics[t][0] = teps[t][0] = 0;
    for (int m = 0; m < members; m++) {
      struct server *s = &all[t][m];
      char dir[PATH_MAX];
      snprintf(dir, sizeof dir, "%.3900s/%s%d", tmpl, target_name(t), m + 1);
      server_init(s, t == T_ETCD ? etcd_bin : ketch_bin, dir);
      size_t el = strlen(eps[t]), il = strlen(ics[t]), tl = strlen(teps[t]);
      snprintf(eps[t] + el, sizeof eps[t] - el, "%s%s", m ? "," : "", s->endpoint);
      snprintf(teps[t] + tl, sizeof teps[t] - tl, "%s%s", m ? "," : "", s->tls_endpoint);
      snprintf(ics[t] + il, sizeof ics[t] - il, "%sm%d=http://127.0.0.1:%d", m ? "," : "", m + 1,
               s->peer);
    }
    for (int m = 0; m < members; m++) {
      char name[16];
      snprintf(name, sizeof name, "m%d", m + 1);
      server_start(&all[t][m], t, name, ics[t]);
    }
    for (int m = 0; m < members; m++)
      if (all[t][m].pid < 0 || !wait_ready(t, all[t][m].endpoint, all[t][m].pid, 60)) {
        fprintf(stderr, "ketch-bench compare: %s did not start (see %s)\n", target_name(t),
                all[t][m].log);
        goto out;
      }
  }
  /* the floor, on the disk of the data dirs: measured before every round
   * (the disk's speed drifts with the other load), median of the rounds */
  static struct hist fs, rt;
  double fs_p50[MAX_ROUNDS], rt_p50[MAX_ROUNDS];
  /* load the same keys into both */
  for (int t = T_ETCD; t >= T_KETCH; t--) {
    struct bench_cfg c;
    load_cfg(&c, t, eps[t], keys);
    fprintf(stderr, "compare: loading %ld keys into %s\n", keys, target_name(t));
    if (bench_run(&c, &r, err, sizeof err) || r.errors) {
      fprintf(stderr, "ketch-bench compare: loading %s: %s (%ld errors)\n", target_name(t), err,
              r.errors);
      goto out;
    }
  }
  char range_key[32];
  workload_key(range_key, 16, 1);
  for (int round = 0; round < rounds; round++) {
    if (floor_measure(tmpl, 500, &fs, &rt, err, sizeof err)) {
      fprintf(stderr, "ketch-bench compare: floor: %s\n", err);
      goto out;
    }
    fs_p50[round] = hist_pct(&fs, 50) / 1e6;
    rt_p50[round] = hist_pct(&rt, 50) / 1e6;
    fprintf(stderr, "compare: round %d/%d floor: fdatasync p50 %.3f ms, loopback rtt p50 %.3f ms\n",
            round + 1, rounds, fs_p50[round], rt_p50[round]);
    for (int i = 0; i < n_wl; i++)
      for (int t = T_ETCD; t >= T_KETCH; t--) { /* A B: etcd, then ketch */
        struct wl *w = &wls[i];
        struct bench_cfg c;
        base_cfg(&c, t, w->tls ? teps[t] : eps[t]);
        c.workload = w->workload;
        c.workload_name = w->name;
        c.clients = w->clients;
        c.conns = w->clients == 1 ? 1 : 16;
        c.duration_s = run_s;
        c.rate = w->rate;
        c.key_space = keys;
        c.serializable = w->serializable;
        c.read_ratio = 0.9;
        c.txn_ops = 4;
        if (w->workload == W_RANGE)
          c.range_key = range_key;
        if (w->workload == W_LOCK)
          c.range_key = "ketch-bench-lock";
        if (w->workload == W_LEASE_KEEPALIVE && !w->lease_base[t]) {
          /* the leases, once per server, not measured */
          struct bench_cfg g = c;
          g.workload = W_LEASE_GRANT;
          g.workload_name = "lease-grant";
          g.duration_s = 0;
          g.total = leases;
          g.leases = leases;
          g.lease_ttl_s = 3600;
          g.lease_base = (int64_t)(i + 1) << 32;
          g.clients = 64;
          fprintf(stderr, "compare: granting %ld leases on %s\n", leases, target_name(t));
          if (bench_run(&g, &r, err, sizeof err) || r.errors) {
            fprintf(stderr, "ketch-bench compare: granting leases on %s: %s (%ld errors)\n",
                    target_name(t), err, r.errors);
            goto out;
          }
          w->lease_base[t] = g.lease_base;
        }
        c.leases = leases;
        c.lease_base = w->lease_base[t];
        static struct watch_result wr;
        if (is_watch(w)) {
          bool lat = w->workload == W_WATCH_LATENCY;
          c.watchers = w->clients;
          c.streams = w->clients < 10 ? w->clients : 10;
          c.clients = lat ? 1 : 16;
          c.conns = lat ? 1 : 4;
          c.put_rate = lat ? 100 : 0;
          c.put_total = 1000000000000L;
          c.key_space = 1000;
        }
        c.threads = gcfg->threads;
        double cpu0 = cluster_cpu_s(all[t], members);
        double st0[3], st1[3];
        if (t == T_KETCH)
          state_cpu(all[t], members, st0);
        int brc = is_watch(w)             ? watch_run(&c, &wr, err, sizeof err)
                  : w->workload == W_LOCK ? lock_run(&c, &r, err, sizeof err)
                                          : bench_run(&c, &r, err, sizeof err);
        double cpu1 = cluster_cpu_s(all[t], members);
        if (t == T_KETCH)
          state_cpu(all[t], members, st1);
        long ops = is_watch(w) ? wr.events : r.ok;
        double secs = is_watch(w) ? wr.seconds : r.seconds;
        const struct hist *lat_h = is_watch(w) ? &wr.lat : &r.all;
        long errors = r.errors;
        if (is_watch(w))
          errors = wr.put_errors + labs(wr.expected - wr.events) + wr.foreign + wr.ended;
        w->cpu[t][round] = ops && cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) / (double)ops * 1e5 : 0;
        if (t == T_KETCH) {
          double busiest = 0;
          for (int m = 0; m < members; m++)
            if (st0[m] >= 0 && st1[m] >= 0 && st1[m] - st0[m] > busiest)
              busiest = st1[m] - st0[m];
          w->st[round] = ops ? busiest * 1e6 / (double)ops : 0;
        }
        if (is_watch(w)) {
          for (int k = 0; k < wr.n_err; k++)
            count_errors(w, t, wr.err[k].name, wr.err[k].n);
          count_errors(w, t, "MISSING_EVENTS", labs(wr.expected - wr.events));
          count_errors(w, t, "FOREIGN_EVENTS", wr.foreign);
          count_errors(w, t, "WATCH_ENDED", wr.ended);
        } else {
          for (int k = 0; k < r.n_err; k++)
            count_errors(w, t, r.err[k].name, r.err[k].n);
        }
        if (brc) {
          fprintf(stderr, "ketch-bench compare: %s on %s: %s\n", w->name, target_name(t), err);
          goto out;
        }
        double rps = secs > 0 ? (double)ops / secs : 0;
        w->rps[t][round] = rps;
        w->p50[t][round] = hist_pct(lat_h, 50) / 1e6;
        w->p99[t][round] = hist_pct(lat_h, 99) / 1e6;
        w->errors[t] += errors;
        fprintf(stderr, "compare: round %d/%d %-12s %-5s %9.0f/s  p50 %7.3f ms  p99 %7.3f ms%s\n",
                round + 1, rounds, w->name, target_name(t), rps, w->p50[t][round], w->p99[t][round],
                errors ? "  (errors!)" : "");
      }
  }
  double fsync_ms = median(fs_p50, rounds), rtt_ms = median(rt_p50, rounds);
  double floor_ms = fsync_ms + rtt_ms;
  for (int i = 0; i < n_wl; i++)
    for (int t = 0; t < 2; t++) {
      wls[i].med_rps[t] = median(wls[i].rps[t], rounds);
      wls[i].med_p50[t] = median(wls[i].p50[t], rounds);
      wls[i].med_p99[t] = median(wls[i].p99[t], rounds);
      wls[i].med_cpu[t] = median(wls[i].cpu[t], rounds);
      wls[i].med_st = median(wls[i].st, rounds);
    }
  char date[64];
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  FILE *outs[3] = {NULL, NULL, NULL};
  char path[PATH_MAX + 32];
  if (out_dir) {
    mkdir(out_dir, 0755);
    snprintf(path, sizeof path, "%s/results.json", out_dir);
    outs[1] = fopen(path, "w");
    snprintf(path, sizeof path, "%s/results.dat", out_dir);
    outs[2] = fopen(path, "w");
  }
  if (json)
    outs[0] = stdout;
  for (int o = 0; o < 2; o++) {
    FILE *f = outs[o];
    if (!f)
      continue;
    fprintf(f,
            "{\"date\":\"%s\",\"cpus\":%ld,\"rounds\":%d,\"run_seconds\":%.1f,\"keys\":%ld,"
            "\"members\":%d,\"floor\":{\"fdatasync_p50_ms\":%.4f,\"rtt_p50_ms\":%.4f,"
            "\"floor_ms\":%.4f},",
            date, ncpu, rounds, run_s, keys, members, fsync_ms, rtt_ms, floor_ms);
    if (res_keys) {
      resources_json(f, res_keys, res);
      fprintf(f, ",");
    }
    fprintf(f, "\"rows\":[");
    for (int i = 0; i < n_wl; i++) {
      struct wl *w = &wls[i];
      fprintf(f,
              "%s{\"workload\":\"%s\",\"clients\":%d,\"etcd\":{\"rps\":%.1f,\"p50_ms\":%.4f,"
              "\"p99_ms\":%.4f,\"errors\":%ld,\"server_cpu_s_per_100k\":%.3f},"
              "\"ketch\":{\"rps\":%.1f,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"errors\":%ld,"
              "\"server_cpu_s_per_100k\":%.3f,\"state_us_per_req\":%.4f,"
              "\"state_ceiling_rps\":%.0f},\"ratio\":%.3f,\"aim\":%.0f,\"errors_by_code\":{",
              i ? "," : "", w->name, w->clients, w->med_rps[T_ETCD], w->med_p50[T_ETCD],
              w->med_p99[T_ETCD], w->errors[T_ETCD], w->med_cpu[T_ETCD], w->med_rps[T_KETCH],
              w->med_p50[T_KETCH], w->med_p99[T_KETCH], w->errors[T_KETCH], w->med_cpu[T_KETCH],
              w->med_st, w->med_st > 0 ? 1e6 / w->med_st : 0,
              w->med_rps[T_ETCD] > 0 ? w->med_rps[T_KETCH] / w->med_rps[T_ETCD] : 0, aim(w));
      for (int t = 0; t < 2; t++) {
        fprintf(f, "%s\"%s\":{", t ? "," : "", target_name(t));
        for (int k = 0; k < w->n_errk[t]; k++)
          fprintf(f, "%s\"%s\":%ld", k ? "," : "", w->errk[t][k].name, w->errk[t][k].n);
        fprintf(f, "}");
      }
      fprintf(f, "}}");
    }
    fprintf(f, "]}\n");
  }
  if (outs[2]) { /* for gnuplot: name clients etcd_rps ketch_rps etcd_p99 ketch_p99 */
    for (int i = 0; i < n_wl; i++)
      fprintf(outs[2], "\"%s\" %d %.1f %.1f %.4f %.4f\n", wls[i].name, wls[i].clients,
              wls[i].med_rps[T_ETCD], wls[i].med_rps[T_KETCH], wls[i].med_p99[T_ETCD],
              wls[i].med_p99[T_KETCH]);
  }
  for (int o = 1; o < 3; o++)
    if (outs[o])
      fclose(outs[o]);
  FILE *f = json ? stderr : stdout;
  fprintf(f,
          "\nketch vs etcd, %d member%s each, same machine (%ld cores), one window, %d rounds of "
          "%g s alternating, medians; %ld keys of 16 B with 256 B values loaded; %s\n\n",
          members, members > 1 ? "s" : "", ncpu, rounds, run_s, keys, date);
  fprintf(f, "| workload | etcd ops/s | ketch ops/s | ketch/etcd | aim | etcd p50 / p99 ms | "
             "ketch p50 / p99 ms | server CPU s per 100k, etcd / ketch | ketch state thread "
             "us/req (ceiling/s) |\n"
             "|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n_wl; i++) {
    struct wl *w = &wls[i];
    char title[96];
    double ratio = w->med_rps[T_ETCD] > 0 ? w->med_rps[T_KETCH] / w->med_rps[T_ETCD] : 0;
    char aimb[48] = "-";
    if (aim(w))
      snprintf(aimb, sizeof aimb, ">= %.0fx: %s", aim(w), ratio >= aim(w) ? "met" : "NOT MET");
    if (w->rate) /* equal offered load: the aim is p99 <= 1/10 of etcd's */
      snprintf(aimb, sizeof aimb, "p99 <= 1/10: %s",
               w->med_p99[T_KETCH] * 10 <= w->med_p99[T_ETCD] ? "met" : "NOT MET");
    char failed[400] = "", ek[180], ee[180];
    if (w->errors[0] || w->errors[1]) /* which codes: ENOSPACE is not a timeout */
      snprintf(failed, sizeof failed, " (some requests failed: ketch %s; etcd %s)",
               w->n_errk[T_KETCH] ? error_list(w, T_KETCH, ek, sizeof ek) : "none",
               w->n_errk[T_ETCD] ? error_list(w, T_ETCD, ee, sizeof ee) : "none");
    char stb[48] = "-";
    if (w->med_st > 0)
      snprintf(stb, sizeof stb, "%.2f (%.0fk)", w->med_st, 1e3 / w->med_st);
    fprintf(f,
            "| %s | %.0f | %.0f | %.2fx | %s | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f | %s |%s\n",
            wl_title(w, title, sizeof title), w->med_rps[T_ETCD], w->med_rps[T_KETCH], ratio, aimb,
            w->med_p50[T_ETCD], w->med_p99[T_ETCD], w->med_p50[T_KETCH], w->med_p99[T_KETCH],
            w->med_cpu[T_ETCD], w->med_cpu[T_KETCH], stb, failed);
  }
  /* TLS: what it costs each server, and the ratio over TLS beside plaintext */
  for (int i = 0; i < n_wl; i++) {
    struct wl *w = &wls[i], *p = &wls[w->plain];
    if (!w->tls || !p->med_rps[T_KETCH] || !p->med_rps[T_ETCD] || !w->med_rps[T_ETCD])
      continue;
    char title[96];
    wl_title(p, title, sizeof title);
    double keep_k = w->med_rps[T_KETCH] / p->med_rps[T_KETCH];
    double keep_e = w->med_rps[T_ETCD] / p->med_rps[T_ETCD];
    double r_tls = w->med_rps[T_KETCH] / w->med_rps[T_ETCD];
    double rp = p->med_rps[T_KETCH] / p->med_rps[T_ETCD];
    fprintf(f,
            "\n- TLS, %s: ketch keeps %.0f%% of its plaintext throughput (aim >= 85%%: %s), "
            "etcd %.0f%%; ketch/etcd %.2fx over TLS vs %.2fx plaintext (aim: not lower: %s)",
            title, keep_k * 100, keep_k >= 0.85 ? "met" : "NOT MET", keep_e * 100, r_tls, rp,
            r_tls >= rp ? "met" : "NOT MET");
  }
  /* plainly, where ketch falls short of etcd */
  for (int i = 0; i < n_wl; i++) {
    struct wl *w = &wls[i];
    char title[96];
    wl_title(w, title, sizeof title);
    double ratio = w->med_rps[T_ETCD] > 0 ? w->med_rps[T_KETCH] / w->med_rps[T_ETCD] : 0;
    if (ratio < 1 && w->workload != W_WATCH_LATENCY && !w->rate) /* rate: the offered one */
      fprintf(f, "\n- SHORT: %s: ketch does %.0f/s, etcd %.0f/s (%.2fx)", title,
              w->med_rps[T_KETCH], w->med_rps[T_ETCD], ratio);
    if (w->med_p99[T_KETCH] > w->med_p99[T_ETCD])
      fprintf(f, "\n- SHORT: %s: ketch's p99 %.3f ms is above etcd's %.3f ms", title,
              w->med_p99[T_KETCH], w->med_p99[T_ETCD]);
    char ek[180];
    if (w->errors[T_KETCH])
      fprintf(f, "\n- SHORT: %s: %ld ketch %s failed or missing (%s; etcd: %ld)", title,
              w->errors[T_KETCH], is_watch(w) ? "puts/events" : "requests",
              error_list(w, T_KETCH, ek, sizeof ek), w->errors[T_ETCD]);
  }
  if (server_compaction)
    fprintf(f,
            "\n- both servers run with --auto-compaction-mode periodic "
            "--auto-compaction-retention %s (history kept: a steady state, not a race to the "
            "quota)",
            server_compaction);
  else
    fprintf(f, "\n- no auto-compaction (--compaction 0): every revision stays until the quota");
  fprintf(f, "\n- ketch state thread: its CPU per request (the busiest member's; /proc/PID/task/"
             "TID/stat), and the requests/s one state thread could serve at that cost");
  fprintf(f,
          "\n- floor (this disk, this kernel; median of the rounds): fdatasync p50 %.3f ms + "
          "loopback round trip p50 %.3f ms = %.3f ms\n",
          fsync_ms, rtt_ms, floor_ms);
  for (int i = 0; i < n_wl; i++)
    if (wls[i].workload == W_PUT && wls[i].clients == 1)
      fprintf(f, "- single-client put p50: ketch %.3f ms = %.1fx the floor; etcd %.3f ms = %.1fx\n",
              wls[i].med_p50[T_KETCH], wls[i].med_p50[T_KETCH] / floor_ms, wls[i].med_p50[T_ETCD],
              wls[i].med_p50[T_ETCD] / floor_ms);
  if (members == 1) {
    if (res_keys)
      resources_table(f, res_keys, res);
    fprintf(f, "- 3-member comparisons: a separate run (compare --members 3; make bench runs "
               "both).\n");
  } else {
    fprintf(f,
            "- %d members each on this one machine: every member shares the 2 cores and the "
            "disk with the others and the load generator; resources and restart are measured "
            "in the 1-member run.\n",
            members);
  }
  rc = 0;
out:
  for (int t = 0; t < 2; t++)
    for (int m = 0; m < members; m++)
      server_stop(&all[t][m]);
  if (!rc)
    rm_rf(tmpl);
  else
    fprintf(stderr, "ketch-bench compare: data dirs and logs kept in %s\n", tmpl);
  return rc;
}
