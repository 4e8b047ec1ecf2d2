package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// listeners are the subscriptions/listen streams of stateless (2026-07-28)
// clients, by the thread key their request named. A modern client gets
// notifications on such a stream only (none on a call's stream but the
// call's own), so a thread's list_changed goes to its listeners: never to
// another thread's, or another token's (the key is namespaced by token).
//
// mcp-go serves each listen request with an ephemeral session that it
// makes reachable by broadcasts only (all of them, every thread); this
// registry reaches the one session, through its notification channel,
// whose writes the transport forwards onto the listen stream, tagged with
// the subscription id.
type listeners struct {
	mu sync.Mutex
	m  map[string]map[mcpserver.ClientSession]struct{}
}

// add registers a listen stream's session under the thread key until
// remove is called.
func (l *listeners) add(key string, cs mcpserver.ClientSession) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]map[mcpserver.ClientSession]struct{}{}
	}
	set := l.m[key]
	if set == nil {
		set = map[mcpserver.ClientSession]struct{}{}
		l.m[key] = set
	}
	set[cs] = struct{}{}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(set, cs)
		if len(l.m[key]) == 0 {
			delete(l.m, key)
		}
	}
}

// resourcesChanged sends notifications/resources/list_changed to the
// thread's listeners that asked for it (SEP-2575: every notification is
// opt-in). It never blocks: a stream whose queue is full misses it.
func (l *listeners) resourcesChanged(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for cs := range l.m[key] {
		f, ok := cs.(mcpserver.SessionWithSubscriptionFilter)
		if !ok {
			continue
		}
		if filter, active := f.SubscriptionFilter(); !active || !filter.ResourcesListChanged {
			continue
		}
		n := mcp.JSONRPCNotification{
			JSONRPC:      mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{Method: string(mcp.MethodNotificationResourcesListChanged)},
		}
		select {
		case cs.NotificationChannel() <- n:
		default:
		}
	}
}

// listen registers a stateless subscriptions/listen request's stream
// under the thread it names (X-Thread-ID), for as long as the request
// lasts. A listen request naming no thread gets no thread's notifications.
func (s *Server) listen(ctx context.Context, header http.Header) {
	if !mcpserver.IsModernRequest(ctx) {
		return
	}
	cs := mcpserver.ClientSessionFromContext(ctx)
	if cs == nil {
		return
	}
	_, thread := s.identify(ctx, header)
	if thread.Anonymous || thread.ID == "" {
		s.cfg.Logger.Debug("subscriptions/listen names no thread: it gets no thread's notifications")
		return
	}
	context.AfterFunc(ctx, s.listeners.add(thread.Key, cs))
}
