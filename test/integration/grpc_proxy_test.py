"""ketch-grpc's etcd grpc-proxy features (issue 20), with real etcd clients.

--namespace: one ketch member; a plain ketch-grpc (the whole key space) and two
namespaced ones (t1/ and t2/, two tenants on one cluster). etcdctl through the
t1/ bridge can read, write, watch, lock, elect, see lease keys and grant role
permissions only inside t1/ (from-key and range ends clamped); the tenants do
not see each other. The KV / watch sequence is compared with etcd 3.4's own
`etcd grpc-proxy start --namespace=t1/` in front of a real etcd, and the
differences the README names (etcd 3.4's proxy namespaces lock and election
names as ketch-grpc does, but not role permissions, and serves Snapshot) are
shown with etcd's proxy itself.

Registration: two bridges with --resolver-prefix are listed by MemberList;
one killed leaves the list after its lease's TTL; compared with etcd's own
grpc-proxy --resolver-prefix (the same value JSON and member list line).

--endpoints-auto-sync-interval: a bridge given one member learns the members
added later and serves once the first is gone.

--coalesce-lease-keepalives: 200 clients keeping one lease alive cost the
member a handful of renewals (the bridge's own counters of what it received
and sent), answers as etcd's; the lease expires once they all stop.

Watch coalescing (always on): 1,000 Watch streams (grpc.aio, 8 connections)
on one key through one bridge cost the member 2 watches (its own
etcd_debugging_mvcc_watcher_total), every client gets every event once, in
order, from its own start (now, history, the latest revision, the next),
with its own filters and prev_kv, and its progress request is answered
without claiming an event it was not sent; watches created while the key
keeps changing join the shared watch mid-stream without a duplicate or a
gap; a client that stops reading loses its own watch while three readers of
the same shared watch go on. etcd's proxy metrics are checked on /metrics.
Beside etcd itself: a watch from a revision not reached yet gets progress
at the cluster's revision, never a later one; a watch from now that joins a
shared one is created at the newest revision the bridge has seen; watches with
progress_notify get one notification per tick of their stream's ticker
(--experimental-watch-progress-notify-interval 1s on both; none after a tick
with events, and none from the progress other streams ask for); a cancel
sent right behind its create is answered created, then canceled.

The range cache (--cache-size, on by default), with bridges A (cache,
/metrics), B and one with --cache-size 0: serializable reads served by A
cost the member no range (its own etcd_mvcc_range_total) and equal the
member's answers; writes through B and native ones (put, delete) are seen
through A by any read starting --cache-max-staleness after they were
acknowledged, a put through A by the next read at once; A stopped (SIGSTOP)
while 16 MB are written shows the change once it runs again; linearizable
reads never touch the cache; a compacted revision answers etcd's compacted
error (compacted natively: within the bound; through A: at once); a member
stopped serves nothing from the cache after the bound; --cache-size 0 sends
every read to the member; etcd 3.4's own grpc-proxy keeps serving a value
written straight to etcd, and the three etcd cache metrics.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_test as g  # noqa: E402
import grpc_stream_test as gs  # noqa: E402
from harness import BIN, Member, bridge_loops, free_port, run_tests  # noqa: E402


PROGRESS_S = 1.0  # etcd's and one bridge's --experimental-watch-progress-notify-interval


class Env:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="ketch-proxy-it-")
        self.procs, self.logs = [], []
        self.member = Member(extra=g.TIMING)
        self.eps = self.member.endpoint
        self.root = self.bridge([])
        self.t1 = self.bridge(["--namespace", "t1/"])
        self.t2 = self.bridge(["--namespace", "t2/"])
        # etcd 3.4 and its own grpc-proxy with --namespace, for comparison
        self.etcd_port, peer_port = free_port(), free_port()
        peer = "http://127.0.0.1:%d" % peer_port
        client = "http://127.0.0.1:%d" % self.etcd_port
        self.etcd = self.spawn("etcd", [g.ETCD, "--name", "e0",
                                        "--data-dir", os.path.join(self.tmp, "etcd"),
                                        "--listen-client-urls", client,
                                        "--advertise-client-urls", client,
                                        "--listen-peer-urls", peer,
                                        "--initial-advertise-peer-urls", peer,
                                        "--initial-cluster", "e0=" + peer,
                                        "--experimental-watch-progress-notify-interval",
                                        "%gs" % PROGRESS_S,
                                        "--log-outputs", "stderr"])
        g.wait_port(self.etcd_port, self.etcd, "etcd")
        self.eproxy_port = free_port()
        self.eproxy = self.spawn("etcd-proxy", [
            g.ETCD, "grpc-proxy", "start", "--endpoints", "127.0.0.1:%d" % self.etcd_port,
            "--listen-addr", "127.0.0.1:%d" % self.eproxy_port, "--namespace", "t1/"])
        g.wait_port(self.eproxy_port, self.eproxy, "etcd grpc-proxy")
        deadline = time.time() + 15
        while time.time() < deadline and self.ctl(self.eproxy_port, ["get", "x"])[0] != 0:
            time.sleep(0.1)

    def spawn(self, name, args):
        log = open(os.path.join(self.tmp, "%s-%d.log" % (name, len(self.procs))), "wb")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        p.log_name = log.name
        self.procs.append(p)
        self.logs.append(log)
        return p

    def bridge(self, flags, eps=None):
        """A ketch-grpc with flags; 2 event loops unless flags say (so the
        proxy features run across loops: registration, auto-sync, cache)."""
        port = free_port()
        loops = [] if "--loops" in flags else bridge_loops(2)
        p = self.spawn("ketch-grpc", [os.path.join(BIN, "ketch-grpc"), "--listen-addr",
                                      "127.0.0.1:%d" % port, "--endpoints", eps or self.eps]
                       + flags + loops)
        g.wait_port(port, p, "ketch-grpc")
        p.port = port
        return p

    def ctl(self, port, args, stdin=None, timeout=20):
        return g.Env.ctl(self, port, args, stdin, timeout)

    def close(self):
        bad = []
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for p, log in zip(self.procs, self.logs):
            log.close()
            with open(p.log_name, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if "Sanitizer" in text or "runtime error" in text:
                bad.append(text[-3000:])
        self.member.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)
        assert not bad, "sanitizer report in a log:\n" + "\n".join(bad)


ENV = None


def env():
    global ENV
    if ENV is None:
        ENV = Env()
    return ENV


def ctl(p, *args, ok=True, stdin=None):
    port = p if isinstance(p, int) else p.port
    rc, out, err = env().ctl(port, list(args), stdin)
    if ok:
        assert rc == 0, "etcdctl %s: rc %d %r" % (" ".join(args), rc, err)
    return out.decode()


def keys(p, *args):
    """The keys etcdctl get --keys-only prints (blank lines dropped)."""
    return [k for k in ctl(p, "get", "--keys-only", *args).split("\n") if k]


# ---- --namespace ----

def test_namespace_kv():
    e = env()
    ctl(e.root, "put", "a", "root")
    ctl(e.root, "put", "z", "root")
    ctl(e.root, "put", "t0", "root")
    ctl(e.root, "put", "t2/a", "other tenant")
    ctl(e.t1, "put", "a", "1")
    ctl(e.t1, "put", "b", "2")
    ctl(e.t1, "put", "c", "3")
    assert keys(e.root, "t1/", "--prefix") == ["t1/a", "t1/b", "t1/c"]
    assert ctl(e.t1, "get", "a", "--print-value-only") == "1\n"
    assert ctl(e.t2, "get", "a", "--print-value-only") == "other tenant\n"
    # prefix "" and from-key "" are the whole namespace, nothing beyond it
    assert keys(e.t1, "", "--prefix") == ["a", "b", "c"]
    assert keys(e.t1, "--from-key", "") == ["a", "b", "c"]
    assert keys(e.t1, "--from-key", "b") == ["b", "c"]
    assert keys(e.t2, "--from-key", "") == ["a"]
    # an explicit range end stays inside too ("\xff" sorts after every key)
    assert keys(e.t1, "a", "\xff") == ["a", "b", "c"]
    assert keys(e.t1, "b", "c") == ["b"]
    out = json.loads(ctl(e.t1, "get", "", "--prefix", "--keys-only", "-w", "json"))
    assert out["count"] == 3, out
    # put --prev-kv and del --prev-kv come back without the prefix
    assert "a\n1\n" in ctl(e.t1, "put", "a", "1b", "--prev-kv")
    out = ctl(e.t1, "del", "c", "--prev-kv")
    assert out == "1\nc\n3\n", out
    # a delete of everything (from-key "") deletes only the tenant's keys
    ctl(e.t2, "put", "b", "x")
    assert ctl(e.t2, "del", "--from-key", "").strip() == "2"
    assert keys(e.root, "", "--prefix") == ["a", "t0", "t1/a", "t1/b", "z"]
    ctl(e.t2, "put", "a", "other tenant")
    # an empty key is refused as without a namespace
    rc, _, err = e.ctl(e.t1.port, ["get", ""])
    assert rc != 0 and b"key is not provided" in err, err


def test_namespace_txn():
    e = env()
    ctl(e.t1, "put", "tx", "1")
    out = ctl(e.t1, "txn", stdin=b'value("tx") = "1"\n\nput tx 2\nget tx\nget --prefix t\n\n'
              b'put failed 1\n\n')
    assert out == "SUCCESS\n\nOK\n\ntx\n2\n\ntx\n2\n", out
    assert ctl(e.root, "get", "t1/tx", "--print-value-only") == "2\n"
    # a compare on a key outside: "../a" is just a key name inside t1/
    out = ctl(e.t1, "txn", stdin=b'value("a") = "root"\n\nput won 1\n\nput lost 1\n\n')
    assert out.startswith("FAILURE"), out
    assert keys(e.root, "t1/lost") == ["t1/lost"] and keys(e.root, "lost") == []
    # nested txns, compares with range ends, prev_kv in ops (grpcio)
    p = gs.pb()
    inner = p.TxnRequest(
        compare=[p.Compare(key=b"a", range_end=b"\0", target=p.Compare.VERSION,
                           result=p.Compare.GREATER, version=0)],
        success=[p.RequestOp(request_put=p.PutRequest(key=b"nested", value=b"n", prev_kv=True)),
                 p.RequestOp(request_range=p.RangeRequest(key=b"\0", range_end=b"\0")),
                 p.RequestOp(request_delete_range=p.DeleteRangeRequest(
                     key=b"won", range_end=b"wz", prev_kv=True))])
    outer = p.TxnRequest(success=[p.RequestOp(request_txn=inner)])
    st, det, r = gs.unary(e.t1.port, "/etcdserverpb.KV/Txn", outer, p.TxnResponse)
    assert st == "OK", det
    ri = r.responses[0].response_txn
    assert ri.succeeded
    got = [kv.key for kv in ri.responses[1].response_range.kvs]
    assert got == [b"a", b"b", b"lost", b"nested", b"tx"], got  # a txn reads its own put
    assert [kv.key for kv in ri.responses[2].response_delete_range.prev_kvs] == []
    assert keys(e.root, "t1/nested") == ["t1/nested"]
    ctl(e.t1, "del", "nested")
    ctl(e.t1, "del", "lost")
    ctl(e.t1, "del", "tx")


def watch_lines(p, args, actions, expect_lines, timeout=10):
    """etcdctl watch ARGS in the background while `actions` run; its output
    once it has printed expect_lines lines (or at the timeout)."""
    port = p if isinstance(p, int) else p.port
    w = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % port, "watch"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, ETCDCTL_API="3"))
    try:
        time.sleep(0.7)  # the watch is created
        actions()
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(w.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.time() + timeout
        while buf.count(b"\n") < expect_lines and time.time() < deadline:
            if sel.select(0.2):
                chunk = os.read(w.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
        time.sleep(0.3)  # nothing more should come
        if sel.select(0.1):
            buf += os.read(w.stdout.fileno(), 65536)
        return buf.decode()
    finally:
        w.kill()
        w.wait()


def test_namespace_watch():
    e = env()

    def act():
        ctl(e.root, "put", "w1", "root")
        ctl(e.t2, "put", "w1", "t2")
        ctl(e.root, "put", "zzz", "root")
        ctl(e.t1, "put", "w1", "a")
        ctl(e.t1, "put", "w1", "b")
        ctl(e.t1, "del", "w1")
    out = watch_lines(e.t1, ["--prefix", "", "--prev-kv"], act, 10)
    lines = out.split("\n")
    assert lines[:3] == ["PUT", "w1", "a"], out
    assert lines[3:8] == ["PUT", "w1", "a", "w1", "b"], out
    assert lines[8:11] == ["DELETE", "w1", "b"], out
    assert "root" not in out and "t2" not in out and "zzz" not in out, out
    # a range end: inside the namespace
    out = watch_lines(e.t1, ["m", "\xff"], lambda: (ctl(e.root, "put", "zz", "r"),
                                                  ctl(e.t1, "put", "mm", "1")), 3)
    assert out.split("\n")[:3] == ["PUT", "mm", "1"] and "zz" not in out, out
    # a from-key watch (range end "\0", grpcio): clamped to the namespace
    p = gs.pb()
    ws = gs.watch_stream(e.t1.port)
    try:
        ws.send(gs.create(key=b"m", range_end=b"\0", prev_kv=True))
        assert ws.recv().created
        ctl(e.root, "put", "zz", "r2")
        ctl(e.t2, "put", "zz", "r3")
        ctl(e.t1, "put", "mm", "2")
        r = ws.recv()
        assert [(ev.kv.key, ev.kv.value, ev.prev_kv.key) for ev in r.events] == \
            [(b"mm", b"2", b"mm")], r
    finally:
        ws.close()
    del p
    # history from a revision: only the tenant's events
    rev = json.loads(ctl(e.root, "get", "x", "-w", "json"))["header"]["revision"]
    ctl(e.root, "put", "h", "r")
    ctl(e.t1, "put", "h", "1")
    out = watch_lines(e.t1, ["--prefix", "h", "--rev", str(rev + 1)], lambda: None, 3)
    assert out.split("\n")[:4] == ["PUT", "h", "1", ""], out


def test_namespace_lock_and_elect():
    e = env()
    # t1 and t2 each hold a lock named "L" at the same time: they are two locks
    p1 = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % e.t1.port, "lock", "L"],
                          stdout=subprocess.PIPE, env=dict(os.environ, ETCDCTL_API="3"))
    p2 = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % e.t2.port, "lock", "L"],
                          stdout=subprocess.PIPE, env=dict(os.environ, ETCDCTL_API="3"))
    try:
        k1 = p1.stdout.readline().decode().strip()
        k2 = p2.stdout.readline().decode().strip()
        assert re.fullmatch(r"L/[0-9a-f]+", k1) and re.fullmatch(r"L/[0-9a-f]+", k2), (k1, k2)
        assert keys(e.root, "t1/L/", "--prefix") == ["t1/" + k1]
        assert keys(e.root, "t2/L/", "--prefix") == ["t2/" + k2]
        assert keys(e.root, "L/", "--prefix") == []
    finally:
        for p in (p1, p2):
            p.send_signal(signal.SIGINT)
            p.wait(10)
    # elections: each tenant has its own leader of "E"
    c1 = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % e.t1.port, "elect", "E",
                           "v1"], stdout=subprocess.PIPE, env=dict(os.environ, ETCDCTL_API="3"))
    c2 = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % e.t2.port, "elect", "E",
                           "v2"], stdout=subprocess.PIPE, env=dict(os.environ, ETCDCTL_API="3"))
    try:
        l1 = c1.stdout.readline().decode().strip()
        l2 = c2.stdout.readline().decode().strip()
        assert l1.startswith("E/") and l2.startswith("E/"), (l1, l2)
        assert c1.stdout.readline().decode().strip() == "v1"
        assert c2.stdout.readline().decode().strip() == "v2"
        # Leader through the gRPC API: the key without the prefix
        gs.pb()
        import v3election_pb2 as el
        st, det, r = gs.unary(e.t1.port, "/v3electionpb.Election/Leader",
                              el.LeaderRequest(name=b"E"), el.LeaderResponse)
        assert st == "OK" and r.kv.key.decode() == l1 and r.kv.value == b"v1", (st, det, r)
        assert len(keys(e.root, "t1/E/", "--prefix")) == 1
        assert len(keys(e.root, "t2/E/", "--prefix")) == 1
        assert keys(e.root, "E/", "--prefix") == []
    finally:
        for c in (c1, c2):
            c.send_signal(signal.SIGINT)
            c.wait(10)


def test_namespace_lease_keys():
    e = env()
    lid = re.search(r"lease ([0-9a-f]+) granted", ctl(e.root, "lease", "grant", "100")).group(1)
    ctl(e.root, "put", "t1/lk", "v", "--lease=" + lid)
    ctl(e.root, "put", "t2/lk", "v", "--lease=" + lid)
    ctl(e.root, "put", "lk-root", "v", "--lease=" + lid)
    out = ctl(e.t1, "lease", "timetolive", lid, "--keys")
    assert "attached keys([lk])" in out, out
    ctl(e.root, "lease", "revoke", lid)


def test_namespace_role_permissions():
    e = env()
    ctl(e.t1, "role", "add", "r1")
    ctl(e.t1, "role", "grant-permission", "r1", "read", "a", "c")
    ctl(e.t1, "role", "grant-permission", "r1", "write", "p", "--prefix")
    ctl(e.t1, "role", "grant-permission", "r1", "readwrite", "f", "--from-key")
    root = ctl(e.root, "role", "get", "r1")
    assert "[t1/a, t1/c)" in root and "[t1/p, t1/q)" in root and "[t1/f, t10)" in root, root
    mine = ctl(e.t1, "role", "get", "r1")
    assert "[a, c)" in mine and "[p, q)" in mine and "[f, <open ended>" in mine, mine
    # a permission granted outside the namespace is not shown to the tenant
    ctl(e.root, "role", "grant-permission", "r1", "read", "outside")
    assert "outside" not in ctl(e.t1, "role", "get", "r1")
    ctl(e.t1, "role", "revoke-permission", "r1", "a", "c")
    assert "t1/a" not in ctl(e.root, "role", "get", "r1")
    ctl(e.root, "role", "delete", "r1")


def test_namespace_snapshot_refused():
    e = env()
    path = os.path.join(e.tmp, "snap.db")
    rc, out, err = e.ctl(e.t1.port, ["snapshot", "save", path])
    assert rc != 0 and b"refused under --namespace" in err, (rc, out, err)


def test_namespace_same_as_etcd_proxy():
    """The KV and watch sequence through etcd's grpc-proxy --namespace=t1/ and
    ketch-grpc --namespace=t1/ print the same; the root view shows the same
    prefixed keys."""
    e = env()
    seq = [["put", "s1", "1"], ["put", "s2", "2", "--prev-kv"], ["put", "s2", "3", "--prev-kv"],
           ["get", "s", "--prefix"], ["get", "--from-key", "s2"], ["get", "s1", "s3"],
           ["del", "s1", "--prev-kv"], ["get", "s", "--prefix", "--keys-only"],
           ["del", "s", "--prefix"],
           ["txn"], ["get", "", "--prefix", "--keys-only"], ["get", "--from-key", "", "--keys-only"],
           ["del", "--from-key", "u"]]
    stdin = {"txn": b'value("s2") = "3"\n\nput s3 x\nget s3\n\n\n'}
    # the same keys on both clusters: ketch's, as the tests before left them
    ctl(e.etcd_port, "del", "", "--prefix")
    for kv in json.loads(ctl(e.root, "get", "", "--prefix", "-w", "json")).get("kvs", []):
        import base64
        ctl(e.etcd_port, "put", base64.b64decode(kv["key"]).decode(),
            base64.b64decode(kv["value"]).decode())
    diffs = []
    for args in seq:
        want = e.ctl(e.eproxy_port, args, stdin.get(args[0]))
        got = e.ctl(e.t1.port, args, stdin.get(args[0]))
        w = (want[0], g.norm_text(want[1]), g.norm_text(want[2]))
        k = (got[0], g.norm_text(got[1]), g.norm_text(got[2]))
        if w != k:
            diffs.append("etcdctl %s:\n  etcd proxy: %r\n  ketch:      %r" % (" ".join(args), w, k))
    assert not diffs, "\n".join(diffs)
    assert keys(e.etcd_port, "", "--prefix") == keys(e.root, "", "--prefix")


def test_differences_with_etcd_proxy():
    """etcd 3.4.23's proxy namespaces lock names as ketch-grpc does (both keys
    land under t1/), but not role permissions (they land outside t1/ there,
    inside with ketch-grpc), and it serves Snapshot (the whole cluster) where
    ketch-grpc refuses it."""
    e = env()
    for port, root in ((e.eproxy_port, e.etcd_port), (e.t1.port, e.root.port)):
        p = subprocess.Popen([g.ETCDCTL, "--endpoints", "127.0.0.1:%d" % port, "lock", "EL"],
                             stdout=subprocess.PIPE, env=dict(os.environ, ETCDCTL_API="3"))
        try:
            k = p.stdout.readline().decode().strip()
            assert k.startswith("EL/"), k
            assert keys(root, "t1/EL/", "--prefix") == ["t1/" + k]
            assert keys(root, "EL/", "--prefix") == []
        finally:
            p.send_signal(signal.SIGINT)
            p.wait(10)
        ctl(port, "role", "add", "rd")
        ctl(port, "role", "grant-permission", "rd", "read", "a", "c")
    assert "[a, c)" in ctl(e.etcd_port, "role", "get", "rd")  # etcd: outside the namespace
    assert "[t1/a, t1/c)" in ctl(e.root, "role", "get", "rd")  # ketch: inside
    rc, _, _ = e.ctl(e.eproxy_port, ["snapshot", "save", os.path.join(e.tmp, "e.db")])
    assert rc == 0
    ctl(e.etcd_port, "role", "delete", "rd")
    ctl(e.root, "role", "delete", "rd")


# ---- registration: --resolver-prefix, --resolver-ttl, --advertise-client-url ----

def member_urls(port):
    out = json.loads(ctl(port, "member", "list", "-w", "json"))
    return sorted(u for m in out.get("members", []) for u in m.get("clientURLs", []))


def wait_for(what, fn, timeout=10):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def test_registration_member_list():
    e = env()
    ttl = 2
    ps = []
    for _ in range(2):  # the address registered: --listen-addr's
        ps.append(e.bridge(["--resolver-prefix", "proxies", "--resolver-ttl", str(ttl)]))
    addrs = sorted("127.0.0.1:%d" % p.port for p in ps)
    wait_for("two registrations", lambda: keys(e.root, "proxies/", "--prefix") ==
             ["proxies/" + a for a in addrs])
    # etcd's naming.Update value, as etcd's grpc-proxy writes it
    v = json.loads(ctl(e.root, "get", "proxies/" + addrs[0], "--print-value-only"))
    assert v["Op"] == 0 and v["Addr"] == addrs[0] and "Name" in json.loads(v["Metadata"]), v
    lease = json.loads(ctl(e.root, "get", "proxies/" + addrs[0], "-w", "json"))["kvs"][0]["lease"]
    assert lease > 0
    # MemberList through either proxy lists both; through a plain bridge, the cluster
    assert member_urls(ps[0].port) == addrs and member_urls(ps[1].port) == addrs
    assert member_urls(e.root.port) == ["http://" + e.eps]
    out = ctl(ps[0], "member", "list")
    assert re.fullmatch(r"(0, started, [^,]+, , 127\.0\.0\.1:\d+, false\n){2}", out), out
    # the same line as etcd's own grpc-proxy registered under a prefix
    eport = free_port()
    ep = e.spawn("etcd-proxy", [g.ETCD, "grpc-proxy", "start", "--endpoints",
                                "127.0.0.1:%d" % e.etcd_port, "--listen-addr",
                                "127.0.0.1:%d" % eport, "--resolver-prefix", "eproxies",
                                "--resolver-ttl", "5", "--advertise-client-url",
                                "127.0.0.1:%d" % eport])
    try:
        g.wait_port(eport, ep, "etcd grpc-proxy")
        ev = wait_for("etcd's registration", lambda: ctl(e.etcd_port, "get", "eproxies/",
                                                         "--prefix", "--print-value-only"))
        assert sorted(json.loads(ev.strip())) == sorted(v), (ev, v)
        eout = wait_for("etcd proxy member list", lambda: ctl(eport, "member", "list") if
                        "%d" % eport in ctl(eport, "member", "list") else None)
        norm = lambda t: re.sub(r"127\.0\.0\.1:\d+", "ADDR", t)  # noqa: E731
        assert norm(eout) == norm(out.split("\n")[0] + "\n"), (eout, out)
    finally:
        ep.terminate()
        ep.wait(10)
    # one proxy killed: gone from MemberList once its lease's TTL passed
    ps[1].kill()
    ps[1].wait()
    t0 = time.time()
    live = "127.0.0.1:%d" % ps[0].port
    wait_for("the killed proxy to leave", lambda: member_urls(ps[0].port) == [live],
             timeout=ttl + 5)
    assert time.time() - t0 > ttl / 2, "gone before its TTL: not the lease's expiry"
    # the lease revoked under it: the proxy registers again
    lease = json.loads(ctl(e.root, "get", "proxies/" + live, "-w", "json"))["kvs"][0]["lease"]
    ctl(e.root, "lease", "revoke", "%x" % lease)
    wait_for("registration again", lambda: keys(e.root, "proxies/", "--prefix") ==
             ["proxies/" + live], timeout=ttl + 5)
    # a clean stop deregisters at once
    ps[0].terminate()
    assert ps[0].wait(10) == 0
    assert keys(e.root, "proxies/", "--prefix") == []


def test_advertise_without_prefix():
    """--advertise-client-url alone: MemberList answers the bridge itself, as
    etcd's grpc-proxy does; nothing is registered."""
    e = env()
    p = e.bridge(["--advertise-client-url", "10.1.2.3:2379"])
    assert member_urls(p.port) == ["10.1.2.3:2379"]
    p.terminate()
    p.wait(10)


