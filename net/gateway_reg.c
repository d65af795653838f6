/* net/gateway_reg.c — `ketch gateway start --resolver-prefix`: the gateway
 * registers itself in the cluster, so that native clients (libketch's
 * ketch_options.resolver_prefix, ketchctl --resolver-prefix) find it and
 * spread over the registered gateways.
 *
 * The registration is etcd's grpc-proxy one, as ketch-grpc writes it
 * (tools/grpc-bridge/bridge_reg.c): a lease of --resolver-ttl seconds, the
 * key PREFIX/ADDR with etcd's naming.Update JSON attached to it; the
 * Metadata also says "Protocol":"ketch" (a native ketch endpoint, which
 * ketch-grpc's gRPC address is not: libketch uses only these). The lease is
 * kept alive by libketch (every TTL/3); a lease found gone or lost, or a
 * grant or put that failed, registers again one second later. The stop
 * revokes the lease: the key goes at once.
 *
 * Owns: one non-blocking libketch handle on the cluster's endpoints, driven
 * by the gateway's loop (an ev_io on ketch_fd and an ev_timer on
 * ketch_timeout_ms, re-armed after every ketch_process), and the key and
 * value. Nothing blocks the loop but the stop's revoke (bounded by the
 * request timeout, after the loop ended).
 */
#include "gateway.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "../client/ketch.h"
#include "../core/base.h"

#define REG_RETRY_S 1.0

struct kt_gw_reg {
  struct ev_loop *loop;
  ketch_client *c;
  ev_io io;
  ev_timer tm, retry;
  char *key, *value;
  int ttl_s;
  int64_t lease; /* 0 while not registered */
  bool busy;     /* a grant or put in flight */
};

/* Re-arms the watchers from what the handle wants now. */
static void reg_arm(struct kt_gw_reg *r) {
  ev_io_stop(r->loop, &r->io);
  ev_timer_stop(r->loop, &r->tm);
  int fd = ketch_fd(r->c);
  short want = ketch_events(r->c);
  int ev = (want & POLLIN ? EV_READ : 0) | (want & POLLOUT ? EV_WRITE : 0);
  if (fd >= 0 && ev) {
    ev_io_set(&r->io, fd, ev);
    ev_io_start(r->loop, &r->io);
  }
  int t = ketch_timeout_ms(r->c);
  if (t >= 0) {
    ev_timer_set(&r->tm, t / 1000.0, 0.);
    ev_timer_start(r->loop, &r->tm);
  }
}

/* The io watcher is stopped before ketch_process, which may close its fd. */
static void reg_run(struct kt_gw_reg *r) {
  ev_io_stop(r->loop, &r->io);
  ketch_process(r->c);
  reg_arm(r);
}

static void on_reg_io(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  reg_run(w->data);
}

static void on_reg_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)revents;
  reg_run(w->data);
}

static void reg_again(struct kt_gw_reg *r, const char *what, int err) {
  kt_log(KT_LOG_WARN, "gateway", "registration %s: %s: %s; registering again in 1s", r->key, what,
         ketch_strerror(err));
  r->busy = false;
  r->lease = 0;
  ev_timer_stop(r->loop, &r->retry);
  ev_timer_set(&r->retry, REG_RETRY_S, 0.);
  ev_timer_start(r->loop, &r->retry);
}

static void on_keepalive(void *arg, int err, const ketch_result *res) {
  struct kt_gw_reg *r = arg;
  if (err || res->lease.ttl <= 0)
    reg_again(r, "lease lost", err ? err : KETCH_ELEASENOTFOUND);
}

static void on_put(void *arg, int err, const ketch_result *res) {
  (void)res;
  struct kt_gw_reg *r = arg;
  if (err == KETCH_ECANCELED)
    return; /* the handle is closing */
  if (err) {
    reg_again(r, "put", err);
    return;
  }
  r->busy = false;
  if ((err = ketch_lease_keepalive_start(r->c, r->lease, on_keepalive, r))) {
    reg_again(r, "keep-alive", err);
    return;
  }
  kt_log(KT_LOG_INFO, "gateway", "registered key=%s lease=%llx ttl=%ds", r->key,
         (unsigned long long)r->lease, r->ttl_s);
}

