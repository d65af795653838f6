/* test/sim/linz.h — a linearizability checker for etcd-style KV histories.
 *
 * A simulator records what its clients did (kt_linz_call when a request is
 * sent, kt_linz_return / kt_linz_fail / kt_linz_unknown when its fate is
 * known), then kt_linz_check decides whether some total order of the
 * operations (a) respects real time — an op that returned before another
 * was called comes first — and (b) replayed on the model below gives every
 * recorded result. Deterministic: no randomness, no clock, no I/O.
 *
 * Model: etcd's KV over a small key space (at most KT_LINZ_MAX_KEYS keys, C
 * strings; values are C strings). State: the store revision, and per key
 * absent or (value, create_revision, mod_revision, version). Starts with
 * every key absent at start_revision (ketch: 1, the first write gets 2).
 *   put(k, v)     revision + 1; k: created (create = mod = rev, version 1)
 *                 or updated (mod = rev, version + 1). Result: header
 *                 revision (the new one); prev kv when prev_kv was asked.
 *   delete(k)     deleted 1 and revision + 1 if k is live; else deleted 0 and
 *                 the revision stays. Result: deleted, header revision.
 *   get(k)        Result: the kv (or absent) and the header revision.
 *   txn           compares (all must hold; target value / version /
 *                 create_revision / mod_revision; =, !=, <, >; etcd's rule:
 *                 an absent key compares as zeroes, except that a VALUE
 *                 compare on it is false), then the success or failure ops
 *                 (put / delete / get) in order at ONE revision (+1 iff some
 *                 op changed a key); gets see the txn's earlier writes.
 *                 Result: succeeded, header revision, one kv per get of the
 *                 taken branch, in order.
 * Every result carries the header revision and it is checked exactly: the
 * store revision just after the op took effect (a read: the revision it read
 * at). Leases are NOT modelled: every change of the checked keys and every
 * revision bump must be an op of the history (a lease revoke that deletes
 * keys can be recorded as a txn of deletes; an expiry nobody recorded makes
 * revisions jump and the history fail).
 *
 * Outcomes:
 *   returned (kt_linz_return)   took effect once, between call and return,
 *                               and produced exactly this result.
 *   failed (kt_linz_fail)       a definite error: nothing was applied; the
 *                               op is dropped from the history.
 *   unknown (kt_linz_unknown,   timed out, leader lost: took effect once at
 *   or never resolved)          any point after its call, or never
 *                               (porcupine's return time = infinity); its
 *                               result is not checked. An unknown get has
 *                               no effect and nothing to check: dropped.
 *   serializable get            NOT linearizable by definition (served from
 *                               one member's applied state, may be stale). It
 *                               is checked with a weaker rule: its result must
 *                               equal the model state at its header revision
 *                               in the same order, at a point before it
 *                               returned — i.e. it is an op whose call time
 *                               is minus infinity. It may be arbitrarily
 *                               stale, and per-client monotonicity is not
 *                               checked (ketch promises none across members).
 *
 * Real time: events are ordered by (time, order of recording); a simulator
 * that records events as they happen can pass its clock, ties then keep the
 * recording order (a return recorded before a call precedes it).
 *
 * The search (Wing & Gong, with Lowe's memoization, as porcupine): the call
 * and return events in a doubly linked list; depth-first, it linearizes the
 * first pending call whose model step gives its recorded result, removing its
 * two events ("lift"); reaching a return event whose op is not linearized
 * means a dead end: undo the last linearized op and try the next candidate.
 * A cache of (bitset of linearized ops, model state) pairs already explored
 * prunes revisits. A get that fits when it is tried is placed there with no
 * alternative (if some order places it later, moving it earlier keeps that
 * order valid: it changes nothing, and all that must precede it is placed),
 * so gets at one revision — serializable ones are callable from the start —
 * do not multiply the orders tried. Reaching the return event of an unknown-outcome op (they
 * sort last) means every op with a result is placed: the rest never happened.
 * Budget: at most max_steps model steps, then GAVE_UP (never a pass).
 *
 * Why one global model, not per-key partitions: porcupine partitions a
 * history by key when the model is P-compositional (a register per key).
 * This one is not: every result carries the GLOBAL revision, so a put on
 * key a reporting revision 7 says exactly six revisions precede it counting
 * writes to all keys; per-key sub-histories cannot see that (nor txns that
 * span keys). Checking revisions by a separate argument would need the
 * unknown-outcome writes' positions, which is the search itself. Instead the
 * global revision makes the global search cheap: a returned write can only
 * be placed when the model revision is exactly its header revision - 1 and a
 * read only when it equals its header revision, so at almost every step one
 * candidate fits and the search is close to linear (test/unit/linz_test.c
 * prints the time for a 300-op, 8-client history). Branching comes from
 * unknown-outcome writes and reads that do not change the revision; the
 * cache and the step budget bound it.
 *
 * Violation reports name the longest order found, the model state after it,
 * the op that returned without being placeable, and why each candidate
 * failed ("#12 c3 get(a) -> "1" mod 5 ver 1 rev 5: model has "2" ...").
 *
 * Ownership: the history copies every string and array it is given.
 * Limits: KT_LINZ_MAX_KEYS keys, KT_LINZ_MAX_TXN_OPS compares / ops per
 * branch, enforced with kt_assert (a simulator bug, not a verdict).
 */
