package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriterTempNameOnlyRegularFilesSkipped: only a regular file named
// like a writer's temporary file is the engine's own (left out by Save,
// left alone by Restore); a directory or symlink of that name is user data,
// saved and restored exactly like any entry.
func TestWriterTempNameOnlyRegularFilesSkipped(t *testing.T) {
	t.Parallel()
	const (
		tmpDir  = ".sandbox-mcp-0123456789abcdef.tmp"
		tmpLink = ".sandbox-mcp-fedcba9876543210.tmp"
		tmpFile = ".sandbox-mcp-00000000000000ff.tmp"
	)
	root := t.TempDir()
	build(t, root, map[string]node{
		"a.txt":                 file(0o644, "v1"),
		tmpDir + "/sub/payload": file(0o644, "kept"),
		tmpLink:                 link("a.txt"),
	})
	want := snapshot(t, root)
	// A write in flight when the checkpoint is taken.
	must(t, os.WriteFile(filepath.Join(root, tmpFile), []byte("in flight"), 0o600))
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")

	must(t, os.RemoveAll(filepath.Join(root, tmpDir)))
	must(t, os.Remove(filepath.Join(root, tmpLink)))
	must(t, os.WriteFile(filepath.Join(root, tmpFile), []byte("still in flight"), 0o600))
	restore(t, s, root, "1")

	b, err := os.ReadFile(filepath.Join(root, tmpFile))
	must(t, err)
	if string(b) != "still in flight" {
		t.Errorf("restore touched a writer's temporary file: %q", b)
	}
	must(t, os.Remove(filepath.Join(root, tmpFile)))
	sameSnap(t, "after restore", want, snapshot(t, root))
}
