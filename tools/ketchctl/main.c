/* tools/ketchctl/main.c — ketchctl's commands, flags and help (see ctl.h).
 *
 * Flags follow spf13/pflag as etcdctl uses it: --name=value, --name value,
 * -w json, -wjson, bool flags bare or =true/false, flags anywhere among the
 * arguments, "--" ends them. Global flags can also come from KETCHCTL_<NAME>
 * environment variables (dashes as underscores), as ETCDCTL_* for etcdctl.
 * The help text is etcdctl's template (help.go) with Go's tabwriter layout.
 *
 * Order of checks per command, as etcdctl: flags, the command's arguments,
 * environment + output format + client, the request, then output (where
 * "table not supported" and --print-value-only are refused).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define API_VERSION "3.4"
#define MAX_ARGS 256

/* ---- memory kept until exit, freed by an atexit handler ---- */

static void **kept;
static ketch_result **kept_results;
static size_t n_kept, cap_kept, n_kept_results, cap_kept_results;
static ketch_client *the_client;

static void free_kept(void) {
  for (size_t i = 0; i < n_kept_results; i++)
    ketch_result_free(kept_results[i]);
  free(kept_results);
  for (size_t i = 0; i < n_kept; i++)
    free(kept[i]);
  free(kept);
  ketch_close(the_client);
}

static void keep_in(void ***list, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    void **l = realloc(*list, c * sizeof *l);
    if (!l) {
      fputs("Error: out of memory\n", stderr);
      _exit(CTL_EXIT_ERROR);
    }
    *list = l;
    *cap = c;
  }
  (*list)[(*n)++] = p;
}

void *ctl_keep(void *p) {
  if (!p)
    ctl_die(CTL_EXIT_ERROR, "out of memory");
  keep_in(&kept, &n_kept, &cap_kept, p);
  return p;
}

void *ctl_alloc(size_t n) { return ctl_keep(malloc(n ? n : 1)); }

void ctl_keep_result(ketch_result *res) {
  if (res)
    keep_in((void ***)&kept_results, &n_kept_results, &cap_kept_results, res);
}

/* ---- errors ---- */

bool ctl_dying; /* exiting: streams closed by the exit print nothing */

