/* core/mvcc.h — the MVCC key-value store (etcd v3 semantics), in memory.
 *
 * Owns: the ordered key index, every key's retained revisions, the current
 * and compacted revisions, the quota accounting and the NOSPACE alarm.
 *
 * Data flow: the node validates a client request with kt_mvcc_check (cheap,
 * no state change), persists it (WAL), then applies it with kt_mvcc_apply in
 * log order; reads call kt_mvcc_range directly. Apply is deterministic: the
 * same ops in the same order give the same store on every member.
 *
 * Pure: libc + core/base.h only. Single-threaded; never blocks; work on the
 * whole store (physical compaction, snapshot iteration) is done in slices of
 * bounded size that the caller schedules.
 *
 * Result pointers (kvs, keys, values) point into the store and stay valid
 * until the next kt_mvcc_apply, kt_mvcc_compact_step, kt_mvcc_restore_* or
 * kt_mvcc_free (records replaced by an apply are parked on a garbage list and
 * freed at the start of the next one).
 *
 * Layout (core/mvcc.c), chosen for 10M keys in RAM:
 * - An ordered index (core/index.h): a B+tree whose leaves hold one pointer
 *   and a 4-byte key hint per key (62 per leaf, kept ~80% full by moving
 *   items to a sibling before splitting) and whose inner nodes keep an
 *   8-byte prefix of each separator inline. A point read is ~4 inner nodes +
 *   1 leaf + the one record it returns; a range scan walks leaf arrays. A skiplist costs more
 * pointers per key and a cache miss per level; an ART needs more code (prefix keys, variable nodes)
 * for a gain only on long shared prefixes. (Reasoned, not measured against them.)
 * - One allocation per key: a 20-byte header with the latest revision (mod,
 *   key length + flags, value length, sub), then the create revision and
 *   version only when they are not implied (a key's first version: create =
 *   mod, version 1; a tombstone: both 0), the lease only if non-zero and the
 *   history pointer only once the key has history, then the key bytes and
 *   the latest value bytes.
 * - History: an array of 48-byte entries (oldest first), each value its own
 *   allocation. A put or delete allocates a new record, moves the old latest
 *   (value copied out) into the array, and parks the old record on the
 *   garbage list. A tombstone is a revision with version 0 and no value.
 * Measured (test/perf/mvcc_perf.c, 16 B keys, 256 B values, random order,
 * glibc malloc, mallinfo2 delta): 50 B/key at 1M keys beyond key and value
 * for a one-revision key (20 B record header, 12 B of malloc chunk overhead
 * and rounding, ~17 B index; ~13 B of index when keys arrive in order, as
 * from a snapshot); ~130 B per
 * older revision beyond its value (48 B entry, the copied value's
 * allocation, the latest's create/version now stored, 16 B accounting log
 * entry until compaction). At 1M keys on a shared 2-core box: ~680k puts/s,
 * ~1.4M point reads/s, a 1000-key range scan in ~100 us, compaction ~0.3 us
 * per key in steps.
 *
 * Revisions: reads at revision R see, per key, the newest revision with
 * main <= R (a tombstone hides the key). All writes of one apply share main
 * revision kt_mvcc_revision() + 1, with sub revisions 0, 1, ...; reads inside
 * a txn see its own earlier writes (etcd: view at rev + 1 once it changed).
 *
 * Compaction at R (etcd keyIndex.compact): per key, every revision older than
 * the newest one with main <= R is dropped; that one is dropped too if it is
 * a tombstone, and a key left with nothing is removed. kt_mvcc_compact makes
 * this visible at once (reads, iteration and the hash all apply the rule);
 * kt_mvcc_compact_step frees the memory later, key by key.
 *
 * Quota accounting ("db size", kt_mvcc_size_bytes), exact and deterministic:
 *   size = sum over revisions not removed by compaction at compact_revision
 *          of (key bytes + value bytes + KT_MVCC_REV_OVERHEAD)
 * (a tombstone counts its key). It drops when kt_mvcc_compact is applied,
 * not when the physical steps run, so every member agrees on it. A put or a
 * txn whose taken branch puts, that would push size past quota_bytes, raises
 * NOSPACE and fails with KT_ENOSPACE without changing the store (etcd applies
 * the write and then reports ENOSPACE; ketch refuses it). While NOSPACE is
 * raised, puts and txns containing a put fail; reads, deletes, compaction
 * succeed.
 */
#ifndef KT_MVCC_H
#define KT_MVCC_H

#include "ops.h"

struct kt_mvcc;

