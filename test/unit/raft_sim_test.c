/* test/unit/raft_sim_test.c — runs the deterministic cluster simulation
 * (test/sim/sim.c: real raft + real state machine + WAL record codec per
 * member, clients checked for linearizability) over many seeds in
 * `make test`: 3000 seeds in five configurations (3 and 5 members with
 * crashes; 3 members crashing every ~25 ticks; membership changes with 3
 * and 5), then the injected bugs that the checkers must catch: raft bugs
 * (KT_SIM_BUG values, kt_raft_test_bug) found by a raft check, member bugs
 * (enum sim_member_bug) found by the linearizability checker, the watch
 * check or the lease checks.
 *
 *   KT_SIM_SEED=S      replay exactly one seed (every configuration), with
 *                      the trace if KT_SIM_VERBOSE=1
 *   KT_SIM_SEEDS=N     seeds per configuration (default below; make sim-soak)
 *   KT_SIM_BUG=B       run with injected raft bug B (see kt_raft_test_bug)
 * A failing seed prints "seed S n=N ...: why" and the replay command; a
 * linearizability violation prints the checker's explanation. Each
 * configuration prints its totals (entries, elections, crashes, requests
 * applied, store hashes compared, WAL tails cut, client ops checked, watch
 * events checked, leases granted, renewed and revoked). */
#include <stdlib.h>

