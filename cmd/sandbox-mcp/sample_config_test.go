package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The sample configuration in testdata/ (SPEC §8) loads and validates.
func TestSampleConfigLoads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, d := range []string{"skills", "data"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	env := map[string]string{
		"STATE": filepath.Join(dir, "state"), "SKILLS": filepath.Join(dir, "skills"), "DATA": filepath.Join(dir, "data"),
		"MY_API_KEY": "k#1, with comma", "SANDBOX_MCP_AUTH_TOKEN": "tok",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := loadConfig(filepath.Join("..", "..", "testdata", "config.yaml"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(lookup); err != nil {
		t.Fatal(err)
	}
	if cfg.Docker.Environment["API_KEY"] != "k#1, with comma" || len(cfg.HTTP.AuthTokens) != 1 || cfg.HTTP.AuthTokens[0] != "tok" {
		t.Fatalf("expanded values: %q %q", cfg.Docker.Environment["API_KEY"], cfg.HTTP.AuthTokens)
	}
	if l := cfg.Local.Limits; l.Pids != 1024 || l.Memory != "4g" || l.CPU != 2 {
		t.Fatalf("local.limits: %+v", l)
	}
	if len(cfg.Mounts) != 1 || !cfg.Mounts[0].ReadOnly || cfg.Kubernetes.NetworkPolicy == nil || !*cfg.Kubernetes.NetworkPolicy {
		t.Fatalf("parsed: %+v", cfg)
	}
}
