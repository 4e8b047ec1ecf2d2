package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const (
	bashDefaultTimeout = 120 * time.Second
	// bashTimeoutCeiling bounds a timeout even when bash_timeout_max is 0.
	bashTimeoutCeiling = 24 * time.Hour
	// maskMargin is kept beyond each end of the bash output so a host path
	// cut by the capture is still whole when the output is masked.
	maskMargin = 4096
	// unlimitedCapture bounds memory when the output limit is 0 (no limit).
	unlimitedCapture = 16 << 20
)

func bashTool() Tool {
	t := newTool("bash", bashArgs{Timeout: bashDefaultTimeout.Seconds(), YieldAfter: bashDefaultYield}, bash,
		mcp.WithDescription("Run a bash command in the sandbox. Calls share one shell: a command starts in the working directory "+
			"and with the exported variables the last one left (first: /mnt/user-data/workspace; reset: true starts afresh). "+
			"Files are under /mnt/user-data/{workspace,uploads,outputs}. stdout and stderr come back interleaved, "+
			"followed by [exit code N], [timed out after Ns] or [killed: out of memory (limit L)]. Long output keeps its head and tail. "+
			"A dev server, watcher or anything meant to keep running: run_in_background: true, then bash_output to read it, "+
			"bash_input to answer a prompt, bash_kill to stop it. A long build or test run: let it go; "+
			"past yield_after seconds it continues as a job ([still running as job J]) — poll it with bash_output and wait: 60. "+
			"Something that needs a terminal (vim, top, less, a REPL, git add -p, a prompt that asks for a terminal): tty: true runs it on one, as a job, "+
			"and answers its screen as text (the cursor marked █ in a blank cell; the line under the screen says where it is); type at it with bash_input (key names such as <Enter>, <Esc>, <C-c>, <Up>), "+
			"look again with bash_output."),
		destructive("Run command", true),
		withIcon("terminal"),
		mcp.WithOutputSchema[bashFacts](),
	)
	t.RunsCommands = true
	t.ChangesFiles = true
	return t
}

type bashArgs struct {
	Command         string  `json:"command" arg:"required" jsonschema_description:"The command, run with bash -c."`
	Timeout         float64 `json:"timeout" arg:"exclusiveMinimum=0" jsonschema_description:"Seconds before the command and every process it started are killed (default 120, max 600). A command that became a job has no timeout."`
	Description     string  `json:"description" jsonschema_description:"What the command does, in a few words (for logs)."`
	RunInBackground bool    `json:"run_in_background" jsonschema_description:"Start the command as a job and answer at once ([job J started], with its first 0.2 s of output); it keeps running after the call. Its stdin is open for bash_input."`
	YieldAfter      float64 `json:"yield_after" arg:"minimum=0" jsonschema_description:"Seconds after which a command still running is not killed but goes on as a job, and the call answers what it printed so far (default 50, 0 = never: timeout alone bounds it)."`
	Reset           bool    `json:"reset" jsonschema_description:"Start from a fresh shell: the workspace and the sandbox's own environment, forgetting the directory and exported variables of earlier calls."`
	TTY             bool    `json:"tty" jsonschema_description:"Run the command on a pseudo-terminal (TERM=xterm-256color), as a job: for full-screen and interactive programs (vim, top, a REPL, git add -p). The call answers the terminal's screen once the program settles: its rows as text (the cursor's cell shown as █ where it is blank), then [screen CxR, cursor at row R, col C] (… on \"x\" where it is on a character) and [job J started]. Then bash_input types keys, bash_output shows the screen again, bash_kill ends it."`
	Cols            int     `json:"cols" arg:"minimum=10,maximum=500" jsonschema_description:"The terminal's width in columns, with tty (default 80)."`
	Rows            int     `json:"rows" arg:"minimum=5,maximum=200" jsonschema_description:"The terminal's height in rows, with tty (default 24)."`
}

