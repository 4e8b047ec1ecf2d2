package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// noPiece fails when s holds a piece (12 bytes or more) of the host path
// host: a path cut before it was masked.
func noPiece(t *testing.T, what, s, host string) {
	t.Helper()
	for i := 0; i+12 <= len(host); i++ {
		if w := host[i : i+12]; strings.Contains(s, w) {
			t.Fatalf("%s holds %q, a piece of the host path %s:\n%.400s", what, w, host, s)
		}
	}
}

// masked runs a tool and masks its text as the server does.
func (f *fixture) masked(env *tools.Env, name string, args map[string]any) (string, *tools.Result) {
	f.t.Helper()
	res := toolByName(f.t, name).Handle(f.t.Context(), env, callReq(name, args))
	return f.env.Mask(resultText(f.t, res)), res
}

// TestGrepLongLineMaskedBeforeCut: a host path straddling grep's 500
// character cut of a long line (a match or a context line) is masked
// whole before the cut, never shown in part.
func TestGrepLongLineMaskedBeforeCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	host := f.ws
	var content strings.Builder
	for shift := 0; shift < len(host); shift += 5 {
		pad := strings.Repeat("p", 500-shift-5)
		content.WriteString(pad + " " + host + "/file MATCH-" + strings.Repeat("q", 20) + "\n")
		content.WriteString(pad + " " + host + "/context line\n")
	}
	if err := os.WriteFile(f.host("long.txt"), []byte(content.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _ := f.masked(f.env, "grep", map[string]any{"pattern": "MATCH-", "context": 1, "max_results": 1000})
	noPiece(t, "grep output", got, f.stateDir)
	if !strings.Contains(got, " [...]") {
		t.Errorf("grep output has no cut line:\n%.300s", got)
	}
}

// TestBashProgressMaskedBeforeCut: the progress message (the last 200
// characters of the latest line) is cut after masking: a host path
// straddling the cut is not shown in part.
func TestBashProgressMaskedBeforeCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	state, _ := filepath.EvalSymlinks(f.stateDir) // pwd -P shows it resolved
	var mu sync.Mutex
	var msgs []string
	env := *f.env
	env.Progress = func(_ float64, msg string) {
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, msg)
	}
	// 120 characters after the host path: the 200-character cut falls in its state dir part.
	cmd := `line="$(printf 'x%.0s' $(seq 100)) $(pwd -P)/file $(printf 'y%.0s' $(seq 120))"; printf '%s' "$line"; sleep 2.5`
	got, _ := f.masked(&env, "bash", map[string]any{"command": cmd})
	noPiece(t, "bash output", got, state)
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) == 0 {
		t.Fatal("no progress notification during a 2.5 s command")
	}
	for _, m := range msgs {
		noPiece(t, "progress message", m, state)
		if !strings.HasSuffix(m, strings.Repeat("y", 120)) || len([]rune(m)) > 200 {
			t.Errorf("progress message %q, want the last (at most 200) characters of the line", m)
		}
	}
}

// TestReadFileCutMaskedWhole: read_file stops reading a long line at its
// output bound; where masking shrinks the text (long host paths become
// short virtual ones) the raw stop would show through the character cut —
// a partial host path there is dropped, never shown.
func TestReadFileCutMaskedWhole(t *testing.T) {
	t.Parallel()
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 150))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *local.Config) { c.StateDir = long })
	host := f.ws
	// One line of host paths (no newline): read in 64 KiB pieces. The
	// padding puts the end of the first piece 100 bytes into a host path,
	// in its state dir part.
	unit := len(host + "/f ")
	pad := ((64<<10)-100)%unit - 1
	if pad < 0 {
		pad += unit
	}
	content := strings.Repeat("x", pad) + " " + strings.Repeat(host+"/f ", 200000/len(host))
	f.write("paths.txt", content)
	env := *f.env
	env.Limits.ReadFileOutputMaxChars = 10000 // 40000 bytes read: one 64 KiB piece, ~7000 characters masked
	got, res := f.masked(&env, "read_file", map[string]any{"path": "paths.txt"})
	noPiece(t, "read_file output", got, f.stateDir)
	if !res.Truncated || !strings.Contains(got, "/mnt/user-data/workspace/f ") {
		t.Errorf("read_file = %.300q..., want masked paths, truncated", got)
	}
}
