/* snap/bbolt.h — bbolt database files (etcd's backend): a bounds-checked
 * reader over the bytes of a file, and a writer of new files.
 *
 * Owns: the bbolt page format (go.etcd.io/bbolt 1.3, file format version 2),
 * nothing of etcd's schema (tools/etcddb/ maps etcd's buckets to ketch).
 *
 * The format, as this code reads and writes it (all integers little-endian,
 * as bbolt writes them on amd64 and arm64; P = the page size):
 *   page N         bytes [N*P, (N+1+overflow)*P): a 16-byte header
 *                    0 u64 id (= N) | 8 u16 flags | 10 u16 count | 12 u32 overflow
 *                  flags 0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist; a page
 *                  with overflow k spans k + 1 pages (large values).
 *   meta (pages 0, 1)  after the header: 0 u32 magic 0xED0CDAED | 4 u32 version 2 |
 *                  8 u32 page size | 12 u32 flags | 16 u64 root bucket's root page |
 *                  24 u64 root bucket's sequence | 32 u64 freelist page (or
 *                  0xFFFF...FF: none, etcd's NoFreelistSync) | 40 u64 pgid (pages in
 *                  use: the high-water mark) | 48 u64 txid | 56 u64 checksum =
 *                  FNV-1a 64 of bytes [0, 56) of the meta (0: not checked, as bbolt).
 *                  Page 0 sits at offset 0 and gives P; page 1 at offset P. The valid
 *                  meta with the larger txid is the database (bbolt's rule).
 *   branch page    count elements of 16 bytes after the header: u32 pos | u32 ksize |
 *                  u64 child page; the key is ksize bytes at (element + pos). Keys
 *                  ascend; each is its child's first key.
 *   leaf page      count elements of 16 bytes: u32 flags | u32 pos | u32 ksize | u32
 *                  vsize; key at (element + pos), value right after it. flags 0x01:
 *                  the value is a nested bucket: u64 root page | u64 sequence, and
 *                  when root is 0 an inline page (header + elements, a leaf) follows
 *                  inside the value.
 *   freelist page  count u64 page ids (count 0xFFFF: the first u64 is the count).
 *   a bucket       a tree of branch and leaf pages from its root page; the root
 *                  bucket's leaf entries are the top-level buckets (etcd: "key",
 *                  "meta", "lease", ...).
 *
 * Reading rule (kt_bbolt_open and the walks): a file is accepted only if a meta
 * page is valid (magic, version, checksum, a power-of-two page size of 512 to
 * 64 KiB, pgid within the file), every page a walk visits lies below the
 * high-water mark and wholly inside the file, has the type its parent says,
 * is visited once per walk (a page reached twice is an error, as bbolt's
 * check), has its elements and their keys and values inside its span, and
 * keys ascend strictly through the walk; nesting is at most KT_BBOLT_MAX_DEPTH
 * pages deep. Any violation is KT_ECORRUPT with a message naming the page
 * ("db: page 42: leaf element 3 value runs past the page's 1 pages"). Bytes
 * after the last page (etcdctl's SHA-256 trailer) are ignored.
 *
 * Writing, in two runs over the same puts: a dry run places every page and
 * so learns what the metas say (the root bucket's page, the freelist, the
 * page count); the real run then hands the file to a sink strictly in order
 * (a file, or a network stream, needs no seek): the two metas, each
 * bucket's leaves as keys come (ascending), its branch levels bottom-up, the
 * root bucket's page, an empty freelist page. Pages are filled to P (a
 * single larger entry gets overflow pages), every page reachable, nothing
 * free: the shape `bbolt check` and etcd's `snapshot status` accept.
 *
 * Memory: the reader allocates one bit per page for a walk; the writer keeps
 * one page of leaves, up to 1 MiB of output and the first key of each page
 * it wrote (for the branch levels) per bucket.
 */
#ifndef KT_BBOLT_H
#define KT_BBOLT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/base.h"

#define KT_BBOLT_MAGIC 0xED0CDAEDu
#define KT_BBOLT_VERSION 2
#define KT_BBOLT_PAGE_SIZE 4096 /* what the writer uses (etcd's, on amd64) */
#define KT_BBOLT_MAX_DEPTH 64   /* branch levels plus nested buckets a walk follows */
#define KT_BBOLT_NO_FREELIST UINT64_MAX

/* A read-only view of a bbolt file held in memory (mmap'd or read). */
struct kt_bbolt {
  const uint8_t *p;
  size_t n;
  const char *name; /* for messages */
  uint32_t page_size;
  uint64_t root, freelist, pgid, txid; /* of the meta in use */
  int meta;                            /* 0 or 1 */
};

