package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// savesProvider gives sandboxes whose checkpoints are only counted (or
// fail): the automatic checkpoints' decisions, without the engine.
type savesProvider struct {
	sandbox.Provider
	fail bool

	mu    sync.Mutex
	saves []string // the messages, in order
}

func (p *savesProvider) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Acquire(ctx, thread)
	if err != nil {
		return nil, err
	}
	return &savesSandbox{Sandbox: sb, p: p}, nil
}

func (p *savesProvider) taken() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.saves...)
}

type savesSandbox struct {
	sandbox.Sandbox
	p *savesProvider
}

var _ tools.Checkpointer = (*savesSandbox)(nil)

func (s *savesSandbox) SaveCheckpoint(_ context.Context, opts checkpoint.SaveOptions, _ int64) (checkpoint.SaveResult, error) {
	if s.p.fail {
		return checkpoint.SaveResult{}, errors.New("disk on fire")
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.saves = append(s.p.saves, opts.Message)
	return checkpoint.SaveResult{Saved: true, Info: checkpoint.Info{ID: fmt.Sprint(len(s.p.saves)), Auto: opts.Auto}}, nil
}
func (s *savesSandbox) ListCheckpoints(context.Context) ([]checkpoint.Info, error) { return nil, nil }
func (s *savesSandbox) CheckpointChanges(context.Context, string, string) ([]checkpoint.Change, error) {
	return nil, nil
}
func (s *savesSandbox) OpenCheckpointFile(context.Context, string, string) (io.ReadCloser, checkpoint.Entry, error) {
	return nil, checkpoint.Entry{}, checkpoint.ErrNotFound
}
func (s *savesSandbox) RestoreCheckpoint(context.Context, string, string, int64) (checkpoint.RestoreResult, error) {
	return checkpoint.RestoreResult{}, nil
}

// stdioCalls serves srv over in-process pipes and answers a function that
// makes one tool call and returns the raw JSON-RPC answer.
func stdioCalls(t *testing.T, srv *server.Server) func(tool, args string) string {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go srv.ServeStdio(ctx, "default", inR, outW)
	t.Cleanup(func() { cancel(); inW.Close(); srv.Close() })
	replies := bufio.NewReader(outR)
	send := func(line string) string {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(line, `"id"`) {
			return ""
		}
		b, err := replies.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	id := 0
	return func(tool, args string) string {
		id++
		return send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args))
	}
}

func newSavesServer(t *testing.T, fail, auto bool, log *slog.Logger) (*savesProvider, func(tool, args string) string) {
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	p := &savesProvider{Provider: lp, fail: fail}
	srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state, Logger: log,
		Checkpoints: server.CheckpointsConfig{Auto: &auto}})
	return p, stdioCalls(t, srv)
}

// The automatic checkpoints: the first call that may change files saves
// first (this process never saved the thread), every such call is saved
// after it ends, the next one finds that done and does not save first;
// read-only calls save nothing; checkpoints.auto false saves nothing.
func TestAutoCheckpointsWhen(t *testing.T) {
	t.Parallel()
	p, call := newSavesServer(t, false, true, nil)
	call("write_file", `{"path":"a.txt","content":"1"}`)
	call("write_file", `{"path":"a.txt","content":"2"}`)
	call("read_file", `{"path":"a.txt"}`)
	call("ls", `{}`)
	call("str_replace", `{"path":"a.txt","old_str":"2","new_str":"3"}`)
	call("checkpoints", `{}`) // waits for the save under way
	want := []string{"before write_file: a.txt", "after write_file: a.txt", "after write_file: a.txt", "after str_replace: a.txt"}
	if got := p.taken(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("saves %q, want %q", got, want)
	}

	off, call := newSavesServer(t, false, false, nil)
	call("write_file", `{"path":"a.txt","content":"1"}`)
	call("checkpoints", `{}`)
	if got := off.taken(); len(got) != 0 {
		t.Fatalf("checkpoints.auto false saved %q", got)
	}
}

// A failing automatic checkpoint never fails the call, nor shows in its
// result: it is logged, as a warning once.
func TestAutoCheckpointFailureNeverFailsTheCall(t *testing.T) {
	t.Parallel()
	logs := &testkit.Buffer{}
	_, call := newSavesServer(t, true, true, slog.New(slog.NewTextHandler(logs, nil)))
	for i := range 3 {
		out := call("write_file", fmt.Sprintf(`{"path":"a.txt","content":"%d"}`, i))
		if strings.Contains(out, `"isError":true`) || !strings.Contains(out, `"text":"Wrote 1 bytes to /mnt/user-data/workspace/a.txt"`) {
			t.Fatalf("write_file with failing checkpoints: %s", out)
		}
	}
	call("checkpoints", `{}`)
	if n := strings.Count(logs.String(), "automatic checkpoint failed"); n != 1 || !strings.Contains(logs.String(), "disk on fire") {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs)
	}
}

// restore runs alone among the thread's calls that may change files: a
// restore asked while a bash command runs waits for it to end (else a
// write landing between the restore's undo checkpoint and its writes is
// lost to both).
func TestRestoreWaitsForCallsThatChangeFiles(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state, AllowHostBash: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	p := &savesProvider{Provider: lp}
	off := false
	srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state, Checkpoints: server.CheckpointsConfig{Auto: &off}})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go srv.ServeStdio(ctx, "default", inR, outW)
	t.Cleanup(func() { cancel(); inW.Close(); srv.Close() })
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Error(err)
		}
	}
	replies := bufio.NewReader(outR)
	read := func() (string, time.Time) {
		b, err := replies.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		return string(b), time.Now()
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	read()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1.5; echo 3 > a.txt"}}}`)
	time.Sleep(300 * time.Millisecond)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"restore","arguments":{"id":"1"}}}`)
	got := map[string]time.Time{}
	var answers string
	for range 2 {
		line, at := read()
		answers += line
		for _, id := range []string{`"id":1,`, `"id":2,`} {
			if strings.Contains(line, id) {
				got[id] = at
			}
		}
	}
	if !strings.Contains(answers, "exit code 0") || strings.Count(answers, `"isError":true`) > 0 || len(got) != 2 {
		t.Fatalf("bash or restore failed:\n%s", answers)
	}
	// The bash command's last act is its write: the restore must not have
	// answered before it (its answer may still come before bash's own).
	fi, err := os.Stat(filepath.Join(sandbox.ThreadDir(state, "default"), "workspace", "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if restored := got[`"id":2,`]; restored.Before(fi.ModTime()) {
		t.Fatalf("the restore answered %v before the bash command that was writing wrote:\n%s", fi.ModTime().Sub(restored), answers)
	}
}
