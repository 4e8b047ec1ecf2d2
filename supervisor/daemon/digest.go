//go:build unix

package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// digest reports a file's size and, when it is within the request's bound
// (and wire.MaxDigestBytes), its sha256, its line count and whether it is
// UTF-8: what a reader of a few of its lines needs to know of the whole,
// without streaming it out. The file opens as read opens it (symlinks
// followed, a FIFO does not block it); KindKill stops the reading.
func digest(st *fsStream, req wire.FSRequest) wire.FSEnd {
	bound := req.Max
	if bound <= 0 || bound > wire.MaxDigestBytes {
		bound = wire.MaxDigestBytes
	}
	f, err := os.OpenFile(req.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrPermission) {
		// A directory that may not be listed is a directory all the same.
		if fi, serr := os.Stat(req.Path); serr == nil && fi.IsDir() {
			return wire.FSEnd{Err: "EISDIR"}
		}
	}
	if err != nil {
		return fsError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return fsError(err)
	case fi.IsDir():
		return wire.FSEnd{Err: "EISDIR"}
	case !fi.Mode().IsRegular():
		return wire.FSEnd{Err: wire.CodeNotReg}
	case fi.Size() > bound:
		return wire.FSEnd{Digest: &wire.FSDigest{Size: fi.Size()}}
	}
	h := sha256.New()
	var text utf8Stream
	var size int64
	lines, last := 0, byte('\n')
	buf := make([]byte, wire.ChunkSize)
	for {
		if st.stopped() {
			return wire.FSEnd{Err: wire.CodeCancelled}
		}
		n, err := f.Read(buf)
		if n > 0 {
			if size += int64(n); size > bound {
				return wire.FSEnd{Digest: &wire.FSDigest{Size: size}} // it grew past the bound
			}
			b := buf[:n]
			h.Write(b)
			text.write(b)
			lines += bytes.Count(b, []byte{'\n'})
			last = b[n-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fsError(err)
		}
	}
	if last != '\n' {
		lines++ // a last line without a newline
	}
	return wire.FSEnd{Digest: &wire.FSDigest{Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), Lines: lines, UTF8: text.valid()}}
}

// stopped: the operation was killed, or its channel ended.
func (st *fsStream) stopped() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closed
}

// utf8Stream checks bytes that come a chunk at a time for UTF-8: a
// character cut between two chunks is carried to the next.
type utf8Stream struct {
	pend []byte // the start of a character cut by the chunk's end
	bad  bool
}

func (u *utf8Stream) write(p []byte) {
	if u.bad {
		return
	}
	if len(u.pend) > 0 {
		p = append(u.pend, p...)
		u.pend = nil
	}
	i := len(p) // where the last character starts
	for j := len(p) - 1; j >= 0 && j >= len(p)-utf8.UTFMax; j-- {
		if utf8.RuneStart(p[j]) {
			i = j
			break
		}
	}
	if i < len(p) && !utf8.FullRune(p[i:]) {
		u.pend = append([]byte(nil), p[i:]...)
		p = p[:i]
	}
	u.bad = !utf8.Valid(p)
}

// valid: every byte written was UTF-8, and no character was left cut.
func (u *utf8Stream) valid() bool { return !u.bad && len(u.pend) == 0 }
