//go:build !unix

package supervisor

import (
	"context"
	"errors"
	"os/exec"
)

// StartProcess: a supervisor runs on Unix only.
func StartProcess(ctx context.Context, cmd *exec.Cmd, session bool) (*Conn, error) {
	return nil, errors.New("bash needs a Unix host (or the kubernetes provider) for now")
}
