package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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

// TestRevocations: a token revoked by its id, a user's tokens, and
// everyone's issued before a time stop working on both gateways within a
// poll, cached or not, and the WebSocket sessions of the revoked tokens on
// the other gateway are closed 4001; tokens not named keep working.
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
	// A session with a1 on the second gateway.
	h := http.Header{"Authorization": {"Bearer " + a1}}
	sess, err := dialWSE("ws"+strings.TrimPrefix(tg2.url, "http")+"/v1/ws", h, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.conn.Close() })
	sess.hello(t, 0, nil)

	revoke := func(body map[string]any) protocol.Revocation {
		t.Helper()
		r := admin.do(t, "POST", "/v1/server/revocations", body)
		require.Equal(t, http.StatusCreated, r.status, "%s", r)
		var out protocol.Revocation
		r.decode(t, &out)
		require.Positive(t, out.ID)
		return out
	}
	// refusedWithin waits until the other gateway refuses tok, and logs
	// how long it took from the revocation's answer.
	refusedWithin := func(what string, since time.Time, id int64, tok string) {
		t.Helper()
		waitFor(t, 10*time.Second, what+" refused by the other gateway", func() bool {
			return works(tg2, id, tok) == http.StatusUnauthorized
		})
		t.Logf("%s: refused by the other gateway %v after the revocation's answer (poll %v)",
			what, time.Since(since).Round(time.Millisecond), DefaultRevocationPoll)
		r := on(tg, id, tok).do(t, "GET", "/v1/sync?after=0&limit=1", nil)
		require.Equal(t, http.StatusUnauthorized, r.status, "at once on the gateway that took it: %s", r)
		require.Equal(t, protocol.CodeUnauthorized, errCode(t, r))
		require.Contains(t, string(r.body), "token revoked")
	}

	// By token id: a1 only.
	at := time.Now()
	rv := revoke(map[string]any{"token_id": "a1"})
	require.Equal(t, "a1", rv.TokenID)
	require.Nil(t, rv.IssuedBefore)
	refusedWithin("a token by its id", at, 1, a1)
	code, frames := sess.closeCode(t)
	require.Equal(t, protocol.CloseUnauthorized, code, "the session of the revoked token is closed")
	last := frames[len(frames)-1]
	require.Equal(t, protocol.FrameError, last.Type)
	require.Equal(t, protocol.CodeUnauthorized, last.Code)
	// A new session with it: the upgrade is accepted, then refused 4001.
	again, err := dialWSE("ws"+strings.TrimPrefix(tg2.url, "http")+"/v1/ws", h, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.conn.Close() })
	code, _ = again.closeCode(t)
	require.Equal(t, protocol.CloseUnauthorized, code, "a new session of the revoked token")
	for _, g := range []*tgw{tg, tg2} {
		require.Equal(t, http.StatusOK, works(g, 1, a2), "another token of the user")
	}

	// A user's tokens: every one issued before now; one issued later works.
	at = time.Now()
	rv = revoke(map[string]any{"user_id": 2})
	require.NotNil(t, rv.IssuedBefore)
	refusedWithin("a user's tokens", at, 2, b1)
	fresh := tokenWith(t, 2, "", time.Now().Add(2*time.Second))
	for _, g := range []*tgw{tg, tg2} {
		require.Equal(t, http.StatusOK, works(g, 2, fresh), "a token issued after the revocation")
		require.Equal(t, http.StatusOK, works(g, 1, a2), "another user")
	}

	// Everyone's issued before a time: a token without iat goes too.
	at = time.Now()
	revoke(map[string]any{"issued_before": time.Now().Add(-5 * time.Second).UTC().Format(time.RFC3339)})
	refusedWithin("every token issued before a time", at, 1, a2)
	refusedWithin("a token without iat", at, 3, c0)
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
