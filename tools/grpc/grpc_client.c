/* tools/grpc/grpc_client.c — see grpc_client.h. */
#include "grpc_client.h"

#include "../../net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct slot {
  kt_grpc_client *c;
  kt_grpc_cb cb;
  kt_grpc_msg_cb on_msg; /* streaming calls: each response message */
  void *arg;
  int32_t stream_id;
  bool in_use, completed;
  bool stream, half_closed, deferred; /* streaming: send side state */
  uint8_t *req;                       /* prefix + message */
  size_t req_len, req_off, req_cap;
  uint8_t *resp;
  size_t resp_len, resp_cap;
  int status; /* grpc-status, -1 until seen */
  int http_status;
  char message[256];
  uint64_t deadline_ms; /* 0 = none */
  int next_free;
};

struct kt_grpc_client {
  int fd;
  struct kt_io io; /* plain TCP (h2c) or TLS with ALPN h2 */
  bool dead;
  nghttp2_session *s;
  char authority[128];
  char token[512]; /* kt_grpc_set_token: sent as `token` metadata; "" none */
  struct slot *slots;
  int n_slots, free_head;
  size_t pending;
  uint8_t *out;
  size_t out_len, out_off, out_cap;
  uint64_t next_deadline_ms;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool grow(uint8_t **p, size_t *cap, size_t need) {
  if (need <= *cap)
    return true;
  size_t n = *cap ? *cap : 256;
  while (n < need)
    n *= 2;
  uint8_t *q = realloc(*p, n);
  if (!q)
    return false;
  *p = q;
  *cap = n;
  return true;
}

static void slot_release(kt_grpc_client *c, struct slot *sl) {
  sl->in_use = false;
  sl->next_free = c->free_head;
  c->free_head = (int)(sl - c->slots);
}

/* Runs the callback once; the slot stays in use until its stream closes. */
static void slot_complete(struct slot *sl, int status, const char *message, const uint8_t *msg,
                          size_t len) {
  if (sl->completed)
    return;
  sl->completed = true;
  sl->c->pending--;
  sl->cb(sl->arg, status, message ? message : "", msg, len);
}

/* ---- nghttp2 callbacks ---- */

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user) {
  (void)s, (void)id, (void)user;
  struct slot *sl = src->ptr;
  size_t n = sl->req_len - sl->req_off;
  if (!n && sl->stream && !sl->half_closed) { /* nothing to send yet: resumed by a send */
    sl->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n > len)
    n = len;
  memcpy(buf, sl->req + sl->req_off, n);
  sl->req_off += n;
  if (sl->req_off == sl->req_len) {
    if (!sl->stream || sl->half_closed)
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (sl->stream)
      sl->req_off = sl->req_len = 0; /* the queue is empty: reuse from the start */
  }
  return (ssize_t)n;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
  (void)flags, (void)user;
  struct slot *sl = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!sl)
    return 0;
  if (namelen == 11 && !memcmp(name, "grpc-status", 11)) {
    int v = 0;
    for (size_t i = 0; i < valuelen && i < 4; i++)
      v = v * 10 + (value[i] >= '0' && value[i] <= '9' ? value[i] - '0' : 0);
    sl->status = v;
  } else if (namelen == 12 && !memcmp(name, "grpc-message", 12)) {
    size_t n = valuelen < sizeof sl->message - 1 ? valuelen : sizeof sl->message - 1;
    /* percent-decoding (gRPC escapes non-printable bytes) */
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      if (value[i] == '%' && i + 2 < valuelen) {
        char hex[3] = {(char)value[i + 1], (char)value[i + 2], 0};
        sl->message[o++] = (char)strtol(hex, NULL, 16);
        i += 2;
      } else {
        sl->message[o++] = (char)value[i];
      }
    }
    sl->message[o] = 0;
  } else if (namelen == 7 && !memcmp(name, ":status", 7)) {
    int v = 0;
    for (size_t i = 0; i < valuelen && i < 3; i++)
      v = v * 10 + (value[i] - '0');
    sl->http_status = v;
  }
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user) {
  (void)flags, (void)user;
  struct slot *sl = nghttp2_session_get_stream_user_data(s, id);
  if (!sl || sl->completed)
    return 0;
  if (sl->resp_len + len > KT_GRPC_MAX_MSG + 5 ||
      !grow(&sl->resp, &sl->resp_cap, sl->resp_len + len)) {
    slot_complete(sl, KT_GRPC_RESOURCE_EXHAUSTED, "response too large", NULL, 0);
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    return 0;
  }
  memcpy(sl->resp + sl->resp_len, data, len);
  sl->resp_len += len;
  if (!sl->stream)
    return 0;
  /* streaming: hand over every complete message, keep the partial tail */
  size_t off = 0;
  for (;;) {
    const uint8_t *msg;
    size_t n;
    long used = kt_grpc_frame_parse(sl->resp + off, sl->resp_len - off, KT_GRPC_MAX_MSG, &msg, &n);
    if (used < 0) {
      slot_complete(sl, KT_GRPC_INTERNAL, "malformed gRPC message prefix", NULL, 0);
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      return 0;
    }
    if (!used)
      break;
    off += (size_t)used;
    sl->on_msg(sl->arg, msg, n);
    if (sl->completed) /* the callback canceled the stream */
      return 0;
  }
  if (off) {
    memmove(sl->resp, sl->resp + off, sl->resp_len - off);
    sl->resp_len -= off;
  }
  return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *user) {
  kt_grpc_client *c = user;
  struct slot *sl = nghttp2_session_get_stream_user_data(s, id);
  if (!sl)
    return 0;
  if (!sl->completed) {
    if (sl->status < 0) {
      char m[96];
      if (sl->http_status && sl->http_status != 200) {
        snprintf(m, sizeof m, "HTTP status %d", sl->http_status);
        slot_complete(sl, sl->http_status == 503 ? KT_GRPC_UNAVAILABLE : KT_GRPC_UNKNOWN, m, NULL,
                      0);
      } else {
        snprintf(m, sizeof m, "stream closed without grpc-status (h2 error %u)", error_code);
        slot_complete(sl,
                      error_code == NGHTTP2_REFUSED_STREAM ? KT_GRPC_UNAVAILABLE : KT_GRPC_INTERNAL,
                      m, NULL, 0);
      }
    } else if (sl->status != 0) {
      slot_complete(sl, sl->status, sl->message, NULL, 0);
    } else if (sl->stream) {
      slot_complete(sl, sl->resp_len ? KT_GRPC_INTERNAL : KT_GRPC_OK,
                    sl->resp_len ? "stream ended inside a message" : "", NULL, 0);
    } else {
      const uint8_t *msg = NULL;
      size_t n = 0;
      long used = kt_grpc_frame_parse(sl->resp, sl->resp_len, KT_GRPC_MAX_MSG, &msg, &n);
      if (used <= 0 || (size_t)used != sl->resp_len)
        slot_complete(sl, KT_GRPC_INTERNAL, "malformed gRPC response body", NULL, 0);
      else
        slot_complete(sl, KT_GRPC_OK, "", msg, n);
    }
  }
  slot_release(c, sl);
  return 0;
}

