/* wal/wal.h — the write-ahead log: segment files of checksummed, chained
 * records, group commit on one sync thread, recovery, purge and repair.
 * The on-disk format is specified in wal/FORMAT.md.
 *
 * Owns: the files <dir>/%016llx-%016llx.wal (segment sequence, first index),
 * the current segment's fd, two in-memory batches, the sync thread and the
 * purge thread (it unlinks old segments: an unlink of a 64 MiB segment in
 * the page cache takes ~16 ms here, too long for the loop or the syncs).
 *
 * Data flow (all calls on the loop thread unless said otherwise):
 *   kt_wal_append   writes a record (header, payload) into the filling batch
 *                   and returns its sequence number; cheap, no I/O, no checksum.
 *   kt_wal_flush    once per loop turn: hands the filling batch to the sync
 *                   thread (one mutex/condvar handoff), or, if a batch is in
 *                   flight, marks the filling batch ready.
 *   sync thread     seals the batch (each record's and new segment header's
 *                   CRC32C, chained to the one before, in log order), then
 *                   pwrite()s it (one write per segment touched, new
 *                   segments created as *.wal.tmp, preallocated, synced, renamed)
 *                   and ONE fdatasync, then calls opts.notify (e.g. ev_async_send).
 *   kt_wal_poll     on the loop thread after notify: learns the highest durable
 *                   sequence number and hands over the next ready batch.
 *
 * Invariants:
 *   - a sequence number is reported durable only after fdatasync of every byte
 *     of it (and of all earlier records) returned 0;
 *   - a failed write/fdatasync/preallocation puts the WAL in a failed state for
 *     good: kt_wal_poll/append/flush return the error (KT_EIO, or KT_ENOSPACE on
 *     ENOSPC) with a message naming the file; only close remains;
 *   - the loop thread never blocks on the disk in append/flush/poll/purge;
 *     open, close, kt_wal_sync, reset and repair do block.
 *
 * Memory: open reads one segment file at a time into memory (64 MiB by
 * default); the filling batch grows with what is appended between flushes.
 * The WAL does not interpret payloads or types (type 0 is reserved).
 * This header does not include ev.h. */
#ifndef KT_WAL_H
#define KT_WAL_H

#include "../core/base.h"
#include "../core/stats.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- format constants (see FORMAT.md) ---- */
#define KT_WAL_MAGIC "KETCHWAL"
#define KT_WAL_VERSION 1u
#define KT_WAL_SEG_HDR_BYTES 40u
#define KT_WAL_REC_HDR_BYTES 24u
#define KT_WAL_ALIGN 8u
#define KT_WAL_MAX_PAYLOAD (1u << 30) /* format limit; opts may lower it */
#define KT_WAL_DEFAULT_SEGMENT_BYTES (64u << 20)

/* Padded on-disk size of a record with a payload of len bytes. */
static inline uint64_t kt_wal_record_bytes(uint64_t len) {
  return KT_WAL_REC_HDR_BYTES + ((len + KT_WAL_ALIGN - 1) & ~(uint64_t)(KT_WAL_ALIGN - 1));
}

/* ---- CRC32C (Castagnoli), hardware SSE4.2 when the CPU has it ---- */
/* Standard CRC32C update: crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t kt_crc32c(uint32_t crc, const void *buf, size_t len);

/* ---- pure codec (no I/O; fuzzed by test/fuzz/wal_record_fuzz.c) ---- */

struct kt_wal_seghdr {
  uint32_t prev_crc; /* crc of the last record of the previous segment */
  uint64_t seq, first_index;
  uint32_t segment_bytes; /* preallocated size (informational) */
  uint32_t crc;           /* header crc: the first record's prev_crc */
};

struct kt_wal_rec {
  uint8_t type;
  uint64_t index;
  const uint8_t *payload; /* points into the decoded buffer */
  uint32_t len;
  uint32_t crc, prev_crc;
};

