/* net/token.c — see token.h. */
#include "token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define BUCKETS 16384
#define SIMPLE_BYTES 16

struct entry {
  uint8_t id[SIMPLE_BYTES];
  struct kt_bytes user; /* owned */
  uint64_t auth_revision;
  int64_t last_ms;
  struct entry *chain;         /* bucket chain */
  struct entry *newer, *older; /* LRU list */
};

struct kt_tokens {
  struct kt_token_opts o;
  /* simple */
  struct entry *buckets[BUCKETS];
  struct entry *newest, *oldest;
  size_t n;
  /* signed */
  bool can_sign;
  uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
};

/* ---- keys: the DER openssl writes for Ed25519, inside PEM ---- */

static const uint8_t PRIV_DER[16] = {0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                     0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
static const uint8_t PUB_DER[12] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                    0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};

/* The 32 key bytes of an Ed25519 PEM file whose DER starts with prefix. */
static int read_pem_key(const char *path, const char *label, const uint8_t *prefix, size_t plen,
                        uint8_t key[32], struct kt_err *e) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return kt_err_set(e, KT_EINVAL, "%s: cannot open: %m", path);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char begin[64], end[64];
  snprintf(begin, sizeof begin, "-----BEGIN %s-----", label);
  snprintf(end, sizeof end, "-----END %s-----", label);
  char *b = strstr(text, begin), *x = b ? strstr(b, end) : NULL;
  if (!b || !x)
    return kt_err_set(e, KT_EINVAL,
                      "%s: not a PEM %s (make one with openssl genpkey -algorithm "
                      "ed25519)",
                      path, label);
  b += strlen(begin);
  uint8_t der[128];
  size_t dlen = 0;
  if (sodium_base642bin(der, sizeof der, b, (size_t)(x - b), " \r\n\t", &dlen, NULL,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      dlen != plen + 32 || memcmp(der, prefix, plen) != 0)
    return kt_err_set(e, KT_EINVAL, "%s: not an Ed25519 key", path);
  memcpy(key, der + plen, 32);
  sodium_memzero(der, sizeof der);
  sodium_memzero(text, sizeof text);
  return 0;
}

