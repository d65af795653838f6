/* tools/grpc-bridge/bridge_stream.c — etcd's streaming calls on libketch:
 * Watch.Watch (handed to bridge_watch.c, which coalesces watches),
 * Lease.LeaseKeepAlive (bidirectional: each {ID} in, one {header, ID, TTL}
 * out), v3lock / v3election (etcd's recipes) and Maintenance.Snapshot
 * (bridge_snap.c). See bridge.h for the server side (kt_bridge_stream_io).
 *
 * Owns: per gRPC stream a kt_bridge_stream (and, for Watch, its
 * kt_bridge_wstream).
 *
 * Lifetimes: a stream holds one reference for the server side (dropped by
 * kt_bridge_stream_close) and one per pending ketch call; it is freed at
 * zero. */
#include "bridge.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../grpc/grpc_client.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#define GRPC_OVERHEAD_BYTES (512u * 1024)

enum {
  S_WATCH,
  S_KEEPALIVE,
  /* v3lock / v3election (etcd's concurrency recipes, run here) */
  S_LOCK,
  S_UNLOCK,
  S_CAMPAIGN,
  S_PROCLAIM,
  S_LEADER,
  S_RESIGN,
  S_OBSERVE,
  S_SNAPSHOT, /* Maintenance.Snapshot: server stream of an etcd database (bridge_snap.c) */
};

static const char *const stream_methods[] = {
    [S_WATCH] = "/etcdserverpb.Watch/Watch",
    [S_KEEPALIVE] = "/etcdserverpb.Lease/LeaseKeepAlive",
    [S_LOCK] = "/v3lockpb.Lock/Lock",
    [S_UNLOCK] = "/v3lockpb.Lock/Unlock",
    [S_CAMPAIGN] = "/v3electionpb.Election/Campaign",
    [S_PROCLAIM] = "/v3electionpb.Election/Proclaim",
    [S_LEADER] = "/v3electionpb.Election/Leader",
    [S_RESIGN] = "/v3electionpb.Election/Resign",
    [S_OBSERVE] = "/v3electionpb.Election/Observe",
    [S_SNAPSHOT] = "/etcdserverpb.Maintenance/Snapshot",
};

struct rop;

struct kt_bridge_stream {
  ketch_client *kc;
  int method;
  const struct kt_bridge_stream_io *io; /* NULL once closed */
  void *arg;
  int refs;
  bool eof, finished;
  size_t fragment_bytes; /* etcd's limit for a fragment */
  /* Watch (bridge_watch.c) */
  kt_bridge_wstream *ws;
  /* LeaseKeepAlive */
  size_t pending;
  /* Lock / Election */
  struct rop *op;
  /* Snapshot (bridge_snap.c) */
  bool snapshot_started;
  kt_bridge_snap *snap;
};

/* The newest header ketch delivered (any stream): final deliveries carry
 * none, and etcd's cancel responses still name the term and revision. */
static KT_LOOP_LOCAL ketch_header last_hdr;

static void note_header(const ketch_header *h) {
  if (h->revision >= last_hdr.revision && h->raft_term)
    last_hdr = *h;
}

struct rop;
static void rop_free(struct rop *op);

static void stream_unref(kt_bridge_stream *s) {
  if (--s->refs == 0) {
    rop_free(s->op);
    free(s);
  }
}

static void stream_finish(kt_bridge_stream *s, int status, const char *message) {
  if (s->finished || !s->io)
    return;
  s->finished = true;
  s->io->finish(s->arg, status, message);
}

static void send_msg(kt_bridge_stream *s, const void *m) {
  if (s->finished || !s->io)
    return;
  size_t n;
  uint8_t *f = kt_bridge_frame(m, &n);
  if (!f) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return;
  }
  s->io->send(s->arg, f, n);
}

void kt_bridge_fill_header(Etcdserverpb__ResponseHeader *h, const ketch_header *k,
                           ketch_client *kc) {
  etcdserverpb__response_header__init(h);
  h->cluster_id = k && k->cluster_id ? k->cluster_id : ketch_cluster_id(kc);
  h->member_id = k && k->member_id ? k->member_id : ketch_member_id(kc);
  h->revision = k ? k->revision : 0;
  h->raft_term = k ? k->raft_term : 0;
}

void kt_bridge_fill_kv(Mvccpb__KeyValue *o, const ketch_kv *kv) {
  mvccpb__key_value__init(o);
  o->key.data = (uint8_t *)kv->key;
  o->key.len = kv->key_len;
  o->value.data = (uint8_t *)kv->value;
  o->value.len = kv->value_len;
  o->create_revision = kv->create_revision;
  o->mod_revision = kv->mod_revision;
  o->version = kv->version;
  o->lease = kv->lease;
}

/* ---- LeaseKeepAlive ---- */

struct ka_call {
  kt_bridge_stream *s;
  int64_t id;
  struct ka_call *next; /* coalescing: the waiters of one renewal */
};

