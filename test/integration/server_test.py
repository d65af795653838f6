"""One member over the native protocol: requests, limits and bad input.

Every bad-input case checks two things: the offender gets a clear error (or is
cut off), and another client keeps being served meanwhile."""
import os
import socket
import struct
import threading
import time

import msgpack

from harness import (COMPACT, DELETE, HELLO, PUT, RANGE, STATUS, TXN, Conn, Member,
                     ServerError, run_tests)

EKEYEMPTY, ETOOLARGE, ETOOMANYOPS, EDUPKEY, ECOMPACTED, EFUTUREREV = 2, 3, 4, 5, 6, 7
EPROTO, EUNSUPPORTED = 14, 15

M = None


def member():
    global M
    if M is None:
        M = Member()
    return M


def expect_error(fn, code):
    try:
        fn()
    except ServerError as e:
        assert e.code == code, "want code %d, got %d (%s)" % (code, e.code, e.message)
        assert e.message, "error without a message"
        return e
    raise AssertionError("no error, wanted code %d" % code)


def still_serving():
    """Another client can write and read back."""
    c = Conn(member().port)
    k = b"alive-%f" % time.time()
    c.put(k, b"yes")
    assert c.get_value(k) == b"yes"
    c.close()


def read_error_then_eof(c):
    """The server answers with an ERROR frame, then closes."""
    f = c.recv()
    assert f is not None, "connection closed without an error frame"
    t, _, p = f
    assert t == 127, "expected ERROR frame, got type %d" % t
    c.sock.settimeout(5)
    rest = c.recv()
    assert rest is None, "connection left open after a fatal error: %r" % (rest,)
    return p


def test_put_get_delete_revisions():
    c = Conn(member().port)
    r1 = c.put("rk", "v1")
    rev1 = r1["header"][2]
    r2 = c.put("rk", "v2", prev_kv=True)
    assert r2["header"][2] == rev1 + 1
    assert r2["prev_kv"][1] == b"v1"
    kv = c.get("rk")["kvs"][0]
    assert kv[0] == b"rk" and kv[1] == b"v2"
    assert kv[2] == rev1 and kv[3] == rev1 + 1 and kv[4] == 2, kv
    old = c.get("rk", revision=rev1)["kvs"][0]
    assert old[1] == b"v1"
    d = c.call(DELETE, {"key": b"rk", "prev_kv": True})
    assert d["deleted"] == 1 and d["prev_kvs"][0][1] == b"v2"
    assert not c.get("rk").get("kvs")
    expect_error(lambda: c.get("rk", revision=10**9), EFUTUREREV)


def test_txn_and_range_options():
    c = Conn(member().port)
    for i in range(10):
        c.put("tx/%02d" % i, "val%d" % i)
    r = c.call(TXN, {
        "compare": [{"result": 0, "target": 3, "key": b"tx/00", "value": b"val0"}],
        "success": [[2, {"key": b"tx/done", "value": b"1"}],
                    [1, {"key": b"tx/", "range_end": b"tx0", "limit": 3}]],
        "failure": [[2, {"key": b"tx/failed", "value": b"1"}]]})
    assert r["succeeded"] is True
    rng = r["responses"][1][1]
    assert len(rng["kvs"]) == 3 and rng["more"] is True and rng["count"] == 11
    assert c.get_value("tx/done") == b"1" and c.get_value("tx/failed") is None
    cnt = c.get("tx/", range_end=b"tx0", count_only=True)
    assert cnt["count"] == 11 and not cnt.get("kvs")
    desc = c.get("tx/", range_end=b"tx0", sort_order=2, sort_target=0, limit=1)
    assert desc["kvs"][0][0] == b"tx/done"


def test_compact_and_status():
    c = Conn(member().port)
    r = c.put("ck", "1")
    rev = r["header"][2]
    c.put("ck", "2")
    c.call(COMPACT, {"revision": rev + 1, "physical": True})
    expect_error(lambda: c.get("ck", revision=rev), ECOMPACTED)
    st = c.call(STATUS, {})
    assert st["header"][2] >= rev + 1
    assert st["raft_index"] >= 1 and st["db_size"] > 0 and st["version"]


def test_empty_key_and_dup_txn():
    c = Conn(member().port)
    expect_error(lambda: c.put("", "x"), EKEYEMPTY)
    expect_error(lambda: c.call(TXN, {"success": [[2, {"key": b"d", "value": b"1"}],
                                                  [2, {"key": b"d", "value": b"2"}]]}), EDUPKEY)
    ops = [[2, {"key": b"many%d" % i, "value": b"x"}] for i in range(129)]
    expect_error(lambda: c.call(TXN, {"success": ops}), ETOOMANYOPS)
    c.call(TXN, {"success": ops[:128]})  # 128 is fine
    still_serving()


