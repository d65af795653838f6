/* core/auth.c — see auth.h. */
#include "auth.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A key range in a merged permission list: [b, e), e NULL = no end. */
struct ivl {
  const uint8_t *b, *e;
  uint32_t bn, en;
};

struct perm {
  uint8_t type;
  struct kt_bytes key, end; /* owned copies */
};

struct role {
  struct kt_bytes name; /* owned */
  struct perm *perms;   /* sorted by key, as etcd */
  size_t n, cap;
};

struct user {
  struct kt_bytes name; /* owned */
  char *hash;           /* NULL: none (no password) */
  bool no_password;
  /* the revision its password (or its existence) took effect at: a
   * connection bound earlier is no longer this user's. Not saved: a loaded
   * store sets every user's to its revision. */
  uint64_t since;
  struct kt_bytes *roles; /* owned copies, sorted */
  size_t n_roles;
  /* merged permissions, rebuilt when cache_rev != the store's revision */
  uint64_t cache_rev;
  bool root;
  struct ivl *rd, *wr;
  size_t n_rd, n_wr;
  size_t hint_rd, hint_wr; /* the interval the last allowed key lay in */
  struct kt_arena cache;   /* point ends (key + "\0") */
};

struct kt_auth {
  bool enabled;
  uint64_t revision;
  uint64_t enabled_rev; /* the revision auth was last enabled at (not saved) */
  struct user *users;   /* sorted by name */
  size_t n_users, cap_users;
  struct role *roles; /* sorted by name */
  size_t n_roles, cap_roles;
  size_t last_user; /* where get_user_hinted last found a name: checked before use */
  uint64_t stamp;   /* kt_auth_stamp: a new one with every change and load (not saved) */
};

static const struct kt_bytes ROOT = {(const uint8_t *)KT_AUTH_ROOT, 4};

static int bcmp_(struct kt_bytes a, struct kt_bytes b) {
  size_t n = a.n < b.n ? a.n : b.n;
  int c = n ? memcmp(a.p, b.p, n) : 0;
  return c ? c : (a.n > b.n) - (a.n < b.n);
}

static bool beq(struct kt_bytes a, struct kt_bytes b) { return bcmp_(a, b) == 0; }

static struct kt_bytes dup(struct kt_bytes x) {
  uint8_t *p = malloc(x.n ? x.n : 1);
  kt_assert(p);
  if (x.n)
    memcpy(p, x.p, x.n);
  return (struct kt_bytes){p, x.n};
}

static void bfree(struct kt_bytes *x) {
  free((void *)x->p);
  *x = (struct kt_bytes){0};
}

/* Index of name in a sorted array of n elements of `size` bytes whose first
 * member is a struct kt_bytes; *found says whether it is there. */
static size_t find(const void *v, size_t n, size_t size, struct kt_bytes name, bool *found) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = bcmp_(*(const struct kt_bytes *)((const uint8_t *)v + mid * size), name);
    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  *found = false;
  return lo;
}

static struct user *get_user(const struct kt_auth *a, struct kt_bytes name) {
  bool found;
  size_t i = find(a->users, a->n_users, sizeof *a->users, name, &found);
  return found ? &a->users[i] : NULL;
}

/* get_user for the checks made per request: the user a request names is
 * most often the one before (every connection of a client logs in as the
 * same user), so the slot found last is tried first. A hint only: the name
 * at that slot is compared, so any change to the users, or a load, merely
 * makes it miss. */
static struct user *get_user_hinted(struct kt_auth *a, struct kt_bytes name) {
  if (a->last_user < a->n_users && beq(a->users[a->last_user].name, name))
    return &a->users[a->last_user];
  bool found;
  size_t i = find(a->users, a->n_users, sizeof *a->users, name, &found);
  if (!found)
    return NULL;
  a->last_user = i;
  return &a->users[i];
}

static struct role *get_role(const struct kt_auth *a, struct kt_bytes name) {
  bool found;
  size_t i = find(a->roles, a->n_roles, sizeof *a->roles, name, &found);
  return found ? &a->roles[i] : NULL;
}

static bool user_has(const struct user *u, struct kt_bytes role) {
  bool found;
  find(u->roles, u->n_roles, sizeof *u->roles, role, &found);
  return found;
}

/* ---- lifetime ---- */

/* Stamps are unique in the process, not per store: a member replaces its
 * store on a snapshot install, and a grant kept from the old one must not
 * match the new one's stamp. */
