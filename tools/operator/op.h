/* tools/operator/op.h — ketch-operator: keeps a ketch cluster at its
 * declared size on bare metal (README "Operating a cluster with
 * ketch-operator").
 *
 * Data flow of one round (run.c), in the shape of hashicorp/raft-autopilot:
 *
 *   spec    <- GET /_ketch/operator/<cluster>/spec (YAML, written by `apply`
 *              through Raft; parsed by spec.c; the only copy of the truth)
 *   history <- the newest records of /_ketch/operator/<cluster>/actions/
 *              (record.c decodes them, plan.c sums them up: a pending
 *              intent, the last start per machine, a halted upgrade)
 *   obs     <- observe.c: every member's status (term, raft index, applied
 *              index, leader, learner, alarms) in parallel, the member list
 *              from the leader, and the driver's view of each machine
 *              (process running, which binary). Immutable once built.
 *   memory  <- plan.c op_track_update(): since when each member has been
 *              healthy / unhealthy, as seen by this acting operator
 *   step    <- plan.c op_decide(spec, obs, memory, history, now): a PURE
 *              function; one step, never more, with its reason
 *   act     <- act.c: backup first for membership changes, the intent
 *              record written (fenced on the election key) BEFORE the step
 *              is taken, the step (libketch call or driver action), the
 *              outcome written to the same record; then the leader's raft
 *              index is remembered and the next decision waits until the
 *              observed state has reached it.
 *
 * Ownership: spec.c, record.c and plan.c are pure (no I/O, no clock: `now`
 * is an argument) and are what test/unit/operator_plan_test.c and the fuzz
 * target test/fuzz/operator_spec_fuzz.c link. Everything else does I/O.
 * Every array has a fixed limit (OP_MAX_*); a spec over a limit is refused.
 */
#ifndef KT_OPERATOR_OP_H
#define KT_OPERATOR_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OP_MAX_MACHINES 32
#define OP_MAX_MEMBERS 40
#define OP_MAX_ARGS 32
#define OP_NAME_MAX 64
#define OP_URL_MAX 128
#define OP_PATH_MAX 512
#define OP_TEMPLATE_MAX 1024
#define OP_REASON_MAX 300
#define OP_SPEC_MAX_BYTES (256 * 1024)
#define OP_PREFIX "/_ketch/operator/"

/* ---- the spec (spec.c) ---- */

enum { OP_DRIVER_LOCAL = 0, OP_DRIVER_COMMAND = 1 };

/* A place a member may run. */
struct op_machine {
  char name[OP_NAME_MAX];      /* also the member's --name */
  char host[OP_NAME_MAX];      /* {host}; default: the peer URL's host */
  char client_url[OP_URL_MAX]; /* http://host:port */
  char peer_url[OP_URL_MAX];   /* http://host:port (identifies the machine's member) */
  char data_dir[OP_PATH_MAX];  /* the member's --data-dir */
};

struct op_backup_policy {
  bool enabled;                 /* the spec has a backup: section */
  char dir[OP_PATH_MAX];        /* where verified backups are kept */
  int64_t interval_ms;          /* default 1h */
  int keep;                     /* newest verified backups kept; default 24 */
  int64_t keep_for_ms;          /* older ones are pruned; default 7d */
  char upload[OP_TEMPLATE_MAX]; /* optional: run after verification ({file} {name}) */
  char remove[OP_TEMPLATE_MAX]; /* optional: run when pruned ({file} {name}) */
};

/* A maintenance window (upgrade-windows:), in UTC: on the days in `days`
 * (bit d = weekday d, 0 = Sunday) from `from_min` to `to_min` minutes after
 * midnight; to_min <= from_min runs past midnight into the next day. */
#define OP_MAX_WINDOWS 16
struct op_window {
  uint8_t days;
  int16_t from_min, to_min;
};

