"""Moving data from etcd into ketch and back, with a real etcd 3.4 (Debian's
etcd-server) on both ends:

  etcd E1 (history, overwrites, deletes, a txn that puts and deletes at one
  revision, a compaction at such a revision, leases with and without keys,
  a value needing overflow pages, enough keys for branch pages)
    -> etcdctl snapshot save -> ketchutl migrate from-etcd (--name,
       --initial-cluster) -> a ketch member behind ketch-grpc serves the same
       `get --rev` at every kept revision (python3-etcd3 on both, etcdctl at
       a few), the same compaction error below it, the same leases and keys
    -> etcdctl snapshot save through ketch-grpc -> etcdctl snapshot status
       agrees with ketchutl snapshot status and the revision -> etcdctl
       snapshot restore -> a new etcd E2 serves the same data at every kept
       revision and the same leases; ketchutl snapshot restore takes the file
       too.
  E1's own member/snap/db migrates the same way; damaged and truncated
  databases are refused with an error naming the page, and no data dir is
  left behind.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import grpc_test as g
from harness import BIN, Member, free_port, run_tests

KETCHUTL = os.path.join(BIN, "ketchutl")
ETCDCTL, ETCD = g.ETCDCTL, g.ETCD

DUMP = r"""
import json, sys
import etcd3
from etcd3 import etcdrpc
cl = etcd3.client(host="127.0.0.1", port=int(sys.argv[1]), timeout=20)
lo, hi = int(sys.argv[2]), int(sys.argv[3])
out = {}
for r in range(lo, hi + 1):  # (python3-etcd3 0.12's get_range drops revision=)
    try:
        resp = cl.kvstub.Range(etcdrpc.RangeRequest(key=b"\0", range_end=b"\0", revision=r), cl.timeout)
        out[r] = [(kv.key.decode("latin1"), kv.value.decode("latin1"), kv.create_revision,
                   kv.mod_revision, kv.version, kv.lease) for kv in resp.kvs]
    except Exception as e:
        out[r] = "error: " + str(e.code())
leases = []
for l in cl.leasestub.LeaseLeases(etcdrpc.LeaseLeasesRequest(), cl.timeout).leases:
    t = cl.get_lease_info(l.ID)
    leases.append((t.ID, t.grantedTTL, sorted(k.decode("latin1") for k in t.keys)))
out["leases"] = sorted(leases)
print(json.dumps(out))
"""

# The history etcd E1 gets; prints "C R": the compaction revision (a
# revision with a put and a delete) and the last revision.
FILL = r"""
import sys
import etcd3
cl = etcd3.client(host="127.0.0.1", port=int(sys.argv[1]), timeout=20)
for i in range(300):
    cl.put("k/%03d" % i, "v%d-%s" % (i, "x" * (i % 40)))
for i in range(0, 300, 7):
    cl.put("k/%03d" % i, "again-%d" % i)
cl.delete_prefix("k/01")
cl.put("big", "B" * 100000)
l1, l2, l3 = cl.lease(600), cl.lease(3600), cl.lease(900)
cl.put("l/a", "1", lease=l1)
cl.put("l/b", "2", lease=l1)
cl.put("l/c", "3", lease=l2)
for i in range(5):
    cl.put("h", "h%d" % i)
cl.put("gone", "x")
cl.transaction(compare=[], success=[cl.transactions.put("h", "at-c"), cl.transactions.delete("gone")],
               failure=[])
c = cl.get("h")[1].mod_revision
for i in range(20):
    cl.put("after/%d" % (i % 6), "a%d" % i)
