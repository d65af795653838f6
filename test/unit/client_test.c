/* test/unit/client_test.c — libketch against real bin/ketch processes.
 *
 * Offline tests (error table, helpers, endpoint parsing, unreachable
 * endpoints, a listener that never answers) need no server. The rest start
 * bin/ketch (from $KETCH_BIN, else bin/) on 127.0.0.1 ports taken with
 * bind(0), each with its own data dir, and kill it at the end. Failover kills
 * a member with SIGKILL; timeouts freeze one with SIGSTOP.
 */
#include "../../client/ketch.h"
#include "../../core/base.h"
#include "../../net/proto.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A port that nothing listens on right now (bound, then closed). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    kt_panic(__FILE__, __LINE__, "free_port");
  close(fd);
  return ntohs(a.sin_port);
}

struct server {
  pid_t pid;
  int port;
  char dir[256];
  char ep[64]; /* "127.0.0.1:port" */
};

#define MAX_SERVERS 8
static struct server *servers[MAX_SERVERS];

static void server_stop(struct server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL); /* also ends a SIGSTOPped member, without running it */
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  if (s->dir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", s->dir);
    s->dir[0] = 0;
  }
  for (int i = 0; i < MAX_SERVERS; i++)
    if (servers[i] == s)
      servers[i] = NULL;
}

static void stop_all(void) {
  for (int i = 0; i < MAX_SERVERS; i++)
    if (servers[i])
      server_stop(servers[i]);
}

/* Starts bin/ketch on a fresh port and data dir and waits until it answers a
 * HELLO (at most 10 s). Returns 0 or -1 (with a reason on stderr). */
static int server_start(struct server *s) {
  static bool registered;
  if (!registered) {
    atexit(stop_all);
    signal(SIGPIPE, SIG_IGN);
    registered = true;
  }
  memset(s, 0, sizeof *s);
  const char *bindir = getenv("KETCH_BIN");
  char bin[300];
  snprintf(bin, sizeof bin, "%s/ketch", bindir ? bindir : "bin");
  if (access(bin, X_OK) != 0) {
    fprintf(stderr, "no server binary at %s\n", bin);
    return -1;
  }
  snprintf(s->dir, sizeof s->dir, "%s/ketch-client-test-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(s->dir))
    return -1;
  s->port = free_port();
  int peer = free_port();
  snprintf(s->ep, sizeof s->ep, "127.0.0.1:%d", s->port);
  char data[300], url[64], purl[64], logf[300];
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
  snprintf(purl, sizeof purl, "http://127.0.0.1:%d", peer);
  snprintf(logf, sizeof logf, "%s/log", s->dir);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execl(bin, bin, "--name", "default", "--data-dir", data, "--listen-client-urls", url,
          "--advertise-client-urls", url, "--listen-peer-urls", purl,
          "--initial-advertise-peer-urls", purl, (char *)NULL);
    _exit(127);
  }
  s->pid = pid;
  for (int i = 0; i < MAX_SERVERS; i++)
    if (!servers[i]) {
      servers[i] = s;
      break;
    }
  ketch_options o = {.dial_timeout_ms = 200, .request_timeout_ms = 1000};
  int64_t end = mono_ms() + 10000;
  while (mono_ms() < end) {
    ketch_client *c;
    if (ketch_open(&c, s->ep, &o, NULL, 0) == 0) {
      ketch_close(c);
      return 0;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      s->pid = 0;
      fprintf(stderr, "ketch exited at start; see %s\n", logf);
      return -1;
    }
    usleep(20000);
  }
  fprintf(stderr, "ketch did not answer within 10 s; see %s\n", logf);
  return -1;
}

/* One server shared by the tests that do not disturb it (each uses its own
 * key prefix). */
static struct server shared;
static const char *shared_ep(void) {
  if (!shared.pid && server_start(&shared) != 0)
    return NULL;
  return shared.ep;
}

static ketch_client *open_or_null(const char *ep, const ketch_options *o) {
  ketch_client *c = NULL;
  char why[512];
  if (!ep)
    return NULL;
  int err = ketch_open(&c, ep, o, why, sizeof why);
  if (err)
    fprintf(stderr, "ketch_open %s: %s (%s)\n", ep, ketch_strerror(err), why);
  return c;
}

static int put_s(ketch_client *c, const char *k, const char *v, ketch_result **out) {
  ketch_put_req p = {.key = k, .key_len = strlen(k), .value = v, .value_len = strlen(v)};
  return ketch_put(c, &p, out);
}

static bool kv_is(const ketch_kv *kv, const char *k, const char *v) {
  return kv->key_len == strlen(k) && memcmp(kv->key, k, kv->key_len) == 0 &&
         (!v || (kv->value_len == strlen(v) && memcmp(kv->value, v, kv->value_len) == 0));
}

/* ---- offline ---- */

