package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ThreadDir is the host directory of a thread's user data:
// <stateDir>/threads/<key>/user-data (key: see ValidThreadKey).
func ThreadDir(stateDir, key string) string {
	return filepath.Join(stateDir, "threads", key, "user-data")
}

// ThreadMounts creates a thread's workspace, uploads and outputs on first
// use and returns every mount of its sandbox: those three read-write, the
// skills dir read-only (when set), then the custom mounts. When owner is
// given (uid >= 0) and the server runs as root, the three directories are
// handed to that uid:gid — the user the sandbox's commands run as.
func ThreadMounts(stateDir, key, skillsDir string, custom []Mount, uid, gid int) ([]Mount, error) {
	base := ThreadDir(stateDir, key)
	var mounts []Mount
	for _, d := range []string{WorkspaceDir, UploadsDir, OutputsDir} {
		host := filepath.Join(base, filepath.Base(d))
		if err := os.MkdirAll(host, 0o755); err != nil {
			return nil, fmt.Errorf("create thread: %w", errors.Unwrap(err))
		}
		if uid > 0 && os.Geteuid() == 0 {
			if err := os.Lchown(host, uid, gid); err != nil {
				return nil, fmt.Errorf("create thread: %w", errors.Unwrap(err))
			}
		}
		mounts = append(mounts, Mount{Virtual: d, Host: host})
	}
	if skillsDir != "" {
		mounts = append(mounts, Mount{Virtual: SkillsDir, Host: skillsDir, ReadOnly: true})
	}
	return append(mounts, custom...), nil
}
