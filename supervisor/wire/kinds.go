package wire

import (
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// Kind is what a frame's payload is. Every kind there is, with its
// direction and its payload, is listed here; "s→c" is from the supervisor
// (the daemon) to the server (the client), "c→s" the other way. A JSON
// payload is the type named; the client dispatches the s→c kinds from one
// table (supervisor/dispatch.go), the daemon the c→s kinds from another
// (supervisor/daemon/dispatch.go).
type Kind byte

// The channel and its commands. A command is a stream: Exec opens it,
// Exit is its last frame.
const (
	KindHello  Kind = 1 // s→c, stream 0, the channel's first frame: Hello
	KindExec   Kind = 2 // c→s: start a command as the stream: Exec
	KindOutput Kind = 3 // s→c: bytes the command wrote (stdout and stderr, interleaved), within its credit
	KindCredit Kind = 4 // c→s: 4 bytes (Credit): this many more output or read bytes may be sent; s→c for a file write; both ways on a pipe
	KindExit   Kind = 5 // s→c: the command ended: Exit; its last frame
	KindKill   Kind = 6 // c→s, no payload: kill the command's process group, stop a file operation, end a job request's wait
	KindStart  Kind = 7 // s→c, no payload: the command was started (before any output)
)

// File operations. Each is a stream, like a command: the server opens it
// with KindFS and the supervisor ends it with KindFSEnd, its last frame.
//
//	stat     FS → End{Info} (symlinks followed)
//	readdir  FS → Entries… → End (each entry not followed; unsorted,
//	         the client sorts)
//	read     FS → Info → Data… → End: Info is the file's stat, Data its
//	         bytes (at most Info.Size, within the credit the server gives),
//	         End{} once all were sent. A directory: Info, then End.
//	write    FS → Credit (the temporary file is ready; the supervisor
//	         grants credit as it writes) ; Data… → Commit → End. The bytes
//	         go to a temporary file beside the target (a symlink's target),
//	         checked against Commit's size and sha256, chmod, fsync, and
//	         renamed over the target, under a per-path mutex with the
//	         request's precondition. A stream that ends before Commit
//	         (KindKill, the channel's end) replaces nothing.
//	remove   FS → End (a file, or an empty directory)
//	digest   FS{Max} → End{Digest}: the file's size and, when it is at
//	         most Max bytes (and MaxDigestBytes), its sha256, line count
//	         and whether it is UTF-8, computed where it lives so that a
//	         reader of a few lines does not stream it all out. Opened as
//	         read opens (symlinks followed; a directory is EISDIR).
//	         KindKill stops it.
//	grep     FS{Grep} → Data… → End: the results of package search's Grep
//	glob     FS{Glob} → Data… → End{Total}: and of its Glob, run inside
//	         the sandbox; Data is a stream of JSON values (FileMatch or
//	         Hit), one a line, within the credit the server gives, in the
//	         order found gets them. KindKill stops the search.
const (
	KindFS        Kind = 8  // c→s: start a file operation as the stream: FSRequest
	KindFSInfo    Kind = 9  // s→c: a read's stat, before its bytes: FSInfo (a checkpoint open's: FSInfo{Entry})
	KindFSData    Kind = 10 // both: a read's, a search's or a checkpoint answer's bytes (s→c), a write's or an import's bytes (c→s)
	KindFSEntries Kind = 11 // s→c: directory entries, binary (AppendEntry)
	KindFSCommit  Kind = 12 // c→s: a write's (or an import's) bytes are all sent: FSCommit
	KindFSEnd     Kind = 13 // s→c: the operation ended: FSEnd; its last frame
)

// Jobs: processes that outlive the call that started them (SPEC §15). A
// job belongs to the supervisor, not to a channel: a channel that ends
// leaves it running, and any channel (of any server replica, before or
// after a restart) may read, feed or kill it by its id, "j1", "j2", …
// (monotonic for the supervisor's lifetime; with a log directory, unique
// among every supervisor that logs there).
//
// Each job request is a stream, like a command:
//
//	start   Job{start} → JobEnd{ID, PID, Job}
//	output  Job{output} → JobData… → JobEnd{Offset, NextOffset, …}: the
//	        job's output from Offset (characters), at most MaxJobRead
//	        bytes in frames of at most MaxPayload; with WaitMS, once there
//	        is output past the start or the job ended. KindKill ends the
//	        wait (CANCELLED); the job is never affected. A read moves the
//	        job's shown cursor, unless Peek (protocol 8).
//	input   Job{input} → JobEnd
//	kill    Job{kill} → JobEnd{Job}; the job's KillRequested is set when
//	        the signal reached it running (protocol 8)
//	resize  Job{resize, TTY} → JobEnd{Job}: a terminal job's new size (the
//	        kernel signals SIGWINCH to its foreground process group);
//	        NOTTY for a job without one.
//	list    Job{list} → JobEnd{Jobs}
//	usage   Job{usage, Dir} → JobEnd{Usage}: what the box uses and its
//	        limits, from the supervisor's own cgroup (SPEC §19), the jobs
//	        running, and the bytes of files under Dir (a walk of at most
//	        MaxUsageFiles entries). No shell runs; a number the box cannot
//	        read is left out (nil), never guessed.
//
// A command started with Exec.YieldAfterMS that still runs then becomes a
// job: its exec stream ends with Exit{Job, Running}; with Exec.Stdin
// (protocol 8) the job takes the command's stdin pipe, for input requests.
//
// A start with TTY runs the command on a pseudo-terminal of that size
// (SPEC §20): the command is a new session's leader with the terminal as
// its controlling one, its stdin, stdout and stderr; TERM is
// xterm-256color. Its output is what the terminal shows, raw (escape
// sequences and all: the server renders the screen), kept as any job's;
// input is typed at the terminal (Close types the EOF character, ^D);
// kill signals every process group of its session (a shell's job control
// gives each pipeline its own), and its end kills the session.
//
// Offsets count characters: bytes that start a UTF-8 sequence (every byte
// that is not 0b10xxxxxx), so that an agent's offsets are those of the text
// it was shown.
const (
	KindJob     Kind = 14 // c→s: a job request as the stream: JobRequest
	KindJobData Kind = 15 // s→c: output bytes of an output request
	KindJobEnd  Kind = 16 // s→c: the answer: JobReply; the stream's last frame
)

// Network pipes (SPEC §17): a pipe is a stream that carries a TCP
// connection's bytes both ways, opened by the server (dial: to a port on
// the sandbox's loopback, for expose_port) or by the supervisor (a
// connection accepted on its proxy listener, for the egress proxy).
// Streams the supervisor opens have DaemonStream set, and open in the
// order of their ids; the server's never have it. A stream the server
// opens with the bit, an open of the supervisor's on an id without it
// (but a dial's answer) or out of turn, ends the channel.
//
//	listen  Net{listen, CA} → NetEnd{Addr, CAFile} (or NetEnd{Err}): the
//	        supervisor's one proxy listener on 127.0.0.1 (an ephemeral
//	        port, made by the first listen, the same for every later one
//	        of any channel) now hands its connections to this channel:
//	        to the last live channel that asked, else the one before, else
//	        an accepted connection is closed at once. With CA (PEM
//	        certificates), CAFile is a bundle in the supervisor's private
//	        directory: the system's roots, then every distinct CA given
//	        (the last MaxCAs).
//	dial    Net{dial, Port} → NetOpen → the pipe; or NetEnd{Err} (REFUSED:
//	        nothing listens; LIMIT: MaxPipes are open; an errno's name).
//	        Always 127.0.0.1:Port.
//	accept  NetOpen{Peer} (s→c, on a new id with DaemonStream) → the pipe;
//	        a server that takes no more (not listening, MaxPipes open)
//	        answers NetEnd{LIMIT}.
//
// A pipe, each way: NetData… within the credit the receiver gives (PipeWindow
// at the open; KindCredit gives room back as the receiver consumes bytes:
// the supervisor once it wrote them to the TCP connection, the server once
// its reader read them), then at most one NetEOF, after which that way
// carries no NetData (a half close: the supervisor's TCP peer sent FIN, or
// the server's CloseWrite; the supervisor then writes what it holds and
// shuts its connection's write side). NetEnd, from either side, ends the
// pipe both ways: the bytes its sender sent before it are still
// delivered (by the supervisor within DrainGrace), its sender takes no
// more. The supervisor sends NetEnd{Err} when its TCP connection fails (a
// reset, a write that fails); the server sends NetEnd{} when its Conn is
// closed before both ways ended. A side forgets a pipe once it sent or got
// NetEnd, or sent and got NetEOF; a frame that then arrives on it (sent
// before its sender knew) is dropped, and so is one on a stream of the
// other's that ended: neither holds anything for it. NetData beyond the
// credit, empty, or after a NetEOF, a second NetEOF, credit beyond the
// window, or any pipe frame on a stream never opened, ends the channel.
// The channel's end ends every pipe of it (the supervisor closes their TCP
// connections). At most MaxPipes pipes per channel and side.
const (
	KindNet     Kind = 17 // c→s: a network request as the stream: NetRequest
	KindNetOpen Kind = 18 // s→c: a pipe is open: NetOpen (a dial's stream: connected; a new DaemonStream id: accepted)
	KindNetData Kind = 19 // both: a pipe's bytes, within the receiver's credit
	KindNetEOF  Kind = 20 // both, no payload: no more bytes this way (a half close)
	KindNetEnd  Kind = 21 // both: NetEnd: a request's answer; on a pipe, its end both ways
)

// Checkpoints (SPEC §18) of a box whose user-data lives in it (a Pod's
// volume): the supervisor runs the checkpoint engine on its one store and
// its one user-data root, both given on its command line (--checkpoints
// STORE --user-data ROOT); a request names neither, and a supervisor
// started without them answers every request NOCKPT. A request is a
// stream answered with the file operations' frames:
//
//	save     Ckpt{save, Message, Auto, Force, MaxBytes} → FSEnd{Ckpt{Info,
//	         Saved, Skipped}}: Save, then (MaxBytes > 0) Prune to MaxBytes.
//	list     Ckpt{list} → Data… → FSEnd: checkpoint.Info, one JSON value a
//	         line, oldest first.
//	changes  Ckpt{changes, From, To} → Data… → FSEnd: checkpoint.Change, one
//	         a line (To "": the live tree); over MaxCkptChanges: TOOMANY.
//	open     Ckpt{open, ID, Path} → FSInfo{Entry} → Data… → FSEnd: the
//	         regular file Path (relative to user-data) as checkpoint ID
//	         holds it, exactly Entry.Size bytes within the credit; checked
//	         against its hash as it is read (a mismatch: CORRUPT).
//	restore  Ckpt{restore, ID, UndoMessage, MaxBytes} → Data… → FSEnd{Ckpt{Undo,
//	         Skipped, Cut}}: Restore with SaveFirst, under the per-path
//	         locks the supervisor's own writes take, then (MaxBytes > 0)
//	         Prune to MaxBytes; Data lists the changes made (the first
//	         MaxCkptChanges; Cut says how many more). A supervisor before
//	         this field ignores it (no prune).
//	export   Ckpt{export, ID} → Data… → FSEnd: checkpoint.Store.ExportTar.
//	import   Ckpt{import, Message} → Credit ; Data… → Commit → FSEnd{Ckpt{Info}}:
//	         checkpoint.Store.ImportTar of the bytes, as a write takes
//	         them (within the credit granted); the stream's bytes must
//	         match Commit's size and sha256 before anything is restored.
//
// KindKill stops any of them (a restore stops between two files). Errors
// are FSEnd.Err codes: NOCKPT, NOTFOUND (no such checkpoint or path),
// CORRUPT (the store failed its checks), NOTEMPTY (import), BADARCHIVE,
// TOOMANY, CANCELLED, or EIO with Msg.
const (
	KindCkpt Kind = 22 // c→s: a checkpoint request as the stream: CkptRequest
)

// Checkpoint request operations (CkptRequest.Op).
const (
	CkptSave    = "save"
	CkptList    = "list"
	CkptChanges = "changes"
	CkptOpen    = "open"
	CkptRestore = "restore"
	CkptExport  = "export"
	CkptImport  = "import"
)

// CkptRequest is one checkpoint request.
type CkptRequest struct {
	Op          string `json:"op"`
	ID          string `json:"id,omitempty"`   // open, restore, export
	From        string `json:"from,omitempty"` // changes
	To          string `json:"to,omitempty"`   // changes: "" is the live tree
	Path        string `json:"path,omitempty"` // open: relative to user-data
	Message     string `json:"message,omitempty"`
	Auto        bool   `json:"auto,omitempty"`
	Force       bool   `json:"force,omitempty"`
	MaxBytes    int64  `json:"max_bytes,omitempty"`    // save, restore: then prune to this; 0: no bound
	UndoMessage string `json:"undo_message,omitempty"` // restore
}

// CkptEnd is a checkpoint request's answer, in FSEnd.Ckpt.
type CkptEnd struct {
	Info    *checkpoint.Info  `json:"info,omitempty"`  // save (the new or latest), import
	Saved   bool              `json:"saved,omitempty"` // save
	Skipped []checkpoint.Skip `json:"skipped,omitempty"`
	Undo    *checkpoint.Info  `json:"undo,omitempty"` // restore
	Cut     int               `json:"cut,omitempty"`  // restore: changes made beyond those listed
}

// Codes of FSEnd.Err for checkpoint requests (beside CodeTooMany,
// CodeCancelled, EIO).
const (
	CodeNoCkpt     = "NOCKPT"     // the supervisor keeps no checkpoints
	CodeNotFound   = "NOTFOUND"   // no such checkpoint, or no such path in it
	CodeCorrupt    = "CORRUPT"    // the store failed its checks
	CodeNotEmpty   = "NOTEMPTY"   // import: user-data holds files
	CodeNotFile    = "NOTFILE"    // open: not a regular file
	CodeBadArchive = "BADARCHIVE" // import: not a stream ImportTar takes
)

// The bounds of a checkpoint answer: what the server holds of one.
const (
	// MaxCkptChanges bounds the changes a changes or restore request lists.
	MaxCkptChanges = 1 << 18
	// MaxCkptList bounds the checkpoints a list answers.
	MaxCkptList = 1 << 16
	// MaxCkptLine bounds one JSON value of a list, changes or restore
	// answer (a path is at most a few KiB; a message is cut to
	// MaxCkptMessage).
	MaxCkptLine = 1 << 20
	// MaxCkptMessage bounds a checkpoint's message, in bytes.
	MaxCkptMessage = 4 << 10
	// MaxCkptSkipped bounds an answer's Skipped list.
	MaxCkptSkipped = 1 << 12
)

// DaemonStream is set in the id of every stream the supervisor opens
// (accepted connections), and in no stream id the server opens.
const DaemonStream uint32 = 1 << 31

// Hello is the supervisor's first frame.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version,omitempty"` // the build's version (Version); "": a development build
	Shell    string `json:"shell"`             // bash's path in the sandbox, else sh's; "" when it has neither
	PID      int    `json:"pid"`               // the supervisor's pid, in the sandbox's own pid namespace
	Busy     int    `json:"busy"`              // commands in flight and jobs running when the channel opened (any channel's)
	Jobs     int    `json:"jobs"`              // of which jobs running
	// Boot is 128 random bits (32 lowercase hex digits) drawn when the
	// supervisor started: a new one says the box was started anew (what
	// was opened in the old one is gone).
	Boot string `json:"boot"`
}

