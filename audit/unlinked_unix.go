//go:build unix

package audit

import (
	"os"
	"syscall"
)

// unlinked: the open file fi was removed from every directory.
func unlinked(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