def test_bad_ranges_and_enums():
    c = Conn(member().port)
    e = expect_error(lambda: c.get("b", range_end=b"a"), 1)  # EINVAL: end before key
    assert "range" in e.message, e.message
    expect_error(lambda: c.get("a", sort_target=9), 1)
    expect_error(lambda: c.get("a", sort_order=7), 1)
    expect_error(lambda: c.call(DELETE, {"key": b"z", "range_end": b"a"}), 1)
    expect_error(lambda: c.call(TXN, {"compare": [{"result": 9, "target": 0, "key": b"k"}]}), 1)
    expect_error(lambda: c.call(DELETE, {"key": b""}), EKEYEMPTY)
    expect_error(lambda: c.get(""), EKEYEMPTY)
    expect_error(lambda: c.call(COMPACT, {"revision": 10**12}), EFUTUREREV)
    still_serving()


def test_oversized_frame_closes_that_connection():
    c = Conn(member().port)
    c.send_raw(struct.pack(">I", 64 * 1024 * 1024 + 1))
    p = read_error_then_eof(c)
    assert p["code"] == ETOOLARGE, p
    still_serving()


def test_request_over_max_request_bytes():
    """etcd's behaviour: ETOOLARGE for that request, the connection stays."""
    c = Conn(member().port)
    big = b"x" * (2 * 1024 * 1024)
    e = expect_error(lambda: c.put("big", big), ETOOLARGE)
    assert "max-request-bytes" in e.message, e.message
    c.put("small-after-big", "ok")  # same connection, next request served
    assert c.get_value("small-after-big") == b"ok"
    assert c.get_value("big") is None
    still_serving()


def test_reads_up_to_the_receive_limit():
    """etcd applies --max-request-bytes to what it proposes (writes) only;
    reads may be up to that + 512 KiB (its gRPC receive limit), and answers
    may be larger than either."""
    c = Conn(member().port, hello=False)
    h = c.call(HELLO, {"version": 1, "client": "server_test"})
    assert h["max_request_bytes"] == 1572864 + 512 * 1024, h
    key = b"k" * 1700000
    r = c.get(key)  # answered, with no key
    assert not r.get("kvs") and r.get("count", 0) == 0, {k: v for k, v in r.items() if k != "kvs"}
    r = c.call(TXN, {"compare": [{"result": 0, "target": 3, "key": key, "value": b"x"}]})
    assert "header" in r and not r.get("succeeded"), r  # a txn without writes is a read
    wid = c.send(16, {"key": key})  # a watch too
    t, i, p = c.recv()
    assert i == wid and t == 16 and p.get("created"), (t, i, p)
    cid = c.send(17, {"watch_id": p.get("watch_id", 0)})
    while c.recv()[1] != cid:  # the watch's canceled frame, then the answer
        pass
    # writes of that size: ETOOLARGE, the connection stays
    e = expect_error(lambda: c.put(key, "v"), ETOOLARGE)
    assert "max-request-bytes" in e.message, e.message
    expect_error(lambda: c.call(DELETE, {"key": key}), ETOOLARGE)
    expect_error(lambda: c.call(TXN, {"compare": [{"result": 0, "target": 3, "key": key, "value": b"x"}],
                                      "success": [[PUT, {"key": b"t", "value": b"v"}]]}), ETOOLARGE)
    # over the receive limit: ETOOLARGE for reads too (the body dropped unread)
    e = expect_error(lambda: c.get(b"k" * (2 * 1024 * 1024 + 1)), ETOOLARGE)
    assert "largest request" in e.message, e.message
    # an answer larger than both limits
    c2 = Conn(member().port)
    for i in range(3):
        c2.put("bigv/%d" % i, b"v" * 1000000)
    r = c2.get("bigv/", range_end=b"bigv0")
    assert [kv[1] for kv in r["kvs"]] == [b"v" * 1000000] * 3, len(r.get("kvs") or [])
    c2.call(DELETE, {"key": b"bigv/", "range_end": b"bigv0"})
    still_serving()


def test_second_hello_closes():
    c = Conn(member().port)
    c.send(HELLO, {"version": 1})
    assert read_error_then_eof(c)["code"] == EPROTO


