/* test/unit/operator_plan_test.c — ketch-operator's pure parts: the
 * decision (a table of observed states -> the expected step), the recover
 * choice, backup pruning, the spec parser and the action-log records. */
#include <inttypes.h>
#include <stdlib.h>

#include "../../tools/operator/op.h"
#include "test.h"

static const char *SPEC_TMPL =
    "cluster: t\n"
    "size: %d\n"
    "binary: /opt/ketch-b\n"
    "stabilization: 2s\n"
    "dead-after: 10s\n"
    "catchup-entries: 100\n"
    "%s"
    "machines:\n"
    "  - {name: n1, client-url: http://127.0.0.1:1001, peer-url: http://127.0.0.1:2001, data-dir: "
    "/d/n1}\n"
    "  - {name: n2, client-url: http://127.0.0.1:1002, peer-url: http://127.0.0.1:2002, data-dir: "
    "/d/n2}\n"
    "  - {name: n3, client-url: http://127.0.0.1:1003, peer-url: http://127.0.0.1:2003, data-dir: "
    "/d/n3}\n"
    "  - {name: n4, client-url: http://127.0.0.1:1004, peer-url: http://127.0.0.1:2004, data-dir: "
    "/d/n4}\n"
    "  - {name: n5, client-url: http://127.0.0.1:1005, peer-url: http://127.0.0.1:2005, data-dir: "
    "/d/n5}\n";

static int make_spec(struct op_spec *s, int size, const char *extra) {
  char text[4096], err[256];
  snprintf(text, sizeof text, SPEC_TMPL, size, extra ? extra : "");
  if (op_spec_parse(text, strlen(text), s, err, sizeof err)) {
    fprintf(stderr, "spec: %s\n", err);
    return -1;
  }
  return 0;
}

/* One member of a table row. */
struct mrow {
  int machine;        /* 0-based; 0 ends the list when `role` is 0 */
  char role;          /* 'v' voter, 'l' learner */
  char st;            /* 'h' healthy, 'd' down (was started), 'u' unstarted, 'a' alarm */
  int for_s;          /* healthy / unhealthy for this long */
  uint64_t behind;    /* entries behind the leader's index */
  const char *binary; /* observed binary; NULL = the spec's (/opt/ketch-b) */
};

struct row {
  const char *name;
  int size;
  const char *extra_spec;
  struct mrow m[6];
  int leader;           /* machine of the leader */
  const char *pending;  /* an action record (logfmt) that is the newest: an intent */
  const char *history;  /* another record, older */
  int64_t backup_ago_s; /* newest verified backup this long ago; 0 none */
  uint64_t wait_index;
  bool no_list, may_seed;
  int want_kind;
  int want_machine; /* -1: don't care */
  const char *want_reason;
  bool want_backup_first, want_resumed;
};

#define NOW_MS 1000000
#define WALL_MS 1700000000000LL
#define INDEX 5000

static int run_row(const struct row *r, struct op_step *st) {
  static struct op_spec spec;
  if (make_spec(&spec, r->size, r->extra_spec))
    return -1;
  static struct op_obs obs;
  memset(&obs, 0, sizeof obs);
  struct op_memory mem;
  op_memory_init(&mem);
  mem.wait_index = r->wait_index;
  for (int i = 0; i < OP_MAX_MACHINES; i++)
    obs.machines[i].process = 0;
  uint64_t leader_id = 0x100 + (uint64_t)r->leader;
  for (size_t i = 0; i < 6 && r->m[i].role; i++) {
    const struct mrow *x = &r->m[i];
    struct op_member *m = &obs.members[obs.n_members++];
    m->id = 0x100 + (uint64_t)x->machine;
    m->machine = x->machine;
    m->learner = x->role == 'l';
    strcpy(m->peer_url, spec.machines[x->machine].peer_url);
    strcpy(m->client_url, spec.machines[x->machine].client_url);
    if (x->st != 'u')
      strcpy(m->name, spec.machines[x->machine].name);
    m->reachable = x->st == 'h' || x->st == 'a';
    m->alarm = x->st == 'a';
    if (m->reachable) {
      m->term = 3;
      m->leader = leader_id;
      m->raft_index = INDEX - x->behind;
      m->applied = INDEX - x->behind;
      obs.machines[x->machine].process = 1;
      strcpy(obs.machines[x->machine].binary, x->binary ? x->binary : "/opt/ketch-b");
    }
    struct op_track *t = &mem.t[mem.n++];
    t->id = m->id;
    t->healthy_since_ms = x->st == 'h' ? NOW_MS - x->for_s * 1000 : -1;
    t->unhealthy_since_ms = x->st == 'h' ? -1 : NOW_MS - x->for_s * 1000;
  }
  obs.have_list = !r->no_list;
  obs.list_from = leader_id;
  obs.list_applied = INDEX;
  struct op_action recs[2];
  size_t n_recs = 0;
  char err[200];
  if (r->history &&
      op_action_decode(r->history, strlen(r->history), &recs[n_recs++], err, sizeof err)) {
    fprintf(stderr, "history: %s\n", err);
    return -1;
  }
  if (r->pending &&
      op_action_decode(r->pending, strlen(r->pending), &recs[n_recs++], err, sizeof err)) {
    fprintf(stderr, "pending: %s\n", err);
    return -1;
  }
  struct op_backup bk = {.state = "verified", .at_ms = WALL_MS - r->backup_ago_s * 1000};
  strcpy(bk.name, "b1");
  struct op_history hist;
  op_history_of(&spec, recs, n_recs, 7, &bk, r->backup_ago_s ? 1 : 0, &hist);
  struct op_input in = {&spec, &obs, &mem, &hist, NOW_MS, WALL_MS, r->may_seed};
  op_decide(&in, st);
  return 0;
}

