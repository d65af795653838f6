"""Progress of long operations (tools/common/progress.h): `ketchctl snapshot
save` and `ketchutl snapshot restore` draw a progress line (bytes, total,
rate, time) on stderr when it is a terminal (a pty here), and print nothing
of it when stderr is a pipe; stdout is the same either way."""
import os
import pty
import select
import shutil
import subprocess
import tempfile

from harness import BIN, Conn, Member, run_tests


def run(args, tty):
    """(rc, stdout, stderr) with stderr on a pty (tty=True) or a pipe."""
    env = dict(os.environ, TERM="xterm")
    if not tty:
        p = subprocess.run(args, capture_output=True, timeout=60, env=env)
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read().decode()
    p.wait(30)
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def test_snapshot_save_and_restore_progress_only_on_a_terminal():
    m = Member(name="p")
    d = tempfile.mkdtemp(prefix="ketch-progress-")
    try:
        c = Conn(m.port)
        for i in range(300):
            c.put(b"k%04d" % i, os.urandom(4000))  # incompressible: ~1.2 MB
        c.close()
        ctl = [os.path.join(BIN, "ketchctl"), "--endpoints", m.endpoint, "snapshot", "save"]
        rc, out, err = run(ctl + [os.path.join(d, "a.snap")], tty=True)
        assert rc == 0 and out.startswith("Snapshot saved at"), (rc, out, err)
        assert "snapshot save: " in err and "/s" in err and " in " in err and "MiB" in err, err
        rc, out2, err = run(ctl + [os.path.join(d, "b.snap")], tty=False)
        assert rc == 0 and out2.startswith("Snapshot saved at") and err == "", (rc, out2, err)
        utl = [os.path.join(BIN, "ketchutl"), "snapshot", "restore", os.path.join(d, "a.snap"),
               "--data-dir"]
        rc, out, err = run(utl + [os.path.join(d, "r1")], tty=True)
        assert rc == 0 and out.startswith("restored snapshot"), (rc, out, err)
        assert "restore: " in err and "(100%)" in err and " of " in err, err
        rc, out, err = run(utl + [os.path.join(d, "r2")], tty=False)
        assert rc == 0 and out.startswith("restored snapshot") and err == "", (rc, out, err)
    finally:
        m.cleanup()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests([test_snapshot_save_and_restore_progress_only_on_a_terminal])
