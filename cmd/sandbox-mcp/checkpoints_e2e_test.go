package main

import (
	"context"
	"net/http"

	"bytes"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The checkpoint tools (SPEC §18) through the real binary and a real
// client, on the local provider in bubblewrap (bash runs as it would for
// a user) — and the same undo on docker (TestE2EDockerCheckpoints).

var savedRe = regexp.MustCompile(`^\[(?:checkpoint (\d+) saved|nothing changed since checkpoint (\d+))`)

// checkpointID saves a checkpoint and answers its id.
func checkpointID(t *testing.T, call func(string, map[string]any) (string, bool), message string) string {
	t.Helper()
	out, isErr := call("checkpoint", map[string]any{"message": message})
	m := savedRe.FindStringSubmatch(out)
	if isErr || m == nil {
		t.Fatalf("checkpoint: %q (isError %v)", out, isErr)
	}
	return m[1] + m[2]
}

// mustCall calls a tool that must succeed.
func mustCall(t *testing.T, call func(string, map[string]any) (string, bool), name string, args map[string]any) string {
	t.Helper()
	out, isErr := call(name, args)
	if isErr {
		t.Fatalf("%s(%v): %s", name, args, out)
	}
	return out
}

var undoRe = regexp.MustCompile(`\[undo: restore id (\d+) `)

// undoScenario: files of every kind saved, an rm -rf undone, an
// overwritten file undone, a restore undone. ws is the workspace's host
// directory.
func undoScenario(t *testing.T, call func(string, map[string]any) (string, bool), ws string) {
	mustCall(t, call, "write_file", map[string]any{"path": "a.txt", "content": "one\ntwo\nthree\n"})
	mustCall(t, call, "bash", map[string]any{"command": "mkdir -p empty/inner sub && printf 'x\\000y' > bin.dat && printf '#!/bin/sh\\n' > run.sh && chmod 755 run.sh && chmod 700 sub && ln -s a.txt link && ln -s ../../.. up"})
	base := checkpointID(t, call, "base")
	if out := mustCall(t, call, "checkpoints", nil); !strings.Contains(out, "base") || !strings.Contains(out, base+" ") {
		t.Fatalf("checkpoints does not list %s base:\n%s", base, out)
	}
	again, _ := call("checkpoint", map[string]any{"message": "again"})
	if want := "[nothing changed since checkpoint " + base + ": no new checkpoint made]"; again != want {
		t.Errorf("checkpoint with nothing changed = %q, want %q", again, want)
	}

	// rm -rf, and an overwrite: undone.
	mustCall(t, call, "bash", map[string]any{"command": "rm -rf /mnt/user-data/workspace/* && echo 'ONE' > /mnt/user-data/workspace/new.txt"})
	diff := mustCall(t, call, "diff", map[string]any{"from": base})
	for _, want := range []string{"deleted  /mnt/user-data/workspace/a.txt", "deleted  /mnt/user-data/workspace/empty/", "deleted  /mnt/user-data/workspace/link  (symlink to a.txt)",
		"added    /mnt/user-data/workspace/new.txt", "--- /mnt/user-data/workspace/a.txt\t(checkpoint " + base + ")", "+++ /dev/null", "-two",
		"deleted  /mnt/user-data/workspace/bin.dat  (3 bytes)"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff from %s lacks %q:\n%s", base, want, diff)
		}
	}
	out := mustCall(t, call, "restore", map[string]any{"id": base})
	m := undoRe.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "Restored checkpoint "+base) {
		t.Fatalf("restore: %s", out)
	}
	undo := m[1]
	checkTree := func() {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(ws, "a.txt")); err != nil || string(b) != "one\ntwo\nthree\n" {
			t.Errorf("a.txt = %q, %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "bin.dat")); !bytes.Equal(b, []byte("x\x00y")) {
			t.Errorf("bin.dat = %q", b)
		}
		if fi, err := os.Stat(filepath.Join(ws, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("run.sh: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Join(ws, "sub")); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("sub: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Join(ws, "empty", "inner")); err != nil || !fi.IsDir() {
			t.Errorf("empty/inner: %v %v", fi, err)
		}
		for link, target := range map[string]string{"link": "a.txt", "up": "../../.."} {
			if got, err := os.Readlink(filepath.Join(ws, link)); err != nil || got != target {
				t.Errorf("%s -> %q, %v; want %q", link, got, err, target)
			}
		}
		if _, err := os.Lstat(filepath.Join(ws, "new.txt")); err == nil {
			t.Error("new.txt, added after the checkpoint, is still there")
		}
	}
	checkTree()
	// The restore is undone: back to the rm -rf'ed tree.
	mustCall(t, call, "restore", map[string]any{"id": undo})
	if b, err := os.ReadFile(filepath.Join(ws, "new.txt")); err != nil || string(b) != "ONE\n" {
		t.Errorf("after undoing the restore, new.txt = %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "a.txt")); err == nil {
		t.Error("after undoing the restore, a.txt is back")
	}
	mustCall(t, call, "restore", map[string]any{"id": base})
	checkTree()

	// An overwritten file: the automatic checkpoint before the write (the
	// restored state, saved when the restore ended) puts it back.
	mustCall(t, call, "write_file", map[string]any{"path": "a.txt", "content": "clobbered\n"})
	list := strings.Split(mustCall(t, call, "checkpoints", nil), "\n")
	newest, before := list[len(list)-1], list[len(list)-2]
	if !strings.Contains(newest, "auto") || !strings.HasSuffix(newest, "after write_file: a.txt") || !strings.HasSuffix(before, "after restore: "+base) {
		t.Fatalf("checkpoints around the overwrite:\n%s", strings.Join(list, "\n"))
	}
	if d := mustCall(t, call, "diff", map[string]any{"from": strings.Fields(before)[0]}); !strings.Contains(d, "-one\n-two\n-three\n+clobbered") {
		t.Errorf("diff of the overwrite:\n%s", d)
	}
	mustCall(t, call, "restore", map[string]any{"id": strings.Fields(before)[0]})
	checkTree()
}

func TestE2ECheckpointsUndoLocal(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{thread: "undo", isolation: "bwrap"})
	undoScenario(t, p.call, p.workspace())
}

// The automatic checkpoint taken before a bash that deletes: what it
// deleted is in the newest checkpoint, whoever took it.
func TestE2EAutoCheckpointBeforeDelete(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{thread: "auto", isolation: "bwrap"})
	mustCall(t, p.call, "write_file", map[string]any{"path": "keep.txt", "content": "precious\n"})
	mustCall(t, p.call, "str_replace", map[string]any{"path": "keep.txt", "old_str": "precious", "new_str": "very precious"})
	mustCall(t, p.call, "bash", map[string]any{"command": "rm keep.txt"})
	// The newest checkpoint holds the state after the rm (taken when it
	// ended); the one before it, the state the rm started from.
	list := mustCall(t, p.call, "checkpoints", nil)
	lines := strings.Split(list, "\n")
	if !strings.Contains(lines[len(lines)-1], "auto   +0 ~0 -1  after bash: rm keep.txt") {
		t.Fatalf("newest checkpoint is not the automatic one after the rm:\n%s", list)
	}
	before := strings.Fields(lines[len(lines)-2])
	if !strings.Contains(lines[len(lines)-2], "auto") || !strings.Contains(lines[len(lines)-2], "after str_replace: keep.txt") {
		t.Fatalf("no automatic checkpoint of the state before the rm:\n%s", list)
	}
	d := mustCall(t, p.call, "diff", map[string]any{"from": before[0]})
	if !strings.Contains(d, "deleted  /mnt/user-data/workspace/keep.txt") || !strings.Contains(d, "-very precious") {
		t.Fatalf("diff from the checkpoint before the rm:\n%s", d)
	}
	mustCall(t, p.call, "restore", map[string]any{"id": before[0]})
	if b, err := os.ReadFile(filepath.Join(p.workspace(), "keep.txt")); err != nil || string(b) != "very precious\n" {
		t.Fatalf("keep.txt after restore = %q, %v", b, err)
	}
}

