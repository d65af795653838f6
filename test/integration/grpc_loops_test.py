"""ketch-grpc with several event loops (--loops, issue 17 item 7): one member,
one bridge with 3 loops. Connections are handed out round robin, so six
connections opened in turn are two per loop; on them, all at once:
  - watches on every loop see every put made through every loop, complete,
    in revision order, never twice;
  - a lease granted on one loop is kept alive on the others and revoked on a
    third;
  - /metrics adds up over the loops (calls, connections per loop), and watch
    coalescing is per loop (one upstream watch per loop for one range);
  - the port stays exclusive: a second bridge on it fails with "address in
    use";
  - SIGTERM with streams open on every loop stops every loop cleanly.
The bridge's log must hold no sanitizer report (make tsan runs this file)."""
import atexit
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

import grpc_stream_test as gs
from grpc_test import wait_port
from harness import BIN, Member, free_port, run_tests

LOOPS = 3
ENV = None


class Env:
    def __init__(self):
        self.member = Member(name="lp", extra=["--heartbeat-interval", "50",
                                               "--election-timeout", "500"])
        self.tmp = tempfile.mkdtemp(prefix="ketch-grpc-loops-")
        self.port, self.mport = free_port(), free_port()
        self.log_path = os.path.join(self.tmp, "bridge.log")
        self.bridge = subprocess.Popen(
            [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % self.port,
             "--endpoints", self.member.endpoint, "--loops", str(LOOPS),
             "--metrics-addr", "127.0.0.1:%d" % self.mport],
            stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT)
        wait_port(self.port, self.bridge, "ketch-grpc")
        wait_port(self.mport, self.bridge, "ketch-grpc /metrics")

    def metrics(self):
        return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport,
                                      timeout=5).read().decode()

    def figure(self, name, labels=""):
        """The value of one series (0 when absent)."""
        pat = r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels))
        m = re.search(pat, self.metrics(), re.M)
        return float(m.group(1)) if m else 0.0

    def per_loop_connections(self):
        text = self.metrics()
        return [int(re.search(r'^ketch_grpc_loop_connections\{loop="%d"\} (\d+)$' % i,
                              text, re.M).group(1)) for i in range(LOOPS)]

    def member_watchers(self):
        text = urllib.request.urlopen("http://%s/metrics" % self.member.endpoint,
                                      timeout=5).read().decode()
        return int(re.search(r"^etcd_debugging_mvcc_watcher_total (\d+)$", text, re.M).group(1))

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def env():
    global ENV
    if ENV is None:
        ENV = Env()
    return ENV


@atexit.register
def _stop_leftovers():
    """A failed or filtered-out (TI=...) run leaves no member or bridge behind."""
    if ENV is not None:
        if ENV.bridge.poll() is None:
            ENV.bridge.kill()
            ENV.bridge.wait()
        ENV.member.kill9()


def wait_for(what, cond, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Chan:
    """One gRPC connection of its own (grpcio shares a connection between
    channels with the same target unless told not to)."""

    def __init__(self, port):
        import grpc
        self.grpc = grpc
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % port,
                                        options=[("grpc.use_local_subchannel_pool", 1)])
        grpc.channel_ready_future(self.ch).result(timeout=10)

    def unary(self, method, req, resp_type, timeout=10):
        call = self.ch.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=resp_type.FromString)
        return call(req, timeout=timeout)

    def stream(self, method, resp_type):
        import queue
        q = queue.Queue()
        call = self.ch.stream_stream(method, request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=resp_type.FromString)
        it = call(iter(q.get, None), timeout=60)
        return q, it

    def close(self):
        self.ch.close()


def open_chans(n):
    """n connections opened one after the other: round robin puts them on
    loops 0, 1, 2, 0, ... (nothing else connects to this bridge meanwhile)."""
    e = env()
    wait_for("no connection left open", lambda: sum(e.per_loop_connections()) == 0)
    return [Chan(e.port) for _ in range(n)]


