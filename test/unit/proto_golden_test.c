/* test/unit/proto_golden_test.c — the native protocol's bytes never change
 * by accident: for every message type, in both directions, a frame with
 * every field set (and nested forms: txns in txns, every compare target,
 * events with and without prev_kv) and a frame with every field zero are
 * encoded and compared with test/unit/proto_golden.txt, a file written by
 * the codec as it was before the schema-driven rewrite (issue 22); each
 * golden frame must also decode and encode back to the same bytes.
 *
 *   KT_GOLDEN_WRITE=test/unit/proto_golden.txt build/test/proto_golden_test
 * rewrites the file (only when the wire format is meant to change, with a
 * PROTOCOL.md change in the same commit). */
#include <stdlib.h>

#include "../../core/auth.h"
#include "../../net/proto.h"
#include "test.h"

#define B(s) ((struct kt_bytes){(const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)})
#define GOLDEN "test/unit/proto_golden.txt"

static struct kt_kv kv1 = {B("key-1"), B("value-1"), 3, 9, 4, 0x694d77d1a3f0c207};
static struct kt_kv kv2 = {B("k2"), B(""), 5, 5, 1, 0};
static struct kt_kv kvs[2];
static struct kt_bytes urls[2] = {B("http://10.0.0.1:2480"), B("https://10.0.0.1:2481")};
static struct kt_bytes curls[1] = {B("http://10.0.0.1:2479")};
static struct kt_member_info members[2];
static struct kt_bytes auth_names[2] = {B("alice"), B("root")};
static struct kt_auth_perm auth_perms[2] = {{KT_PERM_READ, B("/a/"), B("/a0")},
                                            {KT_PERM_WRITE, B("k"), {0}}};
static struct kt_compare cmps[5];
static struct kt_request_op inner_ops[3], succ_ops[4], fail_ops[1];
static struct kt_response_op inner_resps[2], resps[4];
static struct kt_event events[3];
static struct kt_bytes errs[2] = {B("memberID:1 alarm:NOSPACE"), B("disk full")};
static struct kt_bytes lease_keys[2] = {B("a"), B("b/c")};
static int64_t lease_ids[3] = {1, 0x694d77d1a3f0c207, 7};
static struct kt_alarm_member alarms[2] = {{0x8e9f0a1b2c3d4e5f, KT_ALARM_NOSPACE},
                                           {1, KT_ALARM_CORRUPT}};
static const struct kt_header hdr = {0x1c2d3e4f5a6b7c8d, 0x8e9f0a1b2c3d4e5f, 123456, 7};
static const struct kt_leader_key leader = {B("election"), B("election/694d77d1a3f0c207"), 42,
                                            0x694d77d1a3f0c207};

