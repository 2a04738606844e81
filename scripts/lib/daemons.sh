# Background processes a script starts and stops by PID, each with its PID
# in STATE/NAME.pid and its output in STATE/log/NAME.out. Sourced by
# scripts/flink/cluster.sh and scripts/spark/job-server.sh; set $state first.

daemon_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# daemon_start NAME CMD... starts CMD in the background unless NAME runs.
daemon_start() {
  local name=$1
  shift
  mkdir -p "$state/log"
  if daemon_alive "$state/$name.pid"; then
    echo "$name is already running (PID $(cat "$state/$name.pid"))" >&2
    return
  fi
  # In $state: the Go SDK's boot program, started by these processes for
  # PROCESS workers, writes pipeline_options.json into its working directory.
  (cd "$state" && exec "$@") >"$state/log/$name.out" 2>&1 &
  echo $! >"$state/$name.pid"
}

# daemon_dead prints the name of a started process that has exited.
daemon_dead() {
  local f
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    if ! daemon_alive "$f"; then
      basename "$f" .pid
      return 0
    fi
  done
  return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

daemon_logs() {
  local f
  for f in "$state"/log/*; do
    [ -f "$f" ] || continue
    echo "----- $f (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

# daemon_status prints each process's state; non-zero when one is down.
daemon_status() {
  local ok=0 f any=
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    any=1
    if daemon_alive "$f"; then
      echo "$(basename "$f" .pid): running (PID $(cat "$f"))"
    else
      echo "$(basename "$f" .pid): not running"
      ok=1
    fi
  done
  if [ -z "$any" ]; then
    echo "nothing started in $state"
    ok=1
  fi
  return $ok
}

# daemon_strays prints the PIDs of the processes working in $state other
# than the started ones: the SDK workers a TaskManager or the Spark job
# server started there (their working directory is inherited), which
# outlive a parent that was killed.
daemon_strays() {
  local p cwd f skip real
  real=$(cd "$state" && pwd -P) || return 0
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case "$cwd" in
    "$real" | "$real"/*) ;;
    *) continue ;;
    esac
    skip=
    for f in "$state"/*.pid; do
      [ -f "$f" ] && [ "$(cat "$f")" = "${p#/proc/}" ] && skip=1
    done
    [ -n "$skip" ] || echo "${p#/proc/}"
  done
}

# daemon_stop_all sends TERM to every process, waits up to 20 s, then KILL;
# then the same to the strays left in $state.
daemon_stop_all() {
  local f pid
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  local deadline=$((SECONDS + 20))
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  local strays
  strays=$(daemon_strays)
  if [ -n "$strays" ]; then
    echo "stopping $(echo $strays | wc -w) process(es) left working in $state: $(echo $strays)" >&2
    kill -TERM $strays 2>/dev/null || true
    deadline=$((SECONDS + 5))
    for pid in $strays; do
      while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    done
  fi
}

# daemon_wait SECONDS WHAT READY... runs the command READY once a second
# until it succeeds. When a started process exits first, or SECONDS pass,
# it prints why (naming WHAT) and every process's log, stops them all and
# returns 1.
daemon_wait() {
  local timeout=$1 what=$2 dead deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@"; do
    if dead=$(daemon_dead); then
      echo "$dead exited while starting $what" >&2
    elif [ $SECONDS -ge $deadline ]; then
      echo "$what: not up after ${timeout}s" >&2
    else
      sleep 1
      continue
    fi
    daemon_logs
    daemon_stop_all
    return 1
  done
}
