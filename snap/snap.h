/* snap/snap.h — snapshot files: the writer, the reader, listing and retention.
 *
 * Owns: the snapshot file format (snap/FORMAT.md is its spec), the one writer
 * thread per snapshot being written, and the *.snap files of a snapshot dir.
 *
 * Data flow (write): on the loop thread the node opens a writer with the
 * snapshot's meta (term, index, revisions, membership), then feeds the
 * records kt_mvcc_iter produces in slices with kt_snap_writer_add. add()
 * appends msgpack to an in-memory block; a full block (~1 MiB) is handed to
 * the writer thread, which lz4-compresses it, hashes it and write()s it to
 * "<dir>/<term>-<index>.snap.tmp". kt_snap_writer_finish hands over the
 * end; the thread writes the trailer, fsyncs, renames to the final name,
 * fsyncs the dir and removes the snapshots beyond opts->keep. The thread
 * calls opts->notify after each block and at the end (the node wires it to
 * ev_async_send); the loop thread then calls kt_snap_writer_poll for the
 * verdict.
 *
 * The node's slice loop, one slice per loop turn (and again on notify):
 *   if (!kt_snap_writer_can_add(w)) wait for notify;       // backpressure
 *   else r = kt_mvcc_iter(store, rev, &cursor, 1000, &arena, add_cb, w);
 *   when r == 0: kt_snap_writer_finish(w); then on notify:
 *   kt_snap_writer_poll(w, &done, &err) -> RUNNING / DONE / FAILED; free.
 *
 * Data flow (read): kt_snap_load streams a file block by block (memory is
 * bounded by the largest block, capped at KT_SNAP_MAX_BLOCK_RAW) and calls
 * back once per record; the file hash is known only at the end.
 *
 * Invariants: the loop thread never waits on the disk except the one
 * open(2) in kt_snap_writer_open and the join in kt_snap_writer_free of a
 * writer that has not finished. Memory is bounded by backpressure at slice
 * granularity: the node asks kt_snap_writer_can_add before each slice and
 * waits for the next notify when it is false; add() itself never refuses
 * for lack of room (kt_mvcc_iter's cursor resumes at a key, so a slice must
 * not stop in the middle of one), so at most max_inflight blocks plus one
 * slice's worth of bytes are held. A final "*.snap" name only ever names a
 * complete, fsynced file; a file is accepted only if every rule of
 * FORMAT.md holds, including the BLAKE2b hash over all of it.
 *
 * Chunked access (Raft InstallSnapshot, `ketchctl snapshot save`): a
 * snapshot travels as the exact bytes of its file (FORMAT.md "Chunked
 * transfer"); the sender reads byte ranges of a finished file, the receiver
 * checks the whole file before it renames it into place.
 *
 * No ev.h here: the writer reports through a plain function pointer.
 */
#ifndef KT_SNAP_H
#define KT_SNAP_H

#include <sys/types.h>

#include "../core/ops.h"

#define KT_SNAP_FORMAT_VERSION 1
#define KT_SNAP_MAGIC "KETCHSNP"               /* 8 bytes, no NUL */
#define KT_SNAP_MAX_MEMBERSHIP (64u << 20)     /* meta blob cap (membership, leases): 64 MiB */
#define KT_SNAP_MAX_CREATOR 255                /* creator string cap */
#define KT_SNAP_MAX_BLOCK_RAW (64u << 20)      /* one block's raw msgpack cap */
#define KT_SNAP_BLOCK_BYTES_DEFAULT (1u << 20) /* target raw block size */
#define KT_SNAP_MAX_INFLIGHT_DEFAULT 4         /* blocks queued before can_add says no */
#define KT_SNAP_HASH_BYTES 32

/* The etcd envelope (snap/FORMAT.md): what ketch-grpc's Maintenance.Snapshot
 * sent before it sent etcd databases (tools/etcddb), so that etcdctl's
 * `snapshot save` (which wants a file of 512*k + 32 bytes ending in a
 * SHA-256, as etcd's bbolt snapshots are) kept it; such backups stay readable:
 *   snapshot file (len bytes) | zero bytes | "KETCHENV" | len u64 BE |
 *   SHA-256 of everything before it
 * with the zeros making everything before the SHA-256 a multiple of 512.
 * kt_snap_load/verify/load_mem read an enveloped file as the snapshot
 * inside. */
#define KT_SNAP_ENV_MAGIC "KETCHENV" /* 8 bytes, no NUL */
#define KT_SNAP_ENV_TAIL 48          /* magic, length, SHA-256 */
static inline uint64_t kt_snap_env_size(uint64_t len) { return (len + 16 + 511) / 512 * 512 + 32; }

