/* tools/ketchctl/print.c — all of ketchctl's output formats, as etcdctl 3.4 prints them.
 *
 * One place prints a response header (hdr) and one place prints a key-value
 * (kv) in each format; the per-command printers only arrange them:
 *   simple  printKV: key line, value line (\xNN with --hex); put "OK"; del the
 *           count; txn SUCCESS/FAILURE and a blank line before each response.
 *   json    Go's encoding/json of etcd's protobuf structs: snake_case fields,
 *           zero values omitted (omitempty), bytes as base64, uint64 as numbers.
 *   fields  "Name" : value lines, strings in Go's %q quoting.
 *   table   only endpoint status/health (olekukonko/tablewriter's layout);
 *           other commands refuse it with exit 4, after the request ran.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

struct ctl_display ctl_display;

/* ---- Go-compatible text helpers ---- */

void ctl_goquote(FILE *f, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      switch (c) {
      case '"':
        fputs("\\\"", f);
        continue;
      case '\\':
        fputs("\\\\", f);
        continue;
      case '\a':
        fputs("\\a", f);
        continue;
      case '\b':
        fputs("\\b", f);
        continue;
      case '\f':
        fputs("\\f", f);
        continue;
      case '\n':
        fputs("\\n", f);
        continue;
      case '\r':
        fputs("\\r", f);
        continue;
      case '\t':
        fputs("\\t", f);
        continue;
      case '\v':
        fputs("\\v", f);
        continue;
      }
      if (c < 0x20 || c == 0x7f)
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
static void jbool(const char *k, bool v, bool omitempty) {
  if (v || !omitempty) {
    jkey(k);
    fputs(v ? "true" : "false", stdout);
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

static void json_begin(void) { jbegin('{'); }

/* ---- the one header printer and the one key-value printer ---- */

static void hdr(const ketch_header *h) {
  switch (ctl_display.format) {
  case CTL_JSON:
    jopen("header", '{');
    juint("cluster_id", h->cluster_id);
    juint("member_id", h->member_id);
    jint("revision", h->revision);
    juint("raft_term", h->raft_term);
    jclose('}');
    break;
  case CTL_FIELDS:
    printf("\"ClusterID\" : %" PRIu64 "\n\"MemberID\" : %" PRIu64 "\n", h->cluster_id,
           h->member_id);
    printf("\"Revision\" : %" PRId64 "\n\"RaftTerm\" : %" PRIu64 "\n", h->revision, h->raft_term);
    break;
  }
}

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
  case CTL_JSON:
    jopen(json_key, '{');
    jbytes("key", kv->key, kv->key_len);
    jint("create_revision", kv->create_revision);
    jint("mod_revision", kv->mod_revision);
    jint("version", kv->version);
    jbytes("value", kv->value, kv->value_len);
    jint("lease", kv->lease);
    jclose('}');
    break;
  case CTL_FIELDS:
    printf("\"%sKey\" : ", pfx);
    ctl_goquote(stdout, kv->key, kv->key_len);
    printf("\n\"%sCreateRevision\" : %" PRId64 "\n", pfx, kv->create_revision);
    printf("\"%sModRevision\" : %" PRId64 "\n", pfx, kv->mod_revision);
    printf("\"%sVersion\" : %" PRId64 "\n\"%sValue\" : ", pfx, kv->version, pfx);
    ctl_goquote(stdout, kv->value, kv->value_len);
    printf("\n\"%sLease\" : %" PRId64 "\n", pfx, kv->lease);
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

static void refuse_table(void) {
  if (ctl_display.format == CTL_TABLE)
    ctl_die(CTL_EXIT_BAD_FEATURE, "table not supported as output format");
}

/* ---- responses; `top` wraps the JSON object and ends the line ---- */

static void body_range(const ketch_header *h, const ketch_range_result *r) {
  hdr(h);
  kv_list(r->kvs, r->n_kvs, "kvs");
  if (ctl_display.format == CTL_JSON) {
    jbool("more", r->more, true);
    jint("count", r->count);
  } else if (ctl_display.format == CTL_FIELDS) {
    printf("\"More\" : %s\n\"Count\" : %" PRId64 "\n", r->more ? "true" : "false", r->count);
  }
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
  if (ctl_display.format == CTL_JSON)
    jint("deleted", r->deleted);
  else if (ctl_display.format == CTL_FIELDS)
    printf("\"Deleted\" : %" PRId64 "\n", r->deleted);
  kv_list(r->prev_kvs, r->n_prev_kvs, "prev_kvs");
}

static bool txn_wrote(const ketch_txn_result *r) {
  for (size_t i = 0; i < r->n_responses; i++) {
    const ketch_op_result *o = &r->responses[i];
    if (o->type == KETCH_OP_PUT || (o->type == KETCH_OP_DELETE && o->del.deleted > 0) ||
        (o->type == KETCH_OP_TXN && txn_wrote(&o->txn)))
      return true;
  }
  return false;
}

/* etcd gives each txn response a header carrying only the revision, as the
 * txn saw it when the op ran: the revision before the txn until its first
 * write, the txn's revision from then on. *wrote tracks that point. */
static void body_txn(const ketch_header *h, const ketch_txn_result *r, int64_t before,
                     bool *wrote) {
  if (ctl_display.format == CTL_SIMPLE)
    puts(r->succeeded ? "SUCCESS" : "FAILURE");
  hdr(h);
  if (ctl_display.format == CTL_JSON) {
    jbool("succeeded", r->succeeded, true);
    if (r->n_responses)
      jopen("responses", '[');
  } else if (ctl_display.format == CTL_FIELDS) {
    printf("\"Succeeded\" : %s\n", r->succeeded ? "true" : "false");
  }
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
    if (o->type == KETCH_OP_PUT || (o->type == KETCH_OP_DELETE && o->del.deleted > 0) ||
        (o->type == KETCH_OP_TXN && txn_wrote(&o->txn)))
      *wrote = true;
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
  if (ctl_display.format == CTL_JSON) {
    jbegin('{');
  }
}
static void top_end(void) {
  if (ctl_display.format == CTL_JSON) {
    jclose('}');
    putchar('\n');
  }
}

void ctl_print_range(const ketch_header *h, const ketch_range_result *r) {
  top_begin();
  body_range(h, r);
  top_end();
}
void ctl_print_put(const ketch_header *h, const ketch_put_result *r) {
  top_begin();
  body_put(h, r);
  top_end();
}
void ctl_print_delete(const ketch_header *h, const ketch_delete_result *r) {
  top_begin();
  body_delete(h, r);
  top_end();
}
void ctl_print_txn(const ketch_header *h, const ketch_txn_result *r) {
  bool wrote = false;
  top_begin();
  body_txn(h, r, txn_wrote(r) ? h->revision - 1 : h->revision, &wrote);
  top_end();
}

/* ---- endpoint status / health: rows as etcdctl's make*Table ---- */

#define MAXCOLS 10

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
  size_t w[MAXCOLS];
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

static void rows_out(const char *const *head, int ncols, const char *const *cells, size_t nrows) {
  if (ctl_display.format == CTL_TABLE) {
    table(head, ncols, cells, nrows);
    return;
  }
  for (size_t r = 0; r < nrows; r++)
    for (int c = 0; c < ncols; c++)
      printf("%s%s", cells[r * (size_t)ncols + (size_t)c], c + 1 < ncols ? ", " : "\n");
}

void ctl_print_status(const struct ctl_ep_status *s, size_t n) {
  if (ctl_display.format == CTL_JSON) {
    jbegin('[');
    for (size_t i = 0; i < n; i++) {
      const ketch_status_result *st = &s[i].res->status;
      jopen(NULL, '{');
      jstr("Endpoint", s[i].endpoint, false);
      jopen("Status", '{');
      hdr(&s[i].res->header);
      jstr("version", st->version, true);
      jint("dbSize", st->db_size);
      juint("leader", st->leader);
      juint("raftIndex", st->raft_index);
      juint("raftTerm", st->raft_term);
      juint("raftAppliedIndex", st->raft_applied_index);
      if (st->n_errors) {
        jopen("errors", '[');
        for (size_t e = 0; e < st->n_errors; e++)
          jstr(NULL, st->errors[e], false);
        jclose(']');
      }
      jint("dbSizeInUse", st->db_size_in_use);
      jbool("isLearner", st->is_learner, true);
      jclose('}');
      jclose('}');
    }
    jclose(']');
    putchar('\n');
    return;
  }
  if (ctl_display.format == CTL_FIELDS) {
    for (size_t i = 0; i < n; i++) {
      const ketch_status_result *st = &s[i].res->status;
      hdr(&s[i].res->header);
      printf("\"Version\" : ");
      ctl_goquote(stdout, st->version, strlen(st->version));
      printf("\n\"DBSize\" : %" PRId64 "\n\"Leader\" : %" PRIu64 "\n", st->db_size, st->leader);
      printf("\"IsLearner\" : %s\n", st->is_learner ? "true" : "false");
      printf("\"RaftIndex\" : %" PRIu64 "\n\"RaftTerm\" : %" PRIu64 "\n", st->raft_index,
             st->raft_term);
      printf("\"RaftAppliedIndex\" : %" PRIu64 "\n\"Errors\" : [", st->raft_applied_index);
      for (size_t e = 0; e < st->n_errors; e++)
        printf("%s%s", e ? " " : "", st->errors[e]);
      printf("]\n\"Endpoint\" : ");
      ctl_goquote(stdout, s[i].endpoint, strlen(s[i].endpoint));
      printf("\n\n");
    }
    return;
  }
  static const char *const head[] = {"endpoint",           "ID",         "version",   "db size",
                                     "is leader",          "is learner", "raft term", "raft index",
                                     "raft applied index", "errors"};
  enum { NC = 10, W = 64 };
  char(*buf)[NC][W] = calloc(n ? n : 1, sizeof *buf);
  const char **cells = calloc(n ? n * NC : 1, sizeof *cells);
  char *errs[64] = {0};
  if (!buf || !cells)
    ctl_die(CTL_EXIT_ERROR, "out of memory");
  for (size_t i = 0; i < n && i < 64; i++) {
    const ketch_status_result *st = &s[i].res->status;
    const ketch_header *h = &s[i].res->header;
    snprintf(buf[i][1], W, "%" PRIx64, h->member_id);
    ctl_humanize_bytes(buf[i][3], W, (uint64_t)st->db_size);
    snprintf(buf[i][4], W, "%s", st->leader == h->member_id ? "true" : "false");
    snprintf(buf[i][5], W, "%s", st->is_learner ? "true" : "false");
    snprintf(buf[i][6], W, "%" PRIu64, st->raft_term);
    snprintf(buf[i][7], W, "%" PRIu64, st->raft_index);
    snprintf(buf[i][8], W, "%" PRIu64, st->raft_applied_index);
    size_t len = 1;
    for (size_t e = 0; e < st->n_errors; e++)
      len += strlen(st->errors[e]) + 2;
    errs[i] = calloc(1, len);
    if (!errs[i])
      ctl_die(CTL_EXIT_ERROR, "out of memory");
    for (size_t e = 0; e < st->n_errors; e++) {
      if (e)
        strcat(errs[i], ", ");
      strcat(errs[i], st->errors[e]);
    }
    const char *row[NC] = {s[i].endpoint, buf[i][1], st->version, buf[i][3], buf[i][4],
                           buf[i][5],     buf[i][6], buf[i][7],   buf[i][8], errs[i]};
    memcpy(&cells[i * NC], row, sizeof row);
  }
  rows_out(head, NC, cells, n < 64 ? n : 64);
  for (size_t i = 0; i < 64; i++)
    free(errs[i]);
  free(cells);
  free(buf);
}

/* ---- maintenance: endpoint hashkv, alarm list / disarm ---- */

void ctl_print_hashkv(const struct ctl_ep_hashkv *h, size_t n) {
  if (ctl_display.format == CTL_JSON) {
    jbegin('[');
    for (size_t i = 0; i < n; i++) {
      const ketch_hash_kv_result *r = &h[i].res->hash_kv;
      jopen(NULL, '{');
      jstr("Endpoint", h[i].endpoint, false);
      jopen("HashKV", '{');
      hdr(&h[i].res->header);
      juint("hash", r->hash);
      /* etcd reports -1 for a store never compacted */
      jint("compact_revision", r->compact_revision ? r->compact_revision : -1);
      jclose('}');
      jclose('}');
    }
    jclose(']');
    putchar('\n');
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
  char(*buf)[16] = calloc(n ? n : 1, sizeof *buf);
  const char **cells = calloc(n ? n * 2 : 1, sizeof *cells);
  if (!buf || !cells)
    ctl_die(CTL_EXIT_ERROR, "out of memory");
  for (size_t i = 0; i < n; i++) {
    snprintf(buf[i], sizeof buf[i], "%" PRIu32, h[i].res->hash_kv.hash);
    cells[2 * i] = h[i].endpoint;
    cells[2 * i + 1] = buf[i];
  }
  rows_out(head, 2, cells, n);
  free(cells);
  free(buf);
}

/* etcdctl prints *pb.AlarmMember with %+v (gogo's compact text, trailing
 * space) and its JSON without a header (etcd 3.4's AlarmResponse has none). */
void ctl_print_alarms(const ketch_result *res) {
  static const char *const names[] = {"NONE", "NOSPACE", "CORRUPT"};
  const ketch_alarm_result *a = &res->alarm;
  refuse_table();
  if (ctl_display.format == CTL_JSON) {
    json_begin();
    if (a->n_alarms) {
      jopen("alarms", '[');
      for (size_t i = 0; i < a->n_alarms; i++) {
        jopen(NULL, '{');
        juint("memberID", a->alarms[i].member_id);
        jint("alarm", a->alarms[i].alarm);
        jclose('}');
      }
      jclose(']');
    }
    jclose('}');
    putchar('\n');
    return;
  }
  if (ctl_display.format == CTL_FIELDS)
    hdr(&res->header);
  for (size_t i = 0; i < a->n_alarms; i++) {
    const char *name =
        a->alarms[i].alarm >= 0 && a->alarms[i].alarm <= 2 ? names[a->alarms[i].alarm] : "NONE";
    if (ctl_display.format == CTL_FIELDS)
      printf("\"MemberID\" : %" PRIu64 "\n\"AlarmType\" : %s\n", a->alarms[i].member_id, name);
    else
      printf("memberID:%" PRIu64 " alarm:%s \n", a->alarms[i].member_id, name);
  }
}

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
    jbegin('[');
    for (size_t i = 0; i < n; i++) {
      jopen(NULL, '{');
      jstr("endpoint", h[i].endpoint, false);
      jbool("health", h[i].health, false);
      jstr("took", h[i].took, false);
      jstr("error", h[i].error, true);
      jclose('}');
    }
    jclose(']');
    putchar('\n');
    return;
  case CTL_FIELDS:
    for (size_t i = 0; i < n; i++) {
      printf("\"Endpoint\" : ");
      ctl_goquote(stdout, h[i].endpoint, strlen(h[i].endpoint));
      printf("\n\"Health\" : %s\n\"Took\" : %s\n\"Error\" : %s\n\n", h[i].health ? "true" : "false",
             h[i].took, h[i].error);
    }
    return;
  }
  static const char *const head[] = {"endpoint", "health", "took", "error"};
  const char **cells = calloc(n ? n * 4 : 1, sizeof *cells);
  if (!cells)
    ctl_die(CTL_EXIT_ERROR, "out of memory");
  for (size_t i = 0; i < n; i++) {
    cells[i * 4] = h[i].endpoint;
    cells[i * 4 + 1] = h[i].health ? "true" : "false";
    cells[i * 4 + 2] = h[i].took;
    cells[i * 4 + 3] = h[i].error;
  }
  rows_out(head, 4, cells, n);
  free(cells);
}

/* ---- member list (etcdctl's makeMemberListTable and printers) ---- */

static char *join_urls(const char *const *u, size_t n) {
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(u[i]) + 1;
  char *s = ctl_alloc(len);
  s[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(s, ",");
    strcat(s, u[i]);
  }
  return s;
}

/* etcd's Member as JSON (k: its key, NULL in an array). */
static void jmember(const char *k, const ketch_member *m) {
  jopen(k, '{');
  juint("ID", m->id);
  jstr("name", m->name, true);
  if (m->n_peer_urls) {
    jopen("peerURLs", '[');
    for (size_t i = 0; i < m->n_peer_urls; i++)
      jstr(NULL, m->peer_urls[i], false);
    jclose(']');
  }
  if (m->n_client_urls) {
    jopen("clientURLs", '[');
    for (size_t i = 0; i < m->n_client_urls; i++)
      jstr(NULL, m->client_urls[i], false);
    jclose(']');
  }
  jbool("isLearner", m->is_learner, true);
  jclose('}');
}

/* {"header":..., ["member":...,] "members":[...]} */
static void json_members(const ketch_header *h, const ketch_member_list_result *r) {
  jbegin('{');
  hdr(h);
  if (r->added)
    jmember("member", r->added);
  if (r->n_members) {
    jopen("members", '[');
    for (size_t i = 0; i < r->n_members; i++)
      jmember(NULL, &r->members[i]);
    jclose(']');
  }
  jclose('}');
  putchar('\n');
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
    ctl_die(CTL_EXIT_BAD_FEATURE, "%s not supported as output format",
            ctl_display.format == CTL_TABLE ? "table" : "fields");
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
    for (size_t i = 0; i < r->n_members; i++) {
      const ketch_member *m = &r->members[i];
      printf("\"ID\" : %" PRIu64 "\n\"Name\" : ", m->id);
      ctl_goquote(stdout, m->name, strlen(m->name));
      putchar('\n');
      for (size_t k = 0; k < m->n_peer_urls; k++) {
        printf("\"PeerURL\" : ");
        ctl_goquote(stdout, m->peer_urls[k], strlen(m->peer_urls[k]));
        putchar('\n');
      }
      for (size_t k = 0; k < m->n_client_urls; k++) {
        printf("\"ClientURL\" : ");
        ctl_goquote(stdout, m->client_urls[k], strlen(m->client_urls[k]));
        putchar('\n');
      }
      printf("\"IsLearner\" : %s\n\n", m->is_learner ? "true" : "false");
    }
    return;
  }
  static const char *const head[] = {"ID",         "Status",       "Name",
                                     "Peer Addrs", "Client Addrs", "Is Learner"};
  enum { NC = 6 };
  size_t n = r->n_members;
  const char **cells = ctl_alloc((n ? n : 1) * NC * sizeof *cells);
  for (size_t i = 0; i < n; i++) {
    const ketch_member *m = &r->members[i];
    char *id = ctl_alloc(20);
    snprintf(id, 20, "%" PRIx64, m->id);
    cells[i * NC] = id;
    cells[i * NC + 1] = m->name[0] ? "started" : "unstarted";
    cells[i * NC + 2] = m->name;
    cells[i * NC + 3] = join_urls(m->peer_urls, m->n_peer_urls);
    cells[i * NC + 4] = join_urls(m->client_urls, m->n_client_urls);
    cells[i * NC + 5] = m->is_learner ? "true" : "false";
  }
  rows_out(head, NC, cells, n);
}

/* ---- lease (etcdctl's printer.go / printer_simple.go / printer_fields.go) ---- */

/* clientv3's lease responses embed *pb.ResponseHeader: in JSON its fields
 * sit at the top level. */
static void hdr_flat(const ketch_header *h) {
  juint("cluster_id", h->cluster_id);
  juint("member_id", h->member_id);
  jint("revision", h->revision);
  juint("raft_term", h->raft_term);
}

void ctl_print_lease_grant(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE) {
    printf("lease %016" PRIx64 " granted with TTL(%" PRId64 "s)\n", (uint64_t)l->id, l->ttl);
  } else if (ctl_display.format == CTL_JSON) {
    json_begin();
    hdr_flat(&res->header);
    jkey("ID");
    printf("%" PRId64, l->id);
    jkey("TTL");
    printf("%" PRId64, l->ttl);
    jstr("Error", "", false);
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
    printf("\"ID\" : %" PRId64 "\n\"TTL\" : %" PRId64 "\n", l->id, l->ttl);
  }
}

