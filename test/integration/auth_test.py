"""test/integration/auth_test.py — users, roles and permissions against etcd 3.4
(issue 16), side by side.

A real etcd 3.4 (Debian etcd-server, one member) and a real 3-member ketch
cluster get the SAME setup (users root/alice/bob/carol, roles ra/rb with key,
range, prefix and from-key permissions, seed keys) through etcdctl and
ketchctl, then auth is enabled on both and a catalogue of operations runs as
each user: etcdctl against etcd, ketchctl against ketch (each ketchctl call
goes to the next member in turn, so what one member was told holds on the
others). stdout, the "Error:" lines of stderr and exit codes are compared
after normalizing what legitimately differs (lease ids, member and cluster
ids, ports, times, etcdctl's clientv3 warning log lines, grpc-go's
"rpc error: code = X desc = " wrapping of a canceled watch's reason).

Where etcd 3.4.23 has a hole (an operation it lets a user do that it should
not), the case is marked STRICTER: etcd must allow it (so the test notices
when etcd is fixed) and ketch must answer "permission denied".

Then, natively: the auth store survives a restart of every member and is
installed with a snapshot on a member that fell behind.

Bounded: every command has a timeout; ~40 s.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from harness import Conn, ServerError, free_port, io_threads_flag  # noqa: E402

AUTHENTICATE, ALARM = 59, 40
EPERMDENIED, EINVALIDTOKEN = 38, 39

BIN = os.path.abspath(os.environ.get("KETCH_BIN") or
                      os.path.join(os.path.dirname(__file__), "..", "..", "bin"))
TIMEOUT = 20
NAMES = ["m0", "m1", "m2"]
PW = {"root": "rootpw", "alice": "alicepw", "bob": "bobpw", "carol": "carolpw"}

failures = 0


def report(name, why=None):
    global failures
    if why is None:
        print("ok auth/%s" % name)
    else:
        failures += 1
        print("FAIL auth/%s: %s" % (name, why))
    sys.stdout.flush()


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ETCDCTL_") and not k.startswith("KETCHCTL_")}
    env["ETCDCTL_API"] = "3"
    return env


class Side:
    """etcd (one member) or ketch (three) and the CLI that talks to it."""

    def __init__(self, kind, n, extra=()):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="auth-it-%s-" % kind)
        self.names = NAMES[:n]
        self.cports = [free_port() for _ in self.names]
        self.pports = [free_port() for _ in self.names]
        self.eps = ["127.0.0.1:%d" % p for p in self.cports]
        self.ic = ",".join("%s=http://127.0.0.1:%d" % (nm, p)
                           for nm, p in zip(self.names, self.pports))
        self.ctl = shutil.which("etcdctl") if kind == "etcd" else os.path.join(BIN, "ketchctl")
        self.server = shutil.which("etcd") if kind == "etcd" else os.path.join(BIN, "ketch")
        self.extra = list(extra)
        self.procs = [None] * n
        self.logs = [None] * n
        self.turn = 0
        self.leases = {}  # the catalogue's lease names -> this side's hex id
        for i in range(n):
            self.start(i, "new")

    def start(self, i, state):
        name = self.names[i]
        curl, purl = "http://" + self.eps[i], "http://127.0.0.1:%d" % self.pports[i]
        if self.logs[i]:
            self.logs[i].close()
        self.logs[i] = open(os.path.join(self.dir, "%s.log" % name), "ab")
        self.procs[i] = subprocess.Popen(
            [self.server, "--name", name, "--data-dir", os.path.join(self.dir, name),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", self.ic, "--initial-cluster-token", "auth-" + self.kind,
             "--initial-cluster-state", state,
             "--heartbeat-interval", "50", "--election-timeout", "500"] +
            (io_threads_flag(self.extra) if self.kind == "ketch" else []) + self.extra,
            stdout=self.logs[i], stderr=subprocess.STDOUT, cwd=self.dir)

    def stop(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def run(self, args, user=None, stdin=None, eps=None, timeout=TIMEOUT, password=None):
        """One CLI call as `user` (its password from PW unless given)."""
        if eps is None:
            if self.kind == "ketch":  # each call to the next member
                eps = [self.eps[self.turn % len(self.eps)]]
                self.turn += 1
            else:
                eps = self.eps
        cmd = [self.ctl, "--endpoints", ",".join(eps)]
        if user:
            cmd += ["--user", "%s:%s" % (user, password if password is not None else PW[user])]
        cmd += [self.leases.get(a, a) for a in args]
        try:
            p = subprocess.run(cmd, input=stdin.encode() if stdin is not None else None,
                               stdin=None if stdin is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(),
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return "timeout", (e.stdout or b"").decode("utf-8", "replace"), ""
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def wait_ready(self, timeout=20.0, user=None):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            rc, out, err = self.run(["endpoint", "status", "-w", "json", "--command-timeout", "1s"],
                                    user, eps=self.eps, timeout=5)
            last = out + err
            if rc == 0:
                st = json.loads(out)
                leaders = {s["Status"].get("leader", 0) for s in st}
                if len(st) == len(self.eps) and len(leaders) == 1 and 0 not in leaders:
                    return
            time.sleep(0.1)
        raise RuntimeError("%s not ready: %s" % (self.kind, last))

    def norm(self, text):
        for nm, p in zip(self.names, self.cports):
            text = text.replace("127.0.0.1:%d" % p, "<ep:%s>" % nm)
        for name, lid in self.leases.items():
            text = text.replace(lid, "<%s>" % name)
        text = re.sub(r"took = [0-9.]+[µnm]?s", "took = <t>", text)
        text = re.sub(r"remaining\(-?\d+s\)", "remaining(<n>)", text)
        text = re.sub(r"rpc error: code = \w+ desc = ", "", text)
        text = re.sub(r'"(ClusterID|MemberID)" : \d+', r'"\1" : <id>', text)
        text = re.sub(r'"(cluster_id|member_id)":\d+', r'"\1":<id>', text)
        return text

    def close(self):
        for i in range(len(self.procs)):
            self.stop(i)
        for log in self.logs:
            if log:
                log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Bridge(Side):
    """etcdctl through ketch-grpc in front of its own 1-member ketch."""

    def __init__(self):
        self.backend = Side("ketch", 1)
        self.kind = "grpc"
        self.dir = self.backend.dir
        self.names = ["m0"]
        self.cports = [free_port()]
        self.eps = ["127.0.0.1:%d" % self.cports[0]]
        self.ctl = shutil.which("etcdctl")
        self.leases = {}
        self.turn = 0
        self.log = open(os.path.join(self.dir, "bridge.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "ketch-grpc"), "--listen-addr", self.eps[0], "--endpoints",
             self.backend.eps[0]], stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=20.0, user=None):
        self.backend.wait_ready(timeout, user)
        Side.wait_ready(self, timeout, user)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        with open(os.path.join(self.dir, "bridge.log"), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        self.backend.close()
        if "Sanitizer" in text or "runtime error" in text:
            report("bridge-clean", "sanitizer report in ketch-grpc's log:\n" + text[-3000:])


def err_lines(text):
    return "".join(l for l in text.splitlines(True) if not l.startswith('{"level":'))


E = K = G = None


def compare(name, user, args, stdin=None, stricter=False, timeout=TIMEOUT):
    """The same call on every side: etcdctl -> etcd, ketchctl -> ketch,
    etcdctl -> ketch-grpc -> ketch; equal outcomes, or (stricter) etcd 3.4
    allows it and both ketch sides deny it."""
    try:
        er, kr, gr = (E.run(args, user, stdin, timeout=timeout),
                      K.run(args, user, stdin, timeout=timeout),
                      G.run(args, user, stdin, timeout=timeout))
    except subprocess.TimeoutExpired as e:
        return report(name, "timed out: %s" % e)

    def norm(side, r):
        rc, out, err = r
        # ketchctl's calls go to the members in turn: which one answered is not compared
        return rc, side.norm(out), re.sub(r"<ep:m\d>", "<ep>", side.norm(err_lines(err)))
    (erc, eo, ee) = norm(E, er)
    for what, side, r in (("ketchctl", K, kr), ("etcdctl via ketch-grpc", G, gr)):
        (krc, ko, ke) = norm(side, r)
        if stricter:
            if erc not in (0, "timeout") or "permission denied" in ee:
                return report(name, "etcd 3.4 no longer allows this (rc %s, %r): drop STRICTER" %
                              (erc, ee))
            if krc in (0, "timeout") or "etcdserver: permission denied" not in ke:
                return report(name, "%s: ketch allowed it: rc %s, out %r, err %r" %
                              (what, krc, ko, ke))
            continue
        if eo != ko:
            return report(name, "stdout: etcdctl %r, %s %r" % (eo, what, ko))
        if ee != ke:
            return report(name, "stderr: etcdctl %r, %s %r" % (ee, what, ke))
        if erc != krc:
            return report(name, "exit code: etcdctl %s, %s %s" % (erc, what, krc))
    report(name)


def grant_lease(name, user):
    """lease grant on both sides; remembers each side's id under `name`."""
    for side in (E, K, G):
        rc, out, err = side.run(["lease", "grant", "600"], user)
        m = re.match(r"lease ([0-9a-f]+) granted with TTL\(600s\)", out)
        if rc != 0 or not m:
            return report("lease-grant-%s" % name, "%s: %s %r %r" % (side.kind, rc, out, err))
        side.leases[name] = m.group(1)
    report("lease-grant-%s" % name)