// Exec starts a command.
type Exec struct {
	Argv      []string `json:"argv"`
	Dir       string   `json:"dir"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // 0: none
	// YieldAfterMS: a command still running then becomes a job (with
	// these settings) instead of going on in the foreground; 0: never.
	YieldAfterMS int64 `json:"yield_after_ms,omitempty"`
	// Shell: the command is the next of the sandbox's one shell: it
	// starts in the kept shell state, and what it leaves when it exits in
	// the foreground is the state for the next (daemon/shellstate.go).
	// Argv must then be [shell, "-c", script] or [shell, "-c", script, $0].
	Shell bool `json:"shell,omitempty"`
	// Reset: the kept shell state is forgotten first.
	Reset bool `json:"reset,omitempty"`
	// Env: variables ("NAME=value") the command starts with, over its
	// environment (the kept state's with Shell).
	Env []string `json:"env,omitempty"`
	// Stdin: the command's stdin is a pipe held open (else /dev/null);
	// the job it becomes (YieldAfterMS) takes it, for input requests. A
	// command that ends in the foreground never got a byte of it.
	Stdin bool `json:"stdin,omitempty"`
	JobSettings
}

// Exit says how a command ended.
type Exit struct {
	Code     int    `json:"code"` // 128+N when killed by signal N
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"` // it could not start
	// Job: the command still runs, as this job (Exec.YieldAfterMS);
	// Running says so.
	Job     string `json:"job,omitempty"`
	Running bool   `json:"running,omitempty"`
	// OOMKills: processes the kernel's OOM killer took in the box while
	// the command ran (its cgroup's count rose: v2 memory.events, v1
	// memory.oom_control oom_kill) — the command's, most likely, though
	// a job's can be; 0 too where the box's cgroup does not count them.
	// MemoryMax is the box's memory limit then (0: none or not known).
	OOMKills  int64 `json:"oom_kills,omitempty"`
	MemoryMax int64 `json:"memory_max,omitempty"`
}

