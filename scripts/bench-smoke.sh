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
out=build/bench-smoke.jsonl
gate=build/tools/testgate
mkdir -p build/tools
"$go" build -o "$gate" ./internal/testgate/cmd/testgate || exit
if [ $# -eq 0 ]; then
  # shellcheck disable=SC2046
  set -- $(grep -rl --include='*_test.go' --exclude-dir=build --exclude-dir=node_modules '^func Benchmark' . |
    xargs -n1 dirname | sort -u)
fi
start=$(date +%s)
# -v prints what a skipped benchmark logs, which the gate reads as the
# skip's message.
"$go" test -tags "${TAGS:-}" -short -v -count=1 -timeout 10m -run '^$' -bench "${BENCH:-.}" -benchtime 1x -json "$@" 2>&1 |
  tee "$out" | "$gate" -allow scripts/allowed-skips.txt
status=("${PIPESTATUS[@]}")
took=$(($(date +%s) - start))
ran=$(grep -c '"Output":"Benchmark[^ ]*-[0-9]* *\\t' "$out")
echo "bench-smoke: $ran benchmark results in $took s wall; go test's event stream is in $out"
if [ "${status[0]}" -ne 0 ] || [ "${status[2]}" -ne 0 ]; then
  echo "bench-smoke: failed (go test exited ${status[0]}, the skip gate ${status[2]}); see above and $out" >&2
  exit 1
fi
