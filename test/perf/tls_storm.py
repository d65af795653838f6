"""A storm of new TLS clients against a 3-member TLS cluster (run by hand:
/usr/bin/python3 test/perf/tls_storm.py [N] [ROUNDS]).

Three members with TLS on the client and the peer links (client and member
certificates made with the openssl CLI, tlscerts.py), 64 clients putting
(ketch-bench put, 16 connections, 12 s) while, 2 s in, N (default 2000) new
TLS clients connect at once (ketch-bench --storm: each completes a TLS
handshake with a client certificate and a HELLO). Reports, per round, the
putters' p50/p99/max, how long the storm took, and whether an election
happened (the raft term of every member before and after). Issue 15's aim:
p99 under 10 ms and no election. The same run without the storm is the
baseline."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, STATUS, free_port  # noqa: E402
from tls_test import TlsConn  # noqa: E402  (certificates of its own TMP)
import tls_test  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
TMP = tempfile.mkdtemp(prefix="ketch-tls-storm-")
C = tls_test.C


def main():
    client = [free_port() for _ in range(3)]
    peer = [free_port() for _ in range(3)]
    ic = ",".join("s%d=https://127.0.0.1:%d" % (i, peer[i]) for i in range(3))
    procs = []
    for i in range(3):
        args = [os.path.join(BIN, "ketch"), "--name", "s%d" % i, "--data-dir",
                os.path.join(TMP, "s%d" % i),
                "--listen-client-urls", "https://127.0.0.1:%d" % client[i],
                "--listen-peer-urls", "https://127.0.0.1:%d" % peer[i],
                "--initial-cluster", ic, "--log-level", "warn"] + tls_test.tls_flags(i)
        procs.append(subprocess.Popen(args, stdout=open(os.path.join(TMP, "s%d.log" % i), "wb"),
                                      stderr=subprocess.STDOUT))
    try:
        deadline = time.time() + 20
        while True:
            try:
                terms = [TlsConn(p, timeout=2).call(STATUS, {}) for p in client]
                if len({t["leader"] for t in terms}) == 1 and terms[0]["leader"]:
                    break
            except Exception:  # noqa
                pass
            assert time.time() < deadline, "no leader"
            time.sleep(0.2)
        eps = ",".join("https://127.0.0.1:%d" % p for p in client)
        tls = ["--cacert", C["ca"], "--cert", C["client"], "--key", C["client-key"]]
        for rnd in range(ROUNDS):
            for storm in (0, N):
                before = [TlsConn(p).call(STATUS, {})["header"][3] for p in client]
                cmd = [os.path.join(BIN, "ketch-bench"), "--endpoints", eps] + tls + [
                    "--conns", "16", "--clients", "64", "--duration", "12", "--json"]
                if storm:
                    cmd += ["--storm", str(storm), "--storm-after", "2"]
                cmd += ["put", "--key-size", "16", "--val-size", "256", "--key-space-size",
                        "100000"]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                r = json.loads(p.stdout)
                after = [TlsConn(p2).call(STATUS, {})["header"][3] for p2 in client]
                storm_line = [line for line in p.stderr.splitlines() if line.startswith("storm:")]
                print("round %d storm %5d: %7.0f puts/s  p50 %.2f p99 %.2f max %.2f ms  errors %d  "
                      "terms %s -> %s%s  %s" % (
                          rnd + 1, storm, r["rps"], r["p50_ms"], r["p99_ms"], r["max_ms"],
                          r.get("errors", 0), before, after,
                          "" if before == after else "  ELECTION",
                          storm_line[0] if storm_line else ""), flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        if not os.environ.get("KT_KEEP_TMP"):
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