#define V(mi, st, s)                                                                               \
  { mi, 'v', st, s, 0, NULL }
#define VB(mi, st, s, bin)                                                                         \
  { mi, 'v', st, s, 0, bin }
#define L(mi, st, s, behind)                                                                       \
  { mi, 'l', st, s, behind, NULL }

/* name, size, extra spec, members, leader machine, pending record, older
 * record, backup ago (s), wait index, no list, may seed -> kind, machine,
 * reason contains, backup_first, resumed */
// clang-format off
static const struct row rows[] = {
  {"nothing answers, apply may seed", 3, NULL, {{0}}, 0, NULL, NULL, 0, 0, true, true,
   OP_SEED, 0, "seed", false, false},
  {"nothing answers, run only reports", 3, NULL, {{0}}, 0, NULL, NULL, 0, 0, true, false,
   OP_REPORT, -1, "no member answers", false, false},
  {"quorum lost: two of three down", 3, NULL, {V(0, 'h', 30), V(1, 'd', 30), V(2, 'd', 30)}, 5,
   NULL, NULL, 0, 0, false, false,
   OP_REPORT, -1, "quorum lost: 1 of 3 voters answer, 1 healthy", false, false},
  {"quorum lost even with a pending intent", 3, NULL,
   {V(0, 'h', 30), V(1, 'd', 30), V(2, 'd', 30)}, 5,
   "seq=4 kind=remove state=intent machine=n2 member=0000000000000101 spec-rev=7 at=1 by=a reason=x",
   NULL, 0, 0, false, false,
   OP_REPORT, -1, "quorum lost", false, false},
  {"our last change not observed yet", 3, NULL, {V(0, 'h', 30)}, 0, NULL, NULL, 0, INDEX + 1,
   false, false,
   OP_WAIT, -1, "last change", false, false},
  {"seed alone: grow with a learner", 3, NULL, {V(0, 'h', 30)}, 0, NULL, NULL, 0, 0, false, false,
   OP_ADD_LEARNER, 1, "grow: 1 of 3", false, false},
  {"membership changes back up first", 3, "backup: {dir: /b}\n", {V(0, 'h', 30)}, 0, NULL, NULL,
   1, 0, false, false,
   OP_ADD_LEARNER, 1, "grow", true, false},
  {"added learner is started", 3, NULL, {V(0, 'h', 30), L(1, 'u', 1, 0)}, 0, NULL, NULL, 0, 0,
   false, false,
   OP_START, 1, "not started", false, false},
  {"a learner started a moment ago is not started again", 3, NULL,
   {V(0, 'h', 30), L(1, 'u', 1, 0)}, 0, NULL,
   "seq=3 kind=start state=done machine=n2 spec-rev=7 at=1699999999000 by=a reason=x", 0, 0,
   false, false,
   OP_WAIT, 1, "not healthy yet", false, false},
  {"learner behind is not promoted", 3, NULL, {V(0, 'h', 30), L(1, 'h', 30, 500)}, 0, NULL, NULL,
   0, 0, false, false,
   OP_WAIT, 1, "catching up: applied 4500 of the leader's 5000", false, false},
  {"learner caught up but not stable yet", 3, NULL, {V(0, 'h', 30), L(1, 'h', 1, 50)}, 0, NULL,
   NULL, 0, 0, false, false,
   OP_WAIT, 1, "stabilization", false, false},
  {"learner caught up and stable is promoted", 3, NULL, {V(0, 'h', 30), L(1, 'h', 3, 50)}, 0,
   NULL, NULL, 0, 0, false, false,
   OP_PROMOTE, 1, "caught up", false, false},
  {"learner that never became healthy is removed", 3, NULL, {V(0, 'h', 30), L(1, 'd', 11, 0)},
   0, NULL, NULL, 0, 0, false, false,
   OP_REMOVE, 1, "undo", false, false},
  {"learner with an alarm is not promoted", 3, NULL, {V(0, 'h', 30), L(1, 'a', 3, 0)}, 0, NULL,
   NULL, 0, 0, false, false,
   OP_WAIT, 1, "not healthy", false, false},
  {"voter unhealthy for less than dead-after: wait", 3, NULL,
   {V(0, 'h', 30), V(1, 'd', 5), V(2, 'h', 30)}, 0, NULL, NULL, 0, 0, false, false,
   OP_WAIT, 1, "replaced after dead-after", false, false},
  {"dead voter: the replacement is added first", 3, NULL,
   {V(0, 'h', 30), V(1, 'd', 11), V(2, 'h', 30)}, 0, NULL, NULL, 0, 0, false, false,
   OP_ADD_LEARNER, 3, "replace dead n2", false, false},
  {"dead voter with its replacement promoted: removed", 3, NULL,
   {V(0, 'h', 30), V(1, 'd', 20), V(2, 'h', 30), V(3, 'h', 3)}, 0, NULL, NULL, 0, 0, false,
   false,
   OP_REMOVE, 1, "n2 dead", false, false},
  {"dead voter, no free machine: removed first", 5, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'd', 20), V(3, 'h', 30), V(4, 'h', 30)}, 0, NULL, NULL,
   0, 0, false, false,
   OP_REMOVE, 2, "no free machine", false, false},
  {"dead voter not removed below min-quorum", 5, "min-quorum: 5\n",
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'd', 20), V(3, 'h', 30), V(4, 'h', 30)}, 0, NULL, NULL,
   0, 0, false, false,
   OP_REPORT, 2, "below min-quorum 5", false, false},
  {"two dead of five: the longest dead goes first", 5, NULL,
   {V(0, 'h', 30), V(1, 'd', 20), V(2, 'd', 40), V(3, 'h', 30), V(4, 'h', 30)}, 0, NULL, NULL,
   0, 0, false, false,
   OP_REMOVE, 2, "n3 dead", false, false},
  {"scale down: a follower on the last machine", 3, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30), V(3, 'h', 30), V(4, 'h', 30)}, 0, NULL, NULL,
   0, 0, false, false,
   OP_REMOVE, 4, "shrink: 5 of 3", false, false},
  {"scale down never picks the leader while a follower is left", 3, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30), V(3, 'h', 30), V(4, 'h', 30)}, 4, NULL, NULL,
   0, 0, false, false,
   OP_REMOVE, 3, "remove n4", false, false},
  {"a machine where a start just failed is skipped", 3, NULL, {V(0, 'h', 30), V(1, 'h', 30)}, 0,
   NULL, "seq=3 kind=start state=failed machine=n3 spec-rev=7 at=1699999990000 by=a reason=x",
   0, 0, false, false,
   OP_ADD_LEARNER, 3, "add n4", false, false},
  {"...but not forever", 3, NULL, {V(0, 'h', 30), V(1, 'h', 30)}, 0, NULL,
   "seq=3 kind=start state=failed machine=n3 spec-rev=7 at=1699999900000 by=a reason=x", 0, 0,
   false, false,
   OP_ADD_LEARNER, 2, "add n3", false, false},
  {"scale up one at a time", 5, NULL, {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30)}, 0, NULL,
   NULL, 0, 0, false, false,
   OP_ADD_LEARNER, 3, "grow: 3 of 5", false, false},
  {"rolling upgrade: a follower first", 3, NULL,
   {VB(0, 'h', 30, "/opt/ketch-a"), VB(1, 'h', 30, "/opt/ketch-a"), VB(2, 'h', 30, "/opt/ketch-a")},
   0, NULL, NULL, 0, 0, false, false,
   OP_UPGRADE, 1, "runs /opt/ketch-a", false, false},
  {"rolling upgrade: the leader last, moved away first", 3, NULL,
   {VB(0, 'h', 30, "/opt/ketch-a"), V(1, 'h', 30), V(2, 'h', 30)}, 0, NULL, NULL, 0, 0, false,
   false,
   OP_MOVE_LEADER, 0, "move leadership from n1", false, false},
  {"rolling upgrade outside its window waits (wall: Tue 22:13 UTC)", 3,
   "upgrade-windows: [\"Sat 02:00-04:00\", \"Mon-Tue 01:00-02:00\"]\n",
   {VB(0, 'h', 30, "/opt/ketch-a"), VB(1, 'h', 30, "/opt/ketch-a"), VB(2, 'h', 30, "/opt/ketch-a")},
   0, NULL, NULL, 0, 0, false, false,
   OP_WAIT, -1, "waits for an upgrade window: the next opens in 75h47m (Sat 02:00 UTC)",
   false, false},
  {"rolling upgrade inside its window", 3, "upgrade-windows: [\"Sat 02:00-04:00\", \"Tue 22:00-01:00\"]\n",
   {VB(0, 'h', 30, "/opt/ketch-a"), VB(1, 'h', 30, "/opt/ketch-a"), VB(2, 'h', 30, "/opt/ketch-a")},
   0, NULL, NULL, 0, 0, false, false,
   OP_UPGRADE, 1, "runs /opt/ketch-a", false, false},
  {"repairs do not wait for a window", 3, "upgrade-windows: [\"Sat 02:00-04:00\"]\n",
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'd', 11)}, 0, NULL, NULL, 0, 0, false, false,
   OP_ADD_LEARNER, 3, "replace dead n3", false, false},
  {"rolling upgrade waits for the last one to be stable", 3, NULL,
   {VB(0, 'h', 30, "/opt/ketch-a"), V(1, 'h', 1), VB(2, 'h', 30, "/opt/ketch-a")}, 0, NULL, NULL,
   0, 0, false, false,
   OP_WAIT, 1, "waits for n2", false, false},
  {"rolling upgrade halted after a failure", 3, NULL,
   {VB(0, 'h', 30, "/opt/ketch-a"), V(1, 'h', 30), VB(2, 'h', 30, "/opt/ketch-a")}, 0, NULL,
   "seq=5 kind=upgrade state=failed machine=n2 spec-rev=7 at=1 by=a reason=x "
   "outcome=\"did not come back\"",
   0, 0, false, false,
   OP_REPORT, -1, "halted: upgrade of n2 failed: did not come back", false, false},
  {"an upgrade failure under an older spec does not halt", 3, NULL,
   {VB(0, 'h', 30, "/opt/ketch-a"), V(1, 'h', 30), VB(2, 'h', 30, "/opt/ketch-a")}, 0, NULL,
   "seq=5 kind=upgrade state=failed machine=n2 spec-rev=6 at=1 by=a reason=x outcome=y", 0, 0,
   false, false,
   OP_UPGRADE, 2, "rolling upgrade", false, false},
  {"backup due", 3, "backup: {dir: /b, interval: 1m}\n",
   {V(0, 'h', 30), {1, 'v', 'h', 30, 3, NULL}, V(2, 'h', 30)}, 0, NULL, NULL, 61, 0, false,
   false,
   OP_BACKUP, 0, "scheduled backup", false, false},
  {"backup not due", 3, "backup: {dir: /b, interval: 1m}\n",
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30)}, 0, NULL, NULL, 30, 0, false, false,
   OP_NONE, -1, "matches the spec", false, false},
  {"all well", 3, NULL, {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30)}, 1, NULL, NULL, 0, 0,
   false, false,
   OP_NONE, -1, "3 voters healthy", false, false},
  {"pending add whose member exists: finished", 3, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), L(2, 'u', 1, 0)}, 0,
   "seq=9 kind=add-learner state=intent machine=n3 spec-rev=7 at=1 by=a reason=grow", NULL, 0, 0,
   false, false,
   OP_FINISH, 2, "effect of #9", false, false},
  {"pending add not taken, still wanted: resumed", 3, NULL, {V(0, 'h', 30), V(1, 'h', 30)}, 0,
   "seq=9 kind=add-learner state=intent machine=n3 spec-rev=7 at=1 by=a reason=grow", NULL, 0, 0,
   false, false,
   OP_ADD_LEARNER, 2, "grow", false, true},
  {"pending add no longer wanted: abandoned", 2, NULL, {V(0, 'h', 30), V(1, 'h', 30)}, 0,
   "seq=9 kind=add-learner state=intent machine=n3 spec-rev=7 at=1 by=a reason=grow", NULL, 0, 0,
   false, false,
   OP_ABANDON, 2, "no longer the step", false, false},
  {"pending start of a member still down: resumed", 3, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), L(2, 'u', 1, 0)}, 0,
   "seq=9 kind=start state=intent machine=n3 spec-rev=7 at=1 by=a reason=x", NULL, 0, 0, false,
   false,
   OP_START, 2, "finish #9", false, true},
  {"pending upgrade of a member it stopped: resumed", 3, NULL,
   {V(0, 'h', 30), V(1, 'd', 2), V(2, 'h', 30)}, 0,
   "seq=9 kind=upgrade state=intent machine=n2 binary=/opt/ketch-b spec-rev=7 at=1 by=a reason=x",
   NULL, 0, 0, false, false,
   OP_UPGRADE, 1, "finish #9", false, true},
  {"pending remove already done: finished", 3, NULL,
   {V(0, 'h', 30), V(1, 'h', 30), V(2, 'h', 30)}, 0,
   "seq=9 kind=remove state=intent machine=n5 member=0000000000000104 spec-rev=7 at=1 by=a "
   "reason=x",
   NULL, 0, 0, false, false,
   OP_FINISH, 4, "effect", false, false},
};
// clang-format on

