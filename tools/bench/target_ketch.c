/* tools/bench/target_ketch.c — the native target: one libketch handle per
 * connection (pipelined), requests built from a bench_op. */
#include <stdio.h>
#include <string.h>

#include "../../client/ketch.h"
#include "bench.h"

/* Connection k starts at endpoint k mod n of the list, as the etcd target
 * does (libketch starts at the first one and fails over along the list: the
 * list is rotated, so each connection still has every endpoint). */
static void rotate(char *out, size_t out_len, const char *endpoints, unsigned k) {
  size_t n = 1;
  for (const char *p = endpoints; *p; p++)
    n += *p == ',';
  const char *start = endpoints;
  for (unsigned i = 0; i < k % n; i++)
    start = strchr(start, ',') + 1;
  if (start == endpoints)
    snprintf(out, out_len, "%s", endpoints);
  else
    snprintf(out, out_len, "%s,%.*s", start, (int)(start - endpoints - 1), endpoints);
}

static int k_open(void **conn, const char *endpoints, int max_outstanding, int timeout_ms,
                  char *err, size_t err_len) {
  static unsigned next;
  char list[4096];
  rotate(list, sizeof list, endpoints, next++);
  ketch_options o;
  ketch_options_init(&o);
  o.max_outstanding = max_outstanding;
  o.request_timeout_ms = timeout_ms;
  o.ca_file = bench_tls.cacert;
  o.cert_file = bench_tls.cert;
  o.key_file = bench_tls.key;
  o.insecure_skip_verify = bench_tls.skip_verify;
  o.user = bench_auth.user;
  o.password = bench_auth.password;
  ketch_client *c;
  if (ketch_open(&c, list, &o, err, err_len))
    return -1;
  *conn = c;
  return 0;
}

static void k_close(void *conn) { ketch_close(conn); }

static void on_result(void *arg, int err, const ketch_result *res) {
  (void)res;
  bench_done(arg, err ? ketch_errname(err) : NULL);
}

/* A keep-alive answered with ttl 0: the lease was not found (expired). */
static void on_keepalive(void *arg, int err, const ketch_result *res) {
  bench_done(arg, err ? ketch_errname(err) : res->lease.ttl <= 0 ? "LEASE_NOT_FOUND" : NULL);
}

static void on_watch(void *arg, int err, const ketch_result *res) {
  const ketch_watch_result *w = &res->watch;
  if (err || w->canceled) {
    bench_watch_end(arg, err ? ketch_errname(err) : "CANCELED");
    return;
  }
  if (w->created)
    bench_watch_created(arg);
  for (size_t i = 0; i < w->n_events; i++)
    bench_watch_event(arg, w->events[i].kv.value, w->events[i].kv.value_len);
}

static int k_watch(void *conn, const struct bench_watch_req *req, void *arg,
                   const char **err_name) {
  ketch_watch_req r = {.key = req->key,
                       .key_len = req->key_len,
                       .range_end = req->end,
                       .range_end_len = req->end ? req->end_len : 0};
  uint64_t id;
  int rc = ketch_watch(conn, &r, on_watch, arg, &id);
  if (rc)
    *err_name = ketch_errname(rc);
  return rc;
}

static ketch_range_req range_of(const struct bench_op *op) {
  ketch_range_req r = {.key = op->key,
                       .key_len = op->key_len,
                       .range_end = op->end,
                       .range_end_len = op->end_len,
                       .limit = op->limit,
                       .serializable = op->serializable};
  return r;
}

static int k_submit(void *conn, const struct bench_op *op, int timeout_ms, void *arg,
                    const char **err_name) {
  (void)timeout_ms; /* the handle's request_timeout_ms */
  ketch_client *c = conn;
  int rc = KETCH_EINVAL;
  if (op->kind == OP_PUT) {
    ketch_put_req r = {
        .key = op->key, .key_len = op->key_len, .value = op->val, .value_len = op->val_len};
    rc = ketch_put_async(c, &r, on_result, arg);
  } else if (op->kind == OP_RANGE) {
    ketch_range_req r = range_of(op);
    rc = ketch_range_async(c, &r, on_result, arg);
  } else if (op->kind == OP_TXN) {
    ketch_op ops[BENCH_MAX_TXN_OPS];
    size_t n = 0;
    if (op->n_puts) {
      for (int i = 0; i < op->n_puts; i++) {
        ketch_put_req p = {.key = op->keys[i].key,
                           .key_len = op->keys[i].key_len,
                           .value = op->val,
                           .value_len = op->val_len};
        ops[n++] = ketch_op_put(p);
      }
    } else {
      ops[n++] = ketch_op_range(range_of(op));
    }
    ketch_txn_req t = {.success = ops, .n_success = n};
    rc = ketch_txn_async(c, &t, on_result, arg);
  } else if (op->kind == OP_LEASE_GRANT) {
    rc = ketch_lease_grant_async(c, op->ttl_s, op->lease, on_result, arg);
  } else if (op->kind == OP_KEEPALIVE) {
    rc = ketch_lease_keepalive_once_async(c, op->lease, on_keepalive, arg);
  }
  if (rc)
    *err_name = ketch_errname(rc);
  return rc;
}

static int k_fd(const void *conn) { return ketch_fd(conn); }
static short k_events(const void *conn) { return ketch_events(conn); }
static int k_timeout_ms(const void *conn) { return ketch_timeout_ms(conn); }
static void k_process(void *conn) { ketch_process(conn); }

const struct target target_ketch = {"ketch",  k_open,       k_close,   k_submit, k_fd,
                                    k_events, k_timeout_ms, k_process, k_watch};
