#!/usr/bin/env bash
# Runs every Go benchmark of the module once at its smallest size (make
# bench-smoke, which make test runs): -short makes each benchmark pick its
# smallest shape (see its doc comment), -benchtime 1x one iteration. No
# figure is judged; a benchmark that fails, panics or outruns the timeout
# fails the run, so that a change that breaks one is seen before make bench.
# The whole output goes to build/bench-smoke.out; printed are the failures,
# every benchmark that skipped with its reason, and the wall time.
#
#   scripts/bench-smoke.sh [packages]   (GO names the go command, TAGS the
#                                        build tags, BENCH the -bench pattern)
#
# The packages default to those whose tests define a benchmark, so that no
# other test binary is linked. make test passes every peer tag (the
# benchmarks of the peers' files run too), make test-TAG its tag and the
# pattern of its benchmarks.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}
out=build/bench-smoke.out
mkdir -p build
if [ $# -eq 0 ]; then
  # shellcheck disable=SC2046
  set -- $(grep -rl --include='*_test.go' --exclude-dir=build --exclude-dir=node_modules '^func Benchmark' . |
    xargs -n1 dirname | sort -u)
fi
start=$(date +%s)
# -v prints what a skipped benchmark logs; without it a skip is silent.
"$go" test -tags "${TAGS:-}" -short -v -count=1 -timeout 10m -run '^$' -bench "${BENCH:-.}" -benchtime 1x "$@" >"$out" 2>&1
rc=$?
took=$(($(date +%s) - start))
# A benchmark's log lines (indented) come before its --- SKIP or --- FAIL
# line: hold them from the benchmark's name line on, and print them with it.
awk '
  /^Benchmark[^ \t]*$/ { held = ""; next }
  /^(    |\t)/ { held = held $0 "\n"; next }
  /^--- SKIP/ { skipped++; print; printf "%s", held; held = ""; next }
  /^(--- FAIL|FAIL|panic:)/ { print; printf "%s", held; held = ""; next }
  /^Benchmark/ { ran++; held = "" }
  END { printf "bench-smoke: %d benchmark results, %d skipped\n", ran, skipped }
' "$out"
echo "bench-smoke: $took s wall; the whole output is in $out"
if [ "$rc" -ne 0 ]; then
  echo "bench-smoke: a benchmark failed (go test exited $rc); see $out" >&2
  exit "$rc"
fi
