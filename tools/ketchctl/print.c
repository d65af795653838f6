/* tools/ketchctl/print.c — all of ketchctl's output formats, as etcdctl 3.4 prints them.
 *
 * One place prints a response header (hdr) and one place prints a key-value
 * (kv) in each format; the per-command printers only arrange them:
 *   simple  printKV: key line, value line (\xNN with --hex); put "OK"; del the
 *           count; txn SUCCESS/FAILURE and a blank line before each response.
 *   json    Go's encoding/json of etcd's protobuf structs: snake_case fields,
 *           zero values omitted (omitempty), bytes as base64, uint64 as numbers.
 *   fields  "Name" : value lines, strings in Go's %q quoting.
 *   table   only endpoint status/health/hashkv and member list
 *           (olekukonko/tablewriter's layout); other commands refuse it with
 *           exit 4, after the request ran.
 *
 * The fields of a response are data (struct fld tables: the JSON name, the
 * fields-format name, the kind, the offset): one walker (flds) prints them
 * as JSON members or as "Name" : value lines, in the table's order. What has no common shape (lists
 * of keys, etcdctl's simple lines, tables) is written out by hand.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

struct ctl_display ctl_display;

/* ---- Go-compatible text helpers ---- */

/* Go's strconv.Quote escapes of ASCII (0: none). */
static const char go_escapes[128] = {
    ['"'] = '"',  ['\\'] = '\\', ['\a'] = 'a', ['\b'] = 'b', ['\f'] = 'f',
    ['\n'] = 'n', ['\r'] = 'r',  ['\t'] = 't', ['\v'] = 'v',
};

void ctl_goquote(FILE *f, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      if (go_escapes[c])
        fprintf(f, "\\%c", go_escapes[c]);
      else if (c < 0x20 || c == 0x7f)
        fprintf(f, "\\x%02x", c);
      else
        fputc((int)c, f);
      continue;
    }
    /* A valid UTF-8 sequence is printed as is (Go prints printable runes
     * raw); C1 controls as \u00XX; invalid bytes as \xNN. */
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    bool ok = len > 0 && c < 0xf5 && i + len <= n;
    for (size_t k = 1; ok && k < len; k++)
      ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len == 3 && c == 0xe0 && p[i + 1] < 0xa0)
      ok = false; /* overlong */
    if (ok && len == 3 && c == 0xed && p[i + 1] >= 0xa0)
      ok = false; /* surrogate */
    if (ok && len == 4 && ((c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] >= 0x90)))
      ok = false;
    if (!ok) {
      fprintf(f, "\\x%02x", c);
      i++;
    } else if (len == 2 && c == 0xc2 && p[i + 1] < 0xa0) {
      fprintf(f, "\\u%04x", p[i + 1]);
      i += 2;
    } else {
      fwrite(p + i, 1, len, f);
      i += len;
    }
  }
  fputc('"', f);
}

static void fmt_frac(char *buf, size_t cap, uint64_t whole, uint64_t frac, int prec,
                     const char *unit) {
  char fs[16] = "";
  if (frac) {
    snprintf(fs, sizeof fs, ".%0*" PRIu64, prec, frac);
    size_t l = strlen(fs);
    while (fs[l - 1] == '0')
      fs[--l] = 0;
  }
  snprintf(buf, cap, "%" PRIu64 "%s%s", whole, fs, unit);
}

void ctl_go_duration(char *buf, size_t cap, int64_t ns) {
  const char *sign = ns < 0 ? "-" : "";
  uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  char tmp[96];
  if (u == 0) {
    snprintf(buf, cap, "0s");
    return;
  }
  if (u < 1000) {
    snprintf(tmp, sizeof tmp, "%" PRIu64 "ns", u);
  } else if (u < 1000000) {
    fmt_frac(tmp, sizeof tmp, u / 1000, u % 1000, 3, "\xc2\xb5s");
  } else if (u < 1000000000) {
    fmt_frac(tmp, sizeof tmp, u / 1000000, u % 1000000, 6, "ms");
  } else {
    uint64_t s = u / 1000000000, h = s / 3600, m = s / 60 % 60;
    char sec[40], hm[40] = "";
    fmt_frac(sec, sizeof sec, s % 60, u % 1000000000, 9, "s");
    if (h)
      snprintf(hm, sizeof hm, "%" PRIu64 "h%" PRIu64 "m", h, m);
    else if (m)
      snprintf(hm, sizeof hm, "%" PRIu64 "m", m);
    snprintf(tmp, sizeof tmp, "%s%s", hm, sec);
  }
  snprintf(buf, cap, "%s%s", sign, tmp);
}

