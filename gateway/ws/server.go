package ws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// Server serves GET /v1/ws (docs/protocol.md): a hello with a cursor, the
// catch-up from PostgreSQL, live pushes, heartbeats, sends and pings on one
// connection. Create it with New, run Run beside the HTTP server and mount
// it (it is an http.Handler) at GET /v1/ws. It reaches the gateway only
// through Deps.
//
// # Goroutines
//
// A connection has one reader and one hub loop (waiting for the hub's
// wake-ups of its user), both started by ServeHTTP, which then returns,
// and at most one writer, alive only while frames are queued. The
// heartbeat and the hello deadline are timers. Sends run in short-lived
// goroutines, at most MaxInflightSends per connection, whose replies go
// through the writer's queue. Reads of entries are not done by the
// connection: the pusher (see push.go) reads the entries of every session
// signalled within PushWindow in one query and queues the frames; a writer
// writes them. Shutdown (Run's end) and Deps.Draining close every session
// with 1012 (closeAll).
//
// # Delivery
//
// Each session remembers its cursor, the last inbox_seq it queued. Entries
// are only ever read as "after cursor" by one query at a time per session,
// and queued together with the cursor's advance, so the inbox_seqs of one
// connection are contiguous from the hello's after (a too_long rebases
// them to its head). A hub wake-up (a NOTIFY for the user, or the wake-all
// after the LISTEN connection came back) and every heartbeat make the
// session re-read; a notification is only a hint.
//
// It is safe for concurrent use.
type Server struct {
	deps Deps
	cfg  Config
	log  *slog.Logger
	m    *metrics
	up   websocket.Upgrader
	push *pusher
	big  *largeIndex // the read-mode conversations' pushes (large.go)

	allowAll bool
	origins  map[string]bool

	mu       sync.Mutex
	sessions map[*session]struct{}
	perUser  map[int64]int
	count    atomic.Int64 // len(sessions), read without mu (reconnectHint)
	running  bool
	stopped  bool
	base     context.Context // the sessions' parent: Run's, lasting until every session ended
	conns    sync.WaitGroup  // ServeHTTP calls past the running check
	stopping chan struct{}   // closed when Run's ctx ends

	nextID atomic.Uint64
}

// New builds a WebSocket server. It registers its metrics on
// cfg.Registerer; a second server on the same registry shares the first
// one's collectors.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	ws := &Server{
		deps: deps, cfg: cfg, log: deps.Logger,
		sessions: map[*session]struct{}{},
		perUser:  map[int64]int{},
		stopping: make(chan struct{}),
	}
	ws.allowAll, ws.origins = parseOrigins(cfg.AllowedOrigins)
	ws.up = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// A small read buffer of our own: the HTTP server's 4 KiB one is
		// let go with the upgrade request (frames larger than the buffer
		// are read in pieces; client frames are small).
		ReadBufferSize:  1024,
		WriteBufferSize: 4096,
		// Write buffers are only held while a frame is written: an idle
		// connection costs no write buffer.
		WriteBufferPool: &sync.Pool{},
		// The origin is checked after the upgrade, so that a refused
		// browser sees close code 4003 rather than an opaque failure.
		CheckOrigin: func(*http.Request) bool { return true },
		// A refused handshake (no key, another version) is answered in the
		// error shape like every non-2xx answer, not in the upgrader's
		// plain text.
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			code := protocol.CodeBadRequest
			if status >= 500 {
				code = protocol.CodeInternal
			}
			ws.writeError(w, r, &apierr.Error{Status: status, Code: code, Message: reason.Error(), Retryable: status >= 500})
		},
	}
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(ws.stalledWrites(time.Second)) })
	if err != nil {
		return nil, fmt.Errorf("gateway: register WebSocket metrics: %w", err)
	}
	ws.m = m
	ws.push = newPusher(ws)
	ws.big = newLargeIndex(ws)
	return ws, nil
}

// writeError answers a request that did not become a session in the
// error shape (apierr), logging what is the server's fault.
func (ws *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := apierr.From(err)
	if e.Status >= 500 && e.Code == protocol.CodeInternal {
		ws.log.Error("request failed", "route", r.Pattern, "code", e.Code, "err", err)
	}
	apierr.Write(w, e)
}

// SessionInfo describes one open session, as Inspect sees it.
type SessionInfo struct {
	ID           uint64
	User         int64
	Cursor, Head int64         // the last inbox_seq queued, the highest head known
	QueuedBytes  int           // of the ordered stream waiting for the writer
	Reading      bool          // a read of its entries is pending or running
	WriteBlocked time.Duration // how long the write in progress has taken, 0 between writes
	LaggingSince time.Time     // since when its full queue holds reads back, zero unless lagging
}

