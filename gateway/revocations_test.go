package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// tokenWith signs a token of user with a jti (none when empty) and an iat
// (none when zero), as an identity provider does.
func tokenWith(t testing.TB, user int64, jti string, iat time.Time) string {
	t.Helper()
	c := jwt.MapClaims{"sub": strconv.FormatInt(user, 10), "exp": time.Now().Add(time.Hour).Unix()}
	if jti != "" {
		c["jti"] = jti
	}
	if !iat.IsZero() {
		c["iat"] = iat.Unix()
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(testSecret)
	require.NoError(t, err)
	return tok
}

// maxRevocationDelay bounds, in the tests, the time from a revocation's
// answer to its refusal on every gateway: a poll (DefaultRevocationPoll)
// and a query, with room for a loaded machine.
const maxRevocationDelay = time.Second

// revocationWatch is a token about to be revoked and, on each gateway, a
// welcomed WebSocket session of it read in the background, so that the
// moment each is closed is known.
type revocationWatch struct {
	user     int64
	token    string
	gws      []*tgw
	sessions []*watchedSession
}

// watchedSession is a session of a revocationWatch.
type watchedSession struct {
	done   chan struct{}
	at     time.Time // when the connection ended
	code   int       // its close code (-1: without a close frame)
	frames []protocol.ServerFrame
}

// wsURLOf is the WebSocket endpoint of a gateway served by its own handler.
func wsURLOf(tg *tgw) string { return "ws" + strings.TrimPrefix(tg.url, "http") + "/v1/ws" }

// watchRevocation opens a session of tok on each of gws, waits for their
// welcomes, and reads them until they end.
func watchRevocation(t testing.TB, user int64, tok string, gws ...*tgw) *revocationWatch {
	t.Helper()
	w := &revocationWatch{user: user, token: tok, gws: gws}
	for _, g := range gws {
		c, err := dialWSE(wsURLOf(g), http.Header{"Authorization": {"Bearer " + tok}}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.conn.Close() })
		c.hello(t, 0, nil)
		for f := c.next(t); f.Type != protocol.FrameWelcome; f = c.next(t) {
			require.NotEqual(t, protocol.FrameError, f.Type, "before the welcome: %+v", f)
		}
		s := &watchedSession{done: make(chan struct{})}
		go func() {
			defer close(s.done)
			for {
				f, err := c.nextE(time.Minute)
				if err != nil {
					s.at, s.code = time.Now(), -1
					var ce *websocket.CloseError
					if errors.As(err, &ce) {
						s.code = ce.Code
					}
					return
				}
				s.frames = append(s.frames, f)
			}
		}()
		w.sessions = append(w.sessions, s)
	}
	return w
}

