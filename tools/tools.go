package tools

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
)

// Limits are the tools' limits (SPEC §6): the configuration's limits
// section as it is, each field's yaml tag its key there, declared once.
// DefaultLimits are the defaults; 0 is no limit. A new limit is one field
// (and its default).
type Limits struct {
	BashOutputMaxChars     int           `yaml:"bash_output_max_chars"`
	ReadFileOutputMaxChars int           `yaml:"read_file_output_max_chars"`
	LsOutputMaxChars       int           `yaml:"ls_output_max_chars"`
	BashTimeoutMax         time.Duration `yaml:"bash_timeout_max"` // in the configuration, a plain number is seconds
	GrepMaxFileBytes       int64         `yaml:"grep_max_file_bytes"`
	// ReadFileMaxScanBytes bounds the bytes one read_file reads to find
	// its lines: a line range far into a huge (or sparse) file is not
	// worth gigabytes of reading.
	ReadFileMaxScanBytes int64 `yaml:"read_file_max_scan_bytes"`
	// JobsMax bounds the jobs running per thread (SPEC §15), at most
	// MaxJobs; 0: the sandbox's own cap.
	JobsMax int `yaml:"jobs_max"`
}

// MaxJobs is the most JobsMax may be: the supervisor's own cap.
const MaxJobs = 256

// Validate refuses a negative limit, and more than MaxJobs jobs, naming
// the key (limits.KEY).
func (l Limits) Validate() error {
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		n := v.Field(i).Int()
		if n >= 0 {
			continue
		}
		val := strconv.FormatInt(n, 10)
		if f.Type == reflect.TypeFor[time.Duration]() {
			val = strconv.FormatFloat(time.Duration(n).Seconds(), 'f', -1, 64)
		}
		return fmt.Errorf("limits.%s %s: want 0 (no limit) or more", key, val)
	}
	if l.JobsMax > MaxJobs {
		return fmt.Errorf("limits.jobs_max %d: at most %d (0: %d)", l.JobsMax, MaxJobs, MaxJobs)
	}
	return nil
}

// DefaultLimits are the limits of SPEC §6.
func DefaultLimits() Limits {
	return Limits{
		BashOutputMaxChars:     20000,
		ReadFileOutputMaxChars: 50000,
		LsOutputMaxChars:       20000,
		BashTimeoutMax:         600 * time.Second,
		GrepMaxFileBytes:       10 << 20,
		ReadFileMaxScanBytes:   sandbox.EditMaxBytes,
		JobsMax:                16,
	}
}

// Env is what a handler works with: the session's sandbox and the server's
// settings.
type Env struct {
	Sandbox sandbox.Sandbox
	Limits  Limits
	// Mask rewrites host paths to virtual ones. The server masks every
	// result anyway; bash needs it before cutting its output.
	Mask func(string) string
	// Progress, when the client asked for progress, reports how a long call
	// is going.
	Progress func(progress float64, message string)
	// Previews serves the URLs of the sandbox's ports (expose_port); nil:
	// this server serves none.
	Previews Previews
	// Network is the sandboxes' network policy (sandbox_info tells it).
	Network Network
	// Tasks: the caller takes an MCP task for a command still running at
	// yield_after (SPEC §20): bash gives the command a stdin the task's
	// updates write to, and its result names the task (Result.Task).
	Tasks bool
	// Terminals caches the screens of terminal jobs (bash tty: true) for
	// the server's calls; nil: each call rebuilds the screen it shows from
	// the job's kept output.
	Terminals *terminal.Screens
	// CheckpointMaxBytes bounds the thread's checkpoints: after a save the
	// oldest are pruned until the store holds at most this many bytes
	// (checkpoints.max_bytes; 0: no bound).
	CheckpointMaxBytes int64
}

// Previews opens and closes the URLs that reach ports listening inside the
// call's sandbox (expose_port, SPEC §17). The server gives each call one
// bound to the call's thread and sandbox, and to the transport the call
// came by (the URL is the HTTP server's, or a loopback listener's under
// stdio).
type Previews interface {
	// Open answers the URL of the port: the same one while the port stays
	// exposed in the same box. ErrTooManyPorts past the thread's cap.
	Open(ctx context.Context, port int) (url string, err error)
	// Close ends the port's URL; ErrNotExposed when it has none.
	Close(ctx context.Context, port int) error
	// List answers the thread's exposed ports, by port.
	List(ctx context.Context) ([]ExposedPort, error)
}

