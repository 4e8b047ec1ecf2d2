package checkpoint

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A checkpoint as a tar stream: how a thread is forked where the two
// stores cannot share files (two Pods, two hosts). ExportTar writes one,
// ImportTar makes a checkpoint of one and restores it.
//
// The stream holds user-data's entries relative to its root ("workspace/",
// "workspace/a.txt"), parents before children, in name order: directories
// (with their setgid and sticky bits), regular files, symlinks (their
// text, never followed). Modes, owners and modification times (to the
// nanosecond, in PAX records) are those of the checkpoint. Entries the
// checkpoint skipped (FIFOs, sockets, devices, unreadable paths) are left
// out. The stream ends with tar's trailer.

// ExportTar writes checkpoint id to w as a tar stream. Each file's content
// is checked against its hash as it is written: a damaged store makes
// ExportTar fail partway with ErrCorrupt, and the caller must treat the
// stream as failed, as ImportTar treats a stream without its trailer. The
// store's lock is held until the stream is written, so that no Prune
// removes an object meanwhile: a slow w holds up the store's other calls
// (bound it with ctx).
func (s *Store) ExportTar(ctx context.Context, id string, w io.Writer) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	defer s.retain()
	root, err := s.treeOf(id)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	buf := make([]byte, 256<<10)
	if err := s.exportTree(ctx, tw, root, "", buf); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return errorf("export: %v", err)
	}
	return nil
}

