/* client/client.c — libketch: one connection, pipelined requests, failover.
 *
 * Owns: the handle (endpoints, the socket and its state machine, the request
 * slots, the output and input buffers, the arenas results are built in).
 *
 * Data flow: a submit converts the public request into a struct kt_req
 * (enc_arena), encodes its frame into the slot's own buffer (kept for a
 * resend) and, when the connection is ready, appends it to `out`.
 * ketch_process() writes `out` with one send(), reads what arrived into `in`,
 * splits frames, decodes each response (dec_arena), matches it to its slot by
 * id, builds the public ketch_result (res_arena, pointing into `in`; or a
 * heap block owned by the caller for a synchronous call) and runs the
 * callback. Deadlines and failover run in the same call.
 *
 * Streams. A watch (struct watch) is not a slot: it has no deadline and
 * lives across connections. Its WATCH_CREATE goes out on every connection
 * that reaches READY (id WATCH_BIT | seq | index), starting where the last
 * delivered event left it (see struct watch); its frames are filtered so
 * that nothing is delivered twice; its last delivery (canceled) runs from
 * deliver_finals() at the end of ketch_process(), never from a submit. A
 * kept-alive lease (struct keepalive) is a timer that submits an ordinary
 * LEASE_KEEPALIVE request (a read: resent after a reconnect) when due.
 * timers() runs both; their deadlines count in ketch_timeout_ms().
 *
 * Invariants:
 *   - A slot is either free (id == 0, on the free list) or pending (on the
 *     FIFO `pending` list in submission order). Since every request gets the
 *     same timeout, the list head has the earliest deadline.
 *   - A pending slot with `queued` has its frame in the current
 *     connection's output stream at offset out_start; bytes before out_base
 *     have been handed to the kernel. A queued write with out_base > out_start
 *     may have reached the server: it is never sent again.
 *   - Request id = (sequence << 24) | slot index; id 0 is the HELLO.
 *   - No callback runs from a submit function; in_cb guards re-entry.
 */
#include "ketch.h"

#include "../core/base.h"
#include "../net/proto.h"
#include "../net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#define SLOT_BITS 24 /* also: at most 2^24 watches' indexes (MAX_WATCHES is less) */
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define READ_CHUNK (64 * 1024)
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000

/* ST_TLS: the TLS handshake of an https:// endpoint, between connect and
 * HELLO. ST_AUTH: the connection's AUTHENTICATE is in flight (after HELLO
 * when the handle has credentials, or again when the member asked for it);
 * requests wait unsent, as while connecting. */
enum { ST_IDLE, ST_BACKOFF, ST_CONNECTING, ST_TLS, ST_HELLO, ST_AUTH, ST_READY };
#define AUTH_ID 1 /* the request id of the connection's AUTHENTICATE */
#define AUTH_TOKEN_MAX 1024
#define AUTH_OLD_TRIES 3 /* EAUTHOLDREVISION: a request is sent again this often */

struct endpoint {
  char *host, *port;
  char name[320]; /* "host:port" */
  int scheme;     /* 0 none, 1 http://, 2 https:// */
};

struct slot {
  uint64_t id; /* 0 = free */
  uint8_t type;
  bool is_read, keep, queued;
  bool doomed;                   /* a sent write on a lost connection: completes EUNKNOWN */
  bool stream;                   /* SNAPSHOT: cb runs per frame until the last one */
  uint8_t auth_tries, old_tries; /* sent again after an auth answer (auth_retry) */
  ketch_cb cb;
  void *arg;
  int64_t deadline_ms;
  uint64_t out_start;
  struct kt_buf frame;
  struct slot *prev, *next; /* pending list, or free list (next) */
  struct slot *dnext;       /* doomed list */
};

/* Watch streams and watch control frames do not use slots: their ids carry
 * WATCH_BIT (stream: WATCH_BIT | seq << 24 | watch index; control frames
 * WATCH_CANCEL / WATCH_PROGRESS: WATCH_BIT | CTRL_BIT | seq, answers ignored). */
#define WATCH_BIT (1ull << 62)
#define CTRL_BIT (1ull << 61)
#define MAX_WATCHES 65536
#define MAX_KEEPALIVES 65536
#define WATCH_RETRY_MAX 5 /* server refusals in a row before a watch gives up */

enum { W_UNSENT, W_SENT, W_ACTIVE, W_FINAL };

/* One watch (ketch_watch). Exactly-once bookkeeping: every event with
 * mod_revision <= done_rev was delivered; last_rev is the revision of the
 * last delivered event and n_at_last how many of its events were delivered;
 * mid_fragment: the last frame said the revision continues. A resumed stream
 * starts at last_rev (mid_fragment, skipping n_at_last events) or at
 * done_rev + 1. */
struct watch {
  uint64_t handle; /* public id; 0 = free entry */
  uint64_t req_id; /* stream id on the current connection, 0 = none */
  int64_t server_id;
  int state;
  bool created_delivered, cancel_wanted, cancel_sent, mid_fragment;
  uint8_t *key, *end; /* one allocation */
  uint32_t key_n, end_n;
  int64_t start_revision;
  bool prev_kv, no_put, no_delete, progress_notify, fragment;
  int64_t done_rev, last_rev, skip_rev;
  uint64_t n_at_last, skip_left;
  int retries;                /* refusals in a row (reset by created) */
  int64_t retry_at_ms;        /* UNSENT: not before (0 = at once) */
  int64_t cancel_deadline_ms; /* cancel sent: finish even without an answer */
  int final_err;
  int64_t compact_rev;
  ketch_header final_hdr; /* of the server's canceled frame, if any */
  char final_msg[200];
  ketch_cb cb;
  void *arg;
};

/* One lease kept alive by the library (ketch_lease_keepalive_start). */
struct keepalive {
  ketch_client *c;
  int64_t id, ttl_s; /* ttl_s: learned from the last renewal, 0 = not yet */
  int64_t next_ms, last_ok_ms, started_ms;
  bool in_flight, dead; /* dead: stopped or gone; freed when not in flight */
  int last_err;
  ketch_cb cb;
  void *arg;
};

/* A result owned by the caller (synchronous calls). res must stay first. */
struct owned_result {
  ketch_result res;
  struct kt_arena arena;
};

struct ketch_client {
  struct endpoint *eps;
  size_t n_eps, ep_idx;
  int dial_timeout_ms, request_timeout_ms;
  uint32_t max_outstanding;

  /* connection */
  struct kt_io io; /* the socket (io.fd, -1 when none), plain TCP or TLS */
  int state;
  struct kt_tls_ctx *tls; /* NULL: no endpoint uses TLS */
  bool tls_default;       /* endpoints without a scheme use TLS */
  char *server_name, *identity;
  struct addrinfo *ai_list, *ai_cur;
  int64_t conn_deadline_ms, backoff_until_ms;
  int backoff_ms;
  size_t fails_in_round; /* endpoint failures since the last HELLO */
  struct kt_buf out, in;
  uint64_t out_base; /* stream offset of out.p[0] = bytes sent on this conn */
  uint64_t cluster_id, member_id;
  uint32_t max_request_bytes;
  char server[64];

  /* requests */
  struct slot *slots;
  struct slot *free_list, *pend_head, *pend_tail;
  struct slot *doomed_head; /* sent writes of a lost connection, to fail */
  size_t n_pending;
  uint64_t seq;
  struct kt_arena enc_arena, dec_arena, res_arena;
  bool in_cb;

  /* watches (not in the pending list: a stream has no deadline) */
  struct watch **watches; /* index = low bits of the stream id */
  size_t n_watches, cap_watches, n_live_watches;
  uint64_t next_handle;
  bool finals_pending, progress_wanted, closing;

  /* keep-alives */
  struct keepalive **kas;
  size_t n_kas, cap_kas;
  int64_t ka_next_ms;    /* earliest next_ms of an idle live entry */
  int64_t watch_next_ms; /* earliest watch retry / cancel deadline */

  /* credentials (NULL: none); the token the last AUTHENTICATE answered;
   * token_only: a token given without a user (ketch_options.token) */
  char *user, *password;
  char token[AUTH_TOKEN_MAX];
  bool token_only;
  char *pend_user, *pend_password; /* ketch_authenticate_async in flight */
  bool auth_with_token, auth_again;
  int auth_err; /* the last authentication's outcome; -1 while in flight */
  char auth_msg[200];

  char errmsg[512];
  char round_err[1024]; /* why each endpoint failed in this round */

  /* ketch_open_srv: the records are looked up again (srv_refresh) before a
   * new connection when the last lookup is older than srv_interval_ms, and
   * after every endpoint of a round failed. NULL srv_domain: a fixed list. */
  char *srv_domain, *srv_suffix, *srv_dns;
  int srv_interval_ms;
  int64_t srv_next_ms;
  bool nonblocking;
};

/* ---- small things ---- */

