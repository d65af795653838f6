"""Transport security with real processes and real certificates (made here by
the openssl CLI, test/integration/tlscerts.py): one 3-member cluster, shared by
the tests, with TLS on the peer links (mutual authentication, a CRL, an allowed
CN) and on the client links (client certificates required), plaintext and TLS
client URLs side by side; ketchctl and libketch (tls_client.c) over TLS; every
refusal of a client and of a member, with what each side says; a member that
joins over TLS and catches up by a snapshot streamed over the secured peer
link; certificate and CA rotation on SIGHUP and on a file change while an old
connection keeps working; auto-tls on both links.

Every assertion is on what a person would see: ketchctl's and libketch's
output, the members' logs, openssl s_client's report."""
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import msgpack

import tlscerts
from harness import (BIN, HELLO, PUT, RANGE, STATUS, Conn, ServerError, free_port,  # noqa: E402
                     io_threads_flag, run_tests)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TLS_CLIENT = os.path.join(ROOT, os.environ.get("O", "build"), "test", "integration", "tls_client")
TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]
TMP = tempfile.mkdtemp(prefix="ketch-tls-it-")
C = tlscerts.make(TMP)


class TlsConn(Conn):
    """harness.Conn over TLS (Python's ssl), with a client certificate."""

    def __init__(self, port, host="127.0.0.1", ca=None, cert="client", timeout=10.0, hello=True):
        ctx = ssl.create_default_context(cafile=C[ca or "ca"])
        if cert:
            ctx.load_cert_chain(C[cert], C[cert + "-key"])
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        self.next_id = 1
        self.buf = b""
        if hello:
            r = self.call(HELLO, {"version": 1, "client": "tls_test.py"})
            assert r["version"] == 1


