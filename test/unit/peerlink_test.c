/* test/unit/peerlink_test.c — the peer links' façade (net/peerlink.h) with
 * its thread: a threaded link (member 1) and a plain transport (member 2)
 * on 127.0.0.1, both driven from this thread's loop (the link's transport
 * runs on ketch-peer). What is checked is the façade's own accounting: the
 * refusals and on_unreachable once per peer and turn, snapshot room and
 * unsent over the chunks handed, on_snapshot_room, the order of messages
 * both ways, callbacks on the owner's thread, the removed set's copy and the
 * asynchronous JOIN. Bounded by deadlines, no fixed sleeps. */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "../../net/peerlink.h"

#define CLUSTER 0x5eed5eedULL
#define SNAPQ (256u * 1024u)
#define CHUNK (64u * 1024u)
#define NCHUNKS 40
#define NMSGS 2000

struct side {
  struct kt_peer_link *l;      /* member 1 */
  struct kt_peer_transport *t; /* member 2, or 3 for the removed one */
  pthread_t owner;
  bool wrong_thread, out_of_order, snap_bad;
  uint64_t next_seq, received, unreachable_calls, room_calls, removed_calls;
  uint64_t snap_next, snap_chunks;
  uint64_t chunks_handed, refusals;
};

static struct side S;

static void link_on_message(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  struct side *s = arg;
  if (!pthread_equal(pthread_self(), s->owner))
    s->wrong_thread = true;
  if (from != 2 || len < 8 || kt_get_u64be(msg) != s->next_seq)
    s->out_of_order = true;
  s->next_seq++;
  s->received++;
}

static void link_on_unreachable(void *arg, uint64_t id) {
  struct side *s = arg;
  (void)id;
  s->unreachable_calls++;
}

static void pump(struct side *s);
static void link_on_room(void *arg, uint64_t id) {
  struct side *s = arg;
  (void)id;
  if (!pthread_equal(pthread_self(), s->owner))
    s->wrong_thread = true;
  s->room_calls++;
  pump(s);
}

static int link_on_join(void *arg, const uint8_t *req, size_t len, uint64_t *member_id,
                        struct kt_buf *reply) {
  struct side *s = arg;
  if (!pthread_equal(pthread_self(), s->owner))
    s->wrong_thread = true;
  if (len != 14 || memcmp(req, "http://j:2380/", 14) != 0)
    return KT_PEER_NOT_ADDED;
  *member_id = 7;
  kt_buf_append(reply, "members!", 8);
  return KT_PEER_OK;
}

/* member 2: counts in-order messages from 1 (seq u64 BE) and chunks */
static uint64_t t_next_seq, t_received;
static bool t_out_of_order;
static void t_on_message(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  (void)arg;
  if (from != 1 || len < 8 || kt_get_u64be(msg) != t_next_seq)
    t_out_of_order = true;
  t_next_seq++;
  t_received++;
}
static void t_on_snapshot(void *arg, uint64_t from, const uint8_t *chunk, size_t len) {
  struct side *s = arg;
  if (from != 1 || len != CHUNK || kt_get_u64be(chunk) != s->snap_next)
    s->snap_bad = true;
  s->snap_next++;
  s->snap_chunks++;
}
static void t_on_removed(void *arg, uint64_t id) {
  struct side *s = arg;
  if (id == 1)
    s->removed_calls++;
}

/* Hand chunks while the façade takes them. */
static void pump(struct side *s) {
  static uint8_t chunk[CHUNK];
  while (s->chunks_handed < NCHUNKS) {
    kt_put_u64be(chunk, s->chunks_handed);
    size_t room = kt_peer_link_snapshot_room(s->l, 2);
    long long before = kt_peer_link_snapshot_unsent(s->l, 2);
    int rc = kt_peer_link_send_snapshot(s->l, 2, chunk, CHUNK);
    if (rc) {
      if (rc != KT_EBUSY && rc != KT_EUNAVAILABLE)
        s->snap_bad = true;
      if (rc == KT_EBUSY && room >= CHUNK + KT_PEER_FRAME_HDR)
        s->snap_bad = true; /* refused with room */
      s->refusals++;
      return;
    }
    if (room < CHUNK || kt_peer_link_snapshot_unsent(s->l, 2) != before + CHUNK + KT_PEER_FRAME_HDR)
      s->snap_bad = true; /* accepted without room, or not counted */
    s->chunks_handed++;
  }
}

