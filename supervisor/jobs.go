package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The server's side of jobs (wire/kinds.go), in the sandbox's own types
// and sentinels (sandbox.Jobs). Everything the supervisor answers is
// checked: sizes, states, ids, and that an answer's offsets agree with its
// data.

// Command is how a sandbox runs a job's command: the shell's argv, its
// working directory and the jobs' log directory, as the supervisor sees
// them.
type Command struct {
	Argv        []string
	Dir, LogDir string
}

// jobSettings are the supervisor's settings of a job limited by lim, its
// log in logDir.
func jobSettings(lim sandbox.JobLimits, logDir string) wire.JobSettings {
	return wire.JobSettings{MaxJobs: lim.MaxJobs, LogMaxBytes: lim.LogMaxBytes, LogDir: logDir,
		SavedMaxFiles: lim.SavedMaxFiles, SavedMaxBytes: lim.SavedMaxBytes}
}

// jobInfo is a job's state as the sandbox says it.
func jobInfo(i wire.JobInfo) sandbox.JobInfo {
	if i.ID == "" {
		return sandbox.JobInfo{}
	}
	out := sandbox.JobInfo{ID: i.ID, Command: i.Command, State: i.State, PID: i.PID, StartedAt: time.UnixMilli(i.StartedAt), Code: i.Code, Signal: i.Signal, KillRequested: i.KillRequested}
	if i.EndedAt != 0 {
		out.EndedAt = time.UnixMilli(i.EndedAt)
	}
	if i.TTY != nil {
		out.TTY = &sandbox.TermSize{Cols: i.TTY.Cols, Rows: i.TTY.Rows}
	}
	return out
}

// jobCall is one job request in flight on a Conn.
type jobCall struct {
	op     string
	notify chan struct{}

	mu      sync.Mutex
	replied bool
	failed  bool
	data    []byte
	end     *wire.JobReply
}

func (jc *jobCall) signal() {
	select {
	case jc.notify <- struct{}{}:
	default:
	}
}

func (jc *jobCall) fail() {
	jc.mu.Lock()
	jc.failed = true
	jc.mu.Unlock()
	jc.signal()
}

// onData takes an output request's bytes.
func (jc *jobCall) onData(f wire.Frame) error {
	if jc.op != wire.JobOutput || len(f.Payload) == 0 || len(jc.data)+len(f.Payload) > wire.MaxJobRead {
		return wire.Errorf("stream %d: unexpected job output", f.Stream)
	}
	jc.data = append(jc.data, f.Payload...)
	return nil
}

// onEnd takes a job request's answer, checked against what was asked.
func (jc *jobCall) onEnd(f wire.Frame) error {
	var m wire.JobReply
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("stream %d: bad job answer", f.Stream)
	}
	if err := checkReply(jc.op, &m, jc.data); err != nil {
		return wire.Errorf("stream %d: %v", f.Stream, err)
	}
	jc.end = &m
	return nil
}

