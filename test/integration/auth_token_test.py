"""test/integration/auth_token_test.py — auth tokens as etcd clients hold them
(issue 16): python3-etcd3 and raw gRPC stubs through ketch-grpc, one bridge in
front of each member of a real 3-member cluster whose members were started
with different --auth-token settings:

  m0  signed,priv-key=,pub-key=   (Ed25519 keys made here with openssl)
  m1  simple, --auth-token-ttl 2
  m2  signed,pub-key=             (verifies, cannot issue)

A token issued by m0 is good on m2 without a login there (and refused on m1,
whose tokens are its own), a forged one is refused everywhere, a simple token
dies after its TTL unused, a password change ends a signed token at once,
and the permission checks hold on every path an etcd client reaches through
the bridge: ranges, puts with prev_kv, nested txns, watches. Bad input to the
Auth service gets a clear error and the member keeps serving.

Natively (the member's protocol, no bridge): AUTH_CHECK, the question
ketch-grpc asks before a watch joins an upstream watch it shares, gets the
answer a WATCH_CREATE of the same range gets, grant and every denial.

Bounded: every call has a timeout; ~25 s.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import etcd3
import etcd3.etcdrpc as rpc
import etcd3.etcdrpc.auth_pb2 as authpb
import grpc

from harness import BIN, ERROR, Conn, Member, ServerError, free_port, run_tests

T = 10  # seconds per call
KETCHCTL = os.path.join(BIN, "ketchctl")


class Env:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="auth-token-it-")
        self.priv, self.pub = os.path.join(self.tmp, "priv.pem"), os.path.join(self.tmp, "pub.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", self.priv],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", self.priv, "-pubout", "-out", self.pub],
                       check=True, capture_output=True)
        modes = [["--auth-token", "signed,priv-key=%s,pub-key=%s,ttl=1m" % (self.priv, self.pub)],
                 ["--auth-token", "simple", "--auth-token-ttl", "2"],
                 ["--auth-token", "signed,pub-key=%s" % self.pub]]
        peers = [free_port() for _ in modes]
        ic = ",".join("m%d=http://127.0.0.1:%d" % (i, p) for i, p in enumerate(peers))
        self.members, self.bridges, self.ports = [], [], []
        self.pw = {"root": "rootpw", "alice": "alicepw"}
        try:
            for i, extra in enumerate(modes):
                self.members.append(Member(
                    data_dir=os.path.join(self.tmp, "m%d" % i), name="m%d" % i,
                    peer_port=peers[i], wait=False,
                    extra=["--initial-cluster", ic, "--initial-cluster-token", "tok",
                           "--heartbeat-interval", "50", "--election-timeout", "500",
                           "--auth-hash-opslimit", "1", "--auth-hash-memlimit", "8192"] + extra))
            for m in self.members:
                m.wait_ready()
            for m in self.members:
                port = free_port()
                log = open(os.path.join(self.tmp, "bridge-%s.log" % m.name), "ab")
                self.bridges.append((subprocess.Popen(
                    [os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % port,
                     "--endpoints", m.endpoint], stdout=log, stderr=subprocess.STDOUT), log))
                self.ports.append(port)
            self.eps = ",".join(m.endpoint for m in self.members)
            self.wait_healthy()
            for args in (["user", "add", "root", "--new-user-password", "rootpw"],
                         ["user", "grant-role", "root", "root"],
                         ["role", "add", "ra"],
                         ["role", "grant-permission", "ra", "read", "/a/", "--prefix"],
                         ["role", "grant-permission", "ra", "write", "/w/", "--prefix"],
                         ["user", "add", "alice", "--new-user-password", "alicepw"],
                         ["user", "grant-role", "alice", "ra"],
                         ["put", "/a/1", "a1"], ["put", "/b/1", "b1"], ["put", "/w/1", "w1"],
                         ["auth", "enable"]):
                self.ctl(args)
        except BaseException:
            self.close()
            raise

    def ctl(self, args):
        p = subprocess.run([KETCHCTL, "--endpoints", self.members[0].endpoint] + args,
                           capture_output=True, timeout=T)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return p

    def wait_healthy(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            p = subprocess.run([KETCHCTL, "--endpoints", self.eps, "endpoint", "health"],
                               capture_output=True, timeout=T)
            if p.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("cluster not healthy: %r" % p.stderr)

    def channel(self, i):
        return grpc.insecure_channel("127.0.0.1:%d" % self.ports[i])

    def login(self, i, user="alice", password=None):
        """Authenticate through bridge i: the token."""
        with self.channel(i) as ch:
            return rpc.AuthStub(ch).Authenticate(
                rpc.AuthenticateRequest(name=user, password=password or self.pw[user]),
                timeout=T).token

    def close(self):
        for p, log in self.bridges:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
            log.close()
        for m in self.members:
            m.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)


_env = None


def env():
    global _env
    if _env is None:
        _env = Env()
    return _env


def call(i, token, method, req):
    """One unary KV call through bridge i with `token` in the metadata: the
    response, or (code name, details)."""
    e = env()
    with e.channel(i) as ch:
        stub = rpc.KVStub(ch)
        try:
            return getattr(stub, method)(req, timeout=T, metadata=(("token", token),))
        except grpc.RpcError as err:
            return (err.code().name, err.details())


def get(i, token, key):
    r = call(i, token, "Range", rpc.RangeRequest(key=key))
    return r if isinstance(r, tuple) else [kv.value for kv in r.kvs]


DENIED = ("PERMISSION_DENIED", "etcdserver: permission denied")
INVALID = ("UNAUTHENTICATED", "etcdserver: invalid auth token")


def test_signed_token_is_good_on_every_member_with_the_public_key():
    e = env()
    tok = e.login(0)
    assert tok.startswith("kt1."), tok
    assert get(0, tok, b"/a/1") == [b"a1"]
    assert get(2, tok, b"/a/1") == [b"a1"]  # verify-only member: no login there
    assert get(1, tok, b"/a/1") == INVALID  # m1's tokens are its own
    # python3-etcd3 with the same token (its call credentials need TLS: metadata instead)
    c = etcd3.client(host="127.0.0.1", port=e.ports[2], timeout=T)
    try:
        c.metadata = (("token", tok),)
        c.watcher._metadata = c.metadata  # noqa (its watcher copies it at creation)
        assert c.get("/a/1")[0] == b"a1"
    finally:
        c.close()


def test_forged_and_foreign_tokens_are_refused():
    e = env()
    tok = e.login(0)
    head, payload, sig = tok.split(".")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    other_user = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    for bad in (".".join([head, payload, flipped]), ".".join([head, other_user, sig]),
                "kt1.x.y", "0" * 32, "x" * 600):
        for i in (0, 2):
            assert get(i, bad, b"/a/1") == INVALID, (i, bad[:40], get(i, bad, b"/a/1"))
    # an empty token is no token (etcd's answer)
    assert get(0, "", b"/a/1") == ("INVALID_ARGUMENT", "etcdserver: user name is empty")
    # a token made by another key pair (a second member set, same user names)
    d = tempfile.mkdtemp(prefix="auth-token-other-")
    try:
        priv = os.path.join(d, "p.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", priv], check=True,
                       capture_output=True)
        m = Member(data_dir=d, name="x0", extra=["--auth-token", "signed,priv-key=" + priv])
        try:
            for args in (["user", "add", "alice", "--new-user-password", "alicepw"],
                         ["user", "add", "root", "--new-user-password", "rootpw"],
                         ["user", "grant-role", "root", "root"], ["auth", "enable"]):
                p = subprocess.run([KETCHCTL, "--endpoints", m.endpoint] + args,
                                   capture_output=True, timeout=T)
                assert p.returncode == 0, p.stderr
            port = free_port()
            b = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr",
                                  "127.0.0.1:%d" % port, "--endpoints", m.endpoint],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.time() + 10
                while True:
                    try:
                        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
                            foreign = rpc.AuthStub(ch).Authenticate(
                                rpc.AuthenticateRequest(name="alice", password="alicepw"),
                                timeout=T).token
                        break
                    except grpc.RpcError:
                        if time.time() > deadline:
                            raise
                        time.sleep(0.1)
            finally:
                b.terminate()
                b.wait(10)
        finally:
            m.cleanup()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert foreign.startswith("kt1.")
    assert get(0, foreign, b"/a/1") == INVALID and get(2, foreign, b"/a/1") == INVALID


def test_verify_only_member_says_it_cannot_issue():
    e = env()
    with e.channel(2) as ch:
        try:
            rpc.AuthStub(ch).Authenticate(rpc.AuthenticateRequest(name="alice", password="alicepw"),
                                          timeout=T)
            raise AssertionError("a verify-only member issued a token")
        except grpc.RpcError as err:
            assert err.code() != grpc.StatusCode.OK and "token" in err.details(), err.details()
    assert get(2, e.login(0), b"/a/1") == [b"a1"]  # and goes on serving


def test_simple_token_lives_on_its_member_until_unused_for_its_ttl():
    e = env()
    tok = e.login(1)
    assert len(tok) == 32 and not tok.startswith("kt1."), tok
    assert get(1, tok, b"/a/1") == [b"a1"]
    assert get(0, tok, b"/a/1") == INVALID
    time.sleep(1.2)
    assert get(1, tok, b"/a/1") == [b"a1"]  # each use renews it
    time.sleep(2.6)
    assert get(1, tok, b"/a/1") == INVALID


def watch_async(i, tok, key, ch=None):
    """A Watch stream through bridge i (on channel ch if given) with `tok`,
    one create of key, without waiting: (thread, box, stream handle to
    close); box gets the first response."""
    import queue
    import threading
    q = queue.Queue()
    q.put(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(key=key)))
    ch = ch or env().channel(i)
    stream = rpc.WatchStub(ch).Watch(iter(q.get, None), timeout=3 * T,
                                     metadata=(("token", tok),))
    box = []
    t = threading.Thread(target=lambda: box.append(next(stream)), daemon=True)
    t.start()
    return t, box, (ch, q, stream)


def watch_first(i, tok, key):
    """watch_async, waited for: the stream (to close) and its first response."""
    t, box, w = watch_async(i, tok, key)
    t.join(T)
    assert box, "no watch response within %ss" % T
    return w, box[0]


def outcome(r):
    """A watch's first response, as compared: created, canceled, why."""
    return (r.created, r.canceled, r.cancel_reason)


