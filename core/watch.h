/* core/watch.h — the watch hub: watchers on keys and ranges, fed by the store.
 *
 * Owns: every watcher (id, range, options, delivery position), the fan-out
 * groups that coalesce watchers with the same key/range and options, the
 * copies of events not yet taken by every member of a group, and the
 * catch-up buffers of unsynced watchers.
 *
 * Data flow (single-threaded, no I/O, no clock):
 *   store apply --on_event--> kt_watch_publish (one call per event, in order)
 *   end of that apply        kt_watch_revision_done(rev)   (closes the batch)
 *   caller's loop            kt_watch_step(budget)  (catch-up of unsynced ones)
 *   per client stream        kt_watch_take(id, ...) (copies ready events out)
 * on_ready(owner, id) tells the node a watcher has events to take (called from
 * revision_done and step; the node then drains with kt_watch_take in slices).
 *
 * Structures:
 * - A group = (key, range_end, filters, prev_kv): one shared log of copied,
 *   already-filtered events and a list of SYNCED member watchers, each with a
 *   position (sequence number) in the log. Publish appends once per matching
 *   group, never once per watcher (coalescing): 10k watchers of one prefix
 *   cost one copy per event. The log is trimmed behind the slowest member.
 * - Single-key groups live in an open-addressed hash map (key hash -> group,
 *   chained for groups of the same key with other options): O(1) per event.
 * - Range groups (ranges, prefixes, from-key) live in an array sorted by start
 *   key with a prefix maximum of the ends: a stabbing query binary-searches
 *   the last start <= key and walks left only while the prefix max end > key,
 *   so it visits matching groups plus those overlapping them (insert/remove is
 *   O(R) memmove, fine for thousands of distinct ranges; coalescing keeps R
 *   small). An augmented balanced tree would make updates O(log R); chosen
 *   against for code size (reasoned, not measured).
 * - UNSYNCED watchers (start revision in the past, or slow consumers) sit on
 *   one list; kt_watch_step scans each one's range in the store's history
 *   (kt_mvcc_iter, from its range start, revisions > its last delivered one)
 *   into its private buffer, at most `budget` events per watcher per step, and
 *   when it reaches the current revision it joins its group at the log tail.
 *
 * Invariants / guarantees per watcher: events in (revision, sub) order, no
 * gap, no duplicate; a revision's events are made ready together (never
 * before revision_done); a watcher whose pending events (private + group lag)
 * exceed opts.max_pending is dropped from its group (its events forgotten) and
 * resumes from history after its last taken (revision, sub). A watcher whose
 * next needed revision is below the compact revision (or which took part of
 * the compact revision) is cancelled with that compact revision; a start AT
 * the compact revision is served from what the store keeps of it (etcd's
 * rule: compaction at C removes revisions below C).
 * Memory is bounded by groups * max_pending events plus the catch-up buffers.
 */
#ifndef KT_WATCH_H
#define KT_WATCH_H

#include "mvcc.h"

struct kt_watch_hub;

struct kt_watch_opts {
  struct kt_bytes key, range_end; /* etcd's rules, see core/ops.h; copied */
  int64_t start_revision;         /* 0 = from now (the next revision) */
  bool no_put, no_delete, prev_kv;
  uint32_t max_pending; /* events buffered before moving aside; 0 = 1024 */
};

struct kt_watch_config {
  /* A watcher got events to take (or was cancelled). May be NULL. Must not
   * call back into the hub. */
  void (*on_ready)(void *arg, void *owner, uint64_t id);
  void *arg;
};

/* The store must outlive the hub; its on_event must call kt_watch_publish and
 * every applying write must end with kt_watch_revision_done. */
struct kt_watch_hub *kt_watch_hub_new(struct kt_mvcc *store, const struct kt_watch_config *cfg);
void kt_watch_hub_free(struct kt_watch_hub *h);

/* Create a watcher; *id gets its id (> 0). Errors: EINVAL (empty key,
 * range_end < key), EFUTUREREV (start_revision > current + 1). A start in the
 * past makes it UNSYNCED (caught up by kt_watch_step); a compacted start is
 * reported by kt_watch_take as KT_ECOMPACTED after a step. Not between a
 * publish and its revision_done. */
