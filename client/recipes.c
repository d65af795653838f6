/* client/recipes.c — libketch's concurrency recipes: session, mutex, election
 * (etcd's clientv3/concurrency, 3.4 semantics), built ONLY on the public API
 * of ketch.h (lease, txn, range, delete, watch, ketch_process). No internals.
 *
 * Owns: nothing across calls except the state of an election observer (heap,
 * freed by the watch's final canceled delivery) and the state of a pending
 * predecessor watch (heap, freed by whichever of the waiter and the watch's
 * canceled delivery comes last).
 *
 * Data flow
 *   session: lease grant(ttl) + ketch_lease_keepalive_start; close revokes.
 *   acquire (mutex and campaign): one txn
 *       if create_revision(name/<lease hex>) == 0
 *       then put(mykey, value, lease), range(name/ first by create)
 *       else range(mykey),             range(name/ first by create)
 *     my revision = the key's create revision; I hold it when the oldest key
 *     under name/ has my revision.
 *   wait: range(name/, max_create_revision = mine - 1, last by create,
 *     limit 1) gives the predecessor; watch only that key, from the range's
 *     header revision + 1, until its DELETE; range again; repeat until no
 *     older key is left (no thundering herd: one deletion wakes one waiter).
 *     The waits run poll + ketch_process so keep-alives, other watches and
 *     asynchronous requests of the handle keep running, and they end at the
 *     caller's deadline. Then the key itself is read back: if the session's
 *     lease expired meanwhile the key is gone (KETCH_ELEASENOTFOUND).
 *   observe: range(name/) once, then one prefix watch from the next revision;
 *     the observer keeps the candidates' keys in memory and reports the
 *     oldest one whenever it changes or is put again (proclaim).
 *
 * Invariants
 *   - A caller-visible failure of lock/campaign leaves no key of ours behind
 *     (best-effort delete; if even that fails, the lease's TTL removes it).
 *   - No callback of ours runs after the canceled delivery of its watch.
 */
#include "ketch.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SESSION_DEFAULT_TTL_S 60
#define PUMP_MAX_WAIT_MS 1000

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One turn of the handle's loop: poll its socket at most until the next
 * library deadline, `deadline_ms` (-1 = none) or 1 s, then ketch_process. */
static void pump(ketch_client *c, int64_t deadline_ms) {
  int t = ketch_timeout_ms(c);
  if (deadline_ms >= 0) {
    int64_t left = deadline_ms - now_ms();
    if (left < 0)
      left = 0;
    if (t < 0 || t > left)
      t = (int)left;
  }
  if (t < 0 || t > PUMP_MAX_WAIT_MS)
    t = PUMP_MAX_WAIT_MS;
  struct pollfd p = {.fd = ketch_fd(c), .events = ketch_events(c), .revents = 0};
  poll(&p, p.fd >= 0 ? 1 : 0, t);
  ketch_process(c);
}

static bool expired(int64_t deadline_ms) { return deadline_ms >= 0 && now_ms() >= deadline_ms; }

/* ---- session ---- */

int ketch_session_open(ketch_client *c, int64_t ttl_s, int64_t *lease_out) {
  if (!c || !lease_out)
    return KETCH_EINVAL;
  *lease_out = 0;
  if (ttl_s <= 0)
    ttl_s = SESSION_DEFAULT_TTL_S;
  ketch_result *r = NULL;
  int err = ketch_lease_grant(c, ttl_s, 0, &r);
  if (err)
    return err;
  int64_t id = r->lease.id;
  ketch_result_free(r);
  err = ketch_lease_keepalive_start(c, id, NULL, NULL);
  if (err) {
    ketch_lease_revoke(c, id, NULL);
    return err;
  }
  *lease_out = id;
  return 0;
}

int ketch_session_close(ketch_client *c, int64_t lease) {
  if (!c || lease <= 0)
    return KETCH_EINVAL;
  ketch_lease_keepalive_stop(c, lease); /* KETCH_ENOTFOUND: already stopped */
  return ketch_lease_revoke(c, lease, NULL);
}

/* ---- keys ---- */

/* "name/" into a malloc'ed NUL-terminated string; NULL if out of memory. */
static char *prefix_of(const char *name) {
  size_t n = strlen(name);
  char *p = malloc(n + 2);
  if (p) {
    memcpy(p, name, n);
    p[n] = '/';
    p[n + 1] = 0;
  }
  return p;
}

/* etcd's fmt.Sprintf("%s%x", pfx, leaseID). */
static char *key_of(const char *name, int64_t lease) {
  size_t n = strlen(name) + 1 + 16 + 1;
  char *k = malloc(n);
  if (k)
    snprintf(k, n, "%s/%" PRIx64, name, (uint64_t)lease);
  return k;
}

