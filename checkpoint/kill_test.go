//go:build linux || darwin || freebsd

package checkpoint

import (
	"bufio"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A save killed (SIGKILL) at a random point leaves a store that lists
// only whole checkpoints, each of which restores; its leftovers go, and
// saving and restoring go on.
func TestKillDuringSave(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	workspace(t, root, 1500)
	dir := t.TempDir()
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 1))
	midSave := 0
	const rounds = 6
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$")
		cmd.Env = append(os.Environ(), "CKPT_KILL_DIR="+dir, "CKPT_KILL_ROOT="+root, "CKPT_KILL_SEED="+strconv.Itoa(round))
		out, err := cmd.StdoutPipe()
		must(t, err)
		cmd.Stderr = os.Stderr
		must(t, cmd.Start())
		lines := make(chan string, 1000)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Let it save a few times, then kill it at a random moment.
		last, saved := "", 0
		deadline := time.After(2 * time.Minute)
		for saved < 2 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("round %d: the helper ended before it was killed", round)
				}
				if l == "end" {
					saved++
				}
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("round %d: the helper made no checkpoints", round)
			}
		}
		time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
		must(t, cmd.Process.Kill())
		cmd.Wait()
		for l := range lines {
			last = l
		}
		if last == "begin" {
			midSave++
		}

		// Only complete checkpoints are listed, and each restores.
		s, err := Open(dir, Options{})
		must(t, err)
		if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
			t.Errorf("round %d: %d temporary files left after Open", round, len(ents))
		}
		list, err := s.List(t.Context())
		must(t, err)
		if len(list) < 2*(round+1) {
			t.Fatalf("round %d: %d checkpoints listed", round, len(list))
		}
		for _, c := range list[max(0, len(list)-3):] {
			if err := s.Export(t.Context(), c.ID, filepath.Join(t.TempDir(), "x")); err != nil {
				t.Fatalf("round %d: checkpoint %s does not restore: %v", round, c.ID, err)
			}
		}
		checkObjects(t, dir)
		s.Close()
	}
	t.Logf("%d of %d kills landed during a save", midSave, rounds)

	s := openStore(t, dir, Options{})
	list, err := s.List(t.Context())
	must(t, err)
	first := list[0].ID
	want := filepath.Join(t.TempDir(), "want")
	must(t, s.Export(t.Context(), first, want))
	r, err := s.Save(t.Context(), root, SaveOptions{Message: "after the kills", Force: true})
	must(t, err)
	restore(t, s, root, first)
	sameSnap(t, "restore after the kills", snapshot(t, want), snapshot(t, root))
	restore(t, s, root, r.Info.ID)
	if _, err := s.Prune(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if n := checkObjects(t, dir); n == 0 {
		t.Error("prune removed the newest checkpoint's objects")
	}
	if list, _ := s.List(t.Context()); len(list) != 1 || list[0].ID != r.Info.ID {
		t.Errorf("after prune: %+v", list)
	}
}

// TestKillHelper is TestKillDuringSave's child: it saves the tree, with
// fsync, changing a few files before each save, until it is killed.
func TestKillHelper(t *testing.T) {
	dir, root := os.Getenv("CKPT_KILL_DIR"), os.Getenv("CKPT_KILL_ROOT")
	if dir == "" {
		return // run only by TestKillDuringSave
	}
	seed, _ := strconv.Atoi(os.Getenv("CKPT_KILL_SEED"))
	rng := mrand.New(mrand.NewPCG(uint64(seed), uint64(os.Getpid())))
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		for j := range 20 {
			d := filepath.Join(root, "workspace", "src", fmt.Sprintf("pkg%02d", rng.IntN(10)))
			os.WriteFile(filepath.Join(d, fmt.Sprintf("kill%d-%d-%d.txt", seed, i, j)), []byte(fmt.Sprint(rng.Int64())), 0o644)
		}
		big := make([]byte, 300<<10+rng.IntN(1<<20))
		for k := range big {
			big[k] = byte(rng.IntN(256))
		}
		os.WriteFile(filepath.Join(root, "outputs", "big.bin"), big, 0o644)
		fmt.Println("begin")
		if _, err := s.Save(t.Context(), root, SaveOptions{Message: "helper", Force: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("end")
	}
}