#include "../sim/sim.c"
#include "test.h"

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* Runs seeds [first, first+count) for n members; returns failures. */
static int run_seeds_x(int n, bool crashes, uint32_t crash_x10, bool conf, uint64_t first,
                       uint64_t count, int ticks) {
  int failures = 0;
  struct sim_stats tot = {0};
  kt_raft_test_bug = (int)env_u64("KT_SIM_BUG", 0); /* demo: see the checkers fire */
  for (uint64_t seed = first; seed < first + count; seed++) {
    struct sim_opts o = {.seed = seed,
                         .n = n,
                         .ticks = ticks,
                         .crashes = crashes,
                         .crash_x10 = crash_x10,
                         .conf_changes = conf,
                         .verbose = getenv("KT_SIM_VERBOSE") != NULL};
    struct sim_stats st;
    char why[8192];
    if (sim_run(&o, &st, why, sizeof why)) {
      printf("seed %llu n=%d crash_x10=%u conf=%d: %s\n  replay: make sim SEED=%llu, or "
             "KT_SIM_SEED=%llu KT_SIM_VERBOSE=1 build/test/raft_sim_test %s\n",
             (unsigned long long)seed, n, crash_x10, conf, why, (unsigned long long)seed,
             (unsigned long long)seed,
             conf        ? "sim_membership_changes"
             : n == 5    ? "sim_5_members"
             : crash_x10 ? "sim_3_members_crashy"
                         : "sim_3_members");
      if (++failures >= 5)
        break;
    }
    tot.committed += st.committed;
    tot.elections += st.elections;
    tot.crashes += st.crashes;
    tot.msgs += st.msgs;
    tot.reads += st.reads;
    tot.transfers += st.transfers;
    tot.snapshots_sent += st.snapshots_sent;
    tot.installs += st.installs;
    tot.conf_proposed += st.conf_proposed;
    tot.conf_applied += st.conf_applied;
    tot.conf_invalid += st.conf_invalid;
    tot.conf_as_normal += st.conf_as_normal;
    tot.leader_removed += st.leader_removed;
    tot.applied_reqs += st.applied_reqs;
    tot.hashes_checked += st.hashes_checked;
    tot.compactions += st.compactions;
    tot.auth_proposed += st.auth_proposed;
    tot.auth_applied += st.auth_applied;
    tot.wal_torn_cut += st.wal_torn_cut;
    tot.ops += st.ops;
    tot.ops_ok += st.ops_ok;
    tot.ops_failed += st.ops_failed;
    tot.ops_unknown += st.ops_unknown;
    tot.ops_never_committed += st.ops_never_committed;
    tot.sreads += st.sreads;
    tot.linz_steps += st.linz_steps;
    tot.linz_gave_up += st.linz_gave_up;
    tot.watch_created += st.watch_created;
    tot.watch_resumed += st.watch_resumed;
    tot.watch_events += st.watch_events;
    tot.watch_compacted += st.watch_compacted;
    tot.watch_moved_aside += st.watch_moved_aside;
    tot.leases_granted += st.leases_granted;
    tot.lease_renewals += st.lease_renewals;
    tot.lease_renewals_fwd += st.lease_renewals_fwd;
    tot.lease_stale_renewals += st.lease_stale_renewals;
    tot.lease_stale_unhonored += st.lease_stale_unhonored;
    tot.lease_revoked += st.lease_revoked;
    tot.lease_keys_revoked += st.lease_keys_revoked;
  }
  fprintf(stderr,
          "sim n=%d crashes=%d seeds=%llu: committed=%llu elections=%llu crashes=%llu "
          "msgs=%llu reads=%llu transfers=%llu snapshots sent=%llu installed=%llu\n",
          n, crashes, (unsigned long long)count, (unsigned long long)tot.committed,
          (unsigned long long)tot.elections, (unsigned long long)tot.crashes,
          (unsigned long long)tot.msgs, (unsigned long long)tot.reads,
          (unsigned long long)tot.transfers, (unsigned long long)tot.snapshots_sent,
          (unsigned long long)tot.installs);
  fprintf(stderr,
          "  state machine: requests applied=%llu store hashes compared=%llu compactions=%llu "
          "auth changes proposed=%llu applied=%llu; WAL torn tails cut at restart=%llu\n"
          "  clients: ops checked=%llu (answered=%llu refused=%llu unknown=%llu, of unknown "
          "never committed=%llu; serializable gets=%llu) linz steps=%llu gave up=%llu\n"
          "  watches: created=%llu resumed=%llu events checked=%llu cancelled-compacted=%llu "
          "slow moved aside=%llu\n"
          "  leases: granted=%llu renewed=%llu (forwarded=%llu, by a stale leader=%llu) "
          "expired+revoked=%llu keys deleted=%llu; stale renewals not honored (without "
          "check_quorum)=%llu\n",
          (unsigned long long)tot.applied_reqs, (unsigned long long)tot.hashes_checked,
          (unsigned long long)tot.compactions, (unsigned long long)tot.auth_proposed,
          (unsigned long long)tot.auth_applied, (unsigned long long)tot.wal_torn_cut,
          (unsigned long long)tot.ops, (unsigned long long)tot.ops_ok,
          (unsigned long long)tot.ops_failed, (unsigned long long)tot.ops_unknown,
          (unsigned long long)tot.ops_never_committed, (unsigned long long)tot.sreads,
          (unsigned long long)tot.linz_steps, (unsigned long long)tot.linz_gave_up,
          (unsigned long long)tot.watch_created, (unsigned long long)tot.watch_resumed,
          (unsigned long long)tot.watch_events, (unsigned long long)tot.watch_compacted,
          (unsigned long long)tot.watch_moved_aside, (unsigned long long)tot.leases_granted,
          (unsigned long long)tot.lease_renewals, (unsigned long long)tot.lease_renewals_fwd,
          (unsigned long long)tot.lease_stale_renewals, (unsigned long long)tot.lease_revoked,
          (unsigned long long)tot.lease_keys_revoked,
          (unsigned long long)tot.lease_stale_unhonored);
  if (conf)
    fprintf(stderr,
            "  membership: proposed=%llu applied=%llu refused-invalid=%llu came-back-normal=%llu "
            "leader-removed=%llu\n",
            (unsigned long long)tot.conf_proposed, (unsigned long long)tot.conf_applied,
            (unsigned long long)tot.conf_invalid, (unsigned long long)tot.conf_as_normal,
            (unsigned long long)tot.leader_removed);
  return failures;
}

static int run_seeds(int n, bool crashes, uint64_t first, uint64_t count, int ticks) {
  return run_seeds_x(n, crashes, 0, false, first, count, ticks);
}

TEST(sim_3_members) {
  uint64_t one = env_u64("KT_SIM_SEED", 0);
  if (one) {
    CHECK_EQ(run_seeds(3, true, one, 1, 3000), 0);
    return;
  }
  CHECK_EQ(run_seeds(3, true, 1, env_u64("KT_SIM_SEEDS", 1200), 3000), 0);
}

