/* tools/bench/target_etcd.c — the etcd target: etcd's v3 gRPC API (KV,
 * Lease, Watch) over tools/grpc's client, protobuf via protobuf-c. Each
 * response is decoded (as a real client would) and a response that does not
 * decode counts as an error "BAD_RESPONSE". Connection i of a run goes to
 * endpoint i mod n of the list.
 *
 * Streams, as clientv3 uses them: a keep-alive is one LeaseKeepAliveRequest
 * on the issuing client's own LeaseKeepAlive stream (opened on its first
 * keep-alive; one request in flight per stream, so the answer is the next
 * message); the watches of a connection share one Watch stream, and the n-th
 * `created` response names the n-th watch created on it. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../net/tls.h"
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

struct kstream { /* one client's LeaseKeepAlive stream */
  struct econn *c;
  int stream; /* -1: not open */
  void *arg;  /* the keep-alive in flight */
};

struct ewatch {
  void *arg;
  int64_t id;
  bool ended;
};

struct econn {
  kt_grpc_client *g;
  struct ctx *ctx;
  int free_head;
  uint8_t *buf;
  size_t cap;
  struct kstream *ks;
  int n_ks, max_ks, shared_ks;
  int wstream; /* the Watch stream, -1: not open */
  struct ewatch *w;
  int n_w, cap_w, n_created;
};

struct kt_tls_ctx *bench_etcd_tls(char *err, size_t err_len) {
  static struct kt_tls_ctx *ctx;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* lock's clients are threads */
  pthread_mutex_lock(&mu);
  if (ctx) {
    pthread_mutex_unlock(&mu);
    return ctx;
  }
  struct kt_tls_config tc = {.ca_file = bench_tls.cacert,
                             .cert_file = bench_tls.cert,
                             .key_file = bench_tls.key,
                             .skip_verify = bench_tls.skip_verify,
                             .alpn_h2 = true,
                             .cert_flag = "--cert",
                             .key_flag = "--key",
                             .ca_flag = "--cacert"};
  struct kt_err e = {0};
  if (kt_tls_ctx_new(&tc, &ctx, &e)) {
    snprintf(err, err_len, "%s", e.msg);
    ctx = NULL;
  }
  pthread_mutex_unlock(&mu);
  return ctx; /* kept for the process */
}

/* --user: Auth/Authenticate on the new connection (blocking, before the
 * run), then its token on every call, as clientv3 does. */
struct login {
  int status;
  char msg[200];
  char token[512];
};

static void on_login(void *arg, int status, const char *message, const uint8_t *msg,
                     size_t msg_len) {
  struct login *l = arg;
  l->status = status;
  snprintf(l->msg, sizeof l->msg, "%s", message);
  if (status != KT_GRPC_OK)
    return;
  Etcdserverpb__AuthenticateResponse *r =
      etcdserverpb__authenticate_response__unpack(NULL, msg_len, msg);
  if (!r) {
    l->status = KT_GRPC_INTERNAL;
    snprintf(l->msg, sizeof l->msg, "malformed AuthenticateResponse");
    return;
  }
  snprintf(l->token, sizeof l->token, "%s", r->token ? r->token : "");
  etcdserverpb__authenticate_response__free_unpacked(r, NULL);
}

static int e_login(kt_grpc_client *g, int timeout_ms, char *err, size_t err_len) {
  Etcdserverpb__AuthenticateRequest q = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
  q.name = (char *)bench_auth.user;
  q.password = (char *)bench_auth.password;
  uint8_t buf[2048];
  size_t n = etcdserverpb__authenticate_request__get_packed_size(&q);
  if (n > sizeof buf) {
    snprintf(err, err_len, "--user: name or password too long");
    return -1;
  }
  etcdserverpb__authenticate_request__pack(&q, buf);
  struct login l = {.status = -1};
  if (kt_grpc_call(g, "/etcdserverpb.Auth/Authenticate", buf, n, timeout_ms, on_login, &l)) {
    snprintf(err, err_len, "cannot start Auth/Authenticate");
    return -1;
  }
  while (l.status < 0) {
    struct pollfd p = {kt_grpc_fd(g), kt_grpc_events(g), 0};
    if (poll(&p, 1, kt_grpc_timeout_ms(g)) < 0 && errno != EINTR)
      break;
    kt_grpc_process(g);
  }
  if (l.status != KT_GRPC_OK || kt_grpc_set_token(g, l.token)) {
    snprintf(err, err_len, "authenticate as %s: %s: %s", bench_auth.user,
             kt_grpc_status_name(l.status), l.msg);
    return -1;
  }
  return 0;
}

