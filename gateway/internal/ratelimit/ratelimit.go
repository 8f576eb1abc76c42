// Package ratelimit is the gateway's per-user token buckets and the
// X-RateLimit-* headers that report them. The HTTP routes and the
// WebSocket server spend from the same buckets. It is safe for concurrent
// use and owns no goroutine.
package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

// limiterShards spreads the buckets over independently locked maps.
const limiterShards = 32

// Limiters is one kind of per-user token bucket (sends or syncs). Buckets
// are created on first use and dropped when they have been idle long enough
// to be full again, which is indistinguishable from a fresh bucket; the sweep
// runs inline when a shard has grown, so no goroutine owns it.
type Limiters struct {
	limit  rate.Limit
	burst  int
	idle   time.Duration // time to refill an empty bucket
	shards [limiterShards]limiterShard
	// share: the tokens spent here are counted for other gateways
	// (Share, Spent); see docs/decisions.md, "Rate limits across gateways".
	share bool
}

type limiterShard struct {
	mu        sync.Mutex
	m         map[int64]*tokenBucket
	nextSweep int
	spent     map[int64]int // tokens spent here since the last Share
}

type tokenBucket struct {
	lim  *rate.Limiter
	last time.Time
}

// New makes the buckets of limit tokens a second, burst at most.
func New(limit rate.Limit, burst int) *Limiters {
	l := &Limiters{limit: limit, burst: burst}
	if limit > 0 {
		l.idle = time.Duration(float64(burst) / float64(limit) * float64(time.Second))
	}
	for i := range l.shards {
		l.shards[i].m = map[int64]*tokenBucket{}
		l.shards[i].nextSweep = 1024
	}
	return l
}

// State is what the X-RateLimit-* headers report.
type State struct {
	limit     int
	remaining int
	reset     time.Time // when the bucket is full again
	retry     time.Duration
	allowed   bool
}

// Take spends one token of user's bucket at now.
func (l *Limiters) Take(user int64, now time.Time) State {
	if l.limit == rate.Inf {
		return State{limit: l.burst, remaining: l.burst, reset: now, allowed: true}
	}
	s := &l.shards[uint64(user)%limiterShards]
	s.mu.Lock()
	b, ok := s.m[user]
	if !ok {
		if len(s.m) >= s.nextSweep {
			for id, old := range s.m {
				// Full again: a bucket that other gateways' spending put
				// in debt is kept until it has paid it back.
				if now.Sub(old.last) > l.idle && old.lim.TokensAt(now) >= float64(l.burst) {
					delete(s.m, id)
				}
			}
			s.nextSweep = max(1024, 2*len(s.m))
		}
		b = &tokenBucket{lim: rate.NewLimiter(l.limit, l.burst)}
		s.m[user] = b
	}
	b.last = now
	allowed := b.lim.AllowN(now, 1)
	tokens := b.lim.TokensAt(now)
	if allowed && l.share {
		s.spent[user]++
	}
	s.mu.Unlock()

	st := State{limit: l.burst, allowed: allowed, remaining: max(0, int(math.Floor(tokens)))}
	missing := float64(l.burst) - tokens
	st.reset = now.Add(time.Duration(missing / float64(l.limit) * float64(time.Second)))
	if !allowed {
		st.retry = time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second))
	}
	return st
}

// ShareSpending makes the buckets count the tokens spent here, for
// Share to hand to the other gateways. Call it before any Take.
func (l *Limiters) ShareSpending() {
	if l.limit == rate.Inf {
		return
	}
	l.share = true
	for i := range l.shards {
		l.shards[i].spent = map[int64]int{}
	}
}

// Share returns the tokens spent here per user since the last Share (nil
// when none, or when not sharing), and starts counting again.
func (l *Limiters) Share() map[int64]int {
	if !l.share {
		return nil
	}
	var out map[int64]int
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		if len(s.spent) > 0 {
			if out == nil {
				out = map[int64]int{}
			}
			for u, n := range s.spent {
				out[u] += n
			}
			s.spent = map[int64]int{}
		}
		s.mu.Unlock()
	}
	return out
}

// Spent takes n tokens of user's bucket at now, for what the user spent
// on another gateway: the bucket may go into debt (below zero), which
// refuses this gateway's requests until it is paid back, so that a user's
// spending over every gateway keeps to one bucket's rate.
func (l *Limiters) Spent(user int64, n int, now time.Time) {
	if l.limit == rate.Inf || n <= 0 {
		return
	}
	s := &l.shards[uint64(user)%limiterShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[user]
	if !ok {
		b = &tokenBucket{lim: rate.NewLimiter(l.limit, l.burst)}
		s.m[user] = b
	}
	b.last = now
	// A reservation of more than the burst is refused whole: take it in
	// bursts.
	for n > 0 {
		k := min(n, l.burst)
		b.lim.ReserveN(now, k)
		n -= k
	}
}

// SetHeaders writes the X-RateLimit-* headers of st.
func (st State) SetHeaders(h http.Header) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(st.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(st.remaining))
	reset := st.reset.Unix()
	if st.reset.Nanosecond() > 0 {
		reset++
	}
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
}

// Allowed reports whether the token was spent (the request may go on).
func (st State) Allowed() bool { return st.allowed }

// Err is the 429 rate_limited answer of a refused State, with its
// Retry-After.
func (st State) Err() *apierr.Error {
	return &apierr.Error{Status: http.StatusTooManyRequests, Code: protocol.CodeRateLimited,
		Message: "too many requests, retry after the Retry-After seconds", Retryable: true, RetryAfter: st.retry}
}
