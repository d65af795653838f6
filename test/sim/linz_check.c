/* test/sim/linz_check.c — the linearizability checker (linz.h) over a
 * history recorded by real clients (test/integration/fault_test.py).
 *
 *   linz_check HISTORY [MAX_STEPS]
 *
 * HISTORY is a stream of MessagePack maps. The first is the header
 * {"start_revision": int}; each next one is an op:
 *   client      int
 *   kind        "put" | "delete" | "get" | "txn"
 *   key, value  str (put: value; get/delete: key)
 *   prev_kv     bool (put)             serializable  bool (get)
 *   cmp         [[key, target, result, operand], ...]   (txn)
 *               target "value" | "version" | "create" | "mod";
 *               result "=" | "!=" | "<" | ">"; operand str (value) or int
 *   then, else  [[kind, key, value-or-nil], ...]  kind "put" | "delete" | "get"
 *   call        int: when it was sent (any clock, one for all clients)
 *   outcome     "ok" | "fail" | "unknown"
 *   ret         int: when its answer came (outcome "ok")
 *   rev         int: the answer's header revision
 *   deleted     int (delete)           succeeded  bool (txn)
 *   kv          [value, create, mod, version] or nil: a get's kv, a put's
 *               previous kv (prev_kv)
 *   gets        [kv or nil, ...]: a txn's gets in the branch taken, in order
 * Exit status: 0 linearizable, 1 not (the checker's explanation on stdout),
 * 2 the checker gave up (its step budget), 3 the file is not such a history
 * (a message naming the op and field). Every field is type-checked; limits
 * are linz.h's (keys, txn ops), checked here before they reach it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "linz.c"

struct input {
  const char *path;
  size_t op; /* index of the op being read (0 = header) */
  char err[256];
};

static int bad(struct input *in, const char *field, const char *what) {
  snprintf(in->err, sizeof in->err, "%s: op %zu: %s: %s", in->path, in->op, field, what);
  return -1;
}

static const msgpack_object *field(const msgpack_object *map, const char *name) {
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(name) &&
        memcmp(k->via.str.ptr, name, k->via.str.size) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

/* A str field as a NUL-terminated copy in arena; NULL if absent/nil. */
static int get_str(struct input *in, const msgpack_object *o, const char *name, struct kt_arena *a,
                   const char **out) {
  *out = NULL;
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
    return bad(in, name, "expected str");
  size_t n = o->type == MSGPACK_OBJECT_STR ? o->via.str.size : o->via.bin.size;
  const char *p = o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
  char *s = kt_arena_alloc(a, n + 1);
  if (n)
    memcpy(s, p, n);
  s[n] = 0;
  *out = s;
  return 0;
}

static int get_int(struct input *in, const msgpack_object *o, const char *name, int64_t *out) {
  *out = 0;
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    *out = (int64_t)o->via.u64;
  else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    *out = o->via.i64;
  else
    return bad(in, name, "expected int");
  return 0;
}

static int get_bool(struct input *in, const msgpack_object *o, const char *name, bool *out) {
  *out = false;
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type != MSGPACK_OBJECT_BOOLEAN)
    return bad(in, name, "expected bool");
  *out = o->via.boolean;
  return 0;
}

static bool str_is(const char *s, const char *want) { return s && strcmp(s, want) == 0; }

/* [value, create, mod, version] or nil. */
static int get_kv(struct input *in, const msgpack_object *o, const char *name, struct kt_arena *a,
                  struct kt_linz_kv *kv) {
  *kv = (struct kt_linz_kv){0};
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4)
    return bad(in, name, "expected [value, create, mod, version] or nil");
  kv->present = true;
  const msgpack_object *e = o->via.array.ptr;
  if (get_str(in, &e[0], name, a, &kv->value) || get_int(in, &e[1], name, &kv->create_revision) ||
      get_int(in, &e[2], name, &kv->mod_revision) || get_int(in, &e[3], name, &kv->version))
    return -1;
  if (!kv->value)
    return bad(in, name, "kv without a value");
  return 0;
}

static int kind_of(const char *k) {
  return str_is(k, "put")      ? KT_LINZ_PUT
         : str_is(k, "delete") ? KT_LINZ_DELETE
         : str_is(k, "get")    ? KT_LINZ_GET
         : str_is(k, "txn")    ? KT_LINZ_TXN
                               : 0;
}