static _Atomic uint64_t last_stamp;

static uint64_t new_stamp(void) { return atomic_fetch_add(&last_stamp, 1) + 1; }

struct kt_auth *kt_auth_new(void) {
  struct kt_auth *a = calloc(1, sizeof *a);
  kt_assert(a);
  a->stamp = new_stamp();
  return a;
}

static void user_free(struct user *u) {
  bfree(&u->name);
  free(u->hash);
  for (size_t i = 0; i < u->n_roles; i++)
    bfree(&u->roles[i]);
  free(u->roles);
  free(u->rd);
  free(u->wr);
  kt_arena_free(&u->cache);
}

static void role_free(struct role *r) {
  bfree(&r->name);
  for (size_t i = 0; i < r->n; i++) {
    bfree(&r->perms[i].key);
    bfree(&r->perms[i].end);
  }
  free(r->perms);
}

static void clear(struct kt_auth *a) {
  for (size_t i = 0; i < a->n_users; i++)
    user_free(&a->users[i]);
  for (size_t i = 0; i < a->n_roles; i++)
    role_free(&a->roles[i]);
  free(a->users);
  free(a->roles);
  memset(a, 0, sizeof *a);
}

void kt_auth_free(struct kt_auth *a) {
  if (!a)
    return;
  clear(a);
  free(a);
}

bool kt_auth_enabled(const struct kt_auth *a) { return a->enabled; }
uint64_t kt_auth_revision(const struct kt_auth *a) { return a->revision; }
uint64_t kt_auth_stamp(const struct kt_auth *a) { return a->stamp; }

/* ---- changes ---- */

static void *grow(void *v, size_t n, size_t *cap, size_t size) {
  if (n < *cap)
    return v;
  *cap = *cap ? *cap * 2 : 8;
  v = realloc(v, *cap * size);
  kt_assert(v);
  return v;
}

/* Insert at index i of a sorted array. */
#define INSERT_AT(arr, n, cap, i, item)                                                            \
  do {                                                                                             \
    (arr) = grow((arr), (n), &(cap), sizeof *(arr));                                               \
    memmove((arr) + (i) + 1, (arr) + (i), ((n) - (i)) * sizeof *(arr));                            \
    (arr)[(i)] = (item);                                                                           \
    (n)++;                                                                                         \
  } while (0)

#define REMOVE_AT(arr, n, i)                                                                       \
  do {                                                                                             \
    memmove((arr) + (i), (arr) + (i) + 1, ((n) - (i)-1) * sizeof *(arr));                          \
    (n)--;                                                                                         \
  } while (0)

static int set_hash(struct user *u, const struct kt_auth_req *r, struct kt_err *e) {
  if (r->hash.n >= KT_AUTH_HASH_MAX)
    return kt_err_set(e, KT_EINVAL, "password hash too long");
  if (r->hash.n && memchr(r->hash.p, 0, r->hash.n))
    return kt_err_set(e, KT_EINVAL, "password hash contains a NUL byte");
  free(u->hash);
  u->hash = NULL;
  if (r->hash.n) {
    u->hash = malloc(r->hash.n + 1);
    kt_assert(u->hash);
    memcpy(u->hash, r->hash.p, r->hash.n);
    u->hash[r->hash.n] = 0;
  }
  return 0;
}

static int need_name(struct kt_bytes name, int empty_code, struct kt_err *e) {
  if (!name.n)
    return kt_err_set(e, empty_code, "%s", kt_strerror(empty_code));
  if (name.n > KT_AUTH_NAME_MAX)
    return kt_err_set(e, KT_EINVAL, "name longer than %d bytes", KT_AUTH_NAME_MAX);
  if (memchr(name.p, 0, name.n)) /* names travel as C strings (tokens, logs) */
    return kt_err_set(e, KT_EINVAL, "name contains a NUL byte");
  return 0;
}

static int user_add(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  int rc = need_name(r->name, KT_EUSEREMPTY, e);
  if (rc)
    return rc;
  bool found;
  size_t i = find(a->users, a->n_users, sizeof *a->users, r->name, &found);
  if (found)
    return kt_err_set(e, KT_EUSEREXISTS, "%s", kt_strerror(KT_EUSEREXISTS));
  struct user u = {.name = dup(r->name), .no_password = r->no_password, .since = a->revision + 1};
  if ((rc = set_hash(&u, r, e))) {
    user_free(&u);
    return rc;
  }
  INSERT_AT(a->users, a->n_users, a->cap_users, i, u);
  return 0;
}

