"""test/integration/discovery_test.py — bootstrap without --initial-cluster:
DNS SRV records (--discovery-srv) served by a real dnsmasq on loopback.

dnsmasq (Debian's) runs in the foreground on 127.0.0.1 and a free high port
with no system configuration (--conf-file=/dev/null --no-resolv --no-hosts);
the zone is given with --srv-host / --host-record, and --local makes it
answer for its domains alone. Members get it with --dns-servers.

Cases (one SRV cluster shared):
  srv_three_members   3 members named in _ketch-server._tcp.ketch.test start
                      with --discovery-srv and form one cluster (member list
                      through ketchctl shows the 3, a put on one is read on
                      another)
  srv_not_in_records  a 4th member whose peer URL is in no record exits
                      non-zero with "cannot find local member in SRV records"
  srv_ketchctl        ketchctl --discovery-srv finds the client endpoints
                      (_ketch-client._tcp) and endpoint health is healthy
  srv_libketch        ketch_srv_endpoints / ketch_open_srv (srv_client.c):
                      the list by priority then weight, a get, ENOTFOUND
  srv_etcd_names      a member reads etcd's names (_etcd-server._tcp) with
                      --discovery-srv-etcd-names and starts
  srv_gateway         ketch gateway --discovery-srv proxies to the client records
  srv_gateway_priority the gateway uses the lowest SRV priority, weighted
                      round robin within it, and a higher one when it fails
  srv_gateway_refresh the gateway looks the records up again when their TTL
                      passes: new targets are used, removed ones no longer
  srv_restart         a restarted member uses its data dir (the DNS server is
                      stopped by then)

and through a discovery service (--discovery-endpoints, --discovery-token):
a 1-member ketch is the service.

  disc_three_members  `ketchctl discovery new --size 3` prints a token; 3
                      members started with it form one cluster (member list
                      shows 3, endpoint health --cluster all healthy)
  disc_cluster_full   a 4th member with the token exits non-zero with
                      "discovery: cluster is full"
  disc_size_missing   a token without a size key: "discovery: size key not found"
  disc_duplicate_id   a second member with a registered name (the same id)
                      and another URL: "discovery: found duplicate id"
  disc_service_down   the service is stopped when a member starts and back
                      3 s later: the member retries and starts
  disc_tls_auth       the service over TLS with client certificates and auth
                      enabled: a wrong --discovery-password fails with
                      "authentication failed", the right one bootstraps

Bounded: every process has a timeout; the file takes ~25 s.
Env: KETCH_BIN = the bin dir. Prints "ok NAME" / "FAIL NAME: why" per case.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN, Member, free_port, run_tests  # noqa: E402

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"


class Dns:
    """dnsmasq in the foreground with the given --srv-host / --host-record."""

    def __init__(self, records, port=None):
        self.port = port or free_port()
        self.log_path = os.path.join(tempfile.gettempdir(), "ketch-dns-%d-%d.log" %
                                     (os.getpid(), self.port))
        args = [DNSMASQ, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                "--no-hosts", "--listen-address=127.0.0.1", "--bind-interfaces",
                "--port=%d" % self.port, "--local=/ketch.test/", "--local=/etcd.test/", "--local=/gw.test/",
                "--local=/prio.test/", "--local=/fb.test/",
                "--log-queries", "--log-facility=-", "--user=root", "--group=root",
                "--pid-file="] + records
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        time.sleep(0.3)
        if self.proc.poll() is not None:
            raise RuntimeError("dnsmasq exited: " + open(self.log_path).read()[-2000:])
        self.server = "127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def ketchctl(*args, timeout=15):
    p = subprocess.run([os.path.join(BIN, "ketchctl")] + list(args), capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


NAMES = ["m1.ketch.test", "m2.ketch.test", "m3.ketch.test"]
ENV = {}


def setup():
    peers = [free_port() for _ in NAMES]
    clients = [free_port() for _ in NAMES]
    e1_peer, e1_client = free_port(), free_port()
    recs = []
    for n, pp, cp in zip(NAMES, peers, clients):
        recs += ["--host-record=%s,127.0.0.1" % n,
                 "--srv-host=_ketch-server._tcp.ketch.test,%s,%d,0,10" % (n, pp),
                 "--srv-host=_ketch-client._tcp.ketch.test,%s,%d,0,10" % (n, cp)]
    # prio.test: m1 at priority 10, m2 and m3 at 0 weighted 30:10;
    # fb.test: priority 0 is a port nothing listens on, priority 10 is m1.
    recs += ["--srv-host=_ketch-client._tcp.prio.test,m1.ketch.test,%d,10,10" % clients[0],
             "--srv-host=_ketch-client._tcp.prio.test,m2.ketch.test,%d,0,30" % clients[1],
             "--srv-host=_ketch-client._tcp.prio.test,m3.ketch.test,%d,0,10" % clients[2],
             "--srv-host=_ketch-client._tcp.fb.test,m2.ketch.test,%d,0,10" % free_port(),
             "--srv-host=_ketch-client._tcp.fb.test,m1.ketch.test,%d,10,10" % clients[0]]
    recs += ["--host-record=e1.etcd.test,127.0.0.1",
             "--srv-host=_etcd-server._tcp.etcd.test,e1.etcd.test,%d,0,10" % e1_peer]
    dns = Dns(recs)
    ENV.update(dns=dns, peers=peers, clients=clients, e1=(e1_peer, e1_client), members=[])
    srv = ["--discovery-srv", "ketch.test", "--dns-servers", dns.server,
           "--heartbeat-interval", "50", "--election-timeout", "500"]
    ms = [Member(name=n, port=cp, peer_port=pp, extra=srv, wait=False)
          for n, pp, cp in zip(NAMES, peers, clients)]
    ENV["members"] = ms
    for m in ms:
        m.wait_ready(15)


def test_srv_three_members():
    ms = ENV["members"]
    deadline = time.time() + 15
    while True:
        rc, out, err = ketchctl("--endpoints", ms[0].endpoint, "put", "k", "v")
        if rc == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert rc == 0 and out.strip() == "OK", (rc, out, err, ms[0].logtext()[-1500:])
    rc, out, err = ketchctl("--endpoints", ms[2].endpoint, "get", "k")
    assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
    rc, out, err = ketchctl("--endpoints", ms[1].endpoint, "member", "list")
    assert rc == 0, (rc, out, err)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 3, out
    for n, pp in zip(NAMES, ENV["peers"]):
        assert any(", %s, http://127.0.0.1:%d" % (n, pp) in ln for ln in lines), (n, out)
    assert "initial cluster from SRV" in ms[0].logtext()


def test_srv_not_in_records():
    dns = ENV["dns"]
    m = Member(name="m4.ketch.test", extra=["--discovery-srv", "ketch.test", "--dns-servers",
                                           dns.server], wait=False)
    try:
        rc, log = m.run_to_exit(15)
        assert rc not in (0, None), (rc, log[-1500:])
        assert "cannot find local member in SRV records" in log, log[-1500:]
    finally:
        m.cleanup()


def test_srv_ketchctl():
    dns = ENV["dns"]
    rc, out, err = ketchctl("--discovery-srv", "ketch.test", "--dns-servers", dns.server,
                            "endpoint", "health")
    assert rc == 0, (rc, out, err)
    for cp in ENV["clients"]:
        assert "http://127.0.0.1:%d is healthy" % cp in out + err, (out, err)
    rc, out, err = ketchctl("--discovery-srv", "ketch.test", "--dns-servers", dns.server,
                            "get", "k")
    assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
    # A domain with no client records: a clear error, non-zero.
    rc, out, err = ketchctl("--discovery-srv", "etcd.test", "--dns-servers", dns.server, "get", "k")
    assert rc != 0 and "cannot find any client endpoint in SRV records" in err, (rc, out, err)


SRV_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                          os.environ.get("O", "build"), "test", "integration", "srv_client")


def test_srv_libketch():
    """libketch's ketch_srv_endpoints / ketch_open_srv (srv_client.c)."""
    dns = ENV["dns"]
    run = lambda *a: subprocess.run([SRV_CLIENT] + list(a), capture_output=True, text=True,  # noqa
                                    timeout=15)
    p = run("ketch.test", dns.server, "endpoints")
    assert p.returncode == 0, (p.stdout, p.stderr)
    got = p.stdout.split()[1].split(",")
    assert sorted(got) == sorted("http://127.0.0.1:%d" % cp for cp in ENV["clients"]), got
    p = run("prio.test", dns.server, "endpoints")  # priority 0 by weight, then priority 10
    c = ENV["clients"]
    assert p.stdout.split()[1].split(",") == ["http://127.0.0.1:%d" % x for x in
                                              (c[1], c[2], c[0])], p.stdout
    p = run("ketch.test", dns.server, "get", "k")
    assert p.returncode == 0 and p.stdout.strip() == "value v", (p.stdout, p.stderr)
    p = run("etcd.test", dns.server, "get", "k")
    assert p.returncode == 2 and p.stdout.startswith("error ENOTFOUND"), p.stdout


