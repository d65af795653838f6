/* net/tls.c — see tls.h. */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* ---- the policy one SSL_CTX carries (for the verify callback) ---- */

enum { NOTE_NONE, NOTE_CN, NOTE_HOST, NOTE_REVOKED };

struct policy {
  bool server;
  char *allowed_cn, *allowed_host;
  STACK_OF(X509_CRL) * crls;
  char ca_flag[48];
};

static int policy_idx = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static BIO_METHOD *sock_method;

/* OpenSSL's own socket BIO writes with write(): a peer gone away would raise
 * SIGPIPE in a process that did not ignore it (libketch installs no signal
 * handler). This one uses send(MSG_NOSIGNAL) and recv(). */
static int sock_write(BIO *b, const char *buf, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = send((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_write(b);
  return (int)n;
}

static int sock_read(BIO *b, char *buf, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = recv((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_read(b);
  return (int)n;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b, (void)num, (void)ptr;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sock_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static void policy_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                        void *argp) {
  (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
  struct policy *p = ptr;
  if (!p)
    return;
  free(p->allowed_cn);
  free(p->allowed_host);
  sk_X509_CRL_pop_free(p->crls, X509_CRL_free);
  free(p);
}

static void init_once(void) {
  /* No OPENSSL_cleanup at exit: it would run before a program's own atexit
   * handlers that close handles (ketchctl's), and then the policies below
   * could not be freed with their SSL_CTX. */
  OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, NULL);
  policy_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, policy_free);
  sock_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ketch socket");
  kt_assert(sock_method);
  BIO_meth_set_write(sock_method, sock_write);
  BIO_meth_set_read(sock_method, sock_read);
  BIO_meth_set_ctrl(sock_method, sock_ctrl);
  BIO_meth_set_create(sock_method, sock_create);
}

/* ---- small helpers ---- */

static char *dupstr(const char *s) {
  if (!s || !*s)
    return NULL;
  char *d = strdup(s);
  kt_assert(d);
  return d;
}

/* The reason of the most recent OpenSSL error, or `fallback`. */
static const char *ossl_reason(const char *fallback) {
  unsigned long le = ERR_peek_last_error();
  const char *r = le ? ERR_reason_error_string(le) : NULL;
  return r ? r : fallback;
}

static void name_of(X509_NAME *n, char *buf, size_t cap) {
  buf[0] = 0;
  if (!n)
    return;
  BIO *b = BIO_new(BIO_s_mem());
  if (!b)
    return;
  X509_NAME_print_ex(b, n, 0, XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB);
  int len = BIO_read(b, buf, (int)cap - 1);
  buf[len > 0 ? len : 0] = 0;
  BIO_free(b);
}

static void cn_of(X509 *x, char *buf, size_t cap) {
  buf[0] = 0;
  if (x && X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, (int)cap) < 0)
    buf[0] = 0;
}

/* ---- the verify callback: chain checks by OpenSSL, then etcd's policy ---- */

static bool revoked(const struct policy *p, X509 *cert) {
  for (int i = 0; p->crls && i < sk_X509_CRL_num(p->crls); i++) {
    X509_CRL *crl = sk_X509_CRL_value(p->crls, i);
    X509_REVOKED *rev = NULL;
    if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_issuer_name(cert)) == 0 &&
        X509_CRL_get0_by_serial(crl, &rev, (ASN1_INTEGER *)X509_get0_serialNumber(cert)) == 1)
      return true;
  }
  return false;
}

static bool host_ok(X509 *x, const char *host) {
  unsigned char ip[16];
  if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
    return X509_check_ip_asc(x, host, 0) == 1;
  return X509_check_host(x, host, 0, 0, NULL) == 1;
}

static int verify_cb(int ok, X509_STORE_CTX *x) {
  SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
  struct kt_io *io = ssl ? SSL_get_app_data(ssl) : NULL;
  const struct policy *p = ssl ? SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), policy_idx) : NULL;
  X509 *cert = X509_STORE_CTX_get_current_cert(x);
  int depth = X509_STORE_CTX_get_error_depth(x);
  int note = NOTE_NONE;
  if (ok && p && cert && revoked(p, cert)) {
    X509_STORE_CTX_set_error(x, X509_V_ERR_CERT_REVOKED);
    note = NOTE_REVOKED;
    ok = 0;
  }
  if (ok && p && cert && depth == 0) {
    char cn[256];
    cn_of(cert, cn, sizeof cn);
    if (p->allowed_cn && strcmp(cn, p->allowed_cn) != 0)
      note = NOTE_CN;
    else if (p->allowed_host && !host_ok(cert, p->allowed_host))
      note = NOTE_HOST;
    if (note != NOTE_NONE) {
      X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
      ok = 0;
    }
  }
  if (!ok && io && !io->verify_err) {
    io->verify_err = X509_STORE_CTX_get_error(x);
    io->verify_note = note;
    if (cert && X509_up_ref(cert))
      io->bad_cert = cert;
  }
  return ok;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg) {
  (void)ssl, (void)arg;
  static const unsigned char h2[] = "\x02h2";
  unsigned char *sel = NULL;
  if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2 - 1, in, inlen) == OPENSSL_NPN_NEGOTIATED) {
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL; /* offered ALPN without h2: gRPC cannot work */
}

/* ---- building an SSL_CTX ---- */

