/* net/peer.c — see peer.h; wire format in net/PEERS.md. */
#include "peer.h"

#include "sock.h"
#include "tls.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#define READ_CHUNK (256u * 1024u)

static const uint8_t magic_hello[4] = {'K', 'T', 'P', 'H'};
static const uint8_t magic_ack[4] = {'K', 'T', 'P', 'A'};

/* ---- pure codec ---- */

const char *kt_peer_status_name(int status) {
  switch (status) {
  case KT_PEER_OK:
    return "accepted";
  case KT_PEER_WRONG_CLUSTER:
    return "wrong cluster";
  case KT_PEER_WRONG_MEMBER:
    return "addressed to another member";
  case KT_PEER_BAD_VERSION:
    return "unsupported peer protocol version";
  case KT_PEER_BAD_CHANNEL:
    return "unknown channel";
  case KT_PEER_UNKNOWN_SENDER:
    return "sender is not a member";
  case KT_PEER_REMOVED:
    return "sender was removed from the cluster";
  case KT_PEER_NOT_ADDED:
    return "no member has these peer URLs (add it with member add first)";
  default:
    return "unknown status";
  }
}

void kt_peer_hs_encode(uint8_t out[KT_PEER_HELLO_BYTES], const struct kt_peer_hs *h) {
  memcpy(out, h->kind == KT_PEER_ACK ? magic_ack : magic_hello, 4);
  out[4] = h->version;
  out[5] = h->code;
  out[6] = out[7] = 0;
  kt_put_u64be(out + 8, h->cluster_id);
  kt_put_u64be(out + 16, h->a);
  kt_put_u64be(out + 24, h->b);
}

int kt_peer_hs_decode(const uint8_t *p, size_t n, uint8_t kind, struct kt_peer_hs *h,
                      struct kt_err *e) {
  const uint8_t *m = kind == KT_PEER_ACK ? magic_ack : magic_hello;
  size_t k = n < 4 ? n : 4;
  if (memcmp(p, m, k) != 0)
    return -kt_err_set(e, KT_EPROTO, "peer handshake: bad magic (not a ketch peer %s)",
                       kind == KT_PEER_ACK ? "ACK" : "HELLO");
  if (n < KT_PEER_HELLO_BYTES)
    return 0;
  if (p[6] || p[7])
    return -kt_err_set(e, KT_EPROTO, "peer handshake: reserved bytes 6-7 are not zero");
  h->kind = kind;
  h->version = p[4];
  h->code = p[5];
  h->cluster_id = kt_get_u64be(p + 8);
  h->a = kt_get_u64be(p + 16);
  h->b = kt_get_u64be(p + 24);
  return 1;
}

int kt_peer_hs_check(const struct kt_peer_hs *h, uint64_t cluster_id, uint64_t member_id,
                     bool known_sender) {
  if (h->version != KT_PEER_VERSION)
    return KT_PEER_BAD_VERSION;
  if (h->cluster_id != cluster_id)
    return KT_PEER_WRONG_CLUSTER;
  if (h->b != member_id)
    return KT_PEER_WRONG_MEMBER;
  if (h->code >= KT_PEER_N_CHANNELS)
    return KT_PEER_BAD_CHANNEL;
  if (!known_sender || h->a == 0 || h->a == member_id)
    return KT_PEER_UNKNOWN_SENDER;
  return KT_PEER_OK;
}

void kt_peer_frame_header(uint8_t out[KT_PEER_FRAME_HDR], uint8_t channel, uint32_t len) {
  kt_put_u32be(out, len);
  out[4] = channel;
}

int kt_peer_frame_next(const uint8_t *p, size_t n, uint32_t max_len, uint8_t *channel,
                       const uint8_t **msg, uint32_t *len, size_t *used, struct kt_err *e) {
  if (n < KT_PEER_FRAME_HDR)
    return 0;
  uint32_t l = kt_get_u32be(p);
  if (l == 0)
    return -kt_err_set(e, KT_EPROTO, "peer frame: zero length");
  if (l > max_len)
    return -kt_err_set(e, KT_ETOOLARGE, "peer frame: length %u exceeds the limit of %u bytes", l,
                       max_len);
  if (p[4] > KT_PEER_CH_JOIN)
    return -kt_err_set(e, KT_EPROTO, "peer frame: unknown channel %u", p[4]);
  if (n - KT_PEER_FRAME_HDR < l)
    return 0;
  *channel = p[4];
  *msg = p + KT_PEER_FRAME_HDR;
  *len = l;
  *used = KT_PEER_FRAME_HDR + (size_t)l;
  return 1;
}

int kt_peer_parse_url(const char *url, char *host, size_t host_len, int *port, struct kt_err *e) {
  const char *s = url;
  if (!strncmp(s, "http://", 7))
    s += 7;
  else if (!strncmp(s, "https://", 8))
    s += 8;
  const char *h0, *h1, *colon;
  if (*s == '[') {
    h0 = s + 1;
    h1 = strchr(h0, ']');
    if (!h1 || h1[1] != ':')
      return kt_err_set(e, KT_EINVAL, "peer url \"%s\": expected [address]:port", url);
    colon = h1 + 1;
  } else {
    h0 = s;
    colon = strrchr(s, ':');
    if (!colon)
      return kt_err_set(e, KT_EINVAL, "peer url \"%s\": expected host:port", url);
    h1 = colon;
  }
  size_t hl = (size_t)(h1 - h0);
  if (hl == 0 || hl >= host_len || (*s != '[' && memchr(h0, ':', hl) != NULL))
    return kt_err_set(e, KT_EINVAL, "peer url \"%s\": bad host", url);
  const char *ps = colon + 1;
  char *end;
  errno = 0;
  long v = strtol(ps, &end, 10);
  if (end == ps || errno || v < 0 || v > 65535 || (*end && strcmp(end, "/") != 0))
    return kt_err_set(e, KT_EINVAL, "peer url \"%s\": bad port", url);
  memcpy(host, h0, hl);
  host[hl] = 0;
  *port = (int)v;
  return 0;
}

/* ---- the transport ---- */

/* S_TLS: the TLS handshake (https:// peer URLs / a TLS listener), before HELLO. */
enum { S_CONNECTING, S_TLS, S_HANDSHAKE, S_UP };

struct peer;

struct pconn {
  struct kt_peer_transport *t;
  struct peer *peer; /* dialed: the owner; accepted: the sender once known (or NULL) */
  uint64_t from;     /* accepted: sender id from its HELLO */
  struct kt_io io;   /* the socket, plain TCP or TLS */
  uint8_t channel, state;
  bool dialed, closed, in_dirty, was_up;
  bool close_when_sent; /* JOIN answer: close once written */
  bool want_read;       /* read events wanted (all but an answered JOIN) */
  bool write_blocked;   /* unsent output the socket did not take */
  bool on_pending;      /* TLS holds read-ahead bytes (t->pending) */
  bool loud;            /* dialer: its closing reason is a warning (TLS refusals) */
  bool hs_waiting;      /* accepted: its TLS handshake waits for a turn (t->hs_head) */
  bool join_waiting;    /* accepted JOIN: on_join_async asked, kt_peer_join_answer due */
  uint64_t join_token;  /* its kt_peer_join_answer token */
  char join_urls[208];  /* the joiner's URLs, for the log line */
  ev_io rio, wio;
  struct kt_buf in;
  struct kt_buf out;
  size_t out_off; /* out.p[out_off..out.len) is unsent */
  ev_tstamp opened_at, last_progress;
  struct pconn *prev, *next; /* accepted list */
  struct pconn *dirty_next, *dead_next, *pend_next, *hs_next;
  char addr[KT_PEER_URL_MAX + 16];
};

struct peer {
  struct kt_peer_transport *t;
  uint64_t id;
  char url[KT_PEER_URL_MAX];
  struct pconn *conn[KT_PEER_N_CHANNELS];
  ev_timer retry[KT_PEER_N_CHANNELS];
  uint32_t backoff_ms[KT_PEER_N_CHANNELS];
  bool removed, unreachable_pending, room_wanted, room_pending;
  size_t room_needed;
  ev_tstamp connected_since;
  char last_error[192];
  char last_error_ch[KT_PEER_N_CHANNELS][192]; /* for logging a repeated error once */
  struct kt_peer_status st;                    /* counters */
  struct peer *next, *dead_next;
};

