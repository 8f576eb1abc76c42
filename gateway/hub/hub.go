package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/projection"
)

const hubShards = 64

// Defaults of Config.
const (
	DefaultWakeJitter     = 5 * time.Millisecond
	DefaultWakeBurst      = 64
	DefaultHeadCacheUsers = 1 << 20
)

// Config configures a Hub. The zero value of every field means its default.
type Config struct {
	// WakeJitter is the window over which the wake-ups of one notification
	// are spread; WakeBurst waiters are woken at once in each step, the
	// first step immediately. Negative disables the spreading. Defaults
	// DefaultWakeJitter (5ms) and DefaultWakeBurst (64).
	WakeJitter time.Duration
	WakeBurst  int

	// HeadCacheUsers bounds the users whose heads the head cache keeps
	// (see HeadCache). Negative disables it. Default DefaultHeadCacheUsers.
	HeadCacheUsers int

	// Notifications counts the NOTIFY payloads received and Reconnects
	// the LISTEN connections lost or not opened. Default: not counted.
	Notifications, Reconnects prometheus.Counter

	// Updated is told of every changed message a notification names (its
	// version after the change), and Lost whenever notifications may have
	// been missed (a new LISTEN connection): a reader that keeps messages
	// drops them. Default: nobody is told.
	Updated func(conv, seq, version int64)
	Lost    func()
	// Read is told of every read position a notification names (a read
	// receipt to push). It must not block. Default: nobody is told.
	Read func(conv, user, seq int64)

	// Channels are more NOTIFY channels listened on the same connection
	// (the gateways' ephemeral channel of typing and presence), each with
	// the function its payloads are handed to. It runs on the LISTEN
	// goroutine and must not block. Notifications counts them too.
	// Default none.
	Channels map[string]func(payload string)

	// Servers is the number of PostgreSQL servers the hub listens to
	// (RunServers), each projecting its own users' heads; OfUser names
	// the server (0 to Servers-1) of a user's state, which must be set
	// when Servers > 1. Default 1.
	Servers int
	OfUser  func(user int64) int

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Hub routes notifications to waiters. Waiters subscribe by user id (held
// long-polls, WebSocket sessions) or by key: a send waits on its event id
// (projected, with the seq, or a duplicate) and on its msg_id (refused). A
// Subscription is a coalescing signal: any number of notifications between
// two reads wake the waiter once, and the waiter re-reads PostgreSQL. Run
// holds the LISTEN connection that feeds it. It is safe for concurrent use.
type Hub struct {
	log           *slog.Logger
	jitter        time.Duration
	burst         int
	notifications prometheus.Counter
	reconnects    prometheus.Counter
	updated       func(conv, seq, version int64)
	read          func(conv, user, seq int64)
	lost          func()
	channels      map[string]func(payload string)

	users [hubShards]hubShard
	keyMu sync.Mutex
	keyed map[string]map[*Subscription]struct{} // "r"+msg_id, "e"+event_id

	// heads is a head cache per server (nil when disabled): each is valid
	// while its server's LISTEN connection is up and holds the heads of
	// that server's users at that server's epoch.
	heads  []*HeadCache
	ofUser func(user int64) int

	convWatch convWatch // read-mode conversations (large.go)

	up        atomic.Int32 // LISTEN connections up
	listening atomic.Bool
	spread    sync.WaitGroup // goroutines spreading the wake-ups of one notification
}

type hubShard struct {
	mu   sync.Mutex
	subs map[int64]map[*Subscription]struct{}
}

// Subscription is one waiter's registration. C is signalled (never closed)
// when the waiter should re-read; Head is the highest inbox head notified
// for the user since the Subscription began (0 if none).
type Subscription struct {
	c    chan struct{}
	head atomic.Int64
	h    *Hub
	user int64
	key  string
	once sync.Once
	// For an event subscription: the seq its message was projected at, or
	// dup when its msg_id had been taken (Seq, Dup).
	seq atomic.Int64
	dup atomic.Bool
	// onProjected, when set, is called with the seq on the hub's
	// goroutine as the notification of the event's projection is
	// dispatched, before the members it wakes read anything.
	onProjected func(seq int64)
	// resync is set by a wake-up that carries no head (after the LISTEN
	// connection came back): the waiter must read whatever its head says.
	resync atomic.Bool

	// For a Subscription that wants them (WebSocket sessions): the new
	// entries the notifications announced, contiguous from runFirst.
	wantRuns bool
	runMu    sync.Mutex
	runFirst int64
	run      [][2]int64
}

// maxRun bounds the announced entries a Subscription keeps.
const maxRun = 1024

// addRun appends an announced run; one that does not continue the kept
// run replaces it (what lies between is read from PostgreSQL).
func (s *Subscription) addRun(r projection.Run) {
	s.runMu.Lock()
	if len(s.run) == 0 || r.First != s.runFirst+int64(len(s.run)) {
		s.run, s.runFirst = nil, r.First
	}
	s.run = append(s.run, r.Keys...)
	if n := len(s.run); n > maxRun {
		s.runFirst += int64(n - maxRun)
		s.run = append([][2]int64(nil), s.run[n-maxRun:]...)
	}
	s.runMu.Unlock()
}

// HasRun reports whether announced entries are kept (whether they
// continue a given cursor is TakeRun's to say).
func (s *Subscription) HasRun() bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return len(s.run) > 0
}

// TakeRun returns up to limit announced entries after cursor, if the kept
// run continues exactly from it, and forgets those at or below cursor.
func (s *Subscription) TakeRun(cursor int64, limit int) (first int64, keys [][2]int64) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if drop := cursor + 1 - s.runFirst; drop > 0 {
		if drop >= int64(len(s.run)) {
			s.run = nil
			return 0, nil
		}
		s.run, s.runFirst = s.run[drop:], cursor+1
	}
	if len(s.run) == 0 || s.runFirst != cursor+1 {
		return 0, nil
	}
	n := min(limit, len(s.run))
	return s.runFirst, append([][2]int64(nil), s.run[:n]...)
}

