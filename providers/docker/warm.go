package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/rename"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The warm pool (docker.warm: N, SPEC §11): N containers started, hardened
// and answering, made with this server's settings, that belong to no
// thread yet. A new thread's first use claims one instead of waiting for
// a container to be made and started.
//
// A container's bind mounts are fixed when it is made, so a box made before
// its thread cannot bind the thread's directories. Instead each warm box
// is made with user-data directories of its own, under
// <state>/warm/<pool>/<box>/user-data, bound at the virtual paths as a
// thread's are; a claim renames <state>/warm/<pool>/<box> to
// <state>/threads/<key>, so that those very directories (a bind mount
// follows its directory, not its path) become the thread's. Only a thread
// with no directory yet is claimed for — a thread that has files keeps
// them where they are, and its first use starts a container as before —
// so no file of the thread is ever moved, and nothing held open on the
// thread's directories (another server's file tools) is left behind. A
// box is used by one thread only, once: nothing of one thread ever
// reaches another through it.
//
// A claimed box keeps the name it was made with: the thread's directory
// records it (<state>/threads/<key>/box, beside user-data: out of the
// container's reach), and the provider names the thread's container by it
// from then on (boxName), a container made again for the thread after an
// idle one went included. Its labels name no thread (labels cannot change
// once a container is made): it is the thread's because the thread's
// record names it (mine), and a restarted server finds whose it is from
// <state>/warm/claims/<box> (adopt), written before the claim.
//
// Each server keeps its own pool, named at random and held by a lock
// (<state>/warm/<pool>/lock): a server starting on the state dir removes
// the unclaimed boxes of pools no live server holds, never another live
// server's; a server removes its own unclaimed boxes when it stops.

// labelWarm marks a warm box: its value is the pool that made it.
const labelWarm = "sandbox-mcp.warm"

// maxWarm bounds docker.warm.
const maxWarm = 64

// boxRecord is the file in a thread's directory naming its claimed box.
const boxRecord = "box"

type pool struct {
	p        *Provider
	size     int
	id       string   // this pool's name
	dir      string   // <state>/warm/<id>
	lock     *os.File // held while this server runs
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once // close
	mu       sync.Mutex
	ready    []warmBox         // started and answering, claimed by nobody
	claimed  map[string]string // claimed, not yet used: id by name
	evicting int               // containers being removed to make room for claimed boxes (evict)
	evicted  sync.Cond         // on mu: evicting went down
}

// warmBox is one box of the pool.
type warmBox struct {
	name, id string
}

// newPool makes this server's pool of size boxes (none yet: run fills it).
func newPool(p *Provider, size int) (*pool, error) {
	removeDeadPools(p.cfg.StateDir)
	b := make([]byte, 6)
	rand.Read(b)
	id := hex.EncodeToString(b)
	dir := filepath.Join(p.cfg.StateDir, "warm", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		if err = filelock.TryLock(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	w := &pool{p: p, size: size, id: id, dir: dir, lock: f,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.evicted.L = &w.mu
	return w, nil
}

// claimsDir holds, for each claimed box, the key of the thread that claimed it.
func claimsDir(stateDir string) string { return filepath.Join(stateDir, "warm", "claims") }

// run keeps the pool full: a box at a time, once the engine answers, and
// again after each claim. A box that cannot be made is tried again after a
// pause that grows, so a broken engine or image is not hammered.
func (w *pool) run() {
	defer close(w.done)
	pause := time.Second
	for {
		w.mu.Lock()
		short := len(w.ready) < w.size
		w.mu.Unlock()
		if short && w.p.connected.Load() {
			if err := w.fill(); err != nil {
				w.p.log.Warn("docker provider: a warm container could not be made", "err", err)
				select {
				case <-w.stop:
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, time.Minute)
				continue
			}
			pause = time.Second
			continue
		}
		wait := time.Hour
		if short { // the engine not reached yet: look again soon
			wait = time.Second
		}
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-time.After(wait):
		}
	}
}

// fill makes one box and adds it to the pool once its supervisor answers.
func (w *pool) fill() error {
	// Making and starting the container are never cut short (a create
	// cancelled midway may still make it, unknown to us): only the wait
	// for its supervisor ends when the server stops.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		select {
		case <-w.stop:
			wcancel()
		case <-wctx.Done():
		}
	}()
	b := make([]byte, 8)
	rand.Read(b)
	name := w.p.cfg.ContainerPrefix + "-warm-" + hex.EncodeToString(b)
	dir := filepath.Join(w.dir, name)
	mounts, err := sandbox.UserDataMounts(filepath.Join(dir, "user-data"), w.p.cfg.SkillsDir, w.p.cfg.Mounts, w.p.uid, w.p.gid)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	var run string
	if w.p.channel == channelSocket {
		if run, err = w.p.runDir(name); err != nil {
			os.RemoveAll(dir)
			return err
		}
	}
	cfg := w.p.containerConfig("")
	cfg.Labels[labelWarm] = w.id
	resp, err := w.p.cli.ContainerCreate(ctx, cfg, w.p.hostConfig(mounts, run), nil, nil, name)
	if err == nil {
		err = w.p.cli.ContainerStart(ctx, resp.ID, container.StartOptions{})
	}
	if err == nil {
		// Ready means answering: the claim's first call then only dials.
		sb := &Sandbox{p: w.p, name: name}
		connect := sb.connect
		if w.p.channel == channelExec {
			connect = sb.connectExec
		}
		c, cerr := connect(wctx, resp.ID)
		if cerr == nil {
			supervised.WarmShell(wctx, c)
			c.Close()
		}
		err = cerr
	}
	if err != nil {
		w.p.remove(ctx, name) // by name: a create that failed may have made it
		w.forget(name)
		return engineError(err)
	}
	w.mu.Lock()
	w.ready = append(w.ready, warmBox{name: name, id: resp.ID})
	w.mu.Unlock()
	w.p.log.Info("docker provider: warm container ready", "name", name, "id", shortID(resp.ID))
	return nil
}

