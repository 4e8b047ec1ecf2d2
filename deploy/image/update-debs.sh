#!/usr/bin/env bash
# Pins the Debian packages of the release's server image (debs.lock beside
# this script; scripts/releasemeta image reads it): for each architecture,
# the version, pool path and sha256 that the suite's signed index names
# today. The index is checked with gpgv against the Debian archive keyring
# (InRelease -> Packages.xz -> each .deb), so a pin is only as trusted as
# Debian's signature. Run it when the release says a pinned package is gone
# from the mirror (a point release replaced it), then commit debs.lock.
#   deploy/image/update-debs.sh        (DEBIAN_MIRROR, DEBIAN_SUITE to change them)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DEBIAN_SUITE:-bookworm}
KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
packages=(busybox-static bash-static ca-certificates)
arches=(amd64 arm64)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

curl -fsSL "$MIRROR/dists/$SUITE/InRelease" -o "$tmp/InRelease"
gpgv --keyring "$KEYRING" --output "$tmp/Release" "$tmp/InRelease" 2>"$tmp/gpgv.log" ||
	{ cat "$tmp/gpgv.log" >&2; echo "update-debs: $SUITE's InRelease: bad signature" >&2; exit 1; }

{
	echo "# The Debian packages of the release's server image, pinned by deploy/image/update-debs.sh"
	echo "# from $SUITE's signed index on $(date -u +%F). scripts/releasemeta image downloads each from"
	echo "# \$DEBIAN_MIRROR (default http://deb.debian.org/debian) and refuses one of another sha256."
	echo "# arch package version sha256 pool-path"
} >"$tmp/debs.lock"
for arch in "${arches[@]}"; do
	index=main/binary-$arch/Packages.xz
	want=$(awk -v f="$index" '/^SHA256:/{s=1;next} /^[A-Za-z]/{s=0} s && $3==f {print $1}' "$tmp/Release")
	[ -n "$want" ] || { echo "update-debs: the Release file names no $index" >&2; exit 1; }
	curl -fsSL "$MIRROR/dists/$SUITE/$index" -o "$tmp/Packages.xz"
	echo "$want  $tmp/Packages.xz" | sha256sum --quiet -c - || { echo "update-debs: $index: sha256 differs from the signed Release" >&2; exit 1; }
	xz -dc "$tmp/Packages.xz" >"$tmp/Packages"
	for p in "${packages[@]}"; do
		# The newest stanza of the package, architecture-independent ones
		# (Architecture: all) listed once under "all".
		line=$(awk -v p="$p" '
			/^Package: /{pkg=$2} /^Version: /{v=$2} /^Architecture: /{a=$2} /^Filename: /{f=$2} /^SHA256: /{s=$2}
			/^$/{ if (pkg==p) print a, p, v, s, f; pkg="" }' "$tmp/Packages" | sort -V -k3 | tail -1)
		[ -n "$line" ] || { echo "update-debs: $p: not in $SUITE for $arch" >&2; exit 1; }
		case $line in all\ *) grep -qF "$line" "$tmp/debs.lock" || echo "$line" >>"$tmp/debs.lock" ;; *) echo "$line" >>"$tmp/debs.lock" ;; esac
	done
done
mv "$tmp/debs.lock" "$here/debs.lock"
cat "$here/debs.lock"
