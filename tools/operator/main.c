/* tools/operator/main.c — ketch-operator's commands.
 *
 *   apply -f FILE     writes the spec through Raft (and, when nothing answers
 *                     and nothing exists yet, starts the seed member first)
 *   run               the reconcile loop; any number of them: one acts
 *   status            desired vs observed, next step, actions, backups
 *   recover [--yes]   the way back from a lost quorum (plan; --yes does it)
 *   restore --from FILE -f SPEC [--yes]
 *                     a new cluster from a backup (plan; --yes does it)
 *
 * `run`: a session thread owns one libketch handle and a lease of
 * --lease-ttl seconds, kept alive from its own poll loop (libketch starts
 * no thread; a blocking step on the main thread must not starve the
 * keep-alives); it publishes the lease id (0 while it has none) in an
 * atomic word. The main thread campaigns with ketch's election recipe
 * (ketch_election_campaign under /_ketch/operator/<cluster>/election) on
 * that lease; the winner acts, the others wait inside the campaign (the
 * recipe wakes the next one when the winner's key goes: its lease expired
 * or it resigned). When the published lease changes (lost: it expired
 * without renewal) the acting operator stops acting at once; every write it
 * makes is also fenced on its election key (cluster.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opx.h"

#define MAX_RECS 64
#define MAX_BKS 256

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

static struct opx X;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("Error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static int usage(void) {
  fputs("usage: ketch-operator apply -f cluster.yaml [--endpoints E] [--bootstrap] [--dry-run]\n"
        "       ketch-operator run [--endpoints E] [--cluster C] [--interval 1s] [--lease-ttl 10]\n"
        "                          [--id NAME] [--dry-run] [--pause-after-intent D]\n"
        "       ketch-operator status [--endpoints E] [--cluster C] [-w text|json]\n"
        "       ketch-operator recover [--endpoints E] [--cluster C] [--yes]\n"
        "       ketch-operator restore --from FILE -f cluster.yaml [--endpoints E] [--yes]\n"
        "Endpoints: --endpoints, else KETCH_OPERATOR_ENDPOINTS, else 127.0.0.1:2479; the spec's\n"
        "client URLs are added (apply and restore use only those unless --endpoints is given).\n"
        "See README.md, \"Operating a cluster with ketch-operator\".\n",
        stderr);
  return 2;
}

/* ---- flags ---- */

struct flags {
  const char *file, *from, *endpoints, *cluster, *id, *format;
  int64_t interval_ms, pause_ms;
  int64_t lease_ttl_s;
  bool yes, dry_run, bootstrap;
  bool explicit_endpoints; /* given; else 127.0.0.1:2479 (apply and restore: the spec's only) */
};

static void parse_flags(int argc, char **argv, struct flags *f) {
  memset(f, 0, sizeof *f);
  f->interval_ms = 1000;
  f->lease_ttl_s = 10;
  f->format = "text";
  f->endpoints = getenv("KETCH_OPERATOR_ENDPOINTS");
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    char name[64];
    const char *eq = strchr(a, '=');
    if (!strncmp(a, "--", 2) && eq) {
      snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
      v = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", a);
    }
#define VAL() (v ? v : (i + 1 < argc ? argv[++i] : (die("%s needs a value", name), "")))
    if (!strcmp(name, "-f") || !strcmp(name, "--file"))
      f->file = VAL();
    else if (!strcmp(name, "--from"))
      f->from = VAL();
    else if (!strcmp(name, "--endpoints"))
      f->endpoints = VAL();
    else if (!strcmp(name, "--cluster"))
      f->cluster = VAL();
    else if (!strcmp(name, "--id"))
      f->id = VAL();
    else if (!strcmp(name, "-w") || !strcmp(name, "--write-out"))
      f->format = VAL();
    else if (!strcmp(name, "--interval")) {
      const char *t = VAL();
      if ((f->interval_ms = op_parse_duration(t)) < 50)
        die("--interval %s: want a duration of at least 50ms", t);
    } else if (!strcmp(name, "--pause-after-intent")) {
      const char *t = VAL();
      if ((f->pause_ms = op_parse_duration(t)) < 0)
        die("--pause-after-intent %s: want a duration", t);
    } else if (!strcmp(name, "--lease-ttl")) {
      const char *t = VAL();
      int64_t ms = op_parse_duration(t);
      if (ms < 1000 || ms % 1000)
        die("--lease-ttl %s: want whole seconds (at least 1)", t);
      f->lease_ttl_s = ms / 1000;
    } else if (!strcmp(name, "--yes"))
      f->yes = true;
    else if (!strcmp(name, "--dry-run"))
      f->dry_run = true;
    else if (!strcmp(name, "--bootstrap"))
      f->bootstrap = true;
    else
      die("unknown flag %s (ketch-operator --help)", a);
#undef VAL
  }
  if (strcmp(f->format, "text") && strcmp(f->format, "json"))
    die("-w %s: want text or json", f->format);
  f->explicit_endpoints = f->endpoints && *f->endpoints;
  if (!f->explicit_endpoints)
    f->endpoints = "127.0.0.1:2479"; /* ketchctl's default */
}

/* ---- setup ---- */

static void init_x(const struct flags *f) {
  char host[64] = "operator";
  gethostname(host, sizeof host - 1);
  if (f->id)
    snprintf(X.id, sizeof X.id, "%s", f->id);
  else
    snprintf(X.id, sizeof X.id, "%.40s:%d", host, (int)getpid());
  char self[OP_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash)
    *slash = 0;
  const char *kb = getenv("KETCH_OPERATOR_KETCH"), *ub = getenv("KETCH_OPERATOR_KETCHUTL");
  snprintf(X.ketch_bin, sizeof X.ketch_bin, "%s", kb ? kb : "");
  snprintf(X.ketchutl_bin, sizeof X.ketchutl_bin, "%s", ub ? ub : "");
  if (!X.ketch_bin[0])
    snprintf(X.ketch_bin, sizeof X.ketch_bin, "%.400s/ketch", self);
  if (!X.ketchutl_bin[0])
    snprintf(X.ketchutl_bin, sizeof X.ketchutl_bin, "%.400s/ketchutl", self);
  op_memory_init(&X.mem);
  X.pause_after_intent_ms = f->pause_ms;
}

