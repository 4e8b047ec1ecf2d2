package sandbox

import (
	"bytes"
	"context"
	"io"
)

// EditWriter is a Create for a file system that can only replace a file
// whole through Edit (a container's or a Pod's own paths): it keeps the
// bytes in memory, up to EditMaxBytes, and writes them with one Edit on
// Close, under the file's lock.
func EditWriter(ctx context.Context, fsys editor, name string) io.WriteCloser {
	return &editWriter{ctx: ctx, fsys: fsys, name: name}
}

// editor is the part of FS that EditWriter needs.
type editor interface {
	Edit(ctx context.Context, name string, fn EditFunc) error
}

type editWriter struct {
	ctx  context.Context
	fsys editor
	name string
	buf  bytes.Buffer
}

func (w *editWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > EditMaxBytes {
		return 0, &PathError{Path: w.name, Err: ErrTooLarge}
	}
	return w.buf.Write(p)
}

func (w *editWriter) Close() error {
	return w.fsys.Edit(w.ctx, w.name, func([]byte, bool) ([]byte, error) { return w.buf.Bytes(), nil })
}
