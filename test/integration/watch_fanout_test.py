"""Watch fan-out (issue 17 item 3, net/THREADS.md "Watch fan-out") with real
processes: one member, 24 client connections spread over its I/O threads,
each with five watches, spoken to directly in the native protocol
(net/PROTOCOL.md) from one non-blocking loop. Every connection both watches
and writes, all at once:

  - watches A and B: the key fan/k (two watches of the same group on one
    connection: the frames of one shared batch, twice, on one stream each);
  - watch C: fan/k with prev_kv (a group of its own);
  - watch D: the prefix fan/ with no_delete (puts only);
  - watch E: fan/k from revision 1, created after the first puts (it catches
    up from history, then joins the others);

and pipelines, 4 in flight, puts of fan/k, puts and deletes of a key of its
own under fan/, serializable ranges and WATCH_PROGRESS requests, for a
bounded time. Every request id names its connection, so a reply on the
wrong connection, or twice, is caught as it arrives.

Then what a client sees: every watch got every event of its key/range
exactly once, in revision order, with the values the put replies name (C:
with the previous value as prev_kv; D: no deletes); every reply answered its
request once; on every connection each put's reply came before that put's
event on its watches (as the member has always sent them: the reply is made
when the put applies, the events at the end of that turn); and a progress
notification at revision R on a stream is never followed by an event at or
below R on that stream. A second case: a connection that hardly reads,
its 20 watches in one group with a reading connection's 20, is held at the
soft limit while the other gets everything, then gets every event once and
in order (slow-watcher backpressure through the shared batches). Run with
0, 1 and 3 I/O threads (or KT_IO_THREADS's count only). Prints "ok NAME" /
"FAIL NAME: why".
"""
import os
import selectors
import signal
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import iothreads_test  # noqa: E402
from harness import ERROR, PUT, RANGE, Conn, Member, run_tests  # noqa: E402

WATCH, WATCH_PROGRESS, DELETE = 16, 18, 4
N_CONNS, WINDOW = 24, 4
RUN_S = float(os.environ.get("KT_FANOUT_RUN_S", "3"))
KEY = b"fan/k"


class Peer(iothreads_test.Peer):
    """One connection (iothreads_test's: pipeline, flush, read) and what it saw."""

    def __init__(self, port, idx):
        super().__init__(port, idx, "fanout")
        self.acked = []  # (kind, key, value, revision) of this connection's writes
        self.unreplied = set()  # values of this connection's puts of fan/k not answered yet
        self.watches = {}  # stream id -> dict(name, created, events, progress)
        self.n = 0

    def watch(self, name, payload):
        i = self.send(WATCH, payload, ("watch", name))
        self.watches[i] = {"name": name, "created": False, "events": [], "progress": 0}


def on_frame(p, t, i, body):
    if i >> 32 != p.idx:
        p.errors.append("frame id %x (connection %d) on connection %d" % (i, i >> 32, p.idx))
        return
    w = p.watches.get(i)
    if w is not None and t == WATCH:
        if body.get("created"):
            w["created"] = True
            p.pending.pop(i, None)
        if body.get("canceled"):
            p.errors.append("watch %s canceled: %r" % (w["name"], body))
        evs = body.get("events") or []
        if not evs and not body.get("created") and not body.get("canceled"):
            w["progress"] = max(w["progress"], body["header"][2])  # a progress notification
        for e in evs:
            typ, kv = e[0], e[1]
            rev = kv[3]
            if rev <= w["progress"]:
                p.errors.append("watch %s on %d: event at %d after a progress notification "
                                "at %d" % (w["name"], p.idx, rev, w["progress"]))
            if kv[0] == KEY and kv[1] in p.unreplied:
                p.errors.append("watch %s on %d: the event of its own put at %d came before "
                                "the put's reply" % (w["name"], p.idx, rev))
            prev = e[2] if len(e) > 2 and e[2] else None
            w["events"].append((typ, kv[0], kv[1], rev, prev[1] if prev else None))
        return
    if i not in p.pending:
        p.errors.append("reply to id %x never sent or answered twice on %d" % (i, p.idx))
        return
    typ, what = p.pending.pop(i)
    if t == ERROR:
        p.errors.append("error %r for %r" % (body, what))
        return
    if t != typ:
        p.errors.append("reply type %d for request type %d (%r)" % (t, typ, what))
        return
    if what[0] in ("put", "del"):
        rev = body["header"][2]
        p.acked.append((what[0], what[1], what[2], rev))
        p.unreplied.discard(what[2])


