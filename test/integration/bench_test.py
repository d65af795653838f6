"""test/integration/bench_test.py — bin/ketch-bench against real servers.

Every workload subcommand briefly against a real 1-member ketch: every request
accounted for (ok + errors == issued == --total), the JSON fields present and
sane (p50 <= p90 <= p99 <= p99.9 <= max, rps consistent with ok / seconds);
--duration and open loop (--rate: the offered schedule is kept, and a server
stalled with SIGSTOP is charged for every request it delayed — coordinated
omission accounted for); lease-keepalive (every keep-alive accounted for, an
expired lease's keep-alive counted as LEASE_NOT_FOUND), watch-latency and
watch fan-out (events received == watchers x puts, each watcher every event);
lock (acquisitions accounted for, none overlapping); floor. Then the etcd target against a real etcd
(Debian etcd-server) started here: put + range + the lease and watch streams
over etcd's gRPC API, counts right, and the values written through ketch-bench's gRPC path read back with
Debian's etcdctl. Prints "ok NAME" / "FAIL NAME: why".
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, Conn, Member, free_port  # noqa: E402

BENCH = os.path.join(BIN, "ketch-bench")
failures = 0


def report(name, why=None):
    global failures
    if why is None:
        print("ok bench/" + name, flush=True)
    else:
        failures += 1
        print("FAIL bench/%s: %s" % (name, why), flush=True)


def run(args, timeout=60, env=None):
    p = subprocess.run([BENCH] + args, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def bench_json(endpoint, args, glob=()):
    rc, out, err = run(["--endpoints", endpoint, "--json"] + list(glob) + args)
    if not out.strip():
        raise AssertionError("no JSON (exit %d): %s" % (rc, err[-500:]))
    return rc, json.loads(out)


def sane(r, total=None, want_errors=0):
    """Why r is not a sane, fully accounted result, or None."""
    for f in ("target", "workload", "clients", "conns", "issued", "ok", "errors",
              "errors_by_code", "seconds", "rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms",
              "max_ms", "latency", "read", "write", "hist_rel_error", "cpu_s"):
        if f not in r:
            return "field %s missing" % f
    if r["ok"] + r["errors"] != r["issued"]:
        return "ok %d + errors %d != issued %d" % (r["ok"], r["errors"], r["issued"])
    if sum(r["errors_by_code"].values()) != r["errors"]:
        return "errors_by_code %r do not sum to %d" % (r["errors_by_code"], r["errors"])
    if total is not None and r["issued"] != total:
        return "issued %d, want --total %d" % (r["issued"], total)
    if r["errors"] != want_errors:
        return "errors %r" % r["errors_by_code"]
    if r["ok"]:
        if not (0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]):
            return "percentiles out of order: %r" % r["latency"]
        if abs(r["rps"] - r["ok"] / r["seconds"]) > 0.01 * r["rps"] + 1:
            return "rps %.1f != ok/seconds %.1f" % (r["rps"], r["ok"] / r["seconds"])
        if r["latency"]["n"] != r["ok"] or r["read"]["n"] + r["write"]["n"] != r["ok"]:
            return "histogram counts %d / %d+%d != ok %d" % (
                r["latency"]["n"], r["read"]["n"], r["write"]["n"], r["ok"])
    return None


def first(*conds):
    """The message of the first (failed, message) pair whose failed is true."""
    for failed, msg in conds:
        if failed:
            return msg
    return None


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001
        why = "%s: %s %s" % (type(e).__name__, e, traceback.format_exc().splitlines()[-3:])
    report(name, why)


def ketch_tests(m):
    ep = m.endpoint
    G = ["--clients", "16", "--conns", "4"]

    def put():
        rc, r = bench_json(ep, ["put", "--key-size", "16", "--val-size", "256",
                                "--key-space-size", "500", "--sequential-keys"],
                           G + ["--total", "3000"])
        return sane(r, 3000) or first((rc, "exit %d" % rc),
                                      (r["write"]["n"] != 3000, "write histogram"))
    check("ketch/put", put)

    def threads_and_state_thread():
        # 3 generator threads share 1000 sequential keys of 13 characters
        # (thread i puts i, i + 3, ...): each key written exactly once; with
        # --server-pid the report gives the member's state-thread CPU per
        # request and the ceiling it implies
        rc, r = bench_json(ep, ["put", "--key-size", "13", "--val-size", "8",
                                "--key-space-size", "1000", "--sequential-keys"],
                           ["--clients", "12", "--conns", "6", "--total", "1000", "--threads", "3",
                            "--server-pid", str(m.proc.pid)])
        why = sane(r, 1000) or first((rc, "exit %d" % rc))
        if why:
            return why
        kvs = Conn(m.port).get("0000000000000", range_end=b"0000000001000").get("kvs") or []
        ours = sorted(int(kv[0]) for kv in kvs if len(kv[0]) == 13)
        if ours != list(range(1000)):
            return "keys written: %d, want 0..999 once each (missing %r)" % (
                len(ours), sorted(set(range(1000)) - set(ours))[:10])
        if any(kv[4] != 1 for kv in kvs if len(kv[0]) == 13):
            return "a key written twice (version != 1)"
        us, ceil = r.get("server_state_us_per_req"), r.get("server_state_ceiling_rps")
        if us is None or ceil is None or r.get("server_cpu_us_per_req") is None:
            return "no state-thread figures: %r" % r
        # 1000 puts may cost less than one 10 ms clock tick: 0 is possible
        if us < 0 or (us > 0 and abs(ceil - 1e6 / us) > 0.01 * ceil + 1):
            return "state thread %r us/req, ceiling %r" % (us, ceil)
        rc, out, err = run(["--endpoints", ep, "--clients", "4", "--total", "400", "--threads",
                            "2", "--server-pid", str(m.proc.pid), "put"])
        if rc or "Requests: 400 issued, 400 ok, 0 errors" not in out or \
                "Server state thread: " not in out or "requests/s (process: " not in out:
            return "text report (exit %d): %s" % (rc, out[-600:])
        return None
    check("ketch/threads-and-state-thread", threads_and_state_thread)

    def range_one():
        rc, r = bench_json(ep, ["range", "0000000000000001", "--consistency", "s"],
                           G + ["--total", "3000"])
        return sane(r, 3000) or first((r["read"]["n"] != 3000, "read histogram"))
    check("ketch/range-serializable", range_one)

    def range_variants():
        for args in (["range", "000000000000000", "--prefix", "--limit", "5"],
                     ["range", "0000000000000001", "0000000000000100", "--consistency", "l"]):
            rc, r = bench_json(ep, args, G + ["--total", "1000"])
            why = sane(r, 1000)
            if why:
                return "%s: %s" % (" ".join(args), why)
    check("ketch/range-prefix-limit-end", range_variants)

    def txn_put():
        rc, r = bench_json(ep, ["txn-put", "--txn-ops", "8", "--key-size", "16",
                                "--key-space-size", "500"], G + ["--total", "1000"])
        return sane(r, 1000)
    check("ketch/txn-put", txn_put)

    def txn_mixed():
        rc, r = bench_json(ep, ["txn-mixed", "--rw-ratio", "3", "--key-size", "16",
                                "--key-space-size", "500"], G + ["--total", "2000"])
        why = sane(r, 2000)
        if why:
            return why
        share = r["read"]["n"] / 2000.0  # rw-ratio 3: 3 reads per write
        return None if 0.68 < share < 0.82 else "read share %.2f, want ~0.75" % share
    check("ketch/txn-mixed", txn_mixed)

    def mixed():
        rc, r = bench_json(ep, ["mixed", "--read-ratio", "0.9", "--key-size", "16",
                                "--key-space-size", "500"], G + ["--total", "2000"])
        why = sane(r, 2000)
        if why:
            return why
        share = r["read"]["n"] / 2000.0
        return None if 0.85 < share < 0.95 else "read share %.2f, want ~0.9" % share
    check("ketch/mixed", mixed)

    def duration():
        t = time.time()
        rc, r = bench_json(ep, ["put"], ["--clients", "4", "--duration", "1"])
        el = time.time() - t
        return sane(r) or first((not 0.9 < r["seconds"] < 2.5, "ran %.2f s" % r["seconds"]),
                                (el > 5, "took %.1f s" % el),
                                (r["issued"] < 10, "issued only %d" % r["issued"]))
    check("ketch/duration", duration)

    def open_loop_rate():
        rc, r = bench_json(ep, ["range", "k", "--consistency", "s"],
                           ["--clients", "64", "--rate", "2000", "--duration", "1.5"])
        why = sane(r)
        if why:
            return why
        # the schedule: 1.5 s at 2000/s = 3000 requests, none more
        return None if 2900 <= r["issued"] <= 3000 else "issued %d, want ~3000" % r["issued"]
    check("ketch/open-loop-rate", open_loop_rate)

    def coordinated_omission():
        # open loop at 1000/s for 2 s; ketch is stopped (SIGSTOP) for 0.5 s in
        # the middle. Requests scheduled during the stall waited up to 0.5 s:
        # ~1/4 of all requests, so p90 must show hundreds of ms. (A closed
        # loop with one client would see one slow request: p90 ~ 0.)
        def stall():
            time.sleep(0.7)
            os.kill(m.proc.pid, signal.SIGSTOP)
            time.sleep(0.5)
            os.kill(m.proc.pid, signal.SIGCONT)
        th = threading.Thread(target=stall)
        th.start()
        try:
            rc, r = bench_json(ep, ["range", "k", "--consistency", "s"],
                               ["--clients", "1000", "--rate", "1000", "--duration", "2"])
        finally:
            th.join()
            os.kill(m.proc.pid, signal.SIGCONT)
        why = sane(r)
        if why:
            return why
        if r["p90_ms"] < 150:
            return "p90 %.1f ms: the stall is not charged to the requests it delayed" % r["p90_ms"]
        if r["max_ms"] < 400:
            return "max %.1f ms, want ~500 (the stall)" % r["max_ms"]
        return None
    check("ketch/open-loop-coordinated-omission", coordinated_omission)

    def text_report_and_progress():
        rc, out, err = run(["--endpoints", ep, "--clients", "2", "--duration", "1.3", "put"])
        if rc:
            return "exit %d: %s" % (rc, err[-300:])
        for part in ("Summary:", "Requests/sec:", "99.9% in", "Requests: ", "Generator CPU"):
            if part not in out:
                return "text report lacks %r" % part
        if "ketch-bench: ketch put" not in err:
            return "no progress line on stderr: %r" % err[-300:]
        rc, out, err = run(["--endpoints", ep, "--json", "--total", "100", "put"])
        return "progress line in --json mode: %r" % err if err.strip() else None
    check("ketch/text-report-and-progress", text_report_and_progress)

    def errors_counted():
        # an empty key is refused by the server: every request an error, by code
        rc, r = bench_json(ep, ["range", ""], ["--clients", "4", "--total", "200"])
        why = sane(r, 200, want_errors=200)
        if why:
            return why
        if r["errors_by_code"] != {"EKEYEMPTY": 200}:
            return "errors_by_code %r" % r["errors_by_code"]
        return None if rc == 1 else "exit %d with errors, want 1" % rc
    check("ketch/errors-by-code", errors_counted)

    def not_yet():
        for cmd in ("watch-get", "stm"):
            rc, out, err = run(["--endpoints", ep, cmd])
            if rc != 2 or "not supported by this tool yet" not in err or out:
                return "%s: exit %d out %r err %r" % (cmd, rc, out, err)
    check("ketch/unsupported-subcommands", not_yet)

    stream_tests(ep, "ketch")

    def bad_flags():
        for args in (["put", "--key-size", "0"], ["range"], ["range", "a", "--consistency", "x"],
                     ["--clients", "-1", "put"], ["nope"]):
            rc, out, err = run(["--endpoints", ep] + args)
            if rc != 2:
                return "%r: exit %d, want 2" % (args, rc)
    check("ketch/bad-flags", bad_flags)

    def floor():
        d = tempfile.mkdtemp(prefix="ketch-bench-floor-")
        try:
            rc, out, err = run(["--json", "floor", "--data-dir", d, "--count", "200"])
            r = json.loads(out)
            if os.listdir(d):
                return "left files: %r" % os.listdir(d)
            if not (0 < r["fdatasync_p50_ms"] < 100 and 0 < r["rtt_p50_ms"] < 50):
                return "implausible %r" % r
            if abs(r["floor_ms"] - r["fdatasync_p50_ms"] - r["rtt_p50_ms"]) > 0.001:
                return "floor != fsync + rtt: %r" % r
        finally:
            shutil.rmtree(d, ignore_errors=True)
    check("floor", floor)


def watch_sane(r, watchers, puts):
    """Why a watch / watch-latency result does not account for every event."""
    for f in ("target", "workload", "watchers", "created", "put_issued", "put_ok", "put_errors",
              "events", "expected", "foreign", "ended", "min_per_watcher", "max_per_watcher",
              "seconds", "events_per_s", "p50_ms", "p99_ms", "max_ms", "errors_by_code"):
        if f not in r:
            return "field %s missing" % f
    if r["watchers"] != watchers or r["created"] != watchers:
        return "watchers %d, created %d, want %d" % (r["watchers"], r["created"], watchers)
    if r["put_issued"] != puts or r["put_ok"] + r["put_errors"] != puts or r["put_errors"]:
        return "puts: %d issued %d ok %d errors, want %d ok" % (
            r["put_issued"], r["put_ok"], r["put_errors"], puts)
    if r["events"] != watchers * puts or r["expected"] != watchers * puts:
        return "events %d (expected %d), want %d x %d" % (r["events"], r["expected"],
                                                           watchers, puts)
    if r["min_per_watcher"] != puts or r["max_per_watcher"] != puts:
        return "per watcher %d..%d, want %d each" % (r["min_per_watcher"], r["max_per_watcher"],
                                                     puts)
    if r["foreign"] or r["ended"]:
        return "foreign %d ended %d" % (r["foreign"], r["ended"])
    if not 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]:
        return "latency percentiles %r" % ((r["p50_ms"], r["p99_ms"], r["max_ms"]),)
    if abs(r["events_per_s"] - r["events"] / r["seconds"]) > 0.01 * r["events_per_s"] + 1:
        return "events_per_s %.1f != events / seconds" % r["events_per_s"]
    return None


def stream_tests(ep, t):
    """lease-keepalive, watch-latency and watch against endpoint ep (target t)."""
    if t == "etcd":
        ep = "etcd://" + ep

    def keepalive():
        rc, r = bench_json(ep, ["lease-keepalive", "--leases", "300"],
                           ["--clients", "16", "--conns", "4", "--total", "3000"])
        return sane(r, 3000) or first((rc, "exit %d" % rc),
                                      (r.get("leases") != 300, "leases %r" % r.get("leases")),
                                      (r["workload"] != "lease-keepalive", "workload"))
    check(t + "/lease-keepalive", keepalive)

    def keepalive_expired():
        # TTL 1 s, each of 20 leases renewed every 2 s (10/s): the leases
        # expire between renewals, so later keep-alives are answered TTL 0
        rc, r = bench_json(ep, ["lease-keepalive", "--leases", "20", "--lease-ttl", "1"],
                           ["--clients", "4", "--rate", "10", "--duration", "5"])
        why = sane(r, want_errors=r["errors"])
        return why or first((r["errors"] == 0, "no keep-alive failed: %r" % r["errors_by_code"]),
                            (set(r["errors_by_code"]) != {"LEASE_NOT_FOUND"},
                             "errors %r" % r["errors_by_code"]),
                            (rc != 1, "exit %d with errors, want 1" % rc))
    check(t + "/lease-keepalive-expired-counted", keepalive_expired)

    def watch_latency():
        rc, r = bench_json(ep, ["watch-latency", "--watchers", "20", "--streams", "4",
                                "--put-total", "100", "--put-rate", "200"])
        why = watch_sane(r, 20, 100)
        return why or first((rc, "exit %d" % rc),
                            (not 0.4 < r["puts_per_s"] / 200 < 1.1, "put rate %r" % r["puts_per_s"]))
    check(t + "/watch-latency", watch_latency)

    def watch_fanout():
        rc, r = bench_json(ep, ["watch", "--streams", "4", "--watch-per-stream", "25",
                                "--put-total", "400", "--key-space-size", "50"],
                           ["--clients", "8"])
        return watch_sane(r, 100, 400) or first((rc, "exit %d" % rc))
    check(t + "/watch-fanout", watch_fanout)

    def watch_text():
        rc, out, err = run(["--endpoints", ep, "watch-latency", "--watchers", "3", "--streams",
                            "2", "--put-total", "10", "--put-rate", "100"])
        for part in ("Events: 30 received, 30 expected", "Events/sec:", "99.9% in"):
            if part not in out:
                return "text report lacks %r: %s" % (part, out)
        return "exit %d" % rc if rc else None
    check(t + "/watch-text-report", watch_text)

    def lock():
        # clients contend for one mutex; each acquisition is checked to be
        # alone in the critical section (MUTEX_OVERLAP otherwise)
        n = 200 if t == "ketch" else 30
        rc, r = bench_json(ep, ["lock", "bench-test-lock"], ["--clients", "4", "--total", str(n)])
        return sane(r, n) or first((rc, "exit %d" % rc), (r["workload"] != "lock", "workload"))
    check(t + "/lock", lock)


def start_etcd():
    d = tempfile.mkdtemp(prefix="ketch-bench-etcd-")
    cp, pp = free_port(), free_port()
    log = open(os.path.join(d, "etcd.log"), "wb")
    p = subprocess.Popen(
        ["etcd", "--name", "e1", "--data-dir", os.path.join(d, "data"),
         "--listen-client-urls", "http://127.0.0.1:%d" % cp,
         "--advertise-client-urls", "http://127.0.0.1:%d" % cp,
         "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
         "--initial-cluster", "e1=http://127.0.0.1:%d" % pp, "--log-level", "error"],
        stdout=log, stderr=subprocess.STDOUT)
    ep = "127.0.0.1:%d" % cp
    deadline = time.time() + 20
    while time.time() < deadline:
        if etcdctl(ep, ["endpoint", "health"]).returncode == 0:
            return p, d, ep
        time.sleep(0.2)
    p.kill()
    raise RuntimeError("etcd did not become healthy")


def etcdctl(ep, args):
    env = dict(os.environ, ETCDCTL_API="3")
    return subprocess.run(["etcdctl", "--endpoints", ep, "--dial-timeout", "2s",
                           "--command-timeout", "5s"] + args,
                          capture_output=True, text=True, timeout=20, env=env)


def etcd_tests():
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        report("etcd", "etcd / etcdctl not installed (sh test/deps.sh)")
        return
    p, d, ep = start_etcd()
    try:
        def put():
            rc, r = bench_json("etcd://" + ep, ["put", "--key-size", "16", "--val-size", "40",
                                                "--key-space-size", "1000", "--sequential-keys"],
                               ["--clients", "16", "--conns", "4", "--total", "2000"])
            why = sane(r, 2000)
            if why:
                return why
            if r["target"] != "etcd":
                return "target %r" % r["target"]
            # what ketch-bench wrote through gRPC, read with Debian's etcdctl
            want = "".join(chr(ord("a") + i % 26) for i in range(40))
            for k in (0, 1, 999):
                key = "%016d" % k
                out = etcdctl(ep, ["get", key, "--print-value-only"])
                if out.stdout.strip() != want:
                    return "etcdctl get %s: %r, want %r" % (key, out.stdout, want)
            out = etcdctl(ep, ["get", "0000000000000000", "0000000000001000", "--limit", "1",
                               "-w", "json"])
            n = json.loads(out.stdout).get("count")
            if n != 1000:
                return "etcdctl counts %r keys, want 1000" % n
            # 2000 puts + the store's start: the revision is 2001
            rev = json.loads(out.stdout)["header"]["revision"]
            return None if rev == 2001 else "revision %r, want 2001 (one per put)" % rev
        check("etcd/put-readable-with-etcdctl", put)

        def range_both():
            for cons in ("l", "s"):
                rc, r = bench_json(ep, ["range", "0000000000000001", "--consistency", cons],
                                   ["--target", "etcd", "--clients", "16", "--conns", "4",
                                    "--total", "1000"])
                why = sane(r, 1000)
                if why:
                    return cons + ": " + why
        check("etcd/range", range_both)

        def txn_and_mixed():
            for args in (["txn-put", "--txn-ops", "4", "--key-size", "16", "--key-space-size",
                          "100"], ["mixed", "--key-size", "16", "--key-space-size", "100"],
                         ["txn-mixed", "--key-size", "16", "--key-space-size", "100"]):
                rc, r = bench_json("etcd://" + ep, args, ["--clients", "8", "--total", "300"])
                why = sane(r, 300)
                if why:
                    return "%s: %s" % (args[0], why)
        check("etcd/txn-put-mixed", txn_and_mixed)

        def errors():
            # an empty key: etcd refuses with INVALID_ARGUMENT ("key is not provided")
            rc, r = bench_json("etcd://" + ep, ["range", ""], ["--clients", "4", "--total", "50"])
            why = sane(r, 50, want_errors=50)
            return why or first((r["errors_by_code"] != {"INVALID_ARGUMENT": 50},
                                 "errors_by_code %r" % r["errors_by_code"]))
        check("etcd/errors-by-grpc-status", errors)

        stream_tests(ep, "etcd")

        def stream_lost():
            # etcd killed under a keep-alive run: the keep-alives in flight on
            # the lost streams and every later one fail, each counted once
            def kill():
                time.sleep(0.8)
                p.send_signal(signal.SIGKILL)
            th = threading.Thread(target=kill)
            th.start()
            try:
                rc, r = bench_json("etcd://" + ep, ["lease-keepalive", "--leases", "50"],
                                   ["--clients", "4", "--rate", "500", "--duration", "2",
                                    "--timeout-ms", "1000"])
            finally:
                th.join()
                p.wait()
            why = sane(r, want_errors=r["errors"])
            return why or first((r["ok"] < 100, "only %d ok before the kill" % r["ok"]),
                                (r["errors"] == 0, "no error after the kill"),
                                (not set(r["errors_by_code"]) <= {"UNAVAILABLE", "STREAM_ENDED",
                                                                  "DEADLINE_EXCEEDED"},
                                 "errors %r" % r["errors_by_code"]),
                                (rc != 1, "exit %d, want 1" % rc))
        check("etcd/stream-lost-counted", stream_lost)

        def dead_server():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
            rc, out, err = run(["--endpoints", "etcd://" + ep, "--total", "10", "put"])
            return None if rc == 1 and "connect" in err else "exit %d: %r" % (rc, err[-300:])
        check("etcd/unreachable", dead_server)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def etcd_watch_lost():
    """etcd killed under watch-latency: every watch ends (counted), the
    missing events are reported, exit 1."""
    p, d, ep = start_etcd()
    try:
        def kill():
            time.sleep(0.8)
            p.send_signal(signal.SIGKILL)
        th = threading.Thread(target=kill)
        th.start()
        try:
            rc, r = bench_json("etcd://" + ep, ["watch-latency", "--watchers", "10", "--streams",
                                                "2", "--put-total", "400", "--put-rate", "200"],
                               ["--timeout-ms", "1000"])
        finally:
            th.join()
            p.wait()
        return first((r["put_ok"] + r["put_errors"] != r["put_issued"] or r["put_issued"] != 400,
                      "puts %d ok + %d errors != %d issued" % (r["put_ok"], r["put_errors"],
                                                               r["put_issued"])),
                     (r["put_ok"] < 50 or r["put_errors"] == 0, "puts %d ok %d errors" % (
                         r["put_ok"], r["put_errors"])),
                     (r["ended"] != 10, "ended %d, want all 10 watches" % r["ended"]),
                     # a put whose answer the kill cut off may still have been applied
                     # and seen: at most one event per watcher for each of those
                     (r["events"] > r["expected"] + 10 * r["put_errors"],
                      "events %d > expected %d + 10 per failed put (%d)" % (
                          r["events"], r["expected"], r["put_errors"])),
                     (rc != 1, "exit %d, want 1" % rc))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def compare_three_members():
    """`ketch-bench compare --members 3`: 3-member clusters of each, tiny."""
    tmp = tempfile.mkdtemp(prefix="ketch-bench-tmp-")
    env = dict(os.environ, TMPDIR=tmp)
    try:
        rc, out, err = run(["compare", "--members", "3", "--rounds", "1", "--run-seconds", "0.3",
                            "--keys", "300", "--leases", "50", "put:4", "range-l:4", "lock:2"],
                           timeout=120, env=env)
        if rc:
            return "exit %d: %s" % (rc, err[-500:])
        if "3 members each" not in out or "| put, 4 clients |" not in out or \
                "| lock + unlock one mutex, 2 clients |" not in out:
            return "table: %r" % out[-800:]
        if "(some requests failed" in out:
            return "errors: %r" % out[-800:]
        left = os.listdir(tmp)
        return "data dirs left behind: %r" % left if left else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare():
    """`ketch-bench compare`, tiny: both servers started, loaded, alternated."""
    out_dir = tempfile.mkdtemp(prefix="ketch-bench-cmp-")
    tmp = tempfile.mkdtemp(prefix="ketch-bench-tmp-")  # its own TMPDIR: other runs may share /tmp
    env = dict(os.environ, TMPDIR=tmp)
    try:
        rc, out, err = run(["compare", "--rounds", "1", "--run-seconds", "0.3", "--keys", "500",
                            "--leases", "200", "--resource-keys", "3000", "--json", "--out-dir",
                            out_dir, "put:1", "range-s:4",
                            "lease-keepalive:4", "watch-latency:5", "watch:20", "lock:3", "put:4@300"],
                           timeout=120, env=env)
        if rc:
            return "exit %d: %s" % (rc, err[-500:])
        r = json.loads(out)
        if json.load(open(os.path.join(out_dir, "results.json"))) != r:
            return "results.json differs from stdout"
        if [x["workload"] for x in r["rows"]] != ["put:1", "range-s:4", "lease-keepalive:4",
                                                  "watch-latency:5", "watch:20", "lock:3",
                                                  "put:4@300"]:
            return "rows %r" % r["rows"]
        # open loop: both get the offered 300/s (90 requests in 0.3 s; a slow
        # last reply stretches the run), never the thousands/s of 4 closed-loop clients
        rated = r["rows"][-1]
        if not all(100 < rated[t]["rps"] < 400 for t in ("etcd", "ketch")):
            return "offered rate not held: %r" % rated
        for x in r["rows"]:
            if not (x["etcd"]["rps"] > 0 and x["ketch"]["rps"] > 0):
                return "no throughput: %r" % x
            if abs(x["ratio"] - x["ketch"]["rps"] / x["etcd"]["rps"]) > 0.01 * x["ratio"]:
                return "ratio %r" % x
            if x["etcd"]["errors"] or x["ketch"]["errors"]:
                return "errors: %r" % x
            # (a run of fewer than ~100 operations in 0.3 s — watch-latency's
            # 30 puts, etcd's ~10 lock hand-offs — may cost a server less than
            # one 10 ms clock tick of CPU: 0 is possible there)
            if x["workload"].startswith("watch-latency"):
                continue
            for t in ("etcd", "ketch"):
                if x[t]["rps"] * 0.3 >= 100 and not x[t]["server_cpu_s_per_100k"] > 0:
                    return "server CPU not measured: %r" % x
        res = r["resources"]
        if res["keys"] != 3000:
            return "resources %r" % res
        for t in ("ketch", "etcd"):
            rs = res[t]
            # a load shorter than a few 10 ms clock ticks may cost no measurable CPU
            cpu_ok = rs["load_cpu_s_per_100k"] > 0 or (rs["load_rps"] > 0 and
                                                      res["keys"] / rs["load_rps"] < 0.1)
            if not (0 < rs["restart_s"] < 60 and rs["rss_kb"] > 0 and rs["rss_restart_kb"] > 0 and
                    rs["data_dir_mb"] > 0 and rs["load_rps"] > 0 and cpu_ok):
                return "resource figures %r" % res
        if "| RSS after restart, MB" not in err or "| restart to serving, s |" not in err:
            return "resource table missing: %r" % err[-1500:]
        if "- 3-member comparisons: a separate run" not in err or "| put, 1 client |" not in err:
            return "table / 3-member note missing on stderr: %r" % err[-800:]
        for t in ("lease keep-alive, 4 clients", "watch latency, 5 watchers",
                  "watch fan-out, 20 watchers", "lock + unlock one mutex, 3 clients"):
            if "| " + t not in err:
                return "table row %r missing: %r" % (t, err[-1500:])
        if "| put, 4 clients, 300/s offered | " not in err or "p99 <= 1/10: " not in err:
            return "open-loop row missing: %r" % err[-1500:]
        if len(open(os.path.join(out_dir, "results.dat")).read().splitlines()) != 7:
            return "results.dat"
        left = os.listdir(tmp)
        return "data dirs left behind: %r" % left if left else None
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    m = Member(extra=["--log-level", "warn"])
    try:
        ketch_tests(m)
    finally:
        m.cleanup()
    etcd_tests()
    if shutil.which("etcd"):
        check("etcd/watch-stream-lost-counted", etcd_watch_lost)
    check("compare", compare)
    check("compare-3-members", compare_three_members)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        report("harness", "%s: %s" % (type(e).__name__, e))
    sys.exit(1 if failures else 0)
