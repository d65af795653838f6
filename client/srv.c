/* client/srv.c — ketch_srv_endpoints: the endpoints from
 * DNS SRV records, for libketch (client/ketch.h); ketch_open_srv is in
 * client.c, and the handle's lookups again (discovery_refresh) in conn.c.
 *
 * Data flow: two SRV queries (…-ssl and plain) -> c-ares parses each answer
 * (ares_parse_srv_reply; no DNS bytes are read here) -> one address lookup
 * per target (ares_getaddrinfo) -> sorted by priority, then weight ->
 * "scheme://address:port,...". The c-ares channel is driven by a plain poll
 * loop (libketch has no event loop of its own) bounded by one deadline. */
#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ketch.h"

#define MAX_RECS 64

struct srv_ctx;

struct srv_rec {
  struct srv_ctx *ctx;
  char target[256];
  unsigned short port, priority, weight;
  bool ssl;
  char addr[64]; /* "" until resolved */
};

struct srv_query {
  struct srv_ctx *ctx;
  bool ssl;
};

struct srv_ctx {
  ares_channel ch;
  struct srv_rec recs[MAX_RECS];
  struct srv_query q[2];
  size_t n;
  int pending;
  int failure; /* first status other than "no such name/data" */
};

static void copy_msg(char *dst, size_t cap, const char *s) {
  if (dst && cap)
    snprintf(dst, cap, "%s", s);
}

static void on_addr(void *arg, int status, int timeouts, struct ares_addrinfo *ai) {
  (void)timeouts;
  struct srv_rec *r = arg;
  if (status == ARES_SUCCESS && ai) {
    for (struct ares_addrinfo_node *n = ai->nodes; n && !r->addr[0]; n = n->ai_next) {
      char buf[48];
      if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(struct sockaddr_in) &&
          inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)n->ai_addr)->sin_addr, buf,
                    sizeof buf))
        snprintf(r->addr, sizeof r->addr, "%s", buf);
      else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(struct sockaddr_in6) &&
               inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)n->ai_addr)->sin6_addr, buf,
                         sizeof buf))
        snprintf(r->addr, sizeof r->addr, "[%s]", buf);
    }
  }
  if (ai)
    ares_freeaddrinfo(ai);
  r->ctx->pending--;
}

static void on_srv(void *arg, int status, int timeouts, unsigned char *abuf, int alen) {
  (void)timeouts;
  struct srv_query *q = arg;
  struct srv_ctx *c = q->ctx;
  struct ares_srv_reply *srv = NULL;
  if (status == ARES_SUCCESS)
    status = ares_parse_srv_reply(abuf, alen, &srv);
  if (status == ARES_SUCCESS) {
    for (struct ares_srv_reply *s = srv; s && c->n < MAX_RECS; s = s->next) {
      struct srv_rec *r = &c->recs[c->n++];
      memset(r, 0, sizeof *r);
      r->ctx = c;
      snprintf(r->target, sizeof r->target, "%s", s->host);
      size_t l = strlen(r->target);
      if (l && r->target[l - 1] == '.')
        r->target[l - 1] = 0;
      r->port = s->port;
      r->priority = s->priority;
      r->weight = s->weight;
      r->ssl = q->ssl;
      struct ares_addrinfo_hints h = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
      c->pending++;
      ares_getaddrinfo(c->ch, r->target, NULL, &h, on_addr, r);
    }
    ares_free_data(srv);
  } else if (status != ARES_ENOTFOUND && status != ARES_ENODATA && status != ARES_EDESTRUCTION &&
             !c->failure) {
    c->failure = status;
  }
  c->pending--;
}