SETUP = [
    ["user", "add", "root:rootpw"],
    ["user", "add", "alice:alicepw"],
    ["user", "add", "bob:bobpw"],
    ["user", "add", "carol:carolpw"],
    ["role", "add", "ra"],
    ["role", "grant-permission", "ra", "readwrite", "/a/", "--prefix"],
    ["role", "grant-permission", "ra", "read", "/r1", "/r5"],
    ["role", "grant-permission", "ra", "readwrite", "lk", "--prefix"],
    ["role", "add", "rb"],
    ["role", "grant-permission", "rb", "write", "/w"],
    ["role", "grant-permission", "rb", "read", "/z", "--from-key"],
    ["role", "grant-permission", "rb", "readwrite", "/b/", "--prefix"],
    ["user", "grant-role", "alice", "ra"],
    ["user", "grant-role", "bob", "rb"],
    ["role", "get", "ra"],
    ["role", "get", "rb", "-w", "fields"],
    ["user", "get", "alice"],
    ["user", "list"],
    ["role", "list"],
    ["role", "list", "-w", "json"],
] + [["put", k, "v" + k] for k in
     ("/a/1", "/a/2", "/a0", "/r0", "/r1", "/r3", "/r4", "/r5", "/w", "/y", "/z", "/zz", "/b/1")]