def watch_close(w):
    ch, q, stream = w
    q.put(None)
    stream.cancel()
    ch.close()


def test_watch_join_rechecks_the_token():
    """ketch-grpc shares one upstream watch among the watches of one range on
    one token's session; a watch joining it is checked by the member all the
    same: once the simple token died unused (m1: --auth-token-ttl 2), a watch
    of the same key is refused as a watch of a key nobody watches is
    (created and canceled at once, as etcd 3.4 refuses a watch with a dead
    token; its reason's wording differs: tools/grpc-bridge/README.md)."""
    tok = env().login(1)
    first, r = watch_first(1, tok, b"/a/1")
    ws = [first]
    try:
        assert r.created and not r.canceled, r
        time.sleep(2.6)  # the watch alone does not renew the token
        w, fresh = watch_first(1, tok, b"/a/fresh")
        ws.append(w)
        w, joined = watch_first(1, tok, b"/a/1")
        ws.append(w)
        assert fresh.created and fresh.canceled and fresh.cancel_reason, fresh
        assert outcome(joined) == outcome(fresh), (joined, fresh)
        assert get(1, tok, b"/a/1") == INVALID
    finally:
        for w in ws:
            watch_close(w)


def next_response(w):
    import threading
    box = []
    t = threading.Thread(target=lambda: box.append(next(w[2])), daemon=True)
    t.start()
    t.join(T)
    assert box, "no watch response within %ss" % T
    return box[0]


