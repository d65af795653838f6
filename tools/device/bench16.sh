#!/bin/sh
# tools/device/bench16.sh cores|tls|proxy -- run THERE (the 16-core device machine),
# from the repository root, with .devpack/ carried (tools/device/pack.sh).
# Writes its tables and JSON under $OUT (default ./devout), each workload's
# ketch and etcd runs side by side as `make bench` does (ketch-bench compare:
# rounds alternate the targets, 100k keys, 16 B keys, 256 B values).
#   cores  issue 17: put at 256 and 1024 clients, 1 and 3 members, and a
#          linearizable range at 64, with the state thread's CPU per request
#          (ketch's default --io-threads: cores - 1, at most 8); then, if
#          .devpack has etcd's own Go benchmark, etcd's puts by it, to take
#          the ratio against etcd at its best. About 4 minutes.
#   tls    issue 15: each of put and range (linearizable, serializable) at 64
#          and 256 clients over plaintext and over TLS. About 4 minutes.
#   proxy  issue 20: ketch-grpc's cache, hit vs miss at 1, 16 and 64 calls in
#          flight, and etcd's grpc-proxy beside it (test/perf/grpc_cache_perf.py
#          without callgrind; python3 with msgpack, which the device's image
#          has). About 4 minutes.
# ROUNDS and SECONDS (3 and 3) shorten it for a try on the build machine.
set -u
MODE=${1:-cores}
D=$(pwd)/.devpack
OUT=${OUT:-$(pwd)/devout}
R=${ROUNDS:-3}
S=${SECONDS_PER_RUN:-3}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TMPDIR=${TMPDIR:-/tmp}
B="$D/bin/ketch-bench"
cmp() { # name, then ketch-bench compare's arguments
  name=$1
  shift
  echo "== $name: $*" | tee -a "$OUT/table.md"
  timeout 400 "$B" compare --ketch "$D/bin/ketch" --etcd "$D/bin/etcd" --rounds "$R" \
    --run-seconds "$S" --keys 100000 --out-dir "$OUT/$name" "$@" >>"$OUT/table.md" 2>>"$OUT/stderr.log" ||
    echo "(exit $?)" >>"$OUT/table.md"
}
{
  echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); mode $MODE"
  grep -m1 'model name' /proc/cpuinfo
} >"$OUT/table.md"
case "$MODE" in
cores)
  cmp one-member put:256 put:1024 range-l:64
  cmp three-members --members 3 put:256 put:1024
  if [ -x "$D/bin/etcd-benchmark" ]; then # etcd by its own load generator
    dir=$(mktemp -d)
    "$D/bin/etcd" --data-dir "$dir/e" --listen-client-urls http://127.0.0.1:23790 \
      --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
      >"$dir/etcd.log" 2>&1 &
    pid=$!
    sleep 3
    for c in 256 1024; do
      echo "== etcd-benchmark put, $c clients" >>"$OUT/table.md"
      timeout 120 "$D/bin/etcd-benchmark" --endpoints 127.0.0.1:23790 --conns $((c / 4)) \
        --clients "$c" put --key-size 16 --val-size 256 --total $((c * 400)) \
        --key-space-size 100000 2>&1 | tr '\r' '\n' |
        grep -E '^ *(Requests/sec|Average|Slowest|99% in)' >>"$OUT/table.md"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
  fi
  ;;
tls)
  cmp tls --tls put:64 put:256 range-l:64 range-l:256 range-s:64 range-s:256
  ;;
proxy)
  PATH="$D/bin:$PATH" KETCH_BIN="$D/bin" timeout 400 "${PYTHON:-python3}" test/perf/grpc_cache_perf.py "$S" "$R" --no-callgrind \
    >>"$OUT/table.md" 2>>"$OUT/stderr.log" || echo "(exit $?)" >>"$OUT/table.md"
  ;;
*)
  echo "usage: $0 cores|tls|proxy" >&2
  exit 2
  ;;
esac
cat "$OUT/table.md"
