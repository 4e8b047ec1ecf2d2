package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The job tools (SPEC §15): a job is a command of the thread that outlives
// the call that started it — bash run_in_background, or a foreground
// command past yield_after. The sandbox (its supervisor) owns the jobs;
// these tools read, feed and signal them by id. Every answer that shows
// output ends with the job's state line:
//
//	[job J running; next offset N]
//	[job J exited with code C; next offset N]
const (
	// jobStartGlimpse: run_in_background shows the output of the job's
	// first moments (a dev server's banner, an immediate error).
	jobStartGlimpse = 200 * time.Millisecond
	// jobInputGlimpse: bash_input shows the output of the moments after
	// the input (the next prompt, a REPL's answer).
	jobInputGlimpse = 300 * time.Millisecond
	// jobWaitMax bounds bash_output's wait.
	jobWaitMax = 60
	// jobKillWait: bash_kill waits this long for the job to end.
	jobKillWait = 5 * time.Second
	// bashDefaultYield: a foreground command still running then goes on as
	// a job, within the 60 s request timeout of most clients.
	bashDefaultYield = 50
)

// jobID is the form of a job's id; anything else is refused before it
// reaches the sandbox.
var jobID = regexp.MustCompile(`^j[1-9][0-9]{0,9}$`)

func jobsOf(env *Env) (sandbox.Jobs, error) {
	j, ok := env.Sandbox.(sandbox.Jobs)
	if !ok {
		return nil, errors.New("this sandbox keeps no jobs: commands run in the foreground only")
	}
	return j, nil
}

func checkJobID(id string) error {
	if !jobID.MatchString(id) {
		return fmt.Errorf("job %q: not a job id (j1, j2, …; bash_output without job lists the thread's jobs)", cutHeadOnly(id, 40))
	}
	return nil
}

func cutHeadOnly(s string, n int) string { h, _ := cutHead(s, n); return h }

// jobError words a sandbox's job error for the agent.
func jobError(ctx context.Context, env *Env, id string, err error) *Result {
	switch {
	case errors.Is(err, sandbox.ErrNoJob):
		// Its log outlives it, in the thread's files: a job the sandbox
		// does not know but whose log is there ran in an earlier life of
		// the sandbox (job ids are not reused), or ended long ago.
		if _, serr := env.Sandbox.FS().Stat(ctx, logPath(id)); serr == nil {
			return failf("job %s no longer runs here: its sandbox was ended since it started (released, removed or restarted), which killed it, or it ended long ago and was forgotten; its output is in %s", id, logPath(id))
		}
		return failf("no job %s in this thread (bash_output without job lists them)", id)
	case errors.Is(err, sandbox.ErrJobNoInput):
		return failf("job %s takes no input: only a job started with run_in_background has a stdin", id)
	case errors.Is(err, sandbox.ErrJobEnded):
		return failf("job %s has ended: it takes no input and no signal", id)
	}
	return fail(err)
}

// logPath is where a job's whole output is kept.
func logPath(id string) string { return sandbox.JobLogDir + "/" + id + ".log" }

// stateLine is a job's state line.
func stateLine(j sandbox.JobInfo, next int64) string {
	if j.State == sandbox.JobRunning {
		return fmt.Sprintf("[job %s running; next offset %d]", j.ID, next)
	}
	return fmt.Sprintf("[job %s exited with code %d; next offset %d]", j.ID, j.Code, next)
}

// endNote says how an ended job ended, when a signal ended it.
func endNote(j sandbox.JobInfo) string {
	if j.State == sandbox.JobKilled && j.Signal != "" {
		return fmt.Sprintf("[job %s was killed by SIG%s]\n", j.ID, j.Signal)
	}
	return ""
}

// jobRead is output read from a job, to show: its raw bytes in order
// (bounded: the oldest dropped past jobReadMax, with a notice in their
// place, as for a gap between two reads), what was no longer in memory
// before it, the job's state and the next offset.
type jobRead struct {
	id      string
	buf     []byte
	started bool
	from    int64 // offset of buf's first character
	dropped int64 // characters before from no longer in memory
	job     sandbox.JobInfo
	next    int64
}

// jobReadMax bounds what one answer holds of a job's output before it is
// cut to the bash output limit (head and tail).
const jobReadMax = 2 << 20

