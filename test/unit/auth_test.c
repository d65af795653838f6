/* test/unit/auth_test.c — core/auth: etcd 3.4's auth store rules, the
 * permission check over key ranges, and the snapshot part. */
#include <stdlib.h>

#include "../../core/auth.h"
#include "test.h"

#define B(s) ((struct kt_bytes){(const uint8_t *)(s), (uint32_t)(sizeof(s) - 1)})
#define NONE ((struct kt_bytes){0})
#define FROM ((struct kt_bytes){(const uint8_t *)"", 1}) /* "\0": from key on */

static int op(struct kt_auth *a, uint8_t type, struct kt_auth_req r) {
  struct kt_req q = {.type = type};
  q.u.auth = r;
  struct kt_err e = {0};
  return kt_auth_apply(a, &q, &e);
}

static int user_add(struct kt_auth *a, const char *name) {
  return op(a, KT_MSG_USER_ADD,
            (struct kt_auth_req){.name = {(const uint8_t *)name, (uint32_t)strlen(name)},
                                 .hash = B("$argon2id$x")});
}
static int role_add(struct kt_auth *a, const char *name) {
  return op(a, KT_MSG_ROLE_ADD,
            (struct kt_auth_req){.name = {(const uint8_t *)name, (uint32_t)strlen(name)}});
}
static int grant_role(struct kt_auth *a, const char *user, const char *role) {
  return op(a, KT_MSG_USER_GRANT_ROLE,
            (struct kt_auth_req){.name = {(const uint8_t *)user, (uint32_t)strlen(user)},
                                 .role = {(const uint8_t *)role, (uint32_t)strlen(role)}});
}
static int grant_perm(struct kt_auth *a, const char *role, uint8_t type, struct kt_bytes key,
                      struct kt_bytes end) {
  return op(a, KT_MSG_ROLE_GRANT_PERMISSION,
            (struct kt_auth_req){.name = {(const uint8_t *)role, (uint32_t)strlen(role)},
                                 .perm_type = type,
                                 .key = key,
                                 .range_end = end});
}

TEST(enable_needs_root_with_root_role) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), KT_EROOTUSERNOTEXIST);
  CHECK_EQ(user_add(a, "root"), 0);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), KT_EROOTROLENOTEXIST);
  CHECK_EQ(grant_role(a, "root", "root"), 0); /* the root role need not exist as a role */
  uint64_t rev = kt_auth_revision(a);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), 0);
  CHECK(kt_auth_enabled(a));
  CHECK_EQ(kt_auth_revision(a), rev + 1);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), 0); /* again: nothing */
  CHECK_EQ(kt_auth_revision(a), rev + 1);
  /* root is protected while enabled */
  CHECK_EQ(op(a, KT_MSG_USER_DELETE, (struct kt_auth_req){.name = B("root")}), KT_EINVALIDAUTHMGMT);
  CHECK_EQ(
      op(a, KT_MSG_USER_REVOKE_ROLE, (struct kt_auth_req){.name = B("root"), .role = B("root")}),
      KT_EINVALIDAUTHMGMT);
  CHECK_EQ(role_add(a, "root"), 0);
  CHECK_EQ(op(a, KT_MSG_ROLE_DELETE, (struct kt_auth_req){.name = B("root")}), KT_EINVALIDAUTHMGMT);
  CHECK_EQ(op(a, KT_MSG_AUTH_DISABLE, (struct kt_auth_req){0}), 0);
  CHECK(!kt_auth_enabled(a));
  CHECK_EQ(op(a, KT_MSG_ROLE_DELETE, (struct kt_auth_req){.name = B("root")}), 0);
  kt_auth_free(a);
}

