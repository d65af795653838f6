/* tools/grpc-bridge/bridge_h2mem.c — the allocator of the bridge's nghttp2
 * sessions.
 *
 * A unary call costs nghttp2 about seven allocations (its stream, the
 * submitted headers and trailers, frame items, ...) and as many frees;
 * through glibc they were ~13% of the bridge's instructions per call at 64
 * concurrent calls (callgrind). Here blocks of up to 4 KiB come from eight
 * size classes (32 B .. 4 KiB, powers of two), and freed ones wait on a free
 * list per class (at most KEEP per class and thread: ~1 MiB at the very
 * most) for the next call; larger blocks go to malloc. The lists are per
 * thread (a session lives on one loop thread; a block freed on another only
 * moves to that thread's list). Under a sanitizer this is plain malloc, so
 * that ASan still sees nghttp2's use of freed memory.
 *
 * Every block has a 16-byte header before it: its class (CLASSES: a malloc'd
 * large block) and its usable size (for realloc).
 */
#include "bridge_h2mem.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define H2MEM_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define H2MEM_PLAIN 1
#endif
#endif

#define CLASSES 8
#define MIN_BYTES 32
#define KEEP 128

struct hdr {
  size_t cls, size;
};
_Static_assert(sizeof(struct hdr) == 16, "16-byte header keeps malloc's alignment");

struct freeblk {
  struct freeblk *next;
};

#ifndef H2MEM_PLAIN
static _Thread_local struct {
  struct freeblk *head[CLASSES];
  unsigned n[CLASSES];
} lists;
#endif

static void *h2_malloc(size_t size, void *ud) {
  (void)ud;
#ifdef H2MEM_PLAIN
  return malloc(size);
#else
  size_t cls = 0, cap = MIN_BYTES;
  while (cap < size && cls < CLASSES) {
    cap <<= 1;
    cls++;
  }
  struct hdr *h;
  if (cls == CLASSES) {
    if (size > SIZE_MAX - sizeof *h || !(h = malloc(sizeof *h + size)))
      return NULL;
    cap = size;
  } else if (lists.head[cls]) {
    h = (struct hdr *)lists.head[cls] - 1;
    lists.head[cls] = lists.head[cls]->next;
    lists.n[cls]--;
  } else if (!(h = malloc(sizeof *h + cap))) {
    return NULL;
  }
  h->cls = cls;
  h->size = cap;
  return h + 1;
#endif
}

static void h2_free(void *p, void *ud) {
  (void)ud;
#ifdef H2MEM_PLAIN
  free(p);
#else
  if (!p)
    return;
  struct hdr *h = (struct hdr *)p - 1;
  size_t cls = h->cls;
  if (cls < CLASSES && lists.n[cls] < KEEP) {
    struct freeblk *b = p;
    b->next = lists.head[cls];
    lists.head[cls] = b;
    lists.n[cls]++;
    return;
  }
  free(h);
#endif
}

static void *h2_calloc(size_t n, size_t size, void *ud) {
  if (size && n > SIZE_MAX / size)
    return NULL;
  void *p = h2_malloc(n * size, ud);
  if (p)
    memset(p, 0, n * size);
  return p;
}

static void *h2_realloc(void *p, size_t size, void *ud) {
#ifdef H2MEM_PLAIN
  (void)ud;
  return realloc(p, size);
#else
  if (!p)
    return h2_malloc(size, ud);
  if (!size) {
    h2_free(p, ud);
    return NULL;
  }
  struct hdr *h = (struct hdr *)p - 1;
  if (size <= h->size)
    return p;
  void *q = h2_malloc(size, ud);
  if (!q)
    return NULL; /* p is left as it was, as realloc */
  memcpy(q, p, h->size);
  h2_free(p, ud);
  return q;
#endif
}

static nghttp2_mem mem = {NULL, h2_malloc, h2_free, h2_calloc, h2_realloc};

nghttp2_mem *kt_bridge_h2_mem(void) { return &mem; }
