package sandbox

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// The agent's view.
const (
	UserDataDir  = "/mnt/user-data"
	WorkspaceDir = "/mnt/user-data/workspace"
	UploadsDir   = "/mnt/user-data/uploads"
	OutputsDir   = "/mnt/user-data/outputs"
	SkillsDir    = "/mnt/skills"
)

// ReservedPrefixes may not be shadowed by custom mounts.
var ReservedPrefixes = []string{UserDataDir, SkillsDir}

// Mount maps a virtual directory onto a host directory.
type Mount struct {
	Virtual  string // absolute, clean
	Host     string // absolute host directory
	ReadOnly bool
}

var threadIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidThreadID reports whether id may name a thread (and so a directory).
func ValidThreadID(id string) error {
	if !threadIDRe.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("invalid thread id %q: want [A-Za-z0-9][A-Za-z0-9._-]{0,127}", truncate(id, 64))
	}
	return nil
}

var namespaceRe = regexp.MustCompile(`^@[0-9a-f]{16}$`)

// ValidThreadKey reports whether key may name a thread's directory: a
// thread id, or "@<16 hex>/<thread id>" for a thread namespaced by a
// credential. No thread id starts with "@", so the two never meet.
func ValidThreadKey(key string) error {
	if ns, id, ok := strings.Cut(key, "/"); ok {
		if !namespaceRe.MatchString(ns) {
			return fmt.Errorf("invalid thread namespace")
		}
		return ValidThreadID(id)
	}
	return ValidThreadID(key)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Clean turns a path argument of the agent into a clean absolute virtual
// path: relative paths resolve against the workspace. A NUL byte is refused
// before any cleaning. Clean does not decide whether the path is inside a
// mapping: the sandbox's file system does, when it is used.
func Clean(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &PathError{Path: strings.ReplaceAll(p, "\x00", `\0`), Err: ErrOutsideRoot}
	}
	if p == "" {
		return WorkspaceDir, nil
	}
	if !path.IsAbs(p) {
		p = WorkspaceDir + "/" + p
	}
	return path.Clean(p), nil
}

// Within reports whether virtual path p is dir or lies below it, at a
// component boundary ("/mnt/user-data-x" is not within "/mnt/user-data").
func Within(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Overlaps reports whether one of a and b lies within the other.
func Overlaps(a, b string) bool { return Within(a, b) || Within(b, a) }
