"""--io-threads (net/THREADS.md) under load, with real processes: one member
with 4 I/O threads and 512 client connections spoken to directly in the
native protocol (net/PROTOCOL.md), all at once from one non-blocking loop:

  - 384 writers pipeline puts of keys of their own (4 in flight each);
  - 64 watchers each watch two groups of writers' keys (every key is watched
    by two watchers on two connections), created before the first put;
  - 64 keepers each grant a lease and pipeline keep-alives of it.

for a bounded time. Every request id names its connection (connection
number << 32 | sequence), so a reply that reaches the wrong connection, or
answers a request never sent, or twice, is caught as it arrives. Then:
every acknowledged put is in the store with its value, every watch got
exactly the puts of its groups in revision order (the revisions the put
replies gave), no connection was cut, every keep-alive was answered with its
lease and a live TTL, and the member stops cleanly on SIGTERM. A second case
checks backpressure across the threads: a client that pipelines big ranges
without reading has its requests held (not lost, not reordered) and gets
every reply in order once it reads. A third starts a member whose threads
cannot all be created (a pids cgroup with a low limit, raised by one each
try): each try exits with an error naming the thread, never a crash, and
the data dir it leaves starts once the limit allows. Prints "ok NAME" /
"FAIL NAME: why".
"""
import errno
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import msgpack

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, ERROR, HELLO, PUT, RANGE, Conn, Member, free_port, run_tests  # noqa: E402

WATCH, GRANT, KEEPALIVE = 16, 24, 26
N_WRITERS, N_WATCHERS, N_KEEPERS = 384, 64, 64
GROUPS = 64
WINDOW = 4
RUN_S = float(os.environ.get("KT_IOTHREADS_RUN_S", "5"))


