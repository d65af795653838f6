"""ketch-grpc over TLS with real etcd clients and real certificates (openssl
CLI, tlscerts.py): etcdctl 3.4 and python3-etcd3 with --cacert/--cert/--key
through the bridge's TLS listener (client certificates required), the same
commands against a real etcd 3.4 started with the same certificates, outputs
compared (normalized as grpc_test.py does); the bridge reaches a ketch member
over TLS with its own client certificate and passes each caller's verified
Common Name on as the caller's identity (the member logs it); openssl
s_client -alpn h2 shows TLS 1.3 and ALPN h2; clients refused on both sides
(no certificate, an expired or revoked one, another CA, plaintext on the TLS
listener), with the same etcdctl output as etcd gives and one line in the
bridge's log; a plaintext bridge refuses a TLS client the same way."""
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import tlscerts
from grpc_test import ETCD, ETCDCTL, norm_text, wait_port
from harness import BIN, bridge_loops, free_port, run_tests

TMP = tempfile.mkdtemp(prefix="ketch-grpc-tls-it-")
C = tlscerts.make(TMP)


class Env:
    def __init__(self):
        self.procs, self.logs = [], {}
        self.member_port, peer = free_port(), free_port()
        self.member = self.spawn("member", [
            os.path.join(BIN, "ketch"), "--name", "m0", "--data-dir", os.path.join(TMP, "m0"),
            "--listen-client-urls", "https://127.0.0.1:%d" % self.member_port,
            "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
            "--cert-file", C["server"], "--key-file", C["server-key"],
            "--trusted-ca-file", C["ca"], "--log-level", "debug"])
        wait_port(self.member_port, self.member, "ketch")
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self.bridge = self.spawn("bridge", [
            os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % self.grpc_port,
            "--endpoints", "https://127.0.0.1:%d" % self.member_port,
            "--cert-file", C["server"], "--key-file", C["server-key"],
            "--trusted-ca-file", C["ca"], "--client-cert-auth",
            "--cacert", C["ca"], "--cert", C["proxy"], "--key", C["proxy-key"],
            "--metrics-addr", "https://127.0.0.1:%d" % self.metrics_port,
            "--log-level", "debug"] + bridge_loops(2))
        wait_port(self.grpc_port, self.bridge, "ketch-grpc")
        self.etcd_port, etcd_peer = free_port(), free_port()
        peer_url = "http://127.0.0.1:%d" % etcd_peer
        client_url = "https://127.0.0.1:%d" % self.etcd_port
        self.etcd = self.spawn("etcd", [
            ETCD, "--name", "e0", "--data-dir", os.path.join(TMP, "etcd"),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", "e0=" + peer_url, "--log-outputs", "stderr",
            "--cert-file", C["server"], "--key-file", C["server-key"],
            "--trusted-ca-file", C["ca"], "--client-cert-auth"])
        wait_port(self.etcd_port, self.etcd, "etcd")
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.ctl(self.etcd_port, ["endpoint", "health"])[0] == 0 and \
                    self.ctl(self.grpc_port, ["endpoint", "health"])[0] == 0:
                break
            time.sleep(0.1)

    def spawn(self, name, args):
        path = os.path.join(TMP, name + ".log")
        self.logs[name] = path
        p = subprocess.Popen(args, stdout=open(path, "wb"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def log(self, name):
        with open(self.logs[name], "rb") as f:
            return f.read().decode("utf-8", "replace")

    def ctl(self, port, args, tls=("ca", "client"), stdin=None, timeout=30):
        flags = []
        if tls:
            ca, cert = tls
            flags = ["--cacert", C[ca]] + (["--cert", C[cert], "--key", C[cert + "-key"]]
                                           if cert else [])
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.run([ETCDCTL, "--endpoints", "127.0.0.1:%d" % port,
                            "--dial-timeout", "2s", "--command-timeout", "3s"] + flags + args,
                           input=stdin, capture_output=True, env=env, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def close(self):
        rc = None
        if self.bridge.poll() is None:
            self.bridge.terminate()
            try:
                rc = self.bridge.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        text = self.log("bridge")
        if "Sanitizer" in text or "runtime error" in text or rc != 0:
            raise AssertionError("ketch-grpc did not stop cleanly (%r): %s" % (rc, text[-3000:]))


ENV = None


def env():
    global ENV
    if ENV is None:
        ENV = Env()
    return ENV


def compare(cmds, tls=("ca", "client")):
    e = env()
    diffs = []
    for args in cmds:
        want = e.ctl(e.etcd_port, args, tls)
        assert b"USAGE:" not in want[2] + want[1], "etcdctl refused %r: fix the test" % args
        got = e.ctl(e.grpc_port, args, tls)
        w = (want[0], norm_text(want[1]), norm_text(want[2]))
        g = (got[0], norm_text(got[1]), norm_text(got[2]))
        if w != g:
            diffs.append("etcdctl %s (tls %r):\n  etcd:  %r\n  ketch: %r" % (" ".join(args), tls,
                                                                              w, g))
    assert e.bridge.poll() is None, "ketch-grpc exited"
    assert not diffs, "%d of %d differ:\n%s" % (len(diffs), len(cmds), "\n".join(diffs))


TXN = 'value("t") = "1"\n\nput t 2\nget t\n\nput t 3\n\n'


def test_etcdctl_over_tls_same_as_etcd():
    compare([["put", "a", "1"], ["put", "ab", "2", "--prev-kv"], ["put", "t", "1"],
             ["get", "a"], ["get", "a", "--prefix", "-w", "json"], ["get", "nope"]])
    e = env()
    outs = []
    for port in (e.etcd_port, e.grpc_port):  # txn reads stdin
        rc, out, err = e.ctl(port, ["txn", "-i"], stdin=TXN.encode())
        outs.append((rc, out, norm_text(err)))
    assert outs[0] == outs[1] and b"\nSUCCESS\n" in outs[0][1], outs
    compare([["get", "t"], ["del", "ab", "--prev-kv"], ["get", "", "--prefix", "-w", "json"],
             ["compaction", "2"], ["get", "a", "--rev", "1"], ["endpoint", "status", "-w", "json"],
             ["alarm", "list"]])


def test_watch_over_tls():
    e = env()
    outs = []
    for port in (e.etcd_port, e.grpc_port):
        w = subprocess.Popen([ETCDCTL, "--endpoints", "127.0.0.1:%d" % port, "--cacert", C["ca"],
                              "--cert", C["client"], "--key", C["client-key"], "watch", "w/",
                              "--prefix"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, ETCDCTL_API="3"))
        time.sleep(0.5)
        for k, v in (("w/1", "a"), ("w/2", "b")):
            assert e.ctl(port, ["put", k, v])[0] == 0
        time.sleep(0.5)
        w.terminate()
        out, _ = w.communicate(timeout=10)
        outs.append(out)
    assert outs[0] == outs[1] and outs[0].count(b"PUT") == 2, outs


def test_python_etcd3_over_tls():
    script = """
import sys, etcd3
ca, cert, key = sys.argv[2:5]
c = etcd3.client(host="127.0.0.1", port=int(sys.argv[1]), ca_cert=ca, cert_cert=cert,
                 cert_key=key, timeout=10)
c.put("py/k", "v1")
v, meta = c.get("py/k")
ok, _ = c.transaction(compare=[c.transactions.value("py/k") == "v1"],
                      success=[c.transactions.put("py/k", "v2")], failure=[])
l = c.lease(30)
c.put("py/l", "x", lease=l)
print(v.decode(), meta.version, ok, c.get("py/k")[0].decode(), c.get("py/l")[0].decode(),
      l.remaining_ttl > 0)
"""
    e = env()
    outs = []
    for port in (e.etcd_port, e.grpc_port):
        p = subprocess.run(["/usr/bin/python3", "-c", script, str(port), C["ca"], C["client"],
                            C["client-key"]], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append(p.stdout)
    assert outs[0] == outs[1] == "v1 1 True v2 x True\n", outs


def s_client(port, *args):
    p = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile",
                        C["ca"], "-cert", C["client"], "-key", C["client-key"]] + list(args),
                       input=b"", capture_output=True, timeout=10)
    return (p.stdout + p.stderr).decode("utf-8", "replace")  # the server's SETTINGS are binary


def test_s_client_sees_tls13_and_alpn_h2():
    e = env()
    out = s_client(e.grpc_port, "-alpn", "h2")
    assert "ALPN protocol: h2" in out, out[-2000:]
    assert re.search(r"New, TLSv1\.3, Cipher is", out), out[-2000:]
    assert "Verify return code: 0 (ok)" in out, out[-2000:]
    # a client that offers only another protocol is refused (gRPC needs h2)
    out = s_client(e.grpc_port, "-alpn", "http/1.1")
    assert "no application protocol" in out, out[-1500:]


def test_callers_common_name_reaches_the_member():
    e = env()
    assert e.ctl(e.grpc_port, ["put", "who", "alice"])[0] == 0
    log = e.log("member")
    assert re.search(r"client hello peer=127\.0\.0\.1:\d+ tls=TLSv1\.3 cert-cn=ketch-grpc "
                     r"identity=alice", log), log[-3000:]
    # a member believes an identity only from a connection with a verified certificate
    blog = e.log("bridge")
    assert "upstream for identity alice" in blog, blog[-2000:]


def test_common_name_is_the_user_with_auth_on_same_as_etcd():
    """With auth on and no --user, a client certificate's Common Name is the
    user (etcd's CN auth): alice's certificate gets alice's permissions
    through ketch-grpc (the bridge names her to the member) as from etcd; a
    certificate naming no user is denied. Auth is off again afterwards."""
    compare([["user", "add", "root", "--new-user-password", "rootpw"],
             ["user", "grant-role", "root", "root"],
             ["role", "add", "cnr"],
             ["role", "grant-permission", "cnr", "read", "/cn/", "--prefix"],
             ["user", "add", "alice", "--new-user-password", "alicepw"],
             ["user", "grant-role", "alice", "cnr"],
             ["put", "/cn/1", "v"], ["put", "/cx/1", "v"],
             ["auth", "enable"],
             ["get", "/cn/1"], ["get", "/cx/1"], ["put", "/cn/2", "x"], ["get", "/c", "--prefix"],
             ["user", "list"], ["user", "get", "alice"]])
    compare([["get", "/cn/1"], ["user", "list"]], tls=("ca", "proxy"))  # CN ketch-grpc: no user
    e = env()  # natively: ketchctl with the same certificates straight to the member
    for cert in ("client", "proxy"):
        for args in (["get", "/cn/1"], ["get", "/cx/1"], ["put", "/cn/2", "x"], ["user", "list"]):
            want = e.ctl(e.etcd_port, args, ("ca", cert))
            p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints",
                                "127.0.0.1:%d" % e.member_port, "--cacert", C["ca"], "--cert",
                                C[cert], "--key", C[cert + "-key"]] + args,
                               capture_output=True, timeout=30)
            errs = [ln for ln in want[2].decode().splitlines() if ln.startswith("Error:")]
            got = (p.returncode, p.stdout.decode(), p.stderr.decode().splitlines())
            assert got == (want[0], want[1].decode(), errs), (cert, args, want, got)
    compare([["--user", "root:rootpw", "auth", "disable"], ["user", "delete", "alice"],
             ["user", "delete", "root"], ["role", "delete", "cnr"], ["del", "/c", "--prefix"]])


