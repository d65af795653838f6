/* net/sdnotify.h — systemd's service notification (sd_notify(3)) without
 * libsystemd: one datagram of "KEY=VALUE\n..." text to the AF_UNIX socket
 * named by $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace).
 *
 * ketch sends READY=1 once the member serves (ketch.service is Type=notify),
 * STOPPING=1 when a shutdown starts, and WATCHDOG=1 every WATCHDOG_USEC/2
 * from the loop when systemd set WATCHDOG_USEC for this process (a stalled
 * loop stops the pings and systemd restarts the member). */
#ifndef KT_SDNOTIFY_H
#define KT_SDNOTIFY_H

#include <stdint.h>

/* Sends msg. Returns 1 if sent, 0 if $NOTIFY_SOCKET is not set, -1 on an
 * error (a bad socket name, the send failed; errno says which). Never blocks. */
int kt_sd_notify(const char *msg);

/* The watchdog interval systemd asks for ($WATCHDOG_USEC, when
 * $WATCHDOG_PID is unset or this process), in microseconds; 0: none. */
uint64_t kt_sd_watchdog_usec(void);

#endif
