/* client/result.c — libketch's public results: built from decoded responses,
 * deep-copied, freed.
 *
 * Owns: nothing across calls. kt_cl_result_build fills a ketch_result in an
 * arena the caller gives (res_arena for callbacks: byte strings point into
 * the input buffer, valid until the callback returns); ketch_result_dup
 * copies any result into one heap block (struct owned_result: the result
 * and the arena of everything it points to), which ketch_result_free frees
 * in one go. Synchronous calls hand such a copy to the caller.
 *
 * Invariant: the four KV results (range, put, del, txn) sit at the start of
 * both ketch_result's and ketch_op_result's unions, so a txn's responses and
 * a top-level KV result share one builder and one copier.
 */
#include "client_int.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The bytes of the KV part of either union. */
#define KV_UNION_BYTES (sizeof(ketch_op_result) - offsetof(ketch_op_result, range))
_Static_assert(sizeof(ketch_result) - offsetof(ketch_result, range) >= KV_UNION_BYTES,
               "ketch_result's union holds ketch_op_result's");

const char *kt_cl_dup_str(struct kt_arena *a, const void *p, size_t n) {
  char *s = kt_arena_alloc(a, n + 1);
  if (n)
    memcpy(s, p, n);
  s[n] = 0;
  return s;
}

/* ---- from decoded responses (pointing into them) ---- */

void kt_cl_kv_out(ketch_kv *o, const struct kt_kv *k) {
  o->key = k->key.p ? (const char *)k->key.p : "";
  o->key_len = k->key.n;
  o->value = k->value.p ? (const char *)k->value.p : "";
  o->value_len = k->value.n;
  o->create_revision = k->create_revision;
  o->mod_revision = k->mod_revision;
  o->version = k->version;
  o->lease = k->lease;
}

const ketch_kv *kt_cl_kvs_out(struct kt_arena *a, const struct kt_kv *k, uint32_t n) {
  if (!n)
    return NULL;
  ketch_kv *o = kt_arena_alloc(a, sizeof *o * n);
  for (uint32_t i = 0; i < n; i++)
    kt_cl_kv_out(&o[i], &k[i]);
  return o;
}

static void op_out(struct kt_arena *a, ketch_op_result *o, const struct kt_response_op *r) {
  memset(o, 0, sizeof *o);
  o->type = r->type;
  switch (r->type) {
  case KT_OP_RANGE:
    o->range.kvs = kt_cl_kvs_out(a, r->u.range.kvs, r->u.range.n_kvs);
    o->range.n_kvs = r->u.range.n_kvs;
    o->range.more = r->u.range.more;
    o->range.count = r->u.range.count;
    break;
  case KT_OP_PUT:
    o->put.prev_kv = r->u.put.has_prev_kv ? kt_cl_kvs_out(a, &r->u.put.prev_kv, 1) : NULL;
    break;
  case KT_OP_DELETE:
    o->del.deleted = r->u.del.deleted;
    o->del.prev_kvs = kt_cl_kvs_out(a, r->u.del.prev_kvs, r->u.del.n_prev_kvs);
    o->del.n_prev_kvs = r->u.del.n_prev_kvs;
    break;
  case KT_OP_TXN: {
    uint32_t n = r->u.txn.n_responses;
    ketch_op_result *rs = n ? kt_arena_alloc(a, sizeof *rs * n) : NULL;
    for (uint32_t i = 0; i < n; i++)
      op_out(a, &rs[i], &r->u.txn.responses[i]);
    o->txn.succeeded = r->u.txn.succeeded;
    o->txn.responses = rs;
    o->txn.n_responses = n;
    break;
  }
  default:
    break;
  }
}

/* n byte strings (URLs, names) as NUL-terminated copies in a; NULL when none. */
static const char *const *strs_out(struct kt_arena *a, const struct kt_bytes *u, uint32_t n) {
  if (!n)
    return NULL;
  const char **o = kt_arena_alloc(a, sizeof *o * n);
  for (uint32_t i = 0; i < n; i++)
    o[i] = kt_cl_dup_str(a, u[i].p, u[i].n);
  return o;
}

static void member_out(struct kt_arena *a, ketch_member *o, const struct kt_member_info *m) {
  *o = (ketch_member){.id = m->id,
                      .name = kt_cl_dup_str(a, m->name.p, m->name.n),
                      .peer_urls = strs_out(a, m->peer_urls, m->n_peer_urls),
                      .n_peer_urls = m->n_peer_urls,
                      .client_urls = strs_out(a, m->client_urls, m->n_client_urls),
                      .n_client_urls = m->n_client_urls,
                      .is_learner = m->is_learner};
}

