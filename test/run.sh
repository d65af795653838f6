#!/bin/sh
# The one test runner: unit binaries, fuzz-corpus replays, integration tests.
# Every test prints "ok NAME" or "FAIL NAME: why"; this counts them and ends
# with "N passed, M failed". Exit status is non-zero if anything failed.
# Filter with T=substring (e.g. T=wal make test).
O=${O:-build}
BINDIR=${BINDIR:-bin}
export KETCH_BIN=$(cd "$BINDIR" && pwd)
export O  # fault_test.py finds $O/test/linz_check
LOG=$O/test-log.txt
mkdir -p "$O"
: > "$LOG"
run() { # name command...
  name=$1; shift
  case "$name" in *"${T:-}"*) ;; *) return 0 ;; esac
  echo "== $name" >> "$LOG"
  start=$(date +%s)
  out=$("$@" 2>>"$LOG"); rc=$?
  printf '%s\n' "$out" >> "$LOG"
  printf '%s\n' "$out" | grep -E '^(ok|FAIL) ' || true
  if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
    echo "FAIL $name: exited $rc (see $LOG)"
  fi
  echo "   ($name: $(( $(date +%s) - start ))s)" >&2
}
{
for t in "$O"/test/*_test; do
  [ -x "$t" ] && run "unit/$(basename "$t")" "$t"
done
for r in "$O"/test/fuzz/*_replay; do
  [ -x "$r" ] || continue
  n=$(basename "$r" _replay)
  run "fuzz/$n" "$r" test/fuzz/corpus/"$n"
done
if command -v clang-format >/dev/null && [ -e .git ]; then
  run "lint/clang-format" sh -c 'clang-format --dry-run -Werror $(git ls-files "*.c" "*.h") 2>&1 | head -20; if clang-format --dry-run -Werror $(git ls-files "*.c" "*.h") >/dev/null 2>&1; then echo "ok lint/clang-format"; else echo "FAIL lint/clang-format: run make format"; fi'
fi
for t in test/integration/*_test.py; do
  [ -f "$t" ] && run "integration/$(basename "$t" .py)" timeout 600 /usr/bin/python3 "$t"
done
} > "$O/test-results.txt"
cat "$O/test-results.txt"
p=$(grep -c '^ok ' "$O/test-results.txt")
f=$(grep -c '^FAIL ' "$O/test-results.txt")
echo "$p passed, $f failed"
[ "$f" -eq 0 ] && [ "$p" -gt 0 ]
