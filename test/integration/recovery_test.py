"""Recovery from damaged data dirs, with real processes and real files:
torn WAL tail, corruption in the middle of the WAL, corrupt snapshots, and a
full disk (a small tmpfs)."""
import glob
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time

from harness import BIN, PUT, Conn, Member, ServerError, run_tests

SEG_HDR, REC_HDR = 40, 24  # wal/FORMAT.md


def wal_records(path):
    """(offset, padded size) of each record of a segment (wal/FORMAT.md)."""
    data = open(path, "rb").read()
    off, out = SEG_HDR, []
    while off + REC_HDR <= len(data):
        n = struct.unpack(">I", data[off:off + 4])[0]
        if data[off:off + REC_HDR] == b"\0" * REC_HDR:
            break
        size = REC_HDR + ((n + 7) & ~7)
        out.append((off, size))
        off += size
    return out


def fill(m, n, prefix="r/", value=b"v" * 100):
    c = Conn(m.port)
    for i in range(n):
        c.send(PUT, {"key": b"%s%05d" % (prefix.encode(), i), "value": value})
    for i in range(n):
        t, _, p = c.recv()
        assert t == PUT, p
    c.close()


def count(m, prefix=b"r/"):
    return Conn(m.port).get(prefix, range_end=prefix[:-1] + b"0", count_only=True)["count"]


def wal_dir(m):
    return os.path.join(m.data_dir, "d", "member", "wal")


def snap_dir(m):
    return os.path.join(m.data_dir, "d", "member", "snap")


def start_expect_failure(m):
    m.start(wait=False)
    rc, log = m.run_to_exit(timeout=15)
    assert rc not in (0, None), "member started on a damaged data dir: %s" % log[-800:]
    return log