static void setup(void) {
  kvs[0] = kv1;
  kvs[1] = kv2;
  members[0] = (struct kt_member_info){1, B("m1"), urls, curls, 2, 1, false};
  members[1] = (struct kt_member_info){0xffffffffffffffffull, B(""), urls, NULL, 1, 0, true};
  cmps[0] = (struct kt_compare){KT_CMP_EQUAL, KT_CMP_VERSION, B("a"), {0}, 3, {0}};
  cmps[1] = (struct kt_compare){KT_CMP_GREATER, KT_CMP_CREATE, B("a"), B("b"), 4, {0}};
  cmps[2] = (struct kt_compare){KT_CMP_LESS, KT_CMP_MOD, B("\0"), B("\0"), -5, {0}};
  cmps[3] = (struct kt_compare){KT_CMP_NOT_EQUAL, KT_CMP_VALUE, B("v"), {0}, 0, B("xyz")};
  cmps[4] = (struct kt_compare){KT_CMP_EQUAL, KT_CMP_LEASE, B("l"), {0}, 0x694d77d1a3f0c207, {0}};
  inner_ops[0] = (struct kt_request_op){.type = KT_OP_PUT, .u.put = {B("n"), B("nv"), 0, true}};
  inner_ops[1] = (struct kt_request_op){.type = KT_OP_DELETE, .u.del = {B("d"), B("e"), true}};
  inner_ops[2] = (struct kt_request_op){.type = KT_OP_RANGE, .u.range = {.key = B("r")}};
  succ_ops[0] = (struct kt_request_op){.type = KT_OP_RANGE,
                                       .u.range = {B("a"), B("z"), 10, 5, KT_SORT_DESCEND,
                                                   KT_SORT_VALUE, true, true, false, 1, 2, 3, 4}};
  succ_ops[1] = (struct kt_request_op){
      .type = KT_OP_PUT, .u.put = {B("p"), B("pv"), 0x694d77d1a3f0c207, true, false, false}};
  succ_ops[2] = (struct kt_request_op){.type = KT_OP_DELETE, .u.del = {B("d"), {0}, false}};
  succ_ops[3] = (struct kt_request_op){
      .type = KT_OP_TXN, .u.txn = {cmps + 3, 1, inner_ops, inner_ops + 2, 2, 1}}; /* a nested txn */
  fail_ops[0] = (struct kt_request_op){.type = KT_OP_RANGE, .u.range = {.key = B("f")}};
  inner_resps[0] = (struct kt_response_op){.type = KT_OP_PUT};
  inner_resps[1] = (struct kt_response_op){.type = KT_OP_DELETE, .u.del = {1, kvs, 1}};
  resps[0] =
      (struct kt_response_op){.type = KT_OP_RANGE, .u.range = {kvs, 2, true, 2}}; /* in a txn */
  resps[1] = (struct kt_response_op){.type = KT_OP_PUT, .u.put = {true, kv1}};
  resps[2] = (struct kt_response_op){.type = KT_OP_DELETE, .u.del = {0, NULL, 0}};
  resps[3] = (struct kt_response_op){.type = KT_OP_TXN, .u.txn = {true, inner_resps, 2}};
  events[0] = (struct kt_event){.type = KT_EVENT_PUT, .kv = kv1};
  events[1] = (struct kt_event){KT_EVENT_PUT, kv2, true, kv1};
  events[2] = (struct kt_event){KT_EVENT_DELETE, {B("key-1"), {0}, 0, 10, 0, 0}, true, kv1};
}

