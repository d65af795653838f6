"""The server-side lock and election services (native types 80-86, etcd's
v3lock/v3election) against real bin/ketch processes: mutual exclusion with
threads incrementing a counter (sections never overlap, the count is exact),
a waiter that disconnects releases its place, a holder whose lease is revoked
hands over, elections with observe/proclaim/resign, and the same on a
follower of a 3-member cluster."""
import socket
import threading
import time

from cluster_test import cleanup, start_cluster, wait_leader
from harness import PUT, RANGE, Conn, Member, ServerError, run_tests

GRANT, REVOKE = 24, 25
LOCK, UNLOCK, CAMPAIGN, PROCLAIM, LEADER, OBSERVE, RESIGN = 80, 81, 82, 83, 84, 85, 86
ELEASENOTFOUND, EINVAL, ENOTFOUND = 9, 1, 21


def grant(c, ttl=30):
    return c.call(GRANT, {"ttl": ttl})["id"]


def no_frame_within(c, seconds):
    c.sock.settimeout(seconds)
    try:
        f = c.recv()
        return f is None
    except socket.timeout:
        return True
    finally:
        c.sock.settimeout(10)


def test_lock_waits_for_predecessor_and_hands_over():
    m = Member()
    try:
        a, b, x = Conn(m.port), Conn(m.port), Conn(m.port)
        la, lb, lx = grant(a), grant(b), grant(x)
        ka = a.call(LOCK, {"name": b"mtx", "lease": la})["key"]
        assert ka == b"mtx/%x" % la, ka
        rid = b.send(LOCK, {"name": b"mtx", "lease": lb})
        assert no_frame_within(b, 0.5)  # waits behind a
        # a third waiter leaves: its key goes, b's wait is unaffected
        x.send(LOCK, {"name": b"mtx", "lease": lx})
        time.sleep(0.2)
        x.close()
        deadline = time.time() + 3
        while time.time() < deadline:
            keys = [kv[0] for kv in a.call(RANGE, {"key": b"mtx/", "range_end": b"mtx0"}).get("kvs", [])]
            if b"mtx/%x" % lx not in keys:
                break
            time.sleep(0.05)
        assert b"mtx/%x" % lx not in keys, keys
        a.call(UNLOCK, {"key": ka})
        t, i, p = b.recv()
        assert t == LOCK and i == rid and p["key"] == b"mtx/%x" % lb, (t, i, p)
        # a holder whose lease is revoked hands over to the next waiter
        lc = grant(a)
        rid = a.send(LOCK, {"name": b"mtx", "lease": lc})
        assert no_frame_within(a, 0.3)
        b.call(REVOKE, {"id": lb})
        t, i, p = a.recv()
        assert t == LOCK and p["key"] == b"mtx/%x" % lc, p
        try:
            a.call(LOCK, {"name": b"mtx", "lease": 4242})
            raise AssertionError("lock with an unknown lease")
        except ServerError as e:
            assert e.code == ELEASENOTFOUND, e
    finally:
        m.cleanup()


def test_lock_then_disconnect_before_it_applies():
    """A LOCK whose client leaves before the lock txn applies, or while it
    waits: the member deletes the key (it once proposed that from inside its
    apply loop and aborted). A live client holds the lock first, so every
    one of the 20 waits whether its close or its txn reaches the state
    thread first (with I/O threads either may)."""
    m = Member()
    try:
        c = Conn(m.port)
        holder = grant(c)
        c.call(LOCK, {"name": b"gone", "lease": holder})
        for i in range(20):
            lid = grant(c)
            x = Conn(m.port)
            x.send(LOCK, {"name": b"gone", "lease": lid})
            x.close()
        def count():
            return c.call(RANGE, {"key": b"gone/", "range_end": b"gone0",
                                  "count_only": True}).get("count", 0)
        time.sleep(0.5)
        c.call(REVOKE, {"id": holder})
        # every waiter's key goes (a late one becomes the holder, finds its
        # client gone and releases too)
        deadline = time.time() + 5
        while time.time() < deadline and count():
            time.sleep(0.1)
        assert count() == 0
        assert m.proc.poll() is None
    finally:
        m.cleanup()