// Inspect describes every open session (for operators and tests). It takes
// each session's lock in turn.
func (ws *Server) Inspect() []SessionInfo {
	ws.mu.Lock()
	sessions := make([]*session, 0, len(ws.sessions))
	for s := range ws.sessions {
		sessions = append(sessions, s)
	}
	ws.mu.Unlock()
	out := make([]SessionInfo, 0, len(sessions))
	now := time.Now()
	for _, s := range sessions {
		s.mu.Lock()
		info := SessionInfo{ID: s.id, User: s.user, Cursor: s.cursor, Head: s.head,
			QueuedBytes: s.out.dataBytes, Reading: s.fetch != fetchIdle, LaggingSince: s.laggingSince}
		if !s.out.writeStart.IsZero() {
			info.WriteBlocked = max(now.Sub(s.out.writeStart), 1)
		}
		s.mu.Unlock()
		out = append(out, info)
	}
	return out
}

// stalledWrites counts the sessions whose current write has been blocked
// for longer than d. It visits every session (for the metric's scrape).
func (ws *Server) stalledWrites(d time.Duration) int {
	ws.mu.Lock()
	sessions := make([]*session, 0, len(ws.sessions))
	for s := range ws.sessions {
		sessions = append(sessions, s)
	}
	ws.mu.Unlock()
	n, now := 0, time.Now()
	for _, s := range sessions {
		s.mu.Lock()
		if !s.out.writeStart.IsZero() && now.Sub(s.out.writeStart) > d {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// Run runs the pusher until ctx ends; then it closes every session with
// 1012 (service restart), waits for their goroutines and returns nil.
// ServeHTTP refuses connections (HTTP 503, before the upgrade) unless Run
// is running. Deps.Draining closing also closes every session with 1012.
func (ws *Server) Run(ctx context.Context) error {
	// The pusher and the sessions outlive ctx until every session has
	// written its 1012: their context ends after that.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	ws.mu.Lock()
	if ws.running || ws.stopped {
		ws.mu.Unlock()
		return errors.New("gateway: WebSocket already running or stopped")
	}
	ws.running, ws.base = true, pctx
	ws.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		ws.push.run(pctx)
	}()
	stopLarge := ws.deps.Hub.ListenReadFanout(ws.big.notified)
	defer stopLarge()
	go func() {
		defer wg.Done()
		ws.big.run(pctx)
	}()
	go func() {
		defer wg.Done()
		select {
		case <-ws.deps.Draining:
			ws.closeAll()
		case <-pctx.Done():
		}
	}()

	<-ctx.Done()
	ws.mu.Lock()
	ws.stopped = true
	close(ws.stopping)
	ws.mu.Unlock()
	ws.closeAll()
	ws.conns.Wait() // every session has written its 1012 and ended
	cancel()
	wg.Wait()
	return nil
}

// closeAll closes every session with 1012 (service restart). A session
// registered after closeAll took its list is closed by ServeHTTP, which
// looks at stopping and draining again after the registration.
func (ws *Server) closeAll() {
	ws.mu.Lock()
	sessions := make([]*session, 0, len(ws.sessions))
	for s := range ws.sessions {
		sessions = append(sessions, s)
	}
	ws.mu.Unlock()
	// Those already closing (the drain and Run's end both close all) keep
	// the slot they were told.
	sessions = slices.DeleteFunc(sessions, func(s *session) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.endingLocked()
	})
	var delays []time.Duration
	if a := ws.deps.Admission; a != nil && len(sessions) > 0 {
		delays = a.Spread(len(sessions))
		ws.log.Info("closing sessions with reconnect hints", "sessions", len(sessions),
			"first_ms", slices.Min(delays).Milliseconds(), "last_ms", slices.Max(delays).Milliseconds())
	}
	for i, s := range sessions {
		s.closeWith(protocol.CloseServiceRestart, "service restart", ws.restartFrame(delays, i))
	}
}

// restartFrame is the error frame before a drain's 1012: when to come back
// (delays[i]), or nil without reconnect hints.
func (ws *Server) restartFrame(delays []time.Duration, i int) []byte {
	if i >= len(delays) {
		return nil
	}
	return errorFrame(apierr.ComeBack("service restart, reconnect after retry_after_ms", delays[i]), "")
}

func (ws *Server) isDraining() bool {
	select {
	case <-ws.deps.Draining:
		return true
	default:
		return false
	}
}

func (ws *Server) isStopping() bool {
	select {
	case <-ws.stopping:
		return true
	default:
		return false
	}
}

// reconnectHint is the hint of a welcome or a heartbeat, nil without
// reconnect hints. It takes no lock (callers hold a session's).
func (ws *Server) reconnectHint() *protocol.Reconnect {
	if ws.deps.Admission == nil {
		return nil
	}
	return ws.deps.Admission.Hint(ws.Sessions())
}

// Running reports whether Run runs (ServeHTTP admits connections).
func (ws *Server) Running() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.running && !ws.stopped
}

