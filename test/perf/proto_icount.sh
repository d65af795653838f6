#!/bin/sh
# test/perf/proto_icount.sh — instructions per encode / decode of the common
# native-protocol messages, counted by callgrind (stable on a loaded machine,
# unlike timings): runs `proto_perf --calls N` (test/perf/proto_perf.c) and
# prints each case's inclusive instructions divided by N.
#
#   make perf && test/perf/proto_icount.sh [build/perf/proto_perf] [N]
set -eu
bin=${1:-build/perf/proto_perf}
n=${2:-1000}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --calls "$n" >/dev/null 2>&1
callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$out" 2>/dev/null |
  awk -v n="$n" '$0 ~ /proto_perf\.c:ic_/ && $0 !~ /=>/ {
    gsub(",", "", $1); f = $0; sub(/.*:ic_/, "", f); sub(/ .*/, "", f)
    printf "%-24s %10.1f instructions/op\n", f, $1 / n
  }' | sort
