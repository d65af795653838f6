/* test/fuzz/naming_fuzz.c — libketch's reader of resolver registrations
 * (kt_cl_naming_parse, client/resolver.c) over arbitrary values: a value
 * under a resolver prefix is whatever anyone with write access put there.
 * The input is copied into a buffer of exactly its size (so a read past the
 * end is caught under ASan); the address it returns is NUL-terminated within
 * the output buffer, non-empty, without spaces, commas or quotes, and read
 * from the input; the output buffer's size is varied (byte 0) to hit the
 * length bound. */
#include <stdlib.h>
#include <string.h>

#include "../../client/client_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t cap = size ? 1 + data[0] % 64 : 16;
  uint8_t *v = malloc(size ? size : 1);
  char *addr = malloc(cap);
  if (!v || !addr)
    abort();
  memcpy(v, data, size);
  int r = kt_cl_naming_parse(v, size, addr, cap);
  if (r < -1 || r > 1)
    abort();
  if (r >= 0) {
    size_t n = strnlen(addr, cap);
    if (n == 0 || n >= cap || !memmem(v, size, addr, n))
      abort();
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)addr[i];
      if (ch <= ' ' || ch == ',' || ch == '"' || ch == '\\')
        abort();
    }
  }
  free(v);
  free(addr);
  return 0;
}