// Sessions returns the number of open sessions. It takes no lock.
func (ws *Server) Sessions() int { return int(ws.count.Load()) }

// heartbeatDelay is HeartbeatInterval jittered by ±10%.
func (ws *Server) heartbeatDelay() time.Duration {
	d := ws.cfg.HeartbeatInterval
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// ServeHTTP is GET /v1/ws. A request that is not a WebSocket upgrade gets
// 400 in the error shape; a refused connection is upgraded and then closed
// with its code (4001 unauthorized, 4003 origin, 4029 caps and rate,
// 1012 draining) after an error frame, because a browser sees close codes
// but not the HTTP status of a failed handshake.
func (ws *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		ws.writeError(w, r, apierr.BadRequest("GET /v1/ws needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)"))
		return
	}
	ws.mu.Lock()
	if !ws.running || ws.stopped {
		// Not yet or no longer running: nothing would push to the
		// session, and Run no longer waits for new ones.
		ws.mu.Unlock()
		ws.writeError(w, r, apierr.Unavailable("WebSocket endpoint not running", time.Second, nil))
		return
	}
	ws.conns.Add(1)
	ws.mu.Unlock()
	handedOver := false
	defer func() {
		if !handedOver {
			ws.conns.Done()
		}
	}()

	hj := &stallHijacker{ResponseWriter: w}
	conn, err := ws.up.Upgrade(hj, r, nil)
	if err != nil {
		return // the upgrader answered with an HTTP error
	}
	if ws.isDraining() || ws.isStopping() {
		ws.reject(conn, protocol.CloseServiceRestart, "service restart", ws.restartCause())
		return
	}
	if !ws.originAllowed(r) {
		// No error frame: docs/protocol.md has no error code for it; the
		// close code and reason say it.
		ws.reject(conn, protocol.CloseNotAllowed, "origin not allowed", nil)
		return
	}
	who, err := ws.deps.Auth.Authenticate(r)
	user := who.User
	if err != nil {
		if e := *apierr.From(err); e.Retryable {
			// The token could not be checked yet (the identity
			// provider's keys are not loaded): not a refusal. No
			// retry_after_ms (docs/websocket.md): nobody knows when the
			// keys come, and a fixed hint would bring every refused
			// client back at the same moment; their jittered backoff
			// spreads them.
			e.RetryAfter = 0
			ws.reject(conn, protocol.CloseTryAgainLater, "try again later", &e)
			return
		}
		ws.reject(conn, protocol.CloseUnauthorized, "unauthorized", err)
		return
	}
	// A connection costs a read token: reconnect storms are rate limited.
	if st := ws.deps.ConnectLimits.Take(user, time.Now()); !st.Allowed() {
		ws.reject(conn, protocol.CloseRateLimited, "rate limited", st.Err())
		return
	}
	if !ws.admit(conn) {
		return
	}
	s, refusal := ws.register(conn, hj.nc, who)
	if refusal != nil {
		ws.reject(conn, protocol.CloseRateLimited, "too many connections", refusal)
		return
	}
	// The session runs on goroutines of its own so that this one, and
	// with it the HTTP server's request, response and buffers of the
	// upgrade and the deep stack of the handler, end now: an idle
	// connection keeps only what it needs. The reader's end (finish)
	// unregisters the session and releases ws.conns.
	handedOver = true
	s.start()
	if ws.isDraining() || ws.isStopping() {
		// closeAll may have taken its list before this registration.
		var delays []time.Duration
		if a := ws.deps.Admission; a != nil {
			delays = a.Spread(1)
		}
		s.closeWith(protocol.CloseServiceRestart, "service restart", ws.restartFrame(delays, 0))
	}
	go s.read()
}

// restartCause is the cause told to a connection refused by a draining
// gateway: when to come back, or nil without reconnect hints.
func (ws *Server) restartCause() error {
	if ws.deps.Admission == nil {
		return nil
	}
	return apierr.ComeBack("service restart, reconnect after retry_after_ms", ws.deps.Admission.Spread(1)[0])
}

