#!/usr/bin/env bash
# Regenerates learner/tokenizer/testdata/hf_reference.json with Hugging
# Face's tokenizer and Jinja renderer (npm packages installed into a
# temporary folder). Needs node/npm and the shared data folder.
#   scripts/tokenizer-fixtures.sh [SHARED_DATA_DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-$(cd "$repo/.." && pwd)/shared/data}
if [ ! -d "$shared/tokenizers" ]; then
  echo "tokenizer-fixtures: $shared/tokenizers not found; pass the shared data folder as the first argument" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null && npm install --no-audit --no-fund tokenizers@0.23.2 @huggingface/jinja@0.5.11 >/dev/null)
cd "$work"
node "$repo/scripts/tokenizer-fixtures.mjs" "$shared" "$repo/learner/tokenizer/testdata/builtin" "$repo/learner/tokenizer/testdata/hf_reference.json"