struct kt_peer_transport {
  struct ev_loop *loop;
  struct kt_peer_config cfg;
  int listen_fd, listen_port;
  ev_io listen_w;
  struct peer *peers; /* in order added */
  struct pconn *accepted;
  size_t n_accepted;
  struct pconn *dirty, *dead_conns;
  struct pconn *pending;           /* accepted TLS connections with read-ahead bytes */
  struct pconn *hs_head, *hs_tail; /* accepted TLS handshakes over this turn's budget */
  struct kt_tls_budget hs_budget;  /* acceptor TLS handshakes: per turn, share of the time */
  ev_timer hs_w;                   /* waiting handshakes: when the budget has time again */
  char last_refusal[256];          /* the last TLS refusal logged at warn, and when */
  ev_tstamp last_refusal_at;
  struct peer *dead_peers;
  ev_prepare prepare_w;
  ev_idle kick_w; /* keeps the loop turning while callbacks are pending */
  ev_timer stall_w;
  struct kt_rng rng;
  uint64_t join_seq; /* last JOIN token */
  bool freeing;
};

static struct peer *find_peer(const struct kt_peer_transport *t, uint64_t id) {
  for (struct peer *p = t->peers; p; p = p->next)
    if (p->id == id)
      return p;
  return NULL;
}

static size_t unsent(const struct pconn *c) { return c->out.len - c->out_off; }

static void kick(struct kt_peer_transport *t) {
  if (!ev_is_active(&t->kick_w))
    ev_idle_start(t->loop, &t->kick_w);
}

static void set_error(struct peer *p, int ch, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_error(struct peer *p, int ch, int level, const char *fmt, ...) {
  char msg[sizeof p->last_error];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(msg, sizeof msg, "%s connection: ", ch ? "snapshot" : "raft");
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  /* The same error on every retry is logged once at `level`, then at debug. */
  int lv = strcmp(msg, p->last_error_ch[ch]) == 0 ? KT_LOG_DEBUG : level;
  kt_log(lv, "peer", "peer %llx (%s): %s", (unsigned long long)p->id, p->url, msg);
  memcpy(p->last_error, msg, sizeof msg);
  memcpy(p->last_error_ch[ch], msg, sizeof msg);
}

static void schedule_dial(struct peer *p, int ch);

static void conn_close(struct pconn *c, const char *why) {
  if (c->closed)
    return;
  struct kt_peer_transport *t = c->t;
  c->closed = true;
  ev_io_stop(t->loop, &c->rio);
  ev_io_stop(t->loop, &c->wio);
  kt_io_close(&c->io);
  struct peer *p = c->peer;
  if (c->dialed) {
    p->st.bytes_lost += unsent(c);
    p->conn[c->channel] = NULL;
    if (c->channel == KT_PEER_CH_RAFT && c->state == S_UP) {
      p->connected_since = 0;
      if (!p->removed) {
        p->unreachable_pending = true;
        kick(t);
      }
    }
    if (why)
      set_error(p, c->channel, c->state == S_UP || c->loud ? KT_LOG_WARN : KT_LOG_INFO, "%s", why);
    if (!p->removed && !t->freeing)
      schedule_dial(p, c->channel);
  } else {
    if (why)
      kt_log(c->state == S_UP ? KT_LOG_INFO : KT_LOG_DEBUG, "peer",
             "closed connection from %s member=%llx channel=%u: %s", c->addr,
             (unsigned long long)c->from, c->channel, why);
    if (c->prev)
      c->prev->next = c->next;
    else
      t->accepted = c->next;
    if (c->next)
      c->next->prev = c->prev;
    t->n_accepted--;
  }
  if (c->hs_waiting) { /* off the handshake FIFO before it can be freed */
    struct pconn **pp = &t->hs_head, *prev = NULL;
    while (*pp && *pp != c)
      prev = *pp, pp = &(*pp)->hs_next;
    if (*pp)
      *pp = c->hs_next;
    if (t->hs_tail == c)
      t->hs_tail = prev;
    c->hs_waiting = false;
  }
  if (c->on_pending) { /* off the pending list before it can be freed */
    struct pconn **pp = &t->pending;
    while (*pp && *pp != c)
      pp = &(*pp)->pend_next;
    if (*pp)
      *pp = c->pend_next;
    c->on_pending = false;
  }
  c->state = S_CONNECTING;
  c->dead_next = t->dead_conns;
  t->dead_conns = c;
}

static void conn_free(struct pconn *c) {
  kt_buf_free(&c->in);
  kt_buf_free(&c->out);
  free(c);
}

static void mark_dirty(struct pconn *c) {
  if (c->in_dirty || c->closed)
    return;
  c->in_dirty = true;
  c->dirty_next = c->t->dirty;
  c->t->dirty = c;
}

/* The one place that decides which events a connection waits for. */
static void pconn_arm(struct pconn *c) {
  if (c->closed)
    return;
  int ev = c->state == S_CONNECTING ? KT_IO_WRITE
           : c->hs_waiting          ? 0
                                    : kt_io_events(&c->io, c->want_read, c->write_blocked);
  kt_sock_arm(c->t->loop, &c->rio, &c->wio, ev);
}

static size_t queue_cap(const struct pconn *c) {
  const struct kt_peer_config *cfg = &c->t->cfg;
  return c->channel == KT_PEER_CH_SNAPSHOT ? cfg->max_snapshot_queue_bytes : cfg->max_queue_bytes;
}

/* Append one frame whose body is a[0..alen) then b[0..blen); the caller
 * checked unsent + size <= queue_cap. The buffer never grows past
 * queue_cap: sent bytes at the front are reclaimed first. */
static void conn_queue2(struct pconn *c, uint8_t channel, const void *a, size_t alen, const void *b,
                        size_t blen) {
  size_t len = alen + blen;
  size_t need = KT_PEER_FRAME_HDR + len, cap = queue_cap(c);
  if (c->out.cap - c->out.len < need) {
    if (c->out_off) {
      memmove(c->out.p, c->out.p + c->out_off, unsent(c));
      c->out.len -= c->out_off;
      c->out_off = 0;
    }
    if (c->out.cap - c->out.len < need) {
      size_t want = c->out.len + need, ncap = c->out.cap ? c->out.cap : 4096;
      while (ncap < want)
        ncap *= 2;
      if (ncap > cap)
        ncap = cap;
      kt_assert(ncap >= want);
      uint8_t *np = realloc(c->out.p, ncap);
      kt_assert(np);
      c->out.p = np;
      c->out.cap = ncap;
    }
  }
  if (!unsent(c))
    c->last_progress = ev_now(c->t->loop); /* the stall clock starts with pending output */
  kt_peer_frame_header(c->out.p + c->out.len, channel, (uint32_t)len);
  if (alen)
    memcpy(c->out.p + c->out.len + KT_PEER_FRAME_HDR, a, alen);
  if (blen)
    memcpy(c->out.p + c->out.len + KT_PEER_FRAME_HDR + alen, b, blen);
  c->out.len += need;
  mark_dirty(c);
}

static void conn_queue(struct pconn *c, uint8_t channel, const void *msg, size_t len) {
  conn_queue2(c, channel, msg, len, NULL, 0);
}

static void check_room(struct peer *p) {
  struct pconn *c = p->conn[KT_PEER_CH_SNAPSHOT];
  if (!p->room_wanted || !c || c->state != S_UP)
    return;
  size_t cap = queue_cap(c), q = unsent(c);
  if (q <= cap / 2 && q + KT_PEER_FRAME_HDR + p->room_needed <= cap) {
    p->room_wanted = false;
    p->room_pending = true;
    kick(p->t);
  }
}

/* Write as much as the socket takes. Returns false if the connection closed. */
static bool conn_flush(struct pconn *c) {
  struct kt_peer_transport *t = c->t;
  if (c->state == S_CONNECTING || c->state == S_TLS)
    return true; /* the output waits for the handshake */
  while (unsent(c)) {
    struct kt_err e = {0};
    ssize_t w = kt_io_write(&c->io, c->out.p + c->out_off, unsent(c), &e);
    if (w > 0) {
      c->out_off += (size_t)w;
      c->last_progress = ev_now(t->loop);
      if (c->peer && c->dialed) {
        c->peer->st.bytes_written += (uint64_t)w;
        c->peer->st.writes++;
      }
      continue;
    }
    if (w == KT_IO_AGAIN) {
      if (!c->write_blocked) {
        c->write_blocked = true;
        pconn_arm(c);
      }
      break;
    }
    char why[300];
    snprintf(why, sizeof why, "write: %s", e.msg);
    conn_close(c, why);
    return false;
  }
  if (!unsent(c)) {
    if (c->close_when_sent) {
      conn_close(c, NULL);
      return false;
    }
    if (c->write_blocked) {
      c->write_blocked = false;
      pconn_arm(c);
    }
    c->out.len = c->out_off = 0;
    if (c->out.cap > 4 * READ_CHUNK)
      kt_buf_free(&c->out);
  }
  if (c->dialed && c->channel == KT_PEER_CH_SNAPSHOT)
    check_room(c->peer);
  return true;
}

/* ---- dialing ---- */

static void set_sockopts(int fd, uint32_t stall_ms) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 5, intvl = 2, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  unsigned int uto = stall_ms;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
}

