package checkpoint

import (
	"context"
	"encoding/hex"
	"strconv"
	"time"
)

// Save saves the tree at root (a thread's user-data directory) as a new
// checkpoint, unless nothing changed since the latest one (then Saved is
// false and no checkpoint is made; opts.Force saves one anyway).
//
// Save reads only what changed: an entry of the previous save whose stat
// (size, mtime, ctime, inode, mode, owner) is the same is not read again.
// It never follows a symlink (it stores the link's text), keeps empty
// directories and modes, leaves out Options.Exclude, and skips special
// files (FIFOs, sockets, devices: never opened) and unreadable paths,
// listing them in Skipped.
func (s *Store) Save(ctx context.Context, root string, opts SaveOptions) (SaveResult, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return SaveResult{}, err
	}
	defer unlock()
	res, _, err := s.save(ctx, root, opts)
	s.retain()
	return res, err
}

// counts tallies changes.
type counts struct{ added, modified, deleted int }

func (c *counts) add(k Kind) {
	switch k {
	case Added:
		c.added++
	case Modified:
		c.modified++
	case Deleted:
		c.deleted++
	}
}

// save is Save under the store lock. It also returns the tree it walked.
func (s *Store) save(ctx context.Context, root string, opts SaveOptions) (SaveResult, *tree, error) {
	prev := s.latest()
	var prevRoot *tree
	if prev != nil {
		// A damaged latest checkpoint does not stop new ones: the change
		// counts are then made against nothing.
		prevRoot, _ = s.loadTree(prev.root)
	}
	cache := s.cache
	if cache == nil && prevRoot != nil {
		cache = &statCache{root: prevRoot, start: prev.ScanStart}
	}
	w := s.newWriter()
	scan, err := s.scan(ctx, root, cache, w)
	if werr := w.waitFiles(); err == nil {
		err = werr
	}
	if err != nil {
		return SaveResult{}, nil, err
	}
	// Every tree of a saving walk is now in the store with all it names:
	// its files were found there or written, and its subdirectories'
	// trees were written before it.
	s.treeMu.Lock()
	for _, t := range scan.trees {
		t.stored, t.present = true, true
		t.data = nil
	}
	s.treeMu.Unlock()
	s.addTrees(scan.trees)
	s.cache = &statCache{root: scan.root, racy: scan.racy}
	s.reads = scan.reads

	var c counts
	tally := func(k Kind, _ string, _, _ *entry) error { c.add(k); return nil }
	if err := s.diff(prevRoot, scan.root, ".", tally); err != nil {
		c = counts{}
		s.diff(nil, scan.root, ".", tally)
	}
	if prev != nil && c == (counts{}) && !opts.Force {
		// No checkpoint; whatever the scan wrote (nothing, unless the store
		// lost objects) is made durable, as later saves may name it.
		if err := w.syncDirs(); err != nil {
			return SaveResult{}, nil, err
		}
		if u := s.usage(); u >= 0 && w.added.Load() > 0 {
			s.writeUsage(u + w.added.Load())
		}
		return SaveResult{Info: prev.info(), Skipped: scan.skipped}, scan.root, nil
	}

	// Commit: the record, which is what makes the checkpoint exist.
	id := s.maxID + 1
	r := &record{V: 1, ID: strconv.Itoa(id), Time: time.Now(), Message: opts.Message, Auto: opts.Auto,
		Root: hex.EncodeToString(scan.root.hash[:]), root: scan.root.hash,
		Added: c.added, Modified: c.modified, Deleted: c.deleted, Files: scan.files, Size: scan.size,
		ScanStart: scan.start}
	if err := s.writeRecord(r, w); err != nil {
		return SaveResult{}, nil, err
	}
	s.records[id] = r
	s.ids = append(s.ids, id)
	s.maxID = id
	if u := s.usage(); u >= 0 {
		s.writeUsage(u + w.added.Load() + r.bytes)
	}
	return SaveResult{Info: r.info(), Saved: true, Skipped: scan.skipped}, scan.root, nil
}

// encoded is the tree's encoding: kept from the scan, or made again for a
// tree loaded from the store.
func (t *tree) encoded() []byte {
	if t.data != nil {
		return t.data
	}
	return encodeTree(t.entries).data
}
