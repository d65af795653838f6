"""The server side of watch and leases, spoken directly in the native protocol
(net/PROTOCOL.md) against real bin/ketch processes: watch streams (created,
events in order, txn atomicity, filters, prev_kv, history replay, compaction
cancel, cancel, progress, a slow consumer), leases (grant, ttl, keys, keep-alive,
revoke and expiry deleting keys at one revision with watch events, restart and
snapshot recovery), and on 3 members: keep-alive/ttl forwarded by followers,
no lease expiring early when the leader is killed, watches on followers."""
import os
import time

from cluster_test import TIMING, cleanup, start_cluster, wait_leader
from harness import (DELETE, ERROR, PUT, RANGE, TXN, COMPACT, Conn, Member, ServerError,
                     run_tests)

WATCH, WATCH_CANCEL, WATCH_PROGRESS = 16, 17, 18
GRANT, REVOKE, KEEPALIVE, TTL, LEASES = 24, 25, 26, 27, 28
ELEASENOTFOUND, ELEASEEXISTS, ENOTFOUND = 9, 10, 21


def frames_until(c, pred, timeout=10.0):
    """Receive frames until pred(frames) is true; returns all frames."""
    c.sock.settimeout(timeout)
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        f = c.recv()
        if f is None:
            raise AssertionError("connection closed; frames so far: %r" % out)
        out.append(f)
        if pred(out):
            return out
    raise AssertionError("condition not met; frames: %r" % out)


def watch(c, key, **kw):
    """Opens a watch; returns (stream id, watch_id)."""
    rid = c.send(WATCH, dict(key=key.encode() if isinstance(key, str) else key, **kw))
    t, i, p = c.recv()
    assert t == WATCH and i == rid and p.get("created"), (t, i, p)
    return rid, p.get("watch_id", 0)


def events_of(frames, rid):
    ev = []
    for t, i, p in frames:
        if t == WATCH and i == rid:
            ev.extend(p.get("events") or [])
    return ev


def n_events(rid, n):
    return lambda fs: len(events_of(fs, rid)) >= n


def test_watch_events_in_order_txn_whole_filters_prev_kv():
    m = Member()
    try:
        w = Conn(m.port)
        rid, wid = watch(w, "k", range_end=b"l", prev_kv=True)
        rid2, _ = watch(w, "k", range_end=b"l", no_put=True)
        c = Conn(m.port)
        c.put("k1", "a")
        c.put("k1", "b")
        c.put("other", "x")  # outside the range
        ops = [[PUT, {"key": b"k%d" % i, "value": b"t"}] for i in range(5)]
        r = c.call(TXN, {"success": ops})
        txn_rev = r["header"][2]
        c.call(DELETE, {"key": b"k1"})
        fs = frames_until(w, lambda fs: len(events_of(fs, rid)) >= 8 and
                          len(events_of(fs, rid2)) >= 1)
        ev = events_of(fs, rid)
        assert [e[0] for e in ev] == [0] * 7 + [1], ev
        assert ev[0][1][:2] == [b"k1", b"a"] and ev[0][2] is None, ev[0]
        assert ev[1][1][1] == b"b" and ev[1][2][1] == b"a", ev[1]  # prev_kv
        revs = [e[1][3] for e in ev]
        assert revs == sorted(revs), revs
        # the txn's five events arrive in one frame
        txn_frames = [p for t, i, p in fs if i == rid and any(
            e[1][3] == txn_rev for e in p.get("events") or [])]
        assert len(txn_frames) == 1 and len(txn_frames[0]["events"]) >= 5, txn_frames
        ev2 = events_of(fs, rid2)
        assert len(ev2) == 1 and ev2[0][0] == 1 and ev2[0][1][0] == b"k1", ev2  # no_put
        # cancel: the stream ends with canceled, the cancel request is answered
        cid = w.send(WATCH_CANCEL, {"watch_id": wid})
        fs = frames_until(w, lambda fs: any(i == cid for _, i, _ in fs))
        assert any(i == rid and p.get("canceled") for t, i, p in fs), fs
        assert any(i == cid and t == WATCH_CANCEL for t, i, p in fs), fs
        c.put("k2", "after-cancel")
        pid = w.send(WATCH_PROGRESS, {})
        fs = frames_until(w, lambda fs: any(i == pid for _, i, _ in fs))
        assert not events_of(fs, rid), fs  # nothing after canceled
        assert events_of(fs, rid2) == [], fs  # a put: filtered by no_put
        try:
            w.call(WATCH_CANCEL, {"watch_id": wid})
            raise AssertionError("second cancel accepted")
        except ServerError as e:
            assert e.code == ENOTFOUND, e
    finally:
        m.cleanup()


