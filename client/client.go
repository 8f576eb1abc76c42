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

	kick    chan struct{} // wakes the outbox
	ownHTTP bool          // HTTPClient is the default one: Run closes its idle connections
	running atomic.Bool
	seed    atomic.Uint64
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
// close codes) never end Run: it reconnects as PROTOCOL.md asks. Only one
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
// the backoff, Retry-After, circuit breaker and fallback of PROTOCOL.md.
func (c *Client) runSync(ctx context.Context) error {
	rnd := c.newRand()
	pol := newPolicy(&c.cfg, rnd)
	jitter := func(d time.Duration) time.Duration {
		if d <= 0 {
			return 0
		}
		return time.Duration(rnd.Int64N(int64(d) + 1))
	}
	var (
		wsFails      int
		pollUntil    time.Time
		lastErr      error
		tokenRetried bool
	)
	for {
		useWS := c.cfg.Transport == TransportWebSocket ||
			(c.cfg.Transport == TransportAuto && !time.Now().Before(pollUntil))
		transport := "polling"
		if useWS {
			transport = "websocket"
		}
		c.status(Status{State: StateConnecting, Transport: transport, Err: lastErr})
		var upAt time.Time
		up := func() {
			upAt = time.Now()
			pol.succeeded()
			tokenRetried = false
			c.status(Status{State: StateConnected, Transport: transport})
			c.log.Debug("connected", "transport", transport)
		}
		var err error
		if useWS {
			err = c.runWS(ctx, up)
		} else {
			until := time.Time{}
			if c.cfg.Transport == TransportAuto {
				until = pollUntil
			}
			err = c.runPoll(ctx, up, until, jitter)
		}
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return err
		}
		established := !upAt.IsZero()
		lasted := time.Duration(0)
		if established {
			lasted = time.Since(upAt)
		}
		if errors.Is(err, errNoWebSocket) && c.cfg.Transport == TransportAuto {
			// Not the client's fault: a proxy without upgrades. Poll.
			wsFails = 0
			pollUntil = time.Now().Add(c.cfg.PollingPeriod)
			c.log.Warn("no WebSocket through this path, long-polling for a while", "err", err, "until", pollUntil)
			lastErr = err
			continue
		}
		if p := permanent(err); p != nil {
			unauth := p.Status == http.StatusUnauthorized || p.CloseCode == CloseUnauthorized
			if unauth && c.cfg.TokenSource != nil && !tokenRetried {
				// The token may have expired; the source may have a new one.
				tokenRetried = true
				lastErr = err
				continue
			}
			return p // Run's caller reports it
		}
		if errors.Is(err, errTryWebSocket) {
			pollUntil, lastErr = time.Time{}, nil
			continue
		}
		if useWS && c.cfg.Transport == TransportAuto {
			switch {
			case !established && serverAway(err):
				// The gateway is down or restarting: long-polling would
				// fail the same way, so this says nothing against the
				// WebSocket (a restart must not send every client to
				// long-polling for PollingPeriod).
			case !established || lasted < c.cfg.StablePeriod:
				wsFails++
			default:
				wsFails = 0
			}
			if wsFails >= c.cfg.WSFallbackAfter {
				wsFails = 0
				pollUntil = time.Now().Add(c.cfg.PollingPeriod)
				c.log.Warn("WebSocket keeps failing, long-polling for a while", "err", err, "until", pollUntil)
			}
		}
		wait, opened := pol.failed(err, established, lasted)
		lastErr = err
		st := StateWaiting
		if opened {
			st = StateCircuitOpen
			c.log.Warn("circuit open after repeated failures", "transport", transport, "err", err, "cooldown", wait)
		} else {
			c.log.Info("connection lost, reconnecting", "transport", transport, "err", err, "retry_in", wait, "lasted", lasted)
		}
		c.status(Status{State: st, Transport: transport, Err: err, RetryAt: time.Now().Add(wait)})
		if !sleepCtx(ctx, wait) {
			return nil
		}
	}
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
	cc := *cs
	cc.Holes = append([]Hole(nil), cs.Holes...)
	return &cc
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
	return ans.Messages, ans.HasMore, nil
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
	var api *APIError
	if errors.As(err, &api) {
		switch api.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}