static char *spec_text; /* the -f file's bytes, freed at exit */

static void read_spec_file(const char *path, char **text, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    die("%s: %s", path, strerror(errno));
  *text = spec_text = malloc(OP_SPEC_MAX_BYTES + 1);
  if (!*text)
    die("out of memory");
  *len = fread(*text, 1, OP_SPEC_MAX_BYTES + 1, fp);
  fclose(fp);
  if (*len > OP_SPEC_MAX_BYTES)
    die("%s: larger than %d bytes", path, OP_SPEC_MAX_BYTES);
  (*text)[*len] = 0;
  char err[400];
  if (op_spec_parse(*text, *len, &X.spec, err, sizeof err))
    die("%s: %s", path, err);
  X.have_spec = true;
  snprintf(X.cluster, sizeof X.cluster, "%s", X.spec.cluster);
}

static void connect_or_die(const char *eps) {
  char err[600];
  if (!eps || !*eps)
    die("no endpoints: give --endpoints (or KETCH_OPERATOR_ENDPOINTS)");
  if (opx_connect(&X, eps, err, sizeof err))
    die("--endpoints %s: %s", eps, err);
}

static void connect_spec(const char *extra) {
  char eps[4096];
  opx_spec_endpoints(&X.spec, extra, eps, sizeof eps);
  connect_or_die(eps);
}

/* Whether the member X.c talks to knows a leader: if not, linearizable
 * reads would only time out, and status/recover read serializably. */
static bool knows_leader(void) {
  ketch_result *r = NULL;
  bool yes = ketch_status(X.c, &r) == 0 && r->status.leader != 0;
  ketch_result_free(r);
  return yes;
}

/* --cluster, or the one cluster whose spec is stored. */
static void find_cluster(const struct flags *f) {
  if (f->cluster) {
    snprintf(X.cluster, sizeof X.cluster, "%s", f->cluster);
    return;
  }
  for (int serial = !knows_leader(); serial < 2; serial++) {
    ketch_range_req r;
    memset(&r, 0, sizeof r);
    r.key = OP_PREFIX;
    r.key_len = strlen(OP_PREFIX);
    r.prefix = true;
    r.keys_only = true;
    r.serializable = serial;
    ketch_result *res = NULL;
    if (ketch_range(X.c, &r, &res))
      continue;
    int found = 0;
    char names[512] = "";
    for (size_t i = 0; i < res->range.n_kvs; i++) {
      const ketch_kv *kv = &res->range.kvs[i];
      size_t pl = strlen(OP_PREFIX);
      if (kv->key_len < pl + 6 || memcmp(kv->key + kv->key_len - 5, "/spec", 5))
        continue;
      int nl = (int)(kv->key_len - pl - 5);
      if (nl <= 0 || nl >= OP_NAME_MAX || memchr(kv->key + pl, '/', (size_t)nl))
        continue;
      if (!found++)
        snprintf(X.cluster, sizeof X.cluster, "%.*s", nl, kv->key + pl);
      size_t l = strlen(names);
      snprintf(names + l, sizeof names - l, "%s%.*s", l ? ", " : "", nl, kv->key + pl);
    }
    ketch_result_free(res);
    if (found == 1)
      return;
    if (found > 1)
      die("several clusters have a spec here (%s): pick one with --cluster", names);
    die("no ketch-operator spec in this cluster (ketch-operator apply -f cluster.yaml)");
  }
  die("cannot read %s from %s: %s", OP_PREFIX, X.endpoints, ketch_errmsg(X.c));
}

/* Loads the spec (linearizable, else serializable) and connects to every
 * machine of it. */
static void load_spec_or_die(const struct flags *f) {
  find_cluster(f);
  char err[600];
  bool serial = !knows_leader();
  if ((serial || opx_load_spec(&X, false, err, sizeof err)) &&
      opx_load_spec(&X, true, err, sizeof err))
    die("%s", err);
  connect_spec(f->endpoints);
}

/* ---- apply ---- */

