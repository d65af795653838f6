"""ketch-grpc's serializable range cache, hit vs miss (issue 20's "≥ 3×"), by hand:
/usr/bin/python3 test/perf/grpc_cache_perf.py [SECONDS] [ROUNDS] [--no-callgrind | --callgrind-only]
    [--no-etcd]

One 1-member ketch; in front of it four ketch-grpc: --loops 1 and --loops 2,
each once with the cache (--cache-max-staleness 10s, so with no writes every
call after the first is a hit) and once with --cache-size 0 (every call a
miss, forwarded to the member). The generator is `ketch-bench --target etcd
range k --consistency s` (one key, a 64-byte value) at 1, 16 and 64 calls in
flight: 1 connection at 1 call in flight, else 2 connections (one per loop
with --loops 2). Rounds alternate hit and miss; each figure is the range over
ROUNDS (default 3) runs of SECONDS (default 3). The hit/miss ratio is taken
per round (the hit run and the miss run next to it).

Beside calls/s: the CPU each call cost the generator (ketch-bench, from
getrusage), the bridge and the member (from /proc). When the cores are full,
calls/s goes as 1 / the sum of those, so (sum per miss) / (sum per hit) is
the most a hit can gain over a miss on this machine: the "ceiling" column.

Then, unless --no-etcd: the same through etcd 3.4's grpc-proxy in front of
a 1-member etcd (Debian's etcd-server): a hit is one key again; its cache
cannot be turned off, so a miss is one of 100,000 keys at random.

Then, unless --no-callgrind: instructions per call for the bridge alone,
which do not depend on the machine's load: a --loops 1 ketch-grpc under
valgrind --tool=callgrind, 2,000 calls to warm it, counters zeroed
(callgrind_control -z), 20,000 calls at 64 in flight, counters dumped; the
total Ir over the calls. Once with the cache (all hits), once with
--cache-size 0 (all misses).

Everything on loopback; all processes are stopped at the end (also on
failure).
"""
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
_argv, sys.argv = sys.argv, sys.argv[:1]  # its own SECONDS and ROUNDS are not ours
import grpc_proxy_perf as gp  # noqa: E402  spawn, wait_port, server, cpu_s, span, kilo
sys.argv = _argv
from grpc_proxy_perf import BIN, cpu_s, free_port, kilo, span, spawn  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SECONDS = float(ARGS[0]) if len(ARGS) > 0 else 3
ROUNDS = int(ARGS[1]) if len(ARGS) > 1 else 3
CALLGRIND = "--no-callgrind" not in sys.argv
RATES = "--callgrind-only" not in sys.argv
ETCD = RATES and "--no-etcd" not in sys.argv
ETCD_KEYS = 100000
TMP = gp.TMP
BENCH = os.path.join(BIN, "ketch-bench")
CACHED = ["--cache-max-staleness", "10s"]
UNCACHED = ["--cache-size", "0"]


def bridge(name, m, flags, wrap=(), limit=20):
    port, mport = free_port(), free_port()
    p = spawn(name, list(wrap) + [os.path.join(BIN, "ketch-grpc"), "--listen-addr",
                                  "127.0.0.1:%d" % port, "--endpoints", "127.0.0.1:%d" % m.port,
                                  "--metrics-addr", "127.0.0.1:%d" % mport] + flags)
    wait_port(port, p, name, limit)
    p.port, p.mport = port, mport
    return p


def bench(port, clients, extra, watch=(), work=("range", "k", "--consistency", "s")):
    conns = 1 if clients == 1 else 2
    before = [cpu_s(p) for p in watch]
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([BENCH, "--target", "etcd", "--endpoints", "127.0.0.1:%d" % port,
                          "--clients", str(clients), "--conns", str(conns), "--json"] + extra +
                         list(work),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("ketch-bench: %s" % out.stderr.decode()[-2000:])
    r = json.loads(out.stdout)
    if r["errors"]:
        raise RuntimeError("ketch-bench: %d errors %s" % (r["errors"], r["errors_by_code"]))
    r["cpu_us"] = [(cpu_s(p) - b) * 1e6 / max(r["ok"], 1) for p, b in zip(watch, before)]
    ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r["gen_us"] = (ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime) * 1e6 / max(r["ok"], 1)
    return r


def metric(p, name):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % p.mport,
                                  timeout=30).read().decode()
    return int(float(re.search(r"^%s (\S+)$" % name, text, re.M).group(1)))


