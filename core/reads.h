/* core/reads.h — when a member may answer a linearizable read (ReadIndex).
 *
 * Owns: the numbering of a member's read batches and what this life of the
 * member has heard back from raft about them. Not the reads themselves: the
 * caller keeps its waiting reads in arrival order, each with the batch it
 * joined (core/node.c keeps client requests, the simulation keeps clients).
 * Pure: libc and core/raft only, so the simulation runs this very code.
 *
 * Data flow, one member, one loop turn:
 *   a linearizable read arrives (the member serves) → batch = kt_reads_join
 *   end of the turn: kt_reads_ask → one kt_raft_read_index for the open
 *     batch, ctx = tag | batch (raft refuses without a leader: that batch
 *     fails, the caller answers its reads with the error)
 *   raft's ready hands read states → kt_reads_answered(rs) for each
 *   after applying: the oldest waiting read is served while
 *     kt_reads_ready(batch, applied index) holds, then the next
 *
 * The rule (what makes a read linearizable): a read of batch B is ready only
 * after a read state for B or a later batch of THIS life arrived (a later
 * batch's index was taken after B's reads arrived, so it covers them too),
 * and the member applied that state's index. "Answered" is a flag set by an
 * arrival, never a comparison that holds by default: before any read state
 * of this life arrived, nothing is ready. Two things make a context belong
 * to this life: the tag (random per life, set by kt_reads_init: a restarted
 * member may get read states for contexts it asked before it died, from a
 * leader that kept them) and the batch number, which must be one this life
 * has asked for.
 *
 * Batches count from `first` (random per life too, at least 1: two lives
 * that drew the same tag would also need overlapping batch numbers to take
 * one's read state for the other's); tag's low 40 bits are 0 (the batch
 * counter lives there), and tag != 0.
 */
#ifndef KT_READS_H
#define KT_READS_H

#include "raft.h"

#define KT_READS_BATCH_MASK ((1ull << 40) - 1)
#define KT_READS_FIRST_MAX (1ull << 38) /* leaves 3 * 2^38 batches to a life */

struct kt_reads {
  uint64_t tag;                    /* this life's contexts: tag | batch */
  uint64_t first;                  /* this life's first batch */
  uint64_t open;                   /* the batch new reads join */
  bool open_used;                  /* it has reads: ask at the end of the turn */
  bool answered;                   /* a read state of this life arrived */
  uint64_t ready_batch, ready_idx; /* the newest batch answered, its read index */
  uint64_t asked, states, stale;   /* counters: batches asked, states taken, ignored */
};

/* A new life: tag is random per life (high 24 bits; low 40 zero; not 0),
 * and so is first, its first batch (1 <= first <= KT_READS_FIRST_MAX). */
void kt_reads_init(struct kt_reads *q, uint64_t tag, uint64_t first);
/* The batch a read arriving now joins. */
uint64_t kt_reads_join(struct kt_reads *q);
/* End of a turn: if the open batch has reads, ask raft for its read index
 * and open the next batch. Returns 0, or raft's refusal (KT_ENOLEADER):
 * then *failed is the batch whose reads must be answered with that error
 * (they never become ready). */
int kt_reads_ask(struct kt_reads *q, struct kt_raft *r, uint64_t *failed);
/* True when a batch is open with reads in it (kt_reads_ask has work). */
bool kt_reads_pending_ask(const struct kt_reads *q);
/* A read state from raft's ready batch. One of another life, or for a
 * batch not asked, is ignored (counted in `stale`). */
void kt_reads_answered(struct kt_reads *q, const struct kt_raft_read_state *rs);
/* May a read of `batch` be served from a store that applied `applied`? */
bool kt_reads_ready(const struct kt_reads *q, uint64_t batch, uint64_t applied);

/* Whether a member serves clients after a ready batch rd: a leader once it
 * has applied lead_index (the first entry of its term: BECAME_LEADER's
 * index), a follower while it knows a leader. Until then requests wait
 * (core/node.c's defer queue); serializable reads and status do not. */
bool kt_reads_serving(const struct kt_raft_ready *rd, uint64_t lead_index, uint64_t applied);

/* The simulation's demonstration of the stale-read bug fixed in 2026-11
 * (issue 24): 1 = batches counted from 0 and a batch counted as answered
 * when its number is <= that of the newest answered one, which starts at 0,
 * so the first batch of a life is served at once from the local state.
 * Tests only; 0 in every real member. */
extern int kt_reads_test_bug;

#endif