/* Encode a segment header into out[KT_WAL_SEG_HDR_BYTES]; fills h->crc. */
void kt_wal_encode_seghdr(struct kt_wal_seghdr *h, uint8_t *out);
/* kt_wal_encode_seghdr in two steps: write leaves prev_crc and crc zero for
 * kt_wal_seal_seghdr (the WAL's sync thread seals, in log order). */
void kt_wal_write_seghdr(const struct kt_wal_seghdr *h, uint8_t *out);
/* Sets an encoded segment header's prev_crc and its crc anew; returns the
 * crc (the first record's prev_crc). */
uint32_t kt_wal_seal_seghdr(uint8_t *hdr, uint32_t prev_crc);
/* Decode and check a segment header. Returns 0 or KT_ECORRUPT with *why set
 * to a static string. Reads at most KT_WAL_SEG_HDR_BYTES of buf[0..len). */
int kt_wal_decode_seghdr(const uint8_t *buf, size_t len, struct kt_wal_seghdr *h, const char **why);

/* Encode a record whose previous checksum is prev_crc into out, which must
 * hold kt_wal_record_bytes(len) bytes (padding is zeroed). Returns its crc. */
uint32_t kt_wal_encode_record(uint8_t *out, uint8_t type, uint64_t index, const void *payload,
                              uint32_t len, uint32_t prev_crc);
/* kt_wal_encode_record in two steps: write leaves prev_crc and crc zero for seal
 * (the WAL writes on its loop thread and seals on its sync thread, in log
 * order); seal sets them for the record at rec, whose header is written,
 * and returns its crc. */
void kt_wal_write_record(uint8_t *out, uint8_t type, uint64_t index, const void *payload,
                         uint32_t len);
uint32_t kt_wal_seal_record(uint8_t *rec, uint32_t prev_crc);

/* Decode the record at buf[0..len). Results:
 *   0            a valid record (FORMAT.md "valid record"), chained to
 *                prev_crc; *size = its padded size; rec->payload points into buf.
 *   KT_ENOTFOUND buf starts with an all-zero header (or fewer than a header's
 *                bytes, all zero): the end of the written data.
 *   KT_ECORRUPT  anything else; *why names the reason (static string).
 * Never reads outside buf[0..len). */
int kt_wal_decode_record(const uint8_t *buf, size_t len, uint32_t prev_crc, struct kt_wal_rec *rec,
                         size_t *size, const char **why);

/* Called once per valid record, in log order. Return 0 to go on; any other
 * value stops the scan and is returned by the caller. */
typedef int (*kt_wal_record_fn)(void *arg, const struct kt_wal_rec *rec);

enum kt_wal_scan_status {
  KT_WAL_SCAN_CLEAN,   /* valid records, then zeros to the end */
  KT_WAL_SCAN_TORN,    /* an invalid record at bad_off, no valid record after it */
  KT_WAL_SCAN_CORRUPT, /* an invalid record at bad_off, a valid one at next_off */
  KT_WAL_SCAN_BADHDR,  /* the segment header is invalid */
};

struct kt_wal_scan {
  enum kt_wal_scan_status status;
  struct kt_wal_seghdr hdr;
  uint64_t end_off;       /* offset just after the last valid record */
  uint64_t bad_off;       /* TORN/CORRUPT: offset of the first invalid record */
  uint64_t next_off;      /* CORRUPT: offset of a self-consistent record after it */
  uint64_t dirty_end;     /* offset after the last non-zero byte of the file */
  uint64_t records;       /* valid records delivered */
  uint64_t records_after; /* TORN/CORRUPT: self-consistent records found after bad_off */
  uint32_t last_crc;      /* crc of the last valid record (hdr.crc if none) */
  const char *why;        /* TORN/CORRUPT/BADHDR: reason, static string */
};

/* Scan a whole segment file image buf[0..len): decode the header, deliver each
 * valid record to fn (may be NULL), classify the end. Returns 0, or whatever
 * non-zero value fn returned. Pure and bounds-checked. */
int kt_wal_scan_segment(const uint8_t *buf, size_t len, struct kt_wal_scan *s, kt_wal_record_fn fn,
                        void *arg);

