/* net/discovery.h — bootstrap through a discovery service: an existing ketch
 * cluster (--discovery-endpoints) where the members of a new cluster meet
 * under one token (--discovery-token), as etcd 3.6's v3 discovery.
 *
 * Keys (prefix P = "/_ketch/registry/<token>"):
 *   P/_config/size            decimal member count, set by the operator
 *                             (ketchctl discovery new --size N)
 *   P/members/<id as %016x>   "name=peerURL[,peerURL...]", one per member
 *
 * Data flow (kt_discovery_bootstrap, before the node starts; it blocks the
 * process on libketch's synchronous calls and its poll loop, never a running
 * state loop):
 *   connect (retry, capped exponential backoff while unreachable)
 *   -> read P/_config/size            missing: "discovery: size key not found"
 *   -> read P/members/ by create revision
 *        own key there with another value: "discovery: found duplicate id"
 *        size members there, not us:       "discovery: cluster is full"
 *   -> register: txn if create_revision(own key) == 0 then put  (create-if-absent;
 *        etcd's v3 discovery uses a plain put, which lets a second member with
 *        the same id overwrite the first)
 *   -> until size members are registered: watch P/members/ from the last
 *        read revision + 1, re-read on each event (no polling)
 *   -> the first `size` by create revision are the initial cluster; if we are
 *        not among them (we lost a race): "discovery: cluster is full".
 * A failed connection or request at any step (unavailable, timed out) starts
 * over after the backoff; the errors above end it.
 *
 * Member ids are hash(token, name) (core/node_member.c), so the discovery
 * token is the new cluster's token and names must be unique: two members
 * with one name have one id ("found duplicate id").
 */
#ifndef KT_DISCOVERY_H
#define KT_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "../core/base.h"

struct kt_config;

#define KT_DISCOVERY_MAX_URLS 8 /* peer URLs per member value */

/* One name=url of the initial cluster found (a member with several URLs
 * gives several entries). */
struct kt_discovery_peer {
  char name[128];
  char url[256];
};

/* Bootstraps as described above with cfg's discovery flags, the member's
 * name and advertised peer URLs. Fills out[0..*n_out) (at most max).
 * Errors: KT_ENOTFOUND / KT_EINVAL with etcd's messages above; KT_EINVAL
 * for a bad TLS file or a value in the registry that does not parse. */
int kt_discovery_bootstrap(const struct kt_config *cfg, struct kt_discovery_peer *out, size_t max,
                           size_t *n_out, struct kt_err *e);

/* Pure, on outside bytes: parses one member value "name=url[,url...]" into
 * name (NUL-terminated, < name_cap) and urls[i] (< url_cap each, at most
 * max_urls). Errors: KT_EINVAL (empty name or URL, a name with ',' '=' or a
 * control character, too long, too many URLs). */
int kt_discovery_parse_member(const char *v, size_t len, char *name, size_t name_cap,
                              char (*urls)[256], size_t max_urls, size_t *n_urls);

#endif
