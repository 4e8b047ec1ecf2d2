package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	units "github.com/docker/go-units"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cmdenv"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/replicas"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/threads"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Labels on every container of ours.
const (
	labelManaged = "sandbox-mcp.managed"
	labelThread  = "sandbox-mcp.thread"
	labelState   = "sandbox-mcp.state"
	labelPrefix  = "sandbox-mcp.prefix"
	labelSpec    = "sandbox-mcp.spec" // the settings it was made with (specTag)
)

// engine is the part of the Docker client the provider uses.
type engine interface {
	Ping(ctx context.Context) (types.Ping, error)
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerRestart(ctx context.Context, id string, opts container.StopOptions) error
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	DaemonHost() string
	Info(ctx context.Context) (system.Info, error)
	Close() error
}

var _ engine = (*client.Client)(nil)

// Provider hands out container-backed sandboxes.
type Provider struct {
	cfg      Config
	cli      engine
	log      *slog.Logger
	stateTag string // labels our containers with the state dir they serve
	memory   int64
	env      []string           // every command's environment, KEY=VALUE (envList)
	bin      *supervisor.Binary // the supervisor, bound into every container as its main process
	channel  string             // channelSocket or channelExec (docker.channel resolved)

	// Known once connect succeeded (connected), which may be after New.
	connectMu  sync.Mutex
	connected  atomic.Bool
	connecting *attempt // the attempt to connect in flight, if any (connectMu)
	downErr    string   // why the engine did not answer (connectMu)
	pulling    string   // the image's pull in progress, in words; "" when none (connectMu)
	user       string   // the containers' user
	uid, gid   int      // that user's ids, -1 when unknown
	imageID    string   // the image's id, as it was when connect succeeded
	spec       string   // specTag

	threads threads.Table[*Sandbox] // acquired sandboxes
	boxes   *replicas.Table         // our containers, by name
	pool    *pool                   // docker.warm's boxes; nil without

	stop chan struct{}
	done chan struct{}
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the engine (DOCKER_HOST and friends from the
// environment, API version negotiated), checks the image, adopts the
// containers a previous run left, and starts the reaper.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("docker provider: no state dir")
	}
	setDefaults(&cfg)
	mem, err := units.RAMInBytes(cfg.Memory)
	if err != nil || mem <= 0 {
		return nil, fmt.Errorf("docker.memory %q: want a size like 512m or 1g", cfg.Memory)
	}
	if cfg.Locks == nil {
		if cfg.Locks, err = filelock.NewFileLocks(filepath.Join(cfg.StateDir, "locks")); err != nil {
			return nil, fmt.Errorf("docker provider: %w", err)
		}
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	p, err := newProvider(ctx, cfg, cli, mem)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return p, nil
}

func newProvider(ctx context.Context, cfg Config, cli engine, mem int64) (*Provider, error) {
	// The thread dirs hold what containers write, setuid programs
	// included: only the server's user may reach them (the engine's bind
	// mounts need no traversal rights on the host).
	threads := filepath.Join(cfg.StateDir, "threads")
	if err := os.MkdirAll(threads, 0o700); err != nil {
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	if err := os.Chmod(threads, 0o700); err != nil {
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	tag, err := stateTag(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("docker provider: state dir: %w", err)
	}
	channel, err := resolveChannel(cfg.Channel, cli.DaemonHost())
	if err != nil {
		return nil, err
	}
	bin, err := supervisorBinary(cfg.SupervisorBinary, cfg.Logger)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		cfg: cfg, cli: cli, log: cfg.Logger, memory: mem, env: envList(cfg), bin: bin, channel: channel,
		stateTag: tag,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	p.boxes = replicas.NewTable(replicas.TableConfig{Setting: "docker.replicas", Limit: cfg.Replicas, What: "docker provider: container",
		Lock: func(ctx context.Context, name string) (func(), error) {
			return p.cfg.Locks.Lock(ctx, "container\x00"+name)
		},
		Started: p.boxStarted})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.connect(pctx); errors.Is(err, errEngineDown) {
		// Serve anyway: each call says the engine is down, and the first
		// call after it is back connects.
		p.log.Warn("docker provider: engine not reachable; serving anyway, each call answers an error until it is back", "err", p.downReason())
	} else if errors.Is(err, errPulling) {
		// Serve meanwhile: calls wait for the pull (as long as each may).
		p.log.Info("docker provider: serving while the image is pulled; calls wait for it", "image", cfg.Image)
	} else if err != nil {
		return nil, err
	}
	if cfg.Warm > 0 {
		if p.pool, err = newPool(p, cfg.Warm); err != nil {
			return nil, err
		}
		go p.pool.run()
	}
	go p.reap()
	return p, nil
}

// errEngineDown: the engine does not answer.
var errEngineDown = errors.New("docker engine not reachable: the sandbox needs Docker running; call again once it is")

// attempt is one attempt to connect; err is set before done is closed.
type attempt struct {
	done chan struct{}
	err  error
}

// connect does, once it succeeds, what needs the engine before a thread's
// sandbox can be handed out (tryConnect). Calls that come while an attempt
// is in flight wait for that one rather than queue for one each, so that
// with the engine hung each answers within one attempt's time limit. The
// attempt is not the caller's: a call that ends (ctx) stops waiting, the
// attempt goes on for the others. It returns errEngineDown while the
// engine does not answer (also when ctx's deadline passes first), and
// errPulling when ctx's deadline passes while the image is being pulled.
func (p *Provider) connect(ctx context.Context) error {
	if p.connected.Load() {
		return nil
	}
	p.connectMu.Lock()
	if p.connected.Load() {
		p.connectMu.Unlock()
		return nil
	}
	a := p.connecting
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		p.connecting = a
		go func() {
			err := p.tryConnect()
			p.connectMu.Lock()
			a.err = err
			p.connecting = nil
			p.connectMu.Unlock()
			close(a.done)
		}()
	}
	p.connectMu.Unlock()
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx.Err()
		}
		p.connectMu.Lock()
		defer p.connectMu.Unlock()
		if p.pulling != "" {
			// The engine answers; the image is on its way.
			return fmt.Errorf("docker provider: %w %s for its first use (%s so far); call again in a moment", errPulling, p.cfg.Image, p.pulling)
		}
		if p.downErr == "" {
			p.downErr = "no answer within the call's time"
		}
		return errEngineDown
	}
}