static int cmd_apply(const struct flags *f) {
  if (!f->file)
    die("apply needs -f FILE");
  char *text;
  size_t len;
  read_spec_file(f->file, &text, &len);
  connect_spec(f->explicit_endpoints ? f->endpoints : NULL);
  static struct op_obs obs;
  opx_observe(&X, &obs);
  if (obs.have_list) {
    struct op_view v;
    op_view_of(&X.spec, &obs, &v);
    char *old = NULL;
    size_t ol = 0;
    int64_t orev = 0;
    int rc = opx_get_spec(&X, false, &old, &ol, &orev);
    if (rc && rc != KETCH_ENOTFOUND)
      die("reading the current spec: %s (%s)%s", ketch_strerror(rc), ketch_errmsg(X.c),
          v.quorum ? "" : ": the cluster has no quorum");
    bool same = old && ol == len && !memcmp(old, text, len);
    free(old);
    if (f->dry_run) {
      printf("would write the spec of cluster %s (size %d, %d machines)%s\n", X.cluster,
             X.spec.size, X.spec.n_machines,
             same ? ": unchanged"
             : rc ? ": none stored yet"
                  : ": replacing the stored one");
      return 0;
    }
    int64_t rev = 0;
    if ((rc = opx_put_spec(&X, text, len, &rev)))
      die("writing the spec: %s (%s)", ketch_strerror(rc), ketch_errmsg(X.c));
    printf("spec of cluster %s written at revision %" PRId64 " (size %d, %d machines)%s\n",
           X.cluster, rev, X.spec.size, X.spec.n_machines, same ? "; unchanged" : "");
    return 0;
  }
  /* nothing answers: a new cluster, if nothing exists yet */
  struct op_history h;
  memset(&h, 0, sizeof h);
  struct op_step st;
  struct op_input in = {&X.spec, &obs, &X.mem, &h, opx_mono_ms(), opx_wall_ms(), true};
  op_decide(&in, &st);
  if (X.spec.driver == OP_DRIVER_LOCAL) {
    for (int i = 0; i < X.spec.n_machines; i++)
      if (!opx_drv_data_empty(&X, i))
        die("no member answers, but %s holds data: is the cluster down? Start its members, "
            "or see ketch-operator recover / restore; remove the data dirs to create a new "
            "cluster",
            X.spec.machines[i].data_dir);
  } else if (!f->bootstrap) {
    die("no member answers at the spec's client URLs; if there is no cluster yet, pass "
        "--bootstrap to start %s as the seed of a new one",
        X.spec.machines[0].name);
  }
  const struct op_machine *m = &X.spec.machines[st.machine];
  if (f->dry_run) {
    printf("would start %s (%s) as the seed of a new cluster %s, then write the spec\n", m->name,
           m->client_url, X.cluster);
    return 0;
  }
  char ic[OP_NAME_MAX + OP_URL_MAX + 2], err[700];
  snprintf(ic, sizeof ic, "%s=%s", m->name, m->peer_url);
  struct opx_start s = {ic, "new", opx_member_binary(&X), false};
  struct op_action a;
  memset(&a, 0, sizeof a);
  a.kind = OP_SEED;
  a.at_ms = opx_wall_ms();
  if (opx_drv_start(&X, st.machine, &s, err, sizeof err))
    die("starting the seed %s: %s", m->name, err);
  if (opx_wait_member(&X, st.machine, 0, true, 20000, err, sizeof err))
    die("the seed %s did not become healthy: %s", m->name, err);
  int64_t rev = 0;
  int rc = opx_put_spec(&X, text, len, &rev);
  if (rc)
    die("writing the spec: %s (%s)", ketch_strerror(rc), ketch_errmsg(X.c));
  X.spec_rev = rev;
  snprintf(a.state, sizeof a.state, "done");
  snprintf(a.machine, sizeof a.machine, "%s", m->name);
  a.spec_rev = rev;
  a.done_ms = opx_wall_ms();
  snprintf(a.by, sizeof a.by, "%s", X.id);
  snprintf(a.done_by, sizeof a.done_by, "%s", X.id);
  snprintf(a.reason, sizeof a.reason, "%s", st.reason);
  snprintf(a.outcome, sizeof a.outcome, "started %s as a one-member cluster", m->name);
  opx_write_action(&X, &a, true);
  printf("started %s as the seed of cluster %s; spec written at revision %" PRId64
         "; ketch-operator run grows it to %d members\n",
         m->name, X.cluster, rev, X.spec.size);
  return 0;
}

/* ---- the session thread ---- */

