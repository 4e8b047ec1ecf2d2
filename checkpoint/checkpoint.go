package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrNotFound: no such checkpoint, or no such path in it.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: a stored object does not hash to its name, or a
	// manifest does not parse: the store was damaged or tampered with.
	ErrCorrupt = errors.New("damaged checkpoint data")
	// ErrNotEmpty: Export's or Fork's destination already holds files.
	ErrNotEmpty = errors.New("destination is not empty")
	// ErrNotFile: OpenFile of something that is not a regular file.
	ErrNotFile = errors.New("not a regular file")
	// ErrUnsupported: the OS has no engine (only Linux, macOS and FreeBSD do).
	ErrUnsupported = errors.New("checkpoints are not supported on this OS")
)

// Options are a store's settings, given once to Open.
type Options struct {
	// Exclude lists paths, relative to the saved root and slash-separated
	// (e.g. "outputs/.tool-results"), that no checkpoint holds and that
	// Restore never touches: what is there stays as it is.
	Exclude []string
	// NoSync leaves out every fsync. A process killed at any point still
	// leaves a consistent store; a power cut may then lose or damage the
	// newest checkpoints (Restore refuses damaged ones). For tests and
	// throwaway stores.
	NoSync bool
}

// Info describes one checkpoint.
type Info struct {
	// ID is short and typeable: "1", "2", ... in order of creation, never
	// reused within a store.
	ID      string
	Time    time.Time
	Message string
	// Auto is true for checkpoints the server took by itself.
	Auto bool
	// Added, Modified and Deleted count the entries (files, directories,
	// symlinks) that differ from the previous checkpoint (the first one
	// counts everything as added).
	Added, Modified, Deleted int
	// Files and Size are the regular files the checkpoint holds and their
	// total bytes.
	Files int
	Size  int64
}

// Changed is the number of entries added, modified or deleted.
func (i Info) Changed() int { return i.Added + i.Modified + i.Deleted }

// Entry is one path of a checkpoint or of the live tree.
type Entry struct {
	// Path is relative to the root, slash-separated.
	Path string
	// Mode holds the type (fs.ModeDir, fs.ModeSymlink, fs.ModeIrregular for
	// a skipped entry, or none for a regular file) and the permission bits;
	// a directory's also its sticky and setgid bits. Setuid is never kept,
	// nor a file's setgid (a restore running as root must not make them).
	Mode    fs.FileMode
	Size    int64
	ModTime time.Time
	// Hash is a regular file's SHA-256, in hex.
	Hash string
	// Target is a symlink's text, as it was: never followed.
	Target string
	// Skipped says why the entry's content was not saved ("fifo",
	// "socket", "device", "unreadable", "too deep", "changed while
	// saving"); Restore leaves whatever is at such a path alone.
	Skipped string
}

// Kind says how a path changed.
type Kind string

// The kinds of change.
const (
	Added    Kind = "added"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
)

// Change is one path that differs between two trees. Old is nil for
// Added, New for Deleted. A path whose type changed (a file became a
// directory) is Modified; what lies below a directory that came or went is
// listed too, each path once, a directory before its contents.
type Change struct {
	Path     string
	Kind     Kind
	Old, New *Entry
}

// Skip is a path Save did not save the content of, and why.
type Skip struct {
	Path, Reason string
}

// SaveOptions are the arguments of Save.
type SaveOptions struct {
	Message string
	// Auto marks a checkpoint the server took by itself.
	Auto bool
	// Force saves a checkpoint even when nothing changed since the latest.
	Force bool
}

// SaveResult is what Save did.
type SaveResult struct {
	// Info is the new checkpoint, or the latest one when Saved is false.
	Info Info
	// Saved is false when nothing changed since the latest checkpoint: no
	// new checkpoint was made.
	Saved bool
	// Skipped lists special files (FIFOs, sockets, devices) and
	// unreadable paths whose content no checkpoint holds.
	Skipped []Skip
}

// Locker takes a per-path lock: the same one the tools' writes take, so
// that Restore never interleaves with a write of the same file. path is
// relative to the root, slash-separated. *filelock.Locks has this method
// set; when its keys are host paths, adapt with LockerFunc.
type Locker interface {
	Lock(ctx context.Context, path string) (unlock func(), err error)
}