/* ---- connection ---- */

int kt_grpc_open(kt_grpc_client **out, const char *host_port, int max_outstanding, int timeout_ms,
                 char *err, size_t err_len) {
  return kt_grpc_open_tls(out, host_port, NULL, max_outstanding, timeout_ms, err, err_len);
}

/* The TLS handshake, blocking up to timeout_ms (a connection is opened
 * before the measured run). */
static int handshake(struct kt_io *io, const char *host_port, int timeout_ms, char *err,
                     size_t err_len) {
  struct kt_err e = {0};
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int r = kt_io_handshake(io, &e);
    if (r == 1)
      break;
    if (r != KT_IO_AGAIN) {
      snprintf(err, err_len, "%s: TLS: %s", host_port, e.msg);
      return -1;
    }
    uint64_t now = now_ms();
    int ev = kt_io_events(io, true, true);
    struct pollfd p = {
        io->fd, (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0)), 0};
    if (now >= end || poll(&p, 1, (int)(end - now)) == 0) {
      snprintf(err, err_len, "%s: TLS handshake timed out", host_port);
      return -1;
    }
  }
  char alpn[16];
  if (kt_io_alpn(io, alpn, sizeof alpn) && strcmp(alpn, "h2") != 0) {
    snprintf(err, err_len, "%s: the server chose ALPN %s, not h2", host_port, alpn);
    return -1;
  }
  return 0;
}

