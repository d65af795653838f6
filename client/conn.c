/* client/conn.c — libketch's connection: endpoints, connect, TLS, HELLO,
 * failover, frames in and out, and the event-loop integration.
 *
 * Owns: the endpoint list and the one connection (socket, state, output and
 * input buffers, the address list being tried, backoff).
 *
 * States: IDLE -> CONNECTING (non-blocking connect, one address of the
 * endpoint after another) -> TLS (https:// endpoints) -> HELLO -> AUTH (with
 * credentials, auth.c) -> READY; any failure goes to the next endpoint
 * (round robin), and after a whole round of failures to BACKOFF (20 ms
 * doubling to 1 s). A handle with discovered endpoints (SRV records, a
 * resolver prefix) looks them up again before a new connection when due.
 *
 * Data flow: kt_cl_process() reads what arrived into `in`, splits frames,
 * decodes each (dec_arena) and routes it: HELLO, the connection's
 * AUTHENTICATE (auth.c), a watch stream (watch.c) or a request's answer
 * (request.c); it runs the timers (lease.c, watch.c), writes `out` (frames
 * queued by submits and callbacks) and expires deadlines.
 *
 * Failover (ketch.h): on a lost connection, reads and unsent writes wait
 * for the next one; a write of which any byte reached the kernel completes
 * KETCH_EUNKNOWN — it is never sent twice.
 */
#include "client_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define READ_CHUNK (64 * 1024)

/* ---- endpoints ---- */

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
    kt_cl_copy_msg(why, why_len, "empty or overlong endpoint");
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

void kt_cl_free_endpoints(struct endpoint *eps, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(eps[i].host);
    free(eps[i].port);
  }
  free(eps);
}

