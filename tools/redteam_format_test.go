package tools_test

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// TestRedTeamFormatCheckpointControlChars: a checkpoint's message is the
// agent's text (checkpoint {message}), and `sandbox-mcp checkpoints THREAD`
// prints FormatCheckpoint to the operator's terminal: an ESC sequence in
// it (OSC 52 clipboard write, cursor moves hiding lines, title change)
// reaches the terminal raw.
func TestRedTeamFormatCheckpointControlChars(t *testing.T) {
	msg := "fine\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2K\x1b[1Ahidden\rX\x9b31m"
	line := tools.FormatCheckpoint(checkpoint.Info{ID: "1", Message: msg})
	if strings.ContainsAny(line, "\x1b\x07\r\x9b") || strings.Contains(line, "\u009b") {
		t.Errorf("control characters reach the terminal: %q", line)
	}
}
