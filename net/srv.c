/* net/srv.c — SRV lookups on a libev loop with c-ares; the initial cluster
 * from them. See net/srv.h for the data flow and the naming rule.
 *
 * One lookup owns one c-ares channel. c-ares tells us (sock_state_cb) which
 * sockets to watch; each gets an ev_io that calls ares_process_fd; one
 * ev_timer drives c-ares' retransmissions (ares_timeout) and one the overall
 * deadline. Outstanding work is counted: every SRV query and every address
 * lookup it starts adds one, each callback removes one; at zero the loop is
 * broken out of. The channel is destroyed after ev_run returns (never from
 * inside a c-ares callback). */
#include "srv.h"

#include "config.h"

#include <arpa/inet.h>
#include <ares.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define MAX_SOCKS 16

struct sockw {
  ev_io io;
  int fd; /* -1: free */
};

struct kt_srv_lookup {
  struct ev_loop *loop;
  ares_channel ch;
  struct sockw socks[MAX_SOCKS];
  ev_timer retrans, deadline, finish;
  int pending;
  bool timed_out, finishing, has_names;
  char first_name[300]; /* for the timeout message */
  kt_srv_done_cb cb;
  void *cb_arg;
  int first_status; /* first resolver failure other than "no such name" */
  char first_what[300];
  struct kt_srv_result *out;
};

struct host_job {
  struct kt_srv_lookup *lk;
  char *addr_dst; /* addr[KT_SRV_MAX_ADDRS][64] */
  size_t *n_dst;
  uint32_t *ttl_dst; /* may be NULL */
};

struct srv_job {
  struct kt_srv_lookup *lk;
  bool ssl;
  char name[300];
};

static void done_one(struct kt_srv_lookup *lk) {
  if (--lk->pending == 0 && !lk->finishing)
    ev_timer_start(lk->loop, &lk->finish); /* not from inside c-ares: see on_finish */
}

static void note_failure(struct kt_srv_lookup *lk, int status, const char *what) {
  if (status == ARES_ENOTFOUND || status == ARES_ENODATA || lk->first_status)
    return;
  lk->first_status = status;
  snprintf(lk->first_what, sizeof lk->first_what, "%s", what);
}

static void rearm_retrans(struct kt_srv_lookup *lk) {
  struct timeval tv, *t = ares_timeout(lk->ch, NULL, &tv);
  ev_timer_stop(lk->loop, &lk->retrans);
  if (t) {
    ev_timer_set(&lk->retrans, (double)t->tv_sec + (double)t->tv_usec / 1e6, 0.);
    ev_timer_start(lk->loop, &lk->retrans);
  }
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  struct kt_srv_lookup *lk = w->data;
  ares_process_fd(lk->ch, (revents & EV_READ) ? w->fd : ARES_SOCKET_BAD,
                  (revents & EV_WRITE) ? w->fd : ARES_SOCKET_BAD);
  if (lk->pending)
    rearm_retrans(lk);
}

static void on_retrans(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_srv_lookup *lk = w->data;
  ares_process_fd(lk->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  if (lk->pending)
    rearm_retrans(lk);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_srv_lookup *lk = w->data;
  lk->timed_out = true;
  ev_timer_start(loop, &lk->finish);
}

static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable) {
  struct kt_srv_lookup *lk = data;
  struct sockw *s = NULL, *free_s = NULL;
  for (int i = 0; i < MAX_SOCKS; i++) {
    if (lk->socks[i].fd == fd)
      s = &lk->socks[i];
    else if (lk->socks[i].fd < 0 && !free_s)
      free_s = &lk->socks[i];
  }
  if (s) {
    ev_io_stop(lk->loop, &s->io);
    s->fd = -1;
  }
  if (!readable && !writable)
    return;
  if (!s)
    s = free_s;
  if (!s) { /* more sockets than servers we allow: c-ares' timeouts handle it */
    kt_log(KT_LOG_WARN, "srv", "too many resolver sockets; ignoring fd %d", (int)fd);
    return;
  }
  s->fd = fd;
  ev_io_init(&s->io, on_io, fd, (readable ? EV_READ : 0) | (writable ? EV_WRITE : 0));
  s->io.data = lk;
  ev_io_start(lk->loop, &s->io);
}

