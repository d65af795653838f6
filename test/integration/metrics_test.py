"""/metrics, /health, /livez, /readyz on --listen-metrics-urls (net/http.h),
scraped by a real Prometheus (Debian's `prometheus`, started here on loopback
with a generated config and a 1 s scrape interval) from a 3-member cluster:
what Prometheus' HTTP API then says about leaders, puts, fsyncs and leader
changes; `promtool check metrics` on each member's scrape; hostile HTTP
clients (a 1 MB header, a slow-loris, garbage, too many connections) are cut
while native clients and other scrapes keep being served; /health and
/readyz answer 503 on a member that lost quorum. One cluster for all cases,
in order (the last ones kill members)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from cluster_test import put_retry, status, wait_leader
from harness import BIN, Conn, Member, ServerError, free_port, run_tests
from membership_test import ctl, start_added

TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "contrib", "prometheus", "ketch-alerts.yml")
DEADLINE_S = 5  # KT_HTTP_DEADLINE_S in net/http.h

# etcd's own metric names that end in _total on a gauge: promtool's lint
# warns about them, and ketch keeps them as etcd has them (dashboards match
# on the names).
ETCD_TOTAL_GAUGES = {
    "etcd_server_proposals_committed_total", "etcd_server_proposals_applied_total",
    "etcd_debugging_mvcc_keys_total", "etcd_debugging_mvcc_watcher_total",
    "etcd_debugging_mvcc_slow_watcher_total",
    # ketch-grpc's proxy figures, as etcd's grpc-proxy declares them
    "etcd_grpc_proxy_cache_keys_total", "etcd_grpc_proxy_cache_hits_total",
    "etcd_grpc_proxy_cache_misses_total", "etcd_grpc_proxy_watchers_coalescing_total",
}

S = {}  # the shared cluster and Prometheus


def http(port, path, timeout=3):
    """(status, body text) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def setup():
    n = 3
    ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
    names = ["n%d" % i for i in range(n)]
    ic = ",".join("%s=http://127.0.0.1:%d" % (names[i], ports[i][1]) for i in range(n))
    ms = []
    for i in range(n):
        m = Member(name=names[i], port=ports[i][0], peer_port=ports[i][1], wait=False,
                   extra=["--initial-cluster", ic, "--initial-cluster-token", "metrics",
                          "--listen-metrics-urls", "http://127.0.0.1:%d" % ports[i][2]] + TIMING)
        m.mport = ports[i][2]
        ms.append(m)
    S["ms"] = ms
    for m in ms:
        m.wait_ready()
    wait_leader(ms)
    d = tempfile.mkdtemp(prefix="ketch-prom-")
    S["promdir"] = d
    # ketch-grpc in front of them, with its /metrics
    S["gport"], S["gmport"] = free_port(), free_port()
    S["bridge_log"] = open(os.path.join(d, "bridge.log"), "wb")
    S["bridge"] = subprocess.Popen(
        [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % S["gport"],
         "--endpoints", ",".join(m.endpoint for m in ms),
         "--metrics-addr", "http://127.0.0.1:%d" % S["gmport"]],
        stdout=S["bridge_log"], stderr=subprocess.STDOUT)
    # Prometheus on loopback, scraping the three members and the bridge every second.
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                "  evaluation_interval: 1s\n"
                "rule_files: ['%s']\n"
                "scrape_configs:\n  - job_name: ketch\n    static_configs:\n"
                "      - targets: [%s]\n"
                "  - job_name: ketch-grpc\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % (
                    RULES, ", ".join("'127.0.0.1:%d'" % m.mport for m in ms), S["gmport"]))
    pport = free_port()
    S["pport"] = pport
    S["prom_log"] = open(os.path.join(d, "log"), "wb")
    S["prom"] = subprocess.Popen(
        ["prometheus", "--config.file", cfg, "--storage.tsdb.path", os.path.join(d, "data"),
         "--web.listen-address", "127.0.0.1:%d" % pport, "--log.level", "warn"],
        stdout=S["prom_log"], stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if http(pport, "/-/ready", timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("prometheus not ready: " + open(os.path.join(d, "log")).read()[-2000:])


def teardown():
    p = S.get("prom")
    if p:
        p.kill()
        p.wait()
    b = S.get("bridge")
    if b:
        b.send_signal(15)
        try:
            b.wait(10)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()
        S["bridge_log"].close()
        text = open(os.path.join(S["promdir"], "bridge.log"), errors="replace").read()
        if "Sanitizer" in text or "runtime error" in text:
            print("FAIL metrics_test/ketch-grpc: sanitizer report:\n" + text[-4000:], flush=True)
            os._exit(1)
    for m in S.get("ms", []):
        m.cleanup()
    if S.get("promdir"):
        shutil.rmtree(S["promdir"], ignore_errors=True)


def query(q, by="instance"):
    """Prometheus instant query: {the `by` label: value}."""
    code, body = http(S["pport"], "/api/v1/query?query=" + urllib.parse.quote(q))
    assert code == 200, body
    r = json.loads(body)
    assert r["status"] == "success", r
    return {s["metric"].get(by, ""): float(s["value"][1]) for s in r["data"]["result"]}


def eventually(fn, timeout=15, what=""):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last[0]:
            return last[1]
        time.sleep(0.25)
    raise AssertionError("not within %ds: %s (last: %r)" % (timeout, what, last[1]))


def inst(m):
    return "127.0.0.1:%d" % m.mport


# ---- cases ----

def test_endpoints_answer_as_etcd():
    for m in S["ms"]:
        code, body = http(m.mport, "/health")
        assert code == 200 and json.loads(body) == {"health": "true", "reason": ""}, (code, body)
        assert http(m.mport, "/health?serializable=true")[0] == 200
        assert http(m.mport, "/livez") == (200, "ok")
        assert http(m.mport, "/readyz") == (200, "ok")
        code, body = http(m.mport, "/readyz?verbose")
        assert code == 200 and "[+]linearizable_read ok\n" in body and \
            body.endswith("readyz check passed\n"), body
        code, body = http(m.mport, "/readyz?verbose&exclude=linearizable_read")
        assert "[+]linearizable_read excluded: ok" in body, body
        assert http(m.mport, "/nope")[0] == 404
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % m.mport, data=b"x",
                                     method="POST")
        try:
            urllib.request.urlopen(req, timeout=3)
            raise AssertionError("POST accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 405, e.code


def test_promtool_check_metrics_clean():
    put_retry(S["ms"][0], b"pt", b"v")
    for m in S["ms"]:
        code, body = http(m.mport, "/metrics")
        assert code == 200
        for name in ("etcd_server_has_leader", "etcd_disk_wal_fsync_duration_seconds_bucket",
                     "etcd_network_peer_sent_bytes_total{To=", "process_resident_memory_bytes",
                     "etcd_server_version{server_version=", "ketch_wal_batch_entries_bucket"):
            assert name in body, name
        assert 'etcd_disk_wal_fsync_duration_seconds_bucket{le="8.192"}' in body
        assert 'etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"}' in body
        p = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=20)
        out = (p.stdout + p.stderr).decode()
        assert p.returncode in (0, 3), (p.returncode, out)  # 3: lint findings only
        for line in out.splitlines():
            assert line.split(" ")[0] in ETCD_TOTAL_GAUGES, "promtool: " + line


def test_prometheus_sees_one_leader():
    ms = S["ms"]
    eventually(lambda: (lambda r: (len(r) == 3 and set(r.values()) == {1.0}, r))(
        query("etcd_server_has_leader")), what="has_leader 1 on all three")
    r = eventually(lambda: (lambda r: (len(r) == 3, r))(query("etcd_server_is_leader")),
                   what="is_leader from all three")
    assert sorted(r.values()) == [0.0, 0.0, 1.0], r
    lead = wait_leader(ms)
    assert r[inst(lead)] == 1.0, (r, inst(lead))
    # the leader times its heartbeats' round trips to both followers
    rtt = eventually(lambda: (lambda r: (len(r) == 2 and all(v > 0 for v in r.values()), r))(
        query('etcd_network_peer_round_trip_time_seconds_count{instance="%s"}' % inst(lead),
              by="To")),
        what="round trips to both followers")
    p99 = query('histogram_quantile(0.99, rate(etcd_network_peer_round_trip_time_seconds_bucket'
                '{instance="%s"}[1m]))' % inst(lead), by="To")
    assert all(0 < v < 0.5 for v in p99.values()), (rtt, p99)
    assert query('up{job="ketch"}') == {inst(m): 1.0 for m in ms}
    eventually(lambda: (lambda r: (list(r.values()) == [1.0], r))(query('up{job="ketch-grpc"}')),
               what="ketch-grpc scraped")


def test_put_total_and_fsync_count_grow_by_the_work_done():
    ms = S["ms"]
    put_retry(ms[0], b"warm", b"v")
    time.sleep(1.5)  # a scrape after the warm-up put
    before = eventually(lambda: (lambda r: (len(r) == 3, r))(query("etcd_mvcc_put_total")))
    fs0 = query("etcd_disk_wal_fsync_duration_seconds_count")
    c = Conn(ms[1].port)
    for i in range(25):
        c.put(b"k%d" % i, b"v")
    c.close()
    want = {k: v + 25 for k, v in before.items()}
    eventually(lambda: (lambda r: (r == want, r))(query("etcd_mvcc_put_total")), timeout=15,
               what="put_total grew by 25 on every member: %r" % want)
    fs1 = query("etcd_disk_wal_fsync_duration_seconds_count")
    assert all(fs1[k] > fs0[k] for k in fs0), (fs0, fs1)
    # rate() works on it: the dashboards' fsync p99 query has a value
    r = query("histogram_quantile(0.99, sum by (le) "
              "(rate(etcd_disk_wal_fsync_duration_seconds_bucket[1m])))")
    assert r, r


def exported_names(ports):
    """The metric names the scrapes of these ports declare (# TYPE lines: a
    family may have no sample yet, as a follower's peer round trips)."""
    names = set()
    for port in ports:
        for line in http(port, "/metrics")[1].splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ")
                names |= {name + x for x in ("_bucket", "_sum", "_count")} \
                    if kind == "histogram" else {name}
    return names


def test_alert_rules_unit_tests_and_live_names():
    d = os.path.dirname(RULES)
    p = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, timeout=30)
    assert p.returncode == 0, p
    p = subprocess.run(["promtool", "test", "rules", "ketch-alerts_test.yml"], cwd=d,
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and b"SUCCESS" in p.stdout, (p.stdout + p.stderr).decode()
    # every metric the rules name is exported by a live member
    exported = exported_names([S["ms"][0].mport])
    exprs = "".join(line for line in open(RULES) if not line.lstrip().startswith("#"))
    names = set(re.findall(r"\b(etcd_[a-z_]+)\b", exprs))
    assert len(names) >= 8, names
    assert names <= exported, names - exported
    # Prometheus loaded them and evaluates them on the live series
    code, out = http(S["pport"], "/api/v1/rules")
    rules = [r for g in json.loads(out)["data"]["groups"] for r in g["rules"]]
    assert len(rules) == 11, rules
    eventually(lambda: (lambda rs: (all(r.get("health") == "ok" for r in rs), rs))(
        [r for g in json.loads(http(S["pport"], "/api/v1/rules")[1])["data"]["groups"]
         for r in g["rules"]]), what="every rule evaluated with health ok")


def test_http_on_the_client_url_beside_native_clients():
    m = S["ms"][1]
    native = Conn(m.port)  # a native client on the same port, before and after
    code, body = http(m.port, "/health")
    assert code == 200 and json.loads(body)["health"] == "true", (code, body)
    code, body = http(m.port, "/metrics")
    assert code == 200 and "etcd_server_has_leader 1" in body
    assert http(m.port, "/readyz?verbose")[0] == 200
    # garbage that looks like HTTP goes to the HTTP side and is cut there;
    # garbage that does not is a bad native frame: closed at once
    for junk, limit in ((b"GARBAGE\x00\xff\r\n\r\n", DEADLINE_S + 3),
                        (b"\xff\xff\xff\xff" + os.urandom(64), 3)):
        s = raw(m.port, junk)
        assert read_until_closed(s, limit) is not None, junk
        s.close()
    native.put(b"native-after-http", b"v")
    assert native.get_value(b"native-after-http") == b"v"
    native.close()


def test_keep_alive_on_metrics_and_client_urls():
    """HTTP/1.1 requests on one connection are answered on it (no
    "Connection: close"), on a metrics URL and on a client URL, and the
    member's ketch_http_connections counts the one connection; a request
    asking for "Connection: close" gets it."""
    import http.client
    m = S["ms"][0]
    for port in (m.mport, m.port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.connect()
        sock = c.sock
        for path in ("/health", "/metrics", "/livez", "/metrics"):
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            assert r.status == 200 and body, (port, path, r.status)
            assert r.getheader("Connection") is None, (port, path, r.getheaders())
            assert c.sock is sock, "reconnected for %s on %d" % (path, port)
        assert re.search(rb"\nketch_http_connections [1-9]", body), body[-500:]
        c.request("GET", "/health", headers={"Connection": "close"})
        r = c.getresponse()
        r.read()
        assert r.getheader("Connection") == "close", r.getheaders()
        c.close()


def test_health_nospace_alarm_and_exclude():
    mport = free_port()
    m = Member(name="q", extra=["--quota-backend-bytes", "1000000", "--listen-metrics-urls",
                                "http://127.0.0.1:%d" % mport])
    try:
        assert http(mport, "/health")[0] == 200
        c = Conn(m.port)
        for i in range(60):
            try:
                c.put(b"fill/%02d" % i, b"x" * 100000)
            except ServerError as e:
                assert e.code == 8, e  # ENOSPACE
                break
        else:
            raise AssertionError("no NOSPACE")
        c.close()
        code, body = http(mport, "/health")
        assert code == 503 and json.loads(body) == {"health": "false",
                                                    "reason": "ALARM NOSPACE"}, (code, body)
        code, body = http(mport, "/health?exclude=NOSPACE")
        assert code == 200 and json.loads(body)["health"] == "true", (code, body)
        assert http(mport, "/readyz")[0] == 200  # reads are still served
        body = http(mport, "/metrics")[1]
        size = int(re.search(r"^etcd_mvcc_db_total_size_in_bytes (\d+)$", body, re.M).group(1))
        assert "etcd_server_quota_backend_bytes 1000000\n" in body and size > 900000, size
    finally:
        m.cleanup()


def test_readyz_on_a_learner():
    ms = S["ms"]
    port, mport = free_port(), free_port()
    add = ctl(ms, "member", "add", "nl", "--peer-urls=http://127.0.0.1:%d" % port, "--learner")
    learner = start_added("nl", add.stdout,
                          extra=["--listen-metrics-urls", "http://127.0.0.1:%d" % mport])
    try:
        def not_ready():
            code, body = http(mport, "/readyz?verbose")
            return code == 503 and "[-]not_learner failed: member is a learner\n" in body, \
                (code, body)
        code, body = eventually(not_ready, what="/readyz 503 on the learner")
        assert "[+]data_corruption ok" in body and body.endswith("readyz check failed\n"), body
        assert http(mport, "/readyz?exclude=not_learner")[0] == 200
        assert http(mport, "/health")[0] == 200  # healthy, as etcd says of a learner
        assert "etcd_server_is_learner 1\n" in http(mport, "/metrics")[1]
    finally:
        learner.kill9()
        first = add.stdout.splitlines()[0].split()[1]
        ctl(ms, "member", "remove", first)
        learner.cleanup()


def test_dashboard_queries_name_only_exported_metrics():
    d = json.load(open(os.path.join(ROOT, "contrib", "grafana", "ketch-dashboard.json")))
    exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
    assert len(d["panels"]) >= 12 and len(exprs) >= 20, len(exprs)
    exported = exported_names([S["ms"][0].mport, S["gmport"]]) | {"up"}
    for e in exprs + [v["query"] for v in d["templating"]["list"] if v["type"] == "query"]:
        names = set(re.findall(r"\b((?:etcd|process|ketch|grpc)_[a-z_]+|up)\b(?=\s*[{\[),])", e))
        assert names, e
        assert names <= exported, (e, names - exported)
    # and each is valid PromQL that Prometheus evaluates on the live series
    for e in exprs:
        q = e.replace("$job", "ketch").replace("$__rate_interval", "1m")
        code, body = http(S["pport"], "/api/v1/query?query=" + urllib.parse.quote(q))
        assert code == 200 and json.loads(body)["status"] == "success", (q, body)


def etcdctl(*args):
    return subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % S["gport"]] + list(args),
                          env=dict(os.environ, ETCDCTL_API="3"), capture_output=True,
                          timeout=30)


