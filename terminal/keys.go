package terminal

import (
	"fmt"
	"strings"
)

// Keys turns an agent's input into the bytes a terminal sends: text as it
// is, and key names in angle brackets, as Vim writes them, where they
// stand: <Enter>, <Tab>, <Esc>, <BS>, <Del>, <Space>, <Up>, <Down>,
// <Left>, <Right>, <Home>, <End>, <PageUp>, <PageDown>, <Insert>,
// <F1>…<F12>, <S-Tab>, <C-a>…<C-z> (and <C-@>, <C-[>, <C-\>, <C-]>,
// <C-^>, <C-_>), <M-x> (Alt: Esc, then the key), and <lt> for a literal
// "<". Names are case-insensitive. A "<" that does not start a name —
// "a < b", "<<EOF", "<=" — is itself; a name that is no key ("<Entr>",
// "<div>") is an error, so that a typo is never typed as text.
//
// appCursor is the terminal's cursor-key mode (DECCKM, which full-screen
// programs set): the arrows, Home and End are sent as SS3 (ESC O A)
// instead of CSI (ESC [ A) sequences, as a terminal sends them then.
func Keys(input string, appCursor bool) ([]byte, error) {
	out := make([]byte, 0, len(input))
	for i := 0; i < len(input); {
		c := input[i]
		if c != '<' {
			out = append(out, c)
			i++
			continue
		}
		name, ok := keyName(input[i:])
		if !ok {
			out = append(out, c)
			i++
			continue
		}
		seq, ok := keySeq(name, appCursor)
		if !ok {
			return nil, fmt.Errorf("unknown key <%s> in input: keys are <Enter>, <Tab>, <Esc>, <BS>, <Del>, <Space>, <Up>, <Down>, <Left>, <Right>, <Home>, <End>, <PageUp>, <PageDown>, <F1>…<F12>, <C-a>…<C-z>, <M-x>; a literal < is <lt>", name)
		}
		out = append(out, seq...)
		i += len(name) + 2
	}
	return out, nil
}

// maxKeyName bounds a key name's length (<PageDown> is the longest).
const maxKeyName = 12

// keyName is the name of the key s starts with ("<name>"): a letter, then
// letters, digits and dashes — or, after a modifier ("C-", "M-", "A-"),
// any one character but ">" (<C-\>, <C-[>, <M-1>).
func keyName(s string) (string, bool) {
	end := strings.IndexByte(s[1:min(len(s), maxKeyName+2)], '>')
	if end <= 0 {
		return "", false
	}
	name := s[1 : end+1]
	if len(name) == 3 && name[1] == '-' && isLetter(name[0]) {
		return name, true
	}
	if !isLetter(name[0]) {
		return "", false
	}
	for _, c := range []byte(name) {
		if !isLetter(c) && !(c >= '0' && c <= '9') && c != '-' {
			return "", false
		}
	}
	return name, true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// keys are the named keys' sequences; where a key has two, the second is
// its form in the cursor-key application mode.
var keys = map[string][2]string{
	"enter": {"\r"}, "cr": {"\r"}, "return": {"\r"}, "nl": {"\n"},
	"tab": {"\t"}, "s-tab": {"\x1b[Z"},
	"esc": {"\x1b"}, "bs": {"\x7f"}, "backspace": {"\x7f"},
	"del": {"\x1b[3~"}, "delete": {"\x1b[3~"}, "insert": {"\x1b[2~"}, "ins": {"\x1b[2~"},
	"space": {" "}, "lt": {"<"}, "c-space": {"\x00"},
	"up": {"\x1b[A", "\x1bOA"}, "down": {"\x1b[B", "\x1bOB"},
	"right": {"\x1b[C", "\x1bOC"}, "left": {"\x1b[D", "\x1bOD"},
	"home": {"\x1b[H", "\x1bOH"}, "end": {"\x1b[F", "\x1bOF"},
	"pageup": {"\x1b[5~"}, "pagedown": {"\x1b[6~"},
	"f1": {"\x1bOP"}, "f2": {"\x1bOQ"}, "f3": {"\x1bOR"}, "f4": {"\x1bOS"},
	"f5": {"\x1b[15~"}, "f6": {"\x1b[17~"}, "f7": {"\x1b[18~"}, "f8": {"\x1b[19~"},
	"f9": {"\x1b[20~"}, "f10": {"\x1b[21~"}, "f11": {"\x1b[23~"}, "f12": {"\x1b[24~"},
}

// keySeq is the sequence of the named key: a key of the table, Ctrl and
// a letter or one of @[\]^_ (its low five bits), Alt (M- or A-) and a
// character or a key (ESC, then it).
func keySeq(name string, appCursor bool) (string, bool) {
	lower := strings.ToLower(name)
	if k, ok := keys[lower]; ok {
		if appCursor && k[1] != "" {
			return k[1], true
		}
		return k[0], true
	}
	if len(name) < 3 || name[1] != '-' {
		return "", false
	}
	rest := name[2:]
	switch lower[0] {
	case 'c':
		if len(rest) == 1 && (isLetter(rest[0]) || strings.IndexByte("@[\\]^_", rest[0]) >= 0) {
			return string([]byte{rest[0] & 0x1f}), true
		}
	case 'm', 'a':
		if len(rest) == 1 && rest[0] >= 0x20 && rest[0] < 0x7f {
			return "\x1b" + rest, true
		}
		if seq, ok := keySeq(rest, appCursor); ok {
			return "\x1b" + seq, true
		}
	}
	return "", false
}
