/* net/gateway.c — the L4 gateway. See net/gateway.h for the data flow.
 *
 * A connection has two fds (client c, upstream u) with one ev_io each whose
 * mask is recomputed after every event from the state (update()):
 *   read c   while c is open for reading and c2u has room
 *   write u  while connecting (completion) or c2u has bytes
 *   read u   once connected, while u is open for reading and u2c has room
 *   write c  while u2c has bytes
 * When a side's reading ended (EOF) and its buffer has drained, the other
 * side's writing is shut; when both directions are done, or on any error,
 * both fds close. Buffers never grow: cap bytes each, allocated with the
 * connection. */
#include "gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>
#include <poll.h>

#include "../client/ketch.h"
#include "config.h"
#include "http.h"
#include "sock.h"
#include "srv.h"

struct gw_ep {
  char label[80]; /* host:port as given or resolved */
  struct sockaddr_storage sa;
  socklen_t salen;
  bool failed;
  bool gone;                 /* no longer in the SRV records: not picked (its connections go on) */
  uint16_t priority, weight; /* SRV's; --endpoints: 0, 0 */
  int64_t current;           /* smooth weighted round robin state */
  bool unhealthy;            /* --health-check native: the last probe failed */
  struct gw_probe *probe;    /* its health probe, or NULL */
  double retry_at;
  uint64_t conns, fails, up_bytes, down_bytes;
  int active;
};

struct gw {
  struct ev_loop *loop;
  int lfd;
  ev_io accept_w;
  ev_timer accept_pause, stats;
  ev_signal sigterm, sigint;
  struct gw_ep eps[KT_GW_MAX_ENDPOINTS];
  size_t n_eps;
  double retry_delay_s, connect_timeout_s;
  size_t buf_cap;
  bool splice; /* --splice */
  size_t n_conns, max_conns;
  uint64_t accepted, refused, no_endpoint; /* client connections, for /metrics */
  struct kt_http *http;                    /* --listen-metrics-urls, or NULL */
  struct gw_conn *conns;                   /* list of live connections (for shutdown) */
  /* --discovery-srv: the records are looked up again when the shortest
   * address TTL among them has passed (clamped to 1 s .. 5 min; c-ares 1.18
   * does not expose the SRV records' own TTL), asynchronously on the loop. */
  const char *srv_domain, *srv_suffix, *dns_servers;
  ev_timer refresh;
  bool resolving;
  struct kt_srv_result *srv_res;
  /* --health-check native: every --health-interval a STATUS request on a
   * libketch handle per endpoint; an error, a timeout or no known leader
   * makes it unhealthy (not picked) until a probe succeeds. */
  bool health_native, stopping;
  double health_interval_s;
  ev_timer health;
};

/* One endpoint's probe: a non-blocking libketch handle driven by the loop
 * (its fd, wanted events and deadline re-read after every ketch_process). */
struct gw_probe {
  struct gw *g;
  int idx;
  ketch_client *c;
  ev_io io;
  ev_timer tm;
  bool in_flight;
};

/* One direction's buffer: a pipe that splice(2) moves the bytes through
 * (pr/pw; the kernel passes page references, the bytes are not copied
 * through user space), or, when no pipe could be had or with --splice=false,
 * cap bytes of memory (p). Either way at most cap bytes are held. The copy
 * is the default: on loopback splice measured 5-10% more CPU per request
 * (README's gateway section). */
struct gw_buf {
  char *p;
  int pr, pw;
  size_t off, len, cap;
  bool full; /* a splice into the pipe found it full (its slots, not bytes) */
};

struct gw_conn {
  struct gw *g;
  struct gw_conn *prev, *next;
  int cfd, ufd;
  int ep;         /* index into g->eps, -1 before the first pick */
  uint64_t tried; /* bit i: endpoint i tried for this client */
  bool connected; /* upstream connect completed */
  bool c_eof, u_eof;
  bool u_wshut, c_wshut;
  ev_io cw, uw;
  ev_timer ct;
  struct gw_buf c2u, u2c;
  char peer[64];
};

static void conn_update(struct gw_conn *k);
static void try_connect(struct gw_conn *k);
static void buf_free(struct gw_buf *b);

static void set_io(struct ev_loop *loop, ev_io *w, int events) {
  if ((w->events & (EV_READ | EV_WRITE)) == events && ev_is_active(w))
    return;
  ev_io_stop(loop, w);
  if (events) {
    ev_io_set(w, w->fd, events);
    ev_io_start(loop, w);
  }
}

static void conn_close(struct gw_conn *k, const char *why) {
  struct gw *g = k->g;
  if (k->ep >= 0 && k->connected)
    g->eps[k->ep].active--;
  kt_log(KT_LOG_DEBUG, "gateway", "close client=%s endpoint=%s: %s", k->peer,
         k->ep >= 0 ? g->eps[k->ep].label : "-", why);
  ev_io_stop(g->loop, &k->cw);
  ev_io_stop(g->loop, &k->uw);
  ev_timer_stop(g->loop, &k->ct);
  close(k->cfd);
  if (k->ufd >= 0)
    close(k->ufd);
  if (k->prev)
    k->prev->next = k->next;
  else
    g->conns = k->next;
  if (k->next)
    k->next->prev = k->prev;
  buf_free(&k->c2u);
  buf_free(&k->u2c);
  free(k);
  g->n_conns--;
}

