package server

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// stdioWorkers is how many tool calls of the stdio session run at once.
const stdioWorkers = 32

// ServeStdio serves one MCP session on in/out, bound to thread, until in
// ends or ctx is cancelled. Calls still running are cancelled then (their
// commands killed) and recorded before it returns.
func (s *Server) ServeStdio(ctx context.Context, thread string, in io.Reader, out io.Writer) error {
	s.threadOf = func(string, http.Header) ThreadRef {
		return ThreadRef{ID: thread, Key: thread}
	}
	std := mcpserver.NewStdioServer(s.mcp)
	std.SetErrorLogger(log.New(slogWriter{s.cfg.Logger}, "", 0))
	mcpserver.WithWorkerPoolSize(stdioWorkers)(std)
	mcpserver.WithQueueSize(4 * stdioWorkers)(std)
	err := std.Listen(ctx, in, out)
	if ctx.Err() != nil {
		err = nil
	}
	return err
}

// slogWriter feeds mcp-go's log.Logger lines into slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn("mcp: " + string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
