/* tools/grpc-bridge/bridge_reg.c — registration of the bridge as an etcd
 * grpc-proxy (--resolver-prefix, --resolver-ttl, --advertise-client-url) and
 * the MemberList that lists the registered proxies.
 *
 * Registration, as etcd's grpcproxy.Register: a lease of --resolver-ttl
 * seconds; the key [namespace]PREFIX/ADDR with etcd's naming.Update JSON
 * {"Op":0,"Addr":ADDR,"Metadata":"{\"Name\":\"HOST\"}"} attached to it; the
 * lease kept alive by libketch (every TTL/3, inside ketch_process). A lease
 * found gone or lost (a whole TTL without a renewal) registers again one
 * second later, as does a grant or put that failed. Everything runs on the
 * bridge's loop through the default upstream's handle; nothing blocks.
 *
 * MemberList with --advertise-client-url (etcd's cluster proxy rules): with
 * a resolver prefix, one member per key under PREFIX/ (ID 0, Name from the
 * key's metadata, clientURLs [ADDR]), read from the cluster at each call
 * (linearizable: a proxy whose lease expired is gone at once); when none is
 * registered, or without a prefix, the bridge itself alone. Without
 * --advertise-client-url MemberList is the cluster's (bridge_kv.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "bridge.h"
#include "../grpc/grpc_client.h"
#include "rpc.pb-c.h"

#define REG_RETRY_S 1.0
#define REG_MAX_MEMBERS 4096
#define REG_NAME_MAX 256

struct kt_bridge_reg {
  struct ev_loop *loop;
  ketch_client *kc;
  bool *submitted; /* the upstream's "run ketch_process before sleeping" */
  char *key;       /* [ns]PREFIX/ADDR */
  char *value;     /* naming.Update JSON */
  int ttl_s;
  int64_t lease; /* 0 while not registered */
  bool busy;     /* a grant or put in flight */
  ev_timer retry;
};

void kt_bridge_reg_name(const uint8_t *v, size_t n, char *out, size_t out_len) {
  /* the Name inside Metadata: ...\"Name\":\"HOST\"... (JSON in a JSON
   * string, so its quotes are escaped). Bounded scan; "" if absent. */
  static const char pat[] = "\\\"Name\\\":\\\"";
  size_t pl = sizeof pat - 1;
  out[0] = 0;
  if (out_len == 0)
    return;
  for (size_t i = 0; i + pl <= n; i++) {
    if (memcmp(v + i, pat, pl) != 0)
      continue;
    size_t j = i + pl, k = 0;
    while (j < n && v[j] != '\\' && v[j] != '"' && k + 1 < out_len)
      out[k++] = (char)v[j++];
    out[k] = 0;
    return;
  }
}

static void reg_schedule(struct kt_bridge_reg *r) {
  r->busy = false;
  r->lease = 0;
  ev_timer_stop(r->loop, &r->retry);
  ev_timer_set(&r->retry, REG_RETRY_S, 0);
  ev_timer_start(r->loop, &r->retry);
}

static void on_keepalive(void *arg, int err, const ketch_result *res) {
  struct kt_bridge_reg *r = arg;
  if (err || !res || res->lease.ttl <= 0) {
    fprintf(stderr, "ketch-grpc warn: registration %s lost (%s): registering again\n", r->key,
            err ? ketch_strerror(err) : "lease gone");
    reg_schedule(r);
  }
}

static void on_put(void *arg, int err, const ketch_result *res) {
  (void)res;
  struct kt_bridge_reg *r = arg;
  if (err == KETCH_ECANCELED)
    return; /* the handle is closing */
  if (err) {
    fprintf(stderr, "ketch-grpc warn: registering %s: %s\n", r->key, ketch_strerror(err));
    reg_schedule(r);
    return;
  }
  r->busy = false;
  if (ketch_lease_keepalive_start(r->kc, r->lease, on_keepalive, r) != 0) {
    reg_schedule(r);
    return;
  }
  *r->submitted = true;
  fprintf(stderr, "ketch-grpc info: registered %s (lease %llx, TTL %d s)\n", r->key,
          (unsigned long long)r->lease, r->ttl_s);
}

static void on_grant(void *arg, int err, const ketch_result *res) {
  struct kt_bridge_reg *r = arg;
  if (err == KETCH_ECANCELED)
    return;
  if (err) {
    fprintf(stderr, "ketch-grpc warn: registering %s: lease: %s\n", r->key, ketch_strerror(err));
    reg_schedule(r);
    return;
  }
  r->lease = res->lease.id;
  ketch_put_req p = {.key = r->key,
                     .key_len = strlen(r->key),
                     .value = r->value,
                     .value_len = strlen(r->value),
                     .lease = r->lease};
  if (ketch_put_async(r->kc, &p, on_put, r) != 0) {
    reg_schedule(r);
    return;
  }
  *r->submitted = true;
}

static void reg_go(struct kt_bridge_reg *r) {
  if (r->busy)
    return;
  r->busy = true;
  if (ketch_lease_grant_async(r->kc, r->ttl_s, 0, on_grant, r) != 0) {
    reg_schedule(r);
    return;
  }
  *r->submitted = true;
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  reg_go(w->data);
}