READS = [
    ["get", "/a/1"], ["get", "/a/", "--prefix"], ["get", "/a", "--prefix"],
    ["get", "/r1", "/r5"], ["get", "/r1", "/r6"], ["get", "/r0", "/r5"], ["get", "/r4"],
    ["get", "/r5"], ["get", "/z", "--from-key"], ["get", "/y", "--from-key"],
    ["get", "/b/", "--prefix", "--keys-only"], ["get", "/w"], ["get", "", "--from-key"],
    ["get", "/a/1", "--consistency=s"], ["get", "/a/", "--prefix", "-w", "fields"],
    ["get", "/r1", "/r5", "-w", "json", "--keys-only"],
]

CATALOGUE = [
    # writes, prev_kv needs read too
    ("alice", ["put", "/a/3", "x"]), ("alice", ["put", "/r1", "x"]),
    ("alice", ["put", "/a/3", "y", "--prev-kv"]), ("alice", ["put", "/w", "x"]),
    ("bob", ["put", "/w", "b"]), ("bob", ["put", "/w", "b2", "--prev-kv"]),
    ("bob", ["put", "/b/1", "b", "--prev-kv"]), ("bob", ["put", "/a/9", "x"]),
    ("carol", ["put", "/a/1", "x"]), ("root", ["put", "/a/4", "r"]),
    ("alice", ["del", "/a/3"]), ("alice", ["del", "/r1"]), ("bob", ["del", "/w", "--prev-kv"]),
    ("bob", ["del", "/b/1", "--prev-kv"]), ("alice", ["del", "/a", "--prefix"]),
    ("alice", ["del", "/a/", "--from-key"]),
    # txn: every compare needs read, every op of both branches is checked
    ("alice", ["txn"], 'value("/a/1") = "v/a/1"\n\nput /a/t ok\n\nget /r1\n\n'),
    ("alice", ["txn"], 'value("/w") = "x"\n\nput /a/t ok\n\n\n'),
    ("alice", ["txn"], 'value("/a/1") = "v/a/1"\n\nput /r1 no\n\n\n'),
    ("alice", ["txn"], 'value("/a/1") = "v/a/1"\n\nget /a/1\n\nput /w never-runs\n\n'),
    ("alice", ["txn"], 'mod("/r3") > "0"\n\nget /r3\n\nget /a/1\n\n'),
    ("bob", ["txn"], 'value("/z") = "v/z"\n\nput /w t\nget /zz\n\n\n'),
    ("bob", ["txn"], '\n\ndel /w --prev-kv\n\n\n'),
    ("carol", ["txn"], '\n\n\n\n'),
    # user and role management: root's, except oneself and one's roles
    ("alice", ["user", "get", "alice"]), ("alice", ["user", "get", "bob"]),
    ("alice", ["role", "get", "ra"]), ("alice", ["role", "get", "rb"]),
    ("alice", ["user", "list"]), ("alice", ["role", "list"]),
    ("alice", ["user", "add", "eve:evepw"]), ("alice", ["role", "add", "rx"]),
    ("alice", ["user", "grant-role", "alice", "rb"]),
    ("alice", ["role", "grant-permission", "ra", "readwrite", "/", "--from-key"]),
    ("alice", ["user", "delete", "bob"]), ("alice", ["role", "delete", "rb"]),
    ("alice", ["auth", "disable"]), ("bob", ["user", "passwd", "bob", "--interactive=false"], "x\n"),
    ("root", ["user", "get", "bob"]), ("root", ["role", "get", "rb"]),
    ("root", ["user", "add", "dave:davepw"]), ("root", ["user", "add", "dave:davepw"]),
    ("root", ["user", "get", "nobody"]), ("root", ["role", "get", "nothere"]),
    ("root", ["user", "grant-role", "dave", "nothere"]),
    ("root", ["user", "revoke-role", "dave", "ra"]), ("root", ["user", "delete", "root"]),
    ("root", ["user", "revoke-role", "root", "root"]), ("root", ["role", "delete", "root"]),
    ("root", ["role", "revoke-permission", "ra", "/nothing"]),
    ("root", ["user", "delete", "dave"]), ("root", ["user", "delete", "dave"]),
    ("root", ["user", "add", ":x"]), ("root", ["role", "add", ""]),
    # member and maintenance calls
    ("alice", ["member", "add", "mx", "--peer-urls", "http://127.0.0.1:1"]),
    ("alice", ["member", "remove", "1234"]), ("alice", ["member", "update", "1234",
                                                         "--peer-urls", "http://127.0.0.1:1"]),
    ("alice", ["member", "promote", "1234"]), ("alice", ["endpoint", "hashkv"]),
    ("alice", ["defrag"]), ("alice", ["snapshot", "save", "/dev/null"]),
    ("alice", ["alarm", "list"]),
    ("carol", ["lease", "list"]),
    # lock: the name's keys
    ("alice", ["lock", "lk", "echo", "held"]), ("bob", ["lock", "lk", "echo", "held"]),
    ("bob", ["lock", "/b/l", "echo", "held"]),
]