TEST(error_codes_agree_with_server_table) {
  /* every KT_E* has the same number, name and message as KETCH_E* */
#define CHECK_CODE(name, code, msg)                                                                \
  CHECK_EQ(KETCH_##name, KT_##name);                                                               \
  CHECK_EQ(KETCH_##name, code);                                                                    \
  CHECK_STR(ketch_strerror(KETCH_##name), msg);                                                    \
  CHECK_STR(ketch_errname(KETCH_##name), #name);
  KT_ERRORS(CHECK_CODE)
#undef CHECK_CODE
  CHECK_EQ(KETCH_EINVALIDAUTHMGMT + 1, KT_ERR_MAX); /* no code missing at the end */
  CHECK_STR(ketch_strerror(9999), "unknown error");
  CHECK_STR(ketch_version(), KETCH_VERSION);
}

TEST(prefix_end_is_etcds) {
  uint8_t out[8];
  CHECK_EQ(ketch_prefix_end("abc", 3, out), 3);
  CHECK_BYTES(out, 3, "abd");
  CHECK_EQ(ketch_prefix_end("a\xff\xff", 3, out), 1);
  CHECK_BYTES(out, 1, "b");
  CHECK_EQ(ketch_prefix_end("\xff", 1, out), 1);
  CHECK_EQ(out[0], 0);
  CHECK_EQ(ketch_prefix_end("", 0, out), 1);
  CHECK_EQ(out[0], 0);
}

TEST(open_rejects_bad_endpoints) {
  const char *bad[] = {"", " , ", "a:b:c", "host:0", "host:99999", "[::1", "host:12x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ketch_client *c = (ketch_client *)1;
    char why[256] = "";
    CHECK_EQ(ketch_open(&c, bad[i], NULL, why, sizeof why), KETCH_EINVAL);
    CHECK(c == NULL);
    CHECK(why[0] != 0);
  }
  ketch_options o = {.nonblocking_open = true};
  ketch_client *c;
  CHECK_EQ(ketch_open(&c, "http://127.0.0.1:1/, [::1]:2, localhost", &o, NULL, 0), 0);
  CHECK(ketch_endpoint(c) == NULL); /* not connected yet */
  CHECK_EQ(ketch_fd(c), -1);
  CHECK_EQ(ketch_timeout_ms(c), -1); /* nothing pending */
  ketch_close(c);
}

TEST(open_fails_over_all_dead_endpoints) {
  char eps[100];
  snprintf(eps, sizeof eps, "127.0.0.1:%d,http://127.0.0.1:%d", free_port(), free_port());
  ketch_client *c;
  char why[1024];
  int64_t t0 = mono_ms();
  ketch_options o = {.dial_timeout_ms = 500};
  CHECK_EQ(ketch_open(&c, eps, &o, why, sizeof why), KETCH_EUNAVAILABLE);
  CHECK(mono_ms() - t0 < 1500);
  CHECK(strstr(why, "Connection refused") != NULL);
  CHECK(strchr(why, ';') != NULL); /* both endpoints named */
}

static int n_cb, last_err;
static char last_msg[512];
static void count_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  n_cb++;
  last_err = err;
  snprintf(last_msg, sizeof last_msg, "%s", res->message);
}

TEST(async_request_without_endpoint_completes_unavailable) {
  char eps[100];
  snprintf(eps, sizeof eps, "127.0.0.1:%d", free_port());
  ketch_options o = {.nonblocking_open = true, .request_timeout_ms = 300};
  ketch_client *c;
  CHECK_EQ(ketch_open(&c, eps, &o, NULL, 0), 0);
  n_cb = 0;
  CHECK_EQ(ketch_get_async(c, "k", 1, count_cb, NULL), 0);
  CHECK_EQ(n_cb, 0); /* never from inside submit */
  CHECK_EQ(ketch_pending(c), 1);
  int64_t t0 = mono_ms();
  CHECK_EQ(ketch_run(c, 5000), 0);
  int64_t took = mono_ms() - t0;
  CHECK_EQ(n_cb, 1);
  CHECK_EQ(last_err, KETCH_EUNAVAILABLE);
  CHECK(strstr(last_msg, "Connection refused") != NULL);
  CHECK(took >= 250 && took < 1500);
  ketch_close(c);
}

TEST(invalid_requests_and_busy_are_refused_at_submit) {
  ketch_options o = {.nonblocking_open = true, .max_outstanding = 2};
  ketch_client *c;
  CHECK_EQ(ketch_open(&c, "127.0.0.1:1", &o, NULL, 0), 0);
  n_cb = 0;
  ketch_range_req r = {.key = "a", .key_len = 1, .range_end = "b", .range_end_len = 1, .prefix = 1};
  CHECK_EQ(ketch_range_async(c, &r, count_cb, NULL), KETCH_EINVAL);
  ketch_range_req r2 = {.key = "a", .key_len = 1, .sort_order = 7};
  CHECK_EQ(ketch_range_async(c, &r2, count_cb, NULL), KETCH_EINVAL);
  ketch_op self;
  self.type = KETCH_OP_TXN;
  self.txn = (ketch_txn_req){.success = &self, .n_success = 1}; /* a cycle */
  CHECK_EQ(ketch_txn_async(c, &self.txn, count_cb, NULL), KETCH_EINVAL);
  static char big[2 * 1024 * 1024];
  ketch_put_req p = {.key = "k", .key_len = 1, .value = big, .value_len = sizeof big};
  CHECK_EQ(ketch_put_async(c, &p, count_cb, NULL), KETCH_ETOOLARGE);
  CHECK_EQ(ketch_get_async(c, "a", 1, count_cb, NULL), 0);
  CHECK_EQ(ketch_get_async(c, "b", 1, count_cb, NULL), 0);
  CHECK_EQ(ketch_get_async(c, "c", 1, count_cb, NULL), KETCH_EBUSY);
  CHECK_EQ(n_cb, 0);
  ketch_close(c); /* the two pending complete with ECANCELED */
  CHECK_EQ(n_cb, 2);
  CHECK_EQ(last_err, KETCH_ECANCELED);
}

TEST(handshake_timeout_on_a_listener_that_never_answers) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(lfd, 4) == 0);
  CHECK(getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
  char eps[64], why[512];
  snprintf(eps, sizeof eps, "127.0.0.1:%d", ntohs(a.sin_port));
  ketch_options o = {.dial_timeout_ms = 200};
  ketch_client *c;
  int64_t t0 = mono_ms();
  CHECK_EQ(ketch_open(&c, eps, &o, why, sizeof why), KETCH_EUNAVAILABLE);
  CHECK(mono_ms() - t0 >= 180);
  CHECK(strstr(why, "handshake timeout") != NULL);
  close(lfd);
}

/* ---- against a real server ---- */

TEST(sync_put_get_and_header) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  CHECK_STR(ketch_endpoint(c), shared.ep);
  ketch_result *r1, *r2, *g;
  CHECK_EQ(put_s(c, "pg/a", "1", &r1), 0);
  CHECK_EQ(r1->type, KETCH_OP_PUT);
  CHECK_EQ(r1->err, 0);
  CHECK_STR(r1->message, "");
  CHECK(r1->header.revision > 0);
  CHECK(r1->put.prev_kv == NULL);
  ketch_put_req p = {.key = "pg/a", .key_len = 4, .value = "2", .value_len = 1, .prev_kv = true};
  CHECK_EQ(ketch_put(c, &p, &r2), 0);
  CHECK_EQ(r2->header.revision, r1->header.revision + 1);
  CHECK(r2->put.prev_kv != NULL);
  CHECK(kv_is(r2->put.prev_kv, "pg/a", "1"));
  CHECK_EQ(ketch_get(c, "pg/a", 4, &g), 0);
  CHECK_EQ(g->range.n_kvs, 1);
  CHECK_EQ(g->range.count, 1);
  CHECK(!g->range.more);
  const ketch_kv *kv = &g->range.kvs[0];
  CHECK(kv_is(kv, "pg/a", "2"));
  CHECK_EQ(kv->create_revision, r1->header.revision);
  CHECK_EQ(kv->mod_revision, r2->header.revision);
  CHECK_EQ(kv->version, 2);
  CHECK_EQ(kv->lease, 0);
  CHECK_EQ(g->header.revision, r2->header.revision);
  CHECK(g->header.cluster_id != 0 && g->header.member_id != 0);
  CHECK_EQ(g->header.member_id, ketch_member_id(c));
  CHECK_EQ(g->header.cluster_id, ketch_cluster_id(c));
  ketch_result *none;
  CHECK_EQ(ketch_get(c, "pg/missing", 10, &none), 0);
  CHECK_EQ(none->range.n_kvs, 0);
  CHECK_EQ(none->range.count, 0);
  ketch_close(c);
  /* synchronous results outlive the handle */
  CHECK(kv_is(&g->range.kvs[0], "pg/a", "2"));
  ketch_result_free(r1);
  ketch_result_free(r2);
  ketch_result_free(g);
  ketch_result_free(none);
}

TEST(range_options) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  const char *keys[] = {"ro/a", "ro/b", "ro/c", "ro/d", "rp"};
  int64_t rev[5];
  for (int i = 0; i < 5; i++) {
    ketch_result *r;
    char v[8];
    snprintf(v, sizeof v, "v%d", 4 - i); /* values sort opposite to keys */
    CHECK_EQ(put_s(c, keys[i], v, &r), 0);
    rev[i] = r->header.revision;
    ketch_result_free(r);
  }
  ketch_result *r;
  /* prefix */
  ketch_range_req q = {.key = "ro/", .key_len = 3, .prefix = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 4);
  CHECK_EQ(r->range.count, 4);
  CHECK(kv_is(&r->range.kvs[0], "ro/a", "v4") && kv_is(&r->range.kvs[3], "ro/d", "v1"));
  ketch_result_free(r);
  /* explicit range_end [ro/b, ro/d) */
  q = (ketch_range_req){.key = "ro/b", .key_len = 4, .range_end = "ro/d", .range_end_len = 4};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 2);
  CHECK(kv_is(&r->range.kvs[1], "ro/c", NULL));
  ketch_result_free(r);
  /* from_key: ro/c, ro/d, rp (and maybe later keys of other tests) */
  q = (ketch_range_req){.key = "ro/c", .key_len = 4, .from_key = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK(r->range.n_kvs >= 3);
  CHECK(kv_is(&r->range.kvs[2], "rp", "v0"));
  ketch_result_free(r);
  /* limit: more + count */
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .limit = 2};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 2);
  CHECK(r->range.more);
  CHECK_EQ(r->range.count, 4);
  ketch_result_free(r);
  /* sort by value ascending: ro/d (v1) first */
  q = (ketch_range_req){.key = "ro/",
                        .key_len = 3,
                        .prefix = true,
                        .sort_order = KETCH_SORT_ASCEND,
                        .sort_target = KETCH_SORT_VALUE};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 4);
  CHECK(kv_is(&r->range.kvs[0], "ro/d", "v1"));
  ketch_result_free(r);
  /* sort by key descending */
  q = (ketch_range_req){.key = "ro/",
                        .key_len = 3,
                        .prefix = true,
                        .sort_order = KETCH_SORT_DESCEND,
                        .sort_target = KETCH_SORT_KEY};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK(kv_is(&r->range.kvs[0], "ro/d", NULL));
  ketch_result_free(r);
  /* keys_only */
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .keys_only = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 4);
  CHECK_EQ(r->range.kvs[0].value_len, 0);
  CHECK_EQ(r->range.kvs[0].mod_revision, rev[0]);
  ketch_result_free(r);
  /* count_only */
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .count_only = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 0);
  CHECK_EQ(r->range.count, 4);
  ketch_result_free(r);
  /* at an older revision: only ro/a and ro/b existed */
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .revision = rev[1]};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 2);
  ketch_result_free(r);
  /* mod / create revision filters */
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .min_mod_revision = rev[2]};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 2); /* ro/c, ro/d */
  ketch_result_free(r);
  q = (ketch_range_req){.key = "ro/", .key_len = 3, .prefix = true, .max_create_revision = rev[0]};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 1); /* ro/a */
  ketch_result_free(r);
  q = (ketch_range_req){.key = "ro/",
                        .key_len = 3,
                        .prefix = true,
                        .min_create_revision = rev[1],
                        .max_mod_revision = rev[2]};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 2); /* ro/b, ro/c */
  ketch_result_free(r);
  /* serializable */
  q = (ketch_range_req){.key = "ro/a", .key_len = 4, .serializable = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.n_kvs, 1);
  ketch_result_free(r);
  /* a future revision */
  q = (ketch_range_req){.key = "ro/a", .key_len = 4, .revision = rev[4] + 1000};
  CHECK_EQ(ketch_range(c, &q, &r), KETCH_EFUTUREREV);
  CHECK(r == NULL);
  CHECK(strstr(ketch_errmsg(c), "future") != NULL);
  ketch_close(c);
}

