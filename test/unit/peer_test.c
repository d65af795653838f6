/* test/unit/peer_test.c — the peer transport over real sockets on 127.0.0.1,
 * with real libev loops. Every test runs one loop that hosts all its
 * transports (and any raw sockets), bounded by a deadline; none waits on a
 * fixed sleep to decide an outcome. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "../../net/peer.h"

#define CLUSTER 0xc1c1c1c1c1ULL

/* ---- log capture ---- */

static char logbuf[256 * 1024];
static size_t loglen;

static void capture_sink(int level, const char *module, const char *line) {
  (void)level;
  int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "%s %s\n", module, line);
  if (n > 0 && loglen + (size_t)n < sizeof logbuf)
    loglen += (size_t)n;
  if (getenv("KT_TEST_VERBOSE"))
    fprintf(stderr, "%s %s\n", module, line);
}

static void log_reset(void) {
  loglen = 0;
  logbuf[0] = 0;
  kt_log_set_sink(capture_sink);
}

/* ---- a member: transport + what it received ---- */

#define MAXID 8

struct member {
  struct kt_peer_transport *t;
  uint64_t id;
  int port;
  uint64_t next_seq[MAXID]; /* next expected seq per sender */
  uint64_t received[MAXID];
  bool out_of_order;
  bool bad_payload; /* a send_seq message's bytes after 16 are not all 0xab */
  uint64_t unreachable[MAXID];
  uint64_t room_calls[MAXID];
  /* snapshot receiving */
  uint64_t snap_next, snap_bytes;
  bool snap_bad;
  double max_latency_s;
  uint64_t timed_msgs;
};

/* Message: seq u64 BE | send time (double, native) | filler. */
static void on_message(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  struct member *m = arg;
  if (from >= MAXID || len < 8) {
    m->out_of_order = true;
    return;
  }
  uint64_t seq = kt_get_u64be(msg);
  if (seq != m->next_seq[from])
    m->out_of_order = true;
  m->next_seq[from] = seq + 1;
  m->received[from]++;
  for (size_t i = 16; i < len; i++)
    if (msg[i] != 0xab)
      m->bad_payload = true;
  if (len >= 16) {
    double sent;
    memcpy(&sent, msg + 8, sizeof sent);
    if (sent > 0) {
      double lat = ev_time() - sent;
      if (lat > m->max_latency_s)
        m->max_latency_s = lat;
      m->timed_msgs++;
    }
  }
}

static void on_snapshot(void *arg, uint64_t from, const uint8_t *chunk, size_t len) {
  (void)from;
  struct member *m = arg;
  if (len < 8 || kt_get_u64be(chunk) != m->snap_next)
    m->snap_bad = true;
  m->snap_next++;
  m->snap_bytes += len;
}

static void on_unreachable(void *arg, uint64_t id) {
  struct member *m = arg;
  if (id < MAXID)
    m->unreachable[id]++;
}

static void (*room_hook)(struct member *m, uint64_t id);
static void on_room(void *arg, uint64_t id) {
  struct member *m = arg;
  if (id < MAXID)
    m->room_calls[id]++;
  if (room_hook)
    room_hook(m, id);
}

static struct kt_peer_config config_of(struct member *m, uint64_t cluster) {
  struct kt_peer_config c = {.cluster_id = cluster,
                             .member_id = m->id,
                             .seed = 42 + m->id,
                             .on_message = on_message,
                             .on_snapshot = on_snapshot,
                             .on_unreachable = on_unreachable,
                             .on_snapshot_room = on_room,
                             .arg = m};
  return c;
}

/* Start member m listening on port (0: any). Returns 0 on success. */
static int member_start(struct ev_loop *loop, struct member *m, const struct kt_peer_config *c,
                        int port) {
  m->t = kt_peer_new(loop, c);
  char url[64];
  snprintf(url, sizeof url, "127.0.0.1:%d", port);
  struct kt_err e = {0};
  if (kt_peer_listen(m->t, url, &e)) {
    fprintf(stderr, "listen: %s\n", e.msg);
    return -1;
  }
  m->port = kt_peer_listen_port(m->t);
  return 0;
}

static int add_peer(struct member *m, uint64_t id, int port) {
  char url[64];
  snprintf(url, sizeof url, "127.0.0.1:%d", port);
  struct kt_err e = {0};
  int rc = kt_peer_add(m->t, id, url, &e);
  if (rc)
    fprintf(stderr, "add: %s\n", e.msg);
  return rc;
}

/* ---- running the loop with a deadline ---- */

static bool timed_out;
static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
  timed_out = true;
}

typedef bool (*done_fn)(void *arg);

/* Turn the loop until done(arg) or `secs` pass. Returns done(arg). */
static bool run_until(struct ev_loop *loop, done_fn done, void *arg, double secs) {
  ev_timer dl;
  timed_out = false;
  ev_timer_init(&dl, on_deadline, secs, 0);
  ev_timer_start(loop, &dl);
  while (!done(arg) && !timed_out)
    ev_run(loop, EVRUN_ONCE);
  ev_timer_stop(loop, &dl);
  return done(arg);
}

