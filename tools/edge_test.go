package tools_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Read-only mounts (skills, a custom ro mount) refuse writes with
// "Error: read-only: <virtual path>" and still serve reads (SPEC §4).
func TestReadOnlyMounts(t *testing.T) {
	t.Parallel()
	skills, data := t.TempDir(), t.TempDir()
	for _, d := range []string{skills, data} {
		if err := os.WriteFile(filepath.Join(d, "f.md"), []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"write_file", map[string]any{"path": "/mnt/skills/f.md", "content": "x"}, "Error: read-only: /mnt/skills/f.md"},
		{"write_file", map[string]any{"path": "/mnt/skills/new/f.md", "content": "x"}, "Error: read-only: /mnt/skills/new/f.md"},
		{"write_file", map[string]any{"path": "/mnt/data/f.md", "content": "x", "append": true}, "Error: read-only: /mnt/data/f.md"},
		{"str_replace", map[string]any{"path": "/mnt/skills/f.md", "old_str": "keep", "new_str": "lose"}, "Error: read-only: /mnt/skills/f.md"},
		{"str_replace", map[string]any{"path": "/mnt/data/f.md", "old_str": "keep", "new_str": "lose"}, "Error: read-only: /mnt/data/f.md"},
	} {
		t.Run(tc.name+" "+tc.args["path"].(string), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(c *local.Config) {
				c.SkillsDir = skills
				c.Mounts = []sandbox.Mount{{Virtual: "/mnt/data", Host: data, ReadOnly: true}}
			})
			res := f.call(tc.name, tc.args)
			if got := resultText(t, res); !res.IsError || got != tc.want {
				t.Errorf("got %q (isError %v), want %q", got, res.IsError, tc.want)
			}
			if !res.Denied {
				t.Error("Result.Denied is false")
			}
			for _, d := range []string{skills, data} {
				if b, _ := os.ReadFile(filepath.Join(d, "f.md")); string(b) != "keep me\n" {
					t.Errorf("%s/f.md changed to %q", d, b)
				}
				if _, err := os.Stat(filepath.Join(d, "new")); err == nil {
					t.Errorf("%s/new was created", d)
				}
			}
		})
	}
	t.Run("reads", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, func(c *local.Config) {
			c.SkillsDir = skills
			c.Mounts = []sandbox.Mount{{Virtual: "/mnt/data", Host: data, ReadOnly: true}}
		})
		if got := f.ok("read_file", map[string]any{"path": "/mnt/skills/f.md"}); got != "keep me\n" {
			t.Errorf("read_file: %q", got)
		}
		if got, want := f.ok("ls", map[string]any{"path": "/mnt", "depth": 1}), "/mnt/\n  data/\n  skills/\n  user-data/"; got != want {
			t.Errorf("ls /mnt:\n%s\nwant:\n%s", got, want)
		}
		if got, want := f.ok("grep", map[string]any{"pattern": "keep", "path": "/mnt/data"}), "/mnt/data/f.md:1: keep me"; got != want {
			t.Errorf("grep: %q, want %q", got, want)
		}
	})
}

// An absolute pattern whose fixed prefix is above the mounts searches every
// mount below it.
func TestGlobAcrossMounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("w.txt", "")
	if err := os.WriteFile(filepath.Join(f.userData, "outputs", "o.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := f.ok("glob", map[string]any{"pattern": "/mnt/user-data/**/*.txt"})
	want := "Found 2 paths under /mnt/user-data\n/mnt/user-data/outputs/o.txt\n" + ws + "/w.txt"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestGrepSkipsLargeFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.GrepMaxFileBytes = 100
	f.write("small.txt", "needle\n")
	f.write("large.txt", "needle\n"+strings.Repeat("x", 200)+"\n")
	if got, want := f.ok("grep", map[string]any{"pattern": "needle"}), ws+"/small.txt:1: needle"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestReadFileTruncationMultibyte(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.ReadFileOutputMaxChars = 51
	f.write("u.txt", strings.Repeat("é", 100)+"\n")
	got := f.ok("read_file", map[string]any{"path": "u.txt"})
	body, _, found := strings.Cut(got, "\n[")
	if !found {
		t.Fatalf("no truncation note: %q", got)
	}
	if !utf8.ValidString(body) || strings.Contains(body, "\uFFFD") {
		t.Errorf("cut inside a character: %q", body)
	}
	// The limit counts characters (SPEC: read_file_output_max_chars), not bytes.
	if n := utf8.RuneCountInString(body); n != 51 {
		t.Errorf("body is %d characters (%d bytes), want 51", n, len(body))
	}
}

// Editing through a symlinked file edits its target and keeps the link.
func TestEditThroughSymlinkKeepsLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"str_replace", map[string]any{"old_str": "old", "new_str": "new"}, "new\n"},
		{"write_file", map[string]any{"content": "new\n"}, "new\n"},
		{"write_file", map[string]any{"content": "more\n", "append": true}, "old\nmore\n"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.write("real.txt", "old\n")
			f.symlink("real.txt", "alias.txt")
			args := map[string]any{"path": "alias.txt"}
			for k, v := range tc.args {
				args[k] = v
			}
			f.ok(tc.tool, args)
			if got := f.read("real.txt"); got != tc.want {
				t.Errorf("real.txt = %q, want %q", got, tc.want)
			}
			fi, err := os.Lstat(f.host("alias.txt"))
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("alias.txt is no longer a symlink (mode %v, err %v)", fi.Mode(), err)
			}
		})
	}
}

