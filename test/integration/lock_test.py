"""test/integration/lock_test.py — libketch's mutex (client/recipes.c) and
`ketchctl lock` against a real bin/ketch.

  counter: 4 contender processes x 25 critical sections increment a counter
      with a plain get + put under the lock; the checker asserts that no two
      sections overlap (in time and in fencing-revision order) and that the
      counter equals the number of completed sections.
  holder killed: the holder is kill -9'd inside its section; the waiter gets
      the lock only when the lease expires (>= TTL - slack after the kill).
  try_lock / timeout: EBUSY at once; ETIMEOUT after the timeout, leaving no
      waiter key behind.
  cluster: contenders on the 3 members of a cluster.
  ketchctl lock: the same session through etcdctl 3.4 + etcd and ketchctl +
      ketch, outputs compared (lock key hex and revisions normalized).

The contenders are test/integration/recipes_client.c, built by `make test`
into $O/test/integration/. Prints "ok NAME" / "FAIL NAME: why".
"""
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Member, free_port, run_tests  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.abspath(os.environ.get("KETCH_BIN") or os.path.join(ROOT, "bin"))
CLIENT = os.path.join(ROOT, os.environ.get("O", "build"), "test", "integration", "recipes_client")
KETCHCTL = os.path.join(BIN, "ketchctl")
TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]


SANITIZER = ("Sanitizer", "runtime error:")


class Proc:
    """A child process whose stdout lines arrive on a queue."""
    started = []  # every Proc, for the sanitizer check at the end of a test

    def __init__(self, args, stdin=False, env=None):
        Proc.started.append(self)
        self.args = args
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.q = queue.Queue()
        self.renewals = queue.Queue()  # recipes_client's "renewed ..." lines
        self.out, self.err = [], []
        self.err_done = [threading.Thread(target=self._pump, args=(f, q, keep), daemon=True)
                         for f, q, keep in ((self.p.stdout, self.q, self.out),
                                            (self.p.stderr, None, self.err))]
        for t in self.err_done:
            t.start()

    def _pump(self, f, q, keep):
        for raw in iter(f.readline, b""):
            line = raw.decode("utf-8", "replace")
            if q is not None and line.startswith("renewed "):
                self.renewals.put(line.rstrip("\n"))
                continue
            keep.append(line)
            if q is not None:
                q.put(line.rstrip("\n"))
        if q is not None:
            q.put(None)

    def line(self, timeout=20.0):
        try:
            l = self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("%s: no output within %.1fs (stderr %r)" %
                                 (" ".join(self.args[-4:]), timeout, "".join(self.err)[-500:]))
        if l is None:
            self.q.put(None)
            raise AssertionError("%s: exited %s without the expected line (stderr %r)" %
                                 (" ".join(self.args[-4:]), self.p.poll(), "".join(self.err)[-500:]))
        return l

    def no_line(self, seconds):
        try:
            l = self.q.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError("unexpected output %r" % l)

    def send(self, text):
        self.p.stdin.write(text.encode())
        self.p.stdin.flush()

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def wait(self, timeout=20.0):
        """The exit code, once stdout and stderr are read to their end."""
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError("%s did not exit within %.0fs" % (" ".join(self.args[-4:]), timeout))
        for t in self.err_done:
            t.join(5)
        return rc

    def stdout(self):
        return "".join(self.out)

    def stderr(self):
        return "".join(self.err)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def client(ep, *args, stdin=False):
    if not os.path.exists(CLIENT):
        raise AssertionError("%s is missing: run make test (it builds test/integration/*.c)" % CLIENT)
    return Proc([CLIENT, ep] + [str(a) for a in args], stdin=stdin)


def check_sanitizers():
    """No client process (libketch, ketchctl) reported an ASan/UBSan error."""
    started, Proc.started = Proc.started, []
    for p in started:
        p.kill()
    for p in started:
        for t in p.err_done:
            t.join(5)
        err = p.stderr()
        if any(s in err for s in SANITIZER):
            sys.stderr.write("%s:\n%s\n" % (" ".join(p.args), err[-6000:]))
            raise AssertionError("sanitizer report from %s (see the test log)" % " ".join(p.args[-3:]))


def with_member(fn):
    m = Member()
    procs = []
    try:
        fn(m, procs)
    finally:
        for p in procs:
            p.kill()
        m.cleanup()
    check_sanitizers()