def test_connections_spread_over_loops():
    e = env()
    assert e.figure("ketch_grpc_loops") == LOOPS
    chans = open_chans(2 * LOOPS)
    try:
        wait_for("two connections on each loop", lambda: e.per_loop_connections() == [2] * LOOPS)
        p = gs.pb()
        for i, c in enumerate(chans):  # each one serves calls
            r = c.unary("/etcdserverpb.KV/Put", p.PutRequest(key=b"spread/%d" % i, value=b"v"),
                        p.PutResponse)
            assert r.header.revision > 0, r
    finally:
        for c in chans:
            c.close()
    wait_for("the connections to close", lambda: e.per_loop_connections() == [0] * LOOPS)


def test_watch_and_put_across_loops():
    """Two watchers on each loop, one writer on each loop, all at once."""
    e = env()
    p = gs.pb()
    base_put = e.figure("grpc_server_handled_total", '{grpc_code="OK",grpc_method="Put",'
                        'grpc_service="etcdserverpb.KV",grpc_type="unary"}')
    base_watchers = e.member_watchers()
    watch_chans = open_chans(2 * LOOPS)  # loops 0 1 2 0 1 2
    writer_chans = [Chan(e.port) for _ in range(LOOPS)]  # loops 0 1 2
    watches = []
    try:
        assert e.per_loop_connections() == [3] * LOOPS, e.per_loop_connections()
        for c in watch_chans:
            q, it = c.stream("/etcdserverpb.Watch/Watch", p.WatchResponse)
            q.put(p.WatchRequest(create_request=p.WatchCreateRequest(key=b"lp/",
                                                                     range_end=b"lp0")))
            r = next(it)
            assert r.created and not r.canceled, r
            watches.append((q, it))
        # per loop, its two client watches share one upstream watch
        assert e.figure("etcd_grpc_proxy_watchers_coalescing_total") == LOOPS
        wait_for("one member watch per loop",
                 lambda: e.member_watchers() - base_watchers == LOOPS)
        n_per = 150
        wrote = [[] for _ in writer_chans]  # (revision, key) per writer
        errors = []

        def writer(i):
            try:
                for j in range(n_per):
                    key = b"lp/w%d/%03d" % (i, j)
                    r = writer_chans[i].unary("/etcdserverpb.KV/Put",
                                              p.PutRequest(key=key, value=b"x%d" % j),
                                              p.PutResponse)
                    wrote[i].append((r.header.revision, key))
            except Exception as ex:  # noqa
                errors.append(repr(ex))

        got = [[] for _ in watches]

        def reader(k):
            try:
                it = watches[k][1]
                while len(got[k]) < n_per * len(writer_chans):
                    r = next(it)
                    assert not r.canceled, r
                    got[k] += [(ev.kv.mod_revision, ev.kv.key) for ev in r.events]
            except Exception as ex:  # noqa
                errors.append("watcher %d: %r" % (k, ex))

        ths = [threading.Thread(target=reader, args=(k,)) for k in range(len(watches))]
        ths += [threading.Thread(target=writer, args=(i,)) for i in range(len(writer_chans))]
        for t in ths:
            t.start()
        for t in ths:
            t.join(60)
        assert not errors, errors[:3]
        assert not any(t.is_alive() for t in ths), "a reader or writer did not finish"
        acked = sorted(x for w in wrote for x in w)
        assert len(acked) == n_per * len(writer_chans)
        for k, events in enumerate(got):
            # every acknowledged put, once, in revision order, on every loop's watchers
            assert events == acked, (k, len(events), events[:3], acked[:3])
        for w in wrote:  # each writer's puts in its own order
            assert [key for _, key in w] == sorted(key for _, key in w)
        put_ok = e.figure("grpc_server_handled_total", '{grpc_code="OK",grpc_method="Put",'
                          'grpc_service="etcdserverpb.KV",grpc_type="unary"}')
        assert put_ok - base_put == n_per * len(writer_chans), (put_ok, base_put)
    finally:
        for q, it in watches:
            q.put(None)
            it.cancel()
        for c in watch_chans + writer_chans:
            c.close()
    wait_for("the member's watches to end", lambda: e.member_watchers() <= base_watchers)
    assert e.figure("etcd_grpc_proxy_watchers_coalescing_total") == 0


