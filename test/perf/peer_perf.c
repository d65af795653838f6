/* test/perf/peer_perf.c — the peer transport between two processes on
 * loopback: throughput of small messages and ping-pong round trip.
 *
 *   build/perf/peer_perf [messages] [bytes]     (default 2000000 of 64 bytes)
 *
 * A (parent) and B (forked child) each run their own libev loop and transport.
 * Throughput: A queues messages in batches of 1000 per loop turn (keeping at
 * most 4 MiB unsent) while B counts them; B answers one message when it has
 * them all. Round trip: A sends one message, B echoes it, 20000 times.
 * Prints one line per figure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../net/peer.h"

static uint64_t n_msgs = 2000000, got, pongs;
static size_t msg_bytes = 64;
static struct kt_peer_transport *tr;
static bool is_b;

static void on_msg(void *arg, uint64_t from, const uint8_t *m, size_t len) {
  (void)arg;
  if (is_b) {
    if (m[0] == 'p') { /* ping: echo */
      kt_peer_send(tr, from, m, len);
      return;
    }
    if (++got == n_msgs)
      kt_peer_send(tr, from, "done", 4);
    return;
  }
  if (m[0] == 'p')
    pongs++;
  else
    got = 1;
}

static int port_of_pipe(int fd) {
  int p = 0;
  if (read(fd, &p, sizeof p) != (ssize_t)sizeof p)
    return -1;
  return p;
}

static struct kt_peer_transport *start(struct ev_loop *loop, uint64_t me) {
  struct kt_peer_config c = {
      .cluster_id = 7, .member_id = me, .seed = me, .on_message = on_msg, .arg = NULL};
  struct kt_peer_transport *t = kt_peer_new(loop, &c);
  struct kt_err e = {0};
  if (kt_peer_listen(t, "127.0.0.1:0", &e)) {
    fprintf(stderr, "%s\n", e.msg);
    exit(1);
  }
  return t;
}

static void add(struct kt_peer_transport *t, uint64_t id, int port) {
  char url[64];
  snprintf(url, sizeof url, "127.0.0.1:%d", port);
  struct kt_err e = {0};
  if (kt_peer_add(t, id, url, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1)
    n_msgs = strtoull(argv[1], NULL, 10);
  if (argc > 2)
    msg_bytes = strtoull(argv[2], NULL, 10);
  if (msg_bytes < 8)
    msg_bytes = 8;
  kt_log_level = KT_LOG_WARN;
  int a2b[2], b2a[2];
  if (pipe(a2b) || pipe(b2a))
    return 1;
  pid_t pid = fork();
  if (pid == 0) {
    is_b = true;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    tr = start(loop, 2);
    int mine = kt_peer_listen_port(tr);
    if (write(b2a[1], &mine, sizeof mine) != (ssize_t)sizeof mine)
      return 1;
    add(tr, 1, port_of_pipe(a2b[0]));
    ev_run(loop, 0); /* until killed */
    return 0;
  }
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  tr = start(loop, 1);
  int mine = kt_peer_listen_port(tr);
  if (write(a2b[1], &mine, sizeof mine) != (ssize_t)sizeof mine)
    return 1;
  add(tr, 2, port_of_pipe(b2a[0]));
  double dl = ev_time() + 5;
  while (!kt_peer_connected(tr, 2) && ev_time() < dl)
    ev_run(loop, EVRUN_ONCE);
  /* B must also be connected to A before it can answer: ping until it does. */
  while (pongs == 0 && ev_time() < dl) {
    kt_peer_send(tr, 2, "pxxxxxxx", 8);
    double until = ev_time() + 0.01;
    while (pongs == 0 && ev_time() < until)
      ev_run(loop, EVRUN_NOWAIT);
  }
  if (!pongs) {
    fprintf(stderr, "peer_perf: no connection\n");
    kill(pid, SIGKILL);
    return 1;
  }

  uint8_t *msg = calloc(1, msg_bytes);
  msg[0] = 'm';
  uint64_t sent = 0, dropped = 0;
  double t0 = ev_time();
  got = 0;
  while (!got && ev_time() < t0 + 60) {
    struct kt_peer_status st;
    kt_peer_status(tr, 2, &st);
    for (int i = 0; i < 1000 && sent < n_msgs && st.queue_bytes < (4u << 20); i++) {
      int rc = kt_peer_send(tr, 2, msg, msg_bytes);
      if (rc == 0)
        sent++;
      else
        dropped++;
    }
    ev_run(loop, sent < n_msgs ? EVRUN_NOWAIT : EVRUN_ONCE);
  }
  double dt = ev_time() - t0;
  struct kt_peer_status st;
  kt_peer_status(tr, 2, &st);
  printf("peer_perf: %llu messages of %zu bytes A->B (two processes, loopback) in %.3f s: %.0f "
         "msgs/s, %.1f MiB/s, %llu writes, %llu dropped%s\n",
         (unsigned long long)sent, msg_bytes, dt, sent / dt,
         sent * (double)(msg_bytes + KT_PEER_FRAME_HDR) / dt / (1 << 20),
         (unsigned long long)st.writes, (unsigned long long)dropped, got ? "" : " (INCOMPLETE)");

  int rtts = 20000;
  pongs = 0;
  msg[0] = 'p';
  t0 = ev_time();
  for (int i = 0; i < rtts && ev_time() < t0 + 30; i++) {
    uint64_t want = pongs + 1;
    kt_peer_send(tr, 2, msg, msg_bytes);
    while (pongs < want)
      ev_run(loop, EVRUN_ONCE);
  }
  dt = ev_time() - t0;
  printf("peer_perf: %llu ping-pongs of %zu bytes: %.1f us per round trip\n",
         (unsigned long long)pongs, msg_bytes, dt / (double)pongs * 1e6);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  kt_peer_free(tr);
  ev_loop_destroy(loop);
  free(msg);
  return got ? 0 : 1;
}
