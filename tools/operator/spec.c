/* tools/operator/spec.c — the cluster spec: YAML in, a checked struct
 * op_spec out (pure: no I/O). Also durations and template expansion.
 *
 * The spec (README "Operating a cluster with ketch-operator" has an example):
 *
 *   cluster, size, token, binary, version, driver (local | command),
 *   member-args: [flags for every member],
 *   machines: [{name, host, client-url, peer-url, data-dir}, ...],
 *   stabilization, dead-after, min-quorum, catchup-entries,
 *   backup: {dir, interval, keep, keep-for, upload, remove},
 *   command: {start, stop, wipe, force-new-cluster, restore},
 *   upgrade-windows: ["Sat 02:00-04:00", "Mon-Fri 22:00-01:00", ...] (UTC)
 *
 * Keys may be written with '-' or '_'. Every value that a template can
 * receive ({name} {host} {peer_url} {client_url} {initial_cluster}
 * {data_dir} {binary} {token}) is restricted to [A-Za-z0-9._:/=,@+-], so a
 * filled-in template never needs shell quoting. Limits: OP_MAX_* (op.h).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "op.h"

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

int64_t op_parse_duration(const char *s) {
  if (!s || !*s)
    return -1;
  const char *p = s;
  int64_t total = 0;
  const int64_t max = 10LL * 366 * 24 * 3600 * 1000;
  while (*p) {
    if (!isdigit((unsigned char)*p))
      return -1;
    int64_t v = 0;
    while (isdigit((unsigned char)*p)) {
      v = v * 10 + (*p++ - '0');
      if (v > max)
        return -1;
    }
    int64_t unit;
    if (!strncmp(p, "ms", 2))
      unit = 1, p += 2;
    else if (*p == 's')
      unit = 1000, p++;
    else if (*p == 'm')
      unit = 60000, p++;
    else if (*p == 'h')
      unit = 3600000, p++;
    else if (*p == 'd')
      unit = 86400000, p++;
    else if (!*p && p - s > 0 && total == 0)
      unit = 1000; /* a bare number: seconds */
    else
      return -1;
    if (v > max / unit)
      return -1;
    total += v * unit;
    if (total > max)
      return -1;
  }
  return total;
}

/* ---- value checks ---- */

static bool safe_chars(const char *s) {
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("._:/=,@+-", *s))
      return false;
  return true;
}

static bool name_ok(const char *s) {
  if (!*s || strlen(s) >= OP_NAME_MAX)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
      return false;
  return true;
}

/* http://host:port with a non-empty host and a port 1..65535; host copied
 * out (without brackets for IPv6). */
static bool url_ok(const char *u, char *host, size_t host_len) {
  if (strncmp(u, "http://", 7))
    return false;
  const char *h = u + 7;
  const char *colon = strrchr(h, ':');
  if (!colon || colon == h || strchr(h, '/'))
    return false;
  const char *p = colon + 1;
  if (!*p || strlen(p) > 5)
    return false;
  long port = 0;
  for (const char *q = p; *q; q++) {
    if (!isdigit((unsigned char)*q))
      return false;
    port = port * 10 + (*q - '0');
  }
  if (port < 1 || port > 65535)
    return false;
  size_t hl = (size_t)(colon - h);
  if (*h == '[' && hl >= 2 && h[hl - 1] == ']')
    h++, hl -= 2;
  if (hl == 0 || hl >= host_len)
    return false;
  memcpy(host, h, hl);
  host[hl] = 0;
  return safe_chars(host);
}

/* ---- YAML walking ---- */

enum ftype { F_STR, F_INT, F_DUR, F_U64, F_DRIVER };
struct field {
  const char *name;
  int type;
  size_t off, size; /* F_STR: the char array's size */
};
#define FSTR(st, n, m)                                                                             \
  { n, F_STR, offsetof(struct st, m), sizeof(((struct st *)0)->m) }
#define FNUM(st, n, t, m)                                                                          \
  { n, t, offsetof(struct st, m), sizeof(((struct st *)0)->m) }

static bool key_is(const char *key, size_t klen, const char *name) {
  if (strlen(name) != klen)
    return false;
  for (size_t i = 0; i < klen; i++) {
    char a = key[i] == '_' ? '-' : key[i];
    if (a != name[i])
      return false;
  }
  return true;
}

struct walk {
  yaml_document_t *doc;
  char *err;
  size_t err_len;
};