# etcd 3.4.23 lets any authenticated user do these; ketch needs root (etcd compacts
# here: later cases do not read history below revision 3)
STRICTER = [
    ("alice", ["compaction", "3"]),
]


def run_lease_cases():
    grant_lease("L1", "alice")
    compare("lease-put-alice", "alice", ["put", "/a/l1", "v", "--lease", "L1"])
    compare("lease-put-bob-on-alice-lease", "bob", ["put", "/w", "v", "--lease", "L1"])
    compare("lease-ttl-bob", "bob", ["lease", "timetolive", "L1"])
    # CVE-2023-32082: etcd 3.4.23 tells anyone the keys attached to a lease
    compare("lease-ttl-keys-bob-STRICTER", "bob", ["lease", "timetolive", "L1", "--keys"],
            stricter=True)
    compare("lease-ttl-keys-alice", "alice", ["lease", "timetolive", "L1", "--keys"])
    compare("lease-revoke-bob", "bob", ["lease", "revoke", "L1"])
    compare("lease-revoke-alice", "alice", ["lease", "revoke", "L1"])
    grant_lease("L2", "bob")
    compare("lease-revoke-empty-bob", "bob", ["lease", "revoke", "L2"])


def run_watch_cases():
    # a watch the user may not read is canceled at once; one it may runs on
    compare("watch-denied", "bob", ["watch", "/a/1"], timeout=3)
    compare("watch-prefix-straddling", "alice", ["watch", "/a", "--prefix"], timeout=3)
    compare("watch-range-allowed", "bob", ["watch", "/z", "/zzz", "--rev", "5"], timeout=2)


def same_refusal(name, user, password=None):
    """A refusal at login: etcdctl's exit code and Error line from etcd, and
    the same from ketchctl and from etcdctl through ketch-grpc."""
    er = E.run(["get", "/a/1"], user, password=password)
    want = (er[0], E.norm(err_lines(er[2])))
    for what, side in (("ketchctl", K), ("ketch-grpc", G)):
        r = side.run(["get", "/a/1"], user, password=password)
        got = (r[0], side.norm(err_lines(r[2])))
        if got != want or want[0] == 0:
            return report(name, "etcd %r, %s %r" % (want, what, got))
    report(name)


