package client

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// breakerState is the circuit breaker's state.
type breakerState int

const (
	breakerClosed   breakerState = iota // attempts as the backoff allows
	breakerOpen                         // no attempt until the cool-down ends
	breakerHalfOpen                     // one probe; its failure opens again
)

// policy decides the waits between attempts of one loop (the sync loop, the
// outbox): capped exponential backoff with full jitter, reset only after a
// stable period; the server's Retry-After when it gave one; and a circuit
// breaker that, after BreakerThreshold failures in a row, stops attempts
// for BreakerCooldown and then lets one probe through. A policy belongs to
// one goroutine.
type policy struct {
	exp       *backoff.ExponentialBackOff
	stable    time.Duration
	threshold int
	cooldown  time.Duration
	rnd       *rand.Rand

	fails int
	state breakerState
}

func newPolicy(c *Config, rnd *rand.Rand) *policy {
	exp := backoff.NewExponentialBackOff()
	exp.InitialInterval = c.BackoffInitial
	exp.MaxInterval = c.BackoffMax
	exp.Multiplier = 2
	exp.RandomizationFactor = 0 // the jitter is full jitter, below
	exp.MaxElapsedTime = 0      // never give up on temporary errors
	exp.Reset()
	return &policy{exp: exp, stable: c.StablePeriod, threshold: c.BreakerThreshold, cooldown: c.BreakerCooldown, rnd: rnd}
}

// jitter returns a uniform duration in [0, d].
func (p *policy) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(p.rnd.Int64N(int64(d) + 1))
}

// failed returns the wait after an attempt that ended with err. established
// says whether the attempt got through to the server (a session came up, a
// request was answered) and lasted how long it stayed up: only a session
// that stayed up for the stable period resets the backoff, so a server that
// accepts and drops at once is still backed off from.
func (p *policy) failed(err error, established bool, lasted time.Duration) (wait time.Duration, opened bool) {
	if established && lasted >= p.stable {
		p.exp.Reset()
	}
	wait = p.jitter(p.exp.NextBackOff()) // full jitter: uniform in [0, cap]
	if ra := retryAfter(err); ra > 0 {
		// The server knows better; a little jitter on top so that the
		// clients it told the same thing do not come back at once,
		// unless it picked this moment for this client (hints.go).
		wait = ra
		if !exactRetryAfter(err) {
			wait += p.jitter(ra / 5)
		}
	}
	if established {
		p.fails, p.state = 0, breakerClosed
		return wait, false
	}
	p.fails++
	if p.state == breakerHalfOpen || p.fails >= p.threshold {
		// Open: the wait covers the cool-down (jittered by up to a
		// fifth); the attempt after it is the half-open probe.
		p.state = breakerHalfOpen
		p.fails = 0
		wait = max(wait, p.cooldown+p.jitter(p.cooldown/5))
		return wait, true
	}
	return wait, false
}

// succeeded records an attempt that got through (for the breaker), without
// touching the backoff.
func (p *policy) succeeded() {
	p.fails, p.state = 0, breakerClosed
}

// reset forgets the failures (a stable period has passed).
func (p *policy) reset() {
	p.exp.Reset()
	p.succeeded()
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date. 0 when absent or malformed.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseInt(h, 10, 64); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, 24*time.Hour)
		}
	}
	return 0
}