TEST(delete_single_and_prefix_with_prev_kv) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  CHECK_EQ(put_s(c, "dl/a", "1", NULL), 0);
  CHECK_EQ(put_s(c, "dl/b", "2", NULL), 0);
  CHECK_EQ(put_s(c, "dl/c", "3", NULL), 0);
  ketch_result *r;
  ketch_delete_req d = {.key = "dl/a", .key_len = 4};
  CHECK_EQ(ketch_delete(c, &d, &r), 0);
  CHECK_EQ(r->del.deleted, 1);
  CHECK_EQ(r->del.n_prev_kvs, 0);
  ketch_result_free(r);
  CHECK_EQ(ketch_delete(c, &d, &r), 0); /* gone already */
  CHECK_EQ(r->del.deleted, 0);
  ketch_result_free(r);
  d = (ketch_delete_req){.key = "dl/", .key_len = 3, .prefix = true, .prev_kv = true};
  CHECK_EQ(ketch_delete(c, &d, &r), 0);
  CHECK_EQ(r->del.deleted, 2);
  CHECK_EQ(r->del.n_prev_kvs, 2);
  CHECK(kv_is(&r->del.prev_kvs[0], "dl/b", "2"));
  CHECK(kv_is(&r->del.prev_kvs[1], "dl/c", "3"));
  ketch_result_free(r);
  ketch_range_req q = {.key = "dl/", .key_len = 3, .prefix = true, .count_only = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.count, 0);
  ketch_result_free(r);
  ketch_close(c);
}

TEST(set_endpoints_replaces_the_list_and_keeps_the_connection) {
  const char *ep = shared_ep();
  CHECK(ep != NULL);
  char dead[64], both[160], why[256] = "";
  snprintf(dead, sizeof dead, "127.0.0.1:%d", free_port());
  ketch_options o = {.dial_timeout_ms = 200, .request_timeout_ms = 2000};
  ketch_client *c = open_or_null(ep, &o);
  CHECK(c != NULL);
  ketch_result *r = NULL;
  /* refused lists leave it as it was */
  CHECK_EQ(ketch_set_endpoints(c, " , ", why, sizeof why), KETCH_EINVAL);
  CHECK(why[0] != 0);
  CHECK_EQ(ketch_set_endpoints(c, "https://127.0.0.1:1", why, sizeof why), KETCH_EINVAL);
  CHECK(strstr(why, "TLS") != NULL);
  /* the endpoint in use is not in the new list: the connection stays */
  CHECK_EQ(ketch_set_endpoints(c, dead, NULL, 0), 0);
  CHECK_EQ(put_s(c, "se/a", "1", &r), 0);
  CHECK_STR(ketch_endpoint(c), ep);
  ketch_result_free(r);
  ketch_close(c);
  /* a handle on a dead endpoint reaches a live one once it is listed */
  ketch_options o2 = {.nonblocking_open = true, .dial_timeout_ms = 200, .request_timeout_ms = 3000};
  c = open_or_null(dead, &o2);
  CHECK(c != NULL);
  snprintf(both, sizeof both, "http://%s,%s", dead, ep);
  CHECK_EQ(ketch_set_endpoints(c, both, NULL, 0), 0);
  CHECK_EQ(put_s(c, "se/b", "2", &r), 0);
  CHECK_STR(ketch_endpoint(c), ep);
  ketch_result_free(r);
  ketch_close(c);
}

TEST(txn_compare_branches_and_nesting) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(put_s(c, "tx/k", "v1", &r), 0);
  int64_t rev = r->header.revision;
  ketch_result_free(r);
  ketch_compare cmp = {.result = KETCH_CMP_EQUAL,
                       .target = KETCH_CMP_VALUE,
                       .key = "tx/k",
                       .key_len = 4,
                       .value = "v1",
                       .value_len = 2};
  ketch_op inner_ops[] = {ketch_op_range((ketch_range_req){.key = "tx/k", .key_len = 4})};
  ketch_compare inner_cmp = {.result = KETCH_CMP_GREATER,
                             .target = KETCH_CMP_VERSION,
                             .key = "tx/k",
                             .key_len = 4,
                             .int_value = 0};
  ketch_op succ[] = {
      ketch_op_put((ketch_put_req){
          .key = "tx/k", .key_len = 4, .value = "v2", .value_len = 2, .prev_kv = true}),
      ketch_op_put((ketch_put_req){.key = "tx/other", .key_len = 8, .value = "x", .value_len = 1}),
      ketch_op_txn((ketch_txn_req){
          .compare = &inner_cmp, .n_compare = 1, .success = inner_ops, .n_success = 1}),
  };
  ketch_op fail[] = {ketch_op_range((ketch_range_req){.key = "tx/k", .key_len = 4})};
  ketch_txn_req t = {.compare = &cmp,
                     .n_compare = 1,
                     .success = succ,
                     .n_success = 3,
                     .failure = fail,
                     .n_failure = 1};
  CHECK_EQ(ketch_txn(c, &t, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_TXN);
  CHECK(r->txn.succeeded);
  CHECK_EQ(r->header.revision, rev + 1); /* both puts at one revision */
  CHECK_EQ(r->txn.n_responses, 3);
  CHECK_EQ(r->txn.responses[0].type, KETCH_OP_PUT);
  CHECK(r->txn.responses[0].put.prev_kv && kv_is(r->txn.responses[0].put.prev_kv, "tx/k", "v1"));
  CHECK_EQ(r->txn.responses[2].type, KETCH_OP_TXN);
  const ketch_txn_result *in = &r->txn.responses[2].txn;
  CHECK(in->succeeded);
  CHECK_EQ(in->n_responses, 1);
  CHECK_EQ(in->responses[0].type, KETCH_OP_RANGE);
  CHECK_EQ(in->responses[0].range.n_kvs, 1);
  CHECK(kv_is(&in->responses[0].range.kvs[0], "tx/k", "v2"));
  ketch_result_free(r);
  /* the same txn again: value is v2 now, so the failure branch runs */
  CHECK_EQ(ketch_txn(c, &t, &r), 0);
  CHECK(!r->txn.succeeded);
  CHECK_EQ(r->header.revision, rev + 1); /* nothing written */
  CHECK_EQ(r->txn.n_responses, 1);
  CHECK_EQ(r->txn.responses[0].type, KETCH_OP_RANGE);
  CHECK(kv_is(&r->txn.responses[0].range.kvs[0], "tx/k", "v2"));
  ketch_result_free(r);
  /* mod revision compare */
  ketch_compare mc = {.result = KETCH_CMP_EQUAL,
                      .target = KETCH_CMP_MOD,
                      .key = "tx/k",
                      .key_len = 4,
                      .int_value = rev + 1};
  ketch_txn_req t2 = {.compare = &mc, .n_compare = 1};
  CHECK_EQ(ketch_txn(c, &t2, &r), 0);
  CHECK(r->txn.succeeded);
  CHECK_EQ(r->txn.n_responses, 0);
  ketch_result_free(r);
  ketch_close(c);
}

TEST(server_errors_carry_code_and_message) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r = (ketch_result *)1;
  ketch_put_req p = {.key = "", .key_len = 0, .value = "v", .value_len = 1};
  CHECK_EQ(ketch_put(c, &p, &r), KETCH_EKEYEMPTY);
  CHECK(r == NULL);
  CHECK(strstr(ketch_errmsg(c), "key is not provided") != NULL);
  /* async: the result carries code and message */
  n_cb = 0;
  CHECK_EQ(ketch_put_async(c, &p, count_cb, NULL), 0);
  CHECK_EQ(ketch_run(c, 5000), 0);
  CHECK_EQ(n_cb, 1);
  CHECK_EQ(last_err, KETCH_EKEYEMPTY);
  CHECK(strstr(last_msg, "key is not provided") != NULL);
  /* the connection is still good */
  CHECK_EQ(put_s(c, "er/ok", "1", NULL), 0);
  ketch_close(c);
}

TEST(status_of_the_member) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(ketch_status(c, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_STATUS);
  CHECK(r->status.version && r->status.version[0]);
  CHECK(r->status.raft_term >= 1);
  CHECK(r->status.raft_index >= 1);
  CHECK(r->status.db_size > 0);
  CHECK(r->header.member_id == ketch_member_id(c));
  CHECK(r->status.leader == r->header.member_id); /* single member: it leads */
  ketch_result_free(r);
  ketch_close(c);
}

