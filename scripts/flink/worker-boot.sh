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
# directory, which also holds the boot program's copy of the worker binary,
# is removed when the worker ends.
#
# Settings (environment variables of the TaskManager):
#   AIPO_BEAM_BOOT   the boot program (default: bin/beam-boot beside this script's checkout)
#   TMPDIR           where the per-worker directories go (default /tmp)
set -uo pipefail
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
# TMPDIR: the boot program copies the worker binary there (the overlay's
# patch; Beam's own copies it under /tmp and leaves it), so that the copy
# goes with the directory.
TMPDIR="$dir" setsid "$boot" --semi_persist_dir="$dir" "$@" &
child=$!
trap 'kill -TERM -- "-$child" 2>/dev/null' TERM INT
wait "$child"
rc=$?
# wait returns early when a trapped signal arrives; wait again for the exit.
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
kill -TERM -- "-$child" 2>/dev/null
rm -rf "$dir"
exit "$rc"
