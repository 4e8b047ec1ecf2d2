// Package sandboxtest is the contract every provider's sandboxes keep,
// as a test suite: the local provider and the docker provider run it alike.
package sandboxtest

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Options describe what a provider promises beyond the common contract.
type Options struct {
	// ReadOnlyEnforced: bash cannot write to read-only mounts.
	ReadOnlyEnforced bool
}

// Run runs the contract against sandboxes from newSandbox, each a fresh
// thread with a read-only skills dir at /mnt/skills holding skill.md
// ("skill\n").
func Run(t *testing.T, opts Options, newSandbox func(t *testing.T) sandbox.Sandbox) {
	t.Run("ExecBasics", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		out, res := run(t, sb, "pwd; echo out; echo err >&2; exit 3", time.Minute)
		if out != sandbox.WorkspaceDir+"\nout\nerr\n" || res.ExitCode != 3 || res.TimedOut {
			t.Fatalf("out %q res %+v", out, res)
		}
	})
	t.Run("FilesSharedWithBash", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		write(t, sb, sandbox.WorkspaceDir+"/dir/from-tool.txt", "tool\n")
		out, res := run(t, sb, "cat dir/from-tool.txt && echo bash > /mnt/user-data/outputs/from-bash.txt && cat /mnt/skills/skill.md", time.Minute)
		if res.ExitCode != 0 || out != "tool\nskill\n" {
			t.Fatalf("bash: exit %d %q", res.ExitCode, out)
		}
		if got := read(t, sb, sandbox.OutputsDir+"/from-bash.txt"); got != "bash\n" {
			t.Fatalf("file tool read %q", got)
		}
		entries, err := sb.FS().ReadDir(t.Context(), sandbox.WorkspaceDir+"/dir")
		if err != nil || len(entries) != 1 || entries[0].Name() != "from-tool.txt" {
			t.Fatalf("ReadDir: %v %v", entries, err)
		}
		// Another thread's write through the tool is an edit of this file.
		err = sb.FS().Edit(t.Context(), sandbox.OutputsDir+"/from-bash.txt", func(old []byte, exists bool) ([]byte, error) {
			return append(old, "tool\n"...), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := run(t, sb, "cat /mnt/user-data/outputs/from-bash.txt", time.Minute); out != "bash\ntool\n" {
			t.Fatalf("bash reads %q", out)
		}
	})
	t.Run("ReadOnlyMount", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		err := sb.FS().Edit(t.Context(), sandbox.SkillsDir+"/skill.md", func([]byte, bool) ([]byte, error) { return []byte("x"), nil })
		if !errors.Is(err, sandbox.ErrReadOnly) {
			t.Fatalf("file tool write to skills: %v", err)
		}
		if opts.ReadOnlyEnforced {
			if out, res := run(t, sb, "echo x > /mnt/skills/skill.md", time.Minute); res.ExitCode == 0 {
				t.Fatalf("bash wrote to skills: %q", out)
			}
		}
		if got := read(t, sb, sandbox.SkillsDir+"/skill.md"); got != "skill\n" {
			t.Fatalf("skill.md = %q", got)
		}
	})
	t.Run("TimeoutKillsBackgroundChildren", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		// A background child that keeps the output open and ticks a file.
		cmd := "(while :; do echo t >> tick; sleep 0.1; done) & echo started; sleep 300"
		out, res := run(t, sb, cmd, 2*time.Second)
		if !res.TimedOut || !strings.Contains(out, "started") {
			t.Fatalf("res %+v out %q", res, out)
		}
		assertStopped(t, sb, sandbox.WorkspaceDir+"/tick")
	})
	t.Run("ExitKillsBackgroundChildren", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		out, res := run(t, sb, "(while :; do echo t >> tick2; sleep 0.1; done) & sleep 0.5; echo done", time.Minute)
		if res.ExitCode != 0 || out != "done\n" {
			t.Fatalf("res %+v out %q", res, out)
		}
		assertStopped(t, sb, sandbox.WorkspaceDir+"/tick2")
	})
	t.Run("CancelKillsCommand", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			for range 600 {
				if _, err := sb.FS().Stat(t.Context(), sandbox.WorkspaceDir+"/tick3"); err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
		}()
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "while :; do echo t >> tick3; sleep 0.1; done", Timeout: time.Minute, Output: io.Discard})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		assertStopped(t, sb, sandbox.WorkspaceDir+"/tick3")
	})
	t.Run("ConcurrentEdits", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		const n = 20
		errs := make(chan error, n)
		for range n {
			go func() {
				errs <- sb.FS().Edit(t.Context(), sandbox.WorkspaceDir+"/count", func(old []byte, _ bool) ([]byte, error) {
					return append(old, 'x'), nil
				})
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if out, _ := run(t, sb, "wc -c < count", time.Minute); strings.TrimSpace(out) != strconv.Itoa(n) {
			t.Fatalf("count has %q bytes, want %d", out, n)
		}
	})
	t.Run("ShellState", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		shell := func(cmd string, reset bool) string {
			t.Helper()
			out, res := runReq(t, sb, sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Shell: true, ResetState: reset})
			if res.ExitCode != 0 {
				t.Fatalf("%s: exit %d %q", cmd, res.ExitCode, out)
			}
			return out
		}
		const probe = `pwd; echo "$FOO"`
		if out := shell("cd /mnt/user-data/outputs && export FOO=bar", false); out != "" {
			t.Fatalf("%q", out)
		}
		kept := sandbox.OutputsDir + "\nbar\n"
		if out := shell(probe, false); out != kept {
			t.Fatalf("the next command: %q, want %q", out, kept)
		}
		// A command without Shell starts afresh and changes nothing.
		if out, _ := run(t, sb, probe+"; cd /; export FOO=other", time.Minute); out != sandbox.WorkspaceDir+"\n\n" {
			t.Fatalf("without Shell: %q", out)
		}
		if out := shell(probe, false); out != kept {
			t.Fatalf("after a command without Shell: %q, want %q", out, kept)
		}
		fresh := sandbox.WorkspaceDir + "\n\n"
		if out := shell(probe, true); out != fresh {
			t.Fatalf("ResetState: %q, want %q", out, fresh)
		}
		if out := shell(probe, false); out != fresh {
			t.Fatalf("after ResetState: %q, want %q", out, fresh)
		}
	})
	t.Run("ExecEnv", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		// Without Shell: over the command's own environment.
		env := []string{"FOO=one two", "LANG=C"}
		if out, res := runReq(t, sb, sandbox.ExecRequest{Command: `echo "$FOO|$LANG"`, Timeout: time.Minute, Env: env}); out != "one two|C\n" || res.ExitCode != 0 {
			t.Fatalf("without Shell: %q %+v", out, res)
		}
		// With Shell: over the kept state's, as if exported before the
		// command; what the command leaves is the next state.
		shell := func(cmd string, env ...string) string {
			t.Helper()
			out, res := runReq(t, sb, sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Shell: true, Env: env})
			if res.ExitCode != 0 {
				t.Fatalf("%s: exit %d %q", cmd, res.ExitCode, out)
			}
			return out
		}
		shell("export FOO=kept BAR=kept")
		if out := shell(`echo "$FOO|$BAR"`, "FOO=over"); out != "over|kept\n" {
			t.Fatalf("with Shell: %q", out)
		}
		if out := shell(`echo "$FOO"`); out != "over\n" {
			t.Fatalf("the next state: %q", out)
		}
		// Env runs no code: a BASH_ENV it sets is held back like the
		// state's (SPEC §16).
		write(t, sb, sandbox.WorkspaceDir+"/rc", "echo ran-bash-env\n")
		if out := shell("echo ok", "BASH_ENV="+sandbox.WorkspaceDir+"/rc"); out != "ok\n" {
			t.Fatalf("BASH_ENV in Env: %q", out)
		}
		// A name no shell variable has is refused, and nothing runs.
		for _, bad := range []string{"1X=y", "NOEQUALS", "A B=c"} {
			c := sandbox.NewCapture(1<<10, 1<<10)
			if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ran", Timeout: time.Minute, Env: []string{bad}, Output: c}); err == nil {
				h, _, _ := c.Result()
				t.Fatalf("Env %q: no error (output %q)", bad, h)
			}
		}
	})
	t.Run("PathsOutsideRefusedForMounts", func(t *testing.T) {
		t.Parallel()
		sb := newSandbox(t)
		name, _ := sandbox.Clean("../../user-data/workspace/../../skills/../user-data/workspace/ok.txt")
		write(t, sb, name, "ok")
		if got := read(t, sb, sandbox.WorkspaceDir+"/ok.txt"); got != "ok" {
			t.Fatalf("%q", got)
		}
	})
}

