/* tools/bench — ketch-bench, the load generator (first cut: put and range).
 *
 * Shaped like etcd's tools/benchmark: --endpoints --conns --clients --total,
 * subcommands `put [--key-size --val-size --key-space-size --sequential-keys]`
 * and `range KEY [END] [--consistency l|s]`. Closed loop: each client keeps one
 * request outstanding; clients share `conns` libketch handles (pipelined).
 * Latency is measured per request from submit to callback into a log-linear
 * histogram (1 µs .. 100 s, 1% relative precision).
 *
 * Data flow: one poll() over every handle's fd → ketch_process → callbacks
 * record the latency and submit the client's next request. Single-threaded.
 */
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../client/ketch.h"

/* ---- histogram: bucket = (exponent, 128 linear sub-buckets) ---- */
#define SUB 128
#define EXPS 40
struct hist {
  uint64_t b[EXPS][SUB];
  uint64_t n, min_ns, max_ns;
  double sum, sumsq;
};

static void hist_add(struct hist *h, uint64_t ns) {
  uint64_t v = ns / 100; /* 0.1 µs units */
  int e = 0;
  if (v >= SUB) { /* exponent e >= 1 holds [SUB << (e-1), SUB << e) */
    e = 1;
    while ((v >> (e - 1)) >= 2 * SUB && e < EXPS - 1)
      e++;
    v = (v >> (e - 1)) - SUB;
    if (v >= SUB)
      v = SUB - 1;
  }
  h->b[e][v]++;
  h->n++;
  if (!h->min_ns || ns < h->min_ns)
    h->min_ns = ns;
  if (ns > h->max_ns)
    h->max_ns = ns;
  h->sum += (double)ns;
  h->sumsq += (double)ns * (double)ns;
}

static double bucket_ns(int e, int s) {
  double base = e == 0 ? (double)s : (double)(((uint64_t)SUB + (uint64_t)s) << (e - 1));
  return base * 100.0;
}

static double hist_pct(const struct hist *h, double p) {
  uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->n), seen = 0;
  for (int e = 0; e < EXPS; e++)
    for (int s = 0; s < SUB; s++) {
      seen += h->b[e][s];
      if (seen >= want && h->b[e][s])
        return bucket_ns(e, s);
    }
  return (double)h->max_ns;
}

/* ---- the run ---- */

enum { W_PUT, W_RANGE };

struct bench;
struct client {
  struct bench *b;
  ketch_client *h;
  uint64_t started_ns;
};

struct bench {
  int workload;
  ketch_client **conns;
  int n_conns, n_clients;
  long total, issued, done, errors;
  int key_size, val_size;
  long key_space;
  bool sequential, serializable;
  char *range_key, *range_end;
  char *val;
  struct hist hist;
  uint64_t seq;
  unsigned rng;
  long err_by_code[64];
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void issue(struct client *cl);

static void on_done(void *arg, int err, const ketch_result *res) {
  (void)res;
  struct client *cl = arg;
  struct bench *b = cl->b;
  b->done++;
  if (err) {
    b->errors++;
    b->err_by_code[err < 64 ? err : 63]++;
  } else {
    hist_add(&b->hist, now_ns() - cl->started_ns);
  }
  issue(cl);
}

static void issue(struct client *cl) {
  struct bench *b = cl->b;
  if (b->issued >= b->total)
    return;
  b->issued++;
  cl->started_ns = now_ns();
  int rc;
  if (b->workload == W_PUT) {
    char key[256];
    uint64_t k = b->sequential ? b->seq++ % (uint64_t)b->key_space
                               : (uint64_t)rand_r(&b->rng) % (uint64_t)b->key_space;
    snprintf(key, sizeof key, "%0*llu", b->key_size, (unsigned long long)k);
    ketch_put_req r = {.key = key,
                       .key_len = (size_t)b->key_size,
                       .value = b->val,
                       .value_len = (size_t)b->val_size};
    rc = ketch_put_async(cl->h, &r, on_done, cl);
  } else {
    ketch_range_req r = {
        .key = b->range_key, .key_len = strlen(b->range_key), .serializable = b->serializable};
    if (b->range_end) {
      r.range_end = b->range_end;
      r.range_end_len = strlen(b->range_end);
    }
    rc = ketch_range_async(cl->h, &r, on_done, cl);
  }
  if (rc) {
    b->done++;
    b->errors++;
    b->err_by_code[rc < 64 ? rc : 63]++;
  }
}

static void usage(void) {
  fprintf(stderr, "usage: ketch-bench [--endpoints E] [--conns N] [--clients N] [--total N] put "
                  "[--key-size N] [--val-size N] [--key-space-size N] [--sequential-keys]\n"
                  "       ketch-bench [...] range KEY [END] [--consistency l|s]\n");
  exit(2);
}

int main(int argc, char **argv) {
  static struct bench b = {.n_conns = 1,
                           .n_clients = 1,
                           .total = 10000,
                           .key_size = 8,
                           .val_size = 8,
                           .key_space = 1,
                           .rng = 1};
  const char *endpoints = "127.0.0.1:2479";
  bool json = false;
  enum { O_EP = 1, O_CONNS, O_CLIENTS, O_TOTAL, O_KS, O_VS, O_KSP, O_SEQ, O_CONS, O_JSON };
  static const struct option opts[] = {{"endpoints", 1, 0, O_EP},
                                       {"conns", 1, 0, O_CONNS},
                                       {"clients", 1, 0, O_CLIENTS},
                                       {"total", 1, 0, O_TOTAL},
                                       {"key-size", 1, 0, O_KS},
                                       {"val-size", 1, 0, O_VS},
                                       {"key-space-size", 1, 0, O_KSP},
                                       {"sequential-keys", 0, 0, O_SEQ},
                                       {"consistency", 1, 0, O_CONS},
                                       {"json", 0, 0, O_JSON},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    switch (o) {
    case O_EP:
      endpoints = optarg;
      break;
    case O_CONNS:
      b.n_conns = atoi(optarg);
      break;
    case O_CLIENTS:
      b.n_clients = atoi(optarg);
      break;
    case O_TOTAL:
      b.total = atol(optarg);
      break;
    case O_KS:
      b.key_size = atoi(optarg);
      break;
    case O_VS:
      b.val_size = atoi(optarg);
      break;
    case O_KSP:
      b.key_space = atol(optarg);
      break;
    case O_SEQ:
      b.sequential = true;
      break;
    case O_CONS:
      b.serializable = optarg[0] == 's';
      break;
    case O_JSON:
      json = true;
      break;
    default:
      usage();
    }
  }
  if (optind >= argc)
    usage();
  const char *cmd = argv[optind++];
  if (!strcmp(cmd, "put"))
    b.workload = W_PUT;
  else if (!strcmp(cmd, "range")) {
    b.workload = W_RANGE;
    if (optind >= argc)
      usage();
    b.range_key = argv[optind++];
  } else
    usage();
  while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    switch (o) {
    case O_KS:
      b.key_size = atoi(optarg);
      break;
    case O_VS:
      b.val_size = atoi(optarg);
      break;
    case O_KSP:
      b.key_space = atol(optarg);
      break;
    case O_SEQ:
      b.sequential = true;
      break;
    case O_CONS:
      b.serializable = optarg[0] == 's';
      break;
    case O_JSON:
      json = true;
      break;
    default:
      usage();
    }
  }
  if (b.workload == W_RANGE && optind < argc)
    b.range_end = argv[optind++];
  if (b.n_conns < 1 || b.n_clients < 1 || b.total < 1 || b.key_size < 1 || b.key_size > 200 ||
      b.val_size < 0 || b.key_space < 1)
    usage();
  b.val = malloc((size_t)b.val_size + 1);
  memset(b.val, 'v', (size_t)b.val_size);