func bash(ctx context.Context, env *Env, a bashArgs) *Result {
	command := a.Command
	if strings.TrimSpace(command) == "" {
		return failf("command is empty")
	}
	if (a.Cols > 0 || a.Rows > 0) && !a.TTY {
		return failf("cols and rows size a terminal: give tty: true with them")
	}
	if a.TTY {
		if a.Reset {
			return failf("reset applies to a foreground command: run it alone first (bash with reset: true), then start the terminal")
		}
		return startTTY(ctx, env, a)
	}
	if a.RunInBackground {
		if a.Reset {
			return failf("reset applies to a foreground command: run it alone first (bash with reset: true), then start the job")
		}
		return startJob(ctx, env, command)
	}
	timeout := seconds(a.Timeout)
	if max := env.Limits.BashTimeoutMax; max > 0 && timeout > max {
		timeout = max
	}

	limit := env.Limits.BashOutputMaxChars
	out := outputCapture(limit)
	saved := newSpill(ctx, env.Sandbox.FS(), "bash", max(limit, 0))

	done := make(chan struct{})
	defer close(done)
	if env.Progress != nil {
		go reportProgress(env, out, done)
	}
	before := outputsStamp(ctx, env.Sandbox.FS())
	xreq := sandbox.ExecRequest{Command: command, Timeout: timeout, Output: io.MultiWriter(out, saved), Shell: true, ResetState: a.Reset}
	if _, ok := env.Sandbox.(sandbox.Jobs); ok && a.YieldAfter > 0 {
		xreq.YieldAfter = seconds(a.YieldAfter)
		xreq.Jobs = env.jobLimits()
		xreq.Stdin = env.Tasks // a task's updates write to it (tasks.go)
	}
	res, err := env.Sandbox.Exec(ctx, xreq)
	if err != nil {
		saved.Finish(false)
		if ctx.Err() != nil {
			return failf("cancelled: the command and its processes were killed")
		}
		return fail(err)
	}

	body, truncated := bashOutput(out, limit, env.Mask, "")
	facts := &bashFacts{TimedOut: res.TimedOut, Truncated: truncated}
	switch {
	case res.Job != "":
		// The job's log keeps its whole output, this call's part and what
		// comes: the notice names it, not a file that stops here.
		saved.Finish(false)
		facts.Job, facts.State = res.Job, "running"
		if truncated {
			facts.Saved = savedAt(logPath(res.Job))
			body, _ = bashOutput(out, limit, env.Mask, facts.SavedTo)
		}
	default:
		if path := saved.Finish(truncated); path != "" {
			facts.Saved = savedAt(path)
			body, _ = bashOutput(out, limit, env.Mask, path)
		}
	}
	var b strings.Builder
	b.WriteString(body)
	if body != "" && !strings.HasSuffix(body, "\n") {
		b.WriteByte('\n')
	}
	r := &Result{Truncated: truncated, TimedOut: res.TimedOut}
	if outputsStamp(ctx, env.Sandbox.FS()) != before {
		r.Changed = []string{sandbox.OutputsDir}
	}
	switch {
	case res.Job != "":
		fmt.Fprintf(&b, "[still running as job %s]", res.Job)
		if env.Tasks {
			r.Task = res.Job
		}
	case res.TimedOut:
		fmt.Fprintf(&b, "[timed out after %ds]", int((timeout+time.Second-1)/time.Second))
	default:
		code := res.ExitCode
		r.ExitCode, facts.ExitCode = &code, &code
		facts.OOMKilled = res.OOMKills > 0
		switch {
		case res.OOMKills > 0 && code == 128+9:
			// Killed by SIGKILL while the box's OOM killer struck: the
			// kernel's doing, not a crash of the command's own.
			fmt.Fprintf(&b, "[killed: out of memory%s]", memoryLimitText(res.MemoryMax))
		case res.OOMKills > 0:
			fmt.Fprintf(&b, "[exit code %d; a process was killed: out of memory%s]", code, memoryLimitText(res.MemoryMax))
		default:
			fmt.Fprintf(&b, "[exit code %d]", code)
		}
	}
	r.CallToolResult = mcp.NewToolResultText(b.String())
	r.StructuredContent = facts
	return r
}

// seconds is a time argument of bash (in seconds) as a duration: clamped
// in seconds before converting (a huge value would overflow), and at least
// 1 ms (1e-10 s would be 0, which a sandbox reads as none at all).
func seconds(v float64) time.Duration {
	return max(time.Duration(min(v, bashTimeoutCeiling.Seconds())*float64(time.Second)), time.Millisecond)
}

// outputCapture holds a command's output for an answer of at most limit
// characters (0: no limit, in bounded memory): a head and a tail, each
// with room to mask a host path cut at its edge.
func outputCapture(limit int) *sandbox.Capture {
	half := captureHalf(limit)
	return sandbox.NewCapture(half, half)
}

// captureHalf is the bytes outputCapture keeps of each end.
func captureHalf(limit int) int {
	if limit <= 0 {
		return unlimitedCapture / 2
	}
	return limit/2*utf8.UTFMax + maskMargin // limit is in characters
}

// bashOutput is the captured output, masked, with its middle cut out when
// it is longer than limit characters; the notice names savedAt, where the whole
// output was saved, if it was.
func bashOutput(c *sandbox.Capture, limit int, mask func(string) string, savedAt string) (string, bool) {
	if mask == nil {
		mask = func(s string) string { return s }
	}
	head, tail, total := c.Result()
	if total <= int64(len(head)+len(tail)) {
		s := mask(validText(append(head, tail...)))
		if limit <= 0 || utf8.RuneCountInString(s) <= limit {
			return s, false
		}
		// Longer than the limit (in characters): cut the middle.
		mid := len(s) / 2
		for mid > 0 && !utf8.RuneStart(s[mid]) {
			mid--
		}
		head, tail = []byte(s[:mid]), []byte(s[mid:])
	}
	// The raw head ends, and the raw tail starts, in the middle of the
	// output: a host path cut there would not be masked. Drop a partial
	// path at each cut before masking.
	head, tail = trimCutWord(head, false), trimCutWord(tail, true)
	h, t := mask(validText(head)), mask(validText(tail))
	if limit <= 0 {
		limit = unlimitedCapture
	}
	// The notice's own length depends on the count it reports: size the
	// kept parts for the longest notice, then count what they leave out.
	where := ""
	if savedAt != "" {
		where = "; the whole output is in " + savedAt + " (read it with read_file and line ranges)"
	}
	notice := func(n int64) string {
		return fmt.Sprintf("\n[... %d bytes of output truncated%s ...]\n", max(n, 0), where)
	}
	keep := max(limit-utf8.RuneCountInString(notice(total)), 0)
	if keep/2 > 0 {
		h, _ = cutHead(h, keep/2)
	} else {
		h = ""
	}
	t = cutTail(t, max(keep-utf8.RuneCountInString(h), 0))
	h, t = wholeLines(h, t)
	return h + notice(total-int64(len(h)+len(t))) + t, true
}

