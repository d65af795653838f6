/* core/base.h — what every ketch module shares: error codes, kt_err, asserts,
 * logging, growable buffers, a bump arena and a seeded PRNG.
 *
 * Pure: libc only. No clock, no I/O beyond the log sink (which the process sets).
 *
 * Errors: functions return 0 or a KT_E* code. Codes are stable: they travel on
 * the wire (net/PROTOCOL.md) and client/ketch.h repeats them as KETCH_E*
 * (test/unit/base_test.c checks the two tables agree). Decoders, recovery and
 * config also fill a struct kt_err whose message names the place.
 */
#ifndef KT_BASE_H
#define KT_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(name, code, message). Messages of the etcd-shaped errors are etcd's
 * (without the "etcdserver: " prefix), because clients match on them. */
#define KT_ERRORS(X)                                                                               \
  X(OK, 0, "ok")                                                                                   \
  X(EINVAL, 1, "invalid argument")                                                                 \
  X(EKEYEMPTY, 2, "key is not provided")                                                           \
  X(ETOOLARGE, 3, "request is too large")                                                          \
  X(ETOOMANYOPS, 4, "too many operations in txn request")                                          \
  X(EDUPKEY, 5, "duplicate key given in txn request")                                              \
  X(ECOMPACTED, 6, "mvcc: required revision has been compacted")                                   \
  X(EFUTUREREV, 7, "mvcc: required revision is a future revision")                                 \
  X(ENOSPACE, 8, "mvcc: database space exceeded")                                                  \
  X(ELEASENOTFOUND, 9, "requested lease not found")                                                \
  X(ELEASEEXISTS, 10, "lease already exists")                                                      \
  X(ENOLEADER, 11, "no leader")                                                                    \
  X(ETIMEOUT, 12, "request timed out")                                                             \
  X(EUNKNOWN, 13, "request outcome unknown")                                                       \
  X(EPROTO, 14, "protocol error")                                                                  \
  X(EUNSUPPORTED, 15, "unsupported request")                                                       \
  X(ECORRUPT, 16, "data corruption detected")                                                      \
  X(EIO, 17, "i/o error")                                                                          \
  X(ENOMEM, 18, "out of memory")                                                                   \
  X(ECLOSED, 19, "connection closed")                                                              \
  X(EUNAVAILABLE, 20, "no endpoint available")                                                     \
  X(ENOTFOUND, 21, "not found")                                                                    \
  X(ESTOPPED, 22, "server stopped")                                                                \
  X(EBUSY, 23, "too many requests")                                                                \
  X(ECANCELED, 24, "canceled")                                                                     \
  X(EVERSION, 25, "unsupported protocol version")                                                  \
  X(EINTERNAL, 26, "internal error")                                                               \
  X(EMEMBEREXISTS, 27, "member ID already exist")                                                  \
  X(EPEERURLEXISTS, 28, "Peer URLs already exists")                                                \
  X(EMEMBERNOTFOUND, 29, "member not found")                                                       \
  X(EMEMBERNOTLEARNER, 30, "can only promote a learner member")                                    \
  X(ELEARNERNOTREADY, 31, "can only promote a learner member which is in sync with leader")        \
  X(EUNHEALTHY, 32, "unhealthy cluster")                                                           \
  X(EMEMBERBADURLS, 33, "given member URLs are invalid")                                           \
  X(EMEMBERREMOVED, 34, "the member has been permanently removed from the cluster")                \
  X(ENOTENOUGHSTARTED, 35, "re-configuration failed due to not enough started members")            \
  X(ETOOMANYLEARNERS, 36, "too many learner members in cluster")                                   \
  X(EAUTHNOTENABLED, 37, "authentication is not enabled")                                          \
  X(EPERMDENIED, 38, "permission denied")                                                          \
  X(EINVALIDTOKEN, 39, "invalid auth token")                                                       \
  X(EAUTHFAILED, 40, "authentication failed, invalid user ID or password")                         \
  X(EUSEREMPTY, 41, "user name is empty")                                                          \
  X(EUSEREXISTS, 42, "user name already exists")                                                   \
  X(EUSERNOTFOUND, 43, "user name not found")                                                      \
  X(EROLEEMPTY, 44, "role name is empty")                                                          \
  X(EROLEEXISTS, 45, "role name already exists")                                                   \
  X(EROLENOTFOUND, 46, "role name not found")                                                      \
  X(EROOTUSERNOTEXIST, 47, "root user does not exist")                                             \
  X(EROOTROLENOTEXIST, 48, "root user does not have root role")                                    \
  X(EROLENOTGRANTED, 49, "role is not granted to the user")                                        \
  X(EPERMNOTGRANTED, 50, "permission is not granted to the role")                                  \
  X(EAUTHOLDREVISION, 51, "revision of auth store is old")                                         \
  X(EINVALIDAUTHMGMT, 52, "invalid auth management")

