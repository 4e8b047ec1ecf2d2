package supervised

import (
	"context"
	"errors"
	"io"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
)

// Checkpoints (SPEC §18). A thread's checkpoints are saved from, and
// restored to, its user-data directory; where that directory is decides
// who runs the engine:
//
//   - on the host (Config.Checkpoints set: local, docker), the server runs
//     the checkpoint engine on the host directory itself, under the same
//     per-file locks as the file tools' writes (checkpoints_host.go);
//   - in the box (kubernetes: the Pod's volume), the box's supervisor runs
//     it, asked over the channel (checkpoints_box.go).
//
// Either way the store is the thread's own, outside what the agent's
// tools see, and the method set below is the same: the tools, the
// automatic checkpoints, the command line and fork all go through it.

// CheckpointConfig places a thread's checkpoints on the host.
type CheckpointConfig struct {
	// UserData is the host directory of the thread's user-data (the parent
	// of its workspace, uploads and outputs), the root that is saved.
	UserData string
	// Store is the host directory of the thread's checkpoint store,
	// outside UserData.
	Store string
	// NoSync: see checkpoint.Options (tests).
	NoSync bool
}

// errNoCheckpoints is what a box without a way to checkpoint answers.
var errNoCheckpoints = errors.New("checkpoints are not available for this sandbox")

// checkpointer is one of the two ways above.
type checkpointer interface {
	save(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (checkpoint.SaveResult, error)
	list(ctx context.Context) ([]checkpoint.Info, error)
	changes(ctx context.Context, from, to string) ([]checkpoint.Change, error)
	open(ctx context.Context, id, rel string) (io.ReadCloser, checkpoint.Entry, error)
	restore(ctx context.Context, id, undoMessage string, maxBytes int64) (checkpoint.RestoreResult, error)
	export(ctx context.Context, id string, w io.Writer) error
	importTar(ctx context.Context, r io.Reader, message string) (checkpoint.Info, error)
}

// SaveCheckpoint saves the thread's user-data as a checkpoint
// (checkpoint.Store.Save), then prunes the oldest checkpoints until the
// store holds at most maxBytes (0: no bound; the newest is never pruned).
func (s *Sandbox) SaveCheckpoint(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (checkpoint.SaveResult, error) {
	return s.checkpoints().save(ctx, opts, maxBytes)
}

// ListCheckpoints lists the thread's checkpoints, oldest first.
func (s *Sandbox) ListCheckpoints(ctx context.Context) ([]checkpoint.Info, error) {
	return s.checkpoints().list(ctx)
}

// CheckpointChanges lists what differs from checkpoint from to checkpoint
// to ("": user-data as it is now).
func (s *Sandbox) CheckpointChanges(ctx context.Context, from, to string) ([]checkpoint.Change, error) {
	return s.checkpoints().changes(ctx, from, to)
}

// OpenCheckpointFile opens the content of the regular file rel (relative
// to user-data, slash-separated) as checkpoint id holds it.
func (s *Sandbox) OpenCheckpointFile(ctx context.Context, id, rel string) (io.ReadCloser, checkpoint.Entry, error) {
	return s.checkpoints().open(ctx, id, rel)
}

// RestoreCheckpoint puts user-data back as checkpoint id holds it, first
// saving it as it is (an automatic checkpoint with undoMessage, named in
// the result's Undo) so that the restore can be undone, then prunes the
// oldest to maxBytes as SaveCheckpoint does. Whether jobs run is the
// caller's to check.
func (s *Sandbox) RestoreCheckpoint(ctx context.Context, id, undoMessage string, maxBytes int64) (checkpoint.RestoreResult, error) {
	return s.checkpoints().restore(ctx, id, undoMessage, maxBytes)
}

// ExportCheckpoint writes checkpoint id as a tar stream (fork's source).
func (s *Sandbox) ExportCheckpoint(ctx context.Context, id string, w io.Writer) error {
	return s.checkpoints().export(ctx, id, w)
}

// ImportCheckpoint makes a checkpoint of the tar stream r (as
// ExportCheckpoint writes it) and restores user-data to it (fork's
// destination: a thread with no files yet).
func (s *Sandbox) ImportCheckpoint(ctx context.Context, r io.Reader, message string) (checkpoint.Info, error) {
	return s.checkpoints().importTar(ctx, r, message)
}

// checkpoints picks the way: the host's when the provider placed the
// thread's user-data on the host, else the box's.
func (s *Sandbox) checkpoints() checkpointer {
	if s.cfg.Checkpoints != nil {
		return s.hostCheckpoints()
	}
	return s.boxCheckpoints()
}
