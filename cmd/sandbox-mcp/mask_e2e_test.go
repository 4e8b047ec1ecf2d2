package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// requireBwrap skips when bubblewrap cannot run here, unless CI asked for
// it (SANDBOX_MCP_REQUIRE_BWRAP=1), where a missing bwrap is a failure.
func requireBwrap(t *testing.T) {
	t.Helper()
	if err := local.ProbeBwrap(t.Context()); err != nil {
		if os.Getenv("SANDBOX_MCP_REQUIRE_BWRAP") == "1" {
			t.Fatalf("bubblewrap required but unavailable: %v", err)
		}
		t.Skipf("SKIPPED: bubblewrap unavailable (%v); install bubblewrap to run the isolation tests", err)
	}
}

// With the state dir on a file system of its own, a sandbox's
// /proc/self/mountinfo names the thread's dirs relative to that file
// system (/threads/<thread>/user-data/workspace): those forms are host
// paths too (SPEC §5), masked like the others.
func TestE2EMountinfoNamesNoHostPath(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	state := testkit.SmallFS(t, "16m")
	other := testkit.SmallFS(t, "1m")
	data := mkdir(t, filepath.Join(other, "team", "data"))
	p := start(t, opts{thread: "mi-thread", stateDir: state, isolation: "bwrap",
		extra: []string{"--mount", data + ":/mnt/data:ro"}})
	got, isErr := p.call("bash", map[string]any{"command": "cat /proc/self/mountinfo"})
	if isErr || !strings.Contains(got, " /mnt/user-data/workspace ") {
		t.Fatalf("cat /proc/self/mountinfo = %q (isError %v), want the mount table", got, isErr)
	}
	for _, host := range []string{"threads/mi-thread", "/threads/", "/team/data", "user-data/workspace /mnt", state, other} {
		for line := range strings.Lines(got) {
			if strings.Contains(strings.ReplaceAll(line, "/mnt/user-data/workspace /mnt", ""), host) {
				t.Errorf("mountinfo names the host path %q:\n%s", host, line)
			}
		}
	}
	for _, want := range []string{
		" /mnt/user-data/workspace /mnt/user-data/workspace ",
		" /mnt/data /mnt/data ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("mountinfo has no line with %q (masked root, mount point):\n%s", want, got)
		}
	}
}

// A host path glued to what comes before it, or spelled with loose
// separators, is masked all the same (SPEC §5).
func TestE2EMaskGluedAndLoosePaths(t *testing.T) {
	t.Parallel()
	p := start(t, opts{isolation: "none"})
	p.want("bash", map[string]any{"command": `printf 'x%s\n' "$PWD"; printf '%s\n' "$(dirname "$PWD")//./workspace"; printf 'dir=%s.\n' "$PWD"`},
		"x/mnt/user-data/workspace\n/mnt/user-data/workspace\ndir=/mnt/user-data/workspace.\n[exit code 0]", false)
}
