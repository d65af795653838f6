/* tools/operator/plan.c — the reconcile decision, as a pure function
 * (no I/O, no clock: both times are arguments). test/unit/operator_plan_test.c
 * drives it with tables of observed states.
 *
 * op_decide() returns ONE step, checked in this order (the first that
 * applies wins):
 *   0. nothing answered: REPORT (or SEED when `apply` found nothing at all);
 *   1. no quorum: REPORT, never an action (`recover` is for a person);
 *   2. our last change not yet visible (list_applied < wait_index): WAIT;
 *   3. a predecessor's intent: FINISH it when its effect is visible; redo a
 *      START/UPGRADE that is still wanted; redo any other step only if the
 *      rules below choose the very same step now; else ABANDON it;
 *   4. the learner (at most one): START it if added and never started;
 *      REMOVE it if it stayed unhealthy for dead-after; PROMOTE it once
 *      healthy, caught up (applied within catchup-entries of the leader's
 *      index) and healthy for `stabilization`; else WAIT;
 *   5. voters unhealthy for dead-after: ADD_LEARNER on a free machine while
 *      fewer than `size` voters are healthy (replacement first), else
 *      REMOVE the one dead longest — never when the dead number more than
 *      (voters-1)/2, never below min-quorum voters;
 *      a voter unhealthy for less than dead-after: WAIT (no other change);
 *   6. fewer voters than size: ADD_LEARNER on the first free machine (one
 *      where a member failed to start rests for 5 dead-afters); more:
 *      REMOVE the last machine's member (MOVE_LEADER first if it leads);
 *   7. members whose binary (or version) differs from the spec: inside an
 *      upgrade window (if the spec has any; else WAIT, saying when the next
 *      opens) and once every
 *      voter is healthy, caught up and stable, UPGRADE the first follower;
 *      the leader last, after MOVE_LEADER to an upgraded member; a failed
 *      upgrade under this spec revision halts the rollout (REPORT);
 *   8. a backup due (interval since the newest verified one): BACKUP from
 *      the healthy member with the highest applied index;
 *   9. NONE.
 * Membership changes (ADD_LEARNER, PROMOTE, REMOVE) carry backup_first when
 * the spec has a backup policy.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "op.h"

/* ---- maintenance windows ---- */

static const char *const wdays[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};

static int wday_of(const char *p, size_t n) {
  for (int d = 0; d < 7; d++)
    if (n == 3 && !strncmp(p, wdays[d], 3))
      return d;
  return -1;
}

/* The weekday (0 = Sunday) of Unix time ms, in UTC. */
static int weekday(int64_t ms) {
  int64_t days = ms >= 0 ? ms / 86400000 : (ms - 86399999) / 86400000;
  return (int)((days % 7 + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
}

/* "HH:MM" (00:00 .. 24:00) -> minutes; -1 if malformed. */
static int hhmm(const char *p) {
  if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]) || p[2] != ':' ||
      !isdigit((unsigned char)p[3]) || !isdigit((unsigned char)p[4]))
    return -1;
  int h = (p[0] - '0') * 10 + p[1] - '0', m = (p[3] - '0') * 10 + p[4] - '0';
  return h > 24 || m > 59 || (h == 24 && m) ? -1 : h * 60 + m;
}

