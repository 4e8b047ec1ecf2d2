package search

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// dirFS is the sandbox.FS of a host directory, read-only, its root at the
// virtual "/": enough for the engine, and not a provider (a provider may
// come to import this package).
type dirFS struct{ dir string }

var _ sandbox.FS = dirFS{}

func (d dirFS) host(name string) string { return filepath.Join(d.dir, filepath.FromSlash(name)) }

func (d dirFS) Stat(_ context.Context, name string) (fs.FileInfo, error) {
	return os.Stat(d.host(name))
}

func (d dirFS) ReadDir(_ context.Context, name string) ([]fs.DirEntry, error) {
	return os.ReadDir(d.host(name))
}

func (d dirFS) Open(_ context.Context, name string) (fs.File, error) { return os.Open(d.host(name)) }

var errReadOnly = errors.New("read-only test FS")

func (dirFS) Edit(context.Context, string, sandbox.EditFunc) error { return errReadOnly }
func (dirFS) Create(context.Context, string) (io.WriteCloser, error) {
	return nil, errReadOnly
}
func (dirFS) Remove(context.Context, string) error { return errReadOnly }

// writeTree writes files (virtual path without the leading "/" -> content)
// under a new temporary directory and returns its FS.
func writeTree(t *testing.T, files map[string]string) dirFS {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dirFS{dir}
}

// heldFS is dirFS holding its directories open (sandbox.DirOpener), and
// counting those open, so that a test sees every one closed.
type heldFS struct {
	dirFS
	open *atomic.Int64
	most *atomic.Int64 // the most open at once
}

var _ sandbox.DirOpener = heldFS{}

func (h heldFS) OpenDir(_ context.Context, name string) (sandbox.Dir, error) {
	f, err := os.Open(h.host(name))
	if err != nil {
		return nil, err
	}
	for n := h.open.Add(1); ; {
		m := h.most.Load()
		if n <= m || h.most.CompareAndSwap(m, n) {
			break
		}
	}
	return &heldTestDir{f: f, open: h.open}, nil
}

type heldTestDir struct {
	f    *os.File
	open *atomic.Int64
}

func (d *heldTestDir) ReadDir() ([]fs.DirEntry, error) {
	entries, err := d.f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

func (d *heldTestDir) Open(name string) (fs.File, error) {
	if strings.Contains(name, "/") {
		return nil, errors.New("one component only")
	}
	return os.Open(filepath.Join(d.f.Name(), name))
}

func (d *heldTestDir) Close() error {
	if d.open.Add(-1) < 0 {
		panic("a held directory closed twice")
	}
	return d.f.Close()
}
