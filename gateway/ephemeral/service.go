package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/projection"
)

// Deliver is how a local session takes a typing or presence frame: kind is
// the frame's type, frame its encoding (shared by every session it goes
// to: never modified). It reports whether the frame was queued; it must
// not block.
type Deliver = func(kind string, frame []byte) bool

// listener is one local session.
type listener struct {
	user    int64
	deliver Deliver
}

// Service is the typing and presence of one gateway process (see the
// package doc). Create it with New, hand Handle to the hub as the
// payload function of Config.Channel, and run Run while the gateway
// listens. It is safe for concurrent use.
type Service struct {
	cfg    Config
	pool   *pgxpool.Pool    // the catalog: presence, settings, the channel
	srv    *servers.Servers // where conversations and member spans are
	limits *ratelimit.Limiters
	log    *slog.Logger
	m      *metrics

	mu     sync.Mutex
	local  map[int64]map[*listener]struct{} // the local sessions by user
	grace  map[int64]*time.Timer            // users with no local session, in their grace period
	typing map[typingKey]typingState        // typing rate limits

	// Presence rows to write or delete, by shard of user id, and the
	// deliveries of heard tokens, likewise: one worker per shard keeps
	// the order of one user's changes.
	sync [workers]*syncShard
	in   [workers]chan token

	running atomic.Bool
	halted  atomic.Bool
}

// token is one parsed token of the ephemeral channel.
type token struct {
	typing   *projection.Typing
	presence *projection.Presence
	receipt  *projection.Read
}

// New makes a Service over pool; limits is the bucket a typing broadcast
// spends a token of (the gateway's write bucket).
func New(cfg Config, pool *pgxpool.Pool, limits *ratelimit.Limiters) (*Service, error) {
	if pool == nil {
		return nil, errors.New("gateway: ephemeral needs a pool and rate limits")
	}
	return NewOn(cfg, servers.One(pool), limits)
}

// NewOn is New on the servers of a placement: the presence rows, the
// settings and the ephemeral channel are the catalog's; who is a member,
// and so who shares a conversation or hears a frame, is read on the
// conversations' servers.
func NewOn(cfg Config, srv *servers.Servers, limits *ratelimit.Limiters) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if srv == nil || limits == nil {
		return nil, errors.New("gateway: ephemeral needs a pool and rate limits")
	}
	pool := srv.Catalog()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("gateway: register ephemeral metrics: %w", err)
	}
	s := &Service{cfg: cfg, pool: pool, srv: srv, limits: limits, log: cfg.Logger, m: m,
		local: map[int64]map[*listener]struct{}{}, grace: map[int64]*time.Timer{}, typing: map[typingKey]typingState{}}
	for i := range s.sync {
		s.sync[i] = newSyncShard()
		s.in[i] = make(chan token, max(cfg.Queue/workers, 1))
	}
	return s, nil
}

// Channel is the NOTIFY channel to hand Handle's payloads from.
func (s *Service) Channel() string { return s.cfg.Channel }

// GatewayID is this process's id in the presence tables.
func (s *Service) GatewayID() string { return s.cfg.GatewayID }

// Join registers a local WebSocket session of user, which then gets the
// typing and presence frames user may see through deliver, and counts it
// for user's presence. The returned leave unregisters it; call it once,
// when the session ends.
func (s *Service) Join(user int64, deliver Deliver) (leave func()) {
	l := &listener{user: user, deliver: deliver}
	s.mu.Lock()
	set := s.local[user]
	if set == nil {
		set = map[*listener]struct{}{}
		s.local[user] = set
	}
	set[l] = struct{}{}
	first := len(set) == 1
	if t := s.grace[user]; first && t != nil {
		t.Stop() // back within the grace: presence does not change
		delete(s.grace, user)
	}
	s.mu.Unlock()
	if first {
		s.want(user) // presence, and the connection row (no grace)
	}
	var once sync.Once
	return func() { once.Do(func() { s.leave(l) }) }
}

// leave unregisters l; the user's last local session starts the grace.
func (s *Service) leave(l *listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.local[l.user]
	delete(set, l)
	if len(set) > 0 {
		return
	}
	delete(s.local, l.user)
	user := l.user
	s.want(user) // the connection row goes now; presence after the grace
	var t *time.Timer
	t = time.AfterFunc(s.cfg.PresenceGrace, func() {
		s.mu.Lock()
		mine := s.grace[user] == t
		if mine {
			delete(s.grace, user)
		}
		s.mu.Unlock()
		if mine {
			s.want(user)
		}
	})
	s.grace[user] = t
}