  b.conns = calloc((size_t)b.n_conns, sizeof *b.conns);
  ketch_options ko;
  ketch_options_init(&ko);
  ko.max_outstanding = b.n_clients + 16;
  ko.request_timeout_ms = 30000;
  for (int i = 0; i < b.n_conns; i++) {
    char err[512];
    if (ketch_open(&b.conns[i], endpoints, &ko, err, sizeof err)) {
      fprintf(stderr, "ketch-bench: %s\n", err);
      return 1;
    }
  }
  struct client *cls = calloc((size_t)b.n_clients, sizeof *cls);
  struct pollfd *pf = calloc((size_t)b.n_conns, sizeof *pf);
  uint64_t t0 = now_ns();
  for (int i = 0; i < b.n_clients; i++) {
    cls[i] = (struct client){&b, b.conns[i % b.n_conns], 0};
    issue(&cls[i]);
  }
  while (b.done < b.total) {
    for (int i = 0; i < b.n_conns; i++)
      pf[i] = (struct pollfd){ketch_fd(b.conns[i]), ketch_events(b.conns[i]), 0};
    poll(pf, (nfds_t)b.n_conns, 100);
    for (int i = 0; i < b.n_conns; i++)
      ketch_process(b.conns[i]);
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  struct hist *h = &b.hist;
  double avg = h->n ? h->sum / (double)h->n : 0;
  double sd = h->n ? sqrt(fmax(0, h->sumsq / (double)h->n - avg * avg)) : 0;
  if (json) {
    printf("{\"workload\":\"%s\",\"clients\":%d,\"conns\":%d,\"total\":%ld,\"ok\":%llu,"
           "\"errors\":%ld,\"seconds\":%.3f,\"rps\":%.1f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
           "\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
           cmd, b.n_clients, b.n_conns, b.total, (unsigned long long)h->n, b.errors, secs,
           (double)h->n / secs, hist_pct(h, 50) / 1e6, hist_pct(h, 90) / 1e6, hist_pct(h, 99) / 1e6,
           hist_pct(h, 99.9) / 1e6, (double)h->max_ns / 1e6);
  } else {
    printf("Summary:\n  Total:\t%.4f secs.\n  Slowest:\t%.4f secs.\n  Fastest:\t%.4f secs.\n"
           "  Average:\t%.4f secs.\n  Stddev:\t%.4f secs.\n  Requests/sec:\t%.4f\n\n",
           secs, (double)h->max_ns / 1e9, (double)h->min_ns / 1e9, avg / 1e9, sd / 1e9,
           (double)h->n / secs);
    printf("Latency distribution:\n");
    static const double ps[] = {10, 25, 50, 75, 90, 95, 99, 99.9};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
      printf("  %g%% in %.4f secs.\n", ps[i], hist_pct(h, ps[i]) / 1e9);
    printf("\nok %llu, errors %ld\n", (unsigned long long)h->n, b.errors);
    for (int i = 0; i < 64; i++)
      if (b.err_by_code[i])
        printf("  %s: %ld\n", ketch_errname(i), b.err_by_code[i]);
  }
  for (int i = 0; i < b.n_conns; i++)
    ketch_close(b.conns[i]);
  free(cls);
  free(pf);
  free(b.conns);
  free(b.val);
  return b.errors ? 1 : 0;
}