TEST(users_and_roles_errors_as_etcd) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, ""), KT_EUSEREMPTY);
  CHECK_EQ(role_add(a, ""), KT_EROLEEMPTY);
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(user_add(a, "u"), KT_EUSEREXISTS);
  CHECK_EQ(role_add(a, "r"), 0);
  CHECK_EQ(role_add(a, "r"), KT_EROLEEXISTS);
  CHECK_EQ(grant_role(a, "nobody", "r"), KT_EUSERNOTFOUND);
  CHECK_EQ(grant_role(a, "u", "nope"), KT_EROLENOTFOUND);
  uint64_t rev = kt_auth_revision(a);
  CHECK_EQ(grant_role(a, "u", "r"), 0);
  CHECK_EQ(grant_role(a, "u", "r"), 0); /* granted twice: no error, no change (etcd 3.4) */
  CHECK_EQ(kt_auth_revision(a), rev + 1);
  CHECK_EQ(op(a, KT_MSG_USER_REVOKE_ROLE, (struct kt_auth_req){.name = B("u"), .role = B("x")}),
           KT_EROLENOTGRANTED);
  CHECK_EQ(grant_perm(a, "nope", KT_PERM_READ, B("k"), NONE), KT_EROLENOTFOUND);
  CHECK_EQ(
      op(a, KT_MSG_ROLE_REVOKE_PERMISSION, (struct kt_auth_req){.name = B("r"), .key = B("k")}),
      KT_EPERMNOTGRANTED);
  CHECK_EQ(op(a, KT_MSG_USER_DELETE, (struct kt_auth_req){.name = B("x")}), KT_EUSERNOTFOUND);
  CHECK_EQ(op(a, KT_MSG_ROLE_DELETE, (struct kt_auth_req){.name = B("x")}), KT_EROLENOTFOUND);
  CHECK_EQ(op(a, KT_MSG_USER_CHANGE_PASSWORD, (struct kt_auth_req){.name = B("x"), .hash = B("h")}),
           KT_EUSERNOTFOUND);
  /* deleting a role takes it from its users */
  CHECK(kt_auth_has_role(a, B("u"), B("r")));
  CHECK_EQ(op(a, KT_MSG_ROLE_DELETE, (struct kt_auth_req){.name = B("r")}), 0);
  CHECK(!kt_auth_has_role(a, B("u"), B("r")));
  kt_auth_free(a);
}

TEST(reads_list_sorted) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, "zed"), 0);
  CHECK_EQ(user_add(a, "amy"), 0);
  CHECK_EQ(role_add(a, "w"), 0);
  CHECK_EQ(role_add(a, "b"), 0);
  CHECK_EQ(grant_role(a, "amy", "w"), 0);
  CHECK_EQ(grant_role(a, "amy", "b"), 0);
  CHECK_EQ(grant_perm(a, "b", KT_PERM_WRITE, B("z"), NONE), 0);
  CHECK_EQ(grant_perm(a, "b", KT_PERM_READ, B("a"), B("c")), 0);
  CHECK_EQ(grant_perm(a, "b", KT_PERM_READWRITE, B("a"), B("c")), 0); /* replaces its type */
  struct kt_arena ar = {0};
  struct kt_auth_resp r;
  struct kt_req q = {.type = KT_MSG_USER_LIST};
  struct kt_err e = {0};
  CHECK_EQ(kt_auth_read(a, &q, &ar, &r, &e), 0);
  CHECK_EQ(r.n_users, 2);
  CHECK(r.users[0].n == 3 && memcmp(r.users[0].p, "amy", 3) == 0);
  q = (struct kt_req){.type = KT_MSG_USER_GET};
  q.u.auth.name = B("amy");
  CHECK_EQ(kt_auth_read(a, &q, &ar, &r, &e), 0);
  CHECK_EQ(r.n_roles, 2);
  CHECK(r.roles[0].n == 1 && r.roles[0].p[0] == 'b');
  q = (struct kt_req){.type = KT_MSG_ROLE_GET};
  q.u.auth.name = B("b");
  CHECK_EQ(kt_auth_read(a, &q, &ar, &r, &e), 0);
  CHECK_EQ(r.n_perms, 2);
  CHECK(r.perms[0].key.p[0] == 'a' && r.perms[0].type == KT_PERM_READWRITE);
  CHECK(r.perms[1].key.p[0] == 'z' && r.perms[1].type == KT_PERM_WRITE);
  q.u.auth.name = B("nope");
  CHECK_EQ(kt_auth_read(a, &q, &ar, &r, &e), KT_EROLENOTFOUND);
  q = (struct kt_req){.type = KT_MSG_USER_GET};
  q.u.auth.name = B("nope");
  CHECK_EQ(kt_auth_read(a, &q, &ar, &r, &e), KT_EUSERNOTFOUND);
  kt_arena_free(&ar);
  kt_auth_free(a);
}

