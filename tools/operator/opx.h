/* tools/operator/opx.h — the I/O half of ketch-operator (everything that
 * is not spec.c, record.c or plan.c): one struct opx per process, owned by
 * the main thread, plus the session thread's shared words (main.c).
 *
 *   util.c     logging (one logfmt line per event), clocks, child processes
 *   cluster.c  the reserved keys: spec, action log (fenced writes), backups
 *   observe.c  one round's op_obs: statuses in parallel, the member list
 *   driver.c   local (child processes) and command (templates) drivers
 *   backup.c   snapshot, verification (trailer + restored hash-kv), pruning
 *   act.c      carrying out one op_step: intent, action, outcome
 *   main.c     commands: apply, run, status, recover, restore
 */
#ifndef KT_OPERATOR_OPX_H
#define KT_OPERATOR_OPX_H

#include "../../client/ketch.h"
#include "op.h"

#define OPX_MAX_HANDLES (OP_MAX_MACHINES + OP_MAX_MEMBERS)

struct opx_handle {
  char url[OP_URL_MAX];
  ketch_client *c;
};

struct opx {
  char id[OP_NAME_MAX]; /* this operator in records and logs (host:pid or --id) */
  char cluster[OP_NAME_MAX];
  char endpoints[4096]; /* the work handle's endpoint list */
  ketch_client *c;      /* the work handle: spec, records, membership calls */
  struct op_spec spec;
  int64_t spec_rev; /* mod revision of the spec key; 0 none */
  bool have_spec;
  char ketch_bin[OP_PATH_MAX];    /* default member binary and the verifier's */
  char ketchutl_bin[OP_PATH_MAX]; /* snapshot restore */
  /* fencing: the election key this process holds while acting (NULL: none) */
  char *lead_key;
  int64_t lead_rev;
  struct op_memory mem;
  int64_t pause_after_intent_ms; /* test/debug aid: sleep after writing an intent */
  struct opx_handle h[OPX_MAX_HANDLES];
  size_t nh;
};

/* ---- util.c ---- */
int64_t opx_mono_ms(void);
int64_t opx_wall_ms(void);
void opx_sleep_ms(int64_t ms);
/* One log line on stderr: "<time> <level> operator <id> <msg>" (msg holds
 * the message and its key=value pairs). */
