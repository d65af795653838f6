/* test/fuzz/snap_meta_fuzz.c — the decoders of a snapshot's meta blob
 * sections over arbitrary bytes (a snapshot may come from a peer or a file):
 * the member table (kt_node_member_decode) and the alarms
 * (kt_node_maint_alarms_decode). What decodes stays within the input and
 * within the tables' bounds. */
#include <stdlib.h>

#include "../../core/node_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct kt_node_members t;
  struct kt_err e = {0};
  size_t used = 0;
  if (kt_node_member_decode(data, size, &used, &t, &e) == 0 &&
      (used > size || t.n > KT_NODE_MAX_MEMBERS || t.n_removed > KT_ARRAY_LEN(t.removed)))
    abort();
  static struct kt_node_alarms al;
  if (kt_node_maint_alarms_decode(data, size, &used, &al, &e) == 0 &&
      (al.n > KT_NODE_MAX_ALARMS || 12 + al.n * 9 != used || used > size))
    abort();
  return 0;
}
