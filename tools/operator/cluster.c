/* tools/operator/cluster.c — the reserved keys the operator keeps in the
 * cluster it operates, all under /_ketch/operator/<cluster>/:
 *
 *   spec                 the YAML spec as `apply` wrote it (the only copy)
 *   election/<lease>     ketch's election recipe: the acting operator
 *   actions/<seq %016x>  the action log, one logfmt record per step
 *   backups/<file name>  one record per backup (verified, failed, corrupt)
 *
 * Writes by the acting operator are fenced: a txn that only applies while
 * its election key still exists with the create revision it won with, so
 * an operator that lost its lease (and may not know it yet) writes nothing.
 * The action log keeps the newest OPX_KEEP_ACTIONS records.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opx.h"

#define OPX_KEEP_ACTIONS 1000

void opx_key(const struct opx *x, const char *rest, char *out, size_t n) {
  snprintf(out, n, "%s%s/%s", OP_PREFIX, x->cluster, rest);
}

void opx_spec_endpoints(const struct op_spec *s, const char *extra, char *out, size_t n) {
  size_t o = 0;
  out[0] = 0;
  if (extra && *extra)
    o += (size_t)snprintf(out, n, "%s", extra);
  for (int i = 0; i < s->n_machines && o < n; i++) {
    const char *u = s->machines[i].client_url;
    if (strstr(out, u))
      continue;
    o += (size_t)snprintf(out + o, n - o, "%s%s", o ? "," : "", u);
  }
}

int opx_connect(struct opx *x, const char *eps, char *err, size_t err_len) {
  if (x->c && !strcmp(eps, x->endpoints))
    return 0;
  ketch_options o;
  ketch_options_init(&o);
  o.dial_timeout_ms = 500;
  o.request_timeout_ms = 3000;
  o.nonblocking_open = true;
  ketch_client *c = NULL;
  int rc = ketch_open(&c, eps, &o, err, err_len);
  if (rc)
    return rc;
  ketch_close(x->c);
  x->c = c;
  snprintf(x->endpoints, sizeof x->endpoints, "%s", eps);
  return 0;
}

int opx_get_spec(struct opx *x, bool serializable, char **text, size_t *len, int64_t *rev) {
  char key[256];
  opx_key(x, "spec", key, sizeof key);
  ketch_range_req r;
  memset(&r, 0, sizeof r);
  r.key = key;
  r.key_len = strlen(key);
  r.serializable = serializable;
  ketch_result *res = NULL;
  int err = ketch_range(x->c, &r, &res);
  if (err)
    return err;
  if (res->range.n_kvs != 1) {
    ketch_result_free(res);
    return KETCH_ENOTFOUND;
  }
  const ketch_kv *kv = &res->range.kvs[0];
  *text = malloc(kv->value_len + 1);
  if (!*text) {
    ketch_result_free(res);
    return KETCH_ENOMEM;
  }
  memcpy(*text, kv->value, kv->value_len);
  (*text)[kv->value_len] = 0;
  *len = kv->value_len;
  *rev = kv->mod_revision;
  ketch_result_free(res);
  return 0;
}

int opx_load_spec(struct opx *x, bool serializable, char *err, size_t err_len) {
  char *text = NULL;
  size_t len = 0;
  int64_t rev = 0;
  int rc = opx_get_spec(x, serializable, &text, &len, &rev);
  if (rc) {
    if (rc == KETCH_ENOTFOUND)
      snprintf(err, err_len, "no spec for cluster %s (write one with ketch-operator apply -f)",
               x->cluster);
    else
      snprintf(err, err_len, "reading the spec: %s (%s)", ketch_strerror(rc), ketch_errmsg(x->c));
    return -1;
  }
  if (rev == x->spec_rev && x->have_spec) {
    free(text);
    return 0;
  }
  static struct op_spec s;
  char perr[300];
  if (op_spec_parse(text, len, &s, perr, sizeof perr)) {
    snprintf(err, err_len, "the stored spec (revision %" PRId64 ") does not parse: %s", rev, perr);
    free(text);
    return -1;
  }
  free(text);
  x->spec = s;
  x->spec_rev = rev;
  x->have_spec = true;
  return 0;
}

int opx_put_spec(struct opx *x, const char *text, size_t len, int64_t *rev) {
  char key[256];
  opx_key(x, "spec", key, sizeof key);
  ketch_put_req p;
  memset(&p, 0, sizeof p);
  p.key = key;
  p.key_len = strlen(key);
  p.value = text;
  p.value_len = len;
  ketch_result *res = NULL;
  int rc = ketch_put(x->c, &p, &res);
  if (!rc)
    *rev = res->header.revision;
  ketch_result_free(res);
  return rc;
}

/* Every key under OP_PREFIX<cluster>/<sub>/, newest (largest key) first. */
static int range_sub(struct opx *x, const char *sub, bool serializable, size_t max,
                     ketch_result **res) {
  char key[256];
  opx_key(x, sub, key, sizeof key);
  ketch_range_req r;
  memset(&r, 0, sizeof r);
  r.key = key;
  r.key_len = strlen(key);
  r.prefix = true;
  r.limit = (int64_t)max;
  r.sort_order = KETCH_SORT_DESCEND;
  r.sort_target = KETCH_SORT_KEY;
  r.serializable = serializable;
  return ketch_range(x->c, &r, res);
}