def test_watch_history_replay_and_compacted_start():
    m = Member()
    try:
        c = Conn(m.port)
        revs = [c.put("h", "v%d" % i)["header"][2] for i in range(20)]
        w = Conn(m.port)
        rid, _ = watch(w, "h", start_revision=revs[5])
        fs = frames_until(w, n_events(rid, 15))
        ev = events_of(fs, rid)
        assert [e[1][3] for e in ev] == revs[5:], ev
        assert [e[1][1] for e in ev] == [b"v%d" % i for i in range(5, 20)]
        # live events follow the replay without a gap
        r = c.put("h", "live")["header"][2]
        fs = frames_until(w, n_events(rid, 1))
        assert [e[1][3] for e in events_of(fs, rid)] == [r]
        c.call(COMPACT, {"revision": revs[10]})
        rid2 = w.send(WATCH, {"key": b"h", "start_revision": revs[2]})
        fs = frames_until(w, lambda fs: any(i == rid2 and p.get("canceled") for t, i, p in fs))
        last = [p for t, i, p in fs if i == rid2][-1]
        assert last["compact_revision"] == revs[10], last
        assert "compacted" in last.get("cancel_reason", ""), last
        # from the compaction revision itself: served, as etcd (C stays readable)
        rid4, wid4 = watch(w, "h", start_revision=revs[10])
        fs = frames_until(w, n_events(rid4, 11))
        assert [e[1][3] for e in events_of(fs, rid4)] == revs[10:] + [r], fs
        cid = w.send(WATCH_CANCEL, {"watch_id": wid4})
        frames_until(w, lambda fs: any(i == cid for _, i, _ in fs))
        # a watch from a future revision waits for it
        rid3, _ = watch(w, "h", start_revision=r + 3)
        for i in range(4):
            c.put("h", "f%d" % i)
        fs = frames_until(w, n_events(rid3, 2))
        assert [e[1][3] for e in events_of(fs, rid3)] == [r + 3, r + 4], fs
    finally:
        m.cleanup()


def test_watch_progress_and_slow_consumer():
    m = Member(extra=["--experimental-watch-progress-notify-interval", "300ms"])
    try:
        w = Conn(m.port)
        rid, _ = watch(w, "p", progress_notify=True)
        fs = frames_until(w, lambda fs: any(i == rid for t, i, p in fs), timeout=5)
        p = [p for t, i, p in fs if i == rid][0]
        assert not p.get("events") and not p.get("created"), p  # periodic progress
        pid = w.send(WATCH_PROGRESS, {})
        fs = frames_until(w, lambda fs: any(i == pid for t, i, p in fs))
        assert any(i == rid and not p.get("events") for t, i, p in fs), fs
        # a consumer that does not read while 30 MB of events (3000, more
        # than a watcher may have pending: it is moved aside) are written:
        # the member keeps serving others and the consumer later gets every
        # event exactly once, in order.
        slow = Conn(m.port)
        srid, _ = watch(slow, "s", range_end=b"t")
        c = Conn(m.port)
        val = b"x" * 10000
        for i in range(3000):
            c.send(PUT, {"key": b"s%04d" % i, "value": val})
        for i in range(3000):
            t, _, p = c.recv()
            assert t == PUT, p
        t0 = time.time()
        assert Conn(m.port).get_value("s2999") == val
        assert time.time() - t0 < 1.0
        fs = frames_until(slow, n_events(srid, 3000), timeout=30)
        keys = [e[1][0] for e in events_of(fs, srid)]
        assert keys == [b"s%04d" % i for i in range(3000)], len(keys)
    finally:
        m.cleanup()