TEST(compact_then_old_revision_is_gone) {
  struct server s;
  CHECK(server_start(&s) == 0);
  ketch_client *c = open_or_null(s.ep, NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(put_s(c, "cp", "1", &r), 0);
  int64_t r1 = r->header.revision;
  ketch_result_free(r);
  CHECK_EQ(put_s(c, "cp", "2", &r), 0);
  int64_t r2 = r->header.revision;
  ketch_result_free(r);
  CHECK_EQ(ketch_compact(c, r2, true, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_COMPACT);
  CHECK(r->header.revision >= r2);
  ketch_result_free(r);
  ketch_range_req q = {.key = "cp", .key_len = 2, .revision = r1};
  CHECK_EQ(ketch_range(c, &q, &r), KETCH_ECOMPACTED);
  CHECK(strstr(ketch_errmsg(c), "compacted") != NULL);
  q.revision = r2;
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK(kv_is(&r->range.kvs[0], "cp", "2"));
  ketch_result_free(r);
  CHECK_EQ(ketch_compact(c, r1, false, &r), KETCH_ECOMPACTED);
  CHECK_EQ(ketch_compact(c, r2 + 100, false, &r), KETCH_EFUTUREREV);
  ketch_close(c);
  server_stop(&s);
}

/* Drives a client with a plain poll() loop, as a caller's event loop would. */
static void poll_loop(ketch_client *c, int *done, int want, int64_t limit_ms) {
  int64_t end = mono_ms() + limit_ms;
  while (*done < want && mono_ms() < end) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    int t = ketch_timeout_ms(c);
    if (t < 0 || t > 100)
      t = 100;
    poll(&p, p.fd >= 0 ? 1 : 0, t);
    ketch_process(c);
  }
}

struct pipe_state {
  int done, ok, bad_err;
  int64_t max_rev;
};
static void pipe_cb(void *arg, int err, const ketch_result *res) {
  struct pipe_state *st = arg;
  st->done++;
  if (err) {
    st->bad_err = err;
    return;
  }
  st->ok++;
  if (res->header.revision > st->max_rev)
    st->max_rev = res->header.revision;
}

TEST(async_pipeline_10k_puts_on_one_connection) {
  ketch_options o = {.max_outstanding = 10000, .request_timeout_ms = 30000};
  ketch_client *c = open_or_null(shared_ep(), &o);
  CHECK(c != NULL);
  int fd0 = ketch_fd(c);
  struct pipe_state st = {0};
  char key[32], val[32];
  int64_t t0 = mono_ms();
  for (int i = 0; i < 10000; i++) {
    snprintf(key, sizeof key, "pl/%05d", i);
    snprintf(val, sizeof val, "value-%d", i);
    ketch_put_req p = {.key = key, .key_len = strlen(key), .value = val, .value_len = strlen(val)};
    CHECK_EQ(ketch_put_async(c, &p, pipe_cb, &st), 0);
  }
  CHECK_EQ(ketch_pending(c), 10000);
  CHECK_EQ(st.done, 0);
  CHECK_EQ(ketch_get_async(c, "x", 1, pipe_cb, &st), KETCH_EBUSY); /* the limit holds */
  poll_loop(c, &st.done, 10000, 30000);
  int64_t took = mono_ms() - t0;
  CHECK_EQ(st.done, 10000);
  CHECK_EQ(st.ok, 10000);
  CHECK_EQ(ketch_pending(c), 0);
  CHECK_EQ(ketch_fd(c), fd0); /* one connection throughout */
  fprintf(stderr, "client_test: 10000 pipelined puts in %lld ms\n", (long long)took);
  ketch_result *r;
  ketch_range_req q = {.key = "pl/", .key_len = 3, .prefix = true, .count_only = true};
  CHECK_EQ(ketch_range(c, &q, &r), 0);
  CHECK_EQ(r->range.count, 10000);
  CHECK(r->header.revision >= st.max_rev);
  ketch_result_free(r);
  /* and 10000 pipelined gets */
  struct pipe_state g = {0};
  t0 = mono_ms();
  for (int i = 0; i < 10000; i++) {
    snprintf(key, sizeof key, "pl/%05d", i);
    CHECK_EQ(ketch_get_async(c, key, strlen(key), pipe_cb, &g), 0);
  }
  poll_loop(c, &g.done, 10000, 30000);
  CHECK_EQ(g.ok, 10000);
  fprintf(stderr, "client_test: 10000 pipelined gets in %lld ms\n", (long long)(mono_ms() - t0));
  ketch_close(c);
}

struct fo_state {
  int reads_ok, reads_err, writes_ok, writes_unknown, writes_other, done;
};
static void fo_read_cb(void *arg, int err, const ketch_result *res) {
  struct fo_state *st = arg;
  (void)res;
  st->done++;
  if (err)
    st->reads_err++;
  else
    st->reads_ok++;
}
static void fo_write_cb(void *arg, int err, const ketch_result *res) {
  struct fo_state *st = arg;
  (void)res;
  st->done++;
  if (!err)
    st->writes_ok++;
  else if (err == KETCH_EUNKNOWN)
    st->writes_unknown++;
  else
    st->writes_other++;
}

TEST(failover_retries_reads_and_reports_writes_unknown) {
  struct server a, b;
  CHECK(server_start(&a) == 0);
  CHECK(server_start(&b) == 0);
  char eps[200];
  snprintf(eps, sizeof eps, "127.0.0.1:%d,http://%s,%s", free_port(), a.ep, b.ep);
  ketch_options o = {.dial_timeout_ms = 500, .request_timeout_ms = 5000};
  ketch_client *c = open_or_null(eps, &o);
  CHECK(c != NULL);
  CHECK_STR(ketch_endpoint(c), a.ep); /* skipped the dead one */
  /* Freeze A so that what we send stays in flight, send reads and writes,
   * wait until every byte left our buffer, then kill A. */
  CHECK(kill(a.pid, SIGSTOP) == 0);
  struct fo_state st = {0};
  for (int i = 0; i < 50; i++) {
    char key[16];
    snprintf(key, sizeof key, "fo/%d", i);
    ketch_put_req p = {.key = key, .key_len = strlen(key), .value = "v", .value_len = 1};
    CHECK_EQ(ketch_put_async(c, &p, fo_write_cb, &st), 0);
    CHECK_EQ(ketch_get_async(c, key, strlen(key), fo_read_cb, &st), 0);
  }
  ketch_range_req q = {.key = "fo/", .key_len = 3, .prefix = true};
  CHECK_EQ(ketch_range_async(c, &q, fo_read_cb, &st), 0);
  for (int i = 0; i < 100 && (ketch_events(c) & POLLOUT); i++) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    poll(&p, 1, 10);
    ketch_process(c);
  }
  CHECK(!(ketch_events(c) & POLLOUT)); /* all 101 frames written to A */
  CHECK_EQ(st.done, 0);
  server_stop(&a); /* SIGKILL */
  poll_loop(c, &st.done, 101, 10000);
  CHECK_EQ(st.done, 101);
  CHECK_EQ(st.writes_ok, 0); /* never reported as success */
  CHECK_EQ(st.writes_other, 0);
  CHECK_EQ(st.writes_unknown, 50); /* outcome unknown */
  CHECK_EQ(st.reads_err, 0);
  CHECK_EQ(st.reads_ok, 51); /* retried on B */
  CHECK_STR(ketch_endpoint(c), b.ep);
  /* B serves new writes */
  ketch_result *r;
  CHECK_EQ(put_s(c, "fo/after", "x", &r), 0);
  CHECK_EQ(r->header.member_id, ketch_member_id(c));
  ketch_result_free(r);
  ketch_close(c);
  server_stop(&b);
}

TEST(write_submitted_while_reconnecting_goes_to_the_next_endpoint) {
  struct server a, b;
  CHECK(server_start(&a) == 0);
  CHECK(server_start(&b) == 0);
  char eps[200];
  snprintf(eps, sizeof eps, "%s,%s", a.ep, b.ep);
  ketch_client *c = open_or_null(eps, NULL);
  CHECK(c != NULL);
  CHECK_STR(ketch_endpoint(c), a.ep);
  server_stop(&a); /* A is dead; the client does not know yet */
  struct fo_state st = {0};
  CHECK_EQ(ketch_get_async(c, "nw/1", 4, fo_read_cb, &st), 0);
  /* run until the client has noticed and left A */
  for (int i = 0; i < 200 && ketch_endpoint(c) != NULL; i++) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    poll(&p, 1, 10);
    ketch_process(c);
  }
  CHECK(ketch_endpoint(c) == NULL);
  /* this write never touched A's socket: it is sent to B and succeeds */
  ketch_put_req p = {.key = "nw/1", .key_len = 4, .value = "v", .value_len = 1};
  CHECK_EQ(ketch_put_async(c, &p, fo_write_cb, &st), 0);
  poll_loop(c, &st.done, 2, 10000);
  CHECK_EQ(st.done, 2);
  CHECK_EQ(st.reads_ok, 1);
  CHECK_EQ(st.writes_ok, 1);
  CHECK_STR(ketch_endpoint(c), b.ep);
  ketch_close(c);
  server_stop(&b);
}

