"""ketch-operator with real processes (the local driver: members are
processes on 127.0.0.1, data dirs in a temp dir). One cluster is shared by
the cases, in order: from nothing to 3 members; a member killed and
replaced (learner first, promoted only once caught up and stable); 3 -> 5;
5 -> 3 with the acting operator killed after writing an intent (the standby
finishes it); a rolling upgrade to another binary (leader last, moved away
first); verified backups on a schedule, pruned, a corrupted file reported;
two of three members killed (nothing changes, quorum loss reported);
`recover --yes` (no write acknowledged by the survivor lost); `restore` of a
backup into a new cluster. Short windows: stabilization 1s, dead-after 3s,
rounds of 200ms, operator leases of 2s."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BIN, PUT, Conn, ServerError, free_port, run_tests

OP = os.path.join(BIN, "ketch-operator")
STAB_S, DEAD_S = 1.0, 3.0
N_MACHINES = 5


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ketch-operator-it-")
        self.machines = []
        for i in range(N_MACHINES):
            self.machines.append(dict(name="n%d" % (i + 1), client=free_port(), peer=free_port(),
                                      data=os.path.join(self.dir, "n%d" % (i + 1))))
        self.ops = {}
        self.size = 3
        self.binary = ""
        self.backup = ""
        self.windows = ""
        self.spec_path = os.path.join(self.dir, "cluster.yaml")

    # ---- spec and commands ----
    def spec(self):
        lines = ["cluster: it", "size: %d" % self.size, "stabilization: %ds" % STAB_S,
                 "dead-after: %ds" % DEAD_S, "catchup-entries: 50",
                 "member-args: [--heartbeat-interval, '50', --election-timeout, '500']"]
        if self.binary:
            lines.append("binary: %s" % self.binary)
        if self.backup:
            lines.append(self.backup)
        if self.windows:
            lines.append("upgrade-windows: [%s]" % self.windows)
        lines.append("machines:")
        for m in self.machines:
            lines.append("  - {name: %s, client-url: 'http://127.0.0.1:%d', peer-url: "
                         "'http://127.0.0.1:%d', data-dir: %s}" % (m["name"], m["client"],
                                                                   m["peer"], m["data"]))
        return "\n".join(lines) + "\n"

    @property
    def endpoints(self):
        return ",".join("127.0.0.1:%d" % m["client"] for m in self.machines)

    def op(self, *args, check=True, timeout=60):
        p = subprocess.run([OP] + list(args), capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("ketch-operator %s: exit %d: %s%s" % (" ".join(args), p.returncode,
                                                                       p.stdout, p.stderr))
        return p

    def apply(self):
        with open(self.spec_path, "w") as f:
            f.write(self.spec())
        return self.op("apply", "-f", self.spec_path, "--endpoints", self.endpoints).stdout

    def status(self):
        p = self.op("status", "--endpoints", self.endpoints, "-w", "json", check=False)
        if p.returncode != 0:
            return None
        return json.loads(p.stdout)

    def start_operator(self, name, *extra):
        log = open(os.path.join(self.dir, "op-%s.log" % name), "ab")
        p = subprocess.Popen([OP, "run", "--endpoints", self.endpoints, "--interval", "200ms",
                              "--lease-ttl", "2s", "--id", name] + list(extra),
                             stdout=log, stderr=subprocess.STDOUT)
        self.ops[name] = p
        return p

    def oplog(self, name):
        try:
            with open(os.path.join(self.dir, "op-%s.log" % name)) as f:
                return f.read()
        except OSError:
            return ""

    def stop_operator(self, name, sig=signal.SIGTERM):
        p = self.ops.pop(name, None)
        if p and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # ---- members ----
    def machine(self, name):
        return [m for m in self.machines if m["name"] == name][0]

    def pid(self, name):
        try:
            with open(self.machine(name)["data"] + ".pid") as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def alive(self, name):
        pid = self.pid(name)
        if not pid:
            return False
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def kill9(self, name):
        pid = self.pid(name)
        assert pid and self.alive(name), "no member runs on %s" % name
        os.kill(pid, signal.SIGKILL)

    def conn(self, name, timeout=5):
        return Conn(self.machine(name)["client"], timeout=timeout)

    def cleanup(self):
        for n in list(self.ops):
            self.stop_operator(n, signal.SIGKILL)
        for m in self.machines:
            if self.alive(m["name"]):
                os.kill(self.pid(m["name"]), signal.SIGKILL)
        if os.environ.get("KT_OPERATOR_KEEP"):  # for a look at the logs afterwards
            sys.stderr.write("kept %s\n" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


E = None


def env():
    global E
    if E is None:
        E = Env()
    return E


def wait_for(what, fn, timeout=30, every=0.2):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ConnectionError, ServerError, AssertionError, ValueError) as e:
            last = e
        time.sleep(every)
    raise AssertionError("%s: not within %ds (last: %r)" % (what, timeout, last))


def is_settled(s, size):
    """`size` healthy voters, no learner, and nothing left to do."""
    return bool(s and s["quorum"] and s["voters"] == size and s["healthy_voters"] == size and
                s["learners"] == 0 and s["next"]["kind"] == "none" and
                all(m["healthy"] for m in s["members"]))


def settled(size):
    """A check for wait_for: the status once is_settled."""
    def check():
        s = E.status()
        return s if is_settled(s, size) else None
    return check


class Sampler:
    """The member list over time (status -w json every 0.25s)."""

    def __init__(self):
        self.samples = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            s = E.status()
            if s:
                self.samples.append((time.time(), s))
            time.sleep(0.25)

    def finish(self):
        self.stop = True
        self.t.join()
        return self.samples


def actions_since(s, seq):
    return sorted([a for a in s["actions"] if a["seq"] > seq], key=lambda a: a["seq"])


def last_seq(s):
    return max([a["seq"] for a in s["actions"]] or [0])


def check_joins(samples, before):
    """Every member that appears (is not in the status `before`) joined as a
    learner and was a voter only after a sample showed it healthy and caught
    up; there is never more than one learner."""
    first = {m["id"] for m in before["members"]}
    seen = {}
    for _, s in samples:
        assert s["learners"] <= 1, s["members"]
        for m in s["members"]:
            if m["id"] in first:
                continue
            h = seen.setdefault(m["id"], [])
            h.append((m["learner"], m["healthy"] and m["caught_up"]))
    for mid, h in seen.items():
        assert h[0][0], "member %s first seen as a voter: %r" % (mid, h[:3])
        i = next((k for k, x in enumerate(h) if not x[0]), None)
        if i is not None:
            assert any(ok for learner, ok in h[:i]), \
                "member %s promoted without being seen caught up: %r" % (mid, h[:i + 1])
    return seen


# ---- the cases, in order, on one cluster ----

def test_from_nothing_to_three_members():
    e = env()
    out = e.apply()
    assert "started n1 as the seed" in out, out
    s0 = E.status()
    assert [m["machine"] for m in s0["members"]] == ["n1"], s0
    sampler = Sampler()
    e.start_operator("A")
    s = wait_for("3 healthy voters", settled(3), timeout=40)
    samples = sampler.finish()
    acts = actions_since(s, 0)
    kinds = [(a["kind"], a["machine"], a["state"]) for a in acts]
    assert kinds == [("seed", "n1", "done"),
                     ("add-learner", "n2", "done"), ("start", "n2", "done"),
                     ("promote", "n2", "done"),
                     ("add-learner", "n3", "done"), ("start", "n3", "done"),
                     ("promote", "n3", "done")], kinds
    for start, promote in ((acts[2], acts[3]), (acts[5], acts[6])):
        waited = (promote["at"] - start["done_at"]) / 1000.0
        assert waited >= STAB_S, "promoted %.2fs after the start, stabilization %ss" % (waited, STAB_S)
        assert "caught up" in promote["reason"], promote
    seen = check_joins(samples, s0)
    assert len(seen) == 2, seen
    assert "decision step=promote" in e.oplog("A"), e.oplog("A")[-2000:]
    out = e.op("run", "--endpoints", e.endpoints, "--dry-run").stdout
    assert out.startswith("next step: none: the cluster matches the spec"), out


def test_dead_member_replaced_learner_first():
    e = env()
    s0 = E.status()
    seq0 = last_seq(s0)
    leader = s0["leader"]
    victim = [m for m in s0["members"] if m["id"] != leader][0]
    sampler = Sampler()
    e.kill9(victim["machine"])
    killed_at = time.time()
    s = wait_for("replacement done", lambda: (lambda st: st if is_settled(st, 3) and not any(
        m["id"] == victim["id"] for m in st["members"]) else None)(E.status()), timeout=40)
    samples = sampler.finish()
    acts = actions_since(s, seq0)
    kinds = [(a["kind"], a["machine"]) for a in acts]
    assert kinds == [("add-learner", "n4"), ("start", "n4"), ("promote", "n4"),
                     ("remove", victim["machine"])], kinds
    assert all(a["state"] == "done" for a in acts), acts
    assert ("replace dead %s" % victim["machine"]) in acts[0]["reason"], acts[0]
    after = acts[0]["at"] / 1000.0 - killed_at
    assert after >= DEAD_S - 0.2, "replaced %.2fs after the kill, dead-after %ss" % (after, DEAD_S)
    assert (acts[2]["at"] - acts[1]["done_at"]) / 1000.0 >= STAB_S, acts[1:3]
    # the dead member stayed a voter until its replacement was one
    for _, st in samples:
        ids = {m["id"]: m for m in st["members"]}
        if victim["id"] not in ids:
            new = [m for m in st["members"] if m["machine"] == "n4"]
            assert new and not new[0]["learner"], st["members"]
    check_joins(samples, s0)


def test_scale_three_to_five():
    e = env()
    s0 = E.status()
    seq0 = last_seq(s0)
    used = {m["machine"] for m in s0["members"]}
    free = [m["name"] for m in e.machines if m["name"] not in used]
    sampler = Sampler()
    e.size = 5
    e.apply()
    s = wait_for("5 healthy voters", settled(5), timeout=40)
    check_joins(sampler.finish(), s0)
    kinds = [(a["kind"], a["machine"]) for a in actions_since(s, seq0)]
    # one member at a time: each added, started and promoted before the next
    assert kinds == [("add-learner", free[0]), ("start", free[0]), ("promote", free[0]),
                     ("add-learner", free[1]), ("start", free[1]), ("promote", free[1])], kinds


def test_scale_five_to_three_standby_finishes_after_the_acting_operator_dies():
    e = env()
    e.stop_operator("A")  # resigns; C (paused after each intent) acts, B stands by
    e.start_operator("C", "--pause-after-intent", "30s")
    wait_for("C acts", lambda: "acting operator" in e.oplog("C"), timeout=10)
    e.start_operator("B")
    wait_for("B stands by", lambda: "standing by" in e.oplog("B"), timeout=10)
    s0 = E.status()
    seq0 = last_seq(s0)
    e.size = 3
    e.apply()
    wait_for("C paused after an intent", lambda: "pausing after intent" in e.oplog("C"), timeout=15)
    pending = [a for a in actions_since(E.status(), seq0) if a["state"] == "intent"]
    assert len(pending) == 1 and pending[0]["kind"] in ("remove", "move-leader") and \
        pending[0]["by"] == "C", pending
    e.stop_operator("C", signal.SIGKILL)
    s = wait_for("3 healthy voters", settled(3), timeout=40)
    acts = actions_since(s, seq0)
    first = [a for a in acts if a["seq"] == pending[0]["seq"]][0]
    assert first["state"] == "done" and first["by"] == "C" and first["done_by"] == "B", first
    assert "finished by successor B" in first["outcome"], first
    removes = sorted(a["machine"] for a in acts if a["kind"] == "remove")
    assert removes == ["n4", "n5"], acts  # the last machines, each removed exactly once
    assert all(a["state"] == "done" for a in acts), acts
    assert sorted(m["machine"] for m in s["members"]) == ["n1", "n2", "n3"], s["members"]
    assert "acting operator" in e.oplog("B"), e.oplog("B")[-2000:]
    assert not e.alive("n4") and not e.alive("n5")


def test_rolling_upgrade_leader_last():
    e = env()
    newbin = os.path.join(e.dir, "ketch-next")
    shutil.copy(os.path.join(BIN, "ketch"), newbin)
    s0 = E.status()
    seq0 = last_seq(s0)
    leader0 = [m["machine"] for m in s0["members"] if m["id"] == s0["leader"]][0]
    e.binary = newbin
    # outside its upgrade window the rollout waits, saying until when
    hour = (time.gmtime().tm_hour + 12) % 24
    e.windows = '"daily %02d:00-%02d:30"' % (hour, hour)
    e.apply()
    s = wait_for("the rollout waits for its window", lambda: (lambda st: st if st and "waits for an "
                 "upgrade window" in st["next"]["reason"] else None)(E.status()), timeout=20)
    assert "(3 members)" in s["next"]["reason"] and "%02d:00 UTC" % hour in s["next"]["reason"], s
    time.sleep(STAB_S)
    assert not [a for a in actions_since(E.status(), seq0) if a["kind"] == "upgrade"]
    e.windows = '"daily 00:00-24:00"'
    e.apply()
    s = wait_for("every member on the new binary",
                 lambda: (lambda st: st if is_settled(st, 3) and
                          all(m["binary"] == newbin for m in st["members"]) else None)(E.status()),
                 timeout=60)
    acts = actions_since(s, seq0)
    kinds = [a["kind"] for a in acts]
    assert kinds.count("upgrade") == 3 and kinds[-2:] == ["move-leader", "upgrade"], kinds
    assert acts[-1]["machine"] == leader0 and acts[-2]["machine"] == leader0, acts[-2:]
    assert all(a["state"] == "done" for a in acts), acts
    assert s["leader"] != s0["leader"]
    for a, b in zip(acts, acts[1:]):  # each step gated on the last one being stable
        if a["kind"] == "upgrade":
            assert (b["at"] - a["done_at"]) / 1000.0 >= STAB_S, (a, b)
    # a binary that cannot start: the first member tried is rolled back, the rollout halts
    seq1 = last_seq(s)
    e.binary = os.path.join(e.dir, "no-such-ketch")
    e.apply()
    s = wait_for("the rollout halts", lambda: (lambda st: st if st and st["next"]["kind"] == "report"
                                               and "halted" in st["next"]["reason"] else None)(
        E.status()), timeout=30)
    failed = actions_since(s, seq1)
    assert [(a["kind"], a["state"]) for a in failed] == [("upgrade", "failed")], failed
    assert "rolled back to %s" % newbin in failed[0]["outcome"], failed
    assert "upgrade of %s failed" % failed[0]["machine"] in s["next"]["reason"], s["next"]
    wait_for("healthy again on the old binary", lambda: (lambda st: st if st and all(
        m["healthy"] and m["binary"] == newbin for m in st["members"]) else None)(E.status()))
    e.binary = newbin  # applying the spec again lifts the halt: nothing left to do
    e.apply()
    wait_for("settled", settled(3), timeout=20)


def test_backups_on_schedule_verified_pruned_corruption_reported():
    e = env()
    c = e.conn("n1")
    for i in range(50):
        c.put("bk/%03d" % i, "v%d" % i)
    bdir = os.path.join(e.dir, "backups")
    e.backup = "backup: {dir: %s, interval: 2s, keep: 2, keep-for: 1h}" % bdir
    e.apply()

    def pruned():
        s = E.status()
        files = sorted(f for f in os.listdir(bdir) if f.endswith(".snap")) if os.path.isdir(bdir) else []
        pr = e.oplog("B").count("backup pruned")
        ok = [b for b in s["backups"] if b["state"] == "verified" and b["file_check"] == "ok"]
        names = sorted(b["name"] for b in s["backups"])
        # (a backup may land between the two reads: then look again)
        return (s, files) if pr >= 1 and files == names and len(ok) == 2 else None
    s, files = wait_for("backups taken, verified and pruned", pruned, timeout=40)
    log = e.oplog("B")
    assert log.count("backup verified") >= 3, log[-3000:]
    # each one's hash-kv is the cluster's at its revision
    for b in s["backups"]:
        p = subprocess.run([os.path.join(BIN, "ketchctl"), "--endpoints",
                            "127.0.0.1:%d" % e.machine("n1")["client"], "endpoint", "hashkv",
                            "--rev", str(b["revision"])], capture_output=True, text=True)
        assert p.returncode == 0 and int(p.stdout.split(",")[1]) == int(b["hash_kv"], 16), \
            (p.stdout, p.stderr, b)
    # a backup file damaged on disk is reported as such
    victim = os.path.join(bdir, s["backups"][0]["name"])
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    st = [b for b in E.status()["backups"] if b["name"] == s["backups"][0]["name"]]
    assert st and "hash mismatch" in st[0]["file_check"], st
    text = e.op("status", "--endpoints", e.endpoints).stdout
    assert "CORRUPT" in text and "hash mismatch" in text, text
    wait_for("the operator reports it",
             lambda: "backup corrupt name=%s" % s["backups"][0]["name"] in e.oplog("B"), timeout=15)
    e.backup = "backup: {dir: %s, interval: 1h, keep: 2, keep-for: 1h}" % bdir
    e.apply()


ACKED = []


def test_quorum_loss_changes_nothing():
    e = env()
    s0 = wait_for("settled", settled(3), timeout=30)
    leader = s0["leader"]
    survivor = [m for m in s0["members"] if m["id"] != leader][0]["machine"]
    others = [m["machine"] for m in s0["members"] if m["machine"] != survivor]
    stop = threading.Event()

    def writer():  # through the survivor: an ack means it applied the write
        i = 0
        c = None
        while not stop.is_set():
            try:
                c = c or e.conn(survivor, timeout=2)
                c.put("w/%06d" % i, "x")
                ACKED.append("w/%06d" % i)
                i += 1
            except (OSError, ConnectionError, ServerError):
                c = None
                time.sleep(0.05)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    time.sleep(0.5)
    for n in others:
        e.kill9(n)
    time.sleep(1.0)
    stop.set()
    t.join()
    assert len(ACKED) > 10, len(ACKED)
    seq0 = last_seq(s0)
    running = {m["name"]: e.pid(m["name"]) for m in e.machines}
    time.sleep(DEAD_S + 2)  # long past dead-after: anything it would do, it would have done
    log = e.oplog("B")
    assert "quorum lost: 1 of 3 voters answer" in log, log[-3000:]
    s = E.status()
    assert s and not s["quorum"], s
    assert last_seq(s) == seq0, actions_since(s, seq0)  # nothing was done
    assert {m["id"] for m in s["members"]} == {m["id"] for m in s0["members"]}
    assert {m["name"]: e.pid(m["name"]) for m in e.machines} == running
    assert [m["name"] for m in e.machines if e.alive(m["name"])] == [survivor]
    text = e.op("status", "--endpoints", e.endpoints).stdout
    assert "quorum LOST" in text and "quorum lost" in text, text
    e.survivor = survivor


def test_recover_yes_keeps_every_acknowledged_write():
    e = env()
    plan = e.op("recover", "--endpoints", e.endpoints).stdout
    assert "%s has the most data" % e.survivor in plan and "--yes" in plan, plan
    assert [m["name"] for m in e.machines if e.alive(m["name"])] == [e.survivor]  # plan only
    out = e.op("recover", "--endpoints", e.endpoints, "--yes").stdout
    assert "recovered: %s leads a one-member cluster" % e.survivor in out, out
    s = wait_for("grown back to 3", settled(3), timeout=60)
    c = e.conn(e.survivor)
    kvs = c.get("w/", range_end=b"w0").get("kvs") or []
    have = {kv[0].decode() for kv in kvs}
    lost = [k for k in ACKED if k not in have]
    assert not lost, "%d acknowledged writes lost, e.g. %s" % (len(lost), lost[:5])
    kinds = [a["kind"] for a in s["actions"]]
    assert "recover" in kinds, kinds
    # membership changes took a verified backup first
    assert any(b["why"].startswith("before add-learner") and b["state"] == "verified"
               for b in s["backups"]), s["backups"]


def test_restore_from_a_backup():
    e = env()
    s = E.status()
    good = [b for b in s["backups"] if b["state"] == "verified" and b["file_check"] == "ok"]
    assert good, s["backups"]
    newest = max(good, key=lambda b: b["at"])
    backup = os.path.join(e.dir, "restore-me.snap")
    shutil.copy(os.path.join(e.dir, "backups", newest["name"]), backup)
    e.stop_operator("B", signal.SIGKILL)
    for m in e.machines:
        if e.alive(m["name"]):
            os.kill(e.pid(m["name"]), signal.SIGKILL)
    wait_for("members gone", lambda: not any(e.alive(m["name"]) for m in e.machines), timeout=10)
    p = e.op("restore", "--from", backup, "-f", e.spec_path, "--endpoints", e.endpoints)
    assert "nothing done" in p.stdout, p.stdout
    p = e.op("restore", "--from", backup, "-f", e.spec_path, "--endpoints", e.endpoints, "--yes")
    assert "restored: n1 serves the backup's data (revision %d)" % newest["revision"] in p.stdout, \
        p.stdout
    e.start_operator("D")
    wait_for("grown to 3", settled(3), timeout=60)
    for n in ("n1", "n2", "n3"):  # the backup's data, on every member
        assert e.conn(n).get_value("bk/049") == b"v49"


START_SH = """#!/bin/sh
# start.sh NAME DATA_DIR CLIENT_URL PEER_URL INITIAL_CLUSTER STATE TOKEN BINARY
echo "start $*" >> "$(dirname "$0")/calls"
setsid "$8" --name "$1" --data-dir "$2" --listen-client-urls "$3" --advertise-client-urls "$3" \
  --listen-peer-urls "$4" --initial-advertise-peer-urls "$4" --initial-cluster "$5" \
  --initial-cluster-state "$6" --initial-cluster-token "$7" --heartbeat-interval 50 \
  --election-timeout 500 > "$2.log" 2>&1 < /dev/null &