// exportTree writes the entries of t, whose directory is prefix ("" for
// the root, else "dir/sub/").
func (s *Store) exportTree(ctx context.Context, tw *tar.Writer, t *tree, prefix string, buf []byte) error {
	for i := range t.entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := &t.entries[i]
		hdr := &tar.Header{
			Name:    prefix + e.name,
			Mode:    int64(e.mode & modeMask(e.kind)),
			Uid:     int(e.uid),
			Gid:     int(e.gid),
			ModTime: time.Unix(0, e.mtime),
			Format:  tar.FormatPAX,
		}
		switch e.kind {
		case kindDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case kindFile:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = e.size
		case kindSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.target
		default:
			continue // skipped when saved: no content to give
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return errorf("export %s: %v", quote(hdr.Name), err)
		}
		switch e.kind {
		case kindFile:
			or, err := s.openObject(e.hash, e.size)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(tw, onlyReader{or}, buf)
			or.Close()
			if err != nil {
				if errors.Is(err, ErrCorrupt) || errors.Is(err, context.Canceled) {
					return err
				}
				return errorf("export %s: %v", quote(hdr.Name), bare(err))
			}
		case kindDir:
			sub, err := s.loadTree(e.hash)
			if err != nil {
				return err
			}
			if err := s.exportTree(ctx, tw, sub, hdr.Name, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// onlyReader hides every method but Read (so io.Copy uses the buffer given
// and the reader's checks, not a WriteTo or ReadFrom of its own).
type onlyReader struct{ io.Reader }

// Bounds on what ImportTar holds in memory while it reads a stream: the
// entries, and the bytes of their names and link texts. A stream beyond
// them is refused; a thread's user-data is far below either.
const (
	importMaxEntries = 1 << 20
	importMaxText    = 64 << 20
	// importMaxDepth is as deep as a save descends (deeper directories
	// are skipped by saves, so none is ever exported).
	importMaxDepth = 512
)

// ErrBadArchive: ImportTar's stream is not a tar stream it takes: a name
// outside the root, a duplicate, a hard link or special file, a path under
// something that is not a directory, a missing trailer.
var ErrBadArchive = errors.New("bad archive")

// ImportTar makes a checkpoint (with message) from the tar stream r, as
// ExportTar writes it, and restores the tree at root to it: a new
// thread's user-data, which may hold empty directories and nothing else
// (ErrNotEmpty).
//
// The stream is never written to disk as it is: each entry's name is
// checked (relative, no "..", each component one a tree may hold), each
// file's content goes into the store as an object named by its hash, and
// the directories become trees; only then does Restore, which writes
// beneath root through directory descriptors and never follows a
// symlink, make the files. Hard links, devices, FIFOs, sparse files, a
// name given twice, a path beneath a file or symlink, a stream that ends
// before its trailer and one with more than zeros after it are refused
// with ErrBadArchive, and nothing is restored. r is read to its end before
// anything is restored: a reader that then fails (a transfer found short,
// an export that failed partway) fails the import. Directories the stream implies but does not list are made
// with mode 0755. Paths of Options.Exclude and names of the writers'
// temporary files are left out, as Save leaves them out.
//
// Modes are kept as Save keeps them (never setuid; setgid and sticky on
// directories only). Owners are not taken from the stream: every entry
// gets the owner of root, so that a process running as root never makes
// files owned by whoever the stream names.
//
// When the restore fails after the checkpoint was made, the checkpoint
// stays (Info names it) and the error says what failed.
func (s *Store) ImportTar(ctx context.Context, root string, r io.Reader, message string) (Info, error) {
	if !supported {
		return Info{}, ErrUnsupported
	}
	uid, gid, err := emptyRoot(root, s.exclude)
	if err != nil {
		return Info{}, err
	}
	info, err := s.importTar(ctx, r, message, uid, gid)
	if err != nil {
		return Info{}, err
	}
	if _, err := s.Restore(ctx, root, info.ID, RestoreOptions{}); err != nil {
		return info, err
	}
	return info, nil
}

// emptyRoot checks that root is a directory holding nothing but
// directories (and what Restore leaves alone), and returns its owner.
func emptyRoot(root string, exclude map[string]bool) (uid, gid uint32, err error) {
	st, err := os.Lstat(root)
	if err != nil {
		return 0, 0, errorf("import: %v", bare(err))
	}
	if !st.IsDir() {
		return 0, 0, errorf("import: the root is not a directory")
	}
	uid, gid = fileOwner(st)
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return errorf("import: read %s: %v", quote(rel), bare(err))
		}
		for _, e := range ents {
			crel := join(rel, e.Name())
			if exclude[crel] || isWriterTemp(e.Name()) && e.Type().IsRegular() {
				continue
			}
			if !e.IsDir() {
				return errorf("import: %w (%s)", ErrNotEmpty, quote(crel))
			}
			if err := walk(filepath.Join(dir, e.Name()), crel); err != nil {
				return err
			}
		}
		return nil
	}
	return uid, gid, walk(root, ".")
}

// importNode is a directory being read from a stream.
type importNode struct {
	entries  map[string]*entry
	subdirs  map[string]*importNode
	explicit map[string]bool // the stream listed this entry (not only implied it)
}

func newImportNode() *importNode {
	return &importNode{entries: map[string]*entry{}, subdirs: map[string]*importNode{}, explicit: map[string]bool{}}
}

// importer reads a stream into objects and directory nodes.
type importer struct {
	s        *Store
	w        *objWriter
	root     *importNode
	uid, gid uint32
	now      int64
	count    int
	text     int
	buf      []byte
	files    int
	size     int64
}

// countingReader counts the bytes the tar reader takes, to tell a stream
// that ended with its trailer from one cut between two entries (which
// archive/tar reports as the same io.EOF).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *Store) importTar(ctx context.Context, r io.Reader, message string, uid, gid uint32) (Info, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	defer s.retain()

	im := &importer{s: s, w: s.newWriter(), root: newImportNode(), uid: uid, gid: gid,
		now: time.Now().UnixNano(), buf: make([]byte, smallFile)}
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	var end int64 // where the last entry's content (and padding) ends
	for {
		if err := ctx.Err(); err != nil {
			im.w.waitFiles()
			return Info{}, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			if cr.n-end != 2*512 {
				im.w.waitFiles()
				return Info{}, errorf("import: %w: the stream ends before its trailer", ErrBadArchive)
			}
			// Read to the end: what follows the trailer may only be
			// zeros (tar pads to its record size), and a reader that
			// fails at its end (a transfer found short, an export that
			// failed) fails the import before anything is restored.
			if err := zerosToEnd(cr); err != nil {
				im.w.waitFiles()
				return Info{}, err
			}
			break
		}
		if err != nil {
			im.w.waitFiles()
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) {
				return Info{}, errorf("import: %w: %v", ErrBadArchive, err)
			}
			return Info{}, errorf("import: %v", bare(err))
		}
		end = cr.n
		if err := im.add(hdr, tr); err != nil {
			im.w.waitFiles()
			return Info{}, err
		}
		if hdr.Typeflag == tar.TypeReg {
			end += (hdr.Size + 511) &^ 511
		}
	}
	rootTree, trees, err := im.finish(im.root)
	if err != nil {
		im.w.waitFiles()
		return Info{}, err
	}
	if err := im.w.waitFiles(); err != nil {
		return Info{}, err
	}
	s.treeMu.Lock()
	for _, t := range trees {
		t.stored, t.present = true, true
		t.data = nil
	}
	s.treeMu.Unlock()
	s.addTrees(trees)

	var c counts
	var prevRoot *tree
	if prev := s.latest(); prev != nil {
		prevRoot, _ = s.loadTree(prev.root)
	}
	tally := func(k Kind, _ string, _, _ *entry) error { c.add(k); return nil }
	if err := s.diff(prevRoot, rootTree, ".", tally); err != nil {
		c = counts{}
		s.diff(nil, rootTree, ".", tally)
	}
	id := s.maxID + 1
	rec := &record{V: 1, ID: strconv.Itoa(id), Time: time.Now(), Message: message,
		Root: hex.EncodeToString(rootTree.hash[:]), root: rootTree.hash,
		Added: c.added, Modified: c.modified, Deleted: c.deleted, Files: im.files, Size: im.size,
		ScanStart: im.now}
	if err := s.writeRecord(rec, im.w); err != nil {
		return Info{}, err
	}
	s.records[id] = rec
	s.ids = append(s.ids, id)
	s.maxID = id
	if u := s.usage(); u >= 0 {
		s.writeUsage(u + im.w.added.Load() + rec.bytes)
	}
	return rec.info(), nil
}