cl.delete("after/3")
cl.compact(c, physical=True)
print(c, cl.get("h")[1].response_header.revision)
"""


class Etcd:
    def __init__(self, tmp, name, data_dir=None):
        self.port, self.peer = free_port(), free_port()
        self.dir = data_dir or os.path.join(tmp, name)
        self.log = open(os.path.join(tmp, name + ".log"), "wb")
        peer = "http://127.0.0.1:%d" % self.peer
        client = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen(
            [ETCD, "--name", name, "--data-dir", self.dir, "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", name + "=" + peer],
            stdout=self.log, stderr=subprocess.STDOUT)
        g.wait_port(self.port, self.proc, "etcd " + name)
        deadline = time.time() + 15
        while time.time() < deadline and ctl(self.port, ["endpoint", "health"])[0] != 0:
            time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.log.close()


def ctl(port, args, stdin=None, timeout=60):
    env = dict(os.environ, ETCDCTL_API="3")
    cmd = [ETCDCTL] + (["--endpoints", "127.0.0.1:%d" % port] if port else []) + args
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def must(r, what):
    assert r[0] == 0, "%s: %r" % (what, r)
    return r[1]


def util(args):
    p = subprocess.run([KETCHUTL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def dump(port, lo, hi):
    p = subprocess.run(["/usr/bin/python3", "-c", DUMP, str(port), str(lo), str(hi)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return json.loads(p.stdout)


def fill(port):
    p = subprocess.run(["/usr/bin/python3", "-c", FILL, str(port)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    c, r = p.stdout.split()
    return int(c), int(r)


STATE = {}


def setup():
    if STATE:
        return STATE
    tmp = tempfile.mkdtemp(prefix="ketch-etcd-migrate-")
    STATE["tmp"] = tmp
    e1 = Etcd(tmp, "e1")
    STATE["e1"] = e1
    STATE["c"], STATE["r"] = fill(e1.port)
    s1 = os.path.join(tmp, "s1.db")
    must(ctl(e1.port, ["snapshot", "save", s1]), "snapshot save")
    STATE["s1"] = s1
    STATE["want"] = dump(e1.port, STATE["c"] - 1, STATE["r"])
    return STATE


def close():
    for k in ("e1", "e2"):
        if k in STATE:
            STATE[k].stop()
    for k in ("bridge",):
        if k in STATE and STATE[k].poll() is None:
            STATE[k].terminate()
            STATE[k].wait(10)
    for k in ("k1",):
        if k in STATE:
            STATE[k].stop()
    if "tmp" in STATE:
        shutil.rmtree(STATE["tmp"], ignore_errors=True)


def test_migrate_from_etcd_serves_the_same_history():
    st = setup()
    tmp, c, r = st["tmp"], st["c"], st["r"]
    peer = free_port()
    kdir = os.path.join(tmp, "k1")
    os.makedirs(kdir)
    rc, out, err = util(["migrate", "from-etcd", st["s1"], "--data-dir", os.path.join(kdir, "d"),
                         "--name", "k1", "--initial-cluster", "k1=http://127.0.0.1:%d" % peer,
                         "--initial-cluster-token", "migrated"])
    assert rc == 0 and "revision %d, compacted at %d" % (r, c) in out, (rc, out, err)
    k1 = Member(data_dir=kdir, name="k1", peer_port=peer,
                extra=["--initial-cluster", "k1=http://127.0.0.1:%d" % peer])
    st["k1"] = k1
    gport = free_port()
    st["bridge"] = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr",
                                     "127.0.0.1:%d" % gport, "--endpoints", k1.endpoint],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    g.wait_port(gport, st["bridge"], "ketch-grpc")
    st["gport"] = gport
    got = dump(gport, c - 1, r)
    want = st["want"]
    assert want[str(c - 1)].startswith("error") and want[str(c)] != [], want[str(c - 1)]
    bad = [k for k in want if want[k] != got.get(k)]
    assert not bad, "differ at %s: etcd %r ketch %r" % (bad[0], want[bad[0]], got.get(bad[0]))
    # what was compared: the compacted revision, 20+ kept ones, leases with and without keys
    assert r - c >= 20 and len(want[str(c)]) > 250 and "OUT_OF_RANGE" in want[str(c - 1)], (c, r)
    assert sorted(len(l[2]) for l in want["leases"]) == [0, 1, 2], want["leases"]
    print("# compared %d revisions (%d..%d) and %d leases" % (r - c + 2, c - 1, r, len(want["leases"])))
    # etcdctl's own output, header ids and terms aside, at a few revisions
    for rev in (c, (c + r) // 2, r):
        a = ctl(st["e1"].port, ["get", "", "--prefix", "-w", "json", "--rev", str(rev)])
        b = ctl(gport, ["get", "", "--prefix", "-w", "json", "--rev", str(rev)])
        ja, jb = json.loads(a[1]), json.loads(b[1])
        assert ja["kvs"] == jb["kvs"] and ja["header"]["revision"] == jb["header"]["revision"], rev
    # the native path (ketchctl) at the current revision
    p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", k1.endpoint, "get", "",
                        "--prefix", "-w", "json"], stdout=subprocess.PIPE, timeout=60)
    assert json.loads(p.stdout)["kvs"] == json.loads(ctl(st["e1"].port, ["get", "", "--prefix", "-w", "json"])[1])["kvs"]


def test_snapshot_through_ketch_grpc_restores_into_etcd():
    st = setup()
    if "gport" not in st:
        test_migrate_from_etcd_serves_the_same_history()
    tmp, c, r = st["tmp"], st["c"], st["r"]
    s2 = os.path.join(tmp, "s2.db")
    out = must(ctl(st["gport"], ["snapshot", "save", s2]), "snapshot save through ketch-grpc")
    assert b"Snapshot saved at" in out, out
    es = json.loads(must(ctl(None, ["snapshot", "status", s2, "-w", "json"]), "etcdctl snapshot status"))
    rc, ks, err = util(["snapshot", "status", s2, "-w", "json"])
    assert rc == 0 and json.loads(ks) == es, (es, ks, err)
    assert es["revision"] == r and es["totalKey"] > 0 and es["totalSize"] + 32 == os.path.getsize(s2), es
    e2dir = os.path.join(tmp, "e2")
    peer = free_port()
    must(ctl(None, ["snapshot", "restore", s2, "--data-dir", e2dir, "--name", "e2",
                    "--initial-cluster", "e2=http://127.0.0.1:%d" % peer,
                    "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer]), "etcdctl snapshot restore")
    # Etcd() picks its own peer port: start it on the restored dir with that one
    e2 = Etcd.__new__(Etcd)
    e2.port, e2.peer, e2.dir = free_port(), peer, e2dir
    e2.log = open(os.path.join(tmp, "e2.log"), "wb")
    client, purl = "http://127.0.0.1:%d" % e2.port, "http://127.0.0.1:%d" % peer
    e2.proc = subprocess.Popen([ETCD, "--name", "e2", "--data-dir", e2dir, "--listen-client-urls", client,
                                "--advertise-client-urls", client, "--listen-peer-urls", purl,
                                "--initial-advertise-peer-urls", purl, "--initial-cluster", "e2=" + purl],
                               stdout=e2.log, stderr=subprocess.STDOUT)
    st["e2"] = e2
    g.wait_port(e2.port, e2.proc, "etcd e2")
    deadline = time.time() + 15
    while time.time() < deadline and ctl(e2.port, ["endpoint", "health"])[0] != 0:
        time.sleep(0.1)
    got = dump(e2.port, c - 1, r)
    want = st["want"]
    bad = [k for k in want if want[k] != got.get(k)]
    assert not bad, "differ at %s: etcd %r restored %r" % (bad[0], want[bad[0]], got.get(bad[0]))
    # ketchutl takes the same file
    rc, out, err = util(["snapshot", "restore", s2, "--data-dir", os.path.join(tmp, "k2")])
    assert rc == 0 and "revision %d" % r in out, (out, err)


def test_restore_with_member_flags():
    """`ketchutl snapshot restore` of a ketch snapshot with etcdutl's member
    flags: the member started there has those members and the data, whatever
    its own --initial-cluster says; bad flags are refused, nothing written."""
    st = setup()
    if "k1" not in st:
        test_migrate_from_etcd_serves_the_same_history()
    tmp = st["tmp"]
    snap = os.path.join(tmp, "k1.snap")
    p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", st["k1"].endpoint, "snapshot",
                        "save", snap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr
    base = os.path.join(tmp, "r1")
    os.makedirs(base)
    peer = free_port()
    rc, out, err = util(["snapshot", "restore", snap, "--data-dir", os.path.join(base, "bad"),
                         "--name", "r1", "--initial-cluster", "other=http://127.0.0.1:%d" % peer])
    assert rc == 1 and "r1" in err and not os.path.exists(os.path.join(base, "bad")), (out, err)
    rc, out, err = util(["snapshot", "restore", snap, "--data-dir", os.path.join(base, "d"), "--name", "r1",
                         "--initial-cluster", "r1=http://127.0.0.1:%d" % peer,
                         "--initial-cluster-token", "restored"])
    assert rc == 0 and "restored snapshot" in out, (out, err)
    r1 = Member(data_dir=base, name="r1", peer_port=peer,
                extra=["--initial-cluster", "r1=http://127.0.0.1:%d,x=http://127.0.0.1:1" % peer])
    try:
        p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", r1.endpoint, "member", "list"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        lines = p.stdout.decode().strip().splitlines()
        assert len(lines) == 1 and ", r1, http://127.0.0.1:%d," % peer in lines[0], p.stdout
        p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", r1.endpoint, "get", "h",
                            "--print-value-only"], stdout=subprocess.PIPE, timeout=60)
        assert p.stdout == b"at-c\n", p.stdout
    finally:
        r1.stop()


def leaf_page_of_key_bucket(path):
    """A leaf page of etcd's "key" bucket with elements (a page number)."""
    with open(path, "rb") as f:
        d = f.read()
    ps = struct.unpack_from("<I", d, 16 + 8)[0]
    metas = [struct.unpack_from("<QQQQQ", d, i * ps + 16 + 16) for i in (0, 1)]  # root, seq, fl, pgid, txid
    root = max(metas, key=lambda m: m[4])[0]

    def elems(p):
        flags, count = struct.unpack_from("<HH", d, p * ps + 8)
        return flags, count

    flags, count = elems(root)
    for i in range(count):
        e = root * ps + 16 + 16 * i
        f, pos, ks, vs = struct.unpack_from("<IIII", d, e)
        if d[e + pos:e + pos + ks] == b"key":
            p = struct.unpack_from("<Q", d, e + pos + ks)[0]
            while True:
                fl, cnt = elems(p)
                if fl & 2 and cnt:
                    return d, ps, p
                e = p * ps + 16
                p = struct.unpack_from("<Q", d, e + 8)[0]
    raise AssertionError("no key bucket")


