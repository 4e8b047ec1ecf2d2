package jobs

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

func TestErr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   error
		want error
		text string
	}{
		{fmt.Errorf("%w: j7", supervisor.ErrNoJob), sandbox.ErrNoJob, "no such job: j7"},
		{&supervisor.JobLimitError{Running: 2, Max: 2}, sandbox.ErrJobLimit, "too many jobs running: 2 running, at most 2"},
		{fmt.Errorf("job j1: %w", supervisor.ErrJobNoInput), sandbox.ErrJobNoInput, "job j1: the job takes no input"},
		{fmt.Errorf("job j1: %w (x)", supervisor.ErrJobBlocked), sandbox.ErrJobBlocked, "job j1: the job is not reading its input (x)"},
		{fmt.Errorf("job j1: %w", supervisor.ErrJobEnded), sandbox.ErrJobEnded, "job j1: the job has ended"},
		{io.EOF, io.EOF, "EOF"},
	} {
		got := Err(tc.in)
		if !errors.Is(got, tc.want) || got.Error() != tc.text {
			t.Errorf("Err(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if tc.want != sandbox.ErrJobLimit && !errors.Is(got, tc.in) {
			t.Errorf("Err(%v) lost the supervisor's error", tc.in)
		}
	}
	if Err(nil) != nil {
		t.Error("Err(nil) != nil")
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	got := Info(supervisor.JobInfo{ID: "j1", Command: "sleep 1", State: supervisor.JobKilled, PID: 9, StartedAt: 1000, EndedAt: 3000, Code: 143, Signal: "TERM"})
	if got.ID != "j1" || got.State != sandbox.JobKilled || got.StartedAt.UnixMilli() != 1000 || got.EndedAt.UnixMilli() != 3000 || got.Code != 143 || got.Signal != "TERM" || got.PID != 9 {
		t.Fatalf("%+v", got)
	}
	if running := Info(supervisor.JobInfo{ID: "j2", State: supervisor.JobRunning, StartedAt: 1000}); !running.EndedAt.IsZero() {
		t.Fatalf("a running job's end: %v", running.EndedAt)
	}
}

// Every limit of a job reaches its supervisor: the saved results' bound
// too (#24 item 7).
func TestSettings(t *testing.T) {
	t.Parallel()
	got := Settings(sandbox.JobLimits{MaxJobs: 3, LogMaxBytes: 5, SavedMaxFiles: 7, SavedMaxBytes: 11}, "/logs")
	want := supervisor.JobSettings{MaxJobs: 3, LogMaxBytes: 5, LogDir: "/logs", SavedMaxFiles: 7, SavedMaxBytes: 11}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}
