/* tools/bench/servers.h — the servers `ketch-bench compare` starts: fresh
 * ketch and etcd processes on loopback (etcd's flags, which ketch shares),
 * and what is measured about them from outside (CPU, RSS, data dir size).
 * Used by compare.c (workloads side by side) and resources.c (RSS, data dir,
 * restart with many keys). */
#ifndef KT_BENCH_SERVERS_H
#define KT_BENCH_SERVERS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench.h"

struct server {
  pid_t pid;
  int port, peer, tls_port; /* tls_port: with server_tls, the https:// client URL's */
  const char *bin;
  char log[PATH_MAX + 16];
  char dir[PATH_MAX];
  char endpoint[64];     /* with server_tls: "http://127.0.0.1:port" */
  char tls_endpoint[64]; /* with server_tls: "https://127.0.0.1:tls_port" */
};

/* When cert is set (compare --tls), servers started after it serve an
 * https:// client URL beside the http:// one, with this certificate and
 * client certificates verified against client_ca (etcd's flags). */
struct server_tls {
  const char *cert, *key, *client_ca;
};
extern struct server_tls server_tls;
/* Servers started after it is set run with --auto-compaction-mode periodic
 * --auto-compaction-retention server_compaction (both ketch and etcd: the
 * same history kept, so a long run measures a steady state); NULL: off. */
extern const char *server_compaction;
/* Extra flags for ketch members only (compare --ketch-flag), NULL-ended. */
extern const char *server_ketch_flags[9];

/* A free loopback TCP port (bound once and released), -1 if none. */
int free_port(void);
/* A server not started yet: bin, free client and peer ports, data dir `dir`
 * (its log beside it: dir.log). */
void server_init(struct server *s, const char *bin, const char *dir);
/* Starts (or restarts, on the same data dir) member `name` of the cluster
 * `ic` (name=peer-url,...) from s->bin with s's ports, dir and log;
 * s->pid < 0 if it could not be forked. */
void server_start(struct server *s, int t, const char *name, const char *ic);
/* SIGTERM, then SIGKILL after 5 s; waits for it. No-op if not running. */
void server_stop(struct server *s);
/* Is the server answering a linearizable range? Waits at most timeout_s;
 * false at once if the process exits. */
bool wait_ready(int target, const char *endpoint, pid_t pid, double timeout_s);
/* The user + system CPU seconds of n servers so far; -1 if unknown. */
double cluster_cpu_s(struct server *m, int n);
/* Resident set of a process (VmRSS), KiB; -1 if unknown. */
long rss_kb(pid_t pid);
/* Disk space used under dir (allocated blocks), bytes. */
uint64_t du_bytes(const char *dir);
void rm_rf(const char *dir);
/* A workload config for the compare runs: 16 B keys, 256 B values, 10 s timeout. */
void base_cfg(struct bench_cfg *c, int target, const char *endpoint);
/* The loading run: `keys` puts of distinct keys 0..keys-1 in order, 64
 * clients over 16 connections. */
void load_cfg(struct bench_cfg *c, int target, const char *endpoint, long keys);

/* ---- resources.c: the cost of holding N keys, each server alone ---- */
struct resource_figures {
  double load_rps, cpu_per_100k; /* loading: puts/s, server CPU s per 100k puts */
  long rss_kb, rss_restart_kb;   /* once loaded; after the restart */
  double data_dir_mb, restart_s; /* stopped; restart to serving */
};
/* Measures etcd then ketch (bins[T_ETCD], bins[T_KETCH]) with `keys` keys,
 * data dirs under dir (removed after). 0, or -1 with err. */
int resources_measure(const char *dir, const char *const bins[2], long keys,
                      struct resource_figures out[2], char *err, size_t err_len);
/* `"resources":{...}` (no surrounding braces or comma) */
void resources_json(FILE *f, long keys, const struct resource_figures r[2]);
/* The markdown table, with the aims and whether ketch meets them. */
void resources_table(FILE *f, long keys, const struct resource_figures r[2]);

#endif