# ---- --endpoints-auto-sync-interval ----

def test_endpoints_auto_sync():
    """A bridge given only the first member learns the members added later
    from the member list: once they are synced, it serves with the first
    member gone. A bridge without the flag, given the same endpoint, cannot."""
    e = env()
    first = Member(name="a1", extra=g.TIMING)
    members = [first]
    try:
        synced = e.bridge(["--endpoints-auto-sync-interval", "300ms"], eps=first.endpoint)
        plain = e.bridge([], eps=first.endpoint)
        for name in ("a2", "a3"):
            peer, client = free_port(), free_port()
            out = ctl(synced, "member", "add", name, "--peer-urls=http://127.0.0.1:%d" % peer)
            ic = re.search(r'ETCD_INITIAL_CLUSTER="([^"]+)"', out).group(1)
            members.append(Member(name=name, port=client, peer_port=peer,
                                  extra=g.TIMING + ["--initial-cluster", ic,
                                                    "--initial-cluster-state", "existing"]))
            wait_for(name + " started", lambda: name in [
                m.get("name") for m in json.loads(ctl(synced, "member", "list",
                                                      "-w", "json"))["members"]])
        want = sorted("http://" + m.endpoint for m in members)
        wait_for("3 members listed", lambda: sorted(
            u for m in json.loads(ctl(synced, "member", "list", "-w", "json"))["members"]
            for u in m.get("clientURLs", [])) == want)
        log = synced.log_name

        def synced_all():
            with open(log, "rb") as f:
                lines = [ln for ln in f.read().decode().split("\n") if "auto-sync: members now" in ln]
            return lines and sorted(lines[-1].split("members now ")[1].split(",")) == want
        wait_for("the bridge's sync", synced_all)
        first.kill9()
        wait_for("a put through the synced bridge with the first member gone",
                 lambda: e.ctl(synced.port, ["--command-timeout=2s", "put", "sync", "1"])[0] == 0,
                 timeout=20)
        assert ctl(synced, "get", "sync", "--print-value-only") == "1\n"
        rc, _, err = e.ctl(plain.port, ["--command-timeout=2s", "put", "sync", "2"])
        assert rc != 0, "the bridge without auto-sync reached the new members?"
        for p in (synced, plain):
            p.terminate()
            assert p.wait(10) == 0
    finally:
        for m in members:
            m.cleanup()


