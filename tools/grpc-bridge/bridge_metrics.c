/* tools/grpc-bridge/bridge_metrics.c — ketch-grpc's /metrics (--metrics-addr):
 * go-grpc-prometheus' server counters, as etcd's gRPC server exports them:
 * grpc_server_started_total{grpc_type,grpc_service,grpc_method} and
 * grpc_server_handled_total{...,grpc_code}. Only methods the bridge serves
 * are counted (a bounded set: no label value comes from a client's bytes
 * that are not one of them).
 *
 * Per loop (bridge.h, "Event loops"): each loop has its own method table and
 * counters, written only by that loop (atomics with relaxed order: a plain
 * load and store on its hot path, no locked instruction; a new method's
 * entry is published with a release store of the table's length). A scrape
 * (loop 0, net/http.c) reads every registered loop's tables with acquire /
 * relaxed loads and prints the sums; a figure may miss a call that ends
 * during the scrape, never count one twice. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bridge.h"

#include "../../core/base.h"

#define MAX_METHODS 128
#define N_CODES 17

struct kt_bridge_method_stat {
  char path[112]; /* fixed before the entry is published */
  bool stream;
  _Atomic uint64_t started;
  _Atomic uint64_t handled[N_CODES];
};

/* One loop's counters. */
struct loop_stats {
  struct kt_bridge_method_stat stats[MAX_METHODS];
  _Atomic size_t n_stats; /* entries published (release) */
};

static KT_LOOP_LOCAL struct loop_stats L;

/* The loops' counters, registered once each (slots taken in order). */
static struct {
  struct loop_stats *_Atomic stats;
  _Atomic uint64_t *ka_requests, *ka_upstream, *events_coalescing;
  _Atomic int64_t *watchers_coalescing;
} loops[KT_BRIDGE_MAX_LOOPS];
static _Atomic int n_loops;

void (*kt_bridge_metrics_extra)(void *arg, struct kt_buf *out);

void kt_bridge_metrics_register_loop(void) {
  int i = atomic_fetch_add(&n_loops, 1);
  if (i >= KT_BRIDGE_MAX_LOOPS)
    return;
  loops[i].ka_requests = &kt_bridge_ka_requests;
  loops[i].ka_upstream = &kt_bridge_ka_upstream;
  loops[i].events_coalescing = &kt_bridge_events_coalescing;
  loops[i].watchers_coalescing = &kt_bridge_watchers_coalescing;
  atomic_store_explicit(&loops[i].stats, &L, memory_order_release);
}

/* Only this loop writes x: a load and a store, no locked instruction. */
static void bump(_Atomic uint64_t *x) {
  atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + 1, memory_order_relaxed);
}

static const char *const code_names[N_CODES] = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

struct kt_bridge_method_stat *kt_bridge_stat_start(const char *path, bool stream) {
  struct kt_bridge_method_stat *s = NULL;
  size_t n = atomic_load_explicit(&L.n_stats, memory_order_relaxed);
  for (size_t i = 0; i < n && !s; i++)
    if (!strcmp(L.stats[i].path, path))
      s = &L.stats[i];
  if (!s) {
    if (n == MAX_METHODS || strlen(path) >= sizeof L.stats[0].path)
      return NULL;
    s = &L.stats[n];
    snprintf(s->path, sizeof s->path, "%s", path);
    s->stream = stream;
    atomic_store_explicit(&L.n_stats, n + 1, memory_order_release);
  }
  bump(&s->started);
  return s;
}

void kt_bridge_stat_done(struct kt_bridge_method_stat *s, int code) {
  if (s)
    bump(&s->handled[code >= 0 && code < N_CODES ? code : 2]);
}

/* The sums over the loops, one entry per method (in first-seen order). */
struct sum_stat {
  const struct kt_bridge_method_stat *first; /* path and type */
  uint64_t started, handled[N_CODES];
};

static size_t sum_stats(struct sum_stat *out) {
  size_t n_out = 0;
  int nl = atomic_load_explicit(&n_loops, memory_order_acquire);
  for (int l = 0; l < nl && l < KT_BRIDGE_MAX_LOOPS; l++) {
    struct loop_stats *ls = atomic_load_explicit(&loops[l].stats, memory_order_acquire);
    if (!ls)
      continue;
    size_t n = atomic_load_explicit(&ls->n_stats, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
      const struct kt_bridge_method_stat *s = &ls->stats[i];
      size_t j = 0;
      while (j < n_out && strcmp(out[j].first->path, s->path))
        j++;
      if (j == n_out) {
        if (n_out == MAX_METHODS)
          continue;
        memset(&out[n_out], 0, sizeof out[n_out]);
        out[n_out++].first = s;
      }
      out[j].started += atomic_load_explicit(&s->started, memory_order_relaxed);
      for (int c = 0; c < N_CODES; c++)
        out[j].handled[c] += atomic_load_explicit(&s->handled[c], memory_order_relaxed);
    }
  }
  return n_out;
}

