/* test/perf/proto_perf.c — encode/decode rates of the native protocol codec.
 *
 *   make perf && build/perf/proto_perf
 *
 * Cases: a PUT request (16-byte key, 256-byte value) and a RANGE response of
 * 100 kvs (16-byte keys, 256-byte values). For comparison, the cost of
 * msgpack-c's msgpack_unpack (object tree into a zone, zero copy) on the same
 * bodies: that is only the first half of a decode built on msgpack-c, the
 * walk of the tree into structs would come on top. One core, no threads;
 * each figure is the best of 3 rounds.
 *
 * Instructions per operation, which a loaded machine does not disturb:
 * `build/perf/proto_perf --calls N` runs each case of icases[] (encode and
 * decode of the common messages) N times in its own function, for
 * test/perf/proto_icount.sh to count under callgrind.
 */
#include "../../net/proto.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile uint64_t sink;

static void report(const char *what, long n, double s, size_t bytes) {
  printf("%-44s %10.0f ops/s %8.1f ns/op %8.1f MB/s\n", what, (double)n / s, s * 1e9 / (double)n,
         (double)bytes * (double)n / s / 1e6);
}

/* Run body() for 3 rounds of about 0.2 s each and report the best round
 * (the machine is shared: the best round is the least disturbed one). */
#define BENCH(what, bytes, body)                                                                   \
  do {                                                                                             \
    long best_n_ = 0;                                                                              \
    double best_t_ = 1;                                                                            \
    for (int r_ = 0; r_ < 3; r_++) {                                                               \
      long n_ = 0;                                                                                 \
      double t0_ = now_s(), t_;                                                                    \
      do {                                                                                         \
        for (int i_ = 0; i_ < 1000; i_++) {                                                        \
          body;                                                                                    \
        }                                                                                          \
        n_ += 1000;                                                                                \
      } while ((t_ = now_s() - t0_) < 0.2);                                                        \
      if ((double)n_ / t_ > (double)best_n_ / best_t_)                                             \
        best_n_ = n_, best_t_ = t_;                                                                \
    }                                                                                              \
    report(what, best_n_, best_t_, bytes);                                                         \
  } while (0)

/* ---- instruction counts (--calls N) ---- */

static uint8_t ic_key[16], ic_end[16], ic_val[256];
static struct kt_req ic_put, ic_range, ic_del, ic_txn;
static struct kt_resp ic_put_r, ic_range_r, ic_del_r, ic_txn_r, ic_watch_r;
static struct kt_buf ic_out;
static struct kt_arena ic_arena;

