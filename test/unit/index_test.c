#include "../../core/index.h"
#include "test.h"

#include <stdlib.h>

/* Items are malloc'd NUL-terminated strings; key excludes the NUL. */
static struct kt_bytes key_of(const void *item) {
  const char *s = item;
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
}
static struct kt_bytes B(const char *s) {
  return (struct kt_bytes){(const uint8_t *)s, (uint32_t)strlen(s)};
} static char *mk(uint64_t v) {
  char *s = malloc(24);
  snprintf(s, 24, "k%08llu", (unsigned long long)v);
  return s;
}

TEST(index_empty) {
  struct kt_index ix;
  kt_index_init(&ix, key_of);
  CHECK(kt_index_get(&ix, B("a")) == NULL);
  CHECK(kt_index_remove(&ix, B("a")) == NULL);
  struct kt_index_it it;
  kt_index_seek(&ix, B(""), &it);
  CHECK(!kt_index_valid(&it));
  CHECK(kt_index_verify(&ix) == NULL);
  kt_index_free(&ix, NULL);
}

/* Random inserts and removes against a presence bitmap; checks order,
 * lookups, seeks and the structure as it grows to several levels and
 * shrinks back to empty. */
TEST(index_random_against_bitmap) {
  enum { N = 20000 };
  static bool present[N];
  memset(present, 0, sizeof present);
  struct kt_index ix;
  kt_index_init(&ix, key_of);
  struct kt_rng r;
  kt_rng_seed(&r, 7);
  uint64_t count = 0;
  for (int step = 0; step < 200000; step++) {
    uint64_t v = kt_rng_below(&r, N);
    char buf[24];
    snprintf(buf, sizeof buf, "k%08llu", (unsigned long long)v);
    bool grow = step < 100000 ? kt_rng_below(&r, 10) < 7 : kt_rng_below(&r, 10) < 2;
    if (grow && !present[v]) {
      void **slot = kt_index_insert(&ix, mk(v));
      CHECK(strcmp(*slot, buf) == 0);
      present[v] = true;
      count++;
    } else if (!grow) {
      char *it = kt_index_remove(&ix, B(buf));
      CHECK((it != NULL) == present[v]);
      if (it) {
        CHECK(strcmp(it, buf) == 0);
        free(it);
        present[v] = false;
        count--;
      }
    }
    CHECK_EQ(ix.count, count);
    if (step % 10000 == 0) {
      const char *err = kt_index_verify(&ix);
      if (err)
        printf("verify: %s\n", err);
      CHECK(err == NULL);
      /* full scan agrees with the bitmap */
      struct kt_index_it it;
      kt_index_seek(&ix, B(""), &it);
      for (uint64_t i = 0; i < N; i++) {
        if (!present[i])
          continue;
        CHECK(kt_index_valid(&it));
        char want[24];
        snprintf(want, sizeof want, "k%08llu", (unsigned long long)i);
        CHECK(strcmp(kt_index_item(&it), want) == 0);
        kt_index_next(&it);
      }
      CHECK(!kt_index_valid(&it));
    }
    if (step % 1000 == 0) { /* seek to a random point */
      uint64_t s = kt_rng_below(&r, N);
      char want[24];
      snprintf(want, sizeof want, "k%08llu", (unsigned long long)s);
      struct kt_index_it it;
      kt_index_seek(&ix, B(want), &it);
      uint64_t j = s;
      while (j < N && !present[j])
        j++;
      if (j == N) {
        CHECK(!kt_index_valid(&it));
      } else {
        snprintf(want, sizeof want, "k%08llu", (unsigned long long)j);
        CHECK(kt_index_valid(&it));
        CHECK(strcmp(kt_index_item(&it), want) == 0);
      }
    }
  }
  for (uint64_t v = 0; v < N; v++) {
    char buf[24];
    snprintf(buf, sizeof buf, "k%08llu", (unsigned long long)v);
    CHECK((kt_index_get(&ix, B(buf)) != NULL) == present[v]);
    free(kt_index_remove(&ix, B(buf)));
  }
  CHECK_EQ(ix.count, 0);
  CHECK(ix.root == NULL);
  CHECK_EQ(ix.node_bytes, 0);
  kt_index_free(&ix, free);
}

/* Keys with long shared prefixes, inserted in ascending then descending
 * order (appends and prepends change the leaf prefixes), keys that are
 * prefixes of each other and keys with zero bytes (items hold explicit
 * lengths here). */
