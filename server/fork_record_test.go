package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// forkFixture: a local provider whose thread "src" has checkpoints 1 and 2.
func forkFixture(t *testing.T) (context.Context, *local.Provider, string) {
	t.Helper()
	ctx := context.Background()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	sb, err := lp.Acquire(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Release("src")
	ws := filepath.Join(sandbox.ThreadDir(state, "src"), "workspace")
	for i, msg := range []string{"one", "two"} {
		if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte(strings.Repeat(string(rune('a'+i)), 1000)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.(tools.Checkpointer).SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: msg}, 0); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, lp, state
}

// pruneFirst saves checkpoints in thread until checkpoint 1 is pruned.
func pruneFirst(t *testing.T, ctx context.Context, lp *local.Provider, state, thread string) {
	t.Helper()
	sb, err := lp.Acquire(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Release(thread)
	ws := filepath.Join(sandbox.ThreadDir(state, thread), "workspace")
	for i := range 3 {
		os.WriteFile(filepath.Join(ws, "a.txt"), []byte(strings.Repeat(string(rune('k'+i)), 100000)), 0o644)
		if _, err := sb.(tools.Checkpointer).SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "work", Auto: true}, 150000); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := sb.(tools.Checkpointer).ListCheckpoints(ctx)
	if len(list) == 0 || list[0].ID == "1" {
		t.Fatalf("checkpoint 1 not pruned: %v", list)
	}
}

// TestForkRecordRefusesOtherForks: with checkpoint 1 pruned, the fork's
// record accepts only the fork it was made as: another checkpoint of the
// source, or another source, is still ErrThreadExists.
func TestForkRecordRefusesOtherForks(t *testing.T) {
	ctx, lp, state := forkFixture(t)
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil || !made {
		t.Fatalf("fork: made %v, %v", made, err)
	}
	pruneFirst(t, ctx, lp, state, "dst")
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil || made {
		t.Errorf("the same fork again: made %v, %v", made, err)
	}
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "2", "dst"); !errors.Is(err, server.ErrThreadExists) {
		t.Errorf("another checkpoint of the source: %v, want ErrThreadExists", err)
	}
	if _, err := lp.Acquire(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	lp.Release("other")
	if _, _, err := server.ForkThread(ctx, lp, state, "other", "1", "dst"); !errors.Is(err, server.ErrThreadExists) {
		t.Errorf("another source: %v, want ErrThreadExists", err)
	}
}

// TestForkRecordOfAnEarlierThread: a record left of a thread that was
// removed does not make a thread made since under that key (not a fork)
// that fork, whether it has no checkpoint or a checkpoint 1 of its own.
func TestForkRecordOfAnEarlierThread(t *testing.T) {
	ctx, lp, state := forkFixture(t)
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil || !made {
		t.Fatalf("fork: made %v, %v", made, err)
	}
	if err := lp.Discard(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	// A plain thread under the same key, no checkpoint yet.
	sb, err := lp.Acquire(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); !errors.Is(err, server.ErrThreadExists) {
		t.Errorf("a new thread without checkpoints under the fork's key: %v, want ErrThreadExists", err)
	}
	// Its own checkpoint 1.
	if _, err := sb.(tools.Checkpointer).SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "mine"}, 0); err != nil {
		t.Fatal(err)
	}
	lp.Release("dst")
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); !errors.Is(err, server.ErrThreadExists) {
		t.Errorf("a new thread with its own checkpoint 1 under the fork's key: %v, want ErrThreadExists", err)
	}
}

// TestForkRecordRemovedBeforeNewFork: a fork of a key whose thread is
// gone replaces the record left of it; a fork that fails leaves none.
func TestForkRecordRemovedBeforeNewFork(t *testing.T) {
	ctx, lp, state := forkFixture(t)
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil || !made {
		t.Fatalf("fork: made %v, %v", made, err)
	}
	if err := lp.Discard(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "2", "dst"); err != nil || !made {
		t.Fatalf("fork again: made %v, %v", made, err)
	}
	pruneFirst(t, ctx, lp, state, "dst")
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); !errors.Is(err, server.ErrThreadExists) {
		t.Errorf("the earlier thread's fork: %v, want ErrThreadExists", err)
	}
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "2", "dst"); err != nil || made {
		t.Errorf("the fork it is: made %v, %v", made, err)
	}
	// A fork that fails (no such checkpoint) after a discard leaves no record.
	if err := lp.Discard(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "9", "dst"); err == nil {
		t.Fatal("fork of a checkpoint that does not exist: no error")
	}
	if _, err := os.Stat(filepath.Join(state, "forks", "dst")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of a discarded fork after a failed fork: %v", err)
	}
}

// TestForkRecordNamespaced: a namespaced key's record is under its
// namespace's directory, and no temp file is left.
func TestForkRecordNamespaced(t *testing.T) {
	ctx, lp, state := forkFixture(t)
	dst := "@0123456789abcdef/dst"
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", dst); err != nil || !made {
		t.Fatalf("fork: made %v, %v", made, err)
	}
	b, err := os.ReadFile(filepath.Join(state, "forks", "@0123456789abcdef", "dst"))
	if err != nil || string(b) != "src@1\n" {
		t.Fatalf("record: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(filepath.Join(state, "forks", "@0123456789abcdef"))
	if len(ents) != 1 {
		t.Errorf("forks dir holds %v, want the record alone", ents)
	}
	pruneFirst(t, ctx, lp, state, dst)
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", dst); err != nil || made {
		t.Errorf("the same fork again: made %v, %v", made, err)
	}
}

// TestForkRecordUnwritable: a fork whose record cannot be kept fails,
// naming the thread but not the state dir, and leaves no thread behind
// (an unrecorded fork would be refused once its checkpoint 1 is pruned).
func TestForkRecordUnwritable(t *testing.T) {
	for name, block := range map[string]func(state string) error{
		// Before anything is made: the old record cannot be removed.
		"forks a file": func(state string) error { return os.WriteFile(filepath.Join(state, "forks"), nil, 0o600) },
		// After the import: the record's temp file cannot be written.
		"temp a directory": func(state string) error { return os.MkdirAll(filepath.Join(state, "forks", ".dst.tmp"), 0o700) },
	} {
		t.Run(name, func(t *testing.T) { forkRecordUnwritable(t, block) })
	}
}

func forkRecordUnwritable(t *testing.T, block func(state string) error) {
	ctx, lp, state := forkFixture(t)
	if err := block(state); err != nil {
		t.Fatal(err)
	}
	_, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst")
	if err == nil || made {
		t.Fatalf("fork without a place for its record: made %v, %v", made, err)
	}
	if strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), "dst") {
		t.Errorf("error %q: want the thread named, no host path", err)
	}
	if ok, err := lp.Exists(ctx, "dst"); ok || err != nil {
		t.Errorf("thread left behind: %v, %v", ok, err)
	}
}