def scenario(io_threads):
    m = Member(extra=["--io-threads", str(io_threads), "--log-level", "warn"])
    peers = []
    try:
        sel = selectors.DefaultSelector()
        for idx in range(1, N_CONNS + 1):
            p = Peer(m.port, idx)
            peers.append(p)
            sel.register(p.sock, selectors.EVENT_READ, p)
            p.watch("A", {"key": KEY})
            p.watch("B", {"key": KEY})
            p.watch("C", {"key": KEY, "prev_kv": True})
            p.watch("D", {"key": b"fan/", "range_end": b"fan0", "no_delete": True})

        def pump(timeout):
            for p in peers:
                p.flush()
            for key, _ in sel.select(timeout):
                p = key.data
                for t, i, body in p.read():
                    on_frame(p, t, i, body)

        def settle(what, cond, secs):
            deadline = time.time() + secs
            while not cond():
                if time.time() > deadline:
                    raise AssertionError("%s not done in %d s" % (what, secs))
                pump(0.05)

        settle("watches", lambda: all(w["created"] for p in peers for w in p.watches.values()),
               30)
        end, late_watch = time.time() + RUN_S, time.time() + RUN_S / 3
        while time.time() < end:
            for p in peers:
                if late_watch and time.time() > late_watch and not any(
                        w["name"] == "E" for w in p.watches.values()):
                    p.watch("E", {"key": KEY, "start_revision": 1})
                while len(p.pending) < WINDOW:
                    p.n += 1
                    k = p.n % 5
                    own = b"fan/o/%03d" % p.idx
                    if k == 0:
                        v = b"%d:%d" % (p.idx, p.n)
                        p.unreplied.add(v)
                        p.send(PUT, {"key": KEY, "value": v}, ("put", KEY, v))
                    elif k == 1:
                        v = b"o%d:%d" % (p.idx, p.n)
                        p.send(PUT, {"key": own, "value": v}, ("put", own, v))
                    elif k == 2:
                        p.send(DELETE, {"key": own}, ("del", own, None))
                    elif k == 3:
                        p.send(RANGE, {"key": KEY, "serializable": True}, ("range",))
                    else:
                        p.send(WATCH_PROGRESS, {}, ("progress",))
            pump(0.005)
        settle("replies", lambda: not any(p.pending for p in peers), 60)

        # the expected events, from every acknowledged write, by revision
        writes = sorted((a for p in peers for a in p.acked), key=lambda a: a[3])
        revs = [a[3] for a in writes if a[0] == "put"]
        if len(set(revs)) != len(revs):
            raise AssertionError("two writes acknowledged at one revision")
        on_key, prev, on_prefix = [], None, []
        for kind, k, v, rev in writes:
            if kind == "del":
                continue  # D filters deletes out; A, B, C and E watch fan/k only
            on_prefix.append((0, k, v, rev, None))
            if k == KEY:
                on_key.append((0, k, v, rev, prev))
                prev = v
        want = {"A": [e[:4] for e in on_key], "B": [e[:4] for e in on_key],
                "C": on_key, "D": [e[:4] for e in on_prefix], "E": [e[:4] for e in on_key]}

        def got(w):
            evs = w["events"]
            return evs if w["name"] == "C" else [e[:4] for e in evs]

        def complete():
            return all(len(w["events"]) >= len(want[w["name"]]) for p in peers
                       for w in p.watches.values())
        deadline = time.time() + 60
        while not complete() and time.time() < deadline:
            pump(0.05)
        errs = [e for p in peers for e in p.errors]
        errs += ["connection %d was closed" % p.idx for p in peers if p.closed]
        for p in peers:
            if sorted(w["name"] for w in p.watches.values()) != list("ABCDE"):
                errs.append("connection %d has watches %r" % (
                    p.idx, sorted(w["name"] for w in p.watches.values())))
            for w in p.watches.values():
                g, x = got(w), want[w["name"]]
                if g != x:
                    at = next((j for j, (a, b) in enumerate(zip(g, x)) if a != b), min(len(g), len(x)))
                    errs.append("watch %s on %d: %d events, want %d; first difference at %d: "
                                "%r vs %r" % (w["name"], p.idx, len(g), len(x), at,
                                              g[at] if at < len(g) else None,
                                              x[at] if at < len(x) else None))
        if errs:
            raise AssertionError("%d problems, first: %s" % (len(errs), errs[:4]))
        puts = sum(1 for a in writes if a[1] == KEY)
        if puts < 50 or not any(p.watches and p.acked for p in peers):
            raise AssertionError("too little done to mean anything: %d puts of %r" % (puts, KEY))
        print("  io-threads %d: %d writes, %d puts of fan/k, %d events delivered" % (
            io_threads, len(writes), puts,
            sum(len(w["events"]) for p in peers for w in p.watches.values())), file=sys.stderr)
        for p in peers:
            p.sock.close()
        peers = []
        rc = m.stop(signal.SIGTERM, timeout=20)
        if rc != 0:
            raise AssertionError("member exited %r on SIGTERM" % rc)
    finally:
        for p in peers:
            p.sock.close()
        m.cleanup()