_Noreturn void ctl_die(int code, const char *fmt, ...) {
  va_list ap;
  ctl_dying = true;
  fflush(stdout);
  fputs("Error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

const char *ctl_errtext(int err, const char *msg) {
  static char buf[512];
  const char *text = msg && *msg ? msg : ketch_strerror(err);
  switch (err) {
  case KETCH_EUNAVAILABLE:
    /* Why no endpoint could be reached when TLS is the reason (another CA,
     * an expired certificate, plaintext against TLS...), in the shape of
     * etcdctl's clientv3 warning line, once; other reasons keep etcdctl's
     * exact output. */
    if (msg && strstr(msg, "TLS")) {
      static bool said;
      if (!said) {
        said = true;
        fputs("{\"level\":\"warn\",\"msg\":\"no endpoint available\",\"error\":\"", stderr);
        for (const char *p = msg; *p; p++) {
          if (*p == '"' || *p == '\\')
            fputc('\\', stderr);
          if ((unsigned char)*p >= 0x20)
            fputc(*p, stderr);
        }
        fputs("\"}\n", stderr);
      }
    }
    return "context deadline exceeded";
  case KETCH_ETIMEOUT:
  case KETCH_ECLOSED:
  case KETCH_ECANCELED:
    return "context deadline exceeded"; /* what etcdctl's gRPC deadline says */
  case KETCH_EUNKNOWN:
  case KETCH_EPROTO:
  case KETCH_ENOMEM:
  case KETCH_EBUSY:
  case KETCH_EVERSION:
    return text; /* the library's own failures */
  case KETCH_EKEYEMPTY:
  case KETCH_ETOOLARGE:
  case KETCH_ETOOMANYOPS:
  case KETCH_EDUPKEY:
  case KETCH_ECOMPACTED:
  case KETCH_EFUTUREREV:
  case KETCH_ENOSPACE:
  case KETCH_ELEASENOTFOUND:
  case KETCH_ELEASEEXISTS:
  case KETCH_ENOLEADER:
    text = ketch_strerror(err); /* etcd's exact wording */
    break;
  case KETCH_ENOTFOUND:
    text = "key not found"; /* etcd's ErrKeyNotFound (put --ignore-value/--ignore-lease) */
    break;
  case KETCH_EPERMDENIED:
    if (!strncmp(text, "auth: ", 6))
      return text; /* etcd's maintenance calls: the auth store's own error */
    break;
  }
  snprintf(buf, sizeof buf, "etcdserver: %s", text);
  return buf;
}

/* ---- Go-compatible value parsing ---- */

int ctl_parse_int(const char *s, int base, int64_t *out, char *err, size_t errcap) {
  const char *p = s;
  bool neg = false;
  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  if (base == 0) {
    base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
      base = 16, p += 2;
    else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
      base = 8, p += 2;
    else if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
      base = 2, p += 2;
    else if (p[0] == '0' && p[1])
      base = 8, p += 1;
  }
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  bool range = false;
  if (!*p)
    goto syntax;
  for (; *p; p++) {
    int d = isdigit((unsigned char)*p)   ? *p - '0'
            : isalpha((unsigned char)*p) ? tolower((unsigned char)*p) - 'a' + 10
                                         : 99;
    if (d >= base)
      goto syntax;
    if (v > (limit - (uint64_t)d) / (uint64_t)base)
      range = true;
    else
      v = v * (uint64_t)base + (uint64_t)d;
  }
  if (range) {
    snprintf(err, errcap, "strconv.ParseInt: parsing \"%s\": value out of range", s);
    return -1;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
syntax:
  snprintf(err, errcap, "strconv.ParseInt: parsing \"%s\": invalid syntax", s);
  return -1;
}

/* time.ParseDuration for the forms people type: 2s, 500ms, 1m30s, 1.5s. */
static int parse_duration_ns(const char *s, int64_t *out) {
  static const struct {
    const char *unit;
    double ns;
  } units[] = {{"ns", 1},  {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6},
               {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  const char *p = s;
  double total = 0;
  bool neg = false;
  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  if (!strcmp(p, "0")) {
    *out = 0;
    return 0;
  }
  if (!*p)
    return -1;
  while (*p) {
    char *end;
    if (!isdigit((unsigned char)*p) && *p != '.')
      return -1;
    double v = strtod(p, &end);
    if (end == p)
      return -1;
    p = end;
    size_t best = 0, bi = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      size_t l = strlen(units[i].unit);
      if (!strncmp(p, units[i].unit, l) && l > best)
        best = l, bi = i;
    }
    if (!best)
      return -1;
    total += v * units[bi].ns;
    p += best;
  }
  *out = (int64_t)(neg ? -total : total);
  return 0;
}

/* ---- flags ---- */

enum { FT_BOOL, FT_STR, FT_INT, FT_DUR, FT_LIST };

struct flag {
  const char *name;
  char sh; /* shorthand letter or 0 */
  int type;
  const char *def; /* default, as text */
  const char *usage;
  void *dst; /* bool* / const char** / int64_t* (FT_DUR: nanoseconds) */
  bool changed;
};

static bool help_flag;
static const char *g_endpoints = "127.0.0.1:2479", *g_write_out = "simple";
static int64_t g_dial_ns, g_command_ns;
static bool g_hex;
static const char *g_user, *g_password;
/* TLS, etcdctl's flags: endpoints written https:// use TLS, http:// never;
 * endpoints without a scheme do when a file is given or
 * --insecure-transport=false. */
static const char *g_cacert = "", *g_cert = "", *g_key = "";
static bool g_insecure_skip_verify, g_insecure_transport = true;

/* --discovery-srv: the endpoints are the targets of _ketch-client[-ssl]._tcp
 * records of the domain (net/srv.h), resolved with c-ares; --dns-servers is
 * ketch's (a resolver other than /etc/resolv.conf). */
static const char *g_discovery_srv = "", *g_discovery_srv_name = "", *g_dns_servers = "";

/* --resolver-prefix: the endpoints are the native proxies registered under
 * the prefix in the cluster at --endpoints (ketch_resolve_prefix). */
static const char *g_resolver_prefix = "";

static struct flag global_flags[] = {
    {"command-timeout", 0, FT_DUR, "5s",
     "timeout for short running command (excluding dial timeout)", &g_command_ns, false},
    {"cacert", 0, FT_STR, "",
     "verify certificates of TLS-enabled secure servers using this CA bundle", &g_cacert, false},
    {"cert", 0, FT_STR, "", "identify secure client using this TLS certificate file", &g_cert,
     false},
    {"discovery-srv", 'd', FT_STR, "",
     "domain name to query for SRV records describing cluster endpoints", &g_discovery_srv, false},
    {"discovery-srv-name", 0, FT_STR, "", "service name to query when using DNS discovery",
     &g_discovery_srv_name, false},
    {"dns-servers", 0, FT_STR, "", "DNS servers (host:port,...) for --discovery-srv",
     &g_dns_servers, false},
    {"dial-timeout", 0, FT_DUR, "2s", "dial timeout for client connections", &g_dial_ns, false},
    {"endpoints", 0, FT_LIST, "127.0.0.1:2479", "ketch endpoints (host:port, comma separated)",
     &g_endpoints, false},
    {"hex", 0, FT_BOOL, "false", "print byte strings as hex encoded strings", &g_hex, false},
    {"password", 0, FT_STR, "",
     "password for authentication (if this option is used, --user option shouldn't include "
     "password)",
     &g_password, false},
    {"user", 0, FT_STR, "",
     "username[:password] for authentication (prompt if password is not supplied)", &g_user, false},
    {"insecure-skip-tls-verify", 0, FT_BOOL, "false",
     "skip server certificate verification (CAUTION: this option should be enabled only for "
     "testing purposes)",
     &g_insecure_skip_verify, false},
    {"insecure-transport", 0, FT_BOOL, "true", "disable transport security for client connections",
     &g_insecure_transport, false},
    {"key", 0, FT_STR, "", "identify secure client using this TLS key file", &g_key, false},
    {"resolver-prefix", 0, FT_STR, "",
     "use the proxies registered under this prefix in the cluster at --endpoints (ketch gateway "
     "--resolver-prefix)",
     &g_resolver_prefix, false},
    {"write-out", 'w', FT_STR, "simple", "set the output format (fields, json, simple, table)",
     &g_write_out, false},
    {0},
};

/* endpoint's persistent flag (etcdctl: --cluster on the endpoint group) */
static bool ep_cluster;
static struct flag endpoint_flags[] = {
    {"cluster", 0, FT_BOOL, "false", "use all endpoints from the cluster member list", &ep_cluster,
     false},
    {0},
};

/* lock and elect (lock.c, elect.c) */
int64_t ctl_lock_ttl_s;
bool ctl_elect_listen;
static struct flag lock_flags[] = {
    {"ttl", 0, FT_INT, "10", "timeout for session", &ctl_lock_ttl_s, false}, {0}};
static struct flag elect_flags[] = {
    {"listen", 'l', FT_BOOL, "false", "observation mode", &ctl_elect_listen, false}, {0}};

/* user, role (auth.c) */
static struct flag user_add_flags[] = {
    {"interactive", 0, FT_BOOL, "true", "Read password from stdin instead of interactive terminal",
     &ctl_user_interactive, false},
    {"new-user-password", 0, FT_STR, "", "Supply password from the command line flag",
     &ctl_user_new_password, false},
    {"no-password", 0, FT_BOOL, "false", "Create a user without password (CN based auth only)",
     &ctl_user_no_password, false},
    {0},
};
static struct flag user_passwd_flags[] = {
    {"interactive", 0, FT_BOOL, "true",
     "If true, read password from stdin instead of interactive terminal", &ctl_user_interactive,
     false},
    {0},
};
static struct flag user_get_flags[] = {
    {"detail", 0, FT_BOOL, "false", "Show permissions of roles granted to the user",
     &ctl_user_detail, false},
    {0},
};
static struct flag role_grant_flags[] = {
    {"from-key", 0, FT_BOOL, "false",
     "grant a permission of keys that are greater than or equal to the given key using byte "
     "compare",
     &ctl_perm_from_key, false},
    {"prefix", 0, FT_BOOL, "false", "grant a prefix permission", &ctl_perm_prefix, false},
    {0},
};
static struct flag role_revoke_flags[] = {
    {"from-key", 0, FT_BOOL, "false",
     "revoke a permission of keys that are greater than or equal to the given key using byte "
     "compare",
     &ctl_perm_from_key, false},
    {"prefix", 0, FT_BOOL, "false", "revoke a prefix permission", &ctl_perm_prefix, false},
    {0},
};

static struct flag help_flags[] = {{"help", 'h', FT_BOOL, "false", NULL, &help_flag, false}, {0}};

/* maintenance (maint.c) */
bool ctl_defrag_cluster;
int64_t ctl_hashkv_rev;
static struct flag defrag_flags[] = {{"cluster", 0, FT_BOOL, "false",
                                      "use all endpoints from the cluster member list",
                                      &ctl_defrag_cluster, false},
                                     {0}};
static struct flag hashkv_flags[] = {{"rev", 0, FT_INT, "0",
                                      "maximum revision to hash (default: all revisions)",
                                      &ctl_hashkv_rev, false},
                                     {0}};

/* Sets a flag from text; on error writes pflag's message into err. */
static int flag_set(struct flag *f, const char *val, bool via_short, char *err, size_t errcap) {
  char why[200] = "";
  switch (f->type) {
  case FT_BOOL: {
    static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const fl[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (int i = 0; i < 6; i++) {
      if (!strcmp(val, t[i]) || !strcmp(val, fl[i])) {
        *(bool *)f->dst = !strcmp(val, t[i]);
        goto ok;
      }
    }
    snprintf(why, sizeof why, "strconv.ParseBool: parsing \"%s\": invalid syntax", val);
    break;
  }
  case FT_STR:
    *(const char **)f->dst = val;
    goto ok;
  case FT_LIST: {
    /* pflag's StringSlice: the first use replaces the default, later ones add */
    const char *old = *(const char **)f->dst;
    if (!f->changed) {
      *(const char **)f->dst = val;
    } else {
      char *j = ctl_alloc(strlen(old) + strlen(val) + 2);
      sprintf(j, "%s,%s", old, val);
      *(const char **)f->dst = j;
    }
    goto ok;
  }
  case FT_INT:
    if (ctl_parse_int(val, 0, f->dst, why, sizeof why) == 0)
      goto ok;
    break;
  case FT_DUR:
    if (parse_duration_ns(val, f->dst) == 0)
      goto ok;
    snprintf(why, sizeof why, "time: invalid duration \"%s\"", val);
    break;
  }
  if (via_short)
    snprintf(err, errcap, "invalid argument \"%s\" for \"-%c, --%s\" flag: %s", val, f->sh, f->name,
             why);
  else
    snprintf(err, errcap, "invalid argument \"%s\" for \"--%s\" flag: %s", val, f->name, why);
  return -1;
ok:
  f->changed = true;
  return 0;
}

static void flags_reset(struct flag *fs) {
  char err[256];
  for (; fs && fs->name; fs++) {
    if (fs->type == FT_LIST)
      *(const char **)fs->dst = fs->def;
    else
      flag_set(fs, fs->def, false, err, sizeof err);
    fs->changed = false;
  }
}

static struct flag *flag_find(struct flag **sets, const char *name, size_t len, char sh) {
  for (; *sets; sets++)
    for (struct flag *f = *sets; f->name; f++)
      if (sh ? f->sh == sh : strlen(f->name) == len && !strncmp(f->name, name, len))
        return f;
  return NULL;
}

/* Parses args against the flag sets (NULL-terminated list), leaving the
 * positional arguments in pos. Returns 0, or -1 with pflag's message in err. */
static int flags_parse(struct flag **sets, int argc, char **argv, char **pos, int *npos, char *err,
                       size_t errcap) {
  bool dashdash = false;
  *npos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (dashdash || a[0] != '-' || !a[1]) {
      if (*npos < MAX_ARGS - 1)
        pos[(*npos)++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      dashdash = true;
      continue;
    }
    if (a[1] == '-') {
      const char *name = a + 2, *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      struct flag *f = flag_find(sets, name, len, 0);
      if (!f) {
        snprintf(err, errcap, "unknown flag: --%.*s", (int)len, name);
        return -1;
      }
      const char *val = eq ? eq + 1 : f->type == FT_BOOL ? "true" : NULL;
      if (!val) {
        if (i + 1 >= argc) {
          snprintf(err, errcap, "flag needs an argument: %s", a);
          return -1;
        }
        val = argv[++i];
      }
      if (flag_set(f, val, false, err, errcap))
        return -1;
      continue;
    }
    for (const char *p = a + 1; *p; p++) {
      struct flag *f = flag_find(sets, NULL, 0, *p);
      if (!f) {
        snprintf(err, errcap, "unknown shorthand flag: '%c' in %s", *p, a);
        return -1;
      }
      const char *val;
      bool last = true; /* the value used up the rest of this argument */
      if (p[1] == '=') {
        val = p + 2;
      } else if (f->type == FT_BOOL) {
        val = "true";
        last = false;
      } else if (p[1]) {
        val = p + 1;
      } else if (i + 1 < argc) {
        val = argv[++i];
      } else {
        snprintf(err, errcap, "flag needs an argument: '%c' in %s", *p, a);
        return -1;
      }
      if (flag_set(f, val, true, err, errcap))
        return -1;
      if (last)
        break;
    }
  }
  pos[*npos] = NULL;
  return 0;
}

/* ---- commands ---- */

struct cmd {
  const char *name; /* "get", "endpoint status" */
  const char *use;  /* the words after the program name, without [flags] */
  const char *short_help;
  const char *long_help;
  struct flag *flags;
  void (*run)(int argc, char **argv);
};

static void run_put(int argc, char **argv);
static void run_get(int argc, char **argv);
static void run_del(int argc, char **argv);
static void run_txn(int argc, char **argv);
static void run_compaction(int argc, char **argv);
static void run_status(int argc, char **argv);
static void run_health(int argc, char **argv);
static void run_version(int argc, char **argv);
static void run_member_list(int argc, char **argv);
static void run_member_add(int argc, char **argv);
static void run_member_remove(int argc, char **argv);
static void run_member_update(int argc, char **argv);
static void run_member_promote(int argc, char **argv);
static void run_move_leader(int argc, char **argv);
static void run_lease_grant(int argc, char **argv);
static void run_lease_revoke(int argc, char **argv);
static void run_lease_timetolive(int argc, char **argv);
static void run_lease_list(int argc, char **argv);
static void run_lease_keepalive(int argc, char **argv);
static void run_watch(int argc, char **argv);
static void run_discovery_new(int argc, char **argv);

/* discovery new (net/discovery.h: the registry of a discovery token) */
static int64_t disc_size;
static const char *disc_token = "";
static struct flag discovery_new_flags[] = {
    {"size", 0, FT_INT, "3", "number of members of the new cluster", &disc_size, false},
    {"token", 0, FT_STR, "", "use this token instead of a random one", &disc_token, false},
    {0},
};

/* put */
static const char *put_lease;
static bool put_prev_kv, put_ignore_value, put_ignore_lease;
static struct flag put_flags[] = {
    {"ignore-lease", 0, FT_BOOL, "false", "updates the key using its current lease",
     &put_ignore_lease, false},
    {"ignore-value", 0, FT_BOOL, "false", "updates the key using its current value",
     &put_ignore_value, false},
    {"lease", 0, FT_STR, "0", "lease ID (in hexadecimal) to attach to the key", &put_lease, false},
    {"prev-kv", 0, FT_BOOL, "false", "return the previous key-value pair before modification",
     &put_prev_kv, false},
    {0},
};

/* get */
static const char *get_consistency, *get_order, *get_sort_by;
static int64_t get_limit, get_rev, get_min_mod, get_max_mod, get_min_create, get_max_create;
static bool get_prefix, get_from_key, get_keys_only, get_count_only, get_value_only;
static struct flag get_flags[] = {
    {"consistency", 0, FT_STR, "l", "Linearizable(l) or Serializable(s)", &get_consistency, false},
    {"count-only", 0, FT_BOOL, "false", "Get only the count", &get_count_only, false},
    {"from-key", 0, FT_BOOL, "false",
     "Get keys that are greater than or equal to the given key using byte compare", &get_from_key,
     false},
    {"keys-only", 0, FT_BOOL, "false", "Get only the keys", &get_keys_only, false},
    {"limit", 0, FT_INT, "0", "Maximum number of results", &get_limit, false},
    {"max-create-rev", 0, FT_INT, "0", "Only keys created at or before this revision",
     &get_max_create, false},
    {"max-mod-rev", 0, FT_INT, "0", "Only keys last modified at or before this revision",
     &get_max_mod, false},
    {"min-create-rev", 0, FT_INT, "0", "Only keys created at or after this revision",
     &get_min_create, false},
    {"min-mod-rev", 0, FT_INT, "0", "Only keys last modified at or after this revision",
     &get_min_mod, false},
    {"order", 0, FT_STR, "", "Order of results; ASCEND or DESCEND (ASCEND by default)", &get_order,
     false},
    {"prefix", 0, FT_BOOL, "false", "Get keys with matching prefix", &get_prefix, false},
    {"print-value-only", 0, FT_BOOL, "false",
     "Only write values when using the \"simple\" output format", &get_value_only, false},
    {"rev", 0, FT_INT, "0", "Specify the kv revision", &get_rev, false},
    {"sort-by", 0, FT_STR, "", "Sort target; CREATE, KEY, MODIFY, VALUE, or VERSION", &get_sort_by,
     false},
    {0},
};

/* del */
static bool del_prefix, del_prev_kv, del_from_key;
static struct flag del_flags[] = {
    {"from-key", 0, FT_BOOL, "false",
     "delete keys that are greater than or equal to the given key using byte compare",
     &del_from_key, false},
    {"prefix", 0, FT_BOOL, "false", "delete keys with matching prefix", &del_prefix, false},
    {"prev-kv", 0, FT_BOOL, "false", "return deleted key-value pairs", &del_prev_kv, false},
    {0},
};

/* lease timetolive / keep-alive */
static bool lease_keys, lease_once;
static struct flag lease_ttl_flags[] = {
    {"keys", 0, FT_BOOL, "false", "Get keys attached to this lease", &lease_keys, false},
    {0},
};
static struct flag lease_ka_flags[] = {
    {"once", 0, FT_BOOL, "false",
     "Resets the keep-alive time to its original value and exits immediately", &lease_once, false},
    {0},
};

/* watch */
static bool watch_interactive, watch_prefix, watch_prev_kv;
static int64_t watch_rev;
static struct flag watch_flags[] = {
    {"interactive", 'i', FT_BOOL, "false", "Interactive mode", &watch_interactive, false},
    {"prefix", 0, FT_BOOL, "false", "Watch on a prefix if prefix is set", &watch_prefix, false},
    {"prev-kv", 0, FT_BOOL, "false", "get the previous key-value pair before the event happens",
     &watch_prev_kv, false},
    {"rev", 0, FT_INT, "0", "Revision to start watching", &watch_rev, false},
    {0},
};

static bool txn_interactive;
static struct flag txn_flags[] = {
    {"interactive", 'i', FT_BOOL, "false", "Input transaction in interactive mode",
     &txn_interactive, false},
    {0},
};

static bool compact_physical;
static struct flag compaction_flags[] = {
    {"physical", 0, FT_BOOL, "false",
     "'true' to wait for compaction to physically remove all old revisions", &compact_physical,
     false},
    {0},
};

/* member add / update */
static const char *member_peer_urls;
static bool member_learner;
static struct flag member_add_flags[] = {
    {"learner", 0, FT_BOOL, "false", "indicates if the new member is raft learner", &member_learner,
     false},
    {"peer-urls", 0, FT_STR, "", "comma separated peer URLs for the new member.", &member_peer_urls,
     false},
    {0},
};
static struct flag member_update_flags[] = {
    {"peer-urls", 0, FT_STR, "", "comma separated peer URLs for the updated member.",
     &member_peer_urls, false},
    {0},
};

static const char put_long[] =
    "\nPuts the given key into the store.\n\n"
    "When <value> begins with '-', <value> is interpreted as a flag.\n"
    "Insert '--' for workaround:\n\n"
    "$ put <key> -- <value>\n"
    "$ put -- <key> <value>\n\n"
    "If <value> isn't given as a command line argument and '--ignore-value' is not specified,\n"
    "this command tries to read the value from standard input.\n\n"
    "If <lease> isn't given as a command line argument and '--ignore-lease' is not specified,\n"
    "this command tries to read the value from standard input.\n\n"
    "For example,\n"
    "$ cat file | put <key>\n"
    "will store the content of the file to <key>.\n";

static const struct cmd commands[] = {
    {"alarm disarm", "alarm disarm", "Disarms all alarms", NULL, NULL, ctl_run_alarm_disarm},
    {"alarm list", "alarm list", "Lists all alarms", NULL, NULL, ctl_run_alarm_list},
    {"auth disable", "auth disable", "Disables authentication", NULL, NULL, ctl_run_auth_disable},
    {"auth enable", "auth enable", "Enables authentication", NULL, NULL, ctl_run_auth_enable},
    {"auth status", "auth status", "Returns authentication status", NULL, NULL,
     ctl_run_auth_status},
    {"compaction", "compaction [options] <revision>", "Compacts the event history in ketch", NULL,
     compaction_flags, run_compaction},
    {"defrag", "defrag", "Defragments the storage of the ketch members with given endpoints",
     "ketch keeps its store in memory: defrag waits until compacted history is freed, returns "
     "freed memory to the OS\nand writes a snapshot so the WAL before the previous snapshot is "
     "purged.\n",
     defrag_flags, ctl_run_defrag},
    {"del", "del [options] <key> [range_end]",
     "Removes the specified key or range of keys [key, range_end)", NULL, del_flags, run_del},
    {"discovery new", "discovery new [--size N] [--token T]",
     "Creates a discovery token on this cluster and prints it",
     "Sets /_ketch/registry/<token>/_config/size for members started with --discovery-endpoints\n"
     "(these endpoints) and --discovery-token <token>. Fails if the token exists.\n",
     discovery_new_flags, run_discovery_new},
    {"elect", "elect <election-name> [proposal]", "Observes and participates in leader election",
     NULL, elect_flags, ctl_run_elect},
    {"endpoint health", "endpoint health",
     "Checks the healthiness of endpoints specified in `--endpoints` flag", NULL, NULL, run_health},
    {"endpoint hashkv", "endpoint hashkv",
     "Prints the KV history hash for each endpoint in --endpoints", NULL, hashkv_flags,
     ctl_run_hashkv},
    {"endpoint status", "endpoint status",
     "Prints out the status of endpoints specified in `--endpoints` flag",
     "When --write-out is set to simple, this command prints out comma-separated status lists "
     "for each endpoint.\nThe items in the lists are endpoint, ID, version, db size, is leader, "
     "is learner, raft term, raft index, raft applied index, errors.\n",
     NULL, run_status},
    {"get", "get [options] <key> [range_end]", "Gets the key or a range of keys", NULL, get_flags,
     run_get},
    {"help", "help [command]", "Help about any command", NULL, NULL, NULL},
    {"lease grant", "lease grant <ttl>", "Creates leases", NULL, NULL, run_lease_grant},
    {"lease keep-alive", "lease keep-alive [options] <leaseID>", "Keeps leases alive (renew)", NULL,
     lease_ka_flags, run_lease_keepalive},
    {"lease list", "lease list", "List all active leases", NULL, NULL, run_lease_list},
    {"lease revoke", "lease revoke <leaseID>", "Revokes leases", NULL, NULL, run_lease_revoke},
    {"lease timetolive", "lease timetolive <leaseID> [options]", "Get lease information", NULL,
     lease_ttl_flags, run_lease_timetolive},
    {"lock", "lock <lockname> [exec-command arg1 arg2 ...]", "Acquires a named lock", NULL,
     lock_flags, ctl_run_lock},
    {"member add", "member add <memberName> [options]", "Adds a member into the cluster", NULL,
     member_add_flags, run_member_add},
    {"member list", "member list", "Lists all members in the cluster",
     "When --write-out is set to simple, this command prints out comma-separated member lists for "
     "each endpoint.\nThe items in the lists are ID, Status, Name, Peer Addrs, Client Addrs, Is "
     "Learner.\n",
     NULL, run_member_list},
    {"member promote", "member promote <memberID>", "Promotes a non-voting member in the cluster",
     "\nPromotes a non-voting learner member to a voting one in the cluster.\n", NULL,
     run_member_promote},
    {"member remove", "member remove <memberID>", "Removes a member from the cluster", NULL, NULL,
     run_member_remove},
    {"member update", "member update <memberID> [options]", "Updates a member in the cluster", NULL,
     member_update_flags, run_member_update},
    {"move-leader", "move-leader <transferee-member-id>",
     "Transfers leadership to another ketch cluster member.", NULL, NULL, run_move_leader},
    {"role add", "role add <role name>", "Adds a new role", NULL, NULL, ctl_run_role_add},
    {"role delete", "role delete <role name>", "Deletes a role", NULL, NULL, ctl_run_role_delete},
    {"role get", "role get <role name>", "Gets detailed information of a role", NULL, NULL,
     ctl_run_role_get},
    {"role grant-permission",
     "role grant-permission [options] <role name> <permission type> <key> [endkey]",
     "Grants a key to a role", NULL, role_grant_flags, ctl_run_role_grant_permission},
    {"role list", "role list", "Lists all roles", NULL, NULL, ctl_run_role_list},
    {"role revoke-permission", "role revoke-permission <role name> <key> [endkey]",
     "Revokes a key from a role", NULL, role_revoke_flags, ctl_run_role_revoke_permission},
    {"snapshot save", "snapshot save <filename>",
     "Stores a ketch node backend snapshot to a given file",
     "The file is a ketch snapshot (snap/FORMAT.md): `ketchutl snapshot restore <filename> "
     "--data-dir <dir>`\nmakes a new member's data dir from it.\n",
     NULL, ctl_run_snapshot_save},
    {"put", "put [options] <key> <value> (<value> can also be given from stdin)",
     "Puts the given key into the store", put_long, put_flags, run_put},
    {"txn", "txn [options]", "Txn processes all the requests in one transaction", NULL, txn_flags,
     run_txn},
    {"user add", "user add <user name or user:password> [options]", "Adds a new user", NULL,
     user_add_flags, ctl_run_user_add},
    {"user delete", "user delete <user name>", "Deletes a user", NULL, NULL, ctl_run_user_delete},
    {"user get", "user get <user name> [options]", "Gets detailed information of a user", NULL,
     user_get_flags, ctl_run_user_get},
    {"user grant-role", "user grant-role <user name> <role name>", "Grants a role to a user", NULL,
     NULL, ctl_run_user_grant_role},
    {"user list", "user list", "Lists all users", NULL, NULL, ctl_run_user_list},
    {"user passwd", "user passwd <user name> [options]", "Changes password of user", NULL,
     user_passwd_flags, ctl_run_user_passwd},
    {"user revoke-role", "user revoke-role <user name> <role name>", "Revokes a role from a user",
     NULL, NULL, ctl_run_user_revoke_role},
    {"version", "version", "Prints the version of ketchctl", NULL, NULL, run_version},
    {"watch", "watch [options] [key or prefix] [range_end] [--] [exec-command arg1 arg2 ...]",
     "Watches events stream on keys or prefixes", NULL, watch_flags, run_watch},
    {0},
};

/* ---- help, in etcdctl's template and tabwriter layout ---- */

/* Go's tabwriter (tabwidth 8, padding 1, padchar '\t') on lines of the form
 * indent + cell + '\t' + text: cells padded with tabs to one common column. */
static void tab_block(const char *indent, const char *const *cells, const char *const *texts,
                      int n) {
  size_t w = 0;
  for (int i = 0; i < n; i++)
    if (strlen(cells[i]) > w)
      w = strlen(cells[i]);
  w = (w + 1 + 7) / 8 * 8;
  for (int i = 0; i < n; i++) {
    size_t tabs = (w - strlen(cells[i]) + 7) / 8;
    printf("%s%s", indent, cells[i]);
    while (tabs--)
      putchar('\t');
    printf("%s\n", texts[i]);
  }
}

static void flag_usages(struct flag **sets) {
  const struct flag *all[64];
  int n = 0;
  for (; *sets; sets++)
    for (struct flag *f = *sets; f->name && n < 64; f++)
      all[n++] = f;
  for (int i = 1; i < n; i++) /* pflag lists flags sorted by name */
    for (int j = i; j > 0 && strcmp(all[j - 1]->name, all[j]->name) > 0; j--) {
      const struct flag *t = all[j];
      all[j] = all[j - 1];
      all[j - 1] = t;
    }
  static char cellbuf[64][128];
  const char *cells[64], *texts[64];
  for (int i = 0; i < n; i++) {
    const struct flag *f = all[i];
    char lead[32];
    if (f->sh)
      snprintf(lead, sizeof lead, "  -%c, --", f->sh);
    else
      snprintf(lead, sizeof lead, "      --");
    const char *fmt = f->type == FT_BOOL   ? "%s%s[=%s]"
                      : f->type == FT_STR  ? "%s%s=\"%s\""
                      : f->type == FT_LIST ? "%s%s=[%s]"
                                           : "%s%s=%s";
    snprintf(cellbuf[i], sizeof cellbuf[i], fmt, lead, f->name, f->def);
    cells[i] = cellbuf[i];
    texts[i] = f->usage;
  }
  tab_block("", cells, texts, n);
}

static void usage(const struct cmd *c) {
  if (!c) {
    printf("NAME:\n\tketchctl - A simple command line client for ketch.\n\n"
           "USAGE:\n\tketchctl [flags]\n\nVERSION:\n\t%s\n\nAPI VERSION:\n\t%s\n\n\nCOMMANDS:\n",
           ketch_version(), API_VERSION);
    const char *cells[64], *texts[64];
    int n = 0;
    for (const struct cmd *k = commands; k->name && n < 64; k++, n++)
      cells[n] = k->name, texts[n] = k->short_help;
    tab_block("\t", cells, texts, n);
    struct flag *sets[] = {global_flags, help_flags, NULL};
    help_flags[0].usage = "help for ketchctl";
    printf("\nOPTIONS:\n");
    flag_usages(sets);
    printf("\n");
    return;
  }
  const char *leaf = strrchr(c->name, ' ');
  leaf = leaf ? leaf + 1 : c->name;
  printf("NAME:\n\t%s - %s\n\nUSAGE:\n\tketchctl %s [flags]\n", c->name, c->short_help, c->use);
  if (c->long_help) {
    printf("\nDESCRIPTION:\n");
    const char *s = c->long_help, *e = s + strlen(s);
    while (s < e && strchr("\n\t ", *s))
      s++;
    while (e > s && strchr("\n\t ", e[-1]))
      e--;
    while (s < e) {
      const char *nl = memchr(s, '\n', (size_t)(e - s));
      if (!nl)
        nl = e;
      printf("\t%.*s\n", (int)(nl - s), s);
      s = nl + 1;
    }
  }
  static char help_usage[64];
  snprintf(help_usage, sizeof help_usage, "help for %s", leaf);
  help_flags[0].usage = help_usage;
  struct flag *local[] = {help_flags, c->flags, NULL};
  if (!c->flags)
    local[1] = NULL;
  printf("\nOPTIONS:\n");
  flag_usages(local);
  struct flag *global[] = {global_flags, NULL, NULL};
  if (!strncmp(c->name, "endpoint ", 9))
    global[1] = endpoint_flags;
  printf("\nGLOBAL OPTIONS:\n");
  flag_usages(global);
  printf("\n");
}

/* A command group's help page (etcdctl's): its subcommands by name,
 * the group's own flags (extra, may be NULL) and the global ones. */
static void usage_group(const char *group, const char *what, struct flag *extra) {
  printf("NAME:\n\t%s - %s\n\n"
         "USAGE:\n\tketchctl %s <subcommand> [flags]\n\nAPI VERSION:\n\t%s\n\n\nCOMMANDS:\n",
         group, what, group, API_VERSION);
  const char *cells[16], *texts[16];
  int n = 0;
  size_t gl = strlen(group);
  for (const struct cmd *k = commands; k->name && n < 16; k++)
    if (!strncmp(k->name, group, gl) && k->name[gl] == ' ') {
      int at = n++; /* cobra lists subcommands sorted by name */
      for (; at > 0 && strcmp(cells[at - 1], k->name + gl + 1) > 0; at--) {
        cells[at] = cells[at - 1];
        texts[at] = texts[at - 1];
      }
      cells[at] = k->name + gl + 1;
      texts[at] = k->short_help;
    }
  tab_block("\t", cells, texts, n);
  static char help_text[64];
  snprintf(help_text, sizeof help_text, "help for %s", group);
  help_flags[0].usage = help_text;
  struct flag *local[] = {extra ? extra : help_flags, extra ? help_flags : NULL, NULL};
  struct flag *global[] = {global_flags, NULL};
  printf("\nOPTIONS:\n");
  flag_usages(local);
  printf("\nGLOBAL OPTIONS:\n");
  flag_usages(global);
  printf("\n");
}

static bool is_group(const char *w) {
  return !strcmp(w, "endpoint") || !strcmp(w, "member") || !strcmp(w, "lease") ||
         !strcmp(w, "alarm") || !strcmp(w, "snapshot") || !strcmp(w, "auth") ||
         !strcmp(w, "user") || !strcmp(w, "role") || !strcmp(w, "discovery");
}

/* group: "endpoint", "member", "lease" or NULL */
static void show_usage(const struct cmd *cmd, const char *group) {
  if (cmd)
    usage(cmd);
  else if (group && !strcmp(group, "endpoint"))
    usage_group("endpoint", "Endpoint related commands", endpoint_flags);
  else if (group && !strcmp(group, "lease"))
    usage_group("lease", "Lease related commands", NULL);
  else if (group && !strcmp(group, "alarm"))
    usage_group("alarm", "Alarm related commands", NULL);
  else if (group && !strcmp(group, "snapshot"))
    usage_group("snapshot", "Manages ketch node snapshots", NULL);
  else if (group && !strcmp(group, "auth"))
    usage_group("auth", "Enable or disable authentication", NULL);
  else if (group && !strcmp(group, "user"))
    usage_group("user", "User related commands", NULL);
  else if (group && !strcmp(group, "role"))
    usage_group("role", "Role related commands", NULL);
  else if (group)
    usage_group("member", "Membership related commands", NULL);
  else
    usage(NULL);
}

/* ---- environment, output format, client ---- */

static void apply_env(void) {
  extern char **environ;
  for (char **e = environ; *e; e++) {
    if (strncmp(*e, "KETCHCTL_", 9))
      continue;
    const char *eq = strchr(*e, '=');
    if (!eq)
      continue;
    char name[64];
    size_t n = 0;
    for (const char *p = *e + 9; p < eq && n < sizeof name - 1; p++)
      name[n++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
    name[n] = 0;
    struct flag *sets[] = {global_flags, NULL};
    struct flag *f = flag_find(sets, name, n, 0);
    if (!f) {
      fprintf(stderr, "Warning: unrecognized environment variable %s\n", *e);
      continue;
    }
    if (f->changed)
      ctl_die(CTL_EXIT_ERROR,
              "conflicting environment variable \"%.*s\" is shadowed by corresponding "
              "command-line flag (either unset environment variable or disable flag)",
              (int)(eq - *e), *e);
    char err[300];
    if (flag_set(f, eq + 1, false, err, sizeof err))
      ctl_die(CTL_EXIT_BAD_ARGS, "%.*s: %s", (int)(eq - *e), *e, err);
    f->changed = false; /* still "not given on the command line" */
  }
}

static void init_display(void) {
  static const char *const names[] = {"simple", "json", "fields", "table"};
  apply_env();
  ctl_display.hex = g_hex;
  for (int i = 0; i < 4; i++) {
    if (!strcmp(g_write_out, names[i])) {
      ctl_display.format = i;
      return;
    }
  }
  if (!strcmp(g_write_out, "protobuf")) /* etcdctl's wording for a format it lacks */
    ctl_die(CTL_EXIT_BAD_FEATURE, "protobuf not supported as output format");
  ctl_die(CTL_EXIT_BAD_FEATURE, "unsupported output format");
}

static void auth_cfg_read(const char **user, const char **password);
/* etcdctl's authCfgFromCmd: --user name[:password], --password, or a
 * prompt. NULL user: none. */
static void auth_cfg(const char **user, const char **password) {
  static bool done;
  static const char *u_done, *p_done;
  if (done) {
    *user = u_done;
    *password = p_done;
    return;
  }
  done = true;
  auth_cfg_read(user, password);
  u_done = *user;
  p_done = *password;
}

static void auth_cfg_read(const char **user, const char **password) {
  *user = *password = NULL;
  if (!g_user || !*g_user)
    return;
  if (g_password && *g_password) {
    *user = g_user;
    *password = g_password;
    return;
  }
  char *u = ctl_alloc(strlen(g_user) + 1);
  strcpy(u, g_user);
  char *colon = strchr(u, ':');
  *user = u;
  if (colon) {
    *colon = 0;
    *password = colon + 1;
  } else {
    *password = ctl_ask_password("Password: ");
    if (!*password)
      ctl_die(CTL_EXIT_ERROR, "failed during password entry");
  }
}

/* The options every client of the command line opens with. */
static void client_options(ketch_options *o) {
  ketch_options_init(o);
  o->dial_timeout_ms = (int)(g_dial_ns / 1000000) > 0 ? (int)(g_dial_ns / 1000000) : 1;
  o->request_timeout_ms = (int)(g_command_ns / 1000000) > 0 ? (int)(g_command_ns / 1000000) : 1;
  /* etcdctl dials lazily: an unreachable endpoint shows up as the request's
   * "context deadline exceeded" after --command-timeout. */
  o->nonblocking_open = true;
  auth_cfg(&o->user, &o->password); /* every connection authenticates */
  o->tls = !g_insecure_transport;
  o->ca_file = *g_cacert ? g_cacert : NULL;
  o->cert_file = *g_cert ? g_cert : NULL;
  o->key_file = *g_key ? g_key : NULL;
  o->insecure_skip_verify = g_insecure_skip_verify;
}

/* A client on `endpoints`, or NULL with the reason in msg. */
static ketch_client *open_endpoints(const char *endpoints, char *msg, size_t msgcap) {
  ketch_options o;
  client_options(&o);
  ketch_client *c = NULL;
  msg[0] = 0;
  int err = ketch_open(&c, endpoints, &o, msg, msgcap);
  if (err && !msg[0])
    snprintf(msg, msgcap, "%s", ketch_strerror(err));
  return err ? NULL : c;
}

/* As clientv3.New with credentials: authenticates before the first request
 * (auth disabled on the cluster: carries on without). */
static void authenticate(ketch_client *c) {
  const char *user, *password;
  auth_cfg(&user, &password);
  if (!user)
    return;
  int err = ketch_authenticate(c, user, password);
  if (err && err != KETCH_EAUTHNOTENABLED)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", ctl_errtext(err, ketch_errmsg(c)));
}

static ketch_client *open_client(void) {
  char msg[512];
  init_display();
  the_client = open_endpoints(g_endpoints, msg, sizeof msg);
  if (!the_client)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", msg);
  authenticate(the_client);
  return the_client;
}

ketch_client *ctl_open_client(void) { return open_client(); }
ketch_client *ctl_open_extra(char *msg, size_t msgcap) {
  return open_endpoints(g_endpoints, msg, msgcap);
}

static void check(ketch_client *c, int err, ketch_result *res) {
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
}

/* ---- request builders (shared by the commands and txn lines) ---- */

static char *read_all_stdin(size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf)
      ctl_die(CTL_EXIT_ERROR, "out of memory");
    size_t r = fread(buf + n, 1, cap - n, stdin);
    n += r;
    if (r == 0)
      break;
    if (n == cap)
      buf = realloc(buf, cap *= 2);
  }
  *len = n;
  return ctl_keep(buf);
}

static void put_op(int argc, char **argv, ketch_put_req *req) {
  static const char need[] = "put command needs 1 argument and input from stdin or 2 arguments";
  memset(req, 0, sizeof *req);
  if (argc == 0)
    ctl_die(CTL_EXIT_BAD_ARGS, need);
  if (put_ignore_value && argc > 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "put command needs only 1 argument when 'ignore-value' is set");
  req->key = argv[0];
  req->key_len = strlen(argv[0]);
  if (!put_ignore_value) {
    if (argc > 1) {
      req->value = argv[1];
      req->value_len = strlen(argv[1]);
    } else {
      req->value = read_all_stdin(&req->value_len);
      if (!req->value_len)
        ctl_die(CTL_EXIT_BAD_ARGS, need);
    }
  }
  char err[200];
  if (ctl_parse_int(put_lease, 16, &req->lease, err, sizeof err))
    ctl_die(CTL_EXIT_BAD_ARGS, "bad lease ID (%s), expecting ID in Hex", err);
  req->prev_kv = put_prev_kv;
  req->ignore_value = put_ignore_value;
  req->ignore_lease = put_ignore_lease;
}

static void upper(char *dst, const char *s, size_t cap) {
  size_t i = 0;
  for (; s[i] && i < cap - 1; i++)
    dst[i] = (char)toupper((unsigned char)s[i]);
  dst[i] = 0;
}

static void get_op(int argc, char **argv, ketch_range_req *req) {
  memset(req, 0, sizeof *req);
  if (argc == 0)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "get command needs one argument as key and an optional argument as range_end");
  if (get_prefix && get_from_key)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "`--prefix` and `--from-key` cannot be set at the same time, choose one");
  if (get_keys_only && get_count_only)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "`--keys-only` and `--count-only` cannot be set at the same time, choose one");
  if (!strcmp(get_consistency, "s"))
    req->serializable = true;
  else if (strcmp(get_consistency, "l")) {
    fflush(stdout);
    fputs("Error: unknown consistency flag ", stderr);
    ctl_goquote(stderr, get_consistency, strlen(get_consistency));
    fputc('\n', stderr);
    exit(CTL_EXIT_BAD_FEATURE);
  }
  req->key = argv[0];
  req->key_len = strlen(argv[0]);
  if (argc > 1) {
    if (get_prefix || get_from_key)
      ctl_die(CTL_EXIT_BAD_ARGS, "too many arguments, only accept one argument when `--prefix` "
                                 "or `--from-key` is set");
    req->range_end = argv[1];
    req->range_end_len = strlen(argv[1]);
  }
  req->limit = get_limit;
  if (get_rev > 0)
    req->revision = get_rev;
  char order[64], target[64];
  upper(order, get_order, sizeof order);
  upper(target, get_sort_by, sizeof target);
  if (!strcmp(order, "ASCEND"))
    req->sort_order = KETCH_SORT_ASCEND;
  else if (!strcmp(order, "DESCEND"))
    req->sort_order = KETCH_SORT_DESCEND;
  else if (order[0])
    ctl_die(CTL_EXIT_BAD_FEATURE, "bad sort order %s", get_order);
  static const char *const targets[] = {[KETCH_SORT_KEY] = "KEY",
                                        [KETCH_SORT_VERSION] = "VERSION",
                                        [KETCH_SORT_CREATE] = "CREATE",
                                        [KETCH_SORT_MOD] = "MODIFY",
                                        [KETCH_SORT_VALUE] = "VALUE"};
  req->sort_target = -1;
  for (int i = 0; i < 5; i++)
    if (!strcmp(target, targets[i]))
      req->sort_target = i;
  if (!target[0])
    req->sort_target = KETCH_SORT_KEY;
  else if (req->sort_target < 0)
    ctl_die(CTL_EXIT_BAD_FEATURE, "bad sort target %s", get_sort_by);
  /* clientv3.WithSort: ascending by key is the natural order (no sort); any
   * other target without an order sorts ascending (etcd's server rule). */
  if (req->sort_target == KETCH_SORT_KEY && req->sort_order == KETCH_SORT_ASCEND)
    req->sort_order = KETCH_SORT_NONE;
  if (req->sort_target != KETCH_SORT_KEY && req->sort_order == KETCH_SORT_NONE)
    req->sort_order = KETCH_SORT_ASCEND;
  req->prefix = get_prefix;
  req->from_key = get_from_key;
  req->keys_only = get_keys_only;
  req->count_only = get_count_only;
  req->min_mod_revision = get_min_mod;
  req->max_mod_revision = get_max_mod;
  req->min_create_revision = get_min_create;
  req->max_create_revision = get_max_create;
}

static void del_op(int argc, char **argv, ketch_delete_req *req) {
  memset(req, 0, sizeof *req);
  if (argc == 0 || argc > 2)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "del command needs one argument as key and an optional argument as range_end");
  if (del_prefix && del_from_key)
    ctl_die(CTL_EXIT_BAD_ARGS,
            "`--prefix` and `--from-key` cannot be set at the same time, choose one");
  req->key = argv[0];
  req->key_len = strlen(argv[0]);
  if (argc > 1) {
    if (del_prefix || del_from_key)
      ctl_die(CTL_EXIT_BAD_ARGS, "too many arguments, only accept one argument when `--prefix` "
                                 "or `--from-key` is set");
    req->range_end = argv[1];
    req->range_end_len = strlen(argv[1]);
  }
  req->prefix = del_prefix;
  req->from_key = del_from_key;
  req->prev_kv = del_prev_kv;
}

