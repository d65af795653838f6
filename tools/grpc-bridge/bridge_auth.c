/* tools/grpc-bridge/bridge_auth.c — etcd's Auth service over libketch.
 *
 * Every Auth method but Authenticate is a unary call like KV's: protobuf
 * request -> ketch_auth_async on the caller's handle -> protobuf response.
 * The member does every check (who may do what, etcd's errors); this file
 * only converts. Authenticate needs a handle of its own (the member binds
 * the connection that authenticates): bridge_main.c opens it and uses the
 * two helpers at the end to decode the request and encode the answer.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bridge.h"
#include "../grpc/grpc_client.h"
#include "rpc.pb-c.h"

static const struct {
  const char *path;
  int op; /* KETCH_OP_* */
} methods[] = {
    {"/etcdserverpb.Auth/AuthEnable", KETCH_OP_AUTH_ENABLE},
    {"/etcdserverpb.Auth/AuthDisable", KETCH_OP_AUTH_DISABLE},
    {"/etcdserverpb.Auth/AuthStatus", KETCH_OP_AUTH_STATUS},
    {"/etcdserverpb.Auth/Authenticate", KETCH_OP_AUTHENTICATE},
    {"/etcdserverpb.Auth/UserAdd", KETCH_OP_USER_ADD},
    {"/etcdserverpb.Auth/UserGet", KETCH_OP_USER_GET},
    {"/etcdserverpb.Auth/UserList", KETCH_OP_USER_LIST},
    {"/etcdserverpb.Auth/UserDelete", KETCH_OP_USER_DELETE},
    {"/etcdserverpb.Auth/UserChangePassword", KETCH_OP_USER_CHANGE_PASSWORD},
    {"/etcdserverpb.Auth/UserGrantRole", KETCH_OP_USER_GRANT_ROLE},
    {"/etcdserverpb.Auth/UserRevokeRole", KETCH_OP_USER_REVOKE_ROLE},
    {"/etcdserverpb.Auth/RoleAdd", KETCH_OP_ROLE_ADD},
    {"/etcdserverpb.Auth/RoleGet", KETCH_OP_ROLE_GET},
    {"/etcdserverpb.Auth/RoleList", KETCH_OP_ROLE_LIST},
    {"/etcdserverpb.Auth/RoleDelete", KETCH_OP_ROLE_DELETE},
    {"/etcdserverpb.Auth/RoleGrantPermission", KETCH_OP_ROLE_GRANT_PERMISSION},
    {"/etcdserverpb.Auth/RoleRevokePermission", KETCH_OP_ROLE_REVOKE_PERMISSION},
};

int kt_bridge_auth_method(const char *path) {
  if (strncmp(path, "/etcdserverpb.Auth/", 19) != 0)
    return -1; /* most calls: one comparison, not one per Auth method */
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(path, methods[i].path) == 0)
      return methods[i].op;
  return -1;
}

static void auth_header(Etcdserverpb__ResponseHeader *o, const ketch_header *h) {
  etcdserverpb__response_header__init(o);
  o->cluster_id = h->cluster_id;
  o->member_id = h->member_id;
  o->revision = h->revision;
  o->raft_term = h->raft_term;
}

/* Every Auth response but these four is {header}: one layout, one encoder. */
#define HEADER_ONLY(T)                                                                             \
  (sizeof(T) == sizeof(Etcdserverpb__AuthEnableResponse) &&                                        \
   offsetof(T, header) == offsetof(Etcdserverpb__AuthEnableResponse, header))
_Static_assert(HEADER_ONLY(Etcdserverpb__AuthUserAddResponse) &&
                   HEADER_ONLY(Etcdserverpb__AuthRoleRevokePermissionResponse),
               "Auth's header-only responses share one layout");