static struct {
  pthread_mutex_t mu;
  char endpoints[4096];
  int gen;
  int64_t ttl_s;
  atomic_llong lease;
  atomic_bool stop;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_keepalive(void *arg, int err, const ketch_result *res) {
  bool *lost = arg;
  if (err || res->lease.ttl == 0)
    *lost = true;
}

static void *session_main(void *arg) {
  (void)arg;
  ketch_client *c = NULL;
  int gen = -1;
  int64_t lease = 0;
  bool lost = false;
  while (!atomic_load(&S.stop)) {
    pthread_mutex_lock(&S.mu);
    if (gen != S.gen) {
      ketch_options o;
      ketch_options_init(&o);
      o.dial_timeout_ms = 500;
      o.request_timeout_ms = 3000;
      o.nonblocking_open = true;
      ketch_client *n = NULL;
      char err[300];
      if (ketch_open(&n, S.endpoints, &o, err, sizeof err) == 0) {
        ketch_close(c);
        c = n;
        if (lease && ketch_lease_keepalive_start(c, lease, on_keepalive, &lost))
          lost = true;
      }
      gen = S.gen;
    }
    pthread_mutex_unlock(&S.mu);
    if (!c) {
      opx_sleep_ms(200);
      continue;
    }
    if (!lease) {
      ketch_result *r = NULL;
      if (ketch_lease_grant(c, S.ttl_s, 0, &r) == 0) {
        lease = r->lease.id;
        ketch_result_free(r);
        lost = false;
        if (ketch_lease_keepalive_start(c, lease, on_keepalive, &lost)) {
          lease = 0;
        } else {
          atomic_store(&S.lease, lease);
          opx_log(&X, "info", "session lease=%016" PRIx64 " ttl=%" PRId64 "s", (uint64_t)lease,
                  S.ttl_s);
        }
      } else {
        opx_sleep_ms(500);
      }
      continue;
    }
    int t = ketch_timeout_ms(c);
    if (t < 0 || t > 200)
      t = 200;
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    poll(&p, p.fd >= 0, t);
    ketch_process(c);
    if (lost) {
      opx_log(&X, "warn", "session lease=%016" PRIx64 " lost (not renewed within its TTL)",
              (uint64_t)lease);
      ketch_lease_keepalive_stop(c, lease);
      atomic_store(&S.lease, 0);
      lease = 0;
      lost = false;
    }
  }
  if (c && lease) {
    ketch_lease_keepalive_stop(c, lease);
    ketch_lease_revoke(c, lease, NULL);
  }
  ketch_close(c);
  return NULL;
}

static void session_endpoints(const char *eps) {
  pthread_mutex_lock(&S.mu);
  if (strcmp(S.endpoints, eps)) {
    snprintf(S.endpoints, sizeof S.endpoints, "%s", eps);
    S.gen++;
  }
  pthread_mutex_unlock(&S.mu);
}

/* ---- run ---- */

/* The election key of a term we lost: deleted once the cluster takes
 * writes again, so the next campaign need not wait out its lease. */
static char *stale_key;
static int64_t stale_rev;

static void step_down(const char *why) {
  if (!X.lead_key)
    return;
  opx_log(&X, "warn", "no longer the acting operator: %s", why);
  free(stale_key);
  stale_key = X.lead_key;
  stale_rev = X.lead_rev;
  X.lead_key = NULL;
  X.lead_rev = 0;
}

/* Deletes the stale key if it is still the one we created. */
static void drop_stale_key(void) {
  if (!stale_key)
    return;
  ketch_compare cmp;
  memset(&cmp, 0, sizeof cmp);
  cmp.result = KETCH_CMP_EQUAL;
  cmp.target = KETCH_CMP_CREATE;
  cmp.key = stale_key;
  cmp.key_len = strlen(stale_key);
  cmp.int_value = stale_rev;
  ketch_delete_req d;
  memset(&d, 0, sizeof d);
  d.key = stale_key;
  d.key_len = strlen(stale_key);
  ketch_op op = ketch_op_delete(d);
  ketch_txn_req t = {&cmp, 1, &op, 1, NULL, 0};
  if (ketch_txn(X.c, &t, NULL) == 0) {
    free(stale_key);
    stale_key = NULL;
  }
}

/* History and backups from the cluster; 0 or -1. */
static int load_history(bool serializable, struct op_history *h, struct op_action *recs,
                        size_t *nr) {
  static struct op_backup bks[MAX_BKS];
  size_t nb = 0;
  if (opx_load_actions(&X, serializable, recs, MAX_RECS, nr) ||
      opx_load_backups(&X, serializable, bks, MAX_BKS, &nb))
    return -1;
  op_history_of(&X.spec, recs, *nr, X.spec_rev, bks, nb, h);
  return 0;
}

static void log_step(const struct op_step *st, const char *prefix) {
  char q[OP_REASON_MAX + 8];
  opx_log(&X, st->kind == OP_REPORT ? "warn" : "info",
          "%s step=%s machine=%s member=%016" PRIx64 "%s reason=%s", prefix, op_kind_name(st->kind),
          st->machine >= 0 && st->machine < X.spec.n_machines ? X.spec.machines[st->machine].name
                                                              : "-",
          st->member, st->resumed ? " resumed=true" : "", opx_q(st->reason, q, sizeof q));
}

static int cmd_run(const struct flags *f) {
  if (f->cluster)
    snprintf(X.cluster, sizeof X.cluster, "%s", f->cluster);
  connect_or_die(f->endpoints);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  pthread_t th;
  S.ttl_s = f->lease_ttl_s;
  session_endpoints(f->endpoints);
  if (!f->dry_run && pthread_create(&th, NULL, session_main, NULL))
    die("cannot start the session thread");
  opx_log(&X, "info", "started endpoints=%s interval=%" PRId64 "ms lease-ttl=%" PRId64 "s",
          f->endpoints, f->interval_ms, f->lease_ttl_s);
  char last_err[600] = "", last_said[256] = "", last_report[256] = "";
  bool said_standby = false;
  int64_t acting_lease = 0;
  static struct op_obs obs;
  static struct op_action recs[MAX_RECS];
  while (!stopping) {
    int64_t round_start = opx_mono_ms();
    char err[600] = "";
    if (!X.cluster[0]) {
      struct flags g = *f;
      g.cluster = NULL;
      ketch_range_req r; /* find_cluster dies when there is none yet: probe first */
      memset(&r, 0, sizeof r);
      r.key = OP_PREFIX;
      r.key_len = strlen(OP_PREFIX);
      r.prefix = true;
      r.count_only = true;
      ketch_result *res = NULL;
      int rc = ketch_range(X.c, &r, &res);
      bool any = !rc && res->range.count > 0;
      ketch_result_free(res);
      if (any)
        find_cluster(&g);
      else
        snprintf(err, sizeof err, "no spec yet under %s (waiting for ketch-operator apply)",
                 OP_PREFIX);
    }
    if (!err[0] && opx_load_spec(&X, false, err, sizeof err) == 0)
      err[0] = 0;
    else if (!err[0] || X.cluster[0]) {
      char e2[600];
      if (X.cluster[0] && opx_load_spec(&X, true, e2, sizeof e2) == 0)
        err[0] = 0; /* stale but readable: enough to observe and report */
    }
    if (err[0] || !X.have_spec) {
      if (strcmp(err, last_err))
        opx_log(&X, "warn", "waiting: %s", err);
      snprintf(last_err, sizeof last_err, "%s", err);
      opx_sleep_ms(f->interval_ms);
      continue;
    }
    last_err[0] = 0;
    char eps[4096];
    opx_spec_endpoints(&X.spec, f->endpoints, eps, sizeof eps);
    opx_connect(&X, eps, err, sizeof err);
    if (!f->dry_run)
      session_endpoints(eps);
    int64_t lease = atomic_load(&S.lease);
    if (X.lead_key && lease != acting_lease)
      step_down("the session lease expired");
    if (!X.lead_key && lease && !f->dry_run) {
      drop_stale_key();
      char name[256];
      opx_key(&X, "election", name, sizeof name);
      char *key = NULL;
      int64_t rev = 0;
      int64_t wait = f->interval_ms * 2 > 2000 ? f->interval_ms * 2 : 2000;
      int rc = ketch_election_campaign(X.c, name, lease, X.id, strlen(X.id), (int)wait, &key, &rev);
      if (rc == 0) {
        X.lead_key = key;
        X.lead_rev = rev;
        acting_lease = lease;
        op_memory_init(&X.mem);
        opx_log(&X, "info", "acting operator key=%s", key);
        last_said[0] = 0;
        said_standby = false;
        continue; /* the campaign may have waited: read the spec again first */
      } else if (!said_standby) {
        ketch_result *lr = NULL;
        char who[OP_NAME_MAX] = "?";
        if (ketch_election_leader(X.c, name, &lr) == 0 && lr->range.n_kvs)
          snprintf(who, sizeof who, "%.*s", (int)lr->range.kvs[0].value_len,
                   lr->range.kvs[0].value);
        ketch_result_free(lr);
        opx_log(&X, "info", "standing by acting=%s (%s)", who, ketch_strerror(rc));
        said_standby = true;
      }
    }
    opx_observe(&X, &obs);
    bool acting = X.lead_key != NULL || f->dry_run;
    struct op_history hist;
    size_t nr = 0;
    memset(&hist, 0, sizeof hist);
    struct op_view v;
    op_view_of(&X.spec, &obs, &v);
    if (acting)
      op_track_update(&X.mem, &X.spec, &obs, opx_mono_ms());
    if (v.quorum && load_history(false, &hist, recs, &nr)) {
      opx_sleep_ms(f->interval_ms); /* (the write quorum went away meanwhile) */
      continue;
    }
    struct op_step st;
    struct op_input in = {&X.spec, &obs, &X.mem, &hist, opx_mono_ms(), opx_wall_ms(), false};
    op_decide(&in, &st);
    if (f->dry_run) {
      char d[OP_REASON_MAX + 100];
      op_step_describe(&X.spec, &st, d, sizeof d);
      printf("next step: %s\n", d);
      return 0;
    }
    char said[256]; /* what is logged again only when it changes (a report's words too) */
    snprintf(said, sizeof said, "%s %d %016" PRIx64 " %" PRIu64 " %.150s", op_kind_name(st.kind),
             st.machine, st.member, st.seq, st.kind == OP_REPORT ? st.reason : "");
    if (!acting) {
      /* a standby reports too (it changes nothing); once per report */
      if (st.kind == OP_REPORT && strcmp(said, last_report))
        log_step(&st, "decision (standby)");
      snprintf(last_report, sizeof last_report, "%s", st.kind == OP_REPORT ? said : "");
    } else {
      bool acts = st.kind != OP_NONE && st.kind != OP_WAIT && st.kind != OP_REPORT;
      if (acts || strcmp(said, last_said))
        log_step(&st, "decision");
      snprintf(last_said, sizeof last_said, "%s", acts ? "" : said);
      if (acts && opx_act(&X, &obs, &st) == -2)
        step_down("the election key is gone (fenced write refused)");
    }
    int64_t left = f->interval_ms - (opx_mono_ms() - round_start);
    while (left > 0 && !stopping) {
      opx_sleep_ms(left > 100 ? 100 : left);
      left -= 100;
    }
  }
  opx_log(&X, "info", "stopping");
  if (X.lead_key)
    ketch_election_resign(X.c, X.lead_key);
  atomic_store(&S.stop, true);
  if (!f->dry_run)
    pthread_join(th, NULL);
  return 0;
}

/* ---- status ---- */

static void jstr(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20)
      printf("\\u%04x", ch);
    else
      putchar(ch);
  }
  putchar('"');
}

