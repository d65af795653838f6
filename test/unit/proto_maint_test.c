/* test/unit/proto_maint_test.c — the maintenance messages of the native
 * protocol (ALARM, DEFRAGMENT, HASH_KV, SNAPSHOT): round trips, malformed
 * input, the exact bytes of PROTOCOL.md's examples, and the fuzz seeds
 * (KT_WRITE_CORPUS=test/fuzz/corpus/proto build/test/proto_maint_test
 * write_maint_fuzz_corpus; test/fuzz/corpus/client and
 * write_maint_client_fuzz_corpus for the client target). */
#include "../../net/proto.h"
#include "test.h"

#include <msgpack.h>
#include <stdlib.h>

#define B(s) ((struct kt_bytes){(const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)})

static struct kt_arena arena;

static const struct kt_header hdr = {.cluster_id = 0x1c2d3e4f5a6b7c8dull,
                                     .member_id = 0x8e9f0a1b2c3d4e5full,
                                     .revision = 9,
                                     .raft_term = 2};

/* Encode, decode, re-encode: the same bytes; returns the decoded message. */
static bool rt_req(const struct kt_req *in, struct kt_req *out) {
  static struct kt_buf f; /* out points into it until the next call */
  struct kt_buf g = {0};
  kt_buf_reset(&f);
  kt_proto_encode_req(&f, in);
  struct kt_err e = {0};
  bool ok = kt_proto_decode_req(f.p + 4, f.len - 4, &arena, out, &e) == 0;
  if (!ok)
    fprintf(stderr, "decode: %s\n", e.msg);
  if (ok) {
    kt_proto_encode_req(&g, out);
    ok = g.len == f.len && memcmp(g.p, f.p, f.len) == 0;
  }
  kt_buf_free(&g);
  return ok && out->type == in->type && out->id == in->id;
}

static bool rt_resp(const struct kt_resp *in, struct kt_resp *out) {
  static struct kt_buf f; /* out points into it until the next call */
  struct kt_buf g = {0};
  kt_buf_reset(&f);
  kt_proto_encode_resp(&f, in);
  struct kt_err e = {0};
  bool ok = kt_proto_decode_resp(f.p + 4, f.len - 4, &arena, out, &e) == 0;
  if (!ok)
    fprintf(stderr, "decode: %s\n", e.msg);
  if (ok) {
    kt_proto_encode_resp(&g, out);
    ok = g.len == f.len && memcmp(g.p, f.p, f.len) == 0;
  }
  kt_buf_free(&g);
  return ok && out->type == in->type && out->id == in->id &&
         memcmp(&out->header, &in->header, sizeof in->header) == 0;
}

TEST(maint_requests_round_trip) {
  struct kt_req q = {.type = KT_MSG_ALARM, .id = 1}, o;
  q.u.alarm = (struct kt_alarm_req){KT_ALARM_DEACTIVATE, UINT64_MAX, KT_ALARM_CORRUPT};
  CHECK(rt_req(&q, &o));
  CHECK_EQ(o.u.alarm.action, KT_ALARM_DEACTIVATE);
  CHECK(o.u.alarm.member_id == UINT64_MAX);
  CHECK_EQ(o.u.alarm.alarm, KT_ALARM_CORRUPT);
  q.u.alarm = (struct kt_alarm_req){0};
  CHECK(rt_req(&q, &o));
  CHECK_EQ(o.u.alarm.action, KT_ALARM_GET);
  q = (struct kt_req){.type = KT_MSG_HASH_KV, .id = 2};
  q.u.hash_kv.revision = INT64_MAX;
  CHECK(rt_req(&q, &o));
  CHECK(o.u.hash_kv.revision == INT64_MAX);
  q.u.hash_kv.revision = -5; /* well-formed; the member refuses it */
  CHECK(rt_req(&q, &o));
  CHECK_EQ(o.u.hash_kv.revision, -5);
  q = (struct kt_req){.type = KT_MSG_DEFRAGMENT, .id = 3};
  CHECK(rt_req(&q, &o));
  q = (struct kt_req){.type = KT_MSG_SNAPSHOT, .id = 4};
  CHECK(rt_req(&q, &o));
  CHECK_STR(kt_proto_type_name(KT_MSG_ALARM), "alarm");
  CHECK_STR(kt_proto_type_name(KT_MSG_DEFRAGMENT), "defragment");
  CHECK_STR(kt_proto_type_name(KT_MSG_HASH_KV), "hash_kv");
  CHECK_STR(kt_proto_type_name(KT_MSG_SNAPSHOT), "snapshot");
  kt_arena_reset(&arena);
}