def test_watch_join_allowed_for_a_reader():
    """alice may read /a/: her second watch of /a/1 joins the first one's
    upstream watch (the member answers its AUTH_CHECK) and gets its events."""
    e = env()
    tok, root = e.login(0), e.login(0, "root")
    first, r = watch_first(0, tok, b"/a/1")
    ws = [first]
    try:
        assert r.created and not r.canceled, r
        w, joined = watch_first(0, tok, b"/a/1")
        ws.append(w)
        assert joined.created and not joined.canceled and not joined.cancel_reason, joined
        r = call(0, root, "Put", rpc.PutRequest(key=b"/a/1", value=b"a1"))
        assert not isinstance(r, tuple), r
        for w in ws:
            ev = next_response(w)
            assert [(x.kv.key, x.kv.value) for x in ev.events] == [(b"/a/1", b"a1")], ev
    finally:
        for w in ws:
            watch_close(w)


def auth_call(i, token, method, req):
    with env().channel(i) as ch:
        return getattr(rpc.AuthStub(ch), method)(req, timeout=T, metadata=(("token", token),))


def test_watch_join_refused_without_read_as_a_watch_is():
    """A watch that joins a shared upstream watch as its user loses READ on
    the range is refused as a watch of the range is: bridge 0 is stopped, a
    joining watch is sent to it on a connection already made, root revokes
    alice's permission (the member cancels the upstream watch: permission
    denied), and the bridge resumes. Whichever it reads first, the join (its
    AUTH_CHECK, refused) or the upstream watch's end, the client gets the
    member's refusal, the same as a fresh watch. (AUTH_CHECK's own denials,
    deterministic, are test_auth_check_answers_as_a_watch_create_natively's;
    a join refused by AUTH_CHECK through the bridge, a dead token, is
    test_watch_join_rechecks_the_token's.)"""
    e = env()
    root = e.login(0, "root")
    auth_call(0, root, "RoleAdd", rpc.AuthRoleAddRequest(name="rj"))
    auth_call(0, root, "RoleGrantPermission", rpc.AuthRoleGrantPermissionRequest(
        name="rj", perm=authpb.Permission(permType=authpb.Permission.READ, key=b"/j/1")))
    auth_call(0, root, "UserGrantRole", rpc.AuthUserGrantRoleRequest(user="alice", role="rj"))
    tok = e.login(0)
    first, r = watch_first(0, tok, b"/j/1")
    ws = [first]
    bridge = e.bridges[0][0]
    try:
        assert r.created and not r.canceled, r
        ch = e.channel(0)
        grpc.channel_ready_future(ch).result(timeout=T)
        bridge.send_signal(signal.SIGSTOP)
        try:
            t, box, w = watch_async(0, tok, b"/j/1", ch)
            ws.append(w)
            time.sleep(0.3)
            e.ctl(["--user", "root:rootpw", "role", "revoke-permission", "rj", "/j/1"])
        finally:
            bridge.send_signal(signal.SIGCONT)
        t.join(T)
        assert box, "no watch response within %ss" % T
        joined = box[0]
        w, fresh = watch_first(0, tok, b"/j/1")
        ws.append(w)
        w, never = watch_first(0, tok, b"/b/1")
        ws.append(w)
        assert never.created and never.canceled and "permission denied" in never.cancel_reason, never
        assert outcome(joined) == outcome(fresh) == outcome(never), (joined, fresh, never)
        assert get(0, tok, b"/j/1") == DENIED
    finally:
        for w in ws:
            watch_close(w)


