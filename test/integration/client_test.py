"""test/integration/client_test.py — libketch as a user builds it.

Compiles client/example.c exactly as the README shows
(cc example.c $(pkg-config --cflags --libs ketch), PKG_CONFIG_PATH=lib), runs it
against a real bin/ketch, and checks what it prints; also checks that ketch.h
compiles as C++ and links against the static library. Prints "ok NAME" /
"FAIL NAME: why".
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

from harness import free_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.abspath(os.environ.get("KETCH_BIN") or os.path.join(ROOT, "bin"))
LIB = os.path.join(os.path.dirname(BIN), "lib")
ENV = dict(os.environ, PKG_CONFIG_PATH=LIB,
           ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0")


class Member:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ketch-client-it-")
        self.port = free_port()
        url = "http://127.0.0.1:%d" % self.port
        peer = "http://127.0.0.1:%d" % free_port()
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "ketch"), "--name", "m1", "--data-dir", os.path.join(self.dir, "d"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ketch exited: " + self.logtext())
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("ketch did not listen: " + self.logtext())

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.port

    def logtext(self):
        with open(os.path.join(self.dir, "log"), "rb") as f:
            return f.read().decode("utf-8", "replace")[-2000:]

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def pkg_config(*args):
    out = subprocess.run(["pkg-config"] + list(args) + ["ketch"], env=ENV,
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_example_builds_with_pkg_config_and_runs(tmp):
    exe = os.path.join(tmp, "example")
    cmd = ["cc", os.path.join(ROOT, "client", "example.c")] + \
        pkg_config("--cflags", "--libs") + ["-o", exe]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, "compile failed: %s\n%s" % (" ".join(cmd), r.stderr)
    m = Member()
    try:
        r = subprocess.run([exe, "http://" + m.endpoint], env=ENV, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, "example exited %d: %s %s" % (r.returncode, r.stdout, r.stderr)
        out = r.stdout
        mo = re.search(r"^put greeting=hello at revision (\d+)$", out, re.M)
        assert mo, out
        rev = int(mo.group(1))
        assert re.search(r"^get greeting=hello \(create %d, mod %d, version 1\)$" % (rev, rev),
                         out, re.M), out
        assert re.search(r"^txn succeeded=true revision %d$" % (rev + 1), out, re.M), out
        assert "txn read greeting=hi\n" in out, out
    finally:
        m.cleanup()
    # against nothing: a clear error, exit 1
    r = subprocess.run([exe, "127.0.0.1:%d" % free_port()], env=ENV, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "no endpoint available" in r.stderr, (r.returncode, r.stderr)


def test_header_is_cxx_and_static_lib_links(tmp):
    src = os.path.join(tmp, "x.cc")
    with open(src, "w") as f:
        f.write('#include <ketch.h>\n#include <cstdio>\n'
                'int main() {\n'
                '  ketch_put_req p{}; p.key = "k"; p.key_len = 1;\n'
                '  ketch_op op = ketch_op_put(p);\n'
                '  ketch_client *c = nullptr;\n'
                '  int err = ketch_open(&c, "bad:endpoint:x", nullptr, nullptr, 0);\n'
                '  std::printf("%d %s %d\\n", err, ketch_strerror(err), op.type);\n'
                '  return 0;\n}\n')
    exe = os.path.join(tmp, "x")
    cflags = pkg_config("--cflags")
    libs = [os.path.join(LIB, "libketch.a")] + pkg_config("--libs", "--static")
    libs = [x for x in libs if x != "-lketch"]
    r = subprocess.run(["c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", src, "-o", exe]
                       + cflags + libs + (["-fsanitize=address,undefined"]
                                          if "asan" in LIB else []),
                       env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe], env=ENV, capture_output=True, text=True, timeout=10)
    assert r.stdout == "1 invalid argument 2\n", r.stdout + r.stderr


def main():
    failed = 0
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_"):
            continue
        tmp = tempfile.mkdtemp(prefix="ketch-client-it-")
        try:
            fn(tmp)
            print("ok client/%s" % name[5:])
        except Exception as e:  # noqa: BLE001 — report any failure as FAIL
            failed += 1
            msg = str(e).replace("\n", " | ")[:600]
            print("FAIL client/%s: %s" % (name[5:], msg or type(e).__name__))
            traceback.print_exc(file=sys.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