struct op_spec {
  char cluster[OP_NAME_MAX];
  int size;
  char token[OP_NAME_MAX];   /* --initial-cluster-token; default: cluster */
  char binary[OP_PATH_MAX];  /* the ketch binary members run ("": next to ketch-operator) */
  char version[OP_NAME_MAX]; /* optional: the version members must report */
  int driver;                /* OP_DRIVER_* */
  char cmd_start[OP_TEMPLATE_MAX], cmd_stop[OP_TEMPLATE_MAX], cmd_wipe[OP_TEMPLATE_MAX];
  char cmd_force_new_cluster[OP_TEMPLATE_MAX]; /* optional (recover) */
  char cmd_restore[OP_TEMPLATE_MAX];           /* optional (restore) */
  char member_args[OP_MAX_ARGS][OP_URL_MAX];   /* extra flags for every member */
  int n_member_args;
  struct op_machine machines[OP_MAX_MACHINES];
  int n_machines;
  int64_t stabilization_ms; /* default 10 s */
  int64_t dead_after_ms;    /* default 60 s */
  int min_quorum;           /* voters never removed below this; default size/2 + 1 */
  uint64_t catchup_entries; /* a learner within this many entries of the leader is caught up */
  struct op_backup_policy backup;
  /* when a rolling upgrade may take a step (none: any time) */
  struct op_window windows[OP_MAX_WINDOWS];
  int n_windows;
};

/* "Sat 02:00-04:00", "Mon-Fri 22:00-01:30", "Sat,Sun 00:00-24:00",
 * "daily 03:00-04:00" (UTC) -> *w; -1 if malformed. */
int op_window_parse(const char *text, struct op_window *w);
/* Is wall-clock time `ms` (Unix ms) inside one of the spec's windows (true
 * when it has none)? When not, *next_ms is when the next one opens. */
bool op_in_window(const struct op_spec *spec, int64_t ms, int64_t *next_ms);

/* Parses and checks a YAML spec (the whole document: OP_SPEC_MAX_BYTES at
 * most). Returns 0, or -1 with `err` naming the field and the rule broken
 * ("machines[2].peer-url: must be http://host:port"). Unknown keys are
 * errors (a typo must not silently mean a default). */
int op_spec_parse(const char *text, size_t len, struct op_spec *out, char *err, size_t err_len);

/* "10s", "1m", "500ms", "2h", "7d", or a bare number of seconds -> ms;
 * -1 if malformed or negative or absurd (> 10 years). */
int64_t op_parse_duration(const char *s);

/* Template expansion for the command driver and the backup upload: every
 * {name} in `tmpl` is replaced by the value of the variable `name`
 * (vars[2i] = name, vars[2i+1] = value, n_vars pairs). An unknown
 * placeholder or an output longer than out_len - 1 is an error (-1, err set). */
int op_expand(const char *tmpl, const char *const *vars, size_t n_vars, char *out, size_t out_len,
              char *err, size_t err_len);

/* ---- the action log (record.c) ---- */

enum op_kind {
  OP_NONE = 0,    /* the cluster matches the spec */
  OP_WAIT,        /* something is settling: nothing to do this round */
  OP_REPORT,      /* something is wrong that the operator must not fix alone */
  OP_SEED,        /* start the first member of a new cluster */
  OP_ADD_LEARNER, /* member add --learner on a free machine */
  OP_START,       /* start an added member (its data dir wiped first) */
  OP_PROMOTE,     /* promote a caught-up, stable learner */
  OP_REMOVE,      /* remove a member (dead or surplus), then stop its process */
  OP_MOVE_LEADER, /* hand leadership to `target` */
  OP_UPGRADE,     /* restart one member with the spec's binary */
  OP_BACKUP,      /* a scheduled, verified backup */
  OP_FINISH,      /* a predecessor's intent whose effect is visible: mark it done */
  OP_ABANDON,     /* a predecessor's intent no longer wanted: mark it abandoned */
  OP_RECOVER,     /* (human) --force-new-cluster on the best survivor */
  OP_RESTORE,     /* (human) a new cluster from a backup */
  OP_KIND_COUNT
};

const char *op_kind_name(int kind); /* "add-learner"; "?" outside the enum */
int op_kind_of(const char *name);   /* -1 if unknown */

