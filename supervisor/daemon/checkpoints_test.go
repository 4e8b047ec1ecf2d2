//go:build linux

package daemon

import (
	"archive/tar"
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
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// ckptBox is a daemon keeping checkpoints of root in store, as a Pod's
// does, and one server replica's link to it.
type ckptBox struct {
	root, store string
	link        *client.Link
	k           *client.Checkpoints
}

func newCkptBox(t *testing.T) *ckptBox {
	t.Helper()
	base := t.TempDir()
	b := &ckptBox{root: filepath.Join(base, "user-data"), store: filepath.Join(base, "checkpoints")}
	for _, d := range []string{"workspace", "uploads", "outputs"} {
		if err := os.MkdirAll(filepath.Join(b.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := supervisortest.ListenArgs(t, "--checkpoints", b.store, "--user-data", b.root)
	b.link = client.NewLink(func(ctx context.Context) (*client.Conn, error) {
		s, err := client.DialSocket(dir, supervisortest.Socket)
		if err != nil {
			return nil, err
		}
		return client.NewConn(ctx, s, s, s)
	})
	t.Cleanup(b.link.Close)
	b.k = client.NewCheckpoints(b.link)
	return b
}

func write(t *testing.T, p, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func fillTree(t *testing.T, root string) {
	t.Helper()
	ws := filepath.Join(root, "workspace")
	write(t, filepath.Join(ws, "a.txt"), "hello\n", 0o644)
	write(t, filepath.Join(ws, "run.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(ws, "src", "deep", "x.go"), "package x\n", 0o600)
	write(t, filepath.Join(root, "uploads", "bin.dat"), string([]byte{0, 1, 2, 0xff, 0}), 0o644)
	write(t, filepath.Join(root, "uploads", "big.dat"), strings.Repeat("0123456789", 300_000), 0o644)
	for _, d := range []string{"empty", "locked"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(ws, "locked"), 0o500)
	os.Symlink("a.txt", filepath.Join(ws, "link"))
	os.Symlink("/etc/passwd", filepath.Join(ws, "link-out"))
	write(t, filepath.Join(root, "outputs", ".tool-results", "r.txt"), "saved result", 0o644)
}

// Save, list, changes, open, restore (rm -rf undone), and the restore
// undone, through the daemon.
func TestCheckpointsThroughTheDaemon(t *testing.T) {
	ctx := context.Background()
	b := newCkptBox(t)
	fillTree(t, b.root)
	want := testkit.Tree(t, b.root)

	res, err := b.k.Save(ctx, checkpoint.SaveOptions{Message: "first"}, 0)
	if err != nil || !res.Saved || res.Info.ID != "1" || res.Info.Message != "first" {
		t.Fatalf("Save: %+v %v", res, err)
	}
	if res, err := b.k.Save(ctx, checkpoint.SaveOptions{Message: "again"}, 0); err != nil || res.Saved {
		t.Fatalf("a save with nothing changed: %+v %v", res, err)
	}
	list, err := b.k.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "1" || list[0].Files != 5 {
		t.Fatalf("List: %+v %v", list, err)
	}

	// The agent's mistake.
	if err := os.Chmod(filepath.Join(b.root, "workspace", "locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(b.root, "workspace")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(b.root, "uploads", "new.txt"), "new", 0o644)
	broken := testkit.Tree(t, b.root)

	changes, err := b.k.Changes(ctx, "1", "")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]checkpoint.Kind{}
	for _, c := range changes {
		kinds[c.Path] = c.Kind
	}
	if kinds["workspace/a.txt"] != checkpoint.Deleted || kinds["uploads/new.txt"] != checkpoint.Added || kinds["outputs/.tool-results/r.txt"] != "" {
		t.Errorf("Changes: %v", kinds)
	}

	r, e, err := b.k.Open(ctx, "1", "workspace/src/deep/x.go")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(data) != "package x\n" || e.Size != int64(len(data)) || e.Mode != 0o600 {
		t.Fatalf("Open: %q %+v %v", data, e, err)
	}
	if r, _, err := b.k.Open(ctx, "1", "uploads/big.dat"); err != nil {
		t.Fatal(err)
	} else if data, err := io.ReadAll(r); err != nil || len(data) != 3_000_000 {
		t.Fatalf("Open of a large file: %d bytes, %v", len(data), err)
	}
	for _, bad := range []string{"../etc/passwd", "/etc/passwd", "workspace/nope", "workspace"} {
		if _, _, err := b.k.Open(ctx, "1", bad); err == nil {
			t.Errorf("Open(%q) worked", bad)
		} else if strings.Contains(err.Error(), b.root) || strings.Contains(err.Error(), b.store) {
			t.Errorf("Open(%q): the error names a path of the box: %v", bad, err)
		}
	}
	if _, _, err := b.k.Open(ctx, "9", "workspace/a.txt"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Open of no checkpoint: %v", err)
	}

	rr, err := b.k.Restore(ctx, "1", "before the restore", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Undo.ID != "2" || rr.Undo.Message != "before the restore" || len(rr.Changes) == 0 {
		t.Errorf("Restore: undo %+v, %d changes", rr.Undo, len(rr.Changes))
	}
	testkit.SameTree(t, "restored", want, testkit.Tree(t, b.root))

	// The restore undone.
	if _, err := b.k.Restore(ctx, rr.Undo.ID, "", 0); err != nil {
		t.Fatal(err)
	}
	testkit.SameTree(t, "the restore undone", broken, testkit.Tree(t, b.root))
	if _, err := b.k.Restore(ctx, "77", "", 0); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Restore of no checkpoint: %v", err)
	}
}

// Fork: a checkpoint exported from one box and imported into another's
// empty user-data.
func TestCheckpointExportImport(t *testing.T) {
	ctx := context.Background()
	a, b := newCkptBox(t), newCkptBox(t)
	fillTree(t, a.root)
	os.RemoveAll(filepath.Join(a.root, "outputs", ".tool-results"))
	want := testkit.Tree(t, a.root)
	if _, err := a.k.Save(ctx, checkpoint.SaveOptions{Message: "src"}, 0); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(a.k.Export(ctx, "1", pw)) }()
	info, err := b.k.Import(ctx, pr, "forked from a@1")
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "1" || info.Message != "forked from a@1" || info.Files != 5 {
		t.Errorf("Import: %+v", info)
	}
	testkit.SameTree(t, "forked", want, testkit.Tree(t, b.root))

	// Not again: user-data holds files now.
	var buf bytes.Buffer
	if err := a.k.Export(ctx, "1", &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := b.k.Import(ctx, bytes.NewReader(buf.Bytes()), "again"); !errors.Is(err, checkpoint.ErrNotEmpty) {
		t.Errorf("Import into a tree with files: %v", err)
	}
	if err := a.k.Export(ctx, "5", io.Discard); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Export of no checkpoint: %v", err)
	}

	// A hostile stream: refused, nothing written.
	c := newCkptBox(t)
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "workspace/ok", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("ok"))
	tw.WriteHeader(&tar.Header{Name: "../../escaped", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	before := testkit.Tree(t, filepath.Dir(c.root))
	if _, err := c.k.Import(ctx, &evil, "evil"); !errors.Is(err, checkpoint.ErrBadArchive) {
		t.Errorf("Import of a hostile stream: %v", err)
	}
	after := testkit.Tree(t, filepath.Dir(c.root))
	for p := range after {
		if strings.HasPrefix(p, "checkpoints") {
			delete(after, p) // the store's own files
		}
	}
	testkit.SameTree(t, "after a hostile import", before, after)

	// A stream cut short by its source: nothing restored.
	d := newCkptBox(t)
	cut := io.MultiReader(bytes.NewReader(buf.Bytes()[:buf.Len()-700]), errReader{errors.New("source failed")})
	if _, err := d.k.Import(ctx, cut, "cut"); err == nil {
		t.Errorf("Import of a stream that failed worked")
	}
	if _, err := os.Stat(filepath.Join(d.root, "workspace", "a.txt")); err == nil {
		t.Errorf("a failed import restored files")
	}
	if l, _ := d.k.List(ctx); len(l) != 0 {
		t.Errorf("a failed import left checkpoints: %+v", l)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A daemon started without a store keeps no checkpoints, and says so.
func TestNoCheckpoints(t *testing.T) {
	l := client.NewLink(listen(t))
	t.Cleanup(l.Close)
	k := client.NewCheckpoints(l)
	if _, err := k.Save(context.Background(), checkpoint.SaveOptions{}, 0); !errors.Is(err, client.ErrNoCheckpoints) {
		t.Fatalf("Save without a store: %v", err)
	}
	if _, err := k.List(context.Background()); !errors.Is(err, client.ErrNoCheckpoints) {
		t.Fatalf("List without a store: %v", err)
	}
}

// The daemon's flags: both or neither, clean absolute paths, apart.
func TestCheckpointFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "s", "--checkpoints", "/a"},
		{"--listen", "s", "--user-data", "/a"},
		{"--listen", "s", "--checkpoints", "rel", "--user-data", "/b"},
		{"--listen", "s", "--checkpoints", "/b/../c", "--user-data", "/b"},
		{"--listen", "s", "--checkpoints", "/data/user/ckpt", "--user-data", "/data/user"},
		{"--listen", "s", "--checkpoints", "/data", "--user-data", "/data/user"},
		{"--install", "/x", "--checkpoints", "/c", "--user-data", "/u"},
	} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("parseArgs(%q) took it", args)
		}
	}
	o, err := parseArgs([]string{"--listen", "s", "--checkpoints", "/c", "--user-data", "/u"})
	if err != nil || o.ckptDir != "/c" || o.userData != "/u" {
		t.Errorf("parseArgs: %+v %v", o, err)
	}
}

// A tampered store is refused: Restore fails with ErrCorrupt and leaves
// the tree alone; Open fails rather than hand out the tampered bytes.
func TestTamperedStoreRefused(t *testing.T) {
	ctx := context.Background()
	b := newCkptBox(t)
	write(t, filepath.Join(b.root, "workspace", "f"), "the original content", 0o644)
	if _, err := b.k.Save(ctx, checkpoint.SaveOptions{}, 0); err != nil {
		t.Fatal(err)
	}
	// A command in the box rewrites the object's bytes in place (the same
	// length), wherever the store keeps them: a file of its own, or a pack.
	n := 0
	filepath.WalkDir(b.store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Count(data, []byte("the original content")) == 1 {
				os.Chmod(p, 0o600)
				os.WriteFile(p, bytes.Replace(data, []byte("the original content"), []byte("the tampered content"), 1), 0o600)
				n++
			}
		}
		return nil
	})
	if n != 1 {
		t.Fatalf("%d objects tampered", n)
	}
	write(t, filepath.Join(b.root, "workspace", "f"), "changed since", 0o644)
	before := testkit.Tree(t, b.root)
	if _, err := b.k.Restore(ctx, "1", "", 0); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("Restore from a tampered store: %v", err)
	}
	// The restore saved the tree first (its undo), and changed nothing.
	testkit.SameTree(t, "after a refused restore", before, testkit.Tree(t, b.root))
	r, _, err := b.k.Open(ctx, "1", "workspace/f")
	if err == nil {
		data, rerr := io.ReadAll(r)
		r.Close()
		if rerr == nil || bytes.Contains(data, []byte("tampered")) && rerr == nil {
			t.Fatalf("Open of a tampered object read %q, %v", data, rerr)
		}
		if !errors.Is(rerr, checkpoint.ErrCorrupt) {
			t.Errorf("reading a tampered object: %v, want ErrCorrupt", rerr)
		}
	} else if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Open of a tampered object: %v", err)
	}
}

// Writes through the daemon (write_file's path) while checkpoints are
// saved lose nothing: every file ends as last written, and the next
// checkpoint holds exactly that.
func TestWritesDuringSaveLoseNothing(t *testing.T) {
	ctx := context.Background()
	b := newCkptBox(t)
	fsys := client.NewFS(b.link, nil)
	const files, rounds = 8, 15
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var saveErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.k.Save(ctx, checkpoint.SaveOptions{Auto: true}, 0); err != nil {
				saveErr = err
				return
			}
		}
	}()
	var wwg sync.WaitGroup
	for i := range files {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for r := range rounds {
				name := filepath.Join(b.root, "workspace", fmt.Sprintf("f%d", i))
				w, err := fsys.Create(ctx, name)
				if err == nil {
					_, err = fmt.Fprintf(w, "file %d round %d %s", i, r, strings.Repeat("x", r*1000))
					if cerr := w.Close(); err == nil {
						err = cerr
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wwg.Wait()
	close(stop)
	wg.Wait()
	if saveErr != nil {
		t.Fatal(saveErr)
	}
	res, err := b.k.Save(ctx, checkpoint.SaveOptions{Message: "after"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		want := fmt.Sprintf("file %d round %d %s", i, rounds-1, strings.Repeat("x", (rounds-1)*1000))
		if got, _ := os.ReadFile(filepath.Join(b.root, "workspace", fmt.Sprintf("f%d", i))); string(got) != want {
			t.Errorf("f%d lost its last write: %.30q", i, got)
		}
		r, _, err := b.k.Open(ctx, res.Info.ID, fmt.Sprintf("workspace/f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != want {
			t.Errorf("checkpoint %s holds f%d as %.30q", res.Info.ID, i, got)
		}
	}
	// Prune to a bound keeps the newest.
	res2, err := b.k.Save(ctx, checkpoint.SaveOptions{Message: "pruned", Force: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := b.k.List(ctx); err != nil || len(l) != 1 || l[0].ID != res2.Info.ID {
		t.Errorf("after a prune to 1 byte: %+v %v", l, err)
	}
	// A restore's undo checkpoint counts against the bound too.
	if err := os.WriteFile(filepath.Join(b.root, "workspace", "f0"), []byte("changed before the restore"), 0o644); err != nil {
		t.Fatal(err)
	}
	rr, err := b.k.Restore(ctx, res2.Info.ID, "undo", 1)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := b.k.List(ctx); err != nil || len(l) != 1 || l[0].ID != rr.Undo.ID {
		t.Errorf("after a restore bounded to 1 byte: %+v %v (undo %s)", l, err, rr.Undo.ID)
	}
}