static void on_keepalive(void *arg, int err, const ketch_result *res) {
  struct ka_call *k = arg;
  kt_bridge_stream *s = k->s;
  if (s->io && !s->finished) {
    s->io->pending(s->arg, -1);
    s->pending--;
    if (!err)
      note_header(&res->header);
    if (err && err != KETCH_ELEASENOTFOUND) {
      int st;
      const char *m = kt_bridge_error(err, res->message, &st);
      stream_finish(s, st, m);
    } else {
      Etcdserverpb__ResponseHeader h;
      Etcdserverpb__LeaseKeepAliveResponse r;
      kt_bridge_fill_header(&h, err ? &last_hdr : &res->header, s->kc);
      etcdserverpb__lease_keep_alive_response__init(&r);
      r.header = &h;
      r.id = k->id;
      r.ttl = err ? 0 : res->lease.ttl; /* etcd: a lease not found renews to 0 */
      send_msg(s, &r);
      if (s->eof && s->pending == 0)
        stream_finish(s, KT_GRPC_OK, "");
    }
  } else if (s->io) {
    s->io->pending(s->arg, -1);
    s->pending--;
  }
  free(k);
  stream_unref(s);
}

/* ---- keep-alive coalescing (--coalesce-lease-keepalives) ----
 * Per (handle, lease): the last renewal's answer and when it came. A
 * keep-alive arriving less than TTL/3 after it is answered from it at once
 * (the member's lease then still has at least 2/3 of its TTL left); a later
 * one renews upstream, and every keep-alive arriving while that renewal is
 * in flight waits for its answer. So the members see at most one renewal
 * per lease per TTL/3 however many clients and streams keep it alive, and a
 * lease nobody asks for is not renewed at all (pull, not a schedule). A
 * lease revoked or expired elsewhere may be answered alive for at most TTL/3
 * after the last renewal (a LeaseRevoke through this bridge forgets it at
 * once). Entries: at most KA_MAX, dropped once older than their TTL.
 *
 * One table per event loop (bridge.h). A LeaseRevoke through one loop must
 * reach the others' tables too: the revoking loop appends the lease id to
 * a shared ring (under ka_revoked_mu: once per revoke, never per
 * keep-alive) and raises ka_revoked_n (seq_cst); every loop compares that
 * count with the last it applied before it answers a keep-alive from its
 * table (one atomic load) and, when it moved, forgets those leases first
 * (all of its entries if the ring wrapped past what it had seen). The
 * revoke is sent to the member after the count moved, so a keep-alive
 * that follows the revoke's answer is never answered from a cache. A
 * renewal in flight when a loop applies the revoke may have reached the
 * member before it: its answer goes to the keep-alives already waiting for
 * it but is not cached, and a keep-alive arriving meanwhile is renewed
 * directly. */
bool kt_bridge_ka_coalesce;

#define KA_REVOKED_RING 1024
static pthread_mutex_t ka_revoked_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t ka_revoked[KA_REVOKED_RING];    /* under ka_revoked_mu */
static _Atomic uint64_t ka_revoked_n;          /* ids ever appended (written under the mutex) */
static KT_LOOP_LOCAL uint64_t ka_revoked_seen; /* how many of them this loop applied */
KT_LOOP_LOCAL _Atomic uint64_t kt_bridge_ka_requests, kt_bridge_ka_upstream;

#define KA_BUCKETS 4096
#define KA_MAX 65536

struct ka_lease {
  ketch_client *kc;
  int64_t id;
  double renewed_at; /* monotonic seconds */
  int64_t ttl;       /* of the last renewal; 0: none usable */
  ketch_header hdr;
  bool in_flight;
  bool revoked; /* revoked while its renewal was in flight: that answer is not cached */
  struct ka_call *waiters;
  struct ka_lease *next;
};

static KT_LOOP_LOCAL struct ka_lease *ka_table[KA_BUCKETS];
static KT_LOOP_LOCAL size_t ka_n;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t ka_bucket(int64_t id) {
  return (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 52) % KA_BUCKETS;
}

/* Unlinks and frees idle entries of id's bucket that are past use, and
 * every idle one matching (kc or any when kc NULL, id or any when 0). */
static void ka_sweep(size_t bucket, ketch_client *kc, int64_t id, bool match_only) {
  double now = mono_s();
  for (struct ka_lease **pp = &ka_table[bucket]; *pp;) {
    struct ka_lease *e = *pp;
    bool idle = !e->in_flight && !e->waiters;
    bool match = (!kc || e->kc == kc) && (!id || e->id == id);
    if (idle && ((match_only && match) || (!match_only && now - e->renewed_at > e->ttl))) {
      *pp = e->next;
      free(e);
      ka_n--;
      continue;
    }
    if (match && match_only && !idle) { /* its renewal answers the waiters, then nothing is */
      e->ttl = 0;                       /* cached: it may have reached the member first */
      e->revoked = true;
    }
    pp = &e->next;
  }
}