// tryConnect is one attempt to connect, for at most connectTimeout (a hung
// engine is a down one) or until Close: ping, the image (its user and
// architecture; pulled first when the engine lacks it, for as long as that
// takes), and the containers an earlier run of this state dir left.
// It returns errEngineDown (the cause, which may name host paths, is
// logged and kept in downErr) while the engine does not answer. One
// attempt runs at a time (connect); what it sets is read once connected.
func (p *Provider) tryConnect() error {
	cfg := p.cfg
	ctx, cancel := p.attemptContext(p.cfg.connectTimeout)
	defer func() { cancel() }()
	if _, err := p.cli.Ping(ctx); err != nil {
		p.connectMu.Lock()
		p.downErr = strings.ReplaceAll(err.Error(), "\n", " ")
		p.connectMu.Unlock()
		return errEngineDown
	}
	img, err := p.cli.ImageInspect(ctx, cfg.Image)
	if cerrdefs.IsNotFound(err) {
		if cfg.Pull == PullNever {
			return missingError(cfg.Image)
		}
		// A pull takes what it takes: not bounded by connectTimeout
		// (the engine answered), only by Close and a generous cap.
		pctx, pcancel := p.attemptContext(30 * time.Minute)
		perr := p.pullImage(pctx, cfg.Image, 3*time.Second)
		pcancel()
		if perr != nil {
			if e := engineError(perr); errors.Is(e, errEngineDown) {
				return e
			}
			return pullError(cfg.Image, perr)
		}
		cancel()
		ctx, cancel = p.attemptContext(p.cfg.connectTimeout)
		img, err = p.cli.ImageInspect(ctx, cfg.Image)
	}
	if err != nil {
		return fmt.Errorf("docker provider: image %s: %w", cfg.Image, engineError(err))
	}
	var imageUser string
	if img.Config != nil {
		imageUser = img.Config.User
	}
	if err := p.bin.CheckArch(img.Architecture); err != nil {
		return fmt.Errorf("docker provider: image %s: %w", cfg.Image, err)
	}
	p.user, p.uid, p.gid = containerUser(cfg.User, imageUser, os.Geteuid(), os.Getegid())
	switch {
	case p.uid == 0:
		p.log.Warn("docker provider: containers run as root (docker.user: root): files they write in the thread dirs, setuid ones too, belong to root on the host", "user", p.user)
	case cfg.User == "" && isRootUser(imageUser):
		p.log.Info("docker provider: the image runs as root; containers run as a non-root user instead (set docker.user: root to keep root)", "image", cfg.Image, "user", p.user)
	}
	if cfg.Channel == "" || cfg.Channel == channelAuto {
		// A unix:// engine may still run in a VM (Docker Desktop for
		// Linux), where no socket crosses to the server.
		if info, err := p.cli.Info(ctx); err == nil && p.channel == channelSocket && strings.Contains(info.OperatingSystem, "Docker Desktop") {
			p.log.Info("docker provider: the engine is Docker Desktop's: its containers' supervisors are reached through exec (docker.channel: exec)")
			p.channel = channelExec
		}
	}
	p.imageID = img.ID
	p.spec = p.specTag()
	if err := p.adopt(ctx); err != nil {
		return err
	}
	p.connectMu.Lock()
	if p.downErr != "" {
		p.log.Info("docker provider: engine reachable again")
		p.downErr = ""
	}
	p.connectMu.Unlock()
	p.connected.Store(true)
	return nil
}