TEST(sim_5_members) {
  uint64_t one = env_u64("KT_SIM_SEED", 0);
  if (one) {
    CHECK_EQ(run_seeds(5, true, one, 1, 3000), 0);
    return;
  }
  CHECK_EQ(run_seeds(5, true, 1001, env_u64("KT_SIM_SEEDS", 1200) / 2, 3000), 0);
}

/* Crashes every ~25 ticks: persistence ordering under stress. */
TEST(sim_3_members_crashy) {
  uint64_t one = env_u64("KT_SIM_SEED", 0);
  if (one) {
    CHECK_EQ(run_seeds_x(3, true, 40, false, one, 1, 3000), 0);
    return;
  }
  CHECK_EQ(run_seeds_x(3, true, 40, false, 5001, env_u64("KT_SIM_SEEDS", 1200) / 4, 3000), 0);
}

/* Random one-at-a-time membership changes (3..5 voters, learners, spares
 * joining empty, removals of the leader) under all the faults above. */
TEST(sim_membership_changes) {
  uint64_t one = env_u64("KT_SIM_SEED", 0);
  if (one) {
    CHECK_EQ(run_seeds_x(3, true, 0, true, one, 1, 3000), 0);
    CHECK_EQ(run_seeds_x(5, true, 0, true, one, 1, 3000), 0);
    return;
  }
  uint64_t k = env_u64("KT_SIM_SEEDS", 1200) / 2;
  CHECK_EQ(run_seeds_x(3, true, 0, true, 8001, k, 3000), 0);
  CHECK_EQ(run_seeds_x(5, true, 0, true, 9001, k / 2, 3000), 0);
}

/* The checkers catch real bugs: each injected bug must be found. */
static int bug_found_x(int bug, int n, bool conf, uint64_t seeds) {
  kt_raft_test_bug = bug;
  int found = 0;
  for (uint64_t seed = 1; seed <= seeds && !found; seed++) {
    struct sim_opts o = {.seed = seed,
                         .n = n,
                         .ticks = 3000,
                         .crashes = true,
                         .crash_x10 = conf ? 0 : 40,
                         .conf_changes = conf};
    char why[8192];
    /* a safety check must fire, not the liveness one */
    if (sim_run(&o, NULL, why, sizeof why) && !strstr(why, "no progress")) {
      fprintf(stderr, "bug %d found by seed %llu: %s\n", bug, (unsigned long long)seed, why);
      found = 1;
    }
  }
  kt_raft_test_bug = 0;
  return found;
}

static int bug_found(int bug, int n, uint64_t seeds) { return bug_found_x(bug, n, false, seeds); }

TEST(sim_catches_commit_without_quorum) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found(2, 3, 50));
}

TEST(sim_catches_ack_before_persist) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found(1, 3, 200));
}

TEST(sim_catches_vote_before_persist) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found(3, 3, 300));
}

TEST(sim_catches_read_without_quorum_check) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found(4, 3, 300));
}

TEST(sim_catches_learner_counted_in_quorum) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found_x(5, 3, true, 300));
}

TEST(sim_catches_non_voter_campaigning) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found_x(7, 3, true, 300));
}
TEST(sim_catches_two_conf_changes_in_flight) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(bug_found_x(6, 3, true, 300));
}

/* Bugs in the member above raft, that only the client history, the watch
 * streams or the lease promises show: the checker named by `by` (a
 * substring of its verdict) must fail some seed, and the failure must be
 * its verdict. Returns the first seed found (0: none). */
static uint64_t member_bug_found_by(int bug, int n, uint32_t crash_x10, uint64_t seeds,
                                    const char *by) {
  for (uint64_t seed = 1; seed <= seeds; seed++) {
    struct sim_opts o = {.seed = seed,
                         .n = n,
                         .ticks = 3000,
                         .crashes = true,
                         .crash_x10 = crash_x10,
                         .member_bug = bug};
    char why[8192];
    if (sim_run(&o, NULL, why, sizeof why)) {
      bool ok = strstr(why, by) != NULL;
      fprintf(stderr, "member bug %d found by seed %llu%s: %.*s\n", bug, (unsigned long long)seed,
              ok ? "" : " (NOT by the expected checker)", ok ? 1500 : 400, why);
      return ok ? seed : 0;
    }
  }
  return 0;
}

