"""Maintenance end to end, with real processes on loopback: snapshot save
(ketchctl natively, and etcdctl 3.4 through ketch-grpc) -> ketchutl snapshot
restore -> a new member serves the saved keys; endpoint hashkv equal on the 3
members of a cluster; defrag; alarm list / disarm around a NOSPACE raised by a
small --quota-backend-bytes; etcdctl's outputs against ketch-grpc compared
with a real etcd 3.4 (hashes and member ids normalized); every Auth method
answering an empty request as etcd 3.4 does; a snapshot reader that stops reading does not grow the
member's memory."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import grpc_test as g
from harness import BIN, GET_RSS_KB, Conn, Member, ServerError, run_tests

SNAPSHOT, HASH_KV = 47, 46
KETCHCTL = os.path.join(BIN, "ketchctl")
KETCHUTL = os.path.join(BIN, "ketchutl")


def ketchctl(endpoints, args, stdin=None, timeout=30):
    p = subprocess.run([KETCHCTL, "--endpoints", endpoints] + args, input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def ketchutl(args, timeout=60):
    p = subprocess.run([KETCHUTL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def all_kvs(port):
    """Every key-value of a member, serializable, with its revisions."""
    c = Conn(port)
    try:
        r = c.call(1, {"key": b"\0", "range_end": b"\0", "serializable": True})
    finally:
        c.close()
    return [tuple(kv[:5]) for kv in r.get("kvs") or []], r["header"][2]


def restored_member(snap_file, tmp):
    """ketchutl snapshot restore into a new data dir, and a member on it."""
    base = tempfile.mkdtemp(prefix="ketch-restore-", dir=tmp)
    rc, out, err = ketchutl(["snapshot", "restore", snap_file, "--data-dir",
                             os.path.join(base, "d")])
    assert rc == 0 and ("restored snapshot" in out or "migrated etcd database" in out), (rc, out, err)
    return Member(data_dir=base, name="restored")


def wait_revision(members, rev, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(all_kvs(m.port)[1] >= rev for m in members):
            return
        time.sleep(0.05)
    raise AssertionError("members did not reach revision %d" % rev)


# ---- etcdctl through ketch-grpc vs a real etcd (run first: the same writes
# on both keep the revisions equal) ----

HASH_SIMPLE = re.compile(r"^(EP, )\d+$", re.M)
HASH_TABLE = re.compile(r"^(\| EP \| +)\d+( \|)$", re.M)
HASH_FIELD = re.compile(r'^"Hash" : \d+$', re.M)
TABLE_PAD = re.compile(r"^([+|].*)$", re.M)
MEMBER_ID = re.compile(r"memberID:\d+")


def norm(b):
    t = g.norm_text(b)
    t = HASH_SIMPLE.sub(r"\1HASH", t)
    t = HASH_TABLE.sub(lambda m: m.group(1) + "HASH" + m.group(2), t)
    t = HASH_FIELD.sub('"Hash" : HASH', t)
    # a hash of another width widens the table: compare its shape only
    t = TABLE_PAD.sub(lambda m: re.sub(r" +", " ", re.sub(r"-+", "-", m.group(1))), t)
    return MEMBER_ID.sub("memberID:ID", t)


def compare(e, cmds):
    """etcdctl against etcd, then against ketch-grpc: equal after norm()
    (hash values, member ids and ids in JSON are the servers' own)."""
    saved = set(g.VOLATILE)
    g.VOLATILE.update({"hash", "memberID"})
    try:
        g.compare(cmds, e=e, normalize=norm)
    finally:
        g.VOLATILE.clear()
        g.VOLATILE.update(saved)


def test_hashkv_defrag_through_bridge_same_as_etcd():
    e = g.env()
    c = g.c
    compare(e, [
        c("put", "h1", "a"), c("put", "h2", "b"), c("put", "h1", "c"), c("del", "h2"),
        c("endpoint", "hashkv"), c("endpoint", "hashkv", "-w", "json"),
        c("endpoint", "hashkv", "-w", "table"), c("endpoint", "hashkv", "-w", "fields"),
        c("endpoint", "hashkv", "--rev", "100000"),
        c("compaction", "3"), c("endpoint", "hashkv", "-w", "json"),
        c("endpoint", "hashkv", "--rev", "3"), c("endpoint", "hashkv", "--rev", "4", "-w", "json"),
        c("defrag"), c("defrag", "-w", "json"), c("get", "h1"),
        c("alarm", "list"), c("alarm", "list", "-w", "json"), c("alarm", "disarm"),
    ])
    # HashKV at a fixed revision does not move with later writes
    p = lambda port: json.loads(e.ctl(port, ["endpoint", "hashkv", "--rev", "4", "-w",
                                             "json"])[1])[0]["HashKV"]["hash"]
    before = p(e.grpc_port)
    for port in (e.grpc_port, e.etcd_port):  # both: the stores stay alike
        assert e.ctl(port, ["put", "h3", "x"])[0] == 0
    assert p(e.grpc_port) == before


def test_ketchctl_same_as_etcdctl():
    """ketchctl against a ketch member and etcdctl against etcd: the same
    output (runs right after the test above: both stores are alike)."""
    e = g.env()
    saved = set(g.VOLATILE)
    g.VOLATILE.update({"hash", "memberID"})
    diffs = []
    try:
        for args in (["endpoint", "hashkv"], ["endpoint", "hashkv", "-w", "json"],
                     ["endpoint", "hashkv", "-w", "table"], ["endpoint", "hashkv", "-w", "fields"],
                     ["endpoint", "hashkv", "--rev", "4"], ["endpoint", "hashkv", "--rev", "3"],
                     ["endpoint", "hashkv", "--rev", "100000", "-w", "json"],
                     ["defrag"], ["defrag", "-w", "json"], ["alarm", "list"],
                     ["alarm", "list", "-w", "json"], ["alarm", "list", "-w", "table"],
                     ["alarm", "disarm"], ["alarm", "disarm", "-w", "json"],
                     ["snapshot", "save"], ["snapshot", "save", "a", "b"]):
            want = e.ctl(e.etcd_port, args)
            rc, out, err = ketchctl(e.members[0].endpoint, args)
            w = (want[0], norm(want[1]), norm(want[2]))
            k = (rc, norm(out.encode()), norm(err.encode()))
            if w != k:
                diffs.append("%s:\n  etcdctl:  %r\n  ketchctl: %r" % (" ".join(args), w, k))
    finally:
        g.VOLATILE.clear()
        g.VOLATILE.update(saved)
    assert not diffs, "\n".join(diffs)


def test_etcdctl_snapshot_save_through_bridge_restores():
    e = g.env()
    for i in range(50):
        assert e.ctl(e.grpc_port, ["put", "snap/%02d" % i, "v%d" % i])[0] == 0
        assert e.ctl(e.etcd_port, ["put", "snap/%02d" % i, "v%d" % i])[0] == 0
    want_file, got_file = os.path.join(e.tmp, "etcd.db"), os.path.join(e.tmp, "ketch.db")
    want = e.ctl(e.etcd_port, ["snapshot", "save", want_file])
    got = e.ctl(e.grpc_port, ["snapshot", "save", got_file])
    assert want[0] == got[0] == 0, (want, got)
    assert want[1].replace(b"etcd.db", b"F") == got[1].replace(b"ketch.db", b"F") \
        == b"Snapshot saved at %s\n" % os.path.join(e.tmp, "F").encode(), (want[1], got[1])
    assert os.path.getsize(got_file) % 512 == 32  # etcd's shape: a database and its SHA-256
    assert not os.path.exists(got_file + ".part")
    rc, out, err = ketchutl(["snapshot", "status", got_file, "-w", "json"])
    assert rc == 0 and json.loads(out)["totalKey"] >= 50, (rc, out, err)
    # what the bridge's member holds now is what the restored member serves
    kvs = None
    for m in e.members:
        k, _ = all_kvs(m.port)
        kvs = kvs or k
    r = restored_member(got_file, e.tmp)
    try:
        got_kvs, _ = all_kvs(r.port)
        assert [kv for kv in got_kvs if kv[0].startswith(b"snap/")] == \
            [kv for kv in kvs if kv[0].startswith(b"snap/")], got_kvs[:3]
        assert ketchctl(r.endpoint, ["get", "snap/07", "--print-value-only"])[1] == "v7\n"
    finally:
        r.cleanup()
    # etcd's own tools read it, and see what ketchutl sees
    rc, eout, err = e.ctl(e.grpc_port, ["snapshot", "status", got_file, "-w", "json"])
    assert rc == 0 and json.loads(eout) == json.loads(out), (eout, out, err)


def test_auth_methods_answer_as_etcd():
    """Every etcdserverpb.Auth method through the bridge, with an empty request
    while auth is off (nothing changes): the same gRPC code and message as a
    real etcd 3.4 gives. RoleGrantPermission without a permission makes etcd
    3.4 panic (a nil dereference), so ketch alone is asked: InvalidArgument."""
    import grpc
    e = g.env()
    methods = ["AuthEnable", "AuthDisable", "Authenticate", "UserAdd", "UserGet", "UserList",
               "UserDelete", "UserChangePassword", "UserGrantRole", "UserRevokeRole", "RoleAdd",
               "RoleGet", "RoleList", "RoleDelete", "RoleRevokePermission"]

    def answers(port, names):
        out = {}
        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
            for m in names:
                call = ch.unary_unary("/etcdserverpb.Auth/" + m, request_serializer=lambda x: x,
                                      response_deserializer=lambda x: x)
                try:
                    call(b"", timeout=10)
                    out[m] = ("OK", "")
                except grpc.RpcError as err:
                    out[m] = (err.code().name, err.details())
        return out
    want, got = answers(e.etcd_port, methods), answers(e.grpc_port, methods)
    diffs = ["%s: etcd %r, ketch %r" % (m, want[m], got[m]) for m in methods if want[m] != got[m]]
    assert not diffs, "\n".join(diffs)
    assert sum(1 for m in methods if want[m][0] != "OK") >= 10, want  # the errors were compared
    code, details = answers(e.grpc_port, ["RoleGrantPermission"])["RoleGrantPermission"]
    assert code == "INVALID_ARGUMENT" and "permission" in details, (code, details)
    e.bridge_alive()


def test_alarm_activate_deactivate_through_bridge():
    """ACTIVATE through the log: CORRUPT makes every member refuse KV calls
    (DataLoss "etcdserver: corrupt cluster") and NOSPACE refuses writes, each
    until DEACTIVATE; GET lists them on every member."""
    import grpc_stream_test as gs
    p = gs.pb()
    e = g.env()
    alarm = "/etcdserverpb.Maintenance/Alarm"
    mid = json.loads(e.ctl(e.grpc_port, ["endpoint", "status", "-w", "json"])[1])[0]["Status"][
        "header"]["member_id"]
    for kind, refused in ((p.CORRUPT, ["get", "a"]), (p.NOSPACE, ["put", "a", "1"])):
        st, det, r = gs.unary(e.grpc_port, alarm, p.AlarmRequest(
            action=p.AlarmRequest.ACTIVATE, memberID=mid, alarm=kind), p.AlarmResponse)
        assert st == "OK" and [(a.memberID, a.alarm) for a in r.alarms] == [(mid, kind)], (st, det)
        for m in e.members:  # applied by every member
            name = "CORRUPT" if kind == p.CORRUPT else "NOSPACE"
            deadline = time.time() + 5
            while ketchctl(m.endpoint, ["alarm", "list"])[1] != "memberID:%d alarm:%s \n" % (
                    mid, name):
                assert time.time() < deadline, ketchctl(m.endpoint, ["alarm", "list"])
                time.sleep(0.05)
        rc, out, err = e.ctl(e.grpc_port, refused)
        want = b"corrupt cluster" if kind == p.CORRUPT else b"database space exceeded"
        assert rc != 0 and want in err, (rc, out, err)
        st, det, r = gs.unary(e.grpc_port, alarm, p.AlarmRequest(
            action=p.AlarmRequest.DEACTIVATE, memberID=mid, alarm=kind), p.AlarmResponse)
        assert st == "OK" and len(r.alarms) == 1, (st, det, r)
        assert e.ctl(e.grpc_port, ["put", "a", "1"])[0] == 0
        assert e.ctl(e.grpc_port, ["alarm", "list"])[1] == b""


# ---- ketchctl on the native protocol ----

def test_ketchctl_snapshot_save_restore():
    e = g.env()
    leader_c = Conn(e.members[0].port)
    for i in range(300):
        leader_c.put("ks/%03d" % i, "value-%d" % i)
    leader_c.put("ks/005", "rewritten")
    leader_c.call(3, {"key": b"ks/007"})  # a delete: a tombstone in the history
    leader_c.close()
    rev = all_kvs(e.members[0].port)[1]
    wait_revision(e.members, rev)
    f = os.path.join(e.tmp, "ketchctl.snap")
    follower = e.members[2]
    rc, out, err = ketchctl(follower.endpoint, ["snapshot", "save", f])
    assert (rc, out) == (0, "Snapshot saved at %s\n" % f), (rc, out, err)
    assert not os.path.exists(f + ".part")
    rc, out, err = ketchctl(",".join(m.endpoint for m in e.members[:2]), ["snapshot", "save", f])
    assert rc == 5 and err == "Error: snapshot must be requested to one selected node, not " \
        "multiple [%s %s]\n" % (e.members[0].endpoint, e.members[1].endpoint), (rc, err)
    rc, out, err = ketchctl(follower.endpoint, ["snapshot", "save"])
    assert rc == 128 and err == "Error: snapshot save expects one argument\n", (rc, err)
    want, _ = all_kvs(follower.port)
    r = restored_member(f, e.tmp)
    try:
        got, got_rev = all_kvs(r.port)
        assert got == want and got_rev >= rev, (len(got), len(want), got_rev, rev)
        assert ketchctl(r.endpoint, ["get", "ks/005", "--print-value-only"])[1] == "rewritten\n"
        assert ketchctl(r.endpoint, ["get", "ks/007"])[1] == ""
        assert ketchctl(r.endpoint, ["put", "after", "restore"])[1] == "OK\n"  # it serves writes
    finally:
        r.cleanup()


def fake_member(frames_for):
    """A native-protocol server on a free port that answers HELLO, then a
    SNAPSHOT request with the frames frames_for(request id) gives (None ends
    the connection there). Returns (port, thread)."""
    import struct
    import threading
    import msgpack
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    port = ls.getsockname()[1]

    def frame(t, i, p):
        body = msgpack.packb([t, i, p], use_bin_type=True)
        return struct.pack(">I", len(body)) + body

    def serve():
        cs, _ = ls.accept()
        buf = b""
        while True:
            chunk = cs.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                n = struct.unpack(">I", buf[:4])[0]
                t, i, _ = msgpack.unpackb(buf[4:4 + n], raw=False)
                buf = buf[4 + n:]
                if t == 0:
                    cs.sendall(frame(0, i, {"version": 1, "server": "fake", "cluster_id": 1,
                                            "member_id": 2, "max_request_bytes": 1 << 20}))
                    continue
                for f in frames_for(i):
                    if f is None:
                        cs.close()
                        ls.close()
                        return
                    cs.sendall(frame(SNAPSHOT, i, f))
        cs.close()
        ls.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return port, th


def test_ketchctl_snapshot_save_checks_what_it_receives():
    """A damaged, truncated or foreign stream: exit 5 with the reason, and
    neither FILE nor FILE.part is left."""
    e = g.env()
    good = os.path.join(e.tmp, "good.snap")
    assert ketchctl(e.members[0].endpoint, ["snapshot", "save", good])[0] == 0
    data = open(good, "rb").read()

    def pieces(blob):
        return [{"header": [1, 2, 3, 4], "remaining_bytes": len(blob) - k - len(blob[k:k + 100]),
                 "blob": blob[k:k + 100]} for k in range(0, len(blob), 100)]

    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    cases = [
        (lambda i: pieces(bytes(flipped)), "snapshot hash mismatch"),
        (lambda i: pieces(data)[:2] + [None], "connection lost during the snapshot transfer"),
        (lambda i: pieces(b"SQLite format 3\0" + data[16:]), "not a ketch snapshot"),
    ]
    for frames, why in cases:
        port, th = fake_member(frames)
        f = os.path.join(e.tmp, "bad.snap")
        rc, out, err = ketchctl("127.0.0.1:%d" % port, ["snapshot", "save", f])
        th.join(10)
        assert rc == 5 and out == "" and err.startswith("Error: ") and why in err, (rc, out, err)
        assert not os.path.exists(f) and not os.path.exists(f + ".part"), os.listdir(e.tmp)


def test_ketchctl_hashkv_equal_on_all_members_and_defrag():
    e = g.env()
    eps = ",".join(m.endpoint for m in e.members)
    c = Conn(e.members[1].port)  # a follower: forwarded to the leader
    for i in range(500):
        c.put("hk/%03d" % (i % 200), "v%d" % i)
    c.close()
    rev = all_kvs(e.members[0].port)[1]
    wait_revision(e.members, rev)
    assert ketchctl(eps, ["compaction", str(rev - 100)])[0] == 0
    rc, out, err = ketchctl(eps, ["endpoint", "hashkv", "--rev", str(rev), "-w", "json"])
    assert rc == 0, (rc, out, err)
    hs = json.loads(out)
    assert [h["Endpoint"] for h in hs] == [m.endpoint for m in e.members], hs
    assert len({h["HashKV"]["hash"] for h in hs}) == 1, hs  # equal on every member
    assert all(h["HashKV"]["compact_revision"] == rev - 100 for h in hs), hs
    # the current revision, once all applied the same log: equal again
    wait_revision(e.members, rev)
    rc, out, err = ketchctl(eps, ["endpoint", "hashkv"])
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 3 and len({ln.split(", ")[1] for ln in lines}) == 1, out
    rc, out, _ = ketchctl(eps, ["endpoint", "hashkv", "-w", "table"])
    assert rc == 0 and out.count("\n") == 7 and "|    ENDPOINT     |" in out, out
    # a write changes the hash of the current revision, not of the old one
    assert ketchctl(eps, ["put", "hk/new", "x"])[0] == 0
    wait_revision(e.members, rev + 1)
    rc, out, _ = ketchctl(eps, ["endpoint", "hashkv", "--rev", str(rev), "-w", "json"])
    assert {h["HashKV"]["hash"] for h in json.loads(out)} == {hs[0]["HashKV"]["hash"]}, out
    rc, out, _ = ketchctl(eps, ["endpoint", "hashkv", "-w", "json"])
    assert hs[0]["HashKV"]["hash"] not in {h["HashKV"]["hash"] for h in json.loads(out)}
    rc, out, err = ketchctl(eps, ["endpoint", "hashkv", "--rev", str(rev - 100)])
    assert rc == 1 and out == "" and err.endswith(
        "Error: etcdserver: mvcc: required revision has been compacted\n") and err.count(
        "Failed to get the hash of endpoint") == 3, (rc, out, err)
    # defrag: every member answers once its snapshot is written
    rc, out, err = ketchctl(eps, ["defrag"])
    assert rc == 0 and out == "".join("Finished defragmenting etcd member[%s]\n" % m.endpoint
                                      for m in e.members), (rc, out, err)
    rc, out, err = ketchctl(e.members[0].endpoint, ["defrag", "--cluster"])
    assert rc == 0 and out.count("Finished defragmenting etcd member[http://127.0.0.1:") == 3, out
    for m in e.members:
        assert "defragment done" in m.logtext()
        snaps = os.listdir(os.path.join(m.data_dir, "d", "member", "snap"))
        assert any(s.endswith(".snap") for s in snaps), snaps
    rc, out, err = ketchctl("127.0.0.1:1", ["defrag", "--command-timeout", "1s"])
    assert rc == 1 and err.startswith("Failed to defragment etcd member[127.0.0.1:1] ("), err
    # the data is untouched by defrag
    rc, out, _ = ketchctl(eps, ["endpoint", "hashkv", "--rev", str(rev), "-w", "json"])
    assert {h["HashKV"]["hash"] for h in json.loads(out)} == {hs[0]["HashKV"]["hash"]}, out


# ---- NOSPACE: a small quota on ketch and etcd ----

QUOTA = ["--quota-backend-bytes", "1000000"]


def fill_until_nospace(put, n=60):
    for i in range(n):
        rc, out, err = put("fill/%02d" % i)
        if rc != 0:
            return i, err
    raise AssertionError("no NOSPACE after %d puts" % n)


def test_alarm_nospace_disarm():
    q = g.Env(extra=QUOTA)
    try:
        eps = ",".join(m.endpoint for m in q.members)
        value = "x" * 100000
        n, err = fill_until_nospace(lambda k: ketchctl(q.members[1].endpoint, ["put", k, value]))
        assert err == "Error: etcdserver: mvcc: database space exceeded\n", err
        assert n > 3, n
        # raised cluster-wide: every member lists the same alarm
        lists = [ketchctl(m.endpoint, ["alarm", "list"]) for m in q.members]
        assert all(x == lists[0] for x in lists) and re.fullmatch(
            r"memberID:\d+ alarm:NOSPACE \n", lists[0][1]), lists
        assert ketchctl(eps, ["endpoint", "status"])[1].count("alarm:NOSPACE") == 3
        assert ketchctl(eps, ["put", "small", "1"])[0] == 1  # every write refused
        assert ketchctl(eps, ["get", "fill/00", "--keys-only"])[1].startswith("fill/00\n")
        # etcd the same way, through its own quota
        n_etcd, _ = fill_until_nospace(lambda k: q.ctl(q.etcd_port, ["put", k, value]))
        compare(q, [g.c("alarm", "list"), g.c("alarm", "list", "-w", "json"),
                    g.c("put", "small", "1")])
        # disarm without freeing space: the next write over the quota raises it again
        rc, out, _ = ketchctl(eps, ["alarm", "disarm"])
        assert rc == 0 and re.fullmatch(r"memberID:\d+ alarm:NOSPACE \n", out), out
        assert ketchctl(eps, ["alarm", "list"])[1] == ""
        assert ketchctl(eps, ["put", "big", value])[0] == 1
        assert "NOSPACE" in ketchctl(eps, ["alarm", "list"])[1]
        # free space (delete + compaction), disarm: writes are accepted again
        for port_ctl in (lambda a: ketchctl(eps, a), lambda a: q.ctl(q.etcd_port, a)):
            assert port_ctl(["del", "fill/", "--prefix"])[0] == 0
            out = port_ctl(["get", "fill/", "-w", "json"])[1]
            rev = json.loads(out)["header"]["revision"]
            assert port_ctl(["compaction", str(rev)])[0] == 0
        compare(q, [g.c("alarm", "disarm"), g.c("defrag"), g.c("alarm", "list"),
                    g.c("put", "after", "1"), g.c("get", "after")])
        for m in q.members:
            assert ketchctl(m.endpoint, ["alarm", "list"]) == (0, "", ""), m.endpoint
        assert ketchctl(eps, ["put", "again", value]) == (0, "OK\n", "")
    finally:
        q.close()


def test_nospace_alarm_survives_a_restart_from_a_newer_snapshot():
    """NOSPACE is replicated state (puts are refused when applied): a member
    restarted from a snapshot taken after the alarm still holds it and still
    refuses a small put, as the members that never restarted do (it used to
    forget the alarm and accept the put: its store would have diverged)."""
    m = Member(extra=QUOTA + ["--log-level", "warn"])
    tmp = tempfile.mkdtemp(prefix="ketch-nospace-")
    try:
        value = "x" * 100000
        n, err = fill_until_nospace(lambda k: ketchctl(m.endpoint, ["put", k, value]))
        assert err == "Error: etcdserver: mvcc: database space exceeded\n", err
        small = ketchctl(m.endpoint, ["put", "small", "1"])
        assert small[0] == 1 and "database space exceeded" in small[2], small
        # a snapshot of the applied state after the alarm (snapshot save takes one)
        assert ketchctl(m.endpoint, ["snapshot", "save", os.path.join(tmp, "s.db")])[0] == 0
        alarms = ketchctl(m.endpoint, ["alarm", "list"])
        m.stop()
        m.start()
        assert ketchctl(m.endpoint, ["alarm", "list"]) == alarms, alarms
        assert re.fullmatch(r"memberID:\d+ alarm:NOSPACE \n", alarms[1]), alarms
        assert ketchctl(m.endpoint, ["put", "small", "1"]) == small
        # disarmed (after freeing space) it stays disarmed across a restart
        assert ketchctl(m.endpoint, ["del", "fill/", "--prefix"])[0] == 0
        assert ketchctl(m.endpoint, ["alarm", "disarm"])[0] == 0
        assert ketchctl(m.endpoint, ["snapshot", "save", os.path.join(tmp, "t.db")])[0] == 0
        m.stop()
        m.start()
        assert ketchctl(m.endpoint, ["alarm", "list"]) == (0, "", "")
        assert ketchctl(m.endpoint, ["put", "small", "1"]) == (0, "OK\n", "")
    finally:
        m.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- a snapshot reader that stops reading ----

def test_snapshot_reader_that_stops_reading_holds_bounded_memory():
    # Under ASan freed memory is reused at once, so RSS means live bytes.
    saved = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = "quarantine_size_mb=0:" + (saved or "")
    try:
        m = Member(name="big")
    finally:
        if saved is None:
            del os.environ["ASAN_OPTIONS"]
        else:
            os.environ["ASAN_OPTIONS"] = saved
    try:
        c = Conn(m.port)
        for i in range(120):  # ~30 MB that lz4 cannot shrink
            c.put("big/%03d" % i, os.urandom(256 * 1024))
        # a full read first: the snapshot exists, allocations settle
        sizes = []
        c.send(SNAPSHOT, {})
        total = None
        while True:
            t, _, p = c.recv()
            assert t == SNAPSHOT, p
            left = p.get("remaining_bytes", 0)  # zero fields are omitted
            total = total or len(p["blob"]) + left
            sizes.append(len(p["blob"]))
            if left == 0:
                break
        assert sum(sizes) == total and total > 30_000_000, (sum(sizes), total)
        time.sleep(0.5)
        base = GET_RSS_KB(m)
        # a reader with a small receive buffer that never reads
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.connect(("127.0.0.1", m.port))
        stalled = Conn.__new__(Conn)
        stalled.sock, stalled.next_id, stalled.buf = s, 1, b""
        stalled.call(0, {"version": 1, "client": "stalled"})
        stalled.send(SNAPSHOT, {})
        peak = base
        for _ in range(30):
            time.sleep(0.1)
            peak = max(peak, GET_RSS_KB(m))
            assert c.get_value("big/000") is not None  # others are served meanwhile
        assert peak - base < 16 * 1024, "member RSS grew %d KiB" % (peak - base)
        # reading again resumes the stream to its end
        got, last = 0, None
        while last != 0:
            f = stalled.recv()
            assert f is not None and f[0] == SNAPSHOT, f
            got += len(f[2]["blob"])
            last = f[2].get("remaining_bytes", 0)
        assert got == total, (got, total)
        s.close()
        c.close()
    finally:
        m.cleanup()


def test_shutdown_clean():
    g.test_shutdown_clean()


if __name__ == "__main__":
    import atexit
    atexit.register(g.teardown)
    run_tests([test_hashkv_defrag_through_bridge_same_as_etcd, test_ketchctl_same_as_etcdctl,
               test_etcdctl_snapshot_save_through_bridge_restores, test_auth_methods_answer_as_etcd,
               test_alarm_activate_deactivate_through_bridge,
               test_ketchctl_snapshot_save_restore, test_ketchctl_snapshot_save_checks_what_it_receives,
               test_ketchctl_hashkv_equal_on_all_members_and_defrag, test_alarm_nospace_disarm,
               test_nospace_alarm_survives_a_restart_from_a_newer_snapshot,
               test_snapshot_reader_that_stops_reading_holds_bounded_memory, test_shutdown_clean])
