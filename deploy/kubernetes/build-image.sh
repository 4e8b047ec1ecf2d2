#!/usr/bin/env bash
# Builds the server image sandbox-mcp:latest offline: the server and the
# supervisor daemon beside it, static Go binaries (CGO_ENABLED=0), in a
# FROM scratch image. With --save FILE it also writes
# the image as a tarball (for `ctr images import`, `kind load image-archive`;
# deploy/kubernetes/dev/cluster.sh loads it from the Docker engine itself).
#   deploy/kubernetes/build-image.sh [--save /tmp/sandbox-mcp.tar] [TAG]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
save=""
if [ "${1:-}" = --save ]; then save=$2; shift 2; fi
tag=${1:-sandbox-mcp:latest}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/" ./cmd/sandbox-mcp ./cmd/sandbox-mcp-supervisor)
cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "$tag: built ($(du -h "$ctx/sandbox-mcp" | cut -f1) server, $(du -h "$ctx/sandbox-mcp-supervisor" | cut -f1) daemon)"
if [ -n "$save" ]; then
  docker save "$tag" -o "$save"
  echo "$tag: saved to $save"
fi