def frame(typ, rid, payload):
    body = msgpack.packb([typ, rid, payload], use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def group_prefix(g):
    return b"s/%02d/" % g


def prefix_end(p):
    return p[:-1] + bytes([p[-1] + 1])


class Peer:
    """One client connection: its pipeline and what it has seen."""

    def __init__(self, port, idx, kind):
        self.idx, self.kind = idx, kind
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.inbuf, self.outbuf = bytearray(), bytearray()
        self.seq = 0
        self.pending = {}  # request id -> what it was
        self.errors = []
        self.closed = False
        self.acked = {}  # writers: key -> (value, revision)
        self.watches = {}  # watchers: stream id -> [groups, created, events]
        self.lease, self.kept = None, 0
        self.send(HELLO, {"version": 1, "client": "iothreads_test"}, "hello")

    def rid(self):
        self.seq += 1
        return (self.idx << 32) | self.seq

    def send(self, typ, payload, what):
        i = self.rid()
        self.pending[i] = (typ, what)
        self.outbuf += frame(typ, i, payload)
        return i

    def flush(self):
        while self.outbuf:
            try:
                n = self.sock.send(self.outbuf)
            except BlockingIOError:
                return
            del self.outbuf[:n]

    def read(self):
        while True:
            try:
                b = self.sock.recv(1 << 18)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in (errno.ECONNRESET,):
                    b = b""
                else:
                    raise
            if not b:
                self.closed = True
                break
            self.inbuf += b
        frames = []
        off = 0
        while len(self.inbuf) - off >= 4:
            n = struct.unpack_from(">I", self.inbuf, off)[0]
            if len(self.inbuf) - off < 4 + n:
                break
            frames.append(msgpack.unpackb(bytes(self.inbuf[off + 4:off + 4 + n]), raw=False,
                                          strict_map_key=False))
            off += 4 + n
        del self.inbuf[:off]
        return frames


def one_reply(p, t, i, body):
    """Check a non-stream reply against p's pipeline; returns what it was."""
    if i >> 32 != p.idx:
        p.errors.append("reply id %x (connection %d) on connection %d" % (i, i >> 32, p.idx))
        return None
    if i not in p.pending:
        p.errors.append("reply to id %x never sent or answered twice on %d" % (i, p.idx))
        return None
    typ, what = p.pending.pop(i)
    if t == ERROR:
        p.errors.append("error %r for %r" % (body, what))
        return None
    if t != typ:
        p.errors.append("reply type %d for request type %d (%r)" % (t, typ, what))
        return None
    return what


def stress():
    m = Member(extra=["--io-threads", "4", "--log-level", "warn"])
    peers = []
    try:
        sel = selectors.DefaultSelector()
        kinds = ["writer"] * N_WRITERS + ["watcher"] * N_WATCHERS + ["keeper"] * N_KEEPERS
        for idx, kind in enumerate(kinds):
            p = Peer(m.port, idx + 1, kind)
            peers.append(p)
            sel.register(p.sock, selectors.EVENT_READ, p)
        writers = [p for p in peers if p.kind == "writer"]
        watchers = [p for p in peers if p.kind == "watcher"]
        keepers = [p for p in peers if p.kind == "keeper"]
        for w, p in enumerate(watchers):
            for g in (w % GROUPS, (w + 1) % GROUPS):
                pre = group_prefix(g)
                i = p.send(WATCH, {"key": pre, "range_end": prefix_end(pre)}, ("watch", g))
                p.watches[i] = [g, False, []]
        for p in keepers:
            lid = 0x7000000000 + p.idx
            p.send(GRANT, {"ttl": 120, "id": lid}, ("grant", lid))

        def pump(timeout):
            for p in peers:
                p.flush()
            for key, _ in sel.select(timeout):
                p = key.data
                for t, i, body in p.read():
                    if p.kind == "watcher" and i in p.watches and t == WATCH:
                        st = p.watches[i]
                        if body.get("created"):
                            st[1] = True
                            p.pending.pop(i, None)
                        if body.get("canceled"):
                            p.errors.append("watch %x canceled: %r" % (i, body))
                        for e in body.get("events") or []:
                            st[2].append((e[1][0], e[1][1], e[1][3]))
                        continue
                    what = one_reply(p, t, i, body)
                    if what is None or what == "hello":
                        continue
                    if what[0] == "put":
                        p.acked[what[1]] = (what[2], body["header"][2])
                    elif what[0] == "grant":
                        p.lease = what[1]
                    elif what[0] == "keepalive":
                        if body.get("id") != p.lease or not body.get("ttl", 0) > 0:
                            p.errors.append("keep-alive answer %r for lease %x" % (body, p.lease))
                        p.kept += 1

        deadline = time.time() + 30
        while not all(st[1] for p in watchers for st in p.watches.values()) or \
                any(p.lease is None for p in keepers):
            if time.time() > deadline:
                raise AssertionError("watches or leases not set up in 30 s")
            pump(0.05)
        end = time.time() + RUN_S
        while time.time() < end:
            for p in writers:
                while len(p.pending) < WINDOW:
                    n = p.seq + 1
                    key = b"s/%02d/%03d/%06d" % (p.idx % GROUPS, p.idx, n)
                    val = b"%d:%d" % (p.idx, n)
                    p.send(PUT, {"key": key, "value": val}, ("put", key, val))
            for p in keepers:
                while len(p.pending) < WINDOW:
                    p.send(KEEPALIVE, {"id": p.lease}, ("keepalive",))
            pump(0.01)
        deadline = time.time() + 60
        while any(p.pending for p in peers):
            if time.time() > deadline:
                left = sum(len(p.pending) for p in peers)
                raise AssertionError("%d requests unanswered 60 s after the run" % left)
            pump(0.05)
        by_group = {}
        for p in writers:
            for k, (v, rev) in p.acked.items():
                by_group.setdefault(p.idx % GROUPS, []).append((k, v, rev))
        for g in by_group:
            by_group[g].sort(key=lambda x: x[2])
        total = sum(len(p.acked) for p in writers)

        def watched():
            return all(len(st[2]) >= len(by_group.get(st[0], [])) for p in watchers
                       for st in p.watches.values())
        deadline = time.time() + 60
        while not watched():
            if time.time() > deadline:
                break
            pump(0.05)
        errs = [e for p in peers for e in p.errors]
        errs += ["connection %d (%s) was closed" % (p.idx, p.kind) for p in peers if p.closed]
        for p in watchers:
            for i, (g, _, evs) in p.watches.items():
                want = by_group.get(g, [])
                if evs != want:
                    errs.append("watch of group %d on connection %d: %d events, want %d (first "
                                "difference at %d)" % (
                                    g, p.idx, len(evs), len(want),
                                    next((j for j, (a, b) in enumerate(zip(evs, want)) if a != b),
                                         min(len(evs), len(want)))))
        if errs:
            raise AssertionError("%d problems, first: %s" % (len(errs), errs[:5]))
        # every acknowledged put is there with its value
        c = Conn(m.port)
        r = c.call(RANGE, {"key": b"s/", "range_end": b"s0"})
        got = {kv[0]: kv[1] for kv in r.get("kvs") or []}
        want = {k: v for p in writers for k, (v, _) in p.acked.items()}
        if got != want:
            missing = [k for k in want if got.get(k) != want[k]]
            raise AssertionError("store has %d keys, %d acknowledged; %d missing or wrong: %r" % (
                len(got), len(want), len(missing), missing[:5]))
        kept = sum(p.kept for p in keepers)
        if total < 1000 or kept < 100:
            raise AssertionError("too little done to mean anything: %d puts, %d keep-alives" % (
                total, kept))
        print("  %d puts over %d connections, %d events, %d keep-alives in %.0f s" % (
            total, N_WRITERS, sum(len(st[2]) for p in watchers for st in p.watches.values()),
            kept, RUN_S), file=sys.stderr)
        for p in peers:
            p.sock.close()
        peers = []
        rc = m.stop(signal.SIGTERM, timeout=20)
        if rc != 0:
            raise AssertionError("member exited %r on SIGTERM: %s" % (rc, m.logtext()[-1500:]))
    finally:
        for p in peers:
            p.sock.close()
        m.cleanup()


def held_requests_keep_their_order():
    """A client pipelines 300 ranges of ~64 KiB answers without reading: its
    unsent replies pass the 4 MiB soft limit, so the member stops reading it
    and holds what it has; nothing is lost or reordered when it reads."""
    m = Member(extra=["--io-threads", "2", "--log-level", "warn"])
    try:
        c = Conn(m.port)
        for i in range(16):
            c.put("big/%02d" % i, "v" * 4096)
        s = c.sock
        n = 300
        body = b"".join(frame(RANGE, 1000 + j, {"key": b"big/", "range_end": b"big0"})
                        for j in range(n))
        s.settimeout(30)
        s.sendall(body)
        time.sleep(1.0)  # the member stops reading above the soft limit
        ids = []
        deadline = time.time() + 60
        while len(ids) < n and time.time() < deadline:
            t, i, p = c.recv()
            if t != RANGE or len(p.get("kvs") or []) != 16:
                raise AssertionError("reply %d: type %d, %d kvs" % (i, t, len(p.get("kvs") or [])))
            ids.append(i)
        if ids != list(range(1000, 1000 + n)):
            raise AssertionError("%d replies, out of order or missing: %r" % (len(ids), ids[:10]))
        c.put("after", "x")  # the connection still works
    finally:
        m.cleanup()


PIDS_CGROUP = "/sys/fs/cgroup/pids"


def thread_start_failures_are_clean_errors():
    """A member of a 2-member cluster with 2 I/O threads (so it also runs
    the peer thread ketch-peer), started in a pids cgroup whose limit allows
    1, 2, 3... tasks: while some thread cannot be created the member exits
    with status 1 and a message naming it (no signal, no core); once the
    limit allows every thread it serves. All tries use one data dir: a
    start that failed leaves nothing that stops the next."""
    if not os.access(PIDS_CGROUP, os.W_OK):
        raise AssertionError("needs the pids cgroup (v1) at %s, writable" % PIDS_CGROUP)
    cg = os.path.join(PIDS_CGROUP, "ketch-it-%d" % os.getpid())
    os.mkdir(cg)
    tmp = tempfile.mkdtemp(prefix="ketch-it-threads-")
    port, peer, other = free_port(), free_port(), free_port()
    args = [os.path.join(BIN, "ketch"), "--name", "m1", "--data-dir", os.path.join(tmp, "d"),
            "--listen-client-urls", "http://127.0.0.1:%d" % port,
            "--advertise-client-urls", "http://127.0.0.1:%d" % port,
            "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
            "--initial-cluster", "m1=http://127.0.0.1:%d,m2=http://127.0.0.1:%d" % (peer, other),
            "--io-threads", "2", "--log-level", "info"]

    def enter():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    failures = set()
    try:
        for limit in range(1, 40):
            with open(os.path.join(cg, "pids.max"), "w") as f:
                f.write(str(limit))
            log = os.path.join(tmp, "log.%d" % limit)
            with open(log, "wb") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                        preexec_fn=enter)
            deadline, served = time.time() + 10, False
            while proc.poll() is None and time.time() < deadline and not served:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    served = True
                except OSError:
                    time.sleep(0.05)
            text = open(log, "rb").read().decode("utf-8", "replace")
            if served:
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(20)
                if rc != 0:
                    raise AssertionError("limit %d: served, then exited %r on SIGTERM: %s" % (
                        limit, rc, text[-800:]))
                break
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                raise AssertionError("limit %d: neither served nor exited in 10 s: %s" % (
                    limit, text[-800:]))
            if proc.returncode != 1:
                raise AssertionError("limit %d: exited %r (1 expected: an error, not a crash): %s"
                                     % (limit, proc.returncode, text[-800:]))
            m = re.search(r"fatal main \S+ cannot start: ([^\n]*thread[^\n]*)", text)
            if not m:
                raise AssertionError("limit %d: exited 1 without naming the thread: %s" % (
                    limit, text[-800:]))
            failures.add(re.sub(r"ketch-io-\d+", "ketch-io-N", m.group(1)))
        else:
            raise AssertionError("never served with up to 39 tasks")
        named = " | ".join(sorted(failures))
        for want in ("I/O thread", "peer thread"):
            if want not in named:
                raise AssertionError("no try failed at the %s: %s" % (want, named))
        print("  %d failing limits, each a clean error: %s" % (limit - 1, named), file=sys.stderr)
    finally:
        os.rmdir(cg)
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    run_tests([stress, held_requests_keep_their_order, thread_start_failures_are_clean_errors])
