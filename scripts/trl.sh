#!/usr/bin/env bash
# Installs TRL (PyPI's trl, 1.16.0) with what its GRPOTrainer needs to train
# on CPU (PyTorch, transformers, accelerate, datasets, ...) into a Python
# virtual environment for the benchmark that runs TRL's GRPO beside
# `aipo train` (cmd/aipo, BenchmarkGRPOVsTRL, in make bench), every package
# pinned with its hash in scripts/trl/requirements.txt (see its header for
# how the set was resolved).
#
# The environment lives under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}, keyed by
# the requirements file's hash, so a second run (and a second checkout)
# installs nothing (pip is given a cache beside it, which it fills only
# where PyPI's files come with caching headers; the PyTorch and
# transformers files are scripts/vllm.sh's). It is linked as
# build/tools/trl, where the benchmark looks. A failed install exits
# non-zero with pip's reason (scripts/lib/pyvenv.sh).
#
# Usage: scripts/trl.sh [--print]   (--print: the environment's directory)
set -euo pipefail
. "$(dirname "$0")/lib/pyvenv.sh"
[ "${1:-}" = "--print" ] && export PYVENV_PRINT=1
# The check imports the trainer the benchmark runs and prints the versions.
pyvenv_install trl "$(dirname "$0")/trl/requirements.txt" 11 13 \
  "TRL 1.16.0 with PyTorch 2.13.0, transformers 5.19.0, accelerate and datasets (about 3 GB of downloads unless scripts/vllm.sh fetched PyTorch before)" \
  'import torch, transformers, trl; from trl import GRPOConfig, GRPOTrainer; print("TRL", trl.__version__, "on PyTorch", torch.__version__, "and transformers", transformers.__version__)'
