/* test/fuzz/grpc_ns_fuzz.c — ketch-grpc's --namespace rewriter
 * (tools/grpc-bridge/bridge_ns.c) over messages from outside: the first byte
 * picks a method (byte % 16 of the methods with keys, and bit 0x80 a response
 * instead of a request), the second the namespace's length (0..7 bytes of
 * "t1/\xff\xff\xff\xff"); the rest is the protobuf message. A request that
 * unpacks must come back moved into the namespace and unpack again; a
 * response must come back framed and unpack again. Every input is also read
 * as a registration's value by kt_bridge_reg_name (bridge_reg.c, the Name a
 * registered proxy's MemberList entry shows). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/grpc-bridge/bridge_frame.c"
#include "../../tools/grpc-bridge/bridge_ns.c"
#include "../../tools/grpc-bridge/bridge_reg.c"
#include "auth.pb-c.c"
#include "kv.pb-c.c"
#include "lease.pb-c.c"
#include "rpc.pb-c.c"
#include "v3election.pb-c.c"
#include "v3lock.pb-c.c"

/* Whether msg unpacks, packs and unpacks again without the namespace (some
 * inputs protobuf-c accepts, e.g. an unknown field number 0, repack into
 * bytes it refuses: the rewrite cannot do better than that). */
static bool round_trips(const ProtobufCMessageDescriptor *d, const uint8_t *msg, size_t len) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
  if (!m)
    return false;
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  bool ok = false;
  if (buf) {
    protobuf_c_message_pack(m, buf);
    ProtobufCMessage *m2 = protobuf_c_message_unpack(d, NULL, n, buf);
    ok = m2 != NULL;
    if (m2)
      protobuf_c_message_free_unpacked(m2, NULL);
    free(buf);
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return ok;
}

/* A stand-in for bridge_kv.c's (and its error table), which bridge_reg.c's
 * MemberList answers errors through */
void kt_bridge_fail(kt_bridge_done done, void *arg, int err, const char *detail) {
  (void)err;
  done(arg, KT_GRPC_UNAVAILABLE, detail ? detail : "", NULL, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char pfx[] = "t1/\xff\xff\xff\xff";
  char name[16];
  kt_bridge_reg_name(data, size, name, sizeof name);
  if (strlen(name) >= sizeof name)
    abort();
  if (size < 2)
    return 0;
  size_t nm = sizeof methods / sizeof methods[0];
  size_t i = (data[0] & 0x7f) % nm;
  bool resp = data[0] & 0x80;
  size_t plen = data[1] % 8;
  const uint8_t *msg = data + 2;
  size_t len = size - 2;
  uint8_t *out = NULL;
  size_t out_len = 0;
  if (!resp) {
    int rc = kt_bridge_ns_request(pfx, plen, methods[i].path, msg, len, &out, &out_len);
    if (rc == 0 && out && round_trips(methods[i].rq, msg, len)) {
      ProtobufCMessage *m = protobuf_c_message_unpack(methods[i].rq, NULL, out_len, out);
      if (!m)
        abort();
      protobuf_c_message_free_unpacked(m, NULL);
    }
  } else {
    uint8_t *framed = malloc(len + 5);
    if (!framed)
      return 0;
    kt_bridge_frame_prefix(framed, len);
    memcpy(framed + 5, msg, len);
    int rc = kt_bridge_ns_response(pfx, plen, methods[i].path, framed, len + 5, &out, &out_len);
    if (rc == 1) {
      if (out_len < 5)
        abort();
      ProtobufCMessage *m = protobuf_c_message_unpack(methods[i].rs, NULL, out_len - 5, out + 5);
      if (!m && round_trips(methods[i].rs, msg, len))
        abort();
      if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    } else if (rc == 0 && out) {
      abort();
    }
    free(framed);
  }
  free(out);
  return 0;
}