// importMaxPadding bounds the zeros ImportTar reads after the trailer.
const importMaxPadding = 1 << 20

// zerosToEnd reads r to its end, which must come within importMaxPadding
// bytes, all zero.
func zerosToEnd(r io.Reader) error {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		for _, c := range buf[:m] {
			if c != 0 {
				return errorf("import: %w: data after the trailer", ErrBadArchive)
			}
		}
		if n += int64(m); n > importMaxPadding {
			return errorf("import: %w: data after the trailer", ErrBadArchive)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errorf("import: %v", bare(err))
		}
	}
}

// add takes one entry of the stream.
func (im *importer) add(hdr *tar.Header, content io.Reader) error {
	name := hdr.Name
	bad := func(why string) error {
		return errorf("import %s: %w: %s", quote(name), ErrBadArchive, why)
	}
	if strings.IndexByte(name, 0) >= 0 || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return bad("NUL in a name")
	}
	var k kind
	switch hdr.Typeflag {
	case tar.TypeReg:
		k = kindFile
	case tar.TypeDir:
		k = kindDir
	case tar.TypeSymlink:
		k = kindSymlink
	case tar.TypeLink:
		return bad("hard links are not taken")
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return bad("special files are not taken")
	default:
		return bad("entry type " + strconv.Quote(string(rune(hdr.Typeflag))) + " is not taken")
	}
	rel := strings.TrimPrefix(name, "./")
	rel = strings.TrimSuffix(rel, "/")
	if rel == "" || rel == "." {
		if k != kindDir {
			return bad("the root must be a directory")
		}
		return nil // the root itself: its metadata stays the destination's
	}
	if path.IsAbs(rel) {
		return bad("absolute name")
	}
	parts := strings.Split(rel, "/")
	if len(parts) > importMaxDepth {
		return bad("too deep")
	}
	for _, p := range parts {
		if !validName(p) {
			return bad("not a plain relative path")
		}
	}
	im.count++
	im.text += len(rel) + len(hdr.Linkname)
	if im.count > importMaxEntries || im.text > importMaxText {
		return bad("too many entries")
	}
	clean := strings.Join(parts, "/")
	for i := range parts {
		if im.s.exclude[strings.Join(parts[:i+1], "/")] {
			return nil
		}
	}
	if isWriterTemp(parts[len(parts)-1]) && k == kindFile {
		return nil // a writer's temporary file, as Save leaves out
	}

	// The parent, made as implied where the stream did not list it.
	dir := im.root
	for i, p := range parts[:len(parts)-1] {
		if e := dir.entries[p]; e != nil && e.kind != kindDir {
			return errorf("import %s: %w: %s is not a directory", quote(name), ErrBadArchive, quote(strings.Join(parts[:i+1], "/")))
		}
		sub := dir.subdirs[p]
		if sub == nil {
			sub = newImportNode()
			dir.subdirs[p] = sub
			dir.entries[p] = &entry{name: p, kind: kindDir, mode: 0o755, uid: im.uid, gid: im.gid, mtime: im.now}
		}
		dir = sub
	}
	last := parts[len(parts)-1]
	if dir.explicit[last] {
		return bad("given twice")
	}
	if old := dir.entries[last]; old != nil && k != kindDir {
		return bad("a directory by the names below it, and not a directory here")
	}
	dir.explicit[last] = true

	e := &entry{name: last, kind: k, mode: uint32(hdr.Mode) & modeMask(k), uid: im.uid, gid: im.gid}
	if hdr.Mode < 0 || hdr.Mode > 0o7777 {
		return bad("mode out of range")
	}
	e.mtime = hdr.ModTime.UnixNano()
	switch k {
	case kindDir:
		if dir.subdirs[last] == nil {
			dir.subdirs[last] = newImportNode()
		}
	case kindSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > maxTargetLen {
			return bad("symlink text empty or too long")
		}
		e.target = hdr.Linkname
		e.size = int64(len(hdr.Linkname))
	case kindFile:
		if hdr.Size < 0 {
			return bad("negative size")
		}
		if err := im.content(clean, hdr.Size, content, e); err != nil {
			return err
		}
		im.files++
		im.size += e.size
	}
	dir.entries[last] = e
	return nil
}

