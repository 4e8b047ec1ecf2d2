package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// try runs the server as server.json tells a registry client to — its oci
// package: `docker run` with the runtime arguments, the image, the package
// arguments — and drives it over stdio with the go-sdk client, as a client
// would: bash must be offered and `echo hi` must answer hi.
//
//	releasemeta try -server server.json [-image REF] [-volume NAME]
//
// -image stands for the package's identifier (docker load names each
// architecture REF-ARCH); -volume for the named volume of its -v argument,
// so that a check leaves a user's volume alone.

// ociCommand is the command line of server.json's oci package.
func ociCommand(s serverJSON, image, volume string) ([]string, error) {
	var pkg *regPackage
	for i := range s.Packages {
		if s.Packages[i].RegistryType == "oci" {
			pkg = &s.Packages[i]
		}
	}
	if pkg == nil {
		return nil, fmt.Errorf("server.json has no oci package")
	}
	if pkg.RuntimeHint != "docker" {
		return nil, fmt.Errorf("the oci package's runtimeHint is %q, want docker", pkg.RuntimeHint)
	}
	if image == "" {
		image = pkg.Identifier
	}
	argv := []string{"docker", "run"}
	add := func(args []argument) {
		for _, a := range args {
			v := a.Value
			if v == "" {
				v = a.Default
			}
			if a.Type == "named" {
				argv = append(argv, a.Name)
			}
			if a.Name == "-v" && volume != "" {
				if _, dst, ok := strings.Cut(v, ":"); ok {
					v = volume + ":" + dst
				}
			}
			if v != "" {
				argv = append(argv, v)
			}
		}
	}
	add(pkg.RuntimeArguments)
	argv = append(argv, image)
	add(pkg.PackageArguments)
	return argv, nil
}

func tryCmd(args []string) error {
	fs := flag.NewFlagSet("try", flag.ContinueOnError)
	file := fs.String("server", "server.json", "the server.json to follow")
	image := fs.String("image", "", "the image to run in place of the package's identifier")
	volume := fs.String("volume", "", "the volume to mount in place of the package's named one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raw, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	var s serverJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	argv, err := ociCommand(s, *image, *volume)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "releasemeta try: %s\n", strings.Join(argv, " "))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "releasemeta-try", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("connect: %v\nthe server said:\n%s", err, stderr.String())
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %v\n%s", err, stderr.String())
	}
	var names []string
	for _, t := range tools.Tools {
		names = append(names, t.Name)
	}
	if !slices.Contains(names, "bash") {
		return fmt.Errorf("the server offers no bash (tools: %s); it said:\n%s", strings.Join(names, ", "), stderr.String())
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo hi"}})
	if err != nil {
		return fmt.Errorf("bash: %v\n%s", err, stderr.String())
	}
	text := ""
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	if res.IsError || text != "hi\n[exit code 0]" {
		return fmt.Errorf("bash echo hi answered %q (isError %v); the server said:\n%s", text, res.IsError, stderr.String())
	}
	fmt.Fprintf(os.Stderr, "releasemeta try: %d tools, bash `echo hi` answered hi\n", len(names))
	return nil
}