TEST(decide_table) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const struct row *r = &rows[i];
    struct op_step st;
    if (run_row(r, &st)) {
      kt_test_fail(__FILE__, __LINE__, "%s: setup failed", r->name);
      return;
    }
    char d[512];
    static struct op_spec spec;
    make_spec(&spec, r->size, r->extra_spec);
    op_step_describe(&spec, &st, d, sizeof d);
    if (st.kind != r->want_kind || (r->want_machine >= 0 && st.machine != r->want_machine) ||
        !strstr(st.reason, r->want_reason) || st.backup_first != r->want_backup_first ||
        st.resumed != r->want_resumed) {
      kt_test_fail(__FILE__, __LINE__,
                   "%s: want %s machine %d (\"%s\", backup_first %d, resumed %d), got %s "
                   "(backup_first %d, resumed %d)",
                   r->name, op_kind_name(r->want_kind), r->want_machine, r->want_reason,
                   r->want_backup_first, r->want_resumed, d, st.backup_first, st.resumed);
      return;
    }
  }
}

TEST(move_leader_target_is_upgraded_and_caught_up) {
  struct row r = {
      "",    3,
      NULL,  {VB(0, 'h', 30, "/opt/ketch-a"), {1, 'v', 'h', 30, 400, NULL}, V(2, 'h', 30)},
      0,     NULL,
      NULL,  0,
      0,     false,
      false, 0,
      0,     "",
      false, false};
  struct op_step st;
  CHECK(run_row(&r, &st) == 0);
  /* n2 is 400 entries behind (catchup-entries 100): the upgrade waits for it */
  CHECK_EQ(st.kind, OP_WAIT);
  r.m[1].behind = 0;
  CHECK(run_row(&r, &st) == 0);
  CHECK_EQ(st.kind, OP_MOVE_LEADER);
  CHECK_EQ(st.member, 0x100);
  CHECK(st.target == 0x101 || st.target == 0x102);
}

