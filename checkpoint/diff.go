package checkpoint

import (
	"context"
	"io"
	"path"
	"strings"
)

// diff calls fn for every path that differs between the trees a and b
// (nil: empty), in tree order, a directory before its contents. Subtrees
// with the same hash are skipped unread.
func (s *Store) diff(a, b *tree, rel string, fn func(k Kind, rel string, old, new *entry) error) error {
	if a != nil && b != nil && a.hash == b.hash {
		return nil
	}
	var ae, be []entry
	if a != nil {
		ae = a.entries
	}
	if b != nil {
		be = b.entries
	}
	for i, j := 0, 0; i < len(ae) || j < len(be); {
		var x, y *entry
		switch {
		case j == len(be) || (i < len(ae) && ae[i].name < be[j].name):
			x = &ae[i]
			i++
		case i == len(ae) || be[j].name < ae[i].name:
			y = &be[j]
			j++
		default:
			x, y = &ae[i], &be[j]
			i++
			j++
		}
		var err error
		switch {
		case y == nil:
			err = s.whole(Deleted, x, join(rel, x.name), fn)
		case x == nil:
			err = s.whole(Added, y, join(rel, y.name), fn)
		default:
			err = s.diffEntry(x, y, join(rel, x.name), fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) diffEntry(x, y *entry, rel string, fn func(Kind, string, *entry, *entry) error) error {
	if !sameContent(x, y) {
		if err := fn(Modified, rel, x, y); err != nil {
			return err
		}
	}
	switch {
	case x.kind == kindDir && y.kind == kindDir:
		if x.hash == y.hash {
			return nil
		}
		xt, err := s.loadTree(x.hash)
		if err != nil {
			return err
		}
		yt, err := s.loadTree(y.hash)
		if err != nil {
			return err
		}
		return s.diff(xt, yt, rel, fn)
	case x.kind == kindDir:
		return s.below(Deleted, x, rel, fn)
	case y.kind == kindDir:
		return s.below(Added, y, rel, fn)
	}
	return nil
}

// whole reports e, and everything below it when it is a directory, as
// added or deleted.
func (s *Store) whole(k Kind, e *entry, rel string, fn func(Kind, string, *entry, *entry) error) error {
	var err error
	if k == Added {
		err = fn(k, rel, nil, e)
	} else {
		err = fn(k, rel, e, nil)
	}
	if err != nil || e.kind != kindDir {
		return err
	}
	return s.below(k, e, rel, fn)
}

func (s *Store) below(k Kind, dir *entry, rel string, fn func(Kind, string, *entry, *entry) error) error {
	t, err := s.loadTree(dir.hash)
	if err != nil {
		return err
	}
	for i := range t.entries {
		if err := s.whole(k, &t.entries[i], join(rel, t.entries[i].name), fn); err != nil {
			return err
		}
	}
	return nil
}

// Changes lists what differs from checkpoint from to checkpoint to, or to
// the tree at root as it is now when to is "" (reading only the files
// whose stat changed since the latest save).
func (s *Store) Changes(ctx context.Context, root, from, to string) ([]Change, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer s.retain()
	a, err := s.rootOf(from)
	if err != nil {
		return nil, err
	}
	var b *tree
	if to == "" {
		if b, _, err = s.scanLive(ctx, root); err != nil {
			return nil, err
		}
	} else if b, err = s.rootOf(to); err != nil {
		return nil, err
	}
	var out []Change
	err = s.diff(a, b, ".", func(k Kind, rel string, old, new *entry) error {
		out = append(out, Change{Path: rel, Kind: k, Old: old.public(rel), New: new.public(rel)})
		return nil
	})
	return out, err
}

// rootOf is checkpoint id's root tree.
func (s *Store) rootOf(id string) (*tree, error) {
	r, err := s.record(id)
	if err != nil {
		return nil, err
	}
	return s.loadTree(r.root)
}

// scanLive walks the tree at root, hashing without storing, with the
// stat cache; it also returns the walk's racy paths. The walk becomes the
// stat cache: the next save reads again only what changed since it (and
// what it could not vouch for), not what changed since the latest save.
func (s *Store) scanLive(ctx context.Context, root string) (*tree, map[string]bool, error) {
	cache := s.cache
	if cache == nil {
		if r := s.latest(); r != nil {
			if t, err := s.loadTree(r.root); err == nil {
				cache = &statCache{root: t, start: r.ScanStart}
			}
		}
	}
	scan, err := s.scan(ctx, root, cache, nil)
	if err != nil {
		return nil, nil, err
	}
	s.addTrees(scan.trees)
	s.cache = &statCache{root: scan.root, racy: scan.racy}
	s.reads = scan.reads
	return scan.root, scan.racy, nil
}

// lookup finds rel (slash-separated, relative) in the tree t.
func (s *Store) lookup(t *tree, rel string) (*entry, error) {
	clean := path.Clean(rel)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
		return nil, errorf("%s: %w", quote(rel), ErrNotFound)
	}
	parts := strings.Split(clean, "/")
	for i, p := range parts {
		e := t.find(p)
		if e == nil {
			return nil, errorf("%s: %w", quote(rel), ErrNotFound)
		}
		if i == len(parts)-1 {
			return e, nil
		}
		if e.kind != kindDir {
			return nil, errorf("%s: %w", quote(rel), ErrNotFound)
		}
		var err error
		if t, err = s.loadTree(e.hash); err != nil {
			return nil, err
		}
	}
	return nil, errorf("%s: %w", quote(rel), ErrNotFound)
}

// Stat describes path rel in checkpoint id.
func (s *Store) Stat(ctx context.Context, id, rel string) (Entry, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return Entry{}, err
	}
	defer unlock()
	defer s.retain()
	t, err := s.rootOf(id)
	if err != nil {
		return Entry{}, err
	}
	e, err := s.lookup(t, rel)
	if err != nil {
		return Entry{}, err
	}
	return *e.public(path.Clean(rel)), nil
}

// OpenFile opens the content of the regular file rel as it was in
// checkpoint id (to render a diff). The reader checks the content against
// its hash and fails (ErrCorrupt) rather than end on damaged data. It
// stays readable whatever happens to the store after.
func (s *Store) OpenFile(ctx context.Context, id, rel string) (io.ReadCloser, Entry, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, Entry{}, err
	}
	defer unlock()
	defer s.retain()
	t, err := s.rootOf(id)
	if err != nil {
		return nil, Entry{}, err
	}
	e, err := s.lookup(t, rel)
	if err != nil {
		return nil, Entry{}, err
	}
	pub := *e.public(path.Clean(rel))
	if e.kind != kindFile {
		return nil, pub, errorf("%s: %w", quote(rel), ErrNotFile)
	}
	r, err := s.openObject(e.hash, e.size)
	if err != nil {
		return nil, pub, err
	}
	return r, pub, nil
}
