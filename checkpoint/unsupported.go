//go:build !(linux || darwin || freebsd)

package checkpoint

import "context"

// Elsewhere (Windows, other Unixes) there is no engine: Open returns
// ErrUnsupported, so nothing below is reached.
const supported = false

type scanResult struct {
	root    *tree
	trees   map[hash]*tree
	skipped []Skip
	files   int
	size    int64
	reads   int64
	racy    map[string]bool
	start   int64
}

const smallFile = 256 << 10

func (s *Store) scan(context.Context, string, *statCache, *objWriter) (*scanResult, error) {
	return nil, ErrUnsupported
}

type applier struct {
	s      *Store
	ctx    context.Context
	locker Locker
	blobs  map[hash][]byte
	racy   map[string]bool
	guard  bool
	kept   []string
}

func (a *applier) run(string, *tree, *tree) error { return ErrUnsupported }