static const char *member_label(const struct op_member *m) {
  return m->machine >= 0 ? X.spec.machines[m->machine].name : m->name[0] ? m->name : "-";
}

static int cmd_status(const struct flags *f) {
  connect_or_die(f->endpoints);
  load_spec_or_die(f);
  static struct op_obs obs;
  opx_observe(&X, &obs);
  struct op_view v;
  op_view_of(&X.spec, &obs, &v);
  bool serial = !v.quorum;
  static struct op_action recs[MAX_RECS];
  static struct op_backup bks[MAX_BKS];
  size_t nr = 0, nb = 0;
  opx_load_actions(&X, serial, recs, MAX_RECS, &nr);
  opx_load_backups(&X, serial, bks, MAX_BKS, &nb);
  struct op_history hist;
  op_history_of(&X.spec, recs, nr, X.spec_rev, bks, nb, &hist);
  /* status sees one moment: members down now count as down since now */
  op_track_update(&X.mem, &X.spec, &obs, opx_mono_ms());
  struct op_step st;
  struct op_input in = {&X.spec, &obs, &X.mem, &hist, opx_mono_ms(), opx_wall_ms(), false};
  op_decide(&in, &st);
  char acting[OP_NAME_MAX] = "";
  if (v.quorum) {
    char name[256];
    opx_key(&X, "election", name, sizeof name);
    ketch_result *lr = NULL;
    if (ketch_election_leader(X.c, name, &lr) == 0 && lr->range.n_kvs)
      snprintf(acting, sizeof acting, "%.*s", (int)lr->range.kvs[0].value_len,
               lr->range.kvs[0].value);
    ketch_result_free(lr);
  }
  /* backups: the files are checked now */
  char check[MAX_BKS][300];
  for (size_t i = 0; i < nb; i++) {
    check[i][0] = 0;
    if (strcmp(bks[i].state, "verified") || !X.spec.backup.enabled)
      continue;
    char path[OP_PATH_MAX * 2];
    int64_t rev;
    snprintf(path, sizeof path, "%s/%s", X.spec.backup.dir, bks[i].name);
    if (opx_snapshot_check(path, &rev, NULL, check[i], sizeof check[i]) == 0) {
      if (rev == bks[i].revision)
        snprintf(check[i], sizeof check[i], "ok");
      else
        snprintf(check[i], sizeof check[i], "%.200s: revision %" PRId64 ", recorded %" PRId64, path,
                 rev, bks[i].revision);
    }
  }
  char next[OP_REASON_MAX + 100];
  op_step_describe(&X.spec, &st, next, sizeof next);
  if (!strcmp(f->format, "json")) {
    printf("{\"cluster\":");
    jstr(X.cluster);
    printf(",\"spec_revision\":%" PRId64 ",\"size\":%d,\"binary\":", X.spec_rev, X.spec.size);
    jstr(opx_member_binary(&X));
    printf(",\"quorum\":%s,\"voters\":%d,\"healthy_voters\":%d,\"learners\":%d,"
           "\"leader\":\"%016" PRIx64 "\",\"acting\":",
           v.quorum ? "true" : "false", v.voters, v.healthy_voters, v.learners, v.leader_id);
    jstr(acting);
    printf(",\"members\":[");
    for (size_t i = 0; i < obs.n_members; i++) {
      const struct op_member *m = &obs.members[i];
      printf("%s{\"id\":\"%016" PRIx64 "\",\"name\":", i ? "," : "", m->id);
      jstr(m->name);
      printf(",\"machine\":");
      jstr(m->machine >= 0 ? X.spec.machines[m->machine].name : "");
      printf(",\"learner\":%s,\"reachable\":%s,\"healthy\":%s,\"caught_up\":%s,\"term\":%" PRIu64
             ",\"raft_index\":%" PRIu64 ",\"applied\":%" PRIu64 ",\"leader\":\"%016" PRIx64
             "\",\"version\":",
             m->learner ? "true" : "false", m->reachable ? "true" : "false",
             v.healthy[i] ? "true" : "false", v.caught_up[i] ? "true" : "false", m->term,
             m->raft_index, m->applied, m->leader);
      jstr(m->version);
      printf(",\"binary\":");
      jstr(m->machine >= 0 ? obs.machines[m->machine].binary : "");
      printf("}");
    }
    printf("],\"next\":{\"kind\":");
    jstr(op_kind_name(st.kind));
    printf(",\"machine\":");
    jstr(st.machine >= 0 ? X.spec.machines[st.machine].name : "");
    printf(",\"reason\":");
    jstr(st.reason);
    printf("},\"actions\":[");
    for (size_t i = 0; i < nr; i++) {
      const struct op_action *a = &recs[i];
      printf("%s{\"seq\":%" PRIu64 ",\"kind\":", i ? "," : "", a->seq);
      jstr(op_kind_name(a->kind));
      printf(",\"state\":");
      jstr(a->state);
      printf(",\"machine\":");
      jstr(a->machine);
      printf(",\"member\":\"%016" PRIx64 "\",\"target\":\"%016" PRIx64 "\",\"binary\":", a->member,
             a->target);
      jstr(a->binary);
      printf(",\"at\":%" PRId64 ",\"done_at\":%" PRId64 ",\"by\":", a->at_ms, a->done_ms);
      jstr(a->by);
      printf(",\"done_by\":");
      jstr(a->done_by);
      printf(",\"reason\":");
      jstr(a->reason);
      printf(",\"outcome\":");
      jstr(a->outcome);
      printf("}");
    }
    printf("],\"backups\":[");
    for (size_t i = 0; i < nb; i++) {
      const struct op_backup *b = &bks[i];
      printf("%s{\"name\":", i ? "," : "");
      jstr(b->name);
      printf(",\"state\":");
      jstr(b->state);
      printf(",\"at\":%" PRId64 ",\"revision\":%" PRId64 ",\"size\":%" PRIu64
             ",\"hash_kv\":\"%08x\",\"why\":",
             b->at_ms, b->revision, b->size_bytes, b->hash_kv);
      jstr(b->why);
      printf(",\"file_check\":");
      jstr(check[i]);
      printf("}");
    }
    printf("]}\n");
    return 0;
  }
  printf("cluster %s: spec revision %" PRId64 ", desired %d members, driver %s, binary %s\n",
         X.cluster, X.spec_rev, X.spec.size, X.spec.driver == OP_DRIVER_LOCAL ? "local" : "command",
         opx_member_binary(&X));
  printf("observed: %d voters (%d healthy), %d learners; quorum %s; leader %016" PRIx64 "\n",
         v.voters, v.healthy_voters, v.learners, v.quorum ? "ok" : "LOST", v.leader_id);
  printf("acting operator: %s\n\n", acting[0] ? acting : v.quorum ? "none" : "unknown (no quorum)");
  printf("%-10s %-16s %-8s %-9s %6s %11s %11s  %s\n", "MACHINE", "MEMBER", "ROLE", "HEALTH", "TERM",
         "RAFT INDEX", "APPLIED", "BINARY");
  for (size_t i = 0; i < obs.n_members; i++) {
    const struct op_member *m = &obs.members[i];
    char idx[3][24] = {"-", "-", "-"};
    if (m->reachable) {
      snprintf(idx[0], 24, "%" PRIu64, m->term);
      snprintf(idx[1], 24, "%" PRIu64, m->raft_index);
      snprintf(idx[2], 24, "%" PRIu64, m->applied);
    }
    printf("%-10s %016" PRIx64 " %-8s %-9s %6s %11s %11s  %s%s\n", member_label(m), m->id,
           m->learner             ? "learner"
           : m->id == v.leader_id ? "leader"
                                  : "voter",
           v.healthy[i]   ? "healthy"
           : m->reachable ? "unhealthy"
                          : "down",
           idx[0], idx[1], idx[2],
           m->machine >= 0 && obs.machines[m->machine].binary[0] ? obs.machines[m->machine].binary
                                                                 : m->version,
           m->machine < 0 ? " (not a machine of the spec)" : "");
  }
  for (int i = 0; i < X.spec.n_machines; i++) {
    bool used = false;
    for (size_t j = 0; j < obs.n_members; j++)
      used |= obs.members[j].machine == i;
    if (!used)
      printf("%-10s %-16s %-8s\n", X.spec.machines[i].name, "-", "(free)");
  }
  printf("\nnext step: %s\n", next);
  printf("\nlast actions:\n");
  for (size_t i = 0; i < nr && i < 12; i++) {
    const struct op_action *a = &recs[i];
    char t[40];
    opx_time_text(a->at_ms, t, sizeof t);
    printf("  #%-4" PRIu64 " %s  %-11s %-6s %-9s %s", a->seq, t, op_kind_name(a->kind),
           a->machine[0] ? a->machine : "-", a->state, a->reason);
    if (a->outcome[0])
      printf(" -> %s", a->outcome);
    printf(" [by %s%s%s]\n", a->by, a->done_by[0] && strcmp(a->done_by, a->by) ? ", done by " : "",
           a->done_by[0] && strcmp(a->done_by, a->by) ? a->done_by : "");
  }
  if (!nr)
    printf("  (none)\n");
  if (X.spec.backup.enabled)
    printf("\nbackups in %s (every %" PRId64 "s, keep %d for %" PRId64 "s):\n", X.spec.backup.dir,
           X.spec.backup.interval_ms / 1000, X.spec.backup.keep, X.spec.backup.keep_for_ms / 1000);
  else
    printf("\nbackups: none configured\n");
  for (size_t i = 0; i < nb; i++) {
    const struct op_backup *b = &bks[i];
    char t[40];
    opx_time_text(b->at_ms, t, sizeof t);
    const char *state = b->state;
    if (check[i][0] && strcmp(check[i], "ok"))
      state = "CORRUPT";
    printf("  %s  %s  revision %" PRId64 "  %" PRIu64 " bytes  %s", b->name, t, b->revision,
           b->size_bytes, state);
    if (!strcmp(state, "verified"))
      printf(" (hash-kv %08x = the restored copy's; file ok)", b->hash_kv);
    else if (!strcmp(state, "CORRUPT"))
      printf(": %s", check[i]);
    printf("  [%s]\n", b->why);
  }
  return 0;
}

