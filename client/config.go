package client

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// Defaults of Config.
const (
	DefaultStartupJitter    = time.Second
	DefaultBackoffInitial   = 500 * time.Millisecond
	DefaultBackoffMax       = 30 * time.Second
	DefaultStablePeriod     = 30 * time.Second
	DefaultBreakerThreshold = 8
	DefaultBreakerCooldown  = time.Minute
	DefaultWSFallbackAfter  = 3
	DefaultPollingPeriod    = 5 * time.Minute
	DefaultLongPollWait     = 25 * time.Second
	DefaultPageSize         = 200
	DefaultGapWait          = 500 * time.Millisecond
	DefaultHeadWait         = time.Second
	DefaultRequestTimeout   = 15 * time.Second
	DefaultSendTimeout      = 10 * time.Second
	DefaultPendingRecheck   = 2 * time.Second
	DefaultCommitEvery      = 1
	DefaultBackfillPage     = 100
	DefaultListPage         = 200
	DefaultHandshakeTimeout = 10 * time.Second
)

// Transport selects how the client talks to the gateway.
type Transport int

const (
	// TransportAuto uses the WebSocket and falls back to HTTP long-polling
	// while the WebSocket keeps failing (the default).
	TransportAuto Transport = iota
	// TransportWebSocket only uses the WebSocket (HTTP only for pulls,
	// pages and sends).
	TransportWebSocket
	// TransportPolling only uses HTTP long-polling.
	TransportPolling
)

func (t Transport) String() string {
	switch t {
	case TransportWebSocket:
		return "websocket"
	case TransportPolling:
		return "polling"
	}
	return "auto"
}

// Config configures a Client. The zero value of every field but BaseURL
// and the token means its default.
type Config struct {
	// BaseURL is the gateway, http(s)://host[:port][/prefix]. Required.
	// The WebSocket URL is derived from it (ws(s)://…/v1/ws).
	BaseURL string

	// Token is the bearer token (a JWT whose sub is the user id). Either
	// Token or TokenSource is required.
	Token string

	// TokenSource, when set, is asked for the token before every request
	// and connection (cache it; it runs often). After a 401 it is asked
	// once more, and a different token is tried before the 401 counts as
	// permanent: a source that refreshes expired tokens keeps the client
	// running.
	TokenSource func(ctx context.Context) (string, error)

	// Store keeps the cursor, the conversations' last seqs and holes, and
	// the outbox. Default a MemoryStore (nothing survives the process);
	// use OpenFileStore, or your own, to resume after a restart.
	Store Store

	// Handler receives the entries and events. See Handler.
	Handler Handler

	// Logger. Default slog.Default().
	Logger *slog.Logger

	// HTTPClient makes the HTTP requests. Its Timeout should be zero or
	// above LongPollWait plus RequestTimeout (the client bounds each
	// request itself). Default a client with its own transport.
	HTTPClient *http.Client

	// Dialer dials the WebSocket. Default: HandshakeTimeout 10s, the
	// proxy from the environment, the TLS settings of Go.
	Dialer *websocket.Dialer

	// ShowBlocked hands the messages whose sender the user blocks
	// (Message.SenderBlocked: the server sends them emptied, in their
	// places) to the handlers and History like any other. By default they
	// are left out of OnEntry, OnUpdate, OnHistory, History and
	// Backfill's Messages; the cursor moves past them all the same.
	ShowBlocked bool

	// Transport: TransportAuto (default), TransportWebSocket or
	// TransportPolling.
	Transport Transport

	// StartupJitter: Run waits a random time in [0, StartupJitter) before
	// its first connection, so that many clients started together (a
	// fleet after a deploy, a load test) do not arrive together.
	// Negative disables it. Default 1s.
	StartupJitter time.Duration

	// BackoffInitial and BackoffMax bound the exponential backoff between
	// reconnections (and between send retries): the cap doubles from
	// BackoffInitial up to BackoffMax and the wait is uniform in
	// [0, cap] (full jitter, which spreads a crowd of clients best).
	// Defaults 500ms and 30s.
	BackoffInitial time.Duration
	BackoffMax     time.Duration

	// StablePeriod is how long a connection must stay up before the
	// backoff starts again from BackoffInitial. A server that accepts and
	// drops at once is thus still backed off from. Default 30s.
	StablePeriod time.Duration

	// BreakerThreshold failed attempts in a row (no answer at all, or
	// 429/5xx) open the circuit: no attempt for BreakerCooldown (jittered
	// by up to a fifth), then one probe; its failure opens the circuit
	// again. Defaults 8 and 1 minute.
	BreakerThreshold int
	BreakerCooldown  time.Duration

	// WSFallbackAfter: after this many WebSocket sessions in a row failed
	// (did not come up, or ended before StablePeriod), TransportAuto
	// long-polls for PollingPeriod, then tries the WebSocket again. A
	// gateway without the WebSocket endpoint (404) switches at once.
	// Defaults 3 and 5 minutes.
	WSFallbackAfter int
	PollingPeriod   time.Duration

	// LongPollWait is the wait of a long-poll (whole seconds, at most the
	// gateway's 30s; keep it below the idle timeout of proxies in front).
	// Default 25s.
	LongPollWait time.Duration

	// PageSize is the limit of sync pages (the gateway caps it, 200 by
	// default). Default 200.
	PageSize int

	// GapWait: when a push skips ahead of the cursor, the client waits
	// this long for the missing entries (pushes can arrive out of order
	// across reconnects) before it pulls them over HTTP. Default 500ms.
	GapWait time.Duration

	// HeadWait: when a heartbeat (or welcome) reports a head beyond the
	// cursor, the client waits this long for the push before it pulls over
	// HTTP. Default 1s.
	HeadWait time.Duration

	// RequestTimeout bounds one HTTP request (a long-poll gets
	// LongPollWait on top). Default 15s.
	RequestTimeout time.Duration

	// SendTimeout bounds the wait for a send_ack on the WebSocket before
	// the send is retried (with the same msg_id). Default 10s.
	SendTimeout time.Duration

	// PendingRecheck: a send answered 202 pending is in the log and will
	// get a seq; the client learns it from the inbox, or by posting the
	// same msg_id again after this (growing up to BackoffMax), which
	// answers 200 with the seq once projected. Default 2s.
	PendingRecheck time.Duration

	// SendOverHTTP sends over HTTP even while a WebSocket is up. Default
	// false: sends go over the WebSocket when one is up.
	SendOverHTTP bool

	// CommitEvery: the cursor is saved after every CommitEvery entries
	// whose handler returned (and at the end of every batch). After a
	// crash, at most this many entries are handed to the app again.
	// Default 1.
	CommitEvery int

	// BackfillPage is the history page size of Backfill. Default 100.
	BackfillPage int

	// ListPage is the page size of conversation list reads. Default 200.
	ListPage int

	// DisableSync makes Run only drain the outbox: the inbox is not read,
	// the cursor never moves. For send-only tools (inboxd send, load
	// generators). Default false.
	DisableSync bool
}

