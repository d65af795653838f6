/* client/lease.c — libketch's leases: the Lease calls and the keep-alive
 * manager.
 *
 * Owns: the kept leases (struct keepalive, one heap entry each in c->kas)
 * and ka_next_ms, the earliest renewal due.
 *
 * Keep-alive: each kept lease is renewed at once (to learn its TTL), then
 * every ttl/3 after each successful renewal (clientv3's rhythm), by an
 * ordinary LEASE_KEEPALIVE request (safe to resend: it survives a reconnect)
 * that kt_cl_ka_tick submits from ketch_process. A failed renewal (timeout,
 * no endpoint, ...) is retried every KA_RETRY_MS; once a whole TTL has
 * passed since the last success the lease is presumed lost and the callback
 * gets the error as its last result.
 *
 * Invariant: an entry is freed only by kt_cl_ka_tick (or with the handle),
 * and only when it is dead and no renewal of it is in flight — the
 * renewal's callback argument is the entry.
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KA_RETRY_MS 500
#define MAX_KEEPALIVES 65536

/* One lease kept alive by the library (ketch_lease_keepalive_start). */
struct keepalive {
  ketch_client *c;
  int64_t id, ttl_s; /* ttl_s: learned from the last renewal, 0 = not yet */
  int64_t next_ms, last_ok_ms, started_ms;
  bool in_flight, dead; /* dead: stopped or gone; freed when not in flight */
  int last_err;
  ketch_cb cb;
  void *arg;
};

/* ---- the Lease calls ---- */

static int submit_lease(ketch_client *c, int type, int64_t id, int64_t ttl, bool keys, ketch_cb cb,
                        void *arg) {
  if (type == KT_MSG_LEASE_GRANT && ttl <= 0) {
    kt_cl_set_errmsg(c, "%s", "lease TTL must be > 0");
    return KETCH_EINVAL;
  }
  struct kt_req r = {.type = (uint8_t)type};
  r.u.lease.id = id;
  r.u.lease.ttl = ttl;
  r.u.lease.keys = keys;
  return kt_cl_submit(c, &r, cb, arg);
}

int ketch_lease_grant_async(ketch_client *c, int64_t ttl_s, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_GRANT, id, ttl_s, false, cb, arg);
}
int ketch_lease_revoke_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_REVOKE, id, 0, false, cb, arg);
}
int ketch_lease_keepalive_once_async(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_KEEPALIVE, id, 0, false, cb, arg);
}
int ketch_lease_timetolive_async(ketch_client *c, int64_t id, bool keys, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_TTL, id, 0, keys, cb, arg);
}
int ketch_lease_leases_async(ketch_client *c, ketch_cb cb, void *arg) {
  return submit_lease(c, KT_MSG_LEASE_LEASES, 0, 0, false, cb, arg);
}

int ketch_lease_grant(ketch_client *c, int64_t ttl_s, int64_t id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_lease_grant_async(c, ttl_s, id, kt_cl_sync_cb, &w));
}
int ketch_lease_revoke(ketch_client *c, int64_t id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_lease_revoke_async(c, id, kt_cl_sync_cb, &w));
}
int ketch_lease_keepalive_once(ketch_client *c, int64_t id, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_lease_keepalive_once_async(c, id, kt_cl_sync_cb, &w));
}
int ketch_lease_timetolive(ketch_client *c, int64_t id, bool keys, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_lease_timetolive_async(c, id, keys, kt_cl_sync_cb, &w));
}
int ketch_lease_leases(ketch_client *c, ketch_result **out) {
  KT_CL_SYNC(c, out, ketch_lease_leases_async(c, kt_cl_sync_cb, &w));
}

/* ---- keep-alive manager ---- */

/* The delay before the next renewal of a lease whose TTL is ttl_s seconds. */
static int64_t ka_interval_ms(int64_t ttl_s) {
  int64_t ms = ttl_s > 0 ? ttl_s * 1000 / 3 : KA_RETRY_MS;
  return ms < 1 ? 1 : ms;
}

/* The entry's last delivery: it is dead from now on, freed by the next tick. */
static void ka_last(ketch_client *c, struct keepalive *ka, int err, const ketch_result *res) {
  ka->dead = true;
  c->ka_next_ms = 0;
  if (ka->cb)
    kt_cl_callback(c, ka->cb, ka->arg, err, res);
}