// forget removes what the host keeps of box name: its directories, its
// supervisor's run directory, its claim.
func (w *pool) forget(name string) {
	os.RemoveAll(filepath.Join(w.dir, name))
	os.RemoveAll(filepath.Join(w.p.cfg.StateDir, "supervisors", name))
	os.Remove(filepath.Join(claimsDir(w.p.cfg.StateDir), name))
}

// claim hands a box of the pool to thread key, a thread with no directory
// yet, and returns its name; "" when the thread has a directory or the
// pool is empty (the thread's container is then made as without a pool).
func (w *pool) claim(key string) string {
	if w == nil {
		return ""
	}
	target := filepath.Join(w.p.cfg.StateDir, "threads", filepath.FromSlash(key))
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	w.mu.Lock()
	if len(w.ready) == 0 {
		w.mu.Unlock()
		w.refill()
		return ""
	}
	b := w.ready[0]
	w.ready = w.ready[1:]
	w.mu.Unlock()
	defer w.refill()
	// The claim, first where a restarted server looks for it; then the
	// thread's record in the box's directory, which the rename makes the
	// thread's — all at once: another server making the thread's
	// directory meanwhile either finds it whole or makes the rename fail.
	claims := claimsDir(w.p.cfg.StateDir)
	dir := filepath.Join(w.dir, b.name)
	err := os.MkdirAll(claims, 0o700)
	if err == nil {
		err = rename.Record(filepath.Join(claims, b.name), key, 0o600)
	}
	if err == nil {
		err = rename.Record(filepath.Join(dir, boxRecord), b.name, 0o600)
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(target), 0o700)
	}
	if err == nil {
		err = rename.NoReplace(dir, target)
	}
	if err != nil {
		// The box stays unclaimed; the thread is made without it.
		os.Remove(filepath.Join(claims, b.name))
		os.Remove(filepath.Join(dir, boxRecord))
		w.mu.Lock()
		w.ready = append(w.ready, b)
		w.mu.Unlock()
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			w.p.log.Warn("docker provider: a warm container could not be claimed", "err", err)
		}
		return ""
	}
	w.mu.Lock()
	if w.claimed == nil {
		w.claimed = map[string]string{}
	}
	w.claimed[b.name] = b.id
	w.mu.Unlock()
	w.p.log.Info("docker provider: warm container claimed", "name", b.name, "id", shortID(b.id))
	return b.name
}