def test_refused_clients_same_as_etcd_and_logged():
    e = env()
    cases = [
        (("ca", None), r"TLS handshake failed: the client presented no certificate"),
        (("ca", "expired"), r"TLS handshake failed: client certificate rejected: certificate "
                            r"has expired"),
        (("ca", "revoked"), None),  # no CRL given: etcd and ketch both accept it
        (("other-ca", "client"), r"TLS handshake failed: the client refused the TLS handshake: "
                                 r"\S+ alert (unknown ca|bad certificate)"),
        (None, r"a plaintext \(h2c\) client on the TLS listener"),
    ]
    since = len(e.log("bridge"))
    runs = [(tls, port) for tls, _ in cases for port in (e.etcd_port, e.grpc_port)]
    with ThreadPoolExecutor(len(runs)) as ex:  # each waits for its command timeout
        res = list(ex.map(lambda r: e.ctl(r[1], ["get", "a"], r[0]), runs))
    diffs = []
    for i, (tls, _) in enumerate(cases):
        w, g = res[2 * i], res[2 * i + 1]
        w = (w[0], norm_text(w[1]), norm_text(w[2]))
        g = (g[0], norm_text(g[1]), norm_text(g[2]))
        if w != g:
            diffs.append("tls %r:\n  etcd:  %r\n  ketch: %r" % (tls, w, g))
    assert not diffs, "\n".join(diffs)
    text = e.log("bridge")[since:]
    missing = [says for _, says in cases if says and not re.search(says, text)]
    assert not missing, "the bridge did not log %r: %s" % (missing, text[-3000:])
    assert e.ctl(e.grpc_port, ["get", "a"])[0] == 0  # and it still serves