TEST(upgrade_windows) {
  struct op_spec sp;
  CHECK(make_spec(&sp, 3, "upgrade-windows: [\"Fri-Mon 23:00-01:30\", \"daily 12:00-12:01\"]\n") ==
        0);
  CHECK_EQ(sp.n_windows, 2);
  CHECK_EQ(sp.windows[0].days, 0x63); /* Fri, Sat, Sun, Mon */
  const int64_t day = 86400000, h = 3600000;
  int64_t mon = 1699833600000LL; /* Mon 2023-11-13 00:00 UTC */
  int64_t next = 0;
  CHECK(op_in_window(&sp, mon + 1 * h, &next));                 /* Sun 23:00 -> Mon 01:30 */
  CHECK(!op_in_window(&sp, mon + 2 * h, &next));                /* closed at 01:30 */
  CHECK_EQ(next, mon + 12 * h);                                 /* the daily one */
  CHECK(op_in_window(&sp, mon + 12 * h + 30000, &next));        /* 12:00:30 */
  CHECK(!op_in_window(&sp, mon + 12 * h + 60000, &next));       /* 12:01 closed */
  CHECK(op_in_window(&sp, mon + day + h, &next));               /* Tue 01:00: Mon's 23:00 */
  CHECK(!op_in_window(&sp, mon + 2 * day + h, &next));          /* Wed 01:00: Tue has none */
  CHECK(op_in_window(&sp, mon + 4 * day + 23 * h, &next));      /* Fri 23:00 */
  CHECK(!op_in_window(&sp, mon + 3 * day + 23 * h + 1, &next)); /* Thu 23:00 */
  CHECK_EQ(next, mon + 4 * day + 12 * h);                       /* Fri 12:00 */
  struct op_spec none;
  CHECK(make_spec(&none, 3, NULL) == 0);
  CHECK(op_in_window(&none, mon, &next)); /* no windows: any time */
  static const char *const bad[] = {"Funday 02:00-03:00", "Mon 2:00-03:00",   "Mon 02:00-02:00",
                                    "Mon 25:00-26:00",    "Mon, 02:00-03:00", "Mon-",
                                    "daily 24:00-01:00",  "Mon 02:00-03:60",  "Mon 02:00 03:00"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct op_window w;
    if (op_window_parse(bad[i], &w) == 0)
      kt_test_fail(__FILE__, __LINE__, "\"%s\" was accepted", bad[i]);
  }
  char text[4096], err[256];
  snprintf(text, sizeof text, SPEC_TMPL, 3,
           "upgrade-windows: [\"Sat 02:00-04:00\", \"Mon 9-10\"]\n");
  CHECK(op_spec_parse(text, strlen(text), &sp, err, sizeof err) != 0);
  CHECK(strstr(err, "upgrade-windows[1]: want DAYS HH:MM-HH:MM") != NULL);
}

