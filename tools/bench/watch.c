/* tools/bench/watch.c — `watch` (fan-out throughput) and `watch-latency`.
 *
 * Both: --watchers watches spread over --streams connections (each
 * connection is one watch stream: libketch's handle, or one gRPC Watch stream
 * per connection for etcd), opened and confirmed (created) before anything
 * is written; then writers on connections of their own put --put-total
 * values, at --put-rate puts/s (open loop) or as fast as --clients writers
 * with one put in flight each go (closed loop). Every value starts with the
 * put's sequence number in 20 decimal digits, so a watcher's event names the
 * put it reports: latency = the event's arrival - the put's send time.
 *
 * watch-latency: every watcher watches one key, the writer puts that key.
 * watch: every watcher watches the prefix ketch-bench/watch/, puts go to
 * random keys under it (--key-space-size); events/s over all watchers.
 *
 * The run ends when every put has completed and every watcher has had an
 * event for each successful put, or when no event has come for
 * min(--timeout-ms, 5 s) after the last put completed (what is missing is
 * then reported). --duration S stops issuing puts after S seconds. Accounting: put ok + errors ==
 * issued; events == watchers x ok puts, with each watcher's count between min and max; an event
 * whose value names no put of this run is "foreign".
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

#define WATCH_PREFIX "ketch-bench/watch/"
#define WATCH_LATENCY_KEY "ketch-bench/watch-latency"

struct watcher {
  long events;
  bool created, ended;
};

struct writer {
  struct bench_req req; /* first: bench_done's arg */
  int conn, state;
  long seq;
};

static struct {
  const struct bench_cfg *cfg;
  const struct target *t;
  struct watch_result *res;
  void **conns; /* n_streams watcher streams, then n_wconns writer connections */
  int n_streams, n_wconns;
  struct watcher *w;
  struct writer *wr;
  int *idle, n_idle;
  uint64_t *sent_ns; /* per put, n_sent allocated */
  long n_sent;
  char *val, key[BENCH_MAX_KEY + 64];
  uint64_t rng, t0, end_ns, last_event_ns, last_put_done_ns;
  long put_done;
  bool closing;
} S;

