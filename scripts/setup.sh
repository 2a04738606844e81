#!/usr/bin/env bash
# Installs what aipo's build ("build"), its tests ("test": every peer, what
# make test runs against) or one peer's tests ("peer TAG": what make
# test-TAG runs against; the tags are internal/peertags's) need on a Debian
# machine, skipping what is already present. Safe to run repeatedly. make
# check, the hermetic tier, needs none of it beyond "build".
set -euo pipefail
what=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "setup: missing packages ${missing[*]} and no apt-get; install them by hand" >&2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# What the peers need, one function each: "test" runs them all, "peer"
# those of one tag.

# DuckDB's Node API reads our shards in the interop test.
install_duckdb() {
  if command -v npm >/dev/null && [ ! -d "$root/scripts/interop/node_modules/@duckdb/node-api" ]; then
    echo "setup: installing DuckDB for the interop tests" >&2
    (cd "$root/scripts/interop" && npm install --no-audit --no-fund --silent >/dev/null)
  fi
}

# The official OpenAI Node SDK drives aipo serve in its tests.
install_openai_sdk() {
  if command -v npm >/dev/null && [ ! -f "$root/scripts/openai-sdk/node_modules/openai/package.json" ]; then
    echo "setup: installing the OpenAI Node SDK for the serve tests" >&2
    (cd "$root/scripts/openai-sdk" && npm install --no-audit --no-fund --silent >/dev/null)
  fi
}

# The portable-runner tests submit pipelines to a standalone prism job
# server bound to 127.0.0.1 (internal/beamrun/cmd/prism).
build_prism() {
  if command -v go >/dev/null && [ ! -x "$root/build/tools/prism" ]; then
    echo "setup: building the prism job server for the portable-runner tests" >&2
    (cd "$root" && go build -o "$root/build/tools/prism" ./internal/beamrun/cmd/prism) ||
      echo "setup: building prism failed; its test builds it itself" >&2
  fi
}

# The gs:// end-to-end test runs fake-gcs-server as its own process.
build_fake_gcs() {
  if command -v go >/dev/null && [ ! -x "$root/build/tools/fake-gcs-server" ]; then
    echo "setup: building fake-gcs-server for the gs:// end-to-end test" >&2
    (cd "$root" && go build -o "$root/build/tools/fake-gcs-server" github.com/fsouza/fake-gcs-server) ||
      echo "setup: building fake-gcs-server failed; its test builds it itself" >&2
  fi
}

# grpcurl drives aipo serve in its tests.
build_grpcurl() {
  if command -v go >/dev/null && [ ! -x "$root/build/tools/grpcurl" ]; then
    echo "setup: building grpcurl for the serve tests" >&2
    (cd "$root" && GOFLAGS= GOBIN="$root/build/tools" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3) ||
      echo "setup: building grpcurl failed; its test builds it itself or skips" >&2
  fi
}

# Flink 1.19.3 (from PyPI's apache-flink packages) and Beam 2.62.0's Flink
# and Spark job servers (from Maven Central) for TestFlinkAndSpark, cached
# under ~/.cache/aipo and ~/.m2.
install_engines() {
  "$root/scripts/flink/cluster.sh" install && "$root/scripts/spark/job-server.sh" install
}

case "$what" in
build)
  # libgloo-dev is Gloo, the CPU collectives engine of learner/collective/gloo
  # (its shim is compiled by cgo; libgloo0 brings libhiredis and libibverbs,
  # which libgloo.so links itself). The backend is built and tested against
  # Debian bookworm's version, pinned here.
  # libdnnl-dev is oneDNN 2.6.3, whose matmul kernels (AMX, AVX512-BF16)
  # run the decoder's bfloat16 products (learner/blas/bf16gemm.go).
  apt_install pkg-config libopenblas-dev libzstd-dev libgloo-dev libdnnl-dev
  gloo_pinned="0.0~git20220518.5b14351-3"
  gloo_have=$(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || true)
  if [ -n "$gloo_have" ] && [ "$gloo_have" != "$gloo_pinned" ]; then
    echo "setup: libgloo-dev is $gloo_have, but learner/collective/gloo is tested with $gloo_pinned; run its tests (go test ./learner/collective/...) before relying on it" >&2
  fi
  ;;
