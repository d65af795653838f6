/* core/node_member.c — the cluster's membership inside a member.
 *
 * Owns: the member table (n->members: id, learner flag, name, peer and client
 * URLs) and the ids removed from it (n->removed), the member file
 * (<data-dir>/member/meta: cluster id, member id, how the member was created),
 * the peer transport's peer list (kept equal to the table minus this member),
 * and the membership changes this member proposed and still has to answer.
 *
 * Data flow:
 *   new cluster      --initial-cluster gives every member's name and URL; ids
 *                    come from the token and the names (the cluster id from
 *                    the token and the sorted ids), the same on every member.
 *                    A new member's log starts with one MEMBER_ADD entry
 *                    (type CONF) per initial member at indexes 1..k of term 1,
 *                    committed, written before raft starts: raft hands them
 *                    back like any committed entry and applying them builds
 *                    the table and raft's configuration (kt_raft_apply_conf).
 *   join             --initial-cluster-state existing: the member asks the
 *                    peers of --initial-cluster (peer JOIN exchange) for the
 *                    cluster id, its own id (matched by its advertised peer
 *                    URLs, which `member add` recorded) and the current
 *                    members (dialled until the log or a snapshot brings the
 *                    table); its log starts empty.
 *   change           client request → any member; a follower forwards it to
 *                    the leader (node_lease.c's FWD link) → the leader checks
 *                    it against the table and raft's progress (health, learner
 *                    caught up) → kt_raft_propose_conf(body with the id) →
 *                    the entry applies on every member in log order:
 *                    apply_change checks it again against the table (the
 *                    deterministic check that counts), then
 *                    kt_raft_apply_conf, the table, the peer list → the
 *                    leader answers its client, or the follower it came from.
 *   publish          each member proposes MEMBER_PUBLISH (NORMAL entry) with
 *                    its name and client URLs when it starts serving.
 *   snapshots        the table and the removed ids ride in the snapshot's
 *                    meta blob; loading or installing one replaces them.
 *   removal          a member that applies its own removal answers, then
 *                    stops (EMEMBERREMOVED; exit status 0, as etcd); a
 *                    removed member that comes back is refused by its peers
 *                    (peer status REMOVED) and stops.
 *   force            --force-new-cluster (core/node_force.c) appends CONF
 *                    entries removing every other member through
 *                    kt_node_member_log_conf, the bootstrap's path; they
 *                    apply like any change.
 *   learners         one at a time (etcd 3.4's limit): ETOOMANYLEARNERS.
 *
 * Invariants: the table's voters and learners are raft's configuration at
 * the applied index; at most KT_NODE_MAX_MEMBERS members; ids never 0 and
 * never reused (removed ids are refused).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "node_int.h"

#define META_MAGIC_V2 "KTMEMBR2"
#define BLOB_MAGIC "KTMEMBS1"
#define META_JOINED 1u
#define CHANGES_MAX 8
#define JOIN_ROUNDS 20
/* A follower's MEMBER_PUBLISH is forwarded to the leader and dropped if that
 * peer connection is not up (a joining member re-dials its peers while it
 * applies the table): proposed again this often until it applies. */
#define PUBLISH_RETRY_S 1.0
#define JOIN_TIMEOUT_MS 1000

/* A membership change this member proposed, until its entry applies. */
struct change {
  bool used;
  uint8_t type;
  struct kt_conn *conn; /* the client, or NULL */
  uint64_t req_id;
  uint64_t fwd_from, fwd_seq; /* forwarded by a follower: answer it there */
  uint64_t id;                /* the member changed (ADD: the new id) */
};

struct node_member_state {
  struct change changes[CHANGES_MAX];
  /* Members learned from a JOIN answer (or the member file), dialled until
   * the table exists. */
  struct kt_node_member provisional[KT_NODE_MAX_MEMBERS];
  size_t n_provisional;
  bool joined;            /* created with --initial-cluster-state existing */
  uint64_t restore_index; /* a restored snapshot at this index: its table is the meta's */
  struct kt_node_member initial[KT_NODE_MAX_MEMBERS]; /* the member file's list */
  size_t n_initial;
  bool campaigned;      /* a lone voter campaigns at once, once per run */
  bool publish;         /* publish our attributes once we are in the table */
  bool published;       /* our MEMBER_PUBLISH applied since we started serving */
  ev_tstamp publish_at; /* when we last proposed it */
  bool stop_removed;    /* this member applied its own removal */
  bool created;         /* the member file was written by this run (a new data dir) */
  struct kt_arena arena;
  struct kt_buf buf;
};

/* ---- the table ---- */

static struct kt_node_member *find(struct kt_node *n, uint64_t id) {
  for (size_t i = 0; i < n->n_members; i++)
    if (n->members[i].id == id)
      return &n->members[i];
  return NULL;
}

const struct kt_node_member *kt_node_member_find(const struct kt_node *n, uint64_t id) {
  return find((struct kt_node *)n, id);
}

bool kt_node_member_removed(const struct kt_node *n, uint64_t id) {
  for (size_t i = 0; i < n->n_removed; i++)
    if (n->removed[i] == id)
      return true;
  return false;
}

size_t kt_node_member_voters(const struct kt_node *n) {
  size_t v = 0;
  for (size_t i = 0; i < n->n_members; i++)
    v += !n->members[i].learner;
  return v;
}

/* etcd 3.4's maxLearners: one learner at a time. Checked after the id and
 * the peer URLs, as etcd's ValidateConfigurationChange does. */
#define MAX_LEARNERS 1

static int learner_limit_check(const struct kt_node *n, const struct kt_member_change_req *mc,
                               struct kt_err *e) {
  if (mc->is_learner && n->n_members - kt_node_member_voters(n) >= MAX_LEARNERS)
    return kt_err_set(e, KT_ETOOMANYLEARNERS, "%s", kt_strerror(KT_ETOOMANYLEARNERS));
  return 0;
}

/* One URL of a comma list equal to one of another's. */
static bool urls_overlap(const char *a, const char *b) {
  for (const char *p = a; p && *p;) {
    const char *pe = strchr(p, ',');
    size_t pl = pe ? (size_t)(pe - p) : strlen(p);
    for (const char *q = b; q && *q;) {
      const char *qe = strchr(q, ',');
      size_t ql = qe ? (size_t)(qe - q) : strlen(q);
      if (pl && pl == ql && !memcmp(p, q, pl))
        return true;
      q = qe ? qe + 1 : NULL;
    }
    p = pe ? pe + 1 : NULL;
  }
  return false;
}

/* "a,b" from a URL list; false if it does not fit or a URL is not
 * http:// or https://host:port. */