static void ic_setup(void) {
  memset(ic_key, 'k', sizeof ic_key);
  memset(ic_end, 'k', sizeof ic_end);
  ic_end[15]++;
  memset(ic_val, 'v', sizeof ic_val);
  struct kt_bytes key = {ic_key, sizeof ic_key}, val = {ic_val, sizeof ic_val};
  struct kt_header hdr = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                          .member_id = 0x8e9f0a1b2c3d4e5full,
                          .revision = 200100,
                          .raft_term = 3};
  /* requests: a put with a lease, a range of 10, a delete of a range with
   * prev_kv, a txn (a mod_revision compare, a put on success, a get on
   * failure) */
  ic_put = (struct kt_req){.type = KT_MSG_PUT, .id = 123456};
  ic_put.u.op.type = KT_OP_PUT;
  ic_put.u.op.u.put = (struct kt_put_req){.key = key, .value = val, .lease = 7587862004339286030ll};
  ic_range = (struct kt_req){.type = KT_MSG_RANGE, .id = 123457};
  ic_range.u.op.type = KT_OP_RANGE;
  ic_range.u.op.u.range = (struct kt_range_req){.key = key, .range_end = {ic_end, 16}, .limit = 10};
  ic_del = (struct kt_req){.type = KT_MSG_DELETE, .id = 123458};
  ic_del.u.op.type = KT_OP_DELETE;
  ic_del.u.op.u.del = (struct kt_delete_req){.key = key, .range_end = {ic_end, 16}, .prev_kv = 1};
  static struct kt_compare cmp;
  static struct kt_request_op succ, fail;
  cmp = (struct kt_compare){
      .result = KT_CMP_EQUAL, .target = KT_CMP_MOD, .key = key, .int_value = 200000};
  succ.type = KT_OP_PUT;
  succ.u.put = (struct kt_put_req){.key = key, .value = val};
  fail.type = KT_OP_RANGE;
  fail.u.range = (struct kt_range_req){.key = key};
  ic_txn = (struct kt_req){.type = KT_MSG_TXN, .id = 123459};
  ic_txn.u.op.type = KT_OP_TXN;
  ic_txn.u.op.u.txn = (struct kt_txn_req){.compare = &cmp,
                                          .n_compare = 1,
                                          .success = &succ,
                                          .n_success = 1,
                                          .failure = &fail,
                                          .n_failure = 1};
  /* responses: put, range of 100 kvs, delete of 1, the txn's (a put's), a
   * watch frame of one put event */
  static uint8_t keys[100][16];
  static struct kt_kv kvs[100];
  for (int i = 0; i < 100; i++) {
    memset(keys[i], 'k', 16);
    keys[i][14] = (uint8_t)('0' + i / 10);
    keys[i][15] = (uint8_t)('0' + i % 10);
    kvs[i] = (struct kt_kv){.key = {keys[i], 16},
                            .value = val,
                            .create_revision = 1000 + i,
                            .mod_revision = 200000 + i,
                            .version = 3};
  }
  ic_put_r = (struct kt_resp){.type = KT_MSG_PUT, .id = 123456, .header = hdr};
  ic_put_r.u.op.type = KT_OP_PUT;
  ic_range_r = (struct kt_resp){.type = KT_MSG_RANGE, .id = 99, .header = hdr};
  ic_range_r.u.op.type = KT_OP_RANGE;
  ic_range_r.u.op.u.range = (struct kt_range_resp){.kvs = kvs, .n_kvs = 100, .count = 100};
  ic_del_r = (struct kt_resp){.type = KT_MSG_DELETE, .id = 123458, .header = hdr};
  ic_del_r.u.op.type = KT_OP_DELETE;
  ic_del_r.u.op.u.del = (struct kt_delete_resp){.deleted = 1, .prev_kvs = kvs, .n_prev_kvs = 1};
  static struct kt_response_op txn_put;
  txn_put.type = KT_OP_PUT;
  ic_txn_r = (struct kt_resp){.type = KT_MSG_TXN, .id = 123459, .header = hdr};
  ic_txn_r.u.op.type = KT_OP_TXN;
  ic_txn_r.u.op.u.txn =
      (struct kt_txn_resp){.succeeded = 1, .responses = &txn_put, .n_responses = 1};
  static struct kt_event ev;
  ev = (struct kt_event){.type = KT_EVENT_PUT, .kv = kvs[7]};
  ic_watch_r = (struct kt_resp){.type = KT_MSG_WATCH_CREATE, .id = 77, .header = hdr};
  ic_watch_r.u.watch = (struct kt_watch_resp){.watch_id = 1, .events = &ev, .n_events = 1};
}

/* Each case: its name, req or resp, the message. An encode and a decode
 * function each; the decode reads the body icount() encoded beforehand. */
#define IC_CASES(X)                                                                                \
  X(put_req, req, ic_put)                                                                          \
  X(range_req, req, ic_range)                                                                      \
  X(delete_req, req, ic_del)                                                                       \
  X(txn_req, req, ic_txn)                                                                          \
  X(put_resp, resp, ic_put_r)                                                                      \
  X(range100_resp, resp, ic_range_r)                                                               \
  X(delete_resp, resp, ic_del_r)                                                                   \
  X(txn_resp, resp, ic_txn_r) X(watch_event, resp, ic_watch_r)

#define IC_FUNCS(name, kind, x)                                                                    \
  static struct kt_buf ic_body_##name;                                                             \
  static __attribute__((noinline)) void ic_##name##_encode(long n) {                               \
    for (long i = 0; i < n; i++) {                                                                 \
      kt_buf_reset(&ic_out);                                                                       \
      kt_proto_encode_##kind(&ic_out, &x);                                                         \
    }                                                                                              \
  }                                                                                                \
  static __attribute__((noinline)) void ic_##name##_decode(long n) {                               \
    for (long i = 0; i < n; i++) {                                                                 \
      struct kt_##kind r;                                                                          \
      struct kt_err e;                                                                             \
      const struct kt_buf *b = &ic_body_##name;                                                    \
      sink += (uint64_t)kt_proto_decode_##kind(b->p + 4, b->len - 4, &ic_arena, &r, &e);           \
      kt_arena_reset(&ic_arena);                                                                   \
    }                                                                                              \
  }
IC_CASES(IC_FUNCS)