/* Reads from fd into b while it has room. Returns 1 on EOF, -1 on error. */
static int fill(int fd, struct gw_buf *b, uint64_t *count) {
  ssize_t r;
  if (b->pw >= 0) {
    size_t room = b->cap - b->len;
    if (!room || b->full)
      return 0;
    r = splice(fd, NULL, b->pw, NULL, room, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (r < 0 && errno == EAGAIN) {
      /* the socket was readable, so the pipe's slots are taken (small
       * segments use one each): read again once some are drained */
      b->full = b->len > 0;
      return 0;
    }
  } else {
    if (b->off && b->off + b->len == b->cap) {
      memmove(b->p, b->p + b->off, b->len);
      b->off = 0;
    }
    size_t room = b->cap - b->off - b->len;
    if (!room)
      return 0;
    r = read(fd, b->p + b->off + b->len, room);
  }
  if (r > 0) {
    b->len += (size_t)r;
    *count += (uint64_t)r;
    return 0;
  }
  if (r == 0)
    return 1;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

/* Writes b's bytes to fd. Returns -1 on error. */
static int drain(int fd, struct gw_buf *b) {
  if (!b->len)
    return 0;
  ssize_t w = b->pr >= 0 ? splice(b->pr, NULL, fd, NULL, b->len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
                         : send(fd, b->p + b->off, b->len, MSG_NOSIGNAL);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  b->off += (size_t)w;
  b->len -= (size_t)w;
  if (w > 0)
    b->full = false;
  if (!b->len)
    b->off = 0;
  return 0;
}

/* A pipe of about cap bytes, or else cap bytes of memory. */
static int buf_init(struct gw_buf *b, size_t cap, bool use_pipe) {
  int fds[2];
  b->pr = b->pw = -1;
  if (use_pipe && pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
    int sz = fcntl(fds[1], F_SETPIPE_SZ, (int)cap);
    if (sz < 0)
      sz = fcntl(fds[1], F_GETPIPE_SZ);
    if (sz > 0) {
      b->pr = fds[0];
      b->pw = fds[1];
      b->cap = (size_t)sz < cap ? (size_t)sz : cap;
      return 0;
    }
    close(fds[0]);
    close(fds[1]);
  }
  b->cap = cap;
  b->p = malloc(cap);
  return b->p ? 0 : -1;
}

static void buf_free(struct gw_buf *b) {
  if (b->pr >= 0) {
    close(b->pr);
    close(b->pw);
  }
  free(b->p);
}

static void mark_failed(struct gw *g, int i, const char *why) {
  struct gw_ep *ep = &g->eps[i];
  ep->fails++;
  double now = ev_now(g->loop);
  if (!ep->failed)
    kt_log(KT_LOG_WARN, "gateway", "endpoint %s failed (%s); retrying it after %.0f ms", ep->label,
           why, g->retry_delay_s * 1000);
  ep->failed = true;
  ep->retry_at = now + g->retry_delay_s;
}

static void on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct gw_conn *k = w->data;
  mark_failed(k->g, k->ep, "connect timed out");
  try_connect(k);
}

/* The endpoint for a new upstream connection: among those usable (not gone,
 * not failed within --retry-delay) and not yet tried for this client, the
 * lowest SRV priority, and among those smooth weighted round robin (nginx's:
 * each gains its weight, the largest is picked and loses the sum; weight 0
 * counts as 1, so equal weights are plain round robin). -1: none. */
static bool usable(const struct gw_ep *ep, size_t i, uint64_t tried, double now) {
  return !ep->gone && !ep->unhealthy && !(ep->failed && now < ep->retry_at) && !(tried >> i & 1);
}

static int pick(struct gw *g, uint64_t tried, double now) {
  int best = -1;
  for (size_t i = 0; i < g->n_eps; i++) {
    const struct gw_ep *ep = &g->eps[i];
    if (!usable(ep, i, tried, now))
      continue;
    if (best < 0 || ep->priority < g->eps[best].priority)
      best = (int)i;
  }
  if (best < 0)
    return -1;
  uint16_t prio = g->eps[best].priority;
  int64_t total = 0;
  best = -1;
  for (size_t i = 0; i < g->n_eps; i++) {
    struct gw_ep *ep = &g->eps[i];
    if (!usable(ep, i, tried, now) || ep->priority != prio)
      continue;
    int64_t w = ep->weight ? ep->weight : 1;
    ep->current += w;
    total += w;
    if (best < 0 || ep->current > g->eps[best].current)
      best = (int)i;
  }
  g->eps[best].current -= total;
  return best;
}

/* Picks an endpoint (pick()) and starts connecting; one that refuses at once
 * is marked failed and the next is picked; with none left the client is
 * closed. */
static void try_connect(struct gw_conn *k) {
  struct gw *g = k->g;
  ev_timer_stop(g->loop, &k->ct);
  if (k->ufd >= 0) {
    ev_io_stop(g->loop, &k->uw);
    close(k->ufd);
    k->ufd = -1;
  }
  double now = ev_now(g->loop);
  for (int i; (i = pick(g, k->tried, now)) >= 0;) {
    struct gw_ep *ep = &g->eps[i];
    k->tried |= 1ull << i;
    int fd = socket(ep->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      conn_close(k, "socket() failed");
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    k->ep = i;
    if (connect(fd, (struct sockaddr *)&ep->sa, ep->salen) < 0 && errno != EINPROGRESS) {
      char why[96];
      snprintf(why, sizeof why, "connect: %s", strerror(errno));
      close(fd);
      mark_failed(g, i, why);
      continue;
    }
    k->ufd = fd;
    ev_io_set(&k->uw, fd, EV_WRITE);
    ev_timer_set(&k->ct, g->connect_timeout_s, 0.);
    ev_timer_start(g->loop, &k->ct);
    conn_update(k);
    return;
  }
  g->no_endpoint++;
  conn_close(k, "no endpoint available");
}

static void connected(struct gw_conn *k) {
  struct gw *g = k->g;
  struct gw_ep *ep = &g->eps[k->ep];
  ev_timer_stop(g->loop, &k->ct);
  k->connected = true;
  ep->conns++;
  ep->active++;
  if (ep->failed) {
    ep->failed = false;
    kt_log(KT_LOG_INFO, "gateway", "endpoint %s is back", ep->label);
  }
  kt_log(KT_LOG_DEBUG, "gateway", "client=%s endpoint=%s connected", k->peer, ep->label);
}

static void conn_update(struct gw_conn *k) {
  struct gw *g = k->g;
  /* half-closes: a side that ended and whose bytes were all passed on */
  if (k->c_eof && !k->c2u.len && k->connected && !k->u_wshut) {
    shutdown(k->ufd, SHUT_WR);
    k->u_wshut = true;
  }
  if (k->u_eof && !k->u2c.len && !k->c_wshut) {
    shutdown(k->cfd, SHUT_WR);
    k->c_wshut = true;
  }
  if (k->u_wshut && k->c_wshut) {
    conn_close(k, "both sides closed");
    return;
  }
  int c_ev = 0, u_ev = 0;
  if (!k->c_eof && k->c2u.len < k->c2u.cap && !k->c2u.full)
    c_ev |= EV_READ;
  if (k->u2c.len)
    c_ev |= EV_WRITE;
  if (k->ufd >= 0) {
    if (!k->connected || k->c2u.len)
      u_ev |= EV_WRITE;
    if (k->connected && !k->u_eof && k->u2c.len < k->u2c.cap && !k->u2c.full)
      u_ev |= EV_READ;
    set_io(g->loop, &k->uw, u_ev);
  }
  set_io(g->loop, &k->cw, c_ev);
}

static void on_client(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  struct gw_conn *k = w->data;
  struct gw *g = k->g;
  uint64_t dummy = 0;
  uint64_t *up = k->ep >= 0 ? &g->eps[k->ep].up_bytes : &dummy;
  if (revents & EV_READ) {
    int r = fill(k->cfd, &k->c2u, up);
    if (r < 0) {
      conn_close(k, "client read error");
      return;
    }
    k->c_eof |= r == 1;
  }
  if ((revents & EV_WRITE) && drain(k->cfd, &k->u2c) < 0) {
    conn_close(k, "client write error");
    return;
  }
  if (k->connected && k->c2u.len && drain(k->ufd, &k->c2u) < 0) { /* pass on at once */
    conn_close(k, "endpoint write error");
    return;
  }
  conn_update(k);
}

static void on_upstream(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  struct gw_conn *k = w->data;
  struct gw *g = k->g;
  if (!k->connected) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(k->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
      err = errno;
    if (err) {
      char why[96];
      snprintf(why, sizeof why, "connect: %s", strerror(err));
      mark_failed(g, k->ep, why);
      try_connect(k);
      return;
    }
    connected(k);
  }
  struct gw_ep *ep = &g->eps[k->ep];
  if ((revents & EV_WRITE) && drain(k->ufd, &k->c2u) < 0) {
    conn_close(k, "endpoint write error");
    return;
  }
  if (revents & EV_READ) {
    int r = fill(k->ufd, &k->u2c, &ep->down_bytes);
    if (r < 0) {
      conn_close(k, "endpoint read error");
      return;
    }
    k->u_eof |= r == 1;
  }
  if (k->u2c.len && drain(k->cfd, &k->u2c) < 0) {
    conn_close(k, "client write error");
    return;
  }
  conn_update(k);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  struct gw *g = w->data;
  for (int n = 0; n < 64; n++) {
    char peer[64];
    int fd = kt_sock_accept(g->lfd, peer, sizeof peer);
    if (fd == -1)
      return;
    if (fd == -2) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        kt_log(KT_LOG_WARN, "gateway", "accept: %s; pausing accepts for 100 ms", strerror(errno));
        ev_io_stop(loop, &g->accept_w);
        ev_timer_start(loop, &g->accept_pause);
      }
      return;
    }
    if (g->n_conns >= g->max_conns) {
      kt_log(KT_LOG_WARN, "gateway", "refusing %s: %zu connections (--max-conns)", peer,
             g->n_conns);
      g->refused++;
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct gw_conn *k = calloc(1, sizeof *k);
    if (k)
      k->c2u.pr = k->c2u.pw = k->u2c.pr = k->u2c.pw = -1;
    if (!k || buf_init(&k->c2u, g->buf_cap, g->splice) ||
        buf_init(&k->u2c, g->buf_cap, g->splice)) {
      if (k) {
        buf_free(&k->c2u);
        buf_free(&k->u2c);
      }
      free(k);
      close(fd);
      continue;
    }
    k->g = g;
    k->cfd = fd;
    k->ufd = -1;
    k->ep = -1;
    snprintf(k->peer, sizeof k->peer, "%s", peer);
    ev_io_init(&k->cw, on_client, fd, 0);
    k->cw.data = k;
    ev_io_init(&k->uw, on_upstream, -1, 0);
    k->uw.data = k;
    ev_init(&k->ct, on_connect_timeout);
    k->ct.data = k;
    k->next = g->conns;
    if (g->conns)
      g->conns->prev = k;
    g->conns = k;
    g->n_conns++;
    g->accepted++;
    try_connect(k);
  }
}

static void on_accept_pause(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct gw *g = w->data;
  ev_io_start(loop, &g->accept_w);
}

static void log_stats(struct gw *g) {
  for (size_t i = 0; i < g->n_eps; i++) {
    const struct gw_ep *ep = &g->eps[i];
    kt_log(KT_LOG_INFO, "gateway",
           "endpoint %s conns=%llu active=%d failures=%llu up_bytes=%llu down_bytes=%llu%s",
           ep->label, (unsigned long long)ep->conns, ep->active, (unsigned long long)ep->fails,
           (unsigned long long)ep->up_bytes, (unsigned long long)ep->down_bytes,
           ep->failed ? " failed" : "");
  }
}

static void on_stats(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  log_stats(w->data);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents) {
  (void)revents;
  kt_log(KT_LOG_INFO, "gateway", "received signal %d, shutting down", w->signum);
  ev_break(loop, EVBREAK_ALL);
}

/* ---- health probes (--health-check native) ---- */

static void probe_arm(struct gw_probe *p) {
  struct ev_loop *loop = p->g->loop;
  ev_io_stop(loop, &p->io);
  ev_timer_stop(loop, &p->tm);
  int fd = ketch_fd(p->c);
  short want = ketch_events(p->c);
  int ev = (want & POLLIN ? EV_READ : 0) | (want & POLLOUT ? EV_WRITE : 0);
  if (fd >= 0 && ev) {
    ev_io_set(&p->io, fd, ev);
    ev_io_start(loop, &p->io);
  }
  int t = ketch_timeout_ms(p->c);
  if (t >= 0) {
    ev_timer_set(&p->tm, t / 1000.0, 0.);
    ev_timer_start(loop, &p->tm);
  }
}

/* The watcher is stopped before ketch_process, which may close its fd. */
static void probe_run(struct gw_probe *p) {
  ev_io_stop(p->g->loop, &p->io);
  ketch_process(p->c);
  probe_arm(p);
}

static void on_probe_io(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  probe_run(w->data);
}

static void on_probe_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  probe_run(w->data);
}

static void set_health(struct gw *g, int idx, bool ok, const char *why) {
  struct gw_ep *ep = &g->eps[idx];
  if (ok && ep->unhealthy)
    kt_log(KT_LOG_INFO, "gateway", "endpoint %s healthy again", ep->label);
  else if (!ok && !ep->unhealthy)
    kt_log(KT_LOG_WARN, "gateway", "endpoint %s unhealthy: %s", ep->label, why);
  ep->unhealthy = !ok;
}

static void on_probe_status(void *arg, int err, const ketch_result *res) {
  struct gw_probe *p = arg;
  p->in_flight = false;
  if (p->g->stopping)
    return;
  if (err)
    set_health(p->g, p->idx, false, ketch_errmsg(p->c)[0] ? ketch_errmsg(p->c) : "status failed");
  else
    set_health(p->g, p->idx, res->status.leader != 0, "no leader");
}

static struct gw_probe *probe_new(struct gw *g, int idx) {
  const struct gw_ep *ep = &g->eps[idx];
  char host[64], endpoint[96];
  int port;
  if (ep->sa.ss_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ep->sa;
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    port = ntohs(s4->sin_port);
    snprintf(endpoint, sizeof endpoint, "%s:%d", host, port);
  } else {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ep->sa;
    inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    port = ntohs(s6->sin6_port);
    snprintf(endpoint, sizeof endpoint, "[%s]:%d", host, port);
  }
  ketch_options o;
  ketch_options_init(&o);
  o.nonblocking_open = true;
  o.dial_timeout_ms = (int)(g->connect_timeout_s * 1000);
  o.request_timeout_ms = (int)(g->health_interval_s * 1000);
  struct gw_probe *p = calloc(1, sizeof *p);
  kt_assert(p);
  char msg[256];
  if (ketch_open(&p->c, endpoint, &o, msg, sizeof msg)) {
    kt_log(KT_LOG_WARN, "gateway", "no health probe for %s: %s", ep->label, msg);
    free(p);
    return NULL;
  }
  p->g = g;
  p->idx = idx;
  ev_init(&p->io, on_probe_io);
  p->io.data = p;
  ev_init(&p->tm, on_probe_timer);
  p->tm.data = p;
  return p;
}

static void on_health(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct gw *g = w->data;
  for (size_t i = 0; i < g->n_eps; i++) {
    struct gw_ep *ep = &g->eps[i];
    if (ep->gone)
      continue;
    if (!ep->probe && !(ep->probe = probe_new(g, (int)i)))
      continue;
    struct gw_probe *p = ep->probe;
    if (p->in_flight)
      continue; /* the previous one still runs: its deadline decides */
    if (ketch_status_async(p->c, on_probe_status, p) == 0)
      p->in_flight = true;
    else
      set_health(g, (int)i, false, "status not submitted");
    probe_run(p);
  }
}

static void probes_free(struct gw *g) {
  g->stopping = true;
  for (size_t i = 0; i < g->n_eps; i++) {
    struct gw_probe *p = g->eps[i].probe;
    if (!p)
      continue;
    ev_io_stop(g->loop, &p->io);
    ev_timer_stop(g->loop, &p->tm);
    ketch_close(p->c);
    free(p);
    g->eps[i].probe = NULL;
  }
}

/* ---- flags ---- */

struct gw_flags {
  const char *listen_addr, *endpoints, *discovery_srv, *discovery_srv_name, *dns_servers;
  const char *retry_delay, *connect_timeout, *stats_interval, *log_level;
  const char *trusted_ca_file;
  const char *max_buffer, *max_conns;
  const char *health_check, *health_interval;
  const char *listen_metrics_urls;
  const char *resolver_prefix, *resolver_ttl, *advertise_client_url;
  bool insecure_discovery, help, splice;
};

static void usage(FILE *f) {
  fprintf(f, "Usage: ketch gateway start [flags]\n"
             "An L4 TCP proxy to the client endpoints of a ketch cluster.\n\n"
             "  --listen-addr HOST:PORT      address to listen on (127.0.0.1:23790)\n"
             "  --endpoints HOST:PORT,...    ketch client endpoints (127.0.0.1:2479)\n"
             "  --discovery-srv DOMAIN       endpoints from _ketch-client[-ssl]._tcp.DOMAIN\n"
             "  --discovery-srv-name SUFFIX  suffix of the SRV names\n"
             "  --dns-servers HOST:PORT,...  DNS servers instead of /etc/resolv.conf\n"
             "  --insecure-discovery         accept SRV targets without TLS checks (default true)\n"
             "  --trusted-ca-file PATH       accepted for etcd compatibility (TLS is end to end)\n"
             "  --retry-delay DURATION       how long a failed endpoint is skipped (1m)\n"
             "  --connect-timeout DURATION   connect timeout per endpoint (1s)\n"
             "  --max-buffer BYTES           buffer per direction per connection (65536)\n"
             "  --splice                     pass bytes through a pipe with splice(2), not\n"
             "                               copied through the gateway's memory (false:\n"
             "                               measured slower on loopback, see README)\n"
             "  --max-conns N                client connections at most (10000)\n"
             "  --health-check tcp|native    tcp: an endpoint is judged by its connects (etcd's);\n"
             "                               native: also a STATUS request every interval, an\n"
             "                               error or no leader makes it unhealthy (tcp)\n"
             "  --health-interval DURATION   between native health checks (5s)\n"
             "  --stats-interval DURATION    per-endpoint counters in the log (1m)\n"
             "  --listen-metrics-urls URLS   http://HOST:PORT,... serving /metrics (none)\n"
             "  --resolver-prefix PREFIX     register under PREFIX/ADDR in the cluster, for\n"
             "                               clients with --resolver-prefix (none)\n"
             "  --resolver-ttl SECONDS       the registration's lease TTL (60)\n"
             "  --advertise-client-url ADDR  the address registered (--listen-addr)\n"
             "  --log-level LEVEL            debug|info|warn|error (info)\n");
}

static int parse_flags(int argc, char **argv, struct gw_flags *f) {
  struct {
    const char *name;
    const char **dst;
    bool *bdst;
  } t[] = {
      {"listen-addr", &f->listen_addr, NULL},
      {"endpoints", &f->endpoints, NULL},
      {"discovery-srv", &f->discovery_srv, NULL},
      {"discovery-srv-name", &f->discovery_srv_name, NULL},
      {"dns-servers", &f->dns_servers, NULL},
      {"retry-delay", &f->retry_delay, NULL},
      {"connect-timeout", &f->connect_timeout, NULL},
      {"stats-interval", &f->stats_interval, NULL},
      {"log-level", &f->log_level, NULL},
      {"trusted-ca-file", &f->trusted_ca_file, NULL},
      {"max-buffer", &f->max_buffer, NULL},
      {"max-conns", &f->max_conns, NULL},
      {"health-check", &f->health_check, NULL},
      {"health-interval", &f->health_interval, NULL},
      {"listen-metrics-urls", &f->listen_metrics_urls, NULL},
      {"resolver-prefix", &f->resolver_prefix, NULL},
      {"resolver-ttl", &f->resolver_ttl, NULL},
      {"advertise-client-url", &f->advertise_client_url, NULL},
      {"insecure-discovery", NULL, &f->insecure_discovery},
      {"splice", NULL, &f->splice},
      {"help", NULL, &f->help},
  };
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h")) {
      f->help = true;
      continue;
    }
    if (a[0] != '-') {
      fprintf(stderr, "ketch gateway: unexpected argument \"%s\"\n", a);
      return -1;
    }
    a += a[1] == '-' ? 2 : 1;
    const char *eq = strchr(a, '=');
    size_t nl = eq ? (size_t)(eq - a) : strlen(a);
    size_t k = 0;
    while (k < KT_ARRAY_LEN(t) && (strlen(t[k].name) != nl || strncmp(t[k].name, a, nl)))
      k++;
    if (k == KT_ARRAY_LEN(t)) {
      fprintf(stderr, "ketch gateway: unknown flag: %s\n", argv[i]);
      return -1;
    }
    if (t[k].bdst) {
      *t[k].bdst = !eq || !strcmp(eq + 1, "true") || !strcmp(eq + 1, "1");
      continue;
    }
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (!v) {
      fprintf(stderr, "ketch gateway: flag needs an argument: --%s\n", t[k].name);
      return -1;
    }
    *t[k].dst = v;
  }
  return 0;
}

