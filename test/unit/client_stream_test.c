/* test/unit/client_stream_test.c — libketch's lease and watch machinery
 * against a scripted peer.
 *
 * The peer is a real loopback listener in this process that speaks the
 * native protocol with net/proto's codec: it answers HELLO itself, logs every
 * other request (type, id, the fields tests look at, time) and lets each test
 * answer as it likes — including answers a real server gives only in rare
 * moments (a connection lost in the middle of a fragmented revision, a
 * compaction cancel), so the exactly-once resume logic is checked frame by
 * frame. The client and the peer are pumped in turn by one loop (no thread).
 * The same behaviours against real bin/ketch processes are in
 * test/integration/client_watch_test.py.
 */
#include "../../client/ketch.h"
#include "../../core/base.h"
#include "../../net/proto.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the scripted peer ---- */

struct logged {
  uint8_t type;
  uint64_t id;
  int64_t lease_id, ttl, start_revision, watch_id;
  bool keys;
  char key[32];
  int conn; /* which accepted connection (1, 2, ...) */
  int64_t at_ms;
};

struct peer {
  int lfd, cfd, conns;
  char ep[64];
  struct kt_buf in, out;
  struct kt_arena arena;
  struct logged log[512];
  int n_log;
  void (*on_req)(struct peer *p, const struct logged *q);
};

static struct peer P;

