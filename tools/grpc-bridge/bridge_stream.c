/* tools/grpc-bridge/bridge_stream.c — etcd's streaming calls on libketch:
 * Watch.Watch (bidirectional: create / cancel / progress requests in, watch
 * responses out) and Lease.LeaseKeepAlive (bidirectional: each {ID} in, one
 * {header, ID, TTL} out). See bridge.h for the server side (kt_bridge_stream_io).
 *
 * Owns: per gRPC stream a kt_bridge_stream; per gRPC watch a struct bwatch
 * holding exactly one ketch_watch.
 *
 * Watch data flow: WatchCreateRequest -> validated as etcd's v3rpc/mvcc do ->
 * ketch_watch(); each ketch delivery -> one WatchResponse (or several with
 * fragment=true when the client asked for fragments and it is larger than
 * etcd's limit) -> io->send. WatchCancelRequest -> ketch_watch_cancel(); the
 * canceled delivery answers it. WatchProgressRequest -> ketch_watch_progress()
 * and, once every created watch of the stream reported progress, one
 * WatchResponse{watch_id -1, header.revision = the smallest reported} (etcd
 * 3.4's shape).
 *
 * Watch ids are the bridge's, per gRPC stream, as etcd: auto ids count up
 * from 0 skipping ids in use; a client-chosen watch_id is used as given, and
 * one already in use is refused with etcd's created+canceled response.
 *
 * Back pressure (the rule of bridge.h): a delivery with events that does not
 * fit io->room() cancels that watch with cancel_reason "ketch-grpc: watcher
 * too slow..."; a progress notification that does not fit is dropped.
 *
 * Lifetimes: a stream holds one reference for the server side (dropped by
 * kt_bridge_stream_close) and one per live bwatch and per pending ketch call;
 * it is freed at zero. A bwatch lives until its canceled delivery (ketch
 * promises exactly one, last). */
#include "bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grpc/grpc_client.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"

#define MAX_WATCHES_PER_STREAM 4096
#define GRPC_OVERHEAD_BYTES (512u * 1024)

enum { S_WATCH, S_KEEPALIVE };

struct bwatch;

struct kt_bridge_stream {
  ketch_client *kc;
  int method;
  const struct kt_bridge_stream_io *io; /* NULL once closed */
  void *arg;
  int refs;
  bool eof, finished;
  size_t fragment_bytes; /* etcd's limit for a fragment */
  /* Watch */
  struct bwatch *watches;
  size_t n_watches;
  int64_t next_id;
  int progress_requests; /* WatchProgressRequests not answered yet */
  size_t progress_waiting;
  int64_t progress_rev;
  /* LeaseKeepAlive */
  size_t pending;
};

struct bwatch {
  struct kt_bridge_stream *s;
  struct bwatch *prev, *next;
  int64_t id;
  uint64_t handle;
  bool fragment, progress_notify;
  bool created;          /* ketch delivered `created` */
  bool cancel_requested; /* the client sent WatchCancelRequest */
  bool overflow;         /* canceled by the bridge: the client is too slow */
  bool progress_pending; /* must report progress for a WatchProgressRequest */
};

/* The newest header ketch delivered (any stream): final deliveries carry
 * none, and etcd's cancel responses still name the term and revision. */
static ketch_header last_hdr;

static void note_header(const ketch_header *h) {
  if (h->revision >= last_hdr.revision && h->raft_term)
    last_hdr = *h;
}

