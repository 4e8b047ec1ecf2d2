// Package archtest holds the test of the house's import rules (its one
// test reads `go list` and fails when an arrow of docs/architecture.md
// breaks). It has no code of its own.
package archtest