static void peer_start(void (*on_req)(struct peer *, const struct logged *)) {
  signal(SIGPIPE, SIG_IGN);
  kt_buf_free(&P.in);
  kt_buf_free(&P.out);
  kt_arena_free(&P.arena);
  memset(&P, 0, sizeof P);
  P.cfd = -1;
  P.on_req = on_req;
  P.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (P.lfd < 0 || bind(P.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(P.lfd, 8) != 0 ||
      getsockname(P.lfd, (struct sockaddr *)&a, &len) != 0)
    kt_panic(__FILE__, __LINE__, "listener");
  snprintf(P.ep, sizeof P.ep, "127.0.0.1:%d", ntohs(a.sin_port));
}

static void peer_drop_conn(void) {
  if (P.cfd >= 0)
    close(P.cfd);
  P.cfd = -1;
  kt_buf_reset(&P.in);
  kt_buf_reset(&P.out);
}

static void peer_stop(void) {
  peer_drop_conn();
  if (P.lfd >= 0)
    close(P.lfd);
  P.lfd = -1;
  kt_buf_free(&P.in);
  kt_buf_free(&P.out);
  kt_arena_free(&P.arena);
}

static void peer_send(struct kt_resp *r) {
  if (r->type != KT_MSG_HELLO && r->type != KT_MSG_ERROR && !r->header.cluster_id)
    r->header = (struct kt_header){
        .cluster_id = 1, .member_id = 2, .revision = r->header.revision, .raft_term = 3};
  kt_proto_encode_resp(&P.out, r);
}

static void peer_on_frame(const uint8_t *body, uint32_t n) {
  struct kt_req q;
  kt_arena_reset(&P.arena);
  if (kt_proto_decode_req(body, n, &P.arena, &q, NULL) != 0)
    kt_panic(__FILE__, __LINE__, "peer: bad request from the client");
  if (q.type == KT_MSG_HELLO) {
    struct kt_resp h;
    memset(&h, 0, sizeof h);
    h.type = KT_MSG_HELLO;
    h.u.hello.version = KT_PROTO_VERSION;
    h.u.hello.server = (struct kt_bytes){(const uint8_t *)"peer", 4};
    h.u.hello.cluster_id = 1;
    h.u.hello.member_id = 2;
    h.u.hello.max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES;
    peer_send(&h);
    return;
  }
  struct logged l;
  memset(&l, 0, sizeof l);
  l.type = q.type;
  l.id = q.id;
  l.conn = P.conns;
  l.at_ms = mono_ms();
  if (q.type >= KT_MSG_LEASE_GRANT && q.type <= KT_MSG_LEASE_LEASES) {
    l.lease_id = q.u.lease.id;
    l.ttl = q.u.lease.ttl;
    l.keys = q.u.lease.keys;
  } else if (q.type == KT_MSG_WATCH_CREATE) {
    l.start_revision = q.u.watch_create.start_revision;
    snprintf(l.key, sizeof l.key, "%.*s", (int)KT_MIN(q.u.watch_create.key.n, 31),
             (const char *)q.u.watch_create.key.p);
  } else if (q.type == KT_MSG_WATCH_CANCEL) {
    l.watch_id = q.u.watch_cancel.watch_id;
  }
  if (P.n_log < (int)(sizeof P.log / sizeof P.log[0]))
    P.log[P.n_log++] = l;
  if (P.on_req)
    P.on_req(&P, &l);
}

/* One turn: accept, read, answer, write, then one ketch_process(). */
static void pump_once(ketch_client *c, int wait_ms) {
  struct pollfd fds[3] = {
      {P.lfd, POLLIN, 0}, {P.cfd, POLLIN, 0}, {ketch_fd(c), ketch_events(c), 0}};
  int t = ketch_timeout_ms(c);
  if (t < 0 || t > wait_ms)
    t = wait_ms;
  if (P.out.len)
    t = 0;
  poll(fds, 3, t);
  int fd = accept(P.lfd, NULL, NULL);
  if (fd >= 0) {
    peer_drop_conn();
    P.cfd = fd;
    P.conns++;
    fcntl(fd, F_SETFL, O_NONBLOCK);
  }
  if (P.cfd >= 0) {
    for (;;) {
      kt_buf_reserve(&P.in, 65536);
      ssize_t n = recv(P.cfd, P.in.p + P.in.len, P.in.cap - P.in.len, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        peer_drop_conn();
        break;
      }
      if (n < 0)
        break;
      P.in.len += (size_t)n;
    }
    size_t pos = 0;
    const uint8_t *body;
    uint32_t blen;
    size_t used;
    while (P.cfd >= 0 && kt_frame_next(P.in.p + pos, P.in.len - pos, KT_MAX_FRAME_BYTES, &body,
                                       &blen, &used) == 1) {
      pos += used;
      peer_on_frame(body, blen);
    }
    if (P.cfd >= 0)
      kt_buf_consume(&P.in, pos);
  }
  if (P.cfd >= 0 && P.out.len) {
    ssize_t n = send(P.cfd, P.out.p, P.out.len, MSG_NOSIGNAL);
    if (n > 0)
      kt_buf_consume(&P.out, (size_t)n);
  }
  ketch_process(c);
}

static void pump(ketch_client *c, int ms) {
  int64_t end = mono_ms() + ms;
  while (mono_ms() < end)
    pump_once(c, (int)KT_MAX(end - mono_ms(), 1));
}

/* Pumps until *flag becomes true (or 5 s pass). */
static bool pump_until(ketch_client *c, const volatile int *counter, int want) {
  int64_t end = mono_ms() + 5000;
  while (*counter < want && mono_ms() < end)
    pump_once(c, 20);
  return *counter >= want;
}

static int n_logged(uint8_t type) {
  int n = 0;
  for (int i = 0; i < P.n_log; i++)
    n += P.log[i].type == type;
  return n;
}

static const struct logged *last_logged(uint8_t type) {
  for (int i = P.n_log - 1; i >= 0; i--)
    if (P.log[i].type == type)
      return &P.log[i];
  return NULL;
}

static ketch_client *open_peer(int request_timeout_ms) {
  ketch_options o;
  ketch_options_init(&o);
  o.nonblocking_open = true;
  if (request_timeout_ms)
    o.request_timeout_ms = request_timeout_ms;
  ketch_client *c = NULL;
  if (ketch_open(&c, P.ep, &o, NULL, 0) != 0)
    return NULL;
  return c;
}

/* ---- leases: every result kind, and result_dup of it ---- */

static void lease_answer(struct peer *p, const struct logged *q) {
  (void)p;
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = q->type;
  r.id = q->id;
  r.header.revision = 42;
  static struct kt_bytes keys[2] = {{(const uint8_t *)"k1", 2}, {(const uint8_t *)"k22", 3}};
  static int64_t ids[3] = {5, 0x694d5765fc71500bLL, 0x7fffffffffffffffLL};
  switch (q->type) {
  case KT_MSG_LEASE_GRANT:
    r.u.lease.id = q->lease_id ? q->lease_id : 0x694d5765fc71500bLL;
    r.u.lease.ttl = q->ttl;
    break;
  case KT_MSG_LEASE_TTL:
    if (q->lease_id == 99) {
      r.u.lease.id = 99;
      r.u.lease.ttl = -1;
      break;
    }
    r.u.lease.id = q->lease_id;
    r.u.lease.ttl = 7;
    r.u.lease.granted_ttl = 10;
    if (q->keys) {
      r.u.lease.keys = keys;
      r.u.lease.n_keys = 2;
    }
    break;
  case KT_MSG_LEASE_LEASES:
    r.u.lease.leases = ids;
    r.u.lease.n_leases = 3;
    break;
  case KT_MSG_LEASE_REVOKE:
    if (q->lease_id == 99) {
      kt_proto_encode_error(&P.out, q->id, KT_ELEASENOTFOUND, "requested lease not found");
      return;
    }
    break;
  case KT_MSG_LEASE_KEEPALIVE:
    r.u.lease.id = q->lease_id;
    r.u.lease.ttl = 10;
    break;
  }
  peer_send(&r);
}

static ketch_result *lease_res[8];
static int lease_err[8], lease_done;
static void lease_cb(void *arg, int err, const ketch_result *res) {
  int i = (int)(intptr_t)arg;
  lease_err[i] = err;
  lease_res[i] = ketch_result_dup(res);
  lease_done++;
}

TEST(lease_requests_and_results) {
  peer_start(lease_answer);
  ketch_client *c = open_peer(0);
  CHECK(c != NULL);
  lease_done = 0;
  CHECK_EQ(ketch_lease_grant_async(c, 10, 0, lease_cb, (void *)0), 0);
  CHECK_EQ(ketch_lease_timetolive_async(c, 77, true, lease_cb, (void *)1), 0);
  CHECK_EQ(ketch_lease_timetolive_async(c, 99, false, lease_cb, (void *)2), 0);
  CHECK_EQ(ketch_lease_leases_async(c, lease_cb, (void *)3), 0);
  CHECK_EQ(ketch_lease_revoke_async(c, 99, lease_cb, (void *)4), 0);
  CHECK_EQ(ketch_lease_keepalive_once_async(c, 77, lease_cb, (void *)5), 0);
  CHECK_EQ(ketch_lease_grant_async(c, 0, 0, lease_cb, (void *)6), KETCH_EINVAL);
  CHECK(pump_until(c, &lease_done, 6));
  /* what went on the wire */
  CHECK_EQ(last_logged(KT_MSG_LEASE_GRANT)->ttl, 10);
  CHECK_EQ(last_logged(KT_MSG_LEASE_GRANT)->lease_id, 0);
  CHECK_EQ(last_logged(KT_MSG_LEASE_REVOKE)->lease_id, 99);
  CHECK_EQ(n_logged(KT_MSG_LEASE_TTL), 2);
  CHECK(P.log[1].keys && !P.log[2].keys);
  /* the results, kept with ketch_result_dup past their callbacks */
  for (int i = 0; i < 6; i++)
    CHECK(lease_res[i] != NULL);
  CHECK_EQ(lease_res[0]->type, KETCH_OP_LEASE_GRANT);
  CHECK_EQ(lease_res[0]->lease.id, 0x694d5765fc71500bLL);
  CHECK_EQ(lease_res[0]->lease.ttl, 10);
  CHECK_EQ(lease_res[0]->header.revision, 42);
  CHECK_EQ(lease_res[1]->type, KETCH_OP_LEASE_TTL);
  CHECK_EQ(lease_res[1]->lease.ttl, 7);
  CHECK_EQ(lease_res[1]->lease.granted_ttl, 10);
  CHECK_EQ(lease_res[1]->lease.n_keys, 2);
  CHECK_BYTES(lease_res[1]->lease.keys[0].key, lease_res[1]->lease.keys[0].key_len, "k1");
  CHECK_BYTES(lease_res[1]->lease.keys[1].key, lease_res[1]->lease.keys[1].key_len, "k22");
  CHECK_EQ(lease_res[1]->lease.keys[1].value_len, 0);
  CHECK_EQ(lease_res[2]->lease.ttl, -1);
  CHECK_EQ(lease_res[3]->lease.n_leases, 3);
  CHECK_EQ(lease_res[3]->lease.leases[1], 0x694d5765fc71500bLL);
  CHECK_EQ(lease_res[3]->lease.leases[2], INT64_MAX);
  CHECK_EQ(lease_err[4], KETCH_ELEASENOTFOUND);
  CHECK_STR(lease_res[4]->message, "requested lease not found");
  CHECK_EQ(lease_res[5]->type, KETCH_OP_LEASE_KEEPALIVE);
  CHECK_EQ(lease_res[5]->lease.ttl, 10);
  /* a dup of a dup is independent of its source */
  ketch_result *d = ketch_result_dup(lease_res[1]);
  ketch_result_free(lease_res[1]);
  lease_res[1] = NULL;
  CHECK_BYTES(d->lease.keys[1].key, d->lease.keys[1].key_len, "k22");
  ketch_result_free(d);
  for (int i = 0; i < 8; i++) {
    ketch_result_free(lease_res[i]);
    lease_res[i] = NULL;
  }
  ketch_close(c);
  peer_stop();
}

/* ---- keep-alive: ttl/3 rhythm, reconnects, the lease going away ---- */

static int64_t ka_ttl = 1; /* what the peer answers */
static bool ka_silent;     /* the peer does not answer renewals */
static void ka_answer(struct peer *p, const struct logged *q) {
  (void)p;
  if (q->type != KT_MSG_LEASE_KEEPALIVE || ka_silent)
    return;
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = q->type;
  r.id = q->id;
  r.u.lease.id = q->lease_id;
  r.u.lease.ttl = ka_ttl;
  peer_send(&r);
}

static int ka_calls, ka_last_err;
static int64_t ka_last_ttl = -5;
static void ka_user(void *arg, int err, const ketch_result *res) {
  (void)arg;
  ka_calls++;
  ka_last_err = err;
  ka_last_ttl = err ? -5 : res->lease.ttl;
}

TEST(keepalive_renews_every_third_of_the_ttl_across_reconnects) {
  peer_start(ka_answer);
  ka_ttl = 1;
  ka_silent = false;
  ka_calls = 0;
  ketch_client *c = open_peer(0);
  CHECK(c != NULL);
  CHECK_EQ(ketch_lease_keepalive_start(c, 0, ka_user, NULL), KETCH_EINVAL);
  CHECK_EQ(ketch_lease_keepalive_stop(c, 5), KETCH_ENOTFOUND);
  CHECK_EQ(ketch_timeout_ms(c), -1);
  CHECK_EQ(ketch_lease_keepalive_start(c, 5, ka_user, NULL), 0);
  CHECK_EQ(ketch_timeout_ms(c), 0); /* the first renewal is due at once */
  pump(c, 1100);
  /* at once, then every 333 ms: 4 in 1.1 s (3 or 5 on a loaded machine) */
  int n = n_logged(KT_MSG_LEASE_KEEPALIVE);
  CHECK(n >= 3 && n <= 5);
  CHECK_EQ(ka_calls, n);
  CHECK_EQ(ka_last_ttl, 1);
  for (int i = 1, k = 0; i < P.n_log; i++) {
    if (P.log[i].type != KT_MSG_LEASE_KEEPALIVE)
      continue;
    if (k++ > 0)
      CHECK(P.log[i].at_ms - P.log[i - 1].at_ms >= 320);
  }
  /* idle between renewals: the deadline is the next renewal */
  int t = ketch_timeout_ms(c);
  CHECK(t >= 0 && t <= 340);
  CHECK_EQ(ketch_pending(c), 0);
  /* the connection is lost: renewals go on over the next one */
  peer_drop_conn();
  int before = n_logged(KT_MSG_LEASE_KEEPALIVE);
  pump(c, 900);
  CHECK(P.conns >= 2);
  CHECK(n_logged(KT_MSG_LEASE_KEEPALIVE) >= before + 2);
  CHECK_EQ(last_logged(KT_MSG_LEASE_KEEPALIVE)->conn, P.conns);
  /* the lease is gone: one last callback with ttl 0, then no renewal */
  ka_ttl = 0;
  int calls = ka_calls;
  pump(c, 500);
  CHECK_EQ(ka_calls, calls + 1);
  CHECK_EQ(ka_last_ttl, 0);
  CHECK_EQ(ka_last_err, 0);
  before = n_logged(KT_MSG_LEASE_KEEPALIVE);
  pump(c, 800);
  CHECK_EQ(n_logged(KT_MSG_LEASE_KEEPALIVE), before);
  CHECK_EQ(ka_calls, calls + 1);
  CHECK_EQ(ketch_lease_keepalive_stop(c, 5), KETCH_ENOTFOUND);
  CHECK_EQ(ketch_timeout_ms(c), -1);
  ketch_close(c);
  peer_stop();
}

TEST(keepalive_stop_and_giving_up_after_a_ttl_without_answer) {
  peer_start(ka_answer);
  ka_ttl = 1;
  ka_silent = false;
  ka_calls = 0;
  ketch_client *c = open_peer(300);
  CHECK(c != NULL);
  CHECK_EQ(ketch_lease_keepalive_start(c, 6, ka_user, NULL), 0);
  CHECK_EQ(ketch_lease_keepalive_start(c, 7, ka_user, NULL), 0);
  pump(c, 200);
  CHECK_EQ(ka_calls, 2);
  CHECK_EQ(ketch_lease_keepalive_stop(c, 6), 0);
  int calls = ka_calls;
  ka_silent = true; /* renewals time out (300 ms) and are retried */
  pump(c, 1800);
  /* lease 6: nothing after stop; lease 7: one error once a TTL passed */
  int n6 = 0;
  for (int i = 0; i < P.n_log; i++)
    n6 += P.log[i].type == KT_MSG_LEASE_KEEPALIVE && P.log[i].lease_id == 6;
  CHECK_EQ(n6, 1);
  CHECK_EQ(ka_calls, calls + 1);
  CHECK_EQ(ka_last_err, KETCH_ETIMEOUT);
  int before = n_logged(KT_MSG_LEASE_KEEPALIVE);
  pump(c, 700);
  CHECK_EQ(n_logged(KT_MSG_LEASE_KEEPALIVE), before);
  ketch_close(c);
  peer_stop();
}

/* ---- watch ---- */

#define MAX_SEEN 64
struct seen {
  int deliveries, created, canceled, progress, err;
  int64_t compact_rev, progress_rev;
  char events[MAX_SEEN][16]; /* "P key@rev" */
  int n_events;
  ketch_result *kept;  /* a dup of the first event delivery */
  ketch_result *kept2; /* and of the second */
};
static struct seen S;

static void watch_user(void *arg, int err, const ketch_result *res) {
  (void)arg;
  S.deliveries++;
  CHECK_EQ(res->type, KETCH_OP_WATCH);
  if (S.canceled)
    S.err = 999; /* a delivery after the last one */
  if (res->watch.canceled) {
    S.canceled++;
    S.err = err;
    S.compact_rev = res->watch.compact_revision;
    return;
  }
  if (res->watch.created)
    S.created++;
  else if (!res->watch.n_events) {
    S.progress++;
    S.progress_rev = res->header.revision;
  }
  if (res->watch.n_events && S.kept && !S.kept2)
    S.kept2 = ketch_result_dup(res);
  if (res->watch.n_events && !S.kept)
    S.kept = ketch_result_dup(res);
  for (size_t i = 0; i < res->watch.n_events && S.n_events < MAX_SEEN; i++) {
    const ketch_event *e = &res->watch.events[i];
    snprintf(S.events[S.n_events++], 16, "%c %.*s@%lld", e->type == KETCH_EVENT_PUT ? 'P' : 'D',
             (int)e->kv.key_len, e->kv.key, (long long)e->kv.mod_revision);
  }
}

/* The peer's store: events e[i] = key k<i> at revision revs[i]. */
static const int64_t ev_rev[] = {11, 11, 11, 12, 13, 13};
#define N_EV 6
static struct kt_event evs[N_EV];
static char ev_keys[N_EV][4];
static void init_events(void) {
  for (int i = 0; i < N_EV; i++) {
    snprintf(ev_keys[i], sizeof ev_keys[i], "k%d", i);
    memset(&evs[i], 0, sizeof evs[i]);
    evs[i].type = i == 3 ? KT_EVENT_DELETE : KT_EVENT_PUT;
    evs[i].kv.key = (struct kt_bytes){(const uint8_t *)ev_keys[i], 2};
    evs[i].kv.value = (struct kt_bytes){(const uint8_t *)(i == 3 ? "" : "val"), i == 3 ? 0 : 3};
    evs[i].kv.mod_revision = ev_rev[i];
    evs[i].kv.create_revision = ev_rev[i];
    evs[i].kv.version = 1;
    if (i == 4) {
      evs[i].has_prev_kv = true;
      evs[i].prev_kv = evs[0].kv;
    }
  }
}

static uint64_t stream_id; /* the id of the last WATCH_CREATE */
static void send_watch(uint64_t id, int64_t rev, bool created, bool canceled, int64_t compact,
                       int from, int to, bool fragment) {
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_WATCH_CREATE;
  r.id = id;
  r.header.revision = rev;
  r.u.watch.watch_id = 7;
  r.u.watch.created = created;
  r.u.watch.canceled = canceled;
  r.u.watch.compact_revision = compact;
  r.u.watch.fragment = fragment;
  r.u.watch.events = to > from ? &evs[from] : NULL;
  r.u.watch.n_events = to > from ? (uint32_t)(to - from) : 0;
  peer_send(&r);
}

static bool auto_created = true;
static void watch_answer(struct peer *p, const struct logged *q) {
  (void)p;
  if (q->type == KT_MSG_WATCH_CREATE) {
    stream_id = q->id;
    if (auto_created)
      send_watch(q->id, 10, true, false, 0, 0, 0, false);
  } else if (q->type == KT_MSG_WATCH_CANCEL) {
    struct kt_resp r; /* the cancel's own answer, then the stream's last frame */
    memset(&r, 0, sizeof r);
    r.type = KT_MSG_WATCH_CANCEL;
    r.id = q->id;
    peer_send(&r);
    send_watch(stream_id, 10, false, true, 0, 0, 0, false);
  }
}

static void seen_reset(void) {
  ketch_result_free(S.kept);
  ketch_result_free(S.kept2);
  memset(&S, 0, sizeof S);
}

TEST(watch_created_events_progress_cancel) {
  init_events();
  seen_reset();
  auto_created = true;
  peer_start(watch_answer);
  ketch_client *c = open_peer(200); /* a stream has no request deadline */
  CHECK(c != NULL);
  ketch_watch_req wq = {.key = "k", .key_len = 1, .prefix = true, .prev_kv = true};
  uint64_t h = 0;
  CHECK_EQ(ketch_watch(c, &wq, watch_user, NULL, &h), 0);
  CHECK(h > 0);
  CHECK_EQ(ketch_pending(c), 0);
  CHECK(pump_until(c, &S.created, 1));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 0);
  CHECK_STR(last_logged(KT_MSG_WATCH_CREATE)->key, "k");
  pump(c, 500); /* longer than request_timeout_ms: the watch lives on */
  send_watch(stream_id, 11, false, false, 0, 0, 3, false);
  send_watch(stream_id, 13, false, false, 0, 3, 5, false);
  send_watch(stream_id, 15, false, false, 0, 0, 0, false); /* progress */
  CHECK(pump_until(c, &S.progress, 1));
  CHECK_EQ(S.n_events, 5);
  CHECK_STR(S.events[0], "P k0@11");
  CHECK_STR(S.events[3], "D k3@12");
  CHECK_STR(S.events[4], "P k4@13");
  CHECK_EQ(S.progress_rev, 15);
  /* the kept (dup'ed) delivery outlives the input buffer */
  CHECK(S.kept && S.kept->watch.n_events == 3);
  CHECK_EQ(S.kept->watch.watch_id, (int64_t)h);
  CHECK_BYTES(S.kept->watch.events[2].kv.key, S.kept->watch.events[2].kv.key_len, "k2");
  CHECK_BYTES(S.kept->watch.events[2].kv.value, S.kept->watch.events[2].kv.value_len, "val");
  CHECK(S.kept->watch.events[0].prev_kv == NULL);
  CHECK(S.kept2 && S.kept2->watch.n_events == 2);
  CHECK_EQ(S.kept2->watch.events[0].type, KETCH_EVENT_DELETE);
  const ketch_kv *pk = S.kept2->watch.events[1].prev_kv;
  CHECK(pk != NULL);
  CHECK_BYTES(pk->key, pk->key_len, "k0");
  CHECK_BYTES(pk->value, pk->value_len, "val");
  CHECK_EQ(pk->mod_revision, 11);
  ketch_result *d = ketch_result_dup(S.kept2); /* a dup of a dup */
  ketch_result_free(S.kept2);
  S.kept2 = d;
  CHECK_BYTES(d->watch.events[1].prev_kv->key, d->watch.events[1].prev_kv->key_len, "k0");
  ketch_watch_progress(c);
  CHECK(pump_until(c, &P.n_log, 2));
  CHECK_EQ(last_logged(KT_MSG_WATCH_PROGRESS)->type, KT_MSG_WATCH_PROGRESS);
  /* cancel: WATCH_CANCEL with the server's watch_id; canceled is the last */
  CHECK_EQ(ketch_watch_cancel(c, h + 100), KETCH_ENOTFOUND);
  CHECK_EQ(ketch_watch_cancel(c, h), 0);
  CHECK_EQ(S.canceled, 0); /* never from inside the call */
  CHECK(pump_until(c, &S.canceled, 1));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CANCEL)->watch_id, 7);
  CHECK_EQ(S.err, 0);
  send_watch(stream_id, 16, false, false, 0, 5, 6, false); /* late: dropped */
  pump(c, 100);
  CHECK_EQ(S.n_events, 5);
  CHECK_EQ(S.created, 1);
  CHECK_EQ(S.canceled, 1);
  CHECK_EQ(ketch_watch_cancel(c, h), KETCH_ENOTFOUND);
  CHECK_EQ(ketch_timeout_ms(c), -1);
  ketch_close(c);
  peer_stop();
  seen_reset();
}

