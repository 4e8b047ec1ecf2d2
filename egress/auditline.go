package egress

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// Tool is the audit lines' tool: one line per tunnel and per plain-HTTP
// request, refused ones too.
const Tool = "network"

// attempt is one tunnel or plain request, from its audit line's Begin to
// its Record.
type attempt struct {
	s        *session
	t        target
	method   string
	start    time.Time
	ev       audit.Event // as Begin returned it: it carries the reservation
	injected bool
	addrs    []netip.Addr // t's, resolved before the line was begun (plain HTTP)

	up, down atomic.Int64 // bytes from the sandbox, bytes to it

	mu      sync.Mutex
	outcome string // "" until something fails: ok
	errText string
}

type attemptKey struct{}

func attemptOf(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// event is the audit line of an attempt, as far as it is known.
func (s *session) event() audit.Event {
	return audit.Event{
		Time:     time.Now(),
		Session:  s.who.Session,
		Thread:   s.who.Thread,
		Sandbox:  s.who.Sandbox,
		Provider: s.who.Provider,
		Tool:     Tool,
	}
}

func args(host string, port int, method string, allowed bool, up, down int64, injected bool) map[string]any {
	return map[string]any{
		"host": host, "port": port, "method": method, "allowed": allowed,
		"bytes_up": up, "bytes_down": down, "injected": injected,
	}
}

// begin reserves the audit line of an allowed attempt, before anything
// is dialled: a connection whose line cannot be written is not made. The
// line Begin sizes has every field at its widest (the byte counts and the
// duration at their largest, the longer outcome and booleans), so the
// line recorded later is never larger than the room reserved.
func (s *session) begin(t target, method string) (*attempt, error) {
	method = cut(method)
	a := &attempt{s: s, t: t, method: method, start: time.Now()}
	ev := s.event()
	ev.Outcome = audit.Denied
	ev.DurationMS = math.MaxInt64
	ev.Args = args(t.host(), t.port, method, false, math.MaxInt64, math.MaxInt64, false)
	ev, err := s.p.audit.Begin(ev)
	if err != nil {
		s.p.log.Error("audit log cannot be written: proxy connection refused", "thread", s.who.Thread, "target", t.String(), "err", err)
		return nil, err
	}
	a.ev = ev
	return a, nil
}

// fail notes what went wrong; the first failure is the one recorded.
func (a *attempt) fail(outcome, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.outcome == "" {
		a.outcome, a.errText = outcome, text
	}
}

// answerError answers the sandbox why its request could not be sent on,
// and notes it for the audit line. The answer is the proxy's own: it is
// not counted as bytes from the upstream. After a refusal the connection
// is closed.
func (a *attempt) answerError(w http.ResponseWriter, err error, closeConn bool) {
	code, text, outcome := failure(a.t, err)
	a.fail(outcome, text)
	a.s.p.log.Debug("egress: refused or failed", "thread", a.s.who.Thread, "target", a.t.String(), "err", err)
	if cw, ok := w.(countWriter); ok {
		w = cw.ResponseWriter
	}
	refuse(w, code, text, closeConn || outcome == audit.Denied)
}

// end records the attempt's audit line.
func (a *attempt) end() {
	a.mu.Lock()
	outcome, text := a.outcome, a.errText
	a.mu.Unlock()
	if outcome == "" {
		outcome = audit.OK
	}
	ev := a.ev
	ev.Outcome = outcome
	ev.Error = text
	ev.DurationMS = time.Since(a.start).Milliseconds()
	ev.Args = args(a.t.host(), a.t.port, a.method, outcome != audit.Denied, a.up.Load(), a.down.Load(), a.injected)
	if err := a.s.p.audit.Record(ev); err != nil {
		a.s.p.log.Error("audit log cannot be written", "thread", a.s.who.Thread, "target", a.t.String(), "err", err)
	}
	a.s.p.log.Debug("egress", "thread", a.s.who.Thread, "target", a.t.String(), "method", a.method, "outcome", outcome,
		"bytes_up", a.up.Load(), "bytes_down", a.down.Load(), "injected", a.injected)
}

// deny answers a refused attempt, closing the connection (each refusal
// costs the sandbox a connection), and records its line. No connection is
// made, so there is nothing to reserve first. A thread's refusals are
// lines as long as its refusal budget lasts (refusalQuota); beyond it
// they are still refused, and counted in one line per refusalSummary.
func (s *session) deny(w http.ResponseWriter, host string, port int, method string, code int, text string) {
	if s.p.refusalLogged(s.who) {
		host, method = cut(host), cut(method)
		ev := s.event()
		ev.Outcome = audit.Denied
		ev.Error = text
		ev.Args = args(host, port, method, false, 0, 0, false)
		if err := s.p.audit.Record(ev); err != nil {
			s.p.log.Error("audit log cannot be written", "thread", s.who.Thread, "err", err)
		}
		s.p.log.Debug("egress: refused", "thread", s.who.Thread, "text", text)
	}
	refuse(w, code, text, true)
}

// refusalQuota is what a thread may write of refusal lines: a token
// bucket, refilled at rate a second up to burst. A sandbox's refusals cost
// it no tool call, and the audit log is every tenant's: unbounded, they
// would fill its disk, after which every call is refused.
type refusalQuota struct {
	tokens     float64
	last       time.Time
	suppressed int // refusals not logged since the last summary
	who        Who // the last to be refused, for the summary line
}

// refusalLogged says whether a refusal of who's thread gets its line, and
// counts it otherwise; the first one not logged arms the summary.
func (p *Proxy) refusalLogged(who Who) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	q := p.quotas[who.Thread]
	if q == nil {
		if len(p.quotas) >= 256 {
			p.forgetFullQuotas(now)
		}
		q = &refusalQuota{tokens: float64(p.lim.refusalBurst), last: now}
		p.quotas[who.Thread] = q
	}
	q.refill(now, p.lim)
	if q.tokens >= 1 {
		q.tokens--
		return true
	}
	q.who = who
	if q.suppressed++; q.suppressed == 1 {
		time.AfterFunc(p.lim.refusalSummary, func() { p.summarizeRefusals(who.Thread) })
	}
	return false
}

