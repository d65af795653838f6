"""test/integration/ketchctl_test.py — ketchctl against etcdctl 3.4, side by side.

Starts a real etcd (Debian etcd-server) and a real bin/ketch, each on free
127.0.0.1 ports with its own temporary data dir, then runs the SAME command
sequence through etcdctl against etcd and through ketchctl against ketch, and
compares stdout, stderr and the exit code of every step. Nothing is compared
with hand-written expectations except for ketch's own extensions (get
--count-only / --min-*/--max-* revision filters, lease compares), which are
checked against etcdctl's output of the same data, filtered here.

Normalized before comparing (and why):
  - revisions: both stores start empty and see the same writes, so they should
    agree; each side's numbers are taken relative to its own first revision
    (command arguments such as --rev use {r:N} placeholders for the same reason);
  - cluster_id, member_id, leader, raft_term, endpoint addresses: random or
    per-process by nature;
  - etcdctl's clientv3 warning log lines ({"level":"warn",...}) on stderr:
    gRPC-retry noise that ketchctl has no reason to print;
  - the program name etcdctl -> ketchctl (and "in etcd" -> "in ketch");
  - endpoint status: version (ketch's own), db size / db size in use (ketch
    keeps its store in memory + WAL, not in a bbolt file), raft index and
    applied index (etcd's log also holds membership and cluster-version
    entries); endpoint health: the time taken.
Help texts are compared up to GLOBAL OPTIONS (ketchctl has no TLS/auth/
discovery flags yet), without the lines of ketch-only get flags.

Env: KETCH_BIN = the bin dir (default ../../bin). Prints "ok NAME" /
"FAIL NAME: why" per case.
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import free_port  # noqa: E402

BIN = os.path.abspath(os.environ.get("KETCH_BIN") or
                      os.path.join(os.path.dirname(__file__), "..", "..", "bin"))
KETCHCTL = os.path.join(BIN, "ketchctl")
KETCH = os.path.join(BIN, "ketch")
TIMEOUT = 20  # seconds, per command

failures = 0


def report(name, why=None):
    global failures
    if why is None:
        print("ok ketchctl/%s" % name)
    else:
        failures += 1
        print("FAIL ketchctl/%s: %s" % (name, why))
    sys.stdout.flush()


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ETCDCTL_") and not k.startswith("KETCHCTL_")}
    env["ETCDCTL_API"] = "3"
    env.update(extra or {})
    return env


class Side:
    """One server and the CLI that talks to it."""

    def __init__(self, kind):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="ketchctl-test-%s-" % kind)
        self.port, peer = free_port(), free_port()
        self.ep = "127.0.0.1:%d" % self.port
        url, purl = "http://" + self.ep, "http://127.0.0.1:%d" % peer
        common = ["--name", "s1", "--data-dir", os.path.join(self.dir, "data"),
                  "--listen-client-urls", url, "--advertise-client-urls", url,
                  "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                  "--initial-cluster", "s1=" + purl]
        self.ctl = shutil.which("etcdctl") if kind == "etcd" else KETCHCTL
        server = shutil.which("etcd") if kind == "etcd" else KETCH
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([server] + common, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.dir)
        self.base = 0

    def wait_ready(self, timeout=15.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s: %s" % (self.kind, self.proc.returncode,
                                                                self.logtail()))
            rc, out, _ = self.run(["get", "ready-probe", "-w", "json"], timeout=3,
                                  extra=["--command-timeout", "1s"])
            if rc == 0:
                # revisions are compared relative to the store's first one
                self.base = json.loads(out)["header"].get("revision", 0) - 1
                return
            time.sleep(0.1)
        raise RuntimeError("%s not ready: %s" % (self.kind, self.logtail()))

    def logtail(self):
        try:
            with open(os.path.join(self.dir, "server.log"), "rb") as f:
                return f.read()[-1500:].decode("utf-8", "replace")
        except OSError:
            return ""

    def rev(self, n):
        return str(int(n) + self.base)

    def expand(self, args):
        return [re.sub(r"\{r:(-?\d+)\}", lambda m: self.rev(m.group(1)), a).replace("{ep}", self.ep)
                for a in args]

    def run(self, args, stdin=None, env=None, extra=None, endpoints=True, timeout=TIMEOUT):
        cmd = [self.ctl] + (["--endpoints", self.ep] if endpoints else [])
        cmd += self.expand((extra or []) + args)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if isinstance(stdin, bytes):
            stdin = re.sub(rb"\{r:(-?\d+)\}", lambda m: self.rev(m.group(1)).encode(), stdin)
        p = subprocess.run(cmd, input=stdin if stdin is not None else b"",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=clean_env(env), timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- normalization ----

REV_JSON = re.compile(r'"(revision|create_revision|mod_revision)":(\d+)')
REV_FIELDS = re.compile(r'^"(Prev)?(Revision|CreateRevision|ModRevision)" : (\d+)$', re.M)
ID_JSON = re.compile(r'"(cluster_id|member_id|leader|raft_term|raftTerm)":(\d+)')
ID_FIELDS = re.compile(r'^"(ClusterID|MemberID|Leader|RaftTerm)" : ([1-9]\d*)$', re.M)
STATUS_JSON = re.compile(r',"(version|dbSize|raftIndex|raftAppliedIndex|dbSizeInUse)":("[^"]*"|\d+)')
STATUS_FIELDS = re.compile(r'^"(Version|DBSize|RaftIndex|RaftAppliedIndex)" : (.*)$', re.M)
TOOK = re.compile(r'(took = |"took":"|"Took" : )[0-9.]+(ns|µs|us|ms|s|m[0-9.]+s)')


def norm_text(side, text):
    text = text.replace(side.ep, "<ep>")
    text = text.replace("etcdctl", "ketchctl").replace("ETCDCTL_", "KETCHCTL_")

    def rel(n):
        n = int(n)
        return str(n - side.base) if n > 0 else "0"

    text = REV_JSON.sub(lambda m: '"%s":%s' % (m.group(1), rel(m.group(2))), text)
    text = REV_FIELDS.sub(lambda m: '"%s%s" : %s' % (m.group(1) or "", m.group(2), rel(m.group(3))),
                          text)
    text = re.sub(r"^compacted revision (\d+)$", lambda m: "compacted revision " + rel(m.group(1)),
                  text, flags=re.M)
    text = ID_JSON.sub(lambda m: '"%s":<id>' % m.group(1), text)
    text = ID_FIELDS.sub(lambda m: '"%s" : <id>' % m.group(1), text)
    text = TOOK.sub(lambda m: m.group(1) + "<took>", text)
    return text


def norm_stderr(side, text):
    lines = [l for l in text.splitlines(True) if not l.startswith('{"level":')]
    return norm_text(side, "".join(lines))


def norm_status(side, out, fmt):
    """endpoint status: the fields ketch fills differently by design (see top)."""
    if fmt == "json":
        out = STATUS_JSON.sub("", out)  # dropped: ketch may leave some of them zero (omitted)
    elif fmt == "fields":
        out = STATUS_FIELDS.sub(lambda m: '"%s" : <x>' % m.group(1), out)
    elif fmt == "simple":
        rows = []
        for line in out.splitlines():
            c = line.split(", ")
            if len(c) >= 9:
                c[1], c[2], c[3], c[6], c[7], c[8] = "<id>", "<v>", "<size>", "<term>", "<i>", "<i>"
            rows.append(", ".join(c))
        out = "\n".join(rows) + ("\n" if out.endswith("\n") else "")
    return out


def parse_table(text):
    """Cells of a tablewriter table, and whether our renderer reproduces it."""
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|")]
    return rows, render_table(rows) == text


def render_table(rows):
    """olekukonko/tablewriter as etcdctl uses it: centered upper-case header,
    right-aligned cells. Checked against etcdctl's own output below."""
    if not rows:
        return ""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    sep = "+" + "+".join("-" * (x + 2) for x in w) + "+\n"
    head = "|" + "|".join(" " + " " * ((x - len(h)) // 2) + h + " " * (x - len(h) - (x - len(h)) // 2) + " "
                          for h, x in zip(rows[0], w)) + "|\n"
    body = "".join("|" + "|".join(" " + c.rjust(x) + " " for c, x in zip(r, w)) + "|\n" for r in rows[1:])
    return sep + head + sep + body + sep


def norm_table(side, out, status):
    rows, ok = parse_table(out)  # the layout is checked on the raw text
    rows = [[norm_text(side, c) for c in r] for r in rows]
    for r in rows[1:]:
        if status:
            r[1], r[2], r[3], r[6], r[7], r[8] = "<id>", "<v>", "<size>", "<term>", "<i>", "<i>"
        else:
            r[2] = "<took>"
    return rows, ok


def help_part(text):
    """A help text up to GLOBAL OPTIONS, without ketch's extra get flags."""
    text = text.split("GLOBAL OPTIONS:")[0]
    extra = re.compile(r"^      --(count-only|min-mod-rev|max-mod-rev|min-create-rev|max-create-rev)[=\[]")
    return "".join(l for l in text.splitlines(True) if not extra.match(l)).replace(" in etcd\n", " in ketch\n")


# ---- the comparison ----

E = K = None


def both(args, stdin=None, env=None, extra=None, endpoints=True):
    return (E.run(args, stdin, env, extra, endpoints), K.run(args, stdin, env, extra, endpoints))


def diff(what, a, b):
    if a == b:
        return None
    al, bl = a.splitlines(), b.splitlines()
    for i in range(max(len(al), len(bl))):
        x = al[i] if i < len(al) else "<end>"
        y = bl[i] if i < len(bl) else "<end>"
        if x != y:
            return "%s line %d: etcdctl %r, ketchctl %r" % (what, i + 1, x[:300], y[:300])
    return "%s: etcdctl %r, ketchctl %r" % (what, a[-300:], b[-300:])


def compare(name, args, stdin=None, env=None, extra=None, endpoints=True, status=False,
            stdout_part=None, stderr_last=False, plain=False):
    try:
        (erc, eout, eerr), (krc, kout, kerr) = both(args, stdin, env, extra, endpoints)
    except subprocess.TimeoutExpired as e:
        return report(name, "timed out: %s" % e)
    raw_eout, raw_kout = eout, kout
    eout, kout = norm_text(E, eout), norm_text(K, kout)
    eerr, kerr = norm_stderr(E, eerr), norm_stderr(K, kerr)
    fmt = "simple"
    full = extra or []
    for i, a in enumerate(args + full):
        if a in ("-w", "--write-out") and i + 1 < len(args + full):
            fmt = (args + full)[i + 1]
        elif a.startswith("--write-out=") or a.startswith("-w="):
            fmt = a.split("=", 1)[1]
    if status:
        eout, kout = norm_status(E, eout, fmt), norm_status(K, kout, fmt)
    if stdout_part:
        eout, kout = stdout_part(eout), stdout_part(kout)
    if stderr_last:
        eerr = (eerr.strip().splitlines() or [""])[-1]
        kerr = (kerr.strip().splitlines() or [""])[-1]
    why = None
    if fmt == "table" and erc == 0 and not plain:
        (erows, eok), (krows, kok) = norm_table(E, raw_eout, status), norm_table(K, raw_kout, status)
        if not eok:
            why = "the test's table renderer does not reproduce etcdctl's table:\n" + eout
        elif not kok:
            why = "ketchctl's table is not tablewriter's layout:\n" + kout
        elif erows != krows:
            why = "table cells: etcdctl %r, ketchctl %r" % (erows, krows)
    else:
        why = diff("stdout", eout, kout)
    if why is None:
        why = diff("stderr", eerr, kerr)
    if why is None and erc != krc:
        why = "exit code: etcdctl %d, ketchctl %d" % (erc, krc)
    report(name, why)


def ketch_only(name, check):
    try:
        why = check()
    except Exception as e:  # a broken output is a failure, not a crash of the suite
        why = "%s: %s" % (type(e).__name__, e)
    report(name, why)


def fields_without_kvs(text):
    kvline = re.compile(r'^"(Key|CreateRevision|ModRevision|Version|Value|Lease)" : ')
    return "".join(l for l in text.splitlines(True) if not kvline.match(l))


def check_count_only():
    erc, eout, _ = E.run(["get", "", "--prefix", "-w", "fields"])
    krc, kout, kerr = K.run(["get", "", "--prefix", "--count-only", "-w", "fields"])
    if krc != 0:
        return "exit %d: %s" % (krc, kerr)
    want = fields_without_kvs(norm_text(E, eout))
    return diff("stdout", want, norm_text(K, kout))


def check_count_only_simple():
    rc, out, err = K.run(["get", "a", "--count-only"])
    if rc == 128 and err == "Error: --count-only is only for `--write-out=fields`\n" and out == "":
        return None
    return "want etcdctl 3.5's refusal (exit 128), got %d %r %r" % (rc, out, err)


def json_rel(side, obj):
    """A parsed range response with ids dropped and revisions made relative."""
    obj["header"] = {"revision": obj["header"]["revision"] - side.base}
    for kv in obj.get("kvs", []):
        kv["create_revision"] -= side.base
        kv["mod_revision"] -= side.base
    return obj


def check_rev_filter(flag, field, lo):
    (erc, eout, _) = E.run(["get", "", "--prefix", "-w", "json"])
    n = 13  # a revision in the middle of the history written below
    (krc, kout, kerr) = K.run(["get", "", "--prefix", "-w", "json", "--%s={r:%d}" % (flag, n)])
    if krc != 0:
        return "exit %d: %s" % (krc, kerr)
    e, k = json_rel(E, json.loads(eout)), json_rel(K, json.loads(kout))
    keep = [kv for kv in e["kvs"] if (kv[field] >= n if lo else kv[field] <= n)]
    want = dict(e)
    want["kvs"] = keep  # etcd: the filters prune kvs; count stays the range's count
    if not keep:
        del want["kvs"]
    return None if k == want else "etcd-derived %s, ketchctl %s" % (json.dumps(want), json.dumps(k))


def check_lease_compare():
    # etcdctl 3.4 panics on any lease compare; ketchctl compares with a hex ID.
    r1 = K.run(["txn"], 'lease("a") = "0"\n\nget a --keys-only\n\n\n')
    r2 = K.run(["txn"], 'lease("a") != "0"\n\nget a\n\n\n')
    e = E.run(["get", "a", "--keys-only"])
    if r1[0] or r1[1] != "SUCCESS\n\n" + e[1]:
        return "lease = 0 on a key without lease: %r" % (r1,)
    if r2[0] or r2[1] != "FAILURE\n":
        return "lease != 0: %r" % (r2,)
    return None


def humanize_bytes(n):
    """go-humanize's Bytes(), as etcdctl prints the db size."""
    import math
    if n < 10:
        return "%d B" % n
    e = min(int(math.floor(math.log(n) / math.log(1000))), 6)
    val = math.floor(n / 1000 ** e * 10 + 0.5) / 10
    return ("%.1f %s" if val < 10 else "%.0f %s") % (val, ["B", "kB", "MB", "GB", "TB", "PB", "EB"][e])


GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|µs|ms|s)|(\d+h)?(\d+m)?\d+(\.\d+)?s)$")


