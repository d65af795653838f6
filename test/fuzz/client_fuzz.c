/* test/fuzz/client_fuzz.c — libketch reading arbitrary bytes from a "server".
 *
 * A real loopback listener accepts the client's connection and writes the
 * input to it: byte 0 selects whether a valid HELLO response comes first
 * (bit 0 set) or the input must carry its own; the rest is the raw stream.
 * Seven requests of every type are pending (ids (n << 24) | slot, slots 0..6
 * in submission order: get, range, put, delete, txn, status, compact), then
 * a lease time-to-live with keys (slot 7, id (8 << 24) | 7) and one watch
 * (its stream id, taken when it is sent after the HELLO: (1 << 62) |
 * (12 << 24) | 0), a snapshot stream (slot 8, id (9 << 24) | 8), a hash-kv
 * (slot 9, id (10 << 24) | 9) and an alarm list (slot 10, id (11 << 24) |
 * 10), so
 * inputs can answer them, answer them wrongly, or break the framing. The
 * callbacks read every byte of every result. Whatever arrives, the client must
 * neither crash nor read out of bounds; pending requests end at close.
 *
 * Corpus: test/fuzz/corpus/client/, written by client_test's
 * write_client_fuzz_corpus when KT_WRITE_CORPUS=1. */
#include "../../client/ketch.h"
#include "../../core/base.h"
#include "../../net/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint64_t sink;

static void touch_kv(const ketch_kv *kv) {
  for (size_t i = 0; i < kv->key_len; i++)
    sink += (uint8_t)kv->key[i];
  for (size_t i = 0; i < kv->value_len; i++)
    sink += (uint8_t)kv->value[i];
  sink += (uint64_t)(kv->create_revision + kv->mod_revision + kv->version + kv->lease);
}

static void touch_op(const ketch_op_result *o) {
  switch (o->type) {
  case KETCH_OP_RANGE:
    for (size_t i = 0; i < o->range.n_kvs; i++)
      touch_kv(&o->range.kvs[i]);
    break;
  case KETCH_OP_PUT:
    if (o->put.prev_kv)
      touch_kv(o->put.prev_kv);
    break;
  case KETCH_OP_DELETE:
    for (size_t i = 0; i < o->del.n_prev_kvs; i++)
      touch_kv(&o->del.prev_kvs[i]);
    break;
  case KETCH_OP_TXN:
    for (size_t i = 0; i < o->txn.n_responses; i++)
      touch_op(&o->txn.responses[i]);
    break;
  }
}

static void cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  sink += (uint64_t)err + strlen(res->message);
  if (res->type == KETCH_OP_WATCH) {
    sink += (uint64_t)res->watch.compact_revision + res->watch.created + res->watch.canceled;
    for (size_t i = 0; i < res->watch.n_events; i++) {
      touch_kv(&res->watch.events[i].kv);
      if (res->watch.events[i].prev_kv)
        touch_kv(res->watch.events[i].prev_kv);
    }
    return;
  }
  if (err)
    return;
  if (res->type == KETCH_OP_SNAPSHOT) {
    const uint8_t *p = res->snapshot.blob;
    for (size_t i = 0; i < res->snapshot.blob_len; i++)
      sink += p[i];
    sink += res->snapshot.remaining_bytes;
    return;
  }
  if (res->type == KETCH_OP_ALARM) {
    for (size_t i = 0; i < res->alarm.n_alarms; i++)
      sink += res->alarm.alarms[i].member_id + (uint64_t)res->alarm.alarms[i].alarm;
    return;
  }
  if (res->type == KETCH_OP_HASH_KV) {
    sink += res->hash_kv.hash + (uint64_t)res->hash_kv.compact_revision +
            (uint64_t)res->hash_kv.hash_revision;
    return;
  }
  if (res->type >= KETCH_OP_LEASE_GRANT && res->type <= KETCH_OP_LEASE_LEASES) {
    for (size_t i = 0; i < res->lease.n_keys; i++)
      touch_kv(&res->lease.keys[i]);
    for (size_t i = 0; i < res->lease.n_leases; i++)
      sink += (uint64_t)res->lease.leases[i];
    return;
  }
  if (res->type == KETCH_OP_STATUS) {
    sink += strlen(res->status.version);
    for (size_t i = 0; i < res->status.n_errors; i++)
      sink += strlen(res->status.errors[i]);
    return;
  }
  if (res->type >= KETCH_OP_RANGE && res->type <= KETCH_OP_TXN) {
    ketch_op_result o;
    memset(&o, 0, sizeof o);
    o.type = res->type;
    if (res->type == KETCH_OP_RANGE)
      o.range = res->range;
    else if (res->type == KETCH_OP_PUT)
      o.put = res->put;
    else if (res->type == KETCH_OP_DELETE)
      o.del = res->del;
    else
      o.txn = res->txn;
    touch_op(&o);
  }
}

