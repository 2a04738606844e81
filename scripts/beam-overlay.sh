#!/usr/bin/env bash
# Makes the in-process prism job server of the Beam Go SDK listen on
# 127.0.0.1 instead of every interface, its artifact map safe for two jobs at
# once, the SDK's boot program copy the worker under TMPDIR rather than /tmp,
# and loopback submissions clean up their placeholder file (each below). The
# SDK offers no option for these, and Go refuses overlays of module-cache
# files, so this script copies the SDK's Go sources from the module cache
# into build/make-overlay/beam-sdks (ignored by git) and patches those lines
# there. The committed go.work replaces the SDK with that copy, so that make,
# a plain go command and an editor all build the patched SDK; before this
# script has run, every go command fails at once naming the missing
# directory (make overlay writes it). Nothing from Beam is stored in this
# repository. The script fails loudly when a patched line changes, so that an
# upgrade cannot silently reopen the port or the race.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mod=github.com/apache/beam/sdks/v2
# GOWORK=off: go.work names the copy this script makes, which may not exist
# yet; the version and the pristine sources come from go.mod alone.
ver=$(GOWORK=off go list -m -f '{{.Version}}' "$mod")
src=$(GOWORK=off go mod download -json "$mod@$ver" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
dst="$root/build/make-overlay/beam-sdks"
if [ ! -f "$dst/.version" ] || [ "$(cat "$dst/.version")" != "$ver" ]; then
  rm -rf "$dst"
  mkdir -p "$dst"
  echo "beam-overlay: copying the Beam Go SDK $ver from the module cache into build/make-overlay/beam-sdks"
  cp -r "$src/go" "$src/go.mod" "$src/go.sum" "$src/LICENSE" "$dst/"
  chmod -R u+w "$dst"
  echo "$ver" > "$dst/.version"
fi
# patch FILE FROM TO: in the copy's FILE, the text FROM becomes TO, unless
# TO is there already (a copy patched before; TO may contain FROM). Either
# way TO must be there afterwards, else the SDK changed under the patch.
# Copies made before a patch was added get it too.
patch() {
  local file="$dst/$1"
  if ! grep -qF -- "$3" "$file"; then
    FROM=$2 TO=$3 perl -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/g' "$file"
  fi
  if ! grep -qF -- "$3" "$file"; then
    echo "beam-overlay: $file has neither the text to patch ($2) nor the patched text; update scripts/beam-overlay.sh for Beam $ver" >&2
    exit 1
  fi
}
patch go/pkg/beam/runners/prism/internal/jobservices/server.go \
  'net.Listen("tcp", fmt.Sprintf(":%d", port))' \
  'net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))'
# The boot program copies the worker binary into a fresh directory under a
# fixed /tmp/ and never removes it (183 MB per worker start on Flink and
# Spark, tens of GB after a few test runs). Under TMPDIR instead, the
# per-worker directory scripts/flink/worker-boot.sh gives it (and removes)
# holds the copy.
patch go/container/boot.go 'os.MkdirTemp("/tmp/", "bin*")' 'os.MkdirTemp("", "bin*")'
# Prism keeps the artifacts a job stages in one map of the server, written by
# ReverseArtifactRetrievalService and read by GetArtifact without the
# server's lock. Two pipelines submitted at once in one process (the train
# loop's evaluation beside its rollout, tests in parallel) then crash the
# whole process with "fatal error: concurrent map writes" (artifact.go:89).
# The copy takes the server's mutex around both.
art=go/pkg/beam/runners/prism/internal/jobservices/artifact.go
patch "$art" 'if len(s.artifacts) == 0 {' 's.mu.Lock(); if len(s.artifacts) == 0 {'
patch "$art" 's.artifacts[string(dep.GetTypePayload())] = buf.Bytes()' \
  's.artifacts[string(dep.GetTypePayload())] = buf.Bytes(); s.mu.Unlock()'
patch "$art" 'buf, ok := s.artifacts[string(info.GetTypePayload())]' \
  's.mu.RLock(); buf, ok := s.artifacts[string(info.GetTypePayload())]; s.mu.RUnlock()'
# In LOOPBACK mode the SDK names an empty temporary file as the worker binary
# it stages (nothing runs it) and neither closes nor removes it: every
# pipeline a process runs leaves a file in TMPDIR and an open descriptor,
# one per rollout step and evaluation of a long training run. The copy
# closes it and removes it when the submission returns (staging has read it
# by then).
patch go/pkg/beam/runners/universal/runnerlib/execute.go \
  'f, _ := os.CreateTemp(os.TempDir(), "beamloopbackworker-*")' \
  'f, err := os.CreateTemp(os.TempDir(), "beamloopbackworker-*"); if err != nil { return presult, err }; f.Close(); defer os.Remove(f.Name())'
# go.work must name the version go.mod requires, or the replace is ignored.
if ! grep -qF "replace $mod $ver => ./build/make-overlay/beam-sdks" go.work; then
  echo "beam-overlay: go.work does not replace $mod $ver with ./build/make-overlay/beam-sdks; update its replace line to the version in go.mod" >&2
  exit 1
fi
touch "$dst/.patched"
