/* tools/operator/record.c — the records the operator keeps in the cluster
 * (pure: encode and decode only).
 *
 * Format: one logfmt line, `key=value` pairs separated by single spaces; a
 * value that is empty or holds anything but [A-Za-z0-9._:/=,@+-] is written
 * in double quotes with \" \\ \n \t escapes. Ids are 16 lowercase hex
 * digits, times are milliseconds since the Unix epoch. The decoder reads any
 * bytes safely (a fuzz target replays it): it accepts the keys it knows in
 * any order, skips unknown ones (records from a newer operator still read),
 * and refuses a value longer than its field, a missing `=`, an unterminated
 * quote and a bad number, naming the key.
 *
 *   action: seq kind state machine member target binary spec-rev at done-at
 *           by done-by reason outcome
 *   backup: name state at revision member size hash-kv why
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

static const char *const kind_names[OP_KIND_COUNT] = {
    "none",        "wait",    "report", "seed",   "add-learner", "start",   "promote", "remove",
    "move-leader", "upgrade", "backup", "finish", "abandon",     "recover", "restore"};

const char *op_kind_name(int kind) {
  return kind >= 0 && kind < OP_KIND_COUNT ? kind_names[kind] : "?";
}

int op_kind_of(const char *name) {
  for (int i = 0; i < OP_KIND_COUNT; i++)
    if (!strcmp(kind_names[i], name))
      return i;
  return -1;
}

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- encoding ---- */

struct out {
  char *p;
  size_t n, len;
  bool over;
};

static void put(struct out *o, const char *s, size_t n) {
  if (o->over || o->len + n >= o->n) {
    o->over = true;
    return;
  }
  memcpy(o->p + o->len, s, n);
  o->len += n;
  o->p[o->len] = 0;
}

static bool bare(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("._:/=,@+-", *s))
      return false;
  return true;
}

static void kv_str(struct out *o, const char *k, const char *v) {
  if (o->len)
    put(o, " ", 1);
  put(o, k, strlen(k));
  put(o, "=", 1);
  if (bare(v)) {
    put(o, v, strlen(v));
    return;
  }
  put(o, "\"", 1);
  for (; *v; v++) {
    const char *e = NULL;
    if (*v == '"')
      e = "\\\"";
    else if (*v == '\\')
      e = "\\\\";
    else if (*v == '\n')
      e = "\\n";
    else if (*v == '\t')
      e = "\\t";
    if (e)
      put(o, e, 2);
    else
      put(o, v, 1);
  }
  put(o, "\"", 1);
}

static void kv_i64(struct out *o, const char *k, int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%" PRId64, v);
  kv_str(o, k, b);
}

static void kv_id(struct out *o, const char *k, uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%016" PRIx64, v);
  kv_str(o, k, b);
}

int op_action_encode(const struct op_action *a, char *buf, size_t n) {
  struct out o = {buf, n, 0, n == 0};
  if (n)
    buf[0] = 0;
  kv_i64(&o, "seq", (int64_t)a->seq);
  kv_str(&o, "kind", op_kind_name(a->kind));
  kv_str(&o, "state", a->state);
  if (a->machine[0])
    kv_str(&o, "machine", a->machine);
  if (a->member)
    kv_id(&o, "member", a->member);
  if (a->target)
    kv_id(&o, "target", a->target);
  if (a->binary[0])
    kv_str(&o, "binary", a->binary);
  kv_i64(&o, "spec-rev", a->spec_rev);
  kv_i64(&o, "at", a->at_ms);
  if (a->done_ms)
    kv_i64(&o, "done-at", a->done_ms);
  kv_str(&o, "by", a->by);
  if (a->done_by[0])
    kv_str(&o, "done-by", a->done_by);
  kv_str(&o, "reason", a->reason);
  if (a->outcome[0])
    kv_str(&o, "outcome", a->outcome);
  return o.over ? -1 : (int)o.len;
}

int op_backup_encode(const struct op_backup *b, char *buf, size_t n) {
  struct out o = {buf, n, 0, n == 0};
  if (n)
    buf[0] = 0;
  kv_str(&o, "name", b->name);
  kv_str(&o, "state", b->state);
  kv_i64(&o, "at", b->at_ms);
  kv_i64(&o, "revision", b->revision);
  kv_id(&o, "member", b->member);
  kv_i64(&o, "size", (int64_t)b->size_bytes);
  char h[16];
  snprintf(h, sizeof h, "%08" PRIx32, b->hash_kv);
  kv_str(&o, "hash-kv", h);
  kv_str(&o, "why", b->why);
  return o.over ? -1 : (int)o.len;
}

/* ---- decoding ---- */

enum { V_STR, V_I64, V_U64, V_ID, V_KIND, V_HEX32 };
struct key {
  const char *name;
  int type;
  size_t off, size;
};

/* Reads one value into `val` (NUL-terminated, at most cap-1 bytes).
 * *pos is advanced past it. -1 on a malformed value. */
