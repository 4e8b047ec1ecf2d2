package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Conn is the server's end of one channel to a supervisor. Many calls share
// it; each is a stream. Every byte from the supervisor is treated as
// hostile: frames are checked (wire/frame.go), a stream may hold at most
// wire.Window bytes the server has not consumed, and anything malformed
// ends the channel — every call on it then fails, and the provider starts
// or dials a new one for the next.
type Conn struct {
	hello       wire.Hello
	closer      io.Closer
	sendTimeout time.Duration // sendTimeout; tests shorten it

	wm sync.Mutex
	fw wire.Writer

	mu    sync.Mutex
	next  uint32
	calls map[uint32]*call
	fs    map[uint32]*fsCall  // file operations (fs.go)
	jobs  map[uint32]*jobCall // job requests (jobs.go)
	err   error               // why the channel ended, set once before done is closed
	done  chan struct{}

	// Network requests and pipes (net.go, pipe.go).
	nets       map[uint32]*netCall // listen requests
	pipes      map[uint32]*pipe    // pipes, of either side's ids
	accept     func(net.Conn)      // the last Listen's
	listenAddr net.Addr            // the proxy listener's, once Listen answered
	peerNext   uint32              // the last pipe id the supervisor opened (without wire.DaemonStream)
	refusing   int                 // refusals of opens in flight
}

// call is one command in flight on a Conn.
type call struct {
	mu      sync.Mutex
	cond    *sync.Cond
	chunks  [][]byte
	pending int  // bytes in chunks
	ended   bool // Exit came, or the channel ended
	started bool // Start came
	exit    *wire.Exit
	free    [][]byte // consumed chunks, for reuse
}

// ErrProtocol is wrapped by every error that a malformed frame causes
// (wire.ErrProtocol).
var ErrProtocol = wire.ErrProtocol

// ErrVersion: the supervisor is of another release, or speaks another
// version of the protocol.
var ErrVersion = errors.New("supervisor version mismatch")

// checkVersion refuses a supervisor of another release or protocol than
// a server of version mine.
func checkVersion(h wire.Hello, mine string) error {
	if h.Protocol == wire.Protocol && wire.SameRelease(h.Version, mine) {
		return nil
	}
	return fmt.Errorf("%w: the sandbox's supervisor is %s (protocol %d), this server %s (protocol %d): the sandbox runs another version of sandbox-mcp's supervisor",
		ErrVersion, wire.Describe(wire.CapText(h.Version, 64)), h.Protocol, wire.Describe(mine), wire.Protocol)
}

// validBoot reports whether b is a Hello.Boot: 32 lowercase hex digits
// (128 bits), or none (a supervisor that says nothing of its starts).
func validBoot(b string) bool {
	if b == "" {
		return true
	}
	if len(b) != 32 {
		return false
	}
	for _, c := range []byte(b) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// helloTimeout bounds how long a new channel may take to say hello.
const helloTimeout = 30 * time.Second

// NewConn runs the server's end of a channel over r and w (a supervisor's
// stdout and stdin, or one socket for both) and waits for its hello.
// closer ends the transport (and, where it is a process, the process); it
// is called once, when the channel fails or is closed.
func NewConn(ctx context.Context, r io.Reader, w io.Writer, closer io.Closer) (*Conn, error) {
	c := &Conn{sendTimeout: sendTimeout, closer: closer, fw: wire.Writer{W: w}, calls: map[uint32]*call{}, fs: map[uint32]*fsCall{}, jobs: map[uint32]*jobCall{},
		nets: map[uint32]*netCall{}, pipes: map[uint32]*pipe{}, done: make(chan struct{})}
	fr := &wire.Reader{R: bufio.NewReaderSize(r, 64<<10)}
	got := make(chan error, 1)
	go func() {
		f, err := fr.Read()
		switch {
		case err != nil:
		case f.Kind != wire.KindHello || f.Stream != 0:
			err = wire.Errorf("first frame is kind %d, not a hello", f.Kind)
		default:
			if err = json.Unmarshal(f.Payload, &c.hello); err != nil {
				err = wire.Errorf("hello: %v", err)
			} else if !validBoot(c.hello.Boot) {
				err = wire.Errorf("hello: a malformed boot %q", wire.CapText(c.hello.Boot, 40))
			} else {
				err = checkVersion(c.hello, wire.Version())
			}
		}
		got <- err
		if err == nil {
			c.readLoop(fr)
		}
	}()
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-got:
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errors.New("the supervisor did not answer")
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the supervisor ended before it answered")
		}
		c.fail(err)
		return nil, err
	}
	return c, nil
}

