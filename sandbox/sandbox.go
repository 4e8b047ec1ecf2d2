package sandbox

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// Provider hands out sandboxes, one per thread.
type Provider interface {
	// Name is the provider's name as configured ("local", "docker", ...).
	Name() string
	// Acquire returns the thread's sandbox, creating the thread's files and
	// its sandbox on first use. Every Acquire is paired with a Release.
	Acquire(ctx context.Context, thread string) (Sandbox, error)
	// Release says one user of the thread's sandbox is done with it.
	Release(thread string)
	// Exists says whether the thread has files already — an earlier
	// session's, or another server's on the same state — which Acquire
	// would find rather than make. The server asks before it makes a
	// thread that no one can name again, so that Discard never takes files
	// that were there before.
	Exists(ctx context.Context, thread string) (bool, error)
	// Discard ends the thread for good: its sandbox, with every process in
	// it (its jobs too), and its files, wherever the provider keeps them
	// (SPEC §10, §16: an anonymous thread goes with its session). The
	// server calls it once the thread's last user released it; a thread
	// with nothing left is no error.
	Discard(ctx context.Context, thread string) error
	// Close releases every sandbox the provider holds.
	Close() error
}

// Sandbox is one thread's sandbox.
type Sandbox interface {
	// Thread is the id of the thread the sandbox serves.
	Thread() string
	// Mounts lists the virtual directories backed by host directories; the
	// server masks every host path named here out of what the agent sees.
	Mounts() []Mount
	// FS is the sandbox's file system, addressed by clean absolute virtual
	// paths (see Clean).
	FS() FS
	// Exec runs a shell command. Its interleaved stdout and stderr go to
	// req.Output as they come. A non-zero exit is a normal result; the error
	// is for commands that could not run at all (ErrBashDisabled, a dead
	// engine) and for a cancelled ctx.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
}

// FS is a sandbox's file system, addressed by clean absolute virtual paths.
// Errors are PathErrors naming the virtual path.
type FS interface {
	Stat(ctx context.Context, name string) (fs.FileInfo, error)
	// ReadDir lists a directory sorted by name.
	ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error)
	Open(ctx context.Context, name string) (fs.File, error)
	// Edit replaces the file's content atomically with what fn returns,
	// holding the file's lock across read, fn and write, so concurrent
	// edits never lose an update. fn gets the current content (exists false
	// when there is no file yet). A new file gets its parent directories;
	// an existing file keeps its mode. fn's error is returned as it is.
	Edit(ctx context.Context, name string, fn EditFunc) error
	// Create writes a new file (or replaces one) from a stream: the bytes go
	// to a temporary file beside it, renamed into place by Close, so readers
	// never see half of it. Parent directories are created.
	Create(ctx context.Context, name string) (io.WriteCloser, error)
	// Remove removes a file or an empty directory.
	Remove(ctx context.Context, name string) error
}

// Digester is an FS that can digest a file where it lives (a Pod's, a
// container's own files), so that a reader of a few lines needs not
// stream the whole file out for its hash and line count. An FS may
// implement it; Digest answers errors.ErrUnsupported for a path it serves
// as cheaply by reading (the thread's directories on the host).
type Digester interface {
	// Digest opens name as Open does (symlinks followed; a directory is
	// ErrIsDir) and reports its size and, for a file of at most maxBytes
	// (and EditMaxBytes), its sha256, line count and whether it is UTF-8.
	Digest(ctx context.Context, name string, maxBytes int64) (Digest, error)
}

// Digest is what Digester reports of a file.
type Digest struct {
	Size int64
	// Computed: the file was within the bound, and the fields below are
	// set; else only Size is.
	Computed bool
	SHA256   string // hex
	// Lines counts the newlines, and a last line without one.
	Lines int
	// UTF8: the whole file is valid UTF-8.
	UTF8 bool
}

// DirOpener is an FS that can hold a directory open, so that a reader of
// many of its files (a search) opens each by its name in the directory —
// one path component for the kernel to resolve — instead of by its path
// from the root. An FS may implement it; OpenDir answers
// errors.ErrUnsupported for a directory it cannot hold (the caller then
// uses ReadDir and Open).
type DirOpener interface {
	OpenDir(ctx context.Context, name string) (Dir, error)
}

// Dir is a directory a DirOpener holds open.
type Dir interface {
	// ReadDir lists the directory sorted by name, as FS.ReadDir does.
	ReadDir() ([]fs.DirEntry, error)
	// Open opens the entry name (one path component) as FS.Open opens the
	// directory's path joined with name: the same file, with the same
	// symlinks followed or refused.
	Open(name string) (fs.File, error)
	Close() error
}

// EditFunc computes a file's new content from its current content.
type EditFunc func(old []byte, exists bool) ([]byte, error)

// ExecRequest is one command to run.
type ExecRequest struct {
	Command string
	Timeout time.Duration
	Output  io.Writer // interleaved stdout and stderr
	// YieldAfter: a command still running then is not killed but goes on
	// as a job (limited by Jobs), so that a call ends within the client's
	// request timeout; 0: never. Only a Sandbox that implements Jobs
	// honours it.
	YieldAfter time.Duration
	Jobs       JobLimits
	// Shell: the command runs as the next command of the sandbox's one
	// shell (SPEC §15): in the working directory, with the exported
	// variables, that the last Shell command left, and — if it ends in the
	// foreground, not as a job — what it leaves becomes the state for the
	// next. Without Shell a command starts afresh and changes no state.
	Shell bool
	// ResetState: forget the kept shell state before the command (it then
	// starts afresh, as the sandbox's first command would).
	ResetState bool
	// Env: variables ("NAME=value") the command starts with, over those
	// of the environment it would have (the shell state's), as if exported
	// just before it; with Shell, what the command leaves is the next
	// state, as always. A name that is no shell variable's is refused.
	Env []string
	// Stdin: the command reads a pipe held open rather than an empty
	// stdin, for the job it may become (YieldAfter): JobInput writes to
	// it then (an MCP task's tasks/update). Until then nothing is written
	// to it: a command that reads it waits.
	Stdin bool
}

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode int
	TimedOut bool
	// Job: the command still runs, as this job (ExecRequest.YieldAfter);
	// ExitCode means nothing then.
	Job string
	// OOMKills: processes the kernel's OOM killer took in the sandbox
	// while the command ran, where the sandbox counts them; MemoryMax its
	// memory limit (0: none or not known).
	OOMKills  int64
	MemoryMax int64
}