TEST(maint_responses_round_trip) {
  struct kt_alarm_member am[3] = {{1, KT_ALARM_NOSPACE}, {UINT64_MAX, KT_ALARM_CORRUPT}, {0, 0}};
  struct kt_resp r = {.type = KT_MSG_ALARM, .id = 1, .header = hdr}, o;
  r.u.alarm = (struct kt_alarm_resp){am, 3};
  CHECK(rt_resp(&r, &o));
  CHECK_EQ(o.u.alarm.n_alarms, 3);
  CHECK(o.u.alarm.alarms[1].member_id == UINT64_MAX);
  CHECK_EQ(o.u.alarm.alarms[1].alarm, KT_ALARM_CORRUPT);
  r.u.alarm = (struct kt_alarm_resp){0};
  CHECK(rt_resp(&r, &o));
  CHECK_EQ(o.u.alarm.n_alarms, 0);
  r = (struct kt_resp){.type = KT_MSG_HASH_KV, .id = 2, .header = hdr};
  r.u.hash_kv = (struct kt_hash_kv_resp){UINT32_MAX, 77, INT64_MAX};
  CHECK(rt_resp(&r, &o));
  CHECK(o.u.hash_kv.hash == UINT32_MAX && o.u.hash_kv.compact_revision == 77 &&
        o.u.hash_kv.hash_revision == INT64_MAX);
  r = (struct kt_resp){.type = KT_MSG_DEFRAGMENT, .id = 3, .header = hdr};
  CHECK(rt_resp(&r, &o));
  static uint8_t blob[70000];
  for (size_t i = 0; i < sizeof blob; i++)
    blob[i] = (uint8_t)(i * 7);
  r = (struct kt_resp){.type = KT_MSG_SNAPSHOT, .id = 4, .header = hdr};
  r.u.snapshot = (struct kt_snapshot_resp){UINT64_MAX, {blob, sizeof blob}};
  CHECK(rt_resp(&r, &o));
  CHECK(o.u.snapshot.remaining_bytes == UINT64_MAX);
  CHECK(o.u.snapshot.blob.n == sizeof blob && memcmp(o.u.snapshot.blob.p, blob, sizeof blob) == 0);
  r.u.snapshot = (struct kt_snapshot_resp){0};
  CHECK(rt_resp(&r, &o));
  CHECK_EQ(o.u.snapshot.blob.n, 0);
  kt_arena_reset(&arena);
}

/* ---- malformed input ---- */

struct raw {
  struct kt_buf b;
  msgpack_packer pk;
};
static int raw_write(void *data, const char *p, size_t n) {
  kt_buf_append(data, p, n);
  return 0;
}
static void raw_init(struct raw *r, int type, int nfields) {
  memset(r, 0, sizeof *r);
  msgpack_packer_init(&r->pk, &r->b, raw_write);
  msgpack_pack_array(&r->pk, 3);
  msgpack_pack_int(&r->pk, type);
  msgpack_pack_uint64(&r->pk, 7);
  msgpack_pack_map(&r->pk, (size_t)nfields);
}
static void raw_str(struct raw *r, const char *s) {
  msgpack_pack_str(&r->pk, strlen(s));
  msgpack_pack_str_body(&r->pk, s, strlen(s));
}

