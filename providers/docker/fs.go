package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's container-backed sandbox.
type Sandbox struct {
	p      *Provider
	key    string // thread key
	name   string // container name
	mounts []sandbox.Mount
	host   *sandbox.HostFS
	link   *supervisor.Link // to the container's supervisor, which runs its commands

	sh atomic.Pointer[string] // the image's shell for file operations, once known (see shell)
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Thread is the thread key.
func (s *Sandbox) Thread() string { return s.key }

// Mounts lists the bind-mounted directories.
func (s *Sandbox) Mounts() []sandbox.Mount { return s.mounts }

// FS sends paths under the mounts to the host-side HostFS and every other
// path to the container's own file system.
func (s *Sandbox) FS() sandbox.FS { return &sandboxFS{s} }

// container returns the running container's id, marked busy until done.
func (s *Sandbox) container(ctx context.Context) (string, func(), error) {
	return s.p.ensure(ctx, s.name, s.key, s.mounts)
}

type sandboxFS struct{ s *Sandbox }

// withContainer runs fn on the running container, making it again once if
// it went away behind the server's back.
func (f *sandboxFS) withContainer(ctx context.Context, fn func(id string) error) error {
	for attempt := 0; ; attempt++ {
		id, done, err := f.s.container(ctx)
		if err != nil {
			return err
		}
		err = fn(id)
		done()
		if attempt == 0 && isGone(err) {
			f.s.p.forget(f.s.name, id)
			continue
		}
		return err
	}
}

// isGone: the engine no longer has the container, or it is not running.
func isGone(err error) bool {
	var pe *sandbox.PathError
	if errors.As(err, &pe) {
		return false
	}
	return err != nil && (strings.Contains(err.Error(), "No such container") || strings.Contains(err.Error(), "is not running") || cerrdefs.IsConflict(err))
}

func (f *sandboxFS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if f.s.host.Serves(name) {
		return f.s.host.Stat(ctx, name)
	}
	var fi fs.FileInfo
	err := f.withContainer(ctx, func(id string) error {
		var err error
		fi, err = f.stat(ctx, id, name)
		return err
	})
	return fi, err
}

// stat follows a final symlink once (the archive API reports links).
func (f *sandboxFS) stat(ctx context.Context, id, name string) (fs.FileInfo, error) {
	st, err := f.s.p.cli.ContainerStatPath(ctx, id, name)
	if err != nil {
		return nil, pathError(name, err)
	}
	if st.Mode&fs.ModeSymlink != 0 && st.LinkTarget != "" {
		if t, err := f.s.p.cli.ContainerStatPath(ctx, id, st.LinkTarget); err == nil {
			st = t
		}
	}
	return statInfo{st, path.Base(name)}, nil
}

func (f *sandboxFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if f.s.host.Serves(name) {
		return f.s.host.ReadDir(ctx, name)
	}
	var out []fs.DirEntry
	err := f.withContainer(ctx, func(id string) error {
		var err error
		out, err = f.readDir(ctx, id, name)
		return err
	})
	return out, err
}

// readDir lists a container directory with ls where the image has a
// shell, else from the archive API (which reads the whole subtree).
func (f *sandboxFS) readDir(ctx context.Context, id, name string) ([]fs.DirEntry, error) {
	if _, err := f.stat(ctx, id, name); err != nil {
		return nil, err
	}
	var out []fs.DirEntry
	if f.s.hasShell(ctx, id) {
		stdout, stderr, code, err := f.s.run(ctx, id, []string{"sh", "-c", `cd -- "$1" && ls -1Ap`, "ls", name})
		if err != nil {
			return nil, engineError(err)
		}
		if code != 0 {
			if strings.Contains(string(stderr), "ermission denied") {
				return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrPermission}
			}
			return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotDir}
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(stdout), "\n"), "\n") {
			if l == "" || l == "./" || l == "../" {
				continue
			}
			isDir := strings.HasSuffix(l, "/")
			out = append(out, &dirEntry{f: f, id: id, dir: name, name: strings.TrimSuffix(l, "/"), isDir: isDir})
		}
	} else {
		rc, _, err := f.s.p.cli.CopyFromContainer(ctx, id, name)
		if err != nil {
			return nil, pathError(name, err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		seen := map[string]bool{}
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			parts := strings.Split(strings.Trim(h.Name, "/"), "/")
			if len(parts) != 2 || seen[parts[1]] {
				continue
			}
			seen[parts[1]] = true
			fi := h.FileInfo()
			out = append(out, &dirEntry{f: f, id: id, dir: name, name: parts[1], isDir: fi.IsDir(), info: fi})
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (f *sandboxFS) Open(ctx context.Context, name string) (fs.File, error) {
	if f.s.host.Serves(name) {
		return f.s.host.Open(ctx, name)
	}
	var file fs.File
	err := f.withContainer(ctx, func(id string) error {
		var err error
		file, err = f.open(ctx, id, name)
		return err
	})
	return file, err
}

// open streams a container file out of the archive API. The container
// stays marked busy only while the copy starts.
func (f *sandboxFS) open(ctx context.Context, id, name string) (fs.File, error) {
	fi, err := f.stat(ctx, id, name)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return &dirFile{fi: fi}, nil
	}
	rc, _, err := f.s.p.cli.CopyFromContainer(ctx, id, name)
	if err != nil {
		return nil, pathError(name, err)
	}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotFound}
		}
		switch h.Typeflag {
		case tar.TypeReg:
			return &tarFile{rc: rc, r: tr, fi: statInfo{container.PathStat{Name: path.Base(name), Size: h.Size, Mode: h.FileInfo().Mode(), Mtime: h.ModTime}, path.Base(name)}}, nil
		case tar.TypeSymlink, tar.TypeLink:
			rc.Close()
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			if target == name {
				return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotRegular}
			}
			return f.open(ctx, id, target)
		default:
			rc.Close()
			return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotRegular}
		}
	}
}

