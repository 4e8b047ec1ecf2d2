package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The agent's files, made by its commands in the Pod.
const ckptScript = `set -e
cd /mnt/user-data/workspace
printf 'hello\n' > a.txt
printf '#!/bin/sh\necho hi\n' > run.sh; chmod 755 run.sh
mkdir -p src/deep empty locked; printf 'package x\n' > src/deep/x.go; chmod 600 src/deep/x.go
printf 'in locked' > locked/f; chmod 500 locked
ln -s a.txt link; ln -s /etc/passwd link-out
printf '\000\001\377binary\000' > /mnt/user-data/uploads/bin.dat
head -c 3000000 /dev/urandom > /mnt/user-data/uploads/big.dat
mkdir -p /mnt/user-data/outputs/.tool-results; echo saved > /mnt/user-data/outputs/.tool-results/r.txt
touch -d '2020-01-02 03:04:05.123456789' a.txt empty
`

// Checkpoints of a Pod's user-data, kept by its supervisor in the
// thread's volume: save, list, changes, open, restore (rm -rf undone,
// modes, symlinks, empty directories, binary), the restore undone; the
// store outlives the Pod, is not among the agent's paths, and a store a
// command tampered with is refused.
func TestCheckpointsInPod(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	thread := "ckpt-" + randomHex(4)
	sb := acquire(t, p, thread)
	ctx := t.Context()
	userData := filepath.Join(cfg.Storage.HostPath, "threads", thread, "user-data")
	if out, res := execOut(t, sb, ckptScript); res.ExitCode != 0 {
		t.Fatalf("making the files: %s", out)
	}
	want := testkit.Tree(t, userData)
	delete(want, "outputs/.tool-results")
	delete(want, "outputs/.tool-results/r.txt")

	res, err := sb.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "first"}, 0)
	if err != nil || !res.Saved || res.Info.ID != "1" {
		t.Fatalf("SaveCheckpoint: %+v %v", res, err)
	}
	// The store: in the thread's directory on the node, beside user-data,
	// not among the agent's paths.
	if _, err := os.Stat(filepath.Join(cfg.Storage.HostPath, "threads", thread, "checkpoints", "checkpoints", "1")); err != nil {
		t.Errorf("the checkpoint is not in the thread's volume: %v", err)
	}
	if out, _ := execOut(t, sb, "ls -A /mnt/user-data | tr '\\n' ' '"); out != "outputs uploads workspace " {
		t.Errorf("/mnt/user-data holds %q", out)
	}

	// The agent's mistake, through bash in the Pod.
	if out, res := execOut(t, sb, "chmod 755 /mnt/user-data/workspace/locked && rm -rf /mnt/user-data/workspace/* && echo new > /mnt/user-data/uploads/new.txt"); res.ExitCode != 0 {
		t.Fatalf("rm -rf: %s", out)
	}
	broken := testkit.Tree(t, userData)
	changes, err := sb.CheckpointChanges(ctx, "1", "")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]checkpoint.Kind{}
	for _, c := range changes {
		kinds[c.Path] = c.Kind
	}
	if kinds["workspace/a.txt"] != checkpoint.Deleted || kinds["workspace/src/deep/x.go"] != checkpoint.Deleted || kinds["uploads/new.txt"] != checkpoint.Added {
		t.Errorf("changes: %v", kinds)
	}
	r, e, err := sb.OpenCheckpointFile(ctx, "1", "workspace/src/deep/x.go")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(data) != "package x\n" || e.Mode != 0o600 {
		t.Errorf("OpenCheckpointFile: %q %+v %v", data, e, err)
	}

	rr, err := sb.RestoreCheckpoint(ctx, "1", "before restoring 1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Undo.ID != "2" || rr.Undo.Message != "before restoring 1" {
		t.Errorf("undo %+v", rr.Undo)
	}
	got := testkit.Tree(t, userData)
	delete(got, "outputs/.tool-results")
	delete(got, "outputs/.tool-results/r.txt")
	testkit.SameTree(t, "restored", want, got)
	if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/a.txt; ./run.sh"); out != "hello\nhi\n" {
		t.Errorf("restored files in the Pod: %q", out)
	}

	// The restore undone.
	if _, err := sb.RestoreCheckpoint(ctx, rr.Undo.ID, "", 0); err != nil {
		t.Fatal(err)
	}
	testkit.SameTree(t, "the restore undone", broken, testkit.Tree(t, userData))

	// The store outlives the Pod (idle reap deletes Pods; the volume stays).
	zero := int64(0)
	if err := cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(ctx, sb.PodName(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the Pod to go", func() bool {
		_, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(ctx, sb.PodName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	list, err := sb.ListCheckpoints(ctx)
	if err != nil || len(list) != 3 || list[0].Message != "first" {
		t.Fatalf("ListCheckpoints in a new Pod: %+v %v", list, err)
	}

	// A command tampers with the store: the restore is refused, nothing
	// changes.
	if _, err := sb.RestoreCheckpoint(ctx, "1", "", 0); err != nil { // back to the files of 1
		t.Fatal(err)
	}
	// The object is a file of its own (objects/) or inside a pack
	// (packs/, the engine's layout since packs), the same length either way.
	tamper := `n=0; for f in $(find /.sandbox-mcp-checkpoints/objects -type f -size -11c); do if [ "$(tr -d '\000' < $f)" = "package x" ] && [ $(wc -c < $f) = 10 ]; then chmod u+w $f; printf 'package y\n' > $f; n=$((n+1)); fi; done 2>/dev/null; for f in $(find /.sandbox-mcp-checkpoints/packs -type f 2>/dev/null); do if grep -q 'package x' $f; then sed -i 's/package x/package y/' $f; n=$((n+1)); fi; done; echo $n`
	if out, res := execOut(t, sb, tamper); strings.TrimSpace(out) != "1" {
		t.Fatalf("tampering: %q %+v", out, res)
	}
	execOut(t, sb, "rm -rf /mnt/user-data/workspace/src")
	before := testkit.Tree(t, userData)
	if _, err := sb.RestoreCheckpoint(ctx, "1", "", 0); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a restore from a tampered store: %v", err)
	}
	testkit.SameTree(t, "after a refused restore", before, testkit.Tree(t, userData))
	if r, _, err := sb.OpenCheckpointFile(ctx, "1", "workspace/src/deep/x.go"); err == nil {
		data, err := io.ReadAll(r)
		r.Close()
		if err == nil || !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("reading a tampered file: %q %v", data, err)
		}
	}
}