def check_sections(logs, final_counter):
    """logs: the stdout lines of every contender. Returns the number of
    completed sections; raises on overlap or a lost update."""
    sections = {}
    for who, lines in enumerate(logs):
        for l in lines:
            f = l.split()
            if f[0] == "enter":
                rev = int(f[1])
                assert rev not in sections, "fencing revision %d given twice" % rev
                sections[rev] = {"who": who, "enter": int(f[2]), "value": int(f[3]), "exit": None}
            elif f[0] == "exit":
                sections[int(f[1])]["exit"] = int(f[2])
    order = sorted(sections)
    done = 0
    for i, rev in enumerate(order):
        s = sections[rev]
        assert s["value"] == done, (
            "section rev %d (contender %d) read counter %d, but %d sections completed before it"
            % (rev, s["who"], s["value"], done))
        if s["exit"] is not None:
            done += 1
        if i + 1 < len(order):
            nxt = sections[order[i + 1]]
            assert s["exit"] is not None, "section rev %d never exited but a later one ran" % rev
            assert nxt["enter"] >= s["exit"], (
                "overlap: rev %d (contender %d) entered %.3f ms before rev %d (contender %d) exited"
                % (order[i + 1], nxt["who"], (s["exit"] - nxt["enter"]) / 1e6, rev, s["who"]))
    assert final_counter == done, "counter %d != %d completed sections" % (final_counter, done)
    return done


def run_counter(eps, name, n_procs=4, sections=25, hold_us=1000, timeout=120):
    ps = [client(eps[i % len(eps)], "counter", name, name + "-counter", sections, 10, hold_us)
          for i in range(n_procs)]
    try:
        deadline = time.time() + timeout
        for p in ps:
            rc = p.wait(max(1, deadline - time.time()))
            assert rc == 0, "contender exited %d: %s" % (rc, p.stderr()[-500:])
            assert p.out and p.out[-1] == "done\n", "contender did not finish: %r" % p.out[-3:]
        logs = [[l for l in p.stdout().splitlines() if l != "done"] for p in ps]
        return logs
    finally:
        for p in ps:
            p.kill()


def counter_value(ep, key):
    from harness import Conn
    port = int(ep.rsplit(":", 1)[1])
    v = Conn(port).get_value(key)
    return int(v) if v else 0


def test_counter_under_lock():
    def body(m, procs):
        start = time.time()
        logs = run_counter([m.endpoint], "ctr")
        done = check_sections(logs, counter_value(m.endpoint, "ctr-counter"))
        assert done == 100, "%d sections completed, want 100" % done
        sys.stderr.write("lock_test: 4 x 25 sections in %.2fs\n" % (time.time() - start))
    with_member(body)


def kill_after_renewal(h, within=5.0):
    """kill -9 the holder right after its keep-alive renewed the lease, so
    the lease has (almost) its whole TTL left; returns the kill time."""
    while not h.renewals.empty():
        h.renewals.get()
    while True:
        try:
            l = h.renewals.get(timeout=within)
        except queue.Empty:
            raise AssertionError("no keep-alive renewal within %.1fs" % within)
        assert l.split()[3] == "OK", "renewal failed: " + l
        if h.renewals.empty():
            os.kill(h.p.pid, signal.SIGKILL)
            t_kill = time.monotonic_ns()
            h.p.wait()
            since = (t_kill - int(l.split()[1])) / 1e9
            assert since < 0.25, "the kill came %.2fs after the renewal" % since
            return t_kill


def test_holder_killed_waiter_gets_lock_after_ttl():
    ttl = 3

    def body(m, procs):
        h = client(m.endpoint, "hold", "k9", ttl)
        procs.append(h)
        f = h.line().split()
        assert f[0] == "enter", f
        hold_rev = int(f[1])
        w = client(m.endpoint, "lock", "k9", ttl, 30000)
        procs.append(w)
        w.no_line(0.7)  # it waits behind the holder
        t_kill = kill_after_renewal(h)
        f = w.line(timeout=ttl + 10).split()
        assert f[0] == "acquired", f
        waited = (int(f[2]) - t_kill) / 1e9
        assert int(f[1]) > hold_rev, "fencing revision %s not above the dead holder's %d" % (f[1], hold_rev)
        assert waited >= ttl - 0.3, "the waiter got the lock %.2fs after the kill (TTL %ds)" % (waited, ttl)
        assert waited <= ttl + 4, "the waiter got the lock only %.2fs after the kill (TTL %ds)" % (waited, ttl)
        assert w.wait() == 0
        sys.stderr.write("lock_test: lock passed %.2fs after kill -9 of the holder (TTL %ds)\n"
                         % (waited, ttl))
    with_member(body)


