package tools_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(f *fixture)
		args    map[string]any
		want    string // exact result text
		wantErr string // exact error text; set instead of want
		check   func(t *testing.T, f *fixture)
	}{
		{
			name: "creates parent directories",
			args: map[string]any{"path": "a/b/c.txt", "content": "hello"},
			want: "Wrote 5 bytes to " + ws + "/a/b/c.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("a/b/c.txt"); got != "hello" {
					t.Errorf("content = %q, want %q", got, "hello")
				}
			},
		},
		{
			name: "absolute virtual path in outputs",
			args: map[string]any{"path": "/mnt/user-data/outputs/report.md", "content": "# r\n"},
			want: "Wrote 4 bytes to /mnt/user-data/outputs/report.md",
			check: func(t *testing.T, f *fixture) {
				b, err := os.ReadFile(filepath.Join(f.userData, "outputs", "report.md"))
				if err != nil || string(b) != "# r\n" {
					t.Errorf("outputs/report.md = %q, %v; want %q", b, err, "# r\n")
				}
			},
		},
		{
			name: "bytes counted, not runes",
			args: map[string]any{"path": "u.txt", "content": "héllo"},
			want: "Wrote 6 bytes to " + ws + "/u.txt",
		},
		{
			name: "empty content",
			args: map[string]any{"path": "empty.txt", "content": ""},
			want: "Wrote 0 bytes to " + ws + "/empty.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("empty.txt"); got != "" {
					t.Errorf("content = %q, want empty", got)
				}
			},
		},
		{
			name:  "overwrite replaces",
			setup: func(f *fixture) { f.write("o.txt", "old old old") },
			args:  map[string]any{"path": "o.txt", "content": "new"},
			want:  "Wrote 3 bytes to " + ws + "/o.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("o.txt"); got != "new" {
					t.Errorf("content = %q, want %q", got, "new")
				}
			},
		},
		{
			name:  "append",
			setup: func(f *fixture) { f.write("log.txt", "abc\n") },
			args:  map[string]any{"path": "log.txt", "content": "def\n", "append": true},
			want:  "Wrote 4 bytes to " + ws + "/log.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("log.txt"); got != "abc\ndef\n" {
					t.Errorf("content = %q, want %q", got, "abc\ndef\n")
				}
			},
		},
		{
			name: "append creates a missing file",
			args: map[string]any{"path": "new/log.txt", "content": "x", "append": true},
			want: "Wrote 1 bytes to " + ws + "/new/log.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("new/log.txt"); got != "x" {
					t.Errorf("content = %q, want %q", got, "x")
				}
			},
		},
		{
			name:  "through a symlink inside the workspace",
			setup: func(f *fixture) { f.mkdir("real"); f.symlink("real", "alias") },
			args:  map[string]any{"path": "alias/f.txt", "content": "via link"},
			want:  "Wrote 8 bytes to " + ws + "/alias/f.txt",
			check: func(t *testing.T, f *fixture) {
				if got := f.read("real/f.txt"); got != "via link" {
					t.Errorf("real/f.txt = %q, want %q", got, "via link")
				}
			},
		},
		{
			name:    "directory target",
			setup:   func(f *fixture) { f.mkdir("dir") },
			args:    map[string]any{"path": "dir", "content": "x"},
			wantErr: "Error: is a directory: " + ws + "/dir",
		},
		{
			name:    "the workspace itself",
			args:    map[string]any{"path": ws, "content": "x"},
			wantErr: "Error: is a directory: " + ws,
		},
		{
			name:    "append to a directory",
			setup:   func(f *fixture) { f.mkdir("dir") },
			args:    map[string]any{"path": "dir/", "content": "x", "append": true},
			wantErr: "Error: is a directory: " + ws + "/dir",
		},
		{
			name:    "symlinked directory pointing to /etc",
			setup:   func(f *fixture) { f.symlink("/etc", "etc") },
			args:    map[string]any{"path": "etc/sandbox-mcp-write-probe", "content": "pwned"},
			wantErr: outside + ws + "/etc/sandbox-mcp-write-probe",
			check: func(t *testing.T, f *fixture) {
				if _, err := os.Lstat("/etc/sandbox-mcp-write-probe"); !errors.Is(err, fs.ErrNotExist) {
					os.Remove("/etc/sandbox-mcp-write-probe")
					t.Errorf("write_file created /etc/sandbox-mcp-write-probe (lstat err %v)", err)
				}
			},
		},
		{
			name: "symlinked file pointing outside",
			setup: func(f *fixture) {
				out := filepath.Join(t.TempDir(), "victim.txt")
				if err := os.WriteFile(out, []byte("keep"), 0o644); err != nil {
					t.Fatal(err)
				}
				f.symlink(out, "victim.txt")
			},
			args:    map[string]any{"path": "victim.txt", "content": "pwned"},
			wantErr: outside + ws + "/victim.txt",
		},
		{
			name:    "parent is a file",
			setup:   func(f *fixture) { f.write("file.txt", "x") },
			args:    map[string]any{"path": "file.txt/child", "content": "x"},
			wantErr: "Error: not a directory: " + ws + "/file.txt/child",
		},
		{
			name:    "missing content",
			args:    map[string]any{"path": "x.txt"},
			wantErr: `Error: missing required argument "content"; write_file takes path (string, required), content (string, required), append (boolean), expected_sha256 (string)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			if tc.wantErr != "" {
				if got := f.fail("write_file", tc.args); got != tc.wantErr {
					t.Errorf("got %q, want %q", got, tc.wantErr)
				}
			} else if got := f.ok("write_file", tc.args); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
			f.noTempFiles()
		})
	}
}

func TestWriteFileKeepsMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mode   fs.FileMode
		append bool
	}{
		{"0755 overwrite", 0o755, false},
		{"0600 overwrite", 0o600, false},
		{"0755 append", 0o755, true},
		{"0640 append", 0o640, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.write("run.sh", "#!/bin/sh\n")
			if err := os.Chmod(f.host("run.sh"), tc.mode); err != nil {
				t.Fatal(err)
			}
			f.ok("write_file", map[string]any{"path": "run.sh", "content": "echo hi\n", "append": tc.append})
			fi, err := os.Stat(f.host("run.sh"))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != tc.mode {
				t.Errorf("mode after write = %v, want %v", got, tc.mode)
			}
			f.noTempFiles()
		})
	}
}

// A new file is created with a sane mode (not the 0600 of the temporary file).
func TestWriteFileNewFileMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("write_file", map[string]any{"path": "n.txt", "content": "x"})
	fi, err := os.Stat(f.host("n.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got&0o044 == 0 {
		t.Errorf("new file mode = %v, want readable by group/others like a normal file", got)
	}
}

func TestStrReplace(t *testing.T) {
	t.Parallel()
	const file = "f.txt"
	p := ws + "/" + file
	tests := []struct {
		name     string
		initial  string // content of f.txt; "" means no file
		args     map[string]any
		want     string // exact result text
		wantErr  string // substring of the error text; set instead of want
		wantFile string // content afterwards (initial when it failed)
	}{
		{
			name:     "unique",
			initial:  "hello world\n",
			args:     map[string]any{"old_str": "world", "new_str": "there"},
			want:     "Replaced 1 occurrence(s) in " + p,
			wantFile: "hello there\n",
		},
		{
			name:     "multi-line old_str",
			initial:  "a\nb\nc\n",
			args:     map[string]any{"old_str": "a\nb\n", "new_str": "B\n"},
			want:     "Replaced 1 occurrence(s) in " + p,
			wantFile: "B\nc\n",
		},
		{
			name:     "empty new_str deletes",
			initial:  "keep DROP keep",
			args:     map[string]any{"old_str": " DROP", "new_str": ""},
			want:     "Replaced 1 occurrence(s) in " + p,
			wantFile: "keep keep",
		},
		{
			name:     "not found",
			initial:  "hello world\n",
			args:     map[string]any{"old_str": "absent", "new_str": "x"},
			wantErr:  "not found",
			wantFile: "hello world\n",
		},
		{
			name:     "case matters",
			initial:  "Hello\n",
			args:     map[string]any{"old_str": "hello", "new_str": "x"},
			wantErr:  "not found",
			wantFile: "Hello\n",
		},
		{
			name:     "several without replace_all names the count",
			initial:  "a-x a-x a-x\n",
			args:     map[string]any{"old_str": "a-x", "new_str": "b"},
			wantErr:  "3 times",
			wantFile: "a-x a-x a-x\n",
		},
		{
			name:     "replace_all",
			initial:  "a-x a-x a-x\n",
			args:     map[string]any{"old_str": "a-x", "new_str": "b", "replace_all": true},
			want:     "Replaced 3 occurrence(s) in " + p,
			wantFile: "b b b\n",
		},
		{
			name:     "replace_all with one occurrence",
			initial:  "one\n",
			args:     map[string]any{"old_str": "one", "new_str": "two", "replace_all": true},
			want:     "Replaced 1 occurrence(s) in " + p,
			wantFile: "two\n",
		},
		{
			name:     "empty old_str",
			initial:  "abc",
			args:     map[string]any{"old_str": "", "new_str": "x"},
			wantErr:  "old_str",
			wantFile: "abc",
		},
		{
			name:    "missing file",
			args:    map[string]any{"old_str": "a", "new_str": "b"},
			wantErr: "Error: not found: " + p,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.initial != "" {
				f.write(file, tc.initial)
			}
			args := map[string]any{"path": file}
			for k, v := range tc.args {
				args[k] = v
			}
			if tc.wantErr != "" {
				got := f.fail("str_replace", args)
				if !strings.Contains(got, tc.wantErr) {
					t.Errorf("error %q does not contain %q", got, tc.wantErr)
				}
				if tc.args["old_str"] != "" && !strings.Contains(got, p) {
					t.Errorf("error %q does not name %s", got, p)
				}
			} else if got := f.ok("str_replace", args); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.initial == "" {
				if _, err := os.Lstat(f.host(file)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("str_replace on a missing file created it (lstat err %v)", err)
				}
			} else if got := f.read(file); got != tc.wantFile {
				t.Errorf("file = %q, want %q", got, tc.wantFile)
			}
			f.noTempFiles()
		})
	}
}

func TestStrReplaceKeepsMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("run.sh", "echo old\n")
	if err := os.Chmod(f.host("run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.ok("str_replace", map[string]any{"path": "run.sh", "old_str": "old", "new_str": "new"})
	fi, err := os.Stat(f.host("run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v, want 0755", fi.Mode().Perm())
	}
}

func TestStrReplaceDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mkdir("d")
	got := f.fail("str_replace", map[string]any{"path": "d", "old_str": "a", "new_str": "b"})
	if want := "Error: is a directory: " + ws + "/d"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