void ctl_print_lease_revoke(const ketch_result *res, int64_t id) {
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE) {
    printf("lease %016" PRIx64 " revoked\n", (uint64_t)id);
  } else if (ctl_display.format == CTL_JSON) {
    json_begin();
    hdr(&res->header);
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
  }
}

void ctl_print_lease_ttl(const ketch_result *res, bool keys) {
  const ketch_lease_result *l = &res->lease;
  refuse_table();
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
    json_begin();
    hdr_flat(&res->header);
    jkey("id");
    printf("%" PRId64, l->id);
    jkey("ttl");
    printf("%" PRId64, l->ttl);
    jkey("granted-ttl");
    printf("%" PRId64, l->granted_ttl);
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
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
    printf("\"ID\" : %" PRId64 "\n\"TTL\" : %" PRId64 "\n\"GrantedTTL\" : %" PRId64 "\n", l->id,
           l->ttl, l->granted_ttl);
    for (size_t i = 0; i < l->n_keys; i++) {
      fputs("\"Key\" : ", stdout);
      ctl_goquote(stdout, l->keys[i].key, l->keys[i].key_len);
      putchar('\n');
    }
  }
}

void ctl_print_lease_list(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE) {
    printf("found %zu leases\n", l->n_leases);
    for (size_t i = 0; i < l->n_leases; i++)
      printf("%016" PRIx64 "\n", (uint64_t)l->leases[i]);
  } else if (ctl_display.format == CTL_JSON) {
    json_begin();
    hdr_flat(&res->header);
    jopen("leases", '[');
    for (size_t i = 0; i < l->n_leases; i++) {
      jopen(NULL, '{');
      jkey("id");
      printf("%" PRId64, l->leases[i]);
      jclose('}');
    }
    jclose(']');
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
    for (size_t i = 0; i < l->n_leases; i++)
      printf("\"ID\" : %" PRId64 "\n", l->leases[i]);
  }
}