static bool join_urls(char *out, size_t cap, const struct kt_bytes *v, uint32_t n) {
  size_t len = 0;
  out[0] = 0;
  if (!n)
    return false;
  for (uint32_t i = 0; i < n; i++) {
    char one[KT_PEER_URL_MAX], host[KT_PEER_URL_MAX];
    int port;
    struct kt_err e = {0};
    if (v[i].n == 0 || v[i].n >= sizeof one || memchr(v[i].p, ',', v[i].n))
      return false;
    memcpy(one, v[i].p, v[i].n);
    one[v[i].n] = 0;
    if ((strncmp(one, "http://", 7) != 0 && strncmp(one, "https://", 8) != 0) ||
        kt_peer_parse_url(one, host, sizeof host, &port, &e))
      return false;
    int w = snprintf(out + len, cap - len, "%s%s", i ? "," : "", one);
    if (w < 0 || (size_t)w >= cap - len)
      return false;
    len += (size_t)w;
  }
  return true;
}

/* The peer URLs of an ADD or UPDATE into out ("a,b"): EMEMBERBADURLS if a
 * URL is not http(s)://host:port, EPEERURLEXISTS if another member than
 * `except` (the member updated; 0 for an add) has one of them. */
static int peer_urls_check(struct kt_node *n, const struct kt_member_change_req *mc,
                           uint64_t except, char *out, size_t cap, struct kt_err *e) {
  if (!join_urls(out, cap, mc->peer_urls, mc->n_peer_urls))
    return kt_err_set(e, KT_EMEMBERBADURLS, "%s", kt_strerror(KT_EMEMBERBADURLS));
  for (size_t i = 0; i < n->n_members; i++)
    if (n->members[i].id != except && urls_overlap(out, n->members[i].peer_urls))
      return kt_err_set(e, KT_EPEERURLEXISTS, "%s", kt_strerror(KT_EPEERURLEXISTS));
  return 0;
}

static void first_url(const char *list, char *out, size_t cap) {
  const char *c = strchr(list, ',');
  size_t l = c ? (size_t)(c - list) : strlen(list);
  snprintf(out, cap, "%.*s", (int)KT_MIN(l, cap - 1), list);
}

/* ---- peers: the transport follows the table ---- */

static void on_peer_removed(void *arg, uint64_t peer) {
  struct kt_node *n = arg;
  (void)peer;
  kt_node_stop_removed(n);
}

static bool is_removed(void *arg, uint64_t id) { return kt_node_member_removed(arg, id); }

static int on_join(void *arg, const uint8_t *req, size_t len, uint64_t *member_id,
                   struct kt_buf *reply);

static int ensure_transport(struct kt_node *n, struct kt_err *e) {
  if (n->peers)
    return 0;
  if (!n->cfg.listen_peer_host)
    return kt_err_set(e, KT_EINVAL, "a cluster member needs --listen-peer-urls");
  struct kt_peer_config pc = {.cluster_id = n->cluster_id,
                              .member_id = n->member_id,
                              .on_message = kt_node_on_peer_message,
                              .on_snapshot = kt_node_on_peer_snapshot,
                              .on_snapshot_room = kt_node_on_snapshot_room,
                              .on_join = on_join,
                              .is_removed = is_removed,
                              .on_removed = on_peer_removed,
                              .arg = n,
                              .tls_server = n->cfg.peer_tls_server,
                              .tls_client = n->cfg.peer_tls_client};
  n->peers = kt_peer_link_new(n->loop, &pc, n->cfg.io_threads > 0);
  char url[300];
  snprintf(url, sizeof url, strchr(n->cfg.listen_peer_host, ':') ? "[%s]:%d" : "%s:%d",
           n->cfg.listen_peer_host, n->cfg.listen_peer_port);
  int rc = kt_peer_link_listen(n->peers, url, e);
  if (!rc)
    rc = kt_peer_link_start(n->peers, e);
  if (rc) {
    kt_peer_link_free(n->peers);
    n->peers = NULL;
    return rc;
  }
  kt_log(KT_LOG_INFO, "peer", "listening for peers url=%s", url);
  return 0;
}

/* Make the transport's peers the table (or, before the table exists, the
 * provisional members of a join). */
int kt_node_member_sync_peers(struct kt_node *n, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  const struct kt_node_member *want = n->members;
  size_t nw = n->n_members;
  if (!nw) {
    want = ms->provisional;
    nw = ms->n_provisional;
  }
  bool others = false;
  for (size_t i = 0; i < nw; i++)
    others |= want[i].id != n->member_id;
  if (!others && !n->peers)
    return 0;
  int rc = ensure_transport(n, e);
  if (rc)
    return rc;
  kt_peer_link_set_removed(n->peers, n->removed, n->n_removed);
  uint64_t ids[KT_NODE_MAX_MEMBERS * 2];
  size_t have = kt_peer_link_ids(n->peers, ids, KT_ARRAY_LEN(ids));
  for (size_t i = 0; i < have && i < KT_ARRAY_LEN(ids); i++) {
    bool keep = false;
    for (size_t k = 0; k < nw; k++)
      keep |= want[k].id == ids[i];
    if (!keep)
      kt_peer_link_remove(n->peers, ids[i]);
  }
  for (size_t k = 0; k < nw; k++) {
    if (want[k].id == n->member_id)
      continue;
    char url[KT_PEER_URL_MAX];
    first_url(want[k].peer_urls, url, sizeof url);
    struct kt_peer_status st;
    struct kt_err pe = {0};
    if (kt_peer_link_status(n->peers, want[k].id, &st) == 0) {
      if (strcmp(st.url, url) != 0 && kt_peer_link_update(n->peers, want[k].id, url, &pe))
        kt_log(KT_LOG_WARN, "peer", "peer %016llx: %s", (unsigned long long)want[k].id, pe.msg);
    } else if (kt_peer_link_add(n->peers, want[k].id, url, &pe)) {
      kt_log(KT_LOG_WARN, "peer", "peer %016llx: %s", (unsigned long long)want[k].id, pe.msg);
    }
  }
  return 0;
}

/* ---- the member list answer (MEMBER_LIST and the change responses) ---- */

static uint32_t split_urls(struct kt_arena *a, const char *list, struct kt_bytes **out) {
  uint32_t n = 0;
  *out = NULL;
  if (!list || !*list)
    return 0;
  for (const char *p = list; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
    n++;
  struct kt_bytes *v = kt_arena_alloc(a, n * sizeof *v);
  uint32_t k = 0;
  for (const char *p = list; p && k < n;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len)
      v[k++] = (struct kt_bytes){(const uint8_t *)p, (uint32_t)len};
    p = c ? c + 1 : NULL;
  }
  *out = v;
  return k;
}

