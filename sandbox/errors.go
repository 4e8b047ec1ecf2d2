package sandbox

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
)

// Sentinel errors. Tools classify with errors.Is and show the agent
// "Error: <sentinel>: <virtual path>".
var (
	// ErrOutsideRoot: the path leaves every mapping of the sandbox (.., an
	// absolute host path, a symlink pointing out, a NUL byte).
	ErrOutsideRoot = errors.New("path outside the sandbox")
	// ErrReadOnly: a write to a read-only mount.
	ErrReadOnly = errors.New("read-only")
	// ErrNotFound: nothing at that path.
	ErrNotFound = errors.New("not found")
	// ErrIsDir: a file operation on a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a directory operation on a file, or a file used as a parent.
	ErrNotDir = errors.New("not a directory")
	// ErrNotRegular: a FIFO, socket or device where a file was expected.
	ErrNotRegular = errors.New("not a regular file")
	// ErrPermission: the host refused access.
	ErrPermission = errors.New("permission denied")
	// ErrExists: the path exists already.
	ErrExists = errors.New("already exists")
	// ErrBashDisabled: the provider will not run commands in this configuration.
	ErrBashDisabled = errors.New("bash is disabled")
)

// Errors of jobs (Jobs).
var (
	// ErrNoJob: no job of that id in this sandbox (never, or dropped).
	ErrNoJob = errors.New("no such job")
	// ErrJobLimit: JobLimits.MaxJobs run already; the message says how many.
	ErrJobLimit = errors.New("too many jobs running")
	// ErrJobNoInput: the job was started without stdin, or it was closed.
	ErrJobNoInput = errors.New("the job takes no input")
	// ErrJobBlocked: the job did not read its input within a second.
	ErrJobBlocked = errors.New("the job is not reading its input")
	// ErrJobEnded: input to a job that has ended.
	ErrJobEnded = errors.New("the job has ended")
	// ErrJobNoTTY: a resize of a job that is not on a terminal.
	ErrJobNoTTY = errors.New("the job is not on a terminal")
)

// PathError is an error about one virtual path. Its message never names a
// host path: "<what went wrong>: <virtual path>".
type PathError struct {
	Path string // virtual path
	Err  error  // a sentinel above, or a plain errno
}

func (e *PathError) Error() string { return e.Err.Error() + ": " + e.Path }
func (e *PathError) Unwrap() error { return e.Err }

// HostError translates an error of a host file operation on the virtual path
// vpath into a PathError whose text holds no host path: the host error's own
// message (which names the host path) is dropped, only its class is kept.
func HostError(vpath string, err error) error {
	if err == nil {
		return nil
	}
	var pe *PathError
	if errors.As(err, &pe) {
		return err
	}
	return &PathError{Path: vpath, Err: classify(err)}
}

func classify(err error) error {
	for _, s := range []error{ErrOutsideRoot, ErrReadOnly, ErrNotFound, ErrIsDir, ErrNotDir, ErrNotRegular, ErrTooLarge, ErrPermission, ErrExists} {
		if errors.Is(err, s) {
			return s
		}
	}
	// os.Root reports escapes with an unexported error; its text is stable.
	if strings.Contains(err.Error(), "path escapes from parent") {
		return ErrOutsideRoot
	}
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		return ErrPermission
	case errors.Is(err, fs.ErrExist):
		return ErrExists
	case errors.Is(err, syscall.EISDIR):
		return ErrIsDir
	case errors.Is(err, syscall.ENOTDIR):
		return ErrNotDir
	case errors.Is(err, syscall.EROFS):
		return ErrReadOnly
	case errors.Is(err, syscall.ELOOP):
		return ErrOutsideRoot
	case errors.As(err, &errno):
		return errno
	}
	return errors.New("i/o error")
}

// EditMaxBytes is the largest file an Edit reads: editing is read, change,
// write whole, and a bigger file would cost that much memory.
const EditMaxBytes = 64 << 20

// ErrTooLarge: a file over EditMaxBytes.
var ErrTooLarge = errors.New("file too large to edit (over 64 MiB)")
