"""Resource figures of one member (run by hand: /usr/bin/python3 test/perf/resources.py [N]).

Loads N keys (default 1M) of 16-byte keys and 256-byte values with ketch-bench,
then reports: RSS, data-dir size, restart-to-serving time (snapshot + WAL
replay), and the longest read latency seen while a snapshot of the whole store
is being written (the loop stall a snapshot causes)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, Conn, Member  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000


def bench(port, *args):
    out = subprocess.run([os.path.join(BIN, "ketch-bench"), "--endpoints", "127.0.0.1:%d" % port,
                          "--json"] + list(args), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def rss_kb(pid):
    return int(open("/proc/%d/status" % pid).read().split("VmRSS:")[1].split()[0])


def du(path):
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True).stdout.split()[0])


def main():
    # One snapshot lands when the N-th key is written (--snapshot-count N):
    # reads run across it to see the loop stall it causes.
    m = Member(extra=["--snapshot-count", str(N), "--log-level", "info"])
    try:
        t0 = time.time()
        r = bench(m.port, "--conns", "16", "--clients", "256", "--total", str(N - 2000), "put",
                  "--key-size", "16", "--val-size", "256", "--key-space-size", str(N),
                  "--sequential-keys")
        load_s = time.time() - t0
        stall = {}

        def reads():
            stall.update(bench(m.port, "--conns", "1", "--clients", "1", "--total", "50000",
                               "range", "0000000000000001"))
        th = threading.Thread(target=reads)
        th.start()
        time.sleep(0.2)
        c = Conn(m.port)  # the last 2000 keys, one by one: the N-th triggers the snapshot
        for i in range(N - 2000, N):
            c.put(b"%016d" % i, b"v" * 256)
        th.join()
        time.sleep(2)
        rss = rss_kb(m.proc.pid)
        m.stop()
        size = du(m.data_dir)
        t1 = time.time()
        m.start()
        restart = time.time() - t1
        c = Conn(m.port)
        keys = c.get(b"\0", range_end=b"\0", count_only=True)["count"]
        rss2 = rss_kb(m.proc.pid)
        raw = N * (16 + 256)
        log = m.logtext()
        print(json.dumps({
            "keys": keys, "load_put_rps": round(r["rps"]), "load_seconds": round(load_s, 1),
            "rss_mb_after_load": round(rss / 1024), "rss_mb_after_restart": round(rss2 / 1024),
            "rss_bytes_per_key_beyond_raw": round((rss2 * 1024 - raw) / N),
            "data_dir_mb": round(size / 1024), "restart_to_serving_s": round(restart, 2),
            "read_max_ms_during_snapshot": stall.get("max_ms"),
            "read_p999_ms_during_snapshot": stall.get("p999_ms")}, indent=1))
        print("\n".join(l for l in log.splitlines() if "snapshot" in l or "ready" in l)[-3000:])
    finally:
        m.cleanup()


if __name__ == "__main__":
    main()