static int cmp_rec(const void *a, const void *b) {
  const struct srv_rec *x = a, *y = b;
  if (x->priority != y->priority)
    return x->priority < y->priority ? -1 : 1;
  return x->weight > y->weight ? -1 : x->weight < y->weight;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ketch_srv_endpoints(const char *domain, const char *suffix, const char *dns_servers,
                        int timeout_ms, char *buf, size_t buf_len, char *errmsg,
                        size_t errmsg_len) {
  copy_msg(errmsg, errmsg_len, "");
  if (!domain || !*domain || strlen(domain) > 200 || (suffix && strlen(suffix) > 60) || !buf ||
      !buf_len) {
    copy_msg(errmsg, errmsg_len, "ketch_srv_endpoints: bad argument");
    return KETCH_EINVAL;
  }
  static bool lib_ok;
  if (!lib_ok) {
    if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
      copy_msg(errmsg, errmsg_len, "c-ares initialisation failed");
      return KETCH_EUNAVAILABLE;
    }
    lib_ok = true;
  }
  struct srv_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return KETCH_ENOMEM;
  struct ares_options o = {.timeout = 1000, .tries = 3};
  int rc = ares_init_options(&c->ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (rc != ARES_SUCCESS) {
    copy_msg(errmsg, errmsg_len, ares_strerror(rc));
    free(c);
    return KETCH_EUNAVAILABLE;
  }
  if (dns_servers && *dns_servers &&
      (rc = ares_set_servers_ports_csv(c->ch, dns_servers)) != ARES_SUCCESS) {
    char m[300];
    snprintf(m, sizeof m, "dns servers \"%.200s\": %s", dns_servers, ares_strerror(rc));
    copy_msg(errmsg, errmsg_len, m);
    ares_destroy(c->ch);
    free(c);
    return KETCH_EINVAL;
  }
  bool suf = suffix && *suffix;
  for (int i = 0; i < 2; i++) {
    char name[300];
    snprintf(name, sizeof name, "_ketch-client%s%s%s._tcp.%s", i == 0 ? "-ssl" : "", suf ? "-" : "",
             suf ? suffix : "", domain);
    c->q[i] = (struct srv_query){c, i == 0};
    c->pending++;
    ares_query(c->ch, name, 1 /* C_IN */, 33 /* T_SRV */, on_srv, &c->q[i]);
  }
  long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
  while (c->pending > 0) {
    long long left = deadline - now_ms();
    if (left <= 0)
      break;
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    /* c-ares' ARES_GETSOCK_WRITABLE shifts a signed 1 by up to 31: bits
     * are read unsigned here (low 16: readable, high 16: writable). */
    unsigned bits = (unsigned)ares_getsock(c->ch, socks, ARES_GETSOCK_MAXNUM);
    struct pollfd p[ARES_GETSOCK_MAXNUM];
    nfds_t np = 0;
    for (unsigned i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
      short ev = (short)((bits >> i & 1u ? POLLIN : 0) |
                         (bits >> (i + ARES_GETSOCK_MAXNUM) & 1u ? POLLOUT : 0));
      if (ev)
        p[np++] = (struct pollfd){socks[i], ev, 0};
    }
    struct timeval maxtv = {left / 1000, (left % 1000) * 1000}, tv;
    struct timeval *t = ares_timeout(c->ch, &maxtv, &tv);
    int ms = (int)(t->tv_sec * 1000 + t->tv_usec / 1000);
    int n = poll(p, np, ms < 1 ? 1 : ms);
    if (n <= 0) {
      ares_process_fd(c->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* timeouts */
      continue;
    }
    for (nfds_t i = 0; i < np; i++)
      if (p[i].revents)
        ares_process_fd(c->ch,
                        (p[i].revents & (POLLIN | POLLERR | POLLHUP)) ? p[i].fd : ARES_SOCKET_BAD,
                        (p[i].revents & POLLOUT) ? p[i].fd : ARES_SOCKET_BAD);
  }
  bool timed_out = c->pending > 0;
  ares_destroy(c->ch); /* completes what is left (ARES_EDESTRUCTION) */
  qsort(c->recs, c->n, sizeof c->recs[0], cmp_rec);
  size_t len = 0;
  bool fits = true;
  for (size_t i = 0; i < c->n; i++) {
    const struct srv_rec *r = &c->recs[i];
    if (!r->addr[0])
      continue;
    int w = snprintf(buf + len, buf_len - len, "%s%s://%s:%u", len ? "," : "",
                     r->ssl ? "https" : "http", r->addr, r->port);
    if (w < 0 || (size_t)w >= buf_len - len) {
      fits = false;
      break;
    }
    len += (size_t)w;
  }
  int failure = c->failure;
  free(c);
  if (!fits) {
    copy_msg(errmsg, errmsg_len, "ketch_srv_endpoints: buffer too small");
    return KETCH_EINVAL;
  }
  if (len)
    return 0;
  buf[0] = 0;
  char m[400];
  if (timed_out) {
    snprintf(m, sizeof m, "SRV lookup of %.200s timed out", domain);
    copy_msg(errmsg, errmsg_len, m);
    return KETCH_ETIMEOUT;
  }
  if (failure) {
    snprintf(m, sizeof m, "SRV lookup of %.200s failed: %s", domain, ares_strerror(failure));
    copy_msg(errmsg, errmsg_len, m);
    return KETCH_EUNAVAILABLE;
  }
  snprintf(m, sizeof m, "no _ketch-client SRV records with a resolvable target for %.200s", domain);
  copy_msg(errmsg, errmsg_len, m);
  return KETCH_ENOTFOUND;
}
