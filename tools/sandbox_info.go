package tools

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// sandbox_info (SPEC §19): the thread's provider, image, limits and use
// now, one line each and as facts. A number the sandbox cannot read is
// said to be not known, never made up.

func sandboxInfoTool() Tool {
	return newTool("sandbox_info", sandboxInfoArgs{}, sandboxInfo,
		mcp.WithDescription("Show this sandbox's limits and what it uses now: memory, processes, CPU time, disk of /mnt/user-data, jobs, "+
			"the network policy and allowlist, exposed ports, and the time left before an idle sandbox is stopped. "+
			"Use it before a large build or download, or to understand a command killed for running out of memory."),
		readOnly("Sandbox info"),
		withIcon("sandbox"),
		mcp.WithOutputSchema[InfoFacts](),
	)
}

type sandboxInfoArgs struct{}

// InfoFacts are sandbox_info's facts (structuredContent), and the
// resource sandbox://info's JSON. A nil part is not known here.
type InfoFacts struct {
	Provider  string        `json:"provider,omitempty" jsonschema_description:"The provider: local, docker, kubernetes."`
	Image     string        `json:"image,omitempty" jsonschema_description:"The sandbox's image (docker, kubernetes)."`
	Box       string        `json:"box,omitempty" jsonschema_description:"The box's name: a container's, a Pod's."`
	Cgroup    string        `json:"cgroup,omitempty" jsonschema_description:"The cgroup version the numbers come from: v1, v2."`
	Memory    *InfoMemory   `json:"memory,omitempty" jsonschema_description:"Memory, when known."`
	Processes *InfoCount    `json:"processes,omitempty" jsonschema_description:"Processes and threads, when known."`
	CPU       *InfoCPU      `json:"cpu,omitempty" jsonschema_description:"CPU time, when known."`
	Disk      *InfoDisk     `json:"disk,omitempty" jsonschema_description:"Bytes of files under /mnt/user-data, when known."`
	Jobs      *InfoCount    `json:"jobs,omitempty" jsonschema_description:"Jobs running, and the limit."`
	Network   InfoNetwork   `json:"network" jsonschema_description:"The network policy."`
	Ports     []ExposedPort `json:"ports" jsonschema_description:"The ports exposed with expose_port."`
	Idle      *InfoIdle     `json:"idle,omitempty" jsonschema_description:"The idle stop, where the provider stops idle sandboxes."`
}

// InfoMemory is memory in bytes; a limit of 0 is none.
type InfoMemory struct {
	Used     int64  `json:"used_bytes" jsonschema_description:"In use now (page cache included)."`
	Peak     *int64 `json:"peak_bytes,omitempty" jsonschema_description:"The most used, where known."`
	Limit    *int64 `json:"limit_bytes,omitempty" jsonschema_description:"The limit; 0: none."`
	OOMKills *int64 `json:"oom_kills,omitempty" jsonschema_description:"Processes killed for want of memory so far."`
}

// InfoCount is a count and its limit (0: none).
type InfoCount struct {
	Now   int64  `json:"now" jsonschema_description:"Now."`
	Limit *int64 `json:"limit,omitempty" jsonschema_description:"The limit; 0: none."`
}

// InfoCPU is CPU time used, in seconds, and the limit in CPUs.
type InfoCPU struct {
	User   *float64 `json:"user_seconds,omitempty" jsonschema_description:"User CPU time used, when known."`
	System *float64 `json:"system_seconds,omitempty" jsonschema_description:"System CPU time used, when known."`
	Limit  *float64 `json:"limit_cpus,omitempty" jsonschema_description:"CPUs' worth of time; 0: none."`
}

// InfoDisk is the bytes of user-data's files.
type InfoDisk struct {
	Bytes   int64 `json:"bytes" jsonschema_description:"The bytes of the files counted."`
	Files   int   `json:"files" jsonschema_description:"Entries counted."`
	AtLeast bool  `json:"at_least,omitempty" jsonschema_description:"The count stopped at its bound: there are more."`
}

