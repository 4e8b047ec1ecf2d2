//go:build !linux

package rename

// NoReplace renames directory from to to, failing (fs.ErrExist) if to
// exists. Without Linux's RENAME_NOREPLACE: a look, then a plain rename,
// which fails onto a directory that holds anything.
func NoReplace(from, to string) error { return lookThenRename(from, to) }
