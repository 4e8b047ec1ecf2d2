//go:build unix

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/internal/procstat"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The supervisor's side of jobs (wire/kinds.go).

// jobInputStall is how long a job may take to read its input (CodeBlocked
// after it).
const jobInputStall = time.Second

// jobTable is every job of the supervisor.
type jobTable struct {
	mu      sync.Mutex
	next    uint64
	byID    map[string]*job
	order   []*job // by start, for List and for dropping the oldest ended
	running int    // jobs running, and starts under way
	groups  map[int]bool
	// sessions: the running terminal jobs' sessions (each its leader's
	// pid): their processes are the job's, whatever their group.
	sessions map[int]bool
	scan     sync.Once // next counts the logs in the log directory (lastLoggedJob)
}

// job is one job.
type job struct {
	id      string
	command string
	pid     int
	started time.Time
	stdin   *os.File // nil: none, or closed; a terminal job's: the terminal's master
	// stateFile: the shell state file of the command it was (removed
	// unread when it ends: a job changes no state).
	stateFile string
	inMu      sync.Mutex

	mu      sync.Mutex
	out     ring
	shown   int64 // characters some reader was shown
	changed chan struct{}
	log     *os.File
	logLeft int64 // bytes the log may still take; <0: no limit
	logMax  int64
	// saved: the log is LogDir's, kept in the bound of the thread's saved
	// results when the job ends (pruneSaved); "": no log.
	saved      string
	savedFiles int
	savedBytes int64
	state      string
	ended      time.Time
	code       int
	signal     string
	// killRequested: a kill request signalled it while it ran (killJob).
	killRequested bool
	// tty: the terminal's size, for a job on one (set once at the start,
	// changed by resize).
	tty *wire.TTY
}

func newJobTable() *jobTable {
	return &jobTable{byID: map[string]*job{}, groups: map[int]bool{}, sessions: map[int]bool{}}
}

// runningJobs counts the running jobs (Hello).
func (s *supervisor) runningJobs() int {
	t := s.jobs
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running
}

// jobGroup reports whether pgid is a running job's process group: the
// orphan sweep leaves its processes alone.
func (s *supervisor) jobGroup(pgid int) bool {
	t := s.jobs
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groups[pgid]
}

// jobSession reports whether sid is a running terminal job's session.
func (s *supervisor) jobSession(sid int) bool {
	t := s.jobs
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sessions[sid]
}

// reserve takes a running slot under limit, the job's id and its log,
// or says why not. With set.LogDir the id is the one whose log it creates
// there (claimLog); else the next of the supervisor's own.
func (t *jobTable) reserve(set wire.JobSettings) (string, *os.File, *wire.JobReply) {
	limit := set.MaxJobs
	if limit <= 0 || limit > wire.MaxJobsRunning {
		limit = wire.MaxJobsRunning
	}
	t.mu.Lock()
	if t.running >= limit {
		defer t.mu.Unlock()
		return "", nil, &wire.JobReply{Err: wire.CodeLimit, Msg: fmt.Sprintf("%d jobs are running; at most %d", t.running, limit), Running: t.running, Max: limit}
	}
	t.running++
	if set.LogDir == "" {
		t.next++
		id := wire.JobID(t.next)
		t.mu.Unlock()
		return id, nil, nil
	}
	t.mu.Unlock()
	// Outside the lock: the directory is the sandbox's to plant.
	id, log, err := t.claimLog(set.LogDir)
	if err != nil {
		t.release()
		return "", nil, &wire.JobReply{Err: wire.CodeLog, Msg: err.Error()}
	}
	go pruneSaved(set.LogDir, set.SavedMaxFiles, set.SavedMaxBytes) // what others left (the job's own end prunes too)
	return id, log, nil
}

// Job ids and logs (SPEC §16). A thread's job log directory may be shared
// by several supervisors at once — the local provider's, one per server
// process on the state dir — and by the supervisors of its sandbox one
// after another (a restarted container, a Pod made again). An id is taken
// by creating its log, j<N>.log, with O_EXCL: a log is never overwritten,
// and no two supervisors hand out one id while its log is there. N goes
// on from the highest of: the supervisor's own last; the number in
// lastIDFile, read and written under flock by every supervisor, so that
// an id whose log was removed (an ended job's, oldest first, past the
// saved results' bound) is not handed out again; and, once per
// supervisor, the logs in the directory (lastLoggedJob: logs from before
// the counter).

