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
 * until the next kt_mvcc_apply, kt_mvcc_compact_step or kt_mvcc_free.
 */
#ifndef KT_MVCC_H
#define KT_MVCC_H

#include "ops.h"

struct kt_mvcc;

struct kt_mvcc_config {
  uint64_t quota_bytes;  /* 0 = 2 GiB default (etcd's) */
  uint32_t max_key_bytes; /* 0 = default 1.5 MiB */
  /* Called for every event of an applied write, in order (may be NULL). */
  void (*on_event)(void *arg, const struct kt_event *ev);
  void *event_arg;
};

struct kt_mvcc *kt_mvcc_new(const struct kt_mvcc_config *cfg);
void kt_mvcc_free(struct kt_mvcc *s);

int64_t kt_mvcc_revision(const struct kt_mvcc *s);         /* current main revision */
int64_t kt_mvcc_compact_revision(const struct kt_mvcc *s); /* 0 if never compacted */
uint64_t kt_mvcc_size_bytes(const struct kt_mvcc *s);      /* quota accounting ("db size") */
uint64_t kt_mvcc_keys(const struct kt_mvcc *s);            /* live keys */
bool kt_mvcc_nospace(const struct kt_mvcc *s);             /* NOSPACE alarm raised */
void kt_mvcc_disarm_nospace(struct kt_mvcc *s);

/* Validate an op before it is proposed: empty key, range_end < key, txn with
 * > KT_MAX_TXN_OPS ops or a key written twice (EDUPKEY), bad sort/compare enum,
 * write while NOSPACE. Returns 0 or a KT_E* code with e filled. */
int kt_mvcc_check(const struct kt_mvcc *s, const struct kt_request_op *op, struct kt_err *e);

/* Read. Errors: ECOMPACTED, EFUTUREREV, EINVAL. Result arrays come from `a`. */
int kt_mvcc_range(const struct kt_mvcc *s, const struct kt_range_req *r, struct kt_arena *a,
                  struct kt_range_resp *out, struct kt_err *e);

/* Apply one op (put, delete, txn; a range is answered too). Writes advance
 * the revision by one (all ops of a txn share it, with increasing sub
 * revisions); an op that changes nothing (delete of no key, read-only txn)
 * does not advance it. Errors leave the store unchanged. */
int kt_mvcc_apply(struct kt_mvcc *s, const struct kt_request_op *op, struct kt_arena *a,
                  struct kt_response_op *out, struct kt_err *e);

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
 * only add revisions > at_rev); compact steps are not (the caller holds them
 * back while a snapshot is in progress). Returns 1 if more keys remain (and
 * sets *cursor, allocated from `a`), 0 when done, or a negative value if fn
 * returned non-zero. */
struct kt_mvcc_cursor {
  struct kt_bytes key;
  bool started;
};
int kt_mvcc_iter(const struct kt_mvcc *s, int64_t at_rev, struct kt_mvcc_cursor *cursor,
                 size_t max_keys, struct kt_arena *a,
                 int (*fn)(void *arg, const struct kt_kvrev *rec), void *arg);

/* Restore: feed revisions in the order kt_mvcc_iter produces them into an
 * empty store, then set the revisions. Copies the bytes. */
int kt_mvcc_restore_rec(struct kt_mvcc *s, const struct kt_kvrev *rec, struct kt_err *e);
void kt_mvcc_restore_done(struct kt_mvcc *s, int64_t revision, int64_t compact_revision);

/* A hash of the state at the current revision, for tests and HashKV. */
uint64_t kt_mvcc_hash(const struct kt_mvcc *s);

#endif
