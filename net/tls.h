/* net/tls.h — TLS on ketch's links (client, peer, the gRPC bridge) behind one
 * transport table, so that callers never see OpenSSL.
 *
 * Owns two things:
 *   struct kt_tls_ctx  one role's TLS settings (a listener's, or a dialer's):
 *                      certificate, key, CA bundle, CRL, verification policy,
 *                      versions and cipher suites, built into an SSL_CTX.
 *                      kt_tls_ctx_reload builds a whole new SSL_CTX from the
 *                      same files on the side and swaps it in only if every
 *                      step succeeded; connections keep the SSL_CTX they
 *                      started with (OpenSSL counts the references), so a
 *                      reload never disturbs an established connection.
 *   struct kt_io       one connection's transport: a non-blocking socket,
 *                      plain TCP or TLS, reached through one table of
 *                      handshake / read / write / pending / close. Callers
 *                      (net/server.c, net/peer.c, libketch, ketch-grpc) use
 *                      only these calls and kt_io_events, whichever kind the
 *                      connection is.
 *
 * Non-blocking TLS (the model: redis's connection.h / tls.c, nginx's
 * ngx_event_openssl.c):
 *   - A call that cannot finish returns KT_IO_AGAIN and records what it waits
 *     for: a read may wait for the socket to be writable (WANT_WRITE) and a
 *     write for it to be readable (WANT_READ). kt_io_events() derives the
 *     poll mask from what the caller wants (read, write) and those flags;
 *     that is the only place the mask is computed.
 *   - OpenSSL reads ahead (one recv() takes every record that arrived), and
 *     bytes it already took off the socket raise no poll event: after a read
 *     a caller asks kt_io_pending() — true: read again (no system call is
 *     needed) or come back before sleeping (the server keeps such
 *     connections on a list drained every loop turn); false: wait for the
 *     next readable event (reading on to KT_IO_AGAIN would only cost a
 *     recv() that finds nothing).
 *   - ERR_clear_error() runs before every SSL_* call, so an error message
 *     always belongs to the call that failed. SSL_OP_IGNORE_UNEXPECTED_EOF is
 *     set: the framing above TLS notices a truncated message.
 *   - A server connection sniffs its first byte before OpenSSL reads
 *     anything: a client that speaks plaintext to a TLS port is recognised
 *     (KT_IO_PLAINTEXT) so the caller can answer it in its own protocol.
 *
 * Threads: a kt_io belongs to one thread at a time (whoever polls its fd); a
 * kt_tls_ctx may be shared: the swap on reload and the SSL_new of a new
 * connection take the context's mutex, nothing else does. Nothing here uses
 * libev, so libketch links this file too.
 *
 * Memory: a plain kt_io is the struct alone. A TLS one adds OpenSSL's SSL
 * object (~6 KiB at creation; the 16 KiB record buffers are allocated as the
 * handshake reads and freed when idle, SSL_MODE_RELEASE_BUFFERS). Nothing
 * else is allocated per connection here.
 *
 * Errors: every failure fills a struct kt_err with one line a person can act
 * on: the file and flag at start ("--key-file /x/k.pem: cannot read: No such
 * file or directory"), and for a connection what the other side did or what
 * was wrong with its certificate ("client certificate rejected: certificate
 * has expired (subject CN=c1, issuer CN=ketch test CA)", "the server refused
 * our certificate: tlsv1 alert unknown ca").
 */
#ifndef KT_TLS_H
#define KT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../core/base.h"

enum { KT_TLS_V12 = 12, KT_TLS_V13 = 13 };

/* How long a handshake may take in all. */
#define KT_TLS_HANDSHAKE_MS 10000

/* A listener's handshake budget (struct kt_tls_budget): at most
 * KT_TLS_HANDSHAKES_PER_TURN handshake steps per loop turn, and handshakes
 * take at most KT_TLS_HANDSHAKE_SHARE of the loop's time, with bursts of up
 * to KT_TLS_HANDSHAKE_BURST_US (a token bucket of time; one step may overrun
 * it: a step verifying a client certificate chain costs 0.5-2 ms of CPU
 * here). Handshakes over the budget wait for a later turn, so a storm of
 * thousands of new clients is served in a second or two while the requests
 * of established connections keep their latency. */
