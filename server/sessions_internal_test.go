package server

import (
	"context"
	"slices"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// An anonymous session's thread is the provider's to discard when the
// session ends; never a thread some session named, one whose files were
// there before the session (the provider says), or any with
// anonymous_threads: keep.
func TestSessionsDiscardAnonymousThreads(t *testing.T) {
	t.Parallel()
	anon := ThreadRef{ID: "s1", Key: "s1", Anonymous: true}
	for _, tc := range []struct {
		name     string
		keep     bool
		existing bool
		named    bool // a second session names the anonymous thread
		canceled bool // the session's first call is canceled as it begins
		thread   ThreadRef
		want     []string
	}{
		{name: "anonymous", thread: anon, want: []string{"s1"}},
		{name: "its first call canceled", thread: anon, canceled: true, want: []string{"s1"}},
		{name: "its files were there before", thread: anon, existing: true},
		{name: "named by another session", thread: anon, named: true},
		{name: "anonymous_threads: keep", thread: anon, keep: true},
		{name: "a named thread", thread: ThreadRef{ID: "t1", Key: "t1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &fakeProvider{existing: map[string]bool{tc.thread.Key: tc.existing}}
			r := NewSessions(p, "", nil)
			r.removeAnonymous = !tc.keep
			ctx, cancel := context.WithCancel(t.Context())
			if tc.canceled {
				cancel()
			}
			_, done, err := r.Call(ctx, "s1", tc.thread)
			cancel()
			if err == nil {
				done()
			} else if !tc.canceled {
				t.Fatal(err)
			}
			if tc.named {
				if _, done, err = r.Call(t.Context(), "s2", ThreadRef{ID: tc.thread.ID, Key: tc.thread.Key}); err != nil {
					t.Fatal(err)
				}
				done()
			}
			r.End("s1")
			r.End("s2")
			if got := p.discards(); !slices.Equal(got, tc.want) {
				t.Errorf("discarded %q, want %q", got, tc.want)
			}
		})
	}
}

// The host directory shown as /mnt/user-data is the one parent of the
// sandbox's mounts there, as its mounts say, whatever the provider's
// layout.
func TestUserDataHost(t *testing.T) {
	t.Parallel()
	three := func(dir string) []sandbox.Mount {
		return []sandbox.Mount{
			{Virtual: sandbox.WorkspaceDir, Host: dir + "/workspace"},
			{Virtual: sandbox.UploadsDir, Host: dir + "/uploads"},
			{Virtual: sandbox.OutputsDir, Host: dir + "/outputs"},
		}
	}
	for _, tc := range []struct {
		name   string
		mounts []sandbox.Mount
		want   string
	}{
		{"state dir layout", three("/srv/state/threads/t1/user-data"), "/srv/state/threads/t1/user-data"},
		{"a node directory", append(three("/nodes/threads/@ab/t1/user-data"), sandbox.Mount{Virtual: "/mnt/data", Host: "/home/me/data"}), "/nodes/threads/@ab/t1/user-data"},
		{"no host directories (a claim)", []sandbox.Mount{{Virtual: sandbox.WorkspaceDir}, {Virtual: sandbox.OutputsDir}}, ""},
		{"not one parent", append(three("/a/user-data")[:2], sandbox.Mount{Virtual: sandbox.OutputsDir, Host: "/b/outputs"}), ""},
		{"named otherwise on the host", []sandbox.Mount{{Virtual: sandbox.WorkspaceDir, Host: "/a/ws"}}, ""},
		{"none", nil, ""},
	} {
		if got := userDataHost(tc.mounts); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// jobsSpy is a sandbox with jobs that notes how it was asked for them
// (only its Jobs is called).
type jobsSpy struct {
	sandbox.Sandbox
	jobMethods
	ifRunning bool
}

type jobMethods = sandbox.Jobs

func (j *jobsSpy) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	j.ifRunning = sandbox.OnlyIfRunning(ctx)
	if j.ifRunning {
		return nil, sandbox.ErrNotRunning
	}
	return []sandbox.JobInfo{{ID: "j1", State: sandbox.JobRunning}}, nil
}

// A session's end asks whether its sandbox runs a job without making or
// starting its box (one that idled out runs none): the provider is asked
// IfRunning, and its ErrNotRunning is no job.
func TestJobsRunningDoesNotStartTheBox(t *testing.T) {
	ready := make(chan struct{})
	close(ready)
	spy := &jobsSpy{}
	b := &binding{ready: ready, sb: spy}
	if (&Sessions{}).jobsRunningOf(b) || !spy.ifRunning {
		t.Fatalf("jobs running %v, asked IfRunning %v; want no jobs, asked IfRunning", true, spy.ifRunning)
	}
}
