//go:build !unix

package main

import "io"

// pollable: stdin is read as it is (see stdin_unix.go).
func pollable(in io.Reader) (r io.Reader, restore func()) { return in, func() {} }
