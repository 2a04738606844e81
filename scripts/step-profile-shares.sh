#!/usr/bin/env bash
# Splits a CPU profile of the learner's training step (a test binary's
# -test.cpuprofile, e.g. TestStepBenchChild's) into where the time goes, the
# categories docs/results/step-vs-pytorch.md sets beside PyTorch's
# (scripts/torch_step_bench.py --profile). pprof's -top attributes a
# sample to its leaf, which puts a parallel region's work on par.Run and the
# team's goroutines; this reads every sample's whole stack instead
# (pprof -traces) and gives it to the first category that claims it:
#
#   a thread Go did not start   runtime._ExternalCode (libc, no Go stack)
#   GEMM                        under blas._Cfunc_sgemm (OpenBLAS)
#   not the step                model.New, the profiler writing itself
#   framework                   a leaf in the Go runtime or learner/par:
#                               scheduling, polling at barriers, GC
#   optimizer                   under learner/optim (AdamW, gradient norm)
#   LM head's loss              under the head's forward or backward or
#                               logSoftmax, GEMMs excepted: the log-softmax
#                               over the vocabulary and its gradient
#   attention                   under a function named *ttention*
#   the rest                    norms, rotary, SwiGLU, embedding, copies
#
# Shares are of the step's samples (all but "not the step"); the samples
# count CPU time on every thread, so with 2 threads they add up to about
# twice the wall time.
#
#   scripts/step-profile-shares.sh BINARY PROFILE
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BINARY PROFILE" >&2; exit 2; }
"${GO:-go}" tool pprof -traces "$1" "$2" 2>/dev/null | awk '
  function secs(v) {
    if (v ~ /ms$/) return substr(v, 1, length(v) - 2) / 1000
    if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1e6
    if (v ~ /ns$/) return substr(v, 1, length(v) - 2) / 1e9
    return substr(v, 1, length(v) - 1) + 0
  }
  function flush(   c) {
    if (leaf == "") return
    if (leaf ~ /_ExternalCode|^\[/ && stack !~ /aipo/) c = "a thread Go did not start (libc)"
    else if (stack ~ /blas\._Cfunc_sgemm/) c = "GEMM (OpenBLAS sgemm)"
    else if (stack ~ /model\.New|runtime\/pprof\./) c = "not the step"
    else if (leaf ~ /^(runtime|internal\/runtime|github\.com\/aipo-rl\/aipo\/learner\/par)\./) c = "framework (Go runtime, learner/par scheduling and barriers)"
    else if (stack ~ /learner\/optim\./) c = "optimizer (AdamW, gradient norm)"
    else if (stack ~ /head(Forward|Backward)|logSoftmax/) c = "LM head: log-softmax and loss gradient"
    else if (stack ~ /ttention/) c = "attention"
    else c = "the rest (norms, rotary, SwiGLU, embedding, copies)"
    t[c] += val
    if (c != "not the step") step += val
    leaf = ""; stack = ""
  }
  /^-+\+/ { flush(); inblock = 1; next }
  !inblock { next }
  leaf == "" { val = secs($1); leaf = $2; stack = $2; next }
  { stack = stack "\n" $1 }
  END {
    flush()
    printf "%.2f s of samples in the step (%.2f s not the step)\n", step, t["not the step"]
    for (c in t) if (c != "not the step") printf "%6.1f%%  %7.2f s  %s\n", 100 * t[c] / step, t[c], c
  }
' | { read -r head; echo "$head"; sort -rn; }
