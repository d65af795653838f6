/* net/http.c — /metrics, /health, /livez, /readyz on libmicrohttpd, driven
 * by the member's libev loop. The contract and the bounds are in http.h. */
#include "http.h"

#include <dirent.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "../core/node.h" /* struct kt_node_health */
#include "sock.h"
#include "tls.h"

#define MAX_LISTENERS 16
#define MAX_EXCLUDES 16

struct hconn { /* one TCP connection MHD holds */
  struct hconn *prev, *next;
  int fd;
  ev_tstamp deadline; /* shut down if no request completes before */
  bool shut;
};

/* A request waiting for its linearizable read (the connection suspended). */
struct pending {
  struct kt_http *h;
  struct MHD_Connection *c;
  bool done, suspended;
  int code;
  char why[96];
};

struct listener {
  struct kt_http *h;
  ev_io w;
  int fd, port;
  struct kt_tls_ctx *tls; /* an https:// listener's context (not owned), else NULL */
};

/* One https:// connection: TLS on the TCP socket by net/tls.c, the plaintext
 * relayed to MHD over a socketpair (see "https" below). */
#define RELAY_BYTES (16u * 1024u)
struct tconn {
  struct tconn *prev, *next;
  struct kt_http *h;
  struct kt_io io;
  ev_io rw, ww;       /* the TCP socket */
  ev_io urw, uww;     /* our end of the socketpair */
  int ufd;            /* -1 until the handshake is done */
  ev_tstamp deadline; /* the handshake's */
  struct sockaddr_storage sa;
  socklen_t sa_len;
  bool tls_eof, u_eof, u_shut;
  bool refused;      /* closed before it was read (kt_io_close_refused) */
  bool parked;       /* its next handshake step waits for the budget (hs_w) */
  uint8_t *in, *out; /* TLS -> MHD (the request), MHD -> TLS (the answer); RELAY_BYTES each */
  size_t in_len, out_len;
};

struct kt_http {
  struct ev_loop *loop;
  struct kt_http_source src;
  struct MHD_Daemon *d;
  ev_io mhd_w;    /* MHD's epoll fd */
  ev_timer tmo_w; /* MHD_get_timeout */
  ev_timer reap_w;
  struct listener ls[MAX_LISTENERS];
  size_t n_ls;
  struct hconn *conns;
  size_t n_conns;
  struct tconn *tconns; /* https:// connections, in the handshake or relaying */
  size_t n_tconns;
  ev_tstamp tls_warned;           /* when a TLS failure was last logged at warn */
  struct kt_tls_budget hs_budget; /* handshake steps per turn and share of the loop (tls.h) */
  ev_timer hs_w;                  /* resumes parked handshakes */
  bool in_run;
  struct kt_buf body;
  /* the state thread's busy time: from waking (check) to sleeping (prepare) */
  ev_check wake_w;
  ev_prepare sleep_w;
  ev_tstamp woke;
  double busy_s;
};

static void tconn_free(struct tconn *t);
static void on_tconn(struct ev_loop *loop, ev_io *w, int revents);

/* ---- driving MHD from the loop ---- */

static void mhd_run(struct kt_http *h) {
  if (h->in_run)
    return;
  h->in_run = true;
  MHD_run(h->d);
  h->in_run = false;
  MHD_UNSIGNED_LONG_LONG ms = 0;
  ev_timer_stop(h->loop, &h->tmo_w);
  if (MHD_get_timeout(h->d, &ms) == MHD_YES) {
    ev_timer_set(&h->tmo_w, ms / 1000.0, 0.);
    ev_timer_start(h->loop, &h->tmo_w);
  }
}

static void on_mhd(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  mhd_run(w->data);
}

static void on_tmo(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  mhd_run(w->data);
}

/* A connection that has not completed a request by its deadline is shut
 * down; MHD sees the end of the stream and closes it (MHD owns the fd). */
