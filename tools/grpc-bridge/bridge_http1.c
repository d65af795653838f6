/* tools/grpc-bridge/bridge_http1.c — HTTP/1.x on the gRPC port.
 *
 * etcd's client port serves HTTP/1.1 beside gRPC, and tools ask it
 * `GET /version` ({"etcdserver":"3.4.23","etcdcluster":"3.4.0"}) to learn
 * the server's version. ketch-grpc answers that too: the first bytes a
 * connection sends are looked at (bridge_main.c conn_read) before nghttp2
 * sees them; an HTTP/1 request line gets one answer and the connection is
 * closed (Connection: close), anything else goes to nghttp2 (whose preface
 * is "PRI * HTTP/2.0"). The answers are etcd 3.4's: 200 with the JSON for
 * GET /version (the query ignored), 405 for any other method on it (Allow:
 * GET), 404 "404 page not found" for any other path, 400 for a request line
 * that does not fit in the first read.
 */
#include <stdio.h>
#include <string.h>

#include "bridge.h"

#define METHOD_MAX 16
#define NOSNIFF "X-Content-Type-Options: nosniff\r\n"

static size_t answer(char *out, size_t cap, const char *status, const char *extra, const char *type,
                     const char *body) {
  int n = snprintf(out, cap,
                   "HTTP/1.1 %s\r\n%sContent-Type: %s\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                   status, extra, type, strlen(body), body);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

size_t kt_bridge_http1(const uint8_t *p, size_t n, char *out, size_t cap) {
  size_t m = 0;
  while (m < n && m <= METHOD_MAX && p[m] >= 'A' && p[m] <= 'Z')
    m++;
  if (m == 0 || m > METHOD_MAX || m >= n || p[m] != ' ' || (m == 3 && !memcmp(p, "PRI", 3)))
    return 0; /* not an HTTP/1 request line: HTTP/2's preface, or nghttp2 refuses it */
  const uint8_t *path = p + m + 1, *end = memchr(path, ' ', n - m - 1);
  const uint8_t *eol = memchr(p, '\n', n);
  if (!end || !eol || end > eol)
    return answer(out, cap, "400 Bad Request", NOSNIFF, "text/plain; charset=utf-8",
                  "400 Bad Request");
  size_t plen = (size_t)(end - path);
  const uint8_t *q = memchr(path, '?', plen);
  if (q)
    plen = (size_t)(q - path);
  if (plen != 8 || memcmp(path, "/version", 8) != 0)
    return answer(out, cap, "404 Not Found", NOSNIFF, "text/plain; charset=utf-8",
                  "404 page not found\n");
  if (m != 3 || memcmp(p, "GET", 3) != 0)
    return answer(out, cap, "405 Method Not Allowed", "Allow: GET\r\n" NOSNIFF,
                  "text/plain; charset=utf-8", "Method Not Allowed\n");
  return answer(out, cap, "200 OK", "", "application/json",
                "{\"etcdserver\":\"" KT_BRIDGE_ETCD_VERSION
                "\",\"etcdcluster\":\"" KT_BRIDGE_ETCD_CLUSTER_VERSION "\"}");
}
