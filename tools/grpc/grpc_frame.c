/* tools/grpc/grpc_frame.c — gRPC's pure parts: the length-prefixed message
 * framing and the status-code names (see grpc_client.h). No I/O; fuzzed by
 * test/fuzz/grpc_frame_fuzz.c. */
#include "grpc_client.h"

static const char *const names[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

const char *kt_grpc_status_name(int status) {
  if (status < 0 || status > 16)
    return "UNKNOWN_CODE";
  return names[status];
}

long kt_grpc_frame_parse(const uint8_t *buf, size_t len, size_t max_len, const uint8_t **msg,
                         size_t *msg_len) {
  if (len < 5)
    return 0;
  if (buf[0] != 0)
    return -1;
  size_t n = (size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4];
  if (n > max_len)
    return -1;
  if (len - 5 < n)
    return 0;
  *msg = buf + 5;
  *msg_len = n;
  return (long)(5 + n);
}
