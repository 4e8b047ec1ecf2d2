//go:build !linux

package hostfs

import (
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"io/fs"
	"os"
)

// beneathDir: openat2 is Linux only; elsewhere everything goes through os.Root.
func beneathDir(*os.Root) *os.File { return nil }

func openBeneath(*os.File, string, int) (fs.File, error) { panic("unreachable") }

func readDirBeneath(*hostMount, string, string) ([]fs.DirEntry, error) { panic("unreachable") }

type dirHandle struct{ sandbox.Dir }

func openDirBeneath(*hostMount, string, string) (*dirHandle, error) { panic("unreachable") }