int op_window_parse(const char *text, struct op_window *w) {
  memset(w, 0, sizeof *w);
  const char *sp = strchr(text, ' ');
  if (!sp || strlen(sp + 1) != 11 || sp[6] != '-')
    return -1;
  if ((size_t)(sp - text) == 5 && !strncmp(text, "daily", 5)) {
    w->days = 0x7f;
  } else {
    for (const char *p = text; p < sp;) {
      const char *e = memchr(p, ',', (size_t)(sp - p));
      if (!e)
        e = sp;
      else if (e + 1 == sp)
        return -1; /* "Mon, 02:00-03:00" */
      const char *dash = memchr(p, '-', (size_t)(e - p));
      int a = wday_of(p, (size_t)((dash ? dash : e) - p)), b = a;
      if (dash)
        b = wday_of(dash + 1, (size_t)(e - dash - 1));
      if (a < 0 || b < 0)
        return -1;
      for (int d = a;; d = (d + 1) % 7) { /* Fri-Mon wraps past Sunday */
        w->days |= (uint8_t)(1u << d);
        if (d == b)
          break;
      }
      p = e + (e < sp);
    }
  }
  int from = hhmm(sp + 1), to = hhmm(sp + 7);
  if (from < 0 || to < 0 || from == 1440 || from == to)
    return -1;
  w->from_min = (int16_t)from;
  w->to_min = (int16_t)to;
  return 0;
}

bool op_in_window(const struct op_spec *spec, int64_t ms, int64_t *next_ms) {
  if (!spec->n_windows)
    return true;
  const int64_t day = 86400000, minute = 60000;
  int64_t midnight = ms - ((ms % day) + day) % day;
  int wd = weekday(midnight);
  int64_t best = INT64_MAX;
  /* a window opened yesterday may run past midnight into today */
  for (int k = -1; k <= 7; k++) {
    int d = ((wd + k) % 7 + 7) % 7;
    for (int i = 0; i < spec->n_windows; i++) {
      const struct op_window *w = &spec->windows[i];
      if (!(w->days & (1u << d)))
        continue;
      int64_t open = midnight + k * day + w->from_min * minute;
      int64_t close =
          midnight + k * day + w->to_min * minute + (w->to_min <= w->from_min ? day : 0);
      if (ms >= open && ms < close)
        return true;
      if (open > ms && open < best)
        best = open;
    }
  }
  *next_ms = best;
  return false;
}

/* ---- the view ---- */

void op_view_of(const struct op_spec *spec, const struct op_obs *obs, struct op_view *v) {
  memset(v, 0, sizeof *v);
  v->leader = -1;
  for (size_t i = 0; i < obs->n_members; i++) {
    const struct op_member *m = &obs->members[i];
    if (m->learner)
      v->learners++;
    else
      v->voters++;
    if (m->reachable && m->leader == m->id &&
        (v->leader < 0 || m->term > obs->members[v->leader].term))
      v->leader = (int)i;
  }
  if (v->leader >= 0) {
    v->leader_id = obs->members[v->leader].id;
    v->leader_index = obs->members[v->leader].raft_index;
  }
  for (size_t i = 0; i < obs->n_members; i++) {
    const struct op_member *m = &obs->members[i];
    v->healthy[i] =
        m->reachable && m->leader != 0 && !m->alarm && (v->leader < 0 || m->leader == v->leader_id);
    v->caught_up[i] =
        v->healthy[i] && v->leader >= 0 && m->applied + spec->catchup_entries >= v->leader_index;
    if (v->healthy[i] && !m->learner)
      v->healthy_voters++;
  }
  v->quorum = v->leader >= 0 && v->healthy_voters * 2 > v->voters;
}

/* ---- memory ---- */

void op_memory_init(struct op_memory *m) { memset(m, 0, sizeof *m); }

const struct op_track *op_track_of(const struct op_memory *m, uint64_t id) {
  for (size_t i = 0; i < m->n; i++)
    if (m->t[i].id == id)
      return &m->t[i];
  return NULL;
}

void op_track_restarted(struct op_memory *m, uint64_t id, int64_t now_ms) {
  for (size_t i = 0; i < m->n; i++)
    if (m->t[i].id == id) {
      m->t[i].healthy_since_ms = -1;
      m->t[i].unhealthy_since_ms = now_ms;
    }
}