// File operation names (FSRequest.Op).
const (
	OpStat    = "stat"
	OpReadDir = "readdir"
	OpRead    = "read"
	OpWrite   = "write"
	OpRemove  = "remove"
	OpDigest  = "digest"
	OpGrep    = "grep"
	OpGlob    = "glob"
)

// FSRequest starts a file operation on Path, a clean absolute path in the
// sandbox.
type FSRequest struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// A write's precondition, checked under the path's mutex just before
	// the rename: the file's content has this sha256 (hex), or, with
	// IfAbsent, there is no file. Neither: none.
	IfSHA256 string `json:"if_sha256,omitempty"`
	IfAbsent bool   `json:"if_absent,omitempty"`
	// A digest's bound: a larger file gets its size only. 0, or more than
	// MaxDigestBytes: MaxDigestBytes.
	Max int64 `json:"max,omitempty"`
	// A search's request; its Root is Path.
	Grep *search.GrepRequest `json:"grep,omitempty"`
	Glob *search.GlobRequest `json:"glob,omitempty"`
}

// FSInfo is a file's stat.
type FSInfo struct {
	Mode    uint32 `json:"mode"` // raw st_mode
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	// Entry: a checkpoint open's file, as the checkpoint holds it (Size
	// is its Size).
	Entry *checkpoint.Entry `json:"entry,omitempty"`
}

