package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubernetesDensity is the idle cost of a thread on the kubernetes
// provider (issue #28 item 4): n threads made to hold a Pod each (one bash
// call), then idle, on the cluster at KUBECONFIG with the images the
// provider's tests use (deploy/kubernetes/dev/cluster.sh env); nothing
// when those are not set. Per thread: the server's RSS growth and open
// files, and its Pod's memory and processes as the node's cgroup counts
// them (the pause container, the supervisor, what its one command left).
func kubernetesDensity(ctx context.Context, serverArgs func(string) []string, tmp string, n int) ([]row, error) {
	kubeconfig, img, supImg := os.Getenv("KUBECONFIG"), os.Getenv("SANDBOX_MCP_K8S_IMAGE"), os.Getenv("SANDBOX_MCP_K8S_SUPERVISOR_IMAGE")
	if kubeconfig == "" || img == "" || supImg == "" {
		return nil, nil // no cluster: no kubernetes figure
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	var b [3]byte
	rand.Read(b[:])
	prefix := "density-" + hex.EncodeToString(b[:])
	storage := filepath.Join(tmp, "density-k8s-storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(tmp, "density-k8s.yaml")
	pull := os.Getenv("SANDBOX_MCP_K8S_PULL")
	if pull == "" {
		pull = "IfNotPresent"
	}
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `provider: kubernetes
kubernetes:
  kubeconfig: %s
  namespace: default
  image: %s
  supervisor_image: %s
  image_pull_policy: %s
  pod_prefix: %s
  replicas: %d
  storage: {mode: host_path, host_path: %s}
  resources: {cpu: 100m, memory: 256Mi, ephemeral_storage: 256Mi}
limits:
  threads_per_token: %d
`, kubeconfig, img, supImg, pull, prefix, n+1, storage, n+1), 0o644); err != nil {
		return nil, err
	}
	selector := metav1.ListOptions{LabelSelector: "sandbox-mcp/pod-prefix=" + prefix}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		zero := int64(0)
		cs.CoreV1().Pods("default").DeleteCollection(c, metav1.DeleteOptions{GracePeriodSeconds: &zero}, selector)
	}()
	var mem int64
	var procs, pods int
	before, after, took, err := measureDensityThen(ctx, func() (*httpProc, error) {
		return startHTTP(*serverBin, append([]string{"--http", "127.0.0.1:0", "--config", cfg}, serverArgs("density-k8s")...)...)
	}, n, func() {
		list, err := cs.CoreV1().Pods("default").List(ctx, selector)
		if err != nil {
			return
		}
		for _, p := range list.Items {
			if m, np, ok := podCgroup(string(p.UID)); ok {
				mem += m
				procs += np
				pods++
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if pods != n {
		return nil, fmt.Errorf("kubernetes density: the cgroups of %d Pods found, want %d", pods, n)
	}
	return []row{
		{figure: fmt.Sprintf("kubernetes: %d idle threads: server RSS", n), ours: float64(after.serverRSS), peer: float64(before.serverRSS), unit: "bytes", note: "peer: the same server with no session"},
		{figure: "kubernetes, per idle thread: server memory", ours: float64(after.serverRSS-before.serverRSS) / float64(n), unit: "bytes"},
		{figure: "kubernetes, per idle thread: its Pod's memory (its cgroup: usage less inactive page cache)", ours: float64(mem) / float64(n), unit: "bytes"},
		{figure: "kubernetes, per idle thread: its Pod's processes (pause included)", unit: "", note: fmt.Sprintf("%.2f", float64(procs)/float64(n))},
		{figure: "kubernetes, per idle thread: open files of the server", unit: "", note: fmt.Sprintf("%.2f", float64(after.fds-before.fds)/float64(n))},
		{figure: fmt.Sprintf("kubernetes: time to open the %d threads, 8 at a time", n), ours: float64(took), unit: "time"},
	}, nil
}

// podCgroup reads the memory (usage less inactive file pages, as docker
// stats counts) and the processes of the Pod uid from the node's cgroups,
// v1 or v2, where the kubelet (cgroupfs driver) put it.
func podCgroup(uid string) (mem int64, procs int, ok bool) {
	dirName := "pod" + uid
	for _, root := range []string{"/sys/fs/cgroup/memory/kubepods", "/sys/fs/cgroup/kubepods", "/sys/fs/cgroup/kubepods.slice"} {
		for _, qos := range []string{"", "burstable", "besteffort"} {
			dir := filepath.Join(root, qos, dirName)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			usage := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
			inactive := statField(filepath.Join(dir, "memory.stat"), "total_inactive_file")
			if usage < 0 { // v2
				usage = readInt(filepath.Join(dir, "memory.current"))
				inactive = statField(filepath.Join(dir, "memory.stat"), "inactive_file")
			}
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "cgroup.procs" {
					if b, err := os.ReadFile(p); err == nil {
						procs += len(strings.Fields(string(b)))
					}
				}
				return nil
			})
			return max(usage-max(inactive, 0), 0), procs, usage >= 0
		}
	}
	return 0, 0, false
}

func readInt(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// statField is the value of key in a cgroup's memory.stat, -1 if absent.
func statField(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return -1
}