/* One record of /_ketch/operator/<cluster>/actions/<seq %016x>: a logfmt
 * line (`seq=12 kind=add-learner state=intent machine=n4 ...`). */
struct op_action {
  uint64_t seq;
  int kind;
  char state[16];              /* intent, done, failed, abandoned */
  char machine[OP_NAME_MAX];   /* "" when none */
  uint64_t member, target;     /* 0 when none */
  char binary[OP_PATH_MAX];    /* upgrade: the binary started */
  int64_t spec_rev;            /* the spec's mod revision the decision used */
  int64_t at_ms;               /* wall clock, ms since the epoch (intent written) */
  int64_t done_ms;             /* wall clock of the outcome; 0 while an intent */
  char by[OP_NAME_MAX];        /* the operator that wrote the intent */
  char done_by[OP_NAME_MAX];   /* the operator that recorded the outcome */
  char reason[OP_REASON_MAX];  /* why the step was chosen */
  char outcome[OP_REASON_MAX]; /* what happened */
};

/* Encodes `a` as one line into out (NUL-terminated). Returns its length, or
 * -1 if it does not fit. */
int op_action_encode(const struct op_action *a, char *out, size_t out_len);
/* Decodes a record (bounds-checked: any byte string is safe to give it).
 * Unknown keys are skipped. Returns 0, or -1 with err set. */
int op_action_decode(const char *buf, size_t len, struct op_action *a, char *err, size_t err_len);

/* A backup's record, /_ketch/operator/<cluster>/backups/<name> (logfmt). */
struct op_backup {
  char name[OP_NAME_MAX * 2]; /* file name inside the backup dir */
  char state[16];             /* verified, failed, corrupt */
  int64_t at_ms;              /* wall clock of the snapshot */
  int64_t revision;           /* the snapshot's store revision */
  uint64_t member;            /* the member it was taken from */
  uint64_t size_bytes;
  uint32_t hash_kv;        /* the cluster's hash-kv at `revision` (= the restored copy's) */
  char why[OP_REASON_MAX]; /* scheduled / before add-learner n4 / the failure */
};
int op_backup_encode(const struct op_backup *b, char *out, size_t out_len);
int op_backup_decode(const char *buf, size_t len, struct op_backup *b, char *err, size_t err_len);

/* ---- observed state (filled by observe.c; read by plan.c) ---- */

struct op_member {
  uint64_t id;
  char name[OP_NAME_MAX]; /* "" while unstarted (added, never published) */
  char peer_url[OP_URL_MAX];
  char client_url[OP_URL_MAX]; /* the machine's, or the first published one */
  bool learner;                /* from the member list */
  int machine;                 /* index into spec.machines by peer URL; -1: not ours */
  bool reachable;              /* its own status answered (fields below valid) */
  uint64_t term, raft_index, applied, leader;
  bool alarm; /* it reports an alarm (NOSPACE, CORRUPT) */
  char version[32];
};

struct op_machine_obs {
  int process;              /* the driver's view: 1 running, 0 not, -1 unknown */
  char binary[OP_PATH_MAX]; /* the binary it runs, "" unknown */
};

struct op_obs {
  bool have_list;        /* some member answered the member list */
  uint64_t list_from;    /* who answered it (the leader when there is one) */
  uint64_t list_applied; /* that member's applied index */
  size_t n_members;      /* sorted by id */
  struct op_member members[OP_MAX_MEMBERS];
  struct op_machine_obs machines[OP_MAX_MACHINES];
};

/* What plan.c derives from one observation. */
struct op_view {
  int voters, learners, healthy_voters;
  int leader; /* index into obs.members, -1 none */
  uint64_t leader_id, leader_index;
  bool quorum;                  /* a leader, and more than half of the voters healthy */
  bool healthy[OP_MAX_MEMBERS]; /* reachable, knows a leader, no alarm */
  bool caught_up[OP_MAX_MEMBERS];
};
void op_view_of(const struct op_spec *spec, const struct op_obs *obs, struct op_view *v);