// lastIDFile, in the log directory, holds the last id handed out there.
const lastIDFile = ".last-id"

// maxIDs bounds the ids tried for one job (logs planted ahead).
const maxIDs = 1000

// claimLog takes the next id of dir, creating its log.
func (t *jobTable) claimLog(dir string) (string, *os.File, error) {
	if !wire.ValidPath(dir) {
		return "", nil, errors.New("log dir: not a clean absolute path")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	t.scan.Do(func() {
		last := lastLoggedJob(dir)
		t.mu.Lock()
		t.next = max(t.next, last)
		t.mu.Unlock()
	})
	ids := openLastID(dir)
	defer ids.close()
	t.mu.Lock()
	n := max(t.next, ids.last)
	t.mu.Unlock()
	for range maxIDs {
		n++
		f, err := createLog(filepath.Join(dir, wire.JobID(n)+".log"))
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		ids.store(n)
		t.mu.Lock()
		t.next = max(t.next, n)
		t.mu.Unlock()
		return wire.JobID(n), f, nil
	}
	return "", nil, fmt.Errorf("%s: no free job id", dir)
}

// lastID is lastIDFile, open and locked (f nil: none could be).
type lastID struct {
	f    *os.File
	last uint64
}

// openLastID opens and locks dir's lastIDFile and reads it: never through
// a symlink, only a plain file, waiting at most a second for the lock (a
// command may hold it: the ids are then those of the logs alone).
func openLastID(dir string) lastID {
	f, err := os.OpenFile(filepath.Join(dir, lastIDFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return lastID{}
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return lastID{}
	}
	locked := false
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			locked = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if !locked {
		f.Close()
		return lastID{}
	}
	var b [24]byte
	n, _ := f.ReadAt(b[:], 0)
	l := lastID{f: f}
	if v, err := strconv.ParseUint(strings.TrimSpace(string(b[:n])), 10, 64); err == nil && v < 1e9 {
		l.last = v
	}
	return l
}

// store records n as the last id handed out.
func (l lastID) store(n uint64) {
	if l.f == nil || n <= l.last {
		return
	}
	if l.f.Truncate(0) == nil {
		l.f.WriteAt([]byte(strconv.FormatUint(n, 10)+"\n"), 0)
	}
}

func (l lastID) close() {
	if l.f != nil {
		l.f.Close() // and the lock
	}
}

// lastLoggedJob is the highest N of the j<N>.log files in dir: the jobs of
// an earlier supervisor of this sandbox (a restarted container, a Pod made
// again), whose logs stay in the thread's files. Numbers from 10^9 on are
// not taken (a planted name cannot push ids past ten digits), nor more
// than 100000 entries read.
func lastLoggedJob(dir string) uint64 {
	// Only a directory, never through a symlink, and never waiting (a
	// FIFO planted there would block the open).
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	var last uint64
	for read := 0; read < 100000; {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			if v, ok := sandbox.JobLogNumber(n); ok {
				last = max(last, v)
			}
		}
		read += len(names)
		if err != nil {
			break
		}
	}
	return last
}

func (t *jobTable) release() {
	t.mu.Lock()
	t.running--
	t.mu.Unlock()
}

// add registers a started job (its slot and id reserved).
func (t *jobTable) add(j *job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[j.id] = j
	t.order = append(t.order, j)
	t.groups[j.pid] = true
	if j.tty != nil {
		t.sessions[j.pid] = true
	}
}

func (t *jobTable) get(id string) *job {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// ended records j's end (its process's wait status ws) under the table's
// lock, and the ended jobs beyond MaxJobsEnded go in the same turn — a
// list (listJobs, under the lock too) never shows more.
func (t *jobTable) ended(j *job, ws syscall.WaitStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j.mu.Lock()
	j.end(ws)
	j.mu.Unlock()
	t.running--
	delete(t.groups, j.pid)
	delete(t.sessions, j.pid)
	n := 0
	for _, o := range t.order {
		o.mu.Lock()
		if o.state != sandbox.JobRunning {
			n++
		}
		o.mu.Unlock()
	}
	for i := 0; n > wire.MaxJobsEnded && i < len(t.order); {
		o := t.order[i]
		o.mu.Lock()
		done := o.state != sandbox.JobRunning
		o.mu.Unlock()
		if done {
			delete(t.byID, o.id)
			t.order = append(t.order[:i], t.order[i+1:]...)
			n--
			continue
		}
		i++
	}
}

// createLog creates a job's log: new (never another's, never through a
// symlink), only a plain file, mode 0644 whatever the umask.
func createLog(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	f.Chmod(0o644)
	syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) // written: runningLog
	return f, nil
}

// The bound of a thread's saved results (sandbox.SavedDir, PruneSaved):
// the saved outputs in a log directory's parent and the ended jobs' logs
// in it (a running job's log is neither counted nor removed: LogMaxBytes
// and MaxJobs bound those). A log is a running job's while it is writable
// (its job's end makes it read-only) and — the supervisor that writes it
// may have ended without that: a crash, a restart — its writer holds a
// lock on it (createLog's LOCK_SH), or it was written in the last
// staleLog.

// staleLog: a writable log nobody locks, written this recently, is
// taken for a log being made.
const staleLog = 10 * time.Second

// maxSavedRead bounds the entries read of each directory.
const maxSavedRead = 100000

// pruneSaved keeps dir's saved results within maxFiles files and maxBytes
// bytes (0: no limit), removing the oldest that may go.
func pruneSaved(dir string, maxFiles int, maxBytes int64) {
	if maxFiles <= 0 && maxBytes <= 0 {
		return
	}
	files := appendSaved(nil, filepath.Dir(dir), false)
	files = appendSaved(files, dir, true)
	for _, f := range sandbox.PruneSaved(files, maxFiles, maxBytes) {
		os.Remove(f.Name)
	}
}

// appendSaved appends dir's saved outputs (not logs) or ended jobs' logs
// (logs): plain files only, never through a symlink, never waiting on a
// FIFO.
func appendSaved(files []sandbox.Saved, dir string, logs bool) []sandbox.Saved {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return files
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	for read := 0; read < maxSavedRead; {
		names, err := d.Readdirnames(1024)
		read += len(names)
		for _, n := range names {
			if _, log := sandbox.JobLogNumber(n); logs && !log || !logs && !sandbox.SavedOutput(n) {
				continue
			}
			p := filepath.Join(dir, n)
			fi, err := os.Lstat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if logs && fi.Mode().Perm()&0o200 != 0 && runningLog(p, fi) {
				continue // neither counted nor removed
			}
			files = append(files, sandbox.Saved{Name: p, Size: fi.Size(), ModTime: fi.ModTime()})
		}
		if err != nil {
			break
		}
	}
	return files
}

// runningLog reports whether a writable log is a running job's; one
// that is not is made read-only (ended).
func runningLog(p string, fi os.FileInfo) bool {
	if time.Since(fi.ModTime()) < staleLog {
		return true
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true // its writer holds it
	}
	return f.Chmod(0o444) != nil
}

// newJob makes a job's state for a started process.
func newJob(id string, argv []string, pid int, set wire.JobSettings, log *os.File) *job {
	cmd := strings.Join(argv, " ")
	if len(argv) >= 3 && (argv[1] == "-c" || argv[1] == "-lc") {
		cmd = argv[2] // a shell's script
	}
	if len(cmd) > wire.MaxJobCommand {
		cmd = strings.ToValidUTF8(cmd[:wire.MaxJobCommand], "")
	}
	j := &job{id: id, command: cmd, pid: pid, started: time.Now(), changed: make(chan struct{}), log: log, logLeft: -1, state: sandbox.JobRunning}
	if set.LogMaxBytes > 0 {
		j.logLeft, j.logMax = set.LogMaxBytes, set.LogMaxBytes
	}
	if log != nil {
		j.saved, j.savedFiles, j.savedBytes = set.LogDir, set.SavedMaxFiles, set.SavedMaxBytes
	}
	return j
}

// appendOut takes output of the job: into its ring and its log.
func (j *job) appendOut(p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.out.append(p)
	j.writeLog(p)
	close(j.changed)
	j.changed = make(chan struct{})
}

// writeLog appends p to the log while it may take it, then a truncation
// line once (j.mu held).
func (j *job) writeLog(p []byte) {
	if j.log == nil || j.logLeft == 0 || len(p) == 0 {
		return
	}
	if j.logLeft > 0 && int64(len(p)) >= j.logLeft {
		w := p[:j.logLeft]
		j.logLeft = 0
		if _, err := j.log.Write(w); err == nil {
			fmt.Fprintf(j.log, "\n[output truncated: the log keeps the first %d bytes]\n", j.logMax)
		}
		return
	}
	if j.logLeft > 0 {
		j.logLeft -= int64(len(p))
	}
	if _, err := j.log.Write(p); err != nil {
		j.logLeft = 0
	}
}

// info is the job's state (j.mu held).
func (j *job) info() wire.JobInfo {
	i := wire.JobInfo{ID: j.id, Command: j.command, State: j.state, PID: j.pid, StartedAt: j.started.UnixMilli(), Code: j.code, Signal: j.signal, KillRequested: j.killRequested}
	if !j.ended.IsZero() {
		i.EndedAt = j.ended.UnixMilli()
	}
	if j.tty != nil {
		sz := *j.tty
		i.TTY = &sz
	}
	return i
}

// kill sends sig to the job's process group and, for a terminal job,
// to every other group of its session: a shell's job control puts each
// pipeline in a group of its own, all in the terminal's session. With
// cont a stopped group is continued first, to take the signal at once.
func (j *job) kill(sig syscall.Signal, cont bool) {
	j.mu.Lock()
	tty := j.tty != nil
	j.mu.Unlock()
	groups := []int{j.pid}
	if tty {
		groups = append(groups, sessionGroups(j.pid)...)
	}
	for _, g := range groups {
		if cont {
			syscall.Kill(-g, syscall.SIGCONT)
		}
		syscall.Kill(-g, sig)
	}
}

// sessionGroups lists the process groups of session sid other than sid's
// own, from /proc (a box has few processes).
func sessionGroups(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(sid)
	var groups []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procstat.Fields(pid)
		if len(f) < 4 || f[3] != want || f[0] == "Z" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g != sid && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

// watch waits for the job's process to end, then ends the job: its process
// group is killed (what it left in the background goes with it, as a
// command's does), its output drained, and its end recorded.
func (s *supervisor) watch(j *job, p *proc, pr *os.File, copied <-chan struct{}) {
	<-p.done
	j.kill(syscall.SIGKILL, false) // what it left, a terminal job's whole session
	if j.stateFile != "" {
		removeState(j.stateFile)
	}
	select {
	case <-copied:
	case <-time.After(wire.DrainGrace):
		pr.Close()
		<-copied
	}
	pr.Close()
	j.inMu.Lock()
	if j.stdin != nil {
		j.stdin.Close()
		j.stdin = nil
	}
	j.inMu.Unlock()
	s.jobs.ended(j, p.ws)
	s.killOrphans()
	if j.saved != "" {
		pruneSaved(j.saved, j.savedFiles, j.savedBytes)
	}
}

// end records the job's end: its state from its process's wait status, its
// log closed (read-only once saved), its waiters woken. Under j.mu.
func (j *job) end(ws syscall.WaitStatus) {
	j.ended = time.Now()
	j.state, j.code = sandbox.JobExited, ws.ExitStatus()
	if ws.Signaled() {
		j.state, j.code, j.signal = sandbox.JobKilled, 128+int(ws.Signal()), signalName(ws.Signal())
	}
	if j.log != nil {
		if j.saved != "" {
			j.log.Chmod(0o444) // ended: any reader of the files can tell
		}
		j.log.Close() // and its lock
		j.log = nil
	}
	j.out.shrink()
	close(j.changed)
	j.changed = make(chan struct{})
}

// copyJob reads a job's output until its pipe ends.
func copyJob(j *job, r *os.File) {
	buf := make([]byte, wire.ChunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			j.appendOut(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGILL: "ILL",
	syscall.SIGTRAP: "TRAP", syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGFPE: "FPE",
	syscall.SIGKILL: "KILL", syscall.SIGUSR1: "USR1", syscall.SIGSEGV: "SEGV", syscall.SIGUSR2: "USR2",
	syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM",
}

func signalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return strconv.Itoa(int(sig))
}

// jobReq is a job request in flight on a channel: KindKill or the channel's
// end stops its wait.
type jobReq struct {
	stop chan struct{}
	once sync.Once
}

func (r *jobReq) cancel() { r.once.Do(func() { close(r.stop) }) }

// jobRequest starts a job request as the frame's stream.
func (c *channel) jobRequest(f wire.Frame) error {
	var req wire.JobRequest
	if err := json.Unmarshal(f.Payload, &req); err != nil {
		return wire.Errorf("job: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(f.Stream); err != nil {
		return err
	}
	r := &jobReq{stop: make(chan struct{})}
	c.jobs[f.Stream] = r
	go func() {
		rep := c.s.serveJob(req, r, func(p []byte) { c.send(wire.KindJobData, f.Stream, p) })
		b, _ := json.Marshal(rep)
		c.send(wire.KindJobEnd, f.Stream, b)
		c.mu.Lock()
		delete(c.jobs, f.Stream)
		c.mu.Unlock()
	}()
	return nil
}

// jobKill is KindKill for a job request; it reports whether id was one.
func (c *channel) jobKill(id uint32) bool {
	c.mu.Lock()
	r := c.jobs[id]
	c.mu.Unlock()
	if r != nil {
		r.cancel()
	}
	return r != nil
}

// stopJobs ends the waits of a channel that ended (never the jobs).
func (c *channel) stopJobs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.jobs {
		r.cancel()
	}
}

func (s *supervisor) serveJob(req wire.JobRequest, r *jobReq, data func([]byte)) wire.JobReply {
	if req.Op == wire.JobStart {
		return s.startJob(req)
	}
	if req.Op == wire.JobList {
		return wire.JobReply{Jobs: s.listJobs()}
	}
	if req.Op == wire.JobUsage {
		return s.usage(req.Dir)
	}
	if !wire.ValidJobID(req.ID) {
		return wire.JobReply{Err: wire.CodeInval, Msg: "not a job id"}
	}
	j := s.jobs.get(req.ID)
	if j == nil {
		return wire.JobReply{Err: wire.CodeNoJob, Msg: "no job " + req.ID}
	}
	switch req.Op {
	case wire.JobOutput:
		return j.output(req, r, data)
	case wire.JobInput:
		return j.input(req)
	case wire.JobKill:
		return s.killJob(j, req.Signal)
	case wire.JobResize:
		return j.resize(req.TTY)
	}
	return wire.JobReply{Err: wire.CodeInval, Msg: "unknown operation"}
}

func (s *supervisor) startJob(req wire.JobRequest) wire.JobReply {
	if len(req.Argv) == 0 {
		return wire.JobReply{Err: wire.CodeInval, Msg: "no command"}
	}
	id, log, rep := s.jobs.reserve(req.JobSettings)
	if rep != nil {
		return *rep
	}
	fail := func(code string, err error) wire.JobReply {
		if log != nil {
			log.Close()
			os.Remove(log.Name()) // no job had this id
		}
		s.jobs.release()
		return wire.JobReply{Err: code, Msg: err.Error()}
	}
	// The output's pipe (pr, pw) and the input's (in, inW); a terminal
	// is both: its master the supervisor's side of each, its slave the
	// command's.
	var pr, pw, in, inW *os.File
	var err error
	if req.TTY != nil {
		if !req.TTY.Valid() {
			return fail(wire.CodeInval, fmt.Errorf("terminal of %dx%d: %d to %d columns, %d to %d rows",
				req.TTY.Cols, req.TTY.Rows, wire.MinTTYCols, wire.MaxTTYCols, wire.MinTTYRows, wire.MaxTTYRows))
		}
		if pr, pw, err = openPTY(*req.TTY); err != nil {
			return fail(wire.CodeStart, err)
		}
		in, inW = pw, pr
		req.Env = append(slices.Clip(req.Env), "TERM="+ttyTerm)
	} else {
		if pr, pw, err = os.Pipe(); err != nil {
			return fail(wire.CodeStart, err)
		}
		if req.Stdin {
			if in, inW, err = os.Pipe(); err != nil {
				pr.Close()
				pw.Close()
				return fail(wire.CodeStart, err)
			}
		}
	}
	var p *proc
	l, err := s.state.prepare(req.Argv, req.Dir, req.Env, req.Shell, false, false)
	if err == nil {
		p, l, err = s.startFrom(l, wire.Exec{Argv: req.Argv, Dir: req.Dir, Env: req.Env}, in, pw, req.TTY != nil)
	}
	pw.Close()
	if in != nil && in != pw {
		in.Close()
	}
	if err != nil {
		if l.file != "" {
			removeState(l.file)
		}
		pr.Close()
		if inW != nil && inW != pr {
			inW.Close()
		}
		return fail(wire.CodeStart, err)
	}
	j := newJob(id, req.Argv, p.pid, req.JobSettings, log)
	j.stdin = inW
	if req.TTY != nil {
		sz := *req.TTY
		j.tty = &sz
	}
	j.stateFile = l.file // its start file, if any
	s.jobs.add(j)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		copyJob(j, pr)
	}()
	go s.watch(j, p, pr, copied)
	j.mu.Lock()
	info := j.info()
	j.mu.Unlock()
	return wire.JobReply{ID: j.id, PID: p.pid, Job: &info}
}

// listJobs is every job, oldest first.
func (s *supervisor) listJobs() []wire.JobInfo {
	t := s.jobs
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]wire.JobInfo, 0, len(t.order))
	for _, j := range t.order {
		j.mu.Lock()
		out = append(out, j.info())
		j.mu.Unlock()
	}
	return out
}