static void on_reap(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_http *h = w->data;
  ev_tstamp now = ev_now(loop);
  bool any = false;
  for (struct hconn *c = h->conns; c; c = c->next)
    if (!c->shut && now > c->deadline) {
      kt_log(KT_LOG_DEBUG, "http", "closing a connection that sent no complete request in %d s",
             KT_HTTP_DEADLINE_S);
      shutdown(c->fd, SHUT_RDWR);
      c->shut = any = true;
    }
  for (struct tconn *t = h->tconns, *next; t; t = next) {
    next = t->next;
    if (t->ufd < 0 && now > t->deadline) {
      kt_log(KT_LOG_DEBUG, "http", "closing an https connection whose handshake took over %d s",
             KT_HTTP_DEADLINE_S);
      tconn_free(t);
    }
  }
  if (any)
    mhd_run(h);
}

/* Hands one accepted socket to MHD (which closes it itself if it refuses). */
static void add_conn(struct kt_http *h, int fd, const struct sockaddr *sa, socklen_t len) {
  if (h->n_conns >= KT_HTTP_MAX_CONNS) {
    kt_log(KT_LOG_DEBUG, "http", "connection refused: %d open", KT_HTTP_MAX_CONNS);
    close(fd);
    return;
  }
  (void)MHD_add_connection(h->d, fd, sa, len);
}

/* ---- https: TLS by net/tls.c, relayed to MHD ----
 *
 * MHD's own TLS would be GnuTLS (Debian builds it so) with its own settings;
 * instead an https:// metrics URL uses the member's client TLS context
 * (etcd: https metrics URLs use the client TLS info): the same certificate,
 * key, CA, CRL, client-certificate rule, versions and cipher suites, and the
 * same reload on SIGHUP or a file change. This side does the handshake
 * (non-blocking, cut after KT_HTTP_DEADLINE_S, within a handshake budget of
 * its own like the client port's: KT_TLS_HANDSHAKES_PER_TURN steps a turn and
 * KT_TLS_HANDSHAKE_SHARE of the loop) and then relays bytes between
 * the TLS connection and one end of a socketpair whose other end MHD serves
 * as any connection (MHD_add_connection): MHD parses, answers and applies
 * its bounds as for plain HTTP. Per connection: the struct, OpenSSL's SSL,
 * and after the handshake two RELAY_BYTES buffers and the socketpair; at
 * most KT_HTTP_MAX_CONNS such connections. Either side closing closes both. */

static void tconn_free(struct tconn *t) {
  struct kt_http *h = t->h;
  ev_io_stop(h->loop, &t->rw);
  ev_io_stop(h->loop, &t->ww);
  ev_io_stop(h->loop, &t->urw);
  ev_io_stop(h->loop, &t->uww);
  if (t->refused)
    kt_io_close_refused(&t->io);
  else
    kt_io_close(&t->io);
  if (t->ufd >= 0)
    close(t->ufd);
  if (t->prev)
    t->prev->next = t->next;
  else
    h->tconns = t->next;
  if (t->next)
    t->next->prev = t->prev;
  h->n_tconns--;
  free(t->in);
  free(t->out);
  free(t);
}

static void tls_failed(struct tconn *t, const char *what, const char *why) {
  struct kt_http *h = t->h;
  ev_tstamp now = ev_now(h->loop);
  bool warn = now - h->tls_warned >= 10.;
  if (warn)
    h->tls_warned = now;
  char addr[64] = "?";
  if (t->sa.ss_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)&t->sa)->sin_addr, addr, sizeof addr);
  else if (t->sa.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&t->sa)->sin6_addr, addr, sizeof addr);
  kt_log(warn ? KT_LOG_WARN : KT_LOG_DEBUG, "http", "https metrics connection from %s: %s: %s",
         addr, what, why);
}