// FSCommit ends a write's bytes: how many were sent and their sha256.
type FSCommit struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// FSEnd ends a file operation. Err is an errno's name (ENOENT, …) or one
// of the Code constants; Msg says more for codes the client has no
// sentinel for.
type FSEnd struct {
	Err   string  `json:"err,omitempty"`
	Msg   string  `json:"msg,omitempty"`
	Info  *FSInfo `json:"info,omitempty"`  // stat's answer
	Total int     `json:"total,omitempty"` // glob's count of matching paths
	// digest's answer
	Digest *FSDigest `json:"digest,omitempty"`
	// a checkpoint request's answer
	Ckpt *CkptEnd `json:"ckpt,omitempty"`
}

// FSDigest is a file's digest. SHA256 "" says the file was over the
// bound: only Size is known.
type FSDigest struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // hex
	// Lines counts newlines, and a last line without one.
	Lines int  `json:"lines,omitempty"`
	UTF8  bool `json:"utf8,omitempty"` // every byte is valid UTF-8
}

// Error codes of FSEnd.Err beside errno names: the supervisor's own.
const (
	CodeConflict  = "CONFLICT"  // a write's precondition did not hold
	CodeShort     = "SHORT"     // a write's bytes were not what Commit said
	CodeChanged   = "CHANGED"   // a file shrank while it was read
	CodeNotReg    = "NOTREG"    // a FIFO, socket or device where a file was expected
	CodeTooMany   = "TOOMANY"   // a directory of more than MaxDirEntries
	CodeCancelled = "CANCELLED" // KindKill (a job request's too)
)

