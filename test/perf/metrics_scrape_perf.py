"""What a Prometheus-style scraper costs the member (issue 18; run by hand:
/usr/bin/python3 test/perf/metrics_scrape_perf.py [SECONDS] [ROUNDS]).

One ketch member on loopback with --listen-metrics-urls. Per round,
alternating within the round (without the scraper first in even rounds,
with it first in odd ones, so that drift over the run falls on both
sides): ketch-bench put at 64 clients (make bench's put:64) and at 1 client
for SECONDS (default 3) each, once without and once with a scraper that
GETs /metrics every second on one kept-alive connection (what Prometheus
does). Reports ops/s and p50 per side (ranges over the rounds), the ratio
with/without of the summed throughput and the median of the rounds' ratios,
and what one scrape costs: its size, the client's time per scrape, and the
member's loop time per scrape over http and over https
(ketch_state_thread_busy_seconds_total before and after 100 scrapes of an
idle member, less its idle share).

Bounded: ROUNDS (default 4) x 4 runs x SECONDS.
"""
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import tlscerts  # noqa: E402
from harness import BIN, free_port  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
TMP = tempfile.mkdtemp(prefix="ketch-scrape-perf-")


class Scraper(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.times, self.sizes = port, threading.Event(), [], []

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        while not self.stop.is_set():
            t = time.perf_counter()
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read()
            assert r.status == 200
            self.times.append(time.perf_counter() - t)
            self.sizes.append(len(body))
            self.stop.wait(1.0)
        c.close()


def bench(port, clients):
    p = subprocess.run([os.path.join(BIN, "ketch-bench"), "--endpoints", "127.0.0.1:%d" % port,
                        "--conns", str(clients), "--clients", str(clients), "--duration",
                        str(SECONDS), "--json", "put", "--key-space-size", "10000"],
                       capture_output=True, text=True, timeout=SECONDS + 60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["errors"] == 0, r
    return r["rps"], r["p50_ms"]


def busy(mport, c=None):
    own = c is None
    if own:
        c = http.client.HTTPConnection("127.0.0.1", mport, timeout=5)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    if own:
        c.close()
    return float(re.search(r"\nketch_state_thread_busy_seconds_total (\S+)", body).group(1))


def loop_time_per_scrape(mport, conn):
    """The member's loop time per scrape on conn (kept alive), less the idle
    loop's own share over the same time."""
    t0, b0 = time.time(), busy(mport)
    time.sleep(1.0)
    idle = (busy(mport) - b0) / (time.time() - t0)
    t0, b0 = time.time(), busy(mport)
    for _ in range(100):
        busy(mport, conn)
    t1, b1 = time.time(), busy(mport)
    return ((b1 - b0) - idle * (t1 - t0)) / 101


def main():
    port, peer, mport, sport = free_port(), free_port(), free_port(), free_port()
    C = tlscerts.make(TMP)
    log = open(os.path.join(TMP, "ketch.log"), "wb")
    m = subprocess.Popen([os.path.join(BIN, "ketch"), "--name", "s0", "--data-dir",
                          os.path.join(TMP, "d"), "--listen-client-urls",
                          "http://127.0.0.1:%d" % port, "--listen-peer-urls",
                          "http://127.0.0.1:%d" % peer, "--listen-metrics-urls",
                          "http://127.0.0.1:%d,https://127.0.0.1:%d" % (mport, sport),
                          "--cert-file", C["server"], "--key-file", C["server-key"]],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        while True:
            try:
                busy(mport)
                break
            except (OSError, AttributeError):
                assert time.time() < deadline and m.poll() is None, "ketch did not start"
                time.sleep(0.1)
        bench(port, 64)  # warm-up
        per_scrape = loop_time_per_scrape(
            mport, http.client.HTTPConnection("127.0.0.1", mport, timeout=5))
        per_scrape_tls = loop_time_per_scrape(mport, http.client.HTTPSConnection(
            "127.0.0.1", sport, timeout=5, context=ssl.create_default_context(cafile=C["ca"])))
        res = {(w, s): [] for w in (64, 1) for s in (False, True)}
        sizes, times = [], []
        for r in range(ROUNDS):
            for clients in (64, 1):
                for scrape in ((False, True) if r % 2 == 0 else (True, False)):
                    sc = None
                    if scrape:
                        sc = Scraper(mport)
                        sc.start()
                    res[(clients, scrape)].append(bench(port, clients))
                    if sc:
                        sc.stop.set()
                        sc.join(10)
                        sizes += sc.sizes
                        times += sc.times
        print("ketch-bench put, %d rounds of %.0f s per side, alternating; scraper: GET /metrics "
              "every 1 s on one kept-alive connection" % (ROUNDS, SECONDS))
        print("| clients | ops/s without | ops/s with | with/without: sums | pairs' median "
              "(range) | p50 without | p50 with |")
        print("|---|---|---|---|---|---|---|")

        def rng(xs, f):
            return "%s-%s" % (f % min(xs), f % max(xs))
        for clients in (64, 1):
            a, b = res[(clients, False)], res[(clients, True)]
            ratios = sorted(y[0] / x[0] for x, y in zip(a, b))
            print("| %d | %s | %s | %.1f%% | %.1f%% (%.0f-%.0f%%) | %s ms | %s ms |" % (
                clients, rng([x[0] for x in a], "%.0f"), rng([x[0] for x in b], "%.0f"),
                100.0 * sum(x[0] for x in b) / sum(x[0] for x in a),
                100.0 * ratios[len(ratios) // 2], 100.0 * ratios[0], 100.0 * ratios[-1],
                rng([x[1] for x in a], "%.3f"), rng([x[1] for x in b], "%.3f")))
            print("  per round (without/with): %s" % ", ".join(
                "%.0f/%.0f" % (x[0], y[0]) for x, y in zip(a, b)))
        print("scrapes: %d, %.1f KB each, %.2f ms each at the client (median %.2f ms)" % (
            len(times), sum(sizes) / max(1, len(sizes)) / 1024,
            1000 * sum(times) / max(1, len(times)),
            1000 * sorted(times)[len(times) // 2] if times else 0))
        print("member loop time per scrape (idle member, kept-alive connection): http %.0f us, "
              "https %.0f us, i.e. %.3f%% / %.3f%% of the loop at one scrape a second" % (
                  per_scrape * 1e6, per_scrape_tls * 1e6, per_scrape * 100,
                  per_scrape_tls * 100))
    finally:
        m.terminate()
        m.wait(10)
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
