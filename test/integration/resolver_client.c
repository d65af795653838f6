/* test/integration/resolver_client.c — a libketch program that finds its
 * endpoints under a resolver prefix (ketch_options.resolver_prefix), for
 * resolver_test.py. Only the public API (client/ketch.h).
 *
 *   resolver_client CLUSTER PREFIX spread N   opens N handles, gets "k" on
 *       each and prints "endpoint ENDPOINT" for each (the proxy it uses)
 *   resolver_client CLUSTER PREFIX again KEY  one handle: gets KEY and prints
 *       "value V ENDPOINT", then for each line on stdin gets KEY again on the
 *       same handle and prints the same (the handle fails over to another
 *       registered proxy, and reads the registrations again when all of
 *       those it knows failed)
 * Prints "error ENAME: MESSAGE" (and exits 2 when it cannot go on). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../client/ketch.h"

static int open_one(const char *cluster, const char *prefix, ketch_client **c) {
  ketch_options o;
  ketch_options_init(&o);
  o.resolver_prefix = prefix;
  o.dial_timeout_ms = 500;
  o.request_timeout_ms = 8000;
  char msg[1024];
  int err = ketch_open(c, cluster, &o, msg, sizeof msg);
  if (err)
    printf("error %s: %s\n", ketch_errname(err), msg);
  return err;
}

static void get(ketch_client *c, const char *key) {
  ketch_result *res = NULL;
  int err = ketch_get(c, key, strlen(key), &res);
  if (err)
    printf("error %s: %s\n", ketch_errname(err), ketch_errmsg(c));
  else if (res->range.n_kvs)
    printf("value %.*s %s\n", (int)res->range.kvs[0].value_len, res->range.kvs[0].value,
           ketch_endpoint(c));
  else
    printf("none %s\n", ketch_endpoint(c));
  fflush(stdout);
  ketch_result_free(res);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: resolver_client CLUSTER PREFIX spread N | again KEY\n");
    return 2;
  }
  ketch_client *c = NULL;
  if (!strcmp(argv[3], "spread")) {
    int n = atoi(argv[4]);
    for (int i = 0; i < n; i++) {
      if (open_one(argv[1], argv[2], &c))
        return 2;
      ketch_result *res = NULL;
      int err = ketch_get(c, "k", 1, &res);
      if (err)
        printf("error %s: %s\n", ketch_errname(err), ketch_errmsg(c));
      else
        printf("endpoint %s\n", ketch_endpoint(c));
      ketch_result_free(res);
      ketch_close(c);
    }
    return 0;
  }
  if (strcmp(argv[3], "again") || open_one(argv[1], argv[2], &c))
    return 2;
  get(c, argv[4]);
  char line[64];
  while (fgets(line, sizeof line, stdin))
    get(c, argv[4]);
  ketch_close(c);
  return 0;
}
