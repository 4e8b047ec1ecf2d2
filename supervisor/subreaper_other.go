//go:build unix && !linux

package supervisor

// becomeSubreaper: only Linux has child subreapers; elsewhere orphans go
// to init.
func becomeSubreaper() {}