static const ProtobufCMessageDescriptor *header_only_desc(int op) {
  switch (op) {
  case KETCH_OP_AUTH_ENABLE:
    return &etcdserverpb__auth_enable_response__descriptor;
  case KETCH_OP_AUTH_DISABLE:
    return &etcdserverpb__auth_disable_response__descriptor;
  case KETCH_OP_USER_ADD:
    return &etcdserverpb__auth_user_add_response__descriptor;
  case KETCH_OP_USER_DELETE:
    return &etcdserverpb__auth_user_delete_response__descriptor;
  case KETCH_OP_USER_CHANGE_PASSWORD:
    return &etcdserverpb__auth_user_change_password_response__descriptor;
  case KETCH_OP_USER_GRANT_ROLE:
    return &etcdserverpb__auth_user_grant_role_response__descriptor;
  case KETCH_OP_USER_REVOKE_ROLE:
    return &etcdserverpb__auth_user_revoke_role_response__descriptor;
  case KETCH_OP_ROLE_ADD:
    return &etcdserverpb__auth_role_add_response__descriptor;
  case KETCH_OP_ROLE_DELETE:
    return &etcdserverpb__auth_role_delete_response__descriptor;
  case KETCH_OP_ROLE_GRANT_PERMISSION:
    return &etcdserverpb__auth_role_grant_permission_response__descriptor;
  case KETCH_OP_ROLE_REVOKE_PERMISSION:
    return &etcdserverpb__auth_role_revoke_permission_response__descriptor;
  default:
    return NULL;
  }
}

struct auth_call {
  kt_bridge_done done;
  void *arg;
};

static void on_auth_result(void *arg, int err, const ketch_result *res) {
  struct auth_call *ac = arg;
  kt_bridge_done done = ac->done;
  void *darg = ac->arg;
  free(ac);
  if (err) {
    kt_bridge_fail(done, darg, err, res->message);
    return;
  }
  Etcdserverpb__ResponseHeader h;
  auth_header(&h, &res->header);
  const ketch_auth_result *a = &res->auth;
  const ProtobufCMessageDescriptor *d = header_only_desc(res->type);
  if (d) {
    Etcdserverpb__AuthEnableResponse o;
    protobuf_c_message_init(d, &o);
    o.header = &h;
    kt_bridge_finish(done, darg, &o.base);
    return;
  }
  switch (res->type) {
  case KETCH_OP_AUTH_STATUS: {
    Etcdserverpb__AuthStatusResponse o = ETCDSERVERPB__AUTH_STATUS_RESPONSE__INIT;
    o.header = &h;
    o.enabled = a->enabled;
    o.authrevision = a->auth_revision;
    kt_bridge_finish(done, darg, &o.base);
    return;
  }
  case KETCH_OP_USER_GET:
  case KETCH_OP_ROLE_LIST: {
    Etcdserverpb__AuthUserGetResponse o = ETCDSERVERPB__AUTH_USER_GET_RESPONSE__INIT;
    Etcdserverpb__AuthRoleListResponse l = ETCDSERVERPB__AUTH_ROLE_LIST_RESPONSE__INIT;
    o.header = l.header = &h;
    o.roles = l.roles = (char **)a->roles;
    o.n_roles = l.n_roles = a->n_roles;
    kt_bridge_finish(done, darg, res->type == KETCH_OP_USER_GET ? &o.base : &l.base);
    return;
  }
  case KETCH_OP_USER_LIST: {
    Etcdserverpb__AuthUserListResponse o = ETCDSERVERPB__AUTH_USER_LIST_RESPONSE__INIT;
    o.header = &h;
    o.users = (char **)a->users;
    o.n_users = a->n_users;
    kt_bridge_finish(done, darg, &o.base);
    return;
  }
  case KETCH_OP_ROLE_GET: {
    Etcdserverpb__AuthRoleGetResponse o = ETCDSERVERPB__AUTH_ROLE_GET_RESPONSE__INIT;
    size_t n = a->n_perms;
    Authpb__Permission *p = calloc(n ? n : 1, sizeof *p);
    Authpb__Permission **v = calloc(n ? n : 1, sizeof *v);
    if (!p || !v) {
      free(p);
      free(v);
      done(darg, KT_GRPC_RESOURCE_EXHAUSTED, "ketch-grpc: out of memory", NULL, 0);
      return;
    }
    for (size_t i = 0; i < n; i++) {
      authpb__permission__init(&p[i]);
      p[i].permtype = (Authpb__Permission__Type)a->perms[i].perm_type;
      p[i].key = (ProtobufCBinaryData){a->perms[i].key_len, (uint8_t *)a->perms[i].key};
      p[i].range_end =
          (ProtobufCBinaryData){a->perms[i].range_end_len, (uint8_t *)a->perms[i].range_end};
      v[i] = &p[i];
    }
    o.header = &h;
    o.perm = v;
    o.n_perm = n;
    kt_bridge_finish(done, darg, &o.base);
    free(p);
    free(v);
    return;
  }
  default:
    done(darg, KT_GRPC_INTERNAL, "ketch-grpc: unexpected Auth result", NULL, 0);
  }
}