// attemptContext is the context of one step of an attempt to connect: it
// ends after d, or when the provider closes.
func (p *Provider) attemptContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// downReason is why the engine last did not answer.
func (p *Provider) downReason() string {
	p.connectMu.Lock()
	defer p.connectMu.Unlock()
	return p.downErr
}

// defaultUser is the containers' user when the image's is root and
// docker.user does not say root: the base image's sandbox user, the
// kubernetes provider's default uid.
const defaultUser = "1000:1000"

// containerUser is the user containers run as, and its uid and gid (-1
// when it is a name other than root):
//   - a server that is not root cannot hand the thread's files to another
//     uid: its own uid and gid;
//   - docker.user when set (root only this way);
//   - else the image's user, unless that is root (or unset, or group root):
//     then defaultUser. A user without a group gets gid = uid, never the
//     root group the engine would give a uid the image's passwd lacks.
func containerUser(configured, image string, euid, egid int) (string, int, int) {
	if euid != 0 {
		return fmt.Sprintf("%d:%d", euid, egid), euid, egid
	}
	u := configured
	if u == "" {
		u = image
		if isRootUser(u) {
			u = defaultUser
		}
	}
	uid, gid := numericUser(u)
	if uid >= 0 {
		u = fmt.Sprintf("%d:%d", uid, gid)
	}
	return u, uid, gid
}

// isRootUser: the user is root, or root's group ("", "root", "0", "0:0",
// "1000:0", "x:root").
func isRootUser(u string) bool {
	us, gs, _ := strings.Cut(u, ":")
	return us == "" || us == "root" || us == "0" || gs == "root" || gs == "0"
}

// numericUser parses "uid[:gid]" (gid = uid when absent); "root" is 0;
// other names give -1.
func numericUser(u string) (int, int) {
	if u == "" || u == "root" || u == "root:root" {
		return 0, 0
	}
	us, gs, hasGroup := strings.Cut(u, ":")
	uid, err := strconv.Atoi(us)
	if err != nil {
		return -1, -1
	}
	gid := uid
	if hasGroup {
		if gid, err = strconv.Atoi(gs); err != nil {
			return -1, -1
		}
	}
	return uid, gid
}

// Image is the image containers are made from.
func (p *Provider) Image() string { return p.cfg.Image }

// Network is the containers' network mode.
func (p *Provider) Network() string { return p.cfg.Network }

// Name is "docker".
func (p *Provider) Name() string { return "docker" }