# ---- lease keep-alive coalescing (--coalesce-lease-keepalives) ----

def metric(port, name):
    import urllib.request
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    m = re.search(r"^%s (\d+)$" % name, text, re.M)
    return int(m.group(1))


def keep_alive_clients(port, lease, n_streams, rounds, period_s):
    """n_streams LeaseKeepAlive streams (over 8 channels) each sending one
    keep-alive of `lease` per period; every answer's (id, ttl)."""
    import grpc
    import queue
    p = gs.pb()
    chans = [grpc.insecure_channel("127.0.0.1:%d" % port) for _ in range(8)]
    streams = []
    for i in range(n_streams):
        q = queue.Queue()
        call = chans[i % 8].stream_stream("/etcdserverpb.Lease/LeaseKeepAlive",
                                          request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=p.LeaseKeepAliveResponse.FromString)
        streams.append((q, call(iter(q.get, None), timeout=60)))
    answers = []
    try:
        for _ in range(rounds):
            t0 = time.time()
            for q, _ in streams:
                q.put(p.LeaseKeepAliveRequest(ID=lease))
            for _, it in streams:
                r = next(it)
                answers.append((r.ID, r.TTL))
            time.sleep(max(0, period_s - (time.time() - t0)))
    finally:
        for q, it in streams:
            q.put(None)
        for c in chans:
            c.close()
    return answers


