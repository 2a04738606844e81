#!/usr/bin/env bash
# Installs the Python environment of the library checks (for now
# TensorBoard, whose own reader reads back the event files aipo train
# writes) into a virtual environment, every package pinned with its hash
# in scripts/pychecks/requirements.txt (wheels for CPython 3.11 to 3.13 on
# x86-64 Linux; see its header).
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing (pip is given a cache beside it, which it fills only
# where PyPI's files come with caching headers). It is linked as
# build/tools/pychecks, where the tests look. A failed install exits
# non-zero with pip's reason (scripts/lib/pyvenv.sh).
#
# Usage: scripts/pychecks.sh [--print]   (--print: the environment's directory)
set -euo pipefail
. "$(dirname "$0")/lib/pyvenv.sh"
[ "${1:-}" = "--print" ] && export PYVENV_PRINT=1
# The pinned set holds together (pip check) and TensorBoard's reader
# imports without TensorFlow.
pyvenv_install pychecks "$(dirname "$0")/pychecks/requirements.txt" 11 13 \
  "TensorBoard 2.21.0 with numpy, protobuf and its other dependencies (about 45 MB of downloads)" \
  'import subprocess, sys; subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], check=True, stdout=subprocess.DEVNULL); import tensorboard; from tensorboard.backend.event_processing import event_accumulator; print("TensorBoard", tensorboard.__version__)'
