/* core/base.c — see base.h. */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const err_msgs[] = {
#define KT_ERR_MSG(name, code, msg) [code] = msg,
    KT_ERRORS(KT_ERR_MSG)
#undef KT_ERR_MSG
};
static const char *const err_names[] = {
#define KT_ERR_NAME(name, code, msg) [code] = #name,
    KT_ERRORS(KT_ERR_NAME)
#undef KT_ERR_NAME
};

const char *kt_strerror(int code) {
  if (code < 0 || code >= KT_ERR_MAX || !err_msgs[code])
    return "unknown error";
  return err_msgs[code];
}

const char *kt_errname(int code) {
  if (code < 0 || code >= KT_ERR_MAX || !err_names[code])
    return "EUNKNOWNCODE";
  return err_names[code];
}

int kt_err_set(struct kt_err *e, int code, const char *fmt, ...) {
  if (e) {
    va_list ap;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

_Noreturn void kt_panic(const char *file, int line, const char *what) {
  fprintf(stderr, "ketch: assertion failed at %s:%d: %s\n", file, line, what);
  fflush(stderr);
  abort();
}

/* ---- logging ---- */

int kt_log_level = KT_LOG_INFO;

static void default_sink(int level, const char *module, const char *line) {
  static const char *const names[] = {"debug", "info", "warn", "error", "fatal"};
  fprintf(stderr, "%s %s %s\n", names[level < 0 || level > 4 ? 4 : level], module, line);
}

static kt_log_sink_fn log_sink = default_sink;

void kt_log_set_sink(kt_log_sink_fn fn) { log_sink = fn ? fn : default_sink; }

void kt_log_emit(int level, const char *module, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  log_sink(level, module, line);
}

/* ---- buffers ---- */

void kt_buf_reserve(struct kt_buf *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return;
  size_t want = b->len + extra;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < want)
    cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p)
    kt_panic(__FILE__, __LINE__, "out of memory");
  b->p = p;
  b->cap = cap;
}

void kt_buf_append(struct kt_buf *b, const void *p, size_t n) {
  if (!n)
    return;
  kt_buf_reserve(b, n);
  memcpy(b->p + b->len, p, n);
  b->len += n;
}

void kt_buf_consume(struct kt_buf *b, size_t n) {
  kt_assert(n <= b->len);
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
}

void kt_buf_free(struct kt_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- arena ---- */

struct kt_arena_chunk {
  struct kt_arena_chunk *next;
  size_t used, cap;
  _Alignas(16) uint8_t data[];
};

void *kt_arena_alloc(struct kt_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct kt_arena_chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = 16384;
    if (c && c->cap * 2 > cap)
      cap = c->cap * 2;
    if (cap > (1u << 24))
      cap = 1u << 24;
    if (cap < n)
      cap = n;
    c = malloc(sizeof *c + cap);
    if (!c)
      kt_panic(__FILE__, __LINE__, "out of memory");
    c->cap = cap;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  a->used_total += n;
  return p;
}

void *kt_arena_dup(struct kt_arena *a, const void *p, size_t n) {
  void *d = kt_arena_alloc(a, n ? n : 1);
  if (n)
    memcpy(d, p, n);
  return d;
}

void kt_arena_reset(struct kt_arena *a) {
  struct kt_arena_chunk *c = a->head;
  if (!c)
    return;
  /* keep the last (oldest) chunk only if it is the largest; simpler: keep the
   * newest, which is the largest since chunks grow. */
  struct kt_arena_chunk *keep = c;
  c = c->next;
  while (c) {
    struct kt_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  keep->next = NULL;
  keep->used = 0;
  a->head = keep;
  a->used_total = 0;
}

void kt_arena_free(struct kt_arena *a) {
  struct kt_arena_chunk *c = a->head;
  while (c) {
    struct kt_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
  a->used_total = 0;
}

/* ---- rng: xoshiro256**, seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void kt_rng_seed(struct kt_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kt_rng_next(struct kt_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t kt_rng_below(struct kt_rng *r, uint64_t n) {
  kt_assert(n > 0);
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do
    x = kt_rng_next(r);
  while (x >= limit);
  return x % n;
}

int kt_bytes_cmp(struct kt_bytes a, struct kt_bytes b) {
  uint32_t n = a.n < b.n ? a.n : b.n;
  int c = n ? memcmp(a.p, b.p, n) : 0;
  if (c)
    return c;
  return a.n < b.n ? -1 : a.n > b.n;
}