struct kt_bridge_reg *kt_bridge_reg_start(struct ev_loop *loop, ketch_client *kc, bool *submitted,
                                          const char *ns, const char *prefix, const char *addr,
                                          int ttl_s) {
  struct kt_bridge_reg *r = calloc(1, sizeof *r);
  char host[REG_NAME_MAX] = "";
  gethostname(host, sizeof host - 1);
  for (char *p = host; *p; p++) /* the name goes into a JSON string twice */
    if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
      *p = '_';
  size_t kl = strlen(ns ? ns : "") + strlen(prefix) + 1 + strlen(addr) + 1;
  size_t vl = strlen(addr) + strlen(host) + 64;
  if (!r || !(r->key = malloc(kl)) || !(r->value = malloc(vl))) {
    if (r)
      free(r->key);
    free(r);
    return NULL;
  }
  snprintf(r->key, kl, "%s%s/%s", ns ? ns : "", prefix, addr);
  snprintf(r->value, vl, "{\"Op\":0,\"Addr\":\"%s\",\"Metadata\":\"{\\\"Name\\\":\\\"%s\\\"}\"}",
           addr, host);
  r->loop = loop;
  r->kc = kc;
  r->submitted = submitted;
  r->ttl_s = ttl_s;
  ev_timer_init(&r->retry, on_retry, 0, 0);
  r->retry.data = r;
  reg_go(r);
  return r;
}

void kt_bridge_reg_stop(struct kt_bridge_reg *r) {
  if (!r)
    return;
  ev_timer_stop(r->loop, &r->retry);
  if (r->lease) { /* deregister at once: revoked (its key goes with it) */
    ketch_lease_keepalive_stop(r->kc, r->lease);
    ketch_result *res = NULL;
    ketch_lease_revoke(r->kc, r->lease, &res);
    ketch_result_free(res);
  }
  free(r->key);
  free(r->value);
  free(r);
}

/* ---- MemberList ---- */

struct ml_call {
  kt_bridge_done done;
  void *arg;
  char *self;  /* the advertised address */
  size_t skip; /* length of [ns]PREFIX/ */
};

static void ml_answer_self(struct ml_call *m) {
  char host[REG_NAME_MAX] = "";
  gethostname(host, sizeof host - 1);
  Etcdserverpb__Member mb = ETCDSERVERPB__MEMBER__INIT, *mbs[1] = {&mb};
  char *urls[1] = {m->self};
  mb.name = host;
  mb.clienturls = urls;
  mb.n_clienturls = 1;
  Etcdserverpb__MemberListResponse o = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
  o.members = mbs;
  o.n_members = 1;
  kt_bridge_finish(m->done, m->arg, &o);
}

static void ml_free(struct ml_call *m) {
  free(m->self);
  free(m);
}

static void on_ml_range(void *arg, int err, const ketch_result *res) {
  struct ml_call *m = arg;
  if (err) {
    kt_bridge_fail(m->done, m->arg, err, res ? res->message : NULL);
    ml_free(m);
    return;
  }
  size_t n = res->range.n_kvs;
  if (n == 0) {
    ml_answer_self(m);
    ml_free(m);
    return;
  }
  if (n > REG_MAX_MEMBERS)
    n = REG_MAX_MEMBERS;
  Etcdserverpb__Member *mb = calloc(n, sizeof *mb);
  Etcdserverpb__Member **v = calloc(n, sizeof *v);
  char *names = calloc(n, REG_NAME_MAX);
  char **addrs = calloc(n, sizeof *addrs);
  size_t k = 0;
  if (mb && v && names && addrs) {
    for (size_t i = 0; i < n; i++) {
      const ketch_kv *kv = &res->range.kvs[i];
      if (kv->key_len <= m->skip)
        continue;
      size_t al = kv->key_len - m->skip;
      if (!(addrs[k] = malloc(al + 1)))
        break;
      memcpy(addrs[k], (const char *)kv->key + m->skip, al);
      addrs[k][al] = 0;
      etcdserverpb__member__init(&mb[k]);
      kt_bridge_reg_name((const uint8_t *)kv->value, kv->value_len, names + k * REG_NAME_MAX,
                         REG_NAME_MAX);
      mb[k].name = names + k * REG_NAME_MAX;
      mb[k].clienturls = &addrs[k];
      mb[k].n_clienturls = 1;
      v[k] = &mb[k];
      k++;
    }
    Etcdserverpb__MemberListResponse o = ETCDSERVERPB__MEMBER_LIST_RESPONSE__INIT;
    o.members = v;
    o.n_members = k;
    kt_bridge_finish(m->done, m->arg, &o);
  } else {
    m->done(m->arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
  }
  if (addrs)
    for (size_t i = 0; i < k; i++)
      free(addrs[i]);
  free(addrs);
  free(names);
  free(v);
  free(mb);
  ml_free(m);
}

void kt_bridge_reg_member_list(ketch_client *kc, const char *ns, const char *prefix,
                               const char *addr, kt_bridge_done done, void *arg) {
  struct ml_call *m = calloc(1, sizeof *m);
  if (!m || !(m->self = strdup(addr))) {
    free(m);
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  m->done = done;
  m->arg = arg;
  if (!prefix) {
    ml_answer_self(m);
    ml_free(m);
    return;
  }
  size_t kl = strlen(ns ? ns : "") + strlen(prefix) + 2;
  char *key = malloc(kl);
  if (!key) {
    ml_free(m);
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  snprintf(key, kl, "%s%s/", ns ? ns : "", prefix);
  m->skip = strlen(key);
  ketch_range_req q = {.key = key, .key_len = m->skip, .prefix = true};
  int err = ketch_range_async(kc, &q, on_ml_range, m);
  free(key);
  if (err) {
    kt_bridge_fail(done, arg, err, NULL);
    ml_free(m);
  }
}
