#!/usr/bin/env bash
# Runs one peer's tests (make test-TAG, after scripts/setup.sh peer TAG):
# the tests of the test files whose //go:build line names TAG, and those
# of other files that reach their declarations, as internal/peertags finds
# them (go run ./internal/peertags/cmd/peertests TAG lists them), package
# by package with -tags TAG through the skip gate (internal/testgate, as
# make test runs every test: a skip that scripts/allowed-skips.txt does not
# allow fails); then the tag's benchmarks once at their smallest size, as
# make bench-smoke runs them.
#
#   scripts/test-peer.sh TAG   (GO names the go command, TESTFLAGS adds flags)
set -euo pipefail
tag=${1:?usage: scripts/test-peer.sh TAG}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}
mkdir -p build/tools
"$go" build -o build/tools/peertests ./internal/peertags/cmd/peertests
"$go" build -o build/tools/testgate ./internal/testgate/cmd/testgate
list=$(build/tools/peertests "$tag")
status=0
while IFS=$'\t' read -r pkg run _; do
  [ -n "$run" ] || continue
  echo "test-$tag: $pkg -run '$run'"
  # shellcheck disable=SC2086
  build/tools/testgate -allow scripts/allowed-skips.txt -- \
    "$go" test ${TESTFLAGS:--timeout 45m} -count=1 -tags "$tag" -run "$run" -json "$pkg" || status=1
done <<<"$list"
while IFS=$'\t' read -r pkg _ bench; do
  [ -n "$bench" ] || continue
  echo "test-$tag: $pkg -bench '$bench' (once, at its smallest size)"
  GO="$go" TAGS="$tag" BENCH="$bench" scripts/bench-smoke.sh "$pkg" || status=1
done <<<"$list"
exit "$status"