/* ---- recover ---- */

static void abandon_pending(const char *why) {
  struct op_action a;
  size_t n = 0;
  if (opx_load_actions(&X, false, &a, 1, &n) || !n || strcmp(a.state, "intent"))
    return;
  snprintf(a.state, sizeof a.state, "abandoned");
  snprintf(a.outcome, sizeof a.outcome, "%s", why);
  snprintf(a.done_by, sizeof a.done_by, "%s", X.id);
  a.done_ms = opx_wall_ms();
  opx_write_action(&X, &a, false);
}

static void record_human(int kind, const char *machine, const char *reason, const char *outcome) {
  struct op_action a;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  snprintf(a.state, sizeof a.state, "done");
  snprintf(a.machine, sizeof a.machine, "%s", machine);
  a.spec_rev = X.spec_rev;
  a.at_ms = a.done_ms = opx_wall_ms();
  snprintf(a.by, sizeof a.by, "%s", X.id);
  snprintf(a.done_by, sizeof a.done_by, "%s", X.id);
  snprintf(a.reason, sizeof a.reason, "%s", reason);
  snprintf(a.outcome, sizeof a.outcome, "%s", outcome);
  int rc = opx_write_action(&X, &a, true);
  if (rc)
    fprintf(stderr, "warning: the %s record was not written: %s\n", op_kind_name(kind),
            ketch_strerror(rc));
}

