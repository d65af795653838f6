/* net/peerlink.h — the member's peer links: the state thread's façade over
 * the peer transport (net/peer.h), with or without a thread of its own.
 *
 * Direct (--io-threads 0, or KETCH_PEER_THREAD=0 in the environment): every
 * call is the kt_peer_* call of the same name on the state thread's loop,
 * byte for byte the transport's behaviour.
 *
 * Threaded (--io-threads >= 1): a thread `ketch-peer` runs the transport on
 * a libev loop of its own (sockets, TLS, HELLO/ACK, framing, backoff, stall
 * timers, counters). The state thread and it talk through two SPSC rings
 * (net/spsc.h), each published once per loop turn with one ev_async
 * (net/THREADS.md, "Peer links"):
 *  - sends of one turn go in one SEND message (to, len, bytes back to back;
 *    one copy, as the transport's own queueing); a snapshot chunk, a
 *    membership change, the removed set and a JOIN answer each are a
 *    message of their own, in order with the sends around them;
 *  - frames received in one turn of the thread come back in one message,
 *    in arrival order, and are handed to on_message/on_snapshot on the
 *    state thread; channel states (up/down, snapshot bytes written) come
 *    with them, a copy of every peer's kt_peer_status every 100 ms.
 *
 * The façade's answers (state thread only, never waiting on the thread):
 *  - send/send2: 0 when handed over (the thread may still drop it: the
 *    channel went down meanwhile; counted by the transport, on_unreachable);
 *    KT_EUNAVAILABLE when the raft channel is down as last reported,
 *    KT_EBUSY over max_queue_bytes (all peers' messages) not yet taken by the
 *    thread (both counted,
 *    on_unreachable at the end of the turn, once per peer); KT_EINVAL,
 *    KT_ETOOLARGE, KT_ENOTFOUND as the transport.
 *  - send_snapshot, snapshot_room, snapshot_unsent: the transport's rules,
 *    over the bytes handed on the snapshot connection the thread reported
 *    minus those it reported written; a connection that went down or was
 *    replaced loses what was handed on it (unsent -1 while down), and
 *    on_snapshot_room runs when a refused chunk would fit.
 *  - ids, status's url: the state's own list; status's counters: the last
 *    copy from the thread plus the façade's own refusals.
 *
 * Callbacks (cfg's) run on the state thread's loop in both modes; is_removed
 * is not called in threaded mode: the thread answers from the copy given by
 * kt_peer_link_set_removed. JOIN is answered by on_join on the state thread
 * (the joiner's connection waits on the thread meanwhile).
 */
#ifndef KT_PEERLINK_H
#define KT_PEERLINK_H

#include <ev.h>

#include "peer.h"

struct kt_peer_link;

/* want_thread: run the transport on `ketch-peer` (unless KETCH_PEER_THREAD=0).
 * cfg is copied; its callbacks run on `loop`. */
struct kt_peer_link *kt_peer_link_new(struct ev_loop *loop, const struct kt_peer_config *cfg,
                                      bool want_thread);
bool kt_peer_link_threaded(const struct kt_peer_link *l);
int kt_peer_link_listen(struct kt_peer_link *l, const char *url, struct kt_err *e);
int kt_peer_link_listen_port(const struct kt_peer_link *l);
/* Starts `ketch-peer` (after listen; a direct link has none): 0, or KT_EIO
 * naming why the thread could not start (then free the link). Until it has
 * started, what the state thread hands over waits in the rings. */
int kt_peer_link_start(struct kt_peer_link *l, struct kt_err *e);
/* Stops and joins the thread (its transport closes every connection), then
 * frees what is left in the rings. Not from inside a callback. */
void kt_peer_link_free(struct kt_peer_link *l);

int kt_peer_link_add(struct kt_peer_link *l, uint64_t id, const char *url, struct kt_err *e);
int kt_peer_link_update(struct kt_peer_link *l, uint64_t id, const char *url, struct kt_err *e);
int kt_peer_link_remove(struct kt_peer_link *l, uint64_t id);
/* The removed members (threaded: the thread's copy for HELLO checks). */
void kt_peer_link_set_removed(struct kt_peer_link *l, const uint64_t *ids, size_t n);

int kt_peer_link_send(struct kt_peer_link *l, uint64_t to, const void *msg, size_t len);
int kt_peer_link_send2(struct kt_peer_link *l, uint64_t to, const void *a, size_t alen,
                       const void *b, size_t blen);
int kt_peer_link_send_snapshot(struct kt_peer_link *l, uint64_t to, const void *chunk, size_t len);
size_t kt_peer_link_snapshot_room(const struct kt_peer_link *l, uint64_t to);
/* -1 also once after chunks were lost with a connection that was replaced
 * before the façade saw it down (the transfer must start over). */
long long kt_peer_link_snapshot_unsent(struct kt_peer_link *l, uint64_t to);
bool kt_peer_link_connected(const struct kt_peer_link *l, uint64_t id);
int kt_peer_link_status(const struct kt_peer_link *l, uint64_t id, struct kt_peer_status *st);
size_t kt_peer_link_ids(const struct kt_peer_link *l, uint64_t *ids, size_t max);

#endif
