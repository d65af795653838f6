/* test/unit/proto_schema_test.c — net/PROTOCOL.md cannot drift from the
 * schema (net/schema.c), which drives the codec:
 *   - section 3's type table names every type the schema has, and a
 *     reserved or unassigned number is no type;
 *   - each request type is covered by one section 6.x, each response type
 *     by one section 7.x (titles give the numbers: "LEASE_GRANT (24) …
 *     LEASE_LEASES (28)" is a range); the section's field table lists
 *     exactly the fields of the types it covers, with the schema's types
 *     (responses: `header` too), or it says "an empty map" and they have
 *     none;
 *   - every nested message is documented where it is defined ("**kv** —
 *     ...", "A **member** is ..."): a map by a table or `{name: type, ...}`,
 *     a tuple by `[name: type, ...]` in the schema's order.
 * A field, kind or number that differs fails with the section and the
 * field named. */
#include <ctype.h>
#include <stdlib.h>

#include "../../net/schema.h"
#include "test.h"

#define DOC "net/PROTOCOL.md"

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  size_t got = fread(p, 1, (size_t)n, f);
  p[got] = 0;
  fclose(f);
  return p;
}

/* ---- the schema's side: (name, type) pairs as the document writes them ---- */

struct pair {
  char name[40], type[64];
};
struct pairs {
  struct pair v[64];
  int n;
};

static void add(struct pairs *ps, const char *name, const char *type) {
  for (int i = 0; i < ps->n; i++)
    if (strcmp(ps->v[i].name, name) == 0)
      return; /* a shape several types share */
  kt_assert(ps->n < 64);
  snprintf(ps->v[ps->n].name, sizeof ps->v[0].name, "%s", name);
  snprintf(ps->v[ps->n].type, sizeof ps->v[0].type, "%s", type);
  ps->n++;
}

static const char *scalar_doc(uint8_t kind) {
  switch (kind) {
  case KT_F_U64:
    return "uint64";
  case KT_F_U32:
    return "uint32";
  case KT_F_I64:
    return "int64";
  case KT_F_ENUM:
    return "enum";
  case KT_F_BOOL:
    return "bool";
  case KT_F_BYTES:
    return "bytes";
  case KT_F_TEXT:
    return "string";
  default:
    return "?";
  }
}

static void field_doc(const struct kt_field *f, bool in_tuple, char *out, size_t n) {
  if (f->doc)
    snprintf(out, n, "%s", f->doc);
  else if (f->kind == KT_F_MSG)
    snprintf(out, n, "%s%s", f->sub->name, in_tuple && f->aux != KT_NO_AUX ? " or nil" : "");
  else if (f->kind == KT_F_LIST)
    snprintf(out, n, "array of %s", f->elem == KT_F_MSG ? f->sub->name : scalar_doc(f->elem));
  else
    snprintf(out, n, "%s", scalar_doc(f->kind));
}

static void desc_pairs(const struct kt_msg_desc *m, struct pairs *ps) {
  for (uint8_t i = 0; i < m->n_fields; i++) {
    char t[64];
    field_doc(&m->fields[i], m->form == KT_FORM_TUPLE, t, sizeof t);
    add(ps, m->fields[i].name, t);
  }
}

/* ---- the document's side ---- */

/* The rows of the field table starting at or after p (before `stop`), into
 * ps; returns where the table ended, or NULL if none. */
static const char *table_at(const char *p, const char *stop, struct pairs *ps) {
  const char *t = strstr(p, "| field | type | meaning |");
  if (!t || (stop && t >= stop))
    return NULL;
  const char *line = strchr(t, '\n');
  line = line ? strchr(line + 1, '\n') : NULL; /* skip |---| */
  while (line && line[1] == '|') {
    line++;
    char name[40], type[64];
    if (sscanf(line, "| `%39[^`]` | %63[^|]|", name, type) == 2) {
      size_t k = strlen(type);
      while (k && type[k - 1] == ' ')
        type[--k] = 0;
      add(ps, name, type);
    }
    line = strchr(line, '\n');
  }
  return line ? line : t + 1;
}

/* "[a: t1, b: t2]" or "{a: t1, ...}" at p into ps (order kept). */
static bool inline_form(const char *p, struct pairs *ps, bool *tuple) {
  *tuple = *p == '[';
  char close = *tuple ? ']' : '}';
  const char *end = strchr(p, close);
  if (!end)
    return false;
  const char *q = p + 1;
  while (q < end) {
    while (*q == ' ' || *q == ',')
      q++;
    const char *colon = memchr(q, ':', (size_t)(end - q));
    if (!colon)
      return false;
    const char *comma = memchr(colon, ',', (size_t)(end - colon));
    const char *stop = comma ? comma : end;
    char name[40], type[64];
    snprintf(name, sizeof name, "%.*s", (int)(colon - q), q);
    const char *ts = colon + 1;
    while (*ts == ' ')
      ts++;
    snprintf(type, sizeof type, "%.*s", (int)(stop - ts), ts);
    add(ps, name, type);
    q = stop;
  }
  return ps->n > 0;
}