const char *ketch_strerror(int err) { return kt_strerror(err); }
const char *ketch_errname(int err) { return kt_errname(err); }
const char *ketch_version(void) { return KETCH_VERSION; }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_errmsg(ketch_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_errmsg(ketch_client *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
}

size_t ketch_prefix_end(const void *prefix, size_t n, void *out) {
  const uint8_t *p = prefix;
  uint8_t *o = out;
  for (size_t i = n; i > 0; i--) {
    if (p[i - 1] < 0xff) {
      memcpy(o, p, i - 1);
      o[i - 1] = (uint8_t)(p[i - 1] + 1);
      return i;
    }
  }
  o[0] = 0;
  return 1;
}

void ketch_options_init(ketch_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->dial_timeout_ms = 2000;
  opts->request_timeout_ms = 5000;
  opts->max_outstanding = 4096;
}

/* ---- endpoints ---- */

static void copy_msg(char *dst, size_t dst_len, const char *src) {
  if (dst && dst_len)
    snprintf(dst, dst_len, "%s", src);
}

/* Parses one "[scheme://]host[:port][/]" of length n into *ep. */
static int parse_endpoint(const char *s, size_t n, struct endpoint *ep, char *why, size_t why_len) {
  char buf[300];
  while (n && (*s == ' ' || *s == '\t'))
    s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  ep->scheme = 0;
  if (n >= 7 && strncmp(s, "http://", 7) == 0)
    s += 7, n -= 7, ep->scheme = 1;
  else if (n >= 8 && strncmp(s, "https://", 8) == 0)
    s += 8, n -= 8, ep->scheme = 2;
  while (n && s[n - 1] == '/')
    n--;
  if (n == 0 || n >= sizeof buf) {
    copy_msg(why, why_len, "empty or overlong endpoint");
    return KETCH_EINVAL;
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  const char *host = buf, *port = NULL;
  if (buf[0] == '[') {
    char *end = strchr(buf, ']');
    if (!end || (end[1] && end[1] != ':')) {
      snprintf(why, why_len, "bad endpoint \"%s\": unterminated [ipv6]", buf);
      return KETCH_EINVAL;
    }
    *end = 0;
    host = buf + 1;
    if (end[1] == ':')
      port = end + 2;
  } else {
    char *colon = strchr(buf, ':');
    if (colon && strchr(colon + 1, ':')) {
      snprintf(why, why_len, "bad endpoint \"%s\": write IPv6 as [addr]:port", buf);
      return KETCH_EINVAL;
    }
    if (colon) {
      *colon = 0;
      port = colon + 1;
    }
  }
  char portbuf[8];
  if (!port || !*port) {
    snprintf(portbuf, sizeof portbuf, "%d", KETCH_DEFAULT_PORT);
    port = portbuf;
  }
  char *endp;
  long pn = strtol(port, &endp, 10);
  if (*endp || pn <= 0 || pn > 65535 || !*host) {
    snprintf(why, why_len, "bad endpoint \"%.*s\": want host:port", (int)n, s);
    return KETCH_EINVAL;
  }
  ep->host = strdup(host);
  ep->port = strdup(port);
  if (!ep->host || !ep->port)
    return KETCH_ENOMEM;
  if (strchr(host, ':'))
    snprintf(ep->name, sizeof ep->name, "[%s]:%s", host, port);
  else
    snprintf(ep->name, sizeof ep->name, "%s:%s", host, port);
  return 0;
}

/* ---- request slots ---- */

static void pend_unlink(ketch_client *c, struct slot *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    c->pend_head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    c->pend_tail = s->prev;
  s->prev = s->next = NULL;
  c->n_pending--;
}

static void slot_free(ketch_client *c, struct slot *s) {
  s->id = 0;
  s->cb = NULL;
  s->arg = NULL;
  s->queued = false;
  s->doomed = false;
  s->stream = false;
  kt_buf_reset(&s->frame);
  s->next = c->free_list;
  c->free_list = s;
}

/* ---- results ---- */

static const char *dup_str(struct kt_arena *a, const void *p, size_t n) {
  char *s = kt_arena_alloc(a, n + 1);
  if (n)
    memcpy(s, p, n);
  s[n] = 0;
  return s;
}

static const char *bytes_out(struct kt_arena *a, struct kt_bytes b, bool copy) {
  if (!copy)
    return (const char *)b.p;
  return b.n ? kt_arena_dup(a, b.p, b.n) : "";
}

static void kv_out(struct kt_arena *a, ketch_kv *o, const struct kt_kv *k, bool copy) {
  o->key = bytes_out(a, k->key, copy);
  o->key_len = k->key.n;
  o->value = bytes_out(a, k->value, copy);
  o->value_len = k->value.n;
  if (!o->value)
    o->value = "";
  if (!o->key)
    o->key = "";
  o->create_revision = k->create_revision;
  o->mod_revision = k->mod_revision;
  o->version = k->version;
  o->lease = k->lease;
}

static const ketch_kv *kvs_out(struct kt_arena *a, const struct kt_kv *k, uint32_t n, bool copy) {
  if (!n)
    return NULL;
  ketch_kv *o = kt_arena_alloc(a, sizeof *o * n);
  for (uint32_t i = 0; i < n; i++)
    kv_out(a, &o[i], &k[i], copy);
  return o;
}

/* Fills the union part of an op result. `o` is a ketch_op_result or the
 * matching prefix of a ketch_result's union (same member layout). */
static void op_out(struct kt_arena *a, ketch_op_result *o, const struct kt_response_op *r,
                   bool copy) {
  o->type = r->type;
  switch (r->type) {
  case KT_OP_RANGE:
    o->range.kvs = kvs_out(a, r->u.range.kvs, r->u.range.n_kvs, copy);
    o->range.n_kvs = r->u.range.n_kvs;
    o->range.more = r->u.range.more;
    o->range.count = r->u.range.count;
    break;
  case KT_OP_PUT:
    o->put.prev_kv = r->u.put.has_prev_kv ? kvs_out(a, &r->u.put.prev_kv, 1, copy) : NULL;
    break;
  case KT_OP_DELETE:
    o->del.deleted = r->u.del.deleted;
    o->del.prev_kvs = kvs_out(a, r->u.del.prev_kvs, r->u.del.n_prev_kvs, copy);
    o->del.n_prev_kvs = r->u.del.n_prev_kvs;
    break;
  case KT_OP_TXN: {
    uint32_t n = r->u.txn.n_responses;
    ketch_op_result *rs = n ? kt_arena_alloc(a, sizeof *rs * n) : NULL;
    for (uint32_t i = 0; i < n; i++) {
      memset(&rs[i], 0, sizeof rs[i]);
      op_out(a, &rs[i], &r->u.txn.responses[i], copy);
    }
    o->txn.succeeded = r->u.txn.succeeded;
    o->txn.responses = rs;
    o->txn.n_responses = n;
    break;
  }
  default:
    break;
  }
}

/* n byte strings (URLs, names) as NUL-terminated copies in a; NULL when none. */
static const char *const *strs_out(struct kt_arena *a, const struct kt_bytes *u, uint32_t n) {
  if (!n)
    return NULL;
  const char **o = kt_arena_alloc(a, sizeof *o * n);
  for (uint32_t i = 0; i < n; i++)
    o[i] = dup_str(a, u[i].p, u[i].n);
  return o;
}

static void member_out(struct kt_arena *a, ketch_member *o, const struct kt_member_info *m) {
  *o = (ketch_member){.id = m->id,
                      .name = dup_str(a, m->name.p, m->name.n),
                      .peer_urls = strs_out(a, m->peer_urls, m->n_peer_urls),
                      .n_peer_urls = m->n_peer_urls,
                      .client_urls = strs_out(a, m->client_urls, m->n_client_urls),
                      .n_client_urls = m->n_client_urls,
                      .is_learner = m->is_learner};
}

static void member_list_out(struct kt_arena *a, ketch_member_list_result *o,
                            const struct kt_member_info *v, uint32_t n,
                            const struct kt_member_info *added) {
  ketch_member *ms = n ? kt_arena_alloc(a, sizeof *ms * n) : NULL;
  for (uint32_t i = 0; i < n; i++)
    member_out(a, &ms[i], &v[i]);
  o->members = ms;
  o->n_members = n;
  o->added = NULL;
  if (added) {
    ketch_member *m = kt_arena_alloc(a, sizeof *m);
    member_out(a, m, added);
    o->added = m;
  }
}

static const char *const *dup_strs(struct kt_arena *a, const char *const *v, size_t n) {
  if (!n)
    return NULL;
  const char **o = kt_arena_alloc(a, sizeof *o * n);
  for (size_t i = 0; i < n; i++)
    o[i] = dup_str(a, v[i], strlen(v[i]));
  return o;
}

static void member_dup(struct kt_arena *a, ketch_member *o, const ketch_member *m) {
  *o = *m;
  o->name = dup_str(a, m->name, strlen(m->name));
  o->peer_urls = dup_strs(a, m->peer_urls, m->n_peer_urls);
  o->client_urls = dup_strs(a, m->client_urls, m->n_client_urls);
}

static void lease_out(struct kt_arena *a, ketch_lease_result *o, const struct kt_lease_resp *l) {
  o->id = l->id;
  o->ttl = l->ttl;
  o->granted_ttl = l->granted_ttl;
  if (l->n_keys) {
    ketch_kv *ks = kt_arena_alloc(a, sizeof *ks * l->n_keys);
    for (uint32_t i = 0; i < l->n_keys; i++) {
      memset(&ks[i], 0, sizeof ks[i]);
      ks[i].key = l->keys[i].n ? kt_arena_dup(a, l->keys[i].p, l->keys[i].n) : "";
      ks[i].key_len = l->keys[i].n;
      ks[i].value = "";
    }
    o->keys = ks;
    o->n_keys = l->n_keys;
  }
  if (l->n_leases) {
    o->leases = kt_arena_dup(a, l->leases, sizeof *l->leases * l->n_leases);
    o->n_leases = l->n_leases;
  }
}

static void auth_out(struct kt_arena *a, ketch_auth_result *o, const struct kt_auth_resp *r) {
  o->token = r->token.n ? dup_str(a, r->token.p, r->token.n) : NULL;
  o->enabled = r->enabled;
  o->auth_revision = r->auth_revision;
  o->users = strs_out(a, r->users, r->n_users);
  o->n_users = r->n_users;
  o->roles = strs_out(a, r->roles, r->n_roles);
  o->n_roles = r->n_roles;
  if (r->n_perms) {
    ketch_auth_perm *p = kt_arena_alloc(a, sizeof *p * r->n_perms);
    for (uint32_t i = 0; i < r->n_perms; i++) {
      const struct kt_auth_perm *x = &r->perms[i];
      p[i] = (ketch_auth_perm){x->type, dup_str(a, x->key.p, x->key.n), x->key.n,
                               dup_str(a, x->range_end.p, x->range_end.n), x->range_end.n};
    }
    o->perms = p;
    o->n_perms = r->n_perms;
  }
}

static void auth_dup(struct kt_arena *a, ketch_auth_result *o, const ketch_auth_result *r) {
  *o = *r;
  o->token = r->token ? dup_str(a, r->token, strlen(r->token)) : NULL;
  o->users = dup_strs(a, r->users, r->n_users);
  o->roles = dup_strs(a, r->roles, r->n_roles);
  if (r->n_perms) {
    ketch_auth_perm *p = kt_arena_alloc(a, sizeof *p * r->n_perms);
    for (size_t i = 0; i < r->n_perms; i++) {
      p[i] = r->perms[i];
      p[i].key = dup_str(a, r->perms[i].key, r->perms[i].key_len);
      p[i].range_end = dup_str(a, r->perms[i].range_end, r->perms[i].range_end_len);
    }
    o->perms = p;
  }
}

/* Builds the public result of resp (or of an error when err != 0) in arena a.
 * copy: duplicate every byte string (the result outlives the input buffer). */
static void result_build(struct kt_arena *a, ketch_result *res, uint8_t type, int err,
                         const char *msg, size_t msg_len, const struct kt_resp *resp, bool copy) {
  memset(res, 0, sizeof *res);
  res->type = type;
  res->err = err;
  res->message = err ? dup_str(a, msg, msg_len) : "";
  if (err || !resp)
    return;
  res->header.cluster_id = resp->header.cluster_id;
  res->header.member_id = resp->header.member_id;
  res->header.revision = resp->header.revision;
  res->header.raft_term = resp->header.raft_term;
  if (type >= KETCH_OP_LEASE_GRANT && type <= KETCH_OP_LEASE_LEASES) {
    lease_out(a, &res->lease, &resp->u.lease);
  } else if (type >= KETCH_OP_AUTH_ENABLE && type <= KETCH_OP_ROLE_REVOKE_PERMISSION) {
    auth_out(a, &res->auth, &resp->u.auth);
  } else if (type == KETCH_OP_ALARM && resp->u.alarm.n_alarms) {
    uint32_t n = resp->u.alarm.n_alarms;
    ketch_alarm_member *v = kt_arena_alloc(a, sizeof *v * n);
    for (uint32_t i = 0; i < n; i++)
      v[i] = (ketch_alarm_member){resp->u.alarm.alarms[i].member_id, resp->u.alarm.alarms[i].alarm};
    res->alarm.alarms = v;
    res->alarm.n_alarms = n;
  } else if (type == KETCH_OP_HASH_KV) {
    res->hash_kv.hash = resp->u.hash_kv.hash;
    res->hash_kv.compact_revision = resp->u.hash_kv.compact_revision;
    res->hash_kv.hash_revision = resp->u.hash_kv.hash_revision;
  } else if (type == KETCH_OP_SNAPSHOT) {
    res->snapshot.blob_len = resp->u.snapshot.blob.n;
    res->snapshot.blob = copy && resp->u.snapshot.blob.n
                             ? kt_arena_dup(a, resp->u.snapshot.blob.p, resp->u.snapshot.blob.n)
                             : resp->u.snapshot.blob.p;
    res->snapshot.remaining_bytes = resp->u.snapshot.remaining_bytes;
  } else if (type == KETCH_OP_MEMBER_LIST) {
    member_list_out(a, &res->member_list, resp->u.member_list.members,
                    resp->u.member_list.n_members, NULL);
  } else if (type >= KETCH_OP_MEMBER_ADD && type <= KETCH_OP_MEMBER_PROMOTE) {
    member_list_out(a, &res->member_list, resp->u.member.members, resp->u.member.n_members,
                    type == KETCH_OP_MEMBER_ADD ? &resp->u.member.member : NULL);
  } else if (type == KETCH_OP_STATUS) {
    const struct kt_status_resp *s = &resp->u.status;
    ketch_status_result *o = &res->status;
    o->version = dup_str(a, s->version.p, s->version.n);
    o->db_size = s->db_size;
    o->db_size_in_use = s->db_size_in_use;
    o->leader = s->leader;
    o->raft_index = s->raft_index;
    o->raft_term = s->raft_term;
    o->raft_applied_index = s->raft_applied_index;
    o->is_learner = s->is_learner;
    if (s->n_errors) {
      const char **e = kt_arena_alloc(a, sizeof *e * s->n_errors);
      for (uint32_t i = 0; i < s->n_errors; i++)
        e[i] = dup_str(a, s->errors[i].p, s->errors[i].n);
      o->errors = e;
      o->n_errors = s->n_errors;
    }
  } else if (type >= KETCH_OP_RANGE && type <= KETCH_OP_TXN) {
    ketch_op_result tmp;
    memset(&tmp, 0, sizeof tmp);
    op_out(a, &tmp, &resp->u.op, copy);
    switch (type) {
    case KETCH_OP_RANGE:
      res->range = tmp.range;
      break;
    case KETCH_OP_PUT:
      res->put = tmp.put;
      break;
    case KETCH_OP_DELETE:
      res->del = tmp.del;
      break;
    default:
      res->txn = tmp.txn;
      break;
    }
  }
}

static const char *dup_bytes(struct kt_arena *a, const char *p, size_t n) {
  return n ? kt_arena_dup(a, p, n) : "";
}

static const ketch_kv *dup_kvs(struct kt_arena *a, const ketch_kv *kv, size_t n) {
  if (!kv || !n)
    return NULL;
  ketch_kv *o = kt_arena_alloc(a, sizeof *o * n);
  for (size_t i = 0; i < n; i++) {
    o[i] = kv[i];
    o[i].key = dup_bytes(a, kv[i].key, kv[i].key_len);
    o[i].value = dup_bytes(a, kv[i].value, kv[i].value_len);
  }
  return o;
}

/* Deep-copies the union member named by type (same layout in ketch_result
 * and ketch_op_result for RANGE..TXN). */
static void dup_op(struct kt_arena *a, ketch_op_result *o, const ketch_op_result *r) {
  *o = *r;
  switch (r->type) {
  case KETCH_OP_RANGE:
    o->range.kvs = dup_kvs(a, r->range.kvs, r->range.n_kvs);
    break;
  case KETCH_OP_PUT:
    o->put.prev_kv = dup_kvs(a, r->put.prev_kv, 1);
    break;
  case KETCH_OP_DELETE:
    o->del.prev_kvs = dup_kvs(a, r->del.prev_kvs, r->del.n_prev_kvs);
    break;
  case KETCH_OP_TXN: {
    size_t n = r->txn.n_responses;
    ketch_op_result *rs = n ? kt_arena_alloc(a, sizeof *rs * n) : NULL;
    for (size_t i = 0; i < n; i++)
      dup_op(a, &rs[i], &r->txn.responses[i]);
    o->txn.responses = rs;
    break;
  }
  default:
    break;
  }
}

ketch_result *ketch_result_dup(const ketch_result *res) {
  struct owned_result *o = calloc(1, sizeof *o);
  if (!o)
    return NULL;
  struct kt_arena *a = &o->arena;
  ketch_result *d = &o->res;
  d->type = res->type;
  d->err = res->err;
  d->header = res->header;
  d->message = dup_str(a, res->message, strlen(res->message));
  if (res->err)
    return d;
  if (res->type >= KETCH_OP_LEASE_GRANT && res->type <= KETCH_OP_LEASE_LEASES) {
    d->lease = res->lease;
    d->lease.keys = dup_kvs(a, res->lease.keys, res->lease.n_keys);
    d->lease.leases =
        res->lease.n_leases
            ? kt_arena_dup(a, res->lease.leases, sizeof *res->lease.leases * res->lease.n_leases)
            : NULL;
  } else if (res->type == KETCH_OP_ALARM) {
    d->alarm = res->alarm;
    d->alarm.alarms =
        res->alarm.n_alarms
            ? kt_arena_dup(a, res->alarm.alarms, sizeof *res->alarm.alarms * res->alarm.n_alarms)
            : NULL;
  } else if (res->type >= KETCH_OP_AUTH_ENABLE && res->type <= KETCH_OP_ROLE_REVOKE_PERMISSION) {
    auth_dup(a, &d->auth, &res->auth);
  } else if (res->type == KETCH_OP_HASH_KV) {
    d->hash_kv = res->hash_kv;
  } else if (res->type == KETCH_OP_SNAPSHOT) {
    d->snapshot = res->snapshot;
    d->snapshot.blob =
        res->snapshot.blob_len ? kt_arena_dup(a, res->snapshot.blob, res->snapshot.blob_len) : NULL;
  } else if (res->type == KETCH_OP_WATCH) {
    d->watch = res->watch;
    size_t n = res->watch.n_events;
    ketch_event *ev = n ? kt_arena_alloc(a, sizeof *ev * n) : NULL;
    for (size_t i = 0; i < n; i++) {
      const ketch_event *e = &res->watch.events[i];
      ev[i].type = e->type;
      ev[i].kv = e->kv;
      ev[i].kv.key = dup_bytes(a, e->kv.key, e->kv.key_len);
      ev[i].kv.value = dup_bytes(a, e->kv.value, e->kv.value_len);
      ev[i].prev_kv = e->prev_kv ? dup_kvs(a, e->prev_kv, 1) : NULL;
    }
    d->watch.events = ev;
  } else if (res->type == KETCH_OP_MEMBER_LIST ||
             (res->type >= KETCH_OP_MEMBER_ADD && res->type <= KETCH_OP_MEMBER_PROMOTE)) {
    size_t n = res->member_list.n_members;
    ketch_member *ms = n ? kt_arena_alloc(a, sizeof *ms * n) : NULL;
    for (size_t i = 0; i < n; i++)
      member_dup(a, &ms[i], &res->member_list.members[i]);
    d->member_list.members = ms;
    d->member_list.n_members = n;
    d->member_list.added = NULL;
    if (res->member_list.added) {
      ketch_member *m = kt_arena_alloc(a, sizeof *m);
      member_dup(a, m, res->member_list.added);
      d->member_list.added = m;
    }
  } else if (res->type == KETCH_OP_STATUS) {
    d->status = res->status;
    d->status.version = dup_str(a, res->status.version, strlen(res->status.version));
    if (res->status.n_errors) {
      const char **e = kt_arena_alloc(a, sizeof *e * res->status.n_errors);
      for (size_t i = 0; i < res->status.n_errors; i++)
        e[i] = dup_str(a, res->status.errors[i], strlen(res->status.errors[i]));
      d->status.errors = e;
    }
  } else if (res->type >= KETCH_OP_RANGE && res->type <= KETCH_OP_TXN) {
    ketch_op_result in, out;
    memset(&in, 0, sizeof in);
    in.type = res->type;
    if (res->type == KETCH_OP_RANGE)
      in.range = res->range;
    else if (res->type == KETCH_OP_PUT)
      in.put = res->put;
    else if (res->type == KETCH_OP_DELETE)
      in.del = res->del;
    else
      in.txn = res->txn;
    dup_op(a, &out, &in);
    if (res->type == KETCH_OP_RANGE)
      d->range = out.range;
    else if (res->type == KETCH_OP_PUT)
      d->put = out.put;
    else if (res->type == KETCH_OP_DELETE)
      d->del = out.del;
    else
      d->txn = out.txn;
  }
  return d;
}

void ketch_result_free(ketch_result *res) {
  if (!res)
    return;
  struct owned_result *o = (struct owned_result *)res;
  kt_arena_free(&o->arena);
  free(o);
}

/* Completes a pending slot: unlinks it, frees it, runs its callback with the
 * result of resp (err == 0) or with err and msg. */
static void auth_async_done(ketch_client *c, int err, const struct kt_resp *resp);

static void complete(ketch_client *c, struct slot *s, int err, const char *msg, size_t msg_len,
                     const struct kt_resp *resp) {
  ketch_cb cb = s->cb;
  void *arg = s->arg;
  uint8_t type = s->type;
  bool keep = s->keep;
  if (s->stream && err == KETCH_EUNKNOWN) { /* a transfer is never resumed elsewhere */
    err = KETCH_ECLOSED;
    msg = "connection lost during the snapshot transfer";
    msg_len = strlen(msg);
  }
  pend_unlink(c, s);
  slot_free(c, s);
  if (type == KT_MSG_AUTHENTICATE)
    auth_async_done(c, err, resp);
  if (!msg) {
    msg = kt_strerror(err);
    msg_len = strlen(msg);
  }
  bool was_in_cb = c->in_cb;
  c->in_cb = true;
  if (keep) {
    struct owned_result *o = calloc(1, sizeof *o);
    if (!o)
      kt_panic(__FILE__, __LINE__, "out of memory");
    result_build(&o->arena, &o->res, type, err, msg, msg_len, resp, true);
    cb(arg, err, &o->res); /* the internal sync callback takes ownership */
  } else {
    ketch_result res;
    result_build(&c->res_arena, &res, type, err, msg, msg_len, resp, false);
    cb(arg, err, &res);
    kt_arena_reset(&c->res_arena);
  }
  c->in_cb = was_in_cb;
}

/* ---- encoding requests ---- */

static int bytes_in(struct kt_bytes *b, const void *p, size_t n) {
  if (n > UINT32_MAX || (n && !p))
    return KETCH_EINVAL;
  b->p = n ? p : (const uint8_t *)"";
  b->n = (uint32_t)n;
  return 0;
}

static const uint8_t zero_byte[1] = {0};

/* key/range_end with the prefix / from_key helpers applied. */
static int range_in(struct kt_arena *a, struct kt_bytes *key, struct kt_bytes *end, const void *k,
                    size_t kn, const void *e, size_t en, bool prefix, bool from_key) {
  if (bytes_in(key, k, kn) || bytes_in(end, e, en))
    return KETCH_EINVAL;
  if (!prefix && !from_key)
    return 0;
  if ((prefix && from_key) || en)
    return KETCH_EINVAL;
  if (kn == 0) { /* all keys */
    key->p = zero_byte;
    key->n = 1;
    end->p = zero_byte;
    end->n = 1;
    return 0;
  }
  if (from_key) {
    end->p = zero_byte;
    end->n = 1;
    return 0;
  }
  uint8_t *o = kt_arena_alloc(a, kn);
  end->n = (uint32_t)ketch_prefix_end(k, kn, o);
  end->p = o;
  return 0;
}

static int op_in(struct kt_arena *a, struct kt_request_op *o, const ketch_op *op, int depth,
                 bool *is_read);

static int range_req_in(struct kt_arena *a, struct kt_range_req *r, const ketch_range_req *q) {
  memset(r, 0, sizeof *r);
  if (!q || q->sort_order < 0 || q->sort_order > KETCH_SORT_DESCEND || q->sort_target < 0 ||
      q->sort_target > KETCH_SORT_VALUE || q->limit < 0)
    return KETCH_EINVAL;
  int err = range_in(a, &r->key, &r->range_end, q->key, q->key_len, q->range_end, q->range_end_len,
                     q->prefix, q->from_key);
  if (err)
    return err;
  r->limit = q->limit;
  r->revision = q->revision;
  r->sort_order = (uint8_t)q->sort_order;
  r->sort_target = (uint8_t)q->sort_target;
  r->serializable = q->serializable;
  r->keys_only = q->keys_only;
  r->count_only = q->count_only;
  r->min_mod_revision = q->min_mod_revision;
  r->max_mod_revision = q->max_mod_revision;
  r->min_create_revision = q->min_create_revision;
  r->max_create_revision = q->max_create_revision;
  return 0;
}

static int put_req_in(struct kt_put_req *r, const ketch_put_req *q) {
  memset(r, 0, sizeof *r);
  if (!q || bytes_in(&r->key, q->key, q->key_len) || bytes_in(&r->value, q->value, q->value_len))
    return KETCH_EINVAL;
  r->lease = q->lease;
  r->prev_kv = q->prev_kv;
  r->ignore_value = q->ignore_value;
  r->ignore_lease = q->ignore_lease;
  return 0;
}

static int delete_req_in(struct kt_arena *a, struct kt_delete_req *r, const ketch_delete_req *q) {
  memset(r, 0, sizeof *r);
  if (!q)
    return KETCH_EINVAL;
  r->prev_kv = q->prev_kv;
  return range_in(a, &r->key, &r->range_end, q->key, q->key_len, q->range_end, q->range_end_len,
                  q->prefix, q->from_key);
}

static int ops_in(struct kt_arena *a, struct kt_request_op **out, uint32_t *n_out,
                  const ketch_op *ops, size_t n, int depth, bool *is_read) {
  if (n > UINT32_MAX || (n && !ops))
    return KETCH_EINVAL;
  struct kt_request_op *o = n ? kt_arena_alloc(a, sizeof *o * n) : NULL;
  for (size_t i = 0; i < n; i++) {
    int err = op_in(a, &o[i], &ops[i], depth, is_read);
    if (err)
      return err;
  }
  *out = o;
  *n_out = (uint32_t)n;
  return 0;
}

static int txn_req_in(struct kt_arena *a, struct kt_txn_req *r, const ketch_txn_req *q, int depth,
                      bool *is_read) {
  memset(r, 0, sizeof *r);
  if (!q || depth > KT_MAX_TXN_DEPTH || q->n_compare > UINT32_MAX || (q->n_compare && !q->compare))
    return KETCH_EINVAL;
  if (q->n_compare) {
    r->compare = kt_arena_alloc(a, sizeof *r->compare * q->n_compare);
    for (size_t i = 0; i < q->n_compare; i++) {
      const ketch_compare *k = &q->compare[i];
      struct kt_compare *m = &r->compare[i];
      memset(m, 0, sizeof *m);
      if (k->result < 0 || k->result > KETCH_CMP_NOT_EQUAL || k->target < 0 ||
          k->target > KETCH_CMP_LEASE || bytes_in(&m->key, k->key, k->key_len) ||
          bytes_in(&m->range_end, k->range_end, k->range_end_len) ||
          bytes_in(&m->value, k->value, k->value_len))
        return KETCH_EINVAL;
      m->result = (uint8_t)k->result;
      m->target = (uint8_t)k->target;
      m->int_value = k->int_value;
    }
    r->n_compare = (uint32_t)q->n_compare;
  }
  int err = ops_in(a, &r->success, &r->n_success, q->success, q->n_success, depth, is_read);
  if (!err)
    err = ops_in(a, &r->failure, &r->n_failure, q->failure, q->n_failure, depth, is_read);
  return err;
}

static int op_in(struct kt_arena *a, struct kt_request_op *o, const ketch_op *op, int depth,
                 bool *is_read) {
  memset(o, 0, sizeof *o);
  o->type = (uint8_t)op->type;
  switch (op->type) {
  case KETCH_OP_RANGE:
    return range_req_in(a, &o->u.range, &op->range);
  case KETCH_OP_PUT:
    *is_read = false;
    return put_req_in(&o->u.put, &op->put);
  case KETCH_OP_DELETE:
    *is_read = false;
    return delete_req_in(a, &o->u.del, &op->del);
  case KETCH_OP_TXN:
    return txn_req_in(a, &o->u.txn, &op->txn, depth + 1, is_read);
  default:
    return KETCH_EINVAL;
  }
}

/* ---- connection ---- */

static void conn_start(ketch_client *c);
static void queue_unsent(ketch_client *c);
static void auth_start(ketch_client *c);
static void complete(ketch_client *c, struct slot *s, int err, const char *msg, size_t msg_len,
                     const struct kt_resp *resp);
static void watches_conn_lost(ketch_client *c);
static void watches_ready(ketch_client *c);
static bool watch_on_frame(ketch_client *c, const struct kt_resp *r);

/* Whether the handle needs a connection: requests pending or watches open. */
static bool wants_conn(const ketch_client *c) { return c->n_pending || c->n_live_watches; }

static void queue_slot(ketch_client *c, struct slot *s) {
  s->out_start = c->out_base + c->out.len;
  s->queued = true;
  kt_buf_append(&c->out, s->frame.p, s->frame.len);
}

static void conn_close_fd(ketch_client *c) {
  kt_io_close(&c->io);
  kt_buf_reset(&c->out);
  kt_buf_reset(&c->in);
  c->out_base = 0;
  c->cluster_id = c->member_id = 0;
}

static void free_endpoints(struct endpoint *eps, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(eps[i].host);
    free(eps[i].port);
  }
  free(eps);
}

/* A comma-separated list into a new array (*out, *n; empty entries are
 * skipped). Errors: parse_endpoint's (why gets the reason), KETCH_ENOMEM. */
static int parse_endpoints(const char *list, struct endpoint **out, size_t *n_out, char *why,
                           size_t why_len) {
  size_t cap = 1, n = 0;
  for (const char *p = list; *p; p++)
    cap += *p == ',';
  struct endpoint *eps = calloc(cap, sizeof *eps);
  if (!eps)
    return KETCH_ENOMEM;
  for (const char *p = list;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    size_t sp = 0;
    while (sp < len && (p[sp] == ' ' || p[sp] == '\t'))
      sp++;
    if (sp < len) {
      int err = parse_endpoint(p, len, &eps[n], why, why_len);
      if (err) {
        free_endpoints(eps, n + 1); /* with what was parsed */
        return err;
      }
      n++;
    }
    if (!comma)
      break;
    p = comma + 1;
  }
  *out = eps;
  *n_out = n;
  return 0;
}

/* Keeps why each endpoint failed in the current round; the previous round's
 * reasons stay readable until the next failure. */
static void note_round_err(ketch_client *c, const char *why) {
  if (c->fails_in_round == 0)
    c->round_err[0] = 0;
  size_t used = strlen(c->round_err);
  snprintf(c->round_err + used, sizeof c->round_err - used, "%s%s: %s", used ? "; " : "",
           c->eps[c->ep_idx].name, why);
  set_errmsg(c, "%s: %s", c->eps[c->ep_idx].name, why);
}

/* The current connection (or connection attempt) failed: close it; requeue
 * reads and unsent writes, fail sent writes with EUNKNOWN; move on to the
 * next endpoint. */
static void conn_fail(ketch_client *c, const char *why) {
  bool was_ready = c->state == ST_READY;
  if (c->ai_cur && c->ai_cur->ai_next && !was_ready && c->state == ST_CONNECTING) {
    /* another address of the same endpoint */
    conn_close_fd(c);
    c->ai_cur = c->ai_cur->ai_next;
    c->state = ST_IDLE;
    conn_start(c);
    return;
  }
  note_round_err(c, why);
  uint64_t sent = c->out_base;
  conn_close_fd(c);
  if (c->ai_list)
    freeaddrinfo(c->ai_list);
  c->ai_list = c->ai_cur = NULL;
  c->state = ST_IDLE;
  c->fails_in_round++;
  c->ep_idx = (c->ep_idx + 1) % c->n_eps;

  /* Writes that may have reached the server: outcome unknown. */
  char msg[400];
  snprintf(msg, sizeof msg,
           "request outcome unknown: connection lost after the request was sent (%s)", why);
  /* First mark (onto the doomed list, in submission order), then complete:
   * a callback may submit, and so reconnect and even fail again; whoever
   * pops a slot off the doomed list completes it, exactly once. */
  for (struct slot *s = c->pend_tail; s; s = s->prev) {
    if (s->queued && !s->is_read && sent > s->out_start) {
      s->doomed = true;
      s->dnext = c->doomed_head;
      c->doomed_head = s;
    }
    s->queued = false;
  }
  watches_conn_lost(c);
  while (c->doomed_head) {
    struct slot *s = c->doomed_head;
    c->doomed_head = s->dnext;
    s->dnext = NULL;
    complete(c, s, KETCH_EUNKNOWN, msg, strlen(msg), NULL);
  }
  if (c->state == ST_IDLE && wants_conn(c))
    conn_start(c);
}

static bool ep_tls(const ketch_client *c, const struct endpoint *ep);

/* ketch_open_srv's handles: the SRV records looked up again (blocking, at
 * most min(dial timeout, 2 s)). A list that resolves and needs no TLS the
 * handle was not opened with replaces the endpoints, and the next connection
 * starts from its first (best) one; otherwise the list is kept. Called from
 * IDLE only, with no address list in use. */
static void srv_refresh(ketch_client *c) {
  c->srv_next_ms = now_ms() + c->srv_interval_ms;
  char list[64 * 80], why[400];
  int tmo = c->dial_timeout_ms < 2000 ? c->dial_timeout_ms : 2000;
  if (ketch_srv_endpoints(c->srv_domain, c->srv_suffix, c->srv_dns, tmo, list, sizeof list, why,
                          sizeof why))
    return; /* the resolver failed or found nothing: keep what we have */
  struct endpoint *eps;
  size_t n;
  if (parse_endpoints(list, &eps, &n, why, sizeof why))
    return;
  bool same = n == c->n_eps, ok = n > 0;
  for (size_t i = 0; i < n; i++) {
    ok &= !ep_tls(c, &eps[i]) || c->tls;
    same &= same && !strcmp(eps[i].name, c->eps[i].name) && eps[i].scheme == c->eps[i].scheme;
  }
  if (!ok || same) {
    free_endpoints(eps, n);
    return;
  }
  free_endpoints(c->eps, c->n_eps);
  c->eps = eps;
  c->n_eps = n;
  c->ep_idx = 0;
  c->fails_in_round = 0;
}

static int set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* From IDLE: start a non-blocking connect to the current endpoint (or go to
 * BACKOFF after a whole round of failures). Failures that happen at once move
 * on to the next endpoint within this call. */
static void conn_start(ketch_client *c) {
  for (;;) {
    if (c->state != ST_IDLE)
      return;
    if (c->srv_domain && !c->nonblocking && !c->ai_cur &&
        (c->fails_in_round >= c->n_eps || now_ms() >= c->srv_next_ms)) {
      bool round_done = c->fails_in_round >= c->n_eps;
      srv_refresh(c); /* a new list starts a new round at its first endpoint */
      if (round_done && c->fails_in_round == 0)
        continue;
    }
    if (c->fails_in_round >= c->n_eps) {
      c->fails_in_round = 0;
      c->state = ST_BACKOFF;
      c->backoff_until_ms = now_ms() + c->backoff_ms;
      c->backoff_ms = KT_MIN(c->backoff_ms * 2, BACKOFF_MAX_MS);
      return;
    }
    struct endpoint *ep = &c->eps[c->ep_idx];
    if (!c->ai_cur) {
      struct addrinfo hints = {0};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_NUMERICSERV;
      int rc = getaddrinfo(ep->host, ep->port, &hints, &c->ai_list);
      if (rc) {
        c->ai_list = NULL;
        char why[200];
        snprintf(why, sizeof why, "resolve: %s", gai_strerror(rc));
        conn_fail(c, why);
        continue;
      }
      c->ai_cur = c->ai_list;
    }
    struct addrinfo *ai = c->ai_cur;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      char why[200];
      snprintf(why, sizeof why, "socket: %s", strerror(errno));
      conn_fail(c, why);
      continue;
    }
    set_nodelay(fd);
    kt_io_init_plain(&c->io, fd);
    c->state = ST_CONNECTING;
    c->conn_deadline_ms = now_ms() + c->dial_timeout_ms;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      char why[200];
      snprintf(why, sizeof why, "connect: %s", strerror(errno));
      conn_fail(c, why);
      continue;
    }
    return; /* completion (even an immediate one) is seen as POLLOUT */
  }
}

