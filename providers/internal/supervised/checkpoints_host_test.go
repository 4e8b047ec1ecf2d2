//go:build linux || darwin || freebsd

package supervised

import (
	"crypto/rand"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
)

// A restore's undo checkpoint counts against checkpoints.max_bytes like
// any save: with automatic checkpoints off, an agent that alternates big
// writes and restores does not grow the store past the bound (it did: a
// restore never pruned).
func TestRestorePrunesToMaxBytes(t *testing.T) {
	t.Parallel()
	userData, store := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(userData, "workspace"), 0o755))
	s := New(&hostBox{dir: userData}, Config{Thread: "t1", Checkpoints: &CheckpointConfig{UserData: userData, Store: store, NoSync: true}})
	t.Cleanup(s.Close)
	ctx := t.Context()
	const maxBytes, big = 1 << 20, 300 << 10
	if _, err := s.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "start"}, maxBytes); err != nil {
		t.Fatal(err)
	}
	for round := range 8 {
		data := make([]byte, big)
		rand.Read(data)
		must(os.WriteFile(filepath.Join(userData, "workspace", "big.bin"), data, 0o644))
		list, err := s.ListCheckpoints(ctx)
		must(err)
		if _, err := s.RestoreCheckpoint(ctx, list[len(list)-1].ID, "undo", maxBytes); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	var size int64
	must(filepath.WalkDir(store, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, err := d.Info()
			if err == nil {
				size += fi.Size()
			}
		}
		return err
	}))
	if size > maxBytes+big {
		t.Errorf("after 8 restores, each saving %d KiB as its undo, the store holds %d KiB; checkpoints.max_bytes is %d KiB", big>>10, size>>10, maxBytes>>10)
	}
}