int kt_grpc_open_tls(kt_grpc_client **out, const char *host_port, struct kt_tls_ctx *tls,
                     int max_outstanding, int timeout_ms, char *err, size_t err_len) {
  *out = NULL;
  char host[128];
  const char *colon = strrchr(host_port, ':');
  if (!colon || (size_t)(colon - host_port) >= sizeof host) {
    snprintf(err, err_len, "%s: expected host:port", host_port);
    return -1;
  }
  memcpy(host, host_port, (size_t)(colon - host_port));
  host[colon - host_port] = 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &ai);
  if (rc) {
    snprintf(err, err_len, "%s: %s", host_port, gai_strerror(rc));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    snprintf(err, err_len, "socket: %s", strerror(errno));
    return -1;
  }
  rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc && errno == EINPROGRESS) {
    struct pollfd p = {fd, POLLOUT, 0};
    int e = 0;
    socklen_t el = sizeof e;
    if (poll(&p, 1, timeout_ms) != 1) {
      e = ETIMEDOUT;
    } else {
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
    }
    errno = e;
    rc = e ? -1 : 0;
  }
  if (rc) {
    snprintf(err, err_len, "%s: connect: %s", host_port, strerror(errno));
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct kt_io io;
  kt_io_init_plain(&io, fd);
  if (tls) {
    struct kt_err e = {0};
    if (kt_io_init_tls(&io, fd, tls, host, &e)) {
      snprintf(err, err_len, "%s: TLS: %s", host_port, e.msg);
      close(fd);
      return -1;
    }
    if (handshake(&io, host_port, timeout_ms, err, err_len)) {
      kt_io_close(&io);
      return -1;
    }
  }

  kt_grpc_client *c = calloc(1, sizeof *c);
  if (!c || max_outstanding < 1)
    goto oom;
  c->fd = fd;
  c->io = io;
  snprintf(c->authority, sizeof c->authority, "%s", host_port);
  c->n_slots = max_outstanding;
  c->slots = calloc((size_t)max_outstanding, sizeof *c->slots);
  if (!c->slots)
    goto oom;
  for (int i = 0; i < max_outstanding; i++) {
    c->slots[i].c = c;
    c->slots[i].next_free = i + 1 < max_outstanding ? i + 1 : -1;
  }
  c->free_head = 0;
  nghttp2_session_callbacks *cbs;
  if (nghttp2_session_callbacks_new(&cbs))
    goto oom;
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
  rc = nghttp2_session_client_new(&c->s, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  if (rc)
    goto oom;
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
  nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 2);
  nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, 1 << 28);
  *out = c;
  kt_grpc_process(c); /* sends the preface */
  return 0;
oom:
  snprintf(err, err_len, "out of memory");
  if (c) {
    free(c->slots);
    free(c);
  }
  kt_io_close(&io);
  return -1;
}

static void fail_all(kt_grpc_client *c, int status, const char *why) {
  for (int i = 0; i < c->n_slots; i++)
    if (c->slots[i].in_use && !c->slots[i].completed)
      slot_complete(&c->slots[i], status, why, NULL, 0);
}

static void conn_lost(kt_grpc_client *c, const char *why) {
  if (c->dead)
    return;
  c->dead = true;
  fail_all(c, KT_GRPC_UNAVAILABLE, why);
}

void kt_grpc_close(kt_grpc_client *c) {
  if (!c)
    return;
  fail_all(c, KT_GRPC_CANCELLED, "client closed");
  nghttp2_session_del(c->s);
  for (int i = 0; i < c->n_slots; i++) {
    free(c->slots[i].req);
    free(c->slots[i].resp);
  }
  free(c->slots);
  free(c->out);
  kt_io_close(&c->io);
  free(c);
}

/* Appends one framed message to a slot's send queue. */
static bool queue_msg(struct slot *sl, const uint8_t *msg, size_t len) {
  if (!grow(&sl->req, &sl->req_cap, sl->req_len + len + 5))
    return false;
  uint8_t *p = sl->req + sl->req_len;
  p[0] = 0;
  p[1] = (uint8_t)(len >> 24);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 8);
  p[4] = (uint8_t)len;
  if (len)
    memcpy(p + 5, msg, len);
  sl->req_len += len + 5;
  return true;
}

/* Starts a call on a free slot: unary (msg is the request, then EOF) or
 * streaming (msg may be NULL; more with kt_grpc_stream_send). Returns the
 * slot index, or -(KT_GRPC_* code). */