// output answers an output request: from req.Offset (or the shown cursor),
// once there is something past it or the job ended or the wait passed.
func (j *job) output(req wire.JobRequest, r *jobReq, data func([]byte)) wire.JobReply {
	wait := min(max(req.WaitMS, 0), wire.MaxJobWait)
	deadline := time.NewTimer(time.Duration(wait) * time.Millisecond)
	defer deadline.Stop()
	for {
		select {
		case <-r.stop: // first: a wait that was ended shows nothing
			return wire.JobReply{Err: wire.CodeCancelled, Msg: "cancelled"}
		default:
		}
		j.mu.Lock()
		from := j.shown
		if req.Offset != nil {
			from = max(*req.Offset, 0)
		}
		if wait == 0 || j.state != sandbox.JobRunning || j.out.ready(from) {
			break // j.mu held
		}
		changed := j.changed
		j.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			wait = 0
		case <-r.stop:
			return wire.JobReply{Err: wire.CodeCancelled, Msg: "cancelled"}
		}
	}
	from := j.shown
	if req.Offset != nil {
		from = max(*req.Offset, 0)
	}
	b, start, next, dropped := j.out.read(from, wire.MaxJobRead, j.state != sandbox.JobRunning)
	b = append([]byte(nil), b...)
	if !req.Peek {
		j.shown = max(j.shown, next) // what a read from an offset showed was shown too
	}
	info := j.info()
	j.mu.Unlock()
	for len(b) > 0 {
		n := min(len(b), wire.MaxPayload)
		data(b[:n])
		b = b[n:]
	}
	return wire.JobReply{Job: &info, Offset: start, NextOffset: next, Dropped: dropped}
}

