/* test/perf/raft_perf.c — how many entries per second the Raft core moves
 * through a 3-member cluster, by hand:
 *   make perf && build/perf/raft_perf [ENTRIES] [BATCH]
 * All three cores run on one thread; every message goes through the codec
 * (encode + decode, as on the wire); "disk" is instant (persisted reported
 * right after advance). Per turn the leader takes BATCH proposals (default
 * 64) of 256 bytes, then every member takes its ready batches until quiet.
 * Reports committed entries/s on the leader and the cost per entry summed
 * over the three members (the core's share of the CPU a real member spends). */
#include "../../core/raft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct wire {
  uint8_t *p;
  size_t n;
};

static struct kt_raft *r[4];
static struct wire q[1 << 16];
static size_t qh, qt;
static uint64_t applied[4];

static void drain(int i) {
  while (kt_raft_has_ready(r[i])) {
    struct kt_raft_ready rd;
    kt_raft_ready(r[i], &rd);
    for (size_t k = 0; k < rd.n_msgs; k++) {
      struct kt_buf b = {0};
      kt_raft_msg_encode(&rd.msgs[k], &b);
      kt_assert(qt - qh < KT_ARRAY_LEN(q));
      q[qt++ % KT_ARRAY_LEN(q)] = (struct wire){b.p, b.len};
    }
    applied[i] += rd.n_committed;
    struct kt_raft_hard_state hs = rd.hs;
    uint64_t lt = rd.n_entries ? rd.entries[rd.n_entries - 1].term : 0;
    uint64_t li = rd.n_entries ? rd.entries[rd.n_entries - 1].index : 0;
    kt_raft_advance(r[i]);
    if (li)
      kt_raft_persisted(r[i], lt, li);
    kt_raft_hs_persisted(r[i], &hs);
  }
}

static void pump(void) {
  struct kt_arena a = {0};
  for (int i = 1; i <= 3; i++)
    drain(i);
  while (qh != qt) {
    struct wire w = q[qh++ % KT_ARRAY_LEN(q)];
    struct kt_raft_msg m;
    struct kt_err e;
    kt_arena_reset(&a);
    kt_assert(kt_raft_msg_decode(w.p, w.n, &a, &m, &e) == 0);
    kt_raft_step(r[m.to], &m);
    free(w.p);
    drain((int)m.to);
  }
  kt_arena_free(&a);
}

int main(int argc, char **argv) {
  long total = argc > 1 ? atol(argv[1]) : 1000000;
  int batch = argc > 2 ? atoi(argv[2]) : 64;
  uint64_t voters[3] = {1, 2, 3};
  for (int i = 1; i <= 3; i++) {
    struct kt_raft_config c = {.id = (uint64_t)i,
                               .voters = voters,
                               .n_voters = 3,
                               .election_ticks = 10,
                               .heartbeat_ticks = 1,
                               .max_msg_bytes = 1 << 20,
                               .max_inflight_msgs = 256,
                               .pre_vote = true,
                               .check_quorum = true,
                               .seed = 1};
    kt_assert(kt_raft_new(&c, &r[i]) == 0);
  }
  for (int k = 0; k < 30 && kt_raft_role(r[1]) != KT_RAFT_LEADER; k++) {
    kt_raft_tick(r[1]);
    pump();
  }
  kt_assert(kt_raft_role(r[1]) == KT_RAFT_LEADER);
  uint8_t val[256];
  memset(val, 'v', sizeof val);
  uint64_t base = kt_raft_commit(r[1]);
  double t0 = now_s();
  long done = 0, turns = 0;
  while (done < total) {
    for (int b = 0; b < batch; b++)
      kt_raft_propose(r[1], val, sizeof val, NULL);
    done += batch;
    pump();
    if (++turns % 100 == 0) { /* keep memory flat: compact what all applied */
      uint64_t low = KT_MIN(applied[1], KT_MIN(applied[2], applied[3]));
      for (int i = 1; i <= 3; i++)
        if (low >= kt_raft_first_index(r[i]))
          kt_raft_compact(r[i], low);
    }
  }
  double s = now_s() - t0;
  uint64_t committed = kt_raft_commit(r[1]) - base;
  printf("raft 3 members, batch %d x 256 B: %.0f entries/s committed, %.0f ns/entry (3 cores "
         "summed), %.1f MB/s\n",
         batch, (double)committed / s, s * 1e9 / (double)committed,
         (double)committed * 256 / s / 1e6);
  for (int i = 1; i <= 3; i++)
    kt_raft_free(r[i]);
  return 0;
}