/* Forgets the leases other loops revoked since this loop last looked. */
static void ka_revoked_catch_up(void) {
  pthread_mutex_lock(&ka_revoked_mu);
  uint64_t n = atomic_load(&ka_revoked_n);
  if (n - ka_revoked_seen > KA_REVOKED_RING) { /* wrapped: forget everything */
    for (size_t b = 0; b < KA_BUCKETS; b++)
      ka_sweep(b, NULL, 0, true);
  } else {
    for (uint64_t i = ka_revoked_seen; i < n; i++) {
      int64_t id = ka_revoked[i % KA_REVOKED_RING];
      ka_sweep(ka_bucket(id), NULL, id, true);
    }
  }
  ka_revoked_seen = n;
  pthread_mutex_unlock(&ka_revoked_mu);
}

void kt_bridge_ka_forget(ketch_client *kc, int64_t id) {
  if (id && !kc && kt_bridge_ka_coalesce) { /* revoked: every loop's table */
    pthread_mutex_lock(&ka_revoked_mu);
    uint64_t n = atomic_load(&ka_revoked_n);
    ka_revoked[n % KA_REVOKED_RING] = id;
    atomic_store(&ka_revoked_n, n + 1);
    pthread_mutex_unlock(&ka_revoked_mu);
  }
  if (id) {
    ka_sweep(ka_bucket(id), kc, id, true);
    return;
  }
  for (size_t b = 0; b < KA_BUCKETS; b++)
    ka_sweep(b, kc, 0, true);
}

static void on_ka_lease(void *arg, int err, const ketch_result *res) {
  struct ka_lease *e = arg;
  e->in_flight = false;
  if (!err && res->lease.ttl > 0 && !e->revoked) {
    e->renewed_at = mono_s();
    e->ttl = res->lease.ttl;
    e->hdr = res->header;
  } else {
    e->ttl = 0;
  }
  struct ka_call *w = e->waiters;
  e->waiters = NULL;
  while (w) { /* oldest first is not promised by etcd either: any order */
    struct ka_call *next = w->next;
    on_keepalive(w, err, res);
    w = next;
  }
  if (e->ttl == 0)
    ka_sweep(ka_bucket(e->id), e->kc, e->id, true);
}

/* Answers a keep-alive from the cached renewal of e. */
static void ka_answer_cached(kt_bridge_stream *s, const struct ka_lease *e) {
  Etcdserverpb__ResponseHeader h;
  Etcdserverpb__LeaseKeepAliveResponse r;
  kt_bridge_fill_header(&h, &e->hdr, s->kc);
  etcdserverpb__lease_keep_alive_response__init(&r);
  r.header = &h;
  r.id = e->id;
  r.ttl = e->ttl;
  send_msg(s, &r);
}

/* true when the keep-alive was taken by the coalescing table. */
static bool keepalive_coalesced(kt_bridge_stream *s, int64_t id) {
  if (id <= 0)
    return false;
  if (atomic_load(&ka_revoked_n) != ka_revoked_seen)
    ka_revoked_catch_up();
  size_t b = ka_bucket(id);
  ka_sweep(b, NULL, 0, false);
  struct ka_lease *e = ka_table[b];
  while (e && (e->kc != s->kc || e->id != id))
    e = e->next;
  if (e && e->revoked)
    return false; /* its renewal in flight may predate the revoke: renewed directly */
  if (!e) {
    if (ka_n >= KA_MAX || !(e = calloc(1, sizeof *e)))
      return false; /* not coalesced: renewed directly */
    e->kc = s->kc;
    e->id = id;
    e->next = ka_table[b];
    ka_table[b] = e;
    ka_n++;
  }
  if (!e->in_flight && e->ttl > 0 && mono_s() - e->renewed_at < (double)e->ttl / 3.0) {
    ka_answer_cached(s, e);
    return true;
  }
  struct ka_call *k = malloc(sizeof *k);
  if (!k) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return true;
  }
  if (!e->in_flight) {
    int err = ketch_lease_keepalive_once_async(s->kc, id, on_ka_lease, e);
    if (err) {
      free(k);
      int st;
      const char *m = kt_bridge_error(err, ketch_errmsg(s->kc), &st);
      stream_finish(s, st, m);
      return true;
    }
    e->in_flight = true;
    kt_bridge_ka_upstream++;
  }
  k->s = s;
  k->id = id;
  k->next = e->waiters;
  e->waiters = k;
  s->refs++;
  s->pending++;
  s->io->pending(s->arg, +1);
  return true;
}

static void keepalive_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  Etcdserverpb__LeaseKeepAliveRequest *r =
      etcdserverpb__lease_keep_alive_request__unpack(NULL, len, msg);
  if (!r) {
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
    return;
  }
  int64_t id = r->id;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  kt_bridge_ka_requests++;
  if (kt_bridge_ka_coalesce && keepalive_coalesced(s, id))
    return;
  struct ka_call *k = malloc(sizeof *k);
  if (!k) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return;
  }
  k->s = s;
  k->id = id;
  int err = ketch_lease_keepalive_once_async(s->kc, id, on_keepalive, k);
  if (!err)
    kt_bridge_ka_upstream++;
  if (err) {
    free(k);
    int st;
    const char *m = kt_bridge_error(err, ketch_errmsg(s->kc), &st);
    stream_finish(s, st, m);
    return;
  }
  s->refs++;
  s->pending++;
  s->io->pending(s->arg, +1);
}

