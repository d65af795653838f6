/* tools/bench/storm.c — `--storm N`: N new TLS clients connecting at once,
 * from a child process, while the measured workload runs (issue 15: "2,000
 * new TLS clients connecting at once while 64 clients put: the putting
 * clients' p99 stays under 10 ms").
 *
 * The child waits --storm-after seconds, then opens N non-blocking
 * connections to the endpoints (round robin) in one burst, drives every TLS
 * handshake (net/tls.h, the files of bench_tls) and a native HELLO in one
 * poll loop, and reports on stderr how long until every client had its
 * HELLO answered, with the percentiles of the per-client times and the
 * failures by reason; then keeps the connections open until the parent
 * stops it (SIGTERM at the end of the run). A separate process, so its own
 * CPU does not delay the measured clients' completions in the generator's
 * loop; on a machine shared with the servers it stands for clients on other
 * machines, so it spends as little as it can: it does not verify the
 * servers' certificates (the servers still verify its client certificate:
 * their side of the handshake is whole) and runs at nice 10. Only the ketch
 * target (its native HELLO).
 *
 * With --user the storm is one of logins: each client sends AUTHENTICATE
 * right behind its HELLO and counts as answered when the login's answer
 * came back (a refusal counts as failed, "login refused"); TLS only when
 * an endpoint is https:// or a TLS file is given (the targets' rule).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../net/proto.h"
#include "../../net/tls.h"
#include "bench.h"

enum { C_CONNECTING, C_TLS, C_HELLO, C_DONE, C_FAILED };

struct sconn {
  struct kt_io io;
  int state;
  uint64_t t0, t1;
  size_t sent, got, frames;
  uint8_t in[1024];
  const char *why;
};

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static volatile sig_atomic_t storm_stopping; /* SIGTERM: report what is done, then exit */
static void on_storm_term(int sig) {
  (void)sig;
  storm_stopping = 1;
}