void op_track_update(struct op_memory *m, const struct op_spec *spec, const struct op_obs *obs,
                     int64_t now_ms) {
  struct op_view v;
  op_view_of(spec, obs, &v);
  struct op_track next[OP_MAX_MEMBERS];
  size_t n = 0;
  for (size_t i = 0; i < obs->n_members && n < OP_MAX_MEMBERS; i++) {
    const struct op_track *old = op_track_of(m, obs->members[i].id);
    struct op_track t = old ? *old : (struct op_track){obs->members[i].id, -1, -1};
    if (v.healthy[i]) {
      if (t.healthy_since_ms < 0)
        t.healthy_since_ms = now_ms;
      t.unhealthy_since_ms = -1;
    } else {
      if (t.unhealthy_since_ms < 0)
        t.unhealthy_since_ms = now_ms;
      t.healthy_since_ms = -1;
    }
    next[n++] = t;
  }
  memcpy(m->t, next, n * sizeof next[0]);
  m->n = n;
}

/* ---- history ---- */

static int machine_by_name(const struct op_spec *spec, const char *name) {
  for (int i = 0; i < spec->n_machines; i++)
    if (!strcmp(spec->machines[i].name, name))
      return i;
  return -1;
}

void op_history_of(const struct op_spec *spec, const struct op_action *recs, size_t n,
                   int64_t spec_rev, const struct op_backup *backups, size_t n_backups,
                   struct op_history *h) {
  memset(h, 0, sizeof *h);
  const struct op_action *newest = NULL;
  for (size_t i = 0; i < n; i++) {
    const struct op_action *a = &recs[i];
    if (!newest || a->seq > newest->seq)
      newest = a;
    int mi = machine_by_name(spec, a->machine);
    if (mi >= 0 && (a->kind == OP_START || a->kind == OP_UPGRADE || a->kind == OP_SEED) &&
        a->at_ms > h->last_start_ms[mi]) {
      h->last_start_ms[mi] = a->at_ms;
      h->last_start_failed[mi] = !strcmp(a->state, "failed");
    }
    if (a->kind == OP_UPGRADE && !strcmp(a->state, "failed") && a->spec_rev == spec_rev) {
      h->upgrade_halted = true;
      snprintf(h->halt_reason, sizeof h->halt_reason, "upgrade of %s failed: %s", a->machine,
               a->outcome);
    }
  }
  if (newest && !strcmp(newest->state, "intent")) {
    h->has_pending = true;
    h->pending = *newest;
  }
  for (size_t i = 0; i < n_backups; i++)
    if (!strcmp(backups[i].state, "verified") && backups[i].at_ms > h->last_backup_ms)
      h->last_backup_ms = backups[i].at_ms;
}

/* ---- the decision ---- */

struct ctx {
  const struct op_input *in;
  const struct op_spec *spec;
  const struct op_obs *obs;
  struct op_view v;
};

static void set(struct op_step *s, int kind, int machine, uint64_t member, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void set(struct op_step *s, int kind, int machine, uint64_t member, const char *fmt, ...) {
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->machine = machine;
  s->member = member;
  s->source = -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->reason, sizeof s->reason, fmt, ap);
  va_end(ap);
}

static const char *label(const struct ctx *c, int i) {
  const struct op_member *m = &c->obs->members[i];
  if (m->machine >= 0)
    return c->spec->machines[m->machine].name;
  return m->name[0] ? m->name : "(unnamed)";
}

static int64_t secs(int64_t ms) { return ms / 1000; }

static int64_t unhealthy_for(const struct ctx *c, int i) {
  const struct op_track *t = op_track_of(c->in->mem, c->obs->members[i].id);
  return t && t->unhealthy_since_ms >= 0 ? c->in->now_ms - t->unhealthy_since_ms : 0;
}

static int64_t healthy_for(const struct ctx *c, int i) {
  const struct op_track *t = op_track_of(c->in->mem, c->obs->members[i].id);
  return t && t->healthy_since_ms >= 0 ? c->in->now_ms - t->healthy_since_ms : -1;
}

