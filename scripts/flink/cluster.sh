#!/usr/bin/env bash
# A Flink cluster on this machine, on 127.0.0.1 only: one JobManager, two
# TaskManagers (separate JVMs) and Beam's Flink job server in front of them.
# The tests start one per test binary; operators can use it to try a pipeline
# before a real cluster (docs/operators.md, "Flink").
#
#   scripts/flink/cluster.sh install   fetch and build what it runs (idempotent)
#   scripts/flink/cluster.sh start     install, start, wait until every part is up
#   scripts/flink/cluster.sh status    exit 0 when every part is up
#   scripts/flink/cluster.sh stop      stop every part by PID (TERM, then KILL)
#   scripts/flink/cluster.sh env       the endpoints, as shell assignments
#
# What runs, pinned:
#   Flink 1.19.3: the distribution inside PyPI's apache-flink-libraries 1.19.3
#     (lib/, opt/, plugins/) and apache-flink 1.19.3 (bin/, conf/), both
#     checked against the sha256 in scripts/flink/requirements.txt
#   Beam 2.62.0's Flink job server (scripts/beam-jobserver/build.sh flink)
#   Java: the machine's java (11 or 17)
# Downloads are cached under ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo} (230 MB for
# Flink, 150 MB in ~/.m2 for the job server).
#
# Settings (environment variables):
#   FLINK_STATE     the cluster's directory: configuration, PIDs, logs, staged
#                   artifacts (default: $AIPO_CACHE/flink-cluster)
#   REST_PORT       JobManager REST and web port (default 8081)
#   RPC_PORT        JobManager RPC port (default 6123)
#   BLOB_PORT       JobManager blob server port (default 6124)
#   JOB_PORT        job server's job API (default 8099)
#   ARTIFACT_PORT   job server's artifact staging (default 8098)
#   EXPANSION_PORT  job server's expansion service (default 8097)
#   TASKMANAGERS    how many TaskManagers (default 2)
#   SLOTS           task slots per TaskManager (default 2)
#   PARALLELISM     jobs' default parallelism (default: SLOTS, so that a job
#                   restarted after a TaskManager is lost fits on the rest)
#   RESTARTS        restart attempts after a failure (fixed-delay strategy,
#                   default 3, 2 s apart)
#   START_TIMEOUT   seconds to wait for the cluster to come up (default 180)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
flink_version=1.19.3
state=${FLINK_STATE:-$cache/flink-cluster}
rest_port=${REST_PORT:-8081}
rpc_port=${RPC_PORT:-6123}
blob_port=${BLOB_PORT:-6124}
job_port=${JOB_PORT:-8099}
artifact_port=${ARTIFACT_PORT:-8098}
expansion_port=${EXPANSION_PORT:-8097}
taskmanagers=${TASKMANAGERS:-2}
slots=${SLOTS:-2}
restarts=${RESTARTS:-3}
parallelism=${PARALLELISM:-$slots}
start_timeout=${START_TIMEOUT:-180}

. "$root/scripts/lib/daemons.sh"

log() { echo "flink-cluster: $*" >&2; }