// input writes to the job's stdin, or closes it.
func (j *job) input(req wire.JobRequest) wire.JobReply {
	if len(req.Data) > wire.MaxJobInput {
		return wire.JobReply{Err: wire.CodeInval, Msg: fmt.Sprintf("input of %d bytes: over the %d limit", len(req.Data), wire.MaxJobInput)}
	}
	j.inMu.Lock()
	defer j.inMu.Unlock()
	j.mu.Lock()
	info := j.info()
	j.mu.Unlock()
	if info.State != sandbox.JobRunning {
		return wire.JobReply{Err: wire.CodeEnded, Msg: "the job has ended", Job: &info}
	}
	if j.stdin == nil {
		return wire.JobReply{Err: wire.CodeNoStdin, Msg: "the job has no input (not started with one, or closed)", Job: &info}
	}
	if len(req.Data) > 0 {
		j.stdin.SetWriteDeadline(time.Now().Add(jobInputStall))
		n, err := j.stdin.Write(req.Data)
		if err != nil {
			code := wire.CodeBlocked
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				code = wire.CodeEnded
			}
			return wire.JobReply{Err: code, Msg: fmt.Sprintf("%d of %d bytes written: %v", n, len(req.Data), err), Job: &info}
		}
	}
	if req.Close && info.TTY != nil {
		// A terminal stays: the EOF character ends what reads it, as
		// Ctrl-D at a terminal does.
		j.stdin.SetWriteDeadline(time.Now().Add(jobInputStall))
		if _, err := j.stdin.Write([]byte{ttyEOF}); err != nil {
			return wire.JobReply{Err: wire.CodeBlocked, Msg: fmt.Sprintf("end of input: %v", err), Job: &info}
		}
	} else if req.Close {
		j.stdin.Close()
		j.stdin = nil
	}
	return wire.JobReply{Job: &info}
}

