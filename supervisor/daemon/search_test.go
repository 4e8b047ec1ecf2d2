//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// searchTree makes a tree to search: small files, a file whose matching
// line is longer than a frame, a binary file, a FIFO (which must not hang
// the search) and a .git directory.
func searchTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		write(fmt.Sprintf("d%02d/f%d.txt", i%7, i), fmt.Sprintf("one\nneedle %d\nthree\nneedle again\n", i))
	}
	write("big/long.txt", "head\nneedle "+strings.Repeat("x", 3*wire.MaxPayload)+"\ntail\n")
	write("bin/b.dat", "needle\x00binary")
	write(".git/config", "needle in git\n")
	if err := syscall.Mkfifo(filepath.Join(root, "d00", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"d00/up.txt": "../d01/f1.txt", "d00/abs.txt": filepath.Join(root, "d02", "f2.txt")} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A search through the supervisor answers what the engine answers run
// here, result for result, in the same order (here with every file opened
// by its path: the supervisor's opens them in their directories, held
// open); a result over many frames arrives whole; a stop ends it early
// and leaves the channel working.
func TestFSSearch(t *testing.T) {
	fsys := client.NewFS(jobLink(t, listen(t)), nil)
	root := searchTree(t)
	ctx := t.Context()
	for _, req := range []search.GrepRequest{
		{Root: root, Pattern: "needle", Mode: search.ModeContent, Context: 1},
		{Root: root, Pattern: "(?i)NEEDLE \\d+", Mode: search.ModeFiles, Glob: "*.txt"},
		{Root: root, Pattern: "needle", Mode: search.ModeCount},
		{Root: filepath.Join(root, "big", "long.txt"), Pattern: "needle", Mode: search.ModeContent},
	} {
		var want, got []search.FileMatch
		byPath := struct{ sandbox.FS }{localFS{}} // not a DirOpener
		if err := search.Grep(ctx, byPath, req, func(m search.FileMatch) error { want = append(want, m); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := fsys.Grep(ctx, req, func(m search.FileMatch) error { got = append(got, m); return nil }); err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: %d results through the supervisor, %d here; differ: %v", req, len(got), len(want), !reflect.DeepEqual(got, want))
		}
	}
	for _, req := range []search.GlobRequest{
		{Root: root, Pattern: "**/*.txt"},
		{Root: root, Pattern: "**", IncludeDirs: true, Limit: 5},
		{Root: root, Pattern: "**/*.txt", Sort: search.SortMtime, Limit: 3},
	} {
		var want, got []search.Hit
		wantTotal, err := search.Glob(ctx, localFS{}, req, func(h search.Hit) error { want = append(want, h); return nil })
		if err != nil {
			t.Fatal(err)
		}
		total, err := fsys.Glob(ctx, req, func(h search.Hit) error { got = append(got, h); return nil })
		if err != nil || total != wantTotal || !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: total %d (want %d), %d hits (want %d), err %v", req, total, wantTotal, len(got), len(want), err)
		}
	}

	// Stopped after two results: no error, and the next call works.
	n := 0
	err := fsys.Grep(ctx, search.GrepRequest{Root: root, Pattern: "needle", Mode: search.ModeContent}, func(search.FileMatch) error {
		if n++; n == 2 {
			return search.ErrStop
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("stop: %d results, err %v", n, err)
	}
	// found's own error comes back as it is.
	mine := errors.New("mine")
	if err := fsys.Grep(ctx, search.GrepRequest{Root: root, Pattern: "needle", Mode: search.ModeFiles}, func(search.FileMatch) error { return mine }); err != mine {
		t.Fatalf("found's error: %v", err)
	}
	if _, err := fsys.Stat(ctx, root); err != nil {
		t.Fatalf("after a stopped search: %v", err)
	}

	// The root's errors are the sandbox's sentinels, naming the root.
	missing := filepath.Join(root, "nope")
	err = fsys.Grep(ctx, search.GrepRequest{Root: missing, Pattern: "x", Mode: search.ModeFiles}, func(search.FileMatch) error { return nil })
	var pe *sandbox.PathError
	if !errors.Is(err, sandbox.ErrNotFound) || !errors.As(err, &pe) || pe.Path != missing {
		t.Fatalf("grep of a missing root: %v", err)
	}
	file := filepath.Join(root, "d00", "f0.txt")
	if _, err := fsys.Glob(ctx, search.GlobRequest{Root: file, Pattern: "*"}, func(search.Hit) error { return nil }); !errors.Is(err, sandbox.ErrNotDir) {
		t.Fatalf("glob of a file: %v", err)
	}
	if err := fsys.Grep(ctx, search.GrepRequest{Root: "rel", Pattern: "x", Mode: search.ModeFiles}, func(search.FileMatch) error { return nil }); !errors.Is(err, sandbox.ErrOutsideRoot) {
		t.Fatalf("a relative root: %v", err)
	}
}
