package tools_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestReadFileHash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	content := "one\ntwo\nthree"
	f.write("h.txt", content)
	res := f.call("read_file", map[string]any{"path": "h.txt", "start_line": 2, "end_line": 2})
	if got := resultText(t, res); got != "two\n" {
		t.Fatalf("range text = %q (the default text must stay exactly the file)", got)
	}
	facts := fmt.Sprintf("%+v", res.StructuredContent)
	if want := fmt.Sprintf("{SHA256:%s Lines:3 Bytes:%d Note:}", sha(content), len(content)); facts != want {
		t.Fatalf("structured = %s, want %s", facts, want)
	}
	if got := f.ok("read_file", map[string]any{"path": "h.txt", "with_hash": true}); got != content+"\n[sha256: "+sha(content)+"]" {
		t.Fatalf("with_hash = %q", got)
	}
}

func TestExpectedSHA256(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("e.txt", "v1\n")
	h1 := sha("v1\n")
	f.ok("write_file", map[string]any{"path": "e.txt", "content": "v2\n", "expected_sha256": h1})
	// A second writer who read v1 too is refused: no lost update.
	got := f.fail("write_file", map[string]any{"path": "e.txt", "content": "other\n", "expected_sha256": h1})
	if got != "Error: file changed since read: /mnt/user-data/workspace/e.txt" {
		t.Fatalf("got %q", got)
	}
	got = f.fail("str_replace", map[string]any{"path": "e.txt", "old_str": "v2", "new_str": "v3", "expected_sha256": h1})
	if got != "Error: file changed since read: /mnt/user-data/workspace/e.txt" {
		t.Fatalf("got %q", got)
	}
	f.ok("str_replace", map[string]any{"path": "e.txt", "old_str": "v2", "new_str": "v3", "expected_sha256": strings.ToUpper(sha("v2\n"))})
	if f.read("e.txt") != "v3\n" {
		t.Fatalf("content %q", f.read("e.txt"))
	}
	f.fail("write_file", map[string]any{"path": "gone.txt", "content": "x", "expected_sha256": h1})
}

// Many agents read, then edit with the hash they read: each edit either
// lands on the version it read or is refused; none is lost silently.
func TestExpectedSHA256Concurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("c.txt", "0")
	h := sha("0")
	var wg sync.WaitGroup
	var mu sync.Mutex
	landed := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := f.call("write_file", map[string]any{"path": "c.txt", "content": fmt.Sprint(i + 1), "expected_sha256": h})
			if !res.IsError {
				mu.Lock()
				landed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if landed != 1 {
		t.Fatalf("%d writes landed on the same version, want 1", landed)
	}
}

func TestStrReplaceFaithful(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		name, content, old, new, want string
	}{
		{"crlf kept, lf old_str", "a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\n", "x\r\ny\r\nc\r\n"},
		{"crlf exact", "a\r\nb\r\n", "a\r\n", "z\r\n", "z\r\nb\r\n"},
		{"bom kept", "\uFEFFfirst\nsecond", "first", "1st", "\uFEFF1st\nsecond"},
		{"no final newline kept", "x = 1", "1", "2", "x = 2"},
		{"tabs", "\tif x {\n\t\treturn\n\t}\n", "\t\treturn\n", "\t\treturn nil\n", "\tif x {\n\t\treturn nil\n\t}\n"},
		// new_str's lines take the file's line ending (SPEC §13).
		{"crlf file, exact one-line old_str, two-line new_str", "a\r\nb\r\nc\r\n", "b", "x\ny", "a\r\nx\r\ny\r\nc\r\n"},
		{"crlf file, new_str with a final newline", "a\r\nb\r\n", "b\r\n", "x\ny\n", "a\r\nx\r\ny\r\n"},
		{"lf file, crlf new_str", "a\nb\nc\n", "b", "x\r\ny", "a\nx\ny\nc\n"},
		{"lf file, crlf old_str and new_str", "a\nb\n", "a\nb", "x\r\ny\r\nz", "x\ny\nz\n"},
		{"mostly crlf", "a\r\nb\r\nc\n", "c", "y\nz", "a\r\nb\r\ny\r\nz\n"},
		{"no line break: new_str as given", "abc", "b", "x\r\ny", "ax\r\nyc"},
		// A match never splits a line ending (#25 item 10): old_str copied
		// up to the \r of a CRLF, or from its \n.
		{"old_str ends inside a crlf", "Human: hi\r\nAI: hello\r\nHuman: bye\r\n", "AI: hello\r", "AI: hello again", "Human: hi\r\nAI: hello again\r\nHuman: bye\r\n"},
		{"old_str and new_str end inside a crlf", "a\r\nb\r\n", "a\r", "z\r", "z\r\nb\r\n"},
		{"old_str starts inside a crlf", "a\r\nb\r\nc\r\n", "\nb", "\nx", "a\r\nx\r\nc\r\n"},
		{"old_str from inside a crlf, joined", "a\r\nb\r\nc\r\n", "\nb", " b", "a b\r\nc\r\n"},
		{"a lone cr is no line ending", "a\rb\r\n", "a\r", "x", "xb\r\n"},
	}
	for i, tt := range tests {
		p := fmt.Sprintf("f%d.txt", i)
		f.write(p, tt.content)
		f.ok("str_replace", map[string]any{"path": p, "old_str": tt.old, "new_str": tt.new})
		if got := f.read(p); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	os.Chmod(f.host("f0.txt"), 0o751)
	f.ok("str_replace", map[string]any{"path": "f0.txt", "old_str": "x", "new_str": "w"})
	if fi, _ := os.Stat(f.host("f0.txt")); fi.Mode().Perm() != 0o751 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

func TestStrReplaceNearMiss(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("n.go", "package x\n\nfunc f() {\n\treturn  nil\n}\n")
	got := f.fail("str_replace", map[string]any{"path": "n.go", "old_str": "func f() {\n    return nil\n}", "new_str": "x"})
	if got != "Error: old_str not found in /mnt/user-data/workspace/n.go; line 3 differs from it only in whitespace or indentation" {
		t.Fatalf("got %q", got)
	}
	if f.read("n.go") != "package x\n\nfunc f() {\n\treturn  nil\n}\n" {
		t.Fatal("near miss was applied")
	}
	got = f.fail("str_replace", map[string]any{"path": "n.go", "old_str": "nothing like it", "new_str": "x"})
	if got != "Error: old_str not found in /mnt/user-data/workspace/n.go" {
		t.Fatalf("got %q", got)
	}
}

func TestStrReplaceDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	content := "1\n2\n3\n4\n5\n6\n7\n8\n9\n"
	f.write("d.txt", content)
	got := f.ok("str_replace", map[string]any{"path": "d.txt", "old_str": "5\n", "new_str": "five\n", "dry_run": true})
	want := "Dry run: would replace 1 occurrence(s) in /mnt/user-data/workspace/d.txt\n" +
		"--- /mnt/user-data/workspace/d.txt\n+++ /mnt/user-data/workspace/d.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if f.read("d.txt") != content {
		t.Fatal("dry run wrote the file")
	}
}