static const char *flag_or(const char *f, const char *def) { return f && *f ? f : def; }

static int check_readable(const char *path, const char *flag, struct kt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f)
    return kt_err_set(e, KT_EINVAL, "%s %.150s: cannot read: %s", flag, path, strerror(errno));
  fclose(f);
  return 0;
}

static int parse_version(int v) {
  return v == KT_TLS_V13 ? TLS1_3_VERSION : v == KT_TLS_V12 ? TLS1_2_VERSION : 0;
}

/* --cipher-suites: Go's (IANA) names -> OpenSSL's lists for TLS 1.2 and
 * 1.3. etcd's message for an unknown name. */
static int set_ciphers(SSL_CTX *ctx, const char *list, struct kt_err *e) {
  char v12[2048] = "", v13[512] = "", one[128];
  for (const char *s = list; *s;) {
    size_t n = strcspn(s, ",");
    while (n && (*s == ' ' || *s == '\t'))
      s++, n--;
    size_t m = n;
    while (m && (s[m - 1] == ' ' || s[m - 1] == '\t'))
      m--;
    if (m == 0 || m >= sizeof one - 8)
      return kt_err_set(e, KT_EINVAL, "unexpected TLS cipher suite \"%.*s\"", (int)KT_MIN(m, 100),
                        s);
    memcpy(one, s, m);
    one[m] = 0;
    bool tls13 = !strcmp(one, "TLS_AES_128_GCM_SHA256") || !strcmp(one, "TLS_AES_256_GCM_SHA384") ||
                 !strcmp(one, "TLS_CHACHA20_POLY1305_SHA256");
    const char *os = tls13 ? one : OPENSSL_cipher_name(one);
    if (!tls13 && (!os || !strcmp(os, "(NONE)")) && strstr(one, "CHACHA20_POLY1305") &&
        !strstr(one, "_SHA256")) {
      strcat(one, "_SHA256"); /* Go's short names of the ChaCha20 suites */
      os = OPENSSL_cipher_name(one);
    }
    if (!os || !strcmp(os, "(NONE)"))
      return kt_err_set(e, KT_EINVAL, "unexpected TLS cipher suite \"%.100s\"", one);
    char *dst = tls13 ? v13 : v12;
    size_t cap = tls13 ? sizeof v13 : sizeof v12, used = strlen(dst);
    snprintf(dst + used, cap - used, "%s%s", used ? ":" : "", os);
    s += n;
    if (*s == ',')
      s++;
  }
  ERR_clear_error();
  if (v12[0] && SSL_CTX_set_cipher_list(ctx, v12) != 1)
    return kt_err_set(e, KT_EINVAL, "--cipher-suites: none of \"%.150s\" is available: %s", v12,
                      ossl_reason("no cipher match"));
  if (v13[0] && SSL_CTX_set_ciphersuites(ctx, v13) != 1)
    return kt_err_set(e, KT_EINVAL, "--cipher-suites: \"%.150s\": %s", v13,
                      ossl_reason("no cipher match"));
  return 0;
}

static int load_crls(struct policy *p, const char *path, const char *flag, struct kt_err *e) {
  BIO *b = BIO_new_file(path, "r");
  if (!b)
    return kt_err_set(e, KT_EINVAL, "%s %.150s: cannot read: %s", flag, path, strerror(errno));
  p->crls = sk_X509_CRL_new_null();
  kt_assert(p->crls);
  X509_CRL *crl;
  ERR_clear_error();
  while ((crl = PEM_read_bio_X509_CRL(b, NULL, NULL, NULL)))
    sk_X509_CRL_push(p->crls, crl);
  unsigned long le = ERR_peek_last_error();
  BIO_free(b);
  if (le && ERR_GET_REASON(le) != PEM_R_NO_START_LINE)
    return kt_err_set(e, KT_EINVAL, "%s %.150s: bad CRL: %s", flag, path, ossl_reason("?"));
  ERR_clear_error();
  if (sk_X509_CRL_num(p->crls) == 0)
    return kt_err_set(e, KT_EINVAL, "%s %.150s: no PEM CRL in the file", flag, path);
  return 0;
}

