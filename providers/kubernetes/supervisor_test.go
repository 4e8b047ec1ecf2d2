package kubernetes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// TestSupervisorKilledMidCall: the Pod's supervisor dies while a call
// runs (SIGKILL from the node when this machine is the node, else SIGTERM
// from inside); the call ends at once with an error or a killed exit, never
// its command's own end, and the next call works in a new Pod with the
// thread's files.
func TestSupervisorKilledMidCall(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "sup-kill-"+randomHex(4))
	execOut(t, sb, "echo kept > kept.txt")
	type result struct {
		out string
		res sandbox.ExecResult
		err error
	}
	ended := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "touch started; sleep 60; echo never", Timeout: 2 * time.Minute, Output: &out})
		ended <- result{out.String(), res, err}
	}()
	waitFor(t, 30*time.Second, "the call to start", func() bool {
		_, err := sb.FS().Stat(t.Context(), sandbox.WorkspaceDir+"/started")
		return err == nil
	})
	pod, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), sb.PodName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if pid := nodePID(pod.UID); pid > 0 {
		t.Logf("SIGKILL to the supervisor, pid %d on the node", pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("the supervisor is not on this machine: SIGTERM from inside the Pod")
		if err := p.stream(t.Context(), sb.PodName(), []string{"sh", "-c", "kill -TERM 1"}, nil, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-ended:
		t.Logf("the call: %+v %v after %v", r.res, r.err, time.Since(start).Round(time.Millisecond))
		if r.err == nil && r.res.ExitCode == 0 || strings.Contains(r.out, "never") {
			t.Fatalf("the call ended as if nothing happened: %q %+v", r.out, r.res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not end when its supervisor died")
	}
	start = time.Now()
	if out, res := execOut(t, sb, "cat kept.txt"); out != "kept\n" || res.ExitCode != 0 {
		t.Fatalf("the next call: %q %+v", out, res)
	}
	t.Logf("the next call, in a new Pod: %v", time.Since(start).Round(time.Millisecond))
	if pods := (&fixture{p: p, cfg: cfg}).pods(t); len(pods) != 1 || pods[0].UID == pod.UID {
		t.Fatalf("pods after: %d, the old one's uid %s", len(pods), pod.UID)
	}
}

// nodePID is the node pid of the supervisor of the Pod with uid when the
// node is this machine (a local single-node cluster), else 0: the process
// whose command is the supervisor's, in the Pod's cgroup.
func nodePID(uid types.UID) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	want := []string{"pod" + string(uid), "pod" + strings.ReplaceAll(string(uid), "-", "_")}
	for _, d := range procs {
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte("supervise\x00--listen\x00"+supervisorSock)) {
			continue
		}
		cg, _ := os.ReadFile(d + "/cgroup")
		for _, w := range want {
			if bytes.Contains(cg, []byte(w)) {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
	}
	return 0
}

// flipper flips one bit of what passes at offset at.
type flipper struct {
	r       io.Reader
	n, at   int
	flipped bool
}

func (f *flipper) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if !f.flipped && f.n+n > f.at {
		p[f.at-f.n] ^= 0x10
		f.flipped = true
	}
	f.n += n
	return n, err
}

// TestCorruptedChannel: a bit flipped on the relay's stream is caught (the
// frame's checksum); the call in flight fails cleanly, and the next call
// opens a new channel and works.
func TestCorruptedChannel(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	var dials atomic.Int32
	p.wrapRelay = func(r io.Reader) io.Reader {
		if dials.Add(1) == 1 {
			return &flipper{r: r, at: 100_000}
		}
		return r
	}
	sb := acquire(t, p, "corrupt-"+randomHex(4))
	var out bytes.Buffer
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "head -c 300000 /dev/zero | tr '\\0' a", Timeout: time.Minute, Output: &out})
	var ce *supervisor.ChannelError
	if !errors.As(err, &ce) || !errors.Is(err, supervisor.ErrProtocol) {
		t.Fatalf("the corrupted call: err %v (%d bytes of output)", err, out.Len())
	}
	t.Logf("the corrupted call: %v", err)
	if bytes.ContainsFunc(out.Bytes(), func(r rune) bool { return r != 'a' }) {
		t.Fatal("corrupted output reached the caller")
	}
	if o, res := execOut(t, sb, "head -c 300000 /dev/zero | tr '\\0' a | wc -c"); strings.TrimSpace(o) != "300000" || res.ExitCode != 0 {
		t.Fatalf("the next call: %q %+v", o, res)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d channels opened, want 2", n)
	}
	// The failed channel's relay ended in the Pod (its exec's stdin closed
	// with the stream), and with it the channel in the supervisor.
	waitFor(t, 15*time.Second, "one relay in the Pod", func() bool { return relays(t, sb) == 1 })
}