static int e_open(void **conn, const char *endpoints, int max_outstanding, int timeout_ms,
                  char *err, size_t err_len) {
  static unsigned next; /* round robin over the list, one endpoint per connection */
  char list[1024], *save = NULL, *eps[64];
  bool tls[64];
  int n = 0;
  snprintf(list, sizeof list, "%s", endpoints);
  for (char *t = strtok_r(list, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
    tls[n] = bench_tls.cacert || bench_tls.cert || bench_tls.key;
    if (!strncmp(t, "etcd://", 7))
      t += 7;
    else if (!strncmp(t, "http://", 7))
      t += 7, tls[n] = false;
    else if (!strncmp(t, "https://", 8))
      t += 8, tls[n] = true;
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
  c->max_ks = max_outstanding;
  c->shared_ks = -1;
  c->wstream = -1;
  if (!(c->ks = calloc((size_t)max_outstanding, sizeof *c->ks))) {
    free(c->ctx);
    free(c);
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  unsigned k = next++ % (unsigned)n;
  struct kt_tls_ctx *ctx = tls[k] ? bench_etcd_tls(err, err_len) : NULL;
  if ((tls[k] && !ctx) ||
      kt_grpc_open_tls(&c->g, eps[k], ctx, max_outstanding, timeout_ms < 5000 ? timeout_ms : 5000,
                       err, err_len) ||
      (bench_auth.user && e_login(c->g, timeout_ms, err, err_len))) {
    kt_grpc_close(c->g);
    free(c->ks);
    free(c->ctx);
    free(c);
    return -1;
  }
  *conn = c;
  return 0;
}

static void e_close(void *conn) {
  struct econn *c = conn;
  kt_grpc_close(c->g); /* ends the streams: their callbacks run here */
  free(c->ks);
  free(c->w);
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

/* Packs req into c->buf; its length, or 0 with *err_name. */
static size_t pack(struct econn *c, const ProtobufCMessage *req, const char **err_name) {
  size_t len = protobuf_c_message_get_packed_size(req);
  if (len > c->cap) {
    uint8_t *b = realloc(c->buf, len);
    if (!b) {
      *err_name = "ENOMEM";
      return 0;
    }
    c->buf = b;
    c->cap = len;
  }
  protobuf_c_message_pack(req, c->buf);
  return len;
}

static void ka_msg(void *arg, const uint8_t *msg, size_t len) {
  struct kstream *k = arg;
  void *user = k->arg;
  if (!user)
    return; /* nothing asked: not ours to count */
  k->arg = NULL;
  Etcdserverpb__LeaseKeepAliveResponse *m =
      etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);
  const char *err = !m ? "BAD_RESPONSE" : m->ttl <= 0 ? "LEASE_NOT_FOUND" : NULL;
  if (m)
    etcdserverpb__lease_keep_alive_response__free_unpacked(m, NULL);
  bench_done(user, err);
}

static void ka_end(void *arg, int status, const char *message, const uint8_t *msg, size_t len) {
  (void)message, (void)msg, (void)len;
  struct kstream *k = arg;
  k->stream = -1;
  void *user = k->arg;
  k->arg = NULL;
  if (user)
    bench_done(user, status ? kt_grpc_status_name(status) : "STREAM_ENDED");
}

static int keepalive(struct econn *c, const struct bench_op *op, void *arg, const char **err_name) {
  int *st = op->client_state ? op->client_state : &c->shared_ks;
  if (*st < 0) {
    if (c->n_ks == c->max_ks) {
      *err_name = "RESOURCE_EXHAUSTED";
      return KT_GRPC_RESOURCE_EXHAUSTED;
    }
    c->ks[c->n_ks] = (struct kstream){c, -1, NULL};
    *st = c->n_ks++;
  }
  struct kstream *k = &c->ks[*st];
  if (k->arg) { /* one keep-alive in flight per stream */
    *err_name = "BUSY";
    return KT_GRPC_RESOURCE_EXHAUSTED;
  }
  int rc = 0;
  if (k->stream < 0)
    rc = kt_grpc_stream_open(c->g, "/etcdserverpb.Lease/LeaseKeepAlive", ka_msg, ka_end, k,
                             &k->stream);
  Etcdserverpb__LeaseKeepAliveRequest r;
  etcdserverpb__lease_keep_alive_request__init(&r);
  r.id = op->lease;
  size_t len = rc ? 0 : pack(c, &r.base, err_name);
  if (!rc && !len)
    return -1;
  if (!rc)
    rc = kt_grpc_stream_send(c->g, k->stream, c->buf, len);
  if (rc) {
    *err_name = kt_grpc_status_name(rc);
    return rc;
  }
  k->arg = arg;
  return 0;
}

static int e_submit(void *conn, const struct bench_op *op, int timeout_ms, void *arg,
                    const char **err_name) {
  struct econn *c = conn;
  if (op->kind == OP_KEEPALIVE)
    return keepalive(c, op, arg, err_name);
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
  Etcdserverpb__LeaseGrantRequest grant;
  if (op->kind == OP_LEASE_GRANT) {
    etcdserverpb__lease_grant_request__init(&grant);
    grant.ttl = op->ttl_s;
    grant.id = op->lease;
    req = &grant.base;
    path = "/etcdserverpb.Lease/LeaseGrant";
    resp = &etcdserverpb__lease_grant_response__descriptor;
  } else if (op->kind == OP_PUT) {
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
  size_t len = pack(c, req, err_name);
  if (!len && protobuf_c_message_get_packed_size(req))
    return -1;
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

static struct ewatch *watch_by_id(struct econn *c, int64_t id) {
  if (id >= 0 && id < c->n_created && c->w[id].id == id) /* etcd numbers them 0, 1, ... */
    return &c->w[id];
  for (int i = 0; i < c->n_created; i++)
    if (c->w[i].id == id)
      return &c->w[i];
  return NULL;
}

static void watch_msg(void *arg, const uint8_t *msg, size_t len) {
  struct econn *c = arg;
  Etcdserverpb__WatchResponse *m = etcdserverpb__watch_response__unpack(NULL, len, msg);
  if (!m) {
    for (int i = 0; i < c->n_w; i++)
      if (!c->w[i].ended)
        c->w[i].ended = true, bench_watch_end(c->w[i].arg, "BAD_RESPONSE");
    return;
  }
  struct ewatch *w = NULL;
  if (m->created && c->n_created < c->n_w) {
    w = &c->w[c->n_created++];
    w->id = m->watch_id;
    bench_watch_created(w->arg);
  } else {
    w = watch_by_id(c, m->watch_id);
  }
  if (w && !w->ended) {
    for (size_t i = 0; i < m->n_events; i++) {
      const Mvccpb__KeyValue *kv = m->events[i]->kv;
      bench_watch_event(w->arg, kv ? (const char *)kv->value.data : "", kv ? kv->value.len : 0);
    }
    if (m->canceled) {
      w->ended = true;
      bench_watch_end(w->arg, "CANCELED");
    }
  }
  etcdserverpb__watch_response__free_unpacked(m, NULL);
}

static void watch_end(void *arg, int status, const char *message, const uint8_t *msg, size_t len) {
  (void)message, (void)msg, (void)len;
  struct econn *c = arg;
  c->wstream = -1;
  for (int i = 0; i < c->n_w; i++)
    if (!c->w[i].ended)
      c->w[i].ended = true,
      bench_watch_end(c->w[i].arg, status ? kt_grpc_status_name(status) : "STREAM_ENDED");
}

static int e_watch(void *conn, const struct bench_watch_req *req, void *arg,
                   const char **err_name) {
  struct econn *c = conn;
  int rc = 0;
  if (c->n_w == c->cap_w) {
    int cap = c->cap_w ? 2 * c->cap_w : 64;
    struct ewatch *w = realloc(c->w, (size_t)cap * sizeof *w);
    if (!w) {
      *err_name = "ENOMEM";
      return -1;
    }
    c->w = w;
    c->cap_w = cap;
  }
  if (c->wstream < 0) {
    if (c->n_w) { /* the stream ended: its watches are gone */
      *err_name = "STREAM_ENDED";
      return -1;
    }
    rc = kt_grpc_stream_open(c->g, "/etcdserverpb.Watch/Watch", watch_msg, watch_end, c,
                             &c->wstream);
  }
  Etcdserverpb__WatchCreateRequest cr;
  etcdserverpb__watch_create_request__init(&cr);
  cr.key.data = (uint8_t *)req->key;
  cr.key.len = req->key_len;
  if (req->end) {
    cr.range_end.data = (uint8_t *)req->end;
    cr.range_end.len = req->end_len;
  }
  Etcdserverpb__WatchRequest wr;
  etcdserverpb__watch_request__init(&wr);
  wr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
  wr.create_request = &cr;
  size_t len = rc ? 0 : pack(c, &wr.base, err_name);
  if (!rc && !len)
    return -1;
  if (!rc)
    rc = kt_grpc_stream_send(c->g, c->wstream, c->buf, len);
  if (rc) {
    *err_name = kt_grpc_status_name(rc);
    return rc;
  }
  c->w[c->n_w++] = (struct ewatch){arg, -1, false};
  return 0;
}

static int e_fd(const void *conn) { return kt_grpc_fd(((const struct econn *)conn)->g); }
static short e_events(const void *conn) { return kt_grpc_events(((const struct econn *)conn)->g); }
static int e_timeout_ms(const void *conn) {
  return kt_grpc_timeout_ms(((const struct econn *)conn)->g);
}
static void e_process(void *conn) { kt_grpc_process(((struct econn *)conn)->g); }

const struct target target_etcd = {"etcd",   e_open,       e_close,   e_submit, e_fd,
                                   e_events, e_timeout_ms, e_process, e_watch};
