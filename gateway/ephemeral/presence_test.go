package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Presence (docs/websocket.md, "Typing and presence"): this gateway's row
// of a user follows its sessions (written at the first, deleted a grace
// after the last), only real transitions are published, the heartbeat
// keeps this gateway alive and reaps the dead ones, and GET /v1/presence
// shows what the asker may see.

// published are the presence tokens this world's gateways published; w.mu
// is held.
func (w *world) published() []string {
	var out []string
	for _, c := range w.callsOfLocked("notify") {
		if p := string(c.args[1]); p[0] == 'p' {
			out = append(out, p)
		}
	}
	return out
}

// rowOf reports whether gw has its presence row of user.
func (w *world) rowOf(user int64, gw string) bool { return w.sessions[user][gw] }

// TestPresenceTransitions: a user's first session writes this gateway's
// row and publishes online, the grace after its last deletes it and
// publishes offline with the last seen, unless the transition is none
// (another live gateway holds the user) or hidden.
func TestPresenceTransitions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *world)
		want  func(w *world) []string
	}{
		{name: "alone", want: func(w *world) []string {
			return []string{"p7:1:0", fmt.Sprintf("p7:0:%d", w.lastSeen[7].UnixMilli())}
		}},
		{name: "hides presence", setup: func(w *world) { w.hideP[7] = true }, want: func(*world) []string { return nil }},
		{name: "held by another live gateway", setup: func(w *world) {
			w.sessions[7] = map[string]bool{"other": true}
			w.gateways["other"] = w.now
		}, want: func(*world) []string { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			if tc.setup != nil {
				w.do(func() { tc.setup(w) })
			}
			g := startGateway(t, w, gatewayOpts{cfg: Config{PresenceGrace: time.Millisecond}})
			s := g.join(7)
			w.waitFor(t, "the row and the connection", func() bool { return g.written(7) && w.conns[7][g.id] })
			require.True(t, w.rowOf(7, g.id))
			s.leave()
			w.waitFor(t, "the row deleted after the grace", func() bool { return !g.written(7) && !w.conns[7][g.id] })
			require.False(t, w.rowOf(7, g.id))
			g.end()
			w.mu.Lock()
			defer w.mu.Unlock()
			require.Equal(t, tc.want(w), w.published())
			if len(tc.want(w)) == 0 {
				_, seen := w.lastSeen[7]
				require.Equal(t, tc.name == "hides presence", seen, "last seen is stored when the user went offline")
			}
		})
	}
}

// written reports whether g's presence row of user is written and
// committed, as g knows it.
func (g *gateway) written(user int64) bool {
	sh := g.s.sync[uint64(user)%workers]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.written[user]
}

// TestPresenceGrace: within the grace after the last session, the
// connection row is gone at once but the presence row stays; a session
// back within it changes no presence; more sessions of a user are one row.
func TestPresenceGrace(t *testing.T) {
	w := newWorld()
	g := startGateway(t, w, gatewayOpts{cfg: Config{PresenceGrace: time.Hour}})
	a := g.join(7)
	b := g.join(7)
	w.waitFor(t, "the row", func() bool { return g.written(7) && w.conns[7][g.id] })
	a.leave()
	a.leave() // once
	b.leave()
	w.waitFor(t, "the connection row deleted, at once", func() bool { return !w.conns[7][g.id] })
	require.True(t, g.s.wantOnline(7), "in its grace")
	g.join(7)
	g.s.mu.Lock()
	require.NotContains(t, g.s.grace, int64(7), "the grace is over")
	g.s.mu.Unlock()
	w.waitFor(t, "the connection row again", func() bool { return w.conns[7][g.id] })
	g.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.True(t, w.rowOf(7, g.id))
	require.Equal(t, []string{"p7:1:0"}, w.published(), "no offline, no second online")
	require.Empty(t, w.callsOfLocked("down"))
	require.Len(t, w.callsOfLocked("up"), 1)
}

// TestPresenceRetried: a presence write that fails is tried again (at the
// next wake-up of its worker, a second later at the latest), and a failed
// delivery query is counted.
func TestPresenceRetried(t *testing.T) {
	w := newWorld()
	w.conversation(10, 7, 8)
	w.do(func() {
		w.fail["up"] = errors.New("connection reset")
		w.fail["partners"] = errors.New("connection reset")
	})
	g := startGateway(t, w, gatewayOpts{})
	g.join(8)
	g.join(7)
	w.waitFor(t, "the rows after the retry", func() bool { return g.written(7) && g.written(8) })
	w.waitFor(t, "both presence deliveries", func() bool { return len(w.callsOfLocked("partners")) == 2 })
	g.end()
	require.GreaterOrEqual(t, len(w.callsOf("up")), 3, "one failed and was tried again")
	require.Empty(t, w.fail, "both failures happened")
	require.Equal(t, float64(1), counter(t, g.s.m.deliveryErrs))
}