static bool started_recently(const struct ctx *c, int machine) {
  int64_t t = machine >= 0 ? c->in->hist->last_start_ms[machine] : 0;
  return t > 0 && c->in->wall_ms - t < c->spec->dead_after_ms;
}

static int member_on(const struct ctx *c, int machine) {
  for (size_t i = 0; i < c->obs->n_members; i++)
    if (c->obs->members[i].machine == machine)
      return (int)i;
  return -1;
}

static int member_by_id(const struct ctx *c, uint64_t id) {
  for (size_t i = 0; i < c->obs->n_members; i++)
    if (c->obs->members[i].id == id)
      return (int)i;
  return -1;
}

/* A machine where a member failed to start rests for this many dead-afters
 * before it takes a new member (a broken machine is not retried in a loop). */
#define REST_DEAD_AFTERS 5

/* The first machine of the spec with no member, no process of ours, and no
 * recent failure to start a member. */
static int free_machine(const struct ctx *c) {
  const struct op_history *h = c->in->hist;
  for (int i = 0; i < c->spec->n_machines; i++)
    if (member_on(c, i) < 0 && c->obs->machines[i].process != 1 &&
        !(h->last_start_failed[i] &&
          c->in->wall_ms - h->last_start_ms[i] < REST_DEAD_AFTERS * c->spec->dead_after_ms))
      return i;
  return -1;
}

static bool outdated(const struct ctx *c, int i) {
  const struct op_member *m = &c->obs->members[i];
  if (m->machine < 0)
    return false;
  const char *bin = c->obs->machines[m->machine].binary;
  if (c->spec->binary[0] && bin[0] && strcmp(bin, c->spec->binary))
    return true;
  return c->spec->version[0] && m->version[0] && strcmp(m->version, c->spec->version);
}

/* A voter to hand leadership to: healthy, caught up, not the leader;
 * preferably ours and up to date. -1 if none. */
static int leader_target(const struct ctx *c, int avoid) {
  int best = -1, best_score = -1;
  for (size_t i = 0; i < c->obs->n_members; i++) {
    const struct op_member *m = &c->obs->members[i];
    if ((int)i == c->v.leader || (int)i == avoid || m->learner || !c->v.caught_up[i])
      continue;
    int score = (m->machine >= 0) * 2 + !outdated(c, (int)i);
    if (score > best_score)
      best = (int)i, best_score = score;
  }
  return best;
}

static void membership(const struct ctx *c, struct op_step *s) {
  s->backup_first = c->spec->backup.enabled;
}

static void move_leader(const struct ctx *c, struct op_step *s, const char *why) {
  int t = leader_target(c, -1);
  if (t < 0) {
    set(s, OP_WAIT, -1, 0, "%s: no healthy caught-up voter to hand leadership to yet", why);
    return;
  }
  set(s, OP_MOVE_LEADER, c->obs->members[c->v.leader].machine, c->v.leader_id,
      "%s: move leadership from %s to %s first", why, label(c, c->v.leader), label(c, t));
  s->target = c->obs->members[t].id;
}

