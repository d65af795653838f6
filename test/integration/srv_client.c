/* test/integration/srv_client.c — a libketch program that finds its
 * endpoints by DNS SRV (ketch_srv_endpoints, ketch_open_srv), for
 * discovery_test.py. Only the public API (client/ketch.h).
 *
 *   srv_client DOMAIN DNS_SERVERS endpoints     prints "endpoints LIST"
 *   srv_client DOMAIN DNS_SERVERS get KEY       prints "value V" or "none"
 *   srv_client DOMAIN DNS_SERVERS again KEY     one handle: gets KEY and prints
 *       "value V ENDPOINT", waits for a line on stdin, gets KEY again on the
 *       same handle and prints the same (the handle looks the records up
 *       again when its endpoints fail)
 * Prints "error ENAME: MESSAGE" and exits 2 when something fails. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../../client/ketch.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: srv_client DOMAIN DNS_SERVERS endpoints|get KEY\n");
    return 2;
  }
  char msg[512];
  if (!strcmp(argv[3], "endpoints")) {
    char eps[4096];
    int err = ketch_srv_endpoints(argv[1], NULL, argv[2], 5000, eps, sizeof eps, msg, sizeof msg);
    if (err) {
      printf("error %s: %s\n", ketch_errname(err), msg);
      return 2;
    }
    printf("endpoints %s\n", eps);
    return 0;
  }
  bool again = !strcmp(argv[3], "again");
  if ((strcmp(argv[3], "get") && !again) || argc < 5)
    return 2;
  ketch_client *c = NULL;
  int err = ketch_open_srv(&c, argv[1], NULL, argv[2], NULL, msg, sizeof msg);
  if (err) {
    printf("error %s: %s\n", ketch_errname(err), msg);
    return 2;
  }
  for (int round = 0; round < (again ? 2 : 1); round++) {
    if (round) {
      char line[16];
      if (!fgets(line, sizeof line, stdin))
        break;
    }
    ketch_result *res = NULL;
    err = ketch_get(c, argv[4], strlen(argv[4]), &res);
    if (err) {
      printf("error %s: %s\n", ketch_errname(err), ketch_errmsg(c));
      ketch_close(c);
      return 2;
    }
    if (res->range.n_kvs)
      printf("value %.*s", (int)res->range.kvs[0].value_len, res->range.kvs[0].value);
    else
      printf("none");
    const char *ep = ketch_endpoint(c);
    printf(again ? " %s\n" : "\n", ep ? ep : "-");
    fflush(stdout);
    ketch_result_free(res);
  }
  ketch_close(c);
  return 0;
}
