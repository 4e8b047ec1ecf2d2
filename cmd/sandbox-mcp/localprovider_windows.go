package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The local provider's exec path (the supervisor: process groups, a
// subreaper) is Unix-only for now, so this build leaves the package out: the kubernetes
// provider works here (docker's supervisor needs a Linux host for now).
// TODO: build providers/local for windows (file tools on, bash only with
// --allow-host-bash) and remove this file.

func newLocalProvider(context.Context, *Config, []sandbox.Mount, *slog.Logger) (sandbox.Provider, error) {
	return nil, errors.New("the local provider is not in this Windows build yet: use --provider kubernetes")
}

func probeBwrap(context.Context) error { return errors.New("bubblewrap is Linux only") }
