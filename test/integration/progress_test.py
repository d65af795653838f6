"""Progress of long operations (tools/common/progress.h): `ketchctl snapshot
save` and `ketchutl snapshot restore` draw a progress line (bytes, total,
rate, time) on stderr when it is a terminal (a pty here), and print nothing
of it when stderr is a pipe; stdout is the same either way. A snapshot sent
to a lagging member over a slow link (a throttling TCP proxy in front of its
peer port) is reported as progress lines in both members' logs."""
import os
import pty
import re
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from harness import BIN, PUT, Conn, Member, free_port, run_tests


def run(args, tty):
    """(rc, stdout, stderr) with stderr on a pty (tty=True) or a pipe."""
    env = dict(os.environ, TERM="xterm")
    if not tty:
        p = subprocess.run(args, capture_output=True, timeout=60, env=env)
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read().decode()
    p.wait(30)
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def test_snapshot_save_and_restore_progress_only_on_a_terminal():
    m = Member(name="p")
    d = tempfile.mkdtemp(prefix="ketch-progress-")
    try:
        c = Conn(m.port)
        for i in range(300):
            c.put(b"k%04d" % i, os.urandom(4000))  # incompressible: ~1.2 MB
        c.close()
        ctl = [os.path.join(BIN, "ketchctl"), "--endpoints", m.endpoint, "snapshot", "save"]
        rc, out, err = run(ctl + [os.path.join(d, "a.snap")], tty=True)
        assert rc == 0 and out.startswith("Snapshot saved at"), (rc, out, err)
        assert "snapshot save: " in err and "/s" in err and " in " in err and "MiB" in err, err
        rc, out2, err = run(ctl + [os.path.join(d, "b.snap")], tty=False)
        assert rc == 0 and out2.startswith("Snapshot saved at") and err == "", (rc, out2, err)
        utl = [os.path.join(BIN, "ketchutl"), "snapshot", "restore", os.path.join(d, "a.snap"),
               "--data-dir"]
        rc, out, err = run(utl + [os.path.join(d, "r1")], tty=True)
        assert rc == 0 and out.startswith("restored snapshot"), (rc, out, err)
        assert "restore: " in err and "(100%)" in err and " of " in err, err
        rc, out, err = run(utl + [os.path.join(d, "r2")], tty=False)
        assert rc == 0 and out.startswith("restored snapshot") and err == "", (rc, out, err)
    finally:
        m.cleanup()
        shutil.rmtree(d, ignore_errors=True)


class SlowProxy:
    """127.0.0.1:port -> 127.0.0.1:target, each connection's bytes towards
    the target at most rate bytes/s (the other way unthrottled)."""

    def __init__(self, target, rate):
        self.target, self.rate = target, rate
        self.ls = socket.socket()
        # a small receive window (inherited by accepted sockets), so that the
        # sender's socket fills and its progress follows the link's pace
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.socks = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return  # closed
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the target is not listening yet: the dialer retries
                a.close()
                continue
            self.socks += [a, b]
            threading.Thread(target=self.pipe, args=(a, b, self.rate), daemon=True).start()
            threading.Thread(target=self.pipe, args=(b, a, 0), daemon=True).start()

    @staticmethod
    def pipe(src, dst, rate):
        try:
            while True:
                d = src.recv(16384)
                if not d:
                    break
                dst.sendall(d)
                if rate:
                    time.sleep(len(d) / rate)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.ls.close()
        for x in self.socks:
            x.close()