/* ---- the loop ---- */

static bool timed_out;
static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents;
  timed_out = true;
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents;
}

/* A tick every 10 ms: a condition another thread sets (the joiner's done)
 * wakes nothing on this loop, so it is looked at every tick. */
typedef bool (*done_fn)(void);
static bool run_until(struct ev_loop *loop, done_fn done, double secs) {
  ev_timer dl, tick;
  timed_out = false;
  ev_timer_init(&dl, on_deadline, secs, 0);
  ev_timer_start(loop, &dl);
  ev_timer_init(&tick, on_tick, 0.01, 0.01);
  ev_timer_start(loop, &tick);
  while (!done() && !timed_out)
    ev_run(loop, EVRUN_ONCE);
  ev_timer_stop(loop, &tick);
  ev_timer_stop(loop, &dl);
  return done();
}

static bool both_up(void) {
  return kt_peer_link_connected(S.l, 2) && kt_peer_link_snapshot_unsent(S.l, 2) >= 0 &&
         kt_peer_connected(S.t, 1);
}
static bool all_received(void) { return t_received == NMSGS && S.received == NMSGS; }
static bool snapshot_done(void) {
  return S.snap_chunks == NCHUNKS && kt_peer_link_snapshot_unsent(S.l, 2) == 0;
}
static bool removed_seen(void) { return S.removed_calls > 0; }
static bool link_down(void) {
  return !kt_peer_link_connected(S.l, 2) && kt_peer_link_snapshot_unsent(S.l, 2) < 0;
}
static bool status_counts(void) {
  struct kt_peer_status st;
  return kt_peer_link_status(S.l, 2, &st) == 0 && st.msgs_queued >= NMSGS;
}

static struct kt_peer_config link_config(void) {
  struct kt_peer_config c = {.cluster_id = CLUSTER,
                             .member_id = 1,
                             .seed = 7,
                             .max_snapshot_queue_bytes = SNAPQ,
                             .on_message = link_on_message,
                             .on_unreachable = link_on_unreachable,
                             .on_snapshot_room = link_on_room,
                             .on_join = link_on_join,
                             .arg = &S};
  return c;
}

static int url_of(char *url, size_t cap, int port) {
  return snprintf(url, cap, "127.0.0.1:%d", port);
}

static struct kt_peer_config t_config(uint64_t id, kt_peer_id_fn on_removed) {
  struct kt_peer_config c = {.cluster_id = CLUSTER,
                             .member_id = id,
                             .seed = 8,
                             .on_message = t_on_message,
                             .on_snapshot = t_on_snapshot,
                             .on_removed = on_removed,
                             .arg = &S};
  return c;
}

/* Member 1 (the threaded link, listening; lc NULL: link_config()) and
 * member `id`'s plain transport on one new loop; returns the link's port,
 * or -1. */
static int start_pair_with(struct ev_loop *loop, const struct kt_peer_config *lc, uint64_t id,
                           kt_peer_id_fn on_removed) {
  memset(&S, 0, sizeof S);
  S.owner = pthread_self();
  struct kt_peer_config c = lc ? *lc : link_config();
  S.l = kt_peer_link_new(loop, &c, true);
  struct kt_err e = {0};
  if (!kt_peer_link_threaded(S.l) || kt_peer_link_listen(S.l, "127.0.0.1:0", &e))
    return -1;
  struct kt_peer_config tc = t_config(id, on_removed);
  S.t = kt_peer_new(loop, &tc);
  if (kt_peer_listen(S.t, "127.0.0.1:0", &e))
    return -1;
  int port = kt_peer_link_listen_port(S.l);
  return kt_peer_link_start(S.l, &e) ? -1 : port;
}

static int start_pair(struct ev_loop *loop, uint64_t id, kt_peer_id_fn on_removed) {
  return start_pair_with(loop, NULL, id, on_removed);
}

/* Each side adds the other (member 2 at lport's link); both channels up. */
static bool connect_pair(struct ev_loop *loop, int lport) {
  struct kt_err e = {0};
  char url[64];
  url_of(url, sizeof url, kt_peer_listen_port(S.t));
  if (kt_peer_link_add(S.l, 2, url, &e))
    return false;
  url_of(url, sizeof url, lport);
  return kt_peer_add(S.t, 1, url, &e) == 0 && run_until(loop, both_up, 10);
}

