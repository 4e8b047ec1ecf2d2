package supervisor

// Message kinds (the frame's kind byte). "s→c" is from the supervisor to
// the server (the client), "c→s" the other way.
const (
	msgHello  byte = 1 // s→c, stream 0, first frame: Hello (JSON)
	msgExec   byte = 2 // c→s: start a command (ExecMsg, JSON) as the stream
	msgOutput byte = 3 // s→c: bytes the stream's command wrote (stdout and stderr, interleaved)
	msgCredit byte = 4 // c→s: 4 bytes: this many more output bytes may be sent (s→c for a file write: fsproto.go)
	msgExit   byte = 5 // s→c: the stream's command ended (ExitMsg, JSON); its last frame
	msgKill   byte = 6 // c→s: kill the stream's process group
	msgStart  byte = 7 // s→c: the stream's command was started (before any output)
)

// Protocol is the version of this protocol; a supervisor of another
// version is refused (the server and the supervisor are one binary, so
// they differ only when a server was replaced under a running sandbox).
const Protocol = 5

// window is how many output bytes of one stream may be in flight,
// unacknowledged by credit: the memory a stream can hold in the server.
const window = 1 << 20

// Hello is the supervisor's first frame.
type Hello struct {
	Protocol int    `json:"protocol"`
	Shell    string `json:"shell"` // bash's path in the sandbox, else sh's; "" when it has neither
	PID      int    `json:"pid"`   // the supervisor's pid, in the sandbox's own pid namespace
	Busy     int    `json:"busy"`  // commands in flight and jobs running when the channel opened (any channel's)
	Jobs     int    `json:"jobs"`  // of which jobs running
}

// ExecMsg starts a command.
type ExecMsg struct {
	Argv      []string `json:"argv"`
	Dir       string   `json:"dir"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // 0: none
	// YieldAfterMS: a command still running then becomes a job (with
	// these settings) instead of going on in the foreground; 0: never.
	YieldAfterMS int64 `json:"yield_after_ms,omitempty"`
	// Shell: the command is the next of the sandbox's one shell: it
	// starts in the kept shell state, and what it leaves when it exits in
	// the foreground is the state for the next (shellstate_unix.go). Argv
	// must then be [shell, "-c", script] or [shell, "-c", script, $0].
	Shell bool `json:"shell,omitempty"`
	// Reset: the kept shell state is forgotten first.
	Reset bool `json:"reset,omitempty"`
	JobSettings
}

// ExitMsg says how a command ended.
type ExitMsg struct {
	Code     int    `json:"code"` // 128+N when killed by signal N
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"` // it could not start
	// Job: the command still runs, as this job (ExecMsg.YieldAfterMS);
	// Running says so.
	Job     string `json:"job,omitempty"`
	Running bool   `json:"running,omitempty"`
}
