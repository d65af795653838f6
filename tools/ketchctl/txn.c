/* tools/ketchctl/txn.c — the txn command's stdin syntax, as etcdctl 3.4 reads it.
 *
 *   compares        one per line: TARGET("key") OP "value", TARGET one of
 *                   ver|version c|create m|mod val|value lease, OP = != < >
 *   <blank line>
 *   success ops     one per line: put/get/del with their command-line flags
 *   <blank line>
 *   failure ops
 *   <blank line>
 *
 * Lines are trimmed; the input must end with the third blank line, else
 * "Error: EOF" (exit 3) like etcdctl. Differences from etcdctl 3.4, on purpose:
 *   - 'single quoted' words keep their content (etcdctl 3.4 cuts them to the
 *     wrong length, a bug: args[i][1:len(args)-1]);
 *   - an unknown operator is an error, not a panic (etcdctl exits 2 with a
 *     Go stack trace);
 *   - lease("key") OP "ID" compares the key's lease with a hexadecimal ID (the
 *     --lease flag's notation); etcdctl 3.4 panics on any lease compare.
 */
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static size_t put_utf8(char *o, unsigned long r) {
  if (r < 0x80) {
    o[0] = (char)r;
    return 1;
  }
  if (r < 0x800) {
    o[0] = (char)(0xc0 | r >> 6);
    o[1] = (char)(0x80 | (r & 0x3f));
    return 2;
  }
  if (r < 0x10000) {
    o[0] = (char)(0xe0 | r >> 12);
    o[1] = (char)(0x80 | (r >> 6 & 0x3f));
    o[2] = (char)(0x80 | (r & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | r >> 18);
  o[1] = (char)(0x80 | (r >> 12 & 0x3f));
  o[2] = (char)(0x80 | (r >> 6 & 0x3f));
  o[3] = (char)(0x80 | (r & 0x3f));
  return 4;
}

/* Go's quoted-string token at *pp ("..." with escapes, or `raw`): on success
 * stores the unquoted bytes in a new buffer (*out, *out_len), advances *pp past
 * the closing quote and returns 0; -1 when there is no valid token. */
static int go_unquote(const char **pp, char **out, size_t *out_len) {
  const char *p = *pp;
  char q = *p;
  if (q != '"' && q != '`')
    return -1;
  const char *end = p + 1;
  while (*end && *end != q) {
    if (q == '"' && *end == '\\' && end[1])
      end++;
    end++;
  }
  if (*end != q)
    return -1;
  char *o = malloc((size_t)(end - p) + 1);
  if (!o)
    ctl_die(CTL_EXIT_ERROR, "out of memory");
  size_t n = 0;
  for (const char *s = p + 1; s < end;) {
    if (q == '`' || *s != '\\') {
      o[n++] = *s++;
      continue;
    }
    s++;
    int c = *s++, d;
    unsigned long r = 0;
    switch (c) {
    case 'a':
      o[n++] = '\a';
      break;
    case 'b':
      o[n++] = '\b';
      break;
    case 'f':
      o[n++] = '\f';
      break;
    case 'n':
      o[n++] = '\n';
      break;
    case 'r':
      o[n++] = '\r';
      break;
    case 't':
      o[n++] = '\t';
      break;
    case 'v':
      o[n++] = '\v';
      break;
    case '\\':
      o[n++] = '\\';
      break;
    case '"':
      o[n++] = '"';
      break;
    case '\'':
      o[n++] = '\'';
      break;
    case 'x':
    case 'u':
    case 'U': {
      int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
      for (int k = 0; k < digits; k++) {
        if (s >= end || (d = hexval(*s)) < 0)
          goto bad;
        r = r << 4 | (unsigned long)d;
        s++;
      }
      if (c == 'x')
        o[n++] = (char)r;
      else if (r > 0x10ffff || (r >= 0xd800 && r < 0xe000))
        goto bad;
      else
        n += put_utf8(o + n, r);
      break;
    }
    default:
      if (c >= '0' && c <= '7') {
        r = (unsigned long)(c - '0');
        for (int k = 0; k < 2; k++) {
          if (s >= end || *s < '0' || *s > '7')
            goto bad;
          r = r << 3 | (unsigned long)(*s++ - '0');
        }
        if (r > 255)
          goto bad;
        o[n++] = (char)r;
        break;
      }
      goto bad;
    }
  }
  o[n] = 0;
  *out = ctl_keep(o);
  *out_len = n;
  *pp = end + 1;
  return 0;
bad:
  free(o);
  return -1;
}

static bool is_space(int c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* etcdctl's argify(): words, "double quoted" (Go escapes), 'single quoted'. */
int ctl_argify(const char *line, char **argv, int max) {
  int n = 0;
  const char *p = line;
  while (*p && n < max) {
    while (is_space(*p))
      p++;
    if (!*p)
      break;
    char *w;
    size_t wl;
    if (*p == '"') {
      if (go_unquote(&p, &w, &wl) == 0) {
        argv[n++] = w;
        continue;
      }
      p++; /* an unmatched quote starts no word */
      continue;
    }
    if (*p == '\'') {
      const char *e = strchr(p + 1, '\'');
      if (!e) {
        p++;
        continue;
      }
      wl = (size_t)(e - p - 1);
      w = ctl_alloc(wl + 1);
      memcpy(w, p + 1, wl);
      w[wl] = 0;
      argv[n++] = w;
      p = e + 1;
      continue;
    }
    const char *s = p;
    while (*p && !is_space(*p))
      p++;
    wl = (size_t)(p - s);
    w = ctl_alloc(wl + 1);
    memcpy(w, s, wl);
    w[wl] = 0;
    argv[n++] = w;
  }
  return n;
}

/* Reads one line as Go's bufio ReadString('\n') + TrimSpace; a line without
 * its newline (end of input) is etcdctl's "Error: EOF". */
static char *read_line(FILE *in) {
  static char *buf;
  static size_t cap;
  ssize_t n = getline(&buf, &cap, in);
  if (n <= 0 || buf[n - 1] != '\n')
    ctl_die(CTL_EXIT_INVALID_INPUT, "EOF");
  char *s = buf, *e = buf + n;
  while (s < e && is_space(*s))
    s++;
  while (e > s && is_space(e[-1]))
    e--;
  *e = 0;
  return s;
}

static void malformed_got(const char *line, const char *target, const char *key, size_t key_len,
                          const char *op, const char *val, size_t val_len) {
  fprintf(stderr, "Error: malformed comparison: %s; got %s(", line, target);
  ctl_goquote(stderr, key, key_len);
  fprintf(stderr, ") %s ", op);
  ctl_goquote(stderr, val, val_len);
  fputc('\n', stderr);
  exit(CTL_EXIT_INVALID_INPUT);
}

/* etcdctl's parseCompare: fmt.Sscanf(rest, "%q) %s %q", &key, &op, &val). */
static void parse_compare(const char *line, ketch_compare *cmp) {
  const char *lp = strchr(line, '(');
  if (!lp)
    ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s", line);
  size_t tlen = (size_t)(lp - line);
  char *target = ctl_alloc(tlen + 1);
  memcpy(target, line, tlen);
  target[tlen] = 0;

  char *key = "", *val = "", op[64] = "";
  size_t key_len = 0, val_len = 0;
  const char *p = lp + 1;
  while (is_space(*p))
    p++;
  if (go_unquote(&p, &key, &key_len) != 0)
    malformed_got(line, target, "", 0, "", "", 0);
  if (*p != ')' || !is_space(p[1]))
    malformed_got(line, target, key, key_len, "", "", 0);
  p++;
  while (is_space(*p))
    p++;
  size_t ol = 0;
  while (p[ol] && !is_space(p[ol]) && ol < sizeof op - 1)
    ol++;
  memcpy(op, p, ol);
  op[ol] = 0;
  p += ol;
  if (!ol || (*p && !is_space(*p)))
    malformed_got(line, target, key, key_len, op, "", 0);
  while (is_space(*p))
    p++;
  if (go_unquote(&p, &val, &val_len) != 0)
    malformed_got(line, target, key, key_len, op, "", 0);

  memset(cmp, 0, sizeof *cmp);
  cmp->key = key;
  cmp->key_len = key_len;
  char err[160];
  int bad = 0;
  if (!strcmp(target, "ver") || !strcmp(target, "version")) {
    cmp->target = KETCH_CMP_VERSION;
    bad = ctl_parse_int(val, 10, &cmp->int_value, err, sizeof err);
  } else if (!strcmp(target, "c") || !strcmp(target, "create")) {
    cmp->target = KETCH_CMP_CREATE;
    bad = ctl_parse_int(val, 10, &cmp->int_value, err, sizeof err);
  } else if (!strcmp(target, "m") || !strcmp(target, "mod")) {
    cmp->target = KETCH_CMP_MOD;
    bad = ctl_parse_int(val, 10, &cmp->int_value, err, sizeof err);
  } else if (!strcmp(target, "val") || !strcmp(target, "value")) {
    cmp->target = KETCH_CMP_VALUE;
    cmp->value = val;
    cmp->value_len = val_len;
  } else if (!strcmp(target, "lease")) {
    cmp->target = KETCH_CMP_LEASE;
    bad = ctl_parse_int(val, 16, &cmp->int_value, err, sizeof err);
  } else {
    ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s (unknown target %s)", line, target);
  }
  if (!strcmp(op, "="))
    cmp->result = KETCH_CMP_EQUAL;
  else if (!strcmp(op, "!="))
    cmp->result = KETCH_CMP_NOT_EQUAL;
  else if (!strcmp(op, "<"))
    cmp->result = KETCH_CMP_LESS;
  else if (!strcmp(op, ">"))
    cmp->result = KETCH_CMP_GREATER;
  else
    ctl_die(CTL_EXIT_INVALID_INPUT, "malformed comparison: %s (unknown operator %s)", line, op);
  if (bad)
    ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", line);
}

static void parse_request(const char *line, ketch_op *op) {
  char *argv[256];
  int argc = ctl_argify(line, argv, 255);
  argv[argc] = NULL;
  if (argc < 2)
    ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn compare request: %s", line);
  if (ctl_parse_op(argc, argv, op) != 0)
    ctl_die(CTL_EXIT_INVALID_INPUT, "invalid txn request: %s", line);
}

#define TXN_MAX_LINES 1024

void ctl_txn_read(FILE *in, bool interactive, ketch_txn_req *req) {
  static const char *const prompts[3] = {
      "compares:", "success requests (get, put, del):", "failure requests (get, put, del):"};
  ketch_compare *cmps = ctl_alloc(TXN_MAX_LINES * sizeof *cmps);
  ketch_op *ops[2] = {ctl_alloc(TXN_MAX_LINES * sizeof(ketch_op)),
                      ctl_alloc(TXN_MAX_LINES * sizeof(ketch_op))};
  size_t n[3] = {0, 0, 0};
  for (int part = 0; part < 3; part++) {
    if (interactive) {
      puts(prompts[part]);
      fflush(stdout);
    }
    for (;;) {
      char *line = read_line(in);
      if (!*line)
        break;
      if (n[part] >= TXN_MAX_LINES)
        ctl_die(CTL_EXIT_INVALID_INPUT, "too many lines in txn (max %d)", TXN_MAX_LINES);
      if (part == 0)
        parse_compare(line, &cmps[n[0]++]);
      else
        parse_request(line, &ops[part - 1][n[part]++]);
    }
  }
  req->compare = cmps;
  req->n_compare = n[0];
  req->success = ops[0];
  req->n_success = n[1];
  req->failure = ops[1];
  req->n_failure = n[2];
}
