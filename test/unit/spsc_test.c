/* test/unit/spsc_test.c — net/spsc.h, the ring between an I/O thread and the
 * state thread: capacity, batches visible only once published, slots given
 * back only once released, and two real threads passing a million values
 * in order with nothing lost or repeated. */
#include "test.h"

#include <pthread.h>
#include <stdint.h>

#include "../../net/spsc.h"

TEST(spsc_capacity_publish_release) {
  struct kt_spsc q;
  kt_spsc_init(&q, 4);
  uintptr_t v[8];
  for (int i = 0; i < 8; i++)
    v[i] = (uintptr_t)i + 1;
  CHECK(kt_spsc_pop(&q) == NULL);
  for (int i = 0; i < 4; i++)
    CHECK(kt_spsc_push(&q, (void *)v[i]));
  CHECK(!kt_spsc_push(&q, (void *)v[4])); /* full */
  CHECK(!kt_spsc_room(&q));
  CHECK(kt_spsc_pop(&q) == NULL); /* pushed, not yet published */
  CHECK(kt_spsc_publish(&q));
  CHECK(!kt_spsc_publish(&q)); /* nothing new */
  CHECK_EQ((uintptr_t)kt_spsc_pop(&q), 1);
  CHECK_EQ((uintptr_t)kt_spsc_pop(&q), 2);
  CHECK(!kt_spsc_room(&q)); /* popped, not yet released */
  kt_spsc_release(&q);
  CHECK(kt_spsc_room(&q));
  CHECK(kt_spsc_push(&q, (void *)v[4]));
  CHECK(kt_spsc_push(&q, (void *)v[5]));
  CHECK(!kt_spsc_push(&q, (void *)v[6]));
  kt_spsc_publish(&q);
  for (uintptr_t want = 3; want <= 6; want++)
    CHECK_EQ((uintptr_t)kt_spsc_pop(&q), want);
  CHECK(kt_spsc_pop(&q) == NULL);
  kt_spsc_release(&q);
  kt_spsc_free(&q);
}

#define N_VALUES 1000000u

static void *producer(void *arg) {
  struct kt_spsc *q = arg;
  uintptr_t next = 1;
  while (next <= N_VALUES) {
    unsigned batch = 0;
    while (next <= N_VALUES && batch < 100 && kt_spsc_push(q, (void *)next)) {
      next++;
      batch++;
    }
    kt_spsc_publish(q);
  }
  return NULL;
}

TEST(spsc_two_threads_in_order) {
  struct kt_spsc q;
  kt_spsc_init(&q, 64); /* small: the producer meets a full ring often */
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, producer, &q), 0);
  uintptr_t want = 1;
  unsigned long bad = 0;
  while (want <= N_VALUES) {
    void *p;
    unsigned got = 0;
    while ((p = kt_spsc_pop(&q))) {
      if ((uintptr_t)p != want)
        bad++;
      want = (uintptr_t)p + 1;
      got++;
    }
    if (got)
      kt_spsc_release(&q);
  }
  pthread_join(th, NULL);
  CHECK_EQ(bad, 0);
  CHECK(kt_spsc_pop(&q) == NULL);
  kt_spsc_free(&q);
}
