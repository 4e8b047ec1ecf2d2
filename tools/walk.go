package tools

import (
	"context"
	"errors"
	"io/fs"
	"path"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// errStop ends a walk early without an error.
var errStop = errors.New("stop walk")

// walk visits the tree under root (a directory) depth first, entries in
// name order, calling fn with each entry's virtual path and its path
// relative to root. Symlinks are not followed into; .git directories are
// skipped when skipGit. fn returning fs.SkipDir skips a directory, errStop
// ends the walk. Unreadable directories are passed over.
func walk(ctx context.Context, fsys sandbox.FS, root string, skipGit bool, fn func(vpath, rel string, d fs.DirEntry) error) error {
	var visit func(dir, rel string) error
	visit = func(dir, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := fsys.ReadDir(ctx, dir)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			if skipGit && e.IsDir() && e.Name() == ".git" {
				continue
			}
			vp := path.Join(dir, e.Name())
			r := e.Name()
			if rel != "" {
				r = rel + "/" + e.Name()
			}
			err := fn(vp, r, e)
			if errors.Is(err, fs.SkipDir) {
				continue
			}
			if err != nil {
				return err
			}
			if e.IsDir() {
				if err := visit(vp, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := visit(root, "")
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
