#!/bin/sh
# tools/device/pack.sh -- run HERE (the build machine): gathers what
# tools/device/bench16.sh needs on the 16-core device machine, which cannot
# install packages, into .devpack/ (ignored through .git/info/exclude):
#   .devpack/bin/   ketch, ketch-bench, ketch-grpc and ketchctl, and Debian's
#                   etcd 3.4 (/usr/bin/etcd); etcd's own Go load generator
#                   too, if ../shared/tools/build-etcd-benchmark.sh has
#                   built it (/tmp/etcd-bench/bin/etcd-benchmark)
#   .devpack/lib/   the shared libraries they link (libev, libsodium, lz4,
#                   OpenSSL, c-ares, libmicrohttpd, ...), not the C library
#                   itself (the device's is newer than bookworm's 2.36)
# Then, with the device tool: run(command="sh tools/device/bench16.sh cores",
# carry=[".devpack"], timeout_s=540). Stripped, the pack is about 50 MiB
# with etcd's load generator (36 without) of the 64 MiB a call carries,
# the working tree (about 8 MiB) included.
set -eu
cd "$(dirname "$0")/../.."
make -s all
rm -rf .devpack
mkdir -p .devpack/bin .devpack/lib
grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.devpack/' >>.git/info/exclude; }
for b in ketch ketch-bench ketch-grpc ketchctl; do cp "bin/$b" .devpack/bin/; done
cp /usr/bin/etcd .devpack/bin/etcd
[ -x /tmp/etcd-bench/bin/etcd-benchmark ] && cp /tmp/etcd-bench/bin/etcd-benchmark .devpack/bin/
for b in .devpack/bin/ketch*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
  libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
  *) cp -L "$lib" .devpack/lib/ ;;
  esac
done
strip .devpack/bin/* .devpack/lib/* # debug info and symbols: a call carries 64 MiB in all
du -sh .devpack