echo $! > "$2.pid"
"""
STOP_SH = """#!/bin/sh
echo "stop $*" >> "$(dirname "$0")/calls"
[ -f "$1.pid" ] && kill "$(cat "$1.pid")" 2>/dev/null
rm -f "$1.pid"
exit 0
"""


def test_command_driver_fills_in_its_templates():
    d = tempfile.mkdtemp(prefix="ketch-operator-cmd-")
    ms = [dict(name="c%d" % i, client=free_port(), peer=free_port(), data=os.path.join(d, "c%d" % i))
          for i in (1, 2)]
    for name, text in (("start.sh", START_SH), ("stop.sh", STOP_SH)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    spec = ["cluster: cmd", "size: 2", "driver: command", "stabilization: 1s", "dead-after: 3s",
            "binary: %s" % os.path.join(BIN, "ketch"), "command:",
            "  start: /bin/sh %s/start.sh {name} {data_dir} {client_url} {peer_url} "
            "{initial_cluster} {initial_cluster_state} {token} {binary}" % d,
            "  stop: /bin/sh %s/stop.sh {data_dir}" % d,
            "  wipe: rm -rf {data_dir}", "machines:"]
    for m in ms:
        spec.append("  - {name: %s, client-url: 'http://127.0.0.1:%d', peer-url: "
                    "'http://127.0.0.1:%d', data-dir: %s}" % (m["name"], m["client"], m["peer"],
                                                             m["data"]))
    path = os.path.join(d, "cmd.yaml")
    with open(path, "w") as f:
        f.write("\n".join(spec) + "\n")
    eps = ",".join("127.0.0.1:%d" % m["client"] for m in ms)
    op = None
    try:
        p = subprocess.run([OP, "apply", "-f", path], capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and "pass --bootstrap" in p.stderr, (p.stdout, p.stderr)
        p = subprocess.run([OP, "apply", "-f", path, "--bootstrap"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0 and "started c1 as the seed" in p.stdout, (p.stdout, p.stderr)
        op = subprocess.Popen([OP, "run", "--endpoints", eps, "--interval", "200ms",
                               "--lease-ttl", "2s", "--id", "cmd"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def two():
            p = subprocess.run([OP, "status", "--endpoints", eps, "-w", "json"],
                               capture_output=True, text=True, timeout=30)
            s = json.loads(p.stdout) if p.returncode == 0 else None
            return s if s and s["healthy_voters"] == 2 and s["next"]["kind"] == "none" else None
        wait_for("2 healthy voters", two, timeout=30)
        with open(os.path.join(d, "calls")) as f:
            calls = f.read().splitlines()
        want1 = "start c1 %s http://127.0.0.1:%d http://127.0.0.1:%d c1=http://127.0.0.1:%d new cmd %s" % (
            ms[0]["data"], ms[0]["client"], ms[0]["peer"], ms[0]["peer"], os.path.join(BIN, "ketch"))
        want2 = "start c2 %s http://127.0.0.1:%d http://127.0.0.1:%d " \
            "c1=http://127.0.0.1:%d,c2=http://127.0.0.1:%d existing cmd" % (
                ms[1]["data"], ms[1]["client"], ms[1]["peer"], ms[0]["peer"], ms[1]["peer"])
        assert calls[0] == want1, calls
        # the joining member is stopped and wiped first (a START is idempotent)
        assert calls[1] == "stop %s" % ms[1]["data"] and calls[2].startswith(want2), calls
    finally:
        if op:
            op.kill()
            op.wait()
        for m in ms:
            try:
                with open(m["data"] + ".pid") as f:
                    os.kill(int(f.read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        shutil.rmtree(d, ignore_errors=True)


def test_no_sanitizer_reports():
    """Under `make asan`, the operators and members ran sanitized: any report
    in their logs fails the suite."""
    e = env()
    for root, _, files in os.walk(e.dir):
        for f in files:
            if f.endswith(".log"):
                with open(os.path.join(root, f), errors="replace") as fh:
                    text = fh.read()
                assert "Sanitizer" not in text and "runtime error" not in text, \
                    "%s: %s" % (f, text[-3000:])


def cleanup_last():
    if E:
        E.cleanup()


if __name__ == "__main__":
    try:
        run_tests([test_from_nothing_to_three_members, test_dead_member_replaced_learner_first,
                   test_scale_three_to_five,
                   test_scale_five_to_three_standby_finishes_after_the_acting_operator_dies,
                   test_rolling_upgrade_leader_last,
                   test_backups_on_schedule_verified_pruned_corruption_reported,
                   test_quorum_loss_changes_nothing, test_recover_yes_keeps_every_acknowledged_write,
                   test_restore_from_a_backup, test_command_driver_fills_in_its_templates,
                   test_no_sanitizer_reports])
    finally:
        cleanup_last()
