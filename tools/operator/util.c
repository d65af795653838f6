/* tools/operator/util.c — logging, clocks and child processes for the I/O
 * half of ketch-operator. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opx.h"

int64_t opx_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t opx_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void opx_sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

void opx_time_text(int64_t wall_ms, char *out, size_t n) {
  time_t s = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char b[32];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, n, "%s.%03dZ", b, (int)(wall_ms % 1000));
}

void opx_log(const struct opx *x, const char *level, const char *fmt, ...) {
  char t[40], msg[2048];
  opx_time_text(opx_wall_ms(), t, sizeof t);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s %s operator %s %s\n", t, level, x && x->id[0] ? x->id : "-", msg);
  fflush(stderr);
}

const char *opx_q(const char *v, char *buf, size_t n) {
  bool bare = *v != 0;
  for (const char *p = v; *p && bare; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr("._:/=,@+-", *p)))
      bare = false;
  if (bare) {
    snprintf(buf, n, "%s", v);
    return buf;
  }
  size_t o = 0;
  if (n < 3)
    return "\"\"";
  buf[o++] = '"';
  for (const char *p = v; *p && o + 3 < n; p++) {
    if (*p == '"' || *p == '\\')
      buf[o++] = '\\';
    buf[o++] = *p == '\n' ? ' ' : *p;
  }
  buf[o++] = '"';
  buf[o] = 0;
  return buf;
}

/* Reads what the child wrote to fd until EOF or the deadline; keeps the
 * tail. Returns the exit status (waitpid) or -1 on timeout (child killed). */
static int collect(pid_t pid, int fd, int64_t timeout_ms, char *tail, size_t tail_len) {
  size_t used = 0;
  if (tail_len)
    tail[0] = 0;
  int64_t deadline = opx_mono_ms() + timeout_ms;
  bool eof = fd < 0;
  while (!eof) {
    int64_t left = deadline - opx_mono_ms();
    if (left <= 0)
      break;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) <= 0)
      continue;
    char b[1024];
    ssize_t r = read(fd, b, sizeof b);
    if (r <= 0) {
      eof = true;
      break;
    }
    for (ssize_t i = 0; i < r && tail_len; i++) {
      if (used + 1 >= tail_len) { /* keep the tail: drop the oldest half */
        memmove(tail, tail + used / 2, used - used / 2);
        used -= used / 2;
      }
      tail[used++] = b[i] == '\n' ? ' ' : b[i];
      tail[used] = 0;
    }
  }
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      break;
    if (opx_mono_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    opx_sleep_ms(20);
  }
  return st;
}

static int finish(int st, const char *what, const char *tail, char *err, size_t err_len) {
  if (st == -1) {
    snprintf(err, err_len, "%s: timed out (killed); output: %s", what, tail);
    return -1;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return 0;
  if (WIFEXITED(st))
    snprintf(err, err_len, "%s: exit status %d; output: %.300s", what, WEXITSTATUS(st), tail);
  else
    snprintf(err, err_len, "%s: killed by signal %d; output: %.300s", what, WTERMSIG(st), tail);
  return -1;
}

int opx_run(char *const argv[], int64_t timeout_ms, char *err, size_t err_len) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) {
    snprintf(err, err_len, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    snprintf(err, err_len, "fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s", argv[0], strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  char tail[600];
  int st = collect(pid, pfd[0], timeout_ms, tail, sizeof tail);
  close(pfd[0]);
  return finish(st, argv[0], tail, err, err_len);
}

int opx_sh(const char *cmd, int64_t timeout_ms, char *err, size_t err_len) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  char e[700];
  if (opx_run(argv, timeout_ms, e, sizeof e) == 0)
    return 0;
  snprintf(err, err_len, "`%.200s`: %s", cmd, e);
  return -1;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p) < 0 && errno != ENOENT ? -1 : 0;
}

int opx_rm_rf(const char *path) {
  if (!path[0] || !strcmp(path, "/"))
    return -1;
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? 0 : -1;
  return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int opx_mkdir_p(const char *path) {
  char b[OP_PATH_MAX];
  snprintf(b, sizeof b, "%s", path);
  for (char *p = b + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(b, 0700) < 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(b, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

int opx_free_ports(int *a, int *b) {
  int fds[2] = {-1, -1}, ports[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) < 0 ||
        getsockname(fds[i], (struct sockaddr *)&sa, &len) < 0)
      break;
    ports[i] = ntohs(sa.sin_port);
  }
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  *a = ports[0];
  *b = ports[1];
  return ports[0] && ports[1] ? 0 : -1;
}
