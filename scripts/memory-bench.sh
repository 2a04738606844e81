#!/usr/bin/env bash
# Measures the host memory of a learner step on the CPU, the tree before the
# memory work and the working tree side by side, and writes
# docs/results/memory.md (see learner/internal/memorybench for what is measured).
#
#   scripts/memory-bench.sh                 every size (25M, 100M, 300M)
#   SIZES=25M scripts/memory-bench.sh       only some
#   BASE=<rev> scripts/memory-bench.sh      another tree to compare with
#
# BASE defaults to a5ab05a, the last commit before activation checkpointing,
# the gradient-free reference, the streamed optimiser state and the mapped
# weights. The before tree is exported into build/memory/base (git archive)
# and built there. Every run is a child process; a run whose
# projected memory exceeds what the machine has free is skipped and said so
# in the table. Peak RSS does not depend on the machine's load; the seconds
# do (on a shared machine, read the ratio of BenchmarkCheckpointing, which
# alternates the two modes and keeps the fastest of each).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=${BASE:-a5ab05a}
sizes=${SIZES:-25M,100M,300M}
out=${OUT:-docs/results/memory.md}
work=build/memory
mkdir -p "$work"
go build -o "$work/aipo-after" ./cmd/aipo
go build -o "$work/memorybench" ./learner/internal/memorybench
rev=$(git rev-parse --verify "$base^{commit}")
if [ "$(cat "$work/base/.rev" 2>/dev/null)" != "$rev" ]; then
  rm -rf "$work/base"
  mkdir -p "$work/base"
  git archive "$rev" | tar -x -C "$work/base"
  echo "$rev" > "$work/base/.rev"
fi
# The base tree builds with its own build/go.mod and its own overlay script
# (it predates the go.work of later trees); GOWORK=off keeps any go.work
# above it out of that build.
(cd "$work/base" && export GOWORK=off && { [ -f build/go.mod ] || scripts/beam-overlay.sh; } &&
  go build -modfile="$PWD/build/go.mod" -o "$root/$work/aipo-before" ./cmd/aipo)
"$work/memorybench" -before "$work/aipo-before" -before-label "before ($(git rev-parse --short "$base"))" \
  -after "$work/aipo-after" -work "$work/runs" -sizes "$sizes" -out "$out"
echo "memory-bench: wrote $out"