// LockerFunc is a Locker made of a function.
type LockerFunc func(ctx context.Context, path string) (unlock func(), err error)

// Lock calls f.
func (f LockerFunc) Lock(ctx context.Context, path string) (func(), error) { return f(ctx, path) }

// RestoreOptions are the arguments of Restore.
type RestoreOptions struct {
	// Locker, when set, is taken for each file Restore writes or removes.
	// The caller must not hold any of its locks while calling Restore.
	Locker Locker
	// SaveFirst saves the tree as it is before restoring (an automatic
	// checkpoint with UndoMessage), so that the restore can be undone by
	// restoring RestoreResult.Undo. Done under the same store lock, so
	// nothing can be pruned in between.
	SaveFirst   bool
	UndoMessage string
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	// Undo is the checkpoint that holds the tree as it was before the
	// restore (with SaveFirst: the new one, or the latest when nothing had
	// changed since); its ID is "" without SaveFirst.
	Undo Info
	// Changes are what the restore changed in the tree.
	Changes []Change
	// Skipped lists what SaveFirst could not save, and the paths the
	// restore left as they were because a writer its locks do not exclude
	// changed them after its walk (so after the undo checkpoint: replacing
	// them would lose that write); those are not in Changes.
	Skipped []Skip
}

// PruneResult is what Prune did.
type PruneResult struct {
	// Removed lists the checkpoints dropped, oldest first.
	Removed []string
	// Bytes is the store's size afterwards; Freed what was removed.
	Bytes, Freed int64
}

// errorf makes one-line errors that start with "checkpoint: ".
func errorf(format string, args ...any) error {
	return fmt.Errorf("checkpoint: "+format, args...)
}

// quote is a relative path fit for a one-line error: as it is when
// printable, Go-quoted when it holds a newline or another control
// character, and cut when very long.
func quote(rel string) string {
	if len(rel) > 200 {
		rel = rel[:100] + "…" + rel[len(rel)-100:]
	}
	for _, r := range rel {
		if r < 0x20 || r == 0x7f || r == '"' {
			return strconv.Quote(rel)
		}
	}
	return rel
}

// pathError is an error about a path inside the root: the path is
// relative, the error one line, and the host path (which an *os.PathError
// from the system may hold) is never shown.
type pathError struct {
	op, rel string
	err     error
}

func (e *pathError) Error() string {
	return "checkpoint: " + e.op + " " + quote(e.rel) + ": " + e.err.Error()
}

func (e *pathError) Unwrap() error { return e.err }

// wrapped is an error with its own text that is also err (errors.Is).
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }

// bare strips an *fs.PathError down to its cause, dropping the host path
// it names.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// cleanExclude checks and cleans Options.Exclude.
func cleanExclude(list []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range list {
		c := path.Clean(p)
		if p == "" || c == "." || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(c, 0) {
			return nil, errorf("exclude %s: not a path inside the root", quote(p))
		}
		out[c] = true
	}
	return out, nil
}

// join joins a relative directory and a name ("." is the root).
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// Temporary files in the saved tree are named like hostfs's: tempPrefix +
// 16 lowercase hex digits + tempSuffix, flocked while written. Save leaves
// them out and Restore leaves them alone (a tool's write in flight), and
// the writers' sweeper removes those a killed process left. Only a regular
// file of such a name is one: a directory, symlink or anything else named
// so is user data, saved and restored like any entry (else an agent could
// keep a tree outside every checkpoint).
const (
	tempPrefix = ".sandbox-mcp-"
	tempSuffix = ".tmp"
)

func writerTempName() string {
	var b [8]byte
	rand.Read(b[:])
	return tempPrefix + hex.EncodeToString(b[:]) + tempSuffix
}

// isWriterTemp reports whether n is a name writerTempName (or hostfs) makes.
func isWriterTemp(n string) bool {
	x, ok := strings.CutPrefix(n, tempPrefix)
	if !ok {
		return false
	}
	if x, ok = strings.CutSuffix(x, tempSuffix); !ok || len(x) != 16 {
		return false
	}
	for _, c := range x {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
