//go:build unix && !linux

package daemon

// becomeSubreaper: only Linux has child subreapers; elsewhere orphans go
// to init.
func becomeSubreaper() {}
