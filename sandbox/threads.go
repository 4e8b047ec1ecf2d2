package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The layout of the threads of the providers that keep them under the
// state dir (local, docker): <stateDir>/threads/<key>/user-data/{workspace,
// uploads,outputs}. It is theirs: the server never reads it (Provider's
// Exists and Discard answer for it).

// ThreadDir is the host directory of a thread's user data:
// <stateDir>/threads/<key>/user-data (key: see ValidThreadKey).
func ThreadDir(stateDir, key string) string {
	return filepath.Join(stateDir, "threads", key, "user-data")
}

// ThreadExists says whether the thread has a directory under the state dir
// (Provider.Exists).
func ThreadExists(stateDir, key string) (bool, error) {
	if err := ValidThreadKey(key); err != nil {
		return false, err
	}
	_, err := os.Lstat(filepath.Join(stateDir, "threads", filepath.FromSlash(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// RemoveThread removes the thread's directory under the state dir,
// confined there (os.Root: no symlink leads out); one not there is no
// error (Provider.Discard).
func RemoveThread(stateDir, key string) error {
	if err := ValidThreadKey(key); err != nil {
		return err
	}
	root, err := os.OpenRoot(filepath.Join(stateDir, "threads"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll(filepath.FromSlash(key))
}

// ThreadMounts creates a thread's workspace, uploads and outputs on first
// use and returns every mount of its sandbox: those three read-write, the
// skills dir read-only (when set), then the custom mounts. When owner is
// given (uid >= 0) and the server runs as root, the three directories are
// handed to that uid:gid — the user the sandbox's commands run as.
func ThreadMounts(stateDir, key, skillsDir string, custom []Mount, uid, gid int) ([]Mount, error) {
	return UserDataMounts(ThreadDir(stateDir, key), skillsDir, custom, uid, gid)
}

// UserDataMounts is ThreadMounts for the user-data directory base, wherever
// it is (the docker provider's warm boxes have theirs outside the threads
// until a thread claims one).
func UserDataMounts(base, skillsDir string, custom []Mount, uid, gid int) ([]Mount, error) {
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