// wholeLines cuts a head and a tail of an output back to whole lines (the
// head up to the end of its last whole line, the tail from the start of
// its first), so that the notice between them never splits a line — unless
// that would drop more than half of a part (a few very long lines), which
// is then kept as it was.
func wholeLines(h, t string) (string, string) {
	if i := strings.LastIndexByte(h, '\n'); i >= len(h)/2 {
		h = h[:i] // its line break goes with what is left out; the notice begins with one
	}
	if i := strings.IndexByte(t, '\n'); i >= 0 && i < len(t)/2 {
		t = t[i+1:]
	}
	return h, t
}

// reportProgress sends a progress notification about once a second: the
// elapsed seconds, and the latest output line as the message.
func reportProgress(env *Env, out *sandbox.Capture, done <-chan struct{}) {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			env.Progress(time.Since(start).Seconds(), progressLine(out, env.Mask))
		}
	}
}

// progressMax is the most characters of output a progress message shows.
const progressMax = 200

// progressLine is the latest non-empty line of the output, masked whole
// and only then cut to its last progressMax characters: a host path cut
// first would not be masked. Where the capture itself dropped the line's
// start, a partial path there is dropped too.
func progressLine(c *sandbox.Capture, mask func(string) string) string {
	keep := progressMax*utf8.UTFMax + maskMargin
	buf, cut := c.Last(keep + 2) // room for a trailing line break
	buf = bytes.TrimRight(buf, "\r\n")
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf, cut = buf[i+1:], false
	}
	if len(buf) > keep {
		buf, cut = buf[len(buf)-keep:], true
	}
	if cut {
		buf = trimCutWord(buf, true)
	}
	s := validText(buf)
	if mask != nil {
		s = mask(s)
	}
	return cutTail(s, progressMax)
}

// outputsStamp is the modification time of the outputs directory, which
// changes when a command adds or removes an entry there.
func outputsStamp(ctx context.Context, fsys sandbox.FS) time.Time {
	fi, err := fsys.Stat(ctx, sandbox.OutputsDir)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// trimCutWord drops a partial path at a cut: the trailing run of path
// characters at the end of a head, or the leading one at the start of a
// tail (atStart), when that run holds a slash. A host path cut there would
// not be masked whole; other text (even base64) is kept.
func trimCutWord(b []byte, atStart bool) []byte {
	if atStart {
		i := 0
		for i < len(b) && i < maskMargin && pathChar(b[i]) {
			i++
		}
		if bytes.IndexByte(b[:i], '/') >= 0 {
			return b[i:]
		}
		return b
	}
	i := len(b)
	for i > 0 && i > len(b)-maskMargin && pathChar(b[i-1]) {
		i--
	}
	if bytes.IndexByte(b[i:], '/') >= 0 {
		return b[:i]
	}
	return b
}

func pathChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80 ||
		strings.IndexByte("/._-~+@", c) >= 0
}

// bashFacts is bash's structured content.
type bashFacts struct {
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema_description:"The command's exit code; absent when it timed out or goes on as a job."`
	TimedOut  bool   `json:"timed_out" jsonschema_description:"The timeout killed the command and every process it started."`
	Job       string `json:"job,omitempty" jsonschema_description:"The job the command runs as (run_in_background, or past yield_after): read it with bash_output."`
	State     string `json:"state,omitempty" jsonschema:"enum=running,enum=exited,enum=killed" jsonschema_description:"The job's state, when the command runs as a job."`
	Truncated bool   `json:"truncated" jsonschema_description:"The output shown was cut (its middle left out)."`
	OOMKilled bool   `json:"oom_killed,omitempty" jsonschema_description:"The kernel's OOM killer took a process of the sandbox while the command ran (the sandbox's memory limit was reached)."`
	Saved
	Screen *screenFacts `json:"screen,omitempty" jsonschema_description:"The terminal's screen as shown (tty: true)."`
}

// memoryLimitText names a memory limit in an OOM report: " (limit 4g)";
// "" when none is known.
func memoryLimitText(max int64) string {
	if max <= 0 {
		return ""
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if max%u.size == 0 {
			return fmt.Sprintf(" (limit %d%s)", max/u.size, u.suffix)
		}
	}
	return " (limit " + formatBytes(max) + ")"
}