test)
  # vLLM's CPU build is the real vLLM the HTTP policy client and the vllm
  # weight sync are tested against (a Python virtual environment under
  # ~/.cache/aipo, pinned with hashes in scripts/vllm/requirements.txt).
  # Its install is mostly download: it runs beside the builds below, and a
  # failed install fails make test, with pip's reason.
  "$root/scripts/vllm.sh" &
  vllm_pid=$!
  # The library checks' Python environment (TensorBoard's own reader reads
  # back aipo train's event files), pinned with hashes in
  # scripts/pychecks/requirements.txt: beside the rest, like vLLM's, and a
  # failed install fails make test with pip's reason.
  "$root/scripts/pychecks.sh" &
  pychecks_pid=$!
  # veRL's own loss code judges aipo's losses and GRPO advantages (veRL
  # 0.9.1 and what its core_algos imports, pinned with hashes in
  # scripts/verl/requirements.txt, PyTorch shared with vLLM's): beside the
  # rest, and a failed install fails make test with pip's reason.
  "$root/scripts/verl.sh" &
  verl_pid=$!
  # Flink and Beam's Flink and Spark job servers: beside the rest, and a
  # failed install fails make test with the reason.
  install_engines &
  engines_pid=$!
  install_duckdb
  install_openai_sdk
  build_prism
  build_fake_gcs
  # NVRTC lets make test check that the committed CUDA PTX matches its
  # sources; without it (not Debian, no root) the check is skipped.
  "$root/scripts/ptx.sh" --install >/dev/null 2>&1 ||
    echo "setup: NVRTC is unavailable; make test will fail at the PTX staleness check unless AIPO_SKIP_PTX_CHECK=1" >&2
  # llama.cpp's llama-server is the real OpenAI-compatible server the HTTP
  # policy client is tested against: built once from the source npm's
  # node-llama-cpp bundles (10-20 minutes on 2 cores), cached after.
  apt_install cmake g++
  # TCMalloc: vLLM's CPU installation page preloads it (with Intel OpenMP,
  # in vLLM's environment), as make bench starts vLLM for its figures.
  apt_install libtcmalloc-minimal4
  "$root/scripts/llama-server.sh" ||
    echo "setup: building llama-server failed; its tests fail until it builds (AIPO_SKIP_LLAMA=1 skips them under go test; make test fails on any skip the list scripts/allowed-skips.txt does not allow)" >&2
  build_grpcurl
  pychecks_ok=true
  wait "$pychecks_pid" || pychecks_ok=false
  verl_ok=true
  wait "$verl_pid" || verl_ok=false
  engines_ok=true
  wait "$engines_pid" || engines_ok=false
  if ! wait "$vllm_pid"; then
    echo "setup: installing vLLM failed (see above); make test runs vLLM's tests and cannot go on without it" >&2
    exit 1
  fi
  if ! $pychecks_ok; then
    echo "setup: installing the library checks' Python environment failed (see above); make test runs the TensorBoard check and cannot go on without it" >&2
    exit 1
  fi
  if ! $verl_ok; then
    echo "setup: installing veRL's Python environment failed (see above); make test holds aipo's losses to veRL's and cannot go on without it" >&2
    exit 1
  fi
  if ! $engines_ok; then
    echo "setup: installing Flink or Beam's job servers failed (see above); make test runs the pipelines on them and cannot go on without them" >&2
    exit 1
  fi
  ;;
peer)
  # One peer tag's needs (make test-TAG), each failure fatal: the target
  # runs nothing but that peer's tests.
  tag=${2:-}
  need() { command -v "$1" >/dev/null || { echo "setup: the $tag tests need $1 ($2)" >&2; exit 1; }; }
  case "$tag" in
  vllm | torch) "$root/scripts/vllm.sh"; apt_install libtcmalloc-minimal4 ;;
  verl) "$root/scripts/verl.sh" ;;
  tensorboard) "$root/scripts/pychecks.sh" ;;
  trl) "$root/scripts/trl.sh" ;;
  flink) install_engines ;;
  portable)
    build_prism
    [ -x "$root/build/tools/prism" ] || { echo "setup: build/tools/prism is missing (see above)" >&2; exit 1; } ;;
  llamacpp)
    apt_install cmake g++
    "$root/scripts/llama-server.sh" ;;
  duckdb)
    need node "Node.js 18 or later"; need npm "npm, with Node.js"
    install_duckdb ;;
  openaisdk)
    need node "Node.js 18 or later"; need npm "npm, with Node.js"
    install_openai_sdk ;;
  grpcurl)
    build_grpcurl
    [ -x "$root/build/tools/grpcurl" ] || { echo "setup: build/tools/grpcurl is missing (see above)" >&2; exit 1; } ;;
  netns)
    apt_install iproute2
    [ "$(id -u)" -eq 0 ] || echo "setup: the netns test makes network namespaces: it runs as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN)" >&2 ;;
  shareddata)
    # Nothing to install: the files are those of the offline data folder
    # beside the checkout (or $AIPO_SHARED_DATA).
    d=${AIPO_SHARED_DATA:-}
    if [ -z "$d" ]; then
      d=$(cd "$root/.." && pwd)/shared/data
    fi
    [ -d "$d" ] || { echo "setup: the shareddata tests read ../shared/data beside the checkout (or \$AIPO_SHARED_DATA); $d is absent" >&2; exit 1; } ;;
  *)
    echo "setup: peer takes one of the peer tags of internal/peertags (the Makefile's PEER_TAGS), not \"$tag\"" >&2; exit 2 ;;
  esac
  ;;
*)
  echo "usage: setup.sh build|test|peer TAG" >&2; exit 2 ;;
esac