static void rule_learner(const struct ctx *c, int L, struct op_step *s) {
  const struct op_spec *spec = c->spec;
  const struct op_member *m = &c->obs->members[L];
  if (m->machine < 0) {
    set(s, OP_REPORT, -1, m->id,
        "learner %016" PRIx64 " is on no machine of the spec: promote or remove it by hand", m->id);
    return;
  }
  const char *name = spec->machines[m->machine].name;
  bool recent = started_recently(c, m->machine);
  if (!c->v.healthy[L]) {
    if (!m->reachable && !m->name[0] && !recent) {
      set(s, OP_START, m->machine, m->id, "learner %s added, not started", name);
      return;
    }
    int64_t u = unhealthy_for(c, L);
    if (u >= spec->dead_after_ms && !recent) {
      set(s, OP_REMOVE, m->machine, m->id,
          "learner %s unhealthy for %" PRId64 "s (dead-after %" PRId64 "s): undo its addition",
          name, secs(u), secs(spec->dead_after_ms));
      membership(c, s);
      return;
    }
    set(s, OP_WAIT, m->machine, m->id, "learner %s not healthy yet (%" PRId64 "s)", name, secs(u));
    return;
  }
  if (!c->v.caught_up[L]) {
    set(s, OP_WAIT, m->machine, m->id,
        "learner %s catching up: applied %" PRIu64 " of the leader's %" PRIu64, name, m->applied,
        c->v.leader_index);
    return;
  }
  int64_t h = healthy_for(c, L);
  if (h < spec->stabilization_ms) {
    set(s, OP_WAIT, m->machine, m->id,
        "learner %s caught up, healthy for %" PRId64 ".%01" PRId64 "s of the %" PRId64 ".%01" PRId64
        "s stabilization",
        name, secs(h < 0 ? 0 : h), (h < 0 ? 0 : h) % 1000 / 100, secs(spec->stabilization_ms),
        spec->stabilization_ms % 1000 / 100);
    return;
  }
  set(s, OP_PROMOTE, m->machine, m->id,
      "learner %s caught up (applied %" PRIu64 ", leader %" PRIu64 ") and healthy for %" PRId64 "s",
      name, m->applied, c->v.leader_index, secs(h));
  membership(c, s);
}

