/* core/apply.c — see apply.h for the data flow and the rules. */
#include "apply.h"

#include <stdlib.h>

void kt_sm_on_event(void *arg, const struct kt_event *ev) {
  struct kt_sm *sm = arg;
  if (sm->watches)
    kt_watch_publish(sm->watches, ev);
  if (ev->type == KT_EVENT_PUT && ev->kv.lease)
    (void)kt_lease_attach(sm->leases, ev->kv.lease, ev->kv.key);
  else
    (void)kt_lease_detach(sm->leases, ev->kv.key);
}

int kt_sm_check_leases(const struct kt_lease_mgr *m, const struct kt_request_op *op,
                       struct kt_err *e) {
  if (op->type == KT_OP_PUT) {
    const struct kt_put_req *p = &op->u.put;
    if (p->lease && !p->ignore_lease && !kt_lease_exists(m, p->lease))
      return kt_err_set(e, KT_ELEASENOTFOUND, "%s", kt_strerror(KT_ELEASENOTFOUND));
    return 0;
  }
  if (op->type != KT_OP_TXN)
    return 0;
  int rc;
  for (uint32_t i = 0; i < op->u.txn.n_success; i++)
    if ((rc = kt_sm_check_leases(m, &op->u.txn.success[i], e)))
      return rc;
  for (uint32_t i = 0; i < op->u.txn.n_failure; i++)
    if ((rc = kt_sm_check_leases(m, &op->u.txn.failure[i], e)))
      return rc;
  return 0;
}

/* The writes of one apply end here: their events become ready together. */
static void revision_done(struct kt_sm *sm, int64_t before) {
  int64_t rev = kt_mvcc_revision(sm->store);
  if (rev != before && sm->watches)
    kt_watch_revision_done(sm->watches, rev);
}

struct key_list {
  struct kt_bytes *v;
  size_t n, cap;
  struct kt_arena *a;
};

/* The lease manager's key bytes go away as the keys are deleted (detach
 * through the event hook): copy them into the arena first. */
static void collect_key(void *arg, struct kt_bytes key) {
  struct key_list *l = arg;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    kt_assert(l->v);
  }
  l->v[l->n++] = (struct kt_bytes){kt_arena_dup(l->a, key.p, key.n), key.n};
}

static int key_cmp(const void *x, const void *y) {
  return kt_bytes_cmp(*(const struct kt_bytes *)x, *(const struct kt_bytes *)y);
}

static int revoke(struct kt_sm *sm, int64_t id, struct kt_arena *a) {
  struct key_list keys = {.a = a};
  int rc = kt_lease_keys(sm->leases, id, collect_key, &keys);
  if (!rc) {
    int64_t before = kt_mvcc_revision(sm->store);
    /* In key order (as etcd): the lease's list is in attach order, which a
     * snapshot load does not keep, and the order gives the deletes their
     * sub-revisions (the store's hash, the order of watch events). */
    if (keys.n > 1)
      qsort(keys.v, keys.n, sizeof *keys.v, key_cmp);
    if (keys.n)
      kt_mvcc_delete_keys(sm->store, keys.v, keys.n, a);
    revision_done(sm, before);
    rc = kt_lease_revoke(sm->leases, id);
  }
  free(keys.v);
  return rc;
}

int kt_sm_apply(struct kt_sm *sm, const struct kt_req *req, int64_t now_ms, struct kt_arena *a,
                struct kt_sm_result *out, struct kt_err *e) {
  int rc;
  *out = (struct kt_sm_result){.type = req->type};
  e->code = 0;
  e->msg[0] = 0;
  switch (req->type) {
  case KT_MSG_PUT:
  case KT_MSG_DELETE:
  case KT_MSG_TXN: {
    int64_t before = kt_mvcc_revision(sm->store);
    rc = kt_sm_check_leases(sm->leases, &req->u.op, e);
    if (!rc)
      rc = kt_mvcc_apply(sm->store, &req->u.op, a, &out->op, e);
    revision_done(sm, before);
    break;
  }
  case KT_MSG_COMPACT:
    rc = kt_mvcc_compact(sm->store, req->u.compact.revision, e);
    break;
  case KT_MSG_LEASE_GRANT: {
    int64_t id = req->u.lease.id, ttl = req->u.lease.ttl;
    rc = kt_lease_grant(sm->leases, &id, &ttl, now_ms);
    if (!rc) {
      out->lease_id = id;
      out->lease_ttl = ttl;
    }
    break;
  }
  case KT_MSG_LEASE_REVOKE:
    rc = revoke(sm, req->u.lease.id, a);
    break;
  default:
    rc = KT_EUNSUPPORTED;
  }
  if (rc && !(e->code && e->msg[0]))
    kt_err_set(e, rc, "%s", kt_strerror(rc));
  out->revision = kt_mvcc_revision(sm->store);
  return rc;
}
