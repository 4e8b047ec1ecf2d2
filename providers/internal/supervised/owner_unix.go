//go:build unix

package supervised

import (
	"os"
	"path/filepath"
	"syscall"
)

// ownLikeWorkspace gives dir (a thread's user-data) the owner of its
// workspace, when they differ and the server may change owners (root).
func ownLikeWorkspace(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	ws, err := os.Lstat(filepath.Join(dir, "workspace"))
	if err != nil {
		return nil // no workspace: nothing to match
	}
	d, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	w, ok1 := ws.Sys().(*syscall.Stat_t)
	u, ok2 := d.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 || (w.Uid == u.Uid && w.Gid == u.Gid) {
		return nil
	}
	return os.Lchown(dir, int(w.Uid), int(w.Gid))
}
