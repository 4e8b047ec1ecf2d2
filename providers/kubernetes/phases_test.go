package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// podPhases watches Pod name from start on and notes, at the time each was
// seen through the API, the phases of a cold start: scheduled, the init
// container running and ended, the sandbox container running, Ready.
type podPhases struct {
	mu    sync.Mutex
	start time.Time
	seen  map[string]time.Duration
	order []string
}

func (ph *podPhases) note(what string) {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	if _, ok := ph.seen[what]; ok {
		return
	}
	ph.seen[what] = time.Since(ph.start)
	ph.order = append(ph.order, what)
}

func (ph *podPhases) String() string {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	var b strings.Builder
	for _, w := range ph.order {
		fmt.Fprintf(&b, " %s=%dms", w, ph.seen[w].Milliseconds())
	}
	return b.String()
}

func watchPhases(ctx context.Context, t testing.TB, p *Provider, name string) *podPhases {
	ph := &podPhases{start: time.Now(), seen: map[string]time.Duration{}}
	w, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Added {
				ph.note("created")
			}
			if pod.Spec.NodeName != "" {
				ph.note("scheduled")
			}
			for _, cs := range pod.Status.InitContainerStatuses {
				if cs.State.Running != nil {
					ph.note("init-running")
				}
				if cs.State.Terminated != nil {
					ph.note("init-ended")
				}
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if cs.State.Running != nil {
					ph.note("sandbox-running")
				}
			}
			for _, c := range pod.Status.Conditions {
				if c.Status == corev1.ConditionTrue {
					ph.note(string(c.Type))
				}
			}
		}
	}()
	return ph
}

// BenchmarkColdPhases is BenchmarkColdFirstCall with the phases the API
// shows and the provider's timings, as a log line per call (-v).
func BenchmarkColdPhases(b *testing.B) { coldPhases(b, false) }

// BenchmarkColdPhasesPVC is BenchmarkColdPhases in storage mode pvc: each
// thread's claim is bound to a static hostPath volume of a class of the
// benchmark's own, made beforehand (the cluster has no provisioner).
func BenchmarkColdPhasesPVC(b *testing.B) { coldPhases(b, true) }

func coldPhases(b *testing.B, pvc bool) {
	cfg := newConfig(b)
	var logs lines
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if pvc {
		// Volumes for every call, made a second ahead: with each made
		// just before its claim, two of 18 cold calls took 3.6 and 5.8 s
		// (the Pod scheduled that late); with them made ahead, none of 24.
		cfg = pvcConfig(b, cfg, 24) // -benchtime 24x at most
		time.Sleep(time.Second)
	}
	p := newProviderT(b, cfg)
	var all []time.Duration
	for b.Loop() {
		all = append(all, coldCall(b, p, &logs, "", 1500*time.Millisecond))
	}
	b.ReportMetric(float64(median(all))/1e6, "median-ms")
}

// BenchmarkColdVariants alternates, call by call, ways of putting the
// supervisor into the Pod (-v logs each call's phases):
//   - init: an init container copies it (the design before), the sandbox
//     container starts after the kubelet's next relist has seen it end;
//   - hook: the installer's postStart hook copies it, its main process waits;
//   - main: the installer's main process copies it, its hook waits for the
//     copy (podSpec);
func BenchmarkColdVariants(b *testing.B) {
	cfg := newConfig(b)
	var logs lines
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newProviderT(b, cfg)
	variants := []struct {
		name   string
		mutate func(*corev1.Pod)
	}{
		{"init", func(pod *corev1.Pod) {
			inst := *container(b, &pod.Spec, installerName)
			inst.Command = []string{installerBin, "supervise", "--install", supervisorBin}
			inst.Lifecycle = nil
			inst.Resources = *container(b, &pod.Spec, containerName).Resources.DeepCopy()
			pod.Spec.InitContainers = []corev1.Container{inst}
			pod.Spec.Containers = []corev1.Container{*container(b, &pod.Spec, containerName)}
		}},
		{"hook", func(pod *corev1.Pod) {
			inst := container(b, &pod.Spec, installerName)
			inst.Command = []string{installerBin, "supervise", "--await", "/nonexistent"} // waits a minute
			inst.Lifecycle.PostStart.Exec.Command = []string{installerBin, "supervise", "--install", supervisorBin}
		}},
		{"main", nil},
	}
	times := map[string][]time.Duration{}
	for b.Loop() {
		for _, v := range variants {
			p.mutatePod = v.mutate
			times[v.name] = append(times[v.name], coldCall(b, p, &logs, v.name+": ", time.Second))
		}
	}
	for _, v := range variants {
		b.ReportMetric(float64(median(times[v.name]))/1e6, v.name+"-median-ms")
	}
}

// lines keeps what a text slog handler writes.
// coldCall is one cold first call of a new thread, timed from the
// Pod's creation as the watch saw it; its phases and the provider's
// timing logs are logged (after settle, for the watch to see the rest),
// and the Pod is gone before it returns.
func coldCall(b *testing.B, p *Provider, logs *lines, label string, settle time.Duration) time.Duration {
	thread := "bench-cold-" + randomHex(4)
	sb, err := p.Acquire(b.Context(), thread)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	ph := watchPhases(ctx, b, p, sb.(*Sandbox).name)
	execOut(b, sb, "true")
	d := time.Since(ph.start)
	b.StopTimer()
	time.Sleep(settle)
	cancel()
	b.Logf("%scold %dms:%s; provider:%s", label, d.Milliseconds(), ph, logs.take("create", "running", "connect"))
	p.Release(thread)
	dropAndWait(b, p, sb.(*Sandbox).name)
	b.StartTimer()
	return d
}

// lines is the provider's log, written by its logger while a benchmark
// reads it.
type lines struct{ testkit.Buffer }

// take returns the values of the keys in what was written, and forgets it.
func (l *lines) take(keys ...string) string {
	written := l.Take()
	var out strings.Builder
	for _, k := range keys {
		for _, m := range regexp.MustCompile(` `+k+`=(\S+)`).FindAllStringSubmatch(written, -1) {
			fmt.Fprintf(&out, " %s=%s", k, m[1])
		}
	}
	return out.String()
}
