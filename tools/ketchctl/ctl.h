/* tools/ketchctl/ctl.h — ketchctl, the command-line client, shaped like etcdctl 3.4.
 *
 * Owns: the CLI only. It talks to the cluster through libketch (client/ketch.h)
 * and never includes a server header.
 *
 * Data flow: main.c parses argv (cobra/pflag-like: global and command flags in
 * any order, "--" ends flags), applies KETCHCTL_* environment variables, checks
 * the arguments, opens a ketch_client, sends one request and hands the result to
 * print.c, which is the only place that formats output. txn.c parses the txn
 * command's stdin syntax into ketch_txn_req.
 *
 * Compatibility contract: for the commands ketchctl has, stdout, stderr and the
 * exit code are byte-for-byte etcdctl 3.4's (with "etcdctl" read as "ketchctl"),
 * except where a comment says why not. Exit codes are etcdctl's (CTL_EXIT_*).
 * Server errors print as "Error: etcdserver: <etcd's message>", so scripts that
 * match etcdctl's error text keep working.
 */
#ifndef KETCHCTL_CTL_H
#define KETCHCTL_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../client/ketch.h"

/* etcdctl's exit codes (etcdctl/ctlv3/command/error.go). */
enum {
  CTL_EXIT_OK = 0,
  CTL_EXIT_ERROR = 1,
  CTL_EXIT_BAD_CONNECTION = 2,
  CTL_EXIT_INVALID_INPUT = 3,
  CTL_EXIT_BAD_FEATURE = 4,
  CTL_EXIT_INTERRUPTED = 5,
  CTL_EXIT_BAD_ARGS = 128,
};

enum { CTL_SIMPLE, CTL_JSON, CTL_FIELDS, CTL_TABLE };

/* How results are displayed: set once from the global flags. */
struct ctl_display {
  int format;      /* CTL_SIMPLE .. CTL_TABLE */
  bool hex;        /* --hex: simple output prints keys/values as \xNN */
  bool value_only; /* get --print-value-only */
};
extern struct ctl_display ctl_display;

/* Prints "Error: <formatted message>\n" on stderr and exits with `code`. */
_Noreturn void ctl_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Memory that lives until exit: ctl_alloc() is malloc() whose block is freed
 * at exit (it never returns NULL: exits on failure); ctl_keep() adopts a
 * malloc'd block, ctl_keep_result() a ketch_result, the same way. */
void *ctl_alloc(size_t n);
void *ctl_keep(void *p);
void ctl_keep_result(ketch_result *res);

/* The text etcdctl prints for a failed request: "etcdserver: <message>" for an
 * error the server returned, "context deadline exceeded" when no answer came in
 * time (etcdctl's gRPC deadline). Static or `msg`-backed storage. */
const char *ctl_errtext(int err, const char *msg);

/* ---- print.c: every byte of command output is written here ---- */

/* Each prints one response in ctl_display's format, to stdout. Table output is
 * refused like etcdctl does (after the request ran): exit 4. */
void ctl_print_range(const ketch_header *h, const ketch_range_result *r);
void ctl_print_put(const ketch_header *h, const ketch_put_result *r);
void ctl_print_delete(const ketch_header *h, const ketch_delete_result *r);
void ctl_print_txn(const ketch_header *h, const ketch_txn_result *r);

struct ctl_ep_status {
  const char *endpoint;
  const ketch_result *res; /* a KETCH_OP_STATUS result */
};
struct ctl_ep_health {
  const char *endpoint;
  bool health;
  char took[32];     /* Go's time.Duration text, e.g. "1.634623ms" */
  const char *error; /* "" when healthy */
};
void ctl_print_status(const struct ctl_ep_status *s, size_t n);
/* member list: etcdctl's columns (ID, STATUS, NAME, PEER ADDRS, CLIENT ADDRS,
 * IS LEARNER); ids hex in simple/table, decimal in json/fields. */