struct bk {
  uint32_t n;
  uint8_t b[40];
};
static struct kt_bytes bk_key(const void *item) {
  const struct bk *k = item;
  return (struct kt_bytes){k->b, k->n};
}
TEST(index_shared_prefixes_and_order) {
  struct kt_index ix;
  kt_index_init(&ix, bk_key);
  enum { N = 5000 };
  static struct bk keys[3 * N];
  int nk = 0;
  for (int i = 0; i < N; i++) { /* ascending */
    struct bk *k = &keys[nk++];
    k->n = (uint32_t)snprintf((char *)k->b, sizeof k->b, "/registry/pods/default/p-%06d", i);
    kt_index_insert(&ix, k);
  }
  for (int i = N - 1; i >= 0; i--) { /* descending, sorting before the others */
    struct bk *k = &keys[nk++];
    k->n = (uint32_t)snprintf((char *)k->b, sizeof k->b, "/registry/a/%06d", i);
    kt_index_insert(&ix, k);
  }
  for (int i = 0; i < N; i++) { /* prefixes and zero bytes: "x", "x\0", "x\0\0"... */
    struct bk *k = &keys[nk++];
    memset(k->b, 0, sizeof k->b);
    k->b[0] = 'x';
    k->b[1] = (uint8_t)(i / 256);
    k->b[2] = (uint8_t)(i % 256);
    k->n = 1 + (uint32_t)(i % 3);
    if (kt_index_get(&ix, bk_key(k))) { /* duplicates of short forms */
      nk--;
      continue;
    }
    kt_index_insert(&ix, k);
  }
  CHECK(kt_index_verify(&ix) == NULL);
  CHECK_EQ(ix.count, nk);
  for (int i = 0; i < nk; i++) {
    void **slot = kt_index_get(&ix, bk_key(&keys[i]));
    CHECK(slot && *slot == &keys[i]);
  }
  struct kt_rng r;
  kt_rng_seed(&r, 3);
  for (int i = 0; i < nk; i += 2)
    CHECK(kt_index_remove(&ix, bk_key(&keys[i])) == &keys[i]);
  CHECK(kt_index_verify(&ix) == NULL);
  for (int i = 0; i < nk; i++)
    CHECK((kt_index_get(&ix, bk_key(&keys[i])) != NULL) == (i % 2 == 1));
  /* in-order walk is strictly increasing */
  struct kt_index_it it;
  kt_index_seek(&ix, (struct kt_bytes){0}, &it);
  struct kt_bytes prev = {0};
  uint64_t seen = 0;
  for (; kt_index_valid(&it); kt_index_next(&it), seen++) {
    struct kt_bytes k = bk_key(kt_index_item(&it));
    if (seen)
      CHECK(kt_bytes_cmp(prev, k) < 0);
    prev = k;
  }
  CHECK_EQ(seen, ix.count);
  kt_index_free(&ix, NULL);
}

/* Keys inserted in order (a restore from a snapshot, sequential puts) fill
 * the leaves: node memory stays near one 8-byte pointer + 4-byte hint per
 * key (a middle split would leave every leaf half empty: ~24 B per key);
 * random inserts after that still keep the tree valid. */
TEST(index_in_order_inserts_fill_leaves) {
  enum { N = 100000 };
  struct kt_index ix;
  kt_index_init(&ix, key_of);
  for (uint64_t v = 0; v < N; v++)
    kt_index_insert(&ix, mk(v * 2));
  CHECK(kt_index_verify(&ix) == NULL);
  double per_key = (double)ix.node_bytes / N;
  CHECK(per_key < 13.2);
  struct kt_rng r;
  kt_rng_seed(&r, 11);
  for (int i = 0; i < 20000; i++) { /* odd keys fall between the full leaves' keys */
    uint64_t v = kt_rng_below(&r, N) * 2 + 1;
    char buf[24];
    snprintf(buf, sizeof buf, "k%08llu", (unsigned long long)v);
    if (!kt_index_get(&ix, B(buf)))
      kt_index_insert(&ix, mk(v));
  }
  CHECK(kt_index_verify(&ix) == NULL);
  struct kt_index_it it;
  kt_index_seek(&ix, B("k"), &it);
  uint64_t seen = 0;
  for (; kt_index_valid(&it); kt_index_next(&it))
    seen++;
  CHECK_EQ(seen, ix.count);
  kt_index_free(&ix, free);
}
