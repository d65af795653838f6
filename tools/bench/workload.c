/* tools/bench/workload.c — the next request of each workload. Keys are the key
 * number in zero-padded decimal, key_size characters ("0000000000000042" for
 * 42 at --key-size 16), so `range 0000000000000001` finds a loaded key. A
 * seeded xorshift64* picks random keys: runs are reproducible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../client/ketch.h"
#include "bench.h"

static uint64_t rnd(struct workload_state *w) {
  uint64_t x = w->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  w->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

size_t workload_key(char *out, int key_size, uint64_t k) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)k);
  if (n >= key_size) { /* keep the last key_size digits */
    memcpy(out, tmp + n - key_size, (size_t)key_size);
  } else {
    memset(out, '0', (size_t)(key_size - n));
    memcpy(out + key_size - n, tmp, (size_t)n);
  }
  out[key_size] = 0;
  return (size_t)key_size;
}

int workload_init(struct workload_state *w, const struct bench_cfg *cfg) {
  memset(w, 0, sizeof *w);
  /* generator thread i of n (--threads): its own random stream, and every
   * n-th sequential key / lease starting at i, so n threads together issue
   * what one would */
  w->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)cfg->gen_index * 0xD1B54A32D192ED03ull);
  if (!w->rng)
    w->rng = 1;
  w->val = malloc((size_t)cfg->val_size + 1);
  if (!w->val)
    return -1;
  for (int i = 0; i < cfg->val_size; i++)
    w->val[i] = (char)('a' + i % 26);
  w->val[cfg->val_size] = 0;
  return 0;
}

void workload_free(struct workload_state *w) {
  free(w->val);
  w->val = NULL;
}

/* The next of this generator thread's share of 0, 1, 2...: i, i + n, ... */
static uint64_t next_seq(struct workload_state *w, const struct bench_cfg *cfg) {
  uint64_t n = cfg->gen_count > 1 ? (uint64_t)cfg->gen_count : 1;
  return w->seq++ * n + (uint64_t)cfg->gen_index;
}

static uint64_t next_key(struct workload_state *w, const struct bench_cfg *cfg) {
  if (cfg->sequential)
    return next_seq(w, cfg) % (uint64_t)cfg->key_space;
  return rnd(w) % (uint64_t)cfg->key_space;
}

static bool coin(struct workload_state *w, double p) {
  return (double)(rnd(w) >> 11) * (1.0 / 9007199254740992.0) < p;
}

void workload_next(struct workload_state *w, const struct bench_cfg *cfg, struct bench_op *op) {
  op->n_puts = 0;
  op->lease = op->ttl_s = 0;
  op->end = NULL;
  op->end_len = 0;
  op->limit = 0;
  op->serializable = cfg->serializable;
  op->val = w->val;
  op->val_len = (size_t)cfg->val_size;
  switch (cfg->workload) {
  case W_PUT:
    op->kind = OP_PUT;
    op->is_read = false;
    op->key = w->keybuf[0];
    op->key_len = workload_key(w->keybuf[0], cfg->key_size, next_key(w, cfg));
    break;
  case W_RANGE:
    op->kind = OP_RANGE;
    op->is_read = true;
    op->key = cfg->range_key;
    op->key_len = strlen(cfg->range_key);
    op->limit = cfg->limit;
    if (cfg->range_end) {
      op->end = cfg->range_end;
      op->end_len = strlen(cfg->range_end);
    } else if (cfg->prefix) {
      size_t n = op->key_len < BENCH_MAX_KEY ? op->key_len : BENCH_MAX_KEY;
      op->end_len = ketch_prefix_end(op->key, n, w->endbuf);
      op->end = w->endbuf;
    }
    break;
  case W_TXN_PUT: {
    op->kind = OP_TXN;
    op->is_read = false;
    uint64_t k = next_key(w, cfg);
    op->n_puts = cfg->txn_ops;
    for (int i = 0; i < cfg->txn_ops; i++) { /* consecutive: distinct keys */
      op->keys[i].key = w->keybuf[i];
      op->keys[i].key_len =
          workload_key(w->keybuf[i], cfg->key_size, (k + (uint64_t)i) % (uint64_t)cfg->key_space);
    }
    break;
  }
  case W_TXN_MIXED:
  case W_MIXED: {
    double p_read =
        cfg->workload == W_MIXED ? cfg->read_ratio : cfg->rw_ratio / (cfg->rw_ratio + 1);
    op->is_read = coin(w, p_read);
    op->key = w->keybuf[0];
    op->key_len = workload_key(w->keybuf[0], cfg->key_size, next_key(w, cfg));
    if (cfg->workload == W_MIXED) {
      op->kind = op->is_read ? OP_RANGE : OP_PUT;
    } else {
      op->kind = OP_TXN;
      if (!op->is_read) {
        op->n_puts = 1;
        op->keys[0].key = op->key;
        op->keys[0].key_len = op->key_len;
      }
    }
    break;
  }
  case W_LEASE_GRANT:
  case W_LEASE_KEEPALIVE: /* lease_base + 0, 1, ... in turn */
    op->kind = cfg->workload == W_LEASE_GRANT ? OP_LEASE_GRANT : OP_KEEPALIVE;
    op->is_read = false;
    op->lease = cfg->lease_base + (int64_t)(next_seq(w, cfg) % (uint64_t)cfg->leases);
    op->ttl_s = cfg->lease_ttl_s;
    break;
  }
}