// content stores a file's content as an object: small ones from memory,
// larger ones copied to a temporary object file while hashed.
func (im *importer) content(rel string, size int64, r io.Reader, e *entry) error {
	fail := func(err error) error {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return errorf("import %s: %w: %v", quote(rel), ErrBadArchive, io.ErrUnexpectedEOF)
		}
		return errorf("import %s: %v", quote(rel), bare(err))
	}
	var sum hash
	if size <= int64(len(im.buf)) {
		b := im.buf[:size]
		if _, err := io.ReadFull(r, b); err != nil {
			return fail(err)
		}
		sum = sha256.Sum256(b)
		if im.w.claim(sum) {
			if err := im.w.putBytes(sum, b); err != nil {
				return err
			}
		}
	} else {
		tmp, err := im.w.temp()
		if err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(tmp, h), onlyReader{io.LimitReader(r, size)}, im.buf)
		if err == nil && n != size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return fail(err)
		}
		h.Sum(sum[:0])
		if im.w.claim(sum) {
			im.w.finish(tmp, sum, size)
		} else {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}
	e.hash, e.size = sum, size
	return nil
}

// finish makes n's tree and those below it, writing each new one to the
// store; it returns n's tree and every tree made.
func (im *importer) finish(n *importNode) (*tree, map[hash]*tree, error) {
	trees := map[hash]*tree{}
	var rec func(n *importNode) (*tree, error)
	rec = func(n *importNode) (*tree, error) {
		names := make([]string, 0, len(n.entries))
		for name := range n.entries {
			names = append(names, name)
		}
		slices.Sort(names)
		entries := make([]entry, 0, len(names))
		for _, name := range names {
			e := *n.entries[name]
			if e.kind == kindDir {
				t, err := rec(n.subdirs[name])
				if err != nil {
					return nil, err
				}
				e.hash = t.hash
			}
			entries = append(entries, e)
		}
		t := encodeTree(entries)
		if trees[t.hash] == nil {
			trees[t.hash] = t
			if im.w.claim(t.hash) {
				if err := im.w.putBytes(t.hash, t.data); err != nil {
					return nil, err
				}
			}
		}
		return t, nil
	}
	t, err := rec(n)
	return t, trees, err
}
