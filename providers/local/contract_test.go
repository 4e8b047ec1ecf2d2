//go:build unix

package local

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

func contractSandbox(t *testing.T, cfg Config) sandbox.Sandbox {
	t.Helper()
	skills := t.TempDir()
	if err := os.WriteFile(filepath.Join(skills, "skill.md"), []byte("skill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.SkillsDir = t.TempDir(), skills
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sb, err := p.Acquire(t.Context(), "contract")
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestContractHostBash(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Options{}, func(t *testing.T) sandbox.Sandbox {
		return contractSandbox(t, Config{AllowHostBash: true})
	})
}

func TestContractBwrap(t *testing.T) {
	requireBwrap(t)
	sandboxtest.Run(t, sandboxtest.Options{ReadOnlyEnforced: true}, func(t *testing.T) sandbox.Sandbox {
		return contractSandbox(t, Config{Isolation: IsolationBwrap})
	})
}

func TestJobsContractHostBash(t *testing.T) {
	sandboxtest.Jobs(t, func(t *testing.T) sandbox.Sandbox {
		return contractSandbox(t, Config{AllowHostBash: true})
	})
}

func TestJobsContractBwrap(t *testing.T) {
	requireBwrap(t)
	sandboxtest.Jobs(t, func(t *testing.T) sandbox.Sandbox {
		return contractSandbox(t, Config{Isolation: IsolationBwrap})
	})
}