static void rules(const struct ctx *c, struct op_step *s) {
  const struct op_spec *spec = c->spec;
  const struct op_obs *obs = c->obs;
  const struct op_view *v = &c->v;
  /* 4. the learner */
  for (size_t i = 0; i < obs->n_members; i++)
    if (obs->members[i].learner) {
      rule_learner(c, (int)i, s);
      return;
    }
  /* 5. dead and unhealthy voters */
  int ndead = 0, dead = -1, sick = -1;
  int64_t longest = -1;
  for (size_t i = 0; i < obs->n_members; i++) {
    if (obs->members[i].learner || v->healthy[i])
      continue;
    int64_t u = unhealthy_for(c, (int)i);
    if (u >= spec->dead_after_ms) {
      ndead++;
      if (u > longest)
        longest = u, dead = (int)i;
    } else if (sick < 0) {
      sick = (int)i;
    }
  }
  if (ndead > 0) {
    if (ndead > (v->voters - 1) / 2) {
      set(s, OP_REPORT, -1, 0,
          "%d of %d voters dead: more than (voters-1)/2, so none is removed automatically", ndead,
          v->voters);
      return;
    }
    int f = free_machine(c);
    if (v->healthy_voters < spec->size && f >= 0) {
      set(s, OP_ADD_LEARNER, f, 0, "replace dead %s (unhealthy for %" PRId64 "s) with %s",
          label(c, dead), secs(longest), spec->machines[f].name);
      membership(c, s);
      return;
    }
    if (v->voters - 1 < spec->min_quorum) {
      set(s, OP_REPORT, obs->members[dead].machine, obs->members[dead].id,
          "dead %s cannot be removed: %d voters would be left, below min-quorum %d", label(c, dead),
          v->voters - 1, spec->min_quorum);
      return;
    }
    set(s, OP_REMOVE, obs->members[dead].machine, obs->members[dead].id,
        "%s dead (unhealthy for %" PRId64 "s, dead-after %" PRId64 "s)%s", label(c, dead),
        secs(longest), secs(spec->dead_after_ms),
        f < 0 && v->healthy_voters < spec->size ? "; no free machine: remove first" : "");
    membership(c, s);
    return;
  }
  if (sick >= 0) {
    set(s, OP_WAIT, obs->members[sick].machine, obs->members[sick].id,
        "%s unhealthy for %" PRId64 "s (replaced after dead-after %" PRId64 "s)", label(c, sick),
        secs(unhealthy_for(c, sick)), secs(spec->dead_after_ms));
    return;
  }
  /* 6. size */
  if (v->voters < spec->size) {
    int f = free_machine(c);
    if (f < 0) {
      set(s, OP_REPORT, -1, 0, "%d of %d voters and no free machine to grow on", v->voters,
          spec->size);
      return;
    }
    set(s, OP_ADD_LEARNER, f, 0, "grow: %d of %d voters; add %s as a learner", v->voters,
        spec->size, spec->machines[f].name);
    membership(c, s);
    return;
  }
  if (v->voters > spec->size) {
    int victim = -1;
    for (int mi = spec->n_machines - 1; mi >= 0 && victim < 0; mi--) {
      int i = member_on(c, mi);
      if (i >= 0 && !obs->members[i].learner && i != v->leader)
        victim = i;
    }
    for (int mi = spec->n_machines - 1; mi >= 0 && victim < 0; mi--) {
      int i = member_on(c, mi);
      if (i >= 0 && !obs->members[i].learner)
        victim = i;
    }
    if (victim < 0) {
      set(s, OP_REPORT, -1, 0, "%d voters, %d wanted, and none of them on a machine of the spec",
          v->voters, spec->size);
      return;
    }
    if (v->voters - 1 < spec->min_quorum) {
      set(s, OP_REPORT, -1, 0, "shrink to %d refused: below min-quorum %d", v->voters - 1,
          spec->min_quorum);
      return;
    }
    if (victim == v->leader) {
      move_leader(c, s, "shrink");
      return;
    }
    set(s, OP_REMOVE, obs->members[victim].machine, obs->members[victim].id,
        "shrink: %d of %d voters; remove %s", v->voters, spec->size, label(c, victim));
    membership(c, s);
    return;
  }
  /* 7. rolling upgrade */
  int first = -1, n_out = 0;
  for (int mi = 0; mi < spec->n_machines; mi++) {
    int i = member_on(c, mi);
    if (i >= 0 && outdated(c, i)) {
      n_out++;
      if (first < 0 && i != v->leader)
        first = i;
    }
  }
  if (n_out) {
    if (c->in->hist->upgrade_halted) {
      set(s, OP_REPORT, -1, 0, "rolling upgrade halted: %s (apply the spec again to retry)",
          c->in->hist->halt_reason);
      return;
    }
    int64_t next;
    if (!op_in_window(spec, c->in->wall_ms, &next)) {
      int64_t mins = (next - c->in->wall_ms + 59999) / 60000;
      set(s, OP_WAIT, -1, 0,
          "rolling upgrade (%d members) waits for an upgrade window: the next opens in %" PRId64
          "h%02" PRId64 "m (%s %02" PRId64 ":%02" PRId64 " UTC)",
          n_out, mins / 60, mins % 60, wdays[weekday(next)], next % 86400000 / 3600000,
          next % 3600000 / 60000);
      return;
    }
    for (size_t i = 0; i < obs->n_members; i++) {
      if (!v->caught_up[i] || healthy_for(c, (int)i) < spec->stabilization_ms) {
        set(s, OP_WAIT, obs->members[i].machine, obs->members[i].id,
            "rolling upgrade waits for %s to be healthy, caught up and stable", label(c, (int)i));
        return;
      }
    }
    if (first < 0) {
      move_leader(c, s, "upgrade of the leader (last)");
      return;
    }
    const struct op_member *m = &obs->members[first];
    set(s, OP_UPGRADE, m->machine, m->id,
        "rolling upgrade: %s runs %s, the spec wants %s (%d left)", label(c, first),
        obs->machines[m->machine].binary[0] ? obs->machines[m->machine].binary : m->version,
        spec->binary[0] ? spec->binary : spec->version, n_out);
    return;
  }
  /* 8. backup */
  if (spec->backup.enabled &&
      (c->in->hist->last_backup_ms == 0 ||
       c->in->wall_ms - c->in->hist->last_backup_ms >= spec->backup.interval_ms)) {
    int src = -1;
    for (size_t i = 0; i < obs->n_members; i++)
      if (v->healthy[i] && (src < 0 || obs->members[i].applied > obs->members[src].applied))
        src = (int)i;
    if (src >= 0) {
      set(s, OP_BACKUP, obs->members[src].machine, obs->members[src].id,
          "scheduled backup (every %" PRId64 "s) from %s, applied index %" PRIu64,
          secs(spec->backup.interval_ms), label(c, src), obs->members[src].applied);
      s->source = src;
      return;
    }
  }
  set(s, OP_NONE, -1, 0, "the cluster matches the spec: %d voters healthy", v->healthy_voters);
}