/* ---- Lock and Election: etcd's concurrency recipes, asynchronously ----
 * The same steps as etcd's v3lock / v3election servers (clientv3's
 * concurrency Mutex and Election) with the caller's lease, driven by ketch
 * callbacks instead of a blocking goroutine:
 *   Lock/Campaign: txn "create name/<lease hex> if absent" (Lock also reads
 *   the owner), then waitDeletes: the newest key of name/ created before ours
 *   is watched until deleted, repeatedly, until none is left: we hold it.
 *   A client that goes away while waiting gives its key up (Lock: delete,
 *   Campaign: resign), as etcd does on a cancelled context.
 *   Observe: the oldest key of name/ (or the first put under it) and then
 *   every change of that key until it is deleted; again.
 * Every ketch call and watch holds a reference on the stream. */

struct rop {
  uint8_t *name, *key, *value; /* name without "/", name/<lease hex> */
  size_t name_len, key_len, value_len;
  int64_t lease, rev; /* rev: our key's create revision */
  ketch_header hdr;   /* the answer's header */
  struct rwatch *w;   /* the watch in use, if any */
  bool have_key;      /* our key may exist: give it up if the client leaves */
  bool answered, first_put;
};

struct rwatch {
  kt_bridge_stream *s;
  uint64_t handle;
  bool stale; /* cancelled: ignore all but the final delivery */
};

static const char *const err_no_leader = "election: no leader";
static const char *const err_not_leader = "election: not leader";
static const char *const err_missing_leader = "\"leader\" field must be provided";

static void rop_free(struct rop *op) {
  if (!op)
    return;
  free(op->name);
  free(op->key);
  free(op->value);
  free(op);
}

static uint8_t *dup_bytes(const void *p, size_t n) {
  uint8_t *d = malloc(n ? n : 1);
  if (d && n)
    memcpy(d, p, n);
  return d;
}

/* name + "/" (the prefix every candidate's key lives under). */
static ketch_range_req prefix_req(const struct rop *op, char *buf, size_t cap) {
  ketch_range_req q;
  memset(&q, 0, sizeof q);
  size_t n = op->name_len + 1 < cap ? op->name_len : cap - 1;
  memcpy(buf, op->name, n);
  buf[n] = '/';
  q.key = buf;
  q.key_len = n + 1;
  q.prefix = true;
  return q;
}

/* etcd's WithFirstCreate / WithLastCreate: one key, by create revision. */
static void by_create(ketch_range_req *q, int order) {
  q->sort_target = KETCH_SORT_CREATE;
  q->sort_order = order;
  q->limit = 1;
}

/* etcd's lock and election servers return their embedded client's errors
 * as plain errors: gRPC code Unknown, etcd's message. */
static void recipe_fail(kt_bridge_stream *s, int err, const char *message) {
  int st;
  const char *m = kt_bridge_error(err, message, &st);
  stream_finish(s, KT_GRPC_UNKNOWN, m);
}

/* Answers a unary recipe call: the message, then OK. */
static void recipe_answer(kt_bridge_stream *s, const void *m) {
  s->op->answered = true;
  send_msg(s, m);
  stream_finish(s, KT_GRPC_OK, "");
}

static void on_recipe_watch(void *arg, int err, const ketch_result *res);

static void rwatch_cancel(kt_bridge_stream *s) {
  struct rwatch *w = s->op->w;
  if (w) {
    w->stale = true;
    ketch_watch_cancel(s->kc, w->handle);
    s->op->w = NULL;
  }
}

static int rwatch_start(kt_bridge_stream *s, const ketch_watch_req *q) {
  struct rwatch *w = calloc(1, sizeof *w);
  if (!w)
    return KETCH_ENOMEM;
  w->s = s;
  int err = ketch_watch(s->kc, q, on_recipe_watch, w, &w->handle);
  if (err) {
    free(w);
    return err;
  }
  s->refs++;
  s->op->w = w;
  return 0;
}

static int submit_ok(kt_bridge_stream *s, int err) {
  if (!err)
    s->refs++;
  return err;
}

static void wait_deletes(kt_bridge_stream *s);
static void observe_start(kt_bridge_stream *s);

/* The recipe's own key is held: answer Lock / Campaign. */
static void recipe_acquired(kt_bridge_stream *s) {
  struct rop *op = s->op;
  Etcdserverpb__ResponseHeader h;
  kt_bridge_fill_header(&h, &op->hdr, s->kc);
  op->have_key = false; /* the caller owns it now */
  if (s->method == S_LOCK) {
    V3lockpb__LockResponse r;
    v3lockpb__lock_response__init(&r);
    r.header = &h;
    r.key.data = op->key;
    r.key.len = op->key_len;
    recipe_answer(s, &r);
  } else {
    V3electionpb__CampaignResponse r;
    V3electionpb__LeaderKey lk;
    v3electionpb__campaign_response__init(&r);
    v3electionpb__leader_key__init(&lk);
    lk.name.data = op->name;
    lk.name.len = op->name_len;
    lk.key.data = op->key;
    lk.key.len = op->key_len;
    lk.rev = op->rev;
    lk.lease = op->lease;
    r.header = &h;
    r.leader = &lk;
    recipe_answer(s, &r);
  }
}

