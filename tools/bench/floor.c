/* tools/bench/floor.c — `ketch-bench floor --data-dir DIR [--count N]`: the
 * durability floor a single client's durable put cannot beat on this machine:
 *   1. write 256 bytes + fdatasync, N times, overwriting a preallocated file
 *      in DIR (the disk's cheapest durable append);
 *   2. a loopback TCP round trip of 64 bytes to a forked echo process, N times.
 * Reports each one's percentiles and floor = fsync p50 + round-trip p50. */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static int sync_loop(const char *dir, int count, struct hist *h, char *err, size_t err_len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ketch-bench-floor.tmp", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, err_len, "%.400s: %m", path);
    return -1;
  }
  off_t size = (off_t)count * 256;
  int rc = posix_fallocate(fd, 0, size);
  if (rc) { /* not every file system has fallocate: write zeros */
    char z[4096] = {0};
    for (off_t o = 0; o < size; o += (off_t)sizeof z)
      if (pwrite(fd, z, sizeof z, o) < 0)
        break;
  }
  fsync(fd);
  char buf[256];
  memset(buf, 'f', sizeof buf);
  for (int i = 0; i < count; i++) {
    uint64_t t = bench_now_ns();
    if (pwrite(fd, buf, sizeof buf, (off_t)i * 256) != (ssize_t)sizeof buf || fdatasync(fd)) {
      snprintf(err, err_len, "%.400s: write/fdatasync: %m", path);
      close(fd);
      unlink(path);
      return -1;
    }
    hist_add(h, bench_now_ns() - t);
  }
  close(fd);
  unlink(path);
  return 0;
}

static int rtt_loop(int count, struct hist *h, char *err, size_t err_len) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al)) {
    snprintf(err, err_len, "loopback socket: %m");
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) { /* echo server */
    int s = accept(ls, NULL, NULL);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b[64];
    ssize_t n;
    while ((n = read(s, b, sizeof b)) > 0)
      if (write(s, b, (size_t)n) != n)
        break;
    _exit(0);
  }
  close(ls);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (pid < 0 || s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
    snprintf(err, err_len, "loopback connect: %m");
    if (pid > 0)
      kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    return -1;
  }
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char b[64];
  memset(b, 'r', sizeof b);
  int rc = 0;
  for (int i = 0; i < count && !rc; i++) {
    uint64_t t = bench_now_ns();
    if (write(s, b, sizeof b) != (ssize_t)sizeof b) {
      rc = -1;
      break;
    }
    size_t got = 0;
    while (got < sizeof b) {
      ssize_t n = read(s, b + got, sizeof b - got);
      if (n <= 0) {
        rc = -1;
        break;
      }
      got += (size_t)n;
    }
    hist_add(h, bench_now_ns() - t);
  }
  if (rc)
    snprintf(err, err_len, "loopback round trip failed");
  close(s);
  waitpid(pid, NULL, 0);
  return rc;
}

int floor_measure(const char *dir, int count, struct hist *fsync_h, struct hist *rtt_h, char *err,
                  size_t err_len) {
  hist_reset(fsync_h);
  hist_reset(rtt_h);
  if (sync_loop(dir, count, fsync_h, err, err_len) || rtt_loop(count, rtt_h, err, err_len))
    return -1;
  return 0;
}

int floor_main(const struct bench_cfg *cfg, int argc, char **argv) {
  const char *dir = NULL;
  int count = 2000;
  bool json = cfg->json;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--data-dir") && i + 1 < argc)
      dir = argv[++i];
    else if (!strcmp(argv[i], "--count") && i + 1 < argc)
      count = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json"))
      json = true;
    else
      usage(2);
  }
  if (!dir || count < 1 || count > 10000000) {
    fprintf(stderr, "ketch-bench floor: needs --data-dir DIR (on the disk to measure) and --count "
                    "1..10000000\n");
    return 2;
  }
  static struct hist fs, rt;
  char err[512];
  if (floor_measure(dir, count, &fs, &rt, err, sizeof err)) {
    fprintf(stderr, "ketch-bench floor: %s\n", err);
    return 1;
  }
  double floor_ms = (hist_pct(&fs, 50) + hist_pct(&rt, 50)) / 1e6;
  if (json) {
    printf("{\"count\":%d,\"fdatasync_p50_ms\":%.4f,\"fdatasync_p99_ms\":%.4f,"
           "\"fdatasync_per_s\":%.0f,\"rtt_p50_ms\":%.4f,\"rtt_p99_ms\":%.4f,\"floor_ms\":%.4f}\n",
           count, hist_pct(&fs, 50) / 1e6, hist_pct(&fs, 99) / 1e6, 1e9 / hist_mean(&fs),
           hist_pct(&rt, 50) / 1e6, hist_pct(&rt, 99) / 1e6, floor_ms);
  } else {
    printf("write 256 B + fdatasync (preallocated file in %s), %d times:\n"
           "  p50 %.4f ms  p99 %.4f ms  max %.4f ms  (%.0f syncs/s)\n"
           "loopback TCP round trip (64 B, to another process), %d times:\n"
           "  p50 %.4f ms  p99 %.4f ms  max %.4f ms\n"
           "floor for one client's durable put: %.4f ms (fdatasync p50 + round trip p50)\n",
           dir, count, hist_pct(&fs, 50) / 1e6, hist_pct(&fs, 99) / 1e6, (double)fs.max_ns / 1e6,
           1e9 / hist_mean(&fs), count, hist_pct(&rt, 50) / 1e6, hist_pct(&rt, 99) / 1e6,
           (double)rt.max_ns / 1e6, floor_ms);
  }
  return 0;
}
