/* net/peerlink.c — the peer links' façade and the `ketch-peer` thread
 * (net/peerlink.h; the design is net/THREADS.md, "Peer links").
 *
 * Who owns what: the state thread owns struct kt_peer_link's state side
 * (the peer list and its mirrors, the open SEND message, the overflow FIFO
 * `sbox`); the peer thread owns struct pthr (the transport, its loop, its
 * per-peer records, the removed set's copy, the open IN message, `obox`).
 * Messages belong to their producer until pushed and to their consumer
 * after; the consumer frees them. Shared: the two rings, their ev_asyncs,
 * and five atomics (quit, the two wants_room flags, in_bytes, out_bytes).
 */
#include "peerlink.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spsc.h"

#define RING_CAP 1024
#define STATUS_S 0.1
#define SEND_BLOCK (16u * 1024u)
/* Received bytes the state thread has not taken yet, at most (a peer's
 * queue bound plus one largest frame): past it the thread drops (and logs)
 * what arrives; Raft retransmits, a snapshot transfer starts over. */
#define IN_MAX_BYTES ((size_t)KT_PEER_QUEUE_BYTES + KT_PEER_MAX_FRAME_BYTES)

enum {
  /* state → peer */
  M_SEND,       /* b: records to u64 | len u32 | bytes; a: bytes counted in out_bytes */
  M_SNAP,       /* id, a: the snapshot connection (epoch) it is for; b: the chunk */
  M_ADD,        /* id, a: its generation; b: the url, NUL-terminated */
  M_UPDATE,     /* id; b: the url */
  M_REMOVE,     /* id */
  M_REMOVED,    /* b: u64 ids, the whole removed set */
  M_JOIN_REPLY, /* a: token; status; id: the joiner's member id; b: the reply */
  /* peer → state */
  M_IN,          /* b: records from u64 | channel u8 | len u32 | bytes; a: bytes counted */
  M_STATE,       /* b: struct lstate[] */
  M_UNREACHABLE, /* b: u64 ids */
  M_PEER_REMOVED,
  M_JOIN,   /* a: token; b: the request */
  M_STATUS, /* b: struct kt_peer_status[] */
};

struct lmsg {
  uint8_t type;
  int status;
  uint64_t id, a;
  struct lmsg *next;
  struct kt_buf b;
};

/* A channel report: the peer (id, and gen: which ADD of that id), raft up,
 * the snapshot connection (epoch: unique per connection; 0 none yet),
 * whether it is up and what it wrote of the chunks handed on it (frame
 * bytes). */
struct lstate {
  uint64_t id, gen, epoch, written;
  bool raft_up, snap_up;
};

/* The state side's peer. */
struct lpeer {
  uint64_t id;
  char url[KT_PEER_URL_MAX];
  struct lstate s;  /* the mirror: last report */
  uint64_t handed;  /* snapshot frame bytes handed on connection s.epoch */
  bool unreachable; /* on_unreachable due at the end of the turn */
  bool room_wanted; /* a chunk of room_needed bytes was refused */
  bool lost;        /* chunks handed on a connection that went: unsent -1 until seen */
  size_t room_needed;
  uint64_t refused_down, refused_full;
  bool have_st;
  struct kt_peer_status st; /* the thread's last copy */
};

/* The thread's peer. */
struct tpeer {
  uint64_t id, snap_ups, queued;  /* queued: frame bytes accepted on connection s.epoch */
  uint64_t in_dropped, snap_lost; /* received and dropped; chunk bytes of a gone connection */
  struct lstate s, sent;          /* now; last reported */
  bool reported;
};

struct pthr {
  struct kt_peer_link *l;
  struct ev_loop *loop;
  struct kt_peer_transport *t;
  ev_async wake;
  ev_prepare prepare_w;
  ev_idle kick_w;
  ev_timer status_w;
  struct lmsg *in;            /* open IN message */
  struct lmsg *obox, *obox_t; /* waiting for room in to_state */
  uint64_t *unreach;
  size_t n_unreach, cap_unreach;
  struct tpeer *v;
  size_t n, cap;
  uint64_t *removed;
  size_t n_removed;
  uint64_t epoch_seq;
  struct kt_buf last_status;
  uint64_t in_dropped;
};

struct kt_peer_link {
  struct ev_loop *loop;
  struct kt_peer_config cfg; /* defaults resolved */
  struct kt_peer_transport *direct;
  /* threaded */
  struct lpeer *v;
  size_t n, cap;
  struct lmsg *batch;         /* open SEND */
  struct lmsg *sbox, *sbox_t; /* waiting for room in to_peer */
  struct kt_spsc to_peer, to_state;
  ev_async wake;
  ev_prepare prepare_w;
  _Atomic bool quit, state_wants_room, peer_wants_room;
  _Atomic size_t in_bytes;  /* IN bytes the state thread has not taken */
  _Atomic size_t out_bytes; /* SEND frame bytes the peer thread has not taken */
  bool started;
  uint64_t gen_seq; /* peers added */
  pthread_t th;
  struct pthr thr;
};