TEST(threaded_link_counts_refusals_room_and_keeps_order) {
  t_next_seq = t_received = 0;
  t_out_of_order = false;
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  int lport = start_pair(loop, 2, NULL);
  CHECK(lport > 0);
  struct kt_err e = {0};
  char url[64];
  url_of(url, sizeof url, kt_peer_listen_port(S.t));
  CHECK_EQ(kt_peer_link_add(S.l, 2, url, &e), 0);
  CHECK_EQ(kt_peer_link_add(S.l, 2, url, &e), KT_EINVAL); /* the transport's checks, here */
  CHECK_EQ(kt_peer_link_add(S.l, 1, url, &e), KT_EINVAL);
  CHECK_EQ(kt_peer_link_add(S.l, 3, "nonsense", &e), KT_EINVAL);
  CHECK_EQ(kt_peer_link_update(S.l, 9, url, &e), KT_ENOTFOUND);
  CHECK_EQ(kt_peer_link_remove(S.l, 9), KT_ENOTFOUND);
  /* More messages in one turn than the ring holds (1,024): the rest wait
   * in the façade's FIFO, in order, and go as the thread takes them. */
  for (int i = 0; i < 1500; i++) {
    CHECK_EQ(kt_peer_link_add(S.l, 3, "127.0.0.1:1", &e), 0);
    CHECK_EQ(kt_peer_link_remove(S.l, 3), 0);
  }
  uint64_t ids[4];
  CHECK_EQ(kt_peer_link_ids(S.l, ids, 4), 1);
  CHECK_EQ(ids[0], 2);
  url_of(url, sizeof url, lport);
  CHECK_EQ(kt_peer_add(S.t, 1, url, &e), 0);

  /* Not up yet: refused at once, counted, on_unreachable once this turn. */
  uint8_t m8[8] = {0};
  CHECK_EQ(kt_peer_link_send(S.l, 2, m8, 8), KT_EUNAVAILABLE);
  CHECK_EQ(kt_peer_link_send(S.l, 2, m8, 8), KT_EUNAVAILABLE);
  CHECK_EQ(kt_peer_link_send(S.l, 9, m8, 8), KT_ENOTFOUND);
  CHECK_EQ(kt_peer_link_send(S.l, 2, m8, 0), KT_EINVAL);
  CHECK_EQ(kt_peer_link_snapshot_unsent(S.l, 2), -1);
  CHECK_EQ(kt_peer_link_snapshot_room(S.l, 2), 0);
  ev_run(loop, EVRUN_NOWAIT);
  CHECK_EQ(S.unreachable_calls, 1);
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_link_status(S.l, 2, &st), 0);
  CHECK_EQ(st.msgs_dropped_unreachable, 2);
  char turl[64];
  url_of(turl, sizeof turl, kt_peer_listen_port(S.t));
  CHECK_STR(st.url, turl); /* the state's own */

  CHECK(run_until(loop, both_up, 10));
  CHECK_EQ(kt_peer_link_snapshot_room(S.l, 2), SNAPQ - KT_PEER_FRAME_HDR);

  /* Both ways, in order, the link's callbacks on this thread. */
  uint8_t msg[64];
  memset(msg, 0xab, sizeof msg);
  for (uint64_t i = 0; i < NMSGS; i++) {
    kt_put_u64be(msg, i);
    CHECK_EQ(kt_peer_link_send2(S.l, 2, msg, 8, msg + 8, 8 + i % 48), 0);
    CHECK_EQ(kt_peer_send(S.t, 1, msg, 16), 0);
    if (i % 100 == 99)
      ev_run(loop, EVRUN_NOWAIT);
  }
  CHECK(run_until(loop, all_received, 10));
  CHECK(!t_out_of_order);
  CHECK(!S.out_of_order);
  CHECK(run_until(loop, status_counts, 5)); /* the thread's counters come over */

  /* Snapshot: three chunks fit in the queue before the thread took any;
   * the fourth is refused; room comes back as the thread writes. */
  pump(&S);
  CHECK_EQ(S.chunks_handed, SNAPQ / (CHUNK + KT_PEER_FRAME_HDR));
  CHECK_EQ(S.refusals, 1);
  CHECK_EQ(kt_peer_link_snapshot_unsent(S.l, 2), S.chunks_handed * (CHUNK + KT_PEER_FRAME_HDR));
  CHECK(run_until(loop, snapshot_done, 20));
  CHECK(!S.snap_bad);
  CHECK(S.room_calls >= 1 && S.room_calls <= S.refusals);
  CHECK(!S.wrong_thread);

  kt_peer_free(S.t); /* member 2 goes: the link reports the channels down */
  S.t = NULL;
  uint8_t c1[CHUNK] = {0};
  CHECK(run_until(loop, link_down, 10));
  CHECK_EQ(kt_peer_link_snapshot_unsent(S.l, 2), -1);
  CHECK_EQ(kt_peer_link_send_snapshot(S.l, 2, c1, CHUNK), KT_EUNAVAILABLE);
  CHECK_EQ(kt_peer_link_remove(S.l, 2), 0);
  CHECK_EQ(kt_peer_link_ids(S.l, ids, 4), 0);
  kt_peer_link_free(S.l);
  ev_loop_destroy(loop);
}

