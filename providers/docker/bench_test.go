package docker

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// Side by side, in one run (go test -run '^$' -bench . ./providers/docker/):
// a warm bash `true` through the provider against `docker exec CONTAINER
// true` from the CLI, a cold first call (create, start, exec) and a warm
// acquire.

func BenchmarkWarmExecTrue(b *testing.B) {
	f := newFixture(b)
	sb := f.acquire(b, "warm")
	execOut(b, sb, "true")
	for b.Loop() {
		execOut(b, sb, "true")
	}
}

func BenchmarkWarmDockerCLIExecTrue(b *testing.B) {
	f := newFixture(b)
	execOut(b, f.acquire(b, "cli"), "true")
	id := f.ours(b, false)[0].ID
	for b.Loop() {
		if err := exec.Command("docker", "exec", id, "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkColdFirstCall(b *testing.B) {
	f := newFixture(b, func(c *Config) { c.Replicas = -1; c.Channel = os.Getenv("DOCKER_CHANNEL") })
	i := 0
	for b.Loop() {
		i++
		thread := fmt.Sprintf("cold-%d", i)
		sb, err := f.p.Acquire(b.Context(), thread)
		if err != nil {
			b.Fatal(err)
		}
		execOut(b, sb, "true")
		b.StopTimer()
		f.p.Release(thread)
		f.removeAll()
		b.StartTimer()
	}
}

func BenchmarkWarmAcquire(b *testing.B) {
	f := newFixture(b)
	execOut(b, f.acquire(b, "pool"), "true")
	for b.Loop() {
		sb, err := f.p.Acquire(b.Context(), "pool")
		if err != nil {
			b.Fatal(err)
		}
		_, done, err := sb.(*Sandbox).container(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		done()
		f.p.Release("pool")
	}
}

// BenchmarkWarmExecVsCLI alternates the two on one container, call by call,
// so that a slow spell of the engine hits both alike, and reports medians:
//
//	go test -run '^$' -bench WarmExecVsCLI -benchtime 100x ./providers/docker/
//
// DOCKER_CHANNEL=exec measures the exec channel (docker.channel) instead.
func BenchmarkWarmExecVsCLI(b *testing.B) {
	f := newFixture(b, func(c *Config) { c.Channel = os.Getenv("DOCKER_CHANNEL") })
	sb := f.acquire(b, "side-by-side")
	execOut(b, sb, "true")
	id := f.ours(b, false)[0].ID
	var ours, cli []time.Duration
	for b.Loop() {
		t := time.Now()
		execOut(b, sb, "true")
		ours = append(ours, time.Since(t))
		t = time.Now()
		if err := exec.Command("docker", "exec", id, "true").Run(); err != nil {
			b.Fatal(err)
		}
		cli = append(cli, time.Since(t))
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	o, c := median(ours), median(cli)
	b.ReportMetric(float64(o)/1e6, "ours-ms")
	b.ReportMetric(float64(c)/1e6, "cli-ms")
	b.ReportMetric(float64(o)/float64(c), "ratio")
}