def test_lease_keepalive_coalescing():
    e = env()
    mport = free_port()
    co = e.bridge(["--coalesce-lease-keepalives", "--metrics-addr", "127.0.0.1:%d" % mport])
    ttl = 3
    lid = re.search(r"lease ([0-9a-f]+) granted", ctl(e.root, "lease", "grant", str(ttl))).group(1)
    lease = int(lid, 16)
    ctl(e.root, "put", "ka", "v", "--lease=" + lid)
    # 200 clients keep the lease alive through the bridge for 4 periods of TTL/3
    answers = keep_alive_clients(co.port, lease, 200, 4, ttl / 3.0)
    assert len(answers) == 800 and set(answers) == {(lease, ttl)}, set(answers)
    got = metric(mport, "ketch_grpc_lease_keepalives_received_total")
    sent = metric(mport, "ketch_grpc_lease_keepalives_sent_total")
    assert got == 800, got
    assert 1 <= sent <= 6, "%d renewals sent to the member for 800 keep-alives" % sent
    print("grpc_proxy_test: 800 keep-alives from 200 clients, %d renewals sent" % sent, flush=True)
    # nobody keeps it alive any more: it expires (no renewal of its own)
    t0 = time.time()
    wait_for("the lease to expire", lambda: "TTL(-1s)" in ctl(e.root, "lease", "timetolive", lid)
             or "expired" in ctl(e.root, "lease", "timetolive", lid), timeout=ttl + 5)
    assert time.time() - t0 <= ttl + 5
    assert keys(e.root, "ka") == []
    # a keep-alive of the gone lease: TTL 0, as etcd
    assert keep_alive_clients(co.port, lease, 2, 1, 0) == [(lease, 0), (lease, 0)]
    # a lease revoked through the bridge is not answered from what was cached
    lid2 = re.search(r"lease ([0-9a-f]+) granted", ctl(e.root, "lease", "grant", "30")).group(1)
    assert keep_alive_clients(co.port, int(lid2, 16), 1, 1, 0) == [(int(lid2, 16), 30)]
    ctl(co, "lease", "revoke", lid2)
    assert keep_alive_clients(co.port, int(lid2, 16), 1, 1, 0) == [(int(lid2, 16), 0)]
    co.terminate()
    assert co.wait(10) == 0
    # without the flag: one renewal per keep-alive
    mport2 = free_port()
    plain = e.bridge(["--metrics-addr", "127.0.0.1:%d" % mport2])
    lid3 = re.search(r"lease ([0-9a-f]+) granted", ctl(e.root, "lease", "grant", "30")).group(1)
    keep_alive_clients(plain.port, int(lid3, 16), 20, 2, 0)
    assert metric(mport2, "ketch_grpc_lease_keepalives_sent_total") == 40
    plain.terminate()
    assert plain.wait(10) == 0
    ctl(e.root, "lease", "revoke", lid3)


# ---- watch coalescing (always on) ----

def member_watchers():
    """The member's own count of the watches it serves."""
    import urllib.request
    text = urllib.request.urlopen("http://%s/metrics" % env().member.endpoint,
                                  timeout=5).read().decode()
    return int(re.search(r"^etcd_debugging_mvcc_watcher_total (\d+)$", text, re.M).group(1))