static void member_list_out(struct kt_arena *a, ketch_member_list_result *o,
                            const struct kt_member_info *v, uint32_t n,
                            const struct kt_member_info *added) {
  ketch_member *ms = n ? kt_arena_alloc(a, sizeof *ms * n) : NULL;
  for (uint32_t i = 0; i < n; i++)
    member_out(a, &ms[i], &v[i]);
  o->members = ms;
  o->n_members = n;
  o->added = NULL;
  if (added) {
    ketch_member *m = kt_arena_alloc(a, sizeof *m);
    member_out(a, m, added);
    o->added = m;
  }
}

static void lease_out(struct kt_arena *a, ketch_lease_result *o, const struct kt_lease_resp *l) {
  o->id = l->id;
  o->ttl = l->ttl;
  o->granted_ttl = l->granted_ttl;
  if (l->n_keys) {
    ketch_kv *ks = kt_arena_alloc(a, sizeof *ks * l->n_keys);
    for (uint32_t i = 0; i < l->n_keys; i++) {
      memset(&ks[i], 0, sizeof ks[i]);
      ks[i].key = l->keys[i].n ? kt_arena_dup(a, l->keys[i].p, l->keys[i].n) : "";
      ks[i].key_len = l->keys[i].n;
      ks[i].value = "";
    }
    o->keys = ks;
    o->n_keys = l->n_keys;
  }
  if (l->n_leases) {
    o->leases = kt_arena_dup(a, l->leases, sizeof *l->leases * l->n_leases);
    o->n_leases = l->n_leases;
  }
}

static void auth_out(struct kt_arena *a, ketch_auth_result *o, const struct kt_auth_resp *r) {
  o->token = r->token.n ? kt_cl_dup_str(a, r->token.p, r->token.n) : NULL;
  o->enabled = r->enabled;
  o->auth_revision = r->auth_revision;
  o->users = strs_out(a, r->users, r->n_users);
  o->n_users = r->n_users;
  o->roles = strs_out(a, r->roles, r->n_roles);
  o->n_roles = r->n_roles;
  if (r->n_perms) {
    ketch_auth_perm *p = kt_arena_alloc(a, sizeof *p * r->n_perms);
    for (uint32_t i = 0; i < r->n_perms; i++) {
      const struct kt_auth_perm *x = &r->perms[i];
      p[i] = (ketch_auth_perm){x->type, kt_cl_dup_str(a, x->key.p, x->key.n), x->key.n,
                               kt_cl_dup_str(a, x->range_end.p, x->range_end.n), x->range_end.n};
    }
    o->perms = p;
    o->n_perms = r->n_perms;
  }
}

static void status_out(struct kt_arena *a, ketch_status_result *o, const struct kt_status_resp *s) {
  o->version = kt_cl_dup_str(a, s->version.p, s->version.n);
  o->db_size = s->db_size;
  o->db_size_in_use = s->db_size_in_use;
  o->leader = s->leader;
  o->raft_index = s->raft_index;
  o->raft_term = s->raft_term;
  o->raft_applied_index = s->raft_applied_index;
  o->is_learner = s->is_learner;
  o->errors = strs_out(a, s->errors, s->n_errors);
  o->n_errors = s->n_errors;
}

static bool is_lease(int type) {
  return type >= KETCH_OP_LEASE_GRANT && type <= KETCH_OP_LEASE_LEASES;
}
static bool is_auth(int type) {
  return type >= KETCH_OP_AUTH_ENABLE && type <= KETCH_OP_ROLE_REVOKE_PERMISSION;
}
static bool is_member(int type) {
  return type == KETCH_OP_MEMBER_LIST ||
         (type >= KETCH_OP_MEMBER_ADD && type <= KETCH_OP_MEMBER_PROMOTE);
}
static bool is_kv(int type) { return type >= KETCH_OP_RANGE && type <= KETCH_OP_TXN; }

