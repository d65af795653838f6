/* core/node_force.c — --force-new-cluster: a member restarted from its data
 * dir becomes a one-member cluster that keeps all its data (recovering from
 * the loss of a majority, as etcd's flag).
 *
 * Owns nothing: it runs once in kt_node_open, after the snapshot was loaded
 * and the WAL replayed (struct replay: hard state + the log after the
 * snapshot), before raft starts.
 *
 * Data flow:
 *   the snapshot's member table ─┐
 *   CONF entries of the whole log ┴─► the configuration at the end of the
 *                                     log (ids and learner flags, as etcd's
 *                                     getIDs; committed or not)
 *   ─► CONF entries appended to the WAL after the last entry, at the log's
 *      term: PROMOTE self if it is a learner, then REMOVE every other member
 *   ─► hard state commit = the last index (every entry of the log is
 *      committed, the persisted-but-uncommitted tail included), one sync
 *   ─► raft starts from that log as any restart does: it hands back every
 *      entry as committed, and applying them (node_member.c apply_change →
 *      kt_raft_apply_conf) leaves this member the only voter in both the
 *      member table and raft's configuration; a lone voter elects itself at
 *      once (kt_node_member_after_ready).
 *
 * Because the change is ordinary CONF entries in the log, a later normal
 * restart replays them (or loads a snapshot that carries the table) and
 * keeps the one-member configuration; removed members' ids are refused if
 * they come back (they stop, as etcd's). Cluster id and member id are kept
 * (etcd keeps both too). New members are added with `member add` as usual.
 *
 * Choices (see README "recovering from the loss of a majority"):
 * - on a new data dir (no member file yet) the flag is ignored and the
 *   member bootstraps from --initial-cluster, as etcd 3.4 does;
 * - unlike etcd 3.4, which discards the WAL entries past its recorded
 *   commit index ("discarding N uncommitted WAL entries"), ketch commits
 *   them: a follower's recorded commit index may lag the leader's, so
 *   entries there may have been acknowledged to clients; keeping them never
 *   loses an acknowledged write (a write whose client saw a timeout or
 *   "outcome unknown" may appear, which that answer allows);
 * - a member that is not in the configuration of its own log (it joined and
 *   never received the log, or was removed) refuses to start: there is
 *   nothing of the cluster's to keep (etcd would start an empty member).
 */
#include "node_int.h"

/* Ids and learner flags only: what the forced change needs. */
struct conf_ids {
  uint64_t id[KT_NODE_MAX_MEMBERS];
  bool learner[KT_NODE_MAX_MEMBERS];
  size_t n;
};

static int conf_find(const struct conf_ids *c, uint64_t id) {
  for (size_t i = 0; i < c->n; i++)
    if (c->id[i] == id)
      return (int)i;
  return -1;
}

/* One CONF entry's change, as apply_change makes it (a change apply would
 * refuse changes nothing here either: an ADD of a present id, a REMOVE or
 * PROMOTE of an absent one). */
static void conf_step(struct conf_ids *c, const struct kt_req *req) {
  int i = conf_find(c, req->u.member.id);
  switch (req->type) {
  case KT_MSG_MEMBER_ADD:
    if (i < 0 && c->n < KT_NODE_MAX_MEMBERS && req->u.member.id) {
      c->id[c->n] = req->u.member.id;
      c->learner[c->n++] = req->u.member.is_learner;
    }
    return;
  case KT_MSG_MEMBER_REMOVE:
    if (i >= 0) {
      c->n--;
      c->id[i] = c->id[c->n];
      c->learner[i] = c->learner[c->n];
    }
    return;
  case KT_MSG_MEMBER_PROMOTE:
    if (i >= 0)
      c->learner[i] = false;
    return;
  default:
    return;
  }
}

/* The configuration at the end of the log: the table (the snapshot's, or
 * empty) with every CONF entry of the log applied. */