static uint64_t member_bug_found(int bug, int n, uint32_t crash_x10, uint64_t seeds) {
  return member_bug_found_by(bug, n, crash_x10, seeds, "not linearizable");
}

/* Linearizable gets answered from the member's own store, without
 * ReadIndex: a follower behind, or a deposed leader, answers stale values. */
TEST(sim_catches_linearizable_get_without_read_index) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(member_bug_found(SIM_BUG_LOCAL_READ, 3, 0, 20) != 0);
}

/* A write answered with the result of whatever entry the member applies
 * at the index its proposal got, without checking the entry is its own
 * (term): after a leader change the client hears another request's
 * outcome, and its own write may never happen. */
TEST(sim_catches_write_answered_by_index_alone) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  CHECK(member_bug_found(SIM_BUG_MATCH_BY_INDEX, 3, 40, 50) != 0);
}

/* Issue 24: a member numbered its read batches from 0 and counted a batch
 * as answered when its number was <= the newest answered one, which also
 * started at 0; so the first batch of linearizable reads of each life was
 * served at once, from whatever the member had applied (kt_reads_test_bug
 * 1 brings that rule back, core/reads.h). A member restarted with an old
 * log, holding a read sent to it while it was down, answers it with a
 * value from before its crash. The regression seed (3 members, crashes
 * every ~25 ticks) must fail with the old rule, by the linearizability
 * checker, and pass with the new one. */
#define READS_REGRESSION_SEED 1
TEST(sim_catches_first_read_batch_served_at_once) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  struct sim_opts o = {
      .seed = READS_REGRESSION_SEED, .n = 3, .ticks = 3000, .crashes = true, .crash_x10 = 40};
  char why[8192];
  kt_reads_test_bug = 1;
  int rc = sim_run(&o, NULL, why, sizeof why);
  kt_reads_test_bug = 0;
  fprintf(stderr, "old read rule, seed %d: %.1200s\n", READS_REGRESSION_SEED, rc ? why : "passed");
  CHECK(rc != 0 && strstr(why, "not linearizable"));
  CHECK_EQ(sim_run(&o, NULL, why, sizeof why), 0);
}

/* Bugs that the watch check and the lease checks must find (each its own
 * verdict, within 20 seeds). */
TEST(sim_catches_watch_and_lease_bugs) {
  if (env_u64("KT_SIM_SEED", 0))
    return;
  static const struct {
    int bug;
    const char *by;
  } bugs[] = {
      /* the hub misses an event now and then (never published to it): a gap */
      {SIM_BUG_WATCH_SKIP, "watch ["},
      /* the hub gets an event twice now and then: a duplicate */
      {SIM_BUG_WATCH_DUP, "watch ["},
      /* the leader answers a keep-alive without renewing: the lease expires
       * (and is revoked) before a TTL since that keep-alive has passed */
      {SIM_BUG_LEASE_NO_RENEW, "lease"},
      /* a new leader does not extend leases by an election timeout: it
       * expires a lease nobody could renew during the election too early */
      {SIM_BUG_LEASE_NO_EXTEND, "lease"},
  };
  for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
    CHECK(member_bug_found_by(bugs[i].bug, 3, 0, 20, bugs[i].by) != 0);
}

/* A seed replays exactly: two runs of one seed agree on every count. */
TEST(sim_is_deterministic) {
  struct sim_opts o = {.seed = 77, .n = 5, .ticks = 1500, .crashes = true, .crash_x10 = 20};
  struct sim_stats a, b;
  char why[8192];
  CHECK_EQ(sim_run(&o, &a, why, sizeof why), 0);
  CHECK_EQ(sim_run(&o, &b, why, sizeof why), 0);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.committed > 100 && a.elections > 0 && a.crashes > 0 && a.reads > 0);
  o.seed = 78;
  CHECK_EQ(sim_run(&o, &b, why, sizeof why), 0);
  CHECK(memcmp(&a, &b, sizeof a) != 0);
  /* with membership changes too */
  o.seed = 77;
  o.conf_changes = true;
  CHECK_EQ(sim_run(&o, &a, why, sizeof why), 0);
  CHECK_EQ(sim_run(&o, &b, why, sizeof why), 0);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.conf_applied > 5 && a.conf_proposed > 5);
}