static int get_txops(struct input *in, const msgpack_object *o, const char *name,
                     struct kt_arena *a, struct kt_linz_txop **out, uint32_t *n) {
  *out = NULL;
  *n = 0;
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > KT_LINZ_MAX_TXN_OPS)
    return bad(in, name, "expected an array of at most 16 ops");
  *out = kt_arena_alloc(a, (o->via.array.size + 1) * sizeof **out);
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    const msgpack_object *e = &o->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 3)
      return bad(in, name, "expected [kind, key, value]");
    const char *k;
    struct kt_linz_txop *t = &(*out)[i];
    if (get_str(in, &e->via.array.ptr[0], name, a, &k) ||
        get_str(in, &e->via.array.ptr[1], name, a, &t->key) ||
        get_str(in, &e->via.array.ptr[2], name, a, &t->value))
      return -1;
    int kind = kind_of(k);
    if (kind == 0 || kind == KT_LINZ_TXN || !t->key || (kind == KT_LINZ_PUT && !t->value))
      return bad(in, name, "an op is put(key, value), delete(key) or get(key)");
    t->kind = (uint8_t)kind;
  }
  *n = o->via.array.size;
  return 0;
}

static int get_cmps(struct input *in, const msgpack_object *o, struct kt_arena *a,
                    struct kt_linz_cmp **out, uint32_t *n) {
  *out = NULL;
  *n = 0;
  if (!o || o->type == MSGPACK_OBJECT_NIL)
    return 0;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > KT_LINZ_MAX_TXN_OPS)
    return bad(in, "cmp", "expected an array of at most 16 compares");
  *out = kt_arena_alloc(a, (o->via.array.size + 1) * sizeof **out);
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    const msgpack_object *e = &o->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 4)
      return bad(in, "cmp", "expected [key, target, result, operand]");
    struct kt_linz_cmp *c = &(*out)[i];
    const char *target, *result;
    if (get_str(in, &e->via.array.ptr[0], "cmp", a, &c->key) ||
        get_str(in, &e->via.array.ptr[1], "cmp", a, &target) ||
        get_str(in, &e->via.array.ptr[2], "cmp", a, &result))
      return -1;
    if (!c->key)
      return bad(in, "cmp", "no key");
    if (str_is(target, "value")) {
      c->target = KT_CMP_VALUE;
      if (get_str(in, &e->via.array.ptr[3], "cmp", a, &c->value) || !c->value)
        return bad(in, "cmp", "a value compare needs a str operand");
    } else {
      c->target = str_is(target, "version")  ? KT_CMP_VERSION
                  : str_is(target, "create") ? KT_CMP_CREATE
                  : str_is(target, "mod")    ? KT_CMP_MOD
                                             : 255;
      if (c->target == 255)
        return bad(in, "cmp", "target is value, version, create or mod");
      if (get_int(in, &e->via.array.ptr[3], "cmp", &c->num))
        return -1;
    }
    c->result = str_is(result, "=")    ? KT_CMP_EQUAL
                : str_is(result, "!=") ? KT_CMP_NOT_EQUAL
                : str_is(result, "<")  ? KT_CMP_LESS
                : str_is(result, ">")  ? KT_CMP_GREATER
                                       : 255;
    if (c->result == 255)
      return bad(in, "cmp", "result is =, !=, < or >");
  }
  *n = o->via.array.size;
  return 0;
}

