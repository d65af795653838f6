/* test/unit/token_test.c — net/token (auth tokens, simple and Ed25519-signed
 * with keys the openssl CLI makes) and net/pwhash (Argon2id off the caller's
 * thread, bounded). */
#include <stdlib.h>
#include <unistd.h>

#include <sodium.h>

#include "../../net/pwhash.h"
#include "../../net/token.h"
#include "test.h"

#define B(s) ((struct kt_bytes){(const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)})

static struct kt_bytes T(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}

TEST(simple_tokens_expire_renew_and_drop) {
  struct kt_token_opts o = {.kind = KT_TOKEN_SIMPLE, .ttl_s = 10, .max_tokens = 3};
  struct kt_tokens *t;
  struct kt_err e = {0};
  CHECK_EQ(kt_tokens_new(&o, &t, &e), 0);
  char a[KT_TOKEN_MAX], b[KT_TOKEN_MAX];
  CHECK_EQ(kt_tokens_issue(t, B("alice"), 7, 1000, a, NULL), 0);
  CHECK_EQ(strlen(a), 32);
  struct kt_token_info info;
  CHECK_EQ(kt_tokens_check(t, T(a), 5000, &info), 0);
  CHECK_STR(info.user, "alice");
  CHECK_EQ(info.auth_revision, 7);
  CHECK_EQ(kt_tokens_check(t, T(a), 14000, &info), 0); /* renewed at 5000: 9 s unused */
  CHECK_EQ(kt_tokens_check(t, T(a), 24001, &info), KT_EINVALIDTOKEN); /* 10 s unused */
  CHECK_EQ(kt_tokens_check(t, T(a), 24002, &info), KT_EINVALIDTOKEN); /* and gone */
  /* malformed, unknown */
  CHECK_EQ(kt_tokens_check(t, B("zz"), 0, &info), KT_EINVALIDTOKEN);
  CHECK_EQ(kt_tokens_check(t, B("0123456789abcdef0123456789abcdef"), 0, &info), KT_EINVALIDTOKEN);
  /* a user's tokens go with its password */
  CHECK_EQ(kt_tokens_issue(t, B("bob"), 1, 0, a, NULL), 0);
  CHECK_EQ(kt_tokens_issue(t, B("carol"), 1, 0, b, NULL), 0);
  kt_tokens_drop_user(t, B("bob"));
  CHECK_EQ(kt_tokens_check(t, T(a), 1, &info), KT_EINVALIDTOKEN);
  CHECK_EQ(kt_tokens_check(t, T(b), 1, &info), 0);
  /* bounded: the least recently used goes */
  char c[KT_TOKEN_MAX], d[KT_TOKEN_MAX];
  CHECK_EQ(kt_tokens_issue(t, B("dan"), 1, 2, c, NULL), 0);
  CHECK_EQ(kt_tokens_issue(t, B("eve"), 1, 3, d, NULL), 0);
  CHECK_EQ(kt_tokens_check(t, T(b), 4, &info), 0); /* carol used: dan is the oldest */
  CHECK_EQ(kt_tokens_issue(t, B("fay"), 1, 5, a, NULL), 0);
  CHECK_EQ(kt_tokens_count(t), 3);
  CHECK_EQ(kt_tokens_check(t, T(c), 6, &info), KT_EINVALIDTOKEN);
  CHECK_EQ(kt_tokens_check(t, T(b), 6, &info), 0);
  CHECK_EQ(kt_tokens_issue(t, (struct kt_bytes){(const uint8_t *)"", 0}, 1, 0, a, NULL), KT_EINVAL);
  kt_tokens_free(t);
}

static int sh(const char *cmd) { return system(cmd); }

