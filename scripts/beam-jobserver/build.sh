#!/usr/bin/env bash
# Builds Beam's Flink or Spark job server (Beam 2.62.0; see flink.pom.xml for
# why that release) from Maven Central: its classpath resolved from
# RUNNER.pom.xml into a cache directory, plus aipo-jobserver.jar, the small
# launcher in src/ that starts the job server with its job and artifact
# services on 127.0.0.1 only (Beam's own main listens on every interface).
#
#   scripts/beam-jobserver/build.sh flink|spark   prints the directory:
#     DIR/lib/*.jar          the classpath
#     DIR/aipo-jobserver.jar the launcher (main classes aipo.jobserver.Flink,
#                            aipo.jobserver.Spark)
#
# The directory is ${AIPO_CACHE:-$XDG_CACHE_HOME/aipo}/beam-jobserver/RUNNER-HASH,
# keyed by the pom's and the sources' hash, so a second run does nothing.
# Maven keeps what it downloads in ~/.m2 (about 150 MB for Flink, 250 MB for
# Spark). Needs java, javac and mvn (Maven 3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runner=${1:-}
case "$runner" in
flink | spark) ;;
*)
  echo "usage: $0 flink|spark" >&2
  exit 2
  ;;
esac
for tool in java javac jar mvn; do
  if ! command -v "$tool" >/dev/null; then
    echo "beam-jobserver: $tool is not installed (a JDK 11+ and Maven 3 are needed; on Debian: apt-get install default-jdk maven)" >&2
    exit 1
  fi
done
cache=${AIPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aipo}
key=$(cat "$here/$runner.pom.xml" "$here"/src/aipo/jobserver/*.java | sha256sum | cut -c1-16)
dir=$cache/beam-jobserver/$runner-$key
if [ -f "$dir/.done" ]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
echo "beam-jobserver: resolving Beam 2.62.0's $runner job server from Maven Central into $dir (150-250 MB the first time)" >&2
if ! mvn -q -B -f "$here/$runner.pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$dir/lib" -DincludeScope=runtime >"$dir/mvn.log" 2>&1; then
  echo "beam-jobserver: Maven could not resolve $here/$runner.pom.xml; its log:" >&2
  tail -n 30 "$dir/mvn.log" >&2
  exit 1
fi
sources=("$here/src/aipo/jobserver/LoopbackServerFactory.java" "$here/src/aipo/jobserver/LoopbackJobServer.java")
if [ "$runner" = flink ]; then sources+=("$here/src/aipo/jobserver/Flink.java"); else sources+=("$here/src/aipo/jobserver/Spark.java"); fi
mkdir -p "$dir/classes"
javac -nowarn --release 11 -cp "$dir/lib/*" -d "$dir/classes" "${sources[@]}"
# A jar, not a directory: Beam's Flink runner stages its classpath to the
# cluster, and it stages files only.
jar cf "$dir/aipo-jobserver.jar" -C "$dir/classes" .
rm -rf "$dir/classes"
touch "$dir/.done"
echo "$dir"
