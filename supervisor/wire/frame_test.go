package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func frames(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	fw := Writer{W: &b}
	for i := range n {
		if err := fw.Write(KindOutput, 7, bytes.Repeat([]byte{byte(i)}, 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func readAll(data []byte) (int, error) {
	fr := Reader{R: bytes.NewReader(data)}
	for n := 0; ; n++ {
		f, err := fr.Read()
		if err != nil {
			return n, err
		}
		if f.Stream != 7 || len(f.Payload) != 100+n || (len(f.Payload) > 0 && f.Payload[0] != byte(n)) {
			return n, errors.New("frame content changed")
		}
	}
}

func TestFramesRoundTrip(t *testing.T) {
	if n, err := readAll(frames(t, 5)); n != 5 || err != io.EOF {
		t.Fatalf("n %d err %v", n, err)
	}
}

// Every single-byte change and every cut inside a frame is detected:
// never a changed frame delivered, never a clean end mid-frame.
func TestFramesCorruptionAndTruncationDetected(t *testing.T) {
	data := frames(t, 3)
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x20
		n, err := readAll(bad)
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("byte %d flipped: read %d frames, err %v", i, n, err)
		}
	}
	frameLen := len(data) / 3 // close enough: frames differ by one byte
	for cut := 1; cut < len(data); cut++ {
		n, err := readAll(data[:cut])
		if err == io.EOF && cut%frameLen != 0 && n < 3 {
			// A clean EOF is only right exactly between frames.
			whole := 0
			for k := 0; k < n; k++ {
				whole += HeaderLen + 100 + k + TrailerLen
			}
			if whole != cut {
				t.Fatalf("cut at %d: clean end after %d frames", cut, n)
			}
		}
	}
	// A frame dropped from the middle (the stream cut and joined) is seen.
	first := HeaderLen + 100 + TrailerLen
	second := HeaderLen + 101 + TrailerLen
	joined := append(append([]byte(nil), data[:first]...), data[first+second:]...)
	if _, err := readAll(joined); !errors.Is(err, ErrProtocol) {
		t.Fatalf("dropped frame: err %v", err)
	}
}
