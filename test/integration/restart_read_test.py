"""Linearizable reads on a member restarted after kill -9 (issue 24).

3 members on loopback under a continuous write load: one writer puts
sequence numbers (0000001, 0000002, ...) to one key and records the newest
one each member acknowledged. A follower is killed with kill -9 while the
writes go on, then restarted; then the leader. From the moment the
restarted member accepts connections, readers send it linearizable gets,
natively and through a ketch-grpc that fronts that member alone (python3-
etcd3), for 2.5 s: every read must return a sequence number at least as new
as the last write acknowledged before the read was sent. A member that
serves its first reads from the state it recovered (its pre-kill values)
fails this within the first few reads.
"""
import os
import subprocess
import threading
import time

import etcd3

from harness import BIN, ERROR, Conn, Member, ServerError, free_port, run_tests
from cluster_test import cleanup, start_cluster, wait_leader
from grpc_test import wait_port

KEY = b"seq"
READ_SECONDS = 2.5
READERS = 3  # of each kind: a read the member defers until it hears a leader blocks its reader


class Writer(threading.Thread):
    """Puts increasing sequence numbers to KEY on the live members; `acked`
    is the newest one acknowledged (and when)."""

    def __init__(self, members):
        super().__init__(daemon=True)
        self.members = members
        self.down = set()  # names of members the test killed
        self.acked = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.seq = 0
        self.errors = 0

    def last_acked(self):
        with self.lock:
            return self.acked

    def run(self):
        i = 0
        conn = None
        while not self.stop.is_set():
            live = [m for m in self.members if m.name not in self.down]
            m = live[i % len(live)]
            try:
                if conn is None:
                    conn = Conn(m.port, timeout=3)
                self.seq += 1
                conn.put(KEY, b"%07d" % self.seq)
                with self.lock:
                    self.acked = max(self.acked, self.seq)
            except (OSError, ConnectionError, ServerError):
                self.errors += 1
                if conn:
                    conn.close()
                conn = None
                i += 1
                time.sleep(0.01)


def native_reader(member, writer, out, until):
    """Linearizable gets on `member` from the moment it accepts connections."""
    conn = None
    while time.time() < until:
        try:
            if conn is None:
                conn = Conn(member.port, timeout=5)
            floor = writer.last_acked()
            sent = time.time()
            v = conn.get_value(KEY)
            out.append(("native", sent, floor, int(v) if v else 0))
        except (OSError, ConnectionError):
            conn = None
            time.sleep(0.002)
        except ServerError as e:  # an error is no answer: nothing to check
            out.append(("native-error", time.time(), 0, str(e)))


def grpc_reader(port, writer, out, until):
    cl = etcd3.client(host="127.0.0.1", port=port, timeout=5)
    while time.time() < until:
        floor = writer.last_acked()
        sent = time.time()
        try:
            v, _ = cl.get(KEY)  # python3-etcd3: linearizable by default
            out.append(("grpc", sent, floor, int(v) if v else 0))
        except Exception as e:  # noqa: grpc errors: no answer, nothing to check
            out.append(("grpc-error", time.time(), 0, repr(e)[:200]))
            time.sleep(0.01)


def restart_and_read(member, bridge_port, writer, what):
    """Restarts `member` and reads from it at once; returns the reads."""
    out = []
    member.start(wait=False)
    t0 = time.time()
    until = t0 + READ_SECONDS
    rs = [threading.Thread(target=native_reader, args=(member, writer, out, until))
          for _ in range(READERS)]
    rs += [threading.Thread(target=grpc_reader, args=(bridge_port, writer, out, until))
           for _ in range(READERS)]
    for t in rs:
        t.start()
    for t in rs:
        t.join()
    writer.down.discard(member.name)
    stale = [r for r in out if not r[0].endswith("error") and r[3] < r[2]]
    ok = [r for r in out if not r[0].endswith("error")]
    assert not stale, "%s: %d of %d reads stale (native %d, grpc %d), first: %s read %07d " \
        "at +%.3fs, but %07d was acknowledged before it was sent" % (
            what, len(stale), len(ok), sum(r[0] == "native" for r in stale),
            sum(r[0] == "grpc" for r in stale), stale[0][0], stale[0][3], stale[0][1] - t0,
            stale[0][2])
    for kind in ("native", "grpc"):  # the reads did reach the member while it caught up
        early = [r for r in ok if r[0] == kind and r[1] - t0 < 1.5]
        assert early, "%s: no %s read sent in the first 1.5 s after the restart was " \
            "answered: %r" % (what, kind, [r for r in out if r[0] == kind + "-error"][:3])
    return out


def wait_writes(writer, before, n=20, timeout=10.0):
    """More than n writes acknowledged after `before`, within timeout (an
    election and the writer's retries take longer on a loaded machine)."""
    deadline = time.time() + timeout
    while writer.last_acked() <= before + n and time.time() < deadline:
        time.sleep(0.1)
    return writer.last_acked() > before + n


