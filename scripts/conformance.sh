#!/usr/bin/env bash
# Runs the official MCP conformance scenarios that apply to sandbox-mcp
# against a freshly built server on a loopback port. Needs the suite
# (@modelcontextprotocol/conformance on npm): `npx @modelcontextprotocol/conformance`
# by default, or MCP_CONFORMANCE=/path/to/its/launcher; not part of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${MCP_CONFORMANCE:-}" ]; then
  suite=("$MCP_CONFORMANCE")
elif command -v npx >/dev/null 2>&1; then
  suite=(npx --yes @modelcontextprotocol/conformance)
else
  echo "the MCP conformance suite needs npx (Node.js), or MCP_CONFORMANCE=/path/to/its/launcher" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/sandbox-mcp" ./cmd/sandbox-mcp
port=${PORT:-18765}
"$tmp/sandbox-mcp" --http "127.0.0.1:$port" --state-dir "$tmp/state" --audit-log off --log-level warn &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
status=0
for s in ${SCENARIOS:-server-initialize ping tools-list dns-rebinding-protection}; do
  echo "== $s"
  "${suite[@]}" server --url "http://127.0.0.1:$port/mcp" --scenario "$s" || status=1
done
exit $status