static int lfd = -1;
static char ep[64];

static void listen_once(void) {
  if (lfd >= 0)
    return;
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 64) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0)
    kt_panic(__FILE__, __LINE__, "listener");
  snprintf(ep, sizeof ep, "127.0.0.1:%d", ntohs(a.sin_port));
}

static void drain_accepts(void) {
  int fd;
  while ((fd = accept(lfd, NULL, NULL)) >= 0)
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 256 * 1024)
    return 0;
  listen_once();
  ketch_options o = {.nonblocking_open = true, .request_timeout_ms = 2000, .dial_timeout_ms = 2000};
  ketch_client *c;
  if (ketch_open(&c, ep, &o, NULL, 0) != 0)
    return 0;
  ketch_get_async(c, "k", 1, cb, NULL);
  ketch_range_req rq = {.key = "a", .key_len = 1, .prefix = true};
  ketch_range_async(c, &rq, cb, NULL);
  ketch_put_req pq = {.key = "k", .key_len = 1, .value = "v", .value_len = 1, .prev_kv = true};
  ketch_put_async(c, &pq, cb, NULL);
  ketch_delete_req dq = {.key = "k", .key_len = 1, .prev_kv = true};
  ketch_delete_async(c, &dq, cb, NULL);
  ketch_op ops[] = {ketch_op_range(rq), ketch_op_put(pq)};
  ketch_txn_req tq = {.success = ops, .n_success = 2, .failure = ops, .n_failure = 1};
  ketch_txn_async(c, &tq, cb, NULL);
  ketch_status_async(c, cb, NULL);
  ketch_compact_async(c, 5, false, cb, NULL);
  ketch_lease_timetolive_async(c, 5, true, cb, NULL);
  ketch_watch_req wq = {
      .key = "a", .key_len = 1, .prefix = true, .prev_kv = true, .fragment = true};
  uint64_t wh;
  ketch_watch(c, &wq, cb, NULL, &wh);
  ketch_snapshot_async(c, cb, NULL);
  ketch_hash_kv_async(c, 0, cb, NULL);
  ketch_alarm_async(c, KETCH_ALARM_GET, 0, KETCH_ALARM_NONE, cb, NULL);

  int afd = -1;
  for (int i = 0; i < 1000 && afd < 0; i++) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    poll(&p, p.fd >= 0, 1);
    ketch_process(c);
    afd = accept(lfd, NULL, NULL);
  }
  if (afd >= 0) {
    struct kt_buf out = {0};
    if (data[0] & 1) {
      struct kt_resp h;
      memset(&h, 0, sizeof h);
      h.type = KT_MSG_HELLO;
      h.u.hello.version = KT_PROTO_VERSION;
      h.u.hello.server = (struct kt_bytes){(const uint8_t *)"fuzz", 4};
      h.u.hello.cluster_id = 1;
      h.u.hello.member_id = 2;
      h.u.hello.max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES;
      kt_proto_encode_resp(&out, &h);
    }
    kt_buf_append(&out, data + 1, size - 1);
    size_t off = 0;
    int idle = 0;
    /* write while the client reads, until all is written and the client
     * has nothing left to read */
    for (int i = 0; i < 20000 && idle < 3; i++) {
      if (off < out.len) {
        ssize_t n = send(afd, out.p + off, out.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
          off += (size_t)n;
        else if (n < 0 && errno != EAGAIN)
          off = out.len;
      }
      struct pollfd p = {ketch_fd(c), POLLIN, 0};
      int ready = p.fd >= 0 ? poll(&p, 1, off < out.len ? 1 : 5) : 0;
      ketch_process(c);
      idle = (off >= out.len && ready <= 0) ? idle + 1 : 0;
    }
    kt_buf_free(&out);
    close(afd);
  }
  ketch_close(c);
  drain_accepts();
  return 0;
}
