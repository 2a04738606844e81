#!/usr/bin/env bash
# Compares single-threaded sgemm of Debian's OpenBLAS (the one aipo links),
# a newer OpenBLAS (PyPI's scipy-openblas32) and MKL (PyPI's mkl, sequential)
# on the 21.7M learner step's products (gemmlibs.c). The two wheels are
# downloaded once into ~/.cache/aipo/gemmlibs (about 230 MB, mostly MKL) and
# only unpacked there: nothing is installed. Run it on a machine with nothing
# else running; it prints GF/s per product and library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${AIPO_CACHE:-$HOME/.cache/aipo}/gemmlibs
mkl_version=2026.2.0
sob_version=0.3.34.481.3
mkdir -p "$cache"
if [ ! -d "$cache/mkl-$mkl_version" ] || [ ! -d "$cache/sob-$sob_version" ]; then
  echo "gemmlibs: downloading mkl $mkl_version and scipy-openblas32 $sob_version wheels (about 230 MB) into $cache"
  python3 -m pip download --quiet --no-deps -d "$cache/wheels" "mkl==$mkl_version" "scipy-openblas32==$sob_version"
  rm -rf "$cache/mkl-$mkl_version" "$cache/sob-$sob_version"
  (mkdir -p "$cache/mkl-$mkl_version" && cd "$cache/mkl-$mkl_version" && python3 -m zipfile -e "$cache"/wheels/mkl-$mkl_version-*.whl .)
  (mkdir -p "$cache/sob-$sob_version" && cd "$cache/sob-$sob_version" && python3 -m zipfile -e "$cache"/wheels/scipy_openblas32-$sob_version-*.whl .)
fi
deb=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ {print $NF; exit}')
[ -n "$deb" ] || { echo "gemmlibs: Debian's libopenblas.so.0 is not installed (make setup installs it)" >&2; exit 1; }
bin=$(mktemp -d)/gemmlibs
trap 'rm -rf "$(dirname "$bin")"' EXIT
cc -O2 -o "$bin" "$here/gemmlibs.c" -ldl
MKL_THREADING_LAYER=SEQUENTIAL "$bin" "$deb" \
  "$cache/sob-$sob_version/scipy_openblas32/lib/libscipy_openblas.so" \
  "$cache/mkl-$mkl_version/mkl-$mkl_version.data/data/lib/libmkl_rt.so.3"
