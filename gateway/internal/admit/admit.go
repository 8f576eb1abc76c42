// Package admit is the gateway's admission of new sessions and the
// reconnect hints it gives (docs/protocol.md, "Reconnect hints"): a
// gateway admits sessions (a WebSocket hello, an HTTP catch-up sync) at
// the rate it can serve them and tells the others when to come back, and
// when it stops it tells its sessions when to come back, spread over a
// window sized to their number and that rate.
//
// It owns no network and no clock of its own: callers pass the time, so
// that its arithmetic is tested without sleeping. It must not import the
// gateway's other packages.
package admit

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultRate    = 2000
	DefaultMaxWait = 60 * time.Second
	// DefaultClaimSlack is how early a client may come back and still
	// claim the slot it was given: timers fire late rather than early, but
	// the two sides' clocks start at different instants (the answer is in
	// flight meanwhile).
	DefaultClaimSlack = 50 * time.Millisecond
	// DefaultClaimGrace is how long a slot nobody claimed is kept: a client
	// that was told to come back and did not (it went away) must not hold
	// the capacity back for ever.
	DefaultClaimGrace = 2 * time.Second
)

// Config configures a Controller. Zero fields take their defaults.
type Config struct {
	// Rate is the sessions per second admitted: the hello and its catch-up
	// read of a WebSocket, the first sync of a long-polling client. Too
	// high and a crowd makes every catch-up read slow (and time out, and
	// retry); too low and a crowd waits longer than it must. Default
	// DefaultRate.
	Rate float64
	// Burst is how many sessions may be admitted at once above the rate
	// (the bucket's depth). Default Rate/10 (100 ms of the rate), at least 1.
	Burst int
	// MaxWait bounds the wait a refused client is told; beyond it the
	// slot is not reserved (the client will be told again). Default
	// DefaultMaxWait.
	MaxWait time.Duration
	// RestartDelay is when, after a drain, its sessions should come back:
	// 0 behind a load balancer with other gateways (they take the
	// sessions at once), the time a restart takes where one gateway
	// serves alone. Default 0.
	RestartDelay time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Burst == 0 {
		c.Burst = max(1, int(c.Rate/10))
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	switch {
	case c.Rate < 0, c.Burst < 0:
		return errors.New("admit: Rate and Burst must not be negative")
	case c.MaxWait < 0, c.RestartDelay < 0:
		return errors.New("admit: MaxWait and RestartDelay must not be negative")
	}
	return nil
}

// Controller admits sessions at Config.Rate. It is a cell-rate limiter
// (GCRA) with reservations: a refused client is given the next free slot
// and told to come back then; that slot is kept for it (for whoever comes
// first once it is due, since a client cannot be told from another), so
// that a crowd is served in order and each refused client costs one more
// request, not a series of guesses. Safe for concurrent use.
type Controller struct {
	cfg      Config
	interval time.Duration // one session's share of a second
	tau      time.Duration // the burst tolerance

	mu       sync.Mutex
	tat      time.Time   // theoretical arrival time: the next free slot
	reserved []time.Time // due times of the slots given to refused clients, ascending
}

// New returns a Controller.
func New(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	iv := time.Duration(float64(time.Second) / cfg.Rate)
	if iv <= 0 {
		iv = 1
	}
	return &Controller{cfg: cfg, interval: iv, tau: time.Duration(cfg.Burst) * iv}, nil
}

// Decision is the outcome of Admit.
type Decision struct {
	Admitted bool
	// Claimed: admitted on a slot given to a refused client earlier.
	Claimed bool
	// RetryAfter is when a refused client should come back (its slot).
	RetryAfter time.Duration
}

// Admit decides on one new session now.
func (c *Controller) Admit() Decision {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	if len(c.reserved) > 0 && !c.reserved[0].After(now.Add(DefaultClaimSlack)) {
		c.reserved = c.reserved[1:]
		return Decision{Admitted: true, Claimed: true}
	}
	// Conforming, or so close to it that a reserved slot could be taken
	// by the next walk-in before its owner is back.
	if !c.tat.After(now.Add(c.tau + DefaultClaimSlack)) {
		c.tat = later(c.tat, now).Add(c.interval)
		return Decision{Admitted: true}
	}
	// The slot: when the cell rate lets one more in.
	slot := later(c.tat.Add(-c.tau), now)
	wait := slot.Sub(now)
	if wait > c.cfg.MaxWait {
		return Decision{RetryAfter: c.cfg.MaxWait}
	}
	c.tat = c.tat.Add(c.interval)
	c.reserved = append(c.reserved, slot)
	return Decision{RetryAfter: wait}
}

// expireLocked drops the slots due longer than DefaultClaimGrace ago.
func (c *Controller) expireLocked(now time.Time) {
	i := 0
	for i < len(c.reserved) && now.Sub(c.reserved[i]) > DefaultClaimGrace {
		i++
	}
	if i > 0 {
		c.reserved = append(c.reserved[:0], c.reserved[i:]...)
	}
}

// Queue returns the slots given to refused clients and not yet claimed.
func (c *Controller) Queue() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(c.cfg.Now())
	return len(c.reserved)
}

// Window is how long n sessions take to be admitted at the rate.
func (c *Controller) Window(n int) time.Duration {
	return time.Duration(n) * c.interval
}

// Spread returns the reconnect delays of n sessions leaving a draining
// gateway: RestartDelay, then one slot of the rate each, in a random
// order, each jittered within its slot. Sessions that come back on these
// delays arrive at the rate a gateway admits, so none is refused.
func (c *Controller) Spread(n int, rnd *rand.Rand) []time.Duration {
	return c.SpreadFrom(0, n, rnd)
}

// SpreadFrom is Spread for the slots first..first+n-1: a drain that hands
// out its slots in several calls (the WebSockets at once, then each held
// long-poll as it is released) gives each slot once.
func (c *Controller) SpreadFrom(first, n int, rnd *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	for i, k := range rnd.Perm(n) {
		out[i] = c.cfg.RestartDelay + time.Duration(first+k)*c.interval + time.Duration(rnd.Int64N(int64(c.interval)))
	}
	return out
}

// Hint is what a session is told to do if it loses the gateway without a
// word (a crash, a kill -9, a network cut): come back after After, at a
// moment drawn uniformly over Window. Window is a quarter longer than the
// time n sessions take to be admitted: independent uniform draws arrive
// in clumps, and at exactly the admission rate the clumps would be refused
// (and come back on a slot: one request more each).
func (c *Controller) Hint(n int) (after, window time.Duration) {
	return c.cfg.RestartDelay, c.Window(n) * 5 / 4
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