def co_bridge():
    """One bridge for the coalescing cases (a 1 MiB stream queue for the slow
    client), with /metrics. One event loop: watches share an upstream watch
    only within their loop (bridge.h), and these cases count the member's
    watchers for clients on several connections (grpc_loops_test has the
    per-loop case)."""
    e = env()
    if getattr(e, "co", None) is None:
        e.co_mport = free_port()
        e.co = e.bridge(["--metrics-addr", "127.0.0.1:%d" % e.co_mport,
                         "--max-stream-queue-bytes", "1048576", "--loops", "1"])
    return e.co


def kv_op(port, key, value=None):
    """A put (value) or delete through the plain bridge; its revision."""
    p = gs.pb()
    if value is None:
        st, det, r = gs.unary(port, "/etcdserverpb.KV/DeleteRange",
                              p.DeleteRangeRequest(key=key), p.DeleteRangeResponse)
    else:
        st, det, r = gs.unary(port, "/etcdserverpb.KV/Put", p.PutRequest(key=key, value=value),
                              p.PutResponse)
    assert st == "OK", det
    return r.header.revision


def aio_loop_close(loop):
    """Lets grpc.aio's own tasks of cancelled calls finish, then closes."""
    import asyncio
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=5))
    finally:
        loop.close()


N_WATCH_STREAMS = 1000


def test_watch_coalescing_1000_streams():
    """1,000 Watch streams (grpc.aio: 8 connections, one thread) on one key
    through one bridge: the member serves a handful of watches; every client
    gets every event of its key exactly once, in order, from its own start
    (some in history, some now), with its own filters and prev_kv; progress
    requests are answered without claiming events not yet sent."""
    import asyncio
    import grpc
    e = env()
    br = co_bridge()
    p = gs.pb()
    key = b"co/k"
    ops = []  # (revision, type, value, prev value)
    prev = None
    for v in (b"h1", b"h2", b"h3"):
        ops.append((kv_op(e.root.port, key, v), 0, v, prev))
        prev = v
    base = member_watchers()
    # who starts where: now (0), in old history, at the latest put, at the next revision
    starts = [0, ops[0][0], ops[2][0], ops[2][0] + 1]
    clients = []
    for i in range(N_WATCH_STREAMS):
        clients.append({"start": starts[i % 4] if i % 5 else 0, "prev_kv": i % 10 == 3,
                        "nodelete": i % 10 == 7, "events": [], "created": None})

    def expected(c):
        out = []
        for rev, typ, v, pv in ops:
            if c["start"] and rev < c["start"]:
                continue
            if not c["start"] and rev <= c["created"]:
                continue
            if typ == 1 and c["nodelete"]:
                continue
            out.append((rev, typ, v, pv if c["prev_kv"] else None))
        return out

    async def main():
        chans = [grpc.aio.insecure_channel("127.0.0.1:%d" % br.port,
                                           options=[("grpc.use_local_subchannel_pool", 1)])
                 for _ in range(8)]
        calls = []
        for i, c in enumerate(clients):
            call = chans[i % 8].stream_stream(
                "/etcdserverpb.Watch/Watch", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=p.WatchResponse.FromString)()
            filters = [p.WatchCreateRequest.NODELETE] if c["nodelete"] else []
            await call.write(p.WatchRequest(create_request=p.WatchCreateRequest(
                key=key, start_revision=c["start"], prev_kv=c["prev_kv"], filters=filters)))
            calls.append(call)

        async def created(i):
            r = await asyncio.wait_for(calls[i].read(), 20)
            assert r.created and not r.canceled and r.watch_id == 0, r
            clients[i]["created"] = r.header.revision

        await asyncio.gather(*[created(i) for i in range(len(calls))])
        return chans, calls

    async def rest(chans, calls, last):
        async def reader(i):
            c = clients[i]
            want = expected(c)
            answered = None
            while len(c["events"]) < len(want) or answered is None:
                r = await asyncio.wait_for(calls[i].read(), 20)
                assert not r.canceled and not r.created, (i, r)
                if r.watch_id == -1 and not r.events:  # the progress answer
                    assert answered is None, (i, r)
                    answered = r.header.revision
                    sent = [ev for ev in want if ev[0] <= answered]
                    assert c["events"][:len(sent)] == sent, (i, answered, c["events"], want)
                    continue
                assert r.watch_id == 0, (i, r)
                for ev in r.events:
                    c["events"].append((ev.kv.mod_revision, ev.type, ev.kv.value,
                                        ev.prev_kv.value if ev.HasField("prev_kv") else None))
            assert c["events"] == want, (i, c, want)
            assert answered >= last, (i, answered, last)

        for call in calls:
            await call.write(p.WatchRequest(progress_request=p.WatchProgressRequest()))
        await asyncio.gather(*[reader(i) for i in range(len(calls))])
        for call in calls:
            call.cancel()
        for ch in chans:
            await ch.close()

    loop = asyncio.new_event_loop()
    try:
        t0 = time.time()
        chans, calls = loop.run_until_complete(main())
        print("grpc_proxy_test: %d watch streams created in %.1f s" % (len(calls), time.time() - t0),
              flush=True)
        # the catch-up watches join their group: a handful left on the member
        groups = 2  # prev_kv and not
        wait_for("the member's watch count to drop", lambda: member_watchers() - base <= groups)
        served = member_watchers() - base
        coalescing = metric(e.co_mport, "etcd_grpc_proxy_watchers_coalescing_total")
        assert coalescing == N_WATCH_STREAMS - groups, coalescing
        for v in (b"n1", b"n2", None, b"n3"):
            rev = kv_op(e.root.port, key, v)
            ops.append((rev, 1 if v is None else 0, v or b"", prev))
            prev = v
        loop.run_until_complete(rest(chans, calls, ops[-1][0]))
    finally:
        aio_loop_close(loop)
    events = metric(e.co_mport, "etcd_grpc_proxy_events_coalescing_total")
    assert events >= 3 * (N_WATCH_STREAMS - groups), events
    print("grpc_proxy_test: %d client watches, %d watches on the member, events coalesced %d"
          % (N_WATCH_STREAMS, served, events), flush=True)
    # every client left: nothing stays on the member, the gauge is back to 0
    wait_for("the member's watches to end", lambda: member_watchers() <= base)
    assert metric(e.co_mport, "etcd_grpc_proxy_watchers_coalescing_total") == 0


def test_watch_coalescing_merge_under_writes():
    """Watches created while a writer keeps changing their key (from now,
    from history, from the revision just written, from a few revisions
    ahead) catch up and join the shared watch mid-stream: each gets every
    event from its own start exactly once, in order."""
    import asyncio
    import grpc
    import random
    e = env()
    br = co_bridge()
    p = gs.pb()
    key = b"cm/k"
    rnd = random.Random(20)
    ops = []  # put revisions, in order
    clients = []  # [start, created revision, events, call]
    base = member_watchers()

    async def main():
        opts = [("grpc.use_local_subchannel_pool", 1)]
        wch = grpc.aio.insecure_channel("127.0.0.1:%d" % e.root.port, options=opts)
        chans = [grpc.aio.insecure_channel("127.0.0.1:%d" % br.port, options=opts)
                 for _ in range(2)]
        put = wch.unary_unary("/etcdserverpb.KV/Put", request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=p.PutResponse.FromString)

        async def open_watch(start):
            call = chans[len(clients) % 2].stream_stream(
                "/etcdserverpb.Watch/Watch", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=p.WatchResponse.FromString)()
            c = [start, None, [], call]
            clients.append(c)
            await call.write(p.WatchRequest(create_request=p.WatchCreateRequest(
                key=key, start_revision=start)))
            r = await asyncio.wait_for(call.read(), 20)
            assert r.created and not r.canceled, r
            c[1] = r.header.revision

        for i in range(240):
            r = await put(p.PutRequest(key=key, value=b"%d" % i), timeout=20)
            ops.append(r.header.revision)
            if i % 12 == 5:
                last = ops[-1]
                for start in (0, rnd.choice(ops), last, last + 1, last + 3):
                    await open_watch(start)
        final = ops[-1]

        async def reader(c):
            while not c[2] or c[2][-1] < final:
                r = await asyncio.wait_for(c[3].read(), 20)
                assert not r.canceled and not r.created and r.watch_id == 0, r
                c[2] += [ev.kv.mod_revision for ev in r.events]

        await asyncio.gather(*[reader(c) for c in clients])
        # every catching-up watch has joined: one watch left on the member
        deadline = time.time() + 10
        while member_watchers() - base > 1 and time.time() < deadline:
            await asyncio.sleep(0.1)
        assert member_watchers() - base == 1, (member_watchers(), base)
        for c in clients:
            c[3].cancel()
        for ch in chans + [wch]:
            await ch.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        aio_loop_close(loop)
    for start, created, events, _ in clients:
        want = [r for r in ops if (r >= start if start else r > created)]
        assert events == want, (start, created, events, want)
    print("grpc_proxy_test: %d watches joined a shared watch during %d puts" % (len(clients), len(ops)),
          flush=True)
    wait_for("the member's watches to end", lambda: member_watchers() <= base)