def contender(port, n, log, errors):
    try:
        c = Conn(port)
        lease = grant(c)
        for _ in range(n):
            p = c.call(LOCK, {"name": b"ctr-lock", "lease": lease})
            fence = p["header"][2]
            t0 = time.time()
            v = int(c.get_value("counter") or b"0")
            c.put("counter", str(v + 1))
            log.append((t0, time.time(), fence))
            c.call(UNLOCK, {"key": p["key"]})
    except Exception as e:  # noqa
        errors.append(repr(e))


def test_lock_mutual_exclusion_counter():
    m = Member()
    try:
        log, errors = [], []
        ts = [threading.Thread(target=contender, args=(m.port, 15, log, errors)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
        assert int(Conn(m.port).get_value("counter")) == 60
        log.sort(key=lambda x: x[2])  # fencing order
        for (s1, e1, f1), (s2, e2, f2) in zip(log, log[1:]):
            assert f1 < f2 and e1 <= s2 + 0.001, ((s1, e1, f1), (s2, e2, f2))
    finally:
        m.cleanup()


def test_election_campaign_observe_proclaim_resign():
    m = Member()
    try:
        a, b, o, c = Conn(m.port), Conn(m.port), Conn(m.port), Conn(m.port)
        la, lb = grant(a), grant(b)
        lead = a.call(CAMPAIGN, {"name": b"el", "lease": la, "value": b"a"})["leader"]
        assert lead["name"] == b"el" and lead["key"] == b"el/%x" % la and lead["lease"] == la
        assert c.call(LEADER, {"name": b"el"})["kv"][1] == b"a"
        orid = o.send(OBSERVE, {"name": b"el"})
        t, i, p = o.recv()
        assert t == OBSERVE and i == orid and p["kv"][1] == b"a", p
        brid = b.send(CAMPAIGN, {"name": b"el", "lease": lb, "value": b"b"})
        assert no_frame_within(b, 0.3)
        a.call(PROCLAIM, {"leader": lead, "value": b"a2"})
        t, i, p = o.recv()
        assert p["kv"][1] == b"a2", p
        a.call(RESIGN, {"leader": lead})
        t, i, p = b.recv()
        assert t == CAMPAIGN and i == brid and p["leader"]["key"] == b"el/%x" % lb, p
        t, i, p = o.recv()
        assert p["kv"][1] == b"b", p
        try:
            a.call(PROCLAIM, {"leader": lead, "value": b"stale"})
            raise AssertionError("a resigned leader proclaimed")
        except ServerError as e:
            assert e.code == EINVAL and "not leader" in e.message, e
        try:
            c.call(LEADER, {"name": b"nobody"})
            raise AssertionError("leader of an empty election")
        except ServerError as e:
            assert e.code == ENOTFOUND and "no leader" in e.message, e
    finally:
        m.cleanup()


def test_lock_on_a_follower_of_three():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        f1, f2 = [m for m in ms if m is not leader]
        a, b = Conn(f1.port), Conn(f2.port)
        la, lb = grant(a), grant(b)
        ka = a.call(LOCK, {"name": b"fl", "lease": la})["key"]
        rid = b.send(LOCK, {"name": b"fl", "lease": lb})
        assert no_frame_within(b, 0.3)
        a.call(UNLOCK, {"key": ka})
        t, i, p = b.recv()
        assert t == LOCK and p["key"] == b"fl/%x" % lb, p
    finally:
        cleanup(ms)


if __name__ == "__main__":
    run_tests([
        test_lock_waits_for_predecessor_and_hands_over,
        test_lock_then_disconnect_before_it_applies,
        test_lock_mutual_exclusion_counter,
        test_election_campaign_observe_proclaim_resign,
        test_lock_on_a_follower_of_three,
    ])
