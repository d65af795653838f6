/* tools/grpc-bridge/bridge_hdrs.c — the checks of a request's header block
 * that a gRPC server needs (bridge.h "a request's header block").
 *
 * ketch-grpc's HTTP/2 sessions run with nghttp2's HTTP messaging checks off
 * (nghttp2_option_set_no_http_messaging): nghttp2 validated the name and
 * value of every header of every request, byte by byte, and the pseudo-header
 * rules, about 15% of the bridge's instructions per cache hit. nghttp2 still
 * does the framing, HPACK, flow control and stream states; this file does
 * what the bridge relies on, and nothing for headers it never reads:
 *   - :method, :scheme and :path exactly once each (RFC 9113 8.3.1), before
 *     any regular header; no other pseudo-header (:authority at most once);
 *   - the values the bridge keeps as C strings (:path, token) hold no NUL,
 *     CR, LF or other control byte (tab aside), as RFC 9113 8.2.1 wants of
 *     every value, so the string is the whole value; :path is not empty
 *     (content-type is matched by its first bytes, grpc-timeout parsed
 *     strictly, :method only compared with POST and named percent-encoded);
 *   - :method is POST (a gRPC call), told apart from a malformed block so
 *     that the caller answers it with a gRPC error rather than a reset.
 * Other headers (user-agent, te, any metadata) are not looked at: the bridge
 * neither reads nor forwards them. Trailers of a request are not fed here
 * (the bridge reads nothing from them). Pure. */
#include <string.h>

#include "bridge.h"

enum {
  SEEN_METHOD = 1,
  SEEN_SCHEME = 2,
  SEEN_PATH = 4,
  SEEN_AUTHORITY = 8,
};

/* RFC 9113 8.2.1: no NUL, CR, LF; the bridge also refuses the other
 * control bytes (tab aside) of the values it keeps as C strings. Eight bytes
 * at a time: a request's :path is checked on every call. */
static bool value_ok(const uint8_t *v, size_t n) {
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  size_t i = 0;
  while (i + 8 <= n || (n > 8 && i < n)) {
    if (i + 8 > n)
      i = n - 8; /* the last word overlaps the one before */
    uint64_t x;
    memcpy(&x, v + i, 8);
    uint64_t del = x ^ (0x7f * ones); /* a zero byte where x has 0x7f */
    if (((x - 0x20 * ones) & ~x & highs) || ((del - ones) & ~del & highs))
      break; /* a byte below 0x20 or 0x7f (or a false alarm): byte by byte */
    i += 8;
  }
  for (; i < n; i++)
    if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
      return false;
  return true;
}

static void malformed(struct kt_bridge_req_hdrs *h, const char *why) {
  if (!h->malformed)
    h->malformed = why;
}

/* A pseudo-header seen once (bit), or the block is malformed. */
static bool pseudo_once(struct kt_bridge_req_hdrs *h, uint8_t bit, const char *dup) {
  if (h->regular)
    malformed(h, "a pseudo-header after a regular header");
  if (h->seen & bit) {
    malformed(h, dup);
    return false;
  }
  h->seen |= bit;
  return true;
}

static bool is(const uint8_t *name, const char *lit, size_t n) { return memcmp(name, lit, n) == 0; }

/* Which header name[0..nlen) is (KT_HDR_*), or -1..-4 for :method, :scheme,
 * :authority and any other pseudo-header. */
enum { P_METHOD = -1, P_SCHEME = -2, P_AUTHORITY = -3, P_OTHER = -4 };
static int header_kind(const uint8_t *name, size_t nlen) {
  switch (nlen) {
  case 5:
    return is(name, ":path", 5) ? KT_HDR_PATH : is(name, "token", 5) ? KT_HDR_TOKEN : KT_HDR_OTHER;
  case 7:
    return is(name, ":method", 7) ? P_METHOD : is(name, ":scheme", 7) ? P_SCHEME : KT_HDR_OTHER;
  case 10:
    return is(name, ":authority", 10) ? P_AUTHORITY : KT_HDR_OTHER;
  case 12:
    return is(name, "content-type", 12)   ? KT_HDR_CONTENT_TYPE
           : is(name, "grpc-timeout", 12) ? KT_HDR_TIMEOUT
                                          : KT_HDR_OTHER;
  default:
    return KT_HDR_OTHER;
  }
}

int kt_bridge_req_header(struct kt_bridge_req_hdrs *h, const uint8_t *name, size_t nlen,
                         const uint8_t *value, size_t vlen) {
  int kind = header_kind(name, nlen);
  if (kind == KT_HDR_OTHER && nlen > 0 && name[0] == ':')
    kind = P_OTHER;
  switch (kind) {
  case KT_HDR_PATH:
    if (!pseudo_once(h, SEEN_PATH, "more than one :path"))
      return KT_HDR_OTHER;
    if (vlen == 0 || !value_ok(value, vlen)) {
      malformed(h, "an empty :path or one with a control byte");
      return KT_HDR_OTHER;
    }
    return KT_HDR_PATH;
  case P_METHOD:
    if (pseudo_once(h, SEEN_METHOD, "more than one :method")) {
      /* only named in an error message (percent-encoded there) */
      h->post = vlen == 4 && is(value, "POST", 4);
      size_t n = vlen < sizeof h->method ? vlen : sizeof h->method - 1;
      memcpy(h->method, value, n);
      h->method[n] = 0;
    }
    return KT_HDR_OTHER;
  case P_SCHEME:
    (void)pseudo_once(h, SEEN_SCHEME, "more than one :scheme");
    return KT_HDR_OTHER;
  case P_AUTHORITY:
    (void)pseudo_once(h, SEEN_AUTHORITY, "more than one :authority");
    return KT_HDR_OTHER;
  case P_OTHER:
    malformed(h, "a pseudo-header a request does not have");
    return KT_HDR_OTHER;
  case KT_HDR_TOKEN:
    h->regular = true;
    if (!value_ok(value, vlen)) {
      malformed(h, "a control byte in the token header");
      return KT_HDR_OTHER;
    }
    return KT_HDR_TOKEN;
  default: /* content-type and grpc-timeout are matched or parsed strictly */
    h->regular = true;
    return kind;
  }
}

int kt_bridge_req_check(const struct kt_bridge_req_hdrs *h, const char **why) {
  *why = h->malformed;
  if (!*why && (h->seen & (SEEN_METHOD | SEEN_SCHEME | SEEN_PATH)) !=
                   (SEEN_METHOD | SEEN_SCHEME | SEEN_PATH))
    *why = "no :method, :scheme or :path";
  if (*why)
    return KT_REQ_MALFORMED;
  return h->post ? KT_REQ_OK : KT_REQ_NOT_POST;
}