TEST(maint_malformed_inputs_name_the_field) {
  struct raw r;
  struct kt_req q;
  struct kt_resp o;
  struct kt_err e;
  raw_init(&r, KT_MSG_ALARM, 1);
  raw_str(&r, "action");
  msgpack_pack_int(&r.pk, 3); /* no such action */
  CHECK_EQ(kt_proto_decode_req(r.b.p, r.b.len, &arena, &q, &e), KT_EINVAL);
  CHECK_STR(e.msg, "alarm.action: unknown value 3");
  CHECK_EQ(q.id, 7);
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_ALARM, 1);
  raw_str(&r, "member_id");
  msgpack_pack_int(&r.pk, -1);
  CHECK_EQ(kt_proto_decode_req(r.b.p, r.b.len, &arena, &q, &e), KT_EPROTO);
  CHECK_STR(e.msg, "alarm.member_id: integer out of range");
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_HASH_KV, 1);
  raw_str(&r, "revision");
  raw_str(&r, "5");
  CHECK_EQ(kt_proto_decode_req(r.b.p, r.b.len, &arena, &q, &e), KT_EPROTO);
  CHECK_STR(e.msg, "hash_kv.revision: expected int, got str");
  kt_buf_free(&r.b);
  /* responses */
  raw_init(&r, KT_MSG_ALARM, 1);
  raw_str(&r, "alarms");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 1); /* [member_id] without the alarm */
  msgpack_pack_uint64(&r.pk, 1ull << 40);
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &o, &e), KT_EPROTO);
  CHECK_STR(e.msg, "alarm.alarms[0]: expected [member_id, alarm], got an array of 1");
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_ALARM, 1);
  raw_str(&r, "alarms");
  msgpack_pack_array(&r.pk, 0x7fffffff); /* more than the body holds: no allocation */
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &o, &e), KT_EPROTO);
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_ALARM, 1);
  raw_str(&r, "alarms");
  msgpack_pack_array(&r.pk, 1);
  msgpack_pack_array(&r.pk, 3); /* a longer entry: the rest is skipped */
  msgpack_pack_int(&r.pk, 5);
  msgpack_pack_int(&r.pk, KT_ALARM_NOSPACE);
  raw_str(&r, "future");
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &o, &e), 0);
  CHECK(o.u.alarm.n_alarms == 1 && o.u.alarm.alarms[0].member_id == 5 &&
        o.u.alarm.alarms[0].alarm == KT_ALARM_NOSPACE);
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_HASH_KV, 1);
  raw_str(&r, "hash");
  msgpack_pack_uint64(&r.pk, 1ull << 32); /* hash is 32 bits */
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &o, &e), KT_EPROTO);
  CHECK_STR(e.msg, "hash_kv.hash: integer out of range");
  kt_buf_free(&r.b);
  raw_init(&r, KT_MSG_SNAPSHOT, 1);
  raw_str(&r, "blob");
  msgpack_pack_bin(&r.pk, 100); /* 100 bytes claimed, none there */
  CHECK_EQ(kt_proto_decode_resp(r.b.p, r.b.len, &arena, &o, &e), KT_EPROTO);
  kt_buf_free(&r.b);
  kt_arena_reset(&arena);
}

/* ---- PROTOCOL.md's examples, byte for byte ---- */

#define ALARM_DEACTIVATE_HEX                                                                       \
  "00 00 00 26 93 28 0d 83 a6 61 63 74 69 6f 6e 02 a9 6d 65 6d 62 65 72 5f 69 64 "                 \
  "cf 8e 9f 0a 1b 2c 3d 4e 5f a5 61 6c 61 72 6d 01"
#define ALARM_RESP_HEX                                                                             \
  "00 00 00 33 93 28 0d 82 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 09 02 a6 61 6c 61 72 6d 73 91 92 cf 8e 9f 0a 1b 2c 3d "                 \
  "4e 5f 01"
#define HASH_KV_RESP_HEX                                                                           \
  "00 00 00 4b 93 2e 0e 84 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 09 02 a4 68 61 73 68 ce c1 13 29 56 b0 63 6f 6d 70 61 "                 \
  "63 74 5f 72 65 76 69 73 69 6f 6e 05 ad 68 61 73 68 5f 72 65 76 69 73 69 6f 6e "                 \
  "08"
#define SNAPSHOT_FRAME_HEX                                                                         \
  "00 00 00 42 93 2f 0f 83 a6 68 65 61 64 65 72 94 cf 1c 2d 3e 4f 5a 6b 7c 8d cf "                 \
  "8e 9f 0a 1b 2c 3d 4e 5f 09 02 af 72 65 6d 61 69 6e 69 6e 67 5f 62 79 74 65 73 "                 \
  "cd 01 00 a4 62 6c 6f 62 c4 08 4b 45 54 43 48 53 4e 50"
static char *hex(const struct kt_buf *b) {
  char *s = malloc(b->len * 3 + 1);
  s[0] = 0;
  for (size_t i = 0; i < b->len; i++)
    sprintf(s + 3 * i, "%02x%s", b->p[i], i + 1 < b->len ? " " : "");
  return s;
}

static bool golden(const struct kt_buf *b, const char *want, const char *what) {
  char *h = hex(b);
  bool ok = strcmp(h, want) == 0;
  if (!ok || getenv("KT_PRINT_EXAMPLES"))
    fprintf(stderr, "%s (%zu bytes):\n%s\n", what, b->len, h);
  free(h);
  return ok;
}

static struct kt_alarm_member ex_alarm = {0x8e9f0a1b2c3d4e5full, KT_ALARM_NOSPACE};

