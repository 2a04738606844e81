#!/usr/bin/env bash
# Installs what aipo's build ("build") or tests ("test") need on a Debian
# machine, skipping what is already present. Safe to run repeatedly.
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

case "$what" in
build)
  apt_install pkg-config libopenblas-dev
  ;;
test)
  # DuckDB's Node API reads our shards in the interop test.
  if command -v npm >/dev/null && [ ! -d "$root/scripts/interop/node_modules/@duckdb/node-api" ]; then
    echo "setup: installing DuckDB for the interop tests" >&2
    (cd "$root/scripts/interop" && npm install --no-audit --no-fund --silent >/dev/null)
  fi
  ;;
*)
  echo "usage: setup.sh build|test" >&2; exit 2 ;;
esac
