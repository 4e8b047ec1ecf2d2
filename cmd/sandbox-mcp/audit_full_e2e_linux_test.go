package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// The audit fails closed (SPEC §9): with the disk that holds the audit log
// full, a call is not run and answers one error line; once space is free,
// calls run again and the chain is intact. A call that fills the disk
// itself still gets its line.
func TestE2EAuditFailsClosedWhenDiskFull(t *testing.T) {
	t.Parallel()
	fs := testkit.SmallFS(t, "4m")
	p := start(t, opts{stateDir: filepath.Join(fs, "state"), auditPath: filepath.Join(fs, "audit.jsonl")})
	p.want("ls", map[string]any{}, "/mnt/user-data/workspace/", false)
	marker := filepath.Join(p.workspace(), "marker")
	lines := func() int { l, _ := auditLines(t, p.auditPath); return len(l) }

	free := testkit.Fill(t, fs)
	got, isErr := p.call("bash", map[string]any{"command": "touch /mnt/user-data/workspace/marker"})
	if !isErr || !strings.HasPrefix(got, "Error: audit log") || !strings.Contains(got, "no space left") || strings.Contains(got, "\n") {
		t.Errorf("bash with the audit log's disk full = %q (isError %v), want one error line about the audit log", got, isErr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("bash ran although its audit line could not be written")
	}
	if n := lines(); n != 1 {
		t.Errorf("audit log has %d lines, want 1 (the refused call has none)", n)
	}
	free()

	p.want("bash", map[string]any{"command": "touch marker && echo ok"}, "ok\n[exit code 0]", false)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("bash did not run once space was free: %v", err)
	}
	// The command fills the disk: its line was reserved before it ran.
	got, isErr = p.call("bash", map[string]any{"command": "cat /dev/zero > fill 2>/dev/null; echo filled"})
	if isErr || !strings.HasPrefix(got, "filled") {
		t.Errorf("bash that fills the disk = %q (isError %v), want its result", got, isErr)
	}
	if n := lines(); n != 3 {
		t.Errorf("audit log has %d lines after the call that filled the disk, want 3", n)
	}
	if got, isErr := p.call("ls", map[string]any{}); !isErr || !strings.HasPrefix(got, "Error: audit log") {
		t.Errorf("ls with the disk full = %q (isError %v), want refused", got, isErr)
	}
	if err := os.Remove(filepath.Join(p.workspace(), "fill")); err != nil {
		t.Fatal(err)
	}
	// The space comes back when the last descriptor of fill closes: the
	// automatic checkpoint the call started in the background may still
	// be reading it (and fail, the disk being full).
	testkit.WaitFree(t, fs, 1<<20)
	p.want("ls", map[string]any{"path": "/mnt/user-data/outputs"}, "/mnt/user-data/outputs/", false)
	p.close()
	if stdout, stderr, code := runBinary(t, "audit", "verify", p.auditPath); code != 0 {
		t.Errorf("audit verify = %d: %s%s", code, stdout, stderr)
	}
	if n := lines(); n != 4 {
		t.Errorf("audit log has %d lines, want 4", n)
	}
}

// A removed audit log refuses every call: it is not made again.
func TestE2EAuditLogRemoved(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	p.want("ls", map[string]any{}, "/mnt/user-data/workspace/", false)
	if err := os.Remove(p.auditPath); err != nil {
		t.Fatal(err)
	}
	got, isErr := p.call("bash", map[string]any{"command": "touch /mnt/user-data/workspace/marker"})
	if !isErr || !strings.HasPrefix(got, "Error: audit log") || !strings.Contains(got, "removed") || strings.Contains(got, p.auditPath) {
		t.Errorf("bash with the audit log removed = %q (isError %v), want one error line saying it was removed", got, isErr)
	}
	if _, err := os.Stat(filepath.Join(p.workspace(), "marker")); err == nil {
		t.Errorf("bash ran with the audit log removed")
	}
}
