package audit_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

func writeLog(t *testing.T, path string, writers, perWriter int) {
	t.Helper()
	var wg sync.WaitGroup
	for range writers {
		// Each writer opens the file itself, as separate processes do.
		w, err := audit.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for j := range perWriter {
				if err := w.Record(audit.Event{Tool: "bash", Args: map[string]any{"n": j}}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

func TestChainIntactAcrossWriters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeLog(t, path, 4, 50)
	writeLog(t, path, 1, 5) // reopened later: the chain goes on
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := audit.Verify(f)
	if err != nil || n != 205 {
		t.Fatalf("Verify = %d, %v", n, err)
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeLog(t, path, 1, 10)
	orig, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1]
	tests := []struct {
		name     string
		edit     func([]string) []string
		wantLine string
	}{
		{"changed", func(l []string) []string { l[3] = strings.Replace(l[3], `"bash"`, `"ls"`, 1); return l }, "line 5:"},
		{"removed", func(l []string) []string { return append(l[:4], l[5:]...) }, "line 5:"},
		{"inserted", func(l []string) []string { return append(l[:2], append([]string{l[7]}, l[2:]...)...) }, "line 3:"},
		{"head removed", func(l []string) []string { return l[1:] }, "line 1:"},
		{"garbage", func(l []string) []string { l[6] = "not json\n"; return l }, "line 7:"},
	}
	for _, tt := range tests {
		edited := strings.Join(tt.edit(append([]string(nil), lines...)), "")
		_, err := audit.Verify(strings.NewReader(edited))
		if err == nil || !strings.HasPrefix(err.Error(), tt.wantLine) {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.wantLine)
		}
	}
	if _, err := audit.Verify(bytes.NewReader(orig)); err != nil {
		t.Fatalf("intact log: %v", err)
	}
}

func TestSummarizeNeverKeepsContent(t *testing.T) {
	t.Parallel()
	c := audit.Summarize("secret content")
	if c.Size != 14 || len(c.SHA256) != 64 || strings.Contains(c.SHA256, "secret") {
		t.Fatalf("%+v", c)
	}
}