def test_lease_across_loops():
    """Granted on loop 0, kept alive on loops 1 and 2, a key attached on loop
    0, revoked on loop 1: the key is gone for a read on loop 2."""
    e = env()
    p = gs.pb()
    a, b, c = open_chans(LOOPS)
    try:
        g = a.unary("/etcdserverpb.Lease/LeaseGrant", p.LeaseGrantRequest(TTL=30),
                    p.LeaseGrantResponse)
        assert g.ID and g.TTL == 30, g
        a.unary("/etcdserverpb.KV/Put", p.PutRequest(key=b"ll/k", value=b"v", lease=g.ID),
                p.PutResponse)
        streams = [x.stream("/etcdserverpb.Lease/LeaseKeepAlive", p.LeaseKeepAliveResponse)
                   for x in (b, c)]
        for _ in range(3):
            for q, it in streams:
                q.put(p.LeaseKeepAliveRequest(ID=g.ID))
                r = next(it)
                assert r.ID == g.ID and r.TTL == 30, r
        for q, it in streams:
            q.put(None)
            it.cancel()
        b.unary("/etcdserverpb.Lease/LeaseRevoke", p.LeaseRevokeRequest(ID=g.ID),
                p.LeaseRevokeResponse)
        r = c.unary("/etcdserverpb.KV/Range", p.RangeRequest(key=b"ll/k"), p.RangeResponse)
        assert r.count == 0, r
    finally:
        for x in (a, b, c):
            x.close()


def coalescing_bridge(e, log):
    """A ketch-grpc of its own on the shared member: 2 loops,
    --coalesce-lease-keepalives; (process, port, metrics port) once its
    /metrics answers."""
    port, mport = free_port(), free_port()
    br = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                           "--endpoints", e.member.endpoint, "--loops", "2",
                           "--coalesce-lease-keepalives", "--metrics-addr",
                           "127.0.0.1:%d" % mport],
                          stdout=open(os.path.join(e.tmp, log), "wb"), stderr=subprocess.STDOUT)
    try:
        wait_port(mport, br, "ketch-grpc /metrics")
    except BaseException:
        br.kill()
        br.wait()
        raise
    return br, port, mport


def test_revoke_reaches_every_loops_keepalive_cache():
    """--coalesce-lease-keepalives keeps one table per loop; a LeaseRevoke
    through loop 0 must still stop loop 1 from answering its cached renewal:
    the next keep-alive on loop 1 is TTL 0, as etcd."""
    e = env()
    p = gs.pb()
    br, port, mport = coalescing_bridge(e, "bridge-ka.log")
    chans = []
    try:
        a = Chan(port)
        chans.append(a)
        b = Chan(port)
        chans.append(b)
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5).read()
        assert re.search(rb'loop_connections\{loop="0"\} 1\n.*loop="1"\} 1\n', text, re.S), text
        g = a.unary("/etcdserverpb.Lease/LeaseGrant", p.LeaseGrantRequest(TTL=60),
                    p.LeaseGrantResponse)
        q, it = a.stream("/etcdserverpb.Lease/LeaseKeepAlive", p.LeaseKeepAliveResponse)
        for _ in range(2):  # the second is answered from loop 1's table
            q.put(p.LeaseKeepAliveRequest(ID=g.ID))
            r = next(it)
            assert r.ID == g.ID and r.TTL == 60, r
        b.unary("/etcdserverpb.Lease/LeaseRevoke", p.LeaseRevokeRequest(ID=g.ID),
                p.LeaseRevokeResponse)
        q.put(p.LeaseKeepAliveRequest(ID=g.ID))
        r = next(it)
        assert r.ID == g.ID and r.TTL == 0, r
        q.put(None)
        it.cancel()
    finally:
        for c in chans:
            c.close()
        br.terminate()
        assert br.wait(20) == 0


