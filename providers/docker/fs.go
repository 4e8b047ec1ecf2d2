package docker

import (
	"context"
	"io"
	"io/fs"

	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's container-backed sandbox.
type Sandbox struct {
	p            *Provider
	key          string // thread key
	name         string // container name
	mounts       []sandbox.Mount
	host         *hostfs.FS
	link         *supervisor.Link // to the container's supervisor, which runs its commands
	cfs          *supervisor.FS   // the container's own file system, served by the supervisor
	*jobs.Runner                  // its jobs (sandbox.Jobs), run by the supervisor
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Thread is the thread key.
func (s *Sandbox) Thread() string { return s.key }

// Mounts lists the bind-mounted directories.
func (s *Sandbox) Mounts() []sandbox.Mount { return s.mounts }

// FS sends paths under the mounts to the host-side HostFS (the thread's
// files, locked on the host, whatever the container does) and every other
// path to the container's own file system, through its supervisor: one
// round trip on the sandbox's channel, as the container's user, with no
// need of a shell or tools in the image.
func (s *Sandbox) FS() sandbox.FS { return &sandboxFS{s} }

// container returns the running container's id, marked busy until done.
func (s *Sandbox) container(ctx context.Context) (string, func(), error) {
	return s.p.ensure(ctx, s.name, s.key, s.mounts)
}

type sandboxFS struct{ s *Sandbox }

// inContainer runs fn with the container marked busy, so that the idle
// reaper leaves it alone; the supervisor FS dials (and so makes or
// starts the container) as it needs.
func (f *sandboxFS) inContainer(ctx context.Context, fn func() error) error {
	_, done, err := f.s.container(ctx)
	if err != nil {
		return err
	}
	defer done()
	return fn()
}

func (f *sandboxFS) Stat(ctx context.Context, name string) (fi fs.FileInfo, err error) {
	if f.s.host.Serves(name) {
		return f.s.host.Stat(ctx, name)
	}
	err = f.inContainer(ctx, func() error { fi, err = f.s.cfs.Stat(ctx, name); return err })
	return fi, err
}

func (f *sandboxFS) ReadDir(ctx context.Context, name string) (out []fs.DirEntry, err error) {
	if f.s.host.Serves(name) {
		return f.s.host.ReadDir(ctx, name)
	}
	err = f.inContainer(ctx, func() error { out, err = f.s.cfs.ReadDir(ctx, name); return err })
	return out, err
}

// Open of a container path marks the container busy only while the file
// opens: a reader that stalls must not keep it from the idle reaper.
func (f *sandboxFS) Open(ctx context.Context, name string) (file fs.File, err error) {
	if f.s.host.Serves(name) {
		return f.s.host.Open(ctx, name)
	}
	err = f.inContainer(ctx, func() error { file, err = f.s.cfs.Open(ctx, name); return err })
	return file, err
}

func (f *sandboxFS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	if f.s.host.Serves(name) {
		return f.s.host.Edit(ctx, name, fn)
	}
	return f.inContainer(ctx, func() error { return f.s.cfs.Edit(ctx, name, fn) })
}

func (f *sandboxFS) Create(ctx context.Context, name string) (w io.WriteCloser, err error) {
	if f.s.host.Serves(name) {
		return f.s.host.Create(ctx, name)
	}
	err = f.inContainer(ctx, func() error { w, err = f.s.cfs.Create(ctx, name); return err })
	return w, err
}

func (f *sandboxFS) Remove(ctx context.Context, name string) error {
	if f.s.host.Serves(name) {
		return f.s.host.Remove(ctx, name)
	}
	return f.inContainer(ctx, func() error { return f.s.cfs.Remove(ctx, name) })
}

// Grep searches where the files are: a search rooted in the thread's
// directories runs here over the host files (the engine over this FS);
// any other runs inside the container, in its supervisor, which walks and
// reads there and sends back only results (the tools check them).
func (f *sandboxFS) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	if f.s.host.Serves(req.Root) {
		return search.Grep(ctx, f, req, found)
	}
	return f.inContainer(ctx, func() error { return f.s.cfs.Grep(ctx, req, found) })
}

// Glob searches where the files are, as Grep does.
func (f *sandboxFS) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (total int, err error) {
	if f.s.host.Serves(req.Root) {
		return search.Glob(ctx, f, req, found)
	}
	err = f.inContainer(ctx, func() error { total, err = f.s.cfs.Glob(ctx, req, found); return err })
	return total, err
}