static int build(const struct kt_tls_config *c, SSL_CTX **out, struct kt_err *e) {
  const char *cf = flag_or(c->cert_flag, "cert file"), *kf = flag_or(c->key_flag, "key file"),
             *af = flag_or(c->ca_flag, "CA file"), *rf = flag_or(c->crl_flag, "CRL file");
  if (!c->cert_file != !c->key_file)
    return kt_err_set(e, KT_EINVAL, "%s and %s go together (got only %s)", cf, kf,
                      c->cert_file ? cf : kf);
  if (c->server && !c->cert_file)
    return kt_err_set(e, KT_EINVAL, "a TLS listener needs %s and %s", cf, kf);
  if (c->server && c->verify_peer && !c->ca_file)
    return kt_err_set(e, KT_EINVAL, "client certificate authentication needs %s", af);
  if (c->allowed_cn && c->allowed_hostname)
    return kt_err_set(e, KT_EINVAL,
                      "allowed CN and allowed hostname are mutually exclusive (cn=\"%.60s\", "
                      "hostname=\"%.60s\")",
                      c->allowed_cn, c->allowed_hostname);
  int minv = parse_version(c->min_version ? c->min_version : KT_TLS_V12);
  int maxv = parse_version(c->max_version ? c->max_version : KT_TLS_V13);
  if (!minv || !maxv || minv > maxv)
    return kt_err_set(e, KT_EINVAL, "TLS versions: minimum %s above maximum %s",
                      minv == TLS1_3_VERSION ? "TLS1.3" : "TLS1.2",
                      maxv == TLS1_3_VERSION ? "TLS1.3" : "TLS1.2");
  if (c->cipher_suites && *c->cipher_suites && minv == TLS1_3_VERSION)
    return kt_err_set(e, KT_EINVAL,
                      "cipher suites cannot be configured when only TLS1.3 is enabled");
  const char *files[4] = {c->cert_file, c->key_file, c->ca_file, c->crl_file};
  const char *flags[4] = {cf, kf, af, rf};
  for (int i = 0; i < 4; i++)
    if (files[i] && check_readable(files[i], flags[i], e))
      return e->code;

  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(c->server ? TLS_server_method() : TLS_client_method());
  if (!ctx)
    return kt_err_set(e, KT_ENOMEM, "TLS: cannot create a context: %s", ossl_reason("?"));
  struct policy *p = calloc(1, sizeof *p);
  kt_assert(p);
  p->server = c->server;
  p->allowed_cn = dupstr(c->allowed_cn);
  p->allowed_host = dupstr(c->allowed_hostname);
  snprintf(p->ca_flag, sizeof p->ca_flag, "%s", af);
  SSL_CTX_set_ex_data(ctx, policy_idx, p); /* freed with ctx */
  int rc = 0;
  SSL_CTX_set_min_proto_version(ctx, minv);
  SSL_CTX_set_max_proto_version(ctx, maxv);
  uint64_t opts = SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION;
  if (c->server && c->cipher_suites && *c->cipher_suites)
    opts |= SSL_OP_CIPHER_SERVER_PREFERENCE; /* etcd: in the order given */
  SSL_CTX_set_options(ctx, opts);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  /* Read ahead: one recv() takes as many records as have arrived (without
   * it OpenSSL reads each record's header and body with two). What it holds
   * beyond the records returned is what kt_io_pending reports. */
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, KT_TLS_READ_BUFFER);
  if (c->cipher_suites && *c->cipher_suites && (rc = set_ciphers(ctx, c->cipher_suites, e)))
    goto fail;
  if (c->cert_file) {
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, c->cert_file) != 1) {
      rc = kt_err_set(e, KT_EINVAL, "%s %.150s: not a PEM certificate: %s", cf, c->cert_file,
                      ossl_reason("?"));
      goto fail;
    }
    ERR_clear_error();
    if (SSL_CTX_use_PrivateKey_file(ctx, c->key_file, SSL_FILETYPE_PEM) != 1) {
      unsigned long le = ERR_peek_last_error();
      if (ERR_GET_LIB(le) == ERR_LIB_X509 && ERR_GET_REASON(le) == X509_R_KEY_VALUES_MISMATCH)
        rc = kt_err_set(e, KT_EINVAL, "%s %.120s does not match the certificate in %s %.120s", kf,
                        c->key_file, cf, c->cert_file);
      else
        rc = kt_err_set(e, KT_EINVAL, "%s %.150s: not a usable PEM private key: %s", kf,
                        c->key_file, ossl_reason("?"));
      goto fail;
    }
    ERR_clear_error();
    if (SSL_CTX_check_private_key(ctx) != 1) {
      rc = kt_err_set(e, KT_EINVAL, "%s %.120s does not match the certificate in %s %.120s", kf,
                      c->key_file, cf, c->cert_file);
      goto fail;
    }
  }
  if (c->ca_file) {
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL) != 1) {
      rc = kt_err_set(e, KT_EINVAL, "%s %.150s: no usable CA certificate: %s", af, c->ca_file,
                      ossl_reason("?"));
      goto fail;
    }
    if (c->server) {
      STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(c->ca_file);
      if (names)
        SSL_CTX_set_client_CA_list(ctx, names);
    }
  } else if (!c->server && !c->skip_verify) {
    SSL_CTX_set_default_verify_paths(ctx); /* the system's CAs, as Go */
  }
  if (c->crl_file && (rc = load_crls(p, c->crl_file, rf, e)))
    goto fail;
  int mode = SSL_VERIFY_NONE;
  if (c->server && c->verify_peer)
    mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  else if (!c->server && !c->skip_verify)
    mode = SSL_VERIFY_PEER;
  SSL_CTX_set_verify(ctx, mode, verify_cb);
  SSL_CTX_set_verify_depth(ctx, 10);
  if (c->server) {
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"ketch", 5);
    SSL_CTX_set_num_tickets(ctx, 0); /* clients do not resume: no ticket work */
    if (c->alpn_h2)
      SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  } else if (c->alpn_h2) {
    SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x02h2", 3);
  }
  *out = ctx;
  return 0;
fail:
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return rc;
}

/* ---- the context ---- */

struct file_sig {
  bool present;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
};

struct kt_tls_ctx {
  pthread_mutex_t mu;
  SSL_CTX *cur;
  struct kt_tls_config cfg; /* strings below are owned copies */
  struct file_sig sig[4];
  uint64_t generation;
};

static const char **cfg_file(struct kt_tls_config *c, int i) {
  return i == 0 ? &c->cert_file : i == 1 ? &c->key_file : i == 2 ? &c->ca_file : &c->crl_file;
}

