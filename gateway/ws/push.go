package ws

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/protocol"
)

// pushRetryDelay is how long sessions whose push query failed wait before
// they are read again.
const pushRetryDelay = 500 * time.Millisecond

// pusher reads the entries of signalled sessions, many sessions per query.
// A session is signalled by a hub wake-up of its user, a heartbeat, its
// hello, or its writer draining a full queue; the pusher collects the
// sessions signalled within PushWindow (longer while all PushWorkers are
// busy) and reads, in one statement, every session's entries after its
// cursor up to its user's head, PushBatch at most each. One commit that
// touches 500 users connected here is one or a few queries, not 500.
// The window is for reads only: a session whose next entries the
// notifications announced (the usual case of a live session) is pushed
// from memory, so the batch it is in goes at once: the window would add
// its whole length to every push at low load (docs/decisions.md,
// "Measured reasons behind defaults").
type pusher struct {
	ws *Server

	mu      sync.Mutex
	pending []*session
	firstAt time.Time // when the oldest pending session was added
	// announced: a pending session had announced entries when it was
	// added, so the batch does not wait for the window.
	announced bool
	retry     []*session
	retryAt   time.Time

	kick  chan struct{}
	slots chan struct{}
	wg    sync.WaitGroup
}

func newPusher(ws *Server) *pusher {
	return &pusher{ws: ws, kick: make(chan struct{}, 1), slots: make(chan struct{}, ws.cfg.PushWorkers)}
}

// add hands a session (its fetch state just set to pending) to the pusher.
func (p *pusher) add(s *session) {
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.firstAt = time.Now()
	}
	p.pending = append(p.pending, s)
	if s.sub != nil && s.sub.HasRun() {
		p.announced = true
	}
	p.mu.Unlock()
	p.poke()
}

// hurry ends the window of what is pending: a session in it has
// announced entries since it was added.
func (p *pusher) hurry() {
	p.mu.Lock()
	if len(p.pending) > 0 {
		p.announced = true
	}
	p.mu.Unlock()
	p.poke()
}

func (p *pusher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// retryLater reads s again after pushRetryDelay.
func (p *pusher) retryLater(s *session) {
	p.mu.Lock()
	p.retry = append(p.retry, s)
	if p.retryAt.IsZero() {
		p.retryAt = time.Now().Add(pushRetryDelay)
	}
	p.mu.Unlock()
	p.poke()
}

// run dispatches batches until ctx ends, then waits for the running ones.
func (p *pusher) run(ctx context.Context) {
	defer p.wg.Wait()
	window := p.ws.cfg.PushWindow
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		now := time.Now()
		p.mu.Lock()
		if !p.retryAt.IsZero() && !now.Before(p.retryAt) {
			if len(p.pending) == 0 {
				p.firstAt = now
			}
			p.pending = append(p.pending, p.retry...)
			p.retry, p.retryAt = nil, time.Time{}
		}
		n, first, retryAt, announced := len(p.pending), p.firstAt, p.retryAt, p.announced
		p.mu.Unlock()

		var wait time.Duration
		switch {
		case n == 0 && retryAt.IsZero():
			wait = -1 // until kicked
		case n == 0:
			wait = retryAt.Sub(now)
		case window > 0 && !announced && n < p.ws.cfg.PushMaxSessions && now.Sub(first) < window:
			wait = window - now.Sub(first) // let the batch fill
		}
		if wait != 0 {
			var tc <-chan time.Time
			if wait > 0 {
				timer.Reset(wait)
				tc = timer.C
			}
			// A kick while the window runs is looked at: it may be an
			// announced session, which ends the wait.
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-p.kick:
			case <-tc:
			}
			timer.Stop()
			continue
		}

		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		k := min(len(p.pending), p.ws.cfg.PushMaxSessions)
		batch := make([]*session, k)
		copy(batch, p.pending)
		clear(p.pending[:k])
		p.pending = p.pending[k:]
		if len(p.pending) == 0 {
			p.pending = nil
		} else {
			p.firstAt = time.Now()
		}
		p.announced = false
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.slots }()
			p.work(ctx, batch)
		}()
	}
}

// pushResult is what one push query read for one session (or its error).
type pushResult struct {
	inbox.Page
	err error
}

// work reads one batch and delivers every session's result.
func (p *pusher) work(ctx context.Context, batch []*session) {
	sessions := batch[:0]
	var users, afters []int64
	var limits []int32
	for _, s := range batch {
		if after, ok := s.beginFetch(); ok {
			sessions = append(sessions, s)
			users = append(users, s.user)
			afters = append(afters, after)
			limits = append(limits, int32(p.ws.cfg.PushBatch))
		}
	}
	if len(sessions) == 0 {
		return
	}
	// Sessions whose next entries the notifications announced are pushed
	// from those (their messages from the cache); the others are read.
	announced, sessions, users, afters, limits := p.fromRuns(ctx, sessions, users, afters, limits)
	for i := range announced {
		p.finish(ctx, announced[i].s, &announced[i].r)
	}
	if len(sessions) == 0 {
		return
	}
	m := p.ws.m
	m.batchSize.Observe(float64(len(sessions)))
	start := time.Now()
	results, err := p.read(ctx, users, afters, limits)
	m.batchLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		m.batchErrors.Inc()
		if ctx.Err() == nil {
			p.ws.log.Warn("WebSocket push query failed, retrying", "sessions", len(sessions), "err", err)
		}
		results = make([]pushResult, len(sessions))
		for i := range results {
			results[i].err = err
		}
	}
	for i, s := range sessions {
		p.finish(ctx, s, &results[i])
	}
}

