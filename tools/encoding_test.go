package tools_test

import (
	"os"
	"strings"
	"testing"
)

// TestNotUTF8Edits: str_replace on a file that is not UTF-8 text replaces
// bytes and keeps every byte outside the match exactly; grep finds lines in
// it and says that their invalid bytes are shown as U+FFFD.
func TestNotUTF8Edits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	orig := "caf\xe9 au lait\nold line \xc4\xe3\n\xff\n"
	if err := os.WriteFile(f.host("l1.txt"), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	diff := f.ok("str_replace", map[string]any{"path": "l1.txt", "old_str": "old", "new_str": "new", "dry_run": true})
	if !strings.Contains(diff, "+new line \uFFFD") || !strings.Contains(diff, "not UTF-8") {
		t.Errorf("dry run diff = %q, want the change with U+FFFD and a note", diff)
	}
	f.ok("str_replace", map[string]any{"path": "l1.txt", "old_str": "old", "new_str": "new"})
	if got, want := f.read("l1.txt"), strings.Replace(orig, "old", "new", 1); got != want {
		t.Errorf("after str_replace: %q, want %q (the other bytes kept)", got, want)
	}
	f.ok("write_file", map[string]any{"path": "l1.txt", "content": "more\n", "append": true})
	if got, want := f.read("l1.txt"), strings.Replace(orig, "old", "new", 1)+"more\n"; got != want {
		t.Errorf("after append: %q, want %q", got, want)
	}
	got := f.ok("grep", map[string]any{"pattern": "au lait"})
	if !strings.HasPrefix(got, ws+"/l1.txt:1: caf\uFFFD au lait\n[not UTF-8 text:") || !strings.Contains(got, "iconv") {
		t.Errorf("grep in a Latin-1 file = %q, want the line with U+FFFD and a note", got)
	}
	if got := f.ok("grep", map[string]any{"pattern": "more"}); strings.Contains(got, "not UTF-8") {
		t.Errorf("grep of a UTF-8 line of that file = %q, want no note", got)
	}
}