static void take_sigs(const struct kt_tls_config *c, struct file_sig sig[4]) {
  const char *f[4] = {c->cert_file, c->key_file, c->ca_file, c->crl_file};
  for (int i = 0; i < 4; i++) {
    struct stat st;
    memset(&sig[i], 0, sizeof sig[i]);
    if (f[i] && stat(f[i], &st) == 0) {
      sig[i].present = true;
      sig[i].dev = st.st_dev;
      sig[i].ino = st.st_ino;
      sig[i].size = st.st_size;
      sig[i].mtime = st.st_mtim;
    }
  }
}

int kt_tls_ctx_new(const struct kt_tls_config *cfg, struct kt_tls_ctx **out, struct kt_err *e) {
  pthread_once(&once, init_once);
  struct kt_tls_ctx *t = calloc(1, sizeof *t);
  kt_assert(t);
  t->cfg = *cfg;
  struct kt_tls_config *c = &t->cfg;
  c->cert_file = dupstr(cfg->cert_file);
  c->key_file = dupstr(cfg->key_file);
  c->ca_file = dupstr(cfg->ca_file);
  c->crl_file = dupstr(cfg->crl_file);
  c->allowed_cn = dupstr(cfg->allowed_cn);
  c->allowed_hostname = dupstr(cfg->allowed_hostname);
  c->cipher_suites = dupstr(cfg->cipher_suites);
  c->cert_flag = dupstr(cfg->cert_flag);
  c->key_flag = dupstr(cfg->key_flag);
  c->ca_flag = dupstr(cfg->ca_flag);
  c->crl_flag = dupstr(cfg->crl_flag);
  pthread_mutex_init(&t->mu, NULL);
  take_sigs(c, t->sig);
  int rc = build(c, &t->cur, e);
  if (rc) {
    kt_tls_ctx_free(t);
    return rc;
  }
  t->generation = 1;
  *out = t;
  return 0;
}

int kt_tls_ctx_reload(struct kt_tls_ctx *t, struct kt_err *e) {
  struct file_sig sig[4];
  take_sigs(&t->cfg, sig);
  SSL_CTX *n = NULL;
  int rc = build(&t->cfg, &n, e);
  if (rc)
    return rc;
  pthread_mutex_lock(&t->mu);
  SSL_CTX *old = t->cur;
  t->cur = n;
  memcpy(t->sig, sig, sizeof sig);
  t->generation++;
  pthread_mutex_unlock(&t->mu);
  SSL_CTX_free(old); /* live connections hold their own references */
  return 0;
}

bool kt_tls_ctx_files_changed(const struct kt_tls_ctx *t) {
  struct file_sig now[4];
  take_sigs(&t->cfg, now);
  for (int i = 0; i < 4; i++) {
    const struct file_sig *a = &t->sig[i], *b = &now[i];
    if (!*cfg_file((struct kt_tls_config *)&t->cfg, i))
      continue;
    if (a->present != b->present || a->dev != b->dev || a->ino != b->ino || a->size != b->size ||
        a->mtime.tv_sec != b->mtime.tv_sec || a->mtime.tv_nsec != b->mtime.tv_nsec)
      return true;
  }
  return false;
}

uint64_t kt_tls_ctx_generation(const struct kt_tls_ctx *t) { return t->generation; }
const struct kt_tls_config *kt_tls_ctx_config(const struct kt_tls_ctx *t) { return &t->cfg; }

void kt_tls_ctx_free(struct kt_tls_ctx *t) {
  if (!t)
    return;
  SSL_CTX_free(t->cur);
  struct kt_tls_config *c = &t->cfg;
  const char *s[] = {c->cert_file,  c->key_file,         c->ca_file,       c->crl_file,
                     c->allowed_cn, c->allowed_hostname, c->cipher_suites, c->cert_flag,
                     c->key_flag,   c->ca_flag,          c->crl_flag};
  for (size_t i = 0; i < KT_ARRAY_LEN(s); i++)
    free((char *)s[i]);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* ---- auto-tls ---- */

static int write_pem(const char *path, int mode, int (*fn)(BIO *, void *), void *obj,
                     struct kt_err *e) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return kt_err_set(e, KT_EIO, "auto-tls: cannot create %.150s: %s", tmp, strerror(errno));
  BIO *b = BIO_new_fd(fd, BIO_CLOSE);
  int ok = b && fn(b, obj) == 1 && BIO_flush(b) == 1 && fsync(fd) == 0;
  BIO_free(b);
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return kt_err_set(e, KT_EIO, "auto-tls: cannot write %.150s", path);
  }
  return 0;
}

static int pem_key(BIO *b, void *k) {
  return PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
}
static int pem_cert(BIO *b, void *x) { return PEM_write_bio_X509(b, x); }