static uint64_t sum_u64(size_t field) {
  uint64_t t = 0;
  int nl = atomic_load_explicit(&n_loops, memory_order_acquire);
  for (int l = 0; l < nl && l < KT_BRIDGE_MAX_LOOPS; l++) {
    if (!atomic_load_explicit(&loops[l].stats, memory_order_acquire))
      continue;
    _Atomic uint64_t *p = field == 0   ? loops[l].ka_requests
                          : field == 1 ? loops[l].ka_upstream
                                       : loops[l].events_coalescing;
    t += atomic_load_explicit(p, memory_order_relaxed);
  }
  return t;
}

static int64_t sum_watchers(void) {
  int64_t t = 0;
  int nl = atomic_load_explicit(&n_loops, memory_order_acquire);
  for (int l = 0; l < nl && l < KT_BRIDGE_MAX_LOOPS; l++)
    if (atomic_load_explicit(&loops[l].stats, memory_order_acquire))
      t += atomic_load_explicit(loops[l].watchers_coalescing, memory_order_relaxed);
  return t;
}

__attribute__((format(printf, 2, 3))) static void out_f(struct kt_buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k > 0)
    kt_buf_append(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* grpc_type as go-grpc-prometheus names it: Watch and LeaseKeepAlive are
 * bidirectional, the other streams (Snapshot, Observe) server streams. */
static const char *grpc_type(const struct kt_bridge_method_stat *s) {
  if (!s->stream)
    return "unary";
  if (strstr(s->path, "/Watch") || strstr(s->path, "/LeaseKeepAlive"))
    return "bidi_stream";
  return "server_stream";
}

static void labels(const struct kt_bridge_method_stat *s, char *out, size_t cap) {
  const char *p = s->path[0] == '/' ? s->path + 1 : s->path;
  const char *slash = strrchr(p, '/');
  int svc_len = slash ? (int)(slash - p) : (int)strlen(p);
  snprintf(out, cap, "grpc_method=\"%s\",grpc_service=\"%.*s\",grpc_type=\"%s\"",
           slash ? slash + 1 : "", svc_len, p, grpc_type(s));
}

void kt_bridge_metrics(void *arg, struct kt_buf *b) {
  static struct sum_stat sums[MAX_METHODS]; /* the scraping thread's (loop 0) */
  size_t n_sums = sum_stats(sums);
  char l[256];
  out_f(b, "# HELP grpc_server_started_total Total number of RPCs started on the server.\n"
           "# TYPE grpc_server_started_total counter\n");
  for (size_t i = 0; i < n_sums; i++) {
    labels(sums[i].first, l, sizeof l);
    out_f(b, "grpc_server_started_total{%s} %llu\n", l, (unsigned long long)sums[i].started);
  }
  out_f(b, "# HELP grpc_server_handled_total Total number of RPCs completed on the server, "
           "regardless of success or failure.\n# TYPE grpc_server_handled_total counter\n");
  for (size_t i = 0; i < n_sums; i++) {
    labels(sums[i].first, l, sizeof l);
    for (int c = 0; c < N_CODES; c++)
      if (sums[i].handled[c])
        out_f(b, "grpc_server_handled_total{grpc_code=\"%s\",%s} %llu\n", code_names[c], l,
              (unsigned long long)sums[i].handled[c]);
  }
  out_f(b,
        "# HELP ketch_grpc_lease_keepalives_received_total Lease keep-alive requests from "
        "clients.\n# TYPE ketch_grpc_lease_keepalives_received_total counter\n"
        "ketch_grpc_lease_keepalives_received_total %llu\n"
        "# HELP ketch_grpc_lease_keepalives_sent_total Lease renewals the bridge sent to the "
        "members (fewer than received with --coalesce-lease-keepalives).\n"
        "# TYPE ketch_grpc_lease_keepalives_sent_total counter\n"
        "ketch_grpc_lease_keepalives_sent_total %llu\n",
        (unsigned long long)sum_u64(0), (unsigned long long)sum_u64(1));
  /* etcd's grpc-proxy watch figures (its proxy/grpcproxy/metrics.go): client
   * watches sharing an upstream watch beyond the first of each, and watch
   * responses fanned out beyond the first per upstream response. */
  out_f(b,
        "# HELP etcd_grpc_proxy_watchers_coalescing_total Total number of current watchers "
        "coalescing\n# TYPE etcd_grpc_proxy_watchers_coalescing_total gauge\n"
        "etcd_grpc_proxy_watchers_coalescing_total %lld\n"
        "# HELP etcd_grpc_proxy_events_coalescing_total Total number of events coalescing\n"
        "# TYPE etcd_grpc_proxy_events_coalescing_total counter\n"
        "etcd_grpc_proxy_events_coalescing_total %llu\n",
        (long long)sum_watchers(), (unsigned long long)sum_u64(2));
  if (kt_bridge_metrics_extra)
    kt_bridge_metrics_extra(arg, b);
  kt_bridge_cache_metrics(b);
}