#ifndef KT_LINZ_H
#define KT_LINZ_H

#include "../../core/ops.h"

#define KT_LINZ_MAX_KEYS 64
#define KT_LINZ_MAX_TXN_OPS 16

enum kt_linz_kind { KT_LINZ_PUT = 1, KT_LINZ_DELETE, KT_LINZ_GET, KT_LINZ_TXN };

/* A txn compare on one key. target: KT_CMP_VALUE / VERSION / CREATE / MOD;
 * result: KT_CMP_EQUAL / NOT_EQUAL / LESS / GREATER (core/ops.h). */
struct kt_linz_cmp {
  const char *key;
  uint8_t target, result;
  const char *value; /* VALUE */
  int64_t num;       /* VERSION, CREATE, MOD */
};

/* A txn branch op: KT_LINZ_PUT (key, value), KT_LINZ_DELETE (key) or
 * KT_LINZ_GET (key; its kv is a result). */
struct kt_linz_txop {
  uint8_t kind;
  const char *key, *value;
};

struct kt_linz_op {
  uint8_t kind; /* enum kt_linz_kind */
  const char *key, *value;
  bool prev_kv;      /* put: the result carries the previous kv */
  bool serializable; /* get: see "serializable get" above */
  const struct kt_linz_cmp *cmp;
  const struct kt_linz_txop *then, *els; /* success, failure */
  uint32_t n_cmp, n_then, n_els;
};

/* A key-value as a result shows it; present false = absent (other fields
 * then ignored). */
struct kt_linz_kv {
  bool present;
  const char *value;
  int64_t create_revision, mod_revision, version;
};

struct kt_linz_result {
  int64_t revision;              /* header revision: every kind */
  int64_t deleted;               /* delete */
  bool succeeded;                /* txn */
  struct kt_linz_kv kv;          /* get; put with prev_kv: the previous kv */
  const struct kt_linz_kv *gets; /* txn: one per get of the taken branch */
  uint32_t n_gets;
};

struct kt_linz_hist;

struct kt_linz_hist *kt_linz_new(int64_t start_revision);
void kt_linz_free(struct kt_linz_hist *h);

/* Records a call; returns the op's id (0, 1, ...) for the return. */
uint32_t kt_linz_call(struct kt_linz_hist *h, int client, int64_t time,
                      const struct kt_linz_op *op);
/* The op returned this result at `time`. */
void kt_linz_return(struct kt_linz_hist *h, uint32_t id, int64_t time,
                    const struct kt_linz_result *res);
/* The client got a definite error: nothing was applied (dropped). */
void kt_linz_fail(struct kt_linz_hist *h, uint32_t id);
/* Outcome unknown (the same as never resolving it). */
void kt_linz_unknown(struct kt_linz_hist *h, uint32_t id);

enum kt_linz_verdict { KT_LINZ_OK = 0, KT_LINZ_VIOLATION = 1, KT_LINZ_GAVE_UP = 2 };

struct kt_linz_report {
  int verdict;                   /* enum kt_linz_verdict */
  uint64_t steps;                /* model steps taken */
  uint32_t ops, unknown, sreads; /* ops checked (failed ones dropped), of them
                                    unknown-outcome, serializable gets */
  char explain[4096];            /* VIOLATION / GAVE_UP: for a person */
};

/* Checks the history (which it does not change; call it again after more
 * events if you like). max_steps 0 = 5,000,000. Returns the verdict. */
int kt_linz_check(const struct kt_linz_hist *h, uint64_t max_steps, struct kt_linz_report *out);

/* "#12 c3 get(a) -> "1" (c 4, m 5, v 1) rev 5" into buf; for tests and
 * explanations. Returns buf. */
const char *kt_linz_describe(const struct kt_linz_hist *h, uint32_t id, char *buf, size_t n);

#endif