void ctl_humanize_bytes(char *buf, size_t cap, uint64_t n) {
  static const char *const sizes[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  if (n < 10) {
    snprintf(buf, cap, "%" PRIu64 " B", n);
    return;
  }
  int e = (int)floor(log((double)n) / log(1000.0));
  if (e > 6)
    e = 6;
  double val = floor((double)n / pow(1000.0, e) * 10 + 0.5) / 10;
  snprintf(buf, cap, val < 10 ? "%.1f %s" : "%.0f %s", val, sizes[e]);
}

/* ---- JSON writer: Go's encoding/json conventions ---- */

static int jdepth;
static bool jfirst[32];

static void jkey(const char *k) {
  if (!jfirst[jdepth])
    putchar(',');
  jfirst[jdepth] = false;
  if (k)
    printf("\"%s\":", k);
}
static void jopen(const char *k, char brace) {
  jkey(k);
  putchar(brace);
  jfirst[++jdepth] = true;
}
static void jclose(char brace) {
  putchar(brace);
  jdepth--;
}
/* A new JSON document opening with brace. */
static void jbegin(char brace) {
  jdepth = 0;
  jfirst[0] = true;
  jopen(NULL, brace);
}
static void jint(const char *k, int64_t v) { /* omitempty */
  if (v) {
    jkey(k);
    printf("%" PRId64, v);
  }
}
static void juint(const char *k, uint64_t v) {
  if (v) {
    jkey(k);
    printf("%" PRIu64, v);
  }
}
static void jbytes(const char *k, const char *p, size_t n) { /* []byte: base64 */
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *u = (const unsigned char *)p;
  if (!n)
    return;
  jkey(k);
  putchar('"');
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)u[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)u[i + 1] << 8;
    if (i + 2 < n)
      v |= u[i + 2];
    putchar(b64[v >> 18 & 63]);
    putchar(b64[v >> 12 & 63]);
    putchar(i + 1 < n ? b64[v >> 6 & 63] : '=');
    putchar(i + 2 < n ? b64[v & 63] : '=');
  }
  putchar('"');
}
static void jstr(const char *k, const char *s, bool omitempty) {
  if (omitempty && !*s)
    return;
  jkey(k);
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", stdout);
    else if (*p == '\r')
      fputs("\\r", stdout);
    else if (*p == '\t')
      fputs("\\t", stdout);
    else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&')
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

/* An int64 without omitempty. */
static void jnum(const char *k, int64_t v) {
  jkey(k);
  printf("%" PRId64, v);
}
/* A string list (omitempty). */
static void jnames(const char *k, const char *const *v, size_t n) {
  if (!n)
    return;
  jopen(k, '[');
  for (size_t i = 0; i < n; i++)
    jstr(NULL, v[i], false);
  jclose(']');
}
/* Closes the document jbegin opened with '{' and ends its line. */
static void jend(void) {
  jclose('}');
  putchar('\n');
}

/* ---- fields as data ---- */

enum {
  F_I64,   /* int64_t */
  F_INT,   /* int */
  F_U64,   /* uint64_t */
  F_BOOL,  /* bool */
  F_STR,   /* const char *: json string, fields as is */
  F_QSTR,  /* const char *: json string, fields Go-quoted */
  F_CHARS, /* char[]: json string, fields as is */
  F_BYTES, /* const char *, then its size_t length: json base64, fields Go-quoted */
  F_STRS,  /* const char *const *, then its size_t count: json array, fields a line each */
};
#define F_OMIT 1 /* json: omitempty (the fields format prints every field) */

/* One field of a response struct; a table ends with {0}. */
struct fld {
  const char *json, *fields; /* the names; NULL: not in that format */
  uint8_t kind, flags;
  size_t off;
};
#define FLD(json, fields, kind, flags, type, member)                                               \
  { json, fields, kind, flags, offsetof(type, member) }

/* "pfx+name" : "quoted"  (the fields format) */
static void fquote(const char *pfx, const char *name, const char *s, size_t n) {
  printf("\"%s%s\" : ", pfx, name);
  ctl_goquote(stdout, s, n);
  putchar('\n');
}

/* The fields of base that table f names, in the display's format: JSON
 * members, or the fields format's "pfx+Name" : value lines; nothing in
 * simple and table. */
static void flds(const struct fld *f, const void *base, const char *pfx) {
  bool json = ctl_display.format == CTL_JSON;
  if (!json && ctl_display.format != CTL_FIELDS)
    return;
  for (; f->json || f->fields; f++) {
    const char *p = (const char *)base + f->off, *name = json ? f->json : f->fields;
    bool omit = json && (f->flags & F_OMIT);
    if (!name)
      continue;
    if (f->kind == F_STRS) {
      const char *const *v = *(const char *const *const *)p;
      size_t n = *(const size_t *)(p + sizeof v);
      if (json)
        jnames(name, v, n);
      for (size_t i = 0; !json && i < n; i++)
        fquote(pfx, name, v[i], strlen(v[i]));
    } else if (f->kind == F_BYTES) {
      const char *b = *(const char *const *)p;
      size_t n = *(const size_t *)(p + sizeof b);
      if (json)
        jbytes(name, b, n);
      else
        fquote(pfx, name, b, n);
    } else if (f->kind >= F_STR) {
      const char *str = f->kind == F_CHARS ? p : *(const char *const *)p;
      if (json)
        jstr(name, str, omit);
      else if (f->kind == F_QSTR)
        fquote(pfx, name, str, strlen(str));
      else
        printf("\"%s%s\" : %s\n", pfx, name, str);
    } else {
      int64_t v = f->kind == F_INT    ? *(const int *)p
                  : f->kind == F_BOOL ? *(const bool *)p
                                      : *(const int64_t *)p; /* F_U64: the same bits */
      if (omit && !v)
        continue;
      if (json)
        jkey(name);
      else
        printf("\"%s%s\" : ", pfx, name);
      if (f->kind == F_BOOL)
        fputs(v ? "true" : "false", stdout);
      else if (f->kind == F_U64)
        printf("%" PRIu64, (uint64_t)v);
      else
        printf("%" PRId64, v);
      if (!json)
        putchar('\n');
    }
  }
}

/* flds as one JSON object (k: its name, NULL in an array). */
static void fobj(const char *k, const struct fld *f, const void *base, const char *pfx) {
  bool json = ctl_display.format == CTL_JSON;
  if (json)
    jopen(k, '{');
  flds(f, base, pfx);
  if (json)
    jclose('}');
}

static const struct fld hdr_f[] = {
    FLD("cluster_id", "ClusterID", F_U64, F_OMIT, ketch_header, cluster_id),
    FLD("member_id", "MemberID", F_U64, F_OMIT, ketch_header, member_id),
    FLD("revision", "Revision", F_I64, F_OMIT, ketch_header, revision),
    FLD("raft_term", "RaftTerm", F_U64, F_OMIT, ketch_header, raft_term),
    {0},
};
static const struct fld kv_f[] = {
    FLD("key", "Key", F_BYTES, 0, ketch_kv, key),
    FLD("create_revision", "CreateRevision", F_I64, F_OMIT, ketch_kv, create_revision),
    FLD("mod_revision", "ModRevision", F_I64, F_OMIT, ketch_kv, mod_revision),
    FLD("version", "Version", F_I64, F_OMIT, ketch_kv, version),
    FLD("value", "Value", F_BYTES, 0, ketch_kv, value),
    FLD("lease", "Lease", F_I64, F_OMIT, ketch_kv, lease),
    {0},
};

/* ---- the one header printer and the one key-value printer ---- */

/* json: "header":{...}; fields: its lines. */
static void hdr(const ketch_header *h) { fobj("header", hdr_f, h, ""); }

/* clientv3's lease responses embed *pb.ResponseHeader: in JSON its fields
 * sit at the top level. */
static void hdr_flat(const ketch_header *h) { flds(hdr_f, h, ""); }

static void print_hex(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    printf("\\x%02x", (unsigned char)p[i]);
  putchar('\n');
}

/* pfx: "" or "Prev" (fields); json_key: the JSON member name, NULL in an array. */
static void kv(const ketch_kv *kv, const char *pfx, const char *json_key) {
  switch (ctl_display.format) {
  case CTL_SIMPLE:
    if (ctl_display.hex) {
      if (!ctl_display.value_only)
        print_hex(kv->key, kv->key_len);
      print_hex(kv->value, kv->value_len);
    } else {
      if (!ctl_display.value_only) {
        fwrite(kv->key, 1, kv->key_len, stdout);
        putchar('\n');
      }
      fwrite(kv->value, 1, kv->value_len, stdout);
      putchar('\n');
    }
    break;
  default:
    fobj(json_key, kv_f, kv, pfx);
    break;
  }
}

static void kv_list(const ketch_kv *kvs, size_t n, const char *json_key) {
  if (ctl_display.format == CTL_JSON) {
    if (!n)
      return; /* a nil slice is omitted */
    jopen(json_key, '[');
  }
  for (size_t i = 0; i < n; i++)
    kv(&kvs[i], json_key[0] == 'p' ? "Prev" : "", NULL);
  if (ctl_display.format == CTL_JSON)
    jclose(']');
}

static void refuse(const char *format) {
  ctl_die(CTL_EXIT_BAD_FEATURE, "%s not supported as output format", format);
}

static void refuse_table(void) {
  if (ctl_display.format == CTL_TABLE)
    refuse("table");
}

/* A response object: refuses table; opens the JSON document with its
 * header (flat: clientv3's embedded header), or prints the fields format's
 * header; then f. obj_end closes it. */
static void obj_begin(const ketch_header *h, bool flat, const struct fld *f, const void *base) {
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE)
    return;
  if (ctl_display.format == CTL_JSON)
    jbegin('{');
  if (flat)
    hdr_flat(h);
  else
    hdr(h);
  if (f)
    flds(f, base, "");
}
static void obj_end(void) {
  if (ctl_display.format == CTL_JSON)
    jend();
}