TEST(request_timeout_on_a_frozen_member) {
  struct server s;
  CHECK(server_start(&s) == 0);
  ketch_options o = {.request_timeout_ms = 300};
  ketch_client *c = open_or_null(s.ep, &o);
  CHECK(c != NULL);
  CHECK(kill(s.pid, SIGSTOP) == 0);
  ketch_result *r;
  int64_t t0 = mono_ms();
  CHECK_EQ(ketch_get(c, "k", 1, &r), KETCH_ETIMEOUT);
  int64_t took = mono_ms() - t0;
  CHECK(took >= 290 && took < 1000);
  CHECK(strstr(ketch_errmsg(c), "timed out") != NULL);
  CHECK_EQ(put_s(c, "k", "v", &r), KETCH_ETIMEOUT);
  CHECK(strstr(ketch_errmsg(c), "outcome unknown") != NULL);
  kill(s.pid, SIGCONT);
  /* late answers to timed-out requests are dropped; new ones work */
  CHECK_EQ(ketch_get(c, "k", 1, &r), 0);
  ketch_result_free(r);
  ketch_close(c);
  server_stop(&s);
}

static int cb_sync_rc;
static ketch_client *cb_client;
static void cb_calls_sync(void *arg, int err, const ketch_result *res) {
  (void)arg;
  (void)err;
  (void)res;
  ketch_result *r;
  cb_sync_rc = ketch_get(cb_client, "x", 1, &r);
  CHECK_EQ(ketch_process(cb_client), KETCH_EINVAL);
}

TEST(sync_call_inside_callback_is_refused) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  cb_client = c;
  cb_sync_rc = -1;
  CHECK_EQ(ketch_get_async(c, "x", 1, cb_calls_sync, NULL), 0);
  CHECK_EQ(ketch_run(c, 5000), 0);
  CHECK_EQ(cb_sync_rc, KETCH_EINVAL);
  ketch_close(c);
}

TEST(large_value_round_trip) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  size_t n = 1024 * 1024;
  char *v = malloc(n);
  CHECK(v != NULL);
  for (size_t i = 0; i < n; i++)
    v[i] = (char)(i * 7 + (i >> 10));
  ketch_put_req p = {.key = "lv/big", .key_len = 6, .value = v, .value_len = n};
  CHECK_EQ(ketch_put(c, &p, NULL), 0);
  ketch_result *r;
  CHECK_EQ(ketch_get(c, "lv/big", 6, &r), 0);
  CHECK_EQ(r->range.n_kvs, 1);
  CHECK_EQ(r->range.kvs[0].value_len, n);
  CHECK(memcmp(r->range.kvs[0].value, v, n) == 0);
  ketch_result_free(r);
  free(v);
  ketch_close(c);
}

TEST(garbage_from_a_listener_fails_the_endpoint_cleanly) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(lfd, 4) == 0);
  CHECK(getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
  char eps[64];
  snprintf(eps, sizeof eps, "127.0.0.1:%d", ntohs(a.sin_port));
  ketch_options o = {.nonblocking_open = true, .request_timeout_ms = 300, .dial_timeout_ms = 2000};
  ketch_client *c;
  CHECK_EQ(ketch_open(&c, eps, &o, NULL, 0), 0);
  n_cb = 0;
  CHECK_EQ(ketch_get_async(c, "k", 1, count_cb, NULL), 0);
  int afd = -1;
  for (int i = 0; i < 100 && afd < 0; i++) {
    ketch_process(c);
    afd = accept(lfd, NULL, NULL);
    if (afd < 0)
      usleep(2000);
  }
  CHECK(afd >= 0);
  /* a well-framed body that is not msgpack of a response */
  CHECK(write(afd, "\0\0\0\5\xc1\xc1\xc1\xc1\xc1", 9) == 9);
  CHECK_EQ(ketch_run(c, 5000), 0);
  CHECK_EQ(n_cb, 1);
  CHECK_EQ(last_err, KETCH_EUNAVAILABLE);
  CHECK(strstr(last_msg, "bad response frame") != NULL);
  ketch_close(c);
  close(afd);
  close(lfd);
}

TEST(write_after_idle_member_died_goes_to_the_next_endpoint) {
  struct server a, b;
  CHECK(server_start(&a) == 0);
  CHECK(server_start(&b) == 0);
  char eps[200];
  snprintf(eps, sizeof eps, "%s,%s", a.ep, b.ep);
  ketch_client *c = open_or_null(eps, NULL);
  CHECK(c != NULL);
  CHECK_STR(ketch_endpoint(c), a.ep);
  server_stop(&a);
  usleep(50000); /* the FIN has arrived; the handle was idle */
  ketch_result *r;
  CHECK_EQ(put_s(c, "id/1", "v", &r), 0); /* not EUNKNOWN: it never left */
  CHECK_EQ(r->header.member_id, ketch_member_id(c));
  ketch_result_free(r);
  CHECK_STR(ketch_endpoint(c), b.ep);
  ketch_close(c);
  server_stop(&b);
}

/* ---- the seed corpus of test/fuzz/client_fuzz.c ----
 * KT_WRITE_CORPUS=1 build/test/client_test write_client_fuzz_corpus
 * (run from the repository root) rewrites test/fuzz/corpus/client/. */

static uint64_t fz_id(int n) { return ((uint64_t)n << 24) | (uint64_t)(n - 1); }

static void fz_resp(struct kt_buf *b, uint8_t type, uint64_t id) {
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = type;
  r.id = id;
  r.header = (struct kt_header){1, 2, 10, 3};
  static struct kt_kv kvs[3] = {
      {{(const uint8_t *)"a", 1}, {(const uint8_t *)"x", 1}, 1, 2, 1, 0},
      {{(const uint8_t *)"ab", 2}, {(const uint8_t *)"", 0}, 3, 4, 2, 7},
      {{(const uint8_t *)"k", 1}, {(const uint8_t *)"value", 5}, 5, 6, 1, 0},
  };
  static struct kt_response_op sub[2];
  static struct kt_bytes errs[2] = {{(const uint8_t *)"NOSPACE", 7}, {(const uint8_t *)"x", 1}};
  switch (type) {
  case KT_MSG_RANGE:
    r.u.op.type = KT_OP_RANGE;
    r.u.op.u.range = (struct kt_range_resp){kvs, 3, true, 9};
    break;
  case KT_MSG_PUT:
    r.u.op.type = KT_OP_PUT;
    r.u.op.u.put.has_prev_kv = true;
    r.u.op.u.put.prev_kv = kvs[2];
    break;
  case KT_MSG_DELETE:
    r.u.op.type = KT_OP_DELETE;
    r.u.op.u.del = (struct kt_delete_resp){2, kvs, 2};
    break;
  case KT_MSG_TXN:
    sub[0].type = KT_OP_RANGE;
    sub[0].u.range = (struct kt_range_resp){kvs, 1, false, 1};
    sub[1].type = KT_OP_PUT;
    r.u.op.type = KT_OP_TXN;
    r.u.op.u.txn = (struct kt_txn_resp){true, sub, 2};
    break;
  case KT_MSG_STATUS:
    r.u.status.version = (struct kt_bytes){(const uint8_t *)"0.1.0", 5};
    r.u.status.db_size = 4096;
    r.u.status.leader = 2;
    r.u.status.errors = errs;
    r.u.status.n_errors = 2;
    break;
  case KT_MSG_HELLO:
    r.u.hello.version = KT_PROTO_VERSION;
    r.u.hello.server = (struct kt_bytes){(const uint8_t *)"seed", 4};
    r.u.hello.cluster_id = 1;
    r.u.hello.member_id = 2;
    r.u.hello.max_request_bytes = 1024;
    break;
  default:
    break;
  }
  kt_proto_encode_resp(b, &r);
}

#define FZ_WATCH_ID ((1ull << 62) | (12ull << 24)) /* sent after the HELLO: seq 12 */