static ketch_range_req first_created(const char *prefix, bool last) {
  ketch_range_req r;
  memset(&r, 0, sizeof r);
  r.key = prefix;
  r.key_len = strlen(prefix);
  r.prefix = true;
  r.sort_target = KETCH_SORT_CREATE;
  r.sort_order = last ? KETCH_SORT_DESCEND : KETCH_SORT_ASCEND;
  r.limit = 1;
  return r;
}

static int delete_key(ketch_client *c, const char *key) {
  ketch_delete_req d;
  memset(&d, 0, sizeof d);
  d.key = key;
  d.key_len = strlen(key);
  return ketch_delete(c, &d, NULL);
}

/* ---- waiting for a predecessor's deletion ---- */

/* Shared by the waiter and the watch callback. `orphan`: the waiter left;
 * the callback frees the state at the canceled delivery. */
struct del_wait {
  bool deleted, canceled, orphan;
  int err;
};

static void del_wait_cb(void *arg, int err, const ketch_result *res) {
  struct del_wait *w = arg;
  for (size_t i = 0; i < res->watch.n_events; i++)
    if (res->watch.events[i].type == KETCH_EVENT_DELETE)
      w->deleted = true;
  if (res->watch.canceled) {
    if (w->orphan) {
      free(w);
      return;
    }
    w->canceled = true;
    w->err = err;
  }
}

/* Waits until `key` is deleted at a revision >= start_rev, or the deadline.
 * Returns 0 (deleted, or the watch ended for a reason worth a re-check such
 * as a compacted start revision), KETCH_ETIMEOUT, or a watch error. */
static int wait_delete(ketch_client *c, const char *key, int64_t start_rev, int64_t deadline_ms) {
  struct del_wait *w = calloc(1, sizeof *w);
  if (!w)
    return KETCH_ENOMEM;
  ketch_watch_req req;
  memset(&req, 0, sizeof req);
  req.key = key;
  req.key_len = strlen(key);
  req.start_revision = start_rev;
  req.no_put = true;
  uint64_t id = 0;
  int err = ketch_watch(c, &req, del_wait_cb, w, &id);
  if (err) {
    free(w);
    return err;
  }
  while (!w->deleted && !w->canceled && !expired(deadline_ms))
    pump(c, deadline_ms);
  int rc = w->deleted ? 0 : w->canceled ? w->err : KETCH_ETIMEOUT;
  if (w->canceled) {
    free(w); /* nothing runs after the canceled delivery */
    if (rc == KETCH_ECOMPACTED)
      rc = 0; /* range again: the key may be gone */
  } else {
    w->orphan = true;
    if (ketch_watch_cancel(c, id)) /* unknown watch: no delivery will come */
      free(w);
  }
  return rc;
}

/* etcd's waitDeletes: until no key under prefix has create_revision <=
 * max_rev. 0, KETCH_ETIMEOUT or the error of a range or watch. */
static int wait_deletes(ketch_client *c, const char *prefix, int64_t max_rev, int64_t deadline_ms) {
  for (;;) {
    if (expired(deadline_ms))
      return KETCH_ETIMEOUT;
    ketch_range_req r = first_created(prefix, true);
    r.max_create_revision = max_rev;
    ketch_result *res = NULL;
    int err = ketch_range(c, &r, &res);
    if (err)
      return err;
    if (res->range.n_kvs == 0) {
      ketch_result_free(res);
      return 0;
    }
    const ketch_kv *kv = &res->range.kvs[0];
    char *key = malloc(kv->key_len + 1);
    if (!key) {
      ketch_result_free(res);
      return KETCH_ENOMEM;
    }
    memcpy(key, kv->key, kv->key_len);
    key[kv->key_len] = 0;
    int64_t rev = res->header.revision;
    ketch_result_free(res);
    err = wait_delete(c, key, rev + 1, deadline_ms);
    free(key);
    if (err)
      return err;
  }
}

/* ---- acquiring: the txn shared by mutex and campaign ---- */

struct acquired {
  char *key;
  int64_t rev;
  bool held;          /* the oldest key under the prefix is ours */
  bool value_differs; /* the key existed with another value (campaign) */
};

