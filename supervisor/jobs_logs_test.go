//go:build linux

package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Two supervisors of one thread's files (two server processes on one
// state dir, each with its own supervisor: the local provider) hand out
// ids unique between them, and no job's log overwrites another's (#24
// item 6).
func TestJobIDsAcrossSupervisors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	a, b := jobLink(t, listen(t)), jobLink(t, listen(t))
	set := JobSettings{LogDir: dir}
	start := func(l *Link, out string) Job {
		t.Helper()
		j, err := l.StartJob(t.Context(), JobSpec{Argv: []string{"/bin/bash", "-c", "echo " + out + "; exec sleep 300"}, Dir: "/", JobSettings: set})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, l, j.ID, 0, out)
		t.Cleanup(func() { l.KillJob(t.Context(), j.ID, "KILL") })
		return j
	}
	logs := map[string]string{}
	var ids []string
	for i, l := range []*Link{a, b, a, b, b, a} {
		out := "out" + string(rune('0'+i))
		j := start(l, out)
		if slices.Contains(ids, j.ID) {
			t.Fatalf("job %d got %s again (ids so far %v)", i, j.ID, ids)
		}
		ids = append(ids, j.ID)
		logs[j.ID] = out + "\n"
	}
	for id, want := range logs {
		if b, err := os.ReadFile(filepath.Join(dir, id+".log")); err != nil || string(b) != want {
			t.Errorf("log of %s: %q %v, want %q", id, b, err, want)
		}
	}
	// A log no supervisor knows of (another's, planted) is never
	// overwritten: its id is skipped.
	next := jobID(uint64(len(ids) + 1))
	planted := filepath.Join(dir, next+".log")
	if err := os.WriteFile(planted, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if j := start(a, "after"); j.ID == next {
		t.Errorf("the planted %s.log's id was handed out", next)
	}
	if b, _ := os.ReadFile(planted); string(b) != "mine\n" {
		t.Errorf("the planted log was overwritten: %q", b)
	}
}