static void count_error(struct watch_result *r, const char *name) {
  for (int i = 0; i < r->n_err; i++)
    if (!strcmp(r->err[i].name, name)) {
      r->err[i].n++;
      return;
    }
  int i = r->n_err < BENCH_MAX_ERR_KINDS ? r->n_err++ : BENCH_MAX_ERR_KINDS - 1;
  r->err[i].name = name;
  r->err[i].n++;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

void bench_watch_created(void *arg) {
  struct watcher *w = arg;
  if (S.closing || w->created)
    return;
  w->created = true;
  S.res->created++;
}

void bench_watch_event(void *arg, const char *value, size_t value_len) {
  struct watcher *w = arg;
  if (S.closing)
    return;
  uint64_t now = bench_now_ns();
  long seq = 0;
  size_t i = 0;
  for (; i < value_len && i < 20 && value[i] >= '0' && value[i] <= '9'; i++)
    seq = seq * 10 + (value[i] - '0');
  if (i != 20 || seq >= S.res->put_issued) {
    S.res->foreign++;
    return;
  }
  w->events++;
  S.res->events++;
  S.last_event_ns = now;
  hist_add(&S.res->lat, now > S.sent_ns[seq] ? now - S.sent_ns[seq] : 0);
}

void bench_watch_end(void *arg, const char *err) {
  struct watcher *w = arg;
  if (S.closing || w->ended)
    return;
  w->ended = true;
  S.res->ended++;
  count_error(S.res, err);
}

static uint64_t rnd(void) {
  uint64_t x = S.rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  S.rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static bool may_put(void) {
  if (S.closing || S.res->put_issued >= S.cfg->put_total)
    return false;
  return !S.end_ns || bench_now_ns() < S.end_ns;
}

static void put(int id, uint64_t now) {
  struct writer *w = &S.wr[id];
  if (S.res->put_issued == S.n_sent) {
    long n = S.n_sent ? 2 * S.n_sent : 4096;
    uint64_t *p = realloc(S.sent_ns, (size_t)n * sizeof *p);
    if (!p) {
      S.closing = true; /* no more puts: out of memory */
      S.idle[S.n_idle++] = id;
      return;
    }
    S.sent_ns = p;
    S.n_sent = n;
  }
  long seq = S.res->put_issued++;
  char num[24];
  snprintf(num, sizeof num, "%020ld", seq);
  memcpy(S.val, num, 20);
  struct bench_op op = {
      .kind = OP_PUT, .val = S.val, .val_len = (size_t)S.cfg->val_size, .client_state = &w->state};
  char key[BENCH_MAX_KEY + 64];
  if (S.cfg->workload == W_WATCH_LATENCY) {
    op.key = WATCH_LATENCY_KEY;
    op.key_len = strlen(WATCH_LATENCY_KEY);
  } else {
    size_t p = strlen(WATCH_PREFIX);
    memcpy(key, WATCH_PREFIX, p);
    op.key_len = p + workload_key(key + p, S.cfg->key_size, rnd() % (uint64_t)S.cfg->key_space);
    op.key = key;
  }
  w->seq = seq;
  S.sent_ns[seq] = now;
  const char *err = NULL;
  if (S.t->submit(S.conns[w->conn], &op, S.cfg->timeout_ms, w, &err)) {
    S.put_done++;
    S.res->put_errors++;
    count_error(S.res, err ? err : "SUBMIT");
    S.idle[S.n_idle++] = id;
  }
}

static void put_done(struct bench_req *r, const char *err) {
  struct writer *w = (struct writer *)r;
  uint64_t now = bench_now_ns();
  S.put_done++;
  S.last_put_done_ns = now;
  if (err) {
    S.res->put_errors++;
    count_error(S.res, err);
  } else {
    S.res->put_ok++;
    hist_add(&S.res->put_lat, now - S.sent_ns[w->seq]);
  }
  int id = (int)(w - S.wr);
  if (!S.cfg->put_rate && may_put())
    put(id, now);
  else
    S.idle[S.n_idle++] = id;
}

static void issue_puts(uint64_t now) {
  while (S.n_idle && may_put()) {
    if (S.cfg->put_rate) {
      uint64_t due = S.t0 + (uint64_t)((double)S.res->put_issued * 1e9 / S.cfg->put_rate);
      if (due > now)
        break;
    }
    put(S.idle[--S.n_idle], now);
  }
}

/* One poll over every connection, at most wait_ns. */
static int poll_once(struct pollfd *pf, int n, int64_t wait_ns, char *err, size_t err_len) {
  for (int i = 0; i < n; i++) {
    pf[i] = (struct pollfd){S.t->fd(S.conns[i]), S.t->events(S.conns[i]), 0};
    int t = S.t->timeout_ms(S.conns[i]);
    if (t >= 0 && (int64_t)t * 1000000 < wait_ns)
      wait_ns = (int64_t)t * 1000000;
  }
  if (wait_ns < 0)
    wait_ns = 0;
  struct timespec ts = {wait_ns / 1000000000, wait_ns % 1000000000};
  if (ppoll(pf, (nfds_t)n, &ts, NULL) < 0 && errno != EINTR) {
    snprintf(err, err_len, "poll: %s", strerror(errno));
    return -1;
  }
  for (int i = 0; i < n; i++)
    S.t->process(S.conns[i]);
  return 0;
}

int watch_run(const struct bench_cfg *cfg, struct watch_result *res, char *err, size_t err_len) {
  memset(res, 0, sizeof *res);
  memset(&S, 0, sizeof S);
  hist_reset(&res->lat);
  hist_reset(&res->put_lat);
  S.cfg = cfg;
  S.res = res;
  S.t = cfg->target == T_ETCD ? &target_etcd : &target_ketch;
  S.rng = 0x9E3779B97F4A7C15ull;
  res->watchers = cfg->watchers;
  S.n_streams = cfg->streams;
  S.n_wconns = cfg->conns < cfg->clients ? cfg->conns : cfg->clients;
  int n = S.n_streams + S.n_wconns;
  S.conns = calloc((size_t)n, sizeof *S.conns);
  S.w = calloc((size_t)cfg->watchers, sizeof *S.w);
  S.wr = calloc((size_t)cfg->clients, sizeof *S.wr);
  S.idle = calloc((size_t)cfg->clients, sizeof *S.idle);
  S.val = malloc((size_t)cfg->val_size + 1);
  struct pollfd *pf = calloc((size_t)n, sizeof *pf);
  int rc = 1;
  if (!S.conns || !S.w || !S.wr || !S.idle || !S.val || !pf) {
    snprintf(err, err_len, "out of memory");
    goto out;
  }
  for (int i = 0; i < cfg->val_size; i++)
    S.val[i] = (char)('a' + i % 26);
  int per_stream = (int)((cfg->watchers + S.n_streams - 1) / S.n_streams) + 16;
  int per_wconn = (cfg->clients + S.n_wconns - 1) / S.n_wconns + 16;
  for (int i = 0; i < n; i++)
    if (S.t->open(&S.conns[i], cfg->endpoints, i < S.n_streams ? per_stream : per_wconn,
                  cfg->timeout_ms, err, err_len)) {
      S.conns[i] = NULL;
      goto out;
    }
  for (int i = 0; i < cfg->clients; i++) {
    S.wr[i] =
        (struct writer){.req.done = put_done, .conn = S.n_streams + i % S.n_wconns, .state = -1};
    S.idle[S.n_idle++] = cfg->clients - 1 - i;
  }
  /* the watches, created and confirmed before the first put */
  struct bench_watch_req wq = {0};
  char end[BENCH_MAX_KEY + 64];
  if (cfg->workload == W_WATCH_LATENCY) {
    wq.key = WATCH_LATENCY_KEY;
    wq.key_len = strlen(WATCH_LATENCY_KEY);
  } else {
    wq.key = WATCH_PREFIX;
    wq.key_len = strlen(WATCH_PREFIX);
    memcpy(end, WATCH_PREFIX, wq.key_len);
    end[wq.key_len - 1]++; /* '/' + 1: the prefix's range end */
    wq.end = end;
    wq.end_len = wq.key_len;
  }
  uint64_t s0 = bench_now_ns();
  double cpu0 = cpu_s();
  long refused = 0;
  for (long i = 0; i < cfg->watchers; i++) {
    const char *e = NULL;
    if (S.t->watch(S.conns[i % S.n_streams], &wq, &S.w[i], &e)) {
      S.w[i].ended = true;
      res->ended++;
      refused++;
      count_error(res, e ? e : "WATCH");
    }
  }
  uint64_t setup_end = s0 + (uint64_t)cfg->timeout_ms * 1000000;
  while (res->created + res->ended < cfg->watchers && bench_now_ns() < setup_end)
    if (poll_once(pf, n, 100000000, err, err_len))
      goto out;
  res->setup_s = (double)(bench_now_ns() - s0) / 1e9;
  if (res->created < cfg->watchers) {
    snprintf(err, err_len, "%s: only %ld of %ld watches created in %.1f s (%ld refused, %ld ended)",
             cfg->workload_name, res->created, cfg->watchers, res->setup_s, refused, res->ended);
    goto out;
  }
  /* the puts, and the events they cause */
  S.t0 = bench_now_ns();
  S.end_ns = cfg->duration_s ? S.t0 + (uint64_t)(cfg->duration_s * 1e9) : 0;
  uint64_t quiet_ns = (uint64_t)(cfg->timeout_ms < 5000 ? cfg->timeout_ms : 5000) * 1000000;
  uint64_t next_progress = S.t0 + 1000000000ull;
  for (;;) {
    uint64_t now = bench_now_ns();
    issue_puts(now);
    bool puts_over = !may_put() && S.put_done == res->put_issued;
    long live = cfg->watchers - res->ended;
    if (puts_over && res->events >= live * res->put_ok)
      break;
    uint64_t since = S.last_event_ns > S.last_put_done_ns ? S.last_event_ns : S.last_put_done_ns;
    if (puts_over && now - since > quiet_ns)
      break; /* events are missing: reported */
    int64_t wait_ns = 100000000;
    if (cfg->put_rate && S.n_idle && may_put()) {
      uint64_t due = S.t0 + (uint64_t)((double)res->put_issued * 1e9 / cfg->put_rate);
      wait_ns = due > now ? (int64_t)(due - now) : 0;
      if (wait_ns > 100000000)
        wait_ns = 100000000;
    }
    if (poll_once(pf, n, wait_ns, err, err_len))
      goto out;
    now = bench_now_ns();
    if (cfg->progress && now >= next_progress) {
      fprintf(stderr, "ketch-bench: %s %s %5.1fs  puts %ld  events %ld/%ld\n", S.t->name,
              cfg->workload_name, (double)(now - S.t0) / 1e9, S.put_done, res->events,
              live * res->put_ok);
      next_progress = now + 1000000000ull;
    }
  }
  uint64_t last = S.last_event_ns > S.last_put_done_ns ? S.last_event_ns : S.last_put_done_ns;
  res->seconds = (double)((last > S.t0 ? last : bench_now_ns()) - S.t0) / 1e9;
  res->cpu_s = cpu_s() - cpu0;
  res->expected = cfg->watchers * res->put_ok;
  res->min_per_watcher = -1;
  for (long i = 0; i < cfg->watchers; i++) {
    if (res->min_per_watcher < 0 || S.w[i].events < res->min_per_watcher)
      res->min_per_watcher = S.w[i].events;
    if (S.w[i].events > res->max_per_watcher)
      res->max_per_watcher = S.w[i].events;
  }
  rc = 0;
out:
  S.closing = true; /* what closing the connections delivers is not counted */
  for (int i = 0; S.conns && i < n; i++)
    if (S.conns[i])
      S.t->close(S.conns[i]);
  free(S.conns);
  free(S.w);
  free(S.wr);
  free(S.idle);
  free(S.sent_ns);
  free(S.val);
  free(pf);
  return rc;
}

void watch_report(const struct bench_cfg *cfg, const struct watch_result *r) {
  const struct hist *h = &r->lat;
  double eps = r->seconds > 0 ? (double)r->events / r->seconds : 0;
  double pps = r->seconds > 0 ? (double)r->put_ok / r->seconds : 0;
  if (cfg->json) {
    printf("{\"target\":\"%s\",\"workload\":\"%s\",\"endpoints\":\"%s\",\"watchers\":%ld,"
           "\"streams\":%d,\"writers\":%d,\"put_total\":%ld,\"put_rate\":%.3f,\"created\":%ld,"
           "\"setup_s\":%.4f,\"put_issued\":%ld,\"put_ok\":%ld,\"put_errors\":%ld,"
           "\"events\":%ld,\"expected\":%ld,\"foreign\":%ld,\"ended\":%ld,"
           "\"min_per_watcher\":%ld,\"max_per_watcher\":%ld,\"seconds\":%.6f,"
           "\"events_per_s\":%.1f,\"puts_per_s\":%.1f,\"p50_ms\":%.4f,\"p90_ms\":%.4f,"
           "\"p99_ms\":%.4f,\"p999_ms\":%.4f,\"max_ms\":%.4f,\"mean_ms\":%.4f,"
           "\"put_p50_ms\":%.4f,\"put_p99_ms\":%.4f,\"hist_rel_error\":%.5f,\"cpu_s\":%.3f,"
           "\"errors_by_code\":{",
           target_name(cfg->target), cfg->workload_name, cfg->endpoints, r->watchers, cfg->streams,
           cfg->clients, cfg->put_total, cfg->put_rate, r->created, r->setup_s, r->put_issued,
           r->put_ok, r->put_errors, r->events, r->expected, r->foreign, r->ended,
           r->min_per_watcher, r->max_per_watcher, r->seconds, eps, pps, hist_pct(h, 50) / 1e6,
           hist_pct(h, 90) / 1e6, hist_pct(h, 99) / 1e6, hist_pct(h, 99.9) / 1e6,
           (double)h->max_ns / 1e6, hist_mean(h) / 1e6, hist_pct(&r->put_lat, 50) / 1e6,
           hist_pct(&r->put_lat, 99) / 1e6, HIST_REL_ERROR, r->cpu_s);
    for (int i = 0; i < r->n_err; i++)
      printf("%s\"%s\":%ld", i ? "," : "", r->err[i].name, r->err[i].n);
    printf("}}\n");
    return;
  }
  const char *f = cfg->precise ? "  %g%% in %.9f secs.\n" : "  %g%% in %.4f secs.\n";
  printf("Target: %s %s %s: %ld watchers over %d streams, %s\n", target_name(cfg->target),
         cfg->endpoints, cfg->workload_name, r->watchers, cfg->streams,
         cfg->workload == W_WATCH_LATENCY ? "one key" : "one key range (" WATCH_PREFIX ")");
  if (cfg->put_rate)
    printf("Puts: %ld at %.1f/s (open loop), %d bytes each\n", cfg->put_total, cfg->put_rate,
           cfg->val_size);
  else
    printf("Puts: %ld by %d writers, closed loop, %d bytes each\n", cfg->put_total, cfg->clients,
           cfg->val_size);
  printf("\nWatches created: %ld in %.4f secs.\n", r->created, r->setup_s);
  printf("Puts: %ld issued, %ld ok, %ld errors; %.1f/s; put latency p50 %.4f p99 %.4f secs.\n",
         r->put_issued, r->put_ok, r->put_errors, pps, hist_pct(&r->put_lat, 50) / 1e9,
         hist_pct(&r->put_lat, 99) / 1e9);
  printf(
      "Events: %ld received, %ld expected (%ld watchers x %ld ok puts); per watcher %ld .. %ld%s\n",
      r->events, r->expected, r->watchers, r->put_ok, r->min_per_watcher, r->max_per_watcher,
      r->events == r->expected && r->min_per_watcher == r->max_per_watcher ? ""
                                                                           : "  MISSING EVENTS");
  if (r->foreign || r->ended)
    printf("  %ld foreign events, %ld watches ended early\n", r->foreign, r->ended);
  printf("Events/sec:\t%.1f (over %.4f secs, first put to last event)\n", eps, r->seconds);
  printf("\nEvent latency, put sent -> event received (relative error <= %.2f%%):\n",
         HIST_REL_ERROR * 100);
  static const double ps[] = {10, 25, 50, 75, 90, 95, 99, 99.9};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
    printf(f, ps[i], hist_pct(h, ps[i]) / 1e9);
  printf(cfg->precise ? "  max in %.9f secs.\n" : "  max in %.4f secs.\n", (double)h->max_ns / 1e9);
  printf("\nGenerator CPU: %.2f s in %.2f s\n", r->cpu_s, r->seconds);
  for (int i = 0; i < r->n_err; i++)
    printf("  %s: %ld\n", r->err[i].name, r->err[i].n);
}