static int acquire(ketch_client *c, const char *name, const char *prefix, int64_t lease,
                   const void *value, size_t value_len, struct acquired *a) {
  memset(a, 0, sizeof *a);
  a->key = key_of(name, lease);
  if (!a->key)
    return KETCH_ENOMEM;
  size_t klen = strlen(a->key);
  ketch_compare cmp;
  memset(&cmp, 0, sizeof cmp);
  cmp.result = KETCH_CMP_EQUAL;
  cmp.target = KETCH_CMP_CREATE;
  cmp.key = a->key;
  cmp.key_len = klen;
  cmp.int_value = 0;
  ketch_put_req put;
  memset(&put, 0, sizeof put);
  put.key = a->key;
  put.key_len = klen;
  put.value = value_len ? value : "";
  put.value_len = value_len;
  put.lease = lease;
  ketch_range_req get;
  memset(&get, 0, sizeof get);
  get.key = a->key;
  get.key_len = klen;
  ketch_op success[2] = {ketch_op_put(put), ketch_op_range(first_created(prefix, false))};
  ketch_op failure[2] = {ketch_op_range(get), ketch_op_range(first_created(prefix, false))};
  ketch_txn_req txn = {&cmp, 1, success, 2, failure, 2};
  ketch_result *res = NULL;
  int err = ketch_txn(c, &txn, &res);
  if (err)
    goto fail;
  err = KETCH_EPROTO;
  if (res->txn.n_responses != 2 || res->txn.responses[1].type != KETCH_OP_RANGE)
    goto fail;
  if (res->txn.succeeded) {
    a->rev = res->header.revision;
  } else {
    const ketch_op_result *g = &res->txn.responses[0];
    if (g->type != KETCH_OP_RANGE || g->range.n_kvs != 1)
      goto fail;
    a->rev = g->range.kvs[0].create_revision;
    a->value_differs = g->range.kvs[0].value_len != value_len ||
                       (value_len && memcmp(g->range.kvs[0].value, value, value_len));
  }
  const ketch_range_result *owner = &res->txn.responses[1].range;
  a->held = owner->n_kvs == 0 || owner->kvs[0].create_revision == a->rev;
  ketch_result_free(res);
  return 0;
fail:
  ketch_result_free(res);
  free(a->key);
  a->key = NULL;
  return err;
}

/* After the wait: our key must still be there with our revision (else the
 * session's lease expired meanwhile: KETCH_ELEASENOTFOUND). */
static int check_still_ours(ketch_client *c, const char *key, int64_t rev) {
  ketch_result *res = NULL;
  int err = ketch_get(c, key, strlen(key), &res);
  if (err)
    return err;
  bool ours = res->range.n_kvs == 1 && res->range.kvs[0].create_revision == rev;
  ketch_result_free(res);
  return ours ? 0 : KETCH_ELEASENOTFOUND;
}

static int finish(struct acquired *a, char **out_key, int64_t *out_rev) {
  if (out_rev)
    *out_rev = a->rev;
  if (out_key)
    *out_key = a->key;
  else
    free(a->key);
  return 0;
}

/* lock and campaign: acquire, wait for every older key, check. */
static int lock_common(ketch_client *c, const char *name, int64_t lease, const void *value,
                       size_t value_len, bool election, int timeout_ms, char **out_key,
                       int64_t *out_rev) {
  if (out_key)
    *out_key = NULL;
  if (out_rev)
    *out_rev = 0;
  if (!c || !name || lease <= 0 || (value_len && !value))
    return KETCH_EINVAL;
  int64_t deadline_ms = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  char *prefix = prefix_of(name);
  if (!prefix)
    return KETCH_ENOMEM;
  struct acquired a;
  int err = acquire(c, name, prefix, lease, value, value_len, &a);
  if (err) {
    free(prefix);
    return err;
  }
  if (election && a.value_differs)
    err = ketch_election_proclaim(c, a.key, a.rev, value, value_len);
  if (!err && !a.held) {
    err = wait_deletes(c, prefix, a.rev - 1, deadline_ms);
    if (!err)
      err = check_still_ours(c, a.key, a.rev);
  }
  free(prefix);
  if (err) {
    delete_key(c, a.key); /* best effort; the lease's TTL is the backstop */
    free(a.key);
    return err;
  }
  return finish(&a, out_key, out_rev);
}

/* ---- mutex ---- */

int ketch_mutex_lock(ketch_client *c, const char *name, int64_t lease, int timeout_ms,
                     char **out_key, int64_t *out_rev) {
  return lock_common(c, name, lease, NULL, 0, false, timeout_ms, out_key, out_rev);
}

