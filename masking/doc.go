// Package masking rewrites host paths into the agent's virtual paths. One
// Masker is built per sandbox and every tool result, every error line, every
// audit line passes through it: nothing the agent receives names a host path.
//
// A host path is masked wherever it stands, whatever comes before it, in
// each form the agent can meet it in: as given, symlink-resolved, with its
// separators spelled loosely ("/srv//a", "/srv/./a"), as
// /proc/self/mountinfo escapes it, and relative to the file system it is
// on (Mounts), as a sandbox's mountinfo names its bind mounts. Masking is
// linear in the text and idempotent: a long line can be masked whole
// before it is cut, and masking twice changes nothing.
//
// Masking hides paths from output; it cannot stop an agent that runs
// commands from encoding what it reads (base64 of /proc/self/mountinfo).
// What the sandbox mounts is the boundary.
//
// The package imports nothing of ours.
package masking
