/* tools/bench/run.c — one run: connections, clients, the loop.
 *
 * Closed loop (no --rate): each of --clients keeps one request outstanding;
 * its latency runs from the submit. Open loop (--rate R): request i is due at
 * t0 + i/R; it is sent when due by an idle client (a request due while every
 * client is busy waits for one) and its latency runs from the time it was due,
 * so a stalled server is charged for the requests it delayed (no coordinated
 * omission). --clients bounds the requests in flight in both modes.
 * The run ends when no request may be issued any more (--total reached or
 * --duration passed) and every issued request has completed.
 *
 * --threads N: N such loops, one per thread (R is per thread), each with its
 * share of the clients, connections, --total and --rate; their results are
 * merged (counts, histograms, errors by code; the generator's CPU is the
 * sum of the threads'). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

struct client {
  struct bench_req req; /* first: bench_done's arg */
  int conn;
  int state; /* the target's per-client slot (bench_op.client_state) */
  uint64_t start_ns;
  bool is_read;
};

static _Thread_local struct run {
  const struct bench_cfg *cfg;
  const struct target *t;
  struct bench_result *res;
  void **conns;
  struct client *clients;
  int *idle, n_idle;
  struct workload_state w;
  struct bench_op op;
  uint64_t t0, end_ns, interval_ns;
  long done;
  bool stop;
} R;

