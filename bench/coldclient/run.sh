#!/bin/bash
# The docker provider's cold first call as a remote agent sees it (issue #28 item 3): a new
# thread's first bash `true` through the TypeScript SDK client over Streamable HTTP (cold.mjs),
# on a server keeping a warm pool (docker.warm: 1) and on one without, alternated round by round;
# p50s in microseconds. Each thread's session is opened (untimed), then PAUSE_MS pass (the pool
# refills) before the call.
#
#   KIT=/path/to/node-kit bench/coldclient/run.sh [-r ROUNDS] [-n THREADS] [-p PAUSE_MS] IMAGE SUPERVISOR
#
# IMAGE is the box image (pulled never), SUPERVISOR a static build of sandbox-mcp-supervisor;
# $SERVER (default: sandbox-mcp on PATH) serves both, each with its own state dir, container
# prefix and port. The threads' containers are removed at the end.
set -euo pipefail
R=3 N=10 PAUSE=3000
while getopts r:n:p: o; do case $o in r) R=$OPTARG;; n) N=$OPTARG;; p) PAUSE=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND - 1))
: "${KIT:?KIT names the unpacked node kit}" "${SERVER:=sandbox-mcp}"
image=${1:?IMAGE} sup=${2:?SUPERVISOR}
here=$(cd "$(dirname "$0")" && pwd)
bench=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  docker ps -aq --filter name=coldw$$ --filter name=coldc$$ | xargs -r docker rm -f >/dev/null 2>&1 || true
  rm -rf "$bench"
}
trap cleanup EXIT
serve() { # NAME PREFIX WARM PORT
  cat >"$bench/$1.yaml" <<EOC
provider: docker
docker:
  container_prefix: $2
  image: $image
  pull: never
  supervisor_binary: $sup
  warm: $3
EOC
  mkdir -p "$bench/state-$1"
  "$SERVER" --http "127.0.0.1:$4" --config "$bench/$1.yaml" --state-dir "$bench/state-$1" --log-level error 2>"$bench/$1.log" &
  pids+=($!)
}
serve warm "coldw$$" 1 18931
serve cold "coldc$$" 0 18932
for i in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/18931 && exec 4<>/dev/tcp/127.0.0.1/18932) 2>/dev/null && break
  sleep 0.1
done
sleep 3 # the pool's first member
for r in $(seq "$R"); do
  w=$(KIT=$KIT node "$here/cold.mjs" http://127.0.0.1:18931/mcp "$N" "$PAUSE" "w$r" | sed 's/.*p50_us":\([0-9]*\).*/\1/')
  c=$(KIT=$KIT node "$here/cold.mjs" http://127.0.0.1:18932/mcp "$N" "$PAUSE" "c$r" | sed 's/.*p50_us":\([0-9]*\).*/\1/')
  echo "round $r: warm=$w cold=$c"
done