/* Every request message, full and zero. */
static int build_req(int i, struct kt_req *r, const char **name) {
  memset(r, 0, sizeof *r);
  r->id = 0x1234567 + (uint64_t)i;
#define CASE(nm, t, ...)                                                                           \
  if (k++ == i) {                                                                                  \
    *name = nm;                                                                                    \
    r->type = t;                                                                                   \
    __VA_ARGS__;                                                                                   \
    return 1;                                                                                      \
  }
  int k = 0;
  CASE("req hello", KT_MSG_HELLO,
       r->u.hello = (struct kt_hello_req){.version = 1, .client = B("libketch/0.1.0")});
  CASE("req hello zero", KT_MSG_HELLO, r->id = 0);
  CASE("req range", KT_MSG_RANGE, r->u.op = succ_ops[0]);
  CASE("req range zero", KT_MSG_RANGE, r->u.op.type = KT_OP_RANGE);
  CASE("req range neg", KT_MSG_RANGE,
       r->u.op = (struct kt_request_op){.type = KT_OP_RANGE,
                                        .u.range = {.key = B("k"), .limit = -1, .revision = -7}});
  CASE("req put", KT_MSG_PUT,
       r->u.op = (struct kt_request_op){
           .type = KT_OP_PUT, .u.put = {B("foo"), B("bar"), 0x694d77d1a3f0c207, true, true, true}});
  CASE("req put zero", KT_MSG_PUT, r->u.op.type = KT_OP_PUT);
  CASE("req delete", KT_MSG_DELETE,
       r->u.op = (struct kt_request_op){.type = KT_OP_DELETE, .u.del = {B("a"), B("b"), true}});
  CASE("req delete zero", KT_MSG_DELETE, r->u.op.type = KT_OP_DELETE);
  CASE("req txn", KT_MSG_TXN,
       r->u.op =
           (struct kt_request_op){.type = KT_OP_TXN, .u.txn = {cmps, 5, succ_ops, fail_ops, 4, 1}});
  CASE("req txn zero", KT_MSG_TXN, r->u.op.type = KT_OP_TXN);
  CASE("req compact", KT_MSG_COMPACT, r->u.compact = (struct kt_compact_req){99, true});
  CASE("req compact zero", KT_MSG_COMPACT, (void)0);
  CASE("req status", KT_MSG_STATUS, (void)0);
  CASE("req member_list", KT_MSG_MEMBER_LIST, (void)0);
  CASE("req watch_progress", KT_MSG_WATCH_PROGRESS, (void)0);
  CASE("req member_publish", KT_MSG_MEMBER_PUBLISH,
       r->u.publish = (struct kt_member_publish_req){0x8e9f0a1b2c3d4e5f, B("m1"), urls, 2});
  CASE("req member_publish zero", KT_MSG_MEMBER_PUBLISH, (void)0);
  static const uint8_t mtypes[] = {KT_MSG_MEMBER_ADD, KT_MSG_MEMBER_REMOVE, KT_MSG_MEMBER_UPDATE,
                                   KT_MSG_MEMBER_PROMOTE};
  for (size_t t = 0; t < sizeof mtypes; t++) {
    CASE("req member change", mtypes[t],
         r->u.member = (struct kt_member_change_req){0x8e9f0a1b2c3d4e5f, B("n4"), urls, 2, true});
    CASE("req member change zero", mtypes[t], (void)0);
  }
  CASE("req move_leader", KT_MSG_MOVE_LEADER, r->u.move_leader.target_id = 0x8e9f0a1b2c3d4e5f);
  CASE("req move_leader zero", KT_MSG_MOVE_LEADER, (void)0);
  CASE("req watch_create", KT_MSG_WATCH_CREATE,
       r->u.watch_create =
           (struct kt_watch_create_req){B("foo"), B("fop"), 9, true, true, true, true, true});
  CASE("req watch_create zero", KT_MSG_WATCH_CREATE, (void)0);
  CASE("req watch_cancel", KT_MSG_WATCH_CANCEL, r->u.watch_cancel.watch_id = 3);
  CASE("req watch_cancel zero", KT_MSG_WATCH_CANCEL, (void)0);
  for (uint8_t t = KT_MSG_LEASE_GRANT; t <= KT_MSG_LEASE_LEASES; t++) {
    CASE("req lease", t, r->u.lease = (struct kt_lease_req){0x694d77d1a3f0c207, 60, true});
    CASE("req lease zero", t, (void)0);
  }
  for (uint8_t t = KT_MSG_LOCK; t <= KT_MSG_RESIGN; t++) {
    CASE("req lock", t,
         r->u.lock = (struct kt_lock_req){B("name"), B("name/1"), B("val"), 77, leader});
    CASE("req lock zero", t, (void)0);
  }
  CASE("req alarm", KT_MSG_ALARM,
       r->u.alarm =
           (struct kt_alarm_req){KT_ALARM_DEACTIVATE, 0x8e9f0a1b2c3d4e5f, KT_ALARM_NOSPACE});
  CASE("req alarm zero", KT_MSG_ALARM, (void)0);
  CASE("req defragment", KT_MSG_DEFRAGMENT, (void)0);
  CASE("req hash_kv", KT_MSG_HASH_KV, r->u.hash_kv.revision = 8);
  CASE("req hash_kv zero", KT_MSG_HASH_KV, (void)0);
  CASE("req snapshot", KT_MSG_SNAPSHOT, (void)0);
  /* added after the schema rewrite (appended: the earlier frames keep their ids) */
  CASE("req hello identity", KT_MSG_HELLO,
       r->u.hello = (struct kt_hello_req){1, B("ketch-grpc/0.1.0"), B("alice")});
  for (uint8_t t = KT_MSG_AUTH_ENABLE; t <= KT_MSG_ROLE_REVOKE_PERMISSION; t++) {
    CASE("req auth", t,
         r->u.auth = (struct kt_auth_req){B("alice"), B("pw"), B("$argon2id$v=19$x"), B("tok"),
                                          B("ra"), true, KT_PERM_READWRITE, B("/a/"), B("/a0")});
    CASE("req auth zero", t, (void)0);
  }
  CASE("req authed", KT_MSG_AUTHED,
       r->u.authed = (struct kt_authed_req){B("alice"), 7, B("\x93\x02\x01\x80"), false});
  CASE("req authed member", KT_MSG_AUTHED,
       r->u.authed = (struct kt_authed_req){.body = B("\x93\x02\x01\x80"), .member = true});
  CASE("req authed zero", KT_MSG_AUTHED, (void)0);
  CASE("req auth_check", KT_MSG_AUTH_CHECK,
       r->u.auth_check = (struct kt_auth_check_req){B("/a/"), B("/a0")});
  CASE("req auth_check zero", KT_MSG_AUTH_CHECK, (void)0);
  return 0;
}