// clearRun forgets the announced entries (a new epoch).
func (s *Subscription) clearRun() {
	s.runMu.Lock()
	s.run = nil
	s.runMu.Unlock()
}

// Seq is, for an event subscription, the seq the event's message was
// projected at; 0 until a notification said so.
func (s *Subscription) Seq() int64 { return s.seq.Load() }

// Dup reports, for an event subscription, whether a notification said the
// event's msg_id had been taken already.
func (s *Subscription) Dup() bool { return s.dup.Load() }

// TakeResync reports (and clears) whether a wake-up without a head came.
func (s *Subscription) TakeResync() bool { return s.resync.Swap(false) }

// New makes a hub; Run connects it.
func New(cfg Config) *Hub {
	if cfg.WakeJitter == 0 {
		cfg.WakeJitter = DefaultWakeJitter
	}
	if cfg.WakeBurst <= 0 {
		cfg.WakeBurst = DefaultWakeBurst
	}
	if cfg.HeadCacheUsers == 0 {
		cfg.HeadCacheUsers = DefaultHeadCacheUsers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Updated == nil {
		cfg.Updated = func(int64, int64, int64) {}
	}
	if cfg.Lost == nil {
		cfg.Lost = func() {}
	}
	if cfg.Read == nil {
		cfg.Read = func(int64, int64, int64) {}
	}
	if cfg.Servers <= 1 {
		cfg.Servers, cfg.OfUser = 1, func(int64) int { return 0 }
	} else if cfg.OfUser == nil {
		panic("hub: several servers without OfUser")
	}
	h := &Hub{log: cfg.Logger, jitter: cfg.WakeJitter, burst: cfg.WakeBurst, updated: cfg.Updated, lost: cfg.Lost, read: cfg.Read,
		channels:      cfg.Channels,
		notifications: cfg.Notifications, reconnects: cfg.Reconnects,
		keyed: map[string]map[*Subscription]struct{}{}, ofUser: cfg.OfUser}
	for range cfg.Servers {
		h.heads = append(h.heads, newHeadCache(cfg.HeadCacheUsers/cfg.Servers))
	}
	for i := range h.users {
		h.users[i].subs = map[int64]map[*Subscription]struct{}{}
	}
	return h
}

// inc counts on c unless it is nil (not counted).
func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// Heads is the head cache the notifications keep current (nil, which
// knows nothing, when disabled): the first server's, the only one of a
// single-server deployment; see HeadsOf.
func (h *Hub) Heads() *HeadCache { return h.heads[0] }

// HeadsOfServer is the head cache of server s (an index from 0).
func (h *Hub) HeadsOfServer(s int) *HeadCache { return h.heads[s] }

// HeadsOf is the head cache of user's server.
func (h *Hub) HeadsOf(user int64) *HeadCache { return h.heads[h.ofUser(user)] }

// UserHeads is what a reader (inbox.Config.Heads) teaches the head caches:
// each user's head goes to its server's cache.
type UserHeads struct{ h *Hub }

// UserHeads is the hub's head caches as a reader teaches them.
func (h *Hub) UserHeads() UserHeads { return UserHeads{h} }

// Generation is the generation of user's server's cache, taken before a read.
func (u UserHeads) Generation(user int64) uint64 { return u.h.HeadsOf(user).Generation() }

// Learn teaches user's server's cache what a read saw (HeadCache.Learn).
func (u UserHeads) Learn(gen uint64, user, epoch, head int64) {
	u.h.HeadsOf(user).Learn(gen, user, epoch, head)
}

// Connected reports whether the LISTEN connections (one per server) are up.
func (h *Hub) Connected() bool { return h.up.Load() == int32(len(h.heads)) }

// Listening reports whether Run is running.
func (h *Hub) Listening() bool { return h.listening.Load() }

// C is signalled when something for the Subscription may have changed.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Head is the highest head notified for the user since subscribing.
func (s *Subscription) Head() int64 { return s.head.Load() }

// Signal wakes the subscription's waiter as a notification would.
func (s *Subscription) Signal() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// Close unsubscribes; it is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		if s.key != "" {
			s.h.keyMu.Lock()
			if set := s.h.keyed[s.key]; set != nil {
				delete(set, s)
				if len(set) == 0 {
					delete(s.h.keyed, s.key)
				}
			}
			s.h.keyMu.Unlock()
			return
		}
		sh := &s.h.users[uint64(s.user)%hubShards]
		sh.mu.Lock()
		if set := sh.subs[s.user]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(sh.subs, s.user)
			}
		}
		sh.mu.Unlock()
	})
}

