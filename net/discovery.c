/* net/discovery.c — bootstrap through a discovery service (a ketch cluster),
 * on libketch. See net/discovery.h for the keys, the data flow and the
 * errors. Runs before the node exists: its blocking calls (libketch's
 * synchronous requests, poll on the watch, the backoff sleep) hold up only
 * the start of this process. */
#include "discovery.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../client/ketch.h"
#include "../core/node.h"
#include "config.h"

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_REGISTERED 256 /* member keys read; more is an error */

enum { RETRY = -1 };

int kt_discovery_parse_member(const char *v, size_t len, char *name, size_t name_cap,
                              char (*urls)[256], size_t max_urls, size_t *n_urls) {
  const char *eq = memchr(v, '=', len);
  if (!eq || eq == v || (size_t)(eq - v) >= name_cap)
    return KT_EINVAL;
  for (const char *p = v; p < eq; p++)
    if (*p == ',' || iscntrl((unsigned char)*p))
      return KT_EINVAL;
  memcpy(name, v, (size_t)(eq - v));
  name[eq - v] = 0;
  size_t n = 0;
  const char *p = eq + 1, *end = v + len;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    size_t ul = (size_t)(stop - p);
    if (ul == 0 || ul >= 256 || n == max_urls)
      return KT_EINVAL;
    for (const char *q = p; q < stop; q++)
      if (iscntrl((unsigned char)*q) || *q == '=' || *q == ' ')
        return KT_EINVAL;
    memcpy(urls[n], p, ul);
    urls[n][ul] = 0;
    n++;
    if (!comma)
      break;
    p = comma + 1;
  }
  *n_urls = n;
  return 0;
}

struct disc {
  const struct kt_config *cfg;
  char prefix[512];   /* P/members/ */
  char size_key[512]; /* P/_config/size */
  char my_key[600];
  char my_value[2048];
  uint64_t size;
};

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
    ;
}

/* An error a retry can cure: the service unreachable or slow. */
static bool transient(int rc) {
  return rc == KETCH_EUNAVAILABLE || rc == KETCH_ETIMEOUT || rc == KETCH_ENOLEADER ||
         rc == KETCH_ECLOSED || rc == KETCH_EUNKNOWN || rc == KETCH_ESTOPPED;
}

static int fail_req(ketch_client *c, int rc, const char *what, struct kt_err *e) {
  if (transient(rc)) {
    kt_log(KT_LOG_WARN, "discovery", "%s failed: %s; retrying", what, ketch_errmsg(c));
    return RETRY;
  }
  return kt_err_set(e, KT_EINVAL, "discovery: %s failed: %s", what, ketch_errmsg(c));
}

/* Reads P/members/ by create revision into res (caller frees). */
static int read_members(ketch_client *c, struct disc *d, ketch_result **res, struct kt_err *e) {
  ketch_range_req r = {.key = d->prefix,
                       .key_len = strlen(d->prefix),
                       .prefix = true,
                       .limit = MAX_REGISTERED,
                       .sort_order = KETCH_SORT_ASCEND,
                       .sort_target = KETCH_SORT_CREATE};
  int rc = ketch_range(c, &r, res);
  if (rc)
    return fail_req(c, rc, "reading the registered members", e);
  if ((*res)->range.more)
    return kt_err_set(e, KT_EINVAL, "discovery: more than %d keys under %s", MAX_REGISTERED,
                      d->prefix);
  return 0;
}

/* Where our key is among kvs: its index, -1 if absent; -2 (duplicate id)
 * when it holds another value. */
static long find_self(const ketch_result *res, const struct disc *d) {
  size_t kl = strlen(d->my_key), vl = strlen(d->my_value);
  for (size_t i = 0; i < res->range.n_kvs; i++) {
    const ketch_kv *kv = &res->range.kvs[i];
    if (kv->key_len == kl && memcmp(kv->key, d->my_key, kl) == 0)
      return kv->value_len == vl && memcmp(kv->value, d->my_value, vl) == 0 ? (long)i : -2;
  }
  return -1;
}

/* One watch's state. It outlives wait_change when the watch is still open
 * then: the library's last delivery for a watch is the canceled one (after
 * ketch_watch_cancel, or from ketch_close), and that delivery frees it. */
struct wait_state {
  bool event, ended;
  bool waiting; /* wait_change still looks at it */
  int err;
};

static void on_watch(void *arg, int err, const ketch_result *res) {
  struct wait_state *w = arg;
  if (err || res->watch.canceled) {
    if (!w->waiting) {
      free(w);
      return;
    }
    w->ended = true;
    w->err = err ? err : KETCH_ECANCELED;
    return;
  }
  if (res->watch.n_events)
    w->event = true;
}