static bool ep_tls(const ketch_client *c, const struct endpoint *ep) {
  return ep->scheme == 2 || (ep->scheme == 0 && c->tls_default);
}

static void conn_connected(ketch_client *c);

/* The socket is connected to a TLS endpoint: start the handshake. */
static void tls_start(ketch_client *c) {
  struct kt_err e = {0};
  int fd = c->io.fd;
  const char *name = c->server_name ? c->server_name : c->eps[c->ep_idx].host;
  if (kt_io_init_tls(&c->io, fd, c->tls, name, &e)) {
    kt_io_init_plain(&c->io, fd); /* conn_fail closes it */
    conn_fail(c, e.msg);
    return;
  }
  c->state = ST_TLS;
}

static void tls_step(ketch_client *c) {
  struct kt_err e = {0};
  int r = kt_io_handshake(&c->io, &e);
  if (r == KT_IO_AGAIN)
    return;
  if (r == 1) {
    conn_connected(c);
    return;
  }
  char why[300];
  snprintf(why, sizeof why, "TLS: %s", e.msg);
  conn_fail(c, why);
}

static void conn_connected(ketch_client *c) {
  c->state = ST_HELLO;
  struct kt_req req;
  memset(&req, 0, sizeof req);
  req.type = KT_MSG_HELLO;
  req.id = 0;
  req.u.hello.version = KT_PROTO_VERSION;
  static const char name[] = "libketch/" KETCH_VERSION;
  req.u.hello.client.p = (const uint8_t *)name;
  req.u.hello.client.n = sizeof name - 1;
  if (c->identity) {
    req.u.hello.identity.p = (const uint8_t *)c->identity;
    req.u.hello.identity.n = (uint32_t)strlen(c->identity);
  }
  kt_buf_reset(&c->out);
  kt_proto_encode_req(&c->out, &req);
}

