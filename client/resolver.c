/* client/resolver.c — proxies found under a resolver prefix
 * (ketch_resolve_prefix, ketch_options.resolver_prefix).
 *
 * Owns: the handle's resolver state (the prefix, the cluster's endpoints
 * and a private copy of the options the registrations are read with).
 *
 * The registrations are those of etcd's grpc-proxy --resolver-prefix, as
 * ketch-grpc and `ketch gateway start --resolver-prefix` write them: the key
 * PREFIX/ADDR on a lease, its value etcd's naming.Update JSON
 * {"Op":0,"Addr":ADDR,"Metadata":"{\"Name\":\"HOST\"...}"}. ketch-grpc's
 * ADDR speaks gRPC, which libketch does not: only registrations whose
 * Metadata says \"Protocol\":\"ketch\" (a ketch gateway's, or one written by
 * hand for a member) are endpoints for libketch; the others are counted and
 * named in the error when nothing else is registered.
 *
 * Data flow: a blocking handle on the cluster's endpoints (the caller's
 * options: TLS, credentials) -> one linearizable range of PREFIX/ -> each
 * value parsed (kt_cl_naming_parse: bounds-checked, fuzzed by
 * test/fuzz/naming_fuzz.c) -> "ADDR,ADDR,..." rotated to start at a random
 * entry, so that many clients spread over the proxies; the handle fails over
 * round robin from there as across any endpoint list, and reads the
 * registrations again when a whole round failed (conn.c, as SRV records).
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define RESOLVE_MAX 256 /* registrations read at most */
#define ADDR_MAX 300    /* bytes of one Addr */
#define LIST_CAP (64 * 1024)

/* The registration marks that a native ketch endpoint carries in Metadata
 * (a JSON string inside the JSON value: its quotes escaped). */
static const char native_mark[] = "\\\"Protocol\\\":\\\"ketch\\\"";

int kt_cl_naming_parse(const uint8_t *v, size_t n, char *addr, size_t addr_len) {
  const uint8_t *end = v + n, *p = memmem(v, n, "\"Op\":", 5);
  if (!p || addr_len == 0)
    return -1;
  for (p += 5; p < end && *p == ' ';)
    p++;
  if (p >= end || *p != '0' || (p + 1 < end && *(p + 1) >= '0' && *(p + 1) <= '9'))
    return -1; /* Op 1 is a Delete; only an Add names an endpoint */
  p = memmem(v, n, "\"Addr\":\"", 8);
  if (!p)
    return -1;
  size_t k = 0;
  for (p += 8; p < end && *p != '"'; p++) {
    if (*p == '\\' || *p == ',' || *p <= ' ' || k + 1 >= addr_len)
      return -1; /* escapes, list separators, spaces: not an address */
    addr[k++] = (char)*p;
  }
  if (p >= end || k == 0)
    return -1;
  addr[k] = 0;
  return memmem(v, n, native_mark, sizeof native_mark - 1) ? 1 : 0;
}

/* Whether addr parses as a libketch endpoint. */
static bool addr_ok(const char *addr) {
  struct endpoint *eps;
  size_t n;
  char why[200];
  if (kt_cl_parse_endpoints(addr, 0, &eps, &n, why, sizeof why))
    return false;
  kt_cl_free_endpoints(eps, n);
  return n == 1;
}

/* The registrations under prefix, read on c: the native endpoints into
 * list (comma-separated, rotated); KETCH_ENOTFOUND with why when none. */
static int read_registrations(ketch_client *c, const char *prefix, char *list, size_t cap,
                              char *why, size_t why_len) {
  size_t plen = strlen(prefix);
  char *key = malloc(plen + 2);
  if (!key)
    return KETCH_ENOMEM;
  memcpy(key, prefix, plen);
  key[plen] = '/';
  ketch_range_req q = {.key = key, .key_len = plen + 1, .prefix = true, .limit = RESOLVE_MAX};
  ketch_result *res;
  int err = ketch_range(c, &q, &res);
  free(key);
  if (err) {
    snprintf(why, why_len, "reading the registrations under \"%s/\": %s", prefix, ketch_errmsg(c));
    return err;
  }
  const char *addrs[RESOLVE_MAX];
  char *store = malloc((size_t)RESOLVE_MAX * ADDR_MAX);
  size_t n = 0, other = 0;
  if (!store) {
    ketch_result_free(res);
    return KETCH_ENOMEM;
  }
  for (size_t i = 0; i < res->range.n_kvs; i++) {
    const ketch_kv *kv = &res->range.kvs[i];
    char *a = store + n * ADDR_MAX;
    int r = kt_cl_naming_parse((const uint8_t *)kv->value, kv->value_len, a, ADDR_MAX);
    if (r == 1 && addr_ok(a))
      addrs[n++] = a;
    else if (r == 0)
      other++;
  }
  ketch_result_free(res);
  if (n == 0) {
    snprintf(why, why_len,
             "no ketch endpoint registered under \"%s/\"%s (only registrations whose "
             "Metadata has \"Protocol\":\"ketch\", e.g. ketch gateway --resolver-prefix)",
             prefix,
             other ? ": the registrations there are gRPC proxies (ketch-grpc), for etcd clients"
                   : "");
    free(store);
    return KETCH_ENOTFOUND;
  }
  if (sodium_init() < 0) {
    free(store);
    return KETCH_EINTERNAL;
  }
  size_t start = randombytes_uniform((uint32_t)n), used = 0;
  list[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const char *a = addrs[(start + i) % n];
    if (used + strlen(a) + 2 > cap) {
      err = KETCH_EINVAL;
      break;
    }
    used += (size_t)snprintf(list + used, cap - used, "%s%s", i ? "," : "", a);
  }
  free(store);
  if (err)
    snprintf(why, why_len, "the registered endpoints do not fit in %zu bytes", cap);
  return err;
}