def test_watch_coalescing_slow_client():
    """A client that stops reading shares its upstream watch with three that
    read: its own watch is cancelled with a reason, the others get every
    event and go on (their upstream watch is not disturbed)."""
    e = env()
    br = co_bridge()
    readers = [gs.watch_stream(br.port) for _ in range(3)]
    sock = None
    try:
        for s in readers:
            s.send(gs.create(key=b"cs/", range_end=b"cs0"))
            assert s.recv().created
        sock = gs.h2_watch_open(br.port, gs.create(key=b"cs/", range_end=b"cs0"))
        time.sleep(0.5)
        base = member_watchers()
        val = b"s" * (128 * 1024)
        for i in range(24):  # 3 MiB of events; the slow client's queue holds 1 MiB
            kv_op(e.root.port, b"cs/%02d" % i, val)
        for s in readers:
            got = []
            while len(got) < 24:
                r = s.recv()
                assert not r.canceled, r
                got += [ev.kv.key for ev in r.events]
            assert got == [b"cs/%02d" % i for i in range(24)], got
        # the slow one: its events up to what fitted, then its cancellation
        resps = gs.h2_watch_read_until_canceled(sock)
        assert resps and resps[0].created, resps[:1]
        keys = [ev.kv.key for r in resps for ev in r.events]
        assert keys == [b"cs/%02d" % i for i in range(len(keys))] and len(keys) < 24, keys
        assert resps[-1].canceled and "watcher too slow" in resps[-1].cancel_reason, resps[-1]
        # the readers' shared watch goes on
        kv_op(e.root.port, b"cs/after", b"1")
        for s in readers:
            r = s.recv()
            assert [ev.kv.key for ev in r.events] == [b"cs/after"], r
        assert member_watchers() == base, (member_watchers(), base)
        assert br.poll() is None
    finally:
        if sock:
            sock.close()
        for s in readers:
            s.close()


def progress_round_trip(port, key, with_now):
    """One stream: a watch of key from 50 revisions ahead (progress_notify),
    with one from now beside it or not, then a progress request; the
    cluster's revision and every response up to and including the answer
    (watch_id -1)."""
    p = gs.pb()
    rev = kv_op(port, key, b"x")
    s = gs.watch_stream(port)
    try:
        if with_now:
            s.send(gs.create(key=key))
            assert s.recv().created
        s.send(gs.create(key=key, start_revision=rev + 50, progress_notify=True))
        assert s.recv().created
        s.send(p.WatchRequest(progress_request=p.WatchProgressRequest()))
        resps = [s.recv()]
        while resps[-1].watch_id != -1:
            resps.append(s.recv())
    finally:
        s.close()
    return rev, resps


def test_watch_coalescing_progress_never_ahead():
    """A watch from a revision the cluster has not reached yet claims no
    revision beyond the cluster's: the progress answer is the cluster's
    revision (etcd 3.4 answers the same), and no progress notification names
    a later one."""
    e = env()
    br = co_bridge()
    for port in (e.etcd_port, br.port):
        for with_now in (True, False):
            rev, resps = progress_round_trip(port, b"cf/k", with_now)
            assert all(r.header.revision <= rev for r in resps), (port, with_now, rev, resps)
            assert resps[-1].header.revision == rev and not resps[-1].events, (port, rev, resps)


def test_watch_coalescing_created_revision_fresh():
    """A watch from now that joins a shared watch is created at the newest
    revision the bridge has seen, not at the shared watch's last event:
    clientv3 resumes a watch from now at its created revision after a
    reconnect, so a stale one would replay a change made before the watch
    existed. etcd answers its current revision (the same here: the bridge
    saw it on another watch)."""
    e = env()
    br = co_bridge()
    for port in (e.etcd_port, br.port):
        a, b = gs.watch_stream(port), gs.watch_stream(port)
        s = gs.watch_stream(port)
        try:
            a.send(gs.create(key=b"cr/a"))
            b.send(gs.create(key=b"cr/b"))
            assert a.recv().created and b.recv().created
            ra = kv_op(port, b"cr/a", b"1")
            assert [ev.kv.mod_revision for ev in a.recv().events] == [ra]
            rb = kv_op(port, b"cr/b", b"1")  # the newest revision, seen on b's watch
            assert [ev.kv.mod_revision for ev in b.recv().events] == [rb]
            s.send(gs.create(key=b"cr/a"))
            r = s.recv()
            assert r.created and r.header.revision == rb, (port, ra, rb, r)
            rc = kv_op(port, b"cr/a", b"2")
            assert [ev.kv.mod_revision for ev in s.recv().events] == [rc]
        finally:
            for x in (a, b, s):
                x.close()


def pn_bridge():
    """A bridge with etcd's progress notification interval set as etcd's."""
    e = env()
    if getattr(e, "pn", None) is None:
        e.pn = e.bridge(["--experimental-watch-progress-notify-interval", "%gs" % PROGRESS_S])
    return e.pn


def test_watch_progress_notify_periodic_as_etcd():
    """A watch with progress_notify gets a notification per tick of its
    stream's ticker (--experimental-watch-progress-notify-interval, plus up to
    10% jitter), none in a tick after which it was sent events, and nothing
    for a watch without progress_notify; progress rounds asked by another
    stream on the same key (its progress requests) bring none: as etcd 3.4."""
    import queue
    import threading
    e = env()
    p = gs.pb()
    counts = {}

    def drain(stream, q):  # every response of stream into q, until it ends
        try:
            for r in stream.it:
                q.put(r)
        except Exception:  # noqa: the stream closed under it
            pass
    for port in (e.etcd_port, pn_bridge().port):
        other = gs.watch_stream(port)
        t0 = time.time()
        s = gs.watch_stream(port)
        stop = threading.Event()
        try:
            other.send(gs.create(key=b"pn/q"))
            assert other.recv().created
            s.send(gs.create(key=b"pn/q", watch_id=1, progress_notify=True))
            s.send(gs.create(key=b"pn/q", watch_id=2))
            s.send(gs.create(key=b"pn/busy", watch_id=3, progress_notify=True))
            got = {1: [], 2: [], 3: []}
            for _ in range(3):
                r = s.recv()
                assert r.created and not r.canceled, r
                got[r.watch_id].append("created")

            def busy():  # pn/busy changes more often than the ticker ticks
                while not stop.is_set():
                    kv_op(port, b"pn/busy", b"x")
                    other.send(p.WatchRequest(progress_request=p.WatchProgressRequest()))
                    stop.wait(0.2)
            th = threading.Thread(target=busy, daemon=True)
            th.start()
            rq = queue.Queue()
            threading.Thread(target=drain, args=(s, rq), daemon=True).start()
            # 3 ticks by 3.3 s after the stream opened, the 4th at 4.0 s at the earliest
            end = t0 + 3.6 * PROGRESS_S
            while time.time() < end:
                try:
                    r = rq.get(timeout=max(0.05, end - time.time()))
                except queue.Empty:
                    break
                got[r.watch_id].append("events" if r.events else "progress")
            stop.set()
            th.join()
            assert got[3].count("events") >= 10, (port, got)
            counts[port] = {w: v.count("progress") for w, v in got.items()}
        finally:
            stop.set()
            s.close()
            other.close()
    assert counts[e.etcd_port] == {1: 3, 2: 0, 3: 0}, counts
    assert counts[pn_bridge().port] == counts[e.etcd_port], counts