// ContainerName is the container of a thread of the state dir with tag
// state (stateTag), made with the settings of tag spec (specTag):
// <prefix>-<first 16 hex of sha256(state, spec, thread)>. The state dir is
// in the hash so that two installs on one engine never meet at a name,
// whatever their threads and prefixes; the settings are, so that two
// servers on one state dir with different settings (user, image,
// environment, mounts, limits) each have their own container for a thread
// and never replace the other's while it runs a command, and so that a
// container made with other settings (docker.user: root since removed) is
// never used. 64 bits make an accidental collision of two names
// practically impossible (32 bits of sha256(thread) did not: t26821 and
// t49091 share them). A name is still never trusted alone: a container is
// a thread's only when its labels name that thread, state dir and settings
// (mine).
func ContainerName(prefix, state, spec, thread string) string {
	sum := sha256.Sum256([]byte(state + "\x00" + spec + "\x00" + thread))
	return prefix + "-" + hex.EncodeToString(sum[:8])
}

// stateTag identifies a state dir: the first 16 hex of sha256 of its
// absolute, symlink-resolved path, so that every server process on one
// state dir — however each was told its path — agrees on it.
func stateTag(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:8]), nil
}

// containerName is thread's container (once connected: p.spec is known).
func (p *Provider) containerName(thread string) string {
	return ContainerName(p.cfg.ContainerPrefix, p.stateTag, p.spec, thread)
}

func (p *Provider) ourFilters() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", labelManaged+"=true"),
		filters.Arg("label", labelState+"="+p.stateTag),
		filters.Arg("label", labelPrefix+"="+p.cfg.ContainerPrefix),
	)
}

// adopt finds the containers a previous run of this state dir left: running
// ones made with these settings are kept warm (their idle time starts
// now). The others — stopped, made with other settings (an earlier config,
// or another server's on this state dir), or under a name that is not
// theirs — are removed unless a command runs in them (leftUnlessBusy). It
// may run after New, on a call once the engine is back, while the reaper
// runs: what it found is added to p.boxes.
func (p *Provider) adopt(ctx context.Context) error {
	list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: p.ourFilters()})
	if err != nil {
		return fmt.Errorf("docker provider: list containers: %w", err)
	}
	kept := 0
	for _, c := range list {
		name := strings.TrimPrefix(firstName(c.Names), "/")
		if c.Labels[labelWarm] != "" && c.Labels[labelThread] == "" {
			if p.adoptWarm(ctx, c, name) {
				kept++
			}
			continue
		}
		key := c.Labels[labelThread]
		if c.State != "running" || sandbox.ValidThreadKey(key) != nil || name != p.boxName(key) || c.Labels[labelSpec] != p.spec {
			p.removeUnlessBusy(ctx, c)
			continue
		}
		p.boxes.Add(name, c.ID, key)
		kept++
	}
	if len(list) > 0 {
		p.log.Info("docker provider: found containers of an earlier run", "kept", kept, "found", len(list))
	}
	return nil
}

func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// removeUnlessBusy removes a container adopt does not keep, unless it runs
// and a command (an exec) is in flight in it: another server on this state
// dir, with other settings, may be running one there, and a command in
// flight is never killed. A container left so is looked at again by the
// next server start on this state dir (and its own server reaps it when it
// idles), so none is left behind for good.
func (p *Provider) removeUnlessBusy(ctx context.Context, c container.Summary) {
	if c.State == "running" {
		info, err := p.cli.ContainerInspect(ctx, c.ID)
		switch {
		case cerrdefs.IsNotFound(err):
			return
		case err != nil:
			p.log.Warn("docker provider: inspect container", "id", shortID(c.ID), "err", err)
			return
		case len(info.ExecIDs) > 0 || p.supervisorBusy(ctx, strings.TrimPrefix(firstName(c.Names), "/")):
			p.log.Info("docker provider: container of other settings left alone: a command runs in it", "name", strings.TrimPrefix(firstName(c.Names), "/"))
			return
		}
	}
	p.remove(ctx, c.ID)
}