// Fork: a checkpoint exported from one thread's Pod and imported into a
// new thread's; and writes through the Pod while checkpoints are saved
// lose nothing.
func TestCheckpointsForkAndConcurrentWrites(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	ctx := t.Context()
	a, b := "fork-a-"+randomHex(4), "fork-b-"+randomHex(4)
	sa := acquire(t, p, a)
	if out, res := execOut(t, sa, ckptScript+"rm -rf /mnt/user-data/outputs/.tool-results\n"); res.ExitCode != 0 {
		t.Fatalf("making the files: %s", out)
	}

	// Writers through the Pod (write_file's path) while saves run.
	const files, rounds = 6, 12
	stop := make(chan struct{})
	saves := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				saves <- nil
				return
			default:
			}
			if _, err := sa.SaveCheckpoint(ctx, checkpoint.SaveOptions{Auto: true}, 0); err != nil {
				saves <- err
				return
			}
		}
	}()
	content := func(i, r int) string { return fmt.Sprintf("file %d round %d %s", i, r, strings.Repeat("x", r*500)) }
	var wg sync.WaitGroup
	for i := range files {
		wg.Go(func() {
			for r := range rounds {
				writeFile(t, sa, fmt.Sprintf("%s/w%d.txt", sandbox.WorkspaceDir, i), []byte(content(i, r)))
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-saves; err != nil {
		t.Fatal(err)
	}
	// Forced, as the checkpoint tool saves: the last automatic save may
	// have stat'ed workspace/ between a writer's temporary file and its
	// rename, and a save that finds only a directory's time changed makes
	// no checkpoint (CI saw the fork's workspace/ 5 ms older than the
	// live one).
	res, err := sa.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "to fork", Force: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		name := fmt.Sprintf("workspace/w%d.txt", i)
		r, _, err := sa.OpenCheckpointFile(ctx, res.Info.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != content(i, rounds-1) {
			t.Errorf("checkpoint %s holds %s as %.40q: a write was lost", res.Info.ID, name, got)
		}
	}

	want := testkit.Tree(t, filepath.Join(cfg.Storage.HostPath, "threads", a, "user-data"))
	sbB := acquire(t, p, b)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sa.ExportCheckpoint(ctx, res.Info.ID, pw)) }()
	info, err := sbB.ImportCheckpoint(ctx, pr, "forked from "+a+"@"+res.Info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "1" || !strings.HasPrefix(info.Message, "forked from") {
		t.Errorf("imported %+v", info)
	}
	testkit.SameTree(t, "forked", want, testkit.Tree(t, filepath.Join(cfg.Storage.HostPath, "threads", b, "user-data")))
	if out, _ := execOut(t, sbB, "cat /mnt/user-data/workspace/a.txt; ls -l /mnt/user-data/workspace/link-out | grep -c passwd"); out != "hello\n1\n" {
		t.Errorf("the fork in its Pod: %q", out)
	}
	// Not into a thread with files.
	var buf bytes.Buffer
	if err := sa.ExportCheckpoint(ctx, res.Info.ID, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := sbB.ImportCheckpoint(ctx, &buf, "again"); !errors.Is(err, checkpoint.ErrNotEmpty) {
		t.Errorf("an import into a thread with files: %v", err)
	}
}

// pvc storage: a claim made before (its directories at its root, the
// user's) keeps working, and a new empty one gets its directories from
// the installer, the Pod user's, so that a restore sets their times.
func TestCheckpointsPVC(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	for _, existing := range []bool{true, false} {
		t.Run(fmt.Sprintf("existing=%v", existing), func(t *testing.T) {
			class := "smcp-ckpt-" + randomHex(4)
			dir := t.TempDir()
			os.Chown(dir, 1000, 1000)
			if existing {
				for _, d := range []string{"workspace", "uploads", "outputs"} {
					os.Mkdir(filepath.Join(dir, d), 0o755)
					os.Chown(filepath.Join(dir, d), 1000, 1000)
				}
				os.WriteFile(filepath.Join(dir, "workspace", "old.txt"), []byte("from before\n"), 0o644)
				os.Chown(filepath.Join(dir, "workspace", "old.txt"), 1000, 1000)
			}
			hostPathPV(t, t.Context(), cluster.cs, class, class, dir, nil)
			c := cfg
			c.PodPrefix = "t-" + randomHex(4)
			c.Storage = Storage{Mode: StoragePVC, StorageClass: class, Size: "1Gi"}
			t.Cleanup(func() {
				// Not t.Context(): it is canceled before the cleanups run.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cluster.cs.CoreV1().PersistentVolumeClaims(c.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labelPrefix + "=" + c.PodPrefix})
				cluster.cs.CoreV1().PersistentVolumes().Delete(ctx, class, metav1.DeleteOptions{})
			})
			p := newProviderT(t, c)
			sb := acquire(t, p, "pvc-"+randomHex(4))
			ctx := t.Context()
			if existing {
				if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/old.txt"); out != "from before\n" {
					t.Fatalf("an existing claim's file: %q", out)
				}
			}
			execOut(t, sb, "mkdir -p /mnt/user-data/workspace/d && echo one > /mnt/user-data/workspace/d/f")
			if _, err := sb.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "one"}, 0); err != nil {
				t.Fatal(err)
			}
			want := testkit.Tree(t, dir)
			execOut(t, sb, "rm -rf /mnt/user-data/workspace/* && touch /mnt/user-data/uploads/x")
			if _, err := sb.RestoreCheckpoint(ctx, "1", "", 0); err != nil {
				t.Fatal(err)
			}
			got := testkit.Tree(t, dir)
			for p := range got {
				if strings.HasPrefix(p, ckptSubPath) {
					delete(got, p)
				}
			}
			for p := range want {
				if strings.HasPrefix(p, ckptSubPath) {
					delete(want, p)
				}
			}
			testkit.SameTree(t, "restored in the claim", want, got)
			for _, d := range []string{"workspace", "uploads", "outputs", ckptSubPath} {
				fi, err := os.Stat(filepath.Join(dir, d))
				if err != nil {
					t.Fatal(err)
				}
				if uid := ownerUID(fi); uid != 1000 {
					t.Errorf("%s in the claim is owned by %d, not the Pod's user", d, uid)
				}
			}
		})
	}
}

func ownerUID(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// A thread that claimed a warm Pod keeps its checkpoints beside its
// user-data, in its own directory (the warm one renamed), and they
// outlive that Pod: a Pod made again for the thread finds them.
func TestCheckpointsWarmClaim(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	p := newProviderT(t, cfg)
	waitWarm(t, p, 1, true)
	thread := "wck-" + randomHex(4)
	sb := acquire(t, p, thread)
	ctx := t.Context()
	execOut(t, sb, "echo one > /mnt/user-data/workspace/f")
	if _, err := sb.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: "in a warm Pod"}, 0); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(filepath.Dir(p.threadDir(thread)), "checkpoints", "checkpoints", "1")
	if _, err := os.Stat(store); err != nil {
		t.Fatalf("the checkpoint is not in the thread's directory: %v", err)
	}
	zero := int64(0)
	if err := cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(ctx, sb.PodName(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the Pod to go", func() bool {
		_, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(ctx, sb.PodName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	execOut(t, sb, "echo two > /mnt/user-data/workspace/f")
	if _, err := sb.RestoreCheckpoint(ctx, "1", "", 0); err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/f"); out != "one\n" {
		t.Fatalf("restored in the Pod made again: %q", out)
	}
}