static void on_addrinfo(void *arg, int status, int timeouts, struct ares_addrinfo *ai) {
  (void)timeouts;
  struct host_job *hj = arg;
  struct kt_srv_lookup *lk = hj->lk;
  if (status == ARES_SUCCESS && ai) {
    for (struct ares_addrinfo_node *n = ai->nodes; n && *hj->n_dst < KT_SRV_MAX_ADDRS;
         n = n->ai_next) {
      char buf[64];
      const void *src = NULL;
      if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(struct sockaddr_in))
        src = &((const struct sockaddr_in *)(const void *)n->ai_addr)->sin_addr;
      else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(struct sockaddr_in6))
        src = &((const struct sockaddr_in6 *)(const void *)n->ai_addr)->sin6_addr;
      if (!src || !inet_ntop(n->ai_family, src, buf, sizeof buf))
        continue;
      bool dup = false;
      for (size_t k = 0; k < *hj->n_dst; k++)
        dup |= strcmp(hj->addr_dst + 64 * k, buf) == 0;
      if (dup)
        continue;
      if (*hj->n_dst == 0 && hj->ttl_dst)
        *hj->ttl_dst = n->ai_ttl > 0 ? (uint32_t)n->ai_ttl : 0;
      snprintf(hj->addr_dst + 64 * (*hj->n_dst)++, 64, "%s", buf);
    }
  } else {
    note_failure(lk, status, ai && ai->name ? ai->name : "address lookup");
  }
  if (ai)
    ares_freeaddrinfo(ai);
  free(hj);
  done_one(lk);
}

static void resolve_into(struct kt_srv_lookup *lk, const char *host, char *addr_dst, size_t *n_dst,
                         uint32_t *ttl_dst) {
  struct host_job *hj = calloc(1, sizeof *hj);
  kt_assert(hj);
  *hj = (struct host_job){lk, addr_dst, n_dst, ttl_dst};
  struct ares_addrinfo_hints hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  lk->pending++;
  ares_getaddrinfo(lk->ch, host, NULL, &hints, on_addrinfo, hj);
}

static void on_srv(void *arg, int status, int timeouts, unsigned char *abuf, int alen) {
  (void)timeouts;
  struct srv_job *sj = arg;
  struct kt_srv_lookup *lk = sj->lk;
  struct ares_srv_reply *srv = NULL;
  if (status == ARES_SUCCESS)
    status = ares_parse_srv_reply(abuf, alen, &srv);
  if (status == ARES_SUCCESS) {
    struct kt_srv_result *out = lk->out;
    for (struct ares_srv_reply *r = srv; r; r = r->next) {
      if (out->n_recs == KT_SRV_MAX_RECORDS) {
        kt_log(KT_LOG_WARN, "srv", "%s: more than %d targets; ignoring the rest", sj->name,
               KT_SRV_MAX_RECORDS);
        break;
      }
      struct kt_srv_rec *rec = &out->recs[out->n_recs++];
      memset(rec, 0, sizeof *rec);
      snprintf(rec->target, sizeof rec->target, "%s", r->host);
      size_t tl = strlen(rec->target);
      if (tl && rec->target[tl - 1] == '.')
        rec->target[tl - 1] = 0;
      rec->port = r->port;
      rec->priority = r->priority;
      rec->weight = r->weight;
      rec->ssl = sj->ssl;
      resolve_into(lk, rec->target, &rec->addr[0][0], &rec->n_addr, &rec->ttl);
    }
    ares_free_data(srv);
  } else {
    note_failure(lk, status, sj->name);
  }
  free(sj);
  done_one(lk);
}

