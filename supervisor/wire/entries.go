package wire

import (
	"encoding/binary"
	"io/fs"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// An entry of KindFSEntries is
//
//	u16 name length, name, u32 st_mode, i64 size, i64 mtime (ns)
//
// big-endian; a frame holds whole entries only.
const entryFixed = 2 + 4 + 8 + 8

// Entry is one directory entry.
type Entry struct {
	Name string
	Info FSInfo
}

// AppendEntry appends e's encoding to b.
func AppendEntry(b []byte, e Entry) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.Name)))
	b = append(b, e.Name...)
	b = binary.BigEndian.AppendUint32(b, e.Info.Mode)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Info.Size))
	return binary.BigEndian.AppendUint64(b, uint64(e.Info.MtimeNS))
}

// ParseEntries decodes one KindFSEntries payload onto out, checking every
// name.
func ParseEntries(p []byte, out []Entry) ([]Entry, error) {
	for len(p) > 0 {
		if len(p) < 2 {
			return out, Errorf("directory entry cut short")
		}
		n := int(binary.BigEndian.Uint16(p))
		if len(p) < n+entryFixed {
			return out, Errorf("directory entry cut short")
		}
		name := string(p[2 : 2+n])
		if !ValidName(name) {
			return out, Errorf("directory entry with an invalid name %q", CapText(name, 64))
		}
		q := p[2+n:]
		info := FSInfo{Mode: binary.BigEndian.Uint32(q), Size: int64(binary.BigEndian.Uint64(q[4:])), MtimeNS: int64(binary.BigEndian.Uint64(q[12:]))}
		if info.Size < 0 {
			return out, Errorf("directory entry %q of size %d", CapText(name, 64), info.Size)
		}
		out = append(out, Entry{Name: name, Info: info})
		p = q[20:]
	}
	return out, nil
}

// FileInfo is i as the fs.FileInfo of a file named name.
func (i FSInfo) FileInfo(name string) fs.FileInfo {
	return &fileInfo{name: name, size: i.Size, mode: sandbox.UnixMode(i.Mode), mtime: time.Unix(0, i.MtimeNS)}
}

// fileInfo is a sandbox file's FileInfo.
type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.size }
func (i *fileInfo) Mode() fs.FileMode  { return i.mode }
func (i *fileInfo) ModTime() time.Time { return i.mtime }
func (i *fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *fileInfo) Sys() any           { return nil }
