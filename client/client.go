package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/protocol"
)

// Client is one device of one user: it keeps the inbox in sync, hands
// entries to the app in order, and sends queued messages. Create it with
// New and call Run; Send, WaitSent, Backfill, Sync and the request methods
// may be called from any goroutine, before, during and after Run.
type Client struct {
	cfg   Config
	api   *api
	log   *slog.Logger
	wsURL string

	deliverMu sync.Mutex // one delivery (entry, too_long, backfill page) at a time
	saveMu    sync.Mutex // snapshots reach the store in order

	mu          sync.Mutex // guards everything below
	st          *State
	uncommitted int
	results     map[string]SendResult
	resultOrder []string
	waiters     map[string][]chan SendResult
	sess        *wsSession // the WebSocket session up, for sends
	counts      Counts     // the totals of the latest answer

	kick    chan struct{} // wakes the outbox
	ownHTTP bool          // HTTPClient is the default one: Run closes its idle connections
	running atomic.Bool
	seed    atomic.Uint64
	// crashHint is the last welcome's reconnect hint (hints.go).
	crashHint atomic.Pointer[protocol.Reconnect]
}

// New checks cfg, applies the defaults and loads the saved state from
// cfg.Store. It does not connect.
func New(cfg Config) (*Client, error) {
	ownHTTP := cfg.HTTPClient == nil
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	st, err := cfg.Store.Load(context.Background())
	if err != nil {
		return nil, fmt.Errorf("client: load state: %w", err)
	}
	if st == nil {
		st = newState()
	}
	if st.Format > StateFormat {
		return nil, fmt.Errorf("client: state format %d is newer than this client's %d", st.Format, StateFormat)
	}
	st.Format = StateFormat
	tok := func(context.Context) (string, error) { return cfg.Token, nil }
	if cfg.TokenSource != nil {
		tok = cfg.TokenSource
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger,
		wsURL:   wsURL(base),
		api:     &api{base: base, hc: cfg.HTTPClient, token: tok, refresh: cfg.TokenSource != nil, timeout: cfg.RequestTimeout},
		st:      st,
		results: map[string]SendResult{},
		waiters: map[string][]chan SendResult{},
		kick:    make(chan struct{}, 1),
		ownHTTP: ownHTTP,
	}
	c.seed.Store(rand.Uint64())
	return c, nil
}

// newRand returns a random source for one goroutine.
func (c *Client) newRand() *rand.Rand {
	s := c.seed.Add(0x9e3779b97f4a7c15)
	return rand.New(rand.NewPCG(s, s^0x5851f42d4c957f2d))
}

// Run keeps the inbox in sync and drains the outbox until ctx ends (it then
// returns nil, after a last save) or a fatal error: a *PermanentError (the
// server refused the client: 401, 403, 400, close 4001/4003), an error of a
// handler, or of the Store. Temporary failures (network, 429, 5xx, other
// close codes) never end Run: it reconnects as docs/protocol.md asks. Only one
// Run may be active at a time.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	rnd := c.newRand()
	if d := c.cfg.StartupJitter; d > 0 {
		if !sleepCtx(ctx, time.Duration(rnd.Int64N(int64(d)))) {
			return nil
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.runOutbox(gctx) })
	if !c.cfg.DisableSync {
		g.Go(func() error { return c.runSync(gctx) })
	}
	err := g.Wait()
	if c.ownHTTP {
		c.cfg.HTTPClient.CloseIdleConnections()
	}
	if serr := c.save(ctx); err == nil {
		err = serr
	}
	if err != nil && ctx.Err() != nil && isCtx(ctx, err) {
		err = nil
	}
	return err
}

func (c *Client) status(s Status) {
	if h := c.cfg.Handler.OnStatus; h != nil {
		h(s)
	}
}

// runSync runs sessions, WebSocket or long-poll, one after the other, with
// the backoff, Retry-After, circuit breaker and fallback of docs/protocol.md.
func (c *Client) runSync(ctx context.Context) error {
	l := newSyncLoop(c)
	for {
		s := l.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(s.err) {
			return s.err
		}
		again, err := l.reconnectAtOnce(s)
		if err != nil {
			return err
		}
		if again {
			continue
		}
		l.countWSFailure(s)
		if s.established() {
			l.armCrashPlan(s)
		}
		if !l.waitToReconnect(ctx, s) {
			return nil
		}
	}
}

// syncLoop is the state runSync keeps across sessions. It is owned by
// runSync's goroutine.
type syncLoop struct {
	c            *Client
	rnd          *rand.Rand
	pol          *policy
	wsFails      int       // WebSocket sessions in a row that failed (TransportAuto)
	pollUntil    time.Time // long-poll until then (TransportAuto)
	lastErr      error     // why the last session ended, for Status
	tokenRetried bool      // the TokenSource was asked again after a 401
	crash        *crashPlan
}

