/* net/iothread.h — the client server's I/O threads (--io-threads N), used by
 * net/server.c only. The design, the messages and who frees what:
 * net/THREADS.md.
 *
 * Each I/O thread runs its own libev loop and owns the socket side of the
 * client connections it was given: accept (thread 0, for every listener),
 * TLS, reading, framing, writing. It hands whole request frames to the state
 * thread and takes encoded replies back, in batches, through two bounded
 * SPSC rings per thread (net/spsc.h), one ev_async wake-up per batch.
 *
 * A connection is named between the threads by its struct kt_ioconn_shared
 * (the first part of the I/O thread's connection struct): the I/O thread
 * allocates it, and frees it only when the state thread says RELEASE, which
 * it does once, after the connection's CLOSED; so the state thread may read
 * it from the first message about the connection until it sends RELEASE.
 */
#ifndef KT_IOTHREAD_H
#define KT_IOTHREAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "../core/base.h"
#include "proto.h"
#include "tls.h"

struct kt_conn;
struct kt_tls_ctx;

/* The part of a connection both threads see. */
struct kt_ioconn_shared {
  /* The state thread's connection (NULL until its first message): only the
   * state thread reads or writes this. */
  struct kt_conn *sc;
  /* Reply bytes handed to (or made by) the I/O thread and not written yet:
   * the state thread adds before handing bytes over, the I/O thread
   * subtracts what the socket took. */
  _Atomic size_t unsent;
  /* The state thread waits for unsent to reach 0 (streams, held frames): the
   * I/O thread that finds it so takes the flag (exchange) and sends DRAINED. */
  atomic_bool want_drain;
  /* Written by the I/O thread before its first message about the
   * connection, read-only after. */
  int thread;              /* the owning I/O thread's index */
  bool tls;                /* a TLS connection (after the handshake) */
  const char *tls_version; /* "TLSv1.3" (static), or "plain" */
  char peer[64];           /* host:port of the client */
  char cert_cn[256];       /* the verified client certificate's CN, "" if none */
};

/* One request of a FRAMES message, decoded by the I/O thread
 * (kt_proto_decode_req) into the message's arena. */
struct kt_ioreq {
  struct kt_req req;   /* valid if rc is 0 (else as far as the decoder got: req.id) */
  const uint8_t *body; /* the frame's body, in the message */
  uint32_t len;
  int rc;          /* the decoder's outcome: 0 or KT_E* */
  const char *err; /* its message (in the arena), or NULL */
};

enum kt_iomsg_type {
  /* I/O thread -> state thread */
  KT_IOM_FRAMES = 1, /* whole request frames of sh, in order: p[0..len), decoded: reqs */
  KT_IOM_DRAINED,    /* sh's unsent reached 0 while want_drain was set */
  KT_IOM_CLOSED,     /* sh is closed: the last message naming it */
  KT_IOM_HTTP,       /* io: an HTTP request on a client port, for the endpoints; p[0..len) read */
  /* state thread -> I/O thread */
  KT_IOM_WRITE,   /* encoded replies for sh: p[0..len), in order */
  KT_IOM_CLOSE,   /* write what sh has once, then close it (answered by CLOSED) */
  KT_IOM_RELEASE, /* the state thread is done with sh: free it */
  KT_IOM_WATCH,   /* batch: a WATCH frame each for targets[0..n_targets); p[0..len): their header
                     field */
};

/* An immutable batch of encoded watch events (net/server.h). */
struct kt_wbatch {
  _Atomic uint32_t refs;
  uint32_t n_events;
  bool fragment; /* the frame's fragment flag */
  size_t len;    /* bytes[0..len): the frame's events value */
  uint8_t bytes[];
};
void kt_wbatch_ref(struct kt_wbatch *b);

/* One watcher of a KT_IOM_WATCH message: a frame on sh for stream id. */
struct kt_wtarget {
  struct kt_ioconn_shared *sh;
  uint64_t id;
  int64_t watch_id;
};