AUTHENTICATE, AUTH_CHECK, WATCH_CREATE = 59, 74, 16


def native(i, user=None, token=None):
    c = Conn(env().members[i].port)
    if user:
        c.tok = c.call(AUTHENTICATE, {"name": user, "password": env().pw[user]})["token"]
    if token:
        c.call(AUTHENTICATE, {"token": token})
    return c


def refusal(c, typ, payload):
    """The ERROR a request gets, as (code, message); None when answered."""
    try:
        c.call(typ, payload)
        return None
    except ServerError as err:
        return (err.code, err.message)


def check_vs_watch(i, rng, user=None, token=None):
    """AUTH_CHECK of rng on one connection and WATCH_CREATE of it on another,
    as the same caller: both outcomes."""
    a, b = native(i, user, token), native(i, user, token)
    try:
        return refusal(a, AUTH_CHECK, rng), refusal(b, WATCH_CREATE, rng)
    finally:
        a.close()
        b.close()


def test_auth_check_answers_as_a_watch_create_natively():
    e = env()
    c = native(0, "alice")
    try:
        for rng in ({"key": b"/a/1"}, {"key": b"/a/", "range_end": b"/a0"},
                    {"key": b"/a/x", "range_end": b"/a/y"}):
            r = c.call(AUTH_CHECK, rng)
            assert set(r) == {"header"} and r["header"][2] >= 1, (rng, r)  # revision
            assert check_vs_watch(0, rng, "alice") == (None, None), rng
        for rng in ({"key": b"/b/1"}, {"key": b"/a/", "range_end": b"/c"},
                    {"key": b"\0", "range_end": b"\0"}, {"key": b"/a"}, {}):
            assert refusal(c, AUTH_CHECK, rng) == (38, "permission denied"), rng
            assert check_vs_watch(0, rng, "alice") == ((38, "permission denied"),) * 2, rng
        r = c.call(AUTH_CHECK, {"key": b"/a/1"})  # a denial leaves the connection usable
        assert set(r) == {"header"}, r
        # root reads everything; nobody (no login, no certificate) nothing
        assert check_vs_watch(0, {"key": b"\0", "range_end": b"\0"}, "root") == (None, None)
        got = check_vs_watch(0, {"key": b"/a/1"})
        assert got[0] == got[1] and got[0][0] == 41, got  # EUSEREMPTY
        # m1's simple token dies unused for 2 s: both refused alike
        a = native(1, "alice")
        b = native(1, token=a.tok)
        try:
            assert a.call(AUTH_CHECK, {"key": b"/a/1"})["header"]
            time.sleep(2.6)
            ga = refusal(a, AUTH_CHECK, {"key": b"/a/1"})
            gb = refusal(b, WATCH_CREATE, {"key": b"/a/1"})
            assert ga == gb and ga[0] == 39, (ga, gb)  # EINVALIDTOKEN
        finally:
            a.close()
            b.close()
        # bad input: a wrong field type closes the connection (EPROTO), the member serves on
        d = native(0, "alice")
        assert refusal(d, AUTH_CHECK, {"key": 5})[0] == 14
        d.close()
        assert c.call(AUTH_CHECK, {"key": b"/a/1"})["header"]
    finally:
        c.close()


