/* net/peer.h — the member-to-member transport on the member's libev loop.
 *
 * Owns: the peer listener (--listen-peer-urls), one persistent outgoing
 * connection per remote member and channel (raft messages, snapshot chunks),
 * every accepted peer connection, their bounded buffers, the reconnect
 * backoff, and per-peer counters. It carries opaque message bytes: it never
 * looks inside a Raft message. The wire format is net/PEERS.md.
 *
 * Data flow (sending, A → B): kt_peer_send(A, B, msg) appends one frame
 * (u32 BE length | u8 channel | msg) to A's outgoing raft connection to B →
 * at the end of the loop turn (ev_prepare) one write() per connection that
 * got frames → B's accepted connection reads, splits frames with the pure
 * kt_peer_frame_next → on_message(arg, A, msg, len). Snapshot chunks take the
 * same path on a second connection (channel 1), so a big snapshot in the
 * socket never delays heartbeats on the first. Traffic B → A goes on B's own
 * outgoing connection: accepted connections carry one direction only (after
 * the handshake reply, the acceptor never writes).
 *
 * Connections: the dialer sends HELLO (magic, version, channel, cluster id,
 * sender id, receiver id); the acceptor answers ACK with a status. A HELLO of
 * another cluster, addressed to another member, from a member that is not in
 * this transport's peer list, or of an unknown version or channel is refused:
 * the acceptor logs the reason naming both ids, answers the status and
 * closes; the dialer logs the status and backs off. A dial that fails or a
 * connection that drops is retried after a delay that starts at
 * backoff_min_ms, doubles up to backoff_max_ms, with jitter (the delay is
 * uniform in [d/2, d]); it returns to the minimum once a handshake succeeds.
 *
 * Invariants and limits:
 *  - A message is queued only on an outgoing raft connection that finished
 *    its handshake; otherwise it is dropped and counted (Raft retransmits),
 *    and on_unreachable(to) runs at the end of the turn (at most once per peer
 *    and turn). Queued bytes per peer never exceed max_queue_bytes: a message
 *    that would pass it is dropped and counted. Snapshot chunks have their own
 *    queue and bound; a refused chunk (KT_EBUSY) is not dropped — the caller
 *    keeps it and waits for on_snapshot_room.
 *  - Input is bounds-checked: a frame longer than max_frame_bytes, a zero
 *    length, an unknown channel or a channel that does not match the
 *    connection, a bad HELLO, or any byte the acceptor sends after its ACK
 *    closes that connection only (logged). Each connection buffers at most one
 *    frame of input plus one read (max_frame_bytes + 5 + 256 KiB bytes).
 *  - Authentication is TLS's (https:// peer URLs, cfg.tls_server/tls_client):
 *    the TLS handshake (state S_TLS) comes before HELLO on both channels and
 *    on JOIN, and a dialer whose certificate the acceptor's policy refuses
 *    (another CA, expired, revoked, a CN or host not allowed) never gets to
 *    send a HELLO; the acceptor logs who (address, certificate subject) and
 *    why, the dialer logs the alert it got. Without TLS any process that can
 *    reach the peer port and knows the cluster and member ids is believed.
 *  - Output with no write progress for stall_ms, or a handshake not done
 *    within stall_ms, closes the connection (then reconnect with backoff).
 *  - Frames queued in a turn leave at its end: the transport's ev_prepare
 *    watcher has the lowest priority, so a caller's prepare watcher of
 *    default priority that sends still makes this turn's write.
 *  - Callbacks run on the loop. on_message/on_snapshot's bytes are valid only
 *    during the call. Callbacks may call kt_peer_send*, add, update and remove
 *    (memory of closed connections and removed peers is freed at the end of
 *    the turn); they must not call kt_peer_free.
 *  - Peer URLs are resolved with getaddrinfo at each dial: use numeric
 *    addresses where a slow resolver must not stall the loop.
 *
 * Threads: the transport belongs to the thread whose loop it was created on
 * and is not thread-safe. The member reaches it through net/peerlink.h:
 * on the state thread's loop with --io-threads 0, on a thread of its own
 * (`ketch-peer`) otherwise; that thread uses on_join_async and
 * kt_peer_join_answer (JOIN needs the state's member list) and
 * kt_peer_status's snap_ups (net/THREADS.md, "Peer links").
 */
#ifndef KT_PEER_H
#define KT_PEER_H

#include <ev.h>

#include "../core/base.h"

struct kt_tls_ctx;