static int conf_at_end(struct kt_node *n, const struct replay *r, struct conf_ids *c,
                       struct kt_err *e) {
  c->n = 0;
  for (size_t i = 0; i < n->n_members; i++) {
    c->id[c->n] = n->members[i].id;
    c->learner[c->n++] = n->members[i].learner;
  }
  for (size_t i = 0; i < r->n_ents; i++) {
    const struct kt_raft_entry *ent = &r->ents[i];
    if (ent->type != KT_RAFT_ENTRY_CONF)
      continue; /* a change appended as NORMAL was refused */
    struct kt_req req;
    kt_arena_reset(&n->arena);
    if (ent->len < DATA_HDR ||
        kt_proto_decode_req(ent->data + DATA_HDR, ent->len - DATA_HDR, &n->arena, &req, e))
      return kt_err_set(e, KT_ECORRUPT, "%s: entry %llu: undecodable membership change", n->wal_dir,
                        (unsigned long long)ent->index);
    conf_step(c, &req);
  }
  return 0;
}

/* The highest term of the log, the snapshot and the hard state. */
static uint64_t log_term(const struct kt_node *n, const struct replay *r) {
  uint64_t t = KT_MAX(r->hs.term, n->applied_term);
  return r->n_ents ? KT_MAX(t, r->ents[r->n_ents - 1].term) : t;
}

static int append_change(struct kt_node *n, struct replay *r, uint64_t term, uint8_t type,
                         uint64_t id, struct kt_err *e) {
  struct kt_req req = {.type = type};
  req.u.member.id = id;
  kt_log(KT_LOG_INFO, "member", "--force-new-cluster: %s id=%016llx at index %llu",
         kt_proto_type_name(type), (unsigned long long)id,
         (unsigned long long)(n->applied_index + r->n_ents + 1));
  return kt_node_member_log_conf(n, r, term, &req, e);
}

/* PROMOTE self if a learner, REMOVE every other member. */
static int append_changes(struct kt_node *n, struct replay *r, const struct conf_ids *c,
                          uint64_t term, struct kt_err *e) {
  int self = conf_find(c, n->member_id);
  int rc = 0;
  if (c->learner[self])
    rc = append_change(n, r, term, KT_MSG_MEMBER_PROMOTE, n->member_id, e);
  for (size_t i = 0; i < c->n && !rc; i++)
    if (c->id[i] != n->member_id)
      rc = append_change(n, r, term, KT_MSG_MEMBER_REMOVE, c->id[i], e);
  return rc;
}

int kt_node_force_new_cluster(struct kt_node *n, struct replay *r, struct kt_err *e) {
  if (kt_node_member_new_dir(n)) {
    kt_log(KT_LOG_INFO, "member",
           "--force-new-cluster ignored: a new data dir (the flag acts on existing data)");
    return 0;
  }
  struct conf_ids c;
  int rc = conf_at_end(n, r, &c, e);
  if (rc)
    return rc;
  if (conf_find(&c, n->member_id) < 0 || kt_node_member_removed(n, n->member_id))
    return kt_err_set(e, KT_EINVAL,
                      "--force-new-cluster: member %016llx is not in the configuration of its "
                      "own log (it never received the cluster's log, or was removed): nothing "
                      "to recover",
                      (unsigned long long)n->member_id);
  uint64_t last = n->applied_index + r->n_ents;
  uint64_t old_commit = KT_MAX(r->hs.commit, n->applied_index);
  uint64_t term = log_term(n, r);
  if ((rc = append_changes(n, r, &c, term, e)))
    return rc;
  if (term != r->hs.term)
    r->hs.vote = 0; /* a vote belongs to its term */
  r->hs.term = term;
  r->hs.commit = n->applied_index + r->n_ents;
  if ((rc = kt_node_member_log_hs(n, r, e)))
    return rc;
  kt_log(KT_LOG_INFO, "member",
         "--force-new-cluster: forcing restart of member %016llx in cluster %016llx as a "
         "one-member cluster: commit index %llu -> %llu (%llu entries past the commit index "
         "kept and committed), %zu members removed",
         (unsigned long long)n->member_id, (unsigned long long)n->cluster_id,
         (unsigned long long)old_commit, (unsigned long long)r->hs.commit,
         (unsigned long long)(last > old_commit ? last - old_commit : 0), c.n - 1);
  return 0;
}