func newSyncLoop(c *Client) *syncLoop {
	rnd := c.newRand()
	return &syncLoop{c: c, rnd: rnd, pol: newPolicy(&c.cfg, rnd)}
}

// syncSession is how one session went.
type syncSession struct {
	ws        bool
	transport string        // "websocket" or "polling", for logs and Status
	upAt      time.Time     // when it came up; zero if it never did
	lasted    time.Duration // how long it stayed up
	err       error         // why it ended
}

func (s syncSession) established() bool { return !s.upAt.IsZero() }

// jitter is uniform in [0, d].
func (l *syncLoop) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(l.rnd.Int64N(int64(d) + 1))
}

// session runs one session on the transport due now, until it ends.
func (l *syncLoop) session(ctx context.Context) syncSession {
	c := l.c
	s := syncSession{ws: c.cfg.Transport == TransportWebSocket ||
		(c.cfg.Transport == TransportAuto && !time.Now().Before(l.pollUntil))}
	s.transport = "polling"
	if s.ws {
		s.transport = "websocket"
	}
	c.status(Status{State: StateConnecting, Transport: s.transport, Err: l.lastErr})
	up := func() {
		s.upAt = time.Now()
		l.pol.succeeded()
		l.tokenRetried = false
		c.status(Status{State: StateConnected, Transport: s.transport})
		c.log.Debug("connected", "transport", s.transport)
	}
	if s.ws {
		s.err = c.runWS(ctx, up)
	} else {
		until := time.Time{}
		if c.cfg.Transport == TransportAuto {
			until = l.pollUntil
		}
		s.err = c.runPoll(ctx, up, until, l.jitter)
	}
	if s.established() {
		s.lasted = time.Since(s.upAt)
	}
	return s
}

// reconnectAtOnce handles the endings that change the transport or the
// token rather than wait: no WebSocket on this path (poll), a 401 that a
// new token may cure, a poll period that ended (WebSocket again). A
// permanent refusal is returned as the error that ends Run.
func (l *syncLoop) reconnectAtOnce(s syncSession) (again bool, err error) {
	c := l.c
	if errors.Is(s.err, errNoWebSocket) && c.cfg.Transport == TransportAuto {
		// Not the client's fault: a proxy without upgrades. Poll.
		l.wsFails = 0
		l.pollUntil = time.Now().Add(c.cfg.PollingPeriod)
		c.log.Warn("no WebSocket through this path, long-polling for a while", "err", s.err, "until", l.pollUntil)
		l.lastErr = s.err
		return true, nil
	}
	if p := permanent(s.err); p != nil {
		unauth := p.Status == http.StatusUnauthorized || p.CloseCode == CloseUnauthorized
		if unauth && c.cfg.TokenSource != nil && !l.tokenRetried {
			// The token may have expired; the source may have a new one.
			l.tokenRetried = true
			l.lastErr = s.err
			return true, nil
		}
		return false, p // Run's caller reports it
	}
	if errors.Is(s.err, errTryWebSocket) {
		l.pollUntil, l.lastErr = time.Time{}, nil
		return true, nil
	}
	return false, nil
}

// countWSFailure counts a failed WebSocket session and switches to
// long-polling for PollingPeriod after WSFallbackAfter in a row
// (TransportAuto only).
func (l *syncLoop) countWSFailure(s syncSession) {
	c := l.c
	if !s.ws || c.cfg.Transport != TransportAuto {
		return
	}
	switch {
	case (!s.established() && serverAway(s.err)) || closedWithHint(s.err):
		// The gateway is down or restarting: long-polling would
		// fail the same way, so this says nothing against the
		// WebSocket (a restart must not send every client to
		// long-polling for PollingPeriod).
	case !s.established() || s.lasted < c.cfg.StablePeriod:
		l.wsFails++
	default:
		l.wsFails = 0
	}
	if l.wsFails >= c.cfg.WSFallbackAfter {
		l.wsFails = 0
		l.pollUntil = time.Now().Add(c.cfg.PollingPeriod)
		c.log.Warn("WebSocket keeps failing, long-polling for a while", "err", s.err, "until", l.pollUntil)
	}
}

// waitToReconnect waits out the backoff (or Retry-After, or the open
// circuit) after a failed session; false if ctx ended first.
func (l *syncLoop) waitToReconnect(ctx context.Context, s syncSession) bool {
	c := l.c
	wait, opened := l.pol.failed(s.err, s.established(), s.lasted)
	if d, ok := l.crashWait(s); ok && !opened {
		wait = d // the welcome's hint, armed by a loss without a word
	}
	l.lastErr = s.err
	st := StateWaiting
	if opened {
		st = StateCircuitOpen
		c.log.Warn("circuit open after repeated failures", "transport", s.transport, "err", s.err, "cooldown", wait)
	} else {
		c.log.Info("connection lost, reconnecting", "transport", s.transport, "err", s.err, "retry_in", wait, "lasted", s.lasted)
	}
	c.status(Status{State: st, Transport: s.transport, Err: s.err, RetryAt: time.Now().Add(wait)})
	return sleepCtx(ctx, wait)
}