void ctl_print_lease_keepalive(const ketch_result *res) {
  const ketch_lease_result *l = &res->lease;
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE) {
    printf("lease %016" PRIx64 " keepalived with TTL(%" PRId64 ")\n", (uint64_t)l->id, l->ttl);
  } else if (ctl_display.format == CTL_JSON) {
    json_begin();
    hdr_flat(&res->header);
    jkey("ID");
    printf("%" PRId64, l->id);
    jkey("TTL");
    printf("%" PRId64, l->ttl);
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
    printf("\"ID\" : %" PRId64 "\n\"TTL\" : %" PRId64 "\n", l->id, l->ttl);
  }
}

/* ---- watch ---- */

void ctl_print_watch(const ketch_result *res) {
  const ketch_watch_result *w = &res->watch;
  bool progress = !w->created && !w->canceled && !w->n_events;
  if (progress)
    printf("progress notify: %" PRId64 "\n", res->header.revision);
  refuse_table();
  if (ctl_display.format == CTL_SIMPLE) {
    for (size_t i = 0; i < w->n_events; i++) {
      const ketch_event *e = &w->events[i];
      puts(e->type == KETCH_EVENT_DELETE ? "DELETE" : "PUT");
      if (e->prev_kv)
        kv(e->prev_kv, "Prev", NULL);
      kv(&e->kv, "", NULL);
    }
  } else if (ctl_display.format == CTL_JSON) {
    json_begin();
    jopen("Header", '{');
    juint("cluster_id", res->header.cluster_id);
    juint("member_id", res->header.member_id);
    jint("revision", res->header.revision);
    juint("raft_term", res->header.raft_term);
    jclose('}');
    jopen("Events", '[');
    for (size_t i = 0; i < w->n_events; i++) {
      const ketch_event *e = &w->events[i];
      jopen(NULL, '{');
      jint("type", e->type);
      kv(&e->kv, "", "kv");
      if (e->prev_kv)
        kv(e->prev_kv, "Prev", "prev_kv");
      jclose('}');
    }
    jclose(']');
    jkey("CompactRevision");
    printf("%" PRId64, w->compact_revision);
    jbool("Canceled", w->canceled, false);
    jbool("Created", w->created, false);
    jclose('}');
    putchar('\n');
  } else {
    hdr(&res->header);
    for (size_t i = 0; i < w->n_events; i++) {
      const ketch_event *e = &w->events[i];
      printf("\"Type\" : %s\n", e->type == KETCH_EVENT_DELETE ? "DELETE" : "PUT");
      if (e->prev_kv)
        kv(e->prev_kv, "Prev", NULL);
      kv(&e->kv, "", NULL);
    }
  }
  fflush(stdout);
}

