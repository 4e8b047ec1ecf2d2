// Package egress is the server's end of a sandbox's egress proxy (SPEC
// §17, network by policy). A sandbox in `network.mode: allowlist` has no
// route out of its own: its commands name a proxy on the sandbox's
// loopback (Env), the supervisor carries each connection made to it to
// the server, and ServeConn serves it as an HTTP/1.1 forward proxy —
// absolute-form requests (http://host/path) and CONNECT tunnels.
//
// What passes:
//   - A target passes when an entry of network.allow matches its host and
//     port (in `open` mode every target does). Then, after resolution,
//     an internal address (loopback, private, link-local, CGNAT, cloud
//     metadata, multicast, and their IPv4-mapped and NAT64 forms) is
//     refused whatever the name, unless an allow entry is that address
//     itself with that port. The check runs where the connection is made
//     (net.Dialer.Control sees the address connected to) and the checked
//     address is the one dialled, so DNS rebinding gains nothing. Open
//     mode keeps this rule: "open" opens the internet, not the host's
//     network.
//   - A refusal is an HTTP 403 whose text names the target and
//     network.allow; a refused CONNECT is then closed.
//
// Secrets: a CONNECT to a host:port with network.inject entries is
// answered and its TLS terminated here, with a certificate for that host
// minted from a CA made once per state dir and trusted in the sandbox;
// each request inside is sent on over TLS, verified, with the inject
// headers set (a header of that name the sandbox sent is replaced). The
// values never enter the sandbox, an error text, a log line or an audit
// line. They are never added to plain HTTP: a secret does not travel in
// clear, not even to a listed host. Other CONNECTs are byte tunnels:
// HTTPS to hosts without secrets passes through untouched.
//
// Every tunnel and every plain request is one audit line (tool "network";
// host, port, method, allowed, bytes each way, injected), refused ones
// too. The audit fails closed: no upstream connection is made before
// audit.Sink.Begin has said its line can be written.
//
// A sandbox is hostile: headers are capped, connections per thread are
// capped, dials, idle tunnels and idle keep-alive connections time out,
// nothing is buffered without bound, and bytes that are not HTTP end in
// a 400 or a closed connection, never a panic.
package egress
