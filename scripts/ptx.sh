#!/usr/bin/env bash
# Compiles learner/cuda/kernels/*.cu to PTX for sm_90 with NVRTC and writes
# learner/cuda/ptx/*.ptx, which are committed and embedded in the binary
# (the normal build needs neither NVRTC nor a GPU). Run it after editing a
# kernel, and commit the result:
#
#   scripts/ptx.sh            regenerate learner/cuda/ptx
#   scripts/ptx.sh --check    regenerate into a temporary directory and fail
#                             when the committed PTX differs (stale or edited)
#   scripts/ptx.sh --install  only install NVRTC when it is missing (Debian
#                             bookworm: libnvrtc11.2 from the non-free
#                             component, which it enables); exits 3 when
#                             NVRTC is still unavailable
#
# NVRTC is loaded at run time by learner/cuda/internal/ptxgen (purego, no
# cgo). Set AIPO_NVRTC to a libnvrtc.so path to use another version; a
# different NVRTC version writes different PTX, and --check then fails.
# The committed PTX comes from Debian bookworm's NVRTC 11.8 (PTX ISA 7.8),
# which the drivers of CUDA 12 and 13 JIT-compile.
# --check exits 3, with a message, when NVRTC is absent or is another
# version than the one that wrote the committed PTX (whose output would
# differ for no fault of the sources), so that make test can skip it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
check=0 install=0
for a in "$@"; do
  case "$a" in
  --check) check=1 ;;
  --install) install=1 ;;
  *) echo "usage: scripts/ptx.sh [--check] [--install]" >&2; exit 2 ;;
  esac
done

have_nvrtc() {
  [ -n "${AIPO_NVRTC:-}" ] && [ -e "$AIPO_NVRTC" ] && return 0
  # Not grep -q: it would stop reading early, ldconfig would die of
  # SIGPIPE and, under pipefail, NVRTC would seem absent now and then.
  ldconfig -p 2>/dev/null | grep -E 'libnvrtc\.so(\.(11\.2|12|13))?[[:space:]]' >/dev/null
}

install_nvrtc() {
  # Debian keeps NVRTC in non-free; enable it on the main entry if needed.
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  local src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q '^Components:.*non-free\b' "$src"; then
    $sudo sed -i '0,/^Components: main$/s//Components: main non-free/' "$src"
  fi
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    libnvrtc11.2 libnvrtc-builtins11.8 >/dev/null
}

if [ $install -eq 1 ]; then
  if ! have_nvrtc && command -v apt-get >/dev/null; then
    echo "ptx: installing NVRTC (libnvrtc11.2)" >&2
    install_nvrtc || true
  fi
  if have_nvrtc; then exit 0; fi
  echo "ptx: NVRTC could not be installed" >&2
  exit 3
fi
if ! have_nvrtc; then
  echo "ptx: NVRTC (libnvrtc.so*) not found; run scripts/ptx.sh --install (Debian) or set AIPO_NVRTC" >&2
  exit 3
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go run ./learner/cuda/internal/ptxgen -src learner/cuda/kernels -out "$tmp/ptx"

if [ $check -eq 1 ]; then
  # The compiler line of the PTX header names the NVRTC release.
  want=$(grep -m1 '^// Cuda compilation tools' learner/cuda/ptx/adamw.ptx || true)
  got=$(grep -m1 '^// Cuda compilation tools' "$tmp/ptx/adamw.ptx" || true)
  if [ "$want" != "$got" ]; then
    echo "ptx: this NVRTC (${got#// }) is not the one that wrote the committed PTX (${want#// }); skipping the comparison" >&2
    exit 3
  fi
  if ! diff -r -q learner/cuda/ptx "$tmp/ptx" >&2; then
    echo "ptx: learner/cuda/ptx is stale: run scripts/ptx.sh and commit the result" >&2
    exit 1
  fi
  echo "ptx: learner/cuda/ptx is up to date" >&2
  exit 0
fi
rm -f learner/cuda/ptx/*.ptx
mkdir -p learner/cuda/ptx
cp "$tmp"/ptx/*.ptx learner/cuda/ptx/
echo "ptx: wrote $(ls learner/cuda/ptx | wc -l) files to learner/cuda/ptx" >&2
