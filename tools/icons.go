package tools

import (
	"embed"
	"encoding/base64"

	"github.com/mark3labs/mcp-go/mcp"
)

//go:embed icons/*.svg
var iconFiles embed.FS

// Icon is the icon named (a file of icons/, without .svg) as a data URI,
// so that a client shows it without fetching anything.
func Icon(name string) mcp.Icon {
	svg, err := iconFiles.ReadFile("icons/" + name + ".svg")
	if err != nil {
		panic("tools: no icon " + name) // a typo in this package: TestAllStatic calls every tool's
	}
	return mcp.Icon{Src: "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(svg), MIMEType: "image/svg+xml", Sizes: []string{"any"}}
}

func withIcon(name string) mcp.ToolOption { return mcp.WithToolIcons(Icon(name)) }
