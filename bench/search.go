package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// goroot is where the Go source tree is mounted in the sandbox.
const goroot = "/mnt/goroot"

// grepCase is one grep figure: our arguments and rg's for the same search.
// Both count the matching lines of every file (ours: output_mode count).
type grepCase struct {
	name string
	args map[string]any
	rg   []string
}

var grepCases = []grepCase{
	{"literal `errors.New`",
		map[string]any{"pattern": "errors.New", "literal": true, "case_sensitive": true},
		[]string{"-s", "-F", "errors.New"}},
	{"regex `func [A-Z][A-Za-z0-9_]*\\(`",
		map[string]any{"pattern": `func [A-Z][A-Za-z0-9_]*\(`, "case_sensitive": true},
		[]string{"-s", `func [A-Z][A-Za-z0-9_]*\(`}},
	// Go's \b is ASCII; rg's is Unicode unless told otherwise.
	{"case-insensitive word `\\bmutex\\b`",
		map[string]any{"pattern": `\bmutex\b`},
		[]string{"-i", `(?-u:\b)mutex(?-u:\b)`}},
}

// rgArgs are what make rg search what our grep searches: every file,
// hidden or ignored, but .git and files over 10 MiB; one count per file.
func rgArgs(c grepCase) []string {
	return append([]string{"-c", "--no-config", "--hidden", "--no-ignore", "-g", "!.git",
		"--max-filesize", "10M", "-j", strconv.Itoa(*threads)}, c.rg...)
}

// fdArgs list what our glob **/*.go lists: files and symlinks, hidden or
// ignored, outside .git.
func fdArgs() []string {
	return []string{"--no-ignore", "--hidden", "--exclude", ".git", "-t", "f", "-t", "l",
		"-e", "go", "-j", strconv.Itoa(*threads)}
}

func grepArgs(c grepCase, path string) map[string]any {
	args := map[string]any{"path": path, "output_mode": "count", "max_results": 100000}
	for k, v := range c.args {
		args[k] = v
	}
	return args
}

func globArgs(path string) map[string]any {
	return map[string]any{"pattern": "**/*.go", "path": path, "max_results": 100000}
}

// timed runs f and returns how long it took.
func timed(f func() (string, error)) (time.Duration, string, error) {
	start := time.Now()
	out, err := f()
	return time.Since(start), out, err
}

// runTool runs a peer tool in dir and returns its output.
func runTool(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, append(args, ".")...)
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && stderr.Len() == 0 {
		err = nil // rg: no match
	}
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", name, err, stderr.String())
	}
	return out.String(), nil
}

// grepCounts parses "path:count" lines into counts by path relative to
// the searched directory (ours: virtual dir; rg: "./").
func grepCounts(out, dir string) map[string]int {
	m := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(l, ':')
		if i < 0 {
			continue
		}
		n, err := strconv.Atoi(l[i+1:])
		if err != nil {
			continue
		}
		m[strings.TrimPrefix(strings.TrimPrefix(l[:i], dir), "/")] = n
	}
	return m
}

// globPaths parses our glob output (after its "Found" line) or fd's.
func globPaths(out, dir string) map[string]int {
	m := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "Found ") || strings.HasPrefix(l, "[") || l == "" {
			continue
		}
		m[strings.TrimPrefix(strings.TrimPrefix(l, dir), "/")] = 1
	}
	return m
}

// diff describes how two result sets differ; "" when they are equal.
func diff(ours, peer map[string]int) string {
	var only []string
	for k, v := range ours {
		if pv, ok := peer[k]; !ok {
			only = append(only, fmt.Sprintf("only ours: %s (%d)", k, v))
		} else if pv != v {
			only = append(only, fmt.Sprintf("%s: ours %d, peer %d", k, v, pv))
		}
	}
	for k, v := range peer {
		if _, ok := ours[k]; !ok {
			only = append(only, fmt.Sprintf("only peer: %s (%d)", k, v))
		}
	}
	if len(only) == 0 {
		return ""
	}
	slices.Sort(only)
	return fmt.Sprintf("%d differ: %s", len(only), strings.Join(only[:min(len(only), 5)], "; "))
}

// inproc calls the tools in this process, with no transport: what the
// tool itself costs.
type inproc struct {
	env   *tools.Env
	tools map[string]tools.Tool
	close func()
}

func newInproc(ctx context.Context, stateDir, src string) (*inproc, error) {
	p, err := local.New(local.Config{StateDir: stateDir,
		Mounts: []sandbox.Mount{{Virtual: goroot, Host: src, ReadOnly: true}}})
	if err != nil {
		return nil, err
	}
	sb, err := p.Acquire(ctx, "bench")
	if err != nil {
		p.Close()
		return nil, err
	}
	ip := &inproc{env: &tools.Env{Sandbox: sb, Limits: tools.DefaultLimits()}, tools: map[string]tools.Tool{},
		close: func() { p.Release("bench"); p.Close() }}
	for _, t := range tools.All() {
		ip.tools[t.Def.Name] = t
	}
	return ip, nil
}

func (ip *inproc) call(ctx context.Context, name string, args map[string]any) (string, error) {
	req := mcpgo.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res := ip.tools[name].Handle(ctx, ip.env, req)
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	if res.IsError {
		return "", fmt.Errorf("%s: %s", name, b.String())
	}
	return b.String(), nil
}

// searchTimes are the medians of one search done three ways.
type searchTimes struct {
	server, raw, inproc, peer time.Duration
	mismatch                  string
}

// measureSearch times one search through the server (the go-sdk client and
// the minimal client), in process and by the peer tool, alternating, and
// checks that the results are the same.
func measureSearch(ctx context.Context, ours, raw, in func() (string, error),
	peer func() (string, error), parse func(out string, peer bool) map[string]int, rounds int) (searchTimes, error) {
	var srv, rw, inp, pr []time.Duration
	var st searchTimes
	for r := range rounds + 1 { // round 0 warms the page cache and is not counted
		d1, o1, err := timed(ours)
		if err != nil {
			return st, err
		}
		d0, _, err := timed(raw)
		if err != nil {
			return st, err
		}
		d2, _, err := timed(in)
		if err != nil {
			return st, err
		}
		d3, o3, err := timed(peer)
		if err != nil {
			return st, err
		}
		if r == 0 {
			st.mismatch = diff(parse(o1, false), parse(o3, true))
			continue
		}
		srv, rw, inp, pr = append(srv, d1), append(rw, d0), append(inp, d2), append(pr, d3)
	}
	st.server, st.raw, st.inproc, st.peer = median(srv), median(rw), median(inp), median(pr)
	return st, nil
}

// countFiles counts the regular files under dir, .git aside.
func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.Type().IsRegular():
			n++
		}
		return nil
	})
	return n
}

// fdName is fd's name: fdfind on Debian.
func fdName() string {
	if _, err := exec.LookPath("fdfind"); err == nil {
		return "fdfind"
	}
	return "fd"
}

func haveTools() error {
	for _, t := range []string{"rg", fdName()} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s not found: apt-get install ripgrep fd-find (bench/run.sh does)", t)
		}
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return fmt.Errorf("no /proc: RSS figures need Linux")
	}
	return nil
}
