/* test/integration/recipes_client.c — a libketch program the lock and
 * election integration tests run as contender, holder, candidate and
 * observer processes. Only the public API (client/ketch.h).
 *
 *   recipes_client EP counter NAME KEY N TTL_S HOLD_US
 *       N critical sections under mutex NAME, each: get KEY, print
 *       "enter REV T VALUE", sleep HOLD_US, put KEY = VALUE + 1 (a plain put,
 *       not a txn: only the lock keeps it correct), print "exit REV T",
 *       unlock. REV is the lock's create revision (fencing token), T is
 *       CLOCK_MONOTONIC in ns. Ends with "done".
 *   recipes_client EP hold NAME TTL_S
 *       locks, renews the lease once more, prints "enter REV T KEY", then
 *       keeps the session alive until killed, printing "renewed T TTL" after
 *       each renewal of the library's keep-alive.
 *   recipes_client EP lock NAME TTL_S TIMEOUT_MS
 *       "acquired REV T KEY" (then unlocks) or "error ENAME T".
 *   recipes_client EP trylock NAME TTL_S
 *       "acquired REV KEY" (then unlocks) or "error ENAME".
 *   recipes_client EP campaign NAME TTL_S VALUE
 *       campaigns, renews once, prints "leader KEY REV T" (then "renewed"
 *       lines as hold does); obeys stdin
 *       lines "proclaim V" ("proclaimed" / "error ENAME"), "resign"
 *       ("resigned"), "quit" (closes the session), keeping the session alive.
 *   recipes_client EP leader NAME
 *       "leader KEY VALUE" or "error ENAME".
 *   recipes_client EP observe NAME
 *       "observe KEY VALUE T" per leader change, until killed.
 * Every line is flushed at once. Exit 0, or 2 on a usage/connection error.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../client/ketch.h"

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

static void die(const char *what, int err) {
  fprintf(stderr, "recipes_client: %s: %s (%s)\n", what, ketch_errname(err), ketch_strerror(err));
  exit(2);
}

/* Runs the handle's loop for up to ms (keep-alives, watches). Returns true
 * if `fd` (>= 0) became readable. */
static bool pump(ketch_client *c, int ms, int fd) {
  int t = ketch_timeout_ms(c);
  if (t < 0 || t > ms)
    t = ms;
  struct pollfd p[2] = {{ketch_fd(c), ketch_events(c), 0}, {fd, POLLIN, 0}};
  poll(p, 2, t);
  ketch_process(c);
  return fd >= 0 && (p[1].revents & (POLLIN | POLLHUP));
}

static void sleep_pumping(ketch_client *c, int64_t us) {
  int64_t end = mono_ns() + us * 1000;
  for (int64_t left; (left = end - mono_ns()) > 0;)
    pump(c, (int)(left / 1000000) + 1, -1);
}

static int64_t session(ketch_client *c, const char *ttl) {
  int64_t lease = 0;
  int err = ketch_session_open(c, atoll(ttl), &lease);
  if (err)
    die("session_open", err);
  return lease;
}

static int64_t get_counter(ketch_client *c, const char *key) {
  ketch_result *res = NULL;
  int err = ketch_get(c, key, strlen(key), &res);
  if (err)
    die("get", err);
  int64_t v = 0;
  if (res->range.n_kvs == 1) {
    char buf[32] = "";
    size_t n = res->range.kvs[0].value_len < 31 ? res->range.kvs[0].value_len : 31;
    memcpy(buf, res->range.kvs[0].value, n);
    v = atoll(buf);
  }
  ketch_result_free(res);
  return v;
}

static void counter(ketch_client *c, char **a) {
  const char *name = a[0], *key = a[1];
  int n = atoi(a[2]);
  int64_t lease = session(c, a[3]), hold_us = atoll(a[4]);
  for (int i = 0; i < n; i++) {
    char *lk = NULL;
    int64_t rev = 0;
    int err = ketch_mutex_lock(c, name, lease, 60000, &lk, &rev);
    if (err)
      die("mutex_lock", err);
    int64_t v = get_counter(c, key);
    out("enter %lld %lld %lld\n", (long long)rev, (long long)mono_ns(), (long long)v);
    if (hold_us)
      sleep_pumping(c, hold_us);
    char val[32];
    snprintf(val, sizeof val, "%lld", (long long)(v + 1));
    ketch_put_req p = {.key = key, .key_len = strlen(key), .value = val, .value_len = strlen(val)};
    err = ketch_put(c, &p, NULL);
    if (err)
      die("put", err);
    out("exit %lld %lld\n", (long long)rev, (long long)mono_ns());
    err = ketch_mutex_unlock(c, lk);
    if (err)
      die("mutex_unlock", err);
    free(lk);
  }
  ketch_session_close(c, lease);
  out("done\n");
}

static void renewed_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  out("renewed %lld %lld %s\n", (long long)mono_ns(), err ? 0LL : (long long)res->lease.ttl,
      ketch_errname(err));
}