def test_ketch_grpc_metrics_grpc_server_handled_total():
    for i in range(3):
        p = etcdctl("put", "g%d" % i, "v")
        assert p.returncode == 0, p
    assert etcdctl("get", "g0").returncode == 0
    assert etcdctl("compaction", "100000").returncode != 0  # a future revision: OutOfRange
    code, body = http(S["gmport"], "/metrics")
    assert code == 200
    p = subprocess.run(["promtool", "check", "metrics"], input=body.encode(), capture_output=True,
                       timeout=20)
    assert p.returncode in (0, 3), p  # 3: lint findings only
    for line in (p.stdout + p.stderr).decode().splitlines():
        assert line.split(" ")[0] in ETCD_TOTAL_GAUGES, "promtool: " + line
    sel = 'grpc_server_handled_total{job="ketch-grpc",grpc_service="etcdserverpb.KV",'
    eventually(lambda: (lambda r: (list(r.values()) == [3.0], r))(
        query(sel + 'grpc_method="Put",grpc_code="OK",grpc_type="unary"}')),
        what="3 Puts handled OK")
    # a scrape between the Puts and the Compact can satisfy the wait above
    eventually(lambda: (lambda r: (list(r.values()) == [1.0], r))(
        query(sel + 'grpc_method="Compact"}')), what="1 Compact handled")
    r = query('grpc_server_handled_total{job="ketch-grpc",grpc_method="Compact"}')
    assert len(r) == 1, r
    code, out = http(S["pport"], "/api/v1/query?query=" + urllib.parse.quote(
        'grpc_server_handled_total{grpc_method="Compact"}'))
    assert json.loads(out)["data"]["result"][0]["metric"]["grpc_code"] == "OutOfRange", out
    r = query('grpc_server_started_total{job="ketch-grpc",grpc_method="Range"}')
    assert list(r.values()) == [1.0], r
    # /health as etcd's grpc-proxy: a linearizable get through the cluster
    code, body = http(S["gmport"], "/health")
    assert code == 200 and json.loads(body) == {"health": "true", "reason": ""}, (code, body)
    assert http(S["gmport"], "/readyz") == (200, "ok")


