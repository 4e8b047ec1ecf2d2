package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// stdioWorkers is how many requests of the stdio session run at once;
// while all are busy, input waits.
const stdioWorkers = 32

// ServeStdio serves one MCP session on in/out, bound to thread, until in
// ends or ctx is cancelled. Calls still running are cancelled then (their
// commands killed) and recorded before it returns.
//
// This is our own loop rather than mcp-go's StdioServer, for latency: the
// worker that reads a request hands reading on to the next worker and
// serves the request itself, so a call never waits for another goroutine
// to be scheduled (mcp-go's loop hands each line to a reading goroutine
// and each call to a worker: two wake-ups, 50–100 µs each on a small VM,
// more than the tool), the message is parsed once here and once by
// MCPServer.HandleMessage instead of five times, and a plain-text answer
// is encoded directly (encodeMessage).
func (s *Server) ServeStdio(ctx context.Context, thread string, in io.Reader, out io.Writer) error {
	sess := &stdioSession{notifications: make(chan mcp.JSONRPCNotification, 100)}
	if err := s.mcp.RegisterSession(ctx, sess); err != nil {
		return fmt.Errorf("register session: %w", err)
	}
	defer s.mcp.UnregisterSession(context.WithoutCancel(ctx), sess.SessionID())
	outer := ctx
	ctx = withThreads(ctx, func(string, http.Header) ThreadRef { return ThreadRef{ID: thread, Key: thread} })
	ctx, cancel := context.WithCancel(s.mcp.WithContext(ctx, sess))
	defer cancel()

	l := &stdioLoop{
		srv:  s,
		ctx:  ctx,
		in:   bufio.NewReaderSize(in, 64<<10),
		out:  out,
		done: make(chan error, 1),
	}
	var notes sync.WaitGroup
	notes.Go(func() {
		for {
			select {
			case n := <-sess.notifications:
				l.write(n)
			case <-ctx.Done():
				return
			}
		}
	})
	l.workers = 1
	go l.worker()
	var err error
	select {
	case err = <-l.done:
	case <-ctx.Done():
	}
	// As mcp-go's loop did: input ended, so calls in flight are cancelled
	// (their commands killed) and awaited; their answers have nowhere to go.
	// A worker still blocked reading (ctx cancelled, stdin open) is left to
	// the process's exit.
	cancel()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.calls.Wait()
	notes.Wait()
	if errors.Is(err, io.EOF) || outer.Err() != nil {
		err = nil
	}
	return err
}

// stdioLoop is one stdio session: up to stdioWorkers goroutines take turns
// at reading, and each request is served by the worker that read it.
type stdioLoop struct {
	srv  *Server
	ctx  context.Context
	in   *bufio.Reader
	out  io.Writer
	done chan error

	mu     sync.Mutex
	closed bool           // ServeStdio is returning: no new calls; under mu
	calls  sync.WaitGroup // requests read and not yet answered

	readMu  sync.Mutex   // held by the worker that reads
	ended   bool         // input has ended; under readMu
	workers int          // started, at most stdioWorkers; under readMu
	waiting atomic.Int32 // workers waiting for readMu

	writeMu sync.Mutex
	wbuf    []byte
}

// worker takes turns with the other workers at reading: it reads until it
// has a request, hands reading on, and serves the request. Notifications
// and responses are handled in line, in order, while it reads.
func (l *stdioLoop) worker() {
	for {
		line, method, err := l.next()
		if line == nil {
			return
		}
		l.serve(line, method)
		l.calls.Done()
		if err != nil {
			return
		}
	}
}

// next reads up to the next request and returns it and its method, counted
// in l.calls; nil when input has ended (l.done told) or the session is
// over.
func (l *stdioLoop) next() ([]byte, string, error) {
	l.waiting.Add(1)
	l.readMu.Lock()
	l.waiting.Add(-1)
	defer l.readMu.Unlock()
	for !l.ended && l.ctx.Err() == nil {
		line, tooLong, err := l.readLine()
		if tooLong {
			l.write(mcp.NewJSONRPCError(mcp.NewRequestId(nil), mcp.PARSE_ERROR,
				fmt.Sprintf("message over %d bytes", l.srv.cfg.MaxStdioLine), nil))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var head struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			parsed := json.Unmarshal(line, &head) == nil
			switch {
			case parsed && head.Method == "" && head.ID != nil:
				// A response from the client: this server sends no
				// requests, so there is nothing waiting for it.
			case parsed && head.ID != nil:
				if !l.begin() {
					return nil, "", nil
				}
				if l.waiting.Load() == 0 && l.workers < stdioWorkers {
					// Nobody to take over reading while this call runs:
					// one more worker (the pool grows to the concurrency
					// the client uses).
					l.workers++
					go l.worker()
				}
				if err != nil {
					l.ended = true
					l.end(err)
				}
				return line, head.Method, err
			default:
				// Notifications, and unparsable lines (answered with a
				// parse error).
				l.serve(line, "")
			}
		}
		if err != nil {
			l.ended = true
			l.end(err)
		}
	}
	return nil, "", nil
}