int ketch_mutex_try_lock(ketch_client *c, const char *name, int64_t lease, char **out_key,
                         int64_t *out_rev) {
  if (out_key)
    *out_key = NULL;
  if (out_rev)
    *out_rev = 0;
  if (!c || !name || lease <= 0)
    return KETCH_EINVAL;
  char *prefix = prefix_of(name);
  if (!prefix)
    return KETCH_ENOMEM;
  struct acquired a;
  int err = acquire(c, name, prefix, lease, NULL, 0, &a);
  free(prefix);
  if (err)
    return err;
  if (!a.held) {
    err = delete_key(c, a.key);
    free(a.key);
    return err ? err : KETCH_EBUSY;
  }
  return finish(&a, out_key, out_rev);
}

int ketch_mutex_unlock(ketch_client *c, const char *key) {
  if (!c || !key || !*key)
    return KETCH_EINVAL;
  return delete_key(c, key);
}

/* ---- election ---- */

int ketch_election_campaign(ketch_client *c, const char *name, int64_t lease, const void *value,
                            size_t value_len, int timeout_ms, char **out_key, int64_t *out_rev) {
  return lock_common(c, name, lease, value, value_len, true, timeout_ms, out_key, out_rev);
}

/* etcd's Proclaim: if create_revision(key) == rev then put(key, value) on
 * the key's own lease. KETCH_ENOTFOUND: not the leader any more. */
int ketch_election_proclaim(ketch_client *c, const char *key, int64_t rev, const void *value,
                            size_t value_len) {
  if (!c || !key || !*key || rev <= 0 || (value_len && !value))
    return KETCH_EINVAL;
  ketch_compare cmp;
  memset(&cmp, 0, sizeof cmp);
  cmp.result = KETCH_CMP_EQUAL;
  cmp.target = KETCH_CMP_CREATE;
  cmp.key = key;
  cmp.key_len = strlen(key);
  cmp.int_value = rev;
  ketch_put_req put;
  memset(&put, 0, sizeof put);
  put.key = key;
  put.key_len = cmp.key_len;
  put.value = value_len ? value : "";
  put.value_len = value_len;
  put.ignore_lease = true; /* the campaign's lease stays attached */
  ketch_op success = ketch_op_put(put);
  ketch_txn_req txn = {&cmp, 1, &success, 1, NULL, 0};
  ketch_result *res = NULL;
  int err = ketch_txn(c, &txn, &res);
  if (err)
    return err;
  bool ok = res->txn.succeeded;
  ketch_result_free(res);
  return ok ? 0 : KETCH_ENOTFOUND;
}

int ketch_election_resign(ketch_client *c, const char *key) {
  if (!c || !key || !*key)
    return KETCH_EINVAL;
  return delete_key(c, key);
}

int ketch_election_leader(ketch_client *c, const char *name, ketch_result **out) {
  if (out)
    *out = NULL;
  if (!c || !name)
    return KETCH_EINVAL;
  char *prefix = prefix_of(name);
  if (!prefix)
    return KETCH_ENOMEM;
  ketch_range_req r = first_created(prefix, false);
  ketch_result *res = NULL;
  int err = ketch_range(c, &r, &res);
  free(prefix);
  if (err)
    return err;
  if (res->range.n_kvs == 0) {
    ketch_result_free(res);
    return KETCH_ENOTFOUND;
  }
  if (out)
    *out = res;
  else
    ketch_result_free(res);
  return 0;
}

/* ---- observe ---- */

struct candidate {
  char *key, *value;
  size_t key_len, value_len;
  int64_t create_revision, mod_revision, version, lease;
};

struct observer {
  ketch_cb cb;
  void *arg;
  struct candidate *v;
  size_t n, cap;
  char *last_key; /* the leader reported last, and its mod revision */
  size_t last_key_len;
  int64_t last_mod;
  bool failed; /* out of memory: the view is incomplete (reported once) */
};

static void cand_free(struct candidate *k) {
  free(k->key);
  free(k->value);
}

static void observer_free(struct observer *o) {
  for (size_t i = 0; i < o->n; i++)
    cand_free(&o->v[i]);
  free(o->v);
  free(o->last_key);
  free(o);
}

static void *dup_bytes(const void *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n)
      memcpy(d, p, n);
    d[n] = 0;
  }
  return d;
}

/* Inserts or updates a candidate from a kv. false if out of memory. */
static bool observer_put(struct observer *o, const ketch_kv *kv) {
  struct candidate *k = NULL;
  for (size_t i = 0; i < o->n; i++)
    if (o->v[i].key_len == kv->key_len && !memcmp(o->v[i].key, kv->key, kv->key_len))
      k = &o->v[i];
  char *value = dup_bytes(kv->value, kv->value_len);
  if (!value)
    return false;
  if (!k) {
    if (o->n == o->cap) {
      size_t cap = o->cap ? o->cap * 2 : 8;
      struct candidate *nv = realloc(o->v, cap * sizeof *nv);
      if (!nv) {
        free(value);
        return false;
      }
      o->v = nv;
      o->cap = cap;
    }
    char *key = dup_bytes(kv->key, kv->key_len);
    if (!key) {
      free(value);
      return false;
    }
    k = &o->v[o->n++];
    k->key = key;
    k->key_len = kv->key_len;
    k->value = NULL;
  }
  free(k->value);
  k->value = value;
  k->value_len = kv->value_len;
  k->create_revision = kv->create_revision;
  k->mod_revision = kv->mod_revision;
  k->version = kv->version;
  k->lease = kv->lease;
  return true;
}

