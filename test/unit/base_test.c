#include "../../core/base.h"
#include "test.h"

TEST(errors_have_names_and_messages) {
  CHECK_STR(kt_strerror(KT_ECOMPACTED), "mvcc: required revision has been compacted");
  CHECK_STR(kt_errname(KT_ENOSPACE), "ENOSPACE");
  CHECK_STR(kt_strerror(9999), "unknown error");
}

TEST(buf_append_consume) {
  struct kt_buf b = {0};
  for (int i = 0; i < 1000; i++)
    kt_buf_append(&b, "abcd", 4);
  CHECK_EQ(b.len, 4000);
  kt_buf_consume(&b, 3998);
  CHECK_BYTES(b.p, b.len, "cd");
  kt_buf_free(&b);
}

TEST(arena_alignment_and_reset) {
  struct kt_arena a = {0};
  for (int i = 0; i < 10000; i++) {
    void *p = kt_arena_alloc(&a, (size_t)i % 100 + 1);
    CHECK(((uintptr_t)p & 15) == 0);
  }
  kt_arena_reset(&a);
  CHECK_EQ(a.used_total, 0);
  kt_arena_free(&a);
}

TEST(rng_is_deterministic) {
  struct kt_rng a, b;
  kt_rng_seed(&a, 42);
  kt_rng_seed(&b, 42);
  for (int i = 0; i < 100; i++)
    CHECK_EQ(kt_rng_next(&a), kt_rng_next(&b));
  for (int i = 0; i < 1000; i++)
    CHECK(kt_rng_below(&a, 7) < 7);
}

TEST(bytes_order) {
  struct kt_bytes a = {(const uint8_t *)"ab", 2}, b = {(const uint8_t *)"abc", 3};
  CHECK(kt_bytes_cmp(a, b) < 0);
  CHECK(kt_bytes_cmp(b, a) > 0);
  CHECK(kt_bytes_cmp(a, a) == 0);
}
