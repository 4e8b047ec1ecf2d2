package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// BenchmarkAutoCheckpoint measures what the automatic checkpoints
// (checkpoints.auto) cost a write_file call in a workspace of 10 000 files
// (100 directories of 100 files of 1 KiB): two servers alike but for
// checkpoints.auto, each on its own state dir, one call on each
// alternately so that the machine's drift falls on both; medians, and the
// difference per call. Between two calls, changed files are rewritten on
// disk (as a command would): 0 (only the call's own file changes) or 10.
//
//   - backtoback: the calls come back to back, so each waits for most of
//     the background save the one before started — the worst case;
//   - paced: 200 ms (untimed) between two calls, an agent's thinking: the
//     background save is done when the next call comes;
//   - save: the save itself, on the call's time, as when a job runs (every
//     call then saves first): the checkpoint tool's call on "on" against
//     write_file on "off".
//
// Run it with a state dir on a real disk (TMPDIR):
//
//	TMPDIR=/work/tmp go test -run '^$' -bench AutoCheckpoint -benchtime 100x -count 3 ./server/
func BenchmarkAutoCheckpoint(b *testing.B) {
	for _, c := range []struct {
		name    string
		changed int
		pace    time.Duration
		save    bool
	}{
		{"backtoback/changed=0", 0, 0, false},
		{"backtoback/changed=10", 10, 0, false},
		{"paced/changed=10", 10, 200 * time.Millisecond, false},
		{"save/changed=10", 10, 0, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			off := startCheckpointBench(b, false)
			on := startCheckpointBench(b, true)
			// The first save reads every file; then, once the files'
			// ctimes are older than the engine's racy window (a second),
			// the stat cache trusts them, as in a workspace an agent works
			// in (a file changed within the last second is read again).
			off.write(0)
			on.write(0)
			time.Sleep(1500 * time.Millisecond)
			for range 20 {
				off.write(0)
				on.write(0)
			}
			var tOff, tOn []time.Duration
			i := 0
			for b.Loop() {
				i++
				b.StopTimer()
				time.Sleep(c.pace)
				off.change(c.changed, i)
				on.change(c.changed, i)
				b.StartTimer()
				tOff = append(tOff, off.write(i))
				if c.save {
					tOn = append(tOn, on.checkpoint(i))
				} else {
					tOn = append(tOn, on.write(i))
				}
			}
			median := func(d []time.Duration) float64 {
				d = slices.Clone(d)
				slices.Sort(d)
				return float64(d[len(d)/2].Nanoseconds()) / 1e6
			}
			o, n := median(tOff), median(tOn)
			b.ReportMetric(o, "off-ms")
			b.ReportMetric(n, "on-ms")
			b.ReportMetric(n-o, "added-ms")
			// The "on" side took checkpoints (and "off" none).
			if on.checkpoints() < 2 || off.checkpoints() != 0 {
				b.Fatalf("checkpoints: on %d, off %d", on.checkpoints(), off.checkpoints())
			}
		})
	}
}

// ckptSide is one server of BenchmarkAutoCheckpoint.
type ckptSide struct {
	b     *testing.B
	ws    string
	store string
	send  func(string)
	recv  func()
	id    int
}

func startCheckpointBench(b *testing.B, auto bool) *ckptSide {
	state := b.TempDir()
	ws := filepath.Join(local.ThreadDir(state, "default"), "workspace")
	blob := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for d := range 100 {
		dir := filepath.Join(ws, fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.txt", f)), blob, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	p, err := local.New(local.Config{StateDir: state})
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state,
		Checkpoints: server.CheckpointsConfig{Auto: &auto}})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go srv.ServeStdio(ctx, "default", inR, outW)
	b.Cleanup(func() { cancel(); inW.Close(); srv.Close(); p.Close() })
	replies := bufio.NewReader(outR)
	s := &ckptSide{b: b, ws: ws, store: filepath.Join(state, "threads", "default", "checkpoints"),
		send: func(line string) {
			if _, err := io.WriteString(inW, line+"\n"); err != nil {
				b.Fatal(err)
			}
		},
		recv: func() {
			line, err := replies.ReadBytes('\n')
			if err != nil || bytes.Contains(line, []byte(`"isError":true`)) {
				b.Fatalf("%v %s", err, line)
			}
		}}
	s.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	s.recv()
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// change rewrites n files of the workspace on disk, as a command would.
func (s *ckptSide) change(n, round int) {
	for k := range n {
		name := filepath.Join(s.ws, fmt.Sprintf("d%02d", (round*7+k*13)%100), fmt.Sprintf("f%02d.txt", (round+k)%100))
		if err := os.WriteFile(name, fmt.Appendf(nil, "round %d file %d\n", round, k), 0o644); err != nil {
			s.b.Fatal(err)
		}
	}
}

// write is one write_file call; it answers how long it took.
func (s *ckptSide) write(round int) time.Duration {
	s.id++
	t := time.Now()
	s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"notes.txt","content":"round %d\n"}}}`, s.id, round))
	s.recv()
	return time.Since(t)
}

// checkpoint is one checkpoint call; it answers how long it took.
func (s *ckptSide) checkpoint(round int) time.Duration {
	s.id++
	t := time.Now()
	s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"checkpoint","arguments":{"message":"round %d"}}}`, s.id, round))
	s.recv()
	return time.Since(t)
}

// checkpoints counts the checkpoint files of the thread's store.
func (s *ckptSide) checkpoints() int {
	ents, _ := os.ReadDir(filepath.Join(s.store, "checkpoints"))
	return len(ents)
}