struct kt_iomsg {
  struct kt_iomsg *next; /* in a FIFO while waiting for room, or held */
  uint8_t type;
  bool ext; /* p is a malloc'd buffer of its own (cap bytes), not data[] */
  struct kt_ioconn_shared *sh;
  struct kt_io io; /* HTTP: the connection, moved here (TLS: handshake done) */
  uint8_t *p;      /* FRAMES, WRITE: the bytes; HTTP: what was read */
  size_t len, cap;
  struct kt_ioreq *reqs;     /* FRAMES: one per frame, in order (in data[], after the frames) */
  uint32_t n_reqs, next_req; /* next_req: the next the state thread handles */
  struct kt_arena arena;
  /* WATCH: the batch (one reference), the frames' header, the watchers
   * (malloc'd), all on the I/O thread `thread` */
  struct kt_wbatch *batch;
  struct kt_header hdr;
  struct kt_wtarget *targets;
  uint32_t n_targets, cap_targets;
  int thread;
  _Alignas(16) uint8_t data[]; /* FRAMES puts its requests at a 16-byte offset in it */
};

/* A message with room for len bytes in data[] (p = data, len = 0). */
struct kt_iomsg *kt_iomsg_new(uint8_t type, struct kt_ioconn_shared *sh, size_t len);
void kt_iomsg_free(struct kt_iomsg *m);

struct kt_iothreads;

struct kt_iothreads_config {
  int n;              /* threads, >= 1 */
  uint32_t max_frame; /* the largest request body (max-request-bytes + 512 KiB) */
  uint32_t max_request_bytes;
  struct ev_loop *state_loop;
  ev_async *state_wake; /* sent after an I/O thread published messages for the state */
};

/* Starts the threads (named ketch-io-N); NULL with KT_EIO naming why when
 * one cannot start (those started are stopped). */
struct kt_iothreads *kt_iothreads_start(const struct kt_iothreads_config *cfg, struct kt_err *e);
int kt_iothreads_count(const struct kt_iothreads *t);

/* ---- state thread only ---- */

/* Hand HTTP requests on the client ports to the state thread (KT_IOM_HTTP). */
void kt_iothreads_set_http(struct kt_iothreads *t, bool on);
/* Serve the listening socket fd (owned from now on) from I/O thread 0. */
void kt_iothreads_listen(struct kt_iothreads *t, int fd, struct kt_tls_ctx *tls, bool also_plain);
/* The next message from I/O thread i, or NULL. kt_iothreads_taken after a
 * batch gives the slots back (and wakes the thread if it waits for room). */
struct kt_iomsg *kt_iothreads_take(struct kt_iothreads *t, int i);
void kt_iothreads_taken(struct kt_iothreads *t, int i);
/* Queue m for the I/O thread of m->sh (in order; visible at the next
 * kt_iothreads_publish). */
void kt_iothreads_send(struct kt_iothreads *t, struct kt_iomsg *m);
/* Queue a WATCH frame of batch b (header h) for sh's I/O thread, after
 * everything queued for it so far: consecutive calls with the same batch and
 * header for one thread share one message (closed by any other message for
 * that thread, or the publish). The caller has counted the frame's events
 * bytes (b->len) in sh->unsent; the I/O thread adds the frame's head. */
void kt_iothreads_send_watch(struct kt_iothreads *t, struct kt_ioconn_shared *sh,
                             struct kt_wbatch *b, const struct kt_header *h, uint64_t id,
                             int64_t watch_id);
/* Publish what was queued and wake the threads that got something. */
void kt_iothreads_publish(struct kt_iothreads *t);
/* Stop accepting and reading (shutdown); replies still go out. */
void kt_iothreads_stop_accepting(struct kt_iothreads *t);
/* Open connections, client bytes read and written (after TLS). */
size_t kt_iothreads_conns(const struct kt_iothreads *t);
void kt_iothreads_bytes(const struct kt_iothreads *t, uint64_t *in, uint64_t *out);
/* Stops and joins the threads. Then the state thread may drain the rings
 * (kt_iothreads_take returns what was left) before kt_iothreads_free closes
 * every socket and frees every connection and message that remain. */
void kt_iothreads_join(struct kt_iothreads *t);
void kt_iothreads_free(struct kt_iothreads *t);

#endif