def test_srv_libketch_again():
    """A ketch_open_srv handle whose endpoints all fail looks the records up
    again and uses the new targets: the records first name a throwaway
    gateway in front of m1; they are changed to name m2, the gateway is
    killed, and the same handle's next get is served by m2."""
    c = ENV["clients"]
    gport = free_port()
    gw = subprocess.Popen([os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                           "127.0.0.1:%d" % gport, "--endpoints", "127.0.0.1:%d" % c[0]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec = lambda port: ["--host-record=m1.ketch.test,127.0.0.1",  # noqa
                        "--srv-host=_ketch-client._tcp.gw.test,m1.ketch.test,%d,0,10" % port]
    dns3 = Dns(rec(gport))
    cl = None
    try:
        cl = subprocess.Popen([SRV_CLIENT, "gw.test", dns3.server, "again", "k"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = cl.stdout.readline().split()
        assert first == ["value", "v", "127.0.0.1:%d" % gport], first
        dns3.stop()
        dns3 = Dns(rec(c[1]), port=dns3.port)
        gw.kill()
        gw.wait(5)
        cl.stdin.write("\n")
        cl.stdin.flush()
        out, _ = cl.communicate(timeout=15)
        assert cl.returncode == 0 and out.split() == ["value", "v", "127.0.0.1:%d" % c[1]], \
            (cl.returncode, out)
    finally:
        if cl and cl.poll() is None:
            cl.kill()
            cl.wait()
        if gw.poll() is None:
            gw.kill()
            gw.wait()
        dns3.stop()


def test_srv_etcd_names():
    dns = ENV["dns"]
    pp, cp = ENV["e1"]
    args = ["--discovery-srv", "etcd.test", "--dns-servers", dns.server]
    # Without the flag ketch's names are read: there are none in etcd.test.
    m = Member(name="e1.etcd.test", port=cp, peer_port=pp, extra=args, wait=False)
    try:
        rc, log = m.run_to_exit(15)
        assert rc not in (0, None) and "no SRV records" in log, (rc, log[-1500:])
    finally:
        m.cleanup()
    m = Member(name="e1.etcd.test", port=cp, peer_port=pp,
               extra=args + ["--discovery-srv-etcd-names"], wait=False)
    try:
        m.wait_ready(15)
        rc, out, err = ketchctl("--endpoints", m.endpoint, "put", "a", "b")
        deadline = time.time() + 10
        while rc != 0 and time.time() < deadline:
            time.sleep(0.2)
            rc, out, err = ketchctl("--endpoints", m.endpoint, "put", "a", "b")
        assert rc == 0, (rc, out, err, m.logtext()[-1500:])
        rc, out, err = ketchctl("--endpoints", m.endpoint, "member", "list")
        assert rc == 0 and "e1.etcd.test, http://127.0.0.1:%d" % pp in out, (out, err)
    finally:
        m.cleanup()


def test_srv_gateway():
    """ketch gateway --discovery-srv reads _ketch-client._tcp and proxies to it."""
    dns = ENV["dns"]
    port = free_port()
    log_path = os.path.join(tempfile.gettempdir(), "ketch-dgw-%d.log" % os.getpid())
    log = open(log_path, "wb")
    gw = subprocess.Popen([os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                           "127.0.0.1:%d" % port, "--discovery-srv", "ketch.test",
                           "--dns-servers", dns.server], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 10
        while True:
            rc, out, err = ketchctl("--endpoints", "127.0.0.1:%d" % port, "get", "k")
            if rc == 0 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
        text = open(log_path).read()
        for n, cp in zip(NAMES, ENV["clients"]):
            assert "endpoint %s:%d (127.0.0.1) added from SRV" % (n, cp) in text, text
    finally:
        gw.terminate()
        gw.wait(10)
        log.close()
        os.unlink(log_path)


def gateway(domain, dns, log_path):
    port = free_port()
    log = open(log_path, "wb")
    p = subprocess.Popen([os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                          "127.0.0.1:%d" % port, "--discovery-srv", domain,
                          "--dns-servers", dns.server, "--log-level", "debug"],
                         stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return p, port


def test_srv_gateway_priority():
    """Lowest SRV priority first, weighted within it; higher ones only when
    the lower ones fail."""
    dns = ENV["dns"]
    log_path = os.path.join(tempfile.gettempdir(), "ketch-dgw3-%d.log" % os.getpid())
    gw, port = gateway("prio.test", dns, log_path)
    c = ENV["clients"]
    try:
        for _ in range(8):
            rc, out, err = ketchctl("--endpoints", "127.0.0.1:%d" % port, "get", "k")
            assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
        used = re.findall(r"endpoint=m(\d)\.ketch\.test:\d+ connected", open(log_path).read())
        assert used.count("2") == 6 and used.count("3") == 2 and "1" not in used, used
    finally:
        gw.terminate()
        gw.wait(10)
    gw, port = gateway("fb.test", dns, log_path)
    try:
        rc, out, err = ketchctl("--endpoints", "127.0.0.1:%d" % port, "get", "k")
        assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
        text = open(log_path).read()
        assert re.search(r"endpoint m2\.ketch\.test:\d+ failed", text), text
        assert "endpoint=m1.ketch.test:%d connected" % c[0] in text, text
    finally:
        gw.terminate()
        gw.wait(10)
        os.unlink(log_path)


def test_srv_gateway_refresh():
    """The gateway looks the records up again (here every second: dnsmasq's
    local TTL is 0) and uses targets that appear; removed ones are not picked."""
    one = ["--host-record=m1.ketch.test,127.0.0.1",
           "--srv-host=_ketch-client._tcp.gw.test,m1.ketch.test,%d,0,10" % ENV["clients"][0]]
    dns2 = Dns(one)
    port = free_port()
    log_path = os.path.join(tempfile.gettempdir(), "ketch-dgw2-%d.log" % os.getpid())
    log = open(log_path, "wb")
    gw = subprocess.Popen([os.path.join(BIN, "ketch"), "gateway", "start", "--listen-addr",
                           "127.0.0.1:%d" % port, "--discovery-srv", "gw.test",
                           "--dns-servers", dns2.server, "--log-level", "debug"],
                          stdout=log, stderr=subprocess.STDOUT)
    ep = ["m%d.ketch.test:%d" % (i + 1, cp) for i, cp in enumerate(ENV["clients"])]
    try:
        time.sleep(0.5)
        text = open(log_path).read()
        assert "endpoint %s (127.0.0.1) added" % ep[0] in text and ep[1] not in text, text
        dns2.stop()
        recs = []
        for n, cp in zip(NAMES[1:], ENV["clients"][1:]):
            recs += ["--host-record=%s,127.0.0.1" % n,
                     "--srv-host=_ketch-client._tcp.gw.test,%s,%d,0,10" % (n, cp)]
        dns2 = Dns(recs, port=dns2.port)
        deadline = time.time() + 10
        while "endpoint %s removed" % ep[0] not in open(log_path).read():
            assert time.time() < deadline, open(log_path).read()[-2000:]
            time.sleep(0.2)
        text = open(log_path).read()
        assert "endpoint %s (127.0.0.1) added" % ep[1] in text, text
        assert "endpoint %s (127.0.0.1) added" % ep[2] in text, text
        mark = len(text)
        for _ in range(4):
            rc, out, err = ketchctl("--endpoints", "127.0.0.1:%d" % port, "get", "k")
            assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)
        used = set(re.findall(r"endpoint=(\S+) connected", open(log_path).read()[mark:]))
        assert used == {"127.0.0.1:%d" % cp for cp in ENV["clients"][1:]} or \
            used == set(ep[1:]), used
    finally:
        gw.terminate()
        gw.wait(10)
        log.close()
        os.unlink(log_path)
        dns2.stop()


def test_srv_restart():
    ENV["dns"].stop()
    m = ENV["members"][1]
    m.stop()
    m.start(wait=False)
    m.wait_ready(15)
    assert "ignoring discovery" in m.logtext()
    deadline = time.time() + 15
    while True:
        rc, out, err = ketchctl("--endpoints", m.endpoint, "get", "k")
        if (rc == 0 and out.split() == ["k", "v"]) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert rc == 0 and out.split() == ["k", "v"], (rc, out, err)


DISC = {}


def disc_member(name, token, **kw):
    svc = DISC["svc"]
    return Member(name=name, wait=False,
                  extra=["--discovery-endpoints", svc.endpoint, "--discovery-token", token,
                         "--heartbeat-interval", "50", "--election-timeout", "500"], **kw)


def new_token(size):
    rc, out, err = ketchctl("--endpoints", DISC["svc"].endpoint, "discovery", "new", "--size",
                            str(size))
    assert rc == 0 and len(out.strip()) == 32, (rc, out, err)
    return out.strip()


def test_disc_three_members():
    DISC["svc"] = Member(name="svc", peer_port=free_port())
    token = new_token(3)
    rc, out, err = ketchctl("--endpoints", DISC["svc"].endpoint, "get",
                            "/_ketch/registry/%s/_config/size" % token)
    assert rc == 0 and out.split()[1] == "3", (rc, out, err)
    ms = [disc_member("d%d" % i, token) for i in range(3)]
    DISC["members"] = ms
    DISC["token"] = token
    for m in ms:
        m.wait_ready(20)
    rc, out, err = ketchctl("--endpoints", ms[0].endpoint, "member", "list")
    assert rc == 0 and len(out.strip().splitlines()) == 3, (rc, out, err)
    for m in ms:
        assert ", %s, " % m.name in out, out
    deadline = time.time() + 15
    while True:
        rc, out, err = ketchctl("--endpoints", ms[1].endpoint, "endpoint", "health", "--cluster")
        if (rc == 0 and out.count("is healthy") + err.count("is healthy") == 3) or \
                time.time() > deadline:
            break
        time.sleep(0.3)
    assert rc == 0 and (out + err).count("is healthy") == 3, (rc, out, err)
    rc, out, err = ketchctl("--endpoints", DISC["svc"].endpoint, "get", "--prefix",
                            "/_ketch/registry/%s/members/" % token)
    assert rc == 0 and len(out.strip().splitlines()) == 6, (rc, out, err)
    assert "initial cluster from discovery" in ms[0].logtext()


def test_disc_cluster_full():
    m = disc_member("d3", DISC["token"])
    try:
        rc, log = m.run_to_exit(15)
        assert rc not in (0, None) and "discovery: cluster is full" in log, (rc, log[-1500:])
    finally:
        m.cleanup()


def test_disc_size_missing():
    m = disc_member("x0", "no-such-token")
    try:
        rc, log = m.run_to_exit(15)
        assert rc not in (0, None) and "discovery: size key not found" in log, (rc, log[-1500:])
    finally:
        m.cleanup()


def test_disc_duplicate_id():
    token = new_token(2)
    a = disc_member("same", token)
    b = None
    try:
        deadline = time.time() + 10
        while "registered" not in a.logtext() and time.time() < deadline:
            time.sleep(0.1)
        assert "1 of 2 members registered; waiting" in a.logtext(), a.logtext()[-1500:]
        b = disc_member("same", token)
        rc, log = b.run_to_exit(15)
        assert rc not in (0, None) and "discovery: found duplicate id" in log, (rc, log[-1500:])
        assert a.proc.poll() is None  # still waiting for its second member
    finally:
        a.cleanup()
        if b:
            b.cleanup()


def test_disc_service_down():
    token = new_token(1)
    svc = DISC["svc"]
    svc.stop()
    m = disc_member("late", token)
    try:
        time.sleep(3)
        assert m.proc.poll() is None, m.logtext()[-1500:]
        assert "cannot reach the discovery service" in m.logtext(), m.logtext()[-1500:]
        svc.start()
        m.wait_ready(20)
        rc, out, err = ketchctl("--endpoints", m.endpoint, "put", "x", "y")
        deadline = time.time() + 10
        while rc != 0 and time.time() < deadline:
            time.sleep(0.2)
            rc, out, err = ketchctl("--endpoints", m.endpoint, "put", "x", "y")
        assert rc == 0, (rc, out, err)
    finally:
        m.cleanup()


def test_disc_tls_auth():
    """The discovery service over TLS with client certificates and auth on:
    members pass --discovery-cacert/-cert/-key and --discovery-user/-password."""
    import tlscerts
    tmp = tempfile.mkdtemp(prefix="ketch-disc-tls-")
    certs = tlscerts.make(tmp)
    cport = free_port()
    url = "https://127.0.0.1:%d" % cport
    svc = Member(name="tsvc", port=cport, wait=False,
                 extra=["--listen-client-urls", url, "--advertise-client-urls", url,
                        "--cert-file", certs["server"], "--key-file", certs["server-key"],
                        "--client-cert-auth", "--trusted-ca-file", certs["ca"]])
    tls = ["--cacert", certs["ca"], "--cert", certs["client"], "--key", certs["client-key"],
           "--endpoints", url]
    m = None
    try:
        deadline = time.time() + 15
        while ketchctl(*tls, "user", "add", "root:rootpw")[0] != 0:
            assert time.time() < deadline and svc.proc.poll() is None, svc.logtext()[-1500:]
            time.sleep(0.2)
        rc, out, err = ketchctl(*tls, "auth", "enable")
        assert rc == 0, (rc, out, err)
        rc, out, err = ketchctl(*tls, "--user", "root:rootpw", "discovery", "new", "--size", "1")
        assert rc == 0, (rc, out, err)
        token = out.strip()
        base = ["--discovery-endpoints", url, "--discovery-token", token,
                "--discovery-cacert", certs["ca"], "--discovery-cert", certs["client"],
                "--discovery-key", certs["client-key"]]
        # Without the password the service refuses: a clear error, not a retry loop.
        bad = Member(name="t1", wait=False, extra=base + ["--discovery-user", "root",
                                                          "--discovery-password", "wrong"])
        try:
            rc, log = bad.run_to_exit(15)
            assert rc not in (0, None) and "authentication failed" in log, (rc, log[-1500:])
        finally:
            bad.cleanup()
        m = Member(name="t1", wait=False, extra=base + ["--discovery-user", "root",
                                                        "--discovery-password", "rootpw"])
        m.wait_ready(20)
        rc, out, err = ketchctl("--endpoints", m.endpoint, "member", "list")
        assert rc == 0 and ", t1, " in out, (rc, out, err)
    finally:
        if m:
            m.cleanup()
        svc.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    try:
        setup()
    except Exception:
        for m in ENV.get("members", []):
            m.cleanup()
        if "dns" in ENV:
            ENV["dns"].stop()
        raise
    try:
        run_tests([test_srv_three_members, test_srv_not_in_records, test_srv_ketchctl,
                   test_srv_libketch, test_srv_libketch_again, test_srv_etcd_names, test_srv_gateway, test_srv_gateway_priority,
                   test_srv_gateway_refresh,
                   test_srv_restart, test_disc_three_members,
                   test_disc_cluster_full, test_disc_size_missing, test_disc_duplicate_id,
                   test_disc_service_down, test_disc_tls_auth])
    finally:
        for m in ENV["members"] + DISC.get("members", []) + ([DISC["svc"]] if "svc" in DISC else []):
            m.cleanup()
        ENV["dns"].stop()


if __name__ == "__main__":
    main()
