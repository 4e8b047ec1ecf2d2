package supervisor

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
//	kind    1 byte   what the payload is (the msg constants)
//	flags   1 byte   0
//	stream  4 bytes  the call it belongs to (0: the channel itself)
//	seq     4 bytes  frames sent before it in this direction
//	length  4 bytes  payload bytes, at most maxPayload
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
	headerLen  = 16
	trailerLen = 4
	maxPayload = 256 << 10
)

var (
	magic    = [2]byte{'S', 'M'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// ErrProtocol is wrapped by every error that a malformed frame causes.
var ErrProtocol = errors.New("supervisor protocol")

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// frame is one decoded frame. payload is only valid until the next read.
type frame struct {
	kind    byte
	stream  uint32
	payload []byte
}

// frameWriter writes frames; it is not safe for concurrent use (Conn and
// the supervisor serialize writes).
type frameWriter struct {
	w   io.Writer
	seq uint32
	buf []byte
}

func (fw *frameWriter) write(kind byte, stream uint32, payload []byte) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("frame of %d bytes: over the %d limit", len(payload), maxPayload)
	}
	n := headerLen + len(payload) + trailerLen
	if cap(fw.buf) < n {
		fw.buf = make([]byte, n)
	}
	b := fw.buf[:n]
	b[0], b[1], b[2], b[3] = magic[0], magic[1], kind, 0
	binary.BigEndian.PutUint32(b[4:], stream)
	binary.BigEndian.PutUint32(b[8:], fw.seq)
	binary.BigEndian.PutUint32(b[12:], uint32(len(payload)))
	copy(b[headerLen:], payload)
	binary.BigEndian.PutUint32(b[n-trailerLen:], crc32.Checksum(b[:n-trailerLen], crcTable))
	fw.seq++
	_, err := fw.w.Write(b)
	return err
}

// frameReader reads and checks frames.
type frameReader struct {
	r   io.Reader
	seq uint32
	buf []byte
}

// read returns the next frame; io.EOF only when the stream ended cleanly
// between two frames. Anything else malformed is an ErrProtocol.
func (fr *frameReader) read() (frame, error) {
	if cap(fr.buf) < headerLen+trailerLen {
		fr.buf = make([]byte, headerLen+trailerLen, 4096)
	}
	h := fr.buf[:headerLen]
	if _, err := io.ReadFull(fr.r, h); err != nil {
		if err == io.ErrUnexpectedEOF {
			return frame{}, protocolError("stream cut inside a frame header")
		}
		return frame{}, err
	}
	if h[0] != magic[0] || h[1] != magic[1] || h[3] != 0 {
		return frame{}, protocolError("bad frame header % x", h[:4])
	}
	seq := binary.BigEndian.Uint32(h[8:])
	if seq != fr.seq {
		return frame{}, protocolError("frame %d where %d was due (frames lost or repeated)", seq, fr.seq)
	}
	n := binary.BigEndian.Uint32(h[12:])
	if n > maxPayload {
		return frame{}, protocolError("frame of %d bytes: over the %d limit", n, maxPayload)
	}
	total := headerLen + int(n) + trailerLen
	if cap(fr.buf) < total {
		nb := make([]byte, total)
		copy(nb, h)
		fr.buf = nb
	}
	b := fr.buf[:total]
	if _, err := io.ReadFull(fr.r, b[headerLen:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return frame{}, protocolError("stream cut inside a frame")
		}
		return frame{}, err
	}
	if got, want := binary.BigEndian.Uint32(b[total-trailerLen:]), crc32.Checksum(b[:total-trailerLen], crcTable); got != want {
		return frame{}, protocolError("frame %d: checksum mismatch (bytes changed in transit)", seq)
	}
	fr.seq++
	return frame{kind: b[2], stream: binary.BigEndian.Uint32(b[4:]), payload: b[headerLen : headerLen+int(n)]}, nil
}
