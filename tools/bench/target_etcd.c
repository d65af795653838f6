/* tools/bench/target_etcd.c — the etcd target: etcd's v3 gRPC API (KV
 * service) over tools/grpc's client, protobuf via protobuf-c. Each response
 * is decoded (as a real client would) and a response that does not decode
 * counts as an error "BAD_RESPONSE". Connection i of a run goes to endpoint
 * i mod n of the list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grpc/grpc_client.h"
#include "bench.h"
#include "rpc.pb-c.h"

struct econn;
struct ctx {
  struct econn *c;
  void *arg;
  const ProtobufCMessageDescriptor *resp;
  int next_free;
};

struct econn {
  kt_grpc_client *g;
  struct ctx *ctx;
  int free_head;
  uint8_t *buf;
  size_t cap;
};

static int e_open(void **conn, const char *endpoints, int max_outstanding, int timeout_ms,
                  char *err, size_t err_len) {
  static unsigned next; /* round robin over the list, one endpoint per connection */
  char list[1024], *save = NULL, *eps[64];
  int n = 0;
  snprintf(list, sizeof list, "%s", endpoints);
  for (char *t = strtok_r(list, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
    if (!strncmp(t, "etcd://", 7))
      t += 7;
    else if (!strncmp(t, "http://", 7))
      t += 7;
    size_t l = strlen(t);
    if (l && t[l - 1] == '/')
      t[l - 1] = 0;
    eps[n++] = t;
  }
  if (!n) {
    snprintf(err, err_len, "no endpoint");
    return -1;
  }
  struct econn *c = calloc(1, sizeof *c);
  if (!c || !(c->ctx = calloc((size_t)max_outstanding, sizeof *c->ctx))) {
    free(c);
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  for (int i = 0; i < max_outstanding; i++)
    c->ctx[i].c = c, c->ctx[i].next_free = i + 1 < max_outstanding ? i + 1 : -1;
  if (kt_grpc_open(&c->g, eps[next++ % (unsigned)n], max_outstanding,
                   timeout_ms < 5000 ? timeout_ms : 5000, err, err_len)) {
    free(c->ctx);
    free(c);
    return -1;
  }
  *conn = c;
  return 0;
}

static void e_close(void *conn) {
  struct econn *c = conn;
  kt_grpc_close(c->g);
  free(c->ctx);
  free(c->buf);
  free(c);
}

static void on_reply(void *arg, int status, const char *message, const uint8_t *msg, size_t len) {
  (void)message;
  struct ctx *x = arg;
  const char *err = NULL;
  if (status) {
    err = kt_grpc_status_name(status);
  } else {
    ProtobufCMessage *m = protobuf_c_message_unpack(x->resp, NULL, len, msg);
    if (!m)
      err = "BAD_RESPONSE";
    else
      protobuf_c_message_free_unpacked(m, NULL);
  }
  void *user = x->arg;
  x->arg = NULL;
  x->next_free = x->c->free_head; /* free before bench_done may submit again */
  x->c->free_head = (int)(x - x->c->ctx);
  bench_done(user, err);
}

static void range_of(const struct bench_op *op, Etcdserverpb__RangeRequest *r) {
  etcdserverpb__range_request__init(r);
  r->key.data = (uint8_t *)op->key;
  r->key.len = op->key_len;
  r->range_end.data = (uint8_t *)op->end;
  r->range_end.len = op->end_len;
  r->limit = op->limit;
  r->serializable = op->serializable;
}

static int e_submit(void *conn, const struct bench_op *op, int timeout_ms, void *arg,
                    const char **err_name) {
  struct econn *c = conn;
  if (c->free_head < 0) {
    *err_name = "RESOURCE_EXHAUSTED";
    return KT_GRPC_RESOURCE_EXHAUSTED;
  }
  const ProtobufCMessage *req;
  const char *path;
  const ProtobufCMessageDescriptor *resp;
  Etcdserverpb__PutRequest put, puts[BENCH_MAX_TXN_OPS];
  Etcdserverpb__RangeRequest range;
  Etcdserverpb__RequestOp ops[BENCH_MAX_TXN_OPS], *opp[BENCH_MAX_TXN_OPS];
  Etcdserverpb__TxnRequest txn;
  if (op->kind == OP_PUT) {
    etcdserverpb__put_request__init(&put);
    put.key.data = (uint8_t *)op->key;
    put.key.len = op->key_len;
    put.value.data = (uint8_t *)op->val;
    put.value.len = op->val_len;
    req = &put.base;
    path = "/etcdserverpb.KV/Put";
    resp = &etcdserverpb__put_response__descriptor;
  } else if (op->kind == OP_RANGE) {
    range_of(op, &range);
    req = &range.base;
    path = "/etcdserverpb.KV/Range";
    resp = &etcdserverpb__range_response__descriptor;
  } else {
    etcdserverpb__txn_request__init(&txn);
    int n = op->n_puts ? op->n_puts : 1;
    for (int i = 0; i < n; i++) {
      etcdserverpb__request_op__init(&ops[i]);
      if (op->n_puts) {
        etcdserverpb__put_request__init(&puts[i]);
        puts[i].key.data = (uint8_t *)op->keys[i].key;
        puts[i].key.len = op->keys[i].key_len;
        puts[i].value.data = (uint8_t *)op->val;
        puts[i].value.len = op->val_len;
        ops[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        ops[i].request_put = &puts[i];
      } else {
        range_of(op, &range);
        ops[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        ops[i].request_range = &range;
      }
      opp[i] = &ops[i];
    }
    txn.n_success = (size_t)n;
    txn.success = opp;
    req = &txn.base;
    path = "/etcdserverpb.KV/Txn";
    resp = &etcdserverpb__txn_response__descriptor;
  }
  size_t len = protobuf_c_message_get_packed_size(req);
  if (len > c->cap) {
    uint8_t *b = realloc(c->buf, len);
    if (!b) {
      *err_name = "ENOMEM";
      return -1;
    }
    c->buf = b;
    c->cap = len;
  }
  protobuf_c_message_pack(req, c->buf);
  int slot = c->free_head;
  struct ctx *x = &c->ctx[slot];
  x->arg = arg;
  x->resp = resp;
  int rc = kt_grpc_call(c->g, path, c->buf, len, timeout_ms, on_reply, x);
  if (rc) {
    x->arg = NULL;
    *err_name = kt_grpc_status_name(rc);
    return rc;
  }
  c->free_head = x->next_free;
  return 0;
}

static int e_fd(const void *conn) { return kt_grpc_fd(((const struct econn *)conn)->g); }
static short e_events(const void *conn) { return kt_grpc_events(((const struct econn *)conn)->g); }
static int e_timeout_ms(const void *conn) {
  return kt_grpc_timeout_ms(((const struct econn *)conn)->g);
}
static void e_process(void *conn) { kt_grpc_process(((struct econn *)conn)->g); }

const struct target target_etcd = {"etcd", e_open,   e_close,      e_submit,
                                   e_fd,   e_events, e_timeout_ms, e_process};
