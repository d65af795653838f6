/* test/fuzz/tls_accept_fuzz.c — fuzz target for what a TLS listener does
 * with a client's first bytes (net/tls.h): kt_tls_sniff, then a server
 * kt_io (a real OpenSSL context with a self-signed certificate, client
 * certificates required) fed the input over a socket pair and driven until
 * it stops: the handshake fails with a message, finds plaintext (then the
 * bytes must come back unchanged through kt_io_to_plain), or waits for more.
 * Whatever happens: no crash, a failure's message is non-empty, the poll
 * mask is a known one, and the sniff agrees with KT_IO_PLAINTEXT on the
 * first byte. Seeds: test/fuzz/corpus/tls_accept/: ClientHellos written by
 * Python's ssl module into a MemoryBIO (TLS 1.3, with ALPN h2 or http/1.1,
 * TLS 1.2 only, one cut short), a native HELLO frame, an HTTP/2 preface, a
 * TLS alert, a lone 0x16 byte, an empty input. */
#include "../../net/tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct kt_tls_ctx *ctx;

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "tls_accept_fuzz: %s\n", what);
    abort();
  }
}

static void setup(void) {
  char dir[] = "/tmp/kt-tls-fuzz-XXXXXX";
  check(mkdtemp(dir) != NULL, "mkdtemp");
  const char *hosts[] = {"127.0.0.1"};
  struct kt_err e = {0};
  check(kt_tls_selfcert(dir, hosts, 1, &e) == 0, "selfcert");
  char cert[128], key[128];
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  struct kt_tls_config c = {.server = true,
                            .cert_file = cert,
                            .key_file = key,
                            .ca_file = cert,
                            .verify_peer = true,
                            .alpn_h2 = true};
  check(kt_tls_ctx_new(&c, &ctx, &e) == 0, "context");
  unlink(cert);
  unlink(key);
  char sub[160];
  snprintf(sub, sizeof sub, "%s", dir);
  rmdir(sub);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx)
    setup();
  int s = kt_tls_sniff(data, size);
  check(s >= -1 && s <= 1, "sniff result");
  if (size > 60000)
    return 0; /* one socket buffer's worth */
  int fds[2];
  check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0, "socketpair");
  if (size)
    check(write(fds[1], data, size) == (ssize_t)size, "write");
  shutdown(fds[1], SHUT_WR);
  struct kt_io io;
  struct kt_err e = {0};
  check(kt_io_init_tls(&io, fds[0], ctx, NULL, &e) == 0, "init");
  int r = KT_IO_AGAIN;
  for (int i = 0; i < 8 && r == KT_IO_AGAIN; i++) {
    memset(&e, 0, sizeof e);
    r = kt_io_handshake(&io, &e);
    int ev = kt_io_events(&io, true, false);
    check(ev == KT_IO_READ || ev == KT_IO_WRITE || r != KT_IO_AGAIN, "poll mask");
  }
  check(r == 1 || r == KT_IO_AGAIN || r == KT_IO_ERROR || r == KT_IO_PLAINTEXT, "result");
  if (r == KT_IO_ERROR)
    check(e.msg[0] != 0 && e.code != 0, "a failure without a message");
  if (r == KT_IO_PLAINTEXT) {
    check(size > 0 && data[0] != 0x16 && s == 0, "plaintext, yet the first byte is a TLS record");
    kt_io_to_plain(&io);
    uint8_t *back = malloc(size);
    ssize_t n = kt_io_read(&io, back, size, &e);
    check(n == (ssize_t)size && memcmp(back, data, size) == 0, "plaintext bytes changed");
    free(back);
  }
  if (s == 1)
    check(r != KT_IO_PLAINTEXT, "a TLS record taken for plaintext");
  kt_io_close(&io);
  close(fds[1]);
  return 0;
}