int ctl_parse_op(int argc, char **argv, ketch_op *op) {
  struct flag *fl = !strcmp(argv[0], "put")   ? put_flags
                    : !strcmp(argv[0], "get") ? get_flags
                    : !strcmp(argv[0], "del") ? del_flags
                                              : NULL;
  if (!fl)
    return -1;
  flags_reset(fl);
  help_flag = false;
  struct flag *sets[] = {fl, help_flags, NULL};
  char *pos[MAX_ARGS], err[300];
  int npos;
  if (flags_parse(sets, argc - 1, argv + 1, pos, &npos, err, sizeof err) || help_flag)
    return -1;
  memset(op, 0, sizeof *op);
  if (fl == put_flags) {
    op->type = KETCH_OP_PUT;
    put_op(npos, pos, &op->put);
  } else if (fl == get_flags) {
    op->type = KETCH_OP_RANGE;
    get_op(npos, pos, &op->range);
  } else {
    op->type = KETCH_OP_DELETE;
    del_op(npos, pos, &op->del);
  }
  return 0;
}

/* ---- the commands ---- */

static void run_discovery_new(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "discovery new takes no arguments");
  if (disc_size < 1 || disc_size > 16)
    ctl_die(CTL_EXIT_BAD_ARGS, "--size must be from 1 to 16");
  char token[40];
  if (*disc_token) {
    snprintf(token, sizeof token, "%.32s", disc_token);
  } else {
    uint8_t r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
      ctl_die(CTL_EXIT_ERROR, "cannot read random bytes");
    for (int i = 0; i < 16; i++)
      snprintf(token + 2 * i, 3, "%02x", r[i]);
  }
  char key[128], val[24];
  snprintf(key, sizeof key, "/_ketch/registry/%s/_config/size", token);
  snprintf(val, sizeof val, "%lld", (long long)disc_size);
  ketch_compare cmp = {
      .result = KETCH_CMP_EQUAL, .target = KETCH_CMP_CREATE, .key = key, .key_len = strlen(key)};
  ketch_op put = ketch_op_put(
      (ketch_put_req){.key = key, .key_len = strlen(key), .value = val, .value_len = strlen(val)});
  ketch_txn_req t = {.compare = &cmp, .n_compare = 1, .success = &put, .n_success = 1};
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_txn(c, &t, &res);
  check(c, err, res);
  if (!res->txn.succeeded)
    ctl_die(CTL_EXIT_ERROR, "discovery token %s already exists", token);
  printf("%s\n", token);
}