/* "host:port", "[v6]:port", "http://host:port/" -> host, port. */
static int split_hostport(const char *s, char *host, size_t cap, int *port) {
  const char *p = strstr(s, "://");
  p = p ? p + 3 : s;
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s", p);
  size_t l = strlen(tmp);
  if (l && tmp[l - 1] == '/')
    tmp[--l] = 0;
  char *colon = strrchr(tmp, ':');
  if (!colon || colon == tmp)
    return -1;
  *colon = 0;
  char *end;
  long v = strtol(colon + 1, &end, 10);
  if (*end || v <= 0 || v > 65535)
    return -1;
  *port = (int)v;
  char *h = tmp;
  if (h[0] == '[') {
    size_t hl = strlen(h);
    if (hl < 3 || h[hl - 1] != ']')
      return -1;
    h[hl - 1] = 0;
    h++;
  }
  if (!*h || strlen(h) >= cap)
    return -1;
  snprintf(host, cap, "%s", h);
  return 0;
}

static int fill_sa(const char *addr, int port, struct sockaddr_storage *sa, socklen_t *salen) {
  memset(sa, 0, sizeof *sa);
  struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
  if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    *salen = sizeof *s4;
  } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    *salen = sizeof *s6;
  } else {
    return -1;
  }
  return 0;
}