static void ka_cb(void *arg, int err, const ketch_result *res) {
  struct keepalive *ka = arg;
  ketch_client *c = ka->c;
  ka->in_flight = false;
  int64_t now = kt_cl_now_ms();
  if (ka->dead || c->closing) {
    ka->dead = true;
    c->ka_next_ms = 0; /* free it in the next tick */
    return;
  }
  if (!err && res->lease.ttl > 0) {
    ka->ttl_s = res->lease.ttl;
    ka->last_ok_ms = now;
    ka->last_err = 0;
    ka->next_ms = now + ka_interval_ms(ka->ttl_s);
    c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
    if (ka->cb)
      kt_cl_callback(c, ka->cb, ka->arg, 0, res);
    return;
  }
  ketch_result last = {.type = KETCH_OP_LEASE_KEEPALIVE, .message = ""};
  if (!err || err == KETCH_ELEASENOTFOUND) { /* the lease is gone: last result, ttl 0 */
    if (!err)
      last.header = res->header;
    last.lease.id = ka->id;
    ka_last(c, ka, 0, &last);
    return;
  }
  ka->last_err = err;
  int64_t since = ka->last_ok_ms ? ka->last_ok_ms : ka->started_ms;
  if (ka->ttl_s > 0 && now - since >= ka->ttl_s * 1000) {
    char msg[400];
    snprintf(msg, sizeof msg,
             "lease keep-alive gave up: no renewal succeeded within the lease's TTL (%llds): %s",
             (long long)ka->ttl_s, res->message);
    last.err = err;
    last.message = msg;
    ka_last(c, ka, err, &last);
    return;
  }
  ka->next_ms = now + KT_MIN(KA_RETRY_MS, ka_interval_ms(ka->ttl_s));
  c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
}

/* Submits the renewals that are due, frees finished entries, and sets
 * ka_next_ms. Runs no callback. */
void kt_cl_ka_tick(ketch_client *c, int64_t now) {
  int64_t next = INT64_MAX;
  size_t j = 0;
  for (size_t i = 0; i < c->n_kas; i++) {
    struct keepalive *ka = c->kas[i];
    if (ka->dead && !ka->in_flight) {
      free(ka);
      continue;
    }
    c->kas[j++] = ka;
    if (ka->dead || ka->in_flight)
      continue;
    if (ka->next_ms <= now) {
      if (submit_lease(c, KT_MSG_LEASE_KEEPALIVE, ka->id, 0, false, ka_cb, ka) == 0) {
        ka->in_flight = true;
        continue;
      }
      ka->next_ms = now + 100; /* all slots taken: try again soon */
    }
    next = KT_MIN(next, ka->next_ms);
  }
  c->n_kas = j;
  c->ka_next_ms = next;
}

void kt_cl_ka_free_all(ketch_client *c) {
  for (size_t i = 0; i < c->n_kas; i++)
    free(c->kas[i]);
  free(c->kas);
  c->kas = NULL;
  c->n_kas = c->cap_kas = 0;
}

static struct keepalive *ka_find(ketch_client *c, int64_t id) {
  for (size_t i = 0; i < c->n_kas; i++)
    if (c->kas[i]->id == id && !c->kas[i]->dead)
      return c->kas[i];
  return NULL;
}

int ketch_lease_keepalive_start(ketch_client *c, int64_t id, ketch_cb cb, void *arg) {
  if (id <= 0)
    return KETCH_EINVAL;
  struct keepalive *ka = ka_find(c, id);
  if (ka) { /* already kept: the new callback replaces the old one */
    ka->cb = cb;
    ka->arg = arg;
    return 0;
  }
  if (c->n_kas >= MAX_KEEPALIVES)
    return KETCH_EBUSY;
  if (c->n_kas == c->cap_kas) {
    size_t cap = c->cap_kas ? c->cap_kas * 2 : 8;
    struct keepalive **k = realloc(c->kas, cap * sizeof *k);
    if (!k)
      return KETCH_ENOMEM;
    c->kas = k;
    c->cap_kas = cap;
  }
  ka = calloc(1, sizeof *ka);
  if (!ka)
    return KETCH_ENOMEM;
  ka->c = c;
  ka->id = id;
  ka->cb = cb;
  ka->arg = arg;
  ka->started_ms = ka->next_ms = kt_cl_now_ms();
  c->kas[c->n_kas++] = ka;
  c->ka_next_ms = KT_MIN(c->ka_next_ms, ka->next_ms);
  return 0;
}

int ketch_lease_keepalive_stop(ketch_client *c, int64_t id) {
  struct keepalive *ka = ka_find(c, id);
  if (!ka)
    return KETCH_ENOTFOUND;
  ka->dead = true;
  c->ka_next_ms = 0; /* freed by the next tick (or when its renewal returns) */
  return 0;
}
