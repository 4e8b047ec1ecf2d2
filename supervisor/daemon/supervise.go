//go:build unix

package daemon

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// supervisor runs commands for every channel it serves.
type supervisor struct {
	shell  string
	devnul *os.File

	mu    sync.Mutex // held across fork and registration, and by the reaper's dispatch
	procs map[int]*proc
	busy  int // commands in flight

	paths  *filelock.Locks // a mutex per file that writes with a precondition replace
	jobs   *jobTable       // jobs.go
	state  *shellState     // shellstate.go
	spares spares          // spare.go
	proxy  proxy           // net.go
	boot   string          // wire.Hello.Boot
	ckpt   *ckptStore      // checkpoints.go; nil: none

	cgOnce sync.Once
	cgs    []cgroupDir // cgroups()
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
	s := &supervisor{procs: map[int]*proc{}, paths: filelock.NewLocks(), jobs: newJobTable(), state: newShellState(listen), boot: newBoot()}
	for _, sh := range []string{"bash", "sh"} {
		if p, err := exec.LookPath(sh); err == nil {
			s.shell = p
			break
		}
	}
	s.devnul, _ = os.Open(os.DevNull)
	s.spares.cond.L = &s.spares.mu
	becomeSubreaper()
	go s.reap()
	return s
}

// newBoot draws a supervisor's wire.Hello.Boot.
func newBoot() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
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
// stdin is in, or /dev/null when in is nil. With tty, in and out are a
// terminal's slave: the command leads a session of its own, the terminal
// its controlling one (its process group is still its pid).
func (s *supervisor) start(l launch, in, out *os.File, tty bool) (*proc, error) {
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
	attr := &syscall.SysProcAttr{Setpgid: true}
	if tty {
		attr = ttyAttr()
	}
	files := []uintptr{in.Fd(), out.Fd(), out.Fd()}
	if l.fd3 != nil {
		files = append(files, l.fd3.Fd())
	}
	pid, err := syscall.ForkExec(path, l.argv, &syscall.ProcAttr{
		Dir:   l.dir,
		Env:   env,
		Files: files,
		Sys:   attr,
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
func (s *supervisor) startFrom(l launch, m wire.Exec, in, out *os.File, tty bool) (*proc, launch, error) {
	p, err := s.start(l, in, out, tty)
	if err != nil && l.fromState {
		if l.file != "" {
			removeState(l.file)
		}
		l = s.state.launchFrom(l.orig, m.Dir, l.extra, l.save, kept{})
		p, err = s.start(l, in, out, tty)
	}
	return p, l, err
}

// channel is one connection's state in the supervisor.
type channel struct {
	s  *supervisor
	wm sync.Mutex
	fw wire.Writer

	mu        sync.Mutex
	streams   map[uint32]*stream
	fs        map[uint32]*fsStream // file operations (fs.go)
	jobs      map[uint32]*jobReq   // job requests (jobs.go)
	pipes     map[uint32]*pipe     // pipes, of either side (pipe.go)
	maxOpened uint32               // the highest stream id the server opened
	nextPipe  uint32               // the last pipe id the supervisor opened (without wire.DaemonStream)
	answering int                  // network answers in flight (net.go)
	opening   int                  // accepted connections waiting for openMu
	closed    bool                 // the channel ended: no pipe more
	openMu    sync.Mutex           // held while an accepted connection's open is sent (net.go)
}

// stream is one command of a channel.
type stream struct {
	kill   chan struct{} // closed by a wire.KindKill or the channel's end
	killed sync.Once

	mu     sync.Mutex
	cond   *sync.Cond
	credit int
	closed bool // the channel ended: stop waiting for credit

	// A command that may become a job (Exec.YieldAfterMS): what it
	// wrote so far (pre), and the job once it is one (jobs.go).
	sendMu sync.Mutex
	pre    *ring
	job    *job
}

func (st *stream) stop() { st.killed.Do(func() { close(st.kill) }) }

func (c *channel) send(kind wire.Kind, id uint32, payload []byte) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	return c.fw.Write(kind, id, payload)
}

// serve runs one channel until it ends; the commands it started are then
// killed.
func (s *supervisor) serve(r io.Reader, w io.Writer) error {
	c := &channel{s: s, fw: wire.Writer{W: w}, streams: map[uint32]*stream{}, fs: map[uint32]*fsStream{}, jobs: map[uint32]*jobReq{}, pipes: map[uint32]*pipe{}}
	s.mu.Lock()
	busy := s.busy
	s.mu.Unlock()
	jobs := s.runningJobs()
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Version: wire.Version(), Shell: s.shell, PID: os.Getpid(), Busy: busy + jobs, Jobs: jobs, Boot: s.boot})
	err := c.send(wire.KindHello, 0, hello)
	fr := wire.Reader{R: bufio.NewReaderSize(r, 64<<10)}
	for err == nil {
		var f wire.Frame
		if f, err = fr.Read(); err == nil {
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
	c.stopPipes()
	c.stopFS()
	c.stopJobs()
	return err
}

func (c *channel) stream(id uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// run runs one command: it streams its output, kills its process group when
// it ends (background children do not outlive the call), when its timeout
// passes or when the server asks, and says how it ended.
func (c *channel) run(id uint32, st *stream, m wire.Exec) {
	s := c.s
	defer func() {
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
	}()
	exit := func(e wire.Exit) {
		b, _ := json.Marshal(e)
		c.send(wire.KindExit, id, b)
	}
	cgs := s.cgroups()
	ooms := oomKills(cgs)
	b, code, err := c.begin(m, false)
	if err != nil {
		exit(wire.Exit{Code: code, Error: err.Error()})
		return
	}
	// inW is the end of its stdin pipe (m.Stdin) the job it may become
	// writes to; closed here unless a job took it.
	p, l, pr, inW := b.p, b.l, b.pr, b.inW
	defer func() {
		if inW != nil {
			inW.Close()
		}
	}()
	defer func() {
		if l.file != "" {
			removeState(l.file) // whatever came of the command
		}
	}()
	c.send(wire.KindStart, id, nil)
	var yield <-chan time.Time
	if m.YieldAfterMS > 0 {
		st.pre = &ring{}
		t := time.NewTimer(time.Duration(m.YieldAfterMS) * time.Millisecond)
		defer t.Stop()
		yield = t.C
	}
	copied := make(chan struct{})
	go func(copied chan struct{}, pr *os.File) {
		defer close(copied)
		c.copyOut(id, st, pr)
	}(copied, pr)
	var timeout <-chan time.Time
	if m.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(m.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var res wire.Exit
	exited := false // it ended by itself, in the foreground
wait:
	for {
		select {
		case <-p.done:
			exited = true
			if b.spare == nil || !b.spare.unread() {
				break
			}
			// The spare was killed before it read the command (by a
			// job): the command runs afresh. It printed nothing.
			b.spare = nil
			<-copied
			pr.Close()
			removeState(l.file)
			s.idle()
			if b, code, err = c.begin(m, true); err != nil {
				exit(wire.Exit{Code: code, Error: err.Error()})
				return
			}
			p, l, pr, inW = b.p, b.l, b.pr, b.inW
			exited, copied = false, make(chan struct{})
			go func(copied chan struct{}, pr *os.File) {
				defer close(copied)
				c.copyOut(id, st, pr)
			}(copied, pr)
			continue
		case <-timeout:
			res.TimedOut = true
		case <-st.kill:
		case <-yield:
			yield = nil
			if job := c.yieldJob(st, m, p, pr, copied, l.file, inW); job != "" {
				if b.spare != nil {
					b.spare.in.Close() // it read its command long ago
				}
				l.file, inW = "", nil // the job removes it when it ends; its stdin is the job's
				s.idle()
				exit(wire.Exit{Job: job, Running: true})
				return
			}
			if inW != nil {
				// No job (at the cap): it stays in the foreground, where
				// no input comes — its stdin ends, as an empty one would.
				inW.Close()
				inW = nil
			}
			continue
		}
		break wait
	}
	syscall.Kill(-p.pid, syscall.SIGKILL) // background children die with the command
	<-p.done
	if b.spare != nil && !exited {
		b.spare.unread() // timed out or killed: what it read no longer matters
	}
	select {
	case <-copied:
	case <-time.After(wire.DrainGrace):
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
	if now := oomKills(cgs); ooms != nil && now != nil && *now > *ooms {
		res.OOMKills = *now - *ooms
		res.MemoryMax = memoryMax(cgs)
	}
	refill := s.willRefill(m, false)
	exit(res)
	if refill {
		s.refillSpare(m) // the next command's shell, from the state this one left
	}
}

// begun is a started command of run.
type begun struct {
	p     *proc
	l     launch
	pr    *os.File // the reader of its stdout and stderr
	inW   *os.File // the writer of its stdin pipe (Exec.Stdin), or nil
	spare *spare   // the spare shell it runs in, or nil
}

// begin starts command m — in the spare shell that fits it (spare.go),
// unless fresh, else afresh — and counts it in flight; or says why it
// could not, with the exit code that says so.
func (c *channel) begin(m wire.Exec, fresh bool) (begun, int, error) {
	s := c.s
	if sp := s.takeSpare(m); sp != nil && !fresh {
		s.mu.Lock()
		s.busy++
		s.mu.Unlock()
		sp.run(m.Argv[2])
		if s.willRefill(m, true) {
			// One ahead: the next command's shell starts while this one
			// runs, from the state it started from — which most commands
			// leave as it was; one that changes it has this spare
			// replaced when it ends.
			go s.refillSpare(m)
		}
		return begun{p: sp.p, l: sp.l, pr: sp.out, spare: sp}, 0, nil
	} else if sp != nil {
		s.discard(sp)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return begun{}, -1, err
	}
	var in, inW *os.File
	if m.Stdin {
		if in, inW, err = os.Pipe(); err != nil {
			pr.Close()
			pw.Close()
			return begun{}, -1, err
		}
	}
	l, err := s.state.prepare(m.Argv, m.Dir, m.Env, m.Shell, m.Reset, true)
	if err != nil {
		pr.Close()
		pw.Close()
		if in != nil {
			in.Close()
			inW.Close()
		}
		return begun{}, -1, err
	}
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	p, l, err := s.startFrom(l, m, in, pw, false)
	pw.Close()
	if in != nil {
		in.Close()
	}
	if err != nil {
		pr.Close()
		if inW != nil {
			inW.Close()
		}
		if l.file != "" {
			removeState(l.file)
		}
		s.idle()
		return begun{}, 127, err
	}
	return begun{p: p, l: l, pr: pr, inW: inW}, 0, nil
}

// cgroups are the box's cgroups (boxCgroups), found once: they are
// bound, or named by /proc/self/cgroup, when the supervisor starts, and
// no command moves it.
func (s *supervisor) cgroups() []cgroupDir {
	s.cgOnce.Do(func() {
		s.cgs = boxCgroups()
		for i := range s.cgs {
			s.cgs[i].at = openDir(s.cgs[i].chain[0])
		}
	})
	return s.cgs
}

// copyOut sends what the command writes, within the stream's credit.
func (c *channel) copyOut(id uint32, st *stream, r io.Reader) {
	buf := make([]byte, wire.ChunkSize)
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
			if ours {
				continue // a command, or the spare shell (spare.go)
			}
			if st := procFields(pid); len(st) > 3 {
				pgid, _ := strconv.Atoi(st[2])
				sid, _ := strconv.Atoi(st[3])
				ours = s.jobGroup(pgid) || s.jobSession(sid) // a running job's: it lives
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
	s.stopSpares()
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
	tasks, err := readDirProc("self/task")
	if err == nil {
		for _, t := range tasks {
			b, err := readProc("self/task/" + t + "/children")
			if err != nil {
				out = nil
				goto scan
			}
			for _, f := range strings.Fields(b) {
				if pid, err := strconv.Atoi(f); err == nil {
					if st := procFields(pid); len(st) > 0 && st[0] != "Z" {
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
		if f := procFields(p); len(f) > 1 && f[0] != "Z" && f[1] == want {
			out = append(out, p)
		}
	}
	return out
}

// readDirProc lists the names in /proc/rel.
func readDirProc(rel string) ([]string, error) {
	var f *os.File
	if d := procDir(); d != nil {
		fd, err := unix.Openat(d.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		f = os.NewFile(uintptr(fd), "/proc/"+rel)
	} else {
		var err error
		if f, err = os.Open("/proc/" + rel); err != nil {
			return nil, err
		}
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