def test_permissions_on_every_path_through_the_bridge():
    e = env()
    tok = e.login(0)
    for i in (0, 2):
        assert get(i, tok, b"/b/1") == DENIED
        # a range straddling the permitted prefix
        assert call(i, tok, "Range", rpc.RangeRequest(key=b"/a/", range_end=b"/c")) == DENIED
        assert call(i, tok, "Put", rpc.PutRequest(key=b"/a/1", value=b"x")) == DENIED
        r = call(i, tok, "Put", rpc.PutRequest(key=b"/w/%d" % i, value=b"x"))
        assert not isinstance(r, tuple), r
        # prev_kv needs read on the key: alice may write /w/ but not read it
        assert call(i, tok, "Put", rpc.PutRequest(key=b"/w/1", value=b"x", prev_kv=True)) == DENIED
        assert call(i, tok, "DeleteRange", rpc.DeleteRangeRequest(key=b"/w/1", prev_kv=True)) == \
            DENIED

        def nested(op):
            inner = rpc.TxnRequest(success=[op])
            return rpc.TxnRequest(success=[rpc.RequestOp(request_txn=inner)])
        assert call(i, tok, "Txn", nested(rpc.RequestOp(
            request_range=rpc.RangeRequest(key=b"/b/1")))) == DENIED
        assert call(i, tok, "Txn", nested(rpc.RequestOp(
            request_put=rpc.PutRequest(key=b"/a/9", value=b"x")))) == DENIED
        # the branch not taken is checked too (etcd does)
        t = rpc.TxnRequest(compare=[rpc.Compare(key=b"/a/1", target=rpc.Compare.VALUE,
                                                result=rpc.Compare.EQUAL, value=b"a1")],
                           success=[rpc.RequestOp(request_range=rpc.RangeRequest(key=b"/a/1"))],
                           failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=b"/b/1"))])
        assert call(i, tok, "Txn", t) == DENIED
        r = call(i, tok, "Txn", nested(rpc.RequestOp(request_range=rpc.RangeRequest(key=b"/a/1"))))
        assert not isinstance(r, tuple), r
        assert r.responses[0].response_txn.responses[0].response_range.kvs[0].value == b"a1"
        # a watch on a key without read permission is cancelled with etcd's reason
        with e.channel(i) as ch:
            reqs = iter([rpc.WatchRequest(create_request=rpc.WatchCreateRequest(key=b"/b/1"))])
            stream = rpc.WatchStub(ch).Watch(reqs, timeout=T, metadata=(("token", tok),))
            first = next(stream)
            assert first.created and first.canceled and \
                "permission denied" in first.cancel_reason, first
            stream.cancel()