static int start(kt_grpc_client *c, const char *path, const uint8_t *msg, size_t len,
                 int timeout_ms, kt_grpc_cb cb, kt_grpc_msg_cb on_msg, void *arg) {
  if (c->dead)
    return -KT_GRPC_UNAVAILABLE;
  if (c->free_head < 0)
    return -KT_GRPC_RESOURCE_EXHAUSTED;
  struct slot *sl = &c->slots[c->free_head];
  sl->req_len = sl->req_off = 0;
  sl->stream = on_msg != NULL;
  sl->on_msg = on_msg;
  sl->half_closed = sl->deferred = false;
  if ((msg || !sl->stream) && !queue_msg(sl, msg, len))
    return -KT_GRPC_RESOURCE_EXHAUSTED;
  sl->resp_len = 0;
  sl->status = -1;
  sl->http_status = 0;
  sl->message[0] = 0;
  sl->cb = cb;
  sl->arg = arg;
  sl->completed = false;
  char tmo[24];
  int nh = 7;
#define NV(n, v)                                                                                   \
  {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}
  nghttp2_nv hdrs[] = {NV(":method", "POST"),
                       NV(":scheme", kt_io_is_tls(&c->io) ? "https" : "http"),
                       NV(":path", path),
                       NV(":authority", c->authority),
                       NV("content-type", "application/grpc"),
                       NV("te", "trailers"),
                       NV("user-agent", "ketch-bench"),
                       NV("grpc-timeout", tmo),
                       NV("token", c->token)};
#undef NV
  const nghttp2_nv tmo_nv = hdrs[7], token_nv = hdrs[8];
  if (c->token[0])
    hdrs[nh++] = token_nv;
  if (timeout_ms > 0) {
    snprintf(tmo, sizeof tmo, "%dm", timeout_ms);
    hdrs[nh] = tmo_nv;
    hdrs[nh++].valuelen = strlen(tmo);
    sl->deadline_ms = now_ms() + (uint64_t)timeout_ms;
    if (!c->next_deadline_ms || sl->deadline_ms < c->next_deadline_ms)
      c->next_deadline_ms = sl->deadline_ms;
  } else {
    sl->deadline_ms = 0;
  }
  nghttp2_data_provider dp = {.source.ptr = sl, .read_callback = read_body};
  int32_t id = nghttp2_submit_request(c->s, NULL, hdrs, (size_t)nh, &dp, sl);
  if (id < 0)
    return -KT_GRPC_INTERNAL;
  sl->stream_id = id;
  sl->in_use = true;
  c->free_head = sl->next_free;
  c->pending++;
  return (int)(sl - c->slots);
}

int kt_grpc_set_token(kt_grpc_client *c, const char *token) {
  if (strlen(token) >= sizeof c->token)
    return -1;
  snprintf(c->token, sizeof c->token, "%s", token);
  return 0;
}

int kt_grpc_call(kt_grpc_client *c, const char *path, const uint8_t *msg, size_t len,
                 int timeout_ms, kt_grpc_cb cb, void *arg) {
  int rc = start(c, path, msg, len, timeout_ms, cb, NULL, arg);
  return rc < 0 ? -rc : 0;
}

int kt_grpc_stream_open(kt_grpc_client *c, const char *path, kt_grpc_msg_cb on_msg,
                        kt_grpc_cb on_end, void *arg, int *out) {
  *out = -1;
  int rc = start(c, path, NULL, 0, 0, on_end, on_msg, arg);
  if (rc < 0)
    return -rc;
  *out = rc;
  return 0;
}

static struct slot *live_stream(kt_grpc_client *c, int stream) {
  if (stream < 0 || stream >= c->n_slots)
    return NULL;
  struct slot *sl = &c->slots[stream];
  return sl->in_use && sl->stream && !sl->completed ? sl : NULL;
}

static int resume(kt_grpc_client *c, struct slot *sl) {
  if (!sl->deferred)
    return 0;
  sl->deferred = false;
  return nghttp2_session_resume_data(c->s, sl->stream_id) ? KT_GRPC_INTERNAL : 0;
}

int kt_grpc_stream_send(kt_grpc_client *c, int stream, const uint8_t *msg, size_t len) {
  if (c->dead)
    return KT_GRPC_UNAVAILABLE;
  struct slot *sl = live_stream(c, stream);
  if (!sl || sl->half_closed)
    return KT_GRPC_FAILED_PRECONDITION;
  if (!queue_msg(sl, msg, len))
    return KT_GRPC_RESOURCE_EXHAUSTED;
  return resume(c, sl);
}

