"""test/integration/elect_test.py — libketch's election (client/recipes.c) and
`ketchctl elect` against a real bin/ketch.

  three candidates: A, B, C campaign in that order with an observer running
      (and a second one started while B leads);
      A proclaims a new value, resigns, B leads, B is kill -9'd, C leads only
      after B's lease expires; the observer sees exactly the leaders and values
      in order; leader() follows; a resigned leader cannot proclaim
      (ENOTFOUND); with no candidate left leader() is ENOTFOUND.
  ketchctl elect: the same session through etcdctl 3.4 + etcd and ketchctl +
      ketch, outputs compared (lease hex normalized).

Helpers (processes, servers, normalization) come from lock_test.py.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_tests  # noqa: E402
from lock_test import (client, compare_transcripts, help_part, kill_after_renewal,  # noqa: E402
                       side_by_side, with_member)


def test_three_candidates_observer_sees_leaders_in_order():
    ttl = 3

    def body(m, procs):
        ep = m.endpoint
        obs = client(ep, "observe", "el")
        procs.append(obs)
        assert obs.line() == "observing"
        assert client(ep, "leader", "el").line() == "error ENOTFOUND"
        cands = {}
        for name in ("a", "b", "c"):
            p = client(ep, "campaign", "el", ttl, name, stdin=True)
            procs.append(p)
            cands[name] = p
            if name == "a":
                f = p.line().split()
                assert f[0] == "leader", f
                keys = {"a": f[1]}
                a_rev = int(f[2])
            else:
                p.no_line(0.4)  # waits behind a
        seen = [obs.line().split()[1:3]]
        assert seen[0] == [keys["a"], "a"], seen

        a = cands["a"]
        a.send("proclaim a2\n")
        assert a.line() == "proclaimed"
        seen.append(obs.line().split()[1:3])
        assert seen[-1] == [keys["a"], "a2"], seen
        assert client(ep, "leader", "el").line() == "leader %s a2" % keys["a"]

        a.send("resign\n")
        assert a.line() == "resigned"
        f = cands["b"].line().split()
        assert f[0] == "leader" and int(f[2]) > a_rev, f
        keys["b"] = f[1]
        seen.append(obs.line().split()[1:3])
        assert seen[-1] == [keys["b"], "b"], seen
        a.send("proclaim a3\n")
        assert a.line() == "error ENOTFOUND", "a resigned leader proclaimed"
        late = client(ep, "observe", "el")  # starts with a leader in place
        procs.append(late)
        assert late.line() == "observing"
        assert late.line().split()[1:3] == [keys["b"], "b"]
        cands["c"].no_line(0.3)

        t_kill = kill_after_renewal(cands["b"])
        f = cands["c"].line(timeout=ttl + 10).split()
        assert f[0] == "leader", f
        keys["c"] = f[1]
        waited = (int(f[3]) - t_kill) / 1e9
        assert ttl - 0.3 <= waited <= ttl + 4, "c led %.2fs after b's kill -9 (TTL %ds)" % (waited, ttl)
        o = obs.line().split()
        assert o[1:3] == [keys["c"], "c"], o
        assert (int(o[3]) - t_kill) / 1e9 >= ttl - 0.3, "the observer saw c before b's lease expired"
        assert late.line().split()[1:3] == [keys["c"], "c"]
        assert client(ep, "leader", "el").line() == "leader %s c" % keys["c"]

        cands["c"].send("resign\n")
        assert cands["c"].line() == "resigned"
        obs.no_line(0.5)  # no leader: nothing to report
        late.no_line(0.1)
        assert client(ep, "leader", "el").line() == "error ENOTFOUND"
        for name in ("a", "c"):
            cands[name].send("quit\n")
            assert cands[name].wait() == 0
        sys.stderr.write("elect_test: c led %.2fs after kill -9 of b (TTL %ds)\n" % (waited, ttl))
    with_member(body)


def elect_scenario(s):
    t = []

    def step(name, args):
        rc, out, err = s.run(args)
        t.extend([(name + " rc", rc), (name + " stdout", out), (name + " stderr", err)])

    step("no args", ["elect"])
    step("no proposal", ["elect", "E"])
    step("too many", ["elect", "E", "p", "q"])
    step("help", ["elect", "--help"])
    t[-2] = (t[-2][0], help_part(t[-2][1]))

    obs = s.start(["elect", "-l", "E"])
    time.sleep(0.5)
    c1 = s.start(["elect", "E", "p1"])
    t.append(("c1 key", c1.line()))
    t.append(("c1 value", c1.line()))
    c2 = s.start(["elect", "E", "p2"])
    c2.no_line(0.5)
    c3 = s.start(["elect", "E", "p3"])
    c3.no_line(0.5)
    c3.signal(signal.SIGINT)  # interrupted while campaigning
    t.extend([("c3 rc", c3.wait()), ("c3 stdout", c3.stdout()), ("c3 stderr", c3.stderr())])
    c1.signal(signal.SIGINT)  # resigns: c2 leads
    t.extend([("c1 rc", c1.wait()), ("c1 stderr", c1.stderr())])
    t.append(("c2 key", c2.line()))
    t.append(("c2 value", c2.line()))
    c2.signal(signal.SIGTERM)
    t.extend([("c2 rc", c2.wait()), ("c2 stderr", c2.stderr())])
    step("listen with proposal", ["elect", "--listen", "E", "p4"])
    c4 = s.start(["elect", "E", "p4"])
    t.append(("c4 key", c4.line()))
    t.append(("c4 value", c4.line()))
    c4.signal(signal.SIGINT)
    t.append(("c4 rc", c4.wait()))
    time.sleep(0.5)
    obs.signal(signal.SIGINT)
    t.extend([("observer rc", obs.wait()), ("observer stdout", obs.stdout()),
              ("observer stderr", obs.stderr())])
    step("left keys", ["get", "E/", "--prefix", "--keys-only"])
    return t


def test_ketchctl_elect_like_etcdctl():
    e, k = side_by_side(elect_scenario)
    compare_transcripts(e, k)


if __name__ == "__main__":
    run_tests([test_three_candidates_observer_sees_leaders_in_order,
               test_ketchctl_elect_like_etcdctl])
