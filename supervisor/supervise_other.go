//go:build !unix

package supervisor

// Main: there is no supervisor for this system (a sandbox's supervisor
// runs on Linux, or on the host of a Unix server).
func Main() {}