static void queue_unsent(ketch_client *c) {
  for (struct slot *s = c->pend_head; s; s = s->next)
    if (!s->queued && !s->doomed)
      queue_slot(c, s);
}

static void conn_ready(ketch_client *c) {
  c->state = ST_READY;
  c->fails_in_round = 0;
  c->backoff_ms = BACKOFF_MIN_MS;
  queue_unsent(c);
  watches_ready(c);
}

/* ---- authentication (ketch_options.user) ----
 * A connection authenticates after HELLO (ST_AUTH), with the last token if
 * there is one (EINVALIDTOKEN: once more with the password), and again when
 * an answer says its user is no longer valid (auth_retry). Only one
 * AUTHENTICATE is in flight; requests wait unsent meanwhile. */

static void auth_send(ketch_client *c, bool with_token) {
  struct kt_req req;
  memset(&req, 0, sizeof req);
  req.type = KT_MSG_AUTHENTICATE;
  req.id = AUTH_ID;
  if (with_token) {
    req.u.auth.token = (struct kt_bytes){(const uint8_t *)c->token, (uint32_t)strlen(c->token)};
  } else {
    req.u.auth.name = (struct kt_bytes){(const uint8_t *)c->user, (uint32_t)strlen(c->user)};
    if (c->password)
      req.u.auth.password =
          (struct kt_bytes){(const uint8_t *)c->password, (uint32_t)strlen(c->password)};
  }
  c->auth_with_token = with_token;
  kt_proto_encode_req(&c->out, &req);
}

static void auth_start(ketch_client *c) {
  c->state = ST_AUTH;
  c->auth_again = false;
  c->auth_err = -1;
  c->conn_deadline_ms = now_ms() + KT_MAX(c->dial_timeout_ms, c->request_timeout_ms);
  auth_send(c, c->token[0] != 0);
}

/* The text a request of this type gets for an auth refusal with msg: the
 * maintenance calls etcd answers with its auth store's own texts ("auth:
 * invalid auth token", as the member answers them natively). */
static const char *refusal_text(uint8_t type, int code, const char *msg) {
  bool maint = type == KT_MSG_DEFRAGMENT || type == KT_MSG_HASH_KV || type == KT_MSG_SNAPSHOT;
  return maint && code == KETCH_EINVALIDTOKEN ? "auth: invalid auth token" : msg;
}

/* Authentication was refused: requests waiting for it complete with the
 * refusal; the connection carries on unauthenticated (a later request that
 * the member refuses for that tries once more; with a token alone, which
 * nothing renews, it gets the refusal again). */
static void auth_refused(ketch_client *c, int code, const char *msg) {
  c->auth_err = code;
  snprintf(c->auth_msg, sizeof c->auth_msg, "%s", msg);
  set_errmsg(c, "%s", msg);
  c->state = ST_READY; /* what callbacks submit goes out */
  c->fails_in_round = 0;
  struct slot *next;
  for (struct slot *s = c->pend_head; s; s = next) {
    next = s->next; /* callbacks only append */
    if (!s->queued && !s->doomed) {
      const char *m = refusal_text(s->type, code, msg);
      complete(c, s, code, m, strlen(m), NULL);
    }
  }
  queue_unsent(c);
  watches_ready(c);
}

static void on_auth(ketch_client *c, const struct kt_resp *r) {
  if (c->state != ST_AUTH)
    return;
  if (r->type == KT_MSG_AUTHENTICATE) {
    size_t n = r->u.auth.token.n < sizeof c->token ? r->u.auth.token.n : 0;
    memcpy(c->token, r->u.auth.token.p, n);
    c->token[n] = 0;
    if (c->auth_again) {
      auth_start(c); /* ketch_authenticate changed the credentials meanwhile */
      return;
    }
    c->auth_err = 0;
    conn_ready(c);
    return;
  }
  if (r->type != KT_MSG_ERROR) {
    conn_fail(c, "protocol error: expected an AUTHENTICATE response");
    return;
  }
  int code = (int)r->u.error.code;
  if (c->auth_again) {
    auth_start(c);
    return;
  }
  if (code == KETCH_EINVALIDTOKEN && c->auth_with_token && c->user) {
    c->token[0] = 0; /* expired, or issued by another member: the password */
    auth_send(c, false);
    return;
  }
  if (code == KETCH_EAUTHNOTENABLED) { /* nothing to do: carry on without */
    c->auth_err = code;
    snprintf(c->auth_msg, sizeof c->auth_msg, "%s", kt_strerror(code));
    conn_ready(c);
    return;
  }
  char msg[200];
  snprintf(msg, sizeof msg, "%.*s", (int)KT_MIN(r->u.error.message.n, 190),
           r->u.error.message.n ? (const char *)r->u.error.message.p : "");
  if (!msg[0] || code <= 0 || code >= KT_ERR_MAX)
    snprintf(msg, sizeof msg, "%s",
             kt_strerror(code > 0 && code < KT_ERR_MAX ? code : KETCH_EPROTO));
  if (code == KETCH_EBUSY || code == KETCH_ETIMEOUT || code == KETCH_ESTOPPED) {
    char why[260];
    snprintf(why, sizeof why, "authentication: %s", msg);
    conn_fail(c, why); /* this member cannot check it now: another one */
    return;
  }
  auth_refused(c, code > 0 && code < KT_ERR_MAX ? code : KETCH_EPROTO, msg);
}

/* An error answer that asks for the request to be sent again: after a new
 * authentication (the connection's user is no longer valid, or auth was
 * enabled since it opened), or at once (the auth store moved while a write
 * was in flight; nothing was applied). True: s waits again, unsent. */
static bool auth_retry(ketch_client *c, struct slot *s, int code) {
  if (code == KETCH_EAUTHOLDREVISION) {
    if (s->old_tries >= AUTH_OLD_TRIES)
      return false;
    s->old_tries++;
    s->queued = false;
    if (c->state == ST_READY)
      queue_slot(c, s);
    return true;
  }
  if (!c->user || s->auth_tries || /* a token alone cannot be renewed here */
      !(code == KETCH_EINVALIDTOKEN || (code == KETCH_EUSEREMPTY && s->type != KT_MSG_USER_ADD)))
    return false;
  s->auth_tries++;
  s->queued = false;
  if (c->state == ST_READY) {
    c->token[0] = 0; /* the connection's binding is gone: so is its token */
    auth_start(c);
  }
  return true;
}

static void on_hello(ketch_client *c, const struct kt_resp *r) {
  if (r->type == KT_MSG_ERROR) {
    char why[300];
    snprintf(why, sizeof why, "hello refused: %s (%.*s)", kt_strerror((int)r->u.error.code),
             (int)r->u.error.message.n, (const char *)r->u.error.message.p);
    conn_fail(c, why);
    return;
  }
  if (r->type != KT_MSG_HELLO || r->id != 0) {
    conn_fail(c, "protocol error: expected a HELLO response");
    return;
  }
  if (r->u.hello.version != KT_PROTO_VERSION) {
    char why[100];
    snprintf(why, sizeof why, "server speaks protocol version %u, we speak %u",
             (unsigned)r->u.hello.version, KT_PROTO_VERSION);
    conn_fail(c, why);
    return;
  }
  c->cluster_id = r->u.hello.cluster_id;
  c->member_id = r->u.hello.member_id;
  if (r->u.hello.max_request_bytes)
    c->max_request_bytes = r->u.hello.max_request_bytes;
  snprintf(c->server, sizeof c->server, "%.*s", (int)KT_MIN(r->u.hello.server.n, 60),
           (const char *)r->u.hello.server.p);
  if (c->user || c->token_only)
    auth_start(c);
  else
    conn_ready(c);
}

/* Handles one response frame body. Returns false when the connection failed
 * (the input buffer is gone). */
/* One non-final frame of a stream: its callback runs, its deadline moves. */
static void stream_piece(ketch_client *c, struct slot *s, const struct kt_resp *r) {
  ketch_result res;
  result_build(&c->res_arena, &res, s->type, 0, NULL, 0, r, false);
  s->deadline_ms = now_ms() + c->request_timeout_ms;
  bool was_in_cb = c->in_cb;
  c->in_cb = true;
  s->cb(s->arg, 0, &res);
  c->in_cb = was_in_cb;
  kt_arena_reset(&c->res_arena);
}

static bool on_frame(ketch_client *c, const uint8_t *body, uint32_t len) {
  struct kt_resp r;
  struct kt_err e = {0};
  kt_arena_reset(&c->dec_arena);
  int err = kt_proto_decode_resp(body, len, &c->dec_arena, &r, &e);
  if (err) {
    char why[320];
    snprintf(why, sizeof why, "bad response frame: %s", e.msg[0] ? e.msg : kt_strerror(err));
    conn_fail(c, why);
    return false;
  }
  if (c->state == ST_HELLO) {
    on_hello(c, &r);
    return c->state == ST_AUTH || c->state == ST_READY;
  }
  if (r.id & WATCH_BIT)
    return watch_on_frame(c, &r);
  if (r.id == AUTH_ID) {
    on_auth(c, &r);
    return c->state == ST_AUTH || c->state == ST_READY;
  }
  if (r.id == 0) { /* connection-level error; the server closes next */
    if (r.type == KT_MSG_ERROR)
      set_errmsg(c, "server: %s: %.*s", kt_strerror((int)r.u.error.code), (int)r.u.error.message.n,
                 (const char *)r.u.error.message.p);
    return true;
  }
  uint32_t idx = (uint32_t)(r.id & SLOT_MASK);
  if (idx >= c->max_outstanding || c->slots[idx].id != r.id || !c->slots[idx].queued)
    return true; /* a request that already timed out */
  struct slot *s = &c->slots[idx];
  if (r.type == KT_MSG_ERROR) {
    int code = (int)r.u.error.code;
    const char *m = (const char *)r.u.error.message.p;
    size_t mn = r.u.error.message.n;
    char unk[300];
    if (r.u.error.code == 0 || r.u.error.code >= KT_ERR_MAX) {
      snprintf(unk, sizeof unk, "server sent unknown error code %u: %.*s", r.u.error.code,
               (int)KT_MIN(mn, 200), m ? m : "");
      code = KETCH_EINTERNAL;
      m = unk;
      mn = strlen(unk);
    } else if (!mn) {
      m = kt_strerror(code);
      mn = strlen(m);
    }
    if (auth_retry(c, s, code))
      return true;
    if (code == KETCH_EUSEREMPTY && c->token_only && c->auth_err == KETCH_EINVALIDTOKEN) {
      code = KETCH_EINVALIDTOKEN; /* sent unauthenticated: the token was refused */
      m = refusal_text(s->type, code, c->auth_msg);
      mn = strlen(m);
    }
    complete(c, s, code, m, mn, NULL);
  } else if (s->stream && r.type == s->type && r.u.snapshot.remaining_bytes > 0) {
    stream_piece(c, s, &r); /* more frames follow: the slot stays */
  } else if (r.type != s->type) {
    char why[100];
    snprintf(why, sizeof why, "response type %u to a request of type %u", r.type, s->type);
    conn_fail(c, why);
    return false;
  } else {
    complete(c, s, 0, NULL, 0, &r);
  }
  return true;
}

static void do_write(ketch_client *c) {
  while (c->out.len) {
    struct kt_err e = {0};
    ssize_t n = kt_io_write(&c->io, c->out.p, c->out.len, &e);
    if (n > 0) {
      kt_buf_consume(&c->out, (size_t)n);
      c->out_base += (uint64_t)n;
      continue;
    }
    if (n == KT_IO_AGAIN)
      return;
    char why[300];
    snprintf(why, sizeof why, "send: %s", e.msg);
    conn_fail(c, why);
    return;
  }
}

static void do_read(ketch_client *c) {
  for (int rounds = 0; rounds < 64; rounds++) {
    kt_buf_reserve(&c->in, READ_CHUNK);
    size_t want = c->in.cap - c->in.len;
    struct kt_err e = {0};
    ssize_t n = kt_io_read(&c->io, c->in.p + c->in.len, want, &e);
    if (n == KT_IO_AGAIN)
      return;
    if (n <= 0) {
      char why[300];
      snprintf(why, sizeof why, "%s", n == 0 ? "connection closed by server" : e.msg);
      conn_fail(c, why);
      return;
    }
    c->in.len += (size_t)n;
    size_t pos = 0;
    for (;;) {
      const uint8_t *body;
      uint32_t blen;
      size_t used;
      int r =
          kt_frame_next(c->in.p + pos, c->in.len - pos, KT_MAX_FRAME_BYTES, &body, &blen, &used);
      if (r == 0)
        break;
      if (r < 0) {
        conn_fail(c, "bad frame length from server");
        return;
      }
      pos += used;
      if (!on_frame(c, body, blen))
        return; /* the connection (and `in`) was reset */
    }
    kt_buf_consume(&c->in, pos);
    if (kt_io_is_tls(&c->io) ? !kt_io_pending(&c->io) : (size_t)n < want)
      return; /* drained (TLS: one record per read; what it read ahead is pending) */
  }
}

static void expire(ketch_client *c, int64_t now) {
  if ((c->state == ST_CONNECTING || c->state == ST_TLS || c->state == ST_HELLO ||
       c->state == ST_AUTH) &&
      now >= c->conn_deadline_ms)
    conn_fail(c, c->state == ST_CONNECTING ? "dial timeout"
                 : c->state == ST_TLS      ? "TLS handshake timeout"
                 : c->state == ST_HELLO    ? "handshake timeout"
                                           : "authentication timed out");
  while (c->pend_head && c->pend_head->deadline_ms <= now) {
    struct slot *s = c->pend_head;
    if (c->state == ST_READY || c->state == ST_AUTH || s->queued) {
      char msg[200];
      snprintf(msg, sizeof msg, "request timed out after %d ms%s", c->request_timeout_ms,
               s->queued && !s->is_read ? " (outcome unknown)"
               : c->state == ST_AUTH    ? " (waiting for authentication)"
                                        : "");
      complete(c, s, KETCH_ETIMEOUT, msg, strlen(msg), NULL);
    } else {
      char msg[1200];
      snprintf(msg, sizeof msg, "no endpoint available: %s",
               c->round_err[0] ? c->round_err : "not connected");
      complete(c, s, KETCH_EUNAVAILABLE, msg, strlen(msg), NULL);
    }
  }
}

static void timers(ketch_client *c, int64_t now);
static void deliver_finals(ketch_client *c);
static int64_t timers_next_ms(const ketch_client *c);

static void process(ketch_client *c) {
  int64_t now = now_ms();
  if (c->state == ST_BACKOFF && now >= c->backoff_until_ms) {
    c->state = ST_IDLE;
    if (wants_conn(c))
      conn_start(c);
  }
  if (c->state == ST_CONNECTING) {
    struct pollfd p = {c->io.fd, POLLOUT, 0};
    if (poll(&p, 1, 0) > 0) {
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        soerr = errno;
      if (soerr) {
        char why[200];
        snprintf(why, sizeof why, "connect: %s", strerror(soerr));
        conn_fail(c, why);
      } else if (ep_tls(c, &c->eps[c->ep_idx])) {
        tls_start(c);
      } else {
        conn_connected(c);
      }
    }
  }
  if (c->state == ST_TLS)
    tls_step(c);
  /* Read before writing: a connection the server closed while we were idle
   * is noticed before a write is put on it (that write then goes to the
   * next endpoint instead of completing EUNKNOWN). */
  if (c->state == ST_HELLO || c->state == ST_AUTH || c->state == ST_READY)
    do_read(c);
  timers(c, now_ms()); /* keep-alive renewals, watch retries and cancels */
  if (c->state == ST_IDLE && wants_conn(c))
    conn_start(c);
  if (c->state == ST_HELLO || c->state == ST_AUTH || c->state == ST_READY)
    do_write(c); /* including frames queued by callbacks */
  expire(c, now_ms());
  deliver_finals(c);
}

int ketch_process(ketch_client *c) {
  if (c->in_cb)
    return KETCH_EINVAL;
  process(c);
  return c->state == ST_BACKOFF || (c->state == ST_IDLE && wants_conn(c)) ? KETCH_EUNAVAILABLE : 0;
}