// supervisorBusy asks the supervisor of container name, if it answers,
// whether a command or a background job runs there (its hello says).
func (p *Provider) supervisorBusy(ctx context.Context, name string) bool {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var c *supervisor.Conn
	if p.channel == channelExec {
		var err error
		if c, err = p.relay(ctx, name, name); err != nil {
			return false
		}
	} else {
		nc, err := supervisor.DialSocket(filepath.Join(p.cfg.StateDir, "supervisors", name), socketName)
		if err != nil {
			return false
		}
		if c, err = supervisor.NewConn(ctx, nc, nc, nc); err != nil {
			return false
		}
	}
	defer c.Close()
	return c.Hello().Busy > 0
}

// remove force-removes container id. It is a cleanup: the call that asks
// may be canceled already (a client gone while its container started,
// which the engine starts all the same), and the container goes
// regardless, within 30 s — or it would run on, in no table, reaped by
// nobody.
func (p *Provider) remove(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		p.log.Warn("docker provider: remove container", "id", shortID(id), "err", err)
	}
}

func shortID(id string) string { return id[:min(12, len(id))] }

// reap removes containers unused for IdleTimeout, every few seconds. A
// container whose supervisor runs a job (or another server's command)
// counts as used.
func (p *Provider) reap() {
	defer close(p.done)
	if p.cfg.IdleTimeout < 0 {
		<-p.stop
		return
	}
	every := min(max(p.cfg.IdleTimeout/4, 100*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		for _, b := range replicas.Idle(p.boxes.Snapshot(), p.cfg.IdleTimeout) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if p.takeIdle(ctx, b) {
				p.log.Info("docker provider: idle container removed", "id", shortID(b.ID))
				p.remove(ctx, b.ID)
			}
			cancel()
		}
	}
}

// takeIdle forgets container b to remove it (replicas.Table.Take), unless
// it is in use: a call here, or its supervisor running something — a job,
// or a command of another server on the state dir.
func (p *Provider) takeIdle(ctx context.Context, b replicas.Box) bool {
	busy := p.supervisorBusy(ctx, b.Name)
	if ctx.Err() != nil {
		return false // the question was cut short: no answer, nothing taken
	}
	return p.boxes.Take(b, busy)
}

// Acquire returns the thread's sandbox, creating its directories; the
// container itself is made on first use (Exec, or a path of its own).
func (p *Provider) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return nil, err
	}
	if err := p.connect(ctx); err != nil {
		if errors.Is(err, errEngineDown) {
			p.log.Warn("docker provider: engine not reachable", "thread", thread, "err", p.downReason())
		}
		return nil, err
	}
	return p.threads.Acquire(thread, func() (*Sandbox, func(), error) {
		// A new thread takes a warm box when there is one: its
		// directories become the thread's.
		p.pool.claim(thread)
		// The container's user owns the thread's files; the file tools' new
		// files inherit it (hostfs.FS).
		mounts, err := sandbox.ThreadMounts(p.cfg.StateDir, thread, p.cfg.SkillsDir, p.cfg.Mounts, p.uid, p.gid)
		if err != nil {
			return nil, nil, fmt.Errorf("thread %s: %w", thread, err)
		}
		hfs, err := hostfs.Open(mounts, p.cfg.Locks)
		if err != nil {
			return nil, nil, fmt.Errorf("open thread %s: %w", thread, err)
		}
		sb := &Sandbox{p: p, key: thread, name: p.boxName(thread), mounts: mounts}
		sb.Sandbox = supervised.New(sb, supervised.Config{Thread: thread, Mounts: mounts, Host: hfs, Image: p.cfg.Image,
			Egress: p.cfg.Egress, Name: sb.name, Provider: p.Name(), Checkpoints: supervised.HostCheckpoints(p.cfg.StateDir, thread)})
		// Close ends the channel; the supervisor and its container stay warm.
		return sb, sb.Close, nil
	})
}

// boxStarted tells the metrics and the call's trace of a container made
// or started for a call.
func (p *Provider) boxStarted(ctx context.Context, began time.Time) {
	supervised.BoxStarted(ctx, p.cfg.Metrics, p.Name(), began)
}

// RunningBoxes is how many containers this server knows running (the
// server's metrics: its own table, no call to the engine).
func (p *Provider) RunningBoxes() int { return p.boxes.Running() }

