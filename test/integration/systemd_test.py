"""systemd: the Type=notify contract of ketch (net/sdnotify.h) seen from a
datagram socket this test listens on as $NOTIFY_SOCKET (READY=1 only once
the member serves and a put succeeds, WATCHDOG=1 pings at WATCHDOG_USEC/2,
STOPPING=1 on SIGTERM, the abstract "@name" form), and `systemd-analyze
verify` on contrib/systemd's units (when systemd-analyze is installed)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from cluster_test import put_retry
from harness import BIN, Conn, Member, free_port, run_tests

TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Notify:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, abstract=False):
        self.dir = tempfile.mkdtemp(prefix="ketch-notify-")
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "ketch-notify-%d-%d" % (os.getpid(), free_port())
            self.s.bind("\0" + name)
            self.env = "@" + name
        else:
            path = os.path.join(self.dir, "notify")
            self.s.bind(path)
            self.env = path
        self.msgs = []  # (time, text)

    def recv(self, timeout):
        self.s.settimeout(timeout)
        try:
            m = self.s.recv(4096).decode()
        except socket.timeout:
            return None
        self.msgs.append((time.time(), m))
        return m

    def wait_for(self, key, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.recv(max(0.01, deadline - time.time()))
            if m is not None and key in m.split("\n"):
                return m
        raise AssertionError("no %s within %ss; got %r" % (key, timeout, self.msgs))

    def close(self):
        self.s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_ready_only_once_serving_watchdog_and_stopping():
    n = Notify()
    ports = [(free_port(), free_port()) for _ in range(3)]
    names = ["s0", "s1", "s2"]
    ic = ",".join("%s=http://127.0.0.1:%d" % (names[i], ports[i][1]) for i in range(3))
    ms = []
    old = {k: os.environ.get(k) for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    try:
        os.environ["NOTIFY_SOCKET"] = n.env
        os.environ["WATCHDOG_USEC"] = "400000"
        # one member of three alone: no quorum, so it must not say READY=1
        ms.append(Member(name=names[0], port=ports[0][0], peer_port=ports[0][1], wait=False,
                         extra=["--initial-cluster", ic] + TIMING))
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        ms[0].wait_ready()
        deadline = time.time() + 2.0
        while time.time() < deadline:
            m = n.recv(deadline - time.time())
            assert m is None or "READY=1" not in m.split("\n"), \
                "READY=1 without a quorum: %r" % n.msgs
        pings = [t for t, m in n.msgs if m == "WATCHDOG=1"]
        # every 0.2 s since the start (~2.2 s): about 11
        assert 6 <= len(pings) <= 16, "WATCHDOG=1 every 0.2 s expected: %r" % n.msgs
        gaps = sorted(b - a for a, b in zip(pings, pings[1:]))
        assert 0.1 < gaps[len(gaps) // 2] < 0.35, gaps
        # a second member: a quorum, a leader; READY=1 comes and a put works now
        ms.append(Member(name=names[1], port=ports[1][0], peer_port=ports[1][1], wait=False,
                         extra=["--initial-cluster", ic] + TIMING))
        msg = n.wait_for("READY=1", 10)
        assert "STATUS=serving" in msg, msg
        c = Conn(ms[0].port, timeout=5)
        c.put(b"after-ready", b"v")  # at once: no retry needed
        c.close()
        n.msgs.clear()
        ms[0].proc.send_signal(signal.SIGTERM)
        n.wait_for("STOPPING=1", 5)
        assert ms[0].proc.wait(10) == 0
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for m in ms:
            m.cleanup()
        n.close()


def test_abstract_socket_and_no_socket():
    n = Notify(abstract=True)
    m = None
    try:
        os.environ["NOTIFY_SOCKET"] = n.env
        m = Member(name="solo", wait=False)
        os.environ.pop("NOTIFY_SOCKET")
        n.wait_for("READY=1", 10)
        put_retry(m, b"k", b"v")
        assert not any("WATCHDOG=1" in t for _, t in n.msgs)  # WATCHDOG_USEC not set
    finally:
        os.environ.pop("NOTIFY_SOCKET", None)
        if m:
            m.cleanup()
        n.close()
    # without NOTIFY_SOCKET nothing is sent and the member serves as usual
    m = Member(name="plain")
    try:
        put_retry(m, b"k", b"v")
    finally:
        m.cleanup()


def test_systemd_analyze_verify_units():
    sa = shutil.which("systemd-analyze")
    if not sa:
        print("# systemd-analyze not installed: units not verified")
        return
    d = tempfile.mkdtemp(prefix="ketch-units-")
    try:
        paths = []
        for unit, binary in (("ketch.service", "ketch"), ("ketch-grpc.service", "ketch-grpc")):
            text = open(os.path.join(ROOT, "contrib", "systemd", unit)).read()
            assert "/usr/bin/%s" % binary in text
            # verify checks that ExecStart exists: point it at the built binary
            p = os.path.join(d, unit)
            with open(p, "w") as f:
                f.write(text.replace("/usr/bin/%s" % binary, os.path.join(BIN, binary)))
            paths.append(p)
        text = open(os.path.join(ROOT, "contrib", "systemd", "ketch.service")).read()
        for want in ("Type=notify", "WatchdogSec=", "ProtectSystem=strict", "NoNewPrivileges=yes",
                     "ReadWritePaths=/var/lib/ketch", "User=ketch",
                     "EnvironmentFile=-/etc/default/ketch"):
            assert want in text, want
        p = subprocess.run([sa, "verify"] + paths, capture_output=True, timeout=60)
        out = (p.stdout + p.stderr).decode().strip()
        assert p.returncode == 0 and out == "", (p.returncode, out)
        # the check can fail: a unit with a bad line is reported
        bad = os.path.join(d, "bad.service")
        with open(bad, "w") as f:
            f.write(open(paths[0]).read().replace("Type=notify", "Type=notifyy"))
        p = subprocess.run([sa, "verify", bad], capture_output=True, timeout=60)
        assert b"notifyy" in p.stdout + p.stderr, p
        # the EnvironmentFile example only names variables ketch knows
        help_text = subprocess.run([os.path.join(BIN, "ketch"), "--help"], capture_output=True,
                                   timeout=10).stdout.decode()
        for line in open(os.path.join(ROOT, "contrib", "systemd", "ketch.env")):
            line = line.strip()
            if line and not line.startswith("#"):
                var = line.split("=", 1)[0]
                assert "env %s" % var in help_text, var
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests([
        test_ready_only_once_serving_watchdog_and_stopping,
        test_abstract_socket_and_no_socket,
        test_systemd_analyze_verify_units,
    ])
