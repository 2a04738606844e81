#!/usr/bin/env bash
# Runs the CUDA backend's GPU and kernel parity tests (learner/cuda,
# TestGPU* and TestParity*) on a machine with an NVIDIA GPU and writes one
# report: each kernel against the CPU code, a training step and greedy
# decoding of the tiny Qwen2, Llama 3 and Qwen3 fixture configurations (the
# Qwen3 ones with the per-head q/k norm kernels), and the throughput of a
# training step at Qwen2.5-0.5B and Qwen3-0.6B shapes. The GPU machine needs no Go and no CUDA toolkit: only the driver
# (libcuda.so.1) and cuBLAS 12 or 13 (a system install or PyTorch's wheels).
#
# It also runs the NCCL backend's GPU tests (learner/collective/nccl):
# TestGPUNCCLOneRank (every collective and a 64 MiB all-reduce on GPU 0)
# and TestGPUNCCLGroup (every collective with a rank a GPU, up to 4, each
# rank a process of the test binary: one rank on a one-GPU machine, since
# NCCL refuses two ranks on one GPU). NCCL comes from the libnccl2
# package, the nvidia-nccl-cu12 wheel of a Python here, or a
# libnccl.so.2 carried to the GPU machine in build/gpu/lib (that folder,
# when it exists, is searched first for every library the tests load).
# These tests have run only over the stand-in NCCL of make test
# (testdata/fakenccl.c) so far.
#
# Build the test binaries on a development machine first, from the
# repository root (CGO_ENABLED=0: the binaries link no OpenBLAS and need no
# particular glibc version):
#
#   CGO_ENABLED=0 go test -c -o build/gpu/cuda.test ./learner/cuda
#   CGO_ENABLED=0 go test -c -o build/gpu/nccl.test ./learner/collective/nccl
#
# (make gpu-test-binary does the same). Then, on the GPU machine:
#
#   scripts/gpu-check.sh [DIR]
#
# writes DIR/cuda-gpu-report.txt (DIR defaults to $OUT, else build/gpu),
# prints its path, and exits with the tests' status. AIPO_REQUIRE_GPU=1 is
# set so that a missing driver fails instead of skipping. cuBLAS folders of
# the Python packages found here are added to AIPO_CUDA_LIB_PATH. The tests
# take well under a minute on an H200; the whole run is capped at 9 minutes
# (tests 6, the NCCL check 1.5, the PyTorch baselines under 2).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=build/gpu/cuda.test
ncclbin=build/gpu/nccl.test
dir=${1:-${OUT:-build/gpu}}
mkdir -p "$dir"
report="$dir/cuda-gpu-report.txt"
for b in "$bin" "$ncclbin"; do
  if [ ! -x "$b" ]; then
    echo "gpu-check: $b is missing; build it first (make gpu-test-binary, or see the header of $0)" | tee "$report" >&2
    exit 2
  fi
done

# cuBLAS from Python wheels: nvidia/*/lib folders holding libcublas.
extra=""
for py in python3 python; do
  command -v "$py" >/dev/null || continue
  sites=$(timeout 30 "$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) || continue
  for s in $sites; do
    for d in "$s"/nvidia/*/lib; do
      if compgen -G "$d/libcublas.so.*" >/dev/null || compgen -G "$d/libnccl.so.*" >/dev/null; then extra="$extra:$d"; fi
    done
  done
  break
done
carried=""
[ -d build/gpu/lib ] && carried="$root/build/gpu/lib:"
export AIPO_CUDA_LIB_PATH="$carried${AIPO_CUDA_LIB_PATH:-}$extra"
export AIPO_REQUIRE_GPU=1

{
  echo "# aipo CUDA backend GPU check"
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "host: $(uname -srm)"
  echo "test binary: $bin ($(stat -c %s "$bin") bytes)"
  echo "AIPO_CUDA_LIB_PATH=$AIPO_CUDA_LIB_PATH"
  echo
  echo "## nvidia-smi"
  timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi unavailable)"
  echo
  echo "## CUDA libraries known to the dynamic loader"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcublas|libnccl' || echo "(none)"
  echo
  echo "## go test -test.v -test.run 'GPU|Parity'"
} >"$report" 2>&1

start=$(date +%s)
timeout 360 "$bin" -test.v -test.run 'GPU|Parity' -test.timeout 340s >>"$report" 2>&1
rc=$?
{
  echo
  echo "## nccl.test -test.v -test.run 'GPU|Load|Config' (one rank, then a rank a GPU)"
} >>"$report"
timeout 90 "$ncclbin" -test.v -test.run 'GPU|Load|Config' -test.timeout 80s >>"$report" 2>&1
nrc=$?
[ "$rc" -eq 0 ] && rc=$nrc
# PyTorch eager baselines, beside TestGPULMHeadMemory and
# TestGPUTrainStepThroughput and TestGPUTrainStepThroughputQwen3.
{
  echo
  echo "## scripts/torch_baselines.py (PyTorch eager, same shapes)"
  if command -v python3 >/dev/null; then
    timeout 110 python3 scripts/torch_baselines.py 2>&1 | tail -8
  else
    echo "(no python3)"
  fi
} >>"$report"
{
  echo
  echo "## summary"
  echo "exit status: $rc (124: killed after 360 s)"
  echo "seconds: $(($(date +%s) - start))"
  echo "passed: $(grep -c -- '^--- PASS' "$report")"
  echo "failed: $(grep -c -- '^--- FAIL' "$report")"
  echo "skipped: $(grep -c -- '^--- SKIP' "$report")"
  echo "train step throughput:"
  grep -o 'train step, .*' "$report" | sed 's/^/  /' || echo "  (none)"
} >>"$report"
sed -n '/^## summary/,$p' "$report"
grep -- '^--- FAIL' "$report" || true
echo "gpu-check: report written to $report"
exit $rc
