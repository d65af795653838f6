/* example.c — libketch in a few lines: put, get, txn, print.
 *
 *   export PKG_CONFIG_PATH=$PWD/lib; cc client/example.c $(pkg-config --cflags --libs ketch) -o
 * example
 *   ./example 127.0.0.1:2479
 */
#include <ketch.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *endpoints = argc > 1 ? argv[1] : "127.0.0.1:2479";
  char why[512];
  ketch_client *c;
  int err = ketch_open(&c, endpoints, NULL, why, sizeof why);
  if (err) {
    fprintf(stderr, "open %s: %s (%s)\n", endpoints, ketch_strerror(err), why);
    return 1;
  }

  /* put */
  ketch_put_req put = {.key = "greeting", .key_len = 8, .value = "hello", .value_len = 5};
  ketch_result *res;
  if ((err = ketch_put(c, &put, &res))) {
    fprintf(stderr, "put: %s\n", ketch_errmsg(c));
    ketch_close(c);
    return 1;
  }
  printf("put greeting=hello at revision %lld\n", (long long)res->header.revision);
  int64_t rev = res->header.revision;
  ketch_result_free(res);

  /* get */
  if ((err = ketch_get(c, "greeting", 8, &res))) {
    fprintf(stderr, "get: %s\n", ketch_errmsg(c));
    ketch_close(c);
    return 1;
  }
  for (size_t i = 0; i < res->range.n_kvs; i++) {
    const ketch_kv *kv = &res->range.kvs[i];
    printf("get %.*s=%.*s (create %lld, mod %lld, version %lld)\n", (int)kv->key_len, kv->key,
           (int)kv->value_len, kv->value, (long long)kv->create_revision,
           (long long)kv->mod_revision, (long long)kv->version);
  }
  ketch_result_free(res);

  /* txn: if greeting was not modified since our put, set it and read it back */
  ketch_compare cmp = {.result = KETCH_CMP_EQUAL,
                       .target = KETCH_CMP_MOD,
                       .key = "greeting",
                       .key_len = 8,
                       .int_value = rev};
  ketch_op ops[] = {
      ketch_op_put((ketch_put_req){.key = "greeting", .key_len = 8, .value = "hi", .value_len = 2}),
      ketch_op_range((ketch_range_req){.key = "greeting", .key_len = 8}),
  };
  ketch_txn_req txn = {.compare = &cmp, .n_compare = 1, .success = ops, .n_success = 2};
  if ((err = ketch_txn(c, &txn, &res))) {
    fprintf(stderr, "txn: %s\n", ketch_errmsg(c));
    ketch_close(c);
    return 1;
  }
  printf("txn succeeded=%s revision %lld\n", res->txn.succeeded ? "true" : "false",
         (long long)res->header.revision);
  if (res->txn.succeeded && res->txn.n_responses == 2) {
    const ketch_range_result *r = &res->txn.responses[1].range;
    if (r->n_kvs == 1)
      printf("txn read %.*s=%.*s\n", (int)r->kvs[0].key_len, r->kvs[0].key,
             (int)r->kvs[0].value_len, r->kvs[0].value);
  }
  ketch_result_free(res);
  ketch_close(c);
  return 0;
}
