/* net/sock.h — the socket chores the client server, the peer transport and
 * ketch-grpc share: a listening socket, accepting one connection with its
 * address, and arming a connection's watchers. */
#ifndef KT_SOCK_H
#define KT_SOCK_H

#include <stddef.h>

#include <ev.h>

#include "../core/base.h"

/* A non-blocking, close-on-exec TCP socket listening on host:port (numeric
 * or a name; SO_REUSEADDR). Returns the fd, or -1 with e filled: EINVAL for
 * an address that does not resolve, EIO otherwise; messages start with
 * "listen host:port". */
int kt_sock_listen(const char *host, int port, int backlog, struct kt_err *e);

/* Accept one pending connection on listening fd lfd: returns the new
 * non-blocking, close-on-exec fd and writes "host:port" of the other end to
 * peer; -1 when none is waiting; -2 on another error (errno set). */
int kt_sock_accept(int lfd, char *peer, size_t peer_len);

/* The port a socket is bound to, or -1. */
int kt_sock_port(int fd);

/* Starts or stops a connection's read and write watchers so that exactly
 * the events in ev (KT_IO_READ | KT_IO_WRITE of net/tls.h, e.g. from
 * kt_io_events) are watched. */
void kt_sock_arm(struct ev_loop *loop, ev_io *rio, ev_io *wio, int ev);

/* Connection warnings (bad TLS, wrong protocol) name the peer and the
 * reason. Each distinct reason is logged at warn once per
 * KT_WARN_REPEAT_S; repeats (a client retrying, a storm of broken clients) go
 * to debug and are counted in the next warn of that reason, so the log cannot
 * be flooded. One kt_warn_log per thread that logs (not shared). */
#define KT_WARN_REPEAT_S 10.0
struct kt_warn_seen {
  uint64_t hash; /* of a reason logged at warn */
  ev_tstamp at;
  unsigned repeats;
};
struct kt_warn_log {
  struct kt_warn_seen seen[32];
};
void kt_warn_conn(struct kt_warn_log *w, ev_tstamp now, const char *peer, const char *why);

#endif
