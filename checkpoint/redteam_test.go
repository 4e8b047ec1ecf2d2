package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

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