/* A client gone while waiting: give the key up, as etcd's cancelled
 * Lock (Unlock) and Campaign (Resign) do. The answer only unrefs. */
static void on_cleanup(void *arg, int err, const ketch_result *res) {
  (void)err;
  (void)res;
  stream_unref(arg);
}

static void recipe_give_up(kt_bridge_stream *s) {
  struct rop *op = s->op;
  if (!op || !op->have_key || op->answered)
    return;
  op->have_key = false;
  if (s->method == S_LOCK) {
    ketch_delete_req d = {.key = op->key, .key_len = op->key_len};
    submit_ok(s, ketch_delete_async(s->kc, &d, on_cleanup, s));
  } else {
    ketch_compare c = {.result = KETCH_CMP_EQUAL,
                       .target = KETCH_CMP_CREATE,
                       .key = op->key,
                       .key_len = op->key_len,
                       .int_value = op->rev};
    ketch_op del = ketch_op_delete((ketch_delete_req){.key = op->key, .key_len = op->key_len});
    ketch_txn_req t = {.compare = &c, .n_compare = 1, .success = &del, .n_success = 1};
    submit_ok(s, ketch_txn_async(s->kc, &t, on_cleanup, s));
  }
}

static void recipe_close(kt_bridge_stream *s) {
  if (!s->op)
    return;
  rwatch_cancel(s);
  recipe_give_up(s);
}

/* waitDeletes: the newest key created before ours, if any. */
static void on_wd_range(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  struct rop *op = s->op;
  if (s->io && !s->finished) {
    if (err) {
      recipe_give_up(s);
      recipe_fail(s, err, res->message);
    } else if (res->range.n_kvs == 0) {
      if (s->method == S_LOCK)
        op->hdr = res->header; /* etcd: the header of the last Get */
      recipe_acquired(s);
    } else {
      const ketch_kv *kv = &res->range.kvs[0];
      ketch_watch_req q;
      memset(&q, 0, sizeof q);
      q.key = kv->key;
      q.key_len = kv->key_len;
      q.start_revision = res->header.revision;
      q.no_put = true;
      int e = rwatch_start(s, &q);
      if (e) {
        recipe_give_up(s);
        recipe_fail(s, e, ketch_errmsg(s->kc));
      }
    }
  }
  stream_unref(s);
}

static void wait_deletes(kt_bridge_stream *s) {
  char buf[1024];
  ketch_range_req q = prefix_req(s->op, buf, sizeof buf);
  by_create(&q, KETCH_SORT_DESCEND);
  q.max_create_revision = s->op->rev - 1;
  q.keys_only = true;
  int err = submit_ok(s, ketch_range_async(s->kc, &q, on_wd_range, s));
  if (err) {
    recipe_give_up(s);
    recipe_fail(s, err, ketch_errmsg(s->kc));
  }
}

static void send_leader(kt_bridge_stream *s, const ketch_header *kh, const ketch_kv *kv) {
  Etcdserverpb__ResponseHeader h;
  Mvccpb__KeyValue k;
  V3electionpb__LeaderResponse r;
  kt_bridge_fill_header(&h, kh, s->kc);
  kt_bridge_fill_kv(&k, kv);
  v3electionpb__leader_response__init(&r);
  r.header = &h;
  r.kv = &k;
  if (s->method == S_OBSERVE && s->io && !s->io->room(s->arg, 64 + kv->key_len + kv->value_len)) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: observer too slow");
    return;
  }
  send_msg(s, &r);
}

static void observe_key(kt_bridge_stream *s, const ketch_kv *kv, int64_t rev) {
  ketch_watch_req q;
  memset(&q, 0, sizeof q);
  q.key = kv->key;
  q.key_len = kv->key_len;
  q.start_revision = rev;
  s->op->first_put = false;
  int e = rwatch_start(s, &q);
  if (e)
    recipe_fail(s, e, ketch_errmsg(s->kc));
}

static void on_recipe_watch(void *arg, int err, const ketch_result *res) {
  struct rwatch *w = arg;
  kt_bridge_stream *s = w->s;
  if (err || res->watch.canceled) {
    if (!w->stale && s->io && !s->finished) {
      s->op->w = NULL;
      if (s->method == S_OBSERVE) {
        stream_finish(s, KT_GRPC_OK, ""); /* etcd: the observer's channel closes */
      } else {
        recipe_give_up(s);
        recipe_fail(s, err ? err : KETCH_ECANCELED, res->message);
      }
    }
    free(w);
    stream_unref(s);
    return;
  }
  if (w->stale || !s->io || s->finished)
    return;
  const ketch_watch_result *wr = &res->watch;
  for (size_t i = 0; i < wr->n_events; i++) {
    const ketch_event *e = &wr->events[i];
    if (s->method != S_OBSERVE) { /* waitDelete: the older key is gone */
      if (e->type == KETCH_EVENT_DELETE) {
        rwatch_cancel(s);
        wait_deletes(s);
        return;
      }
      continue;
    }
    if (s->op->first_put) { /* no leader yet: the first put under the prefix */
      if (e->type != KETCH_EVENT_PUT)
        continue;
      ketch_header h = res->header;
      h.revision = e->kv.mod_revision;
      send_leader(s, &h, &e->kv);
      rwatch_cancel(s);
      observe_key(s, &e->kv, e->kv.mod_revision + 1);
      return;
    }
    if (e->type == KETCH_EVENT_DELETE) { /* the leader is gone: the next one */
      rwatch_cancel(s);
      observe_start(s);
      return;
    }
    send_leader(s, &res->header, &e->kv);
  }
}