static bool never(void *arg) {
  (void)arg;
  return false;
}

struct pair {
  struct member *a;
  uint64_t b;
};
static bool connected(void *arg) {
  struct pair *p = arg;
  return kt_peer_connected(p->a->t, p->b);
}
static bool disconnected(void *arg) { return !connected(arg); }

static bool all_connected(void *arg) {
  struct member *ms = arg;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if (i != j && !kt_peer_connected(ms[i].t, ms[j].id))
        return false;
  return true;
}

static int send_seq(struct member *m, uint64_t to, uint64_t seq, double stamp, size_t len) {
  uint8_t buf[4096];
  kt_assert(len >= 16 && len <= sizeof buf);
  memset(buf, 0xab, len);
  kt_put_u64be(buf, seq);
  memcpy(buf + 8, &stamp, sizeof stamp);
  if (seq % 2)
    return kt_peer_send(m->t, to, buf, len);
  /* the same frame from two parts, split anywhere (either may be empty) */
  size_t split = (size_t)(seq / 2 % (len + 1));
  return kt_peer_send2(m->t, to, buf, split, buf + split, len - split);
}

/* ---- tests ---- */

TEST(codec_round_trip_and_limits) {
  struct kt_peer_hs h = {.kind = KT_PEER_HELLO,
                         .version = KT_PEER_VERSION,
                         .code = KT_PEER_CH_SNAPSHOT,
                         .cluster_id = CLUSTER,
                         .a = 7,
                         .b = 9},
                    d;
  uint8_t b[KT_PEER_HELLO_BYTES];
  struct kt_err e = {0};
  kt_peer_hs_encode(b, &h);
  CHECK(memcmp(b, "KTPH", 4) == 0);
  for (size_t n = 0; n < sizeof b; n++)
    CHECK_EQ(kt_peer_hs_decode(b, n, KT_PEER_HELLO, &d, &e), 0);
  CHECK_EQ(kt_peer_hs_decode(b, sizeof b, KT_PEER_HELLO, &d, &e), 1);
  CHECK(d.cluster_id == CLUSTER && d.a == 7 && d.b == 9 && d.code == 1 && d.version == 1);
  CHECK_EQ(kt_peer_hs_decode(b, sizeof b, KT_PEER_ACK, &d, &e), -KT_EPROTO); /* wrong magic */
  CHECK_EQ(kt_peer_hs_decode((const uint8_t *)"GET / ", 6, KT_PEER_HELLO, &d, &e), -KT_EPROTO);
  CHECK_EQ(kt_peer_hs_check(&h, CLUSTER, 9, true), KT_PEER_OK);
  CHECK_EQ(kt_peer_hs_check(&h, CLUSTER + 1, 9, true), KT_PEER_WRONG_CLUSTER);
  CHECK_EQ(kt_peer_hs_check(&h, CLUSTER, 8, true), KT_PEER_WRONG_MEMBER);
  CHECK_EQ(kt_peer_hs_check(&h, CLUSTER, 9, false), KT_PEER_UNKNOWN_SENDER);
  b[6] = 1;
  CHECK_EQ(kt_peer_hs_decode(b, sizeof b, KT_PEER_HELLO, &d, &e), -KT_EPROTO);

  uint8_t f[16];
  kt_peer_frame_header(f, KT_PEER_CH_RAFT, 3);
  memcpy(f + 5, "abc", 3);
  uint8_t ch;
  const uint8_t *msg;
  uint32_t len;
  size_t used;
  CHECK_EQ(kt_peer_frame_next(f, 7, 100, &ch, &msg, &len, &used, &e), 0);
  CHECK_EQ(kt_peer_frame_next(f, 8, 100, &ch, &msg, &len, &used, &e), 1);
  CHECK(ch == 0 && len == 3 && used == 8 && memcmp(msg, "abc", 3) == 0);
  CHECK_EQ(kt_peer_frame_next(f, 8, 2, &ch, &msg, &len, &used, &e), -KT_ETOOLARGE);
  f[4] = KT_PEER_CH_JOIN; /* the one-shot JOIN channel's frames split too */
  CHECK_EQ(kt_peer_frame_next(f, 8, 100, &ch, &msg, &len, &used, &e), 1);
  f[4] = 3;
  CHECK_EQ(kt_peer_frame_next(f, 8, 100, &ch, &msg, &len, &used, &e), -KT_EPROTO);
  kt_peer_frame_header(f, 0, 0);
  CHECK_EQ(kt_peer_frame_next(f, 8, 100, &ch, &msg, &len, &used, &e), -KT_EPROTO);

  char host[64];
  int port;
  CHECK_EQ(kt_peer_parse_url("http://10.0.0.1:2380", host, sizeof host, &port, &e), 0);
  CHECK_STR(host, "10.0.0.1");
  CHECK_EQ(port, 2380);
  CHECK_EQ(kt_peer_parse_url("[::1]:7/", host, sizeof host, &port, &e), 0);
  CHECK_STR(host, "::1");
  CHECK_EQ(kt_peer_parse_url("::1:7", host, sizeof host, &port, &e), KT_EINVAL);
  CHECK_EQ(kt_peer_parse_url("host", host, sizeof host, &port, &e), KT_EINVAL);
  CHECK_EQ(kt_peer_parse_url("host:99999", host, sizeof host, &port, &e), KT_EINVAL);
  CHECK_EQ(kt_peer_parse_url(":80", host, sizeof host, &port, &e), KT_EINVAL);
}