int ketch_fd(const ketch_client *c) { return c->state >= ST_CONNECTING ? c->io.fd : -1; }

short ketch_events(const ketch_client *c) {
  int ev;
  switch (c->state) {
  case ST_CONNECTING:
    return POLLOUT;
  case ST_TLS:
    ev = kt_io_events(&c->io, true, true); /* what the handshake waits for */
    break;
  case ST_HELLO:
  case ST_AUTH:
  case ST_READY:
    ev = kt_io_events(&c->io, true, c->out.len > 0);
    break;
  default:
    return 0;
  }
  return (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0));
}

int ketch_timeout_ms(const ketch_client *c) {
  int64_t deadline = INT64_MAX;
  if (c->pend_head)
    deadline = c->pend_head->deadline_ms;
  if (c->state == ST_CONNECTING || c->state == ST_TLS || c->state == ST_HELLO ||
      c->state == ST_AUTH)
    deadline = KT_MIN(deadline, c->conn_deadline_ms);
  if (c->state >= ST_HELLO && kt_io_pending(&c->io))
    return 0; /* TLS read ahead: process again before sleeping */
  if (c->state == ST_BACKOFF)
    deadline = KT_MIN(deadline, c->backoff_until_ms);
  deadline = KT_MIN(deadline, timers_next_ms(c));
  if ((c->state == ST_IDLE && wants_conn(c)) || c->finals_pending)
    return 0;
  if (deadline == INT64_MAX)
    return -1;
  int64_t d = deadline - now_ms();
  if (d <= 0)
    return 0;
  return d > INT32_MAX ? INT32_MAX : (int)d + 1; /* +1: never wake just before */
}

size_t ketch_pending(const ketch_client *c) { return c->n_pending; }

int ketch_set_endpoints(ketch_client *c, const char *endpoints, char *errmsg, size_t errmsg_len) {
  if (!c || !endpoints)
    return KETCH_EINVAL;
  size_t cap = 2; /* the current one kept, see ketch.h */
  for (const char *p = endpoints; *p; p++)
    cap += *p == ',';
  struct endpoint *eps = calloc(cap, sizeof *eps);
  if (!eps)
    return KETCH_ENOMEM;
  size_t n = 0;
  int err = 0;
  for (const char *p = endpoints;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    size_t sp = 0;
    while (sp < len && (p[sp] == ' ' || p[sp] == '\t'))
      sp++;
    if (sp < len) {
      char why[400] = "";
      err = parse_endpoint(p, len, &eps[n], why, sizeof why);
      n++; /* freed below on error too */
      if (!err && ep_tls(c, &eps[n - 1]) && !c->tls) {
        snprintf(why, sizeof why, "%s: TLS endpoint on a handle opened without TLS",
                 eps[n - 1].name);
        err = KETCH_EINVAL;
      }
      if (err) {
        copy_msg(errmsg, errmsg_len, why);
        break;
      }
    }
    if (!comma)
      break;
    p = comma + 1;
  }
  if (!err && n == 0) {
    copy_msg(errmsg, errmsg_len, "no endpoints given");
    err = KETCH_EINVAL;
  }
  if (err) {
    for (size_t i = 0; i < n; i++) {
      free(eps[i].host);
      free(eps[i].port);
    }
    free(eps);
    return err;
  }
  /* the endpoint in use keeps its index's meaning: found in the new list,
   * or kept at its end until the handle leaves it */
  struct endpoint *cur = &c->eps[c->ep_idx];
  size_t idx = n;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(eps[i].name, cur->name) && eps[i].scheme == cur->scheme)
      idx = i;
  bool in_use = c->state != ST_IDLE && c->state != ST_BACKOFF;
  if (idx == n && in_use) {
    eps[n++] = *cur; /* moved: not freed below */
    cur->host = cur->port = NULL;
  } else if (idx == n) {
    idx = 0;
  }
  for (size_t i = 0; i < c->n_eps; i++) {
    free(c->eps[i].host);
    free(c->eps[i].port);
  }
  free(c->eps);
  c->eps = eps;
  c->n_eps = n;
  c->ep_idx = idx;
  c->fails_in_round = 0;
  return 0;
}

const char *ketch_endpoint(const ketch_client *c) {
  return c->state == ST_READY ? c->eps[c->ep_idx].name : NULL;
}
uint64_t ketch_cluster_id(const ketch_client *c) {
  return c->state == ST_READY ? c->cluster_id : 0;
}
uint64_t ketch_member_id(const ketch_client *c) { return c->state == ST_READY ? c->member_id : 0; }
const char *ketch_errmsg(const ketch_client *c) { return c->errmsg; }

/* One turn of a blocking wait: poll the socket until the next deadline (at
 * most max_ms), then process. */
static void wait_turn(ketch_client *c, int max_ms) {
  int t = ketch_timeout_ms(c);
  if (t < 0 || (max_ms >= 0 && t > max_ms))
    t = max_ms;
  struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
  if (p.fd >= 0 || t != 0)
    poll(&p, p.fd >= 0 ? 1 : 0, t);
  process(c);
}

int ketch_run(ketch_client *c, int timeout_ms) {
  if (c->in_cb)
    return KETCH_EINVAL;
  int64_t end = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
  for (;;) {
    process(c);
    if (!c->n_pending)
      return 0;
    int64_t left = end - now_ms();
    if (left <= 0)
      return KETCH_ETIMEOUT;
    wait_turn(c, left > INT32_MAX ? INT32_MAX : (int)left);
  }
}

/* ---- submitting ---- */

/* Takes a slot, encodes req into it and queues it. */
static int submit(ketch_client *c, struct kt_req *req, bool is_read, bool keep, ketch_cb cb,
                  void *arg) {
  if (!cb)
    return KETCH_EINVAL;
  struct slot *s = c->free_list;
  if (!s) {
    kt_arena_reset(&c->enc_arena);
    return KETCH_EBUSY;
  }
  c->seq++;
  req->id = (c->seq << SLOT_BITS) | (uint64_t)(s - c->slots);
  kt_buf_reset(&s->frame);
  kt_proto_encode_req(&s->frame, req);
  kt_arena_reset(&c->enc_arena);
  if (s->frame.len - KT_FRAME_HDR > c->max_request_bytes) {
    kt_buf_reset(&s->frame);
    return KETCH_ETOOLARGE;
  }
  c->free_list = s->next;
  s->id = req->id;
  s->type = req->type;
  s->is_read = is_read;
  s->keep = keep;
  s->cb = cb;
  s->arg = arg;
  s->queued = false;
  s->auth_tries = s->old_tries = 0;
  s->stream = req->type == KT_MSG_SNAPSHOT;
  s->deadline_ms = now_ms() + c->request_timeout_ms;
  s->next = NULL;
  s->prev = c->pend_tail;
  if (c->pend_tail)
    c->pend_tail->next = s;
  else
    c->pend_head = s;
  c->pend_tail = s;
  c->n_pending++;
  if (c->state == ST_READY)
    queue_slot(c, s);
  else if (c->state == ST_IDLE)
    conn_start(c);
  return 0;
}

static int submit_op(ketch_client *c, int type, const void *req, bool keep, ketch_cb cb,
                     void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = (uint8_t)type;
  r.u.op.type = (uint8_t)type;
  bool is_read = true;
  int err;
  switch (type) {
  case KETCH_OP_RANGE:
    err = range_req_in(&c->enc_arena, &r.u.op.u.range, req);
    break;
  case KETCH_OP_PUT:
    is_read = false;
    err = put_req_in(&r.u.op.u.put, req);
    break;
  case KETCH_OP_DELETE:
    is_read = false;
    err = delete_req_in(&c->enc_arena, &r.u.op.u.del, req);
    break;
  default:
    err = txn_req_in(&c->enc_arena, &r.u.op.u.txn, req, 1, &is_read);
    break;
  }
  if (err) {
    kt_arena_reset(&c->enc_arena);
    set_errmsg(c, "%s", "invalid request (see ketch.h for the fields' rules)");
    return err;
  }
  return submit(c, &r, is_read, keep, cb, arg);
}

static int submit_compact(ketch_client *c, int64_t revision, bool physical, bool keep, ketch_cb cb,
                          void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_COMPACT;
  r.u.compact.revision = revision;
  r.u.compact.physical = physical;
  return submit(c, &r, false, keep, cb, arg);
}

static int submit_status(ketch_client *c, bool keep, ketch_cb cb, void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_STATUS;
  return submit(c, &r, true, keep, cb, arg);
}

static int submit_member_list(ketch_client *c, bool keep, ketch_cb cb, void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_MEMBER_LIST;
  return submit(c, &r, true, keep, cb, arg);
}

/* ADD (urls, learner), REMOVE/PROMOTE (id), UPDATE (id, urls). */
static int submit_member_change(ketch_client *c, uint8_t type, uint64_t id, const char *const *urls,
                                size_t n_urls, bool learner, bool keep, ketch_cb cb, void *arg) {
  if (n_urls > 64 || (n_urls && !urls))
    return KETCH_EINVAL;
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = type;
  r.u.member.id = id;
  r.u.member.is_learner = learner;
  struct kt_bytes v[64];
  for (size_t i = 0; i < n_urls; i++) {
    if (!urls[i])
      return KETCH_EINVAL;
    v[i] = (struct kt_bytes){(const uint8_t *)urls[i], (uint32_t)strlen(urls[i])};
  }
  r.u.member.peer_urls = v;
  r.u.member.n_peer_urls = (uint32_t)n_urls;
  return submit(c, &r, false, keep, cb, arg);
}

static int submit_move_leader(ketch_client *c, uint64_t target_id, bool keep, ketch_cb cb,
                              void *arg) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_MOVE_LEADER;
  r.u.move_leader.target_id = target_id;
  return submit(c, &r, false, keep, cb, arg);
}

int ketch_get_async(ketch_client *c, const void *key, size_t key_len, ketch_cb cb, void *arg) {
  ketch_range_req q;
  memset(&q, 0, sizeof q);
  q.key = key;
  q.key_len = key_len;
  return submit_op(c, KETCH_OP_RANGE, &q, false, cb, arg);
}
int ketch_range_async(ketch_client *c, const ketch_range_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_RANGE, req, false, cb, arg);
}
int ketch_put_async(ketch_client *c, const ketch_put_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_PUT, req, false, cb, arg);
}
int ketch_delete_async(ketch_client *c, const ketch_delete_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_DELETE, req, false, cb, arg);
}
int ketch_txn_async(ketch_client *c, const ketch_txn_req *req, ketch_cb cb, void *arg) {
  return submit_op(c, KETCH_OP_TXN, req, false, cb, arg);
}
int ketch_compact_async(ketch_client *c, int64_t revision, bool physical, ketch_cb cb, void *arg) {
  return submit_compact(c, revision, physical, false, cb, arg);
}
int ketch_status_async(ketch_client *c, ketch_cb cb, void *arg) {
  return submit_status(c, false, cb, arg);
}
int ketch_member_list_async(ketch_client *c, ketch_cb cb, void *arg) {
  return submit_member_list(c, false, cb, arg);
}
int ketch_member_add_async(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                           bool is_learner, ketch_cb cb, void *arg) {
  return submit_member_change(c, KT_MSG_MEMBER_ADD, 0, peer_urls, n_peer_urls, is_learner, false,
                              cb, arg);
}
int ketch_member_remove_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg) {
  return submit_member_change(c, KT_MSG_MEMBER_REMOVE, id, NULL, 0, false, false, cb, arg);
}
int ketch_member_update_async(ketch_client *c, uint64_t id, const char *const *peer_urls,
                              size_t n_peer_urls, ketch_cb cb, void *arg) {
  return submit_member_change(c, KT_MSG_MEMBER_UPDATE, id, peer_urls, n_peer_urls, false, false, cb,
                              arg);
}
int ketch_member_promote_async(ketch_client *c, uint64_t id, ketch_cb cb, void *arg) {
  return submit_member_change(c, KT_MSG_MEMBER_PROMOTE, id, NULL, 0, false, false, cb, arg);
}
int ketch_move_leader_async(ketch_client *c, uint64_t target_id, ketch_cb cb, void *arg) {
  return submit_move_leader(c, target_id, false, cb, arg);
}

/* ---- synchronous calls: submit with keep, then run until done ---- */

struct waiter {
  bool done;
  int err;
  ketch_result *res;
};

static void sync_cb(void *arg, int err, const ketch_result *res) {
  struct waiter *w = arg;
  w->done = true;
  w->err = err;
  w->res = (ketch_result *)res; /* keep: an owned_result, ours now */
}

static int sync_finish(ketch_client *c, int err, struct waiter *w, ketch_result **out) {
  if (out)
    *out = NULL;
  if (err)
    return err;
  process(c); /* send at once */
  while (!w->done)
    wait_turn(c, -1); /* every request completes by its deadline */
  if (w->err) {
    set_errmsg(c, "%s", w->res->message);
    ketch_result_free(w->res);
    return w->err;
  }
  c->errmsg[0] = 0;
  if (out)
    *out = w->res;
  else
    ketch_result_free(w->res);
  return 0;
}

#define SYNC_GUARD(c)                                                                              \
  do {                                                                                             \
    if ((c)->in_cb) {                                                                              \
      if (out)                                                                                     \
        *out = NULL;                                                                               \
      return KETCH_EINVAL;                                                                         \
    }                                                                                              \
  } while (0)

int ketch_get(ketch_client *c, const void *key, size_t key_len, ketch_result **out) {
  SYNC_GUARD(c);
  ketch_range_req q;
  memset(&q, 0, sizeof q);
  q.key = key;
  q.key_len = key_len;
  struct waiter w = {0};
  return sync_finish(c, submit_op(c, KETCH_OP_RANGE, &q, true, sync_cb, &w), &w, out);
}
int ketch_range(ketch_client *c, const ketch_range_req *req, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_op(c, KETCH_OP_RANGE, req, true, sync_cb, &w), &w, out);
}
int ketch_put(ketch_client *c, const ketch_put_req *req, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_op(c, KETCH_OP_PUT, req, true, sync_cb, &w), &w, out);
}
int ketch_delete(ketch_client *c, const ketch_delete_req *req, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_op(c, KETCH_OP_DELETE, req, true, sync_cb, &w), &w, out);
}
int ketch_txn(ketch_client *c, const ketch_txn_req *req, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_op(c, KETCH_OP_TXN, req, true, sync_cb, &w), &w, out);
}
int ketch_compact(ketch_client *c, int64_t revision, bool physical, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_compact(c, revision, physical, true, sync_cb, &w), &w, out);
}
int ketch_status(ketch_client *c, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_status(c, true, sync_cb, &w), &w, out);
}
int ketch_member_list(ketch_client *c, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_member_list(c, true, sync_cb, &w), &w, out);
}
int ketch_member_add(ketch_client *c, const char *const *peer_urls, size_t n_peer_urls,
                     bool is_learner, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c,
                     submit_member_change(c, KT_MSG_MEMBER_ADD, 0, peer_urls, n_peer_urls,
                                          is_learner, true, sync_cb, &w),
                     &w, out);
}
int ketch_member_remove(ketch_client *c, uint64_t id, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(
      c, submit_member_change(c, KT_MSG_MEMBER_REMOVE, id, NULL, 0, false, true, sync_cb, &w), &w,
      out);
}
int ketch_member_update(ketch_client *c, uint64_t id, const char *const *peer_urls,
                        size_t n_peer_urls, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c,
                     submit_member_change(c, KT_MSG_MEMBER_UPDATE, id, peer_urls, n_peer_urls,
                                          false, true, sync_cb, &w),
                     &w, out);
}
int ketch_member_promote(ketch_client *c, uint64_t id, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(
      c, submit_member_change(c, KT_MSG_MEMBER_PROMOTE, id, NULL, 0, false, true, sync_cb, &w), &w,
      out);
}
int ketch_move_leader(ketch_client *c, uint64_t target_id, ketch_result **out) {
  SYNC_GUARD(c);
  struct waiter w = {0};
  return sync_finish(c, submit_move_leader(c, target_id, true, sync_cb, &w), &w, out);
}

/* ---- leases ---- */