/* Moves what it can in both directions; false: the connection is done (freed). */
static bool tconn_pump(struct tconn *t) {
  struct kt_err e = {0};
  for (bool moved = true; moved;) {
    moved = false;
    while (!t->tls_eof && t->in_len < RELAY_BYTES) {
      ssize_t r = kt_io_read(&t->io, t->in + t->in_len, RELAY_BYTES - t->in_len, &e);
      if (r == KT_IO_AGAIN)
        break;
      if (r == KT_IO_ERROR) {
        tls_failed(t, "read", e.msg);
        return false;
      }
      if (r == 0)
        t->tls_eof = true;
      t->in_len += (size_t)(r > 0 ? r : 0);
      moved = true;
    }
    if (t->in_len > 0) {
      ssize_t r = send(t->ufd, t->in, t->in_len, MSG_NOSIGNAL);
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        t->in_len = 0;             /* MHD stopped reading (it answered, e.g. 431): drop the rest */
        t->tls_eof = moved = true; /* and still deliver what it wrote */
      }
      if (r > 0) {
        memmove(t->in, t->in + r, t->in_len - (size_t)r);
        t->in_len -= (size_t)r;
        moved = true;
      }
    }
    if (t->tls_eof && t->in_len == 0 && !t->u_shut) {
      shutdown(t->ufd, SHUT_WR); /* MHD sees the client's end of the stream */
      t->u_shut = true;
    }
    while (!t->u_eof && t->out_len < RELAY_BYTES) {
      ssize_t r = recv(t->ufd, t->out + t->out_len, RELAY_BYTES - t->out_len, 0);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        break;
      if (r <= 0)
        t->u_eof = true;
      else
        t->out_len += (size_t)r;
      moved = true;
    }
    if (t->out_len > 0) {
      ssize_t r = kt_io_write(&t->io, t->out, t->out_len, &e);
      if (r == KT_IO_ERROR) {
        tls_failed(t, "write", e.msg);
        return false;
      }
      if (r > 0) {
        memmove(t->out, t->out + r, t->out_len - (size_t)r);
        t->out_len -= (size_t)r;
        moved = true;
      }
    }
    if (t->u_eof && t->out_len == 0)
      return false; /* MHD is done with it (answered and closed, or cut it) */
  }
  kt_sock_arm(t->h->loop, &t->rw, &t->ww,
              kt_io_events(&t->io, !t->tls_eof && t->in_len<RELAY_BYTES, t->out_len> 0));
  kt_sock_arm(t->h->loop, &t->urw, &t->uww,
              (!t->u_eof && t->out_len < RELAY_BYTES ? KT_IO_READ : 0) |
                  (t->in_len > 0 ? KT_IO_WRITE : 0));
  return true;
}

/* The handshake is done: the socketpair to MHD and the relay's buffers.
 * false: over the limit (t is to be freed). */
static bool tconn_relay(struct tconn *t) {
  struct kt_http *h = t->h;
  int sp[2];
  if (h->n_conns >= KT_HTTP_MAX_CONNS ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0)
    return false;
  t->in = malloc(RELAY_BYTES);
  t->out = malloc(RELAY_BYTES);
  kt_assert(t->in && t->out);
  t->ufd = sp[0];
  ev_io_init(&t->urw, on_tconn, sp[0], EV_READ);
  ev_io_init(&t->uww, on_tconn, sp[0], EV_WRITE);
  t->urw.data = t->uww.data = t;
  add_conn(h, sp[1], (struct sockaddr *)&t->sa, t->sa_len); /* MHD owns sp[1] */
  return true;
}

