package search

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// walkTree is a tree of more directories than a walk reads ahead
// (walkAhead), with .git directories and files in each, under /ws.
func walkTree(t *testing.T) dirFS {
	t.Helper()
	files := map[string]string{}
	for i := range 30 {
		for j := range 12 {
			dir := fmt.Sprintf("ws/d%02d/e%02d", i, j)
			files[dir+"/a.txt"] = fmt.Sprintf("needle %d %d\nhay\nneedle again\n", i, j)
			files[dir+"/b.go"] = "package b\n"
			if j%5 == 0 {
				files[dir+"/.git/HEAD"] = "needle in git\n"
				files[dir+"/deep/deeper/c.txt"] = "needle deep\n"
			}
		}
		files[fmt.Sprintf("ws/d%02d/top.txt", i)] = "needle top\n"
	}
	files["ws/z.txt"] = "needle z\n"
	return writeTree(t, files)
}

type visited struct{ vp, rel string }

// seqWalk is the walk as it was before it read ahead: one directory at a
// time, depth first, in name order.
func seqWalk(ctx context.Context, fsys sandbox.FS, dir, rel string, skip func(rel string) bool, out *[]visited) {
	entries, err := fsys.ReadDir(ctx, dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() == ".git" {
			continue
		}
		r := childPath(rel, e.Name())
		*out = append(*out, visited{childPath(dir, e.Name()), r})
		if e.IsDir() && !skip(r) {
			seqWalk(ctx, fsys, childPath(dir, e.Name()), r, skip, out)
		}
	}
}

func TestWalkOrder(t *testing.T) {
	t.Parallel()
	fsys := walkTree(t)
	for _, tc := range []struct {
		name string
		skip func(rel string) bool
	}{
		{"everything", func(string) bool { return false }},
		{"SkipDir on some directories", func(rel string) bool { return strings.HasSuffix(rel, "e03") || rel == "d07" }},
	} {
		var want, got []visited
		seqWalk(t.Context(), fsys, "/ws", "", tc.skip, &want)
		err := walk(t.Context(), fsys, "/ws", true, false, func(vp, rel string, d fs.DirEntry, _ *heldDir) error {
			got = append(got, visited{vp, rel})
			if d.IsDir() && tc.skip(rel) {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %d entries visited, want %d; first difference at %d", tc.name, len(got), len(want), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []visited) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestWalkStops(t *testing.T) {
	t.Parallel()
	fsys := walkTree(t)
	n := 0
	err := walk(t.Context(), fsys, "/ws", true, false, func(string, string, fs.DirEntry, *heldDir) error {
		if n++; n == 100 {
			return ErrStop
		}
		return nil
	})
	if err != nil || n != 100 {
		t.Errorf("ErrStop: err %v after %d entries, want nil after 100", err, n)
	}
	boom := errors.New("boom")
	err = walk(t.Context(), fsys, "/ws", true, false, func(string, string, fs.DirEntry, *heldDir) error { return boom })
	if err != boom {
		t.Errorf("fn's error: got %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	n = 0
	err = walk(ctx, fsys, "/ws", true, false, func(string, string, fs.DirEntry, *heldDir) error {
		if n++; n == 50 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled walk: err %v", err)
	}
}