// Position returns the saved inbox position: every entry up to cursor (of
// epoch) was handed to the app.
func (c *Client) Position() (epoch, cursor int64) { return c.position() }

// Conversation returns what the client knows of a conversation (a copy),
// or nil.
func (c *Client) Conversation(conversationID int64) *ConversationState {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.st.Conversations[conversationID]
	if cs == nil {
		return nil
	}
	return cs.clone()
}

// Holes returns the open history holes of every conversation that has some.
func (c *Client) Holes() map[int64][]Hole {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int64][]Hole{}
	for id, cs := range c.st.Conversations {
		if len(cs.Holes) > 0 {
			out[id] = append([]Hole(nil), cs.Holes...)
		}
	}
	return out
}

// --- single requests ---
//
// The methods below make one request each and return its error (an
// *APIError for a refusal; retry what is Temporary). They do not touch the
// client's state: what they change reaches the client through the inbox.

// Conversations reads the whole conversation list (every page): pinned
// first, then most recent activity.
func (c *Client) Conversations(ctx context.Context) ([]Record, error) {
	var out []Record
	var next *string
	for {
		page, err := c.api.conversations(ctx, next, c.cfg.ListPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Conversations...)
		if next = page.NextPage; next == nil {
			return latestRecords(out), nil
		}
	}
}

// History reads up to limit messages of a conversation with seq < before
// (0: the newest), ascending, and whether older ones exist. It does not
// touch the holes; see Backfill.
func (c *Client) History(ctx context.Context, conversationID, before int64, limit int) ([]Message, bool, error) {
	ans, err := c.api.history(ctx, conversationID, before, limit)
	if err != nil {
		return nil, false, err
	}
	return c.visible(ans.Messages), ans.HasMore, nil
}

// CreateConversation creates a conversation with the user and members and
// returns its id.
func (c *Client) CreateConversation(ctx context.Context, title string, members ...int64) (int64, error) {
	if members == nil {
		members = []int64{}
	}
	var out protocol.ConversationCreated
	_, _, err := c.api.do(ctx, http.MethodPost, "/v1/conversations", nil,
		protocol.CreateConversation{Title: title, Members: members}, nil, &out, 0)
	if err != nil {
		return 0, err
	}
	return out.ConversationID, nil
}

// AddMember adds a user to a conversation.
func (c *Client) AddMember(ctx context.Context, conversationID, userID int64) error {
	_, _, err := c.api.do(ctx, http.MethodPost, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/members", nil,
		protocol.AddMember{UserID: userID}, nil, nil, 0)
	return err
}

// RemoveMember removes a user (possibly the caller) from a conversation.
func (c *Client) RemoveMember(ctx context.Context, conversationID, userID int64) error {
	_, _, err := c.api.do(ctx, http.MethodDelete, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+
		"/members/"+strconv.FormatInt(userID, 10), nil, nil, nil, nil, 0)
	return err
}

// MarkRead moves the user's read position in a conversation.
func (c *Client) MarkRead(ctx context.Context, conversationID, seq int64) error {
	_, _, err := c.api.do(ctx, http.MethodPost, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/read", nil,
		protocol.MarkRead{Seq: &seq}, nil, nil, 0)
	return err
}

// SetRecord changes the user's pinned and/or muted flags of a conversation
// (nil leaves a flag as it is).
func (c *Client) SetRecord(ctx context.Context, conversationID int64, pinned, muted *bool) error {
	// A nil flag is sent as null, which the gateway reads as absent.
	body := protocol.SetRecord{Pinned: pinned, Muted: muted}
	_, _, err := c.api.do(ctx, http.MethodPatch, "/v1/conversations/"+strconv.FormatInt(conversationID, 10)+"/record", nil,
		body, nil, nil, 0)
	return err
}

// serverAway says whether err means the gateway could not be reached or is
// shedding load (refused connection, timeout before an answer, 429/502/503/504),
// rather than that the WebSocket path fails.
func serverAway(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if closedWithHint(err) {
		return true // a starting or draining gateway saying when to come back
	}
	var api *APIError
	if errors.As(err, &api) {
		switch api.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// latestRecords keeps one record per conversation, the highest version (a
// conversation that moved while the list was paged can appear twice).
func latestRecords(recs []Record) []Record {
	idx := map[int64]int{}
	out := recs[:0]
	for _, r := range recs {
		if i, ok := idx[r.ConversationID]; ok {
			if r.Version > out[i].Version {
				out[i] = r
			}
			continue
		}
		idx[r.ConversationID] = len(out)
		out = append(out, r)
	}
	return out
}