// A restore is refused while a job writes, naming it; force kills it
// first.
func TestE2ERestoreRefusedWhileJobRuns(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{thread: "jobs", isolation: "bwrap"})
	mustCall(t, p.call, "write_file", map[string]any{"path": "f.txt", "content": "v1\n"})
	id := checkpointID(t, p.call, "v1")
	out := mustCall(t, p.call, "bash", map[string]any{"command": "while :; do date +%N > tick; sleep 0.05; done", "run_in_background": true})
	if !strings.Contains(out, "[job j1 started]") {
		t.Fatalf("background job: %s", out)
	}
	out, isErr := p.call("restore", map[string]any{"id": id})
	if !isErr || !strings.Contains(out, "j1 (while :; do date") || !strings.Contains(out, "force: true") {
		t.Fatalf("restore while a job runs = %q (isError %v), want a refusal naming j1", out, isErr)
	}
	out = mustCall(t, p.call, "restore", map[string]any{"id": id, "force": true})
	if !strings.Contains(out, "[killed job(s) j1 first]") || !strings.Contains(out, "deleted  /mnt/user-data/workspace/tick") {
		t.Fatalf("forced restore: %s", out)
	}
	if jobs := mustCall(t, p.call, "bash_output", map[string]any{}); strings.Contains(jobs, "running") {
		t.Fatalf("job still running after a forced restore: %s", jobs)
	}
	if _, err := os.Lstat(filepath.Join(p.workspace(), "tick")); err == nil {
		t.Fatal("tick is back: the killed job still wrote after the restore")
	}
}