static struct lmsg *msg_new(uint8_t type, uint64_t id) {
  struct lmsg *m = calloc(1, sizeof *m);
  kt_assert(m);
  m->type = type;
  m->id = id;
  return m;
}

static void msg_free(struct lmsg *m) {
  kt_buf_free(&m->b);
  free(m);
}

static void fifo_free(struct lmsg **h, struct lmsg **t) {
  while (*h) {
    struct lmsg *m = *h;
    *h = m->next;
    msg_free(m);
  }
  *t = NULL;
}

/* Push the FIFO's messages, then `m` (may be NULL), into q while it has
 * room; the rest wait in the FIFO in order. Returns whether any was pushed. */
static bool ring_feed(struct kt_spsc *q, struct lmsg **h, struct lmsg **t, struct lmsg *m) {
  if (m)
    KT_FIFO_PUSH(*h, *t, m);
  struct lmsg *first = *h;
  KT_FIFO_FEED(q, *h, *t);
  return *h != first;
}

/* ==== the peer thread ==== */

static struct tpeer *tpeer_find(struct pthr *p, uint64_t id) {
  for (size_t i = 0; i < p->n; i++)
    if (p->v[i].id == id)
      return &p->v[i];
  return NULL;
}

/* The transport's view of one peer now; a new snapshot connection is a new
 * epoch (its counts start at 0). */
static void tpeer_refresh(struct pthr *p, struct tpeer *tp) {
  struct kt_peer_status st;
  if (kt_peer_status(p->t, tp->id, &st))
    return;
  tp->s.raft_up = st.connected;
  tp->s.snap_up = st.snapshot_connected;
  if (st.snapshot_connected && st.snap_ups != tp->snap_ups) {
    tp->snap_ups = st.snap_ups;
    tp->s.epoch = ++p->epoch_seq;
    tp->queued = 0;
  }
  long long unsent = kt_peer_snapshot_unsent(p->t, tp->id);
  if (unsent >= 0) /* down: keep what it wrote; the state side compares at the next epoch */
    tp->s.written = (uint64_t)unsent <= tp->queued ? tp->queued - (uint64_t)unsent : 0;
}

static bool lstate_eq(const struct lstate *a, const struct lstate *b) {
  return a->id == b->id && a->gen == b->gen && a->epoch == b->epoch && a->written == b->written &&
         a->raft_up == b->raft_up && a->snap_up == b->snap_up;
}

static void thr_kick(struct pthr *p) {
  if (!ev_is_active(&p->kick_w))
    ev_idle_start(p->loop, &p->kick_w);
}

static void thr_queue(struct pthr *p, struct lmsg *m) {
  if (p->in) { /* received frames first: order */
    struct lmsg *in = p->in;
    p->in = NULL;
    thr_queue(p, in);
  }
  KT_FIFO_PUSH(p->obox, p->obox_t, m);
  thr_kick(p);
}

static void thr_received(struct pthr *p, uint64_t from, uint8_t ch, const uint8_t *msg,
                         size_t len) {
  struct kt_peer_link *l = p->l;
  size_t rec = 13 + len;
  if (atomic_load_explicit(&l->in_bytes, memory_order_relaxed) + rec > IN_MAX_BYTES) {
    struct tpeer *tp = tpeer_find(p, from);
    if (tp)
      tp->in_dropped++; /* status: msgs_dropped_received */
    if (p->in_dropped++ % 1000 == 0)
      kt_log(KT_LOG_WARN, "peer",
             "state thread behind: dropped a message from %llx (%llu dropped so far)",
             (unsigned long long)from, (unsigned long long)p->in_dropped);
    return;
  }
  atomic_fetch_add_explicit(&l->in_bytes, rec, memory_order_relaxed);
  if (!p->in)
    p->in = msg_new(M_IN, 0);
  struct kt_buf *b = &p->in->b;
  kt_buf_reserve(b, rec);
  memcpy(b->p + b->len, &from, 8);
  b->p[b->len + 8] = ch;
  uint32_t l32 = (uint32_t)len;
  memcpy(b->p + b->len + 9, &l32, 4);
  memcpy(b->p + b->len + 13, msg, len);
  b->len += rec;
  p->in->a += rec;
}

static void thr_on_message(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  thr_received(arg, from, KT_PEER_CH_RAFT, msg, len);
}

static void thr_on_snapshot(void *arg, uint64_t from, const uint8_t *msg, size_t len) {
  thr_received(arg, from, KT_PEER_CH_SNAPSHOT, msg, len);
}

static void thr_on_unreachable(void *arg, uint64_t id) {
  struct pthr *p = arg;
  for (size_t i = 0; i < p->n_unreach; i++)
    if (p->unreach[i] == id)
      return;
  if (p->n_unreach == p->cap_unreach) {
    p->cap_unreach = p->cap_unreach ? 2 * p->cap_unreach : 8;
    p->unreach = realloc(p->unreach, p->cap_unreach * sizeof *p->unreach);
    kt_assert(p->unreach);
  }
  p->unreach[p->n_unreach++] = id;
  thr_kick(p); /* the transport calls it from its prepare: published next turn */
}

