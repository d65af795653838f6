"""test/integration/tlscerts.py — the certificates TLS tests use, made here with
the openssl CLI (nothing is committed): two unrelated CAs, server, member,
client and proxy certificates, one expired, one revoked (with the CA's CRL), one
for another address, and a second generation (new CA + new server certificate)
for the rotation test.

make(dirpath) returns a dict name -> path. Keys are ECDSA P-256. Every leaf has
serverAuth and clientAuth (members present theirs in both roles) and IP SAN
127.0.0.1 plus DNS localhost, except "otherhost" (IP 127.0.0.2 only) and the
"host-*" ones of the --peer-cert-allowed-hostname test (see make)."""
import os
import subprocess

OPENSSL = "openssl"

CNF = """
[ ca ]
default_ca = CA_default
[ CA_default ]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}/newcerts
serial = {dir}/serial
crlnumber = {dir}/crlnumber
default_md = sha256
policy = policy_any
copy_extensions = copy
default_crl_days = 30
unique_subject = no
[ policy_any ]
commonName = supplied
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ v3_ca ]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[ leaf ]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = {san}
"""


def _run(args, cwd=None):
    p = subprocess.run([OPENSSL] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), p.stderr.decode()[-800:]))
    return p.stdout


def _key(path):
    _run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])


class _CA:
    def __init__(self, root, name, cn):
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "newcerts"))
        open(os.path.join(self.dir, "index.txt"), "w").close()
        with open(os.path.join(self.dir, "serial"), "w") as f:
            f.write("1000\n")
        with open(os.path.join(self.dir, "crlnumber"), "w") as f:
            f.write("01\n")
        self.key = os.path.join(root, name + "-key.pem")
        self.cert = os.path.join(root, name + ".pem")
        self.root = root
        _key(self.key)
        self.cnf = self._cnf("IP:127.0.0.1")
        _run(["req", "-new", "-x509", "-config", self.cnf, "-extensions", "v3_ca", "-key",
              self.key, "-subj", "/CN=" + cn, "-days", "3650", "-out", self.cert])

    def _cnf(self, san):
        path = os.path.join(self.dir, "openssl-%d.cnf" % abs(hash(san)))
        with open(path, "w") as f:
            f.write(CNF.format(dir=self.dir, san=san))
        return path

    def leaf(self, name, cn, san="IP:127.0.0.1,DNS:localhost", start=None, end=None):
        """cert, key of a leaf; start/end as openssl ca dates (YYMMDDHHMMSSZ)."""
        key = os.path.join(self.root, name + "-key.pem")
        csr = os.path.join(self.root, name + ".csr")
        cert = os.path.join(self.root, name + ".pem")
        _key(key)
        cnf = self._cnf(san)
        _run(["req", "-new", "-config", cnf, "-key", key, "-subj", "/CN=" + cn, "-out", csr])
        dates = ["-startdate", start, "-enddate", end] if start else ["-days", "365"]
        _run(["ca", "-batch", "-config", cnf, "-extensions", "leaf", "-cert", self.cert, "-keyfile",
              self.key, "-in", csr, "-out", cert, "-notext"] + dates)
        return cert, key

    def revoke(self, cert):
        _run(["ca", "-config", self.cnf, "-cert", self.cert, "-keyfile", self.key, "-revoke", cert])

    def crl(self, path):
        _run(["ca", "-gencrl", "-config", self.cnf, "-cert", self.cert, "-keyfile", self.key,
              "-out", path])
        return path


def make(root):
    """Everything in root (which must exist); returns name -> path."""
    out = {}
    ca = _CA(root, "ca", "ketch test CA")
    other = _CA(root, "other-ca", "unrelated CA")
    out["ca"], out["other-ca"] = ca.cert, other.cert
    for name, cn in [("server", "server"), ("member1", "member"), ("member2", "member"),
                     ("member3", "member"), ("member4", "member"), ("client", "alice"),
                     ("proxy", "ketch-grpc"), ("intruder-cn", "intruder")]:
        out[name], out[name + "-key"] = ca.leaf(name, cn)
    out["foreign"], out["foreign-key"] = other.leaf("foreign", "member")
    out["expired"], out["expired-key"] = ca.leaf("expired", "member", start="200101000000Z",
                                                 end="210101000000Z")
    out["revoked"], out["revoked-key"] = ca.leaf("revoked", "member")
    out["otherhost"], out["otherhost-key"] = ca.leaf("otherhost", "server", san="IP:127.0.0.2")
    ca.revoke(out["revoked"])
    out["crl"] = ca.crl(os.path.join(root, "crl.pem"))
    # --peer-cert-allowed-hostname: all valid for 127.0.0.1; the name member.ketch.test
    # as a DNS SAN, only as the CN (no DNS SAN), and another DNS SAN.
    out["host-san"], out["host-san-key"] = ca.leaf("host-san", "member",
                                                   san="DNS:member.ketch.test,IP:127.0.0.1")
    out["host-cn"], out["host-cn-key"] = ca.leaf("host-cn", "member.ketch.test", san="IP:127.0.0.1")
    out["host-other"], out["host-other-key"] = ca.leaf("host-other", "member.ketch.test",
                                                       san="DNS:other.ketch.test,IP:127.0.0.1")
    # The rotation: a new CA and a server certificate it signed, a client of it.
    ca2 = _CA(root, "ca2", "ketch test CA 2")
    out["ca2"] = ca2.cert
    out["server2"], out["server2-key"] = ca2.leaf("server2", "server")
    out["client2"], out["client2-key"] = ca2.leaf("client2", "alice")
    return out
