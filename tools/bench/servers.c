/* tools/bench/servers.c — starting, stopping and measuring the servers of
 * `ketch-bench compare` (servers.h). */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "servers.h"

struct server_tls server_tls;
const char *server_compaction;
const char *server_ketch_flags[9];

int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) ||
      getsockname(s, (struct sockaddr *)&a, &l))
    return -1;
  close(s);
  return ntohs(a.sin_port);
}

void server_init(struct server *s, const char *bin, const char *dir) {
  memset(s, 0, sizeof *s);
  s->bin = bin;
  s->port = free_port();
  s->peer = free_port();
  snprintf(s->dir, sizeof s->dir, "%.4000s", dir);
  snprintf(s->log, sizeof s->log, "%.4000s.log", s->dir);
  snprintf(s->endpoint, sizeof s->endpoint, "127.0.0.1:%d", s->port);
  if (server_tls.cert) { /* explicit schemes: bench_tls would make a bare one TLS */
    s->tls_port = free_port();
    snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", s->port);
    snprintf(s->tls_endpoint, sizeof s->tls_endpoint, "https://127.0.0.1:%d", s->tls_port);
  }
}

static pid_t spawn(char *const argv[], const char *log_path) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(log_path, "a", stdout);
    if (f)
      dup2(fileno(stdout), 2);
    setpgid(0, 0); /* our ^C does not reach it: we stop it ourselves */
    execvp(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

void server_stop(struct server *s) {
  if (s->pid <= 0)
    return;
  kill(s->pid, SIGTERM);
  for (int i = 0; i < 50; i++) {
    if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
      s->pid = 0;
      return;
    }
    usleep(100000);
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  s->pid = 0;
}

void server_start(struct server *s, int t, const char *name, const char *ic) {
  char cu[64], lcu[160], pu[64];
  snprintf(cu, sizeof cu, "http://127.0.0.1:%d", s->port);
  snprintf(lcu, sizeof lcu, "%s", cu);
  if (server_tls.cert && s->tls_port)
    snprintf(lcu, sizeof lcu, "%s,https://127.0.0.1:%d", cu, s->tls_port);
  snprintf(pu, sizeof pu, "http://127.0.0.1:%d", s->peer);
  char *av[48];
  int n = 0;
  av[n++] = (char *)s->bin;
  av[n++] = "--name";
  av[n++] = (char *)name;
  av[n++] = "--data-dir";
  av[n++] = s->dir;
  av[n++] = "--listen-client-urls";
  av[n++] = lcu;
  av[n++] = "--advertise-client-urls";
  av[n++] = cu;
  av[n++] = "--listen-peer-urls";
  av[n++] = pu;
  av[n++] = "--initial-advertise-peer-urls";
  av[n++] = pu;
  av[n++] = "--initial-cluster";
  av[n++] = (char *)ic;
  av[n++] = "--initial-cluster-token";
  av[n++] = "ketch-bench";
  av[n++] = "--log-level";
  av[n++] = t == T_ETCD ? "error" : "warn";
  if (server_tls.cert && s->tls_port) {
    av[n++] = "--cert-file";
    av[n++] = (char *)server_tls.cert;
    av[n++] = "--key-file";
    av[n++] = (char *)server_tls.key;
    av[n++] = "--trusted-ca-file";
    av[n++] = (char *)server_tls.client_ca;
    av[n++] = "--client-cert-auth";
  }
  if (server_compaction) {
    av[n++] = "--auto-compaction-mode";
    av[n++] = "periodic";
    av[n++] = "--auto-compaction-retention";
    av[n++] = (char *)server_compaction;
  }
  for (int i = 0; t == T_KETCH && server_ketch_flags[i] && i < 8; i++)
    av[n++] = (char *)server_ketch_flags[i];
  av[n] = NULL;
  s->pid = spawn(av, s->log);
}

/* user + system CPU seconds so far of a /proc stat file; -1 if unknown */
static double stat_cpu_s(const char *p) {
  char buf[1024];
  FILE *f = fopen(p, "r");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *q = strrchr(buf, ')'); /* fields after the command name */
  unsigned long ut = 0, st = 0;
  if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double proc_cpu_s(int pid) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/stat", pid);
  return stat_cpu_s(p);
}

/* The member's state thread: the one named ketch-state if there is one, else
 * the main thread (ketch runs its loop there: tid == pid). */
static int state_tid(int pid) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/task", pid);
  DIR *d = opendir(p);
  int tid = pid;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    char cp[300], comm[32] = "";
    snprintf(cp, sizeof cp, "/proc/%d/task/%.100s/comm", pid, de->d_name);
    FILE *f = fopen(cp, "r");
    if (!f)
      continue;
    if (fgets(comm, sizeof comm, f) && !strcmp(comm, "ketch-state\n"))
      tid = atoi(de->d_name);
    fclose(f);
  }
  if (d)
    closedir(d);
  return tid;
}

double state_thread_cpu_s(int pid) {
  char p[96];
  snprintf(p, sizeof p, "/proc/%d/task/%d/stat", pid, state_tid(pid));
  return stat_cpu_s(p);
}

double cluster_cpu_s(struct server *m, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double c = proc_cpu_s(m[i].pid);
    if (c < 0)
      return -1;
    sum += c;
  }
  return sum;
}

static uint64_t dir_bytes;
static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)path, (void)ftw;
  if (flag == FTW_F)
    dir_bytes += (uint64_t)st->st_blocks * 512;
  return 0;
}

uint64_t du_bytes(const char *dir) {
  dir_bytes = 0;
  nftw(dir, add_size, 16, FTW_PHYS);
  return dir_bytes;
}

long rss_kb(pid_t pid) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "r");
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6))
      kb = atol(line + 6);
  if (f)
    fclose(f);
  return kb;
}

void rm_rf(const char *dir) {
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) {
  }
}

void base_cfg(struct bench_cfg *c, int target, const char *endpoint) {
  cfg_defaults(c);
  c->target = target;
  c->endpoints = endpoint;
  c->key_size = 16;
  c->val_size = 256;
  c->timeout_ms = 10000;
}

void load_cfg(struct bench_cfg *c, int target, const char *endpoint, long keys) {
  base_cfg(c, target, endpoint);
  c->workload = W_PUT;
  c->workload_name = "put";
  c->clients = 64;
  c->conns = 16;
  c->total = keys;
  c->key_space = keys;
  c->sequential = true;
}

bool wait_ready(int target, const char *endpoint, pid_t pid, double timeout_s) {
  static struct bench_result r;
  uint64_t end = bench_now_ns() + (uint64_t)(timeout_s * 1e9);
  while (bench_now_ns() < end) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return false;
    struct bench_cfg c;
    base_cfg(&c, target, endpoint);
    c.workload = W_RANGE;
    c.workload_name = "range";
    c.range_key = "ready";
    c.total = 1;
    c.timeout_ms = 1000;
    char err[256];
    if (!bench_run(&c, &r, err, sizeof err) && r.ok == 1)
      return true;
    usleep(20000);
  }
  return false;
}
