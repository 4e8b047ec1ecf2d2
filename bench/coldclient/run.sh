#!/bin/bash
# A new thread's first call as a remote agent sees it (issue #28 item 3): each thread's first bash
# `true` through the TypeScript SDK client over Streamable HTTP (cold.mjs), on each of the servers
# named, alternated round by round; p50s in microseconds. Each thread's session is opened
# (untimed), then PAUSE_MS pass (a warm pool refills) before the call.
#
#   KIT=/path/to/node-kit bench/coldclient/run.sh [-r ROUNDS] [-n THREADS] [-p PAUSE_MS] NAME=CONFIG...
#
# Each NAME=CONFIG is a server config (provider docker or kubernetes; docker.warm or
# kubernetes.warm for a pool, or none), served by $SERVER (default: sandbox-mcp on PATH) on a port
# of its own with its own state dir under $TMPDIR. The servers stop at the end; their threads'
# containers (docker.container_prefix) are removed, their Pods left to the idle timeout.
set -euo pipefail
R=3 N=10 PAUSE=3000
while getopts r:n:p: o; do case $o in r) R=$OPTARG;; n) N=$OPTARG;; p) PAUSE=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND - 1))
: "${KIT:?KIT names the unpacked node kit}" "${SERVER:=sandbox-mcp}"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(mktemp -d)
pids=() prefixes=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for pre in "${prefixes[@]}"; do
    docker ps -aq --filter "name=^$pre-" | xargs -r docker rm -f >/dev/null 2>&1 || true
  done
  rm -rf "$bench"
}
trap cleanup EXIT
port=18930
names=() ports=()
for nc in "$@"; do
  name=${nc%%=*} cfg=${nc#*=}
  port=$((port + 1))
  mkdir -p "$bench/state-$name"
  "$SERVER" --http "127.0.0.1:$port" --config "$cfg" --state-dir "$bench/state-$name" --log-level error 2>"$bench/$name.log" &
  pids+=($!) names+=("$name") ports+=("$port")
  pre=$(sed -n 's/^ *container_prefix: *//p' "$cfg")
  [ -z "$pre" ] || prefixes+=("$pre")
  for i in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
done
sleep 5 # the pools' first members
for r in $(seq "$R"); do
  line="round $r:"
  for i in "${!names[@]}"; do
    p50=$(KIT=$KIT node "$here/cold.mjs" "http://127.0.0.1:${ports[$i]}/mcp" "$N" "$PAUSE" "${names[$i]}$r-$$" | sed 's/.*p50_us":\([0-9]*\).*/\1/')
    line="$line ${names[$i]}=$p50"
  done
  echo "$line"
done
