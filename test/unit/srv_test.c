/* test/unit/srv_test.c — the initial cluster built from SRV records
 * (net/srv.h kt_srv_cluster, pure) and the record names. The lookups
 * themselves run against a real dnsmasq in test/integration/discovery_test.py. */
#include "../../net/srv.h"
#include "test.h"

#include <stdlib.h>

static void rec(struct kt_srv_result *r, const char *target, uint16_t port, const char *addr,
                bool ssl) {
  struct kt_srv_rec *x = &r->recs[r->n_recs++];
  memset(x, 0, sizeof *x);
  snprintf(x->target, sizeof x->target, "%s", target);
  x->port = port;
  x->ssl = ssl;
  if (addr) {
    snprintf(x->addr[0], sizeof x->addr[0], "%s", addr);
    x->n_addr = 1;
  }
}

static void host(struct kt_srv_result *r, const char *addr) {
  struct kt_srv_host *h = &r->hosts[r->n_hosts++];
  memset(h, 0, sizeof *h);
  snprintf(h->addr[0], sizeof h->addr[0], "%s", addr);
  h->n_addr = 1;
}

TEST(srv_names_ketch_etcd_suffix) {
  char n[2][300];
  bool ssl[2];
  kt_srv_names("example.com", NULL, false, false, n, ssl);
  CHECK_STR(n[0], "_ketch-server-ssl._tcp.example.com");
  CHECK_STR(n[1], "_ketch-server._tcp.example.com");
  CHECK(ssl[0] && !ssl[1]);
  kt_srv_names("example.com", "prod", true, false, n, ssl);
  CHECK_STR(n[0], "_ketch-client-ssl-prod._tcp.example.com");
  CHECK_STR(n[1], "_ketch-client-prod._tcp.example.com");
  kt_srv_names("example.com", "", false, true, n, ssl);
  CHECK_STR(n[1], "_etcd-server._tcp.example.com");
}

TEST(srv_cluster_finds_self_and_names_by_target) {
  struct kt_srv_result *r = calloc(1, sizeof *r);
  rec(r, "m2.example.com", 2380, "10.0.0.2", false);
  rec(r, "M1.example.com", 2380, "10.0.0.1", false);
  rec(r, "m3.example.com", 2380, "fd00::3", true);
  rec(r, "m1.example.com", 2380, "10.0.0.1", true); /* same member under -ssl: once */
  rec(r, "gone.example.com", 2380, NULL, false);    /* did not resolve: skipped */
  host(r, "10.0.0.2");
  const char *urls[] = {"http://m2.example.com:2380"};
  uint16_t ports[] = {2380};
  struct kt_srv_member m[8];
  size_t n = 0, self = 99;
  struct kt_err e = {0};
  CHECK_EQ(kt_srv_cluster(r, urls, ports, 1, m, 8, &n, &self, &e), 0);
  CHECK_EQ(n, 3);
  CHECK_STR(m[0].name, "m1.example.com");
  CHECK_STR(m[0].url, "http://10.0.0.1:2380");
  CHECK_STR(m[1].name, "m2.example.com");
  CHECK_STR(m[1].url, "http://m2.example.com:2380"); /* self keeps its advertised URL */
  CHECK_STR(m[2].url, "https://[fd00::3]:2380");
  CHECK_EQ(self, 1);
  /* wrong port: not self */
  ports[0] = 2381;
  CHECK_EQ(kt_srv_cluster(r, urls, ports, 1, m, 8, &n, &self, &e), KT_ENOTFOUND);
  CHECK_STR(e.msg, "cannot find local member in SRV records");
  /* too many for the caller's array */
  ports[0] = 2380;
  CHECK_EQ(kt_srv_cluster(r, urls, ports, 1, m, 2, &n, &self, &e), KT_EINVAL);
  free(r);
}

TEST(srv_cluster_one_host_several_ports) {
  struct kt_srv_result *r = calloc(1, sizeof *r);
  rec(r, "h.example.com", 2380, "127.0.0.1", false);
  rec(r, "h.example.com", 2390, "127.0.0.1", false);
  host(r, "127.0.0.1");
  const char *urls[] = {"http://127.0.0.1:2390"};
  uint16_t ports[] = {2390};
  struct kt_srv_member m[8];
  size_t n = 0, self = 99;
  struct kt_err e = {0};
  CHECK_EQ(kt_srv_cluster(r, urls, ports, 1, m, 8, &n, &self, &e), 0);
  CHECK_EQ(n, 2);
  CHECK_STR(m[0].name, "h.example.com-2380");
  CHECK_STR(m[1].name, "h.example.com-2390");
  CHECK_EQ(self, 1);
  r->n_recs = 0;
  CHECK_EQ(kt_srv_cluster(r, urls, ports, 1, m, 8, &n, &self, &e), KT_EINVAL);
  free(r);
}