// Hello is what the supervisor said of itself.
func (c *Conn) Hello() wire.Hello { return c.hello }

// Done is closed when the channel has ended; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the channel ended, or nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the channel; calls in flight fail.
func (c *Conn) Close() error {
	c.fail(errors.New("closed"))
	return nil
}

// fail ends the channel with err (the first reason is kept).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls, fsCalls, jobCalls, pipes := c.calls, c.fs, c.jobs, c.pipes
	c.calls, c.fs, c.jobs, c.pipes = map[uint32]*call{}, map[uint32]*fsCall{}, map[uint32]*jobCall{}, map[uint32]*pipe{}
	for _, nc := range c.nets {
		nc.failed = true
		select {
		case nc.notify <- struct{}{}:
		default:
		}
	}
	c.accept = nil
	close(c.done)
	c.mu.Unlock()
	for _, p := range pipes {
		p.fail(err)
	}
	for _, fc := range fsCalls {
		fc.fail()
	}
	for _, jc := range jobCalls {
		jc.fail()
	}
	if c.closer != nil {
		c.closer.Close()
	}
	for _, cl := range calls {
		cl.mu.Lock()
		cl.ended = true
		cl.cond.Broadcast()
		cl.mu.Unlock()
	}
}

// channelErr is a call's error once the channel failed.
func (c *Conn) channelErr() error {
	err := c.Err()
	if err == nil {
		err = errors.New("ended")
	}
	return &ChannelError{Err: err}
}

// sendTimeout bounds one frame's write: a supervisor that stops reading
// (its socket's or pipe's buffer full) fails the channel, whose closing
// unblocks the write, rather than hold every call of the channel.
const sendTimeout = 10 * time.Second

// errNotReading: a frame could not be written within sendTimeout.
var errNotReading = errors.New("the sandbox's supervisor stopped reading")

func (c *Conn) send(kind wire.Kind, id uint32, payload []byte) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	stalled := time.AfterFunc(c.sendTimeout, func() { c.fail(errNotReading) })
	defer stalled.Stop()
	if err := c.fw.Write(kind, id, payload); err != nil {
		c.fail(fmt.Errorf("write: %w", err))
		return err
	}
	return nil
}

// readLoop dispatches the supervisor's frames until the channel ends.
func (c *Conn) readLoop(fr *wire.Reader) {
	for {
		f, err := fr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the supervisor ended")
			}
			c.fail(err)
			return
		}
		if err := c.dispatch(f); err != nil {
			c.fail(err)
			return
		}
	}
}

// ExecRequest is one command for a supervisor.
type ExecRequest struct {
	Argv    []string
	Dir     string
	Timeout time.Duration // 0: none
	Output  io.Writer     // stdout and stderr, interleaved
	// YieldAfter: a command still running then becomes a job (limited by
	// Jobs, its log in LogDir) rather than going on; 0: never. The job's
	// output offsets count from the command's start, and what Output got
	// counts as shown.
	YieldAfter time.Duration
	Jobs       sandbox.JobLimits
	LogDir     string // where jobs' logs go, as the supervisor sees it
	// Shell: the command runs as the next of the sandbox's one shell: from
	// the working directory and exported variables the last Shell command
	// that ended in the foreground left, and what it leaves is kept for
	// the next (wire.Exec.Shell). Argv must be [shell, "-c", script] or
	// [shell, "-c", script, $0].
	Shell bool
	// ResetState: the kept shell state is forgotten first.
	ResetState bool
	Env        []string // sandbox.ExecRequest.Env
	Stdin      bool     // sandbox.ExecRequest.Stdin
}

// ErrUnresponsive: the supervisor did not end a command it was told to
// kill (it may be stopped, or the sandbox hung). The provider's last
// resort follows: the sandbox is ended, with every process in it.
var ErrUnresponsive = errors.New("the sandbox's supervisor did not end the command")

// killGrace is how long a command told to end (timeout, cancellation) may
// take before ErrUnresponsive: the supervisor's own drain grace and then
// some.
const killGrace = wire.DrainGrace + 3*time.Second