struct kt_mvcc_config {
  uint64_t quota_bytes;     /* 0 = 2 GiB default (etcd's) */
  uint32_t max_key_bytes;   /* 0 = default 1.5 MiB */
  uint32_t max_value_bytes; /* 0 = default 1.5 MiB */
  /* Called for every event of an applied write, in order (may be NULL). */
  void (*on_event)(void *arg, const struct kt_event *ev);
  void *event_arg;
};

/* Accounting bytes per revision beyond key and value (record header, history
 * entry, index slot and allocator overhead, rounded). */
#define KT_MVCC_REV_OVERHEAD 64

struct kt_mvcc *kt_mvcc_new(const struct kt_mvcc_config *cfg);
void kt_mvcc_free(struct kt_mvcc *s);

int64_t kt_mvcc_revision(const struct kt_mvcc *s);         /* current main revision */
int64_t kt_mvcc_compact_revision(const struct kt_mvcc *s); /* 0 if never compacted */
uint64_t kt_mvcc_size_bytes(const struct kt_mvcc *s);      /* quota accounting ("db size") */
uint64_t kt_mvcc_keys(const struct kt_mvcc *s);            /* live keys */
uint64_t kt_mvcc_revs(const struct kt_mvcc *s); /* revisions in memory, incl. not yet freed */
uint64_t kt_mvcc_index_bytes(const struct kt_mvcc *s); /* B+tree nodes + separators */
bool kt_mvcc_nospace(const struct kt_mvcc *s);         /* NOSPACE alarm raised */
void kt_mvcc_disarm_nospace(struct kt_mvcc *s);
void kt_mvcc_raise_nospace(struct kt_mvcc *s); /* an alarm activated by request */

/* Whether op changes the store (a put or delete anywhere in it, nested txn
 * branches included): a txn without one is a read. Pure. */
bool kt_mvcc_op_writes(const struct kt_request_op *op);

/* Validate an op before it is proposed: empty key (EKEYEMPTY), a put's key or value
 * too large (ETOOLARGE; keys only compared have no limit, as etcd), range_end < key (EINVAL; etcd
 * would answer an empty range), put with ignore_value and a value or ignore_lease and a lease
 * (EINVAL "value is provided"/"lease is provided"), txn with more than
 * KT_MAX_TXN_OPS compares/success/failure ops (nested txns get what their
 * parent left, as etcd), nested deeper than 64 (EINVAL), a key put twice or
 * put and deleted (EDUPKEY, etcd's checkIntervals rule), bad op type or
 * sort/compare enum (EINVAL), a put anywhere in the op while NOSPACE is
 * raised (ENOSPACE). Returns 0 or a KT_E* code with e filled. kt_mvcc_apply
 * runs it again. */
int kt_mvcc_check(const struct kt_mvcc *s, const struct kt_request_op *op, struct kt_err *e);
/* The range part of kt_mvcc_check (key, range_end, sort enums). A limit
 * <= 0 means no limit, as etcd. */
int kt_mvcc_check_range(const struct kt_mvcc *s, const struct kt_range_req *r, struct kt_err *e);

/* Read, as etcd's Range: count is the number of keys in the range at the
 * revision before limit and before the min/max revision filters; more is set
 * when the limit cut the answer. sort_order NONE with a target other than
 * KEY sorts ascending (ties stay in key order); without sort and filters the
 * limit is applied while scanning (as etcd, which then sorts what it kept).
 * Errors: ECOMPACTED (revision < compact revision), EFUTUREREV (revision >
 * current), EINVAL/EKEYEMPTY as kt_mvcc_check_range. Arrays come from `a`. */
int kt_mvcc_range(const struct kt_mvcc *s, const struct kt_range_req *r, struct kt_arena *a,
                  struct kt_range_resp *out, struct kt_err *e);

/* Apply one op (put, delete, txn; a range is answered too). Writes advance
 * the revision by one (all ops of a txn share it, with increasing sub
 * revisions); an op that changes nothing (delete of no key, read-only txn)
 * does not advance it. A txn's compares, nested ones included, see the state
 * before the txn (etcd compareToPath); its reads see its own earlier writes.
 * Errors (all found before any change, so they leave the store unchanged):
 * those of kt_mvcc_check; ENOTFOUND "key not found" for ignore_value or
 * ignore_lease on a key that is absent (or deleted earlier in the same txn:
 * etcd 3.4 panics there); EFUTUREREV/ECOMPACTED for a range in the taken
 * branch of a txn (checked against the revision before the txn); ENOSPACE
 * (quota, see above). Events go to cfg->on_event as each write applies. */
int kt_mvcc_apply(struct kt_mvcc *s, const struct kt_request_op *op, struct kt_arena *a,
                  struct kt_response_op *out, struct kt_err *e);