int kt_watch_create(struct kt_watch_hub *h, const struct kt_watch_opts *o, void *owner,
                    uint64_t *id, struct kt_err *e);
/* Remove a watcher and everything buffered for it. Returns false if unknown. */
bool kt_watch_cancel(struct kt_watch_hub *h, uint64_t id);

/* One event of the write being applied (the mvcc on_event hook). The event's
 * bytes are copied only for groups that match. */
void kt_watch_publish(struct kt_watch_hub *h, const struct kt_event *ev);
/* The write at `rev` is fully applied: its events become ready. */
void kt_watch_revision_done(struct kt_watch_hub *h, int64_t rev);

/* The store was replaced (a snapshot installed on a follower): every watcher
 * resumes from the new store's history after the events it already has
 * (cancelled with ECOMPACTED if they were compacted away). O(watchers). */
void kt_watch_hub_set_store(struct kt_watch_hub *h, struct kt_mvcc *store);

/* Catch-up work: advance unsynced watchers by about `budget` units in total
 * (keys read from history + events queued; each watcher visited reads at
 * least one slice of its range). Returns true if it made progress and
 * unsynced watchers remain (call again); false when none remain or every one
 * waits for its consumer to take what it has (call again after takes). */
bool kt_watch_step(struct kt_watch_hub *h, size_t budget);

/* Take up to `max` ready events of watcher `id` into out[] (bytes copied into
 * `a`). Returns the count (>= 0), -KT_ENOTFOUND for an unknown id, or
 * -KT_ECOMPACTED once the watcher was cancelled by compaction (*compact_rev
 * set; the watcher is then removed); errors are returned negated (-KT_E*). A revision larger than
 * max is split across takes (etcd's fragmenting); takes never reorder or repeat. */
int kt_watch_take(struct kt_watch_hub *h, uint64_t id, struct kt_event *out, int max,
                  struct kt_arena *a, int64_t *compact_rev);

/* Fan-out without copies (the node encodes a run of a group's log once and
 * hands the same bytes to every watcher at the same place in it). If every
 * event ready for watcher `id` sits in its group's shared log (it is synced
 * and has no private catch-up buffer), *log gets the log's identity (stable
 * while a watcher uses it) and [*from, *to) the sequence numbers of those
 * events, and it returns true (from == to: none ready). Two watchers with
 * the same log and `from` have exactly the same events from there on. */
bool kt_watch_run(const struct kt_watch_hub *h, uint64_t id, const void **log, uint64_t *from,
                  uint64_t *to);
/* The watcher of a true kt_watch_run has taken the events up to seq `upto`
 * (from < upto <= to) by other means: as kt_watch_take of them. */
void kt_watch_advance(struct kt_watch_hub *h, uint64_t id, uint64_t upto);

/* The revision of the next event kt_watch_take would return, or 0 if none
 * is ready (lets the caller keep a revision whole in one message). */
int64_t kt_watch_next_rev(const struct kt_watch_hub *h, uint64_t id);

/* Progress: the hub's current revision (last revision_done). A synced watcher
 * with nothing pending has seen everything up to it. */
int64_t kt_watch_revision(const struct kt_watch_hub *h);
/* True if watcher id is synced and has nothing pending (a progress
 * notification at kt_watch_revision is then exact). */
bool kt_watch_idle(const struct kt_watch_hub *h, uint64_t id);
/* For the caller's periodic timer: fn(owner, id, rev) for every idle synced
 * watcher. O(watchers). */
void kt_watch_progress_all(struct kt_watch_hub *h,
                           void (*fn)(void *arg, void *owner, uint64_t id, int64_t rev), void *arg);

struct kt_watch_stats {
  uint64_t watchers, groups, unsynced, buffered_events;
  uint64_t publish_visits; /* groups examined by publish (cost counter) */
  uint64_t moved_aside;    /* slow-consumer moves to unsynced */
};
void kt_watch_stats(const struct kt_watch_hub *h, struct kt_watch_stats *out);

#endif
