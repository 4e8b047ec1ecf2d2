#!/usr/bin/env bash
# The release dry run CI runs: scripts/release.sh into a temporary
# directory (nothing is published), then checks what it made as a client
# would get it:
#   - the checksums, and every archive holding its binary and the
#     supervisor daemon beside it (the Linux one in linux/ on macOS and
#     Windows);
#   - the one extension bundle and server.json (releasemeta check): the
#     manifest against the MCPB rules of the version it declares, each
#     platform's command in the bundle, executable, built for that OS and its
#     architectures; server.json against the MCP Registry's own schema
#     (modelcontextprotocol/registry, from the Go module proxy) and one
#     package per registryType, so that a client can pick its own;
#   - the linux/amd64 archive's server and daemon printing the stamped
#     version;
#   - with a Docker engine: the image loads, prints its version (its daemon
#     too), runs as
#     its user, and — run exactly as server.json's oci package says
#     (`docker run -i --rm ...`), driven over stdio by the go-sdk client —
#     offers bash and answers `echo hi` (releasemeta try).
# Extra arguments go to release.sh (e.g. --no-image).
#   bash scripts/release-check.sh [--no-image]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
version=0.0.0-check.$(git rev-parse --short=12 HEAD)
image=${IMAGE_REPO:-ghcr.io/sandbox-mcp/sandbox-mcp}:$version
volume=sandbox-mcp-check-$$
trap 'rm -rf "$out"; docker rmi "$image-amd64" "$image-arm64" >/dev/null 2>&1 || true; docker volume rm "$volume" >/dev/null 2>&1 || true' EXIT
bash scripts/release.sh --out "$out/dist" --version "$version" "$@"

fail() { echo "release-check: FAIL: $*" >&2; exit 1; }
# has LISTING LINE: LISTING (a variable, not a pipe: grep -q closing the
# pipe early would fail the listing under pipefail) has a line ending in LINE.
has() { grep -q -- "$2\$" <<<"$1"; }
go build -o "$out/releasemeta" ./scripts/releasemeta
# The registry's server.json schema, from its Go module (the proxy, checked
# against the checksum database).
registry=github.com/modelcontextprotocol/registry@v1.8.9
schema=$(go mod download -json "$registry" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/internal/validators/schemas/2025-12-11.json
[ -f "$schema" ] || fail "no server.json schema from $registry (the Go module proxy): $schema"
cd "$out/dist"
sha256sum --quiet -c SHA256SUMS || fail "SHA256SUMS does not match the files"
for p in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64 windows_amd64 windows_arm64; do
	base=sandbox-mcp_${version}_$p
	exe=sandbox-mcp
	case $p in windows_*) exe=sandbox-mcp.exe ;; esac
	if [ -f "$base.zip" ]; then
		has "$(unzip -l "$base.zip")" " $exe" || fail "$base.zip has no $exe"
		has "$(unzip -l "$base.zip")" " linux/sandbox-mcp-supervisor" || fail "$base.zip has no linux/sandbox-mcp-supervisor"
		has "$(unzip -l "$base.zip")" " docs/reference.md" || fail "$base.zip has no docs/ (the README links into it)"
	else
		has "$(tar -tzf "$base.tar.gz")" "^$base/$exe" || fail "$base.tar.gz has no $base/$exe"
		has "$(tar -tzf "$base.tar.gz")" "^$base/sandbox-mcp-supervisor" || fail "$base.tar.gz has no $base/sandbox-mcp-supervisor"
		has "$(tar -tzf "$base.tar.gz")" "^$base/docs/reference.md" || fail "$base.tar.gz has no docs/ (the README links into it)"
		case $p in darwin_*) has "$(tar -tzf "$base.tar.gz")" "^$base/linux/sandbox-mcp-supervisor" || fail "$base.tar.gz has no linux/sandbox-mcp-supervisor" ;; esac
	fi
done
[ "$(ls ./*.mcpb | wc -l)" = 1 ] || fail "want one extension bundle, found: $(ls ./*.mcpb)"
"$out/releasemeta" check -version "$version" -dist . -registry-schema "$schema" || fail "the bundle or server.json"
# The image: an OCI layout of both architectures, and docker-loadable.
if [ -f "sandbox-mcp_${version}_image.tar" ]; then
	listing=$(tar -tf "sandbox-mcp_${version}_image.tar")
	for f in oci-layout index.json manifest.json; do has "$listing" "^$f" || fail "the image tar has no $f"; done
	index=$(tar -xOf "sandbox-mcp_${version}_image.tar" index.json)
	for a in amd64 arm64; do grep -q "\"architecture\":\"$a\"" <<<"$index" || fail "the image has no linux/$a"; done
	if docker version >/dev/null 2>&1; then
		docker load -q -i "sandbox-mcp_${version}_image.tar" >/dev/null || fail "docker load of the image failed"
		got=$(docker run --rm "$image-$(go env GOARCH)" --version) || fail "the image does not run"
		[ "$got" = "sandbox-mcp $version" ] || fail "the image's --version printed \"$got\""
		got=$(docker run --rm --entrypoint /sandbox-mcp-supervisor "$image-$(go env GOARCH)" --version) || fail "the image's daemon does not run"
		[ "${got% protocol *}" = "sandbox-mcp-supervisor $version" ] || fail "the image's daemon's --version printed \"$got\""
		uid=$(docker image inspect -f '{{.Config.User}} {{index .Config.Labels "io.modelcontextprotocol.server.name"}}' "$image-amd64")
		[ "$uid" = "65532:65532 io.github.sandbox-mcp/sandbox-mcp" ] || fail "the image's user and name label: $uid"
		"$out/releasemeta" try -server server.json -image "$image-$(go env GOARCH)" -volume "$volume" ||
			fail "the image, run as server.json says, does not serve bash"
	fi
fi
mkdir x
tar -xzf "sandbox-mcp_${version}_linux_amd64.tar.gz" -C x
got=$("x/sandbox-mcp_${version}_linux_amd64/sandbox-mcp" --version)
[ "$got" = "sandbox-mcp $version" ] || fail "--version printed \"$got\", want \"sandbox-mcp $version\""
daemon=$("x/sandbox-mcp_${version}_linux_amd64/sandbox-mcp-supervisor" --version)
[ "${daemon% protocol *}" = "sandbox-mcp-supervisor $version" ] || fail "the daemon's --version printed \"$daemon\", want \"sandbox-mcp-supervisor $version protocol N\""
echo "release-check: ok: $(ls | grep -c '^sandbox-mcp_') artifacts, --version says \"$got\" and \"$daemon\"" >&2
