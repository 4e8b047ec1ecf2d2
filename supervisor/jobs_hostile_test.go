package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// jobAsync starts a job request on stream 1 of a fake supervisor's
// channel, and waits until it is in flight.
func jobAsync(t *testing.T, c *Conn, op string) chan error {
	done := make(chan error, 1)
	go func() {
		var err error
		switch op {
		case jobStart:
			_, err = c.StartJob(context.Background(), JobSpec{Argv: []string{"x"}})
		case jobList:
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
	info := func(mod func(*JobInfo)) *JobInfo {
		i := &JobInfo{ID: "j1", Command: "x", State: JobRunning, PID: 7}
		mod(i)
		return i
	}
	for _, tc := range []struct {
		name string
		op   string
		data [][]byte
		end  JobReply
		want string
	}{
		{"over a MiB of output", jobOutput, bytes.Fields(bytes.Repeat([]byte(strings.Repeat("x", maxPayload)+" "), 5)), JobReply{}, "unexpected job output"},
		{"unknown state", jobOutput, nil, JobReply{Job: info(func(i *JobInfo) { i.State = "zombie" })}, "state"},
		{"offsets beside the data", jobOutput, [][]byte{[]byte("héllo")}, JobReply{Job: info(func(*JobInfo) {}), NextOffset: 6}, "offsets"},
		{"no state", jobOutput, nil, JobReply{}, "without the job's state"},
		{"bad job id", jobOutput, nil, JobReply{Job: info(func(i *JobInfo) { i.ID = "../j1" })}, "invalid id"},
		{"bad signal", jobOutput, nil, JobReply{Job: info(func(i *JobInfo) { i.Signal = "TERM\n" })}, "malformed"},
		{"bad start id", jobStart, nil, JobReply{ID: "j0", PID: 3}, "valid id"},
		{"long list", jobList, nil, JobReply{Jobs: make([]JobInfo, maxJobsRunning+maxJobsEnded+1)}, "a list of"},
		{"data for a start", jobStart, [][]byte{[]byte("x")}, JobReply{}, "unexpected job output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFake(t)
			done := jobAsync(t, c, tc.op)
			for _, d := range tc.data {
				f.fw.write(msgJobData, 1, d)
			}
			b, _ := json.Marshal(tc.end)
			f.fw.write(msgJobEnd, 1, b)
			wantChannelError(t, done, tc.want)
		})
	}
	// A code is an error of the call, not of the channel.
	f, c := newFake(t)
	done := jobAsync(t, c, jobOutput)
	b, _ := json.Marshal(JobReply{Err: codeNoJob})
	f.fw.write(msgJobEnd, 1, b)
	if err := <-done; !errors.Is(err, ErrNoJob) || c.Err() != nil {
		t.Fatalf("%v, channel %v", err, c.Err())
	}
	// A job in an exec's exit must be well-formed.
	f, c = newFake(t)
	edone := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	b, _ = json.Marshal(ExitMsg{Job: "j1x", Running: true})
	f.fw.write(msgExit, 1, b)
	wantChannelError(t, edone, "malformed job")
}