def test_password_change_ends_signed_tokens_and_revoke_acts_at_once():
    e = env()
    tok = e.login(0)
    assert get(2, tok, b"/a/1") == [b"a1"]
    with e.channel(0) as ch:
        root = e.login(0, "root")
        rpc.AuthStub(ch).UserChangePassword(
            rpc.AuthUserChangePasswordRequest(name="alice", password="alicepw2"), timeout=T,
            metadata=(("token", root),))
    deadline = time.time() + 5
    while get(2, tok, b"/a/1") != INVALID and time.time() < deadline:
        time.sleep(0.05)  # m2 applies the change a moment after m0
    assert get(2, tok, b"/a/1") == INVALID and get(0, tok, b"/a/1") == INVALID
    e.pw["alice"] = "alicepw2"
    tok2 = e.login(0)
    assert get(2, tok2, b"/a/1") == [b"a1"]
    with e.channel(0) as ch:
        rpc.AuthStub(ch).RoleRevokePermission(
            rpc.AuthRoleRevokePermissionRequest(role="ra", key=b"/a/", range_end=b"/a0"),
            timeout=T, metadata=(("token", root),))
    assert get(0, tok2, b"/a/1") == DENIED  # the member that applied it: at once
    deadline = time.time() + 5
    while get(2, tok2, b"/a/1") != DENIED and time.time() < deadline:
        time.sleep(0.05)
    assert get(2, tok2, b"/a/1") == DENIED
    with e.channel(0) as ch:
        rpc.AuthStub(ch).RoleGrantPermission(
            rpc.AuthRoleGrantPermissionRequest(
                name="ra", perm=authpb.Permission(permType=authpb.Permission.READ, key=b"/a/",
                                                  range_end=b"/a0")),
            timeout=T, metadata=(("token", root),))


def puts_across(c, prefix, change):
    """Pipelined PUTs on c, 32 at a time, of keys prefix + NNNNN, while
    `change` (a callable) runs on another thread 30 ms in: until the first
    batch sent after it returned has its answers (5 s at most). Returns
    every key's outcome ("ok" or the error code) and the outcomes of that
    last batch."""
    done = threading.Event()
    t = threading.Thread(target=lambda: (time.sleep(0.03), change(), done.set()))
    outcome, after, i = {}, [], 0
    deadline = time.time() + 5
    t.start()
    try:
        while time.time() < deadline:
            was_done = done.is_set()
            ids = {}
            for _ in range(32):
                key = b"%s%05d" % (prefix, i)
                i += 1
                ids[c.send(2, {"key": key, "value": key})] = key  # PUT
            for _ in ids:
                typ, rid, p = c.recv()
                got = p.get("code") if typ == ERROR else "ok"
                outcome[ids[rid]] = got
                if was_done:
                    after.append(got)
            if was_done:
                break
    finally:
        t.join(10)
    assert done.is_set() and after, "the change or the puts after it did not finish"
    return outcome, after