/* ---- responses; `top` wraps the JSON object and ends the line ---- */

static const struct fld range_f[] = {
    FLD("more", "More", F_BOOL, F_OMIT, ketch_range_result, more),
    FLD("count", "Count", F_I64, F_OMIT, ketch_range_result, count),
    {0},
};
static const struct fld delete_f[] = {
    FLD("deleted", "Deleted", F_I64, F_OMIT, ketch_delete_result, deleted),
    {0},
};
static const struct fld txn_f[] = {
    FLD("succeeded", "Succeeded", F_BOOL, F_OMIT, ketch_txn_result, succeeded),
    {0},
};

static void body_range(const ketch_header *h, const ketch_range_result *r) {
  hdr(h);
  kv_list(r->kvs, r->n_kvs, "kvs");
  flds(range_f, r, "");
}

static void body_put(const ketch_header *h, const ketch_put_result *r) {
  if (ctl_display.format == CTL_SIMPLE)
    puts("OK");
  hdr(h);
  if (r->prev_kv)
    kv(r->prev_kv, "Prev", "prev_kv");
}

static void body_delete(const ketch_header *h, const ketch_delete_result *r) {
  if (ctl_display.format == CTL_SIMPLE)
    printf("%" PRId64 "\n", r->deleted);
  hdr(h);
  flds(delete_f, r, "");
  kv_list(r->prev_kvs, r->n_prev_kvs, "prev_kvs");
}

static bool op_wrote(const ketch_op_result *o);

static bool txn_wrote(const ketch_txn_result *r) {
  for (size_t i = 0; i < r->n_responses; i++)
    if (op_wrote(&r->responses[i]))
      return true;
  return false;
}

static bool op_wrote(const ketch_op_result *o) {
  return o->type == KETCH_OP_PUT || (o->type == KETCH_OP_DELETE && o->del.deleted > 0) ||
         (o->type == KETCH_OP_TXN && txn_wrote(&o->txn));
}

/* etcd gives each txn response a header carrying only the revision, as the
 * txn saw it when the op ran: the revision before the txn until its first
 * write, the txn's revision from then on. *wrote tracks that point. */
static void body_txn(const ketch_header *h, const ketch_txn_result *r, int64_t before,
                     bool *wrote) {
  if (ctl_display.format == CTL_SIMPLE)
    puts(r->succeeded ? "SUCCESS" : "FAILURE");
  hdr(h);
  flds(txn_f, r, "");
  if (ctl_display.format == CTL_JSON && r->n_responses)
    jopen("responses", '[');
  static const char *const json_names[] = {
      [KETCH_OP_RANGE] = "ResponseRange",
      [KETCH_OP_PUT] = "ResponsePut",
      [KETCH_OP_DELETE] = "ResponseDeleteRange",
      [KETCH_OP_TXN] = "ResponseTxn",
  };
  for (size_t i = 0; i < r->n_responses; i++) {
    const ketch_op_result *o = &r->responses[i];
    if (o->type < KETCH_OP_RANGE || o->type > KETCH_OP_TXN)
      continue;
    *wrote = *wrote || op_wrote(o);
    ketch_header oh = {0, 0, *wrote ? h->revision : before, 0};
    if (ctl_display.format == CTL_SIMPLE)
      putchar('\n');
    if (ctl_display.format == CTL_JSON) {
      jopen(NULL, '{');
      jopen("Response", '{');
      jopen(json_names[o->type], '{');
    }
    switch (o->type) {
    case KETCH_OP_RANGE:
      body_range(&oh, &o->range);
      break;
    case KETCH_OP_PUT:
      body_put(&oh, &o->put);
      break;
    case KETCH_OP_DELETE:
      body_delete(&oh, &o->del);
      break;
    case KETCH_OP_TXN:
      body_txn(&oh, &o->txn, before, wrote);
      break;
    }
    if (ctl_display.format == CTL_JSON) {
      jclose('}');
      jclose('}');
      jclose('}');
    }
  }
  if (ctl_display.format == CTL_JSON && r->n_responses)
    jclose(']');
}