TEST(tracking_counts_from_first_sight) {
  struct op_spec spec;
  CHECK(make_spec(&spec, 3, NULL) == 0);
  struct op_obs obs;
  memset(&obs, 0, sizeof obs);
  obs.n_members = 2;
  obs.have_list = true;
  for (int i = 0; i < 2; i++) {
    obs.members[i].id = 0x100 + (uint64_t)i;
    obs.members[i].machine = i;
    obs.members[i].reachable = i == 0;
    obs.members[i].leader = 0x100;
    obs.members[i].term = 2;
  }
  struct op_memory mem;
  op_memory_init(&mem);
  op_track_update(&mem, &spec, &obs, 1000);
  op_track_update(&mem, &spec, &obs, 5000);
  CHECK_EQ(op_track_of(&mem, 0x100)->healthy_since_ms, 1000);
  CHECK_EQ(op_track_of(&mem, 0x101)->unhealthy_since_ms, 1000);
  obs.members[1].reachable = true; /* comes back: healthy from now */
  op_track_update(&mem, &spec, &obs, 6000);
  CHECK_EQ(op_track_of(&mem, 0x101)->healthy_since_ms, 6000);
  CHECK_EQ(op_track_of(&mem, 0x101)->unhealthy_since_ms, -1);
  op_track_restarted(&mem, 0x101, 6500); /* restarted by the operator: judged afresh */
  CHECK_EQ(op_track_of(&mem, 0x101)->healthy_since_ms, -1);
  op_track_update(&mem, &spec, &obs, 6600);
  CHECK_EQ(op_track_of(&mem, 0x101)->healthy_since_ms, 6600);
  obs.n_members = 1; /* removed: forgotten */
  op_track_update(&mem, &spec, &obs, 7000);
  CHECK(op_track_of(&mem, 0x101) == NULL);
  CHECK_EQ(mem.n, 1);
}