def test_restarted_members_never_answer_stale_reads():
    ms = start_cluster(token="restart-read")
    bridges, logs = [], []
    writer = Writer(ms)
    try:
        wait_leader(ms)
        for m in ms:  # one ketch-grpc per member, fronting that member alone
            port = free_port()
            log = open(os.path.join(m.data_dir, "bridge.log"), "wb")
            p = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr",
                                  "127.0.0.1:%d" % port, "--endpoints", m.endpoint],
                                 stdout=log, stderr=subprocess.STDOUT)
            bridges.append((p, port))
            logs.append(log)
            wait_port(port, p, "ketch-grpc")
        writer.start()
        time.sleep(0.5)
        assert writer.last_acked() > 0, "no write acknowledged"

        # a follower: killed while the writes go on, then restarted
        leader = wait_leader(ms)
        f = next(m for m in ms if m is not leader)
        writer.down.add(f.name)
        f.kill9()
        before = writer.last_acked()
        time.sleep(1.5)
        assert wait_writes(writer, before), "writes did not go on without the follower"
        reads = restart_and_read(f, bridges[ms.index(f)][1], writer, "restarted follower")

        # the leader: killed, a new one elected, restarted
        leader = wait_leader(ms)
        writer.down.add(leader.name)
        leader.kill9()
        before = writer.last_acked()
        time.sleep(2.0)
        assert wait_writes(writer, before), "writes did not go on after the leader died"
        reads += restart_and_read(leader, bridges[ms.index(leader)][1], writer,
                                  "restarted leader")
        checked = [r for r in reads if not r[0].endswith("error")]
        print("# %d reads checked (%d native, %d grpc), %d writes acknowledged" % (
            len(checked), sum(r[0] == "native" for r in checked),
            sum(r[0] == "grpc" for r in checked), writer.last_acked()))
    finally:
        writer.stop.set()
        writer.join(10)
        for p, _ in bridges:
            p.kill()
            p.wait()
        for log in logs:
            log.close()
        cleanup(ms)


ROLE_ADD, ROLE_LIST = 67, 69  # net/PROTOCOL.md section 6.19
INFLIGHT = 16  # ROLE_LISTs each reader keeps pipelined


def role_lister(member, role, out, until, done):
    """Pipelined ROLE_LISTs on `member` from the moment it accepts
    connections; each answer: whether it lists `role`."""
    conn, sent = None, 0
    while time.time() < until and not done.is_set():
        try:
            if conn is None:
                conn, sent = Conn(member.port, timeout=5), 0
            while sent < INFLIGHT:
                conn.send(ROLE_LIST, {})
                sent += 1
            f = conn.recv()
            if f is None:
                raise ConnectionError("closed")
            sent -= 1
            t, _, p = f
            if t == ERROR:  # (no leader yet): no answer, nothing to check
                out.append(("error", p.get("code")))
            else:
                listed = role in (p.get("roles") or [])
                out.append(("ok", listed))
                if listed:
                    done.set()
        except (OSError, ConnectionError):
            if conn:
                conn.close()
            conn = None
            time.sleep(0.0005)
    if conn:
        conn.close()


def test_restarted_lone_member_never_answers_stale_auth_reads():
    """A lone voter restarted after kill -9 recovers its log's commit index
    from the last hard state it wrote, which may lag its last acknowledged
    entry (a commit-only hard state rides with the next synced batch), so
    that entry is applied only once the member, elected again, commits an
    entry of its new term. Until then it is leader but not serving: its
    linearizable reads must wait (or fail), never answer from the state it
    recovered. Auth reads (ROLE_LIST here; AUTH_STATUS, USER_GET, USER_LIST,
    ROLE_GET likewise) skip the not-serving defer queue, and a lone leader
    answers them at once: each restart, a role acknowledged just before the
    kill must be in every ROLE_LIST answer."""
    m = Member(name="solo")
    stale, answered = [], 0
    try:
        for k in range(1, 13):
            role = "r%d" % k
            c = Conn(m.port)
            c.call(ROLE_ADD, {"name": role})  # acknowledged: applied on the member
            c.close()
            m.kill9()
            m.start(wait=False)
            out, done = [], threading.Event()
            until = time.time() + 5.0
            rs = [threading.Thread(target=role_lister, args=(m, role, out, until, done))
                  for _ in range(3)]
            for t in rs:
                t.start()
            for t in rs:
                t.join()
            ok = [r for r in out if r[0] == "ok"]
            assert ok, "restart %d: no ROLE_LIST answered in 5 s: %r" % (k, out[:5])
            answered += len(ok)
            if any(not r[1] for r in ok):
                stale.append((k, sum(not r[1] for r in ok), len(ok)))
            m.wait_ready()
        assert not stale, "restarts with ROLE_LIST answers missing the role acknowledged " \
            "before the kill (restart, stale answers, answers): %r" % (stale,)
        print("# %d ROLE_LIST answers checked over 12 restarts" % answered)
    finally:
        m.cleanup()


if __name__ == "__main__":
    run_tests([test_restarted_members_never_answer_stale_reads,
               test_restarted_lone_member_never_answers_stale_auth_reads])