static int build_resp(int i, struct kt_resp *r, const char **name) {
  memset(r, 0, sizeof *r);
  r->id = 0x7654321 + (uint64_t)i;
  r->header = hdr;
  int k = 0;
  CASE("resp hello", KT_MSG_HELLO,
       r->u.hello = (struct kt_hello_resp){1, B("ketch 0.1.0"), 0x1c2d3e4f5a6b7c8d,
                                           0x8e9f0a1b2c3d4e5f, 1572864});
  CASE("resp hello zero", KT_MSG_HELLO, r->header = (struct kt_header){0});
  CASE("resp range", KT_MSG_RANGE, r->u.op = resps[0]);
  CASE("resp range zero", KT_MSG_RANGE,
       (r->u.op.type = KT_OP_RANGE, r->header = (struct kt_header){0}));
  CASE("resp put", KT_MSG_PUT, r->u.op = resps[1]);
  CASE("resp put zero", KT_MSG_PUT, r->u.op.type = KT_OP_PUT);
  CASE("resp delete", KT_MSG_DELETE,
       r->u.op = (struct kt_response_op){.type = KT_OP_DELETE, .u.del = {2, kvs, 2}});
  CASE("resp delete zero", KT_MSG_DELETE, r->u.op.type = KT_OP_DELETE);
  CASE("resp txn", KT_MSG_TXN,
       r->u.op = (struct kt_response_op){.type = KT_OP_TXN, .u.txn = {true, resps, 4}});
  CASE("resp txn zero", KT_MSG_TXN, r->u.op.type = KT_OP_TXN);
  CASE("resp compact", KT_MSG_COMPACT, (void)0);
  CASE("resp move_leader", KT_MSG_MOVE_LEADER, (void)0);
  CASE("resp watch_cancel", KT_MSG_WATCH_CANCEL, (void)0);
  CASE("resp watch_progress", KT_MSG_WATCH_PROGRESS, (void)0);
  CASE("resp watch created", KT_MSG_WATCH_CREATE,
       r->u.watch = (struct kt_watch_resp){.watch_id = 3, .created = true});
  CASE("resp watch events", KT_MSG_WATCH_CREATE,
       r->u.watch = (struct kt_watch_resp){
           .watch_id = 3, .fragment = true, .events = events, .n_events = 3});
  CASE(
      "resp watch canceled", KT_MSG_WATCH_CREATE,
      r->u.watch = (struct kt_watch_resp){
          .watch_id = 3, .canceled = true, .compact_revision = 5, .cancel_reason = B("compacted")});
  CASE("resp watch zero", KT_MSG_WATCH_CREATE, (void)0);
  for (uint8_t t = KT_MSG_LOCK; t <= KT_MSG_RESIGN; t++) {
    CASE("resp lock", t, r->u.lock = (struct kt_lock_resp){B("name/1"), leader, true, kv1});
    CASE("resp lock zero", t, (void)0);
  }
  for (uint8_t t = KT_MSG_LEASE_GRANT; t <= KT_MSG_LEASE_LEASES; t++) {
    CASE("resp lease", t,
         r->u.lease =
             (struct kt_lease_resp){0x694d77d1a3f0c207, -1, 60, lease_keys, 2, lease_ids, 3});
    CASE("resp lease zero", t, (void)0);
  }
  CASE("resp member_list", KT_MSG_MEMBER_LIST,
       r->u.member_list = (struct kt_member_list_resp){members, 2});
  CASE("resp member_list zero", KT_MSG_MEMBER_LIST, (void)0);
  static const uint8_t mtypes[] = {KT_MSG_MEMBER_ADD, KT_MSG_MEMBER_REMOVE, KT_MSG_MEMBER_UPDATE,
                                   KT_MSG_MEMBER_PROMOTE};
  for (size_t t = 0; t < sizeof mtypes; t++) {
    CASE("resp member change", mtypes[t],
         r->u.member = (struct kt_member_change_resp){members[0], members, 2});
    CASE("resp member change zero", mtypes[t], (void)0);
  }
  CASE("resp status", KT_MSG_STATUS,
       r->u.status =
           (struct kt_status_resp){B("0.1.0"), 1 << 20, 1 << 19, 2, 900, 7, 899, true, errs, 2});
  CASE("resp status zero", KT_MSG_STATUS, (void)0);
  CASE("resp alarm", KT_MSG_ALARM, r->u.alarm = (struct kt_alarm_resp){alarms, 2});
  CASE("resp alarm zero", KT_MSG_ALARM, (void)0);
  CASE("resp defragment", KT_MSG_DEFRAGMENT, (void)0);
  CASE("resp hash_kv", KT_MSG_HASH_KV, r->u.hash_kv = (struct kt_hash_kv_resp){0xc1132956, 5, 8});
  CASE("resp hash_kv zero", KT_MSG_HASH_KV, (void)0);
  CASE("resp snapshot", KT_MSG_SNAPSHOT,
       r->u.snapshot = (struct kt_snapshot_resp){256, B("KTSNAP\0\1")});
  CASE("resp snapshot zero", KT_MSG_SNAPSHOT, (void)0);
  CASE("resp error", KT_MSG_ERROR,
       (r->header = (struct kt_header){0},
        r->u.error = (struct kt_error_msg){6, B("mvcc: required revision has been compacted")}));
  CASE("resp error zero", KT_MSG_ERROR, r->header = (struct kt_header){0});
  /* added after the schema rewrite (appended: the earlier frames keep their ids) */
  for (uint8_t t = KT_MSG_AUTH_ENABLE; t <= KT_MSG_ROLE_REVOKE_PERMISSION; t++) {
    CASE("resp auth", t,
         r->u.auth = (struct kt_auth_resp){.token = B("kt1.payload.sig"),
                                           .enabled = true,
                                           .auth_revision = 9,
                                           .users = auth_names,
                                           .roles = auth_names,
                                           .n_users = 2,
                                           .n_roles = 2,
                                           .perms = auth_perms,
                                           .n_perms = 2});
    CASE("resp auth zero", t, (void)0);
  }
  CASE("resp auth_check", KT_MSG_AUTH_CHECK, (void)0);
#undef CASE
  return 0;
}

