package server

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// HTTPConfig is the http section of the configuration (SPEC §8, §10, §16)
// and what the HTTP transports are made of; the command embeds it as it
// is. Every setting is declared here once: its yaml key, its default (the
// default tag, taken by a number left 0) and its check (Validate refuses a
// negative number, naming the key). A new bound is one field.
type HTTPConfig struct {
	AuthTokens     []string `yaml:"auth_tokens"`     // bearer tokens; none: no auth (loopback only, checked by the command)
	AllowedOrigins []string `yaml:"allowed_origins"` // Origins allowed besides localhost ones
	// AllowedHosts are Host headers accepted, besides localhost ones, on
	// connections to a loopback address (DNS rebinding protection): the
	// names a reverse proxy on the same host forwards with (host or
	// host:port).
	AllowedHosts []string `yaml:"allowed_hosts"`
	// Stateless serves MCP 2026-07-28 besides the session-bearing
	// revisions (the default): a stateless request names its thread
	// (X-Thread-ID, or the thread argument every tool then takes) and any
	// replica serves it. False pins the session-bearing revisions: a modern
	// client negotiates a session.
	Stateless *bool `yaml:"stateless" default:"true"`
	// PublicURL is the server's URL as clients reach it (a reverse proxy's,
	// with its path: https://sandbox.example/mcp-server), under which
	// expose_port's previews are given (<public_url>/preview/<capability>/);
	// unset, the URL the tool call came to (its Host header).
	PublicURL string `yaml:"public_url"`
	// AnonymousThreads: "remove" (the default) or "keep" the files of a
	// session without X-Thread-ID when it ends (no one can name that
	// thread again).
	AnonymousThreads string `yaml:"anonymous_threads"`

	MaxBodyBytes   int64 `yaml:"max_body_bytes" default:"10485760"` // a request's body (10 MiB)
	MaxConnections int   `yaml:"max_connections" default:"2048"`    // open at once, and below the open-file limit; a few more are let in for /healthz only
	// MaxUnauthenticatedConnections caps, when tokens are configured, the
	// connections that have not shown a valid token (default: a sixteenth
	// of MaxConnections, at least 8): past it the oldest of them is closed,
	// and each is closed once answered (SPEC §16).
	MaxUnauthenticatedConnections int           `yaml:"max_unauthenticated_connections"`
	HeaderTimeout                 time.Duration `yaml:"header_timeout" default:"10s"`    // to read a request's headers
	BodyTimeout                   time.Duration `yaml:"body_timeout" default:"15s"`      // to read a request's body
	IdleTimeout                   time.Duration `yaml:"conn_idle_timeout" default:"30s"` // a kept-alive connection without a request is closed
	// MaxSessions caps the sessions open at once; more get 503. A
	// session's stream (SSE, or Streamable HTTP's GET) holds a connection
	// while it lives, so MaxConnections is above it by default.
	MaxSessions int `yaml:"max_sessions" default:"1000"`
	// MaxSessionsPerToken caps the sessions of one token, so that one
	// token cannot take every session from another (default: MaxSessions
	// shared out evenly among the tokens). Without tokens only MaxSessions
	// applies: every client is the same one.
	MaxSessionsPerToken int `yaml:"max_sessions_per_token"`
	// MaxBodyBytesInFlight caps the request bytes held at once, from
	// reading a body until its call answers (at least MaxBodyBytes a
	// token); MaxCalls the tool calls running at once. With several
	// tokens each token gets an even share of both. Beyond them a request
	// waits briefly, then gets 503 with Retry-After (a call over SSE,
	// already answered 202, gets a "server busy" error).
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight" default:"67108864"`
	MaxCalls             int   `yaml:"max_calls" default:"64"`

	// Not in the configuration file.
	SessionIdleTTL time.Duration `yaml:"-" default:"30m"` // Streamable HTTP sessions, and stateless leases, idle this long end
	DrainTimeout   time.Duration `yaml:"-" default:"10s"` // on shutdown, how long calls in flight may finish
}

// Bounds are the limits section's bounds of every tenant that the server
// enforces (SPEC §16), declared as HTTPConfig's are; the command's limits
// section embeds them. Unset takes the default; 0 is no limit.
type Bounds struct {
	// ThreadsPerToken caps the threads with a live sandbox per token
	// (without tokens: in all), sessions and stateless leases together;
	// 0: only the open-file budget's (fitFiles). Past it a new thread's
	// call is a tool error, once no idle lease of the token can make room.
	ThreadsPerToken *int `yaml:"threads_per_token" default:"32"`
}

// Validate trims the tokens, fills the defaults and refuses what cannot
// serve, with one line naming the key.
func (c *HTTPConfig) Validate() error {
	// An empty token (an unset variable) never turns auth off: it stops
	// start-up (SPEC §10).
	tokens := c.AuthTokens[:0:0]
	for i, t := range c.AuthTokens {
		if t = strings.TrimSpace(t); t == "" {
			return fmt.Errorf("http.auth_tokens[%d] is empty: an empty token would turn auth off", i)
		}
		tokens = append(tokens, t)
	}
	c.AuthTokens = tokens
	if err := settle("http", c); err != nil {
		return err
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return fmt.Errorf("http.public_url %q: want an http or https URL with a host and no query (https://sandbox.example)", c.PublicURL)
		}
		u.Path, u.RawPath = strings.TrimRight(u.Path, "/"), ""
		c.PublicURL = u.String()
	}
	switch c.AnonymousThreads {
	case "", "remove", "keep":
	default:
		return fmt.Errorf("http.anonymous_threads %q: want remove (the default) or keep", c.AnonymousThreads)
	}
	return nil
}

// Validate fills the defaults and refuses a negative bound, naming its key.
func (b *Bounds) Validate() error { return settle("limits", b) }