#define KT_PEER_VERSION 1
#define KT_PEER_HELLO_BYTES 32
#define KT_PEER_FRAME_HDR 5
#define KT_PEER_URL_MAX 256
#define KT_PEER_QUEUE_BYTES (64u * 1024u * 1024u)
#define KT_PEER_SNAP_QUEUE_BYTES (8u * 1024u * 1024u)
#define KT_PEER_MAX_FRAME_BYTES (64u * 1024u * 1024u)
#define KT_PEER_BACKOFF_MIN_MS 50
#define KT_PEER_BACKOFF_MAX_MS 2000
#define KT_PEER_STALL_MS 10000
#define KT_PEER_MAX_ACCEPTED 1024

/* Frame channels (PEERS.md section 3). Connection i carries channel i only.
 * JOIN is a one-shot exchange, not a kept connection (PEERS.md section 6). */
enum { KT_PEER_CH_RAFT = 0, KT_PEER_CH_SNAPSHOT = 1, KT_PEER_N_CHANNELS = 2, KT_PEER_CH_JOIN = 2 };

/* ACK statuses (PEERS.md section 2). */
enum {
  KT_PEER_OK = 0,
  KT_PEER_WRONG_CLUSTER = 1,
  KT_PEER_WRONG_MEMBER = 2, /* addressed to another member id */
  KT_PEER_BAD_VERSION = 3,
  KT_PEER_BAD_CHANNEL = 4,
  KT_PEER_UNKNOWN_SENDER = 5, /* sender is not in the receiver's peer list */
  KT_PEER_REMOVED = 6,        /* sender was removed from the cluster */
  KT_PEER_NOT_ADDED = 7,      /* JOIN: no member has the joiner's peer URLs */
};
const char *kt_peer_status_name(int status); /* "wrong cluster", ... */

/* ---- pure codec (fuzzed by test/fuzz/peer_frame_fuzz.c) ---- */

/* HELLO and ACK share one 32-byte layout; `kind` tells them apart. In a
 * HELLO, `code` is the channel and a = sender id, b = receiver id; in an
 * ACK, `code` is the status and a = acceptor id, b = the sender id it saw. */
enum { KT_PEER_HELLO = 0, KT_PEER_ACK = 1 };
struct kt_peer_hs {
  uint8_t kind, version, code;
  uint64_t cluster_id, a, b;
};
void kt_peer_hs_encode(uint8_t out[KT_PEER_HELLO_BYTES], const struct kt_peer_hs *h);
/* Decode the handshake at the front of p[0..n). Returns 1 and fills *h (any
 * version or code: the caller judges them), 0 if more bytes are needed, or
 * -KT_EPROTO (e filled) if the bytes present cannot start a handshake of
 * `kind` (bad magic, nonzero reserved bytes). */
int kt_peer_hs_decode(const uint8_t *p, size_t n, uint8_t kind, struct kt_peer_hs *h,
                      struct kt_err *e);
/* The acceptor's verdict on a decoded HELLO (KT_PEER_OK or a status).
 * known_sender says whether h->a is in the acceptor's peer list. */
int kt_peer_hs_check(const struct kt_peer_hs *h, uint64_t cluster_id, uint64_t member_id,
                     bool known_sender);

void kt_peer_frame_header(uint8_t out[KT_PEER_FRAME_HDR], uint8_t channel, uint32_t len);
/* Split the frame at the front of p[0..n). Returns 1 with *channel, *msg
 * (points into p), *len and *used (header + msg bytes); 0 if the frame is not
 * complete yet; -KT_ETOOLARGE if its length exceeds max_len; -KT_EPROTO for a
 * zero length or a channel above KT_PEER_CH_JOIN. Errors fill e. */
int kt_peer_frame_next(const uint8_t *p, size_t n, uint32_t max_len, uint8_t *channel,
                       const uint8_t **msg, uint32_t *len, size_t *used, struct kt_err *e);

/* Split "host:port", "[v6]:port" or "http://host:port" (a trailing '/' is
 * allowed). Returns 0 or KT_EINVAL (e names the url). */
int kt_peer_parse_url(const char *url, char *host, size_t host_len, int *port, struct kt_err *e);

/* ---- the transport ---- */

struct kt_peer_transport;

/* `msg` is valid only during the call. */
typedef void (*kt_peer_message_fn)(void *arg, uint64_t from, const uint8_t *msg, size_t len);
typedef void (*kt_peer_id_fn)(void *arg, uint64_t peer_id);
/* JOIN, acceptor side: `req` is the joiner's advertised peer URLs
 * (comma-separated, not NUL-terminated). Returns KT_PEER_OK with *member_id
 * (the joiner's id) and `reply` filled (the member list, opaque here), or
 * KT_PEER_NOT_ADDED / KT_PEER_REMOVED. */