# install_flink assembles FLINK_HOME from the two PyPI packages and prints it.
install_flink() {
  local home=$cache/flink-$flink_version
  if [ -f "$home/.done" ]; then
    echo "$home"
    return
  fi
  local dl=$cache/downloads/flink-$flink_version
  mkdir -p "$dl"
  log "downloading Flink $flink_version from PyPI (apache-flink-libraries, 230 MB, once) into $dl"
  # Two calls: the libraries come as a source archive only, the scripts in a
  # wheel for one interpreter (3.11; nothing in it is Python that runs here).
  if ! python3 -m pip download --quiet --no-deps --require-hashes -d "$dl" \
    -r <(grep '^apache-flink-libraries' "$here/requirements.txt") >"$dl/pip.log" 2>&1 ||
    ! python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
      --python-version 3.11 --platform manylinux2014_x86_64 -d "$dl" \
      -r <(grep '^apache-flink==' "$here/requirements.txt") >>"$dl/pip.log" 2>&1; then
    log "pip could not download Flink $flink_version; its log:"
    tail -n 20 "$dl/pip.log" >&2
    exit 1
  fi
  rm -rf "$home" "$home.tmp"
  mkdir -p "$home.tmp/unpack"
  tar -xzf "$dl/apache-flink-libraries-$flink_version.tar.gz" -C "$home.tmp/unpack"
  python3 -m zipfile -e "$dl"/apache_flink-"$flink_version"-*.whl "$home.tmp/unpack"
  local deps=$home.tmp/unpack/apache-flink-libraries-$flink_version/deps
  mv "$deps/lib" "$deps/opt" "$deps/plugins" "$home.tmp/"
  mv "$home.tmp/unpack/pyflink/bin" "$home.tmp/bin"
  mv "$home.tmp/unpack/pyflink/conf" "$home.tmp/conf"
  cp "$deps/bin/bash-java-utils.jar" "$home.tmp/bin/"
  chmod +x "$home.tmp"/bin/*.sh "$home.tmp/bin/flink"
  rm -rf "$home.tmp/unpack"
  touch "$home.tmp/.done"
  mv "$home.tmp" "$home"
  echo "$home"
}

# write_config writes the cluster's configuration into $state/conf.
write_config() {
  local home=$1
  mkdir -p "$state/conf" "$state/log" "$state/tmp" "$state/artifacts"
  cp "$home"/conf/log4j*.properties "$state/conf/"
  # The JVM options are Flink's own defaults for Java 17 (its conf/config.yaml).
  local java_opts
  java_opts=$(sed -n 's/^ *all: *//p' "$home/conf/config.yaml" | head -n 1)
  cat >"$state/conf/config.yaml" <<YAML
# Written by scripts/flink/cluster.sh; edits are overwritten at the next start.
env:
  java:
    opts:
      all: $java_opts
jobmanager:
  bind-host: 127.0.0.1
  rpc:
    address: 127.0.0.1
    port: $rpc_port
  memory:
    process:
      size: 1024m
taskmanager:
  bind-host: 127.0.0.1
  host: 127.0.0.1
  numberOfTaskSlots: $slots
  memory:
    process:
      size: 3072m
    # Beam's SDK harness streams the staged worker binary (about 190 MB)
    # through the TaskManager's gRPC server, whose buffers are direct
    # memory: at Flink's default off-heap size the transfer fails with
    # "Cannot reserve 2097152 bytes of direct buffer memory".
    task:
      off-heap:
        size: 768m
    # Beam's batch translation sorts little; Flink's default (40% of the
    # TaskManager's memory) would leave the task heap too small.
    managed:
      size: 256m
rest:
  address: 127.0.0.1
  bind-address: 127.0.0.1
  port: $rest_port
blob:
  server:
    port: $blob_port
# One TaskManager's slots: a job restarted after losing a TaskManager
# still finds enough slots on the others.
parallelism:
  default: $parallelism
io:
  tmp:
    dirs: $state/tmp
# A TaskManager that dies is noticed within 10 s (Flink's default: 50 s),
# so that a restart finds the slots that are left without a long wait.
heartbeat:
  interval: 2000
  timeout: 10000
restart-strategy:
  type: fixed-delay
  fixed-delay:
    attempts: $restarts
    delay: 2 s
YAML
}

registered_taskmanagers() {
  curl -fsS --max-time 2 "http://127.0.0.1:$rest_port/taskmanagers" 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["taskmanagers"]))' 2>/dev/null || echo 0
}

# flink_up succeeds once every TaskManager has registered and the job
# server listens.
flink_up() {
  [ "$(registered_taskmanagers)" -ge "$taskmanagers" ] && port_open "$job_port" && port_open "$artifact_port"
}

cmd_install() {
  install_flink >/dev/null
  "$root/scripts/beam-jobserver/build.sh" flink >/dev/null
}

cmd_start() {
  local home js
  home=$(install_flink)
  js=$("$root/scripts/beam-jobserver/build.sh" flink)
  write_config "$home"
  export FLINK_HOME=$home FLINK_CONF_DIR=$state/conf FLINK_LOG_DIR=$state/log FLINK_PID_DIR=$state/tmp
  # start-foreground execs the JVM, so each PID below is the JVM's.
  daemon_start jobmanager "$home/bin/jobmanager.sh" start-foreground
  local i
  for ((i = 1; i <= taskmanagers; i++)); do
    daemon_start "taskmanager-$i" "$home/bin/taskmanager.sh" start-foreground
  done
  daemon_start jobserver java -cp "$js/aipo-jobserver.jar:$js/lib/*" aipo.jobserver.Flink \
    --flink-master="127.0.0.1:$rest_port" --job-port="$job_port" --artifact-port="$artifact_port" \
    --expansion-port="$expansion_port" --artifacts-dir="$state/artifacts"
  log "waiting up to ${start_timeout}s for the JobManager (REST 127.0.0.1:$rest_port), $taskmanagers TaskManagers and the job server (127.0.0.1:$job_port)"
  daemon_wait "$start_timeout" "the Flink cluster" flink_up || exit 1
  log "up: REST 127.0.0.1:$rest_port, job server 127.0.0.1:$job_port, $taskmanagers TaskManagers x $slots slots; state in $state"
}

cmd_status() {
  local rc=0
  daemon_status || rc=1
  echo "taskmanagers registered: $(registered_taskmanagers)"
  return $rc
}

cmd_stop() { daemon_stop_all; }

cmd_env() {
  echo "FLINK_REST=127.0.0.1:$rest_port"
  echo "JOB_ENDPOINT=127.0.0.1:$job_port"
  echo "FLINK_STATE=$state"
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
status) cmd_status ;;
stop) cmd_stop ;;
env) cmd_env ;;
*)
  echo "usage: $0 install|start|status|stop|env (see the top of this script)" >&2
  exit 2
  ;;
esac