static void thr_on_removed(void *arg, uint64_t id) { thr_queue(arg, msg_new(M_PEER_REMOVED, id)); }

static bool thr_is_removed(void *arg, uint64_t id) {
  struct pthr *p = arg;
  for (size_t i = 0; i < p->n_removed; i++)
    if (p->removed[i] == id)
      return true;
  return false;
}

static void thr_on_join(void *arg, uint64_t token, const uint8_t *req, size_t len) {
  struct lmsg *m = msg_new(M_JOIN, 0);
  m->a = token;
  kt_buf_append(&m->b, req, len);
  thr_queue(arg, m);
}

static void thr_send(struct pthr *p, const struct lmsg *m) {
  atomic_fetch_sub_explicit(&p->l->out_bytes, m->a, memory_order_relaxed);
  for (size_t off = 0; off < m->b.len;) {
    uint64_t to;
    uint32_t len;
    memcpy(&to, m->b.p + off, 8);
    memcpy(&len, m->b.p + off + 8, 4);
    (void)kt_peer_send(p->t, to, m->b.p + off + 12, len); /* a drop: counted, on_unreachable */
    off += 12 + (size_t)len;
  }
}

static void thr_snap(struct pthr *p, const struct lmsg *m) {
  struct tpeer *tp = tpeer_find(p, m->id);
  if (!tp)
    return;
  tpeer_refresh(p, tp);
  if (!tp->s.snap_up || tp->s.epoch != m->a) {
    /* handed on a connection that is gone: the state side sees it lost */
    tp->snap_lost += KT_PEER_FRAME_HDR + m->b.len; /* status: bytes_lost */
    return;
  }
  int rc = kt_peer_send_snapshot(p->t, m->id, m->b.p, m->b.len);
  if (rc == 0)
    tp->queued += KT_PEER_FRAME_HDR + m->b.len;
  else /* the state side's accounting keeps within the queue: not expected */
    kt_log(KT_LOG_WARN, "peer", "peer %llx: snapshot chunk dropped: %s", (unsigned long long)m->id,
           kt_strerror(rc));
}

static void thr_member(struct pthr *p, const struct lmsg *m) {
  struct kt_err e = {0};
  const char *url = (const char *)m->b.p;
  if (m->type == M_ADD) {
    if (kt_peer_add(p->t, m->id, url, &e)) {
      kt_log(KT_LOG_WARN, "peer", "peer %llx: %s", (unsigned long long)m->id, e.msg);
      return;
    }
    if (p->n == p->cap) {
      p->cap = p->cap ? 2 * p->cap : 8;
      p->v = realloc(p->v, p->cap * sizeof *p->v);
      kt_assert(p->v);
    }
    struct lstate s0 = {.id = m->id, .gen = m->a};
    p->v[p->n++] = (struct tpeer){.id = m->id, .s = s0, .sent = s0};
  } else if (m->type == M_UPDATE) {
    if (kt_peer_update(p->t, m->id, url, &e))
      kt_log(KT_LOG_WARN, "peer", "peer %llx: %s", (unsigned long long)m->id, e.msg);
  } else {
    kt_peer_remove(p->t, m->id);
    struct tpeer *tp = tpeer_find(p, m->id);
    if (tp)
      *tp = p->v[--p->n];
  }
}

static void thr_from_state(void *arg, struct lmsg *m) {
  struct pthr *p = arg;
  switch (m->type) {
  case M_SEND:
    thr_send(p, m);
    break;
  case M_SNAP:
    thr_snap(p, m);
    break;
  case M_ADD:
  case M_UPDATE:
  case M_REMOVE:
    thr_member(p, m);
    break;
  case M_REMOVED:
    free(p->removed);
    p->removed = NULL;
    p->n_removed = m->b.len / 8;
    if (p->n_removed) {
      p->removed = malloc(m->b.len);
      kt_assert(p->removed);
      memcpy(p->removed, m->b.p, m->b.len);
    }
    break;
  case M_JOIN_REPLY:
    if (kt_peer_join_answer(p->t, m->a, m->status, m->id, m->b.p, m->b.len))
      kt_log(KT_LOG_INFO, "peer", "join answer dropped: the joiner's connection is gone");
    break;
  }
  msg_free(m);
}

/* The consumer's side of a ring: every published message to fn, the slots
 * back, and the producer woken if it waits for room (its overflow FIFO). */
static void ring_drain(struct kt_spsc *q, void (*fn)(void *, struct lmsg *), void *arg,
                       _Atomic bool *wants_room, struct ev_loop *loop, ev_async *w) {
  struct lmsg *m;
  bool any = false;
  while ((m = kt_spsc_pop(q))) {
    fn(arg, m);
    any = true;
  }
  if (!any)
    return;
  kt_spsc_release(q);
  /* Dekker with the producer (its flag store, fence, push retry): either it
   * sees the slots given back or this sees its flag; without the fence both
   * could read the old values, and the producer wait for another wake-up. */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(wants_room, memory_order_relaxed) && atomic_exchange(wants_room, false))
    ev_async_send(loop, w);
}