static void member_info(struct kt_node *n, struct kt_arena *a, const struct kt_node_member *src,
                        struct kt_member_info *m) {
  memset(m, 0, sizeof *m);
  m->id = src->id;
  bool self = src->id == n->member_id;
  /* our own attributes are known before our publish entry applies */
  const char *name = self && !src->name[0] ? n->cfg.name : src->name;
  const char *curls = self && !src->client_urls[0] ? n->cfg.client_urls : src->client_urls;
  m->name = (struct kt_bytes){(const uint8_t *)name, (uint32_t)strlen(name)};
  m->n_peer_urls = split_urls(a, src->peer_urls, &m->peer_urls);
  m->n_client_urls = split_urls(a, curls, &m->client_urls);
  m->is_learner = src->learner;
}

/* Every member, sorted by id, as etcd lists them. */
static uint32_t member_infos(struct kt_node *n, struct kt_arena *a, struct kt_member_info **out) {
  size_t nm = n->n_members;
  struct kt_member_info *ms = kt_arena_alloc(a, (nm ? nm : 1) * sizeof *ms);
  for (size_t i = 0; i < nm; i++)
    member_info(n, a, &n->members[i], &ms[i]);
  for (size_t i = 1; i < nm; i++)
    for (size_t k = i; k > 0 && ms[k - 1].id > ms[k].id; k--) {
      struct kt_member_info t = ms[k];
      ms[k] = ms[k - 1];
      ms[k - 1] = t;
    }
  *out = ms;
  return (uint32_t)nm;
}

/* The header of cluster calls has no revision, as etcd's. */
void kt_node_member_list(struct kt_node *n, struct kt_conn *c, uint64_t id) {
  struct node_member_state *ms = n->mem;
  kt_arena_reset(&ms->arena);
  struct kt_resp r = {.type = KT_MSG_MEMBER_LIST, .id = id};
  kt_node_header(n, &r.header);
  r.header.revision = 0;
  r.u.member_list.n_members = member_infos(n, &ms->arena, &r.u.member_list.members);
  kt_conn_send_resp(c, &r);
}

/* ---- answering a change ---- */

static void change_answer(struct kt_node *n, struct change *ch, int rc, const struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  const char *msg = e && e->code && e->msg[0] ? e->msg : kt_strerror(rc);
  struct kt_resp r = {.type = ch->type, .id = ch->fwd_from ? ch->fwd_seq : ch->req_id};
  if (!rc) {
    kt_arena_reset(&ms->arena);
    kt_node_header(n, &r.header);
    r.header.revision = 0;
    r.u.member.n_members = member_infos(n, &ms->arena, &r.u.member.members);
    const struct kt_node_member *m = find(n, ch->id);
    if (ch->type == KT_MSG_MEMBER_ADD && m)
      member_info(n, &ms->arena, m, &r.u.member.member);
  }
  if (ch->fwd_from) {
    kt_node_fwd_reply(n, ch->fwd_from, ch->fwd_seq, rc, msg, rc ? NULL : &r);
  } else if (ch->conn) {
    if (rc)
      kt_conn_send_error(ch->conn, ch->req_id, rc, msg);
    else
      kt_conn_send_resp(ch->conn, &r);
    kt_conn_unref(ch->conn);
  }
  *ch = (struct change){0};
}

static void change_done(struct kt_node *n, void *ctx, int rc, const struct kt_err *e,
                        const struct kt_response_op *res) {
  (void)res;
  change_answer(n, ctx, rc, e);
}

static void answer_now(struct kt_node *n, struct kt_conn *c, uint64_t req_id, uint64_t from,
                       uint64_t seq, uint8_t type, int rc, const char *msg) {
  struct change ch = {
      .used = true, .type = type, .req_id = req_id, .fwd_from = from, .fwd_seq = seq};
  if (c) {
    kt_conn_ref(c);
    ch.conn = c;
  }
  struct kt_err e = {0};
  kt_err_set(&e, rc, "%s", msg ? msg : kt_strerror(rc));
  change_answer(n, &ch, rc, &e);
}

/* ---- checks before proposing (on the leader: it knows who is connected) ---- */

static bool active(struct kt_node *n, const struct kt_raft_member_state *rs, size_t nrs,
                   uint64_t id) {
  if (id == n->member_id)
    return true;
  for (size_t i = 0; i < nrs; i++)
    if (rs[i].id == id)
      return rs[i].recent_active;
  return false;
}

static int check_change(struct kt_node *n, uint8_t type, const struct kt_member_change_req *mc,
                        struct kt_err *e) {
  struct kt_raft_member_state rs[KT_RAFT_MAX_MEMBERS];
  size_t nrs = kt_raft_members(n->raft, rs, KT_ARRAY_LEN(rs));
  if (kt_raft_conf_pending(n->raft))
    return kt_err_set(e, KT_EBUSY, "a membership change is already in progress");
  const struct kt_node_member *m = type == KT_MSG_MEMBER_ADD ? NULL : find(n, mc->id);
  if (type != KT_MSG_MEMBER_ADD && !m)
    return kt_err_set(e, KT_EMEMBERNOTFOUND, "%s", kt_strerror(KT_EMEMBERNOTFOUND));
  char urls[512];
  int rc;
  if ((type == KT_MSG_MEMBER_ADD || type == KT_MSG_MEMBER_UPDATE) &&
      (rc = peer_urls_check(n, mc, m ? m->id : 0, urls, sizeof urls, e)))
    return rc;
  size_t voters = kt_node_member_voters(n), started = 0;
  for (size_t i = 0; i < n->n_members; i++)
    if (!n->members[i].learner && (type != KT_MSG_MEMBER_REMOVE || n->members[i].id != mc->id))
      started += active(n, rs, nrs, n->members[i].id);
  switch (type) {
  case KT_MSG_MEMBER_ADD:
    if ((rc = learner_limit_check(n, mc, e)))
      return rc;
    if (n->n_members >= KT_NODE_MAX_MEMBERS)
      return kt_err_set(e, KT_EINVAL, "too many members (at most %d)", KT_NODE_MAX_MEMBERS);
    /* etcd's strict reconfiguration check: the new quorum is met by the
     * voters running now (a second member for a lone one is allowed) */
    if (!mc->is_learner && !(started == 1 && voters + 1 == 2) && started < (voters + 1) / 2 + 1)
      return kt_err_set(e, KT_ENOTENOUGHSTARTED, "%s", kt_strerror(KT_ENOTENOUGHSTARTED));
    return 0;
  case KT_MSG_MEMBER_REMOVE:
    if (!m->learner) {
      if (voters == 1)
        return kt_err_set(e, KT_EINVAL, "cannot remove the last voting member");
      if (started < (voters - 1) / 2 + 1)
        return kt_err_set(e, KT_EUNHEALTHY, "%s", kt_strerror(KT_EUNHEALTHY));
    }
    return 0;
  case KT_MSG_MEMBER_PROMOTE: {
    if (!m->learner)
      return kt_err_set(e, KT_EMEMBERNOTLEARNER, "%s", kt_strerror(KT_EMEMBERNOTLEARNER));
    /* etcd: the learner's match is at least 90% of the leader's */
    uint64_t lead = 0, learner = 0;
    for (size_t i = 0; i < nrs; i++) {
      if (rs[i].id == n->member_id)
        lead = rs[i].match;
      if (rs[i].id == mc->id)
        learner = rs[i].match;
    }
    if ((double)learner < 0.9 * (double)lead || !active(n, rs, nrs, mc->id))
      return kt_err_set(e, KT_ELEARNERNOTREADY, "%s", kt_strerror(KT_ELEARNERNOTREADY));
    return 0;
  }
  default:
    return 0;
  }
}