/* ---- the removed set's copy, JOIN across the thread ---- */

struct joiner {
  char url[64];
  const char *mine;
  int rc;
  uint64_t cluster, member, acceptor;
  struct kt_buf reply;
  _Atomic bool done;
};

static void *join_main(void *arg) {
  struct joiner *j = arg;
  struct kt_err e = {0};
  j->rc = kt_peer_join(j->url, NULL, j->mine, 5000, &j->cluster, &j->member, &j->acceptor,
                       &j->reply, &e);
  atomic_store(&j->done, true);
  return NULL;
}

static struct joiner *J;
static bool joined(void) { return atomic_load(&J->done); }

static int join_once(struct ev_loop *loop, struct joiner *j, int port, const char *mine) {
  memset(j, 0, sizeof *j);
  url_of(j->url, sizeof j->url, port);
  j->mine = mine;
  atomic_init(&j->done, false);
  J = j;
  pthread_t th;
  if (pthread_create(&th, NULL, join_main, j))
    return -1;
  bool ok = run_until(loop, joined, 10);
  pthread_join(th, NULL);
  return ok ? 0 : -1;
}

TEST(threaded_link_refuses_a_removed_member_and_answers_join) {
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  int lport = start_pair(loop, 3, t_on_removed);
  CHECK(lport > 0);
  struct kt_err e = {0};
  uint64_t removed[] = {5, 3};
  kt_peer_link_set_removed(S.l, removed, 2);
  char url[64];
  url_of(url, sizeof url, lport);
  CHECK_EQ(kt_peer_add(S.t, 1, url, &e), 0);
  CHECK(run_until(loop, removed_seen, 10));
  kt_peer_free(S.t);
  S.t = NULL;

  struct joiner j;
  CHECK_EQ(join_once(loop, &j, lport, "http://j:2380/"), 0);
  CHECK_EQ(j.rc, 0);
  CHECK_EQ(j.cluster, CLUSTER);
  CHECK_EQ(j.member, 7);
  CHECK_EQ(j.acceptor, 1);
  CHECK_BYTES(j.reply.p, j.reply.len, "members!");
  kt_buf_free(&j.reply);
  CHECK_EQ(join_once(loop, &j, lport, "http://other:2380/"), 0);
  CHECK_EQ(j.rc, KT_ENOTFOUND);
  kt_buf_free(&j.reply);
  CHECK(!S.wrong_thread);
  kt_peer_link_free(S.l);
  ev_loop_destroy(loop);
}

/* A finished transfer, its snapshot connection seen down (unsent -1, told
 * once), then back: nothing was handed on the new one, so unsent reads 0,
 * not a second -1 from comparing with the written 0 of the down report. */
