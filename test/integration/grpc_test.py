"""ketch-grpc with real etcd clients: the same etcdctl 3.4 command sequence runs
against a 3-member ketch cluster behind bin/ketch-grpc and against a real etcd
3.4 (Debian etcd-server) started here; outputs (stdout, stderr, exit codes) are
compared after normalizing what legitimately differs (cluster/member ids, raft
term and index, versions, sizes, log timestamps). Nothing is compared with
expectations written by hand, except where only the bridge is involved
(UNIMPLEMENTED services, bad bytes on the port, concurrent load)."""
import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from harness import BIN, STATUS, Conn, Member, ServerError, bridge_loops, free_port, run_tests

TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def wait_port(port, proc, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


class Env:
    """3 ketch members + ketch-grpc, and one etcd, all on free ports; `extra`
    flags go to the ketch members and etcd alike (e.g. a quota)."""

    def __init__(self, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="ketch-grpc-it-")
        self.members, self.procs = [], []
        ports = [(free_port(), free_port()) for _ in range(3)]
        ic = ",".join("n%d=http://127.0.0.1:%d" % (i, ports[i][1]) for i in range(3))
        self.members = [Member(name="n%d" % i, port=ports[i][0], peer_port=ports[i][1], wait=False,
                               extra=["--initial-cluster", ic, "--initial-cluster-token", "grpc-it"]
                               + TIMING + list(extra)) for i in range(3)]
        try:
            for m in self.members:
                m.wait_ready()
            self.wait_leader()
        except Exception:
            for m in self.members:  # no members left running behind a failed setup
                m.kill9()
            raise
        self.grpc_port = free_port()
        eps = ",".join(m.endpoint for m in self.members)
        self.bridge_log = open(os.path.join(self.tmp, "bridge.log"), "wb")
        self.bridge = subprocess.Popen(
            [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % self.grpc_port,
             "--endpoints", eps] + bridge_loops(3),  # etcdctl's connections on 3 loops
            stdout=self.bridge_log, stderr=subprocess.STDOUT)
        self.procs.append(self.bridge)
        wait_port(self.grpc_port, self.bridge, "ketch-grpc")
        self.etcd_port, etcd_peer = free_port(), free_port()
        self.etcd_log = open(os.path.join(self.tmp, "etcd.log"), "wb")
        peer = "http://127.0.0.1:%d" % etcd_peer
        client = "http://127.0.0.1:%d" % self.etcd_port
        self.etcd = subprocess.Popen(
            [ETCD, "--name", "e0", "--data-dir", os.path.join(self.tmp, "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "e0=" + peer, "--log-outputs", "stderr"] + list(extra),
            stdout=self.etcd_log, stderr=subprocess.STDOUT)
        self.procs.append(self.etcd)
        wait_port(self.etcd_port, self.etcd, "etcd")
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.ctl(self.etcd_port, ["endpoint", "health"])[0] == 0:
                break
            time.sleep(0.1)

    def wait_leader(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            leaders = set()
            for m in self.members:
                try:
                    c = Conn(m.port, timeout=2)
                    leaders.add(c.call(STATUS, {}).get("leader", 0))
                    c.close()
                except (OSError, ServerError, ConnectionError):
                    leaders.add(0)
            if len(leaders) == 1 and 0 not in leaders:
                return
            time.sleep(0.05)
        raise AssertionError("no ketch leader")

    def ctl(self, port, args, stdin=None, timeout=20):
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.run([ETCDCTL, "--endpoints", "127.0.0.1:%d" % port] + args, input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def close(self):
        rc = None
        if self.bridge.poll() is None:  # a clean stop, so LeakSanitizer runs too
            self.bridge.terminate()
            try:
                rc = self.bridge.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for m in self.members:
            m.cleanup()
        self.bridge_log.close()
        self.etcd_log.close()
        with open(os.path.join(self.tmp, "bridge.log"), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        shutil.rmtree(self.tmp, ignore_errors=True)
        if "Sanitizer" in text or "runtime error" in text:
            raise AssertionError("sanitizer report in ketch-grpc's log:\n" + text[-4000:])
        if rc != 0:
            raise AssertionError("ketch-grpc did not stop cleanly on SIGTERM (%r): %s" % (rc, text[-2000:]))

    def bridge_alive(self):
        assert self.bridge.poll() is None, "ketch-grpc exited with %s" % self.bridge.returncode


ENV = None


def env():
    global ENV
    if ENV is None:
        ENV = Env()
    return ENV


# ---- normalization: only what legitimately differs between two servers ----

VOLATILE = {"cluster_id", "member_id", "raft_term", "leader", "raftIndex", "raftTerm",
            "raftAppliedIndex", "dbSize", "dbSizeInUse", "version", "Endpoint"}


def norm_json(x):
    if isinstance(x, dict):
        return {k: ("*" if k in VOLATILE else norm_json(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [norm_json(v) for v in x]
    return x


FIELD_RE = re.compile(r'^"(ClusterID|MemberID|RaftTerm)" : \d+$', re.M)
ENDPOINT_RE = re.compile(r"127\.0\.0\.1:\d+")


def norm_text(b):
    out = []
    for line in b.decode("utf-8", "replace").splitlines():
        s = line.strip()
        if s.startswith('{"level":'):  # clientv3's retry warnings (timestamps, targets)
            continue
        if s.startswith("{") or s.startswith("["):
            try:
                out.append(json.dumps(norm_json(json.loads(s)), sort_keys=True))
                continue
            except ValueError:
                pass
        line = FIELD_RE.sub(lambda m: '"%s" : *' % m.group(1), line)
        out.append(ENDPOINT_RE.sub("EP", line))
    return "\n".join(out)


def compare(cmds, e=None, normalize=norm_text):
    """Runs each (args, stdin) against etcd, then ketch-grpc (of env(), or e);
    all must match after normalize."""
    e = e or env()
    diffs = []
    for args, stdin in cmds:
        want = e.ctl(e.etcd_port, args, stdin)
        assert b"USAGE:" not in want[2] + want[1], "etcdctl refused %r: fix the test" % args
        got = e.ctl(e.grpc_port, args, stdin)
        w = (want[0], normalize(want[1]), normalize(want[2]))
        g = (got[0], normalize(got[1]), normalize(got[2]))
        if w != g:
            diffs.append("etcdctl %s:\n  etcd:  %r\n  ketch: %r" % (" ".join(args)[:200], w, g))
    e.bridge_alive()
    assert not diffs, "%d of %d differ:\n%s" % (len(diffs), len(cmds), "\n".join(diffs))


def c(*args, stdin=None):
    return (list(args), stdin.encode() if isinstance(stdin, str) else stdin)


# ---- the tests ----

def test_put_get_del_same_as_etcd():
    compare([
        c("put", "a", "1"), c("put", "b", "2"), c("put", "c", "3", "--prev-kv"),
        c("put", "a", "10", "--prev-kv"), c("put", "ab", "20", "-w", "json"),
        c("put", "abc", "30"), c("put", "b", "22", "--prev-kv", "-w", "json"),
        c("get", "a"), c("get", "a", "-w", "json"), c("get", "nope"), c("get", "nope", "-w", "json"),
        c("get", "a", "--prefix"), c("get", "a", "--prefix", "--keys-only"),
        c("get", "a", "--prefix", "--limit", "1", "-w", "json"),
        c("get", "a", "--from-key", "--limit", "2"),
        c("get", "a", "--from-key", "--limit", "2", "-w", "json"),
        c("get", "", "--prefix"), c("get", "", "--from-key", "-w", "json"),
        c("get", "a", "c"), c("get", "a", "c", "-w", "json"),
        c("get", "a", "--prefix", "--sort-by=VALUE", "--order=DESCEND"),
        c("get", "a", "--prefix", "--sort-by=CREATE", "--order=ASCEND", "-w", "json"),
        c("get", "", "--prefix", "--sort-by=MODIFY", "--order=DESCEND"),
        c("get", "", "--prefix", "--sort-by=VERSION", "--order=DESCEND", "--limit", "3"),
        c("get", "", "--prefix", "--order=DESCEND"),
        c("get", "a", "--prefix", "--sort-by=KEY"),
        c("get", "a", "--rev", "2"), c("get", "a", "--rev", "2", "-w", "json"),
        c("get", "b", "--rev", "3", "-w", "fields"),
        c("get", "a", "--print-value-only"), c("get", "a", "--prefix", "--print-value-only"),
        c("get", "a", "-w", "fields"), c("get", "a", "--prefix", "-w", "simple"),
        c("get", "a", "--prefix", "--consistency=s"),
        c("put", "k", "--ignore-value"), c("put", "a", "--ignore-value", "-w", "json"),
        c("get", "a", "-w", "json"),
        c("del", "nope"), c("del", "b", "--prev-kv"), c("del", "ab", "--prefix", "-w", "json"),
        c("put", "x1", "1"), c("put", "x2", "2"), c("put", "x3", "3"),
        c("del", "x2", "--from-key", "--prev-kv", "-w", "json"),
        c("del", "a", "c", "--prev-kv"),
        c("get", "", "--prefix", "-w", "json"),
    ])


TXN_OK = """mod("c") > "0"
value("c") = "3"

put t1 v1
get c
del nope

put t2 v2

"""
TXN_FAIL = """version("c") = "5"
create("c") < "100"

put t3 v3

get c --prefix
put t4 v4 --prev-kv

"""
TXN_DUP = """

put d 1
put d 2


"""
TXN_MANY = "\n" + "".join("put m%d v\n" % i for i in range(129)) + "\n\n"
# A txn without writes is a linearizable read, held until the read index
# is applied (on a 3-member cluster): its ops must survive the wait.
TXN_READ = """value("c") = "nope"


get c

"""
TXN_READ2 = """value("c") = "nope"

get t --prefix

get c
get t1 --prefix

"""


def test_txn_same_as_etcd():
    compare([
        c("put", "c", "3"),
        c("txn", "-i", stdin=TXN_OK), c("txn", "-i", "-w", "json", stdin=TXN_OK),
        c("txn", "-i", stdin=TXN_FAIL), c("txn", "-i", "-w", "json", stdin=TXN_FAIL),
        c("txn", "-i", stdin=TXN_DUP), c("txn", "-i", stdin=TXN_MANY),
        c("txn", "-i", stdin=TXN_READ), c("txn", "-i", "-w", "json", stdin=TXN_READ),
        c("txn", "-i", stdin=TXN_READ2),
        c("get", "t", "--prefix", "-w", "json"),
    ])


def test_compaction_and_errors_same_as_etcd():
    e = env()
    tmp = os.path.join(e.tmp, "values")
    os.makedirs(tmp, exist_ok=True)
    big = b"v" * (1600 * 1024)  # above --max-request-bytes (1.5 MiB), under gRPC's limit
    huge = b"v" * (2 << 20)    # 2 MiB: above clientv3's send limit
    compare([
        c("put", "r", "1"), c("put", "r", "2"), c("put", "r", "3"),
        c("get", "", "--prefix", "--limit", "1", "--keys-only", "-w", "json"),
        c("compaction", "3"), c("compaction", "3"), c("compaction", "100000"),
        c("get", "r", "--rev", "2"), c("get", "r", "--rev", "100000"),
        c("get", "r", "--rev", "3", "-w", "json"),
        c("put", "", "x"), c("get", ""), c("del", ""),
        c("put", "big", stdin=big), c("put", "huge", stdin=huge), c("get", "big"),
        c("put", "lk", "v", "--lease=1234"),
        c("put", "k", "v", "--ignore-lease", "--lease=5"),
        c("compaction", "--physical", "4"),
        c("get", "", "--prefix", "--keys-only"),
    ])


LARGE_SCRIPT = r"""
import sys
import etcd3
cl = etcd3.client(host="127.0.0.1", port=int(sys.argv[1]), timeout=20)
key = "k" * 1700000
def show(what, fn):
    try:
        r = fn()
        print(what, "ok", r if not isinstance(r, list) else [(v[:3], m.key) for v, m in r])
    except Exception as e:
        print(what, type(e).__name__, getattr(e, "details", lambda: "")())
show("get-big-key", lambda: cl.get(key))
show("txn-read-big-compare", lambda: cl.transaction(compare=[cl.transactions.value(key) == "x"],
                                                    success=[], failure=[cl.transactions.get("lg/0")])[0])
show("put-big-key", lambda: cl.put(key, "v") and None)
show("del-big-key", lambda: cl.delete(key))
show("txn-write-big-compare", lambda: cl.transaction(compare=[cl.transactions.value(key) == "x"],
                                                     success=[], failure=[cl.transactions.put("lg/x", "v")])[0])
for i in range(3):
    cl.put("lg/%d" % i, "v" * 1000000)
show("get-prefix-3MB", lambda: list(cl.get_prefix("lg/")))
"""


def test_large_reads_same_as_etcd():
    """etcd holds writes (proposals) to --max-request-bytes and reads only to
    its gRPC receive limit (+ 512 KiB); answers may be larger: python3-etcd3
    and etcdctl see the same through ketch-grpc."""
    e = env()
    outs = [subprocess.run(["/usr/bin/python3", "-c", LARGE_SCRIPT, str(p)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120) for p in (e.etcd_port, e.grpc_port)]
    assert outs[0].returncode == 0, outs[0].stderr.decode()[-2000:]
    assert outs[1].stdout == outs[0].stdout, (outs[0].stdout, outs[1].stdout, outs[1].stderr[-2000:])
    text = outs[1].stdout.decode()
    assert "get-big-key ok (None, None)" in text and "put-big-key _InactiveRpcError etcdserver: request is too large" in text, text
    compare([c("get", "lg/", "--prefix", "--keys-only"), c("get", "lg/", "--prefix", "-w", "json"),
             c("del", "lg/", "--prefix")])


def test_endpoint_status_same_as_etcd():
    compare([c("endpoint", "status", "-w", "json"), c("alarm", "list"), c("alarm", "list", "-w", "json")])
    e = env()
    rc, out, _ = e.ctl(e.grpc_port, ["endpoint", "status", "-w", "json"])
    st = json.loads(out)[0]["Status"]
    assert rc == 0 and st["leader"] != 0 and st["raftIndex"] > 0 and st["header"]["revision"] > 0, st
    # the version is the etcd API level the bridge implements (3.4.x), as
    # etcd reports its own; clients read it as etcd's server version
    est = json.loads(e.ctl(e.etcd_port, ["endpoint", "status", "-w", "json"])[1])[0]["Status"]
    assert re.match(r"3\.4\.\d+$", st["version"]) and est["version"].startswith("3.4."), (st, est)
    assert st["version"] == "3.4.23", st  # tools/grpc-bridge/bridge.h KT_BRIDGE_ETCD_VERSION
    rc, out, _ = e.ctl(e.grpc_port, ["endpoint", "status", "-w", "table"])
    assert rc == 0 and re.search(rb"\|\s+3\.4\.23 \|", out), out
    py = subprocess.run(["/usr/bin/python3", "-c", "import etcd3,sys; print(etcd3.client(port=int(sys.argv[1]))"
                         ".status().version)", str(e.grpc_port)], stdout=subprocess.PIPE, timeout=60)
    assert py.stdout.strip() == b"3.4.23", py


def http1_get(port, method, path):
    """(status line, Content-Type, body) of one HTTP/1.1 request."""
    import http.client
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        h.request(method, path)
        r = h.getresponse()
        return "%d %s" % (r.status, r.reason), r.getheader("Content-Type"), r.read()
    finally:
        h.close()


def test_http_version_same_as_etcd():
    """etcd's client port answers HTTP/1.1 beside gRPC: GET /version (tools
    ask it the server's version), and 404 / 405 around it; the bridge's port
    answers the same, and gRPC goes on working on it."""
    e = env()
    for method, path in (("GET", "/version"), ("GET", "/version?x=1"), ("GET", "/nothing"),
                         ("GET", "/version/"), ("POST", "/version"), ("HEAD", "/version")):
        want = http1_get(e.etcd_port, method, path)
        got = http1_get(e.grpc_port, method, path)
        assert got == want, (method, path, got, want)
    assert json.loads(http1_get(e.grpc_port, "GET", "/version")[2]) == {
        "etcdserver": "3.4.23", "etcdcluster": "3.4.0"}
    rc, out, err = e.ctl(e.grpc_port, ["endpoint", "status"])
    assert rc == 0 and b"3.4.23" in out, (out, err)


def test_unimplemented_services():
    """A service or method the bridge does not serve: UNIMPLEMENTED naming it,
    and the bridge goes on serving."""
    import grpc
    e = env()
    with grpc.insecure_channel("127.0.0.1:%d" % e.grpc_port) as ch:
        for path in ("/etcdserverpb.Nope/Get", "/etcdserverpb.KV/Nope"):
            call = ch.unary_unary(path, request_serializer=lambda x: x,
                                  response_deserializer=lambda x: x)
            try:
                call(b"", timeout=10)
                raise AssertionError("%s answered" % path)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.UNIMPLEMENTED, (path, err.code())
                assert path.split("/")[1 if "Nope/" in path else 2] in err.details(), \
                    err.details()
    e.bridge_alive()


def test_concurrent_etcdctl():
    e = env()
    n = 48

    def put(i):
        return e.ctl(e.grpc_port, ["put", "conc/%03d" % i, "v%d" % i])

    with ThreadPoolExecutor(max_workers=12) as ex:
        res = list(ex.map(put, range(n)))
    bad = [r for r in res if r[0] != 0 or r[1].strip() != b"OK"]
    assert not bad, bad[:3]
    rc, out, _ = e.ctl(e.grpc_port, ["get", "conc/", "--prefix", "--limit", "1", "-w", "json"])
    assert rc == 0 and json.loads(out)["count"] == n, out
    # Many concurrent streams on one HTTP/2 connection: ketch-bench's etcd target.
    p = subprocess.run([os.path.join(BIN, "ketch-bench"), "--target", "etcd", "--endpoints",
                        "127.0.0.1:%d" % e.grpc_port, "--clients", "64", "--total", "3000",
                        "--json", "put", "--key-space-size", "1000"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["ok"] == 3000 and r["errors"] == 0, r
    e.bridge_alive()


def test_bad_input_leaves_bridge_serving():
    e = env()
    for payload in (os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512)):
        s = socket.create_connection(("127.0.0.1", e.grpc_port), timeout=5)
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    # A connection that sends half a preface and goes quiet does not block others.
    idle = socket.create_connection(("127.0.0.1", e.grpc_port), timeout=5)
    idle.sendall(b"PRI * HTTP/2.0\r\n")
    rc, out, err = e.ctl(e.grpc_port, ["put", "after-bad", "ok"])
    assert rc == 0 and out.strip() == b"OK", (rc, out, err)
    rc, out, _ = e.ctl(e.grpc_port, ["get", "after-bad", "--print-value-only"])
    assert rc == 0 and out.strip() == b"ok", out
    idle.close()
    e.bridge_alive()


GRPC_HEADERS = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", None),
                (b":authority", b"127.0.0.1"), (b"content-type", b"application/grpc"),
                (b"te", b"trailers")]


def h2_call(port, hdrs, msg, limit_s=10):
    """A minimal HTTP/2 client by hand (no h2 library on Debian's default
    python): one request with exactly the header list hdrs (name, value) and
    one gRPC message; returns ("end", seconds until the server ended the
    stream with HEADERS or DATA) or ("rst", its RST_STREAM error code)."""
    def frame(typ, flags, sid, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload

    def lit(name, value):  # HPACK literal without indexing, new name, no Huffman
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    body = b"\x00" + struct.pack(">I", len(msg)) + msg
    s = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    t0 = time.time()
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") +
              frame(1, 4, 1, b"".join(lit(n, v) for n, v in hdrs)) + frame(0, 1, 1, body))
    buf = b""
    try:
        while time.time() - t0 < limit_s:
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError("connection closed before the stream ended")
            buf += chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                typ, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff
                payload, buf = buf[9:9 + n], buf[9 + n:]
                if typ == 4 and not flags & 1:
                    s.sendall(frame(4, 1, 0, b""))  # SETTINGS ACK
                if sid == 1 and typ in (0, 1) and flags & 1:
                    return "end", time.time() - t0
                if sid == 1 and typ == 3:
                    return "rst", int.from_bytes(payload[:4], "big")
    finally:
        s.close()
    raise AssertionError("stream did not end within %ds" % limit_s)


def h2_unary_end_time(port, path, msg, timeout_hdr, limit_s=10):
    """One unary call with a grpc-timeout header: the seconds until the
    server ended the stream."""
    hdrs = [(n, path if n == b":path" else v) for n, v in GRPC_HEADERS]
    kind, took = h2_call(port, hdrs + [(b"grpc-timeout", timeout_hdr)], msg, limit_s)
    if kind != "end":
        raise AssertionError("stream reset (%d)" % took)
    return took


def test_malformed_request_headers():
    """The bridge's own checks of a request's header block (nghttp2's HTTP
    checks are off): a malformed one (RFC 9113 8.1.1) is reset with
    PROTOCOL_ERROR, a :method other than POST gets a gRPC error, and
    well-formed calls on the same bridge go on."""
    e = env()
    rng = b"\x0a\x01k"  # RangeRequest{key: "k"}
    path = b"/etcdserverpb.KV/Range"
    good = [(n, path if n == b":path" else v) for n, v in GRPC_HEADERS]
    assert h2_call(e.grpc_port, good, rng)[0] == "end"
    without = lambda name: [h for h in good if h[0] != name]  # noqa: E731
    malformed = {
        "no :path": without(b":path"),
        "no :method": without(b":method"),
        "no :scheme": without(b":scheme"),
        "two :path": good[:3] + [(b":path", path)] + good[3:],
        "a pseudo-header after a regular one": without(b":path") + [(b":path", path)],
        "an unknown pseudo-header": good[:1] + [(b":status", b"200")] + good[1:],
        "NUL in :path": [(n, path + b"\x00x" if n == b":path" else v) for n, v in good],
        "LF in token": good + [(b"token", b"abc\ndef")],
        "empty :path": [(n, b"" if n == b":path" else v) for n, v in good],
    }
    for what, hdrs in malformed.items():
        got = h2_call(e.grpc_port, hdrs, rng)
        assert got == ("rst", 1), (what, got)  # PROTOCOL_ERROR
    get = [(n, b"GET" if n == b":method" else v) for n, v in good]
    assert h2_call(e.grpc_port, get, rng)[0] == "end"  # trailers-only, grpc-status 13
    assert h2_call(e.grpc_port, good, rng)[0] == "end"
    e.bridge_alive()


def test_quorum_loss_then_recovery():
    """All members frozen: grpc-timeout ends the call. Two of three frozen: a put
    gets etcd's UNAVAILABLE error (not a
    hang, not a bridge crash); thawed, the same bridge serves writes again."""
    e = env()
    # Every member frozen: nothing answers, yet grpc-timeout is honoured — the
    # bridge ends the call at 1 s, long before libketch's own 5 s deadline.
    for m in e.members:
        m.proc.send_signal(signal.SIGSTOP)
    try:
        put = b"\x0a\x02dl\x12\x01v"  # PutRequest{key: "dl", value: "v"}
        took = h2_unary_end_time(e.grpc_port, b"/etcdserverpb.KV/Put", put, b"1000m")
        assert 0.9 < took < 3.0, took
    finally:
        e.members[0].proc.send_signal(signal.SIGCONT)
    stopped = e.members[1:]
    try:
        t0 = time.time()
        rc, out, err = e.ctl(e.grpc_port, ["put", "q", "1", "--command-timeout=20s"], timeout=30)
        text = norm_text(err)
        assert rc == 1 and text in (
            "Error: etcdserver: no leader", "Error: etcdserver: request timed out",
            "Error: etcdserver: request timed out, possibly due to previous leader failure"), \
            (rc, out, text)
        assert time.time() - t0 < 15
    finally:
        for m in stopped:
            m.proc.send_signal(signal.SIGCONT)
    e.wait_leader(timeout=15)
    deadline = time.time() + 15
    while True:
        rc, out, err = e.ctl(e.grpc_port, ["put", "q", "2"])
        if rc == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert rc == 0 and out.strip() == b"OK", (rc, out, err)
    e.bridge_alive()


def test_python_etcd3():
    try:
        import etcd3  # Debian python3-etcd3 (grpcio); optional
    except Exception:  # noqa
        print("# python3-etcd3 not installed: skipped")
        return
    e = env()
    cl = etcd3.client(host="127.0.0.1", port=e.grpc_port, timeout=10)
    cl.put("py/k", "v1")
    v, meta = cl.get("py/k")
    assert v == b"v1" and meta.version == 1, (v, meta)
    ok, _ = cl.transaction(compare=[cl.transactions.value("py/k") == "v1"],
                           success=[cl.transactions.put("py/k", "v2")], failure=[])
    assert ok and cl.get("py/k")[0] == b"v2"
    assert cl.delete("py/k") and cl.get("py/k")[0] is None


def teardown():
    global ENV
    if ENV is not None:
        e, ENV = ENV, None
        e.close()


def test_shutdown_clean():
    """ketch-grpc is still up after everything, and its log is sanitizer-clean."""
    if ENV is not None:
        ENV.bridge_alive()
    teardown()


if __name__ == "__main__":
    import atexit
    atexit.register(teardown)
    run_tests([test_put_get_del_same_as_etcd, test_txn_same_as_etcd,
               test_compaction_and_errors_same_as_etcd, test_large_reads_same_as_etcd,
               test_endpoint_status_same_as_etcd, test_http_version_same_as_etcd,
               test_unimplemented_services, test_concurrent_etcdctl,
               test_bad_input_leaves_bridge_serving, test_malformed_request_headers,
               test_python_etcd3,
               test_quorum_loss_then_recovery, test_shutdown_clean])