static void run_put(int argc, char **argv) {
  ketch_put_req req;
  put_op(argc, argv, &req);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_put(c, &req, &res);
  check(c, err, res);
  ctl_print_put(&res->header, &res->put);
}

static void run_get(int argc, char **argv) {
  ketch_range_req req;
  get_op(argc, argv, &req);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_range(c, &req, &res);
  check(c, err, res);
  if (get_count_only && ctl_display.format != CTL_FIELDS)
    ctl_die(CTL_EXIT_BAD_ARGS, "--count-only is only for `--write-out=fields`");
  if (get_value_only) {
    if (ctl_display.format != CTL_SIMPLE)
      ctl_die(CTL_EXIT_BAD_ARGS, "print-value-only is only for `--write-out=simple`");
    ctl_display.value_only = true;
  }
  ctl_print_range(&res->header, &res->range);
}

static void run_del(int argc, char **argv) {
  ketch_delete_req req;
  del_op(argc, argv, &req);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_delete(c, &req, &res);
  check(c, err, res);
  ctl_print_delete(&res->header, &res->del);
}

static void run_txn(int argc, char **argv) {
  (void)argv;
  if (argc != 0)
    ctl_die(CTL_EXIT_BAD_ARGS, "txn command does not accept argument");
  ketch_client *c = open_client();
  ketch_txn_req req;
  ctl_txn_read(stdin, txn_interactive, &req);
  ketch_result *res = NULL;
  int err = ketch_txn(c, &req, &res);
  check(c, err, res);
  ctl_print_txn(&res->header, &res->txn);
}

