/* net/spsc.h — a bounded single-producer single-consumer ring of pointers,
 * the queue between an I/O thread and the state thread (net/THREADS.md).
 *
 * The shape of Concurrency Kit's ck_ring / valkey's queues.h: a power-of-two
 * array of slots; the consumer's index (head) and the producer's (tail) on
 * cache lines of their own, each side caching the other's last seen index
 * so that a push or a pop reads the other side's line only when the cached
 * view says full or empty. Batches: the producer pushes into slots beyond
 * the published tail (kt_spsc_push) and makes the whole batch visible with
 * one release store (kt_spsc_publish); the consumer pops (kt_spsc_pop) and
 * gives the slots back with one release store (kt_spsc_release).
 *
 * Threads: kt_spsc_push and kt_spsc_publish on the producer's thread only,
 * kt_spsc_pop and kt_spsc_release on the consumer's only; init and free
 * while neither runs. What a slot points to is published with it (the
 * release store of tail / acquire load of it): the consumer sees every write
 * the producer made to it before publishing.
 */
#ifndef KT_SPSC_H
#define KT_SPSC_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "../core/base.h"

struct kt_spsc {
  /* consumer's line */
  alignas(64) _Atomic size_t head; /* slots before it are free (released) */
  size_t chead;                    /* consumer: next to pop (released at kt_spsc_release) */
  size_t tail_seen;                /* consumer: last tail it loaded */
  /* producer's line */
  alignas(64) _Atomic size_t tail; /* slots before it are published */
  size_t ptail;                    /* producer: next to fill (published at kt_spsc_publish) */
  size_t head_seen;                /* producer: last head it loaded */
  /* read-only after init */
  alignas(64) size_t mask;
  void **slot;
};

/* cap: a power of two. */
static inline void kt_spsc_init(struct kt_spsc *q, size_t cap) {
  kt_assert(cap >= 2 && (cap & (cap - 1)) == 0);
  atomic_init(&q->head, 0);
  atomic_init(&q->tail, 0);
  q->chead = q->tail_seen = q->ptail = q->head_seen = 0;
  q->mask = cap - 1;
  q->slot = calloc(cap, sizeof *q->slot);
  kt_assert(q->slot);
}

static inline void kt_spsc_free(struct kt_spsc *q) {
  free(q->slot);
  q->slot = NULL;
}

/* Producer: p into the next slot, not yet visible; false when full. */
static inline bool kt_spsc_push(struct kt_spsc *q, void *p) {
  if (q->ptail - q->head_seen > q->mask) {
    q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
    if (q->ptail - q->head_seen > q->mask)
      return false;
  }
  q->slot[q->ptail & q->mask] = p;
  q->ptail++;
  return true;
}

/* Producer: make every slot pushed so far visible. True if there were any. */
static inline bool kt_spsc_publish(struct kt_spsc *q) {
  if (atomic_load_explicit(&q->tail, memory_order_relaxed) == q->ptail)
    return false;
  atomic_store_explicit(&q->tail, q->ptail, memory_order_release);
  return true;
}

/* Producer: whether a push would fit now (reloads the consumer's index). */
static inline bool kt_spsc_room(struct kt_spsc *q) {
  if (q->ptail - q->head_seen <= q->mask)
    return true;
  q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
  return q->ptail - q->head_seen <= q->mask;
}

/* Consumer: the next published pointer, or NULL when none. */
static inline void *kt_spsc_pop(struct kt_spsc *q) {
  if (q->chead == q->tail_seen) {
    q->tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (q->chead == q->tail_seen)
      return NULL;
  }
  void *p = q->slot[q->chead & q->mask];
  q->chead++;
  return p;
}

/* Consumer: give back every slot popped so far. */
static inline void kt_spsc_release(struct kt_spsc *q) {
  atomic_store_explicit(&q->head, q->chead, memory_order_release);
}

/* The overflow in front of a ring: what found it full waits in an intrusive
 * FIFO (head, tail: pointers to any struct with a `next` pointer), in order.
 * Macros, so each side keeps its own message type; arguments are evaluated
 * more than once. */
#define KT_FIFO_PUSH(head, tail, m)                                                                \
  do {                                                                                             \
    (m)->next = NULL;                                                                              \
    if (tail)                                                                                      \
      (tail)->next = (m);                                                                          \
    else                                                                                           \
      (head) = (m);                                                                                \
    (tail) = (m);                                                                                  \
  } while (0)

/* Producer: the FIFO's messages into q while it has room (not published),
 * in order; the rest stay (head moved iff one was pushed). */
#define KT_FIFO_FEED(q, head, tail)                                                                \
  do {                                                                                             \
    while ((head) && kt_spsc_push((q), (head)))                                                    \
      (head) = (head)->next;                                                                       \
    if (!(head))                                                                                   \
      (tail) = NULL;                                                                               \
  } while (0)

#endif