// Errors of Previews.
var (
	ErrNotExposed   = errors.New("not exposed")
	ErrTooManyPorts = errors.New("too many exposed ports")
)

// Result is a tool's result with what the audit log needs to know of it.
type Result struct {
	*mcp.CallToolResult
	Denied    bool // refused by policy: a path outside, a read-only mount, bash off
	TimedOut  bool
	ExitCode  *int
	Truncated bool
	// Changed lists virtual paths the call wrote (a directory: something
	// below it), so the server can tell clients whose resources changed.
	Changed []string
	// Task: the call goes on as this task, its job's id (Env.Tasks): the
	// server answers the task, the text being §15's for the audit log.
	Task string
}

// Tool is one tool: its MCP definition and its handler (newTool makes
// both, the input schema from the struct the handler's arguments are read
// into).
type Tool struct {
	Def mcp.Tool
	// RunsCommands: the tool runs commands in the sandbox (bash), so it is
	// not offered when the provider runs none.
	RunsCommands bool
	// ChangesFiles: the tool may change the thread's files (write_file,
	// str_replace, bash, bash_input, restore): the server takes an automatic
	// checkpoint before it when anything changed since the last one
	// (checkpoints.auto, SPEC §18).
	ChangesFiles bool
	// Exclusive: the tool runs alone among the thread's calls that may
	// change files (restore): the server lets those in flight end first
	// and holds new ones off until it ends, so that no write lands between
	// the restore's undo checkpoint and its writes (and is lost to both).
	Exclusive bool
	// UsesCheckpoints: the tool lists, compares or restores checkpoints:
	// the server lets the automatic checkpoint of the call before it end
	// first.
	UsesCheckpoints bool
	Handle          func(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result
}

// All lists the tools in the order they are offered.
func All() []Tool {
	return []Tool{bashTool(), lsTool(), globTool(), grepTool(), readFileTool(), writeFileTool(), strReplaceTool(),
		bashOutputTool(), bashInputTool(), bashKillTool(), exposePortTool(), sandboxInfoTool(),
		checkpointTool(), checkpointsTool(), diffTool(), restoreTool()}
}

func text(s string) *Result {
	return &Result{CallToolResult: mcp.NewToolResultText(s)}
}

// structured is a result of text and facts (structuredContent).
func structured(s string, truncated bool, facts any) *Result {
	r := text(s)
	r.StructuredContent = facts
	r.Truncated = truncated
	return r
}

// fail turns an error into a tool error result: one line "Error: ...".
func fail(err error) *Result {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	r := &Result{CallToolResult: mcp.NewToolResultError("Error: " + msg)}
	r.Denied = errors.Is(err, sandbox.ErrOutsideRoot) || errors.Is(err, sandbox.ErrReadOnly) || errors.Is(err, sandbox.ErrBashDisabled)
	return r
}

func failf(format string, args ...any) *Result { return fail(fmt.Errorf(format, args...)) }

// readOnly and destructive set a tool's annotations.
func readOnly(title string) mcp.ToolOption {
	return mcp.WithToolAnnotation(mcp.ToolAnnotation{
		Title:           title,
		ReadOnlyHint:    mcp.ToBoolPtr(true),
		DestructiveHint: mcp.ToBoolPtr(false),
		IdempotentHint:  mcp.ToBoolPtr(true),
		OpenWorldHint:   mcp.ToBoolPtr(false),
	})
}

func destructive(title string, openWorld bool) mcp.ToolOption {
	return mcp.WithToolAnnotation(mcp.ToolAnnotation{
		Title:           title,
		ReadOnlyHint:    mcp.ToBoolPtr(false),
		DestructiveHint: mcp.ToBoolPtr(true),
		IdempotentHint:  mcp.ToBoolPtr(false),
		OpenWorldHint:   mcp.ToBoolPtr(openWorld),
	})
}

// cutHead keeps at most max characters (runes) of s; 0 keeps all. The
// limits are in characters (SPEC: *_max_chars), whatever their size in
// bytes.
func cutHead(s string, max int) (string, bool) {
	if max <= 0 || len(s) <= max {
		return s, false
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i], true
		}
		n++
	}
	return s, false
}

// cutTail keeps at most the last max characters of s.
func cutTail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := len(s)
	for n := 0; n < max && i > 0; n++ {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}

// validText replaces invalid UTF-8.
func validText(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