def alerts():
    code, out = http(S["pport"], "/api/v1/alerts")
    return {(a["labels"]["alertname"], a["labels"].get("instance", "")): a["state"]
            for a in json.loads(out)["data"]["alerts"]}


def raw(port, data, timeout=3):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    return s


def read_until_closed(s, timeout):
    """Bytes read until the server closes (or None if it did not in time)."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return got
            got += b
    except socket.timeout:
        return None
    except ConnectionResetError:
        return got


def test_bad_http_input_is_cut_native_clients_go_on():
    m = S["ms"][0]
    # a 1 MB header: MHD answers 431 (or just closes) without reading it all
    s = socket.create_connection(("127.0.0.1", m.mport), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ")
    try:
        for _ in range(16):
            s.sendall(b"a" * 65536)
    except OSError:
        pass  # the server closed while we were sending: fine
    got = read_until_closed(s, 5)
    assert got is not None, "1 MB header: connection not closed"
    assert got == b"" or got.startswith(b"HTTP/1.1 4"), got[:100]
    s.close()
    # garbage: a malformed request line gets 400 at once; binary bytes that
    # never make a request are cut at the deadline
    s = raw(m.mport, b"garbage garbage garbage\r\n\r\n")
    got = read_until_closed(s, 2)
    assert got is not None and got.startswith(b"HTTP/1.1 400"), got
    s.close()
    s = raw(m.mport, b"\x00\x01\x02garbage\xff\xfe\r\n\r\n")
    got = read_until_closed(s, DEADLINE_S + 3)
    assert got is not None and (got == b"" or got.startswith(b"HTTP/1.1 400")), got
    s.close()
    # a slow-loris trickling a request, and too many idle connections
    loris = raw(m.mport, b"GET /metrics HTTP/1.1\r\n")
    idle = [raw(m.mport, b"") for _ in range(70)]
    t0 = time.time()
    closed_at = None
    served = 0
    while time.time() - t0 < DEADLINE_S + 4:
        try:
            loris.sendall(b"X")
        except OSError:
            closed_at = time.time() - t0
            break
        # the member serves native clients meanwhile
        put_retry(m, b"during-loris", b"%d" % served)
        served += 1
        loris.settimeout(0.3)
        try:
            if loris.recv(100) == b"":
                closed_at = time.time() - t0
                break
        except socket.timeout:
            pass
        except OSError:
            closed_at = time.time() - t0
            break
    assert closed_at is not None and closed_at <= DEADLINE_S + 2.5, closed_at
    assert served >= 3, served
    loris.close()
    # the connections beyond the limit were closed at once, the rest by the deadline
    n_open = 0
    for s in idle:
        s.settimeout(0.01)
        try:
            n_open += s.recv(1) != b""
        except socket.timeout:
            n_open += 1
        except OSError:
            pass
        s.close()
    assert n_open <= 64, n_open
    # and a normal scrape is served right away
    t = time.time()
    assert http(m.mport, "/metrics")[0] == 200
    assert time.time() - t < 1
    assert m.proc.poll() is None


def test_health_is_a_linearizable_read():
    """A follower whose leader stopped answering still 'knows' it for an
    election timeout: /health does a read through raft, so it says false
    (after at most ~1 s) instead of trusting that; ?serializable=true does not."""
    ms = S["ms"]
    lead = wait_leader(ms)
    f = next(m for m in ms if m is not lead)
    assert http(f.mport, "/health")[0] == 200
    lead.proc.send_signal(signal.SIGSTOP)
    try:
        t = time.time()
        code, body = http(f.mport, "/health", timeout=5)
        took = time.time() - t
        assert code == 503, (code, body, took)
        assert took < 2.0, took
        reason = json.loads(body)["reason"]
        assert reason.startswith("QGET ERROR:") or reason == "RAFT NO LEADER", body
    finally:
        lead.proc.send_signal(signal.SIGCONT)
    wait_leader(ms, timeout=15)
    eventually(lambda: (lambda r: (r[0] == 200, r))(http(f.mport, "/health")),
               what="healthy again")


def test_leader_changes_seen_after_leader_killed_and_health_without_quorum():
    ms = S["ms"]
    lead = wait_leader(ms)
    survivors = [m for m in ms if m is not lead]
    # (the bad-input case filled the connection limit for a while: its scrapes failed)
    before = eventually(lambda: (lambda r: (len(r) == 3, r))(
        query("etcd_server_leader_changes_seen_total")), what="all three scraped again")
    lead.kill9()
    wait_leader(survivors, timeout=15)
    eventually(lambda: (lambda r: (all(r.get(inst(m), 0) > before[inst(m)] for m in survivors),
                                   r))(query("etcd_server_leader_changes_seen_total")),
               what="leader_changes_seen_total rose on both survivors")
    put_retry(survivors[0], b"after", b"v")
    # now the last one alone: no quorum -> 503
    survivors[1].kill9()
    last = survivors[0]

    def unhealthy():
        code, body = http(last.mport, "/health")
        return code == 503, (code, body)
    code, body = eventually(unhealthy, timeout=10, what="/health 503 without quorum")
    assert json.loads(body)["health"] == "false", body
    reason = json.loads(body)["reason"]
    assert reason == "RAFT NO LEADER" or reason.startswith("QGET ERROR:"), body
    code, body = http(last.mport, "/readyz")
    assert code == 503 and "[-]linearizable_read failed" in body and \
        body.rstrip().endswith("readyz check failed"), (code, body)
    assert http(last.mport, "/livez") == (200, "ok")
    assert query("etcd_server_has_leader").get(inst(last)) is not None
    eventually(lambda: (lambda r: (r.get(inst(last)) == 0.0, r))(
        query("etcd_server_has_leader")), what="Prometheus sees has_leader 0")
    assert status(last) is not None  # the native port still answers
    # ketch-grpc in front of the cluster says so too (its read gets no answer)
    code, body = http(S["gmport"], "/health", timeout=5)
    assert code == 503 and json.loads(body)["reason"].startswith("QGET ERROR:"), (code, body)
    # the shipped rules see it: etcdNoLeader (for: 1m) is pending for that member,
    # and etcdInsufficientMembers for the cluster
    eventually(lambda: (lambda a: (a.get(("etcdNoLeader", inst(last))) == "pending" and
                                   a.get(("etcdInsufficientMembers", "")) == "pending", a))(
        alerts()), what="etcdNoLeader and etcdInsufficientMembers pending")


if __name__ == "__main__":
    try:
        setup()
        run_tests([
            test_endpoints_answer_as_etcd,
            test_promtool_check_metrics_clean,
            test_prometheus_sees_one_leader,
            test_put_total_and_fsync_count_grow_by_the_work_done,
            test_alert_rules_unit_tests_and_live_names,
            test_ketch_grpc_metrics_grpc_server_handled_total,
            test_dashboard_queries_name_only_exported_metrics,
            test_bad_http_input_is_cut_native_clients_go_on,
            test_http_on_the_client_url_beside_native_clients,
            test_keep_alive_on_metrics_and_client_urls,
            test_health_nospace_alarm_and_exclude,
            test_readyz_on_a_learner,
            test_health_is_a_linearizable_read,
            test_leader_changes_seen_after_leader_killed_and_health_without_quorum,
        ])
    finally:
        teardown()