// ttyTerm is a terminal job's TERM: what the server's renderer reads.
const ttyTerm = "xterm-256color"

// ttyEOF is the EOF character of a new terminal (VEOF, ^D).
const ttyEOF = 4

// resize sets a terminal job's size.
func (j *job) resize(sz *wire.TTY) wire.JobReply {
	if sz == nil || !sz.Valid() {
		return wire.JobReply{Err: wire.CodeInval, Msg: fmt.Sprintf("size: %d to %d columns, %d to %d rows", wire.MinTTYCols, wire.MaxTTYCols, wire.MinTTYRows, wire.MaxTTYRows)}
	}
	j.inMu.Lock()
	defer j.inMu.Unlock()
	j.mu.Lock()
	info := j.info()
	j.mu.Unlock()
	switch {
	case info.TTY == nil:
		return wire.JobReply{Err: wire.CodeNoTTY, Msg: "the job is not on a terminal", Job: &info}
	case info.State != sandbox.JobRunning || j.stdin == nil:
		return wire.JobReply{Err: wire.CodeEnded, Msg: "the job has ended", Job: &info}
	}
	if err := setSize(j.stdin, *sz); err != nil {
		return wire.JobReply{Err: wire.CodeInval, Msg: err.Error(), Job: &info}
	}
	j.mu.Lock()
	j.tty = sz
	info = j.info()
	j.mu.Unlock()
	return wire.JobReply{Job: &info}
}