/* The text of a scalar node (NUL-free), else NULL. */
static const char *scalar(yaml_node_t *n) {
  if (!n || n->type != YAML_SCALAR_NODE)
    return NULL;
  const char *v = (const char *)n->data.scalar.value;
  if (strlen(v) != n->data.scalar.length)
    return NULL;
  return v;
}

static int set_field(struct walk *w, const char *where, const struct field *f, void *base,
                     yaml_node_t *v) {
  const char *text = scalar(v);
  if (!text)
    return fail(w->err, w->err_len, "%s: want a single value (line %zu)", where,
                v ? v->start_mark.line + 1 : 0);
  char *dst = (char *)base + f->off;
  switch (f->type) {
  case F_STR:
    if (strlen(text) >= f->size)
      return fail(w->err, w->err_len, "%s: longer than %zu bytes", where, f->size - 1);
    memcpy(dst, text, strlen(text) + 1);
    return 0;
  case F_INT:
  case F_U64: {
    char *end;
    if (!*text || !isdigit((unsigned char)*text))
      return fail(w->err, w->err_len, "%s: want a non-negative number, got \"%.40s\"", where, text);
    unsigned long long x = strtoull(text, &end, 10);
    if (*end || x > (f->type == F_INT ? 1000000ULL : 1ULL << 62))
      return fail(w->err, w->err_len, "%s: want a number, got \"%.40s\"", where, text);
    if (f->type == F_INT)
      *(int *)dst = (int)x;
    else
      *(uint64_t *)dst = x;
    return 0;
  }
  case F_DUR: {
    int64_t ms = op_parse_duration(text);
    if (ms < 0)
      return fail(w->err, w->err_len,
                  "%s: want a duration such as 500ms, 10s, 1m, 2h or 7d, got \"%.40s\"", where,
                  text);
    *(int64_t *)dst = ms;
    return 0;
  }
  case F_DRIVER:
    if (!strcmp(text, "local"))
      *(int *)dst = OP_DRIVER_LOCAL;
    else if (!strcmp(text, "command"))
      *(int *)dst = OP_DRIVER_COMMAND;
    else
      return fail(w->err, w->err_len, "%s: want local or command, got \"%.40s\"", where, text);
    return 0;
  }
  return fail(w->err, w->err_len, "%s: internal error", where);
}

/* One mapping whose keys are in `fields` (sub-structures by callback). */
typedef int (*sub_fn)(struct walk *w, const char *where, yaml_node_t *v, void *base);
struct sub {
  const char *name;
  sub_fn fn;
};

static int walk_map(struct walk *w, const char *where, yaml_node_t *map, const struct field *fields,
                    size_t n_fields, const struct sub *subs, size_t n_subs, void *base) {
  if (!map || map->type != YAML_MAPPING_NODE)
    return fail(w->err, w->err_len, "%s: want a mapping of key: value", where);
  uint64_t seen = 0;
  for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k = yaml_document_get_node(w->doc, pr->key);
    yaml_node_t *v = yaml_document_get_node(w->doc, pr->value);
    const char *key = scalar(k);
    if (!key || !v)
      return fail(w->err, w->err_len, "%s: want plain keys (line %zu)", where,
                  k ? k->start_mark.line + 1 : 0);
    size_t klen = strlen(key);
    char at[200];
    snprintf(at, sizeof at, "%s%s%.60s", where, *where ? "." : "", key);
    size_t i;
    for (i = 0; i < n_fields + n_subs; i++) {
      const char *name = i < n_fields ? fields[i].name : subs[i - n_fields].name;
      if (key_is(key, klen, name))
        break;
    }
    if (i == n_fields + n_subs)
      return fail(w->err, w->err_len, "%s: unknown key (line %zu)", at, k->start_mark.line + 1);
    if (seen & (1ULL << i))
      return fail(w->err, w->err_len, "%s: given twice (line %zu)", at, k->start_mark.line + 1);
    seen |= 1ULL << i;
    int rc = i < n_fields ? set_field(w, at, &fields[i], base, v)
                          : subs[i - n_fields].fn(w, at, v, base);
    if (rc)
      return rc;
  }
  return 0;
}

static const struct field machine_fields[] = {
    FSTR(op_machine, "name", name),
    FSTR(op_machine, "host", host),
    FSTR(op_machine, "client-url", client_url),
    FSTR(op_machine, "peer-url", peer_url),
    FSTR(op_machine, "data-dir", data_dir),
};