// SubscribeUser registers a waiter for user's inbox head. Subscribe before
// reading, so that a commit after the read cannot go unnoticed.
func (h *Hub) SubscribeUser(user int64) *Subscription {
	return h.addUser(&Subscription{c: make(chan struct{}, 1), h: h, user: user})
}

func (h *Hub) addUser(s *Subscription) *Subscription {
	sh := &h.users[uint64(s.user)%hubShards]
	sh.mu.Lock()
	set := sh.subs[s.user]
	if set == nil {
		set = map[*Subscription]struct{}{}
		sh.subs[s.user] = set
	}
	set[s] = struct{}{}
	sh.mu.Unlock()
	return s
}

// SubscribeUserRuns is SubscribeUser for a waiter that also keeps the
// entries the notifications announce (TakeRun).
func (h *Hub) SubscribeUserRuns(user int64) *Subscription {
	return h.addUser(&Subscription{c: make(chan struct{}, 1), h: h, user: user, wantRuns: true})
}

// clearRuns forgets every Subscription's announced entries.
func (h *Hub) clearRuns() {
	for i := range h.users {
		sh := &h.users[i]
		sh.mu.Lock()
		for _, set := range sh.subs {
			for s := range set {
				if s.wantRuns {
					s.clearRun()
				}
			}
		}
		sh.mu.Unlock()
	}
}

// SubscribeRejection registers a waiter for the rejection of msgID.
func (h *Hub) SubscribeRejection(msgID string) *Subscription { return h.subscribeKey("r"+msgID, nil) }

// SubscribeEvent registers a waiter for the projection of the message.sent
// event eventID: Seq is set when it was projected, Dup when its msg_id was
// already taken.
func (h *Hub) SubscribeEvent(eventID string) *Subscription { return h.subscribeKey("e"+eventID, nil) }

