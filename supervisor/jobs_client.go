package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// The server's side of jobs (jobs_proto.go). Everything the supervisor
// answers is checked: sizes, states, ids, and that an answer's offsets
// agree with its data.

// ErrNoJob: no job of that id (it never was, it was dropped, or the id is
// malformed: those are refused before they are sent).
var ErrNoJob = errors.New("no such job")

// ErrJobNoInput: the job has no stdin (started without one, or closed).
var ErrJobNoInput = errors.New("the job takes no input")

// ErrJobBlocked: the job did not read its input within a second.
var ErrJobBlocked = errors.New("the job is not reading its input")

// ErrJobEnded: input to a job that has ended.
var ErrJobEnded = errors.New("the job has ended")

// JobLimitError: a job was refused because Max jobs run already.
type JobLimitError struct{ Running, Max int }

func (e *JobLimitError) Error() string {
	return fmt.Sprintf("%d jobs are running; at most %d", e.Running, e.Max)
}

// JobSpec starts a job.
type JobSpec struct {
	Argv  []string
	Dir   string
	Stdin bool // give it a pipe for JobInput
	// Shell: it starts in the kept shell state (ExecRequest.Shell) and
	// changes none.
	Shell bool
	JobSettings
}

// Job is a started job.
type Job struct {
	ID  string
	PID int
}

// Unshown as JobOutput's offset reads from the job's shown cursor: what
// no reader (of any channel) was shown yet; the read advances it.
const Unshown int64 = -1

// JobOutput is output of a job.
type JobOutput struct {
	Data       []byte
	Offset     int64 // characters of output before Data
	NextOffset int64 // Offset + Data's characters
	Dropped    int64 // characters asked for that are no longer kept
	Job        JobInfo
}

