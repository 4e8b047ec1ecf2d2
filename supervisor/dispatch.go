package supervisor

import (
	"encoding/json"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// dispatch is the client's dispatch table: what it does with each kind of
// frame a supervisor sends (wire/kinds.go), by the kind of stream it
// belongs to. Any other kind (a second hello too) ends the channel.
var dispatch = map[wire.Kind]func(c *Conn, f wire.Frame) error{
	wire.KindStart:  onCall((*call).onStart),
	wire.KindOutput: onCall((*call).onOutput),
	wire.KindExit:   onCall((*call).onExit),

	wire.KindFSInfo:    onFS((*fsCall).onInfo),
	wire.KindFSData:    onFS((*fsCall).onData),
	wire.KindFSEntries: onFS((*fsCall).onEntries),
	wire.KindCredit:    (*Conn).onCredit, // a pipe's, or a file write's
	wire.KindFSEnd:     onFS((*fsCall).onEnd),

	wire.KindJobData: onJob((*jobCall).onData),
	wire.KindJobEnd:  onJob((*jobCall).onEnd),

	wire.KindNetOpen: (*Conn).onNetOpen,
	wire.KindNetData: onPipe((*pipe).onData),
	wire.KindNetEOF:  onPipe((*pipe).onEOF),
	wire.KindNetEnd:  (*Conn).onNetEnd,
}

// pipeKinds are the kinds a stream the supervisor opened
// (wire.DaemonStream) carries.
var pipeKinds = map[wire.Kind]bool{wire.KindNetOpen: true, wire.KindNetData: true, wire.KindNetEOF: true, wire.KindNetEnd: true, wire.KindCredit: true}

// dispatch acts on one frame from the supervisor; an error ends the
// channel.
func (c *Conn) dispatch(f wire.Frame) error {
	h := dispatch[f.Kind]
	if h == nil {
		return wire.Errorf("unexpected message kind %d", f.Kind)
	}
	if f.Stream&wire.DaemonStream != 0 && !pipeKinds[f.Kind] {
		return wire.Errorf("message kind %d on the supervisor's stream %#x", f.Kind, f.Stream)
	}
	return h(c, f)
}

// onCall is a command's frame: for a command that already returned
// (cancelled), dropped; else handled with the call locked.
func onCall(h func(cl *call, f wire.Frame) error) func(*Conn, wire.Frame) error {
	return func(c *Conn, f wire.Frame) error {
		c.mu.Lock()
		cl := c.calls[f.Stream]
		c.mu.Unlock()
		if cl == nil {
			return nil
		}
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return h(cl, f)
	}
}

// onFS is a file operation's frame. A frame that does not fit the
// operation (a kind it does not send, more bytes or entries than allowed,
// a stream never opened) ends the channel; it is checked whole before the
// call sees any of it.
func onFS(h func(fc *fsCall, f wire.Frame) error) func(*Conn, wire.Frame) error {
	return func(c *Conn, f wire.Frame) error {
		c.mu.Lock()
		fc, exec, next := c.fs[f.Stream], c.calls[f.Stream], c.next
		c.mu.Unlock()
		switch {
		case exec != nil:
			return wire.Errorf("file message on command stream %d", f.Stream)
		case fc == nil && (f.Stream == 0 || f.Stream > next):
			return wire.Errorf("message on stream %d, which was never opened", f.Stream)
		case fc == nil:
			return nil // an operation that already returned (cancelled, or the file closed early)
		}
		if len(f.Payload) == 0 && f.Kind != wire.KindFSEnd {
			// A frame that carries nothing would only keep a call waiting.
			return wire.Errorf("stream %d: an empty message", f.Stream)
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.end != nil {
			return wire.Errorf("stream %d: a message after its end", f.Stream)
		}
		fc.replied = true
		defer fc.signal()
		return h(fc, f)
	}
}

// onJob is a job request's frame, checked as onFS checks a file
// operation's.
func onJob(h func(jc *jobCall, f wire.Frame) error) func(*Conn, wire.Frame) error {
	return func(c *Conn, f wire.Frame) error {
		c.mu.Lock()
		jc, next := c.jobs[f.Stream], c.next
		other := c.calls[f.Stream] != nil || c.fs[f.Stream] != nil
		c.mu.Unlock()
		switch {
		case other:
			return wire.Errorf("job message on stream %d of another kind", f.Stream)
		case jc == nil && (f.Stream == 0 || f.Stream > next):
			return wire.Errorf("message on stream %d, which was never opened", f.Stream)
		case jc == nil:
			return nil // a request that already returned (cancelled)
		}
		jc.mu.Lock()
		defer jc.mu.Unlock()
		defer jc.signal()
		if jc.end != nil {
			return wire.Errorf("stream %d: a message after its end", f.Stream)
		}
		jc.replied = true
		return h(jc, f)
	}
}

// onStart: the command was started.
func (cl *call) onStart(wire.Frame) error {
	cl.started = true
	return nil
}

// onOutput takes a command's output, within its credit.
func (cl *call) onOutput(f wire.Frame) error {
	if cl.exit != nil {
		return wire.Errorf("output on stream %d after its exit", f.Stream)
	}
	if len(f.Payload) == 0 {
		return wire.Errorf("stream %d: an empty output frame", f.Stream)
	}
	if cl.pending+len(f.Payload) > wire.Window {
		return wire.Errorf("stream %d sent more output than its credit", f.Stream)
	}
	// Small frames fill the last buffer before another is taken, so the
	// buffers held stay about Window bytes however the output is cut into
	// frames.
	if n := len(cl.chunks); n > 0 && len(cl.chunks[n-1])+len(f.Payload) <= cap(cl.chunks[n-1]) {
		cl.chunks[n-1] = append(cl.chunks[n-1], f.Payload...)
	} else {
		cl.chunks = append(cl.chunks, cl.chunk(f.Payload))
	}
	cl.pending += len(f.Payload)
	cl.cond.Broadcast()
	return nil
}

// onExit takes how a command ended.
func (cl *call) onExit(f wire.Frame) error {
	var m wire.Exit
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("exit: %v", err)
	}
	if cl.exit != nil {
		return wire.Errorf("stream %d exited twice", f.Stream)
	}
	if m.Job != "" && (!wire.ValidJobID(m.Job) || !m.Running || m.Error != "") || m.Job == "" && m.Running {
		return wire.Errorf("stream %d: a malformed job in its exit", f.Stream)
	}
	m.Error = wire.CapText(m.Error, 1024)
	cl.exit, cl.ended = &m, true
	cl.cond.Broadcast()
	return nil
}
