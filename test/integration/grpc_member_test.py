"""ketch-grpc's Cluster service (MemberAdd/Remove/Update/Promote) with real
etcd clients. etcdctl 3.4 runs the same membership sequence against a
3-member ketch cluster behind bin/ketch-grpc and against a real etcd 3.4
(Debian etcd-server, one member) started here: add a learner, start the new
member with the settings etcdctl printed (ETCD_* lines: etcd reads them as
they are, ketch as KETCH_*), check it caught up (a serializable get through
its own client port), promote it, update its peer URLs, remove it (its
process stops and says why). Each output (stdout, stderr, exit code) is
compared with etcd's after masking ids, ports and member names of the
original members, which legitimately differ. Error cases are compared the
same way. Then ketch-only checks where one etcd member cannot show the case
(unhealthy cluster, concurrent changes) assert etcd's documented status and
text, and python3-etcd3's add_member/members/update_member/remove_member."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import grpc_stream_test as gs
import grpc_test as g
from harness import BIN, RANGE, STATUS, Conn, bridge_loops, free_port, run_tests

NEW = "new1"  # the added member's name, the same on both sides
URL_RE = re.compile(r"http://127\.0\.0\.1:\d+")
ID_RE = re.compile(r"\b(Member|cluster)\s+[0-9a-f]+\b")


class Side:
    """One side: the etcdctl endpoint, the original members' names, and the
    member added by the test (its process, ports, id)."""

    def __init__(self, kind, port, names):
        self.kind, self.port, self.names = kind, port, names
        self.proc = self.log_path = None
        self.id = None
        self.client_port = self.peer_port = self.peer_port2 = None
        self.bridge = None  # ketch: a second ketch-grpc in front of the new member only

    def ctl(self, args, timeout=30):
        return g.env().ctl(self.port, args, timeout=timeout)

    def members(self):
        rc, out, err = self.ctl(["member", "list", "-w", "json"])
        assert rc == 0, (self.kind, rc, out, err)
        return json.loads(out)["members"]

    def logtext(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


SIDES = {}


def sides():
    if not SIDES:
        e = g.env()
        SIDES["etcd"] = Side("etcd", e.etcd_port, {"e0"})
        SIDES["ketch"] = Side("ketch", e.grpc_port, {m.name for m in e.members})
    return SIDES["etcd"], SIDES["ketch"]


def norm_lines(text, side):
    """Masks ids and ports; ETCD_INITIAL_CLUSTER keeps the new member's entry
    and one OLD=URL for the original members (checked separately)."""
    out = []
    for line in text.decode("utf-8", "replace").splitlines():
        if line.startswith('{"level":'):  # clientv3's retry warnings
            continue
        if line.startswith("{"):
            out.append(json.dumps(g.norm_json(json.loads(line)), sort_keys=True))
            continue
        if line.startswith("ETCD_INITIAL_CLUSTER="):
            entries = line.split("=", 1)[1].strip('"').split(",")
            names = sorted({"OLD" if e.split("=")[0] in side.names else e.split("=")[0]
                            for e in entries})
            line = 'ETCD_INITIAL_CLUSTER="%s"' % ",".join(n + "=URL" for n in names)
        line = ID_RE.sub(r"\1 ID", line)
        line = re.sub(r"\b[0-9a-f]{16}\b", "ID", line)
        out.append(URL_RE.sub("URL", line))
    return "\n".join(out)


def both(args_of, timeout=30):
    """Runs etcdctl on each side (args_of(side) gives the arguments) and
    asserts the normalized (exit code, stdout, stderr) are equal; returns the
    raw results (etcd's, ketch's). etcd refuses a change with "unhealthy
    cluster" until every voter has been connected for 5 s (its
    HealthInterval, restarted by each change); ketch looks at the voters
    active now, so only etcd's side waits that out."""
    e, k = sides()
    res = []
    for s in (e, k):
        deadline = time.time() + 15
        while True:
            rc, out, err = s.ctl(args_of(s), timeout=timeout)
            if s is k or b"unhealthy cluster" not in err or time.time() > deadline:
                break
            time.sleep(0.5)
        res.append((rc, out, err))
    w = [(rc, norm_lines(out, e), norm_lines(err, e)) for rc, out, err in res[:1]][0]
    got = (res[1][0], norm_lines(res[1][1], k), norm_lines(res[1][2], k))
    assert w == got, "etcdctl %s:\n  etcd:  %r\n  ketch: %r" % (" ".join(args_of(k)), w, got)
    g.env().bridge_alive()
    return res