// mkfifo makes a named pipe in the workspace and, at cleanup, unblocks any
// reader still stuck opening it.
func mkfifo(t *testing.T, f *fixture, rel string) {
	t.Helper()
	p := f.host(rel)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		for range 10 {
			w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				return // no reader waiting
			}
			w.Close()
		}
	})
}

// callWithin runs a tool call and reports whether it returned within d.
func callWithin(f *fixture, d time.Duration, name string, args map[string]any) (string, bool) {
	done := make(chan string, 1)
	go func() { done <- callQuiet(f, name, args) }()
	select {
	case s := <-done:
		return s, true
	case <-time.After(d):
		return "", false
	}
}

// A named pipe in the workspace (bash can make one) must not hang the file
// tools: opening a FIFO for reading blocks until a writer comes.
func TestFIFODoesNotHang(t *testing.T) {
	t.Parallel()
	const patience = 10 * time.Second
	for _, tc := range []struct {
		name  string
		tool  string
		args  map[string]any
		check func(t *testing.T, got string)
	}{
		{
			name: "grep walks past it",
			tool: "grep",
			args: map[string]any{"pattern": "needle"},
			check: func(t *testing.T, got string) {
				if got != ws+"/a.txt:1: needle" {
					t.Errorf("got %q", got)
				}
			},
		},
		{
			name: "read_file refuses it",
			tool: "read_file",
			args: map[string]any{"path": "pipe"},
			check: func(t *testing.T, got string) {
				if !strings.HasPrefix(got, "Error: ") {
					t.Errorf("read_file on a FIFO: %q, want an error", got)
				}
			},
		},
		{
			name: "write_file refuses it",
			tool: "write_file",
			args: map[string]any{"path": "pipe", "content": "x"},
			check: func(t *testing.T, got string) {
				if !strings.HasPrefix(got, "Error: ") || !strings.Contains(got, ws+"/pipe") {
					t.Errorf("write_file on a FIFO: %q, want an error naming it", got)
				}
			},
		},
		{
			name: "ls lists it",
			tool: "ls",
			args: map[string]any{},
			check: func(t *testing.T, got string) {
				if !strings.Contains(got, "\n  pipe") {
					t.Errorf("ls: %q", got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.write("a.txt", "needle\n")
			mkfifo(t, f, "pipe")
			got, ok := callWithin(f, patience, tc.tool, tc.args)
			if !ok {
				t.Fatalf("%s hung for %v on a named pipe in the workspace", tc.tool, patience)
			}
			tc.check(t, got)
		})
	}
}

func TestBashTimeoutCappedByLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashTimeoutMax = time.Second
	if got, want := f.ok("bash", map[string]any{"command": "sleep 30", "timeout": 100}), "[timed out after 1s]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBashNoOutputLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 0
	res := f.call("bash", map[string]any{"command": "seq 1 20000"})
	if got := resultText(t, res); got != seqOutput(20000)+"[exit code 0]" || res.Truncated {
		t.Errorf("limit 0 changed the output (%d chars, truncated %v)", len(got), res.Truncated)
	}
}

// Virtual paths are rewritten wherever a shell word may hold them.
func TestBashVirtualPathForms(t *testing.T) {
	t.Parallel()
	for i, cmd := range []string{
		`cat "/mnt/user-data/workspace/x.txt"`,
		`cat '/mnt/user-data/workspace/x.txt'`,
		`X=/mnt/user-data/workspace/x.txt; cat $X`,
		`cd /mnt/user-data/workspace && cat x.txt`,
		`cat /mnt/user-data/workspace/../workspace/x.txt`,
		`(cat /mnt/user-data/workspace/x.txt)`,
	} {
		// Plain subtest names: t.TempDir() is named after the test, and the
		// state dir's characters are another test's business.
		t.Run(fmt.Sprintf("form%d", i), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.write("x.txt", "content\n")
			if got := f.ok("bash", map[string]any{"command": cmd}); got != "content\n[exit code 0]" {
				t.Errorf("%s: got %q", cmd, got)
			}
		})
	}
}

// The state dir may be anywhere, e.g. under a home directory with a space
// ("~/Library/Application Support"): virtual paths in a command must still
// name the file.
// Host bash rewrites virtual paths into the command text; a host directory
// that would need shell quoting cannot be rewritten safely, so bash refuses
// with a clear error instead of running a broken (or injected) command.
func TestBashStateDirWithSpecialCharacters(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Application Support", "it's", "a$b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			state := filepath.Join(t.TempDir(), name)
			f := newFixture(t, func(c *local.Config) { c.StateDir = state })
			f.write("x.txt", "content\n")
			for _, cmd := range []string{"pwd", "cat /mnt/user-data/workspace/x.txt"} {
				got := f.fail("bash", map[string]any{"command": cmd})
				if !strings.Contains(got, "shell quoting") || strings.Contains(got, state) {
					t.Errorf("state dir %q, %s: got %q", state, cmd, got)
				}
			}
		})
	}
}
