/* net/pwhash.c — see pwhash.h. */
#include "pwhash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

struct node {
  struct node *next;
  struct kt_pwhash_job job;
};

struct kt_pwhash {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct node *todo_head, *todo_tail; /* FIFO */
  struct node *done_head, *done_tail; /* FIFO */
  size_t in_flight;                   /* submitted and not taken */
  bool stop;
  struct kt_pwhash_opts o;
  pthread_t *threads;
  int n_threads;
};

static void push(struct node **head, struct node **tail, struct node *x) {
  x->next = NULL;
  if (*tail)
    (*tail)->next = x;
  else
    *head = x;
  *tail = x;
}

static struct node *pop(struct node **head, struct node **tail) {
  struct node *x = *head;
  if (x) {
    *head = x->next;
    if (!*head)
      *tail = NULL;
  }
  return x;
}

static void run(struct kt_pwhash *p, struct kt_pwhash_job *j) {
  if (j->kind == KT_PWHASH_HASH) {
    j->rc =
        crypto_pwhash_str(j->hash, j->password, j->password_len, p->o.opslimit, p->o.memlimit) == 0
            ? 0
            : KT_ENOMEM;
  } else {
    j->hash[KT_PWHASH_STR_MAX - 1] = 0;
    j->rc =
        crypto_pwhash_str_verify(j->hash, j->password, j->password_len) == 0 ? 0 : KT_EAUTHFAILED;
  }
  sodium_memzero(j->password, sizeof j->password);
  j->password_len = 0;
}

static void *worker(void *arg) {
  struct kt_pwhash *p = arg;
  pthread_setname_np(pthread_self(), "ketch-pwhash");
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && !p->todo_head)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop)
      break;
    struct node *x = pop(&p->todo_head, &p->todo_tail);
    pthread_mutex_unlock(&p->mu);
    run(p, &x->job);
    pthread_mutex_lock(&p->mu);
    push(&p->done_head, &p->done_tail, x);
    pthread_mutex_unlock(&p->mu);
    p->o.notify(p->o.notify_arg);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int kt_pwhash_new(const struct kt_pwhash_opts *o, struct kt_pwhash **out, struct kt_err *e) {
  if (sodium_init() < 0)
    return kt_err_set(e, KT_EINTERNAL, "libsodium did not initialize");
  struct kt_pwhash *p = calloc(1, sizeof *p);
  kt_assert(p);
  p->o = *o;
  kt_assert(p->o.notify);
  if (p->o.threads <= 0)
    p->o.threads = 1;
  if (!p->o.max_jobs)
    p->o.max_jobs = 1024;
  if (!p->o.opslimit)
    p->o.opslimit = crypto_pwhash_OPSLIMIT_INTERACTIVE;
  if (!p->o.memlimit)
    p->o.memlimit = crypto_pwhash_MEMLIMIT_INTERACTIVE;
  if (p->o.opslimit < crypto_pwhash_OPSLIMIT_MIN || p->o.memlimit < crypto_pwhash_MEMLIMIT_MIN) {
    free(p);
    return kt_err_set(e, KT_EINVAL, "password hashing cost below Argon2id's minimum");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = calloc((size_t)p->o.threads, sizeof *p->threads);
  kt_assert(p->threads);
  for (int i = 0; i < p->o.threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p) != 0)
      break;
    p->n_threads++;
  }
  if (!p->n_threads) {
    kt_pwhash_free(p, NULL, NULL);
    return kt_err_set(e, KT_EINTERNAL, "cannot start a password hashing thread");
  }
  *out = p;
  return 0;
}

void kt_pwhash_free(struct kt_pwhash *p, void (*drop)(struct kt_pwhash_job *job, void *arg),
                    void *arg) {
  if (!p)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_threads; i++)
    pthread_join(p->threads[i], NULL);
  struct node *x;
  while ((x = pop(&p->done_head, &p->done_tail))) {
    if (drop)
      drop(&x->job, arg);
    free(x);
  }
  while ((x = pop(&p->todo_head, &p->todo_tail))) {
    sodium_memzero(x->job.password, sizeof x->job.password);
    x->job.cancelled = true;
    if (drop)
      drop(&x->job, arg);
    free(x);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

int kt_pwhash_submit(struct kt_pwhash *p, const struct kt_pwhash_job *job) {
  if (job->password_len > KT_PWHASH_PASSWORD_MAX)
    return KT_EINVAL;
  struct node *x = malloc(sizeof *x);
  kt_assert(x);
  x->job = *job;
  x->job.rc = 0;
  x->job.cancelled = false;
  pthread_mutex_lock(&p->mu);
  if (p->in_flight >= p->o.max_jobs) {
    pthread_mutex_unlock(&p->mu);
    sodium_memzero(x, sizeof *x);
    free(x);
    return KT_EBUSY;
  }
  p->in_flight++;
  push(&p->todo_head, &p->todo_tail, x);
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

bool kt_pwhash_take(struct kt_pwhash *p, struct kt_pwhash_job *out) {
  pthread_mutex_lock(&p->mu);
  struct node *x = pop(&p->done_head, &p->done_tail);
  if (x)
    p->in_flight--;
  pthread_mutex_unlock(&p->mu);
  if (!x)
    return false;
  *out = x->job;
  free(x);
  return true;
}