static uint64_t fresh_id(struct kt_node *n) {
  for (;;) {
    uint64_t id;
    randombytes_buf(&id, sizeof id);
    if (id && !find(n, id) && !kt_node_member_removed(n, id))
      return id;
  }
}

void kt_node_member_request(struct kt_node *n, struct kt_conn *c, uint64_t from, uint64_t seq,
                            const struct kt_req *req) {
  struct node_member_state *ms = n->mem;
  if (kt_raft_role(n->raft) != KT_RAFT_LEADER) {
    answer_now(n, c, req->id, from, seq, req->type, KT_ENOLEADER, "no leader");
    return;
  }
  struct change *ch = NULL;
  for (size_t i = 0; i < CHANGES_MAX && !ch; i++)
    if (!ms->changes[i].used)
      ch = &ms->changes[i];
  struct kt_err e = {0};
  struct kt_member_change_req mc = req->u.member;
  int rc = ch ? check_change(n, req->type, &mc, &e)
              : kt_err_set(&e, KT_EBUSY, "a membership change is already in progress");
  if (rc) {
    answer_now(n, c, req->id, from, seq, req->type, rc, e.msg);
    return;
  }
  if (req->type == KT_MSG_MEMBER_ADD)
    mc.id = fresh_id(n);
  mc.name = (struct kt_bytes){0}; /* etcd: unknown until the member publishes it */
  *ch = (struct change){.used = true,
                        .type = req->type,
                        .req_id = req->id,
                        .fwd_from = from,
                        .fwd_seq = seq,
                        .id = mc.id};
  if (c) {
    kt_conn_ref(c);
    ch->conn = c;
  }
  struct kt_req body = {.type = req->type};
  body.u.member = mc;
  kt_buf_reset(&ms->buf);
  kt_proto_encode_req_body(&ms->buf, &body);
  kt_log(KT_LOG_INFO, "member", "proposing %s id=%016llx", kt_proto_type_name(req->type),
         (unsigned long long)mc.id);
  kt_node_propose_conf(n, ms->buf.p, ms->buf.len, change_done, ch);
}

/* A client's request on this member: the leader handles it, a follower
 * forwards it. */
void kt_node_member_client(struct kt_node *n, struct kt_conn *c, const struct kt_req *req,
                           const uint8_t *body, size_t body_len) {
  if (kt_raft_role(n->raft) == KT_RAFT_LEADER)
    kt_node_member_request(n, c, 0, 0, req);
  else
    kt_node_forward(n, c, req->id, body, body_len);
}

/* ---- apply (log order, every member) ---- */

/* The deterministic check and effect of a change entry. */
static int apply_change(struct kt_node *n, uint8_t type, const struct kt_member_change_req *mc,
                        struct kt_err *e) {
  char urls[512];
  int rc;
  struct kt_node_member *m = find(n, mc->id);
  if (!mc->id)
    return kt_err_set(e, KT_EINVAL, "member id 0");
  switch (type) {
  case KT_MSG_MEMBER_ADD: {
    if (m || kt_node_member_removed(n, mc->id))
      return kt_err_set(e, KT_EMEMBEREXISTS, "%s", kt_strerror(KT_EMEMBEREXISTS));
    if ((rc = peer_urls_check(n, mc, 0, urls, sizeof urls, e)) ||
        (rc = learner_limit_check(n, mc, e)))
      return rc;
    if (n->n_members >= KT_NODE_MAX_MEMBERS)
      return kt_err_set(e, KT_EINVAL, "too many members (at most %d)", KT_NODE_MAX_MEMBERS);
    if (kt_raft_apply_conf(
            n->raft, mc->is_learner ? KT_RAFT_CONF_ADD_LEARNER : KT_RAFT_CONF_ADD_VOTER, mc->id))
      return kt_err_set(e, KT_EMEMBEREXISTS, "%s", kt_strerror(KT_EMEMBEREXISTS));
    m = &n->members[n->n_members++];
    memset(m, 0, sizeof *m);
    m->id = mc->id;
    m->learner = mc->is_learner;
    snprintf(m->name, sizeof m->name, "%.*s", (int)KT_MIN(mc->name.n, sizeof m->name - 1),
             (const char *)mc->name.p);
    snprintf(m->peer_urls, sizeof m->peer_urls, "%s", urls);
    return 0;
  }
  case KT_MSG_MEMBER_REMOVE: {
    if (!m)
      return kt_err_set(e, KT_EMEMBERNOTFOUND, "%s", kt_strerror(KT_EMEMBERNOTFOUND));
    if (kt_raft_apply_conf(n->raft, KT_RAFT_CONF_REMOVE, mc->id))
      return kt_err_set(e, KT_EINVAL, "cannot remove the last voting member");
    *m = n->members[--n->n_members];
    if (n->n_removed == KT_ARRAY_LEN(n->removed)) { /* the oldest removed id is forgotten */
      memmove(n->removed, n->removed + 1, sizeof n->removed - sizeof n->removed[0]);
      n->n_removed--;
    }
    n->removed[n->n_removed++] = mc->id;
    if (mc->id == n->member_id)
      n->mem->stop_removed = true;
    return 0;
  }
  case KT_MSG_MEMBER_UPDATE:
    if (!m)
      return kt_err_set(e, KT_EMEMBERNOTFOUND, "%s", kt_strerror(KT_EMEMBERNOTFOUND));
    if ((rc = peer_urls_check(n, mc, m->id, urls, sizeof urls, e)))
      return rc;
    snprintf(m->peer_urls, sizeof m->peer_urls, "%s", urls);
    return 0;
  case KT_MSG_MEMBER_PROMOTE:
    if (!m)
      return kt_err_set(e, KT_EMEMBERNOTFOUND, "%s", kt_strerror(KT_EMEMBERNOTFOUND));
    if (!m->learner || kt_raft_apply_conf(n->raft, KT_RAFT_CONF_PROMOTE, mc->id))
      return kt_err_set(e, KT_EMEMBERNOTLEARNER, "%s", kt_strerror(KT_EMEMBERNOTLEARNER));
    m->learner = false;
    return 0;
  default:
    return kt_err_set(e, KT_EINVAL, "not a membership change");
  }
}

