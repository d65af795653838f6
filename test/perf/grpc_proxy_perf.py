"""ketch-grpc as etcd's gRPC proxy, by hand (issue 20's figures):
/usr/bin/python3 test/perf/grpc_proxy_perf.py [SECONDS] [ROUNDS]

1. Serializable range of one key on a cache hit vs a miss: `ketch-bench
   --target etcd range K --consistency s` against a ketch-grpc with its
   range cache (the default, --cache-size 2048) and against one with
   --cache-size 0, both in front of the same 1-member ketch, at 1 and 64
   concurrent calls (one HTTP/2 connection). Reported per case: calls/s, p50,
   and the CPU each call cost the bridge and the member (from /proc: the
   figure that holds when other work shares the machine), plus the cached
   bridge's own hit and miss counters over the whole run.

2. Lease keep-alives through a proxy: `ketch-bench --target etcd
   lease-keepalive` (1000 leases of 300 s kept alive in turn, one
   LeaseKeepAlive stream per client, 64 clients) against ketch-grpc
   --coalesce-lease-keepalives in front of the ketch member, and against
   Debian's `etcd grpc-proxy start` in front of a 1-member etcd 3.4; the same
   workload straight to each server beside it for reference.

Rounds alternate the targets; each figure is the range over ROUNDS
(default 3) runs of SECONDS (default 3) each. Everything on loopback; all
processes are stopped at the end (also on failure).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, free_port  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TMP = tempfile.mkdtemp(prefix="ketch-proxy-perf-")
BENCH = os.path.join(BIN, "ketch-bench")
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
PROCS = []
TICK = os.sysconf("SC_CLK_TCK")


def spawn(name, args):
    log = open(os.path.join(TMP, name + ".log"), "wb")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def wait_port(port, proc, what):
    import socket
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited (%s)" % (what, os.path.join(TMP, "*.log")))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def server(kind):
    port, peer = free_port(), free_port()
    url, purl = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % peer
    exe = os.path.join(BIN, "ketch") if kind == "ketch" else ETCD
    p = spawn(kind, [exe, "--name", "p0", "--data-dir", os.path.join(TMP, kind),
                     "--listen-client-urls", url, "--advertise-client-urls", url,
                     "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                     "--initial-cluster", "p0=" + purl])
    wait_port(port, p, kind)
    p.port = port
    return p


def bridge(name, member, flags):
    port = free_port()
    p = spawn(name, [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                     "--endpoints", "127.0.0.1:%d" % member.port] + flags)
    wait_port(port, p, name)
    p.port = port
    return p


def cpu_s(p):
    with open("/proc/%d/stat" % p.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def bench(port, args, clients, watch=()):
    before = [cpu_s(p) for p in watch]
    out = subprocess.run([BENCH, "--target", "etcd", "--endpoints", "127.0.0.1:%d" % port,
                          "--clients", str(clients), "--duration", str(SECONDS), "--json"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SECONDS + 120)
    if out.returncode != 0:
        raise RuntimeError("ketch-bench %s: %s" % (args, out.stderr.decode()[-2000:]))
    r = json.loads(out.stdout)
    if r["errors"]:
        raise RuntimeError("ketch-bench %s: %d errors %s" % (args, r["errors"],
                                                             r["errors_by_code"]))
    r["cpu_us"] = [(cpu_s(p) - b) * 1e6 / max(r["ok"], 1) for p, b in zip(watch, before)]
    return r


def metric(port, name):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    return int(float(re.search(r"^%s (\S+)$" % name, text, re.M).group(1)))


def span(xs, fmt="%.0f"):
    lo, hi = min(xs), max(xs)
    return fmt % lo if fmt % lo == fmt % hi else (fmt % lo) + "-" + (fmt % hi)


def kilo(xs):
    return span([x / 1000 for x in xs], "%.0fk" if min(xs) >= 10000 else "%.1fk")


def main():
    member = server("ketch")
    mport = free_port()
    cached = bridge("grpc-cache", member, ["--metrics-addr", "127.0.0.1:%d" % mport])
    plain = bridge("grpc-nocache", member, ["--cache-size", "0"])
    co = bridge("grpc-coalesce", member, ["--coalesce-lease-keepalives"])
    etcd = server("etcd")
    eport = free_port()
    eproxy = spawn("etcd-grpc-proxy", [ETCD, "grpc-proxy", "start", "--endpoints",
                                       "127.0.0.1:%d" % etcd.port,
                                       "--listen-addr", "127.0.0.1:%d" % eport])
    wait_port(eport, eproxy, "etcd grpc-proxy")
    subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", "127.0.0.1:%d" % member.port,
                    "put", "k", "v" * 64], check=True, stdout=subprocess.DEVNULL)

    rows = {}
    h0, m0 = (metric(mport, "etcd_grpc_proxy_cache_hits_total"),
              metric(mport, "etcd_grpc_proxy_cache_misses_total"))
    for rnd in range(ROUNDS):
        for clients in (1, 64):
            for label, b in (("hit", cached), ("miss", plain)):
                r = bench(b.port, ["range", "k", "--consistency", "s"], clients, (b, member))
                rows.setdefault(("range", clients, label), []).append(r)
        for label, port, watch in (("ketch-grpc --coalesce-lease-keepalives", co.port,
                                    (co, member)),
                                   ("etcd 3.4 grpc-proxy", eport, (eproxy, etcd)),
                                   ("ketch member, no proxy", member.port, (member,)),
                                   ("etcd 3.4, no proxy", etcd.port, (etcd,))):
            if port == member.port:
                r = subprocess.run([BENCH, "--endpoints", "127.0.0.1:%d" % port, "--clients",
                                    "64", "--duration", str(SECONDS), "--json",
                                    "lease-keepalive", "--leases", "1000"],
                                   stdout=subprocess.PIPE, timeout=SECONDS + 120, check=True)
                r = json.loads(r.stdout)
                r["cpu_us"] = []
            else:
                r = bench(port, ["lease-keepalive", "--leases", "1000"], 64, watch)
            rows.setdefault(("lease", 64, label), []).append(r)
        print("round %d done" % (rnd + 1), file=sys.stderr, flush=True)
    hits = metric(mport, "etcd_grpc_proxy_cache_hits_total") - h0
    misses = metric(mport, "etcd_grpc_proxy_cache_misses_total") - m0

    print("%d rounds of %g s, %d cores, %s" % (ROUNDS, SECONDS, os.cpu_count(),
                                             time.strftime("%Y-%m-%d")))
    print()
    print("| serializable range, 1 key | calls | cache hit | cache miss (--cache-size 0) | "
          "hit / miss |")
    print("|---|---|---|---|---|")
    for clients in (1, 64):
        h, m = rows[("range", clients, "hit")], rows[("range", clients, "miss")]
        ratios = [a["rps"] / b["rps"] for a, b in zip(h, m)]
        print("| calls/s (p50) | %d | %s (%s ms) | %s (%s ms) | %s× |" % (
            clients, kilo([x["rps"] for x in h]), span([x["p50_ms"] for x in h], "%.3f"),
            kilo([x["rps"] for x in m]), span([x["p50_ms"] for x in m], "%.3f"),
            span(ratios, "%.1f")))
        print("| CPU per call: bridge, member | %d | %s µs, %s µs | %s µs, %s µs | |" % (
            clients, span([x["cpu_us"][0] for x in h], "%.1f"),
            span([x["cpu_us"][1] for x in h], "%.1f"), span([x["cpu_us"][0] for x in m], "%.1f"),
            span([x["cpu_us"][1] for x in m], "%.1f")))
    print()
    print("cached bridge over the run: %d hits, %d misses" % (hits, misses))
    print()
    print("| lease keep-alives, 64 clients, 1000 leases | calls/s | p50 | CPU per call "
          "(proxy, server) |")
    print("|---|---|---|---|")
    for label in ("ketch-grpc --coalesce-lease-keepalives", "etcd 3.4 grpc-proxy",
                  "ketch member, no proxy", "etcd 3.4, no proxy"):
        rs = rows[("lease", 64, label)]
        cpu = ", ".join(span([x["cpu_us"][i] for x in rs], "%.1f") + " µs"
                        for i in range(len(rs[0]["cpu_us"])))
        print("| %s | %s | %s ms | %s |" % (label, kilo([x["rps"] for x in rs]) if min(
            x["rps"] for x in rs) >= 1000 else span([x["rps"] for x in rs]),
            span([x["p50_ms"] for x in rs], "%.3f"), cpu or "—"))
    co_r = [x["rps"] for x in rows[("lease", 64, "ketch-grpc --coalesce-lease-keepalives")]]
    ep_r = [x["rps"] for x in rows[("lease", 64, "etcd 3.4 grpc-proxy")]]
    print()
    print("keep-alives through ketch-grpc / through etcd's grpc-proxy: %s×" % span(
        [a / b for a, b in zip(co_r, ep_r)], "%.0f"))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in reversed(PROCS):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