static void top_begin(void) {
  refuse_table();
  if (ctl_display.format == CTL_JSON)
    jbegin('{');
}

void ctl_print_range(const ketch_header *h, const ketch_range_result *r) {
  top_begin();
  body_range(h, r);
  obj_end();
}
void ctl_print_put(const ketch_header *h, const ketch_put_result *r) {
  top_begin();
  body_put(h, r);
  obj_end();
}
void ctl_print_delete(const ketch_header *h, const ketch_delete_result *r) {
  top_begin();
  body_delete(h, r);
  obj_end();
}
void ctl_print_txn(const ketch_header *h, const ketch_txn_result *r) {
  bool wrote = false;
  top_begin();
  body_txn(h, r, txn_wrote(r) ? h->revision - 1 : h->revision, &wrote);
  obj_end();
}

/* ---- tables: endpoint status / health / hashkv, member list ---- */

/* Display width: UTF-8 code points ("µs" is one column, two bytes). */
static size_t width(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += ((unsigned char)*s & 0xc0) != 0x80;
  return n;
}

/* tablewriter: headers upper-cased and centered, cells right-aligned, one
 * space of padding, +---+ borders. */
static void table(const char *const *head, int ncols, const char *const *cells, size_t nrows) {
  size_t *w = ctl_alloc(sizeof *w * (size_t)ncols);
  for (int c = 0; c < ncols; c++) {
    w[c] = width(head[c]);
    for (size_t r = 0; r < nrows; r++)
      if (width(cells[r * (size_t)ncols + (size_t)c]) > w[c])
        w[c] = width(cells[r * (size_t)ncols + (size_t)c]);
  }
  char line[1024];
  size_t o = 0;
  for (int c = 0; c < ncols; c++) {
    line[o++] = '+';
    for (size_t k = 0; k < w[c] + 2 && o < sizeof line - 4; k++)
      line[o++] = '-';
  }
  line[o++] = '+';
  line[o] = 0;
  puts(line);
  for (int c = 0; c < ncols; c++) {
    size_t l = strlen(head[c]), gap = w[c] - l;
    printf("| %*s", (int)(gap / 2), "");
    for (size_t k = 0; k < l; k++)
      putchar(head[c][k] >= 'a' && head[c][k] <= 'z' ? head[c][k] - 32 : head[c][k]);
    printf("%*s ", (int)(gap - gap / 2), "");
  }
  puts("|");
  puts(line);
  for (size_t r = 0; r < nrows; r++) {
    for (int c = 0; c < ncols; c++) {
      const char *cell = cells[r * (size_t)ncols + (size_t)c];
      printf("| %*s%s ", (int)(w[c] - width(cell)), "", cell);
    }
    puts("|");
  }
  puts(line);
}

/* The rows as a table, or (simple) as "a, b, c" lines. */
static void rows_out(const char *const *head, int ncols, const char *const *cells, size_t nrows) {
  if (ctl_display.format == CTL_TABLE) {
    table(head, ncols, cells, nrows);
    return;
  }
  for (size_t r = 0; r < nrows; r++)
    for (int c = 0; c < ncols; c++)
      printf("%s%s", cells[r * (size_t)ncols + (size_t)c], c + 1 < ncols ? ", " : "\n");
}

/* Table cells: a formatted string, a list joined; memory until exit. */
static const char *cellf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *cellf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = ctl_alloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}
static const char *join(const char *const *v, size_t n, const char *sep) {
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(v[i]) + strlen(sep);
  char *s = ctl_alloc(len);
  s[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(s, sep);
    strcat(s, v[i]);
  }
  return s;
}
static const char **cells_new(size_t nrows, int ncols) {
  return ctl_alloc((nrows ? nrows : 1) * (size_t)ncols * sizeof(const char *));
}

/* One endpoint's entry of etcdctl's JSON arrays (endpoint status, hashkv):
 * {"Endpoint":..., name:{"header":..., ...}}; ep_end closes it. */
static void ep_begin(const char *endpoint, const char *name, const ketch_header *h) {
  jopen(NULL, '{');
  jstr("Endpoint", endpoint, false);
  jopen(name, '{');
  hdr(h);
}
static void ep_end(void) {
  jclose('}');
  jclose('}');
}
/* Closes etcdctl's JSON array and ends its line. */
static void jend_array(void) {
  jclose(']');
  putchar('\n');
}

/* n records (size bytes apart) as etcdctl prints a list of them: one JSON
 * array, or the fields format's lines with a blank line after each. */
static void records(const struct fld *f, const void *v, size_t n, size_t size) {
  bool json = ctl_display.format == CTL_JSON;
  if (json)
    jbegin('[');
  for (size_t i = 0; i < n; i++) {
    fobj(NULL, f, (const char *)v + i * size, "");
    if (!json)
      putchar('\n');
  }
  if (json)
    jend_array();
}

static const struct fld status_json_f[] = {
    FLD("version", NULL, F_STR, F_OMIT, ketch_status_result, version),
    FLD("dbSize", NULL, F_I64, F_OMIT, ketch_status_result, db_size),
    FLD("leader", NULL, F_U64, F_OMIT, ketch_status_result, leader),
    FLD("raftIndex", NULL, F_U64, F_OMIT, ketch_status_result, raft_index),
    FLD("raftTerm", NULL, F_U64, F_OMIT, ketch_status_result, raft_term),
    FLD("raftAppliedIndex", NULL, F_U64, F_OMIT, ketch_status_result, raft_applied_index),
    FLD("errors", NULL, F_STRS, F_OMIT, ketch_status_result, errors),
    FLD("dbSizeInUse", NULL, F_I64, F_OMIT, ketch_status_result, db_size_in_use),
    FLD("isLearner", NULL, F_BOOL, F_OMIT, ketch_status_result, is_learner),
    {0},
};
/* etcdctl's fields printer has its own order (then Errors, Endpoint). */
static const struct fld status_fields_f[] = {
    FLD(NULL, "Version", F_QSTR, 0, ketch_status_result, version),
    FLD(NULL, "DBSize", F_I64, 0, ketch_status_result, db_size),
    FLD(NULL, "Leader", F_U64, 0, ketch_status_result, leader),
    FLD(NULL, "IsLearner", F_BOOL, 0, ketch_status_result, is_learner),
    FLD(NULL, "RaftIndex", F_U64, 0, ketch_status_result, raft_index),
    FLD(NULL, "RaftTerm", F_U64, 0, ketch_status_result, raft_term),
    FLD(NULL, "RaftAppliedIndex", F_U64, 0, ketch_status_result, raft_applied_index),
    {0},
};

