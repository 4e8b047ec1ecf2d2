// Package metrics is what the server tells Prometheus (SPEC §19): its tool
// calls by tool and outcome and their durations, the calls in flight, the
// sandboxes by provider and state, the boxes started for calls and how
// long each took, the jobs started, the egress proxy's connections and
// bytes, the MCP sessions open, and the Go runtime's and the process's
// own — served in the text exposition format at GET /metrics on a
// listener of its own (--metrics ADDR).
//
// Every label has a bounded set of values: a tool's name, an outcome, a
// provider, a state, a direction. Nothing is labelled by thread, session,
// token, path or host: those are many, and some are the users'. A nil
// *Metrics is off: its methods do nothing, so that a server without
// --metrics pays a nil check per call, and no registry work.
//
// The package imports nothing of this module: the server, the command and
// the providers call it, each through the few methods it needs.
package metrics