// Release drops one user of the thread's sandbox. The container stays warm.
func (p *Provider) Release(thread string) { p.threads.Release(thread) }

// Exists says whether the thread has a directory under the state dir.
func (p *Provider) Exists(_ context.Context, thread string) (bool, error) {
	return sandbox.ThreadExists(p.cfg.StateDir, thread)
}

// Discard ends the thread for good, whatever idle_timeout says: its
// container is removed now, and every process in it — its jobs too — ends
// with it (SPEC §16: an anonymous thread takes its processes with it);
// then its files go (<state>/threads/<key>). The server calls it when a
// thread no one can name again ends. Every container labelled with the
// thread on this state dir goes, this server's and any made with other
// settings. A thread without a container is no error. It takes the
// thread's creation lock, so a first use racing it makes no container
// behind it; one that comes after it makes a new one, as for any thread.
// A user still holding the thread (its last Release under way) is left
// alone: only its container and files go.
func (p *Provider) Discard(ctx context.Context, thread string) error {
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return err
	}
	if err := p.connect(ctx); err != nil {
		return err
	}
	name := p.boxName(thread)
	unlock, err := p.cfg.Locks.Lock(ctx, "container\x00"+name)
	if err != nil {
		return err
	}
	defer unlock()
	p.boxes.Forget(name, "")
	f := p.ourFilters()
	f.Add("label", labelThread+"="+thread)
	list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return engineError(err)
	}
	if name != p.containerName(thread) {
		// A warm box it claimed: its labels name no thread.
		if info, err := p.cli.ContainerInspect(ctx, name); err == nil && p.mine(info, name, thread) == nil {
			list = append(list, container.Summary{ID: info.ID, Names: []string{"/" + name}, Labels: map[string]string{labelThread: thread}})
		}
		os.Remove(filepath.Join(claimsDir(p.cfg.StateDir), name))
	}
	for _, c := range list {
		if c.Labels[labelThread] != thread {
			continue
		}
		if err := p.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return engineError(err)
		}
		p.log.Info("docker provider: container removed (thread discarded)", "name", strings.TrimPrefix(firstName(c.Names), "/"), "id", shortID(c.ID))
	}
	// Its supervisor's run directory (socket channel): a container made
	// for the thread after this makes it again.
	os.RemoveAll(filepath.Join(p.cfg.StateDir, "supervisors", name))
	if err := sandbox.RemoveThread(p.cfg.StateDir, thread); err != nil {
		return fmt.Errorf("docker provider: thread %s: %w", thread, err)
	}
	return nil
}

// Close stops the reaper and, with RemoveOnExit, removes this server's
// containers; otherwise they stay warm for the next run to adopt.
func (p *Provider) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop) // also ends an attempt to connect
		<-p.done
	}
	p.connectMu.Lock()
	a := p.connecting
	p.connectMu.Unlock()
	if a != nil {
		<-a.done
	}
	p.threads.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.pool != nil {
		p.pool.close(ctx)
	}
	var gone []replicas.Box
	if p.cfg.RemoveOnExit {
		gone = p.boxes.Clear()
	}
	for _, b := range gone {
		p.remove(ctx, b.ID)
	}
	return p.cli.Close()
}

// ensure returns the id of the thread's running container, making or
// starting it, and marks it busy until done is called
// (replicas.Table.Ensure). Concurrent first uses of a thread — in this
// process or another on the same state dir — make one container: creation
// holds the thread's lock (an flock). A container about to be made or
// started is admitted under Replicas: the least recently used of the
// others goes (replicas.MakeRoom: never a container in use — a call in
// flight, a job or command running — nor, for another token, one within
// that token's share); when nothing may go the error is a
// *replicas.FullError naming docker.replicas.
func (p *Provider) ensure(ctx context.Context, name, key string, mounts []sandbox.Mount) (id string, done func(), err error) {
	claimed := false // the box admitted is a claimed warm one: it runs already
	start := func(admit func() error) (string, error) {
		return p.startContainer(ctx, name, key, mounts, func(claim bool) error { claimed = claim; return admit() })
	}
	id, done, err = p.boxes.Ensure(ctx, name, key, start, replicas.Room{Take: func(b replicas.Box) bool {
		if !p.takeIdle(ctx, b) {
			return false
		}
		p.log.Info("docker provider: least recently used container removed (replicas)", "id", shortID(b.ID), "for", name)
		if claimed && p.pool != nil {
			p.pool.evict(b.ID) // the claim's call does not wait for it
		} else {
			p.remove(ctx, b.ID)
		}
		return true
	}})
	if errors.Is(err, replicas.ErrFull) {
		p.log.Info("docker provider: no container may go to make room (replicas)", "name", name, "replicas", p.cfg.Replicas)
	}
	return id, done, err
}