// end ends the session with err, unless it has ended already.
func (l *stdioLoop) end(err error) {
	select {
	case l.done <- err:
	default:
	}
}

// begin counts a call in l.calls unless ServeStdio is returning.
func (l *stdioLoop) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.calls.Add(1)
	return true
}

// readLine returns the next line, newline included. A line longer than
// Config.MaxStdioLine (like a POST over http.max_body_bytes) is read to its
// end but not kept: tooLong reports it.
func (l *stdioLoop) readLine() (line []byte, tooLong bool, err error) {
	for {
		frag, err := l.in.ReadSlice('\n')
		if !tooLong && len(line)+len(frag) > l.srv.cfg.MaxStdioLine {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, frag...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, tooLong, err
		}
	}
}

// serve runs one message through mcp-go — a request of the tasks
// extension through tasks.go, before mcp-go sees it — and writes the
// answer, if any. A panic in a handler becomes an internal error for that
// request.
func (l *stdioLoop) serve(line []byte, method string) {
	var resp mcp.JSONRPCMessage
	func() {
		defer func() {
			if r := recover(); r != nil {
				l.srv.cfg.Logger.Error("panic in a stdio request", "panic", fmt.Sprint(r))
				var head struct {
					ID any `json:"id"`
				}
				_ = json.Unmarshal(line, &head)
				if head.ID != nil {
					resp = mcp.NewJSONRPCError(mcp.NewRequestId(head.ID), mcp.INTERNAL_ERROR, "internal error", nil)
				}
			}
		}()
		if isTaskMethod(method) {
			resp = l.srv.taskMessage(l.ctx, nil, line)
			return
		}
		ctx, ans := l.ctx, (*taskAnswer)(nil)
		if method == string(mcp.MethodToolsCall) {
			ctx, ans = withTaskAnswer(ctx) // a call that goes on as a task answers it
		}
		resp = ans.answer(l.srv.mcp.HandleMessage(ctx, line))
	}()
	if resp != nil {
		l.write(resp)
	}
}

// write sends one message as one line, in one write.
func (l *stdioLoop) write(msg any) {
	b, err := encodeMessage(msg)
	if err != nil {
		l.srv.cfg.Logger.Error("stdio: encode an answer", "err", err)
		return
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.wbuf = append(append(l.wbuf[:0], b...), '\n')
	if _, err := l.out.Write(l.wbuf); err != nil {
		// Nobody hears this session any more: it ends as at the end of
		// its input (calls in flight cancelled, their commands killed).
		// A closed pipe is the client gone, not a failure.
		if errors.Is(err, syscall.EPIPE) {
			err = io.EOF
		} else {
			err = fmt.Errorf("stdio: write an answer: %w", err)
		}
		l.end(err)
	}
	if cap(l.wbuf) > 1<<20 {
		l.wbuf = nil // do not keep a large answer's buffer
	}
}

// stdioSession is the one client session of a stdio server.
type stdioSession struct {
	notifications chan mcp.JSONRPCNotification
	initialized   atomic.Bool
	level         atomic.Value // mcp.LoggingLevel

	mu      sync.Mutex
	info    mcp.Implementation
	caps    mcp.ClientCapabilities
	version string // negotiated at initialize (a call's span says it)
}

var (
	_ mcpserver.SessionWithLogging         = (*stdioSession)(nil)
	_ mcpserver.SessionWithClientInfo      = (*stdioSession)(nil)
	_ mcpserver.SessionWithProtocolVersion = (*stdioSession)(nil)
)

func (s *stdioSession) SessionID() string { return "stdio" }

func (s *stdioSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	return s.notifications
}

func (s *stdioSession) Initialize() {
	s.level.Store(mcp.LoggingLevelError)
	s.initialized.Store(true)
}

func (s *stdioSession) Initialized() bool { return s.initialized.Load() }

func (s *stdioSession) SetLogLevel(level mcp.LoggingLevel) { s.level.Store(level) }

func (s *stdioSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.level.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

func (s *stdioSession) GetClientInfo() mcp.Implementation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

func (s *stdioSession) SetClientInfo(info mcp.Implementation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = info
}

func (s *stdioSession) GetClientCapabilities() mcp.ClientCapabilities {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caps
}

func (s *stdioSession) SetClientCapabilities(caps mcp.ClientCapabilities) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caps = caps
}

// ProtocolVersion is the protocol version initialize negotiated.
func (s *stdioSession) ProtocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// SetProtocolVersion is told by mcp-go of the version initialize
// negotiated.
func (s *stdioSession) SetProtocolVersion(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
}