def curl(url, ca="ca", cert="client"):
    p = subprocess.run(["curl", "-sS", "-v", "--max-time", "5", "--cacert", C[ca]] +
                       (["--cert", C[cert], "--key", C[cert + "-key"]] if cert else []) + [url],
                       capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout, p.stderr


def test_metrics_addr_over_https():
    """--metrics-addr https://: the listener's certificate and client
    certificate rule, HTTP/1.1 even for a client that offers h2 first (curl),
    where the gRPC listener selects h2."""
    e = env()
    url = "https://127.0.0.1:%d" % e.metrics_port
    rc, out, err = curl(url + "/metrics")
    assert rc == 0 and "\ngrpc_server_handled_total{" in out, (rc, err[-1500:])
    assert "ALPN: offers h2" in err and "< HTTP/1.1 200 OK" in err, err[-1500:]
    rc, out, err = curl(url + "/health")
    assert rc == 0 and out.startswith('{"health":"true"'), (out, err[-1500:])
    rc, out, err = curl(url + "/metrics", cert=None)
    assert rc != 0 and "alert certificate required" in err, (rc, err[-1500:])


def test_plaintext_bridge_refuses_tls_clients():
    port, member_port = free_port(), env().member_port
    log = os.path.join(TMP, "plainbridge.log")
    b = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                          "--endpoints", "https://127.0.0.1:%d" % member_port,
                          "--cacert", C["ca"], "--cert", C["proxy"], "--key", C["proxy-key"]],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_port(port, b, "ketch-grpc")
        rc, out, err = env().ctl(port, ["get", "a"])
        assert rc != 0 and b"context deadline exceeded" in err, (rc, out, err)
        text = open(log).read()
        assert "a TLS handshake on the plaintext (h2c) listener" in text, text[-2000:]
        rc, out, err = env().ctl(port, ["get", "a"], tls=None)  # h2c works
        assert rc == 0, err
    finally:
        b.terminate()
        b.wait(10)


