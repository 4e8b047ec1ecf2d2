package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func exposePortTool() Tool {
	return newTool("expose_port", exposePortArgs{}, exposePort,
		mcp.WithDescription("Give a URL that reaches a TCP port listening inside the sandbox (a dev server, a web app, an API), "+
			"for a person to open in a browser or for you to fetch: HTTP and websockets pass, whatever the sandbox's network. "+
			"The port need not be listening yet (until it is, the URL answers 502). "+
			"Exposing the port again answers the same URL; it ends with close: true, or when the sandbox ends. "+
			"The app is served under the URL's path (the X-Forwarded-Prefix header names it): give it that base path, or use relative links. "+
			"Its pages run sandboxed, at an opaque origin: no localStorage, no document.cookie."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{
			Title:           "Expose a port",
			ReadOnlyHint:    mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(false),
			IdempotentHint:  mcp.ToBoolPtr(true),
			OpenWorldHint:   mcp.ToBoolPtr(true),
		}),
		withIcon("globe"),
		mcp.WithOutputSchema[exposeFacts](),
	)
}

type exposePortArgs struct {
	Port  int  `json:"port" arg:"required,minimum=1,maximum=65535" jsonschema_description:"The TCP port, listening on the sandbox's loopback (127.0.0.1) or on every interface."`
	Close bool `json:"close" jsonschema_description:"End the port's URL instead (default false)."`
}

type exposeFacts struct {
	Port    int    `json:"port" jsonschema_description:"The port."`
	URL     string `json:"url,omitempty" jsonschema_description:"The URL that reaches it (not after close)."`
	Exposed bool   `json:"exposed" jsonschema_description:"Whether the port has a URL now (false after close)."`
}

func exposePort(ctx context.Context, env *Env, a exposePortArgs) *Result {
	if _, ok := env.Sandbox.(sandbox.Ports); !ok || env.Previews == nil {
		return failf("expose_port is not available with this provider")
	}
	if a.Close {
		err := env.Previews.Close(ctx, a.Port)
		if errors.Is(err, ErrNotExposed) {
			return failf("port %d is not exposed", a.Port)
		}
		if err != nil {
			return failf("port %d: %w", a.Port, err)
		}
		return structured(fmt.Sprintf("Port %d is no longer exposed", a.Port), false, exposeFacts{Port: a.Port})
	}
	url, err := env.Previews.Open(ctx, a.Port)
	if err != nil {
		return failf("port %d: %w", a.Port, err)
	}
	return structured(fmt.Sprintf("Port %d of the sandbox is at %s", a.Port, url), false, exposeFacts{Port: a.Port, URL: url, Exposed: true})
}
