/* tools/operator/observe.c — one observation of the cluster, read fresh
 * every round (nothing is carried over from the last one):
 *
 *   1. STATUS to every machine of the spec, in parallel (one cached handle
 *      per URL, asynchronous calls, one poll loop; at most OBS_TIMEOUT_MS);
 *   2. the member list from the leader (the reachable member that says it
 *      leads, highest term), else from any member that answered;
 *   3. STATUS to members that are not on a machine of the spec (their
 *      published client URL), the same way;
 *   4. the driver's view of each machine (process, binary).
 *
 * A handle whose request failed is closed, so the next round dials afresh
 * (a refused connection then fails at once instead of waiting out a
 * reconnect backoff).
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opx.h"

#define OBS_TIMEOUT_MS 1500

ketch_client *opx_handle(struct opx *x, const char *url) {
  for (size_t i = 0; i < x->nh; i++)
    if (!strcmp(x->h[i].url, url))
      return x->h[i].c;
  if (x->nh == OPX_MAX_HANDLES)
    return NULL;
  ketch_options o;
  ketch_options_init(&o);
  o.dial_timeout_ms = 500;
  o.request_timeout_ms = 1000;
  o.nonblocking_open = true;
  ketch_client *c = NULL;
  char err[200];
  if (ketch_open(&c, url, &o, err, sizeof err))
    return NULL;
  snprintf(x->h[x->nh].url, sizeof x->h[0].url, "%s", url);
  x->h[x->nh++].c = c;
  return c;
}

void opx_drop_handle(struct opx *x, const char *url) {
  for (size_t i = 0; i < x->nh; i++)
    if (!strcmp(x->h[i].url, url)) {
      ketch_close(x->h[i].c);
      x->h[i] = x->h[--x->nh];
      return;
    }
}

void opx_close_handles(struct opx *x) {
  for (size_t i = 0; i < x->nh; i++)
    ketch_close(x->h[i].c);
  x->nh = 0;
}

struct pend {
  const char *url;
  ketch_client *c;
  bool done;
  int err;
  uint64_t id, term, raft_index, applied, leader;
  bool alarm;
  char version[32];
};

static void on_status(void *arg, int err, const ketch_result *res) {
  struct pend *p = arg;
  p->done = true;
  p->err = err;
  if (err)
    return;
  p->id = res->header.member_id;
  p->term = res->status.raft_term;
  p->raft_index = res->status.raft_index;
  p->applied = res->status.raft_applied_index;
  p->leader = res->status.leader;
  p->alarm = res->status.n_errors > 0;
  snprintf(p->version, sizeof p->version, "%s", res->status.version ? res->status.version : "");
}

/* STATUS on every p[i].url at once. */
static void status_all(struct opx *x, struct pend *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i].c = opx_handle(x, p[i].url);
    p[i].done = true;
    p[i].err = KETCH_ENOMEM;
    if (p[i].c && ketch_status_async(p[i].c, on_status, &p[i]) == 0) {
      p[i].done = false;
      if (ketch_process(p[i].c) == KETCH_EUNAVAILABLE) {
        p[i].done = true;
        p[i].err = KETCH_EUNAVAILABLE;
      }
    }
  }
  int64_t deadline = opx_mono_ms() + OBS_TIMEOUT_MS;
  for (;;) {
    struct pollfd fds[OPX_MAX_HANDLES];
    size_t nf = 0, waiting = 0;
    int timeout = 50;
    for (size_t i = 0; i < n; i++) {
      if (p[i].done)
        continue;
      waiting++;
      int t = ketch_timeout_ms(p[i].c);
      if (t >= 0 && t < timeout)
        timeout = t;
      if (ketch_fd(p[i].c) >= 0 && nf < OPX_MAX_HANDLES)
        fds[nf++] = (struct pollfd){ketch_fd(p[i].c), ketch_events(p[i].c), 0};
    }
    if (!waiting || opx_mono_ms() >= deadline)
      break;
    poll(fds, nf, timeout);
    for (size_t i = 0; i < n; i++)
      if (!p[i].done && ketch_process(p[i].c) == KETCH_EUNAVAILABLE) {
        p[i].done = true; /* its one endpoint refused or failed: unreachable now */
        p[i].err = KETCH_EUNAVAILABLE;
      }
  }
  for (size_t i = 0; i < n; i++) {
    if (!p[i].done) {
      opx_drop_handle(x, p[i].url); /* completes it with ECANCELED */
      p[i].done = true;
      p[i].err = KETCH_ETIMEOUT;
    } else if (p[i].err && p[i].c) {
      opx_drop_handle(x, p[i].url);
    }
  }
}

