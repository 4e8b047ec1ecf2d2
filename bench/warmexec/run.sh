#!/bin/bash
# The docker provider's warm exec path as a real client sees it (issue #28 item 1): bash `true`
# through the TypeScript SDK client (/work/shared/tools/peerbench.mjs, after 20 warm-up calls),
# beside the same `bash -c true` started by a resident process in the same container (resident.py:
# posix_spawn, its own process group, the command environment) and `docker exec CONTAINER true`
# from the CLI (hyperfine), alternated round by round; p50s in microseconds.
#
#   KIT=/path/to/node-kit bench/warmexec/run.sh [-r ROUNDS] [-n CALLS] [-p PAUSE_MS] NAME=CONFIG...
#
# Each NAME=CONFIG is a server config (provider docker, its own container_prefix and audit path,
# docker.supervisor_binary the daemon to measure) served by $SERVER (default: sandbox-mcp on PATH)
# with its own state dir under $TMPDIR; PAUSE_MS waits between calls (untimed), as an agent does.
# The resident and the CLI run in the container of the first config.
set -euo pipefail
R=3 N=200 PAUSE=0
while getopts r:n:p: o; do case $o in r) R=$OPTARG;; n) N=$OPTARG;; p) PAUSE=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND - 1))
: "${KIT:?KIT names the unpacked node kit}" "${SERVER:=sandbox-mcp}"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(mktemp -d)
trap 'rm -rf "$bench"' EXIT
sed 's|const a = JSON.parse(argJson); const n = +nStr \|\| 500;|const a = JSON.parse(argJson); const n = +nStr \|\| 500; const pause = +(process.env.PAUSE_MS \|\| 0);|; s|  const s = process.hrtime.bigint();|  if (pause) await new Promise(r => setTimeout(r, pause));\n  const s = process.hrtime.bigint();|' \
  "${PEERBENCH:-/work/shared/tools/peerbench.mjs}" >"$bench/peerbench.mjs"
ours() { # NAME CONFIG
  mkdir -p "$bench/state-$1"
  PAUSE_MS=$PAUSE KIT=$KIT node "$bench/peerbench.mjs" "$SERVER" --state-dir "$bench/state-$1" --provider docker --config "$2" -- \
    bash '{"command":"true"}' "$N" | sed 's/.*p50_us":\([0-9]*\).*/\1/'
}
for r in $(seq "$R"); do
  line="round $r:"
  first=
  for nc in "$@"; do
    line="$line ${nc%%=*}=$(ours "${nc%%=*}" "${nc#*=}")"
    [ -n "$first" ] || first=$(sed -n 's/^ *container_prefix: *//p' "${nc#*=}")
  done
  c=$(docker ps --format '{{.Names}}' | grep "^$first-" | head -1)
  docker cp "$here/resident.py" "$c:/tmp/resident.py" >/dev/null
  p=$(docker exec "$c" python3 /tmp/resident.py "$N" "$PAUSE" | sed 's/.*p50_us": \([0-9]*\).*/\1/')
  hyperfine -N -w 3 -r 20 --export-json "$bench/hf.json" "docker exec $c true" >/dev/null 2>&1
  d=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["results"][0]["median"]*1e6))' "$bench/hf.json")
  echo "$line resident=$p docker_exec=$d"
done