/* The connection dies in the middle of revision 11 (fragmented): the watch
 * is opened again from 11, the peer replays 11 whole, and the client drops
 * the two events it had delivered. Then it dies after a whole revision: the
 * next stream starts after it. created is delivered once. */
TEST(watch_resumes_exactly_once_across_reconnects) {
  init_events();
  seen_reset();
  auto_created = true;
  peer_start(watch_answer);
  ketch_client *c = open_peer(0);
  CHECK(c != NULL);
  ketch_watch_req wq = {.key = "k", .key_len = 1, .prefix = true, .fragment = true};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, watch_user, NULL, &h), 0);
  CHECK(pump_until(c, &S.created, 1));
  send_watch(stream_id, 11, false, false, 0, 0, 2, true); /* k0, k1 of rev 11; more follow */
  CHECK(pump_until(c, &S.n_events, 2));
  peer_drop_conn();
  CHECK(pump_until(c, &P.conns, 2));
  CHECK(pump_until(c, &P.n_log, 2));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 11);
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->conn, 2);
  send_watch(stream_id, 12, false, false, 0, 0, 4, false); /* 11 whole, and 12 */
  CHECK(pump_until(c, &S.n_events, 4));
  pump(c, 50);
  CHECK_EQ(S.n_events, 4);
  CHECK_STR(S.events[2], "P k2@11");
  CHECK_STR(S.events[3], "D k3@12");
  /* lost after a whole revision: resume from 13 */
  peer_drop_conn();
  CHECK(pump_until(c, &P.conns, 3));
  CHECK(pump_until(c, &P.n_log, 3));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 13);
  /* a server that sends an old revision again anyway: still nothing twice */
  send_watch(stream_id, 13, false, false, 0, 2, 6, false);
  CHECK(pump_until(c, &S.n_events, 6));
  pump(c, 50);
  CHECK_EQ(S.n_events, 6);
  CHECK_STR(S.events[4], "P k4@13");
  CHECK_STR(S.events[5], "P k5@13");
  /* progress moves the resume point */
  send_watch(stream_id, 20, false, false, 0, 0, 0, false);
  CHECK(pump_until(c, &S.progress, 1));
  peer_drop_conn();
  CHECK(pump_until(c, &P.conns, 4));
  CHECK(pump_until(c, &P.n_log, 4));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 21);
  CHECK_EQ(S.created, 1);
  CHECK_EQ(S.canceled, 0);
  ketch_close(c); /* close ends the watch: ECANCELED */
  CHECK_EQ(S.canceled, 1);
  CHECK_EQ(S.err, KETCH_ECANCELED);
  peer_stop();
  seen_reset();
}

