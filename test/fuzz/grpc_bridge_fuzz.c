/* test/fuzz/grpc_bridge_fuzz.c — ketch-grpc's request decoders: the first byte
 * picks a method (or a grpc-timeout value, or a stream), the rest is the
 * protobuf request an etcd client sent. Every input is unpacked, validated and
 * converted into a libketch request that is queued on a handle that never
 * connects; closing the handle completes each call exactly once.
 * First byte 0xd0..0xdf: (byte & 15) % 4 picks Cluster's MemberAdd,
 * MemberRemove, MemberUpdate or MemberPromote; 0xc0..0xcf one of the 16 Auth
 * methods the bridge forwards; 0xbf Authenticate's decoder; 0xf0..0xf3 a
 * grpc-timeout value; 0xf4..0xf7 a request's header block (bridge_hdrs.c:
 * headers, each a 1-byte name length, the name, a 1-byte value length, the
 * value; a well-formed block has one :path without control bytes, a token
 * has none either); 0xf8..0xff the HTTP/1 sniff of a connection's first
 * bytes (bridge_http1.c).
 * Streams (first byte 0xe0..0xef: (byte & 15) % 10 picks Watch, LeaseKeepAlive,
 * Lock, Unlock, Campaign, Proclaim, Leader, Resign, Observe or Snapshot): the rest
 * is a sequence of request messages, each a 1-byte length and its bytes, fed
 * one by one; then the stream is closed and the handle too: every watch and
 * call must be released (LeakSanitizer) and io must not be used after close.
 * Odd-sized stream inputs run with LeaseKeepAlive coalescing on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/etcddb/etcddb.c"
#include "../../tools/grpc-bridge/bridge_auth.c"
#include "../../tools/grpc-bridge/bridge_cache.c"
#include "../../tools/grpc-bridge/bridge_frame.c"
#include "../../tools/grpc-bridge/bridge_hdrs.c"
#include "../../tools/grpc-bridge/bridge_http1.c"
#include "../../tools/grpc-bridge/bridge_kv.c"
#include "../../tools/grpc-bridge/bridge_snap.c"
#include "../../tools/grpc-bridge/bridge_stream.c"
#include "../../tools/grpc-bridge/bridge_watch.c"
#include "auth.pb-c.c"
#include "kv.pb-c.c"
#include "lease.pb-c.c"
#include "rpc.pb-c.c"
#include "v3election.pb-c.c"
#include "v3lock.pb-c.c"

static int calls_done;

static void done(void *arg, int status, const char *message, uint8_t *framed, size_t framed_len) {
  (void)arg;
  (void)framed_len;
  if (!message || (status == 0) != (framed != NULL && framed_len >= 5))
    abort();
  free(framed);
  calls_done++;
}

static bool stream_closed;
static int stream_pending;

static void io_send(void *arg, uint8_t *framed, size_t len) {
  (void)arg;
  if (stream_closed || len < 5)
    abort();
  free(framed);
}
static bool io_room(void *arg, size_t n) {
  (void)arg;
  return n < 4096;
}
static void io_finish(void *arg, int status, const char *message) {
  (void)arg;
  if (stream_closed || !message || status < 0 || status > 16)
    abort();
}
static void io_pending(void *arg, int delta) {
  (void)arg;
  if (stream_closed)
    abort();
  stream_pending += delta;
}
static void io_want_room(void *arg) {
  (void)arg;
  if (stream_closed)
    abort();
}
static const struct kt_bridge_stream_io fuzz_io = {io_send, io_room, io_finish, io_pending,
                                                   io_want_room};

static void fuzz_stream(ketch_client *c, const uint8_t *d, size_t n, unsigned method) {
  stream_closed = false;
  stream_pending = 0;
  kt_bridge_stream *s =
      kt_bridge_stream_open(c, stream_methods[method % 10], 1 << 20, &fuzz_io, NULL);
  if (!s)
    return;
  size_t off = 0;
  while (off < n) {
    size_t len = d[off++];
    if (len > n - off)
      len = n - off;
    kt_bridge_stream_recv(s, d + off, len);
    off += len;
  }
  if (n % 3 == 0)
    kt_bridge_stream_eof(s);
  if (stream_pending < 0)
    abort();
  stream_closed = true;
  kt_bridge_stream_close(s);
}

/* A value the bridge keeps as a C string: no control byte but tab. */
static bool fuzz_clean(const uint8_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
      return false;
  return true;
}