static bool hex_is(const uint8_t *p, size_t n, const char *hex) {
  char buf[512] = {0};
  size_t o = 0;
  for (size_t i = 0; i < n && o + 4 < sizeof buf; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, i ? " %02x" : "%02x", p[i]);
  if (strcmp(buf, hex) != 0) {
    fprintf(stderr, "got      %s\nexpected %s\n", buf, hex);
    return false;
  }
  return true;
}

/* The examples of net/PEERS.md section 6, byte for byte. */
TEST(peers_md_examples_are_exact) {
  uint8_t b[KT_PEER_HELLO_BYTES];
  struct kt_peer_hs h = {.kind = KT_PEER_HELLO,
                         .version = KT_PEER_VERSION,
                         .code = KT_PEER_CH_RAFT,
                         .cluster_id = 0x1c2d3e4f5a6b7c8dull,
                         .a = 0x8e9f0a1b2c3d4e5full,
                         .b = 0x0102030405060708ull};
  kt_peer_hs_encode(b, &h);
  CHECK(hex_is(b, sizeof b,
               "4b 54 50 48 01 00 00 00 1c 2d 3e 4f 5a 6b 7c 8d 8e 9f 0a 1b 2c 3d 4e 5f 01 02 "
               "03 04 05 06 07 08"));
  CHECK_EQ(kt_peer_hs_check(&h, 0x1c2d3e4f5a6b7c8dull, 0x0102030405060708ull, true), KT_PEER_OK);
  CHECK_EQ(kt_peer_hs_check(&h, 0x99aabbccddeeff00ull, 0x0102030405060708ull, true),
           KT_PEER_WRONG_CLUSTER);
  struct kt_peer_hs ack = {.kind = KT_PEER_ACK,
                           .version = KT_PEER_VERSION,
                           .code = KT_PEER_OK,
                           .cluster_id = 0x1c2d3e4f5a6b7c8dull,
                           .a = 0x0102030405060708ull,
                           .b = 0x8e9f0a1b2c3d4e5full};
  kt_peer_hs_encode(b, &ack);
  CHECK(hex_is(b, sizeof b,
               "4b 54 50 41 01 00 00 00 1c 2d 3e 4f 5a 6b 7c 8d 01 02 03 04 05 06 07 08 8e 9f "
               "0a 1b 2c 3d 4e 5f"));
  ack.code = KT_PEER_WRONG_CLUSTER;
  ack.cluster_id = 0x99aabbccddeeff00ull;
  kt_peer_hs_encode(b, &ack);
  CHECK(hex_is(b, sizeof b,
               "4b 54 50 41 01 01 00 00 99 aa bb cc dd ee ff 00 01 02 03 04 05 06 07 08 8e 9f "
               "0a 1b 2c 3d 4e 5f"));
  CHECK_STR(kt_peer_status_name(KT_PEER_WRONG_CLUSTER), "wrong cluster");
  uint8_t f[9];
  kt_peer_frame_header(f, KT_PEER_CH_RAFT, 4);
  memcpy(f + 5, "ping", 4);
  CHECK(hex_is(f, sizeof f, "00 00 00 04 00 70 69 6e 67"));
}

#define N_MSGS 20000
#define BATCH 500

struct three {
  struct member *m;
  uint64_t sent[3][3];
};
static bool three_done(void *arg) {
  struct three *x = arg;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if (i != j && x->m[j].received[x->m[i].id] < N_MSGS)
        return false;
  return true;
}