TEST(recover_picks_the_survivor_with_the_most_data) {
  struct op_spec spec;
  CHECK(make_spec(&spec, 5, NULL) == 0);
  struct op_obs obs;
  memset(&obs, 0, sizeof obs);
  obs.have_list = true;
  obs.n_members = 5;
  uint64_t idx[5] = {90, 120, 0, 0, 120};
  uint64_t applied[5] = {90, 100, 0, 0, 110};
  for (int i = 0; i < 5; i++) {
    struct op_member *m = &obs.members[i];
    m->id = 0x100 + (uint64_t)i;
    m->machine = i;
    m->reachable = idx[i] > 0;
    m->raft_index = idx[i];
    m->applied = applied[i];
  }
  char why[200];
  CHECK_EQ(op_recover_choice(&spec, &obs, why, sizeof why), 4);
  CHECK(strstr(why, "n5 has the most data (raft index 120, applied 110)"));
  for (int i = 0; i < 5; i++)
    obs.members[i].reachable = false;
  CHECK_EQ(op_recover_choice(&spec, &obs, why, sizeof why), -1);
  CHECK(strstr(why, "no surviving member"));
  for (int i = 0; i < 3; i++) { /* a healthy majority: refused */
    obs.members[i].reachable = true;
    obs.members[i].leader = 0x100;
    obs.members[i].term = 1;
  }
  CHECK_EQ(op_recover_choice(&spec, &obs, why, sizeof why), -1);
  CHECK(strstr(why, "has quorum"));
}

