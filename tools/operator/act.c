/* tools/operator/act.c — carries out the one step op_decide() chose.
 *
 * Order, for every step that changes something:
 *   1. a membership change with backup_first: a verified backup, or no change
 *      this round (the failure is logged and recorded; the next round tries
 *      again);
 *   2. the intent record (fenced: only while we still hold the election
 *      key), unless the step resumes a predecessor's record;
 *   3. the step itself, each idempotent:
 *        add-learner  MEMBER_ADD learner (the peer URL already present = done)
 *        start        stop + wipe + start the added member (local: nothing if
 *                     it runs), then wait until it answers as that member
 *        promote      MEMBER_PROMOTE (ketch refuses a learner not in sync)
 *        remove       MEMBER_REMOVE (not found = done), then stop its process
 *        move-leader  MOVE_LEADER on the leader
 *        upgrade      stop, start with the spec's binary, wait until healthy
 *                     and caught up; on failure start the old binary again
 *                     and fail (which halts the rollout)
 *   4. the outcome written to the same record (done / failed + what
 *      happened), and the leader's raft index remembered
 *      (x->mem.wait_index) so the next decision waits to see it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "opx.h"

#define START_WAIT_MS 15000
#define UPGRADE_WAIT_MS 30000

static int member_index(const struct op_obs *obs, uint64_t id) {
  for (size_t i = 0; i < obs->n_members; i++)
    if (obs->members[i].id == id)
      return (int)i;
  return -1;
}

void opx_initial_cluster(const struct opx *x, const struct op_obs *obs, int mi, char *out,
                         size_t n) {
  size_t o = 0;
  out[0] = 0;
  const struct op_machine *self = &x->spec.machines[mi];
  for (size_t i = 0; i < obs->n_members && o < n; i++) {
    const struct op_member *m = &obs->members[i];
    const char *name = m->machine >= 0 ? x->spec.machines[m->machine].name : m->name;
    if (!name[0] || !m->peer_url[0] || m->machine == mi)
      continue;
    o += (size_t)snprintf(out + o, n - o, "%s%s=%s", o ? "," : "", name, m->peer_url);
  }
  if (o < n)
    snprintf(out + o, n - o, "%s%s=%s", o ? "," : "", self->name, self->peer_url);
}

int opx_wait_member(struct opx *x, int mi, uint64_t member, bool healthy, int64_t timeout_ms,
                    char *err, size_t err_len) {
  int64_t deadline = opx_mono_ms() + timeout_ms;
  static struct op_obs obs;
  snprintf(err, err_len, "no answer");
  for (;;) {
    opx_observe(x, &obs);
    op_track_update(&x->mem, &x->spec, &obs, opx_mono_ms());
    struct op_view v;
    op_view_of(&x->spec, &obs, &v);
    for (size_t i = 0; i < obs.n_members; i++) {
      const struct op_member *m = &obs.members[i];
      if (m->machine != mi || (member && m->id != member))
        continue;
      if (!m->reachable) {
        snprintf(err, err_len, "%s does not answer", x->spec.machines[mi].name);
        break;
      }
      if (!healthy)
        return 0;
      if (v.caught_up[i])
        return 0;
      snprintf(err, err_len,
               "%s answers but is not healthy and caught up (leader %016" PRIx64
               ", applied %" PRIu64 " of %" PRIu64 ")",
               x->spec.machines[mi].name, m->leader, m->applied, v.leader_index);
    }
    if (opx_mono_ms() >= deadline)
      return -1;
    opx_sleep_ms(200);
  }
}

static int do_start(struct opx *x, const struct op_obs *obs, const struct op_step *st, char *out,
                    size_t n) {
  const struct op_machine *m = &x->spec.machines[st->machine];
  struct op_machine_obs probe;
  opx_drv_probe(x, st->machine, &probe);
  if (probe.process != 1) {
    if (opx_drv_stop(x, st->machine, out, n) || opx_drv_wipe(x, st->machine, out, n))
      return -1;
    char ic[4096];
    opx_initial_cluster(x, obs, st->machine, ic, sizeof ic);
    struct opx_start s = {ic, "existing", opx_member_binary(x), false};
    if (opx_drv_start(x, st->machine, &s, out, n))
      return -1;
  }
  if (opx_wait_member(x, st->machine, st->member, false, START_WAIT_MS, out, n))
    return -1;
  snprintf(out, n, "started %s (%.150s), it answers as %016" PRIx64, m->name, opx_member_binary(x),
           st->member);
  return 0;
}

static int do_upgrade(struct opx *x, const struct op_obs *obs, const struct op_step *st, char *out,
                      size_t n) {
  const struct op_machine *m = &x->spec.machines[st->machine];
  char old[OP_PATH_MAX], e[600];
  snprintf(old, sizeof old, "%s", obs->machines[st->machine].binary);
  char ic[4096];
  opx_initial_cluster(x, obs, st->machine, ic, sizeof ic);
  struct opx_start s = {ic, "existing", opx_member_binary(x), false};
  struct op_machine_obs probe;
  opx_drv_probe(x, st->machine, &probe);
  bool running_new = probe.process == 1 && !strcmp(probe.binary, s.binary);
  op_track_restarted(&x->mem, st->member, opx_mono_ms());
  if (!running_new && (opx_drv_stop(x, st->machine, e, sizeof e) ||
                       opx_drv_start(x, st->machine, &s, e, sizeof e))) {
    snprintf(out, n, "%s did not start with %.80s: %.100s", m->name, s.binary, e);
  } else if (opx_wait_member(x, st->machine, st->member, true, UPGRADE_WAIT_MS, e, sizeof e)) {
    snprintf(out, n, "%s did not come back healthy and caught up with %.80s: %.120s", m->name,
             s.binary, e);
  } else {
    snprintf(out, n, "%s now runs %s, healthy and caught up", m->name, s.binary);
    return 0;
  }
  /* roll this member back to what it ran before (local driver: known) */
  if (old[0] && strcmp(old, s.binary)) {
    struct opx_start back = {ic, "existing", old, false};
    char e2[300];
    opx_drv_stop(x, st->machine, e2, sizeof e2);
    if (opx_drv_start(x, st->machine, &back, e2, sizeof e2) == 0) {
      size_t l = strlen(out);
      snprintf(out + l, n - l, "; rolled back to %.80s", old);
    }
  }
  return -1;
}