void ctl_print_member_list(const ketch_header *h, const ketch_member_list_result *r);
/* The member a remove/update/promote named (the printers show it). */
extern uint64_t ctl_member_id;
void ctl_print_member_change(const ketch_result *res, const char *name, const char *peer_urls);
void ctl_print_health(const struct ctl_ep_health *h, size_t n);

/* ---- maintenance (maint.c runs them, print.c prints) ---- */
struct ctl_ep_hashkv {
  const char *endpoint;
  const ketch_result *res; /* a KETCH_OP_HASH_KV result */
};
/* endpoint hashkv: "ep, hash" / ENDPOINT|HASH table / etcd's JSON (compact
 * revision -1 when never compacted) / fields. */
void ctl_print_hashkv(const struct ctl_ep_hashkv *h, size_t n);
/* alarm list and alarm disarm (table refused, exit 4, as etcdctl). */
void ctl_print_alarms(const ketch_result *res);

/* maint.c: snapshot save, defrag, endpoint hashkv, alarm list / disarm. */
void ctl_run_snapshot_save(int argc, char **argv);
void ctl_run_defrag(int argc, char **argv);
void ctl_run_hashkv(int argc, char **argv);
void ctl_run_alarm_list(int argc, char **argv);
void ctl_run_alarm_disarm(int argc, char **argv);
extern bool ctl_defrag_cluster;
extern int64_t ctl_hashkv_rev;
/* main.c: the endpoints of --endpoints, or with cluster every client URL of
 * the member list (etcdctl's endpointsFromCluster); a client on one. */
int ctl_endpoints(char **out, int max, bool cluster);
bool ctl_endpoint_cluster(void); /* endpoint --cluster */
size_t ctl_endpoint_count(void); /* how many --endpoints were given */
ketch_client *ctl_open_endpoint(const char *endpoint, char *msg, size_t msgcap);

/* lease commands: etcdctl's printers (ids in hex in simple, decimal in
 * json/fields; json flattens the header like clientv3's structs). */
void ctl_print_lease_grant(const ketch_result *res);
void ctl_print_lease_revoke(const ketch_result *res, int64_t id);
void ctl_print_lease_ttl(const ketch_result *res, bool keys);
void ctl_print_lease_list(const ketch_result *res);
void ctl_print_lease_keepalive(const ketch_result *res);
/* One watch delivery (clientv3.WatchResponse): events; progress
 * ("progress notify: REV" first); canceled (the header and nothing else). */
void ctl_print_watch(const ketch_result *res);

/* ---- auth.c: user, role, auth (print.c prints) ---- */
struct ctl_auth_out {
  const ketch_result *res; /* type: the KETCH_OP_* that ran */
  const char *name;        /* the user, or the role for role commands */
  const char *role;        /* user grant-role / revoke-role */
  const char *key;         /* role revoke-permission: the key as given */
  const char *end;         /* and the range end sent (end_len bytes) */
  size_t end_len;
};
void ctl_print_auth(const struct ctl_auth_out *o);
void ctl_run_auth_enable(int argc, char **argv);
void ctl_run_auth_disable(int argc, char **argv);
void ctl_run_auth_status(int argc, char **argv);
void ctl_run_user_add(int argc, char **argv);
void ctl_run_user_delete(int argc, char **argv);
void ctl_run_user_get(int argc, char **argv);
void ctl_run_user_list(int argc, char **argv);
void ctl_run_user_passwd(int argc, char **argv);
void ctl_run_user_grant_role(int argc, char **argv);
void ctl_run_user_revoke_role(int argc, char **argv);
void ctl_run_role_add(int argc, char **argv);
void ctl_run_role_delete(int argc, char **argv);
void ctl_run_role_get(int argc, char **argv);
void ctl_run_role_list(int argc, char **argv);
void ctl_run_role_grant_permission(int argc, char **argv);
void ctl_run_role_revoke_permission(int argc, char **argv);
/* user add / passwd flags, role permission flags (main.c's tables) */
extern bool ctl_user_interactive, ctl_user_no_password, ctl_user_detail;
extern const char *ctl_user_new_password;
extern bool ctl_perm_prefix, ctl_perm_from_key;
/* A password as etcdctl's speakeasy reads it: prompt on stdout, echo off on
 * a terminal, one line from stdin, a newline after. NULL on EOF/error. */
