#!/bin/sh
# Entrypoint of the aipo worker container: copy the named secrets into
# files, then hand over to Beam's boot program with the runner's arguments.
set -eu
if [ -n "${AIPO_SECRETS:-}" ]; then
  python3 /opt/aipo/fetch-secrets.py
fi
exec /opt/apache/beam/boot "$@"