static int call_err(struct opx *x, ketch_client *c, int rc, const char *what, char *out, size_t n) {
  snprintf(out, n, "%s: %s (%s)", what, ketch_strerror(rc), ketch_errmsg(c ? c : x->c));
  return -1;
}

/* The step proper. 0 done (out says what happened), -1 failed (out says why). */
static int take(struct opx *x, const struct op_obs *obs, const struct op_step *st, char *out,
                size_t n) {
  const struct op_spec *s = &x->spec;
  int rc;
  ketch_result *r = NULL;
  switch (st->kind) {
  case OP_ADD_LEARNER: {
    const char *peer = s->machines[st->machine].peer_url;
    rc = ketch_member_add(x->c, &peer, 1, true, &r);
    if (rc == KETCH_EPEERURLEXISTS) {
      snprintf(out, n, "%s was already a member (peer URL %s)", s->machines[st->machine].name,
               peer);
      return 0;
    }
    if (rc)
      return call_err(x, NULL, rc, "member add", out, n);
    snprintf(out, n, "added %s as learner %016" PRIx64, s->machines[st->machine].name,
             r->member_list.added ? r->member_list.added->id : 0);
    ketch_result_free(r);
    return 0;
  }
  case OP_START:
    return do_start(x, obs, st, out, n);
  case OP_PROMOTE:
    rc = ketch_member_promote(x->c, st->member, NULL);
    if (rc == KETCH_EMEMBERNOTLEARNER) {
      snprintf(out, n, "%016" PRIx64 " was already a voter", st->member);
      return 0;
    }
    if (rc)
      return call_err(x, NULL, rc, "member promote", out, n);
    snprintf(out, n, "promoted %016" PRIx64 " to voter", st->member);
    return 0;
  case OP_REMOVE:
    rc = ketch_member_remove(x->c, st->member, NULL);
    if (rc && rc != KETCH_EMEMBERNOTFOUND)
      return call_err(x, NULL, rc, "member remove", out, n);
    if (st->machine >= 0) {
      char e[300];
      if (opx_drv_stop(x, st->machine, e, sizeof e)) {
        snprintf(out, n, "removed %016" PRIx64 ", but stopping its process failed: %.200s",
                 st->member, e);
        return 0;
      }
    }
    snprintf(out, n, "removed %016" PRIx64 "%s%s and stopped it", st->member,
             st->machine >= 0 ? " from " : "",
             st->machine >= 0 ? s->machines[st->machine].name : "");
    return 0;
  case OP_MOVE_LEADER: {
    /* its own handle: a transfer may take two election timeouts */
    int li = member_index(obs, st->member);
    ketch_options o;
    ketch_options_init(&o);
    o.dial_timeout_ms = 1000;
    o.request_timeout_ms = 15000;
    ketch_client *c = NULL;
    char e[300];
    if (li < 0 || ketch_open(&c, obs->members[li].client_url, &o, e, sizeof e)) {
      snprintf(out, n, "the leader %016" PRIx64 " is not reachable", st->member);
      return -1;
    }
    rc = ketch_move_leader(c, st->target, NULL);
    if (rc)
      call_err(x, c, rc, "move-leader", out, n);
    else
      snprintf(out, n, "leadership moved from %016" PRIx64 " to %016" PRIx64, st->member,
               st->target);
    ketch_close(c);
    return rc ? -1 : 0;
  }
  case OP_UPGRADE:
    return do_upgrade(x, obs, st, out, n);
  default:
    snprintf(out, n, "nothing to do for %s", op_kind_name(st->kind));
    return 0;
  }
}

