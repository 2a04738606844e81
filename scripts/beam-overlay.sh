#!/usr/bin/env bash
# Makes the in-process prism job server of the Beam Go SDK listen on
# 127.0.0.1 instead of every interface, its artifact map safe for two jobs at
# once, the SDK's boot program copy the worker under TMPDIR rather than /tmp,
# and loopback submissions clean up their placeholder file (each below). The SDK offers no option for these, and Go refuses
# overlays of module-cache files, so this script copies the SDK's Go sources
# from the module cache into build/beam-sdks (ignored by git), patches those
# lines there, and writes build/go.mod: the project's go.mod plus a replace
# directive pointing at that copy. The Makefile builds and tests with
# -modfile=build/go.mod. Nothing from Beam is stored in this repository. The
# script fails loudly when a patched line changes, so that an upgrade cannot
# silently reopen the port or the race.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mod=github.com/apache/beam/sdks/v2
ver=$(go list -m -f '{{.Version}}' "$mod")
src=$(go mod download -json "$mod@$ver" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
dst="$root/build/beam-sdks"
rel=go/pkg/beam/runners/prism/internal/jobservices/server.go
want='net.Listen("tcp", fmt.Sprintf(":%d", port))'
if ! grep -qF "$want" "$src/$rel"; then
  echo "beam-overlay: $src/$rel no longer has the line to patch ($want); update scripts/beam-overlay.sh for Beam $ver" >&2
  exit 1
fi
if [ ! -f "$dst/.version" ] || [ "$(cat "$dst/.version")" != "$ver" ]; then
  rm -rf "$dst"
  mkdir -p "$dst"
  cp -r "$src/go" "$src/go.mod" "$src/go.sum" "$src/LICENSE" "$dst/"
  chmod -R u+w "$dst"
  sed -i 's/net.Listen("tcp", fmt.Sprintf(":%d", port))/net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))/' "$dst/$rel"
  echo "$ver" > "$dst/.version"
fi
# The boot program copies the worker binary into a fresh directory under a
# fixed /tmp/ and never removes it (183 MB per worker start on Flink and
# Spark, tens of GB after a few test runs). Under TMPDIR instead, the
# per-worker directory scripts/flink/worker-boot.sh gives it (and removes)
# holds the copy. Patched in place whenever the copy still has the line, so a
# copy made before this patch gets it too.
boot=go/container/boot.go
if grep -qF 'os.MkdirTemp("/tmp/", "bin*")' "$dst/$boot"; then
  sed -i 's#os.MkdirTemp("/tmp/", "bin\*")#os.MkdirTemp("", "bin*")#' "$dst/$boot"
fi
if ! grep -qF 'os.MkdirTemp("", "bin*")' "$dst/$boot"; then
  echo "beam-overlay: $dst/$boot no longer copies the worker with os.MkdirTemp(\"/tmp/\", \"bin*\"); update scripts/beam-overlay.sh for Beam $ver" >&2
  exit 1
fi
# Prism keeps the artifacts a job stages in one map of the server, written by
# ReverseArtifactRetrievalService and read by GetArtifact without the
# server's lock. Two pipelines submitted at once in one process (the train
# loop's evaluation beside its rollout, tests in parallel) then crash the
# whole process with "fatal error: concurrent map writes" (artifact.go:89).
# The copy takes the server's mutex around both. Patched in place like the
# boot program above.
art=go/pkg/beam/runners/prism/internal/jobservices/artifact.go
sed -i \
  -e 's/^\(\t*\)if len(s.artifacts) == 0 {$/\1s.mu.Lock(); if len(s.artifacts) == 0 {/' \
  -e 's/^\(\t*\)s.artifacts\[string(dep.GetTypePayload())\] = buf.Bytes()$/\1s.artifacts[string(dep.GetTypePayload())] = buf.Bytes(); s.mu.Unlock()/' \
  -e 's/^\(\t*\)buf, ok := s.artifacts\[string(info.GetTypePayload())\]$/\1s.mu.RLock(); buf, ok := s.artifacts[string(info.GetTypePayload())]; s.mu.RUnlock()/' \
  "$dst/$art"
for line in 's.mu.Lock(); if len(s.artifacts) == 0 {' \
  's.artifacts[string(dep.GetTypePayload())] = buf.Bytes(); s.mu.Unlock()' \
  's.mu.RLock(); buf, ok := s.artifacts[string(info.GetTypePayload())]; s.mu.RUnlock()'; do
  if ! grep -qF "$line" "$dst/$art"; then
    echo "beam-overlay: $dst/$art no longer accesses the artifact map as patched ($line); update scripts/beam-overlay.sh for Beam $ver" >&2
    exit 1
  fi
done
# In LOOPBACK mode the SDK names an empty temporary file as the worker binary
# it stages (nothing runs it) and neither closes nor removes it: every
# pipeline a process runs leaves a file in TMPDIR and an open descriptor,
# one per rollout step and evaluation of a long training run. The copy
# closes it and removes it when the submission returns (staging has read it
# by then).
exe=go/pkg/beam/runners/universal/runnerlib/execute.go
sed -i 's/^\(\t*\)f, _ := os.CreateTemp(os.TempDir(), "beamloopbackworker-\*")$/\1f, err := os.CreateTemp(os.TempDir(), "beamloopbackworker-*"); if err != nil { return presult, err }; f.Close(); defer os.Remove(f.Name())/' "$dst/$exe"
if ! grep -qF 'f, err := os.CreateTemp(os.TempDir(), "beamloopbackworker-*"); if err != nil { return presult, err }; f.Close(); defer os.Remove(f.Name())' "$dst/$exe"; then
  echo "beam-overlay: $dst/$exe no longer makes the loopback placeholder as patched; update scripts/beam-overlay.sh for Beam $ver" >&2
  exit 1
fi
cp go.sum build/go.sum
{ cat go.mod; echo; echo "replace $mod => ./build/beam-sdks"; } > build/go.mod
