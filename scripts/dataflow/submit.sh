#!/usr/bin/env bash
# Submits one aipo pipeline (rollout, eval or analyze) to Google Cloud
# Dataflow. Everything after the pipeline name is passed to aipo as it is.
#
#   PROJECT=my-project REGION=europe-west4 BUCKET=gs://my-bucket/aipo \
#     scripts/dataflow/submit.sh analyze --run gs://my-bucket/aipo/runs/r1
#
#   scripts/dataflow/submit.sh rollout --config gs://my-bucket/aipo/runs/r1/run.yaml \
#     --step 7 --policy 'grpcs://policy.internal:7070?token_file=/run/aipo/secrets/policy-token'
#
# Settings (environment variables):
#   PROJECT         Google Cloud project (required)
#   REGION          Dataflow region (required)
#   BUCKET          gs://bucket/prefix for staging and temp files (required)
#   AIPO            the launcher binary (default bin/aipo, else bin/aipo-worker)
#   WORKER_BINARY   the Linux amd64 worker (default bin/aipo-worker; make worker)
#   MACHINE_TYPE    worker machine type (default n2-standard-8)
#   NUM_WORKERS     workers at start (default: Dataflow's choice)
#   MAX_WORKERS     autoscaling ceiling (default 10)
#   SERVICE_ACCOUNT worker service account e-mail (default: the project's
#                   Compute Engine default account)
#   SUBNETWORK      regions/REGION/subnetworks/NAME, for workers that must reach
#                   endpoints inside a VPC (default: the default network)
#   PRIVATE_IPS=1   workers without public IP addresses (needs Private Google
#                   Access on the subnetwork)
#   SDK_IMAGE       custom worker container (see Dockerfile here); default:
#                   Beam's Go SDK container for 2.77.0
#   JOB_NAME        Dataflow job name (default aipo-<pipeline>-<time>)
#   DRY_RUN=1       print the job instead of submitting it (no credentials or
#                   network needed; see README.md)
#   ASYNC=1         return once the job is submitted instead of waiting
#
# Secrets never go into flags or the YAML: flags are copied into the job's
# pipeline options, which anyone who can view the job can read. Reference
# them by file or variable (token_file=, api_key_file:) as README.md says.
set -euo pipefail

. "$(dirname "$0")/../lib/submit.sh"
submit_pipeline "${1:-}" "Dataflow workers"
shift

root=$(cd "$(dirname "$0")/../.." && pwd)
missing=()
[ -n "${PROJECT:-}" ] || missing+=(PROJECT)
[ -n "${REGION:-}" ] || missing+=(REGION)
[ -n "${BUCKET:-}" ] || missing+=(BUCKET)
if [ ${#missing[@]} -gt 0 ]; then
  echo "submit.sh: set ${missing[*]} (see the top of this script)" >&2
  exit 2
fi
case "$BUCKET" in
gs://*) ;;
*)
  echo "submit.sh: BUCKET must be a gs:// location, not '$BUCKET'" >&2
  exit 2
  ;;
esac
BUCKET=${BUCKET%/}

worker=${WORKER_BINARY:-$root/bin/aipo-worker}
if [ ! -f "$worker" ]; then
  echo "submit.sh: no worker binary at $worker; run 'make worker' first" >&2
  exit 2
fi
aipo=${AIPO:-}
if [ -z "$aipo" ]; then
  if [ -x "$root/bin/aipo" ]; then
    aipo=$root/bin/aipo
  elif [ "$(uname -s)/$(uname -m)" = "Linux/x86_64" ]; then
    aipo=$worker # the worker is aipo itself, built for this platform
  else
    echo "submit.sh: no launcher binary; run 'make build' (or set AIPO)" >&2
    exit 2
  fi
fi

flags=(
  --runner=dataflow
  --project="$PROJECT"
  --region="$REGION"
  --staging_location="$BUCKET/staging"
  --temp_location="$BUCKET/temp"
  --worker_binary="$worker"
  --worker_machine_type="${MACHINE_TYPE:-n2-standard-8}"
  --max_num_workers="${MAX_WORKERS:-10}"
  --job_name="${JOB_NAME:-aipo-$pipeline-$(date -u +%Y%m%d-%H%M%S)}"
)
[ -z "${NUM_WORKERS:-}" ] || flags+=(--num_workers="$NUM_WORKERS")
[ -z "${SERVICE_ACCOUNT:-}" ] || flags+=(--service_account_email="$SERVICE_ACCOUNT")
[ -z "${SUBNETWORK:-}" ] || flags+=(--subnetwork="$SUBNETWORK")
[ "${PRIVATE_IPS:-0}" != 1 ] || flags+=(--no_use_public_ips)
[ -z "${SDK_IMAGE:-}" ] || flags+=(--sdk_container_image="$SDK_IMAGE")
[ "${DRY_RUN:-0}" != 1 ] || flags+=(--dry_run)
[ "${ASYNC:-0}" != 1 ] || flags+=(--async)

set -x
exec "$aipo" "$pipeline" "${flags[@]}" "$@"
