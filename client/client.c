/* client/client.c — libketch's handle: open, open_srv, close, options, and
 * the small getters.
 *
 * Owns: the handle's lifetime. ketch_open checks the options, parses the
 * endpoints, builds the TLS context when an endpoint needs one, takes the
 * credentials (auth.c) and, unless nonblocking_open, connects (conn.c) until
 * a member completed the handshake (with a resolver prefix, resolver.c
 * first reads the registered proxies, and those are the endpoints).
 * ketch_close completes everything pending with KETCH_ECANCELED (callbacks
 * may submit more: it loops until nothing is left), then frees what each
 * module owns.
 *
 * The other modules and what they own: client/client_int.h.
 */
#include "client_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *ketch_strerror(int err) { return kt_strerror(err); }
const char *ketch_errname(int err) { return kt_errname(err); }
const char *ketch_version(void) { return KETCH_VERSION; }

int64_t kt_cl_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kt_cl_set_errmsg(ketch_client *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
}

void kt_cl_copy_msg(char *dst, size_t dst_len, const char *src) {
  if (dst && dst_len)
    snprintf(dst, dst_len, "%s", src);
}

size_t ketch_prefix_end(const void *prefix, size_t n, void *out) {
  const uint8_t *p = prefix;
  uint8_t *o = out;
  for (size_t i = n; i > 0; i--) {
    if (p[i - 1] < 0xff) {
      memcpy(o, p, i - 1);
      o[i - 1] = (uint8_t)(p[i - 1] + 1);
      return i;
    }
  }
  o[0] = 0;
  return 1;
}

void ketch_options_init(ketch_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->dial_timeout_ms = 2000;
  opts->request_timeout_ms = 5000;
  opts->max_outstanding = 4096;
}

const char *ketch_endpoint(const ketch_client *c) {
  return c->state == ST_READY ? c->eps[c->ep_idx].name : NULL;
}
uint64_t ketch_cluster_id(const ketch_client *c) {
  return c->state == ST_READY ? c->cluster_id : 0;
}
uint64_t ketch_member_id(const ketch_client *c) { return c->state == ST_READY ? c->member_id : 0; }
const char *ketch_errmsg(const ketch_client *c) { return c->errmsg; }
size_t ketch_pending(const ketch_client *c) { return c->n_pending; }

static void free_client(ketch_client *c) {
  kt_cl_creds_free(c);
  kt_cl_auth_async_done(c, KETCH_ECANCELED, NULL); /* wipes a pending user */
  kt_cl_free_endpoints(c->eps, c->n_eps);
  free(c->srv_domain);
  free(c->srv_suffix);
  free(c->srv_dns);
  kt_cl_resolver_free(c);
  if (c->slots)
    for (uint32_t i = 0; i < c->max_outstanding; i++)
      kt_buf_free(&c->slots[i].frame);
  free(c->slots);
  kt_io_close(&c->io);
  kt_tls_ctx_free(c->tls);
  free(c->server_name);
  free(c->identity);
  if (c->ai_list)
    freeaddrinfo(c->ai_list);
  kt_buf_free(&c->out);
  kt_buf_free(&c->in);
  kt_arena_free(&c->enc_arena);
  kt_arena_free(&c->dec_arena);
  kt_arena_free(&c->res_arena);
  kt_cl_watch_free_all(c);
  kt_cl_ka_free_all(c);
  free(c);
}

/* The TLS side of the options: which endpoints use TLS, the context they
 * share. KETCH_EINVAL with why. */