static bool add_ext(X509 *x, int nid, const char *value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
  bool ok = ext && X509_add_ext(x, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

int kt_tls_selfcert(const char *dir, const char *const *hosts, size_t n_hosts, struct kt_err *e) {
  pthread_once(&once, init_once);
  char cert[4096], key[4096];
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  if (access(cert, R_OK) == 0 && access(key, R_OK) == 0)
    return 0; /* made by an earlier start: reused, as etcd */
  /* mkdir -p */
  char path[4096];
  snprintf(path, sizeof path, "%s", dir);
  for (char *s = path + 1;; s++) {
    if (*s == '/' || !*s) {
      char ch = *s;
      *s = 0;
      if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return kt_err_set(e, KT_EIO, "auto-tls: cannot create %.150s: %s", path, strerror(errno));
      *s = ch;
      if (!ch)
        break;
    }
  }
  ERR_clear_error();
  EVP_PKEY *pk = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  char san[2048] = "";
  for (size_t i = 0; i < n_hosts; i++) {
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, hosts[i], ip) == 1 || inet_pton(AF_INET6, hosts[i], ip) == 1;
    size_t u = strlen(san);
    snprintf(san + u, sizeof san - u, "%s%s:%s", u ? "," : "", is_ip ? "IP" : "DNS", hosts[i]);
  }
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
  int rc = 0;
  if (!pk || !x || !bn || X509_set_version(x, 2) != 1 ||
      !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
      !X509_gmtime_adj(X509_getm_notBefore(x), 0) ||
      !X509_gmtime_adj(X509_getm_notAfter(x), 365L * 24 * 3600) || X509_set_pubkey(x, pk) != 1 ||
      X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "O", MBSTRING_ASC,
                                 (const unsigned char *)"ketch", -1, -1, 0) != 1 ||
      X509_set_issuer_name(x, X509_get_subject_name(x)) != 1 ||
      !add_ext(x, NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(x, NID_key_usage, "critical,digitalSignature,keyEncipherment") ||
      !add_ext(x, NID_ext_key_usage, "serverAuth,clientAuth") ||
      (san[0] && !add_ext(x, NID_subject_alt_name, san)) || X509_sign(x, pk, EVP_sha256()) == 0)
    rc = kt_err_set(e, KT_EINTERNAL, "auto-tls: cannot make a certificate: %s", ossl_reason("?"));
  if (!rc)
    rc = write_pem(key, 0600, pem_key, pk, e);
  if (!rc)
    rc = write_pem(cert, 0644, pem_cert, x, e);
  BN_free(bn);
  X509_free(x);
  EVP_PKEY_free(pk);
  ERR_clear_error();
  if (!rc)
    kt_log(KT_LOG_INFO, "tls", "auto-tls: created a self-signed certificate %s (hosts %s)", cert,
           san[0] ? san : "none");
  return rc;
}

bool kt_tls_budget_room(const struct kt_tls_budget *b) {
  return b->steps < KT_TLS_HANDSHAKES_PER_TURN && b->credit_s > 0;
}

void kt_tls_budget_spent(struct kt_tls_budget *b, double secs) {
  b->steps++;
  b->credit_s -= secs;
}

void kt_tls_budget_turn(struct kt_tls_budget *b, double now_s) {
  double burst = KT_TLS_HANDSHAKE_BURST_US / 1e6;
  if (b->last_s == 0)
    b->credit_s = burst;
  else if (now_s > b->last_s)
    b->credit_s += (now_s - b->last_s) * KT_TLS_HANDSHAKE_SHARE;
  if (b->credit_s > burst)
    b->credit_s = burst;
  b->last_s = now_s;
  b->steps = 0;
}

double kt_tls_budget_wait_s(const struct kt_tls_budget *b) {
  if (b->credit_s > 0)
    return 0;
  return -b->credit_s / KT_TLS_HANDSHAKE_SHARE + 0.0001;
}

int kt_tls_sniff(const uint8_t *p, size_t n) {
  if (n == 0)
    return -1;
  if (p[0] != 0x16) /* handshake record; a ketch frame or "PRI *" never starts so */
    return 0;
  if (n < 2)
    return -1;
  return p[1] == 0x03 ? 1 : 0;
}

/* ---- the transport: plain TCP ---- */

struct kt_io_ops {
  int (*handshake)(struct kt_io *io, struct kt_err *e);
  ssize_t (*read)(struct kt_io *io, void *buf, size_t n, struct kt_err *e);
  ssize_t (*write)(struct kt_io *io, const void *buf, size_t n, struct kt_err *e);
  bool (*pending)(const struct kt_io *io);
  void (*close)(struct kt_io *io);
};

enum {
  F_HS = 1,        /* handshake not done */
  F_HS_WANT_W = 2, /* the handshake waits for writable (else readable) */
  F_R_WANT_W = 4,  /* the last read waits for writable */
  F_W_WANT_R = 8,  /* the last write waits for readable */
  F_SNIFFED = 16,  /* server: the first byte was a TLS record */
  F_FATAL = 32,    /* a fatal TLS error: no close_notify */
  F_SERVER = 64,
};

static int plain_handshake(struct kt_io *io, struct kt_err *e) {
  (void)io, (void)e;
  return 1;
}

static ssize_t sys_fail(struct kt_err *e, const char *op, int err) {
  kt_err_set(e, KT_EIO, "%s: %s", op, strerror(err));
  return KT_IO_ERROR;
}

static ssize_t plain_read(struct kt_io *io, void *buf, size_t n, struct kt_err *e) {
  for (;;) {
    ssize_t r = recv(io->fd, buf, n, 0);
    if (r >= 0)
      return r;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return KT_IO_AGAIN;
    return sys_fail(e, "read", errno);
  }
}

static ssize_t plain_write(struct kt_io *io, const void *buf, size_t n, struct kt_err *e) {
  for (;;) {
    ssize_t r = send(io->fd, buf, n, MSG_NOSIGNAL);
    if (r > 0)
      return r;
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return KT_IO_AGAIN;
    return sys_fail(e, "write", r < 0 ? errno : EIO);
  }
}

static bool plain_pending(const struct kt_io *io) {
  (void)io;
  return false;
}

static void plain_close(struct kt_io *io) {
  if (io->fd >= 0)
    close(io->fd);
  io->fd = -1;
}

static const struct kt_io_ops plain_ops = {plain_handshake, plain_read, plain_write, plain_pending,
                                           plain_close};

/* ---- the transport: TLS ---- */

/* Close with FIN, not RST (which unread input causes). */
static void drain(int fd) {
  shutdown(fd, SHUT_WR);
  uint8_t junk[4096];
  for (int i = 0; i < 16 && recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++)
    ;
}

static void clear_verify(struct kt_io *io) {
  if (io->bad_cert)
    X509_free(io->bad_cert);
  io->bad_cert = NULL;
  io->verify_err = io->verify_note = 0;
}

static const char *alert_hint(int alert) {
  switch (alert) {
  case SSL_AD_UNKNOWN_CA:
    return " (it does not trust the CA that signed our certificate)";
  case SSL_AD_CERTIFICATE_EXPIRED:
    return " (our certificate has expired)";
  case SSL_AD_CERTIFICATE_REVOKED:
    return " (our certificate is revoked)";
  case SSL_AD_CERTIFICATE_REQUIRED:
    return " (it requires a client certificate)";
  case SSL_AD_BAD_CERTIFICATE:
    return " (it refused our certificate)";
  case SSL_AD_HANDSHAKE_FAILURE:
    return " (it refused our certificate, or no parameters in common)";
  case SSL_AD_PROTOCOL_VERSION:
    return " (no TLS version in common)";
  case SSL_AD_NO_APPLICATION_PROTOCOL:
    return " (no ALPN protocol in common)";
  default:
    return "";
  }
}

/* One line for a failed SSL_* call (ret its return value). */
static ssize_t tls_fail(struct kt_io *io, struct kt_err *e, int ret, const char *op) {
  SSL *ssl = io->ssl;
  bool server = io->flags & F_SERVER;
  int saved_errno = errno;
  int err = SSL_get_error(ssl, ret);
  unsigned long le = ERR_peek_last_error();
  int reason = le ? ERR_GET_REASON(le) : 0;
  const char *other = server ? "the client" : "the server";
  io->flags |= F_FATAL;
  const struct policy *p = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), policy_idx);
  if (io->verify_err) {
    char subj[200] = "", iss[200] = "", cn[128] = "";
    X509 *x = io->bad_cert;
    if (x) {
      name_of(X509_get_subject_name(x), subj, sizeof subj);
      name_of(X509_get_issuer_name(x), iss, sizeof iss);
      cn_of(x, cn, sizeof cn);
    }
    const char *who = server ? "client certificate rejected" : "server certificate rejected";
    int v = io->verify_err;
    if (io->verify_note == NOTE_CN)
      kt_err_set(e, KT_EPROTO, "%s: its CN \"%s\" is not the allowed CN \"%s\"", who, cn,
                 p && p->allowed_cn ? p->allowed_cn : "");
    else if (io->verify_note == NOTE_HOST)
      kt_err_set(e, KT_EPROTO, "%s: it is not valid for the allowed hostname \"%s\" (subject %s)",
                 who, p && p->allowed_host ? p->allowed_host : "", subj);
    else if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
      kt_err_set(e, KT_EPROTO, "%s: %s: it is not valid for the address dialled (subject %s)", who,
                 X509_verify_cert_error_string(v), subj);
    else if (v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
             v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
             v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
             v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
             v == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE)
      kt_err_set(e, KT_EPROTO, "%s: %s: not signed by a CA in %s (subject %s, issuer %s)", who,
                 X509_verify_cert_error_string(v), p ? p->ca_flag : "the CA file", subj, iss);
    else
      kt_err_set(e, KT_EPROTO, "%s: %s (subject %s, issuer %s)", who,
                 X509_verify_cert_error_string(v), subj, iss);
  } else if (err == SSL_ERROR_SYSCALL && !le) {
    if (saved_errno && saved_errno != EAGAIN)
      kt_err_set(e, KT_EIO, "TLS %s: %s", op, strerror(saved_errno));
    else if (io->flags & F_HS)
      kt_err_set(e, KT_EPROTO,
                 server ? "the client closed the connection during the TLS handshake"
                        : "the server closed the connection during the TLS handshake (is it a "
                          "plaintext http:// port?)");
    else
      kt_err_set(e, KT_ECLOSED, "TLS %s: connection closed", op);
  } else if (reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
    int alert = reason - SSL_AD_REASON_OFFSET;
    kt_err_set(e, KT_EPROTO, "%s refused the TLS handshake: %s%s", other, ossl_reason("alert"),
               alert_hint(alert));
  } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
             reason == SSL_R_UNEXPECTED_MESSAGE || reason == SSL_R_HTTP_REQUEST) {
    kt_err_set(e, KT_EPROTO,
               server ? "the client does not speak TLS (%s)"
                      : "the server did not answer in TLS (%s; is it a plaintext http:// port?)",
               ossl_reason("?"));
  } else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    kt_err_set(e, KT_EPROTO,
               "the client presented no certificate (client certificate "
               "authentication is on)");
  } else if (reason == SSL_R_NO_SHARED_CIPHER || reason == SSL_R_UNSUPPORTED_PROTOCOL ||
             reason == SSL_R_NO_PROTOCOLS_AVAILABLE) {
    kt_err_set(e, KT_EPROTO, "no TLS version or cipher suite in common with %s (%s)", other,
               ossl_reason("?"));
  } else {
    kt_err_set(e, KT_EPROTO, "TLS %s failed: %s", op, ossl_reason("unknown error"));
  }
  clear_verify(io);
  ERR_clear_error();
  return KT_IO_ERROR;
}