/* The request of op in msg, as a ketch_auth_req pointing into the unpacked
 * message *keep (freed by the caller). 0, or a ketch error with *why. */
static int convert(int op, const uint8_t *msg, size_t len, ketch_auth_req *q,
                   ProtobufCMessage **keep, const char **why) {
  memset(q, 0, sizeof *q);
  *why = NULL;
  switch (op) {
  case KETCH_OP_AUTH_ENABLE:
    *keep = (ProtobufCMessage *)etcdserverpb__auth_enable_request__unpack(NULL, len, msg);
    break;
  case KETCH_OP_AUTH_DISABLE:
    *keep = (ProtobufCMessage *)etcdserverpb__auth_disable_request__unpack(NULL, len, msg);
    break;
  case KETCH_OP_AUTH_STATUS:
    *keep = (ProtobufCMessage *)etcdserverpb__auth_status_request__unpack(NULL, len, msg);
    break;
  case KETCH_OP_USER_LIST:
    *keep = (ProtobufCMessage *)etcdserverpb__auth_user_list_request__unpack(NULL, len, msg);
    break;
  case KETCH_OP_ROLE_LIST:
    *keep = (ProtobufCMessage *)etcdserverpb__auth_role_list_request__unpack(NULL, len, msg);
    break;
  case KETCH_OP_USER_ADD: {
    Etcdserverpb__AuthUserAddRequest *r =
        etcdserverpb__auth_user_add_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r) {
      q->name = r->name;
      q->no_password = r->options && r->options->no_password;
      q->password = q->no_password ? NULL : r->password;
    }
    break;
  }
  case KETCH_OP_USER_GET:
  case KETCH_OP_USER_DELETE: {
    Etcdserverpb__AuthUserGetRequest *r =
        etcdserverpb__auth_user_get_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r; /* UserDelete has the same field 1 */
    if (r)
      q->name = r->name;
    break;
  }
  case KETCH_OP_USER_CHANGE_PASSWORD: {
    Etcdserverpb__AuthUserChangePasswordRequest *r =
        etcdserverpb__auth_user_change_password_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r) {
      q->name = r->name;
      q->password = r->password;
    }
    break;
  }
  case KETCH_OP_USER_GRANT_ROLE: {
    Etcdserverpb__AuthUserGrantRoleRequest *r =
        etcdserverpb__auth_user_grant_role_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r) {
      q->name = r->user;
      q->role = r->role;
    }
    break;
  }
  case KETCH_OP_USER_REVOKE_ROLE: {
    Etcdserverpb__AuthUserRevokeRoleRequest *r =
        etcdserverpb__auth_user_revoke_role_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r) {
      q->name = r->name;
      q->role = r->role;
    }
    break;
  }
  case KETCH_OP_ROLE_ADD:
  case KETCH_OP_ROLE_GET:
  case KETCH_OP_ROLE_DELETE: {
    /* RoleAdd's field 1 is `name`, RoleGet's and RoleDelete's `role`: one
     * string at field 1 in all three */
    Etcdserverpb__AuthRoleAddRequest *r =
        etcdserverpb__auth_role_add_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r)
      q->name = r->name;
    break;
  }
  case KETCH_OP_ROLE_GRANT_PERMISSION: {
    Etcdserverpb__AuthRoleGrantPermissionRequest *r =
        etcdserverpb__auth_role_grant_permission_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (!r)
      break;
    if (!r->perm || (unsigned)r->perm->permtype > AUTHPB__PERMISSION__TYPE__READWRITE) {
      *why = "ketch-grpc: RoleGrantPermission needs a permission of type READ, WRITE or "
             "READWRITE";
      return KETCH_EINVAL;
    }
    q->name = r->name;
    q->perm_type = (int)r->perm->permtype;
    q->key = r->perm->key.data;
    q->key_len = r->perm->key.len;
    q->range_end = r->perm->range_end.data;
    q->range_end_len = r->perm->range_end.len;
    break;
  }
  case KETCH_OP_ROLE_REVOKE_PERMISSION: {
    Etcdserverpb__AuthRoleRevokePermissionRequest *r =
        etcdserverpb__auth_role_revoke_permission_request__unpack(NULL, len, msg);
    *keep = (ProtobufCMessage *)r;
    if (r) {
      q->name = r->role;
      q->key = r->key.data;
      q->key_len = r->key.len;
      q->range_end = r->range_end.data;
      q->range_end_len = r->range_end.len;
    }
    break;
  }
  default:
    return KETCH_EUNSUPPORTED;
  }
  return 0;
}

