package tools_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	const abc = "alpha\nbeta\ngamma\ndelta\n"
	p := ws + "/f.txt"
	tests := []struct {
		name    string
		content string
		args    map[string]any // path is f.txt unless given
		want    string         // exact text
		wantErr string         // substring of the error; set instead of want
	}{
		{name: "whole", content: abc, want: abc},
		{name: "absolute path", content: abc, args: map[string]any{"path": p}, want: abc},
		{name: "range", content: abc, args: map[string]any{"start_line": 2, "end_line": 3}, want: "beta\ngamma\n"},
		{name: "one line", content: abc, args: map[string]any{"start_line": 3, "end_line": 3}, want: "gamma\n"},
		{name: "start only", content: abc, args: map[string]any{"start_line": 3}, want: "gamma\ndelta\n"},
		{name: "end only", content: abc, args: map[string]any{"end_line": 1}, want: "alpha\n"},
		{name: "end past the end", content: abc, args: map[string]any{"start_line": 4, "end_line": 99}, want: "delta\n"},
		{name: "numbers as JSON floats", content: abc, args: map[string]any{"start_line": 2.0, "end_line": 2.0}, want: "beta\n"},
		{name: "no trailing newline", content: "x\ny", args: map[string]any{"start_line": 2}, want: "y"},
		{name: "empty file", content: "", want: ""},
		{name: "start past the end", content: abc, args: map[string]any{"start_line": 10}, wantErr: "past the end"},
		{name: "start just past the end", content: "x\ny", args: map[string]any{"start_line": 3}, wantErr: "past the end"},
		{name: "end before start", content: abc, args: map[string]any{"start_line": 3, "end_line": 2}, wantErr: "end_line"},
		{name: "start zero", content: abc, args: map[string]any{"start_line": 0}, wantErr: "start_line"},
		{name: "missing file", args: map[string]any{"path": "nope.txt"}, wantErr: "Error: not found: " + ws + "/nope.txt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.write("f.txt", tc.content)
			args := map[string]any{"path": "f.txt"}
			for k, v := range tc.args {
				args[k] = v
			}
			if tc.wantErr != "" {
				got := f.fail("read_file", args)
				if !strings.Contains(got, tc.wantErr) {
					t.Errorf("error %q does not contain %q", got, tc.wantErr)
				}
				return
			}
			if got := f.ok("read_file", args); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadFileStartPastEndNamesPath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("f.txt", "a\nb\n")
	got := f.fail("read_file", map[string]any{"path": "f.txt", "start_line": 5})
	if !strings.Contains(got, ws+"/f.txt") {
		t.Errorf("error %q does not name the file", got)
	}
}

func TestReadFileTruncation(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "line-%02d\n", i)
	}
	content := b.String() // 400 bytes
	for _, limit := range []int{100, 101, 37} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.env.Limits.ReadFileOutputMaxChars = limit
			f.write("big.txt", content)
			res := f.call("read_file", map[string]any{"path": "big.txt"})
			got := resultText(t, res)
			if res.IsError {
				t.Fatalf("error: %s", got)
			}
			body, note, found := strings.Cut(got, "\n[")
			if !found || !strings.Contains(note, "truncated") {
				t.Fatalf("no truncation note in %q", got)
			}
			if !strings.HasPrefix(content, body) || body == "" {
				t.Errorf("body %q is not the head of the file", body)
			}
			if len(body) > limit {
				t.Errorf("body is %d chars, limit %d", len(body), limit)
			}
			if !strings.Contains(note, ws+"/big.txt") {
				t.Errorf("note %q does not name the file", note)
			}
			if !res.Truncated {
				t.Error("Result.Truncated is false")
			}
		})
	}
	t.Run("under the limit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.env.Limits.ReadFileOutputMaxChars = len(content)
		f.write("big.txt", content)
		if got := f.ok("read_file", map[string]any{"path": "big.txt"}); got != content {
			t.Errorf("a file of exactly the limit was changed: %q", got)
		}
	})
	t.Run("no limit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.env.Limits.ReadFileOutputMaxChars = 0
		f.write("big.txt", content)
		if got := f.ok("read_file", map[string]any{"path": "big.txt"}); got != content {
			t.Errorf("limit 0 changed the text: %q", got)
		}
	})
}

func tinyPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	img.Set(1, 1, color.RGBA{B: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadFileImage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	data := tinyPNG(t)
	f.write("pic.png", string(data))
	res := f.call("read_file", map[string]any{"path": "pic.png"})
	if res.IsError {
		t.Fatalf("error: %v", res.Content)
	}
	img, ok := res.Content[0].(mcp.ImageContent)
	if !ok {
		t.Fatalf("content is %T, want mcp.ImageContent", res.Content[0])
	}
	if img.MIMEType != "image/png" {
		t.Errorf("mimeType = %q, want image/png", img.MIMEType)
	}
	if img.Type != "image" {
		t.Errorf("type = %q, want image", img.Type)
	}
	got, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		t.Fatalf("data is not base64: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("image data differs from the file (%d vs %d bytes)", len(got), len(data))
	}
	// Upper-case extension.
	f.write("PIC.PNG", string(data))
	if _, ok := f.call("read_file", map[string]any{"path": "PIC.PNG"}).Content[0].(mcp.ImageContent); !ok {
		t.Error("PIC.PNG did not come back as an image")
	}
}

func TestReadFileBinaryRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	data := append([]byte("\x7fELF\x02\x01\x01\x00"), bytes.Repeat([]byte{0, 1, 2, 3}, 300)...)
	f.write("prog.bin", string(data))
	got := f.fail("read_file", map[string]any{"path": "prog.bin"})
	if !strings.Contains(got, fmt.Sprint(len(data))) {
		t.Errorf("error %q does not give the size %d", got, len(data))
	}
	if !strings.Contains(got, ws+"/prog.bin") {
		t.Errorf("error %q does not name the file", got)
	}
	// A PNG name does not make binary bytes an image.
	f.write("fake.png", string(data))
	if got := f.fail("read_file", map[string]any{"path": "fake.png"}); !strings.Contains(got, fmt.Sprint(len(data))) {
		t.Errorf("fake.png: error %q does not give the size", got)
	}
}

func TestReadFileDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mkdir("d")
	for _, tc := range []struct{ path, want string }{
		{"d", "Error: is a directory: " + ws + "/d"},
		{ws, "Error: is a directory: " + ws},
		{"/mnt/user-data", "Error: is a directory: /mnt/user-data"},
	} {
		if got := f.fail("read_file", map[string]any{"path": tc.path}); got != tc.want {
			t.Errorf("read_file %s: got %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestReadFileNotUTF8: text that is not UTF-8 (Latin-1, GBK, a bad byte
// past the first 64 KiB, a character cut by the end of the file) is refused
// with its size and a hint, never returned with bytes replaced; UTF-8 text
// split across read pieces is returned whole.
func TestReadFileNotUTF8(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := strings.Repeat("é", 40000) // 80000 bytes: characters cut by 64 KiB pieces
	for name, data := range map[string]string{
		"latin1.txt":   "caf\xe9\n",
		"gbk.txt":      "\xc4\xe3\xba\xc3\n", // 你好 in GBK
		"late.txt":     strings.Repeat("ok\n", 30000) + "caf\xe9\n",
		"cut.txt":      "ok \xe2\x82",
		"longline.txt": long + "\xff",
	} {
		if err := os.WriteFile(f.host(name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("Error: not UTF-8 text: %s/%s (%d bytes); ", ws, name, len(data))
		got := f.fail("read_file", map[string]any{"path": name})
		if !strings.HasPrefix(got, want) || !strings.Contains(got, "iconv") {
			t.Errorf("read_file %s = %q, want %q... with a hint naming iconv", name, got, want)
		}
		if got := f.fail("read_file", map[string]any{"path": name, "start_line": 1, "end_line": 1}); !strings.HasPrefix(got, want) {
			t.Errorf("read_file %s, line 1 = %q, want %q...", name, got, want)
		}
	}
	// Random bytes with no NUL are a binary file, not text to convert.
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*2654435761>>13) | 1 // no NUL; spread like random bytes
	}
	if err := os.WriteFile(f.host("random.bin"), random, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := f.fail("read_file", map[string]any{"path": "random.bin"}); got != fmt.Sprintf("Error: binary file (4096 bytes), not shown: %s/random.bin", ws) {
		t.Errorf("read_file of random bytes = %q, want a binary file, not an iconv hint", got)
	}
	f.write("utf8.txt", long+"\n")
	if got := f.ok("read_file", map[string]any{"path": "utf8.txt"}); !strings.HasPrefix(got, "éé") || strings.Contains(got, "\uFFFD") {
		t.Errorf("read_file of long UTF-8 text = %.40q..., want it unchanged", got)
	}
}