static int tls_handshake(struct kt_io *io, struct kt_err *e) {
  if (!(io->flags & F_HS))
    return 1;
  if ((io->flags & F_SERVER) && !(io->flags & F_SNIFFED)) {
    uint8_t b[1]; /* one byte decides: waiting for a second could spin on a 1-byte input */
    ssize_t r = recv(io->fd, b, sizeof b, MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      io->flags &= (uint8_t)~F_HS_WANT_W;
      return KT_IO_AGAIN;
    }
    if (r < 0)
      return (int)sys_fail(e, "read", errno);
    if (r == 0) {
      kt_err_set(e, KT_ECLOSED, "the client closed the connection before the TLS handshake");
      return KT_IO_ERROR;
    }
    if (b[0] != 0x16) { /* not a TLS handshake record */
      kt_err_set(e, KT_EPROTO, "plaintext bytes on a TLS port (the client does not speak TLS)");
      return KT_IO_PLAINTEXT;
    }
    io->flags |= F_SNIFFED;
  }
  ERR_clear_error();
  errno = 0;
  int r = SSL_do_handshake(io->ssl);
  if (r == 1) {
    io->flags &= (uint8_t) ~(F_HS | F_HS_WANT_W);
    clear_verify(io);
    return 1;
  }
  int err = SSL_get_error(io->ssl, r);
  if (err == SSL_ERROR_WANT_READ) {
    io->flags &= (uint8_t)~F_HS_WANT_W;
    return KT_IO_AGAIN;
  }
  if (err == SSL_ERROR_WANT_WRITE) {
    io->flags |= F_HS_WANT_W;
    return KT_IO_AGAIN;
  }
  return (int)tls_fail(io, e, r, "handshake");
}