// InfoNetwork is the network policy.
type InfoNetwork struct {
	Mode  string   `json:"mode" jsonschema_description:"none, allowlist or open."`
	Allow []string `json:"allow,omitempty" jsonschema_description:"The hosts allowlist lets through."`
}

// InfoIdle is the idle stop, in seconds.
type InfoIdle struct {
	Timeout float64 `json:"timeout_seconds" jsonschema_description:"idle_timeout: unused this long, the sandbox is stopped (its files stay)."`
	Left    float64 `json:"left_seconds" jsonschema_description:"What was left of it when this call came (the call is a use, and starts it afresh)."`
}

// Network is the sandboxes' network policy (SPEC §17) as the server was
// configured: sandbox_info tells it.
type Network struct {
	Mode  string   // none, allowlist or open; "": none
	Allow []string // allowlist's host patterns
}

// ExposedPort is a port exposed with expose_port.
type ExposedPort struct {
	Port int    `json:"port" jsonschema_description:"The port."`
	URL  string `json:"url,omitempty" jsonschema_description:"The URL that reaches it."`
}

func sandboxInfo(ctx context.Context, env *Env, _ sandboxInfoArgs) *Result {
	f, err := Info(ctx, env)
	if err != nil {
		return fail(err)
	}
	return structured(f.Text(), false, f)
}

// Info gathers the sandbox's facts (sandbox_info, and the resource
// sandbox://info).
func Info(ctx context.Context, env *Env) (InfoFacts, error) {
	f := InfoFacts{Network: InfoNetwork{Mode: env.Network.Mode, Allow: env.Network.Allow}, Ports: []ExposedPort{}}
	if f.Network.Mode == "" {
		f.Network.Mode = "none"
	}
	if r, ok := env.Sandbox.(sandbox.UsageReporter); ok {
		u, err := r.Usage(ctx)
		if err != nil {
			return InfoFacts{}, fmt.Errorf("the sandbox's use: %w", err)
		}
		f.Provider, f.Image, f.Box, f.Cgroup = u.Provider, u.Image, u.Box, u.Cgroup
		if u.MemoryBytes != nil {
			f.Memory = &InfoMemory{Used: *u.MemoryBytes, Peak: u.MemoryPeakBytes, Limit: u.MemoryMaxBytes, OOMKills: u.OOMKills}
		}
		if u.Pids != nil {
			f.Processes = &InfoCount{Now: *u.Pids, Limit: u.PidsMax}
		}
		if u.CPUUserSec != nil && u.CPUSystemSec != nil || u.CPULimit != nil {
			f.CPU = &InfoCPU{User: u.CPUUserSec, System: u.CPUSystemSec, Limit: u.CPULimit}
		}
		if u.DiskBytes != nil {
			f.Disk = &InfoDisk{Bytes: *u.DiskBytes, Files: u.DiskFiles, AtLeast: u.DiskCut}
		}
		if u.JobsRunning != nil {
			limit := int64(env.Limits.JobsMax)
			if limit == 0 {
				limit = MaxJobs
			}
			f.Jobs = &InfoCount{Now: int64(*u.JobsRunning), Limit: &limit}
		}
		if u.IdleLeft != nil {
			f.Idle = &InfoIdle{Timeout: u.IdleTimeout.Seconds(), Left: u.IdleLeft.Seconds()}
		}
	}
	if env.Previews != nil {
		ports, err := env.Previews.List(ctx)
		if err != nil {
			return InfoFacts{}, fmt.Errorf("exposed ports: %w", err)
		}
		f.Ports = append(f.Ports, ports...)
	}
	return f, nil
}