func TestGrepContextModesOffset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("a.txt", "l1\nhit one\nl3\nl4\nl5\nl6\nhit two\nl8\n")
	f.write("b.txt", "hit three\n")
	got := f.ok("grep", map[string]any{"pattern": "hit", "path": "a.txt", "context": 1})
	want := "/mnt/user-data/workspace/a.txt-1- l1\n/mnt/user-data/workspace/a.txt:2: hit one\n/mnt/user-data/workspace/a.txt-3- l3\n--\n" +
		"/mnt/user-data/workspace/a.txt-6- l6\n/mnt/user-data/workspace/a.txt:7: hit two\n/mnt/user-data/workspace/a.txt-8- l8"
	if got != want {
		t.Errorf("context:\n%s\nwant\n%s", got, want)
	}
	if got := f.ok("grep", map[string]any{"pattern": "hit", "output_mode": "files"}); got != "/mnt/user-data/workspace/a.txt\n/mnt/user-data/workspace/b.txt" {
		t.Errorf("files: %q", got)
	}
	if got := f.ok("grep", map[string]any{"pattern": "hit", "output_mode": "count"}); got != "/mnt/user-data/workspace/a.txt:2\n/mnt/user-data/workspace/b.txt:1" {
		t.Errorf("count: %q", got)
	}
	// Paging: 3 matches, 2 a page.
	p1 := f.ok("grep", map[string]any{"pattern": "hit", "max_results": 2})
	p2 := f.ok("grep", map[string]any{"pattern": "hit", "max_results": 2, "offset": 2})
	if !strings.HasPrefix(p1, "/mnt/user-data/workspace/a.txt:2: hit one\n/mnt/user-data/workspace/a.txt:7: hit two\n[truncated: showing the first 2 matches") ||
		!strings.Contains(p1, "next page: offset 2") {
		t.Errorf("page 1: %q", p1)
	}
	if p2 != "/mnt/user-data/workspace/b.txt:1: hit three" {
		t.Errorf("page 2: %q", p2)
	}
	if got := f.ok("grep", map[string]any{"pattern": "hit", "offset": 10}); !strings.HasPrefix(got, "No more results") {
		t.Errorf("past the end: %q", got)
	}
	f.fail("grep", map[string]any{"pattern": "hit", "output_mode": "lines"})
}

func TestGlobSortOffset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i, n := range []string{"c.txt", "a.txt", "b.txt"} {
		f.write(n, n)
		ts := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		os.Chtimes(f.host(n), ts, ts)
	}
	ws := "/mnt/user-data/workspace/"
	if got := f.ok("glob", map[string]any{"pattern": "*.txt", "sort": "mtime"}); got != "Found 3 paths under /mnt/user-data/workspace\n"+ws+"b.txt\n"+ws+"a.txt\n"+ws+"c.txt" {
		t.Errorf("mtime: %q", got)
	}
	if got := f.ok("glob", map[string]any{"pattern": "*.txt", "offset": 1, "max_results": 1}); got != "Found 3 paths under /mnt/user-data/workspace\n"+ws+"b.txt\n[showing 1 of 3 paths from offset 1; next page: offset 2]" {
		t.Errorf("offset: %q", got)
	}
	if got := f.ok("glob", map[string]any{"pattern": "*.txt"}); got != "Found 3 paths under /mnt/user-data/workspace\n"+ws+"a.txt\n"+ws+"b.txt\n"+ws+"c.txt" {
		t.Errorf("default: %q", got)
	}
}