static int tls_setup(ketch_client *c, const ketch_options *opts, char *why, size_t why_len) {
  if (!opts) {
    for (size_t i = 0; i < c->n_eps; i++)
      if (c->eps[i].scheme == 2) {
        kt_cl_copy_msg(why, why_len, "an https:// endpoint needs options (ketch_options)");
        return KETCH_EINVAL;
      }
    return 0;
  }
  c->tls_default = opts->tls || opts->ca_file || opts->cert_file || opts->key_file;
  bool any = false;
  for (size_t i = 0; i < c->n_eps; i++)
    any |= kt_cl_ep_tls(c, &c->eps[i]);
  if (opts->server_name && *opts->server_name)
    c->server_name = strdup(opts->server_name);
  if (opts->identity && *opts->identity)
    c->identity = strdup(opts->identity);
  if (!any)
    return 0;
  struct kt_tls_config tc = {
      .ca_file = opts->ca_file,
      .cert_file = opts->cert_file,
      .key_file = opts->key_file,
      .skip_verify = opts->insecure_skip_verify,
      .cert_flag = "--cert",
      .key_flag = "--key",
      .ca_flag = "--cacert",
  };
  struct kt_err e = {0};
  if (kt_tls_ctx_new(&tc, &c->tls, &e)) {
    kt_cl_copy_msg(why, why_len, e.msg);
    return KETCH_EINVAL;
  }
  return 0;
}

/* ketch_options.user/password, or a token alone. */
static int creds_setup(ketch_client *c, const ketch_options *o) {
  int err = kt_cl_creds_set(c, o->user, o->password);
  if (err || o->user || !o->token || !*o->token)
    return err;
  if (strlen(o->token) >= sizeof c->token) {
    kt_cl_set_errmsg(c, "%s", "token too long");
    return KETCH_EINVAL;
  }
  snprintf(c->token, sizeof c->token, "%s", o->token);
  c->token_only = true;
  return 0;
}

/* Connects (blocking) until a member completed the handshake or every
 * endpoint failed once. */
static int first_connect(ketch_client *c, char *errmsg, size_t errmsg_len) {
  kt_cl_conn_start(c);
  while (c->state != ST_READY && c->state != ST_BACKOFF) {
    if (c->state == ST_IDLE)
      kt_cl_conn_start(c); /* after a failure with nothing pending */
    else
      kt_cl_wait_turn(c, -1); /* each endpoint is bounded by the dial timeout */
  }
  if (c->state != ST_READY) {
    char msg[1200];
    snprintf(msg, sizeof msg, "no endpoint available: %s", c->round_err);
    kt_cl_copy_msg(errmsg, errmsg_len, msg);
    return KETCH_EUNAVAILABLE;
  }
  if ((c->user || c->token_only) && c->auth_err > 0 && c->auth_err != KETCH_EAUTHNOTENABLED) {
    kt_cl_copy_msg(errmsg, errmsg_len, c->auth_msg);
    return c->auth_err;
  }
  return 0;
}