#define KT_TLS_HANDSHAKES_PER_TURN 8
#define KT_TLS_HANDSHAKE_SHARE 0.25
#define KT_TLS_HANDSHAKE_BURST_US 2000
struct kt_tls_budget {
  double credit_s, last_s; /* unspent handshake time; when it was last topped up */
  unsigned steps;          /* handshake steps in this turn */
};
/* Whether one more handshake step fits now. */
bool kt_tls_budget_room(const struct kt_tls_budget *b);
/* A step took `secs`. */
void kt_tls_budget_spent(struct kt_tls_budget *b, double secs);
/* A new loop turn at time now_s (seconds, any monotonic clock): the step
 * count restarts and the credit grows by the share of the time since. */
void kt_tls_budget_turn(struct kt_tls_budget *b, double now_s);
/* How long until a waiting handshake may run: 0 when only this turn's step
 * count is spent (the next turn may: keep the loop turning), else seconds
 * until the credit is positive again (sleep that long: no busy loop). */
double kt_tls_budget_wait_s(const struct kt_tls_budget *b);
/* OpenSSL's read buffer (read ahead): what one recv() may take. Allocated
 * while a connection has bytes to read, released when it is drained. */
#define KT_TLS_READ_BUFFER (64 * 1024)

/* One role's settings. Strings are copied by kt_tls_ctx_new. */
struct kt_tls_config {
  bool server; /* a listener's context (else a dialer's) */
  /* PEM files. cert (a chain: the leaf first) and key go together; a
   * dialer without them presents no certificate. */
  const char *cert_file, *key_file;
  const char *ca_file;  /* trusted CAs for the other side's certificate */
  const char *crl_file; /* revoked certificates of the other side (PEM CRLs) */
  /* server: require a client certificate that verifies against ca_file
   * (--client-cert-auth; etcd also requires one when --trusted-ca-file is
   * given). client: ignored (a dialer always verifies unless skip_verify). */
  bool verify_peer;
  bool skip_verify; /* client: accept any server certificate (auto-tls, tests) */
  /* The other side's certificate must have this Common Name / be valid for
   * this host name or IP (etcd's --peer-cert-allowed-cn/-hostname,
   * --client-cert-allowed-hostname). Mutually exclusive, as etcd. */
  const char *allowed_cn, *allowed_hostname;
  const char *cipher_suites;    /* Go/IANA names, comma-separated; NULL: OpenSSL's */
  int min_version, max_version; /* KT_TLS_V12 / KT_TLS_V13; 0: 1.2 and 1.3 */
  bool alpn_h2;                 /* server: select "h2"; client: offer "h2" */
  /* Names of the flags in messages (NULL: "cert file", "key file", "CA
   * file", "CRL file"). */
  const char *cert_flag, *key_flag, *ca_flag, *crl_flag;
};

struct kt_tls_ctx;

/* Build a context from cfg, reading every file now. Errors (KT_EINVAL, e
 * names the flag and the file): a file missing or unreadable, a key that
 * does not match the certificate, bad PEM, an unknown cipher suite, bad
 * versions. */
int kt_tls_ctx_new(const struct kt_tls_config *cfg, struct kt_tls_ctx **out, struct kt_err *e);
/* Re-read every file into a new SSL_CTX; swap it in only if all of it
 * succeeded (else the old one stays and e says why). New connections use it;
 * existing ones keep theirs. */
int kt_tls_ctx_reload(struct kt_tls_ctx *t, struct kt_err *e);
/* Whether any file changed (mtime, size, inode) since the last successful
 * build; a file that vanished counts as changed. */
bool kt_tls_ctx_files_changed(const struct kt_tls_ctx *t);
/* How many successful builds (1 after kt_tls_ctx_new). */
uint64_t kt_tls_ctx_generation(const struct kt_tls_ctx *t);
const struct kt_tls_config *kt_tls_ctx_config(const struct kt_tls_ctx *t);
void kt_tls_ctx_free(struct kt_tls_ctx *t);

/* etcd's --auto-tls / --peer-auto-tls: a self-signed certificate (ECDSA
 * P-256, one year, serverAuth + clientAuth, the hosts as IP or DNS subject
 * alternative names) in dir/cert.pem and dir/key.pem (0600), created with
 * dir if absent and reused if both files exist. */
int kt_tls_selfcert(const char *dir, const char *const *hosts, size_t n_hosts, struct kt_err *e);