// announcedPush is a session's push built from announced entries.
type announcedPush struct {
	s *session
	r pushResult
}

// fromRuns takes, for each session, the entries after its cursor that the
// notifications announced (hub.Subscription.TakeRun) and resolves their
// messages (inbox.Reader.Resolve: the cache, then one read of the misses
// for all of them). The sessions that had none, or whose messages could
// not all be resolved, are returned for a read, with their cursors and
// limits.
func (p *pusher) fromRuns(ctx context.Context, sessions []*session, users, afters []int64, limits []int32) (
	done []announcedPush, rest []*session, rUsers, rAfters []int64, rLimits []int32) {
	var runs []inbox.Announced
	var owners []int // index in sessions of each run
	for i, s := range sessions {
		first, keys := s.sub.TakeRun(afters[i], int(limits[i]))
		if len(keys) == 0 {
			continue
		}
		epoch, head := s.runBase(first + int64(len(keys)) - 1)
		runs = append(runs, inbox.Announced{User: users[i], Epoch: epoch, Head: head, First: first, Keys: keys})
		owners = append(owners, i)
	}
	if len(runs) == 0 {
		return nil, sessions, users, afters, limits
	}
	pages, ok := p.ws.deps.Inbox.Resolve(ctx, runs)
	taken := make([]bool, len(sessions))
	for ri, pg := range pages {
		if !ok[ri] {
			continue // read instead
		}
		i := owners[ri]
		taken[i] = true
		done = append(done, announcedPush{s: sessions[i], r: pushResult{Page: inbox.Page{Epoch: pg.Epoch, Head: pg.Head, Entries: pg.Entries}}})
	}
	p.ws.m.announced.Add(float64(len(done)))
	for i, s := range sessions {
		if !taken[i] {
			rest, rUsers, rAfters, rLimits = append(rest, s), append(rUsers, users[i]), append(rAfters, afters[i]), append(rLimits, limits[i])
		}
	}
	return done, rest, rUsers, rAfters, rLimits
}

// read reads every session's entries after its cursor (inbox.Reader.Read:
// one statement for all of them, plus one for messages not cached).
func (p *pusher) read(ctx context.Context, users, afters []int64, limits []int32) ([]pushResult, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reqs := make([]inbox.Req, len(users))
	for i := range reqs {
		reqs[i] = inbox.Req{User: users[i], After: afters[i], Limit: limits[i]}
	}
	pages, err := p.ws.deps.Inbox.Read(qctx, reqs, math.MaxInt64)
	if err != nil {
		return nil, fmt.Errorf("push read of %d sessions: %w", len(users), err)
	}
	results := make([]pushResult, len(pages))
	for i, pg := range pages {
		results[i] = pushResult{Page: pg}
	}
	return results, nil
}

// finish hands what was read for s to the session (session.takeFetch),
// after the too-long answer when the stream cannot continue, and does what
// the session asks next: a retry after pushRetryDelay or another read.
func (p *pusher) finish(ctx context.Context, s *session, r *pushResult) {
	if r.err == nil && len(r.Entries) > 0 {
		r.Entries, r.err = s.maskBlocked(ctx, r.Entries)
	}
	var tl *protocol.TooLong
	if r.err == nil && s.mustRebase(r) {
		// A replay started a new epoch, or retention passed the
		// cursor: the stream cannot continue, the client rebases.
		// The push read has no large list: read it (after the head, as
		// the conversation list; positions only grow), rare as rebases are.
		var lists map[int64][]inbox.LargeMembership
		if lists, r.err = p.ws.deps.Inbox.LargeLists(ctx, []int64{s.user}); r.err == nil {
			tl, r.err = p.ws.deps.Rebaser.Rebase(ctx, s.user, &inbox.Result{Page: inbox.Page{Epoch: r.Epoch, Head: r.Head,
				RecordVersion: r.RecordVersion, Large: wireList(lists[s.user])}})
		}
	}
	switch s.takeFetch(r, tl) {
	case fetchRetry:
		p.retryLater(s)
	case fetchAgain:
		p.add(s)
	}
}

// maskBlocked marks and empties the entries of messages whose senders
// s's user blocks (Deps.Blocks), by its blocks now, and keeps them for
// the read-mode frames (lastBlocked).
func (s *session) maskBlocked(ctx context.Context, entries []inbox.Entry) ([]inbox.Entry, error) {
	if s.ws.deps.Blocks == nil {
		return entries, nil
	}
	blocked, err := s.ws.deps.Blocks.Of(ctx, s.user)
	if err != nil {
		return nil, err
	}
	s.blocked.Store(&blocked)
	return inbox.MaskBlocked(entries, blocked), nil
}

// lastBlocked is s's user's blocks as the last push or the hello read
// them: a read-mode frame goes to every subscriber at once, and reading
// each one's blocks then would be a query per member.
func (s *session) lastBlocked() inbox.Blocked {
	if b := s.blocked.Load(); b != nil {
		return *b
	}
	return nil
}