def stores_hold(readers, prefix, ok):
    """Every member (a reader on each), once caught up, holds exactly the
    keys `ok` under prefix."""
    rng = {"key": prefix, "range_end": prefix[:-1] + b"0", "serializable": True}
    until = time.time() + 10
    while True:
        stores = [sorted(kv[0] for kv in c.call(1, rng).get("kvs") or []) for c in readers]
        if all(st == ok for st in stores) or time.time() > until:
            break
        time.sleep(0.05)
    assert all(st == ok for st in stores), (len(ok), [len(st) for st in stores])


def test_a_write_checked_before_a_revoke_is_refused_where_it_applies_after():
    """A put checked at the gate while a permission revoke was in the log but
    not yet applied carries the auth revision it was checked at; it applies
    after the revoke, so every member refuses it: the proposer answers
    "revision of auth store is old" (51) and no member's store has it. The
    proposing member applies its own puts from their decoded form (core/node.c,
    own_put), the others from the entry: all three must agree, key for key.
    The window is a few ms; up to 8 rounds until a put falls in it."""
    e = env()
    ROLE_ADD, USER_GRANT_ROLE, GRANT, REVOKE = 67, 65, 71, 72
    perm = {"name": "racer", "key": b"/race/", "range_end": b"/race0"}
    r = native(0, "root")
    a = native(0, "alice")
    readers = [native(0, "root"), native(1, "root"), native(2, token=r.tok)]  # m2: verify-only
    try:
        r.call(ROLE_ADD, {"name": "racer"})
        r.call(USER_GRANT_ROLE, {"name": "alice", "role": "racer"})
        old_seen = 0
        for rnd in range(8):
            r.call(GRANT, dict(perm, perm_type=1))
            outcome, after = puts_across(a, b"/race/%d/" % rnd, lambda: r.call(REVOKE, perm))
            assert set(after) == {38}, after  # sent after the revoke answered: denied
            assert set(outcome.values()) <= {"ok", 38, 51}, set(outcome.values())
            old_seen += sum(v == 51 for v in outcome.values())
            stores_hold(readers, b"/race/%d/" % rnd,
                        sorted(k for k, v in outcome.items() if v == "ok"))
            if old_seen:
                break
        assert old_seen, "no put fell between the revoke's proposal and its apply in 8 rounds"
    finally:
        for c in [r, a] + readers:
            c.close()


def test_a_write_proposed_before_auth_enable_applies_nowhere():
    """A put proposed while auth was disabled (as it is, not AUTHED: no auth
    revision) that applies after an AUTH_ENABLE is refused on every member:
    the proposer, which applies its own puts from their decoded form
    (core/node.c, own_put), must send it through kt_node_auth_unwrap as the
    others do, answering "revision of auth store is old" (51). Up to 8
    rounds until a put falls in the window; auth is enabled at the end, as
    the other tests expect."""
    e = env()
    AUTH_ENABLE, AUTH_DISABLE = 56, 57
    r = native(0, "root")
    conns = [r]

    def root_on(i, tok):
        """A connection authenticated as root on member i, once it has
        applied the enable (37 until then)."""
        until = time.time() + 10
        while True:
            try:
                c = native(i, "root") if tok is None else native(i, token=tok)
                conns.append(c)
                return c
            except ServerError as err:
                if err.code != 37 or time.time() > until:
                    raise
                time.sleep(0.02)

    try:
        old_seen = 0
        for rnd in range(8):
            r.call(AUTH_DISABLE, {})
            anon = Conn(e.members[0].port)  # no user: may write while auth is disabled
            admin = Conn(e.members[0].port)
            conns += [anon, admin]
            outcome, after = puts_across(anon, b"/en/%d/" % rnd,
                                         lambda: admin.call(AUTH_ENABLE, {}))
            assert "ok" not in after, after  # sent after the enable answered: refused
            assert set(outcome.values()) <= {"ok", 41, 51}, set(outcome.values())
            old_seen += sum(v == 51 for v in outcome.values())
            r = root_on(0, None)
            stores_hold([r, root_on(1, None), root_on(2, r.tok)],  # m2: verify-only
                        b"/en/%d/" % rnd, sorted(k for k, v in outcome.items() if v == "ok"))
            if old_seen:
                break
        assert old_seen, "no put fell between the enable's proposal and its apply in 8 rounds"
    finally:
        for c in conns:
            c.close()