def test_snapshot_transfer_to_a_lagging_member_logs_progress():
    """A learner added to a member whose log was compacted gets a ~6 MiB
    snapshot through a 2 MiB/s link: both sides log progress lines (done,
    of total, share, rate, time left) about once a second, rising, and end
    lines with the time taken."""
    d = tempfile.mkdtemp(prefix="ketch-progress-snap-")
    small = ["--snapshot-count", "200", "--experimental-snapshot-catchup-entries", "20",
             "--heartbeat-interval", "50", "--election-timeout", "500"]
    procs, proxy = [], None

    def spawn(name, port, peer, adv_peer, extra, env=None):
        log = os.path.join(d, name + ".log")
        procs.append(subprocess.Popen(
            [os.path.join(BIN, "ketch"), "--name", name, "--data-dir", os.path.join(d, name),
             "--listen-client-urls", "http://127.0.0.1:%d" % port,
             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % adv_peer] + small + extra,
            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env))
        return log

    def wait_log(log, pattern, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = open(log, errors="replace").read()
            if re.search(pattern, text):
                return text
            time.sleep(0.1)
        raise AssertionError("no %r in %s: %s" % (pattern, log, text[-3000:]))

    try:
        p0, pp0 = free_port(), free_port()
        log0 = spawn("s0", p0, pp0, pp0, ["--initial-cluster", "s0=http://127.0.0.1:%d" % pp0])
        deadline = time.time() + 10
        while True:
            try:
                c = Conn(p0)
                c.put("warm", "1")
                break
            except (OSError, ConnectionError, Exception):
                assert time.time() < deadline, open(log0).read()[-2000:]
                time.sleep(0.1)
        # the member compacts its log behind a snapshot in steps of >= 1024
        # entries: put (2 KiB incompressible values) until it saved one past
        # index 3000, so that the learner needs a snapshot, of ~6 MiB: several
        # seconds at 2 MiB/s, more than the sender's socket buffers take at once
        big = r"snapshot saved .*index=([3-9]\d{3}|\d{5})"
        for b in range(0, 8000, 250):
            if re.search(big, open(log0).read()):
                break
            for i in range(b, b + 250):
                c.send(PUT, {"key": b"big/%04d" % i, "value": os.urandom(2048)})
            for _ in range(250):
                assert c.recv()[0] == PUT
        wait_log(log0, big)
        time.sleep(0.3)  # the compaction follows at the next turns
        p1, pp1 = free_port(), free_port()
        proxy = SlowProxy(pp1, 2 * 1024 * 1024)
        add = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", "127.0.0.1:%d" % p0,
                              "member", "add", "s1", "--learner",
                              "--peer-urls=http://127.0.0.1:%d" % proxy.port],
                             capture_output=True, text=True, timeout=30)
        assert add.returncode == 0, add.stderr
        env = dict(re.findall(r'^(KETCH_[A-Z_]+)="(.*)"$', add.stdout, re.M))
        env = dict(os.environ, **{k: v for k, v in env.items() if k != "KETCH_NAME"})
        log1 = spawn("s1", p1, pp1, proxy.port, [], env=env)
        wait_log(log1, r"installed snapshot", timeout=30)
        text0 = wait_log(log0, r"snapshot index=\d+ sent to \w+ \(\d+ bytes\) in [\d.]+ s")
        text1 = open(log1).read()
        line = r"(\d+\.\d) MiB of (\d+\.\d) MiB \((\d+)%\), [\d.]+ [KM]iB/s, \d+ s left"
        text0 = text0[:re.search(r"snapshot index=\d+ sent to", text0).end()]  # the first send
        for who, text, what in (("sender", text0, "send to"), ("receiver", text1, "receive from")):
            got = re.findall(r"info snap s\d snapshot %s \w+: %s" % (what, line), text)
            assert got, "%s: no progress line in %s" % (who, text[-3000:])
            shares = [int(g[2]) for g in got]
            assert shares == sorted(shares) and 0 < shares[0] and shares[-1] <= 100, (who, got)
            assert all(float(g[1]) >= 5.5 for g in got), (who, got)  # the whole snapshot
            print("  %s: %d progress lines, e.g. %s" % (who, len(got), re.search(
                r"snapshot %s \w+: [^\n]*" % what, text).group(0)))
        assert re.search(r"received snapshot index=\d+ \(\d+ bytes\) from \w+ in ([1-9]|\d\d)"
                         r"\.\d s", text1), text1[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if proxy:
            proxy.close()
        if not os.environ.get("KT_KEEP_TMP"):
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests([test_snapshot_save_and_restore_progress_only_on_a_terminal,
               test_snapshot_transfer_to_a_lagging_member_logs_progress])
