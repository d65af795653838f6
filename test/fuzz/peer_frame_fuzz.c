/* test/fuzz/peer_frame_fuzz.c — fuzz target for the peer transport's pure
 * decoders (net/peer.h): the handshake (HELLO and ACK), the frame splitter and
 * the peer URL parser.
 *
 * The input is read three ways: (1) as a HELLO then a stream of frames, the
 * way an acceptor reads a connection; (2) as an ACK, the way a dialer does;
 * (3) as a URL string. Whatever decodes must re-encode to the very bytes it
 * came from (the formats are fixed-size big-endian, so this is exact), the
 * verdict of kt_peer_hs_check must be a known status, and the frame splitter
 * must never claim more bytes than it was given. Any disagreement aborts.
 * Seeds: test/fuzz/corpus/peer_frame/ (written by
 * KT_WRITE_CORPUS=test/fuzz/corpus/peer_frame build/test/peer_test write_fuzz_corpus).
 */
#include "../../net/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "peer_frame_fuzz: %s\n", what);
    abort();
  }
}

static size_t handshake(const uint8_t *p, size_t n, uint8_t kind) {
  struct kt_peer_hs h;
  struct kt_err e = {0};
  int r = kt_peer_hs_decode(p, n, kind, &h, &e);
  check(r == 1 || r == 0 || r == -KT_EPROTO, "hs_decode: unexpected result");
  check(r != -KT_EPROTO || e.code == KT_EPROTO, "hs_decode: kt_err not filled");
  check(r != 0 || n < KT_PEER_HELLO_BYTES, "hs_decode: wants more with a whole handshake");
  if (r != 1)
    return 0;
  check(h.kind == kind, "hs_decode: kind");
  uint8_t again[KT_PEER_HELLO_BYTES];
  kt_peer_hs_encode(again, &h);
  check(memcmp(again, p, sizeof again) == 0, "handshake does not re-encode to its bytes");
  int st = kt_peer_hs_check(&h, 0xc1, 2, h.a == 1);
  check(st >= KT_PEER_OK && st <= KT_PEER_UNKNOWN_SENDER, "hs_check: unknown status");
  check(st != KT_PEER_OK || (h.version == KT_PEER_VERSION && h.cluster_id == 0xc1 && h.b == 2 &&
                             h.a == 1 && h.code < KT_PEER_N_CHANNELS),
        "hs_check accepted a bad HELLO");
  check(kt_peer_status_name(st) != NULL, "status name");
  return KT_PEER_HELLO_BYTES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* (1) HELLO, then frames with a small limit so large lengths are refused. */
  size_t off = handshake(data, size, KT_PEER_HELLO);
  while (off < size) {
    uint8_t ch;
    const uint8_t *msg;
    uint32_t len;
    size_t used;
    struct kt_err e = {0};
    int r = kt_peer_frame_next(data + off, size - off, 1u << 16, &ch, &msg, &len, &used, &e);
    check(r == 1 || r == 0 || r == -KT_EPROTO || r == -KT_ETOOLARGE, "frame: unexpected result");
    if (r != 1) {
      check(r == 0 || e.code == -r, "frame: kt_err not filled");
      break;
    }
    check(used == KT_PEER_FRAME_HDR + (size_t)len && used <= size - off, "frame: bad size");
    check(len >= 1 && len <= (1u << 16) && ch < KT_PEER_N_CHANNELS, "frame: out of bounds");
    check(msg == data + off + KT_PEER_FRAME_HDR, "frame: message pointer");
    uint8_t hdr[KT_PEER_FRAME_HDR];
    kt_peer_frame_header(hdr, ch, len);
    check(memcmp(hdr, data + off, sizeof hdr) == 0, "frame header does not re-encode");
    off += used;
  }
  /* (2) an ACK. */
  handshake(data, size, KT_PEER_ACK);
  /* (3) a URL. */
  char url[300], host[KT_PEER_URL_MAX];
  size_t n = size < sizeof url - 1 ? size : sizeof url - 1;
  memcpy(url, data, n);
  url[n] = 0;
  int port = -1;
  struct kt_err e = {0};
  int r = kt_peer_parse_url(url, host, sizeof host, &port, &e);
  check(r == 0 || (r == KT_EINVAL && e.code == KT_EINVAL), "url: unexpected result");
  if (r == 0)
    check(port >= 0 && port <= 65535 && host[0] && strlen(host) < sizeof host, "url: bad parse");
  return 0;
}
