package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/inboxd/inboxd/gateway/apikey"
	"github.com/inboxd/inboxd/protocol"
)

// serverTestConfig is the tests' server API: no rate limit unless a test
// sets one.
func serverTestConfig(c *Config) { c.ServerAPI = ServerAPIConfig{Rate: rate.Inf, Burst: 1000} }

// service is a back end holding an API key: a user whose token is the key.
func (tg *tgw) service(t testing.TB, name string, scopes ...string) (*user, *apikey.Key) {
	t.Helper()
	k, secret, err := apikey.Create(context.Background(), tg.env.Pool, name, scopes)
	require.NoError(t, err)
	return &user{tg: tg, token: secret}, k
}

// errCode is the error code of an answer in the error shape.
func errCode(t testing.TB, r resp) string {
	t.Helper()
	var e protocol.ErrorBody
	r.decode(t, &e)
	return e.Error.Code
}

// TestServerAPIAuthorization: who may call the server API, and who may
// not. A user's token: 401 (it is no credential there). A key without the
// route's scope: 403. A revoked key: 401 from the very next request, on
// this gateway and on a second one sharing the database. A request with
// an Origin header (a browser): 403, even with a valid key. And an API
// key is no credential on a user's route: 401.
func TestServerAPIAuthorization(t *testing.T) {
	tg := newGateway(t, serverTestConfig)
	alice := tg.user(t, 1)
	cid := alice.create(t, "a")
	reader, rk := tg.service(t, "reader", apikey.ScopeRead)
	state := "/v1/server/conversations/" + strconv.FormatInt(cid, 10)

	r := reader.do(t, "GET", state, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	for _, h := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods"} {
		require.Empty(t, r.header.Get(h), "no CORS header on the server API")
	}
	ks, err := apikey.List(context.Background(), tg.env.Pool)
	require.NoError(t, err)
	require.Len(t, ks, 1)
	require.NotNil(t, ks[0].LastUsedAt, "a key's use is recorded (apikey list shows it)")

	bad := []struct {
		name   string
		u      *user
		method string
		path   string
		body   any
		hdr    []string
		status int
		code   string
	}{
		{"user token", alice, "GET", state, nil, nil, 401, protocol.CodeUnauthorized},
		{"no credential", &user{tg: tg}, "GET", state, nil, nil, 401, protocol.CodeUnauthorized},
		{"forged secret", &user{tg: tg, token: "ik_" + strconv.FormatInt(rk.ID, 10) + "_" + strings.Repeat("A", 43)},
			"GET", state, nil, nil, 401, protocol.CodeUnauthorized},
		{"no such key", &user{tg: tg, token: "ik_999999_" + strings.Repeat("A", 43)}, "GET", state, nil, nil, 401, protocol.CodeUnauthorized},
		{"scope missing", reader, "POST", "/v1/server/conversations", protocol.CreateConversation{Members: []int64{1}},
			[]string{"Idempotency-Key", "k1"}, 403, protocol.CodeForbidden},
		{"browser", reader, "GET", state, nil, []string{"Origin", "https://app.example"}, 403, protocol.CodeForbidden},
		// Before anything else: a wrong method (a CORS preflight) or an
		// unknown path of the server API is a 403 too, not a 405 or 404.
		{"browser preflight", reader, "OPTIONS", "/v1/server/conversations", nil, []string{"Origin", "https://app.example.com"}, 403, protocol.CodeForbidden},
		{"browser, wrong method", &user{tg: tg}, "DELETE", state, nil, []string{"Origin", "https://app.example"}, 403, protocol.CodeForbidden},
		{"browser, no such route", &user{tg: tg}, "GET", "/v1/server/nothing", nil, []string{"Origin", "https://app.example"}, 403, protocol.CodeForbidden},
		{"browser, the prefix alone", &user{tg: tg}, "GET", "/v1/server", nil, []string{"Origin", "https://app.example"}, 403, protocol.CodeForbidden},
		{"wrong method", reader, "OPTIONS", "/v1/server/conversations", nil, nil, 405, protocol.CodeBadRequest},
		{"key on a user route", reader, "GET", "/v1/sync", nil, nil, 401, protocol.CodeUnauthorized},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			r := c.u.do(t, c.method, c.path, c.body, c.hdr...)
			require.Equal(t, c.status, r.status, "%s", r)
			require.Equal(t, c.code, errCode(t, r))
			require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))
			if c.status == 401 {
				require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
			}
		})
	}

	// A second gateway on the same database: the key works there too,
	// until it is revoked.
	g2, err := NewOn(wsTestConfig(tg.env, serverTestConfig), placementOf(tg.env), tg.env.Producer)
	require.NoError(t, err)
	srv2 := httptest.NewServer(g2.Handler())
	t.Cleanup(srv2.Close)
	tg2 := &tgw{env: tg.env, g: g2, srv: srv2, url: srv2.URL, hc: tg.hc}
	reader2 := &user{tg: tg2, token: reader.token}
	require.Equal(t, http.StatusOK, reader2.do(t, "GET", state, nil).status)

	// Rotation: a second key of the same name, then the first revoked.
	rotated, _ := tg.service(t, "reader", apikey.ScopeRead)
	_, err = apikey.Revoke(context.Background(), tg.env.Pool, rk.ID)
	require.NoError(t, err)
	for _, u := range []*user{reader, reader2} {
		r := u.do(t, "GET", state, nil)
		require.Equal(t, http.StatusUnauthorized, r.status, "a revoked key stops at once: %s", r)
		require.Contains(t, string(r.body), "revoked")
	}
	require.Equal(t, http.StatusOK, rotated.do(t, "GET", state, nil).status, "the new key works")
}

// TestServerAPIRateLimit: each key has its own bucket; past it, 429 in
// the error shape with Retry-After, and another key is not held back.
func TestServerAPIRateLimit(t *testing.T) {
	tg := newGateway(t, func(c *Config) { c.ServerAPI = ServerAPIConfig{Rate: 0.001, Burst: 2} })
	a, _ := tg.service(t, "a", apikey.ScopeRead)
	b, _ := tg.service(t, "b", apikey.ScopeRead)
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, a.do(t, "GET", "/v1/server/users/1/inbox", nil).status)
	}
	r := a.do(t, "GET", "/v1/server/users/1/inbox", nil)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r)
	require.Equal(t, protocol.CodeRateLimited, errCode(t, r))
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, retry)
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/v1/server/users/1/inbox", nil).status, "b's bucket is its own")
}
