/* tools/bench/lock.c — `lock`: mutex contention. --clients clients, each a
 * thread with a connection and a session (lease) of its own, acquire and
 * release one mutex (--lock-name) in turn until --total acquisitions (or
 * --duration); one operation = lock acquired + unlocked, its latency from
 * the lock request to the unlock's answer. Reports acquisitions/s.
 *
 * ketch: libketch's recipe (ketch_session_open, ketch_mutex_lock/unlock:
 * synchronous, hence one thread per client). etcd: the v3lock service
 * (v3lockpb.Lock/Lock, Unlock) with a lease granted per client (TTL
 * --lease-ttl, long enough for the run: no keep-alive), revoked at the end.
 *
 * Mutual exclusion is checked while holding: a client that finds another
 * client inside the critical section counts MUTEX_OVERLAP (an error).
 * Accounting as bench_run: ok + errors == issued.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../../client/ketch.h"
#include "../grpc/grpc_client.h"
#include "bench.h"
#include "rpc.pb-c.h"
#include "v3lock.pb-c.h"

static struct {
  const struct bench_cfg *cfg;
  atomic_long issued;
  atomic_int holder; /* 0, or the client id (1-based) holding the mutex */
  uint64_t end_ns;
} L;

struct lclient {
  pthread_t th;
  int id;
  struct bench_result r; /* this client's counts and histogram */
  char err[256];         /* setup failure */
  /* etcd */
  kt_grpc_client *g;
  int status;
  uint8_t *resp;
  size_t resp_len;
  bool done;
};

static void count_err(struct bench_result *r, const char *name) {
  r->errors++;
  for (int i = 0; i < r->n_err; i++)
    if (!strcmp(r->err[i].name, name)) {
      r->err[i].n++;
      return;
    }
  int i = r->n_err < BENCH_MAX_ERR_KINDS ? r->n_err++ : BENCH_MAX_ERR_KINDS - 1;
  r->err[i].name = name;
  r->err[i].n++;
}

/* Another acquisition may start (claims one of --total). */
static bool claim(void) {
  if (L.end_ns && bench_now_ns() >= L.end_ns)
    return false;
  long n = atomic_fetch_add(&L.issued, 1);
  if (L.cfg->total && n >= L.cfg->total) {
    atomic_fetch_sub(&L.issued, 1);
    return false;
  }
  return true;
}

/* Inside the critical section: nobody else may be. */
static bool enter(struct lclient *c) {
  int none = 0;
  return atomic_compare_exchange_strong(&L.holder, &none, c->id);
}
static void leave(struct lclient *c) {
  int me = c->id;
  atomic_compare_exchange_strong(&L.holder, &me, 0);
}

static void *ketch_client_main(void *arg) {
  struct lclient *c = arg;
  const struct bench_cfg *cfg = L.cfg;
  ketch_options o;
  ketch_options_init(&o);
  o.request_timeout_ms = cfg->timeout_ms;
  o.ca_file = bench_tls.cacert;
  o.cert_file = bench_tls.cert;
  o.key_file = bench_tls.key;
  o.insecure_skip_verify = bench_tls.skip_verify;
  ketch_client *k;
  int64_t lease = 0;
  if (ketch_open(&k, cfg->endpoints, &o, c->err, sizeof c->err))
    return NULL;
  int rc = ketch_session_open(k, cfg->lease_ttl_s, &lease);
  if (rc) {
    snprintf(c->err, sizeof c->err, "session: %s", ketch_strerror(rc));
    ketch_close(k);
    return NULL;
  }
  while (claim()) {
    c->r.issued++;
    uint64_t t0 = bench_now_ns();
    char *key = NULL;
    rc = ketch_mutex_lock(k, cfg->range_key, lease, cfg->timeout_ms, &key, NULL);
    if (rc) {
      count_err(&c->r, ketch_errname(rc));
      continue;
    }
    bool alone = enter(c);
    leave(c);
    rc = ketch_mutex_unlock(k, key);
    free(key);
    if (rc) {
      count_err(&c->r, ketch_errname(rc));
    } else if (!alone) {
      count_err(&c->r, "MUTEX_OVERLAP");
    } else {
      c->r.ok++;
      hist_add(&c->r.all, bench_now_ns() - t0);
    }
  }
  ketch_session_close(k, lease);
  ketch_close(k);
  return NULL;
}

/* ---- etcd: synchronous unary calls over kt_grpc ---- */

static void on_reply(void *arg, int status, const char *message, const uint8_t *msg, size_t len) {
  (void)message;
  struct lclient *c = arg;
  c->status = status;
  c->done = true;
  free(c->resp);
  c->resp = NULL;
  c->resp_len = 0;
  if (!status && (c->resp = malloc(len ? len : 1))) {
    memcpy(c->resp, msg, len);
    c->resp_len = len;
  }
}

/* One call, waited for. 0 or a KT_GRPC_* code; the response in c->resp. */
static int call(struct lclient *c, const char *path, const ProtobufCMessage *req) {
  size_t len = protobuf_c_message_get_packed_size(req);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf)
    return KT_GRPC_RESOURCE_EXHAUSTED;
  protobuf_c_message_pack(req, buf);
  c->done = false;
  int rc = kt_grpc_call(c->g, path, buf, len, L.cfg->timeout_ms, on_reply, c);
  free(buf);
  if (rc)
    return rc;
  while (!c->done) {
    struct pollfd p = {kt_grpc_fd(c->g), kt_grpc_events(c->g), 0};
    poll(&p, p.fd >= 0, kt_grpc_timeout_ms(c->g));
    kt_grpc_process(c->g);
  }
  return c->status;
}

