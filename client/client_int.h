/* client/client_int.h — libketch's private header: the handle and what its
 * modules share. Never installed; ketch.h stays the whole public API.
 *
 * The modules, one concern each (each file's own header says more):
 *   client.c    the handle: open, open_srv, close, options, small getters
 *   conn.c      endpoints, the connection's state machine (connect, TLS,
 *               HELLO), failover and backoff, reading and writing frames,
 *               the event-loop integration (ketch_process, ketch_fd, ...)
 *   request.c   request slots: submit, dispatch of answers, completion,
 *               deadlines; synchronous calls (an asynchronous call + wait)
 *   result.c    public results from decoded responses; dup and free
 *   calls.c     public requests into wire requests: KV, txn, compaction,
 *               status, membership, maintenance
 *   auth.c      credentials, a connection's AUTHENTICATE, the Auth calls
 *   lease.c     lease calls and the keep-alive manager
 *   watch.c     watch streams, exactly once across reconnects
 *   snapshot.c  ketch_snapshot_save (stream to a file, hash checked)
 *   resolver.c  proxies registered under a resolver prefix
 *   srv.c       DNS SRV discovery; recipes.c: mutex, election (public API only)
 *
 * Internal names are kt_cl_<verb>; nothing here is exported from
 * libketch.so (client/ketch.map exports ketch_* only).
 *
 * Invariants (the handle's; each module adds its own):
 *   - A slot is either free (id == 0, on the free list) or pending (on the
 *     FIFO `pending` list in submission order). Since every request gets the
 *     same timeout, the list head has the earliest deadline.
 *   - A pending slot with `queued` has its frame in the current
 *     connection's output stream at offset out_start; bytes before out_base
 *     have been handed to the kernel. A queued write with out_base > out_start
 *     may have reached the server: it is never sent again.
 *   - Request id = (sequence << 24) | slot index; id 0 is the HELLO, id 1
 *     (AUTH_ID) the connection's AUTHENTICATE; watch streams carry WATCH_BIT.
 *   - No callback runs from a submit function; in_cb guards re-entry.
 */
#ifndef KT_CLIENT_INT_H
#define KT_CLIENT_INT_H

#include "ketch.h"

#include "../core/base.h"
#include "../net/proto.h"
#include "../net/tls.h"

#include <netdb.h>

#define SLOT_BITS 24 /* also: at most 2^24 watches' indexes (MAX_WATCHES is less) */
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000

/* ST_TLS: the TLS handshake of an https:// endpoint, between connect and
 * HELLO. ST_AUTH: the connection's AUTHENTICATE is in flight (after HELLO
 * when the handle has credentials, or again when the member asked for it);
 * requests wait unsent, as while connecting. */
enum { ST_IDLE, ST_BACKOFF, ST_CONNECTING, ST_TLS, ST_HELLO, ST_AUTH, ST_READY };
#define AUTH_ID 1 /* the request id of the connection's AUTHENTICATE */
#define AUTH_TOKEN_MAX 1024

/* Watch streams and watch control frames do not use slots: their ids carry
 * WATCH_BIT (stream: WATCH_BIT | seq << 24 | watch index; control frames
 * WATCH_CANCEL / WATCH_PROGRESS: WATCH_BIT | CTRL_BIT | seq, answers ignored). */
#define WATCH_BIT (1ull << 62)
#define CTRL_BIT (1ull << 61)

struct endpoint {
  char *host, *port;
  char name[320]; /* "host:port" */
  int scheme;     /* 0 none, 1 http://, 2 https:// */
};

struct slot {
  uint64_t id; /* 0 = free */
  uint8_t type;
  bool is_read, queued;
  bool doomed;                   /* a sent write on a lost connection: completes EUNKNOWN */
  bool stream;                   /* SNAPSHOT: cb runs per frame until the last one */
  uint8_t auth_tries, old_tries; /* sent again after an auth answer (kt_cl_auth_retry) */
  ketch_cb cb;
  void *arg;
  int64_t deadline_ms;
  uint64_t out_start;
  struct kt_buf frame;
  struct slot *prev, *next; /* pending list, or free list (next) */
  struct slot *dnext;       /* doomed list */
};

struct watch;     /* watch.c */
struct keepalive; /* lease.c */

/* A result owned by the caller (synchronous calls, ketch_result_dup). res
 * must stay first. */
struct owned_result {
  ketch_result res;
  struct kt_arena arena;
};

struct ketch_client {
  struct endpoint *eps;
  size_t n_eps, ep_idx;
  int dial_timeout_ms, request_timeout_ms;
  uint32_t max_outstanding;

  /* connection (conn.c) */
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

