#!/usr/bin/env bash
# Cross-builds the server for every platform a release ships
# (linux, darwin, windows × amd64, arm64), so a change that breaks one OS
# fails here rather than at release time. Nothing is kept.
#   bash scripts/cross-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0 failed=()
for p in "${platforms[@]}"; do
	n=$((n + 1))
	echo "cross-build: [$n/${#platforms[@]}] $p" >&2
	if ! CGO_ENABLED=0 GOOS=${p%/*} GOARCH=${p#*/} go build -o "$out/bin" ./cmd/sandbox-mcp; then
		failed+=("$p")
	fi
done
if ((${#failed[@]})); then
	echo "cross-build: FAILED for ${failed[*]}" >&2
	exit 1
fi
echo "cross-build: ok (${platforms[*]})" >&2
