package tools

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
)

// Terminal jobs (SPEC §20): bash tty: true runs a command on a
// pseudo-terminal, as a job; bash_output, bash_input and bash_kill of such
// a job answer its screen — what the program drew, rendered from its raw
// output by package terminal — instead of its output, which bash_output
// raw: true still pages by offset. bash_input reads key names (<Enter>,
// <C-c>, <Up>) in a terminal job's input, and its cols and rows resize
// the terminal. A screen answer is the screen's rows (the cursor's cell
// shown as █ where it is blank: terminal.Cursor), then
//
//	[screen 80x24, cursor at row R, col C]
//	[job J running; next offset N]
//
// (next offset: of the raw output). The server keeps each job's screen
// (Env.Terminals) and draws on it only what the job printed since; where
// it has none, the screen is rebuilt from the output the sandbox still
// keeps (its last MiB), said in a line above it when the start is gone.
const (
	ttyDefaultCols, ttyDefaultRows = 80, 24
	// ttyQuiet: a screen is taken as drawn once its program has printed
	// nothing for this long.
	ttyQuiet = 300 * time.Millisecond
	// ttyEscQuiet is ttyQuiet after input that ends with a lone Esc: a
	// program waits to see whether it starts a key's sequence before it
	// takes it as Esc (vim's timeoutlen, 1 s where vim is compatible
	// (vim-tiny); readline's keyseq-timeout, 0.5 s).
	ttyEscQuiet = 1200 * time.Millisecond
	// ttySettle bounds the wait for that after a start, an input or the
	// first output bash_output waited for.
	ttySettle = 3 * time.Second
	// ttyInputWait: bash_input waits this long for the program to answer
	// what was typed (most keys draw something: an echo, a cursor's move).
	ttyInputWait = time.Second
	// ttyReads bounds the reads of one drawing (each at most a MiB): a
	// program that prints without end is drawn as far as it got.
	ttyReads = 64
)

// jobInfo is the job's state, from the list of the thread's jobs (the
// sandbox says which are on a terminal); known is false for a job the
// sandbox does not list.
func jobInfo(ctx context.Context, jobs sandbox.Jobs, id string) (info sandbox.JobInfo, known bool, err error) {
	list, err := jobs.Jobs(ctx)
	if err != nil {
		return sandbox.JobInfo{}, false, err
	}
	for _, j := range list {
		if j.ID == id {
			return j, true, nil
		}
	}
	return sandbox.JobInfo{}, false, nil
}

// ttyView is a terminal job's screen, held for one call.
type ttyView struct {
	jobs    sandbox.Jobs
	term    *terminal.Term
	release func()
	job     sandbox.JobInfo
	// rebuilt: characters of the output's start that were no longer kept
	// when this call drew them (a screen rebuilt, or one that fell behind).
	rebuilt int64
}

// openTTY holds the screen of the terminal job info.
func openTTY(env *Env, jobs sandbox.Jobs, info sandbox.JobInfo) *ttyView {
	cols, rows := ttyDefaultCols, ttyDefaultRows
	if info.TTY != nil {
		cols, rows = info.TTY.Cols, info.TTY.Rows
	}
	// The job's id within its thread, and its pid: a sandbox started
	// anew may hand out its ids again (without a log directory).
	key := env.Sandbox.Thread() + "\x00" + info.ID + "\x00" + strconv.Itoa(info.PID)
	t, release := env.Terminals.Open(key, cols, rows)
	return &ttyView{jobs: jobs, term: t, release: release, job: info}
}

func (v *ttyView) close() { v.release() }

// draw draws what the job printed since the screen was last drawn: with
// wait, first waiting that long for something new (or the job's end);
// with settle, then until the job has printed nothing for quiet
// (ttyQuiet when 0), for at most settle (or until it ends). A read that
// brings nothing ends it.
func (v *ttyView) draw(ctx context.Context, wait, settle, quiet time.Duration) error {
	if quiet <= 0 {
		quiet = ttyQuiet
	}
	var until time.Time
	for i := 0; i < ttyReads && ctx.Err() == nil; i++ {
		w := time.Duration(0)
		switch {
		case i == 0 && wait > 0:
			w = wait
		case settle > 0 && v.job.State == sandbox.JobRunning:
			if until.IsZero() {
				until = time.Now().Add(settle)
			}
			w = min(quiet, max(time.Until(until), 0))
		}
		o, err := v.jobs.JobOutput(ctx, v.job.ID, v.term.Next, w)
		if err != nil {
			return err
		}
		v.feed(o)
		if len(o.Data) == 0 {
			return nil // up to date: quiet, the wait over, or the job ended
		}
	}
	return nil
}