static void on_conn_readable(struct ev_loop *loop, ev_io *w, int revents);
static void on_conn_writable(struct ev_loop *loop, ev_io *w, int revents);

static struct pconn *conn_new(struct kt_peer_transport *t, int fd, bool dialed) {
  struct pconn *c = calloc(1, sizeof *c);
  kt_assert(c);
  c->t = t;
  kt_io_init_plain(&c->io, fd);
  c->dialed = dialed;
  c->want_read = true;
  c->opened_at = c->last_progress = ev_now(t->loop);
  ev_io_init(&c->rio, on_conn_readable, fd, EV_READ);
  ev_io_init(&c->wio, on_conn_writable, fd, EV_WRITE);
  c->rio.data = c->wio.data = c;
  return c;
}

static void dial(struct peer *p, int ch) {
  struct kt_peer_transport *t = p->t;
  p->st.dials++;
  char host[KT_PEER_URL_MAX];
  int port;
  struct kt_err e = {0};
  if (kt_peer_parse_url(p->url, host, sizeof host, &port, &e)) {
    set_error(p, ch, KT_LOG_ERROR, "%s", e.msg);
    schedule_dial(p, ch);
    return;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc == EAI_NONAME) { /* a name, not an address: resolve (may block) */
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(host, ps, &hints, &ai);
  }
  if (rc) {
    set_error(p, ch, KT_LOG_WARN, "resolve %s: %s", host, gai_strerror(rc));
    schedule_dial(p, ch);
    return;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    set_error(p, ch, KT_LOG_WARN, "socket: %s", strerror(errno));
    schedule_dial(p, ch);
    return;
  }
  set_sockopts(fd, t->cfg.stall_ms);
  int cr = connect(fd, ai->ai_addr, ai->ai_addrlen);
  int er = errno;
  freeaddrinfo(ai);
  if (cr < 0 && er != EINPROGRESS) {
    close(fd);
    set_error(p, ch, KT_LOG_WARN, "connect: %s", strerror(er));
    schedule_dial(p, ch);
    return;
  }
  struct pconn *c = conn_new(t, fd, true);
  c->peer = p;
  c->channel = (uint8_t)ch;
  c->state = S_CONNECTING;
  snprintf(c->addr, sizeof c->addr, "%s:%d", host, port);
  p->conn[ch] = c;
  if (!strncmp(p->url, "https://", 8)) {
    if (!t->cfg.tls_client) {
      conn_close(c, "the peer URL is https:// but this member has no peer TLS (--peer-cert-file "
                    "and --peer-key-file, or --peer-auto-tls)");
      return;
    }
    if (kt_io_init_tls(&c->io, fd, t->cfg.tls_client, host, &e)) {
      conn_close(c, e.msg);
      return;
    }
  }
  pconn_arm(c); /* writable = connect finished */
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  struct peer *p = w->data;
  int ch = (int)(w - p->retry);
  if (!p->removed && !p->conn[ch])
    dial(p, ch);
}

static void schedule_dial(struct peer *p, int ch) {
  struct kt_peer_transport *t = p->t;
  uint32_t d = p->backoff_ms[ch];
  uint32_t delay_ms = d / 2 + (uint32_t)kt_rng_below(&t->rng, d / 2 + 1);
  uint64_t next = (uint64_t)d * 2;
  p->backoff_ms[ch] = next > t->cfg.backoff_max_ms ? t->cfg.backoff_max_ms : (uint32_t)next;
  ev_timer_stop(t->loop, &p->retry[ch]);
  ev_timer_set(&p->retry[ch], delay_ms / 1000.0, 0);
  ev_timer_start(t->loop, &p->retry[ch]);
}

/* The dialer got its ACK. Returns false if the connection was closed. */
static bool dialer_ack(struct pconn *c, const struct kt_peer_hs *h) {
  struct kt_peer_transport *t = c->t;
  struct peer *p = c->peer;
  const char *chname = c->channel ? "snapshot" : "raft";
  char why[192];
  if (h->code == KT_PEER_REMOVED && t->cfg.on_removed) {
    p->last_error_ch[c->channel][0] = 0;
    conn_close(c, "refused by the remote: this member was removed from the cluster");
    t->cfg.on_removed(t->cfg.arg, p->id);
    return false;
  }
  if (h->code != KT_PEER_OK) {
    snprintf(why, sizeof why,
             "refused by the remote: %s (local member=%llx cluster=%llx; remote member=%llx "
             "cluster=%llx)",
             kt_peer_status_name(h->code), (unsigned long long)t->cfg.member_id,
             (unsigned long long)t->cfg.cluster_id, (unsigned long long)h->a,
             (unsigned long long)h->cluster_id);
    p->last_error_ch[c->channel][0] = 0; /* a refusal is always logged at warn */
    conn_close(c, why);
    return false;
  }
  if (h->version != KT_PEER_VERSION || h->cluster_id != t->cfg.cluster_id || h->a != p->id ||
      h->b != t->cfg.member_id) {
    snprintf(why, sizeof why,
             "bad ACK: version=%u cluster=%llx member=%llx saw=%llx (expected cluster=%llx "
             "member=%llx saw=%llx)",
             h->version, (unsigned long long)h->cluster_id, (unsigned long long)h->a,
             (unsigned long long)h->b, (unsigned long long)t->cfg.cluster_id,
             (unsigned long long)p->id, (unsigned long long)t->cfg.member_id);
    conn_close(c, why);
    return false;
  }
  c->state = S_UP;
  c->was_up = true;
  p->backoff_ms[c->channel] = t->cfg.backoff_min_ms;
  p->last_error_ch[c->channel][0] = 0;
  if (!p->conn[!c->channel] || p->conn[!c->channel]->state == S_UP)
    p->last_error[0] = 0;
  kt_log(KT_LOG_INFO, "peer", "connected to peer %llx (%s) channel=%s", (unsigned long long)p->id,
         c->addr, chname);
  if (c->channel == KT_PEER_CH_RAFT) {
    p->connected_since = ev_now(t->loop);
  } else {
    p->st.snap_ups++;
    check_room(p);
  }
  return true;
}

/* ---- accepting ---- */

