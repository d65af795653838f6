/* tools/ketchctl/lock.c — `ketchctl lock`, as etcdctl 3.4's (ctlv3/command/
 * lock_command.go), plus the session/signal machinery elect.c shares.
 *
 *   ketchctl lock <lockname>                 prints the lock's key (a get of
 *       it, in the -w format) once held, holds it until SIGINT/SIGTERM, then
 *       unlocks and exits 0.
 *   ketchctl lock <lockname> cmd args...     runs cmd once held, with
 *       ETCD_LOCK_KEY and ETCD_LOCK_REV in its environment and stdin from
 *       /dev/null (as Go's exec.Cmd), unlocks after it exits; a failed
 *       command is etcdctl's "Error: exit status N" / "Error: signal: killed"
 *       and exit 1.
 *   --ttl N: the session's lease TTL in seconds (etcdctl's default: 10).
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread but one that
 * sigwait()s for them. While the main thread is blocked in ketch_mutex_lock
 * or ketch_election_campaign (which have no cancel call), that thread revokes
 * the session's lease on a connection of its own — the waiting key goes with
 * it, so no one waits on us — prints etcdctl's "Error: context canceled" and
 * exits 1. Once the lock is held it only flags the signal and wakes the main
 * loop through a pipe. The session's lease is revoked on every exit, errors
 * included (etcdctl leaves it to expire; the output is the same).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl.h"

enum { HOLD_WAITING, HOLD_ACQUIRED, HOLD_CANCELING };

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static int hold_state = HOLD_WAITING;
static int64_t hold_lease;
static int sig_pipe[2] = {-1, -1};
static atomic_bool hold_sig, hold_lost;
static sigset_t old_mask;

static void keepalive_cb(void *arg, int err, const ketch_result *res) {
  (void)arg; /* an error is delivered only when the library gave up */
  if (err || res->lease.ttl <= 0)
    atomic_store(&hold_lost, true);
}

static void *signal_thread(void *arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig))
      continue;
    pthread_mutex_lock(&hold_mu);
    int st = hold_state;
    if (st == HOLD_WAITING)
      hold_state = HOLD_CANCELING;
    pthread_mutex_unlock(&hold_mu);
    if (st == HOLD_WAITING) {
      char msg[256];
      ketch_client *c = hold_lease ? ctl_open_extra(msg, sizeof msg) : NULL;
      if (c) {
        ketch_lease_revoke(c, hold_lease, NULL);
        ketch_close(c);
      }
      static const char text[] = "Error: context canceled\n";
      if (write(2, text, sizeof text - 1) < 0) {
      }
      _exit(CTL_EXIT_ERROR);
    }
    atomic_store(&hold_sig, true);
    if (write(sig_pipe[1], "s", 1) < 0) {
    }
  }
  return NULL;
}

/* The session is ours to end: the keys it holds go with it. Idempotent. */
void ctl_hold_end(ketch_client *c) {
  if (hold_lease) {
    ketch_lease_keepalive_stop(c, hold_lease);
    ketch_lease_revoke(c, hold_lease, NULL);
    hold_lease = 0;
  }
}

static ketch_client *hold_client;

/* Every exit (an error, "table not supported" after the lock was taken...)
 * ends the session, so no one waits for its TTL. */
static void hold_atexit(void) {
  if (hold_client)
    ctl_hold_end(hold_client);
}

int64_t ctl_hold_begin(ketch_client *c, int64_t ttl_s) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask);
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK))
    ctl_die(CTL_EXIT_ERROR, "pipe: %s", strerror(errno));
  if (ttl_s > 0) {
    ketch_result *res = NULL;
    int err = ketch_lease_grant(c, ttl_s, 0, &res);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
    hold_lease = res->lease.id;
    ketch_result_free(res);
    err = ketch_lease_keepalive_start(c, hold_lease, keepalive_cb, NULL);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  }
  hold_client = c;
  atexit(hold_atexit); /* runs before main.c's, which closes the client */
  pthread_t t;
  if (pthread_create(&t, NULL, signal_thread, NULL))
    ctl_die(CTL_EXIT_ERROR, "cannot start the signal thread");
  pthread_detach(t);
  return hold_lease;
}

void ctl_hold_acquired(void) {
  pthread_mutex_lock(&hold_mu);
  bool canceling = hold_state == HOLD_CANCELING;
  if (!canceling)
    hold_state = HOLD_ACQUIRED;
  pthread_mutex_unlock(&hold_mu);
  if (canceling) /* the signal thread is revoking the lease and exits */
    for (;;)
      pause();
}

bool ctl_hold_signaled(void) { return atomic_load(&hold_sig); }

