/* core/index.h — an in-memory ordered index: a B+tree from byte-string keys
 * to caller items (void *), keys in memcmp order (kt_bytes_cmp).
 *
 * Owns: the tree nodes and copies of the separator keys in inner nodes. It
 * does not own the items: each item carries its own key, read back with the
 * key_of callback given at init. Leaves hold only item pointers (8 bytes per
 * key), are linked left to right, and are 62 slots wide, so a point lookup
 * touches ~log64(n) nodes and an ordered scan walks contiguous arrays.
 *
 * Why a B+tree (and not ART or a skiplist): at 10M keys the cost that matters
 * is cache misses. A B+tree node is one contiguous array, so a lookup is ~4
 * inner nodes + 1 leaf, ordered iteration is a pointer walk over leaf arrays,
 * and the per-key overhead is one pointer at ~70-100% fill (no per-key tower
 * of pointers as in a skiplist, no per-byte inner nodes as in ART, which also
 * needs extra work for keys that are prefixes of each other). Inner separators
 * are private copies so items can be freed or moved (their slot replaced with
 * kt_index_get) without touching inner nodes.
 *
 * Invariants: leaf keys strictly increasing across the leaf chain; every key
 * in child i of an inner node is >= sep[i-1] and < sep[i]; all leaves at the
 * same depth; count == number of items. Removal merges a node with a sibling
 * when it falls under 1/4 full and the pair fits in one node.
 *
 * Not thread-safe. Iterators are invalidated by insert and remove.
 */
#ifndef KT_INDEX_H
#define KT_INDEX_H

#include "base.h"

typedef struct kt_bytes (*kt_index_key_fn)(const void *item);

struct kt_index {
  void *root; /* NULL when empty */
  int height; /* 0 = root is a leaf */
  uint64_t count;
  uint64_t node_bytes; /* memory held by nodes and separator copies */
  kt_index_key_fn key_of;
};

struct kt_index_it {
  void *leaf; /* NULL = past the end */
  uint32_t pos;
};

void kt_index_init(struct kt_index *ix, kt_index_key_fn key_of);
/* Frees the nodes; calls free_item (may be NULL) on every item in order. */
void kt_index_free(struct kt_index *ix, void (*free_item)(void *item));

/* The slot holding the item with this key, or NULL. The caller may replace
 * *slot with another item that has the same key. */
void **kt_index_get(const struct kt_index *ix, struct kt_bytes key);
/* Inserts item; its key must not be present (asserted). Returns its slot. */
void **kt_index_insert(struct kt_index *ix, void *item);
/* Removes and returns the item with this key, or NULL if absent. */
void *kt_index_remove(struct kt_index *ix, struct kt_bytes key);

/* Positions it on the first item with key >= key (key.n == 0: the first). */
void kt_index_seek(const struct kt_index *ix, struct kt_bytes key, struct kt_index_it *it);
static inline bool kt_index_valid(const struct kt_index_it *it) { return it->leaf != NULL; }
void *kt_index_item(const struct kt_index_it *it);
void kt_index_next(struct kt_index_it *it);

/* O(n) structural check for tests; returns 0 or a description of the fault. */
const char *kt_index_verify(const struct kt_index *ix);

#endif