static void thr_drain(struct pthr *p) {
  struct kt_peer_link *l = p->l;
  ring_drain(&l->to_peer, thr_from_state, p, &l->state_wants_room, l->loop, &l->wake);
}

static void thr_on_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)revents;
  struct pthr *p = w->data;
  if (atomic_load(&p->l->quit)) {
    /* What the state thread published before it quit (its last turn's
     * SEND, a forwarded request's reply) goes to the transport and one more
     * turn flushes it, as the transport's prepare would have on the state
     * thread; what the sockets do not take now is lost with them. */
    thr_drain(p);
    ev_run(loop, EVRUN_NOWAIT);
    ev_break(loop, EVBREAK_ALL);
    return;
  }
  thr_drain(p);
}

static void thr_on_idle(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)revents;
  ev_idle_stop(loop, w); /* its only job: another turn, whose prepare publishes */
}

static void thr_on_status(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)revents;
  struct pthr *p = w->data;
  uint64_t ids[256];
  size_t n = kt_peer_ids(p->t, ids, KT_ARRAY_LEN(ids));
  n = KT_MIN(n, KT_ARRAY_LEN(ids));
  struct lmsg *m = msg_new(M_STATUS, 0);
  kt_buf_reserve(&m->b, n * sizeof(struct kt_peer_status) + 1);
  for (size_t i = 0; i < n; i++) {
    struct kt_peer_status st;
    memset(&st, 0, sizeof st);
    if (kt_peer_status(p->t, ids[i], &st))
      continue;
    const struct tpeer *tp = tpeer_find(p, ids[i]);
    if (tp) { /* the thread's own drops */
      st.msgs_dropped_received += tp->in_dropped;
      st.bytes_lost += tp->snap_lost;
    }
    kt_buf_append(&m->b, &st, sizeof st);
  }
  if (m->b.len == p->last_status.len && memcmp(m->b.p, p->last_status.p, m->b.len) == 0) {
    msg_free(m);
    return;
  }
  kt_buf_reset(&p->last_status);
  kt_buf_append(&p->last_status, m->b.p, m->b.len);
  thr_queue(p, m);
}

/* End of the thread's turn (after the transport's own prepare: see
 * kt_peer_link_new): channel reports, drops, then one publish. */
static void thr_on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop, (void)revents;
  struct pthr *p = w->data;
  struct kt_peer_link *l = p->l;
  struct lmsg *st = NULL;
  for (size_t i = 0; i < p->n; i++) {
    struct tpeer *tp = &p->v[i];
    tpeer_refresh(p, tp);
    if (tp->reported && lstate_eq(&tp->s, &tp->sent))
      continue;
    tp->sent = tp->s;
    tp->reported = true;
    if (!st)
      st = msg_new(M_STATE, 0);
    kt_buf_append(&st->b, &tp->s, sizeof tp->s);
  }
  if (st)
    thr_queue(p, st);
  if (p->n_unreach) {
    struct lmsg *u = msg_new(M_UNREACHABLE, 0);
    kt_buf_append(&u->b, p->unreach, p->n_unreach * 8);
    p->n_unreach = 0;
    thr_queue(p, u);
  }
  if (p->in) {
    KT_FIFO_PUSH(p->obox, p->obox_t, p->in);
    p->in = NULL;
  }
  if (ev_is_active(&p->kick_w))
    ev_idle_stop(p->loop, &p->kick_w);
  bool any = ring_feed(&l->to_state, &p->obox, &p->obox_t, NULL);
  if (p->obox) { /* the ring is full: the state thread wakes us when it took some */
    atomic_store(&l->peer_wants_room, true);
    atomic_thread_fence(memory_order_seq_cst); /* then the retry's load of head: ring_drain */
    any |= ring_feed(&l->to_state, &p->obox, &p->obox_t, NULL); /* it may have, meanwhile */
  }
  if (any && kt_spsc_publish(&l->to_state))
    ev_async_send(l->loop, &l->wake);
}

static void *thr_main(void *arg) {
  struct pthr *p = arg;
  pthread_setname_np(pthread_self(), "ketch-peer");
  thr_drain(p); /* what the state queued before the thread ran */
  ev_run(p->loop, 0);
  return NULL;
}

/* The thread's side, once it is gone (or never ran). */
static void thr_free(struct pthr *p) {
  kt_peer_free(p->t);
  ev_async_stop(p->loop, &p->wake);
  ev_prepare_stop(p->loop, &p->prepare_w);
  ev_idle_stop(p->loop, &p->kick_w);
  ev_timer_stop(p->loop, &p->status_w);
  if (p->in)
    msg_free(p->in);
  fifo_free(&p->obox, &p->obox_t);
  free(p->unreach);
  free(p->v);
  free(p->removed);
  kt_buf_free(&p->last_status);
  ev_loop_destroy(p->loop);
}