static int back_port;
static bool snap_back(void) {
  struct kt_peer_status st;
  return kt_peer_link_status(S.l, 2, &st) == 0 && st.snapshot_connected && st.connected;
}
static bool one_chunk_written(void) {
  return kt_peer_link_snapshot_unsent(S.l, 2) == 0 && S.snap_chunks == 1;
}
TEST(threaded_link_tells_a_loss_once_after_a_snapshot_connection_seen_down) {
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct kt_peer_config lc = link_config();
  lc.backoff_min_ms = 20;
  lc.backoff_max_ms = 50;
  int lport = start_pair_with(loop, &lc, 2, NULL);
  CHECK(lport > 0);
  back_port = kt_peer_listen_port(S.t);
  CHECK(connect_pair(loop, lport));
  static uint8_t chunk[CHUNK];
  kt_put_u64be(chunk, 0);
  CHECK_EQ(kt_peer_link_send_snapshot(S.l, 2, chunk, CHUNK), 0);
  CHECK(run_until(loop, one_chunk_written, 10)); /* all written: a finished transfer */
  kt_peer_free(S.t);
  S.t = NULL;
  CHECK(run_until(loop, link_down, 10));
  CHECK_EQ(kt_peer_link_snapshot_unsent(S.l, 2), -1); /* seen down: told once */
  struct kt_peer_config tc = t_config(2, NULL);
  S.t = kt_peer_new(loop, &tc);
  struct kt_err e = {0};
  char url[64];
  url_of(url, sizeof url, back_port);
  CHECK_EQ(kt_peer_listen(S.t, url, &e), 0);
  url_of(url, sizeof url, lport);
  CHECK_EQ(kt_peer_add(S.t, 1, url, &e), 0);
  CHECK(run_until(loop, snap_back, 10));
  CHECK_EQ(kt_peer_link_snapshot_unsent(S.l, 2), 0); /* nothing handed on the new one */
  kt_peer_free(S.t);
  kt_peer_link_free(S.l);
  ev_loop_destroy(loop);
}

/* The last turn's sends, published just before the link is freed, still go
 * out: the thread takes them from the ring and flushes before it ends. */
#define NLAST 200
static bool last_received(void) { return t_received == NLAST; }
TEST(threaded_link_flushes_the_last_turn_on_free) {
  t_next_seq = t_received = 0;
  t_out_of_order = false;
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  int lport = start_pair(loop, 2, NULL);
  CHECK(lport > 0);
  CHECK(connect_pair(loop, lport));
  uint8_t msg[16] = {0};
  for (uint64_t i = 0; i < NLAST; i++) {
    kt_put_u64be(msg, i);
    CHECK_EQ(kt_peer_link_send(S.l, 2, msg, sizeof msg), 0);
  }
  ev_run(loop, EVRUN_NOWAIT); /* the state's turn ends: the SEND is published */
  kt_peer_link_free(S.l);
  S.l = NULL;
  CHECK(run_until(loop, last_received, 10));
  CHECK(!t_out_of_order);
  kt_peer_free(S.t);
  ev_loop_destroy(loop);
}

/* The SEND bytes the thread has not taken are bounded by max_queue_bytes,
 * all peers together: past it a send is refused (KT_EBUSY, counted), and
 * accepted again once the thread has taken them. */
#define QSMALL 4096u
static bool send_accepted(void) {
  uint8_t m[64] = {0};
  return kt_peer_link_send(S.l, 2, m, sizeof m) == 0;
}
TEST(threaded_link_bounds_the_bytes_the_thread_has_not_taken) {
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct kt_peer_config lc = link_config();
  lc.max_queue_bytes = QSMALL;
  int lport = start_pair_with(loop, &lc, 2, NULL);
  CHECK(lport > 0);
  CHECK(connect_pair(loop, lport));
  uint8_t m[64] = {0};
  size_t accepted = 0;
  int rc;
  while ((rc = kt_peer_link_send(S.l, 2, m, sizeof m)) == 0)
    accepted += KT_PEER_FRAME_HDR + sizeof m;
  CHECK_EQ(rc, KT_EBUSY);
  CHECK(accepted <= QSMALL && accepted + KT_PEER_FRAME_HDR + sizeof m > QSMALL);
  struct kt_peer_status st;
  CHECK_EQ(kt_peer_link_status(S.l, 2, &st), 0);
  CHECK_EQ(st.msgs_dropped_full, 1);
  CHECK(run_until(loop, send_accepted, 10)); /* the thread took them */
  kt_peer_free(S.t);
  kt_peer_link_free(S.l);
  ev_loop_destroy(loop);
}