static void acceptor_hello(struct pconn *c, const struct kt_peer_hs *h) {
  struct kt_peer_transport *t = c->t;
  if (h->code == KT_PEER_CH_JOIN && (t->cfg.on_join || t->cfg.on_join_async) &&
      h->version == KT_PEER_VERSION) {
    c->channel = KT_PEER_CH_JOIN; /* its frame comes next; answered then */
    c->state = S_UP;
    return;
  }
  struct peer *p = find_peer(t, h->a);
  int st = kt_peer_hs_check(h, t->cfg.cluster_id, t->cfg.member_id, p != NULL);
  if (st == KT_PEER_UNKNOWN_SENDER && t->cfg.is_removed && t->cfg.is_removed(t->cfg.arg, h->a))
    st = KT_PEER_REMOVED;
  struct kt_peer_hs ack = {.kind = KT_PEER_ACK,
                           .version = KT_PEER_VERSION,
                           .code = (uint8_t)st,
                           .cluster_id = t->cfg.cluster_id,
                           .a = t->cfg.member_id,
                           .b = h->a};
  uint8_t buf[KT_PEER_HELLO_BYTES];
  kt_peer_hs_encode(buf, &ack);
  c->from = h->a;
  if (st != KT_PEER_OK) {
    kt_log(KT_LOG_WARN, "peer",
           "refused peer connection from %s: %s (local member=%llx cluster=%llx; remote "
           "member=%llx cluster=%llx addressed to member=%llx version=%u channel=%u)",
           c->addr, kt_peer_status_name(st), (unsigned long long)t->cfg.member_id,
           (unsigned long long)t->cfg.cluster_id, (unsigned long long)h->a,
           (unsigned long long)h->cluster_id, (unsigned long long)h->b, h->version, h->code);
    struct kt_err we = {0};
    (void)kt_io_write(&c->io, buf, sizeof buf, &we); /* best effort, then close */
    conn_close(c, NULL);
    return;
  }
  c->channel = h->code;
  c->peer = p;
  c->state = S_UP;
  /* A newer connection from the same member and channel replaces older ones
   * (the old one is most likely dead: the peer restarted or reconnected). */
  for (struct pconn *o = t->accepted; o;) {
    struct pconn *next = o->next;
    if (o != c && o->state == S_UP && o->from == c->from && o->channel == c->channel)
      conn_close(o, "replaced by a newer connection from the same member");
    o = next;
  }
  kt_log(KT_LOG_INFO, "peer", "accepted peer %llx from %s channel=%s", (unsigned long long)h->a,
         c->addr, c->channel ? "snapshot" : "raft");
  kt_buf_reserve(&c->out, sizeof buf);
  memcpy(c->out.p, buf, sizeof buf);
  c->out.len = sizeof buf;
  conn_flush(c);
}

/* JOIN: the ACK and (accepted) the reply frame, then close once written. */
static void join_reply(struct pconn *c, int st, uint64_t id, const void *reply, size_t rlen) {
  struct kt_peer_transport *t = c->t;
  struct kt_peer_hs ack = {.kind = KT_PEER_ACK,
                           .version = KT_PEER_VERSION,
                           .code = (uint8_t)st,
                           .cluster_id = t->cfg.cluster_id,
                           .a = t->cfg.member_id,
                           .b = st == KT_PEER_OK ? id : 0};
  kt_log(st == KT_PEER_OK ? KT_LOG_INFO : KT_LOG_WARN, "peer",
         "join request from %s urls=%s: %s member=%llx", c->addr, c->join_urls,
         kt_peer_status_name(st), (unsigned long long)id);
  size_t n = KT_PEER_HELLO_BYTES + (st == KT_PEER_OK ? KT_PEER_FRAME_HDR + rlen : 0);
  kt_buf_reserve(&c->out, n);
  kt_peer_hs_encode(c->out.p, &ack);
  c->out.len = KT_PEER_HELLO_BYTES;
  if (st == KT_PEER_OK) {
    kt_peer_frame_header(c->out.p + c->out.len, KT_PEER_CH_JOIN, (uint32_t)rlen);
    if (rlen)
      memcpy(c->out.p + c->out.len + KT_PEER_FRAME_HDR, reply, rlen);
    c->out.len += KT_PEER_FRAME_HDR + rlen;
  }
  c->close_when_sent = true;
  c->want_read = false; /* nothing more is read */
  pconn_arm(c);
  conn_flush(c);
}

/* JOIN: the joiner's frame is answered now (on_join) or once the owner
 * calls kt_peer_join_answer (on_join_async); nothing more is read. */
static void acceptor_join(struct pconn *c, const uint8_t *msg, size_t len) {
  struct kt_peer_transport *t = c->t;
  snprintf(c->join_urls, sizeof c->join_urls, "%.*s", (int)KT_MIN(len, 200), (const char *)msg);
  if (t->cfg.on_join_async) {
    c->join_waiting = true;
    c->join_token = ++t->join_seq;
    c->want_read = false;
    pconn_arm(c);
    t->cfg.on_join_async(t->cfg.arg, c->join_token, msg, len);
    return;
  }
  struct kt_buf reply = {0};
  uint64_t id = 0;
  int st = t->cfg.on_join(t->cfg.arg, msg, len, &id, &reply);
  join_reply(c, st, id, reply.p, reply.len);
  kt_buf_free(&reply);
}

int kt_peer_join_answer(struct kt_peer_transport *t, uint64_t token, int status, uint64_t member_id,
                        const void *reply, size_t len) {
  for (struct pconn *c = t->accepted; c; c = c->next)
    if (c->join_waiting && c->join_token == token && !c->closed) {
      c->join_waiting = false;
      join_reply(c, status, member_id, reply, len);
      return 0;
    }
  return KT_ENOTFOUND; /* closed meanwhile (stall, shutdown) */
}

/* Decode whatever c->in holds (accepted connections). */
static void acceptor_process(struct pconn *c) {
  struct kt_peer_transport *t = c->t;
  size_t off = 0;
  struct kt_err e = {0};
  while (!c->closed) {
    if (c->state != S_UP) {
      if (off == 0 && !kt_io_is_tls(&c->io) && kt_tls_sniff(c->in.p, c->in.len) == 1) {
        kt_log(KT_LOG_WARN, "peer",
               "refused peer connection from %s: a TLS handshake on a plaintext peer port (this "
               "member's peer URL is http://)",
               c->addr);
        conn_close(c, NULL);
        return;
      }
      struct kt_peer_hs h;
      int r = kt_peer_hs_decode(c->in.p + off, c->in.len - off, KT_PEER_HELLO, &h, &e);
      if (r == 0)
        break;
      if (r < 0) {
        kt_log(KT_LOG_WARN, "peer", "closing connection from %s: %s", c->addr, e.msg);
        conn_close(c, NULL);
        return;
      }
      off += KT_PEER_HELLO_BYTES;
      acceptor_hello(c, &h);
      continue;
    }
    uint8_t ch;
    const uint8_t *msg;
    uint32_t len;
    size_t used;
    int r = kt_peer_frame_next(c->in.p + off, c->in.len - off, t->cfg.max_frame_bytes, &ch, &msg,
                               &len, &used, &e);
    if (r == 0 && c->in.len - off >= KT_PEER_FRAME_HDR) {
      ch = c->in.p[off + 4]; /* judge the channel before the body arrives */
      r = ch == c->channel ? 0 : 1;
    }
    if (r == 0)
      break;
    if (r > 0 && ch != c->channel)
      r = -kt_err_set(&e, KT_EPROTO, "peer frame: channel %u on a channel %u connection", ch,
                      c->channel);
    if (r < 0) {
      kt_log(KT_LOG_WARN, "peer", "closing connection from %s member=%llx: %s", c->addr,
             (unsigned long long)c->from, e.msg);
      conn_close(c, NULL);
      return;
    }
    off += used;
    if (c->channel == KT_PEER_CH_JOIN) {
      acceptor_join(c, msg, len);
      return;
    }
    if (c->peer) {
      c->peer->st.msgs_received++;
      c->peer->st.bytes_received += len;
    }
    kt_peer_message_fn fn =
        ch == KT_PEER_CH_SNAPSHOT && t->cfg.on_snapshot ? t->cfg.on_snapshot : t->cfg.on_message;
    fn(t->cfg.arg, c->from, msg, len);
  }
  if (c->closed)
    return;
  if (off) {
    memmove(c->in.p, c->in.p + off, c->in.len - off);
    c->in.len -= off;
  }
  if (c->in.len == 0 && c->in.cap > 4 * READ_CHUNK)
    kt_buf_free(&c->in);
}

/* Waiting handshakes: at the next turn if only its step count is spent (the
 * loop keeps turning), else when the time budget has credit again. */
static void hs_wake_later(struct kt_peer_transport *t) {
  double w = kt_tls_budget_wait_s(&t->hs_budget);
  if (w <= 0) {
    kick(t);
  } else if (!ev_is_active(&t->hs_w)) {
    ev_timer_set(&t->hs_w, w, 0);
    ev_timer_start(t->loop, &t->hs_w);
  }
}

static void on_hs_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents; /* it woke the loop: on_prepare runs the handshakes */
}

/* The acceptor refused a connection at the TLS level: who and why, once per
 * distinct reason a minute (a refused dialer retries every few seconds). */
