"""test/integration/gateway_test.py — `ketch gateway start`, the L4 proxy,
in front of a real 3-member cluster (and of ketch-grpc for etcdctl).

  gw_ketchctl        ketchctl through the gateway: put, get, member list
  gw_etcdctl         etcdctl 3.4 through a second gateway in front of ketch-grpc
  gw_slow_reader     a client that never reads, behind a gateway (with and
                     without --splice) to a source
                     that floods 100 MiB: the gateway takes < 16 MiB from the
                     source and its RSS stays flat (bounded buffers,
                     backpressure), and passes on everything once the client
                     reads; the same with 400 pipelined reads of a 256 KiB
                     value through the cluster gateway, others still served
  gw_1000_conns      1,000 connections open at once through the gateway, each
                     completes a HELLO and a read
  gw_health_native   with --health-check native a paused member (SIGSTOP: its
                     kernel still accepts connections) is found unhealthy and
                     not used; after SIGCONT it is healthy again
  gw_member_killed   the member a client's connection went to is killed: that
                     connection ends, new connections go to the survivors at
                     once, the dead endpoint is skipped (failures=1 in the
                     counters), and after --retry-delay (3 s) and a restart it
                     is used again ("is back")
  gw_metrics         --listen-metrics-urls: /metrics counts client connections,
                     per-endpoint connections, bytes and failures (a dead
                     endpoint: failures 1, up 0), passes `promtool check
                     metrics`; an https:// metrics URL is refused

Bounded: every process and socket has a timeout; the file takes ~30 s.
Env: KETCH_BIN = the bin dir. Prints "ok NAME" / "FAIL NAME: why" per case.
"""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, RANGE, Conn, Member, free_port, run_tests  # noqa: E402

ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]
ENV = {}


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