def test_revoke_during_renewal_not_cached():
    """--coalesce-lease-keepalives: a LeaseRevoke sent while a renewal of the
    lease is on its way to the member (pipelined ahead of the revoke on the
    loop's handle, so the member answers it: alive) must not leave that
    renewal cached, also when another keep-alive of the lease arrives
    meanwhile (it applies the revoke to the loop's table, then waits for that
    renewal): a keep-alive sent after the revoke's answer is TTL 0, as
    etcd. The member is stopped (SIGSTOP) so that the renewal is surely in
    flight when the revoke is submitted."""
    e = env()
    p = gs.pb()
    br, port, mport = coalescing_bridge(e, "bridge-ka2.log")
    chans = []
    stopped = False
    try:
        a = Chan(port)
        chans.append(a)
        g = a.unary("/etcdserverpb.Lease/LeaseGrant", p.LeaseGrantRequest(TTL=60),
                    p.LeaseGrantResponse)
        q, it = a.stream("/etcdserverpb.Lease/LeaseKeepAlive", p.LeaseKeepAliveResponse)
        os.kill(e.member.proc.pid, signal.SIGSTOP)
        stopped = True
        q.put(p.LeaseKeepAliveRequest(ID=g.ID))  # its renewal waits in the member's socket
        time.sleep(0.3)
        revoked = []
        t = threading.Thread(target=lambda: revoked.append(a.unary(
            "/etcdserverpb.Lease/LeaseRevoke", p.LeaseRevokeRequest(ID=g.ID),
            p.LeaseRevokeResponse, timeout=20)))
        t.start()
        time.sleep(0.3)
        q.put(p.LeaseKeepAliveRequest(ID=g.ID))  # joins the renewal in flight
        time.sleep(0.3)
        os.kill(e.member.proc.pid, signal.SIGCONT)
        stopped = False
        r = next(it)  # sent before the revoke: alive
        assert r.ID == g.ID and r.TTL == 60, r
        r = next(it)  # sent before the revoke's answer: either
        assert r.ID == g.ID, r
        t.join(20)
        assert revoked, "LeaseRevoke not answered"
        q.put(p.LeaseKeepAliveRequest(ID=g.ID))
        r = next(it)
        assert r.ID == g.ID and r.TTL == 0, ("a renewal from before the revoke was cached", r)
        q.put(None)
        it.cancel()
    finally:
        if stopped:
            os.kill(e.member.proc.pid, signal.SIGCONT)
        for c in chans:
            c.close()
        br.terminate()
        assert br.wait(20) == 0


def test_port_stays_exclusive():
    e = env()
    r = subprocess.run([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % e.port,
                        "--endpoints", e.member.endpoint, "--loops", str(LOOPS)],
                       capture_output=True, timeout=20)
    assert r.returncode != 0 and b"Address already in use" in r.stderr, (r.returncode, r.stderr)
    assert e.bridge.poll() is None


def test_shutdown_clean():
    """SIGTERM with a watch open on every loop: every loop stops, exit 0."""
    e = env()
    p = gs.pb()
    chans = open_chans(LOOPS)
    try:
        for c in chans:
            q, it = c.stream("/etcdserverpb.Watch/Watch", p.WatchResponse)
            q.put(p.WatchRequest(create_request=p.WatchCreateRequest(key=b"sd/")))
            assert next(it).created
        e.bridge.send_signal(signal.SIGTERM)
        rc = e.bridge.wait(20)
    finally:
        for c in chans:
            c.close()
    text = e.log()
    assert rc == 0, (rc, text[-2000:])
    assert "ThreadSanitizer" not in text and "AddressSanitizer" not in text and \
        "runtime error" not in text, text[-4000:]
    e.member.stop()


if __name__ == "__main__":
    run_tests([test_connections_spread_over_loops, test_watch_and_put_across_loops,
               test_lease_across_loops, test_revoke_reaches_every_loops_keepalive_cache,
               test_revoke_during_renewal_not_cached,
               test_port_stays_exclusive, test_shutdown_clean])
