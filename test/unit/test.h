/* test/unit/test.h — the tiny unit-test runner.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ(a, b); CHECK_STR(s, "x"); }
 *
 * Each TEST registers itself; test_main.c runs them all (or those whose name
 * contains argv[1]) and prints "ok <file>/<name>" or "FAIL <file>/<name>:
 * file:line: what". A failed CHECK returns from the test function. */
#ifndef KT_TEST_H
#define KT_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef void (*kt_test_fn)(void);
void kt_test_register(const char *file, const char *name, kt_test_fn fn);
void kt_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A fresh empty directory for this test (removed afterwards unless failed). */
const char *kt_test_tmpdir(void);

#define TEST(name)                                                                                 \
  static void name(void);                                                                          \
  __attribute__((constructor)) static void kt_reg_##name(void) {                                   \
    kt_test_register(__FILE__, #name, name);                                                       \
  }                                                                                                \
  static void name(void)

#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      kt_test_fail(__FILE__, __LINE__, "%s", #c);                                                  \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define CHECK_EQ(a, b)                                                                             \
  do {                                                                                             \
    long long kt_a_ = (long long)(a), kt_b_ = (long long)(b);                                      \
    if (kt_a_ != kt_b_) {                                                                          \
      kt_test_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, kt_a_, kt_b_);           \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#define CHECK_STR(a, b)                                                                            \
  do {                                                                                             \
    const char *kt_a_ = (a), *kt_b_ = (b);                                                         \
    if (!kt_a_ || !kt_b_ || strcmp(kt_a_, kt_b_) != 0) {                                           \
      kt_test_fail(__FILE__, __LINE__, "%s == %s (\"%s\" != \"%s\")", #a, #b,                      \
                   kt_a_ ? kt_a_ : "(null)", kt_b_ ? kt_b_ : "(null)");                            \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/* Compare a (pointer, length) byte string with a C string. */
#define CHECK_BYTES(p, n, s)                                                                       \
  do {                                                                                             \
    size_t kt_n_ = (size_t)(n);                                                                    \
    if (kt_n_ != strlen(s) || (kt_n_ && memcmp((p), (s), kt_n_) != 0)) {                           \
      kt_test_fail(__FILE__, __LINE__, "%s == \"%s\" (got \"%.*s\")", #p, (s), (int)kt_n_,         \
                   (const char *)(p));                                                             \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#endif