// Job request operations (JobRequest.Op).
const (
	JobStart  = "start"
	JobOutput = "output"
	JobInput  = "input"
	JobKill   = "kill"
	JobList   = "list"
	JobUsage  = "usage"
	JobResize = "resize"
)

// TTY is a terminal's size, in character cells.
type TTY struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Valid reports whether the size is within the bounds a terminal job takes.
func (t TTY) Valid() bool {
	return t.Cols >= MinTTYCols && t.Cols <= MaxTTYCols && t.Rows >= MinTTYRows && t.Rows <= MaxTTYRows
}

// JobSettings are a job's limits, given when it starts (a start request,
// or an exec with YieldAfterMS).
type JobSettings struct {
	MaxJobs     int    `json:"max_jobs,omitempty"`      // refused when this many run; 0: MaxJobsRunning
	LogDir      string `json:"log_dir,omitempty"`       // the output also goes to LogDir/<id>.log, the id the first whose log is new there; "": nowhere
	LogMaxBytes int64  `json:"log_max_bytes,omitempty"` // then one truncation line; 0: no limit
	// The bound of the thread's saved results, LogDir's parent and the
	// logs in LogDir (sandbox.SavedDir), kept when the job starts and
	// ends: the oldest saved outputs and ended jobs' logs go first; 0: no
	// limit.
	SavedMaxFiles int   `json:"saved_max_files,omitempty"`
	SavedMaxBytes int64 `json:"saved_max_bytes,omitempty"`
}