static int submit_lease(ketch_client *c, int type, int64_t id, int64_t ttl, bool keys, bool keep,
                        ketch_cb cb, void *arg) {
  if (type == KT_MSG_LEASE_GRANT && ttl <= 0) {
    set_errmsg(c, "%s", "lease TTL must be > 0");
    return KETCH_EINVAL;
  }
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = (uint8_t)type;
  r.u.lease.id = id;
  r.u.lease.ttl = ttl;
  r.u.lease.keys = keys;
  /* a renewal, a time-to-live or a list is safe to send again; a grant (a
   * second lease) or a revoke is not */
  bool is_read =
      type == KT_MSG_LEASE_KEEPALIVE || type == KT_MSG_LEASE_TTL || type == KT_MSG_LEASE_LEASES;
  return submit(c, &r, is_read, keep, cb, arg);
}

int ketch_lease_grant_async(ketch_client *c, int64_t ttl_s, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_GRANT, id, ttl_s, false, false, cb, arg);
}
int ketch_lease_revoke_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_REVOKE, id, 0, false, false, cb, arg);
}
int ketch_lease_keepalive_once_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_KEEPALIVE, id, 0, false, false, cb, arg);
}
int ketch_lease_timetolive_async(ketch_client *c, int64_t id, bool keys, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_TTL, id, 0, keys, false, cb, arg);
}
int ketch_lease_leases_async(ketch_client *c, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_LEASES, 0, 0, false, false, cb, arg);
}

/* ---- keep-alive manager ----
 * Each kept lease is renewed at once (to learn its TTL), then every ttl/3
 * after each successful renewal (clientv3's rhythm), from timers(). A failed
 * renewal (timeout, no endpoint, ...) is retried every KA_RETRY_MS; once a
 * whole TTL has passed since the last success the lease is presumed lost and
 * the callback gets the error as its last result. */
#define KA_RETRY_MS 500

/* The delay before the next renewal of a lease whose TTL is ttl_s seconds. */
static int64_t ka_interval_ms(int64_t ttl_s) {
  int64_t ms = ttl_s > 0 ? ttl_s * 1000 / 3 : KA_RETRY_MS;
  return ms < 1 ? 1 : ms;
}

static void ka_user_cb(ketch_client *c, struct keepalive *ka, int err, const ketch_result *res) {
  if (!ka->cb)
    return;
  bool was = c->in_cb;
  c->in_cb = true;
  ka->cb(ka->arg, err, res);
  c->in_cb = was;
}

static void ka_cb(void *arg, int err, const ketch_result *res) {
  struct keepalive *ka = arg;
  ketch_client *c = ka->c;
  ka->in_flight = false;
  int64_t now = now_ms();
  if (ka->dead || c->closing) {
    ka->dead = true;
    c->ka_next_ms = 0; /* free it in the next timers() */
    return;
  }
  if (!err && res->lease.ttl > 0) {
    ka->ttl_s = res->lease.ttl;
    ka->last_ok_ms = now;
    ka->last_err = 0;
    ka->next_ms = now + ka_interval_ms(ka->ttl_s);
    c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
    ka_user_cb(c, ka, 0, res);
    return;
  }
  if (!err || err == KETCH_ELEASENOTFOUND) { /* the lease is gone: last result, ttl 0 */
    ka->dead = true;
    c->ka_next_ms = 0;
    ketch_result gone;
    memset(&gone, 0, sizeof gone);
    gone.type = KETCH_OP_LEASE_KEEPALIVE;
    gone.message = "";
    if (!err)
      gone.header = res->header;
    gone.lease.id = ka->id;
    ka_user_cb(c, ka, 0, &gone);
    return;
  }
  ka->last_err = err;
  int64_t since = ka->last_ok_ms ? ka->last_ok_ms : ka->started_ms;
  if (ka->ttl_s > 0 && now - since >= ka->ttl_s * 1000) {
    ka->dead = true;
    c->ka_next_ms = 0;
    char msg[400];
    snprintf(msg, sizeof msg,
             "lease keep-alive gave up: no renewal succeeded within the lease's TTL (%llds): %s",
             (long long)ka->ttl_s, res->message);
    ketch_result fail;
    memset(&fail, 0, sizeof fail);
    fail.type = KETCH_OP_LEASE_KEEPALIVE;
    fail.err = err;
    fail.message = msg;
    ka_user_cb(c, ka, err, &fail);
    return;
  }
  ka->next_ms = now + KT_MIN(KA_RETRY_MS, ka_interval_ms(ka->ttl_s));
  c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
}

/* Submits the renewals that are due, frees finished entries, and sets
 * ka_next_ms. Runs no callback. */
static void ka_tick(ketch_client *c, int64_t now) {
  int64_t next = INT64_MAX;
  size_t j = 0;
  for (size_t i = 0; i < c->n_kas; i++) {
    struct keepalive *ka = c->kas[i];
    if (ka->dead && !ka->in_flight) {
      free(ka);
      continue;
    }
    c->kas[j++] = ka;
    if (ka->dead || ka->in_flight)
      continue;
    if (ka->next_ms <= now) {
      if (submit_lease(c, KT_MSG_LEASE_KEEPALIVE, ka->id, 0, false, false, ka_cb, ka) == 0) {
        ka->in_flight = true;
        continue;
      }
      ka->next_ms = now + 100; /* all slots taken: try again soon */
    }
    next = KT_MIN(next, ka->next_ms);
  }
  c->n_kas = j;
  c->ka_next_ms = next;
}

static struct keepalive *ka_find(ketch_client *c, int64_t id) {
  for (size_t i = 0; i < c->n_kas; i++)
    if (c->kas[i]->id == id && !c->kas[i]->dead)
      return c->kas[i];
  return NULL;
}

int ketch_lease_keepalive_start(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  if (id <= 0)
    return KETCH_EINVAL;
  struct keepalive *ka = ka_find(c, id);
  if (ka) { /* already kept: the new callback replaces the old one */
    ka->cb = cb;
    ka->arg = arg;
    return 0;
  }
  if (c->n_kas >= MAX_KEEPALIVES)
    return KETCH_EBUSY;
  if (c->n_kas == c->cap_kas) {
    size_t cap = c->cap_kas ? c->cap_kas * 2 : 8;
    struct keepalive **k = realloc(c->kas, cap * sizeof *k);
    if (!k)
      return KETCH_ENOMEM;
    c->kas = k;
    c->cap_kas = cap;
  }
  ka = calloc(1, sizeof *ka);
  if (!ka)
    return KETCH_ENOMEM;
  ka->c = c;
  ka->id = id;
  ka->cb = cb;
  ka->arg = arg;
  ka->started_ms = ka->next_ms = now_ms();
  c->kas[c->n_kas++] = ka;
  c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
  return 0;
}

int ketch_lease_keepalive_stop(ketch_client *c, int64_t id) {
  struct keepalive *ka = ka_find(c, id);
  if (!ka)
    return KETCH_ENOTFOUND;
  ka->dead = true;
  c->ka_next_ms = 0; /* freed by the next timers() (or when its renewal returns) */
  return 0;
}

/* ---- watches ---- */

static uint64_t next_seq_bits(ketch_client *c) {
  c->seq++;
  return (c->seq << SLOT_BITS) & (CTRL_BIT - 1);
}

/* The revision a (re)created stream starts from (see struct watch). */
static int64_t watch_resume_rev(const struct watch *w) {
  if (w->mid_fragment)
    return w->last_rev;
  if (w->done_rev >= 0)
    return w->done_rev + 1;
  return w->start_revision;
}

/* Precondition: READY. Appends the WATCH_CREATE of w to the output. */
static void watch_send_create(ketch_client *c, struct watch *w, uint32_t idx) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_WATCH_CREATE;
  r.id = WATCH_BIT | next_seq_bits(c) | idx;
  struct kt_watch_create_req *q = &r.u.watch_create;
  q->key = (struct kt_bytes){w->key_n ? w->key : (const uint8_t *)"", w->key_n};
  q->range_end = (struct kt_bytes){w->end_n ? w->end : (const uint8_t *)"", w->end_n};
  q->start_revision = watch_resume_rev(w);
  q->prev_kv = w->prev_kv;
  q->no_put = w->no_put;
  q->no_delete = w->no_delete;
  q->progress_notify = w->progress_notify;
  q->fragment = w->fragment;
  kt_proto_encode_req(&c->out, &r);
  w->req_id = r.id;
  w->state = W_SENT;
  w->server_id = -1;
  w->cancel_sent = false;
  w->retry_at_ms = 0;
  w->skip_rev = w->last_rev;
  w->skip_left = w->mid_fragment ? w->n_at_last : 0;
}

/* Precondition: READY. WATCH_CANCEL (watch_id >= 0) or WATCH_PROGRESS. */
static void watch_send_ctrl(ketch_client *c, uint8_t type, int64_t watch_id) {
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = type;
  r.id = WATCH_BIT | CTRL_BIT | next_seq_bits(c) | 1;
  r.u.watch_cancel.watch_id = watch_id;
  kt_proto_encode_req(&c->out, &r);
}

/* Ends w: its last delivery (canceled, err) runs from deliver_finals(). */
static void watch_finish(ketch_client *c, struct watch *w, int err, const char *msg,
                         int64_t compact_rev) {
  if (w->state == W_FINAL)
    return;
  w->state = W_FINAL;
  w->final_err = err;
  w->compact_rev = compact_rev;
  snprintf(w->final_msg, sizeof w->final_msg, "%s", err && msg && *msg ? msg : "");
  if (err && !w->final_msg[0])
    snprintf(w->final_msg, sizeof w->final_msg, "%s", kt_strerror(err));
  c->n_live_watches--;
  c->finals_pending = true;
}

static void deliver_finals(ketch_client *c) {
  if (!c->n_live_watches)
    c->watch_next_ms = INT64_MAX; /* no stale wake-up for a watch that ended */
  while (c->finals_pending) {
    c->finals_pending = false;
    for (size_t i = 0; i < c->n_watches; i++) { /* callbacks may add watches */
      struct watch *w = c->watches[i];
      if (!w || w->state != W_FINAL)
        continue;
      ketch_result res;
      memset(&res, 0, sizeof res);
      res.type = KETCH_OP_WATCH;
      res.err = w->final_err;
      res.message = w->final_msg;
      res.watch.watch_id = (int64_t)w->handle;
      res.watch.canceled = true;
      res.watch.compact_revision = w->compact_rev;
      res.header = w->final_hdr;
      c->watches[i] = NULL;
      bool was = c->in_cb;
      c->in_cb = true;
      w->cb(w->arg, w->final_err, &res);
      c->in_cb = was;
      free(w->key);
      free(w);
    }
  }
}

/* The connection is gone, and every stream with it. */
static void watches_conn_lost(ketch_client *c) {
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (!w || w->state == W_FINAL)
      continue;
    if (w->cancel_wanted) {
      watch_finish(c, w, 0, NULL, 0); /* nothing left to cancel on the server */
      continue;
    }
    w->state = W_UNSENT;
    w->req_id = 0;
    w->retry_at_ms = 0;
  }
}

/* A connection is READY: (re)open every watch, ask for progress if wanted. */
static void watches_ready(ketch_client *c) {
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (w && w->state == W_UNSENT)
      watch_send_create(c, w, (uint32_t)i);
  }
  if (c->progress_wanted) {
    c->progress_wanted = false;
    watch_send_ctrl(c, KT_MSG_WATCH_PROGRESS, 0);
  }
}

static void watch_deliver(ketch_client *c, struct watch *w, const struct kt_resp *r, bool created,
                          const ketch_event *ev, size_t n) {
  ketch_result res;
  memset(&res, 0, sizeof res);
  res.type = KETCH_OP_WATCH;
  res.message = "";
  res.header.cluster_id = r->header.cluster_id;
  res.header.member_id = r->header.member_id;
  res.header.revision = r->header.revision;
  res.header.raft_term = r->header.raft_term;
  res.watch.watch_id = (int64_t)w->handle;
  res.watch.created = created;
  res.watch.events = ev;
  res.watch.n_events = n;
  bool was = c->in_cb;
  c->in_cb = true;
  w->cb(w->arg, 0, &res);
  c->in_cb = was;
  kt_arena_reset(&c->res_arena);
}

static bool watch_transient(int code) {
  return code == KETCH_ENOLEADER || code == KETCH_ESTOPPED || code == KETCH_EBUSY ||
         code == KETCH_ETIMEOUT || code == KETCH_EUNAVAILABLE;
}

/* The server ended or refused a stream w did not ask to end: open it again
 * after a backoff, or give up after WATCH_RETRY_MAX in a row. */
static void watch_retry(ketch_client *c, struct watch *w, int code, const char *msg) {
  w->state = W_UNSENT;
  w->req_id = 0;
  if (++w->retries > WATCH_RETRY_MAX) {
    watch_finish(c, w, code, msg, 0);
    return;
  }
  w->retry_at_ms = now_ms() + (50ll << w->retries);
  c->watch_next_ms = KT_MIN(c->watch_next_ms, w->retry_at_ms);
}

/* A frame on a watch id. Returns false when the connection failed. */
static bool watch_on_frame(ketch_client *c, const struct kt_resp *r) {
  if (r->id & CTRL_BIT)
    return true; /* the answer to a WATCH_CANCEL / WATCH_PROGRESS: nothing to do */
  uint32_t idx = (uint32_t)(r->id & SLOT_MASK);
  struct watch *w = idx < c->n_watches ? c->watches[idx] : NULL;
  if (!w || w->req_id != r->id || w->state == W_FINAL || w->state == W_UNSENT)
    return true; /* a stream of an earlier life of this entry */
  if (r->type == KT_MSG_ERROR) {
    int code = (int)r->u.error.code;
    char msg[200];
    snprintf(msg, sizeof msg, "%.*s", (int)KT_MIN(r->u.error.message.n, 190),
             r->u.error.message.p ? (const char *)r->u.error.message.p : "");
    if (code <= 0 || code >= KT_ERR_MAX)
      code = KETCH_EINTERNAL;
    if (w->cancel_wanted)
      watch_finish(c, w, 0, NULL, 0);
    else if (watch_transient(code))
      watch_retry(c, w, code, msg);
    else
      watch_finish(c, w, code, msg, 0);
    return true;
  }
  if (r->type != KT_MSG_WATCH_CREATE) {
    char why[100];
    snprintf(why, sizeof why, "response type %u on a watch stream", r->type);
    conn_fail(c, why);
    return false;
  }
  const struct kt_watch_resp *wr = &r->u.watch;
  if (wr->canceled) {
    w->final_hdr = (ketch_header){r->header.cluster_id, r->header.member_id, r->header.revision,
                                  r->header.raft_term};
    if (wr->compact_revision > 0) {
      watch_finish(c, w, KETCH_ECOMPACTED, kt_strerror(KT_ECOMPACTED), wr->compact_revision);
    } else if (w->cancel_wanted) {
      watch_finish(c, w, 0, NULL, 0);
    } else {
      char msg[200];
      snprintf(msg, sizeof msg, "watch canceled by the server: %.*s",
               (int)KT_MIN(wr->cancel_reason.n, 150),
               wr->cancel_reason.p ? (const char *)wr->cancel_reason.p : "");
      watch_retry(c, w, KETCH_ECANCELED, msg);
    }
    return true;
  }
  if (wr->created) {
    w->state = W_ACTIVE;
    w->server_id = wr->watch_id;
    w->retries = 0;
    if (w->done_rev < 0 && w->start_revision == 0)
      w->done_rev = r->header.revision; /* the watch covers what comes after */
    if (w->cancel_wanted) {
      watch_send_ctrl(c, KT_MSG_WATCH_CANCEL, w->server_id);
      w->cancel_sent = true;
      w->cancel_deadline_ms = now_ms() + c->request_timeout_ms;
      c->watch_next_ms = KT_MIN(c->watch_next_ms, w->cancel_deadline_ms);
      return true;
    }
    if (!w->created_delivered) {
      w->created_delivered = true;
      watch_deliver(c, w, r, true, NULL, 0);
    }
    return true;
  }
  if (w->cancel_wanted)
    return true;           /* nothing is delivered after a cancel but the canceled */
  if (wr->n_events == 0) { /* progress: every event up to header.revision was sent */
    if (!w->mid_fragment && r->header.revision > w->done_rev)
      w->done_rev = r->header.revision;
    if (w->created_delivered)
      watch_deliver(c, w, r, false, NULL, 0);
    return true;
  }
  ketch_event *ev = kt_arena_alloc(&c->res_arena, sizeof *ev * wr->n_events);
  size_t n = 0;
  int64_t max_rev = 0;
  for (uint32_t i = 0; i < wr->n_events; i++) {
    const struct kt_event *e = &wr->events[i];
    int64_t rev = e->kv.mod_revision;
    max_rev = KT_MAX(max_rev, rev);
    if (rev > w->skip_rev)
      w->skip_left = 0;
    if (rev <= w->done_rev || rev < w->last_rev)
      continue; /* delivered before the stream was opened again */
    if (rev == w->skip_rev && w->skip_left) {
      w->skip_left--;
      continue;
    }
    if (rev == w->last_rev) {
      w->n_at_last++;
    } else {
      w->last_rev = rev;
      w->n_at_last = 1;
    }
    ev[n].type = e->type;
    kv_out(&c->res_arena, &ev[n].kv, &e->kv, false);
    ev[n].prev_kv = e->has_prev_kv ? kvs_out(&c->res_arena, &e->prev_kv, 1, false) : NULL;
    n++;
  }
  w->mid_fragment = wr->fragment;
  w->done_rev = KT_MAX(w->done_rev, wr->fragment ? max_rev - 1 : max_rev);
  if (n)
    watch_deliver(c, w, r, false, ev, n);
  else
    kt_arena_reset(&c->res_arena);
  return true;
}