/* Blocks until a change under the prefix after revision rev. */
static int wait_change(ketch_client *c, struct disc *d, int64_t rev, struct kt_err *e) {
  struct wait_state *w = calloc(1, sizeof *w);
  kt_assert(w);
  w->waiting = true;
  ketch_watch_req wr = {
      .key = d->prefix, .key_len = strlen(d->prefix), .prefix = true, .start_revision = rev + 1};
  uint64_t id = 0;
  int rc = ketch_watch(c, &wr, on_watch, w, &id);
  if (rc) {
    free(w); /* not accepted: no callback will run */
    return fail_req(c, rc, "watching the registered members", e);
  }
  while (!w->event && !w->ended) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    int t = ketch_timeout_ms(c);
    poll(&p, p.fd >= 0, t < 0 || t > 1000 ? 1000 : t);
    ketch_process(c);
  }
  if (w->ended) { /* its last delivery came: nothing refers to it any more */
    int err = w->err;
    free(w);
    return fail_req(c, err, "watching the registered members", e);
  }
  w->waiting = false; /* freed by its canceled delivery */
  ketch_watch_cancel(c, id);
  return 0;
}

static int take_cluster(const ketch_result *res, struct disc *d, struct kt_discovery_peer *out,
                        size_t max, size_t *n_out, struct kt_err *e) {
  size_t n = 0;
  bool self = false;
  for (size_t i = 0; i < d->size; i++) {
    const ketch_kv *kv = &res->range.kvs[i];
    char name[128], urls[KT_DISCOVERY_MAX_URLS][256];
    size_t nu = 0;
    if (kt_discovery_parse_member(kv->value, kv->value_len, name, sizeof name, urls,
                                  KT_DISCOVERY_MAX_URLS, &nu))
      return kt_err_set(e, KT_EINVAL, "discovery: bad member value \"%.*s\" at %.*s",
                        (int)KT_MIN(kv->value_len, 80), kv->value, (int)KT_MIN(kv->key_len, 100),
                        kv->key);
    for (size_t j = 0; j < n; j++)
      if (!strcmp(out[j].name, name)) /* one name, one id */
        return kt_err_set(e, KT_EINVAL, "discovery: found duplicate id (name \"%s\")", name);
    self |= kv->key_len == strlen(d->my_key) && !memcmp(kv->key, d->my_key, kv->key_len);
    for (size_t u = 0; u < nu; u++) {
      if (n == max)
        return kt_err_set(e, KT_EINVAL, "discovery: too many members (max %zu URLs)", max);
      memcpy(out[n].name, name, sizeof out[n].name);  /* both 128, NUL-terminated */
      memcpy(out[n].url, urls[u], sizeof out[n].url); /* both 256 */
      n++;
    }
  }
  if (!self)
    return kt_err_set(e, KT_EINVAL, "discovery: cluster is full");
  *n_out = n;
  return 0;
}