def check_status_units():
    """The columns normalized away above still have etcdctl's formats: the db
    size is go-humanize's text of the JSON dbSize (checked on etcd too, which
    validates this port), the health time a Go duration."""
    for side in (E, K):
        js = json.loads(side.run(["endpoint", "status", "-w", "json"])[1])[0]["Status"]
        cols = side.run(["endpoint", "status"])[1].strip().split(", ")
        if cols[3] != humanize_bytes(js.get("dbSize", 0)):
            return "%s: db size column %r for dbSize %s" % (side.kind, cols[3], js.get("dbSize"))
        took = json.loads(side.run(["endpoint", "health", "-w", "json"])[1])[0]["took"]
        if not GO_DURATION.match(took):
            return "%s: took %r is not a Go duration" % (side.kind, took)
    return None


def check_env():
    (erc, eout, eerr), (krc, kout, kerr) = both(["get", "a"], endpoints=False,
                                                 env={"ETCDCTL_ENDPOINTS": E.ep, "KETCHCTL_ENDPOINTS": K.ep,
                                                      "ETCDCTL_WRITE_OUT": "json", "KETCHCTL_WRITE_OUT": "json"})
    return diff("stdout", norm_text(E, eout), norm_text(K, kout)) or \
        (None if erc == krc == 0 else "exit codes %d %d: %s" % (erc, krc, kerr))


