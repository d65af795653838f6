/* net/srv.h — DNS SRV lookups on a libev loop with c-ares, and the
 * bootstrap that builds an initial cluster from them (--discovery-srv).
 *
 * Data flow:
 *   SRV names (_ketch-server[-ssl][-SUFFIX]._tcp.DOMAIN, or etcd's names)
 *     --c-ares query + ares_parse_srv_reply-->  targets (host, port, prio, weight)
 *     --ares_getaddrinfo per target-->          numeric addresses per target
 *   plus the member's own advertised peer hosts  --ares_getaddrinfo-->  addresses
 *   kt_srv_cluster (pure): match own addresses to a target ("cannot find local
 *     member in SRV records" if none), name every member, URL every member.
 * All DNS bytes are parsed by c-ares; this module only reads its structs.
 * The loop runs only c-ares' sockets and one deadline timer while a lookup is
 * in flight; nothing here blocks (no getaddrinfo).
 *
 * Naming: a member's id is a hash of its name (core/node_member.c), so every
 * member must name every other one alike from the same records. A member is
 * named by its SRV target without the trailing dot ("m1.example.com"), or
 * "target-port" when one target appears with several ports. The local member
 * takes its record's name too (logged when it differs from --name). Its peer
 * URL is scheme://ADDRESS:port, the target's first resolved address, so
 * dialing needs no further DNS; the local member keeps its advertised URL.
 */
#ifndef KT_SRV_H
#define KT_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/base.h"

struct ev_loop;

#define KT_SRV_MAX_RECORDS 64 /* targets kept over all names; more are ignored */
#define KT_SRV_MAX_ADDRS 4    /* addresses kept per target */
#define KT_SRV_MAX_HOSTS 16   /* plain host lookups per query */

/* One SRV target and what it resolved to. addr[] are numeric ("10.0.0.1",
 * "::1"); n_addr may be 0 when the target did not resolve. */
struct kt_srv_rec {
  char target[256]; /* without the trailing dot */
  uint16_t port, priority, weight;
  bool ssl;     /* came from a *-ssl name */
  uint32_t ttl; /* of the first address (SRV TTLs are not exposed by c-ares 1.18) */
  char addr[KT_SRV_MAX_ADDRS][64];
  size_t n_addr;
};

/* A plain host lookup (an advertised URL's host). */
struct kt_srv_host {
  char host[256];
  char addr[KT_SRV_MAX_ADDRS][64];
  size_t n_addr;
};

struct kt_srv_req {
  const char *dns_servers;  /* "host:port,..." (ares_set_servers_ports_csv); NULL: resolv.conf */
  const char *const *names; /* SRV names to query */
  const bool *ssl;          /* per name: records from it are https */
  size_t n_names;
  const char *const *hosts; /* plain names to resolve too (may be numeric) */
  size_t n_hosts;
  int timeout_ms; /* whole lookup; 0 = 5000 */
};

struct kt_srv_result {
  struct kt_srv_rec recs[KT_SRV_MAX_RECORDS];
  size_t n_recs;
  struct kt_srv_host hosts[KT_SRV_MAX_HOSTS];
  size_t n_hosts;
};

/* Runs the lookups of req on loop (ev_run until they finish or the deadline
 * passes; the loop must have nothing else to run: use it before the node
 * starts, or a loop of its own; kt_srv_lookup_start below on a running loop). A name that does not
 * exist yields no records; a target that does not resolve yields n_addr 0. Errors: KT_EINVAL (bad
 * dns_servers), KT_ETIMEOUT (deadline passed), KT_EIO (the resolver failed for every name: message
 * names the first failure, e.g. "connection refused"). *out is filled on success. */
int kt_srv_lookup(struct ev_loop *loop, const struct kt_srv_req *req, struct kt_srv_result *out,
                  struct kt_err *e);

/* The same without blocking: starts the lookups on loop and returns; cb
 * runs once from the loop (never from inside this call) with 0 or the error
 * (e valid during the call) and out filled. out must stay valid until then.
 * Errors returned here (cb will not run): KT_EINVAL (bad dns_servers), KT_EIO. */
struct kt_srv_lookup;
typedef void (*kt_srv_done_cb)(void *arg, int rc, const struct kt_err *e,
                               struct kt_srv_result *out);
int kt_srv_lookup_start(struct ev_loop *loop, const struct kt_srv_req *req,
                        struct kt_srv_result *out, kt_srv_done_cb cb, void *arg, struct kt_err *e);

/* SRV record names for a domain: servers ("_ketch-server-ssl[-SUFFIX]._tcp.D",
 * then "_ketch-server..."), or clients ("_ketch-client-ssl...",
 * "_ketch-client..."). etcd_names uses "_etcd-" instead. Writes two names
 * into out[2][cap]; ssl[0] true, ssl[1] false. */
void kt_srv_names(const char *domain, const char *suffix, bool client, bool etcd_names,
                  char out[2][300], bool ssl[2]);

/* One member of the initial cluster built from SRV records. */
struct kt_srv_member {
  char name[300];
  char url[320]; /* scheme://address:port (the local member: its advertised URL) */
};

/* Pure: builds the initial cluster from resolved records. self_urls are the
 * member's advertised peer URLs (raw), self_ports their ports and
 * self_addrs[i] the resolved addresses of their hosts (res->hosts[i]).
 * Sorted by name. *self gets the index of the local member.
 * Errors: KT_ENOTFOUND "cannot find local member in SRV records",
 * KT_EINVAL (no records, or more than max). */
int kt_srv_cluster(const struct kt_srv_result *res, const char *const *self_urls,
                   const uint16_t *self_ports, size_t n_self, struct kt_srv_member *out, size_t max,
                   size_t *n_out, size_t *self, struct kt_err *e);

struct kt_config;

/* --discovery-srv at start: the server names for cfg's domain/suffix (or
 * etcd's), the member's advertised peer hosts, kt_srv_lookup on loop, then
 * kt_srv_cluster. Errors as those two. */
int kt_srv_bootstrap(struct ev_loop *loop, const struct kt_config *cfg, struct kt_srv_member *out,
                     size_t max, size_t *n_out, size_t *self, struct kt_err *e);

#endif