/* ---- the acting operator's memory across rounds (plan.c) ---- */

struct op_track {
  uint64_t id;
  int64_t healthy_since_ms;   /* -1: not healthy now */
  int64_t unhealthy_since_ms; /* -1: healthy now */
};
struct op_memory {
  struct op_track t[OP_MAX_MEMBERS];
  size_t n;
  uint64_t wait_index; /* raft index after our last change; 0 none */
};
void op_memory_init(struct op_memory *m);
/* Updates each member's healthy/unhealthy-since times from one round's view
 * (monotonic now_ms); members gone from the list are forgotten. */
void op_track_update(struct op_memory *m, const struct op_spec *spec, const struct op_obs *obs,
                     int64_t now_ms);
const struct op_track *op_track_of(const struct op_memory *m, uint64_t id);
/* The operator (re)started member `id` at now_ms: whatever it was before,
 * its health is judged afresh (unhealthy since now, until seen healthy). */
void op_track_restarted(struct op_memory *m, uint64_t id, int64_t now_ms);

/* ---- history: what the action log says (plan.c) ---- */

struct op_history {
  bool has_pending; /* the newest record is an intent without outcome */
  struct op_action pending;
  int64_t last_start_ms[OP_MAX_MACHINES];  /* wall ms of the newest start/upgrade there */
  bool last_start_failed[OP_MAX_MACHINES]; /* ...and it failed: the machine rests a while */
  bool upgrade_halted;                     /* an upgrade failed under this spec revision */
  char halt_reason[OP_REASON_MAX];
  int64_t last_backup_ms; /* wall ms of the newest verified backup; 0 none */
};
/* Sums up records (any order) for spec revision spec_rev. */
void op_history_of(const struct op_spec *spec, const struct op_action *recs, size_t n,
                   int64_t spec_rev, const struct op_backup *backups, size_t n_backups,
                   struct op_history *h);

/* ---- the decision (plan.c) ---- */

struct op_step {
  int kind;
  int machine;       /* index into spec.machines, -1 none */
  uint64_t member;   /* the member acted on (move-leader: the current leader) */
  uint64_t target;   /* move-leader: the new leader */
  bool resumed;      /* finishing the predecessor's intent `seq` */
  uint64_t seq;      /* resumed / finish / abandon: the record */
  int of_kind;       /* finish / abandon: the record's kind */
  bool backup_first; /* a membership change: take a verified backup first */
  int source;        /* backup: index into obs.members of the source, else -1 */
  char reason[OP_REASON_MAX];
};

struct op_input {
  const struct op_spec *spec;
  const struct op_obs *obs;
  const struct op_memory *mem;
  const struct op_history *hist;
  int64_t now_ms;  /* monotonic, the clock of op_memory */
  int64_t wall_ms; /* wall clock, the clock of the records */
  bool may_seed;   /* `apply` on nothing: the first step may be SEED */
};

/* THE decision: one step from the observed state. Pure. */
void op_decide(const struct op_input *in, struct op_step *out);

/* `recover`: the survivor to restart with --force-new-cluster (index into
 * obs.members, the reachable member of ours with the highest raft index,
 * then the highest applied index), or -1 with the reason. Refuses when the
 * cluster has quorum. */
int op_recover_choice(const struct op_spec *spec, const struct op_obs *obs, char *why,
                      size_t why_len);

/* Backups to prune: sets del[i] for each of the n records (newest first
 * expected any order) that the policy no longer keeps: verified ones beyond
 * the newest `keep` or older than keep-for (the newest verified one is
 * always kept), failed/corrupt ones older than the oldest verified one kept.
 * Returns how many are marked. */
size_t op_backup_prune(const struct op_backup_policy *p, const struct op_backup *b, size_t n,
                       int64_t wall_ms, bool *del);

/* The step as one log/status phrase ("add-learner n4: grow to 5 members"). */
void op_step_describe(const struct op_spec *spec, const struct op_step *s, char *out, size_t n);

#endif