def test_try_lock_busy_and_timeout_leave_no_key():
    def body(m, procs):
        from harness import Conn
        h = client(m.endpoint, "hold", "tl", 10)
        procs.append(h)
        f = h.line().split()
        assert f[0] == "enter", f
        holder_key = f[3]
        t = client(m.endpoint, "trylock", "tl", 10)
        assert t.line() == "error EBUSY"
        assert t.wait() == 0
        t0 = time.monotonic_ns()
        w = client(m.endpoint, "lock", "tl", 10, 600)
        f = w.line().split()
        assert f[0:2] == ["error", "ETIMEOUT"], f
        waited = (int(f[2]) - t0) / 1e9
        assert 0.6 <= waited <= 5, "timeout after %.2fs, want 0.6s" % waited
        assert w.wait() == 0
        kvs = Conn(m.port).get("tl/", range_end=b"tl0").get("kvs") or []
        keys = [kv[0].decode() if isinstance(kv[0], bytes) else kv[0] for kv in kvs]
        assert keys == [holder_key], "keys under tl/: %r, want only the holder's %r" % (keys, holder_key)
        h.kill()
    with_member(body)


def test_waiters_served_in_arrival_order():
    """Five waiters queue behind a holder; when it lets go they get the lock
    one after the other in the order they asked (revision order), each only
    after the previous one released it."""
    def body(m, procs):
        from harness import Conn
        h = client(m.endpoint, "hold", "fifo", 10)
        procs.append(h)
        f = h.line().split()
        assert f[0] == "enter", f
        ws = []
        for _ in range(5):
            w = client(m.endpoint, "lock", "fifo", 10, 30000)
            procs.append(w)
            w.no_line(0.3)  # queued before the next one starts
            ws.append(w)
        Conn(m.port).call(3, {"key": f[3].encode()})  # DELETE: the holder lets go
        got = []
        for w in ws:
            f = w.line().split()
            assert f[0] == "acquired", f
            got.append((int(f[1]), int(f[2])))
            assert w.wait() == 0
        revs, times = [g[0] for g in got], [g[1] for g in got]
        assert revs == sorted(set(revs)), "fencing revisions not in arrival order: %r" % revs
        assert times == sorted(times), "served out of arrival order: %r" % got
    with_member(body)


def test_waiter_whose_session_expired_is_told_not_granted():
    """A waiter frozen past its TTL loses its key; when its predecessor goes it
    must not report the lock as held (etcd 3.4 would): ELEASENOTFOUND."""
    def body(m, procs):
        from harness import Conn
        h = client(m.endpoint, "hold", "ex", 10)
        procs.append(h)
        f = h.line().split()
        assert f[0] == "enter", f
        holder_key = f[3]
        w = client(m.endpoint, "lock", "ex", 2, 30000)
        procs.append(w)
        w.no_line(0.5)
        os.kill(w.p.pid, signal.SIGSTOP)
        try:
            deadline = time.time() + 10
            while len(Conn(m.port).get("ex/", range_end=b"ex0").get("kvs") or []) != 1:
                assert time.time() < deadline, "the frozen waiter's key outlived its 2s lease"
                time.sleep(0.2)
        finally:
            os.kill(w.p.pid, signal.SIGCONT)
        Conn(m.port).call(3, {"key": holder_key.encode()})  # DELETE: the holder's key goes
        f = w.line().split()
        assert f[:2] == ["error", "ELEASENOTFOUND"], f
        assert w.wait() == 0
        kvs = Conn(m.port).get("ex/", range_end=b"ex0").get("kvs") or []
        assert kvs == [], "keys left under ex/: %r" % kvs
    with_member(body)


def start_three():
    ports = [(free_port(), free_port()) for _ in range(3)]
    names = ["n%d" % i for i in range(3)]
    ic = ",".join("%s=http://127.0.0.1:%d" % (names[i], ports[i][1]) for i in range(3))
    ms = [Member(name=names[i], port=ports[i][0], peer_port=ports[i][1], wait=False,
                 extra=["--initial-cluster", ic, "--initial-cluster-token", "lock-it"] + TIMING)
          for i in range(3)]
    try:
        for m in ms:
            m.wait_ready()
    except Exception:
        for m in ms:
            m.cleanup()
        raise
    return ms


