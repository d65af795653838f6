"""Moving N keys between etcd 3.4 and ketch, timed side by side (README,
"Moving from etcd (and back)"). Not part of `make test`:

    /usr/bin/python3 test/perf/etcd_migrate_perf.py [--keys 1000000] [--rounds 3]

1. a fresh etcd (Debian's etcd-server) gets N keys of 16 B with 256-byte
   values (ketch-bench, 256 clients);
2. etcd restarted on that data dir: seconds until it serves a get (its start
   on that database);
3. `etcdctl snapshot save` from it;
4. `ketchutl migrate from-etcd` of that file and of etcd's member/snap/db;
5. a ketch member started on the migrated dir: `ketchctl snapshot save`,
   `ketchutl snapshot export --etcd` of that, and `etcdctl snapshot save`
   through ketch-grpc (the bridge saves and exports in one call).
Each round runs the etcd and ketch steps one after the other (alternating,
so both meet the same load on a shared machine); medians and every value
are printed. The page cache is warm for both sides."""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "bin")
ENV = dict(os.environ, ETCDCTL_API="3")


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run(cmd, **kw):
    t = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, **kw)
    if p.returncode:
        sys.exit("%s failed: %s" % (" ".join(cmd[:4]), p.stderr.decode()[-2000:]))
    return time.monotonic() - t


def serving(cmd, timeout=120):
    """Seconds until `cmd` (a get) succeeds."""
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=ENV).returncode == 0:
            return time.monotonic() - t
        time.sleep(0.01)
    sys.exit("not serving after %ds: %s" % (timeout, cmd))


def etcd(data, cport, pport, log):
    peer, client = "http://127.0.0.1:%d" % pport, "http://127.0.0.1:%d" % cport
    return subprocess.Popen(["etcd", "--name", "p", "--data-dir", data, "--listen-client-urls", client,
                             "--advertise-client-urls", client, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", "p=" + peer,
                             "--quota-backend-bytes", str(8 << 30)], stdout=log, stderr=log)


def stop(p):
    p.terminate()
    p.wait(60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ketch-migrate-perf-")
    log = open(os.path.join(tmp, "log"), "wb")
    res, procs = {}, []
    try:
        ed, cport, pport = os.path.join(tmp, "etcd"), port(), port()
        e = etcd(ed, cport, pport, log)
        ep = "127.0.0.1:%d" % cport
        get = ["etcdctl", "--endpoints", ep, "get", "nothing"]
        serving(get)
        run([os.path.join(BIN, "ketch-bench"), "--target", "etcd", "--endpoints", ep, "--conns", "16",
             "--clients", "256", "--total", str(a.keys), "put", "--key-size", "16", "--val-size", "256",
             "--key-space-size", str(a.keys), "--sequential-keys"])
        snap, dbfile = os.path.join(tmp, "etcd.db"), os.path.join(ed, "member", "snap", "db")
        run(["etcdctl", "--endpoints", ep, "snapshot", "save", snap])
        run([os.path.join(BIN, "ketchutl"), "migrate", "from-etcd", snap, "--data-dir", os.path.join(tmp, "k")])
        kport, kpeer, gport = port(), port(), port()
        k = subprocess.Popen([os.path.join(BIN, "ketch"), "--name", "k", "--data-dir", os.path.join(tmp, "k"),
                              "--listen-client-urls", "http://127.0.0.1:%d" % kport,
                              "--listen-peer-urls", "http://127.0.0.1:%d" % kpeer], stdout=log, stderr=log)
        procs.append(k)
        kep = "127.0.0.1:%d" % kport
        res["ketch: start on the migrated dir to serving, s"] = [serving(
            [os.path.join(BIN, "ketchctl"), "--endpoints", kep, "get", "nothing"])]
        gb = subprocess.Popen([os.path.join(BIN, "ketch-grpc"), "--listen-addr", "127.0.0.1:%d" % gport,
                               "--endpoints", kep], stdout=log, stderr=log)
        procs.append(gb)
        ks = os.path.join(tmp, "k.snap")
        res["ketchctl snapshot save, s"] = [run([os.path.join(BIN, "ketchctl"), "--endpoints", kep,
                                                 "snapshot", "save", ks])]
        rows = ["etcd: etcdctl snapshot save, s", "ketchutl snapshot export --etcd, s",
                "etcdctl snapshot save through ketch-grpc, s", "etcd: restart to serving, s",
                "ketchutl migrate from-etcd (snapshot save file), s",
                "ketchutl migrate from-etcd (member/snap/db), s"]
        for r in rows:
            res[r] = []
        # alternating in each round, so both sides share the machine's moods
        for i in range(a.rounds):
            for f in (snap, os.path.join(tmp, "k.db"), os.path.join(tmp, "b.db")):
                if os.path.exists(f):
                    os.remove(f)
            res[rows[0]].append(run(["etcdctl", "--endpoints", ep, "snapshot", "save", snap]))
            res[rows[1]].append(run([os.path.join(BIN, "ketchutl"), "snapshot", "export", ks, "--etcd",
                                     os.path.join(tmp, "k.db")]))
            res[rows[2]].append(run(["etcdctl", "--endpoints", "127.0.0.1:%d" % gport, "snapshot", "save",
                                     os.path.join(tmp, "b.db")]))
            stop(e)  # its member/snap/db is whole now
            for src, row in ((snap, rows[4]), (dbfile, rows[5])):
                out = os.path.join(tmp, "m")
                shutil.rmtree(out, ignore_errors=True)
                res[row].append(run([os.path.join(BIN, "ketchutl"), "migrate", "from-etcd", src,
                                     "--data-dir", out]))
            e = etcd(ed, cport, pport, log)
            res[rows[3]].append(serving(get))
        stop(e)
        sizes = {"etcd db file, MB": os.path.getsize(dbfile) / 1e6,
                 "exported db file, MB": os.path.getsize(os.path.join(tmp, "k.db")) / 1e6}
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| %d keys (16 B keys, 256 B values), %d rounds alternating | median | all |" % (a.keys, a.rounds))
    print("|---|---|---|")
    for k, v in res.items():
        print("| %s | %.2f | %s |" % (k, statistics.median(v), " ".join("%.2f" % x for x in v)))
    for k, v in sizes.items():
        print("| %s | %.1f | |" % (k, v))


if __name__ == "__main__":
    main()