void opx_log(const struct opx *x, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A logfmt value: bare, or quoted with escapes. */
const char *opx_q(const char *v, char *buf, size_t n);
/* "2026-11-26T14:49:53.869Z" for a wall ms. */
void opx_time_text(int64_t wall_ms, char *out, size_t n);
/* Runs `/bin/sh -c cmd`, at most timeout_ms; 0 if it exited 0, else -1 with
 * err holding the exit status and the output's tail. */
int opx_sh(const char *cmd, int64_t timeout_ms, char *err, size_t err_len);
/* Runs argv (no shell) with output to `log_path` (NULL: the output's tail
 * goes to err), waits at most timeout_ms. */
int opx_run(char *const argv[], int64_t timeout_ms, char *err, size_t err_len);
/* rm -rf path (refuses "" and "/"). */
int opx_rm_rf(const char *path);
int opx_mkdir_p(const char *path);
/* Two free loopback TCP ports (bound then closed). */
int opx_free_ports(int *a, int *b);

/* ---- cluster.c ---- */
/* The spec's text and mod revision (serializable: any member, possibly
 * stale; for reports without quorum). KETCH_ENOTFOUND when absent. */
int opx_get_spec(struct opx *x, bool serializable, char **text, size_t *len, int64_t *rev);
/* Reads and parses the spec into x->spec (x->have_spec). 0 or -1 (logged once). */
int opx_load_spec(struct opx *x, bool serializable, char *err, size_t err_len);
int opx_put_spec(struct opx *x, const char *text, size_t len, int64_t *rev);
/* The newest `max` records (newest first). */
int opx_load_actions(struct opx *x, bool serializable, struct op_action *out, size_t max,
                     size_t *n);
/* Writes a record: create (a new seq, must not exist) or update. When
 * acting, only while x->lead_key still has x->lead_rev (else KETCH_ENOTFOUND:
 * not the acting operator any more). */
int opx_write_action(struct opx *x, struct op_action *a, bool create);
int opx_load_backups(struct opx *x, bool serializable, struct op_backup *out, size_t max,
                     size_t *n);
int opx_put_backup(struct opx *x, const struct op_backup *b);
int opx_delete_backup(struct opx *x, const char *name);
/* Key of this cluster under the reserved prefix: OP_PREFIX<cluster>/<rest>. */
void opx_key(const struct opx *x, const char *rest, char *out, size_t n);
/* (Re)opens x->c on `eps` if it differs from the current list. */
int opx_connect(struct opx *x, const char *eps, char *err, size_t err_len);
/* The spec's client URLs joined by ',' plus `extra`. */
void opx_spec_endpoints(const struct op_spec *s, const char *extra, char *out, size_t n);

/* ---- observe.c ---- */
/* One observation (every member's status, the member list from the
 * leader, the driver's view). Needs x->spec. */
void opx_observe(struct opx *x, struct op_obs *obs);
/* The cached handle of one URL (opened on first use; NULL if out of memory). */
ketch_client *opx_handle(struct opx *x, const char *url);
void opx_drop_handle(struct opx *x, const char *url);
void opx_close_handles(struct opx *x);
/* The leader's raft index now (0 if unknown). */
uint64_t opx_leader_index(struct opx *x, const struct op_obs *obs);

/* ---- driver.c ---- */
struct opx_start {
  const char *initial_cluster;
  const char *state; /* new, existing */
  const char *binary;
  bool force_new_cluster;
};
int opx_drv_start(struct opx *x, int mi, const struct opx_start *s, char *err, size_t err_len);
int opx_drv_stop(struct opx *x, int mi, char *err, size_t err_len);
int opx_drv_wipe(struct opx *x, int mi, char *err, size_t err_len);
/* Makes machine mi's data dir from a snapshot file. */
int opx_drv_restore(struct opx *x, int mi, const char *file, char *err, size_t err_len);
void opx_drv_probe(struct opx *x, int mi, struct op_machine_obs *out);
/* The binary members run: the spec's, or the ketch next to ketch-operator. */
const char *opx_member_binary(const struct opx *x);
/* Local driver: "data dir is absent or empty" (safe to seed); command: false. */
bool opx_drv_data_empty(struct opx *x, int mi);

/* ---- backup.c ---- */
/* Takes a snapshot from obs->members[src], verifies it, records it.
 * 0 = verified (out filled), -1 = failed (recorded and logged). */
int opx_backup(struct opx *x, const struct op_obs *obs, int src, const char *why,
               struct op_backup *out);
/* Re-checks kept backup files (corrupt ones are marked) and prunes. */
void opx_backup_maintain(struct opx *x);
/* Checks a snapshot file's BLAKE2b trailer; *revision from its header. */
int opx_snapshot_check(const char *path, int64_t *revision, uint64_t *size, char *err,
                       size_t err_len);

/* ---- act.c ---- */
/* Carries out one step (logged). 0 done or nothing to do, -1 failed,
 * -2 not the acting operator any more. */
int opx_act(struct opx *x, const struct op_obs *obs, const struct op_step *st);
/* The --initial-cluster for a member starting on machine mi. */
void opx_initial_cluster(const struct opx *x, const struct op_obs *obs, int mi, char *out,
                         size_t n);
/* Waits (observing every 200 ms, at most timeout_ms) until the member on
 * machine mi answers as `member` (0: any), and if `healthy`, is healthy and
 * caught up. 0 or -1 (err says what was last seen). */
int opx_wait_member(struct opx *x, int mi, uint64_t member, bool healthy, int64_t timeout_ms,
                    char *err, size_t err_len);

#endif
