package sandbox

import "strings"

// ShellProbe is the argv that asks a container which shell it has (the
// docker provider's file operations); ShellFromProbe reads the answer.
var ShellProbe = []string{"sh", "-c", "command -v bash >/dev/null 2>&1 && echo bash || echo sh"}

// ShellFromProbe reads ShellProbe's run: "bash" or "sh", or "" when the
// image has no sh (it exited 126 or 127: it could not start). known is
// false when the probe did not run (an API error): ask again later.
func ShellFromProbe(stdout []byte, code int, err error) (shell string, known bool) {
	switch sh := strings.TrimSpace(string(stdout)); {
	case err != nil:
		return "", false
	case code == 0 && (sh == "bash" || sh == "sh"):
		return sh, true
	case code == 126 || code == 127:
		return "", true
	}
	return "", false
}