// feed draws one read of the job's output.
func (v *ttyView) feed(o sandbox.JobOutput) {
	v.job = o.Job
	if sz := o.Job.TTY; sz != nil {
		v.term.Screen.Resize(sz.Cols, sz.Rows) // a resize another call made
	}
	if o.Dropped > 0 {
		v.rebuilt = max(v.rebuilt, o.Offset)
	}
	v.term.Screen.Write(o.Data)
	v.term.Next = max(v.term.Next, o.NextOffset)
}

// screenFacts is a screen answer's structured part.
type screenFacts struct {
	Cols         int  `json:"cols" jsonschema_description:"The terminal's width."`
	Rows         int  `json:"rows" jsonschema_description:"The terminal's height."`
	CursorRow    int  `json:"cursor_row" jsonschema_description:"The cursor's row, from 1."`
	CursorCol    int  `json:"cursor_col" jsonschema_description:"The cursor's column, from 1."`
	CursorHidden bool `json:"cursor_hidden,omitempty" jsonschema_description:"The program hid the cursor."`
}

// text is the screen answer: a line about a rebuilt screen's lost start,
// the screen (masked; its middle rows left out past the output limit),
// then the job's end, if it ended, and its state line.
func (v *ttyView) text(env *Env) (string, *jobFacts) {
	snap := v.term.Screen.Snapshot()
	var b strings.Builder
	if v.rebuilt > 0 {
		fmt.Fprintf(&b, "[the screen is drawn from the job's output after its first %d characters, which are no longer kept: what the program drew before them and not since is missing]\n", v.rebuilt)
	}
	screen, cut := limitScreen(snap.Text(env.Mask), env.Limits.BashOutputMaxChars)
	b.WriteString(screen)
	b.WriteByte('\n')
	b.WriteString(endNote(v.job))
	b.WriteString(stateLine(v.job, v.term.Next))
	next := v.term.Next
	facts := &jobFacts{Job: v.job.ID, NextOffset: &next, Truncated: cut,
		Screen: &screenFacts{Cols: snap.Cols, Rows: snap.Rows, CursorRow: snap.Row + 1, CursorCol: snap.Col + 1, CursorHidden: snap.Hidden}}
	facts.State, facts.ExitCode, facts.Signal = jobState(v.job)
	return b.String(), facts
}

// result is the screen answer as a tool result.
func (v *ttyView) result(env *Env) *Result {
	body, facts := v.text(env)
	return structured(body, facts.Truncated, facts)
}

// limitScreen leaves out middle rows of a screen longer than limit
// characters (0: no limit), with a line saying so; the line under the
// screen (its last) is always kept.
func limitScreen(s string, limit int) (string, bool) {
	if limit <= 0 || utf8.RuneCountInString(s) <= limit {
		return s, false
	}
	rows := strings.Split(s, "\n")
	status := rows[len(rows)-1]
	rows = rows[:len(rows)-1]
	budget := max(limit-utf8.RuneCountInString(status)-200, 0) // 200: room for the note
	size := func(r string) int { return utf8.RuneCountInString(r) + 1 }
	h, t, used := 0, len(rows), 0 // rows[:h] and rows[t:] are shown
	for h < t && used+size(rows[h]) <= budget/2 {
		used += size(rows[h])
		h++
	}
	for t > h && used+size(rows[t-1]) <= budget {
		used += size(rows[t-1])
		t--
	}
	note := fmt.Sprintf("[... %d rows of the screen not shown: it is larger than the output limit (bash_input cols and rows make it smaller) ...]", t-h)
	out := append(append(append(rows[:h:h], note), rows[t:]...), status)
	return strings.Join(out, "\n"), true
}