// jobCall is one job request in flight on a Conn.
type jobCall struct {
	op     string
	notify chan struct{}

	mu      sync.Mutex
	replied bool
	failed  bool
	data    []byte
	end     *JobReply
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

// dispatchJob takes a job request's frame from the supervisor.
func (c *Conn) dispatchJob(f frame) error {
	c.mu.Lock()
	jc, next := c.jobs[f.stream], c.next
	other := c.calls[f.stream] != nil || c.fs[f.stream] != nil
	c.mu.Unlock()
	switch {
	case other:
		return protocolError("job message on stream %d of another kind", f.stream)
	case jc == nil && (f.stream == 0 || f.stream > next):
		return protocolError("message on stream %d, which was never opened", f.stream)
	case jc == nil:
		return nil // a request that already returned (cancelled)
	}
	jc.mu.Lock()
	defer jc.mu.Unlock()
	defer jc.signal()
	if jc.end != nil {
		return protocolError("stream %d: a message after its end", f.stream)
	}
	jc.replied = true
	if f.kind == msgJobData {
		if jc.op != jobOutput || len(f.payload) == 0 || len(jc.data)+len(f.payload) > maxJobRead {
			return protocolError("stream %d: unexpected job output", f.stream)
		}
		jc.data = append(jc.data, f.payload...)
		return nil
	}
	var m JobReply
	if err := json.Unmarshal(f.payload, &m); err != nil {
		return protocolError("stream %d: bad job answer", f.stream)
	}
	if err := checkReply(jc.op, &m, jc.data); err != nil {
		return protocolError("stream %d: %v", f.stream, err)
	}
	jc.end = &m
	return nil
}

// checkReply checks an answer against what was asked.
func checkReply(op string, m *JobReply, data []byte) error {
	m.Err, m.Msg = capText(m.Err, 32), capText(m.Msg, 300)
	if m.Err != "" {
		return nil
	}
	if m.Job != nil {
		if err := checkInfo(m.Job); err != nil {
			return err
		}
	}
	switch op {
	case jobStart:
		if !validJobID(m.ID) || m.PID <= 0 {
			return errors.New("a start without a valid id and pid")
		}
	case jobOutput, jobInput, jobKill:
		if m.Job == nil {
			return errors.New("an answer without the job's state")
		}
		if op == jobOutput && (m.Offset < 0 || m.Dropped < 0 || m.Offset > math.MaxInt64-maxJobRead || m.NextOffset != m.Offset+runeStarts(data)) {
			return errors.New("output offsets that do not fit its data")
		}
	case jobList:
		if len(m.Jobs) > maxJobsRunning+maxJobsEnded {
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

func checkInfo(i *JobInfo) error {
	switch {
	case !validJobID(i.ID):
		return errors.New("a job with an invalid id")
	case i.State != JobRunning && i.State != JobExited && i.State != JobKilled:
		return fmt.Errorf("job %s in state %q", i.ID, capText(i.State, 16))
	case len(i.Command) > maxJobCommand+3, !validSignalName(i.Signal), i.PID <= 0:
		return fmt.Errorf("job %s: a malformed state", i.ID)
	}
	i.Command = capText(i.Command, maxJobCommand)
	return nil
}

// job runs one job request on c.
func (c *Conn) job(ctx context.Context, req JobRequest) (*JobReply, []byte, error) {
	if req.Op != jobStart && req.Op != jobList && !validJobID(req.ID) {
		return nil, nil, fmt.Errorf("%w: %q is not a job id", ErrNoJob, capText(req.ID, 32))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	if len(body) > maxPayload {
		return nil, nil, fmt.Errorf("job request of %d bytes: over the %d limit", len(body), maxPayload)
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
	defer func() {
		c.mu.Lock()
		delete(c.jobs, id)
		c.mu.Unlock()
	}()
	if err := c.send(msgJob, id, body); err != nil {
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
		select {
		case <-jc.notify:
		case <-ctx.Done():
			c.send(msgKill, id, nil)
			return nil, nil, ctx.Err()
		case <-stall.C:
			c.send(msgKill, id, nil)
			return nil, nil, errStalled
		}
	}
}

// replyError is the error an answer reports.
func replyError(id string, m *JobReply) error {
	switch m.Err {
	case "":
		return nil
	case codeNoJob:
		return fmt.Errorf("%w: %s", ErrNoJob, id)
	case codeLimit:
		return &JobLimitError{Running: m.Running, Max: m.Max}
	case codeNoStdin:
		return fmt.Errorf("job %s: %w", id, ErrJobNoInput)
	case codeBlocked:
		return fmt.Errorf("job %s: %w (%s)", id, ErrJobBlocked, m.Msg)
	case codeEnded:
		return fmt.Errorf("job %s: %w", id, ErrJobEnded)
	case codeLog:
		return fmt.Errorf("job log: %s", m.Msg)
	case codeStart:
		return fmt.Errorf("start command: %s", m.Msg)
	}
	return fmt.Errorf("job %s: %s: %s", id, m.Err, m.Msg)
}

// StartJob starts a job: a command that runs on its own, past this call and
// this channel, until it exits or is killed.
func (c *Conn) StartJob(ctx context.Context, spec JobSpec) (Job, error) {
	if len(spec.Argv) == 0 {
		return Job{}, errors.New("start job: no command")
	}
	m, _, err := c.job(ctx, JobRequest{Op: jobStart, Argv: spec.Argv, Dir: spec.Dir, Stdin: spec.Stdin, Shell: spec.Shell, JobSettings: spec.JobSettings})
	if err != nil {
		return Job{}, err
	}
	if err := replyError("", m); err != nil {
		return Job{}, err
	}
	return Job{ID: m.ID, PID: m.PID}, nil
}

// JobOutput reads a job's output from offset (characters; Unshown: what no
// reader was shown yet), at most 1 MiB. With wait (at most a minute), it
// waits for output past offset or the job's end; a cancelled ctx ends
// the wait, never the job.
func (c *Conn) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (JobOutput, error) {
	req := JobRequest{Op: jobOutput, ID: id, WaitMS: min(max(wait.Milliseconds(), 0), maxJobWait)}
	if offset >= 0 {
		req.Offset = &offset
	}
	m, data, err := c.job(ctx, req)
	if err != nil {
		return JobOutput{}, err
	}
	if err := replyError(id, m); err != nil {
		return JobOutput{}, err
	}
	if m.Job.ID != id || offset >= 0 && m.Offset != offset+m.Dropped && (m.Dropped != 0 || m.Offset > offset) {
		return JobOutput{}, protocolError("job %s: an answer for another job or offset", id)
	}
	return JobOutput{Data: data, Offset: m.Offset, NextOffset: m.NextOffset, Dropped: m.Dropped, Job: *m.Job}, nil
}

// JobInput writes data to a job's stdin (at most 64 KiB; ErrJobBlocked when
// the job does not read it within a second), then closes it with close.
func (c *Conn) JobInput(ctx context.Context, id string, data []byte, close bool) (JobInfo, error) {
	if len(data) > maxJobInput {
		return JobInfo{}, fmt.Errorf("input of %d bytes: over the %d limit", len(data), maxJobInput)
	}
	return c.jobState(ctx, JobRequest{Op: jobInput, ID: id, Data: data, Close: close})
}

// KillJob sends signal (TERM, INT or KILL) to a job's whole process group
// and returns its state; a job that has ended is left as it is.
func (c *Conn) KillJob(ctx context.Context, id, signal string) (JobInfo, error) {
	if _, ok := map[string]bool{"TERM": true, "INT": true, "KILL": true}[signal]; !ok {
		return JobInfo{}, fmt.Errorf("signal %q: TERM, INT or KILL", capText(signal, 16))
	}
	return c.jobState(ctx, JobRequest{Op: jobKill, ID: id, Signal: signal})
}

func (c *Conn) jobState(ctx context.Context, req JobRequest) (JobInfo, error) {
	m, _, err := c.job(ctx, req)
	if err != nil {
		return JobInfo{}, err
	}
	if err := replyError(req.ID, m); err != nil {
		return JobInfo{}, err
	}
	if m.Job.ID != req.ID {
		return JobInfo{}, protocolError("job %s: an answer for another job", req.ID)
	}
	return *m.Job, nil
}

// Jobs lists the supervisor's jobs, running and ended (the last 64 ended
// are kept), oldest first.
func (c *Conn) Jobs(ctx context.Context) ([]JobInfo, error) {
	m, _, err := c.job(ctx, JobRequest{Op: jobList})
	if err != nil {
		return nil, err
	}
	if err := replyError("", m); err != nil {
		return nil, err
	}
	return m.Jobs, nil
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
func (l *Link) StartJob(ctx context.Context, spec JobSpec) (Job, error) {
	return linkDo(ctx, l, func(c *Conn) (Job, error) { return c.StartJob(ctx, spec) })
}

// JobOutput is Conn.JobOutput on the link's channel.
func (l *Link) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (JobOutput, error) {
	return linkDo(ctx, l, func(c *Conn) (JobOutput, error) { return c.JobOutput(ctx, id, offset, wait) })
}

// JobInput is Conn.JobInput on the link's channel.
func (l *Link) JobInput(ctx context.Context, id string, data []byte, close bool) (JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (JobInfo, error) { return c.JobInput(ctx, id, data, close) })
}

// KillJob is Conn.KillJob on the link's channel.
func (l *Link) KillJob(ctx context.Context, id, signal string) (JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) (JobInfo, error) { return c.KillJob(ctx, id, signal) })
}

// Jobs is Conn.Jobs on the link's channel.
func (l *Link) Jobs(ctx context.Context) ([]JobInfo, error) {
	return linkDo(ctx, l, func(c *Conn) ([]JobInfo, error) { return c.Jobs(ctx) })
}