/* Segment file name: "%016llx-%016llx.wal". Returns 1 and fills seq/index
 * when name is exactly such a name. */
int kt_wal_parse_name(const char *name, uint64_t *seq, uint64_t *first_index);

/* ---- file operations (swap in a fault-injecting layer in tests) ---- */
/* Each returns 0 (or a byte count / fd) on success, -errno on failure.
 * pwrite writes all n bytes or fails. Calls may come from the sync thread. */
struct kt_wal_fileops {
  void *ctx;
  int (*open)(void *ctx, const char *path, int flags, int mode); /* fd >= 0 */
  long (*pread)(void *ctx, int fd, void *buf, size_t n, uint64_t off);
  int (*pwrite)(void *ctx, int fd, const void *buf, size_t n, uint64_t off);
  int (*fdatasync)(void *ctx, int fd);
  int (*fallocate)(void *ctx, int fd, uint64_t off, uint64_t len);
  int (*ftruncate)(void *ctx, int fd, uint64_t len);
  int (*fsize)(void *ctx, int fd, uint64_t *size);
  int (*close)(void *ctx, int fd);
  int (*rename)(void *ctx, const char *from, const char *to);
  int (*unlink)(void *ctx, const char *path);
  int (*mkdir)(void *ctx, const char *path); /* -EEXIST is fine */
  int (*fsync_dir)(void *ctx, const char *path);
  /* Calls fn for each entry name (not "." or ".."). */
  int (*readdir)(void *ctx, const char *path, void (*fn)(void *arg, const char *name), void *arg);
  /* Optional (NULL: segments are read with pread): a read-only view of the
   * first len bytes of fd, NULL if it cannot; released with unmap. */
  const void *(*map)(void *ctx, int fd, size_t len);
  void (*unmap)(void *ctx, const void *p, size_t len);
  /* Optional (NULL: size): an offset past which the file's first size bytes
   * are known to read as zeros (the end of its last data extent: a segment's
   * preallocated tail is unwritten), so a scan need not read them. */
  uint64_t (*data_end)(void *ctx, int fd, uint64_t size);
};
extern const struct kt_wal_fileops kt_wal_posix_fileops;

/* ---- the log ---- */

struct kt_wal_opts {
  uint64_t segment_bytes;           /* preallocated segment size; 0 = 64 MiB */
  uint32_t max_record_bytes;        /* payload limit; 0 = 64 MiB */
  uint64_t first_index;             /* first index of a new (empty) log */
  const struct kt_wal_fileops *ops; /* NULL = kt_wal_posix_fileops */
  /* Called on the sync thread after each batch completes or fails. Must be
   * async-signal-safe-ish: ev_async_send is the intended target. */
  void (*notify)(void *arg);
  void *notify_arg;
};

struct kt_wal;

/* Open (creating dir and a first segment if the log is empty) and recover:
 * every valid record, in order, goes to fn(arg, rec) (payload valid only
 * during the call). A torn tail of the last segment is cut and logged
 * (kt_log, with file and offset). Errors (err names file and offset):
 *   KT_ECORRUPT  an invalid record followed by valid data, a bad record or
 *                header in a non-last segment, a broken chain, a missing or
 *                duplicated segment sequence;
 *   KT_EIO       a read/write/sync failure;  KT_ENOSPACE  ENOSPC;
 *   non-zero returned by fn.
 * On error, records already delivered must be discarded by the caller.
 * Leftover *.wal.tmp files (a crash while creating a segment) are removed. */
int kt_wal_open(const char *dir, const struct kt_wal_opts *opts, kt_wal_record_fn fn, void *arg,
                struct kt_wal **out, struct kt_err *err);

/* Copy one record into the filling batch. type must be non-zero; len at most
 * opts.max_record_bytes. *seq (may be NULL) receives its sequence number:
 * 1, 2, 3... continuing from 1 at every open. Errors: KT_EINVAL, KT_ETOOLARGE,
 * or the failed state's code. */
int kt_wal_append(struct kt_wal *wal, uint8_t type, uint64_t index, const void *payload, size_t len,
                  uint64_t *seq);