int kt_grpc_stream_close_send(kt_grpc_client *c, int stream) {
  struct slot *sl = c->dead ? NULL : live_stream(c, stream);
  if (!sl)
    return KT_GRPC_FAILED_PRECONDITION;
  sl->half_closed = true;
  return resume(c, sl);
}

int kt_grpc_fd(const kt_grpc_client *c) { return c->dead ? -1 : c->fd; }

short kt_grpc_events(const kt_grpc_client *c) {
  if (c->dead)
    return 0;
  int ev = kt_io_events(&c->io, true, c->out_off < c->out_len || nghttp2_session_want_write(c->s));
  return (short)((ev & KT_IO_READ ? POLLIN : 0) | (ev & KT_IO_WRITE ? POLLOUT : 0));
}

int kt_grpc_timeout_ms(const kt_grpc_client *c) {
  if (c->dead)
    return -1;
  if (nghttp2_session_want_write(c->s) || kt_io_pending(&c->io))
    return 0;
  if (!c->next_deadline_ms || !c->pending)
    return -1;
  uint64_t now = now_ms();
  return c->next_deadline_ms <= now ? 0 : (int)(c->next_deadline_ms - now);
}

size_t kt_grpc_pending(const kt_grpc_client *c) { return c->pending; }

static void expire(kt_grpc_client *c) {
  uint64_t now = now_ms(), next = 0;
  if (!c->next_deadline_ms || now < c->next_deadline_ms)
    return;
  for (int i = 0; i < c->n_slots; i++) {
    struct slot *sl = &c->slots[i];
    if (!sl->in_use || sl->completed || !sl->deadline_ms)
      continue;
    if (sl->deadline_ms <= now) {
      nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, sl->stream_id, NGHTTP2_CANCEL);
      slot_complete(sl, KT_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", NULL, 0);
    } else if (!next || sl->deadline_ms < next) {
      next = sl->deadline_ms;
    }
  }
  c->next_deadline_ms = next;
}

static int flush(kt_grpc_client *c) {
  for (;;) {
    if (c->out_off == c->out_len) {
      c->out_off = c->out_len = 0;
      const uint8_t *p;
      ssize_t n;
      while ((n = nghttp2_session_mem_send(c->s, &p)) > 0) {
        if (!grow(&c->out, &c->out_cap, c->out_len + (size_t)n))
          return -1;
        memcpy(c->out + c->out_len, p, (size_t)n);
        c->out_len += (size_t)n;
        if (c->out_len >= 256 * 1024)
          break;
      }
      if (n < 0)
        return -1;
      if (!c->out_len)
        return 0;
    }
    struct kt_err e = {0};
    ssize_t w = kt_io_write(&c->io, c->out + c->out_off, c->out_len - c->out_off, &e);
    if (w == KT_IO_AGAIN)
      return 0;
    if (w < 0)
      return -1;
    c->out_off += (size_t)w;
  }
}

int kt_grpc_process(kt_grpc_client *c) {
  if (c->dead)
    return KT_GRPC_UNAVAILABLE;
  uint8_t buf[65536];
  bool tls = kt_io_is_tls(&c->io);
  for (int round = 0; round < (tls ? 64 : 16); round++) {
    struct kt_err e = {0};
    ssize_t n = kt_io_read(&c->io, buf, sizeof buf, &e);
    if (n == 0) {
      conn_lost(c, "connection closed by server");
      return KT_GRPC_UNAVAILABLE;
    }
    if (n == KT_IO_AGAIN)
      break;
    if (n < 0) {
      conn_lost(c, e.msg);
      return KT_GRPC_UNAVAILABLE;
    }
    ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
    if (r < 0) {
      conn_lost(c, nghttp2_strerror((int)r));
      return KT_GRPC_UNAVAILABLE;
    }
    if (tls ? !kt_io_pending(&c->io) : (size_t)n < sizeof buf)
      break; /* drained (TLS: one record per read; what it read ahead is pending) */
  }
  expire(c);
  if (flush(c)) {
    conn_lost(c, "write failed");
    return KT_GRPC_UNAVAILABLE;
  }
  if (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s) && !c->pending) {
    conn_lost(c, "HTTP/2 session ended (GOAWAY)");
    return KT_GRPC_UNAVAILABLE;
  }
  return 0;
}