typedef int (*kt_peer_join_fn)(void *arg, const uint8_t *req, size_t len, uint64_t *member_id,
                               struct kt_buf *reply);
typedef bool (*kt_peer_removed_fn)(void *arg, uint64_t id);
/* JOIN, acceptor side, answered later: the owner calls kt_peer_join_answer
 * with `token` (the connection waits, within stall_ms). `req` as above,
 * valid only during the call. */
typedef void (*kt_peer_join_async_fn)(void *arg, uint64_t token, const uint8_t *req, size_t len);

struct kt_peer_config {
  uint64_t cluster_id, member_id; /* member_id != 0 */
  /* 0 means the KT_PEER_* default for each. */
  size_t max_queue_bytes;          /* per peer, raft channel */
  size_t max_snapshot_queue_bytes; /* per peer, snapshot channel */
  uint32_t max_frame_bytes;        /* largest message sent or accepted */
  uint32_t backoff_min_ms, backoff_max_ms;
  uint32_t stall_ms;
  uint64_t seed;                  /* backoff jitter; 0: seeded from libsodium */
  kt_peer_message_fn on_message;  /* required: raft channel messages */
  kt_peer_message_fn on_snapshot; /* snapshot chunks; NULL: on_message */
  kt_peer_id_fn on_unreachable;   /* a message to this peer was dropped */
  kt_peer_id_fn on_snapshot_room; /* a refused snapshot chunk would now fit */
  kt_peer_join_fn on_join;        /* NULL (and no on_join_async): JOIN refused (unknown channel) */
  kt_peer_join_async_fn on_join_async; /* set: JOIN answered by kt_peer_join_answer instead */
  kt_peer_removed_fn is_removed;       /* NULL: none; a removed sender gets KT_PEER_REMOVED */
  kt_peer_id_fn on_removed;            /* a peer answered KT_PEER_REMOVED: we were removed */
  void *arg;
  /* TLS (net/tls.h; owned by the caller, outliving the transport). tls_server:
   * the listener serves TLS only (its policy verifies dialers' certificates).
   * tls_client: used to dial https:// peer URLs; the URL's host is what the
   * acceptor's certificate must be valid for. NULL: plaintext. */
  struct kt_tls_ctx *tls_server, *tls_client;
};

struct kt_peer_status {
  uint64_t id;
  char url[KT_PEER_URL_MAX];
  bool connected;                     /* raft channel handshake done */
  bool snapshot_connected;            /* snapshot channel handshake done */
  ev_tstamp connected_since;          /* ev_now() when the raft channel came up; 0 if down */
  char last_error[192];               /* last dial/handshake/connection error, "" if none */
  uint32_t backoff_ms;                /* current backoff step of the raft channel */
  uint64_t dials;                     /* connection attempts, both channels */
  uint64_t snap_ups;                  /* snapshot channel handshakes done (each a new connection) */
  uint64_t msgs_queued, bytes_queued; /* raft channel, accepted by kt_peer_send */
  uint64_t msgs_dropped_full;         /* over max_queue_bytes */
  uint64_t msgs_dropped_unreachable;  /* raft channel not connected */
  uint64_t snap_chunks_queued, snap_bytes_queued;
  uint64_t bytes_written, writes;         /* socket level, both channels */
  uint64_t bytes_lost;                    /* queued bytes lost with a closed connection */
  uint64_t msgs_received, bytes_received; /* from this member, both channels */
  uint64_t msgs_dropped_received; /* received, dropped: the state thread behind (peer thread) */
  size_t queue_bytes, snap_queue_bytes; /* unsent now */
  size_t queue_alloc_bytes;             /* raft queue buffer allocated (<= the bound) */
};

/* Fill cfg's zero limits with the KT_PEER_* defaults (kt_peer_new does). */
void kt_peer_config_defaults(struct kt_peer_config *c);
/* The size checks a send makes before anything else, under cfg's (resolved)
 * limits, for a message (snapshot false) or a snapshot chunk: 0,
 * KT_EINVAL (empty) or KT_ETOOLARGE. The transport and the peer-link
 * façade (net/peerlink.c) both answer with it. */
int kt_peer_check_len(const struct kt_peer_config *cfg, size_t len, bool snapshot);
/* Create a transport on `loop` (not started listening). cfg is copied. */
struct kt_peer_transport *kt_peer_new(struct ev_loop *loop, const struct kt_peer_config *cfg);
/* Listen on "host:port" (port 0: any; see kt_peer_listen_port). Errors name
 * the address. At most one listener. */