def test_watch_cancel_before_created_as_etcd():
    """A cancel that reaches the server before the watch's created response
    (sent right behind the create) is answered after it, created then
    canceled, as etcd 3.4 (whose server answers a create before reading the
    next request), whether the watch makes a new shared watch or joins one;
    nothing more comes for that id, and the stream goes on."""
    e = env()
    p = gs.pb()
    seen = {}
    for port in (e.etcd_port, co_bridge().port):
        base = gs.watch_stream(port)
        s = gs.watch_stream(port)
        try:
            base.send(gs.create(key=b"cb/shared"))
            assert base.recv().created
            out = []
            for wid, key in ((5, b"cb/new-%d" % port), (6, b"cb/shared")):
                rev = kv_op(port, b"cb/x", b"1")
                s.send(gs.create(key=key, watch_id=wid))
                s.send(p.WatchRequest(cancel_request=p.WatchCancelRequest(watch_id=wid)))
                for _ in range(2):
                    r = s.recv()
                    assert r.header.revision == rev, (port, rev, r)
                    out.append((r.watch_id, r.created, r.canceled, r.cancel_reason))
            s.send(gs.create(key=b"cb/last", watch_id=7))
            r = s.recv()
            out.append((r.watch_id, r.created, r.canceled))
            for key in (b"cb/new-%d" % port, b"cb/shared", b"cb/last"):
                kv_op(port, key, b"2")
            r = s.recv()  # the first event comes for watch 7 alone
            assert r.watch_id == 7 and [ev.kv.key for ev in r.events] == [b"cb/last"], (port, r)
            seen[port] = out
        finally:
            s.close()
            base.close()
    want = [(5, True, False, ""), (5, False, True, ""), (6, True, False, ""),
            (6, False, True, ""), (7, True, False)]
    assert seen[e.etcd_port] == want, seen
    assert seen[co_bridge().port] == want, seen


# ---- the serializable range cache (--cache-size, on by default) ----

STALE_S = 0.1  # --cache-max-staleness's default: the bound the tests hold the cache to


class KV:
    """Range / Put / Compact over one grpcio channel (no connection set-up per call)."""

    def __init__(self, port):
        import grpc
        self.p = gs.pb()
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        ser = (lambda m: m.SerializeToString())
        self._range = self.ch.unary_unary("/etcdserverpb.KV/Range", request_serializer=ser,
                                          response_deserializer=self.p.RangeResponse.FromString)
        self._put = self.ch.unary_unary("/etcdserverpb.KV/Put", request_serializer=ser,
                                        response_deserializer=self.p.PutResponse.FromString)
        self._compact = self.ch.unary_unary(
            "/etcdserverpb.KV/Compact", request_serializer=ser,
            response_deserializer=self.p.CompactionResponse.FromString)

    def get(self, key, timeout=5, **kw):
        return self._range(self.p.RangeRequest(key=key, **kw), timeout=timeout)

    def sget(self, key, **kw):
        return self.get(key, serializable=True, **kw)

    def put(self, key, value):
        return self._put(self.p.PutRequest(key=key, value=value), timeout=5).header.revision

    def compact(self, rev):
        self._compact(self.p.CompactionRequest(revision=rev, physical=True), timeout=5)

    def close(self):
        self.ch.close()


def cache_env():
    """Bridges A (cache on, the default; /metrics) and B (cache on), and one
    with --cache-size 0, shared by the cache tests."""
    e = env()
    if not hasattr(e, "cache_a"):
        e.cache_am = free_port()
        e.cache_a = e.bridge(["--metrics-addr", "127.0.0.1:%d" % e.cache_am])
        e.cache_b = e.bridge([])
        e.cache_0m = free_port()
        e.cache_0 = e.bridge(["--cache-size", "0", "--metrics-addr", "127.0.0.1:%d" % e.cache_0m])
        e.kv_a, e.kv_b, e.kv_0 = KV(e.cache_a.port), KV(e.cache_b.port), KV(e.cache_0.port)
    return e


def hits(e):
    return metric(e.cache_am, "etcd_grpc_proxy_cache_hits_total")


def misses(e):
    return metric(e.cache_am, "etcd_grpc_proxy_cache_misses_total")


def member_ranges(e):
    return metric(e.member.port, "etcd_mvcc_range_total")


def warm(e, key):
    """Reads key through A until A answers it from its cache."""
    h = hits(e)
    wait_for("a cache hit on %r" % key, lambda: e.kv_a.sget(key) and hits(e) > h, timeout=5)


def native():
    from harness import Conn
    return Conn(env().member.port)


def test_cache_hit_costs_no_member_request():
    e = cache_env()
    rev = native().put("cache/k", "v1")["header"][2]
    warm(e, b"cache/k")
    h0, m0, r0, t0 = hits(e), misses(e), member_ranges(e), time.monotonic()
    n = 300
    for _ in range(n):
        r = e.kv_a.sget(b"cache/k")
        assert [(kv.key, kv.value) for kv in r.kvs] == [(b"cache/k", b"v1")], r
    elapsed = time.monotonic() - t0
    h, m, ranges = hits(e) - h0, misses(e) - m0, member_ranges(e) - r0
    assert h + m == n, (h, m)
    # the member saw only the misses and the cache's probes (one per
    # STALE_S/2): a hit cost it nothing
    probes = int(elapsed / (STALE_S / 2)) + 2
    assert h >= n // 2, "%d of %d served from the cache" % (h, n)
    assert ranges <= m + probes, "member served %d ranges for %d misses in %.2f s" % (
        ranges, m, elapsed)
    print("grpc_proxy_test: %d serializable reads through A: %d hits, %d misses, %d member "
          "ranges in %.2f s" % (n, h, m, ranges, elapsed), flush=True)
    # a hit is what the member answers, header included (its revision is
    # the store's, not older than the key's)
    hit, direct = e.kv_a.sget(b"cache/k"), e.kv_0.sget(b"cache/k")
    assert list(hit.kvs) == list(direct.kvs) and hit.count == direct.count
    assert hit.header.cluster_id == direct.header.cluster_id
    assert rev <= hit.header.revision <= direct.header.revision
    # range forms are cached and answered whole: prefix, limit, count, keys only
    for k in ("cache/p1", "cache/p2", "cache/p3"):
        native().put(k, "p")
    forms = [dict(range_end=b"cache/q"), dict(range_end=b"cache/q", limit=2),
             dict(range_end=b"cache/q", count_only=True), dict(range_end=b"cache/q", keys_only=True),
             dict(range_end=b"\0", sort_order=2)]
    for kw in forms:
        warm_h = hits(e)
        wait_for("a hit on %r" % kw, lambda: e.kv_a.sget(b"cache/p", **kw) and hits(e) > warm_h,
                 timeout=5)
        a, z = e.kv_a.sget(b"cache/p", **kw), e.kv_0.sget(b"cache/p", **kw)
        assert (list(a.kvs), a.count, a.more) == (list(z.kvs), z.count, z.more), kw
    assert metric(e.cache_am, "etcd_grpc_proxy_cache_keys_total") >= len(forms) + 1


def visible_within_bound(e, key, write, label):
    """write() changes key (returning its revision and the new value) while A
    has it cached: a read through A that starts STALE_S after the write was
    acknowledged must show it (earlier reads may or may not)."""
    warm(e, key)
    rev, value = write()
    t_ack = time.monotonic()
    seen_at = None
    while True:
        t = time.monotonic()
        r = e.kv_a.sget(key)
        fresh = r.kvs and r.kvs[0].value == value
        if fresh and seen_at is None:
            seen_at = t - t_ack
            assert r.header.revision >= rev
        if t >= t_ack + STALE_S:
            assert fresh, "%s: a read %.0f ms after the write still shows %r" % (
                label, (t - t_ack) * 1000, r.kvs[0].value if r.kvs else None)
            break
        time.sleep(0.002)
    print("grpc_proxy_test: %s visible through A after %.1f ms" % (label, seen_at * 1000),
          flush=True)


def test_cache_writes_elsewhere_invalidate():
    e = cache_env()
    n = native()
    n.put("cache/w", "0")
    for i in range(3):
        v = ("b%d" % i).encode()
        visible_within_bound(e, b"cache/w", lambda: (e.kv_b.put(b"cache/w", v), v),
                             "a put through proxy B")
        v = ("n%d" % i).encode()
        visible_within_bound(e, b"cache/w", lambda: (n.put(b"cache/w", v)["header"][2], v),
                             "a native put")
    # a delete made natively invalidates a prefix range holding the key
    warm(e, b"cache/w")
    e.kv_a.sget(b"cache/", range_end=b"cache0")
    warm_h = hits(e)
    wait_for("a prefix hit", lambda: e.kv_a.sget(b"cache/", range_end=b"cache0") and
             hits(e) > warm_h, timeout=5)
    from harness import DELETE
    n.call(DELETE, {"key": b"cache/w"})
    time.sleep(STALE_S + 0.01)
    keys_now = [kv.key for kv in e.kv_a.sget(b"cache/", range_end=b"cache0").kvs]
    assert b"cache/w" not in keys_now, keys_now
    # through A itself: the next read sees the write at once (never older
    # than what a client saw through the proxy)
    for i in range(20):
        warm(e, b"cache/w")
        v = ("a%d" % i).encode()
        rev = e.kv_a.put(b"cache/w", v)
        r = e.kv_a.sget(b"cache/w")
        assert r.kvs[0].value == v and r.header.revision >= rev, (i, r)