static int sub_machines(struct walk *w, const char *where, yaml_node_t *v, void *base) {
  struct op_spec *s = base;
  if (v->type != YAML_SEQUENCE_NODE)
    return fail(w->err, w->err_len, "%s: want a list of machines", where);
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    if (s->n_machines == OP_MAX_MACHINES)
      return fail(w->err, w->err_len, "%s: more than %d machines", where, OP_MAX_MACHINES);
    char at[220];
    snprintf(at, sizeof at, "%s[%d]", where, s->n_machines);
    struct op_machine *m = &s->machines[s->n_machines++];
    int rc = walk_map(w, at, yaml_document_get_node(w->doc, *it), machine_fields,
                      sizeof machine_fields / sizeof machine_fields[0], NULL, 0, m);
    if (rc)
      return rc;
  }
  return 0;
}

static int sub_args(struct walk *w, const char *where, yaml_node_t *v, void *base) {
  struct op_spec *s = base;
  if (v->type != YAML_SEQUENCE_NODE)
    return fail(w->err, w->err_len, "%s: want a list of flags", where);
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    const char *t = scalar(yaml_document_get_node(w->doc, *it));
    if (!t)
      return fail(w->err, w->err_len, "%s: want strings", where);
    if (s->n_member_args == OP_MAX_ARGS)
      return fail(w->err, w->err_len, "%s: more than %d items", where, OP_MAX_ARGS);
    if (strlen(t) >= OP_URL_MAX || !safe_chars(t))
      return fail(w->err, w->err_len,
                  "%s: \"%.40s\": at most %d bytes of [A-Za-z0-9._:/=,@+-] per item", where, t,
                  OP_URL_MAX - 1);
    strcpy(s->member_args[s->n_member_args++], t);
  }
  return 0;
}

static int sub_windows(struct walk *w, const char *where, yaml_node_t *v, void *base) {
  struct op_spec *s = base;
  if (v->type != YAML_SEQUENCE_NODE)
    return fail(w->err, w->err_len, "%s: want a list such as [\"Sat 02:00-04:00\"]", where);
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    const char *t = scalar(yaml_document_get_node(w->doc, *it));
    if (s->n_windows == OP_MAX_WINDOWS)
      return fail(w->err, w->err_len, "%s: more than %d windows", where, OP_MAX_WINDOWS);
    if (!t || op_window_parse(t, &s->windows[s->n_windows]))
      return fail(w->err, w->err_len,
                  "%s[%d]: want DAYS HH:MM-HH:MM in UTC (DAYS: daily, Mon, Mon-Fri or Sat,Sun), "
                  "got \"%.40s\"",
                  where, s->n_windows, t ? t : "");
    s->n_windows++;
  }
  return 0;
}

static const struct field backup_fields[] = {
    FSTR(op_backup_policy, "dir", dir),
    FNUM(op_backup_policy, "interval", F_DUR, interval_ms),
    FNUM(op_backup_policy, "keep", F_INT, keep),
    FNUM(op_backup_policy, "keep-for", F_DUR, keep_for_ms),
    FSTR(op_backup_policy, "upload", upload),
    FSTR(op_backup_policy, "remove", remove),
};

static int sub_backup(struct walk *w, const char *where, yaml_node_t *v, void *base) {
  struct op_spec *s = base;
  s->backup.enabled = true;
  return walk_map(w, where, v, backup_fields, sizeof backup_fields / sizeof backup_fields[0], NULL,
                  0, &s->backup);
}

static const struct field command_fields[] = {
    FSTR(op_spec, "start", cmd_start),
    FSTR(op_spec, "stop", cmd_stop),
    FSTR(op_spec, "wipe", cmd_wipe),
    FSTR(op_spec, "force-new-cluster", cmd_force_new_cluster),
    FSTR(op_spec, "restore", cmd_restore),
};

static int sub_command(struct walk *w, const char *where, yaml_node_t *v, void *base) {
  return walk_map(w, where, v, command_fields, sizeof command_fields / sizeof command_fields[0],
                  NULL, 0, base);
}

static const struct field top_fields[] = {
    FSTR(op_spec, "cluster", cluster),
    FNUM(op_spec, "size", F_INT, size),
    FSTR(op_spec, "token", token),
    FSTR(op_spec, "binary", binary),
    FSTR(op_spec, "version", version),
    FNUM(op_spec, "driver", F_DRIVER, driver),
    FNUM(op_spec, "stabilization", F_DUR, stabilization_ms),
    FNUM(op_spec, "dead-after", F_DUR, dead_after_ms),
    FNUM(op_spec, "min-quorum", F_INT, min_quorum),
    FNUM(op_spec, "catchup-entries", F_U64, catchup_entries),
};
static const struct sub top_subs[] = {
    {"machines", sub_machines}, {"member-args", sub_args},        {"backup", sub_backup},
    {"command", sub_command},   {"upgrade-windows", sub_windows},
};

