package checkpoint

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// Restore puts the tree at root back exactly as it was in checkpoint id:
// contents, modes, owners (when running as root), modification times,
// symlinks (made again with their text, never followed), empty
// directories; what was added since is removed. Paths of Options.Exclude
// and paths the checkpoint skipped are left as they are.
//
// Every operation is made relative to a directory opened without
// following symlinks (openat with O_NOFOLLOW), so a symlink planted in the
// tree, even one standing where a directory must be, is replaced, never
// written or removed through. Each file is written to a temporary file
// beside it and renamed into place, under opts.Locker's lock for its path.
// Only what differs is touched.
//
// Before changing anything, Restore reads and checks every tree of the
// checkpoint and every object it will write: a damaged or tampered store
// fails with ErrCorrupt and the tree untouched. With opts.SaveFirst, the
// tree is saved first (an automatic checkpoint, RestoreResult.Undo) under
// the same lock, so the restore can be undone; without it, a caller that
// wants undo calls Save then Restore.
func (s *Store) Restore(ctx context.Context, root, id string, opts RestoreOptions) (RestoreResult, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return RestoreResult{}, err
	}
	defer unlock()
	defer s.retain()
	r, err := s.record(id)
	if err != nil {
		return RestoreResult{}, err
	}
	target, err := s.loadAll(r.root)
	if err != nil {
		return RestoreResult{}, err
	}
	var res RestoreResult
	var live *tree
	var racy map[string]bool
	if opts.SaveFirst {
		msg := opts.UndoMessage
		if msg == "" {
			msg = "before restoring checkpoint " + r.ID
		}
		var sr SaveResult
		sr, live, err = s.save(ctx, root, SaveOptions{Message: msg, Auto: true})
		if err != nil {
			return RestoreResult{}, err
		}
		res.Undo, res.Skipped = sr.Info, sr.Skipped
		racy = s.cache.racy
	} else if live, racy, err = s.scanLive(ctx, root); err != nil {
		return RestoreResult{}, err
	}

	need := map[hash]int64{}
	leftAlone := "" // a path the checkpoint skipped: the restore leaves it (and what is below) as it is
	err = s.diff(live, target, ".", func(k Kind, rel string, old, new *entry) error {
		if leftAlone != "" && strings.HasPrefix(rel, leftAlone+"/") {
			return nil
		}
		if new != nil && new.kind == kindSkipped {
			leftAlone = rel
			return nil
		}
		res.Changes = append(res.Changes, Change{Path: rel, Kind: k, Old: old.public(rel), New: new.public(rel)})
		if new != nil && new.kind == kindFile && (old == nil || old.kind != kindFile || old.hash != new.hash) {
			need[new.hash] = new.size
		}
		return nil
	})
	if err != nil {
		return RestoreResult{}, err
	}
	blobs, err := s.verify(ctx, need)
	if err != nil {
		return RestoreResult{}, err
	}
	s.at("restore-apply", "")
	a := &applier{s: s, ctx: ctx, locker: opts.Locker, blobs: blobs, racy: racy, guard: true}
	err = a.run(root, target, live)
	res.keep(a.kept)
	return res, err
}

// keep moves the paths the restore left as they were (changed after its
// walk by a writer its locks do not exclude) from Changes to Skipped.
func (res *RestoreResult) keep(kept []string) {
	if len(kept) == 0 {
		return
	}
	// Not done: a change of a kept path or below it, and the removal (or
	// replacing by a non-directory) of a directory that holds one.
	undone := func(c Change) bool {
		return slices.ContainsFunc(kept, func(k string) bool {
			return c.Path == k || strings.HasPrefix(c.Path, k+"/") ||
				strings.HasPrefix(k, c.Path+"/") && (c.New == nil || !c.New.Mode.IsDir())
		})
	}
	res.Changes = slices.DeleteFunc(res.Changes, undone)
	for _, k := range kept {
		res.Skipped = append(res.Skipped, Skip{Path: k, Reason: keptReason})
	}
}

// keptReason is the Skip reason of a path Restore left as it was.
const keptReason = "changed during the restore by another writer: left as it is"

// treeOf is checkpoint id's root tree with every tree below it loaded
// (and checked); the caller holds the store's lock.
func (s *Store) treeOf(id string) (*tree, error) {
	r, err := s.record(id)
	if err != nil {
		return nil, err
	}
	return s.loadAll(r.root)
}