static void refusal(struct kt_peer_transport *t, const char *addr, const char *why) {
  ev_tstamp now = ev_now(t->loop);
  bool repeat = strcmp(why, t->last_refusal) == 0 && now - t->last_refusal_at < 60;
  kt_log(repeat ? KT_LOG_DEBUG : KT_LOG_WARN, "peer", "refused peer connection from %s: TLS: %s",
         addr, why);
  if (!repeat) {
    snprintf(t->last_refusal, sizeof t->last_refusal, "%s", why);
    t->last_refusal_at = now;
  }
}

static void mark_pending(struct pconn *c) {
  if (c->on_pending || c->closed)
    return;
  c->on_pending = true;
  c->pend_next = c->t->pending;
  c->t->pending = c;
  kick(c->t);
}

static void pconn_read(struct pconn *c) {
  struct kt_err e = {0};
  if (c->dialed && c->state == S_UP) {
    /* The acceptor never writes after its ACK: only EOF or an error is legal. */
    uint8_t b[64];
    ssize_t n = kt_io_read(&c->io, b, sizeof b, &e);
    if (n == KT_IO_AGAIN)
      return;
    conn_close(c, n == 0  ? "closed by the remote"
                  : n > 0 ? "protocol error: the remote sent bytes after its ACK"
                          : e.msg);
    return;
  }
  for (int rounds = 0; rounds < 64 && !c->closed; rounds++) {
    size_t want = READ_CHUNK;
    if (c->dialed) {
      want = KT_PEER_HELLO_BYTES - c->in.len;
    } else if (c->state == S_UP && c->in.len >= KT_PEER_FRAME_HDR) {
      /* Room for the whole current frame, when it is legal. */
      uint32_t l = kt_get_u32be(c->in.p);
      if (l <= c->t->cfg.max_frame_bytes && KT_PEER_FRAME_HDR + (size_t)l > c->in.len)
        want = KT_MAX(want, KT_PEER_FRAME_HDR + (size_t)l - c->in.len);
    }
    if (c->in.cap - c->in.len < want) { /* exact growth: one frame, not the next power of 2 */
      size_t ncap = (c->in.len + want + 4095) & ~(size_t)4095;
      uint8_t *np = realloc(c->in.p, ncap);
      kt_assert(np);
      c->in.p = np;
      c->in.cap = ncap;
    }
    ssize_t n =
        kt_io_read(&c->io, c->in.p + c->in.len, c->dialed ? want : c->in.cap - c->in.len, &e);
    if (n == 0) {
      c->loud = c->dialed && !kt_io_is_tls(&c->io);
      conn_close(c, c->dialed && !kt_io_is_tls(&c->io)
                        ? "closed by the remote before its ACK (if it serves TLS on its peer "
                          "port, this peer URL must be https://)"
                        : "closed by the remote");
      return;
    }
    if (n == KT_IO_AGAIN)
      return;
    if (n < 0) {
      if (c->dialed) {
        c->loud = kt_io_is_tls(&c->io) && e.code == KT_EPROTO; /* e.g. the acceptor's alert */
        conn_close(c, e.msg);
      } else {
        kt_log(KT_LOG_WARN, "peer", "closing connection from %s member=%llx: %s", c->addr,
               (unsigned long long)c->from, e.msg);
        conn_close(c, NULL);
      }
      return;
    }
    c->in.len += (size_t)n;
    if (!c->dialed) {
      acceptor_process(c);
      if (!kt_io_is_tls(&c->io) || !c->want_read || !kt_io_pending(&c->io))
        return; /* one read per event (TLS: records read ahead are taken without one) */
      continue;
    }
    /* Dialer waiting for its ACK. */
    struct kt_peer_hs h;
    int r = kt_peer_hs_decode(c->in.p, c->in.len, KT_PEER_ACK, &h, &e);
    if (r == 0)
      continue;
    if (r < 0) {
      conn_close(c, e.msg);
      return;
    }
    kt_buf_free(&c->in);
    dialer_ack(c, &h);
    return;
  }
  if (!c->closed && kt_io_pending(&c->io))
    mark_pending(c); /* the round limit stopped it: the rest before sleeping */
}

static void send_hello(struct pconn *c) {
  struct kt_peer_transport *t = c->t;
  c->state = S_HANDSHAKE;
  struct kt_peer_hs h = {.kind = KT_PEER_HELLO,
                         .version = KT_PEER_VERSION,
                         .code = c->channel,
                         .cluster_id = t->cfg.cluster_id,
                         .a = t->cfg.member_id,
                         .b = c->peer->id};
  kt_buf_reserve(&c->out, KT_PEER_HELLO_BYTES);
  kt_peer_hs_encode(c->out.p, &h);
  c->out.len = KT_PEER_HELLO_BYTES;
  pconn_arm(c);
  conn_flush(c);
}

/* One TLS handshake step of either side. An acceptor's step counts against
 * the turn's budget (KT_TLS_HANDSHAKES_PER_TURN): past it, the connection
 * waits on a FIFO that on_prepare drains in later turns, so a storm of
 * connections to the peer port cannot stall the loop. */
static void pconn_tls_step(struct pconn *c) {
  struct kt_peer_transport *t = c->t;
  if (!c->dialed && !kt_tls_budget_room(&t->hs_budget)) {
    if (!c->hs_waiting) {
      c->hs_waiting = true;
      c->hs_next = NULL;
      if (t->hs_tail)
        t->hs_tail->hs_next = c;
      else
        t->hs_head = c;
      t->hs_tail = c;
      pconn_arm(c);
      hs_wake_later(t);
    }
    return;
  }
  struct kt_err e = {0};
  ev_tstamp t0 = ev_time();
  int r = kt_io_handshake(&c->io, &e);
  if (!c->dialed)
    kt_tls_budget_spent(&t->hs_budget, ev_time() - t0);
  if (r == KT_IO_AGAIN) {
    pconn_arm(c);
    return;
  }
  if (r == 1) {
    char cn[128];
    kt_io_peer_cn(&c->io, cn, sizeof cn);
    kt_log(KT_LOG_DEBUG, "peer", "TLS up with %s (%s) version=%s peer-cn=%s",
           c->dialed ? "the acceptor" : "a dialer", c->addr, kt_io_version(&c->io),
           cn[0] ? cn : "-");
    if (c->dialed) {
      send_hello(c);
    } else {
      c->state = S_HANDSHAKE;
      pconn_arm(c);
      pconn_read(c); /* the HELLO may have come with the handshake */
    }
    return;
  }
  if (c->dialed) {
    char why[300];
    snprintf(why, sizeof why, "TLS handshake: %s", e.msg);
    c->loud = true;
    conn_close(c, why);
    return;
  }
  if (r == KT_IO_PLAINTEXT) {
    refusal(c->t, c->addr,
            "plaintext on a TLS peer port (the other member dials an http:// peer URL: make it "
            "https://)");
    kt_io_to_plain(&c->io);
    kt_io_close_refused(&c->io); /* FIN, not RST: the dialer then says why */
  } else {
    refusal(c->t, c->addr, e.msg);
  }
  conn_close(c, NULL);
}

static void pconn_event(struct pconn *c, int revents) {
  struct kt_peer_transport *t = c->t;
  if (c->dialed && c->state == S_CONNECTING) {
    int err = 0;
    socklen_t sl = sizeof err;
    if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
      err = errno;
    if (err) {
      char why[128];
      snprintf(why, sizeof why, "connect %.80s: %s", c->addr, strerror(err));
      conn_close(c, why);
      return;
    }
    c->opened_at = ev_now(t->loop);
    if (kt_io_is_tls(&c->io)) {
      c->state = S_TLS;
      pconn_tls_step(c);
    } else {
      send_hello(c);
    }
    return;
  }
  if (c->state == S_TLS) {
    pconn_tls_step(c);
    return;
  }
  int rd = kt_io_events(&c->io, true, false), wr = kt_io_events(&c->io, false, true);
  if (c->write_blocked && (revents & wr) && !conn_flush(c))
    return;
  if (!c->closed && c->want_read && (revents & rd))
    pconn_read(c);
}

static void on_conn_readable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  pconn_event(w->data, KT_IO_READ);
}

