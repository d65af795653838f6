/* net/sdnotify.c — sd_notify's datagram protocol (see sdnotify.h). */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int kt_sd_notify(const char *msg) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !*path)
    return 0;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t len = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || len >= sizeof sa.sun_path) {
    errno = EINVAL;
    return -1;
  }
  memcpy(sa.sun_path, path, len);
  if (path[0] == '@')
    sa.sun_path[0] = 0; /* abstract namespace */
  socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  ssize_t w = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, sl);
  int saved = errno;
  close(fd);
  errno = saved;
  return w < 0 ? -1 : 1;
}

uint64_t kt_sd_watchdog_usec(void) {
  const char *us = getenv("WATCHDOG_USEC");
  if (!us || !*us)
    return 0;
  const char *pid = getenv("WATCHDOG_PID");
  if (pid && *pid && strtoll(pid, NULL, 10) != (long long)getpid())
    return 0;
  char *end;
  unsigned long long v = strtoull(us, &end, 10);
  return *end ? 0 : (uint64_t)v;
}
