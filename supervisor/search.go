package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Grep runs a grep search inside the sandbox (package search's Grep, in
// the supervisor) and calls found with each result as it comes. The
// results are the sandbox's word: the caller checks them.
func (f *FS) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	if err := f.check(req.Root, false); err != nil {
		return err
	}
	_, err := f.search(ctx, wire.FSRequest{Op: wire.OpGrep, Path: req.Root, Grep: &req}, func(line []byte) error {
		var m search.FileMatch
		if err := json.Unmarshal(line, &m); err != nil {
			return fmt.Errorf("%w: an unreadable grep result", wire.ErrProtocol)
		}
		return found(m)
	})
	return err
}

// Glob runs a glob search inside the sandbox, as Grep does, and returns
// the count of matching paths the supervisor reports.
func (f *FS) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (int, error) {
	if err := f.check(req.Root, false); err != nil {
		return 0, err
	}
	return f.search(ctx, wire.FSRequest{Op: wire.OpGlob, Path: req.Root, Glob: &req}, func(line []byte) error {
		var h search.Hit
		if err := json.Unmarshal(line, &h); err != nil {
			return fmt.Errorf("%w: an unreadable glob result", wire.ErrProtocol)
		}
		return found(h)
	})
}

// search runs one search on the channel, tried again on a new channel
// only when the first was gone before the supervisor had the request
// (found has then seen nothing).
func (f *FS) search(ctx context.Context, req wire.FSRequest, result func(line []byte) error) (int, error) {
	var total int
	var theirs error // result's own error, returned as it is
	err := f.try(ctx, false, func(c *Conn) (err error) {
		total, err = c.search(ctx, req, func(line []byte) error {
			theirs = result(line)
			return theirs
		})
		return err
	})
	switch {
	case errors.Is(err, search.ErrStop):
		return total, nil
	case err != nil && err == theirs:
		return 0, err
	}
	return total, pathError(req.Path, err)
}

// maxResultBytes is wire.MaxResultBytes (a variable: tests lower it).
var maxResultBytes = wire.MaxResultBytes

// search streams a search's results: JSON values, one a line, each passed
// to result once whole. A result returning an error stops the search
// (KindKill) and is returned as it is.
func (c *Conn) search(ctx context.Context, req wire.FSRequest, result func(line []byte) error) (int, error) {
	id, fc, err := c.startFS(req)
	if err != nil {
		return 0, err
	}
	defer c.endFS(id, fc)
	var buf []byte // a result not yet whole
	for {
		if err := c.waitFS(ctx, fc, func() bool { return len(fc.chunks) > 0 || fc.end != nil }); err != nil {
			return 0, err
		}
		fc.mu.Lock()
		chunks, end := fc.chunks, fc.end
		fc.chunks, fc.pending = nil, 0
		fc.mu.Unlock()
		n := 0
		for _, b := range chunks {
			buf = append(buf, b...)
			n += len(b)
		}
		if n > 0 {
			c.send(wire.KindCredit, id, wire.Credit(n))
		}
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			if err := result(buf[:i]); err != nil {
				return 0, err
			}
			buf = buf[i+1:]
		}
		if len(buf) >= maxResultBytes {
			return 0, fmt.Errorf("%w: a search result of over %d bytes", wire.ErrProtocol, maxResultBytes)
		}
		if len(chunks) == 0 && end != nil {
			if err := endError(end); err != nil {
				return 0, err
			}
			if len(buf) > 0 {
				return 0, fmt.Errorf("%w: a search result cut short", wire.ErrProtocol)
			}
			return end.Total, nil
		}
	}
}
