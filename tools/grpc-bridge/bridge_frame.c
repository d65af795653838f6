/* tools/grpc-bridge/bridge_frame.c — a protobuf-c message as one gRPC
 * length-prefixed message (the 5-byte prefix, then the packed message), and
 * the answer of a unary call with it. Shared by every bridge service and by
 * the fuzz targets that include bridge files. */
#include <stdlib.h>

#include "bridge.h"
#include "../grpc/grpc_client.h"

uint8_t *kt_bridge_frame(const void *msg, size_t *len) {
  const ProtobufCMessage *m = msg;
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(5 + n);
  if (!buf)
    return NULL;
  kt_bridge_frame_prefix(buf, n);
  protobuf_c_message_pack(m, buf + 5);
  *len = 5 + n;
  return buf;
}

void kt_bridge_finish(kt_bridge_done done, void *arg, const void *m) {
  size_t n;
  uint8_t *buf = kt_bridge_frame(m, &n);
  if (!buf) {
    done(arg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
    return;
  }
  done(arg, KT_GRPC_OK, "", buf, n);
}
