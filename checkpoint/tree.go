package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"slices"
	"strings"
	"time"
)

// hash is a SHA-256: an object's name.
type hash = [sha256.Size]byte

// kind is an entry's type, one byte in a tree.
type kind byte

const (
	kindFile    kind = 'f'
	kindDir     kind = 'd'
	kindSymlink kind = 'l'
	kindSkipped kind = 'x' // a special file or an unreadable path: no content
)

// entry is one name in a directory: what a checkpoint restores (kind,
// mode, owner, mtime, content) and what the next save's stat cache needs
// to trust it without reading the file (size, mtime, ctime, inode).
type entry struct {
	name         string
	kind         kind
	mode         uint32 // permission bits; a directory's also sticky and setgid (0o3777)
	uid, gid     uint32
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
	ino          uint64
	hash         hash   // file: its content; dir: its tree
	target       string // symlink: its text; skipped: why
}

// sameContent reports whether a and b are the same to a user: kind, mode
// bits, content or link text. Timestamps, inode and owner are not
// compared; a skipped entry is like any other skipped one.
func sameContent(a, b *entry) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kindFile:
		return a.mode == b.mode && a.hash == b.hash
	case kindDir:
		return a.mode == b.mode
	case kindSymlink:
		return a.target == b.target
	}
	return true
}

// tree is one directory's entries, sorted by name, and its encoding's hash.
type tree struct {
	entries []entry
	hash    hash
	data    []byte // the encoding, kept until it is stored
	// stored: the tree is in the store together with everything it
	// reaches (it was loaded from there, or written after its children),
	// as far as this process knows (see Store.refresh).
	stored bool
	// present: every file content the tree names is in the store (it was
	// loaded from there, or a saving scan found or wrote each), as far as
	// this process knows: such a tree's entries serve as stat cache without
	// a look at the store. Guarded by Store.treeMu.
	present bool
	osize   int64 // the encoding's length: the object's size
}

const treeMagic = "CKT1"

// Bounds a decoded tree must keep: a damaged or hostile object must not
// make the decoder allocate without end.
const (
	maxNameLen   = 4096
	maxTargetLen = 1 << 16
)

// encodeTree encodes entries (sorted, unique names) and hashes the result.
func encodeTree(entries []entry) *tree {
	n := len(treeMagic) + binary.MaxVarintLen64
	for i := range entries {
		n += len(entries[i].name) + len(entries[i].target) + 100
	}
	b := make([]byte, 0, n)
	b = append(b, treeMagic...)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for i := range entries {
		e := &entries[i]
		b = binary.AppendUvarint(b, uint64(len(e.name)))
		b = append(b, e.name...)
		b = append(b, byte(e.kind), 0) // kind, flags (none yet)
		b = binary.AppendUvarint(b, uint64(e.mode))
		b = binary.AppendUvarint(b, uint64(e.uid))
		b = binary.AppendUvarint(b, uint64(e.gid))
		b = binary.AppendVarint(b, e.size)
		b = binary.AppendVarint(b, e.mtime)
		b = binary.AppendVarint(b, e.ctime)
		b = binary.AppendUvarint(b, e.ino)
		switch e.kind {
		case kindFile, kindDir:
			b = append(b, e.hash[:]...)
		default:
			b = binary.AppendUvarint(b, uint64(len(e.target)))
			b = append(b, e.target...)
		}
	}
	return &tree{entries: entries, hash: sha256.Sum256(b), data: b, osize: int64(len(b))}
}

// decodeTree parses a tree object, checking everything a restore relies
// on: names are single path components (no "/", NUL, "." or ".."), sorted
// and unique, so that no name can lead a restore out of its directory.
func decodeTree(b []byte) (*tree, error) {
	bad := func(what string) error { return errorf("%w: bad tree object (%s)", ErrCorrupt, what) }
	if !strings.HasPrefix(string(b), treeMagic) {
		return nil, bad("magic")
	}
	r := reader{b: b[len(treeMagic):]}
	n := r.uvarint()
	if r.err || n > uint64(len(b))/12 { // an entry takes 12 bytes or more
		return nil, bad("count")
	}
	t := &tree{entries: make([]entry, n)}
	for i := range t.entries {
		e := &t.entries[i]
		e.name = r.str(maxNameLen)
		k := kind(r.byte())
		r.byte() // flags: none yet
		e.kind = k
		mode := r.uvarint()
		uid, gid := r.uvarint(), r.uvarint()
		e.size, e.mtime, e.ctime = r.varint(), r.varint(), r.varint()
		e.ino = r.uvarint()
		switch k {
		case kindFile, kindDir:
			copy(e.hash[:], r.bytes(len(e.hash)))
		case kindSymlink, kindSkipped:
			e.target = r.str(maxTargetLen)
		default:
			return nil, bad("kind")
		}
		switch {
		case r.err:
			return nil, bad("truncated")
		case mode&^uint64(modeMask(k)) != 0 || uid > 1<<32-1 || gid > 1<<32-1 || e.size < 0:
			return nil, bad("field out of range")
		case !validName(e.name):
			return nil, bad("name")
		case i > 0 && e.name <= t.entries[i-1].name:
			return nil, bad("order")
		case k == kindSymlink && (e.target == "" || strings.IndexByte(e.target, 0) >= 0):
			return nil, bad("symlink target")
		}
		e.mode, e.uid, e.gid = uint32(mode), uint32(uid), uint32(gid)
	}
	if len(r.b) != 0 {
		return nil, bad("trailing bytes")
	}
	t.hash = sha256.Sum256(b)
	t.osize = int64(len(b))
	return t, nil
}

// modeMask is the mode bits an entry of kind k may have: never setuid,
// and setgid and sticky only on a directory (where they give no privilege).
func modeMask(k kind) uint32 {
	if k == kindDir {
		return 0o3777
	}
	return 0o777
}

// validName reports whether n is one path component a restore may create.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= maxNameLen && !strings.ContainsAny(n, "/\x00")
}

// find is the entry named name, or nil.
func (t *tree) find(name string) *entry {
	if t == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(t.entries, name, func(e entry, n string) int { return strings.Compare(e.name, n) })
	if !ok {
		return nil
	}
	return &t.entries[i]
}

// sameEntries reports whether two entry lists encode the same.
func sameEntries(a, b []entry) bool {
	return slices.Equal(a, b)
}

// public turns an entry into an Entry.
func (e *entry) public(rel string) *Entry {
	if e == nil {
		return nil
	}
	out := &Entry{Path: rel, Mode: fs.FileMode(e.mode & 0o777), Size: e.size, ModTime: time.Unix(0, e.mtime)}
	if e.mode&0o1000 != 0 {
		out.Mode |= fs.ModeSticky
	}
	if e.mode&0o2000 != 0 {
		out.Mode |= fs.ModeSetgid
	}
	switch e.kind {
	case kindFile:
		out.Hash = hex.EncodeToString(e.hash[:])
	case kindDir:
		out.Mode |= fs.ModeDir
		out.Size = 0
	case kindSymlink:
		out.Mode |= fs.ModeSymlink
		out.Target = e.target
	case kindSkipped:
		out.Mode |= fs.ModeIrregular
		out.Skipped = e.target
	}
	return out
}

// reader reads the fields of an encoding; err sticks once anything is
// short or malformed, and later reads return zeros.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.err = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int) []byte {
	if len(r.b) < n {
		r.err = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) str(max int) string {
	n := r.uvarint()
	if n > uint64(max) {
		r.err = true
		return ""
	}
	return string(r.bytes(int(n)))
}