static void on_conn_writable(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop, (void)revents;
  pconn_event(w->data, KT_IO_WRITE);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  struct kt_peer_transport *t = w->data;
  for (int i = 0; i < 64; i++) {
    char addr[64];
    int fd = kt_sock_accept(t->listen_fd, addr, sizeof addr);
    if (fd < 0) {
      if (fd == -2)
        kt_log(KT_LOG_WARN, "peer", "accept failed: %s", strerror(errno));
      return;
    }
    if (t->n_accepted >= KT_PEER_MAX_ACCEPTED) {
      close(fd);
      kt_log(KT_LOG_WARN, "peer", "peer connection refused: %d connections open",
             KT_PEER_MAX_ACCEPTED);
      continue;
    }
    set_sockopts(fd, t->cfg.stall_ms);
    struct pconn *c = conn_new(t, fd, false);
    c->state = S_HANDSHAKE;
    if (t->cfg.tls_server) {
      struct kt_err e = {0};
      if (kt_io_init_tls(&c->io, fd, t->cfg.tls_server, NULL, &e)) {
        kt_log(KT_LOG_WARN, "peer", "peer connection from %s refused: %s", addr, e.msg);
        close(fd);
        conn_free(c);
        continue;
      }
      c->state = S_TLS;
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->next = t->accepted;
    if (t->accepted)
      t->accepted->prev = c;
    t->accepted = c;
    t->n_accepted++;
    pconn_arm(c);
  }
}

/* ---- end of turn ---- */

static void free_dead(struct kt_peer_transport *t) {
  while (t->dead_conns) {
    struct pconn *c = t->dead_conns;
    t->dead_conns = c->dead_next;
    conn_free(c);
  }
  while (t->dead_peers) {
    struct peer *p = t->dead_peers;
    t->dead_peers = p->dead_next;
    free(p);
  }
}

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)revents;
  struct kt_peer_transport *t = w->data;
  if (ev_is_active(&t->kick_w))
    ev_idle_stop(loop, &t->kick_w);
  /* Deferred callbacks first: what they send goes out in this turn's write. */
  for (struct peer *p = t->peers; p; p = p->next) {
    if (p->removed)
      continue;
    if (p->unreachable_pending) {
      p->unreachable_pending = false;
      if (t->cfg.on_unreachable)
        t->cfg.on_unreachable(t->cfg.arg, p->id);
    }
    if (p->room_pending) {
      p->room_pending = false;
      if (t->cfg.on_snapshot_room)
        t->cfg.on_snapshot_room(t->cfg.arg, p->id);
    }
  }
  /* A new turn's handshake budget: deferred acceptor handshakes first. */
  kt_tls_budget_turn(&t->hs_budget, ev_time());
  while (t->hs_head && kt_tls_budget_room(&t->hs_budget)) {
    struct pconn *c = t->hs_head;
    t->hs_head = c->hs_next;
    if (!t->hs_head)
      t->hs_tail = NULL;
    c->hs_waiting = false;
    pconn_arm(c);
    pconn_tls_step(c);
  }
  if (t->hs_head)
    hs_wake_later(t);
  /* TLS bytes read ahead: what they carry is handled now; the kick keeps the
   * loop turning so the node's own prepare sees it next. */
  struct pconn *list = t->pending;
  t->pending = NULL;
  while (list) {
    struct pconn *c = list;
    list = c->pend_next;
    c->on_pending = false;
    if (!c->closed && c->want_read) {
      pconn_read(c);
      kick(t);
    }
  }
  while (t->dirty) {
    struct pconn *c = t->dirty;
    t->dirty = c->dirty_next;
    c->in_dirty = false;
    if (!c->closed && c->state == S_UP)
      conn_flush(c);
  }
  free_dead(t);
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)revents;
  ev_idle_stop(loop, w); /* its only job: the loop does not block while callbacks wait */
}

static void on_stall(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  struct kt_peer_transport *t = w->data;
  ev_tstamp now = ev_now(loop), lim = t->cfg.stall_ms / 1000.0;
  for (struct peer *p = t->peers; p; p = p->next)
    for (int ch = 0; ch < KT_PEER_N_CHANNELS; ch++) {
      struct pconn *c = p->conn[ch];
      if (!c)
        continue;
      if (c->state != S_UP && now - c->opened_at > lim)
        conn_close(c, "handshake timed out");
      else if (unsent(c) && now - c->last_progress > lim)
        conn_close(c, "no write progress (peer not reading)");
    }
  for (struct pconn *c = t->accepted; c;) {
    struct pconn *next = c->next;
    if (c->state != S_UP && now - c->opened_at > lim)
      conn_close(c, "handshake timed out");
    else if (c->join_waiting && now - c->opened_at > lim)
      conn_close(c, "join: no answer in time");
    c = next;
  }
  /* Closed connections are freed by on_prepare: one may still be on the
   * dirty list. */
}

/* ---- public API ---- */

void kt_peer_config_defaults(struct kt_peer_config *c) {
  if (!c->max_queue_bytes)
    c->max_queue_bytes = KT_PEER_QUEUE_BYTES;
  if (!c->max_snapshot_queue_bytes)
    c->max_snapshot_queue_bytes = KT_PEER_SNAP_QUEUE_BYTES;
  if (!c->max_frame_bytes)
    c->max_frame_bytes = KT_PEER_MAX_FRAME_BYTES;
  if (!c->backoff_min_ms)
    c->backoff_min_ms = KT_PEER_BACKOFF_MIN_MS;
  if (!c->backoff_max_ms)
    c->backoff_max_ms = KT_PEER_BACKOFF_MAX_MS;
  if (c->backoff_max_ms < c->backoff_min_ms)
    c->backoff_max_ms = c->backoff_min_ms;
  if (!c->stall_ms)
    c->stall_ms = KT_PEER_STALL_MS;
}

struct kt_peer_transport *kt_peer_new(struct ev_loop *loop, const struct kt_peer_config *cfg) {
  kt_assert(cfg->member_id != 0 && cfg->on_message);
  struct kt_peer_transport *t = calloc(1, sizeof *t);
  kt_assert(t);
  t->loop = loop;
  t->cfg = *cfg;
  struct kt_peer_config *c = &t->cfg;
  kt_peer_config_defaults(c);
  uint64_t seed = c->seed;
  if (!seed) {
    if (sodium_init() < 0)
      kt_panic(__FILE__, __LINE__, "sodium_init failed");
    randombytes_buf(&seed, sizeof seed);
  }
  kt_rng_seed(&t->rng, seed);
  t->listen_fd = -1;
  t->listen_port = -1;
  ev_prepare_init(&t->prepare_w, on_prepare);
  /* Lowest priority: the node's own prepare watcher (which hands Raft's
   * messages to kt_peer_send) runs first, so they leave in this turn. */
  ev_set_priority(&t->prepare_w, EV_MINPRI);
  t->prepare_w.data = t;
  ev_prepare_start(loop, &t->prepare_w);
  ev_unref(loop);
  ev_idle_init(&t->kick_w, on_idle);
  t->kick_w.data = t;
  ev_timer_init(&t->hs_w, on_hs_timer, 0, 0);
  t->hs_w.data = t;
  double every = c->stall_ms / 4000.0;
  if (every > 1.0)
    every = 1.0;
  ev_timer_init(&t->stall_w, on_stall, every, every);
  t->stall_w.data = t;
  ev_timer_start(loop, &t->stall_w);
  ev_unref(loop);
  return t;
}

int kt_peer_listen(struct kt_peer_transport *t, const char *url, struct kt_err *e) {
  char host[KT_PEER_URL_MAX];
  int port;
  if (t->listen_fd >= 0)
    return kt_err_set(e, KT_EINVAL, "listen %s: the peer transport already listens", url);
  if (kt_peer_parse_url(url, host, sizeof host, &port, e))
    return KT_EINVAL;
  int fd = kt_sock_listen(host, port, 128, e);
  if (fd < 0)
    return e->code;
  t->listen_port = kt_sock_port(fd);
  t->listen_fd = fd;
  ev_io_init(&t->listen_w, on_accept, fd, EV_READ);
  t->listen_w.data = t;
  ev_io_start(t->loop, &t->listen_w);
  kt_log(KT_LOG_INFO, "peer", "listening for peers on %s member=%llx cluster=%llx", url,
         (unsigned long long)t->cfg.member_id, (unsigned long long)t->cfg.cluster_id);
  return 0;
}

int kt_peer_listen_port(const struct kt_peer_transport *t) { return t->listen_port; }