def lines(p, n, timeout=10):
    """n lines of p's stdout, waiting at most timeout seconds in all."""
    got, buf, deadline = [], b"", time.time() + timeout
    fd = p.stdout.fileno()
    while len(got) < n:
        left = deadline - time.time()
        assert left > 0 and select.select([fd], [], [], left)[0], "only %r" % got
        chunk = os.read(fd, 4096)
        assert chunk, "EOF after %r" % got
        buf += chunk
        while b"\n" in buf and len(got) < n:
            ln, buf = buf.split(b"\n", 1)
            got.append(ln.decode())
    return got


def test_sighup_reloads_certificate_and_ca_keeping_connections():
    """A bridge whose listener files are replaced (a new CA, a server
    certificate it signed, and the new CA as --trusted-ca-file) and then sent
    SIGHUP: a new client verifies against the new CA with a certificate of
    it, one with the old CA is refused, and a watch opened before keeps
    working (it sees the put made after the reload)."""
    live = os.path.join(TMP, "live")
    os.makedirs(live, exist_ok=True)
    files = {"cert": os.path.join(live, "server.pem"), "key": os.path.join(live, "server-key.pem"),
             "ca": os.path.join(live, "ca.pem")}

    def install(cert, ca):
        for src, dst in ((cert + "-key", "key"), (cert, "cert"), (ca, "ca")):
            shutil.copyfile(C[src], files[dst] + ".tmp")
            os.rename(files[dst] + ".tmp", files[dst])

    install("server", "ca")
    e = env()
    port, mport = free_port(), free_port()
    log = os.path.join(TMP, "rotbridge.log")
    b = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                          "--endpoints", "https://127.0.0.1:%d" % e.member_port,
                          "--cert-file", files["cert"], "--key-file", files["key"],
                          "--trusted-ca-file", files["ca"], "--client-cert-auth",
                          "--cacert", C["ca"], "--cert", C["proxy"], "--key", C["proxy-key"],
                          "--metrics-addr", "https://127.0.0.1:%d" % mport] + bridge_loops(3),
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    w = None
    try:
        wait_port(port, b, "ketch-grpc")
        rc, out, _ = e.ctl(port, ["put", "rot/k", "old", "-w", "json"])
        assert rc == 0, out
        rev = json.loads(out)["header"]["revision"]
        w = subprocess.Popen([ETCDCTL, "--endpoints", "127.0.0.1:%d" % port, "--cacert", C["ca"],
                              "--cert", C["client"], "--key", C["client-key"], "watch", "rot/k",
                              "--rev", str(rev)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, ETCDCTL_API="3"))
        assert lines(w, 3) == ["PUT", "rot/k", "old"]  # its stream is open
        install("server2", "ca2")
        since = len(open(log).read())
        b.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while not re.search(r"reloaded the metrics certificates \(SIGHUP\) generation=2",
                            open(log).read()[since:]):
            assert time.time() < deadline, open(log).read()[-2000:]
            time.sleep(0.05)
        rc, out, err = e.ctl(port, ["put", "rot/k", "new"], ("ca2", "client2"))
        assert rc == 0 and out == b"OK\n", (rc, out, err)
        rc, out, err = e.ctl(port, ["get", "rot/k"], ("ca", "client"))  # the old CA: refused
        assert rc != 0 and b"context deadline exceeded" in err, (rc, out, err)
        s = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile",
                            C["ca2"], "-cert", C["client2"], "-key", C["client2-key"], "-alpn",
                            "h2"], input=b"", capture_output=True, timeout=10)
        assert b"Verify return code: 0 (ok)" in s.stdout and b"CN = ketch test CA 2" in s.stdout, \
            s.stdout[-1500:]
        assert re.search(r"reloaded the listener certificates \(SIGHUP\) generation=2",
                         open(log).read()[since:])
        rc, out, err = curl("https://127.0.0.1:%d/health" % mport, ca="ca2", cert="client2")
        assert rc == 0 and "CN=ketch test CA 2" in err, err[-1500:]  # the metrics URL too
        assert lines(w, 3) == ["PUT", "rot/k", "new"]  # the old connection saw the put
        assert b.poll() is None
    finally:
        if w and w.poll() is None:
            w.kill()
        b.terminate()
        b.wait(10)


def teardown():
    global ENV
    if ENV is not None:
        e, ENV = ENV, None
        e.close()


def test_shutdown_clean():
    teardown()


def cleanup():
    try:
        teardown()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    import atexit
    atexit.register(cleanup)
    run_tests([test_etcdctl_over_tls_same_as_etcd, test_watch_over_tls, test_python_etcd3_over_tls,
               test_s_client_sees_tls13_and_alpn_h2, test_callers_common_name_reaches_the_member,
               test_common_name_is_the_user_with_auth_on_same_as_etcd,
               test_refused_clients_same_as_etcd_and_logged,
               test_metrics_addr_over_https, test_plaintext_bridge_refuses_tls_clients,
               test_sighup_reloads_certificate_and_ca_keeping_connections, test_shutdown_clean])
