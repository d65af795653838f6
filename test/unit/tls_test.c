/* test/unit/tls_test.c — net/tls: contexts, the transport table over real
 * non-blocking socket pairs, verification and its messages, reload.
 *
 * Certificates come from kt_tls_selfcert (a self-signed certificate is its
 * own trust anchor when given as the CA file); the integration tests use a
 * real CA made with the openssl CLI (test/integration/tls_test.py). */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../net/tls.h"

static char dir_a[512], dir_b[512], dir_c[512]; /* server A, server B (rotation), client C */

static void path(char *out, size_t n, const char *dir, const char *file) {
  snprintf(out, n, "%s/%s", dir, file);
}

static int make_certs(void) {
  const char *t = kt_test_tmpdir();
  snprintf(dir_a, sizeof dir_a, "%s/a", t);
  snprintf(dir_b, sizeof dir_b, "%s/b", t);
  snprintf(dir_c, sizeof dir_c, "%s/c", t);
  const char *hosts[] = {"127.0.0.1", "localhost"};
  struct kt_err e = {0};
  if (kt_tls_selfcert(dir_a, hosts, 2, &e) || kt_tls_selfcert(dir_b, hosts, 2, &e) ||
      kt_tls_selfcert(dir_c, hosts, 1, &e)) {
    kt_test_fail(__FILE__, __LINE__, "selfcert: %s", e.msg);
    return -1;
  }
  return 0;
}

/* A server context on dir's certificate; clients must present one that
 * verifies against client_ca when given. */
static struct kt_tls_ctx *server_ctx(const char *dir, const char *client_ca, struct kt_err *e) {
  char cert[600], key[600];
  path(cert, sizeof cert, dir, "cert.pem");
  path(key, sizeof key, dir, "key.pem");
  struct kt_tls_config c = {.server = true,
                            .cert_file = cert,
                            .key_file = key,
                            .ca_file = client_ca,
                            .verify_peer = client_ca != NULL,
                            .alpn_h2 = true};
  struct kt_tls_ctx *t = NULL;
  return kt_tls_ctx_new(&c, &t, e) ? NULL : t;
}

static struct kt_tls_ctx *client_ctx(const char *ca, const char *dir, bool skip, struct kt_err *e) {
  char cert[600], key[600];
  if (dir) {
    path(cert, sizeof cert, dir, "cert.pem");
    path(key, sizeof key, dir, "key.pem");
  }
  struct kt_tls_config c = {.ca_file = ca,
                            .cert_file = dir ? cert : NULL,
                            .key_file = dir ? key : NULL,
                            .skip_verify = skip,
                            .alpn_h2 = true,
                            .ca_flag = "--cacert"};
  struct kt_tls_ctx *t = NULL;
  return kt_tls_ctx_new(&c, &t, e) ? NULL : t;
}

/* Drive both handshakes over a socket pair until done or failed. Returns 0
 * when both are done; else the side's result (se/ce say why). */
static int pump(struct kt_io *s, struct kt_io *c, int *sr, int *cr, struct kt_err *se,
                struct kt_err *ce) {
  *sr = *cr = KT_IO_AGAIN;
  for (int i = 0; i < 1000; i++) {
    if (*cr == KT_IO_AGAIN)
      *cr = kt_io_handshake(c, ce);
    if (*sr == KT_IO_AGAIN)
      *sr = kt_io_handshake(s, se);
    if ((*sr != KT_IO_AGAIN) && (*cr != KT_IO_AGAIN))
      break;
    struct pollfd p[2] = {{s->fd, POLLIN, 0}, {c->fd, POLLIN, 0}};
    int es = kt_io_events(s, true, false), ec = kt_io_events(c, true, false);
    p[0].events = (short)((es & KT_IO_READ ? POLLIN : 0) | (es & KT_IO_WRITE ? POLLOUT : 0));
    p[1].events = (short)((ec & KT_IO_READ ? POLLIN : 0) | (ec & KT_IO_WRITE ? POLLOUT : 0));
    poll(p, 2, 50);
  }
  return *sr == 1 && *cr == 1 ? 0 : -1;
}