static void fz_watch(struct kt_buf *b) {
  static struct kt_event ev[3];
  for (int i = 0; i < 3; i++) {
    memset(&ev[i], 0, sizeof ev[i]);
    ev[i].type = i == 2 ? KT_EVENT_DELETE : KT_EVENT_PUT;
    ev[i].kv.key = (struct kt_bytes){(const uint8_t *)"ab", 2};
    ev[i].kv.value = (struct kt_bytes){(const uint8_t *)(i == 2 ? "" : "vv"), i == 2 ? 0 : 2};
    ev[i].kv.mod_revision = 11 + (i > 0);
    ev[i].has_prev_kv = i == 1;
    ev[i].prev_kv = ev[0].kv;
  }
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_WATCH_CREATE;
  r.id = FZ_WATCH_ID;
  r.header = (struct kt_header){1, 2, 10, 3};
  r.u.watch.watch_id = 4;
  r.u.watch.created = true;
  kt_proto_encode_resp(b, &r);
  r.u.watch.created = false;
  r.u.watch.events = ev;
  r.u.watch.n_events = 2;
  r.u.watch.fragment = true;
  kt_proto_encode_resp(b, &r);
  r.u.watch.events = ev + 1;
  r.u.watch.fragment = false;
  kt_proto_encode_resp(b, &r);
  r.u.watch.n_events = 0;
  r.header.revision = 20;
  kt_proto_encode_resp(b, &r);
  r.u.watch.canceled = true;
  r.u.watch.compact_revision = 15;
  kt_proto_encode_resp(b, &r);
}

static void fz_lease(struct kt_buf *b) {
  static struct kt_bytes keys[2] = {{(const uint8_t *)"k1", 2}, {(const uint8_t *)"", 0}};
  struct kt_resp r;
  memset(&r, 0, sizeof r);
  r.type = KT_MSG_LEASE_TTL;
  r.id = fz_id(8);
  r.header = (struct kt_header){1, 2, 10, 3};
  r.u.lease.id = 5;
  r.u.lease.ttl = 7;
  r.u.lease.granted_ttl = 10;
  r.u.lease.keys = keys;
  r.u.lease.n_keys = 2;
  kt_proto_encode_resp(b, &r);
}

static void fz_write(const char *name, uint8_t sel, const struct kt_buf *b) {
  char path[200];
  snprintf(path, sizeof path, "test/fuzz/corpus/client/%s", name);
  FILE *f = fopen(path, "wb");
  if (!f)
    return;
  fputc(sel, f);
  if (b->len)
    fwrite(b->p, 1, b->len, f);
  fclose(f);
}

TEST(write_client_fuzz_corpus) {
  if (!getenv("KT_WRITE_CORPUS"))
    return;
  CHECK(mkdir("test/fuzz/corpus/client", 0755) == 0 || errno == EEXIST);
  static const uint8_t types[7] = {KT_MSG_RANGE, KT_MSG_RANGE,  KT_MSG_PUT,    KT_MSG_DELETE,
                                   KT_MSG_TXN,   KT_MSG_STATUS, KT_MSG_COMPACT};
  struct kt_buf b = {0};
  fz_write("hello-only", 1, &b);
  for (int i = 0; i < 7; i++)
    fz_resp(&b, types[i], fz_id(i + 1));
  fz_write("all-answered", 1, &b);
  kt_buf_reset(&b);
  for (int i = 6; i >= 0; i--)
    fz_resp(&b, types[i], fz_id(i + 1));
  fz_write("all-answered-reversed", 1, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_RANGE, fz_id(3)); /* a range answer to the put */
  fz_write("wrong-type", 1, &b);
  kt_buf_reset(&b);
  kt_proto_encode_error(&b, fz_id(1), KT_EKEYEMPTY, "key is not provided");
  kt_proto_encode_error(&b, fz_id(2), 999, "");
  kt_proto_encode_error(&b, 0, KT_EPROTO, "connection-level");
  kt_proto_encode_error(&b, fz_id(3), KT_ECOMPACTED, "");
  fz_write("errors", 1, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_RANGE, fz_id(9));
  fz_resp(&b, KT_MSG_RANGE, (1ull << 24) | 5);
  fz_resp(&b, KT_MSG_RANGE, 0xffffffffffffffffull);
  fz_resp(&b, KT_MSG_RANGE, fz_id(1));
  fz_resp(&b, KT_MSG_RANGE, fz_id(1)); /* twice */
  fz_write("stale-and-duplicate-ids", 1, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_HELLO, 0);
  fz_resp(&b, KT_MSG_STATUS, fz_id(6));
  fz_write("own-hello", 0, &b);
  kt_buf_reset(&b);
  kt_proto_encode_error(&b, 0, KT_EVERSION, "unsupported protocol version");
  fz_write("hello-refused", 0, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_STATUS, 0);
  fz_write("hello-wrong-type", 0, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_TXN, fz_id(5));
  b.len -= 3; /* truncated */
  fz_write("truncated", 1, &b);
  kt_buf_reset(&b);
  kt_buf_append(&b, "\0\0\0\0", 4);
  fz_write("zero-length", 1, &b);
  kt_buf_reset(&b);
  kt_buf_append(&b, "\xff\xff\xff\xff", 4);
  fz_write("huge-length", 1, &b);
  kt_buf_reset(&b);
  kt_buf_append(&b, "\0\0\0\3\x93\x01\xc0", 7);
  fz_write("bad-body", 1, &b);
  kt_buf_reset(&b);
  fz_watch(&b); /* created, events (a fragment), progress, canceled */
  fz_write("watch-stream", 1, &b);
  kt_buf_reset(&b);
  fz_lease(&b);
  fz_write("lease-ttl-keys", 1, &b);
  kt_buf_reset(&b);
  fz_resp(&b, KT_MSG_DELETE, fz_id(4));
  for (size_t i = 0; i < b.len; i++) /* flip every byte of the body */
    if (i >= 4)
      b.p[i] ^= 0x5a;
  fz_write("flipped", 1, &b);
  kt_buf_free(&b);
}

static ketch_result *kept[3];
static int n_kept;
static void keep_cb(void *arg, int err, const ketch_result *res) {
  (void)err;
  kept[(intptr_t)arg] = ketch_result_dup(res); /* answers may come in any order */
  n_kept++;
}

TEST(async_results_kept_with_dup) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  CHECK_EQ(put_s(c, "dp/a", "1", NULL), 0);
  n_kept = 0;
  ketch_op ops[] = {
      ketch_op_range((ketch_range_req){.key = "dp/", .key_len = 3, .prefix = true}),
      ketch_op_put((ketch_put_req){
          .key = "dp/a", .key_len = 4, .value = "2", .value_len = 1, .prev_kv = true})};
  ketch_txn_req t = {.success = ops, .n_success = 2};
  CHECK_EQ(ketch_txn_async(c, &t, keep_cb, (void *)0), 0);
  CHECK_EQ(ketch_status_async(c, keep_cb, (void *)1), 0);
  ketch_put_req bad = {.key = "", .key_len = 0};
  CHECK_EQ(ketch_put_async(c, &bad, keep_cb, (void *)2), 0);
  CHECK_EQ(ketch_run(c, 5000), 0);
  /* overwrite the library's buffers with other traffic, then close */
  for (int i = 0; i < 50; i++)
    CHECK_EQ(put_s(c, "dp/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "yyyyyyyyyyyyyyyyyyyy", NULL), 0);
  ketch_close(c);
  CHECK_EQ(n_kept, 3);
  const ketch_result *r = kept[0];
  CHECK(r->txn.succeeded);
  CHECK_EQ(r->txn.n_responses, 2);
  CHECK_EQ(r->txn.responses[0].range.n_kvs, 1);
  CHECK(kv_is(&r->txn.responses[0].range.kvs[0], "dp/a", "1"));
  CHECK(kv_is(r->txn.responses[1].put.prev_kv, "dp/a", "1"));
  CHECK(kept[1]->status.version[0] != 0);
  CHECK_EQ(kept[2]->err, KETCH_EKEYEMPTY);
  CHECK(strstr(kept[2]->message, "key is not provided") != NULL);
  for (int i = 0; i < 3; i++)
    ketch_result_free(kept[i]);
}

static ketch_client *resub_client;
static int resub_unknown, resub_unavail, resub_other, resub_done;
static void resub_read_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  (void)res;
  resub_done++;
  if (err == KETCH_EUNAVAILABLE)
    resub_unavail++;
  else
    resub_other++;
}
static void resub_write_cb(void *arg, int err, const ketch_result *res) {
  (void)arg;
  (void)res;
  resub_done++;
  if (err != KETCH_EUNKNOWN) {
    resub_other++;
    return;
  }
  resub_unknown++;
  /* submitting from the callback reconnects at once, and fails at once */
  ketch_get_async(resub_client, "rs", 2, resub_read_cb, NULL);
}