#define IC_ENTRY(name, kind, x) ic_##name##_encode, ic_##name##_decode,
static void (*const icases[])(long) = {IC_CASES(IC_ENTRY)};
#define IC_BODY(name, kind, x) kt_proto_encode_##kind(&ic_body_##name, &x);

static int icount(long n) {
  ic_setup();
  IC_CASES(IC_BODY)
  kt_buf_reserve(&ic_out, 1 << 16); /* the buffer and the arena at their size */
  kt_arena_alloc(&ic_arena, 1 << 15);
  kt_arena_reset(&ic_arena);
  for (size_t i = 0; i < sizeof icases / sizeof icases[0]; i++)
    icases[i](n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--calls") == 0)
    return icount(atol(argv[2]));
  uint8_t key[16], val[256];
  memset(key, 'k', sizeof key);
  memset(val, 'v', sizeof val);
  struct kt_arena arena = {0};
  struct kt_err e;

  /* PUT request */
  struct kt_req put = {.type = KT_MSG_PUT, .id = 123456};
  put.u.op.type = KT_OP_PUT;
  put.u.op.u.put.key = (struct kt_bytes){key, sizeof key};
  put.u.op.u.put.value = (struct kt_bytes){val, sizeof val};
  put.u.op.u.put.lease = 7587862004339286030ll;
  struct kt_buf b = {0};
  kt_proto_encode_req(&b, &put);
  size_t put_len = b.len;
  printf("PUT frame: %zu bytes\n", put_len);
  BENCH("encode PUT request (frame)", put_len, {
    kt_buf_reset(&b);
    kt_proto_encode_req(&b, &put);
  });
  BENCH("decode PUT request (kt_proto_decode_req)", put_len, {
    struct kt_req r;
    kt_proto_decode_req(b.p + 4, b.len - 4, &arena, &r, &e);
    sink += r.u.op.u.put.value.n;
    kt_arena_reset(&arena);
  });
  msgpack_zone zone;
  msgpack_zone_init(&zone, 2048);
  BENCH("msgpack_unpack PUT body (tree only)", put_len, {
    msgpack_object obj;
    size_t off = 0;
    msgpack_unpack((const char *)b.p + 4, b.len - 4, &off, &zone, &obj);
    sink += obj.type;
    msgpack_zone_clear(&zone);
  });

  /* RANGE response, 100 kvs */
  static uint8_t keys[100][16];
  struct kt_kv kvs[100];
  for (int i = 0; i < 100; i++) {
    memset(keys[i], 'k', 16);
    keys[i][14] = (uint8_t)('0' + i / 10);
    keys[i][15] = (uint8_t)('0' + i % 10);
    kvs[i] = (struct kt_kv){.key = {keys[i], 16},
                            .value = {val, sizeof val},
                            .create_revision = 1000 + i,
                            .mod_revision = 200000 + i,
                            .version = 3,
                            .lease = 0};
  }
  struct kt_resp rr = {.type = KT_MSG_RANGE, .id = 99};
  rr.header = (struct kt_header){.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                 .member_id = 0x8e9f0a1b2c3d4e5full,
                                 .revision = 200100,
                                 .raft_term = 3};
  rr.u.op.type = KT_OP_RANGE;
  rr.u.op.u.range = (struct kt_range_resp){.kvs = kvs, .n_kvs = 100, .count = 100};
  kt_buf_reset(&b);
  kt_proto_encode_resp(&b, &rr);
  size_t range_len = b.len;
  printf("RANGE response frame (100 kvs): %zu bytes\n", range_len);
  BENCH("encode RANGE response, 100 kvs", range_len, {
    kt_buf_reset(&b);
    kt_proto_encode_resp(&b, &rr);
  });
  BENCH("decode RANGE response, 100 kvs", range_len, {
    struct kt_resp r;
    kt_proto_decode_resp(b.p + 4, b.len - 4, &arena, &r, &e);
    sink += r.u.op.u.range.n_kvs;
    kt_arena_reset(&arena);
  });
  BENCH("msgpack_unpack RANGE body (tree only)", range_len, {
    msgpack_object obj;
    size_t off = 0;
    msgpack_unpack((const char *)b.p + 4, b.len - 4, &off, &zone, &obj);
    sink += obj.type;
    msgpack_zone_clear(&zone);
  });
  msgpack_zone_destroy(&zone);
  kt_buf_free(&b);
  kt_arena_free(&arena);
  return 0;
}
