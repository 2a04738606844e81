#!/usr/bin/env bash
# Starts Beam's Flink job server in front of an existing Flink cluster. aipo
# submits portable pipelines to it (--runner=universal --endpoint=HOST:8099);
# it translates them into Flink jobs and hands them to FLINK_MASTER.
#
#   FLINK_MASTER=flink-jm:8081 scripts/flink/job-server.sh
#   FLINK_MASTER=flink-jm:8081 JOB_SERVER_JAR=/opt/beam/beam-runners-flink-X.Y-job-server-2.77.0.jar \
#     scripts/flink/job-server.sh
#
# Settings (environment variables):
#   FLINK_MASTER    the JobManager's REST address, host:port (required)
#   FLINK_VERSION   Flink minor version of the cluster, e.g. 1.19; picks the
#                   job server build (required unless JOB_SERVER_JAR is set)
#   BEAM_VERSION    must match the SDK aipo is built with (default 2.77.0)
#   JOB_SERVER_JAR  run this jar with java instead of the container image
#   JOB_PORT        job API port (default 8099)
#   ARTIFACT_PORT   artifact staging port (default 8098)
#   EXPANSION_PORT  expansion service port (default 8097)
#   ARTIFACTS_DIR   where staged artifacts (the worker binary) are kept; on a
#                   real cluster a location every TaskManager can read
#                   (gs://, hdfs:// or a shared mount)
#
# Extra arguments are passed to the job server as they are.
set -euo pipefail

if [ -z "${FLINK_MASTER:-}" ]; then
  echo "job-server.sh: set FLINK_MASTER to the JobManager's host:port (see the top of this script)" >&2
  exit 2
fi
beam=${BEAM_VERSION:-2.77.0}
args=(
  --flink-master="$FLINK_MASTER"
  --job-port="${JOB_PORT:-8099}"
  --artifact-port="${ARTIFACT_PORT:-8098}"
  --expansion-port="${EXPANSION_PORT:-8097}"
)
[ -z "${ARTIFACTS_DIR:-}" ] || args+=(--artifacts-dir="$ARTIFACTS_DIR")

set -x
if [ -n "${JOB_SERVER_JAR:-}" ]; then
  exec java -jar "$JOB_SERVER_JAR" "${args[@]}" "$@"
fi
if [ -z "${FLINK_VERSION:-}" ]; then
  set +x
  echo "job-server.sh: set FLINK_VERSION (the cluster's Flink minor version) or JOB_SERVER_JAR" >&2
  exit 2
fi
# Host networking: the job server's ports are the host's, and it reaches the
# JobManager as the host does.
exec docker run --rm --network=host "apache/beam_flink${FLINK_VERSION}_job_server:${beam}" "${args[@]}" "$@"