static int machine_of_peer(const struct op_spec *s, const char *peer) {
  for (int i = 0; i < s->n_machines; i++)
    if (!strcmp(s->machines[i].peer_url, peer))
      return i;
  return -1;
}

static void fill(struct op_member *m, const struct pend *p) {
  m->reachable = true;
  m->term = p->term;
  m->raft_index = p->raft_index;
  m->applied = p->applied;
  m->leader = p->leader;
  m->alarm = p->alarm;
  snprintf(m->version, sizeof m->version, "%s", p->version);
}

void opx_observe(struct opx *x, struct op_obs *obs) {
  const struct op_spec *s = &x->spec;
  memset(obs, 0, sizeof *obs);
  static struct pend p[OPX_MAX_HANDLES];
  size_t n = (size_t)s->n_machines;
  memset(p, 0, sizeof p);
  for (size_t i = 0; i < n; i++)
    p[i].url = s->machines[i].client_url;
  status_all(x, p, n);
  /* the leader: a member that answered and says it leads (highest term) */
  int lead = -1;
  for (size_t i = 0; i < n; i++)
    if (!p[i].err && p[i].leader == p[i].id && (lead < 0 || p[i].term > p[lead].term))
      lead = (int)i;
  ketch_result *list = NULL;
  int from = -1;
  for (int pass = 0; pass < 2 && !list; pass++)
    for (size_t i = 0; i < n && !list; i++) {
      if (p[i].err || (pass == 0 && (int)i != lead) || (pass == 1 && (int)i == lead))
        continue;
      ketch_client *c = opx_handle(x, p[i].url);
      if (c && ketch_member_list(c, &list) == 0)
        from = (int)i;
      else
        list = NULL;
    }
  for (int i = 0; i < s->n_machines; i++)
    opx_drv_probe(x, i, &obs->machines[i]);
  if (!list)
    return;
  obs->have_list = true;
  obs->list_from = p[from].id;
  obs->list_applied = p[from].applied;
  static struct pend q[OP_MAX_MEMBERS];
  size_t nq = 0;
  int qof[OP_MAX_MEMBERS];
  for (size_t i = 0; i < list->member_list.n_members && obs->n_members < OP_MAX_MEMBERS; i++) {
    const ketch_member *km = &list->member_list.members[i];
    struct op_member *m = &obs->members[obs->n_members];
    memset(m, 0, sizeof *m);
    m->id = km->id;
    m->learner = km->is_learner;
    snprintf(m->name, sizeof m->name, "%s", km->name ? km->name : "");
    m->machine = -1;
    for (size_t j = 0; j < km->n_peer_urls && m->machine < 0; j++)
      m->machine = machine_of_peer(s, km->peer_urls[j]);
    if (km->n_peer_urls)
      snprintf(m->peer_url, sizeof m->peer_url, "%s", km->peer_urls[0]);
    if (m->machine >= 0) {
      const struct pend *mp = &p[m->machine];
      snprintf(m->client_url, sizeof m->client_url, "%s", s->machines[m->machine].client_url);
      if (!mp->err && mp->id == m->id)
        fill(m, mp);
    } else if (km->n_client_urls) {
      snprintf(m->client_url, sizeof m->client_url, "%s", km->client_urls[0]);
      memset(&q[nq], 0, sizeof q[nq]);
      q[nq].url = m->client_url;
      qof[nq++] = (int)obs->n_members;
    }
    obs->n_members++;
  }
  ketch_result_free(list);
  if (nq) {
    status_all(x, q, nq);
    for (size_t i = 0; i < nq; i++)
      if (!q[i].err && q[i].id == obs->members[qof[i]].id)
        fill(&obs->members[qof[i]], &q[i]);
  }
}

uint64_t opx_leader_index(struct opx *x, const struct op_obs *obs) {
  for (size_t i = 0; i < obs->n_members; i++) {
    const struct op_member *m = &obs->members[i];
    if (!m->reachable || m->leader != m->id || !m->client_url[0])
      continue;
    ketch_client *c = opx_handle(x, m->client_url);
    ketch_result *r = NULL;
    if (c && ketch_status(c, &r) == 0) {
      uint64_t idx = r->status.raft_index;
      ketch_result_free(r);
      return idx;
    }
  }
  return 0;
}
