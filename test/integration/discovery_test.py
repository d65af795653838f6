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
  srv_etcd_names      a member reads etcd's names (_etcd-server._tcp) with
                      --discovery-srv-etcd-names and starts
  srv_restart         a restarted member uses its data dir (the DNS server is
                      stopped by then)

Bounded: every process has a timeout; the file takes ~15 s.
Env: KETCH_BIN = the bin dir. Prints "ok NAME" / "FAIL NAME: why" per case.
"""
import os
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

    def __init__(self, records):
        self.port = free_port()
        self.log_path = os.path.join(tempfile.gettempdir(), "ketch-dns-%d-%d.log" %
                                     (os.getpid(), self.port))
        args = [DNSMASQ, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
                "--no-hosts", "--listen-address=127.0.0.1", "--bind-interfaces",
                "--port=%d" % self.port, "--local=/ketch.test/", "--local=/etcd.test/",
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
                   test_srv_etcd_names, test_srv_restart])
    finally:
        for m in ENV["members"]:
            m.cleanup()
        ENV["dns"].stop()


if __name__ == "__main__":
    main()