void kt_srv_names(const char *domain, const char *suffix, bool client, bool etcd_names,
                  char out[2][300], bool ssl[2]) {
  const char *who = etcd_names ? "etcd" : "ketch";
  const char *kind = client ? "client" : "server";
  bool suf = suffix && *suffix;
  for (int i = 0; i < 2; i++) {
    snprintf(out[i], 300, "_%s-%s%s%s%s._tcp.%s", who, kind, i == 0 ? "-ssl" : "", suf ? "-" : "",
             suf ? suffix : "", domain);
    ssl[i] = i == 0;
  }
}

/* Ends a lookup from the loop (never from inside a c-ares callback, where
 * the channel must not be destroyed): result, cleanup, then the callback. */
static void on_finish(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_srv_lookup *lk = w->data;
  lk->finishing = true;
  ev_timer_stop(loop, &lk->deadline);
  ev_timer_stop(loop, &lk->retrans);
  ev_timer_stop(loop, &lk->finish);
  bool timed_out = lk->timed_out && lk->pending > 0;
  /* ares_destroy completes what is still outstanding (ARES_EDESTRUCTION),
   * which frees those jobs; their sockets are closed through on_sock_state. */
  ares_destroy(lk->ch);
  for (int i = 0; i < MAX_SOCKS; i++)
    if (lk->socks[i].fd >= 0)
      ev_io_stop(loop, &lk->socks[i].io);
  struct kt_err e = {0};
  int rc = 0;
  if (timed_out) {
    rc = kt_err_set(&e, KT_ETIMEOUT, "dns: lookup timed out (%s)", lk->first_name);
  } else {
    bool any = false;
    for (size_t i = 0; i < lk->out->n_recs; i++)
      any |= lk->out->recs[i].n_addr > 0;
    if (lk->first_status && !any && lk->has_names)
      rc = kt_err_set(&e, KT_EIO, "dns: %.200s: %s", lk->first_what,
                      ares_strerror(lk->first_status));
  }
  kt_srv_done_cb cb = lk->cb;
  void *arg = lk->cb_arg;
  struct kt_srv_result *out = lk->out;
  free(lk);
  cb(arg, rc, &e, out);
}

int kt_srv_lookup_start(struct ev_loop *loop, const struct kt_srv_req *req,
                        struct kt_srv_result *out, kt_srv_done_cb cb, void *arg, struct kt_err *e) {
  static bool lib_ok;
  if (!lib_ok) {
    if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS)
      return kt_err_set(e, KT_EIO, "dns: c-ares initialisation failed");
    lib_ok = true;
  }
  if (req->n_hosts > KT_SRV_MAX_HOSTS)
    return kt_err_set(e, KT_EINVAL, "dns: more than %d hosts to resolve", KT_SRV_MAX_HOSTS);
  memset(out, 0, sizeof *out);
  struct kt_srv_lookup *lk = calloc(1, sizeof *lk);
  kt_assert(lk);
  lk->loop = loop;
  lk->out = out;
  lk->cb = cb;
  lk->cb_arg = arg;
  lk->has_names = req->n_names > 0;
  snprintf(lk->first_name, sizeof lk->first_name, "%s",
           req->n_names   ? req->names[0]
           : req->n_hosts ? req->hosts[0]
                          : "-");
  for (int i = 0; i < MAX_SOCKS; i++)
    lk->socks[i].fd = -1;
  struct ares_options o = {
      .sock_state_cb = on_sock_state, .sock_state_cb_data = lk, .timeout = 1000, .tries = 3};
  int rc =
      ares_init_options(&lk->ch, &o, ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (rc != ARES_SUCCESS) {
    free(lk);
    return kt_err_set(e, KT_EIO, "dns: cannot initialise the resolver: %s", ares_strerror(rc));
  }
  if (req->dns_servers && *req->dns_servers &&
      (rc = ares_set_servers_ports_csv(lk->ch, req->dns_servers)) != ARES_SUCCESS) {
    ares_destroy(lk->ch);
    free(lk);
    return kt_err_set(e, KT_EINVAL, "--dns-servers: invalid value \"%.120s\" (%s)",
                      req->dns_servers, ares_strerror(rc));
  }
  ev_init(&lk->retrans, on_retrans);
  lk->retrans.data = lk;
  ev_timer_init(&lk->finish, on_finish, 0., 0.);
  lk->finish.data = lk;
  ev_timer_init(&lk->deadline, on_deadline, (req->timeout_ms > 0 ? req->timeout_ms : 5000) / 1000.0,
                0.);
  lk->deadline.data = lk;
  ev_timer_start(loop, &lk->deadline);

  lk->pending = 1; /* held while starting, so an early answer cannot end it */
  for (size_t i = 0; i < req->n_names; i++) {
    struct srv_job *sj = calloc(1, sizeof *sj);
    kt_assert(sj);
    sj->lk = lk;
    sj->ssl = req->ssl ? req->ssl[i] : false;
    snprintf(sj->name, sizeof sj->name, "%s", req->names[i]);
    lk->pending++;
    ares_query(lk->ch, req->names[i], 1 /* C_IN */, 33 /* T_SRV */, on_srv, sj);
  }
  out->n_hosts = req->n_hosts;
  for (size_t i = 0; i < req->n_hosts; i++) {
    struct kt_srv_host *h = &out->hosts[i];
    snprintf(h->host, sizeof h->host, "%s", req->hosts[i]);
    resolve_into(lk, h->host, &h->addr[0][0], &h->n_addr, NULL);
  }
  done_one(lk);
  if (lk->pending > 0)
    rearm_retrans(lk);
  return 0;
}