int opx_load_actions(struct opx *x, bool serializable, struct op_action *out, size_t max,
                     size_t *n) {
  *n = 0;
  ketch_result *res = NULL;
  int rc = range_sub(x, "actions/", serializable, max, &res);
  if (rc)
    return rc;
  for (size_t i = 0; i < res->range.n_kvs && *n < max; i++) {
    char err[200];
    const ketch_kv *kv = &res->range.kvs[i];
    if (op_action_decode(kv->value, kv->value_len, &out[*n], err, sizeof err) == 0)
      (*n)++;
    else
      opx_log(x, "warn", "action record %.*s unreadable, skipped error=\"%s\"", (int)kv->key_len,
              kv->key, err);
  }
  ketch_result_free(res);
  return 0;
}

int opx_load_backups(struct opx *x, bool serializable, struct op_backup *out, size_t max,
                     size_t *n) {
  *n = 0;
  ketch_result *res = NULL;
  int rc = range_sub(x, "backups/", serializable, max, &res);
  if (rc)
    return rc;
  for (size_t i = 0; i < res->range.n_kvs && *n < max; i++) {
    char err[200];
    const ketch_kv *kv = &res->range.kvs[i];
    if (op_backup_decode(kv->value, kv->value_len, &out[*n], err, sizeof err) == 0)
      (*n)++;
  }
  ketch_result_free(res);
  return 0;
}

/* put(key, value) under the fence (and, for a new record, only if the key
 * does not exist yet). */
static int fenced_put(struct opx *x, const char *key, const char *value, bool create) {
  ketch_compare cmp[2];
  size_t nc = 0;
  memset(cmp, 0, sizeof cmp);
  if (x->lead_key) {
    cmp[nc].result = KETCH_CMP_EQUAL;
    cmp[nc].target = KETCH_CMP_CREATE;
    cmp[nc].key = x->lead_key;
    cmp[nc].key_len = strlen(x->lead_key);
    cmp[nc].int_value = x->lead_rev;
    nc++;
  }
  if (create) {
    cmp[nc].result = KETCH_CMP_EQUAL;
    cmp[nc].target = KETCH_CMP_CREATE;
    cmp[nc].key = key;
    cmp[nc].key_len = strlen(key);
    cmp[nc].int_value = 0;
    nc++;
  }
  ketch_put_req p;
  memset(&p, 0, sizeof p);
  p.key = key;
  p.key_len = strlen(key);
  p.value = value;
  p.value_len = strlen(value);
  ketch_op op = ketch_op_put(p);
  ketch_txn_req t = {cmp, nc, &op, 1, NULL, 0};
  ketch_result *res = NULL;
  int rc = ketch_txn(x->c, &t, &res);
  if (!rc && !res->txn.succeeded)
    rc = KETCH_ENOTFOUND;
  ketch_result_free(res);
  return rc;
}

int opx_write_action(struct opx *x, struct op_action *a, bool create) {
  char key[256], rest[64], line[4096];
  if (create) {
    struct op_action newest;
    size_t n = 0;
    int rc = opx_load_actions(x, false, &newest, 1, &n);
    if (rc)
      return rc;
    a->seq = n ? newest.seq + 1 : 1;
  }
  snprintf(rest, sizeof rest, "actions/%016" PRIx64, a->seq);
  opx_key(x, rest, key, sizeof key);
  if (op_action_encode(a, line, sizeof line) < 0)
    return KETCH_ETOOLARGE;
  int rc = fenced_put(x, key, line, create);
  if (rc || !create || a->seq <= OPX_KEEP_ACTIONS)
    return rc;
  /* keep the newest OPX_KEEP_ACTIONS records (best effort) */
  char from[256], to[256];
  opx_key(x, "actions/", from, sizeof from);
  snprintf(rest, sizeof rest, "actions/%016" PRIx64, a->seq - OPX_KEEP_ACTIONS);
  opx_key(x, rest, to, sizeof to);
  ketch_delete_req d;
  memset(&d, 0, sizeof d);
  d.key = from;
  d.key_len = strlen(from);
  d.range_end = to;
  d.range_end_len = strlen(to);
  ketch_delete(x->c, &d, NULL);
  return 0;
}

int opx_put_backup(struct opx *x, const struct op_backup *b) {
  char key[512], rest[256], line[2048];
  snprintf(rest, sizeof rest, "backups/%s", b->name);
  opx_key(x, rest, key, sizeof key);
  if (op_backup_encode(b, line, sizeof line) < 0)
    return KETCH_ETOOLARGE;
  return fenced_put(x, key, line, false);
}

int opx_delete_backup(struct opx *x, const char *name) {
  char key[512], rest[256];
  snprintf(rest, sizeof rest, "backups/%s", name);
  opx_key(x, rest, key, sizeof key);
  ketch_delete_req d;
  memset(&d, 0, sizeof d);
  d.key = key;
  d.key_len = strlen(key);
  return ketch_delete(x->c, &d, NULL);
}