// SubscribeEventThen is SubscribeEvent with onProjected, called with the
// seq on the hub's goroutine when the notification of the event's
// projection is dispatched, before any session it wakes reads: a sender
// puts its message into the message cache there, so that the members'
// pushes find it (from the waiting sender's goroutine, the pushes often
// came first and read the message from PostgreSQL). It must be quick.
func (h *Hub) SubscribeEventThen(eventID string, onProjected func(seq int64)) *Subscription {
	return h.subscribeKey("e"+eventID, onProjected)
}

func (h *Hub) subscribeKey(key string, onProjected func(int64)) *Subscription {
	s := &Subscription{c: make(chan struct{}, 1), h: h, key: key, onProjected: onProjected}
	h.keyMu.Lock()
	set := h.keyed[key]
	if set == nil {
		set = map[*Subscription]struct{}{}
		h.keyed[key] = set
	}
	set[s] = struct{}{}
	h.keyMu.Unlock()
	return s
}

// dispatch wakes the waiters of one notification payload of server.
func (h *Hub) dispatch(server int, payload string) {
	heads := h.heads[server]
	n := projection.ParseNotification(payload)
	for _, u := range n.Updated {
		h.updated(u.Conv, u.Seq, u.Version) // before any waiter re-reads
	}
	for _, r := range n.Reads {
		h.read(r.Conv, r.User, r.Seq)
	}
	if n.Epoch != 0 {
		heads.reset(true) // a replay swapped the server's projections
		h.clearRuns()
	}
	heads.notified(n.Heads) // before any waiter re-reads
	wake := h.readFanout(&n)
	for user, head := range n.Heads {
		sh := &h.users[uint64(user)%hubShards]
		sh.mu.Lock()
		run, hasRun := n.Runs[user]
		for s := range sh.subs[user] {
			if hasRun && s.wantRuns {
				s.addRun(run)
			}
			for {
				old := s.head.Load()
				if head <= old || s.head.CompareAndSwap(old, head) {
					break
				}
			}
			wake = append(wake, s)
		}
		sh.mu.Unlock()
	}
	if len(n.Rejected)+len(n.Projected)+len(n.Duplicates) > 0 {
		h.keyMu.Lock()
		for _, id := range n.Rejected {
			for s := range h.keyed["r"+id] {
				wake = append(wake, s)
			}
		}
		for id, seq := range n.Projected {
			for s := range h.keyed["e"+id] {
				if s.onProjected != nil && s.seq.Load() == 0 {
					s.onProjected(seq)
				}
				s.seq.Store(seq)
				s.Signal() // a sender waits: no jitter
			}
		}
		for _, id := range n.Duplicates {
			for s := range h.keyed["e"+id] {
				s.dup.Store(true)
				s.Signal()
			}
		}
		h.keyMu.Unlock()
	}
	h.wake(wake)
}

// wakeAll wakes every waiter: after a reconnect, notifications may have been
// lost, so everybody re-reads.
func (h *Hub) wakeAll() {
	var wake []*Subscription
	for i := range h.users {
		sh := &h.users[i]
		sh.mu.Lock()
		for _, set := range sh.subs {
			for s := range set {
				s.resync.Store(true)
				wake = append(wake, s)
			}
		}
		sh.mu.Unlock()
	}
	h.keyMu.Lock()
	for _, set := range h.keyed {
		for s := range set {
			wake = append(wake, s)
		}
	}
	h.keyMu.Unlock()
	h.wake(wake)
}

// wake signals subs: the first burst now, the rest in bursts spread evenly
// over the jitter window in random order.
func (h *Hub) wake(subs []*Subscription) {
	if len(subs) <= h.burst || h.jitter <= 0 {
		for _, s := range subs {
			s.Signal()
		}
		return
	}
	rand.Shuffle(len(subs), func(i, j int) { subs[i], subs[j] = subs[j], subs[i] })
	for _, s := range subs[:h.burst] {
		s.Signal()
	}
	rest := subs[h.burst:]
	steps := (len(rest) + h.burst - 1) / h.burst
	step := h.jitter / time.Duration(steps)
	h.spread.Add(1)
	go func() {
		defer h.spread.Done()
		t := time.NewTicker(max(step, 100*time.Microsecond))
		defer t.Stop()
		for len(rest) > 0 {
			<-t.C
			n := min(h.burst, len(rest))
			for _, s := range rest[:n] {
				s.Signal()
			}
			rest = rest[n:]
		}
	}()
}