/* ---- user, role, auth (etcdctl's printer_simple / printer_fields / JSON of
 * the pb responses; table refused; fields refused for user get / list) ---- */

static void refuse(const char *format) {
  ctl_die(CTL_EXIT_BAD_FEATURE, "%s not supported as output format", format);
}

static void jnames(const char *k, const char *const *v, size_t n) {
  if (!n)
    return; /* omitempty */
  jopen(k, '[');
  for (size_t i = 0; i < n; i++)
    jstr(NULL, v[i], false);
  jclose(']');
}

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

void ctl_print_auth(const struct ctl_auth_out *o) {
  static const char *const perm_names[] = {"READ", "WRITE", "READWRITE"};
  const ketch_result *res = o->res;
  const ketch_auth_result *a = &res->auth;
  int op = res->type;
  if (ctl_display.format == CTL_TABLE)
    refuse("table");
  if (ctl_display.format == CTL_FIELDS && (op == KETCH_OP_USER_GET || op == KETCH_OP_USER_LIST))
    refuse("fields");
  if (ctl_display.format == CTL_JSON) {
    json_begin();
    hdr(&res->header);
    if (op == KETCH_OP_USER_GET || op == KETCH_OP_ROLE_LIST)
      jnames("roles", a->roles, a->n_roles);
    else if (op == KETCH_OP_USER_LIST)
      jnames("users", a->users, a->n_users);
    else if (op == KETCH_OP_AUTH_STATUS) {
      jbool("enabled", a->enabled, true);
      juint("authRevision", a->auth_revision);
    } else if (op == KETCH_OP_ROLE_GET && a->n_perms) {
      jopen("perm", '[');
      for (size_t i = 0; i < a->n_perms; i++) {
        jopen(NULL, '{');
        jint("permType", a->perms[i].perm_type);
        jbytes("key", a->perms[i].key, a->perms[i].key_len);
        jbytes("range_end", a->perms[i].range_end, a->perms[i].range_end_len);
        jclose('}');
      }
      jclose(']');
    }
    jclose('}');
    putchar('\n');
    return;
  }
  if (ctl_display.format == CTL_FIELDS) {
    hdr(&res->header);
    if (op == KETCH_OP_ROLE_GET) {
      for (size_t i = 0; i < a->n_perms; i++) {
        int t = a->perms[i].perm_type;
        printf("\"PermType\" :  %s\n\"Key\" : ", t >= 0 && t <= 2 ? perm_names[t] : "READ");
        ctl_goquote(stdout, a->perms[i].key, a->perms[i].key_len);
        printf("\n\"RangeEnd\" : ");
        ctl_goquote(stdout, a->perms[i].range_end, a->perms[i].range_end_len);
        putchar('\n');
      }
    } else if (op == KETCH_OP_ROLE_LIST) {
      printf("\"Roles\" :");
      for (size_t i = 0; i < a->n_roles; i++) {
        putchar(' ');
        ctl_goquote(stdout, a->roles[i], strlen(a->roles[i]));
      }
      putchar('\n');
    } else if (op == KETCH_OP_AUTH_STATUS) {
      printf("\"Enabled\" : %s\n\"AuthRevision\" : %" PRIu64 "\n", a->enabled ? "true" : "false",
             a->auth_revision);
    }
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