static void fill_action(struct opx *x, const struct op_obs *obs, const struct op_step *st,
                        struct op_action *a) {
  memset(a, 0, sizeof *a);
  a->kind = st->kind;
  snprintf(a->state, sizeof a->state, "intent");
  if (st->machine >= 0)
    snprintf(a->machine, sizeof a->machine, "%s", x->spec.machines[st->machine].name);
  a->member = st->member;
  a->target = st->target;
  if (st->kind == OP_UPGRADE)
    snprintf(a->binary, sizeof a->binary, "%s", opx_member_binary(x));
  a->spec_rev = x->spec_rev;
  a->at_ms = opx_wall_ms();
  snprintf(a->by, sizeof a->by, "%s", x->id);
  snprintf(a->reason, sizeof a->reason, "%s", st->reason);
  (void)obs;
}

/* Reads record seq back (to update it). */
static int load_record(struct opx *x, uint64_t seq, struct op_action *a) {
  static struct op_action recs[64];
  size_t n = 0;
  if (opx_load_actions(x, false, recs, 64, &n))
    return -1;
  for (size_t i = 0; i < n; i++)
    if (recs[i].seq == seq) {
      *a = recs[i];
      return 0;
    }
  return -1;
}

static int close_record(struct opx *x, struct op_action *a, const char *state,
                        const char *outcome) {
  snprintf(a->state, sizeof a->state, "%s", state);
  snprintf(a->outcome, sizeof a->outcome, "%s", outcome);
  snprintf(a->done_by, sizeof a->done_by, "%s", x->id);
  a->done_ms = opx_wall_ms();
  int rc = opx_write_action(x, a, false);
  if (rc == KETCH_ENOTFOUND)
    return -2;
  if (rc)
    opx_log(x, "warn", "outcome of #%" PRIu64 " not recorded error=\"%s\"", a->seq,
            ketch_strerror(rc));
  return 0;
}