static bool same(const struct pairs *a, const struct pairs *b, bool ordered, char *why, size_t n) {
  for (int i = 0; i < a->n; i++) {
    int j = 0;
    while (j < b->n && strcmp(a->v[i].name, b->v[j].name) != 0)
      j++;
    if (j == b->n) {
      snprintf(why, n, "field `%s` (%s) of the schema is not documented", a->v[i].name,
               a->v[i].type);
      return false;
    }
    if (strcmp(a->v[i].type, b->v[j].type) != 0) {
      snprintf(why, n, "field `%s`: schema says %s, document says %s", a->v[i].name, a->v[i].type,
               b->v[j].type);
      return false;
    }
    if (ordered && i != j) {
      snprintf(why, n, "field `%s` is element %d, document has it at %d", a->v[i].name, i, j);
      return false;
    }
  }
  for (int j = 0; j < b->n; j++) {
    int i = 0;
    while (i < a->n && strcmp(a->v[i].name, b->v[j].name) != 0)
      i++;
    if (i == a->n) {
      snprintf(why, n, "documented field `%s` (%s) is not in the schema", b->v[j].name,
               b->v[j].type);
      return false;
    }
  }
  return true;
}

struct section {
  const char *title, *body, *end; /* body: after the title line */
  int part;                       /* 6: requests, 7: responses */
  bool covers[128];
};

#define TITLE(s) (int)((s)->body - (s)->title), (s)->title

static int sections(const char *doc, struct section *out, int max) {
  int n = 0;
  for (const char *p = strstr(doc, "\n### "); p && n < max; p = strstr(p + 1, "\n### ")) {
    struct section *s = &out[n];
    memset(s, 0, sizeof *s);
    s->title = p + 5;
    s->body = strchr(s->title, '\n');
    s->part = atoi(s->title);
    if (n)
      out[n - 1].end = p;
    /* the numbers in parentheses; "X (a) … Y (b)" is the range a..b */
    int last = -1;
    for (const char *q = s->title; q < s->body; q++) {
      if (*q == '(' && isdigit((unsigned char)q[1])) {
        int v = atoi(q + 1);
        const char *between = last >= 0 ? strstr(s->title, "\xe2\x80\xa6") : NULL; /* … */
        if (between && between < q)
          for (int k = last; k <= v && k < 128; k++)
            s->covers[k] = true;
        if (v < 128)
          s->covers[v] = true;
        last = v;
      }
    }
    n++;
  }
  if (n)
    out[n - 1].end = doc + strlen(doc);
  return n;
}

TEST(protocol_md_tables_match_the_schema) {
  char *doc = read_all(DOC);
  CHECK(doc != NULL);
  static struct section secs[80];
  int ns = sections(doc, secs, 80);
  CHECK(ns > 20);
  size_t nt;
  const struct kt_type_desc *types = kt_schema_types(&nt);
  int checked = 0;
  for (int part = 6; part <= 7; part++)
    for (int si = 0; si < ns; si++) {
      struct section *s = &secs[si];
      if (s->part != part)
        continue;
      struct pairs want = {0}, got = {0};
      bool any = false, header = false;
      for (size_t t = 0; t < nt; t++) {
        if (!types[t].name || !s->covers[t])
          continue;
        const struct kt_msg_desc *m = part == 6 ? types[t].req : types[t].resp;
        if (!m) {
          kt_test_fail(__FILE__, __LINE__, "%.*s: type %zu has no %s in the schema", TITLE(s), t,
                       part == 6 ? "request" : "response");
          free(doc);
          return;
        }
        any = true;
        header |= part == 7 && (types[t].flags & KT_MT_HEADER);
        if (header)
          add(&want, "header", "header");
        desc_pairs(m, &want);
      }
      if (!any)
        continue;
      if (!table_at(s->body, s->end, &got) && want.n) {
        kt_test_fail(__FILE__, __LINE__, "%.*s: no field table", TITLE(s));
        free(doc);
        return;
      }
      if (!want.n && !got.n && !strstr(s->body, "empty map")) {
        const char *e = strstr(s->body, "empty map");
        if (!e || e > s->end) {
          kt_test_fail(__FILE__, __LINE__, "%.*s: says neither its fields nor \"an empty map\"",
                       TITLE(s));
          free(doc);
          return;
        }
      }
      char why[256];
      if (!same(&want, &got, false, why, sizeof why)) {
        kt_test_fail(__FILE__, __LINE__, "%.*s: %s", TITLE(s), why);
        free(doc);
        return;
      }
      checked++;
    }
  /* every type documented in both parts where it goes that way */
  for (size_t t = 0; t < nt; t++) {
    if (!types[t].name)
      continue;
    for (int part = 6; part <= 7; part++) {
      if (!(part == 6 ? types[t].req : types[t].resp))
        continue;
      int found = 0;
      for (int si = 0; si < ns; si++)
        found += secs[si].part == part && secs[si].covers[t];
      if (found != 1) {
        kt_test_fail(__FILE__, __LINE__, "type %zu (%s): %d sections in part %d, want 1", t,
                     types[t].name, found, part);
        free(doc);
        return;
      }
    }
  }
  CHECK(checked > 25);
  free(doc);
}