/* Start writing what was appended (never blocks on the disk). Returns 0 or
 * the failed state's code. */
int kt_wal_flush(struct kt_wal *wal);

/* After notify: *durable_seq = highest sequence number durable on disk (all
 * lower ones are too). Hands the next ready batch to the sync thread. Returns
 * 0, or KT_EIO / KT_ENOSPACE (failed state; err names the file). */
int kt_wal_poll(struct kt_wal *wal, uint64_t *durable_seq, struct kt_err *err);

/* Blocking: flush and wait until every appended record is durable and the
 * purge thread has worked through what it was handed (tools, tests,
 * shutdown). Returns 0 or the failed state's code. */
int kt_wal_sync(struct kt_wal *wal, struct kt_err *err);

/* Highest sequence number handed out so far. */
uint64_t kt_wal_last_seq(const struct kt_wal *wal);

/* Bytes appended but not yet handed to the sync thread: the node's
 * back-pressure signal (stop taking proposals above some bound). */
size_t kt_wal_buffered_bytes(const struct kt_wal *wal);

/* A copy of the histogram of fdatasync durations in seconds (every
 * fdatasync of a segment the sync thread did; core/stats.h, etcd's
 * wal_fsync buckets), taken under the WAL's lock: for /metrics. */
void kt_wal_fsync_hist(struct kt_wal *wal, struct kt_hist *out);

/* Remove segment files all of whose records have index <= index: a segment
 * is removed when its successor exists, is durable, and starts at an index
 * <= index + 1. The current segment is never removed. Never blocks: the
 * segments are dropped from the log at once and unlinked, oldest first, by
 * the purge thread (a crash before it gets there leaves older records in
 * front, as reset's note says). *removed (may be NULL) receives how many
 * were handed over. Returns 0, or the error (KT_EIO, err names the file) of
 * an earlier removal that failed; that file and the ones after it stay
 * queued and are tried again, oldest first, when more are handed over. */
int kt_wal_purge(struct kt_wal *wal, uint64_t index, int *removed, struct kt_err *err);

/* Start afresh after a snapshot install: begin a new segment whose first
 * index is first_index (the chain continues), holding `first` if not NULL
 * (e.g. the hard state, which must survive the removal), wait until it is
 * durable, then hand every older segment to the purge thread. Blocking. A crash
 * before the removals finish leaves older records in front of the new
 * segment; they are delivered on open, so the caller skips records at or
 * below its snapshot index. Errors: the failed state's code, KT_EIO. */
int kt_wal_reset(struct kt_wal *wal, uint64_t first_index, const struct kt_wal_rec *first,
                 struct kt_err *err);

/* Stop the sync thread after the in-flight batch, close files, free. Records
 * not yet durable are not written. Returns the failed state's code or 0. */
int kt_wal_close(struct kt_wal *wal);

/* Read-only check of a log directory (ketchutl wal verify). Returns 0 when
 * the log would open (fills *torn with the torn-tail description if any,
 * else torn->code = 0), or KT_ECORRUPT/KT_EIO with err naming file/offset. */
int kt_wal_verify(const char *dir, const struct kt_wal_fileops *ops, uint64_t *records,
                  struct kt_err *torn, struct kt_err *err);

/* What kt_wal_repair cut. */
struct kt_wal_repair_report {
  bool cut;                 /* false: nothing to do */
  char file[256];           /* segment where the first invalid record is */
  uint64_t offset;          /* its offset; the log now ends there */
  uint64_t bytes_dropped;   /* non-zero bytes dropped, later segments included */
  uint64_t records_dropped; /* self-consistent records found after the cut */
  int segments_removed;
  char why[128];
};

/* The explicit way out: cut the log at the first invalid record (or header,
 * or chain break, or sequence gap), dropping everything after it. Returns 0
 * or KT_EIO. */
int kt_wal_repair(const char *dir, const struct kt_wal_fileops *ops,
                  struct kt_wal_repair_report *rep, struct kt_err *err);

#endif
