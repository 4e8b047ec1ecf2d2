package testkit

import "time"

// Poll calls cond every interval until it holds, or until timeout has
// passed, and says whether it held. cond runs at least once; the caller
// says what failed, with what it knows then.
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
