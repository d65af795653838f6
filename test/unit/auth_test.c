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
