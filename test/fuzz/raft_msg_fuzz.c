/* test/fuzz/raft_msg_fuzz.c — kt_raft_msg_decode over arbitrary bytes (a
 * peer's message is outside input). A message that decodes must re-encode to
 * the same bytes, and stepping it into a raft member must not crash. */
#include <stdlib.h>
#include <string.h>

#include "../../core/raft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct kt_arena a = {0};
  struct kt_raft_msg m;
  struct kt_err e;
  if (kt_raft_msg_decode(data, size, &a, &m, &e) == 0) {
    struct kt_buf b = {0};
    kt_raft_msg_encode(&m, &b);
    if (b.len != size || memcmp(b.p, data, size) != 0)
      abort();
    kt_buf_free(&b);
    /* step into a 3-member follower and a fresh leader of a 1-member... */
    uint64_t voters[3] = {1, 2, 3};
    struct kt_raft_config cfg = {.id = 1,
                                 .voters = voters,
                                 .n_voters = 3,
                                 .election_ticks = 10,
                                 .heartbeat_ticks = 1,
                                 .max_inflight_msgs = 4,
                                 .pre_vote = true,
                                 .check_quorum = true,
                                 .seed = 1};
    struct kt_raft *r;
    if (kt_raft_new(&cfg, &r) == 0) {
      m.to = 1;
      kt_raft_step(r, &m);
      for (int i = 0; i < 3 && kt_raft_has_ready(r); i++) {
        struct kt_raft_ready rd;
        kt_raft_ready(r, &rd);
        struct kt_raft_hard_state hs = rd.hs;
        uint64_t lt = rd.n_entries ? rd.entries[rd.n_entries - 1].term : 0;
        uint64_t li = rd.n_entries ? rd.entries[rd.n_entries - 1].index : 0;
        kt_raft_advance(r);
        if (li)
          kt_raft_persisted(r, lt, li);
        kt_raft_hs_persisted(r, &hs);
      }
      kt_raft_free(r);
    }
  }
  kt_arena_free(&a);
  return 0;
}