int kt_peer_add(struct kt_peer_transport *t, uint64_t id, const char *url, struct kt_err *e) {
  char host[KT_PEER_URL_MAX];
  int port;
  if (id == 0 || id == t->cfg.member_id)
    return kt_err_set(e, KT_EINVAL, "peer id %llx: not a remote member id", (unsigned long long)id);
  if (find_peer(t, id))
    return kt_err_set(e, KT_EINVAL, "peer %llx is already a peer", (unsigned long long)id);
  if (strlen(url) >= KT_PEER_URL_MAX)
    return kt_err_set(e, KT_EINVAL, "peer url too long");
  if (kt_peer_parse_url(url, host, sizeof host, &port, e))
    return KT_EINVAL;
  struct peer *p = calloc(1, sizeof *p);
  kt_assert(p);
  p->t = t;
  p->id = id;
  snprintf(p->url, sizeof p->url, "%s", url);
  for (int ch = 0; ch < KT_PEER_N_CHANNELS; ch++) {
    ev_timer_init(&p->retry[ch], on_retry, 0, 0);
    p->retry[ch].data = p;
    p->backoff_ms[ch] = t->cfg.backoff_min_ms;
  }
  struct peer **tail = &t->peers;
  while (*tail)
    tail = &(*tail)->next;
  *tail = p;
  kt_log(KT_LOG_INFO, "peer", "added peer %llx url=%s", (unsigned long long)id, url);
  for (int ch = 0; ch < KT_PEER_N_CHANNELS; ch++)
    dial(p, ch);
  return 0;
}

static void close_peer_conns(struct peer *p, const char *why) {
  for (int ch = 0; ch < KT_PEER_N_CHANNELS; ch++) {
    ev_timer_stop(p->t->loop, &p->retry[ch]);
    if (p->conn[ch])
      conn_close(p->conn[ch], why);
  }
}

int kt_peer_update(struct kt_peer_transport *t, uint64_t id, const char *url, struct kt_err *e) {
  char host[KT_PEER_URL_MAX];
  int port;
  struct peer *p = find_peer(t, id);
  if (!p)
    return kt_err_set(e, KT_ENOTFOUND, "peer %llx: not a peer", (unsigned long long)id);
  if (strlen(url) >= KT_PEER_URL_MAX)
    return kt_err_set(e, KT_EINVAL, "peer url too long");
  if (kt_peer_parse_url(url, host, sizeof host, &port, e))
    return KT_EINVAL;
  kt_log(KT_LOG_INFO, "peer", "peer %llx url %s -> %s", (unsigned long long)id, p->url, url);
  snprintf(p->url, sizeof p->url, "%s", url);
  p->removed = true; /* no redial from conn_close */
  close_peer_conns(p, "peer url updated");
  p->removed = false;
  for (int ch = 0; ch < KT_PEER_N_CHANNELS; ch++) {
    p->backoff_ms[ch] = t->cfg.backoff_min_ms;
    dial(p, ch);
  }
  return 0;
}

int kt_peer_remove(struct kt_peer_transport *t, uint64_t id) {
  struct peer **pp = &t->peers;
  while (*pp && (*pp)->id != id)
    pp = &(*pp)->next;
  struct peer *p = *pp;
  if (!p)
    return KT_ENOTFOUND;
  *pp = p->next;
  p->removed = true;
  close_peer_conns(p, "peer removed");
  for (struct pconn *c = t->accepted; c;) {
    struct pconn *next = c->next;
    if (c->peer == p || (c->state == S_UP && c->from == id)) {
      c->peer = NULL;
      conn_close(c, "peer removed");
    }
    c = next;
  }
  kt_log(KT_LOG_INFO, "peer", "removed peer %llx", (unsigned long long)id);
  p->dead_next = t->dead_peers;
  t->dead_peers = p;
  return 0;
}

static void mark_unreachable(struct peer *p) {
  p->unreachable_pending = true;
  kick(p->t);
}

int kt_peer_check_len(const struct kt_peer_config *cfg, size_t len, bool snapshot) {
  if (len == 0)
    return KT_EINVAL;
  if (len > cfg->max_frame_bytes ||
      (snapshot && KT_PEER_FRAME_HDR + len > cfg->max_snapshot_queue_bytes / 2))
    return KT_ETOOLARGE;
  return 0;
}

int kt_peer_send(struct kt_peer_transport *t, uint64_t to, const void *msg, size_t len) {
  return kt_peer_send2(t, to, msg, len, NULL, 0);
}

int kt_peer_send2(struct kt_peer_transport *t, uint64_t to, const void *a, size_t alen,
                  const void *b, size_t blen) {
  size_t len = alen + blen;
  int rc = kt_peer_check_len(&t->cfg, len, false);
  if (rc)
    return rc;
  struct peer *p = find_peer(t, to);
  if (!p)
    return KT_ENOTFOUND;
  struct pconn *c = p->conn[KT_PEER_CH_RAFT];
  if (!c || c->state != S_UP) {
    p->st.msgs_dropped_unreachable++;
    mark_unreachable(p);
    return KT_EUNAVAILABLE;
  }
  if (unsent(c) + KT_PEER_FRAME_HDR + len > t->cfg.max_queue_bytes) {
    p->st.msgs_dropped_full++;
    mark_unreachable(p);
    return KT_EBUSY;
  }
  conn_queue2(c, KT_PEER_CH_RAFT, a, alen, b, blen);
  p->st.msgs_queued++;
  p->st.bytes_queued += len;
  return 0;
}

int kt_peer_send_snapshot(struct kt_peer_transport *t, uint64_t to, const void *chunk, size_t len) {
  int rc = kt_peer_check_len(&t->cfg, len, true);
  if (rc)
    return rc;
  struct peer *p = find_peer(t, to);
  if (!p)
    return KT_ENOTFOUND;
  struct pconn *c = p->conn[KT_PEER_CH_SNAPSHOT];
  if (!c || c->state != S_UP)
    rc = KT_EUNAVAILABLE;
  else if (unsent(c) + KT_PEER_FRAME_HDR + len > t->cfg.max_snapshot_queue_bytes)
    rc = KT_EBUSY;
  if (rc) {
    p->room_wanted = true;
    p->room_needed = len;
    check_room(p);
    return rc;
  }
  conn_queue(c, KT_PEER_CH_SNAPSHOT, chunk, len);
  p->st.snap_chunks_queued++;
  p->st.snap_bytes_queued += len;
  return 0;
}

size_t kt_peer_snapshot_room(const struct kt_peer_transport *t, uint64_t to) {
  struct peer *p = find_peer(t, to);
  struct pconn *c = p ? p->conn[KT_PEER_CH_SNAPSHOT] : NULL;
  if (!c || c->state != S_UP)
    return 0;
  size_t q = unsent(c) + KT_PEER_FRAME_HDR, cap = t->cfg.max_snapshot_queue_bytes;
  return q >= cap ? 0 : cap - q;
}

long long kt_peer_snapshot_unsent(const struct kt_peer_transport *t, uint64_t to) {
  struct peer *p = find_peer(t, to);
  struct pconn *c = p ? p->conn[KT_PEER_CH_SNAPSHOT] : NULL;
  return c && c->state == S_UP ? (long long)unsent(c) : -1;
}

bool kt_peer_connected(const struct kt_peer_transport *t, uint64_t id) {
  struct peer *p = find_peer(t, id);
  return p && p->conn[KT_PEER_CH_RAFT] && p->conn[KT_PEER_CH_RAFT]->state == S_UP;
}

int kt_peer_status(const struct kt_peer_transport *t, uint64_t id, struct kt_peer_status *st) {
  struct peer *p = find_peer(t, id);
  if (!p)
    return KT_ENOTFOUND;
  *st = p->st;
  st->id = p->id;
  memcpy(st->url, p->url, sizeof st->url);
  memcpy(st->last_error, p->last_error, sizeof st->last_error);
  struct pconn *r = p->conn[KT_PEER_CH_RAFT], *s = p->conn[KT_PEER_CH_SNAPSHOT];
  st->connected = r && r->state == S_UP;
  st->snapshot_connected = s && s->state == S_UP;
  st->connected_since = st->connected ? p->connected_since : 0;
  st->backoff_ms = p->backoff_ms[KT_PEER_CH_RAFT];
  st->queue_bytes = r ? unsent(r) : 0;
  st->queue_alloc_bytes = r ? r->out.cap : 0;
  st->snap_queue_bytes = s ? unsent(s) : 0;
  return 0;
}