static int add_ep(struct gw *g, const char *addr, int port, const char *label) {
  if (g->n_eps == KT_GW_MAX_ENDPOINTS)
    return -1;
  struct gw_ep *ep = &g->eps[g->n_eps];
  memset(ep, 0, sizeof *ep);
  if (fill_sa(addr, port, &ep->sa, &ep->salen))
    return -1;
  snprintf(ep->label, sizeof ep->label, "%s", label);
  g->n_eps++;
  return 0;
}

static int cmp_prio(const void *a, const void *b) {
  const struct kt_srv_rec *x = a, *y = b;
  if (x->priority != y->priority)
    return x->priority < y->priority ? -1 : 1;
  return x->weight > y->weight ? -1 : x->weight < y->weight;
}

static void start_refresh(struct gw *g);

/* Makes the endpoint list what the SRV records say: a known target keeps its
 * slot and counters (its address updated), a new one is added, one no longer
 * listed is marked gone. Slots are never reused, so connections keep their
 * index. Returns the usable endpoints; with none the list is left as it was.
 * Then schedules the next lookup. */
static size_t apply_srv(struct gw *g, struct kt_srv_result *res) {
  qsort(res->recs, res->n_recs, sizeof res->recs[0], cmp_prio);
  char labels[KT_SRV_MAX_RECORDS][80];
  size_t usable = 0;
  uint32_t ttl = 300;
  for (size_t i = 0; i < res->n_recs; i++) {
    const struct kt_srv_rec *r = &res->recs[i];
    snprintf(labels[i], sizeof labels[i], "%.40s:%u", r->target, r->port);
    if (r->n_addr) {
      usable++;
      ttl = r->ttl < ttl ? r->ttl : ttl;
    }
  }
  if (usable) {
    for (size_t k = 0; k < g->n_eps; k++) {
      bool listed = false;
      for (size_t i = 0; i < res->n_recs && !listed; i++)
        listed = res->recs[i].n_addr && !strcmp(labels[i], g->eps[k].label);
      if (!listed && !g->eps[k].gone)
        kt_log(KT_LOG_INFO, "gateway", "endpoint %s removed (not in the SRV records)",
               g->eps[k].label);
      g->eps[k].gone = !listed;
    }
    for (size_t i = 0; i < res->n_recs; i++) {
      const struct kt_srv_rec *r = &res->recs[i];
      if (!r->n_addr)
        continue;
      size_t k = 0;
      while (k < g->n_eps && strcmp(g->eps[k].label, labels[i]))
        k++;
      if (k < g->n_eps) {
        g->eps[k].priority = r->priority;
        g->eps[k].weight = r->weight;
        struct sockaddr_storage sa;
        socklen_t salen;
        if (!fill_sa(r->addr[0], r->port, &sa, &salen) &&
            (salen != g->eps[k].salen || memcmp(&sa, &g->eps[k].sa, salen))) {
          g->eps[k].sa = sa;
          g->eps[k].salen = salen;
          kt_log(KT_LOG_INFO, "gateway", "endpoint %s now at %s", labels[i], r->addr[0]);
        }
      } else if (add_ep(g, r->addr[0], r->port, labels[i]) == 0) {
        g->eps[k].priority = r->priority;
        g->eps[k].weight = r->weight;
        kt_log(KT_LOG_INFO, "gateway", "endpoint %s (%s) added from SRV priority=%u weight=%u",
               labels[i], r->addr[0], r->priority, r->weight);
      } else {
        kt_log(KT_LOG_WARN, "gateway", "endpoint %s from SRV not added (%d endpoints at most)",
               labels[i], KT_GW_MAX_ENDPOINTS);
      }
    }
  } else {
    kt_log(KT_LOG_WARN, "gateway", "no usable SRV records for %s; keeping the endpoints",
           g->srv_domain);
    ttl = 5;
  }
  double after = ttl < 1 ? 1. : (double)ttl;
  ev_timer_stop(g->loop, &g->refresh);
  ev_timer_set(&g->refresh, after, 0.);
  ev_timer_start(g->loop, &g->refresh);
  return usable;
}