/* Deletes the given single keys at ONE new revision (a lease's keys when it
 * is revoked or expires; no op-count limit, deletes never need quota).
 * Missing keys are skipped. Events go to on_event. Returns the number of
 * keys deleted (0: the revision did not change). */
int64_t kt_mvcc_delete_keys(struct kt_mvcc *s, const struct kt_bytes *keys, size_t n,
                            struct kt_arena *a);

/* Compaction: sets the compacted revision at once (reads below it then fail
 * with ECOMPACTED; EFUTUREREV / ECOMPACTED for a bad rev) and queues the
 * physical removal, which kt_mvcc_compact_step does in slices of at most
 * `max_keys` keys; it returns true while work remains. */
int kt_mvcc_compact(struct kt_mvcc *s, int64_t rev, struct kt_err *e);
bool kt_mvcc_compact_step(struct kt_mvcc *s, size_t max_keys);
bool kt_mvcc_compact_pending(const struct kt_mvcc *s);

/* Iterate all retained revisions <= at_rev, in key order and, per key, in
 * revision order, starting at the first key >= cursor (empty = start), for at
 * most max_keys keys. Writes to the store between calls are allowed (they
 * only add revisions > at_rev); compaction is not (the caller holds back
 * kt_mvcc_compact and its steps while a snapshot is in progress). Revisions
 * that compaction at the compact revision removes are skipped even if not
 * yet freed, so the output does not depend on compaction progress. Returns
 * 1 if more keys remain (and sets *cursor, allocated from `a`), 0 when done,
 * or a negative value if fn returned non-zero. max_keys 0 counts as 1. */
struct kt_mvcc_cursor {
  struct kt_bytes key;
  bool started;
};
int kt_mvcc_iter(const struct kt_mvcc *s, int64_t at_rev, struct kt_mvcc_cursor *cursor,
                 size_t max_keys, struct kt_arena *a,
                 int (*fn)(void *arg, const struct kt_kvrev *rec), void *arg);

/* Restore: feed revisions in the order kt_mvcc_iter produces them into an
 * empty store, then set the revisions. Copies the bytes. Errors: ECORRUPT for
 * a record out of order or with impossible fields (the store then holds a
 * partial state: free it). Events are not emitted. restore_done is O(n)
 * (rebuilds the accounting log) and queues physical compaction if the
 * records held revisions that compact_revision removes. */
int kt_mvcc_restore_rec(struct kt_mvcc *s, const struct kt_kvrev *rec, struct kt_err *e);
void kt_mvcc_restore_done(struct kt_mvcc *s, int64_t revision, int64_t compact_revision);

/* A hash of the current and compact revisions and of every revision that
 * survives compaction (as kt_mvcc_iter emits them), for tests and HashKV.
 * Independent of physical compaction progress. O(n). */
uint64_t kt_mvcc_hash(const struct kt_mvcc *s);

/* The same hash bounded by a revision and computed in slices (HashKV):
 * every retained revision <= rev, with rev and the compact revision mixed
 * in first, so kt_mvcc_hash(s) equals a hasher started at the current
 * revision. Identical on every member that applied the same log up to rev,
 * whatever each member's physical compaction progress or later writes.
 *
 * kt_mvcc_hash_start: rev 0 = the current revision. Errors: ECOMPACTED
 * (0 < rev <= compact revision: etcd's HashByRev rule), EFUTUREREV (rev >
 * current).
 * kt_mvcc_hash_step: hashes at most max_keys more keys (writes to the store
 * between steps are fine: they add revisions > rev). Returns 1 while keys
 * remain, 0 when hs->h is final. A compaction applied since the start
 * changes what is retained: the hasher then starts over at the new compact
 * revision, or returns -KT_ECOMPACTED if rev is now at or below it.
 * kt_mvcc_hash_done frees the hasher's cursor copy. */
struct kt_mvcc_hasher {
  uint64_t h;
  int64_t rev, compact_rev;
  struct kt_mvcc_cursor cursor;
  struct kt_buf key; /* the cursor's key, owned */
  bool done;
};
int kt_mvcc_hash_start(const struct kt_mvcc *s, int64_t rev, struct kt_mvcc_hasher *hs,
                       struct kt_err *e);
int kt_mvcc_hash_step(const struct kt_mvcc *s, struct kt_mvcc_hasher *hs, size_t max_keys);
void kt_mvcc_hash_done(struct kt_mvcc_hasher *hs);
/* etcd's hash fields are 32 bits: the 64-bit hash folded. */
static inline uint32_t kt_mvcc_hash32(uint64_t h) { return (uint32_t)(h ^ (h >> 32)); }

#endif
