/* test/fuzz/auth_store_fuzz.c — the auth store's snapshot part
 * (kt_auth_load) over arbitrary bytes (a snapshot may come from a peer or a
 * file). What loads stays within the input, saves back to exactly the bytes
 * it was loaded from, and answers permission checks without reading out of
 * bounds. */
#include <stdlib.h>
#include <string.h>

#include "../../core/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct kt_auth *a = kt_auth_new();
  struct kt_err e = {0};
  size_t used = 0;
  if (kt_auth_load(a, data, size, &used, &e) == 0) {
    if (used > size)
      abort();
    struct kt_buf b = {0};
    kt_auth_save(a, &b);
    if (b.len != used || memcmp(b.p, data, used) != 0)
      abort(); /* canonical: one encoding per store */
    const struct kt_bytes u = {data, size > 4 ? 4 : (uint32_t)size};
    (void)kt_auth_allows(a, u, KT_PERM_READ, u, (struct kt_bytes){(const uint8_t *)"", 1});
    (void)kt_auth_allows(a, u, KT_PERM_WRITE, u, (struct kt_bytes){0});
    kt_buf_free(&b);
  }
  kt_auth_free(a);
  return 0;
}
