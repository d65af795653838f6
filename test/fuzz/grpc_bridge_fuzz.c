/* test/fuzz/grpc_bridge_fuzz.c — ketch-grpc's request decoder: the first byte
 * picks a method (or a grpc-timeout value), the rest is the protobuf request
 * an etcd client sent. Every input is unpacked, validated and converted into a
 * libketch request that is queued on a handle that never connects; closing
 * the handle completes each call exactly once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/grpc-bridge/bridge_kv.c"
#include "kv.pb-c.c"
#include "rpc.pb-c.c"

static int calls_done;

static void done(void *arg, int status, const char *message, uint8_t *framed, size_t framed_len) {
  (void)arg;
  (void)framed_len;
  if (!message || (status == 0) != (framed != NULL && framed_len >= 5))
    abort();
  free(framed);
  calls_done++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  uint8_t *buf = malloc(size);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  static const char *const paths[] = {
      "/etcdserverpb.KV/Range",       "/etcdserverpb.KV/Put",
      "/etcdserverpb.KV/DeleteRange", "/etcdserverpb.KV/Txn",
      "/etcdserverpb.KV/Compact",     "/etcdserverpb.Maintenance/Status",
      "/etcdserverpb.Watch/Watch",    "/nope/x"};
  unsigned sel = buf[0];
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
  calls_done = 0;
  kt_bridge_call(c, paths[sel % 8], buf + 1, size - 1, 1 << 20, done, NULL);
  ketch_close(c);
  if (calls_done != 1)
    abort();
  free(buf);
  return 0;
}
