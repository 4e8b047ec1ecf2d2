package local

import (
	"os"
	"testing"
)

// The test binary is its own host-bash reaper, as the server binary is.
func TestMain(m *testing.M) {
	ReaperMain()
	os.Exit(m.Run())
}
