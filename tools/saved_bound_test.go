package tools_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The bound of the thread's saved results counts the ended jobs' logs
// (read-only) beside the saved outputs, and a saved output past it
// removes the oldest of them first; a running job's log (writable)
// neither counts nor goes (#24 item 7).
func TestSpillCountsEndedJobLogs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 100
	dir := filepath.Join(filepath.Dir(f.ws), "outputs", ".tool-results", "jobs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, l := range []struct {
		name string
		size int64
		mode os.FileMode
		age  time.Duration
	}{
		{"j1.log", 220 << 20, 0o444, 0},          // ended, the oldest: goes
		{"j2.log", 300 << 20, 0o644, 0},          // running: neither counts nor goes
		{"j3.log", 50 << 20, 0o444, time.Minute}, // ended, newer: kept
	} {
		p := filepath.Join(dir, l.name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Truncate(p, l.size) // sparse
		os.Chmod(p, l.mode)
		os.Chtimes(p, old.Add(l.age), old.Add(l.age))
	}
	got := f.ok("bash", map[string]any{"command": "seq 1 100"})
	if savedAt.FindString(got) == "" {
		t.Fatalf("not saved: %q", got)
	}
	for name, want := range map[string]bool{"j1.log": false, "j2.log": true, "j3.log": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", name, err == nil, want)
		}
	}
	if p := savedAt.FindString(got); p != "" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(f.ws), "outputs", ".tool-results", filepath.Base(p))); err != nil {
			t.Errorf("the saved output: %v", err)
		}
	}
}