/* Watch retries that are due, cancels that got no answer; recomputes
 * watch_next_ms. */
static void watch_timers(ketch_client *c, int64_t now) {
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < c->n_watches; i++) {
    struct watch *w = c->watches[i];
    if (!w || w->state == W_FINAL)
      continue;
    if (w->cancel_sent) {
      if (now >= w->cancel_deadline_ms)
        watch_finish(c, w, 0, NULL, 0); /* the server never confirmed: ended anyway */
      else
        next = KT_MIN(next, w->cancel_deadline_ms);
    } else if (w->state == W_UNSENT && w->retry_at_ms) {
      if (now < w->retry_at_ms)
        next = KT_MIN(next, w->retry_at_ms);
      else if (c->state == ST_READY)
        watch_send_create(c, w, (uint32_t)i);
      else
        w->retry_at_ms = 0; /* sent by watches_ready() on the next connection */
    }
  }
  c->watch_next_ms = next;
}

static void timers(ketch_client *c, int64_t now) {
  if (now >= c->ka_next_ms)
    ka_tick(c, now);
  if (now >= c->watch_next_ms)
    watch_timers(c, now);
}

static int64_t timers_next_ms(const ketch_client *c) {
  return KT_MIN(c->ka_next_ms, c->watch_next_ms);
}

int ketch_watch(ketch_client *c, const ketch_watch_req *req, ketch_cb cb, void *arg,
                uint64_t *out) {
  if (out)
    *out = 0;
  if (!req || !cb || req->start_revision < 0)
    return KETCH_EINVAL;
  struct kt_bytes key, end;
  int err = range_in(&c->enc_arena, &key, &end, req->key, req->key_len, req->range_end,
                     req->range_end_len, req->prefix, req->from_key);
  if (err) {
    kt_arena_reset(&c->enc_arena);
    set_errmsg(c, "%s", "invalid watch request (see ketch.h for the fields' rules)");
    return err;
  }
  if ((uint64_t)key.n + end.n + 64 > c->max_request_bytes) {
    kt_arena_reset(&c->enc_arena);
    return KETCH_ETOOLARGE;
  }
  if (c->n_live_watches >= MAX_WATCHES) {
    kt_arena_reset(&c->enc_arena);
    return KETCH_EBUSY;
  }
  size_t idx = 0;
  while (idx < c->n_watches && c->watches[idx])
    idx++;
  if (idx == c->n_watches && c->n_watches == c->cap_watches) {
    size_t cap = c->cap_watches ? c->cap_watches * 2 : 8;
    struct watch **ws = realloc(c->watches, cap * sizeof *ws);
    if (!ws) {
      kt_arena_reset(&c->enc_arena);
      return KETCH_ENOMEM;
    }
    c->watches = ws;
    c->cap_watches = cap;
  }
  struct watch *w = calloc(1, sizeof *w);
  uint8_t *bytes = malloc((size_t)key.n + end.n + 1);
  if (!w || !bytes) {
    free(w);
    free(bytes);
    kt_arena_reset(&c->enc_arena);
    return KETCH_ENOMEM;
  }
  memcpy(bytes, key.p, key.n);
  memcpy(bytes + key.n, end.p, end.n);
  kt_arena_reset(&c->enc_arena);
  w->key = bytes;
  w->key_n = key.n;
  w->end = bytes + key.n;
  w->end_n = end.n;
  w->start_revision = req->start_revision;
  w->prev_kv = req->prev_kv;
  w->no_put = req->no_put;
  w->no_delete = req->no_delete;
  w->progress_notify = req->progress_notify;
  w->fragment = req->fragment;
  w->done_rev = req->start_revision > 0 ? req->start_revision - 1 : -1;
  w->server_id = -1;
  w->state = W_UNSENT;
  w->handle = ++c->next_handle;
  w->cb = cb;
  w->arg = arg;
  if (idx == c->n_watches)
    c->n_watches++;
  c->watches[idx] = w;
  c->n_live_watches++;
  if (c->state == ST_READY)
    watch_send_create(c, w, (uint32_t)idx);
  else if (c->state == ST_IDLE)
    conn_start(c);
  if (out)
    *out = w->handle;
  return 0;
}

static struct watch *watch_find(ketch_client *c, uint64_t handle) {
  for (size_t i = 0; i < c->n_watches; i++)
    if (c->watches[i] && c->watches[i]->handle == handle)
      return c->watches[i];
  return NULL;
}

int ketch_watch_cancel(ketch_client *c, uint64_t handle) {
  struct watch *w = handle ? watch_find(c, handle) : NULL;
  if (!w)
    return KETCH_ENOTFOUND;
  if (w->state == W_FINAL || w->cancel_wanted)
    return 0; /* already ending */
  w->cancel_wanted = true;
  if (w->state == W_UNSENT) {
    watch_finish(c, w, 0, NULL, 0);
  } else if (w->state == W_ACTIVE) {
    watch_send_ctrl(c, KT_MSG_WATCH_CANCEL, w->server_id);
    w->cancel_sent = true;
    w->cancel_deadline_ms = now_ms() + c->request_timeout_ms;
    c->watch_next_ms = KT_MIN(c->watch_next_ms, w->cancel_deadline_ms);
  } /* W_SENT: the cancel goes out when `created` arrives with the watch_id */
  return 0;
}

int ketch_watch_progress(ketch_client *c) {
  if (c->state == ST_READY)
    watch_send_ctrl(c, KT_MSG_WATCH_PROGRESS, 0);
  else
    c->progress_wanted = true;
  return 0;
}

/* ---- synchronous lease calls ---- */

#define LEASE_SYNC(call)                                                                           \
  do {                                                                                             \
    SYNC_GUARD(c);                                                                                 \
    struct waiter w = {0};                                                                         \
    return sync_finish(c, call, &w, out);                                                          \
  } while (0)

int ketch_lease_grant(ketch_client *c, int64_t ttl_s, int64_t id, ketch_result **out) {
  LEASE_SYNC(submit_lease(c, KT_MSG_LEASE_GRANT, id, ttl_s, false, true, sync_cb, &w));
}
int ketch_lease_revoke(ketch_client *c, int64_t id, ketch_result **out) {
  LEASE_SYNC(submit_lease(c, KT_MSG_LEASE_REVOKE, id, 0, false, true, sync_cb, &w));
}
int ketch_lease_keepalive_once(ketch_client *c, int64_t id, ketch_result **out) {
  LEASE_SYNC(submit_lease(c, KT_MSG_LEASE_KEEPALIVE, id, 0, false, true, sync_cb, &w));
}
int ketch_lease_timetolive(ketch_client *c, int64_t id, bool keys, ketch_result **out) {
  LEASE_SYNC(submit_lease(c, KT_MSG_LEASE_TTL, id, 0, keys, true, sync_cb, &w));
}
int ketch_lease_leases(ketch_client *c, ketch_result **out) {
  LEASE_SYNC(submit_lease(c, KT_MSG_LEASE_LEASES, 0, 0, false, true, sync_cb, &w));
}

/* ---- open / close ---- */

static void str_wipe(char **p) {
  if (*p)
    sodium_memzero(*p, strlen(*p));
  free(*p);
  *p = NULL;
}

static void creds_free(ketch_client *c) {
  str_wipe(&c->user);
  str_wipe(&c->password);
  sodium_memzero(c->token, sizeof c->token);
  c->token_only = false;
}

/* 0, or KETCH_ENOMEM / KETCH_EINVAL (a name the member would refuse). */
static int creds_set(ketch_client *c, const char *user, const char *password) {
  creds_free(c);
  if (!user)
    return 0;
  if (!*user || strlen(user) > 256 || (password && strlen(password) > 1024)) {
    set_errmsg(c, "%s", !*user ? "user name is empty" : "user name or password too long");
    return KETCH_EINVAL;
  }
  c->user = strdup(user);
  c->password = password ? strdup(password) : NULL;
  if (!c->user || (password && !c->password)) {
    creds_free(c);
    return KETCH_ENOMEM;
  }
  return 0;
}

/* ketch_authenticate_async ended: on success the handle is that user from
 * now on (its connections authenticate with the token, then the password). */
static void auth_async_done(ketch_client *c, int err, const struct kt_resp *resp) {
  if (!err && resp && c->pend_user) {
    creds_free(c);
    c->user = c->pend_user;
    c->password = c->pend_password;
    c->pend_user = c->pend_password = NULL;
    size_t n = resp->u.auth.token.n < sizeof c->token ? resp->u.auth.token.n : 0;
    memcpy(c->token, resp->u.auth.token.p, n);
    c->token[n] = 0;
    c->auth_err = 0;
  }
  str_wipe(&c->pend_user);
  str_wipe(&c->pend_password);
}

static void free_client(ketch_client *c) {
  str_wipe(&c->pend_user);
  str_wipe(&c->pend_password);
  free_endpoints(c->eps, c->n_eps);
  free(c->srv_domain);
  free(c->srv_suffix);
  free(c->srv_dns);
  if (c->slots)
    for (uint32_t i = 0; i < c->max_outstanding; i++)
      kt_buf_free(&c->slots[i].frame);
  free(c->slots);
  kt_io_close(&c->io);
  kt_tls_ctx_free(c->tls);
  free(c->server_name);
  free(c->identity);
  if (c->ai_list)
    freeaddrinfo(c->ai_list);
  creds_free(c);
  kt_buf_free(&c->out);
  kt_buf_free(&c->in);
  kt_arena_free(&c->enc_arena);
  kt_arena_free(&c->dec_arena);
  kt_arena_free(&c->res_arena);
  for (size_t i = 0; i < c->n_watches; i++) {
    if (c->watches[i])
      free(c->watches[i]->key);
    free(c->watches[i]);
  }
  free(c->watches);
  for (size_t i = 0; i < c->n_kas; i++)
    free(c->kas[i]);
  free(c->kas);
  free(c);
}

int ketch_open(ketch_client **out, const char *endpoints, const ketch_options *opts, char *errmsg,
               size_t errmsg_len) {
  *out = NULL;
  copy_msg(errmsg, errmsg_len, "");
  ketch_options o;
  ketch_options_init(&o);
  if (opts) {
    if (opts->dial_timeout_ms < 0 || opts->request_timeout_ms < 0 || opts->max_outstanding < 0 ||
        opts->max_outstanding > (int)SLOT_MASK) {
      copy_msg(errmsg, errmsg_len, "invalid option: negative timeout or max_outstanding too large");
      return KETCH_EINVAL;
    }
    if (opts->dial_timeout_ms)
      o.dial_timeout_ms = opts->dial_timeout_ms;
    if (opts->request_timeout_ms)
      o.request_timeout_ms = opts->request_timeout_ms;
    if (opts->max_outstanding)
      o.max_outstanding = opts->max_outstanding;
    o.nonblocking_open = opts->nonblocking_open;
    o.user = opts->user;
    o.password = opts->password;
    o.token = opts->token;
  }
  if (!endpoints || !*endpoints) {
    copy_msg(errmsg, errmsg_len, "no endpoints given");
    return KETCH_EINVAL;
  }
  ketch_client *c = calloc(1, sizeof *c);
  if (!c)
    return KETCH_ENOMEM;
  kt_io_init_plain(&c->io, -1);
  c->state = ST_IDLE;
  c->dial_timeout_ms = o.dial_timeout_ms;
  c->request_timeout_ms = o.request_timeout_ms;
  c->max_outstanding = (uint32_t)o.max_outstanding;
  c->max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES;
  c->backoff_ms = BACKOFF_MIN_MS;
  c->ka_next_ms = c->watch_next_ms = INT64_MAX;
  c->slots = calloc(c->max_outstanding, sizeof *c->slots);
  if (!c->slots) {
    free_client(c);
    return KETCH_ENOMEM;
  }
  char why[400] = "";
  int perr = parse_endpoints(endpoints, &c->eps, &c->n_eps, why, sizeof why);
  if (perr) {
    copy_msg(errmsg, errmsg_len, why);
    free_client(c);
    return perr;
  }
  if (!c->n_eps) {
    copy_msg(errmsg, errmsg_len, "no endpoints given");
    free_client(c);
    return KETCH_EINVAL;
  }
  for (uint32_t i = c->max_outstanding; i > 0; i--)
    slot_free(c, &c->slots[i - 1]);
  if (opts) {
    c->tls_default = opts->tls || opts->ca_file || opts->cert_file || opts->key_file;
    bool any = false;
    for (size_t i = 0; i < c->n_eps; i++)
      any |= ep_tls(c, &c->eps[i]);
    if (opts->server_name && *opts->server_name)
      c->server_name = strdup(opts->server_name);
    if (opts->identity && *opts->identity)
      c->identity = strdup(opts->identity);
    if (any) {
      struct kt_tls_config tc = {
          .ca_file = opts->ca_file,
          .cert_file = opts->cert_file,
          .key_file = opts->key_file,
          .skip_verify = opts->insecure_skip_verify,
          .cert_flag = "--cert",
          .key_flag = "--key",
          .ca_flag = "--cacert",
      };
      struct kt_err e = {0};
      if (kt_tls_ctx_new(&tc, &c->tls, &e)) {
        copy_msg(errmsg, errmsg_len, e.msg);
        free_client(c);
        return KETCH_EINVAL;
      }
    }
  } else {
    for (size_t i = 0; i < c->n_eps; i++)
      if (c->eps[i].scheme == 2) {
        copy_msg(errmsg, errmsg_len, "an https:// endpoint needs options (ketch_options)");
        free_client(c);
        return KETCH_EINVAL;
      }
  }
  int cerr = creds_set(c, o.user, o.password);
  if (!cerr && !o.user && o.token && *o.token) {
    if (strlen(o.token) >= sizeof c->token) {
      set_errmsg(c, "%s", "token too long");
      cerr = KETCH_EINVAL;
    } else {
      snprintf(c->token, sizeof c->token, "%s", o.token);
      c->token_only = true;
    }
  }
  if (cerr) {
    copy_msg(errmsg, errmsg_len, cerr == KETCH_EINVAL ? c->errmsg : "out of memory");
    free_client(c);
    return cerr;
  }
  c->nonblocking = o.nonblocking_open;
  if (!o.nonblocking_open) {
    conn_start(c);
    while (c->state != ST_READY && c->state != ST_BACKOFF) {
      if (c->state == ST_IDLE)
        conn_start(c); /* after a failure with nothing pending */
      else
        wait_turn(c, -1); /* each endpoint is bounded by the dial timeout */
    }
    if (c->state != ST_READY) {
      char msg[1200];
      snprintf(msg, sizeof msg, "no endpoint available: %s", c->round_err);
      copy_msg(errmsg, errmsg_len, msg);
      free_client(c);
      return KETCH_EUNAVAILABLE;
    }
    if ((c->user || c->token_only) && c->auth_err > 0 && c->auth_err != KETCH_EAUTHNOTENABLED) {
      int aerr = c->auth_err;
      copy_msg(errmsg, errmsg_len, c->auth_msg);
      free_client(c);
      return aerr;
    }
  }
  *out = c;
  return 0;
}