// Edit of a container path: under the file's lock, read it, compute, and
// write it back through the archive API — to a temporary name renamed over
// the file where the image has a shell (atomic), in place where it has not.
// The file keeps its mode and owner; a new file gets the container user's.
func (f *sandboxFS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	if f.s.host.Serves(name) {
		return f.s.host.Edit(ctx, name, fn)
	}
	unlock, err := f.s.p.cfg.Locks.Lock(ctx, "ctr\x00"+f.s.name+"\x00"+name)
	if err != nil {
		return err
	}
	defer unlock()
	return f.withContainer(ctx, func(id string) error {
		var old []byte
		exists := true
		hdr := &tar.Header{Typeflag: tar.TypeReg, Mode: 0o644, Uid: max(f.s.p.uid, 0), Gid: max(f.s.p.gid, 0)}
		file, err := f.open(ctx, id, name)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			exists = false
		case err != nil:
			return err
		default:
			tf, ok := file.(*tarFile)
			if !ok {
				file.Close()
				return &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
			}
			if tf.fi.Size() > sandbox.EditMaxBytes {
				file.Close()
				return &sandbox.PathError{Path: name, Err: sandbox.ErrTooLarge}
			}
			old, err = io.ReadAll(io.LimitReader(tf, sandbox.EditMaxBytes+1))
			file.Close()
			if err != nil {
				return pathError(name, err)
			}
			if st, err := f.s.p.cli.ContainerStatPath(ctx, id, name); err == nil {
				hdr.Mode = int64(st.Mode.Perm())
			}
		}
		data, err := fn(old, exists)
		if err != nil {
			return err
		}
		return f.write(ctx, id, name, data, hdr)
	})
}

// write puts data at name: missing parent directories are created (as
// explicit entries, so they get the container user, not root).
func (f *sandboxFS) write(ctx context.Context, id, name string, data []byte, hdr *tar.Header) error {
	// The nearest existing ancestor is where the archive is extracted.
	base := path.Dir(name)
	var missing []string
	for {
		st, err := f.s.p.cli.ContainerStatPath(ctx, id, base)
		if err == nil {
			if !st.Mode.IsDir() {
				return &sandbox.PathError{Path: name, Err: sandbox.ErrNotDir}
			}
			break
		}
		if !cerrdefs.IsNotFound(err) {
			return pathError(name, err)
		}
		missing = append([]string{path.Base(base)}, missing...)
		base = path.Dir(base)
	}
	atomic := f.s.hasShell(ctx, id)
	final := path.Base(name)
	target := final
	if atomic {
		target = ".sandbox-mcp-" + final + ".tmp"
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dir := ""
	for _, d := range missing {
		dir = path.Join(dir, d)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, Uid: hdr.Uid, Gid: hdr.Gid, ModTime: now})
	}
	hdr.Name, hdr.Size, hdr.ModTime = path.Join(dir, target), int64(len(data)), now
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	tw.Write(data)
	tw.Close()
	if err := f.s.p.cli.CopyToContainer(ctx, id, base, &buf, container.CopyToContainerOptions{}); err != nil {
		return pathError(name, err)
	}
	if atomic {
		tmp := path.Join(path.Dir(name), target)
		_, stderr, code, err := f.s.run(ctx, id, []string{"sh", "-c", `mv -f -- "$1" "$2"`, "mv", tmp, name})
		if err != nil || code != 0 {
			f.s.run(ctx, id, []string{"rm", "-f", "--", tmp})
			return fmt.Errorf("write %s: %s", name, oneLine(stderr))
		}
	}
	return nil
}