class Gateway:
    def __init__(self, endpoints, extra=()):
        self.port = free_port()
        self.log_path = os.path.join(tempfile.gettempdir(), "ketch-gw-%d-%d.log" %
                                     (os.getpid(), self.port))
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
             "127.0.0.1:%d" % self.port, "--endpoints", endpoints] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_port(self.port, self.proc, "ketch gateway")
        except Exception:
            self.proc.kill()
            self.proc.wait()
            raise

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.port

    def logtext(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("gateway did not stop on SIGTERM")
            assert rc == 0, "gateway exited %s: %s" % (rc, self.logtext()[-1500:])
        text = self.logtext()
        if "Sanitizer" in text or "runtime error" in text:
            raise AssertionError("sanitizer report in the gateway's log: " + text[-4000:])
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def ketchctl(*args, timeout=15):
    p = subprocess.run([os.path.join(BIN, "ketchctl")] + list(args), capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def setup():
    ports = [(free_port(), free_port()) for _ in range(3)]
    names = ["g%d" % i for i in range(3)]
    ic = ",".join("%s=http://127.0.0.1:%d" % (names[i], ports[i][1]) for i in range(3))
    ms = [Member(name=names[i], port=ports[i][0], peer_port=ports[i][1], wait=False,
                 extra=["--initial-cluster", ic, "--initial-cluster-token", "gw"] + TIMING)
          for i in range(3)]
    ENV["members"] = ms
    for m in ms:
        m.wait_ready()
    eps = ",".join(m.endpoint for m in ms)
    ENV["gw"] = Gateway(eps, ["--retry-delay", "3s", "--connect-timeout", "500ms",
                              "--stats-interval", "300ms", "--log-level", "debug"])
    deadline = time.time() + 10
    while ketchctl("--endpoints", ENV["gw"].endpoint, "put", "k", "v")[0] != 0:
        assert time.time() < deadline, "no leader"
        time.sleep(0.2)


def test_gw_ketchctl():
    gw = ENV["gw"]
    rc, out, err = ketchctl("--endpoints", gw.endpoint, "put", "foo", "bar")
    assert rc == 0 and out.strip() == "OK", (rc, out, err)
    for _ in range(3):  # three connections: round robin over the members
        rc, out, err = ketchctl("--endpoints", gw.endpoint, "get", "foo")
        assert rc == 0 and out.split() == ["foo", "bar"], (rc, out, err)
    rc, out, err = ketchctl("--endpoints", gw.endpoint, "member", "list")
    assert rc == 0 and len(out.strip().splitlines()) == 3, (rc, out, err)
    used = set(re.findall(r"endpoint=(127\.0\.0\.1:\d+) connected", gw.logtext()))
    assert used == set(m.endpoint for m in ENV["members"]), used


def test_gw_etcdctl():
    ms = ENV["members"]
    gport = free_port()
    log = open(os.path.join(tempfile.gettempdir(), "ketch-gw-grpc-%d.log" % os.getpid()), "wb")
    bridge = subprocess.Popen(
        [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % gport,
         "--endpoints", ",".join(m.endpoint for m in ms)], stdout=log, stderr=subprocess.STDOUT)
    gw2 = None
    try:
        wait_port(gport, bridge, "ketch-grpc")
        gw2 = Gateway("127.0.0.1:%d" % gport)
        env = dict(os.environ, ETCDCTL_API="3")
        run = lambda *a: subprocess.run([ETCDCTL, "--endpoints", gw2.endpoint] + list(a),  # noqa
                                        capture_output=True, text=True, timeout=15, env=env)
        p = run("put", "ek", "ev")
        assert p.returncode == 0 and p.stdout.strip() == "OK", (p.stdout, p.stderr)
        p = run("get", "ek")
        assert p.returncode == 0 and p.stdout.split() == ["ek", "ev"], (p.stdout, p.stderr)
        p = run("get", "foo")
        assert p.returncode == 0 and p.stdout.split() == ["foo", "bar"], (p.stdout, p.stderr)
    finally:
        if gw2:
            gw2.stop()
        bridge.terminate()
        bridge.wait(10)
        log.close()


def flood_server(total, stop):
    """A TCP server that writes `total` bytes to each client in turn as fast
    as the client takes them (the gateway is protocol-blind)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    ls.settimeout(10)
    sent = [0]

    def run():
        try:
            while not stop.is_set():  # the first clients may be readiness probes
                c, _ = ls.accept()
                c.settimeout(0.2)
                chunk = b"y" * (1 << 20)
                sent[0] = 0
                try:
                    while sent[0] < total and not stop.is_set():
                        try:
                            sent[0] += c.send(chunk)
                        except socket.timeout:
                            pass
                except OSError:
                    pass
                c.close()
        except OSError:
            pass
        finally:
            ls.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return ls.getsockname()[1], sent, t


def test_gw_slow_reader():
    # 1. A source that floods (100 MiB) to a client that never reads: the
    # gateway stops reading from the source, its RSS stays flat.
    for mode in ([], ["--splice"]):  # copied through memory, or spliced through pipes
        stop = threading.Event()
        port, sent, t = flood_server(100 << 20, stop)
        gw3 = Gateway("127.0.0.1:%d" % port, ["--max-buffer", "65536"] + mode)
        try:
            before = gw3.rss_kb()
            s = socket.create_connection(("127.0.0.1", gw3.port), timeout=5)
            time.sleep(2)
            grown = gw3.rss_kb() - before
            assert sent[0] < (16 << 20), "the gateway took %d bytes from the source" % sent[0]
            assert grown < 8 * 1024, \
                "gateway RSS grew by %d KiB with a client that does not read" % grown
            # 2. It still passes everything on once the client reads.
            s.settimeout(5)
            got = 0
            while got < (4 << 20):
                d = s.recv(1 << 20)
                assert d, "the gateway closed the connection"
                got += len(d)
            s.close()
        finally:
            stop.set()
            t.join(5)
            gw3.stop()
    # 3. The same through the cluster gateway: a client pipelining 400 reads
    # of a 256 KiB value and reading nothing; others are still served.
    gw = ENV["gw"]
    big = b"x" * (256 << 10)
    c = Conn(gw.port)
    c.put("big", big)
    before = gw.rss_kb()
    s = Conn(gw.port)
    frames = b""
    for i in range(400):
        body = msgpack.packb([RANGE, 100 + i, {"key": b"big"}], use_bin_type=True)
        frames += struct.pack(">I", len(body)) + body
    s.sock.setblocking(False)
    n, deadline = 0, time.time() + 3
    while n < len(frames) and time.time() < deadline:
        try:
            n += s.sock.send(frames[n:])
        except BlockingIOError:
            time.sleep(0.05)
    time.sleep(1)
    grown = gw.rss_kb() - before
    assert grown < 8 * 1024, "gateway RSS grew by %d KiB with a client that does not read" % grown
    assert c.get_value("big") == big
    s.close()
    c.close()


def test_gw_1000_conns():
    gw = ENV["gw"]
    conns = []
    try:
        for _ in range(1000):
            conns.append(Conn(gw.port, timeout=10))
        for i, c in enumerate(conns):
            assert c.get_value("foo") == b"bar", i
    finally:
        for c in conns:
            c.close()


def test_gw_health_native():
    """--health-check native finds a paused member (its kernel still accepts
    connections) and stops using it; it is used again once it answers."""
    ms = ENV["members"]
    gw = Gateway(",".join(m.endpoint for m in ms),
                 ["--health-check", "native", "--health-interval", "300ms",
                  "--connect-timeout", "500ms", "--log-level", "debug"])
    paused = ms[2]
    try:
        try:
            paused.proc.send_signal(signal.SIGSTOP)
            deadline = time.time() + 10
            while "endpoint %s unhealthy" % paused.endpoint not in gw.logtext():
                assert time.time() < deadline, gw.logtext()[-2000:]
                time.sleep(0.1)
            mark = len(gw.logtext())
            ok = 0
            deadline = time.time() + 15
            while ok < 4 and time.time() < deadline:
                rc, out, err = ketchctl("--endpoints", gw.endpoint, "--dial-timeout", "2s", "get",
                                        "foo")
                ok += rc == 0 and out.split() == ["foo", "bar"]
            assert ok == 4, (rc, out, err, gw.logtext()[-2000:])
            used = set(re.findall(r"endpoint=(127\.0\.0\.1:\d+) connected", gw.logtext()[mark:]))
            assert used and paused.endpoint not in used, used
        finally:
            paused.proc.send_signal(signal.SIGCONT)
        deadline = time.time() + 10
        while "endpoint %s healthy again" % paused.endpoint not in gw.logtext():
            assert time.time() < deadline, gw.logtext()[-2000:]
            time.sleep(0.1)
    finally:
        gw.stop()


def stats(gw, ep):
    """The newest counters line of endpoint ep."""
    lines = [ln for ln in gw.logtext().splitlines() if "endpoint %s conns=" % ep in ln]
    assert lines, "no counters for %s" % ep
    return dict(re.findall(r"(\w+)=(\d+)", lines[-1]))


def test_gw_member_killed():
    gw, ms = ENV["gw"], ENV["members"]
    c = Conn(gw.port)
    port = c.sock.getsockname()[1]
    deadline = time.time() + 5
    ep = None
    while ep is None and time.time() < deadline:
        m = re.search(r"client=127\.0\.0\.1:%d endpoint=(127\.0\.0\.1:\d+) connected" % port,
                      gw.logtext())
        ep = m and m.group(1)
        time.sleep(0.05)
    assert ep, "no connect line for the client"
    victim = [m for m in ms if m.endpoint == ep][0]
    victim.kill9()
    c.sock.settimeout(5)
    assert c.recv() is None, "the connection to the killed member did not end"
    c.close()
    # New connections complete their HELLO at once (a survivor answers; no
    # leader is needed for it even if the victim led).
    t0 = time.time()
    for _ in range(6):
        Conn(gw.port, timeout=2).close()
    assert time.time() - t0 < 2, "new connections were not served at once"
    assert "endpoint %s failed" % ep in gw.logtext()
    time.sleep(0.4)
    assert stats(gw, ep)["failures"] == "1", stats(gw, ep)  # skipped, not retried, within 3 s
    deadline = time.time() + 10  # a read needs a leader: maybe a new one
    while True:
        rc, out, err = ketchctl("--endpoints", gw.endpoint, "get", "foo")
        if rc == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert rc == 0 and out.split() == ["foo", "bar"], (rc, out, err)
    victim.start()
    time.sleep(3.2)
    deadline = time.time() + 10
    while "endpoint %s is back" % ep not in gw.logtext():
        assert time.time() < deadline, gw.logtext()[-2000:]
        rc, out, err = ketchctl("--endpoints", gw.endpoint, "get", "foo")
        assert rc == 0, (rc, out, err)


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        body = r.read().decode()
    vals = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            vals[name] = float(v)
    return body, vals


def test_gw_metrics():
    live = ENV["members"][0].endpoint
    dead = "127.0.0.1:%d" % free_port()  # nothing listens there
    mport = free_port()
    gw = Gateway(dead + "," + live, ["--listen-metrics-urls", "http://127.0.0.1:%d" % mport,
                                     "--retry-delay", "1m", "--connect-timeout", "500ms"])
    try:
        wait_port(mport, gw.proc, "gateway metrics")
        body, v = scrape(mport)
        assert 'ketch_gateway_endpoint_up{endpoint="%s"}' % live in v, body
        for _ in range(2):  # the first tries the dead endpoint, then the live one
            rc, out, err = ketchctl("--endpoints", gw.endpoint, "get", "k")
            assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
        deadline = time.time() + 5
        while True:
            body, v = scrape(mport)
            if v["ketch_gateway_client_connections_active"] == 0 or time.time() > deadline:
                break
            time.sleep(0.1)
        # wait_port's connection and the two ketchctl's
        assert v["ketch_gateway_client_connections_total"] == 3, body
        assert v["ketch_gateway_client_connections_active"] == 0, body
        ep = lambda name, e: v['ketch_gateway_endpoint_%s{endpoint="%s"}' % (name, e)]  # noqa
        assert ep("failures_total", dead) == 1, body
        assert ep("up", dead) == 0 and ep("up", live) == 1, body
        assert ep("connections_total", dead) == 0 and ep("connections_total", live) >= 2, body
        assert ep("sent_bytes_total", live) > 0 and ep("received_bytes_total", live) > 0, body
        assert ep("connections_active", live) == 0, body
        assert "process_resident_memory_bytes" in v, body
        p = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=30)
        assert p.returncode == 0, (p.stdout, p.stderr)
    finally:
        gw.stop()
    p = subprocess.run([os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                        "127.0.0.1:%d" % free_port(), "--endpoints", live,
                        "--listen-metrics-urls", "https://127.0.0.1:%d" % free_port()],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode != 0 and "want http://host:port" in p.stderr, (p.returncode, p.stderr)


def main():
    try:
        setup()
    except Exception:
        for m in ENV.get("members", []):
            m.cleanup()
        if "gw" in ENV:
            ENV["gw"].proc.kill()
        raise
    try:
        run_tests([test_gw_ketchctl, test_gw_etcdctl, test_gw_slow_reader, test_gw_1000_conns,
                   test_gw_health_native, test_gw_member_killed, test_gw_metrics])
    finally:
        try:
            ENV["gw"].stop()
        finally:
            for m in ENV["members"]:
                m.cleanup()


if __name__ == "__main__":
    main()