void kt_node_member_apply(struct kt_node *n, uint8_t entry_type, const struct kt_req *req,
                          const struct pending *own) {
  struct kt_err e = {0};
  int rc;
  if (req->type == KT_MSG_MEMBER_PUBLISH) {
    struct kt_node_member *m = find(n, req->u.publish.member_id);
    if (req->u.publish.member_id == n->member_id)
      n->mem->published = true;
    if (m) {
      const struct kt_member_publish_req *p = &req->u.publish;
      snprintf(m->name, sizeof m->name, "%.*s", (int)KT_MIN(p->name.n, sizeof m->name - 1),
               (const char *)p->name.p);
      size_t len = 0, cap = sizeof m->client_urls;
      m->client_urls[0] = 0;
      for (uint32_t k = 0; k < p->n_client_urls; k++) {
        int w = snprintf(m->client_urls + len, cap - len, "%s%.*s", k ? "," : "",
                         (int)p->client_urls[k].n, (const char *)p->client_urls[k].p);
        if (w < 0 || (size_t)w >= cap - len) {
          m->client_urls[len] = 0; /* the URLs that fit */
          break;
        }
        len += (size_t)w;
      }
    }
    rc = 0;
  } else if (entry_type != KT_RAFT_ENTRY_CONF) {
    /* raft appended it as NORMAL: another change was pending */
    rc = kt_err_set(&e, KT_EBUSY, "a membership change is already in progress");
  } else {
    rc = apply_change(n, req->type, &req->u.member, &e);
    kt_log(rc ? KT_LOG_WARN : KT_LOG_INFO, "member", "%s id=%016llx%s%s%s",
           kt_proto_type_name(req->type), (unsigned long long)req->u.member.id,
           rc ? " refused: " : "", rc ? e.msg : "",
           !rc && req->u.member.is_learner ? " learner" : "");
    if (!rc) {
      struct kt_err pe = {0};
      if (kt_node_member_sync_peers(n, &pe))
        kt_log(KT_LOG_ERROR, "peer", "peer transport: %s", pe.msg);
    }
  }
  if (own && own->done)
    own->done(n, own->ctx, rc, &e, NULL);
}

static void publish(struct kt_node *n);

/* After a ready batch: a lone voter campaigns at once; a removed member
 * stops; our attributes are published once we are in the table. */
void kt_node_member_after_ready(struct kt_node *n) {
  struct node_member_state *ms = n->mem;
  if (ms->stop_removed) {
    ms->stop_removed = false;
    kt_node_stop_removed(n);
    return;
  }
  if (!n->in_ready)
    publish(n);
  if (!ms->campaigned && kt_node_member_voters(n) == 1 && find(n, n->member_id) &&
      !find(n, n->member_id)->learner && kt_raft_role(n->raft) == KT_RAFT_FOLLOWER) {
    ms->campaigned = true;
    kt_node_campaign_now(n);
  }
}

/* ---- publish ---- */

void kt_node_member_serving(struct kt_node *n) {
  n->mem->publish = true;
  n->mem->published = false;
}

/* Our name and client URLs, through the log, each time we start serving
 * (start, leader change), once the table has us (a joining member learns it
 * from the log); proposed again every PUBLISH_RETRY_S until it applies. */
static void publish(struct kt_node *n) {
  struct node_member_state *ms = n->mem;
  if (!n->serving || !find(n, n->member_id) || n->wal_failed)
    return;
  if (!ms->publish && (ms->published || ev_now(n->loop) - ms->publish_at < PUBLISH_RETRY_S))
    return;
  ms->publish = false;
  ms->publish_at = ev_now(n->loop);
  kt_arena_reset(&ms->arena);
  struct kt_req req = {.type = KT_MSG_MEMBER_PUBLISH};
  req.u.publish.member_id = n->member_id;
  req.u.publish.name =
      (struct kt_bytes){(const uint8_t *)n->cfg.name, (uint32_t)strlen(n->cfg.name)};
  req.u.publish.n_client_urls =
      split_urls(&ms->arena, n->cfg.client_urls, &req.u.publish.client_urls);
  kt_buf_reset(&ms->buf);
  kt_proto_encode_req_body(&ms->buf, &req);
  kt_node_propose(n, NULL, 0, ms->buf.p, ms->buf.len);
}

/* ---- snapshots: the table in the meta blob ----
 *   "KTMEMBS1" | u32 n | n × (u64 id | u8 learner | u16 len name | u16 len
 *   peer_urls | u16 len client_urls) | u32 n_removed | n_removed × u64   (BE)
 * where "u16 len x" is a 16-bit length then the bytes. */

static void put_str(struct kt_buf *b, const char *s) {
  size_t l = strlen(s);
  uint8_t x[2] = {(uint8_t)(l >> 8), (uint8_t)l};
  kt_buf_append(b, x, 2);
  kt_buf_append(b, s, l);
}

void kt_node_member_save(const struct kt_node *n, struct kt_buf *out) {
  uint8_t x[8];
  kt_buf_append(out, BLOB_MAGIC, 8);
  kt_put_u32be(x, (uint32_t)n->n_members);
  kt_buf_append(out, x, 4);
  for (size_t i = 0; i < n->n_members; i++) {
    const struct kt_node_member *m = &n->members[i];
    kt_put_u64be(x, m->id);
    kt_buf_append(out, x, 8);
    x[0] = m->learner;
    kt_buf_append(out, x, 1);
    put_str(out, m->name);
    put_str(out, m->peer_urls);
    put_str(out, m->client_urls);
  }
  kt_put_u32be(x, (uint32_t)n->n_removed);
  kt_buf_append(out, x, 4);
  for (size_t i = 0; i < n->n_removed; i++) {
    kt_put_u64be(x, n->removed[i]);
    kt_buf_append(out, x, 8);
  }
}

static int get_str(const uint8_t *p, size_t len, size_t *off, char *out, size_t cap) {
  if (*off + 2 > len)
    return -1;
  size_t l = ((size_t)p[*off] << 8) | p[*off + 1];
  *off += 2;
  if (l >= cap || *off + l > len || memchr(p + *off, 0, l))
    return -1;
  memcpy(out, p + *off, l);
  out[l] = 0;
  *off += l;
  return 0;
}