/* ---- checks after parsing ---- */

static const char *const placeholders[] = {
    "name",     "host",   "peer_url", "client_url", "initial_cluster", "initial_cluster_state",
    "data_dir", "binary", "token",    "file"};

static int check_template(const char *where, const char *t, char *err, size_t n) {
  /* every {x} must be a known placeholder */
  for (const char *p = t; (p = strchr(p, '{')); p++) {
    const char *e = strchr(p, '}');
    if (!e)
      return fail(err, n, "%s: unclosed '{'", where);
    size_t len = (size_t)(e - p - 1), i;
    for (i = 0; i < sizeof placeholders / sizeof placeholders[0]; i++)
      if (strlen(placeholders[i]) == len && !strncmp(p + 1, placeholders[i], len))
        break;
    if (i == sizeof placeholders / sizeof placeholders[0])
      return fail(err, n, "%s: unknown placeholder {%.*s}", where, (int)(len > 40 ? 40 : len),
                  p + 1);
  }
  return 0;
}

static int check(struct op_spec *s, bool have_min_quorum, char *err, size_t n) {
  if (!s->cluster[0])
    return fail(err, n, "cluster: required (a name for this cluster)");
  if (!name_ok(s->cluster))
    return fail(err, n, "cluster: \"%s\": use letters, digits, '.', '_' and '-'", s->cluster);
  if (!s->token[0])
    strcpy(s->token, s->cluster);
  if (!name_ok(s->token))
    return fail(err, n, "token: \"%s\": use letters, digits, '.', '_' and '-'", s->token);
  if (s->n_machines == 0)
    return fail(err, n, "machines: at least one machine is required");
  if (s->size < 1)
    return fail(err, n, "size: required, at least 1");
  if (s->size > s->n_machines)
    return fail(err, n, "size: %d members need at least %d machines, the spec lists %d", s->size,
                s->size, s->n_machines);
  if (s->binary[0] && (s->binary[0] != '/' || !safe_chars(s->binary)))
    return fail(err, n, "binary: \"%s\": want an absolute path of [A-Za-z0-9._:/=,@+-]", s->binary);
  if (!safe_chars(s->version))
    return fail(err, n, "version: \"%s\": unexpected characters", s->version);
  for (int i = 0; i < s->n_machines; i++) {
    struct op_machine *m = &s->machines[i];
    char host[OP_NAME_MAX];
    if (!name_ok(m->name))
      return fail(err, n, "machines[%d].name: required; letters, digits, '.', '_' and '-'", i);
    if (!url_ok(m->peer_url, host, sizeof host))
      return fail(err, n, "machines[%d].peer-url: \"%s\": must be http://host:port", i,
                  m->peer_url);
    if (!m->host[0])
      strcpy(m->host, host);
    if (!safe_chars(m->host))
      return fail(err, n, "machines[%d].host: \"%s\": unexpected characters", i, m->host);
    if (!url_ok(m->client_url, host, sizeof host))
      return fail(err, n, "machines[%d].client-url: \"%s\": must be http://host:port", i,
                  m->client_url);
    if (!m->data_dir[0] || !safe_chars(m->data_dir) || !strcmp(m->data_dir, "/") ||
        strstr(m->data_dir, ".."))
      return fail(err, n,
                  "machines[%d].data-dir: required; a path of [A-Za-z0-9._:/=,@+-], not / and "
                  "without ..",
                  i);
    for (int j = 0; j < i; j++) {
      const struct op_machine *o = &s->machines[j];
      if (!strcmp(o->name, m->name))
        return fail(err, n, "machines[%d].name: \"%s\" is also machines[%d]'s", i, m->name, j);
      if (!strcmp(o->peer_url, m->peer_url) || !strcmp(o->peer_url, m->client_url) ||
          !strcmp(o->client_url, m->peer_url) || !strcmp(o->client_url, m->client_url))
        return fail(err, n, "machines[%d]: a URL is also used by machines[%d]", i, j);
      if (!strcmp(o->data_dir, m->data_dir) && !strcmp(o->host, m->host))
        return fail(err, n, "machines[%d].data-dir: also machines[%d]'s on host %s", i, j, m->host);
    }
    if (!strcmp(m->peer_url, m->client_url))
      return fail(err, n, "machines[%d]: client-url and peer-url must differ", i);
  }
  if (s->driver == OP_DRIVER_COMMAND) {
    if (!s->cmd_start[0] || !s->cmd_stop[0] || !s->cmd_wipe[0])
      return fail(err, n, "command: the command driver needs start, stop and wipe templates");
  }
  const struct {
    const char *name;
    const char *t;
  } tmpls[] = {
      {"command.start", s->cmd_start},     {"command.stop", s->cmd_stop},
      {"command.wipe", s->cmd_wipe},       {"command.force-new-cluster", s->cmd_force_new_cluster},
      {"command.restore", s->cmd_restore}, {"backup.upload", s->backup.upload},
      {"backup.remove", s->backup.remove}};
  for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++)
    if (check_template(tmpls[i].name, tmpls[i].t, err, n))
      return -1;
  if (s->stabilization_ms < 0)
    s->stabilization_ms = 10000;
  if (s->dead_after_ms < 0)
    s->dead_after_ms = 60000;
  if (s->dead_after_ms < 1000)
    return fail(err, n, "dead-after: at least 1s (a member restarting is not dead)");
  if (!have_min_quorum)
    s->min_quorum = s->size / 2 + 1;
  if (s->min_quorum < 1 || s->min_quorum > s->size)
    return fail(err, n, "min-quorum: %d: must be between 1 and size (%d)", s->min_quorum, s->size);
  if (s->catchup_entries == 0)
    s->catchup_entries = 1000;
  if (s->backup.enabled) {
    struct op_backup_policy *b = &s->backup;
    if (!b->dir[0] || b->dir[0] != '/' || !safe_chars(b->dir))
      return fail(err, n, "backup.dir: required; an absolute path of [A-Za-z0-9._:/=,@+-]");
    if (b->interval_ms < 0)
      b->interval_ms = 3600000;
    if (b->interval_ms < 1000)
      return fail(err, n, "backup.interval: at least 1s");
    if (b->keep < 0)
      b->keep = 24;
    if (b->keep < 1)
      return fail(err, n, "backup.keep: at least 1");
    if (b->keep_for_ms < 0)
      b->keep_for_ms = 7LL * 86400000;
  }
  return 0;
}

