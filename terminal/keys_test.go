package terminal

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        string
		appCursor bool
		want      string
	}{
		{"ls -l\n", false, "ls -l\n"},
		{"2+2<Enter>", false, "2+2\r"},
		{"<enter><CR><Return><NL>", false, "\r\r\r\n"},
		{"<Tab><S-Tab><Esc><BS><Backspace><Del><Space><lt>", false, "\t\x1b[Z\x1b\x7f\x7f\x1b[3~ <"},
		{"<Up><Down><Right><Left><Home><End>", false, "\x1b[A\x1b[B\x1b[C\x1b[D\x1b[H\x1b[F"},
		{"<Up><Down><Right><Left><Home><End>", true, "\x1bOA\x1bOB\x1bOC\x1bOD\x1bOH\x1bOF"},
		{"<PageUp><PageDown><Insert>", true, "\x1b[5~\x1b[6~\x1b[2~"},
		{"<F1><F4><F5><F10><F12>", false, "\x1bOP\x1bOS\x1b[15~\x1b[21~\x1b[24~"},
		{"<C-a><C-c><c-Z><C-[><C-\\><C-]><C-@><C-Space>", false, "\x01\x03\x1a\x1b\x1c\x1d\x00\x00"},
		{"<M-x><A-b><M-Left><M-Enter>", false, "\x1bx\x1bb\x1b\x1b[D\x1b\r"},
		{":wq<Enter>", false, ":wq\r"},
		// A "<" that starts no name is itself.
		{"a < b", false, "a < b"},
		{"cat <<EOF", false, "cat <<EOF"},
		{"x<=y; if a<3>2", false, "x<=y; if a<3>2"},
		{"<", false, "<"},
		{"<>", false, "<>"},
		{"<br/>", false, "<br/>"},
		{"<ThisNameIsTooLongForAKey>", false, "<ThisNameIsTooLongForAKey>"},
		{"héllo <Enter>€", false, "héllo \r€"},
	} {
		got, err := Keys(tc.in, tc.appCursor)
		if err != nil || string(got) != tc.want {
			t.Errorf("Keys(%q, %v) = %q, %v; want %q", tc.in, tc.appCursor, got, err, tc.want)
		}
	}
}

func TestKeysUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, name string }{
		{"2+2<Entr>", "<Entr>"},
		{"<div>hi", "<div>"},
		{"<F13>", "<F13>"},
		{"<C-1>", "<C-1>"},
		{"<M-Foo>", "<M-Foo>"},
		{"ok<Enter><C-é>", ""}, // not a name: literal
	} {
		got, err := Keys(tc.in, false)
		if tc.name == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "unknown key "+tc.name+" ") || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "<lt>") {
			t.Errorf("Keys(%q) = %q, %v; want an error naming %s", tc.in, got, err, tc.name)
		}
	}
}

// Input without "<" is sent as it is, whatever it holds.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"", "ls\n", "<Enter>", "<C-c>", "a<b", "<M-<Up>>", "<<>>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Keys(s, false)
		if !strings.Contains(s, "<") && (err != nil || string(got) != s) {
			t.Fatalf("%q: %q %v", s, got, err)
		}
		if err == nil && len(got) > 8*len(s)+8 {
			t.Fatalf("%q: %d bytes", s, len(got))
		}
	})
}