func run(t *testing.T, sb sandbox.Sandbox, cmd string, timeout time.Duration) (string, sandbox.ExecResult) {
	t.Helper()
	return runReq(t, sb, sandbox.ExecRequest{Command: cmd, Timeout: timeout})
}

// runReq runs req, with its output captured and masked.
func runReq(t *testing.T, sb sandbox.Sandbox, req sandbox.ExecRequest) (string, sandbox.ExecResult) {
	t.Helper()
	c := sandbox.NewCapture(1<<20, 1<<20)
	req.Output = c
	res, err := sb.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("%s: %v", req.Command, err)
	}
	h, tl, _ := c.Result()
	return mask(sb, string(h)+string(tl)), res
}

// mask is what the agent would see of s: host paths masked (host bash
// prints them).
func mask(sb sandbox.Sandbox, s string) string {
	var pairs []masking.Pair
	for _, m := range sb.Mounts() {
		pairs = append(pairs, masking.Pair{Host: m.Host, Virtual: m.Virtual})
	}
	return masking.New(pairs...).Mask(s)
}

func write(t *testing.T, sb sandbox.Sandbox, name, content string) {
	t.Helper()
	err := sb.FS().Edit(t.Context(), name, func([]byte, bool) ([]byte, error) { return []byte(content), nil })
	if err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

func read(t *testing.T, sb sandbox.Sandbox, name string) string {
	t.Helper()
	f, err := sb.FS().Open(t.Context(), name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assertStopped checks that nothing writes to the file any more.
func assertStopped(t *testing.T, sb sandbox.Sandbox, name string) {
	t.Helper()
	size := func() int64 {
		fi, err := sb.FS().Stat(t.Context(), name)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	time.Sleep(300 * time.Millisecond) // a last tick in flight may land
	before := size()
	time.Sleep(time.Second)
	if after := size(); after != before {
		t.Fatalf("%s still grows (%d -> %d bytes): a process of the command survived", name, before, after)
	}
}
