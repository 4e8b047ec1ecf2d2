package rename

import (
	"io/fs"
	"os"
)

// Record writes s and a newline to path, whole or not at all (a
// temporary file beside it, renamed into place): the small records a warm
// box's claim leaves beside the directories it renames.
func Record(path, s string, perm fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s+"\n"), perm); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
