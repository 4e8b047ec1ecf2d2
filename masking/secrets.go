package masking

import (
	"sort"
	"strings"
)

// SecretMask is what the agent sees in place of a secret.
const SecretMask = "[secret]"

// minSecretWord is the shortest word of a secret masked on its own: a
// server that echoes a header names its token alone ("token sk-… is
// invalid"), not always "Bearer sk-…".
const minSecretWord = 8

// Hiding returns a Masker that also replaces every secret — the values
// the server adds to a sandbox's requests (SPEC §17: never shown to the
// agent, even when a server echoes them) — and each of its words of
// minSecretWord bytes or more, wherever they stand, with SecretMask. m is
// unchanged; m may be nil (no paths to mask).
func (m *Masker) Hiding(secrets ...string) *Masker {
	forms := SecretForms(secrets...)
	out := &Masker{}
	if m != nil {
		*out = *m
	}
	if len(forms) == 0 {
		return out
	}
	var pairs []string
	for _, f := range forms {
		pairs = append(pairs, f, SecretMask)
	}
	out.secrets = strings.NewReplacer(pairs...)
	return out
}

// SecretForms are the spellings of the secrets that are hidden, longest
// first (a value and a word of it are replaced as the value): each value,
// and each of its whitespace-separated words of minSecretWord bytes or
// more. The egress proxy scrubs the same forms from what an upstream
// sends a sandbox.
func SecretForms(secrets ...string) []string {
	var forms []string
	seen := map[string]bool{}
	for _, s := range secrets {
		words := strings.Fields(s)
		if len(words) == 1 && words[0] != s {
			words = nil // the value itself, trimmed, is below
		}
		for _, f := range append([]string{s, strings.TrimSpace(s)}, words...) {
			if f == "" || seen[f] || f != s && len(f) < minSecretWord {
				continue
			}
			seen[f] = true
			forms = append(forms, f)
		}
	}
	sort.SliceStable(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	return forms
}