static void run_compaction(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "compaction command needs 1 argument");
  int64_t rev;
  char why[200];
  if (ctl_parse_int(argv[0], 10, &rev, why, sizeof why))
    ctl_die(CTL_EXIT_ERROR, "%s", why);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_compact(c, rev, compact_physical, &res);
  check(c, err, res);
  printf("compacted revision %" PRId64 "\n", rev); /* every -w format prints this */
}

/* The comma-separated endpoint list, each trimmed (etcdctl's endpoint
 * status/health keep the spaces and then fail to dial " host:port"). */
static int split_endpoints(char **out, int max) {
  char *copy = ctl_keep(strdup(g_endpoints)), *save = NULL;
  int n = 0;
  for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*t))
      t++;
    char *e = t + strlen(t);
    while (e > t && isspace((unsigned char)e[-1]))
      *--e = 0;
    out[n++] = t;
  }
  return n;
}

/* endpoint status/health: --endpoints, or with --cluster every client URL
 * of the member list the --endpoints give (etcdctl's endpointsFromCluster). */
static int endpoints_for(char **out, int max) {
  if (!ep_cluster)
    return split_endpoints(out, max);
  char msg[512];
  ketch_client *c = open_endpoints(g_endpoints, msg, sizeof msg);
  if (!c)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", msg);
  ketch_result *res = NULL;
  int err = ketch_member_list(c, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "failed to fetch endpoints from etcd cluster member list: %s",
            ctl_errtext(err, ketch_errmsg(c)));
  ketch_close(c);
  int n = 0;
  for (size_t i = 0; i < res->member_list.n_members; i++) {
    const ketch_member *m = &res->member_list.members[i];
    for (size_t k = 0; k < m->n_client_urls && n < max; k++)
      out[n++] = (char *)m->client_urls[k];
  }
  return n;
}

