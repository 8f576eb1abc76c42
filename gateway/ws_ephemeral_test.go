package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/ephemeral"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/protocol"
)

// Typing and presence across gateway processes (docs/websocket.md,
// "Typing and presence"): real PostgreSQL, kfake, fanout, two gateways on
// one database, real sockets.

const (
	testGrace  = 400 * time.Millisecond
	testExpiry = time.Second
)

// ephemeralOpts is a gateway with short presence timings.
func ephemeralOpts() wsOpts {
	return wsOpts{tweak: func(c *Config) {
		c.Ephemeral = EphemeralConfig{PresenceGrace: testGrace, PresenceExpiry: testExpiry}
	}, ws: WSConfig{HeartbeatInterval: 5 * time.Second}}
}

// twoEphemeralGateways starts a world and two gateways on it.
func twoEphemeralGateways(t *testing.T) (a, b *wsgw) {
	t.Helper()
	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	return newWSGatewayOn(t, env, ephemeralOpts()), newWSGatewayOn(t, env, ephemeralOpts())
}

// connect dials u on w and sends the hello; the stream reads in the
// background and is welcomed before it returns (typing and presence only
// go to welcomed sessions).
func connect(t *testing.T, w *wsgw, u *user) *wsStream {
	t.Helper()
	s := dialWS(t, w, u).stream(t, u.head(t), nil)
	waitFor(t, 30*time.Second, "welcome", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.welcome != nil
	})
	return s
}

// ephemeralFrames is a copy of the typing and presence frames s got.
func (s *wsStream) ephemeralFrames() []protocol.ServerFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.ServerFrame(nil), s.ephemeral...)
}

// waitEphemeral waits for a typing or presence frame matching pred.
func (s *wsStream) waitEphemeral(t *testing.T, what string, pred func(protocol.ServerFrame) bool) protocol.ServerFrame {
	t.Helper()
	var found protocol.ServerFrame
	waitFor(t, 30*time.Second, what, func() bool {
		for _, f := range s.ephemeralFrames() {
			if pred(f) {
				found = f
				return true
			}
		}
		return false
	})
	return found
}

func presenceOf(user int64, online bool) func(protocol.ServerFrame) bool {
	return func(f protocol.ServerFrame) bool {
		return f.Type == protocol.FramePresence && f.UserID == user && f.Online == online
	}
}

// presenceFrames are the presence frames about user that s got.
func presenceFrames(s *wsStream, user int64) []protocol.ServerFrame {
	var out []protocol.ServerFrame
	for _, f := range s.ephemeralFrames() {
		if f.Type == protocol.FramePresence && f.UserID == user {
			out = append(out, f)
		}
	}
	return out
}