int kt_tokens_new(const struct kt_token_opts *o, struct kt_tokens **out, struct kt_err *e) {
  if (sodium_init() < 0)
    return kt_err_set(e, KT_EINTERNAL, "libsodium did not initialize");
  struct kt_tokens *t = calloc(1, sizeof *t);
  kt_assert(t);
  t->o = *o;
  if (!t->o.ttl_s)
    t->o.ttl_s = 300;
  if (!t->o.max_tokens)
    t->o.max_tokens = 65536;
  int rc = 0;
  if (o->kind == KT_TOKEN_SIGNED) {
    uint8_t seed[32], pk[32];
    if (!o->priv_key && !o->pub_key) {
      rc = kt_err_set(e, KT_EINVAL, "--auth-token signed needs priv-key= or pub-key=");
    } else if (o->priv_key) {
      rc = read_pem_key(o->priv_key, "PRIVATE KEY", PRIV_DER, sizeof PRIV_DER, seed, e);
      if (!rc) {
        crypto_sign_seed_keypair(t->pk, t->sk, seed);
        t->can_sign = true;
      }
      sodium_memzero(seed, sizeof seed);
    }
    if (!rc && o->pub_key) {
      rc = read_pem_key(o->pub_key, "PUBLIC KEY", PUB_DER, sizeof PUB_DER, pk, e);
      if (!rc && t->can_sign && memcmp(pk, t->pk, 32) != 0)
        rc = kt_err_set(e, KT_EINVAL, "%s: not the public key of %s", o->pub_key, o->priv_key);
      if (!rc)
        memcpy(t->pk, pk, 32);
    }
  }
  if (rc) {
    kt_tokens_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

static void entry_unlink(struct kt_tokens *t, struct entry *x) {
  if (x->newer)
    x->newer->older = x->older;
  else
    t->newest = x->older;
  if (x->older)
    x->older->newer = x->newer;
  else
    t->oldest = x->newer;
  x->newer = x->older = NULL;
}

static void entry_front(struct kt_tokens *t, struct entry *x) {
  x->older = t->newest;
  x->newer = NULL;
  if (t->newest)
    t->newest->newer = x;
  t->newest = x;
  if (!t->oldest)
    t->oldest = x;
}

static size_t bucket(const uint8_t id[SIMPLE_BYTES]) {
  uint32_t h;
  memcpy(&h, id, sizeof h); /* the id is random */
  return h & (BUCKETS - 1);
}

static void entry_remove(struct kt_tokens *t, struct entry *x) {
  struct entry **pp = &t->buckets[bucket(x->id)];
  while (*pp != x)
    pp = &(*pp)->chain;
  *pp = x->chain;
  entry_unlink(t, x);
  free((void *)x->user.p);
  free(x);
  t->n--;
}

void kt_tokens_free(struct kt_tokens *t) {
  if (!t)
    return;
  while (t->oldest)
    entry_remove(t, t->oldest);
  sodium_memzero(t->sk, sizeof t->sk);
  free(t);
}

size_t kt_tokens_count(const struct kt_tokens *t) { return t->n; }

/* ---- issue and check ---- */

int kt_tokens_issue(struct kt_tokens *t, struct kt_bytes user, uint64_t auth_revision,
                    int64_t now_ms, char out[KT_TOKEN_MAX], int64_t *expires_ms) {
  if (user.n == 0 || user.n > 256)
    return KT_EINVAL;
  if (t->o.kind == KT_TOKEN_SIMPLE) {
    if (expires_ms)
      *expires_ms = 0;
    struct entry *x = calloc(1, sizeof *x);
    kt_assert(x);
    randombytes_buf(x->id, sizeof x->id);
    uint8_t *u = malloc(user.n);
    kt_assert(u);
    memcpy(u, user.p, user.n);
    x->user = (struct kt_bytes){u, user.n};
    x->auth_revision = auth_revision;
    x->last_ms = now_ms;
    if (t->n >= t->o.max_tokens)
      entry_remove(t, t->oldest);
    size_t b = bucket(x->id);
    x->chain = t->buckets[b];
    t->buckets[b] = x;
    entry_front(t, x);
    t->n++;
    sodium_bin2hex(out, KT_TOKEN_MAX, x->id, sizeof x->id);
    return 0;
  }
  if (!t->can_sign)
    return KT_EUNSUPPORTED;
  uint8_t payload[16 + 256], sig[crypto_sign_BYTES];
  int64_t exp_s = now_ms / 1000 + t->o.ttl_s;
  kt_put_u64be(payload, auth_revision);
  kt_put_u64be(payload + 8, (uint64_t)exp_s);
  if (expires_ms)
    *expires_ms = exp_s * 1000;
  memcpy(payload + 16, user.p, user.n);
  size_t plen = 16 + user.n;
  crypto_sign_detached(sig, NULL, payload, plen, t->sk);
  memcpy(out, "kt1.", 4);
  sodium_bin2base64(out + 4, KT_TOKEN_MAX - 4, payload, plen,
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  size_t at = strlen(out);
  out[at++] = '.';
  sodium_bin2base64(out + at, KT_TOKEN_MAX - at, sig, sizeof sig,
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  return 0;
}

static int check_simple(struct kt_tokens *t, struct kt_bytes token, int64_t now_ms,
                        struct kt_token_info *info) {
  uint8_t id[SIMPLE_BYTES];
  size_t n = 0;
  if (token.n != 2 * SIMPLE_BYTES ||
      sodium_hex2bin(id, sizeof id, (const char *)token.p, token.n, NULL, &n, NULL) != 0 ||
      n != SIMPLE_BYTES)
    return KT_EINVALIDTOKEN;
  struct entry *x = t->buckets[bucket(id)];
  while (x && sodium_memcmp(x->id, id, sizeof id) != 0)
    x = x->chain;
  if (!x)
    return KT_EINVALIDTOKEN;
  if (now_ms - x->last_ms > (int64_t)t->o.ttl_s * 1000) {
    entry_remove(t, x);
    return KT_EINVALIDTOKEN;
  }
  x->last_ms = now_ms;
  entry_unlink(t, x);
  entry_front(t, x);
  memcpy(info->user, x->user.p, x->user.n);
  info->user[x->user.n] = 0;
  info->auth_revision = x->auth_revision;
  info->expires_ms = 0;
  return 0;
}

static int check_signed(struct kt_tokens *t, struct kt_bytes token, int64_t now_ms,
                        struct kt_token_info *info) {
  if (token.n < 4 || token.n >= KT_TOKEN_MAX || memcmp(token.p, "kt1.", 4) != 0)
    return KT_EINVALIDTOKEN;
  const char *p = (const char *)token.p + 4, *end = (const char *)token.p + token.n;
  const char *dot = memchr(p, '.', (size_t)(end - p));
  if (!dot)
    return KT_EINVALIDTOKEN;
  uint8_t payload[16 + 256 + 4], sig[crypto_sign_BYTES + 4];
  size_t plen = 0, slen = 0;
  if (sodium_base642bin(payload, sizeof payload, p, (size_t)(dot - p), NULL, &plen, NULL,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      sodium_base642bin(sig, sizeof sig, dot + 1, (size_t)(end - dot - 1), NULL, &slen, NULL,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      plen <= 16 || plen > 16 + 256 || slen != crypto_sign_BYTES ||
      crypto_sign_verify_detached(sig, payload, plen, t->pk) != 0)
    return KT_EINVALIDTOKEN;
  if ((int64_t)kt_get_u64be(payload + 8) <= now_ms / 1000)
    return KT_EINVALIDTOKEN; /* expired */
  info->auth_revision = kt_get_u64be(payload);
  info->expires_ms = (int64_t)kt_get_u64be(payload + 8) * 1000;
  memcpy(info->user, payload + 16, plen - 16);
  info->user[plen - 16] = 0;
  return 0;
}

int kt_tokens_check(struct kt_tokens *t, struct kt_bytes token, int64_t now_ms,
                    struct kt_token_info *info) {
  return t->o.kind == KT_TOKEN_SIMPLE ? check_simple(t, token, now_ms, info)
                                      : check_signed(t, token, now_ms, info);
}

void kt_tokens_drop_user(struct kt_tokens *t, struct kt_bytes user) {
  for (struct entry *x = t->oldest, *next; x; x = next) {
    next = x->newer;
    if (x->user.n == user.n && memcmp(x->user.p, user.p, user.n) == 0)
      entry_remove(t, x);
  }
}