// TestPresenceDelivery: a presence change is delivered to the local
// sessions of the users sharing a current write-mode conversation with
// its user: not to its own, not through a read-mode conversation, not to
// strangers; with its last seen when offline.
func TestPresenceDelivery(t *testing.T) {
	w := newWorld()
	w.conversation(10, 7, 8)
	w.conversation(20, 7, 9)
	w.conversation(30, 10)
	w.do(func() { w.readFanout[20] = true })
	g := startGateway(t, w, gatewayOpts{noRun: true})
	ctx := context.Background()
	require.NoError(t, g.s.deliverPresence(ctx, projection.Presence{User: 7, Online: true}))
	require.Empty(t, w.callsOf("partners"), "nobody here: not even asked")

	s7, s8, s9, s10 := g.join(7), g.join(8), g.join(9), g.join(10)
	require.NoError(t, g.s.deliverPresence(ctx, projection.Presence{User: 7, Online: true}))
	at := time.Date(2026, 12, 1, 7, 11, 41, 59e6, time.UTC)
	require.NoError(t, g.s.deliverPresence(ctx, projection.Presence{User: 7, LastSeen: at.UnixMilli()}))
	f := s8.next(t)
	require.Equal(t, protocol.FramePresence, f.kind)
	require.Equal(t, int64(7), f.UserID)
	require.True(t, f.Online)
	require.Nil(t, f.LastSeen)
	require.NotContains(t, f.raw, "last_seen")
	f = s8.next(t)
	require.False(t, f.Online)
	require.Equal(t, at, *f.LastSeen)
	for _, s := range []*local{s7, s9, s10} {
		require.Empty(t, s.frames, "user %d", s.user)
	}
}

// TestHeartbeatReaps: the heartbeat deletes the gateways whose heartbeat
// expired, with their rows, and publishes offline for their users whom no
// live gateway holds, last seen at the dead gateway's last heartbeat.
func TestHeartbeatReaps(t *testing.T) {
	w := newWorld()
	w.conversation(10, 5, 8)
	w.conversation(11, 6, 8)
	dead := w.now.Add(-time.Hour)
	w.do(func() {
		w.gateways["dead"], w.gateways["live"] = dead, w.now
		w.sessions[5] = map[string]bool{"dead": true}
		w.sessions[6] = map[string]bool{"dead": true, "live": true}
		w.conns[5] = map[string]bool{"dead": true}
	})
	g := startGateway(t, w, gatewayOpts{noRun: true})
	s8 := g.join(8)
	g.run(w)
	f := s8.nextOf(t, protocol.FramePresence)
	require.Equal(t, int64(5), f.UserID)
	require.False(t, f.Online)
	require.Equal(t, dead, *f.LastSeen)
	require.Eventually(t, func() bool { return counter(t, g.s.m.transitions.WithLabelValues("offline")) == 1 }, wait, time.Millisecond)
	g.end()

	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.gateways["dead"]
	require.False(t, ok, "reaped")
	require.NotContains(t, w.sessions, int64(5))
	require.Equal(t, map[string]bool{"live": true}, w.sessions[6], "held by a live gateway")
	require.NotContains(t, w.conns, int64(5))
	require.Equal(t, dead, w.lastSeen[5])
	require.NotContains(t, w.lastSeen, int64(6))
	require.Equal(t, []string{fmt.Sprintf("p5:0:%d", dead.UnixMilli())}, filter(w.published(), "p5"))
	require.Empty(t, filter(w.published(), "p6"))
}

func filter(tokens []string, prefix string) []string {
	var out []string
	for _, tok := range tokens {
		if len(tok) >= len(prefix) && tok[:len(prefix)] == prefix {
			out = append(out, tok)
		}
	}
	return out
}

// TestReapedWhileAway: a gateway whose heartbeat row was reaped (it could
// not reach PostgreSQL in time) notices at its next heartbeat and writes
// its users' rows again; at its end it sets its heartbeat to expire after
// the grace and deletes its connection rows.
func TestReapedWhileAway(t *testing.T) {
	w := newWorld()
	cfg := Config{PresenceExpiry: 30 * time.Millisecond, PresenceGrace: 10 * time.Millisecond}
	g := startGateway(t, w, gatewayOpts{cfg: cfg})
	g.join(7)
	w.waitFor(t, "the row, committed", func() bool { return g.written(7) })
	w.do(func() { // reaped by another gateway
		delete(w.gateways, g.id)
		delete(w.sessions, 7)
	})
	w.waitFor(t, "the row written again", func() bool { return w.rowOf(7, g.id) && !w.gateways[g.id].IsZero() })
	g.end()

	w.mu.Lock()
	defer w.mu.Unlock()
	require.Equal(t, w.now.Add(-(cfg.PresenceExpiry - cfg.PresenceGrace)), w.gateways[g.id], "retired: expires after the grace")
	require.NotContains(t, w.conns, int64(7), "its connections end now")
	require.True(t, w.rowOf(7, g.id), "its presence rows expire with it")
}

// TestHalted: a halted Service (a process killed at once) does not retire
// its heartbeat at its end: the others reap it after PresenceExpiry.
func TestHalted(t *testing.T) {
	w := newWorld()
	g := startGateway(t, w, gatewayOpts{})
	g.join(7)
	w.waitFor(t, "the row, committed", func() bool { return g.written(7) })
	g.s.Halt()
	g.end()
	require.Empty(t, w.callsOf("retire"))
	require.Empty(t, w.callsOf("delete_connections"))
}