// startTTY is bash with tty: the command starts as a job on a terminal,
// and the call answers its first screen.
func startTTY(ctx context.Context, env *Env, a bashArgs) *Result {
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	size := sandbox.TermSize{Cols: ttyDefaultCols, Rows: ttyDefaultRows}
	if a.Cols > 0 {
		size.Cols = a.Cols
	}
	if a.Rows > 0 {
		size.Rows = a.Rows
	}
	info, err := jobs.StartJob(ctx, sandbox.JobRequest{Command: a.Command, Shell: true, TTY: &size, JobLimits: env.jobLimits()})
	if err != nil {
		if errors.Is(err, sandbox.ErrJobLimit) {
			return failf("%v: wait for one to end, or stop one with bash_kill (bash_output without job lists them)", err)
		}
		return fail(err)
	}
	if info.TTY == nil {
		info.TTY = &size
	}
	settle := ttySettle
	if a.YieldAfter > 0 {
		settle = min(settle, seconds(a.YieldAfter))
	}
	v := openTTY(env, jobs, info)
	defer v.close()
	started := fmt.Sprintf("[job %s started]", info.ID)
	if err := v.draw(ctx, settle, settle, 0); err != nil {
		// It started: say so, whatever drawing its screen did.
		r := text(started)
		r.StructuredContent = &bashFacts{Job: info.ID, State: "running"}
		return r
	}
	body, jf := v.text(env)
	// "started" replaces the state line of a job that still runs, and
	// comes before that of one that ended already (as run_in_background).
	end := stateLine(v.job, v.term.Next)
	if v.job.State != sandbox.JobRunning {
		end = endNote(v.job) + end
	}
	body = strings.TrimSuffix(body, end) + started
	if v.job.State != sandbox.JobRunning {
		body += "\n" + end
	}
	return structured(body, jf.Truncated, &bashFacts{Job: jf.Job, State: jf.State, ExitCode: jf.ExitCode, Truncated: jf.Truncated, Screen: jf.Screen})
}

// ttyOutput is bash_output of a terminal job: its screen, drawn up to
// date — with wait, once it changed (or the job ended), then settled.
func ttyOutput(ctx context.Context, env *Env, jobs sandbox.Jobs, info sandbox.JobInfo, wait time.Duration) *Result {
	v := openTTY(env, jobs, info)
	defer v.close()
	settle := time.Duration(0)
	if wait > 0 {
		settle = ttySettle
	}
	if err := v.draw(ctx, wait, settle, 0); err != nil {
		if ctx.Err() != nil {
			return failf("cancelled: the wait ended; job %s goes on", info.ID)
		}
		return jobError(ctx, env, info.ID, err)
	}
	return v.result(env)
}

// ttyInput is bash_input of a terminal job: keys typed (key names read
// in the terminal's cursor-key mode, that of the screen drawn up to
// date), the terminal resized, then the screen once it settled.
func ttyInput(ctx context.Context, env *Env, jobs sandbox.Jobs, info sandbox.JobInfo, a bashInputArgs) *Result {
	v := openTTY(env, jobs, info)
	defer v.close()
	if err := v.draw(ctx, 0, 0, 0); err != nil {
		return jobError(ctx, env, info.ID, err)
	}
	data, err := v.term.Screen.Keys(a.Input)
	if err != nil {
		return fail(err)
	}
	if len(data) > maxJobInput {
		return failf("input is %d bytes (its keys as sent): at most %d in one call", len(data), maxJobInput)
	}
	if a.Cols > 0 || a.Rows > 0 {
		size := *v.job.TTY
		if a.Cols > 0 {
			size.Cols = a.Cols
		}
		if a.Rows > 0 {
			size.Rows = a.Rows
		}
		j, err := jobs.ResizeJob(ctx, info.ID, size)
		if err != nil {
			return jobError(ctx, env, info.ID, err)
		}
		v.job = j
		v.term.Screen.Resize(size.Cols, size.Rows)
	}
	if len(data) > 0 || a.Close {
		if _, err := jobs.JobInput(ctx, info.ID, data, a.Close); err != nil {
			if errors.Is(err, sandbox.ErrJobBlocked) {
				return failf("job %s is not reading its input: nothing was written (it may be busy; try again, or bash_output to see its screen)", info.ID)
			}
			return jobError(ctx, env, info.ID, err)
		}
	}
	quiet := time.Duration(0)
	if len(data) > 0 && data[len(data)-1] == 0x1b {
		quiet = ttyEscQuiet
	}
	if err := v.draw(ctx, ttyInputWait, ttySettle, quiet); err != nil {
		return jobError(ctx, env, info.ID, err)
	}
	return v.result(env)
}

// ttyKill is the end of bash_kill for a terminal job: its screen once it
// ended (or jobKillWait passed).
func ttyKill(ctx context.Context, env *Env, jobs sandbox.Jobs, info sandbox.JobInfo, sig string) *Result {
	v := openTTY(env, jobs, info)
	defer v.close()
	deadline := time.Now().Add(jobKillWait)
	for {
		if err := v.draw(ctx, max(time.Until(deadline), 0), 0, 0); err != nil {
			return jobError(ctx, env, info.ID, err)
		}
		if v.job.State != sandbox.JobRunning || !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
	}
	body, facts := v.text(env)
	if v.job.State == sandbox.JobRunning {
		body += fmt.Sprintf("\n[job %s did not end within %ds of SIG%s; bash_kill with signal KILL ends it]", info.ID, int(jobKillWait/time.Second), sig)
	}
	return structured(body, facts.Truncated, facts)
}
