#!/bin/bash
# grep against rg as a real client sees it (issue #28 item 2): grep counting every match of a
# pattern over GOROOT/src (output_mode count, max_results 100000), through the TypeScript SDK
# client (peerbench.mjs, after 20 warm-up calls; p50 of N calls), against `rg -c` over the same
# tree with the same files (hidden and ignored ones, not .git, none over 10 MiB) and the same
# threads (hyperfine, median of N runs), alternated round by round; the totals of both are
# compared first, so a faster wrong answer is never a figure.
#
#   KIT=/path/to/node-kit bench/grepclient/run.sh [-r ROUNDS] [-n CALLS]
#
# ICASE=1 adds both searches ignoring case (grep's default; rg -i).
#
# $SERVER (default: sandbox-mcp on PATH) serves the local provider with GOROOT/src mounted
# read-only at /mnt/goroot, its state under $TMPDIR.
set -euo pipefail
R=3 N=10
while getopts r:n: o; do case $o in r) R=$OPTARG;; n) N=$OPTARG;; *) exit 2;; esac; done
: "${KIT:?KIT names the unpacked node kit}" "${SERVER:=sandbox-mcp}"
tree=$(go env GOROOT)/src
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
printf 'mounts:\n  - {host_path: %s, container_path: /mnt/goroot, read_only: true}\n' "$tree" >"$st/config.yaml"
rg_c() { rg -c --no-config --hidden --no-ignore -g '!.git' --max-filesize 10M -j 2 "$@" "$tree"; }
# name | our arguments | rg's flags (-F: a literal, -e: a regex; -s: case-sensitive, -i: not) | rg's pattern
cases=(
  'literal errors.New|"pattern":"errors.New","literal":true,"case_sensitive":true|-s -F|errors.New'
  'regex func [A-Z]…\(|"pattern":"func [A-Z][A-Za-z0-9_]*\\(","case_sensitive":true|-s -e|func [A-Z][A-Za-z0-9_]*\('
)
# -i adds the same two ignoring case (grep's default): rg -i.
[ "${ICASE:-}" = 1 ] && cases+=(
  'literal errors.New, any case|"pattern":"errors.New","literal":true|-i -F|errors.New'
  'regex func [A-Z]…\(, any case|"pattern":"func [A-Z][A-Za-z0-9_]*\\("|-i -e|func [A-Z][A-Za-z0-9_]*\('
)
for c in "${cases[@]}"; do
  IFS='|' read -r name ours flag pat <<<"$c"
  args="{$ours,\"path\":\"/mnt/goroot\",\"output_mode\":\"count\",\"max_results\":100000}"
  # The same total: our count lines end in :N, as rg's do.
  # shellcheck disable=SC2086 # $flag is two flags
  want=$(rg_c $flag "$pat" | awk -F: '{s+=$NF} END {print s}')
  got=$(KIT=$KIT node - "$SERVER" "$st" "$args" <<'JS'
const [bin, st, a] = process.argv.slice(2);
const { Client } = await import(process.env.KIT + '/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js');
const { StdioClientTransport } = await import(process.env.KIT + '/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js');
const c = new Client({ name: 'grepclient', version: '1' });
await c.connect(new StdioClientTransport({ command: bin, args: ['--state-dir', st, '--config', st + '/config.yaml'] }));
const r = await c.callTool({ name: 'grep', arguments: JSON.parse(a) });
let s = 0;
for (const l of r.content[0].text.split('\n')) { const m = /:(\d+)$/.exec(l); if (m) s += +m[1]; }
console.log(s);
await c.close();
JS
)
  [ "$got" = "$want" ] || { echo "$name: our total $got, rg's $want" >&2; exit 1; }
  for r in $(seq "$R"); do
    o=$(KIT=$KIT node "${PEERBENCH:-/work/shared/tools/peerbench.mjs}" "$SERVER" --state-dir "$st" --config "$st/config.yaml" -- grep "$args" "$N" |
      sed 's/.*p50_us":\([0-9]*\).*/\1/')
    hyperfine -N -w 2 -r "$N" --export-json "$st/h.json" "rg -c --no-config --hidden --no-ignore -g !.git --max-filesize 10M -j 2 $flag '$pat' $tree" >/dev/null 2>&1
    p=$(python3 -c "import json; print(round(json.load(open('$st/h.json'))['results'][0]['median']*1e6))")
    echo "$name, round $r: ours ${o} µs, rg ${p} µs, ratio $(python3 -c "print(f'{$o/$p:.2f}')") (total $want)"
  done
done