struct sync_wait {
  bool done;
  int rc;
  struct kt_err e;
  struct ev_loop *loop;
};

static void sync_done(void *arg, int rc, const struct kt_err *e, struct kt_srv_result *out) {
  (void)out;
  struct sync_wait *w = arg;
  w->done = true;
  w->rc = rc;
  w->e = *e;
  ev_break(w->loop, EVBREAK_ONE);
}

int kt_srv_lookup(struct ev_loop *loop, const struct kt_srv_req *req, struct kt_srv_result *out,
                  struct kt_err *e) {
  struct sync_wait w = {.loop = loop};
  int rc = kt_srv_lookup_start(loop, req, out, sync_done, &w, e);
  if (rc)
    return rc;
  while (!w.done)
    ev_run(loop, 0);
  if (w.rc && e)
    *e = w.e;
  return w.rc;
}

/* ---- the initial cluster (pure) ---- */

static bool rec_is_self(const struct kt_srv_rec *r, const struct kt_srv_result *res,
                        const uint16_t *self_ports, size_t n_self, size_t *which) {
  for (size_t i = 0; i < n_self && i < res->n_hosts; i++) {
    if (self_ports[i] != r->port)
      continue;
    for (size_t a = 0; a < r->n_addr; a++)
      for (size_t b = 0; b < res->hosts[i].n_addr; b++)
        if (strcmp(r->addr[a], res->hosts[i].addr[b]) == 0) {
          *which = i;
          return true;
        }
  }
  return false;
}

static int cmp_member(const void *a, const void *b) {
  return strcmp(((const struct kt_srv_member *)a)->name, ((const struct kt_srv_member *)b)->name);
}