int ctl_endpoints(char **out, int max, bool cluster) {
  bool saved = ep_cluster;
  ep_cluster = cluster;
  int n = endpoints_for(out, max);
  ep_cluster = saved;
  return n;
}
bool ctl_endpoint_cluster(void) { return ep_cluster; }
size_t ctl_endpoint_count(void) {
  char *eps[64];
  return (size_t)split_endpoints(eps, 64);
}
ketch_client *ctl_open_endpoint(const char *endpoint, char *msg, size_t msgcap) {
  init_display();
  return open_endpoints(endpoint, msg, msgcap);
}

static void run_status(int argc, char **argv) {
  (void)argc, (void)argv;
  init_display();
  char *eps[64];
  int n = endpoints_for(eps, 64), ok = 0;
  static struct ctl_ep_status st[64];
  bool failed = false;
  for (int i = 0; i < n; i++) {
    char msg[512];
    ketch_client *c = open_endpoints(eps[i], msg, sizeof msg);
    ketch_result *res = NULL;
    int err = c ? ketch_status(c, &res) : KETCH_EINVAL;
    ctl_keep_result(res);
    if (err) {
      fprintf(stderr, "Failed to get the status of endpoint %s (%s)\n", eps[i],
              c ? ctl_errtext(err, ketch_errmsg(c)) : msg);
      failed = true;
    } else {
      st[ok].endpoint = eps[i];
      st[ok++].res = res;
    }
    ketch_close(c);
  }
  ctl_print_status(st, (size_t)ok);
  exit(failed ? CTL_EXIT_ERROR : CTL_EXIT_OK);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_health(int argc, char **argv) {
  (void)argc, (void)argv;
  init_display();
  char *eps[64];
  int n = split_endpoints(eps, 64);
  static struct ctl_ep_health h[64];
  bool failed = false;
  if (ep_cluster)
    n = endpoints_for(eps, 64);
  for (int i = 0; i < n; i++) {
    char msg[512];
    ketch_client *c = open_endpoints(eps[i], msg, sizeof msg);
    /* as etcdctl: a linearizable read of the key "health" */
    ketch_range_req req = {.key = "health", .key_len = 6};
    ketch_result *res = NULL;
    int64_t t0 = now_ns();
    int err = c ? ketch_range(c, &req, &res) : KETCH_EINVAL;
    h[i].endpoint = eps[i];
    ctl_go_duration(h[i].took, sizeof h[i].took, now_ns() - t0);
    h[i].health = err == 0;
    h[i].error = err ? ctl_keep(strdup(c ? ctl_errtext(err, ketch_errmsg(c)) : msg)) : "";
    failed |= err != 0;
    ketch_result_free(res);
    ketch_close(c);
  }
  ctl_print_health(h, (size_t)n);
  if (failed)
    ctl_die(CTL_EXIT_ERROR, "unhealthy cluster");
}

static void run_member_list(int argc, char **argv) {
  (void)argc, (void)argv;
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_member_list(c, &res);
  check(c, err, res);
  ctl_print_member_list(&res->header, &res->member_list);
}

static int parse_hex_id(const char *s, uint64_t *out, char *err, size_t cap);

uint64_t ctl_member_id;

/* --peer-urls split at commas (etcdctl: "member peer urls not provided";
 * clientv3's URL check). Returns how many; v holds them. */
static size_t member_urls(const char **v, size_t cap) {
  if (!member_peer_urls || !*member_peer_urls)
    ctl_die(CTL_EXIT_BAD_ARGS, "member peer urls not provided");
  char *all = ctl_keep(strdup(member_peer_urls));
  size_t n = 0;
  for (char *p = strtok(all, ","); p && n < cap; p = strtok(NULL, ",")) {
    static const char *const schemes[] = {"http://", "https://", "unix://", "unixs://"};
    bool ok = false;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
      ok |= !strncmp(p, schemes[i], strlen(schemes[i]));
    if (!ok)
      ctl_die(CTL_EXIT_ERROR, "URL scheme must be http, https, unix, or unixs: %s", p);
    v[n++] = p;
  }
  return n;
}

/* etcdctl's member ID argument. */
static uint64_t member_id_arg(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "member ID is not provided");
  char why[300];
  if (parse_hex_id(argv[0], &ctl_member_id, why, sizeof why))
    ctl_die(CTL_EXIT_BAD_ARGS, "bad member ID arg (%s), expecting ID in Hex", why);
  return ctl_member_id;
}