// settle gives the settings of a section (a pointer to a struct such as
// HTTPConfig) that are unset — a number 0, a pointer nil — or negative
// their default tag, and reports the first negative one, naming its key
// (prefix.yaml key). A number is an int, an int64 or a time.Duration (said
// in seconds); behind a pointer, 0 is set (no limit) and only nil unset.
func settle(prefix string, section any) error {
	v := reflect.ValueOf(section).Elem()
	var first error
	for i := range v.NumField() {
		f, n := v.Type().Field(i), v.Field(i)
		def, hasDefault := f.Tag.Lookup("default")
		unset, zero := n.IsZero(), "the default"
		if n.Kind() == reflect.Pointer {
			if unset && hasDefault {
				n.Set(reflect.New(f.Type.Elem()))
			}
			if n.IsNil() {
				continue
			}
			n, zero = n.Elem(), "no limit"
		}
		if n.Kind() == reflect.Bool {
			if unset && hasDefault {
				n.SetBool(def == "true")
			}
			continue
		}
		if n.Kind() != reflect.Int && n.Kind() != reflect.Int64 {
			continue
		}
		if n.Int() < 0 && first == nil {
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			val := strconv.FormatInt(n.Int(), 10)
			if n.Type() == durationType {
				val = strconv.FormatFloat(time.Duration(n.Int()).Seconds(), 'f', -1, 64)
			}
			first = fmt.Errorf("%s.%s %s: want 0 (%s) or more", prefix, key, val, zero)
		}
		if hasDefault && (unset || n.Int() < 0) {
			n.SetInt(parseDefault(n.Type(), def))
		}
	}
	return first
}

var durationType = reflect.TypeFor[time.Duration]()

// parseDefault reads a default tag: a duration for a time.Duration, else
// an integer. One that does not parse is a mistake of this file
// (TestHTTPConfigDefaults finds it).
func parseDefault(t reflect.Type, def string) int64 {
	var n int64
	var err error
	if t == durationType {
		var d time.Duration
		d, err = time.ParseDuration(def)
		n = int64(d)
	} else {
		n, err = strconv.ParseInt(def, 10, 64)
	}
	if err != nil {
		panic(fmt.Sprintf("server: default %q: %v", def, err))
	}
	return n
}

// httpSettings are the HTTP settings as served: defaults filled, the
// derived ones worked out, fitted in the open-file limit. The server makes
// them once (New); the transport and the registry read them.
type httpSettings struct {
	HTTPConfig
	tokens          [][32]byte // the tokens' hashes, in the configuration's order
	threadsPerToken int        // Bounds.ThreadsPerToken, fitted in the open-file limit
}

// threadFiles is what the budget of open files counts for a live thread
// (measured: about 10 on the local provider with bubblewrap; fewer on
// docker and kubernetes).
const threadFiles = 16

// newHTTPSettings works out the settings the HTTP transport serves with.
func newHTTPSettings(cfg HTTPConfig, b Bounds, log *slog.Logger) *httpSettings {
	// The command validated them; here what is unset takes its default.
	settle("http", &cfg)
	settle("limits", &b)
	h := &httpSettings{HTTPConfig: cfg, threadsPerToken: *b.ThreadsPerToken}
	for _, t := range cfg.AuthTokens {
		if t != "" {
			h.tokens = append(h.tokens, sha256.Sum256([]byte(t)))
		}
	}
	tenants := max(1, len(h.tokens))
	h.fitFiles(openFileLimit(), tenants, log)
	// Every token's share takes a body of the largest size.
	h.MaxBodyBytesInFlight = max(h.MaxBodyBytesInFlight, h.MaxBodyBytes*int64(tenants))
	switch {
	case len(h.tokens) == 0:
		h.MaxSessionsPerToken = 0
		h.MaxUnauthenticatedConnections = 0
	default:
		if h.MaxSessionsPerToken <= 0 {
			h.MaxSessionsPerToken = max(1, h.MaxSessions/len(h.tokens))
		}
		if h.MaxUnauthenticatedConnections <= 0 {
			h.MaxUnauthenticatedConnections = max(8, h.MaxConnections/16)
		}
		h.MaxUnauthenticatedConnections = min(h.MaxUnauthenticatedConnections, h.MaxConnections)
	}
	return h
}

// fitFiles fits the connections and every tenant's live threads in the
// process's open-file limit lim (SPEC §16): every connection is a file,
// every live thread holds several (its files' roots, the link to its
// sandbox), and with what else the server opens (the audit log, the files
// of calls, bash's pipes) they stay below the limit, so that neither a
// flood of connections nor one token at its cap of threads starves another
// token's calls of files. Where both do not fit, the connections get at
// least half of what there is and the threads the rest.
func (h *httpSettings) fitFiles(lim, tenants int, log *slog.Logger) {
	if lim <= 0 {
		return
	}
	avail := max(2, lim-reserveConns-256)
	need := 0
	if h.threadsPerToken > 0 {
		need = tenants * h.threadsPerToken * threadFiles
	}
	if h.MaxConnections+need > avail {
		conns := min(h.MaxConnections, max(avail/2, avail-need))
		if conns < h.MaxConnections {
			log.Warn("http.max_connections lowered to fit the open-file limit", "max_connections", h.MaxConnections, "open_file_limit", lim, "now", conns)
			h.MaxConnections = conns
		}
	}
	fit := max(1, (avail-h.MaxConnections)/threadFiles/tenants)
	if h.threadsPerToken == 0 || h.threadsPerToken > fit {
		log.Warn("limits.threads_per_token lowered to fit the open-file limit", "threads_per_token", h.threadsPerToken, "tokens", tenants, "open_file_limit", lim, "now", fit)
		h.threadsPerToken = fit
	}
}
