"""ketch vs etcd 3.4, one member each, same machine, same window (run by hand).

  /usr/bin/python3 test/perf/compare.py [ROUNDS]

Starts a fresh etcd (Debian etcd-server) and a fresh ketch on loopback, loads
100k keys into each, then runs every workload alternately (etcd, ketch, etcd,
ketch, ...) for ROUNDS rounds (default 3) and prints the medians and the
ratio ketch/etcd. etcd is driven by etcd's own benchmark tool
(../shared/tools/build-etcd-benchmark.sh builds it to
/tmp/etcd-bench/bin/etcd-benchmark; override with ETCD_BENCH), ketch by
bin/ketch-bench with the same workload shape. Both fsync every batch.
Prints a markdown table (for the README) and writes JSON to
build/compare.json. This is the precursor of `ketch-bench compare`."""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, Member, free_port  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
ETCD_BENCH = os.environ.get("ETCD_BENCH", "/tmp/etcd-bench/bin/etcd-benchmark")
KEY = "0000000000000001"

# name, conns, clients, args, etcd total, ketch total
WORKLOADS = [
    ("put, 1 client", 1, 1, ["put", "--key-size", "16", "--val-size", "256",
                             "--key-space-size", "100000"], 2000, 4000),
    ("put, 16 clients", 16, 16, ["put", "--key-size", "16", "--val-size", "256",
                                 "--key-space-size", "100000"], 15000, 40000),
    ("put, 64 clients", 16, 64, ["put", "--key-size", "16", "--val-size", "256",
                                 "--key-space-size", "100000"], 30000, 100000),
    ("put, 256 clients", 16, 256, ["put", "--key-size", "16", "--val-size", "256",
                                   "--key-space-size", "100000"], 40000, 150000),
    ("range 1 key, linearizable, 64 clients", 16, 64, ["range", KEY, "--consistency", "l"],
     20000, 500000),
    ("range 1 key, serializable, 64 clients", 16, 64, ["range", KEY, "--consistency", "s"],
     20000, 500000),
]


def etcd_run(port, conns, clients, args, total):
    cmd = [ETCD_BENCH, "--endpoints", "127.0.0.1:%d" % port, "--conns", str(conns),
           "--clients", str(clients)] + args[:1] + (args[1:2] if args[0] == "range" else []) + \
        ["--total", str(total)] + (args[2:] if args[0] == "range" else args[1:])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = float(re.search(r"50% in ([\d.]+) secs", out).group(1)) * 1000
    p99 = float(re.search(r"99% in ([\d.]+) secs", out).group(1)) * 1000
    return rps, p50, p99


def ketch_run(port, conns, clients, args, total):
    cmd = [os.path.join(BIN, "ketch-bench"), "--endpoints", "127.0.0.1:%d" % port, "--conns",
           str(conns), "--clients", str(clients), "--total", str(total), "--json"] + args
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout)
    assert r["errors"] == 0, r
    return r["rps"], r["p50_ms"], r["p99_ms"]


def rss_mb(pid):
    return int(open("/proc/%d/status" % pid).read().split("VmRSS:")[1].split()[0]) // 1024


def main():
    d = tempfile.mkdtemp(prefix="ketch-cmp-etcd-")
    ep, pp = free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--name", "e1", "--data-dir", d, "--listen-client-urls",
         "http://127.0.0.1:%d" % ep, "--advertise-client-urls", "http://127.0.0.1:%d" % ep,
         "--listen-peer-urls", "http://127.0.0.1:%d" % pp, "--initial-advertise-peer-urls",
         "http://127.0.0.1:%d" % pp, "--initial-cluster", "e1=http://127.0.0.1:%d" % pp,
         "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    k = Member(extra=["--log-level", "warn"])
    try:
        time.sleep(2)
        load = ["put", "--key-size", "16", "--val-size", "256", "--key-space-size", "100000",
                "--sequential-keys"]
        etcd_run(ep, 16, 64, load, 100000)
        ketch_run(k.port, 16, 64, load, 100000)
        res = {w[0]: {"etcd": [], "ketch": []} for w in WORKLOADS}
        for rnd in range(ROUNDS):
            for name, conns, clients, args, et, kt in WORKLOADS:
                res[name]["etcd"].append(etcd_run(ep, conns, clients, args, et))
                res[name]["ketch"].append(ketch_run(k.port, conns, clients, args, kt))
                print("round %d %-40s etcd %8.0f/s  ketch %8.0f/s" % (
                    rnd + 1, name, res[name]["etcd"][-1][0], res[name]["ketch"][-1][0]),
                    flush=True)
        rss = {"etcd": rss_mb(etcd.pid), "ketch": rss_mb(k.proc.pid)}
        rows = []
        print("\n| workload | etcd ops/s | ketch ops/s | ratio | etcd p50 / p99 ms | ketch p50 / p99 ms |")
        print("|---|---|---|---|---|---|")
        for name, *_ in WORKLOADS:
            med = {t: [statistics.median(x[i] for x in res[name][t]) for i in range(3)]
                   for t in ("etcd", "ketch")}
            ratio = med["ketch"][0] / med["etcd"][0]
            rows.append({"workload": name, "etcd": med["etcd"], "ketch": med["ketch"],
                         "ratio": ratio})
            print("| %s | %s | %s | %.1f× | %.2f / %.2f | %.2f / %.2f |" % (
                name, format(round(med["etcd"][0]), ","), format(round(med["ketch"][0]), ","),
                ratio, med["etcd"][1], med["etcd"][2], med["ketch"][1], med["ketch"][2]))
        print("\nRSS after the run (100k keys + history): etcd %d MB, ketch %d MB" % (
            rss["etcd"], rss["ketch"]))
        os.makedirs("build", exist_ok=True)
        with open("build/compare.json", "w") as f:
            json.dump({"rounds": ROUNDS, "rows": rows, "rss_mb": rss,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)
    finally:
        etcd.send_signal(signal.SIGKILL)
        etcd.wait()
        shutil.rmtree(d, ignore_errors=True)
        k.cleanup()


if __name__ == "__main__":
    main()
