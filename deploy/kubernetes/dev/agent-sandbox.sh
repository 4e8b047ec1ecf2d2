#!/usr/bin/env bash
# The agent-sandbox controller (kubernetes-sigs/agent-sandbox: Sandbox,
# SandboxTemplate, SandboxWarmPool, SandboxClaim) on the cluster of
# cluster.sh, so that the kubernetes provider's tests drive a real one.
# Built at a pinned version from the Go module proxy (no registry, no
# release download), its CRDs and RBAC applied from that module, and a
# Deployment of ours. Idempotent: a second run takes seconds (the binary is
# kept under the cluster's directory, the image in the Docker engine).
#
#   agent-sandbox.sh build   the controller binary and its image only
#   agent-sandbox.sh up      build, load the image, apply, wait until ready (default)
#   agent-sandbox.sh down    remove the controller and the CRDs (and so every object of them)
#
# Adapted to the offline cluster, and said so here rather than hidden:
#   - no webhook: --enable-webhook=false, and the CRDs are applied with
#     conversion strategy None (upstream's use Webhook conversion between
#     v1alpha1 and v1beta1, which needs the API server to reach a Service;
#     this API server listens on loopback, with no kube-proxy). Clients must
#     use v1beta1, the stored version; v1alpha1 is served unconverted.
#   - hostNetwork, with KUBERNETES_SERVICE_HOST/PORT naming the API server's
#     loopback address (in the serving certificate): a Pod cannot reach the
#     API server through the kubernetes Service here. Still its own
#     ServiceAccount token and upstream's ClusterRoles.
#   - no leader election (one replica), no metrics listener; the health
#     probe on loopback.
# Settings: SANDBOX_MCP_K8S_DIR (as cluster.sh), AGENT_SANDBOX_VERSION
# (default v0.5.6).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${SANDBOX_MCP_K8S_DIR:-/tmp/sandbox-mcp-k8s}
version=${AGENT_SANDBOX_VERSION:-v0.5.6}
module=sigs.k8s.io/agent-sandbox
bin=$dir/agent-sandbox/$version/agent-sandbox-controller
image=sandbox-mcp-dev-agent-sandbox:$version
ns=agent-sandbox-system
probe_port=20262
export KUBECONFIG=${KUBECONFIG:-$dir/run/admin.kubeconfig}
export GOFLAGS=-mod=mod

say() { echo "[$(date +%H:%M:%S)] agent-sandbox $version: $*" >&2; }
die() { echo "agent-sandbox.sh: $*" >&2; exit 1; }

# moddir is the module's directory in the module cache (downloaded once).
moddir() { go mod download -json "$module@$version" | jq -r .Dir; }

cmd_build() {
	if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "$version"; then
		say "controller: built already ($bin)"
	else
		say "controller: building from the module proxy (the first build takes minutes)"
		local w; w=$(mktemp -d)
		(
			cd "$w"
			go mod init sandbox-mcp-dev/agent-sandbox >/dev/null 2>&1
			printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/agent-sandbox-controller"\n' "$module" >tools.go
			go mod edit -require "$module@$version"
			go mod tidy >/dev/null 2>&1 || go mod tidy
			mkdir -p "$(dirname "$bin")"
			CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $module/internal/version.gitVersion=$version" -o "$bin.new" "$module/cmd/agent-sandbox-controller"
		) || { rm -rf "$w"; die "the controller did not build"; }
		rm -rf "$w"
		mv "$bin.new" "$bin"
	fi
	local sum; sum=$(sha256sum "$bin" | cut -c1-16)
	if [ "$(docker image inspect -f '{{index .Config.Labels "sandbox-mcp.binary"}}' "$image" 2>/dev/null)" = "$sum" ]; then
		say "image $image: made already"
		return
	fi
	say "image $image (FROM scratch: the static binary)"
	local ctx; ctx=$(mktemp -d)
	cp "$bin" "$ctx/agent-sandbox-controller"
	printf 'FROM scratch\nCOPY agent-sandbox-controller /agent-sandbox-controller\nUSER 65532:65532\nLABEL sandbox-mcp.binary=%s\nENTRYPOINT ["/agent-sandbox-controller"]\n' "$sum" >"$ctx/Dockerfile"
	docker build -q -t "$image" "$ctx" >"$ctx.log" 2>&1 || { cat "$ctx.log" >&2; rm -rf "$ctx" "$ctx.log"; die "docker build of $image failed"; }
	rm -rf "$ctx" "$ctx.log"
}