static void on_srv_done(void *arg, int rc, const struct kt_err *e, struct kt_srv_result *res) {
  struct gw *g = arg;
  g->resolving = false;
  if (rc) {
    kt_log(KT_LOG_WARN, "gateway", "SRV lookup failed: %s; keeping the endpoints", e->msg);
    res->n_recs = 0;
  }
  apply_srv(g, res);
}

static void on_refresh(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  start_refresh(w->data);
}

static void start_refresh(struct gw *g) {
  if (g->resolving)
    return;
  char names[2][300];
  bool ssl[2];
  kt_srv_names(g->srv_domain, g->srv_suffix, true, false, names, ssl);
  const char *np[2] = {names[0], names[1]};
  struct kt_srv_req req = {.dns_servers = g->dns_servers, .names = np, .ssl = ssl, .n_names = 2};
  struct kt_err e = {0};
  if (kt_srv_lookup_start(g->loop, &req, g->srv_res, on_srv_done, g, &e)) {
    kt_log(KT_LOG_WARN, "gateway", "SRV lookup not started: %s", e.msg);
    ev_timer_set(&g->refresh, 5., 0.);
    ev_timer_start(g->loop, &g->refresh);
    return;
  }
  g->resolving = true;
}

/* Fills g->eps from the flags, resolving names with c-ares before serving. */
static int endpoints(struct gw *g, const struct gw_flags *f) {
  struct kt_srv_result *res = calloc(1, sizeof *res);
  kt_assert(res);
  struct kt_err e = {0};
  int rc = -1;
  if (f->discovery_srv) {
    char names[2][300];
    bool ssl[2];
    kt_srv_names(f->discovery_srv, f->discovery_srv_name, true, false, names, ssl);
    const char *np[2] = {names[0], names[1]};
    struct kt_srv_req req = {.dns_servers = f->dns_servers, .names = np, .ssl = ssl, .n_names = 2};
    if (kt_srv_lookup(g->loop, &req, res, &e)) {
      fprintf(stderr, "ketch gateway: %s\n", e.msg);
      goto out;
    }
    g->srv_domain = f->discovery_srv;
    g->srv_suffix = f->discovery_srv_name;
    g->dns_servers = f->dns_servers;
    g->srv_res = calloc(1, sizeof *g->srv_res);
    kt_assert(g->srv_res);
    ev_init(&g->refresh, on_refresh);
    g->refresh.data = g;
    apply_srv(g, res);
    if (!g->n_eps) {
      fprintf(stderr, "ketch gateway: no client endpoint in SRV records of %s\n", f->discovery_srv);
      goto out;
    }
    rc = 0;
    goto out;
  }
  const char *hosts[KT_SRV_MAX_HOSTS];
  char hbuf[KT_SRV_MAX_HOSTS][256], labels[KT_SRV_MAX_HOSTS][300];
  int ports[KT_SRV_MAX_HOSTS];
  size_t n = 0;
  char list[4096];
  snprintf(list, sizeof list, "%s", f->endpoints);
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == KT_SRV_MAX_HOSTS) {
      fprintf(stderr, "ketch gateway: --endpoints: more than %d\n", KT_SRV_MAX_HOSTS);
      goto out;
    }
    if (split_hostport(tok, hbuf[n], sizeof hbuf[n], &ports[n])) {
      fprintf(stderr, "ketch gateway: --endpoints: invalid endpoint \"%s\" (want host:port)\n",
              tok);
      goto out;
    }
    snprintf(labels[n], sizeof labels[n], "%s", tok);
    hosts[n] = hbuf[n];
    n++;
  }
  if (!n) {
    fprintf(stderr, "ketch gateway: --endpoints: empty\n");
    goto out;
  }
  struct kt_srv_req req = {.dns_servers = f->dns_servers, .hosts = hosts, .n_hosts = n};
  if (kt_srv_lookup(g->loop, &req, res, &e)) {
    fprintf(stderr, "ketch gateway: %s\n", e.msg);
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    if (!res->hosts[i].n_addr) {
      fprintf(stderr, "ketch gateway: --endpoints: cannot resolve \"%s\"\n", hosts[i]);
      goto out;
    }
    char label[80];
    snprintf(label, sizeof label, "%.79s", labels[i]);
    if (add_ep(g, res->hosts[i].addr[0], ports[i], label)) {
      fprintf(stderr, "ketch gateway: --endpoints: bad address for \"%s\"\n", hosts[i]);
      goto out;
    }
  }
  rc = 0;