// relays counts the supervisor relays (the channels' execs) in the Pod.
func relays(t *testing.T, sb *Sandbox) int {
	t.Helper()
	out, _ := execOut(t, sb, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done 2>/dev/null | grep -c '^/.sandbox-mcp/sandbox-mcp supervise --connect'`)
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	return n
}

// TestConcurrentCallsOneChannel: 40 bash calls at once on one Pod share one
// relay exec (one channel), each with its own output and exit code.
func TestConcurrentCallsOneChannel(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	var dials atomic.Int32
	p.wrapRelay = func(r io.Reader) io.Reader { dials.Add(1); return r }
	sb := acquire(t, p, "many-"+randomHex(4))
	execOut(t, sb, "true")
	const n = 40
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: fmt.Sprintf("sleep 1; echo call-%d; exit %d", i, i%7), Timeout: time.Minute, Output: &out})
			if err != nil || res.ExitCode != i%7 || out.String() != fmt.Sprintf("call-%d\n", i) {
				t.Errorf("call %d: %q %+v %v", i, out.String(), res, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls of 1 s at once: %v", n, time.Since(start).Round(time.Millisecond))
	if n := dials.Load(); n != 1 {
		t.Errorf("%d channels dialed, want 1", n)
	}
	if n := relays(t, sb); n != 1 {
		t.Fatalf("relay execs in the Pod: %d, want 1", n)
	}
}

// TestBadSupervisorImage: a supervisor image the cluster cannot run is
// said in one line naming kubernetes.supervisor_image; the Pod is deleted.
func TestBadSupervisorImage(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.SupervisorImage = "local.test/no-such-supervisor:1"
	cfg.ImagePullPolicy = "Never"
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "bad-sup-"+randomHex(4))
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.supervisor_image local.test/no-such-supervisor:1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v", err)
	}
	waitFor(t, 30*time.Second, "the Pod to go", func() bool { return len((&fixture{p: p, cfg: cfg}).pods(t)) == 0 })
}

// TestInstallerFails: an installer that cannot copy the binary, or one of
// an image whose binary knows neither --install --hold nor --await (a
// supervisor image of another version), is said in one line naming
// kubernetes.supervisor_image, not waited for until start_timeout; the Pod
// is deleted.
func TestInstallerFails(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*corev1.Container){
		"install": func(c *corev1.Container) {
			c.Command = []string{installerBin, "supervise", "--install", "/no/such/dir/x", "--hold"}
		},
		"other version": func(c *corev1.Container) {
			c.Command = []string{installerBin, "supervise", "--bogus", "x"}
			c.Lifecycle.PostStart.Exec.Command = c.Command
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t)
			p := newProviderT(t, cfg)
			p.mutatePod = func(pod *corev1.Pod) { mutate(container(t, &pod.Spec, installerName)) }
			sb := acquire(t, p, "bad-installer-"+randomHex(4))
			start := time.Now()
			_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "kubernetes.supervisor_image "+cfg.SupervisorImage) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v", err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("the error came after %v", d)
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			waitFor(t, 30*time.Second, "the Pod to go", func() bool { return len((&fixture{p: p, cfg: cfg}).pods(t)) == 0 })
		})
	}
}

// oldHello replaces the supervisor's hello frame with one of another
// protocol version, as an old supervisor image would say it (frame.go's
// layout: "SM", kind, 0, stream, seq, length, payload, CRC-32C).
type oldHello struct {
	r    io.Reader
	head []byte // the forged frame, then r
	done bool
}

func (o *oldHello) Read(p []byte) (int, error) {
	if !o.done {
		o.done = true
		h := make([]byte, 16)
		if _, err := io.ReadFull(o.r, h); err != nil {
			return 0, err
		}
		if _, err := io.CopyN(io.Discard, o.r, int64(binary.BigEndian.Uint32(h[12:]))+4); err != nil {
			return 0, err
		}
		payload := []byte(`{"protocol":999,"shell":"/bin/sh","pid":1}`)
		f := append([]byte{'S', 'M', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, binary.BigEndian.AppendUint32(nil, uint32(len(payload)))...)
		f = append(f, payload...)
		o.head = binary.BigEndian.AppendUint32(f, crc32.Checksum(f, crc32.MakeTable(crc32.Castagnoli)))
	}
	if len(o.head) > 0 {
		n := copy(p, o.head)
		o.head = o.head[n:]
		return n, nil
	}
	return o.r.Read(p)
}

// TestSupervisorOfAnotherVersion: a Pod whose supervisor speaks another
// protocol is made again once (a changed supervisor_image takes effect);
// when the new one does too, the call says so naming
// kubernetes.supervisor_image.
func TestSupervisorOfAnotherVersion(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	var dials atomic.Int32
	p.wrapRelay = func(r io.Reader) io.Reader { dials.Add(1); return &oldHello{r: r} }
	sb := acquire(t, p, "old-sup-"+randomHex(4))
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.supervisor_image "+cfg.SupervisorImage) || !strings.Contains(err.Error(), "protocol 999") {
		t.Fatalf("err %v", err)
	}
	t.Logf("the call: %v", err)
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2 (the Pod made again once)", n)
	}
	p.wrapRelay = nil
	if out, res := execOut(t, sb, "echo ok"); out != "ok\n" || res.ExitCode != 0 {
		t.Fatalf("with a supervisor of this version: %q %+v", out, res)
	}
}

// TestPodOfAnOlderServerIsReplaced: a thread's Pod made by a server before
// the supervisor (no installer, a sleep loop as its main process) is
// made again on the next call; the thread's files stay.
func TestPodOfAnOlderServerIsReplaced(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "older-"+randomHex(4))
	old := p.podSpec(sb)
	c := *container(t, &old.Spec, containerName)
	c.Command = []string{"sh", "-c", "while :; do sleep 3600 & wait $!; done"}
	old.Spec.Containers = []corev1.Container{c}
	created, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Create(t.Context(), old, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := execOut(t, sb, "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.HasPrefix(out, supervisorBin+" supervise --listen") || res.ExitCode != 0 {
		t.Fatalf("PID 1: %q %+v", out, res)
	}
	if pods := (&fixture{p: p, cfg: cfg}).pods(t); len(pods) != 1 || pods[0].UID == created.UID {
		t.Fatalf("the older Pod was not replaced: %d pods", len(pods))
	}
}

// TestSupervisorThatCannotStart: a Pod whose supervisor ends as it starts
// is not made again and again: the call says how it ended, and the Pod
// goes.
func TestSupervisorThatCannotStart(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	p.mutatePod = func(pod *corev1.Pod) {
		container(t, &pod.Spec, containerName).Command = []string{supervisorBin, "supervise", "--no-such-flag", "x"}
	}
	sb := acquire(t, p, "no-start-"+randomHex(4))
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "ended as it started") || !strings.Contains(err.Error(), "exit 2") || !strings.Contains(err.Error(), "kubernetes.supervisor_image") {
		t.Fatalf("err %v", err)
	}
	t.Logf("the call: %v", err)
	waitFor(t, 30*time.Second, "the Pod to go", func() bool { return len((&fixture{p: p, cfg: cfg}).pods(t)) == 0 })
}

// BenchmarkExecTrue is a warm bash `true` through the Pod's supervisor
// (the channel open, the Pod running).
func BenchmarkExecTrue(b *testing.B) {
	cfg := newConfig(b)
	p := newProviderT(b, cfg)
	sb := acquire(b, p, "bench-"+randomHex(4))
	execOut(b, sb, "true")
	for b.Loop() {
		execOut(b, sb, "true")
	}
}

// TestChannelToAnEarlierPodIsDropped: when the Pod this replica knows is
// no longer the one the open channel reaches (deleted and made again
// meanwhile), the next call dials the new one rather than run there.
func TestChannelToAnEarlierPodIsDropped(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	var dials atomic.Int32
	p.wrapRelay = func(r io.Reader) io.Reader { dials.Add(1); return r }
	sb := acquire(t, p, "earlier-"+randomHex(4))
	execOut(t, sb, "true")
	execOut(t, sb, "true")
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for two calls", n)
	}
	p.boxes.Forget(sb.name, "")
	p.boxes.Add(sb.name, "a-later-pod", sb.key)
	if out, _ := execOut(t, sb, "echo ok"); out != "ok\n" {
		t.Fatalf("%q", out)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
}

// TestInstallerResources: the installer has at most half a CPU and never
// more than the sandbox container, and its requests never exceed its
// limits (the API refuses such a Pod).
func TestInstallerResources(t *testing.T) {
	for sandboxCPU, want := range map[string]string{"2": "500m", "500m": "500m", "250m": "250m", "5m": "5m"} {
		p := &Provider{limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(sandboxCPU)}}
		r := p.installerResources()
		if got := r.Limits[corev1.ResourceCPU]; got.String() != want {
			t.Errorf("sandbox cpu %s: installer cpu limit %s, want %s", sandboxCPU, got.String(), want)
		}
		for name, req := range r.Requests {
			if lim, ok := r.Limits[name]; !ok || req.Cmp(lim) > 0 {
				t.Errorf("sandbox cpu %s: %s request %s above its limit %s", sandboxCPU, name, req.String(), lim.String())
			}
		}
	}
}
