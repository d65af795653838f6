/* tools/operator/driver.c — where members run.
 *
 * local: members are processes on this machine. A member is started
 *   detached (fork, setsid, fork, exec) so it outlives the operator that
 *   started it (a standby operator takes over running members); its pid
 *   goes to <data-dir>.pid and its output to <data-dir>.log. A pid is only
 *   trusted if /proc/<pid>/cmdline still names that data dir (pids are
 *   reused). Flags: etcd's, from the spec (name, URLs, data dir, token,
 *   initial cluster and state) plus member-args.
 * command: every action is the spec's template for it, filled in and run
 *   with /bin/sh -c (at most 60 s): start, stop, wipe, force-new-cluster,
 *   restore. The operator cannot see processes there (process = unknown).
 *
 * Every action is idempotent: starting a running member (local) does
 * nothing, stopping a stopped one succeeds, wiping an absent dir succeeds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "opx.h"

#define CMD_TIMEOUT_MS 60000
#define STOP_TIMEOUT_MS 10000

const char *opx_member_binary(const struct opx *x) {
  return x->spec.binary[0] ? x->spec.binary : x->ketch_bin;
}

static void side_path(const struct op_machine *m, const char *ext, char *out, size_t n) {
  snprintf(out, n, "%s.%s", m->data_dir, ext);
}

/* The pid of machine m's member if it is alive and still ours, else 0. */
static pid_t local_pid(const struct op_machine *m) {
  char path[OP_PATH_MAX + 16], buf[64];
  side_path(m, "pid", path, sizeof path);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  long pid = 0;
  if (!fgets(buf, sizeof buf, f) || (pid = strtol(buf, NULL, 10)) <= 1) {
    fclose(f);
    return 0;
  }
  fclose(f);
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  f = fopen(path, "r");
  if (!f)
    return 0;
  char stat[512];
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = 0;
  const char *rp = strrchr(stat, ')');
  if (!rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X')
    return 0; /* gone (a zombie waiting for its reaper) */
  snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
  f = fopen(path, "r");
  if (!f)
    return 0;
  static char cmd[8192];
  n = fread(cmd, 1, sizeof cmd - 1, f);
  fclose(f);
  cmd[n] = 0;
  for (size_t i = 0; i + 1 < n; i += strlen(cmd + i) + 1)
    if (!strcmp(cmd + i, "--data-dir") && i + strlen(cmd + i) + 1 < n &&
        !strcmp(cmd + i + strlen(cmd + i) + 1, m->data_dir))
      return (pid_t)pid;
  return 0;
}

void opx_drv_probe(struct opx *x, int mi, struct op_machine_obs *out) {
  memset(out, 0, sizeof *out);
  if (x->spec.driver != OP_DRIVER_LOCAL) {
    out->process = -1;
    return;
  }
  pid_t pid = local_pid(&x->spec.machines[mi]);
  out->process = pid > 0;
  if (pid > 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t r = readlink(path, out->binary, sizeof out->binary - 1);
    out->binary[r > 0 ? r : 0] = 0;
  }
}

bool opx_drv_data_empty(struct opx *x, int mi) {
  if (x->spec.driver != OP_DRIVER_LOCAL)
    return false;
  DIR *d = opendir(x->spec.machines[mi].data_dir);
  if (!d)
    return errno == ENOENT;
  struct dirent *e;
  bool empty = true;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      empty = false;
  closedir(d);
  return empty;
}

/* The command driver: template `t` for machine mi, run. */
static int run_template(struct opx *x, int mi, const char *what, const char *t,
                        const struct opx_start *s, const char *file, char *err, size_t err_len) {
  const struct op_machine *m = &x->spec.machines[mi];
  const char *vars[] = {"name",
                        m->name,
                        "host",
                        m->host,
                        "peer_url",
                        m->peer_url,
                        "client_url",
                        m->client_url,
                        "initial_cluster",
                        s && s->initial_cluster ? s->initial_cluster : "",
                        "initial_cluster_state",
                        s && s->state ? s->state : "",
                        "data_dir",
                        m->data_dir,
                        "binary",
                        s && s->binary ? s->binary : opx_member_binary(x),
                        "token",
                        x->spec.token,
                        "file",
                        file ? file : ""};
  char cmd[OP_TEMPLATE_MAX * 2];
  if (!t[0]) {
    snprintf(err, err_len, "the spec has no command.%s template", what);
    return -1;
  }
  if (op_expand(t, vars, sizeof vars / sizeof vars[0] / 2, cmd, sizeof cmd, err, err_len))
    return -1;
  opx_log(x, "info", "driver command %s machine=%s cmd=\"%s\"", what, m->name, cmd);
  return opx_sh(cmd, CMD_TIMEOUT_MS, err, err_len);
}

static void log_tail(const struct op_machine *m, char *out, size_t n) {
  char path[OP_PATH_MAX + 16];
  side_path(m, "log", path, sizeof path);
  out[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  fseek(f, 0, SEEK_END);
  long end = ftell(f);
  long from = end > (long)n - 1 ? end - ((long)n - 1) : 0;
  fseek(f, from, SEEK_SET);
  size_t r = fread(out, 1, n - 1, f);
  fclose(f);
  out[r] = 0;
  for (size_t i = 0; i < r; i++)
    if (out[i] == '\n')
      out[i] = ' ';
}

static int local_start(struct opx *x, int mi, const struct opx_start *s, char *err,
                       size_t err_len) {
  const struct op_machine *m = &x->spec.machines[mi];
  if (local_pid(m) > 0)
    return 0; /* already running */
  char parent[OP_PATH_MAX];
  snprintf(parent, sizeof parent, "%s", m->data_dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    if (opx_mkdir_p(parent) < 0) {
      snprintf(err, err_len, "mkdir %s: %s", parent, strerror(errno));
      return -1;
    }
  }
  const char *argv[16 + OP_MAX_ARGS + 4];
  size_t a = 0;
  argv[a++] = s->binary;
  const char *fl[][2] = {{"--name", m->name},
                         {"--data-dir", m->data_dir},
                         {"--listen-client-urls", m->client_url},
                         {"--advertise-client-urls", m->client_url},
                         {"--listen-peer-urls", m->peer_url},
                         {"--initial-advertise-peer-urls", m->peer_url},
                         {"--initial-cluster", s->initial_cluster},
                         {"--initial-cluster-token", x->spec.token},
                         {"--initial-cluster-state", s->state}};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
    argv[a++] = fl[i][0];
    argv[a++] = fl[i][1];
  }
  for (int i = 0; i < x->spec.n_member_args; i++)
    argv[a++] = x->spec.member_args[i];
  if (s->force_new_cluster)
    argv[a++] = "--force-new-cluster";
  argv[a] = NULL;
  char log[OP_PATH_MAX + 16], pidf[OP_PATH_MAX + 16];
  side_path(m, "log", log, sizeof log);
  side_path(m, "pid", pidf, sizeof pidf);
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) {
    snprintf(err, err_len, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t p = fork();
  if (p < 0) {
    snprintf(err, err_len, "fork: %s", strerror(errno));
    close(pfd[0]);
    close(pfd[1]);
    return -1;
  }
  if (p == 0) { /* detach: a new session, then the member as its child */
    setsid();
    pid_t q = fork();
    if (q != 0) {
      int32_t v = (int32_t)q;
      ssize_t w = write(pfd[1], &v, sizeof v);
      _exit(w == sizeof v && q > 0 ? 0 : 1);
    }
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int nul = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (nul >= 0)
      dup2(nul, 0);
    for (int i = 3; i < 1024; i++) /* none of the operator's sockets */
      close(i);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "ketch-operator: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  int st;
  waitpid(p, &st, 0);
  int32_t member = 0;
  ssize_t r = read(pfd[0], &member, sizeof member);
  close(pfd[0]);
  if (r != sizeof member || member <= 0) {
    snprintf(err, err_len, "could not start %s", argv[0]);
    return -1;
  }
  FILE *f = fopen(pidf, "w");
  if (f) {
    fprintf(f, "%d\n", (int)member);
    fclose(f);
  }
  opx_sleep_ms(100);
  if (local_pid(m) <= 0) {
    char tail[120];
    log_tail(m, tail, sizeof tail);
    snprintf(err, err_len, "it exited at once; its log ends: %s", tail);
    return -1;
  }
  return 0;
}

int opx_drv_start(struct opx *x, int mi, const struct opx_start *s, char *err, size_t err_len) {
  if (x->spec.driver == OP_DRIVER_LOCAL)
    return local_start(x, mi, s, err, err_len);
  if (s->force_new_cluster)
    return run_template(x, mi, "force-new-cluster", x->spec.cmd_force_new_cluster, s, NULL, err,
                        err_len);
  return run_template(x, mi, "start", x->spec.cmd_start, s, NULL, err, err_len);
}

int opx_drv_stop(struct opx *x, int mi, char *err, size_t err_len) {
  const struct op_machine *m = &x->spec.machines[mi];
  if (x->spec.driver != OP_DRIVER_LOCAL)
    return run_template(x, mi, "stop", x->spec.cmd_stop, NULL, NULL, err, err_len);
  pid_t pid = local_pid(m);
  if (pid > 0) {
    kill(pid, SIGTERM);
    int64_t deadline = opx_mono_ms() + STOP_TIMEOUT_MS;
    while (local_pid(m) == pid && opx_mono_ms() < deadline)
      opx_sleep_ms(20);
    if (local_pid(m) == pid) {
      kill(pid, SIGKILL);
      opx_sleep_ms(50);
    }
  }
  char pidf[OP_PATH_MAX + 16];
  side_path(m, "pid", pidf, sizeof pidf);
  unlink(pidf);
  return 0;
}

int opx_drv_wipe(struct opx *x, int mi, char *err, size_t err_len) {
  const struct op_machine *m = &x->spec.machines[mi];
  if (x->spec.driver != OP_DRIVER_LOCAL)
    return run_template(x, mi, "wipe", x->spec.cmd_wipe, NULL, NULL, err, err_len);
  if (local_pid(m) > 0) {
    snprintf(err, err_len, "refusing to wipe %s: a member still runs there", m->data_dir);
    return -1;
  }
  if (opx_rm_rf(m->data_dir) < 0) {
    snprintf(err, err_len, "removing %s: %s", m->data_dir, strerror(errno));
    return -1;
  }
  return 0;
}

int opx_drv_restore(struct opx *x, int mi, const char *file, char *err, size_t err_len) {
  const struct op_machine *m = &x->spec.machines[mi];
  if (x->spec.driver != OP_DRIVER_LOCAL)
    return run_template(x, mi, "restore", x->spec.cmd_restore, NULL, file, err, err_len);
  if (opx_drv_wipe(x, mi, err, err_len))
    return -1;
  char parent[OP_PATH_MAX];
  snprintf(parent, sizeof parent, "%s", m->data_dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    opx_mkdir_p(parent);
  }
  char *argv[] = {x->ketchutl_bin, "snapshot",          "restore", (char *)file,
                  "--data-dir",    (char *)m->data_dir, NULL};
  return opx_run(argv, CMD_TIMEOUT_MS, err, err_len);
}
