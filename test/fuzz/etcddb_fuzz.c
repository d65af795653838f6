/* test/fuzz/etcddb_fuzz.c — arbitrary bytes as an etcd database, through
 * what `ketchutl migrate from-etcd` runs before it writes anything
 * (kt_etcddb_check: snap/bbolt's page reader, etcd's revision keys, the
 * mvccpb.KeyValue and leasepb.Lease decoders, the compaction rule, ketch's
 * lease table) and what `ketchutl snapshot status` prints for such a file
 * (kt_etcddb_status). A refusal must name the file. Seeds: databases written
 * by Debian's etcd 3.4.23 and by `ketchutl snapshot export --etcd`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../../tools/etcddb/etcddb.c"
#include "kv.pb-c.c"
#include "lease.pb-c.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool init;
  if (!init && sodium_init() >= 0)
    init = true;
  struct kt_err e = {0};
  struct kt_etcddb_stats st;
  int rc = kt_etcddb_check(data, size, "fuzz.db", &st, &e);
  if (rc != 0 && (e.code != rc || strncmp(e.msg, "fuzz.db: ", 9) != 0))
    abort();
  if (rc == 0 && (st.revision < 1 || st.compact_revision > st.revision))
    abort();
  struct kt_etcddb_status s;
  memset(&e, 0, sizeof e);
  rc = kt_etcddb_status(data, size, "fuzz.db", &s, &e);
  if (rc != 0 && (e.code != rc || strncmp(e.msg, "fuzz.db: ", 9) != 0))
    abort();
  return 0;
}