// take returns the id of box name when it was just claimed here and not
// used yet: its first use needs not ask the engine.
func (w *pool) take(name string) (string, bool) {
	if w == nil {
		return "", false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := w.claimed[name]
	delete(w.claimed, name)
	return id, ok
}

// evict removes container id in the background: it went to make room under
// docker.replicas for a claimed box, which runs already, so that the
// claim's first call does not wait for the removal (50 ms and more). Until
// it is gone, one container more than docker.replicas runs (taken off the
// table: no call of its thread uses it); the pool's close waits for it
// (settle).
func (w *pool) evict(id string) {
	w.mu.Lock()
	w.evicting++
	w.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.p.remove(ctx, id)
		w.mu.Lock()
		w.evicting--
		w.evicted.Broadcast()
		w.mu.Unlock()
	}()
}

// settle waits for the removals evict began.
func (w *pool) settle() {
	w.mu.Lock()
	for w.evicting > 0 {
		w.evicted.Wait()
	}
	w.mu.Unlock()
}

// refill wakes run.
func (w *pool) refill() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Ready is how many boxes the pool holds now.
func (w *pool) Ready() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready)
}

// close stops filling and removes the boxes nobody claimed, and the pool.
func (w *pool) close(ctx context.Context) {
	w.once.Do(func() { w.closeOnce(ctx) })
}

func (w *pool) closeOnce(ctx context.Context) {
	close(w.stop)
	<-w.done
	w.settle()
	w.mu.Lock()
	ready := w.ready
	w.ready = nil
	w.mu.Unlock()
	for _, b := range ready {
		w.p.remove(ctx, b.id)
		w.forget(b.name)
	}
	os.RemoveAll(w.dir)
	w.lock.Close()
}

// boxName is the name of thread key's container: the box it claimed, as
// its record says, else ContainerName's.
func (p *Provider) boxName(key string) string {
	b, err := os.ReadFile(filepath.Join(p.cfg.StateDir, "threads", filepath.FromSlash(key), boxRecord))
	if err == nil {
		if name := strings.TrimSpace(string(b)); p.isWarmName(name) {
			return name
		}
	}
	return p.containerName(key)
}

// isWarmName says whether name is one a pool of this prefix gives.
func (p *Provider) isWarmName(name string) bool {
	rest, ok := strings.CutPrefix(name, p.cfg.ContainerPrefix+"-warm-")
	if !ok || len(rest) != 16 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// claimedBy is the thread that claimed warm box name, as the claim says
// and the thread's record confirms; "" for a box nobody claimed.
func (p *Provider) claimedBy(name string) string {
	if !p.isWarmName(name) {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(claimsDir(p.cfg.StateDir), name))
	if err != nil {
		return ""
	}
	key := strings.TrimSpace(string(b))
	if sandbox.ValidThreadKey(key) != nil || p.boxName(key) != name {
		return ""
	}
	return key
}

// adoptWarm decides on a warm box found at start-up (adopt): a claimed one
// is its thread's (kept when it runs with these settings); one nobody
// claimed is removed when its pool's server is gone, and left to that
// server otherwise.
func (p *Provider) adoptWarm(ctx context.Context, c container.Summary, name string) (kept bool) {
	if key := p.claimedBy(name); key != "" {
		if c.State == "running" && c.Labels[labelSpec] == p.spec {
			p.boxes.Add(name, c.ID, key)
			return true
		}
		p.removeUnlessBusy(ctx, c)
		return false
	}
	owner := c.Labels[labelWarm]
	if p.pool != nil && owner == p.pool.id {
		return false // ours: being made
	}
	if poolLive(p.cfg.StateDir, owner) {
		return false
	}
	if err := p.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		p.log.Warn("docker provider: remove container", "id", shortID(c.ID), "err", err)
		return false
	}
	os.RemoveAll(filepath.Join(p.cfg.StateDir, "supervisors", name))
	os.Remove(filepath.Join(claimsDir(p.cfg.StateDir), name))
	return false
}

// poolLive says whether a server holds pool id's lock.
func poolLive(stateDir, id string) bool {
	if id == "" || strings.ContainsAny(id, `/\.`) {
		return false
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "warm", id, "lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return filelock.TryLock(f) != nil
}

// removeDeadPools removes the directories of pools no server holds (their
// boxes went in adopt, or go when the engine is next reached).
func removeDeadPools(stateDir string) {
	ents, _ := os.ReadDir(filepath.Join(stateDir, "warm"))
	for _, e := range ents {
		if e.IsDir() && e.Name() != "claims" && !poolLive(stateDir, e.Name()) {
			os.RemoveAll(filepath.Join(stateDir, "warm", e.Name()))
		}
	}
}
