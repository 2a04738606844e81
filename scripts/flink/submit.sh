#!/usr/bin/env bash
# Submits one aipo pipeline (rollout, eval or analyze) to a Flink cluster
# through Beam's Flink job server (see job-server.sh). Everything after the
# pipeline name is passed to aipo as it is.
#
#   JOB_ENDPOINT=beam-js:8099 ENVIRONMENT=process BOOT=/opt/aipo/beam-boot \
#     scripts/flink/submit.sh analyze --run gs://my-bucket/aipo/runs/r1
#
#   JOB_ENDPOINT=beam-js:8099 ENVIRONMENT=external POOL=localhost:50000 PARALLELISM=16 \
#     scripts/flink/submit.sh rollout --config /shared/runs/r1/run.yaml --step 7 \
#     --policy 'grpcs://policy.internal:7070?token_file=/etc/aipo/secrets/policy-token'
#
# Settings (environment variables):
#   JOB_ENDPOINT   the job server's job API, host:port (required)
#   ENVIRONMENT    how TaskManagers start the SDK worker (required):
#                    process   run BOOT on the TaskManager host
#                    external  ask the worker pool at POOL to start it
#                    docker    start the Go SDK container (Docker on every
#                              TaskManager; IMAGE overrides the image)
#                    loopback  run it inside this launcher process (smoke
#                              tests only: the cluster must reach this host)
#   BOOT           path of the Go SDK boot program on every TaskManager host
#                  (make beam-boot), for process
#   POOL           the worker pool's address as TaskManagers see it, for
#                  external (default localhost:50000)
#   IMAGE          worker container image, for docker (default: Beam's Go SDK
#                  image of the SDK's version)
#   PARALLELISM    Flink parallelism of the job (default: the cluster's)
#   AIPO           the launcher binary (default bin/aipo, else bin/aipo-worker)
#   WORKER_BINARY  the Linux amd64 worker (default bin/aipo-worker; make worker)
#   JOB_NAME       job name (default aipo-<pipeline>-<time>)
#   ASYNC=1        return once the job is submitted instead of waiting
set -euo pipefail

. "$(dirname "$0")/../lib/submit.sh"
submit_pipeline "${1:-}" "TaskManagers"
shift

root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${JOB_ENDPOINT:-}" ]; then
  echo "submit.sh: set JOB_ENDPOINT to the Flink job server's host:port (default port 8099)" >&2
  exit 2
fi
worker=${WORKER_BINARY:-$root/bin/aipo-worker}
aipo=${AIPO:-}
if [ -z "$aipo" ]; then
  if [ -x "$root/bin/aipo" ]; then
    aipo=$root/bin/aipo
  elif [ "$(uname -s)/$(uname -m)" = "Linux/x86_64" ] && [ -x "$worker" ]; then
    aipo=$worker
  else
    echo "submit.sh: no launcher binary; run 'make build' (or set AIPO)" >&2
    exit 2
  fi
fi

flags=(
  --runner=universal
  --endpoint="$JOB_ENDPOINT"
  --job_name="${JOB_NAME:-aipo-$pipeline-$(date -u +%Y%m%d-%H%M%S)}"
)
env=${ENVIRONMENT:-}
case "$env" in
process)
  if [ -z "${BOOT:-}" ]; then
    echo "submit.sh: ENVIRONMENT=process needs BOOT, the boot program's path on the TaskManagers (make beam-boot)" >&2
    exit 2
  fi
  flags+=(--environment_type=PROCESS --environment_config="{\"command\":\"$BOOT\"}")
  ;;
external)
  flags+=(--environment_type=EXTERNAL --environment_config="${POOL:-localhost:50000}")
  ;;
docker)
  flags+=(--environment_type=DOCKER)
  [ -z "${IMAGE:-}" ] || flags+=(--environment_config="$IMAGE")
  ;;
loopback)
  flags+=(--environment_type=LOOPBACK)
  ;;
*)
  echo "submit.sh: set ENVIRONMENT to process, external, docker or loopback (see the top of this script)" >&2
  exit 2
  ;;
esac
if [ "$env" != loopback ]; then
  if [ ! -f "$worker" ]; then
    echo "submit.sh: no worker binary at $worker; run 'make worker' first" >&2
    exit 2
  fi
  flags+=(--worker_binary="$worker")
fi
[ -z "${PARALLELISM:-}" ] || flags+=(--parallelism="$PARALLELISM")
[ "${ASYNC:-0}" != 1 ] || flags+=(--async)

set -x
exec "$aipo" "$pipeline" "${flags[@]}" "$@"