# apply applies manifest files server-side (the CRDs are too big for the
# last-applied annotation), each through filter (a jq program).
apply() { # filter file...
	local filter=$1 f; shift
	for f in "$@"; do
		kubectl create --dry-run=client -o json -f "$f" | jq "$filter" |
			kubectl apply --server-side --force-conflicts --field-manager sandbox-mcp-dev -f - >/dev/null
	done
}

cmd_up() {
	kubectl get --raw /readyz >/dev/null 2>&1 || die "no cluster at $KUBECONFIG: run cluster.sh up first"
	cmd_build
	say "loading $image into the cluster"
	"$here/cluster.sh" load "$image" 2>/dev/null
	local src server host port
	src=$(moddir)
	[ -d "$src/k8s/crds" ] || die "$module@$version has no k8s/crds"
	say "CRDs (conversion None: no webhook here) and upstream's ClusterRoles"
	apply '.spec.conversion = {"strategy": "None"}' "$src"/k8s/crds/*.yaml
	kubectl wait --for condition=Established --timeout 60s -f "$src/k8s/crds/" >/dev/null
	apply '.' "$src/k8s/rbac.generated.yaml" "$src/k8s/extensions-rbac.generated.yaml"
	server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	host=${server#https://}; host=${host%%/*}; port=${host##*:}; host=${host%:*}
	say "the controller's Deployment (API server $host:$port)"
	kubectl apply --server-side --force-conflicts --field-manager sandbox-mcp-dev -f - >/dev/null <<-YAML
		apiVersion: v1
		kind: Namespace
		metadata: {name: $ns}
		---
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: agent-sandbox-controller, namespace: $ns}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: agent-sandbox-controller}
		subjects: [{kind: ServiceAccount, name: agent-sandbox-controller, namespace: $ns}]
		roleRef: {kind: ClusterRole, name: agent-sandbox-controller, apiGroup: rbac.authorization.k8s.io}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: agent-sandbox-controller-extensions}
		subjects: [{kind: ServiceAccount, name: agent-sandbox-controller, namespace: $ns}]
		roleRef: {kind: ClusterRole, name: agent-sandbox-controller-extensions, apiGroup: rbac.authorization.k8s.io}
		---
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: agent-sandbox-controller, namespace: $ns, labels: {app: agent-sandbox-controller}}
		spec:
		  replicas: 1
		  strategy: {type: Recreate}
		  selector: {matchLabels: {app: agent-sandbox-controller}}
		  template:
		    metadata: {labels: {app: agent-sandbox-controller}}
		    spec:
		      serviceAccountName: agent-sandbox-controller
		      hostNetwork: true
		      enableServiceLinks: false
		      containers:
		      - name: controller
		        image: docker.io/library/$image
		        imagePullPolicy: Never
		        args: [--extensions, --leader-elect=false, --enable-webhook=false, --metrics-bind-address=0,
		               "--health-probe-bind-address=127.0.0.1:$probe_port"]
		        env:
		        - {name: KUBERNETES_SERVICE_HOST, value: "$host"}
		        - {name: KUBERNETES_SERVICE_PORT, value: "$port"}
		        readinessProbe: {httpGet: {host: 127.0.0.1, port: $probe_port, path: /readyz}, periodSeconds: 2}
		        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsNonRoot: true, capabilities: {drop: [ALL]}}
		        resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 512Mi}}
	YAML
	# A new image under the same tag (a rebuilt binary) takes a new Pod.
	kubectl -n "$ns" patch deployment agent-sandbox-controller --type merge \
		-p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"sandbox-mcp/binary\":\"$(sha256sum "$bin" | cut -c1-16)\"}}}}}" >/dev/null
	say "waiting for the controller"
	kubectl -n "$ns" rollout status deployment/agent-sandbox-controller --timeout 180s >/dev/null ||
		{ kubectl -n "$ns" logs deployment/agent-sandbox-controller --tail 30 >&2 || true; die "the controller is not ready"; }
	say "ready"
}

cmd_down() {
	kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null
	kubectl delete clusterrolebinding agent-sandbox-controller agent-sandbox-controller-extensions --ignore-not-found >/dev/null
	kubectl delete clusterrole agent-sandbox-controller agent-sandbox-controller-extensions --ignore-not-found >/dev/null
	kubectl delete crd sandboxes.agents.x-k8s.io sandboxclaims.extensions.agents.x-k8s.io \
		sandboxtemplates.extensions.agents.x-k8s.io sandboxwarmpools.extensions.agents.x-k8s.io --ignore-not-found >/dev/null
}

case "${1:-up}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