// wantOnline reports whether this gateway holds user: a local session, or
// the grace after the last one.
func (s *Service) wantOnline(user int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.local[user]) > 0 || s.grace[user] != nil
}

// connected reports whether user has a local session now (no grace).
func (s *Service) connected(user int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.local[user]) > 0
}

// localUsers lists the users with local sessions.
func (s *Service) localUsers() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int64, 0, len(s.local))
	for u := range s.local {
		out = append(out, u)
	}
	return out
}

// localCount is the number of users with a session here.
func (s *Service) localCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.local)
}

// deliver hands frame, about user from, to the local sessions of users
// but those of the users who block from (Config.Blocks).
func (s *Service) deliver(ctx context.Context, users []int64, from int64, kind string, frame []byte) {
	var ls []*listener
	s.mu.Lock()
	for _, u := range users {
		for l := range s.local[u] {
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	for _, l := range ls {
		if s.cfg.Blocks != nil && s.cfg.Blocks.Blocks(ctx, l.user, from) {
			continue
		}
		if l.deliver(kind, frame) {
			s.m.delivered.WithLabelValues(kind).Inc()
		} else {
			s.m.dropped.WithLabelValues(kind).Inc()
		}
	}
}

// Handle takes one payload of the ephemeral channel (the hub's LISTEN
// goroutine calls it): its tokens are queued for delivery, by user, and
// dropped when the queue is full. It never blocks.
func (s *Service) Handle(payload string) {
	e := projection.ParseEphemeral(payload)
	for i := range e.Typing {
		s.enqueue(e.Typing[i].User, token{typing: &e.Typing[i]})
	}
	for i := range e.Presence {
		s.enqueue(e.Presence[i].User, token{presence: &e.Presence[i]})
	}
}

func (s *Service) enqueue(user int64, t token) {
	select {
	case s.in[uint64(user)%workers] <- t:
		s.m.notifications.WithLabelValues("received").Inc()
	default:
		s.m.notifications.WithLabelValues("dropped").Inc()
	}
}

// Run runs the delivery and presence workers and the heartbeat until ctx
// ends. At its end the gateway's heartbeat is set to expire after the
// grace period, so that its users go offline then, unless they moved to
// another gateway: a restart does not make them flap.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("gateway: ephemeral already running")
	}
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); s.deliverLoop(ctx, s.in[i]) }()
		go func() { defer wg.Done(); s.syncLoop(ctx, s.sync[i]) }()
	}
	s.heartbeatLoop(ctx)
	wg.Wait()
	s.mu.Lock()
	for u, t := range s.grace {
		t.Stop()
		delete(s.grace, u)
	}
	s.mu.Unlock()
	if !s.halted.Load() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := s.pool.Exec(cctx, sqlRetire, s.cfg.GatewayID, secs(s.cfg.PresenceExpiry-s.cfg.PresenceGrace)); err != nil {
			s.log.Warn("retiring the gateway's presence failed", "err", err)
		}
		// Its connections end now (no grace): the notifier reaches its users.
		if _, err := s.pool.Exec(cctx, `DELETE FROM connections WHERE gateway_id = $1`, s.cfg.GatewayID); err != nil {
			s.log.Warn("deleting the gateway's connections failed", "err", err)
		}
	}
	return nil
}

// deliverLoop delivers the tokens of one shard.
func (s *Service) deliverLoop(ctx context.Context, in <-chan token) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-in:
			if s.halted.Load() {
				continue
			}
			var err error
			switch {
			case t.typing != nil:
				err = s.deliverTyping(ctx, *t.typing)
			case t.receipt != nil:
				err = s.deliverReceipt(ctx, *t.receipt)
			default:
				err = s.deliverPresence(ctx, *t.presence)
			}
			if err != nil && ctx.Err() == nil {
				s.m.deliveryErrs.Inc()
				s.log.Warn("ephemeral delivery failed", "err", err)
			}
		}
	}
}

// Halt makes the Service behave as a process killed at once: it stops
// writing and delivering (no heartbeat, no presence rows, no frames), so
// that the other gateways reap it after PresenceExpiry. For tests.
func (s *Service) Halt() { s.halted.Store(true) }

// secs is d in seconds, for SQL intervals.
func secs(d time.Duration) float64 { return d.Seconds() }