/* ==== the state side ==== */

static struct lpeer *lpeer_find(const struct kt_peer_link *l, uint64_t id) {
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].id == id)
      return &l->v[i];
  return NULL;
}

static long long lp_unsent(const struct lpeer *lp) {
  if (!lp->s.snap_up || lp->lost)
    return -1;
  return lp->handed > lp->s.written ? (long long)(lp->handed - lp->s.written) : 0;
}

/* The SEND being filled goes before anything newer. */
static void batch_close(struct kt_peer_link *l) {
  if (!l->batch)
    return;
  KT_FIFO_PUSH(l->sbox, l->sbox_t, l->batch);
  l->batch = NULL;
}

static void state_queue(struct kt_peer_link *l, struct lmsg *m) {
  batch_close(l);
  KT_FIFO_PUSH(l->sbox, l->sbox_t, m);
}

static void state_report(struct kt_peer_link *l, const struct lstate *s) {
  struct lpeer *lp = lpeer_find(l, s->id);
  if (!lp || s->gen != lp->s.gen)
    return;                      /* removed meanwhile, or about a removed peer of the same id */
  if (s->epoch != lp->s.epoch) { /* a new connection: what was handed on the old one is lost */
    lp->lost |= lp->handed > lp->s.written;
    lp->handed = 0;
  }
  lp->s = *s;
}

static void state_status(struct kt_peer_link *l, const struct lmsg *m) {
  for (size_t off = 0; off + sizeof(struct kt_peer_status) <= m->b.len;
       off += sizeof(struct kt_peer_status)) {
    struct kt_peer_status st;
    memcpy(&st, m->b.p + off, sizeof st);
    struct lpeer *lp = lpeer_find(l, st.id);
    if (lp) {
      lp->st = st;
      lp->have_st = true;
    }
  }
}

static void state_join(struct kt_peer_link *l, const struct lmsg *m) {
  struct lmsg *r = msg_new(M_JOIN_REPLY, 0);
  r->a = m->a;
  r->status = l->cfg.on_join(l->cfg.arg, m->b.p, m->b.len, &r->id, &r->b);
  state_queue(l, r);
}

static void state_in(struct kt_peer_link *l, const struct lmsg *m) {
  for (size_t off = 0; off < m->b.len;) {
    uint64_t from;
    uint32_t len;
    memcpy(&from, m->b.p + off, 8);
    uint8_t ch = m->b.p[off + 8];
    memcpy(&len, m->b.p + off + 9, 4);
    kt_peer_message_fn fn =
        ch == KT_PEER_CH_SNAPSHOT && l->cfg.on_snapshot ? l->cfg.on_snapshot : l->cfg.on_message;
    fn(l->cfg.arg, from, m->b.p + off + 13, len);
    off += 13 + (size_t)len;
  }
  atomic_fetch_sub_explicit(&l->in_bytes, m->a, memory_order_relaxed);
}

static void state_from_thread(void *arg, struct lmsg *m) {
  struct kt_peer_link *l = arg;
  switch (m->type) {
  case M_IN:
    state_in(l, m);
    break;
  case M_STATE:
    for (size_t off = 0; off + sizeof(struct lstate) <= m->b.len; off += sizeof(struct lstate)) {
      struct lstate s;
      memcpy(&s, m->b.p + off, sizeof s);
      state_report(l, &s);
    }
    break;
  case M_UNREACHABLE:
    for (size_t off = 0; off + 8 <= m->b.len; off += 8) {
      uint64_t id;
      memcpy(&id, m->b.p + off, 8);
      struct lpeer *lp = lpeer_find(l, id);
      if (lp)
        lp->unreachable = true;
    }
    break;
  case M_PEER_REMOVED:
    if (l->cfg.on_removed)
      l->cfg.on_removed(l->cfg.arg, m->id);
    break;
  case M_JOIN:
    state_join(l, m);
    break;
  case M_STATUS:
    state_status(l, m);
    break;
  }
  msg_free(m);
}

static void state_on_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop, (void)revents;
  struct kt_peer_link *l = w->data;
  ring_drain(&l->to_state, state_from_thread, l, &l->peer_wants_room, l->thr.loop, &l->thr.wake);
}

int kt_peer_link_start(struct kt_peer_link *l, struct kt_err *e) {
  if (l->direct || l->started)
    return 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* signals go to the state thread */
  int rc = pthread_create(&l->th, NULL, thr_main, &l->thr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc)
    return kt_err_set(e, KT_EIO, "cannot start the peer thread ketch-peer: %s", strerror(rc));
  l->started = true;
  kt_log(KT_LOG_INFO, "peer", "peer links on thread ketch-peer");
  return 0;
}

/* End of the state thread's turn, after the node's prepare (which sends
 * Raft's messages): deferred callbacks, then one publish. */
