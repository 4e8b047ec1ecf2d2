package wire

import "runtime/debug"

// Protocol is the version of this protocol; a supervisor that speaks
// another is refused.
const Protocol = 10

// version is the release's version, set at build time in both binaries
// (scripts/release.sh: -ldflags "-X .../supervisor/wire.version=V").
var version = ""

// Version is this build's version, the same in a server and the
// supervisor daemon of one release: the release's (set at build time), or
// the module's for `go install …@vX`; "" for a development build (go
// build with no version stamped, go test). The server refuses a
// supervisor of another release (Hello.Version, SameRelease): a daemon
// left beside a newer server, or the other way round.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return ""
}

// SameRelease reports whether a server and a supervisor of versions a and
// b work together: the same version, or either a development build (the
// protocol number alone then tells them apart).
func SameRelease(a, b string) bool { return a == "" || b == "" || a == b }

// Describe names a version in a message.
func Describe(v string) string {
	if v == "" {
		return "a development build"
	}
	return "version " + v
}