size_t kt_peer_ids(const struct kt_peer_transport *t, uint64_t *ids, size_t max) {
  size_t n = 0;
  for (struct peer *p = t->peers; p; p = p->next, n++)
    if (n < max)
      ids[n] = p->id;
  return n;
}

void kt_peer_free(struct kt_peer_transport *t) {
  if (!t)
    return;
  t->freeing = true;
  while (t->peers) {
    struct peer *p = t->peers;
    t->peers = p->next;
    p->removed = true;
    close_peer_conns(p, NULL);
    p->dead_next = t->dead_peers;
    t->dead_peers = p;
  }
  while (t->accepted)
    conn_close(t->accepted, NULL);
  t->dirty = NULL;
  t->pending = NULL;
  t->hs_head = t->hs_tail = NULL;
  free_dead(t);
  if (t->listen_fd >= 0) {
    ev_io_stop(t->loop, &t->listen_w);
    close(t->listen_fd);
  }
  ev_ref(t->loop);
  ev_prepare_stop(t->loop, &t->prepare_w);
  ev_ref(t->loop);
  ev_timer_stop(t->loop, &t->stall_w);
  ev_idle_stop(t->loop, &t->kick_w);
  ev_timer_stop(t->loop, &t->hs_w);
  free(t);
}

/* ---- JOIN, the joiner's side (blocking, start-up only) ---- */

static int64_t join_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until io can make progress toward what it wants (a read or a write),
 * until deadline: 1, 0 on timeout. */
static int join_wait(struct kt_io *io, bool want_read, bool want_write, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - join_now_ms();
    if (left <= 0)
      return 0;
    int ev = kt_io_events(io, want_read, want_write);
    struct pollfd pf = {
        .fd = io->fd,
        .events = (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0))};
    int r = poll(&pf, 1, (int)left);
    if (r > 0)
      return 1;
    if (r < 0 && errno != EINTR)
      return 0;
  }
}

/* Read exactly n bytes by the deadline: 0, or -1 (e filled). */
static int join_read(struct kt_io *io, uint8_t *p, size_t n, int64_t deadline, const char *url,
                     struct kt_err *e) {
  size_t got = 0;
  while (got < n) {
    struct kt_err re = {0};
    ssize_t r = kt_io_read(io, p + got, n - got, &re);
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    if (r == 0)
      return -kt_err_set(e, KT_EUNAVAILABLE, "join %s: connection closed by the remote", url);
    if (r != KT_IO_AGAIN)
      return -kt_err_set(e, KT_EUNAVAILABLE, "join %s: %s", url, re.msg);
    if (!kt_io_pending(io) && !join_wait(io, true, false, deadline))
      return -kt_err_set(e, KT_EUNAVAILABLE, "join %s: no answer in time", url);
  }
  return 0;
}

static int join_exchange(struct kt_io *io, const char *url, const char *my_urls, int64_t deadline,
                         uint64_t *cluster_id, uint64_t *member_id, uint64_t *acceptor_id,
                         struct kt_buf *reply, struct kt_err *e) {
  struct kt_err ie = {0};
  for (;;) { /* TLS handshake (plain TCP: done at once) */
    int h = kt_io_handshake(io, &ie);
    if (h == 1)
      break;
    if (h != KT_IO_AGAIN)
      return kt_err_set(e, KT_EUNAVAILABLE, "join %s: TLS handshake: %s", url, ie.msg);
    if (!join_wait(io, true, true, deadline))
      return kt_err_set(e, KT_EUNAVAILABLE, "join %s: TLS handshake not done in time", url);
  }
  size_t ul = strlen(my_urls);
  uint8_t *out = malloc(KT_PEER_HELLO_BYTES + KT_PEER_FRAME_HDR + ul);
  kt_assert(out);
  struct kt_peer_hs h = {
      .kind = KT_PEER_HELLO, .version = KT_PEER_VERSION, .code = KT_PEER_CH_JOIN};
  kt_peer_hs_encode(out, &h);
  kt_peer_frame_header(out + KT_PEER_HELLO_BYTES, KT_PEER_CH_JOIN, (uint32_t)ul);
  memcpy(out + KT_PEER_HELLO_BYTES + KT_PEER_FRAME_HDR, my_urls, ul);
  size_t total = KT_PEER_HELLO_BYTES + KT_PEER_FRAME_HDR + ul, sent = 0;
  while (sent < total) {
    ssize_t w = kt_io_write(io, out + sent, total - sent, &ie);
    if (w > 0) {
      sent += (size_t)w;
      continue;
    }
    if (w != KT_IO_AGAIN || !join_wait(io, false, true, deadline))
      break;
  }
  free(out);
  if (sent < total)
    return kt_err_set(e, KT_EUNAVAILABLE, "join %s: could not send the request%s%s", url,
                      ie.msg[0] ? ": " : "", ie.msg);
  uint8_t ackb[KT_PEER_HELLO_BYTES];
  struct kt_peer_hs ack;
  if (join_read(io, ackb, sizeof ackb, deadline, url, e) ||
      kt_peer_hs_decode(ackb, sizeof ackb, KT_PEER_ACK, &ack, e) != 1)
    return e->code ? e->code : kt_err_set(e, KT_EPROTO, "join %s: bad answer", url);
  if (ack.code != KT_PEER_OK)
    return kt_err_set(
        e, ack.code == KT_PEER_NOT_ADDED || ack.code == KT_PEER_REMOVED ? KT_ENOTFOUND : KT_EPROTO,
        "join %s: %s", url, kt_peer_status_name(ack.code));
  uint8_t fh[KT_PEER_FRAME_HDR];
  if (join_read(io, fh, sizeof fh, deadline, url, e))
    return e->code;
  uint32_t len = kt_get_u32be(fh);
  if (fh[4] != KT_PEER_CH_JOIN || len > KT_PEER_MAX_FRAME_BYTES || ack.cluster_id == 0 ||
      ack.b == 0)
    return kt_err_set(e, KT_EPROTO, "join %s: bad answer frame", url);
  kt_buf_reset(reply);
  kt_buf_reserve(reply, len ? len : 1);
  if (join_read(io, reply->p, len, deadline, url, e))
    return e->code;
  reply->len = len;
  *cluster_id = ack.cluster_id;
  *member_id = ack.b;
  *acceptor_id = ack.a;
  return 0;
}

int kt_peer_join(const char *url, struct kt_tls_ctx *tls, const char *my_urls, uint32_t timeout_ms,
                 uint64_t *cluster_id, uint64_t *member_id, uint64_t *acceptor_id,
                 struct kt_buf *reply, struct kt_err *e) {
  char host[KT_PEER_URL_MAX];
  int port;
  if (kt_peer_parse_url(url, host, sizeof host, &port, e))
    return KT_EINVAL;
  bool https = !strncmp(url, "https://", 8);
  if (https && !tls)
    return kt_err_set(e, KT_EINVAL,
                      "join %s: the peer URL is https:// but this member has no peer TLS "
                      "(--peer-cert-file and --peer-key-file, or --peer-auto-tls)",
                      url);
  int64_t deadline = join_now_ms() + timeout_ms;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc)
    return kt_err_set(e, KT_EUNAVAILABLE, "join %s: resolve %s: %s", url, host, gai_strerror(rc));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return kt_err_set(e, KT_EUNAVAILABLE, "join %s: socket: %s", url, strerror(errno));
  }
  int cr = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  int err = cr < 0 ? errno : 0;
  struct kt_io io;
  kt_io_init_plain(&io, fd);
  if (err == EINPROGRESS) {
    err = ETIMEDOUT;
    if (join_wait(&io, false, true, deadline)) {
      socklen_t sl = sizeof err;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
        err = errno;
    }
  }
  if (err) {
    close(fd);
    return kt_err_set(e, KT_EUNAVAILABLE, "join %s: connect: %s", url, strerror(err));
  }
  if (https && kt_io_init_tls(&io, fd, tls, host, e)) {
    close(fd);
    return e->code;
  }
  rc = join_exchange(&io, url, my_urls, deadline, cluster_id, member_id, acceptor_id, reply, e);
  kt_io_close(&io);
  return rc;
}
