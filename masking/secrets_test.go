package masking_test

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

// A secret the proxy adds to a sandbox's requests never reaches the agent,
// whole or as its token alone, beside the paths masked as before.
func TestHidingSecrets(t *testing.T) {
	t.Parallel()
	m := masking.New(masking.Pair{Host: "/srv/state", Virtual: "/mnt/user-data"}).Hiding("Bearer sk-live-0123456789", "short")
	for in, want := range map[string]string{
		"Authorization: Bearer sk-live-0123456789\n": "Authorization: [secret]\n",
		"token sk-live-0123456789 is invalid":        "token [secret] is invalid",
		"x-key=sk-live-0123456789&y":                 "x-key=[secret]&y",
		"/srv/state/a short word":                    "/mnt/user-data/a [secret] word",
		"Bearer alone stays":                         "Bearer alone stays",
	} {
		if got := m.Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
	var nilMasker *masking.Masker
	if got := nilMasker.Hiding("abcdefghij").Mask("x abcdefghij y"); got != "x [secret] y" {
		t.Errorf("a nil masker hiding a secret: %q", got)
	}
	if got := masking.New().Hiding().Mask("nothing /here"); got != "nothing /here" {
		t.Errorf("no secrets: %q", got)
	}
	if strings.Contains(m.Mask(m.Mask("Bearer sk-live-0123456789")), "sk-live") {
		t.Error("masked twice, the secret shows")
	}
}