static void stream_unref(kt_bridge_stream *s) {
  if (--s->refs == 0)
    free(s);
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

static void fill_header(Etcdserverpb__ResponseHeader *h, const ketch_header *k, ketch_client *kc) {
  etcdserverpb__response_header__init(h);
  h->cluster_id = k && k->cluster_id ? k->cluster_id : ketch_cluster_id(kc);
  h->member_id = k && k->member_id ? k->member_id : ketch_member_id(kc);
  h->revision = k ? k->revision : 0;
  h->raft_term = k ? k->raft_term : 0;
}

static void fill_kv(Mvccpb__KeyValue *o, const ketch_kv *kv) {
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

/* ---- Watch ---- */

static struct bwatch *find_watch(kt_bridge_stream *s, int64_t id) {
  for (struct bwatch *w = s->watches; w; w = w->next)
    if (w->id == id)
      return w;
  return NULL;
}

/* A control response: created / canceled, no events. */
static void send_ctrl(kt_bridge_stream *s, const ketch_header *kh, int64_t id, bool created,
                      bool canceled, int64_t compact_revision, const char *reason) {
  Etcdserverpb__ResponseHeader h;
  Etcdserverpb__WatchResponse r;
  fill_header(&h, kh, s->kc);
  etcdserverpb__watch_response__init(&r);
  r.header = &h;
  r.watch_id = id;
  r.created = created;
  r.canceled = canceled;
  r.compact_revision = compact_revision;
  r.cancel_reason = (char *)(reason ? reason : "");
  send_msg(s, &r);
}

static void progress_report(kt_bridge_stream *s, int64_t rev);

static void watch_unlink(struct bwatch *w) {
  kt_bridge_stream *s = w->s;
  if (w->prev)
    w->prev->next = w->next;
  else
    s->watches = w->next;
  if (w->next)
    w->next->prev = w->prev;
  s->n_watches--;
  if (w->progress_pending) {
    w->progress_pending = false;
    progress_report(s, INT64_MAX);
  }
}

/* One watch's progress for a pending WatchProgressRequest (INT64_MAX: the
 * watch went away). Sends the stream's answer once every watch reported. */
static void progress_report(kt_bridge_stream *s, int64_t rev) {
  if (rev < s->progress_rev)
    s->progress_rev = rev;
  if (--s->progress_waiting > 0)
    return;
  ketch_header kh = {0};
  kh.revision = s->progress_rev == INT64_MAX ? 0 : s->progress_rev;
  for (; s->progress_requests > 0; s->progress_requests--)
    send_ctrl(s, &kh, -1, false, false, 0, NULL);
}

/* Sends the events of one delivery, fragmented as etcd's sendFragments when
 * the watch asked for it. Returns false if it did not fit (nothing sent). */
static bool send_events(kt_bridge_stream *s, struct bwatch *w, const ketch_result *res) {
  const ketch_watch_result *wr = &res->watch;
  size_t n = wr->n_events;
  Etcdserverpb__ResponseHeader h;
  Etcdserverpb__WatchResponse r;
  Mvccpb__Event *ev = calloc(n, sizeof *ev);
  Mvccpb__Event **evp = calloc(n, sizeof *evp);
  Mvccpb__KeyValue *kv = calloc(2 * n, sizeof *kv);
  bool ok = true;
  if (!ev || !evp || !kv) {
    free(ev);
    free(evp);
    free(kv);
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return true;
  }
  for (size_t i = 0; i < n; i++) {
    const ketch_event *e = &wr->events[i];
    mvccpb__event__init(&ev[i]);
    ev[i].type = e->type == KETCH_EVENT_DELETE ? MVCCPB__EVENT__EVENT_TYPE__DELETE
                                               : MVCCPB__EVENT__EVENT_TYPE__PUT;
    fill_kv(&kv[2 * i], &e->kv);
    ev[i].kv = &kv[2 * i];
    if (e->prev_kv) {
      fill_kv(&kv[2 * i + 1], e->prev_kv);
      ev[i].prev_kv = &kv[2 * i + 1];
    }
    evp[i] = &ev[i];
  }
  fill_header(&h, &res->header, s->kc);
  etcdserverpb__watch_response__init(&r);
  r.header = &h;
  r.watch_id = w->id;
  r.events = evp;
  r.n_events = n;
  size_t total = etcdserverpb__watch_response__get_packed_size(&r);
  if (!s->io->room(s->arg, total + 5)) {
    ok = false;
  } else if (!w->fragment || total < s->fragment_bytes || n < 2) {
    send_msg(s, &r);
  } else {
    /* etcd's sendFragments: as many events as fit under the limit (at least
     * one) per response, fragment=true on all but the last. */
    size_t idx = 0;
    while (idx < n) {
      size_t k = 1;
      r.events = evp + idx;
      for (; idx + k < n; k++) {
        r.n_events = k + 1;
        if (etcdserverpb__watch_response__get_packed_size(&r) >= s->fragment_bytes)
          break;
      }
      r.n_events = k;
      idx += k;
      r.fragment = idx < n;
      send_msg(s, &r);
    }
  }
  free(ev);
  free(evp);
  free(kv);
  return ok;
}

static void on_watch(void *arg, int err, const ketch_result *res) {
  struct bwatch *w = arg;
  kt_bridge_stream *s = w->s;
  const ketch_watch_result *wr = &res->watch;
  bool live = s->io && !s->finished;
  if (err || wr->canceled) {
    /* The last delivery of this watch (its header is empty). */
    if (live && !w->overflow) {
      ketch_header h = last_hdr;
      if (w->cancel_requested) {
        send_ctrl(s, &h, w->id, false, true, 0, NULL);
      } else if (err == KETCH_ECOMPACTED || wr->compact_revision) {
        h.revision = 0; /* as etcd's compacted response */
        if (!w->created)
          send_ctrl(s, &last_hdr, w->id, true, false, 0, NULL);
        send_ctrl(s, &h, w->id, false, true, wr->compact_revision, NULL);
      } else {
        int st;
        const char *m = kt_bridge_error(err ? err : KETCH_ECANCELED, res->message, &st);
        send_ctrl(s, &h, w->id, !w->created, true, 0, m);
      }
    }
    watch_unlink(w);
    free(w);
    stream_unref(s);
    return;
  }
  note_header(&res->header);
  if (!live || w->cancel_requested || w->overflow)
    return;
  if (wr->created) {
    w->created = true;
    send_ctrl(s, &res->header, w->id, true, false, 0, NULL);
  }
  if (wr->n_events > 0) {
    if (!send_events(s, w, res)) {
      char m[160];
      w->overflow = true;
      snprintf(m, sizeof m,
               "ketch-grpc: watcher too slow: its stream has more queued than the bridge "
               "holds (the client does not read); watch again from revision %lld",
               (long long)wr->events[0].kv.mod_revision);
      ketch_watch_cancel(s->kc, w->handle);
      send_ctrl(s, &res->header, w->id, false, true, 0, m);
    }
  } else if (!wr->created) { /* a progress notification */
    if (w->progress_pending) {
      w->progress_pending = false;
      progress_report(s, res->header.revision);
    }
    if (w->progress_notify && s->io->room(s->arg, 64))
      send_ctrl(s, &res->header, w->id, false, false, 0, NULL);
  }
}

static int64_t next_auto_id(kt_bridge_stream *s) {
  while (find_watch(s, s->next_id))
    s->next_id++;
  return s->next_id++;
}

static void watch_create(kt_bridge_stream *s, const Etcdserverpb__WatchCreateRequest *r) {
  static const uint8_t zero = 0;
  ketch_watch_req q;
  memset(&q, 0, sizeof q);
  q.key = r->key.len ? r->key.data : &zero; /* etcd: "\0" is the smallest key */
  q.key_len = r->key.len ? r->key.len : 1;
  q.range_end = r->range_end.data;
  q.range_end_len = r->range_end.len;
  q.start_revision = r->start_revision;
  q.prev_kv = r->prev_kv;
  q.progress_notify = r->progress_notify;
  q.fragment = false; /* the bridge fragments itself (ketch's deliveries have no flag) */
  for (size_t i = 0; i < r->n_filters; i++) {
    if (r->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT)
      q.no_put = true;
    else if (r->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE)
      q.no_delete = true;
  }
  /* mvcc's checks, with its messages. */
  bool from_key = q.range_end_len == 1 && ((const uint8_t *)q.range_end)[0] == 0;
  if (q.range_end_len && !from_key) {
    size_t m = q.key_len < q.range_end_len ? q.key_len : q.range_end_len;
    int c = memcmp(q.key, q.range_end, m);
    if (c > 0 || (c == 0 && q.key_len >= q.range_end_len)) {
      send_ctrl(s, NULL, -1, true, true, 0, "mvcc: watcher range is empty");
      return;
    }
  }
  if (r->watch_id != 0 && find_watch(s, r->watch_id)) {
    send_ctrl(s, NULL, -1, true, true, 0, "mvcc: duplicate watch ID provided on the WatchStream");
    return;
  }
  if (s->n_watches >= MAX_WATCHES_PER_STREAM) {
    send_ctrl(s, NULL, -1, true, true, 0,
              "ketch-grpc: too many watches on one stream (4096); open another stream");
    return;
  }
  struct bwatch *w = calloc(1, sizeof *w);
  if (!w) {
    send_ctrl(s, NULL, -1, true, true, 0, "ketch-grpc: out of memory");
    return;
  }
  w->s = s;
  w->id = r->watch_id != 0 ? r->watch_id : next_auto_id(s);
  w->fragment = r->fragment;
  w->progress_notify = r->progress_notify;
  int err = ketch_watch(s->kc, &q, on_watch, w, &w->handle);
  if (err) {
    int st;
    const char *m = kt_bridge_error(err, ketch_errmsg(s->kc), &st);
    send_ctrl(s, NULL, -1, true, true, 0, m);
    free(w);
    return;
  }
  w->next = s->watches;
  if (s->watches)
    s->watches->prev = w;
  s->watches = w;
  s->n_watches++;
  s->refs++;
}

static void on_progress_status(void *arg, int err, const ketch_result *res) {
  kt_bridge_stream *s = arg;
  if (s->io) {
    s->io->pending(s->arg, -1);
    if (!err)
      send_ctrl(s, &res->header, -1, false, false, 0, NULL);
  }
  stream_unref(s);
}

static void watch_progress(kt_bridge_stream *s) {
  size_t n = 0;
  for (struct bwatch *w = s->watches; w; w = w->next) {
    if (w->created && !w->cancel_requested && !w->overflow && !w->progress_pending) {
      w->progress_pending = true;
      n++;
    }
  }
  if (n == 0 && s->progress_waiting == 0) {
    /* No watch to wait for: the member's current revision (a status call). */
    if (ketch_status_async(s->kc, on_progress_status, s) == 0) {
      s->refs++;
      s->io->pending(s->arg, +1);
    }
    return;
  }
  if (s->progress_waiting == 0)
    s->progress_rev = INT64_MAX;
  s->progress_waiting += n;
  s->progress_requests++;
  ketch_watch_progress(s->kc);
}

static void watch_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  Etcdserverpb__WatchRequest *r = etcdserverpb__watch_request__unpack(NULL, len, msg);
  if (!r) {
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
    return;
  }
  switch (r->request_union_case) {
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST:
    watch_create(s, r->create_request);
    break;
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST: {
    struct bwatch *w = find_watch(s, r->cancel_request->watch_id);
    if (w && !w->cancel_requested && !w->overflow) {
      w->cancel_requested = true;
      ketch_watch_cancel(s->kc, w->handle);
    }
    break;
  }
  case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST:
    watch_progress(s);
    break;
  default: /* etcd ignores what it does not know */
    break;
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---- LeaseKeepAlive ---- */

struct ka_call {
  kt_bridge_stream *s;
  int64_t id;
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
      fill_header(&h, err ? &last_hdr : &res->header, s->kc);
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

static void keepalive_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  Etcdserverpb__LeaseKeepAliveRequest *r =
      etcdserverpb__lease_keep_alive_request__unpack(NULL, len, msg);
  if (!r) {
    stream_finish(s, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf");
    return;
  }
  int64_t id = r->id;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  struct ka_call *k = malloc(sizeof *k);
  if (!k) {
    stream_finish(s, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory");
    return;
  }
  k->s = s;
  k->id = id;
  int err = ketch_lease_keepalive_once_async(s->kc, id, on_keepalive, k);
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

/* ---- the stream ---- */

kt_bridge_stream *kt_bridge_stream_open(ketch_client *kc, const char *path,
                                        size_t max_request_bytes,
                                        const struct kt_bridge_stream_io *io, void *arg) {
  int method;
  if (strcmp(path, "/etcdserverpb.Watch/Watch") == 0)
    method = S_WATCH;
  else if (strcmp(path, "/etcdserverpb.Lease/LeaseKeepAlive") == 0)
    method = S_KEEPALIVE;
  else
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
  return s;
}

void kt_bridge_stream_recv(kt_bridge_stream *s, const uint8_t *msg, size_t len) {
  if (s->finished || !s->io)
    return;
  if (s->method == S_WATCH)
    watch_recv(s, msg, len);
  else
    keepalive_recv(s, msg, len);
}

void kt_bridge_stream_eof(kt_bridge_stream *s) {
  if (s->eof || !s->io)
    return;
  s->eof = true;
  if (s->method == S_KEEPALIVE && s->pending == 0)
    stream_finish(s, KT_GRPC_OK, "");
}

void kt_bridge_stream_close(kt_bridge_stream *s) {
  if (!s)
    return;
  s->io = NULL;
  for (struct bwatch *w = s->watches; w; w = w->next) {
    w->progress_pending = false;
    if (!w->cancel_requested && !w->overflow) {
      w->cancel_requested = true;
      ketch_watch_cancel(s->kc, w->handle);
    }
  }
  s->progress_waiting = 0;
  stream_unref(s);
}
