/* core/reads.c — see reads.h for the rule. */
#include "reads.h"

int kt_reads_test_bug;

void kt_reads_init(struct kt_reads *q, uint64_t tag, uint64_t first) {
  kt_assert(tag != 0 && (tag & KT_READS_BATCH_MASK) == 0);
  kt_assert(first >= 1 && first <= KT_READS_FIRST_MAX);
  *q = (struct kt_reads){.tag = tag, .first = first, .open = kt_reads_test_bug == 1 ? 0 : first};
}

uint64_t kt_reads_join(struct kt_reads *q) {
  q->open_used = true;
  return q->open;
}

bool kt_reads_pending_ask(const struct kt_reads *q) { return q->open_used; }

int kt_reads_ask(struct kt_reads *q, struct kt_raft *r, uint64_t *failed) {
  if (!q->open_used)
    return 0;
  uint64_t batch = q->open++;
  kt_assert(q->open <= KT_READS_BATCH_MASK);
  q->open_used = false;
  q->asked++;
  int rc = kt_raft_read_index(r, q->tag | batch);
  if (rc)
    *failed = batch;
  return rc;
}

void kt_reads_answered(struct kt_reads *q, const struct kt_raft_read_state *rs) {
  uint64_t batch = rs->context & KT_READS_BATCH_MASK;
  if (kt_reads_test_bug == 1) { /* the old numeric rule, see reads.h */
    if (batch > q->ready_batch) {
      q->ready_batch = batch;
      q->ready_idx = rs->index;
    }
    q->states++;
    return;
  }
  if ((rs->context & ~KT_READS_BATCH_MASK) != q->tag || batch < q->first || batch >= q->open) {
    q->stale++; /* asked by another life of this member, or never asked */
    return;
  }
  q->states++;
  if (!q->answered || batch > q->ready_batch) {
    q->answered = true;
    q->ready_batch = batch;
    q->ready_idx = rs->index;
  }
}

bool kt_reads_ready(const struct kt_reads *q, uint64_t batch, uint64_t applied) {
  if (kt_reads_test_bug == 1)
    return batch <= q->ready_batch && applied >= q->ready_idx;
  return q->answered && batch <= q->ready_batch && applied >= q->ready_idx;
}

bool kt_reads_serving(const struct kt_raft_ready *rd, uint64_t lead_index, uint64_t applied) {
  if (rd->role == KT_RAFT_LEADER)
    return lead_index && applied >= lead_index;
  return rd->role == KT_RAFT_FOLLOWER && rd->leader != 0;
}
