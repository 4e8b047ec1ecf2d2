package wire

import (
	"bytes"
	"encoding/pem"
	"path"
	"strconv"
	"strings"
)

// ValidName reports whether n is one path component: not empty, not "."
// or "..", no '/' and no NUL, at most NAME_MAX bytes.
func ValidName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= MaxNameLen && !strings.ContainsAny(n, "/\x00")
}

// ValidPath reports whether p is a clean absolute path without NUL.
func ValidPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.Contains(p, "\x00")
}

// CapText makes text from the other side fit an error message: one line,
// at most n bytes.
func CapText(s string, n int) string {
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

// JobID is the id of the n-th job.
func JobID(n uint64) string { return "j" + strconv.FormatUint(n, 10) }

// ValidJobID reports whether id is "j" and a positive decimal number
// without leading zeros.
func ValidJobID(id string) bool {
	if len(id) < 2 || len(id) > 20 || id[0] != 'j' || id[1] == '0' {
		return false
	}
	for _, c := range id[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ValidSignalName reports whether s may be JobInfo.Signal.
func ValidSignalName(s string) bool {
	if len(s) > 16 {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// RuneStarts counts the characters of p: its bytes that are not UTF-8
// continuation bytes (the unit of a job's offsets).
func RuneStarts(p []byte) int64 {
	var n int64
	for _, b := range p {
		if b&0xC0 != 0x80 {
			n++
		}
	}
	return n
}

// ValidCA reports whether b is a CA as NetRequest carries it: at most
// MaxCABytes of one or more PEM CERTIFICATE blocks without headers, and
// nothing else but white space.
func ValidCA(b []byte) bool {
	if len(b) == 0 || len(b) > MaxCABytes {
		return false
	}
	n := 0
	for {
		blk, rest := pem.Decode(b)
		if blk == nil {
			return n > 0 && len(bytes.TrimSpace(b)) == 0
		}
		if blk.Type != "CERTIFICATE" || len(blk.Headers) != 0 || len(blk.Bytes) == 0 {
			return false
		}
		// Only white space between blocks (pem.Decode skips any text).
		if i := bytes.Index(b, []byte("-----BEGIN")); i < 0 || len(bytes.TrimSpace(b[:i])) != 0 {
			return false
		}
		b, n = rest, n+1
	}
}