// add appends one read.
func (jr *jobRead) add(o sandbox.JobOutput) {
	if !jr.started {
		jr.started, jr.from, jr.dropped, jr.next = true, o.Offset, o.Dropped, o.Offset
	}
	if o.Offset > jr.next {
		jr.buf = fmt.Appendf(jr.buf, "\n[... %d characters not shown here (read by another call of the thread, or no longer in memory); the whole output is in %s ...]\n", o.Offset-jr.next, logPath(jr.id))
	}
	jr.buf = append(jr.buf, o.Data...)
	if over := len(jr.buf) - jobReadMax; over > 0 {
		cut := over
		for cut < len(jr.buf) && !utf8.RuneStart(jr.buf[cut]) {
			cut++
		}
		jr.buf = fmt.Appendf(nil, "[... %d bytes of output not shown; the whole output is in %s ...]\n%s", cut, logPath(jr.id), jr.buf[cut:])
	}
	jr.job, jr.next = o.Job, max(jr.next, o.NextOffset)
}

// withContext readies a read that starts inside the output for masking:
// a host path the start cut through is masked only whole, so the path
// characters just before it (read again, up to maskMargin) are put back
// in front — only when the path they make with what follows is masked
// differently from the two parts (a host path spans the cut), so that
// nothing else is shown twice. Output that came since the first read
// comes with it (the second read moved the job's "shown" mark past it).
// What a read shows of a host path's start at its own end (the rest not
// printed yet) is not masked: in host-bash mode only, where masking is
// cosmetic (the command can print any host path encoded).
func (jr *jobRead) withContext(ctx context.Context, jobs sandbox.Jobs, mask func(string) string) {
	if !jr.started || jr.from == 0 || len(jr.buf) == 0 || mask == nil || !pathChar(jr.buf[0]) {
		return // no path can span the cut: no second read
	}
	c, err := jobs.JobOutput(ctx, jr.id, max(jr.from-maskMargin, 0), 0)
	if err != nil || c.Offset > jr.from {
		return
	}
	start := charIndex(c.Data, jr.from-c.Offset)
	s := start
	for s > 0 && start-s < maskMargin && pathChar(c.Data[s-1]) {
		s--
	}
	end := start
	for end < len(c.Data) && end-start < maskMargin && pathChar(c.Data[end]) {
		end++
	}
	if before, after := string(c.Data[s:start]), string(c.Data[start:end]); before != "" && mask(before+after) != mask(before)+mask(after) {
		jr.buf = append([]byte(before), jr.buf...)
	}
	if c.NextOffset > jr.next {
		jr.buf = append(jr.buf, c.Data[charIndex(c.Data, jr.next-c.Offset):]...)
		jr.job, jr.next = c.Job, c.NextOffset
	}
}