static void state_on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop, (void)revents;
  struct kt_peer_link *l = w->data;
  for (size_t i = 0; i < l->n; i++) {
    struct lpeer *lp = &l->v[i];
    uint64_t id = lp->id;
    if (lp->room_wanted) {
      size_t cap = l->cfg.max_snapshot_queue_bytes;
      long long q = lp_unsent(lp);
      if (q >= 0 && (size_t)q <= cap / 2 &&
          (size_t)q + KT_PEER_FRAME_HDR + lp->room_needed <= cap) {
        lp->room_wanted = false;
        if (l->cfg.on_snapshot_room)
          l->cfg.on_snapshot_room(l->cfg.arg, id); /* may send: lp may move */
      }
    }
    lp = lpeer_find(l, id);
    if (lp && lp->unreachable) {
      lp->unreachable = false;
      if (l->cfg.on_unreachable)
        l->cfg.on_unreachable(l->cfg.arg, id);
    }
  }
  batch_close(l);
  bool any = ring_feed(&l->to_peer, &l->sbox, &l->sbox_t, NULL);
  if (l->sbox) { /* the ring is full: the thread wakes us when it took some */
    atomic_store(&l->state_wants_room, true);
    atomic_thread_fence(memory_order_seq_cst); /* then the retry's load of head: ring_drain */
    any |= ring_feed(&l->to_peer, &l->sbox, &l->sbox_t, NULL); /* it may have, meanwhile */
  }
  if (any && kt_spsc_publish(&l->to_peer) && l->started)
    ev_async_send(l->thr.loop, &l->thr.wake);
}

/* ==== the façade ==== */

struct kt_peer_link *kt_peer_link_new(struct ev_loop *loop, const struct kt_peer_config *cfg,
                                      bool want_thread) {
  struct kt_peer_link *l = calloc(1, sizeof *l);
  kt_assert(l);
  l->loop = loop;
  l->cfg = *cfg;
  kt_peer_config_defaults(&l->cfg);
  const char *env = getenv("KETCH_PEER_THREAD");
  if (!want_thread || (env && strcmp(env, "0") == 0)) {
    l->direct = kt_peer_new(loop, cfg);
    return l;
  }
  kt_spsc_init(&l->to_peer, RING_CAP);
  kt_spsc_init(&l->to_state, RING_CAP);
  atomic_init(&l->quit, false);
  atomic_init(&l->state_wants_room, false);
  atomic_init(&l->peer_wants_room, false);
  atomic_init(&l->in_bytes, 0);
  atomic_init(&l->out_bytes, 0);
  ev_async_init(&l->wake, state_on_wake);
  l->wake.data = l;
  ev_async_start(loop, &l->wake);
  ev_unref(loop);
  ev_prepare_init(&l->prepare_w, state_on_prepare);
  ev_set_priority(&l->prepare_w, EV_MINPRI); /* after the node's */
  l->prepare_w.data = l;
  ev_prepare_start(loop, &l->prepare_w);
  ev_unref(loop);

  struct pthr *p = &l->thr;
  p->l = l;
  p->loop = ev_loop_new(EVFLAG_AUTO);
  kt_assert(p->loop);
  ev_async_init(&p->wake, thr_on_wake);
  p->wake.data = p;
  ev_async_start(p->loop, &p->wake);
  /* Started before the transport's prepare of the same (lowest) priority:
   * libev runs same-priority prepares last-started first, so this one runs
   * after the transport's flush and sees what it wrote. (Were it otherwise,
   * the status timer bounds the delay of a report to STATUS_S.) */
  ev_prepare_init(&p->prepare_w, thr_on_prepare);
  ev_set_priority(&p->prepare_w, EV_MINPRI);
  p->prepare_w.data = p;
  ev_prepare_start(p->loop, &p->prepare_w);
  ev_idle_init(&p->kick_w, thr_on_idle);
  p->kick_w.data = p;
  ev_timer_init(&p->status_w, thr_on_status, STATUS_S, STATUS_S);
  p->status_w.data = p;
  ev_timer_start(p->loop, &p->status_w);
  struct kt_peer_config tc = *cfg;
  tc.on_message = thr_on_message;
  tc.on_snapshot = thr_on_snapshot;
  tc.on_unreachable = thr_on_unreachable;
  tc.on_snapshot_room = NULL; /* the state side's accounting resumes chunks */
  tc.on_join = NULL;
  tc.on_join_async = cfg->on_join ? thr_on_join : NULL;
  tc.is_removed = thr_is_removed;
  tc.on_removed = cfg->on_removed ? thr_on_removed : NULL;
  tc.arg = p;
  p->t = kt_peer_new(p->loop, &tc);
  return l;
}

bool kt_peer_link_threaded(const struct kt_peer_link *l) { return !l->direct; }

/* listen: before the thread starts (kt_peer_link_start), so the transport
 * is still the state thread's to touch. */
int kt_peer_link_listen(struct kt_peer_link *l, const char *url, struct kt_err *e) {
  kt_assert(l->direct || !l->started);
  return kt_peer_listen(l->direct ? l->direct : l->thr.t, url, e);
}