def test_watch_big_history_frames_and_whole_revisions():
    """A watch from history over 80 MB of values gets every event in frames
    of bounded size; a 2000-key delete (one revision) arrives in one frame
    unless fragments are asked for, then as flagged fragments."""
    m = Member()
    try:
        c = Conn(m.port)
        big = b"v" * 75000
        for i in range(1100):
            c.send(PUT, {"key": b"b%04d" % i, "value": big})
        for i in range(1100):
            assert c.recv()[0] == PUT
        w = Conn(m.port)
        rid, _ = watch(w, "b", range_end=b"c", start_revision=1)
        fs = frames_until(w, n_events(rid, 1100), timeout=60)
        assert [e[1][0] for e in events_of(fs, rid)] == [b"b%04d" % i for i in range(1100)]
        assert max(len(p.get("events") or []) for t, i, p in fs if i == rid) < 100
        for i in range(2000):
            c.send(PUT, {"key": b"d%04d" % i, "value": b"x"})
        for i in range(2000):
            assert c.recv()[0] == PUT
        r = c.call(DELETE, {"key": b"d", "range_end": b"e"})
        drev = r["header"][2]
        for frag in (False, True):
            rid, _ = watch(w, "d", range_end=b"e", start_revision=drev, fragment=frag)
            fs = frames_until(w, n_events(rid, 2000))
            mine = [p for t, i, p in fs if i == rid and p.get("events")]
            if not frag:
                assert len(mine) == 1 and len(mine[0]["events"]) == 2000, [len(p["events"]) for p in mine]
            else:
                assert all(p.get("fragment") for p in mine[:-1]) and not mine[-1].get("fragment")
    finally:
        m.cleanup()


def lease_grant(c, ttl, lid=0):
    p = c.call(GRANT, {"ttl": ttl, "id": lid} if lid else {"ttl": ttl})
    return p["id"], p["ttl"]


def test_lease_grant_ttl_keys_keepalive_revoke():
    m = Member()
    try:
        c = Conn(m.port)
        lid, ttl = lease_grant(c, 30)
        assert lid > 0 and ttl == 30
        lid2, _ = lease_grant(c, 30, lid=12345)
        assert lid2 == 12345
        try:
            lease_grant(c, 30, lid=12345)
            raise AssertionError("duplicate id granted")
        except ServerError as e:
            assert e.code == ELEASEEXISTS, e
        assert lease_grant(c, 1)[1] == 2  # raised to 1.5 election timeouts
        c.put("a", "1", lease=lid)
        c.put("b", "2", lease=lid)
        c.put("b", "2")  # a put without lease detaches
        p = c.call(TTL, {"id": lid, "keys": True})
        assert p["granted_ttl"] == 30 and 28 <= p["ttl"] <= 30 and p["keys"] == [b"a"], p
        assert c.get("a")["kvs"][0][5] == lid
        p = c.call(KEEPALIVE, {"id": lid})
        assert p["id"] == lid and p["ttl"] == 30, p
        assert c.call(KEEPALIVE, {"id": 999}).get("ttl", 0) == 0
        assert c.call(TTL, {"id": 999})["ttl"] == -1
        ids = c.call(LEASES, {}).get("leases")
        assert lid in ids and 12345 in ids, ids
        try:
            c.put("z", "1", lease=777)
            raise AssertionError("put with unknown lease accepted")
        except ServerError as e:
            assert e.code == ELEASENOTFOUND and "lease not found" in e.message, e
        w = Conn(m.port)
        rid, _ = watch(w, "a")
        r = c.call(REVOKE, {"id": lid})
        fs = frames_until(w, n_events(rid, 1))
        ev = events_of(fs, rid)
        assert ev[0][0] == 1 and ev[0][1][3] == r["header"][2], (ev, r)
        assert c.get("a").get("count", 0) == 0 and c.get_value("b") == b"2"
        try:
            c.call(REVOKE, {"id": lid})
            raise AssertionError("revoked twice")
        except ServerError as e:
            assert e.code == ELEASENOTFOUND, e
    finally:
        m.cleanup()


def test_lease_expiry_deletes_keys_at_one_revision_and_keepalive_holds():
    m = Member()
    try:
        c = Conn(m.port)
        lid, _ = lease_grant(c, 2)
        for i in range(3):
            c.put("e%d" % i, "v", lease=lid)
        w = Conn(m.port)
        rid, _ = watch(w, "e", range_end=b"f")
        t0 = time.time()
        fs = frames_until(w, n_events(rid, 3), timeout=8)
        took = time.time() - t0
        ev = events_of(fs, rid)
        assert all(e[0] == 1 for e in ev) and len({e[1][3] for e in ev}) == 1, ev
        assert 1.5 <= took <= 5, took
        assert c.call(TTL, {"id": lid})["ttl"] == -1
    finally:
        m.cleanup()