static void tconn_step(struct tconn *t) {
  struct kt_http *h = t->h;
  if (t->ufd < 0) {
    if (!kt_tls_budget_room(&h->hs_budget)) { /* as the client port's listener */
      ev_io_stop(h->loop, &t->rw);
      ev_io_stop(h->loop, &t->ww);
      t->parked = true;
      kt_log(KT_LOG_DEBUG, "http", "an https handshake waits for the handshake budget");
      if (!ev_is_active(&h->hs_w)) {
        ev_timer_set(&h->hs_w, kt_tls_budget_wait_s(&h->hs_budget), 0.);
        ev_timer_start(h->loop, &h->hs_w);
      }
      return;
    }
    struct kt_err e = {0};
    double t0 = ev_time();
    int r = kt_io_handshake(&t->io, &e);
    kt_tls_budget_spent(&h->hs_budget, ev_time() - t0);
    if (r == KT_IO_AGAIN) {
      kt_sock_arm(h->loop, &t->rw, &t->ww, kt_io_events(&t->io, true, false));
      return;
    }
    if (r == KT_IO_PLAINTEXT) { /* Go's (etcd's) answer, then FIN after it */
      static const char go400[] = "HTTP/1.0 400 Bad Request\r\n\r\n"
                                  "Client sent an HTTP request to an HTTPS server.\n";
      tls_failed(t, "refused", "a plaintext client on an https:// metrics URL");
      kt_io_to_plain(&t->io);
      (void)!send(t->io.fd, go400, sizeof go400 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      t->refused = true;
      tconn_free(t);
      return;
    }
    if (r != 1) {
      tls_failed(t, "TLS handshake failed", e.msg);
      tconn_free(t);
      return;
    }
    if (!tconn_relay(t)) {
      tconn_free(t);
      return;
    }
  }
  if (!tconn_pump(t))
    tconn_free(t);
  mhd_run(h);
}

static void on_tconn(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  tconn_step(w->data);
}

/* The handshake budget has room again: parked handshakes take their step
 * (those that find none park again and restart the timer). */
static void on_hs(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_http *h = w->data;
  for (struct tconn *t = h->tconns, *next; t; t = next) {
    next = t->next; /* tconn_step may free t, never another */
    if (!t->parked)
      continue;
    if (!kt_tls_budget_room(&h->hs_budget)) { /* the rest wait on */
      ev_timer_set(&h->hs_w, kt_tls_budget_wait_s(&h->hs_budget), 0.);
      ev_timer_start(h->loop, &h->hs_w);
      return;
    }
    t->parked = false;
    tconn_step(t);
  }
}

/* A tconn for io (moved in), linked; NULL over the limit (io closed). */
static struct tconn *tconn_add(struct kt_http *h, struct kt_io *io,
                               const struct sockaddr_storage *sa, socklen_t len) {
  if (h->n_tconns >= KT_HTTP_MAX_CONNS) {
    kt_log(KT_LOG_DEBUG, "http", "https connection refused: %d open", KT_HTTP_MAX_CONNS);
    kt_io_close(io);
    return NULL;
  }
  struct tconn *t = calloc(1, sizeof *t);
  kt_assert(t);
  kt_io_move(&t->io, io);
  int fd = t->io.fd;
  t->h = h;
  t->ufd = -1;
  t->sa = *sa;
  t->sa_len = len;
  t->deadline = ev_now(h->loop) + KT_HTTP_DEADLINE_S;
  ev_io_init(&t->rw, on_tconn, fd, EV_READ);
  ev_io_init(&t->ww, on_tconn, fd, EV_WRITE);
  t->rw.data = t->ww.data = t;
  t->next = h->tconns;
  if (h->tconns)
    h->tconns->prev = t;
  h->tconns = t;
  h->n_tconns++;
  return t;
}

static void tconn_new(struct kt_http *h, struct kt_tls_ctx *ctx, int fd,
                      const struct sockaddr_storage *sa, socklen_t len) {
  struct kt_err e = {0};
  struct kt_io io;
  if (kt_io_init_tls(&io, fd, ctx, NULL, &e)) {
    kt_log(KT_LOG_WARN, "http", "https metrics connection: %s", e.msg);
    close(fd);
    return;
  }
  struct tconn *t = tconn_add(h, &io, sa, len);
  if (t)
    tconn_step(t);
}

void kt_http_adopt(struct kt_http *h, struct kt_io *io, const uint8_t *pre, size_t n) {
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  if (getpeername(io->fd, (struct sockaddr *)&sa, &len) != 0) {
    kt_io_close(io);
    return;
  }
  if (!kt_io_is_tls(io)) {
    kt_assert(n == 0);
    int fd = io->fd;
    io->fd = -1; /* MHD's now */
    add_conn(h, fd, (struct sockaddr *)&sa, len);
    mhd_run(h);
    return;
  }
  /* an https:// client URL's request: the handshake is done, relay it */
  struct tconn *t = tconn_add(h, io, &sa, len);
  if (!t)
    return;
  if (n > RELAY_BYTES || !tconn_relay(t)) {
    tconn_free(t);
    return;
  }
  memcpy(t->in, pre, n);
  t->in_len = n;
  tconn_step(t);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct listener *l = w->data;
  struct kt_http *h = l->h;
  for (int i = 0; i < 16; i++) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int fd = accept4(l->fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      break;
    if (l->tls)
      tconn_new(h, l->tls, fd, &sa, len);
    else
      add_conn(h, fd, (struct sockaddr *)&sa, len);
  }
  mhd_run(h);
}

static void on_conn(void *cls, struct MHD_Connection *mc, void **socket_context,
                    enum MHD_ConnectionNotificationCode toe) {
  struct kt_http *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    struct hconn *c = calloc(1, sizeof *c);
    kt_assert(c);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? ci->connect_fd : -1;
    c->deadline = ev_now(h->loop) + KT_HTTP_DEADLINE_S;
    c->next = h->conns;
    if (h->conns)
      h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    *socket_context = c;
    return;
  }
  struct hconn *c = *socket_context;
  if (!c)
    return;
  if (c->prev)
    c->prev->next = c->next;
  else
    h->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  h->n_conns--;
  free(c);
  *socket_context = NULL;
}

