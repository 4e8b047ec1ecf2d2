package main

import (
	"strings"
	"testing"
)

// The instructions name /mnt/skills only when a skills dir is shown there
// (#25 item 10).
func TestE2EInstructionsNameSkillsOnlyWhenShown(t *testing.T) {
	t.Parallel()
	without := start(t, opts{})
	if in := without.cs.InitializeResult().Instructions; strings.Contains(in, "/mnt/skills") {
		t.Errorf("no skills dir, yet the instructions name /mnt/skills: %q", in)
	}
	with := start(t, opts{extra: []string{"--skills-dir", t.TempDir()}})
	if in := with.cs.InitializeResult().Instructions; !strings.Contains(in, "skills read-only under /mnt/skills") {
		t.Errorf("a skills dir, yet the instructions do not name /mnt/skills: %q", in)
	}
}
