"""test/integration/ketchctl_lease_watch_test.py — ketchctl lease/watch against etcdctl 3.4.

Same method as ketchctl_test.py (whose helpers this reuses): a real etcd and a
real bin/ketch, the same command sequence through etcdctl and ketchctl, stdout,
stderr and exit codes compared byte for byte after normalization.

Normalized, in addition to what ketchctl_test.py normalizes (revisions
relative to each store's first one, cluster/member ids, raft terms):
  - lease ids: random on both servers. Each side's ids are learned from its
    `lease grant` outputs and replaced by L1, L2, ... in grant order (hex in
    simple output, decimal in json/fields); command arguments use {L1}...;
  - `lease timetolive`'s remaining TTL (a clock reading): the number only;
  - the order of `lease list` and of `timetolive --keys` keys (etcd iterates a
    Go map: its order is random; ketch's is sorted);
  - the header revision of a watch's canceled (compacted) response: etcd sends
    that frame with revision 0, ketch with the store's revision (section 7.12
    of net/PROTOCOL.md).
Streaming commands (watch, lease keep-alive) run in the background on both
sides while the same writes are made on both, then get SIGINT (etcdctl dies of
it; so must ketchctl) or end on their own (a revoked lease, a compacted watch).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ketchctl_test as kt  # noqa: E402

report = kt.report
TTL_RE = re.compile(r"remaining\((\d+)s\)")


class Ids:
    def __init__(self):
        self.by_side = {}  # side kind -> list of lease ids (int)

    def learn(self, side, out):
        m = re.search(r"lease ([0-9a-f]{16}) granted", out)
        n = re.search(r'(?:"ID":|"ID" : )(\d+)', out)
        if m:
            self.by_side.setdefault(side.kind, []).append(int(m.group(1), 16))
        elif n:
            self.by_side.setdefault(side.kind, []).append(int(n.group(1)))

    def hexid(self, side, n):
        return "%x" % self.by_side[side.kind][n - 1]

    def norm(self, side, text):
        for i, lid in enumerate(self.by_side.get(side.kind, [])):
            name = "L%d" % (i + 1)
            text = text.replace("%016x" % lid, name).replace(str(lid), name)
        return text


IDS = Ids()


def expand(side, args):
    return [re.sub(r"\{L(\d+)\}", lambda m: IDS.hexid(side, int(m.group(1))), a) for a in args]


def run(side, args, stdin=None, timeout=kt.TIMEOUT):
    return side.run(expand(side, args), stdin=stdin, timeout=timeout)


def norm(side, text, sort_lines=False, canceled=False):
    text = kt.norm_text(side, IDS.norm(side, text))
    text = TTL_RE.sub("remaining(<ttl>s)", text)
    text = re.sub(r'"ttl":\d+,"granted-ttl"', '"ttl":<ttl>,"granted-ttl"', text)
    text = re.sub(r'^"TTL" : \d+\n"GrantedTTL"', '"TTL" : <ttl>\n"GrantedTTL"', text, flags=re.M)
    text = re.sub(r"attached keys\(\[([^\]]*)\]\)",
                  lambda m: "attached keys([%s])" % " ".join(sorted(m.group(1).split())), text)
    text = re.sub(r'"keys":\[([^\]]*)\]',
                  lambda m: '"keys":[%s]' % ",".join(sorted(m.group(1).split(","))), text)
    text = re.sub(r'"leases":\[([^\]]*)\]',
                  lambda m: '"leases":[%s]' % ",".join(sorted(re.findall(r'\{"id":[^}]*\}', m.group(1)))), text)
    if canceled:  # etcd's canceled frame has revision 0 in its header, ketch's the store's
        text = re.sub(r',"revision":-?\d+(,"raft_term":[^}]*\},"Events":\[\],"CompactRevision":\d+,'
                      r'"Canceled":true)', r"\1", text)
        text = re.sub(r'^"Revision" : -?\d+$', '"Revision" : 0', text, flags=re.M)
    if sort_lines:
        lines = text.splitlines(True)
        head = [l for l in lines if not re.match(r'^(L\d+|"ID" : L\d+|"Key" : .*)\n?$', l)]
        body = sorted(l for l in lines if l not in head)
        text = "".join(head + body)
    return text


def check(name, e, k, sort_lines=False):
    (erc, eout, eerr), (krc, kout, kerr) = e, k
    canceled = "watch was canceled" in eerr
    eout, kout = norm(kt.E, eout, sort_lines, canceled), norm(kt.K, kout, sort_lines, canceled)
    eerr, kerr = kt.norm_stderr(kt.E, IDS.norm(kt.E, eerr)), kt.norm_stderr(kt.K, IDS.norm(kt.K, kerr))
    why = kt.diff("stdout", eout, kout) or kt.diff("stderr", eerr, kerr)
    if why is None and erc != krc:
        why = "exit code: etcdctl %d, ketchctl %d" % (erc, krc)
    report(name, why)


def c(name, args, stdin=None, sort_lines=False):
    try:
        e, k = run(kt.E, args, stdin), run(kt.K, args, stdin)
    except subprocess.TimeoutExpired as ex:
        return report(name, "timed out: %s" % ex)
    if args[:2] == ["lease", "grant"]:
        IDS.learn(kt.E, e[1])
        IDS.learn(kt.K, k[1])
    check(name, e, k, sort_lines)


def grant(ttl):
    """Grants one lease on each side (simple output), compared too."""
    c("lease/grant-%ds" % ttl, ["lease", "grant", str(ttl)])


class Stream:
    """A streaming command running on both sides."""

    def __init__(self, args, stdin=None):
        self.procs = []
        for side in (kt.E, kt.K):
            cmd = [side.ctl, "--endpoints", side.ep] + side.expand(expand(side, args))
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=kt.clean_env())
            if stdin:
                p.stdin.write(stdin.encode())
                p.stdin.flush()
            self.procs.append(p)

    def finish(self, sig=signal.SIGINT, wait=5.0):
        """Signal (unless the command ended by itself) and collect both sides."""
        res = []
        for p in self.procs:
            if sig is not None and p.poll() is None:
                p.send_signal(sig)
            try:
                out, err = p.communicate(timeout=wait)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                err += b"\n<still running: killed>"
            res.append((p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")))
        return res


def both_do(args, stdin=None):
    for side in (kt.E, kt.K):
        rc, out, err = run(side, args, stdin)
        if rc != 0:
            raise RuntimeError("%s %s: %s" % (side.kind, args, err))


def watch_case(name, args, writes, settle=0.8, sig=signal.SIGINT, stdin=None):
    try:
        s = Stream(args, stdin)
        time.sleep(settle)  # both watches established (etcdctl prints nothing on created)
        for w in writes:
            both_do(*w) if isinstance(w, tuple) else both_do(w)
        time.sleep(0.6)
        if stdin is not None:
            # end interactive input: both print the EOF error and exit by
            # themselves (a signal would race with that line)
            for p in s.procs:
                p.stdin.close()
                p.stdin = None
            sig = None
        e, k = s.finish(sig)
    except Exception as ex:  # noqa
        return report(name, "%s: %s" % (type(ex).__name__, ex))
    check(name, e, k)


def cases():
    # -- leases: grant / list / timetolive / keep-alive --once / revoke
    grant(100)  # L1
    for w in ("json", "fields"):
        c("lease/grant-" + w, ["lease", "grant", "100", "-w", w])  # not learned (no hex)
    c("err/lease-grant-no-args", ["lease", "grant"])
    c("err/lease-grant-bad-ttl", ["lease", "grant", "abc"])
    c("err/lease-grant-ttl-too-large", ["lease", "grant", "99999999999"])
    c("put/lease-k1", ["put", "lk1", "v1", "--lease={L1}"])
    c("put/lease-k2", ["put", "lk2", "v2", "--lease={L1}"])
    for w in ("simple", "json", "fields"):
        c("lease/timetolive-" + w, ["lease", "timetolive", "{L1}", "-w", w])
        c("lease/timetolive-keys-" + w, ["lease", "timetolive", "{L1}", "--keys", "-w", w],
          sort_lines=True)
        c("lease/keep-alive-once-" + w, ["lease", "keep-alive", "--once", "{L1}", "-w", w])
    c("lease/timetolive-missing", ["lease", "timetolive", "1234"])
    c("lease/timetolive-missing-json", ["lease", "timetolive", "1234", "--keys", "-w", "json"])
    c("err/lease-timetolive-no-args", ["lease", "timetolive"])
    c("err/lease-timetolive-bad-id", ["lease", "timetolive", "xyz"])
    c("err/lease-keep-alive-once-missing", ["lease", "keep-alive", "--once", "1234"])
    c("err/lease-keep-alive-no-args", ["lease", "keep-alive"])
    c("err/lease-keep-alive-table", ["lease", "keep-alive", "--once", "{L1}", "-w", "table"])
    grant(50)  # L2
    for w in ("simple", "json", "fields"):
        c("lease/list-" + w, ["lease", "list", "-w", w], sort_lines=True)
    c("err/lease-list-table", ["lease", "list", "-w", "table"])
    c("err/put-lease-bad-hex", ["put", "a", "b", "--lease=xyz"])
    # revoke deletes the attached keys
    c("lease/revoke", ["lease", "revoke", "{L1}"])
    c("get/after-revoke", ["get", "lk", "--prefix", "-w", "json"])
    c("err/lease-revoke-again", ["lease", "revoke", "{L1}"])
    c("err/lease-revoke-missing-json", ["lease", "revoke", "1234", "-w", "json"])
    c("err/lease-revoke-no-args", ["lease", "revoke"])
    c("err/lease-revoke-bad-id", ["lease", "revoke", "zz"])
    for w in ("json", "fields"):
        grant(60)
        n = len(IDS.by_side.get("ketch", []))
        c("lease/revoke-" + w, ["lease", "revoke", "{L%d}" % n, "-w", w])
    c("lease/list-after-revokes", ["lease", "list"], sort_lines=True)
    c("lease/grant-table-refused", ["lease", "grant", "100", "-w", "table"])  # granted, not shown
    # expiry: a 2 s lease and its key are gone a few seconds later on both
    grant(2)
    n = len(IDS.by_side.get("ketch", []))
    c("put/short-lease", ["put", "shortk", "v", "--lease={L%d}" % n])
    time.sleep(4.5)
    c("get/after-expiry", ["get", "shortk", "-w", "json"])
    c("lease/timetolive-expired", ["lease", "timetolive", "{L%d}" % n])
    # keep-alive streams: one renewal at once, every ttl/3 after; revoking the
    # lease ends the command ("expired or revoked." in simple output only)
    for w in ("simple", "json", "fields"):
        grant(6)
        n = len(IDS.by_side.get("ketch", []))
        try:
            s = Stream(["lease", "keep-alive", "{L%d}" % n, "-w", w])
            time.sleep(1.0)  # the first renewal (the next is due at 2 s)
            both_do(["lease", "revoke", "{L%d}" % n])
            e, k = s.finish(sig=None, wait=6.0)  # ends by itself at the next renewal
            check("lease/keep-alive-stream-" + w, e, k)
        except Exception as ex:  # noqa
            report("lease/keep-alive-stream-" + w, "%s: %s" % (type(ex).__name__, ex))
    try:
        s = Stream(["lease", "keep-alive", "1234"])
        e, k = s.finish(sig=None, wait=6.0)
        check("lease/keep-alive-stream-missing", e, k)
    except Exception as ex:  # noqa
        report("lease/keep-alive-stream-missing", "%s: %s" % (type(ex).__name__, ex))

    # -- watch: events in every format, ranges, history, compaction
    txn = ("\nput wa/3 c\nput wa/4 d\ndel wa/1\n\n\n",)
    writes = [["put", "wa/1", "a"], ["put", "wa/2", "b"], ["put", "wa/1", "a2"],
              (["txn"],) + txn, ["del", "wa/2"], ["put", "wb", "other"]]
    for w in ("simple", "json", "fields"):
        watch_case("watch/prefix-" + w, ["watch", "wa/", "--prefix", "-w", w], writes)
        watch_case("watch/prefix-prev-kv-" + w, ["watch", "wa/", "--prefix", "--prev-kv", "-w", w], writes)
    watch_case("watch/one-key", ["watch", "wa/1"], writes)
    watch_case("watch/range", ["watch", "wa/2", "wb"], writes)
    watch_case("watch/hex", ["--hex", "watch", "wa/1"], writes)
    watch_case("watch/from-old-revision", ["watch", "wa/", "--prefix", "--rev", "{r:1}"], [])
    watch_case("watch/from-old-revision-json", ["watch", "wa/1", "--rev", "{r:2}", "-w", "json"], [])
    watch_case("watch/table-refused", ["watch", "wa/1", "-w", "table"], [["put", "wa/1", "t"]])
    watch_case("watch/sigterm", ["watch", "wa/1"], [["put", "wa/1", "x"]], sig=signal.SIGTERM)
    watch_case("watch/interactive", ["watch", "-i"], [["put", "wa/1", "i1"], ["put", "wa/2", "i2"]],
               stdin="watch wa/1\nwatch wa/2 --prev-kv\nfoo bar\nwatch\n\nwatch a --prefix b\n")
    c("err/watch-no-args", ["watch"])
    c("err/watch-prefix-and-range", ["watch", "a", "b", "--prefix"])
    kt.compare("err/watch-bad-rev", ["watch", "a", "--rev", "x"], stdout_part=kt.help_part)
    # compaction: a watch from before it is canceled (exit 5)
    both_do(["put", "wa/c", "1"])
    c("compaction/for-watch", ["compaction", "{r:12}"])
    for w in ("simple", "json", "fields"):
        watch_case("watch/compacted-" + w, ["watch", "wa/", "--prefix", "--rev", "{r:3}", "-w", w],
                   [], sig=None)
    # a watch from the compaction revision C itself is served, as etcd keeps C
    # readable (C's delete went with the compaction, on both); below C it is
    # canceled with compact revision C
    try:
        both_do(["put", "wz/b", "x"])
        both_do(["txn"], "\nput wz/a 1\ndel wz/b\n\n\n")
        rc, out, _ = run(kt.K, ["get", "wz/a", "-w", "json"])
        n = json.loads(out)["header"]["revision"] - kt.K.base
        both_do(["put", "wz/a", "2"])
    except Exception as ex:  # noqa
        report("watch/at-compaction-revision", "%s: %s" % (type(ex).__name__, ex))
        n = None
    if n is not None:
        c("compaction/physical", ["compaction", "--physical", "{r:%d}" % n])
    for w in ("simple", "json") if n is not None else ():
        watch_case("watch/from-compaction-revision-" + w,
                   ["watch", "wz/", "--prefix", "--prev-kv", "--rev", "{r:%d}" % n, "-w", w],
                   [["put", "wz/a", "3"]])
        watch_case("watch/below-compaction-revision-" + w,
                   ["watch", "wz/", "--prefix", "--rev", "{r:%d}" % (n - 1), "-w", w], [], sig=None)
    # help texts
    for cmd in (["watch"], ["lease", "grant"], ["lease", "revoke"], ["lease", "timetolive"],
                ["lease", "list"], ["lease", "keep-alive"]):
        kt.compare("help/" + " ".join(cmd), cmd + ["--help"], stdout_part=kt.help_part)
    kt.compare("help/lease-group", ["lease"], stdout_part=kt.help_part)


def main():
    for path in (kt.KETCHCTL, kt.KETCH):
        if not os.access(path, os.X_OK):
            report("setup", "%s is missing (run make)" % path)
            return
    import shutil
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        report("setup", "etcd/etcdctl not installed (apt-get install etcd-server etcd-client)")
        return
    kt.E, kt.K = kt.Side("etcd"), kt.Side("ketch")
    try:
        kt.E.wait_ready()
        kt.K.wait_ready()
        cases()
        for side in (kt.E, kt.K):
            if side.proc.poll() is not None:
                report("server-" + side.kind, "exited with %s during the test: %s" % (
                    side.proc.returncode, side.logtail()))
    finally:
        kt.E.stop()
        kt.K.stop()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        report("harness", "%s: %s" % (type(e).__name__, e))
    sys.exit(1 if kt.failures else 0)