void ctl_print_status(const struct ctl_ep_status *s, size_t n) {
  if (ctl_display.format == CTL_JSON) {
    jbegin('[');
    for (size_t i = 0; i < n; i++) {
      ep_begin(s[i].endpoint, "Status", &s[i].res->header);
      flds(status_json_f, &s[i].res->status, "");
      ep_end();
    }
    jend_array();
    return;
  }
  if (ctl_display.format == CTL_FIELDS) {
    for (size_t i = 0; i < n; i++) {
      const ketch_status_result *st = &s[i].res->status;
      hdr(&s[i].res->header);
      flds(status_fields_f, st, "");
      printf("\"Errors\" : [%s]\n\"Endpoint\" : ", join(st->errors, st->n_errors, " "));
      ctl_goquote(stdout, s[i].endpoint, strlen(s[i].endpoint));
      printf("\n\n");
    }
    return;
  }
  static const char *const head[] = {"endpoint",           "ID",         "version",   "db size",
                                     "is leader",          "is learner", "raft term", "raft index",
                                     "raft applied index", "errors"};
  enum { NC = 10 };
  const char **cells = cells_new(n, NC);
  for (size_t i = 0; i < n; i++) {
    const ketch_status_result *st = &s[i].res->status;
    const ketch_header *h = &s[i].res->header;
    char size[64];
    ctl_humanize_bytes(size, sizeof size, (uint64_t)st->db_size);
    const char *row[NC] = {s[i].endpoint,
                           cellf("%" PRIx64, h->member_id),
                           st->version,
                           cellf("%s", size),
                           st->leader == h->member_id ? "true" : "false",
                           st->is_learner ? "true" : "false",
                           cellf("%" PRIu64, st->raft_term),
                           cellf("%" PRIu64, st->raft_index),
                           cellf("%" PRIu64, st->raft_applied_index),
                           join(st->errors, st->n_errors, ", ")};
    memcpy(&cells[i * NC], row, sizeof row);
  }
  rows_out(head, NC, cells, n);
}

/* ---- maintenance: endpoint hashkv, alarm list / disarm ---- */

void ctl_print_hashkv(const struct ctl_ep_hashkv *h, size_t n) {
  if (ctl_display.format == CTL_JSON) {
    jbegin('[');
    for (size_t i = 0; i < n; i++) {
      const ketch_hash_kv_result *r = &h[i].res->hash_kv;
      ep_begin(h[i].endpoint, "HashKV", &h[i].res->header);
      juint("hash", r->hash);
      /* etcd reports -1 for a store never compacted */
      jint("compact_revision", r->compact_revision ? r->compact_revision : -1);
      ep_end();
    }
    jend_array();
    return;
  }
  if (ctl_display.format == CTL_FIELDS) {
    for (size_t i = 0; i < n; i++) {
      hdr(&h[i].res->header);
      printf("\"Endpoint\" : ");
      ctl_goquote(stdout, h[i].endpoint, strlen(h[i].endpoint));
      printf("\n\"Hash\" : %" PRIu32 "\n\n", h[i].res->hash_kv.hash);
    }
    return;
  }
  static const char *const head[] = {"endpoint", "hash"};
  const char **cells = cells_new(n, 2);
  for (size_t i = 0; i < n; i++) {
    cells[2 * i] = h[i].endpoint;
    cells[2 * i + 1] = cellf("%" PRIu32, h[i].res->hash_kv.hash);
  }
  rows_out(head, 2, cells, n);
}

static const struct fld alarm_f[] = {
    FLD("memberID", "MemberID", F_U64, F_OMIT, ketch_alarm_member, member_id),
    FLD("alarm", NULL, F_INT, F_OMIT, ketch_alarm_member, alarm),
    {0},
};

/* etcdctl prints *pb.AlarmMember with %+v (gogo's compact text, trailing
 * space) and its JSON without a header (etcd 3.4's AlarmResponse has none). */
void ctl_print_alarms(const ketch_result *res) {
  static const char *const names[] = {"NONE", "NOSPACE", "CORRUPT"};
  const ketch_alarm_result *a = &res->alarm;
  refuse_table();
  if (ctl_display.format == CTL_JSON) {
    jbegin('{');
    if (a->n_alarms) {
      jopen("alarms", '[');
      for (size_t i = 0; i < a->n_alarms; i++) {
        fobj(NULL, alarm_f, &a->alarms[i], "");
      }
      jclose(']');
    }
    jend();
    return;
  }
  if (ctl_display.format == CTL_FIELDS)
    hdr(&res->header);
  for (size_t i = 0; i < a->n_alarms; i++) {
    const char *name =
        a->alarms[i].alarm >= 0 && a->alarms[i].alarm <= 2 ? names[a->alarms[i].alarm] : "NONE";
    if (ctl_display.format == CTL_FIELDS) {
      flds(alarm_f, &a->alarms[i], "");
      printf("\"AlarmType\" : %s\n", name);
    } else {
      printf("memberID:%" PRIu64 " alarm:%s \n", a->alarms[i].member_id, name);
    }
  }
}

static const struct fld health_f[] = {
    FLD("endpoint", "Endpoint", F_QSTR, 0, struct ctl_ep_health, endpoint),
    FLD("health", "Health", F_BOOL, 0, struct ctl_ep_health, health),
    FLD("took", "Took", F_CHARS, 0, struct ctl_ep_health, took),
    FLD("error", "Error", F_STR, F_OMIT, struct ctl_ep_health, error),
    {0},
};

