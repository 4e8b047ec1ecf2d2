package hostfs

import (
	"context"
	"path"
)

// LockPath takes the per-file lock that Edit takes for the file at virtual
// path name (its mount's canonical host directory and the path below it),
// for a writer that is not Edit — a checkpoint's restore — so that the two
// never interleave on one file. The name is taken as it is, symlinks not
// resolved: such a writer writes that very name (replacing a symlink
// there, never writing through it), which is the name Edit resolves to
// whenever it is no symlink. A made-up ancestor of the mounts
// (/mnt/user-data itself) is no file anyone edits: its lock is a no-op.
func (h *FS) LockPath(ctx context.Context, name string) (unlock func(), err error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth:
		return func() {}, nil
	case m == nil:
		return nil, outside(name)
	}
	return h.locks.Lock(ctx, path.Join(m.lockRoot, rel))
}
