package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// ForkHeader, on the request that first names a new thread (X-Thread-ID),
// makes that thread a fork of a checkpoint of another: "THREAD@ID"
// (SPEC §18). Under auth tokens both threads are the token's own. Later
// requests may carry it again (a client sets its headers on every
// request): a thread that is already that fork is left as it is, for good
// (its fork record says so, see forksDir), even once its checkpoint 1 is
// pruned.
const ForkHeader = "X-Thread-Fork"

var forkCheckpointID = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

// ParseFork reads "THREAD@ID".
func ParseFork(spec string) (thread, id string, err error) {
	spec = strings.TrimSpace(spec)
	at := strings.LastIndexByte(spec, '@') // a namespaced thread starts with one
	if at < 0 {
		return "", "", fmt.Errorf("fork %q: want THREAD@ID (a thread and one of its checkpoints)", cut(spec, 64))
	}
	thread, id = spec[:at], spec[at+1:]
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return "", "", fmt.Errorf("fork %q: %w", cut(spec, 64), err)
	}
	if !forkCheckpointID.MatchString(id) {
		return "", "", fmt.Errorf("fork %q: %q is not a checkpoint id (1, 2, …)", cut(spec, 64), cut(id, 40))
	}
	return thread, id, nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}

// forkMessage is the message of a forked thread's first checkpoint, which
// also says, to a later request naming the same fork, that it was made.
func forkMessage(src, id string) string { return "fork of " + src + "@" + id }

// A fork's record: <state>/forks/<dst key>, whose content is "SRC@ID\n"
// (thread keys), written atomically (a temp file renamed over it) when the
// fork is made and removed before a new fork of that key is tried. It is
// what says, for good, that dst was made as that fork: checkpoint 1 (the
// fork's "fork of SRC@ID") goes once checkpoints.max_bytes prunes it, or
// past the kubernetes provider's listing bound, and pruning never touches
// the state dir's forks. It is the server's, not the thread's: a thread of
// the kubernetes provider keeps its files in its Pod's volume, where the
// server has no directory of it. With kubernetes replicas each having its
// own state dir, a replica that did not make the fork has no record, and
// checkpoint 1 (while it is there) still answers.
const forksDir = "forks"

// readForkRecord returns dst's record ("" when there is none).
func readForkRecord(stateDir, dst string) (string, error) {
	root, err := os.OpenRoot(filepath.Join(stateDir, forksDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", recordError(dst, err)
	}
	defer root.Close()
	b, err := root.ReadFile(filepath.FromSlash(dst))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", recordError(dst, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// writeForkRecord records dst as a fork of src@id, atomically: a reader
// sees the old record or the whole new one. The temp file's name starts
// with a dot, which no thread id does (sandbox.ValidThreadID), so it never
// meets another thread's record; forks of one dst are serialised.
func writeForkRecord(stateDir, dst, src, id string) error {
	if err := os.MkdirAll(filepath.Join(stateDir, forksDir), 0o700); err != nil {
		return recordError(dst, err)
	}
	root, err := os.OpenRoot(filepath.Join(stateDir, forksDir))
	if err != nil {
		return recordError(dst, err)
	}
	defer root.Close()
	name := filepath.FromSlash(dst)
	dir, base := filepath.Split(name)
	if dir != "" {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return recordError(dst, err)
		}
	}
	tmp := filepath.Join(dir, "."+base+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return recordError(dst, err)
	}
	_, err = f.WriteString(src + "@" + id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return recordError(dst, err)
	}
	// The rename itself lasts a crash once its directory is synced.
	d, err := root.Open(filepath.Join(dir, "."))
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return recordError(dst, err)
	}
	return nil
}

// recordError says which record failed without the state dir's host path.
func recordError(dst string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return fmt.Errorf("fork record of %s: %w", dst, err)
}

