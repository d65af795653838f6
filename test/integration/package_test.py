"""Packaging: `make deb` builds build/ketch_<version>_<arch>.deb; its contents
(dpkg-deb -c), lintian without errors (when lintian is installed), the
package extracted into a throw-away root (dpkg -x, no maintainer scripts
run) whose ketch, ketchctl and man pages work, a C program built against its
header and libketch.so.0; and `make install PREFIX=... DESTDIR=...`."""
import os
import shutil
import subprocess
import tempfile

from harness import run_tests

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
O = os.environ.get("O", "build")
# the same build as the suite's (make asan: O=build/asan SAN=1), so nothing is rebuilt differently
MAKEVARS = ["O=" + O] + (["SAN=1"] if os.environ.get("SAN") == "1" else [])
S = {}


def sh(args, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 300)
    p = subprocess.run(args, cwd=ROOT, **kw)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def deb():
    if "deb" not in S:
        rc, out, err = sh(["make", "-s", "deb"] + MAKEVARS)
        assert rc == 0, out + err
        path = out.strip().splitlines()[-1]
        assert path.endswith(".deb") and os.path.exists(path), out
        S["deb"] = path
    return S["deb"]


def test_make_deb_contents():
    rc, out, err = sh(["dpkg-deb", "-c", deb()])
    assert rc == 0, err
    names = {line.split()[5].lstrip(".") for line in out.splitlines()}
    for want in ("/usr/bin/ketch", "/usr/bin/ketchctl", "/usr/bin/ketchutl", "/usr/bin/ketch-grpc",
                 "/usr/bin/ketch-bench", "/usr/lib/libketch.so.0.1.0", "/usr/lib/libketch.so.0",
                 "/usr/lib/libketch.so", "/usr/include/ketch.h", "/usr/lib/pkgconfig/ketch.pc",
                 "/lib/systemd/system/ketch.service", "/lib/systemd/system/ketch-grpc.service",
                 "/etc/default/ketch", "/usr/lib/sysusers.d/ketch.conf",
                 "/usr/share/man/man1/ketch.1.gz", "/usr/share/man/man1/ketchctl.1.gz",
                 "/usr/share/man/man1/ketchutl.1.gz", "/usr/share/man/man1/ketch-grpc.1.gz",
                 "/usr/share/man/man1/ketch-bench.1.gz", "/usr/share/man/man3/libketch.3.gz",
                 "/usr/share/doc/ketch/copyright", "/usr/share/doc/ketch/changelog.gz",
                 "/usr/share/doc/ketch/examples/ketch-alerts.yml"):
        assert want in names, want
    rc, out, err = sh(["dpkg-deb", "-f", deb(), "Package", "Version", "Depends"])
    assert "Package: ketch" in out and "libmicrohttpd12" in out and "libev4" in out, out
    rc, out, err = sh(["dpkg-deb", "--ctrl-tarfile", deb()])
    assert rc == 0


def test_lintian_no_errors():
    if not shutil.which("lintian"):
        print("# lintian not installed: not run")
        return
    rc, out, err = sh(["lintian", "--allow-root", deb()], timeout=600)
    errors = [line for line in (out + err).splitlines() if line.startswith("E:")]
    assert not errors, errors


def test_extracted_package_runs():
    d = tempfile.mkdtemp(prefix="ketch-deb-")
    try:
        rc, out, err = sh(["dpkg", "-x", deb(), d])
        assert rc == 0, err
        rc, out, err = sh([os.path.join(d, "usr/bin/ketch"), "--version"])
        assert rc == 0 and out.startswith("ketch Version: 0.1.0"), out + err
        rc, out, err = sh([os.path.join(d, "usr/bin/ketchctl"), "version"])
        assert rc == 0 and "0.1.0" in out, out + err
        rc, out, err = sh(["man", "-l", os.path.join(d, "usr/share/man/man1/ketch.1.gz")],
                          env=dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="100"))
        assert rc == 0 and "--listen-metrics-urls" in out and "KETCH(1)" in out, out[:500] + err
        # a client program against the installed header and libketch.so.0
        src = os.path.join(d, "v.c")
        with open(src, "w") as f:
            f.write('#include <ketch.h>\n#include <stdio.h>\n'
                    'int main(void) { printf("%s\\n", ketch_version()); return 0; }\n')
        exe = os.path.join(d, "v")
        rc, out, err = sh(["cc", "-o", exe, src, "-I" + os.path.join(d, "usr/include"),
                           "-L" + os.path.join(d, "usr/lib"), "-lketch"])
        assert rc == 0, err
        rc, out, err = sh(["readelf", "-d", exe])
        assert "libketch.so.0" in out, out
        rc, out, err = sh([exe], env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(d, "usr/lib")))
        assert rc == 0 and out.strip(), out + err
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_make_install_prefix():
    d = tempfile.mkdtemp(prefix="ketch-install-")
    try:
        rc, out, err = sh(["make", "-s", "install", "PREFIX=/opt/ketch", "DESTDIR=" + d] + MAKEVARS)
        assert rc == 0, out + err
        base = os.path.join(d, "opt/ketch")
        for f in ("bin/ketch", "bin/ketch-grpc", "lib/libketch.so.0", "include/ketch.h",
                  "share/man/man1/ketchctl.1", "share/man/man3/libketch.3"):
            assert os.path.exists(os.path.join(base, f)), f
        pc = open(os.path.join(base, "lib/pkgconfig/ketch.pc")).read()
        assert "prefix=/opt/ketch\n" in pc, pc
        rc, out, err = sh([os.path.join(base, "bin/ketch"), "--version"])
        assert rc == 0, err
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests([
        test_make_deb_contents,
        test_lintian_no_errors,
        test_extracted_package_runs,
        test_make_install_prefix,
    ])