int ketch_open_srv(ketch_client **out, const char *domain, const char *suffix,
                   const char *dns_servers, const ketch_options *opts, char *errmsg,
                   size_t errmsg_len) {
  if (out)
    *out = NULL;
  char eps[64 * 80];
  int timeout = opts && opts->dial_timeout_ms > 0 ? opts->dial_timeout_ms + 3000 : 5000;
  int rc = ketch_srv_endpoints(domain, suffix, dns_servers, timeout, eps, sizeof eps, errmsg,
                               errmsg_len);
  if (rc)
    return rc;
  if ((rc = ketch_open(out, eps, opts, errmsg, errmsg_len)))
    return rc;
  ketch_client *c = *out;
  c->srv_domain = strdup(domain);
  c->srv_suffix = suffix ? strdup(suffix) : NULL;
  c->srv_dns = dns_servers ? strdup(dns_servers) : NULL;
  c->srv_interval_ms = KETCH_SRV_REFRESH_MS;
  c->srv_next_ms = now_ms() + c->srv_interval_ms;
  if (!c->srv_domain || (suffix && !c->srv_suffix) || (dns_servers && !c->srv_dns)) {
    free_client(c);
    *out = NULL;
    copy_msg(errmsg, errmsg_len, "out of memory");
    return KETCH_ENOMEM;
  }
  return 0;
}

void ketch_close(ketch_client *c) {
  if (!c)
    return;
  kt_assert(!c->in_cb);
  c->closing = true;
  static const char m[] = "canceled: the handle was closed";
  /* callbacks may submit more: loop until nothing is left */
  while (c->pend_head || c->n_live_watches || c->finals_pending) {
    while (c->pend_head)
      complete(c, c->pend_head, KETCH_ECANCELED, m, sizeof m - 1, NULL);
    for (size_t i = 0; i < c->n_watches; i++) {
      struct watch *w = c->watches[i];
      if (w && w->handle && w->state != W_FINAL) {
        w->state = W_FINAL;
        w->final_err = KETCH_ECANCELED;
        snprintf(w->final_msg, sizeof w->final_msg, "%s", m);
        c->n_live_watches--;
        c->finals_pending = true;
      }
    }
    deliver_finals(c);
  }
  free_client(c);
}

/* ---- maintenance: snapshot, defragment, hash-kv, alarm ---- */

static int submit_maint(ketch_client *c, struct kt_req *r, bool keep, ketch_cb cb, void *arg) {
  /* DEFRAGMENT / HASH_KV / ALARM GET change nothing (retried on failover);
   * alarm changes and snapshot streams are not retried once sent. */
  bool is_read = r->type == KT_MSG_DEFRAGMENT || r->type == KT_MSG_HASH_KV ||
                 (r->type == KT_MSG_ALARM && r->u.alarm.action == KT_ALARM_GET);
  return submit(c, r, is_read, keep, cb, arg);
}

static int alarm_req(ketch_client *c, struct kt_req *r, int action, uint64_t member_id, int alarm) {
  if (action < KETCH_ALARM_GET || action > KETCH_ALARM_DEACTIVATE || alarm < KETCH_ALARM_NONE ||
      alarm > KETCH_ALARM_CORRUPT) {
    set_errmsg(c, "%s", "unknown alarm action or type");
    return KETCH_EINVAL;
  }
  memset(r, 0, sizeof *r);
  r->type = KT_MSG_ALARM;
  r->u.alarm = (struct kt_alarm_req){(uint8_t)action, member_id, (uint8_t)alarm};
  return 0;
}

/* ---- authentication and RBAC ---- */

static struct kt_bytes cstr(const char *p) {
  return (struct kt_bytes){(const uint8_t *)p, p ? (uint32_t)strlen(p) : 0};
}

static int auth_req(ketch_client *c, struct kt_req *r, int op, const ketch_auth_req *q) {
  static const ketch_auth_req none;
  if (!q)
    q = &none;
  memset(r, 0, sizeof *r);
  if (op < KETCH_OP_AUTH_ENABLE || op > KETCH_OP_ROLE_REVOKE_PERMISSION ||
      op == KETCH_OP_AUTHENTICATE || q->perm_type < KETCH_PERM_READ ||
      q->perm_type > KETCH_PERM_READWRITE || (q->name && strlen(q->name) > 256) ||
      (q->role && strlen(q->role) > 256) || (q->password && strlen(q->password) > 1024) ||
      q->key_len > UINT32_MAX || q->range_end_len > UINT32_MAX || (q->key_len && !q->key) ||
      (q->range_end_len && !q->range_end)) {
    set_errmsg(c, "%s", "invalid auth request (see ketch.h for ketch_auth's fields)");
    return KETCH_EINVAL;
  }
  r->type = (uint8_t)op;
  struct kt_auth_req *a = &r->u.auth;
  a->name = cstr(q->name);
  a->password = cstr(q->password);
  a->role = cstr(q->role);
  a->no_password = q->no_password;
  a->perm_type = (uint8_t)q->perm_type;
  a->key = (struct kt_bytes){q->key, (uint32_t)q->key_len};
  a->range_end = (struct kt_bytes){q->range_end, (uint32_t)q->range_end_len};
  return 0;
}

static bool auth_op_reads(int op) {
  return op == KETCH_OP_AUTH_STATUS || op == KETCH_OP_USER_GET || op == KETCH_OP_USER_LIST ||
         op == KETCH_OP_ROLE_GET || op == KETCH_OP_ROLE_LIST;
}

int ketch_auth_async(ketch_client *c, int op, const ketch_auth_req *req, ketch_cb cb, void *arg) {
  struct kt_req r;
  int err = auth_req(c, &r, op, req);
  return err ? err : submit(c, &r, auth_op_reads(op), false, cb, arg);
}

int ketch_auth(ketch_client *c, int op, const ketch_auth_req *req, ketch_result **out) {
  SYNC_GUARD(c);
  struct kt_req r;
  struct waiter w = {0};
  int err = auth_req(c, &r, op, req);
  if (err) {
    if (out)
      *out = NULL;
    return err;
  }
  return sync_finish(c, submit(c, &r, auth_op_reads(op), true, sync_cb, &w), &w, out);
}

int ketch_authenticate_async(ketch_client *c, const char *user, const char *password, ketch_cb cb,
                             void *arg) {
  /* an empty name goes to the member: it answers "not enabled" or "failed" */
  if (!user || strlen(user) > 256 || (password && strlen(password) > 1024)) {
    set_errmsg(c, "%s", "user name too long, or password too long");
    return KETCH_EINVAL;
  }
  if (c->pend_user)
    return KETCH_EBUSY; /* one at a time */
  struct kt_req r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_AUTHENTICATE;
  r.u.auth.name = cstr(user);
  r.u.auth.password = cstr(password);
  c->pend_user = strdup(user);
  c->pend_password = password ? strdup(password) : NULL;
  if (!c->pend_user || (password && !c->pend_password)) {
    str_wipe(&c->pend_user);
    str_wipe(&c->pend_password);
    return KETCH_ENOMEM;
  }
  /* safe to send again on another member: it changes nothing there */
  int err = submit(c, &r, true, false, cb, arg);
  if (err) {
    str_wipe(&c->pend_user);
    str_wipe(&c->pend_password);
  }
  return err;
}

const char *ketch_token(const ketch_client *c) { return c->token[0] ? c->token : NULL; }

void ketch_drop_password(ketch_client *c) {
  if (!c->user || !c->token[0])
    return;
  str_wipe(&c->user);
  str_wipe(&c->password);
  c->token_only = true;
}

int ketch_authenticate(ketch_client *c, const char *user, const char *password) {
  if (c->in_cb)
    return KETCH_EINVAL;
  if (!user) {
    set_errmsg(c, "%s", "user name is empty");
    return KETCH_EINVAL;
  }
  int err = creds_set(c, user, password);
  if (err)
    return err;
  if (c->state == ST_READY)
    auth_start(c);
  else if (c->state == ST_AUTH)
    c->auth_again = true;
  else
    c->auth_err = -1; /* the next connection authenticates */
  int64_t end = now_ms() + c->dial_timeout_ms + c->request_timeout_ms;
  process(c);
  while (!(c->state == ST_READY && c->auth_err >= 0)) {
    int64_t left = end - now_ms();
    if (left <= 0) {
      set_errmsg(c, "authentication did not finish in %d ms%s%s",
                 c->dial_timeout_ms + c->request_timeout_ms, c->round_err[0] ? ": " : "",
                 c->round_err);
      return c->state == ST_AUTH ? KETCH_ETIMEOUT : KETCH_EUNAVAILABLE;
    }
    if (c->state == ST_IDLE)
      conn_start(c);
    else
      wait_turn(c, (int)KT_MIN(left, INT32_MAX));
  }
  if (c->auth_err) {
    set_errmsg(c, "%s", c->auth_msg);
    return c->auth_err;
  }
  c->errmsg[0] = 0;
  return 0;
}

int ketch_snapshot_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_SNAPSHOT};
  return submit_maint(c, &r, false, cb, arg);
}
int ketch_defragment_async(ketch_client *c, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_DEFRAGMENT};
  return submit_maint(c, &r, false, cb, arg);
}
int ketch_hash_kv_async(ketch_client *c, int64_t revision, ketch_cb cb, void *arg) {
  struct kt_req r = {.type = KT_MSG_HASH_KV};
  r.u.hash_kv.revision = revision;
  return submit_maint(c, &r, false, cb, arg);
}
int ketch_alarm_async(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_cb cb,
                      void *arg) {
  struct kt_req r;
  int err = alarm_req(c, &r, action, member_id, alarm);
  return err ? err : submit_maint(c, &r, false, cb, arg);
}

int ketch_defragment(ketch_client *c, ketch_result **out) {
  SYNC_GUARD(c);
  struct kt_req r = {.type = KT_MSG_DEFRAGMENT};
  struct waiter w = {0};
  return sync_finish(c, submit_maint(c, &r, true, sync_cb, &w), &w, out);
}
int ketch_hash_kv(ketch_client *c, int64_t revision, ketch_result **out) {
  SYNC_GUARD(c);
  struct kt_req r = {.type = KT_MSG_HASH_KV};
  r.u.hash_kv.revision = revision;
  struct waiter w = {0};
  return sync_finish(c, submit_maint(c, &r, true, sync_cb, &w), &w, out);
}
int ketch_alarm(ketch_client *c, int action, uint64_t member_id, int alarm, ketch_result **out) {
  SYNC_GUARD(c);
  struct kt_req r;
  struct waiter w = {0};
  int err = alarm_req(c, &r, action, member_id, alarm);
  if (err) {
    if (out)
      *out = NULL;
    return err;
  }
  return sync_finish(c, submit_maint(c, &r, true, sync_cb, &w), &w, out);
}

/* snap/FORMAT.md, as far as a client checks it: the magic first, and the
 * last 32 bytes are BLAKE2b-256 of everything before them. */
#define SNAP_MAGIC "KETCHSNP"
#define SNAP_MIN_BYTES (82 + 65)
#define SNAP_HASH 32

struct snap_save {
  int fd;
  bool done;
  int err;
  char msg[300];
  uint64_t got;
  crypto_generichash_state st;
  uint8_t tail[SNAP_HASH]; /* the last bytes received, not hashed yet */
  size_t n_tail;
  ketch_header header;
};

static void snap_save_fail(struct snap_save *s, int err, const char *msg) {
  if (!s->err) {
    s->err = err;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
  }
}

/* Hash everything but the newest SNAP_HASH bytes, which stay in tail. */
static void snap_save_feed(struct snap_save *s, const uint8_t *p, size_t n) {
  if (n >= SNAP_HASH) {
    crypto_generichash_update(&s->st, s->tail, s->n_tail);
    crypto_generichash_update(&s->st, p, n - SNAP_HASH);
    memcpy(s->tail, p + n - SNAP_HASH, SNAP_HASH);
    s->n_tail = SNAP_HASH;
    return;
  }
  size_t over = s->n_tail + n > SNAP_HASH ? s->n_tail + n - SNAP_HASH : 0;
  crypto_generichash_update(&s->st, s->tail, over);
  memmove(s->tail, s->tail + over, s->n_tail - over);
  s->n_tail -= over;
  memcpy(s->tail + s->n_tail, p, n);
  s->n_tail += n;
}

static void snap_save_cb(void *arg, int err, const ketch_result *res) {
  struct snap_save *s = arg;
  if (err) {
    snap_save_fail(s, err, res->message);
    s->done = true;
    return;
  }
  const uint8_t *p = res->snapshot.blob;
  size_t n = res->snapshot.blob_len;
  if (s->got == 0 && (n < sizeof SNAP_MAGIC - 1 || memcmp(p, SNAP_MAGIC, sizeof SNAP_MAGIC - 1)))
    snap_save_fail(s, KETCH_ECORRUPT, "the member's answer is not a ketch snapshot (bad magic)");
  s->got += n;
  snap_save_feed(s, p, n);
  size_t off = 0;
  while (!s->err && off < n) {
    ssize_t w = write(s->fd, p + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      char m[200];
      snprintf(m, sizeof m, "write: %s", strerror(errno));
      snap_save_fail(s, KETCH_EIO, m);
      break;
    }
    off += (size_t)w;
  }
  if (res->snapshot.remaining_bytes == 0) {
    s->header = res->header;
    s->done = true;
  }
}

int ketch_snapshot_save(ketch_client *c, const char *path, ketch_result **out) {
  SYNC_GUARD(c);
  if (out)
    *out = NULL;
  if (!path || !*path) {
    set_errmsg(c, "%s", "snapshot path is empty");
    return KETCH_EINVAL;
  }
  char part[4200];
  if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part) {
    set_errmsg(c, "%s", "snapshot path too long");
    return KETCH_EINVAL;
  }
  if (sodium_init() < 0) {
    set_errmsg(c, "%s", "libsodium failed to initialize");
    return KETCH_EINTERNAL;
  }
  struct snap_save s;
  memset(&s, 0, sizeof s);
  s.fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (s.fd < 0) {
    set_errmsg(c, "could not open %s: %s", part, strerror(errno));
    return KETCH_EIO;
  }
  crypto_generichash_init(&s.st, NULL, 0, SNAP_HASH);
  int err = ketch_snapshot_async(c, snap_save_cb, &s);
  if (err) {
    close(s.fd);
    unlink(part);
    return err;
  }
  process(c);
  while (!s.done)
    wait_turn(c, -1); /* every frame moves the deadline; the request ends by it */
  if (!s.err) {
    uint8_t h[SNAP_HASH];
    crypto_generichash_final(&s.st, h, sizeof h);
    if (s.got < SNAP_MIN_BYTES || s.n_tail != SNAP_HASH || sodium_memcmp(h, s.tail, SNAP_HASH))
      snap_save_fail(&s, KETCH_ECORRUPT,
                     "snapshot hash mismatch: the received file does not match its trailer hash");
  }
  if (!s.err && fsync(s.fd) != 0) {
    char m[200];
    snprintf(m, sizeof m, "fsync: %s", strerror(errno));
    snap_save_fail(&s, KETCH_EIO, m);
  }
  if (close(s.fd) != 0 && !s.err)
    snap_save_fail(&s, KETCH_EIO, "close failed");
  if (!s.err && rename(part, path) != 0) {
    char m[200];
    snprintf(m, sizeof m, "rename to %s: %s", path, strerror(errno));
    snap_save_fail(&s, KETCH_EIO, m);
  }
  if (s.err) {
    unlink(part);
    set_errmsg(c, "%s", s.msg);
    return s.err;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  c->errmsg[0] = 0;
  if (out) {
    struct owned_result *o = calloc(1, sizeof *o);
    if (!o)
      return KETCH_ENOMEM;
    o->res.type = KETCH_OP_SNAPSHOT;
    o->res.message = "";
    o->res.header = s.header;
    o->res.snapshot.size_bytes = s.got;
    *out = &o->res;
  }
  return 0;
}