static void storm_child(const char *endpoints, int n, double after_s) {
  if (nice(10) < 0)
    perror("storm: nice");
  usleep((useconds_t)(after_s * 1e6));
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl)) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  struct kt_tls_config tc = {.ca_file = bench_tls.cacert,
                             .cert_file = bench_tls.cert,
                             .key_file = bench_tls.key,
                             .skip_verify = true,
                             .cert_flag = "--cert",
                             .key_flag = "--key",
                             .ca_flag = "--cacert"};
  struct kt_tls_ctx *ctx = NULL;
  struct kt_err e = {0};
  bool any_tls =
      bench_tls.cacert || bench_tls.cert || bench_tls.key || strstr(endpoints, "https://");
  if (any_tls && kt_tls_ctx_new(&tc, &ctx, &e)) {
    fprintf(stderr, "storm: %s\n", e.msg);
    _exit(1);
  }
  /* endpoints: host:port, optionally https:// */
  char list[4096], *save = NULL, *eps[64];
  int ne = 0;
  snprintf(list, sizeof list, "%s", endpoints);
  for (char *t = strtok_r(list, ",", &save); t && ne < 64; t = strtok_r(NULL, ",", &save))
    eps[ne++] = !strncmp(t, "https://", 8) ? t + 8 : t;
  struct kt_buf hello = {0};
  struct kt_req req = {.type = KT_MSG_HELLO};
  req.u.hello.version = KT_PROTO_VERSION;
  req.u.hello.client = (struct kt_bytes){(const uint8_t *)"ketch-bench-storm", 17};
  kt_proto_encode_req(&hello, &req);
  size_t frames = 1;
  if (bench_auth.user) { /* a login right behind the HELLO */
    struct kt_req a = {.type = KT_MSG_AUTHENTICATE, .id = 1};
    a.u.auth.name =
        (struct kt_bytes){(const uint8_t *)bench_auth.user, (uint32_t)strlen(bench_auth.user)};
    a.u.auth.password = (struct kt_bytes){(const uint8_t *)bench_auth.password,
                                          (uint32_t)strlen(bench_auth.password)};
    kt_proto_encode_req(&hello, &a);
    frames = 2;
  }
  struct sconn *cs = calloc((size_t)n, sizeof *cs);
  struct pollfd *pf = calloc((size_t)n, sizeof *pf);
  uint64_t start = bench_now_ns();
  for (int i = 0; i < n; i++) {
    struct sconn *c = &cs[i];
    char host[256];
    snprintf(host, sizeof host, "%s", eps[i % ne]);
    char *colon = strrchr(host, ':');
    struct sockaddr_in a = {.sin_family = AF_INET};
    c->t0 = bench_now_ns();
    if (!colon) {
      c->state = C_FAILED, c->why = "bad endpoint";
      continue;
    }
    *colon = 0;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
      c->state = C_FAILED, c->why = "endpoint not a numeric IPv4 address";
      continue;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      c->state = C_FAILED, c->why = "socket";
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    kt_io_init_plain(&c->io, fd);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS) {
      c->state = C_FAILED, c->why = "connect";
      continue;
    }
    if (ctx && kt_io_init_tls(&c->io, fd, ctx, host, &e)) {
      c->state = C_FAILED, c->why = "TLS setup";
      continue;
    }
    c->state = C_CONNECTING;
  }
  int left = 0;
  for (int i = 0; i < n; i++)
    left += cs[i].state < C_DONE;
  uint64_t deadline = bench_now_ns() + 60ull * 1000000000ull;
  while (left && !storm_stopping && bench_now_ns() < deadline) {
    for (int i = 0; i < n; i++) {
      struct sconn *c = &cs[i];
      pf[i].fd = c->state < C_DONE ? c->io.fd : -1;
      int ev = c->state == C_CONNECTING ? KT_IO_WRITE
               : c->state == C_TLS      ? kt_io_events(&c->io, true, true)
                                        : kt_io_events(&c->io, true, c->sent < hello.len);
      pf[i].events = (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0));
      pf[i].revents = 0;
    }
    if (poll(pf, (nfds_t)n, 100) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < n; i++) {
      struct sconn *c = &cs[i];
      if (c->state >= C_DONE || !pf[i].revents)
        continue;
      if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof err;
        getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        c->state = err ? C_FAILED : ctx ? C_TLS : C_HELLO;
        c->why = err ? "connect refused" : NULL;
      }
      if (c->state == C_TLS) {
        int r = kt_io_handshake(&c->io, &e);
        if (r == 1)
          c->state = C_HELLO;
        else if (r != KT_IO_AGAIN)
          c->state = C_FAILED, c->why = "TLS handshake";
      }
      while (c->state == C_HELLO && c->sent < hello.len) {
        ssize_t w = kt_io_write(&c->io, hello.p + c->sent, hello.len - c->sent, &e);
        if (w > 0)
          c->sent += (size_t)w;
        else if (w == KT_IO_AGAIN)
          break;
        else
          c->state = C_FAILED, c->why = "write";
      }
      while (c->state == C_HELLO && c->sent == hello.len) {
        ssize_t r = kt_io_read(&c->io, c->in + c->got, sizeof c->in - c->got, &e);
        if (r == KT_IO_AGAIN)
          break;
        if (r <= 0) {
          c->state = C_FAILED, c->why = r == 0 ? "closed by the server" : "read";
          break;
        }
        c->got += (size_t)r;
        const uint8_t *body;
        uint32_t blen;
        size_t used;
        while (c->state == C_HELLO &&
               kt_frame_next(c->in, c->got, sizeof c->in, &body, &blen, &used) == 1) {
          uint8_t type = 0;
          uint64_t id = 0;
          if (kt_proto_peek_id(body, blen, &type, &id) == 1 && type == KT_MSG_ERROR)
            c->state = C_FAILED, c->why = id ? "login refused" : "HELLO refused";
          else if (++c->frames == frames)
            c->state = C_DONE, c->t1 = bench_now_ns();
          memmove(c->in, c->in + used, c->got - used);
          c->got -= used;
        }
      }
      if (c->state >= C_DONE)
        left--;
    }
  }
  uint64_t end = bench_now_ns();
  uint64_t *lat = calloc((size_t)n, sizeof *lat);
  int ok = 0, failed = 0;
  const char *why = NULL;
  for (int i = 0; i < n; i++) {
    if (cs[i].state == C_DONE)
      lat[ok++] = cs[i].t1 - cs[i].t0;
    else
      failed++, why = cs[i].why ? cs[i].why : "timed out";
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_u64);
  fprintf(stderr,
          "storm: %d %s at once: %d answered %s within %.2f s (per client p50 %.1f "
          "ms, p99 %.1f ms, max %.1f ms), %d failed%s%s\n",
          n, bench_auth.user ? "logins" : "TLS clients", ok,
          bench_auth.user ? "their login" : "HELLO", (double)(end - start) / 1e9,
          ok ? lat[ok / 2] / 1e6 : 0, ok ? lat[(size_t)ok * 99 / 100] / 1e6 : 0,
          ok ? lat[ok - 1] / 1e6 : 0, failed, failed ? ": " : "", failed ? why : "");
  /* keep them open until told to stop (a storm cut short by the end of the
   * run has reported what it got: "timed out" names the unanswered) */
  while (!storm_stopping)
    pause();
  _exit(0);
}

pid_t storm_spawn(const struct bench_cfg *cfg) {
  if (cfg->storm <= 0)
    return 0;
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGTERM, on_storm_term);
    storm_child(cfg->endpoints, cfg->storm, cfg->storm_after_s);
    _exit(0);
  }
  return pid;
}

void storm_stop(pid_t pid) {
  if (pid <= 0)
    return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}