  /* requests (request.c) */
  struct slot *slots;
  struct slot *free_list, *pend_head, *pend_tail;
  struct slot *doomed_head; /* sent writes of a lost connection, to fail */
  size_t n_pending;
  uint64_t seq;
  struct kt_arena enc_arena, dec_arena, res_arena;
  bool in_cb;

  /* watches (watch.c; not in the pending list: a stream has no deadline) */
  struct watch **watches; /* index = low bits of the stream id */
  size_t n_watches, cap_watches, n_live_watches;
  uint64_t next_handle;
  bool finals_pending, progress_wanted, closing;

  /* keep-alives (lease.c) */
  struct keepalive **kas;
  size_t n_kas, cap_kas;
  int64_t ka_next_ms;    /* earliest next_ms of an idle live entry */
  int64_t watch_next_ms; /* earliest watch retry / cancel deadline */

  /* credentials (auth.c; NULL: none); the token the last AUTHENTICATE
   * answered; token_only: a token given without a user (ketch_options.token) */
  char *user, *password;
  char token[AUTH_TOKEN_MAX];
  bool token_only;
  char *pend_user, *pend_password; /* ketch_authenticate_async in flight */
  bool auth_with_token, auth_again;
  int auth_err; /* the last authentication's outcome; -1 while in flight */
  char auth_msg[200];

  char errmsg[512];
  char round_err[1024]; /* why each endpoint failed in this round */

  /* Discovered endpoints (conn.c's discovery_refresh): ketch_open_srv's
   * SRV records, or the registrations under ketch_options.resolver_prefix
   * (resolver.c), are looked up again before a new connection when the last
   * lookup is older than refresh_interval_ms, and after every endpoint of a
   * round failed. Neither srv_domain nor res_prefix: a fixed list. */
  char *srv_domain, *srv_suffix, *srv_dns;
  char *res_prefix, *res_cluster; /* the prefix; the cluster's endpoints */
  ketch_options *res_opts;        /* a private copy, to read them again */
  int refresh_interval_ms;
  int64_t refresh_next_ms;
  bool nonblocking;
};

