"""test/integration/harness.py — real ketch processes on loopback for tests.

Member(...) starts bin/ketch on a free 127.0.0.1 port with its own data dir,
waits until it answers a HELLO, and kills it at the end. KT_IO_THREADS=N in
the environment starts every member with --io-threads N (net/THREADS.md), so
the suite runs against the threaded server too. Conn speaks the
native protocol (net/PROTOCOL.md) directly, so tests can send exactly the bytes
they want, including bad ones. Tests print "ok NAME" / "FAIL NAME: why".
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import msgpack

BIN = os.environ.get("KETCH_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "bin")
BIN = os.path.abspath(BIN)

HELLO, RANGE, PUT, DELETE, TXN, COMPACT, STATUS, ERROR = 0, 1, 2, 3, 4, 5, 6, 127


_given_ports = set()


def free_port():
    """A port free now and never handed out before by this process (the
    kernel may give a just-closed port again: two members of one cluster
    once got the same peer port and never elected a leader)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p not in _given_ports:
            _given_ports.add(p)
            return p


def io_threads_flag(extra=()):
    """["--io-threads", N] from KT_IO_THREADS, unless the flags already
    name it or a config file (which ignores flags) is used."""
    n = os.environ.get("KT_IO_THREADS")
    if not n or any(str(a).startswith(("--io-threads", "--config-file")) for a in extra):
        return []
    return ["--io-threads", n]


def bridge_loops(n):
    """["--loops", n] for a ketch-grpc a test starts, unless KETCH_GRPC_LOOPS
    is set: then every bridge of the run takes its loops from there (the
    flag's environment form), e.g. KETCH_GRPC_LOOPS=4 for all of them."""
    if os.environ.get("KETCH_GRPC_LOOPS"):
        return []
    return ["--loops", str(n)]


class Member:
    def __init__(self, data_dir=None, extra=(), name="m1", port=None, wait=True, peer_port=None):
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="ketch-it-")
        self.name = name
        self.port = port or free_port()
        self.peer_port = peer_port
        self.extra = list(extra)
        self.proc = None
        self.log_path = os.path.join(tempfile.gettempdir(),
                                     "ketch-it-%d-%d.log" % (os.getpid(), self.port))
        self.start(wait)

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.port

    def start(self, wait=True):
        url = "http://127.0.0.1:%d" % self.port
        peer = self.peer_port or free_port()
        args = [os.path.join(BIN, "ketch"), "--name", self.name,
                "--data-dir", os.path.join(self.data_dir, "d"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                ] + io_threads_flag(self.extra) + self.extra
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ketch exited with %s: %s" % (self.proc.returncode, self.logtext()[-2000:]))
            try:
                c = Conn(self.port)
                c.close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("ketch did not become ready: " + self.logtext()[-2000:])

    def logtext(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("ketch did not stop on signal %d" % sig)
        return self.proc.returncode if self.proc else None

    def run_to_exit(self, timeout=10):
        """Start without waiting for readiness; return (exit code, log)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        return rc, self.logtext()

    def cleanup(self):
        self.kill9()
        text = self.logtext()
        if "Sanitizer" in text or "runtime error" in text:
            sys.stderr.write("member log %s:\n%s\n" % (self.log_path, text[-6000:]))
            raise AssertionError("sanitizer report in the member's log (see test log)")
        if self.own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def GET_RSS_KB(member):
    """Resident set size of a member's process, in KiB (from /proc)."""
    with open("/proc/%d/status" % member.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % member.proc.pid)


class ServerError(Exception):
    def __init__(self, code, message):
        super().__init__("%d: %s" % (code, message))
        self.code = code
        self.message = message


class Conn:
    """A native-protocol connection (one request at a time unless pipelined
    by hand with send/recv)."""

    def __init__(self, port, hello=True, timeout=10.0, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_id = 1
        self.buf = b""
        if hello:
            r = self.call(HELLO, {"version": 1, "client": "harness.py"})
            assert r["version"] == 1

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, typ, payload, rid=None):
        if rid is None:
            rid = self.next_id
            self.next_id += 1
        body = msgpack.packb([typ, rid, payload], use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        return rid

    def recv(self):
        """Next frame as (type, id, payload); None at EOF."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    body = self.buf[4:4 + n]
                    self.buf = self.buf[4 + n:]
                    t, i, p = msgpack.unpackb(body, raw=False, strict_map_key=False)
                    return t, i, p
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buf += chunk

    def call(self, typ, payload):
        rid = self.send(typ, payload)
        f = self.recv()
        if f is None:
            raise ConnectionError("connection closed")
        t, i, p = f
        assert i == rid, "response id %d != request id %d" % (i, rid)
        if t == ERROR:
            raise ServerError(p.get("code"), p.get("message"))
        return p

    def put(self, key, value, **kw):
        return self.call(PUT, dict(key=_b(key), value=_b(value), **kw))

    def get(self, key, **kw):
        r = self.call(RANGE, dict(key=_b(key), **kw))
        return r

    def get_value(self, key):
        kvs = self.get(key).get("kvs") or []
        return kvs[0][1] if kvs else None


def _b(x):
    return x.encode() if isinstance(x, str) else x


def run_tests(tests):
    """Run each test function; print ok/FAIL lines; exit non-zero on failure."""
    failed = 0
    only = os.environ.get("TI")
    for t in tests:
        name = "%s/%s" % (os.path.basename(sys.argv[0]).replace(".py", ""), t.__name__)
        if only and only not in name:
            continue
        start = time.time()
        try:
            t()
            print("ok %s (%.1fs)" % (name, time.time() - start), flush=True)
        except Exception as e:  # noqa
            failed += 1
            msg = "".join(traceback.format_exception_only(type(e), e)).strip().replace("\n", " | ")
            print("FAIL %s: %s" % (name, msg[:2000]), flush=True)
            traceback.print_exc(file=sys.stderr)
    sys.exit(1 if failed else 0)