/* Whether the first bytes p[0..n) of a connection are a TLS handshake
 * record (a ClientHello): 1 yes, 0 no, -1 too few bytes to tell. Pure. */
int kt_tls_sniff(const uint8_t *p, size_t n);

/* ---- the transport ---- */

enum {
  KT_IO_AGAIN = -1,     /* would block: wait for kt_io_events */
  KT_IO_ERROR = -2,     /* failed: e says why; close the connection */
  KT_IO_PLAINTEXT = -3, /* handshake (server): the client speaks plaintext */
};
enum { KT_IO_READ = 1, KT_IO_WRITE = 2 }; /* kt_io_events bits */

struct kt_io_ops;
struct kt_io {
  const struct kt_io_ops *ops;
  int fd;
  void *ssl; /* OpenSSL's SSL for a TLS connection; NULL for plain TCP */
  uint8_t flags;
  int verify_err;  /* the certificate error the verify step saw (or 0) */
  void *bad_cert;  /* that certificate (X509), for the message */
  int verify_note; /* why our policy refused it (CN, hostname, revoked) */
};

/* Moves a connection's socket and TLS state from src to dst; src is left
 * closed (closing it again does nothing). */
void kt_io_move(struct kt_io *dst, struct kt_io *src);
/* A plain TCP connection on fd (non-blocking). */
void kt_io_init_plain(struct kt_io *io, int fd);
/* A TLS connection on fd over ctx's current SSL_CTX. Server: handshake as
 * the acceptor. Client: server_name is the host the certificate must be
 * valid for (an IP address or a DNS name; also sent as SNI when a name);
 * NULL with a verifying context is refused (KT_EINVAL). Does not touch fd;
 * on error the caller still owns it. io must not move until it is closed. */
int kt_io_init_tls(struct kt_io *io, int fd, struct kt_tls_ctx *ctx, const char *server_name,
                   struct kt_err *e);
bool kt_io_is_tls(const struct kt_io *io);
/* Whether the handshake is done (always true for plain TCP). */
bool kt_io_ready(const struct kt_io *io);

/* Advance the handshake: 1 done, KT_IO_AGAIN, KT_IO_ERROR (e filled), or
 * KT_IO_PLAINTEXT (server: the first byte is not a TLS record; nothing was
 * consumed, so the caller may serve the connection as plain TCP after
 * kt_io_to_plain). Plain TCP: 1 at once. */
int kt_io_handshake(struct kt_io *io, struct kt_err *e);
/* Turn a server connection whose handshake said KT_IO_PLAINTEXT into plain
 * TCP (frees the SSL object). */
void kt_io_to_plain(struct kt_io *io);
/* Read up to n bytes: > 0 bytes read; 0 when the other side closed;
 * KT_IO_AGAIN; KT_IO_ERROR (e filled). */
ssize_t kt_io_read(struct kt_io *io, void *buf, size_t n, struct kt_err *e);
/* Write up to n bytes (n > 0): bytes taken (> 0), KT_IO_AGAIN or
 * KT_IO_ERROR. After KT_IO_AGAIN, call again with the same bytes at the front
 * (the buffer may have moved and grown). */
ssize_t kt_io_write(struct kt_io *io, const void *buf, size_t n, struct kt_err *e);
/* Whether bytes wait inside TLS that no poll event will announce. */
bool kt_io_pending(const struct kt_io *io);
/* The poll events to wait for, given what the caller wants next. During the
 * handshake: what the handshake waits for, whatever the caller wants. */
int kt_io_events(const struct kt_io *io, bool want_read, bool want_write);
/* Sends a TLS close_notify if it can without waiting, frees the TLS state and
 * closes fd. The struct may be reused after. */
void kt_io_close(struct kt_io *io);
/* kt_io_close for a connection refused before it was read: shuts the
 * sending side and drops the unread input first, so the other side gets the
 * last bytes written (an answer, an alert) and then FIN, not an RST that
 * could make it lose them. */
void kt_io_close_refused(struct kt_io *io);

/* After the handshake: the verified peer certificate's Common Name ("" if
 * none) into buf; its length. */
size_t kt_io_peer_cn(const struct kt_io *io, char *buf, size_t n);
/* "TLSv1.3", or "plain". Static. */
const char *kt_io_version(const struct kt_io *io);
/* The negotiated ALPN protocol into buf ("" if none). */
size_t kt_io_alpn(const struct kt_io *io, char *buf, size_t n);

#endif
