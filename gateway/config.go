package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/auth"
	"github.com/inboxd/inboxd/projection"
)

// Defaults of Config.
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultAckWait         = 2 * time.Second
	DefaultSearchTimeout   = 5 * time.Second
	DefaultAppendTimeout   = 10 * time.Second
	DefaultLongPollMax     = 30 * time.Second
	DefaultMaxHeldPolls    = 20000
	DefaultPollInterval    = time.Second
	DefaultPageDefault     = 50
	DefaultPageMax         = 200
	DefaultSendRate        = 50
	DefaultSendBurst       = 200
	DefaultSyncRate        = 50
	DefaultSyncBurst       = 200
	DefaultDevTokenTTL     = 24 * time.Hour
	DefaultShutdownTimeout = 10 * time.Second
	DefaultListenBackoff   = 5 * time.Second
	DefaultMaxTitle        = 256
	DefaultMentionAllMax   = 100
	// DefaultSendCheckBatch and DefaultSendCheckRunners: a server's send
	// checks run one at a time, and those that wait meanwhile (up to 16)
	// commit together.
	DefaultSendCheckBatch     = 16
	DefaultSendCheckRunners   = 1
	DefaultMaxHeaderBytes     = 64 << 10
	DefaultTokenCache         = 1 << 16
	DefaultAuthJWKSRefresh    = auth.DefaultJWKSRefresh
	DefaultAuthJWKSMinRefresh = auth.DefaultJWKSMinRefresh
	DefaultAuthUserClaim      = auth.DefaultUserClaim
)