static bool varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; *i < n && shift < 64; shift += 7) {
    uint8_t b = p[(*i)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* True when a top-level `string` field of the message holds a NUL byte:
 * protobuf-c hands strings over NUL-terminated, so "bad\0name" would reach
 * the member as "bad". Walks the wire bytes (malformed: false; unpacking
 * them has already failed or will). */
static bool string_has_nul(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint64_t tag, v;
    if (!varint(p, n, &i, &tag))
      return false;
    switch (tag & 7) {
    case 0:
      if (!varint(p, n, &i, &v))
        return false;
      break;
    case 1:
    case 5:
      if (n - i < ((tag & 7) == 1 ? 8u : 4u))
        return false;
      i += (tag & 7) == 1 ? 8 : 4;
      break;
    case 2: {
      if (!varint(p, n, &i, &v) || v > n - i)
        return false;
      const ProtobufCFieldDescriptor *f =
          tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                                 : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, v))
        return true;
      i += v;
      break;
    }
    default:
      return false;
    }
  }
  return false;
}

void kt_bridge_auth_call(ketch_client *kc, int op, const uint8_t *msg, size_t len,
                         kt_bridge_done done, void *arg) {
  ketch_auth_req q;
  ProtobufCMessage *keep = NULL;
  const char *why;
  int err = convert(op, msg, len, &q, &keep, &why);
  if (!err && !keep) {
    done(arg, KT_GRPC_INTERNAL, "grpc: error unmarshalling request: malformed protobuf", NULL, 0);
    return;
  }
  if (!err && string_has_nul(keep->descriptor, msg, len)) {
    err = KETCH_EINVAL;
    why = "ketch-grpc: a name or password holds a NUL byte";
  }
  struct auth_call *ac = err ? NULL : malloc(sizeof *ac);
  if (!err && !ac)
    err = KETCH_ENOMEM;
  if (!err) {
    *ac = (struct auth_call){done, arg};
    err = ketch_auth_async(kc, op, &q, on_auth_result, ac);
    if (err) {
      free(ac);
      why = ketch_errmsg(kc);
    }
  }
  if (keep)
    protobuf_c_message_free_unpacked(keep, NULL);
  if (err)
    kt_bridge_fail(done, arg, err, why);
}

/* ---- Authenticate (bridge_main.c runs it on a handle of its own) ---- */

int kt_bridge_authenticate_decode(const uint8_t *msg, size_t len, char **name, char **password) {
  Etcdserverpb__AuthenticateRequest *r = etcdserverpb__authenticate_request__unpack(NULL, len, msg);
  if (!r)
    return -1;
  /* a name holding a NUL names no user: asked as the empty name (the member
   * answers "authentication failed", or "not enabled") */
  bool nul = string_has_nul(r->base.descriptor, msg, len);
  *name = strdup(nul ? "" : r->name);
  *password = strdup(nul ? "" : r->password);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  if (!*name || !*password) {
    free(*name);
    free(*password);
    return -1;
  }
  return 0;
}

void kt_bridge_authenticate_done(const ketch_result *res, kt_bridge_done done, void *arg) {
  if (res->err) {
    kt_bridge_fail(done, arg, res->err, res->message);
    return;
  }
  Etcdserverpb__ResponseHeader h;
  auth_header(&h, &res->header);
  Etcdserverpb__AuthenticateResponse o = ETCDSERVERPB__AUTHENTICATE_RESPONSE__INIT;
  o.header = &h;
  o.token = (char *)(res->auth.token ? res->auth.token : "");
  kt_bridge_finish(done, arg, &o.base);
}