// TestLookup: the presence a user may see: itself (even hidden) and the
// users sharing a current write-mode conversation, in id order; a hidden
// one is offline without last seen; strangers and unknown ids are left out.
func TestLookup(t *testing.T) {
	w := newWorld()
	seen := w.now.Add(-time.Minute)
	w.conversation(10, 1, 2, 3, 4, 7)
	w.conversation(20, 1, 6)
	w.conversation(30, 5)
	w.do(func() {
		w.readFanout[20] = true
		w.gateways["gw"], w.gateways["old"] = w.now, w.now.Add(-time.Hour)
		for _, u := range []int64{1, 2, 4, 5, 6} {
			w.sessions[u] = map[string]bool{"gw": true}
		}
		w.sessions[7] = map[string]bool{"old": true}
		w.lastSeen[3], w.lastSeen[4] = seen, seen
		w.hideP[1], w.hideP[4] = true, true
	})
	g := startGateway(t, w, gatewayOpts{noRun: true})
	got, err := g.s.Lookup(context.Background(), 1, []int64{7, 2, 2, 3, 4, 5, 6, 99, 1})
	require.NoError(t, err)
	require.Equal(t, []protocol.Presence{
		{UserID: 1, Online: true},
		{UserID: 2, Online: true},
		{UserID: 3, LastSeen: &seen},
		{UserID: 4},
		{UserID: 7},
	}, got)
}

// TestAnnounce: a change of hide_presence publishes, under the user's
// presence lock, what the others see from now: offline without last seen
// when hidden, else the stored state.
func TestAnnounce(t *testing.T) {
	seen := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		hidden bool
		setup  func(w *world)
		want   string
	}{
		{name: "hidden", hidden: true, setup: func(w *world) {
			w.sessions[7] = map[string]bool{"gw": true}
			w.gateways["gw"] = w.now
		}, want: "p7:0:0"},
		{name: "shown, online", setup: func(w *world) {
			w.sessions[7] = map[string]bool{"gw": true}
			w.gateways["gw"] = w.now
		}, want: "p7:1:0"},
		{name: "shown, offline", setup: func(w *world) { w.lastSeen[7] = seen }, want: fmt.Sprintf("p7:0:%d", seen.UnixMilli())},
		{name: "shown, never seen", want: "p7:0:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			if tc.setup != nil {
				w.do(func() { tc.setup(w) })
			}
			g := startGateway(t, w, gatewayOpts{noRun: true})
			ctx := context.Background()
			require.NoError(t, pgx.BeginTxFunc(ctx, g.s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				if err := LockUser(ctx, tx, 7); err != nil {
					return err
				}
				return g.s.Announce(ctx, tx, 7, tc.hidden)
			}))
			w.mu.Lock()
			defer w.mu.Unlock()
			require.Equal(t, []string{tc.want}, w.published())
			var names []string
			for _, c := range w.log {
				names = append(names, c.name)
			}
			want := []string{"begin", "lock_user", "state", "notify", "commit"}
			if tc.hidden {
				want = []string{"begin", "lock_user", "notify", "commit"}
			}
			require.Equal(t, want, names, "in one transaction, the lock first")
		})
	}
}

// TestNew: New refuses an invalid Config and missing dependencies, and
// fills the defaults.
func TestNew(t *testing.T) {
	w := newWorld()
	pool := newPool(t, w)
	g := startGateway(t, w, gatewayOpts{noRun: true})
	limits := g.s.limits
	for name, cfg := range map[string]Config{
		"gateway id not a uuid":  {GatewayID: "gw-1"},
		"negative interval":      {TypingInterval: -time.Second},
		"negative grace":         {PresenceGrace: -time.Second},
		"expiry below 30ms":      {PresenceExpiry: 10 * time.Millisecond},
		"typing expiry below ms": {TypingExpiry: time.Microsecond},
		"negative queue":         {Queue: -1},
	} {
		_, err := New(cfg, pool, limits)
		require.Error(t, err, name)
	}
	_, err := New(Config{}, nil, limits)
	require.Error(t, err)
	_, err = New(Config{}, pool, nil)
	require.Error(t, err)

	s, err := New(Config{Logger: quiet}, pool, limits)
	require.NoError(t, err)
	require.Equal(t, projection.DefaultEphemeralChannel, s.Channel())
	require.NotEmpty(t, s.GatewayID())
	require.Equal(t, DefaultTypingExpiry, s.cfg.TypingExpiry)
	require.Equal(t, DefaultPresenceExpiry, s.cfg.PresenceExpiry)
	other, err := New(Config{}, pool, limits)
	require.NoError(t, err)
	require.NotEqual(t, s.GatewayID(), other.GatewayID(), "a gateway id per Service")

	require.Error(t, func() error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, s.Run(ctx))
		return s.Run(ctx)
	}(), "Run runs once")
}
