/* net/sock.c — see sock.h. */
#include "sock.h"
#include "tls.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int kt_sock_listen(const char *host, int port, int backlog, struct kt_err *e) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc) {
    kt_err_set(e, KT_EINVAL, "listen %s:%d: %s", host, port, gai_strerror(rc));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
    int er = errno;
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    kt_err_set(e, KT_EIO, "listen %s:%d: %s", host, port, strerror(er));
    return -1;
  }
  freeaddrinfo(ai);
  return fd;
}

int kt_sock_accept(int lfd, char *peer, size_t peer_len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : -2;
  char host[48] = "?", port[8] = "?";
  getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(peer, peer_len, "%s:%s", host, port);
  return fd;
}

int kt_sock_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
    return -1;
  return ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                  : ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void kt_sock_arm(struct ev_loop *loop, ev_io *rio, ev_io *wio, int ev) {
  if ((ev & KT_IO_READ) && !ev_is_active(rio))
    ev_io_start(loop, rio);
  else if (!(ev & KT_IO_READ) && ev_is_active(rio))
    ev_io_stop(loop, rio);
  if ((ev & KT_IO_WRITE) && !ev_is_active(wio))
    ev_io_start(loop, wio);
  else if (!(ev & KT_IO_WRITE) && ev_is_active(wio))
    ev_io_stop(loop, wio);
}

void kt_warn_conn(struct kt_warn_log *log, ev_tstamp now, const char *peer, const char *why) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the reason */
  for (const char *p = why; *p; p++)
    h = (h ^ (uint8_t)*p) * 1099511628211ull;
  struct kt_warn_seen *w = &log->seen[h % KT_ARRAY_LEN(log->seen)];
  if (w->hash == h && now - w->at < KT_WARN_REPEAT_S) {
    w->repeats++;
    kt_log(KT_LOG_DEBUG, "server", "closing connection peer=%s: %s", peer, why);
    return;
  }
  if (w->hash == h && w->repeats)
    kt_log(KT_LOG_WARN, "server", "closing connection peer=%s: %s (and %u times more since)", peer,
           why, w->repeats);
  else
    kt_log(KT_LOG_WARN, "server", "closing connection peer=%s: %s", peer, why);
  w->hash = h;
  w->at = now;
  w->repeats = 0;
}
