//go:build unix

package daemon

import (
	"encoding/json"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// handlers is the daemon's dispatch table: what it does with each kind of
// frame the server sends (wire/kinds.go). Any other kind ends the channel.
var handlers = map[wire.Kind]func(c *channel, f wire.Frame) error{
	wire.KindExec:     (*channel).exec,
	wire.KindCredit:   (*channel).credit,
	wire.KindKill:     (*channel).kill,
	wire.KindFS:       (*channel).startFS,
	wire.KindFSData:   (*channel).writeFS,
	wire.KindFSCommit: (*channel).writeFS,
	wire.KindJob:      (*channel).jobRequest,
	wire.KindNet:      (*channel).netRequest,
	wire.KindNetData:  (*channel).pipeData,
	wire.KindNetEOF:   (*channel).pipeEOF,
	wire.KindNetEnd:   (*channel).pipeEnd,
	wire.KindCkpt:     (*channel).startCkpt,
}

// handle acts on one frame from the server.
func (c *channel) handle(f wire.Frame) error {
	h := handlers[f.Kind]
	if h == nil {
		return wire.Errorf("unknown message kind %d", f.Kind)
	}
	return h(c, f)
}

// open registers a new stream of the channel (c.mu held): each stream id
// is used once, by one kind of stream, and never has the bit of the
// supervisor's own (wire.DaemonStream).
func (c *channel) open(id uint32) error {
	if id&wire.DaemonStream != 0 {
		return wire.Errorf("the server opened stream %#x, of the supervisor's", id)
	}
	if id == 0 || c.streams[id] != nil || c.fs[id] != nil || c.jobs[id] != nil || c.pipes[id] != nil {
		return wire.Errorf("stream %d started twice", id)
	}
	c.maxOpened = max(c.maxOpened, id)
	return nil
}

// exec starts a command as the frame's stream (supervise.go).
func (c *channel) exec(f wire.Frame) error {
	var m wire.Exec
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("exec: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(f.Stream); err != nil {
		return err
	}
	st := &stream{kill: make(chan struct{}), credit: wire.Window}
	st.cond = sync.NewCond(&st.mu)
	c.streams[f.Stream] = st
	go c.run(f.Stream, st, m)
	return nil
}

// credit gives a command's stream, a file operation's or a pipe, more
// room.
func (c *channel) credit(f wire.Frame) error {
	n, err := wire.ParseCredit(f.Payload)
	if err != nil {
		return err
	}
	c.mu.Lock()
	_, pipe := c.pipes[f.Stream]
	c.mu.Unlock()
	if pipe || f.Stream&wire.DaemonStream != 0 {
		return c.pipeCredit(f, n)
	}
	if st := c.stream(f.Stream); st != nil {
		st.mu.Lock()
		st.credit += int(n)
		st.cond.Broadcast()
		st.mu.Unlock()
	} else if st := c.fsStream(f.Stream); st != nil {
		st.mu.Lock()
		st.credit += int(n)
		st.cond.Broadcast()
		st.mu.Unlock()
	}
	return nil
}

// kill kills a command's process group, ends a job request's wait, or
// stops a file operation.
func (c *channel) kill(f wire.Frame) error {
	if st := c.stream(f.Stream); st != nil {
		st.stop()
	} else if !c.jobKill(f.Stream) {
		if st := c.fsStream(f.Stream); st != nil {
			st.stop()
		}
	}
	return nil
}
