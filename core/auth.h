/* core/auth.h — the auth store (etcd's users, roles and key-range
 * permissions) and the one permission check every request kind goes
 * through. Pure: libc and core/ops.h only; no clock, no I/O, no hashing
 * (passwords arrive hashed: the member hashes and verifies them off its
 * event loop, core/node_auth.c).
 *
 * Owns: users (name, Argon2id hash string or none, roles), roles (name,
 * permissions READ / WRITE / READWRITE on a key, a range [key, end) or from
 * key on), the enabled flag and the auth revision. Changes come only
 * through kt_auth_apply, in log order on every member (it is replicated
 * state: it rides in snapshots, kt_auth_save / kt_auth_load), so every
 * member holds the same store at the same applied index. Every successful
 * change bumps the revision by one.
 *
 * Rules (etcd 3.4's auth store, auth/store.go):
 * - enable: refused without a root user (EROOTUSERNOTEXIST) or when root
 *   lacks the root role (EROOTROLENOTEXIST); enabling twice is a no-op.
 * - the role "root" may be granted without existing as a role; it
 *   permits everything. While auth is enabled, deleting the root user or
 *   the root role, or revoking the root role from root, is
 *   EINVALIDAUTHMGMT.
 * - granting a role a user already has, or a permission a role already has
 *   on the same key and range end, changes nothing (no error; the latter
 *   replaces its type); revoking what was not granted is EROLENOTGRANTED /
 *   EPERMNOTGRANTED.
 * - a permission's key range: range_end empty is the one key; "\0" is
 *   every key from key on; else [key, range_end).
 *
 * The check (kt_auth_check_*): a user with the root role may do anything;
 * anyone else needs, for each key range a request touches, a permission of
 * the right type whose union covers it (a point for one key, the whole
 * interval for a range). Per-user merged interval lists are rebuilt lazily
 * after each change (O(permissions of the user's roles)), so a check is a
 * binary search.
 */
#ifndef KT_AUTH_H
#define KT_AUTH_H

#include "msg.h"

enum kt_perm_type { KT_PERM_READ = 0, KT_PERM_WRITE = 1, KT_PERM_READWRITE = 2 };

#define KT_AUTH_NAME_MAX 256 /* user and role names */
#define KT_AUTH_HASH_MAX 256 /* a stored password hash string */
#define KT_AUTH_ROOT "root"

struct kt_auth;

struct kt_auth *kt_auth_new(void);
void kt_auth_free(struct kt_auth *a);

bool kt_auth_enabled(const struct kt_auth *a);
uint64_t kt_auth_revision(const struct kt_auth *a);

/* Applies one auth change (types AUTH_ENABLE .. ROLE_REVOKE_PERMISSION of
 * core/msg.h; USER_ADD and USER_CHANGE_PASSWORD carry the hash, not the
 * password). 0, or an error (e names it) and nothing changed. */
int kt_auth_apply(struct kt_auth *a, const struct kt_req *req, struct kt_err *e);

/* Reads for USER_GET / USER_LIST / ROLE_GET / ROLE_LIST / AUTH_STATUS: fill
 * r (arrays from arena). 0 or EUSERNOTFOUND / EROLENOTFOUND. */
int kt_auth_read(const struct kt_auth *a, const struct kt_req *req, struct kt_arena *arena,
                 struct kt_auth_resp *r, struct kt_err *e);

/* The stored hash of a user (NUL-terminated), NULL if none or no such user;
 * *no_password tells a user added with --no-password. Valid until the next
 * kt_auth_apply. */
const char *kt_auth_user_hash(const struct kt_auth *a, struct kt_bytes user, bool *no_password);
bool kt_auth_user_exists(const struct kt_auth *a, struct kt_bytes user);
/* Is a connection (or token) that authenticated as `user` at auth revision
 * `rev` still that user's? No when the user was deleted, its password
 * changed or auth was enabled again since (etcd drops a user's tokens then);
 * role and permission changes do not matter here (they are checked on every
 * request). */
bool kt_auth_bound_valid(struct kt_auth *a, struct kt_bytes user, uint64_t rev);
/* The user has the root role (and exists). */
bool kt_auth_is_root(struct kt_auth *a, struct kt_bytes user);
/* The user holds the role. */
bool kt_auth_has_role(const struct kt_auth *a, struct kt_bytes user, struct kt_bytes role);

/* May `user` access [key, range_end) (etcd's range rules) for `type`
 * (READ or WRITE)? Root may always. */
bool kt_auth_allows(struct kt_auth *a, struct kt_bytes user, uint8_t type, struct kt_bytes key,
                    struct kt_bytes range_end);

/* A permission a caller keeps: while kt_auth_stamp() is still `stamp`, the
 * user it was found for may READ (or WRITE) every key of [b, e) (open: no
 * end). The ends are copies, so a kept grant never points into the store.
 * core/node_auth.c keeps one of each type per connection, so a client's
 * next put or range under the same permission skips the lookup. */
#define KT_AUTH_GRANT_KEY_MAX 48
struct kt_auth_grant {
  uint64_t stamp; /* 0: none */
  uint8_t bn, en;
  bool open;
  uint8_t b[KT_AUTH_GRANT_KEY_MAX], e[KT_AUTH_GRANT_KEY_MAX];
};
/* A new value with every change to the store and every load, unique in
 * the process (never 0): a replaced store never has an old one's stamp. */
uint64_t kt_auth_stamp(const struct kt_auth *a);
/* The merged permission interval of `type` that holds `key` for `user`
 * (everything for root), into *g with the current stamp; false (g left
 * alone) when there is none or its ends are too long to keep. */
bool kt_auth_grant_of(struct kt_auth *a, struct kt_bytes user, uint8_t type, struct kt_bytes key,
                      struct kt_auth_grant *g);
/* Whether [key, range_end) lies in g: kt_auth_allows's answer when the
 * store's stamp is still g's (its rules, for the interval g holds). */
bool kt_auth_grant_covers(const struct kt_auth_grant *g, struct kt_bytes key,
                          struct kt_bytes range_end);

/* Snapshot part: "KTAUTH01" | the store in MessagePack. Load checks every
 * bound (outside bytes) and replaces the store. */
void kt_auth_save(const struct kt_auth *a, struct kt_buf *out);
int kt_auth_load(struct kt_auth *a, const uint8_t *p, size_t len, size_t *used, struct kt_err *e);
/* Same users, roles, permissions, enabled flag and revision. */
bool kt_auth_equal(const struct kt_auth *x, const struct kt_auth *y);

#endif