static void on_observe_range(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  if (s->io && !s->finished) {
    if (err) {
      stream_finish(s, KT_GRPC_OK, ""); /* etcd: a failed Get ends the observation */
    } else if (res->range.n_kvs > 0) {
      send_leader(s, &res->header, &res->range.kvs[0]);
      observe_key(s, &res->range.kvs[0], res->header.revision + 1);
    } else {
      char buf[1024];
      ketch_range_req p = prefix_req(s->op, buf, sizeof buf);
      ketch_watch_req q;
      memset(&q, 0, sizeof q);
      q.key = p.key;
      q.key_len = p.key_len;
      q.prefix = true;
      q.start_revision = res->header.revision;
      s->op->first_put = true;
      int e = rwatch_start(s, &q);
      if (e)
        recipe_fail(s, e, ketch_errmsg(s->kc));
    }
  }
  stream_unref(s);
}

static void observe_start(kt_bridge_stream *s) {
  char buf[1024];
  ketch_range_req q = prefix_req(s->op, buf, sizeof buf);
  by_create(&q, KETCH_SORT_ASCEND);
  int err = submit_ok(s, ketch_range_async(s->kc, &q, on_observe_range, s));
  if (err)
    recipe_fail(s, err, ketch_errmsg(s->kc));
}

static void on_leader(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  if (s->io && !s->finished) {
    if (err)
      recipe_fail(s, err, res->message);
    else if (res->range.n_kvs == 0)
      stream_finish(s, KT_GRPC_UNKNOWN, err_no_leader);
    else {
      s->op->answered = true;
      send_leader(s, &res->header, &res->range.kvs[0]);
      stream_finish(s, KT_GRPC_OK, "");
    }
  }
  stream_unref(s);
}

/* The answer of Unlock, Proclaim, Resign: a header only (all three messages
 * are {header = 1}); Proclaim and Resign also check the txn held. */
static void on_simple(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  if (s->io && !s->finished) {
    if (err) {
      recipe_fail(s, err, res->message);
    } else if (s->method == S_PROCLAIM && !res->txn.succeeded) {
      stream_finish(s, KT_GRPC_UNKNOWN, err_not_leader);
    } else {
      Etcdserverpb__ResponseHeader h;
      V3lockpb__UnlockResponse r; /* the same wire shape as the others */
      kt_bridge_fill_header(&h, &res->header, s->kc);
      v3lockpb__unlock_response__init(&r);
      r.header = &h;
      recipe_answer(s, &r);
    }
  }
  stream_unref(s);
}

/* Campaign's Proclaim of a new value over an existing key. */
static void on_campaign_proclaim(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  if (s->io && !s->finished) {
    if (err || !res->txn.succeeded) {
      recipe_give_up(s);
      if (err)
        recipe_fail(s, err, res->message);
      else
        stream_finish(s, KT_GRPC_UNKNOWN, err_not_leader);
    } else {
      wait_deletes(s);
    }
  }
  stream_unref(s);
}

static void on_create_txn(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  struct rop *op = s->op;
  if (!s->io && !err && res->txn.n_responses > 0 &&
      (res->txn.succeeded || res->txn.responses[0].range.n_kvs > 0)) {
    /* The client left while the key was being created: give it up. */
    op->have_key = true;
    op->rev = res->txn.succeeded ? res->header.revision
                                 : res->txn.responses[0].range.kvs[0].create_revision;
    recipe_give_up(s);
  } else if (s->io && !s->finished) {
    const ketch_txn_result *t = &res->txn;
    if (err) {
      recipe_fail(s, err, res->message);
    } else if (t->n_responses < 1 || (!t->succeeded && t->responses[0].range.n_kvs == 0)) {
      recipe_fail(s, KETCH_EINTERNAL, "ketch-grpc: unexpected txn answer");
    } else {
      op->have_key = true;
      op->hdr = res->header;
      op->rev = t->succeeded ? res->header.revision : t->responses[0].range.kvs[0].create_revision;
      if (s->method == S_LOCK) {
        const ketch_range_result *owner = t->n_responses > 1 ? &t->responses[1].range : NULL;
        if (!owner || owner->n_kvs == 0 || owner->kvs[0].create_revision == op->rev)
          recipe_acquired(s);
        else
          wait_deletes(s);
      } else if (!t->succeeded && (t->responses[0].range.kvs[0].value_len != op->value_len ||
                                   (op->value_len && memcmp(t->responses[0].range.kvs[0].value,
                                                            op->value, op->value_len)))) {
        ketch_compare c = {.result = KETCH_CMP_EQUAL,
                           .target = KETCH_CMP_CREATE,
                           .key = op->key,
                           .key_len = op->key_len,
                           .int_value = op->rev};
        ketch_op put = ketch_op_put((ketch_put_req){.key = op->key,
                                                    .key_len = op->key_len,
                                                    .value = op->value,
                                                    .value_len = op->value_len,
                                                    .lease = op->lease});
        ketch_txn_req q = {.compare = &c, .n_compare = 1, .success = &put, .n_success = 1};
        int e = submit_ok(s, ketch_txn_async(s->kc, &q, on_campaign_proclaim, s));
        if (e) {
          recipe_give_up(s);
          recipe_fail(s, e, ketch_errmsg(s->kc));
        }
      } else {
        wait_deletes(s);
      }
    }
  }
  stream_unref(s);
}

