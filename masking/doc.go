// Package masking rewrites host paths into the agent's virtual paths. One
// Masker is built per sandbox and every tool result, every error line, every
// audit line passes through it: nothing the agent receives names a host path.
//
// The package imports nothing of ours.
package masking