enum {
#define KT_ERR_ENUM(name, code, msg) KT_##name = code,
  KT_ERRORS(KT_ERR_ENUM)
#undef KT_ERR_ENUM
      KT_ERR_MAX
};

const char *kt_strerror(int code);
const char *kt_errname(int code); /* "ECOMPACTED" */

/* An error with a message naming the place: "wal/00..1.wal offset 8192:
 * checksum mismatch". Fill with kt_err_set; code 0 means no error. */
struct kt_err {
  int code;
  char msg[256];
};
int kt_err_set(struct kt_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))); /* returns code; e may be NULL */
/* No error, an empty message: what `= {0}` says, without clearing all 260
 * bytes (per request on the state thread: 4 of them a put, ~150
 * instructions). */
static inline void kt_err_clear(struct kt_err *e) {
  e->code = 0;
  e->msg[0] = 0;
}

/* Always compiled in; guards invariants only, never outside bytes. */
#define kt_assert(c)                                                                               \
  do {                                                                                             \
    if (__builtin_expect(!(c), 0))                                                                 \
      kt_panic(__FILE__, __LINE__, #c);                                                            \
  } while (0)
_Noreturn void kt_panic(const char *file, int line, const char *what);

/* Logging: one line per event, "time level module member message k=v ...".
 * The process installs a sink (net/ sets one with a clock); the default sink
 * writes to stderr without a time. Raft never logs (it emits trace events). */
enum { KT_LOG_DEBUG, KT_LOG_INFO, KT_LOG_WARN, KT_LOG_ERROR, KT_LOG_FATAL };
extern int kt_log_level;
typedef void (*kt_log_sink_fn)(int level, const char *module, const char *line);
void kt_log_set_sink(kt_log_sink_fn fn);
void kt_log_emit(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define kt_log(level, module, ...)                                                                 \
  do {                                                                                             \
    if ((level) >= kt_log_level)                                                                   \
      kt_log_emit((level), (module), __VA_ARGS__);                                                 \
  } while (0)

/* Growable byte buffer. Owner frees with kt_buf_free. */
struct kt_buf {
  uint8_t *p;
  size_t len, cap;
};
void kt_buf_reserve(struct kt_buf *b, size_t extra); /* aborts on OOM */
void kt_buf_append(struct kt_buf *b, const void *p, size_t n);
void kt_buf_consume(struct kt_buf *b, size_t n); /* drop n bytes from front */
void kt_buf_free(struct kt_buf *b);
static inline void kt_buf_reset(struct kt_buf *b) { b->len = 0; }

/* Bump arena for per-request scratch (decoded requests, result arrays).
 * Memory is valid until kt_arena_reset/kt_arena_free. */
struct kt_arena_chunk;
struct kt_arena {
  struct kt_arena_chunk *head;
  size_t used_total;
};
void *kt_arena_alloc(struct kt_arena *a, size_t n); /* 16-aligned; aborts on OOM */
void *kt_arena_dup(struct kt_arena *a, const void *p, size_t n);
void kt_arena_reset(struct kt_arena *a); /* keeps the first chunk */
void kt_arena_free(struct kt_arena *a);

/* Seeded PRNG (xoshiro256**). Never seeded from the clock inside core/. */
struct kt_rng {
  uint64_t s[4];
};
void kt_rng_seed(struct kt_rng *r, uint64_t seed);
uint64_t kt_rng_next(struct kt_rng *r);
uint64_t kt_rng_below(struct kt_rng *r, uint64_t n); /* uniform in [0, n) */

/* Byte strings that point into someone else's memory. */
struct kt_bytes {
  const uint8_t *p;
  uint32_t n;
};
int kt_bytes_cmp(struct kt_bytes a, struct kt_bytes b); /* memcmp order, shorter first */

/* Big-endian helpers for formats. */
static inline void kt_put_u32be(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static inline uint32_t kt_get_u32be(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void kt_put_u64be(uint8_t *p, uint64_t v) {
  kt_put_u32be(p, (uint32_t)(v >> 32));
  kt_put_u32be(p + 4, (uint32_t)v);
}
static inline uint64_t kt_get_u64be(const uint8_t *p) {
  return ((uint64_t)kt_get_u32be(p) << 32) | kt_get_u32be(p + 4);
}

#define KT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