int kt_node_member_decode(const uint8_t *p, size_t len, size_t *used, struct kt_node_members *t,
                          struct kt_err *e) {
  memset(t, 0, sizeof *t);
  if (len < 12 || memcmp(p, BLOB_MAGIC, 8) != 0)
    return kt_err_set(e, KT_ECORRUPT, "snapshot membership: bad magic");
  uint32_t cnt = kt_get_u32be(p + 8);
  size_t off = 12;
  if (cnt == 0 || cnt > KT_NODE_MAX_MEMBERS)
    return kt_err_set(e, KT_ECORRUPT, "snapshot membership: %u members", cnt);
  for (uint32_t i = 0; i < cnt; i++) {
    struct kt_node_member *m = &t->v[t->n++];
    if (off + 9 > len)
      return kt_err_set(e, KT_ECORRUPT, "snapshot membership: truncated at member %u", i);
    m->id = kt_get_u64be(p + off);
    m->learner = p[off + 8] != 0;
    off += 9;
    if (!m->id || get_str(p, len, &off, m->name, sizeof m->name) ||
        get_str(p, len, &off, m->peer_urls, sizeof m->peer_urls) ||
        get_str(p, len, &off, m->client_urls, sizeof m->client_urls))
      return kt_err_set(e, KT_ECORRUPT, "snapshot membership: bad member %u", i);
    for (uint32_t k = 0; k < i; k++)
      if (t->v[k].id == m->id)
        return kt_err_set(e, KT_ECORRUPT, "snapshot membership: member %016llx twice",
                          (unsigned long long)m->id);
  }
  if (off + 4 > len)
    return kt_err_set(e, KT_ECORRUPT, "snapshot membership: truncated removed list");
  uint32_t nr = kt_get_u32be(p + off);
  off += 4;
  if (nr > KT_ARRAY_LEN(t->removed) || off + 8 * (size_t)nr > len)
    return kt_err_set(e, KT_ECORRUPT, "snapshot membership: bad removed list");
  for (uint32_t i = 0; i < nr; i++)
    t->removed[t->n_removed++] = kt_get_u64be(p + off + 8 * i);
  *used = off + 8 * (size_t)nr;
  return 0;
}

void kt_node_member_adopt(struct kt_node *n, const struct kt_node_members *t,
                          uint64_t snapshot_index) {
  struct node_member_state *ms = n->mem;
  if (ms->restore_index && snapshot_index == ms->restore_index) {
    /* a restored snapshot (ketchutl snapshot restore): the new cluster's
     * members from the member file, not the old cluster's */
    memcpy(n->members, ms->initial, sizeof ms->initial);
    n->n_members = ms->n_initial;
    n->n_removed = 0;
    return;
  }
  memcpy(n->members, t->v, sizeof t->v);
  n->n_members = t->n;
  memcpy(n->removed, t->removed, sizeof t->removed);
  n->n_removed = t->n_removed;
}

void kt_node_member_conf(const struct kt_node *n, uint64_t *voters, size_t *nv, uint64_t *learners,
                         size_t *nl) {
  *nv = *nl = 0;
  for (size_t i = 0; i < n->n_members; i++) {
    if (n->members[i].learner)
      learners[(*nl)++] = n->members[i].id;
    else
      voters[(*nv)++] = n->members[i].id;
  }
}

/* ---- the member file ----
 * member/meta, written once (tmp + fsync + rename) when the member is
 * created; a restart reads it and ignores the --initial-* flags, as etcd:
 *   "KTMEMBR2" | cluster_id u64 | member_id u64 | flags u32 (1 = joined an
 *   existing cluster) | restore_index u64 | n u32 |
 *   n × (id u64 | url_len u16 | url | name_len u16 | name)   (big-endian)
 * The list is the initial cluster (a new cluster's first log entries are made
 * from it, and a restored snapshot's membership is replaced by it), or for a
 * joined member the members its JOIN answer listed (dialled until the log
 * brings the table). Files of the first format ("KTMEMBER", no flags and no
 * restore index) are read too. */

static uint64_t hash_id(const char *a, const char *b, const char *c) {
  crypto_generichash_state st;
  uint8_t out[16];
  crypto_generichash_init(&st, NULL, 0, sizeof out);
  crypto_generichash_update(&st, (const uint8_t *)a, strlen(a) + 1);
  crypto_generichash_update(&st, (const uint8_t *)b, strlen(b) + 1);
  crypto_generichash_update(&st, (const uint8_t *)c, strlen(c) + 1);
  crypto_generichash_final(&st, out, sizeof out);
  uint64_t v = kt_get_u64be(out);
  return v ? v : 1;
}

uint64_t kt_node_member_id_of(const char *cluster_token, const char *name) {
  return hash_id("member", cluster_token, name);
}