void kt_cl_result_build(struct kt_arena *a, ketch_result *res, uint8_t type, int err,
                        const char *msg, size_t msg_len, const struct kt_resp *resp) {
  memset(res, 0, sizeof *res);
  res->type = type;
  res->err = err;
  res->message = err ? kt_cl_dup_str(a, msg, msg_len) : "";
  if (err || !resp)
    return;
  res->header = (ketch_header){resp->header.cluster_id, resp->header.member_id,
                               resp->header.revision, resp->header.raft_term};
  if (is_lease(type)) {
    lease_out(a, &res->lease, &resp->u.lease);
  } else if (is_auth(type)) {
    auth_out(a, &res->auth, &resp->u.auth);
  } else if (type == KETCH_OP_ALARM && resp->u.alarm.n_alarms) {
    uint32_t n = resp->u.alarm.n_alarms;
    ketch_alarm_member *v = kt_arena_alloc(a, sizeof *v * n);
    for (uint32_t i = 0; i < n; i++)
      v[i] = (ketch_alarm_member){resp->u.alarm.alarms[i].member_id, resp->u.alarm.alarms[i].alarm};
    res->alarm.alarms = v;
    res->alarm.n_alarms = n;
  } else if (type == KETCH_OP_HASH_KV) {
    res->hash_kv.hash = resp->u.hash_kv.hash;
    res->hash_kv.compact_revision = resp->u.hash_kv.compact_revision;
    res->hash_kv.hash_revision = resp->u.hash_kv.hash_revision;
  } else if (type == KETCH_OP_SNAPSHOT) {
    res->snapshot.blob_len = resp->u.snapshot.blob.n;
    res->snapshot.blob = resp->u.snapshot.blob.p;
    res->snapshot.remaining_bytes = resp->u.snapshot.remaining_bytes;
  } else if (type == KETCH_OP_MEMBER_LIST) {
    member_list_out(a, &res->member_list, resp->u.member_list.members,
                    resp->u.member_list.n_members, NULL);
  } else if (is_member(type)) {
    member_list_out(a, &res->member_list, resp->u.member.members, resp->u.member.n_members,
                    type == KETCH_OP_MEMBER_ADD ? &resp->u.member.member : NULL);
  } else if (type == KETCH_OP_STATUS) {
    status_out(a, &res->status, &resp->u.status);
  } else if (is_kv(type)) {
    ketch_op_result o;
    op_out(a, &o, &resp->u.op);
    memcpy(&res->range, &o.range, KV_UNION_BYTES);
  }
}

/* ---- deep copies ---- */

static const char *dup_bytes(struct kt_arena *a, const char *p, size_t n) {
  return n ? kt_arena_dup(a, p, n) : "";
}

static const void *dup_array(struct kt_arena *a, const void *p, size_t n, size_t size) {
  return n ? kt_arena_dup(a, p, n * size) : NULL;
}

static const ketch_kv *dup_kvs(struct kt_arena *a, const ketch_kv *kv, size_t n) {
  if (!kv || !n)
    return NULL;
  ketch_kv *o = kt_arena_alloc(a, sizeof *o * n);
  for (size_t i = 0; i < n; i++) {
    o[i] = kv[i];
    o[i].key = dup_bytes(a, kv[i].key, kv[i].key_len);
    o[i].value = dup_bytes(a, kv[i].value, kv[i].value_len);
  }
  return o;
}

static const char *const *dup_strs(struct kt_arena *a, const char *const *v, size_t n) {
  if (!n)
    return NULL;
  const char **o = kt_arena_alloc(a, sizeof *o * n);
  for (size_t i = 0; i < n; i++)
    o[i] = kt_cl_dup_str(a, v[i], strlen(v[i]));
  return o;
}

static void dup_op(struct kt_arena *a, ketch_op_result *o, const ketch_op_result *r) {
  *o = *r;
  switch (r->type) {
  case KETCH_OP_RANGE:
    o->range.kvs = dup_kvs(a, r->range.kvs, r->range.n_kvs);
    break;
  case KETCH_OP_PUT:
    o->put.prev_kv = dup_kvs(a, r->put.prev_kv, 1);
    break;
  case KETCH_OP_DELETE:
    o->del.prev_kvs = dup_kvs(a, r->del.prev_kvs, r->del.n_prev_kvs);
    break;
  case KETCH_OP_TXN: {
    size_t n = r->txn.n_responses;
    ketch_op_result *rs = n ? kt_arena_alloc(a, sizeof *rs * n) : NULL;
    for (size_t i = 0; i < n; i++)
      dup_op(a, &rs[i], &r->txn.responses[i]);
    o->txn.responses = rs;
    break;
  }
  default:
    break;
  }
}

