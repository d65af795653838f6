/* tools/etcddb/etcddb.h — etcd v3's backend (a bbolt file) to and from ketch.
 *
 * Owns: the mapping between etcd 3.4's bbolt schema and ketch's snapshot
 * records; the page format is snap/bbolt's, the protobufs are etcd's
 * (tools/grpc/proto/kv.proto mvccpb.KeyValue, lease.proto leasepb.Lease,
 * through protobuf-c), the ketch snapshot is snap/'s.
 *
 * etcd 3.4's schema (mvcc/kvstore.go, lease/lessor.go), as read and written:
 *   bucket "key"    key: revision = 8-byte big-endian main | '_' | 8-byte
 *                   big-endian sub, plus 't' for a tombstone (18 bytes);
 *                   value: mvccpb.KeyValue (a put: key, create_revision,
 *                   mod_revision = main, version, value, lease; a tombstone:
 *                   the key alone). Ascending by revision.
 *   bucket "meta"   "consistent_index" (8-byte BE raft index applied),
 *                   "finishedCompactRev" and "scheduledCompactRev" (revision
 *                   keys as above: the compaction done, and the one asked,
 *                   which etcd finishes when it starts).
 *   bucket "lease"  key: the lease id, 8-byte BE; value: leasepb.Lease (ID,
 *                   TTL granted, RemainingTTL only with checkpoints).
 *   others          members, members_removed, cluster, alarm, auth, authUsers,
 *                   authRoles: not imported (members come from the flags, as
 *                   etcdutl snapshot restore); not exported (etcd creates them).
 *
 * Import (ketchutl migrate from-etcd, ketchutl snapshot restore|status of a
 * bbolt file), data flow: the file mmap'd (an `etcdctl snapshot save` file
 * ends in a SHA-256 of the rest: checked, as etcdutl does) -> snap/bbolt
 * walks "key" (every page checked) -> each KeyValue unpacked by protobuf-c
 * into a scratch arena, key and value copied to the data arena -> records
 * sorted by key, then revision -> per key, what compaction at C =
 * max(finished, scheduled) removes is dropped (etcd's keyIndex.compact: the
 * revisions below the newest one <= C, and that one too if it is a
 * tombstone) -> "lease" -> a ketch lease table (granted TTLs; remaining
 * restarts in full, as etcd without checkpoints) -> one ketch snapshot
 * (term 1, index = consistent_index or 1, revision = max(last revision, C),
 * compact revision C) written by snap/'s writer into
 * <data-dir>/member/snap/, an empty member/wal/, and with --name and
 * --initial-cluster the member file (kt_node_member_write_initial).
 * Everything is decoded and checked before the data dir is created; a
 * failure after that removes it: a bad file leaves nothing behind.
 * Memory: the keys and values (one copy) plus ~80 bytes per revision.
 *
 * Export (ketchutl snapshot export --etcd, ketch-grpc's Maintenance.Snapshot):
 * a ketch snapshot file (kt_snap_load: every rule of snap/FORMAT.md, hash
 * included) -> each record packed as a KeyValue into an unlinked spill file
 * in tmp_dir, with a 24-byte index entry (revision, offset, length) -> the
 * index sorted by revision -> snap/bbolt's writer, a dry run (page layout)
 * then the real one, which writes the file strictly in order (so a reader
 * may follow it: ketch-grpc streams it as it grows): "key" (values read from
 * the spill file, mmap'd), "lease" (the snapshot's lease table), "meta"
 * (consistent_index = the snapshot's raft index, both compact revisions =
 * its compact revision) -> optionally etcd's trailer (SHA-256 of the file,
 * computed as it is written).
 * Memory: ~24 bytes per revision; the spill file holds the encoded values.
 */
#ifndef KT_ETCDDB_H
#define KT_ETCDDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../core/base.h"
#include "../../core/node.h"

/* What an import or export saw. */
struct kt_etcddb_stats {
  int64_t revision, compact_revision;
  uint64_t revisions; /* records (revisions of keys) kept */
  uint64_t live_keys;
  uint64_t leases;
  uint64_t raft_index; /* consistent_index (import), the snapshot's index (export) */
  uint64_t bytes;      /* the bbolt file (export, trailer excluded) */
};

/* etcd's `snapshot status` numbers for a bbolt file (etcd 3.4's
 * v3_snapshot.go Status): hash = CRC-32C over every top-level bucket's name
 * and each key and value in it, revision = the main revision of the last key
 * of "key", total keys = the keys of every bucket, total size = the pages in
 * use times the page size. */
struct kt_etcddb_status {
  uint32_t hash;
  int64_t revision;
  uint64_t total_keys, total_size;
};

/* Status of the bbolt image p[0..n) (name for messages). Errors: ECORRUPT
 * (naming the page), EVERSION. */
int kt_etcddb_status(const uint8_t *p, size_t n, const char *name, struct kt_etcddb_status *st,
                     struct kt_err *e);

/* Whether p[0..n) starts like a bbolt file (the magic of page 0). */
bool kt_etcddb_is_bbolt(const uint8_t *p, size_t n);

/* Decodes the etcd database p[0..n) (name for messages) and checks every
 * record and lease, writing nothing: what import does before it writes.
 * Errors: ECORRUPT with a message naming the page or the revision, EVERSION,
 * EINVAL (a bbolt file that is not an etcd v3 database). */
int kt_etcddb_check(const uint8_t *p, size_t n, const char *name, struct kt_etcddb_stats *st,
                    struct kt_err *e);

/* Imports the etcd database in file into a new data dir (which must not
 * exist). members: the member file to write (cfg's name, initial,
 * n_initial, cluster_token), or NULL to leave the members to the first start
 * of the member (its --initial-* flags). Errors: those of kt_etcddb_check,
 * ENOTFOUND (no such file), EINVAL (data_dir exists, bad members), EIO
 * (naming the file). Nothing is left behind on error. */
int kt_etcddb_import(const char *file, const char *data_dir, const struct kt_node_config *members,
                     struct kt_etcddb_stats *st, struct kt_err *e);

/* Called as the database is written: done bytes of total (the database's
 * size, known before its first byte is written: first with done 0). */
typedef void (*kt_etcddb_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Exports the ketch snapshot in snap_file to out_fd (written in order from
 * its current offset, named out_name in messages) as an etcd 3.4 database;
 * with trailer, etcd's SHA-256 of the database follows it (what `etcdctl
 * snapshot save` writes). tmp_dir holds the spill file (unlinked at once).
 * progress (may be NULL) follows the writing. Does not fsync. Errors: those
 * of kt_snap_load (ECORRUPT...), EIO (naming the file). */
int kt_etcddb_export(const char *snap_file, int out_fd, const char *out_name, const char *tmp_dir,
                     bool trailer, kt_etcddb_progress_fn progress, void *parg,
                     struct kt_etcddb_stats *st, struct kt_err *e);

#endif
