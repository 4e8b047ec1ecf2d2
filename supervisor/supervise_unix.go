//go:build unix

package supervisor

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
)

// drainGrace is how long output may still arrive after a command's process
// group was killed; a process that left the group (setsid) and holds the
// pipe is cut off after it.
const drainGrace = 2 * time.Second

// Main runs the supervisor and exits when this process was started as
// one (`sandbox-mcp supervise ...`); otherwise it returns at once. The
// server's main calls it first thing, as do the test binaries of the
// providers, which serve as their own supervisor.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != "supervise" {
		mainCalled.Store(true)
		return
	}
	os.Exit(Run(os.Args[2:], os.Stdin, os.Stdout))
}

// Run is the supervise subcommand. With no arguments it serves one channel
// on stdin and stdout and, when that ends, kills everything it started and
// exits (the local provider). With --listen SOCK it serves every
// connection to the unix socket SOCK for as long as it runs (the main
// process of a docker or kubernetes sandbox). --install, --await and
// --connect are the kubernetes provider's (modes_unix.go).
func Run(args []string, stdin io.Reader, stdout io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch {
	case o.install != "":
		if err := install(o.install); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-mcp supervise --install:", err)
			return 1
		}
		if o.hold {
			hold()
		}
		return 0
	case o.await != "":
		if err := await(o.await); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-mcp supervise --await:", err)
			return 1
		}
		return 0
	case o.connect != "":
		if err := relay(o.connect, stdin, stdout); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-mcp supervise --connect:", err)
			return 1
		}
		return 0
	}
	listen := o.listen
	for _, d := range o.mkdirs {
		os.MkdirAll(d, 0o755)
	}
	if o.keepSet {
		keepOnly(o.keepEnv)
	}
	s := newSupervisor(listen)
	if listen == "" {
		err := s.serve(stdin, stdout)
		s.shutdown()
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(os.Stderr, "sandbox-mcp supervise:", err)
			return 1
		}
		return 0
	}
	os.Remove(listen) // a socket left by an earlier run of this container
	l, err := net.Listen("unix", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-mcp supervise:", err)
		return 1
	}
	os.Chmod(listen, 0o600)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-term
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			s.shutdown()
			return 0
		}
		go func() {
			s.serve(c, c)
			c.Close()
		}()
	}
}

// supervisor runs commands for every channel it serves.
type supervisor struct {
	shell  string
	devnul *os.File

	mu    sync.Mutex // held across fork and registration, and by the reaper's dispatch
	procs map[int]*proc
	busy  int // commands in flight

	paths *filelock.Locks // a mutex per file that writes with a precondition replace
	jobs  *jobTable       // jobs_serve_unix.go
	state *shellState     // shellstate_unix.go
}

// proc is one started command, by its pid (its process group).
type proc struct {
	pid  int
	done chan struct{} // closed when it was reaped
	ws   syscall.WaitStatus
}

// newSupervisor makes a supervisor; listen is its socket ("": none), beside
// which it keeps its private directory.
func newSupervisor(listen string) *supervisor {
	s := &supervisor{procs: map[int]*proc{}, paths: filelock.NewLocks(), jobs: newJobTable(), state: newShellState(listen)}
	for _, sh := range []string{"bash", "sh"} {
		if p, err := exec.LookPath(sh); err == nil {
			s.shell = p
			break
		}
	}
	s.devnul, _ = os.Open(os.DevNull)
	becomeSubreaper()
	go s.reap()
	return s
}

// reap waits for every child, on SIGCHLD: a command's exit status goes to
// its proc; orphans that were re-parented here (the supervisor is a child
// subreaper where the system has one) are only reaped.
func (s *supervisor) reap() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			s.mu.Lock()
			if p := s.procs[pid]; p != nil {
				p.ws = ws
				delete(s.procs, pid)
				close(p.done)
			}
			s.mu.Unlock()
		}
		<-sig
	}
}