def test_cache_lagging_watch_not_served():
    """A's watch falls far behind: A is stopped (SIGSTOP) while other writers
    put 16 MB, then the cached key is changed natively; once A runs again,
    every read through it shows the change (made more than the bound
    earlier), although its watch has 16 MB of events to catch up on."""
    from harness import PUT, TXN, DELETE
    e = cache_env()
    n = native()
    n.put("cache/lag", "0")
    big = b"x" * 10000
    for i in range(2):
        warm(e, b"cache/lag")
        os.kill(e.cache_a.pid, signal.SIGSTOP)
        try:
            rids = [n.send(TXN, {"success": [[PUT, {"key": b"cache/bulk/%03d" % k,
                                                    "value": big}] for k in range(100)]})
                    for _ in range(16)]
            for _ in rids:
                assert n.recv()[1] in rids
            v = ("lag%d" % i).encode()
            rev = n.put(b"cache/lag", v)["header"][2]
            time.sleep(STALE_S)
        finally:
            os.kill(e.cache_a.pid, signal.SIGCONT)
        t_end = time.monotonic() + 0.3
        while time.monotonic() < t_end:
            r = e.kv_a.sget(b"cache/lag")
            got = r.kvs[0].value if r.kvs else None
            assert got == v and r.header.revision >= rev, (i, got, v)
            time.sleep(0.002)
    n.call(DELETE, {"key": b"cache/bulk/", "range_end": b"cache/bulk0"})


def test_cache_linearizable_always_fresh():
    e = cache_env()
    n = native()
    n.put("cache/l", "0")
    warm(e, b"cache/l")
    h0, m0 = hits(e), misses(e)
    for i in range(30):
        v = ("%d" % i).encode()
        rev = n.put(b"cache/l", v)["header"][2]
        r = e.kv_a.get(b"cache/l")  # linearizable, right after the write
        assert r.kvs[0].value == v and r.header.revision >= rev, (i, r)
    # never looked up in the cache: neither a hit nor a miss
    assert (hits(e), misses(e)) == (h0, m0)


def test_cache_compaction_honoured():
    import grpc
    e = cache_env()
    n = native()
    r1 = n.put("cache/c", "1")["header"][2]
    n.put("cache/c", "2")
    # an old revision, cached
    h = hits(e)
    wait_for("a hit at revision %d" % r1, lambda: e.kv_a.sget(b"cache/c", revision=r1).kvs[0]
             .value == b"1" and hits(e) > h, timeout=5)
    # compacted natively: within the bound, the compacted error
    r3 = n.put("cache/c", "3")["header"][2]
    from harness import COMPACT
    n.call(COMPACT, {"revision": r3, "physical": True})
    time.sleep(STALE_S + 0.01)
    try:
        e.kv_a.sget(b"cache/c", revision=r1)
        assert False, "a compacted revision answered"
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.OUT_OF_RANGE, err
        assert "required revision has been compacted" in err.details()
    # compacted through A: at once
    r4 = n.put("cache/c", "4")["header"][2]
    h = hits(e)
    wait_for("a hit at revision %d" % r4, lambda: e.kv_a.sget(b"cache/c", revision=r4).kvs[0]
             .value == b"4" and hits(e) > h, timeout=5)
    r5 = n.put("cache/c", "5")["header"][2]
    e.kv_a.compact(r5)
    try:
        e.kv_a.sget(b"cache/c", revision=r4)
        assert False, "a revision compacted through the proxy answered"
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.OUT_OF_RANGE, err
    # the current revision keeps being cached
    warm(e, b"cache/c")


def test_cache_member_stopped_nothing_served():
    """The member stops answering (SIGSTOP): once the bound has passed, A
    serves nothing from its cache (the read waits for the member)."""
    import grpc
    e = cache_env()
    native().put("cache/s", "1")
    warm(e, b"cache/s")
    os.kill(e.member.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(STALE_S + 0.02)
        h = hits(e)
        try:
            e.kv_a.sget(b"cache/s", timeout=0.5)
            assert False, "a cached answer served %d ms after the member stopped" % (
                (STALE_S + 0.02) * 1000)
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err
        assert hits(e) == h
    finally:
        os.kill(e.member.proc.pid, signal.SIGCONT)
    warm(e, b"cache/s")


def test_cache_size_0_disables():
    e = cache_env()
    native().put("cache/z", "1")
    r0 = member_ranges(e)
    for _ in range(50):
        assert e.kv_0.sget(b"cache/z").kvs[0].value == b"1"
    assert member_ranges(e) - r0 >= 50  # each one reached the member
    for name in ("keys", "hits", "misses"):
        assert metric(e.cache_0m, "etcd_grpc_proxy_cache_%s_total" % name) == 0


def test_cache_difference_with_etcd_proxy():
    """etcd 3.4's grpc-proxy keeps serving a cached answer after a write made
    straight to etcd (its cache hears only of writes through itself); a
    ketch-grpc shows a write made straight to the member within the bound."""
    e = cache_env()
    ctl(e.etcd_port, "put", "t1/cd", "old")
    for _ in range(2):
        assert ctl(e.eproxy_port, "get", "cd", "--consistency=s",
                   "--print-value-only") == "old\n"
    ctl(e.etcd_port, "put", "t1/cd", "new")
    time.sleep(0.5)
    assert ctl(e.eproxy_port, "get", "cd", "--consistency=s", "--print-value-only") == "old\n"
    assert ctl(e.eproxy_port, "get", "cd", "--print-value-only") == "new\n"  # linearizable
    native().put("cache/cd", "old")
    warm(e, b"cache/cd")
    native().put("cache/cd", "new")
    time.sleep(STALE_S + 0.01)
    assert ctl(e.cache_a, "get", "cache/cd", "--consistency=s", "--print-value-only") == "new\n"


def test_cache_metrics_are_etcds():
    """The three figures with etcd's names, types and help (etcd's
    proxy/grpcproxy/metrics.go declares them as gauges)."""
    import urllib.request
    e = cache_env()
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % e.cache_am,
                                  timeout=5).read().decode()
    for name, help_ in (("keys", "Total number of keys/ranges cached"),
                        ("hits", "Total number of cache hits"),
                        ("misses", "Total number of cache misses")):
        m = "etcd_grpc_proxy_cache_%s_total" % name
        assert "# HELP %s %s\n# TYPE %s gauge\n" % (m, help_, m) in text, text


def teardown():
    global ENV
    if ENV is not None:
        e, ENV = ENV, None
        e.close()


def test_shutdown_clean():
    teardown()


if __name__ == "__main__":
    import atexit
    atexit.register(teardown)
    run_tests([test_namespace_kv, test_namespace_txn, test_namespace_watch,
               test_namespace_lock_and_elect, test_namespace_lease_keys,
               test_namespace_role_permissions, test_namespace_snapshot_refused,
               test_namespace_same_as_etcd_proxy, test_differences_with_etcd_proxy,
               test_registration_member_list, test_advertise_without_prefix,
               test_endpoints_auto_sync, test_lease_keepalive_coalescing,
               test_watch_coalescing_1000_streams, test_watch_coalescing_merge_under_writes,
               test_watch_coalescing_slow_client, test_watch_coalescing_progress_never_ahead,
               test_watch_coalescing_created_revision_fresh,
               test_watch_progress_notify_periodic_as_etcd, test_watch_cancel_before_created_as_etcd,
               test_cache_hit_costs_no_member_request, test_cache_writes_elsewhere_invalidate,
               test_cache_lagging_watch_not_served,
               test_cache_linearizable_always_fresh, test_cache_compaction_honoured,
               test_cache_member_stopped_nothing_served, test_cache_size_0_disables,
               test_cache_difference_with_etcd_proxy, test_cache_metrics_are_etcds,
               test_shutdown_clean])