int ketch_open(ketch_client **out, const char *endpoints, const ketch_options *opts, char *errmsg,
               size_t errmsg_len) {
  *out = NULL;
  kt_cl_copy_msg(errmsg, errmsg_len, "");
  ketch_options o;
  ketch_options_init(&o);
  if (opts) {
    if (opts->dial_timeout_ms < 0 || opts->request_timeout_ms < 0 || opts->max_outstanding < 0 ||
        opts->max_outstanding > (int)SLOT_MASK) {
      kt_cl_copy_msg(errmsg, errmsg_len,
                     "invalid option: negative timeout or max_outstanding too large");
      return KETCH_EINVAL;
    }
    ketch_options defaults = o;
    o = *opts;
    o.dial_timeout_ms = opts->dial_timeout_ms ? opts->dial_timeout_ms : defaults.dial_timeout_ms;
    o.request_timeout_ms =
        opts->request_timeout_ms ? opts->request_timeout_ms : defaults.request_timeout_ms;
    o.max_outstanding = opts->max_outstanding ? opts->max_outstanding : defaults.max_outstanding;
  }
  if (!endpoints || !*endpoints) {
    kt_cl_copy_msg(errmsg, errmsg_len, "no endpoints given");
    return KETCH_EINVAL;
  }
  if (opts && opts->resolver_prefix && *opts->resolver_prefix)
    return kt_cl_open_resolved(out, endpoints, opts, errmsg, errmsg_len);
  ketch_client *c = calloc(1, sizeof *c);
  if (!c)
    return KETCH_ENOMEM;
  kt_io_init_plain(&c->io, -1);
  c->state = ST_IDLE;
  c->dial_timeout_ms = o.dial_timeout_ms;
  c->request_timeout_ms = o.request_timeout_ms;
  c->max_outstanding = (uint32_t)o.max_outstanding;
  c->max_request_bytes = KT_DEFAULT_MAX_REQUEST_BYTES;
  c->backoff_ms = BACKOFF_MIN_MS;
  c->ka_next_ms = c->watch_next_ms = INT64_MAX;
  c->nonblocking = o.nonblocking_open;
  c->slots = calloc(c->max_outstanding, sizeof *c->slots);
  if (!c->slots) {
    free_client(c);
    return KETCH_ENOMEM;
  }
  kt_cl_slots_init(c);
  char why[400] = "";
  int err = kt_cl_parse_endpoints(endpoints, 0, &c->eps, &c->n_eps, why, sizeof why);
  if (!err && !c->n_eps) {
    snprintf(why, sizeof why, "no endpoints given");
    err = KETCH_EINVAL;
  }
  if (!err)
    err = tls_setup(c, opts, why, sizeof why);
  if (!err && (err = creds_setup(c, &o)))
    kt_cl_copy_msg(why, sizeof why, err == KETCH_EINVAL ? c->errmsg : "out of memory");
  if (err) {
    kt_cl_copy_msg(errmsg, errmsg_len, why);
    free_client(c);
    return err;
  }
  if (!o.nonblocking_open && (err = first_connect(c, errmsg, errmsg_len))) {
    free_client(c);
    return err;
  }
  *out = c;
  return 0;
}

int ketch_open_srv(ketch_client **out, const char *domain, const char *suffix,
                   const char *dns_servers, const ketch_options *opts, char *errmsg,
                   size_t errmsg_len) {
  if (out)
    *out = NULL;
  char eps[64 * 80];
  int timeout = opts && opts->dial_timeout_ms > 0 ? opts->dial_timeout_ms + 3000 : 5000;
  int rc = ketch_srv_endpoints(domain, suffix, dns_servers, timeout, eps, sizeof eps, errmsg,
                               errmsg_len);
  if (rc)
    return rc;
  if ((rc = ketch_open(out, eps, opts, errmsg, errmsg_len)))
    return rc;
  ketch_client *c = *out;
  c->srv_domain = strdup(domain);
  c->srv_suffix = suffix ? strdup(suffix) : NULL;
  c->srv_dns = dns_servers ? strdup(dns_servers) : NULL;
  c->refresh_interval_ms = KETCH_SRV_REFRESH_MS;
  c->refresh_next_ms = kt_cl_now_ms() + c->refresh_interval_ms;
  if (!c->srv_domain || (suffix && !c->srv_suffix) || (dns_servers && !c->srv_dns)) {
    free_client(c);
    *out = NULL;
    kt_cl_copy_msg(errmsg, errmsg_len, "out of memory");
    return KETCH_ENOMEM;
  }
  return 0;
}

void ketch_close(ketch_client *c) {
  if (!c)
    return;
  kt_assert(!c->in_cb);
  c->closing = true;
  static const char m[] = "canceled: the handle was closed";
  /* callbacks may submit more: loop until nothing is left */
  while (c->pend_head || c->n_live_watches || c->finals_pending) {
    while (c->pend_head)
      kt_cl_complete(c, c->pend_head, KETCH_ECANCELED, m, sizeof m - 1, NULL);
    kt_cl_watches_close(c, m);
    kt_cl_deliver_finals(c);
  }
  free_client(c);
}
