#!/usr/bin/env bash
# Regenerates transforms/chattemplate/testdata/hf_reference.json with Hugging
# Face's Jinja renderer (npm @huggingface/jinja, installed into a temporary
# folder). Needs node/npm; the templates are the tokenizer_config.json files
# committed under transforms/chattemplate/testdata (see its README.md).
#   scripts/chat-template-fixtures.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null && npm install --no-audit --no-fund @huggingface/jinja@0.5.11 >/dev/null)
cd "$work"
node "$repo/scripts/chat-template-fixtures.mjs" "$repo/transforms/chattemplate/testdata"