// Handler receives what the client learns. Every field is optional.
//
// OnEntry, OnUpdate, OnTooLong, OnConversations and OnHistory are called one at a
// time (never concurrently with each other), from Run's goroutines or from
// Backfill's caller. OnSendResult and OnStatus may run concurrently with
// them. A handler must not call Backfill or Sync (ErrInHandler); it may call
// Send. The ctx passed to a handler ends when Run stops.
type Handler struct {
	// OnEntry receives each inbox entry once, in inbox_seq order. The
	// cursor moves past the entry (and is saved, see CommitEvery) only
	// after OnEntry returned nil; an error stops Run with that error, and
	// the entry comes again on the next Run. A message entry whose message
	// the app already got from Backfill is skipped (the cursor passes it).
	//
	// OnEntry gets every entry, update entries included, even those whose
	// change the app already has (from a message entry or Backfill that read
	// the message later). An app that keeps messages usually takes them from
	// OnEntry (kind message), OnHistory and OnUpdate, and ignores update
	// entries in OnEntry; an app that mirrors the inbox takes everything
	// from OnEntry and applies an update when its version is higher.
	OnEntry func(ctx context.Context, e Entry) error

	// OnUpdate receives the new state of a changed message (edited,
	// deleted, reactions changed; Message.Version grows with each change):
	// from an update entry, right after OnEntry got it, only when its
	// version is higher than any the app was handed for the message (by
	// OnEntry, OnHistory or OnUpdate), so that replays, reconnections and
	// states read after the change never come twice; and from Backfill,
	// for messages delivered before a too_long whose changes the jump
	// skipped. Replace the message in the app's view with it. It may name
	// a message the app does not have yet (in a history hole): Backfill
	// will hand it over in its current state. An error stops Run (or fails
	// the Backfill); the entry comes again.
	OnUpdate func(ctx context.Context, m Message) error

	// OnTooLong is told that the inbox jumped to the head: the entries in
	// between are lost for good, the conversation list was read again and
	// the history holes of t.NewHoles were recorded. The jump is saved
	// after it returns nil; an error stops Run.
	OnTooLong func(ctx context.Context, t TooLong) error

	// OnConversations receives the whole conversation list after the
	// client read it again (after a too_long). An error stops Run.
	OnConversations func(ctx context.Context, recs []Record) error

	// OnHistory receives what a Backfill filled in, ascending, before the
	// holes are marked filled and saved (same at-least-once boundary as
	// OnEntry). An error fails the Backfill.
	OnHistory func(ctx context.Context, conversationID int64, msgs []Message) error

	// OnSendResult is told how each queued send ended: with its seq, or
	// a permanent refusal (403, 400, 413, 404). Called once per send,
	// after the outbox was saved without it.
	OnSendResult func(ctx context.Context, r SendResult)

	// OnStatus is told of connection changes (for a UI's "connecting…").
	OnStatus func(s Status)

	// OnCounts is told of the user's unread and mention totals whenever an
	// answer (a sync page, the WebSocket welcome, a too_long) carries
	// totals that differ from the last ones (Client.Counts). OnReceipt is
	// told of another member's read position as it moves, over the
	// WebSocket only (Client.Receipts reads them all). Both may run
	// concurrently with the other handlers and must not block.
	OnCounts  func(n Counts)
	OnReceipt func(r Receipt)

	// OnTyping and OnPresence receive the typing and presence frames of
	// other users over the WebSocket (never while long-polling): a member
	// typing in a conversation, a conversation partner coming online or
	// going offline. They are ephemeral: not stored, not replayed after a
	// reconnect (ask Client.Presence then). They are called on the
	// connection's reader, which they hold up: return quickly. They may
	// run concurrently with the other handlers.
	OnTyping   func(e TypingEvent)
	OnPresence func(e PresenceEvent)
}