// start forks l.argv in its own process group, in l.dir, with l.env (nil:
// the supervisor's own), and stdout and stderr the write end of one pipe.
// stdin is in, or /dev/null when in is nil.
func (s *supervisor) start(l launch, in, out *os.File) (*proc, error) {
	if len(l.argv) == 0 {
		return nil, errors.New("no command")
	}
	path := l.argv[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, err
		}
		path = p
	}
	if in == nil {
		in = s.devnul
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	env := l.env
	if env == nil {
		env = os.Environ()
	}
	pid, err := syscall.ForkExec(path, l.argv, &syscall.ProcAttr{
		Dir:   l.dir,
		Env:   env,
		Files: []uintptr{in.Fd(), out.Fd(), out.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return nil, err
	}
	p := &proc{pid: pid, done: make(chan struct{})}
	s.procs[pid] = p
	return p, nil
}

// startFrom starts l, and when l starts from a kept shell state that cannot
// start (its environment over the kernel's limits), the command afresh in
// m's directory, its state still taken: the state never fails a command,
// nor stops the next one from being taken. It returns the launch started.
func (s *supervisor) startFrom(l launch, m ExecMsg, in, out *os.File) (*proc, launch, error) {
	p, err := s.start(l, in, out)
	if err != nil && l.fromState {
		if l.file != "" {
			removeState(l.file)
		}
		l = s.state.launchFrom(l.orig, m.Dir, l.save, kept{})
		p, err = s.start(l, in, out)
	}
	return p, l, err
}

// channel is one connection's state in the supervisor.
type channel struct {
	s  *supervisor
	wm sync.Mutex
	fw frameWriter

	mu      sync.Mutex
	streams map[uint32]*stream
	fs      map[uint32]*fsStream // file operations (fs_serve_unix.go)
	jobs    map[uint32]*jobReq   // job requests (jobs_serve_unix.go)
}

// stream is one command of a channel.
type stream struct {
	kill   chan struct{} // closed by a msgKill or the channel's end
	killed sync.Once

	mu     sync.Mutex
	cond   *sync.Cond
	credit int
	closed bool // the channel ended: stop waiting for credit

	// A command that may become a job (ExecMsg.YieldAfterMS): what it
	// wrote so far (pre), and the job once it is one (jobs_serve_unix.go).
	sendMu sync.Mutex
	pre    *ring
	job    *job
}

func (st *stream) stop() { st.killed.Do(func() { close(st.kill) }) }

func (c *channel) send(kind byte, id uint32, payload []byte) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	return c.fw.write(kind, id, payload)
}

// serve runs one channel until it ends; the commands it started are then
// killed.
func (s *supervisor) serve(r io.Reader, w io.Writer) error {
	c := &channel{s: s, fw: frameWriter{w: w}, streams: map[uint32]*stream{}, fs: map[uint32]*fsStream{}, jobs: map[uint32]*jobReq{}}
	s.mu.Lock()
	busy := s.busy
	s.mu.Unlock()
	jobs := s.runningJobs()
	hello, _ := json.Marshal(Hello{Protocol: Protocol, Shell: s.shell, PID: os.Getpid(), Busy: busy + jobs, Jobs: jobs})
	err := c.send(msgHello, 0, hello)
	fr := frameReader{r: bufio.NewReaderSize(r, 64<<10)}
	for err == nil {
		var f frame
		if f, err = fr.read(); err == nil {
			err = c.handle(f)
		}
	}
	c.mu.Lock()
	for _, st := range c.streams {
		st.stop()
		st.mu.Lock()
		st.closed = true
		st.cond.Broadcast()
		st.mu.Unlock()
	}
	c.mu.Unlock()
	c.stopFS()
	c.stopJobs()
	return err
}

// handle acts on one frame from the server.
func (c *channel) handle(f frame) error {
	switch f.kind {
	case msgExec:
		var m ExecMsg
		if err := json.Unmarshal(f.payload, &m); err != nil {
			return protocolError("exec: %v", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.streams[f.stream] != nil || c.fs[f.stream] != nil || c.jobs[f.stream] != nil || f.stream == 0 {
			return protocolError("stream %d started twice", f.stream)
		}
		st := &stream{kill: make(chan struct{}), credit: window}
		st.cond = sync.NewCond(&st.mu)
		c.streams[f.stream] = st
		go c.run(f.stream, st, m)
	case msgCredit:
		if len(f.payload) != 4 {
			return protocolError("credit of %d bytes", len(f.payload))
		}
		if st := c.stream(f.stream); st != nil {
			st.mu.Lock()
			st.credit += int(binary.BigEndian.Uint32(f.payload))
			st.cond.Broadcast()
			st.mu.Unlock()
		} else {
			c.fsCredit(f.stream, binary.BigEndian.Uint32(f.payload))
		}
	case msgKill:
		if st := c.stream(f.stream); st != nil {
			st.stop()
		} else if !c.jobKill(f.stream) {
			c.fsKill(f.stream)
		}
	case msgFS, msgFSData, msgFSCommit:
		return c.handleFS(f)
	case msgJob:
		return c.handleJob(f)
	default:
		return protocolError("unknown message kind %d", f.kind)
	}
	return nil
}

func (c *channel) stream(id uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// run runs one command: it streams its output, kills its process group when
// it ends (background children do not outlive the call), when its timeout
// passes or when the server asks, and says how it ended.
func (c *channel) run(id uint32, st *stream, m ExecMsg) {
	s := c.s
	defer func() {
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
	}()
	exit := func(e ExitMsg) {
		b, _ := json.Marshal(e)
		c.send(msgExit, id, b)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		exit(ExitMsg{Code: -1, Error: err.Error()})
		return
	}
	l, err := s.state.prepare(m.Argv, m.Dir, m.Shell, m.Reset, true)
	if err != nil {
		pr.Close()
		pw.Close()
		exit(ExitMsg{Code: -1, Error: err.Error()})
		return
	}
	defer func() {
		if l.file != "" {
			removeState(l.file) // whatever came of the command
		}
	}()
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	p, l, err := s.startFrom(l, m, nil, pw)
	pw.Close()
	if err != nil {
		pr.Close()
		s.idle()
		exit(ExitMsg{Code: 127, Error: err.Error()})
		return
	}
	c.send(msgStart, id, nil)
	var yield <-chan time.Time
	if m.YieldAfterMS > 0 {
		st.pre = &ring{}
		t := time.NewTimer(time.Duration(m.YieldAfterMS) * time.Millisecond)
		defer t.Stop()
		yield = t.C
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		c.copyOut(id, st, pr)
	}()
	var timeout <-chan time.Time
	if m.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(m.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var res ExitMsg
	exited := false // it ended by itself, in the foreground
wait:
	for {
		select {
		case <-p.done:
			exited = true
		case <-timeout:
			res.TimedOut = true
		case <-st.kill:
		case <-yield:
			yield = nil
			if job := c.yieldJob(st, m, p, pr, copied, l.file); job != "" {
				l.file = "" // the job removes it when it ends
				s.idle()
				exit(ExitMsg{Job: job, Running: true})
				return
			}
			continue
		}
		break wait
	}
	syscall.Kill(-p.pid, syscall.SIGKILL) // background children die with the command
	<-p.done
	select {
	case <-copied:
	case <-time.After(drainGrace):
		pr.Close()
		st.mu.Lock()
		st.closed = true
		st.cond.Broadcast()
		st.mu.Unlock()
		<-copied
	}
	pr.Close()
	if exited && l.file != "" {
		s.state.load(l.file, l.env)
	}
	s.idle() // before the exit frame: what the command left is gone when the call ends
	if p.ws.Signaled() {
		res.Code = 128 + int(p.ws.Signal())
	} else {
		res.Code = p.ws.ExitStatus()
	}
	exit(res)
}

// copyOut sends what the command writes, within the stream's credit.
func (c *channel) copyOut(id uint32, st *stream, r io.Reader) {
	buf := make([]byte, chunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			st.mu.Lock()
			for st.credit < n && !st.closed && st.job == nil {
				st.cond.Wait()
			}
			ok := !st.closed || st.job != nil
			st.credit -= n
			st.mu.Unlock()
			if !ok || !c.sendOut(id, st, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// idle ends one command; when none is left in flight, the processes that
// commands left behind outside their groups (re-parented here) are killed.
func (s *supervisor) idle() {
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
	s.killOrphans()
}

// killOrphans kills, while no command is in flight, every child of the
// supervisor that is not a command: what commands left behind (setsid,
// double forks), re-parented to this subreaper. A killed orphan's own
// children are re-parented here in turn: a few rounds, until none is left.
func (s *supervisor) killOrphans() {
	for range 200 {
		s.mu.Lock()
		busy := s.busy
		s.mu.Unlock()
		if busy > 0 {
			return
		}
		n := 0
		for _, pid := range childrenOf(os.Getpid()) {
			s.mu.Lock()
			ours := s.procs[pid] != nil
			s.mu.Unlock()
			if st := statFields(pid); len(st) > 2 && !ours {
				pgid, _ := strconv.Atoi(st[2])
				ours = s.jobGroup(pgid) // a running job's: it lives
			}
			if !ours {
				syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shutdown kills every command and every orphan, a few rounds (a killed
// process's children are re-parented here and go in the next), and
// removes the shell state's private directory.
func (s *supervisor) shutdown() {
	defer s.state.remove()
	s.mu.Lock()
	for pid := range s.procs {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	for range 50 {
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// childrenOf lists the live children of this process: from each of its
// threads' children lists where the kernel keeps them (CONFIG_PROC_CHILDREN:
// a few small reads), else by a scan of /proc (every process's stat).
func childrenOf(self int) []int {
	var out []int
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil {
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
			if err != nil {
				out = nil
				goto scan
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					if st := statFields(pid); len(st) > 0 && st[0] != "Z" {
						out = append(out, pid)
					}
				}
			}
		}
		return out
	}
scan:
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(self)
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(p); len(f) > 1 && f[0] != "Z" && f[1] == want {
			out = append(out, p)
		}
	}
	return out
}