def test_garbage_and_wrong_types():
    c = Conn(member().port)
    body = b"\xc1\xc1\xc1garbage"
    c.send_raw(struct.pack(">I", len(body)) + body)
    assert read_error_then_eof(c)["code"] == EPROTO
    c = Conn(member().port)
    c.send(PUT, {"key": 12345, "value": b"x"})  # key must be bin/str
    p = read_error_then_eof(c)
    assert p["code"] == EPROTO and "key" in p["message"], p
    c = Conn(member().port)
    body = msgpack.packb("not an array")
    c.send_raw(struct.pack(">I", len(body)) + body)
    assert read_error_then_eof(c)["code"] == EPROTO
    still_serving()


def test_unknown_type_keeps_connection():
    c = Conn(member().port)
    rid = c.send(99, {})
    t, i, p = c.recv()
    assert t == 127 and i == rid and p["code"] == EUNSUPPORTED, (t, i, p)
    c.put("after-unknown", "ok")  # same connection still works


def test_truncated_frame_and_no_hello():
    c = Conn(member().port)
    body = msgpack.packb([PUT, 1, {"key": b"k", "value": b"v"}])
    c.send_raw(struct.pack(">I", len(body) + 10) + body)  # promises more than it sends
    c.close()
    c = Conn(member().port, hello=False)
    c.send(PUT, {"key": b"k", "value": b"v"})
    assert read_error_then_eof(c)["code"] == EPROTO
    still_serving()


def test_pipelining_many_requests():
    c = Conn(member().port)
    ids = [c.send(PUT, {"key": b"pipe/%d" % i, "value": b"v%d" % i}) for i in range(2000)]
    seen = set()
    for _ in ids:
        t, i, p = c.recv()
        assert t == PUT, (t, p)
        seen.add(i)
    assert seen == set(ids)
    r = c.get("pipe/", range_end=b"pipe0", count_only=True)
    assert r["count"] == 2000


def test_client_that_never_reads_is_cut_off():
    """A client floods range requests and never reads: the server stops
    reading it, then cuts it; meanwhile another client writes 10k keys."""
    m = member()
    for i in range(50):
        Conn(m.port).put("bulk/%03d" % i, "x" * 4000)
    hog = socket.create_connection(("127.0.0.1", m.port))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hello = msgpack.packb([HELLO, 1, {"version": 1}])
    req = msgpack.packb([RANGE, 2, {"key": b"bulk/", "range_end": b"bulk0"}])
    frame = struct.pack(">I", len(hello)) + hello + (struct.pack(">I", len(req)) + req) * 200
    hog.setblocking(False)
    stop = time.time() + 30
    sent_total = 0

    def flood():
        nonlocal sent_total
        while time.time() < stop:
            try:
                sent_total += hog.send(frame)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                return  # cut off: what we want

    th = threading.Thread(target=flood)
    th.start()
    w = Conn(m.port)
    ids = [w.send(PUT, {"key": b"w10k/%d" % i, "value": b"v"}) for i in range(10000)]
    for _ in ids:
        t, _, p = w.recv()
        assert t == PUT, p
    assert w.get("w10k/", range_end=b"w10k0", count_only=True)["count"] == 10000
    th.join()
    # The hog was cut (its sends failed) or is at least bounded: the server is alive.
    rss = int(open("/proc/%d/status" % m.proc.pid).read().split("VmRSS:")[1].split()[0])
    assert rss < 512 * 1024, "server RSS %d kB grew with a non-reading client" % rss
    hog.close()
    still_serving()


def test_auto_compaction_periodic():
    m = Member(extra=["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "2s"])
    try:
        c = Conn(m.port)
        r1 = c.put("ac", "1")["header"][2]
        c.put("ac", "2")
        deadline = time.time() + 8
        while time.time() < deadline:
            try:
                c.get("ac", revision=r1)
            except ServerError as e:
                assert e.code == ECOMPACTED, e
                assert "auto-compaction" in m.logtext()
                return
            time.sleep(0.2)
        raise AssertionError("revision %d still readable after 8 s with 2 s retention" % r1)
    finally:
        m.cleanup()


def main():
    try:
        run_tests([test_put_get_delete_revisions, test_txn_and_range_options,
                   test_compact_and_status, test_empty_key_and_dup_txn, test_bad_ranges_and_enums,
                   test_oversized_frame_closes_that_connection,
                   test_request_over_max_request_bytes, test_reads_up_to_the_receive_limit,
                   test_second_hello_closes,
                   test_garbage_and_wrong_types,
                   test_unknown_type_keeps_connection, test_truncated_frame_and_no_hello,
                   test_pipelining_many_requests, test_client_that_never_reads_is_cut_off,
                   test_auto_compaction_periodic])
    finally:
        if M:
            M.cleanup()


if __name__ == "__main__":
    main()