TEST(watch_resume_of_a_watch_from_now_starts_after_created) {
  seen_reset();
  auto_created = true;
  peer_start(watch_answer);
  ketch_client *c = open_peer(0);
  CHECK(c != NULL);
  ketch_watch_req wq = {.key = "x", .key_len = 1};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, watch_user, NULL, &h), 0);
  CHECK(pump_until(c, &S.created, 1)); /* created at revision 10 */
  peer_drop_conn();
  CHECK(pump_until(c, &P.n_log, 2));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 11);
  CHECK_EQ(S.created, 1);
  /* a cancel while the stream is being opened again: sent once created */
  auto_created = false;
  peer_drop_conn();
  CHECK(pump_until(c, &P.n_log, 3));
  CHECK_EQ(ketch_watch_cancel(c, h), 0);
  pump(c, 50);
  CHECK_EQ(n_logged(KT_MSG_WATCH_CANCEL), 0);
  send_watch(stream_id, 10, true, false, 0, 0, 0, false);
  CHECK(pump_until(c, &S.canceled, 1));
  CHECK_EQ(n_logged(KT_MSG_WATCH_CANCEL), 1);
  CHECK_EQ(S.created, 1);
  CHECK_EQ(S.err, 0);
  ketch_close(c);
  CHECK_EQ(S.canceled, 1);
  CHECK(S.err != 999);
  peer_stop();
  seen_reset();
}