static void hex(const struct kt_buf *b, char *out) {
  for (size_t i = 0; i < b->len; i++)
    sprintf(out + 2 * i, "%02x", b->p[i]);
  out[2 * b->len] = 0;
}

/* All frames as "NN name|hex" lines, in order. */
static char *frames(size_t *n_lines) {
  setup();
  size_t cap = 1 << 20, len = 0;
  char *out = malloc(cap);
  struct kt_buf b = {0};
  char *h = malloc(1 << 16);
  *n_lines = 0;
  for (int dir = 0; dir < 2; dir++)
    for (int i = 0;; i++) {
      struct kt_req rq;
      struct kt_resp rs;
      const char *name;
      kt_buf_reset(&b);
      if (dir == 0 ? !build_req(i, &rq, &name) : !build_resp(i, &rs, &name))
        break;
      if (dir == 0)
        kt_proto_encode_req(&b, &rq);
      else
        kt_proto_encode_resp(&b, &rs);
      kt_assert(2 * b.len + 1 < (1 << 16));
      hex(&b, h);
      len += (size_t)snprintf(out + len, cap - len, "%02d %s (type %d)|%s\n", i, name,
                              dir ? rs.type : rq.type, h);
      kt_assert(len < cap);
      ++*n_lines;
    }
  free(h);
  kt_buf_free(&b);
  return out;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  size_t got = fread(p, 1, (size_t)n, f);
  p[got] = 0;
  fclose(f);
  return p;
}