int ketch_resolve_prefix(const char *endpoints, const char *prefix, const ketch_options *opts,
                         char *buf, size_t buf_len, char *errmsg, size_t errmsg_len) {
  kt_cl_copy_msg(errmsg, errmsg_len, "");
  if (!prefix || !*prefix || !buf || buf_len == 0) {
    kt_cl_copy_msg(errmsg, errmsg_len, "empty resolver prefix or no buffer");
    return KETCH_EINVAL;
  }
  ketch_options o;
  ketch_options_init(&o);
  if (opts)
    o = *opts;
  o.resolver_prefix = NULL;
  o.nonblocking_open = false;
  ketch_client *c;
  int err = ketch_open(&c, endpoints, &o, errmsg, errmsg_len);
  if (err)
    return err;
  char why[600] = "";
  err = read_registrations(c, prefix, buf, buf_len, why, sizeof why);
  if (err)
    kt_cl_copy_msg(errmsg, errmsg_len, why[0] ? why : kt_strerror(err));
  ketch_close(c);
  return err;
}

/* ---- a handle opened with ketch_options.resolver_prefix ---- */

static char *dup_opt(const char *s, bool *ok) {
  if (!s)
    return NULL;
  char *d = strdup(s);
  *ok &= d != NULL;
  return d;
}

void kt_cl_resolver_free(ketch_client *c) {
  ketch_options *o = c->res_opts;
  if (o) {
    char *strs[] = {(char *)o->user,        (char *)o->password,  (char *)o->token,
                    (char *)o->ca_file,     (char *)o->cert_file, (char *)o->key_file,
                    (char *)o->server_name, (char *)o->identity};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
      if (strs[i])
        sodium_memzero(strs[i], strlen(strs[i]));
      free(strs[i]);
    }
    free(o);
  }
  free(c->res_prefix);
  free(c->res_cluster);
  c->res_opts = NULL;
  c->res_prefix = c->res_cluster = NULL;
}

int kt_cl_resolver_set(ketch_client *c, const char *cluster, const char *prefix,
                       const ketch_options *opts) {
  ketch_options *o = calloc(1, sizeof *o);
  bool ok = o != NULL;
  if (o) {
    *o = *opts;
    o->user = dup_opt(opts->user, &ok);
    o->password = dup_opt(opts->password, &ok);
    o->token = dup_opt(opts->token, &ok);
    o->ca_file = dup_opt(opts->ca_file, &ok);
    o->cert_file = dup_opt(opts->cert_file, &ok);
    o->key_file = dup_opt(opts->key_file, &ok);
    o->server_name = dup_opt(opts->server_name, &ok);
    o->identity = dup_opt(opts->identity, &ok);
    o->resolver_prefix = NULL;
    o->nonblocking_open = false;
    /* a lookup again blocks the caller: about one dial timeout per cluster
     * endpoint and one request */
    o->request_timeout_ms = o->dial_timeout_ms > 0 ? o->dial_timeout_ms : 2000;
  }
  c->res_opts = o;
  c->res_prefix = dup_opt(prefix, &ok);
  c->res_cluster = dup_opt(cluster, &ok);
  if (!ok) {
    kt_cl_resolver_free(c);
    return KETCH_ENOMEM;
  }
  c->refresh_interval_ms = KETCH_SRV_REFRESH_MS;
  c->refresh_next_ms = kt_cl_now_ms() + c->refresh_interval_ms;
  return 0;
}

int kt_cl_resolver_lookup(ketch_client *c, char *list, size_t cap) {
  char why[600];
  return ketch_resolve_prefix(c->res_cluster, c->res_prefix, c->res_opts, list, cap, why,
                              sizeof why);
}

int kt_cl_open_resolved(ketch_client **out, const char *endpoints, const ketch_options *opts,
                        char *errmsg, size_t errmsg_len) {
  char *list = malloc(LIST_CAP);
  if (!list)
    return KETCH_ENOMEM;
  int err = ketch_resolve_prefix(endpoints, opts->resolver_prefix, opts, list, LIST_CAP, errmsg,
                                 errmsg_len);
  ketch_options o = *opts;
  o.resolver_prefix = NULL;
  if (!err)
    err = ketch_open(out, list, &o, errmsg, errmsg_len);
  free(list);
  if (!err && (err = kt_cl_resolver_set(*out, endpoints, opts->resolver_prefix, opts))) {
    ketch_close(*out);
    *out = NULL;
    kt_cl_copy_msg(errmsg, errmsg_len, "out of memory");
  }
  return err;
}