// checkReply checks an answer against what was asked.
func checkReply(op string, m *wire.JobReply, data []byte) error {
	m.Err, m.Msg = wire.CapText(m.Err, 32), wire.CapText(m.Msg, 300)
	if m.Err != "" {
		return nil
	}
	if m.Job != nil {
		if err := checkInfo(m.Job); err != nil {
			return err
		}
	}
	switch op {
	case wire.JobStart:
		if !wire.ValidJobID(m.ID) || m.PID <= 0 {
			return errors.New("a start without a valid id and pid")
		}
	case wire.JobOutput, wire.JobInput, wire.JobKill, wire.JobResize:
		if m.Job == nil {
			return errors.New("an answer without the job's state")
		}
		if op == wire.JobOutput && (m.Offset < 0 || m.Dropped < 0 || m.Offset > math.MaxInt64-wire.MaxJobRead || m.NextOffset != m.Offset+wire.RuneStarts(data)) {
			return errors.New("output offsets that do not fit its data")
		}
	case wire.JobUsage:
		return checkUsage(m.Usage)
	case wire.JobList:
		if len(m.Jobs) > wire.MaxJobsRunning+wire.MaxJobsEnded {
			return fmt.Errorf("a list of %d jobs", len(m.Jobs))
		}
		for i := range m.Jobs {
			if err := checkInfo(&m.Jobs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkInfo(i *wire.JobInfo) error {
	switch {
	case !wire.ValidJobID(i.ID):
		return errors.New("a job with an invalid id")
	case i.State != sandbox.JobRunning && i.State != sandbox.JobExited && i.State != sandbox.JobKilled:
		return fmt.Errorf("job %s in state %q", i.ID, wire.CapText(i.State, 16))
	case len(i.Command) > wire.MaxJobCommand+3, !wire.ValidSignalName(i.Signal), i.PID <= 0, i.TTY != nil && !i.TTY.Valid():
		return fmt.Errorf("job %s: a malformed state", i.ID)
	}
	i.Command = wire.CapText(i.Command, wire.MaxJobCommand)
	return nil
}

// job runs one job request on c.
func (c *Conn) job(ctx context.Context, req wire.JobRequest) (*wire.JobReply, []byte, error) {
	if req.Op != wire.JobStart && req.Op != wire.JobList && req.Op != wire.JobUsage && !wire.ValidJobID(req.ID) {
		return nil, nil, fmt.Errorf("%w: %q is not a job id", sandbox.ErrNoJob, wire.CapText(req.ID, 32))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	if len(body) > wire.MaxPayload {
		return nil, nil, fmt.Errorf("job request of %d bytes: over the %d limit", len(body), wire.MaxPayload)
	}
	jc := &jobCall{op: req.Op, notify: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, nil, &ChannelError{Err: err, NotStarted: true}
	}
	c.next++
	id := c.next
	c.jobs[id] = jc
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.jobs, id)
		c.mu.Unlock()
	}
	handedOff := false // to endStarted, which forgets the call itself
	defer func() {
		if !handedOff {
			forget()
		}
	}()
	if err := c.send(wire.KindJob, id, body); err != nil {
		return nil, nil, &ChannelError{Err: c.Err(), NotStarted: true}
	}
	stall := time.NewTimer(time.Duration(req.WaitMS)*time.Millisecond + fsStall)
	defer stall.Stop()
	for {
		jc.mu.Lock()
		end, failed, replied := jc.end, jc.failed, jc.replied
		jc.mu.Unlock()
		switch {
		case end != nil:
			return end, jc.data, nil
		case failed:
			err := c.Err()
			if err == nil {
				err = errors.New("ended")
			}
			return nil, nil, &ChannelError{Err: err, NotStarted: !replied}
		}
		var err error
		select {
		case <-jc.notify:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		case <-stall.C:
			err = errStalled
		}
		c.send(wire.KindKill, id, nil)
		if req.Op == wire.JobStart {
			handedOff = true
			go c.endStarted(jc, forget)
		}
		return nil, nil, err
	}
}

// endStarted ends the job of a start given up on (canceled, or stalled):
// the supervisor starts it all the same — a kill stops a request's wait,
// never a job — and nobody was told its id to stop it. Its answer is
// waited for (a minute at most: a start answers at once), then the job it
// names is killed; forget drops the call.
func (c *Conn) endStarted(jc *jobCall, forget func()) {
	defer forget()
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
	for {
		jc.mu.Lock()
		end, failed := jc.end, jc.failed
		jc.mu.Unlock()
		switch {
		case end != nil:
			if end.Err == "" && wire.ValidJobID(end.ID) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c.KillJob(ctx, end.ID, "KILL")
				cancel()
			}
			return
		case failed:
			return
		}
		select {
		case <-jc.notify:
		case <-wait.C:
			return
		}
	}
}

// replyError is the error an answer reports: a sandbox sentinel where
// there is one.
func replyError(id string, m *wire.JobReply) error {
	switch m.Err {
	case "":
		return nil
	case wire.CodeNoJob:
		return fmt.Errorf("%w: %s", sandbox.ErrNoJob, id)
	case wire.CodeLimit:
		return fmt.Errorf("%w: %d running, at most %d", sandbox.ErrJobLimit, m.Running, m.Max)
	case wire.CodeNoStdin:
		return fmt.Errorf("job %s: %w", id, sandbox.ErrJobNoInput)
	case wire.CodeBlocked:
		return fmt.Errorf("job %s: %w (%s)", id, sandbox.ErrJobBlocked, m.Msg)
	case wire.CodeEnded:
		return fmt.Errorf("job %s: %w", id, sandbox.ErrJobEnded)
	case wire.CodeNoTTY:
		return fmt.Errorf("job %s: %w", id, sandbox.ErrJobNoTTY)
	case wire.CodeLog:
		return fmt.Errorf("job log: %s", m.Msg)
	case wire.CodeStart:
		return fmt.Errorf("start command: %s", m.Msg)
	}
	return fmt.Errorf("job %s: %s: %s", id, m.Err, m.Msg)
}

// StartJob starts req as a job, as cmd runs it: a command that runs on its
// own, past this call and this channel, until it exits or is killed.
func (c *Conn) StartJob(ctx context.Context, cmd Command, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	if len(cmd.Argv) == 0 {
		return sandbox.JobInfo{}, errors.New("start job: no command")
	}
	started := time.Now()
	start := wire.JobRequest{Op: wire.JobStart, Argv: cmd.Argv, Dir: cmd.Dir, Stdin: req.Stdin, Shell: req.Shell, Env: req.Env, JobSettings: jobSettings(req.JobLimits, cmd.LogDir)}
	if req.TTY != nil {
		start.TTY = &wire.TTY{Cols: req.TTY.Cols, Rows: req.TTY.Rows}
		if !start.TTY.Valid() {
			return sandbox.JobInfo{}, fmt.Errorf("terminal of %dx%d: %d to %d columns, %d to %d rows", req.TTY.Cols, req.TTY.Rows,
				wire.MinTTYCols, wire.MaxTTYCols, wire.MinTTYRows, wire.MaxTTYRows)
		}
	}
	m, _, err := c.job(ctx, start)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	if err := replyError("", m); err != nil {
		return sandbox.JobInfo{}, err
	}
	if req.TTY != nil && (m.Job == nil || m.Job.ID != m.ID || m.Job.TTY == nil) {
		// A supervisor that knows no terminal would have run it on pipes:
		// it is ended.
		c.KillJob(context.WithoutCancel(ctx), m.ID, "KILL")
		return sandbox.JobInfo{}, wire.Errorf("start job: the supervisor answered a job %s without its terminal", m.ID)
	}
	command := req.Command // as the agent wrote it, not as cmd rewrote it
	if len(command) > wire.MaxJobCommand {
		command = strings.ToValidUTF8(command[:wire.MaxJobCommand], "")
	}
	info := sandbox.JobInfo{ID: m.ID, Command: command, State: sandbox.JobRunning, PID: m.PID, StartedAt: started}
	if req.TTY != nil {
		sz := *req.TTY
		info.TTY = &sz
	}
	return info, nil
}

// JobOutput reads a job's output from offset (characters; negative,
// sandbox.Unshown: what no reader was shown yet), at most 1 MiB. With wait
// (at most a minute), it waits for output past offset or the job's end; a
// cancelled ctx ends the wait, never the job.
func (c *Conn) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return c.jobOutput(ctx, id, offset, wait, false)
}

// PeekJobOutput is JobOutput from offset (0 or more) that moves no
// cursor: what no reader was shown yet stays so.
func (c *Conn) PeekJobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return c.jobOutput(ctx, id, max(offset, 0), wait, true)
}