/* A bucket: its root page, or (root 0) an inline leaf page inside its parent's
 * value. */
struct kt_bbolt_bucket {
  uint64_t root;
  const uint8_t *inline_page; /* root == 0 */
  size_t inline_len;
};

/* Checks the meta pages of p[0..n) and picks the one in use. name appears in
 * messages. Errors: ECORRUPT (not a bbolt file, or both metas invalid: the
 * message says why, e.g. "db: page 0: bad magic 0x00000000 (not a bbolt
 * file)"), EVERSION (a format version other than 2). */
int kt_bbolt_open(struct kt_bbolt *db, const uint8_t *p, size_t n, const char *name,
                  struct kt_err *e);

/* The root bucket (the database's top level). */
struct kt_bbolt_bucket kt_bbolt_root(const struct kt_bbolt *db);

/* Called for each key of a bucket, ascending. value is a nested bucket's raw
 * value when is_bucket (open it with kt_bbolt_child). Pointers are into the
 * file: valid while it is. A non-zero return stops the walk and is
 * returned. */
typedef int (*kt_bbolt_fn)(void *arg, const uint8_t *key, size_t klen, const uint8_t *value,
                           size_t vlen, bool is_bucket);

/* Walks bucket b (every page checked by the reading rule). Errors: ECORRUPT
 * (naming the page), ENOMEM, or fn's code. */
int kt_bbolt_each(const struct kt_bbolt *db, const struct kt_bbolt_bucket *b, kt_bbolt_fn fn,
                  void *arg, struct kt_err *e);

/* The nested bucket named name[0..len) of parent: 0 and *out filled,
 * ENOTFOUND if there is no such key, EINVAL if the key is not a bucket,
 * ECORRUPT as kt_bbolt_each. */
int kt_bbolt_bucket(const struct kt_bbolt *db, const struct kt_bbolt_bucket *parent,
                    const char *name, struct kt_bbolt_bucket *out, struct kt_err *e);

/* Decodes a nested bucket's value (the is_bucket value of a walk). Errors:
 * ECORRUPT (too short, or an inline page that does not fit the value). */
int kt_bbolt_child(const struct kt_bbolt *db, const uint8_t *value, size_t vlen,
                   struct kt_bbolt_bucket *out, struct kt_err *e);

/* ---- writer ---- */

struct kt_bbolt_writer;

/* Receives the file's bytes in order (the whole file, page 0 first). Returns
 * 0 or a KT_E* code with e filled. */
typedef int (*kt_bbolt_sink)(void *arg, const uint8_t *p, size_t n, struct kt_err *e);

/* Where the metas point: known only once every page is placed, so a file is
 * written twice over the same puts: a dry run (no sink) computes it, then
 * the real run writes the metas first and every page after in file order. */
struct kt_bbolt_layout {
  uint64_t root, freelist, pgid; /* pgid: pages in the file */
};
uint64_t kt_bbolt_layout_bytes(const struct kt_bbolt_layout *l); /* the file's size */

/* A dry run (sink and plan NULL: nothing is written, values are not read;
 * finish gives the layout), or the real run (both given: the plan from a dry
 * run over exactly the same buckets and puts). NULL if out of memory or
 * only one of sink and plan is given. */
struct kt_bbolt_writer *kt_bbolt_writer_new(kt_bbolt_sink sink, void *arg, const char *name,
                                            const struct kt_bbolt_layout *plan);

/* Starts the next top-level bucket (names in any order, each once). Errors:
 * EINVAL (empty or duplicate name, or after finish), the sink's. */
int kt_bbolt_writer_bucket(struct kt_bbolt_writer *w, const char *name, struct kt_err *e);

/* Adds key/value to the current bucket; keys strictly ascending within it;
 * value may be NULL in a dry run. Errors: EINVAL (no bucket, empty key or key
 * > 32768 bytes (bbolt's MaxKeySize), key not ascending, value > 2^31 - 2),
 * the sink's. */
int kt_bbolt_writer_put(struct kt_bbolt_writer *w, const uint8_t *key, size_t klen,
                        const uint8_t *value, size_t vlen, struct kt_err *e);

/* Ends the last bucket and writes the root page and an empty freelist; the
 * metas (txid 1 and 2) were written first. *layout (may be NULL) gets where
 * things are. Errors: the sink's, EINVAL (a real run whose pages differ from
 * its plan: not the same puts). */
int kt_bbolt_writer_finish(struct kt_bbolt_writer *w, struct kt_bbolt_layout *layout,
                           struct kt_err *e);

void kt_bbolt_writer_free(struct kt_bbolt_writer *w);

#endif
