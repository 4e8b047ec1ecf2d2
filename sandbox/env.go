package sandbox

import "os"

// CommandEnv is the environment an exec-based provider (docker,
// kubernetes) gives every command beyond the image's own: the scrubbed
// basics (HOME the workspace, LANG, TERM, TMPDIR), the server's variables
// named in inherit, then extra (the provider's configured environment).
func CommandEnv(inherit []string, extra map[string]string) map[string]string {
	env := map[string]string{"HOME": WorkspaceDir, "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
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
