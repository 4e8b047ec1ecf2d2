package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Two `sandbox-mcp --http --provider kubernetes` replicas on one cluster:
// the same X-Thread-ID through either sees the same files, concurrent
// str_replace calls split over both lose no update, and killing one leaves
// the other serving the thread.
func TestE2EKubernetesReplicasShareThreads(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_IMAGE"))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	replicas := []*httpProc{
		startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s1")),
		startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s2")),
	}
	sessions := make([]*mcp.ClientSession, 2)
	for i, r := range replicas {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: r.url + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{thread: "team"}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect replica %d: %v", i, err)
		}
		defer cs.Close()
		sessions[i] = cs
	}
	callText := func(cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "call error: " + err.Error(), true
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("marker-%02d", i))
	}
	if out, isErr := callText(sessions[0], "write_file", map[string]any{"path": "shared.txt", "content": strings.Join(lines, "\n") + "\n"}); isErr {
		t.Fatalf("write through replica 1: %s", out)
	}
	if out, _ := callText(sessions[1], "read_file", map[string]any{"path": "shared.txt", "start_line": 1, "end_line": 1}); out != "marker-00\n" {
		t.Fatalf("replica 2 reads %q", out)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, isErr := callText(sessions[i%2], "str_replace", map[string]any{"path": "shared.txt", "old_str": lines[i], "new_str": fmt.Sprintf("done-%02d", i)}); isErr {
				t.Errorf("str_replace %d: %s", i, out)
			}
		}()
	}
	wg.Wait()
	out, _ := callText(sessions[1], "bash", map[string]any{"command": "grep -c done- shared.txt; grep -c marker- shared.txt || true"})
	if out != "20\n0\n[exit code 0]" {
		t.Fatalf("after 20 concurrent edits over two replicas: %q", out)
	}
	// One replica dies; the other keeps serving the thread.
	replicas[0].cmd.Process.Signal(syscall.SIGKILL)
	<-replicas[0].exited
	if out, _ := callText(sessions[1], "read_file", map[string]any{"path": "shared.txt", "start_line": 20}); out != "done-19\n" {
		t.Fatalf("after replica 1 died: %q", out)
	}
}

// k8sE2EConfig skips (or fails, with SANDBOX_MCP_REQUIRE_K8S=1) without a
// cluster, makes a namespace of its own (deleted at the end) and writes a
// kubernetes config whose sandboxes run img ("": a busybox image); it
// returns the config file and a temp dir.
func k8sE2EConfig(t *testing.T, img string) (cfgFile, dir string) {
	t.Helper()
	kubeconfig := os.Getenv("KUBECONFIG")
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("SANDBOX_MCP_REQUIRE_K8S") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf("SKIPPED: "+format, args...)
	}
	if kubeconfig == "" {
		skip("no cluster: set KUBECONFIG")
	}
	supervisorImage := os.Getenv("SANDBOX_MCP_K8S_SUPERVISOR_IMAGE")
	if supervisorImage == "" {
		skip("no supervisor image: set SANDBOX_MCP_K8S_SUPERVISOR_IMAGE (deploy/kubernetes/build-image.sh, loaded into the cluster)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		skip("no cluster at KUBECONFIG: %v", err)
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	ns := "smcp-e2e-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		skip("no cluster at KUBECONFIG: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		cs.CoreV1().Pods(ns).DeleteCollection(c, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		cs.CoreV1().Namespaces().Delete(c, ns, metav1.DeleteOptions{})
	})
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pull := os.Getenv("SANDBOX_MCP_K8S_PULL")
	if img == "" {
		img, pull = "local.test/busybox:1.35", "IfNotPresent"
	}
	dir = t.TempDir()
	storage := filepath.Join(dir, "storage")
	os.MkdirAll(storage, 0o755)
	cfgFile = filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`provider: kubernetes
kubernetes:
  kubeconfig: %s
  namespace: %s
  image: %s
  supervisor_image: %s
  image_pull_policy: %s
  pod_prefix: e2e-%s
  storage: {mode: host_path, host_path: %s}
  resources: {cpu: 500m, memory: 256Mi, ephemeral_storage: 256Mi}
`, kubeconfig, ns, img, supervisorImage, pull, hex.EncodeToString(b[:2]), storage)), 0o644)
	return cfgFile, dir
}