int kt_peer_link_listen_port(const struct kt_peer_link *l) {
  kt_assert(l->direct || !l->started);
  return kt_peer_listen_port(l->direct ? l->direct : l->thr.t);
}

void kt_peer_link_free(struct kt_peer_link *l) {
  if (!l)
    return;
  if (l->direct) {
    kt_peer_free(l->direct);
    free(l);
    return;
  }
  if (l->started) {
    atomic_store(&l->quit, true);
    ev_async_send(l->thr.loop, &l->thr.wake);
    pthread_join(l->th, NULL);
  }
  thr_free(&l->thr);
  ev_ref(l->loop);
  ev_async_stop(l->loop, &l->wake);
  ev_ref(l->loop);
  ev_prepare_stop(l->loop, &l->prepare_w);
  struct lmsg *m;
  while ((m = kt_spsc_pop(&l->to_peer)))
    msg_free(m);
  while ((m = kt_spsc_pop(&l->to_state)))
    msg_free(m);
  if (l->batch)
    msg_free(l->batch);
  fifo_free(&l->sbox, &l->sbox_t);
  kt_spsc_free(&l->to_peer);
  kt_spsc_free(&l->to_state);
  free(l->v);
  free(l);
}

static struct lmsg *url_msg(uint8_t type, uint64_t id, const char *url) {
  struct lmsg *m = msg_new(type, id);
  kt_buf_append(&m->b, url, strlen(url) + 1);
  return m;
}

/* The transport's checks of a peer url (kt_peer_add/update), here. */
static int url_check(const char *url, struct kt_err *e) {
  char host[KT_PEER_URL_MAX];
  int port;
  if (strlen(url) >= KT_PEER_URL_MAX)
    return kt_err_set(e, KT_EINVAL, "peer url too long");
  return kt_peer_parse_url(url, host, sizeof host, &port, e) ? KT_EINVAL : 0;
}

int kt_peer_link_add(struct kt_peer_link *l, uint64_t id, const char *url, struct kt_err *e) {
  if (l->direct)
    return kt_peer_add(l->direct, id, url, e);
  if (id == 0 || id == l->cfg.member_id)
    return kt_err_set(e, KT_EINVAL, "peer id %llx: not a remote member id", (unsigned long long)id);
  if (lpeer_find(l, id))
    return kt_err_set(e, KT_EINVAL, "peer %llx is already a peer", (unsigned long long)id);
  int rc = url_check(url, e);
  if (rc)
    return rc;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 8;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    kt_assert(l->v);
  }
  struct lpeer *lp = &l->v[l->n++];
  memset(lp, 0, sizeof *lp);
  lp->id = id;
  lp->s.id = id;
  lp->s.gen = ++l->gen_seq;
  snprintf(lp->url, sizeof lp->url, "%s", url);
  struct lmsg *m = url_msg(M_ADD, id, url);
  m->a = lp->s.gen;
  state_queue(l, m);
  return 0;
}

int kt_peer_link_update(struct kt_peer_link *l, uint64_t id, const char *url, struct kt_err *e) {
  if (l->direct)
    return kt_peer_update(l->direct, id, url, e);
  struct lpeer *lp = lpeer_find(l, id);
  if (!lp)
    return kt_err_set(e, KT_ENOTFOUND, "peer %llx: not a peer", (unsigned long long)id);
  int rc = url_check(url, e);
  if (rc)
    return rc;
  snprintf(lp->url, sizeof lp->url, "%s", url);
  state_queue(l, url_msg(M_UPDATE, id, url));
  return 0;
}

int kt_peer_link_remove(struct kt_peer_link *l, uint64_t id) {
  if (l->direct)
    return kt_peer_remove(l->direct, id);
  struct lpeer *lp = lpeer_find(l, id);
  if (!lp)
    return KT_ENOTFOUND;
  size_t i = (size_t)(lp - l->v);
  memmove(lp, lp + 1, (l->n - i - 1) * sizeof *lp);
  l->n--;
  state_queue(l, msg_new(M_REMOVE, id));
  return 0;
}

void kt_peer_link_set_removed(struct kt_peer_link *l, const uint64_t *ids, size_t n) {
  if (l->direct)
    return; /* is_removed reads the owner's set */
  struct lmsg *m = msg_new(M_REMOVED, 0);
  kt_buf_append(&m->b, ids, n * 8);
  state_queue(l, m);
}

static void refused(struct lpeer *lp, uint64_t *counter) {
  (*counter)++;
  lp->unreachable = true;
}

