package tools_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// searchBattery writes a tree with the cases grep and glob render
// differently (context at a file's start and end, overlapping and distant
// windows, pages cut inside a file, CRLF, no final newline, bytes that are
// not UTF-8, long lines, host paths to mask, binary and large files, an
// output large enough to spill) and returns the calls to make on it.
func searchBattery(f *fixture) []map[string]any {
	f.write("a.txt", "Hello world\nfoo bar\nHELLO again\n")
	f.write("b.go", "package b\n// hello from go\n")
	f.write("crlf.txt", "hello crlf\r\nbye\r\nhello\r\n")
	f.write("nonl.txt", "x\ny\nhello at the end")
	f.write("bad.txt", "hello \xff\xfe bytes\nok\n")
	f.write("bin.dat", "hello\x00binary hello\n")
	f.write(".git/HEAD", "hello git\n")
	f.write("sub/c.txt", "x\nsay hello\n")
	f.write("sub/deeper/d.txt", "hello deep\n")
	f.write("sub.txt", "hello sub.txt sorts after sub/\n")
	f.write("host.txt", "hello from "+f.ws+"/x and "+f.stateDir+"\n")
	f.write("long.txt", "hello "+strings.Repeat("é", 3000)+" END\n")
	f.write("big.txt", strings.Repeat("filler\n", 2<<20)) // 14 MiB: over the 10 MiB limit
	var ctx strings.Builder
	for i := 1; i <= 60; i++ {
		if i%7 == 0 || i == 1 || i == 2 || i == 60 || i == 30 || i == 31 {
			fmt.Fprintf(&ctx, "match %d\n", i)
		} else {
			fmt.Fprintf(&ctx, "line %d\n", i)
		}
	}
	f.write("ctx/m.txt", ctx.String())
	for i := range 40 {
		f.write(fmt.Sprintf("many/f%02d.txt", i), strings.Repeat(fmt.Sprintf("spill %d %s\n", i, strings.Repeat("y", 400)), 80))
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, rel := range []string{"a.txt", "b.go", "sub/c.txt", "ctx/m.txt", "nonl.txt"} {
		mt := old.Add(time.Duration(i%3) * time.Hour) // ties: kept in walk order
		if err := os.Chtimes(f.host(rel), mt, mt); err != nil {
			f.t.Fatal(err)
		}
	}
	calls := []map[string]any{
		{"pattern": "hello"},
		{"pattern": "hello", "case_sensitive": true},
		{"pattern": "hello", "output_mode": "files"},
		{"pattern": "hello", "output_mode": "count"},
		{"pattern": "hello", "glob": "*.txt", "max_results": 3},
		{"pattern": "hello", "glob": "{sub/**,*.go}", "offset": 1},
		{"pattern": "hello", "path": "sub"},
		{"pattern": "hello", "path": "crlf.txt", "context": 1},
		{"pattern": "end$", "path": "nonl.txt", "context": 5},
		{"pattern": "^$"},
		{"pattern": "match", "path": "ctx", "context": 3},
		{"pattern": "match", "path": "ctx", "context": 2, "offset": 3, "max_results": 4},
		{"pattern": "match", "path": "ctx", "context": 20, "offset": 1, "max_results": 2},
		{"pattern": "match", "path": "ctx", "context": 99},
		{"pattern": "match [0-9]+", "path": "ctx/m.txt", "context": 1, "output_mode": "count"},
		{"pattern": "spill", "max_results": 5},
		{"pattern": "spill", "max_results": 5, "context": 2, "offset": 7},
		{"pattern": "spill", "output_mode": "files", "max_results": 3, "offset": 38},
		{"pattern": "spill", "offset": 100000},
		{"pattern": "zebra"},
		{"pattern": "a.b", "literal": true},
		{"pattern": "a(b"},
		{"pattern": "x", "glob": "["},
		{"pattern": "x", "output_mode": "lines"},
		{"pattern": "x", "path": "nope"},
		{"pattern": "x", "path": "/etc"},
		{"pattern": "filler", "path": "big.txt"},
		{"pattern": "**/*.txt"},
		{"pattern": "**/*.txt", "max_results": 4},
		{"pattern": "**/*.txt", "max_results": 4, "offset": 3},
		{"pattern": "**/*.txt", "max_results": 4, "offset": 500},
		{"pattern": "*", "include_dirs": true},
		{"pattern": "**", "sort": "mtime", "max_results": 6},
		{"pattern": "**", "sort": "mtime", "offset": 2, "max_results": 3},
		{"pattern": sandbox.WorkspaceDir + "/sub/**/*.txt"},
		{"pattern": "./sub/*"},
		{"pattern": "{a,b"},
		{"pattern": "*", "sort": "size"},
		{"pattern": "*", "path": "a.txt"},
		{"pattern": "*", "path": "nope"},
	}
	for _, c := range calls[len(calls)-13:] {
		c["tool"] = "glob"
	}
	return calls
}

// spillName is a spilled output's file name, different on every call.
var spillName = regexp.MustCompile(`\.tool-results/[^ \]]+`)

// runBattery makes the calls of searchBattery with env and returns their
// results, one string each.
func runBattery(f *fixture, env *tools.Env, calls []map[string]any) []string {
	var out []string
	for _, c := range calls {
		args := map[string]any{}
		name := "grep"
		for k, v := range c {
			if k == "tool" {
				name = v.(string)
				continue
			}
			args[k] = v
		}
		res := f.callEnv(env, name, args)
		text := resultText(f.t, res)
		spilled := ""
		if p := spillName.FindString(text); p != "" {
			r, err := env.Sandbox.FS().Open(f.t.Context(), sandbox.OutputsDir+"/"+p)
			if err != nil {
				f.t.Fatal(err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			spilled = fmt.Sprintf("\nspilled %d bytes, sha256 %x", len(b), sha256.Sum256(b))
		}
		out = append(out, fmt.Sprintf("%s %v: error %v truncated %v\n%s%s", name, args, res.IsError, res.Truncated,
			spillName.ReplaceAllString(text, ".tool-results/SPILL"), spilled))
	}
	return out
}

// remoteFS is a sandbox FS that searches by itself, as a provider whose
// files are a round trip away does: the engine runs over the FS and every
// request and result goes through JSON on the way.
type remoteFS struct {
	sandbox.FS
	calls *int
}

func (r remoteFS) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	*r.calls++
	req = roundTrip(req)
	return search.Grep(ctx, r.FS, req, func(fm search.FileMatch) error { return found(roundTrip(fm)) })
}

func (r remoteFS) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (int, error) {
	*r.calls++
	req = roundTrip(req)
	return search.Glob(ctx, r.FS, req, func(h search.Hit) error { return found(roundTrip(h)) })
}

func roundTrip[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var back T
	if err := json.Unmarshal(b, &back); err != nil {
		panic(err)
	}
	return back
}

// remoteSandbox is a sandbox whose FS is a remoteFS.
type remoteSandbox struct {
	sandbox.Sandbox
	fs remoteFS
}

func (r remoteSandbox) FS() sandbox.FS { return r.fs }

// TestRemoteSearchSameOutput checks that a search run by the sandbox
// (results through JSON and the checks of results from a sandbox) renders
// exactly what the search in the server does.
func TestRemoteSearchSameOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	calls := searchBattery(f)
	local := runBattery(f, f.env, calls)
	n := 0
	env := *f.env
	env.Sandbox = remoteSandbox{f.sb, remoteFS{f.sb.FS(), &n}}
	remote := runBattery(f, &env, calls)
	for i := range local {
		if local[i] != remote[i] {
			t.Errorf("remote differs:\n--- local\n%s\n--- remote\n%s", local[i], remote[i])
		}
	}
	if n == 0 {
		t.Error("the remote searcher was never called")
	}
	if dump := os.Getenv("SEARCH_BATTERY_OUT"); dump != "" {
		os.WriteFile(dump, []byte(strings.Join(local, "\n====\n")), 0o644)
	}
}
