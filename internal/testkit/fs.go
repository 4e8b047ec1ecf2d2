package testkit

import (
	"context"
	"io/fs"
	"sync/atomic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// CountingFS counts in N the bytes read from the files it opens. Being a
// wrapper, it hides what else FS implements (sandbox.Digester): a tool
// sees an FS that only reads, as every FS was before the digest.
type CountingFS struct {
	sandbox.FS
	N *atomic.Int64
}

func (c CountingFS) Open(ctx context.Context, name string) (fs.File, error) {
	f, err := c.FS.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return countedFile{f, c.N}, nil
}

type countedFile struct {
	fs.File
	n *atomic.Int64
}

func (f countedFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	f.n.Add(int64(n))
	return n, err
}

// DigestingFS is a CountingFS that keeps Digest.
type DigestingFS struct {
	CountingFS
	sandbox.Digester
}

// WithFS is sb with its FS replaced by fsys.
func WithFS(sb sandbox.Sandbox, fsys sandbox.FS) sandbox.Sandbox { return withFS{sb, fsys} }

type withFS struct {
	sandbox.Sandbox
	fs sandbox.FS
}

func (w withFS) FS() sandbox.FS { return w.fs }