var killSignals = map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL}

// killJob signals a running job's process group; an ended job's state is
// the answer.
func (s *supervisor) killJob(j *job, name string) wire.JobReply {
	sig, ok := killSignals[name]
	if !ok {
		return wire.JobReply{Err: wire.CodeInval, Msg: "signal: TERM, INT or KILL"}
	}
	s.mu.Lock() // the reaper's lock: the group's leader is not reaped under it
	sent := s.procs[j.pid] != nil
	if sent {
		j.kill(sig, true) // a stopped group takes the signal at once (SIGCONT first)
	}
	s.mu.Unlock()
	j.mu.Lock()
	if sent && j.state == sandbox.JobRunning {
		j.killRequested = true
	}
	info := j.info()
	j.mu.Unlock()
	return wire.JobReply{Job: &info}
}

// sendOut sends a command's output, or gives it to the job the command
// became.
func (c *channel) sendOut(id uint32, st *stream, p []byte) bool {
	if st.pre == nil {
		return c.send(wire.KindOutput, id, p) == nil
	}
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	if st.job != nil {
		st.job.appendOut(p)
		return true
	}
	st.pre.append(p)
	return c.send(wire.KindOutput, id, p) == nil
}

// yieldJob turns a command that still runs into a job, unless MaxJobs run
// already or its log cannot be made: its process group goes on, its
// output from here goes to the job, and what the stream sent counts as
// shown (the job's ring and log start with it). It returns the job's id,
// or "" when the command stays in the foreground.
func (c *channel) yieldJob(st *stream, m wire.Exec, p *proc, pr *os.File, copied <-chan struct{}, stateFile string, stdin *os.File) string {
	s := c.s
	select {
	case <-st.kill: // the server ended it: it ends
		return ""
	default:
	}
	id, log, rep := s.jobs.reserve(m.JobSettings)
	if rep != nil {
		return ""
	}
	j := newJob(id, m.Argv, p.pid, m.JobSettings, log)
	j.stateFile = stateFile
	j.stdin = stdin
	st.sendMu.Lock()
	j.mu.Lock()
	j.out = *st.pre
	j.shown = j.out.chars
	if log != nil && j.out.baseChars > 0 {
		fmt.Fprintf(log, "[%d earlier characters not kept]\n", j.out.baseChars)
	}
	j.writeLog(j.out.kept())
	j.mu.Unlock()
	st.mu.Lock()
	st.job = j
	st.cond.Broadcast()
	st.mu.Unlock()
	st.sendMu.Unlock()
	s.jobs.add(j)
	go s.watch(j, p, pr, copied)
	return j.id
}