/* ---- client.c ---- */
int64_t kt_cl_now_ms(void);
void kt_cl_set_errmsg(ketch_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kt_cl_copy_msg(char *dst, size_t dst_len, const char *src);

/* ---- conn.c ---- */
/* A comma-separated endpoint list into a new array (*out, *n_out; room for
 * `extra` more entries; empty entries are skipped). Errors: KETCH_EINVAL
 * (why gets the reason), KETCH_ENOMEM. */
int kt_cl_parse_endpoints(const char *list, size_t extra, struct endpoint **out, size_t *n_out,
                          char *why, size_t why_len);
void kt_cl_free_endpoints(struct endpoint *eps, size_t n);
bool kt_cl_ep_tls(const ketch_client *c, const struct endpoint *ep);
/* Whether the handle needs a connection: requests pending or watches open. */
bool kt_cl_wants_conn(const ketch_client *c);
void kt_cl_conn_start(ketch_client *c);
void kt_cl_conn_fail(ketch_client *c, const char *why);
void kt_cl_conn_ready(ketch_client *c);
/* One pass of ketch_process (also from inside the library's own waits). */
void kt_cl_process(ketch_client *c);
/* One turn of a blocking wait: poll until the next deadline (at most max_ms,
 * -1: no limit), then process. */
void kt_cl_wait_turn(ketch_client *c, int max_ms);

/* ---- request.c ---- */
void kt_cl_slots_init(ketch_client *c);
/* Takes a slot, encodes req into it and queues it (retried after a lost
 * connection only when the request changes nothing: kt_cl_resend_safe).
 * Resets enc_arena. KETCH_EINVAL (no cb), KETCH_EBUSY, KETCH_ETOOLARGE. */
int kt_cl_submit(ketch_client *c, struct kt_req *req, ketch_cb cb, void *arg);
bool kt_cl_resend_safe(const struct kt_req *req);
void kt_cl_queue_slot(ketch_client *c, struct slot *s);
void kt_cl_queue_unsent(ketch_client *c);
/* Completes a pending slot: unlinks it, frees it, runs its callback with the
 * result of resp (err == 0) or with err and msg (NULL: the code's text). */
void kt_cl_complete(ketch_client *c, struct slot *s, int err, const char *msg, size_t msg_len,
                    const struct kt_resp *resp);
/* An answer on a request id (not HELLO, not AUTH_ID, not a watch). Returns
 * false when the connection failed. */
bool kt_cl_on_reply(ketch_client *c, const struct kt_resp *r);
/* Deadlines: the connection's handshake and the pending requests'. */
void kt_cl_expire(ketch_client *c, int64_t now);
/* Runs cb with res as a callback of the handle (in_cb set meanwhile). */
void kt_cl_callback(ketch_client *c, ketch_cb cb, void *arg, int err, const ketch_result *res);

/* Synchronous calls are their asynchronous form plus a wait: cb
 * kt_cl_sync_cb with &w keeps a copy of the result (ketch_result_dup). */
struct kt_cl_waiter {
  bool done;
  int err;
  ketch_result *res;
};
void kt_cl_sync_cb(void *arg, int err, const ketch_result *res);
/* Waits for w after a submit that returned err; the result into *out. */
int kt_cl_sync_wait(ketch_client *c, int err, struct kt_cl_waiter *w, ketch_result **out);
/* The body of a synchronous call; `call` is the asynchronous form submitted
 * with (kt_cl_sync_cb, &w). Refused from inside a callback. */
#define KT_CL_SYNC(c, out, call)                                                                   \
  do {                                                                                             \
    struct kt_cl_waiter w = {0};                                                                   \
    if ((c)->in_cb) {                                                                              \
      if (out)                                                                                     \
        *(out) = NULL;                                                                             \
      return KETCH_EINVAL;                                                                         \
    }                                                                                              \
    return kt_cl_sync_wait((c), (call), &w, (out));                                                \
  } while (0)

/* ---- result.c ---- */
/* The public result of resp (or of an error when err != 0) in arena a; byte
 * strings point into resp's input (valid while it is). */
void kt_cl_result_build(struct kt_arena *a, ketch_result *res, uint8_t type, int err,
                        const char *msg, size_t msg_len, const struct kt_resp *resp);
void kt_cl_kv_out(ketch_kv *o, const struct kt_kv *k);
const ketch_kv *kt_cl_kvs_out(struct kt_arena *a, const struct kt_kv *k, uint32_t n);
const char *kt_cl_dup_str(struct kt_arena *a, const void *p, size_t n);

/* ---- calls.c ---- */
/* key/range_end of a range, delete or watch with the prefix / from_key
 * helpers applied (a prefix's end in a). KETCH_EINVAL. */
int kt_cl_range_in(struct kt_arena *a, struct kt_bytes *key, struct kt_bytes *end, const void *k,
                   size_t kn, const void *e, size_t en, bool prefix, bool from_key);

/* ---- auth.c ---- */
int kt_cl_creds_set(ketch_client *c, const char *user, const char *password);
void kt_cl_creds_free(ketch_client *c);
/* After HELLO (or when asked again): the connection's AUTHENTICATE. */
void kt_cl_auth_start(ketch_client *c);
void kt_cl_auth_on_frame(ketch_client *c, const struct kt_resp *r);
/* An error answer that asks for s to be sent again (re-authenticated, or
 * the auth store moved): true when s waits again, unsent. */
bool kt_cl_auth_retry(ketch_client *c, struct slot *s, int code);
/* The text a request of this type gets for an auth refusal with msg. */
const char *kt_cl_refusal_text(uint8_t type, int code, const char *msg);
/* ketch_authenticate_async's request completed. */
void kt_cl_auth_async_done(ketch_client *c, int err, const struct kt_resp *resp);

/* ---- lease.c ---- */
void kt_cl_ka_tick(ketch_client *c, int64_t now);
void kt_cl_ka_free_all(ketch_client *c);

/* ---- resolver.c ---- */
/* One registration's value (etcd's naming.Update JSON, n bytes from
 * outside): 1 and its Addr (NUL-terminated, in addr_len bytes) for an Add of
 * a native ketch endpoint, 0 for an Add of another kind (a gRPC proxy), -1
 * for anything else (a Delete, no usable Addr). Reads only v[0, n). */
int kt_cl_naming_parse(const uint8_t *v, size_t n, char *addr, size_t addr_len);
/* ketch_open with opts->resolver_prefix set. */
int kt_cl_open_resolved(ketch_client **out, const char *endpoints, const ketch_options *opts,
                        char *errmsg, size_t errmsg_len);
int kt_cl_resolver_set(ketch_client *c, const char *cluster, const char *prefix,
                       const ketch_options *opts);
/* The registrations read again (blocking): the list into list[cap]. */
int kt_cl_resolver_lookup(ketch_client *c, char *list, size_t cap);
void kt_cl_resolver_free(ketch_client *c);

/* ---- watch.c ---- */
void kt_cl_watches_conn_lost(ketch_client *c);
void kt_cl_watches_ready(ketch_client *c);
bool kt_cl_watch_on_frame(ketch_client *c, const struct kt_resp *r);
void kt_cl_watch_timers(ketch_client *c, int64_t now);
void kt_cl_deliver_finals(ketch_client *c);
/* ketch_close: every live watch ends with KETCH_ECANCELED (msg). */
void kt_cl_watches_close(ketch_client *c, const char *msg);
void kt_cl_watch_free_all(ketch_client *c);

#endif