TEST(three_members_exchange_in_order) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member m[3] = {{.id = 1}, {.id = 2}, {.id = 3}};
  for (int i = 0; i < 3; i++) {
    struct kt_peer_config c = config_of(&m[i], CLUSTER);
    CHECK_EQ(member_start(loop, &m[i], &c, 0), 0);
  }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if (i != j)
        CHECK_EQ(add_peer(&m[i], m[j].id, m[j].port), 0);
  CHECK(run_until(loop, all_connected, m, 5));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if (i != j) {
        struct kt_peer_status st;
        CHECK_EQ(kt_peer_status(m[i].t, m[j].id, &st), 0);
        CHECK(st.connected && st.snapshot_connected && st.connected_since > 0);
        CHECK_STR(st.last_error, "");
      }

  /* Every member sends N_MSGS to each other member, BATCH per pair and loop
   * turn, while the loop also delivers. */
  struct three x = {.m = m};
  double t0 = ev_time();
  ev_timer dl;
  timed_out = false;
  ev_timer_init(&dl, on_deadline, 20, 0);
  ev_timer_start(loop, &dl);
  while (!three_done(&x) && !timed_out) {
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) {
        if (i == j)
          continue;
        for (int k = 0; k < BATCH && x.sent[i][j] < N_MSGS; k++) {
          CHECK_EQ(send_seq(&m[i], m[j].id, x.sent[i][j], 0, 64), 0);
          x.sent[i][j]++;
        }
      }
    ev_run(loop, EVRUN_ONCE);
  }
  ev_timer_stop(loop, &dl);
  double dt = ev_time() - t0;
  CHECK(three_done(&x));
  uint64_t total = 0, writes = 0;
  for (int i = 0; i < 3; i++) {
    CHECK(!m[i].out_of_order);
    CHECK(!m[i].bad_payload);
    for (int j = 0; j < 3; j++) {
      if (i == j)
        continue;
      CHECK_EQ(m[j].received[m[i].id], N_MSGS);
      struct kt_peer_status st;
      CHECK_EQ(kt_peer_status(m[i].t, m[j].id, &st), 0);
      CHECK_EQ(st.msgs_queued, N_MSGS);
      CHECK_EQ(st.msgs_dropped_full + st.msgs_dropped_unreachable, 0);
      /* Every frame, plus the two HELLOs (one per channel). */
      CHECK_EQ(st.bytes_written,
               (uint64_t)N_MSGS * (64 + KT_PEER_FRAME_HDR) + 2 * KT_PEER_HELLO_BYTES);
      writes += st.writes;
      total += N_MSGS;
    }
  }
  /* Batching: frames queued in one turn leave in one write. */
  CHECK(writes * 50 < total);
  fprintf(stderr,
          "# peer: %llu messages of 64 bytes over 6 links in %.3f s = %.0f msgs/s, %llu "
          "writes\n",
          (unsigned long long)total, dt, total / dt, (unsigned long long)writes);
  for (int i = 0; i < 3; i++)
    kt_peer_free(m[i].t);
  ev_loop_destroy(loop);
}

static bool got_n_from_1(void *arg) {
  struct member *b = arg;
  return b->received[1] >= b->snap_next; /* snap_next reused as a target */
}