def run_credential_cases():
    same_refusal("wrong-password", "alice", "nope")
    compare("no-such-user", None, ["--user", "nobody:x", "get", "/a/1"])
    compare("no-user-at-all", None, ["get", "/a/1"])
    # a password change and a deletion end the old credentials at once
    compare("passwd-alice-by-root", "root", ["user", "passwd", "alice", "--interactive=false"],
            stdin="alicepw2\n")
    same_refusal("old-password-refused", "alice")
    PW["alice"] = "alicepw2"
    compare("new-password-works", "alice", ["get", "/a/1"])
    compare("delete-carol", "root", ["user", "delete", "carol"])
    compare("deleted-user-refused", "carol", ["get", "/a/1"])
    # a permission revoked is gone for the next request
    compare("revoke-prefix", "root", ["role", "revoke-permission", "ra", "/a/", "--prefix"])
    compare("revoked-read", "alice", ["get", "/a/1"])
    compare("regrant-prefix", "root", ["role", "grant-permission", "ra", "read", "/a/", "--prefix"])
    compare("regranted-read", "alice", ["get", "/a/1"])
    compare("regranted-read-only", "alice", ["put", "/a/1", "x"])


def run_alarm_cases():
    """Raising and clearing alarms is root's: etcd 3.4.23 lets any user
    (STRICTER). etcd through python3-etcd3's stubs, ketch natively."""
    import etcd3
    from etcd3.etcdrpc import rpc_pb2
    c = etcd3.client(port=E.cports[0], user="alice", password=PW["alice"])
    c.call_credentials = None  # grpc refuses call credentials on h2c; the token goes as metadata
    mid = json.loads(E.run(["endpoint", "status", "-w", "json"], "root")[1])[0]["Status"]["header"][
        "member_id"]
    req = rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=mid,
                               alarm=rpc_pb2.NOSPACE)
    c.maintenancestub.Alarm(req, 5, metadata=c.metadata)
    etcd_raised = E.run(["alarm", "list"], "root")[1]
    E.run(["alarm", "disarm"], "root")
    c.close()
    k = Conn(K.cports[0])
    k.call(AUTHENTICATE, {"name": b"alice", "password": PW["alice"].encode()})
    try:
        k.call(ALARM, {"action": 1, "member_id": 1, "alarm": 1})
        denied = None
    except ServerError as e:
        denied = e
    k.close()
    ketch_raised = K.run(["alarm", "list"], "root")[1]
    if "NOSPACE" not in etcd_raised:
        report("alarm-activate-STRICTER", "etcd 3.4 refused it now: drop STRICTER")
    elif denied is None or denied.code != EPERMDENIED or ketch_raised:
        report("alarm-activate-STRICTER", "ketch: %r, alarms %r" % (denied, ketch_raised))
    else:
        report("alarm-activate-STRICTER")


def py_client(side, user):
    """A python3-etcd3 client of side (etcd, or ketch-grpc) as user."""
    import etcd3
    kw = {"user": user, "password": PW[user]} if user else {}
    c = etcd3.client(port=side.cports[0], timeout=5, **kw)
    # grpc refuses call credentials on h2c: the token goes as plain metadata
    c.call_credentials = c.watcher._credentials = None
    return c


def py_outcome(fn, c, st):
    """What a python3-etcd3 call gave, without what legitimately differs
    (revisions, ids, the member's numbers): its result reduced to keys and
    values, or its error (etcd3's exception class; for the codes it does not
    translate, grpc's code and details)."""
    import grpc
    try:
        return ("ok", fn(c, st))
    except grpc.RpcError as e:
        return ("rpc", str(e.code()), e.details())
    except Exception as e:  # noqa: etcd3 turns some codes into its own classes
        return ("exc", type(e).__name__)


def etcdrpc():
    import etcd3.etcdrpc
    return etcd3.etcdrpc


def kvs(it):
    return sorted((m.key, v) for v, m in it)


def prev(r):
    return (r.prev_kv.key, r.prev_kv.value) if r.HasField("prev_kv") else None


def py_lease_keys(c, st):
    r = c.get_lease_info(st["lease"])  # TimeToLive with keys
    return (r.TTL > 0, sorted(r.keys))


def py_txn(c, st, key, want, put_key):
    t = c.transactions
    ok, rs = c.transaction(compare=[t.value(key) == want], success=[t.put(put_key, "t")],
                           failure=[t.get(key)])
    return (ok, len(rs))