/* The end of member add/remove/update/promote: err from the call (taken
 * before res is read: a call's arguments have no evaluation order), then
 * etcdctl's output. */
static void member_change_done(ketch_client *c, int err, ketch_result *res, const char *name,
                               const char *peer_urls) {
  check(c, err, res);
  ctl_print_member_change(res, name, peer_urls);
}

static void run_member_add(int argc, char **argv) {
  if (argc < 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "member name not provided");
  if (argc > 1) {
    char ev[1024] = "too many arguments";
    for (int i = 0; i < argc; i++)
      if (!strncasecmp(argv[i], "http", 4)) {
        size_t l = strlen(ev);
        snprintf(ev + l, sizeof ev - l, ", did you mean --peer-urls=%s", argv[i]);
      }
    ctl_die(CTL_EXIT_BAD_ARGS, "%s", ev);
  }
  const char *urls[64];
  size_t n = member_urls(urls, 64);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_member_add(c, urls, n, member_learner, &res);
  member_change_done(c, err, res, argv[0], member_peer_urls);
}

static void run_member_remove(int argc, char **argv) {
  uint64_t id = member_id_arg(argc, argv);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_member_remove(c, id, &res);
  member_change_done(c, err, res, NULL, NULL);
}

static void run_member_update(int argc, char **argv) {
  uint64_t id = member_id_arg(argc, argv);
  const char *urls[64];
  size_t n = member_urls(urls, 64);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_member_update(c, id, urls, n, &res);
  member_change_done(c, err, res, NULL, NULL);
}

static void run_member_promote(int argc, char **argv) {
  uint64_t id = member_id_arg(argc, argv);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_member_promote(c, id, &res);
  member_change_done(c, err, res, NULL, NULL);
}

/* Go's strconv.ParseUint(s, 16, 64). */
static int parse_hex_id(const char *s, uint64_t *out, char *err, size_t cap) {
  uint64_t v = 0;
  bool range = false;
  if (!*s) {
    snprintf(err, cap, "strconv.ParseUint: parsing \"\": invalid syntax");
    return -1;
  }
  for (const char *p = s; *p; p++) {
    int d = isdigit((unsigned char)*p)           ? *p - '0'
            : (*p >= 'a' && *p <= 'f')           ? *p - 'a' + 10
            : (*p >= 'A' && *p <= 'F')           ? *p - 'A' + 10
            : (*p == '_' && p != s && p[1] != 0) ? -2
                                                 : -1;
    if (d == -1 || d == -2) {
      snprintf(err, cap, "strconv.ParseUint: parsing \"%s\": invalid syntax", s);
      return -1;
    }
    if (v >> 60)
      range = true;
    v = v << 4 | (uint64_t)d;
  }
  if (range) {
    snprintf(err, cap, "strconv.ParseUint: parsing \"%s\": value out of range", s);
    return -1;
  }
  *out = v;
  return 0;
}

/* etcdctl: find the leader among --endpoints with a status call each, then
 * ask it to move leadership. */
static void run_move_leader(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "move-leader command needs 1 argument");
  uint64_t target;
  char why[300];
  if (parse_hex_id(argv[0], &target, why, sizeof why))
    ctl_die(CTL_EXIT_BAD_ARGS, "%s", why);
  init_display();
  char *eps[64];
  int n = split_endpoints(eps, 64);
  ketch_client *leader = NULL;
  uint64_t leader_id = 0;
  for (int i = 0; i < n && !leader; i++) {
    char msg[512];
    ketch_client *c = open_endpoints(eps[i], msg, sizeof msg);
    if (!c)
      ctl_die(CTL_EXIT_ERROR, "%s", msg);
    ketch_result *res = NULL;
    int err = ketch_status(c, &res);
    ctl_keep_result(res);
    if (err)
      ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(c)));
    if (res->status.leader && res->header.member_id == res->status.leader) {
      leader = c;
      leader_id = res->status.leader;
    } else {
      ketch_close(c);
    }
  }
  if (!leader) {
    char list[2048] = "";
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof list; i++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? " " : "", eps[i]);
    ctl_die(CTL_EXIT_BAD_ARGS, "no leader endpoint given at [%s]", list);
  }
  the_client = leader;
  ketch_result *res = NULL;
  int err = ketch_move_leader(leader, target, &res);
  ctl_keep_result(res);
  /* A transfer that times out on the member (ETIMEOUT "request timed out,
   * leader transfer took too long") prints what etcdctl prints then: etcd
   * waits for the request's deadline, so etcdctl's own deadline fires first
   * ("context deadline exceeded"). */
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", ctl_errtext(err, ketch_errmsg(leader)));
  if (ctl_display.format == CTL_JSON)
    printf("{}\n"); /* etcd's MoveLeaderResponse carries no header */
  else
    printf("Leadership transferred from %" PRIx64 " to %" PRIx64 "\n", leader_id, target);
}

/* ---- lease ---- */

/* etcdctl's leaseFromArgs: a hex id. */
static int64_t lease_arg(const char *s) {
  int64_t id;
  char why[200];
  if (ctl_parse_int(s, 16, &id, why, sizeof why))
    ctl_die(CTL_EXIT_BAD_ARGS, "bad lease ID arg (%s), expecting ID in Hex", why);
  return id;
}

static void run_lease_grant(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "lease grant command needs TTL argument");
  int64_t ttl;
  char why[200];
  if (ctl_parse_int(argv[0], 10, &ttl, why, sizeof why))
    ctl_die(CTL_EXIT_BAD_ARGS, "bad TTL (%s)", why);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_lease_grant(c, ttl, 0, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "failed to grant lease (%s)", ctl_errtext(err, ketch_errmsg(c)));
  ctl_print_lease_grant(res);
}

static void run_lease_revoke(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "lease revoke command needs 1 argument");
  int64_t id = lease_arg(argv[0]);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_lease_revoke(c, id, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "failed to revoke lease (%s)", ctl_errtext(err, ketch_errmsg(c)));
  ctl_print_lease_revoke(res, id);
}

static void run_lease_timetolive(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "lease timetolive command needs lease ID as argument");
  int64_t id = lease_arg(argv[0]);
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_lease_timetolive(c, id, lease_keys, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", ctl_errtext(err, ketch_errmsg(c)));
  ctl_print_lease_ttl(res, lease_keys);
}

static void run_lease_list(int argc, char **argv) {
  (void)argc, (void)argv;
  ketch_client *c = open_client();
  ketch_result *res = NULL;
  int err = ketch_lease_leases(c, &res);
  ctl_keep_result(res);
  if (err)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", ctl_errtext(err, ketch_errmsg(c)));
  ctl_print_lease_list(res);
}

/* Runs the handle's loop until *done (watch and keep-alive streams); with
 * interactive, stdin lines go to on_line. */
static void stream_loop(ketch_client *c, const bool *done, void (*on_line)(ketch_client *, char *));

/* etcdctl refuses table output at the first response; from a callback we
 * only note it (exiting there would close the handle inside its callback). */
static bool table_refused;
static bool refuse_table_in_cb(bool *done) {
  if (ctl_display.format != CTL_TABLE)
    return false;
  table_refused = *done = true;
  return true;
}
static void die_if_table_refused(void) {
  if (table_refused)
    ctl_die(CTL_EXIT_BAD_FEATURE, "table not supported as output format");
}

static bool ka_done;
static void ka_print(void *arg, int err, const ketch_result *res) {
  (void)arg;
  if (!err && res->lease.ttl > 0 && refuse_table_in_cb(&ka_done))
    return;
  if (err || res->lease.ttl <= 0) {
    ka_done = true; /* clientv3 closes the channel: lease gone or lost */
    return;
  }
  ctl_print_lease_keepalive(res);
  fflush(stdout);
}

static void run_lease_keepalive(int argc, char **argv) {
  if (argc != 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "lease keep-alive command needs lease ID as argument");
  int64_t id = lease_arg(argv[0]);
  ketch_client *c = open_client();
  if (lease_once) {
    ketch_result *res = NULL;
    int err = ketch_lease_keepalive_once(c, id, &res);
    ctl_keep_result(res);
    if (!err && res->lease.ttl <= 0) /* clientv3's KeepAliveOnce: ErrLeaseNotFound */
      err = KETCH_ELEASENOTFOUND;
    if (err)
      ctl_die(CTL_EXIT_BAD_CONNECTION, "%s",
              ctl_errtext(err, err == KETCH_ELEASENOTFOUND ? NULL : ketch_errmsg(c)));
    ctl_print_lease_keepalive(res);
    return;
  }
  int err = ketch_lease_keepalive_start(c, id, ka_print, NULL);
  if (err)
    ctl_die(CTL_EXIT_BAD_CONNECTION, "%s", ctl_errtext(err, ketch_errmsg(c)));
  stream_loop(c, &ka_done, NULL);
  die_if_table_refused();
  if (ctl_display.format == CTL_SIMPLE)
    printf("lease %016" PRIx64 " expired or revoked.\n", (uint64_t)id);
}

/* ---- watch ---- */

static bool watch_done, watch_in_interactive;

static void watch_print(void *arg, int err, const ketch_result *res) {
  (void)arg;
  if (res->watch.created)
    return; /* clientv3 does not hand `created` to the channel */
  if (refuse_table_in_cb(&watch_done))
    return;
  if (res->watch.canceled) {
    if (!err || ctl_dying)
      return;
    fflush(stdout);
    fprintf(stderr, "watch was canceled (%s)\n", ctl_errtext(err, res->message));
    ctl_print_watch(res);
    if (!watch_in_interactive)
      watch_done = true; /* the channel closed: etcdctl exits */
    return;
  }
  ctl_print_watch(res);
}