func (q *refusalQuota) refill(now time.Time, lim limits) {
	q.tokens = min(float64(lim.refusalBurst), q.tokens+now.Sub(q.last).Seconds()*lim.refusalRate)
	q.last = now
}

// forgetFullQuotas drops the quotas of threads that have their whole
// budget again and nothing to summarize: the table holds only threads
// refused lately.
func (p *Proxy) forgetFullQuotas(now time.Time) {
	for thread, q := range p.quotas {
		if q.refill(now, p.lim); q.suppressed == 0 && q.tokens >= float64(p.lim.refusalBurst) {
			delete(p.quotas, thread)
		}
	}
}

// summarizeRefusals writes the line that counts a thread's refusals not
// logged since its last summary.
func (p *Proxy) summarizeRefusals(thread string) {
	p.mu.Lock()
	q := p.quotas[thread]
	if q == nil || q.suppressed == 0 {
		p.mu.Unlock()
		return
	}
	n, who := q.suppressed, q.who
	q.suppressed = 0
	p.mu.Unlock()
	text := fmt.Sprintf("%d refusals not logged: a thread's refusals are logged %d at once, then %g a second", n, p.lim.refusalBurst, p.lim.refusalRate)
	ev := audit.Event{
		Time: time.Now(), Session: who.Session, Thread: who.Thread, Sandbox: who.Sandbox, Provider: who.Provider,
		Tool: Tool, Outcome: audit.Denied, Error: text,
	}
	ev.Args = args("", 0, "", false, 0, 0, false)
	ev.Args["refusals_not_logged"] = n
	if err := p.audit.Record(ev); err != nil {
		p.log.Error("audit log cannot be written", "thread", thread, "err", err)
	}
	p.log.Warn("egress: "+text, "thread", thread)
}

// refuse answers text, one line, with code.
func refuse(w http.ResponseWriter, code int, text string, closeConn bool) {
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if closeConn {
		h.Set("Connection", "close")
	}
	w.WriteHeader(code)
	io.WriteString(w, text+"\n")
}

// cut bounds what the sandbox wrote before it goes into a line.
func cut(s string) string {
	const max = 256
	if len(s) > max {
		return s[:max]
	}
	return s
}