TEST(check_covers_key_ranges) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(role_add(a, "r1"), 0);
  CHECK_EQ(role_add(a, "r2"), 0);
  CHECK_EQ(grant_role(a, "u", "r1"), 0);
  CHECK_EQ(grant_role(a, "u", "r2"), 0);
  CHECK_EQ(grant_perm(a, "r1", KT_PERM_READ, B("a"), B("c")), 0);      /* [a, c) */
  CHECK_EQ(grant_perm(a, "r2", KT_PERM_READWRITE, B("c"), B("e")), 0); /* [c, e) */
  CHECK_EQ(grant_perm(a, "r2", KT_PERM_WRITE, B("k"), NONE), 0);       /* the key k */
  CHECK_EQ(grant_perm(a, "r1", KT_PERM_READ, B("p/"), B("p0")), 0);    /* prefix p/ */
  CHECK_EQ(grant_perm(a, "r1", KT_PERM_READ, B("x"), FROM), 0);        /* from x on */
  struct kt_bytes u = B("u");
  /* keys */
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("a"), NONE));
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("bzzz"), NONE));
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("d"), NONE));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("e"), NONE)); /* the end is exclusive */
  CHECK(!kt_auth_allows(a, u, KT_PERM_WRITE, B("b"), NONE));
  CHECK(kt_auth_allows(a, u, KT_PERM_WRITE, B("d"), NONE));
  CHECK(kt_auth_allows(a, u, KT_PERM_WRITE, B("k"), NONE));
  CHECK(!kt_auth_allows(a, u, KT_PERM_WRITE, B("k0"), NONE));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("k"), NONE));
  /* ranges: the union of two roles covers [a, e) */
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("a"), B("e")));
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("b"), B("d")));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("a"), B("e\0"))); /* straddles the end */
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("0"), B("b")));   /* starts before */
  CHECK(!kt_auth_allows(a, u, KT_PERM_WRITE, B("c"), B("f")));
  /* a one-key permission covers [k, k\0) only */
  CHECK(kt_auth_allows(a, u, KT_PERM_WRITE, B("k"), B("k\0")));
  CHECK(!kt_auth_allows(a, u, KT_PERM_WRITE, B("k"), B("l")));
  /* prefix: p/ and everything under it, not a sibling */
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("p/"), B("p0")));
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("p/q"), NONE));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("p0"), NONE));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("p"), B("p0")));
  /* from-key: everything from x on, and only that */
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("x"), FROM));
  CHECK(kt_auth_allows(a, u, KT_PERM_READ, B("zz"), FROM));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("w"), FROM));
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("a"), FROM)); /* a from-key read of everything */
  /* unknown users and revoked roles */
  CHECK(!kt_auth_allows(a, B("nobody"), KT_PERM_READ, B("a"), NONE));
  CHECK_EQ(op(a, KT_MSG_USER_REVOKE_ROLE, (struct kt_auth_req){.name = B("u"), .role = B("r2")}),
           0);
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("d"), NONE)); /* the cache followed */
  CHECK(!kt_auth_allows(a, u, KT_PERM_READ, B("a"), B("e")));
  /* root may do anything */
  CHECK_EQ(user_add(a, "root"), 0);
  CHECK_EQ(grant_role(a, "root", "root"), 0);
  CHECK(kt_auth_is_root(a, B("root")));
  CHECK(!kt_auth_is_root(a, u));
  CHECK(kt_auth_allows(a, B("root"), KT_PERM_WRITE, B("\0"), FROM));
  kt_auth_free(a);
}