static double cpu_s(void) { /* this thread's: the generator loop's */
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void count_error(const char *name) {
  struct bench_result *r = R.res;
  r->errors++;
  for (int i = 0; i < r->n_err; i++)
    if (!strcmp(r->err[i].name, name)) {
      r->err[i].n++;
      return;
    }
  int i = r->n_err < BENCH_MAX_ERR_KINDS ? r->n_err++ : BENCH_MAX_ERR_KINDS - 1;
  if (i == BENCH_MAX_ERR_KINDS - 1 && r->err[i].name && strcmp(r->err[i].name, "OTHER"))
    name = "OTHER";
  r->err[i].name = name;
  r->err[i].n++;
}

/* May another request be issued now? */
static bool may_issue(uint64_t now) {
  if (R.stop)
    return false;
  if (R.cfg->total && R.res->issued >= R.cfg->total)
    return false;
  if (R.end_ns && now >= R.end_ns)
    return false;
  return true;
}

/* Issues the next request on client id, its latency counted from start_ns.
 * On an immediate refusal the request is counted as done with that error and
 * the client goes back to the idle list (no recursion). */
static void issue(int id, uint64_t start_ns) {
  struct client *c = &R.clients[id];
  workload_next(&R.w, R.cfg, &R.op);
  R.op.client_state = &c->state;
  c->start_ns = start_ns;
  c->is_read = R.op.is_read;
  R.res->issued++;
  const char *err = NULL;
  if (R.t->submit(R.conns[c->conn], &R.op, R.cfg->timeout_ms, c, &err)) {
    R.done++;
    count_error(err ? err : "SUBMIT");
    R.idle[R.n_idle++] = id;
  }
}

void bench_done(void *arg, const char *err) {
  struct bench_req *r = arg;
  r->done(r, err);
}

static void client_done(struct bench_req *r, const char *err) {
  struct client *c = (struct client *)r;
  uint64_t now = bench_now_ns();
  R.done++;
  if (err) {
    count_error(err);
  } else {
    uint64_t lat = now > c->start_ns ? now - c->start_ns : 0;
    R.res->ok++;
    hist_add(&R.res->all, lat);
    hist_add(c->is_read ? &R.res->read : &R.res->write, lat);
  }
  int id = (int)(c - R.clients);
  if (!R.cfg->rate && may_issue(now))
    issue(id, bench_now_ns());
  else
    R.idle[R.n_idle++] = id;
}

/* Open loop: the send time of request i. */
static uint64_t due_ns(long i) { return R.t0 + (uint64_t)i * R.interval_ns; }

static void issue_idle(uint64_t now) {
  if (!R.cfg->rate) {
    while (R.n_idle && may_issue(now))
      issue(R.idle[--R.n_idle], now);
    return;
  }
  while (R.n_idle && may_issue(now)) {
    uint64_t due = due_ns(R.res->issued);
    if (due > now)
      break;
    if (R.end_ns && due >= R.end_ns) {
      R.stop = true;
      break;
    }
    issue(R.idle[--R.n_idle], due);
  }
}

/* Issues and completes requests until no more may be issued (--total, the
 * end of duration_s) and every issued one has completed; counts go to R.res.
 * 0, or 1 with err filled. */
static int loop(int nc, struct pollfd *pf, double duration_s, char *err, size_t err_len) {
  const struct bench_cfg *cfg = R.cfg;
  struct bench_result *res = R.res;
  int rc = 0;
  R.t0 = bench_now_ns();
  R.end_ns = duration_s ? R.t0 + (uint64_t)(duration_s * 1e9) : 0;
  uint64_t next_progress = R.t0 + 1000000000ull, last_done_ns = R.t0;
  long last_done = 0;
  for (;;) {
    uint64_t now = bench_now_ns();
    issue_idle(now);
    if (R.done == res->issued && !may_issue(now))
      break;
    /* how long to sleep: the targets' deadlines, the next due request, the
     * end of the run, the next progress line */
    int64_t wait_ns = 100000000; /* 100 ms at most */
    for (int i = 0; i < nc; i++) {
      pf[i] = (struct pollfd){R.t->fd(R.conns[i]), R.t->events(R.conns[i]), 0};
      int t = R.t->timeout_ms(R.conns[i]);
      if (t >= 0 && (int64_t)t * 1000000 < wait_ns)
        wait_ns = (int64_t)t * 1000000;
    }
    if (cfg->rate && R.n_idle && may_issue(now)) {
      uint64_t due = due_ns(res->issued);
      int64_t d = due > now ? (int64_t)(due - now) : 0;
      if (d < wait_ns)
        wait_ns = d;
    }
    if (R.end_ns && R.end_ns > now && (int64_t)(R.end_ns - now) < wait_ns)
      wait_ns = (int64_t)(R.end_ns - now);
    if (cfg->progress && (int64_t)(next_progress - now) < wait_ns)
      wait_ns = next_progress > now ? (int64_t)(next_progress - now) : 0;
    struct timespec ts = {wait_ns / 1000000000, wait_ns % 1000000000};
    if (ppoll(pf, (nfds_t)nc, &ts, NULL) < 0 && errno != EINTR) {
      snprintf(err, err_len, "poll: %s", strerror(errno));
      rc = 1;
      break;
    }
    for (int i = 0; i < nc; i++)
      R.t->process(R.conns[i]);
    now = bench_now_ns();
    if (cfg->progress && now >= next_progress) {
      double dt = (double)(now - last_done_ns) / 1e9;
      fprintf(stderr, "ketch-bench: %s %s %5.1fs  done %ld%s%ld  %.0f/s  errors %ld\n", R.t->name,
              cfg->workload_name, (double)(now - R.t0) / 1e9, R.done, cfg->total ? "/" : "",
              cfg->total ? cfg->total : 0L, (double)(R.done - last_done) / dt, res->errors);
      last_done = R.done;
      last_done_ns = now;
      next_progress = now + 1000000000ull;
    }
  }
  return rc;
}

static int run_one(const struct bench_cfg *cfg, struct bench_result *res, char *err,
                   size_t err_len) {
  memset(res, 0, sizeof *res);
  res->st_mark = res->pc_mark = -1;
  memset(&R, 0, sizeof R);
  R.cfg = cfg;
  R.res = res;
  R.t = cfg->target == T_ETCD ? &target_etcd : &target_ketch;
  int nc = cfg->conns < cfg->clients ? cfg->conns : cfg->clients;
  int per_conn = (cfg->clients + nc - 1) / nc + 16;
  R.conns = calloc((size_t)nc, sizeof *R.conns);
  R.clients = calloc((size_t)cfg->clients, sizeof *R.clients);
  R.idle = calloc((size_t)cfg->clients, sizeof *R.idle);
  struct pollfd *pf = calloc((size_t)nc, sizeof *pf);
  int rc = 0;
  if (!R.conns || !R.clients || !R.idle || !pf || workload_init(&R.w, cfg)) {
    snprintf(err, err_len, "out of memory");
    rc = 1;
    goto out;
  }
  for (int i = 0; i < nc; i++)
    if (R.t->open(&R.conns[i], cfg->endpoints, per_conn, cfg->timeout_ms, err, err_len)) {
      R.conns[i] = NULL;
      rc = 1;
      goto out;
    }
  for (int i = 0; i < cfg->clients; i++) {
    R.clients[i].conn = i % nc;
    R.clients[i].req.done = client_done;
    R.clients[i].state = -1;
    R.idle[R.n_idle++] = cfg->clients - 1 - i;
  }
  R.interval_ns = cfg->rate ? (uint64_t)(1e9 / cfg->rate) : 0;
  if (cfg->rate && !R.interval_ns)
    R.interval_ns = 1;
  if (cfg->warmup_s > 0) { /* the same connections, nothing counted */
    struct bench_result *scratch = calloc(1, sizeof *scratch);
    if (!scratch) {
      snprintf(err, err_len, "out of memory");
      rc = 1;
      goto out;
    }
    R.res = scratch;
    rc = loop(nc, pf, cfg->warmup_s, err, err_len);
    free(scratch);
    R.res = res;
    R.done = 0;
    R.stop = false;
    if (rc)
      goto out;
  }
  res->st_mark = cfg->server_pid ? state_thread_cpu_s(cfg->server_pid) : -1;
  res->pc_mark = cfg->server_pid ? proc_cpu_s(cfg->server_pid) : -1;
  double cpu0 = cpu_s();
  rc = loop(nc, pf, cfg->duration_s, err, err_len);
  res->seconds = (double)(bench_now_ns() - R.t0) / 1e9;
  res->cpu_s = cpu_s() - cpu0;
out:
  R.stop = true; /* requests canceled by close complete without issuing more */
  for (int i = 0; R.conns && i < nc; i++)
    if (R.conns[i])
      R.t->close(R.conns[i]);
  free(R.conns);
  free(R.clients);
  free(R.idle);
  free(pf);
  workload_free(&R.w);
  return rc;
}

struct gen_thread {
  struct bench_cfg cfg;
  struct bench_result res;
  char err[512];
  int rc;
  pthread_t th;
};

static void *gen_main(void *arg) {
  struct gen_thread *g = arg;
  g->rc = run_one(&g->cfg, &g->res, g->err, sizeof g->err);
  return NULL;
}

/* i's share of total over n: total / n, one more for the first total % n */
static long share(long total, int n, int i) { return total / n + (i < total % n); }

static void merge(struct bench_result *into, const struct bench_result *r) {
  into->issued += r->issued;
  into->ok += r->ok;
  into->errors += r->errors;
  if (r->seconds > into->seconds)
    into->seconds = r->seconds;
  into->cpu_s += r->cpu_s;
  if (into->st_mark < 0 && into->pc_mark < 0) { /* the first thread's that measured */
    into->st_mark = r->st_mark;
    into->pc_mark = r->pc_mark;
  }
  hist_merge(&into->all, &r->all);
  hist_merge(&into->read, &r->read);
  hist_merge(&into->write, &r->write);
  for (int i = 0; i < r->n_err; i++) {
    int j = 0;
    while (j < into->n_err && strcmp(into->err[j].name, r->err[i].name))
      j++;
    if (j == into->n_err && into->n_err < BENCH_MAX_ERR_KINDS)
      into->err[into->n_err++].name = r->err[i].name;
    if (j < into->n_err)
      into->err[j].n += r->err[i].n;
  }
}

/* cfg->threads loops on their own threads, results merged into res. */
static int run_threads(const struct bench_cfg *cfg, int n, struct bench_result *res, char *err,
                       size_t err_len) {
  struct gen_thread *g = calloc((size_t)n, sizeof *g);
  if (!g) {
    snprintf(err, err_len, "out of memory");
    return 1;
  }
  if (cfg->target == T_ETCD && (bench_tls.cacert || bench_tls.cert))
    (void)bench_etcd_tls(err, err_len); /* made once, before the threads share it */
  int started = 0, rc = 0;
  int conns = cfg->conns < n ? n : cfg->conns;
  for (int i = 0; i < n; i++) {
    struct bench_cfg *c = &g[i].cfg;
    *c = *cfg;
    c->threads = 1;
    c->gen_index = i;
    c->gen_count = n;
    c->clients = (int)share(cfg->clients, n, i);
    c->conns = (int)share(conns, n, i);
    if (c->conns > c->clients)
      c->conns = c->clients;
    if (cfg->total)
      c->total = share(cfg->total, n, i);
    if (cfg->rate)
      c->rate = cfg->rate / n;
    c->progress = cfg->progress && i == 0;
    if (cfg->total && !c->total)
      continue; /* fewer requests than threads */
    if (pthread_create(&g[i].th, NULL, gen_main, &g[i])) {
      snprintf(err, err_len, "cannot start generator thread %d", i);
      rc = 1;
      break;
    }
    started = i + 1;
  }
  memset(res, 0, sizeof *res);
  res->st_mark = res->pc_mark = -1;
  for (int i = 0; i < started; i++) {
    if (cfg->total && !g[i].cfg.total)
      continue;
    pthread_join(g[i].th, NULL);
    merge(res, &g[i].res);
    if (g[i].rc && !rc) {
      rc = g[i].rc;
      snprintf(err, err_len, "%s", g[i].err);
    }
  }
  free(g);
  return rc;
}

int bench_run(const struct bench_cfg *cfg, struct bench_result *res, char *err, size_t err_len) {
  int n = cfg->threads > 1 ? cfg->threads : 1;
  if (n > cfg->clients)
    n = cfg->clients;
  int rc = n > 1 ? run_threads(cfg, n, res, err, err_len) : run_one(cfg, res, err, err_len);
  double st0 = res->st_mark, pc0 = res->pc_mark;
  double st1 = cfg->server_pid ? state_thread_cpu_s(cfg->server_pid) : -1;
  double pc1 = cfg->server_pid ? proc_cpu_s(cfg->server_pid) : -1;
  res->state_cpu_s = st0 >= 0 && st1 >= 0 ? st1 - st0 : -1;
  res->server_cpu_s = pc0 >= 0 && pc1 >= 0 ? pc1 - pc0 : -1;
  return rc;
}

int bench_lease_keepalive(struct bench_cfg *cfg, struct bench_result *grant,
                          struct bench_result *res, char *err, size_t err_len) {
  /* ids of our own, fresh per run (a run never meets an older run's lease):
   * 22 bits from the time and pid, then 2^32 ids of room */
  static uint64_t next;
  if (!next)
    next = (((uint64_t)time(NULL) ^ (uint64_t)getpid() << 12) & 0x3fffff) << 32 | 1u << 31;
  if (!cfg->lease_base) {
    cfg->lease_base = (int64_t)next;
    next += 1ull << 32;
  }
  struct bench_cfg g = *cfg;
  g.workload = W_LEASE_GRANT;
  g.workload_name = "lease-grant";
  g.total = cfg->leases;
  g.duration_s = 0;
  g.rate = 0;
  g.clients = (int)(cfg->leases < 64 ? cfg->leases : 64);
  g.conns = cfg->conns < g.clients ? cfg->conns : g.clients;
  if (bench_run(&g, grant, err, err_len))
    return 1;
  if (grant->ok != cfg->leases) {
    snprintf(err, err_len, "lease-keepalive: %ld of %ld lease grants failed (first: %s)",
             grant->errors, cfg->leases, grant->n_err ? grant->err[0].name : "?");
    return 1;
  }
  int rc = bench_run(cfg, res, err, err_len);
  res->leases = grant->ok;
  res->grant_s = grant->seconds;
  return rc;
}