static void on_grant(void *arg, int err, const ketch_result *res) {
  struct kt_gw_reg *r = arg;
  if (err == KETCH_ECANCELED)
    return;
  if (err) {
    reg_again(r, "lease grant", err);
    return;
  }
  r->lease = res->lease.id;
  ketch_put_req p = {.key = r->key,
                     .key_len = strlen(r->key),
                     .value = r->value,
                     .value_len = strlen(r->value),
                     .lease = r->lease};
  if ((err = ketch_put_async(r->c, &p, on_put, r)))
    reg_again(r, "put", err);
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)revents;
  struct kt_gw_reg *r = w->data;
  if (r->busy)
    return;
  r->busy = true;
  int err = ketch_lease_grant_async(r->c, r->ttl_s, 0, on_grant, r);
  if (err)
    reg_again(r, "lease grant", err);
  reg_run(r);
}

struct kt_gw_reg *kt_gw_reg_start(struct ev_loop *loop, const char *endpoints, const char *prefix,
                                  const char *addr, int ttl_s, int dial_timeout_ms, char *why,
                                  size_t why_len) {
  for (const char *p = addr; *p; p++)
    if (*p <= ' ' || *p == '"' || *p == '\\' || *p == ',') {
      snprintf(why, why_len, "--advertise-client-url \"%s\": not a host:port or URL", addr);
      return NULL;
    }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  for (char *p = host; *p; p++) /* the name goes into a JSON string twice */
    if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
      *p = '_';
  struct kt_gw_reg *r = calloc(1, sizeof *r);
  size_t kl = strlen(prefix) + strlen(addr) + 2, vl = strlen(addr) + strlen(host) + 96;
  if (!r || !(r->key = malloc(kl)) || !(r->value = malloc(vl))) {
    if (r)
      free(r->key);
    free(r);
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  snprintf(r->key, kl, "%s/%s", prefix, addr);
  snprintf(r->value, vl,
           "{\"Op\":0,\"Addr\":\"%s\",\"Metadata\":\"{\\\"Name\\\":\\\"%s\\\","
           "\\\"Protocol\\\":\\\"ketch\\\"}\"}",
           addr, host);
  ketch_options o;
  ketch_options_init(&o);
  o.nonblocking_open = true;
  o.dial_timeout_ms = dial_timeout_ms;
  if (ketch_open(&r->c, endpoints, &o, why, why_len)) {
    free(r->key);
    free(r->value);
    free(r);
    return NULL;
  }
  r->loop = loop;
  r->ttl_s = ttl_s;
  ev_init(&r->io, on_reg_io);
  r->io.data = r;
  ev_init(&r->tm, on_reg_timer);
  r->tm.data = r;
  ev_timer_init(&r->retry, on_retry, 0., 0.);
  r->retry.data = r;
  ev_timer_start(loop, &r->retry); /* the first registration, from the loop */
  return r;
}

void kt_gw_reg_stop(struct kt_gw_reg *r) {
  if (!r)
    return;
  ev_io_stop(r->loop, &r->io);
  ev_timer_stop(r->loop, &r->tm);
  ev_timer_stop(r->loop, &r->retry);
  if (r->lease) { /* deregister at once: revoked, its key goes with it */
    ketch_lease_keepalive_stop(r->c, r->lease);
    ketch_result *res = NULL;
    if (ketch_lease_revoke(r->c, r->lease, &res) == 0)
      kt_log(KT_LOG_INFO, "gateway", "deregistered key=%s", r->key);
    ketch_result_free(res);
  }
  ketch_close(r->c);
  free(r->key);
  free(r->value);
  free(r);
}