/* *con_cls after the first call of on_request for a request without a
 * pending probe (see there). */
static char request_seen;

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)toe;
  struct kt_http *h = cls;
  if (*con_cls != &request_seen)
    free(*con_cls); /* a struct pending, done (never freed while suspended) */
  *con_cls = NULL;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  struct hconn *c = ci ? ci->socket_context : NULL;
  if (c)
    c->deadline = ev_now(h->loop) + KT_HTTP_DEADLINE_S;
}

static void on_wake(struct ev_loop *loop, ev_check *w, int revents) {
  (void)revents;
  struct kt_http *h = w->data;
  h->woke = ev_time();
  kt_tls_budget_turn(&h->hs_budget, h->woke);
  (void)loop;
}

static void on_sleep(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_http *h = w->data;
  if (h->woke > 0)
    h->busy_s += ev_time() - h->woke;
  h->woke = 0;
}

/* ---- the body ---- */

__attribute__((format(printf, 2, 3))) static void out_f(struct kt_buf *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k > 0)
    kt_buf_append(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static size_t count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return 0;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += de->d_name[0] != '.';
  closedir(d);
  return n > 0 ? n - 1 : 0; /* not the one opendir holds */
}

/* Seconds since the epoch when the process started (/proc/self/stat's
 * starttime after /proc/stat's btime), or 0. */
static double start_time_s(void) {
  static double cached = -1;
  if (cached >= 0)
    return cached;
  cached = 0;
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f)
    return 0;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  char *p = strrchr(buf, ')');
  if (!p)
    return 0;
  /* fields after the name: 3 state ... 22 starttime */
  unsigned long long start = 0;
  int field = 2;
  for (char *t = strtok(p + 1, " "); t; t = strtok(NULL, " "))
    if (++field == 22) {
      start = strtoull(t, NULL, 10);
      break;
    }
  unsigned long long btime = 0;
  f = fopen("/proc/stat", "r");
  if (!f)
    return 0;
  while (fgets(buf, sizeof buf, f))
    if (sscanf(buf, "btime %llu", &btime) == 1)
      break;
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (btime && hz > 0)
    cached = (double)btime + (double)start / (double)hz;
  return cached;
}

static void process_metrics(struct kt_http *h, struct kt_buf *b) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6;
  out_f(b,
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n",
        cpu);
  unsigned long long vm = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%llu %llu", &vm, &rss) != 2)
      vm = rss = 0;
    fclose(f);
  }
  long page = sysconf(_SC_PAGESIZE);
  out_f(b,
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %llu\n",
        rss * (unsigned long long)page);
  out_f(b,
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
        "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n",
        vm * (unsigned long long)page);
  out_f(b,
        "# HELP process_open_fds Number of open file descriptors.\n"
        "# TYPE process_open_fds gauge\nprocess_open_fds %zu\n",
        count_fds());
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl))
    out_f(b,
          "# HELP process_max_fds Maximum number of open file descriptors.\n"
          "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n",
          (unsigned long long)rl.rlim_cur);
  out_f(b,
        "# HELP process_start_time_seconds Start time of the process since unix epoch in "
        "seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
        start_time_s());
  out_f(b,
        "# HELP ketch_state_thread_busy_seconds_total Time the member's event loop spent working "
        "(from waking up to waiting again).\n# TYPE ketch_state_thread_busy_seconds_total "
        "counter\nketch_state_thread_busy_seconds_total %.6f\n",
        h->busy_s);
  out_f(b,
        "# HELP ketch_http_connections Open connections to the metrics and health endpoints.\n"
        "# TYPE ketch_http_connections gauge\nketch_http_connections %zu\n",
        h->n_conns);
}

