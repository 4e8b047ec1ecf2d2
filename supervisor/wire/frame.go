package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A frame is one message on the channel between the server and a
// supervisor, in either direction:
//
//	magic   2 bytes  "SM"
//	kind    1 byte   what the payload is (kinds.go)
//	flags   1 byte   0
//	stream  4 bytes  the call it belongs to (0: the channel itself)
//	seq     4 bytes  frames sent before it in this direction
//	length  4 bytes  payload bytes, at most MaxPayload
//	payload
//	crc     4 bytes  CRC-32C of everything before it
//
// all big-endian. The reader checks every field: a bad magic, an oversized
// length, a sequence number out of turn (a frame lost or repeated) or a bad
// checksum (bytes changed, or a stream cut and joined) ends the channel.
// The exec stream of a kubernetes Pod can lose the end of what was written
// to it without an error (containerd truncates exec stdin); the sequence
// and the checksum are how that is seen.
const (
	HeaderLen  = 16
	TrailerLen = 4
	MaxPayload = 256 << 10
)

var (
	magic    = [2]byte{'S', 'M'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// ErrProtocol is wrapped by every error that a malformed frame causes.
var ErrProtocol = errors.New("supervisor protocol")

// Errorf is an ErrProtocol saying what was wrong.
func Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// Frame is one decoded frame. Payload is only valid until the next read.
type Frame struct {
	Kind    Kind
	Stream  uint32
	Payload []byte
}

// Writer writes frames; it is not safe for concurrent use (each side
// serializes its writes).
type Writer struct {
	W   io.Writer
	seq uint32
	buf []byte
}

// Write writes one frame.
func (fw *Writer) Write(kind Kind, stream uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("frame of %d bytes: over the %d limit", len(payload), MaxPayload)
	}
	n := HeaderLen + len(payload) + TrailerLen
	if cap(fw.buf) < n {
		fw.buf = make([]byte, n)
	}
	b := fw.buf[:n]
	b[0], b[1], b[2], b[3] = magic[0], magic[1], byte(kind), 0
	binary.BigEndian.PutUint32(b[4:], stream)
	binary.BigEndian.PutUint32(b[8:], fw.seq)
	binary.BigEndian.PutUint32(b[12:], uint32(len(payload)))
	copy(b[HeaderLen:], payload)
	binary.BigEndian.PutUint32(b[n-TrailerLen:], crc32.Checksum(b[:n-TrailerLen], crcTable))
	fw.seq++
	_, err := fw.W.Write(b)
	return err
}

// Reader reads and checks frames.
type Reader struct {
	R   io.Reader
	seq uint32
	buf []byte
}

// Read returns the next frame; io.EOF only when the stream ended cleanly
// between two frames. Anything else malformed is an ErrProtocol.
func (fr *Reader) Read() (Frame, error) {
	if cap(fr.buf) < HeaderLen+TrailerLen {
		fr.buf = make([]byte, HeaderLen+TrailerLen, 4096)
	}
	h := fr.buf[:HeaderLen]
	if _, err := io.ReadFull(fr.R, h); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Frame{}, Errorf("stream cut inside a frame header")
		}
		return Frame{}, err
	}
	if h[0] != magic[0] || h[1] != magic[1] || h[3] != 0 {
		return Frame{}, Errorf("bad frame header % x", h[:4])
	}
	seq := binary.BigEndian.Uint32(h[8:])
	if seq != fr.seq {
		return Frame{}, Errorf("frame %d where %d was due (frames lost or repeated)", seq, fr.seq)
	}
	n := binary.BigEndian.Uint32(h[12:])
	if n > MaxPayload {
		return Frame{}, Errorf("frame of %d bytes: over the %d limit", n, MaxPayload)
	}
	total := HeaderLen + int(n) + TrailerLen
	if cap(fr.buf) < total {
		nb := make([]byte, total)
		copy(nb, h)
		fr.buf = nb
	}
	b := fr.buf[:total]
	if _, err := io.ReadFull(fr.R, b[HeaderLen:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Frame{}, Errorf("stream cut inside a frame")
		}
		return Frame{}, err
	}
	if got, want := binary.BigEndian.Uint32(b[total-TrailerLen:]), crc32.Checksum(b[:total-TrailerLen], crcTable); got != want {
		return Frame{}, Errorf("frame %d: checksum mismatch (bytes changed in transit)", seq)
	}
	fr.seq++
	return Frame{Kind: Kind(b[2]), Stream: binary.BigEndian.Uint32(b[4:]), Payload: b[HeaderLen : HeaderLen+int(n)]}, nil
}

// Credit is a KindCredit payload: n more bytes may be sent.
func Credit(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// ParseCredit reads a KindCredit payload.
func ParseCredit(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, Errorf("credit of %d bytes", len(p))
	}
	return binary.BigEndian.Uint32(p), nil
}