static void *etcd_client_main(void *arg) {
  struct lclient *c = arg;
  const struct bench_cfg *cfg = L.cfg;
  char ep[256];
  snprintf(ep, sizeof ep, "%s", cfg->endpoints);
  char *comma = strchr(ep, ',');
  if (comma)
    *comma = 0;
  bool tls = bench_tls.cacert || bench_tls.cert || bench_tls.key;
  char *hp = ep;
  if (!strncmp(hp, "https://", 8))
    hp += 8, tls = true;
  else if (!strncmp(hp, "http://", 7))
    hp += 7, tls = false;
  struct kt_tls_ctx *ctx = tls ? bench_etcd_tls(c->err, sizeof c->err) : NULL;
  if ((tls && !ctx) ||
      kt_grpc_open_tls(&c->g, hp, ctx, 4, cfg->timeout_ms < 5000 ? cfg->timeout_ms : 5000, c->err,
                       sizeof c->err))
    return NULL;
  Etcdserverpb__LeaseGrantRequest g;
  etcdserverpb__lease_grant_request__init(&g);
  g.ttl = cfg->lease_ttl_s;
  int rc = call(c, "/etcdserverpb.Lease/LeaseGrant", &g.base);
  Etcdserverpb__LeaseGrantResponse *gr =
      rc ? NULL : etcdserverpb__lease_grant_response__unpack(NULL, c->resp_len, c->resp);
  if (!gr) {
    snprintf(c->err, sizeof c->err, "lease grant: %s",
             rc ? kt_grpc_status_name(rc) : "bad response");
    goto out;
  }
  int64_t lease = gr->id;
  etcdserverpb__lease_grant_response__free_unpacked(gr, NULL);
  while (claim()) {
    c->r.issued++;
    uint64_t t0 = bench_now_ns();
    V3lockpb__LockRequest lr;
    v3lockpb__lock_request__init(&lr);
    lr.name.data = (uint8_t *)cfg->range_key;
    lr.name.len = strlen(cfg->range_key);
    lr.lease = lease;
    rc = call(c, "/v3lockpb.Lock/Lock", &lr.base);
    V3lockpb__LockResponse *lk =
        rc ? NULL : v3lockpb__lock_response__unpack(NULL, c->resp_len, c->resp);
    if (!lk) {
      count_err(&c->r, rc ? kt_grpc_status_name(rc) : "BAD_RESPONSE");
      continue;
    }
    bool alone = enter(c);
    leave(c);
    V3lockpb__UnlockRequest ur;
    v3lockpb__unlock_request__init(&ur);
    ur.key = lk->key;
    rc = call(c, "/v3lockpb.Lock/Unlock", &ur.base);
    v3lockpb__lock_response__free_unpacked(lk, NULL);
    if (rc) {
      count_err(&c->r, kt_grpc_status_name(rc));
    } else if (!alone) {
      count_err(&c->r, "MUTEX_OVERLAP");
    } else {
      c->r.ok++;
      hist_add(&c->r.all, bench_now_ns() - t0);
    }
  }
  Etcdserverpb__LeaseRevokeRequest rv;
  etcdserverpb__lease_revoke_request__init(&rv);
  rv.id = lease;
  call(c, "/etcdserverpb.Lease/LeaseRevoke", &rv.base);
out:
  kt_grpc_close(c->g);
  free(c->resp);
  return NULL;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int lock_run(const struct bench_cfg *cfg, struct bench_result *res, char *err, size_t err_len) {
  memset(res, 0, sizeof *res);
  L.cfg = cfg;
  atomic_store(&L.issued, 0);
  atomic_store(&L.holder, 0);
  struct lclient *cs = calloc((size_t)cfg->clients, sizeof *cs);
  if (!cs) {
    snprintf(err, err_len, "out of memory");
    return 1;
  }
  uint64_t t0 = bench_now_ns();
  double cpu0 = cpu_s();
  L.end_ns = cfg->duration_s ? t0 + (uint64_t)(cfg->duration_s * 1e9) : 0;
  int started = 0;
  for (; started < cfg->clients; started++) {
    cs[started].id = started + 1;
    if (pthread_create(&cs[started].th, NULL,
                       cfg->target == T_ETCD ? etcd_client_main : ketch_client_main, &cs[started]))
      break;
  }
  for (int i = 0; i < started; i++)
    pthread_join(cs[i].th, NULL);
  res->seconds = (double)(bench_now_ns() - t0) / 1e9;
  res->cpu_s = cpu_s() - cpu0;
  int rc = 0;
  if (started < cfg->clients) {
    snprintf(err, err_len, "could not start %d client threads", cfg->clients);
    rc = 1;
  }
  for (int i = 0; i < started; i++) {
    struct bench_result *r = &cs[i].r;
    if (cs[i].err[0] && !rc) {
      snprintf(err, err_len, "client %d: %s", i + 1, cs[i].err);
      rc = 1;
    }
    res->issued += r->issued;
    res->ok += r->ok;
    hist_merge(&res->all, &r->all);
    hist_merge(&res->write, &r->all);
    for (int e = 0; e < r->n_err; e++)
      for (long n = 0; n < r->err[e].n; n++)
        count_err(res, r->err[e].name);
  }
  free(cs);
  return rc;
}