def test_lock_survives_the_kill_of_its_member():
    """Holder and waiter both talk to the Raft leader, which is kill -9'd:
    their sessions and the waiter's watch fail over to the other members, the
    holder keeps the lock past several TTLs (no lease expires because of the
    member's death or the election), and the waiter gets it after the
    holder's own death + TTL."""
    from harness import STATUS, Conn
    ttl = 3
    ms = start_three()
    procs = []
    try:
        deadline = time.time() + 10
        while True:
            st = [Conn(m.port).call(STATUS, {}) for m in ms]
            lead = [m for m, x in zip(ms, st) if x.get("leader") and x["header"][1] == x["leader"]]
            if lead:
                break
            assert time.time() < deadline, "no leader: %r" % st
            time.sleep(0.1)
        ms.remove(lead[0])
        ms.insert(0, lead[0])  # first in the endpoint list: both clients use it
        eps = ",".join(m.endpoint for m in ms)
        h = client(eps, "hold", "fo", ttl)
        procs.append(h)
        f = h.line().split()
        assert f[0] == "enter", f
        w = client(eps, "lock", "fo", ttl, 60000)
        procs.append(w)
        w.no_line(0.5)
        ms[0].kill9()
        w.no_line(2.5 * ttl)  # the holder's lease lives on
        t_kill = kill_after_renewal(h)
        f = w.line(timeout=ttl + 10).split()
        assert f[0] == "acquired", f
        waited = (int(f[2]) - t_kill) / 1e9
        assert ttl - 0.3 <= waited <= ttl + 4, "lock passed %.2fs after the holder's kill" % waited
        assert w.wait() == 0
    finally:
        for p in procs:
            p.kill()
        for m in ms:
            m.cleanup()
    check_sanitizers()


def test_counter_on_three_members():
    ms = start_three()
    try:
        eps = [m.endpoint for m in ms]
        logs = run_counter(eps, "c3", n_procs=3, sections=10)
        done = check_sections(logs, counter_value(eps[0], "c3-counter"))
        assert done == 30, "%d sections completed, want 30" % done
    finally:
        for m in ms:
            m.cleanup()
    check_sanitizers()


# ---- ketchctl lock vs etcdctl lock ----

