#!/usr/bin/env bash
# The command of a PROCESS environment on a Flink TaskManager (or a Spark
# executor): starts the Go SDK's boot program, which fetches the staged
# bin/aipo-worker and runs it as the SDK worker.
#
#   --environment_type=PROCESS --environment_config='{"command":"/opt/aipo/scripts/flink/worker-boot.sh"}'
#
# Each start gets a directory of its own for the staged files: the boot
# program's default (/tmp/staged) is shared by every worker on the host, and
# two TaskManager slots starting workers at once write the same file. The
# directory is removed when the worker ends.
#
# The boot program also copies the worker binary into a new directory
# /tmp/binNNN (a fixed /tmp, not TMPDIR) to run it from there, and never
# removes it: 183 MB per worker start, tens of GB after a few test runs.
# While the boot program runs, this script looks every half second for the
# processes of its group that run a /tmp/bin*/worker and removes each such
# directory as soon as its worker runs (a running program needs no file on
# disk), so that a TaskManager stopped with SIGKILL, which kills this script
# before its end, leaves nothing behind; what it removed is noted and
# removed again at the end. A boot program stopped after its copy and
# before its worker runs (an environment torn down as it starts: a Flink
# test run left 30 such copies, 5.5 GB), or a worker that ends within the
# first half second, leaves a copy that no process runs: once the boot
# program has ended, the copies under /tmp/bin*/worker that no process on
# the host runs and that were written more than AIPO_WORKER_COPY_STALE
# seconds ago are removed too, whichever boot program made them (Beam's
# boot runs its copy as soon as it is written, so an older copy that
# nothing runs is never run). Copies that some process runs are left alone.
#
# Settings (environment variables of the TaskManager):
#   AIPO_BEAM_BOOT          the boot program (default: bin/beam-boot beside this script's checkout)
#   TMPDIR                  where the per-worker directories go (default /tmp)
#   AIPO_WORKER_COPY_STALE  seconds after which a copy nothing runs is removed (default 60)
#
# worker-boot.sh --sweep removes such copies and starts nothing.
set -uo pipefail
# sweep_stale removes the boot programs' copies that no process runs and that
# were written $stale seconds ago or more.
stale=${AIPO_WORKER_COPY_STALE:-60}
sweep_stale() {
  local running="" p exe d now
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    case $exe in /tmp/bin*/worker) running="$running ${exe%/worker} " ;; esac
  done
  now=$(date +%s)
  for d in /tmp/bin*; do
    [ -f "$d/worker" ] && [ -O "$d" ] || continue
    case $running in *" $d "*) continue ;; esac
    [ $((now - $(stat -c %Y "$d/worker" 2>/dev/null || echo "$now"))) -ge "$stale" ] || continue
    rm -rf -- "$d"
  done
}
# worker-boot.sh --sweep sweeps and exits (a test's clean-up once its
# cluster is down, with AIPO_WORKER_COPY_STALE=0).
if [ "${1:-}" = "--sweep" ]; then
  sweep_stale
  exit 0
fi
boot=${AIPO_BEAM_BOOT:-$(cd "$(dirname "$0")/../.." && pwd)/bin/beam-boot}
if [ ! -x "$boot" ]; then
  echo "worker-boot.sh: no boot program at $boot (make beam-boot, or set AIPO_BEAM_BOOT)" >&2
  exit 1
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/aipo-worker.XXXXXX") || exit 1
# The boot program and the worker it starts run in a process group of their
# own (the boot program's PID), so that stopping this script stops both: the
# runner stops the environment by signalling this script only, and a boot
# program that exits leaves its worker running, idle, otherwise.
TMPDIR="$dir" setsid "$boot" --semi_persist_dir="$dir" "$@" &
child=$!
copies="$dir/.worker-copies"
# note_copies removes, and appends to $copies, the /tmp/bin* directory of
# each process of the boot program's group (process group $child) running a
# copy of the worker, until the boot program has ended.
note_copies() {
  local stat rest exe p
  while kill -0 "$child" 2>/dev/null; do
    for p in /proc/[0-9]*; do
      read -r stat 2>/dev/null <"$p/stat" || continue
      rest=${stat##*) }       # after the command name: state ppid pgrp ...
      set -- $rest
      [ "${3:-}" = "$child" ] || continue
      exe=$(readlink "$p/exe" 2>/dev/null) || continue
      exe=${exe% (deleted)}
      case $exe in
        /tmp/bin*/worker)
          if ! grep -qxF "${exe%/worker}" "$copies" 2>/dev/null; then
            echo "${exe%/worker}" >>"$copies"
            rm -rf -- "${exe%/worker}"
          fi ;;
      esac
    done
    sleep 0.5
  done
}
# The noter outlives this script when a SIGKILL ends it: it sweeps once the
# boot program has ended.
(note_copies; sweep_stale) &
noter=$!
trap 'kill -TERM -- "-$child" 2>/dev/null' TERM INT
wait "$child"
rc=$?
# wait returns early when a trapped signal arrives; wait again for the exit.
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
kill -TERM -- "-$child" 2>/dev/null
kill "$noter" 2>/dev/null
wait "$noter" 2>/dev/null
if [ -f "$copies" ]; then
  while read -r copy; do
    case $copy in /tmp/bin*) rm -rf -- "$copy" ;; esac
  done <"$copies"
fi
sweep_stale
rm -rf "$dir"
exit "$rc"
