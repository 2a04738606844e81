#!/usr/bin/env bash
# Checks that this repository needs nothing but the go command: a clone of
# HEAD (committed work only) into a temporary directory must build with
# `go build ./...` (no make, no generated files), and `go install
# github.com/aipo-rl/aipo/cmd/aipo@VERSION` must work from a module proxy on
# disk that serves HEAD's tree as VERSION, the binary printing `aipo
# version`. go install MODULE@VERSION refuses a module whose go.mod has
# replace directives and ignores go.work, so this is what a user's install
# meets.
#
#   scripts/fresh-clone.sh          the build and the install (9 min 52 s on
#                                   2 cores shared with other work: the
#                                   module's own packages are compiled twice,
#                                   its dependencies come from the build
#                                   cache)
#   scripts/fresh-clone.sh --test   also `go test -short ./...` in the clone
#                                   (many minutes more)
#
# Nothing is downloaded: the dependencies come from this machine's module
# cache (GOPROXY is the temporary proxy, then the module cache's own
# download directory), so they must have been downloaded once (any go build
# here does it), and checked against the checksum database then; the check
# is off here (GOSUMDB=off), since the module served is this tree and the
# rest is already in the cache. The version installed is
# v0.0.0-clone.gCOMMIT; its files in the module cache are removed at the
# end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run_tests=false
case "${1:-}" in
  "") ;;
  --test) run_tests=true ;;
  *) echo "fresh-clone.sh: unknown argument $1 (the only flag is --test)" >&2; exit 2 ;;
esac
mod=github.com/aipo-rl/aipo
modcache=$(go env GOMODCACHE)
if [ -z "$modcache" ] || [ ! -d "$modcache/cache/download" ]; then
  echo "fresh-clone.sh: the module cache ($modcache) has no downloads yet; run go build ./... here once" >&2
  exit 1
fi
rev=$(git -C "$root" rev-parse HEAD)
version="v0.0.0-clone.g${rev:0:12}"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-clone.sh: note: uncommitted changes are not part of the check (it clones HEAD, $rev)" >&2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/aipo-fresh-clone.XXXXXX")
cleanup() {
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
  # The installed version's files in the shared module cache (read-only
  # there) and its download, nothing else.
  if [ -d "$modcache/$mod@$version" ]; then
    chmod -R u+w "$modcache/$mod@$version" && rm -rf "$modcache/$mod@$version"
  fi
  rm -f "$modcache/cache/download/$mod/@v/$version".* "$modcache/cache/download/$mod/@v/list"
  # and the directories left empty (rmdir leaves any other version's).
  rmdir -p "$modcache/cache/download/$mod/@v" "$(dirname "$modcache/$mod")" 2>/dev/null || true
}
trap cleanup EXIT
step() { echo "fresh-clone.sh: $*"; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

step "cloning $rev into $tmp/aipo"
git clone --quiet --no-local "$root" "$tmp/aipo"
git -C "$tmp/aipo" checkout --quiet "$rev"

export GOPROXY="file://$tmp/proxy,file://$modcache/cache/download"
export GOSUMDB=off GOFLAGS=
t=$(date +%s)
step "go build ./... in the clone"
(cd "$tmp/aipo" && go build ./...)
step "go build ./... passed in $(elapsed "$t")"

if $run_tests; then
  t=$(date +%s)
  step "go test -short ./... in the clone"
  (cd "$tmp/aipo" && go test -short -timeout 30m ./...)
  step "go test -short ./... passed in $(elapsed "$t")"
fi

# The module as a proxy serves it: $mod/@v/{list,VERSION.info,.mod,.zip},
# the zip's paths under MODULE@VERSION/.
step "serving the clone as $mod@$version from $tmp/proxy"
dir="$tmp/proxy/$mod/@v"
mkdir -p "$dir"
echo "$version" >"$dir/list"
printf '{"Version":"%s","Time":"%s"}\n' "$version" \
  "$(git -C "$tmp/aipo" show -s --format=%cI HEAD | date -u -f - +%Y-%m-%dT%H:%M:%SZ)" >"$dir/$version.info"
cp "$tmp/aipo/go.mod" "$dir/$version.mod"
git -C "$tmp/aipo" archive --format=zip --prefix="$mod@$version/" -o "$dir/$version.zip" HEAD

t=$(date +%s)
step "go install $mod/cmd/aipo@$version (GOBIN=$tmp/bin)"
mkdir -p "$tmp/bin" "$tmp/elsewhere"
(cd "$tmp/elsewhere" && GOBIN="$tmp/bin" go install "$mod/cmd/aipo@$version")
out=$("$tmp/bin/aipo" version)
echo "$out"
case $out in
  "aipo $version "*) ;;
  *) echo "fresh-clone.sh: the installed aipo says \"$out\", want \"aipo $version ...\"" >&2; exit 1 ;;
esac
step "go install passed in $(elapsed "$t")"
