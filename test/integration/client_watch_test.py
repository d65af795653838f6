"""test/integration/client_watch_test.py — libketch's watch and keep-alive across kill -9.

A real 3-member cluster (bin/ketch, loopback). The watcher and the keep-alive
are bin/ketchctl processes, i.e. libketch's ketch_watch and
ketch_lease_keepalive_start driven by ketchctl's loop, connected through the
endpoint list "victim first" so that the member they talk to is the one
killed.

  - watch resume, exactly once: a `ketchctl watch --prefix --rev S -w json`
    runs while a writer makes puts and deletes through the other members; the
    member the watcher is connected to is killed with SIGKILL (then restarted),
    twice (the first time it is the leader), each time while the watcher is
    frozen (SIGSTOP) and writes go on, so that it resumes behind. Afterwards the watcher's event
    history must EQUAL the server's history of the prefix from S (read by a
    fresh watch on a member that stayed up): same events, same order, same
    revisions — nothing lost, nothing twice — and every acknowledged write
    is in it.
  - keep-alive across kill -9: `ketchctl lease keep-alive` of a 3 s lease
    keeps it (and its key) alive through the loss of its member and 8 s more,
    then stopping it lets the lease expire and the key go.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, DELETE, Conn, ServerError, run_tests  # noqa: E402
from cluster_test import cleanup, put_retry, start_cluster, wait_leader  # noqa: E402

KETCHCTL = os.path.join(BIN, "ketchctl")
ENOLEADER, ETIMEOUT, EUNKNOWN = 11, 12, 13


class Proc:
    """A ketchctl process whose stdout lines are collected by a thread."""

    def __init__(self, args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KETCHCTL_")}
        self.p = subprocess.Popen([KETCHCTL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.decode("utf-8", "replace"))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(2)
        return self.p.returncode, self.p.stderr.read().decode("utf-8", "replace")


def events(lines):
    """(type, key, value, mod_revision) of every event of JSON watch lines."""
    out = []
    for l in lines:
        if not l.startswith("{"):
            continue
        for e in json.loads(l).get("Events") or []:
            kv = e["kv"]
            out.append(("DELETE" if e.get("type") == 1 else "PUT",
                        base64.b64decode(kv.get("key", "")).decode(),
                        base64.b64decode(kv.get("value", "")).decode(),
                        kv.get("mod_revision", 0)))
    return out


def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def delete_retry(m, key, timeout=10):
    deadline = time.time() + timeout
    while True:
        try:
            return Conn(m.port, timeout=5).call(DELETE, {"key": key.encode()})
        except ServerError as e:
            if e.code not in (ENOLEADER, EUNKNOWN, ETIMEOUT) or time.time() > deadline:
                raise
        except (OSError, ConnectionError):
            if time.time() > deadline:
                raise
        time.sleep(0.05)


def current_revision(m):
    return Conn(m.port, timeout=5).get("ev/")["header"][2]


def test_watch_resumes_exactly_once_across_kill9():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        others = [m for m in ms if m is not leader]
        order = [leader, others[0], others[1]]  # the watcher starts on the leader
        start = put_retry(others[0], "ev/start", "s")["header"][2]
        eps = ",".join(m.endpoint for m in order)
        w = Proc(["--endpoints", eps, "watch", "ev/", "--prefix", "--rev", str(start), "-w", "json"])
        acked = []
        n = [0]

        def write(m, count):
            for _ in range(count):
                i = n[0]
                n[0] += 1
                k, v = "ev/%04d" % (i % 150), "v%d" % i
                if i % 7 == 6:
                    r = delete_retry(m, k)
                    if r.get("deleted"):
                        acked.append(("DELETE", k, "", r["header"][2]))
                else:
                    r = put_retry(m, k, v)
                    acked.append(("PUT", k, v, r["header"][2]))

        write(others[0], 60)
        wait_until(lambda: len(events(w.lines)) >= 30, 10, "the watcher's first events")
        # The watcher is frozen while its member (the leader) dies and writes
        # go on elsewhere: when it wakes up, the events it missed are behind
        # it and must come from the resumed watch.
        w.p.send_signal(signal.SIGSTOP)
        order[0].kill9()
        write(others[1], 60)
        write(others[0], 60)
        w.p.send_signal(signal.SIGCONT)
        order[0].start(wait=True)
        write(order[0], 30)
        wait_until(lambda: any(e[3] == acked[-1][3] for e in events(w.lines)), 15,
                   "the watcher to see the writes after the first kill")
        w.p.send_signal(signal.SIGSTOP)
        order[1].kill9()  # where the watcher went next (round robin)
        write(order[2], 60)
        w.p.send_signal(signal.SIGCONT)
        write(order[0], 40)
        final = current_revision(order[2])
        wait_until(lambda: (events(w.lines) or [(0, 0, 0, 0)])[-1][3] >= final, 20,
                   "the watcher to catch up with revision %d" % final)
        rc, err = w.stop()
        got = events(w.lines)
        # the server's history of the prefix, from a member that stayed up
        h = Proc(["--endpoints", order[2].endpoint, "watch", "ev/", "--prefix", "--rev", str(start),
                  "-w", "json"])
        wait_until(lambda: (events(h.lines) or [(0, 0, 0, 0)])[-1][3] >= final, 15,
                   "the history watch")
        h.stop()
        want = events(h.lines)
        assert rc == -signal.SIGINT, "watcher exit %r: %s" % (rc, err)
        revs = [e[3] for e in got]
        assert revs == sorted(revs), "events out of revision order"
        assert len(got) == len(set(got)), "an event delivered twice: %r" % (
            [e for e in got if got.count(e) > 1][:5])
        if got != want:
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    raise AssertionError("event %d: watcher %r, server %r" % (i, a, b))
            raise AssertionError("watcher has %d events, the server's history %d" % (len(got), len(want)))
        missing = [a for a in acked if a not in set(got)]
        assert not missing, "acknowledged writes never delivered: %r" % missing[:5]
        assert len(got) >= 250, len(got)  # 310 writes, some deletes of absent keys
    finally:
        cleanup(ms)


def test_keepalive_survives_kill9_of_its_member():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        others = [m for m in ms if m is not leader]
        victim = others[0]
        eps = ",".join(m.endpoint for m in [victim, leader, others[1]])
        g = subprocess.run([KETCHCTL, "--endpoints", eps, "lease", "grant", "3"], capture_output=True)
        assert g.returncode == 0, g.stderr
        hexid = g.stdout.split()[1].decode()
        p = subprocess.run([KETCHCTL, "--endpoints", eps, "put", "ka/key", "v", "--lease=" + hexid],
                           capture_output=True)
        assert p.returncode == 0, p.stderr
        ka = Proc(["--endpoints", eps, "lease", "keep-alive", hexid])
        wait_until(lambda: len(ka.lines) >= 2, 5, "two renewals")
        victim.kill9()
        time.sleep(8)  # well past the TTL: renewals continue through another member
        n = len(ka.lines)
        assert ka.p.poll() is None, "keep-alive ended: %r" % ka.lines[-3:]
        assert n >= 8, "only %d renewals: %r" % (n, ka.lines)
        assert all("keepalived with TTL(3)" in l for l in ka.lines), ka.lines[-3:]
        assert Conn(leader.port).get_value("ka/key") == b"v", "the key died with the member"
        ka.stop()
        wait_until(lambda: Conn(leader.port).get_value("ka/key") is None, 8,
                   "the key to expire once the keep-alive stopped")
    finally:
        cleanup(ms)


if __name__ == "__main__":
    run_tests([test_watch_resumes_exactly_once_across_kill9, test_keepalive_survives_kill9_of_its_member])
