"""test/integration/resolver_test.py — clients that find proxies under a
resolver prefix (issue 20 item 5's client side).

One member; two `ketch gateway start --resolver-prefix /px --resolver-ttl 3`
register themselves (etcd's grpc-proxy key layout and naming JSON, marked
"Protocol":"ketch"); a ketch-grpc with --resolver-prefix /px registers too
(a gRPC proxy: native clients must skip it). Then, on the real processes:

  registrations_written          the three keys under /px/, the gateways' values
  ketchctl_uses_the_gateways     ketchctl --resolver-prefix: endpoint status
                                 lists exactly the two gateways; put/get work
  libketch_spreads               24 handles opened with resolver_prefix use
                                 both gateways, never the bridge
  libketch_fails_over_and_reads_again
                                 one handle: its gateway killed -> the other;
                                 both killed and a third registered -> the
                                 handle reads the registrations again and
                                 uses the third (resolver_client.c)
  sigterm_deregisters            a gateway stopped with SIGTERM: its key is
                                 gone at once
  killed_gone_after_ttl          gateways killed with SIGKILL: their keys go
                                 when the lease expires (3 s)
  only_grpc_registered           /px holds only the bridge: ketchctl and
                                 libketch refuse with an error that says so
  nothing_registered             an empty prefix: the error names it

Prints "ok NAME" / "FAIL NAME: why".
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Member, free_port, run_tests  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
O = os.environ.get("O", "build")
CLIENT = os.path.join(ROOT, O, "test", "integration", "resolver_client")
TTL = 3

M = None
PROCS = []  # (name, Popen, log path)
GW = {}     # name -> (Popen, "127.0.0.1:port")
BRIDGE = None


def wait_port(port, proc, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def spawn(name, args):
    log = os.path.join(tempfile.gettempdir(), "ketch-resolver-%d-%s.log" % (os.getpid(), name))
    p = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    PROCS.append((name, p, log))
    return p


def ctl(args, prefix=None, timeout=20):
    cmd = [os.path.join(BIN, "ketchctl"), "--endpoints", M.endpoint, "--dial-timeout", "500ms"]
    if prefix:
        cmd += ["--resolver-prefix", prefix]
    p = subprocess.run(cmd + args, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def keys(prefix):
    rc, out, err = ctl(["get", prefix + "/", "--prefix", "--keys-only"])
    assert rc == 0, err
    return sorted(k for k in out.split("\n") if k)


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def start_gateway(name):
    port = free_port()
    p = spawn(name, [os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                     "127.0.0.1:%d" % port, "--endpoints", M.endpoint, "--resolver-prefix", "/px",
                     "--resolver-ttl", str(TTL), "--connect-timeout", "500ms"])
    wait_port(port, p, name)
    addr = "127.0.0.1:%d" % port
    GW[name] = (p, addr)
    wait_for(lambda: "/px/" + addr in keys("/px"), 10, name + " registered")
    return addr


def setup():
    global M, BRIDGE
    M = Member()
    start_gateway("g1")
    start_gateway("g2")
    port = free_port()
    p = spawn("bridge", [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                         "--endpoints", M.endpoint, "--resolver-prefix", "/px",
                         "--resolver-ttl", str(TTL)])
    wait_port(port, p, "ketch-grpc")
    BRIDGE = "127.0.0.1:%d" % port
    wait_for(lambda: "/px/" + BRIDGE in keys("/px"), 10, "ketch-grpc registered")


def teardown():
    for name, p, log in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
        with open(log, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        if "Sanitizer" in text or "runtime error" in text:
            sys.stderr.write("%s log:\n%s\n" % (name, text[-4000:]))
        os.unlink(log)
    if M:
        M.cleanup()


# ---- cases ----

def registrations_written():
    want = sorted(["/px/" + GW["g1"][1], "/px/" + GW["g2"][1], "/px/" + BRIDGE])
    assert keys("/px") == want, keys("/px")
    rc, out, err = ctl(["get", "/px/" + GW["g1"][1], "--print-value-only"])
    v = json.loads(out)
    meta = json.loads(v["Metadata"])
    assert v["Op"] == 0 and v["Addr"] == GW["g1"][1] and meta["Protocol"] == "ketch", out


def ketchctl_uses_the_gateways():
    rc, out, err = ctl(["endpoint", "status", "-w", "json"], prefix="/px")
    assert rc == 0, err
    eps = sorted(s["Endpoint"] for s in json.loads(out))
    assert eps == sorted([GW["g1"][1], GW["g2"][1]]), eps
    rc, out, err = ctl(["put", "k", "via-gateway"], prefix="/px")
    assert rc == 0 and out == "OK\n", (rc, out, err)
    rc, out, err = ctl(["get", "k", "--print-value-only"])
    assert out == "via-gateway\n", out


def libketch_spreads():
    p = subprocess.run([CLIENT, M.endpoint, "/px", "spread", "24"], capture_output=True,
                       timeout=60)
    lines = p.stdout.decode().split("\n")
    used = [l.split()[1] for l in lines if l.startswith("endpoint ")]
    assert p.returncode == 0 and len(used) == 24, p.stdout.decode() + p.stderr.decode()
    assert set(used) == {GW["g1"][1], GW["g2"][1]}, used


def libketch_fails_over_and_reads_again():
    p = subprocess.Popen([CLIENT, M.endpoint, "/px", "again", "k"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def step():
            line = p.stdout.readline().decode().strip()
            assert line.startswith("value via-gateway "), line
            return line.split()[2]

        first = step()
        names = {a: n for n, (_, a) in GW.items()}
        assert first in names, first
        GW[names[first]][0].kill()  # SIGKILL: its registration stays until the TTL
        p.stdin.write(b"\n")
        p.stdin.flush()
        second = step()
        assert second != first and second in names, (first, second)
        GW[names[second]][0].kill()
        third = start_gateway("g3")
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert step() == third  # read again: the only live one registered
    finally:
        p.stdin.close()
        p.wait(20)


def sigterm_deregisters():
    gp, addr = GW["g3"]
    gp.send_signal(signal.SIGTERM)
    gp.wait(10)
    assert "/px/" + addr not in keys("/px"), keys("/px")


def killed_gone_after_ttl():
    gone = ["/px/" + GW["g1"][1], "/px/" + GW["g2"][1]]
    start = time.time()
    wait_for(lambda: not set(gone) & set(keys("/px")), TTL + 4, "killed gateways' keys to expire")
    assert time.time() - start <= TTL + 4


def only_grpc_registered():
    assert keys("/px") == ["/px/" + BRIDGE], keys("/px")
    rc, out, err = ctl(["get", "k"], prefix="/px")
    assert rc == 1 and 'no ketch endpoint registered under "/px/"' in err \
        and "gRPC proxies (ketch-grpc)" in err, (rc, out, err)
    p = subprocess.run([CLIENT, M.endpoint, "/px", "again", "k"], capture_output=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    out = p.stdout.decode()
    assert p.returncode == 2 and out.startswith("error ENOTFOUND: no ketch endpoint"), out


def nothing_registered():
    rc, out, err = ctl(["get", "k"], prefix="/none")
    assert rc == 1 and 'no ketch endpoint registered under "/none/"' in err \
        and "gRPC" not in err, (rc, out, err)


def main():
    try:
        setup()
        run_tests([registrations_written, ketchctl_uses_the_gateways, libketch_spreads,
                   libketch_fails_over_and_reads_again, sigterm_deregisters,
                   killed_gone_after_ttl, only_grpc_registered, nothing_registered])
    finally:
        teardown()


if __name__ == "__main__":
    main()
