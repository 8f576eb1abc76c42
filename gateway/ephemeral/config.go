package ephemeral

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/projection"
)

// Defaults of Config.
const (
	DefaultTypingExpiry   = 6 * time.Second
	DefaultTypingInterval = 2 * time.Second
	DefaultPresenceGrace  = 10 * time.Second
	DefaultPresenceExpiry = 30 * time.Second
	DefaultQueue          = 4096
	workers               = 4
)

// Blocks is what a Service asks of the gateway's blocks between users.
type Blocks interface {
	// Blocks says whether blocker blocks other; it may read a database.
	Blocks(ctx context.Context, blocker, other int64) bool
}

// Config configures a Service. The zero value of every field means its
// default.
type Config struct {
	// Channel is the NOTIFY channel the gateways share typing and
	// presence on. Every gateway of one database must use the same.
	// Default projection.DefaultEphemeralChannel ("inboxd_ephemeral").
	Channel string

	// GatewayID names this process in the presence tables. Default a
	// random uuid per Service: a restarted process is a new gateway, and
	// its old rows are reaped with the old id.
	GatewayID string

	// TypingExpiry is the expires_in_ms of a typing frame: how long a
	// client shows a member typing without a newer frame. Default 6s.
	TypingExpiry time.Duration

	// TypingInterval: at most one typing broadcast per user, conversation
	// and gateway per interval; faster frames are dropped silently (a
	// client may send one per keystroke). Keep it well below TypingExpiry
	// so that continued typing refreshes the frame before it expires.
	// Default 2s.
	TypingInterval time.Duration

	// PresenceGrace is how long a user stays online after their last
	// WebSocket session on this gateway ended, so that a reconnect (to any
	// gateway) within it publishes nothing. Default 10s.
	PresenceGrace time.Duration

	// PresenceExpiry: a gateway whose heartbeat (written every
	// PresenceExpiry/3) is older than this is dead, and its users go
	// offline unless another gateway holds them. It bounds how long the
	// users of a killed gateway look online. Default 30s.
	PresenceExpiry time.Duration

	// PlacementVersion is the version of the placement this gateway reads
	// (docs/scaling.md), written with its heartbeat so that a move of a
	// partition waits for the gateways of older versions to restart before
	// it removes the partition from its old server. 0: not written.
	PlacementVersion int64

	// Queue bounds the notifications waiting for delivery; past it they
	// are dropped (and counted): typing and presence are best effort.
	// Default 4096.
	Queue int

	// Blocks tells who blocks whom (docs/protocol.md, "Blocks"): a typing,
	// presence or receipt frame about a user is not delivered to the users
	// who block it. Default nil: nobody blocks anybody.
	Blocks Blocks

	// Registerer receives the metrics; a second Service on the same
	// registry shares the first one's. Default a registry of its own.
	Registerer prometheus.Registerer

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Channel == "" {
		c.Channel = projection.DefaultEphemeralChannel
	}
	if c.GatewayID == "" {
		c.GatewayID = uuid.NewString()
	}
	if c.TypingExpiry == 0 {
		c.TypingExpiry = DefaultTypingExpiry
	}
	if c.TypingInterval == 0 {
		c.TypingInterval = DefaultTypingInterval
	}
	if c.PresenceGrace == 0 {
		c.PresenceGrace = DefaultPresenceGrace
	}
	if c.PresenceExpiry == 0 {
		c.PresenceExpiry = DefaultPresenceExpiry
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if _, err := uuid.Parse(c.GatewayID); err != nil {
		return errors.New("gateway: ephemeral GatewayID must be a uuid")
	}
	switch {
	case c.TypingExpiry < time.Millisecond || c.TypingInterval < 0 || c.PresenceGrace < 0:
		return errors.New("gateway: typing expiry must be positive, typing interval and presence grace not negative")
	case c.PresenceExpiry < 30*time.Millisecond:
		return errors.New("gateway: presence expiry must be at least 30ms")
	case c.Queue < 1:
		return errors.New("gateway: ephemeral queue must be positive")
	}
	return nil
}
