package kubernetes

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// The benchmarks of issue #15, each against its peer in one run, the two
// alternated on one Pod (medians): bench/run.sh turns their metrics into
// the table of docs/benchmarks.md.

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func reportPair(b *testing.B, ours, peer []time.Duration, peerName string) {
	o, p := median(ours), median(peer)
	b.ReportMetric(float64(o)/1e6, "ours-ms")
	b.ReportMetric(float64(p)/1e6, peerName+"-ms")
	b.ReportMetric(float64(o)/float64(p), "ratio")
}

func kubectl(b *testing.B) string {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		b.Skip("no kubectl on PATH")
	}
	return bin
}

// BenchmarkWarmExecVsKubectl: bash `true` through the provider against
// `kubectl exec POD -- true`.
func BenchmarkWarmExecVsKubectl(b *testing.B) {
	bin := kubectl(b)
	p := newProviderT(b, newConfig(b))
	sb := acquire(b, p, "bench-exec-"+randomHex(4))
	execOut(b, sb, "true")
	var ours, peer []time.Duration
	for b.Loop() {
		t := time.Now()
		execOut(b, sb, "true")
		ours = append(ours, time.Since(t))
		t = time.Now()
		if out, err := exec.Command(bin, "-n", p.cfg.Namespace, "exec", sb.PodName(), "-c", containerName, "--", "true").CombinedOutput(); err != nil {
			b.Fatalf("kubectl exec: %v %s", err, out)
		}
		peer = append(peer, time.Since(t))
	}
	reportPair(b, ours, peer, "kubectl")
}

// BenchmarkReadFileVsKubectlCat: a 1 KiB file read through the provider's
// FS against `kubectl exec POD -- cat FILE`.
func BenchmarkReadFileVsKubectlCat(b *testing.B) {
	bin := kubectl(b)
	p := newProviderT(b, newConfig(b))
	sb := acquire(b, p, "bench-read-"+randomHex(4))
	const name = sandbox.WorkspaceDir + "/small.txt"
	want := bytes.Repeat([]byte("0123456789abcde\n"), 64)
	if err := sb.FS().Edit(b.Context(), name, func([]byte, bool) ([]byte, error) { return want, nil }); err != nil {
		b.Fatal(err)
	}
	var ours, peer []time.Duration
	for b.Loop() {
		t := time.Now()
		f, err := sb.FS().Open(b.Context(), name)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(got, want) {
			b.Fatalf("read %d bytes, err %v", len(got), err)
		}
		ours = append(ours, time.Since(t))
		t = time.Now()
		out, err := exec.Command(bin, "-n", p.cfg.Namespace, "exec", sb.PodName(), "-c", containerName, "--", "cat", name).Output()
		if err != nil || !bytes.Equal(out, want) {
			b.Fatalf("kubectl exec cat: %v", err)
		}
		peer = append(peer, time.Since(t))
	}
	reportPair(b, ours, peer, "kubectl")
}

// BenchmarkGrepVsExecGrep: grep (count mode) over a tree of 10,000 files
// in the Pod's workspace, through the provider (the search runs whole in
// the supervisor), against `grep -rc` run in the Pod by one exec through
// the same API client (no kubectl start-up in the peer's time).
func BenchmarkGrepVsExecGrep(b *testing.B) {
	p := newProviderT(b, newConfig(b))
	sb := acquire(b, p, "bench-grep-"+randomHex(4))
	const root = sandbox.WorkspaceDir + "/tree"
	// 100 directories of 100 files of 10 lines; every tenth file matches.
	if _, res := execOut(b, sb, `cd `+sandbox.WorkspaceDir+` && mkdir tree && cd tree && for d in $(seq 100); do mkdir d$d; for f in $(seq 100); do
		if [ $((f % 10)) = 0 ]; then n=needle; else n=hay; fi
		printf 'line one\nline two %s\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n' $n > d$d/f$f.txt; done; done`); res.ExitCode != 0 {
		b.Fatal("making the tree failed")
	}
	fsys := sb.FS().(interface {
		Grep(context.Context, search.GrepRequest, func(search.FileMatch) error) error
	})
	req := search.GrepRequest{Root: root, Pattern: "needle", Mode: search.ModeCount}
	var ours, peer []time.Duration
	for b.Loop() {
		t := time.Now()
		files := 0
		if err := fsys.Grep(b.Context(), req, func(search.FileMatch) error { files++; return nil }); err != nil || files != 1000 {
			b.Fatalf("grep: %d files, err %v", files, err)
		}
		ours = append(ours, time.Since(t))
		t = time.Now()
		var out bytes.Buffer
		err := p.stream(b.Context(), sb.PodName(), []string{"grep", "-rc", "needle", root}, nil, &out, io.Discard)
		if err != nil || strings.Count(out.String(), ":1\n") != 1000 {
			b.Fatalf("grep -rc: %v", err)
		}
		peer = append(peer, time.Since(t))
	}
	reportPair(b, ours, peer, "exec")
}

// BenchmarkColdFirstCall: a new thread's first bash call: the Pod made,
// its supervisor installed and started, the channel opened, the command
// run.
// It reports the median (median-ms) beside the mean: the kubelet's
// periodic loops make single calls vary. Each Pod is gone before the next
// call starts.
func BenchmarkColdFirstCall(b *testing.B) {
	p := newProviderT(b, newConfig(b))
	var all []time.Duration
	for b.Loop() {
		t := time.Now()
		thread := "bench-cold-" + randomHex(4)
		sb, err := p.Acquire(b.Context(), thread)
		if err != nil {
			b.Fatal(err)
		}
		execOut(b, sb, "true")
		all = append(all, time.Since(t))
		b.StopTimer()
		p.Release(thread)
		dropAndWait(b, p, sb.(*Sandbox).name)
		b.StartTimer()
	}
	b.ReportMetric(float64(median(all))/1e6, "median-ms")
}