/* One attempt: 0, RETRY, or an error (e filled). */
static int attempt(struct disc *d, struct kt_discovery_peer *out, size_t max, size_t *n_out,
                   struct kt_err *e) {
  const struct kt_config *cfg = d->cfg;
  ketch_options o;
  ketch_options_init(&o);
  o.dial_timeout_ms = (int)KT_MIN(cfg->discovery_dial_timeout_ms, 600000);
  o.request_timeout_ms = (int)KT_MIN(cfg->discovery_request_timeout_ms, 600000);
  o.user = cfg->discovery_user;
  o.password = cfg->discovery_password;
  o.ca_file = cfg->discovery_cacert;
  o.cert_file = cfg->discovery_cert;
  o.key_file = cfg->discovery_key;
  ketch_client *c = NULL;
  char msg[512] = "";
  int rc = ketch_open(&c, cfg->discovery_endpoints, &o, msg, sizeof msg);
  if (rc) {
    if (rc == KETCH_EUNAVAILABLE) {
      kt_log(KT_LOG_WARN, "discovery", "cannot reach the discovery service %s: %s; retrying",
             cfg->discovery_endpoints, msg);
      return RETRY;
    }
    return kt_err_set(e, KT_EINVAL, "discovery: cannot connect to %s: %s", cfg->discovery_endpoints,
                      msg);
  }
  ketch_result *res = NULL;
  rc = ketch_get(c, d->size_key, strlen(d->size_key), &res);
  if (rc) {
    rc = fail_req(c, rc, "reading the size key", e);
    goto out;
  }
  if (res->range.n_kvs == 0) {
    rc = kt_err_set(e, KT_ENOTFOUND, "discovery: size key not found");
    goto out;
  }
  {
    char buf[24];
    const ketch_kv *kv = &res->range.kvs[0];
    size_t l = KT_MIN(kv->value_len, sizeof buf - 1);
    memcpy(buf, kv->value, l);
    buf[l] = 0;
    char *endp;
    errno = 0;
    unsigned long long v = strtoull(buf, &endp, 10);
    if (errno || endp == buf || *endp || kv->value_len >= sizeof buf || v == 0 ||
        v > KT_NODE_MAX_MEMBERS) {
      rc = kt_err_set(e, KT_EINVAL, "discovery: invalid size \"%s\" (want 1 to %d)", buf,
                      KT_NODE_MAX_MEMBERS);
      goto out;
    }
    d->size = v;
  }
  ketch_result_free(res);
  res = NULL;
  if ((rc = read_members(c, d, &res, e)))
    goto out;
  long at = find_self(res, d);
  if (at == -2) {
    rc = kt_err_set(e, KT_EINVAL, "discovery: found duplicate id");
    goto out;
  }
  if (at == -1 && res->range.n_kvs >= d->size) {
    rc = kt_err_set(e, KT_EINVAL, "discovery: cluster is full");
    goto out;
  }
  if (at == -1) { /* register: create-if-absent */
    ketch_result_free(res);
    res = NULL;
    size_t kl = strlen(d->my_key);
    ketch_compare cmp = {.result = KETCH_CMP_EQUAL,
                         .target = KETCH_CMP_CREATE,
                         .key = d->my_key,
                         .key_len = kl,
                         .int_value = 0};
    ketch_op put = ketch_op_put((ketch_put_req){
        .key = d->my_key, .key_len = kl, .value = d->my_value, .value_len = strlen(d->my_value)});
    ketch_op get = ketch_op_range((ketch_range_req){.key = d->my_key, .key_len = kl});
    ketch_txn_req t = {.compare = &cmp,
                       .n_compare = 1,
                       .success = &put,
                       .n_success = 1,
                       .failure = &get,
                       .n_failure = 1};
    rc = ketch_txn(c, &t, &res);
    if (rc) {
      rc = fail_req(c, rc, "registering", e);
      goto out;
    }
    if (!res->txn.succeeded) {
      const ketch_range_result *g = &res->txn.responses[0].range;
      size_t vl = strlen(d->my_value);
      if (g->n_kvs != 1 || g->kvs[0].value_len != vl || memcmp(g->kvs[0].value, d->my_value, vl)) {
        rc = kt_err_set(e, KT_EINVAL, "discovery: found duplicate id");
        goto out;
      }
    }
    kt_log(KT_LOG_INFO, "discovery", "registered %s = %s", d->my_key, d->my_value);
    ketch_result_free(res);
    res = NULL;
    if ((rc = read_members(c, d, &res, e)))
      goto out;
  }
  while (res->range.n_kvs < d->size) {
    kt_log(KT_LOG_INFO, "discovery", "%zu of %" PRIu64 " members registered; waiting",
           res->range.n_kvs, d->size);
    int64_t rev = res->header.revision;
    ketch_result_free(res);
    res = NULL;
    if ((rc = wait_change(c, d, rev, e)) || (rc = read_members(c, d, &res, e)))
      goto out;
  }
  rc = take_cluster(res, d, out, max, n_out, e);
out:
  ketch_result_free(res);
  ketch_close(c);
  return rc;
}

int kt_discovery_bootstrap(const struct kt_config *cfg, struct kt_discovery_peer *out, size_t max,
                           size_t *n_out, struct kt_err *e) {
  struct disc *d = calloc(1, sizeof *d);
  kt_assert(d);
  d->cfg = cfg;
  if (strlen(cfg->discovery_token) > 200) {
    free(d);
    return kt_err_set(e, KT_EINVAL, "--discovery-token: longer than 200 bytes");
  }
  snprintf(d->prefix, sizeof d->prefix, "/_ketch/registry/%s/members/", cfg->discovery_token);
  snprintf(d->size_key, sizeof d->size_key, "/_ketch/registry/%s/_config/size",
           cfg->discovery_token);
  uint64_t id = kt_node_member_id_of(cfg->discovery_token, cfg->name);
  snprintf(d->my_key, sizeof d->my_key, "%s%016" PRIx64, d->prefix, id);
  size_t l = (size_t)snprintf(d->my_value, sizeof d->my_value, "%s=", cfg->name);
  const struct kt_url_list *ap = &cfg->initial_advertise_peer_urls;
  for (size_t i = 0; i < ap->n && l < sizeof d->my_value; i++)
    l += (size_t)snprintf(d->my_value + l, sizeof d->my_value - l, "%s%s", i ? "," : "",
                          ap->v[i].raw);
  if (l >= sizeof d->my_value) {
    free(d);
    return kt_err_set(e, KT_EINVAL, "discovery: advertised peer URLs too long");
  }
  int backoff = BACKOFF_FIRST_MS, rc;
  while ((rc = attempt(d, out, max, n_out, e)) == RETRY) {
    sleep_ms(backoff);
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
  free(d);
  return rc;
}