static void hold(ketch_client *c, char **a) {
  int64_t lease = session(c, a[1]);
  char *lk = NULL;
  int64_t rev = 0;
  int err = ketch_mutex_lock(c, a[0], lease, 60000, &lk, &rev);
  if (err)
    die("mutex_lock", err);
  err = ketch_lease_keepalive_once(c, lease, NULL); /* the full TTL from now */
  if (err)
    die("keepalive_once", err);
  out("enter %lld %lld %s\n", (long long)rev, (long long)mono_ns(), lk);
  err = ketch_lease_keepalive_start(c, lease, renewed_cb, NULL); /* replaces the session's */
  if (err)
    die("keepalive_start", err);
  for (;;)
    pump(c, 1000, -1);
}

static void lock_timeout(ketch_client *c, char **a) {
  int64_t lease = session(c, a[1]);
  char *lk = NULL;
  int64_t rev = 0;
  int err = ketch_mutex_lock(c, a[0], lease, atoi(a[2]), &lk, &rev);
  if (err) {
    out("error %s %lld\n", ketch_errname(err), (long long)mono_ns());
  } else {
    out("acquired %lld %lld %s\n", (long long)rev, (long long)mono_ns(), lk);
    ketch_mutex_unlock(c, lk);
    free(lk);
  }
  ketch_session_close(c, lease);
}

static void trylock(ketch_client *c, char **a) {
  int64_t lease = session(c, a[1]);
  char *lk = NULL;
  int64_t rev = 0;
  int err = ketch_mutex_try_lock(c, a[0], lease, &lk, &rev);
  if (err) {
    out("error %s\n", ketch_errname(err));
  } else {
    out("acquired %lld %s\n", (long long)rev, lk);
    ketch_mutex_unlock(c, lk);
    free(lk);
  }
  ketch_session_close(c, lease);
}

static void campaign(ketch_client *c, char **a) {
  int64_t lease = session(c, a[1]);
  char *key = NULL;
  int64_t rev = 0;
  int err = ketch_election_campaign(c, a[0], lease, a[2], strlen(a[2]), 60000, &key, &rev);
  if (err)
    die("campaign", err);
  err = ketch_lease_keepalive_once(c, lease, NULL);
  if (err)
    die("keepalive_once", err);
  out("leader %s %lld %lld\n", key, (long long)rev, (long long)mono_ns());
  err = ketch_lease_keepalive_start(c, lease, renewed_cb, NULL);
  if (err)
    die("keepalive_start", err);
  char line[512];
  for (;;) {
    if (!pump(c, 1000, 0))
      continue;
    if (!fgets(line, sizeof line, stdin))
      break;
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "proclaim ", 9)) {
      err = ketch_election_proclaim(c, key, rev, line + 9, strlen(line + 9));
      if (err)
        out("error %s\n", ketch_errname(err));
      else
        out("proclaimed\n");
    } else if (!strcmp(line, "resign")) {
      err = ketch_election_resign(c, key);
      if (err)
        out("error %s\n", ketch_errname(err));
      else
        out("resigned\n");
    } else if (!strcmp(line, "quit")) {
      break;
    }
  }
  free(key);
  ketch_session_close(c, lease);
}

static void leader(ketch_client *c, char **a) {
  ketch_result *res = NULL;
  int err = ketch_election_leader(c, a[0], &res);
  if (err) {
    out("error %s\n", ketch_errname(err));
    return;
  }
  const ketch_kv *kv = &res->range.kvs[0];
  out("leader %.*s %.*s\n", (int)kv->key_len, kv->key, (int)kv->value_len, kv->value);
  ketch_result_free(res);
}

static bool observe_ended;

static void observe_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  if (err || res->watch.canceled) {
    out("canceled %s\n", ketch_errname(err));
    observe_ended = true;
    return;
  }
  for (size_t i = 0; i < res->watch.n_events; i++) {
    const ketch_kv *kv = &res->watch.events[i].kv;
    out("observe %.*s %.*s %lld\n", (int)kv->key_len, kv->key, (int)kv->value_len, kv->value,
        (long long)mono_ns());
  }
}

static void observe(ketch_client *c, char **a) {
  uint64_t id = 0;
  int err = ketch_election_observe(c, a[0], observe_cb, NULL, &id);
  if (err)
    die("observe", err);
  out("observing\n");
  while (!observe_ended)
    pump(c, 1000, -1);
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int nargs;
    void (*run)(ketch_client *, char **);
  } cmds[] = {{"counter", 5, counter}, {"hold", 2, hold},         {"lock", 3, lock_timeout},
              {"trylock", 2, trylock}, {"campaign", 3, campaign}, {"leader", 1, leader},
              {"observe", 1, observe}};
  if (argc < 3) {
    fprintf(stderr, "usage: recipes_client ENDPOINTS CMD ARGS... (see the source)\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    if (strcmp(argv[2], cmds[i].name))
      continue;
    if (argc - 3 != cmds[i].nargs) {
      fprintf(stderr, "recipes_client %s takes %d arguments\n", cmds[i].name, cmds[i].nargs);
      return 2;
    }
    ketch_client *c = NULL;
    char msg[512];
    int err = ketch_open(&c, argv[1], NULL, msg, sizeof msg);
    if (err) {
      fprintf(stderr, "recipes_client: open: %s\n", msg);
      return 2;
    }
    cmds[i].run(c, argv + 3);
    ketch_close(c);
    return 0;
  }
  fprintf(stderr, "recipes_client: unknown command %s\n", argv[2]);
  return 2;
}
