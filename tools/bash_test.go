package tools_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

func TestBash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(f *fixture)
		args  map[string]any
		want  string // exact text
	}{
		{name: "output and exit code", args: map[string]any{"command": "echo hi"}, want: "hi\n[exit code 0]"},
		{name: "no output", args: map[string]any{"command": "true"}, want: "[exit code 0]"},
		{name: "output without a final newline", args: map[string]any{"command": "printf abc"}, want: "abc\n[exit code 0]"},
		{name: "non-zero exit", args: map[string]any{"command": "echo nope; exit 3"}, want: "nope\n[exit code 3]"},
		{name: "cwd is the workspace", args: map[string]any{"command": "pwd"}, want: ws + "\n[exit code 0]"},
		{name: "physical cwd is masked too", args: map[string]any{"command": "pwd -P"}, want: ws + "\n[exit code 0]"},
		{name: "HOME is masked", args: map[string]any{"command": `echo "$HOME"`}, want: ws + "\n[exit code 0]"},
		{
			name:  "relative path",
			setup: func(f *fixture) { f.write("x.txt", "relative\n") },
			args:  map[string]any{"command": "cat x.txt"},
			want:  "relative\n[exit code 0]",
		},
		{
			name:  "virtual path in the command",
			setup: func(f *fixture) { f.write("x.txt", "virtual\n") },
			args:  map[string]any{"command": "cat /mnt/user-data/workspace/x.txt"},
			want:  "virtual\n[exit code 0]",
		},
		{
			name: "write to outputs through its virtual path",
			args: map[string]any{"command": "echo done > /mnt/user-data/outputs/r.txt && cat /mnt/user-data/outputs/r.txt"},
			want: "done\n[exit code 0]",
		},
		{
			name: "stdout and stderr both captured, in order",
			args: map[string]any{"command": "echo out; echo err >&2; echo out2"},
			want: "out\nerr\nout2\n[exit code 0]",
		},
		{
			name: "stderr only and failure",
			args: map[string]any{"command": "ls /mnt/user-data/workspace/nope"},
			want: "", // checked below: exit code 2, message masked
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			res := f.call("bash", tc.args)
			got := resultText(t, res)
			if res.IsError {
				t.Fatalf("isError for a command that ran: %s", got)
			}
			if tc.want == "" {
				if !strings.HasSuffix(got, "[exit code 2]") || !strings.Contains(got, ws+"/nope") {
					t.Errorf("got %q, want ls's error naming %s and [exit code 2]", got, ws+"/nope")
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBashExitCodeIsNotAnError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, code := range []int{0, 1, 42, 255} {
		res := f.call("bash", map[string]any{"command": fmt.Sprintf("exit %d", code)})
		got := resultText(t, res)
		if res.IsError {
			t.Errorf("exit %d: isError set", code)
		}
		if want := fmt.Sprintf("[exit code %d]", code); got != want {
			t.Errorf("exit %d: got %q, want %q", code, got, want)
		}
		if res.ExitCode == nil || *res.ExitCode != code {
			t.Errorf("exit %d: Result.ExitCode = %v", code, res.ExitCode)
		}
	}
}

func TestBashTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A background child holding the pipe must not keep the call alive.
	res := f.call("bash", map[string]any{"command": "echo started; sleep 30 & sleep 30", "timeout": 1})
	got := resultText(t, res)
	if res.IsError {
		t.Fatalf("timeout is an error: %s", got)
	}
	if want := "started\n[timed out after 1s]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !res.TimedOut {
		t.Error("Result.TimedOut is false")
	}
}

// A timeout too small to be a duration is the smallest timeout, never none
// (1e-10 s rounded to 0 used to run the command unbounded).
func TestBashTinyTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res := f.call("bash", map[string]any{"command": "sleep 3; echo survived", "timeout": 1e-10})
	if got := resultText(t, res); got != "[timed out after 1s]" || res.IsError {
		t.Errorf("got %q (isError %v), want [timed out after 1s]", got, res.IsError)
	}
}

// processGone waits until pid has exited (or is a zombie).
func processGone(pid int) bool {
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		// Field 3, after "(comm)", is the state.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X') {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestBashKillsBackgroundChildren(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	got := f.ok("bash", map[string]any{"command": "sleep 300 >/dev/null 2>&1 & echo $!"})
	pidText, ok := strings.CutSuffix(got, "\n[exit code 0]")
	if !ok {
		t.Fatalf("unexpected output %q", got)
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatalf("no pid in %q", got)
	}
	if !processGone(pid) {
		t.Errorf("background child %d still runs after the command ended", pid)
	}
}

func TestBashCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := newReq("bash", map[string]any{"command": "sleep 30"})
	res := toolByName(t, "bash").Handle(ctx, f.env, req)
	got := resultText(t, res)
	if !res.IsError || !strings.HasPrefix(got, "Error: ") {
		t.Errorf("cancelled call: isError=%v text %q", res.IsError, got)
	}
}

// t.Setenv: not parallel.
func TestBashEnvScrubbed(t *testing.T) {
	const secret = "s3cr3t-value-do-not-leak"
	t.Setenv("SANDBOX_MCP_SECRET_TEST", secret)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	f := newFixture(t)
	got := f.ok("bash", map[string]any{"command": "env"})
	if strings.Contains(got, "SANDBOX_MCP_SECRET_TEST") || strings.Contains(got, "AWS_SECRET_ACCESS_KEY") || strings.Contains(got, secret) {
		t.Errorf("server environment leaked into the command:\n%s", got)
	}
	for _, k := range []string{"PATH=", "HOME=", "LANG=", "TERM=", "TMPDIR="} {
		if !regexp.MustCompile(`(?m)^` + k).MatchString(got) {
			t.Errorf("env lacks %s:\n%s", k, got)
		}
	}

	// Variables on the allow-list do reach the command.
	f2 := newFixture(t, func(c *local.Config) { c.EnvInherit = []string{"SANDBOX_MCP_SECRET_TEST"} })
	if got := f2.ok("bash", map[string]any{"command": `echo "$SANDBOX_MCP_SECRET_TEST"`}); got != secret+"\n[exit code 0]" {
		t.Errorf("allow-listed variable: got %q", got)
	}
}

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

var truncNotice = regexp.MustCompile(`\n\[\.\.\. (\d+) bytes of output truncated(?:; the whole output is in (\S+) \(read it with read_file and line ranges\))? \.\.\.\]\n`)

func TestBashMiddleTruncation(t *testing.T) {
	t.Parallel()
	const n = 20000
	full := seqOutput(n)
	for _, limit := range []int{1000, 5000, 30000} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.env.Limits.BashOutputMaxChars = limit
			res := f.call("bash", map[string]any{"command": fmt.Sprintf("seq 1 %d", n)})
			got := resultText(t, res)
			body, ok := strings.CutSuffix(got, "[exit code 0]")
			if !ok {
				t.Fatalf("no exit code at the end: %q", got[max(0, len(got)-100):])
			}
			if len(body) > limit+1 { // +1: the newline before [exit code]
				t.Errorf("output is %d chars, limit %d", len(body), limit)
			}
			if !strings.HasPrefix(body, "1\n2\n3\n") {
				t.Errorf("head lost: %q", body[:min(40, len(body))])
			}
			if !strings.HasSuffix(body, fmt.Sprintf("%d\n%d\n", n-1, n)) {
				t.Errorf("tail lost: %q", body[max(0, len(body)-40):])
			}
			loc := truncNotice.FindStringIndex(body)
			if loc == nil {
				t.Fatalf("no truncation notice in output")
			}
			head, tail := body[:loc[0]], body[loc[1]:]
			if !strings.HasPrefix(full, head) || !strings.HasSuffix(full, tail) {
				t.Errorf("head/tail are not the head/tail of the real output")
			}
			// The cut never splits a line: the head ends where a line ends,
			// the tail starts where one starts.
			if !strings.HasPrefix(full, head+"\n") || !strings.HasSuffix(full, "\n"+tail) {
				t.Errorf("the cut splits a line: head ends %q, tail starts %q", head[max(0, len(head)-12):], tail[:min(12, len(tail))])
			}
			if len(head) < limit/4 || len(tail) < limit/4 {
				t.Errorf("unbalanced cut: head %d, tail %d chars of limit %d", len(head), len(tail), limit)
			}
			if !res.Truncated {
				t.Error("Result.Truncated is false")
			}
		})
	}
}

