package main

import (
	"context"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// Six jobs printing 70 MB each leave their thread's saved results within
// its bound (256 MiB, SPEC §13): the ended jobs' logs count in it, the
// oldest removed first (#24 item 7: they left 384 MiB). On the local
// provider in bubblewrap.
func TestE2EJobLogsBounded(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	state := filepath.Join(t.TempDir(), "state")
	p := start(t, opts{stateDir: state, thread: "logs", isolation: "bwrap"})
	jobLogsBounded(t, p.call, filepath.Join(local.ThreadDir(state, "logs"), "outputs", ".tool-results"))
}

// The same on the docker provider.
func TestE2EDockerJobLogsBounded(t *testing.T) {
	t.Parallel()
	dir, cfgFile, _ := dockerE2EConfig(t)
	state := filepath.Join(dir, "state")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", "logs")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	jobLogsBounded(t, caller(t, ctx, cs, stderr), filepath.Join(local.ThreadDir(state, "logs"), "outputs", ".tool-results"))
}

func jobLogsBounded(t *testing.T, call func(string, map[string]any) (string, bool), results string) {
	t.Helper()
	const bound = 256 << 20
	started := regexp.MustCompile(`\[job (j\d+) started\]`)
	var last string
	for i := range 6 {
		got, _ := call("bash", map[string]any{"command": "head -c 70000000 /dev/zero | tr '\\0' x", "run_in_background": true})
		m := started.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("job %d: %.300q", i, got)
		}
		last = m[1]
		for deadline := time.Now().Add(2 * time.Minute); ; {
			// From past its end: no output, only its state.
			got, _ := call("bash_output", map[string]any{"job": last, "offset": 70000000, "wait": 30})
			if strings.Contains(got, "exited with code 0") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s: %.300q", last, got)
			}
		}
	}
	size := func() (total int64, names []string) {
		filepath.WalkDir(results, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
					names = append(names, d.Name())
				}
			}
			return nil
		})
		return
	}
	// The last job's end prunes once it is seen ended: wait for that.
	total, names := size()
	for deadline := time.Now().Add(30 * time.Second); total > bound && time.Now().Before(deadline); total, names = size() {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("saved results: %d bytes (%.0f MiB): %v", total, float64(total)/(1<<20), names)
	if total > bound {
		t.Errorf("saved results of %d bytes, over the bound of %d", total, bound)
	}
	if !strings.Contains(strings.Join(names, " "), last+".log") {
		t.Errorf("the last job's log %s.log was removed: %v", last, names)
	}
	if strings.Contains(strings.Join(names, " "), "j1.log") {
		t.Errorf("the first job's log was kept over newer ones: %v", names)
	}
}
