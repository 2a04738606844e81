# Sourced by scripts/dataflow/submit.sh and scripts/flink/submit.sh: the
# handling of their first argument, the pipeline to submit.

# submit_usage prints the calling script's header comment and exits 2.
submit_usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# submit_pipeline checks the pipeline argument $1 and sets $pipeline;
# $2 names the workers that cannot reach aipo train's in-process policy.
submit_pipeline() {
  case "${1:-}" in
  rollout | eval | analyze) pipeline=$1 ;;
  "" | -h | --help | help) submit_usage ;;
  train)
    echo "submit.sh: aipo train serves the policy inside the launcher process (inproc://), which $2 cannot reach; run rollout and learn per step instead (scripts/dataflow/README.md, \"Training steps\")" >&2
    exit 2
    ;;
  *)
    echo "submit.sh: unknown pipeline '$1' (rollout, eval or analyze)" >&2
    exit 2
    ;;
  esac
}
