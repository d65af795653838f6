/* test/unit/reads_test.c — core/reads: when a linearizable read may be
 * served. The rule under test: nothing is ready before a read state of
 * this life arrived; a state covers its batch and the earlier ones, once
 * its index is applied; states of another life or of batches never asked
 * are ignored. */
#include <stdlib.h>

#include "../../core/reads.h"
#include "test.h"

#define TAG (7ull << 40)
#define FIRST 1000 /* this life's first batch */

static struct kt_raft_read_state state(uint64_t tag, uint64_t batch, uint64_t index) {
  return (struct kt_raft_read_state){.index = index, .context = tag | batch};
}

/* A follower of a 3-voter cluster that knows no leader: raft refuses reads. */
static struct kt_raft *leaderless(void) {
  uint64_t voters[3] = {1, 2, 3};
  struct kt_raft_config cfg = {.id = 1,
                               .voters = voters,
                               .n_voters = 3,
                               .election_ticks = 10,
                               .heartbeat_ticks = 1,
                               .max_msg_bytes = 1 << 20,
                               .max_inflight_msgs = 16,
                               .seed = 1};
  struct kt_raft *r = NULL;
  kt_assert(kt_raft_new(&cfg, &r) == 0);
  return r;
}

/* The same member once it heard a heartbeat from leader 2: reads go to it. */
static struct kt_raft *following(void) {
  struct kt_raft *r = leaderless();
  struct kt_raft_msg hb = {.type = KT_RAFT_MSG_HEARTBEAT, .from = 2, .to = 1, .term = 1};
  kt_raft_step(r, &hb);
  return r;
}

/* The bug of issue 24: a fresh life's first batch was ready at once. */
TEST(first_batch_waits_for_its_read_state) {
  struct kt_reads q;
  kt_reads_init(&q, TAG, FIRST);
  uint64_t b = kt_reads_join(&q);
  CHECK_EQ(b, FIRST);
  CHECK(!kt_reads_ready(&q, b, 0));
  CHECK(!kt_reads_ready(&q, b, 1000000));
  CHECK(kt_reads_pending_ask(&q));
}

TEST(a_state_covers_its_batch_and_earlier_ones_once_applied) {
  struct kt_raft *r = following();
  struct kt_reads q;
  kt_reads_init(&q, TAG, FIRST);
  uint64_t failed = 0;
  uint64_t b1 = kt_reads_join(&q);
  CHECK_EQ(kt_reads_ask(&q, r, &failed), 0);
  uint64_t b2 = kt_reads_join(&q);
  CHECK_EQ(kt_reads_ask(&q, r, &failed), 0);
  uint64_t b3 = kt_reads_join(&q); /* open, not asked */
  kt_raft_free(r);
  struct kt_raft_read_state s2 = state(TAG, b2, 50);
  kt_reads_answered(&q, &s2);
  CHECK(!kt_reads_ready(&q, b1, 49));
  CHECK(kt_reads_ready(&q, b1, 50));
  CHECK(kt_reads_ready(&q, b2, 50));
  CHECK(!kt_reads_ready(&q, b3, 1000));
  /* an older batch's state afterwards changes nothing */
  struct kt_raft_read_state s1 = state(TAG, b1, 40);
  kt_reads_answered(&q, &s1);
  CHECK(!kt_reads_ready(&q, b1, 45));
  CHECK_EQ(q.states, 2);
}

TEST(states_of_another_life_or_never_asked_are_ignored) {
  struct kt_reads q;
  kt_reads_init(&q, TAG, FIRST);
  uint64_t b = kt_reads_join(&q);
  /* the leader answers a context this member asked before it restarted */
  struct kt_raft_read_state old = state(9ull << 40, 500, 3);
  kt_reads_answered(&q, &old);
  CHECK(!kt_reads_ready(&q, b, 3));
  /* a batch of this tag that was never asked (the open one, or beyond) */
  struct kt_raft_read_state open = state(TAG, b, 3);
  kt_reads_answered(&q, &open);
  struct kt_raft_read_state zero = state(TAG, 0, 3);
  kt_reads_answered(&q, &zero);
  /* the same tag drawn by an earlier life: its batches were below FIRST */
  struct kt_raft_read_state before = state(TAG, FIRST - 1, 3);
  kt_reads_answered(&q, &before);
  CHECK(!kt_reads_ready(&q, b, 3));
  CHECK_EQ(q.stale, 4);
  CHECK_EQ(q.states, 0);
}

TEST(ask_without_leader_fails_that_batch_only) {
  struct kt_raft *r = leaderless();
  struct kt_reads q;
  kt_reads_init(&q, TAG, FIRST);
  uint64_t failed = 0;
  CHECK_EQ(kt_reads_ask(&q, r, &failed), 0); /* nothing to ask */
  uint64_t b = kt_reads_join(&q);
  CHECK_EQ(kt_reads_ask(&q, r, &failed), KT_ENOLEADER);
  CHECK_EQ(failed, b);
  CHECK(!kt_reads_pending_ask(&q));
  uint64_t b2 = kt_reads_join(&q);
  CHECK(b2 == b + 1);
  CHECK_EQ(q.asked, 1);
  kt_raft_free(r);
}

/* The old rule, kept for the simulation's demonstration, is the bug. */
TEST(old_rule_serves_first_batch_at_once) {
  kt_reads_test_bug = 1;
  struct kt_reads q;
  kt_reads_init(&q, TAG, FIRST);
  uint64_t b = kt_reads_join(&q);
  bool ready = kt_reads_ready(&q, b, 0);
  kt_reads_test_bug = 0;
  CHECK(ready);
}

TEST(serving_gate) {
  struct kt_raft_ready rd = {.role = KT_RAFT_LEADER};
  CHECK(!kt_reads_serving(&rd, 0, 10));
  CHECK(!kt_reads_serving(&rd, 11, 10));
  CHECK(kt_reads_serving(&rd, 10, 10));
  rd.role = KT_RAFT_FOLLOWER;
  CHECK(!kt_reads_serving(&rd, 0, 10));
  rd.leader = 2;
  CHECK(kt_reads_serving(&rd, 0, 0));
  rd.role = KT_RAFT_CANDIDATE;
  CHECK(!kt_reads_serving(&rd, 0, 0));
}