int kt_srv_cluster(const struct kt_srv_result *res, const char *const *self_urls,
                   const uint16_t *self_ports, size_t n_self, struct kt_srv_member *out, size_t max,
                   size_t *n_out, size_t *self, struct kt_err *e) {
  size_t n = 0;
  bool found = false;
  char self_name[300] = "";
  for (size_t i = 0; i < res->n_recs; i++) {
    const struct kt_srv_rec *r = &res->recs[i];
    if (r->n_addr == 0) {
      kt_log(KT_LOG_WARN, "srv", "SRV target %s did not resolve; skipped", r->target);
      continue;
    }
    /* A target listed under both the ssl and the plain name, or twice, is one member. */
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = res->recs[k].n_addr && res->recs[k].port == r->port &&
             strcasecmp(res->recs[k].target, r->target) == 0;
    if (seen)
      continue;
    bool shared_target = false;
    for (size_t k = 0; k < res->n_recs; k++)
      shared_target |=
          k != i && res->recs[k].port != r->port && strcasecmp(res->recs[k].target, r->target) == 0;
    if (n == max)
      return kt_err_set(e, KT_EINVAL, "discovery-srv: more than %zu members in SRV records", max);
    struct kt_srv_member *m = &out[n];
    if (shared_target)
      snprintf(m->name, sizeof m->name, "%.280s-%u", r->target, r->port);
    else
      snprintf(m->name, sizeof m->name, "%s", r->target);
    for (char *p = m->name; *p; p++)
      if (*p >= 'A' && *p <= 'Z')
        *p = (char)(*p - 'A' + 'a');
    size_t which;
    if (!found && rec_is_self(r, res, self_ports, n_self, &which)) {
      found = true;
      snprintf(m->url, sizeof m->url, "%s", self_urls[which]);
      snprintf(self_name, sizeof self_name, "%s", m->name);
    } else {
      bool v6 = strchr(r->addr[0], ':') != NULL;
      snprintf(m->url, sizeof m->url, "%s://%s%s%s:%u", r->ssl ? "https" : "http", v6 ? "[" : "",
               r->addr[0], v6 ? "]" : "", r->port);
    }
    n++;
  }
  if (n == 0)
    return kt_err_set(e, KT_EINVAL, "discovery-srv: no SRV records with a resolvable target");
  if (!found)
    return kt_err_set(e, KT_ENOTFOUND, "cannot find local member in SRV records");
  qsort(out, n, sizeof *out, cmp_member);
  for (size_t i = 0; i < n; i++)
    if (strcmp(out[i].name, self_name) == 0)
      *self = i;
  *n_out = n;
  return 0;
}

int kt_srv_bootstrap(struct ev_loop *loop, const struct kt_config *cfg, struct kt_srv_member *out,
                     size_t max, size_t *n_out, size_t *self, struct kt_err *e) {
  char names[2][300];
  bool ssl[2];
  kt_srv_names(cfg->discovery_srv, cfg->discovery_srv_name, false, cfg->discovery_srv_etcd_names,
               names, ssl);
  const char *np[2] = {names[0], names[1]};
  const struct kt_url_list *ap = &cfg->initial_advertise_peer_urls;
  const char *hosts[KT_SRV_MAX_HOSTS], *urls[KT_SRV_MAX_HOSTS];
  uint16_t ports[KT_SRV_MAX_HOSTS];
  size_t nh = 0;
  for (size_t i = 0; i < ap->n && nh < KT_SRV_MAX_HOSTS; i++) {
    if (ap->v[i].scheme == KT_URL_UNIX)
      continue;
    hosts[nh] = ap->v[i].host;
    urls[nh] = ap->v[i].raw;
    ports[nh++] = ap->v[i].port;
  }
  struct kt_srv_req req = {.dns_servers = cfg->dns_servers,
                           .names = np,
                           .ssl = ssl,
                           .n_names = 2,
                           .hosts = hosts,
                           .n_hosts = nh};
  struct kt_srv_result *res = malloc(sizeof *res);
  kt_assert(res);
  int rc = kt_srv_lookup(loop, &req, res, e);
  if (!rc) {
    for (size_t i = 0; i < res->n_recs; i++)
      kt_log(KT_LOG_INFO, "srv", "SRV record target=%s port=%u addr=%s name=%s",
             res->recs[i].target, res->recs[i].port,
             res->recs[i].n_addr ? res->recs[i].addr[0] : "-",
             res->recs[i].ssl ? names[0] : names[1]);
    rc = kt_srv_cluster(res, urls, ports, nh, out, max, n_out, self, e);
  }
  free(res);
  return rc;
}