static int user_delete(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  if (a->enabled && beq(r->name, ROOT))
    return kt_err_set(e, KT_EINVALIDAUTHMGMT, "%s", kt_strerror(KT_EINVALIDAUTHMGMT));
  bool found;
  size_t i = find(a->users, a->n_users, sizeof *a->users, r->name, &found);
  if (!found)
    return kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
  user_free(&a->users[i]);
  REMOVE_AT(a->users, a->n_users, i);
  return 0;
}

static int user_grant(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  struct user *u = get_user(a, r->name);
  if (!u)
    return kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
  if (!beq(r->role, ROOT) && !get_role(a, r->role))
    return kt_err_set(e, KT_EROLENOTFOUND, "%s", kt_strerror(KT_EROLENOTFOUND));
  bool found;
  size_t i = find(u->roles, u->n_roles, sizeof *u->roles, r->role, &found);
  if (found)
    return -1; /* already granted: nothing changes, no error (etcd 3.4) */
  size_t cap = u->n_roles;
  INSERT_AT(u->roles, u->n_roles, cap, i, dup(r->role));
  return 0;
}

static int user_revoke(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  if (a->enabled && beq(r->name, ROOT) && beq(r->role, ROOT))
    return kt_err_set(e, KT_EINVALIDAUTHMGMT, "%s", kt_strerror(KT_EINVALIDAUTHMGMT));
  struct user *u = get_user(a, r->name);
  if (!u)
    return kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
  bool found;
  size_t i = find(u->roles, u->n_roles, sizeof *u->roles, r->role, &found);
  if (!found)
    return kt_err_set(e, KT_EROLENOTGRANTED, "%s", kt_strerror(KT_EROLENOTGRANTED));
  bfree(&u->roles[i]);
  REMOVE_AT(u->roles, u->n_roles, i);
  return 0;
}

static int role_add(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  int rc = need_name(r->name, KT_EROLEEMPTY, e);
  if (rc)
    return rc;
  bool found;
  size_t i = find(a->roles, a->n_roles, sizeof *a->roles, r->name, &found);
  if (found)
    return kt_err_set(e, KT_EROLEEXISTS, "%s", kt_strerror(KT_EROLEEXISTS));
  struct role x = {.name = dup(r->name)};
  INSERT_AT(a->roles, a->n_roles, a->cap_roles, i, x);
  return 0;
}

static int role_delete(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  if (a->enabled && beq(r->name, ROOT))
    return kt_err_set(e, KT_EINVALIDAUTHMGMT, "%s", kt_strerror(KT_EINVALIDAUTHMGMT));
  bool found;
  size_t i = find(a->roles, a->n_roles, sizeof *a->roles, r->name, &found);
  if (!found)
    return kt_err_set(e, KT_EROLENOTFOUND, "%s", kt_strerror(KT_EROLENOTFOUND));
  /* every user loses it (etcd: O(users), as here) */
  for (size_t k = 0; k < a->n_users; k++) {
    struct user *u = &a->users[k];
    size_t j = find(u->roles, u->n_roles, sizeof *u->roles, r->name, &found);
    if (found) {
      bfree(&u->roles[j]);
      REMOVE_AT(u->roles, u->n_roles, j);
    }
  }
  role_free(&a->roles[i]);
  REMOVE_AT(a->roles, a->n_roles, i);
  return 0;
}

