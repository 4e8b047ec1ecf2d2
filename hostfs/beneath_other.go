//go:build !linux

package hostfs

import (
	"io/fs"
	"os"
)

// beneathDir: openat2 is Linux only; elsewhere everything goes through os.Root.
func beneathDir(*os.Root) *os.File { return nil }

func openBeneath(*os.File, string, int) (fs.File, error) { panic("unreachable") }

func readDirBeneath(*hostMount, string, string) ([]fs.DirEntry, error) { panic("unreachable") }