// Config configures a Gateway. The zero value of every field means its
// default; New validates the result.
type Config struct {
	// Addr is the TCP address Run listens on. Default DefaultAddr
	// ("127.0.0.1:8080"; INBOXD_HTTP_ADDR in cmd/inboxd).
	Addr string

	// AuthSecret is the HS256 key of the bearer tokens. Empty: HS256
	// tokens are refused. AuthSecret, AuthJWKSURL or both are required;
	// DevMode requires AuthSecret (dev tokens are HS256). It is never
	// used with another algorithm, nor taken from the key set.
	AuthSecret []byte

	// AuthJWKSURL is the http(s) URL of the identity provider's JSON Web
	// Key Set: tokens signed RS256, ES256 or EdDSA (Ed25519) by one of
	// its keys, named by the token's kid, are accepted. Listen fetches it
	// at once, every AuthJWKSRefresh, and when a token names an unknown
	// kid. Until the first fetch succeeds the gateway serves (HS256
	// tokens work), GET /readyz is 503 (check "jwks") and a token that
	// needs the key set is a 503; later failures keep the last good set.
	// Default none (docs/operations.md, "Identity").
	AuthJWKSURL string

	// AuthJWKSRefresh is the period of the key set's fetch: a key the
	// provider removed stops verifying within it. Default 5m.
	AuthJWKSRefresh time.Duration

	// AuthJWKSMinRefresh is the least time between two fetches of the key
	// set: a token with an unknown kid waits (at most this long) for the
	// next fetch allowed, so a storm of unknown kids makes at most one
	// fetch per interval. Default 10s.
	AuthJWKSMinRefresh time.Duration

	// AuthIssuer, when set, is the iss every token must carry. Default:
	// not checked.
	AuthIssuer string

	// AuthAudience, when set, must be in every token's aud (a string or a
	// list). Default: not checked.
	AuthAudience string

	// AuthLeeway is the clock skew allowed on exp, nbf and iat. Default 0
	// (docs/protocol.md: a token is expired at its exp).
	AuthLeeway time.Duration

	// AuthUserClaim names the claim holding the user id, a positive
	// decimal string ("42"); a claim other than sub may also be a JSON
	// integer. Default "sub".
	AuthUserClaim string

	// DevMode enables POST /v1/dev/token, which hands out a token for any
	// user id. Never enable it where real users connect. (The demo page
	// that logs in through it is mounted with Pages.) Default off.
	DevMode bool

	// DevTokenTTL is the lifetime of a dev token. Default 24h.
	DevTokenTTL time.Duration

	// Pages are handlers served beside the API, by http.ServeMux pattern
	// (for example "GET /{$}"), as they are: without authentication, rate
	// limits, metrics or the error shape. `inboxd dev` mounts the demo page
	// (package web) here; the gateway itself serves no pages, so that it
	// does not link them. An invalid pattern, or one that conflicts with an
	// API route, is an error from New. Default none.
	Pages map[string]http.Handler

	// Channel is the NOTIFY channel of the projector. Default
	// projection.DefaultChannel ("inboxd"); it must match fanout's.
	Channel string

	// AckWait bounds how long a send (and a create) waits for its
	// projection before answering 202 pending (201 for a create). Longer
	// waits turn more sends into a definitive 201 at the cost of holding
	// the request. Default 2s.
	AckWait time.Duration

	// SearchTimeout bounds one search's statements on each PostgreSQL
	// server; past it GET /v1/search answers 503 unavailable. Default 5s.
	SearchTimeout time.Duration

	// AppendTimeout bounds one append to the log; past it the request
	// answers 503 unavailable (the append may still land; a retry with the
	// same msg_id is safe). Default 10s.
	AppendTimeout time.Duration

	// MaxBody is the limit of a message body in bytes (UTF-8). It must
	// not exceed the producer's and fanout's limit, or the log refuses
	// what the gateway accepted. Default events.DefaultMaxBody (4096).
	MaxBody int

	// PlainBodies appends message bodies (sends and edits) to the log in
	// plain text. By default each body is sealed with a key of its message
	// (events.Seal, keys in body_keys) so that deleting the message erases
	// its body from the log too (docs/decisions.md, "Changes of a message").
	PlainBodies bool

	// MentionAllMax is the most members a conversation may have for a send
	// to mention them all (mention_all: every member's mention count grows).
	// Default DefaultMentionAllMax (100).
	MentionAllMax int

	// SendCheckBatch is the most send checks of one server committed in
	// one transaction: the checks that wait while SendCheckRunners are
	// already running go together (each check writes its msg_id's body
	// key, a commit each otherwise). 1: every check commits alone.
	// Default DefaultSendCheckBatch (docs/decisions.md, "Measured reasons
	// behind defaults").
	SendCheckBatch int
	// SendCheckRunners is the checks (or batches of them) of one server
	// in flight at once when SendCheckBatch is above 1. Default
	// DefaultSendCheckRunners.
	SendCheckRunners int

	// MaxHeaderBytes limits a request's header: the request line and the
	// header fields as sent. Beyond it the answer is 431 in the error
	// shape (code header_too_large) and the connection is closed. Serve
	// lets net/http read up to twice this, so that the handler can answer
	// in the error shape, and rewrites net/http's own plain-text 431 for
	// anything longer. Default DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int

	// MaxRequestBytes limits a request body; beyond it the answer is 413.
	// JSON escapes can make a body up to six times longer than its text.
	// Default max(64 KiB, 8*MaxBody).
	MaxRequestBytes int64

	// MaxMembers bounds the member list of a created conversation.
	// Default events.MaxMembers.
	MaxMembers int

	// LongPollMax is the largest accepted wait of GET /v1/sync (the wait
	// parameter is in whole seconds). Keep it below the idle timeouts of
	// load balancers in front (often 60s). Default 30s.
	LongPollMax time.Duration

	// MaxHeldPolls caps the long-polls held at once by this process;
	// beyond it a long-poll answers 503 unavailable with Retry-After.
	// A held poll costs two parked goroutines and a timer, no thread.
	// Default 20000.
	MaxHeldPolls int

	// PollInterval is the base of the _polling.next_interval_ms hint of
	// sync answers. The hint grows linearly with the held long-polls, up to
	// 5x at MaxHeldPolls, so clients back off under load. Default 1s.
	PollInterval time.Duration

	// SendRate and SendBurst are the per-user token bucket of writes
	// (sends, creates, member, record and read changes). Defaults 50/s,
	// burst 200.
	SendRate  rate.Limit
	SendBurst int

	// SyncRate and SyncBurst are the per-user token bucket of reads (sync,
	// conversation list, history). A held long-poll costs one token.
	// Defaults 50/s, burst 200.
	SyncRate  rate.Limit
	SyncBurst int

	// TooLongLag is the lag (head - after) above which a sync answers
	// too long instead of entries. Default 500 (docs/protocol.md).
	TooLongLag int64

	// PageDefault and PageMax are the default and largest page size of
	// sync, the conversation list and history. Defaults 50 and 200.
	PageDefault int
	PageMax     int

	// WakeJitter is the window over which the wake-ups of one notification
	// are spread; WakeBurst waiters are woken at once in each step, the
	// first step immediately. Negative disables the spreading.
	// Defaults 5ms and 64.
	WakeJitter time.Duration
	WakeBurst  int

	// ListenBackoffMax caps the backoff between reconnects of the LISTEN
	// connection. Default 5s.
	ListenBackoffMax time.Duration

	// ShutdownTimeout bounds the graceful shutdown of Run after the held
	// long-polls were released. Default 10s.
	ShutdownTimeout time.Duration

	// MessageCacheBytes bounds the memory of the message cache: the wire
	// form of messages read for sync pages and pushes, reused for every
	// page, frame and member that carries them (messages never change).
	// Negative disables it. Default 256 MiB.
	MessageCacheBytes int64

	// HeadCacheUsers bounds the users whose inbox heads the gateway
	// remembers (learned from reads, moved by the notifications) to answer
	// a client at its head with 304 without a query. Forgotten whenever the
	// LISTEN connection drops and when a replay announces a new epoch.
	// Negative disables it. Default 1,048,576.
	HeadCacheUsers int

	// CountsCacheUsers bounds the users whose unread and mention totals at
	// their inbox head are remembered, so that a sync at the same head does
	// not count them again (gateway/inbox/counts.go). Negative disables
	// it. Default inbox.DefaultCountsCacheUsers (65,536).
	CountsCacheUsers int

	// TokenCache bounds the verified bearer tokens remembered (until their
	// expiry) so that a token is verified once, not on every request.
	// Negative disables it. Default 65,536.
	TokenCache int
	// ConversationRoles makes new conversations enforce their members'
	// roles (docs/protocol.md, "Roles": only admins and the owner add and
	// remove members, moderators and up delete others' messages) unless
	// their creation says otherwise. Off by default: any member adds and
	// removes members, as before roles, so that clients built on that
	// keep working; roles are kept and shown either way.
	ConversationRoles bool
	// RateShareInterval is how often the gateway tells the others what its
	// users spent of their send buckets (rateshare.go), so that a user's
	// rate holds across gateways. Negative: each gateway counts alone.
	// Default DefaultRateShareInterval.
	RateShareInterval time.Duration
	// RevocationPoll is how often the gateway reads the revocations added
	// (revocations.go): the longest a revoked token still works here.
	// Default DefaultRevocationPoll.
	RevocationPoll time.Duration

	// WebSocket configures GET /v1/ws; see WSConfig.
	WebSocket WSConfig

	// Reconnect configures the reconnect hints and the start-up admission
	// of new sessions; see ReconnectConfig.
	Reconnect ReconnectConfig

	// Ephemeral configures typing and presence (channel, expiries, grace);
	// see EphemeralConfig. Its Registerer and Logger default to this
	// Config's.
	Ephemeral EphemeralConfig

	// ServerAPI configures the server API (server_api.go): its per-key
	// rate limit; see ServerAPIConfig.
	ServerAPI ServerAPIConfig

	// Attachments are files in messages (docs/protocol.md,
	// "Attachments"); off without a Store.
	Attachments AttachmentsConfig

	// Logger. Default slog.Default().
	Logger *slog.Logger

	// ReadyChecks are run by GET /readyz beside its own checks, by name: a
	// non-nil error makes it 503 with the error under that name (inboxd
	// dev adds the fanout's partitions). Default none.
	ReadyChecks map[string]func(context.Context) error

	// Registerer receives the metrics. Default: a registry private to this
	// gateway.
	Registerer prometheus.Registerer

	// Gatherer is what GET /metrics serves. Default: Registerer when it is
	// also a Gatherer (a *prometheus.Registry), else prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
}

