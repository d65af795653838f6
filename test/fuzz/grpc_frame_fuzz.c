/* test/fuzz/grpc_frame_fuzz.c — gRPC's length-prefixed framing (the decoder of
 * the bytes an HTTP/2 peer sends in DATA frames): any input, any limit, never
 * reads past the buffer, and what it accepts is self-consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/grpc/grpc_frame.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* copy to an exact-size heap buffer so ASan sees any over-read */
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  size_t off = 0;
  while (off < size) {
    const uint8_t *msg = NULL;
    size_t n = 0;
    long used = kt_grpc_frame_parse(buf + off, size - off, 1 << 20, &msg, &n);
    if (used <= 0)
      break;
    if ((size_t)used != n + 5 || msg != buf + off + 5 || off + (size_t)used > size)
      abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++)
      sink ^= msg[i];
    (void)sink;
    off += (size_t)used;
  }
  (void)kt_grpc_status_name(size ? data[0] - 8 : 0);
  free(buf);
  return 0;
}
