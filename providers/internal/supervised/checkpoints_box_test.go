//go:build unix

package supervised

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// ckptHostBox is a hostBox whose supervisor keeps checkpoints of root in
// store (as a Pod's does), or none when store is "".
type ckptHostBox struct {
	*hostBox
	root, store string
}

func (b *ckptHostBox) Dial(ctx context.Context) (*supervisor.Conn, error) {
	args := []string{"supervise"}
	if b.store != "" {
		args = append(args, "--checkpoints", b.store, "--user-data", b.root)
	}
	cmd := exec.Command(daemonPath, args...)
	cmd.Dir = b.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.dir}
	return supervisor.StartProcess(ctx, cmd, true)
}

func newCkptSandbox(t *testing.T, withStore bool) (*Sandbox, *ckptHostBox) {
	t.Helper()
	base := t.TempDir()
	b := &ckptHostBox{hostBox: &hostBox{dir: base}, root: filepath.Join(base, "user-data")}
	if withStore {
		b.store = filepath.Join(base, "checkpoints")
	}
	for _, d := range []string{"workspace", "uploads", "outputs"} {
		if err := os.MkdirAll(filepath.Join(b.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := New(b, Config{Thread: "t1"})
	t.Cleanup(s.Close)
	return s, b
}

// A box's checkpoints go to its supervisor, each request inside Enter and
// its done, so that no reaper takes the box meanwhile; a box refused
// (Enter's error) is not asked.
func TestBoxCheckpointsEnterTheBox(t *testing.T) {
	t.Parallel()
	s, b := newCkptSandbox(t, true)
	ctx := t.Context()
	os.WriteFile(filepath.Join(b.root, "workspace", "a.txt"), []byte("one\n"), 0o644)
	steps := []struct {
		name string
		op   func() error
	}{
		{"save", func() error {
			res, err := s.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "m"}, 0)
			if err == nil && (res.Info.ID != "1" || !res.Saved) {
				err = errors.New("not saved")
			}
			return err
		}},
		{"list", func() error { _, err := s.ListCheckpoints(ctx); return err }},
		{"changes", func() error { _, err := s.CheckpointChanges(ctx, "1", ""); return err }},
		{"open", func() error {
			r, _, err := s.OpenCheckpointFile(ctx, "1", "workspace/a.txt")
			if err != nil {
				return err
			}
			defer r.Close()
			data, err := io.ReadAll(r)
			if err == nil && string(data) != "one\n" {
				err = errors.New("content " + string(data))
			}
			return err
		}},
		{"restore", func() error { _, err := s.RestoreCheckpoint(ctx, "1", "undo", 0); return err }},
		{"export", func() error { return s.ExportCheckpoint(ctx, "1", io.Discard) }},
	}
	for _, st := range steps {
		before, _, _ := b.counts()
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		entered, inside, _ := b.counts()
		if entered != before+1 || inside != 0 {
			t.Errorf("%s: entered %d times (before %d), %d still inside", st.name, entered, before, inside)
		}
	}

	// Fork into another box: an import, inside its Enter.
	s2, b2 := newCkptSandbox(t, true)
	var buf bytes.Buffer
	if err := s.ExportCheckpoint(ctx, "1", &buf); err != nil {
		t.Fatal(err)
	}
	info, err := s2.ImportCheckpoint(ctx, &buf, "fork")
	if err != nil || info.ID != "1" {
		t.Fatalf("import: %+v %v", info, err)
	}
	if data, _ := os.ReadFile(filepath.Join(b2.root, "workspace", "a.txt")); string(data) != "one\n" {
		t.Errorf("the fork holds %q", data)
	}
	if entered, inside, _ := b2.counts(); entered != 1 || inside != 0 {
		t.Errorf("import: entered %d, inside %d", entered, inside)
	}

	// Refused: never asked.
	refused := errors.New("no room (replicas)")
	b.mu.Lock()
	b.refuse = refused
	b.mu.Unlock()
	if _, err := s.ListCheckpoints(ctx); !errors.Is(err, refused) {
		t.Errorf("a refused box: %v", err)
	}
}

// A box whose supervisor keeps no checkpoints says errNoCheckpoints.
func TestBoxWithoutCheckpoints(t *testing.T) {
	t.Parallel()
	s, _ := newCkptSandbox(t, false)
	if _, err := s.SaveCheckpoint(t.Context(), checkpoint.SaveOptions{}, 0); !errors.Is(err, errNoCheckpoints) {
		t.Fatalf("save in a box without a store: %v", err)
	}
}