// Exec runs a command and waits for its end, copying its output to
// req.Output as it comes. A cancelled ctx kills the command and returns
// ctx's error. An error that is not ctx's means the command's end is not
// known: the channel failed (the call gets a clear error, never a hang), or
// ErrUnresponsive.
func (c *Conn) Exec(ctx context.Context, req ExecRequest) (sandbox.ExecResult, error) {
	body, err := json.Marshal(wire.Exec{Argv: req.Argv, Dir: req.Dir, TimeoutMS: req.Timeout.Milliseconds(), YieldAfterMS: req.YieldAfter.Milliseconds(), Shell: req.Shell, Reset: req.ResetState, Env: req.Env, Stdin: req.Stdin, JobSettings: jobSettings(req.Jobs, req.LogDir)})
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	cl := &call{}
	cl.cond = sync.NewCond(&cl.mu)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return sandbox.ExecResult{}, &ChannelError{Err: err, NotStarted: true}
	}
	c.next++
	id := c.next
	c.calls[id] = cl
	c.mu.Unlock()
	drained := make(chan struct{})
	defer func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		cl.mu.Lock()
		cl.ended, cl.chunks = true, nil
		cl.cond.Broadcast()
		cl.mu.Unlock()
		<-drained // no write to req.Output after Exec returns
	}()
	if err := c.send(wire.KindExec, id, body); err != nil {
		close(drained)
		return sandbox.ExecResult{}, &ChannelError{Err: c.Err(), NotStarted: true}
	}

	// Output goes to req.Output from here, in order; credit goes back as
	// it is consumed.
	out := req.Output
	if out == nil {
		out = io.Discard
	}
	go func() {
		defer close(drained)
		for {
			cl.mu.Lock()
			for len(cl.chunks) == 0 && !cl.ended {
				cl.cond.Wait()
			}
			if len(cl.chunks) == 0 {
				cl.mu.Unlock()
				return
			}
			chunk := cl.chunks[0]
			cl.chunks = cl.chunks[1:]
			cl.mu.Unlock()
			out.Write(chunk)
			n := len(chunk)
			cl.mu.Lock()
			cl.pending -= n
			if cap(chunk) == wire.ChunkSize {
				cl.free = append(cl.free, chunk[:0])
			}
			cl.mu.Unlock()
			c.send(wire.KindCredit, id, wire.Credit(n))
		}
	}()

	// The supervisor enforces the timeout; this side's own clock only
	// notices one that does not.
	var backstop <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout + killGrace)
		defer t.Stop()
		backstop = t.C
	}
	var ctxErr error
	select {
	case <-drained:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		c.send(wire.KindKill, id, nil)
		t := time.NewTimer(killGrace)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			return sandbox.ExecResult{}, ErrUnresponsive
		}
	case <-backstop:
		// An honest supervisor has long killed it and said so.
		c.send(wire.KindKill, id, nil)
		return sandbox.ExecResult{TimedOut: true}, ErrUnresponsive
	}
	cl.mu.Lock()
	exit, started := cl.exit, cl.started || cl.exit != nil
	cl.mu.Unlock()
	if ctxErr != nil {
		return sandbox.ExecResult{}, ctxErr
	}
	if exit == nil {
		err := c.Err()
		if err == nil {
			err = errors.New("ended")
		}
		return sandbox.ExecResult{}, &ChannelError{Err: err, NotStarted: !started}
	}
	if exit.Error != "" {
		return sandbox.ExecResult{}, fmt.Errorf("start command: %s", exit.Error)
	}
	return sandbox.ExecResult{ExitCode: exit.Code, TimedOut: exit.TimedOut, Job: exit.Job, OOMKills: max(exit.OOMKills, 0), MemoryMax: max(exit.MemoryMax, 0)}, nil
}

// ChannelError: the channel to a sandbox's supervisor failed; the command's
// end is not known.
type ChannelError struct {
	Err error
	// NotStarted: the supervisor never said the command started, so it
	// did not run (the channel was gone first): trying it again on a new
	// channel runs it once.
	NotStarted bool
}

func (e *ChannelError) Error() string {
	return "the sandbox's supervisor channel failed: " + e.Err.Error() + "; the next call starts a new one"
}

func (e *ChannelError) Unwrap() error { return e.Err }

// chunk copies p out of the frame reader's buffer, into a buffer the call
// used before when it can (cl.mu is held): a command that prints a
// gigabyte costs no gigabyte of garbage. At most Window/ChunkSize buffers
// are ever in use.
func (cl *call) chunk(p []byte) []byte {
	if len(p) > wire.ChunkSize {
		return append([]byte(nil), p...)
	}
	if n := len(cl.free); n > 0 {
		b := cl.free[n-1]
		cl.free = cl.free[:n-1]
		return append(b, p...)
	}
	return append(make([]byte, 0, wire.ChunkSize), p...)
}
