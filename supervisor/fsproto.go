package supervisor

import (
	"encoding/binary"
	"path"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// File operations. Each is a stream, like a command: the server opens it
// with msgFS and the supervisor ends it with msgFSEnd, its last frame.
//
//	stat     FS → End{Info} (symlinks followed)
//	readdir  FS → Entries… → End (each entry not followed; unsorted,
//	         the client sorts)
//	read     FS → Info → Data… → End: Info is the file's stat, Data its
//	         bytes (at most Info.Size, within the credit the server gives),
//	         End{} once all were sent. A directory: Info, then End.
//	write    FS → Credit (the temporary file is ready; the supervisor
//	         grants credit as it writes) ; Data… → Commit → End. The bytes
//	         go to a temporary file beside the target (a symlink's target),
//	         checked against Commit's size and sha256, chmod, fsync, and
//	         renamed over the target, under a per-path mutex with the
//	         request's precondition. A stream that ends before Commit
//	         (msgKill, the channel's end) replaces nothing.
//	remove   FS → End (a file, or an empty directory)
//	grep     FS{Grep} → Data… → End: the results of package search's Grep
//	glob     FS{Glob} → Data… → End{Total}: and of its Glob, run inside
//	         the sandbox; Data is a stream of JSON values (FileMatch or
//	         Hit), one a line, within the credit the server gives, in the
//	         order found gets them. msgKill stops the search.
const (
	msgFS        byte = 8  // c→s: start a file operation (FSRequest, JSON) as the stream
	msgFSInfo    byte = 9  // s→c: a read's stat (FSInfo, JSON), before its bytes
	msgFSData    byte = 10 // both: a read's bytes (s→c), a write's bytes (c→s)
	msgFSEntries byte = 11 // s→c: directory entries (binary, see appendEntry)
	msgFSCommit  byte = 12 // c→s: a write's bytes are all sent (FSCommit, JSON)
	msgFSEnd     byte = 13 // s→c: the operation ended (FSEnd, JSON); its last frame
)

// File operation names (FSRequest.Op).
const (
	opStat    = "stat"
	opReadDir = "readdir"
	opRead    = "read"
	opWrite   = "write"
	opRemove  = "remove"
	opGrep    = "grep"
	opGlob    = "glob"
)

// FSRequest starts a file operation on Path, a clean absolute path in the
// sandbox.
type FSRequest struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// A write's precondition, checked under the path's mutex just before
	// the rename: the file's content has this sha256 (hex), or, with
	// IfAbsent, there is no file. Neither: none.
	IfSHA256 string `json:"if_sha256,omitempty"`
	IfAbsent bool   `json:"if_absent,omitempty"`
	// A search's request; its Root is Path.
	Grep *search.GrepRequest `json:"grep,omitempty"`
	Glob *search.GlobRequest `json:"glob,omitempty"`
}

// FSInfo is a file's stat.
type FSInfo struct {
	Mode    uint32 `json:"mode"` // raw st_mode
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
}

// FSCommit ends a write's bytes: how many were sent and their sha256.
type FSCommit struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// FSEnd ends a file operation. Err is one of the fsErr codes; Msg says
// more for codes the client has no sentinel for.
type FSEnd struct {
	Err   string  `json:"err,omitempty"`
	Msg   string  `json:"msg,omitempty"`
	Info  *FSInfo `json:"info,omitempty"`  // stat's answer
	Total int     `json:"total,omitempty"` // glob's count of matching paths
}

// Error codes of FSEnd.Err: errno names, and the supervisor's own.
const (
	codeConflict  = "CONFLICT"  // a write's precondition did not hold
	codeShort     = "SHORT"     // a write's bytes were not what Commit said
	codeChanged   = "CHANGED"   // a file shrank while it was read
	codeNotReg    = "NOTREG"    // a FIFO, socket or device where a file was expected
	codeTooMany   = "TOOMANY"   // a directory of more than maxDirEntries
	codeCancelled = "CANCELLED" // msgKill
)

// maxResultBytes bounds one result of a search (a FileMatch, JSON-encoded):
// what the server holds of a result before it is whole, and decodes (a
// decoded result can be about ten times its JSON: `{}` is a 32-byte Line).
// A file whose result is larger fails the search with an error saying so.
var maxResultBytes = 16 << 20

// maxDirEntries bounds a listing: the memory one costs the server.
const maxDirEntries = 1 << 18

// maxNameLen is NAME_MAX: no file name on Linux is longer.
const maxNameLen = 255

// An entry of msgFSEntries is
//
//	u16 name length, name, u32 st_mode, i64 size, i64 mtime (ns)
//
// big-endian; a frame holds whole entries only.
const entryFixed = 2 + 4 + 8 + 8

type dirEnt struct {
	name string
	info FSInfo
}

func appendEntry(b []byte, e dirEnt) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.name)))
	b = append(b, e.name...)
	b = binary.BigEndian.AppendUint32(b, e.info.Mode)
	b = binary.BigEndian.AppendUint64(b, uint64(e.info.Size))
	return binary.BigEndian.AppendUint64(b, uint64(e.info.MtimeNS))
}

// parseEntries decodes one msgFSEntries payload, checking every name.
func parseEntries(p []byte, out []dirEnt) ([]dirEnt, error) {
	for len(p) > 0 {
		if len(p) < 2 {
			return out, protocolError("directory entry cut short")
		}
		n := int(binary.BigEndian.Uint16(p))
		if len(p) < n+entryFixed {
			return out, protocolError("directory entry cut short")
		}
		name := string(p[2 : 2+n])
		if !validName(name) {
			return out, protocolError("directory entry with an invalid name %q", capText(name, 64))
		}
		q := p[2+n:]
		info := FSInfo{Mode: binary.BigEndian.Uint32(q), Size: int64(binary.BigEndian.Uint64(q[4:])), MtimeNS: int64(binary.BigEndian.Uint64(q[12:]))}
		if info.Size < 0 {
			return out, protocolError("directory entry %q of size %d", capText(name, 64), info.Size)
		}
		out = append(out, dirEnt{name: name, info: info})
		p = q[20:]
	}
	return out, nil
}

// validName reports whether n is one path component: not empty, not "."
// or "..", no '/' and no NUL, at most NAME_MAX bytes.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= maxNameLen && !strings.ContainsAny(n, "/\x00")
}

// validPath reports whether p is a clean absolute path without NUL.
func validPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.Contains(p, "\x00")
}

// capText makes text from the supervisor fit an error message: one line,
// at most n bytes.
func capText(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