// Waiters counts the current subscriptions (for tests and metrics).
func (h *Hub) Waiters() int {
	n := 0
	for i := range h.users {
		sh := &h.users[i]
		sh.mu.Lock()
		for _, set := range sh.subs {
			n += len(set)
		}
		sh.mu.Unlock()
	}
	return n
}

// Run holds the LISTEN connection until ctx ends, reconnecting with capped
// exponential backoff. connect opens a dedicated connection (never a pool
// connection: LISTEN is session state).
func (h *Hub) Run(ctx context.Context, channel string, maxBackoff time.Duration, connect func(context.Context) (*pgx.Conn, error)) error {
	return h.RunServers(ctx, channel, maxBackoff, []func(context.Context) (*pgx.Conn, error){connect})
}

// RunServers is Run on several servers, connects[i] opening a connection
// to server i (Config.Servers of them): one LISTEN connection each, every
// one reconnecting on its own. The channels of Config.Channels are
// listened on the first server's. A reconnection to any server wakes every
// waiter (its notifications may have been lost) and resets only that
// server's head cache.
func (h *Hub) RunServers(ctx context.Context, channel string, maxBackoff time.Duration, connects []func(context.Context) (*pgx.Conn, error)) error {
	if len(connects) != len(h.heads) {
		return fmt.Errorf("hub: %d connections for %d servers", len(connects), len(h.heads))
	}
	if !h.listening.CompareAndSwap(false, true) {
		return errors.New("hub: already running")
	}
	defer h.listening.Store(false)
	defer h.spread.Wait()
	var wg sync.WaitGroup
	for s, connect := range connects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.runServer(ctx, s, channel, maxBackoff, connect)
		}()
	}
	wg.Wait()
	return nil
}

// sqlEpoch is a server's epoch (package projection's meta row).
const sqlEpoch = `SELECT epoch FROM meta`

// runServer holds server s's LISTEN connection until ctx ends.
func (h *Hub) runServer(ctx context.Context, s int, channel string, maxBackoff time.Duration, connect func(context.Context) (*pgx.Conn, error)) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = maxBackoff
	bo.MaxElapsedTime = 0
	for {
		err := h.listen(ctx, s, channel, connect)
		if ctx.Err() != nil {
			return
		}
		inc(h.reconnects)
		if err == nil { // it had been connected: a new outage starts
			bo.Reset()
		}
		d := bo.NextBackOff()
		h.log.Warn("LISTEN connection lost, reconnecting", "channel", channel, "server", s+1, "err", err, "backoff", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// listen connects to server s, listens and dispatches until the
// connection fails. It returns nil when the connection had been
// established (so the backoff resets), else the connect error.
func (h *Hub) listen(ctx context.Context, s int, channel string, connect func(context.Context) (*pgx.Conn, error)) error {
	conn, err := connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// The server's epoch keys the messages a send caches before a read of
	// one of this server's users taught it. It is read before LISTEN (the
	// last statement stays LISTEN, which operators look for): a replay in
	// between is caught by the next read, which sees another epoch and
	// starts the cache over.
	var epoch int64
	if err := conn.QueryRow(ctx, sqlEpoch, pgx.QueryExecModeSimpleProtocol).Scan(&epoch); err != nil {
		return fmt.Errorf("read the epoch: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", channel, err)
	}
	if s == 0 {
		for other := range h.channels {
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{other}.Sanitize()); err != nil {
				return fmt.Errorf("listen %s: %w", other, err)
			}
		}
	}
	heads := h.heads[s]
	heads.reset(true)
	heads.seed(epoch)
	defer heads.reset(false)
	h.up.Add(1)
	defer h.up.Add(-1)
	h.log.Debug("listening for notifications", "channel", channel, "server", s+1)
	// Notifications may have been missed before this connection listened.
	h.lost()
	h.resetReadFanout()
	h.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			h.log.Warn("waiting for notifications failed", "channel", channel, "server", s+1, "err", err)
			return nil
		}
		inc(h.notifications)
		if n.Channel != channel {
			if f := h.channels[n.Channel]; f != nil {
				f(n.Payload)
			}
			continue
		}
		h.dispatch(s, n.Payload)
	}
}
