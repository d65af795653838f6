"""3 real members on loopback: replication, forwarding, linearizable reads on
every member, leader loss (kill -9), minority and majority loss, restart and
catch-up, and a member of another cluster being refused."""
import os
import threading
import time

from harness import PUT, RANGE, STATUS, Conn, Member, ServerError, free_port, run_tests

EUNKNOWN, ENOLEADER, ETIMEOUT = 13, 11, 12
TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]


def io_mix(i, extra):
    """Unless KT_IO_THREADS or the test chose: member i of a cluster runs with
    0, 1 or 3 I/O threads (net/THREADS.md), so every cluster test has members
    of both kinds side by side."""
    if os.environ.get("KT_IO_THREADS") or any(str(a).startswith("--io-threads") for a in extra):
        return []
    return ["--io-threads", ("0", "1", "3")[i % 3]]


def start_cluster(n=3, token="it-cluster", extra=()):
    ports = [(free_port(), free_port()) for _ in range(n)]
    names = ["n%d" % i for i in range(n)]
    ic = ",".join("%s=http://127.0.0.1:%d" % (names[i], ports[i][1]) for i in range(n))
    ms = [Member(name=names[i], port=ports[i][0], peer_port=ports[i][1], wait=False,
                 extra=["--initial-cluster", ic, "--initial-cluster-token", token] + TIMING +
                 io_mix(i, extra) + list(extra))
          for i in range(n)]
    for m in ms:
        m.wait_ready()
    return ms


def status(m):
    try:
        c = Conn(m.port, timeout=2)
        s = c.call(STATUS, {})
        c.close()
        return s
    except (OSError, ServerError, ConnectionError):
        return None


def wait_leader(ms, timeout=10):
    """The member all live members agree leads."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ss = [status(m) for m in ms]
        leaders = {s.get("leader", 0) for s in ss if s}
        if len(leaders) == 1 and 0 not in leaders and all(ss):
            lid = leaders.pop()
            for m, s in zip(ms, ss):
                if s["header"][1] == lid:
                    return m
        time.sleep(0.05)
    raise AssertionError("no agreed leader within %ds: %r" % (timeout, ss))


def put_retry(m, key, value, timeout=10):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            return Conn(m.port, timeout=5).put(key, value)
        except ServerError as e:
            if e.code not in (ENOLEADER, EUNKNOWN, ETIMEOUT):
                raise
            last = e
        except (OSError, ConnectionError) as e:
            last = e
        time.sleep(0.05)
    raise AssertionError("put %r never succeeded: %s" % (key, last))


def cleanup(ms):
    for m in ms:
        m.cleanup()


def test_replication_and_reads_on_every_member():
    ms = start_cluster()
    try:
        wait_leader(ms)
        for i, m in enumerate(ms):  # writes through followers are forwarded
            r = put_retry(m, "k%d" % i, "v%d" % i)
            assert r["header"][2] >= 2
        for m in ms:  # a linearizable read anywhere sees every acknowledged write
            c = Conn(m.port)
            for i in range(len(ms)):
                assert c.get_value("k%d" % i) == b"v%d" % i, (m.name, i)
        revs = {Conn(m.port).get("k0")["header"][2] for m in ms}
        assert len(revs) == 1, "members disagree on the revision: %r" % revs
    finally:
        cleanup(ms)


def test_leader_kill9_then_failover_and_catch_up():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        others = [m for m in ms if m is not leader]
        acked = {}
        for i in range(200):
            k = b"pre/%03d" % i
            put_retry(others[i % 2], k, b"x%d" % i)
            acked[k] = b"x%d" % i
        leader.kill9()
        t0 = time.time()
        put_retry(others[0], "after-kill", "1", timeout=10)
        failover = time.time() - t0
        # election timeout 500 ms: detection + pre-vote + vote, with slack for a busy box
        assert failover < 2.5, "failover took %.1fs" % failover
        new_leader = wait_leader(others)
        assert new_leader is not leader
        for m in others:
            c = Conn(m.port)
            for k, v in acked.items():
                assert c.get_value(k) == v, "acknowledged %r lost on %s" % (k, m.name)
        leader.start(wait=True)  # restarts from its data dir, catches up
        deadline = time.time() + 10
        while True:
            try:
                if Conn(leader.port).get_value("after-kill") == b"1":
                    break
            except ServerError:
                pass
            assert time.time() < deadline, "restarted member did not catch up"
            time.sleep(0.1)
        print("   failover %.2fs" % failover)
    finally:
        cleanup(ms)


def test_minority_loss_keeps_serving_majority_loss_stops_writes():
    ms = start_cluster()
    try:
        leader = wait_leader(ms)
        follower = [m for m in ms if m is not leader][0]
        follower.kill9()
        put_retry(leader, "minority", "ok")
        assert Conn(leader.port).get_value("minority") == b"ok"
        other = [m for m in ms if m is not leader and m is not follower][0]
        other.kill9()  # now only one of three is up: no quorum
        c = Conn(leader.port, timeout=15)
        t0 = time.time()
        try:
            c.put("majority-lost", "x")
            raise AssertionError("a write was acknowledged without a quorum")
        except ServerError as e:
            assert e.code in (ENOLEADER, EUNKNOWN, ETIMEOUT), e
        assert time.time() - t0 < 12, "the failed write took %.1fs" % (time.time() - t0)
        follower.start(wait=True)
        other.start(wait=True)
        wait_leader(ms, timeout=15)
        put_retry(ms[0], "healed", "yes")
        for m in ms:
            deadline = time.time() + 10
            while True:
                try:
                    if Conn(m.port).get_value("healed") == b"yes":
                        break
                except ServerError:
                    pass
                assert time.time() < deadline, "%s did not see the write after healing" % m.name
                time.sleep(0.1)
    finally:
        cleanup(ms)


def test_member_of_another_cluster_is_refused():
    ms = start_cluster(token="cluster-a")
    stranger = None
    try:
        wait_leader(ms)
        pp = free_port()
        ic = "stranger=http://127.0.0.1:%d,%s=http://127.0.0.1:%d" % (pp, ms[0].name, ms[0].peer_port)
        stranger = Member(name="stranger", peer_port=pp, wait=False,
                          extra=["--initial-cluster", ic, "--initial-cluster-token", "cluster-b"] + TIMING)
        stranger.wait_ready()
        time.sleep(1.5)
        s = status(stranger)
        assert s and s.get("leader", 0) == 0, "a member of another cluster found a leader: %r" % s
        assert "cluster" in ms[0].logtext() and ("refus" in ms[0].logtext() or "wrong" in ms[0].logtext()), \
            ms[0].logtext()[-1500:]
        put_retry(ms[1], "still", "fine")
    finally:
        cleanup(ms)
        if stranger:
            stranger.cleanup()


if __name__ == "__main__":
    run_tests([test_replication_and_reads_on_every_member,
               test_leader_kill9_then_failover_and_catch_up,
               test_minority_loss_keeps_serving_majority_loss_stops_writes,
               test_member_of_another_cluster_is_refused])
