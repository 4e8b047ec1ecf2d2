#!/usr/bin/env bash
# Builds every artifact of a release into one directory, reproducibly
# (-trimpath, CGO_ENABLED=0, no build id, file times fixed to the commit's),
# and publishes nothing:
#   - archives sandbox-mcp_V_OS_ARCH.tar.gz (.zip for windows) for
#     linux, darwin, windows × amd64, arm64, with LICENSE, README.md, SECURITY.md, docs/,
#     the server and, beside it, the supervisor daemon its sandboxes run
#     (sandbox-mcp-supervisor; windows has none: bash needs a Unix host there);
#     darwin and windows also linux/sandbox-mcp-supervisor, the Linux daemon of
#     the same architecture, which the docker provider puts into its containers
#   - one Claude Desktop extension for every platform, sandbox-mcp_V.mcpb
#     (manifest.json 0.4, server.type binary, a command per OS through
#     platform_overrides: a universal macOS binary, Windows amd64, Linux amd64
#     and arm64 through a launcher; settings for the thread, the provider, the
#     docker image, a config file, the skills dir; an icon): releasemeta bundle
#   - the server image IMAGE_REPO:V for linux/amd64 and linux/arm64 (the static
#     server and daemon, and a shell and tools — bash-static, busybox-static, CA
#     certificates — from the Debian packages pinned in deploy/image/debs.lock,
#     fetched from DEBIAN_MIRROR and cached under ~/.cache/sandbox-mcp-release;
#     non-root, labelled with its MCP Registry name; the container is the
#     sandbox) as one OCI image layout, sandbox-mcp_V_image.tar: publish it with
#     `skopeo copy oci-archive:sandbox-mcp_V_image.tar:IMAGE_REPO:V docker://IMAGE_REPO:V`;
#     `docker load` takes it too (as IMAGE_REPO:V-amd64 and -arm64)
#   - server.json for the official MCP Registry (one oci package, one mcpb package)
#   - SHA256SUMS over all of them
#
#   scripts/release.sh [--out DIR] [--version V] [--no-image]
#
# V defaults to `git describe --tags --dirty` without its leading v (a
# checkout with no tag gives 0.0.0-<commit>). The image is written, not
# built: no Docker engine is needed (the Debian mirror is, once); --no-image
# skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

out=dist
version=""
image=auto
while (($#)); do
	case $1 in
	--out) out=$2; shift 2 ;;
	--version) version=$2; shift 2 ;;
	--no-image) image=no; shift ;;
	-h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "release: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

if [ -z "$version" ]; then
	if d=$(git describe --tags --dirty --match 'v[0-9]*' 2>/dev/null); then
		version=${d#v}
	else
		version=0.0.0-$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)
	fi