// Writes racing a checkpoint lose nothing: every write lands, and the
// checkpoint holds each file whole or not at all.
func TestE2EConcurrentWritesDuringCheckpoint(t *testing.T) {
	t.Parallel()
	p := start(t, opts{thread: "race", noBash: true})
	for i := range 200 {
		mustCall(t, p.call, "write_file", map[string]any{"path": "bulk/" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "-" + itoa(i), "content": strings.Repeat("z", 3000)})
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 5 {
				mustCall(t, p.call, "write_file", map[string]any{"path": "w/" + itoa(i), "content": "round " + itoa(j) + "\n"})
			}
		}()
	}
	ids := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); ids <- checkpointID(t, p.call, "racing") }()
	}
	wg.Wait()
	close(ids)
	for i := range 16 {
		if b, err := os.ReadFile(filepath.Join(p.workspace(), "w", itoa(i))); err != nil || string(b) != "round 4\n" {
			t.Errorf("w/%d = %q, %v: a write was lost", i, b, err)
		}
	}
	for id := range ids {
		d := mustCall(t, p.call, "diff", map[string]any{"from": id, "max_results": 100000})
		for _, l := range strings.Split(d, "\n") {
			if strings.HasPrefix(l, "-round") && !regexp.MustCompile(`^-round [0-4]$`).MatchString(l) {
				t.Errorf("checkpoint %s holds a torn file: %q", id, l)
			}
		}
	}
}

func itoa(i int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(i)) }

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// Hostile arguments: ids that are paths, huge messages, a symlink planted
// where a directory was.
func TestE2ECheckpointsHostile(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{thread: "hostile", isolation: "bwrap"})
	outside := t.TempDir()
	mustCall(t, p.call, "bash", map[string]any{"command": "mkdir -p d && echo inside > d/f"})
	id := checkpointID(t, p.call, "with d")
	for _, bad := range []string{"../1", "1/../2", "0", "-1", "1e3", " 1", id + "\x00", strings.Repeat("9", 30)} {
		out, isErr := p.call("restore", map[string]any{"id": bad})
		if !isErr || !strings.Contains(out, "not a checkpoint id") {
			t.Errorf("restore id %q = %q (isError %v)", bad, out, isErr)
		}
		out, isErr = p.call("diff", map[string]any{"from": bad})
		if !isErr || !strings.Contains(out, "argument") && !strings.Contains(out, "from") {
			t.Errorf("diff from %q = %q (isError %v)", bad, out, isErr)
		}
	}
	if out, isErr := p.call("restore", map[string]any{"id": "999"}); !isErr || out != "Error: no checkpoint 999 in this thread (checkpoints lists them)" {
		t.Errorf("restore of a missing id = %q (isError %v)", out, isErr)
	}
	if out, isErr := p.call("restore", map[string]any{"id": 3}); !isErr || !strings.Contains(out, `argument "id" must be a string`) {
		t.Errorf("restore id 3 (a number) = %q", out)
	}
	if out, isErr := p.call("restore", map[string]any{"id": id, "forse": true}); !isErr || !strings.Contains(out, `unknown argument "forse"`) {
		t.Errorf("restore with a mistyped argument = %q", out)
	}
	if out, isErr := p.call("checkpoint", map[string]any{"message": strings.Repeat("m", 5000)}); !isErr || !strings.Contains(out, `"message" is 5000 bytes`) {
		t.Errorf("huge message = %q", out)
	}
	// d becomes a symlink to a host directory outside: the restore
	// replaces the link, never writes through it.
	mustCall(t, p.call, "bash", map[string]any{"command": "rm -rf d && ln -s " + outside + " d"})
	mustCall(t, p.call, "restore", map[string]any{"id": id})
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the restore wrote through the planted symlink: %v", ents)
	}
	if fi, err := os.Lstat(filepath.Join(p.workspace(), "d")); err != nil || !fi.IsDir() {
		t.Fatalf("d after restore: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(p.workspace(), "d", "f")); string(b) != "inside\n" {
		t.Fatalf("d/f after restore = %q", b)
	}
}

