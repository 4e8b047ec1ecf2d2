// Package testkit holds what the tests of several packages need alike: a
// buffer a process and a test share, a wait with a deadline, a small file
// system to fill, the processes a test marked, a socket that forwards to
// another, an OpenTelemetry collector's OTLP/HTTP trace receiver. Only tests import it (internal/archtest checks that no package
// of the server or the daemon does); a helper for one package's tests stays
// in that package.
package testkit
