package supervised

import (
	"context"
	"errors"
	"io"
	"io/fs"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// FS is the sandbox's file system. With HostOnly it is Host. Else a path
// Host serves (the thread's directories, locked on the host whatever the
// box does) goes there, and every other path to the box's own file
// system, through its supervisor: one round trip on the link, as the
// box's user, with no need of a shell or tools in the box; a write is
// atomic and checked inside the box, an edit a compare-and-swap there
// (package supervisor).
func (s *Sandbox) FS() sandbox.FS {
	if s.boxFS == nil {
		return s.cfg.Host
	}
	return files{s}
}

// files routes each operation to Host or to the box.
type files struct{ s *Sandbox }

var _ sandbox.Digester = files{}

// onHost: name is served on the host.
func (f files) onHost(name string) bool { return f.s.cfg.Host != nil && f.s.cfg.Host.Serves(name) }

// inBox runs op with the box entered (marked busy, so that no reaper
// takes it); the supervisor's FS dials as it needs.
func (f files) inBox(ctx context.Context, op func() error) error {
	done, err := f.s.box.Enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	return op()
}

func (f files) Stat(ctx context.Context, name string) (fi fs.FileInfo, err error) {
	if f.onHost(name) {
		return f.s.cfg.Host.Stat(ctx, name)
	}
	err = f.inBox(ctx, func() error { fi, err = f.s.boxFS.Stat(ctx, name); return err })
	return fi, err
}

func (f files) ReadDir(ctx context.Context, name string) (out []fs.DirEntry, err error) {
	if f.onHost(name) {
		return f.s.cfg.Host.ReadDir(ctx, name)
	}
	err = f.inBox(ctx, func() error { out, err = f.s.boxFS.ReadDir(ctx, name); return err })
	return out, err
}

// Open of a box path marks the box busy only while the file opens: a
// reader that stalls must not keep it from the reaper.
func (f files) Open(ctx context.Context, name string) (file fs.File, err error) {
	if f.onHost(name) {
		return f.s.cfg.Host.Open(ctx, name)
	}
	err = f.inBox(ctx, func() error { file, err = f.s.boxFS.Open(ctx, name); return err })
	return file, err
}

// Digest digests a box path in the box (its supervisor reads it there);
// a path Host serves is read as cheaply here: errors.ErrUnsupported.
func (f files) Digest(ctx context.Context, name string, maxBytes int64) (d sandbox.Digest, err error) {
	if f.onHost(name) {
		return sandbox.Digest{}, errors.ErrUnsupported
	}
	err = f.inBox(ctx, func() error { d, err = f.s.boxFS.Digest(ctx, name, maxBytes); return err })
	return d, err
}

func (f files) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	if f.onHost(name) {
		return f.s.cfg.Host.Edit(ctx, name, fn)
	}
	return f.inBox(ctx, func() error { return f.s.boxFS.Edit(ctx, name, fn) })
}

func (f files) Create(ctx context.Context, name string) (w io.WriteCloser, err error) {
	if f.onHost(name) {
		return f.s.cfg.Host.Create(ctx, name)
	}
	err = f.inBox(ctx, func() error { w, err = f.s.boxFS.Create(ctx, name); return err })
	return w, err
}

func (f files) Remove(ctx context.Context, name string) error {
	if f.onHost(name) {
		return f.s.cfg.Host.Remove(ctx, name)
	}
	return f.inBox(ctx, func() error { return f.s.boxFS.Remove(ctx, name) })
}

// Grep searches where the files are: a search rooted on the host runs
// here (the engine over this FS); any other runs whole inside the box, in
// its supervisor, which walks and reads there and sends back only results
// (the tools check them).
func (f files) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	if f.onHost(req.Root) {
		return search.Grep(ctx, f, req, found)
	}
	return f.inBox(ctx, func() error { return f.s.boxFS.Grep(ctx, req, found) })
}

// Glob searches where the files are, as Grep does.
func (f files) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (total int, err error) {
	if f.onHost(req.Root) {
		return search.Glob(ctx, f, req, found)
	}
	err = f.inBox(ctx, func() error { total, err = f.s.boxFS.Glob(ctx, req, found); return err })
	return total, err
}
