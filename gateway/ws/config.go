package ws

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultHeartbeat        = 20 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultHelloTimeout     = 10 * time.Second
	DefaultSlowTimeout      = 30 * time.Second
	DefaultQueueBytes       = 512 << 10
	DefaultControlQueue     = 256
	DefaultPushBatch        = 256
	DefaultPushWindow       = 2 * time.Millisecond
	DefaultPushWorkers      = 4
	DefaultPushMaxSessions  = 1000
	DefaultMaxConns         = 16384
	DefaultMaxConnsPerUser  = 16
	DefaultMaxInflightSends = 8
	DefaultCloseGrace       = time.Second
	DefaultRetryAfter       = 5 * time.Second
	DefaultMaxFrameBytes    = 64 << 10
	DefaultLargePushRate    = 10000
	maxLargePushInterval    = time.Second
)

// Config configures the WebSocket endpoint GET /v1/ws (see Server).
// The zero value of every field means its default. (The gateway's
// NewWebSocket fills MaxFrameBytes and Registerer from its own Config
// before New applies the defaults below.)
type Config struct {
	// HeartbeatInterval is the mean interval of the {"type":"heartbeat"}
	// frames (each one jittered by ±10%). Every heartbeat re-reads the
	// user's head from PostgreSQL (batched with the pushes), so a client
	// whose last push was lost (the LISTEN connection dropped) gets it, or
	// at least learns the head, within one interval. A WebSocket ping goes
	// out with each heartbeat. Shorter intervals repair faster and cost one
	// head read per connection per interval. Default 20s.
	HeartbeatInterval time.Duration

	// ReadTimeout closes a connection from which nothing (no frame, no
	// pong) arrived for this long. Browsers answer the server's pings
	// automatically. Default 2*HeartbeatInterval + 10s.
	ReadTimeout time.Duration

	// WriteTimeout bounds every write to the socket. A write that cannot
	// complete in time (the client stopped reading and the kernel buffers
	// are full) closes the session with 4008: the unsent rest of its frame
	// is kept (see stallConn), the close frame follows it, and both get
	// another WriteTimeout to reach the client before the connection is
	// dropped. Default 10s.
	WriteTimeout time.Duration

	// HelloTimeout is how long a new connection may take to send its
	// hello; past it the server closes with 1008. Default 10s.
	HelloTimeout time.Duration

	// SlowTimeout: a session that has had entries waiting in PostgreSQL
	// that its full outbound queue could not take, without ever catching
	// up to the head, for this long is closed with 4008 (too slow). The
	// client reconnects with its cursor and catches up from PostgreSQL,
	// or gets too_long. Default 30s.
	SlowTimeout time.Duration

	// QueueBytes bounds the encoded frames queued for one connection. The
	// pusher reads more entries for a session only while less than half
	// of this is queued, so a connection costs at most about QueueBytes/2
	// plus one batch of PushBatch entries, however far behind it is: the
	// rest waits in PostgreSQL. Default 512 KiB.
	QueueBytes int

	// ControlQueue bounds the replies (pong, send_ack, error) queued for
	// one connection; a client that keeps asking without reading the
	// answers is closed with 4008. Default 256.
	ControlQueue int

	// PushBatch is the most entries read for one session in one query and
	// sent in one entries frame; a lagging session is caught up in frames
	// of this size. It is also the size of the catch-up frames after
	// hello. Default 256.
	PushBatch int

	// PushWindow is how long the pusher collects signalled sessions
	// before it reads their entries in one query. It adds up to this much
	// latency to an idle system and turns the wake-ups of one commit into
	// one query. Negative disables the window (every signal is read at
	// once, still batched with whatever is pending). Default 2ms.
	PushWindow time.Duration

	// LargePushRate paces the pushes of a read-mode conversation
	// (docs/large-conversations.md): one with n aware sessions here is
	// pushed at most once per n/LargePushRate seconds (at most 1s), the
	// messages in between in its next frame, so its frames cost this
	// process about LargePushRate writes a second however many members
	// are connected (1,000 members: a frame every 100ms; 15,000: every
	// second, the cap). A conversation with few sessions here is pushed
	// at once. Negative: never paced. Default 10000 (about 0.1 core of
	// write syscalls: docs/large-conversations.md has the measurements).
	LargePushRate float64

	// PushWorkers is how many push queries may run at once. While all
	// are busy, signalled sessions accumulate into bigger batches.
	// Default 4.
	PushWorkers int

	// PushMaxSessions bounds the sessions read by one push query.
	// Default 1000.
	PushMaxSessions int

	// MaxConns caps the WebSocket connections of this process; beyond it a
	// connection is closed with 4029 and a retry_after. Keep it below the
	// process's open-file limit minus what the pool and Kafka need.
	// Default 16384.
	MaxConns int

	// MaxConnsPerUser caps the connections of one user on this process;
	// beyond it 4029. Default 16.
	MaxConnsPerUser int

	// MaxInflightSends bounds the sends of one connection waiting for
	// their projection; while at the bound, the connection's next frame
	// is not read (backpressure on the client). Default 8.
	MaxInflightSends int

	// MaxFrameBytes is the read limit of one client frame; a bigger frame
	// closes the connection with 1009. Default the gateway's
	// MaxRequestBytes; DefaultMaxFrameBytes (64 KiB) for a Server made
	// with New alone.
	MaxFrameBytes int64

	// AllowedOrigins lists the browser origins (scheme://host[:port],
	// compared case-insensitively) allowed to connect; "*" allows any.
	// Empty allows the same origin only (Origin's host equals the request's
	// Host), which is what the bundled web demo needs, in dev mode too.
	// Requests without an Origin header (programs, not browsers) are always
	// allowed: the bearer token is the credential, not a cookie. A refused
	// origin is closed with 4003 after the upgrade.
	AllowedOrigins []string

	// CloseGrace is how long the server waits for the client's close frame
	// after sending its own before dropping the TCP connection.
	// Default 1s.
	CloseGrace time.Duration

	// RetryAfter is the retry_after_ms of a connection refused for a
	// connection cap. Default 5s.
	RetryAfter time.Duration

	// Registerer receives the WebSocket metrics. Default the gateway's
	// Config.Registerer; a registry of its own for a Server made with New
	// alone.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeat
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 2*c.HeartbeatInterval + 10*time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.SlowTimeout == 0 {
		c.SlowTimeout = DefaultSlowTimeout
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.ControlQueue == 0 {
		c.ControlQueue = DefaultControlQueue
	}
	if c.PushBatch == 0 {
		c.PushBatch = DefaultPushBatch
	}
	if c.PushWindow == 0 {
		c.PushWindow = DefaultPushWindow
	}
	if c.PushWorkers == 0 {
		c.PushWorkers = DefaultPushWorkers
	}
	if c.LargePushRate == 0 {
		c.LargePushRate = DefaultLargePushRate
	}
	if c.PushMaxSessions == 0 {
		c.PushMaxSessions = DefaultPushMaxSessions
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerUser == 0 {
		c.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if c.MaxInflightSends == 0 {
		c.MaxInflightSends = DefaultMaxInflightSends
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.CloseGrace == 0 {
		c.CloseGrace = DefaultCloseGrace
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

func (c *Config) validate() error {
	switch {
	case c.HeartbeatInterval < 10*time.Millisecond:
		return fmt.Errorf("gateway: WebSocket HeartbeatInterval %v below 10ms", c.HeartbeatInterval)
	case c.ReadTimeout <= c.HeartbeatInterval:
		return fmt.Errorf("gateway: WebSocket ReadTimeout %v must exceed HeartbeatInterval %v", c.ReadTimeout, c.HeartbeatInterval)
	case c.WriteTimeout < 0, c.HelloTimeout < 0, c.SlowTimeout < 0, c.CloseGrace < 0, c.RetryAfter < 0:
		return errors.New("gateway: WebSocket durations must not be negative")
	case c.QueueBytes < 1024:
		return fmt.Errorf("gateway: WebSocket QueueBytes %d below 1024", c.QueueBytes)
	case c.ControlQueue < 1, c.PushBatch < 1, c.PushWorkers < 1, c.PushMaxSessions < 1,
		c.MaxConns < 1, c.MaxConnsPerUser < 1, c.MaxInflightSends < 1:
		return errors.New("gateway: WebSocket sizes, caps and worker counts must be positive")
	case c.MaxFrameBytes < 256:
		return fmt.Errorf("gateway: WebSocket MaxFrameBytes %d below 256", c.MaxFrameBytes)
	}
	for _, o := range c.AllowedOrigins {
		if o != "*" && !strings.Contains(o, "://") {
			return fmt.Errorf("gateway: WebSocket allowed origin %q is not scheme://host[:port] or *", o)
		}
	}
	return nil
}