// setDefaults puts the default of every zero field in place. The order
// matters where a default derives from another field (MaxRequestBytes from
// MaxBody).
func (c *Config) setDefaults() {
	setDefault(&c.Addr, DefaultAddr)
	setDefault(&c.DevTokenTTL, DefaultDevTokenTTL)
	setDefault(&c.Channel, projection.DefaultChannel)
	setDefault(&c.AckWait, DefaultAckWait)
	setDefault(&c.SearchTimeout, DefaultSearchTimeout)
	setDefault(&c.AppendTimeout, DefaultAppendTimeout)
	setDefault(&c.MaxBody, events.DefaultMaxBody)
	setDefault(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&c.MaxRequestBytes, max(64<<10, 8*int64(c.MaxBody)))
	setDefault(&c.MaxMembers, events.MaxMembers)
	setDefault(&c.MentionAllMax, DefaultMentionAllMax)
	setDefault(&c.SendCheckBatch, DefaultSendCheckBatch)
	setDefault(&c.SendCheckRunners, DefaultSendCheckRunners)
	setDefault(&c.LongPollMax, DefaultLongPollMax)
	setDefault(&c.MaxHeldPolls, DefaultMaxHeldPolls)
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.SendRate, DefaultSendRate)
	setDefault(&c.SendBurst, DefaultSendBurst)
	setDefault(&c.SyncRate, DefaultSyncRate)
	setDefault(&c.SyncBurst, DefaultSyncBurst)
	setDefault(&c.TooLongLag, inbox.DefaultTooLongLag)
	setDefault(&c.PageDefault, DefaultPageDefault)
	setDefault(&c.PageMax, DefaultPageMax)
	setDefault(&c.WakeJitter, hub.DefaultWakeJitter)
	setDefault(&c.WakeBurst, hub.DefaultWakeBurst)
	setDefault(&c.ListenBackoffMax, DefaultListenBackoff)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.MessageCacheBytes, inbox.DefaultMessageCacheBytes)
	setDefault(&c.HeadCacheUsers, hub.DefaultHeadCacheUsers)
	setDefault(&c.CountsCacheUsers, inbox.DefaultCountsCacheUsers)
	setDefault(&c.TokenCache, DefaultTokenCache)
	setDefault(&c.RevocationPoll, DefaultRevocationPoll)
	setDefault(&c.RateShareInterval, DefaultRateShareInterval)
	c.Attachments.setDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Ephemeral.Logger == nil {
		c.Ephemeral.Logger = c.Logger
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer = reg
		if c.Gatherer == nil {
			c.Gatherer = reg
		}
	}
	if c.Ephemeral.Registerer == nil {
		c.Ephemeral.Registerer = c.Registerer
	}
	c.ServerAPI.setDefaults()
	if c.Gatherer == nil {
		if g, ok := c.Registerer.(prometheus.Gatherer); ok {
			c.Gatherer = g
		} else {
			c.Gatherer = prometheus.DefaultGatherer
		}
	}
}