TEST(failover_to_dead_endpoints_with_callbacks_submitting) {
  struct server a;
  CHECK(server_start(&a) == 0);
  char eps[200];
  snprintf(eps, sizeof eps, "%s,127.0.0.1:%d,127.0.0.1:%d", a.ep, free_port(), free_port());
  ketch_options o = {.request_timeout_ms = 500};
  ketch_client *c = open_or_null(eps, &o);
  CHECK(c != NULL);
  resub_client = c;
  CHECK(kill(a.pid, SIGSTOP) == 0);
  for (int i = 0; i < 20; i++) {
    ketch_put_req p = {.key = "rs", .key_len = 2, .value = "v", .value_len = 1};
    CHECK_EQ(ketch_put_async(c, &p, resub_write_cb, NULL), 0);
    CHECK_EQ(ketch_get_async(c, "rs", 2, resub_read_cb, NULL), 0);
  }
  for (int i = 0; i < 100 && (ketch_events(c) & POLLOUT); i++) {
    struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
    poll(&p, 1, 10);
    ketch_process(c);
  }
  server_stop(&a);
  poll_loop(c, &resub_done, 60, 5000);
  CHECK_EQ(resub_unknown, 20);
  CHECK_EQ(resub_unavail, 40); /* 20 retried reads + 20 submitted from callbacks */
  CHECK_EQ(resub_other, 0);
  CHECK_EQ(ketch_pending(c), 0);
  ketch_close(c);
}

/* ---- member list and move-leader (a single member) ---- */

TEST(member_list_and_move_leader_on_one_member) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(ketch_member_list(c, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_MEMBER_LIST);
  CHECK_EQ(r->header.revision, 0); /* etcd's cluster calls carry none */
  CHECK_EQ(r->member_list.n_members, 1);
  const ketch_member *m = &r->member_list.members[0];
  CHECK(m->id == ketch_member_id(c));
  CHECK_STR(m->name, "default");
  CHECK_EQ(m->n_peer_urls, 1);
  CHECK(strncmp(m->peer_urls[0], "http://127.0.0.1:", 17) == 0);
  CHECK_EQ(m->n_client_urls, 1);
  char url[80];
  snprintf(url, sizeof url, "http://%s", shared.ep);
  CHECK_STR(m->client_urls[0], url);
  CHECK(!m->is_learner);
  uint64_t self = m->id;
  ketch_result_free(r);
  /* moving leadership to the leader itself succeeds at once (etcd) */
  CHECK_EQ(ketch_move_leader(c, self, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_MOVE_LEADER);
  CHECK(r->header.member_id == self);
  ketch_result_free(r);
  CHECK_EQ(ketch_move_leader(c, self ^ 1, &r), KETCH_EINVAL);
  CHECK(r == NULL);
  CHECK_STR(ketch_errmsg(c), "bad leader transferee");
  /* async + dup: the kept copy outlives the library's buffers */
  n_kept = 0;
  CHECK_EQ(ketch_member_list_async(c, keep_cb, (void *)0), 0);
  CHECK_EQ(ketch_move_leader_async(c, self, keep_cb, (void *)1), 0);
  CHECK_EQ(ketch_run(c, 5000), 0);
  for (int i = 0; i < 20; i++)
    CHECK_EQ(put_s(c, "ml/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "yyyyyyyyyyyyyyyyyyyyyyyy", NULL),
             0);
  ketch_close(c);
  CHECK_EQ(n_kept, 2);
  CHECK_EQ(kept[0]->member_list.n_members, 1);
  CHECK_STR(kept[0]->member_list.members[0].name, "default");
  CHECK_STR(kept[0]->member_list.members[0].client_urls[0], url);
  CHECK_EQ(kept[1]->err, 0);
  CHECK_EQ(kept[1]->type, KETCH_OP_MOVE_LEADER);
  for (int i = 0; i < 2; i++)
    ketch_result_free(kept[i]);
}

/* ---- leases and watches against a real member ---- */

static int64_t key_count(ketch_client *c, const char *prefix) {
  ketch_range_req q = {
      .key = prefix, .key_len = strlen(prefix), .prefix = true, .count_only = true};
  ketch_result *r = NULL;
  if (ketch_range(c, &q, &r) != 0)
    return -1;
  int64_t n = r->range.count;
  ketch_result_free(r);
  return n;
}

TEST(lease_grant_timetolive_keys_keepalive_list_revoke) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(ketch_lease_grant(c, 10, 0, &r), 0);
  CHECK_EQ(r->type, KETCH_OP_LEASE_GRANT);
  int64_t id = r->lease.id;
  CHECK(id > 0);
  CHECK_EQ(r->lease.ttl, 10);
  CHECK(r->header.member_id == ketch_member_id(c));
  ketch_result_free(r);
  CHECK_EQ(ketch_lease_grant(c, 10, id, &r), KETCH_ELEASEEXISTS);
  CHECK_EQ(ketch_lease_grant(c, 0, 0, &r), KETCH_EINVAL);
  ketch_put_req p = {.key = "ls/a", .key_len = 4, .value = "1", .value_len = 1, .lease = id};
  CHECK_EQ(ketch_put(c, &p, NULL), 0);
  p.key = "ls/b";
  CHECK_EQ(ketch_put(c, &p, NULL), 0);
  CHECK_EQ(ketch_lease_timetolive(c, id, true, &r), 0);
  CHECK_EQ(r->lease.id, id);
  CHECK_EQ(r->lease.granted_ttl, 10);
  CHECK(r->lease.ttl >= 8 && r->lease.ttl <= 10);
  CHECK_EQ(r->lease.n_keys, 2);
  bool a = false, b = false;
  for (size_t i = 0; i < 2; i++) {
    a |= kv_is(&r->lease.keys[i], "ls/a", NULL);
    b |= kv_is(&r->lease.keys[i], "ls/b", NULL);
  }
  CHECK(a && b);
  ketch_result *d = ketch_result_dup(r);
  ketch_result_free(r);
  CHECK_EQ(d->lease.n_keys, 2);
  CHECK(kv_is(&d->lease.keys[0], "ls/a", NULL) || kv_is(&d->lease.keys[0], "ls/b", NULL));
  ketch_result_free(d);
  CHECK_EQ(ketch_lease_keepalive_once(c, id, &r), 0);
  CHECK_EQ(r->lease.ttl, 10);
  ketch_result_free(r);
  CHECK_EQ(ketch_lease_leases(c, &r), 0);
  bool listed = false;
  for (size_t i = 0; i < r->lease.n_leases; i++) {
    listed |= r->lease.leases[i] == id;
    if (i)
      CHECK(r->lease.leases[i - 1] < r->lease.leases[i]);
  }
  CHECK(listed);
  ketch_result_free(r);
  /* revoke deletes the attached keys in one revision */
  CHECK_EQ(key_count(c, "ls/"), 2);
  CHECK_EQ(ketch_lease_revoke(c, id, &r), 0);
  ketch_result_free(r);
  CHECK_EQ(key_count(c, "ls/"), 0);
  CHECK_EQ(ketch_lease_timetolive(c, id, false, &r), 0);
  CHECK_EQ(r->lease.ttl, -1);
  ketch_result_free(r);
  CHECK_EQ(ketch_lease_revoke(c, id, &r), KETCH_ELEASENOTFOUND);
  CHECK_STR(ketch_errmsg(c), "requested lease not found");
  CHECK_EQ(ketch_lease_keepalive_once(c, id, &r), 0); /* etcd: ttl 0 when gone */
  CHECK_EQ(r->lease.ttl, 0);
  ketch_result_free(r);
  ketch_close(c);
}

static int ka_n, ka_zero;
static void ka_count(void *arg, int err, const ketch_result *res) {
  (void)arg;
  if (!err && res->lease.ttl > 0)
    ka_n++;
  else
    ka_zero++;
}

/* A lease kept alive by the handle outlives its TTL while the caller only
 * makes synchronous calls (the renewals run inside them); once stopped it
 * expires and its key goes with it. */
TEST(keepalive_runs_inside_sync_calls_and_expiry_deletes_keys) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(ketch_lease_grant(c, 2, 0, &r), 0);
  int64_t id = r->lease.id;
  ketch_result_free(r);
  ketch_put_req p = {.key = "ka/k", .key_len = 4, .value = "v", .value_len = 1, .lease = id};
  CHECK_EQ(ketch_put(c, &p, NULL), 0);
  ka_n = ka_zero = 0;
  CHECK_EQ(ketch_lease_keepalive_start(c, id, ka_count, NULL), 0);
  int64_t end = mono_ms() + 4000;
  while (mono_ms() < end) { /* only synchronous calls, 50 ms apart */
    CHECK_EQ(key_count(c, "ka/"), 1);
    usleep(50000);
  }
  CHECK(ka_n >= 5); /* at once, then every 666 ms */
  CHECK_EQ(ka_zero, 0);
  CHECK_EQ(ketch_lease_timetolive(c, id, false, &r), 0);
  CHECK(r->lease.ttl >= 1);
  ketch_result_free(r);
  CHECK_EQ(ketch_lease_keepalive_stop(c, id), 0);
  int n = ka_n;
  end = mono_ms() + 6000;
  while (key_count(c, "ka/") != 0 && mono_ms() < end)
    usleep(100000);
  CHECK_EQ(key_count(c, "ka/"), 0);
  CHECK_EQ(ka_n, n);
  CHECK_EQ(ketch_lease_timetolive(c, id, false, &r), 0);
  CHECK_EQ(r->lease.ttl, -1);
  ketch_result_free(r);
  /* keep-alive of a lease that is gone: one last callback with ttl 0 */
  CHECK_EQ(ketch_lease_keepalive_start(c, id, ka_count, NULL), 0);
  poll_loop(c, &ka_zero, 1, 3000);
  CHECK_EQ(ka_zero, 1);
  CHECK_EQ(ketch_lease_keepalive_stop(c, id), KETCH_ENOTFOUND);
  ketch_close(c);
}