int op_spec_parse(const char *text, size_t len, struct op_spec *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  out->stabilization_ms = out->dead_after_ms = -1;
  out->min_quorum = -1;
  out->backup.interval_ms = out->backup.keep_for_ms = -1;
  out->backup.keep = -1;
  if (len > OP_SPEC_MAX_BYTES)
    return fail(err, err_len, "spec: %zu bytes, more than %d", len, OP_SPEC_MAX_BYTES);
  yaml_parser_t p;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&p))
    return fail(err, err_len, "spec: cannot initialise the YAML parser");
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  if (!yaml_parser_load(&p, &doc)) {
    fail(err, err_len, "spec: line %zu: %s", p.problem_mark.line + 1,
         p.problem ? p.problem : "YAML parse error");
    yaml_parser_delete(&p);
    return -1;
  }
  struct walk w = {&doc, err, err_len};
  int rc;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    rc = fail(err, err_len, "spec: empty document");
  else
    rc = walk_map(&w, "", root, top_fields, sizeof top_fields / sizeof top_fields[0], top_subs,
                  sizeof top_subs / sizeof top_subs[0], out);
  bool have_mq = out->min_quorum >= 0;
  yaml_document_delete(&doc);
  yaml_parser_delete(&p);
  if (rc)
    return rc;
  return check(out, have_mq, err, err_len);
}

int op_expand(const char *tmpl, const char *const *vars, size_t n_vars, char *out, size_t out_len,
              char *err, size_t err_len) {
  size_t o = 0;
  for (const char *p = tmpl; *p;) {
    const char *piece = p;
    size_t plen = 1;
    if (*p == '{') {
      const char *e = strchr(p, '}');
      if (!e)
        return fail(err, err_len, "template: unclosed '{'");
      size_t len = (size_t)(e - p - 1), i;
      for (i = 0; i < n_vars; i++)
        if (strlen(vars[2 * i]) == len && !strncmp(p + 1, vars[2 * i], len))
          break;
      if (i == n_vars)
        return fail(err, err_len, "template: unknown placeholder {%.*s}",
                    (int)(len > 40 ? 40 : len), p + 1);
      piece = vars[2 * i + 1];
      plen = strlen(piece);
      p = e + 1;
    } else {
      p++;
    }
    if (o + plen >= out_len)
      return fail(err, err_len, "template: the command is longer than %zu bytes", out_len - 1);
    memcpy(out + o, piece, plen);
    o += plen;
  }
  out[o] = 0;
  return 0;
}
