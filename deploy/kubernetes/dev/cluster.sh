#!/usr/bin/env bash
# A real single-node Kubernetes on this machine for sandbox-mcp's kubernetes
# tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
# kubelet built from the Go module proxy, a containerd of its own (Debian's,
# with its own root, state and socket: the Docker engine's is never
# touched), a CNI bridge, everything on loopback. Offline apart from the Go
# module proxy and Debian's packages; no registry: images come from the
# local Docker engine.
#
#   cluster.sh build   build the binaries (cold: ~10 min on 2 cores, 5 GB of Go cache)
#   cluster.sh up      start it, load sandbox-mcp's images, print what the tests need
#   cluster.sh env     the variables for `go test` (eval "$(cluster.sh env)")
#   cluster.sh load IMAGE...   copy images from the Docker engine into the cluster
#   cluster.sh down    stop it, undo what up did to the host (mounts, bridge, sysctls)
#
# Its ports (22379-80, 26443, 20248-59) and bridge (smk8s0, 10.245.0.0/24)
# are its own; the kubelet's cgroups (kubepods) and a few paths it uses
# whatever its flags are not, so run no other kubelet beside it. Needs root
# (containerd, the kubelet, a bridge). Settings: SANDBOX_MCP_K8S_DIR
# (default /tmp/sandbox-mcp-k8s), KUBE_VERSION (default v1.37.2).
# Tests: `go test ./providers/kubernetes/ ./cmd/sandbox-mcp/` with the env
# printed by `env`; without it the kubernetes tests say SKIPPED.
set -euo pipefail
dir=${SANDBOX_MCP_K8S_DIR:-/tmp/sandbox-mcp-k8s}
kver=${KUBE_VERSION:-v1.37.2}
bin=$dir/bin run=$dir/run
pki=$run/pki pids=$run/pids logs=$run/logs
sock=$run/containerd/containerd.sock
bridge=smk8s0 cidr=10.245.0.0/24 node_ip=10.245.0.1 svc_cidr=10.97.0.0/24
etcd_port=22379 api_port=26443 kubelet_port=20250
pause=local.test/pause:3.10
images=(sandbox-mcp-base:latest sandbox-mcp:ci sandbox-mcp-test:busybox-sh)
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
sysctls="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
export KUBECONFIG=$run/admin.kubeconfig

