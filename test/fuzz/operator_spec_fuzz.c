/* test/fuzz/operator_spec_fuzz.c — ketch-operator's decoders of outside
 * bytes: the YAML spec (written by a user, read back from the cluster every
 * round; its upgrade windows are then asked about one time) and the action-log and backup records
 * (logfmt lines read back from the cluster). Each input goes to all three; a decoded record is
 * encoded again and must decode to the same fields. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/operator/op.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct op_spec spec;
  char err[400];
  if (op_spec_parse((const char *)data, size, &spec, err, sizeof err) == 0) {
    /* its upgrade windows, at a time the input picks: open, or a later opening */
    int64_t t = 1700000000000LL + (int64_t)(size * 7919u % 604800u) * 1000, next = 0;
    if (!op_in_window(&spec, t, &next) && (next <= t || next > t + 8 * 86400000LL))
      abort();
  }
  struct op_action a, b;
  if (op_action_decode((const char *)data, size, &a, err, sizeof err) == 0) {
    char line[8192];
    int n = op_action_encode(&a, line, sizeof line);
    if (n < 0 || op_action_decode(line, (size_t)n, &b, err, sizeof err) != 0 || a.seq != b.seq ||
        a.kind != b.kind || a.member != b.member || strcmp(a.reason, b.reason) ||
        strcmp(a.outcome, b.outcome) || strcmp(a.machine, b.machine))
      abort();
  }
  struct op_backup k, k2;
  if (op_backup_decode((const char *)data, size, &k, err, sizeof err) == 0) {
    char line[4096];
    int n = op_backup_encode(&k, line, sizeof line);
    if (n < 0 || op_backup_decode(line, (size_t)n, &k2, err, sizeof err) != 0 ||
        k.revision != k2.revision || k.hash_kv != k2.hash_kv || strcmp(k.why, k2.why))
      abort();
  }
  return 0;
}