/* ---- checks ---- */

struct args {
  bool verbose;
  bool serializable;
  const char *exclude[MAX_EXCLUDES];
  bool used[MAX_EXCLUDES];
  size_t n_exclude;
};

static enum MHD_Result arg_it(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value) {
  (void)kind;
  struct args *a = cls;
  if (!strcmp(key, "verbose"))
    a->verbose = true;
  else if (!strcmp(key, "serializable"))
    a->serializable = value && !strcmp(value, "true");
  else if (!strcmp(key, "exclude") && value && a->n_exclude < MAX_EXCLUDES)
    a->exclude[a->n_exclude++] = value;
  return MHD_YES;
}

static bool excluded(struct args *a, const char *name) {
  bool hit = false;
  for (size_t i = 0; i < a->n_exclude; i++)
    if (!strcmp(a->exclude[i], name))
      hit = a->used[i] = true;
  return hit;
}

/* /health (etcd 3.4/3.5): status 200 or 503, JSON body. */
/* The linearizable read's outcome as a check's failure text (NULL: ok). */
static const char *lin_fail(const struct pending *p, const struct kt_node_health *st) {
  if (p)
    return p->code ? p->why : NULL;
  return st->serving ? NULL : (st->leader ? "leader not ready (catching up)" : "no leader");
}

/* Whether /health should wait for a linearizable read first: only when
 * nothing else already fails. */
static bool health_wants_probe(struct kt_http *h, struct args *a) {
  struct kt_node_health st;
  h->src.health(h->src.arg, &st);
  return h->src.probe && !a->serializable && st.leader &&
         !(st.nospace && !excluded(a, "NOSPACE")) && !(st.corrupt && !excluded(a, "CORRUPT")) &&
         !st.stopping;
}

/* /health (etcd 3.4/3.5): status 200 or 503, JSON body. */
static int health(struct kt_http *h, struct args *a, const struct pending *p, struct kt_buf *b) {
  struct kt_node_health st;
  h->src.health(h->src.arg, &st);
  char reason[160] = "";
  const char *lf;
  if (st.nospace && !excluded(a, "NOSPACE"))
    snprintf(reason, sizeof reason, "ALARM NOSPACE");
  else if (st.corrupt && !excluded(a, "CORRUPT"))
    snprintf(reason, sizeof reason, "ALARM CORRUPT");
  else if (!st.leader)
    snprintf(reason, sizeof reason, "RAFT NO LEADER");
  else if (!a->serializable && (lf = lin_fail(p, &st)))
    snprintf(reason, sizeof reason, "QGET ERROR:%s", lf);
  else if (st.stopping)
    snprintf(reason, sizeof reason, "STOPPING");
  bool ok = !*reason;
  out_f(b, "{\"health\":\"%s\",\"reason\":\"%s\"}", ok ? "true" : "false", reason);
  return ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
}

struct check {
  const char *name;
  const char *fail; /* NULL: ok */
};

