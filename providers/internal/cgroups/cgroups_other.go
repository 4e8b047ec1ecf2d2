//go:build !linux

package cgroups

import "os/exec"

// Tree is one provider instance's cgroups: none off Linux.
type Tree struct{ report Report }

// Open says that no limit holds: cgroups are Linux's.
func Open(name string, lim Limits) *Tree {
	return &Tree{Report{Missing: controllers, Reason: "cgroups are Linux only"}}
}

// Report says which limits hold: none.
func (t *Tree) Report() Report { return t.report }

// Group is nil: no limit holds.
func (t *Tree) Group(key string) (*Group, error) { return nil, nil }

// Close has nothing to remove.
func (t *Tree) Close() error { return nil }

// Group is one thread's cgroups: never made off Linux.
type Group struct{}

// Command leaves cmd as it is.
func (g *Group) Command(cmd *exec.Cmd) {}

// Dirs are none.
func (g *Group) Dirs() []string { return nil }

// Remove has nothing to remove.
func (g *Group) Remove() error { return nil }

// RemoveStale has nothing to remove.
func RemoveStale(name string, dirs []string) error { return nil }