// dropAndWait deletes the Pod and waits until it is gone, so that the
// kubelet's teardown of it does not slow the next cold start.
func dropAndWait(b *testing.B, p *Provider, name string) {
	p.dropPod(name)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(b.Context(), name, metav1.GetOptions{}); err != nil {
			return
		}
	}
	b.Fatalf("Pod %s still there a minute after its delete", name)
}

// BenchmarkColdFirstCallWarm: a new thread's first bash call with a warm
// Pod ready (kubernetes.warm: 1, the server's own, warm_pool pods) — the
// claim, the channel its maker opened, the command — alternated call by
// call with a new thread's first call on a server without warm Pods
// (BenchmarkColdFirstCall's path), each with the node quiet (the pool
// refilled, the last Pod gone); it reports both medians, their ratio, and
// the median time the pool took to refill after a claim (refill-ms) and
// that of the acquire, which claims (claim-ms).
//
//	go test -run '^$' -bench ColdFirstCallWarm -benchtime 15x ./providers/kubernetes/
func BenchmarkColdFirstCallWarm(b *testing.B) { benchFirstCallWarm(b, WarmPoolPods, 0) }

// BenchmarkColdFirstCallWarmPVC: BenchmarkColdFirstCallWarm in storage
// mode pvc, both servers' claims bound to static hostPath volumes made
// beforehand (the cluster has no provisioner): the warm Pod's claim is
// taken (a patch) and the thread's record made, where the cold call's
// claim is made and bound before its Pod starts.
//
//	go test -run '^$' -bench ColdFirstCallWarmPVC -benchtime 15x ./providers/kubernetes/   # 20x at most
func BenchmarkColdFirstCallWarmPVC(b *testing.B) { benchFirstCallWarm(b, WarmPoolPods, 3*20+4) }

// BenchmarkColdFirstCallAgentSandbox: BenchmarkColdFirstCallWarm with the
// warm Pod a member of an agent-sandbox SandboxWarmPool (warm_pool
// agent-sandbox): the claim is a SandboxClaim the controller adopts a
// member for, then the Pod taken off agent-sandbox and its directory
// renamed; refill-ms is the controller's (a Sandbox, its Pod started).
//
//	go test -run '^$' -bench ColdFirstCallAgentSandbox -benchtime 15x ./providers/kubernetes/
func BenchmarkColdFirstCallAgentSandbox(b *testing.B) {
	requireAgentSandbox(b)
	benchFirstCallWarm(b, WarmPoolAgentSandbox, 0)
}

// benchFirstCallWarm alternates a first call with a warm Pod of warmPool
// and one without; volumes > 0 is storage mode pvc, with that many volumes
// for the two servers' claims (a third for the cold one's, one a call; the
// rest for the warm one's, two a call: the claimed one and the refill's).
func benchFirstCallWarm(b *testing.B, warmPool string, volumes int) {
	coldCfg, cfg := newConfig(b), newConfig(b)
	if volumes > 0 {
		coldCfg = pvcConfig(b, coldCfg, volumes/3)
		cfg = pvcConfig(b, cfg, volumes-volumes/3)
	}
	cold := newProviderT(b, coldCfg)
	cfg.Warm = 1
	cfg.WarmPool = warmPool
	warm := newProviderT(b, cfg)
	if a, ok := warm.pool.src.(*agentPool); ok {
		dyn := requireAgentSandbox(b)
		b.Cleanup(func() {
			for _, gvr := range []schema.GroupVersionResource{warmPoolGVR, templateGVR} {
				dyn.Resource(gvr).Namespace(cfg.Namespace).Delete(context.Background(), a.name, metav1.DeleteOptions{})
			}
		})
	}
	var ours, peer, refill, claim []time.Duration
	first := func(p *Provider, wantWarm bool) time.Duration {
		thread := "bench-first-" + randomHex(4)
		t := time.Now()
		sb, err := p.Acquire(b.Context(), thread)
		if err != nil {
			b.Fatal(err)
		}
		if wantWarm {
			claim = append(claim, time.Since(t))
		}
		execOut(b, sb, "true")
		d := time.Since(t)
		if name := sb.(*Sandbox).name; p.isWarmName(name) != wantWarm {
			b.Fatalf("thread %s ran in %s (warm: %v)", thread, name, wantWarm)
		}
		b.StopTimer()
		p.Release(thread)
		if wantWarm {
			t := time.Now()
			waitWarm(b, p, 1, true)
			if _, ok := p.pool.src.(*agentPool); ok {
				waitAhead(b, p)
			}
			refill = append(refill, time.Since(t))
		}
		dropAndWait(b, p, sb.(*Sandbox).name)
		b.StartTimer()
		return d
	}
	b.StopTimer()
	waitWarm(b, warm, 1, true)
	if _, ok := warm.pool.src.(*agentPool); ok {
		waitAhead(b, warm)
	}
	b.StartTimer()
	for b.Loop() {
		ours = append(ours, first(warm, true))
		peer = append(peer, first(cold, false))
	}
	reportPair(b, ours, peer, "cold")
	b.ReportMetric(float64(median(refill))/1e6, "refill-ms")
	b.ReportMetric(float64(median(claim))/1e6, "claim-ms") // the acquire: the claim and the rename
}