/* Record types (the first element of each record's msgpack array). */
enum kt_snap_rec_type { KT_SNAP_REC_KVREV = 1 };

/* What a snapshot's header and trailer say.
 * Writer: the caller fills term..creator; membership points to the caller's
 * bytes (copied by kt_snap_writer_open). Reader: everything is filled;
 * membership.p is malloc'd and owned by the meta: release with
 * kt_snap_meta_free. */
struct kt_snap_meta {
  uint64_t term, index;               /* raft term and index the snapshot covers */
  int64_t revision, compact_revision; /* store revisions; 0 <= compact <= revision */
  struct kt_bytes
      membership; /* opaque to snap/ (ketch: membership text, NUL, lease table), <= 64 MiB */
  uint64_t created_unix_ms;              /* 0 = the writer stamps the current time */
  char creator[KT_SNAP_MAX_CREATOR + 1]; /* e.g. "ketch 0.1.0 member=..."; "" ok */
  /* Filled by the reader (and by the writer once done): */
  uint64_t record_count, block_count, live_keys, raw_bytes, file_bytes;
  uint8_t hash[KT_SNAP_HASH_BYTES]; /* BLAKE2b-256 of the file before the hash */
};
void kt_snap_meta_free(struct kt_snap_meta *m);
/* etcd-style 32-bit hash for `snapshot status`: first 4 hash bytes, big-endian. */
uint32_t kt_snap_hash32(const struct kt_snap_meta *m);
/* "%016llx-%016llx.snap" of term and index into buf (>= 38 bytes). */
void kt_snap_name(uint64_t term, uint64_t index, char *buf, size_t n);

/* ---- file I/O, behind an ops table so tests can inject errors ----
 * Each returns what the libc call returns (-1 with errno set on error).
 * fsync_dir opens the directory, fsyncs it and closes it. Called from the
 * writer thread (all but open) and the loop thread (open, unlink on abort). */
struct kt_snap_fileops {
  int (*open)(void *ctx, const char *path, int flags, mode_t mode);
  ssize_t (*write)(void *ctx, int fd, const void *p, size_t n);
  int (*fsync)(void *ctx, int fd);
  int (*close)(void *ctx, int fd);
  int (*rename)(void *ctx, const char *from, const char *to);
  int (*unlink)(void *ctx, const char *path);
  int (*fsync_dir)(void *ctx, const char *dir);
  void *ctx;
};
extern const struct kt_snap_fileops kt_snap_fileops_posix;

/* ---- writer ---- */

struct kt_snap_writer_opts {
  size_t block_bytes;                /* raw bytes per block; 0 = 1 MiB; <= KT_SNAP_MAX_BLOCK_RAW */
  int max_inflight;                  /* blocks queued or being written; 0 = 4 */
  const struct kt_snap_fileops *ops; /* NULL = kt_snap_fileops_posix */
  /* Called from the writer thread after each block is written and once at
   * the end (success or failure). Must be thread-safe and quick
   * (ev_async_send). May be NULL (then poll periodically). */
  void (*notify)(void *arg);
  void *notify_arg;
  /* Retention: once the snapshot is durable, the writer thread removes all
   * but the newest `keep` snapshots of the dir (kt_snap_purge; an unlink of
   * a big file takes milliseconds, too long for the loop). 0 = none. A
   * failed removal does not fail the snapshot; it is logged. */
  size_t keep;
};

struct kt_snap_writer;

enum kt_snap_state { KT_SNAP_RUNNING = 0, KT_SNAP_DONE = 1, KT_SNAP_FAILED = 2 };

/* Create "<dir>/<term>-<index>.snap.tmp" (truncating a leftover one) and
 * start the writer thread. meta->membership is copied. opts may be NULL.
 * Errors: EINVAL (bad meta: compact > revision, membership or creator too
 * long, bad opts), EIO (the file cannot be created; message names it). */
int kt_snap_writer_open(const char *dir, const struct kt_snap_meta *meta,
                        const struct kt_snap_writer_opts *opts, struct kt_snap_writer **out,
                        struct kt_err *err);

/* Append one record (copied; rec may be freed after the call). Records must
 * come in kt_mvcc_iter order: keys ascending, per key (mod_revision, mod_sub)
 * ascending, mod_revision <= meta revision; a tombstone has an empty value
 * and create_revision = version = 0. Returns 0, KT_EINVAL (order or fields
 * wrong, or after finish: nothing appended), KT_ETOOLARGE (the record alone
 * exceeds KT_SNAP_MAX_BLOCK_RAW), or the writer's error once it failed
 * (KT_EIO; see poll). Never KT_EBUSY: see kt_snap_writer_can_add. Loop
 * thread only. */