// cli runs the binary's checkpoint commands.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// The command line: list, restore (refused while a job runs, --force),
// fork; clear errors for unknown threads and ids.
func TestE2ECheckpointsCommandLine(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	state := filepath.Join(t.TempDir(), "state")
	p := start(t, opts{stateDir: state, thread: "cli", isolation: "bwrap"})
	mustCall(t, p.call, "write_file", map[string]any{"path": "doc.txt", "content": "v1\n"})
	id := checkpointID(t, p.call, "v1 by the agent")
	mustCall(t, p.call, "write_file", map[string]any{"path": "doc.txt", "content": "v2\n"})
	p.close()

	flags := []string{"--state-dir", state, "--isolation", "bwrap"}
	out, stderr, code := cli(t, append([]string{"checkpoints", "cli"}, flags...)...)
	if code != 0 || !strings.Contains(out, "v1 by the agent") || !strings.Contains(out, "thread cli:") {
		t.Fatalf("checkpoints cli: %d %q %q", code, out, stderr)
	}
	out, stderr, code = cli(t, append([]string{"restore", "cli", id}, flags...)...)
	if code != 0 || !strings.Contains(out, "restored to checkpoint "+id) || !strings.Contains(out, "undo: sandbox-mcp restore cli ") {
		t.Fatalf("restore cli %s: %d %q %q", id, code, out, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(state, "threads", "cli", "user-data", "workspace", "doc.txt")); string(b) != "v1\n" {
		t.Fatalf("doc.txt after the command line's restore = %q", b)
	}
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"checkpoints", "nosuch"}, "no thread nosuch in", 1},
		{[]string{"checkpoints", "../x"}, "want a thread id", 1},
		{[]string{"restore", "cli", "77"}, "no checkpoint 77 in thread cli", 1},
		{[]string{"restore", "cli", "../1"}, "not a checkpoint id", 1},
		{[]string{"restore", "cli"}, "want 2 argument(s)", 2},
		{[]string{"fork", "cli@" + id, "cli"}, "the new thread must be another thread", 1},
		{[]string{"fork", "cli", "other"}, "want THREAD@ID", 1},
		{[]string{"fork", "cli@99", "other"}, "no checkpoint 99 in thread cli", 1},
	} {
		_, stderr, code := cli(t, append(c.args, flags...)...)
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line with %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(state, "threads", "other")); err == nil {
		t.Error("a failed fork left the new thread behind")
	}
	// Fork: a new thread from the checkpoint; not onto an existing one.
	out, stderr, code = cli(t, append([]string{"fork", "cli@" + id, "copy"}, flags...)...)
	if code != 0 || !strings.Contains(out, "thread copy made from cli@"+id) {
		t.Fatalf("fork: %d %q %q", code, out, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(state, "threads", "copy", "user-data", "workspace", "doc.txt")); string(b) != "v1\n" {
		t.Fatalf("the fork's doc.txt = %q", b)
	}
	_, stderr, code = cli(t, append([]string{"fork", "cli@" + id, "copy"}, flags...)...)
	if code != 1 || !strings.Contains(stderr, "exists already") {
		t.Fatalf("fork onto an existing thread: %d %q", code, stderr)
	}
	// The fork is a thread like any: a server serves it, its files and
	// its first checkpoint.
	q := start(t, opts{stateDir: state, thread: "copy", isolation: "bwrap"})
	if out := mustCall(t, q.call, "read_file", map[string]any{"path": "doc.txt"}); out != "v1\n" {
		t.Fatalf("read_file in the fork = %q", out)
	}
	if out := mustCall(t, q.call, "checkpoints", nil); !strings.Contains(out, "fork of cli@"+id) {
		t.Fatalf("the fork's checkpoints:\n%s", out)
	}
	// bash writes the forked files (they are the sandbox user's).
	mustCall(t, q.call, "bash", map[string]any{"command": "echo more >> doc.txt"})
	q.close()
}