int kt_peer_link_send2(struct kt_peer_link *l, uint64_t to, const void *a, size_t alen,
                       const void *b, size_t blen) {
  if (l->direct)
    return kt_peer_send2(l->direct, to, a, alen, b, blen);
  size_t len = alen + blen;
  int rc = kt_peer_check_len(&l->cfg, len, false);
  if (rc)
    return rc;
  struct lpeer *lp = lpeer_find(l, to);
  if (!lp)
    return KT_ENOTFOUND;
  if (!lp->s.raft_up) {
    refused(lp, &lp->refused_down);
    return KT_EUNAVAILABLE;
  }
  /* The thread takes SENDs in order whatever their peers, so a backlog
   * here is the thread behind, not a peer: one bound for all of them. */
  size_t frame = KT_PEER_FRAME_HDR + len;
  if (atomic_load_explicit(&l->out_bytes, memory_order_relaxed) + frame > l->cfg.max_queue_bytes) {
    refused(lp, &lp->refused_full);
    return KT_EBUSY;
  }
  if (!l->batch) { /* one block for the turn's sends, grown (rarely) by doubling */
    l->batch = msg_new(M_SEND, 0);
    kt_buf_reserve(&l->batch->b, SEND_BLOCK);
  }
  struct kt_buf *bb = &l->batch->b;
  kt_buf_reserve(bb, 12 + len);
  uint32_t l32 = (uint32_t)len;
  memcpy(bb->p + bb->len, &to, 8);
  memcpy(bb->p + bb->len + 8, &l32, 4);
  if (alen)
    memcpy(bb->p + bb->len + 12, a, alen);
  if (blen)
    memcpy(bb->p + bb->len + 12 + alen, b, blen);
  bb->len += 12 + len;
  l->batch->a += frame;
  atomic_fetch_add_explicit(&l->out_bytes, frame, memory_order_relaxed);
  return 0;
}

int kt_peer_link_send(struct kt_peer_link *l, uint64_t to, const void *msg, size_t len) {
  return kt_peer_link_send2(l, to, msg, len, NULL, 0);
}

int kt_peer_link_send_snapshot(struct kt_peer_link *l, uint64_t to, const void *chunk, size_t len) {
  if (l->direct)
    return kt_peer_send_snapshot(l->direct, to, chunk, len);
  size_t cap = l->cfg.max_snapshot_queue_bytes;
  int rc = kt_peer_check_len(&l->cfg, len, true);
  if (rc)
    return rc;
  struct lpeer *lp = lpeer_find(l, to);
  if (!lp)
    return KT_ENOTFOUND;
  long long q = lp_unsent(lp);
  rc = q < 0 ? KT_EUNAVAILABLE : (size_t)q + KT_PEER_FRAME_HDR + len > cap ? KT_EBUSY : 0;
  if (rc) {
    lp->room_wanted = true;
    lp->room_needed = len;
    return rc;
  }
  struct lmsg *m = msg_new(M_SNAP, to);
  m->a = lp->s.epoch;
  kt_buf_append(&m->b, chunk, len);
  state_queue(l, m);
  lp->handed += KT_PEER_FRAME_HDR + len;
  return 0;
}

size_t kt_peer_link_snapshot_room(const struct kt_peer_link *l, uint64_t to) {
  if (l->direct)
    return kt_peer_snapshot_room(l->direct, to);
  const struct lpeer *lp = lpeer_find(l, to);
  long long q = lp ? lp_unsent(lp) : -1;
  if (q < 0)
    return 0;
  size_t used = (size_t)q + KT_PEER_FRAME_HDR, cap = l->cfg.max_snapshot_queue_bytes;
  return used >= cap ? 0 : cap - used;
}

long long kt_peer_link_snapshot_unsent(struct kt_peer_link *l, uint64_t to) {
  if (l->direct)
    return kt_peer_snapshot_unsent(l->direct, to);
  struct lpeer *lp = lpeer_find(l, to);
  if (!lp)
    return -1;
  long long q = lp_unsent(lp);
  lp->lost = false; /* a loss is told once, as a connection that was down */
  if (q < 0)
    lp->handed = lp->s.written; /* told: nothing more to lose on this connection */
  return q;
}

bool kt_peer_link_connected(const struct kt_peer_link *l, uint64_t id) {
  if (l->direct)
    return kt_peer_connected(l->direct, id);
  const struct lpeer *lp = lpeer_find(l, id);
  return lp && lp->s.raft_up;
}

int kt_peer_link_status(const struct kt_peer_link *l, uint64_t id, struct kt_peer_status *st) {
  if (l->direct)
    return kt_peer_status(l->direct, id, st);
  const struct lpeer *lp = lpeer_find(l, id);
  if (!lp)
    return KT_ENOTFOUND;
  if (lp->have_st)
    *st = lp->st;
  else
    memset(st, 0, sizeof *st);
  st->id = id;
  memcpy(st->url, lp->url, sizeof st->url);
  st->connected = lp->s.raft_up;
  st->snapshot_connected = lp->s.snap_up;
  if (!st->connected)
    st->connected_since = 0;
  st->msgs_dropped_unreachable += lp->refused_down;
  st->msgs_dropped_full += lp->refused_full;
  return 0;
}

size_t kt_peer_link_ids(const struct kt_peer_link *l, uint64_t *ids, size_t max) {
  if (l->direct)
    return kt_peer_ids(l->direct, ids, max);
  for (size_t i = 0; i < l->n && i < max; i++)
    ids[i] = l->v[i].id;
  return l->n;
}