PY_OPS = [
    ("get", lambda c, st: c.get("/a/1")[0]),
    ("get-range-inside", lambda c, st: kvs(c.get_range("/r1", "/r5"))),
    ("get-range-straddling", lambda c, st: kvs(c.get_range("/r0", "/r5"))),
    ("get-prefix", lambda c, st: kvs(c.get_prefix("/a/"))),
    ("get-prefix-sibling", lambda c, st: kvs(c.get_prefix("/a"))),
    ("get-write-only", lambda c, st: c.get("/w")[0]),
    ("get-from-key", lambda c, st: kvs(c.get_range("/z", "\0"))),
    ("get-all", lambda c, st: kvs(c.get_all())),
    ("put", lambda c, st: c.put("/a/py", "x") and None),
    ("put-prev-kv", lambda c, st: prev(c.put("/a/py", "y", prev_kv=True))),
    ("put-read-only", lambda c, st: c.put("/r3", "x") and None),
    ("put-write-only-prev-kv", lambda c, st: prev(c.put("/w", "p", prev_kv=True))),
    ("put-write-only", lambda c, st: c.put("/w", "p") and None),
    ("put-if-not-exists", lambda c, st: c.put_if_not_exists("/b/py", "n")),
    ("replace", lambda c, st: c.replace("/a/py", "y", "z")),
    ("txn-readable", lambda c, st: py_txn(c, st, "/a/1", "v/a/1", "/a/pt")),
    ("txn-compare-unreadable", lambda c, st: py_txn(c, st, "/w", "p", "/a/pt")),
    ("txn-put-unwritable", lambda c, st: py_txn(c, st, "/a/1", "v/a/1", "/r1")),
    ("txn-from-key-compare", lambda c, st: py_txn(c, st, "/z", "v/z", "/b/pt")),
    ("delete-prev-kv", lambda c, st: prev(c.delete("/a/py", prev_kv=True,
                                                    return_response=True))),
    ("delete-prefix", lambda c, st: c.delete_prefix("/b/p").deleted),
    ("delete-write-only", lambda c, st: c.delete("/w")),
    ("lease-grant", lambda c, st: st.__setitem__("lease", c.lease(600).id)),
    ("lease-put", lambda c, st: c.put("/a/pl", "l", lease=st["lease"]) and None),
    ("lease-time-to-live-keys", py_lease_keys),
    ("lease-revoke", lambda c, st: c.revoke_lease(st["lease"]) and None),
    ("lock", lambda c, st: c.lock("lk", ttl=5).acquire(timeout=1)),
    ("watch-once", lambda c, st: c.watch_once("/a/1", timeout=0.5)),
    ("status", lambda c, st: c.status().version is not None),
    ("members", lambda c, st: len(list(c.members))),
    ("alarms", lambda c, st: list(c.list_alarms())),
    ("hash", lambda c, st: c.hash() is not None),  # etcd3 sends no token with it
    ("defragment-bad-token", lambda c, st: c.maintenancestub.Defragment(
        etcdrpc().DefragmentRequest(), 5, metadata=(("token", "bogus.1"),)) and None),
    ("range-bad-token", lambda c, st: c.kvstub.Range(
        etcdrpc().RangeRequest(key=b"/a/1"), 5, metadata=(("token", "bogus.1"),)).count),
    ("defragment", lambda c, st: c.defragment() and None),
    ("add-member", lambda c, st: c.add_member(["http://127.0.0.1:1"]) and None),
]

# etcd 3.4.23 tells anyone a lease's keys (CVE-2023-32082): ketch needs read on them
PY_STRICTER = {("bob", "lease-time-to-live-keys"), ("carol", "lease-time-to-live-keys")}


def run_python_cases():
    """The same catalogue through python3-etcd3 (the library) against etcd 3.4
    and against ketch-grpc, as each user in turn (alice grants a lease and
    attaches a key; the others then try that lease)."""
    etcd_st, grpc_st = {}, {}
    for user in ("alice", "bob", "carol", "root"):
        ce, cg = py_client(E, user), py_client(G, user)
        try:
            for name, fn in PY_OPS:
                if (name, user == "alice") in (("lease-grant", False), ("lease-revoke", True)):
                    continue  # alice grants the lease; the others try it; root revokes it
                if (name, user) == ("add-member", "root"):
                    continue  # a member that never starts: quorum lost
                e, g = py_outcome(fn, ce, etcd_st), py_outcome(fn, cg, grpc_st)
                case = "python3-etcd3 %s %s" % (user, name)
                if (user, name) in PY_STRICTER:
                    if e[0] != "ok" or g[:2] != ("rpc", "StatusCode.PERMISSION_DENIED"):
                        report(case + "-STRICTER", "etcd %r, ketch-grpc %r" % (e, g))
                    else:
                        report(case + "-STRICTER")
                elif e != g:
                    report(case, "etcd %r, ketch-grpc %r" % (e, g))
                else:
                    report(case)
        finally:
            ce.close()
            cg.close()