TEST(snapshot_part_round_trips_and_refuses_bad_bytes) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, "root"), 0);
  CHECK_EQ(grant_role(a, "root", "root"), 0);
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(op(a, KT_MSG_USER_ADD, (struct kt_auth_req){.name = B("cn"), .no_password = true}), 0);
  CHECK_EQ(role_add(a, "r"), 0);
  CHECK_EQ(grant_perm(a, "r", KT_PERM_READ, B("a"), B("c")), 0);
  CHECK_EQ(grant_perm(a, "r", KT_PERM_WRITE, B("k"), NONE), 0);
  CHECK_EQ(grant_role(a, "u", "r"), 0);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), 0);
  struct kt_buf b = {0};
  kt_auth_save(a, &b);
  kt_buf_append(&b, "tail", 4); /* what follows it in a snapshot's meta blob */
  struct kt_auth *c = kt_auth_new();
  size_t used = 0;
  struct kt_err e = {0};
  CHECK_EQ(kt_auth_load(c, b.p, b.len, &used, &e), 0);
  CHECK_EQ(used, b.len - 4);
  CHECK(kt_auth_equal(a, c));
  CHECK(kt_auth_enabled(c) && kt_auth_revision(c) == kt_auth_revision(a));
  CHECK(kt_auth_allows(c, B("u"), KT_PERM_READ, B("b"), NONE));
  bool np = false;
  CHECK(kt_auth_user_hash(c, B("cn"), &np) == NULL && np);
  /* every truncation and a flipped byte in each position: refused or equal,
   * never a crash (the fuzz target goes further) */
  for (size_t n = 0; n < used; n++) {
    struct kt_auth *d = kt_auth_new();
    CHECK(kt_auth_load(d, b.p, n, &used, &e) != 0);
    kt_auth_free(d);
  }
  for (size_t i = 0; i < b.len - 4; i++) {
    struct kt_auth *d = kt_auth_new();
    b.p[i] ^= 0x5a;
    (void)kt_auth_load(d, b.p, b.len, &used, &e);
    b.p[i] ^= 0x5a;
    kt_auth_free(d);
  }
  /* a failed load leaves the store as it was */
  b.p[0] = 'X';
  CHECK_EQ(kt_auth_load(c, b.p, b.len, &used, &e), KT_ECORRUPT);
  CHECK(kt_auth_equal(a, c));
  kt_buf_free(&b);
  kt_auth_free(a);
  kt_auth_free(c);
}

/* A connection bound at revision r stays the user's through role and
 * permission changes, and stops being it when the password changes, the
 * user is deleted or auth is enabled again. */
