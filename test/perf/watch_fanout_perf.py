"""Watch fan-out through a gRPC proxy, ketch-grpc and etcd's own side by side
(issue 20; run by hand: /usr/bin/python3 test/perf/watch_fanout_perf.py
[WATCHERS] [ROUNDS] [PUTS]).

One ketch member behind one ketch-grpc (it coalesces watches), and one etcd
3.4 member (Debian's etcd-server) behind `etcd grpc-proxy start` (etcd's
proxy coalesces too), each on loopback. Per round and per target, in turn:
`ketch-bench --target etcd watch` opens WATCHERS (default 10,000) watchers of
the prefix ketch-bench/watch/ over 10 connections (one gRPC Watch stream
each, WATCHERS/10 watches per stream), waits until every one is created,
then puts PUTS (default 20) values under the prefix at 4 puts/s (open loop),
so each put is delivered to every watcher. Reported per run: the delivery
time, put sent -> event received at each watcher (p50, p99, max over
WATCHERS x PUTS deliveries), and how many watches the member itself serves
(ketch: etcd_debugging_mvcc_watcher_total on the member's /metrics; etcd:
the same metric), read while the watchers are open.

The machine is shared (2 cores: the member, the proxy and ketch-bench on
them), so figures move between rounds: the summary gives the range over
ROUNDS (default 3). Bounded: each ketch-bench run is cut at 120 s.
KETCH_GRPC=PATH runs another ketch-grpc binary (e.g. one built before
coalescing) in front of the ketch member.
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
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, free_port  # noqa: E402

WATCHERS = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
PUTS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
STREAMS = 10
TMP = tempfile.mkdtemp(prefix="ketch-watch-fanout-perf-")
BENCH = os.path.join(BIN, "ketch-bench")
PROCS = []


def spawn(name, args):
    log = open(os.path.join(TMP, name + ".log"), "wb")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def wait_port(port, proc, what, timeout=20):
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited (see %s)" % (what, TMP))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def member(kind):
    """One member; its client port."""
    port, peer = free_port(), free_port()
    url, purl = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % peer
    exe = os.path.join(BIN, "ketch") if kind == "ketch" else shutil.which("etcd")
    p = spawn(kind, [exe, "--name", "p0", "--data-dir", os.path.join(TMP, kind),
                     "--listen-client-urls", url, "--advertise-client-urls", url,
                     "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                     "--initial-cluster", "p0=" + purl])
    wait_port(port, p, kind)
    return port


def proxy(kind, member_port):
    port = free_port()
    if kind == "ketch":
        exe = os.environ.get("KETCH_GRPC") or os.path.join(BIN, "ketch-grpc")
        p = spawn("ketch-grpc", [exe, "--listen-addr",
                                 "127.0.0.1:%d" % port, "--endpoints",
                                 "127.0.0.1:%d" % member_port])
    else:
        p = spawn("etcd-grpc-proxy", [shutil.which("etcd"), "grpc-proxy", "start", "--endpoints",
                                      "127.0.0.1:%d" % member_port, "--listen-addr",
                                      "127.0.0.1:%d" % port])
    wait_port(port, p, kind + " proxy")
    return port


def member_watchers(member_port):
    try:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % member_port,
                                      timeout=5).read().decode()
        m = re.search(r"^etcd_debugging_mvcc_watcher_total (\d+)", text, re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def run(kind, member_port, proxy_port):
    """One ketch-bench watch run through the proxy; its JSON and the most
    watches the member served meanwhile."""
    cmd = [BENCH, "--target", "etcd", "--endpoints", "127.0.0.1:%d" % proxy_port, "--json",
           "--timeout-ms", "60000", "watch", "--streams", str(STREAMS), "--watch-per-stream",
           str(WATCHERS // STREAMS), "--put-total", str(PUTS), "--put-rate", "4"]
    seen = []
    stop = threading.Event()

    def sample():
        while not stop.wait(0.5):
            n = member_watchers(member_port)
            if n is not None:
                seen.append(n)

    t = threading.Thread(target=sample)
    t.start()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=120)
    finally:
        stop.set()
        t.join()
    if p.returncode:
        raise RuntimeError("%s: ketch-bench rc %d: %s" % (kind, p.returncode, p.stderr.decode()))
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    return r, max(seen) if seen else None


def main():
    kp = member("ketch")
    ep = member("etcd")
    targets = [("ketch-grpc + ketch", kp, proxy("ketch", kp)),
               ("etcd grpc-proxy + etcd 3.4", ep, proxy("etcd", ep))]
    results = {name: [] for name, _, _ in targets}
    print("%d watchers of one prefix over %d streams, %d puts at 4/s, %d rounds (%s)"
          % (WATCHERS, STREAMS, PUTS, ROUNDS, TMP), flush=True)
    for rnd in range(ROUNDS):
        for name, mport, pport in targets:
            r, served = run(name, mport, pport)
            ok = r["events"] == r["expected"] and r["put_ok"] == PUTS
            results[name].append((r, served, ok))
            print("round %d %-28s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  setup %5.2f s  "
                  "member watches %s  %s" % (rnd + 1, name, r["p50_ms"], r["p99_ms"], r["max_ms"],
                                             r["setup_s"], served,
                                             "all delivered" if ok else
                                             "MISSING %d/%d" % (r["events"], r["expected"])),
                  flush=True)
    print("\nsummary (range over %d rounds):" % ROUNDS)
    for name, rs in results.items():
        def rng(k):
            v = [r[k] for r, _, _ in rs]
            return "%.1f-%.1f" % (min(v), max(v))
        print("  %-28s p50 %s ms, p99 %s ms, max %s ms; member watches %s; %s" % (
            name, rng("p50_ms"), rng("p99_ms"), rng("max_ms"),
            sorted(set(s for _, s, _ in rs)), "every event delivered" if all(ok for _, _, ok in rs)
            else "events missing"))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
