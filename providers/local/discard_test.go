//go:build unix

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

func TestDiscardContract(t *testing.T) {
	for name, cfg := range map[string]Config{"host bash": {AllowHostBash: true}, "bwrap": {Isolation: IsolationBwrap}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if cfg.Isolation == IsolationBwrap {
				requireBwrap(t)
			}
			cfg.StateDir = t.TempDir()
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			sandboxtest.Discard(t, p)
		})
	}
}

// A job keeps a thread's sandbox after its last Release (linger.go):
// Discard ends the job and the sandbox before the thread's files go.
func TestDiscardEndsTheJobThatKeepsTheSandbox(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	ticks := t.TempDir()
	os.Chmod(ticks, 0o777) // commands run as nobody when the test is root
	state := t.TempDir()
	p, err := New(Config{StateDir: state, Isolation: IsolationBwrap, Mounts: []sandbox.Mount{{Virtual: "/mnt/ticks", Host: ticks}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const th = "anon-1"
	sb, err := p.Acquire(t.Context(), th)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.(sandbox.Jobs).StartJob(t.Context(), sandbox.JobRequest{Command: "while :; do echo x >> /mnt/ticks/tick; sleep 0.1; done"}); err != nil {
		t.Fatal(err)
	}
	tick := filepath.Join(ticks, "tick")
	if !testkit.Poll(10*time.Second, 50*time.Millisecond, func() bool { _, err := os.Stat(tick); return err == nil }) {
		t.Fatal("the job wrote no tick")
	}
	p.Release(th)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := p.Discard(ctx, th); err != nil {
		t.Fatal(err)
	}
	if _, _, held := p.threads.Held(th); held {
		t.Fatal("the sandbox is still held after Discard")
	}
	if _, err := os.Stat(filepath.Join(state, "threads", th)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the thread's directory after Discard: %v", err)
	}
	if before, after := testkit.Growth(t, tick, 500*time.Millisecond); after != before {
		t.Fatalf("the job still writes after Discard: %d -> %d bytes", before, after)
	}
}