/* Lock / Campaign: create name/<lease hex> unless it exists. */
static int recipe_create(kt_bridge_stream *s) {
  struct rop *op = s->op;
  char buf[1024];
  ketch_compare c = {.result = KETCH_CMP_EQUAL,
                     .target = KETCH_CMP_CREATE,
                     .key = op->key,
                     .key_len = op->key_len,
                     .int_value = 0};
  ketch_range_req owner = prefix_req(op, buf, sizeof buf);
  by_create(&owner, KETCH_SORT_ASCEND);
  ketch_op ok[2] = {ketch_op_put((ketch_put_req){.key = op->key,
                                                 .key_len = op->key_len,
                                                 .value = op->value,
                                                 .value_len = op->value_len,
                                                 .lease = op->lease}),
                    ketch_op_range(owner)};
  ketch_op ko[2] = {ketch_op_range((ketch_range_req){.key = op->key, .key_len = op->key_len}),
                    ketch_op_range(owner)};
  size_t n = s->method == S_LOCK ? 2 : 1;
  ketch_txn_req q = {
      .compare = &c, .n_compare = 1, .success = ok, .n_success = n, .failure = ko, .n_failure = n};
  return submit_ok(s, ketch_txn_async(s->kc, &q, on_create_txn, s));
}

static int rop_key(struct rop *op, const ProtobufCBinaryData *name, int64_t lease) {
  char hex[24];
  int hn = snprintf(hex, sizeof hex, "%llx", (unsigned long long)lease);
  op->name = dup_bytes(name->data, name->len);
  op->name_len = name->len;
  op->key_len = name->len + 1 + (size_t)hn;
  op->key = malloc(op->key_len);
  if (!op->name || !op->key)
    return KETCH_ENOMEM;
  if (name->len) /* an empty name has no data pointer */
    memcpy(op->key, name->data, name->len);
  op->key[name->len] = '/';
  memcpy(op->key + name->len + 1, hex, (size_t)hn);
  op->lease = lease;
  return 0;
}

/* A LeaderKey (Proclaim, Resign): its key and create revision. */
static int rop_leader(struct rop *op, const V3electionpb__LeaderKey *lk) {
  op->key = dup_bytes(lk->key.data, lk->key.len);
  op->key_len = lk->key.len;
  op->rev = lk->rev;
  op->lease = lk->lease;
  return op->key ? 0 : KETCH_ENOMEM;
}