static const ketch_member *dup_members(struct kt_arena *a, const ketch_member *v, size_t n) {
  if (!v || !n)
    return NULL;
  ketch_member *o = kt_arena_alloc(a, sizeof *o * n);
  for (size_t i = 0; i < n; i++) {
    o[i] = v[i];
    o[i].name = kt_cl_dup_str(a, v[i].name, strlen(v[i].name));
    o[i].peer_urls = dup_strs(a, v[i].peer_urls, v[i].n_peer_urls);
    o[i].client_urls = dup_strs(a, v[i].client_urls, v[i].n_client_urls);
  }
  return o;
}

static void dup_auth(struct kt_arena *a, ketch_auth_result *o, const ketch_auth_result *r) {
  o->token = r->token ? kt_cl_dup_str(a, r->token, strlen(r->token)) : NULL;
  o->users = dup_strs(a, r->users, r->n_users);
  o->roles = dup_strs(a, r->roles, r->n_roles);
  if (r->n_perms) {
    ketch_auth_perm *p = kt_arena_alloc(a, sizeof *p * r->n_perms);
    for (size_t i = 0; i < r->n_perms; i++) {
      p[i] = r->perms[i];
      p[i].key = kt_cl_dup_str(a, r->perms[i].key, r->perms[i].key_len);
      p[i].range_end = kt_cl_dup_str(a, r->perms[i].range_end, r->perms[i].range_end_len);
    }
    o->perms = p;
  }
}

static const ketch_event *dup_events(struct kt_arena *a, const ketch_event *v, size_t n) {
  ketch_event *ev = n ? kt_arena_alloc(a, sizeof *ev * n) : NULL;
  for (size_t i = 0; i < n; i++) {
    ev[i] = v[i];
    ev[i].kv.key = dup_bytes(a, v[i].kv.key, v[i].kv.key_len);
    ev[i].kv.value = dup_bytes(a, v[i].kv.value, v[i].kv.value_len);
    ev[i].prev_kv = v[i].prev_kv ? dup_kvs(a, v[i].prev_kv, 1) : NULL;
  }
  return ev;
}

ketch_result *ketch_result_dup(const ketch_result *res) {
  struct owned_result *o = calloc(1, sizeof *o);
  if (!o)
    return NULL;
  struct kt_arena *a = &o->arena;
  ketch_result *d = &o->res;
  *d = *res; /* then every pointer of the union member in use, copied */
  d->message = kt_cl_dup_str(a, res->message, strlen(res->message));
  if (res->err) {
    memset(&d->range, 0, sizeof *d - offsetof(ketch_result, range));
    return d;
  }
  int t = res->type;
  if (is_lease(t)) {
    d->lease.keys = dup_kvs(a, res->lease.keys, res->lease.n_keys);
    d->lease.leases = dup_array(a, res->lease.leases, res->lease.n_leases, sizeof(int64_t));
  } else if (t == KETCH_OP_ALARM) {
    d->alarm.alarms =
        dup_array(a, res->alarm.alarms, res->alarm.n_alarms, sizeof *res->alarm.alarms);
  } else if (is_auth(t)) {
    dup_auth(a, &d->auth, &res->auth);
  } else if (t == KETCH_OP_SNAPSHOT) {
    d->snapshot.blob =
        res->snapshot.blob_len ? kt_arena_dup(a, res->snapshot.blob, res->snapshot.blob_len) : NULL;
  } else if (t == KETCH_OP_WATCH) {
    d->watch.events = dup_events(a, res->watch.events, res->watch.n_events);
  } else if (is_member(t)) {
    d->member_list.members = dup_members(a, res->member_list.members, res->member_list.n_members);
    d->member_list.added = dup_members(a, res->member_list.added, 1);
  } else if (t == KETCH_OP_STATUS) {
    d->status.version = kt_cl_dup_str(a, res->status.version, strlen(res->status.version));
    d->status.errors = dup_strs(a, res->status.errors, res->status.n_errors);
  } else if (is_kv(t)) {
    ketch_op_result in = {.type = t}, out;
    memcpy(&in.range, &res->range, KV_UNION_BYTES);
    dup_op(a, &out, &in);
    memcpy(&d->range, &out.range, KV_UNION_BYTES);
  } /* hash_kv and the types with only a header point to nothing */
  return d;
}

void ketch_result_free(ketch_result *res) {
  if (!res)
    return;
  struct owned_result *o = (struct owned_result *)res;
  kt_arena_free(&o->arena);
  free(o);
}