static void pair(int fds[2]) {
  kt_assert(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
}

/* Write all of p through w, reading r (at most per_read bytes a call) into
 * sink meanwhile. */
static bool send_all(struct kt_io *w, struct kt_io *r, const void *p, size_t n, uint8_t *sink,
                     size_t *got, size_t per_read) {
  size_t off = 0;
  for (int i = 0; off < n && i < 1000000; i++) {
    struct kt_err e = {0};
    ssize_t k = kt_io_write(w, (const uint8_t *)p + off, n - off, &e);
    if (k > 0)
      off += (size_t)k;
    else if (k != KT_IO_AGAIN)
      return false;
    ssize_t m = kt_io_read(r, sink + *got, per_read, &e);
    if (m > 0)
      *got += (size_t)m;
  }
  return off == n;
}

TEST(tls_sniff) {
  const uint8_t hello[] = {0x16, 0x03, 0x01}, frame[] = {0x00, 0x00, 0x00, 0x23};
  const uint8_t h2[] = "PRI * HTTP/2.0", odd[] = {0x16, 0x00};
  CHECK_EQ(kt_tls_sniff(hello, 3), 1);
  CHECK_EQ(kt_tls_sniff(hello, 1), -1);
  CHECK_EQ(kt_tls_sniff(hello, 0), -1);
  CHECK_EQ(kt_tls_sniff(frame, 4), 0);
  CHECK_EQ(kt_tls_sniff(h2, 3), 0);
  CHECK_EQ(kt_tls_sniff(odd, 2), 0);
}

TEST(tls_handshake_data_cn_alpn_pending) {
  if (make_certs())
    return;
  char ca_a[600], ca_c[600];
  path(ca_a, sizeof ca_a, dir_a, "cert.pem");
  path(ca_c, sizeof ca_c, dir_c, "cert.pem");
  struct kt_err e = {0};
  struct kt_tls_ctx *sc = server_ctx(dir_a, ca_c, &e);
  CHECK(sc);
  struct kt_tls_ctx *cc = client_ctx(ca_a, dir_c, false, &e);
  CHECK(cc);
  int fds[2];
  pair(fds);
  struct kt_io s, c;
  CHECK_EQ(kt_io_init_tls(&s, fds[0], sc, NULL, &e), 0);
  CHECK_EQ(kt_io_init_tls(&c, fds[1], cc, "127.0.0.1", &e), 0);
  CHECK(kt_io_is_tls(&s) && !kt_io_ready(&s));
  /* Before anything: the server waits to read, the client to send. */
  CHECK_EQ(kt_io_events(&s, false, true), KT_IO_READ);
  int sr, cr;
  struct kt_err se = {0}, ce = {0};
  if (pump(&s, &c, &sr, &cr, &se, &ce)) {
    kt_test_fail(__FILE__, __LINE__, "handshake: server %d \"%s\" client %d \"%s\"", sr, se.msg, cr,
                 ce.msg);
    return;
  }
  CHECK_STR(kt_io_version(&s), "TLSv1.3");
  char buf[256];
  CHECK(kt_io_alpn(&s, buf, sizeof buf) == 2);
  CHECK_STR(buf, "h2");
  /* The client certificate has no CN (O=ketch): the CN is empty; the
   * server's as the client sees it, too. */
  CHECK_EQ(kt_io_peer_cn(&s, buf, sizeof buf), 0);
  /* 1 MiB through TLS, read in small pieces: bytes wait inside TLS. */
  size_t n = 1 << 20, got = 0;
  uint8_t *big = malloc(n), *sink = malloc(n);
  for (size_t i = 0; i < n; i++)
    big[i] = (uint8_t)(i * 7);
  bool ok = send_all(&c, &s, big, n, sink, &got, 100);
  bool saw_pending = kt_io_pending(&s);
  while (ok && got < n) {
    struct kt_err re = {0};
    ssize_t k = kt_io_read(&s, sink + got, n - got, &re);
    if (k > 0)
      got += (size_t)k;
    else if (k == KT_IO_AGAIN)
      poll(&(struct pollfd){s.fd, POLLIN, 0}, 1, 100);
    else
      ok = false;
  }
  bool same = ok && got == n && memcmp(big, sink, n) == 0;
  free(big);
  free(sink);
  CHECK(same);
  CHECK(saw_pending);
  /* Close: the other side reads the end (0). */
  kt_io_close(&c);
  ssize_t r = KT_IO_AGAIN;
  for (int i = 0; i < 100 && r == KT_IO_AGAIN; i++) {
    poll(&(struct pollfd){s.fd, POLLIN, 0}, 1, 20);
    r = kt_io_read(&s, buf, sizeof buf, &e);
  }
  CHECK_EQ(r, 0);
  kt_io_close(&s);
  kt_tls_ctx_free(sc);
  kt_tls_ctx_free(cc);
}

/* One handshake between a server context and a client context over a
 * fresh pair: returns the client's and server's results and messages. */
static void try_pair(struct kt_tls_ctx *sc, struct kt_tls_ctx *cc, const char *name, int *sr,
                     int *cr, struct kt_err *se, struct kt_err *ce) {
  int fds[2];
  pair(fds);
  struct kt_io s, c;
  struct kt_err e = {0};
  kt_assert(kt_io_init_tls(&s, fds[0], sc, NULL, &e) == 0);
  kt_assert(kt_io_init_tls(&c, fds[1], cc, name, &e) == 0);
  memset(se, 0, sizeof *se);
  memset(ce, 0, sizeof *ce);
  pump(&s, &c, sr, cr, se, ce);
  if (*cr == 1 && *sr != 1) { /* TLS 1.3: the client learns of a refusal when it reads */
    char b[8];
    ssize_t r = KT_IO_AGAIN;
    for (int i = 0; i < 100 && r == KT_IO_AGAIN; i++) {
      poll(&(struct pollfd){c.fd, POLLIN, 0}, 1, 20);
      r = kt_io_read(&c, b, sizeof b, ce);
    }
    *cr = (int)r;
  }
  kt_io_close(&s);
  kt_io_close(&c);
}

TEST(tls_refusals_say_why) {
  if (make_certs())
    return;
  char ca_a[600], ca_b[600], ca_c[600];
  path(ca_a, sizeof ca_a, dir_a, "cert.pem");
  path(ca_b, sizeof ca_b, dir_b, "cert.pem");
  path(ca_c, sizeof ca_c, dir_c, "cert.pem");
  struct kt_err e = {0}, se, ce;
  int sr, cr;
  struct kt_tls_ctx *sc = server_ctx(dir_a, ca_c, &e);
  CHECK(sc);
  /* The client trusts another CA: it refuses the server. */
  struct kt_tls_ctx *wrong = client_ctx(ca_b, dir_c, false, &e);
  try_pair(sc, wrong, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK_EQ(cr, KT_IO_ERROR);
  CHECK(strstr(ce.msg, "server certificate rejected") && strstr(ce.msg, "--cacert"));
  CHECK(strstr(se.msg, "the client refused the TLS handshake"));
  /* The address does not match the certificate. */
  struct kt_tls_ctx *good = client_ctx(ca_a, dir_c, false, &e);
  try_pair(sc, good, "127.0.0.2", &sr, &cr, &se, &ce);
  CHECK_EQ(cr, KT_IO_ERROR);
  CHECK(strstr(ce.msg, "IP address mismatch"));
  /* No client certificate: the server refuses, the client hears why. */
  struct kt_tls_ctx *anon = client_ctx(ca_a, NULL, false, &e);
  try_pair(sc, anon, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK_EQ(sr, KT_IO_ERROR);
  CHECK(strstr(se.msg, "presented no certificate"));
  CHECK(strstr(ce.msg, "certificate required"));
  /* A client certificate the server's CA file does not know. */
  struct kt_tls_ctx *other = client_ctx(ca_a, dir_b, false, &e);
  try_pair(sc, other, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK_EQ(sr, KT_IO_ERROR);
  CHECK(strstr(se.msg, "client certificate rejected"));
  CHECK(strstr(ce.msg, "unknown ca") || strstr(ce.msg, "bad certificate"));
  /* --client-cert-allowed-hostname: a verified certificate not valid for it. */
  {
    char cert[600], key[600];
    path(cert, sizeof cert, dir_a, "cert.pem");
    path(key, sizeof key, dir_a, "key.pem");
    struct kt_tls_config hc = {.server = true,
                               .cert_file = cert,
                               .key_file = key,
                               .ca_file = ca_c,
                               .verify_peer = true,
                               .allowed_hostname = "client.example"};
    struct kt_tls_ctx *hs = NULL;
    CHECK_EQ(kt_tls_ctx_new(&hc, &hs, &e), 0);
    try_pair(hs, good, "127.0.0.1", &sr, &cr, &se, &ce);
    kt_tls_ctx_free(hs);
    CHECK_EQ(sr, KT_IO_ERROR);
    CHECK(strstr(se.msg, "not valid for the allowed hostname \"client.example\""));
    hc.allowed_hostname = "127.0.0.1"; /* the client certificate's IP SAN */
    CHECK_EQ(kt_tls_ctx_new(&hc, &hs, &e), 0);
    try_pair(hs, good, "127.0.0.1", &sr, &cr, &se, &ce);
    kt_tls_ctx_free(hs);
    CHECK(sr == 1 && cr == 1);
  }
  /* skip-verify accepts any server (and the server still checks ours). */
  struct kt_tls_ctx *skip = client_ctx(NULL, dir_c, true, &e);
  try_pair(sc, skip, "127.0.0.9", &sr, &cr, &se, &ce);
  CHECK(sr == 1 && cr == 1);
  kt_tls_ctx_free(sc);
  kt_tls_ctx_free(wrong);
  kt_tls_ctx_free(good);
  kt_tls_ctx_free(anon);
  kt_tls_ctx_free(other);
  kt_tls_ctx_free(skip);
}

TEST(tls_plaintext_client_is_recognised) {
  if (make_certs())
    return;
  struct kt_err e = {0};
  struct kt_tls_ctx *sc = server_ctx(dir_a, NULL, &e);
  CHECK(sc);
  int fds[2];
  pair(fds);
  struct kt_io s;
  CHECK_EQ(kt_io_init_tls(&s, fds[0], sc, NULL, &e), 0);
  const uint8_t frame[] = {0, 0, 0, 3, 0x93, 0, 1};
  CHECK_EQ(write(fds[1], frame, sizeof frame), (ssize_t)sizeof frame);
  CHECK_EQ(kt_io_handshake(&s, &e), KT_IO_PLAINTEXT);
  CHECK(strstr(e.msg, "plaintext"));
  kt_io_to_plain(&s); /* nothing was consumed: the frame is read as is */
  uint8_t b[16];
  CHECK_EQ(kt_io_read(&s, b, sizeof b, &e), (ssize_t)sizeof frame);
  CHECK(memcmp(b, frame, sizeof frame) == 0);
  kt_io_close(&s);
  close(fds[1]);
  kt_tls_ctx_free(sc);
}

TEST(tls_config_errors_name_the_file) {
  if (make_certs())
    return;
  char cert[600], key_b[600];
  path(cert, sizeof cert, dir_a, "cert.pem");
  path(key_b, sizeof key_b, dir_b, "key.pem");
  struct kt_tls_ctx *t = NULL;
  struct kt_err e = {0};
  struct kt_tls_config c = {.server = true,
                            .cert_file = cert,
                            .key_file = "/nonexistent/k.pem",
                            .cert_flag = "--cert-file",
                            .key_flag = "--key-file"};
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), KT_EINVAL);
  CHECK_STR(e.msg, "--key-file /nonexistent/k.pem: cannot read: No such file or directory");
  c.key_file = key_b;
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), KT_EINVAL);
  if (!strstr(e.msg, "does not match the certificate in --cert-file"))
    kt_test_fail(__FILE__, __LINE__, "msg: %s", e.msg);
  c.key_file = cert; /* a certificate where the key should be */
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), KT_EINVAL);
  CHECK(strstr(e.msg, "--key-file") && strstr(e.msg, "not a usable PEM private key"));
  char key_a[600];
  path(key_a, sizeof key_a, dir_a, "key.pem");
  c.key_file = key_a;
  c.cipher_suites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_BOGUS";
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), KT_EINVAL);
  CHECK_STR(e.msg, "unexpected TLS cipher suite \"TLS_BOGUS\"");
  c.cipher_suites =
      "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305";
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), 0);
  kt_tls_ctx_free(t);
  c.cipher_suites = NULL;
  c.verify_peer = true; /* client certificates need a CA */
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), KT_EINVAL);
  CHECK_STR(e.msg, "client certificate authentication needs CA file");
  /* TLS 1.2 only: the negotiated version says so. */
  c.verify_peer = false;
  c.max_version = KT_TLS_V12;
  CHECK_EQ(kt_tls_ctx_new(&c, &t, &e), 0);
  struct kt_tls_ctx *cc = client_ctx(cert, NULL, false, &e);
  int fds[2];
  pair(fds);
  struct kt_io s, cl;
  kt_io_init_tls(&s, fds[0], t, NULL, &e);
  kt_io_init_tls(&cl, fds[1], cc, "localhost", &e);
  int sr, cr;
  struct kt_err se = {0}, ce = {0};
  CHECK_EQ(pump(&s, &cl, &sr, &cr, &se, &ce), 0);
  CHECK_STR(kt_io_version(&cl), "TLSv1.2");
  kt_io_close(&s);
  kt_io_close(&cl);
  kt_tls_ctx_free(t);
  kt_tls_ctx_free(cc);
}