def icount(m, label, flags):
    """Instructions per call of a --loops 1 bridge under callgrind."""
    out = os.path.join(TMP, "cg-%s.out" % label)
    b = bridge("cg-" + label, m, ["--loops", "1"] + flags,
               ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + ".%p"], 120)
    bench(b.port, 64, ["--total", "2000"])
    subprocess.run(["callgrind_control", "-z", str(b.pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    r = bench(b.port, 64, ["--total", "20000"])
    subprocess.run(["callgrind_control", "-d", str(b.pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    hits = metric(b, "etcd_grpc_proxy_cache_hits_total")
    b.terminate()
    b.wait(60)
    total = 0
    for f in glob.glob(out + ".*"):
        with open(f) as fh:
            text = fh.read()
        if "Trigger: dump" not in text:
            continue
        s = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
        total += int(s.group(1))
    return total / r["ok"], hits


def wait_port(port, proc, what, limit):
    deadline = time.time() + limit  # valgrind takes a while to start
    while True:
        try:
            return gp.wait_port(port, proc, what)
        except RuntimeError:
            if time.time() > deadline or proc.poll() is not None:
                raise


def main():
    m = gp.server("ketch")
    subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", "127.0.0.1:%d" % m.port,
                    "put", "k", "v" * 64], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if RATES:
        rates(m)
    if ETCD:
        etcd_rates()
    if CALLGRIND:
        hit, hits = icount(m, "hit", CACHED)
        miss, _ = icount(m, "miss", UNCACHED)
        print()
        print("callgrind, --loops 1, 64 in flight: %.0f instructions per hit (%d hits), "
              "%.0f per miss: %.2f×" % (hit, hits, miss, miss / hit))


def rates(m):
    bridges = {}
    for loops in (1, 2):
        for label, flags in (("hit", CACHED), ("miss", UNCACHED)):
            bridges[(loops, label)] = bridge("grpc-l%d-%s" % (loops, label), m,
                                             ["--loops", str(loops)] + flags)
    for loops in (1, 2):  # the first call fills the cache
        bench(bridges[(loops, "hit")].port, 1, ["--total", "100"])
    h0 = {lp: metric(bridges[(lp, "hit")], "etcd_grpc_proxy_cache_misses_total") for lp in (1, 2)}
    rows = {}
    for rnd in range(ROUNDS):
        for loops in (1, 2):
            for clients in (1, 16, 64):
                order = ("hit", "miss") if rnd % 2 == 0 else ("miss", "hit")
                for label in order:
                    b = bridges[(loops, label)]
                    r = bench(b.port, clients, ["--duration", str(SECONDS)], (b, m))
                    rows.setdefault((loops, clients, label), []).append(r)
        print("round %d done" % (rnd + 1), file=sys.stderr, flush=True)
    missed = {lp: metric(bridges[(lp, "hit")], "etcd_grpc_proxy_cache_misses_total") - h0[lp]
              for lp in (1, 2)}

    print("%d rounds of %g s, %d cores, %s" % (ROUNDS, SECONDS, os.cpu_count(),
                                             time.strftime("%Y-%m-%d %H:%M")))
    print()
    print("| --loops | calls in flight | cache hit calls/s | miss calls/s (--cache-size 0) | "
          "hit / miss | CPU per hit: generator, bridge | CPU per miss: generator, bridge, "
          "member | CPU-bound ceiling |")
    print("|---|---|---|---|---|---|---|---|")
    for loops in (1, 2):
        for clients in (1, 16, 64):
            h, ms = rows[(loops, clients, "hit")], rows[(loops, clients, "miss")]
            # With every core busy, calls/s goes as 1 / (all the CPU a call costs): the
            # ratio a hit could reach at best is the miss's total over the hit's.
            ceil = [(b["gen_us"] + sum(b["cpu_us"])) / (a["gen_us"] + sum(a["cpu_us"]))
                    for a, b in zip(h, ms)]
            print("| %d | %d | %s | %s | %s× | %s, %s µs | %s, %s, %s µs | %s× |" % (
                loops, clients, kilo([x["rps"] for x in h]), kilo([x["rps"] for x in ms]),
                span([a["rps"] / b["rps"] for a, b in zip(h, ms)], "%.1f"),
                span([x["gen_us"] for x in h], "%.1f"), span([x["cpu_us"][0] for x in h], "%.1f"),
                span([x["gen_us"] for x in ms], "%.1f"), span([x["cpu_us"][0] for x in ms], "%.1f"),
                span([x["cpu_us"][1] for x in ms], "%.1f"), span(ceil, "%.1f")))
    print()
    print("misses in the cached bridges during the runs: --loops 1: %d, --loops 2: %d" % (
        missed[1], missed[2]))


def etcd_rates():
    """The same hit and miss through etcd 3.4's own grpc-proxy, whose cache
    cannot be turned off: a miss is a serializable range of one key chosen at
    random among ETCD_KEYS (64-byte values, put first), far more than the
    proxy's cache holds."""
    etcd = gp.server("etcd")
    eport = free_port()
    eproxy = spawn("etcd-grpc-proxy", [gp.ETCD, "grpc-proxy", "start", "--endpoints",
                                       "127.0.0.1:%d" % etcd.port,
                                       "--listen-addr", "127.0.0.1:%d" % eport])
    gp.wait_port(eport, eproxy, "etcd grpc-proxy")
    keyed = ["--key-size", "8", "--key-space-size", str(ETCD_KEYS)]
    bench(etcd.port, 64, ["--total", str(ETCD_KEYS)], (),
          ["put", "--sequential-keys", "--val-size", "64"] + keyed)
    hit = ("range", "00000001", "--consistency", "s")
    miss = ["mixed", "--read-ratio", "1", "--consistency", "s"] + keyed
    bench(eport, 1, ["--total", "100"], (), hit)  # the first call fills the cache
    rows = {}
    for rnd in range(ROUNDS):
        for clients in (1, 16, 64):
            order = ("hit", "miss") if rnd % 2 == 0 else ("miss", "hit")
            for label in order:
                r = bench(eport, clients, ["--duration", str(SECONDS)], (eproxy, etcd),
                          hit if label == "hit" else miss)
                rows.setdefault((clients, label), []).append(r)
        print("etcd round %d done" % (rnd + 1), file=sys.stderr, flush=True)
    print()
    print("etcd 3.4 behind `etcd grpc-proxy start` (a miss: one of %d keys at random)" % ETCD_KEYS)
    print()
    print("| calls in flight | cache hit calls/s | miss calls/s | hit / miss | "
          "CPU per hit: generator, proxy, etcd | CPU per miss: generator, proxy, etcd |")
    print("|---|---|---|---|---|---|")

    def cpu(rs):  # generator, proxy, etcd
        return ", ".join(span(v, "%.1f") for v in ([x["gen_us"] for x in rs],
                                                    [x["cpu_us"][0] for x in rs],
                                                    [x["cpu_us"][1] for x in rs]))

    for clients in (1, 16, 64):
        h, ms = rows[(clients, "hit")], rows[(clients, "miss")]
        print("| %d | %s | %s | %s× | %s µs | %s µs |" % (
            clients, kilo([x["rps"] for x in h]), kilo([x["rps"] for x in ms]),
            span([a["rps"] / b["rps"] for a, b in zip(h, ms)], "%.1f"), cpu(h), cpu(ms)))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in reversed(gp.PROCS):
            p.kill()
            p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