TEST(bindings_end_on_password_change_delete_and_re_enable) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, "root"), 0);
  CHECK_EQ(grant_role(a, "root", "root"), 0);
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), 0);
  uint64_t bound = kt_auth_revision(a);
  CHECK(kt_auth_bound_valid(a, B("u"), bound));
  CHECK(!kt_auth_bound_valid(a, B("u"), bound - 1)); /* before auth was enabled */
  CHECK(!kt_auth_bound_valid(a, B("nobody"), bound));
  CHECK(!kt_auth_bound_valid(a, B("u"), bound + 1)); /* a revision not reached */
  CHECK_EQ(role_add(a, "r"), 0);
  CHECK_EQ(grant_role(a, "u", "r"), 0);
  CHECK(kt_auth_bound_valid(a, B("u"), bound));
  CHECK(kt_auth_bound_valid(a, B("root"), bound));
  CHECK_EQ(
      op(a, KT_MSG_USER_CHANGE_PASSWORD, (struct kt_auth_req){.name = B("u"), .hash = B("$h2")}),
      0);
  CHECK(!kt_auth_bound_valid(a, B("u"), bound));
  CHECK(kt_auth_bound_valid(a, B("u"), kt_auth_revision(a)));
  CHECK(kt_auth_bound_valid(a, B("root"), bound)); /* another user's change */
  uint64_t b2 = kt_auth_revision(a);
  CHECK_EQ(op(a, KT_MSG_USER_DELETE, (struct kt_auth_req){.name = B("u")}), 0);
  CHECK(!kt_auth_bound_valid(a, B("u"), b2));
  CHECK_EQ(user_add(a, "u"), 0); /* the same name again is a new user */
  CHECK(!kt_auth_bound_valid(a, B("u"), b2));
  CHECK_EQ(op(a, KT_MSG_AUTH_DISABLE, (struct kt_auth_req){0}), 0);
  CHECK_EQ(op(a, KT_MSG_AUTH_ENABLE, (struct kt_auth_req){0}), 0);
  CHECK(!kt_auth_bound_valid(a, B("root"), bound));
  CHECK(kt_auth_bound_valid(a, B("root"), kt_auth_revision(a)));
  /* a loaded store: bindings at its revision hold */
  struct kt_buf b = {0};
  kt_auth_save(a, &b);
  struct kt_auth *c = kt_auth_new();
  size_t used = 0;
  struct kt_err e = {0};
  CHECK_EQ(kt_auth_load(c, b.p, b.len, &used, &e), 0);
  CHECK(kt_auth_bound_valid(c, B("root"), kt_auth_revision(c)));
  CHECK(!kt_auth_bound_valid(c, B("root"), kt_auth_revision(c) - 1));
  kt_buf_free(&b);
  kt_auth_free(a);
  kt_auth_free(c);
}

/* kt_auth_allows remembers the interval the last allowed key lay in and
 * looks there first: its answers must not depend on what was asked before.
 * 60 permissions of every shape (one key, a prefix, a range, from a key),
 * 4,000 keys and ranges over a small alphabet, asked in order, in reverse
 * and each after an unrelated question, and single keys against a model. */
struct q4 {
  char k[3], e[3];
  struct kt_bytes key, end;
};

static uint64_t xs = 88172645463325252ull;
static uint64_t next_rand(void) {
  xs ^= xs << 13, xs ^= xs >> 7, xs ^= xs << 17;
  return xs;
}