TEST(backup_pruning) {
  struct op_backup_policy p = {.enabled = true, .keep = 2, .keep_for_ms = 100000};
  struct op_backup b[6];
  memset(b, 0, sizeof b);
  const char *st[6] = {"verified", "verified", "corrupt", "verified", "failed", "verified"};
  int64_t at[6] = {1000, 2000, 2500, 3000, 3500, 4000};
  for (int i = 0; i < 6; i++) {
    strcpy(b[i].state, st[i]);
    b[i].at_ms = at[i];
  }
  bool del[6];
  /* newest two verified kept (4000, 3000); the failed one newer than them stays
   * (reported), the corrupt one older goes, and so do older verified ones */
  CHECK_EQ(op_backup_prune(&p, b, 6, 5000, del), 3);
  CHECK(del[0] && del[1] && del[2] && !del[3] && !del[4] && !del[5]);
  /* everything past keep-for, but the newest verified one always stays */
  CHECK_EQ(op_backup_prune(&p, b, 6, 1000000, del), 5);
  CHECK(!del[5]);
}

TEST(spec_defaults_and_errors) {
  struct op_spec s;
  CHECK(make_spec(&s, 3, NULL) == 0);
  CHECK_STR(s.token, "t");
  CHECK_EQ(s.min_quorum, 2);
  CHECK_EQ(s.stabilization_ms, 2000);
  CHECK_STR(s.machines[0].host, "127.0.0.1");
  CHECK(!s.backup.enabled);
  CHECK(make_spec(&s, 3, "backup:\n  dir: /b\n") == 0);
  CHECK(s.backup.enabled && s.backup.keep == 24 && s.backup.interval_ms == 3600000 &&
        s.backup.keep_for_ms == 7LL * 86400000);
  struct {
    const char *text, *err;
  } bad[] = {
      {"size: 3\n", "cluster: required"},
      {"cluster: a\nsize: 3\nmachines: []\n", "at least one machine"},
      {"cluster: a\nsize: 2\nmachines:\n - {name: x, client-url: http://h:1, peer-url: "
       "http://h:2, data-dir: /d}\n",
       "need at least 2 machines"},
      {"cluster: a\nsize: 1\nsizes: 2\n", "sizes: unknown key"},
      {"cluster: a\nsize: 1\nmachines:\n - {name: x, client-url: http://h:1, peer-url: h:2, "
       "data-dir: /d}\n",
       "machines[0].peer-url: \"h:2\": must be http://host:port"},
      {"cluster: a\nsize: 1\nmachines:\n - {name: x, client-url: http://h:1, peer-url: "
       "http://h:2, data-dir: '/d x'}\n",
       "machines[0].data-dir"},
      {"cluster: a\nsize: 1\ndead-after: soon\nmachines:\n - {name: x, client-url: http://h:1, "
       "peer-url: http://h:2, data-dir: /d}\n",
       "dead-after: want a duration"},
      {"cluster: a\nsize: 1\ndriver: command\nmachines:\n - {name: x, client-url: http://h:1, "
       "peer-url: http://h:2, data-dir: /d}\n",
       "needs start, stop and wipe"},
      {"cluster: a\nsize: 1\ncommand: {start: 'go {nmae}'}\nmachines:\n - {name: x, client-url: "
       "http://h:1, peer-url: http://h:2, data-dir: /d}\n",
       "unknown placeholder {nmae}"},
      {"cluster: a\nsize: 1\nmin-quorum: 2\nmachines:\n - {name: x, client-url: http://h:1, "
       "peer-url: http://h:2, data-dir: /d}\n",
       "min-quorum: 2: must be between 1 and size (1)"},
      {"cluster: a\nsize: 1\nmachines:\n - {name: x, client-url: http://h:1, peer-url: "
       "http://h:2, data-dir: /d}\n - {name: y, client-url: http://h:3, peer-url: http://h:2, "
       "data-dir: /e}\n",
       "machines[1]: a URL is also used by machines[0]"},
      {"cluster: a\nsize: [1\n", "spec: line"},
      {"cluster: a\ncluster: b\n", "cluster: given twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[300] = "";
    int rc = op_spec_parse(bad[i].text, strlen(bad[i].text), &s, err, sizeof err);
    if (rc != -1 || !strstr(err, bad[i].err)) {
      kt_test_fail(__FILE__, __LINE__, "spec %zu: want error containing \"%s\", got rc %d \"%s\"",
                   i, bad[i].err, rc, err);
      return;
    }
  }
}

TEST(durations) {
  CHECK_EQ(op_parse_duration("10s"), 10000);
  CHECK_EQ(op_parse_duration("1m30s"), 90000);
  CHECK_EQ(op_parse_duration("500ms"), 500);
  CHECK_EQ(op_parse_duration("7d"), 7LL * 86400000);
  CHECK_EQ(op_parse_duration("12"), 12000);
  CHECK_EQ(op_parse_duration("-1s"), -1);
  CHECK_EQ(op_parse_duration("1x"), -1);
  CHECK_EQ(op_parse_duration(""), -1);
  CHECK_EQ(op_parse_duration("99999999999999d"), -1);
}

TEST(templates) {
  const char *vars[] = {"name", "n1", "host", "10.0.0.1", "data_dir", "/var/lib/ketch"};
  char out[128], err[128];
  CHECK(op_expand("ssh {host} systemctl start ketch@{name}", vars, 3, out, sizeof out, err,
                  sizeof err) == 0);
  CHECK_STR(out, "ssh 10.0.0.1 systemctl start ketch@n1");
  CHECK(op_expand("rm -rf {data_dir}/{bad}", vars, 3, out, sizeof out, err, sizeof err) == -1);
  CHECK(strstr(err, "unknown placeholder {bad}"));
  CHECK(op_expand("x {name", vars, 3, out, sizeof out, err, sizeof err) == -1);
  CHECK(op_expand("{data_dir}{data_dir}", vars, 3, out, 20, err, sizeof err) == -1);
}

TEST(records_round_trip) {
  struct op_action a = {.seq = 12,
                        .kind = OP_ADD_LEARNER,
                        .state = "done",
                        .machine = "n4",
                        .member = 0x8e9f0a1b2c3d4e5fULL,
                        .spec_rev = 44,
                        .at_ms = 1700000000123LL,
                        .done_ms = 1700000000456LL,
                        .by = "host:12",
                        .done_by = "host:13",
                        .reason = "replace dead n2 (unhealthy for 61s)",
                        .outcome = "member \"x\" added\\ok\nline"};
  char buf[2048];
  CHECK(op_action_encode(&a, buf, sizeof buf) > 0);
  CHECK(strstr(buf, "seq=12 kind=add-learner state=done machine=n4 member=8e9f0a1b2c3d4e5f"));
  struct op_action b;
  char err[200];
  CHECK(op_action_decode(buf, strlen(buf), &b, err, sizeof err) == 0);
  CHECK_EQ(b.seq, 12);
  CHECK_EQ(b.kind, OP_ADD_LEARNER);
  CHECK(b.member == a.member);
  CHECK_STR(b.reason, a.reason);
  CHECK_STR(b.outcome, a.outcome);
  CHECK_STR(b.done_by, "host:13");
  CHECK_EQ(b.done_ms, a.done_ms);
  CHECK(op_action_encode(&a, buf, 40) == -1);
  const char *bad[] = {"seq=1 kind=nope state=x",
                       "seq=1 kind=start state=\"x",
                       "seq=x",
                       "seq=1 kind=start",
                       "seq=1 kind=start state=done member=zz",
                       "=",
                       "seq=1 kind=start state=done reason=\"a\"b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(op_action_decode(bad[i], strlen(bad[i]), &b, err, sizeof err) == -1);
  /* unknown keys from a newer operator are skipped */
  const char *newer = "seq=3 kind=start state=done colour=blue by=x";
  CHECK(op_action_decode(newer, strlen(newer), &b, err, sizeof err) == 0);
  struct op_backup k = {.name = "t-20260101T000000Z-r9.snap",
                        .state = "verified",
                        .at_ms = 5,
                        .revision = 9,
                        .member = 0x11,
                        .size_bytes = 4096,
                        .hash_kv = 0xdeadbeef,
                        .why = "before add-learner n4"};
  CHECK(op_backup_encode(&k, buf, sizeof buf) > 0);
  struct op_backup k2;
  CHECK(op_backup_decode(buf, strlen(buf), &k2, err, sizeof err) == 0);
  CHECK_EQ(k2.hash_kv, 0xdeadbeef);
  CHECK_EQ(k2.revision, 9);
  CHECK_STR(k2.why, k.why);
}