static int read_value(const char *buf, size_t len, size_t *pos, char *val, size_t cap,
                      bool *too_long) {
  size_t i = *pos, o = 0;
  *too_long = false;
  if (i < len && buf[i] == '"') {
    i++;
    for (;;) {
      if (i >= len)
        return -1; /* unterminated */
      char c = buf[i++];
      if (c == '"')
        break;
      if (c == '\\') {
        if (i >= len)
          return -1;
        char e = buf[i++];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      }
      if (c == 0)
        return -1;
      if (o + 1 < cap)
        val[o++] = c;
      else
        *too_long = true;
    }
  } else {
    while (i < len && buf[i] != ' ') {
      if (buf[i] == 0 || buf[i] == '"')
        return -1;
      if (o + 1 < cap)
        val[o++] = buf[i];
      else
        *too_long = true;
      i++;
    }
  }
  val[o] = 0;
  *pos = i;
  return 0;
}

static int decode(const char *buf, size_t len, const struct key *keys, size_t n_keys, void *base,
                  char *err, size_t err_len) {
  char val[OP_PATH_MAX * 2];
  size_t i = 0;
  while (i < len) {
    if (buf[i] == ' ' || buf[i] == '\n') {
      i++;
      continue;
    }
    size_t ks = i;
    while (i < len && (isalnum((unsigned char)buf[i]) || buf[i] == '-'))
      i++;
    size_t klen = i - ks;
    if (klen == 0 || klen > 32 || i >= len || buf[i] != '=')
      return fail(err, err_len, "offset %zu: want key=value", ks);
    i++;
    bool too_long;
    if (read_value(buf, len, &i, val, sizeof val, &too_long))
      return fail(err, err_len, "%.*s: malformed value", (int)klen, buf + ks);
    if (i < len && buf[i] != ' ' && buf[i] != '\n')
      return fail(err, err_len, "%.*s: junk after the value", (int)klen, buf + ks);
    const struct key *k = NULL;
    for (size_t j = 0; j < n_keys; j++)
      if (strlen(keys[j].name) == klen && !memcmp(keys[j].name, buf + ks, klen))
        k = &keys[j];
    if (!k)
      continue; /* a newer operator's field */
    char *dst = (char *)base + k->off;
    char *end = NULL;
    switch (k->type) {
    case V_STR:
      if (too_long || strlen(val) >= k->size)
        return fail(err, err_len, "%s: longer than %zu bytes", k->name, k->size - 1);
      strcpy(dst, val);
      break;
    case V_I64:
    case V_U64: {
      if (!*val || too_long)
        return fail(err, err_len, "%s: want a number", k->name);
      long long x = strtoll(val, &end, 10);
      if (*end || (k->type == V_U64 && x < 0))
        return fail(err, err_len, "%s: want a number", k->name);
      *(int64_t *)dst = x;
      break;
    }
    case V_ID:
    case V_HEX32: {
      if (!*val || too_long || strlen(val) > (k->type == V_ID ? 16 : 8))
        return fail(err, err_len, "%s: want hex digits", k->name);
      unsigned long long x = strtoull(val, &end, 16);
      if (*end || !isxdigit((unsigned char)val[0]))
        return fail(err, err_len, "%s: want hex digits", k->name);
      if (k->type == V_ID)
        *(uint64_t *)dst = x;
      else
        *(uint32_t *)dst = (uint32_t)x;
      break;
    }
    case V_KIND: {
      int kind = op_kind_of(val);
      if (kind < 0)
        return fail(err, err_len, "kind: unknown \"%.40s\"", val);
      *(int *)dst = kind;
      break;
    }
    }
  }
  return 0;
}

#define K(st, n, t, m)                                                                             \
  { n, t, offsetof(struct st, m), sizeof(((struct st *)0)->m) }

static const struct key action_keys[] = {
    K(op_action, "seq", V_U64, seq),       K(op_action, "kind", V_KIND, kind),
    K(op_action, "state", V_STR, state),   K(op_action, "machine", V_STR, machine),
    K(op_action, "member", V_ID, member),  K(op_action, "target", V_ID, target),
    K(op_action, "binary", V_STR, binary), K(op_action, "spec-rev", V_I64, spec_rev),
    K(op_action, "at", V_I64, at_ms),      K(op_action, "done-at", V_I64, done_ms),
    K(op_action, "by", V_STR, by),         K(op_action, "done-by", V_STR, done_by),
    K(op_action, "reason", V_STR, reason), K(op_action, "outcome", V_STR, outcome),
};

int op_action_decode(const char *buf, size_t len, struct op_action *a, char *err, size_t err_len) {
  memset(a, 0, sizeof *a);
  a->kind = -1;
  if (decode(buf, len, action_keys, sizeof action_keys / sizeof action_keys[0], a, err, err_len))
    return -1;
  if (a->kind < 0 || !a->state[0] || !a->seq)
    return fail(err, err_len, "want seq, kind and state");
  return 0;
}

static const struct key backup_keys[] = {
    K(op_backup, "name", V_STR, name),         K(op_backup, "state", V_STR, state),
    K(op_backup, "at", V_I64, at_ms),          K(op_backup, "revision", V_I64, revision),
    K(op_backup, "member", V_ID, member),      K(op_backup, "size", V_U64, size_bytes),
    K(op_backup, "hash-kv", V_HEX32, hash_kv), K(op_backup, "why", V_STR, why),
};

int op_backup_decode(const char *buf, size_t len, struct op_backup *b, char *err, size_t err_len) {
  memset(b, 0, sizeof *b);
  if (decode(buf, len, backup_keys, sizeof backup_keys / sizeof backup_keys[0], b, err, err_len))
    return -1;
  if (!b->name[0] || !b->state[0])
    return fail(err, err_len, "want name and state");
  return 0;
}