TEST(protocol_md_maint_examples_are_exact) {
  struct kt_buf b = {0};
  bool all = true;
  struct kt_req q = {.type = KT_MSG_ALARM, .id = 13};
  q.u.alarm = (struct kt_alarm_req){KT_ALARM_DEACTIVATE, 0x8e9f0a1b2c3d4e5full, KT_ALARM_NOSPACE};
  kt_proto_encode_req(&b, &q);
  all &= golden(&b, ALARM_DEACTIVATE_HEX, "ALARM DEACTIVATE request");
  kt_buf_reset(&b);
  struct kt_resp r = {.type = KT_MSG_ALARM, .id = 13, .header = hdr};
  r.u.alarm = (struct kt_alarm_resp){&ex_alarm, 1};
  kt_proto_encode_resp(&b, &r);
  all &= golden(&b, ALARM_RESP_HEX, "ALARM response");
  kt_buf_reset(&b);
  r = (struct kt_resp){.type = KT_MSG_HASH_KV, .id = 14, .header = hdr};
  r.u.hash_kv = (struct kt_hash_kv_resp){0xc1132956u, 5, 8};
  kt_proto_encode_resp(&b, &r);
  all &= golden(&b, HASH_KV_RESP_HEX, "HASH_KV response");
  kt_buf_reset(&b);
  r = (struct kt_resp){.type = KT_MSG_SNAPSHOT, .id = 15, .header = hdr};
  r.u.snapshot = (struct kt_snapshot_resp){256, B("KETCHSNP")};
  kt_proto_encode_resp(&b, &r);
  all &= golden(&b, SNAPSHOT_FRAME_HEX, "SNAPSHOT frame");
  kt_buf_free(&b);
  CHECK(all);
}

/* Each example is a paragraph of a fenced block of net/PROTOCOL.md. */
TEST(protocol_md_holds_the_maint_examples) {
  FILE *f = fopen("net/PROTOCOL.md", "r");
  if (!f)
    f = fopen("../net/PROTOCOL.md", "r");
  CHECK(f != NULL);
  static char md[1 << 20];
  size_t n = fread(md, 1, sizeof md - 1, f);
  fclose(f);
  md[n] = 0;
  /* join each run of hex lines into one line of single-spaced bytes */
  static char joined[1 << 20];
  size_t o = 0;
  bool prev_hex = false;
  for (char *line = strtok(md, "\n"); line; line = strtok(NULL, "\n")) {
    bool hexline = *line != 0;
    for (const char *c = line; *c && hexline; c++)
      hexline = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == ' ';
    if (hexline) {
      o += (size_t)snprintf(joined + o, sizeof joined - o, "%s%s", prev_hex ? " " : "\n", line);
    }
    prev_hex = hexline;
  }
  const char *want[] = {ALARM_DEACTIVATE_HEX, ALARM_RESP_HEX, HASH_KV_RESP_HEX, SNAPSHOT_FRAME_HEX};
  for (size_t i = 0; i < KT_ARRAY_LEN(want); i++) {
    char needle[600];
    snprintf(needle, sizeof needle, "\n%s\n", want[i]);
    bool found = strstr(joined, needle) != NULL;
    if (!found) {
      snprintf(needle, sizeof needle, "\n%s", want[i]);
      size_t l = strlen(needle);
      found = o >= l && strcmp(joined + o - l, needle) == 0;
    }
    if (!found)
      fprintf(stderr, "not in PROTOCOL.md: %s\n", want[i]);
    CHECK(found);
  }
}

/* ---- fuzz seeds ---- */

/* test/fuzz/client_fuzz.c's pending maintenance requests (ids there). */
#define CF_SNAPSHOT_ID ((9ull << 24) | 8)
#define CF_HASH_ID ((10ull << 24) | 9)
#define CF_ALARM_ID ((11ull << 24) | 10)

static void write_seed(const char *dir, const char *name, const struct kt_buf *b) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(b->p, 1, b->len, f);
    fclose(f);
  }
}