TEST(check_answers_do_not_depend_on_the_order_asked) {
  struct kt_auth *a = kt_auth_new();
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(role_add(a, "r"), 0);
  CHECK_EQ(grant_role(a, "u", "r"), 0);
  static struct q4 perm[60], q[4000];
  static uint8_t ptype[60];
  for (int i = 0; i < 60; i++) {
    struct q4 *p = &perm[i];
    uint32_t kn = 1 + (uint32_t)(next_rand() % 3), en = 1 + (uint32_t)(next_rand() % 3);
    for (int j = 0; j < 3; j++)
      p->k[j] = (char)('a' + next_rand() % 4), p->e[j] = (char)('a' + next_rand() % 4);
    p->key = (struct kt_bytes){(const uint8_t *)p->k, kn};
    switch (next_rand() % 4) {
    case 0: /* one key */
      p->end = NONE;
      break;
    case 1: /* a prefix */
      memcpy(p->e, p->k, 3);
      p->e[kn - 1]++;
      p->end = (struct kt_bytes){(const uint8_t *)p->e, kn};
      break;
    case 2: /* a range (an empty one when end <= key: refused or kept, either way the same) */
      p->end = (struct kt_bytes){(const uint8_t *)p->e, en};
      break;
    default:
      p->end = FROM;
    }
    ptype[i] = (uint8_t)(next_rand() % 3);
    if (grant_perm(a, "r", ptype[i], p->key, p->end))
      ptype[i] = 255; /* refused (an empty range): not granted */
  }
  for (int i = 0; i < 4000; i++) {
    uint32_t kn = 1 + (uint32_t)(next_rand() % 3), en = 1 + (uint32_t)(next_rand() % 3);
    for (int j = 0; j < 3; j++)
      q[i].k[j] = (char)('a' + next_rand() % 5), q[i].e[j] = (char)('a' + next_rand() % 5);
    q[i].key = (struct kt_bytes){(const uint8_t *)q[i].k, kn};
    q[i].end = i % 4 == 1   ? FROM /* from key on */
               : i % 2 == 1 ? (struct kt_bytes){(const uint8_t *)q[i].e, en}
                            : NONE;
  }
  struct kt_bytes u = B("u");
  static bool first[4000][2];
  for (int i = 0; i < 4000; i++)
    for (int w = 0; w < 2; w++) {
      uint8_t want = w ? KT_PERM_WRITE : KT_PERM_READ;
      first[i][w] = kt_auth_allows(a, u, want, q[i].key, q[i].end);
      if (i % 2)
        continue;
      bool model = false; /* a single key: a permission of its type holds it */
      for (int j = 0; j < 60 && !model; j++) {
        const struct q4 *p = &perm[j];
        if (ptype[j] != want && ptype[j] != KT_PERM_READWRITE)
          continue;
        bool regranted = false; /* a later grant of the same key and end sets its type */
        for (int k = j + 1; k < 60; k++)
          regranted |= ptype[k] != 255 && kt_bytes_cmp(perm[k].key, p->key) == 0 &&
                       kt_bytes_cmp(perm[k].end, p->end) == 0;
        if (regranted)
          continue;
        if (p->end.n == 0)
          model = kt_bytes_cmp(q[i].key, p->key) == 0;
        else if (p->end.n == 1 && p->end.p[0] == 0)
          model = kt_bytes_cmp(q[i].key, p->key) >= 0;
        else
          model = kt_bytes_cmp(q[i].key, p->key) >= 0 && kt_bytes_cmp(q[i].key, p->end) < 0;
      }
      CHECK_EQ(first[i][w], model);
    }
  int allowed = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int n = 0; n < 4000; n++) {
      int i = pass ? n : 3999 - n;
      if (pass) { /* something unrelated first */
        const struct q4 *o = &q[next_rand() % 4000];
        (void)kt_auth_allows(a, u, (uint8_t)(next_rand() % 2), o->key, NONE);
      }
      for (int w = 0; w < 2; w++) {
        bool got = kt_auth_allows(a, u, w ? KT_PERM_WRITE : KT_PERM_READ, q[i].key, q[i].end);
        CHECK_EQ(got, first[i][w]);
        allowed += got;
      }
    }
  CHECK(allowed > 1000 && allowed < 15000); /* both answers well represented */
  /* A grant kept from an allowed key (core/node_auth.c's per-connection
   * short cut) holds that key, and whatever it holds the check allows: it
   * never allows more. Over 200 grants of each type, every query. */
  int grants = 0, covered = 0;
  for (int i = 0; i < 4000 && grants < 400; i += 2)
    for (int w = 0; w < 2; w++) {
      uint8_t want = w ? KT_PERM_WRITE : KT_PERM_READ;
      struct kt_auth_grant g = {0};
      CHECK_EQ(kt_auth_grant_of(a, u, want, q[i].key, &g), first[i][w]);
      if (!first[i][w])
        continue;
      grants++;
      CHECK_EQ(g.stamp, kt_auth_stamp(a));
      CHECK(kt_auth_grant_covers(&g, q[i].key, NONE));
      for (int j = 0; j < 4000; j++)
        if (kt_auth_grant_covers(&g, q[j].key, q[j].end)) {
          CHECK(first[j][w]);
          covered++;
        }
    }
  CHECK(grants > 100 && covered > grants * 4);
  kt_auth_free(a);
}

