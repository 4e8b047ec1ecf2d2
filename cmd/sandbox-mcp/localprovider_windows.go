package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The local provider's exec path (process groups, the host-bash reaper)
// is Unix-only for now, so this build leaves the package out: the docker
// and kubernetes providers work here.
// TODO: build providers/local for windows (file tools on, bash only with
// --allow-host-bash) and remove this file.

func reaperMain() {}

func newLocalProvider(context.Context, *Config, []sandbox.Mount, *slog.Logger) (sandbox.Provider, error) {
	return nil, errors.New("the local provider is not in this Windows build yet: use --provider docker")
}

func probeBwrap(context.Context) error { return errors.New("bubblewrap is Linux only") }