// ConnState is the connection state reported by Status.
type ConnState int

const (
	StateConnecting  ConnState = iota // an attempt is under way
	StateConnected                    // a WebSocket or long-poll session is up
	StateWaiting                      // backing off until RetryAt
	StateCircuitOpen                  // circuit open until RetryAt
)

func (s ConnState) String() string {
	return [...]string{"connecting", "connected", "waiting", "circuit-open"}[s]
}

// Status is a connection change.
type Status struct {
	State     ConnState
	Transport string    // "websocket" or "polling"
	Err       error     // what ended the previous attempt, if any
	RetryAt   time.Time // StateWaiting, StateCircuitOpen
}

func (c *Config) setDefaults() {
	if c.Store == nil {
		c.Store = NewMemoryStore()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 4
		c.HTTPClient = &http.Client{Transport: tr}
	}
	if c.Dialer == nil {
		c.Dialer = &websocket.Dialer{HandshakeTimeout: DefaultHandshakeTimeout, Proxy: http.ProxyFromEnvironment}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.StartupJitter, DefaultStartupJitter)
	def(&c.BackoffInitial, DefaultBackoffInitial)
	def(&c.BackoffMax, DefaultBackoffMax)
	def(&c.StablePeriod, DefaultStablePeriod)
	def(&c.BreakerCooldown, DefaultBreakerCooldown)
	def(&c.PollingPeriod, DefaultPollingPeriod)
	def(&c.LongPollWait, DefaultLongPollWait)
	def(&c.GapWait, DefaultGapWait)
	def(&c.HeadWait, DefaultHeadWait)
	def(&c.RequestTimeout, DefaultRequestTimeout)
	def(&c.SendTimeout, DefaultSendTimeout)
	def(&c.PendingRecheck, DefaultPendingRecheck)
	defInt(&c.BreakerThreshold, DefaultBreakerThreshold)
	defInt(&c.WSFallbackAfter, DefaultWSFallbackAfter)
	defInt(&c.PageSize, DefaultPageSize)
	defInt(&c.CommitEvery, DefaultCommitEvery)
	defInt(&c.BackfillPage, DefaultBackfillPage)
	defInt(&c.ListPage, DefaultListPage)
}

func (c *Config) validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("client: BaseURL is required")
	case c.Token == "" && c.TokenSource == nil:
		return errors.New("client: Token or TokenSource is required")
	case c.BackoffInitial < 0, c.BackoffMax < c.BackoffInitial, c.StablePeriod < 0, c.BreakerCooldown < 0,
		c.PollingPeriod < 0, c.GapWait < 0, c.HeadWait < 0, c.RequestTimeout < 0, c.SendTimeout < 0,
		c.PendingRecheck < 0:
		return errors.New("client: durations must not be negative, and BackoffMax not below BackoffInitial")
	case c.LongPollWait < time.Second || c.LongPollWait > 30*time.Second:
		return errors.New("client: LongPollWait must be within 1s..30s")
	case c.BreakerThreshold < 1, c.WSFallbackAfter < 1, c.PageSize < 1, c.CommitEvery < 1, c.BackfillPage < 1, c.ListPage < 1:
		return errors.New("client: counts and sizes must be positive")
	case c.Transport < TransportAuto || c.Transport > TransportPolling:
		return errors.New("client: unknown Transport")
	}
	return nil
}