def test_member_db_and_damaged_files():
    st = setup()
    tmp = st["tmp"]
    e1 = st.pop("e1")
    e1.stop()  # its bbolt file is then whole
    db = os.path.join(e1.dir, "member", "snap", "db")
    rc, out, err = util(["migrate", "from-etcd", db, "--data-dir", os.path.join(tmp, "m1")])
    assert rc == 0 and "revision %d, compacted at %d" % (st["r"], st["c"]) in out, (out, err)
    rc, out, err = util(["snapshot", "status", db, "-w", "json"])
    assert rc == 0 and json.loads(out)["revision"] == st["r"], (out, err)
    # a leaf page's element pointing outside its page: the page is named
    d, ps, p = leaf_page_of_key_bucket(db)
    bad = bytearray(d)
    struct.pack_into("<I", bad, p * ps + 16 + 4, 0x7fff0000)
    cases = {"leaf": (bytes(bad), "page %d: leaf element 0 runs past" % p),
             "truncated": (d[:len(d) // 2], "page 0: its page count runs past the end of the file"),
             "not-bbolt": (b"\0" * 8192, "bad magic (not a bbolt file)"),
             "snapshot-sha": (open(st["s1"], "rb").read()[:-1] + b"\x00", "SHA-256 at its end does not match"),
             "empty": (b"", "empty file")}
    for name, (data, want) in cases.items():
        path = os.path.join(tmp, "bad-" + name)
        with open(path, "wb") as f:
            f.write(data)
        ddir = os.path.join(tmp, "out-" + name)
        rc, out, err = util(["migrate", "from-etcd", path, "--data-dir", ddir])
        assert rc == 1 and want in err and err.startswith("Error: "), (name, rc, out, err)
        assert not os.path.exists(ddir), (name, "data dir left behind")
    # status of the damaged page names it too
    rc, out, err = util(["snapshot", "status", os.path.join(tmp, "bad-leaf")])
    assert rc == 1 and "page %d" % p in err, (out, err)


if __name__ == "__main__":
    for path in (KETCHUTL, ETCD, ETCDCTL):
        if not os.access(path, os.X_OK):
            print("FAIL etcd_migrate_test/setup: %s is missing" % path)
            sys.exit(1)
    try:
        run_tests([test_migrate_from_etcd_serves_the_same_history,
                   test_snapshot_through_ketch_grpc_restores_into_etcd,
                   test_restore_with_member_flags, test_member_db_and_damaged_files])
    finally:
        close()
