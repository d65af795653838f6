/* net/http.h — the member's HTTP endpoints: /metrics, /health, /livez,
 * /readyz, served on --listen-metrics-urls from the member's libev loop.
 *
 * Served on --listen-metrics-urls (this module's listeners; https:// ones
 * with the client URLs' TLS settings, kt_http_listen_tls) and on the
 * client URLs: net/server.c hands over a connection whose first byte (the
 * first decrypted one on an https:// URL) is an ASCII capital
 * (kt_http_adopt). ketch-grpc serves them on
 * --metrics-addr (its /health: a linearizable get through the cluster).
 *
 * HTTP is libmicrohttpd's (Debian's libmicrohttpd-dev): no hand-written
 * parser. It runs in "external polling" mode with epoll and no listen socket
 * of its own: this module accepts (an ev_io on each listener), hands each
 * socket to MHD with MHD_add_connection, watches MHD's epoll fd with one
 * ev_io and wakes it by an ev_timer from MHD_get_timeout. Every MHD call and
 * every handler therefore runs on the state thread, which owns the counters
 * the handlers read: no locks, no atomics, no snapshot to publish. A
 * scrape formats the metrics (a few KB) on the loop; nothing is formatted
 * between scrapes.
 *
 * Bounds (a slow or hostile client can neither stall the loop nor grow memory):
 *   - at most KT_HTTP_MAX_CONNS connections: more are closed at accept;
 *   - KT_HTTP_MEMORY_BYTES of memory per connection (MHD's pool): a request
 *     line or headers that do not fit (a 1 MB header) get MHD's 431/414
 *     answer and the connection closes;
 *   - KT_HTTP_DEADLINE_S: a connection must complete a request within that
 *     long of opening or of its previous request (a slow-loris that trickles
 *     bytes is shut down: MHD's own timeout only measures idleness); an idle
 *     keep-alive connection closes after the same time (MHD's timeout);
 *   - only GET and HEAD; request bodies are not read;
 *   - MHD never blocks: sockets are non-blocking and handlers answer at once.
 *
 * Endpoints (etcd 3.5's shapes):
 *   /metrics   Prometheus text 0.0.4 (core/node_metrics.c) plus process_*
 *              and ketch_state_thread_busy_seconds_total (time the loop
 *              spent between waking and going back to poll).
 *   /health    {"health":"true","reason":""}; "false" and 503 when there is
 *              no leader ("RAFT NO LEADER"), an alarm ("ALARM NOSPACE",
 *              "ALARM CORRUPT"; ?exclude=NOSPACE ignores that one), or,
 *              unless ?serializable=true, the member does not serve
 *              linearizable read fails or takes over 1 s ("QGET ERROR:
 *              why"), as etcd: a read index through raft, applied here.
 *   /livez     serializable_read: the loop answers.
 *   /readyz    data_corruption, serializable_read, linearizable_read (a
 *              read through raft, as /health) and not_learner (a learner
 *              is not ready).
 *              ?verbose lists "[+]name ok" lines; ?exclude=name skips a
 *              check (repeatable); a failure lists every check and answers 503.
 */
#ifndef KT_HTTP_H
#define KT_HTTP_H

#include <ev.h>

#include "../core/base.h"

#define KT_HTTP_MAX_CONNS 64
#define KT_HTTP_MEMORY_BYTES (32u * 1024u)
#define KT_HTTP_DEADLINE_S 5

struct kt_node_health;
struct kt_http;

/* What the endpoints show, called on the loop's thread: metrics appends the
 * process' own metrics text (process_* and ketch_state_thread_* are added
 * here); health fills the state /health, /livez and /readyz judge (NULL: the
 * process serves /metrics only and those paths answer 404). */
struct kt_http_source {
  void (*metrics)(void *arg, struct kt_buf *out);
  void (*health)(void *arg, struct kt_node_health *h);
  /* A linearizable read (kt_node_probe_linearizable's contract): /health
   * (unless ?serializable=true) and /readyz's linearizable_read wait for it,
   * their connection suspended meanwhile. NULL: health's `serving` decides. */
  void (*probe)(void *arg, void (*done)(void *ctx, int code, const char *why), void *ctx);
  void *arg;
};

/* A new server on loop answering from *src (copied; arg outlives the
 * server). Listeners are added with kt_http_listen. */
struct kt_http *kt_http_new(struct ev_loop *loop, const struct kt_http_source *src,
                            struct kt_err *e);
/* Listen on host:port (port 0: any; kt_http_port says which). Errors: EINVAL
 * (does not resolve), EIO (bind/listen, the message names the address). */
int kt_http_listen(struct kt_http *h, const char *host, int port, struct kt_err *e);
/* The same for an https:// URL: TLS with tls (a server context the caller
 * keeps, and reloads, until kt_http_free: the member's client context, as
 * etcd serves https metrics URLs with its client TLS info), done by
 * net/tls.c and relayed to MHD in plaintext over a socketpair. */
struct kt_tls_ctx;
int kt_http_listen_tls(struct kt_http *h, const char *host, int port, struct kt_tls_ctx *tls,
                       struct kt_err *e);
int kt_http_port(const struct kt_http *h, size_t i); /* the i-th listener's port, or -1 */
/* Serve one connection accepted elsewhere (an HTTP request on a client URL,
 * net/server.h): h owns io from now on (moved out of *io; closed at once
 * over the limit). A TLS connection (its handshake done) is relayed to MHD
 * as an https:// metrics URL's, pre[0..n) (what was read and decrypted of
 * it) first; a plain one is MHD's own (n must be 0). */
struct kt_io;
void kt_http_adopt(struct kt_http *h, struct kt_io *io, const uint8_t *pre, size_t n);
/* Stop accepting (shutdown starts); open connections finish or time out. */
void kt_http_stop_accepting(struct kt_http *h);
/* Closes everything; not from inside a handler. NULL is a no-op. */
void kt_http_free(struct kt_http *h);

#endif