// admit applies the admission: a new session costs a hello and its
// catch-up read, so a starting gateway admits them at the rate it can
// serve and tells the others (error frame, close 1013) the slot to come
// back on. False: conn was refused and closed.
func (ws *Server) admit(conn *websocket.Conn) bool {
	a := ws.deps.Admission
	if a == nil {
		return true
	}
	ok, after := a.Admit()
	if !ok {
		ws.reject(conn, protocol.CloseTryAgainLater, "try again later",
			apierr.ComeBack("gateway starting, reconnect after retry_after_ms", after))
	}
	return ok
}

// parseOrigins turns Config.AllowedOrigins into "any" or a set.
func parseOrigins(list []string) (all bool, set map[string]bool) {
	set = map[string]bool{}
	for _, o := range list {
		if o == "*" {
			all = true
		}
		set[strings.ToLower(strings.TrimRight(o, "/"))] = true
	}
	return all, set
}

// originAllowed implements Config.AllowedOrigins.
func (ws *Server) originAllowed(r *http.Request) bool {
	return originAllowed(ws.allowAll, ws.origins, r.Header.Get("Origin"), r.Host)
}

func originAllowed(all bool, set map[string]bool, origin, host string) bool {
	if origin == "" || all {
		return true
	}
	if len(set) > 0 {
		return set[strings.ToLower(strings.TrimRight(origin, "/"))]
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// register admits a session under the connection caps.
func (ws *Server) register(conn *websocket.Conn, nc *stallConn, who Identity) (*session, error) {
	user := who.User
	ws.mu.Lock()
	defer ws.mu.Unlock()
	capped := func(msg string) error {
		return &apierr.Error{Status: http.StatusTooManyRequests, Code: protocol.CodeRateLimited, Message: msg,
			Retryable: true, RetryAfter: ws.cfg.RetryAfter}
	}
	if len(ws.sessions) >= ws.cfg.MaxConns {
		return nil, capped("too many WebSocket connections on this node")
	}
	if ws.perUser[user] >= ws.cfg.MaxConnsPerUser {
		return nil, capped(fmt.Sprintf("user %d has %d WebSocket connections on this node, the most allowed", user, ws.cfg.MaxConnsPerUser))
	}
	s := newSession(ws, ws.base, conn, nc, user)
	s.who = who
	ws.sessions[s] = struct{}{}
	ws.perUser[user]++
	ws.m.conns.Inc()
	ws.count.Add(1)
	return s, nil
}

// CloseRevoked closes the sessions whose identity revoked says was
// revoked, each with an error frame (unauthorized, "token revoked") and
// close 4001, as an upgrade with that token is refused; the SDKs stop as
// for any permanent authentication error. It returns how many it closed.
func (ws *Server) CloseRevoked(revoked func(Identity) bool) int {
	ws.mu.Lock()
	var hit []*session
	for s := range ws.sessions {
		if revoked(s.who) {
			hit = append(hit, s)
		}
	}
	ws.mu.Unlock()
	frame := errorFrame(apierr.Unauthorized("token revoked"), "")
	for _, s := range hit {
		s.logAt(slog.LevelInfo, "closing a session whose token was revoked")
		s.closeWith(protocol.CloseUnauthorized, "token revoked", frame)
	}
	return len(hit)
}

func (ws *Server) unregister(s *session) {
	if s.large {
		ws.big.remove(s)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.sessions, s)
	if ws.perUser[s.user]--; ws.perUser[s.user] <= 0 {
		delete(ws.perUser, s.user)
	}
	ws.m.conns.Dec()
	ws.count.Add(-1)
}

// reject ends a connection that never became a session: an error frame
// (when cause is set), the close frame, a short wait for the client's
// close, and the TCP close.
func (ws *Server) reject(conn *websocket.Conn, code int, reason string, cause error) {
	deadline := time.Now().Add(ws.cfg.WriteTimeout)
	if cause != nil {
		_ = conn.SetWriteDeadline(deadline)
		if conn.WriteMessage(websocket.TextMessage, errorFrame(cause, "")) == nil {
			ws.m.frames.WithLabelValues(protocol.FrameError).Inc()
		}
	}
	if conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline) == nil {
		ws.m.closed(code)
	}
	_ = conn.SetReadDeadline(time.Now().Add(ws.cfg.CloseGrace))
	for {
		if _, _, err := conn.NextReader(); err != nil {
			break
		}
	}
	_ = conn.Close()
}
