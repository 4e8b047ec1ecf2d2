package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPathSafety tries known escapes through every tool that takes a path.
// Each must be refused with "Error: path outside the sandbox: <virtual path>".
func TestPathSafety(t *testing.T) {
	t.Parallel()
	const secret = "TOP-SECRET-OUTSIDE"
	// How each tool is called with a path p.
	callers := map[string]func(p string) map[string]any{
		"read_file":   func(p string) map[string]any { return map[string]any{"path": p} },
		"write_file":  func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} },
		"str_replace": func(p string) map[string]any { return map[string]any{"path": p, "old_str": secret, "new_str": "pwned"} },
		"ls":          func(p string) map[string]any { return map[string]any{"path": p} },
		"glob":        func(p string) map[string]any { return map[string]any{"pattern": "**", "path": p} },
		"grep":        func(p string) map[string]any { return map[string]any{"pattern": ".", "path": p} },
	}
	tests := []struct {
		name  string
		path  string // {out} is replaced by the outside dir's host path
		vpath string // the virtual path named in the error; "" = only check the prefix
		tools []string
	}{
		{name: "dot-dot", path: "../../../etc/passwd", vpath: "/etc/passwd"},
		{name: "dot-dot from the workspace", path: ws + "/../../../etc", vpath: "/etc"},
		{name: "dot-dot past the root", path: "../../../../../../../../etc/passwd", vpath: "/etc/passwd"},
		{name: "absolute host path", path: "/etc/passwd", vpath: "/etc/passwd"},
		{name: "absolute host path of the outside dir", path: "{out}/secret.txt"},
		{name: "symlink to /etc", path: "etc/passwd", vpath: ws + "/etc/passwd"},
		{name: "symlink dir to /etc", path: "etc", vpath: ws + "/etc", tools: []string{"ls", "glob", "grep", "read_file", "write_file"}},
		{name: "symlink to an outside file", path: "leak.txt", vpath: ws + "/leak.txt"},
		{name: "relative symlink out of the root", path: "up/secret.txt", vpath: ws + "/up/secret.txt"},
		{name: "NUL byte", path: "inside.txt\x00.png"},
		{name: "NUL byte in an absolute path", path: ws + "/\x00/../../etc/passwd"},
		{name: "prefix confusion", path: "/mnt/user-data-x/foo", vpath: "/mnt/user-data-x/foo"},
		{name: "prefix confusion of the workspace", path: "/mnt/user-data/workspace2/foo", vpath: "/mnt/user-data/workspace2/foo"},
		{name: "mnt sibling", path: "/mnt/other", vpath: "/mnt/other"},
	}
	for _, tc := range tests {
		names := tc.tools
		if names == nil {
			names = []string{"read_file", "write_file", "str_replace", "ls", "glob", "grep"}
		}
		for _, tool := range names {
			t.Run(tc.name+"/"+tool, func(t *testing.T) {
				t.Parallel()
				out := t.TempDir()
				if err := os.WriteFile(filepath.Join(out, "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				f := newFixture(t)
				f.write("inside.txt", "inside "+secret+"\n")
				f.symlink("/etc", "etc")
				f.symlink(filepath.Join(out, "secret.txt"), "leak.txt")
				rel, err := filepath.Rel(f.ws, out)
				if err != nil {
					t.Fatal(err)
				}
				f.symlink(rel, "up")

				p := strings.ReplaceAll(tc.path, "{out}", out)
				got := f.fail(tool, callers[tool](p))
				want := outside + tc.vpath
				if tc.vpath == "" {
					want = outside
				}
				if tc.vpath == "" && !strings.HasPrefix(got, want) || tc.vpath != "" && got != want {
					t.Errorf("got %q, want %q", got, want)
				}
				// The outside dir may be named only when the agent named it.
				if strings.Contains(got, secret) || !strings.Contains(tc.path, "{out}") && strings.Contains(got, out) {
					t.Errorf("error leaks the outside: %q", got)
				}
				if b, _ := os.ReadFile(filepath.Join(out, "secret.txt")); string(b) != secret+"\n" {
					t.Errorf("outside file changed to %q", b)
				}
				if _, err := os.Lstat("/etc/pwned"); err == nil {
					t.Error("/etc/pwned exists")
				}
			})
		}
	}
}

// Walking tools do not follow symlinks out of the sandbox.
func TestWalkDoesNotFollowOutside(t *testing.T) {
	t.Parallel()
	const secret = "TOP-SECRET-OUTSIDE"
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.write("ok.txt", "fine\n")
	f.symlink(out, "outdir")
	f.symlink(filepath.Join(out, "secret.txt"), "leak.txt")

	if got := f.ok("grep", map[string]any{"pattern": "SECRET"}); strings.Contains(got, secret) {
		t.Errorf("grep read through a symlink to the outside:\n%s", got)
	}
	if got := f.ok("glob", map[string]any{"pattern": "**/secret.txt"}); !strings.HasPrefix(got, "Found 0 paths") {
		t.Errorf("glob walked into a symlink to the outside:\n%s", got)
	}
	if got := f.ok("ls", map[string]any{"depth": 3}); strings.Contains(got, "secret.txt") {
		t.Errorf("ls listed a directory outside:\n%s", got)
	}
}

// TestNoHostPathInResults runs calls whose natural output names paths and
// checks that none names the state dir. The fixture checks every call; this
// test makes the paths likely.
func TestNoHostPathInResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("a/b.txt", "hello\n")
	f.symlink("a", "link")
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"bash", map[string]any{"command": "pwd; pwd -P; echo $HOME; readlink -f link; ls -la; cd /; echo $OLDPWD; ls /mnt/user-data/nope"}},
		{"bash", map[string]any{"command": "find /mnt/user-data -maxdepth 2; cat missing.txt"}},
		{"bash", map[string]any{"command": "echo $PWD >&2; exit 7", "reset": true}}, // the first call cd'ed to /
		{"read_file", map[string]any{"path": "missing.txt"}},
		{"read_file", map[string]any{"path": "a"}},
		{"write_file", map[string]any{"path": "a/b.txt/c", "content": "x"}},
		{"str_replace", map[string]any{"path": "a/nope.txt", "old_str": "x", "new_str": "y"}},
		{"ls", map[string]any{"path": "link"}},
		{"ls", map[string]any{"path": "/", "depth": 5}},
		{"glob", map[string]any{"pattern": "**", "include_dirs": true}},
		{"grep", map[string]any{"pattern": "hello"}},
		{"grep", map[string]any{"pattern": "hello", "path": "link/b.txt"}},
	}
	for _, c := range calls {
		res := f.call(c.tool, c.args) // f.call fails the test on a host path
		if c.tool == "bash" {
			s := resultText(t, res)
			if !strings.Contains(s, "/mnt/user-data") {
				t.Errorf("bash output does not show virtual paths: %s", s)
			}
		}
	}
}