TEST(write_maint_fuzz_corpus) {
  const char *dir = getenv("KT_WRITE_CORPUS");
  if (!dir || !strstr(dir, "proto"))
    return;
  struct kt_buf b = {0};
  struct kt_req q = {.type = KT_MSG_ALARM, .id = 13};
  q.u.alarm = (struct kt_alarm_req){KT_ALARM_ACTIVATE, 42, KT_ALARM_CORRUPT};
  kt_proto_encode_req(&b, &q);
  write_seed(dir, "req_alarm", &b);
  kt_buf_reset(&b);
  q = (struct kt_req){.type = KT_MSG_HASH_KV, .id = 14};
  q.u.hash_kv.revision = 123;
  kt_proto_encode_req(&b, &q);
  write_seed(dir, "req_hash_kv", &b);
  kt_buf_reset(&b);
  q = (struct kt_req){.type = KT_MSG_DEFRAGMENT, .id = 15};
  kt_proto_encode_req(&b, &q);
  write_seed(dir, "req_defragment", &b);
  kt_buf_reset(&b);
  q = (struct kt_req){.type = KT_MSG_SNAPSHOT, .id = 16};
  kt_proto_encode_req(&b, &q);
  write_seed(dir, "req_snapshot", &b);
  kt_buf_reset(&b);
  struct kt_alarm_member am[2] = {{42, KT_ALARM_NOSPACE}, {43, KT_ALARM_CORRUPT}};
  struct kt_resp r = {.type = KT_MSG_ALARM, .id = 13, .header = hdr};
  r.u.alarm = (struct kt_alarm_resp){am, 2};
  kt_proto_encode_resp(&b, &r);
  write_seed(dir, "resp_alarm", &b);
  kt_buf_reset(&b);
  r = (struct kt_resp){.type = KT_MSG_HASH_KV, .id = 14, .header = hdr};
  r.u.hash_kv = (struct kt_hash_kv_resp){0xdeadbeef, 5, 9};
  kt_proto_encode_resp(&b, &r);
  write_seed(dir, "resp_hash_kv", &b);
  kt_buf_reset(&b);
  r = (struct kt_resp){.type = KT_MSG_DEFRAGMENT, .id = 15, .header = hdr};
  kt_proto_encode_resp(&b, &r);
  write_seed(dir, "resp_defragment", &b);
  kt_buf_reset(&b);
  /* a stream: three SNAPSHOT frames */
  for (int i = 0; i < 3; i++) {
    r = (struct kt_resp){.type = KT_MSG_SNAPSHOT, .id = 16, .header = hdr};
    r.u.snapshot = (struct kt_snapshot_resp){(uint64_t)(2 - i) * 8, B("KETCHSNP")};
    kt_proto_encode_resp(&b, &r);
  }
  write_seed(dir, "resp_snapshot_stream", &b);
  kt_buf_free(&b);
}

/* KT_WRITE_CORPUS=test/fuzz/corpus/client build/test/proto_maint_test
 * write_maint_client_fuzz_corpus: answers to client_fuzz's maintenance
 * requests (byte 0 = 1: the harness sends the HELLO). */
TEST(write_maint_client_fuzz_corpus) {
  const char *dir = getenv("KT_WRITE_CORPUS");
  if (!dir || !strstr(dir, "client"))
    return;
  struct kt_buf b = {0};
  uint8_t one = 1;
  kt_buf_append(&b, &one, 1);
  for (int i = 0; i < 3; i++) {
    struct kt_resp r = {.type = KT_MSG_SNAPSHOT, .id = CF_SNAPSHOT_ID, .header = hdr};
    r.u.snapshot = (struct kt_snapshot_resp){(uint64_t)(2 - i) * 8, B("KETCHSNP")};
    kt_proto_encode_resp(&b, &r);
  }
  struct kt_resp r = {.type = KT_MSG_HASH_KV, .id = CF_HASH_ID, .header = hdr};
  r.u.hash_kv = (struct kt_hash_kv_resp){7, 1, 2};
  kt_proto_encode_resp(&b, &r);
  r = (struct kt_resp){.type = KT_MSG_ALARM, .id = CF_ALARM_ID, .header = hdr};
  r.u.alarm = (struct kt_alarm_resp){&ex_alarm, 1};
  kt_proto_encode_resp(&b, &r);
  write_seed(dir, "maint-answered", &b);
  kt_buf_reset(&b);
  kt_buf_append(&b, &one, 1);
  r = (struct kt_resp){.type = KT_MSG_SNAPSHOT, .id = CF_SNAPSHOT_ID, .header = hdr};
  r.u.snapshot = (struct kt_snapshot_resp){100, B("KETCHSNP")};
  kt_proto_encode_resp(&b, &r);
  kt_proto_encode_error(&b, CF_SNAPSHOT_ID, KT_EIO, "snapshot read failed");
  r = (struct kt_resp){.type = KT_MSG_ALARM, .id = CF_SNAPSHOT_ID, .header = hdr};
  kt_proto_encode_resp(&b, &r); /* a stale id: the stream ended */
  write_seed(dir, "snapshot-stream-error", &b);
  kt_buf_free(&b);
}
