"""What a watch joining a shared upstream watch costs the member (run by
hand: /usr/bin/python3 test/perf/watch_join_perf.py [KEYS] [JOINS]).

One ketch member with auth enabled (root only) holds KEYS (default
200000) keys under /p/, and one ketch-grpc in front of it (KT_BRIDGE=path
runs another build of it, to compare). A gRPC client opens a Watch stream,
creates a watch of the prefix /p/ (the upstream watch), then JOINS
(default 100) more watches of it, each a join that ketch-grpc has the
member check (cw_check); it reports the wall time of the joins and the
CPU the member's state thread spent on them. Then, natively on one
connection, JOINS of each question the bridge may ask: a serializable
count-only Range of the prefix with limit 1 (what cw_check sent before
AUTH_CHECK: the member counts every key of the range) and an AUTH_CHECK.

Bounded: the load pipelines puts 1000 at a time; every call has a timeout.
"""
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import BIN, PUT, RANGE, Conn, Member, free_port  # noqa: E402

import grpc  # noqa: E402
import etcd3.etcdrpc as rpc  # noqa: E402

AUTHENTICATE, AUTH_CHECK = 59, 74
TICK = os.sysconf("SC_CLK_TCK")


def state_cpu_s(pid):
    """CPU seconds so far of the member's state thread (its main thread)."""
    with open("/proc/%d/task/%d/stat" % (pid, pid)) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / TICK


def load(c, n):
    sent = 0
    while sent < n:
        batch = min(1000, n - sent)
        for i in range(sent, sent + batch):
            c.send(PUT, {"key": b"/p/%07d" % i, "value": b"v"})
        for _ in range(batch):
            t, _, p = c.recv()
            assert t == PUT, p
        sent += batch


def ctl(m, *args):
    subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints", m.endpoint] + list(args),
                   check=True, capture_output=True, timeout=30)


def joins(port, token, n):
    """Wall seconds for n watches of /p/ to be created after the first."""
    q = queue.Queue()
    ch = grpc.insecure_channel("127.0.0.1:%d" % port)
    stream = rpc.WatchStub(ch).Watch(iter(q.get, None), timeout=120,
                                     metadata=(("token", token),))
    create = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(key=b"/p/", range_end=b"/p0"))
    q.put(create)
    first = next(stream)
    assert first.created and not first.canceled, first
    t0 = time.time()
    for _ in range(n):
        q.put(create)
    got = 0
    for r in stream:
        assert not r.canceled, r
        got += r.created
        if got == n:
            break
    dt = time.time() - t0
    q.put(None)
    stream.cancel()
    ch.close()
    return dt


def native(c, typ, payload, n):
    t0 = time.time()
    for _ in range(n):
        c.call(typ, payload)
    return time.time() - t0


def main():
    keys = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    tmp = tempfile.mkdtemp(prefix="watch-join-perf-")
    m = Member(data_dir=tmp, extra=["--auth-hash-opslimit", "1", "--auth-hash-memlimit", "8192",
                                     "--quota-backend-bytes", str(8 << 30)])
    bridge = None
    try:
        c = Conn(m.port)
        load(c, keys)
        ctl(m, "user", "add", "root", "--new-user-password", "rootpw")
        ctl(m, "user", "grant-role", "root", "root")
        ctl(m, "auth", "enable")
        c.close()
        c = Conn(m.port)
        c.call(AUTHENTICATE, {"name": "root", "password": "rootpw"})
        port = free_port()
        exe = os.environ.get("KT_BRIDGE") or os.path.join(BIN, "ketch-grpc")
        bridge = subprocess.Popen([exe, "--listen-addr", "127.0.0.1:%d" % port,
                                   "--endpoints", m.endpoint],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
                    token = rpc.AuthStub(ch).Authenticate(
                        rpc.AuthenticateRequest(name="root", password="rootpw"), timeout=2).token
                break
            except grpc.RpcError:
                time.sleep(0.1)
        pid = m.proc.pid
        print("%d keys under /p/, %d joins; bridge %s" % (keys, n, exe))
        cpu = state_cpu_s(pid)
        dt = joins(port, token, n)
        cpu = state_cpu_s(pid) - cpu
        print("  ketch-grpc joins:           %7.3f s wall, member state thread %7.3f s CPU"
              " (%.2f ms per join)" % (dt, cpu, 1000 * cpu / n))
        rng = {"key": b"/p/", "range_end": b"/p0", "serializable": True, "count_only": True,
               "limit": 1}
        for name, typ, payload in (("Range count_only limit 1", RANGE, rng),
                                   ("AUTH_CHECK", AUTH_CHECK, {"key": b"/p/",
                                                               "range_end": b"/p0"})):
            cpu = state_cpu_s(pid)
            dt = native(c, typ, payload, n)
            cpu = state_cpu_s(pid) - cpu
            print("  native %-25s %7.3f s wall, member state thread %7.3f s CPU"
                  " (%.3f ms wall per request)" % (name + ":", dt, cpu, 1000 * dt / n))
        c.close()
    finally:
        if bridge:
            bridge.terminate()
            bridge.wait(10)
        m.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