TEST(reconnect_after_remote_restarts_on_the_same_port) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  CHECK_EQ(add_peer(&a, 2, b.port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  struct pair ab = {&a, 2};
  CHECK(run_until(loop, connected, &ab, 5));
  uint64_t seq = 0;
  for (; seq < 100; seq++)
    CHECK_EQ(send_seq(&a, 2, seq, 0, 32), 0);
  b.snap_next = 100;
  CHECK(run_until(loop, got_n_from_1, &b, 5));

  /* B goes away: A notices, drops what it is given and reports it. */
  int port = b.port;
  kt_peer_free(b.t);
  CHECK(run_until(loop, disconnected, &ab, 5));
  CHECK_EQ(send_seq(&a, 2, 999, 0, 32), KT_EUNAVAILABLE);
  run_until(loop, never, NULL, 0.01);
  CHECK(a.unreachable[2] >= 1);
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(!st.connected && st.msgs_dropped_unreachable == 1);
  CHECK(strstr(st.last_error, "closed by the remote") != NULL ||
        strstr(st.last_error, "Connection refused") != NULL);

  /* Backoff: over 0.7 s of refused dials, each channel retries a handful of
   * times (50, 100, 200, 400 ms steps with jitter), not hundreds. */
  uint64_t d0 = st.dials;
  run_until(loop, never, NULL, 0.7);
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  uint64_t dd = st.dials - d0;
  fprintf(stderr, "# peer: %llu dials in 0.7 s while the remote was down, backoff now %u ms\n",
          (unsigned long long)dd, st.backoff_ms);
  CHECK(dd >= 2 && dd <= 16);
  CHECK(st.backoff_ms >= 200 && st.backoff_ms <= KT_PEER_BACKOFF_MAX_MS);

  /* B comes back on the same port: A reconnects by itself, messages resume. */
  memset(&b, 0, sizeof b);
  b.id = 2;
  cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &b, &cb, port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  double t0 = ev_time();
  CHECK(run_until(loop, connected, &ab, 5));
  double took = ev_time() - t0;
  fprintf(stderr, "# peer: reconnected %.0f ms after the remote came back\n", took * 1000);
  CHECK(took < KT_PEER_BACKOFF_MAX_MS / 1000.0 + 1.5); /* one backoff step at most */
  b.next_seq[1] = seq;
  for (uint64_t i = 0; i < 100; i++, seq++)
    CHECK_EQ(send_seq(&a, 2, seq, 0, 32), 0);
  b.snap_next = 100;
  CHECK(run_until(loop, got_n_from_1, &b, 5));
  CHECK(!b.out_of_order);
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(st.connected && st.backoff_ms == KT_PEER_BACKOFF_MIN_MS && st.last_error[0] == 0);
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

TEST(other_cluster_is_refused_by_both_sides) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER + 1);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  CHECK_EQ(add_peer(&a, 2, b.port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  run_until(loop, never, NULL, 0.4);
  CHECK(!kt_peer_connected(a.t, 2) && !kt_peer_connected(b.t, 1));
  CHECK_EQ(send_seq(&a, 2, 0, 0, 32), KT_EUNAVAILABLE);
  CHECK_EQ(send_seq(&b, 1, 0, 0, 32), KT_EUNAVAILABLE);
  run_until(loop, never, NULL, 0.05);
  CHECK_EQ(a.received[2] + b.received[1], 0);
  /* The acceptor names both members and both clusters... */
  CHECK(strstr(logbuf, "refused peer connection from 127.0.0.1") != NULL);
  CHECK(strstr(logbuf, "wrong cluster (local member=2 cluster=c1c1c1c1c2; remote member=1 "
                       "cluster=c1c1c1c1c1") != NULL);
  /* ...and so does the dialer. */
  CHECK(strstr(logbuf, "refused by the remote: wrong cluster (local member=1 cluster=c1c1c1c1c1; "
                       "remote member=2 cluster=c1c1c1c1c2)") != NULL);
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(strstr(st.last_error, "wrong cluster") != NULL);
  CHECK(st.msgs_received == 0 && st.msgs_dropped_unreachable == 1);
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

TEST(wrong_receiver_is_refused) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  CHECK_EQ(add_peer(&a, 5, b.port), 0); /* A believes member 5 is at B's address */
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  run_until(loop, never, NULL, 0.3);
  CHECK(!kt_peer_connected(a.t, 5));
  CHECK(strstr(logbuf, "addressed to another member (local member=2 cluster=c1c1c1c1c1; remote "
                       "member=1 cluster=c1c1c1c1c1 addressed to member=5") != NULL);
  CHECK(strstr(logbuf, "refused by the remote: addressed to another member (local member=1") !=
        NULL);
  /* B -> A is refused too: A does not know member 2. */
  CHECK(!kt_peer_connected(b.t, 1));
  CHECK(strstr(logbuf, "sender is not a member") != NULL);
  CHECK_EQ(a.received[2] + b.received[1], 0);
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

/* ---- snapshot stream vs small messages ---- */

#define SNAP_CHUNK (1u << 20)
#define SNAP_CHUNKS 200

static uint8_t *snap_buf;
static uint64_t snap_sent;
static uint64_t snap_busy;

static void pump_snapshot(struct member *m, uint64_t id) {
  while (snap_sent < SNAP_CHUNKS) {
    kt_put_u64be(snap_buf, snap_sent);
    int rc = kt_peer_send_snapshot(m->t, id, snap_buf, SNAP_CHUNK);
    if (rc == KT_EBUSY || rc == KT_EUNAVAILABLE) {
      snap_busy++;
      return; /* on_snapshot_room calls back */
    }
    kt_assert(rc == 0);
    snap_sent++;
  }
}

struct ticker {
  ev_timer w;
  struct member *a;
  uint64_t seq;
};
static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct ticker *tk = (struct ticker *)w;
  if (send_seq(tk->a, 2, tk->seq, ev_time(), 48) == 0)
    tk->seq++;
}

static bool snapshot_done(void *arg) {
  struct member *b = arg;
  return b->snap_next >= SNAP_CHUNKS;
}

TEST(snapshot_stream_does_not_delay_small_messages) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  CHECK_EQ(add_peer(&a, 2, b.port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  struct pair ab = {&a, 2};
  CHECK(run_until(loop, connected, &ab, 5));
  snap_buf = calloc(1, SNAP_CHUNK);
  snap_sent = snap_busy = 0;
  room_hook = pump_snapshot;
  struct ticker tk = {.a = &a};
  ev_timer_init(&tk.w, on_tick, 0.002, 0.002);
  ev_timer_start(loop, &tk.w);
  double t0 = ev_time();
  pump_snapshot(&a, 2);
  bool ok = run_until(loop, snapshot_done, &b, 30);
  double dt = ev_time() - t0;
  ev_timer_stop(loop, &tk.w);
  room_hook = NULL;
  free(snap_buf);
  CHECK(ok);
  CHECK(!b.snap_bad);
  CHECK_EQ(b.snap_bytes, (uint64_t)SNAP_CHUNKS * SNAP_CHUNK);
  CHECK(snap_busy > 0 && a.room_calls[2] > 0); /* flow control was exercised */
  fprintf(stderr,
          "# peer: %u MiB snapshot in %.3f s (%.0f MiB/s); %llu small messages meanwhile, max "
          "latency %.1f ms\n",
          SNAP_CHUNKS, dt, SNAP_CHUNKS / dt, (unsigned long long)b.timed_msgs,
          b.max_latency_s * 1000);
  CHECK(!b.out_of_order);
  CHECK(b.timed_msgs >= 10);
  /* Absolute bound, and relative to the stream: queued behind the stream
   * (an experiment that put the chunks on the raft channel) the worst small
   * message waited 106-117 ms of a 200-274 ms stream and this check failed;
   * on its own channel, 1-13 ms unloaded, 20-70 ms with three ASan copies of
   * this test in parallel. */
  CHECK(b.max_latency_s < 0.2);
  CHECK(b.max_latency_s < 0.025 || b.max_latency_s < dt / 4);
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(st.snap_queue_bytes <= KT_PEER_SNAP_QUEUE_BYTES);
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

/* ---- a fake peer that answers the handshake and then never reads ---- */

struct fake {
  ev_io lw;
  int lfd, port;
  int fds[4];
  int n;
  uint64_t id;
};

static void on_fake_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct fake *f = (struct fake *)w;
  int fd = accept(f->lfd, NULL, NULL);
  if (fd < 0 || f->n >= 4) {
    if (fd >= 0)
      close(fd);
    return;
  }
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  uint8_t b[KT_PEER_HELLO_BYTES];
  size_t got = 0;
  while (got < sizeof b) { /* blocking: the dialer sends HELLO right after connect */
    ssize_t r = read(fd, b + got, sizeof b - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  struct kt_peer_hs h;
  struct kt_err e = {0};
  if (got == sizeof b && kt_peer_hs_decode(b, got, KT_PEER_HELLO, &h, &e) == 1) {
    struct kt_peer_hs ack = {.kind = KT_PEER_ACK,
                             .version = KT_PEER_VERSION,
                             .cluster_id = h.cluster_id,
                             .a = f->id,
                             .b = h.a};
    kt_peer_hs_encode(b, &ack);
    (void)!write(fd, b, sizeof b);
  }
  f->fds[f->n++] = fd;
}

static int fake_start(struct ev_loop *loop, struct fake *f, uint64_t id) {
  memset(f, 0, sizeof *f);
  f->id = id;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(f->lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(f->lfd, 8) ||
      getsockname(f->lfd, (struct sockaddr *)&sa, &sl))
    return -1;
  f->port = ntohs(sa.sin_port);
  ev_io_init(&f->lw, on_fake_accept, f->lfd, EV_READ);
  ev_io_start(loop, &f->lw);
  return 0;
}

static void fake_stop(struct ev_loop *loop, struct fake *f) {
  ev_io_stop(loop, &f->lw);
  close(f->lfd);
  for (int i = 0; i < f->n; i++)
    close(f->fds[i]);
}

TEST(peer_that_never_reads_is_bounded_then_cut) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1};
  struct fake f;
  CHECK_EQ(fake_start(loop, &f, 2), 0);
  struct kt_peer_config ca = config_of(&a, CLUSTER);
  ca.max_queue_bytes = 4u << 20;
  ca.stall_ms = 1500;
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(add_peer(&a, 2, f.port), 0);
  struct pair ab = {&a, 2};
  CHECK(run_until(loop, connected, &ab, 5));
  /* 400 messages of 64 KiB (25 MiB) to a peer that reads nothing. */
  static uint8_t big[64 * 1024];
  int queued = 0, dropped = 0;
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < 10; i++) {
      int rc = kt_peer_send(a.t, 2, big, sizeof big);
      CHECK(rc == 0 || rc == KT_EBUSY);
      rc == 0 ? queued++ : dropped++;
    }
    run_until(loop, never, NULL, 0.002);
  }
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  fprintf(stderr,
          "# peer: never-reading peer: %d queued, %d dropped, queue %zu bytes (buffer %zu)\n",
          queued, dropped, st.queue_bytes, st.queue_alloc_bytes);
  CHECK(st.connected);
  CHECK(dropped >= 150 && queued + dropped == 400); /* 4 MiB queue + kernel buffers */
  CHECK_EQ(st.msgs_dropped_full, dropped);
  CHECK_EQ(st.msgs_queued, queued);
  CHECK(st.queue_bytes <= ca.max_queue_bytes);
  CHECK(st.queue_alloc_bytes <= ca.max_queue_bytes);
  CHECK(a.unreachable[2] >= 1);
  /* No write progress for stall_ms: the connection is cut (then redialled). */
  CHECK(run_until(loop, disconnected, &ab, 5));
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(st.bytes_lost > 0);
  CHECK(strstr(st.last_error, "no write progress") != NULL ||
        strstr(st.last_error, "timed out") != NULL);
  kt_peer_free(a.t);
  fake_stop(loop, &f);
  ev_loop_destroy(loop);
}

/* ---- garbage to the listener ---- */

static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

struct raw {
  int fd;
  bool closed;
  uint8_t got[64];
  size_t n;
};
static bool raw_closed(void *arg) {
  struct raw *r = arg;
  for (;;) {
    uint8_t b[64];
    ssize_t n = recv(r->fd, b, sizeof b, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
      return r->closed = true;
    if (n < 0)
      return false;
    size_t k = KT_MIN((size_t)n, sizeof r->got - r->n);
    memcpy(r->got + r->n, b, k);
    r->n += k;
  }
}
static bool raw_got_ack(void *arg) {
  struct raw *r = arg;
  raw_closed(r);
  return r->n >= KT_PEER_HELLO_BYTES || r->closed;
}

static bool got_one_from_1(void *arg) {
  struct member *b = arg;
  return b->received[1] >= 1;
}

TEST(garbage_closes_that_connection_only) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  CHECK_EQ(add_peer(&a, 2, b.port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  CHECK_EQ(add_peer(&b, 3, 1), 0); /* member 3: the raw sockets below claim to be it */
  struct pair ab = {&a, 2};
  CHECK(run_until(loop, connected, &ab, 5));

  /* 1. Not a handshake at all. */
  struct raw r = {.fd = raw_connect(b.port)};
  CHECK(r.fd >= 0);
  CHECK(write(r.fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27) == 27);
  CHECK(run_until(loop, raw_closed, &r, 3));
  CHECK_EQ(r.n, 0);
  close(r.fd);

  /* 2-4. A good HELLO from member 3, then a bad frame. */
  struct {
    uint8_t hdr[5];
    const char *what;
  } bad[] = {{{0xff, 0xff, 0xff, 0xff, 0}, "exceeds the limit"},
             {{0, 0, 0, 1, 7}, "unknown channel 7"},
             {{0, 0, 0, 0, 0}, "zero length"},
             {{0, 0, 0, 1, 1}, "channel 1 on a channel 0 connection"}};
  for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
    struct raw q = {.fd = raw_connect(b.port)};
    CHECK(q.fd >= 0);
    struct kt_peer_hs h = {.kind = KT_PEER_HELLO,
                           .version = KT_PEER_VERSION,
                           .code = KT_PEER_CH_RAFT,
                           .cluster_id = CLUSTER,
                           .a = 3,
                           .b = 2};
    uint8_t hb[KT_PEER_HELLO_BYTES];
    kt_peer_hs_encode(hb, &h);
    CHECK(write(q.fd, hb, sizeof hb) == (ssize_t)sizeof hb);
    CHECK(run_until(loop, raw_got_ack, &q, 3));
    struct kt_peer_hs ack;
    struct kt_err e = {0};
    CHECK_EQ(kt_peer_hs_decode(q.got, q.n, KT_PEER_ACK, &ack, &e), 1);
    CHECK_EQ(ack.code, KT_PEER_OK);
    CHECK(ack.a == 2 && ack.b == 3 && ack.cluster_id == CLUSTER);
    CHECK(write(q.fd, bad[i].hdr, 5) == 5);
    CHECK(run_until(loop, raw_closed, &q, 3));
    close(q.fd);
    CHECK(strstr(logbuf, bad[i].what) != NULL);
  }
  /* The real peer link never noticed. */
  CHECK(kt_peer_connected(a.t, 2));
  CHECK_EQ(send_seq(&a, 2, 0, 0, 32), 0);
  CHECK(run_until(loop, got_one_from_1, &b, 3));
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(st.dials == 2); /* one per channel: never reconnected */
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

TEST(membership_add_update_remove) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  struct kt_err e = {0};
  CHECK_EQ(kt_peer_add(a.t, 2, "127.0.0.1:1", &e), 0); /* wrong port first */
  CHECK_EQ(kt_peer_add(a.t, 2, "127.0.0.1:1", &e), KT_EINVAL);
  CHECK_EQ(kt_peer_add(a.t, 1, "127.0.0.1:1", &e), KT_EINVAL);
  CHECK_EQ(kt_peer_add(a.t, 4, "nonsense", &e), KT_EINVAL);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  uint64_t ids[4];
  CHECK_EQ(kt_peer_ids(a.t, ids, 4), 1);
  CHECK_EQ(ids[0], 2);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", b.port);
  CHECK_EQ(kt_peer_update(a.t, 2, url, &e), 0);
  CHECK_EQ(kt_peer_update(a.t, 9, url, &e), KT_ENOTFOUND);
  struct pair ab = {&a, 2}, ba = {&b, 1};
  CHECK(run_until(loop, connected, &ab, 5));
  CHECK(run_until(loop, connected, &ba, 5));
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK_STR(st.url, url);
  /* Removing A from B closes both directions; A's redials are refused. */
  CHECK_EQ(kt_peer_remove(b.t, 1), 0);
  CHECK_EQ(kt_peer_remove(b.t, 1), KT_ENOTFOUND);
  CHECK_EQ(kt_peer_send(b.t, 1, "x", 1), KT_ENOTFOUND);
  CHECK(run_until(loop, disconnected, &ab, 5));
  run_until(loop, never, NULL, 0.2);
  CHECK(!kt_peer_connected(a.t, 2));
  CHECK_EQ(kt_peer_status(a.t, 2, &st), 0);
  CHECK(strstr(st.last_error, "sender is not a member") != NULL);
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}

/* KT_WRITE_CORPUS=test/fuzz/corpus/peer_frame build/test/peer_test write_fuzz_corpus
 * (re)writes the seeds of test/fuzz/peer_frame_fuzz.c; without the variable
 * this test does nothing. */

struct seed {
  uint8_t b[512];
  size_t n;
};
static void seed_hs(struct seed *s, uint8_t kind, uint8_t code, uint64_t cluster, uint64_t a,
                    uint64_t b) {
  struct kt_peer_hs h = {.kind = kind,
                         .version = KT_PEER_VERSION,
                         .code = code,
                         .cluster_id = cluster,
                         .a = a,
                         .b = b};
  kt_peer_hs_encode(s->b + s->n, &h);
  s->n += KT_PEER_HELLO_BYTES;
}
static void seed_frame(struct seed *s, uint8_t ch, uint32_t len, const char *body) {
  kt_peer_frame_header(s->b + s->n, ch, len);
  s->n += KT_PEER_FRAME_HDR;
  size_t bl = body ? strlen(body) : 0;
  memcpy(s->b + s->n, body, bl);
  s->n += bl;
}
static void seed_write(const char *dir, const char *name, const struct seed *s) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(s->b, 1, s->n, f);
    fclose(f);
  }
}