static void compact_answer(struct peer *p, const struct logged *q) {
  (void)p;
  if (q->type == KT_MSG_WATCH_CREATE && !strcmp(q->key, "old")) {
    send_watch(q->id, 30, true, false, 0, 0, 0, false);
    send_watch(q->id, 30, false, true, 8, 0, 0, false);
  } else if (q->type == KT_MSG_WATCH_CREATE) {
    kt_proto_encode_error(&P.out, q->id, KT_EINVAL, "bad range");
  }
}

TEST(watch_compacted_and_refused_end_with_an_error) {
  seen_reset();
  peer_start(compact_answer);
  ketch_client *c = open_peer(0);
  CHECK(c != NULL);
  ketch_watch_req wq = {.key = "old", .key_len = 3, .start_revision = 2};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, watch_user, NULL, &h), 0);
  CHECK(pump_until(c, &S.canceled, 1));
  CHECK_EQ(last_logged(KT_MSG_WATCH_CREATE)->start_revision, 2);
  CHECK_EQ(S.err, KETCH_ECOMPACTED);
  CHECK_EQ(S.compact_rev, 8);
  seen_reset();
  ketch_watch_req bad = {.key = "b", .key_len = 1};
  CHECK_EQ(ketch_watch(c, &bad, watch_user, NULL, &h), 0);
  CHECK(pump_until(c, &S.canceled, 1));
  CHECK_EQ(S.err, KETCH_EINVAL);
  CHECK_EQ(S.created, 0);
  /* refused at submit */
  ketch_watch_req neg = {.key = "b", .key_len = 1, .start_revision = -1};
  CHECK_EQ(ketch_watch(c, &neg, watch_user, NULL, &h), KETCH_EINVAL);
  ketch_watch_req both = {
      .key = "b", .key_len = 1, .prefix = true, .range_end = "c", .range_end_len = 1};
  CHECK_EQ(ketch_watch(c, &both, watch_user, NULL, &h), KETCH_EINVAL);
  CHECK_EQ(ketch_watch(c, &wq, NULL, NULL, &h), KETCH_EINVAL);
  ketch_close(c);
  peer_stop();
  seen_reset();
}