TEST(every_message_encodes_to_its_golden_bytes) {
  size_t n;
  char *got = frames(&n);
  const char *w = getenv("KT_GOLDEN_WRITE");
  if (w && *w) {
    FILE *f = fopen(w, "wb");
    CHECK(f != NULL);
    fputs(got, f);
    fclose(f);
    fprintf(stderr, "wrote %zu golden frames to %s\n", n, w);
  }
  char *want = read_all(GOLDEN);
  CHECK(want != NULL);
  CHECK(n > 100);
  /* line by line, for a readable failure */
  char *a = got, *b = want;
  for (size_t i = 0; i < n; i++) {
    char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
    CHECK(ea && eb);
    *ea = *eb = 0;
    if (strcmp(a, b) != 0) {
      kt_test_fail(__FILE__, __LINE__, "frame differs:\n  golden  %s\n  encoded %s", b, a);
      free(got);
      free(want);
      return;
    }
    a = ea + 1;
    b = eb + 1;
  }
  CHECK(*b == 0); /* no golden frame left over */
  free(got);
  free(want);
}

static int unhex(const char *s, uint8_t *out) {
  size_t n = strlen(s) / 2;
  for (size_t i = 0; i < n; i++) {
    unsigned x;
    if (sscanf(s + 2 * i, "%2x", &x) != 1)
      return -1;
    out[i] = (uint8_t)x;
  }
  return (int)n;
}

/* Each golden frame decodes (as a request or as a response) and encodes
 * back to the very same bytes. */
TEST(every_golden_frame_decodes_and_encodes_back) {
  char *want = read_all(GOLDEN);
  CHECK(want != NULL);
  uint8_t *bytes = malloc(1 << 15);
  struct kt_buf b = {0};
  struct kt_arena a = {0};
  int checked = 0;
  for (char *line = strtok(want, "\n"); line; line = strtok(NULL, "\n")) {
    char *bar = strchr(line, '|');
    CHECK(bar != NULL);
    int n = unhex(bar + 1, bytes);
    CHECK(n > KT_FRAME_HDR);
    CHECK_EQ(kt_get_u32be(bytes), n - KT_FRAME_HDR);
    struct kt_err e = {0};
    kt_buf_reset(&b);
    kt_arena_reset(&a);
    if (strstr(line, " req ")) {
      struct kt_req r;
      if (kt_proto_decode_req(bytes + KT_FRAME_HDR, (size_t)n - KT_FRAME_HDR, &a, &r, &e)) {
        kt_test_fail(__FILE__, __LINE__, "%.40s: %s", line, e.msg);
        break;
      }
      kt_proto_encode_req(&b, &r);
    } else {
      struct kt_resp r;
      if (kt_proto_decode_resp(bytes + KT_FRAME_HDR, (size_t)n - KT_FRAME_HDR, &a, &r, &e)) {
        kt_test_fail(__FILE__, __LINE__, "%.40s: %s", line, e.msg);
        break;
      }
      kt_proto_encode_resp(&b, &r);
    }
    if (b.len != (size_t)n || memcmp(b.p, bytes, (size_t)n) != 0) {
      kt_test_fail(__FILE__, __LINE__, "%.40s: re-encoded differently", line);
      break;
    }
    checked++;
  }
  CHECK(checked > 100);
  kt_arena_free(&a);
  kt_buf_free(&b);
  free(bytes);
  free(want);
}

/* Whether two decoded AUTHED requests say the same (their bytes point into
 * the same body, so equal pointers and lengths). */
static bool same_authed(const struct kt_req *x, const struct kt_req *y) {
  const struct kt_authed_req *a = &x->u.authed, *b = &y->u.authed;
  return x->type == y->type && x->id == y->id && a->user.n == b->user.n &&
         (!a->user.n || a->user.p == b->user.p) && a->auth_revision == b->auth_revision &&
         a->body.n == b->body.n && (!a->body.n || a->body.p == b->body.p) && a->member == b->member;
}

/* kt_proto_encode_authed (the envelope of every write with auth on) writes
 * what the schema encoder writes, for every size class of every field
 * (fixstr, str8, str16; fixint to uint64; bin8 to bin32); kt_proto_decode_req
 * reads it back as the generic decoder does; and bodies the short cut does
 * not take (an explicit zero, another key order, an unknown field, a
 * truncation) still get the generic decoder's answer. */