fi
case $version in *[!A-Za-z0-9._+-]* | "") echo "release: version $version: want letters, digits and . _ + -" >&2; exit 2 ;; esac
# Every file time in the archives is the commit's, so two builds of one
# commit give the same bytes.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export TZ=UTC LC_ALL=C
image_ref=${IMAGE_REPO:-ghcr.io/sandbox-mcp/sandbox-mcp}:$version
download=${DOWNLOAD_URL:-https://github.com/sandbox-mcp/sandbox-mcp/releases/download/v$version}

platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64)
[ "$image" = auto ] && image=yes
steps=$((${#platforms[@]} + 1 + 1 + 1))
[ "$image" = yes ] && steps=$((steps + 1))
step=0
progress() {
	step=$((step + 1))
	printf 'release: [%d/%d] %s\n' "$step" "$steps" "$*" >&2
}

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -f "$out"/sandbox-mcp_* "$out"/server.json "$out"/SHA256SUMS
echo "release: sandbox-mcp $version (commit time $(date -d "@$SOURCE_DATE_EPOCH" -u +%FT%TZ)) into $out" >&2

progress "releasemeta: building the metadata tool"
go build -trimpath -o "$work/releasemeta" ./scripts/releasemeta

# tarball DIR NAME OUT: a tar.gz of DIR's files under NAME/, byte for byte
# the same on every run.
tarball() {
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=gnu -C "$1" -cf - . --transform "s,^\.,$2," | gzip -9n >"$3"
}
# zipdir DIR OUT: a zip of DIR's files, times fixed, no extra attributes.
zipdir() {
	find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	(cd "$1" && find . -type f | sed 's,^\./,,' | sort | zip -X -q -9 "$2" -@)
}

for p in "${platforms[@]}"; do
	goos=${p%/*} goarch=${p#*/}
	progress "$goos/$goarch: binary, archive"
	exe=sandbox-mcp
	[ "$goos" = windows ] && exe=sandbox-mcp.exe
	base=sandbox-mcp_${version}_${goos}_${goarch}
	dir="$work/bin/${goos}_${goarch}"
	# The server, and (but on Windows) the supervisor daemon beside it; both
	# stamped with the version, which the server checks the daemon's against.
	pkgs=./cmd/sandbox-mcp
	[ "$goos" != windows ] && pkgs="$pkgs ./cmd/sandbox-mcp-supervisor"
	# shellcheck disable=SC2086
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X main.version=$version -X github.com/sandbox-mcp/sandbox-mcp/supervisor/wire.version=$version" -o "$dir/" $pkgs

	stage="$work/stage/$base"
	mkdir -p "$stage"
	cp "$dir/$exe" LICENSE README.md SECURITY.md "$stage/"
	[ "$goos" != windows ] && cp "$dir/sandbox-mcp-supervisor" "$stage/"
	# The README links into docs/: the archive carries them, so its links resolve.
	mkdir -p "$stage/docs" && cp docs/*.md "$stage/docs/"
	chmod 0644 "$stage"/*.md "$stage"/docs/*.md "$stage/LICENSE" && chmod 0755 "$stage/$exe" # not the umask's
	[ "$goos" != windows ] && chmod 0755 "$stage/sandbox-mcp-supervisor"
	# macOS and Windows: the Linux daemon of the same architecture in
	# linux/, for the docker provider's containers (Docker Desktop's engine
	# runs Linux of the host's architecture).
	if [ "$goos" != linux ]; then
		mkdir -p "$stage/linux" && cp "$work/bin/linux_$goarch/sandbox-mcp-supervisor" "$stage/linux/" && chmod 0755 "$stage/linux/sandbox-mcp-supervisor"
	fi
	if [ "$goos" = windows ]; then
		zipdir "$stage" "$out/$base.zip"
	else
		tarball "$stage" "$base" "$out/$base.tar.gz"
	fi

done

# One extension for every platform: server.json has no field for an OS or
# an architecture, so a registry client could not pick among per-platform
# bundles; the manifest's platform_overrides pick the command instead.
progress "extension sandbox-mcp_$version.mcpb (darwin universal, windows amd64, linux amd64 and arm64)"
bundle="$work/mcpb/sandbox-mcp_$version"
"$work/releasemeta" bundle -version "$version" -bin "$work/bin" -license LICENSE -out "$bundle"
zipdir "$bundle" "$out/sandbox-mcp_$version.mcpb"

if [ "$image" = yes ]; then
	# Written, not built: the image is the static binaries (the server, the
	# daemon beside it) and static Debian tools, two layers per
	# architecture, so no engine, builder or registry is needed for a
	# multi-arch image.
	progress "image $image_ref (linux/amd64, linux/arm64: an OCI layout, docker-loadable as $image_ref-ARCH)"
	"$work/releasemeta" image -version "$version" -image "$image_ref" -epoch "$SOURCE_DATE_EPOCH" \
		-out "$out/sandbox-mcp_${version}_image.tar" \
		-debs deploy/image/debs.lock -mirror "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
		-cache "${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-mcp-release/debs" \
		linux/amd64="$work/bin/linux_amd64/sandbox-mcp" linux/arm64="$work/bin/linux_arm64/sandbox-mcp"
fi

progress "server.json for the MCP Registry"
"$work/releasemeta" server -version "$version" -image "$image_ref" -download "$download" "$out/sandbox-mcp_$version.mcpb" >"$out/server.json"
(cd "$out" && sha256sum sandbox-mcp_* server.json >SHA256SUMS)

echo "release: done: $(ls "$out" | wc -l) files" >&2
(cd "$out" && ls -l --time-style=+ sandbox-mcp_* server.json SHA256SUMS | awk '{printf "  %10d  %s\n", $5, $NF}') >&2
