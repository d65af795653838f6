/* core/apply.h — a member's state machine and its apply step, pure.
 *
 * Owns: nothing. struct kt_sm names the three parts of a member's applied
 * state — the MVCC store, the lease manager and (optionally) the watch hub —
 * whose memory belongs to the caller (the node, or a simulated member). It is
 * a bundle of pointers, cheap to build on the stack for each apply.
 *
 * Data flow, for every committed log entry in log order:
 *   entry bytes --kt_proto_decode_req--> struct kt_req --kt_sm_apply-->
 *     store:   kt_mvcc_apply / kt_mvcc_delete_keys / kt_mvcc_compact
 *     events:  the store's on_event hook, which the caller sets to
 *              kt_sm_on_event (event_arg = the struct kt_sm, or a function
 *              of the caller's that calls it): watch hub publish + lease
 *              attach (put with a lease) / detach (delete, put without one)
 *     leases:  kt_lease_grant / kt_lease_revoke
 *     watches: kt_watch_revision_done(rev) once per apply that moved the
 *              revision (closes the batch of events the hook published)
 *   --> struct kt_sm_result (the response) or an error (code + message).
 * The caller answers its client from the result, logs, and schedules the
 * physical compaction (kt_mvcc_compact_step) — none of which is here.
 *
 * Determinism: no clock, no I/O, no randomness beyond the lease manager's
 * seeded id generator. Two state machines built the same way (same lease
 * id_seed, empty stores at the same revision) and fed the same requests end
 * identical: same kt_mvcc_hash, same leases, same results and errors.
 * now_ms reaches kt_lease_grant only, which uses it for a leader's expiry
 * timer (not part of the replicated state).
 *
 * Rules (etcd's, as the node applied them before this file existed):
 * - PUT / DELETE / TXN: every put reachable in the request (both txn
 *   branches, nested txns included) that names a lease, without
 *   ignore_lease, must name an existing lease, else KT_ELEASENOTFOUND
 *   "requested lease not found" and nothing changes; then kt_mvcc_apply
 *   (its errors leave the store unchanged too).
 * - COMPACT: kt_mvcc_compact (ECOMPACTED / EFUTUREREV for a bad revision).
 * - LEASE_GRANT: kt_lease_grant with the requested id (0: the generator
 *   picks) and TTL; errors EINVAL, ELEASEEXISTS.
 * - LEASE_REVOKE: the lease's keys are deleted at ONE new revision (none if
 *   it has no keys), in key order (the same sub-revisions on every member,
 *   whatever order a snapshot load attached them in), then the lease is
 *   removed; ELEASENOTFOUND if unknown.
 * - Any other type: KT_EUNSUPPORTED (the node applies membership itself).
 * An error's message is the store's when it gave one, else kt_strerror.
 */
#ifndef KT_APPLY_H
#define KT_APPLY_H

#include "msg.h"
#include "lease.h"
#include "mvcc.h"
#include "watch.h"

struct kt_sm {
  struct kt_mvcc *store;        /* required */
  struct kt_lease_mgr *leases;  /* required */
  struct kt_watch_hub *watches; /* NULL: no watchers (events go nowhere) */
};

/* What an applied request answers. type is the request's type; the header's
 * revision is kt_mvcc_revision(store) after the apply (the caller fills the
 * rest of the header). op: PUT, DELETE, TXN (arrays and bytes point into the
 * arena and the store: valid until the next write or compaction of the store
 * or a reset of the arena). lease_id, lease_ttl: LEASE_GRANT (the granted
 * id and TTL in seconds). COMPACT and LEASE_REVOKE: nothing beyond revision. */
struct kt_sm_result {
  uint8_t type;
  int64_t revision;
  struct kt_response_op op;
  int64_t lease_id, lease_ttl;
};

/* Apply one committed request. a: scratch for the response and the revoked
 * keys (the caller resets it; the decoded request may live in it too).
 * Returns 0 with *out filled, or a KT_E* code with e filled (code and
 * message; *out then only has type and revision) — see "Rules" above. */
int kt_sm_apply(struct kt_sm *sm, const struct kt_req *req, int64_t now_ms, struct kt_arena *a,
                struct kt_sm_result *out, struct kt_err *e);

/* The store's on_event hook for a state machine (arg: struct kt_sm *):
 * publishes to the watch hub (if any) and attaches/detaches the key in the
 * lease manager. A caller with more listeners calls it from its own hook. */
void kt_sm_on_event(void *arg, const struct kt_event *ev);

/* The lease rule of a KV write (see "Rules"), without applying it: the node
 * also runs it before proposing. Returns 0 or KT_ELEASENOTFOUND with e set. */
int kt_sm_check_leases(const struct kt_lease_mgr *m, const struct kt_request_op *op,
                       struct kt_err *e);

#endif