int kt_snap_writer_add(struct kt_snap_writer *w, const struct kt_kvrev *rec);

/* Backpressure, asked before each slice: false while max_inflight blocks
 * are queued or being written (wait for the next notify, then ask again),
 * after finish, and after a failure (poll says why). */
bool kt_snap_writer_can_add(struct kt_snap_writer *w);

/* No more records: hand over the last block and have the thread write the
 * trailer, fsync, rename and fsync the dir. Returns 0 or the writer's
 * error. Never blocks, never KT_EBUSY. Then wait for notify/poll. */
int kt_snap_writer_finish(struct kt_snap_writer *w);

/* The verdict, without blocking: RUNNING, DONE (the final file is durable;
 * meta_out, if not NULL, gets the trailer fields and hash; its membership is
 * left empty) or FAILED (err filled: the tmp file is removed, no final file
 * exists). */
enum kt_snap_state kt_snap_writer_poll(struct kt_snap_writer *w, struct kt_snap_meta *meta_out,
                                       struct kt_err *err);

/* Final path ("<dir>/<term>-<index>.snap"), valid until free. */
const char *kt_snap_writer_path(const struct kt_snap_writer *w);

/* Stop and release. If not DONE, the thread is told to stop (it finishes
 * the block in hand: this may wait for one write) and the tmp file is
 * removed. NULL is fine. */
void kt_snap_writer_free(struct kt_snap_writer *w);

/* ---- reader ---- */

/* Called once per record, in file order. rec's bytes are valid only during
 * the call. A non-zero return stops the load and is returned. */
typedef int (*kt_snap_rec_fn)(void *arg, const struct kt_kvrev *rec);

/* Stream the snapshot at path: check the header, then decode each block and
 * call fn per record, then check the trailer and the hash.
 *
 * CONTRACT: records are delivered BEFORE the hash is known. If the result is
 * not 0, everything fn received must be thrown away (the node loads into a
 * fresh store and frees it on error). Only a 0 return says the snapshot is
 * whole. Memory: one compressed and one raw block at a time (<= ~129 MiB
 * for a hostile file, ~2 MiB for ours).
 *
 * A file in the etcd envelope (above) is read as the snapshot inside it
 * (meta->file_bytes is then the inner snapshot's size): the envelope's
 * zeros, magic and length are checked, its SHA-256 is not (the BLAKE2b
 * trailer covers the snapshot).
 *
 * meta (may be NULL) is filled (kt_snap_meta_free it, also on error).
 * Errors: ECORRUPT (bad magic, header, block, record, order, count, hash,
 * truncation, trailing bytes; the message names the file, the offset and
 * what is wrong), EVERSION (a format version this build does not know: a
 * new record type comes with a new format version), ENOTFOUND (no such
 * file), EIO (read error), ENOMEM, or fn's code. */
int kt_snap_load(const char *path, kt_snap_rec_fn fn, void *arg, struct kt_snap_meta *meta,
                 struct kt_err *err);
/* Check only: the same rules, no callback. */
int kt_snap_verify(const char *path, struct kt_snap_meta *meta, struct kt_err *err);
/* The same decoder over a buffer (fuzzed). name is used in messages. */
int kt_snap_load_mem(const uint8_t *p, size_t n, const char *name, kt_snap_rec_fn fn, void *arg,
                     struct kt_snap_meta *meta, struct kt_err *err);

/* ---- a snapshot directory ---- */

struct kt_snap_entry {
  uint64_t term, index;
  char name[40]; /* "<term>-<index>.snap" */
};
/* Snapshots in dir (names matching "%016llx-%016llx.snap"), newest first
 * (by term, then index). *out is malloc'd (free it); *n_out its length.
 * Other files are ignored. Errors: EIO (dir unreadable). */
int kt_snap_list(const char *dir, struct kt_snap_entry **out, size_t *n_out, struct kt_err *err);
/* Remove all but the newest `keep` snapshots (etcd keeps 5), then fsync the
 * dir. Returns 0 or EIO; *removed (may be NULL) counts removed files. */
int kt_snap_purge(const char *dir, size_t keep, size_t *removed, struct kt_err *err);
/* Remove leftover "*.snap.tmp" files (from a crash mid-write). Call at start
 * only, never while a writer is running in dir. */
int kt_snap_clean_tmp(const char *dir, size_t *removed, struct kt_err *err);

#endif
