package docker

import (
	"fmt"
	"os/exec"
	"testing"
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
	f := newFixture(b, func(c *Config) { c.Replicas = -1 })
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