func (c *Conn) jobOutput(ctx context.Context, id string, offset int64, wait time.Duration, peek bool) (sandbox.JobOutput, error) {
	req := wire.JobRequest{Op: wire.JobOutput, ID: id, WaitMS: min(max(wait.Milliseconds(), 0), wire.MaxJobWait), Peek: peek}
	if offset >= 0 {
		req.Offset = &offset
	}
	m, data, err := c.job(ctx, req)
	if err != nil {
		return sandbox.JobOutput{}, err
	}
	if err := replyError(id, m); err != nil {
		return sandbox.JobOutput{}, err
	}
	if m.Job.ID != id || offset >= 0 && m.Offset != offset+m.Dropped && (m.Dropped != 0 || m.Offset > offset) {
		return sandbox.JobOutput{}, wire.Errorf("job %s: an answer for another job or offset", id)
	}
	return sandbox.JobOutput{Data: data, Offset: m.Offset, NextOffset: m.NextOffset, Dropped: m.Dropped, Job: jobInfo(*m.Job)}, nil
}

// JobInput writes data to a job's stdin (at most 64 KiB;
// sandbox.ErrJobBlocked when the job does not read it within a second),
// then closes it with close.
func (c *Conn) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	if len(data) > wire.MaxJobInput {
		return sandbox.JobInfo{}, fmt.Errorf("input of %d bytes: over the %d limit", len(data), wire.MaxJobInput)
	}
	return c.jobState(ctx, wire.JobRequest{Op: wire.JobInput, ID: id, Data: data, Close: close})
}