// Create of a container path keeps the bytes in memory (up to
// EditMaxBytes) and writes them on Close.
func (f *sandboxFS) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if f.s.host.Serves(name) {
		return f.s.host.Create(ctx, name)
	}
	return sandbox.EditWriter(ctx, f, name), nil
}

func (f *sandboxFS) Remove(ctx context.Context, name string) error {
	if f.s.host.Serves(name) {
		return f.s.host.Remove(ctx, name)
	}
	return f.withContainer(ctx, func(id string) error {
		_, stderr, code, err := f.s.run(ctx, id, []string{"rm", "-f", "--", name})
		if err != nil {
			return engineError(err)
		}
		if code != 0 {
			return fmt.Errorf("remove %s: %s", name, oneLine(stderr))
		}
		return nil
	})
}

// pathError classifies an engine error about a container path.
func pathError(name string, err error) error {
	switch {
	case cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), "No such container"):
		return err // the container, not the path: see isGone
	case cerrdefs.IsNotFound(err):
		return &sandbox.PathError{Path: name, Err: sandbox.ErrNotFound}
	case strings.Contains(err.Error(), "ermission denied"):
		return &sandbox.PathError{Path: name, Err: sandbox.ErrPermission}
	case strings.Contains(err.Error(), "not a directory"):
		return &sandbox.PathError{Path: name, Err: sandbox.ErrNotDir}
	}
	return &sandbox.PathError{Path: name, Err: errors.New("docker engine error")}
}

// statInfo is a container file's FileInfo.
type statInfo struct {
	st   container.PathStat
	name string
}

func (i statInfo) Name() string       { return i.name }
func (i statInfo) Size() int64        { return i.st.Size }
func (i statInfo) Mode() fs.FileMode  { return i.st.Mode }
func (i statInfo) ModTime() time.Time { return i.st.Mtime }
func (i statInfo) IsDir() bool        { return i.st.Mode.IsDir() }
func (i statInfo) Sys() any           { return nil }

type dirEntry struct {
	f     *sandboxFS
	id    string
	dir   string
	name  string
	isDir bool
	info  fs.FileInfo
}

func (e *dirEntry) Name() string { return e.name }
func (e *dirEntry) IsDir() bool  { return e.isDir }
func (e *dirEntry) Type() fs.FileMode {
	if e.isDir {
		return fs.ModeDir
	}
	return 0
}

func (e *dirEntry) Info() (fs.FileInfo, error) {
	if e.info != nil {
		return e.info, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.f.s.p.cli.ContainerStatPath(ctx, e.id, path.Join(e.dir, e.name))
	if err != nil {
		return nil, pathError(path.Join(e.dir, e.name), err)
	}
	return statInfo{st, e.name}, nil
}

// tarFile is a container file streamed out of a tar archive.
type tarFile struct {
	rc io.ReadCloser
	r  io.Reader
	fi fs.FileInfo
}

func (t *tarFile) Read(p []byte) (int, error) { return t.r.Read(p) }
func (t *tarFile) Stat() (fs.FileInfo, error) { return t.fi, nil }
func (t *tarFile) Close() error               { return t.rc.Close() }

// dirFile is an opened container directory (for Stat).
type dirFile struct{ fi fs.FileInfo }

func (d *dirFile) Read([]byte) (int, error)   { return 0, io.EOF }
func (d *dirFile) Stat() (fs.FileInfo, error) { return d.fi, nil }
func (d *dirFile) Close() error               { return nil }