/* Permissions sorted by key; one (key, end) pair at most. */
static size_t perm_find(const struct role *x, struct kt_bytes key, struct kt_bytes end,
                        bool *exact) {
  size_t lo = 0, hi = x->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (bcmp_(x->perms[mid].key, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  *exact = false;
  for (size_t i = lo; i < x->n && beq(x->perms[i].key, key); i++)
    if (beq(x->perms[i].end, end)) {
      *exact = true;
      return i;
    }
  return lo;
}

static int role_grant(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  struct role *x = get_role(a, r->name);
  if (!x)
    return kt_err_set(e, KT_EROLENOTFOUND, "%s", kt_strerror(KT_EROLENOTFOUND));
  if (r->perm_type > KT_PERM_READWRITE)
    return kt_err_set(e, KT_EINVAL, "unknown permission type %u", r->perm_type);
  bool exact;
  size_t i = perm_find(x, r->key, r->range_end, &exact);
  if (exact) {
    x->perms[i].type = r->perm_type;
    return 0;
  }
  /* after every permission with the same key (etcd appends, then sorts stably by key) */
  while (i < x->n && beq(x->perms[i].key, r->key))
    i++;
  struct perm p = {r->perm_type, dup(r->key), dup(r->range_end)};
  INSERT_AT(x->perms, x->n, x->cap, i, p);
  return 0;
}

static int role_revoke(struct kt_auth *a, const struct kt_auth_req *r, struct kt_err *e) {
  struct role *x = get_role(a, r->name);
  if (!x)
    return kt_err_set(e, KT_EROLENOTFOUND, "%s", kt_strerror(KT_EROLENOTFOUND));
  bool exact;
  size_t i = perm_find(x, r->key, r->range_end, &exact);
  if (!exact)
    return kt_err_set(e, KT_EPERMNOTGRANTED, "%s", kt_strerror(KT_EPERMNOTGRANTED));
  bfree(&x->perms[i].key);
  bfree(&x->perms[i].end);
  REMOVE_AT(x->perms, x->n, i);
  return 0;
}

int kt_auth_apply(struct kt_auth *a, const struct kt_req *req, struct kt_err *e) {
  const struct kt_auth_req *r = &req->u.auth;
  int rc;
  struct user *root;
  switch (req->type) {
  case KT_MSG_AUTH_ENABLE:
    if (a->enabled)
      return 0; /* etcd: ignored, no new revision */
    root = get_user(a, ROOT);
    if (!root)
      return kt_err_set(e, KT_EROOTUSERNOTEXIST, "%s", kt_strerror(KT_EROOTUSERNOTEXIST));
    if (!user_has(root, ROOT))
      return kt_err_set(e, KT_EROOTROLENOTEXIST, "%s", kt_strerror(KT_EROOTROLENOTEXIST));
    a->enabled = true;
    a->enabled_rev = a->revision + 1;
    rc = 0;
    break;
  case KT_MSG_AUTH_DISABLE:
    if (!a->enabled)
      return 0;
    a->enabled = false;
    rc = 0;
    break;
  case KT_MSG_USER_ADD:
    rc = user_add(a, r, e);
    break;
  case KT_MSG_USER_DELETE:
    rc = user_delete(a, r, e);
    break;
  case KT_MSG_USER_CHANGE_PASSWORD: {
    struct user *u = get_user(a, r->name);
    rc = u ? set_hash(u, r, e)
           : kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
    if (!rc)
      u->since = a->revision + 1;
    break;
  }
  case KT_MSG_USER_GRANT_ROLE:
    rc = user_grant(a, r, e);
    if (rc < 0)
      return 0;
    break;
  case KT_MSG_USER_REVOKE_ROLE:
    rc = user_revoke(a, r, e);
    break;
  case KT_MSG_ROLE_ADD:
    rc = role_add(a, r, e);
    break;
  case KT_MSG_ROLE_DELETE:
    rc = role_delete(a, r, e);
    break;
  case KT_MSG_ROLE_GRANT_PERMISSION:
    rc = role_grant(a, r, e);
    break;
  case KT_MSG_ROLE_REVOKE_PERMISSION:
    rc = role_revoke(a, r, e);
    break;
  default:
    return kt_err_set(e, KT_EUNSUPPORTED, "not an auth change");
  }
  if (rc == 0)
    a->revision++, a->stamp = new_stamp();
  return rc;
}

/* ---- reads ---- */

int kt_auth_read(const struct kt_auth *a, const struct kt_req *req, struct kt_arena *arena,
                 struct kt_auth_resp *out, struct kt_err *e) {
  const struct kt_auth_req *r = &req->u.auth;
  memset(out, 0, sizeof *out);
  switch (req->type) {
  case KT_MSG_AUTH_STATUS:
    out->enabled = a->enabled;
    out->auth_revision = a->revision;
    return 0;
  case KT_MSG_USER_GET: {
    const struct user *u = get_user(a, r->name);
    if (!u)
      return kt_err_set(e, KT_EUSERNOTFOUND, "%s", kt_strerror(KT_EUSERNOTFOUND));
    out->roles = kt_arena_alloc(arena, (u->n_roles + 1) * sizeof *out->roles);
    for (size_t i = 0; i < u->n_roles; i++)
      out->roles[i] = u->roles[i];
    out->n_roles = (uint32_t)u->n_roles;
    return 0;
  }
  case KT_MSG_USER_LIST:
    out->users = kt_arena_alloc(arena, (a->n_users + 1) * sizeof *out->users);
    for (size_t i = 0; i < a->n_users; i++)
      out->users[i] = a->users[i].name;
    out->n_users = (uint32_t)a->n_users;
    return 0;
  case KT_MSG_ROLE_GET: {
    const struct role *x = get_role(a, r->name);
    if (!x)
      return kt_err_set(e, KT_EROLENOTFOUND, "%s", kt_strerror(KT_EROLENOTFOUND));
    out->perms = kt_arena_alloc(arena, (x->n + 1) * sizeof *out->perms);
    for (size_t i = 0; i < x->n; i++)
      out->perms[i] = (struct kt_auth_perm){x->perms[i].type, x->perms[i].key, x->perms[i].end};
    out->n_perms = (uint32_t)x->n;
    return 0;
  }
  case KT_MSG_ROLE_LIST:
    out->roles = kt_arena_alloc(arena, (a->n_roles + 1) * sizeof *out->roles);
    for (size_t i = 0; i < a->n_roles; i++)
      out->roles[i] = a->roles[i].name;
    out->n_roles = (uint32_t)a->n_roles;
    return 0;
  default:
    return kt_err_set(e, KT_EUNSUPPORTED, "not an auth read");
  }
}

const char *kt_auth_user_hash(const struct kt_auth *a, struct kt_bytes user, bool *no_password) {
  const struct user *u = get_user(a, user);
  *no_password = u && u->no_password;
  return u ? u->hash : NULL;
}

bool kt_auth_user_exists(const struct kt_auth *a, struct kt_bytes user) {
  return get_user(a, user) != NULL;
}

bool kt_auth_bound_valid(struct kt_auth *a, struct kt_bytes user, uint64_t rev) {
  const struct user *u = get_user_hinted(a, user);
  return u && rev >= u->since && rev >= a->enabled_rev && rev <= a->revision;
}

bool kt_auth_has_role(const struct kt_auth *a, struct kt_bytes user, struct kt_bytes role) {
  const struct user *u = get_user(a, user);
  return u && user_has(u, role);
}

/* ---- the check ---- */

/* Compare two range ends; NULL (no end) is the largest. */
static int end_cmp(const uint8_t *a, uint32_t an, const uint8_t *b, uint32_t bn) {
  if (!a || !b)
    return (a == NULL) - (b == NULL);
  return bcmp_((struct kt_bytes){a, an}, (struct kt_bytes){b, bn});
}

static int ivl_by_begin(const void *x, const void *y) {
  const struct ivl *a = x, *b = y;
  return bcmp_((struct kt_bytes){a->b, a->bn}, (struct kt_bytes){b->b, b->bn});
}

/* Sort and merge overlapping or touching intervals in place. */
static size_t merge(struct ivl *v, size_t n) {
  if (!n)
    return 0;
  qsort(v, n, sizeof *v, ivl_by_begin);
  size_t k = 0;
  for (size_t i = 1; i < n; i++) {
    struct ivl *cur = &v[k];
    if (!cur->e)
      break; /* reaches the end of the key space */
    if (bcmp_((struct kt_bytes){v[i].b, v[i].bn}, (struct kt_bytes){cur->e, cur->en}) <= 0) {
      if (end_cmp(v[i].e, v[i].en, cur->e, cur->en) > 0)
        cur->e = v[i].e, cur->en = v[i].en;
    } else {
      v[++k] = v[i];
    }
  }
  return k + 1;
}

static void rebuild(struct kt_auth *a, struct user *u) {
  free(u->rd);
  free(u->wr);
  u->rd = u->wr = NULL;
  u->n_rd = u->n_wr = 0;
  u->hint_rd = u->hint_wr = 0;
  kt_arena_reset(&u->cache);
  u->root = user_has(u, ROOT);
  size_t total = 0;
  for (size_t i = 0; i < u->n_roles; i++) {
    const struct role *x = get_role(a, u->roles[i]);
    total += x ? x->n : 0;
  }
  if (!total)
    return;
  u->rd = malloc(total * sizeof *u->rd);
  u->wr = malloc(total * sizeof *u->wr);
  kt_assert(u->rd && u->wr);
  for (size_t i = 0; i < u->n_roles; i++) {
    const struct role *x = get_role(a, u->roles[i]);
    for (size_t j = 0; x && j < x->n; j++) {
      const struct perm *p = &x->perms[j];
      struct ivl v = {p->key.p, NULL, p->key.n, 0};
      if (p->end.n == 0) { /* one key: [key, key "\0") */
        uint8_t *e = kt_arena_alloc(&u->cache, p->key.n + 1);
        if (p->key.n)
          memcpy(e, p->key.p, p->key.n);
        e[p->key.n] = 0;
        v.e = e, v.en = p->key.n + 1;
      } else if (!(p->end.n == 1 && p->end.p[0] == 0)) { /* [key, end); "\0": no end */
        v.e = p->end.p, v.en = p->end.n;
      }
      if (p->type == KT_PERM_READ || p->type == KT_PERM_READWRITE)
        u->rd[u->n_rd++] = v;
      if (p->type == KT_PERM_WRITE || p->type == KT_PERM_READWRITE)
        u->wr[u->n_wr++] = v;
    }
  }
  u->n_rd = merge(u->rd, u->n_rd);
  u->n_wr = merge(u->wr, u->n_wr);
}

static struct user *cached(struct kt_auth *a, struct kt_bytes name) {
  struct user *u = get_user_hinted(a, name);
  if (u && u->cache_rev != a->revision + 1) {
    rebuild(a, u);
    u->cache_rev = a->revision + 1; /* +1: 0 never matches a fresh user */
  }
  return u;
}

bool kt_auth_is_root(struct kt_auth *a, struct kt_bytes user) {
  struct user *u = cached(a, user);
  return u && u->root;
}

/* The last merged interval with begin <= key, or NULL. */
static const struct ivl *floor_ivl(const struct ivl *v, size_t n, struct kt_bytes key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (bcmp_((struct kt_bytes){v[mid].b, v[mid].bn}, key) <= 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo ? &v[lo - 1] : NULL;
}

/* Whether [key, range_end) (etcd's forms: no end, one key; "\0", from key
 * on; an end <= key, that key) lies in an interval that begins at or before
 * key and ends before e (e NULL: no end). */
static inline bool within(struct kt_bytes key, struct kt_bytes range_end, const uint8_t *e,
                          uint32_t en) {
  bool open = range_end.n == 1 && range_end.p[0] == 0;
  /* one key (or an empty range [key, end <= key): that key) lies in [b, e) */
  if (range_end.n == 0 || (!open && bcmp_(range_end, key) <= 0))
    return !e || bcmp_(key, (struct kt_bytes){e, en}) < 0;
  if (!e)
    return true;
  return !open && bcmp_(range_end, (struct kt_bytes){e, en}) <= 0;
}

bool kt_auth_allows(struct kt_auth *a, struct kt_bytes user, uint8_t type, struct kt_bytes key,
                    struct kt_bytes range_end) {
  struct user *u = cached(a, user);
  if (!u)
    return false;
  if (u->root)
    return true;
  const struct ivl *v = type == KT_PERM_WRITE ? u->wr : u->rd;
  size_t n = type == KT_PERM_WRITE ? u->n_wr : u->n_rd;
  size_t *hint = type == KT_PERM_WRITE ? &u->hint_wr : &u->hint_rd;
  /* The merged intervals are disjoint and sorted, so a key inside interval
   * i has i for its floor: a client writing under one prefix finds it at
   * the first look, without the binary search. */
  const struct ivl *f = *hint < n ? &v[*hint] : NULL;
  if (!f || bcmp_((struct kt_bytes){f->b, f->bn}, key) > 0 ||
      (f->e && bcmp_(key, (struct kt_bytes){f->e, f->en}) >= 0)) {
    f = floor_ivl(v, n, key);
    if (!f)
      return false;
    *hint = (size_t)(f - v);
  }
  return within(key, range_end, f->e, f->en);
}

bool kt_auth_grant_of(struct kt_auth *a, struct kt_bytes user, uint8_t type, struct kt_bytes key,
                      struct kt_auth_grant *g) {
  struct user *u = cached(a, user);
  if (!u)
    return false;
  if (u->root) {
    g->bn = g->en = 0, g->open = true; /* everything: [empty key, no end) */
    g->stamp = a->stamp;
    return true;
  }
  const struct ivl *v = type == KT_PERM_WRITE ? u->wr : u->rd;
  const struct ivl *f = floor_ivl(v, type == KT_PERM_WRITE ? u->n_wr : u->n_rd, key);
  if (!f || !within(key, (struct kt_bytes){0}, f->e, f->en) || f->bn > KT_AUTH_GRANT_KEY_MAX ||
      (f->e && f->en > KT_AUTH_GRANT_KEY_MAX))
    return false;
  g->bn = (uint8_t)f->bn;
  memcpy(g->b, f->b, f->bn);
  g->open = !f->e;
  g->en = f->e ? (uint8_t)f->en : 0;
  if (f->e)
    memcpy(g->e, f->e, f->en);
  g->stamp = a->stamp;
  return true;
}

bool kt_auth_grant_covers(const struct kt_auth_grant *g, struct kt_bytes key,
                          struct kt_bytes range_end) {
  /* as kt_auth_allows, with g for the interval holding key */
  return bcmp_((struct kt_bytes){g->b, g->bn}, key) <= 0 &&
         within(key, range_end, g->open ? NULL : g->e, g->en);
}

/* ---- snapshot part ---- */

#define MAGIC "KTAUTH01"

static void put_u32(struct kt_buf *b, uint32_t v) {
  uint8_t x[4];
  kt_put_u32be(x, v);
  kt_buf_append(b, x, 4);
}

static void put_bytes(struct kt_buf *b, struct kt_bytes x) {
  put_u32(b, x.n);
  kt_buf_append(b, x.p, x.n);
}

/* MAGIC | u32 body length | body: u8 enabled | u64 revision | u32 roles |
 * per role: bytes name | u32 perms | per perm: u8 type | bytes key | bytes
 * end | u32 users | per user: bytes name | u8 no_password | bytes hash |
 * u32 roles | bytes role... (bytes = u32 length | bytes; all big-endian) */
void kt_auth_save(const struct kt_auth *a, struct kt_buf *out) {
  kt_buf_append(out, MAGIC, 8);
  size_t at = out->len;
  put_u32(out, 0);
  uint8_t en = a->enabled;
  kt_buf_append(out, &en, 1);
  uint8_t rv[8];
  kt_put_u64be(rv, a->revision);
  kt_buf_append(out, rv, 8);
  put_u32(out, (uint32_t)a->n_roles);
  for (size_t i = 0; i < a->n_roles; i++) {
    const struct role *x = &a->roles[i];
    put_bytes(out, x->name);
    put_u32(out, (uint32_t)x->n);
    for (size_t j = 0; j < x->n; j++) {
      kt_buf_append(out, &x->perms[j].type, 1);
      put_bytes(out, x->perms[j].key);
      put_bytes(out, x->perms[j].end);
    }
  }
  put_u32(out, (uint32_t)a->n_users);
  for (size_t i = 0; i < a->n_users; i++) {
    const struct user *u = &a->users[i];
    put_bytes(out, u->name);
    uint8_t np = u->no_password;
    kt_buf_append(out, &np, 1);
    put_bytes(out,
              (struct kt_bytes){(const uint8_t *)u->hash, u->hash ? (uint32_t)strlen(u->hash) : 0});
    put_u32(out, (uint32_t)u->n_roles);
    for (size_t j = 0; j < u->n_roles; j++)
      put_bytes(out, u->roles[j]);
  }
  kt_put_u32be(out->p + at, (uint32_t)(out->len - at - 4));
}

struct rd {
  const uint8_t *p, *end;
};

static bool rd_u32(struct rd *r, uint32_t *v) {
  if (r->end - r->p < 4)
    return false;
  *v = kt_get_u32be(r->p);
  r->p += 4;
  return true;
}

static bool rd_u8(struct rd *r, uint8_t *v) {
  if (r->end - r->p < 1)
    return false;
  *v = *r->p++;
  return true;
}

static bool rd_bytes(struct rd *r, uint32_t max, struct kt_bytes *x) {
  uint32_t n;
  if (!rd_u32(r, &n) || n > max || (size_t)(r->end - r->p) < n)
    return false;
  *x = (struct kt_bytes){r->p, n};
  r->p += n;
  return true;
}

int kt_auth_load(struct kt_auth *a, const uint8_t *p, size_t len, size_t *used, struct kt_err *e) {
  uint32_t body;
  if (len < 12 || memcmp(p, MAGIC, 8) != 0)
    return kt_err_set(e, KT_ECORRUPT, "auth store: bad magic");
  body = kt_get_u32be(p + 8);
  if (body > len - 12)
    return kt_err_set(e, KT_ECORRUPT, "auth store: %u bytes, only %zu left", body, len - 12);
  struct rd r = {p + 12, p + 12 + body};
  struct kt_auth *t = kt_auth_new();
  uint8_t en = 0;
  uint32_t n;
  const char *what = "header";
  if (!rd_u8(&r, &en) || en > 1 || r.end - r.p < 8)
    goto bad;
  t->enabled = en;
  t->revision = kt_get_u64be(r.p);
  r.p += 8;
  what = "roles";
  if (!rd_u32(&r, &n) || n > (size_t)(r.end - r.p) / 8)
    goto bad;
  for (uint32_t i = 0; i < n; i++) {
    struct kt_auth_req q = {0};
    uint32_t np;
    struct kt_err ie = {0};
    if (!rd_bytes(&r, KT_AUTH_NAME_MAX, &q.name) || !rd_u32(&r, &np) ||
        np > (size_t)(r.end - r.p) / 9)
      goto bad;
    if (role_add(t, &q, &ie) || (i && bcmp_(t->roles[t->n_roles - 1].name, q.name) != 0))
      goto bad; /* empty, duplicate or out of order */
    for (uint32_t j = 0; j < np; j++) {
      if (!rd_u8(&r, &q.perm_type) || q.perm_type > KT_PERM_READWRITE ||
          !rd_bytes(&r, UINT32_MAX, &q.key) || !rd_bytes(&r, UINT32_MAX, &q.range_end) ||
          role_grant(t, &q, &ie))
        goto bad;
      const struct role *x = &t->roles[t->n_roles - 1];
      if (x->n != j + 1 || !beq(x->perms[j].key, q.key) || !beq(x->perms[j].end, q.range_end))
        goto bad; /* in the order kt_auth_save writes, each once */
    }
  }
  what = "users";
  if (!rd_u32(&r, &n) || n > (size_t)(r.end - r.p) / 13)
    goto bad;
  for (uint32_t i = 0; i < n; i++) {
    struct kt_auth_req q = {0};
    uint8_t np;
    uint32_t nr;
    struct kt_err ie = {0};
    if (!rd_bytes(&r, KT_AUTH_NAME_MAX, &q.name) || !rd_u8(&r, &np) || np > 1 ||
        !rd_bytes(&r, KT_AUTH_HASH_MAX - 1, &q.hash) || !rd_u32(&r, &nr) ||
        nr > (size_t)(r.end - r.p) / 4)
      goto bad;
    q.no_password = np;
    if (user_add(t, &q, &ie) || bcmp_(t->users[t->n_users - 1].name, q.name) != 0)
      goto bad;
    for (uint32_t j = 0; j < nr; j++) {
      if (!rd_bytes(&r, KT_AUTH_NAME_MAX, &q.role))
        goto bad;
      struct user *u = &t->users[t->n_users - 1];
      bool found;
      size_t at = find(u->roles, u->n_roles, sizeof *u->roles, q.role, &found);
      if (found || !q.role.n || at != u->n_roles)
        goto bad; /* ascending, each once */
      size_t cap = u->n_roles;
      INSERT_AT(u->roles, u->n_roles, cap, at, dup(q.role));
    }
  }
  what = "trailing bytes";
  if (r.p != r.end)
    goto bad;
  t->enabled_rev = t->revision;
  for (size_t i = 0; i < t->n_users; i++)
    t->users[i].since = t->revision;
  clear(a);
  *a = *t;
  a->stamp = new_stamp();
  free(t);
  *used = 12 + body;
  return 0;
bad:
  kt_auth_free(t);
  return kt_err_set(e, KT_ECORRUPT, "auth store: bad %s at byte %zu", what, (size_t)(r.p - p));
}

bool kt_auth_equal(const struct kt_auth *x, const struct kt_auth *y) {
  struct kt_buf a = {0}, b = {0};
  kt_auth_save(x, &a);
  kt_auth_save(y, &b);
  bool eq = a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
  kt_buf_free(&a);
  kt_buf_free(&b);
  return eq;
}