def slow(io_threads):
    """Two connections with 20 watches of one prefix each (one group): one
    reads, one hardly reads while 3000 puts of 1 KiB (60 MB of frames for
    each connection) are made. The one that reads gets everything; the other
    is held at the soft limit (its watchers pass max_pending: moved aside,
    then caught up from history), and when it reads it gets every event once
    and in order; neither is cut."""
    m = Member(extra=["--io-threads", str(io_threads), "--log-level", "warn"])
    try:
        n_w, n_puts, val = 20, 3000, b"y" * 1024
        conns = []
        for _ in range(2):
            c = Conn(m.port, timeout=60)
            ids = []
            for _ in range(n_w):
                rid = c.send(WATCH, {"key": b"sl/", "range_end": b"sl0"})
                t, i, body = c.recv()
                assert t == WATCH and i == rid and body.get("created"), body
                ids.append(rid)
            conns.append((c, ids))
        (fast, fids), (lazy, lids) = conns
        w = Conn(m.port)
        for i in range(n_puts):
            w.send(PUT, {"key": b"sl/%04d" % i, "value": val})
        for i in range(n_puts):
            assert w.recv()[0] == PUT

        last = [time.time()]

        def nudge():
            """The slow one reads 64 KiB every 2 s (its frames stay in its
            buffer, unparsed), so the member's 10 s stall cut never comes
            however slow the machine: still far below what it is sent."""
            if time.time() - last[0] > 2:
                lazy.sock.settimeout(0.1)
                try:
                    lazy.buf += lazy.sock.recv(1 << 16)
                except socket.timeout:
                    pass
                lazy.sock.settimeout(60)
                last[0] = time.time()

        def read_all(c, ids, what, between=lambda: None):
            got = {i: [] for i in ids}
            deadline = time.time() + 120
            while any(len(v) < n_puts for v in got.values()):
                between()
                assert time.time() < deadline, "%s: %r events of %d" % (
                    what, sorted(len(v) for v in got.values())[:3], n_puts)
                t, i, body = c.recv()
                assert t == WATCH and i in got and not body.get("canceled"), (t, i, body)
                got[i].extend(e[1][0] for e in body.get("events") or [])
            want = [b"sl/%04d" % i for i in range(n_puts)]
            for i, v in got.items():
                assert v == want, "%s: watch %d: %d events, first difference at %d" % (
                    what, i, len(v), next((j for j, (a, b) in enumerate(zip(v, want)) if a != b),
                                          min(len(v), len(want))))

        t0 = time.time()
        read_all(fast, fids, "the reading connection", nudge)
        time.sleep(0.3)
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % m.port,
                                         timeout=10).read().decode()
        moved = [line for line in metrics.splitlines()
                 if line.startswith("ketch_watch_slow_moved_total ")]
        if not moved or not float(moved[0].split()[1]) > 0:
            raise AssertionError("no watcher was moved aside: %r" % moved)
        read_all(lazy, lids, "the connection that did not read")
        print("  io-threads %d: %s watchers moved aside; %.1f s to read both" % (
            io_threads, moved[0].split()[1], time.time() - t0), file=sys.stderr)
        lazy.put("after", "x")  # neither was cut
        fast.put("after", "y")
    finally:
        m.cleanup()


def counts():
    n = os.environ.get("KT_IO_THREADS")
    return [int(n)] if n else [0, 1, 3]


def every_watcher_gets_every_event_once_in_order_beside_other_requests():
    for n in counts():
        scenario(n)


def a_connection_that_hardly_reads_is_held_then_gets_everything_in_order():
    for n in counts():
        slow(n)


if __name__ == "__main__":
    run_tests([every_watcher_gets_every_event_once_in_order_beside_other_requests,
               a_connection_that_hardly_reads_is_held_then_gets_everything_in_order])