def check_env_conflict():
    (erc, _, eerr), (krc, _, kerr) = both(["get", "a"], env={"ETCDCTL_ENDPOINTS": E.ep,
                                                             "KETCHCTL_ENDPOINTS": K.ep})
    # etcdctl logs this through capnslog ("<date> C | pkg/flags: ..."); ketchctl
    # prints it as an Error:. The message itself must match.
    em = eerr.split("pkg/flags: ", 1)[-1].strip().replace("ETCDCTL_", "KETCHCTL_")
    km = kerr.replace("Error: ", "", 1).strip()
    if erc != krc:
        return "exit code: etcdctl %d, ketchctl %d" % (erc, krc)
    return diff("message", em, km)


def main():
    global E, K
    for path in (KETCHCTL, KETCH):
        if not os.access(path, os.X_OK):
            report("setup", "%s is missing (run make)" % path)
            return
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        report("setup", "etcd/etcdctl not installed (apt-get install etcd-server etcd-client)")
        return
    E, K = Side("etcd"), Side("ketch")
    try:
        E.wait_ready()
        K.wait_ready()
        cases()
        for side in (E, K):
            if side.proc.poll() is not None:
                report("server-" + side.kind, "exited with %s during the test: %s" % (
                    side.proc.returncode, side.logtail()))
    finally:
        E.stop()
        K.stop()


