package daemon

import (
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// ring keeps the last JobRing bytes of a job's output, and where they are
// in the whole output, in bytes and in characters. It always starts at a
// character's first byte.
type ring struct {
	data      []byte // the kept output is data[off:]
	off       int
	baseChars int64 // characters before the kept output
	chars     int64 // characters of the whole output
}

func (r *ring) append(p []byte) {
	r.chars += wire.RuneStarts(p)
	r.data = append(r.data, p...)
	kept := r.data[r.off:]
	if len(kept) <= wire.JobRing {
		return
	}
	drop := len(kept) - wire.JobRing
	for drop < len(kept) && kept[drop]&0xC0 == 0x80 {
		drop++
	}
	r.baseChars += wire.RuneStarts(kept[:drop])
	r.off += drop
	if r.off >= wire.JobRing { // compact: at most wire.JobRing bytes copied per wire.JobRing dropped
		r.data = append(r.data[:0], r.data[r.off:]...)
		r.off = 0
	}
}

// kept is the output still held.
func (r *ring) kept() []byte { return r.data[r.off:] }

// shrink gives back the memory an ended job does not need.
func (r *ring) shrink() {
	r.data = append([]byte(nil), r.data[r.off:]...)
	r.off = 0
}

// read returns the output from character offset from (clamped to what is
// kept and to the end), at most max bytes and, unless all is true, without
// a character cut short at the end: the data, the offset it starts at,
// the offset after it and how many characters asked for are gone.
func (r *ring) read(from int64, max int, all bool) (data []byte, start, next, dropped int64) {
	if from < r.baseChars {
		dropped = r.baseChars - from
		from = r.baseChars
	}
	if from > r.chars {
		from = r.chars
	}
	kept := r.kept()
	i, c := 0, r.baseChars
	for i < len(kept) && c < from {
		i++
		for i < len(kept) && kept[i]&0xC0 == 0x80 {
			i++
		}
		c++
	}
	end := len(kept)
	if !all {
		end = completeLen(kept)
	}
	if end < i {
		end = i
	}
	if end-i > max {
		end = i + max
		for end > i && kept[end]&0xC0 == 0x80 {
			end--
		}
	}
	data = kept[i:end]
	return data, from, from + wire.RuneStarts(data), dropped
}

// ready reports whether there is complete output past character offset
// from.
func (r *ring) ready(from int64) bool {
	if from >= r.chars {
		return false
	}
	k := r.kept()
	return r.chars-wire.RuneStarts(k[completeLen(k):]) > max(from, r.baseChars)
}

// completeLen is len(p) without a UTF-8 sequence cut short at its end (the
// rest of which has not been written yet).
func completeLen(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		b := p[i]
		if b&0xC0 == 0x80 {
			continue
		}
		need := 1
		switch {
		case b&0xE0 == 0xC0:
			need = 2
		case b&0xF0 == 0xE0:
			need = 3
		case b&0xF8 == 0xF0:
			need = 4
		}
		if len(p)-i < need {
			return i
		}
		return len(p)
	}
	return len(p)
}
