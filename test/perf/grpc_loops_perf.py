"""ketch-grpc's throughput at 1 and several event loops (issue 17 item 7), by hand:
/usr/bin/python3 test/perf/grpc_loops_perf.py [SECONDS] [ROUNDS] [LOOPS...]

One 1-member ketch (its default --io-threads) and one ketch-grpc in front of
it, restarted with each --loops figure (default: 1 2); `ketch-bench --target
etcd` drives it over CONNS HTTP/2 connections (so they spread over the
loops) with CLIENTS concurrent calls: put (256 B values, 100k keys), a
linearizable range of one key (range-l), and a serializable one (range-s:
answered from the bridge's range cache, so the member idles and the
bridge's own ceiling shows). Rounds alternate the loop figures; each
figure is the range over ROUNDS (default 3) runs of SECONDS (default 3).
Reported per case: calls/s, p99, and the bridge's CPU per call in
microseconds (all its threads, from /proc/PID/stat), with the generator on
the same machine. Everything on loopback; every process is stopped at the
end. Environment: CONNS (default 8), CLIENTS (default "64 256"), WORKLOADS
(default "put range-l range-s"); ETCD_BENCHMARK=path drives it with etcd's
own benchmark tool instead (/work/shared/tools/build-etcd-benchmark.sh
builds it), ETCD_TOTAL requests per run (default 30000).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, free_port  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
LOOPS = [int(x) for x in sys.argv[3:]] or [1, 2]
CONNS = int(os.environ.get("CONNS", "8"))
CLIENTS = [int(x) for x in os.environ.get("CLIENTS", "64 256").split()]
WORKLOADS = os.environ.get("WORKLOADS", "put range-l range-s").split()
TMP = tempfile.mkdtemp(prefix="ketch-loops-perf-")
HZ = os.sysconf("SC_CLK_TCK")
procs = []


def wait_port(port, p, what):
    import socket
    for _ in range(200):
        if p.poll() is not None:
            raise RuntimeError("%s exited" % what)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen" % what)


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / HZ


def start_member():
    port, peer = free_port(), free_port()
    p = subprocess.Popen([os.path.join(BIN, "ketch"), "--name", "perf", "--data-dir",
                          os.path.join(TMP, "m"), "--listen-client-urls",
                          "http://127.0.0.1:%d" % port, "--advertise-client-urls",
                          "http://127.0.0.1:%d" % port, "--listen-peer-urls",
                          "http://127.0.0.1:%d" % peer, "--initial-advertise-peer-urls",
                          "http://127.0.0.1:%d" % peer, "--initial-cluster",
                          "perf=http://127.0.0.1:%d" % peer, "--auto-compaction-mode", "revision",
                          "--auto-compaction-retention", "100000"],
                         stdout=open(os.path.join(TMP, "member.log"), "wb"),
                         stderr=subprocess.STDOUT)
    procs.append(p)
    wait_port(port, p, "ketch")
    time.sleep(1)
    return "127.0.0.1:%d" % port


def start_bridge(member, loops):
    port = free_port()
    p = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                          "--endpoints", member, "--loops", str(loops)],
                         stdout=open(os.path.join(TMP, "bridge-%d.log" % loops), "ab"),
                         stderr=subprocess.STDOUT)
    procs.append(p)
    wait_port(port, p, "ketch-grpc")
    return p, port


def etcd_bench(port, clients, workload):
    """The same with etcd's own benchmark tool (ETCD_BENCHMARK=path): a fixed
    number of requests (ETCD_TOTAL, default 30000 per run) instead of a
    duration."""
    import re
    total = int(os.environ.get("ETCD_TOTAL", "30000"))
    args = [os.environ["ETCD_BENCHMARK"], "--endpoints", "127.0.0.1:%d" % port, "--conns",
            str(CONNS), "--clients", str(clients)]
    if workload == "put":
        args += ["put", "--key-size", "16", "--val-size", "256", "--key-space-size", "100000",
                 "--total", str(total)]
    else:
        args += ["range", "perf-key", "--consistency", "l" if workload == "range-l" else "s",
                 "--total", str(total)]
    r = subprocess.run(args, capture_output=True, timeout=600)
    out = r.stdout.decode()
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if r.returncode != 0 or not m:
        raise RuntimeError("etcd benchmark: %s %s" % (out[-500:], r.stderr.decode()[-500:]))
    p99 = re.search(r"99% in ([\d.]+) secs", out)
    return {"rps": float(m.group(1)), "ok": total, "errors": 0,
            "p99_ms": float(p99.group(1)) * 1000 if p99 else 0}


def bench(port, clients, workload):
    if os.environ.get("ETCD_BENCHMARK"):
        return etcd_bench(port, clients, workload)
    args = [os.path.join(BIN, "ketch-bench"), "--target", "etcd", "--endpoints",
            "127.0.0.1:%d" % port, "--conns", str(CONNS), "--clients", str(clients),
            "--duration", str(SECONDS), "--json"]
    if workload == "put":
        args += ["put", "--key-space-size", "100000", "--val-size", "256"]
    elif workload == "range-l":
        args += ["range", "perf-key", "--consistency", "l"]
    else:  # serializable: answered by the bridge's range cache, the member idle
        args += ["range", "perf-key", "--consistency", "s"]
    r = subprocess.run(args, capture_output=True, timeout=SECONDS + 60)
    if r.returncode != 0:
        raise RuntimeError("ketch-bench: %s" % r.stderr.decode()[-500:])
    return json.loads(r.stdout)


def main():
    member = start_member()
    results = {}  # (workload, clients, loops) -> [(ops, p99_ms, cpu_us)]
    for rnd in range(ROUNDS):
        for loops in LOOPS:
            p, port = start_bridge(member, loops)
            if rnd == 0 and loops == LOOPS[0]:
                bench(port, 64, "put")  # warm-up; also makes perf-key's neighbours exist
            for workload in WORKLOADS:
                for clients in CLIENTS:
                    c0 = cpu_s(p.pid)
                    j = bench(port, clients, workload)
                    c1 = cpu_s(p.pid)
                    ops, n, p99, fails = j["rps"], j["ok"], j["p99_ms"], j["errors"]
                    results.setdefault((workload, clients, loops), []).append(
                        (ops, p99, (c1 - c0) * 1e6 / max(n, 1), fails))
            p.terminate()
            p.wait(20)
            procs.remove(p)
    runs = ("%s requests (etcd's benchmark tool)" % os.environ.get("ETCD_TOTAL", "30000")
            if os.environ.get("ETCD_BENCHMARK") else "%.0f s (ketch-bench)" % SECONDS)
    print("ketch-grpc --loops, %d rounds of %s, %d connections, %d cores" %
          (ROUNDS, runs, CONNS, os.cpu_count()))
    print("| workload | clients | loops | calls/s | p99 ms | bridge CPU us/call | failed |")
    print("|---|---|---|---|---|---|---|")
    for (workload, clients, loops), rs in sorted(results.items()):
        ops = [r[0] for r in rs]
        p99 = [r[1] for r in rs]
        cpu = [r[2] for r in rs]
        print("| %s | %d | %d | %.0f-%.0f | %.1f-%.1f | %.1f-%.1f | %d |" %
              (workload, clients, loops, min(ops), max(ops), min(p99), max(p99), min(cpu),
               max(cpu), sum(r[3] for r in rs)))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