// revokeMeasured revokes through admin (a key of scope sessions) with
// body and measures, for each watch on each of its gateways, the time
// from the revocation's answer to the first 401 of the watched token
// (asked every 10 ms) and to the close 4001 of its session there. It
// logs the figures and fails when one is over maxRevocationDelay.
func revokeMeasured(t testing.TB, admin *user, what string, body map[string]any, ws ...*revocationWatch) protocol.Revocation {
	t.Helper()
	r := admin.do(t, "POST", "/v1/server/revocations", body)
	answered := time.Now()
	require.Equal(t, http.StatusCreated, r.status, "%s", r)
	var out protocol.Revocation
	r.decode(t, &out)
	require.Positive(t, out.ID)
	type poll struct {
		took time.Duration
		last resp
		err  error
	}
	// Every poller starts at once, so that each figure counts from the answer.
	polls := make([][]chan poll, len(ws))
	for j, w := range ws {
		for _, g := range w.gws {
			ch := make(chan poll, 1)
			polls[j] = append(polls[j], ch)
			go func(u *user) {
				var p poll
				for {
					p.last, p.err = u.doE("GET", "/v1/sync?after=0&limit=1", nil)
					p.took = time.Since(answered)
					if p.err != nil || p.last.status == http.StatusUnauthorized || p.took > 10*time.Second {
						ch <- p
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}(&user{tg: g, id: w.user, token: w.token})
		}
	}
	for j, w := range ws {
		for i := range w.gws {
			p := <-polls[j][i]
			require.NoError(t, p.err)
			require.Equal(t, http.StatusUnauthorized, p.last.status, "%s: gateway %d still takes the token after %v: %s", what, i+1, p.took, p.last)
			require.Equal(t, protocol.CodeUnauthorized, errCode(t, p.last))
			require.Contains(t, string(p.last.body), "token revoked")
			closed := "none watched"
			if i < len(w.sessions) {
				s := w.sessions[i]
				select {
				case <-s.done:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: the session on gateway %d is still open 10 s after the revocation", what, i+1)
				}
				require.Equal(t, protocol.CloseUnauthorized, s.code, "%s: the session on gateway %d", what, i+1)
				require.NotEmpty(t, s.frames)
				last := s.frames[len(s.frames)-1]
				require.Equal(t, protocol.FrameError, last.Type, "%s: an error frame before the close", what)
				require.Equal(t, protocol.CodeUnauthorized, last.Code)
				// On the gateway that took the revocation the session may
				// close before the answer reaches the client: 0.
				tookWS := max(s.at.Sub(answered), 0)
				closed = fmt.Sprintf("closed 4001 after %d ms", tookWS.Milliseconds())
				require.LessOrEqual(t, tookWS, maxRevocationDelay, "%s: the session on gateway %d", what, i+1)
			}
			t.Logf("%s: user %d on gateway %d: refused (401) %d ms after the revocation's answer, session %s (poll %v)",
				what, w.user, i+1, p.took.Milliseconds(), closed, DefaultRevocationPoll)
			require.LessOrEqual(t, p.took, maxRevocationDelay, "%s: gateway %d", what, i+1)
		}
	}
	return out
}

// TestRevocations: a token revoked by its id, a user's tokens, and
// everyone's issued before a time stop working on both gateways of one
// deployment within maxRevocationDelay of the revocation's answer, cached
// or not, and their WebSocket sessions on both are closed 4001 within it
// too (measured and logged); tokens not named keep working.
func TestRevocations(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	g2, err := NewOn(wsTestConfig(tg.env, serverTestConfig), placementOf(tg.env), tg.env.Producer)
	require.NoError(t, err)
	startListen(t, g2)
	srv2 := httptest.NewServer(g2.Handler())
	t.Cleanup(func() {
		g2.Drain()
		srv2.Close()
	})
	tg2 := &tgw{env: tg.env, g: g2, srv: srv2, url: srv2.URL, hc: tg.hc}
	admin, _ := tg.service(t, "security", apikey.ScopeSessions)
	reader, _ := tg.service(t, "reader", apikey.ScopeRead)

	past := time.Now().Add(-10 * time.Second)
	on := func(g *tgw, id int64, tok string) *user { return &user{tg: g, id: id, token: tok} }
	works := func(g *tgw, id int64, tok string) int {
		return on(g, id, tok).do(t, "GET", "/v1/sync?after=0&limit=1", nil).status
	}
	// Every token is used on both gateways first: cached there.
	a1, a2 := tokenWith(t, 1, "a1", past), tokenWith(t, 1, "a2", past)
	b1, c0 := tokenWith(t, 2, "", past), tokenWith(t, 3, "c0", time.Time{})
	for _, g := range []*tgw{tg, tg2} {
		for u, tok := range map[int64]string{1: a1, 2: b1, 3: c0} {
			require.Equal(t, http.StatusOK, works(g, u, tok))
		}
		require.Equal(t, http.StatusOK, works(g, 1, a2))
	}

	// By token id: a1 only.
	rv := revokeMeasured(t, admin, "a token by its id", map[string]any{"token_id": "a1"},
		watchRevocation(t, 1, a1, tg, tg2))
	require.Equal(t, "a1", rv.TokenID)
	require.Nil(t, rv.IssuedBefore)
	// A new session with it: the upgrade is accepted, then refused 4001.
	h := http.Header{"Authorization": {"Bearer " + a1}}
	for _, g := range []*tgw{tg, tg2} {
		again, err := dialWSE(wsURLOf(g), h, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = again.conn.Close() })
		code, _ := again.closeCode(t)
		require.Equal(t, protocol.CloseUnauthorized, code, "a new session of the revoked token")
		require.Equal(t, http.StatusOK, works(g, 1, a2), "another token of the user")
	}

	// A user's tokens: every one issued before now; one issued later works.
	rv = revokeMeasured(t, admin, "a user's tokens", map[string]any{"user_id": 2},
		watchRevocation(t, 2, b1, tg, tg2))
	require.NotNil(t, rv.IssuedBefore)
	fresh := tokenWith(t, 2, "", time.Now().Add(2*time.Second))
	for _, g := range []*tgw{tg, tg2} {
		require.Equal(t, http.StatusOK, works(g, 2, fresh), "a token issued after the revocation")
		require.Equal(t, http.StatusOK, works(g, 1, a2), "another user")
	}

	// Everyone's issued before a time: a token without iat goes too.
	revokeMeasured(t, admin, "every token issued before a time",
		map[string]any{"issued_before": time.Now().Add(-5 * time.Second).UTC().Format(time.RFC3339)},
		watchRevocation(t, 1, a2, tg, tg2), &revocationWatch{user: 3, token: c0, gws: []*tgw{tg, tg2}})
	for _, g := range []*tgw{tg, tg2} {
		require.Equal(t, http.StatusOK, works(g, 2, fresh), "issued after that time")
	}

	// Refusals, in the error shape, changing nothing.
	for _, c := range []struct {
		body map[string]any
		who  *user
		code int
	}{
		{map[string]any{}, admin, 400},
		{map[string]any{"token_id": "x", "issued_before": time.Now().Format(time.RFC3339)}, admin, 400},
		{map[string]any{"user_id": -1}, admin, 400},
		{map[string]any{"token_id": strings.Repeat("x", 300)}, admin, 400},
		{map[string]any{"user_id": 1, "extra": true}, admin, 400},
		{map[string]any{"user_id": 1}, reader, 403},
		{map[string]any{"user_id": 1}, on(tg, 1, tokenWith(t, 1, "", time.Now().Add(time.Second))), 401},
	} {
		r := c.who.do(t, "POST", "/v1/server/revocations", c.body)
		require.Equal(t, c.code, r.status, "%v: %s", c.body, r)
	}
	var n int
	require.NoError(t, tg.env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM revocations`).Scan(&n))
	require.Equal(t, 3, n, "the refusals stored nothing")
}
