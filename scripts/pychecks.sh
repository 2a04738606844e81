#!/usr/bin/env bash
# Installs the Python environment of the library checks (for now
# TensorBoard, whose own reader reads back the event files aipo train
# writes) into a virtual environment, every package pinned with its hash
# in scripts/pychecks/requirements.txt.
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing; pip's downloads are cached beside it. It is linked as
# build/tools/pychecks, where the tests look. A failed install exits
# non-zero with pip's reason.
#
# Usage: scripts/pychecks.sh [--print]   (--print: the environment's directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/scripts/pychecks/requirements.txt"

cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
key=$(sha256sum "$req" | cut -c1-12)
venv="$cache/pychecks-$key"
tools="$root/build/tools"

link() {
  mkdir -p "$tools"
  ln -sfn "$venv" "$tools/pychecks"
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
  exec 9>"$cache/pychecks-$key.lock"
  flock 9
  if installed; then
    link
    exit 0
  fi
fi

# The hashes are those of the wheels PyPI serves for CPython 3.11 to 3.13
# on x86-64 Linux (see the requirements file's header).
python=${AIPO_PYTHON:-python3}
if ! "$python" -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13)' 2>/dev/null; then
  echo "pychecks.sh: the pinned wheels are for CPython 3.11 to 3.13; $python is $("$python" --version 2>&1) (set AIPO_PYTHON to another interpreter)" >&2
  exit 1
fi

rm -rf "$venv"
"$python" -m venv "$venv"
log="$cache/pychecks-$key-install.log"
start=$(date +%s)
echo "pychecks.sh: downloading and installing TensorBoard 2.21.0 with numpy, protobuf and its other dependencies from PyPI into $venv (about 45 MB of downloads; log in $log)" >&2
if ! "$venv/bin/pip" install --disable-pip-version-check --no-input --cache-dir "$cache/pip" \
  --require-hashes --no-deps --only-binary :all: -r "$req" >"$log" 2>&1; then
  echo "pychecks.sh: pip failed to install scripts/pychecks/requirements.txt; the last lines of $log:" >&2
  tail -n 20 "$log" >&2
  rm -rf "$venv"
  exit 1
fi
# The pinned set holds together (pip check) and TensorBoard's reader
# imports without TensorFlow.
if ! got=$(cd / && "$venv/bin/pip" check --disable-pip-version-check >>"$log" 2>&1 &&
  "$venv/bin/python" -c 'import tensorboard; from tensorboard.backend.event_processing import event_accumulator; print(tensorboard.__version__)' 2>>"$log"); then
  echo "pychecks.sh: the environment was installed but does not hold together or TensorBoard's reader does not import; the last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "pychecks $key" >"$venv/.done"
link
echo "pychecks.sh: TensorBoard $got installed in $(( $(date +%s) - start )) s" >&2
