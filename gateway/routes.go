package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// bucket names the token bucket a route spends from.
type bucket int

const (
	bucketNone bucket = iota
	bucketSend        // writes
	bucketSync        // reads
)

// route is one endpoint. API routes (auth) authenticate, spend a token of
// their bucket, and turn returned errors into the error shape.
type route struct {
	method, path string
	auth         bool
	bucket       bucket
	handle       func(http.ResponseWriter, *http.Request) error
}

func (r route) pattern() string { return r.method + " " + r.path }

// routeTable is every endpoint; openapi.yaml documents exactly these (a test
// keeps them equal).
func (g *Gateway) routeTable() []route {
	rs := []route{
		{"POST", "/v1/conversations", true, bucketSend, g.handleCreate},
		{"GET", "/v1/conversations", true, bucketSync, g.handleList},
		{"POST", "/v1/conversations/{cid}/members", true, bucketSend, g.handleAddMember},
		{"GET", "/v1/conversations/{cid}/members", true, bucketSync, g.handleMembers},
		{"GET", "/v1/conversations/{cid}/receipts", true, bucketSync, g.handleReceipts},
		{"DELETE", "/v1/conversations/{cid}/members/{uid}", true, bucketSend, g.handleRemoveMember},
		{"PUT", "/v1/conversations/{cid}/members/{uid}/role", true, bucketSend, g.handleSetRole},
		{"PATCH", "/v1/conversations/{cid}", true, bucketSend, g.handleUpdateConversation},
		{"PUT", "/v1/conversations/{cid}/bans/{uid}", true, bucketSend, g.handleSanction(events.MemberBanned)},
		{"DELETE", "/v1/conversations/{cid}/bans/{uid}", true, bucketSend, g.handleSanction(events.MemberUnbanned)},
		{"PUT", "/v1/conversations/{cid}/mutes/{uid}", true, bucketSend, g.handleSanction(events.MemberMuted)},
		{"DELETE", "/v1/conversations/{cid}/mutes/{uid}", true, bucketSend, g.handleSanction(events.MemberUnmuted)},
		{"GET", "/v1/conversations/{cid}/bans", true, bucketSync, g.handleSanctions(projection.SanctionBan)},
		{"GET", "/v1/conversations/{cid}/mutes", true, bucketSync, g.handleSanctions(projection.SanctionMute)},
		{"POST", "/v1/conversations/{cid}/messages", true, bucketSend, g.handleSend},
		{"GET", "/v1/conversations/{cid}/messages", true, bucketSync, g.handleHistory},
		{"PATCH", "/v1/conversations/{cid}/messages/{seq}", true, bucketSend, g.handleChange(events.MessageEdited)},
		{"DELETE", "/v1/conversations/{cid}/messages/{seq}", true, bucketSend, g.handleChange(events.MessageDeleted)},
		{"PUT", "/v1/conversations/{cid}/messages/{seq}/reaction", true, bucketSend, g.handleChange(events.ReactionAdded)},
		{"DELETE", "/v1/conversations/{cid}/messages/{seq}/reaction", true, bucketSend, g.handleChange(events.ReactionRemoved)},
		{"POST", "/v1/conversations/{cid}/messages/{seq}/report", true, bucketSend, g.handleReport},
		{"PATCH", "/v1/conversations/{cid}/record", true, bucketSend, g.handleRecord},
		{"POST", "/v1/conversations/{cid}/uploads", true, bucketSend, g.handleCreateUpload},
		{"GET", "/v1/conversations/{cid}/uploads/{id}", true, bucketSync, g.handleGetUpload},
		{"POST", "/v1/conversations/{cid}/uploads/{id}/complete", true, bucketSend, g.handleCompleteUpload},
		{"GET", "/v1/conversations/{cid}/attachments/{id}", true, bucketSync, g.handleDownload},
		{"POST", "/v1/conversations/{cid}/read", true, bucketSend, g.handleRead},
		{"GET", "/v1/sync", true, bucketSync, g.handleSync},
		{"GET", "/v1/search", true, bucketSync, g.handleSearch},
		// Typing and presence: the user's settings, presence.
		{"GET", "/v1/settings", true, bucketSync, g.handleGetSettings},
		{"PATCH", "/v1/settings", true, bucketSend, g.handlePatchSettings},
		{"GET", "/v1/presence", true, bucketSync, g.handlePresence},
		// Blocks between users.
		{"PUT", "/v1/blocks/{uid}", true, bucketSend, g.handleBlock(events.UserBlocked)},
		{"DELETE", "/v1/blocks/{uid}", true, bucketSend, g.handleBlock(events.UserUnblocked)},
		{"GET", "/v1/blocks", true, bucketSync, g.handleBlocks},
		// The WebSocket authenticates after the upgrade (browsers cannot
		// read a refused handshake) and charges one sync token per connection.
		{"GET", "/v1/ws", false, bucketNone, g.handleWS},
		{"GET", "/healthz", false, bucketNone, g.handleHealthz},
		{"GET", "/readyz", false, bucketNone, g.handleReadyz},
		{"GET", "/metrics", false, bucketNone, g.handleMetrics},
		{"GET", "/openapi.yaml", false, bucketNone, g.handleOpenAPI},
	}
	rs = append(rs, g.serverRoutes()...)    // the server API (server_api.go)
	rs = append(rs, g.localStoreRoute()...) // a LocalStore's signed URLs (attachments.go)
	if g.cfg.DevMode {
		rs = append(rs, route{"POST", "/v1/dev/token", false, bucketNone, g.handleDevToken})
	}
	return rs
}