def test_keepalive_holds_a_key_for_ten_ttls():
    m = Member(extra=["--heartbeat-interval", "50", "--election-timeout", "500"])
    try:
        c = Conn(m.port)
        keep, ttl = lease_grant(c, 1)  # 1 s: the minimum at this election timeout
        assert ttl == 1
        c.put("kept", "v", lease=keep)
        end = time.time() + 10 * ttl
        while time.time() < end:
            assert c.call(KEEPALIVE, {"id": keep})["ttl"] == 1
            time.sleep(0.3)
        assert c.get_value("kept") == b"v"
        t0 = time.time()  # and without keep-alives it goes
        while c.get_value("kept") is not None and time.time() - t0 < 5:
            time.sleep(0.05)
        assert c.get_value("kept") is None and time.time() - t0 >= 0.6
    finally:
        m.cleanup()


def test_leases_survive_restart_and_snapshot():
    m = Member(extra=["--snapshot-count", "50"])
    try:
        c = Conn(m.port)
        lid, _ = lease_grant(c, 60)
        c.put("lk", "v", lease=lid)
        for i in range(200):  # past several snapshots
            c.put("fill%d" % (i % 10), "x" * 200)
        late, _ = lease_grant(c, 60)  # after the last snapshot: from the WAL
        c.put("lk2", "v", lease=late)
        m.kill9()
        m.start()
        c = Conn(m.port)
        for i, k in ((lid, b"lk"), (late, b"lk2")):
            p = c.call(TTL, {"id": i, "keys": True})
            assert p["granted_ttl"] == 60 and p["keys"] == [k], p
        # server-chosen ids continue without reuse after recovery
        nid, _ = lease_grant(c, 60)
        assert nid not in (lid, late)
        c.call(REVOKE, {"id": lid})
        assert c.get("lk").get("count", 0) == 0
        assert any("snapshot" in line and "recovered" in line for line in m.logtext().splitlines())
    finally:
        m.cleanup()


def test_cluster_lease_forwarding_and_no_early_expiry_on_leader_kill():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        followers = [m for m in ms if m is not leader]
        f = Conn(followers[0].port)
        lid, _ = lease_grant(f, 3)
        f.put("held", "v", lease=lid)
        p = f.call(KEEPALIVE, {"id": lid})  # forwarded to the leader
        assert p["ttl"] == 3, p
        p = f.call(TTL, {"id": lid, "keys": True})
        assert p["keys"] == [b"held"] and 2 <= p["ttl"] <= 3, p
        w = Conn(followers[1].port)  # a watch on a follower
        deadline = time.time() + 10  # once it applied the put: its first event is the expiry
        while w.get("held", serializable=True).get("count") != 1:
            assert time.time() < deadline, "the follower did not apply the put in 10 s"
            time.sleep(0.01)
        rid, _ = watch(w, "held")
        f.call(KEEPALIVE, {"id": lid})
        leader.kill9()
        t_kill = time.time()
        # The new leader extends every lease by an election timeout: the
        # key lives at least TTL after the last keep-alive.
        new = wait_leader(followers)
        c = Conn(new.port)
        while time.time() - t_kill < 2.5:
            assert c.get("held", serializable=True).get("count") == 1
            time.sleep(0.1)
        # without keep-alives it expires (TTL + election timeout + slack)
        fs = frames_until(w, n_events(rid, 1), timeout=10)
        assert events_of(fs, rid)[0][0] == 1
        assert time.time() - t_kill >= 3.0
    finally:
        cleanup(ms)


if __name__ == "__main__":
    run_tests([
        test_watch_events_in_order_txn_whole_filters_prev_kv,
        test_watch_history_replay_and_compacted_start,
        test_watch_progress_and_slow_consumer,
        test_watch_big_history_frames_and_whole_revisions,
        test_lease_grant_ttl_keys_keepalive_revoke,
        test_lease_expiry_deletes_keys_at_one_revision_and_keepalive_holds,
        test_keepalive_holds_a_key_for_ten_ttls,
        test_leases_survive_restart_and_snapshot,
        test_cluster_lease_forwarding_and_no_early_expiry_on_leader_kill,
    ])
