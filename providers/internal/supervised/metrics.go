package supervised

import "time"

// Metrics is told of the boxes a provider makes or starts for its calls
// (the server's metrics, SPEC §19): a supervisor started in bubblewrap or
// on the host, a container made or started, a Pod made — not one found
// running. Each provider's Config holds one (nil: none).
type Metrics interface {
	// BoxStarted: provider's box was made or started for a call and runs,
	// took after the provider set out to find or make it.
	BoxStarted(provider string, took time.Duration)
}