struct wlog {
  int created, canceled, err, n;
  int64_t compact, last_rev;
  char ev[64][24];
  int64_t rev[64];
};
static void wlog_cb(void *arg, int err, const ketch_result *res) {
  struct wlog *l = arg;
  if (res->watch.canceled) {
    l->canceled++;
    l->err = err;
    l->compact = res->watch.compact_revision;
    return;
  }
  l->created += res->watch.created;
  for (size_t i = 0; i < res->watch.n_events && l->n < 64; i++) {
    const ketch_event *e = &res->watch.events[i];
    snprintf(l->ev[l->n], sizeof l->ev[0], "%c %.*s=%.*s", e->type ? 'D' : 'P', (int)e->kv.key_len,
             e->kv.key, (int)e->kv.value_len, e->kv.value);
    l->rev[l->n++] = e->kv.mod_revision;
  }
}

/* Events arrive in order, with the writes' revisions, while the caller makes
 * synchronous writes on the same handle; then a watch from an old revision
 * replays history; cancel ends with canceled. */
TEST(watch_events_in_order_during_sync_calls_history_and_cancel) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  static struct wlog l;
  memset(&l, 0, sizeof l);
  ketch_watch_req wq = {.key = "wt/", .key_len = 3, .prefix = true, .prev_kv = true};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, wlog_cb, &l, &h), 0);
  int64_t revs[4];
  ketch_result *r;
  const char *keys[4] = {"wt/a", "wt/b", "wt/a", "other"};
  for (int i = 0; i < 4; i++) {
    char v[16];
    snprintf(v, sizeof v, "v%d", i);
    CHECK_EQ(put_s(c, keys[i], v, &r), 0);
    revs[i] = r->header.revision;
    ketch_result_free(r);
  }
  ketch_delete_req dq = {.key = "wt/b", .key_len = 4};
  CHECK_EQ(ketch_delete(c, &dq, &r), 0);
  int64_t del_rev = r->header.revision;
  ketch_result_free(r);
  CHECK_EQ(ketch_status(c, &r), 0); /* one more round trip: the events are in */
  ketch_result_free(r);
  CHECK_EQ(l.created, 1);
  CHECK_EQ(l.n, 4);
  CHECK_STR(l.ev[0], "P wt/a=v0");
  CHECK_STR(l.ev[1], "P wt/b=v1");
  CHECK_STR(l.ev[2], "P wt/a=v2");
  CHECK_STR(l.ev[3], "D wt/b=");
  CHECK_EQ(l.rev[0], revs[0]);
  CHECK_EQ(l.rev[2], revs[2]);
  CHECK_EQ(l.rev[3], del_rev);
  /* history: a second watch from the first put's revision sees the same */
  static struct wlog h2;
  memset(&h2, 0, sizeof h2);
  wq.start_revision = revs[0];
  uint64_t hh;
  CHECK_EQ(ketch_watch(c, &wq, wlog_cb, &h2, &hh), 0);
  CHECK(hh != h);
  poll_loop(c, &h2.n, 4, 3000);
  CHECK_EQ(h2.n, 4);
  for (int i = 0; i < 4; i++) {
    CHECK_STR(h2.ev[i], l.ev[i]);
    CHECK_EQ(h2.rev[i], l.rev[i]);
  }
  CHECK_EQ(ketch_watch_cancel(c, h), 0);
  CHECK_EQ(ketch_watch_cancel(c, hh), 0);
  poll_loop(c, &h2.canceled, 1, 3000);
  poll_loop(c, &l.canceled, 1, 3000);
  CHECK_EQ(l.canceled, 1);
  CHECK_EQ(l.err, 0);
  CHECK_EQ(h2.err, 0);
  CHECK_EQ(put_s(c, "wt/z", "after", NULL), 0);
  CHECK_EQ(l.n, 4);
  ketch_close(c);
}

TEST(watch_from_a_compacted_revision_is_canceled_with_the_compaction) {
  ketch_client *c = open_or_null(shared_ep(), NULL);
  CHECK(c != NULL);
  ketch_result *r;
  CHECK_EQ(put_s(c, "wc/k", "1", &r), 0);
  int64_t first = r->header.revision;
  ketch_result_free(r);
  CHECK_EQ(put_s(c, "wc/k", "2", &r), 0);
  int64_t second = r->header.revision;
  ketch_result_free(r);
  CHECK_EQ(ketch_compact(c, second, false, NULL), 0);
  static struct wlog l;
  memset(&l, 0, sizeof l);
  ketch_watch_req wq = {.key = "wc/k", .key_len = 4, .start_revision = first};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, wlog_cb, &l, &h), 0);
  poll_loop(c, &l.canceled, 1, 3000);
  CHECK_EQ(l.canceled, 1);
  CHECK_EQ(l.err, KETCH_ECOMPACTED);
  CHECK_EQ(l.compact, second);
  CHECK_EQ(l.n, 0);
  /* from compact_revision + 1 (the earliest, net/PROTOCOL.md 7.12; etcd also
   * takes compact_revision itself, whose deletes it may have lost) */
  CHECK_EQ(put_s(c, "wc/k", "3", NULL), 0);
  memset(&l, 0, sizeof l);
  wq.start_revision = second + 1;
  CHECK_EQ(ketch_watch(c, &wq, wlog_cb, &l, &h), 0);
  poll_loop(c, &l.n, 1, 3000);
  CHECK_EQ(l.n, 1);
  CHECK_STR(l.ev[0], "P wc/k=3");
  ketch_close(c); /* ends the open watch with ECANCELED */
  CHECK_EQ(l.canceled, 1);
  CHECK_EQ(l.err, KETCH_ECANCELED);
}

struct wcount {
  int events, done;
  int64_t last_rev;
  bool disorder;
};
static void wcount_cb(void *arg, int err, const ketch_result *res) {
  struct wcount *w = arg;
  (void)err;
  for (size_t i = 0; i < res->watch.n_events; i++) {
    if (res->watch.events[i].kv.mod_revision <= w->last_rev)
      w->disorder = true;
    w->last_rev = res->watch.events[i].kv.mod_revision;
    w->events++;
  }
}

/* 10000 pipelined puts on the handle that also watches their prefix: every
 * event arrives once, in order (the time is printed, not asserted). */
TEST(watch_keeps_up_with_10k_pipelined_puts) {
  ketch_options o = {.max_outstanding = 10000, .request_timeout_ms = 30000};
  ketch_client *c = open_or_null(shared_ep(), &o);
  CHECK(c != NULL);
  static struct wcount wc;
  memset(&wc, 0, sizeof wc);
  ketch_watch_req wq = {.key = "w10k/", .key_len = 5, .prefix = true};
  uint64_t h;
  CHECK_EQ(ketch_watch(c, &wq, wcount_cb, &wc, &h), 0);
  CHECK_EQ(ketch_status(c, NULL), 0); /* the watch is open before the writes */
  struct pipe_state st = {0};
  char key[32];
  int64_t t0 = mono_ms();
  for (int i = 0; i < 10000; i++) {
    snprintf(key, sizeof key, "w10k/%05d", i);
    ketch_put_req p = {.key = key, .key_len = strlen(key), .value = "v", .value_len = 1};
    CHECK_EQ(ketch_put_async(c, &p, pipe_cb, &st), 0);
  }
  poll_loop(c, &wc.events, 10000, 30000);
  int64_t t1 = mono_ms();
  poll_loop(c, &st.done, 10000, 5000);
  fprintf(stderr, "client_test: 10000 puts watched on the same handle in %lld ms\n",
          (long long)(t1 - t0));
  CHECK_EQ(st.ok, 10000);
  CHECK_EQ(wc.events, 10000);
  CHECK(!wc.disorder);
  CHECK_EQ(wc.last_rev, st.max_rev);
  ketch_close(c);
}
