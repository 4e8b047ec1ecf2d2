package supervised

import (
	"context"
	"io"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
)

// hostCheckpoints runs the checkpoint engine on the host directories of
// Config.Checkpoints. Not built yet: every method answers errNoCheckpoints.
func (s *Sandbox) hostCheckpoints() checkpointer { return noCheckpoints{} }

// noCheckpoints answers errNoCheckpoints to everything.
type noCheckpoints struct{}

func (noCheckpoints) save(context.Context, checkpoint.SaveOptions, int64) (checkpoint.SaveResult, error) {
	return checkpoint.SaveResult{}, errNoCheckpoints
}
func (noCheckpoints) list(context.Context) ([]checkpoint.Info, error) { return nil, errNoCheckpoints }
func (noCheckpoints) changes(context.Context, string, string) ([]checkpoint.Change, error) {
	return nil, errNoCheckpoints
}
func (noCheckpoints) open(context.Context, string, string) (io.ReadCloser, checkpoint.Entry, error) {
	return nil, checkpoint.Entry{}, errNoCheckpoints
}
func (noCheckpoints) restore(context.Context, string, string) (checkpoint.RestoreResult, error) {
	return checkpoint.RestoreResult{}, errNoCheckpoints
}
func (noCheckpoints) export(context.Context, string, io.Writer) error { return errNoCheckpoints }
func (noCheckpoints) importTar(context.Context, io.Reader, string) (checkpoint.Info, error) {
	return checkpoint.Info{}, errNoCheckpoints
}
