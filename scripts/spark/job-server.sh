#!/usr/bin/env bash
# Beam's Spark job server on this machine, on 127.0.0.1 only, with a local
# Spark master inside it (--spark-master-url local[N]): the portable route
# to Spark that the tests run and operators can try a pipeline on.
#
#   scripts/spark/job-server.sh install   fetch and build it (idempotent)
#   scripts/spark/job-server.sh start     install, start, wait until it listens
#   scripts/spark/job-server.sh status    exit 0 when it runs
#   scripts/spark/job-server.sh stop      stop it by PID (TERM, then KILL)
#
# Submit with --runner=spark --endpoint=127.0.0.1:$JOB_PORT and a PROCESS
# environment (scripts/flink/worker-boot.sh) or LOOPBACK.
#
# What runs, pinned: Beam 2.62.0's Spark 3 runner on Spark 3.2.2 (Scala
# 2.12), resolved from Maven Central by scripts/beam-jobserver/build.sh
# (about 250 MB in ~/.m2 once); the machine's java (11 or 17).
#
# Settings (environment variables):
#   SPARK_STATE     PIDs, logs and staged artifacts (default: $AIPO_CACHE/spark-job-server)
#   SPARK_MASTER    Spark master URL (default local[2])
#   JOB_PORT        job API (default 8099)
#   ARTIFACT_PORT   artifact staging (default 8098)
#   EXPANSION_PORT  expansion service (default 8097)
#   START_TIMEOUT   seconds to wait for it to listen (default 120)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
state=${SPARK_STATE:-$cache/spark-job-server}
job_port=${JOB_PORT:-8099}
artifact_port=${ARTIFACT_PORT:-8098}
expansion_port=${EXPANSION_PORT:-8097}
start_timeout=${START_TIMEOUT:-120}
. "$root/scripts/lib/daemons.sh"

log() { echo "spark-job-server: $*" >&2; }

jobserver_up() { port_open "$job_port" && port_open "$artifact_port"; }

cmd_start() {
  local js
  js=$("$root/scripts/beam-jobserver/build.sh" spark)
  mkdir -p "$state/artifacts" "$state/tmp"
  # Spark 3.2 reaches into JDK internals that Java 17 closes by default.
  daemon_start jobserver java \
    --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
    --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.lang.invoke=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.base/sun.util.calendar=ALL-UNNAMED \
    -Djava.io.tmpdir="$state/tmp" -Dspark.driver.host=127.0.0.1 -Dspark.driver.bindAddress=127.0.0.1 \
    -Dspark.ui.enabled=false \
    -cp "$js/aipo-jobserver.jar:$js/lib/*" aipo.jobserver.Spark \
    --spark-master-url="${SPARK_MASTER:-local[2]}" --job-port="$job_port" --artifact-port="$artifact_port" \
    --expansion-port="$expansion_port" --artifacts-dir="$state/artifacts"
  log "waiting up to ${start_timeout}s for the job server (127.0.0.1:$job_port)"
  daemon_wait "$start_timeout" "the Spark job server" jobserver_up || exit 1
  log "up: job server 127.0.0.1:$job_port, Spark master ${SPARK_MASTER:-local[2]}; state in $state"
}

case "${1:-}" in
install) "$root/scripts/beam-jobserver/build.sh" spark >/dev/null ;;
start) cmd_start ;;
status) daemon_status ;;
stop) daemon_stop_all ;;
*)
  echo "usage: $0 install|start|status|stop (see the top of this script)" >&2
  exit 2
  ;;
esac
