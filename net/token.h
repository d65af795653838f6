/* net/token.h — the auth tokens a member hands out at AUTHENTICATE and
 * takes back on other connections (etcd's --auth-token).
 *
 *   simple   32 hex characters (16 random bytes) naming an entry in this
 *            member's table: user, auth revision, last use. Valid on this
 *            member only, until unused for the TTL (--auth-token-ttl, 300 s
 *            as etcd; each use renews it), or until the user's password
 *            changes or the user is deleted (kt_tokens_drop_user). The table
 *            is bounded (max_tokens): beyond it the least recently used goes.
 *   signed   "kt1." base64url(payload) "." base64url(Ed25519 signature of
 *            payload); payload = u64 auth revision | u64 expiry (unix
 *            seconds) | user. Every member holding the public key verifies
 *            it without shared state; a member with the private key issues
 *            it. Keys are Ed25519 PEM files as `openssl genpkey -algorithm
 *            ed25519` writes them (and `openssl pkey -pubout`).
 *
 * Time is the caller's (now_ms: CLOCK_REALTIME milliseconds for signed
 * tokens' expiry, any monotonic clock for simple ones: the caller uses one
 * consistently). Owned by the state thread; no locks.
 */
#ifndef KT_TOKEN_H
#define KT_TOKEN_H

#include "../core/base.h"

#define KT_TOKEN_MAX 512 /* longest token text (a 256-byte user name, signed) */

enum kt_token_kind { KT_TOKEN_SIMPLE = 0, KT_TOKEN_SIGNED = 1 };

struct kt_token_opts {
  int kind;             /* enum kt_token_kind */
  uint32_t ttl_s;       /* 0: 300 */
  size_t max_tokens;    /* simple: 0: 65536 */
  const char *priv_key; /* signed: PEM file (NULL: verify only) */
  const char *pub_key;  /* signed: PEM file (NULL: derived from priv_key) */
};

struct kt_token_info {
  char user[257];
  uint64_t auth_revision;
  int64_t expires_ms; /* signed: its expiry (unix ms); simple: 0 (see the TTL) */
};

struct kt_tokens;

/* Reads the key files; errors name the file and what is wrong with it. */
int kt_tokens_new(const struct kt_token_opts *o, struct kt_tokens **out, struct kt_err *e);
void kt_tokens_free(struct kt_tokens *t);
/* A new token for user into out (NUL-terminated), and its expiry into
 * *expires_ms when not NULL (as kt_token_info's: 0 for a simple one).
 * KT_EINVAL for a user name over 256 bytes; KT_EUNSUPPORTED for a
 * verify-only signed setup. */
int kt_tokens_issue(struct kt_tokens *t, struct kt_bytes user, uint64_t auth_revision,
                    int64_t now_ms, char out[KT_TOKEN_MAX], int64_t *expires_ms);
/* 0 and *info, or KT_EINVALIDTOKEN (unknown, expired, malformed, bad
 * signature). A simple token's use renews it. */
int kt_tokens_check(struct kt_tokens *t, struct kt_bytes token, int64_t now_ms,
                    struct kt_token_info *info);
/* Simple tokens of this user stop working (its password changed, it was
 * deleted). Signed ones cannot be recalled: the auth revision moved, which
 * refuses them (EAUTHOLDREVISION) until the client authenticates again. */
void kt_tokens_drop_user(struct kt_tokens *t, struct kt_bytes user);
size_t kt_tokens_count(const struct kt_tokens *t);

#endif
