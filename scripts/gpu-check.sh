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
# Then the aipo binary itself: `aipo train --nproc 1` (a group of one
# rank, whose learner opens the group's NCCL communicator on GPU 0) for 2
# steps of configs/quick.yaml from a carried warm start (with a cost per
# collaborator call, so that every step has samples whose rewards differ),
# on the CPU
# backend and on the cuda backend at learner.zero 1 and 3; the report
# gives each run's losses and its final weights' sha256 (the cuda runs'
# losses are to agree with the CPU run's to a few digits, not bit for bit).
#
# Build the test binaries on a development machine first, from the
# repository root (CGO_ENABLED=0: the binaries link no OpenBLAS and need no
# particular glibc version):
#
#   CGO_ENABLED=0 go test -c -o build/gpu/cuda.test ./learner/cuda
#   CGO_ENABLED=0 go test -c -o build/gpu/nccl.test ./learner/collective/nccl
#   CGO_ENABLED=0 go build -ldflags='-s -w' -o build/gpu/aipo ./cmd/aipo
#
# and the quick demo's warm start in build/gpu/warm (make gpu-test-binary
# does all of it, and also writes each binary xz-compressed beside it:
# build/gpu/carry holds what a GPU machine needs, about a third of the
# binaries' size, for machines that take a limited upload; the script
# unpacks a binary that is there only compressed). Then, on the GPU machine:
#
#   scripts/gpu-check.sh [DIR]
#
# writes DIR/cuda-gpu-report.txt (DIR defaults to $OUT, else build/gpu),
# prints its path, and exits with the tests' status. AIPO_REQUIRE_GPU=1 is
# set so that a missing driver fails instead of skipping. cuBLAS and NCCL
# folders of the Python packages found here are added to
# AIPO_CUDA_LIB_PATH. The tests take well under a minute on an H200; the
# whole run is capped at 9.5 minutes (tests 4.5, the NCCL check 1, aipo
# train 3 x 1, the PyTorch baselines 1).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=build/gpu/cuda.test
ncclbin=build/gpu/nccl.test
aipobin=build/gpu/aipo
warm=build/gpu/warm
dir=${1:-${OUT:-build/gpu}}
mkdir -p "$dir"
report="$dir/cuda-gpu-report.txt"
# A binary carried compressed (build/gpu/carry/NAME.xz) is unpacked where
# the script looks for it.
for b in "$bin" "$ncclbin" "$aipobin"; do
  packed="build/gpu/carry/$(basename "$b").xz"
  if [ ! -x "$b" ] && [ -f "$packed" ]; then
    mkdir -p build/gpu
    if command -v xz >/dev/null; then
      xz -dc "$packed" >"$b"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$packed" "$b"
    fi && chmod +x "$b"
  fi
done
[ ! -d "$warm" ] && [ -d build/gpu/carry/warm ] && warm=build/gpu/carry/warm
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
timeout 270 "$bin" -test.v -test.run 'GPU|Parity' -test.timeout 260s >>"$report" 2>&1
rc=$?
{
  echo
  echo "## nccl.test -test.v -test.run 'GPU|Load|Config' (one rank, then a rank a GPU)"
} >>"$report"
timeout 60 "$ncclbin" -test.v -test.run 'GPU|Load|Config' -test.timeout 55s >>"$report" 2>&1
nrc=$?
[ "$rc" -eq 0 ] && rc=$nrc
# aipo train --nproc 1 on the CPU and on the GPU (see the header).
{
  echo
  echo "## aipo train --nproc 1, 2 steps of configs/quick.yaml from $warm"
  if [ ! -x "$aipobin" ] || [ ! -d "$warm" ]; then
    echo "FAIL: $aipobin or the warm start $warm is missing (make gpu-test-binary builds both)"
    arc=2
  else
    arc=0
    work=$(mktemp -d)
    for c in "cpu 1" "cuda 1" "cuda 3"; do
      set -- $c
      run="$work/$1-zero$2"
      timeout 60 "$aipobin" train --config configs/quick.yaml --no-tensorboard --nproc 1 --init "$warm" --run "$run" \
        --set run.steps=2 --set eval.every=0 --set rollout.interaction_cost=0.1 --set run.allow_no_signal=false \
        --set learner.backend="$1" --set learner.zero="$2" >"$run.log" 2>&1
      r=$?
      echo "learner.backend=$1 learner.zero=$2: exit $r (124: killed after 60 s)"
      grep -E 'step [0-9]+/2: loss' "$run.log" | sed 's/^/  /'
      if [ "$r" -ne 0 ]; then
        tail -25 "$run.log" | sed 's/^/  | /'
        arc=$r
      else
        echo "  weights sha256: $(sha256sum "$run"/checkpoints/step-000002/model.safetensors | cut -c1-64)"
      fi
    done
    rm -rf "$work"
  fi
  echo "aipo train exit status: $arc"
} >>"$report" 2>&1
# (The block above runs in this shell, its output alone redirected: arc is its status.)
[ "$rc" -eq 0 ] && rc=$arc
# PyTorch eager baselines, beside TestGPULMHeadMemory and
# TestGPUTrainStepThroughput and TestGPUTrainStepThroughputQwen3.
{
  echo
  echo "## scripts/torch_baselines.py (PyTorch eager, same shapes)"
  if command -v python3 >/dev/null; then
    timeout 60 python3 scripts/torch_baselines.py 2>&1 | tail -8
  else
    echo "(no python3)"
  fi
} >>"$report"
{
  echo
  echo "## summary"
  echo "exit status: $rc (124: a part killed at its time limit)"
  echo "seconds: $(($(date +%s) - start))"
  echo "passed: $(grep -c -- '^--- PASS' "$report")"
  echo "failed: $(grep -c -- '^--- FAIL' "$report")"
  echo "skipped: $(grep -c -- '^--- SKIP' "$report")"
  echo "train step throughput:"
  grep -o 'train step, .*' "$report" | sed 's/^/  /' || echo "  (none)"
  echo "aipo train:"
  grep -E '^learner.backend=' "$report" | sed 's/^/  /' || echo "  (none)"
} >>"$report"
sed -n '/^## summary/,$p' "$report"
grep -- '^--- FAIL' "$report" || true
echo "gpu-check: report written to $report"
exit $rc
