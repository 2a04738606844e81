# Sourced by the scripts that install a pinned Python virtual environment
# for the tests (scripts/vllm.sh, scripts/pychecks.sh): one function,
# pyvenv_install.
#
#   pyvenv_install NAME REQUIREMENTS MIN MAX WHAT CHECK
#
# installs REQUIREMENTS (every package pinned with its hash) with
# pip install --require-hashes --no-deps --only-binary :all: into
# ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}/NAME-<hash of REQUIREMENTS>, unless
# an install there finished before; links it as build/tools/NAME; runs CHECK (a Python snippet
# printing what was installed) in it; and says in one line what it
# downloads (WHAT). CPython MIN to MAX (minor versions of 3) is required
# ($AIPO_PYTHON, else python3). One install at a time per cache: checkouts
# that share it wait. A failed install exits non-zero with pip's reason.
pyvenv_install() {
  local name=$1 req=$2 min=$3 max=$4 what=$5 check=$6
  local root cache key venv tools
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
  key=$(sha256sum "$req" | cut -c1-12)
  venv="$cache/$name-$key"
  tools="$root/build/tools"
  if [ "${PYVENV_PRINT:-}" = 1 ]; then echo "$venv"; return 0; fi
  local installed=0
  [ -f "$venv/.done" ] && [ -x "$venv/bin/python" ] && installed=1
  if [ $installed = 0 ]; then
    mkdir -p "$cache"
    if command -v flock >/dev/null; then
      exec 9>"$cache/$name-$key.lock"
      flock 9
      [ -f "$venv/.done" ] && [ -x "$venv/bin/python" ] && installed=1
    fi
  fi
  if [ $installed = 0 ]; then
    local python=${AIPO_PYTHON:-python3}
    if ! "$python" -c "import sys; assert (3, $min) <= sys.version_info[:2] <= (3, $max)" 2>/dev/null; then
      echo "$name: the pinned packages need CPython 3.$min to 3.$max; $python is $("$python" --version 2>&1) (set AIPO_PYTHON to another interpreter)" >&2
      return 1
    fi
    rm -rf "$venv"
    "$python" -m venv "$venv"
    local log="$cache/$name-$key-install.log" start got
    start=$(date +%s)
    echo "$name: downloading and installing $what from PyPI into $venv (log in $log)" >&2
    if ! "$venv/bin/pip" install --disable-pip-version-check --no-input --cache-dir "$cache/pip" \
      --require-hashes --no-deps --only-binary :all: -r "$req" >"$log" 2>&1; then
      echo "$name: pip failed to install ${req#"$root"/}; the last lines of $log:" >&2
      tail -n 20 "$log" >&2
      rm -rf "$venv"
      return 1
    fi
    if ! got=$(cd / && "$venv/bin/python" -c "$check" 2>>"$log"); then
      echo "$name: the environment was installed but its check failed; the last lines of $log:" >&2
      tail -n 20 "$log" >&2
      return 1
    fi
    echo "$name $key" >"$venv/.done"
    echo "$name: $got installed in $(( $(date +%s) - start )) s" >&2
  fi
  mkdir -p "$tools"
  ln -sfn "$venv" "$tools/$name"
}