/* /livez and /readyz (etcd 3.5, Kubernetes-style lines). */
static int probe(struct kt_http *h, struct args *a, bool ready, const struct pending *p,
                 struct kt_buf *b) {
  struct kt_node_health st;
  h->src.health(h->src.arg, &st);
  struct check checks[4];
  size_t n = 0;
  if (ready)
    checks[n++] =
        (struct check){"data_corruption", st.corrupt ? "data corruption alarm is active" : NULL};
  checks[n++] = (struct check){"serializable_read", st.stopping ? "member stopping" : NULL};
  if (ready) {
    checks[n++] = (struct check){"linearizable_read", lin_fail(p, &st)};
    checks[n++] = (struct check){"not_learner", st.learner ? "member is a learner" : NULL};
  }
  bool failed = false;
  struct kt_buf lines = {0};
  for (size_t i = 0; i < n; i++) {
    if (excluded(a, checks[i].name)) {
      out_f(&lines, "[+]%s excluded: ok\n", checks[i].name);
    } else if (checks[i].fail) {
      failed = true;
      out_f(&lines, "[-]%s failed: %s\n", checks[i].name, checks[i].fail);
    } else {
      out_f(&lines, "[+]%s ok\n", checks[i].name);
    }
  }
  for (size_t i = 0; i < a->n_exclude; i++)
    if (!a->used[i]) {
      out_f(&lines, "warn: some health checks cannot be excluded: no matches for \"%.64s\"\n",
            a->exclude[i]);
      a->used[i] = true; /* once */
    }
  const char *path = ready ? "readyz" : "livez";
  if (!failed && !a->verbose) {
    out_f(b, "ok");
  } else {
    kt_buf_append(b, lines.p, lines.len);
    out_f(b, "%s check %s\n", path, failed ? "failed" : "passed");
  }
  kt_buf_free(&lines);
  return failed ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK;
}

static enum MHD_Result respond(struct MHD_Connection *c, int status, const char *type,
                               struct kt_buf *b) {
  struct MHD_Response *r = MHD_create_response_from_buffer(b->len, b->p ? (void *)b->p : (void *)"",
                                                           MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return rc;
}

static void probe_done(void *ctx, int code, const char *why) {
  struct pending *p = ctx;
  p->done = true;
  p->code = code;
  snprintf(p->why, sizeof p->why, "%s", why);
  if (p->suspended) {
    p->suspended = false;
    MHD_resume_connection(p->c);
    /* MHD runs at the next loop turn (this may be inside the node's work) */
    struct kt_http *h = p->h;
    ev_timer_stop(h->loop, &h->tmo_w);
    ev_timer_set(&h->tmo_w, 0., 0.);
    ev_timer_start(h->loop, &h->tmo_w);
  }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  (void)upload;
  (void)upload_size;
  struct kt_http *h = cls;
  struct kt_buf *b = &h->body;
  kt_buf_reset(b);
  if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
    out_f(b, "method not allowed\n"); /* at once: MHD closes, the body is never read */
    return respond(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", b);
  }
  /* MHD calls once the headers are in and again once the request is
   * complete. An answer queued at the first call makes MHD 0.9.x discard
   * the rest of the request and close the connection ("Connection:
   * close"); answered at the second, the connection is kept alive for the
   * next request (a scraper reuses it). */
  if (!*con_cls) {
    *con_cls = &request_seen;
    return MHD_YES;
  }
  struct args a = {0};
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, arg_it, &a);
  bool is_health = h->src.health && !strcmp(url, "/health");
  bool is_ready = h->src.health && !strcmp(url, "/readyz");
  struct pending *p = *con_cls == &request_seen ? NULL : *con_cls;
  if (!p && ((is_health && health_wants_probe(h, &a)) ||
             (is_ready && h->src.probe && !excluded(&a, "linearizable_read")))) {
    memset(a.used, 0, sizeof a.used); /* excluded() marks; the answer marks again */
    p = calloc(1, sizeof *p);
    kt_assert(p);
    p->h = h;
    p->c = c;
    *con_cls = p;
    h->src.probe(h->src.arg, probe_done, p);
    if (!p->done) { /* answered by probe_done, then this handler runs again */
      p->suspended = true;
      MHD_suspend_connection(c);
      return MHD_YES;
    }
  }
  if (!strcmp(url, "/metrics")) {
    h->src.metrics(h->src.arg, b);
    process_metrics(h, b);
    return respond(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b);
  }
  if (is_health) {
    int st = health(h, &a, p, b);
    return respond(c, st, "application/json", b);
  }
  if (h->src.health && (!strcmp(url, "/livez") || !strcmp(url, "/readyz"))) {
    int st = probe(h, &a, url[1] == 'r', url[1] == 'r' ? p : NULL, b);
    return respond(c, st, "text/plain; charset=utf-8", b);
  }
  out_f(b, "404 page not found\n");
  return respond(c, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", b);
}

/* ---- life ---- */

struct kt_http *kt_http_new(struct ev_loop *loop, const struct kt_http_source *src,
                            struct kt_err *e) {
  struct kt_http *h = calloc(1, sizeof *h);
  kt_assert(h);
  h->loop = loop;
  h->src = *src;
  h->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME, 0,
                          NULL, NULL, on_request, h, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned int)KT_HTTP_MAX_CONNS, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned int)KT_HTTP_DEADLINE_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                          (size_t)KT_HTTP_MEMORY_BYTES, MHD_OPTION_NOTIFY_CONNECTION, on_conn, h,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
  if (!h->d) {
    free(h);
    kt_err_set(e, KT_EIO, "http: libmicrohttpd failed to start");
    return NULL;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
  ev_io_init(&h->mhd_w, on_mhd, di->epoll_fd, EV_READ);
  h->mhd_w.data = h;
  ev_io_start(loop, &h->mhd_w);
  ev_timer_init(&h->tmo_w, on_tmo, 0., 0.);
  h->tmo_w.data = h;
  ev_timer_init(&h->hs_w, on_hs, 0., 0.);
  h->hs_w.data = h;
  ev_timer_init(&h->reap_w, on_reap, 1., 1.);
  h->reap_w.data = h;
  ev_timer_start(loop, &h->reap_w);
  ev_check_init(&h->wake_w, on_wake);
  ev_set_priority(&h->wake_w, EV_MAXPRI);
  h->wake_w.data = h;
  ev_check_start(loop, &h->wake_w);
  ev_prepare_init(&h->sleep_w, on_sleep);
  ev_set_priority(&h->sleep_w, EV_MINPRI);
  h->sleep_w.data = h;
  ev_prepare_start(loop, &h->sleep_w);
  /* these watchers alone do not keep the loop running */
  for (int i = 0; i < 4; i++)
    ev_unref(loop);
  return h;
}