// charIndex is the byte index of character n of b (offsets count bytes
// that start a UTF-8 sequence), or len(b).
func charIndex(b []byte, n int64) int {
	for i, c := range b {
		if utf8.RuneStart(c) {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return len(b)
}

// text renders the read: masked, its middle cut past the bash output
// limit (the notice names the job's log, which keeps it whole), what was
// no longer in memory said first, then the state line.
func (jr *jobRead) text(env *Env) (string, *jobFacts) {
	limit := env.Limits.BashOutputMaxChars
	c := outputCapture(limit)
	c.Write(jr.buf)
	var b strings.Builder
	if jr.dropped > 0 {
		fmt.Fprintf(&b, "[... %d characters of output before offset %d are no longer kept in memory; the whole output is in %s ...]\n",
			jr.dropped, jr.from, logPath(jr.id))
	}
	body, truncated := bashOutput(c, limit, env.Mask, "")
	if truncated {
		body, _ = bashOutput(c, limit, env.Mask, logPath(jr.id))
	}
	b.WriteString(body)
	if body != "" && !strings.HasSuffix(body, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(endNote(jr.job))
	b.WriteString(stateLine(jr.job, jr.next))
	next := jr.next
	facts := &jobFacts{Job: jr.job.ID, NextOffset: &next, Truncated: truncated || jr.dropped > 0}
	facts.State, facts.ExitCode, facts.Signal = jobState(jr.job)
	if facts.Truncated {
		facts.Saved = savedAt(logPath(jr.id))
	}
	return b.String(), facts
}

// readJobOutput reads a job's output from offset (or what was not shown)
// with wait; with until, also — while the job runs — what it prints up to
// then (two reads more at most: one that waits for output, one at until).
// The read is ready to show (withContext).
func readJobOutput(ctx context.Context, env *Env, jobs sandbox.Jobs, id string, offset int64, wait time.Duration, until time.Time) (*jobRead, error) {
	mask := env.Mask
	jr := &jobRead{id: id}
	o, err := jobs.JobOutput(ctx, id, offset, wait)
	if err != nil {
		return nil, err
	}
	jr.add(o)
	// More reads only while the job runs and what was read is not already
	// far more than an answer shows (head and tail of a long output).
	running := func() bool {
		return jr.job.State == sandbox.JobRunning && ctx.Err() == nil && len(jr.buf) < jobReadMax/2
	}
	if left := time.Until(until); !until.IsZero() && left > 0 && running() {
		if o, err := jobs.JobOutput(ctx, id, sandbox.Unshown, left); err == nil {
			jr.add(o)
			if left := time.Until(until); left > 0 && running() {
				select {
				case <-time.After(left):
				case <-ctx.Done():
				}
			}
			if running() {
				if o, err := jobs.JobOutput(ctx, id, sandbox.Unshown, 0); err == nil {
					jr.add(o)
				}
			}
		}
	}
	jr.withContext(context.WithoutCancel(ctx), jobs, mask)
	return jr, nil
}

// startJob is bash with run_in_background.
func startJob(ctx context.Context, env *Env, command string) *Result {
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	info, err := jobs.StartJob(ctx, sandbox.JobRequest{Command: command, Stdin: true, Shell: true, JobLimits: env.jobLimits()})
	if err != nil {
		if errors.Is(err, sandbox.ErrJobLimit) {
			return failf("%v: wait for one to end, or stop one with bash_kill (bash_output without job lists them)", err)
		}
		return fail(err)
	}
	jr, err := readJobOutput(ctx, env, jobs, info.ID, sandbox.Unshown, jobStartGlimpse, time.Now().Add(jobStartGlimpse))
	if err != nil {
		// It started: say so, whatever reading its first output did.
		r := text(fmt.Sprintf("[job %s started]", info.ID))
		r.StructuredContent = &bashFacts{Job: info.ID, State: "running"}
		return r
	}
	body, jf := jr.text(env)
	// "started" replaces the state line of a job that still runs, and
	// comes before that of one that ended already.
	end := stateLine(jr.job, jr.next)
	if jr.job.State != sandbox.JobRunning {
		end = endNote(jr.job) + end
	}
	body = strings.TrimSuffix(body, end) + fmt.Sprintf("[job %s started]", info.ID)
	if jr.job.State != sandbox.JobRunning {
		body += "\n" + end
	}
	return structured(body, jf.Truncated, &bashFacts{Job: jf.Job, State: jf.State, ExitCode: jf.ExitCode, Truncated: jf.Truncated, Saved: jf.Saved})
}

func (env *Env) jobLimits() sandbox.JobLimits {
	return sandbox.JobLimits{MaxJobs: env.Limits.JobsMax, LogMaxBytes: spillFileMax, SavedMaxFiles: spillKeepFiles, SavedMaxBytes: spillKeepBytes}
}

// jobFacts is the structured content of bash_output, bash_input and
// bash_kill: one job's state, or (bash_output without job) every job's.
type jobFacts struct {
	Job        string `json:"job,omitempty" jsonschema_description:"The job read."`
	State      string `json:"state,omitempty" jsonschema:"enum=running,enum=exited,enum=killed" jsonschema_description:"running; exited (its exit code); or killed (by the signal)."`
	ExitCode   *int   `json:"exit_code,omitempty" jsonschema_description:"Its exit code, once it ended (128+N when signal N ended it)."`
	Signal     string `json:"signal,omitempty" jsonschema_description:"The signal that ended it (TERM, KILL, …)."`
	NextOffset *int64 `json:"next_offset,omitempty" jsonschema_description:"The offset of the output not read yet (bash_output's offset argument)."`
	Truncated  bool   `json:"truncated,omitempty" jsonschema_description:"The output shown was cut; the job's log keeps it whole."`
	Saved
	Screen *screenFacts `json:"screen,omitempty" jsonschema_description:"A terminal job's screen as shown (unless raw)."`
	Jobs   *[]jobEntry  `json:"jobs,omitempty" jsonschema_description:"Every job of the thread (bash_output without job)."`
}

type jobEntry struct {
	Job      string `json:"job"`
	State    string `json:"state" jsonschema:"enum=running,enum=exited,enum=killed"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Command  string `json:"command" jsonschema_description:"The command's first 200 bytes."`
	TTY      string `json:"tty,omitempty" jsonschema_description:"A terminal job's terminal size, CxR."`
}

// jobState is a job's state as its facts say it.
func jobState(j sandbox.JobInfo) (state string, code *int, signal string) {
	switch j.State {
	case sandbox.JobRunning:
		return "running", nil, ""
	case sandbox.JobKilled:
		if j.Signal != "" {
			c := j.Code
			return "killed", &c, j.Signal
		}
	}
	c := j.Code
	return "exited", &c, ""
}
