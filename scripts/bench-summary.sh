#!/usr/bin/env bash
# Filters `go test -bench` output (stdin) down to the benchmark lines that
# report custom metrics (b.ReportMetric units other than ns/op, B/op,
# allocs/op and MB/s), printed as they are, each after its package line,
# and the summary lines some benchmarks print (`serve-vs-vllm ...` of
# cmd/aipo's BenchmarkServeVsVLLM, `weak-scaling ...` of learner/trainer's
# BenchmarkWeakScaling, `lora-sync ...` of cmd/aipo's
# BenchmarkLoRASyncVsFull): they come out while the benchmark
# runs, before go test prints its package line and result, and are held
# until the next benchmark result line, then printed after it.
# Failures (FAIL, panic) are printed too and make the script exit 1, so that
# `make bench` fails when a benchmark does.
#
#   go test -run '^$' -bench . ./... 2>&1 | scripts/bench-summary.sh
set -uo pipefail
awk '
  /^pkg: / { pkg = $0; next }
  /^(--- FAIL|FAIL|panic:)/ { printf "%s", held; held = ""; print; failed = 1; next }
  /^(serve-vs-vllm|weak-scaling|lora-sync) / { held = held $0 "\n"; next }
  /^Benchmark/ {
    custom = 0
    # Fields after the name and iteration count come in value/unit pairs.
    for (i = 4; i <= NF; i += 2) {
      if ($i != "ns/op" && $i != "B/op" && $i != "allocs/op" && $i != "MB/s") { custom = 1 }
    }
    if (custom) {
      if (pkg != printed) { print pkg; printed = pkg }
      print
    }
    if (held != "") {
      if (pkg != printed) { print pkg; printed = pkg }
      printf "%s", held
      held = ""
    }
  }
  END { printf "%s", held; exit failed }
'
