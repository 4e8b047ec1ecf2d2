package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"ls", "bash", "read_file"} {
		w.Record(audit.Event{Tool: tool})
	}
	w.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"audit", "verify", path}, nil, &out, &errb, func(string) (string, bool) { return "", false }); code != 0 {
		t.Fatalf("intact log: code %d, %s", code, errb.String())
	}
	b, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(b, []byte(`"bash"`), []byte(`"grep"`), 1), 0o600)
	out.Reset()
	errb.Reset()
	code := run([]string{"audit", "verify", path}, nil, &out, &errb, func(string) (string, bool) { return "", false })
	if code == 0 || !strings.Contains(errb.String(), "line 3") {
		t.Fatalf("tampered log: code %d, %q", code, errb.String())
	}
	if code := run([]string{"audit", "check"}, nil, &out, &errb, func(string) (string, bool) { return "", false }); code != 2 {
		t.Fatalf("bad usage: code %d", code)
	}
}