int kt_http_listen(struct kt_http *h, const char *host, int port, struct kt_err *e) {
  if (h->n_ls == MAX_LISTENERS)
    return kt_err_set(e, KT_EINVAL, "http: more than %d metrics listeners", MAX_LISTENERS);
  int fd = kt_sock_listen(host, port, 64, e);
  if (fd < 0)
    return e->code;
  struct listener *l = &h->ls[h->n_ls++];
  l->h = h;
  l->fd = fd;
  l->port = kt_sock_port(fd);
  ev_io_init(&l->w, on_accept, fd, EV_READ);
  l->w.data = l;
  ev_io_start(h->loop, &l->w);
  ev_unref(h->loop);
  return 0;
}

int kt_http_listen_tls(struct kt_http *h, const char *host, int port, struct kt_tls_ctx *tls,
                       struct kt_err *e) {
  if (kt_http_listen(h, host, port, e))
    return e->code;
  h->ls[h->n_ls - 1].tls = tls;
  return 0;
}

int kt_http_port(const struct kt_http *h, size_t i) { return i < h->n_ls ? h->ls[i].port : -1; }

void kt_http_stop_accepting(struct kt_http *h) {
  for (size_t i = 0; i < h->n_ls; i++)
    if (h->ls[i].fd >= 0) {
      ev_ref(h->loop);
      ev_io_stop(h->loop, &h->ls[i].w);
      close(h->ls[i].fd);
      h->ls[i].fd = -1;
    }
}

void kt_http_free(struct kt_http *h) {
  if (!h)
    return;
  kt_http_stop_accepting(h);
  for (int i = 0; i < 4; i++)
    ev_ref(h->loop);
  ev_io_stop(h->loop, &h->mhd_w);
  ev_timer_stop(h->loop, &h->tmo_w);
  ev_timer_stop(h->loop, &h->reap_w);
  ev_timer_stop(h->loop, &h->hs_w);
  ev_check_stop(h->loop, &h->wake_w);
  ev_prepare_stop(h->loop, &h->sleep_w);
  while (h->tconns)
    tconn_free(h->tconns);
  MHD_stop_daemon(h->d); /* closes the connections (on_conn frees their records) */
  kt_buf_free(&h->body);
  free(h);
}
