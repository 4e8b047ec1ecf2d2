package server_test

import (
	"context"
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

// TestRedTeamForkHeaderAfterPrune: a client sends X-Thread-Fork on every
// request (ForkHeader's doc says it may). Once the fork's checkpoint 1 is
// pruned (checkpoints.max_bytes: the oldest go), ForkThread no longer
// recognises the thread as that fork and refuses with ErrThreadExists:
// every later call of the thread fails.
func TestRedTeamForkHeaderAfterPrune(t *testing.T) {
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
	ws := filepath.Join(sandbox.ThreadDir(state, "src"), "workspace")
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte(strings.Repeat("a", 100000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.(tools.Checkpointer).SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "one"}, 0); err != nil {
		t.Fatal(err)
	}
	lp.Release("src")
	if _, made, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil || !made {
		t.Fatalf("fork: made %v, %v", made, err)
	}
	// The fork's agent works on: new content, saved with a small bound.
	dsb, err := lp.Acquire(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	dws := filepath.Join(sandbox.ThreadDir(state, "dst"), "workspace")
	for i := range 3 {
		os.WriteFile(filepath.Join(dws, "a.txt"), []byte(strings.Repeat(string(rune('b'+i)), 100000)), 0o644)
		if _, err := dsb.(tools.Checkpointer).SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "work", Auto: true}, 150000); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := dsb.(tools.Checkpointer).ListCheckpoints(ctx)
	lp.Release("dst")
	if len(list) == 0 || list[0].ID == "1" {
		t.Skipf("checkpoint 1 not pruned: %v", list)
	}
	// The next request still carries X-Thread-Fork: src@1.
	if _, _, err := server.ForkThread(ctx, lp, state, "src", "1", "dst"); err != nil {
		t.Errorf("the same fork header on a later request of the fork fails once its checkpoint 1 is pruned: %v", err)
	}
}