/* 3. the predecessor's intent. */
static void pending(const struct ctx *c, struct op_step *s) {
  const struct op_action *p = &c->in->hist->pending;
  int mi = machine_by_name(c->spec, p->machine);
  int on = mi >= 0 ? member_on(c, mi) : -1;
  int who = member_by_id(c, p->member);
  bool effect = true, redo = false;
  switch (p->kind) {
  case OP_ADD_LEARNER:
    effect = on >= 0;
    break;
  case OP_START:
    effect = on >= 0 && c->obs->members[on].reachable;
    redo = on >= 0;
    break;
  case OP_PROMOTE:
    effect = who < 0 || !c->obs->members[who].learner;
    break;
  case OP_REMOVE:
    effect = who < 0;
    break;
  case OP_MOVE_LEADER:
    effect = c->v.leader_id != p->member;
    break;
  case OP_UPGRADE:
    effect = on >= 0 && c->v.healthy[on] &&
             (!p->binary[0] || !c->obs->machines[mi].binary[0] ||
              !strcmp(p->binary, c->obs->machines[mi].binary));
    redo = on >= 0;
    break;
  default:
    break; /* seed, recover, restore, backup: we have quorum, so it took */
  }
  if (effect) {
    set(s, OP_FINISH, mi, p->member, "the effect of #%" PRIu64 " (%s%s%s) is visible", p->seq,
        op_kind_name(p->kind), p->machine[0] ? " " : "", p->machine);
    s->seq = p->seq;
    s->of_kind = p->kind;
    return;
  }
  if (redo) {
    set(s, p->kind, mi, c->obs->members[on].id, "finish #%" PRIu64 " of %s: %s", p->seq, p->by,
        p->reason);
    s->resumed = true;
    s->seq = p->seq;
    return;
  }
  struct op_step fresh;
  rules(c, &fresh);
  if (fresh.kind == p->kind && (fresh.machine == mi || mi < 0) &&
      (!p->member || fresh.member == p->member) && (!p->target || fresh.target == p->target)) {
    *s = fresh;
    s->resumed = true;
    s->seq = p->seq;
    s->backup_first = false; /* taken before the intent was written */
    return;
  }
  char now[OP_REASON_MAX];
  op_step_describe(c->spec, &fresh, now, sizeof now);
  set(s, OP_ABANDON, mi, p->member,
      "#%" PRIu64 " (%s %s) is no longer the step to take; now: %.200s", p->seq,
      op_kind_name(p->kind), p->machine, now);
  s->seq = p->seq;
  s->of_kind = p->kind;
}