int kt_cl_parse_endpoints(const char *list, size_t extra, struct endpoint **out, size_t *n_out,
                          char *why, size_t why_len) {
  size_t cap = 1 + extra, n = 0;
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
        kt_cl_free_endpoints(eps, n + 1); /* with what was parsed */
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

bool kt_cl_ep_tls(const ketch_client *c, const struct endpoint *ep) {
  return ep->scheme == 2 || (ep->scheme == 0 && c->tls_default);
}

int ketch_set_endpoints(ketch_client *c, const char *endpoints, char *errmsg, size_t errmsg_len) {
  if (!c || !endpoints)
    return KETCH_EINVAL;
  struct endpoint *eps;
  size_t n;
  char why[400] = "";
  /* room for one more: the current one kept, see ketch.h */
  int err = kt_cl_parse_endpoints(endpoints, 1, &eps, &n, why, sizeof why);
  if (err) {
    kt_cl_copy_msg(errmsg, errmsg_len, why);
    return err;
  }
  for (size_t i = 0; i < n && !err; i++)
    if (kt_cl_ep_tls(c, &eps[i]) && !c->tls) {
      snprintf(why, sizeof why, "%s: TLS endpoint on a handle opened without TLS", eps[i].name);
      err = KETCH_EINVAL;
    }
  if (!err && n == 0) {
    snprintf(why, sizeof why, "no endpoints given");
    err = KETCH_EINVAL;
  }
  if (err) {
    kt_cl_copy_msg(errmsg, errmsg_len, why);
    kt_cl_free_endpoints(eps, n);
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
  kt_cl_free_endpoints(c->eps, c->n_eps);
  c->eps = eps;
  c->n_eps = n;
  c->ep_idx = idx;
  c->fails_in_round = 0;
  return 0;
}

/* Handles with discovered endpoints (ketch_open_srv's SRV records, a
 * resolver prefix's registrations): they are looked up again (blocking: SRV
 * at most min(dial timeout, 2 s); registrations about a dial timeout per
 * cluster endpoint plus one request). A list that resolves and needs no TLS
 * the handle was not opened with replaces the endpoints, and the next
 * connection starts from its first one; otherwise the list is kept. Called
 * from IDLE only, with no address list in use. */
static void discovery_refresh(ketch_client *c) {
  c->refresh_next_ms = kt_cl_now_ms() + c->refresh_interval_ms;
  size_t cap = 64 * 1024;
  char *list = malloc(cap), why[400];
  int tmo = c->dial_timeout_ms < 2000 ? c->dial_timeout_ms : 2000;
  int err = !list           ? KETCH_ENOMEM
            : c->srv_domain ? ketch_srv_endpoints(c->srv_domain, c->srv_suffix, c->srv_dns, tmo,
                                                  list, cap, why, sizeof why)
                            : kt_cl_resolver_lookup(c, list, cap);
  struct endpoint *eps;
  size_t n;
  /* the lookup failed or found nothing: keep what we have */
  if (err || kt_cl_parse_endpoints(list, 0, &eps, &n, why, sizeof why)) {
    free(list);
    return;
  }
  free(list);
  bool same = n == c->n_eps, ok = n > 0;
  for (size_t i = 0; i < n; i++) {
    ok &= !kt_cl_ep_tls(c, &eps[i]) || c->tls;
    same &= same && !strcmp(eps[i].name, c->eps[i].name) && eps[i].scheme == c->eps[i].scheme;
  }
  if (!ok || same) {
    kt_cl_free_endpoints(eps, n);
    return;
  }
  kt_cl_free_endpoints(c->eps, c->n_eps);
  c->eps = eps;
  c->n_eps = n;
  c->ep_idx = 0;
  c->fails_in_round = 0;
}

/* ---- connecting ---- */

bool kt_cl_wants_conn(const ketch_client *c) { return c->n_pending || c->n_live_watches; }

static void conn_close_fd(ketch_client *c) {
  kt_io_close(&c->io);
  kt_buf_reset(&c->out);
  kt_buf_reset(&c->in);
  c->out_base = 0;
  c->cluster_id = c->member_id = 0;
}

/* Keeps why each endpoint failed in the current round; the previous round's
 * reasons stay readable until the next failure. */
static void note_round_err(ketch_client *c, const char *why) {
  if (c->fails_in_round == 0)
    c->round_err[0] = 0;
  size_t used = strlen(c->round_err);
  snprintf(c->round_err + used, sizeof c->round_err - used, "%s%s: %s", used ? "; " : "",
           c->eps[c->ep_idx].name, why);
  kt_cl_set_errmsg(c, "%s: %s", c->eps[c->ep_idx].name, why);
}

/* The current connection (or connection attempt) failed: close it; requeue
 * reads and unsent writes, fail sent writes with EUNKNOWN; move on to the
 * next endpoint. */
void kt_cl_conn_fail(ketch_client *c, const char *why) {
  bool was_ready = c->state == ST_READY;
  if (c->ai_cur && c->ai_cur->ai_next && !was_ready && c->state == ST_CONNECTING) {
    /* another address of the same endpoint */
    conn_close_fd(c);
    c->ai_cur = c->ai_cur->ai_next;
    c->state = ST_IDLE;
    kt_cl_conn_start(c);
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
  kt_cl_watches_conn_lost(c);
  while (c->doomed_head) {
    struct slot *s = c->doomed_head;
    c->doomed_head = s->dnext;
    s->dnext = NULL;
    kt_cl_complete(c, s, KETCH_EUNKNOWN, msg, strlen(msg), NULL);
  }
  if (c->state == ST_IDLE && kt_cl_wants_conn(c))
    kt_cl_conn_start(c);
}

/* A step of connecting failed with errno-style reason `what: strerror(e)`. */
static void conn_fail_errno(ketch_client *c, const char *what, int e) {
  char why[200];
  snprintf(why, sizeof why, "%s: %s", what, strerror(e));
  kt_cl_conn_fail(c, why);
}

/* From IDLE: start a non-blocking connect to the current endpoint (or go to
 * BACKOFF after a whole round of failures). Failures that happen at once move
 * on to the next endpoint within this call. */
void kt_cl_conn_start(ketch_client *c) {
  for (;;) {
    if (c->state != ST_IDLE)
      return;
    if ((c->srv_domain || c->res_prefix) && !c->nonblocking && !c->ai_cur &&
        (c->fails_in_round >= c->n_eps || kt_cl_now_ms() >= c->refresh_next_ms)) {
      bool round_done = c->fails_in_round >= c->n_eps;
      discovery_refresh(c); /* a new list starts a new round at its first endpoint */
      if (round_done && c->fails_in_round == 0)
        continue;
    }
    if (c->fails_in_round >= c->n_eps) {
      c->fails_in_round = 0;
      c->state = ST_BACKOFF;
      c->backoff_until_ms = kt_cl_now_ms() + c->backoff_ms;
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
        kt_cl_conn_fail(c, why);
        continue;
      }
      c->ai_cur = c->ai_list;
    }
    struct addrinfo *ai = c->ai_cur;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      conn_fail_errno(c, "socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    kt_io_init_plain(&c->io, fd);
    c->state = ST_CONNECTING;
    c->conn_deadline_ms = kt_cl_now_ms() + c->dial_timeout_ms;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      conn_fail_errno(c, "connect", errno);
      continue;
    }
    return; /* completion (even an immediate one) is seen as POLLOUT */
  }
}

/* The socket is connected (and TLS, if any, done): send HELLO. */
static void conn_connected(ketch_client *c) {
  c->state = ST_HELLO;
  static const char name[] = "libketch/" KETCH_VERSION;
  struct kt_req req = {.type = KT_MSG_HELLO, .id = 0};
  req.u.hello.version = KT_PROTO_VERSION;
  req.u.hello.client = (struct kt_bytes){(const uint8_t *)name, sizeof name - 1};
  if (c->identity)
    req.u.hello.identity =
        (struct kt_bytes){(const uint8_t *)c->identity, (uint32_t)strlen(c->identity)};
  kt_buf_reset(&c->out);
  kt_proto_encode_req(&c->out, &req);
}

/* A connect finished (POLLOUT): its outcome, then TLS or HELLO. */
static void conn_check_connect(ketch_client *c) {
  struct pollfd p = {c->io.fd, POLLOUT, 0};
  if (poll(&p, 1, 0) <= 0)
    return;
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
    soerr = errno;
  if (soerr) {
    conn_fail_errno(c, "connect", soerr);
    return;
  }
  if (!kt_cl_ep_tls(c, &c->eps[c->ep_idx])) {
    conn_connected(c);
    return;
  }
  struct kt_err e = {0};
  int fd = c->io.fd;
  const char *name = c->server_name ? c->server_name : c->eps[c->ep_idx].host;
  if (kt_io_init_tls(&c->io, fd, c->tls, name, &e)) {
    kt_io_init_plain(&c->io, fd); /* kt_cl_conn_fail closes it */
    kt_cl_conn_fail(c, e.msg);
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
  kt_cl_conn_fail(c, why);
}

void kt_cl_conn_ready(ketch_client *c) {
  c->state = ST_READY;
  c->fails_in_round = 0;
  c->backoff_ms = BACKOFF_MIN_MS;
  kt_cl_queue_unsent(c);
  kt_cl_watches_ready(c);
}

static void on_hello(ketch_client *c, const struct kt_resp *r) {
  char why[300];
  if (r->type == KT_MSG_ERROR) {
    snprintf(why, sizeof why, "hello refused: %s (%.*s)", kt_strerror((int)r->u.error.code),
             (int)r->u.error.message.n, (const char *)r->u.error.message.p);
    kt_cl_conn_fail(c, why);
    return;
  }
  if (r->type != KT_MSG_HELLO || r->id != 0) {
    kt_cl_conn_fail(c, "protocol error: expected a HELLO response");
    return;
  }
  if (r->u.hello.version != KT_PROTO_VERSION) {
    snprintf(why, sizeof why, "server speaks protocol version %u, we speak %u",
             (unsigned)r->u.hello.version, KT_PROTO_VERSION);
    kt_cl_conn_fail(c, why);
    return;
  }
  c->cluster_id = r->u.hello.cluster_id;
  c->member_id = r->u.hello.member_id;
  if (r->u.hello.max_request_bytes)
    c->max_request_bytes = r->u.hello.max_request_bytes;
  snprintf(c->server, sizeof c->server, "%.*s", (int)KT_MIN(r->u.hello.server.n, 60),
           (const char *)r->u.hello.server.p);
  if (c->user || c->token_only)
    kt_cl_auth_start(c);
  else
    kt_cl_conn_ready(c);
}

/* ---- frames in and out ---- */

/* Handles one response frame body. Returns false when the connection failed
 * (the input buffer is gone). */
static bool on_frame(ketch_client *c, const uint8_t *body, uint32_t len) {
  struct kt_resp r;
  struct kt_err e = {0};
  kt_arena_reset(&c->dec_arena);
  int err = kt_proto_decode_resp(body, len, &c->dec_arena, &r, &e);
  if (err) {
    char why[320];
    snprintf(why, sizeof why, "bad response frame: %s", e.msg[0] ? e.msg : kt_strerror(err));
    kt_cl_conn_fail(c, why);
    return false;
  }
  if (c->state == ST_HELLO) {
    on_hello(c, &r);
    return c->state == ST_AUTH || c->state == ST_READY;
  }
  if (r.id & WATCH_BIT)
    return kt_cl_watch_on_frame(c, &r);
  if (r.id == AUTH_ID) {
    kt_cl_auth_on_frame(c, &r);
    return c->state == ST_AUTH || c->state == ST_READY;
  }
  if (r.id == 0) { /* connection-level error; the server closes next */
    if (r.type == KT_MSG_ERROR)
      kt_cl_set_errmsg(c, "server: %s: %.*s", kt_strerror((int)r.u.error.code),
                       (int)r.u.error.message.n, (const char *)r.u.error.message.p);
    return true;
  }
  return kt_cl_on_reply(c, &r);
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
    kt_cl_conn_fail(c, why);
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
      kt_cl_conn_fail(c, n == 0 ? "connection closed by server" : e.msg);
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
        kt_cl_conn_fail(c, "bad frame length from server");
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

/* ---- the loop ---- */

static bool handshaking(const ketch_client *c) {
  return c->state == ST_CONNECTING || c->state == ST_TLS || c->state == ST_HELLO ||
         c->state == ST_AUTH;
}

static bool connected(const ketch_client *c) {
  return c->state == ST_HELLO || c->state == ST_AUTH || c->state == ST_READY;
}

void kt_cl_process(ketch_client *c) {
  int64_t now = kt_cl_now_ms();
  if (c->state == ST_BACKOFF && now >= c->backoff_until_ms) {
    c->state = ST_IDLE;
    if (kt_cl_wants_conn(c))
      kt_cl_conn_start(c);
  }
  if (c->state == ST_CONNECTING)
    conn_check_connect(c);
  if (c->state == ST_TLS)
    tls_step(c);
  /* Read before writing: a connection the server closed while we were idle
   * is noticed before a write is put on it (that write then goes to the
   * next endpoint instead of completing EUNKNOWN). */
  if (connected(c))
    do_read(c);
  now = kt_cl_now_ms(); /* keep-alive renewals, watch retries and cancels */
  if (now >= c->ka_next_ms)
    kt_cl_ka_tick(c, now);
  if (now >= c->watch_next_ms)
    kt_cl_watch_timers(c, now);
  if (c->state == ST_IDLE && kt_cl_wants_conn(c))
    kt_cl_conn_start(c);
  if (connected(c))
    do_write(c); /* including frames queued by callbacks */
  now = kt_cl_now_ms();
  if (handshaking(c) && now >= c->conn_deadline_ms)
    kt_cl_conn_fail(c, c->state == ST_CONNECTING ? "dial timeout"
                       : c->state == ST_TLS      ? "TLS handshake timeout"
                       : c->state == ST_HELLO    ? "handshake timeout"
                                                 : "authentication timed out");
  kt_cl_expire(c, now);
  kt_cl_deliver_finals(c);
}

int ketch_process(ketch_client *c) {
  if (c->in_cb)
    return KETCH_EINVAL;
  kt_cl_process(c);
  return c->state == ST_BACKOFF || (c->state == ST_IDLE && kt_cl_wants_conn(c)) ? KETCH_EUNAVAILABLE
                                                                                : 0;
}

int ketch_fd(const ketch_client *c) { return c->state >= ST_CONNECTING ? c->io.fd : -1; }

short ketch_events(const ketch_client *c) {
  int ev;
  if (c->state == ST_CONNECTING)
    return POLLOUT;
  if (c->state == ST_TLS)
    ev = kt_io_events(&c->io, true, true); /* what the handshake waits for */
  else if (connected(c))
    ev = kt_io_events(&c->io, true, c->out.len > 0);
  else
    return 0;
  return (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0));
}

int ketch_timeout_ms(const ketch_client *c) {
  int64_t deadline = INT64_MAX;
  if (c->pend_head)
    deadline = c->pend_head->deadline_ms;
  if (handshaking(c))
    deadline = KT_MIN(deadline, c->conn_deadline_ms);
  if (c->state >= ST_HELLO && kt_io_pending(&c->io))
    return 0; /* TLS read ahead: process again before sleeping */
  if (c->state == ST_BACKOFF)
    deadline = KT_MIN(deadline, c->backoff_until_ms);
  deadline = KT_MIN(deadline, KT_MIN(c->ka_next_ms, c->watch_next_ms));
  if ((c->state == ST_IDLE && kt_cl_wants_conn(c)) || c->finals_pending)
    return 0;
  if (deadline == INT64_MAX)
    return -1;
  int64_t d = deadline - kt_cl_now_ms();
  if (d <= 0)
    return 0;
  return d > INT32_MAX ? INT32_MAX : (int)d + 1; /* +1: never wake just before */
}

void kt_cl_wait_turn(ketch_client *c, int max_ms) {
  int t = ketch_timeout_ms(c);
  if (t < 0 || (max_ms >= 0 && t > max_ms))
    t = max_ms;
  struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
  if (p.fd >= 0 || t != 0)
    poll(&p, p.fd >= 0 ? 1 : 0, t);
  kt_cl_process(c);
}

int ketch_run(ketch_client *c, int timeout_ms) {
  if (c->in_cb)
    return KETCH_EINVAL;
  int64_t end = timeout_ms < 0 ? INT64_MAX : kt_cl_now_ms() + timeout_ms;
  for (;;) {
    kt_cl_process(c);
    if (!c->n_pending)
      return 0;
    int64_t left = end - kt_cl_now_ms();
    if (left <= 0)
      return KETCH_ETIMEOUT;
    kt_cl_wait_turn(c, left > INT32_MAX ? INT32_MAX : (int)left);
  }
}