static int cmd_recover(const struct flags *f) {
  connect_or_die(f->endpoints);
  load_spec_or_die(f);
  static struct op_obs obs;
  opx_observe(&X, &obs);
  struct op_view v;
  op_view_of(&X.spec, &obs, &v);
  char why[OP_REASON_MAX];
  int best = op_recover_choice(&X.spec, &obs, why, sizeof why);
  printf("cluster %s: %d of %d voters healthy, quorum %s\n", X.cluster, v.healthy_voters, v.voters,
         v.quorum ? "ok" : "LOST");
  for (size_t i = 0; i < obs.n_members; i++) {
    const struct op_member *m = &obs.members[i];
    if (m->reachable)
      printf("  %-10s %016" PRIx64 " %-7s answers: raft index %" PRIu64 ", applied %" PRIu64 "\n",
             member_label(m), m->id, m->learner ? "learner" : "voter", m->raft_index, m->applied);
    else
      printf("  %-10s %016" PRIx64 " %-7s does not answer\n", member_label(m), m->id,
             m->learner ? "learner" : "voter");
  }
  if (best < 0) {
    printf("no recovery: %s\n", why);
    return v.quorum ? 0 : 1;
  }
  const struct op_member *sm = &obs.members[best];
  int mi = sm->machine;
  const struct op_machine *m = &X.spec.machines[mi];
  printf("plan (%s):\n", why);
  printf("  1. stop %s and start it again with --force-new-cluster: it keeps its data (every "
         "entry in its log, committed or not) and becomes a one-member cluster\n",
         m->name);
  printf("  2. wait until %s leads that one-member cluster\n", m->name);
  printf("  3. stop whatever still runs on the other members' machines (they were removed; "
         "their data dirs are wiped when they are added back)\n");
  printf("  4. ketch-operator run grows the cluster back to %d, one learner at a time\n",
         X.spec.size);
  if (!f->yes) {
    printf("nothing done: run again with --yes to carry this out\n");
    return 0;
  }
  char err[700], ic[4096];
  opx_initial_cluster(&X, &obs, mi, ic, sizeof ic);
  const char *bin = obs.machines[mi].binary[0] ? obs.machines[mi].binary : opx_member_binary(&X);
  struct opx_start s = {ic, "existing", bin, true};
  printf("1. stopping %s\n", m->name);
  if (opx_drv_stop(&X, mi, err, sizeof err))
    die("stopping %s: %s", m->name, err);
  printf("1. starting %s with --force-new-cluster\n", m->name);
  if (opx_drv_start(&X, mi, &s, err, sizeof err))
    die("starting %s with --force-new-cluster: %s", m->name, err);
  printf("2. waiting for %s to lead\n", m->name);
  if (opx_wait_member(&X, mi, sm->id, true, 30000, err, sizeof err))
    die("%s did not come back as a one-member cluster: %s", m->name, err);
  for (size_t i = 0; i < obs.n_members; i++) {
    int o = obs.members[i].machine;
    if (o < 0 || o == mi)
      continue;
    printf("3. stopping what runs on %s\n", X.spec.machines[o].name);
    if (opx_drv_stop(&X, o, err, sizeof err))
      printf("   (%s)\n", err);
  }
  abandon_pending("superseded by ketch-operator recover");
  char out[OP_REASON_MAX];
  snprintf(out, sizeof out,
           "%s restarted with --force-new-cluster: a one-member cluster with its data", m->name);
  record_human(OP_RECOVER, m->name, why, out);
  printf("recovered: %s leads a one-member cluster; ketch-operator run grows it back to %d\n",
         m->name, X.spec.size);
  return 0;
}