// JobRequest is one job request.
type JobRequest struct {
	Op string `json:"op"`
	ID string `json:"id,omitempty"`
	// start
	Argv  []string `json:"argv,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Stdin bool     `json:"stdin,omitempty"` // a pipe for input; else /dev/null
	// TTY: on a pseudo-terminal of this size (and Stdin is moot: the
	// terminal is its input); resize: the new size.
	TTY   *TTY     `json:"tty,omitempty"`
	Shell bool     `json:"shell,omitempty"` // it starts in the kept shell state (Exec.Shell) and changes none
	Env   []string `json:"env,omitempty"`   // as Exec.Env
	JobSettings
	// output: Offset nil is the job's shown cursor (what no reader was
	// shown yet; the read advances it). Peek: the read moves no cursor
	// (a reader that is not the agent's: an MCP task's poll).
	Offset *int64 `json:"offset,omitempty"`
	WaitMS int64  `json:"wait_ms,omitempty"`
	Peek   bool   `json:"peek,omitempty"`
	// input
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
	// kill: TERM, INT or KILL
	Signal string `json:"signal,omitempty"`
}

// JobReply answers a job request. Err is one of the job codes; Msg says
// more.
type JobReply struct {
	Err     string `json:"err,omitempty"`
	Msg     string `json:"msg,omitempty"`
	Running int    `json:"running,omitempty"` // LIMIT: jobs running
	Max     int    `json:"max,omitempty"`     // LIMIT: the limit

	ID  string `json:"id,omitempty"`  // start
	PID int    `json:"pid,omitempty"` // start

	Job *JobInfo `json:"job,omitempty"` // start, output, input, kill, resize

	Offset     int64 `json:"offset,omitempty"`      // output: where the data starts
	NextOffset int64 `json:"next_offset,omitempty"` // output: where it ends
	Dropped    int64 `json:"dropped,omitempty"`     // output: characters asked for that are no longer kept

	Jobs []JobInfo `json:"jobs,omitempty"` // list

	Usage *Usage `json:"usage,omitempty"` // usage
}

// BoundCgroups is where the local provider binds the thread's cgroups
// (one directory per hierarchy, read-only) inside bubblewrap, which has
// no /sys of its own. Where it exists, its directories are the box's
// cgroups for a usage request.
const BoundCgroups = "/.sandbox-mcp/cgroup"

// Usage is what a box uses and its limits (a usage request's answer). A
// nil field is not known in this box (no cgroup, a file it cannot read).
type Usage struct {
	Cgroup string `json:"cgroup,omitempty"` // "v1" or "v2": what the numbers come from; "": none found

	MemoryBytes     *int64   `json:"memory_bytes,omitempty"`      // in use now (v2 memory.current, v1 memory.usage_in_bytes)
	MemoryPeakBytes *int64   `json:"memory_peak_bytes,omitempty"` // the most used (v2 memory.peak, v1 memory.max_usage_in_bytes)
	MemoryMaxBytes  *int64   `json:"memory_max_bytes,omitempty"`  // the limit; 0: none
	Pids            *int64   `json:"pids,omitempty"`              // processes and threads now
	PidsMax         *int64   `json:"pids_max,omitempty"`          // their limit; 0: none
	CPUUserSec      *float64 `json:"cpu_user_sec,omitempty"`      // CPU time used, user
	CPUSystemSec    *float64 `json:"cpu_system_sec,omitempty"`    // and system
	CPULimit        *float64 `json:"cpu_limit,omitempty"`         // CPUs' worth of time (quota/period); 0: none
	OOMKills        *int64   `json:"oom_kills,omitempty"`         // processes the OOM killer took in the box (v2 memory.events oom_kill, v1 memory.oom_control oom_kill)

	JobsRunning int `json:"jobs_running"`

	DiskBytes int64 `json:"disk_bytes"`         // bytes of the regular files under Dir (their sizes)
	DiskFiles int   `json:"disk_files"`         // entries counted
	DiskCut   bool  `json:"disk_cut,omitempty"` // the walk stopped at MaxUsageFiles: at least DiskBytes
}

// JobInfo is a job's state.
type JobInfo struct {
	ID        string `json:"id"`
	Command   string `json:"command"` // the first MaxJobCommand bytes of the command
	State     string `json:"state"`   // sandbox.JobRunning, JobExited or JobKilled
	PID       int    `json:"pid"`
	StartedAt int64  `json:"started_at"`         // unix ms
	EndedAt   int64  `json:"ended_at,omitempty"` // unix ms
	Code      int    `json:"code"`               // 128+N when ended by signal N
	Signal    string `json:"signal,omitempty"`   // the signal that ended it: TERM, KILL, …
	// KillRequested: a kill request signalled it while it ran (bash_kill,
	// an MCP task's cancel), whatever it then did.
	KillRequested bool `json:"kill_requested,omitempty"`
	TTY           *TTY `json:"tty,omitempty"` // a terminal job's size now; nil: not on a terminal
}

// Codes of JobReply.Err (and CodeCancelled).
const (
	CodeNoJob   = "NOJOB"   // no job of that id
	CodeLimit   = "LIMIT"   // MaxJobs run already
	CodeInval   = "INVAL"   // a malformed request
	CodeStart   = "START"   // the command could not start
	CodeLog     = "LOG"     // the log file could not be made
	CodeNoStdin = "NOSTDIN" // the job has no stdin pipe, or it was closed
	CodeBlocked = "BLOCKED" // the job did not read its input
	CodeEnded   = "ENDED"   // input to a job that ended
	CodeNoTTY   = "NOTTY"   // resize of a job without a terminal
)

// Network request operations (NetRequest.Op).
const (
	NetListen = "listen"
	NetDial   = "dial"
)

// NetRequest is one network request.
type NetRequest struct {
	Op string `json:"op"`
	// dial: the port on the sandbox's 127.0.0.1, 1 to 65535.
	Port int `json:"port,omitempty"`
	// listen: a CA the sandbox's commands are to trust (the proxy's, for
	// the HTTPS it terminates): PEM CERTIFICATE blocks only, at most
	// MaxCABytes; none: no bundle is written.
	CA []byte `json:"ca,omitempty"`
}

// NetOpen opens a pipe.
type NetOpen struct {
	Peer string `json:"peer,omitempty"` // accept: the connecting side's address ("127.0.0.1:N")
}

// NetEnd answers a network request, or ends a pipe. Err is a code
// (CodeRefused, CodeLimit, CodeInval, CodeCA) or an errno's name (ECONNRESET,
// ETIMEDOUT, …); Msg says more.
type NetEnd struct {
	Err    string `json:"err,omitempty"`
	Msg    string `json:"msg,omitempty"`
	Addr   string `json:"addr,omitempty"`    // listen: the listener, "127.0.0.1:N"
	CAFile string `json:"ca_file,omitempty"` // listen with a CA: the bundle's path in the sandbox
}

// Codes of NetEnd.Err beside errno names (and CodeLimit, CodeInval).
const (
	CodeRefused = "REFUSED" // dial: nothing listens on the port
	CodeCA      = "CA"      // listen: the CA bundle could not be written
)

// The protocol's bounds: what each side may send, and so what the other
// holds.
const (
	// Window is how many output (or read, or search, or write) bytes of
	// one stream may be in flight, unacknowledged by credit: the memory a
	// stream can hold in the other side.
	Window = 1 << 20
	// ChunkSize is what a side reads and sends at a time.
	ChunkSize = 32 << 10
	// DrainGrace is how long the supervisor still takes output after a
	// command's process group was killed (a process that left the group
	// and holds the pipe is cut off after it); the server waits that and
	// some more before it calls the supervisor unresponsive.
	DrainGrace = 2 * time.Second

	// MaxResultBytes bounds one result of a search (a FileMatch,
	// JSON-encoded): what the server holds of a result before it is
	// whole, and decodes (a decoded result can be about ten times its
	// JSON: `{}` is a 32-byte Line). A file whose result is larger fails
	// the search with an error saying so.
	MaxResultBytes = 16 << 20
	// MaxDirEntries bounds a listing: the memory one costs the server.
	MaxDirEntries = 1 << 18
	// MaxDigestBytes bounds the file a digest reads whole: the largest
	// an edit takes.
	MaxDigestBytes = sandbox.EditMaxBytes
	// MaxNameLen is NAME_MAX: no file name on Linux is longer.
	MaxNameLen = 255

	JobRing        = 1 << 20 // output kept in memory per job
	MaxJobRead     = 1 << 20 // output bytes in one answer
	MaxJobInput    = 64 << 10
	MaxJobWait     = 60_000  // ms
	MaxJobsRunning = 256     // whatever a request's MaxJobs says
	MaxJobsEnded   = 64      // ended jobs kept (their state and ring)
	MaxJobCommand  = 200     // bytes of JobInfo.Command
	MaxUsageFiles  = 100_000 // entries a usage request's walk visits

	// A terminal job's size (TTY): columns and rows.
	MinTTYCols, MaxTTYCols = sandbox.MinTermCols, sandbox.MaxTermCols
	MinTTYRows, MaxTTYRows = sandbox.MinTermRows, sandbox.MaxTermRows

	// PipeWindow is how many bytes of one pipe may be in flight each way,
	// unacknowledged by credit: what a pipe holds in the receiver.
	PipeWindow = 256 << 10
	// PipeChunk is the most a pipe's data frame carries: a quarter of the
	// window, so that four frames are in flight and the credit returned
	// for one keeps the stream going. Larger than ChunkSize: each frame
	// costs a hand-off between goroutines on each side, and a download
	// through the egress proxy is bound by their count.
	PipeChunk = PipeWindow / 4
	// MaxPipes bounds the pipes of one channel (each side's count): past
	// it the supervisor closes what its listener accepts and answers a
	// dial LIMIT, the server answers an accept's open LIMIT.
	MaxPipes = 256
	// MaxCABytes bounds a listen's CA; MaxCAs the distinct CAs the bundle
	// holds (the last given).
	MaxCABytes = 64 << 10
	MaxCAs     = 8
)