static int write_meta(struct kt_node *n, const char *path, const struct kt_node_member *list,
                      size_t cnt, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  char tmp[4300];
  struct kt_buf b = {0};
  uint8_t x[8];
  kt_buf_append(&b, META_MAGIC_V2, 8);
  kt_put_u64be(x, n->cluster_id);
  kt_buf_append(&b, x, 8);
  kt_put_u64be(x, n->member_id);
  kt_buf_append(&b, x, 8);
  kt_put_u32be(x, ms->joined ? META_JOINED : 0);
  kt_buf_append(&b, x, 4);
  kt_put_u64be(x, ms->restore_index);
  kt_buf_append(&b, x, 8);
  kt_put_u32be(x, (uint32_t)cnt);
  kt_buf_append(&b, x, 4);
  for (size_t i = 0; i < cnt; i++) {
    kt_put_u64be(x, list[i].id);
    kt_buf_append(&b, x, 8);
    put_str(&b, list[i].peer_urls);
    put_str(&b, list[i].name);
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int rc = 0;
  if (fd < 0 || write(fd, b.p, b.len) != (ssize_t)b.len || fsync(fd) < 0) {
    int er = errno;
    rc = kt_err_set(e, er == ENOSPC ? KT_ENOSPACE : KT_EIO, "%s: %s", tmp, strerror(er));
  }
  if (fd >= 0)
    close(fd);
  kt_buf_free(&b);
  if (rc)
    return rc;
  if (rename(tmp, path) < 0)
    return kt_err_set(e, KT_EIO, "rename %s: %s", tmp, strerror(errno));
  int dfd = open(n->member_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

static int read_meta(struct kt_node *n, const char *path, const uint8_t *p, size_t len,
                     struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  bool v2 = len >= 8 && memcmp(p, META_MAGIC_V2, 8) == 0;
  if (len < 28 || (!v2 && memcmp(p, META_MAGIC, 8) != 0))
    return kt_err_set(e, KT_ECORRUPT, "%s: not a ketch member file", path);
  n->cluster_id = kt_get_u64be(p + 8);
  n->member_id = kt_get_u64be(p + 16);
  size_t off = 24;
  if (v2) {
    if (len < 48)
      return kt_err_set(e, KT_ECORRUPT, "%s: truncated", path);
    ms->joined = kt_get_u32be(p + 24) & META_JOINED;
    ms->restore_index = kt_get_u64be(p + 28);
    off = 36;
  }
  uint32_t cnt = kt_get_u32be(p + off);
  off += 4;
  if (cnt > KT_NODE_MAX_MEMBERS || (!cnt && !ms->joined))
    return kt_err_set(e, KT_ECORRUPT, "%s: %u members", path, cnt);
  struct kt_node_member *list = ms->joined ? ms->provisional : ms->initial;
  for (uint32_t i = 0; i < cnt; i++) {
    struct kt_node_member *m = &list[i];
    memset(m, 0, sizeof *m);
    if (off + 8 > len)
      return kt_err_set(e, KT_ECORRUPT, "%s: truncated at member %u", path, i);
    m->id = kt_get_u64be(p + off);
    off += 8;
    if (get_str(p, len, &off, m->peer_urls, KT_PEER_URL_MAX) ||
        get_str(p, len, &off, m->name, sizeof m->name))
      return kt_err_set(e, KT_ECORRUPT, "%s: bad string at member %u", path, i);
  }
  if (ms->joined)
    ms->n_provisional = cnt;
  else
    ms->n_initial = cnt;
  return 0;
}

/* Member ids from the token and each member's name; the cluster id from the
 * token and the sorted member ids: every member of a new cluster computes the
 * same ones from the same --initial-cluster. The URLs of one name are one
 * member's peer URLs. */
static int bootstrap_members(struct kt_node *n, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  ms->n_initial = 0;
  for (size_t i = 0; i < n->cfg.n_initial; i++) {
    const struct kt_node_peer *pi = &n->cfg.initial[i];
    struct kt_node_member *m = NULL;
    for (size_t k = 0; k < ms->n_initial && !m; k++)
      if (!strcmp(ms->initial[k].name, pi->name))
        m = &ms->initial[k];
    if (m) {
      size_t l = strlen(m->peer_urls);
      snprintf(m->peer_urls + l, KT_PEER_URL_MAX - l, ",%s", pi->url);
      continue;
    }
    if (ms->n_initial == KT_NODE_MAX_MEMBERS)
      return kt_err_set(e, KT_EINVAL, "--initial-cluster: more than %d members",
                        KT_NODE_MAX_MEMBERS);
    m = &ms->initial[ms->n_initial++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", pi->name);
    snprintf(m->peer_urls, KT_PEER_URL_MAX, "%s", pi->url);
    m->id = hash_id("member", n->cfg.cluster_token, pi->name);
  }
  uint64_t sorted[KT_NODE_MAX_MEMBERS];
  for (size_t i = 0; i < ms->n_initial; i++)
    sorted[i] = ms->initial[i].id;
  for (size_t i = 1; i < ms->n_initial; i++)
    for (size_t k = i; k > 0 && sorted[k - 1] > sorted[k]; k--) {
      uint64_t t = sorted[k];
      sorted[k] = sorted[k - 1];
      sorted[k - 1] = t;
    }
  char ids[KT_NODE_MAX_MEMBERS * 17 + 1] = "";
  for (size_t i = 0; i < ms->n_initial; i++)
    snprintf(ids + 17 * i, sizeof ids - 17 * i, "%016llx,", (unsigned long long)sorted[i]);
  n->cluster_id = hash_id("cluster", n->cfg.cluster_token, ids);
  n->member_id = 0;
  for (size_t i = 0; i < ms->n_initial; i++)
    if (!strcmp(ms->initial[i].name, n->cfg.name))
      n->member_id = ms->initial[i].id;
  if (!n->member_id)
    return kt_err_set(e, KT_EINVAL, "--initial-cluster has no member named \"%s\"", n->cfg.name);
  return 0;
}

/* JOIN answer: u32 n | n × (u64 id | u8 learner | u16 len peer_urls). */
static int on_join(void *arg, const uint8_t *req, size_t len, uint64_t *member_id,
                   struct kt_buf *reply) {
  struct kt_node *n = arg;
  char urls[1024];
  snprintf(urls, sizeof urls, "%.*s", (int)KT_MIN(len, sizeof urls - 1), (const char *)req);
  const struct kt_node_member *me = NULL;
  for (size_t i = 0; i < n->n_members && !me; i++)
    if (urls_overlap(urls, n->members[i].peer_urls))
      me = &n->members[i];
  if (!me)
    return KT_PEER_NOT_ADDED;
  *member_id = me->id;
  uint8_t x[8];
  kt_put_u32be(x, (uint32_t)n->n_members);
  kt_buf_append(reply, x, 4);
  for (size_t i = 0; i < n->n_members; i++) {
    kt_put_u64be(x, n->members[i].id);
    kt_buf_append(reply, x, 8);
    x[0] = n->members[i].learner;
    kt_buf_append(reply, x, 1);
    put_str(reply, n->members[i].peer_urls);
  }
  return KT_PEER_OK;
}

int kt_node_member_join_decode(const uint8_t *p, size_t len, struct kt_node_member *out,
                               size_t *n_out, struct kt_err *e) {
  if (len < 4)
    return kt_err_set(e, KT_EPROTO, "join answer: truncated");
  uint32_t cnt = kt_get_u32be(p);
  size_t off = 4;
  if (cnt == 0 || cnt > KT_NODE_MAX_MEMBERS)
    return kt_err_set(e, KT_EPROTO, "join answer: %u members", cnt);
  for (uint32_t i = 0; i < cnt; i++) {
    struct kt_node_member *m = &out[i];
    memset(m, 0, sizeof *m);
    if (off + 9 > len)
      return kt_err_set(e, KT_EPROTO, "join answer: truncated at member %u", i);
    m->id = kt_get_u64be(p + off);
    m->learner = p[off + 8] != 0;
    off += 9;
    if (!m->id || get_str(p, len, &off, m->peer_urls, sizeof m->peer_urls))
      return kt_err_set(e, KT_EPROTO, "join answer: bad member %u", i);
  }
  if (off != len)
    return kt_err_set(e, KT_EPROTO, "join answer: %zu bytes after the list", len - off);
  *n_out = cnt;
  return 0;
}

/* --initial-cluster-state existing: ask the other members of
 * --initial-cluster, a round at a time (they may not have applied the
 * `member add` yet, or not be up). */
static int join_cluster(struct kt_node *n, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  struct kt_buf reply = {0};
  struct kt_err last = {0};
  for (int round = 0; round < JOIN_ROUNDS; round++) {
    for (size_t i = 0; i < n->cfg.n_initial; i++) {
      const struct kt_node_peer *pi = &n->cfg.initial[i];
      if (!strcmp(pi->name, n->cfg.name) || urls_overlap(pi->url, n->cfg.peer_urls))
        continue;
      uint64_t cid, mid, aid;
      struct kt_err je = {0};
      if (kt_peer_join(pi->url, n->cfg.peer_tls_client, n->cfg.peer_urls, JOIN_TIMEOUT_MS, &cid,
                       &mid, &aid, &reply, &je)) {
        kt_log(KT_LOG_INFO, "member", "join via %s: %s", pi->url, je.msg);
        last = je;
        continue;
      }
      int rc =
          kt_node_member_join_decode(reply.p, reply.len, ms->provisional, &ms->n_provisional, e);
      kt_buf_free(&reply);
      if (rc)
        return rc;
      n->cluster_id = cid;
      n->member_id = mid;
      kt_log(KT_LOG_INFO, "member", "joined cluster %016llx as member %016llx via %s (%zu members)",
             (unsigned long long)cid, (unsigned long long)mid, pi->url, ms->n_provisional);
      return 0;
    }
    usleep(500 * 1000);
  }
  kt_buf_free(&reply);
  return kt_err_set(e, KT_EUNAVAILABLE,
                    "--initial-cluster-state=existing: no member of --initial-cluster accepted "
                    "this member (add it first with `member add`; last answer: %s)",
                    last.msg[0] ? last.msg : "none");
}

int kt_node_member_write_initial(const struct kt_node_config *cfg, const char *member_dir,
                                 uint64_t restore_index, struct kt_err *e) {
  struct kt_node *n = calloc(1, sizeof *n);
  kt_assert(n);
  n->cfg = *cfg;
  snprintf(n->member_dir, sizeof n->member_dir, "%s", member_dir);
  kt_node_member_init(n);
  int rc = bootstrap_members(n, e);
  if (!rc) {
    char path[4200];
    snprintf(path, sizeof path, "%s/meta", n->member_dir);
    n->mem->restore_index = restore_index;
    rc = write_meta(n, path, n->mem->initial, n->mem->n_initial, e);
  }
  kt_node_member_free(n);
  free(n);
  return rc;
}

int kt_node_member_open(struct kt_node *n, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  char path[4200];
  snprintf(path, sizeof path, "%s/meta", n->member_dir);
  uint8_t buf[KT_NODE_MAX_MEMBERS * 700 + 64];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t r = read(fd, buf, sizeof buf);
    close(fd);
    if (r < 0)
      return kt_err_set(e, KT_EIO, "%s: %s", path, strerror(errno));
    return read_meta(n, path, buf, (size_t)r, e);
  }
  if (errno != ENOENT)
    return kt_err_set(e, KT_EIO, "%s: %s", path, strerror(errno));
  int rc;
  ms->created = true;
  if (n->cfg.join_existing) {
    ms->joined = true;
    if ((rc = join_cluster(n, e)))
      return rc;
    return write_meta(n, path, ms->provisional, ms->n_provisional, e);
  }
  if ((rc = bootstrap_members(n, e)))
    return rc;
  /* A snapshot already here was put by `ketchutl snapshot restore`: the new
   * cluster starts from its data with these members. */
  struct kt_snap_entry *list = NULL;
  size_t cnt = 0;
  struct kt_err le = {0};
  if (!kt_snap_list(n->snap_dir, &list, &cnt, &le) && cnt)
    ms->restore_index = list[0].index;
  free(list);
  return write_meta(n, path, ms->initial, ms->n_initial, e);
}

int kt_node_member_log_conf(struct kt_node *n, struct replay *r, uint64_t term,
                            const struct kt_req *req, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  uint64_t index = n->applied_index + r->n_ents + 1;
  kt_buf_reset(&ms->buf);
  uint8_t hdr[ENTRY_HDR + DATA_HDR] = {0}; /* origin 0, seq 0: nobody's proposal */
  kt_put_u64be(hdr, term);
  hdr[8] = KT_RAFT_ENTRY_CONF;
  kt_buf_append(&ms->buf, hdr, sizeof hdr);
  kt_proto_encode_req_body(&ms->buf, req);
  uint64_t seq;
  int rc = kt_wal_append(n->wal, REC_ENTRY, index, ms->buf.p, ms->buf.len, &seq);
  if (rc)
    return kt_err_set(e, rc, "%s: entry %llu: %s", n->wal_dir, (unsigned long long)index,
                      kt_strerror(rc));
  kt_node_replay_push(r, index, ms->buf.p, (uint32_t)ms->buf.len);
  return 0;
}

int kt_node_member_log_hs(struct kt_node *n, struct replay *r, struct kt_err *e) {
  uint64_t last = n->applied_index + r->n_ents;
  uint8_t b[24];
  kt_put_u64be(b, r->hs.term);
  kt_put_u64be(b + 8, r->hs.vote);
  kt_put_u64be(b + 16, r->hs.commit);
  uint64_t seq;
  int rc = kt_wal_append(n->wal, REC_HARDSTATE, last, b, sizeof b, &seq);
  if (!rc)
    rc = kt_wal_sync(n->wal, e);
  if (rc)
    return e->code ? rc : kt_err_set(e, rc, "%s: hard state: %s", n->wal_dir, kt_strerror(rc));
  n->wal_last_index = last;
  n->hs_synced = r->hs;
  return 0;
}

bool kt_node_member_new_dir(const struct kt_node *n) { return n->mem->created; }

/* The log of a brand-new member of a new cluster: one MEMBER_ADD per initial
 * member (term 1, committed). Written and synced here, before raft starts. */
int kt_node_member_bootstrap(struct kt_node *n, struct replay *r, struct kt_err *e) {
  struct node_member_state *ms = n->mem;
  if (ms->joined || n->applied_index || r->n_ents || r->hs.term || !ms->n_initial)
    return 0;
  if (ms->restore_index) { /* restored data: the table is the initial list already */
    return 0;
  }
  for (size_t i = 0; i < ms->n_initial; i++) {
    const struct kt_node_member *m = &ms->initial[i];
    kt_arena_reset(&ms->arena);
    struct kt_req req = {.type = KT_MSG_MEMBER_ADD};
    req.u.member.id = m->id;
    req.u.member.name = (struct kt_bytes){(const uint8_t *)m->name, (uint32_t)strlen(m->name)};
    req.u.member.n_peer_urls = split_urls(&ms->arena, m->peer_urls, &req.u.member.peer_urls);
    int rc = kt_node_member_log_conf(n, r, 1, &req, e);
    if (rc)
      return rc;
  }
  r->hs = (struct kt_raft_hard_state){.term = 1, .vote = 0, .commit = ms->n_initial};
  int rc = kt_node_member_log_hs(n, r, e);
  if (rc)
    return rc;
  kt_log(KT_LOG_INFO, "member", "new cluster %016llx: %zu members written to the log",
         (unsigned long long)n->cluster_id, ms->n_initial);
  return 0;
}

bool kt_node_member_is_learner(const struct kt_node *n) {
  const struct kt_node_member *m = kt_node_member_find(n, n->member_id);
  return m && m->learner;
}

void kt_node_member_init(struct kt_node *n) {
  n->mem = calloc(1, sizeof *n->mem);
  kt_assert(n->mem);
}

void kt_node_member_free(struct kt_node *n) {
  struct node_member_state *ms = n->mem;
  if (!ms)
    return;
  for (size_t i = 0; i < CHANGES_MAX; i++)
    if (ms->changes[i].used && ms->changes[i].conn)
      kt_conn_unref(ms->changes[i].conn);
  kt_arena_free(&ms->arena);
  kt_buf_free(&ms->buf);
  free(ms);
  n->mem = NULL;
}
