package supervisor

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// mainCalled is set when Main ran and returned: this binary serves as a
// supervisor (a test binary of a package that does not call Main would
// run its tests instead).
var mainCalled atomic.Bool

// Executable is this binary's path, which serves as the supervisor
// (`supervise` subcommand).
func Executable() (string, error) {
	if !mainCalled.Load() {
		return "", errors.New("this binary cannot serve as the sandbox's supervisor: its main does not call supervisor.Main")
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary (the sandbox's supervisor): %w", err)
	}
	return exe, nil
}
