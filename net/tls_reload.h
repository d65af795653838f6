/* net/tls_reload.h — reload TLS contexts (net/tls.h) without a restart: on
 * SIGHUP, and when their files change.
 *
 * Data flow: SIGHUP -> every context is rebuilt now. A timer (every
 * KT_TLS_RELOAD_CHECK_MS) stats each context's files (a few stat() calls,
 * no reading); a context whose files changed is rebuilt at the next check
 * if they did not change again meanwhile (certificate and key are often
 * replaced one after the other). kt_tls_ctx_reload swaps in a new SSL_CTX
 * only when every file loaded and the key matches the certificate;
 * otherwise the previous one stays, the failure is logged, and the next
 * change or SIGHUP tries again. Established connections are never touched.
 *
 * Runs on the loop it is given; reading a few PEM files takes well under a
 * millisecond. Contexts are owned by the caller and must outlive it.
 */
#ifndef KT_TLS_RELOAD_H
#define KT_TLS_RELOAD_H

#include <ev.h>

#include "tls.h"

#define KT_TLS_RELOAD_CHECK_MS 1000

struct kt_tls_reloader;

/* ctxs[0..n) (NULL entries are skipped); names[i] labels them in logs
 * ("client", "peer listener", ...). */
struct kt_tls_reloader *kt_tls_reloader_new(struct ev_loop *loop, struct kt_tls_ctx *const *ctxs,
                                            const char *const *names, size_t n);
/* Rebuild every context now (what SIGHUP does). Returns how many failed. */
int kt_tls_reloader_reload_all(struct kt_tls_reloader *r, const char *why);
void kt_tls_reloader_free(struct kt_tls_reloader *r);

#endif
