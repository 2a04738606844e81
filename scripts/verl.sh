#!/usr/bin/env bash
# Installs veRL (PyPI's verl, 0.9.1) with exactly what its loss module
# verl.trainer.ppo.core_algos imports (PyTorch, Ray, tensordict,
# transformers, ...) into a Python virtual environment for the tests that
# hold aipo's losses and GRPO advantages to veRL's own code
# (scripts/verl/core_algos_check.py), every package pinned with its hash in
# scripts/verl/requirements.txt (see its header for how the set was
# resolved; no Ray cluster is started).
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing; pip's downloads are cached beside it and shared with
# scripts/vllm.sh (the same PyTorch files). It is linked as build/tools/verl,
# where the tests look. A failed install exits non-zero with pip's reason
# (scripts/lib/pyvenv.sh).
#
# Usage: scripts/verl.sh [--print]   (--print: the environment's directory)
set -euo pipefail
. "$(dirname "$0")/lib/pyvenv.sh"
[ "${1:-}" = "--print" ] && export PYVENV_PRINT=1
# The check imports the modules the tests call and prints the versions.
pyvenv_install verl "$(dirname "$0")/verl/requirements.txt" 11 12 \
  "veRL 0.9.1 with PyTorch 2.13.0, Ray and transformers (about 3 GB of downloads; 5 GB on disk)" \
  'import torch, verl; from verl.trainer.ppo import core_algos, rollout_corr_helper; from verl.workers.config import ActorConfig; print("veRL", verl.__version__, "on PyTorch", torch.__version__)'
