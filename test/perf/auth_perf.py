"""What auth costs, ketch and etcd 3.4 side by side (issue 16; run by hand:
/usr/bin/python3 test/perf/auth_perf.py [SECONDS] [ROUNDS] [LOGINS]).

One ketch member and one etcd member (Debian etcd-server), each on its own
data dir on loopback. Both get the same users: root, and `bench` holding a
role with 100 prefix permissions (99 prefixes /p/NN/ the workload never
touches, and "0", which holds every key ketch-bench makes), so each check
walks a real permission set. Then, per round and per target, for each of
put and range (linearizable) at 64 and 256 clients: one run with auth off
and one with auth on as `bench` right after it, or on first (the order
alternates by round and workload): `auth enable`, ketch-bench --user
(libketch logs in on each connection; the etcd target calls
Auth/Authenticate and sends the token with every call), `auth disable`.
A 2-core machine's throughput swings by 10-30% from one run to the next,
more than auth costs: runs paired back to back see the same swings, and the
median of the pairs' ratios is the figure (each pair is shown too). The
store is compacted to its current revision before every run, so no run
inherits more history than another; every run begins with one second of
the same load on its logged-in connections, not measured: ketch-bench
--warmup. Reports ops/s and the ratio auth-on / auth-off per pair and
target, and ketch's state-thread CPU per operation.

Then a login storm: LOGINS (default 1000) logins at once while 64 clients
put as `bench` for SECONDS*3: for ketch the storm is ketch-bench --storm
with --user (each storm client sends HELLO and AUTHENTICATE); for etcd,
LOGINS Auth/Authenticate calls at once from python's grpc (16 channels). The
putters' p99 and the logins per second for each.

Bounded: each run --duration SECONDS (default 3); the storm's logins are
cut at 60 s; LOGINS 0: no storm.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, free_port  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
LOGINS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
TMP = tempfile.mkdtemp(prefix="ketch-auth-perf-")
BENCH = os.path.join(BIN, "ketch-bench")
PW = "benchpw"


class Server:
    def __init__(self, kind):
        self.kind = kind
        self.port, peer = free_port(), free_port()
        url, purl = "http://127.0.0.1:%d" % self.port, "http://127.0.0.1:%d" % peer
        exe = os.path.join(BIN, "ketch") if kind == "ketch" else shutil.which("etcd")
        self.log = open(os.path.join(TMP, kind + ".log"), "wb")
        self.proc = subprocess.Popen(
            [exe, "--name", "p0", "--data-dir", os.path.join(TMP, kind),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "p0=" + purl], stdout=self.log, stderr=subprocess.STDOUT)
        self.ctl_exe = os.path.join(BIN, "ketchctl") if kind == "ketch" else shutil.which("etcdctl")
        deadline = time.time() + 20
        while self.ctl(["endpoint", "health"], check=False).returncode:
            if time.time() > deadline:
                raise RuntimeError("%s did not start" % kind)
            time.sleep(0.2)

    def ctl(self, args, user=None, check=True):
        cmd = [self.ctl_exe, "--endpoints", "127.0.0.1:%d" % self.port]
        if user:
            cmd += ["--user", user]
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.run(cmd + args, capture_output=True, timeout=30, env=env)
        if check and p.returncode:
            raise RuntimeError("%s %s: %s" % (self.kind, " ".join(args), p.stderr.decode()))
        return p

    def bench(self, args, user=None, extra=(), errors_ok=False):
        """ketch-bench's JSON result and stderr. It exits 1 when any request
        failed (the result still on stdout): an error unless errors_ok."""
        ep = ("etcd://" if self.kind == "etcd" else "") + "127.0.0.1:%d" % self.port
        cmd = [BENCH, "--endpoints", ep, "--json"] + (["--user", user] if user else []) + \
            list(extra) + args
        p = subprocess.run(cmd, capture_output=True, timeout=SECONDS * 10 + 120)
        if p.returncode == 1 and errors_ok and p.stdout.strip():
            return json.loads(p.stdout), p.stderr.decode()
        if p.returncode:
            raise RuntimeError("ketch-bench %s: %s" % (" ".join(cmd), p.stderr.decode()[-500:]))
        return json.loads(p.stdout), p.stderr.decode()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def setup(s):
    s.ctl(["user", "add", "root", "--new-user-password", "rootpw"])
    s.ctl(["user", "grant-role", "root", "root"])
    s.ctl(["role", "add", "bench"])
    for i in range(99):
        s.ctl(["role", "grant-permission", "bench", "readwrite", "/p/%02d/" % i, "--prefix"])
    s.ctl(["role", "grant-permission", "bench", "readwrite", "0", "--prefix"])
    s.ctl(["user", "add", "bench", "--new-user-password", PW])
    s.ctl(["user", "grant-role", "bench", "bench"])
    # keys for the range runs
    s.bench(["put", "--total", "1000", "--key-space-size", "1000", "--sequential-keys"],
            extra=["--clients", "16", "--conns", "4"])


def ops(r, errors_ok=False):
    if r["errors"] and not errors_ok:
        raise RuntimeError("errors in a run: %r" % r["errors_by_code"])
    return r["rps"]


WORK = [("put 64", ["--clients", "64", "--conns", "16"], ["put"]),
        ("put 256", ["--clients", "256", "--conns", "64"], ["put"]),
        ("range 64", ["--clients", "64", "--conns", "16"], ["range", "0000000000000100"]),
        ("range 256", ["--clients", "256", "--conns", "64"], ["range", "0000000000000100"])]


def compact(s, admin):
    """Compacts the store to its current revision, so every run starts from
    the same live keys and no history: without it each run found more
    revisions than the one before (and paid for larger snapshots), a bias
    against whichever of auth off / on ran second."""
    p = s.ctl(["get", "compact-probe", "-w", "json"], user=admin)
    rev = json.loads(p.stdout)["header"]["revision"]
    if rev > getattr(s, "compacted", 0):  # nothing written since: nothing to do
        s.ctl(["compaction", str(rev), "--physical"], user=admin)
        s.compacted = rev


def run_one(s, work, user, admin):
    name, g, w = work
    compact(s, admin)
    # one second of the same load first, on the same (logged-in)
    # connections: the measured part starts with warm caches on both
    # sides, not right after the logins
    extra = g + ["--duration", str(SECONDS), "--warmup", "1"]
    if s.kind == "ketch":
        extra += ["--server-pid", str(s.proc.pid)]
    r, _ = s.bench(w, user=user, extra=extra)
    r["server_us_per_op"] = r.get("server_state_us_per_req", 0)
    return r


def run_pair(s, work, on_first):
    """One workload with auth off and with auth on, one right after the
    other (the machine's swings hit both alike): (off result, on result)."""
    res = {}
    for mode in (("on", "off") if on_first else ("off", "on")):
        if mode == "off":
            res[mode] = run_one(s, work, None, None)
            continue
        s.ctl(["auth", "enable"])
        res[mode] = run_one(s, work, "bench:" + PW, "root:rootpw")
        s.ctl(["auth", "disable"], user="root:rootpw")
    return res["off"], res["on"]


def etcd_login_storm(port, n, result):
    import grpc
    import etcd3.etcdrpc as rpc
    chans = [grpc.insecure_channel("127.0.0.1:%d" % port) for _ in range(16)]
    stubs = [rpc.AuthStub(c) for c in chans]
    t0 = time.time()
    futs = [stubs[i % 16].Authenticate.future(rpc.AuthenticateRequest(name="bench", password=PW),
                                              timeout=60) for i in range(n)]
    ok = 0
    for f in futs:
        try:
            f.result()
            ok += 1
        except Exception:  # noqa (a timeout counts as not done)
            pass
    result["ok"], result["s"] = ok, time.time() - t0
    for c in chans:
        c.close()


def main():
    servers = []
    try:
        for kind in ("ketch", "etcd"):
            servers.append(Server(kind))
            setup(servers[-1])
        table = {}
        for rnd in range(ROUNDS):
            for s in servers:
                for i, work in enumerate(WORK):
                    # off first and on first in turn
                    off, on = run_pair(s, work, (rnd + i) % 2 == 1)
                    table.setdefault((s.kind, work[0]), []).append(
                        (ops(off), ops(on), off["server_us_per_op"], on["server_us_per_op"]))
                print("round %d %s done" % (rnd + 1, s.kind), flush=True)
        print("\n| workload | target | auth off ops/s | auth on ops/s | on/off "
              "| server CPU/op off | on |")
        print("|---|---|---|---|---|---|---|")
        for name, _, _ in WORK:
            for kind in ("ketch", "etcd"):
                rows = table[(kind, name)]
                for off, on, uoff, uon in rows:
                    cpu = "%.2f us | %.2f us" % (uoff, uon) if kind == "ketch" else "- | -"
                    print("| %s | %s | %.0f | %.0f | %.1f%% | %s |" %
                          (name, kind, off, on, 100.0 * on / off, cpu))
        print("\nmedian on/off of the %d pairs (each pair: the two runs one right after "
              "the other):" % ROUNDS)
        for name, _, _ in WORK:
            line = []
            for kind in ("ketch", "etcd"):
                r = sorted(100.0 * on / off for off, on, _, _ in table[(kind, name)])
                med = r[len(r) // 2] if len(r) % 2 else (r[len(r) // 2 - 1] + r[len(r) // 2]) / 2
                line.append("%s %.1f%% (%.1f-%.1f%%)" % (kind, med, r[0], r[-1]))
            print("  %s: %s" % (name, ", ".join(line)))
        if not LOGINS:
            return
        # the login storm
        print("\nlogin storm: %d logins at once while 64 clients put as bench" % LOGINS)
        for s in servers:
            s.ctl(["auth", "enable"])
        dur = str(SECONDS * 3)
        k = servers[0]
        r, err = k.bench(["put"], user="bench:" + PW, errors_ok=True,
                         extra=["--clients", "64", "--conns", "16", "--duration", dur,
                                "--storm", str(LOGINS), "--storm-after", "3"])
        m = re.search(r"storm: .*", err)
        line = m.group(0) if m else "(no storm line)"
        got = re.search(r"(\d+) answered their login within ([0-9.]+) s", line)
        rate = int(got.group(1)) / float(got.group(2)) if got else 0
        print("ketch: putters p99 %.2f ms, %.0f puts/s, %d failed %r; %s; %.1f logins/s" %
              (r["p99_ms"], ops(r, True), r["errors"], r["errors_by_code"], line, rate))
        e = servers[1]
        res = {}
        t = threading.Timer(3.0, etcd_login_storm, (e.port, LOGINS, res))
        t.start()
        r, _ = e.bench(["put"], user="bench:" + PW, errors_ok=True,
                       extra=["--clients", "64", "--conns", "16", "--duration", dur])
        t.join(120)
        print("etcd: putters p99 %.2f ms, %.0f puts/s, %d failed %r; %d of %d logins in %.2f s: "
              "%.1f logins/s" %
              (r["p99_ms"], ops(r, True), r["errors"], r["errors_by_code"], res.get("ok", 0),
               LOGINS, res.get("s", 0), res.get("ok", 0) / max(res.get("s", 1), 1e-9)))
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
