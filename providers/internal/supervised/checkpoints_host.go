package supervised

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// hostStore is the thread's checkpoint store on the host, opened on first
// use and kept for the sandbox's life: the Store keeps the stat cache of
// its last walk in memory, which is what makes a save where nothing
// changed one fstatat an entry instead of a read of every file.
type hostStore struct {
	mu     sync.Mutex
	store  *checkpoint.Store
	closed bool
}

// savedRel is sandbox.SavedDir relative to user-data: the tools' saved
// outputs and jobs' logs, which no checkpoint holds and no restore touches.
var savedRel = strings.TrimPrefix(sandbox.SavedDir, sandbox.UserDataDir+"/")

// hostCheckpoints runs the checkpoint engine on the host directories of
// Config.Checkpoints.
func (s *Sandbox) hostCheckpoints() checkpointer { return hostCheckpoints{s} }

// closeCheckpoints closes the store, waiting for an operation under way.
func (s *Sandbox) closeCheckpoints() {
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	if s.host.store != nil {
		s.host.store.Close()
		s.host.store = nil
	}
	s.host.closed = true
}

type hostCheckpoints struct{ s *Sandbox }

// store opens the thread's store on first use.
func (h hostCheckpoints) store() (*checkpoint.Store, error) {
	hs := &h.s.host
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return nil, errors.New("checkpoints: the sandbox was closed")
	}
	if hs.store == nil {
		c := h.s.cfg.Checkpoints
		st, err := checkpoint.Open(c.Store, checkpoint.Options{Exclude: []string{savedRel}, NoSync: c.NoSync})
		if err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		hs.store = st
	}
	return hs.store, nil
}

func (h hostCheckpoints) root() string { return h.s.cfg.Checkpoints.UserData }

func (h hostCheckpoints) save(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (checkpoint.SaveResult, error) {
	st, err := h.store()
	if err != nil {
		return checkpoint.SaveResult{}, err
	}
	res, err := st.Save(ctx, h.root(), opts)
	if err != nil {
		return res, err
	}
	if maxBytes > 0 && res.Saved {
		if _, err := st.Prune(ctx, maxBytes); err != nil {
			return res, fmt.Errorf("checkpoint %s saved, but the oldest could not be pruned: %w", res.Info.ID, err)
		}
	}
	return res, nil
}

func (h hostCheckpoints) list(ctx context.Context) ([]checkpoint.Info, error) {
	st, err := h.store()
	if err != nil {
		return nil, err
	}
	return st.List(ctx)
}

func (h hostCheckpoints) changes(ctx context.Context, from, to string) ([]checkpoint.Change, error) {
	st, err := h.store()
	if err != nil {
		return nil, err
	}
	return st.Changes(ctx, h.root(), from, to)
}

func (h hostCheckpoints) open(ctx context.Context, id, rel string) (io.ReadCloser, checkpoint.Entry, error) {
	st, err := h.store()
	if err != nil {
		return nil, checkpoint.Entry{}, err
	}
	return st.OpenFile(ctx, id, rel)
}

// restore takes, for every path it writes or removes, the lock the file
// tools' writes take for it (hostfs.FS.LockPath): a restore never
// interleaves with a write_file or str_replace of the same file.
func (h hostCheckpoints) restore(ctx context.Context, id, undoMessage string, maxBytes int64) (checkpoint.RestoreResult, error) {
	st, err := h.store()
	if err != nil {
		return checkpoint.RestoreResult{}, err
	}
	opts := checkpoint.RestoreOptions{SaveFirst: true, UndoMessage: undoMessage}
	if host := h.s.cfg.Host; host != nil {
		opts.Locker = checkpoint.LockerFunc(func(ctx context.Context, rel string) (func(), error) {
			return host.LockPath(ctx, path.Join(sandbox.UserDataDir, rel))
		})
	}
	res, err := st.Restore(ctx, h.root(), id, opts)
	if err == nil && maxBytes > 0 {
		// The undo checkpoint counts against the bound too. The files are
		// restored whatever comes of it (and a call cancelled now does not
		// stop it): a prune that fails is the next save's to try again,
		// and to report.
		st.Prune(context.WithoutCancel(ctx), maxBytes)
	}
	return res, err
}

func (h hostCheckpoints) export(ctx context.Context, id string, w io.Writer) error {
	st, err := h.store()
	if err != nil {
		return err
	}
	return st.ExportTar(ctx, id, w)
}

// importTar gives user-data, before the import, the owner of its
// workspace: ImportTar makes every entry (workspace, uploads and outputs
// too) its root's, and the provider handed those three to the user its
// commands run as (the container's user, bubblewrap's nobody) while
// user-data itself is the server's.
func (h hostCheckpoints) importTar(ctx context.Context, r io.Reader, message string) (checkpoint.Info, error) {
	st, err := h.store()
	if err != nil {
		return checkpoint.Info{}, err
	}
	root := h.root()
	if err := ownLikeWorkspace(root); err != nil {
		return checkpoint.Info{}, fmt.Errorf("checkpoints: import: %w", err)
	}
	return st.ImportTar(ctx, root, r, message)
}

// HostCheckpoints is where the providers that keep a thread under the
// state dir (local, docker) keep its checkpoints: the store at
// <state>/threads/<key>/checkpoints, beside the user-data it saves
// (sandbox.ThreadDir), never inside it.
func HostCheckpoints(stateDir, key string) *CheckpointConfig {
	return &CheckpointConfig{
		UserData: sandbox.ThreadDir(stateDir, key),
		Store:    filepath.Join(stateDir, "threads", filepath.FromSlash(key), "checkpoints"),
	}
}