/* ---- restore ---- */

static int cmd_restore(const struct flags *f) {
  if (!f->from || !f->file)
    die("restore needs --from BACKUP and -f cluster.yaml");
  char *text;
  size_t len;
  read_spec_file(f->file, &text, &len);
  int64_t rev = 0;
  char err[700];
  if (opx_snapshot_check(f->from, &rev, NULL, err, sizeof err))
    die("%s", err);
  connect_spec(f->explicit_endpoints ? f->endpoints : NULL);
  static struct op_obs obs;
  opx_observe(&X, &obs);
  for (size_t i = 0; i < obs.n_members; i++)
    if (obs.members[i].reachable || obs.have_list)
      die("members answer (%s): restore builds a NEW cluster; stop the old one first",
          obs.members[i].client_url);
  for (int i = 0; i < X.spec.n_machines; i++)
    if (obs.machines[i].process == 1)
      die("a member still runs on %s: stop the old cluster first", X.spec.machines[i].name);
  const struct op_machine *m = &X.spec.machines[0];
  printf("plan:\n  1. make %s's data dir %s from %s (revision %" PRId64
         ", its BLAKE2b trailer checked)\n"
         "  2. start %s as a new one-member cluster and write the spec\n"
         "  3. ketch-operator run grows it to %d members (the other machines' data dirs are "
         "wiped when they join)\n",
         m->name, m->data_dir, f->from, rev, m->name, X.spec.size);
  if (!f->yes) {
    printf("nothing done: run again with --yes to carry this out\n");
    return 0;
  }
  printf("1. restoring into %s\n", m->data_dir);
  if (opx_drv_restore(&X, 0, f->from, err, sizeof err))
    die("restoring into %s: %s", m->data_dir, err);
  char ic[OP_NAME_MAX + OP_URL_MAX + 2];
  snprintf(ic, sizeof ic, "%s=%s", m->name, m->peer_url);
  struct opx_start s = {ic, "new", opx_member_binary(&X), false};
  printf("2. starting %s\n", m->name);
  if (opx_drv_start(&X, 0, &s, err, sizeof err))
    die("starting %s: %s", m->name, err);
  if (opx_wait_member(&X, 0, 0, true, 30000, err, sizeof err))
    die("%s did not become healthy: %s", m->name, err);
  int rc = opx_put_spec(&X, text, len, &X.spec_rev);
  if (rc)
    die("writing the spec: %s (%s)", ketch_strerror(rc), ketch_errmsg(X.c));
  abandon_pending("superseded by ketch-operator restore");
  char why[OP_REASON_MAX], out[OP_REASON_MAX];
  snprintf(why, sizeof why, "restore from %.200s", f->from);
  snprintf(out, sizeof out, "%s started from the backup (revision %" PRId64 ")", m->name, rev);
  record_human(OP_RESTORE, m->name, why, out);
  printf("restored: %s serves the backup's data (revision %" PRId64
         "); ketch-operator run grows the cluster to %d\n",
         m->name, rev, X.spec.size);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
    return usage();
  if (sodium_init() < 0)
    die("libsodium failed to initialise");
  signal(SIGPIPE, SIG_IGN);
  struct flags f;
  parse_flags(argc - 2, argv + 2, &f);
  init_x(&f);
  const char *cmd = argv[1];
  int rc;
  if (!strcmp(cmd, "apply"))
    rc = cmd_apply(&f);
  else if (!strcmp(cmd, "run"))
    rc = cmd_run(&f);
  else if (!strcmp(cmd, "status"))
    rc = cmd_status(&f);
  else if (!strcmp(cmd, "recover"))
    rc = cmd_recover(&f);
  else if (!strcmp(cmd, "restore"))
    rc = cmd_restore(&f);
  else
    return usage();
  opx_close_handles(&X);
  ketch_close(X.c);
  free(X.lead_key);
  free(stale_key);
  free(spec_text);
  return rc;
}
