// Package cmdenv builds the environment the container providers (docker,
// kubernetes) give every command beyond the image's own.
package cmdenv

import (
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Of is the environment of every command: the scrubbed basics (HOME the
// workspace, LANG, TERM, TMPDIR), the server's variables named in
// inherit, then extra (the provider's configured environment).
func Of(inherit []string, extra map[string]string) map[string]string {
	env := map[string]string{"HOME": sandbox.WorkspaceDir, "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
	for _, k := range inherit {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}