// removeForkRecord removes dst's record; none is no error.
func removeForkRecord(stateDir, dst string) error {
	root, err := os.OpenRoot(filepath.Join(stateDir, forksDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return recordError(dst, err)
	}
	defer root.Close()
	if err := root.Remove(filepath.FromSlash(dst)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return recordError(dst, err)
	}
	return nil
}

// ErrThreadExists: a fork's new thread exists already (and is not that fork).
var ErrThreadExists = errors.New("thread exists already")

// ForkThread makes thread dst, which must not exist yet, start from
// checkpoint id of thread src (keys, as the provider takes them): the
// checkpoint is streamed out of src's sandbox (ExportCheckpoint) into dst's
// (ImportCheckpoint), which makes it dst's checkpoint 1. A dst that
// exists already and is that very fork (its fork record, or its first
// checkpoint, says so) is no error: made is then false. A fork made is
// recorded (forksDir); one that fails removes what it made of dst.
// Forks of one dst are serialised across processes on the state dir.
func ForkThread(ctx context.Context, p sandbox.Provider, stateDir, src, id, dst string) (info checkpoint.Info, made bool, err error) {
	if src == dst {
		return info, false, fmt.Errorf("fork %s@%s: the new thread must be another thread", src, id)
	}
	locks, err := filelock.NewFileLocks(filepath.Join(stateDir, "locks"))
	if err != nil {
		return info, false, err
	}
	unlock, err := locks.Lock(ctx, "fork\x00"+dst)
	if err != nil {
		return info, false, err
	}
	defer unlock()
	exists, err := p.Exists(ctx, dst)
	if err != nil {
		return info, false, err
	}
	if exists {
		return alreadyForked(ctx, p, stateDir, src, id, dst)
	}
	// A record left of an earlier thread of that key is no longer true.
	if err := removeForkRecord(stateDir, dst); err != nil {
		return info, false, err
	}
	if ok, err := p.Exists(ctx, src); err != nil {
		return info, false, err
	} else if !ok {
		return info, false, fmt.Errorf("fork %s@%s: no thread %s", src, id, src)
	}
	from, err := p.Acquire(ctx, src)
	if err != nil {
		return info, false, err
	}
	defer p.Release(src)
	fromCP, ok := from.(tools.Checkpointer)
	exporter, ok2 := from.(checkpointStreams)
	if !ok || !ok2 {
		return info, false, errors.New("this provider's sandboxes keep no checkpoints")
	}
	list, err := fromCP.ListCheckpoints(ctx)
	if err != nil {
		return info, false, err
	}
	if !slices.ContainsFunc(list, func(i checkpoint.Info) bool { return i.ID == id }) {
		return info, false, fmt.Errorf("fork %s@%s: no checkpoint %s in thread %s", src, id, id, src)
	}
	to, err := p.Acquire(ctx, dst)
	if err != nil {
		return info, false, err
	}
	importer, ok := to.(checkpointStreams)
	if !ok {
		p.Release(dst)
		return info, false, errors.New("this provider's sandboxes keep no checkpoints")
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(exporter.ExportCheckpoint(ctx, id, pw)) }()
	info, err = importer.ImportCheckpoint(ctx, pr, forkMessage(src, id))
	pr.CloseWithError(errors.New("import ended"))
	p.Release(dst)
	if err == nil {
		err = writeForkRecord(stateDir, dst, src, id)
	}
	if err != nil {
		if derr := p.Discard(context.WithoutCancel(ctx), dst); derr != nil {
			err = errors.Join(err, fmt.Errorf("and the half-made thread %s was not removed: %w", dst, derr))
		}
		return checkpoint.Info{}, false, fmt.Errorf("fork %s@%s into %s: %w", src, id, dst, err)
	}
	return info, true, nil
}

// checkpointStreams is the part of a sandbox's checkpoints that fork uses.
type checkpointStreams interface {
	ExportCheckpoint(ctx context.Context, id string, w io.Writer) error
	ImportCheckpoint(ctx context.Context, r io.Reader, message string) (checkpoint.Info, error)
}

// alreadyForked answers for a dst that exists: no error when it is the
// fork asked for, else ErrThreadExists. Its record says so for good
// (checkpoint 1 may be pruned), unless the thread's checkpoints deny it: a
// checkpoint 1 that is not the fork's, or none at all (a fork has one
// at least), is a thread made since under that key. Without a record
// (another replica's fork, or one made before records), checkpoint 1 must
// be there and be the fork's.
func alreadyForked(ctx context.Context, p sandbox.Provider, stateDir, src, id, dst string) (checkpoint.Info, bool, error) {
	refuse := fmt.Errorf("fork %s@%s: %w: %s (a fork makes a new thread; name one that does not exist)", src, id, ErrThreadExists, dst)
	sb, err := p.Acquire(ctx, dst)
	if err != nil {
		return checkpoint.Info{}, false, err
	}
	defer p.Release(dst)
	cp, ok := sb.(tools.Checkpointer)
	if !ok {
		return checkpoint.Info{}, false, refuse
	}
	record, err := readForkRecord(stateDir, dst)
	if err != nil {
		return checkpoint.Info{}, false, err
	}
	list, err := cp.ListCheckpoints(ctx)
	if err != nil || len(list) == 0 {
		return checkpoint.Info{}, false, refuse
	}
	if list[0].ID == "1" {
		if list[0].Message != forkMessage(src, id) {
			return checkpoint.Info{}, false, refuse
		}
		return list[0], false, nil
	}
	if record != src+"@"+id {
		return checkpoint.Info{}, false, refuse
	}
	return checkpoint.Info{}, false, nil
}

// forkThread makes the call's thread a fork when its request carries
// ForkHeader: the source thread is named as the request would name it
// (the same token's), the new thread is the request's.
func (s *Server) forkThread(ctx context.Context, c *call) {
	spec := strings.TrimSpace(c.req.Header.Get(ForkHeader))
	if spec == "" || c.err != nil {
		return
	}
	src, id, err := ParseFork(spec)
	if err != nil {
		c.fail(fmt.Errorf("%s: %w", ForkHeader, err))
		return
	}
	if strings.HasPrefix(src, "@") {
		c.fail(fmt.Errorf("%s: name the thread as its client does (THREAD@ID), not by its directory", ForkHeader))
		return
	}
	_, dst := s.identify(ctx, c.req.Header)
	if dst.Anonymous || dst.ID == "" {
		c.fail(fmt.Errorf("%s needs %s naming the new thread", ForkHeader, ThreadHeader))
		return
	}
	h := c.req.Header.Clone()
	h.Set(ThreadHeader, src)
	_, from := s.identify(ctx, h)
	// A client sends its headers with every request: a fork this process
	// made or checked is not checked again (a lock, the thread's sandbox
	// and its list of checkpoints, every call).
	origin := from.Key + "@" + id
	if v, ok := s.forks.Load(dst.Key); ok && v == origin {
		return
	}
	if _, _, err := ForkThread(ctx, s.cfg.Provider, s.cfg.StateDir, from.Key, id, dst.Key); err != nil {
		// Threads by the names the client gave them, not their keys.
		msg := strings.NewReplacer(from.Key, src, dst.Key, dst.ID).Replace(err.Error())
		c.fail(fmt.Errorf("%s: %s", ForkHeader, msg))
		return
	}
	s.forks.Store(dst.Key, origin)
}