TEST(grants_are_kept_only_while_the_store_is_unchanged) {
  struct kt_auth *a = kt_auth_new(), *b = kt_auth_new();
  CHECK(kt_auth_stamp(a) != 0 && kt_auth_stamp(a) != kt_auth_stamp(b));
  CHECK_EQ(user_add(a, "u"), 0);
  CHECK_EQ(role_add(a, "r"), 0);
  CHECK_EQ(grant_role(a, "u", "r"), 0);
  CHECK_EQ(grant_perm(a, "r", KT_PERM_READWRITE, B("p/"), B("p0")), 0);
  /* a long permission key is not kept (the check still allows it) */
  CHECK_EQ(grant_perm(a, "r", KT_PERM_READ,
                      B("0123456789012345678901234567890123456789012345678901234567890123"), NONE),
           0);
  struct kt_auth_grant g = {0}, root = {0};
  CHECK(kt_auth_grant_of(a, B("u"), KT_PERM_WRITE, B("p/k"), &g));
  CHECK(kt_auth_grant_covers(&g, B("p/other"), NONE));
  CHECK(kt_auth_grant_covers(&g, B("p/"), B("p0")));
  CHECK(!kt_auth_grant_covers(&g, B("p0"), NONE));                /* a sibling */
  CHECK(!kt_auth_grant_covers(&g, B("p/"), FROM));                /* from-key: past the end */
  CHECK(!kt_auth_grant_covers(&g, B("p/"), B("q")));              /* straddles the end */
  CHECK(!kt_auth_grant_of(a, B("u"), KT_PERM_WRITE, B("q"), &g)); /* not granted */
  CHECK(kt_auth_allows(a, B("u"), KT_PERM_READ,
                       B("0123456789012345678901234567890123456789012345678901234567890123"),
                       NONE));
  CHECK(!kt_auth_grant_of(a, B("u"), KT_PERM_READ,
                          B("0123456789012345678901234567890123456789012345678901234567890123"),
                          &g));
  CHECK(!kt_auth_grant_of(a, B("nobody"), KT_PERM_READ, B("p/k"), &g));
  /* every change gives a new stamp; a refused one does not */
  uint64_t s = kt_auth_stamp(a);
  CHECK_EQ(g.stamp, s);
  CHECK(role_add(a, "r") != 0);
  CHECK_EQ(kt_auth_stamp(a), s);
  CHECK_EQ(op(a, KT_MSG_ROLE_REVOKE_PERMISSION,
              (struct kt_auth_req){.name = B("r"), .key = B("p/"), .range_end = B("p0")}),
           0);
  CHECK(kt_auth_stamp(a) != s && kt_auth_stamp(a) != 0);
  CHECK(!kt_auth_allows(a, B("u"), KT_PERM_WRITE, B("p/k"), NONE));
  /* root: everything */
  CHECK_EQ(user_add(a, "root"), 0);
  CHECK_EQ(grant_role(a, "root", "root"), 0);
  CHECK(kt_auth_grant_of(a, B("root"), KT_PERM_WRITE, B("x"), &root));
  CHECK(kt_auth_grant_covers(&root, B(""), FROM));
  CHECK(kt_auth_grant_covers(&root, B("\xff\xff"), NONE));
  /* a load (a snapshot install or a restart) gives a new stamp, also the
   * same content loaded into another store */
  struct kt_buf snap = {0};
  kt_auth_save(a, &snap);
  size_t used;
  struct kt_err e = {0};
  s = kt_auth_stamp(a);
  CHECK_EQ(kt_auth_load(a, snap.p, snap.len, &used, &e), 0);
  CHECK(kt_auth_stamp(a) != s);
  uint64_t sa = kt_auth_stamp(a);
  CHECK_EQ(kt_auth_load(b, snap.p, snap.len, &used, &e), 0);
  CHECK(kt_auth_stamp(b) != sa && kt_auth_stamp(b) != s);
  kt_buf_free(&snap);
  kt_auth_free(a);
  kt_auth_free(b);
}
