/* tools/grpc-bridge/bridge_metrics.c — ketch-grpc's /metrics (--metrics-addr):
 * go-grpc-prometheus' server counters, as etcd's gRPC server exports them:
 * grpc_server_started_total{grpc_type,grpc_service,grpc_method} and
 * grpc_server_handled_total{...,grpc_code}. Only methods the bridge serves
 * are counted (a bounded set: no label value comes from a client's bytes
 * that are not one of them). Plain counters of the bridge's one loop thread,
 * formatted only when scraped (net/http.c drives the HTTP side). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bridge.h"

#include "../../core/base.h"

#define MAX_METHODS 128
#define N_CODES 17

struct kt_bridge_method_stat {
  char path[112];
  bool stream;
  uint64_t started;
  uint64_t handled[N_CODES];
};

static struct kt_bridge_method_stat stats[MAX_METHODS];
static size_t n_stats;

static const char *const code_names[N_CODES] = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

struct kt_bridge_method_stat *kt_bridge_stat_start(const char *path, bool stream) {
  struct kt_bridge_method_stat *s = NULL;
  for (size_t i = 0; i < n_stats && !s; i++)
    if (!strcmp(stats[i].path, path))
      s = &stats[i];
  if (!s) {
    if (n_stats == MAX_METHODS || strlen(path) >= sizeof stats[0].path)
      return NULL;
    s = &stats[n_stats++];
    snprintf(s->path, sizeof s->path, "%s", path);
    s->stream = stream;
  }
  s->started++;
  return s;
}

void kt_bridge_stat_done(struct kt_bridge_method_stat *s, int code) {
  if (s)
    s->handled[code >= 0 && code < N_CODES ? code : 2]++;
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
  (void)arg;
  char l[256];
  out_f(b, "# HELP grpc_server_started_total Total number of RPCs started on the server.\n"
           "# TYPE grpc_server_started_total counter\n");
  for (size_t i = 0; i < n_stats; i++) {
    labels(&stats[i], l, sizeof l);
    out_f(b, "grpc_server_started_total{%s} %llu\n", l, (unsigned long long)stats[i].started);
  }
  out_f(b, "# HELP grpc_server_handled_total Total number of RPCs completed on the server, "
           "regardless of success or failure.\n# TYPE grpc_server_handled_total counter\n");
  for (size_t i = 0; i < n_stats; i++) {
    labels(&stats[i], l, sizeof l);
    for (int c = 0; c < N_CODES; c++)
      if (stats[i].handled[c])
        out_f(b, "grpc_server_handled_total{grpc_code=\"%s\",%s} %llu\n", code_names[c], l,
              (unsigned long long)stats[i].handled[c]);
  }
  out_f(b,
        "# HELP ketch_grpc_lease_keepalives_received_total Lease keep-alive requests from "
        "clients.\n# TYPE ketch_grpc_lease_keepalives_received_total counter\n"
        "ketch_grpc_lease_keepalives_received_total %llu\n"
        "# HELP ketch_grpc_lease_keepalives_sent_total Lease renewals the bridge sent to the "
        "members (fewer than received with --coalesce-lease-keepalives).\n"
        "# TYPE ketch_grpc_lease_keepalives_sent_total counter\n"
        "ketch_grpc_lease_keepalives_sent_total %llu\n",
        (unsigned long long)kt_bridge_ka_requests, (unsigned long long)kt_bridge_ka_upstream);
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
        (long long)kt_bridge_watchers_coalescing, (unsigned long long)kt_bridge_events_coalescing);
  kt_bridge_cache_metrics(b);
}