step=0 steps=0
say() { step=$((step + 1)); echo "[$(date +%H:%M:%S)] ($step/$steps) $*" >&2; }
die() { echo "cluster.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (containerd, the kubelet, a network bridge)"

cmd_build() {
	steps=$((${#components[@]} + 2))
	mkdir -p "$bin"
	say "host packages (containerd, runc, CNI plugins, openssl, jq)"
	local need=() c
	for c in containerd:containerd ctr:containerd runc:runc jq:jq curl:curl openssl:openssl ip:iproute2 gcc:gcc; do
		command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
	done
	[ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev) # the static pause
	if [ ${#need[@]} -gt 0 ] || [ ! -x "$dir/cni/usr/lib/cni/bridge" ]; then
		apt-get update -qq
		[ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
		local tmp; tmp=$(mktemp -d)
		(cd "$tmp" && apt-get download -qq containernetworking-plugins >/dev/null)
		rm -rf "$dir/cni" && dpkg-deb -x "$tmp"/containernetworking-plugins_*.deb "$dir/cni" && rm -rf "$tmp"
	fi
	local src="" minor=${kver#v1.} patch=${kver##*.}; minor=${minor%%.*}
	for c in "${components[@]}"; do
		if [ -x "$bin/$c" ] && { [ "$c" = etcd ] || "$bin/$c" --version 2>/dev/null | grep -qF "$kver"; }; then
			say "$c: built already"; continue
		fi
		if [ -z "$src" ]; then
			# k8s.io/kubernetes replaces its staging modules with local paths;
			# point them at the published v0.<minor> modules to build it as a module.
			src=$dir/src
			rm -rf "$src" && cp -r "$(go mod download -json "k8s.io/kubernetes@$kver" | jq -r .Dir)" "$src" && chmod -R u+w "$src"
			rm -f "$src"/go.work*
			sed -i -E "s#^(\s*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\$#\1\2 => \2 v0.$minor.$patch#" "$src/go.mod"
		fi
		say "$c: building (the first build takes minutes)"
		local ld="-s -w" p
		for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
			ld="$ld -X $p.gitVersion=$kver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		done
		if [ "$c" = etcd ]; then
			(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
		else
			(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$bin/$c" "./cmd/$c")
		fi
	done
	say "the pause image (a static C program: the Pods' sandbox container)"
	if [ ! -f "$dir/pause.tar" ]; then
		local w; w=$(mktemp -d)
		printf '%s\n' '#include <signal.h>' '#include <unistd.h>' '#include <sys/wait.h>' \
			'static void down(int s) { (void)s; _exit(0); }' \
			'static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }' \
			'int main(void) { signal(SIGTERM, down); signal(SIGINT, down); signal(SIGCHLD, reap); for (;;) pause(); }' >"$w/pause.c"
		mkdir -p "$w/rootfs" "$w/img"
		gcc -static -Os -s -o "$w/rootfs/pause" "$w/pause.c"
		tar --mtime=@0 --owner=0 --group=0 -C "$w/rootfs" -cf "$w/img/layer.tar" .
		printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
			"$(go env GOARCH)" "$(sha256sum "$w/img/layer.tar" | cut -d' ' -f1)" >"$w/img/config.json"
		printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$pause" >"$w/img/manifest.json"
		tar -C "$w/img" -cf "$dir/pause.tar" manifest.json config.json layer.tar
		rm -rf "$w"
	fi
}

# certs makes a CA and the certificates and kubeconfigs of every component.
certs() {
	[ -f "$pki/ca.crt" ] && return
	mkdir -p "$pki"
	(
		cd "$pki"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj /CN=sandbox-mcp-dev-ca 2>/dev/null
		cert() { # name subject [sans] [usage]
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s\n' "${4:-clientAuth}" "${3:+subjectAltName=$3}" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:${svc_cidr%.0/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" serverAuth
		cert admin "/O=system:masters/CN=admin"
		cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
		cert kubelet "/O=system:nodes/CN=system:node:localhost"
		cert kubelet-serving /CN=localhost "IP:127.0.0.1,IP:$node_ip,DNS:localhost" serverAuth
		cert controller-manager /CN=system:kube-controller-manager
		cert scheduler /CN=system:kube-scheduler
		openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)
	local who
	for who in admin kubelet controller-manager scheduler; do
		cat >"$run/$who.kubeconfig" <<-KC
			apiVersion: v1
			kind: Config
			clusters: [{name: dev, cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$pki/ca.crt"}}]
			users: [{name: $who, user: {client-certificate: "$pki/$who.crt", client-key: "$pki/$who.key"}}]
			contexts: [{name: dev, context: {cluster: dev, user: $who}}]
			current-context: dev
		KC
	done
}

start() { # name command...
	local name=$1; shift
	setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
	echo $! >"$pids/$name.pid"
}
wait_for() { # seconds what command...
	local secs=$1 what=$2 i; shift 2
	for ((i = 0; i < secs * 10; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	die "$what did not come up in ${secs}s: see $logs"
}
api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port$1" "${@:2}"; }
node_ready() { api /api/v1/nodes/localhost | jq -e '.status.conditions[]? | select(.type == "Ready" and .status == "True")'; }

cmd_up() {
	steps=$((8 + ${#images[@]}))
	for c in "${components[@]}"; do [ -x "$bin/$c" ] || die "$bin/$c missing: run $0 build"; done
	[ ! -f "$pids/kubelet.pid" ] || ! kill -0 "$(cat "$pids/kubelet.pid")" 2>/dev/null || die "already up (run $0 down first)"
	mkdir -p "$pids" "$logs" "$run/containerd" "$run/cni/net.d" "$run/cni/ipam" "$run/kubelet"
	local d
	for d in /var/lib/kubelet /var/lib/cni /run/containerd; do # paths they use whatever the flags; down removes what up made
		[ -e "$d" ] || echo "$d" >>"$run/made-dirs"
	done
	say "certificates"
	certs
	say "etcd"
	start etcd "$bin/etcd" --name dev --data-dir "$run/etcd" --unsafe-no-fsync \
		--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
		--listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
		--initial-cluster "dev=http://127.0.0.1:$((etcd_port + 1))" --listen-metrics-urls ""
	wait_for 60 etcd curl -sf "http://127.0.0.1:$etcd_port/health"
	say "kube-apiserver"
	# The kubelet is reached by its Hostname address, localhost: all of the
	# apiserver's calls to it (exec, logs) stay on loopback.
	start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --endpoint-reconciler-type none \
		--cert-dir "$run/apiserver" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
		--kubelet-client-certificate "$pki/apiserver-kubelet.crt" --kubelet-client-key "$pki/apiserver-kubelet.key" \
		--kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types Hostname \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
		--service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range "$svc_cidr" \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --profiling=false
	wait_for 120 kube-apiserver api /readyz
	say "containerd (its own root, state and socket) and the CNI bridge $bridge"
	cat >"$run/containerd/config.toml" <<-TOML
		version = 2
		root = "$run/containerd/root"
		state = "$run/containerd/state"
		disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
		[grpc]
		  address = "$sock"
		[ttrpc]
		  address = ""
		[metrics]
		  address = ""
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$run/containerd/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$pause"
		  stream_server_address = "127.0.0.1"
		  stream_server_port = "0"
		  disable_apparmor = true
		  # A machine whose bounding set lacks CAP_SYS_RESOURCE cannot give a
		  # Pod a negative oom_score_adj: clamp it.
		  restrict_oom_score_adj = true
		  netns_mounts_under_state_dir = true
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        Root = "$run/containerd/runc"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "$dir/cni/usr/lib/cni"
		    conf_dir = "$run/cni/net.d"
	TOML
	cat >"$run/cni/net.d/10-dev.conflist" <<-JSON
		{"cniVersion": "0.4.0", "name": "sandbox-mcp-dev", "plugins": [{"type": "bridge", "bridge": "$bridge", "isGateway": true,
		 "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "dataDir": "$run/cni/ipam"}}]}
	JSON
	# The kubelet refuses a loopback node IP: the bridge's address is the node's.
	if ! ip link show "$bridge" >/dev/null 2>&1; then
		ip link add "$bridge" type bridge && ip addr add "$node_ip/24" dev "$bridge" && ip link set "$bridge" up
	fi
	start containerd containerd --config "$run/containerd/config.toml"
	wait_for 30 containerd ctr --address "$sock" version
	ctr --address "$sock" -n k8s.io images import "$dir/pause.tar" >/dev/null
	say "kubelet"
	cat >"$run/kubelet.yaml" <<-YAML
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: 127.0.0.1
		port: $kubelet_port
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: $((kubelet_port - 2))
		tlsCertFile: $pki/kubelet-serving.crt
		tlsPrivateKeyFile: $pki/kubelet-serving.key
		authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $pki/ca.crt}}
		authorization: {mode: AlwaysAllow}
		containerRuntimeEndpoint: unix://$sock
		cgroupDriver: cgroupfs
		failCgroupV1: false
		failSwapOn: false
		oomScoreAdj: 0
		podLogsDir: $run/pod-logs
		clusterDomain: cluster.local
		resolvConf: /etc/resolv.conf
		rotateCertificates: false
		serializeImagePulls: false
		evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
	YAML
	[ -f "$run/sysctl.saved" ] || sysctl -e $sysctls >"$run/sysctl.saved" 2>/dev/null || true # the kubelet sets some; down restores them
	start kubelet "$bin/kubelet" --config "$run/kubelet.yaml" --kubeconfig "$run/kubelet.kubeconfig" \
		--root-dir "$run/kubelet" --hostname-override localhost --node-ip "$node_ip"
	wait_for 120 "the node" node_ready
	say "kube-controller-manager and kube-scheduler"
	start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$run/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$run/controller-manager.kubeconfig" --authorization-kubeconfig "$run/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 20257 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key"
	start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$run/scheduler.kubeconfig" \
		--authentication-kubeconfig "$run/scheduler.kubeconfig" --authorization-kubeconfig "$run/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 20259 --leader-elect=false
	wait_for 60 "the default ServiceAccount" api /api/v1/namespaces/default/serviceaccounts/default
	say "images from the Docker engine"
	local img
	for img in "${images[@]}"; do
		load_image "$img" || echo "  $img: not in the Docker engine (deploy/docker/build-images.sh, deploy/kubernetes/build-image.sh): skipped" >&2
	done
	say "up: eval \"\$($0 env)\" and run the tests"
}

load_image() {
	docker image inspect "$1" >/dev/null 2>&1 || return 1
	say "loading $1"
	docker save "$1" | ctr --address "$sock" -n k8s.io images import - >/dev/null
}

cmd_env() {
	echo "export KUBECONFIG=$run/admin.kubeconfig"
	echo "export SANDBOX_MCP_REQUIRE_K8S=1 SANDBOX_MCP_K8S_PULL=Never"
	echo "export SANDBOX_MCP_K8S_IMAGE=docker.io/library/sandbox-mcp-base:latest SANDBOX_MCP_K8S_BUSYBOX_IMAGE=docker.io/library/sandbox-mcp-test:busybox-sh"
	echo "export SANDBOX_MCP_K8S_SUPERVISOR_IMAGE=docker.io/library/sandbox-mcp:ci SANDBOX_MCP_K8S_SERVER_IMAGE=docker.io/library/sandbox-mcp:ci"
}

stop_pid() {
	local f=$pids/$1.pid p i
	[ -f "$f" ] || return 0
	p=$(cat "$f")
	if kill -TERM "$p" 2>/dev/null; then
		for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	fi
	rm -f "$f"
}

cmd_down() {
	steps=4
	[ -d "$pids" ] || { echo "cluster.sh: not up" >&2; return 0; }
	say "deleting the Pods (the kubelet tears down their mounts and network)"
	if api /readyz >/dev/null 2>&1; then
		local ns
		for ns in $(api /api/v1/pods | jq -r '.items[].metadata.namespace' | sort -u); do
			api "/api/v1/namespaces/$ns/pods?gracePeriodSeconds=0" -X DELETE >/dev/null || true
		done
		for _ in $(seq 100); do [ "$(api /api/v1/pods | jq '.items | length')" = 0 ] && break; sleep 0.2; done
		sleep 2
	fi
	say "stopping the components"
	stop_pid kube-scheduler; stop_pid kube-controller-manager; stop_pid kubelet
	local c p
	for c in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr --address "$sock" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true
	done
	local shims=()
	for p in /proc/[0-9]*; do # the shims of our containerd name its socket
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $sock" && shims+=("${p#/proc/}")
	done
	stop_pid containerd; stop_pid kube-apiserver; stop_pid etcd
	for p in "${shims[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	say "unmounting, removing the bridge and the kubelet's cgroups"
	local m
	for m in $(awk -v r="$run" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m" 2>/dev/null || true; done
	ip link del "$bridge" 2>/dev/null || true
	local cg
	for cg in /sys/fs/cgroup/*/kubepods; do [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true; done
	rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/cni/results/sandbox-mcp-dev-* 2>/dev/null || true
	if [ -f "$run/made-dirs" ]; then
		while read -r d; do [ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null; done <"$run/made-dirs"
		rm -f "$run/made-dirs"
	fi
	say "restoring the host's sysctls"
	[ -f "$run/sysctl.saved" ] && sed 's/ = /=/' "$run/sysctl.saved" | xargs -r sysctl -q -w && rm -f "$run/sysctl.saved"
	rm -rf "$pids" "$run/etcd" "$run/containerd" "$run/kubelet" "$run/cni"
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
env) cmd_env ;;
load)
	shift
	steps=$#
	[ -S "$sock" ] || die "the cluster is not up: $0 up (it loads sandbox-mcp's images itself)"
	for i in "$@"; do
		docker image inspect "$i" >/dev/null 2>&1 || die "$i: not in the Docker engine"
		load_image "$i" || die "$i: the cluster's containerd did not take it"
	done
	;;
down) cmd_down ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
