#!/bin/sh
# Install the Debian packages ketch needs that are missing (idempotent, quiet
# when everything is there). `sh test/deps.sh fuzz` adds the fuzzing toolchain.
set -e
PKGS="gcc make pkg-config libev-dev libmsgpack-dev libsodium-dev liblz4-dev libyaml-dev
python3 python3-msgpack etcd-server etcd-client procps psmisc util-linux clang-format
libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler python3-etcd3 protobuf-compiler iproute2
libssl-dev openssl curl libc-ares-dev dnsmasq libmicrohttpd-dev prometheus lintian"
[ "$1" = fuzz ] && PKGS="clang libclang-rt-14-dev"
[ "$1" = bench ] && PKGS="gnuplot-nox"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