int kt_peer_listen(struct kt_peer_transport *t, const char *url, struct kt_err *e);
int kt_peer_listen_port(const struct kt_peer_transport *t); /* bound port, or -1 */
/* Closes every connection (queued bytes are lost) and frees everything.
 * Not from inside a callback. */
void kt_peer_free(struct kt_peer_transport *t);

/* Membership. add: starts dialing at once; KT_EINVAL (e filled) for id 0,
 * our own id, an id that is already a peer, or a bad url. update: new url, connections closed and
 * redialled now (KT_ENOTFOUND if unknown). remove: connections (both directions) closed, queues
 * dropped. */
int kt_peer_add(struct kt_peer_transport *t, uint64_t id, const char *url, struct kt_err *e);
int kt_peer_update(struct kt_peer_transport *t, uint64_t id, const char *url, struct kt_err *e);
int kt_peer_remove(struct kt_peer_transport *t, uint64_t id);

/* Queue one raft message (copied). Returns 0 if queued; otherwise the
 * message is dropped: KT_ENOTFOUND (not a peer), KT_EUNAVAILABLE (not
 * connected; counted, on_unreachable), KT_EBUSY (queue full; counted,
 * on_unreachable), KT_EINVAL (len 0) or KT_ETOOLARGE (len > max_frame). */
int kt_peer_send(struct kt_peer_transport *t, uint64_t to, const void *msg, size_t len);
/* kt_peer_send of the message a[0..alen) followed by b[0..blen) (one frame;
 * either part may be empty). */
int kt_peer_send2(struct kt_peer_transport *t, uint64_t to, const void *a, size_t alen,
                  const void *b, size_t blen);
/* Queue one snapshot chunk (copied). Returns 0 if queued; KT_EBUSY if it does
 * not fit in the snapshot queue now or KT_EUNAVAILABLE if the snapshot
 * channel is not connected — in both cases nothing is queued and
 * on_snapshot_room(to) runs once the chunk size that was refused fits
 * (the channel being up and its queue at or below half its bound).
 * KT_ENOTFOUND and KT_EINVAL as kt_peer_send; KT_ETOOLARGE for a chunk over
 * max_frame_bytes or over half of max_snapshot_queue_bytes (4 MiB by
 * default: use chunks of 1 MiB or so). */
int kt_peer_send_snapshot(struct kt_peer_transport *t, uint64_t to, const void *chunk, size_t len);
/* Bytes of snapshot chunks that may be queued to `to` now (0 if down). */
size_t kt_peer_snapshot_room(const struct kt_peer_transport *t, uint64_t to);
/* Bytes of snapshot chunks queued to `to` not yet written to its socket;
 * -1 if the snapshot channel is not connected (what was queued is lost). */
long long kt_peer_snapshot_unsent(const struct kt_peer_transport *t, uint64_t to);
bool kt_peer_connected(const struct kt_peer_transport *t, uint64_t id);

/* JOIN, joiner side (blocking: for start-up only, before the loop runs).
 * Connects to `url` (https://: over TLS with `tls`, the dialing context),
 * sends HELLO on the JOIN channel and a frame with
 * my_urls, waits at most timeout_ms for the ACK and the reply frame.
 * Returns 0 with the cluster id, the joiner's member id, the acceptor's id
 * and `reply` (the acceptor's member list, opaque here); KT_ENOTFOUND (e
 * names the status) if the acceptor knows no member with these URLs or the
 * member was removed; KT_EUNAVAILABLE if it cannot be reached in time;
 * KT_EPROTO for a bad answer. */
int kt_peer_join(const char *url, struct kt_tls_ctx *tls, const char *my_urls, uint32_t timeout_ms,
                 uint64_t *cluster_id, uint64_t *member_id, uint64_t *acceptor_id,
                 struct kt_buf *reply, struct kt_err *e);

/* JOIN, acceptor side with on_join_async: the answer to the request of
 * `token` (status, member id and reply as kt_peer_join_fn's). KT_ENOTFOUND
 * if that connection is gone (closed, timed out). */
int kt_peer_join_answer(struct kt_peer_transport *t, uint64_t token, int status, uint64_t member_id,
                        const void *reply, size_t len);

/* Fill *st for peer id: 0 or KT_ENOTFOUND. */
int kt_peer_status(const struct kt_peer_transport *t, uint64_t id, struct kt_peer_status *st);
/* Peer ids in the order added; returns how many there are (may exceed max). */
size_t kt_peer_ids(const struct kt_peer_transport *t, uint64_t *ids, size_t max);

#endif