// headerRT sets a token and headers on every request.
type headerRT struct {
	token  string
	header map[string]string
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Fork over HTTP: X-Thread-Fork on the requests naming a new thread makes
// it start from the checkpoint — the same token's thread, never another's.
func TestE2EForkOverHTTP(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http: {auth_tokens: [first, second]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	session := func(token string, header map[string]string) func(string, map[string]any) (string, bool) {
		t.Helper()
		hc := &http.Client{Transport: headerRT{token: token, header: header}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, p.stderr)
		}
		t.Cleanup(func() { cs.Close() })
		return caller(t, t.Context(), cs, p.stderr)
	}
	src := session("second", map[string]string{"X-Thread-ID": "src"})
	mustCall(t, src, "write_file", map[string]any{"path": "plan.md", "content": "step 1\n"})
	id := checkpointID(t, src, "plan")
	mustCall(t, src, "write_file", map[string]any{"path": "plan.md", "content": "step 2\n"})

	fork := session("second", map[string]string{"X-Thread-ID": "dst", "X-Thread-Fork": "src@" + id})
	if out := mustCall(t, fork, "read_file", map[string]any{"path": "plan.md"}); out != "step 1\n" {
		t.Fatalf("the fork's plan.md = %q", out)
	}
	// Every request carries the header: the fork is made once, then used.
	mustCall(t, fork, "write_file", map[string]any{"path": "plan.md", "content": "fork's own\n"})
	if out := mustCall(t, fork, "read_file", map[string]any{"path": "plan.md"}); out != "fork's own\n" {
		t.Fatalf("the fork's plan.md after a write = %q", out)
	}
	if out := mustCall(t, src, "read_file", map[string]any{"path": "plan.md"}); out != "step 2\n" {
		t.Fatalf("the source's plan.md = %q: the fork touched it", out)
	}
	for _, c := range []struct {
		token  string
		header map[string]string
		want   string
	}{
		// Another token's "src" is another thread: it has none.
		{"first", map[string]string{"X-Thread-ID": "mine", "X-Thread-Fork": "src@" + id}, "Error: X-Thread-Fork: fork src@" + id + ": no thread src"},
		{"second", map[string]string{"X-Thread-ID": "src", "X-Thread-Fork": "dst@1"}, "thread exists already: src"},
		{"second", map[string]string{"X-Thread-ID": "other", "X-Thread-Fork": "src"}, "want THREAD@ID"},
		{"second", map[string]string{"X-Thread-ID": "other", "X-Thread-Fork": "src@../1"}, "is not a checkpoint id"},
		{"second", map[string]string{"X-Thread-ID": "other", "X-Thread-Fork": "src@99"}, "no checkpoint 99 in thread src"},
		// A thread named by its directory (another token's) is refused.
		{"first", map[string]string{"X-Thread-ID": "other", "X-Thread-Fork": "@0123456789abcdef/src@" + id}, "name the thread as its client does"},
	} {
		out, isErr := session(c.token, c.header)("ls", nil)
		if !isErr || !strings.Contains(out, c.want) {
			t.Errorf("%v: %q (isError %v), want an error with %q", c.header, out, isErr, c.want)
		}
	}
}

// A server killed (SIGKILL) while it saves a checkpoint leaves no half
// checkpoint listed: after a restart every listed one reads whole, and
// the next save works.
func TestE2ECheckpointKilledMidSave(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	dir := t.TempDir()
	state, cfg := filepath.Join(dir, "state"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("checkpoints: {auto: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := opts{stateDir: state, thread: "kill9", isolation: "bwrap", extra: []string{"--config", cfg}}
	p := start(t, o)
	mustCall(t, p.call, "write_file", map[string]any{"path": "small.txt", "content": "small\n"})
	first := checkpointID(t, p.call, "small")
	mustCall(t, p.call, "bash", map[string]any{"command": "head -c 150000000 /dev/urandom > big.bin && mkdir many && cd many && seq 1 20000 | xargs touch"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "checkpoint", Arguments: map[string]any{"message": "killed"}})
	}()
	time.Sleep(200 * time.Millisecond)
	p.cmd.Process.Kill()
	<-done
	p.close()
	// The kill came mid-save: what it was writing is still in the
	// store's tmp (the next Open clears it), and no checkpoint names it.
	store := filepath.Join(state, "threads", "kill9", "checkpoints")
	if recs, _ := os.ReadDir(filepath.Join(store, "checkpoints")); len(recs) != 1 {
		t.Logf("the kill came after the save (%d checkpoint files): this run proves less", len(recs))
	}

	q := start(t, o)
	list := mustCall(t, q.call, "checkpoints", nil)
	if !strings.Contains(list, first+" ") {
		t.Fatalf("checkpoint %s lost:\n%s", first, list)
	}
	for _, l := range strings.Split(list, "\n")[1:] {
		id := strings.Fields(l)[0]
		if out, isErr := q.call("diff", map[string]any{"from": id}); isErr {
			t.Errorf("checkpoint %s listed but not readable: %s", id, out)
		}
	}
	last := checkpointID(t, q.call, "after the kill")
	mustCall(t, q.call, "bash", map[string]any{"command": "rm -rf big.bin many"})
	mustCall(t, q.call, "restore", map[string]any{"id": last})
	if fi, err := os.Stat(filepath.Join(q.workspace(), "big.bin")); err != nil || fi.Size() != 150000000 {
		t.Fatalf("big.bin after restore: %v %v", fi, err)
	}
}

// The same on docker: the undo, the command line's restore refused while
// the container runs a job (--force kills it), and a fork whose files the
// container's user writes.
func TestE2EDockerCheckpoints(t *testing.T) {
	t.Parallel()
	dir, cfgFile, _ := dockerE2EConfig(t)
	state := filepath.Join(dir, "state")
	serve := func(thread string) (func(string, map[string]any) (string, bool), func()) {
		cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", thread)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		cs, stderr := stdioSession(t, ctx, cmd)
		return caller(t, ctx, cs, stderr), func() { cs.Close(); cancel() }
	}
	call, stop := serve("dock")
	defer stop()
	ws := filepath.Join(state, "threads", "dock", "user-data", "workspace")
	undoScenario(t, call, ws)

	id := checkpointID(t, call, "before the job")
	out := mustCall(t, call, "bash", map[string]any{"command": "while :; do date +%N > tick; sleep 0.05; done", "run_in_background": true})
	if !strings.Contains(out, "started]") {
		t.Fatalf("job: %s", out)
	}
	flags := []string{"--config", cfgFile, "--state-dir", state}
	_, stderr, code := cli(t, append([]string{"restore", "dock", id}, flags...)...)
	if code != 1 || !strings.Contains(stderr, "refused: job(s) of thread dock still run") || !strings.Contains(stderr, "--force") {
		t.Fatalf("restore while the container runs a job: exit %d, %q", code, stderr)
	}
	out, stderr, code = cli(t, append([]string{"restore", "dock", id, "--force"}, flags...)...)
	if code != 0 || !strings.Contains(out, "killed job(s) j") {
		t.Fatalf("restore --force: exit %d, %q %q", code, out, stderr)
	}
	if _, err := os.Lstat(filepath.Join(ws, "tick")); err == nil {
		t.Fatal("tick still there after restore --force")
	}
	if jobs := mustCall(t, call, "bash_output", map[string]any{}); strings.Contains(jobs, "running") {
		t.Fatalf("job still running: %s", jobs)
	}

	out, stderr, code = cli(t, append([]string{"fork", "dock@" + id, "dock2"}, flags...)...)
	if code != 0 {
		t.Fatalf("fork: exit %d, %q %q", code, out, stderr)
	}
	call2, stop2 := serve("dock2")
	defer stop2()
	if out := mustCall(t, call2, "bash", map[string]any{"command": "id -u; echo more >> a.txt && touch new && cat a.txt"}); !strings.Contains(out, "one\ntwo\nthree\nmore\n") {
		t.Fatalf("the container's user cannot write the fork's files: %s", out)
	}
}

// diff names every kind of change, and pages a long diff as grep does.
func TestE2EDiffKinds(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{thread: "kinds", isolation: "bwrap"})
	mustCall(t, p.call, "bash", map[string]any{"command": "printf 'a\\nb\\nc\\n' > t.txt && chmod 644 t.txt && printf '\\000\\001' > b.bin && ln -s t.txt l && echo x > becomes-dir && seq 1 2000 > long.txt"})
	id := checkpointID(t, p.call, "kinds")
	mustCall(t, p.call, "bash", map[string]any{"command": "chmod 755 t.txt && printf '\\000\\002\\003' > b.bin && ln -sfn b.bin l && rm becomes-dir && mkdir becomes-dir && sed -i 's/^1[0-9]*$/X/' long.txt"})
	d := mustCall(t, p.call, "diff", map[string]any{"from": id, "max_results": 30})
	for _, want := range []string{
		"Changes from checkpoint " + id + " to now: 5 path(s) (0 added, 5 modified, 0 deleted)",
		"modified /mnt/user-data/workspace/t.txt  (mode 0644 -> 0755)",
		"modified /mnt/user-data/workspace/b.bin  (2 -> 3 bytes)",
		"modified /mnt/user-data/workspace/l  (symlink: t.txt -> b.bin)",
		"modified /mnt/user-data/workspace/becomes-dir/  (file -> directory)",
		"(/mnt/user-data/workspace/b.bin: binary in checkpoint " + id + ", not diffed)",
		"--- /mnt/user-data/workspace/long.txt\t(checkpoint " + id + ")",
		"+++ /mnt/user-data/workspace/long.txt\t(now)",
		"@@ -1,4 +1,4 @@",
		"-1\n+X\n 2\n 3\n 4",
		"[truncated: showing the first 30 lines of ",
		"; next page: offset 30; the whole diff is in /mnt/user-data/outputs/.tool-results/",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "--- /mnt/user-data/workspace/t.txt") {
		t.Errorf("a mode change alone is diffed as text:\n%s", d)
	}
	page2 := mustCall(t, p.call, "diff", map[string]any{"from": id, "max_results": 30, "offset": 30})
	if !strings.Contains(page2, "[truncated: showing 30 lines from offset 30 of ") || strings.Contains(page2, "modified /mnt/user-data/workspace/t.txt") {
		t.Errorf("page 2:\n%s", page2)
	}
	// diff between two checkpoints, and to a missing one.
	to := checkpointID(t, p.call, "after")
	if d := mustCall(t, p.call, "diff", map[string]any{"from": id, "to": to, "max_results": 5}); !strings.Contains(d, "to checkpoint "+to+": 5 path(s)") {
		t.Errorf("diff between checkpoints:\n%s", d)
	}
	if out, isErr := p.call("diff", map[string]any{"from": id, "to": "999"}); !isErr || out != "Error: no checkpoint 999 in this thread (checkpoints lists them)" {
		t.Errorf("diff to a missing checkpoint = %q", out)
	}
}

// The same undo on kubernetes, where the thread's files live in the Pod's
// volume and the Pod's supervisor runs the checkpoint engine: through the
// binary and a real client, checked on the node's directory (host_path).
func TestE2EKubernetesCheckpoints(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_IMAGE"))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "kundo")
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	undoScenario(t, caller(t, ctx, cs, stderr), filepath.Join(dir, "storage", "threads", "kundo", "user-data", "workspace"))
}
