// Package egress is the server's end of a sandbox's egress proxy (SPEC
// §17, network by policy). A sandbox in `network.mode: allowlist` has no
// route out of its own: its commands name a proxy on the sandbox's
// loopback (Env), the supervisor carries each connection made to it to
// the server, and ServeConn serves it as an HTTP/1.1 forward proxy —
// absolute-form requests (http://host/path) and CONNECT tunnels. The
// proxy is allowlist's alone: `open` is the sandbox's own network,
// unfiltered (not through the proxy, so neither network.allow nor the
// internal-address rule applies), and Validate refuses network.allow and
// network.inject with any mode but allowlist.
//
// What passes:
//   - A target passes when an entry of network.allow matches its host and
//     port. Then, after resolution, an internal address (loopback,
//     private, link-local, CGNAT, cloud metadata, multicast, an address of
//     the server's host, and their IPv4-mapped and NAT64 forms) is
//     refused whatever the name, unless an allow entry is that address
//     itself with that port. A name is resolved once and the addresses
//     checked are the ones connected to, checked again where the
//     connection is made (net.Dialer.Control), so DNS rebinding gains
//     nothing.
//   - A refusal is an HTTP 403 whose text names the target and
//     network.allow; the connection is then closed.
//
// Secrets: a CONNECT to a host:port with network.inject entries is
// answered and its TLS terminated here, with a certificate for that host
// minted from a CA made once per state dir and trusted in the sandbox;
// each request inside is sent on over TLS, verified, with the inject
// headers set (a header of that name the sandbox sent is replaced). The
// values never enter the sandbox, an error text, a log line or an audit
// line — not even when that host echoes them: every form of a value (the
// value, and each of its words of 8 bytes or more, as the server's masker
// hides them) is scrubbed from response headers, informational (1xx)
// responses, trailers and bodies, as they stream (scrub.go); bodies are
// asked for unencoded (Accept-Encoding: identity) and one that comes
// encoded all the same is refused (502); TRACE and TRACK, HTTP's echo,
// are refused (405); and upgrades (websockets) are refused (403), their
// frames being beyond the scrubber. Values are never added to plain HTTP:
// a secret does not travel in clear, not even to a listed host. Other
// CONNECTs are byte tunnels: HTTPS to hosts without secrets passes
// through untouched.
//
// Every tunnel and every plain request is one audit line (tool "network";
// host, port, method, allowed, bytes each way, injected). The audit fails
// closed: no upstream connection is made before audit.Sink.Begin has said
// its line can be written (a listed name may be resolved first). Refusals
// are lines too, within a budget per thread (a burst, then a rate):
// beyond it they are refused all the same and counted in one line per
// interval, so that a sandbox cannot fill the log every tenant shares.
//
// A sandbox is hostile: headers are capped, connections per thread are
// capped, dials, idle tunnels (upgraded plain connections too) and idle
// keep-alive connections time out, nothing is buffered without bound, and
// bytes that are not HTTP end in a 400 or a closed connection, never a
// panic.
package egress
