/* net/pwhash.h — password hashing and verification off the event loop.
 *
 * Argon2id (libsodium's crypto_pwhash_str) costs tens of milliseconds and
 * tens of megabytes by design; a member must not spend that on its state
 * thread (a login storm would stall replication, reads and heartbeats).
 * This module owns a few worker threads and two bounded queues:
 *
 *   state thread: kt_pwhash_submit(job)  ──► jobs (mutex + condvar)
 *   worker:       hash or verify          ──► done (mutex), notify(arg)
 *   state thread: notify → ev_async → kt_pwhash_take(&job) until empty
 *
 * A job owns copies of its inputs (the password is wiped with
 * sodium_memzero once used). The submitter identifies its job by `ctx`
 * (an opaque pointer it keeps alive until the job comes back: every
 * submitted job comes back exactly once: through kt_pwhash_take, or to
 * kt_pwhash_free's drop function). Bounded: at most `max_jobs` submitted and not yet taken
 * back (KT_EBUSY beyond), so memory stays bounded under a storm.
 *
 * Cost: opslimit/memlimit as crypto_pwhash (defaults: libsodium's
 * INTERACTIVE, 2 passes over 64 MiB); a hash records its own cost, so a
 * verify needs none.
 */
#ifndef KT_PWHASH_H
#define KT_PWHASH_H

#include "../core/base.h"

#define KT_PWHASH_STR_MAX 128 /* crypto_pwhash_STRBYTES */
#define KT_PWHASH_PASSWORD_MAX 1024

enum kt_pwhash_kind { KT_PWHASH_HASH = 1, KT_PWHASH_VERIFY = 2 };

struct kt_pwhash_job {
  uint8_t kind;
  void *ctx;                             /* the submitter's */
  char password[KT_PWHASH_PASSWORD_MAX]; /* in: (wiped once used) */
  size_t password_len;
  char hash[KT_PWHASH_STR_MAX]; /* VERIFY: in; HASH: out (NUL-terminated) */
  int rc;                       /* out: 0; VERIFY: KT_EAUTHFAILED on a mismatch; ENOMEM */
  bool cancelled;               /* out: not run (kt_pwhash_free) */
};

struct kt_pwhash_opts {
  int threads;               /* workers (default 1) */
  size_t max_jobs;           /* in flight, submitted to taken (default 1024) */
  uint64_t opslimit;         /* 0: crypto_pwhash_OPSLIMIT_INTERACTIVE */
  size_t memlimit;           /* 0: crypto_pwhash_MEMLIMIT_INTERACTIVE */
  void (*notify)(void *arg); /* from a worker: jobs are done (e.g. ev_async_send) */
  void *notify_arg;
};

struct kt_pwhash;

int kt_pwhash_new(const struct kt_pwhash_opts *o, struct kt_pwhash **out, struct kt_err *e);
/* Stops the workers (a job being hashed finishes first); every job not
 * taken yet is handed to drop (cancelled set for those never run), so the
 * submitter can release what its ctx holds. drop may be NULL. */
void kt_pwhash_free(struct kt_pwhash *p, void (*drop)(struct kt_pwhash_job *job, void *arg),
                    void *arg);
/* Queues a copy of *job. 0, KT_EBUSY (max_jobs in flight), or KT_EINVAL (a
 * password over KT_PWHASH_PASSWORD_MAX). */
int kt_pwhash_submit(struct kt_pwhash *p, const struct kt_pwhash_job *job);
/* Takes one finished job into *out: true, or false when none is done. */
bool kt_pwhash_take(struct kt_pwhash *p, struct kt_pwhash_job *out);

#endif