// setDefault sets *p to def when it is the zero value.
func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

func (c *Config) validate() error {
	if err := c.Attachments.validate(); err != nil {
		return err
	}
	switch {
	case len(c.AuthSecret) == 0 && c.AuthJWKSURL == "":
		return errors.New("gateway: AuthSecret or AuthJWKSURL is required")
	case c.DevMode && len(c.AuthSecret) == 0:
		return errors.New("gateway: DevMode needs AuthSecret (dev tokens are HS256)")
	case c.AckWait < 0, c.SearchTimeout < 0, c.AppendTimeout < 0, c.DevTokenTTL < 0, c.PollInterval < 0,
		c.ListenBackoffMax < 0, c.ShutdownTimeout < 0:
		return errors.New("gateway: durations must not be negative")
	case c.RevocationPoll <= 0:
		return errors.New("gateway: RevocationPoll must be positive")
	case c.MaxHeaderBytes < 1024:
		return fmt.Errorf("gateway: MaxHeaderBytes %d below 1024", c.MaxHeaderBytes)
	case c.MaxBody < 0 || c.MaxRequestBytes < int64(c.MaxBody):
		return fmt.Errorf("gateway: MaxRequestBytes %d below MaxBody %d", c.MaxRequestBytes, c.MaxBody)
	case c.MaxMembers < 0 || c.MaxMembers > events.MaxMembers:
		return fmt.Errorf("gateway: MaxMembers %d outside 1..%d", c.MaxMembers, events.MaxMembers)
	case c.LongPollMax < time.Second:
		return fmt.Errorf("gateway: LongPollMax %v below 1s", c.LongPollMax)
	case c.MaxHeldPolls < 0:
		return errors.New("gateway: MaxHeldPolls must not be negative")
	case c.SendRate < 0 || c.SyncRate < 0 || c.SendBurst < 1 || c.SyncBurst < 1:
		return errors.New("gateway: rates must be positive and bursts at least 1")
	case c.TooLongLag < 1:
		return errors.New("gateway: TooLongLag must be positive")
	case c.PageDefault < 1 || c.PageMax < c.PageDefault:
		return fmt.Errorf("gateway: page sizes default %d, max %d", c.PageDefault, c.PageMax)
	case c.WakeBurst < 1:
		return errors.New("gateway: WakeBurst must be positive")
	}
	return c.ServerAPI.validate()
}