static void recipe_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  if (s->op) { /* one request per call (all are unary or server-streaming) */
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: expected exactly one request message");
    return;
  }
  struct rop *op = calloc(1, sizeof *op);
  if (!op) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return;
  }
  s->op = op;
  ProtobufCMessage *m = NULL;
  int err = 0;
  const char *fail_msg = NULL;
  switch (s->method) {
  case S_LOCK: {
    V3lockpb__LockRequest *r = v3lockpb__lock_request__unpack(NULL, len, msg);
    m = (ProtobufCMessage *)r;
    if (r && !(err = rop_key(op, &r->name, r->lease)))
      err = recipe_create(s);
    break;
  }
  case S_CAMPAIGN: {
    V3electionpb__CampaignRequest *r = v3electionpb__campaign_request__unpack(NULL, len, msg);
    m = (ProtobufCMessage *)r;
    if (r && !(err = rop_key(op, &r->name, r->lease))) {
      op->value = dup_bytes(r->value.data, r->value.len);
      op->value_len = r->value.len;
      err = op->value ? recipe_create(s) : KETCH_ENOMEM;
    }
    break;
  }
  case S_UNLOCK: {
    V3lockpb__UnlockRequest *r = v3lockpb__unlock_request__unpack(NULL, len, msg);
    m = (ProtobufCMessage *)r;
    if (r) {
      ketch_delete_req d = {.key = r->key.data, .key_len = r->key.len};
      err = submit_ok(s, ketch_delete_async(s->kc, &d, on_simple, s));
    }
    break;
  }
  case S_PROCLAIM:
  case S_RESIGN: {
    V3electionpb__ProclaimRequest *p = NULL;
    V3electionpb__ResignRequest *r = NULL;
    const V3electionpb__LeaderKey *lk;
    if (s->method == S_PROCLAIM) {
      p = v3electionpb__proclaim_request__unpack(NULL, len, msg);
      m = (ProtobufCMessage *)p;
      lk = p ? p->leader : NULL;
    } else {
      r = v3electionpb__resign_request__unpack(NULL, len, msg);
      m = (ProtobufCMessage *)r;
      lk = r ? r->leader : NULL;
    }
    if (!m)
      break;
    if (!lk) {
      fail_msg = err_missing_leader;
      break;
    }
    if ((err = rop_leader(op, lk)))
      break;
    ketch_compare c = {.result = KETCH_CMP_EQUAL,
                       .target = KETCH_CMP_CREATE,
                       .key = op->key,
                       .key_len = op->key_len,
                       .int_value = op->rev};
    ketch_op o = p ? ketch_op_put((ketch_put_req){.key = op->key,
                                                  .key_len = op->key_len,
                                                  .value = p->value.data,
                                                  .value_len = p->value.len,
                                                  .lease = op->lease})
                   : ketch_op_delete((ketch_delete_req){.key = op->key, .key_len = op->key_len});
    ketch_txn_req q = {.compare = &c, .n_compare = 1, .success = &o, .n_success = 1};
    err = submit_ok(s, ketch_txn_async(s->kc, &q, on_simple, s));
    break;
  }
  case S_LEADER:
  case S_OBSERVE: {
    V3electionpb__LeaderRequest *r = v3electionpb__leader_request__unpack(NULL, len, msg);
    m = (ProtobufCMessage *)r;
    if (!r)
      break;
    op->name = dup_bytes(r->name.data, r->name.len);
    op->name_len = r->name.len;
    if (!op->name) {
      err = KETCH_ENOMEM;
    } else if (s->method == S_OBSERVE) {
      observe_start(s);
    } else {
      char buf[1024];
      ketch_range_req q = prefix_req(op, buf, sizeof buf);
      by_create(&q, KETCH_SORT_ASCEND);
      err = submit_ok(s, ketch_range_async(s->kc, &q, on_leader, s));
    }
    break;
  }
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  if (!m)
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
  else if (fail_msg)
    stream_finish(s, KT_GRPC_UNKNOWN, fail_msg);
  else if (err)
    recipe_fail(s, err, ketch_errmsg(s->kc));
}

/* ---- Maintenance.Snapshot: bridge_snap.c ---- */

static void snapshot_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  Etcdserverpb__SnapshotRequest *r = etcdserverpb__snapshot_request__unpack(NULL, len, msg);
  if (!r) {
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
    return;
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
  if (s->snapshot_started)
    return; /* a server stream takes one request */
  s->snapshot_started = true;
  int st = 0;
  const char *m = NULL;
  s->snap = kt_bridge_snap_start(s->kc, s->io, s->arg, &st, &m);
  if (!s->snap)
    stream_finish(s, st, m);
}

void kt_bridge_stream_room(kt_bridge_stream *s) {
  if (s && s->io && s->method == S_SNAPSHOT)
    kt_bridge_snap_room(s->snap);
}

/* ---- the stream ---- */

kt_bridge_stream *kt_bridge_stream_open(ketch_client *kc, const char *path,
                                        size_t max_request_bytes,
                                        const struct kt_bridge_stream_io *io, void *arg) {
  int method = -1;
  for (int i = 0; i < (int)(sizeof stream_methods / sizeof stream_methods[0]); i++)
    if (strcmp(path, stream_methods[i]) == 0)
      method = i;
  if (method < 0)
    return NULL;
  kt_bridge_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->kc = kc;
  s->method = method;
  s->io = io;
  s->arg = arg;
  s->refs = 1;
  s->fragment_bytes = max_request_bytes + GRPC_OVERHEAD_BYTES;
  if (method == S_WATCH && !(s->ws = kt_bridge_watch_open(kc, s->fragment_bytes, io, arg))) {
    free(s);
    return NULL;
  }
  return s;
}

void kt_bridge_stream_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  if (s->finished || !s->io)
    return;
  if (s->method == S_WATCH)
    kt_bridge_watch_recv(s->ws, msg, len);
  else if (s->method == S_KEEPALIVE)
    keepalive_recv(s, msg, len);
  else if (s->method == S_SNAPSHOT)
    snapshot_recv(s, msg, len);
  else
    recipe_recv(s, msg, len);
}

void kt_bridge_stream_eof(kt_bridge_stream *s) {
  if (s->eof || !s->io)
    return;
  s->eof = true;
  if (s->method == S_KEEPALIVE && s->pending == 0)
    stream_finish(s, KT_GRPC_OK, "");
  else if (s->method == S_SNAPSHOT && !s->snapshot_started)
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: the request ended without a message");
  else if (s->method >= S_LOCK && s->method != S_SNAPSHOT && !s->op)
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: the request ended without a message");
}

void kt_bridge_stream_close(kt_bridge_stream *s) {
  if (!s)
    return;
  s->io = NULL;
  kt_bridge_watch_close(s->ws);
  s->ws = NULL;
  recipe_close(s);
  kt_bridge_snap_close(s->snap);
  s->snap = NULL;
  stream_unref(s);
}