static ssize_t tls_read(struct kt_io *io, void *buf, size_t n, struct kt_err *e) {
  if (io->flags & F_HS) {
    int h = tls_handshake(io, e);
    if (h != 1)
      return h == KT_IO_PLAINTEXT ? KT_IO_ERROR : h;
  }
  ERR_clear_error();
  errno = 0;
  int r = SSL_read(io->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  if (r > 0) {
    io->flags &= (uint8_t)~F_R_WANT_W;
    return r;
  }
  switch (SSL_get_error(io->ssl, r)) {
  case SSL_ERROR_WANT_READ:
    io->flags &= (uint8_t)~F_R_WANT_W;
    return KT_IO_AGAIN;
  case SSL_ERROR_WANT_WRITE:
    io->flags |= F_R_WANT_W;
    return KT_IO_AGAIN;
  case SSL_ERROR_ZERO_RETURN:
    return 0; /* close_notify, or EOF (SSL_OP_IGNORE_UNEXPECTED_EOF) */
  default:
    return tls_fail(io, e, r, "read");
  }
}

static ssize_t tls_write(struct kt_io *io, const void *buf, size_t n, struct kt_err *e) {
  if (io->flags & F_HS) {
    int h = tls_handshake(io, e);
    if (h != 1)
      return h == KT_IO_PLAINTEXT ? KT_IO_ERROR : h;
  }
  ERR_clear_error();
  errno = 0;
  int r = SSL_write(io->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  if (r > 0) {
    io->flags &= (uint8_t)~F_W_WANT_R;
    return r;
  }
  switch (SSL_get_error(io->ssl, r)) {
  case SSL_ERROR_WANT_WRITE:
    io->flags &= (uint8_t)~F_W_WANT_R;
    return KT_IO_AGAIN;
  case SSL_ERROR_WANT_READ:
    io->flags |= F_W_WANT_R;
    return KT_IO_AGAIN;
  default:
    return tls_fail(io, e, r, "write");
  }
}

static bool tls_pending(const struct kt_io *io) {
  return !(io->flags & F_HS) && SSL_has_pending(io->ssl);
}

static void tls_close(struct kt_io *io) {
  if (io->ssl) {
    if (!(io->flags & (F_HS | F_FATAL))) {
      ERR_clear_error();
      SSL_shutdown(io->ssl); /* one try: a close_notify if the socket takes it */
    } else if ((io->flags & (F_SERVER | F_FATAL)) == (F_SERVER | F_FATAL) && io->fd >= 0) {
      /* A refused handshake: our alert is on its way. With TLS 1.3 the
       * client may already have sent its first request: see
       * kt_io_close_refused. */
      drain(io->fd);
    }
    SSL_free(io->ssl);
    io->ssl = NULL;
  }
  clear_verify(io);
  ERR_clear_error();
  plain_close(io);
}

static const struct kt_io_ops tls_ops = {tls_handshake, tls_read, tls_write, tls_pending,
                                         tls_close};

/* ---- the transport: public calls ---- */

void kt_io_init_plain(struct kt_io *io, int fd) {
  memset(io, 0, sizeof *io);
  io->ops = &plain_ops;
  io->fd = fd;
}

int kt_io_init_tls(struct kt_io *io, int fd, struct kt_tls_ctx *ctx, const char *server_name,
                   struct kt_err *e) {
  kt_io_init_plain(io, fd);
  const struct kt_tls_config *c = &ctx->cfg;
  bool verify = !c->server && !c->skip_verify;
  if (verify && (!server_name || !*server_name))
    return kt_err_set(e, KT_EINVAL, "TLS: no server name to verify the certificate against");
  ERR_clear_error();
  pthread_mutex_lock(&ctx->mu);
  SSL *ssl = SSL_new(ctx->cur);
  pthread_mutex_unlock(&ctx->mu);
  if (!ssl)
    return kt_err_set(e, KT_ENOMEM, "TLS: cannot create a connection: %s", ossl_reason("?"));
  BIO *bio = BIO_new(sock_method);
  if (!bio) {
    SSL_free(ssl);
    return kt_err_set(e, KT_ENOMEM, "TLS: cannot attach the socket: %s", ossl_reason("?"));
  }
  BIO_set_data(bio, (void *)(intptr_t)fd);
  SSL_set_bio(ssl, bio, bio); /* one reference, owned by ssl */
  SSL_set_app_data(ssl, io);
  if (c->server) {
    SSL_set_accept_state(ssl);
    io->flags = F_SERVER;
  } else {
    SSL_set_connect_state(ssl);
    unsigned char ip[16];
    bool is_ip = server_name && (inet_pton(AF_INET, server_name, ip) == 1 ||
                                 inet_pton(AF_INET6, server_name, ip) == 1);
    if (server_name && *server_name && !is_ip)
      SSL_set_tlsext_host_name(ssl, server_name);
    if (verify) {
      int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name)
                     : SSL_set1_host(ssl, server_name);
      if (ok != 1) {
        SSL_free(ssl);
        return kt_err_set(e, KT_EINVAL, "TLS: bad server name \"%.100s\"", server_name);
      }
    }
  }
  io->flags |= F_HS;
  io->ssl = ssl;
  io->ops = &tls_ops;
  ERR_clear_error();
  return 0;
}

bool kt_io_is_tls(const struct kt_io *io) { return io->ssl != NULL; }
bool kt_io_ready(const struct kt_io *io) { return !(io->flags & F_HS); }

int kt_io_handshake(struct kt_io *io, struct kt_err *e) { return io->ops->handshake(io, e); }

void kt_io_to_plain(struct kt_io *io) {
  if (io->ssl)
    SSL_free(io->ssl);
  clear_verify(io);
  int fd = io->fd;
  kt_io_init_plain(io, fd);
}

ssize_t kt_io_read(struct kt_io *io, void *buf, size_t n, struct kt_err *e) {
  return io->ops->read(io, buf, n, e);
}

ssize_t kt_io_write(struct kt_io *io, const void *buf, size_t n, struct kt_err *e) {
  return io->ops->write(io, buf, n, e);
}

bool kt_io_pending(const struct kt_io *io) { return io->ops->pending(io); }

int kt_io_events(const struct kt_io *io, bool want_read, bool want_write) {
  if (io->flags & F_HS)
    return io->flags & F_HS_WANT_W ? KT_IO_WRITE : KT_IO_READ;
  int ev = 0;
  if (want_read)
    ev |= io->flags & F_R_WANT_W ? KT_IO_WRITE : KT_IO_READ;
  if (want_write)
    ev |= io->flags & F_W_WANT_R ? KT_IO_READ : KT_IO_WRITE;
  return ev;
}

void kt_io_move(struct kt_io *dst, struct kt_io *src) {
  *dst = *src;
  memset(src, 0, sizeof *src);
  src->fd = -1;
}

void kt_io_close(struct kt_io *io) {
  if (io->ops)
    io->ops->close(io);
  else if (io->fd >= 0)
    close(io->fd);
  io->fd = -1;
}

void kt_io_close_refused(struct kt_io *io) {
  if (io->fd >= 0 && !io->ssl)
    drain(io->fd);
  kt_io_close(io);
}

size_t kt_io_peer_cn(const struct kt_io *io, char *buf, size_t n) {
  buf[0] = 0;
  if (!io->ssl || (io->flags & F_HS))
    return 0;
  X509 *x = SSL_get0_peer_certificate(io->ssl);
  if (!x || SSL_get_verify_result(io->ssl) != X509_V_OK)
    return 0;
  cn_of(x, buf, n);
  return strlen(buf);
}

const char *kt_io_version(const struct kt_io *io) {
  return io->ssl ? SSL_get_version(io->ssl) : "plain";
}

size_t kt_io_alpn(const struct kt_io *io, char *buf, size_t n) {
  buf[0] = 0;
  if (!io->ssl)
    return 0;
  const unsigned char *p = NULL;
  unsigned int len = 0;
  SSL_get0_alpn_selected(io->ssl, &p, &len);
  if (!p || len + 1 > n)
    return 0;
  memcpy(buf, p, len);
  buf[len] = 0;
  return len;
}