// startContainer finds the thread's container by name or makes it, and
// makes sure it runs. admit is called before a container is made or
// started (not for one found running), with claim for a claimed warm box
// (running already): its error is the call's.
func (p *Provider) startContainer(ctx context.Context, name, key string, mounts []sandbox.Mount, admit func(claim bool) error) (string, error) {
	if id, ok := p.pool.take(name); ok {
		// Just claimed, known running and answering: it counts under the
		// cap from now on. (Gone since, the dial finds out and comes back.)
		if err := admit(true); err != nil {
			return "", err
		}
		return id, nil
	}
	for attempt := 0; ; attempt++ {
		info, err := p.cli.ContainerInspect(ctx, name)
		switch {
		case err == nil:
			if err := p.mine(info, name, key); err != nil {
				return "", err
			}
			if info.State != nil && info.State.Running {
				if labels := info.Config.Labels; labels[labelWarm] != "" && labels[labelThread] == "" {
					// A warm box claimed: it counts under the cap now.
					if err := admit(true); err != nil {
						return "", err
					}
				}
				return info.ID, nil
			}
			if err := admit(false); err != nil {
				return "", err
			}
			if err := p.cli.ContainerStart(ctx, info.ID, container.StartOptions{}); err == nil {
				return info.ID, nil
			}
			p.remove(ctx, info.ID) // it cannot start: make it anew
			continue
		case !cerrdefs.IsNotFound(err):
			return "", engineError(err)
		}
		if err := admit(false); err != nil {
			return "", err
		}
		var run string // the socket's host directory; exec: none
		if p.channel == channelSocket {
			if run, err = p.runDir(name); err != nil {
				return "", err
			}
		}
		resp, err := p.cli.ContainerCreate(ctx, p.containerConfig(key), p.hostConfig(mounts, run), nil, nil, name)
		if cerrdefs.IsConflict(err) && attempt < 5 {
			// Another creator got there first (the engine may answer 409
			// while inspect still says 404): look again.
			time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
			continue
		}
		if err != nil {
			return "", engineError(err)
		}
		if err := p.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			p.remove(ctx, resp.ID)
			return "", engineError(err)
		}
		p.log.Info("docker provider: container started", "name", name, "id", shortID(resp.ID))
		return resp.ID, nil
	}
}

// mine checks that a container found by name is thread key's sandbox of
// this state dir made with these settings: its labels, not its name, say
// whose it is. Anything else (another thread's container under a colliding
// name, another install's, one of other settings, a container that is not
// ours at all) is never used, and never removed here.
func (p *Provider) mine(info container.InspectResponse, name, key string) error {
	var labels map[string]string
	if info.Config != nil {
		labels = info.Config.Labels
	}
	switch {
	case labels[labelManaged] != "true":
		return fmt.Errorf("docker provider: container %s is not a sandbox-mcp sandbox; left alone, so this thread has no sandbox until it is removed or docker.container_prefix changed", name)
	case labels[labelState] != p.stateTag || labels[labelPrefix] != p.cfg.ContainerPrefix:
		return fmt.Errorf("docker provider: container %s belongs to another sandbox-mcp state dir; left alone, so this thread has no sandbox until it is removed or docker.container_prefix changed", name)
	case labels[labelThread] != key && !(labels[labelThread] == "" && labels[labelWarm] != "" && p.boxName(key) == name):
		// (A warm box is the thread's when the thread's record names it.)
		return fmt.Errorf("docker provider: container %s is another thread's sandbox (its label names another thread); it is never used for this thread", name)
	case labels[labelSpec] != p.spec:
		return fmt.Errorf("docker provider: container %s was made with other settings (its %s label differs); left alone, so this thread has no sandbox until it is removed or docker.container_prefix changed", name, labelSpec)
	}
	return nil
}