char *ctl_ask_password(const char *prompt);

/* Go's %q of a byte string (strconv.Quote) written to f. */
void ctl_goquote(FILE *f, const char *s, size_t n);
/* Go's time.Duration.String() of ns nanoseconds into buf (>= 32 bytes). */
void ctl_go_duration(char *buf, size_t cap, int64_t ns);
/* go-humanize's Bytes(): 24576 -> "25 kB". */
void ctl_humanize_bytes(char *buf, size_t cap, uint64_t n);

/* ---- txn.c ---- */

/* Reads a txn in etcdctl's syntax from `in` (compares, blank line, success
 * ops, blank line, failure ops, blank line), printing the interactive prompts
 * when `interactive`. Fills *req; the memory stays allocated until exit.
 * Errors exit like etcdctl (exit 3 for malformed input). */
void ctl_txn_read(FILE *in, bool interactive, ketch_txn_req *req);

/* etcdctl's argify(): splits a line into words ("double quoted" with Go
 * escapes, 'single quoted'); the words live until exit. Returns the count. */
int ctl_argify(const char *line, char **argv, int max);

/* Parses one request line of a txn ("put k v --prev-kv", "get a --prefix",
 * "del k"). Defined in main.c, which owns the put/get/del flags. Returns 0, or
 * -1 if the line is not a valid request (the caller reports it). */
int ctl_parse_op(int argc, char **argv, ketch_op *op);

/* Go's strconv.ParseInt(s, base, 64) with Go's error text in err (>= 128
 * bytes). base 0 accepts 0x / 0o / 0b / 0 prefixes. Returns 0 or -1. */
int ctl_parse_int(const char *s, int base, int64_t *out, char *err, size_t errcap);

/* ---- lock.c, elect.c: the concurrency commands ---- */

/* Their flags (owned by main.c's flag table): lock --ttl (seconds, etcdctl's
 * default 10), elect -l/--listen. */
extern int64_t ctl_lock_ttl_s;
extern bool ctl_elect_listen;
/* The client of the global flags (exits like the other commands on error). */
ketch_client *ctl_open_client(void);
/* Another client on the same endpoints and timeouts, or NULL with the reason
 * in msg. The caller closes it. */
ketch_client *ctl_open_extra(char *msg, size_t msgcap);
void ctl_run_lock(int argc, char **argv);
void ctl_run_elect(int argc, char **argv);

/* Shared by lock and elect (lock.c). ctl_hold_begin: if ttl_s > 0 a session
 * lease of ttl_s seconds kept alive (its id is returned; else 0), and
 * SIGINT/SIGTERM taken over by a thread. Until ctl_hold_acquired() — while
 * the caller is blocked in a lock or a campaign — a signal revokes the lease
 * on a second connection (removing the waiting key), prints etcdctl's
 * "Error: context canceled" and exits 1. After it, a signal only sets
 * ctl_hold_signaled(). ctl_hold_wait runs the client's loop until a signal
 * (returns 0) or the session's lease is lost (-1). ctl_hold_end stops the
 * keep-alive and revokes the session's lease. */
int64_t ctl_hold_begin(ketch_client *c, int64_t ttl_s);
void ctl_hold_acquired(void);
bool ctl_hold_signaled(void);
int ctl_hold_wait(ketch_client *c);
/* One turn of the client's loop (at most max_ms), woken early by a signal. */
void ctl_hold_pump(ketch_client *c, int max_ms);
void ctl_hold_end(ketch_client *c);

#endif