// loadAll loads (and checks) every tree reachable from h.
func (s *Store) loadAll(h hash) (*tree, error) {
	t, err := s.loadTree(h)
	if err != nil {
		return nil, err
	}
	for i := range t.entries {
		if e := &t.entries[i]; e.kind == kindDir {
			if _, err := s.loadAll(e.hash); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// verifyBudget bounds the checked objects verify keeps in memory for the
// writes that follow; the others are read (and checked) again then.
const verifyBudget = 64 << 20

// verify reads and checks every object in need (hash -> size), on a few
// goroutines, keeping small ones in memory within verifyBudget.
func (s *Store) verify(ctx context.Context, need map[hash]int64) (map[hash][]byte, error) {
	kept := map[hash][]byte{}
	var mu sync.Mutex
	var firstErr error
	var used int64
	work := make(chan hash)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for h := range work {
				size := need[h]
				var err error
				mu.Lock()
				keep := size <= smallFile && used+size <= verifyBudget
				if keep {
					used += size
				}
				mu.Unlock()
				if keep {
					var b []byte
					if b, err = s.readObject(h); err == nil && int64(len(b)) != size {
						err = errorf("%w: object %s is not the size recorded", ErrCorrupt, shortHash(h))
					}
					if err == nil {
						mu.Lock()
						kept[h] = b
						mu.Unlock()
					}
				} else {
					var r *objReader
					if r, err = s.openObject(h, size); err == nil {
						_, err = io.Copy(io.Discard, r)
						r.Close()
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for h := range need {
		if ctx.Err() != nil {
			break
		}
		work <- h
	}
	close(work)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return kept, firstErr
}

// Export writes checkpoint id's tree into dir, which must not exist or be
// an empty directory (a new thread's user-data); missing parents are made
// (mode 0700). On failure, what Export created is removed.
func (s *Store) Export(ctx context.Context, id, dir string) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	defer s.retain()
	target, err := s.treeOf(id)
	if err != nil {
		return err
	}
	need := map[hash]int64{}
	s.diff(nil, target, ".", func(_ Kind, _ string, _, e *entry) error {
		if e.kind == kindFile {
			need[e.hash] = e.size
		}
		return nil
	})
	blobs, err := s.verify(ctx, need)
	if err != nil {
		return err
	}
	created := "" // the topmost directory Export made, removed on failure
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		created = filepath.Clean(dir)
	case errors.Is(err, fs.ErrNotExist):
		if created, err = mkdirAll(dir); err != nil {
			return errorf("export: %v", bare(err))
		}
	case errors.Is(err, fs.ErrExist):
		d, err := os.Open(dir)
		if err != nil {
			return errorf("export: %v", bare(err))
		}
		names, _ := d.Readdirnames(1)
		d.Close()
		if len(names) > 0 {
			return errorf("export: %w", ErrNotEmpty)
		}
	default:
		return errorf("export: %v", bare(err))
	}
	a := &applier{s: s, ctx: ctx, blobs: blobs}
	if err := a.run(dir, target, nil); err != nil {
		if created != "" {
			os.RemoveAll(dir)
			removeUp(dir, created)
		}
		return err
	}
	return nil
}

// removeUp removes the empty parents of dir up to top, which mkdirAll made.
func removeUp(dir, top string) {
	top = filepath.Clean(top)
	for p := filepath.Clean(dir); p != top && p != filepath.Dir(p); {
		p = filepath.Dir(p)
		if os.Remove(p) != nil {
			return
		}
	}
}

// mkdirAll makes dir and its missing parents (mode 0700), and returns the
// topmost it made. A parent that is a symlink is followed: dir is the
// caller's path, not one from inside a tree.
func mkdirAll(dir string) (string, error) {
	dir = filepath.Clean(dir)
	top := dir
	for p := filepath.Dir(dir); p != top; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		top = p
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		os.Remove(dir)
		removeUp(dir, top) // what was made before the failure, if any
		return "", err
	}
	return top, nil
}

// Fork starts a new thread from checkpoint id: Export into root (the new
// thread's user-data, absent or empty), then save it in dst (the new
// thread's store) as its first checkpoint, with message. The objects are
// hard-linked from s into dst where the file system allows, so the new
// store takes little room and the save writes almost nothing.
func (s *Store) Fork(ctx context.Context, id string, dst *Store, root, message string) (Info, error) {
	if err := s.Export(ctx, id, root); err != nil {
		return Info{}, err
	}
	objs, err := s.reachable(ctx, id)
	if err != nil {
		return Info{}, err
	}
	if err := dst.adopt(ctx, s, objs); err != nil {
		return Info{}, err
	}
	res, err := dst.Save(ctx, root, SaveOptions{Message: message, Force: true})
	return res.Info, err
}

// reachable lists the objects of checkpoint id, with their sizes.
func (s *Store) reachable(ctx context.Context, id string) (map[hash]int64, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer s.retain()
	r, err := s.record(id)
	if err != nil {
		return nil, err
	}
	out := map[hash]int64{}
	return out, s.mark(r.root, out, out)
}

// adopt hard-links the loose objects of src (the large files) into s,
// best effort: a link that fails (another file system) leaves the object
// for the next save to write, as it writes the small, packed ones (into
// one pack of s: the save reads every file anyway, having no stat cache).
func (s *Store) adopt(ctx context.Context, src *Store, objs map[hash]int64) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	var added int64
	dirs := map[string]bool{}
	for h, size := range objs {
		if size < smallFile {
			continue // packed, or a tree (a failed link costs nothing else)
		}
		dst := s.objPath(h)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		os.Mkdir(filepath.Dir(dst), 0o700)
		if os.Link(src.objPath(h), dst) == nil {
			added += size
			dirs[filepath.Dir(dst)] = true
		}
	}
	if !s.opts.NoSync {
		for d := range dirs {
			if err := syncDir(d); err != nil {
				return errorf("store: %v", bare(err))
			}
		}
	}
	if u := s.usage(); u >= 0 {
		s.writeUsage(u + added)
	}
	return nil
}