// containerConfig is the container of thread key. Its main process (under
// the engine's init) is the supervisor, listening on its socket in the
// bound run directory, whatever the image's ENTRYPOINT and CMD (a stock
// image's CMD is often a shell or python3 that exits at once without a
// terminal): it keeps the container up and runs its commands.
func (p *Provider) containerConfig(key string) *container.Config {
	return &container.Config{
		Entrypoint: p.bin.Argv("supervise", "--listen", runDir+"/"+socketName),
		Image:      p.cfg.Image,
		User:       p.user,
		WorkingDir: sandbox.WorkspaceDir,
		Env:        p.env,
		Labels: map[string]string{
			labelManaged: "true",
			labelThread:  key,
			labelState:   p.stateTag,
			labelPrefix:  p.cfg.ContainerPrefix,
			labelSpec:    p.spec,
		},
	}
}

// specTag is 16 hex of sha256 of every setting a container is made with
// but its thread's own directories: the image (by id), user, entrypoint,
// environment, limits, network, runtime, skills dir, custom mounts and the
// supervisor binary (a server upgraded since runs its own in new ones). It
// is in the container's name (ContainerName) and label: a container made
// with other settings (the config or the image changed since — e.g.
// docker.user: root removed — or another server's on this state dir) is
// never used.
func (p *Provider) specTag() string {
	c := p.containerConfig("")
	c.Labels = nil
	b, _ := json.Marshal(struct {
		Image      string
		C          *container.Config
		H          *container.HostConfig
		Skills     string
		Mounts     []sandbox.Mount
		Supervisor string
	}{p.imageID, c, p.hostConfig(nil, ""), p.cfg.SkillsDir, p.cfg.Mounts, p.bin.Sums})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// hostConfig is how a container runs: the thread's mounts, the
// supervisor's binary (read-only) and its run directory (socket channel:
// bound from runHost, "" in specTag, which hashes the settings; exec: a
// tmpfs), hardened.
func (p *Provider) hostConfig(mounts []sandbox.Mount, runHost string) *container.HostConfig {
	var ms []mount.Mount
	for _, m := range mounts {
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: m.Host, Target: m.Virtual, ReadOnly: m.ReadOnly})
	}
	for _, m := range p.bin.Mounts() {
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: m.Host, Target: m.Target, ReadOnly: true})
	}
	var tmpfs map[string]string
	switch {
	case p.channel == channelExec:
		// The socket in a directory of the container's own, private to its
		// user (every command runs as that user too: a command can reach
		// it, as it can the socket's bound directory in socket mode).
		opts := "mode=1777"
		if p.uid >= 0 {
			opts = fmt.Sprintf("mode=0700,uid=%d,gid=%d", p.uid, p.gid)
		}
		tmpfs = map[string]string{runDir: opts + ",size=64k"}
	case runHost != "":
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: runHost, Target: runDir})
	}
	init := true
	pids := p.cfg.PidsLimit
	return &container.HostConfig{
		Mounts:      ms,
		Tmpfs:       tmpfs,
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		NetworkMode: container.NetworkMode(p.cfg.Network),
		Init:        &init,
		Runtime:     p.cfg.Runtime,
		Resources: container.Resources{
			Memory:    p.memory,
			NanoCPUs:  int64(p.cfg.CPUs * 1e9),
			PidsLimit: &pids,
		},
	}
}

// envList is every command's environment beyond the image's own (see
// sandbox.CommandEnv: env_inherit, docker.environment), as KEY=VALUE, sorted.
func envList(cfg Config) []string {
	env := cmdenv.Of(cfg.EnvInherit, cfg.Environment)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// engineError says clearly that the engine failed, in one line.
func engineError(err error) error {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if client.IsErrConnectionFailed(err) || strings.Contains(msg, "Cannot connect to the Docker daemon") {
		// The cause names the engine's socket, a host path.
		return errEngineDown
	}
	return fmt.Errorf("docker engine: %s", msg)
}
