package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The session thread's outputs are MCP resources.
const (
	outputsScheme    = tools.OutputsScheme
	resourceListMax  = 1000     // entries listed at most
	resourceReadMax  = 10 << 20 // bytes read at most
	resourcesPerWalk = 10000    // directory entries visited at most
)

// registerResources offers /mnt/user-data/outputs of the session's thread:
// resources/list shows what is there when asked (whoever wrote it), hidden
// entries (like .tool-results) left out; resources/read fetches one file.
func (s *Server) registerResources(hooks *mcpserver.Hooks) {
	hooks.AddBeforeSubscriptionsListen(func(ctx context.Context, _ any, req *mcp.SubscriptionsListenRequest) {
		s.listen(ctx, req.Header)
	})
	hooks.AddAfterListResources(func(ctx context.Context, _ any, req *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if res == nil {
			return
		}
		b, err := s.bind(ctx, req.Header)
		if err != nil {
			return
		}
		res.Resources = append(res.Resources, s.listOutputs(ctx, b.sb.FS())...)
	})
	s.mcp.AddResourceTemplate(
		mcp.NewResourceTemplate(outputsScheme+"{+path}", "outputs",
			mcp.WithTemplateDescription("Files under /mnt/user-data/outputs of this session's thread")),
		s.readOutput,
	)
	s.mcp.AddResource(mcp.NewResource(infoURI, "sandbox info",
		mcp.WithResourceDescription("This session's sandbox: its provider, image, limits and use now (sandbox_info's facts)"),
		mcp.WithMIMEType("application/json")), s.readInfo)
}

// infoURI is the resource of sandbox_info's facts (SPEC §19).
const infoURI = "sandbox://info"

// readInfo answers sandbox_info's facts as JSON, and its lines as text.
func (s *Server) readInfo(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	b, err := s.bind(ctx, req.Header)
	if err != nil {
		return nil, err
	}
	base, _ := ctx.Value(previewBaseKey{}).(string)
	env := &tools.Env{Sandbox: b.sb, Limits: s.cfg.Limits, Network: s.cfg.Network,
		Previews: previewScope{p: s.previews, thread: b.thread, sb: b.sb, base: base}}
	f, err := tools.Info(ctx, env)
	if err != nil {
		return nil, errors.New(b.mask.Mask(err.Error()))
	}
	js, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{
		mcp.TextResourceContents{URI: infoURI, MIMEType: "application/json", Text: b.mask.Mask(string(js))},
		mcp.TextResourceContents{URI: infoURI, MIMEType: "text/plain", Text: b.mask.Mask(f.Text())},
	}, nil
}

// bind returns the session's binding for requests other than tool calls.
func (s *Server) bind(ctx context.Context, header map[string][]string) (*binding, error) {
	session, thread := s.identify(ctx, header)
	if session == "" && mcpserver.IsModernRequest(ctx) {
		// A stateless request (http.stateless) holds its thread's lease
		// until its HTTP request ends: the resource hooks have no later
		// point.
		var err error
		var done func()
		if session, done, err = s.modernSession(thread); err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, done)
	}
	return s.sessions.Get(ctx, session, thread)
}

func (s *Server) listOutputs(ctx context.Context, fsys sandbox.FS) []mcp.Resource {
	var out []mcp.Resource
	visited := 0
	var visit func(dir, rel string)
	visit = func(dir, rel string) {
		entries, err := fsys.ReadDir(ctx, dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			if visited++; visited > resourcesPerWalk || len(out) >= resourceListMax {
				return
			}
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			r := path.Join(rel, e.Name())
			switch {
			case e.IsDir():
				visit(dir+"/"+e.Name(), r)
			case e.Type().IsRegular():
				opts := []mcp.ResourceOption{mcp.WithResourceDescription(sandbox.OutputsDir + "/" + r)}
				if t := mime.TypeByExtension(path.Ext(r)); t != "" {
					opts = append(opts, mcp.WithMIMEType(t))
				}
				out = append(out, mcp.NewResource(outputsScheme+escapePath(r), r, opts...))
			}
		}
	}
	visit(sandbox.OutputsDir, "")
	return out
}

func escapePath(rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func (s *Server) readOutput(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	b, err := s.bind(ctx, req.Header)
	if err != nil {
		return nil, err
	}
	uri := req.Params.URI
	rel, err := url.PathUnescape(strings.TrimPrefix(uri, outputsScheme))
	if err != nil || !strings.HasPrefix(uri, outputsScheme) {
		return nil, fmt.Errorf("not an outputs resource: %s", b.mask.Mask(uri))
	}
	name, err := sandbox.Clean(sandbox.OutputsDir + "/" + rel)
	if err != nil || !sandbox.Within(name, sandbox.OutputsDir) || name == sandbox.OutputsDir {
		return nil, fmt.Errorf("path outside the sandbox: %s", b.mask.Mask(uri))
	}
	f, err := b.sb.FS().Open(ctx, name)
	if err != nil {
		return nil, errors.New(b.mask.Mask(err.Error()))
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("is a directory: %s", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, resourceReadMax+1))
	if err != nil {
		return nil, errors.New(b.mask.Mask(sandbox.HostError(name, err).Error()))
	}
	if len(data) > resourceReadMax {
		return nil, fmt.Errorf("file too large to read as a resource (over %d bytes): %s", resourceReadMax, name)
	}
	mt := mime.TypeByExtension(path.Ext(name))
	if utf8.Valid(data) && !strings.ContainsRune(string(data), 0) {
		if mt == "" {
			mt = "text/plain"
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: mt, Text: b.mask.Mask(string(data))}}, nil
	}
	if mt == "" {
		mt = "application/octet-stream"
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: uri, MIMEType: mt, Blob: base64.StdEncoding.EncodeToString(data)}}, nil
}

// outputsChanged tells the client of a session that its resource list
// changed, and the thread's subscriptions/listen streams (listeners.go).
// A stateless call's own stream carries only what concerns the call.
func (s *Server) outputsChanged(ctx context.Context, threadKey string) {
	if !mcpserver.IsModernRequest(ctx) {
		if err := s.mcp.SendNotificationToClient(ctx, string(mcp.MethodNotificationResourcesListChanged), nil); err != nil {
			s.cfg.Logger.Debug("list_changed not sent", "err", err)
		}
	}
	s.listeners.resourcesChanged(threadKey)
}