// The notice says how many bytes are missing between head and tail.
func TestBashTruncationNoticeCount(t *testing.T) {
	t.Parallel()
	const n, limit = 20000, 1000
	full := seqOutput(n)
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = limit
	got := f.ok("bash", map[string]any{"command": fmt.Sprintf("seq 1 %d", n)})
	body := strings.TrimSuffix(got, "[exit code 0]")
	m := truncNotice.FindStringSubmatchIndex(body)
	if m == nil {
		t.Fatalf("no truncation notice")
	}
	said, _ := strconv.Atoi(body[m[2]:m[3]])
	kept := len(body[:m[0]]) + len(body[m[1]:])
	if missing := len(full) - kept; said != missing {
		t.Errorf("notice says %d bytes truncated, but %d of the %d bytes are missing (head %d + tail %d kept)",
			said, missing, len(full), len(body[:m[0]]), len(body[m[1]:]))
	}
}

func TestBashNoTruncationUnderLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = 1000
	full := seqOutput(100) // 292 bytes
	got := f.ok("bash", map[string]any{"command": "seq 1 100"})
	if got != full+"[exit code 0]" {
		t.Errorf("short output changed: %q", got)
	}
}

func TestBashInvalidUTF8(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	got := f.ok("bash", map[string]any{"command": `printf 'a\377\376b\n'`})
	if !utf8.ValidString(got) {
		t.Errorf("output is not valid UTF-8: %q", got)
	}
	if !strings.HasPrefix(got, "a\uFFFD") || !strings.Contains(got, "b\n[exit code 0]") {
		t.Errorf("got %q", got)
	}
}

func TestBashErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"empty command", map[string]any{"command": "  "}, "command"},
		{"missing command", map[string]any{}, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			if got := f.fail("bash", tc.args); !strings.Contains(got, tc.want) {
				t.Errorf("error %q does not mention %q", got, tc.want)
			}
		})
	}
}

func TestBashDisabledWithoutAllowHostBash(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *local.Config) { c.AllowHostBash = false })
	res := f.call("bash", map[string]any{"command": "touch /mnt/user-data/workspace/ran"})
	got := resultText(t, res)
	if !res.IsError {
		t.Fatalf("bash ran without --allow-host-bash: %s", got)
	}
	if !strings.HasPrefix(got, "Error: ") || !strings.Contains(got, "--allow-host-bash") {
		t.Errorf("error %q does not name --allow-host-bash", got)
	}
	if !res.Denied {
		t.Error("Result.Denied is false")
	}
	if _, err := os.Stat(f.host("ran")); err == nil {
		t.Error("the command ran")
	}
}

func TestBashProgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	var msgs []string
	env := *f.env
	env.Progress = func(_ float64, msg string) {
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, msg)
	}
	got := resultText(t, f.callEnv(&env, "bash", map[string]any{"command": "echo tick; pwd -P; sleep 3"}))
	if !strings.HasSuffix(got, "[exit code 0]") {
		t.Fatalf("got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) == 0 {
		t.Fatal("no progress notification during a 3 s command")
	}
	for _, m := range msgs {
		f.noHostPath("progress message", m)
	}
	if last := msgs[len(msgs)-1]; last != ws {
		t.Errorf("progress message %q, want the latest output line %q", last, ws)
	}
}

// newReq builds a request for calls that bypass the fixture.
func newReq(name string, args map[string]any) (req mcp.CallToolRequest) {
	req.Params.Name = name
	req.Params.Arguments = args
	return req
}

// The bash limit counts characters, as SPEC's bash_output_max_chars says:
// multibyte output keeps as many characters as ASCII output would.
func TestBashTruncationMultibyte(t *testing.T) {
	t.Parallel()
	const limit = 1000
	f := newFixture(t)
	f.env.Limits.BashOutputMaxChars = limit
	got := f.ok("bash", map[string]any{"command": `for i in $(seq 1 3000); do printf 'é'; done; echo`})
	body := strings.TrimSuffix(got, "[exit code 0]")
	if n := utf8.RuneCountInString(body); n > limit+1 || n < limit-20 {
		t.Errorf("output is %d characters (%d bytes), limit %d", n, len(body), limit)
	}
	m := truncNotice.FindStringIndex(body)
	if m == nil {
		t.Fatalf("no truncation notice: %q", body)
	}
	if h, tl := body[:m[0]], body[m[1]:]; !strings.HasPrefix(h, "éé") || !strings.Contains(tl, "éé") || strings.Contains(body, "\uFFFD") {
		t.Errorf("head %q / tail %q", h[:min(20, len(h))], tl[:min(20, len(tl))])
	}
}
