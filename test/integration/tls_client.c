/* test/integration/tls_client.c — a libketch program over TLS, for
 * tls_test.py. Only the public API (client/ketch.h).
 *
 *   tls_client ENDPOINTS CA CERT KEY SERVER_NAME COMMAND...
 *     CA, CERT, KEY, SERVER_NAME: a path / name, or "-" for none
 *     (SERVER_NAME "skip": insecure_skip_verify).
 *   COMMAND:
 *     put K V          "put REV"
 *     get K            "value V" or "none"
 *     watch K N        opens a watch on K, prints "created", then the first N
 *                      events ("event PUT K V"), driving the handle's loop with
 *                      poll on ketch_fd/ketch_events (the asynchronous form)
 * Prints "error ENAME: MESSAGE" and exits 2 when something fails.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../client/ketch.h"

static const char *opt(const char *s) { return strcmp(s, "-") ? s : NULL; }

static void fail(ketch_client *c, int err, const char *msg) {
  printf("error %s: %s\n", ketch_errname(err), msg && *msg ? msg : (c ? ketch_errmsg(c) : ""));
  exit(2);
}

struct watch_state {
  int events, want;
  bool created;
};

static void on_watch(void *arg, int err, const ketch_result *res) {
  struct watch_state *w = arg;
  if (err == KETCH_ECANCELED && w->events >= w->want)
    return; /* ketch_close ends the watch */
  if (err)
    fail(NULL, err, res ? res->message : "watch failed");
  const ketch_watch_result *r = &res->watch;
  if (r->created && !w->created) {
    w->created = true;
    printf("created\n");
    fflush(stdout);
  }
  for (size_t i = 0; i < r->n_events; i++) {
    const ketch_event *ev = &r->events[i];
    printf("event %s %.*s %.*s\n", ev->type == KETCH_EVENT_PUT ? "PUT" : "DELETE",
           (int)ev->kv.key_len, (const char *)ev->kv.key, (int)ev->kv.value_len,
           (const char *)ev->kv.value);
    fflush(stdout);
    w->events++;
  }
}

int main(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: tls_client ENDPOINTS CA CERT KEY SERVER_NAME COMMAND ARGS...\n");
    return 2;
  }
  ketch_options o;
  ketch_options_init(&o);
  o.tls = true;
  o.ca_file = opt(argv[2]);
  o.cert_file = opt(argv[3]);
  o.key_file = opt(argv[4]);
  if (!strcmp(argv[5], "skip"))
    o.insecure_skip_verify = true;
  else
    o.server_name = opt(argv[5]);
  o.dial_timeout_ms = 2000;
  o.request_timeout_ms = 5000;
  char msg[1024];
  ketch_client *c = NULL;
  int err = ketch_open(&c, argv[1], &o, msg, sizeof msg);
  if (err)
    fail(NULL, err, msg);
  const char *cmd = argv[6];
  ketch_result *res = NULL;
  struct watch_state w = {0}; /* the watch's last callback runs in ketch_close */
  if (!strcmp(cmd, "put") && argc == 9) {
    ketch_put_req p = {
        .key = argv[7], .key_len = strlen(argv[7]), .value = argv[8], .value_len = strlen(argv[8])};
    if ((err = ketch_put(c, &p, &res)))
      fail(c, err, NULL);
    printf("put %lld\n", (long long)res->header.revision);
  } else if (!strcmp(cmd, "get") && argc == 8) {
    if ((err = ketch_get(c, argv[7], strlen(argv[7]), &res)))
      fail(c, err, NULL);
    if (res->range.n_kvs)
      printf("value %.*s\n", (int)res->range.kvs[0].value_len,
             (const char *)res->range.kvs[0].value);
    else
      printf("none\n");
  } else if (!strcmp(cmd, "watch") && argc == 9) {
    w.want = atoi(argv[8]);
    ketch_watch_req q = {.key = argv[7], .key_len = strlen(argv[7])};
    uint64_t id;
    if ((err = ketch_watch(c, &q, on_watch, &w, &id)))
      fail(c, err, NULL);
    while (w.events < w.want) {
      struct pollfd p = {ketch_fd(c), ketch_events(c), 0};
      poll(&p, p.fd >= 0 ? 1 : 0, ketch_timeout_ms(c));
      ketch_process(c);
    }
  } else {
    fprintf(stderr, "tls_client: bad command\n");
    return 2;
  }
  ketch_result_free(res);
  ketch_close(c);
  return 0;
}