def test_bad_input_to_the_auth_service():
    e = env()
    root = e.login(0, "root")
    cases = [("UserAdd", rpc.AuthUserAddRequest(name="", password="x"),
              ("INVALID_ARGUMENT", "etcdserver: user name is empty")),
             ("UserAdd", rpc.AuthUserAddRequest(name="u" * 300, password="x"), None),
             ("UserAdd", rpc.AuthUserAddRequest(name="bad\x00name", password="x"), None),
             ("UserAdd", rpc.AuthUserAddRequest(name="emptypw", password=""), None),
             ("UserAdd", rpc.AuthUserAddRequest(name="bigpw", password="p" * 100000), None),
             ("RoleAdd", rpc.AuthRoleAddRequest(name=""),
              ("INVALID_ARGUMENT", "etcdserver: role name is empty")),
             ("RoleGrantPermission", rpc.AuthRoleGrantPermissionRequest(name="ra"), None),
             ("RoleGrantPermission", rpc.AuthRoleGrantPermissionRequest(
                 name="ra", perm=authpb.Permission(permType=7, key=b"/a/")), None),
             ("UserGrantRole", rpc.AuthUserGrantRoleRequest(user="alice", role="nope"),
              ("FAILED_PRECONDITION", "etcdserver: role name not found"))]
    with e.channel(0) as ch:
        stub = rpc.AuthStub(ch)
        for method, req, want in cases:
            try:
                getattr(stub, method)(req, timeout=T, metadata=(("token", root),))
                raise AssertionError("%s %r was accepted" % (method, str(req)[:60]))
            except grpc.RpcError as err:
                got = (err.code().name, err.details())
                if want:
                    assert got == want, (method, got)
                else:
                    assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                          grpc.StatusCode.FAILED_PRECONDITION,
                                          grpc.StatusCode.RESOURCE_EXHAUSTED), (method, got)
                    assert err.details() and "etcdserver: " in err.details() or \
                        len(err.details()) > 10, (method, got)
        names = stub.UserList(rpc.AuthUserListRequest(), timeout=T,
                              metadata=(("token", root),)).users
    assert sorted(names) == ["alice", "root"], names  # nothing half-made
    assert get(2, e.login(0), b"/a/1") == [b"a1"]  # still serving


def teardown():
    if _env:
        _env.close()


if __name__ == "__main__":
    try:
        run_tests([test_signed_token_is_good_on_every_member_with_the_public_key,
                   test_forged_and_foreign_tokens_are_refused,
                   test_verify_only_member_says_it_cannot_issue,
                   test_simple_token_lives_on_its_member_until_unused_for_its_ttl,
                   test_watch_join_rechecks_the_token,
                   test_watch_join_allowed_for_a_reader,
                   test_watch_join_refused_without_read_as_a_watch_is,
                   test_auth_check_answers_as_a_watch_create_natively,
                   test_permissions_on_every_path_through_the_bridge,
                   test_password_change_ends_signed_tokens_and_revoke_acts_at_once,
                   test_a_write_checked_before_a_revoke_is_refused_where_it_applies_after,
                   test_bad_input_to_the_auth_service,
                   test_a_write_proposed_before_auth_enable_applies_nowhere])
    finally:
        teardown()
