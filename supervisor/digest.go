package supervisor

import (
	"context"
	"encoding/hex"
	"errors"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

var _ sandbox.Digester = (*FS)(nil)

// Digest asks the supervisor for a file's size and, when it is at most
// maxBytes (and wire.MaxDigestBytes), its sha256, line count and whether
// it is UTF-8: one answer, instead of the file's bytes. The answer is the
// sandbox's word about its own file.
func (f *FS) Digest(ctx context.Context, name string, maxBytes int64) (sandbox.Digest, error) {
	if err := f.check(name, false); err != nil {
		return sandbox.Digest{}, err
	}
	var end *wire.FSEnd
	err := f.try(ctx, true, func(c *Conn) (err error) {
		end, _, err = c.do(ctx, wire.FSRequest{Op: wire.OpDigest, Path: name, Max: max(maxBytes, 1)})
		return err
	})
	if err == nil && end.Digest == nil {
		err = errors.New("no digest from the sandbox")
	}
	if err != nil {
		return sandbox.Digest{}, pathError(name, err)
	}
	d := end.Digest
	if d.SHA256 == "" || d.Size > maxBytes {
		return sandbox.Digest{Size: d.Size}, nil
	}
	return sandbox.Digest{Size: d.Size, Computed: true, SHA256: d.SHA256, Lines: d.Lines, UTF8: d.UTF8}, nil
}

// validDigest: a digest that could be true — a sha256's hex, no more lines
// than bytes, and no hash of a file over the bound.
func validDigest(d *wire.FSDigest) bool {
	if d.Size < 0 || d.Lines < 0 || int64(d.Lines) > d.Size {
		return false
	}
	if d.SHA256 == "" {
		return d.Lines == 0 && !d.UTF8
	}
	b, err := hex.DecodeString(d.SHA256)
	return err == nil && len(b) == 32 && d.SHA256 == hex.EncodeToString(b) && d.Size <= wire.MaxDigestBytes && (d.Size > 0) == (d.Lines > 0)
}