TEST(signed_tokens_verify_anywhere_and_refuse_forgeries) {
  char dir[] = "/tmp/kt-token-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char cmd[2048], priv[128], pub[128], priv2[128];
  snprintf(priv, sizeof priv, "%s/k.pem", dir);
  snprintf(pub, sizeof pub, "%s/k.pub", dir);
  snprintf(priv2, sizeof priv2, "%s/other.pem", dir);
  snprintf(cmd, sizeof cmd,
           "openssl genpkey -algorithm ed25519 -out %s && openssl pkey -in %s -pubout -out %s && "
           "openssl genpkey -algorithm ed25519 -out %s",
           priv, priv, pub, priv2);
  CHECK_EQ(sh(cmd), 0);
  struct kt_err e = {0};
  struct kt_tokens *issuer, *verifier, *other;
  struct kt_token_opts o = {.kind = KT_TOKEN_SIGNED, .ttl_s = 60, .priv_key = priv};
  CHECK_EQ(kt_tokens_new(&o, &issuer, &e), 0);
  struct kt_token_opts v = {.kind = KT_TOKEN_SIGNED, .pub_key = pub};
  CHECK_EQ(kt_tokens_new(&v, &verifier, &e), 0);
  struct kt_token_opts x = {.kind = KT_TOKEN_SIGNED, .priv_key = priv2};
  CHECK_EQ(kt_tokens_new(&x, &other, &e), 0);
  char tok[KT_TOKEN_MAX];
  int64_t now = 1795700000000;
  CHECK_EQ(kt_tokens_issue(issuer, B("alice"), 12, now, tok, NULL), 0);
  CHECK(strncmp(tok, "kt1.", 4) == 0);
  struct kt_token_info info;
  CHECK_EQ(kt_tokens_check(verifier, T(tok), now + 1000, &info), 0); /* another member */
  CHECK_STR(info.user, "alice");
  CHECK_EQ(info.auth_revision, 12);
  CHECK_EQ(kt_tokens_check(verifier, T(tok), now + 60000, &info), KT_EINVALIDTOKEN); /* expired */
  CHECK_EQ(kt_tokens_check(other, T(tok), now, &info), KT_EINVALIDTOKEN); /* another key */
  CHECK_EQ(kt_tokens_issue(verifier, B("alice"), 1, now, tok, NULL), KT_EUNSUPPORTED);
  /* a flipped character anywhere is refused */
  CHECK_EQ(kt_tokens_issue(issuer, B("alice"), 12, now, tok, NULL), 0);
  for (size_t i = 4; i < strlen(tok); i++) {
    char save = tok[i];
    tok[i] = save == 'A' ? 'B' : 'A';
    CHECK_EQ(kt_tokens_check(verifier, T(tok), now, &info), KT_EINVALIDTOKEN);
    tok[i] = save;
  }
  /* key files: the wrong kind, a mismatched pair, a missing file, named */
  struct kt_token_opts bad = {.kind = KT_TOKEN_SIGNED, .priv_key = pub};
  struct kt_tokens *t;
  CHECK_EQ(kt_tokens_new(&bad, &t, &e), KT_EINVAL);
  CHECK(strstr(e.msg, pub) != NULL);
  bad = (struct kt_token_opts){.kind = KT_TOKEN_SIGNED, .priv_key = priv2, .pub_key = pub};
  CHECK_EQ(kt_tokens_new(&bad, &t, &e), KT_EINVAL);
  CHECK(strstr(e.msg, "not the public key") != NULL);
  bad = (struct kt_token_opts){.kind = KT_TOKEN_SIGNED, .priv_key = "/nonexistent.pem"};
  CHECK_EQ(kt_tokens_new(&bad, &t, &e), KT_EINVAL);
  CHECK(strstr(e.msg, "/nonexistent.pem") != NULL);
  kt_tokens_free(issuer);
  kt_tokens_free(verifier);
  kt_tokens_free(other);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ(sh(cmd), 0);
}

static int notified;
static void notify(void *arg) { __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST); }

static struct kt_pwhash_job take_one(struct kt_pwhash *p) {
  struct kt_pwhash_job j;
  while (!kt_pwhash_take(p, &j))
    usleep(1000);
  return j;
}

TEST(pwhash_hashes_and_verifies_off_thread) {
  struct kt_pwhash_opts o = {.threads = 2,
                             .max_jobs = 4,
                             .opslimit = crypto_pwhash_OPSLIMIT_MIN,
                             .memlimit = crypto_pwhash_MEMLIMIT_MIN,
                             .notify = notify,
                             .notify_arg = &notified};
  struct kt_pwhash *p;
  struct kt_err e = {0};
  CHECK_EQ(kt_pwhash_new(&o, &p, &e), 0);
  struct kt_pwhash_job j = {.kind = KT_PWHASH_HASH, .ctx = (void *)1};
  memcpy(j.password, "s3cret", 6);
  j.password_len = 6;
  CHECK_EQ(kt_pwhash_submit(p, &j), 0);
  struct kt_pwhash_job got = take_one(p);
  CHECK_EQ(got.rc, 0);
  CHECK(got.ctx == (void *)1);
  CHECK(strncmp(got.hash, "$argon2id$", 10) == 0);
  CHECK_EQ(got.password_len, 0); /* wiped */
  struct kt_pwhash_job v = {.kind = KT_PWHASH_VERIFY, .ctx = (void *)2};
  memcpy(v.hash, got.hash, sizeof v.hash);
  memcpy(v.password, "s3cret", 6);
  v.password_len = 6;
  CHECK_EQ(kt_pwhash_submit(p, &v), 0);
  v.ctx = (void *)3;
  v.password[0] = 'S';
  CHECK_EQ(kt_pwhash_submit(p, &v), 0);
  int ok = 0, bad = 0;
  for (int i = 0; i < 2; i++) {
    struct kt_pwhash_job r = take_one(p);
    ok += r.ctx == (void *)2 && r.rc == 0;
    bad += r.ctx == (void *)3 && r.rc == KT_EAUTHFAILED;
  }
  CHECK(ok == 1 && bad == 1);
  CHECK(__atomic_load_n(&notified, __ATOMIC_SEQ_CST) >= 3);
  /* bounded: max_jobs in flight until they are taken */
  for (int i = 0; i < 4; i++)
    CHECK_EQ(kt_pwhash_submit(p, &v), 0);
  CHECK_EQ(kt_pwhash_submit(p, &v), KT_EBUSY);
  j.password_len = KT_PWHASH_PASSWORD_MAX + 1;
  CHECK_EQ(kt_pwhash_submit(p, &j), KT_EINVAL);
  kt_pwhash_free(p, NULL, NULL); /* with jobs queued or done: no leak (ASan) */
}