var savedAt = regexp.MustCompile(`/mnt/user-data/outputs/\.tool-results/[^ ]+\.txt`)

// A cut bash output is saved whole and can be paged with read_file.
func TestSpillBashPagedByReadFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 2000
	got := f.ok("bash", map[string]any{"command": "seq 1 5000"})
	p := savedAt.FindString(got)
	if p == "" {
		t.Fatalf("no saved path in %q", got[:300])
	}
	page := f.ok("read_file", map[string]any{"path": p, "start_line": 2500, "end_line": 2502})
	if page != "2500\n2501\n2502\n" {
		t.Fatalf("page = %q", page)
	}
	whole := f.ok("read_file", map[string]any{"path": p, "start_line": 4999})
	if whole != "4999\n5000\n" {
		t.Fatalf("end = %q", whole)
	}
	// Short outputs leave nothing behind.
	f.ok("bash", map[string]any{"command": "echo short"})
	entries, _ := os.ReadDir(filepath.Join(filepath.Dir(f.ws), "outputs", ".tool-results"))
	if len(entries) != 1 {
		t.Fatalf("%d saved outputs, want 1", len(entries))
	}
}

func TestSpillGrepWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "match %d\n", i)
	}
	f.write("m.txt", b.String())
	got := f.ok("grep", map[string]any{"pattern": "match", "max_results": 10})
	p := savedAt.FindString(got)
	if p == "" {
		t.Fatalf("no saved path: %q", got[len(got)-300:])
	}
	saved := f.ok("read_file", map[string]any{"path": p})
	if n := strings.Count(saved, "\n"); n != 300 || !strings.Contains(saved, "m.txt:300: match 299") {
		t.Fatalf("saved has %d lines", n)
	}
}

func TestSpillBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 100
	for range 55 {
		f.ok("bash", map[string]any{"command": "seq 1 100"})
	}
	entries, _ := os.ReadDir(filepath.Join(filepath.Dir(f.ws), "outputs", ".tool-results"))
	if len(entries) != 50 {
		t.Fatalf("%d saved outputs kept, want 50", len(entries))
	}
}

// A bash call canceled while its output is being saved leaves nothing of
// it under .tool-results: no file half written, no writer left open.
func TestSpillCanceledCallLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 100
	if got, isErr, _ := f.callCtx(2*time.Second, "bash", map[string]any{"command": "seq 1 100000; sleep 30"}); !isErr || !strings.Contains(got, "cancelled") {
		t.Fatalf("canceled call: %q (error %v)", got, isErr)
	}
	dir := filepath.Join(filepath.Dir(f.ws), "outputs", ".tool-results")
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 0 {
		t.Fatalf("a canceled call left %q in .tool-results", names)
	}
}

func TestBashHugeTimeoutStillBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashTimeoutMax = time.Second
	for _, timeout := range []any{1e300, 9.3e9, 1000} {
		if got := f.ok("bash", map[string]any{"command": "sleep 5; echo finished", "timeout": timeout}); got != "[timed out after 1s]" {
			t.Errorf("timeout %v: %q", timeout, got)
		}
	}
}

// A host path cut by the head/tail capture is dropped, not shown in part.
func TestBashCutNeverShowsPartOfAHostPath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 20000 // masked, the head shrinks far below its cut
	host := f.host("")
	for i := range 7 {
		// Shift the cut across the path's characters.
		cmd := fmt.Sprintf("printf '%%*s' %d ''; for i in $(seq 1500); do printf '%%s ' %q; done", i*7, host)
		got := f.ok("bash", map[string]any{"command": cmd})
		for j := 8; j <= len(host); j++ {
			if strings.Contains(got, host[:j]) {
				t.Fatalf("shift %d: output holds %q, a piece of a host path", i, host[:j])
			}
		}
	}
}

func TestHugeFilesAreNotReadWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("big.txt", "first line\n"+strings.Repeat("filler line\n", 1000))
	if err := os.Truncate(f.host("big.txt"), 200<<20); err != nil { // sparse
		t.Fatal(err)
	}
	res := f.call("read_file", map[string]any{"path": "big.txt", "end_line": 1})
	if resultText(t, res) != "first line\n" {
		t.Fatalf("text %q", resultText(t, res))
	}
	if got := fmt.Sprintf("%+v", res.StructuredContent); got != fmt.Sprintf("{SHA256: Lines:-1 Bytes:%d Note:sha256 and lines not computed: the file is over 67108864 bytes}", 200<<20) {
		t.Fatalf("facts %s", got)
	}
	got := f.fail("write_file", map[string]any{"path": "big.txt", "content": "x", "append": true})
	if got != "Error: file too large to edit (over 64 MiB): /mnt/user-data/workspace/big.txt" {
		t.Fatalf("append to a huge file: %q", got)
	}
}
