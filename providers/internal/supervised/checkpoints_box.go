package supervised

import (
	"context"
	"errors"
	"io"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// boxCheckpoints asks the box's supervisor to run the checkpoint engine on
// the box's user-data (kubernetes: the Pod's volume), over the channel
// (supervisor.Checkpoints). Each request runs with the box entered, as a
// file operation does, so that no reaper takes the box meanwhile; an
// export or an import is one request for as long as its stream lasts.
func (s *Sandbox) boxCheckpoints() checkpointer {
	return boxCheckpoints{s: s, k: supervisor.NewCheckpoints(s.link)}
}

type boxCheckpoints struct {
	s *Sandbox
	k *supervisor.Checkpoints
}

// in runs op with the box entered.
func (b boxCheckpoints) in(ctx context.Context, op func() error) error {
	done, err := b.s.box.Enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	return noCheckpointsHere(op())
}

// noCheckpointsHere says errNoCheckpoints for a supervisor that keeps
// none.
func noCheckpointsHere(err error) error {
	if errors.Is(err, supervisor.ErrNoCheckpoints) {
		return errNoCheckpoints
	}
	return err
}

func (b boxCheckpoints) save(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (res checkpoint.SaveResult, err error) {
	err = b.in(ctx, func() error { res, err = b.k.Save(ctx, opts, maxBytes); return err })
	return res, err
}

func (b boxCheckpoints) list(ctx context.Context) (out []checkpoint.Info, err error) {
	err = b.in(ctx, func() error { out, err = b.k.List(ctx); return err })
	return out, err
}

func (b boxCheckpoints) changes(ctx context.Context, from, to string) (out []checkpoint.Change, err error) {
	err = b.in(ctx, func() error { out, err = b.k.Changes(ctx, from, to); return err })
	return out, err
}

// open marks the box busy while the file opens only: a reader that stalls
// must not keep it from the reaper (as FS.Open).
func (b boxCheckpoints) open(ctx context.Context, id, rel string) (r io.ReadCloser, e checkpoint.Entry, err error) {
	err = b.in(ctx, func() error { r, e, err = b.k.Open(ctx, id, rel); return err })
	return r, e, err
}

func (b boxCheckpoints) restore(ctx context.Context, id, undoMessage string, maxBytes int64) (res checkpoint.RestoreResult, err error) {
	err = b.in(ctx, func() error { res, err = b.k.Restore(ctx, id, undoMessage, maxBytes); return err })
	return res, err
}

func (b boxCheckpoints) export(ctx context.Context, id string, w io.Writer) error {
	return b.in(ctx, func() error { return b.k.Export(ctx, id, w) })
}

func (b boxCheckpoints) importTar(ctx context.Context, r io.Reader, message string) (info checkpoint.Info, err error) {
	err = b.in(ctx, func() error { info, err = b.k.Import(ctx, r, message); return err })
	return info, err
}