void ctl_print_health(const struct ctl_ep_health *h, size_t n) {
  switch (ctl_display.format) {
  case CTL_SIMPLE: /* etcdctl writes these lines to stderr */
    for (size_t i = 0; i < n; i++) {
      if (!h[i].error[0])
        fprintf(stderr, "%s is healthy: successfully committed proposal: took = %s\n",
                h[i].endpoint, h[i].took);
      else
        fprintf(stderr, "%s is unhealthy: failed to commit proposal: %s\n", h[i].endpoint,
                h[i].error);
    }
    return;
  case CTL_JSON:
  case CTL_FIELDS:
    records(health_f, h, n, sizeof *h);
    return;
  }
  static const char *const head[] = {"endpoint", "health", "took", "error"};
  const char **cells = cells_new(n, 4);
  for (size_t i = 0; i < n; i++) {
    cells[i * 4] = h[i].endpoint;
    cells[i * 4 + 1] = h[i].health ? "true" : "false";
    cells[i * 4 + 2] = h[i].took;
    cells[i * 4 + 3] = h[i].error;
  }
  rows_out(head, 4, cells, n);
}

/* ---- member list (etcdctl's makeMemberListTable and printers) ---- */

/* etcd's Member: JSON omits empty fields; the fields format prints one line
 * per URL. */
static const struct fld member_f[] = {
    FLD("ID", "ID", F_U64, F_OMIT, ketch_member, id),
    FLD("name", "Name", F_QSTR, F_OMIT, ketch_member, name),
    FLD("peerURLs", "PeerURL", F_STRS, F_OMIT, ketch_member, peer_urls),
    FLD("clientURLs", "ClientURL", F_STRS, F_OMIT, ketch_member, client_urls),
    FLD("isLearner", "IsLearner", F_BOOL, F_OMIT, ketch_member, is_learner),
    {0},
};

/* {"header":..., ["member":...,] "members":[...]} */
static void json_members(const ketch_header *h, const ketch_member_list_result *r) {
  jbegin('{');
  hdr(h);
  if (r->added)
    fobj("member", member_f, r->added, "");
  if (r->n_members) {
    jopen("members", '[');
    for (size_t i = 0; i < r->n_members; i++)
      fobj(NULL, member_f, &r->members[i], "");
    jclose(']');
  }
  jend();
}

/* etcdctl's member add/remove/update/promote printers: simple and json only
 * (the others fail after the change was made, as etcdctl). For add, `name`
 * and `peer_urls` are the command line's: the env lines a new member starts
 * with (KETCH_ names for ETCD_ ones). */
void ctl_print_member_change(const ketch_result *res, const char *name, const char *peer_urls) {
  const ketch_member_list_result *r = &res->member_list;
  if (ctl_display.format == CTL_JSON) {
    json_members(&res->header, r);
    return;
  }
  if (ctl_display.format != CTL_SIMPLE)
    refuse(ctl_display.format == CTL_TABLE ? "table" : "fields");
  uint64_t cid = res->header.cluster_id;
  switch (res->type) {
  case KETCH_OP_MEMBER_ADD: {
    const ketch_member *m = r->added;
    printf("Member %16" PRIx64 " added%sto cluster %16" PRIx64 "\n", m ? m->id : 0,
           m && m->is_learner ? " as learner " : " ", cid);
    printf("\nKETCH_NAME=");
    ctl_goquote(stdout, name, strlen(name));
    printf("\nKETCH_INITIAL_CLUSTER=\"");
    bool first = true;
    for (size_t i = 0; i < r->n_members; i++) {
      const ketch_member *x = &r->members[i];
      const char *nm = m && x->id == m->id ? name : x->name;
      for (size_t k = 0; k < x->n_peer_urls; k++, first = false)
        printf("%s%s=%s", first ? "" : ",", nm, x->peer_urls[k]);
    }
    printf("\"\nKETCH_INITIAL_ADVERTISE_PEER_URLS=");
    ctl_goquote(stdout, peer_urls, strlen(peer_urls));
    printf("\nKETCH_INITIAL_CLUSTER_STATE=\"existing\"\n");
    return;
  }
  case KETCH_OP_MEMBER_REMOVE:
    printf("Member %16" PRIx64 " removed from cluster %16" PRIx64 "\n", ctl_member_id, cid);
    return;
  case KETCH_OP_MEMBER_UPDATE:
    printf("Member %16" PRIx64 " updated in cluster %16" PRIx64 "\n", ctl_member_id, cid);
    return;
  default:
    printf("Member %16" PRIx64 " promoted in cluster %16" PRIx64 "\n", ctl_member_id, cid);
    return;
  }
}

void ctl_print_member_list(const ketch_header *h, const ketch_member_list_result *r) {
  if (ctl_display.format == CTL_JSON) {
    json_members(h, r);
    return;
  }
  if (ctl_display.format == CTL_FIELDS) {
    hdr(h);
    records(member_f, r->members, r->n_members, sizeof *r->members);
    return;
  }
  static const char *const head[] = {"ID",         "Status",       "Name",
                                     "Peer Addrs", "Client Addrs", "Is Learner"};
  enum { NC = 6 };
  size_t n = r->n_members;
  const char **cells = cells_new(n, NC);
  for (size_t i = 0; i < n; i++) {
    const ketch_member *m = &r->members[i];
    const char *row[NC] = {cellf("%" PRIx64, m->id),
                           m->name[0] ? "started" : "unstarted",
                           m->name,
                           join(m->peer_urls, m->n_peer_urls, ","),
                           join(m->client_urls, m->n_client_urls, ","),
                           m->is_learner ? "true" : "false"};
    memcpy(&cells[i * NC], row, sizeof row);
  }
  rows_out(head, NC, cells, n);
}

/* ---- lease (etcdctl's printer.go / printer_simple.go / printer_fields.go) ---- */

/* The JSON names of clientv3's LeaseGrantResponse / LeaseKeepAliveResponse
 * (no omitempty), and of its LeaseTimeToLiveResponse. */
static const struct fld lease_f[] = {
    FLD("ID", "ID", F_I64, 0, ketch_lease_result, id),
    FLD("TTL", "TTL", F_I64, 0, ketch_lease_result, ttl),
    {0},
};
static const struct fld lease_ttl_f[] = {
    FLD("id", "ID", F_I64, 0, ketch_lease_result, id),
    FLD("ttl", "TTL", F_I64, 0, ketch_lease_result, ttl),
    FLD("granted-ttl", "GrantedTTL", F_I64, 0, ketch_lease_result, granted_ttl),
    {0},
};