// KillJob sends signal (TERM, INT or KILL) to a job's whole process group
// and returns its state; a job that has ended is left as it is.
func (c *Conn) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	if _, ok := map[string]bool{"TERM": true, "INT": true, "KILL": true}[signal]; !ok {
		return sandbox.JobInfo{}, fmt.Errorf("signal %q: TERM, INT or KILL", wire.CapText(signal, 16))
	}
	return c.jobState(ctx, wire.JobRequest{Op: wire.JobKill, ID: id, Signal: signal})
}

// ResizeJob sets a terminal job's size (sandbox.ErrJobNoTTY for a job on
// none).
func (c *Conn) ResizeJob(ctx context.Context, id string, size sandbox.TermSize) (sandbox.JobInfo, error) {
	sz := wire.TTY{Cols: size.Cols, Rows: size.Rows}
	if !sz.Valid() {
		return sandbox.JobInfo{}, fmt.Errorf("terminal of %dx%d: %d to %d columns, %d to %d rows", size.Cols, size.Rows,
			wire.MinTTYCols, wire.MaxTTYCols, wire.MinTTYRows, wire.MaxTTYRows)
	}
	return c.jobState(ctx, wire.JobRequest{Op: wire.JobResize, ID: id, TTY: &sz})
}

func (c *Conn) jobState(ctx context.Context, req wire.JobRequest) (sandbox.JobInfo, error) {
	m, _, err := c.job(ctx, req)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	if err := replyError(req.ID, m); err != nil {
		return sandbox.JobInfo{}, err
	}
	if m.Job.ID != req.ID {
		return sandbox.JobInfo{}, wire.Errorf("job %s: an answer for another job", req.ID)
	}
	return jobInfo(*m.Job), nil
}

// Jobs lists the supervisor's jobs, running and ended (the last 64 ended
// are kept), oldest first.
func (c *Conn) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	m, _, err := c.job(ctx, wire.JobRequest{Op: wire.JobList})
	if err != nil {
		return nil, err
	}
	if err := replyError("", m); err != nil {
		return nil, err
	}
	out := make([]sandbox.JobInfo, len(m.Jobs))
	for i, j := range m.Jobs {
		out[i] = jobInfo(j)
	}
	return out, nil
}

// linkDo runs op on l's channel; a request that never reached the
// supervisor (its channel was gone first) is tried once more on a new one.
func linkDo[T any](ctx context.Context, l *Link, op func(c *Conn) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		c, err := l.Conn(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		res, err := op(c)
		var ce *ChannelError
		if errors.As(err, &ce) && ce.NotStarted && attempt == 0 {
			l.Drop(c)
			continue
		}
		return res, err
	}
}

// StartJob is Conn.StartJob on the link's channel.
func (l *Link) StartJob(ctx context.Context, cmd Command, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobInfo, error) { return c.StartJob(ctx, cmd, req) })
}

// JobOutput is Conn.JobOutput on the link's channel.
func (l *Link) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobOutput, error) { return c.JobOutput(ctx, id, offset, wait) })
}

// PeekJobOutput is Conn.PeekJobOutput on the link's channel.
func (l *Link) PeekJobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobOutput, error) { return c.PeekJobOutput(ctx, id, offset, wait) })
}

// JobInput is Conn.JobInput on the link's channel.
func (l *Link) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobInfo, error) { return c.JobInput(ctx, id, data, close) })
}

// KillJob is Conn.KillJob on the link's channel.
func (l *Link) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobInfo, error) { return c.KillJob(ctx, id, signal) })
}

// ResizeJob is Conn.ResizeJob on the link's channel.
func (l *Link) ResizeJob(ctx context.Context, id string, size sandbox.TermSize) (sandbox.JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.JobInfo, error) { return c.ResizeJob(ctx, id, size) })
}

// Jobs is Conn.Jobs on the link's channel.
func (l *Link) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) ([]sandbox.JobInfo, error) { return c.Jobs(ctx) })
}