TEST(watch_without_a_server_reconnects_and_cancel_is_deferred) {
  seen_reset();
  peer_start(watch_answer);
  close(P.lfd); /* nothing listens: the handle keeps trying (backoff) */
  P.lfd = -1;
  ketch_options o;
  ketch_options_init(&o);
  o.nonblocking_open = true;
  ketch_client *c = NULL;
  CHECK_EQ(ketch_open(&c, P.ep, &o, NULL, 0), 0);
  ketch_watch_req wq = {.key = "x", .key_len = 1};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, watch_user, NULL, &h), 0);
  for (int i = 0; i < 20; i++) {
    int t = ketch_timeout_ms(c);
    CHECK(t >= 0 && t <= 2100); /* a dial or reconnect deadline, never "no deadline" */
    poll(NULL, 0, KT_MIN(t, 50));
    ketch_process(c);
  }
  CHECK_EQ(S.deliveries, 0);
  CHECK_EQ(ketch_watch_cancel(c, h), 0);
  CHECK_EQ(S.canceled, 0);
  CHECK_EQ(ketch_timeout_ms(c), 0);
  ketch_process(c);
  CHECK_EQ(S.canceled, 1);
  CHECK_EQ(S.err, 0);
  ketch_close(c);
  peer_stop();
  seen_reset();
}