def native_one_connection():
    """Native connections that keep their binding while root changes what
    their user may do on other connections: each change holds for the very
    next request (the member keeps the permission interval a connection's
    last put or range was allowed in, for as long as the auth store is
    unchanged: core/node_auth.c), denials included; so does a second
    AUTHENTICATE on the same connection. Its own users and role, removed at
    the end."""
    def outcome(fn):
        try:
            fn()
            return "ok"
        except ServerError as e:
            return {EPERMDENIED: "denied", EINVALIDTOKEN: "invalid token"}.get(e.code, e.code)

    def root(args, stdin=None):
        r = K.run(args, "root", stdin=stdin, eps=[K.eps[0]])
        assert r[0] == 0, (args, r)

    def login(k, name, pw):
        k.call(AUTHENTICATE, {"name": name.encode(), "password": pw.encode()})

    def setup():
        for args in (["user", "add", "dave", "--new-user-password", "davepw"], ["role", "add", "rd"],
                     ["role", "grant-permission", "rd", "readwrite", "/d/", "--prefix"],
                     ["user", "grant-role", "dave", "rd"]):
            root(args)

    got = []

    def step(name, fn):
        got.append("%s: %s" % (name, outcome(fn)))

    setup()
    k = Conn(K.cports[0])
    login(k, "dave", "davepw")
    step("put /d/1", lambda: k.put("/d/1", "x"))
    step("put /d/2", lambda: k.put("/d/2", "x"))
    step("get /d/1", lambda: k.get("/d/1"))
    step("get [/d/, /d0)", lambda: k.get("/d/", range_end=b"/d0"))
    step("get [/d/, /e)", lambda: k.get("/d/", range_end=b"/e"))
    step("get /d/ from-key", lambda: k.get("/d/", range_end=b"\0"))
    step("put /e/1", lambda: k.put("/e/1", "x"))
    step("put /d", lambda: k.put("/d", "x"))
    step("put /d/3", lambda: k.put("/d/3", "x"))
    # the same connection as bob (no /d/), then as dave again
    login(k, "bob", PW["bob"])
    step("as bob: put /d/4", lambda: k.put("/d/4", "x"))
    step("as bob: get /d/1", lambda: k.get("/d/1"))
    login(k, "dave", "davepw")
    step("dave again: put /d/4", lambda: k.put("/d/4", "x"))
    root(["role", "revoke-permission", "rd", "/d/", "--prefix"])
    step("revoked: put /d/5", lambda: k.put("/d/5", "x"))
    step("revoked: get /d/1", lambda: k.get("/d/1"))
    root(["role", "grant-permission", "rd", "write", "/d/", "--prefix"])
    step("write only: put /d/5", lambda: k.put("/d/5", "x"))
    step("write only: put /d/6", lambda: k.put("/d/6", "x"))
    step("write only: get /d/1", lambda: k.get("/d/1"))
    root(["user", "revoke-role", "dave", "rd"])
    step("role revoked: put /d/7", lambda: k.put("/d/7", "x"))
    root(["user", "grant-role", "dave", "rd"])
    step("role back: put /d/7", lambda: k.put("/d/7", "x"))
    root(["role", "delete", "rd"])
    step("role deleted: put /d/8", lambda: k.put("/d/8", "x"))
    root(["role", "add", "rd"])
    root(["role", "grant-permission", "rd", "readwrite", "/d/", "--prefix"])
    root(["user", "grant-role", "dave", "rd"])
    step("role again: put /d/8", lambda: k.put("/d/8", "x"))
    root(["user", "passwd", "dave", "--interactive=false"], stdin="davepw2\n")
    step("new password: put /d/9", lambda: k.put("/d/9", "x"))
    login(k, "dave", "davepw2")
    step("logged in again: put /d/9", lambda: k.put("/d/9", "x"))
    root(["user", "delete", "dave"])
    step("user deleted: put /d/10", lambda: k.put("/d/10", "x"))
    root(["user", "add", "dave", "--new-user-password", "davepw2"])
    root(["user", "grant-role", "dave", "rd"])
    step("user added again: put /d/10", lambda: k.put("/d/10", "x"))
    login(k, "dave", "davepw2")
    step("logged in again: put /d/10", lambda: k.put("/d/10", "x"))
    root(["auth", "disable"])
    root(["auth", "enable"])
    step("auth enabled again: put /d/11", lambda: k.put("/d/11", "x"))
    k.close()
    for args in (["user", "delete", "dave"], ["role", "delete", "rd"],
                 ["del", "/d/", "--prefix"]):
        root(args)
    want = ["put /d/1: ok", "put /d/2: ok", "get /d/1: ok", "get [/d/, /d0): ok",
            "get [/d/, /e): denied", "get /d/ from-key: denied", "put /e/1: denied",
            "put /d: denied", "put /d/3: ok",
            "as bob: put /d/4: denied", "as bob: get /d/1: denied", "dave again: put /d/4: ok",
            "revoked: put /d/5: denied", "revoked: get /d/1: denied",
            "write only: put /d/5: ok", "write only: put /d/6: ok",
            "write only: get /d/1: denied",
            "role revoked: put /d/7: denied", "role back: put /d/7: ok",
            "role deleted: put /d/8: denied", "role again: put /d/8: ok",
            "new password: put /d/9: invalid token", "logged in again: put /d/9: ok",
            "user deleted: put /d/10: invalid token", "user added again: put /d/10: invalid token",
            "logged in again: put /d/10: ok", "auth enabled again: put /d/11: invalid token"]
    if got != want:
        return report("native-one-connection-follows-auth-changes",
                      "; ".join("%s (want %s)" % (g, w) for g, w in zip(got, want) if g != w) +
                      (" (%d steps, want %d)" % (len(got), len(want)) if len(got) != len(want) else ""))
    report("native-one-connection-follows-auth-changes")


