#!/usr/bin/env bash
# Builds the docker provider's images offline, from Debian packages (no
# registry is needed or used):
#   sandbox-mcp-base:latest    debootstrap minbase bookworm: bash, coreutils, grep, sed, find, python3,
#                              procps, ca-certificates, curl, git, vim-tiny (vi, and vim: a link
#                              to it); user sandbox (1000:1000); ~250 MB
#   sandbox-mcp-test:busybox   busybox-static only: sh and the applets; ~2 MB (tests)
#   sandbox-mcp-test:noshell   one static binary and nothing else, no shell (tests)
#   sandbox-mcp-test:busybox-sh      busybox's files, CMD ["/bin/sh"] as a stock busybox image (tests)
#   sandbox-mcp-test:debian-python   the base image's files, user root, CMD ["python3"] as a stock
#                                    python image (tests)
# An image that exists already is kept unless FORCE=1. Needs root, docker,
# debootstrap and busybox-static (installed here when missing, with apt-get).
set -euo pipefail
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DEBIAN_SUITE:-bookworm}
only=${1:-all}

need() { command -v "$1" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
have() { [ "${FORCE:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

base() {
  # A base built before curl and git were in it (the network tests drive
  # them through the egress proxy), or vim (the terminal tests edit with
  # it), is built again: the new one takes the tag when it is ready
  # (containers of the old one go on), and the image made from it after.
  local why=""
  if have sandbox-mcp-base:latest && ! docker run --rm --network none --entrypoint /usr/bin/git sandbox-mcp-base:latest --version >/dev/null 2>&1; then
    why="no git in it"
  elif have sandbox-mcp-base:latest && ! docker run --rm --network none --entrypoint /usr/local/bin/vim sandbox-mcp-base:latest --version >/dev/null 2>&1; then
    why="no vim in it"
  fi
  if [ -z "$why" ] && have sandbox-mcp-base:latest; then echo "sandbox-mcp-base:latest: present"; return; fi
  [ -z "$why" ] || echo "sandbox-mcp-base:latest: $why; building it again"
  need debootstrap debootstrap
  echo "building sandbox-mcp-base:latest (debootstrap $SUITE, about a minute)"
  debootstrap --variant=minbase --include=ca-certificates,procps,python3,curl,git,vim-tiny "$SUITE" "$tmp/base" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -20 "$tmp/debootstrap.log"; exit 1; }
  r=$tmp/base
  # vim-tiny is vi (and vim.tiny); agents type vim.
  ln -s /usr/bin/vim.tiny "$r/usr/local/bin/vim"
  echo 'sandbox:x:1000:1000:sandbox:/mnt/user-data/workspace:/bin/bash' >>"$r/etc/passwd"
  echo 'sandbox:x:1000:' >>"$r/etc/group"
  mkdir -p "$r/mnt/user-data/workspace" "$r/mnt/user-data/uploads" "$r/mnt/user-data/outputs" "$r/mnt/skills"
  chown -R 1000:1000 "$r/mnt/user-data"
  rm -rf "$r/var/cache/apt/archives/"*.deb "$r/var/lib/apt/lists/"* "$r/usr/share/doc" "$r/usr/share/man"
  tar -C "$r" -c . | docker import \
    --change 'USER 1000:1000' \
    --change 'WORKDIR /mnt/user-data/workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/mnt/user-data/workspace' \
    --change 'CMD ["sleep", "infinity"]' \
    - sandbox-mcp-base:latest >/dev/null
  echo "sandbox-mcp-base:latest: built"
  [ -z "$why" ] || docker rmi -f sandbox-mcp-test:debian-python >/dev/null 2>&1 || true
}

# static_busybox: the images are a busybox and nothing else, so it must
# need no loader. Debian's `busybox` package is dynamically linked (an
# image of it fails: "exec /bin/sh: no such file or directory");
# busybox-static replaces it.
static() { case "$(LC_ALL=C ldd "$1" 2>&1 || true)" in *"not a dynamic executable"* | *"statically linked"*) return 0 ;; esac; return 1; }
static_busybox() {
  bb=$(command -v busybox || true)
  if [ -z "$bb" ] || ! static "$bb"; then
    apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
    hash -r
    bb=$(command -v busybox)
    static "$bb" || { echo "$bb is not static: install busybox-static" >&2; exit 1; }
  fi
}

# runs IMAGE BINARY: the image's busybox starts (an image built from a
# dynamic busybox by an earlier version of this script does not).
runs() { docker run --rm --network none --entrypoint "$2" "$1" true >/dev/null 2>&1; }

busybox_images() {
  static_busybox
  if have sandbox-mcp-test:busybox && ! runs sandbox-mcp-test:busybox /bin/busybox; then
    echo "sandbox-mcp-test:busybox: its busybox does not run; building it again"
    docker rmi -f sandbox-mcp-test:busybox sandbox-mcp-test:busybox-sh >/dev/null
  fi
  if have sandbox-mcp-test:noshell && ! runs sandbox-mcp-test:noshell /busybox; then
    echo "sandbox-mcp-test:noshell: its busybox does not run; building it again"
    docker rmi -f sandbox-mcp-test:noshell >/dev/null
  fi
  if ! have sandbox-mcp-test:busybox; then
    r=$tmp/bb
    mkdir -p "$r/bin" "$r/tmp" "$r/etc" "$r/mnt/user-data" "$r/root"
    chmod 1777 "$r/tmp"
    cp "$bb" "$r/bin/busybox"
    for a in $("$bb" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
    echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"
    echo 'root:x:0:' >"$r/etc/group"
    tar -C "$r" -c . | docker import --change 'ENV PATH=/bin' --change 'CMD ["sleep", "1000000000"]' - sandbox-mcp-test:busybox >/dev/null
    echo "sandbox-mcp-test:busybox: built"
  fi
  if ! have sandbox-mcp-test:noshell; then
    r=$tmp/ns
    mkdir -p "$r/tmp" "$r/data"
    chmod 1777 "$r/tmp"
    cp "$bb" "$r/busybox" # invoked by its own name: no sh, no applet links
    echo 'hello from the image' >"$r/data/motd.txt"
    tar -C "$r" -c . | docker import --change 'CMD ["/busybox", "sleep", "1000000000"]' - sandbox-mcp-test:noshell >/dev/null
    echo "sandbox-mcp-test:noshell: built"
  fi
}

# reimage SRC DST CHANGE...: DST has SRC's files and only the given image
# settings (docker import drops the rest), as a stock image would.
reimage() {
  local src=$1 dst=$2 c change=()
  shift 2
  have "$dst" && { echo "$dst: present"; return; }
  for ch in "$@"; do change+=(--change "$ch"); done
  c=$(docker create "$src")
  docker export "$c" | docker import "${change[@]}" - "$dst" >/dev/null
  docker rm "$c" >/dev/null
  echo "$dst: built"
}

stock_images() {
  reimage sandbox-mcp-test:busybox sandbox-mcp-test:busybox-sh 'ENV PATH=/bin' 'CMD ["/bin/sh"]'
  reimage sandbox-mcp-base:latest sandbox-mcp-test:debian-python 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["python3"]'
}

case "$only" in
  all) base; busybox_images; stock_images ;;
  base) base ;;
  test) busybox_images; stock_images ;;
  *) echo "usage: $0 [all|base|test]" >&2; exit 2 ;;
esac
