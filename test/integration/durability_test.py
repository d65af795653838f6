"""Crash and restart a real member: acknowledged writes survive kill -9,
unacknowledged ones are either whole or absent, shutdown on SIGTERM is clean."""
import os
import random
import signal
import threading
import time

from harness import PUT, TXN, Conn, Member, run_tests

SEED = int(os.environ.get("KETCH_TEST_SEED", "7"))


def load(port, it, acked, sent, stop_at):
    """Pipeline puts and two-key txns until the connection dies."""
    try:
        c = Conn(port)
    except OSError:
        return
    i = 0
    inflight = {}
    try:
        while time.time() < stop_at:
            for _ in range(64):
                if i % 5 == 4:
                    a, b = b"t/%d/%d/a" % (it, i), b"t/%d/%d/b" % (it, i)
                    v = b"txn-%d-%d" % (it, i)
                    rid = c.send(TXN, {"success": [[PUT, {"key": a, "value": v}],
                                                   [PUT, {"key": b, "value": v}]]})
                    inflight[rid] = [(a, v), (b, v)]
                else:
                    k, v = b"k/%d/%d" % (it, i), (b"val-%d-%d-" % (it, i)) * 8
                    rid = c.send(PUT, {"key": k, "value": v})
                    inflight[rid] = [(k, v)]
                for kv in inflight[rid]:
                    sent[kv[0]] = kv[1]
                i += 1
            while len(inflight) > 32:
                f = c.recv()
                if f is None:
                    return
                t, rid, p = f
                assert t in (PUT, TXN), p
                for k, v in inflight.pop(rid):
                    acked[k] = v
    except (OSError, ConnectionError):
        return


def check_after_restart(m, acked, sent):
    c = Conn(m.port)
    got = {}
    for prefix in (b"k/", b"t/"):
        r = c.get(prefix, range_end=prefix[:-1] + b"0")
        for kv in r.get("kvs") or []:
            got[kv[0]] = kv[1]
    missing = [k for k in acked if got.get(k) != acked[k]]
    assert not missing, "%d acknowledged writes lost or changed, e.g. %r" % (len(missing), missing[:3])
    for k, v in got.items():
        assert sent.get(k) == v, "key %r holds %r, never written" % (k, v)
        if k.startswith(b"t/"):  # txn pairs are atomic
            other = k[:-1] + (b"b" if k.endswith(b"a") else b"a")
            assert got.get(other) == v, "txn half-applied: %r without %r" % (k, other)
    c.close()
    return len(got)


def test_kill9_loop_keeps_every_acknowledged_write():
    rng = random.Random(SEED)
    m = Member(extra=["--snapshot-count", "700"])
    acked, sent = {}, {}
    try:
        for it in range(8):
            stop_at = time.time() + 5
            th = threading.Thread(target=load, args=(m.port, it, acked, sent, stop_at))
            th.start()
            time.sleep(rng.uniform(0.2, 0.9))
            m.kill9()
            th.join()
            m.start()
            n = check_after_restart(m, acked, sent)
        assert len(acked) > 1000, "load too small to mean anything: %d acked" % len(acked)
        assert "snapshot saved" in m.logtext(), "no snapshot was taken during the crash loop"
        assert n >= len(acked)
    finally:
        m.cleanup()


def test_sigterm_is_clean_and_keeps_data():
    m = Member()
    try:
        c = Conn(m.port)
        for i in range(500):
            c.send(PUT, {"key": b"s/%d" % i, "value": b"v"})
        for i in range(500):
            c.recv()
        rc = m.stop(signal.SIGTERM)
        assert rc == 0, "exit code %s on SIGTERM" % rc
        assert "shutdown" in m.logtext() or "stopped" in m.logtext(), m.logtext()[-500:]
        m.start()
        r = Conn(m.port).get("s/", range_end=b"s0", count_only=True)
        assert r["count"] == 500, r
    finally:
        m.cleanup()


if __name__ == "__main__":
    run_tests([test_kill9_loop_keeps_every_acknowledged_write, test_sigterm_is_clean_and_keeps_data])