func (g *Gateway) buildHandler() (http.Handler, error) {
	mux := http.NewServeMux()
	for _, rt := range g.routes {
		h := g.wrap(rt)
		if rt.path != "/v1/ws" { // a connection's lifetime is no request latency
			h = g.instrument(rt.pattern(), h)
		}
		mux.Handle(rt.pattern(), h)
	}
	if err := mountPages(mux, g.cfg.Pages); err != nil {
		return nil, err
	}
	unmatched := g.instrument("unmatched", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.writeUnmatched(mux, w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerSize(r); n > g.cfg.MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			g.writeError(w, r, apierr.HeaderTooLarge(n, g.cfg.MaxHeaderBytes))
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			unmatched.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// mountPages adds Config.Pages to mux, in pattern order. http.ServeMux
// panics on an invalid or conflicting pattern; that is a configuration
// error, returned from New.
func mountPages(mux *http.ServeMux, pages map[string]http.Handler) error {
	patterns := make([]string, 0, len(pages))
	for p := range pages {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	for _, p := range patterns {
		if pages[p] == nil {
			return fmt.Errorf("gateway: Pages[%q] has no handler", p)
		}
		if err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("gateway: Pages[%q]: %v", p, r)
				}
			}()
			mux.Handle(p, pages[p])
			return nil
		}(); err != nil {
			return err
		}
	}
	return nil
}

// headerSize is the size of r's request line and header fields as they
// were sent (give or take the whitespace around the colons).
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// writeUnmatched answers a request no route takes in the error shape: 404,
// or 405 with Allow when the path exists for other methods.
func (g *Gateway) writeUnmatched(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	if onServerAPI(r) {
		if err := refuseBrowser(r); err != nil {
			g.writeError(w, r, err)
			return
		}
	}
	probe := &probeWriter{header: http.Header{}}
	h, _ := mux.Handler(r)
	h.ServeHTTP(probe, r)
	if probe.code == http.StatusMethodNotAllowed {
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		apierr.WriteJSON(w, http.StatusMethodNotAllowed, protocol.ErrorBody{Error: protocol.ErrorDetail{Code: protocol.CodeBadRequest,
			Message: "method " + r.Method + " not allowed here; allowed: " + allow}})
		return
	}
	if probe.code >= 300 && probe.code < 400 { // the mux's redirects to a cleaned path
		w.Header().Set("Location", probe.header.Get("Location"))
		w.WriteHeader(probe.code)
		return
	}
	g.writeError(w, r, apierr.NotFound("no endpoint %s %s", r.Method, r.URL.Path))
}

// wrap adds authentication, rate limiting and error mapping to an API route.
func (g *Gateway) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.auth {
			user, err := g.auth.bearer(r)
			if err != nil {
				if apierr.From(err).Status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="inboxd"`)
				}
				g.writeError(w, r, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), userKey, user))
			var lim *ratelimit.Limiters
			switch rt.bucket {
			case bucketSend:
				lim = g.sendLimits
			case bucketSync:
				lim = g.syncLimits
			}
			if lim != nil {
				st := lim.Take(user, time.Now())
				st.SetHeaders(w.Header())
				if !st.Allowed() {
					g.writeError(w, r, st.Err())
					return
				}
			}
		}
		if err := rt.handle(w, r); err != nil {
			g.writeError(w, r, err)
		}
	})
}

// routePaths lists "METHOD /path" of every route (for the OpenAPI test).
func (g *Gateway) routePaths() []string {
	out := make([]string, 0, len(g.routes))
	for _, rt := range g.routes {
		out = append(out, strings.ToUpper(rt.method)+" "+rt.path)
	}
	return out
}

// probeWriter records what the mux's own 404/405/redirect handlers would
// answer, so that it can be answered in the error shape instead.
type probeWriter struct {
	header http.Header
	code   int
}

func (p *probeWriter) Header() http.Header { return p.header }

func (p *probeWriter) Write(b []byte) (int, error) {
	if p.code == 0 {
		p.code = http.StatusOK
	}
	return len(b), nil
}

func (p *probeWriter) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}
