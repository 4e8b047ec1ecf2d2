#!/bin/bash
# The HTTP server at many concurrent clients as the TypeScript SDK client sees it (issue #28 item
# 4): SESSIONS sessions, each its own client in one node process (load.mjs), each making CALLS
# read_file calls of a 1 KiB file back to back, against the same with a go-sdk server whose one
# tool does nothing (the bench harness's peer: go run ./bench -peer http), alternated round by
# round; calls per second, p50 and p99 in microseconds.
#
#   KIT=/path/to/node-kit bench/httpclient/run.sh [-r ROUNDS] [-s SESSIONS] [-c CALLS]
#
# $SERVER (default: sandbox-mcp on PATH) runs as shipped (local provider, audit log on) with a
# state dir of its own and a config that lets one token hold every session.
set -euo pipefail
R=3 S=100 C=100
while getopts r:s:c: o; do case $o in r) R=$OPTARG;; s) S=$OPTARG;; c) C=$OPTARG;; *) exit 2;; esac; done
: "${KIT:?KIT names the unpacked node kit}" "${SERVER:=sandbox-mcp}"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill $pid 2>/dev/null; rm -rf "$bench"' EXIT
(cd "$here/../.." && go build -o "$bench/peer" ./bench)
printf 'limits:\n  threads_per_token: %d\nhttp:\n  max_sessions: %d\n' "$((S + 1))" "$((S + 1))" >"$bench/cfg.yaml"
serve() { # LOG CMD... : starts CMD, its stderr in LOG; sets pid and url
  local log=$1
  shift
  "$@" 2>"$log" &
  pid=$!
  for i in $(seq 100); do
    url=$(sed -n 's/.*serving MCP over HTTP addr=\([^ ]*\).*/http:\/\/\1\/mcp/p' "$log" | head -1)
    [ -z "$url" ] || return 0
    sleep 0.1
  done
  echo "no address in $log" >&2
  exit 1
}
for r in $(seq "$R"); do
  rm -rf "$bench/state"
  serve "$bench/ours.log" "$SERVER" --http 127.0.0.1:0 --config "$bench/cfg.yaml" --state-dir "$bench/state"
  ours=$(KIT=$KIT node "$here/load.mjs" "$url" read_file "$S" "$C")
  kill $pid; wait $pid 2>/dev/null || true; pid=
  serve "$bench/peer.log" "$bench/peer" -peer http
  peer=$(KIT=$KIT node "$here/load.mjs" "$url" noop "$S" "$C")
  kill $pid; wait $pid 2>/dev/null || true; pid=
  echo "round $r: ours=$ours peer=$peer"
done