// lookup is GET /v1/presence by u about ids.
func (u *user) lookup(t *testing.T, ids ...int64) []protocol.Presence {
	t.Helper()
	q := ""
	for i, id := range ids {
		if i > 0 {
			q += "&"
		}
		q += fmt.Sprintf("user_id=%d", id)
	}
	r := u.do(t, "GET", "/v1/presence?"+q, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var out protocol.PresenceList
	r.decode(t, &out)
	return out.Presence
}

// TestTypingTwoGateways: a typing frame on gateway A reaches a member on
// gateway B, and stops; the typer's other device, a removed member and a
// user who shares no conversation see nothing; a non-member cannot type;
// no log record, inbox row or inbox_seq comes of it.
func TestTypingTwoGateways(t *testing.T) {
	a, b := twoEphemeralGateways(t)
	u1, u2, u3, u4 := a.user(t, 1), b.user(t, 2), b.user(t, 3), b.user(t, 4)
	conv := u1.create(t, "typing", 2, 4)
	r := u1.do(t, "DELETE", fmt.Sprintf("/v1/conversations/%d/members/4", conv), nil)
	require.Less(t, r.status, 300, "%s", r)
	u3.create(t, "alone")
	waitFor(t, 30*time.Second, "the removal projected", func() bool {
		var current bool
		require.NoError(t, a.env.ConvPool(conv).QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM member_spans
			WHERE conversation_id = $1 AND user_id = 4 AND left_seq IS NULL)`, conv).Scan(&current))
		return !current
	})
	before := a.snapshot(t)

	s2, s3, s4 := connect(t, b, u2), connect(t, b, u3), connect(t, b, u4)
	s1other := connect(t, b, b.user(t, 1)) // the typer's other device
	s1 := connect(t, a, u1)

	start := time.Now()
	s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv})
	f := s2.waitEphemeral(t, "typing on the other gateway", func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameTyping })
	t.Logf("typing A -> B in %v", time.Since(start))
	require.Equal(t, conv, f.ConversationID)
	require.Equal(t, int64(1), f.UserID)
	require.Equal(t, protocol.TypingStart, f.State)
	require.Equal(t, ephemeral.DefaultTypingExpiry.Milliseconds(), f.ExpiresInMS)

	// Faster frames are dropped without an answer; a stop goes through.
	for i := 0; i < 5; i++ {
		s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv})
	}
	s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv, State: protocol.TypingStop})
	s2.waitEphemeral(t, "typing stop", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.FrameTyping && f.State == protocol.TypingStop && f.ExpiresInMS == 0
	})

	// Not a member: refused with not_member, nothing delivered.
	s3.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: conv})
	e := s3.waitOther(t, func(f protocol.ServerFrame) bool { return f.Type == protocol.FrameError })
	require.Equal(t, protocol.CodeNotMember, e.Code)
	// Bad frames: bad_request, the connection stays.
	s1.c.writeJSON(t, map[string]any{"type": "typing", "conversation_id": conv, "state": "maybe"})
	s1.c.writeJSON(t, map[string]any{"type": "typing"})
	waitFor(t, 30*time.Second, "two bad_request errors", func() bool {
		s1.mu.Lock()
		defer s1.mu.Unlock()
		n := 0
		for _, f := range s1.others {
			if f.Type == protocol.FrameError && f.Code == protocol.CodeBadRequest {
				n++
			}
		}
		return n == 2
	})

	typing := func(s *wsStream) (n int) {
		for _, f := range s.ephemeralFrames() {
			if f.Type == protocol.FrameTyping {
				n++
			}
		}
		return n
	}
	time.Sleep(300 * time.Millisecond) // anything still on its way arrives
	require.Equal(t, 2, typing(s2), "one start (the repeats dropped), one stop")
	require.Zero(t, typing(s1), "the typer itself")
	require.Zero(t, typing(s1other), "the typer's other device")
	require.Zero(t, typing(s3), "a user sharing no conversation")
	require.Zero(t, typing(s4), "a removed member")
	require.Empty(t, presenceFrames(s3, 1), "no presence to a user sharing no conversation")
	require.Empty(t, presenceFrames(s4, 1), "nor to a removed member")
	require.NotEmpty(t, presenceFrames(s2, 1), "a member sees the typer come online")
	require.Equal(t, before, a.snapshot(t), "no log record, inbox row or inbox_seq from typing or presence")
}

// TestPresenceFollowsUser: presence follows a user who moves from gateway
// A to B within the grace period (no offline in between), goes offline
// after leaving both plus the grace, with a last seen; hidden presence is
// offline without last seen to others at once; a user sharing no
// conversation learns nothing, live or asked.
func TestPresenceFollowsUser(t *testing.T) {
	a, b := twoEphemeralGateways(t)
	u1a, u1b, u2, u3 := a.user(t, 1), b.user(t, 1), b.user(t, 2), b.user(t, 3)
	u1a.create(t, "presence", 2)
	u3.create(t, "alone")
	before := a.snapshot(t)

	s2, s3 := connect(t, b, u2), connect(t, b, u3)
	c1 := dialWS(t, a, u1a)
	c1.hello(t, 0, nil)
	f := s2.waitEphemeral(t, "online on A", presenceOf(1, true))
	require.Nil(t, f.LastSeen)
	require.Equal(t, []protocol.Presence{{UserID: 1, Online: true}, {UserID: 2, Online: true}}, u2.lookup(t, 1, 2, 999))

	// Move to B within the grace: no offline is published.
	require.NoError(t, c1.conn.Close())
	waitFor(t, 30*time.Second, "A's session gone", func() bool { return len(sessionsOf(a.ws, 1)) == 0 })
	c1b := dialWS(t, b, u1b)
	c1b.hello(t, 0, nil)
	time.Sleep(testGrace + 500*time.Millisecond)
	require.Len(t, presenceFrames(s2, 1), 1, "online once, no offline in between: %+v", presenceFrames(s2, 1))
	require.True(t, u2.lookup(t, 1)[0].Online)

	// Leave both: offline after the grace, with a last seen.
	left := time.Now()
	require.NoError(t, c1b.conn.Close())
	f = s2.waitEphemeral(t, "offline", presenceOf(1, false))
	require.GreaterOrEqual(t, time.Since(left), testGrace-50*time.Millisecond, "not before the grace")
	require.NotNil(t, f.LastSeen)
	got := u2.lookup(t, 1)
	require.Len(t, got, 1)
	require.False(t, got[0].Online)
	require.NotNil(t, got[0].LastSeen)
	require.WithinDuration(t, *f.LastSeen, *got[0].LastSeen, time.Millisecond)

	// Hidden: offline without last seen to others at once; the user sees
	// themselves as they are. Shown again: the real state.
	s1 := connect(t, a, u1a)
	waitFor(t, 30*time.Second, "online again", func() bool { return len(presenceFrames(s2, 1)) == 3 })
	r := u1a.do(t, "PATCH", "/v1/settings", map[string]any{"hide_presence": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	waitFor(t, 30*time.Second, "hidden: offline", func() bool { return len(presenceFrames(s2, 1)) == 4 })
	f = presenceFrames(s2, 1)[3]
	require.False(t, f.Online)
	require.Nil(t, f.LastSeen, "hidden: no last seen")
	require.Equal(t, []protocol.Presence{{UserID: 1}}, u2.lookup(t, 1))
	require.Equal(t, []protocol.Presence{{UserID: 1, Online: true}}, u1a.lookup(t, 1), "the user sees themselves")
	r = u1a.do(t, "PATCH", "/v1/settings", map[string]any{"hide_presence": false})
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	waitFor(t, 30*time.Second, "shown: online", func() bool { return len(presenceFrames(s2, 1)) == 5 })
	require.True(t, presenceFrames(s2, 1)[4].Online, "%+v", presenceFrames(s2, 1))
	require.True(t, u2.lookup(t, 1)[0].Online)
	_ = s1

	// A user who shares no conversation: no frame, and the endpoint leaves
	// the others out as it leaves out unknown ids.
	require.Empty(t, presenceFrames(s3, 1))
	require.Empty(t, presenceFrames(s3, 2))
	require.Equal(t, []protocol.Presence{{UserID: 3, Online: true}}, u3.lookup(t, 1, 2, 3, 999))
	require.Equal(t, before, a.snapshot(t), "no log record, inbox row or inbox_seq from presence")
}

// TestPresenceKilledGateway: the users of a gateway that stops without a
// clean close (no heartbeat, no row deleted) go offline after the expiry,
// published by a live gateway.
func TestPresenceKilledGateway(t *testing.T) {
	a, b := twoEphemeralGateways(t)
	u1, u2 := b.user(t, 1), a.user(t, 2)
	u1.create(t, "kill", 2)
	s2 := connect(t, a, u2)
	s1 := connect(t, b, u1)
	s2.waitEphemeral(t, "online on B", presenceOf(1, true))

	b.g.eph.Halt() // as if B's process were killed: it writes nothing more
	killed := time.Now()
	require.NoError(t, s1.c.conn.Close())
	f := s2.waitEphemeral(t, "offline after B's expiry", presenceOf(1, false))
	require.GreaterOrEqual(t, time.Since(killed), testExpiry-testExpiry/3, "not before the expiry")
	require.NotNil(t, f.LastSeen)
	require.False(t, u2.lookup(t, 1)[0].Online)
}

// TestSettings: GET and PATCH /v1/settings, and their refusals.
func TestSettings(t *testing.T) {
	tg := newGateway(t, nil)
	u := tg.user(t, 5)
	get := func() protocol.Settings {
		r := u.do(t, "GET", "/v1/settings", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		var s protocol.Settings
		r.decode(t, &s)
		return s
	}
	require.Equal(t, protocol.Settings{Notifications: true}, get(), "notifications on until changed")
	require.Equal(t, protocol.DefaultSettings(), get())
	r := u.do(t, "PATCH", "/v1/settings", `{"hide_receipts":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.JSONEq(t, `{"hide_receipts":true,"hide_presence":false,"notifications":true}`, string(r.body))
	r = u.do(t, "PATCH", "/v1/settings", `{"hide_receipts":null,"hide_presence":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, protocol.Settings{HideReceipts: true, HidePresence: true, Notifications: true}, get())
	r = u.do(t, "PATCH", "/v1/settings", `{"notifications":false}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.JSONEq(t, `{"hide_receipts":true,"hide_presence":true,"notifications":false}`, string(r.body))
	require.Equal(t, protocol.Settings{HideReceipts: true, HidePresence: true}, get(), "the others kept")
	r = u.do(t, "PATCH", "/v1/settings", `{"hide_presence":false,"notifications":null}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, protocol.Settings{HideReceipts: true}, get(), "null keeps notifications off")
	var off bool
	require.NoError(t, tg.env.Pool.QueryRow(testenv.Ctx(t, 10*time.Second),
		`SELECT NOT notifications FROM user_settings WHERE user_id = 5`).Scan(&off))
	require.True(t, off, "stored where the notifier reads it")
	require.Equal(t, protocol.DefaultSettings(), tg.user(t, 6).lookupSettings(t), "another user's are their own")
	// A first PATCH of only notifications keeps the other defaults.
	u7 := tg.user(t, 7)
	r = u7.do(t, "PATCH", "/v1/settings", `{"notifications":false}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.JSONEq(t, `{"hide_receipts":false,"hide_presence":false,"notifications":false}`, string(r.body))

	for _, body := range []string{`{}`, `{"hide_receipts":null}`, `{"notifications":null}`, `{"hide_presence":"yes"}`,
		`{"notifications":1}`, `{"hide_typing":true}`,
		``, `[]`, `{"hide_receipts":true} {}`, "{\"hide_receipts\":true,\"x\":\"\\u0000\"}"} {
		r := u.do(t, "PATCH", "/v1/settings", body)
		require.Equal(t, http.StatusBadRequest, r.status, "%q: %s", body, r)
		var e protocol.ErrorBody
		r.decode(t, &e)
		require.Equal(t, protocol.CodeBadRequest, e.Error.Code, "%q", body)
	}
	for _, q := range []string{"", "user_id=x", "user_id=0", "user_id=-1", "user_id=+1", "user_id=1&user_id=99999999999999999999"} {
		r := u.do(t, "GET", "/v1/presence?"+q, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%q: %s", q, r)
	}
	many := "user_id=1"
	for i := 2; i <= MaxPresenceUsers+1; i++ {
		many += fmt.Sprintf("&user_id=%d", i)
	}
	require.Equal(t, http.StatusBadRequest, u.do(t, "GET", "/v1/presence?"+many, nil).status)
	r = (&user{tg: tg}).do(t, "GET", "/v1/settings", nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
}

func (u *user) lookupSettings(t *testing.T) protocol.Settings {
	t.Helper()
	r := u.do(t, "GET", "/v1/settings", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var s protocol.Settings
	r.decode(t, &s)
	return s
}

// TestTypingAudienceBySide: the members a typing frame goes to are read
// by the smaller side (ephemeral.audience): the conversation's members
// when it has no more members than the gateway has users, else the
// gateway's users among the members. A 5-member conversation on a
// gateway of two users takes the second way, a 2-member one on a gateway
// of three the first; both deliver to the member here and to no one else.
func TestTypingAudienceBySide(t *testing.T) {
	_, b := twoEphemeralGateways(t)
	u1, u2, u3 := b.user(t, 1), b.user(t, 2), b.user(t, 3)
	wide := u1.create(t, "more members than users here", 2, 5, 6, 7)
	s1, s2 := connect(t, b, u1), connect(t, b, u2)
	s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: wide})
	f := s2.waitEphemeral(t, "typing in the conversation wider than the gateway", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.FrameTyping && f.ConversationID == wide
	})
	require.Equal(t, int64(1), f.UserID)

	narrow := u1.create(t, "fewer members than users here", 2)
	s3 := connect(t, b, u3)
	s1.c.writeJSON(t, protocol.Typing{Type: protocol.FrameTyping, ConversationID: narrow})
	s2.waitEphemeral(t, "typing in the conversation narrower than the gateway", func(f protocol.ServerFrame) bool {
		return f.Type == protocol.FrameTyping && f.ConversationID == narrow
	})
	time.Sleep(300 * time.Millisecond) // anything still on its way arrives
	for _, f := range append(s3.ephemeralFrames(), s1.ephemeralFrames()...) {
		require.NotEqual(t, protocol.FrameTyping, f.Type, "typing to a non-member or to the typer: %+v", f)
	}
}
