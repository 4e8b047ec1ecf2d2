package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestRedTeamRestoreLosesConcurrentWrite: a write_file that takes the
// file's lock after Restore's undo save but before Restore writes that
// file is overwritten, and its content is in neither the restored tree nor
// the undo checkpoint: a successful write lost for good.
func TestRedTeamRestoreLosesConcurrentWrite(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "v1")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v2"), 0o644))
	done := false
	locker := LockerFunc(func(ctx context.Context, p string) (func(), error) {
		if p == "a.txt" && !done {
			done = true
			// write_file held the lock just before us and wrote v3.
			must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v3-written-by-agent"), 0o644))
		}
		return func() {}, nil
	})
	res, err := s.Restore(t.Context(), root, "1", RestoreOptions{Locker: locker, SaveFirst: true})
	must(t, err)
	// Where did v3 go? Undo it: the undo checkpoint should hold the files as
	// they were before the restore changed them.
	restore(t, s, root, res.Undo.ID)
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "v3-written-by-agent" {
		t.Errorf("write_file's content lost: after undo a.txt = %q, want the write that completed during the restore", b)
	}
}

// TestRedTeamWriterTempNameSurvivesRestore: a directory the agent names
// like a writer's temporary file (.sandbox-mcp-<16 hex>.tmp) is neither
// saved nor removed by a restore: restore does not put user-data "back
// exactly", and an agent keeps a tree (any size) outside every checkpoint
// and every undo.
func TestRedTeamWriterTempNameSurvivesRestore(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "v1")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	hidden := filepath.Join(root, ".sandbox-mcp-0123456789abcdef.tmp")
	must(t, os.MkdirAll(filepath.Join(hidden, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(hidden, "sub", "payload"), []byte("kept"), 0o644))
	restore(t, s, root, "1")
	if _, err := os.Lstat(hidden); err == nil {
		t.Errorf("a directory added since checkpoint 1 survives its restore: %s", filepath.Base(hidden))
	}
}
