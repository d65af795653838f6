/* net/gateway.h — `ketch gateway start`: an L4 TCP proxy for clients that can
 * reach only one address (etcd's gateway, its flags).
 *
 * Data flow (one libev loop, one thread):
 *   accept on --listen-addr
 *   -> pick an endpoint among --endpoints (or the targets of
 *      _ketch-client[-ssl][-SUFFIX]._tcp.DOMAIN with --discovery-srv): the
 *      lowest SRV priority among the usable ones, smooth weighted round robin
 *      by SRV weight within it (plain round robin for --endpoints), skipping
 *      those marked failed until their --retry-delay has passed
 *   -> non-blocking connect with --connect-timeout (etcd's dial has none);
 *      refused or timed out: the endpoint is marked failed and the next one
 *      is tried, each at most once per client; none left: the client is closed
 *   -> copy bytes both ways through two bounded buffers (--max-buffer each;
 *      with --splice, two pipes that splice(2) moves the bytes through);
 *      a full buffer stops reading from its source (backpressure), so a client
 *      that stops reading costs at most 2 buffers, however much the member
 *      sends; half-closes are passed on (shutdown SHUT_WR)
 *   -> with --health-check native, every --health-interval a STATUS request
 *      to each endpoint on a non-blocking libketch handle driven by the loop;
 *      an error, a timeout or no known leader makes the endpoint unhealthy
 *      (not picked) until a probe succeeds (a paused member still accepts
 *      TCP connections: only a request finds it out)
 *   -> per-endpoint counters (connections, active, failures, bytes each way)
 *      logged every --stats-interval and at exit.
 *   -> with --resolver-prefix, the gateway registers its --advertise-client-url
 *      in the cluster as etcd's grpc-proxy does (net/gateway_reg.c), marked as
 *      a native endpoint: libketch and ketchctl --resolver-prefix use it.
 * Names in --endpoints are resolved once at start with c-ares (net/srv.h),
 * before the loop serves; the loop never calls getaddrinfo. SRV records are
 * looked up again asynchronously (kt_srv_lookup_start) when the targets'
 * address TTL passes: new targets are added, vanished ones marked gone.
 * Limits: at most --max-conns client connections (more are accepted and
 * closed at once), KT_GW_MAX_ENDPOINTS endpoints.
 */
#ifndef KT_GATEWAY_H
#define KT_GATEWAY_H

#include <stddef.h>

#define KT_GW_MAX_ENDPOINTS 64

/* argv[0] is "gateway"; argv[1] must be "start". Returns the exit code. */
int kt_gateway_main(int argc, char **argv);

/* --resolver-prefix (net/gateway_reg.c): registers addr under prefix in the
 * cluster at endpoints, on a lease of ttl_s seconds kept alive from loop,
 * until kt_gw_reg_stop (which revokes it). NULL with why on a bad address or
 * endpoint list. */
struct ev_loop;
struct kt_gw_reg;
struct kt_gw_reg *kt_gw_reg_start(struct ev_loop *loop, const char *endpoints, const char *prefix,
                                  const char *addr, int ttl_s, int dial_timeout_ms, char *why,
                                  size_t why_len);
void kt_gw_reg_stop(struct kt_gw_reg *r);

#endif