out:
  free(res);
  return rc;
}

/* ---- /metrics (--listen-metrics-urls) ---- */

__attribute__((format(printf, 2, 3))) static void out_f(struct kt_buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k > 0)
    kt_buf_append(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* A label value in Prometheus' text format: \, " and newline escaped. */
static void label_esc(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (; *in && o + 3 < cap; in++) {
    if (*in == '\\' || *in == '"' || *in == '\n')
      out[o++] = '\\';
    out[o++] = *in == '\n' ? 'n' : *in;
  }
  out[o] = 0;
}

static void family(struct kt_buf *b, const char *name, const char *type, const char *help) {
  out_f(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Per-endpoint families, one series per endpoint (label endpoint="host:port"
 * as given or as the SRV target names it). */
static void ep_family(struct gw *g, struct kt_buf *b, const char *name, const char *type,
                      const char *help, int what) {
  family(b, name, type, help);
  double now = ev_now(g->loop);
  for (size_t i = 0; i < g->n_eps; i++) {
    const struct gw_ep *ep = &g->eps[i];
    char l[200];
    label_esc(ep->label, l, sizeof l);
    unsigned long long v = 0;
    switch (what) {
    case 0:
      v = ep->conns;
      break;
    case 1:
      v = (unsigned long long)ep->active;
      break;
    case 2:
      v = ep->fails;
      break;
    case 3:
      v = ep->up_bytes;
      break;
    case 4:
      v = ep->down_bytes;
      break;
    default:
      v = usable(ep, 0, 0, now);
      break;
    }
    out_f(b, "%s{endpoint=\"%s\"} %llu\n", name, l, v);
  }
}

static void gw_metrics(void *arg, struct kt_buf *b) {
  struct gw *g = arg;
  family(b, "ketch_gateway_client_connections_total", "counter",
         "Client connections accepted by the gateway.");
  out_f(b, "ketch_gateway_client_connections_total %llu\n", (unsigned long long)g->accepted);
  family(b, "ketch_gateway_client_connections_active", "gauge",
         "Client connections open now (connecting or proxying).");
  out_f(b, "ketch_gateway_client_connections_active %zu\n", g->n_conns);
  family(b, "ketch_gateway_client_connections_refused_total", "counter",
         "Client connections closed at accept because --max-conns were open.");
  out_f(b, "ketch_gateway_client_connections_refused_total %llu\n", (unsigned long long)g->refused);
  family(b, "ketch_gateway_client_connections_no_endpoint_total", "counter",
         "Client connections closed because no endpoint could be connected to.");
  out_f(b, "ketch_gateway_client_connections_no_endpoint_total %llu\n",
        (unsigned long long)g->no_endpoint);
  ep_family(g, b, "ketch_gateway_endpoint_connections_total", "counter",
            "Connections established to the endpoint.", 0);
  ep_family(g, b, "ketch_gateway_endpoint_connections_active", "gauge",
            "Connections open to the endpoint now.", 1);
  ep_family(g, b, "ketch_gateway_endpoint_failures_total", "counter",
            "Connects to the endpoint that failed or timed out.", 2);
  ep_family(g, b, "ketch_gateway_endpoint_sent_bytes_total", "counter",
            "Bytes read from clients to be passed to the endpoint.", 3);
  ep_family(g, b, "ketch_gateway_endpoint_received_bytes_total", "counter",
            "Bytes read from the endpoint to be passed to clients.", 4);
  ep_family(g, b, "ketch_gateway_endpoint_up", "gauge",
            "1 when the endpoint is picked for new connections (listed, not failed within "
            "--retry-delay, healthy), else 0.",
            5);
}

/* --listen-metrics-urls: http://HOST:PORT,... served by net/http.c (its
 * process_* metrics too; /health and the others answer 404). */
static int metrics_listen(struct gw *g, const char *urls) {
  static const struct kt_http_source src = {gw_metrics, NULL, NULL, NULL};
  struct kt_http_source s = src;
  s.arg = g;
  struct kt_err e = {0};
  g->http = kt_http_new(g->loop, &s, &e);
  if (!g->http) {
    fprintf(stderr, "ketch gateway: %s\n", e.msg);
    return -1;
  }
  char list[4096];
  snprintf(list, sizeof list, "%s", urls);
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char host[256];
    int port;
    if (strncmp(tok, "http://", 7) || split_hostport(tok, host, sizeof host, &port)) {
      fprintf(stderr,
              "ketch gateway: --listen-metrics-urls: invalid \"%s\" (want http://host:port)\n",
              tok);
      return -1;
    }
    if (kt_http_listen(g->http, host, port, &e)) {
      fprintf(stderr, "ketch gateway: %s\n", e.msg);
      return -1;
    }
    kt_log(KT_LOG_INFO, "gateway", "serving metrics url=%s", tok);
  }
  return 0;
}

static int duration_s(const char *flag, const char *v, double *out) {
  uint64_t ms;
  if (kt_duration_parse_ms(v, &ms) || ms == 0) {
    fprintf(stderr, "ketch gateway: --%s: invalid duration \"%s\"\n", flag, v);
    return -1;
  }
  *out = (double)ms / 1000.0;
  return 0;
}

int kt_gateway_main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "start") != 0) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
      usage(stdout);
      return 0;
    }
    usage(stderr);
    return 2;
  }
  struct gw_flags f = {.listen_addr = "127.0.0.1:23790",
                       .endpoints = "127.0.0.1:2479",
                       .retry_delay = "1m",
                       .connect_timeout = "1s",
                       .stats_interval = "1m",
                       .log_level = "info",
                       .max_buffer = "65536",
                       .max_conns = "10000",
                       .health_check = "tcp",
                       .health_interval = "5s",
                       .resolver_ttl = "60",
                       .insecure_discovery = true};
  if (parse_flags(argc - 2, argv + 2, &f))
    return 2;
  if (f.help) {
    usage(stdout);
    return 0;
  }
  static struct gw g;
  memset(&g, 0, sizeof g);
  double stats_s;
  if (duration_s("retry-delay", f.retry_delay, &g.retry_delay_s) ||
      duration_s("connect-timeout", f.connect_timeout, &g.connect_timeout_s) ||
      duration_s("stats-interval", f.stats_interval, &stats_s) ||
      duration_s("health-interval", f.health_interval, &g.health_interval_s))
    return 2;
  if (strcmp(f.health_check, "tcp") && strcmp(f.health_check, "native")) {
    fprintf(stderr, "ketch gateway: --health-check: want tcp or native\n");
    return 2;
  }
  g.health_native = !strcmp(f.health_check, "native");
  char *end;
  long mb = strtol(f.max_buffer, &end, 10), mc;
  if (*end || mb < 1024 || mb > (64l << 20)) {
    fprintf(stderr, "ketch gateway: --max-buffer: want 1024 to 67108864 bytes\n");
    return 2;
  }
  mc = strtol(f.max_conns, &end, 10);
  if (*end || mc < 1 || mc > 1000000) {
    fprintf(stderr, "ketch gateway: --max-conns: want 1 to 1000000\n");
    return 2;
  }
  long ttl = strtol(f.resolver_ttl, &end, 10);
  if (*end || ttl < 1 || ttl > 86400) {
    fprintf(stderr, "ketch gateway: --resolver-ttl: want 1 to 86400 seconds\n");
    return 2;
  }
  g.buf_cap = (size_t)mb;
  g.splice = f.splice;
  g.max_conns = (size_t)mc;
  static const char *const lv[] = {"debug", "info", "warn", "error"};
  static const int lvn[] = {KT_LOG_DEBUG, KT_LOG_INFO, KT_LOG_WARN, KT_LOG_ERROR};
  for (size_t i = 0; i < KT_ARRAY_LEN(lv); i++)
    if (!strcmp(f.log_level, lv[i]))
      kt_log_level = lvn[i];
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  g.loop = ev_default_loop(EVFLAG_AUTO);
  if (endpoints(&g, &f))
    return 1;
  char host[256];
  int port;
  if (split_hostport(f.listen_addr, host, sizeof host, &port)) {
    fprintf(stderr, "ketch gateway: --listen-addr: invalid \"%s\" (want host:port)\n",
            f.listen_addr);
    return 2;
  }
  struct kt_err e = {0};
  g.lfd = kt_sock_listen(host, port, 1024, &e);
  if (g.lfd < 0) {
    fprintf(stderr, "ketch gateway: %s\n", e.msg);
    return 1;
  }
  if (f.listen_metrics_urls && *f.listen_metrics_urls && metrics_listen(&g, f.listen_metrics_urls))
    return 1;
  ev_io_init(&g.accept_w, on_accept, g.lfd, EV_READ);
  g.accept_w.data = &g;
  ev_io_start(g.loop, &g.accept_w);
  ev_timer_init(&g.accept_pause, on_accept_pause, 0.1, 0.);
  g.accept_pause.data = &g;
  ev_timer_init(&g.stats, on_stats, stats_s, stats_s);
  g.stats.data = &g;
  ev_timer_start(g.loop, &g.stats);
  if (g.health_native) {
    ev_timer_init(&g.health, on_health, 0., g.health_interval_s);
    g.health.data = &g;
    ev_timer_start(g.loop, &g.health);
  }
  ev_signal_init(&g.sigterm, on_signal, SIGTERM);
  ev_signal_init(&g.sigint, on_signal, SIGINT);
  ev_signal_start(g.loop, &g.sigterm);
  ev_signal_start(g.loop, &g.sigint);
  char eps[1024] = "";
  size_t l = 0;
  for (size_t i = 0; i < g.n_eps && l < sizeof eps; i++)
    l += (size_t)snprintf(eps + l, sizeof eps - l, "%s%s", i ? "," : "", g.eps[i].label);
  struct kt_gw_reg *reg = NULL;
  if (f.resolver_prefix && *f.resolver_prefix) {
    char why[400];
    const char *addr = f.advertise_client_url ? f.advertise_client_url : f.listen_addr;
    reg = kt_gw_reg_start(g.loop, eps, f.resolver_prefix, addr, (int)ttl,
                          (int)(g.connect_timeout_s * 1000), why, sizeof why);
    if (!reg) {
      fprintf(stderr, "ketch gateway: --resolver-prefix: %s\n", why);
      return 2;
    }
  }
  kt_log(KT_LOG_INFO, "gateway",
         "ready to proxy client requests listen=%s endpoints=%s retry-delay=%.0fms "
         "connect-timeout=%.0fms max-buffer=%zu splice=%s",
         f.listen_addr, eps, g.retry_delay_s * 1000, g.connect_timeout_s * 1000, g.buf_cap,
         g.splice ? "true" : "false");
  ev_run(g.loop, 0);
  kt_gw_reg_stop(reg);
  ev_io_stop(g.loop, &g.accept_w);
  close(g.lfd);
  while (g.conns)
    conn_close(g.conns, "gateway stopping");
  probes_free(&g);
  kt_http_free(g.http);
  log_stats(&g);
  kt_log(KT_LOG_INFO, "gateway", "stopped");
  return 0;
}