/* The nested messages, each where the document defines it. */
static void collect(const struct kt_msg_desc *m, const struct kt_msg_desc **seen, int *n) {
  for (uint8_t i = 0; i < m->n_fields; i++) {
    const struct kt_msg_desc *sub = m->fields[i].sub;
    if (!sub)
      continue;
    int j = 0;
    while (j < *n && seen[j] != sub)
      j++;
    if (j == *n) {
      seen[(*n)++] = sub;
      collect(sub, seen, n);
    }
  }
}

TEST(protocol_md_nested_messages_match_the_schema) {
  char *doc = read_all(DOC);
  CHECK(doc != NULL);
  const struct kt_msg_desc *subs[32];
  int n = 0;
  subs[n++] = &kt_schema_header;
  size_t nt;
  const struct kt_type_desc *types = kt_schema_types(&nt);
  for (size_t t = 0; t < nt; t++) {
    if (types[t].req)
      collect(types[t].req, subs, &n);
    if (types[t].resp)
      collect(types[t].resp, subs, &n);
  }
  CHECK(n >= 7);
  for (int i = 0; i < n; i++) {
    const struct kt_msg_desc *m = subs[i];
    char bold[48];
    snprintf(bold, sizeof bold, "**%s**", m->name);
    /* where it is defined: "**x** — ..." or "A **x** is ..." */
    const char *at = strstr(doc, bold);
    while (at && strncmp(at + strlen(bold), " \xe2\x80\x94", 4) != 0 &&
           strncmp(at + strlen(bold), " is ", 4) != 0)
      at = strstr(at + 1, bold);
    if (!at) {
      kt_test_fail(__FILE__, __LINE__, "%s: not described (no %s in %s)", m->name, bold, DOC);
      break;
    }
    struct pairs want = {0}, got = {0};
    desc_pairs(m, &want);
    /* an inline form in the paragraph, or the next code line, or the next table */
    const char *para_end = strstr(at, "\n\n");
    const char *form = NULL;
    for (const char *q = at; q && *q && (!para_end || q < para_end + 8); q++)
      if ((*q == '`' && (q[1] == '[' || q[1] == '{') && strchr(q + 1, ':')) ||
          (*q == '\n' && q[1] == '[')) {
        form = q + 1;
        break;
      }
    bool tuple = false;
    if (form)
      inline_form(form, &got, &tuple);
    else
      table_at(at, NULL, &got);
    char why[256];
    if (m->form == KT_FORM_TUPLE && (!form || !tuple)) {
      kt_test_fail(__FILE__, __LINE__, "%s: a tuple, but %s shows no [name: type, ...]", m->name,
                   DOC);
      break;
    }
    if (!same(&want, &got, m->form == KT_FORM_TUPLE, why, sizeof why)) {
      kt_test_fail(__FILE__, __LINE__, "%s: %s", m->name, why);
      break;
    }
  }
  free(doc);
}

TEST(protocol_md_type_numbers_match_the_schema) {
  char *doc = read_all(DOC);
  CHECK(doc != NULL);
  const char *t = strstr(doc, "| type | name | direction |");
  CHECK(t != NULL);
  bool listed[128] = {0};
  for (const char *line = strchr(t, '\n'); line && line[1] == '|'; line = strchr(line + 1, '\n')) {
    int a, b;
    char name[40];
    if (sscanf(line + 1, "| %d\xe2\x80\x93%d | %39[^ |]", &a, &b, name) == 3) { /* a–b */
      for (int k = a; k <= b && k < 128; k++) {
        if (kt_schema_type((uint64_t)k)) {
          kt_test_fail(__FILE__, __LINE__, "type %d is %s in the document but in the schema", k,
                       name);
          free(doc);
          return;
        }
      }
    } else if (sscanf(line + 1, "| %d | %39[^ |]", &a, name) == 2) {
      const struct kt_type_desc *d = kt_schema_type((uint64_t)a);
      char upper[40];
      size_t k = 0;
      for (; d && d->name[k] && k + 1 < sizeof upper; k++)
        upper[k] = (char)toupper((unsigned char)d->name[k]);
      upper[k] = 0;
      if (!d || strcmp(upper, name) != 0) {
        kt_test_fail(__FILE__, __LINE__, "type %d: document says %s, schema %s", a, name,
                     d ? upper : "(none)");
        free(doc);
        return;
      }
      listed[a] = true;
    }
  }
  for (int k = 0; k < 128; k++)
    if (kt_schema_type((uint64_t)k) && !listed[k]) {
      kt_test_fail(__FILE__, __LINE__, "type %d (%s) is missing from section 3", k,
                   kt_schema_type((uint64_t)k)->name);
      break;
    }
  free(doc);
}