def test_torn_tail_is_cut_and_member_starts():
    m = Member()
    try:
        fill(m, 200)
        m.kill9()
        seg = sorted(glob.glob(os.path.join(wal_dir(m), "*.wal")))[-1]
        data = open(seg, "rb").read()
        # the last entry record (type 2) torn in half, nothing written after it
        off, size = [(o, n) for o, n in wal_records(seg) if data[o + 16] == 2][-1]
        end = wal_records(seg)[-1][0] + wal_records(seg)[-1][1]
        with open(seg, "r+b") as f:
            f.seek(off + size // 2)
            f.write(b"\0" * (end - off - size // 2))
        m.start()
        assert count(m) == 199, count(m)
        log = m.logtext()
        assert "torn" in log.lower(), log[-1500:]
        fill(m, 10, prefix="after/")  # appends go on after the cut
        m.kill9()
        m.start()
        assert count(m) == 199 and count(m, b"after/") == 10
    finally:
        m.cleanup()


def test_flipped_byte_in_middle_refuses_then_repair():
    m = Member()
    try:
        fill(m, 300)
        m.stop()
        seg = sorted(glob.glob(os.path.join(wal_dir(m), "*.wal")))[-1]
        recs = wal_records(seg)
        off, size = recs[len(recs) // 2]
        with open(seg, "r+b") as f:
            f.seek(off + REC_HDR + 5)
            b = f.read(1)
            f.seek(off + REC_HDR + 5)
            f.write(bytes([b[0] ^ 0x40]))
        log = start_expect_failure(m)
        name = os.path.basename(seg)
        assert name in log and str(off) in log, "error does not name file %s and offset %d: %s" % (
            name, off, log[-800:])
        v = subprocess.run([os.path.join(BIN, "ketchutl"), "wal", "verify", wal_dir(m)],
                           capture_output=True, text=True, timeout=30)
        assert v.returncode != 0 and name in (v.stdout + v.stderr), v
        r = subprocess.run([os.path.join(BIN, "ketchutl"), "wal", "repair", wal_dir(m)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r
        m.start()
        n = count(m)
        assert 0 < n < 300, "after repair %d keys (the log is cut at the bad record)" % n
    finally:
        m.cleanup()


def test_corrupt_snapshot_falls_back_then_refuses():
    m = Member(extra=["--snapshot-count", "100"])
    try:
        for k in range(7):
            fill(m, 60, prefix="s%d/" % k)
            time.sleep(0.2)  # let the snapshot of that round finish
        m.stop()
        snaps = sorted(glob.glob(os.path.join(snap_dir(m), "*.snap")))
        assert len(snaps) == 2, "want 2 snapshots kept, have %r" % snaps

        def corrupt(p):
            with open(p, "r+b") as f:
                f.seek(os.path.getsize(p) // 2)
                b = f.read(1)
                f.seek(os.path.getsize(p) // 2)
                f.write(bytes([b[0] ^ 0xff]))

        corrupt(snaps[-1])
        m.start()
        for k in range(7):
            assert count(m, b"s%d/" % k) == 60
        assert "refused" in m.logtext(), m.logtext()[-1500:]
        m.stop()
        # (the member may have taken a fresh snapshot after falling back)
        for p in glob.glob(os.path.join(snap_dir(m), "*.snap")):
            os.truncate(p, os.path.getsize(p) // 2)  # (flipping twice would undo it)
        log = start_expect_failure(m)
        assert "snapshot" in log and "verif" in log, log[-800:]
    finally:
        m.cleanup()


def test_snapshot_restore_into_a_new_data_dir():
    m = Member(extra=["--snapshot-count", "100"])
    target = tempfile.mkdtemp(prefix="ketch-restore-")
    r2 = None
    try:
        fill(m, 300)
        time.sleep(0.3)
        m.stop()
        snap = sorted(glob.glob(os.path.join(snap_dir(m), "*.snap")))[-1]
        st = subprocess.run([os.path.join(BIN, "ketchutl"), "snapshot", "status", snap, "-w", "json"],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st
        keys = json.loads(st.stdout)["totalKey"]
        dd = os.path.join(target, "d")
        r = subprocess.run([os.path.join(BIN, "ketchutl"), "snapshot", "restore", snap, "--data-dir", dd],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r
        again = subprocess.run([os.path.join(BIN, "ketchutl"), "snapshot", "restore", snap,
                                "--data-dir", dd], capture_output=True, text=True, timeout=30)
        assert again.returncode != 0 and "exists" in again.stderr, again
        r2 = Member(data_dir=target, name="restored")
        assert 0 < keys <= 300
        assert count(r2) == keys, (count(r2), keys)
        fill(r2, 5, prefix="new/")  # the restored member takes writes
        assert count(r2, b"new/") == 5
    finally:
        m.cleanup()
        if r2:
            r2.cleanup()
        shutil.rmtree(target, ignore_errors=True)


def test_disk_full_refuses_writes_keeps_acknowledged():
    mnt = tempfile.mkdtemp(prefix="ketch-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=140m", "tmpfs", mnt],
                       capture_output=True, text=True)
    assert r.returncode == 0, "cannot mount a tmpfs for the disk-full test: %s" % r.stderr
    m = None
    try:
        m = Member(data_dir=mnt)
        c = Conn(m.port)
        acked, err = [], None
        value = b"x" * 65536
        for i in range(4000):
            try:
                c.put(b"full/%05d" % i, value)
                acked.append(i)
            except ServerError as e:
                err = e
                break
        assert err is not None, "140 MB tmpfs never filled"
        assert err.code == 8 and "space" in err.message, err  # ENOSPACE
        # Reads still work, and new writes are refused with the same error.
        assert count(m, b"full/") >= len(acked)
        try:
            c.put(b"more", b"x")
            raise AssertionError("write accepted on a full disk")
        except ServerError as e:
            assert e.code == 8
        m.kill9()
        subprocess.run(["sh", "-c", "rm -f %s/d/member/snap/*.tmp" % mnt])
        m.start()
        c = Conn(m.port)
        for i in acked:
            v = c.get_value(b"full/%05d" % i)
            assert v == value, "acknowledged key %d lost after disk full" % i
    finally:
        if m:
            m.kill9()
        subprocess.run(["umount", mnt])
        shutil.rmtree(mnt, ignore_errors=True)
        if m:
            m.cleanup()


if __name__ == "__main__":
    run_tests([test_torn_tail_is_cut_and_member_starts,
               test_flipped_byte_in_middle_refuses_then_repair,
               test_corrupt_snapshot_falls_back_then_refuses,
               test_snapshot_restore_into_a_new_data_dir,
               test_disk_full_refuses_writes_keeps_acknowledged])