void ctl_print_lease_grant(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  obj_begin(&res->header, true, lease_f, l);
  if (ctl_display.format == CTL_SIMPLE)
    printf("lease %016" PRIx64 " granted with TTL(%" PRId64 "s)\n", (uint64_t)l->id, l->ttl);
  else if (ctl_display.format == CTL_JSON)
    jstr("Error", "", false);
  obj_end();
}

void ctl_print_lease_keepalive(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  obj_begin(&res->header, true, lease_f, l);
  if (ctl_display.format == CTL_SIMPLE)
    printf("lease %016" PRIx64 " keepalived with TTL(%" PRId64 ")\n", (uint64_t)l->id, l->ttl);
  obj_end();
}

void ctl_print_lease_revoke(const ketch_result *res, int64_t id) {
  obj_begin(&res->header, false, NULL, NULL);
  if (ctl_display.format == CTL_SIMPLE)
    printf("lease %016" PRIx64 " revoked\n", (uint64_t)id);
  obj_end();
}

void ctl_print_lease_ttl(const ketch_result *res, bool keys) {
  const ketch_lease_result *l = &res->lease;
  obj_begin(&res->header, true, lease_ttl_f, l);
  if (ctl_display.format == CTL_SIMPLE) {
    if (l->granted_ttl == 0 && l->ttl == -1) {
      printf("lease %016" PRIx64 " already expired\n", (uint64_t)l->id);
      return;
    }
    printf("lease %016" PRIx64 " granted with TTL(%" PRId64 "s), remaining(%" PRId64 "s)",
           (uint64_t)l->id, l->granted_ttl, l->ttl);
    if (keys) {
      fputs(", attached keys([", stdout);
      for (size_t i = 0; i < l->n_keys; i++) {
        if (i)
          putchar(' ');
        fwrite(l->keys[i].key, 1, l->keys[i].key_len, stdout);
      }
      fputs("])", stdout);
    }
    putchar('\n');
  } else if (ctl_display.format == CTL_JSON) {
    if (l->n_keys) {
      jopen("keys", '[');
      for (size_t i = 0; i < l->n_keys; i++) {
        if (l->keys[i].key_len) {
          jbytes(NULL, l->keys[i].key, l->keys[i].key_len);
        } else {
          jkey(NULL);
          fputs("\"\"", stdout);
        }
      }
      jclose(']');
    } else {
      jkey("keys");
      fputs("null", stdout);
    }
  } else {
    for (size_t i = 0; i < l->n_keys; i++) {
      fputs("\"Key\" : ", stdout);
      ctl_goquote(stdout, l->keys[i].key, l->keys[i].key_len);
      putchar('\n');
    }
  }
  obj_end();
}

void ctl_print_lease_list(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  obj_begin(&res->header, true, NULL, NULL);
  if (ctl_display.format == CTL_SIMPLE) {
    printf("found %zu leases\n", l->n_leases);
    for (size_t i = 0; i < l->n_leases; i++)
      printf("%016" PRIx64 "\n", (uint64_t)l->leases[i]);
  } else if (ctl_display.format == CTL_JSON) {
    jopen("leases", '[');
    for (size_t i = 0; i < l->n_leases; i++) {
      jopen(NULL, '{');
      jnum("id", l->leases[i]);
      jclose('}');
    }
    jclose(']');
  } else {
    for (size_t i = 0; i < l->n_leases; i++)
      printf("\"ID\" : %" PRId64 "\n", l->leases[i]);
  }
  obj_end();
}

/* ---- watch ---- */

static const struct fld watch_f[] = {
    FLD("CompactRevision", NULL, F_I64, 0, ketch_watch_result, compact_revision),
    FLD("Canceled", NULL, F_BOOL, 0, ketch_watch_result, canceled),
    FLD("Created", NULL, F_BOOL, 0, ketch_watch_result, created),
    {0},
};

void ctl_print_watch(const ketch_result *res) {
  const ketch_watch_result *w = &res->watch;
  bool progress = !w->created && !w->canceled && !w->n_events;
  if (progress)
    printf("progress notify: %" PRId64 "\n", res->header.revision);
  refuse_table();
  if (ctl_display.format == CTL_JSON) {
    jbegin('{');
    fobj("Header", hdr_f, &res->header, "");
    jopen("Events", '[');
  } else if (ctl_display.format == CTL_FIELDS) {
    hdr(&res->header);
  }
  for (size_t i = 0; i < w->n_events; i++) {
    const ketch_event *e = &w->events[i];
    const char *type = e->type == KETCH_EVENT_DELETE ? "DELETE" : "PUT";
    if (ctl_display.format == CTL_JSON) {
      jopen(NULL, '{');
      jint("type", e->type);
      kv(&e->kv, "", "kv");
      if (e->prev_kv)
        kv(e->prev_kv, "Prev", "prev_kv");
      jclose('}');
      continue;
    }
    if (ctl_display.format == CTL_SIMPLE)
      puts(type);
    else
      printf("\"Type\" : %s\n", type);
    if (e->prev_kv)
      kv(e->prev_kv, "Prev", NULL);
    kv(&e->kv, "", NULL);
  }
  if (ctl_display.format == CTL_JSON) {
    jclose(']');
    flds(watch_f, w, "");
    jend();
  }
  fflush(stdout);
}

/* ---- user, role, auth (etcdctl's printer_simple / printer_fields / JSON of
 * the pb responses; table refused; fields refused for user get / list) ---- */

/* clientv3.GetPrefixRangeEnd(key) == end */
static bool is_prefix_end(const char *key, size_t kn, const char *end, size_t en) {
  size_t i = kn;
  while (i > 0 && (unsigned char)key[i - 1] == 0xff)
    i--;
  if (i == 0) /* no prefix end: "\0" */
    return en == 1 && end[0] == 0;
  return en == i && !memcmp(key, end, i - 1) &&
         (unsigned char)end[i - 1] == (unsigned char)key[i - 1] + 1;
}

