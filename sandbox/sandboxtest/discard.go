package sandboxtest

import (
	"errors"
	"io/fs"
	"strconv"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Discard runs the contract of Provider.Exists and Provider.Discard
// against p: a thread's files exist once it was used and go with Discard,
// after which the thread starts afresh; a thread with nothing, or
// discarded twice, is no error; a bad key is refused.
func Discard(t *testing.T, p sandbox.Provider) {
	ctx := t.Context()
	thread := "discard-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	exists := func(when string, want bool) {
		t.Helper()
		if got, err := p.Exists(ctx, thread); err != nil || got != want {
			t.Fatalf("Exists %s = %v, %v; want %v", when, got, err, want)
		}
	}
	exists("before the thread's first use", false)
	sb, err := p.Acquire(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	write(t, sb, sandbox.WorkspaceDir+"/kept.txt", "x")
	if js, ok := sb.(sandbox.Jobs); ok {
		if _, err := js.StartJob(ctx, sandbox.JobRequest{Command: "sleep 600"}); err != nil {
			t.Fatalf("start a job: %v", err)
		}
	}
	p.Release(thread)
	exists("once used", true)
	if err := p.Discard(ctx, thread); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	exists("after Discard", false)
	if err := p.Discard(ctx, thread); err != nil {
		t.Fatalf("a second Discard: %v", err)
	}

	sb, err = p.Acquire(ctx, thread)
	if err != nil {
		t.Fatalf("the thread used again: %v", err)
	}
	t.Cleanup(func() { p.Release(thread); p.Discard(ctx, thread) })
	if _, err := sb.FS().Stat(ctx, sandbox.WorkspaceDir+"/kept.txt"); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a discarded thread's file, the thread used again: %v, want it gone", err)
	}
	if js, ok := sb.(sandbox.Jobs); ok {
		list, err := js.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range list {
			if j.State == sandbox.JobRunning {
				t.Errorf("a discarded thread's job runs on in the thread used again: %+v", j)
			}
		}
	}

	if err := p.Discard(ctx, "never-used-"+strconv.FormatInt(time.Now().UnixNano(), 36)); err != nil {
		t.Errorf("Discard of a thread never used: %v", err)
	}
	if err := p.Discard(ctx, "../x"); err == nil {
		t.Error("Discard took a bad thread key")
	}
	if _, err := p.Exists(ctx, "../x"); err == nil {
		t.Error("Exists took a bad thread key")
	}
}