/* Records one op (call, then its outcome) into h. */
static int add_op(struct input *in, struct kt_linz_hist *h, const msgpack_object *m,
                  struct kt_arena *a) {
  if (m->type != MSGPACK_OBJECT_MAP)
    return bad(in, "op", "expected a map");
  int64_t client, call, ret, rev, deleted;
  const char *kind_s, *outcome;
  struct kt_linz_op op = {0};
  struct kt_linz_cmp *cmp;
  struct kt_linz_txop *then, *els;
  if (get_int(in, field(m, "client"), "client", &client) ||
      get_str(in, field(m, "kind"), "kind", a, &kind_s) ||
      get_str(in, field(m, "key"), "key", a, &op.key) ||
      get_str(in, field(m, "value"), "value", a, &op.value) ||
      get_bool(in, field(m, "prev_kv"), "prev_kv", &op.prev_kv) ||
      get_bool(in, field(m, "serializable"), "serializable", &op.serializable) ||
      get_cmps(in, field(m, "cmp"), a, &cmp, &op.n_cmp) ||
      get_txops(in, field(m, "then"), "then", a, &then, &op.n_then) ||
      get_txops(in, field(m, "else"), "else", a, &els, &op.n_els) ||
      get_int(in, field(m, "call"), "call", &call) ||
      get_str(in, field(m, "outcome"), "outcome", a, &outcome))
    return -1;
  op.cmp = cmp;
  op.then = then;
  op.els = els;
  int kind = kind_of(kind_s);
  if (!kind)
    return bad(in, "kind", "put, delete, get or txn");
  op.kind = (uint8_t)kind;
  if (kind != KT_LINZ_TXN && !op.key)
    return bad(in, "key", "missing");
  if (kind == KT_LINZ_PUT && !op.value)
    return bad(in, "value", "missing");
  if (client < 0 || client > 1000000)
    return bad(in, "client", "out of range");
  uint32_t id = kt_linz_call(h, (int)client, call, &op);
  if (str_is(outcome, "fail")) {
    kt_linz_fail(h, id);
    return 0;
  }
  if (str_is(outcome, "unknown")) {
    kt_linz_unknown(h, id);
    return 0;
  }
  if (!str_is(outcome, "ok"))
    return bad(in, "outcome", "ok, fail or unknown");
  struct kt_linz_result res = {0};
  const msgpack_object *gets = field(m, "gets");
  if (get_int(in, field(m, "ret"), "ret", &ret) || get_int(in, field(m, "rev"), "rev", &rev) ||
      get_int(in, field(m, "deleted"), "deleted", &deleted) ||
      get_bool(in, field(m, "succeeded"), "succeeded", &res.succeeded) ||
      get_kv(in, field(m, "kv"), "kv", a, &res.kv))
    return -1;
  if (ret < call)
    return bad(in, "ret", "before its call");
  res.revision = rev;
  res.deleted = deleted;
  if (gets && gets->type != MSGPACK_OBJECT_NIL) {
    if (gets->type != MSGPACK_OBJECT_ARRAY || gets->via.array.size > KT_LINZ_MAX_TXN_OPS)
      return bad(in, "gets", "expected an array of at most 16 kvs");
    struct kt_linz_kv *g = kt_arena_alloc(a, (gets->via.array.size + 1) * sizeof *g);
    for (uint32_t i = 0; i < gets->via.array.size; i++)
      if (get_kv(in, &gets->via.array.ptr[i], "gets", a, &g[i]))
        return -1;
    res.gets = g;
    res.n_gets = gets->via.array.size;
  }
  kt_linz_return(h, id, ret, &res);
  return 0;
}

static int read_file(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  size_t cap = 1 << 16, n = 0;
  char *p = malloc(cap);
  size_t r;
  while (p && (r = fread(p + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap)
      p = realloc(p, cap *= 2);
  }
  fclose(f);
  if (!p)
    return -1;
  *buf = p;
  *len = n;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: linz_check HISTORY [MAX_STEPS]\n");
    return 3;
  }
  struct input in = {.path = argv[1]};
  uint64_t max_steps = argc == 3 ? strtoull(argv[2], NULL, 10) : 0;
  char *buf;
  size_t len;
  if (read_file(argv[1], &buf, &len)) {
    fprintf(stderr, "linz_check: %s: %s\n", argv[1], strerror(errno));
    return 3;
  }
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  struct kt_linz_hist *h = NULL;
  struct kt_arena a = {0};
  int rc = 0;
  for (;;) {
    msgpack_unpack_return ur = msgpack_unpack_next(&u, buf, len, &off);
    if (ur == MSGPACK_UNPACK_CONTINUE && off == len)
      break;
    if (ur != MSGPACK_UNPACK_SUCCESS) {
      rc = bad(&in, "file", off == len ? "truncated" : "not MessagePack");
      break;
    }
    kt_arena_reset(&a);
    if (!h) {
      int64_t start = 0;
      if (u.data.type != MSGPACK_OBJECT_MAP ||
          get_int(&in, field(&u.data, "start_revision"), "start_revision", &start) || start < 1) {
        rc = bad(&in, "header", "expected {\"start_revision\": int >= 1}");
        break;
      }
      h = kt_linz_new(start);
    } else if ((rc = add_op(&in, h, &u.data, &a))) {
      break;
    }
    in.op++;
  }
  msgpack_unpacked_destroy(&u);
  free(buf);
  kt_arena_free(&a);
  if (rc || !h) {
    fprintf(stderr, "linz_check: %s\n", in.err[0] ? in.err : "empty history");
    kt_linz_free(h);
    return 3;
  }
  struct kt_linz_report *rep = malloc(sizeof *rep);
  kt_assert(rep);
  int v = kt_linz_check(h, max_steps, rep);
  printf("%s: %u ops (%u of unknown outcome, %u serializable gets), %llu model steps\n",
         v == KT_LINZ_OK          ? "linearizable"
         : v == KT_LINZ_VIOLATION ? "NOT linearizable"
                                  : "gave up",
         rep->ops, rep->unknown, rep->sreads, (unsigned long long)rep->steps);
  if (v != KT_LINZ_OK)
    printf("%s\n", rep->explain);
  free(rep);
  kt_linz_free(h);
  return v == KT_LINZ_OK ? 0 : v == KT_LINZ_VIOLATION ? 1 : 2;
}