/* etcdctl's getWatchChan: args are key [range_end]. Returns NULL or why not. */
static const char *watch_open(ketch_client *c, int argc, char **argv) {
  if (argc < 1)
    return "bad number of arguments";
  ketch_watch_req req;
  memset(&req, 0, sizeof req);
  req.key = argv[0];
  req.key_len = strlen(argv[0]);
  if (argc >= 2) {
    if (watch_prefix)
      return "`range_end` and `--prefix` are mutually exclusive";
    req.range_end = argv[1];
    req.range_end_len = strlen(argv[1]);
  }
  req.prefix = watch_prefix;
  req.prev_kv = watch_prev_kv;
  req.start_revision = watch_rev > 0 ? watch_rev : 0;
  uint64_t h;
  int err = ketch_watch(c, &req, watch_print, NULL, &h);
  return err ? ctl_keep(strdup(ctl_errtext(err, ketch_errmsg(c)))) : NULL;
}

/* One line of `watch -i` (etcdctl's watchInteractiveFunc). */
static void watch_line(ketch_client *c, char *l) {
  char *args[MAX_ARGS];
  int n = ctl_argify(l, args, MAX_ARGS - 1);
  if (n < 1) {
    fprintf(stderr, "Invalid command: %s (watch and progress supported)\n", l);
    return;
  }
  if (!strcmp(args[0], "progress")) {
    ketch_watch_progress(c);
    return;
  }
  if (strcmp(args[0], "watch")) {
    fprintf(stderr, "Invalid command %s (only support watch)\n", l);
    return;
  }
  if (n < 2) {
    fprintf(stderr, "Invalid command %s (command type or key is not provided)\n", l);
    return;
  }
  flags_reset(watch_flags);
  struct flag *sets[] = {watch_flags, help_flags, NULL};
  char *pos[MAX_ARGS], err[400];
  int npos;
  if (flags_parse(sets, n - 1, args + 1, pos, &npos, err, sizeof err))
    ctl_die(CTL_EXIT_BAD_ARGS, "%s", err);
  const char *why = watch_open(c, npos, pos);
  if (why)
    fprintf(stderr, "Invalid command %s (%s)\n", l, why);
}

static void stream_loop(ketch_client *c, const bool *done,
                        void (*on_line)(ketch_client *, char *)) {
  static char line[65536];
  size_t used = 0;
  while (!*done) {
    struct pollfd p[2] = {{ketch_fd(c), ketch_events(c), 0}, {on_line ? 0 : -1, POLLIN, 0}};
    if (poll(p, 2, ketch_timeout_ms(c)) < 0 && errno != EINTR)
      ctl_die(CTL_EXIT_ERROR, "poll: %s", strerror(errno));
    if (on_line && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = read(0, line + used, sizeof line - 1 - used);
      if (r <= 0 && !(r < 0 && errno == EINTR))
        ctl_die(CTL_EXIT_INVALID_INPUT, "Error reading watch request line: EOF");
      used += r > 0 ? (size_t)r : 0;
      char *nl;
      while ((nl = memchr(line, '\n', used))) {
        *nl = 0;
        on_line(c, line);
        used -= (size_t)(nl + 1 - line);
        memmove(line, nl + 1, used);
      }
      if (used == sizeof line - 1)
        ctl_die(CTL_EXIT_INVALID_INPUT, "watch request line too long");
    }
    ketch_process(c);
  }
}

static void run_watch(int argc, char **argv) {
  ketch_client *c;
  if (watch_interactive) {
    c = open_client();
    watch_in_interactive = true;
    stream_loop(c, &watch_done, watch_line);
    die_if_table_refused();
    return;
  }
  if (argc < 1)
    ctl_die(CTL_EXIT_BAD_ARGS, "bad number of arguments");
  if (argc >= 2 && watch_prefix)
    ctl_die(CTL_EXIT_BAD_ARGS, "`range_end` and `--prefix` are mutually exclusive");
  c = open_client();
  const char *why = watch_open(c, argc, argv);
  if (why)
    ctl_die(CTL_EXIT_BAD_ARGS, "%s", why);
  stream_loop(c, &watch_done, NULL);
  die_if_table_refused();
  ctl_die(CTL_EXIT_INTERRUPTED, "watch is canceled by the server");
}

static void run_version(int argc, char **argv) {
  (void)argc, (void)argv;
  printf("ketchctl version: %s\nAPI version: %s\n", ketch_version(), API_VERSION);
}

/* ---- main: find the command, parse its flags, run it ---- */

/* Whether the global flag argument `a` takes the next argument as its value. */
static bool global_takes_value(const char *a) {
  struct flag *sets[] = {global_flags, NULL}, *f = NULL;
  if (a[1] == '-' && !strchr(a, '='))
    f = flag_find(sets, a + 2, strlen(a + 2), 0);
  else if (a[1] != '-' && strlen(a) == 2)
    f = flag_find(sets, NULL, 0, a[1]);
  return f && f->type != FT_BOOL;
}

/* --discovery-srv: replaces --endpoints with the client records' targets
 * (libketch's ketch_srv_endpoints: "https://ADDRESS:port" for -ssl records,
 * "http://..." otherwise, by priority then weight). Dies when none is found. */
static void endpoints_from_srv(void) {
  size_t cap = 64 * 80;
  char *list = ctl_keep(calloc(1, cap)), msg[512];
  int timeout_ms = g_dial_ns > 0 ? (int)(g_dial_ns / 1000000) + 3000 : 5000;
  int err = ketch_srv_endpoints(g_discovery_srv, g_discovery_srv_name,
                                *g_dns_servers ? g_dns_servers : NULL, timeout_ms, list, cap, msg,
                                sizeof msg);
  if (err == KETCH_ENOTFOUND)
    ctl_die(CTL_EXIT_ERROR, "cannot find any client endpoint in SRV records of %s (%s)",
            g_discovery_srv, msg);
  if (err)
    ctl_die(CTL_EXIT_ERROR, "%s", msg);
  g_endpoints = list;
}

/* --resolver-prefix: replaces --endpoints (the cluster's, where the
 * registrations are read) with the native proxies registered under the
 * prefix, from a random one (libketch's ketch_resolve_prefix). Dies when
 * none is registered. */
static void endpoints_from_resolver(void) {
  size_t cap = 64 * 1024;
  char *list = ctl_keep(calloc(1, cap)), msg[700];
  ketch_options o;
  client_options(&o);
  int err = ketch_resolve_prefix(g_endpoints, g_resolver_prefix, &o, list, cap, msg, sizeof msg);
  if (err)
    ctl_die(err == KETCH_ENOTFOUND ? CTL_EXIT_ERROR : CTL_EXIT_BAD_CONNECTION, "%s",
            err == KETCH_ETIMEOUT ? ctl_errtext(err, msg) : msg);
  g_endpoints = list;
}

int main(int argc, char **argv) {
  atexit(free_kept);
  flags_reset(global_flags);
  for (const struct cmd *k = commands; k->name; k++)
    flags_reset(k->flags);

  /* cobra's Find: the command words are the first non-flag arguments
   * ("get", "endpoint status", "help endpoint status") */
  int word_idx[3] = {-1, -1, -1}, nwords = 0;
  for (int i = 1; i < argc && nwords < 3; i++) {
    if (!strcmp(argv[i], "--"))
      break;
    if (argv[i][0] == '-' && argv[i][1]) {
      if (global_takes_value(argv[i]))
        i++;
      continue;
    }
    word_idx[nwords++] = i;
    if (!is_group(argv[i]) && strcmp(argv[i], "help"))
      break;
  }
  const struct cmd *cmd = NULL;
  const char *group = NULL;
  bool help_cmd = false;
  int skip = 1;
  if (nwords > 0) {
    const char *w = argv[word_idx[0]];
    char name[64];
    if (!strcmp(w, "help")) {
      help_cmd = true;
      if (nwords > 1)
        w = argv[word_idx[1]];
    }
    if (is_group(w)) {
      group = w;
      int sub = word_idx[help_cmd ? 2 : 1];
      if (sub >= 0) {
        snprintf(name, sizeof name, "%s %s", group, argv[sub]);
        for (const struct cmd *k = commands; k->name; k++)
          if (!strcmp(k->name, name))
            cmd = k, skip = 2;
      }
    } else if (!help_cmd || nwords > 1) {
      for (const struct cmd *k = commands; k->name; k++)
        if (!strcmp(k->name, w) && k->run)
          cmd = k;
      if (!cmd && !help_cmd) {
        fprintf(stderr,
                "Error: unknown command \"%s\" for \"ketchctl\"\n"
                "Run 'ketchctl --help' for usage.\n"
                "Error: unknown command \"%s\" for \"ketchctl\"\n",
                w, w);
        return CTL_EXIT_ERROR;
      }
    }
  }
  if (help_cmd) {
    show_usage(cmd, group);
    return 0;
  }

  /* all arguments but the command words */
  char *rest[MAX_ARGS], *pos[MAX_ARGS], err[400];
  int nrest = 0, npos = 0;
  for (int i = 1; i < argc && nrest < MAX_ARGS - 1; i++) {
    if (i == word_idx[0] || (skip == 2 && i == word_idx[1]))
      continue;
    rest[nrest++] = argv[i];
  }
  struct flag *sets[] = {global_flags, help_flags, cmd ? cmd->flags : NULL, NULL, NULL};
  if (group && !strcmp(group, "endpoint"))
    sets[cmd && cmd->flags ? 3 : 2] = endpoint_flags;
  if (flags_parse(sets, nrest, rest, pos, &npos, err, sizeof err)) {
    show_usage(cmd, group);
    fflush(stdout);
    fprintf(stderr, "Error: %s\n\nError: %s\n", err, err);
    return CTL_EXIT_ERROR;
  }
  if (!cmd || help_flag) {
    show_usage(cmd, group);
    return 0;
  }
  if (*g_discovery_srv)
    endpoints_from_srv();
  if (*g_resolver_prefix)
    endpoints_from_resolver();
  cmd->run(npos, pos);
  fflush(stdout);
  return ferror(stdout) ? CTL_EXIT_ERROR : 0;
}
