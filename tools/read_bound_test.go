package tools_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// TestReadFileSparseBounded: a 10 GB sparse file (text, then a hole)
// read from a line past its text is not read whole: read_file stops at
// its scan limit with an error naming the path, and a read of the text
// says where it stopped. No hash is computed over the limit, and the
// result says so.
func TestReadFileSparseBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var text strings.Builder
	for i := range 2000 {
		text.WriteString("line of text number ")
		text.WriteString(strings.Repeat("x", i%10))
		text.WriteString("\n")
	}
	f.write("sparse.log", text.String())
	if err := os.Truncate(f.host("sparse.log"), 10<<30); err != nil {
		t.Skipf("no sparse file here: %v", err)
	}
	call := func(args map[string]any) *tools.Result {
		t.Helper()
		done := make(chan *tools.Result, 1)
		go func() { done <- toolByName(t, "read_file").Handle(t.Context(), f.env, callReq("read_file", args)) }()
		select {
		case r := <-done:
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("read_file(%v) still running after 20s: it reads the whole 10 GB", args)
		}
		return nil
	}

	res := call(map[string]any{"path": "sparse.log", "start_line": 5000})
	got := resultText(t, res)
	if !res.IsError || !strings.Contains(got, ws+"/sparse.log") || !strings.Contains(got, "start_line 5000 not reached") || strings.Contains(got, "\n") {
		// Fatal: without a scan limit, the next call would hold 10 GB.
		t.Fatalf("read_file past the text = %q, want one error line naming the path and the limit", got)
	}

	env := *f.env
	env.Limits.ReadFileOutputMaxChars = 0 // no output limit: only the scan limit stops the read
	env.Limits.ReadFileMaxScanBytes = 1 << 20
	done := make(chan *tools.Result, 1)
	go func() {
		done <- toolByName(t, "read_file").Handle(t.Context(), &env, callReq("read_file", map[string]any{"path": "sparse.log", "start_line": 1990, "with_hash": true}))
	}()
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("read_file without an output limit still running after 20s")
	}
	got = resultText(t, res)
	if res.IsError || !strings.HasPrefix(got, "line of text number ") || !strings.Contains(got, "[... stopped after reading 1048576 bytes of "+ws+"/sparse.log") ||
		!strings.Contains(got, "[sha256: not computed: "+ws+"/sparse.log is over 1048576 bytes]") || !res.Truncated {
		t.Errorf("read_file of the text's end without an output limit = %.300q..., want the text, a note naming where it stopped, and no hash", got)
	}
	if len(got) > 2<<20 {
		t.Errorf("read_file returned %d bytes, want about the scan limit", len(got))
	}
	facts, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(facts), `"sha256":""`) || !strings.Contains(string(facts), `"note":"sha256 and lines not computed`) {
		t.Errorf("structured content = %s, want no sha256 and a note saying why", facts)
	}
}
