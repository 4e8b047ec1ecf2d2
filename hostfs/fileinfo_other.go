//go:build !unix

package hostfs

import (
	"hash/fnv"
	"io/fs"
	"os"
)

// oNoFollow: os.Root does not follow a final symlink here by itself, and
// callers Lstat first.
const oNoFollow = 0

// fileOwner: files have no uid and gid here; written files keep the
// default owner.
func fileOwner(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }

// dirKey names the directory dir by the path it was opened with (a
// FileInfo carries no file id here): a directory reached by two paths is
// swept under both keys, which costs a directory read, nothing more.
func dirKey(dir *os.Root, _ fs.FileInfo) ([2]uint64, bool) {
	h := fnv.New64a()
	h.Write([]byte(dir.Name()))
	return [2]uint64{0, h.Sum64()}, true
}