def cases():
    c = compare
    # -- put, in every output format (table is refused after the write, exit 4)
    c("put/simple", ["put", "foo", "bar"])
    c("put/json", ["put", "foo", "bar2", "-w", "json"])
    c("put/fields-prev-kv", ["put", "foo", "bar3", "--prev-kv", "-w", "fields"])
    c("put/json-prev-kv", ["put", "foo", "bar4", "--prev-kv", "-w", "json"])
    c("put/simple-prev-kv", ["put", "foo", "bar5", "--prev-kv"])
    c("put/table-refused", ["-w", "table", "put", "foo", "bar6"])
    c("put/stdin", ["put", "k1"], stdin="from stdin\nsecond line\n")
    c("put/special-bytes", ["put", "<&>\t\"q\"", "é\"\x01\\n\x7f"])
    for k in "abcd":
        c("put/" + k, ["put", k, "v" + k])
    c("put/b-again", ["put", "b", "vb2"])
    c("put/ignore-value", ["put", "c", "--ignore-value", "-w", "json"])
    c("put/ignore-lease", ["put", "c", "vv", "--ignore-lease"])
    c("err/put-too-large", ["put", "big"], stdin="x" * 1800000)  # over the 1.5 MiB request limit
    c("put/dashdash", ["put", "--", "dash", "-v"])
    c("err/put-ignore-value-missing-key", ["put", "nokey", "--ignore-value"])
    c("err/put-ignore-lease-missing-key", ["put", "nokey", "vv", "--ignore-lease"])
    c("err/put-bad-lease", ["put", "a", "b", "--lease=zz"])
    c("err/put-empty-key", ["put", "", "x"])
    c("err/put-no-args", ["put"])
    c("err/put-empty-stdin", ["put", "k"], stdin="")
    c("err/put-ignore-value-with-value", ["put", "a", "--ignore-value", "b"])
    # -- get
    for w in ("simple", "json", "fields"):
        c("get/range-" + w, ["get", "a", "d", "-w", w])
        c("get/missing-" + w, ["get", "nokey", "-w", w])
        c("get/keys-only-" + w, ["get", "", "--prefix", "--keys-only", "-w", w])
        c("get/special-" + w, ["get", "<&>\t\"q\"", "-w", w])
        c("get/hex-" + w, ["--hex", "get", "a", "-w", w])
    c("get/one", ["get", "a"])
    c("get/prefix", ["get", "k", "--prefix"])
    c("get/from-key-limit", ["get", "b", "--from-key", "--limit", "2", "-w", "json"])
    c("get/all-limit-fields", ["get", "", "--from-key", "--limit=3", "-w", "fields"])
    # 8 keys exist here. Ties (VERSION) are in key order in etcd only because Go
    # sorts fewer than 13 items by insertion (stable); with more keys etcd's
    # order among ties is unspecified, so later sorts avoid ties.
    for target in ("KEY", "VALUE", "CREATE", "MODIFY", "VERSION"):
        for order in ("", "ASCEND", "DESCEND"):
            c("get/sort-%s-%s" % (target, order or "none"),
              ["get", "", "--prefix", "--keys-only", "--sort-by=" + target] + (["--order", order] if order else []))
    c("get/sort-lowercase", ["get", "", "--prefix", "--sort-by=value", "--order=descend", "--limit=2"])
    c("get/rev", ["get", "foo", "--rev", "{r:3}", "-w", "json"])
    c("get/rev-negative-is-current", ["get", "foo", "--rev=-1"])
    c("get/print-value-only", ["get", "", "--prefix", "--print-value-only"])
    c("get/print-value-only-hex", ["get", "a", "--print-value-only", "--hex"])
    c("get/serializable", ["get", "a", "--consistency=s", "-w", "json"])
    c("get/extra-args-ignored", ["get", "a", "c", "zzz"])
    c("get/flags-anywhere", ["-w", "json", "get", "--limit", "1", "a", "--prefix"])
    c("get/shorthand-attached", ["get", "-wjson", "a"])
    c("err/get-no-args", ["get"])
    c("err/get-prefix-from-key", ["get", "a", "--prefix", "--from-key"])
    c("err/get-range-with-prefix", ["get", "a", "b", "--prefix"])
    c("err/get-consistency", ["get", "a", "--consistency=x"])
    c("err/get-order", ["get", "a", "--order=foo"])
    c("err/get-sort-by", ["get", "a", "--sort-by=foo"])
    c("err/get-print-value-only-json", ["get", "a", "--print-value-only", "-w", "json"])
    c("err/get-table", ["get", "a", "-w", "table"])
    c("err/get-future-rev", ["get", "a", "--rev", "{r:1000}"])
    c("err/get-empty-key", ["get", ""])
    c("err/get-output-format", ["-w", "yaml", "get", "a"])
    ketch_only("err/protobuf-output", lambda: None if K.run(["get", "a", "-w", "protobuf"]) == (
        4, "", "Error: protobuf not supported as output format\n") else "want exit 4 and etcdctl's wording")
    # bad flags: etcdctl prints the command's help on stdout and the error twice
    c("err/flag-bad-int", ["get", "a", "--limit=abc"], stdout_part=help_part)
    c("err/flag-unknown", ["get", "a", "--bogus"], stdout_part=help_part)
    c("err/flag-unknown-shorthand", ["get", "-x", "a"], stdout_part=help_part)
    c("err/flag-needs-argument", ["get", "a", "--limit"], stdout_part=help_part)
    c("err/flag-bad-bool", ["get", "a", "--prefix=maybe"], stdout_part=help_part)
    c("err/flag-bad-duration", ["--dial-timeout=zz", "get", "a"], stdout_part=help_part)
    c("err/flag-bad-shorthand-value", ["put", "-w"], stdout_part=help_part)
    c("err/unknown-command", ["frob"])
    # ketch's additions to get (etcdctl 3.5's --count-only; mvcc revision filters)
    ketch_only("get/count-only-fields", check_count_only)
    ketch_only("err/get-count-only-simple", check_count_only_simple)
    ketch_only("get/min-mod-rev", lambda: check_rev_filter("min-mod-rev", "mod_revision", True))
    ketch_only("get/max-mod-rev", lambda: check_rev_filter("max-mod-rev", "mod_revision", False))
    ketch_only("get/min-create-rev", lambda: check_rev_filter("min-create-rev", "create_revision", True))
    ketch_only("get/max-create-rev", lambda: check_rev_filter("max-create-rev", "create_revision", False))
    # -- txn: etcdctl's stdin syntax
    txn_ok = 'value("a") = "va"\n\nput x 1\nget a\n\nput y 2\ndel b\n\n'
    txn_fail = 'value("a") = "zz"\n\nput x 1\nget a\n\nput y 2 --prev-kv\ndel b --prev-kv\nget "" --prefix --keys-only\n\n'
    for w in ("simple", "json", "fields"):
        c("txn/success-" + w, ["txn", "-w", w], stdin=txn_ok)
        c("txn/failure-" + w, ["txn", "-w", w], stdin=txn_fail)
    c("txn/interactive", ["txn", "-i"], stdin='ver("a") = "1"\n\nput x 2\n\nput x 3\n\n')
    c("txn/interactive-json", ["txn", "--interactive", "-w", "json"], stdin='ver("x") > "1"\n\nget x\n\n\n')
    c("txn/empty", ["txn"], stdin="\n\n\n")
    c("txn/empty-json", ["txn", "-w", "json"], stdin="\n\n\n")
    c("txn/table-refused-after-commit", ["txn", "-w", "table"], stdin='\nput t 1\n\n\n')
    for cmp in ('ver("a") = "1"', 'version("x") > "1"', 'c("a") < "{r:100}"', 'create("a") = "{r:11}"',
                'm("b") = "{r:15}"', 'mod("b") != "{r:15}"', 'val("c") = "vc"', 'value("c") != "vc"',
                'value("a\\x62") = "b"', '  value("a") = "va"  ', 'value("nokey") = ""', 'ver("nokey") = "0"'):
        c("txn/compare %s" % cmp.strip(), ["txn"], stdin=cmp + "\n\nput cmp yes\n\nput cmp no\n\n")
    c("txn/quoted-words", ["txn", "-w", "json"], stdin='\nput "k 1" "v 1"\nput "a\\tb" x\nget "k 1"\n\n\n')
    c("txn/get-options", ["txn"], stdin='\nget "" --prefix --limit 3 --sort-by=KEY --order=DESCEND --keys-only\n\n\n')
    c("txn/range-before-write", ["txn", "-w", "json"], stdin='\nget a\ndel nokey\nput z 1\nget z\n\n\n')
    c("txn/delete-range-prev", ["txn", "-w", "fields"], stdin='\ndel "k 1" --prev-kv\ndel "a\\tb" --prefix\n\n\n')
    c("err/txn-eof", ["txn"], stdin='value("a") = "va"\n\nput x 1\n\nput y 2\n')
    c("err/txn-eof-partial-line", ["txn"], stdin='value("a") = "va"')
    c("err/txn-args", ["txn", "x"])
    for name, bad in (("no-paren", "compares"), ("unquoted-key", 'value(a) = "b"'),
                      ("no-space", 'value("a")="b"'), ("no-value", 'value("a") ='),
                      ("unknown-target", 'foo("a") = "b"'), ("bad-int", 'ver("a") = "x"')):
        c("err/txn-compare-" + name, ["txn"], stdin=bad + "\n\n\n\n")
    c("err/txn-request-short", ["txn"], stdin="\nput\n\n\n")
    c("err/txn-request-unknown", ["txn"], stdin="\nfrob a b\n\n\n")
    c("err/txn-request-bad-flag", ["txn"], stdin="\nget a --bogus\n\n\n", stderr_last=True)
    c("err/txn-request-prefix-from-key", ["txn"], stdin="\ndel a --prefix --from-key\n\n\n")
    c("err/txn-empty-key", ["txn"], stdin='\nput "" v\n\n\n')
    ketch_only("txn/lease-compare", check_lease_compare)
    # -- del
    for w in ("simple", "json", "fields"):
        c("del/missing-" + w, ["del", "nokey", "-w", w])
        c("put/for-del-" + w, ["put", "dk", "dv"])
        c("del/prev-kv-" + w, ["del", "dk", "--prev-kv", "-w", w])
    c("del/prefix", ["del", "k", "--prefix"])
    c("del/range", ["del", "x", "z", "--prev-kv", "-w", "json"])
    c("del/from-key", ["del", "y", "--from-key"])
    c("err/del-table", ["del", "nokey", "-w", "table"])
    c("err/del-no-args", ["del"])
    c("err/del-three-args", ["del", "a", "b", "c"])
    c("err/del-prefix-from-key", ["del", "a", "--prefix", "--from-key"])
    c("err/del-range-with-prefix", ["del", "a", "b", "--prefix"])
    c("err/del-empty-key", ["del", ""])
    # -- compaction and compacted / future revisions
    c("compaction/simple", ["compaction", "{r:5}"])
    c("err/compaction-again", ["compaction", "{r:5}"])
    c("err/compaction-older", ["compaction", "{r:3}"])
    c("err/compaction-future", ["compaction", "{r:1000}"])
    c("compaction/physical-json", ["compaction", "{r:6}", "--physical", "-w", "json"])
    for w in ("simple", "json"):
        c("err/get-compacted-" + w, ["get", "a", "--rev", "{r:3}", "-w", w])
    c("get/at-compaction-rev", ["get", "foo", "--rev", "{r:6}", "-w", "json"])
    c("err/txn-compacted", ["txn"], stdin='\nget a --rev {r:2}\n\n\n')
    c("err/compaction-not-a-number", ["compaction", "abc"])
    c("err/compaction-no-args", ["compaction"])
    c("err/compaction-two-args", ["compaction", "1", "2"])
    # -- endpoint status / health, version
    for w in ("simple", "json", "table", "fields"):
        c("endpoint-status/" + w, ["endpoint", "status", "-w", w], status=True)
        c("endpoint-health/" + w, ["endpoint", "health", "-w", w])
        c("version/" + w, ["version", "-w", w],
          stdout_part=lambda t: re.sub(r"version: \S+", "version: <v>", t), plain=True)
    c("endpoint-status/two-endpoints", ["endpoint", "status"], status=True, endpoints=False,
      extra=["--endpoints", "{ep},{ep}"])
    c("endpoint-health/two-endpoints-json", ["endpoint", "health", "-w", "json"], endpoints=False,
      extra=["--endpoints", "{ep},{ep}"])
    ketch_only("endpoint-status/units", check_status_units)
    # -- environment variables (KETCHCTL_* as ETCDCTL_*)
    ketch_only("env/endpoints-and-write-out", check_env)
    ketch_only("env/conflict-with-flag", check_env_conflict)
    # -- unreachable endpoint: the command timeout's "context deadline exceeded"
    dead = "127.0.0.1:%d" % free_port()
    for name, args in (("get", ["get", "a"]), ("health", ["endpoint", "health"]),
                       ("health-json", ["endpoint", "health", "-w", "json"]),
                       ("status", ["endpoint", "status"]), ("status-json", ["endpoint", "status", "-w", "json"])):
        c("unreachable/" + name, args, endpoints=False,
          extra=["--endpoints", dead, "--command-timeout", "1s", "--dial-timeout", "500ms"])
    # a dead endpoint first in the list: both clients fail over to the live one
    c("failover/dead-first", ["get", "a", "-w", "json"], endpoints=False,
      extra=["--endpoints", dead + ",{ep}", "--command-timeout", "3s"])
    # -- help texts
    for cmd in (["put"], ["get"], ["del"], ["txn"], ["compaction"], ["endpoint", "status"],
                ["endpoint", "health"], ["version"]):
        c("help/" + " ".join(cmd), cmd + ["--help"], stdout_part=help_part)
    c("help/help-command", ["help", "get"], stdout_part=help_part)
    # last: a server that wrongly accepts this write shifts every later revision
    c("err/put-lease-not-found", ["put", "leased", "b", "--lease=123"])
    c("help/endpoint-group", ["endpoint"],
      stdout_part=lambda t: help_part(t).replace("\thashkv\tPrints the KV history hash for each endpoint in --endpoints\n", ""))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        report("harness", "%s: %s" % (type(e).__name__, e))
    sys.exit(1 if failures else 0)