static void perm_range(const ketch_auth_perm *p) {
  if (!(p->range_end_len == 1 && p->range_end[0] == 0))
    printf("\t[%.*s, %.*s)", (int)p->key_len, p->key, (int)p->range_end_len, p->range_end);
  else
    printf("\t[%.*s, <open ended>", (int)p->key_len, p->key);
  if (is_prefix_end(p->key, p->key_len, p->range_end, p->range_end_len))
    printf(" (prefix %.*s)", (int)p->key_len, p->key);
  printf("\n");
}

static void role_get_simple(const char *role, const ketch_auth_result *a) {
  printf("Role %s\nKV Read:\n", role);
  for (int w = 0; w < 2; w++) {
    if (w)
      printf("KV Write:\n");
    for (size_t i = 0; i < a->n_perms; i++) {
      const ketch_auth_perm *p = &a->perms[i];
      if (p->perm_type != (w ? KETCH_PERM_WRITE : KETCH_PERM_READ) &&
          p->perm_type != KETCH_PERM_READWRITE)
        continue;
      if (!p->range_end_len)
        printf("\t%.*s\n", (int)p->key_len, p->key);
      else
        perm_range(p);
    }
  }
}

static const struct fld auth_status_f[] = {
    FLD("enabled", "Enabled", F_BOOL, F_OMIT, ketch_auth_result, enabled),
    FLD("authRevision", "AuthRevision", F_U64, F_OMIT, ketch_auth_result, auth_revision),
    {0},
};
/* authpb.Permission; the fields format names the type first (by hand). */
static const struct fld perm_f[] = {
    FLD("permType", NULL, F_INT, F_OMIT, ketch_auth_perm, perm_type),
    FLD("key", "Key", F_BYTES, 0, ketch_auth_perm, key),
    FLD("range_end", "RangeEnd", F_BYTES, 0, ketch_auth_perm, range_end),
    {0},
};

/* The JSON and fields forms of an Auth answer. */
static void auth_structured(const ketch_result *res) {
  static const char *const perm_names[] = {"READ", "WRITE", "READWRITE"};
  const ketch_auth_result *a = &res->auth;
  int op = res->type;
  bool json = ctl_display.format == CTL_JSON;
  obj_begin(&res->header, false, NULL, NULL);
  if (op == KETCH_OP_AUTH_STATUS) {
    flds(auth_status_f, a, "");
  } else if (json && (op == KETCH_OP_USER_GET || op == KETCH_OP_ROLE_LIST)) {
    jnames("roles", a->roles, a->n_roles);
  } else if (json && op == KETCH_OP_USER_LIST) {
    jnames("users", a->users, a->n_users);
  } else if (op == KETCH_OP_ROLE_LIST) {
    printf("\"Roles\" :");
    for (size_t i = 0; i < a->n_roles; i++) {
      putchar(' ');
      ctl_goquote(stdout, a->roles[i], strlen(a->roles[i]));
    }
    putchar('\n');
  } else if (op == KETCH_OP_ROLE_GET && (a->n_perms || !json)) {
    if (json)
      jopen("perm", '[');
    for (size_t i = 0; i < a->n_perms; i++) {
      int t = a->perms[i].perm_type;
      if (!json)
        printf("\"PermType\" :  %s\n", t >= 0 && t <= 2 ? perm_names[t] : "READ");
      fobj(NULL, perm_f, &a->perms[i], "");
    }
    if (json)
      jclose(']');
  }
  obj_end();
}

void ctl_print_auth(const struct ctl_auth_out *o) {
  const ketch_result *res = o->res;
  const ketch_auth_result *a = &res->auth;
  int op = res->type;
  if (ctl_display.format == CTL_TABLE)
    refuse("table");
  if (ctl_display.format == CTL_FIELDS && (op == KETCH_OP_USER_GET || op == KETCH_OP_USER_LIST))
    refuse("fields");
  if (ctl_display.format != CTL_SIMPLE) {
    auth_structured(res);
    return;
  }
  switch (op) {
  case KETCH_OP_USER_ADD:
    printf("User %s created\n", o->name);
    break;
  case KETCH_OP_USER_GET:
    printf("User: %s\nRoles:", o->name);
    for (size_t i = 0; i < a->n_roles; i++)
      printf(" %s", a->roles[i]);
    printf("\n");
    break;
  case KETCH_OP_USER_LIST:
    for (size_t i = 0; i < a->n_users; i++)
      printf("%s\n", a->users[i]);
    break;
  case KETCH_OP_USER_DELETE:
    printf("User %s deleted\n", o->name);
    break;
  case KETCH_OP_USER_CHANGE_PASSWORD:
    printf("Password updated\n");
    break;
  case KETCH_OP_USER_GRANT_ROLE:
    printf("Role %s is granted to user %s\n", o->role, o->name);
    break;
  case KETCH_OP_USER_REVOKE_ROLE:
    printf("Role %s is revoked from user %s\n", o->role, o->name);
    break;
  case KETCH_OP_ROLE_ADD:
    printf("Role %s created\n", o->name);
    break;
  case KETCH_OP_ROLE_GET:
    role_get_simple(o->name, a);
    break;
  case KETCH_OP_ROLE_LIST:
    for (size_t i = 0; i < a->n_roles; i++)
      printf("%s\n", a->roles[i]);
    break;
  case KETCH_OP_ROLE_DELETE:
    printf("Role %s deleted\n", o->name);
    break;
  case KETCH_OP_ROLE_GRANT_PERMISSION:
    printf("Role %s updated\n", o->name);
    break;
  case KETCH_OP_ROLE_REVOKE_PERMISSION:
    if (!o->end_len)
      printf("Permission of key %s is revoked from role %s\n", o->key, o->name);
    else if (!(o->end_len == 1 && o->end[0] == 0))
      printf("Permission of range [%s, %.*s) is revoked from role %s\n", o->key, (int)o->end_len,
             o->end, o->name);
    else
      printf("Permission of range [%s, <open ended> is revoked from role %s\n", o->key, o->name);
    break;
  case KETCH_OP_AUTH_STATUS: /* etcdctl 3.5's (3.4 has no auth status) */
    printf("Authentication Status: %s\nAuthRevision: %" PRIu64 "\n", a->enabled ? "true" : "false",
           a->auth_revision);
    break;
  default:
    break;
  }
}