/* One turn of the client's loop, woken early by a signal. */
void ctl_hold_pump(ketch_client *c, int max_ms) {
  int t = ketch_timeout_ms(c);
  if (t < 0 || t > max_ms)
    t = max_ms;
  struct pollfd p[2] = {{ketch_fd(c), ketch_events(c), 0}, {sig_pipe[0], POLLIN, 0}};
  if (poll(p, 2, t) > 0 && (p[1].revents & POLLIN)) {
    char b[16];
    while (read(sig_pipe[0], b, sizeof b) > 0) {
    }
  }
  ketch_process(c);
}

int ctl_hold_wait(ketch_client *c) {
  for (;;) {
    if (ctl_hold_signaled())
      return 0;
    if (atomic_load(&hold_lost))
      return -1;
    ctl_hold_pump(c, 1000);
  }
}

/* Go's error text for a syscall errno: strerror with a lower-case first
 * letter ("no such file or directory"). */
static const char *go_errno(int e, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z' && (buf[1] < 'A' || buf[1] > 'Z'))
    buf[0] = (char)(buf[0] - 'A' + 'a');
  return buf;
}

/* Runs argv with the lock in its environment, keeping the session alive;
 * returns 0 or writes Go's exec error text into err. */
static int run_command(ketch_client *c, char **argv, const char *key, int64_t rev, char *err,
                       size_t cap) {
  char revtext[32];
  snprintf(revtext, sizeof revtext, "%" PRId64, rev);
  setenv("ETCD_LOCK_KEY", key, 1);
  setenv("ETCD_LOCK_REV", revtext, 1);
  int ep[2];
  if (pipe2(ep, O_CLOEXEC)) {
    snprintf(err, cap, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(ep[0]);
    close(ep[1]);
    snprintf(err, cap, "fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0 && null != 0) {
      dup2(null, 0);
      close(null);
    }
    execvp(argv[0], argv);
    int e = errno;
    if (write(ep[1], &e, sizeof e) < 0) {
    }
    _exit(127);
  }
  close(ep[1]);
  int e = 0;
  ssize_t n;
  do
    n = read(ep[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  close(ep[0]);
  if (n == (ssize_t)sizeof e) {
    char why[128];
    waitpid(pid, NULL, 0);
    if (e == ENOENT && !strchr(argv[0], '/'))
      snprintf(err, cap, "exec: \"%s\": executable file not found in $PATH", argv[0]);
    else
      snprintf(err, cap, "fork/exec %s: %s", argv[0], go_errno(e, why, sizeof why));
    return -1;
  }
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR) {
      snprintf(err, cap, "wait: %s", strerror(errno));
      return -1;
    }
    ctl_hold_pump(c, 20); /* keep-alives go on while the command runs */
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return 0;
  if (WIFEXITED(status)) {
    snprintf(err, cap, "exit status %d", WEXITSTATUS(status));
  } else {
    char why[128];
    snprintf(why, sizeof why, "%s", strsignal(WTERMSIG(status)));
    if (why[0] >= 'A' && why[0] <= 'Z')
      why[0] = (char)(why[0] - 'A' + 'a');
    snprintf(err, cap, "signal: %s%s", why, WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return -1;
}

void ctl_run_lock(int argc, char **argv) {
  if (argc < 1)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "lock takes a lock name argument and an optional command to execute");
  ketch_client *c = ctl_open_client();
  int64_t lease = ctl_hold_begin(c, ctl_lock_ttl_s > 0 ? ctl_lock_ttl_s : 10);
  char *key = NULL;
  int64_t rev = 0;
  int err = ketch_mutex_lock(c, argv[0], lease, -1, &key, &rev);
  ctl_hold_acquired();
  if (err) {
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  }
  ctl_keep(key);
  if (argc > 1) {
    char why[600];
    int rc = run_command(c, argv + 1, key, rev, why, sizeof why);
    err = ketch_mutex_unlock(c, key);
    ctl_hold_end(c);
    if (rc)
      ctl_die(CTL_EXIT_ERROR, "%s", why);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
    return;
  }
  ketch_result *res = NULL;
  err = ketch_get(c, key, strlen(key), &res);
  ctl_keep_result(res);
  if (err) {
    ketch_mutex_unlock(c, key);
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
  }
  if (res->range.n_kvs == 0) {
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "lock lost on init");
  }
  ctl_print_range(&res->header, &res->range);
  fflush(stdout);
  if (ctl_hold_wait(c)) {
    ctl_hold_end(c);
    ctl_die(CTL_EXIT_ERROR, "session expired");
  }
  err = ketch_mutex_unlock(c, key);
  ctl_hold_end(c);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
}