static void fuzz_headers(const uint8_t *d, size_t n) {
  struct kt_bridge_req_hdrs h;
  memset(&h, 0, sizeof h);
  int paths = 0;
  size_t off = 0;
  while (off < n) {
    size_t nl = d[off++];
    if (nl > n - off)
      break;
    const uint8_t *name = d + off;
    off += nl;
    size_t vl = off < n ? d[off++] : 0;
    if (vl > n - off)
      vl = n - off;
    const uint8_t *value = d + off;
    off += vl;
    int kind = kt_bridge_req_header(&h, name, nl, value, vl);
    if (kind == KT_HDR_PATH && (vl == 0 || !fuzz_clean(value, vl) || nl != 5))
      abort();
    if (kind == KT_HDR_TOKEN && !fuzz_clean(value, vl))
      abort();
    paths += kind == KT_HDR_PATH;
  }
  const char *why = NULL;
  int r = kt_bridge_req_check(&h, &why);
  if (r == KT_REQ_MALFORMED ? !why : (why || paths != 1 || h.method[sizeof h.method - 1]))
    abort();
  if (r == KT_REQ_OK && strcmp(h.method, "POST") != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  uint8_t *buf = malloc(size);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  static const char *const paths[] = {"/etcdserverpb.KV/Range",
                                      "/etcdserverpb.KV/Put",
                                      "/etcdserverpb.KV/DeleteRange",
                                      "/etcdserverpb.KV/Txn",
                                      "/etcdserverpb.KV/Compact",
                                      "/etcdserverpb.Maintenance/Status",
                                      "/etcdserverpb.Watch/Watch",
                                      "/nope/x",
                                      "/etcdserverpb.Lease/LeaseGrant",
                                      "/etcdserverpb.Lease/LeaseRevoke",
                                      "/etcdserverpb.Lease/LeaseTimeToLive",
                                      "/etcdserverpb.Lease/LeaseLeases",
                                      "/etcdserverpb.Cluster/MemberList",
                                      "/etcdserverpb.Maintenance/MoveLeader",
                                      "/etcdserverpb.Lease/LeaseKeepAlive",
                                      "/etcdserverpb.Maintenance/Alarm",
                                      "/etcdserverpb.Maintenance/Defragment",
                                      "/etcdserverpb.Maintenance/Hash",
                                      "/etcdserverpb.Maintenance/HashKV",
                                      "/etcdserverpb.Auth/UserList"};
  unsigned sel = buf[0];
  if (sel >= 0xf8) { /* the first bytes of a connection: an HTTP/1 request or not */
    char out[512];
    size_t n = kt_bridge_http1(buf + 1, size - 1, out, sizeof out);
    if (n >= sizeof out || (n && memcmp(out, "HTTP/1.1 ", 9) != 0))
      abort();
    free(buf);
    return 0;
  }
  if (sel >= 0xf4) { /* a request's header block */
    fuzz_headers(buf + 1, size - 1);
    free(buf);
    return 0;
  }
  if (sel >= 0xf0) { /* a grpc-timeout value */
    int64_t t = kt_bridge_parse_timeout(buf + 1, size - 1);
    if (t < -1)
      abort();
    free(buf);
    return 0;
  }
  ketch_client *c = NULL;
  ketch_options o;
  ketch_options_init(&o);
  o.nonblocking_open = true;
  if (ketch_open(&c, "127.0.0.1:9", &o, NULL, 0) != 0) {
    free(buf);
    return 0;
  }
  if (sel >= 0xe0) {
    /* odd-sized inputs with LeaseKeepAlive coalescing on (nothing may stay
     * cached for the handle once it is closed, as the bridge does) */
    kt_bridge_ka_coalesce = size & 1;
    fuzz_stream(c, buf + 1, size - 1, sel & 15);
    kt_bridge_ka_forget(c, 0);
    ketch_close(c);
    kt_bridge_ka_coalesce = false;
    free(buf);
    return 0;
  }
  static const char *const member_paths_fuzz[] = {
      "/etcdserverpb.Cluster/MemberAdd", "/etcdserverpb.Cluster/MemberRemove",
      "/etcdserverpb.Cluster/MemberUpdate", "/etcdserverpb.Cluster/MemberPromote"};
  static const char *const auth_paths_fuzz[] = {"/etcdserverpb.Auth/AuthEnable",
                                                "/etcdserverpb.Auth/AuthDisable",
                                                "/etcdserverpb.Auth/AuthStatus",
                                                "/etcdserverpb.Auth/UserAdd",
                                                "/etcdserverpb.Auth/UserGet",
                                                "/etcdserverpb.Auth/UserList",
                                                "/etcdserverpb.Auth/UserDelete",
                                                "/etcdserverpb.Auth/UserChangePassword",
                                                "/etcdserverpb.Auth/UserGrantRole",
                                                "/etcdserverpb.Auth/UserRevokeRole",
                                                "/etcdserverpb.Auth/RoleAdd",
                                                "/etcdserverpb.Auth/RoleGet",
                                                "/etcdserverpb.Auth/RoleList",
                                                "/etcdserverpb.Auth/RoleDelete",
                                                "/etcdserverpb.Auth/RoleGrantPermission",
                                                "/etcdserverpb.Auth/RoleRevokePermission"};
  if (sel == 0xbf) { /* Authenticate's decoder (the bridge answers it itself) */
    char *name = NULL, *password = NULL;
    if (kt_bridge_authenticate_decode(buf + 1, size - 1, &name, &password) == 0) {
      if (!name || !password)
        abort();
      free(name);
      free(password);
    }
    ketch_close(c);
    free(buf);
    return 0;
  }
  calls_done = 0;
  if (sel >= 0xc0 && sel < 0xd0)
    kt_bridge_call(c, auth_paths_fuzz[sel & 15], buf + 1, size - 1, 1 << 20, done, NULL);
  else
    kt_bridge_call(c, sel >= 0xd0 ? member_paths_fuzz[(sel & 15) % 4] : paths[sel % 20], buf + 1,
                   size - 1, 1 << 20, done, NULL);
  ketch_close(c);
  if (calls_done != 1)
    abort();
  free(buf);
  return 0;
}