TEST(write_fuzz_corpus) {
  const char *dir = getenv("KT_WRITE_CORPUS");
  if (!dir)
    return;
  struct seed s = {0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc1, 1, 2);
  seed_write(dir, "hello_raft", &s);
  seed_frame(&s, 0, 3, "abc");
  seed_frame(&s, 0, 5, "hello");
  seed_frame(&s, 1, 4, "snap");
  seed_write(dir, "hello_then_frames", &s);
  s.n -= 2; /* truncated last frame */
  seed_write(dir, "frames_truncated", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 1, 0xc1, 1, 2);
  seed_frame(&s, 1, 0xffffffffu, NULL);
  seed_write(dir, "frame_huge_length", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc1, 1, 2);
  seed_frame(&s, 0, 0, NULL);
  seed_write(dir, "frame_zero_length", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc1, 1, 2);
  seed_frame(&s, 7, 1, "x");
  seed_write(dir, "frame_bad_channel", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc2, 1, 2);
  seed_write(dir, "hello_other_cluster", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc1, 1, 5);
  seed_write(dir, "hello_other_member", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 9, 0xc1, 1, 2);
  seed_write(dir, "hello_bad_channel", &s);
  s.b[4] = 2;
  seed_write(dir, "hello_version2", &s);
  s.b[6] = 1;
  seed_write(dir, "hello_reserved_set", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_HELLO, 0, 0xc1, 1, 2);
  s.n = 20;
  seed_write(dir, "hello_short", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_ACK, KT_PEER_OK, 0xc1, 2, 1);
  seed_write(dir, "ack_ok", &s);
  s = (struct seed){0};
  seed_hs(&s, KT_PEER_ACK, KT_PEER_WRONG_CLUSTER, 0xc2, 2, 1);
  seed_write(dir, "ack_wrong_cluster", &s);
  s = (struct seed){0};
  memcpy(s.b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
  s.n = 27;
  seed_write(dir, "http_request", &s);
  const char *urls[] = {"127.0.0.1:2380", "http://[::1]:2380/", "https://host:0", "host:70000",
                        "[::1]2380"};
  const char *names[] = {"url_plain", "url_v6", "url_https", "url_bad_port", "url_bad_v6"};
  for (size_t i = 0; i < KT_ARRAY_LEN(urls); i++) {
    s.n = strlen(urls[i]);
    memcpy(s.b, urls[i], s.n);
    seed_write(dir, names[i], &s);
  }
}

/* A callback may remove the very member whose message it is handling. */
static struct kt_peer_transport *remove_from;
static int removals;
static void on_message_remove(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  on_message(arg, from, msg, len);
  if (len >= 8 && kt_get_u64be(msg) == 3) {
    CHECK_EQ(kt_peer_remove(remove_from, from), 0);
    removals++;
  }
}

TEST(callback_removes_the_sender) {
  log_reset();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct member a = {.id = 1}, b = {.id = 2};
  struct kt_peer_config ca = config_of(&a, CLUSTER), cb = config_of(&b, CLUSTER);
  cb.on_message = on_message_remove;
  CHECK_EQ(member_start(loop, &a, &ca, 0), 0);
  CHECK_EQ(member_start(loop, &b, &cb, 0), 0);
  remove_from = b.t;
  removals = 0;
  CHECK_EQ(add_peer(&a, 2, b.port), 0);
  CHECK_EQ(add_peer(&b, 1, a.port), 0);
  struct pair ab = {&a, 2};
  CHECK(run_until(loop, connected, &ab, 5));
  /* Ten frames in one write: B removes A at the fourth; the rest of that
   * read is not delivered. */
  for (uint64_t i = 0; i < 10; i++)
    CHECK_EQ(send_seq(&a, 2, i, 0, 32), 0);
  CHECK(run_until(loop, disconnected, &ab, 5));
  CHECK_EQ(removals, 1);
  CHECK_EQ(b.received[1], 4);
  CHECK(!kt_peer_connected(b.t, 1));
  kt_peer_free(a.t);
  kt_peer_free(b.t);
  ev_loop_destroy(loop);
}