static void observer_delete(struct observer *o, const ketch_kv *kv) {
  for (size_t i = 0; i < o->n; i++) {
    if (o->v[i].key_len == kv->key_len && !memcmp(o->v[i].key, kv->key, kv->key_len)) {
      cand_free(&o->v[i]);
      o->v[i] = o->v[--o->n];
      return;
    }
  }
}

/* Runs the user's callback if the oldest candidate is not the one reported
 * last, or was put since. */
static void observer_report(struct observer *o, const ketch_result *from) {
  struct candidate *lead = NULL;
  for (size_t i = 0; i < o->n; i++)
    if (!lead || o->v[i].create_revision < lead->create_revision)
      lead = &o->v[i];
  if (!lead)
    return;
  if (o->last_key && o->last_key_len == lead->key_len &&
      !memcmp(o->last_key, lead->key, lead->key_len) && o->last_mod == lead->mod_revision)
    return;
  char *last = dup_bytes(lead->key, lead->key_len);
  if (!last)
    return; /* reported again next time */
  free(o->last_key);
  o->last_key = last;
  o->last_key_len = lead->key_len;
  o->last_mod = lead->mod_revision;
  ketch_event ev;
  memset(&ev, 0, sizeof ev);
  ev.type = KETCH_EVENT_PUT;
  ev.kv.key = lead->key;
  ev.kv.key_len = lead->key_len;
  ev.kv.value = lead->value;
  ev.kv.value_len = lead->value_len;
  ev.kv.create_revision = lead->create_revision;
  ev.kv.mod_revision = lead->mod_revision;
  ev.kv.version = lead->version;
  ev.kv.lease = lead->lease;
  ketch_result r;
  memset(&r, 0, sizeof r);
  r.type = KETCH_OP_WATCH;
  r.message = "";
  r.header = from->header;
  r.watch.watch_id = from->watch.watch_id;
  r.watch.events = &ev;
  r.watch.n_events = 1;
  o->cb(o->arg, 0, &r);
}

static void observe_cb(void *arg, int err, const ketch_result *res) {
  struct observer *o = arg;
  if (!err && !o->failed) {
    if (res->watch.created)
      observer_report(o, res);
    for (size_t i = 0; i < res->watch.n_events; i++) {
      const ketch_event *ev = &res->watch.events[i];
      if (ev->type == KETCH_EVENT_DELETE) {
        observer_delete(o, &ev->kv);
      } else if (!observer_put(o, &ev->kv)) {
        o->failed = true;
        break;
      }
      observer_report(o, res);
    }
  }
  if (res->watch.canceled || err) {
    o->cb(o->arg, err, res);
    if (res->watch.canceled) {
      observer_free(o);
      return;
    }
  }
}

int ketch_election_observe(ketch_client *c, const char *name, ketch_cb cb, void *arg,
                           uint64_t *out) {
  if (!c || !name || !cb || !out)
    return KETCH_EINVAL;
  *out = 0;
  char *prefix = prefix_of(name);
  struct observer *o = calloc(1, sizeof *o);
  if (!prefix || !o) {
    free(prefix);
    free(o);
    return KETCH_ENOMEM;
  }
  o->cb = cb;
  o->arg = arg;
  ketch_range_req r;
  memset(&r, 0, sizeof r);
  r.key = prefix;
  r.key_len = strlen(prefix);
  r.prefix = true;
  ketch_result *res = NULL;
  int err = ketch_range(c, &r, &res);
  if (!err) {
    for (size_t i = 0; i < res->range.n_kvs && !err; i++)
      if (!observer_put(o, &res->range.kvs[i]))
        err = KETCH_ENOMEM;
  }
  if (!err) {
    ketch_watch_req w;
    memset(&w, 0, sizeof w);
    w.key = prefix;
    w.key_len = strlen(prefix);
    w.prefix = true;
    w.start_revision = res->header.revision + 1;
    err = ketch_watch(c, &w, observe_cb, o, out);
  }
  ketch_result_free(res);
  free(prefix);
  if (err)
    observer_free(o);
  return err;
}
