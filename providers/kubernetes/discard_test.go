package kubernetes

import (
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

// host_path mode: a thread's files are its node directory.
func TestDiscardContract(t *testing.T) {
	t.Parallel()
	sandboxtest.Discard(t, newProviderT(t, newConfig(t)))
}

// pvc mode: a thread's files are its claim. (The test class binds no
// volume: a claim is made, and Pending, which is enough for Exists.)
func TestDiscardContractClaim(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.Storage = Storage{Mode: StoragePVC, StorageClass: "smcp-test-none-" + randomHex(4), Size: "1Gi"}
	p := newProviderT(t, cfg)
	ctx := t.Context()
	thread := "claim-" + randomHex(4)
	if ok, err := p.Exists(ctx, thread); err != nil || ok {
		t.Fatalf("Exists before the thread's first use = %v, %v", ok, err)
	}
	if err := p.ensureClaim(ctx, acquire(t, p, thread)); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Exists(ctx, thread); err != nil || !ok {
		t.Fatalf("Exists once its claim is made = %v, %v", ok, err)
	}
	if err := p.Discard(ctx, thread); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "Exists false after Discard", func() bool {
		ok, err := p.Exists(ctx, thread)
		return err == nil && !ok
	})
}