TEST(authed_envelope_short_cut_matches_the_schema) {
  static uint8_t big[70000];
  memset(big, 'u', sizeof big);
  const uint32_t user_ns[] = {0, 1, 31, 32, 255, 256, 65535, 65536};
  const uint64_t revs[] = {0,     1,     127,           128,        255,       256,
                           65535, 65536, 0xffffffffull, 1ull << 32, UINT64_MAX};
  const uint32_t body_ns[] = {0, 1, 255, 256, 65535, 65536};
  struct kt_buf slow = {0}, fast = {0};
  struct kt_arena a = {0};
  int n = 0;
  for (size_t u = 0; u < sizeof user_ns / sizeof *user_ns; u++)
    for (size_t r = 0; r < sizeof revs / sizeof *revs; r++)
      for (size_t bo = 0; bo < sizeof body_ns / sizeof *body_ns; bo++)
        for (int m = 0; m < 2; m++) {
          struct kt_req w = {.type = KT_MSG_AUTHED};
          w.u.authed = (struct kt_authed_req){{big, user_ns[u]}, revs[r], {big, body_ns[bo]}, m};
          kt_buf_reset(&slow);
          kt_buf_reset(&fast);
          kt_proto_encode_req_body(&slow, &w);
          kt_buf_append(&fast, "x", 1); /* appends after what is there */
          kt_proto_encode_authed(&fast, &w.u.authed);
          CHECK_EQ(fast.len, slow.len + 1);
          CHECK(memcmp(fast.p + 1, slow.p, slow.len) == 0);
          struct kt_req x, y;
          struct kt_err e = {0};
          kt_arena_reset(&a);
          CHECK_EQ(kt_proto_decode_req(slow.p, slow.len, &a, &x, &e), 0);
          CHECK_EQ(kt_proto_decode_req_generic(slow.p, slow.len, &a, &y, &e), 0);
          CHECK(same_authed(&x, &y));
          CHECK_EQ(x.u.authed.auth_revision, revs[r]);
          CHECK_EQ(x.u.authed.user.n, user_ns[u]);
          CHECK_EQ(x.u.authed.body.n, body_ns[bo]);
          CHECK_EQ(x.u.authed.member, m);
          /* every truncation: the same answer from both */
          for (size_t cut = 0; cut < slow.len && cut < 64; cut++) {
            struct kt_err e1 = {0}, e2 = {0};
            int r1 = kt_proto_decode_req(slow.p, cut, &a, &x, &e1);
            int r2 = kt_proto_decode_req_generic(slow.p, cut, &a, &y, &e2);
            CHECK_EQ(r1, r2);
            CHECK_STR(e1.msg, e2.msg);
          }
          n++;
        }
  CHECK_EQ(n, 8 * 11 * 6 * 2);
  /* shapes only the generic decoder takes, with its answers */
  static const char *odd[] = {
      "93490081a4626f6479c400",                               /* an explicit empty body */
      "93490082a4626f6479c401ffa475736572a161",               /* body before user */
      "93490082a475736572a161ad617574685f7265766973696f6e00", /* revision 0 */
      "93490081ad617574685f7265766973696f6ecc05",             /* revision 5 in a uint8 */
      "93490082a475736572a161a178c0",                         /* an unknown key */
      "93490081a475736572c40161",                             /* user as bin */
      "93490081a475736572c0",                                 /* user nil */
      "93490081a66d656d626572c2",                             /* member false */
      "93490081a66d656d626572c3c0",                           /* a trailing byte */
      "93490180",                                             /* id 1 */
      "93490081a4757365",                                     /* cut in a key */
  };
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    uint8_t body[64];
    int len = unhex(odd[i], body);
    CHECK(len > 0);
    struct kt_req x, y;
    struct kt_err e1 = {0}, e2 = {0};
    int r1 = kt_proto_decode_req(body, (size_t)len, &a, &x, &e1);
    int r2 = kt_proto_decode_req_generic(body, (size_t)len, &a, &y, &e2);
    CHECK_EQ(r1, r2);
    CHECK_STR(e1.msg, e2.msg);
    if (!r1)
      CHECK(same_authed(&x, &y));
  }
  kt_arena_free(&a);
  kt_buf_free(&slow);
  kt_buf_free(&fast);
}