class Server:
    """etcd or ketch on free ports, with the matching CLI."""

    def __init__(self, kind):
        import tempfile
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="lock-test-%s-" % kind)
        port, peer = free_port(), free_port()
        self.ep = "127.0.0.1:%d" % port
        url, purl = "http://" + self.ep, "http://127.0.0.1:%d" % peer
        server = shutil.which("etcd") if kind == "etcd" else os.path.join(BIN, "ketch")
        self.ctl = shutil.which("etcdctl") if kind == "etcd" else KETCHCTL
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [server, "--name", "s1", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "s1=" + purl], stdout=self.log, stderr=subprocess.STDOUT,
            cwd=self.dir)
        self.procs = []
        deadline = time.time() + 15
        while True:
            rc, _, _ = self.run(["put", "ready-probe", "x"], timeout=5)
            if rc == 0:
                break
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("%s did not start" % kind)
            time.sleep(0.1)

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ETCDCTL_") and not k.startswith("KETCHCTL_")}
        env["ETCDCTL_API"] = "3"
        return env

    def cmd(self, args):
        return [self.ctl, "--endpoints", self.ep] + args

    def run(self, args, timeout=20):
        p = subprocess.run(self.cmd(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=self.env(), timeout=timeout)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def start(self, args):
        p = Proc(self.cmd(args), env=self.env())
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            p.kill()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            log = f.read().decode("utf-8", "replace")
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.kind == "ketch" and any(s in log for s in SANITIZER):
            sys.stderr.write("ketch log:\n%s\n" % log[-6000:])
            raise AssertionError("sanitizer report in the ketch member's log")


def norm(text):
    """Lease ids (hex in keys, and in the environment) and revisions differ."""
    text = text.replace("etcdctl", "ketchctl").replace(" in etcd\n", " in ketch\n")
    text = re.sub(r"/[0-9a-f]{1,16}\b", "/<lease>", text)
    text = re.sub(r"^(rev=)\d+$", r"\1<rev>", text, flags=re.M)
    # clientv3's retry/warn log lines: noise ketchctl has no reason to print
    return "".join(l for l in text.splitlines(True) if not l.startswith("{\"level\""))


def help_part(text):
    return text.split("GLOBAL OPTIONS:")[0]


def side_by_side(scenario):
    """Runs scenario(server) on etcd and on ketch; returns both transcripts."""
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        raise AssertionError("etcd / etcdctl not installed (Debian etcd-server, etcd-client)")
    out = []
    for kind in ("etcd", "ketch"):
        s = Server(kind)
        try:
            out.append(scenario(s))
        finally:
            s.stop()
    check_sanitizers()
    return out


def compare_transcripts(e, k):
    assert len(e) == len(k), "transcripts differ in length: %r vs %r" % (e, k)
    for (what, ev), (_, kv) in zip(e, k):
        if isinstance(ev, str):
            ev, kv = norm(ev), norm(kv)
        assert ev == kv, "%s: etcdctl %r, ketchctl %r" % (what, ev, kv)


def lock_scenario(s):
    t = []

    def step(name, args):
        rc, out, err = s.run(args)
        t.extend([(name + " rc", rc), (name + " stdout", out), (name + " stderr", err)])

    step("no name", ["lock"])
    step("help", ["lock", "--help"])
    t[-2] = (t[-2][0], help_part(t[-2][1]))
    step("command", ["lock", "L", "--", "sh", "-c",
                     'echo key=$ETCD_LOCK_KEY; echo rev=$ETCD_LOCK_REV; read x; echo stdin=$x; exit 3'])
    step("command ok", ["lock", "--ttl", "5", "L", "true"])
    step("missing command", ["lock", "L", "/nonexistent/cmd"])
    step("bad ttl", ["lock", "--ttl", "x", "L"])
    t[-2] = (t[-2][0], help_part(t[-2][1]))
    # a holder, a waiter interrupted while waiting, the holder released
    h = s.start(["lock", "L"])
    t.append(("holder key", h.line()))
    t.append(("holder value", h.line()))
    w = s.start(["lock", "L"])
    w.no_line(0.7)
    w.signal(signal.SIGINT)
    t.extend([("waiter rc", w.wait()), ("waiter stderr", w.stderr())])
    # a second waiter takes the lock when the holder is interrupted
    w2 = s.start(["lock", "L"])
    w2.no_line(0.5)
    h.signal(signal.SIGTERM)
    t.extend([("holder rc", h.wait()), ("holder stderr", h.stderr())])
    t.append(("waiter2 key", w2.line()))
    w2.signal(signal.SIGINT)
    t.extend([("waiter2 rc", w2.wait()), ("waiter2 stdout", w2.stdout())])
    step("left keys", ["get", "L/", "--prefix", "--keys-only"])
    return t


def test_ketchctl_lock_like_etcdctl():
    e, k = side_by_side(lock_scenario)
    compare_transcripts(e, k)


def test_ketchctl_lock_command_keeps_session_alive():
    """A command that outlives the TTL keeps the lock: keep-alives go on."""
    def body(m, procs):
        env = dict(os.environ)
        p = Proc([KETCHCTL, "--endpoints", m.endpoint, "lock", "--ttl", "2", "long", "--",
                  "sh", "-c", "echo $ETCD_LOCK_KEY; sleep 4; echo done"], env=env)
        procs.append(p)
        key = p.line()
        assert key.startswith("long/"), key
        time.sleep(3)
        rc, out, _ = Server.run_plain(m.endpoint, ["get", key, "--keys-only"])
        assert out.strip() == key, "the lock key is gone while its command runs: %r" % out
        assert p.line() == "done"
        assert p.wait() == 0, p.stderr()
        rc, out, _ = Server.run_plain(m.endpoint, ["get", "long/", "--prefix", "--keys-only"])
        assert out == "", "lock key left after the command: %r" % out
    with_member(body)


def _run_plain(ep, args):
    p = subprocess.run([KETCHCTL, "--endpoints", ep] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


Server.run_plain = staticmethod(_run_plain)


if __name__ == "__main__":
    run_tests([test_counter_under_lock, test_holder_killed_waiter_gets_lock_after_ttl,
               test_try_lock_busy_and_timeout_leave_no_key,
               test_waiters_served_in_arrival_order,
               test_waiter_whose_session_expired_is_told_not_granted, test_ketchctl_lock_like_etcdctl,
               test_ketchctl_lock_command_keeps_session_alive, test_counter_on_three_members,
               test_lock_survives_the_kill_of_its_member])