void op_decide(const struct op_input *in, struct op_step *out) {
  struct ctx c = {in, in->spec, in->obs, {0}};
  op_view_of(in->spec, in->obs, &c.v);
  if (!in->obs->have_list) {
    if (in->may_seed) {
      set(out, OP_SEED, 0, 0, "no member answers and there is no cluster: start %s as the seed",
          in->spec->machines[0].name);
      membership(&c, out);
      out->backup_first = false;
      return;
    }
    set(out, OP_REPORT, -1, 0, "no member answers at the spec's client URLs");
    return;
  }
  if (!c.v.quorum) {
    int answer = 0;
    for (size_t i = 0; i < in->obs->n_members; i++)
      answer += !in->obs->members[i].learner && in->obs->members[i].reachable;
    set(out, OP_REPORT, -1, 0,
        "quorum lost: %d of %d voters answer, %d healthy%s; changing nothing (ketch-operator "
        "recover prints the way back)",
        answer, c.v.voters, c.v.healthy_voters, c.v.leader < 0 ? ", no leader" : "");
    return;
  }
  if (in->mem->wait_index && in->obs->list_applied < in->mem->wait_index) {
    set(out, OP_WAIT, -1, 0,
        "waiting to observe our last change (index %" PRIu64 ", seen %" PRIu64 ")",
        in->mem->wait_index, in->obs->list_applied);
    return;
  }
  if (in->hist->has_pending) {
    pending(&c, out);
    return;
  }
  rules(&c, out);
}

int op_recover_choice(const struct op_spec *spec, const struct op_obs *obs, char *why,
                      size_t why_len) {
  struct op_view v;
  op_view_of(spec, obs, &v);
  if (v.quorum) {
    snprintf(why, why_len, "the cluster has quorum (%d of %d voters healthy): nothing to recover",
             v.healthy_voters, v.voters);
    return -1;
  }
  int best = -1;
  for (size_t i = 0; i < obs->n_members; i++) {
    const struct op_member *m = &obs->members[i];
    if (!m->reachable || m->machine < 0)
      continue;
    if (best < 0 || m->raft_index > obs->members[best].raft_index ||
        (m->raft_index == obs->members[best].raft_index && m->applied > obs->members[best].applied))
      best = (int)i;
  }
  if (best < 0) {
    snprintf(why, why_len,
             "no surviving member of the spec's machines answers: start the survivors (their data "
             "dirs as they are) and run recover again");
    return -1;
  }
  const struct op_member *m = &obs->members[best];
  snprintf(why, why_len, "%s has the most data (raft index %" PRIu64 ", applied %" PRIu64 ")",
           spec->machines[m->machine].name, m->raft_index, m->applied);
  return best;
}

size_t op_backup_prune(const struct op_backup_policy *p, const struct op_backup *b, size_t n,
                       int64_t wall_ms, bool *del) {
  size_t order[256], k = 0, marked = 0;
  for (size_t i = 0; i < n && k < 256; i++)
    order[k++] = i;
  for (size_t i = 1; i < k; i++) /* newest first */
    for (size_t j = i; j > 0 && b[order[j]].at_ms > b[order[j - 1]].at_ms; j--) {
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int kept = 0;
  int64_t oldest_kept = 0;
  for (size_t i = 0; i < n; i++)
    del[i] = false;
  for (size_t i = 0; i < k; i++) {
    const struct op_backup *x = &b[order[i]];
    if (strcmp(x->state, "verified"))
      continue;
    if (kept == 0 || (kept < p->keep && wall_ms - x->at_ms <= p->keep_for_ms)) {
      kept++;
      oldest_kept = x->at_ms;
    } else {
      del[order[i]] = true;
      marked++;
    }
  }
  for (size_t i = 0; i < k; i++) {
    const struct op_backup *x = &b[order[i]];
    if (!strcmp(x->state, "verified"))
      continue;
    if ((kept > 0 && x->at_ms < oldest_kept) || wall_ms - x->at_ms > p->keep_for_ms) {
      del[order[i]] = true;
      marked++;
    }
  }
  return marked;
}

void op_step_describe(const struct op_spec *spec, const struct op_step *s, char *out, size_t n) {
  char what[OP_NAME_MAX + 24] = "";
  if (s->machine >= 0 && s->machine < spec->n_machines)
    snprintf(what, sizeof what, " %s", spec->machines[s->machine].name);
  else if (s->member)
    snprintf(what, sizeof what, " %016" PRIx64, s->member);
  snprintf(out, n, "%s%s%s: %s", op_kind_name(s->kind), what, s->resumed ? " (resumed)" : "",
           s->reason);
}
