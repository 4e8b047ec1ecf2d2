package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// jobAsync starts a job request on stream 1 of a fake supervisor's
// channel, and waits until it is in flight.
func jobAsync(t *testing.T, c *Conn, op string) chan error {
	done := make(chan error, 1)
	go func() {
		var err error
		switch op {
		case wire.JobInput:
			_, err = c.JobInput(context.Background(), "j1", []byte("x"), false)
		case wire.JobStart:
			_, err = c.StartJob(context.Background(), Command{Argv: []string{"x"}}, sandbox.JobRequest{})
		case wire.JobList:
			_, err = c.Jobs(context.Background())
		default:
			_, err = c.JobOutput(context.Background(), "j1", 0, 0)
		}
		done <- err
	}()
	for range 500 {
		c.mu.Lock()
		n := len(c.jobs)
		c.mu.Unlock()
		if n == 1 {
			return done
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the request was not sent")
	return nil
}

func TestHostileJobReplies(t *testing.T) {
	info := func(mod func(*wire.JobInfo)) *wire.JobInfo {
		i := &wire.JobInfo{ID: "j1", Command: "x", State: sandbox.JobRunning, PID: 7}
		mod(i)
		return i
	}
	for _, tc := range []struct {
		name string
		op   string
		data [][]byte
		end  wire.JobReply
		want string
	}{
		{"over a MiB of output", wire.JobOutput, bytes.Fields(bytes.Repeat([]byte(strings.Repeat("x", wire.MaxPayload)+" "), 5)), wire.JobReply{}, "unexpected job output"},
		{"unknown state", wire.JobOutput, nil, wire.JobReply{Job: info(func(i *wire.JobInfo) { i.State = "zombie" })}, "state"},
		{"offsets beside the data", wire.JobOutput, [][]byte{[]byte("héllo")}, wire.JobReply{Job: info(func(*wire.JobInfo) {}), NextOffset: 6}, "offsets"},
		{"no state", wire.JobOutput, nil, wire.JobReply{}, "without the job's state"},
		{"bad job id", wire.JobOutput, nil, wire.JobReply{Job: info(func(i *wire.JobInfo) { i.ID = "../j1" })}, "invalid id"},
		{"bad signal", wire.JobOutput, nil, wire.JobReply{Job: info(func(i *wire.JobInfo) { i.Signal = "TERM\n" })}, "malformed"},
		{"bad start id", wire.JobStart, nil, wire.JobReply{ID: "j0", PID: 3}, "valid id"},
		{"long list", wire.JobList, nil, wire.JobReply{Jobs: make([]wire.JobInfo, wire.MaxJobsRunning+wire.MaxJobsEnded+1)}, "a list of"},
		{"data for a start", wire.JobStart, [][]byte{[]byte("x")}, wire.JobReply{}, "unexpected job output"},
		{"a terminal out of bounds", wire.JobOutput, nil, wire.JobReply{Job: info(func(i *wire.JobInfo) { i.TTY = &wire.TTY{Cols: 5000, Rows: 24} })}, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFake(t)
			done := jobAsync(t, c, tc.op)
			for _, d := range tc.data {
				f.fw.Write(wire.KindJobData, 1, d)
			}
			b, _ := json.Marshal(tc.end)
			f.fw.Write(wire.KindJobEnd, 1, b)
			wantChannelError(t, done, tc.want)
		})
	}
	// A code is an error of the call, not of the channel.
	f, c := newFake(t)
	done := jobAsync(t, c, wire.JobOutput)
	b, _ := json.Marshal(wire.JobReply{Err: wire.CodeNoJob})
	f.fw.Write(wire.KindJobEnd, 1, b)
	if err := <-done; !errors.Is(err, sandbox.ErrNoJob) || c.Err() != nil {
		t.Fatalf("%v, channel %v", err, c.Err())
	}
	// A job in an exec's exit must be well-formed.
	f, c = newFake(t)
	edone := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	b, _ = json.Marshal(wire.Exit{Job: "j1x", Running: true})
	f.fw.Write(wire.KindExit, 1, b)
	wantChannelError(t, edone, "malformed job")
}

// A terminal job that a supervisor answers without its terminal (one that
// knows none ran it on pipes) is refused, and killed.
func TestJobStartWithoutTerminal(t *testing.T) {
	f, c := newFake(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.StartJob(context.Background(), Command{Argv: []string{"x"}}, sandbox.JobRequest{TTY: &sandbox.TermSize{Cols: 80, Rows: 24}})
		done <- err
	}()
	for c.mu.Lock(); len(c.jobs) == 0; c.mu.Lock() {
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	c.mu.Unlock()
	b, _ := json.Marshal(wire.JobReply{ID: "j1", PID: 7})
	f.fw.Write(wire.KindJobEnd, 1, b)
	// The kill that follows (stream 2) is answered.
	for c.mu.Lock(); c.next < 2 || len(c.jobs) == 0; c.mu.Lock() {
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	c.mu.Unlock()
	b, _ = json.Marshal(wire.JobReply{Job: &wire.JobInfo{ID: "j1", Command: "x", State: sandbox.JobKilled, PID: 7, Code: 137, Signal: "KILL"}})
	f.fw.Write(wire.KindJobEnd, 2, b)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "without its terminal") {
		t.Fatalf("%v", err)
	}
}

// A supervisor's job codes are the sandbox's sentinels, in messages that
// name the job (or the counts of a limit); its job states are the
// sandbox's.
func TestJobRepliesInSandboxTerms(t *testing.T) {
	for _, tc := range []struct {
		op    string
		reply wire.JobReply
		want  error
		text  string
	}{
		{wire.JobOutput, wire.JobReply{Err: wire.CodeNoJob}, sandbox.ErrNoJob, "no such job: j1"},
		{wire.JobStart, wire.JobReply{Err: wire.CodeLimit, Running: 2, Max: 2}, sandbox.ErrJobLimit, "too many jobs running: 2 running, at most 2"},
		{wire.JobInput, wire.JobReply{Err: wire.CodeNoStdin}, sandbox.ErrJobNoInput, "job j1: the job takes no input"},
		{wire.JobInput, wire.JobReply{Err: wire.CodeBlocked, Msg: "x"}, sandbox.ErrJobBlocked, "job j1: the job is not reading its input (x)"},
		{wire.JobInput, wire.JobReply{Err: wire.CodeEnded}, sandbox.ErrJobEnded, "job j1: the job has ended"},
	} {
		f, c := newFake(t)
		done := jobAsync(t, c, tc.op)
		b, _ := json.Marshal(tc.reply)
		f.fw.Write(wire.KindJobEnd, 1, b)
		if err := <-done; !errors.Is(err, tc.want) || err.Error() != tc.text || c.Err() != nil {
			t.Errorf("%s %s: %v, want %v (channel %v)", tc.op, tc.reply.Err, err, tc.text, c.Err())
		}
	}
	for _, tc := range []struct {
		info wire.JobInfo
		ends bool
	}{
		{wire.JobInfo{ID: "j1", Command: "sleep 1", State: sandbox.JobKilled, PID: 9, StartedAt: 1000, EndedAt: 3000, Code: 143, Signal: "TERM"}, true},
		{wire.JobInfo{ID: "j1", Command: "sleep 1", State: sandbox.JobRunning, PID: 9, StartedAt: 1000}, false},
	} {
		f, c := newFake(t)
		got := make(chan sandbox.JobOutput, 1)
		go func() {
			o, err := c.JobOutput(context.Background(), "j1", 0, 0)
			if err != nil {
				t.Error(err)
			}
			got <- o
		}()
		for c.mu.Lock(); len(c.jobs) == 0; c.mu.Lock() {
			c.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
		c.mu.Unlock()
		b, _ := json.Marshal(wire.JobReply{Job: &tc.info})
		f.fw.Write(wire.KindJobEnd, 1, b)
		j := (<-got).Job
		if j.ID != "j1" || j.State != tc.info.State || j.PID != 9 || j.StartedAt.UnixMilli() != 1000 || j.Code != tc.info.Code || j.Signal != tc.info.Signal ||
			j.EndedAt.IsZero() == tc.ends || tc.ends && j.EndedAt.UnixMilli() != 3000 {
			t.Errorf("%+v from %+v", j, tc.info)
		}
	}
}

// Every limit of a job reaches its supervisor: the saved results' bound
// too (#24 item 7).
func TestJobSettings(t *testing.T) {
	got := jobSettings(sandbox.JobLimits{MaxJobs: 3, LogMaxBytes: 5, SavedMaxFiles: 7, SavedMaxBytes: 11}, "/logs")
	want := wire.JobSettings{MaxJobs: 3, LogMaxBytes: 5, LogDir: "/logs", SavedMaxFiles: 7, SavedMaxBytes: 11}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}