int opx_act(struct opx *x, const struct op_obs *obs, const struct op_step *st) {
  char q[OP_REASON_MAX + 8], outcome[OP_REASON_MAX];
  struct op_action a;
  switch (st->kind) {
  case OP_NONE:
  case OP_WAIT:
  case OP_REPORT:
  case OP_SEED:
  case OP_RECOVER:
  case OP_RESTORE:
    return 0;
  case OP_BACKUP: {
    struct op_backup b;
    int rc = opx_backup(x, obs, st->source, "scheduled", &b);
    opx_backup_maintain(x);
    return rc;
  }
  case OP_FINISH:
  case OP_ABANDON: {
    if (load_record(x, st->seq, &a))
      return -1;
    if (st->kind == OP_FINISH && a.kind == OP_REMOVE && st->machine >= 0) {
      char e[300]; /* the tail of a remove: its process stopped */
      opx_drv_stop(x, st->machine, e, sizeof e);
    }
    const char *state = st->kind == OP_FINISH ? "done" : "abandoned";
    snprintf(outcome, sizeof outcome, "%s by successor %s: %.200s",
             st->kind == OP_FINISH ? "finished" : "abandoned", x->id, st->reason);
    int rc = close_record(x, &a, state, outcome);
    opx_log(x, "info", "outcome seq=%" PRIu64 " kind=%s state=%s outcome=%s", a.seq,
            op_kind_name(a.kind), state, opx_q(outcome, q, sizeof q));
    return rc;
  }
  default:
    break;
  }
  if (st->backup_first && !st->resumed) {
    int src = -1;
    struct op_view v;
    op_view_of(&x->spec, obs, &v);
    for (size_t i = 0; i < obs->n_members; i++)
      if (v.healthy[i] && (src < 0 || obs->members[i].applied > obs->members[src].applied))
        src = (int)i;
    char why[OP_REASON_MAX];
    op_step_describe(&x->spec, st, why, sizeof why);
    char before[OP_REASON_MAX + 16];
    snprintf(before, sizeof before, "before %.250s", why);
    if (src < 0 || opx_backup(x, obs, src, before, NULL)) {
      opx_log(x, "warn", "step postponed: the backup before it failed step=%s",
              op_kind_name(st->kind));
      opx_backup_maintain(x);
      return -1;
    }
    opx_backup_maintain(x);
  }
  if (st->resumed) {
    if (load_record(x, st->seq, &a)) {
      opx_log(x, "warn", "record #%" PRIu64 " to resume not found", st->seq);
      return -1;
    }
  } else {
    fill_action(x, obs, st, &a);
    int rc = opx_write_action(x, &a, true);
    if (rc == KETCH_ENOTFOUND)
      return -2;
    if (rc) {
      opx_log(x, "warn", "intent not recorded, step not taken step=%s error=\"%s\"",
              op_kind_name(st->kind), ketch_strerror(rc));
      return -1;
    }
    opx_log(x, "info", "intent seq=%" PRIu64 " kind=%s machine=%s", a.seq, op_kind_name(a.kind),
            a.machine[0] ? a.machine : "-");
    if (x->pause_after_intent_ms > 0) {
      opx_log(x, "info", "pausing after intent seq=%" PRIu64 " ms=%" PRId64, a.seq,
              x->pause_after_intent_ms);
      opx_sleep_ms(x->pause_after_intent_ms);
    }
  }
  int ok = take(x, obs, st, outcome, sizeof outcome);
  const char *state = ok == 0 ? "done" : "failed";
  if (st->resumed) {
    size_t l = strlen(outcome);
    snprintf(outcome + l, sizeof outcome - l, " (finished by successor %s)", x->id);
  }
  int rc = close_record(x, &a, state, outcome);
  opx_log(x, ok == 0 ? "info" : "warn", "outcome seq=%" PRIu64 " kind=%s state=%s outcome=%s",
          a.seq, op_kind_name(a.kind), state, opx_q(outcome, q, sizeof q));
  if (ok == 0)
    x->mem.wait_index = opx_leader_index(x, obs);
  return rc == -2 ? -2 : ok;
}