def env_lines(out):
    """The KEY="value" lines etcdctl member add printed."""
    kv = {}
    for line in out.decode().splitlines():
        m = re.match(r'^(ETCD_[A-Z_]+)="(.*)"$', line)
        if m:
            kv[m.group(1)] = m.group(2)
    return kv


def new_row(s):
    """The added member's row of `etcdctl member list`, normalized."""
    rc, out, err = s.ctl(["member", "list"])
    row = [line for line in out.decode().splitlines() if line.startswith("%x, " % s.id)]
    assert rc == 0 and len(row) == 1, (s.kind, rc, out, err)
    return norm_lines(("ID" + row[0][len("%x" % s.id):]).encode(), s)


def wait_until(what, fn, timeout=20, every=0.2):
    deadline = time.time() + timeout
    while True:
        r = fn()
        if r:
            return r
        if time.time() > deadline:
            raise AssertionError("%s: not within %ss" % (what, timeout))
        time.sleep(every)


def start_new_member(s, settings):
    """Starts the added member with etcdctl's printed settings (etcd: its
    ETCD_* variables as printed; ketch: the same as KETCH_*)."""
    e = g.env()
    client = "http://127.0.0.1:%d" % s.client_port
    peer = "http://127.0.0.1:%d" % s.peer_port
    env = dict(os.environ)
    s.log_path = os.path.join(e.tmp, "%s-new.log" % s.kind)
    log = open(s.log_path, "wb")
    if s.kind == "etcd":
        env.update(settings)
        args = [g.ETCD, "--data-dir", os.path.join(e.tmp, "etcd-new"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--log-outputs", "stderr"]
    else:
        env.update({"KETCH_" + k[5:]: v for k, v in settings.items()})
        args = [os.path.join(BIN, "ketch"), "--data-dir", os.path.join(e.tmp, "ketch-new"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer] + g.TIMING
    s.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    e.procs.append(s.proc)
    g.wait_port(s.client_port, s.proc, "%s new member" % s.kind, timeout=20)
    if s.kind == "ketch":  # etcdctl reaches the new ketch member through its own bridge
        s.bridge_port = free_port()
        s.bridge_log = os.path.join(e.tmp, "bridge-new.log")
        with open(s.bridge_log, "wb") as bl:
            s.bridge = subprocess.Popen(
                [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % s.bridge_port,
                 "--endpoints", "127.0.0.1:%d" % s.client_port] + bridge_loops(2), stdout=bl,
                stderr=subprocess.STDOUT)
        e.procs.append(s.bridge)
        g.wait_port(s.bridge_port, s.bridge, "ketch-grpc for the new member")
    else:
        s.bridge_port = s.client_port


# ---- the tests, in order: each builds on the one before ----

def test_member_add_learner_then_join():
    """member add --learner prints the same lines as etcd's; the member
    started with them joins and serves the data written before and after."""
    e, k = sides()
    for s in (e, k):
        s.client_port, s.peer_port = free_port(), free_port()
        rc, out, err = s.ctl(["put", "mem/before", "v1"])
        assert rc == 0, (s.kind, rc, out, err)
    res = both(lambda s: ["member", "add", NEW, "--peer-urls=http://127.0.0.1:%d" % s.peer_port,
                          "--learner"])
    for s, (rc, out, err) in zip((e, k), res):
        assert rc == 0, (s.kind, rc, out, err)
        m = re.match(r"Member\s+([0-9a-f]+) added (as learner )?to cluster\s+[0-9a-f]+\n", out.decode())
        assert m, (s.kind, out)
        s.id = int(m.group(1), 16)
        kv = env_lines(out)
        assert kv["ETCD_NAME"] == NEW and kv["ETCD_INITIAL_CLUSTER_STATE"] == "existing", kv
        assert kv["ETCD_INITIAL_ADVERTISE_PEER_URLS"] == "http://127.0.0.1:%d" % s.peer_port, kv
        # every member with its own peer URL: the originals (as member list
        # shows them) and the new one under the name given
        listed = {(mm.get("name") or NEW) + "=" + u for mm in s.members()
                  for u in mm["peerURLs"]}
        assert set(kv["ETCD_INITIAL_CLUSTER"].split(",")) == listed, (kv, listed)
        assert len(listed) == len(s.names) + 1, listed
        s.settings = kv
    # one learner at a time (etcd 3.4): FailedPrecondition "etcdserver: too
    # many learner members in cluster" on both sides
    both(lambda s: ["member", "add", "x2", "--peer-urls=http://127.0.0.1:%d" % free_port(),
                    "--learner"])
    p = gs.pb()
    for s in (e, k):  # the gRPC status itself
        st = gs.unary(s.port, "/etcdserverpb.Cluster/MemberAdd",
                      p.MemberAddRequest(peerURLs=["http://127.0.0.1:%d" % free_port()],
                                         isLearner=True), p.MemberAddResponse)
        assert st[:2] == ("FAILED_PRECONDITION", "etcdserver: too many learner members in cluster"), \
            (s.kind, st)
    # the new member is listed unstarted (no name, no client URLs) as a learner
    rows = [new_row(s) for s in (e, k)]
    assert rows[0] == rows[1] == "ID, unstarted, , URL, , true", rows
    for s in (e, k):
        start_new_member(s, s.settings)
    for s in (e, k):
        rc, out, err = s.ctl(["put", "mem/after", "v2"])
        assert rc == 0, (s.kind, rc, out, err)

    def caught_up(s):
        rc, out, _ = g.env().ctl(s.bridge_port, ["get", "mem/", "--prefix", "--consistency=s"],
                                 timeout=10)
        return rc == 0 and out == b"mem/after\nv2\nmem/before\nv1\n"
    for s in (e, k):
        wait_until("%s: new member serves mem/ (serializable)" % s.kind, lambda: caught_up(s))
    # both answer a serializable get on the learner the same way
    for s in (e, k):
        s.port, s.cluster_port = s.bridge_port, s.port
    try:
        both(lambda s: ["get", "mem/", "--prefix", "--consistency=s", "-w", "json"])
    finally:
        for s in (e, k):
            s.port = s.cluster_port
    # ketch: the native protocol on the member's own client port says the same
    c = Conn(k.client_port)
    try:
        r = c.call(RANGE, {"key": b"mem/before", "serializable": True})
        assert r["kvs"][0][1] == b"v1", r
    finally:
        c.close()

    def published(s):
        return [m for m in s.members() if m["ID"] == s.id and m.get("name") == NEW]
    for s in (e, k):
        try:
            wait_until("%s: %s published its name" % (s.kind, NEW), lambda: published(s))
        except AssertionError as err:
            raise AssertionError("%s; %s; its log: %s" % (err, s.members(), s.logtext()[-3000:]))
    # the new member's row: started, its name, URLs, learner
    rows = [new_row(s) for s in (e, k)]
    assert rows[0] == rows[1] == "ID, started, %s, URL, URL, true" % NEW, rows


def test_member_promote():
    """member promote of a voter is refused as etcd refuses it; of the
    learner, once it is in sync, prints etcd's line."""
    e, k = sides()
    voter = {s.kind: next(m["ID"] for m in s.members() if m["ID"] != s.id) for s in (e, k)}
    both(lambda s: ["member", "promote", "%x" % voter[s.kind]])
    for s in (e, k):
        def promote():
            rc, out, err = s.ctl(["member", "promote", "%x" % s.id])
            if rc != 0 and (b"in sync with leader" in err or b"unhealthy cluster" in err):
                return None
            return rc, out, err
        rc, out, err = wait_until("%s: promote" % s.kind, promote, timeout=60)
        s.promoted = (rc, norm_lines(out, s), norm_lines(err, s))
    assert e.promoted == k.promoted and e.promoted[0] == 0, (e.promoted, k.promoted)
    assert re.match(r"Member ID promoted in cluster ID$", k.promoted[1]), k.promoted
    for s in (e, k):
        assert [m for m in s.members() if m["ID"] == s.id and not m.get("isLearner")], s.members()
    # promoting it again: it is a voter now
    both(lambda s: ["member", "promote", "%x" % s.id])


def test_member_update():
    """member update sets the peer URLs (the member keeps working: its first
    URL is the one it listens on)."""
    e, k = sides()
    for s in (e, k):  # a second URL that sorts after the first (etcd keeps the order given)
        while True:
            s.peer_port2 = free_port()
            if "%d" % s.peer_port2 > "%d" % s.peer_port:
                break
    urls = lambda s: "http://127.0.0.1:%d,http://127.0.0.1:%d" % (s.peer_port, s.peer_port2)  # noqa
    both(lambda s: ["member", "update", "%x" % s.id, "--peer-urls=" + urls(s)])
    for s in (e, k):
        m = [m for m in s.members() if m["ID"] == s.id]
        assert m and m[0]["peerURLs"] == urls(s).split(","), (s.kind, m)
        rc, out, err = s.ctl(["put", "mem/updated", "v3"])
        assert rc == 0, (s.kind, rc, out, err)
    rows = [new_row(s) for s in (e, k)]
    assert rows[0] == rows[1] == "ID, started, %s, URL,URL, URL, false" % NEW, rows


def test_member_errors_same_as_etcd():
    """Unknown ids, a peer URL in use, invalid URLs: etcd's errors and exit
    codes."""
    e, k = sides()
    used = {s.kind: next(m["peerURLs"][0] for m in s.members() if m["ID"] != s.id)
            for s in (e, k)}
    for args in (["member", "remove", "1234abcd"],
                 ["member", "promote", "1234abcd"],
                 ["member", "update", "1234abcd", "--peer-urls=http://127.0.0.1:1"],
                 ["member", "add", "x", "--peer-urls=not-a-url"]):
        both(lambda s: args)
    both(lambda s: ["member", "add", "x", "--peer-urls=" + used[s.kind]])
    both(lambda s: ["member", "add", "x", "--peer-urls=" + used[s.kind], "--learner"])
    both(lambda s: ["member", "update", "%x" % s.id, "--peer-urls=" + used[s.kind]])


def test_member_remove():
    """member remove prints etcd's line; the removed member stops and says
    it was removed; its id is then unknown."""
    e, k = sides()
    both(lambda s: ["member", "remove", "%x" % s.id])
    for s in (e, k):
        try:
            rc = s.proc.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s: the removed member still runs: %s" % (s.kind, s.logtext()[-2000:]))
        assert "removed" in s.logtext(), (s.kind, rc, s.logtext()[-2000:])
        assert s.id not in [m["ID"] for m in s.members()]
    k_rc, e_rc = k.proc.returncode, e.proc.returncode
    assert (e_rc, k_rc) == (0, 0), ("exit status of the removed member: etcd, ketch", e_rc, k_rc,
                                    k.logtext()[-1000:])
    for s in (e, k):  # etcd's two lines (capnslog: "E | etcdserver: ...")
        for line in ("the member has been permanently removed from the cluster",
                     "the data-dir used by this member must be removed."):
            assert line in s.logtext(), (s.kind, line, s.logtext()[-2000:])
    both(lambda s: ["member", "remove", "%x" % s.id])
    both(lambda s: ["member", "promote", "%x" % s.id])
    for s in (e, k):
        rc, out, err = s.ctl(["put", "mem/after-remove", "v4"])
        assert rc == 0, (s.kind, rc, out, err)
    if k.bridge:
        k.bridge.terminate()
        assert k.bridge.wait(10) == 0


# ---- ketch only: what one etcd member cannot show ----

def leader_and_followers():
    e = g.env()
    e.wait_leader()
    c = Conn(e.members[0].port, timeout=2)
    try:
        lead = c.call(STATUS, {})["leader"]
    finally:
        c.close()
    leader = gs.member_ids(e.grpc_port)[lead]
    return leader, [m for m in e.members if m is not leader]


def test_unhealthy_and_not_enough_started():
    """A voter frozen: removing another voter would leave no quorum of
    started voters (etcd: Unavailable "unhealthy cluster"), adding a voter
    would need one more started member (FailedPrecondition "re-configuration
    failed ..."); a learner may still be added and removed."""
    e = g.env()
    _, k = sides()
    g_ids = {mm.port: i for i, mm in gs.member_ids(e.grpc_port).items()}
    leader, followers = leader_and_followers()
    via = gs.bridge_member(e)
    frozen = next(m for m in followers if m is not via)
    other = next(m for m in followers if m is not frozen)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.5)  # three election timeouts: the leader sees it inactive
        rc, out, err = k.ctl(["member", "remove", "%x" % g_ids[other.port]])
        assert (rc, out, g.norm_text(err)) == (1, b"", "Error: etcdserver: unhealthy cluster"), \
            (rc, out, err)
        rc, out, err = k.ctl(["member", "add", "v", "--peer-urls=http://127.0.0.1:%d" % free_port()])
        assert (rc, out, g.norm_text(err)) == (
            1, b"", "Error: etcdserver: re-configuration failed due to not enough started members"), \
            (rc, out, err)
        rc, out, err = k.ctl(["member", "add", "l", "--learner",
                              "--peer-urls=http://127.0.0.1:%d" % free_port()])
        assert rc == 0 and b" added " in out, (rc, out, err)
        lid = int(re.search(rb"Member\s+([0-9a-f]+)", out).group(1), 16)
        rc, out, err = k.ctl(["member", "remove", "%x" % lid])
        assert rc == 0 and b"removed from cluster" in out, (rc, out, err)
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    assert len(k.members()) == 3
    # thawed, the cluster takes writes again
    wait_until("put after thaw", lambda: k.ctl(["put", "mem/thawed", "v"])[0] == 0)


def test_concurrent_changes():
    """Changes sent at once: one at a time is applied; the others get etcd's
    answer to a configuration change that cannot complete (Unavailable
    "etcdserver: request timed out"), or, once the first learner is in,
    etcd's one-learner limit (FailedPrecondition "etcdserver: too many
    learner members in cluster"), and were not applied."""
    import grpc
    p = gs.pb()
    e = g.env()
    _, k = sides()
    before = len(k.members())
    with grpc.insecure_channel("127.0.0.1:%d" % e.grpc_port) as ch:
        call = ch.unary_unary("/etcdserverpb.Cluster/MemberAdd",
                              request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=p.MemberAddResponse.FromString)
        futs = [call.future(p.MemberAddRequest(peerURLs=["http://127.0.0.1:%d" % free_port()],
                                               isLearner=True), timeout=20) for _ in range(6)]
        added, busy = [], 0
        for f in futs:
            try:
                r = f.result()
                added.append(r.member.ID)
                assert r.member.isLearner and r.header.cluster_id and r.header.member_id \
                    and r.header.raft_term and not r.header.revision, r
                assert r.member.ID in [m.ID for m in r.members], r
            except grpc.RpcError as err:
                assert (err.code(), err.details()) in (
                    (grpc.StatusCode.UNAVAILABLE, "etcdserver: request timed out"),
                    (grpc.StatusCode.FAILED_PRECONDITION,
                     "etcdserver: too many learner members in cluster")), err
                busy += 1
    print("# concurrent learner adds: %d applied, %d refused" % (len(added), busy))
    assert len(added) == 1 and busy == 5, (added, busy)
    assert len(k.members()) == before + len(added)
    rm = p.MemberRemoveRequest
    for i in added:
        st, det, r = gs.unary(e.grpc_port, "/etcdserverpb.Cluster/MemberRemove", rm(ID=i),
                              p.MemberRemoveResponse)
        assert st == "OK" and i not in [m.ID for m in r.members] and r.header.member_id, (st, det)
    assert len(k.members()) == before


def test_python_etcd3_members():
    """python3-etcd3 in a child process: its generated rpc.proto and the one
    grpcio uses here cannot share one protobuf descriptor pool."""
    e = g.env()
    p = subprocess.run([sys.executable, __file__, "--etcd3", str(e.grpc_port)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out[-3000:]
    if out.strip():
        print(out.strip())


def python_etcd3_check(port):
    try:
        import etcd3  # Debian python3-etcd3
    except ImportError:
        print("# python3-etcd3 not installed: skipped")
        return
    cl = etcd3.client(host="127.0.0.1", port=port, timeout=10)
    names = sorted(m.name for m in cl.members)
    assert names == ["n0", "n1", "n2"], names
    url = "http://127.0.0.1:%d" % free_port()
    m = cl.add_member([url])  # a voter, never started: 3 of 4 voters run
    assert m.id and list(m.peer_urls) == [url] and m.name == "" and not list(m.client_urls), m
    assert m.id in [x.id for x in cl.members]
    url2 = "http://127.0.0.1:%d" % free_port()
    cl.update_member(m.id, [url2])
    assert [list(x.peer_urls) for x in cl.members if x.id == m.id] == [[url2]]
    try:
        cl.add_member([url2])
        raise AssertionError("a peer URL in use was accepted")
    except etcd3.exceptions.Etcd3Exception as err:
        assert "Peer URLs already exists" in str(err) or type(err).__name__ == \
            "PreconditionFailedError", repr(err)
    cl.remove_member(m.id)
    assert m.id not in [x.id for x in cl.members]
    try:
        cl.remove_member(m.id)
        raise AssertionError("removing a removed member succeeded")
    except Exception as err:  # noqa: NotFound has no etcd3 exception class
        assert "member not found" in str(err) or "NOT_FOUND" in str(err), repr(err)
    cl.close()


def test_shutdown_clean():
    """ketch-grpc still serves, and stops cleanly (sanitizer-clean log)."""
    if g.ENV is not None:
        g.ENV.bridge_alive()
    g.teardown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--etcd3"]:
        python_etcd3_check(int(sys.argv[2]))
        sys.exit(0)
    import atexit
    atexit.register(g.teardown)
    run_tests([test_member_add_learner_then_join, test_member_promote, test_member_update,
               test_member_errors_same_as_etcd, test_member_remove,
               test_unhealthy_and_not_enough_started, test_concurrent_changes,
               test_python_etcd3_members, test_shutdown_clean])
