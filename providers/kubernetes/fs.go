package kubernetes

import (
	"context"
	"io"
	"io/fs"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's Pod-backed sandbox.
type Sandbox struct {
	p      *Provider
	key    string // thread key
	name   string // Pod name
	mounts []sandbox.Mount
	// link is the channel to the Pod's supervisor, which runs bash and the
	// file operations; cfs is the Pod's file system served by it.
	link         *supervisor.Link
	cfs          *supervisor.FS
	*jobs.Runner // its jobs (sandbox.Jobs), run by the supervisor

	mu     sync.Mutex
	dialed struct { // the link's last channel, and the Pod it reaches
		c   *supervisor.Conn
		uid types.UID
	}
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// newSandbox returns the thread's sandbox; its Pod is made on first use.
func newSandbox(p *Provider, thread string, mounts []sandbox.Mount) *Sandbox {
	sb := &Sandbox{p: p, key: thread, name: PodName(p.cfg.PodPrefix, thread), mounts: mounts}
	sb.link = supervisor.NewLink(sb.dial)
	sb.cfs = supervisor.NewFS(sb.link, sb.readOnly)
	sb.Runner = jobs.NewRunner(sb.link, sb.enterJobs)
	return sb
}

// Thread is the thread key.
func (s *Sandbox) Thread() string { return s.key }

// Mounts lists the virtual directories mounted into the Pod; Host is the
// node directory behind one (empty for a claim).
func (s *Sandbox) Mounts() []sandbox.Mount { return s.mounts }

// PodName is the name of the thread's Pod.
func (s *Sandbox) PodName() string { return s.name }

// FS is the Pod's file system, served by its supervisor over the sandbox's
// channel: the virtual paths are the Pod's real mount points, and any
// other absolute path is the Pod's own file system (the agent owns its
// sandbox). Every operation acts as the Pod's user, as its commands do; a
// write is atomic and checked inside the Pod (size and sha256), an edit a
// compare-and-swap there, so that replicas editing one file lose no
// update; grep and glob run whole inside the Pod and send back results.
func (s *Sandbox) FS() sandbox.FS { return podFS{s} }

// readOnly reports whether name lies in a read-only mount.
func (s *Sandbox) readOnly(name string) bool {
	var best *sandbox.Mount
	for i, m := range s.mounts {
		if sandbox.Within(name, m.Virtual) && (best == nil || len(m.Virtual) > len(best.Virtual)) {
			best = &s.mounts[i]
		}
	}
	return best != nil && best.ReadOnly
}

// podFS runs each operation with the Pod marked busy (the idle reaper
// leaves it alone) and on a channel to the Pod the provider knows now.
type podFS struct{ s *Sandbox }

func (f podFS) inPod(ctx context.Context, op func() error) error {
	_, done, err := f.s.channel(ctx)
	if err != nil {
		return err
	}
	defer done()
	return op()
}

func (f podFS) Stat(ctx context.Context, name string) (fi fs.FileInfo, err error) {
	err = f.inPod(ctx, func() error { fi, err = f.s.cfs.Stat(ctx, name); return err })
	return fi, err
}

func (f podFS) ReadDir(ctx context.Context, name string) (out []fs.DirEntry, err error) {
	err = f.inPod(ctx, func() error { out, err = f.s.cfs.ReadDir(ctx, name); return err })
	return out, err
}

// Open marks the Pod busy only while the file opens: a reader that stalls
// must not keep it from the idle reaper.
func (f podFS) Open(ctx context.Context, name string) (file fs.File, err error) {
	err = f.inPod(ctx, func() error { file, err = f.s.cfs.Open(ctx, name); return err })
	return file, err
}

func (f podFS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	return f.inPod(ctx, func() error { return f.s.cfs.Edit(ctx, name, fn) })
}

func (f podFS) Create(ctx context.Context, name string) (w io.WriteCloser, err error) {
	err = f.inPod(ctx, func() error { w, err = f.s.cfs.Create(ctx, name); return err })
	return w, err
}

func (f podFS) Remove(ctx context.Context, name string) error {
	return f.inPod(ctx, func() error { return f.s.cfs.Remove(ctx, name) })
}

// Grep runs the whole search inside the Pod (see supervisor.FS.Grep).
func (f podFS) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	return f.inPod(ctx, func() error { return f.s.cfs.Grep(ctx, req, found) })
}

// Glob runs the whole search inside the Pod.
func (f podFS) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (total int, err error) {
	err = f.inPod(ctx, func() error { total, err = f.s.cfs.Glob(ctx, req, found); return err })
	return total, err
}