class Proc:
    """A ketch member started with exactly `args` (beyond --name/--data-dir)."""

    def __init__(self, name, args, data_dir=None, wait_port=None, env=None):
        self.name = name
        self.data_dir = data_dir or os.path.join(TMP, "data-" + name)
        self.log_path = os.path.join(TMP, name + ".log")
        self.args = [os.path.join(BIN, "ketch"), "--name", name, "--data-dir", self.data_dir] + \
            io_threads_flag(args) + args
        self.env = env
        self.proc = None
        self.start()
        if wait_port:
            self.wait_ready(wait_port)

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)

    def wait_ready(self, port, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %s: %s" % (self.name, self.proc.returncode,
                                                         self.logtext()[-2000:]))
            try:
                TlsConn(port, timeout=2).close()
                return
            except (OSError, ssl.SSLError, ConnectionError):
                time.sleep(0.05)
        raise RuntimeError("%s not ready: %s" % (self.name, self.logtext()[-2000:]))

    def logtext(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_log(self, pattern, since=0, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.logtext()[since:])
            if m:
                return m.group(0)
            time.sleep(0.05)
        raise AssertionError("%s: no log line matching %r; log tail:\n%s" %
                             (self.name, pattern, self.logtext()[-3000:]))

    def run_to_exit(self, timeout=10):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.logtext()
        if "Sanitizer" in text or "runtime error" in text:
            raise AssertionError("sanitizer report in %s's log:\n%s" % (self.name, text[-4000:]))


def tls_flags(i):
    return ["--cert-file", C["server"], "--key-file", C["server-key"],
            "--trusted-ca-file", C["ca"], "--client-crl-file", C["crl"],
            "--peer-cert-file", C["member%d" % (i + 1)],
            "--peer-key-file", C["member%d-key" % (i + 1)],
            "--peer-trusted-ca-file", C["ca"], "--peer-client-cert-auth",
            "--peer-crl-file", C["crl"], "--peer-cert-allowed-cn", "member"]


class Cluster:
    """n0: https://127.0.0.1:C0 and https://127.0.0.2:C0 (a name its certificate
    does not carry), plus plaintext http://127.0.0.1:P0 on another port;
    n1: http:// and https:// on one port; n2: https:// only. Peers: https://
    with mutual authentication."""

    def __init__(self):
        self.client = [free_port() for _ in range(3)]
        self.peer = [free_port() for _ in range(3)]
        self.plain0 = free_port()
        self.metrics = [free_port() for _ in range(3)]  # https:// metrics URLs
        ic = ",".join("n%d=https://127.0.0.1:%d" % (i, self.peer[i]) for i in range(3))
        listen = [
            "https://127.0.0.1:%d,https://127.0.0.2:%d,http://127.0.0.1:%d" % (
                self.client[0], self.client[0], self.plain0),
            "https://127.0.0.1:%d,http://127.0.0.1:%d" % (self.client[1], self.client[1]),
            "https://127.0.0.1:%d" % self.client[2],
        ]
        self.members = []
        for i in range(3):
            args = ["--listen-client-urls", listen[i],
                    "--advertise-client-urls", "https://127.0.0.1:%d" % self.client[i],
                    "--listen-peer-urls", "https://127.0.0.1:%d" % self.peer[i],
                    "--initial-advertise-peer-urls", "https://127.0.0.1:%d" % self.peer[i],
                    "--initial-cluster", ic, "--initial-cluster-token", "tls-it",
                    "--snapshot-count", "200", "--experimental-snapshot-catchup-entries", "20",
                    "--listen-metrics-urls", "https://127.0.0.1:%d" % self.metrics[i],
                    ] + TIMING + tls_flags(i)
            self.members.append(Proc("n%d" % i, args))
        for i, m in enumerate(self.members):
            m.wait_ready(self.client[i])
        self.leader_id = self.wait_leader()

    def eps(self, idx=(0, 1, 2)):
        return ",".join("https://127.0.0.1:%d" % self.client[i] for i in idx)

    def wait_leader(self, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            leaders = set()
            for i in range(3):
                try:
                    c = TlsConn(self.client[i], timeout=2)
                    leaders.add(c.call(STATUS, {}).get("leader", 0))
                    c.close()
                except (OSError, ServerError, ConnectionError, ssl.SSLError):
                    leaders.add(0)
            if len(leaders) == 1 and 0 not in leaders:
                return leaders.pop()
            time.sleep(0.05)
        raise AssertionError("no leader over TLS: " + self.members[0].logtext()[-2000:])

    def terms(self):
        return [TlsConn(p, timeout=2).call(STATUS, {})["header"][3] for p in self.client]

    def close(self):
        for m in self.members:
            m.stop()


CL = None


def cluster():
    global CL
    if CL is None:
        CL = Cluster()
    return CL


def ctl(args, eps=None, tls=True, check=True, timeout=30):
    flags = ["--cacert", C["ca"], "--cert", C["client"], "--key", C["client-key"]] if tls else []
    p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", eps or cluster().eps()]
                       + flags + ["--command-timeout", "3s"] + args,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("ketchctl %s: exit %d: %s%s" % (args, p.returncode, p.stdout,
                                                              p.stderr))
    return p


def tls_client(eps, *args, ca="ca", cert="client", name="-", timeout=20):
    p = subprocess.run([TLS_CLIENT, eps, C[ca] if ca else "-", C[cert] if cert else "-",
                        C[cert + "-key"] if cert else "-", name] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


# ---- the cluster ----

def test_three_members_over_tls_on_both_links():
    cl = cluster()
    for m in cl.members:
        log = m.logtext()
        assert re.search(r"connected to peer \w+ \(127\.0\.0\.1:\d+\) channel=raft", log), log[-2000:]
        assert "tls=yes" in log
    assert ctl(["put", "greeting", "hello over TLS"]).stdout.strip() == "OK"
    for i in range(3):
        out = ctl(["get", "greeting", "--consistency=s"], eps=cl.eps([i])).stdout
        assert out.splitlines() == ["greeting", "hello over TLS"], out
    rows = ctl(["member", "list"]).stdout.splitlines()
    assert len(rows) == 3 and all("https://127.0.0.1:" in r for r in rows), rows
    assert all(r.count("https://") == 2 for r in rows), rows  # peer and client URLs
    health = ctl(["endpoint", "health", "--cluster"]).stderr  # etcdctl writes it there
    assert health.count("is healthy") == 3 and health.count("https://127.0.0.1:") == 3, health


def test_libketch_over_tls():
    cl = cluster()
    rc, out = tls_client(cl.eps([2]), "put", "lib/k", "v1")
    assert rc == 0 and out.startswith("put "), out
    rc, out = tls_client(cl.eps([1]), "get", "lib/k")
    assert rc == 0 and out.strip() == "value v1", out
    # endpoints without a scheme, verified against a name the certificate carries
    rc, out = tls_client("127.0.0.1:%d" % cl.client[0], "get", "lib/k", name="localhost")
    assert rc == 0 and out.strip() == "value v1", out
    # the asynchronous form (ketch_fd / ketch_events / ketch_process) with a watch
    w = subprocess.Popen([TLS_CLIENT, cl.eps([0]), C["ca"], C["client"], C["client-key"], "-",
                          "watch", "lib/w", "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().strip() == "created"
        for v in ("a", "b"):
            assert tls_client(cl.eps([1]), "put", "lib/w", v)[0] == 0
        assert w.stdout.readline().strip() == "event PUT lib/w a"
        assert w.stdout.readline().strip() == "event PUT lib/w b"
        assert w.wait(10) == 0
    finally:
        if w.poll() is None:
            w.kill()


def test_plaintext_and_tls_side_by_side():
    cl = cluster()
    c = Conn(cl.plain0)  # n0's plaintext URL, another port
    c.put("side", "plain")
    c.close()
    c = Conn(cl.client[1])  # n1: http:// and https:// on one port
    assert c.call(STATUS, {})["header"][0]
    c.close()
    t = TlsConn(cl.client[1])
    assert t.call(RANGE, {"key": b"side", "serializable": False})["kvs"][0][1] == b"plain"
    t.close()
    out = ctl(["get", "side"], eps="http://127.0.0.1:%d" % cl.client[1], tls=False).stdout
    assert out.splitlines() == ["side", "plain"], out


def curl(url, *args, cert="client", ca="ca"):
    flags = (["--cacert", C[ca]] if ca else []) + \
        (["--cert", C[cert], "--key", C[cert + "-key"]] if cert else [])
    p = subprocess.run(["curl", "-sS", "-v", "--max-time", "5"] + flags + list(args) + [url],
                       capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout, p.stderr


def test_metrics_over_https_with_the_client_tls_settings():
    """--listen-metrics-urls https://...: served with the client URLs'
    certificate and rules (etcd's: the client TLS info), so a scraper needs a
    client certificate here (--trusted-ca-file is given); keep-alive; 60
    handshakes at once; a 1 MB header gets MHD's 431 through the relay; a
    plaintext request gets Go's (etcd's) 400; a silent connection is cut; a
    real Prometheus scrapes the three members over https."""
    cl = cluster()
    url = "https://127.0.0.1:%d" % cl.metrics[0]
    silent = socket.create_connection(("127.0.0.1", cl.metrics[0]))  # never says hello
    rc, out, err = curl(url + "/metrics")
    assert rc == 0 and "\netcd_server_has_leader 1\n" in out, (rc, err[-1500:])
    assert "SSL certificate verify ok" in err and "TLSv1.3" in err, err[-1500:]
    rc, out, err = curl(url + "/health", url + "/readyz?verbose")  # one connection, kept alive
    assert rc == 0 and out.endswith('{"health":"true","reason":""}'), (out, err[-1500:])
    assert "[+]linearizable_read ok" in out and "Re-using existing connection" in err, \
        (out, err[-2000:])
    since = len(cl.members[1].logtext())
    rc, out, err = curl("https://127.0.0.1:%d/metrics" % cl.metrics[1], cert=None)
    assert rc != 0 and "alert certificate required" in err, (rc, err[-1500:])
    cl.members[1].wait_log(r"warn http n1 https metrics connection from 127\.0\.0\.1: TLS "
                           r"handshake failed: the client presented no certificate", since)
    rc, out, err = curl("https://127.0.0.1:%d/metrics" % cl.metrics[1], ca="other-ca")
    assert rc == 60 and "SSL certificate problem" in err, (rc, err[-1500:])
    # 60 handshakes at once: past the 8 steps a loop turn allows, the rest wait
    # for the handshake budget and are all served
    def one(raw):
        try:
            t = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            t.settimeout(10)
            t.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            got = b""
            while True:
                d = t.recv(4096)
                if not d:
                    return got.split(b"\r\n")[0]
                got += d
        except OSError as e:
            return repr(e)
    ctx = ssl.create_default_context(cafile=C["ca"])
    ctx.load_cert_chain(C["client"], C["client-key"])
    raws = [socket.create_connection(("127.0.0.1", cl.metrics[1]), timeout=10) for _ in range(60)]
    with ThreadPoolExecutor(60) as ex:
        firsts = list(ex.map(one, raws))
    assert firsts == [b"HTTP/1.1 200 OK"] * 60, firsts
    # a 1 MB header through the TLS relay: MHD's 431 comes back, then the end
    big = ctx.wrap_socket(socket.create_connection(("127.0.0.1", cl.metrics[2]), timeout=10),
                          server_hostname="127.0.0.1")
    try:
        big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) +
                    b"\r\n\r\n")
    except OSError:
        pass  # the relay stops reading once MHD refused
    answer = b""
    while True:
        try:
            d = big.recv(65536)
        except OSError:
            break
        if not d:
            break
        answer += d
    big.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    rc, out, err = curl("http://127.0.0.1:%d/metrics" % cl.metrics[2], cert=None, ca=None)
    assert "HTTP/1.0 400 Bad Request" in err and \
        out == "Client sent an HTTP request to an HTTPS server.\n", (out, err[-1500:])
    # Prometheus, with the CA and a client certificate
    d = os.path.join(TMP, "prom")
    os.makedirs(d, exist_ok=True)
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                "scrape_configs:\n  - job_name: ketch\n    scheme: https\n"
                "    tls_config:\n      ca_file: %s\n      cert_file: %s\n      key_file: %s\n"
                "    static_configs:\n      - targets: [%s]\n" % (
                    C["ca"], C["client"], C["client-key"],
                    ", ".join("'127.0.0.1:%d'" % p for p in cl.metrics)))
    pport = free_port()
    prom = subprocess.Popen(["prometheus", "--config.file", cfg, "--storage.tsdb.path",
                             os.path.join(d, "data"), "--web.listen-address",
                             "127.0.0.1:%d" % pport, "--log.level", "warn"],
                            stdout=open(os.path.join(d, "log"), "wb"), stderr=subprocess.STDOUT)

    def query(q):
        import json
        import urllib.parse
        import urllib.request
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/query?query=%s" % (
                    pport, urllib.parse.quote(q)), timeout=2) as r:
                res = json.loads(r.read())["data"]["result"]
        except OSError:
            return {}
        return {x["metric"].get("instance", ""): float(x["value"][1]) for x in res}

    try:
        want = {"127.0.0.1:%d" % p: 1.0 for p in cl.metrics}
        deadline = time.time() + 30
        while query("up") != want or len(query("etcd_server_has_leader == 1")) != 3:
            assert time.time() < deadline and prom.poll() is None, (
                query("up"), open(os.path.join(d, "log")).read()[-2000:])
            time.sleep(0.25)
        assert len(query("etcd_server_is_leader == 1")) == 1, query("etcd_server_is_leader")
        # a TLS connection that never starts its handshake is cut after 5 s (http.h)
        silent.settimeout(5)
        try:
            assert silent.recv(1) == b""
        except ConnectionResetError:
            pass
    finally:
        silent.close()
        prom.kill()
        prom.wait()


def expect_client_error(args, eps, want, tls_flags=None):
    flags = tls_flags if tls_flags is not None else [
        "--cacert", C["ca"], "--cert", C["client"], "--key", C["client-key"]]
    p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", eps] + flags +
                       ["--command-timeout", "2s"] + args, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0, p.stdout
    assert want in p.stderr, "want %r in ketchctl's stderr: %s" % (want, p.stderr)
    return p.stderr


def test_metrics_on_https_client_urls_beside_native_tls_clients():
    """etcd serves /metrics and /health on its https:// client URLs too:
    ketch's first decrypted bytes tell an HTTP request from a native frame.
    On n2 (https:// only) and n1 (http:// and https:// on one port): curl
    over TLS gets /metrics and /health (keep-alive: one connection), a
    native TLS client on the same port before and after is served (a client
    without a certificate is refused in the handshake, before any byte is
    read: test_client_refusals_say_why_on_both_sides)."""
    cl = cluster()
    native = TlsConn(cl.client[2])
    native.put(b"https-metrics-before", b"v")
    for port in (cl.client[2], cl.client[1]):
        url = "https://127.0.0.1:%d" % port
        rc, out, err = curl(url + "/health", url + "/metrics")  # /metrics, then /health
        assert rc == 0 and "\netcd_server_has_leader 1\n" in out, (rc, out[-300:], err[-1500:])
        assert out.endswith('{"health":"true","reason":""}'), (out[-300:], err[-1500:])
        assert "TLSv1.3" in err and "Re-using existing connection" in err, err[-2000:]
    rc, out, err = curl("http://127.0.0.1:%d/health" % cl.client[1], cert=None, ca=None)
    assert rc == 0 and '"health":"true"' in out, (rc, out, err[-1500:])  # plaintext beside it
    native.put(b"https-metrics-after", b"v")
    assert native.get_value(b"https-metrics-before") == b"v"
    again = TlsConn(cl.client[2])
    assert again.get_value(b"https-metrics-after") == b"v"
    again.close()
    native.close()


def test_client_refusals_say_why_on_both_sides():
    cl = cluster()
    n0, n2 = cl.members[0], cl.members[2]
    keep = TlsConn(cl.client[0])  # a client that must not notice any of this
    keep.put("keep", "1")
    cases = [
        # (what, endpoint, flags, client says, member, member says)
        ("plaintext client on a TLS port", "127.0.0.1:%d" % cl.client[2], [],
         "this client URL serves TLS only", n2, r"a plaintext client on a TLS-only port"),
        ("TLS client on a plaintext port", "https://127.0.0.1:%d" % cl.plain0, None,
         "the server closed the connection during the TLS handshake (is it a plaintext http:// "
         "port?)", n0, r"a TLS handshake on a plaintext port"),
        ("wrong CA", "https://127.0.0.1:%d" % cl.client[2],
         ["--cacert", C["other-ca"], "--cert", C["client"], "--key", C["client-key"]],
         "server certificate rejected: self-signed certificate in certificate chain: not signed "
         "by a CA in --cacert", n2, r"the client refused the TLS handshake: \S+ alert unknown ca"),
        ("expired client certificate", "https://127.0.0.1:%d" % cl.client[2],
         ["--cacert", C["ca"], "--cert", C["expired"], "--key", C["expired-key"]],
         "the server refused the TLS handshake: sslv3 alert certificate expired (our certificate "
         "has expired)", n2, r"client certificate rejected: certificate has expired \(subject "
         r"CN = member"),
        ("revoked client certificate", "https://127.0.0.1:%d" % cl.client[2],
         ["--cacert", C["ca"], "--cert", C["revoked"], "--key", C["revoked-key"]],
         "sslv3 alert certificate revoked (our certificate is revoked)", n2,
         r"client certificate rejected: certificate revoked"),
        ("no client certificate", "https://127.0.0.1:%d" % cl.client[2], ["--cacert", C["ca"]],
         "alert certificate required (it requires a client certificate)", n2,
         r"the client presented no certificate"),
        ("hostname mismatch", "https://127.0.0.2:%d" % cl.client[0], None,
         "server certificate rejected: IP address mismatch: it is not valid for the address "
         "dialled (subject CN = server", n0, r"the client refused the TLS handshake: \S+ alert "
         r"bad certificate"),
    ]
    since = {m.name: len(m.logtext()) for m in cl.members}

    def one(case):
        what, ep, flags, client_says, member, member_says = case
        try:
            expect_client_error(["get", "keep"], ep, client_says, flags)
            member.wait_log(member_says, since[member.name], timeout=5)
        except AssertionError as e:
            return "%s: %s" % (what, e)
        return None

    with ThreadPoolExecutor(len(cases)) as ex:  # each waits for its command timeout
        fails = [f for f in ex.map(one, cases) if f]
    assert not fails, "\n".join(fails)
    # the raw plaintext client gets one native ERROR frame naming the problem
    c = Conn(cl.client[2], hello=False)
    c.send(HELLO, {"version": 1, "client": "plain"})
    t, rid, p = c.recv()
    assert t == 127 and rid == 0 and "serves TLS only" in p["message"], (t, rid, p)
    assert c.recv() is None  # then closed
    assert keep.get_value("keep") == b"1"  # undisturbed
    keep.close()


def test_member_refuses_to_start_naming_the_file():
    port, peer = free_port(), free_port()
    bad = os.path.join(TMP, "not-a-key.pem")
    with open(bad, "w") as f:
        f.write("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    base = ["--listen-client-urls", "https://127.0.0.1:%d" % port,
            "--listen-peer-urls", "http://127.0.0.1:%d" % peer]
    cases = [
        (["--cert-file", C["server"], "--key-file", os.path.join(TMP, "missing.pem")],
         "cannot start: --key-file %s: cannot read: No such file or directory"
         % os.path.join(TMP, "missing.pem")),
        (["--cert-file", C["server"], "--key-file", bad],
         "cannot start: --key-file %s: not a usable PEM private key" % bad),
        (["--cert-file", C["server"], "--key-file", C["client-key"]],
         "cannot start: --key-file %s does not match the certificate in --cert-file %s"
         % (C["client-key"], C["server"])),
        (["--cert-file", C["server"], "--key-file", C["server-key"], "--trusted-ca-file",
          os.path.join(TMP, "no-ca.pem")],
         "cannot start: --trusted-ca-file %s: cannot read" % os.path.join(TMP, "no-ca.pem")),
        (["--cert-file", C["server"], "--key-file", C["server-key"], "--peer-cert-file",
          C["member1"], "--peer-key-file", os.path.join(TMP, "gone.pem")],
         "cannot start: --peer-key-file %s: cannot read" % os.path.join(TMP, "gone.pem")),
        (["--cert-file", C["server"], "--key-file", C["server-key"],
          "--cipher-suites", "TLS_NOT_A_SUITE"],
         'cannot start: unexpected TLS cipher suite "TLS_NOT_A_SUITE"'),
    ]
    for i, (flags, want) in enumerate(cases):
        p = Proc("badstart%d" % i, base + flags)
        rc = p.run_to_exit(10)
        log = p.logtext()
        assert rc == 1 and want in log, (flags, rc, log[-1500:])
        assert not os.path.exists(os.path.join(p.data_dir, "member")), "data dir touched"
    # an https:// URL without a certificate: etcd's message, exit status 2 (a config error)
    p = Proc("badstart-nocert", base)
    assert p.run_to_exit(10) == 2
    assert "TLS key/cert (--cert-file, --key-file) must be provided for client url https://" \
        in p.logtext(), p.logtext()


def intruder(cl, cert, name):
    port, peer = free_port(), free_port()
    ic = ",".join("n%d=https://127.0.0.1:%d" % (i, cl.peer[i]) for i in range(3))
    ic += ",%s=https://127.0.0.1:%d" % (name, peer)
    return Proc(name, ["--listen-client-urls", "http://127.0.0.1:%d" % port,
                       "--listen-peer-urls", "https://127.0.0.1:%d" % peer,
                       "--initial-cluster", ic, "--initial-cluster-token", "tls-it",
                       "--peer-cert-file", C[cert], "--peer-key-file", C[cert + "-key"],
                       "--peer-trusted-ca-file", C["ca"]] + TIMING)


def test_peer_refusals_say_who_and_why():
    cl = cluster()
    terms = cl.terms()
    cases = [
        ("foreign", "the server refused the TLS handshake: tlsv1 alert unknown ca",
         r"refused peer connection from 127\.0\.0\.1:\d+: TLS: client certificate rejected: "
         r"unable to get local issuer certificate: not signed by a CA in --peer-trusted-ca-file "
         r"\(subject CN = member, issuer CN = unrelated CA\)"),
        ("expired", "sslv3 alert certificate expired (our certificate has expired)",
         r"refused peer connection from 127\.0\.0\.1:\d+: TLS: client certificate rejected: "
         r"certificate has expired \(subject CN = member"),
        ("revoked", "sslv3 alert certificate revoked",
         r"refused peer connection from 127\.0\.0\.1:\d+: TLS: client certificate rejected: "
         r"certificate revoked"),
        ("intruder-cn", "the server refused the TLS handshake: sslv3 alert handshake failure",
         r'refused peer connection from 127\.0\.0\.1:\d+: TLS: client certificate rejected: its '
         r'CN "intruder" is not the allowed CN "member"'),
    ]
    fails = []
    for cert, intruder_says, member_says in cases:
        since = [len(m.logtext()) for m in cl.members]
        x = intruder(cl, cert, "x-" + cert)
        try:
            x.wait_log(r"warn peer \S+ peer \w+ \(https://127\.0\.0\.1:\d+\): (raft|snapshot) "
                       r"connection: .*" + re.escape(intruder_says), timeout=8)
            deadline = time.time() + 8
            while not any(re.search(member_says, m.logtext()[s:])
                          for m, s in zip(cl.members, since)):
                assert time.time() < deadline, "no member logged %r" % member_says
                time.sleep(0.1)
        except AssertionError as e:
            fails.append("%s: %s" % (cert, e))
        finally:
            x.kill()
    # a member dialing http:// to a TLS peer port
    since = len(cl.members[0].logtext())
    port, peer = free_port(), free_port()
    ic = "n0=http://127.0.0.1:%d,xp=http://127.0.0.1:%d" % (cl.peer[0], peer)
    x = Proc("xp", ["--listen-client-urls", "http://127.0.0.1:%d" % port,
                         "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                         "--initial-cluster", ic] + TIMING)
    try:
        cl.members[0].wait_log(r"refused peer connection from 127\.0\.0\.1:\d+: TLS: plaintext on "
                               r"a TLS peer port", since, timeout=8)
        x.wait_log(r"closed by the remote before its ACK \(if it serves TLS on its peer port, "
                   r"this peer URL must be https://\)", timeout=8)
    except AssertionError as e:
        fails.append("plaintext peer: %s" % e)
    finally:
        x.kill()
    assert not fails, "\n".join(fails)
    assert cl.terms() == terms, "an election happened: %r -> %r" % (terms, cl.terms())
    assert ctl(["put", "after-intruders", "ok"]).stdout.strip() == "OK"


def test_peer_cert_allowed_hostname():
    """--peer-cert-allowed-hostname (its own member: it excludes the shared
    cluster's --peer-cert-allowed-cn): a learner whose certificate names the
    host only in another DNS SAN is refused, both sides saying why; one whose
    certificate names it only as the CN (no DNS SAN: OpenSSL's rule) joins
    and catches up. h0's own certificate names it as a DNS SAN, and the
    joiner checks it with the same flag."""
    def flags(cert):
        return ["--peer-cert-file", C[cert], "--peer-key-file", C[cert + "-key"],
                "--peer-trusted-ca-file", C["ca"], "--peer-client-cert-auth",
                "--peer-cert-allowed-hostname", "member.ketch.test"] + TIMING

    cport, pport = free_port(), free_port()
    h0 = Proc("h0", ["--listen-client-urls", "http://127.0.0.1:%d" % cport,
                     "--listen-peer-urls", "https://127.0.0.1:%d" % pport,
                     "--initial-advertise-peer-urls", "https://127.0.0.1:%d" % pport,
                     "--initial-cluster", "h0=https://127.0.0.1:%d" % pport] + flags("host-san"))
    ep = "http://127.0.0.1:%d" % cport
    joiners = []

    def join(name, cert):
        port, peer = free_port(), free_port()
        add = ctl(["member", "add", name, "--peer-urls=https://127.0.0.1:%d" % peer, "--learner"],
                  eps=ep, tls=False)
        env = dict(re.findall(r'^(KETCH_[A-Z_]+)="(.*)"$', add.stdout, re.M))
        menv = dict(os.environ, **{k: v for k, v in env.items() if k != "KETCH_NAME"})
        p = Proc(name, ["--listen-client-urls", "http://127.0.0.1:%d" % port,
                        "--listen-peer-urls", "https://127.0.0.1:%d" % peer] + flags(cert),
                 env=menv)
        joiners.append(p)
        return p, port, add.stdout.split()[1]

    try:
        deadline = time.time() + 15
        while ctl(["put", "host/k", "v"], eps=ep, tls=False, check=False).returncode != 0:
            assert time.time() < deadline, h0.logtext()[-2000:]
            time.sleep(0.1)
        since = len(h0.logtext())
        bad, _, bad_id = join("hbad", "host-other")
        h0.wait_log(r"refused peer connection from 127\.0\.0\.1:\d+: TLS: client certificate "
                    r"rejected: it is not valid for the allowed hostname \"member\.ketch\.test\" "
                    r"\(subject CN = member\.ketch\.test\)", since, timeout=10)
        bad.wait_log(r"the server refused the TLS handshake: \S+ alert", timeout=10)
        assert "joined cluster" not in bad.logtext(), bad.logtext()[-2000:]
        ctl(["member", "remove", bad_id], eps=ep, tls=False)
        bad.kill()
        good, gport, good_id = join("hgood", "host-cn")
        good.wait_log(r"joined cluster \w+ as member 0*%s via https://" % good_id, timeout=15)
        deadline = time.time() + 15
        while True:
            try:
                c = Conn(gport)
                kvs = c.call(RANGE, {"key": b"host/k", "serializable": True}).get("kvs")
                c.close()
            except (OSError, ServerError, ConnectionError):
                kvs = None
            if kvs:
                break
            assert time.time() < deadline, "the learner did not catch up: " + \
                good.logtext()[-2000:]
            time.sleep(0.1)
        assert kvs[0][1] == b"v"
        assert re.search(r"connected to peer \w+ \(127\.0\.0\.1:\d+\) channel=raft",
                         good.logtext()), good.logtext()[-2000:]
    finally:
        for p in joiners:
            p.kill()
        h0.stop()


def test_member_joins_over_tls_and_catches_up_by_snapshot():
    cl = cluster()
    c = TlsConn(cl.client[0], timeout=30)
    for b in range(0, 3500, 500):  # past snapshots far enough for the log to be compacted
        for i in range(b, b + 500):
            c.send(PUT, {"key": b"snap/%04d" % i, "value": b"x" * 100})
        for _ in range(500):
            assert c.recv()[0] == PUT
    c.close()
    port, peer = free_port(), free_port()
    add = ctl(["member", "add", "n3", "--peer-urls=https://127.0.0.1:%d" % peer, "--learner"])
    env = dict(re.findall(r'^(KETCH_[A-Z_]+)="(.*)"$', add.stdout, re.M))
    assert env["KETCH_INITIAL_CLUSTER_STATE"] == "existing" and \
        env["KETCH_INITIAL_CLUSTER"].count("=https://") == 4, add.stdout
    new_id = add.stdout.split()[1]
    menv = dict(os.environ, **{k: v for k, v in env.items() if k != "KETCH_NAME"})
    n3 = Proc("n3", ["--listen-client-urls", "https://127.0.0.1:%d" % port,
                     "--listen-peer-urls", "https://127.0.0.1:%d" % peer,
                     "--snapshot-count", "200", "--experimental-snapshot-catchup-entries", "20"]
              + TIMING + tls_flags(3), env=menv)
    try:
        n3.wait_ready(port)
        n3.wait_log(r"joined cluster \w+ as member 0*%s via https://" % new_id, timeout=10)
        n3.wait_log(r"installed snapshot", timeout=20)
        deadline = time.time() + 20
        while True:
            kvs = TlsConn(port).call(RANGE, {"key": b"snap/3499", "serializable": True}).get("kvs")
            if kvs:
                break
            assert time.time() < deadline, "the learner did not catch up"
            time.sleep(0.1)
        assert kvs[0][1] == b"x" * 100
    finally:
        try:
            ctl(["member", "remove", new_id], check=False)
        finally:
            n3.kill()


# ---- a member of its own: rotation ----

def copy(src, dst):
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    os.rename(tmp, dst)


def test_reload_rotates_certificate_and_ca_keeping_connections():
    live = os.path.join(TMP, "live")
    os.makedirs(live, exist_ok=True)
    files = {"cert": os.path.join(live, "server.pem"), "key": os.path.join(live, "server-key.pem"),
             "ca": os.path.join(live, "ca.pem")}

    def install(cert, key, ca):
        copy(C[key], files["key"])
        copy(C[cert], files["cert"])
        copy(C[ca], files["ca"])

    install("server", "server-key", "ca")
    port, peer = free_port(), free_port()
    mport = free_port()
    m = Proc("rot", ["--listen-metrics-urls", "https://127.0.0.1:%d" % mport,
                     "--listen-client-urls", "https://127.0.0.1:%d" % port,
                     "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                     "--cert-file", files["cert"], "--key-file", files["key"],
                     "--trusted-ca-file", files["ca"]], wait_port=port)
    ep = "https://127.0.0.1:%d" % port
    watch = subprocess.Popen([TLS_CLIENT, ep, C["ca"], C["client"], C["client-key"], "-",
                              "watch", "rot/k", "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert watch.stdout.readline().strip() == "created"
        # rotation 1: a new CA and a server certificate it signed; SIGHUP
        install("server2", "server2-key", "ca2")
        since = len(m.logtext())
        m.proc.send_signal(signal.SIGHUP)
        m.wait_log(r"reloaded the client certificates \(SIGHUP\) generation=2", since)
        rc, out = tls_client(ep, "put", "rot/k", "new", ca="ca2", cert="client2")
        assert rc == 0, out
        rc, out = tls_client(ep, "get", "rot/k")  # the old CA no longer verifies it
        assert rc == 2 and "server certificate rejected" in out, out
        rc, out = tls_client(ep, "get", "rot/k", ca="ca2")  # old client certificate, new CA
        assert rc == 2 and "alert unknown ca" in out, out
        # the https metrics URL serves the same reloaded certificates
        rc, out, err = curl("https://127.0.0.1:%d/health" % mport, ca="ca2", cert="client2")
        assert rc == 0 and '"health":"true"' in out and "CN=ketch test CA 2" in err, err[-1500:]
        # the connection opened before the rotation still works (its watch sees the put)
        assert watch.stdout.readline().strip() == "event PUT rot/k new"
        assert watch.wait(10) == 0
        # rotation 2, back, with no signal: the changed files are noticed
        since = len(m.logtext())
        install("server", "server-key", "ca")
        m.wait_log(r"reloaded the client certificates \(files changed\) generation=3", since,
                   timeout=10)
        rc, out = tls_client(ep, "get", "rot/k")
        assert rc == 0 and out.strip() == "value new", out
        # a broken rotation (a key that does not match) keeps the working certificates
        since = len(m.logtext())
        copy(C["client-key"], files["key"])
        m.proc.send_signal(signal.SIGHUP)
        m.wait_log(r"reload of the client certificates failed \(SIGHUP\); keeping the previous "
                   r"ones: --key-file \S+ does not match the certificate", since)
        rc, out = tls_client(ep, "get", "rot/k")
        assert rc == 0, out
    finally:
        if watch.poll() is None:
            watch.kill()
        m.stop()


# ---- auto-tls ----

def test_auto_tls_on_both_links():
    cp = [free_port() for _ in range(2)]
    pp = [free_port() for _ in range(2)]
    ic = ",".join("a%d=https://127.0.0.1:%d" % (i, pp[i]) for i in range(2))
    ms = [Proc("a%d" % i, ["--listen-client-urls", "https://127.0.0.1:%d" % cp[i],
                           "--listen-peer-urls", "https://127.0.0.1:%d" % pp[i],
                           "--initial-cluster", ic, "--auto-tls", "--peer-auto-tls"] + TIMING +
               (["--tls-min-version", "TLS1.3"] if i == 0 else []))
          for i in range(2)]
    try:
        eps = ",".join("https://127.0.0.1:%d" % p for p in cp)
        deadline = time.time() + 15
        while True:
            p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", eps,
                                "--insecure-skip-tls-verify", "--command-timeout", "2s",
                                "put", "auto", "tls"], capture_output=True, text=True)
            if p.returncode == 0:
                break
            assert time.time() < deadline, p.stderr + ms[0].logtext()[-2000:]
            time.sleep(0.2)
        for m in ms:
            for kind in ("client", "peer"):
                for f in ("cert.pem", "key.pem"):
                    assert os.path.exists(os.path.join(m.data_dir, "fixtures", kind, f))
            assert re.search(r"connected to peer \w+ \(127\.0\.0\.1:\d+\) channel=raft",
                             m.logtext())
        p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints",
                            "https://127.0.0.1:%d" % cp[1], "--insecure-skip-tls-verify",
                            "get", "auto"], capture_output=True, text=True)
        assert p.stdout.splitlines() == ["auto", "tls"], p.stdout + p.stderr
        # without --insecure-skip-tls-verify the self-signed certificate is refused
        p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints",
                            "https://127.0.0.1:%d" % cp[0], "--command-timeout", "2s",
                            "get", "auto"], capture_output=True, text=True)
        assert p.returncode != 0 and "server certificate rejected" in p.stderr, p.stderr
        s = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % cp[0]],
                           input="", capture_output=True, text=True, timeout=10)
        assert re.search(r"New, TLSv1\.3, Cipher is", s.stdout), s.stdout[-1500:]
        assert "O = ketch" in s.stdout, s.stdout[-1500:]
        # --tls-min-version TLS1.3 (a0): a TLS 1.2-only client is refused, and both sides say so
        s = subprocess.run(["openssl", "s_client", "-tls1_2", "-connect",
                            "127.0.0.1:%d" % cp[0]], input="", capture_output=True, text=True,
                           timeout=10)
        assert "alert protocol version" in s.stdout + s.stderr, s.stdout[-800:] + s.stderr[-800:]
        ms[0].wait_log(r"no TLS version or cipher suite in common with the client")
    finally:
        for m in ms:
            m.stop()


def teardown():
    global CL
    if CL is not None:
        c, CL = CL, None
        c.close()


def test_cluster_stops_cleanly():
    if CL is not None:
        assert all(m.proc.poll() is None for m in CL.members)
    teardown()
    shutil.rmtree(TMP, ignore_errors=True)


def cleanup():
    try:
        teardown()
    finally:
        if not os.environ.get("KT_KEEP_TMP"):
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    import atexit
    atexit.register(cleanup)
    run_tests([test_three_members_over_tls_on_both_links, test_libketch_over_tls,
               test_plaintext_and_tls_side_by_side,
               test_metrics_over_https_with_the_client_tls_settings,
               test_metrics_on_https_client_urls_beside_native_tls_clients,
               test_client_refusals_say_why_on_both_sides,
               test_member_refuses_to_start_naming_the_file, test_peer_refusals_say_who_and_why,
               test_peer_cert_allowed_hostname,
               test_member_joins_over_tls_and_catches_up_by_snapshot,
               test_reload_rotates_certificate_and_ca_keeping_connections,
               test_auto_tls_on_both_links, test_cluster_stops_cleanly])