// Text is the facts one line each.
func (f InfoFacts) Text() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	notKnown := "not known (no cgroup)"
	if f.Cgroup != "" {
		notKnown = "not known (the " + f.Cgroup + " cgroup here does not count it)"
	}
	switch {
	case f.Provider == "":
		line("provider: not known")
	case f.Image != "":
		line("provider: %s (image %s, box %s)", f.Provider, f.Image, f.Box)
	case f.Box != "" && f.Box != f.Provider:
		line("provider: %s (box %s)", f.Provider, f.Box)
	default:
		line("provider: %s", f.Provider)
	}
	if m := f.Memory; m != nil {
		s := formatBytes(m.Used) + " in use"
		if m.Peak != nil {
			s += ", peak " + formatBytes(*m.Peak)
		}
		s += ", " + limitText(m.Limit, formatBytes)
		if m.OOMKills != nil && *m.OOMKills > 0 {
			s += fmt.Sprintf("; %d killed for want of memory", *m.OOMKills)
		}
		line("memory: %s", s)
	} else {
		line("memory: %s", notKnown)
	}
	if p := f.Processes; p != nil {
		line("processes: %d, %s", p.Now, limitText(p.Limit, func(n int64) string { return strconv.FormatInt(n, 10) }))
	} else {
		line("processes: %s", notKnown)
	}
	if c := f.CPU; c != nil {
		lim := "limit not known"
		if c.Limit != nil && *c.Limit > 0 {
			n := strconv.FormatFloat(math.Round(*c.Limit*100)/100, 'f', -1, 64)
			lim = "limit " + n + " CPUs"
			if n == "1" {
				lim = "limit 1 CPU"
			}
		} else if c.Limit != nil {
			lim = "no limit"
		}
		if c.User != nil && c.System != nil {
			line("cpu: %.2f s used (user %.2f s, system %.2f s), %s", *c.User+*c.System, *c.User, *c.System, lim)
		} else {
			line("cpu: time used %s, %s", notKnown, lim)
		}
	} else {
		line("cpu: %s", notKnown)
	}
	if d := f.Disk; d != nil {
		if d.AtLeast {
			line("disk (%s): ≥ %s in ≥ %d files (the count stopped there)", sandbox.UserDataDir, formatBytes(d.Bytes), d.Files)
		} else {
			line("disk (%s): %s in %d files", sandbox.UserDataDir, formatBytes(d.Bytes), d.Files)
		}
	} else {
		line("disk (%s): not known", sandbox.UserDataDir)
	}
	if j := f.Jobs; j != nil {
		line("jobs: %d running, at most %d", j.Now, *j.Limit)
	} else {
		line("jobs: not known")
	}
	switch {
	case f.Network.Mode == "allowlist" && len(f.Network.Allow) > 0:
		line("network: allowlist (%s)", strings.Join(f.Network.Allow, ", "))
	case f.Network.Mode == "allowlist":
		line("network: allowlist (no host listed)")
	default:
		line("network: %s", f.Network.Mode)
	}
	if len(f.Ports) == 0 {
		line("exposed ports: none")
	} else {
		var ps []string
		for _, p := range f.Ports {
			ps = append(ps, strings.TrimSpace(fmt.Sprintf("%d %s", p.Port, p.URL)))
		}
		line("exposed ports: %s", strings.Join(ps, ", "))
	}
	if i := f.Idle; i != nil {
		line("idle stop: in %s without use (idle_timeout %s; this call is a use)", roundDuration(i.Left), roundDuration(i.Timeout))
	} else if f.Provider != "" {
		line("idle stop: none (%s stops no idle sandbox)", f.Provider)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// limitText says a limit: "limit X", "no limit" (0) or "limit not known".
func limitText(limit *int64, format func(int64) string) string {
	switch {
	case limit == nil:
		return "limit not known"
	case *limit == 0:
		return "no limit"
	}
	return "limit " + format(*limit)
}

func roundDuration(sec float64) string {
	return time.Duration(sec * float64(time.Second)).Round(time.Second).String()
}

// formatBytes says a size: 4 GiB, 212.3 MiB, 512 B.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTP"[exp]) + "iB"
}
