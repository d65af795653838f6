/* test/fuzz/snap_read_fuzz.c — arbitrary bytes as a snapshot file, through
 * the same decoder kt_snap_load uses (kt_snap_load_mem). Every record handed
 * to the callback is read in full, so ASan sees any out-of-bounds pointer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../snap/snap.h"

static int touch(void *arg, const struct kt_kvrev *r) {
  uint64_t *sum = arg;
  for (uint32_t i = 0; i < r->key.n; i++)
    *sum += r->key.p[i];
  for (uint32_t i = 0; i < r->value.n; i++)
    *sum += r->value.p[i];
  *sum += (uint64_t)r->mod_revision + (uint64_t)r->create_revision + r->tombstone;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct kt_snap_meta meta;
  struct kt_err err;
  uint64_t sum = 0;
  int rc = kt_snap_load_mem(data, size, "fuzz.snap", touch, &sum, &meta, &err);
  if (rc != 0 && (err.code != rc || strncmp(err.msg, "fuzz.snap: ", 11) != 0))
    abort(); /* every refusal names the file */
  kt_snap_meta_free(&meta);
  return 0;
}
