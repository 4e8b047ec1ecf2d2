//go:build !linux

package local

// ReaperMain: the reaper needs PR_SET_CHILD_SUBREAPER, Linux only; host bash
// runs without one elsewhere.
func ReaperMain() {}

func reaperCommand() (path string, args []string) { return "", nil }
