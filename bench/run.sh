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
# The server, the supervisor daemon beside it (as releases ship them; the
# harness's own sandboxes find it there too), and the harness.
go build -o "$bin/sandbox-mcp" ./cmd/sandbox-mcp
CGO_ENABLED=0 go build -o "$bin/sandbox-mcp-supervisor" ./cmd/sandbox-mcp-supervisor
go build -o "$bin/bench" ./bench
BENCH_COMMAND="bench/run.sh${*:+ $*}" "$bin/bench" -server "$bin/sandbox-mcp" "$@"

# The docker provider against the docker CLI, with go test -bench (the
# provider's benchmarks need its test fixtures): warm bash `true` through
# the provider and `docker exec CONTAINER true` alternated on one container
# (medians), a cold first call (create, start, first exec) and a warm
# acquire. Skipped without an engine or the base image.
only="latency,search,http,density,docker,kubernetes" prev=""
for a in "$@"; do
	case "$prev" in -only | --only) only=$a ;; esac
	case "$a" in -only=* | --only=*) only=${a#*=} ;; esac
	prev=$a
done
want() { case ",$only," in *,"$1",*) return 0 ;; esac; return 1; }
if ! want docker; then
	:
elif docker image inspect sandbox-mcp-base:latest >/dev/null 2>&1; then
	echo "bench: docker provider" >&2
	echo
	echo "### docker provider (\`go test -run '^\$' -bench 'WarmExecVsCLI|ColdFirstCall|WarmAcquire' -benchtime 50x ./providers/docker/\`)"
	echo
	echo "| figure | ours | peer | ratio | target | met |"
	echo "|---|---|---|---|---|---|"
	go test -run '^$' -bench 'WarmExecVsCLI|ColdFirstCall|WarmAcquire' -benchtime 50x ./providers/docker/ | awk '
		/^BenchmarkWarmExecVsCLI/ { for (i = 1; i < NF; i++) v[$(i+1)] = $i
			printf "| docker: warm bash `true`, alternated with the CLI on one container (medians) | %.1f ms | `docker exec CONTAINER true`: %.1f ms | %.3f× | ≤ 0.1× the CLI | %s |\n", v["ours-ms"], v["cli-ms"], v["ratio"], (v["ratio"] <= 0.1 ? "yes" : "no") }
		/^BenchmarkColdFirstCall/ { printf "| docker: cold first call (create, start, the supervisor up, first command) | %.0f ms | — | — | no slower than 423 ms (the exec path) | %s |\n", $3 / 1e6, ($3 / 1e6 <= 423 ? "yes" : "no") }
		/^BenchmarkWarmAcquire/ { printf "| docker: warm acquire (the thread'"'"'s container known and running) | %.1f µs | — | — | — | — |\n", $3 / 1e3 }'
else
	echo "bench: no docker engine or no sandbox-mcp-base:latest image (deploy/docker/build-images.sh): docker rows skipped" >&2
fi

# The kubernetes provider against kubectl and one exec, with go test -bench,
# when a cluster is configured for its tests (deploy/kubernetes/dev/cluster.sh
# up, then eval "$(deploy/kubernetes/dev/cluster.sh env)").
if ! want kubernetes; then
	:
elif [ -n "${KUBECONFIG:-}" ] && [ -n "${SANDBOX_MCP_K8S_SUPERVISOR_IMAGE:-}" ]; then
	echo "bench: kubernetes provider" >&2
	echo
	echo "### kubernetes provider (\`go test -run '^\$' -bench 'WarmExecVsKubectl|ReadFileVsKubectlCat|GrepVsExecGrep' -benchtime 20x ./providers/kubernetes/\`; \`-bench ColdFirstCall -benchtime 7x\`)"
	echo
	echo "| figure | ours | peer | ratio | target | met |"
	echo "|---|---|---|---|---|---|"
	{
		go test -run '^$' -bench 'WarmExecVsKubectl|ReadFileVsKubectlCat|GrepVsExecGrep' -benchtime 20x ./providers/kubernetes/
		go test -run '^$' -bench 'ColdFirstCall' -benchtime 7x ./providers/kubernetes/
	} | awk '
		function metrics() { delete v; for (i = 1; i < NF; i++) v[$(i+1)] = $i }
		/^BenchmarkWarmExecVsKubectl/ { metrics()
			printf "| kubernetes: warm bash `true` through the Pod'"'"'s supervisor, alternated with kubectl (medians) | %.1f ms | `kubectl exec POD -- true`: %.1f ms | %.3f× | ≤ 0.1× | %s |\n", v["ours-ms"], v["kubectl-ms"], v["ratio"], (v["ratio"] <= 0.1 ? "yes" : "no") }
		/^BenchmarkReadFileVsKubectlCat/ { metrics()
			printf "| kubernetes: read a 1 KiB file (FS Open + read) | %.2f ms | `kubectl exec POD -- cat FILE`: %.1f ms | %.3f× | ≤ 0.1× | %s |\n", v["ours-ms"], v["kubectl-ms"], v["ratio"], (v["ratio"] <= 0.1 ? "yes" : "no") }
		/^BenchmarkGrepVsExecGrep/ { metrics()
			printf "| kubernetes: grep (count) over 10,000 files in the Pod | %.0f ms | `grep -rc` by one exec: %.0f ms | %.2f× | ≤ 2× | %s |\n", v["ours-ms"], v["exec-ms"], v["ratio"], (v["ratio"] <= 2 ? "yes" : "no") }
		/^BenchmarkColdFirstCall/ { metrics()
			printf "| kubernetes: cold first call (Pod, installer, supervisor, channel, command; median of %d) | %.0f ms | — | — | no slower than 922 ms (the exec path) | %s |\n", $2, v["median-ms"], (v["median-ms"] <= 922 ? "yes" : "no") }'
else
	echo "bench: no cluster (KUBECONFIG and SANDBOX_MCP_K8S_SUPERVISOR_IMAGE; deploy/kubernetes/dev/cluster.sh): kubernetes rows skipped" >&2
fi
