#!/bin/sh
# Runs the benchmarks: installs the peers (ripgrep, fd-find) and bubblewrap
# (the server runs as shipped: bash isolated, the audit log on) from Debian
# packages when missing, builds sandbox-mcp and the harness, and prints the
# table on stdout (progress on stderr). Flags go to the harness (bench -h).
set -eu
cd "$(dirname "$0")/.."

missing=""
command -v rg >/dev/null 2>&1 || missing="$missing ripgrep"
command -v fdfind >/dev/null 2>&1 || command -v fd >/dev/null 2>&1 || missing="$missing fd-find"
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
if [ -n "$missing" ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "bench: installing$missing" >&2
	$sudo apt-get update -qq >&2
	# shellcheck disable=SC2086
	$sudo apt-get install -y -qq $missing >&2
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/sandbox-mcp" ./cmd/sandbox-mcp
go build -o "$bin/bench" ./bench
BENCH_COMMAND="bench/run.sh${*:+ $*}" "$bin/bench" -server "$bin/sandbox-mcp" "$@"