def native_persistence():
    """Every member restarted: auth is still on, with the same users, roles
    and decisions; a member that fell behind installs the auth store with a
    snapshot."""
    def decisions():
        out = []
        for i in range(3):
            out.append(tuple(K.run(a, u, eps=[K.eps[i]])[0] for u, a in
                             (("alice", ["get", "/a/1"]), ("alice", ["put", "/a/1", "x"]),
                              ("bob", ["get", "/a/1"]), (None, ["get", "/a/1"]),
                              ("root", ["role", "get", "ra"]))))
        return out
    before = decisions()
    want = [(0, 1, 1, 1, 0)] * 3
    if before != want:
        return report("native-decisions-on-every-member", "%r" % before)
    report("native-decisions-on-every-member")
    for i in range(3):
        K.stop(i)
    for i in range(3):
        K.start(i, "existing")
    K.wait_ready(user="root")
    after = decisions()
    if after != want:
        return report("restart-keeps-auth", "%r" % after)
    report("restart-keeps-auth")
    # m2 falls behind by more than the catch-up window: it gets a snapshot
    K.stop(2)
    # granting twice changes nothing: tried again while the two members left
    # elect a leader, or a leader change made the outcome unknown (a loaded
    # machine)
    for _ in range(30):
        compare_out = K.run(["role", "grant-permission", "rb", "read", "/a/1"], "root",
                            eps=[K.eps[0]])
        if not any(w in compare_out[2] for w in ("outcome unknown", "no leader",
                                                   "leader changed", "timed out")):
            break
        time.sleep(0.5)
    for n in range(120):
        K.run(["put", "/a/n%d" % n, "x"], "root", eps=[K.eps[n % 2]])
    K.start(2, "existing")
    K.wait_ready(user="root")
    deadline = time.time() + 15
    while time.time() < deadline:
        got = K.run(["get", "/a/1"], "bob", eps=[K.eps[2]], password=None)
        if got[0] == 0:
            break
        time.sleep(0.2)
    with open(os.path.join(K.dir, "m2.log"), "rb") as f:
        log = f.read().decode("utf-8", "replace")
    if compare_out[0] != 0 or got[0] != 0 or "snapshot" not in log:
        return report("snapshot-install-keeps-auth", "grant %r, bob on m2 %r, log %r" %
                      (compare_out, got, log[-800:]))
    report("snapshot-install-keeps-auth")


def main():
    global E, K, G
    try:
        E = Side("etcd", 1, ["--bcrypt-cost", "4"])
        K = Side("ketch", 3, ["--snapshot-count", "50", "--experimental-snapshot-catchup-entries",
                              "20"])
        G = Bridge()
        E.wait_ready()
        K.wait_ready()
        G.wait_ready()
        for args in SETUP:
            compare("setup " + " ".join(args), None, args)
        compare("auth-enable", None, ["auth", "enable"])
        for u in ("alice", "bob", "carol", "root"):
            for args in READS:
                compare("%s %s" % (u, " ".join(args)), u, args)
        for case in CATALOGUE:
            user, args = case[0], case[1]
            stdin = case[2] if len(case) > 2 else None
            compare("%s %s%s" % (user, " ".join(args), " <%d" % len(stdin) if stdin else ""),
                    user, args, stdin)
        for user, args in STRICTER:
            compare("%s %s STRICTER" % (user, " ".join(args)), user, args, stricter=True)
        run_lease_cases()
        run_alarm_cases()
        run_watch_cases()
        run_python_cases()
        run_credential_cases()
        native_one_connection()
        native_persistence()
    finally:
        for s in (E, K, G):
            if s:
                s.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
