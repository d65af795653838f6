/* net/tls_reload.c — see tls_reload.h. */
#include "tls_reload.h"

#include <signal.h>
#include <stdlib.h>

#define MAX_CTXS 8

struct kt_tls_reloader {
  struct ev_loop *loop;
  struct kt_tls_ctx *ctx[MAX_CTXS];
  const char *name[MAX_CTXS];
  bool seen_change[MAX_CTXS]; /* changed at the last check: reload at this one */
  size_t n;
  ev_signal hup_w;
  ev_timer check_w;
};

static bool reload_one(struct kt_tls_reloader *r, size_t i, const char *why) {
  struct kt_err e = {0};
  if (kt_tls_ctx_reload(r->ctx[i], &e)) {
    kt_log(KT_LOG_ERROR, "tls",
           "reload of the %s certificates failed (%s); keeping the previous "
           "ones: %s",
           r->name[i], why, e.msg);
    return false;
  }
  kt_log(KT_LOG_INFO, "tls", "reloaded the %s certificates (%s) generation=%llu", r->name[i], why,
         (unsigned long long)kt_tls_ctx_generation(r->ctx[i]));
  return true;
}

int kt_tls_reloader_reload_all(struct kt_tls_reloader *r, const char *why) {
  int failed = 0;
  for (size_t i = 0; i < r->n; i++) {
    r->seen_change[i] = false;
    failed += !reload_one(r, i, why);
  }
  return failed;
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents) {
  (void)loop, (void)revents;
  kt_tls_reloader_reload_all(w->data, "SIGHUP");
}

static void on_check(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)revents;
  struct kt_tls_reloader *r = w->data;
  for (size_t i = 0; i < r->n; i++) {
    bool changed = kt_tls_ctx_files_changed(r->ctx[i]);
    if (changed && r->seen_change[i]) {
      r->seen_change[i] = false;
      reload_one(r, i, "files changed");
    } else {
      r->seen_change[i] = changed;
    }
  }
}

struct kt_tls_reloader *kt_tls_reloader_new(struct ev_loop *loop, struct kt_tls_ctx *const *ctxs,
                                            const char *const *names, size_t n) {
  struct kt_tls_reloader *r = calloc(1, sizeof *r);
  kt_assert(r);
  r->loop = loop;
  for (size_t i = 0; i < n && r->n < MAX_CTXS; i++)
    if (ctxs[i]) {
      r->ctx[r->n] = ctxs[i];
      r->name[r->n++] = names[i];
    }
  ev_signal_init(&r->hup_w, on_hup, SIGHUP);
  r->hup_w.data = r;
  ev_signal_start(loop, &r->hup_w);
  ev_unref(loop);
  double every = KT_TLS_RELOAD_CHECK_MS / 1000.0;
  ev_timer_init(&r->check_w, on_check, every, every);
  r->check_w.data = r;
  if (r->n) {
    ev_timer_start(loop, &r->check_w);
    ev_unref(loop);
  }
  return r;
}

void kt_tls_reloader_free(struct kt_tls_reloader *r) {
  if (!r)
    return;
  ev_ref(r->loop);
  ev_signal_stop(r->loop, &r->hup_w);
  if (ev_is_active(&r->check_w)) {
    ev_ref(r->loop);
    ev_timer_stop(r->loop, &r->check_w);
  }
  free(r);
}