static void copy_file(const char *from, const char *to) {
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.new", to);
  FILE *in = fopen(from, "rb"), *out = fopen(tmp, "wb");
  kt_assert(in && out);
  char b[8192];
  size_t n;
  while ((n = fread(b, 1, sizeof b, in)) > 0)
    fwrite(b, 1, n, out);
  fclose(in);
  fclose(out);
  kt_assert(rename(tmp, to) == 0);
}

TEST(tls_reload_swaps_only_a_good_context) {
  if (make_certs())
    return;
  /* The server serves a copy of A's files in its own directory. */
  char live[600], cert[700], key[700], a_cert[600], a_key[600], b_cert[600], b_key[600];
  snprintf(live, sizeof live, "%s/live", kt_test_tmpdir());
  mkdir(live, 0700);
  path(cert, sizeof cert, live, "cert.pem");
  path(key, sizeof key, live, "key.pem");
  path(a_cert, sizeof a_cert, dir_a, "cert.pem");
  path(a_key, sizeof a_key, dir_a, "key.pem");
  path(b_cert, sizeof b_cert, dir_b, "cert.pem");
  path(b_key, sizeof b_key, dir_b, "key.pem");
  copy_file(a_cert, cert);
  copy_file(a_key, key);
  struct kt_err e = {0}, se, ce;
  struct kt_tls_ctx *sc = server_ctx(live, NULL, &e);
  CHECK(sc);
  CHECK(!kt_tls_ctx_files_changed(sc));
  struct kt_tls_ctx *trust_a = client_ctx(a_cert, NULL, false, &e);
  struct kt_tls_ctx *trust_b = client_ctx(b_cert, NULL, false, &e);
  /* An established connection under A. */
  int fds[2];
  pair(fds);
  struct kt_io s, c;
  kt_io_init_tls(&s, fds[0], sc, NULL, &e);
  kt_io_init_tls(&c, fds[1], trust_a, "127.0.0.1", &e);
  int sr, cr;
  CHECK_EQ(pump(&s, &c, &sr, &cr, &se, &ce), 0);
  /* Half a rotation (new certificate, old key): the reload fails, A stays. */
  copy_file(b_cert, cert);
  CHECK(kt_tls_ctx_files_changed(sc));
  CHECK_EQ(kt_tls_ctx_reload(sc, &e), KT_EINVAL);
  CHECK(strstr(e.msg, "does not match"));
  CHECK_EQ(kt_tls_ctx_generation(sc), 1);
  try_pair(sc, trust_a, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK(sr == 1 && cr == 1);
  /* The key follows: the reload swaps in B. */
  copy_file(b_key, key);
  CHECK_EQ(kt_tls_ctx_reload(sc, &e), 0);
  CHECK_EQ(kt_tls_ctx_generation(sc), 2);
  CHECK(!kt_tls_ctx_files_changed(sc));
  try_pair(sc, trust_b, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK(sr == 1 && cr == 1);
  try_pair(sc, trust_a, "127.0.0.1", &sr, &cr, &se, &ce);
  CHECK_EQ(cr, KT_IO_ERROR);
  /* The old connection still works both ways. */
  size_t got = 0;
  uint8_t sink[64];
  CHECK(send_all(&c, &s, "ping", 4, sink, &got, 4));
  for (int i = 0; i < 50 && got < 4; i++) {
    poll(&(struct pollfd){s.fd, POLLIN, 0}, 1, 20);
    ssize_t k = kt_io_read(&s, sink + got, sizeof sink - got, &e);
    if (k > 0)
      got += (size_t)k;
  }
  CHECK(got == 4 && memcmp(sink, "ping", 4) == 0);
  kt_io_close(&s);
  kt_io_close(&c);
  kt_tls_ctx_free(sc);
  kt_tls_ctx_free(trust_a);
  kt_tls_ctx_free(trust_b);
}

TEST(tls_selfcert_is_reused) {
  if (make_certs())
    return;
  char cert[600];
  path(cert, sizeof cert, dir_a, "cert.pem");
  struct stat st1, st2;
  CHECK_EQ(stat(cert, &st1), 0);
  const char *hosts[] = {"127.0.0.1"};
  struct kt_err e = {0};
  CHECK_EQ(kt_tls_selfcert(dir_a, hosts, 1, &e), 0);
  CHECK_EQ(stat(cert, &st2), 0);
  CHECK(st1.st_ino == st2.st_ino && st1.st_mtime == st2.st_mtime);
  char key[600];
  path(key, sizeof key, dir_a, "key.pem");
  CHECK_EQ(stat(key, &st1), 0);
  CHECK_EQ(st1.st_mode & 0777, 0600);
}
