package gateway

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/internal/auth/authtest"
	"github.com/inboxd/inboxd/protocol"
)

const (
	testIssuer   = "https://idp.test/realms/chat"
	testAudience = "inboxd"
)

// idpClaims are the claims of a good token of user.
func idpClaims(user int64, mods ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": fmt.Sprint(user), "iss": testIssuer, "aud": []string{"account", testAudience},
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for _, m := range mods {
		m(c)
	}
	return c
}

func withClaim(k string, v any) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c[k] = v } }

// newIdPGateway starts a test identity provider with an RSA, an EC P-256
// and an Ed25519 key, and a gateway verifying its tokens (issuer and
// audience required) beside the HS256 test secret.
func newIdPGateway(t *testing.T, tweak func(*Config)) (*tgw, *authtest.IdP) {
	t.Helper()
	p := authtest.New(t)
	p.AddKey(t, "rsa-1", "RS256")
	p.AddKey(t, "ec-1", "ES256")
	p.AddKey(t, "ed-1", "EdDSA")
	tg := newGateway(t, func(c *Config) {
		c.AuthJWKSURL = p.URL()
		c.AuthIssuer = testIssuer
		c.AuthAudience = testAudience
		c.AuthJWKSMinRefresh = 50 * time.Millisecond
		if tweak != nil {
			tweak(c)
		}
	})
	waitFor(t, 30*time.Second, "the key set", func() bool { return tg.g.auth.verifier.Ready() == nil })
	return tg, p
}

// TestIdentityProviderTokens: a token of each algorithm of the key set is
// a user over HTTP, long-poll and WebSocket (header and access_token),
// and the HS256 secret still works beside them.
func TestIdentityProviderTokens(t *testing.T) {
	tg, p := newIdPGateway(t, nil)
	for i, kid := range []string{"rsa-1", "ec-1", "ed-1"} {
		u := &user{tg: tg, id: int64(100 + i), token: p.Sign(t, kid, idpClaims(int64(100+i)))}
		r := u.do(t, "GET", "/v1/sync", nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", kid, r)
		require.Equal(t, http.StatusOK, u.do(t, "GET", "/v1/sync?wait=1&after=0", nil).status, kid)
	}
	// HS256 beside: the dev token carries the required iss and aud; one
	// without them is refused.
	var dev protocol.DevToken
	r := (&user{tg: tg}).do(t, "POST", "/v1/dev/token", `{"user_id":7}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	r.decode(t, &dev)
	require.Equal(t, http.StatusOK, (&user{tg: tg, id: 7, token: dev.Token}).do(t, "GET", "/v1/sync", nil).status)
	requireError(t, tg.user(t, 7).do(t, "GET", "/v1/sync", nil), http.StatusUnauthorized, protocol.CodeUnauthorized, "HS256 without iss")

	w := &wsgw{tgw: tg}
	tok := p.Sign(t, "ed-1", idpClaims(42))
	c := dialWS(t, w, &user{tg: tg, id: 42, token: tok})
	c.hello(t, 0, nil)
	require.Equal(t, protocol.FrameWelcome, c.next(t).Type)
	c2, err := dialWSE(w.wsURL()+"?access_token="+tok, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c2.conn.Close() })
	c2.hello(t, 0, nil)
	require.Equal(t, protocol.FrameWelcome, c2.next(t).Type)
	bad, err := dialWSE(w.wsURL()+"?access_token="+p.Sign(t, "ed-1", idpClaims(42, withClaim("aud", "other"))), nil, nil)
	require.NoError(t, err)
	code, _ := bad.closeCode(t)
	require.Equal(t, protocol.CloseUnauthorized, code)
}

// TestIdentityProviderRefusals: every kind of bad token is a 401 in the
// error shape, with "token expired" when that is why.
func TestIdentityProviderRefusals(t *testing.T) {
	tg, p := newIdPGateway(t, nil)
	other := authtest.New(t)
	other.AddKey(t, "ghost", "ES256")
	other.AddKey(t, "rsa-1", "RS256") // a known kid, another key
	rsaJWK, err := json.Marshal(p.JWK("rsa-1"))
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(p.Public("rsa-1"))
	require.NoError(t, err)
	pemOf := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	for name, tok := range map[string]string{
		"unknown kid":        other.Sign(t, "ghost", idpClaims(1)),
		"forged known kid":   other.Sign(t, "rsa-1", idpClaims(1)),
		"wrong aud":          p.Sign(t, "rsa-1", idpClaims(1, withClaim("aud", "account"))),
		"wrong iss":          p.Sign(t, "ec-1", idpClaims(1, withClaim("iss", "https://evil.test/"))),
		"expired":            p.Sign(t, "ed-1", idpClaims(1, withClaim("exp", time.Now().Add(-time.Second).Unix()))),
		"HS256 with RSA PEM": authtest.SignWith(t, jwt.SigningMethodHS256, pemOf, "rsa-1", idpClaims(1)),
		"HS256 with RSA JWK": authtest.SignWith(t, jwt.SigningMethodHS256, rsaJWK, "rsa-1", idpClaims(1)),
		"alg none":           authtest.SignWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa-1", idpClaims(1)),
		"RS256 with EC kid":  authtest.SignWith(t, jwt.SigningMethodRS256, p.Private("rsa-1"), "ec-1", idpClaims(1)),
		"two sub":            p.Sign(t, "ec-1", idpClaims(1, withClaim("Sub", "2"))),
		"sub not an id":      p.Sign(t, "ec-1", idpClaims(1, withClaim("sub", "auth0|5f1"))),
	} {
		r := (&user{tg: tg, token: tok}).do(t, "GET", "/v1/sync", nil)
		requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, name)
		require.Equal(t, `Bearer realm="inboxd"`, r.header.Get("WWW-Authenticate"), name)
		if name == "expired" {
			require.Contains(t, string(r.body), "token expired")
		} else {
			require.Contains(t, string(r.body), "invalid token", name)
		}
	}
}

// TestIdentityUnknownKidFloor: a storm of tokens with unknown kids over
// HTTP makes at most one fetch of the key set per AuthJWKSMinRefresh,
// counted at the provider, and every one is a 401.
func TestIdentityUnknownKidFloor(t *testing.T) {
	const floor = 300 * time.Millisecond
	tg, p := newIdPGateway(t, func(c *Config) { c.AuthJWKSMinRefresh = floor })
	other := authtest.New(t)
	var toks []string
	for i := range 4 {
		kid := fmt.Sprintf("ghost-%d", i)
		other.AddKey(t, kid, "ES256")
		toks = append(toks, other.Sign(t, kid, idpClaims(1)))
	}
	before := p.Fetches()
	began := time.Now()
	var n atomic.Int64
	parallel(t, 160, 16, func(i int) error {
		r, err := (&user{tg: tg, token: toks[i%len(toks)]}).doE("GET", "/v1/sync", nil)
		if err != nil {
			return err
		}
		if r.status != http.StatusUnauthorized {
			return fmt.Errorf("unknown kid: %s", r)
		}
		n.Add(1)
		return nil
	})
	fetched := p.Fetches() - before // before the time: every fetch counted started within it
	elapsed := time.Since(began)
	t.Logf("%d requests with unknown kids in %v: %d fetches (floor %v)", n.Load(), elapsed, fetched, floor)
	require.GreaterOrEqual(t, fetched, int64(1))
	require.LessOrEqual(t, fetched, int64(elapsed/floor)+1, "at most one fetch per floor")
}

// TestIdentityKeyRotationUnderLoad: clients sync continuously while the
// provider rotates its keys through RS256, ES256 and EdDSA. A token of a
// new key is accepted at once (its kid is fetched at first sight), no
// request with a valid token fails, and a token of a removed key is a 401
// after the next fetch, with no restart. The refresh period is long: only
// the unknown kids make fetches.
func TestIdentityKeyRotationUnderLoad(t *testing.T) {
	tg, p := newIdPGateway(t, func(c *Config) { c.AuthJWKSRefresh = time.Hour })
	const clients = 8
	var current atomic.Pointer[[clients]string] // each client's token of the current key
	var gen atomic.Int64
	sign := func(kid string) {
		var toks [clients]string
		for i := range toks {
			toks[i] = p.Sign(t, kid, idpClaims(int64(500+i)))
		}
		current.Store(&toks)
		gen.Add(1)
	}
	sign("rsa-1")
	var seen [clients]atomic.Int64 // the generation of each client's last good request
	var requests atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var failure atomic.Pointer[string]
	for i := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				g := gen.Load()
				r, err := (&user{tg: tg, id: int64(500 + i), token: current.Load()[i]}).doE("GET", "/v1/sync", nil)
				if err != nil || r.status != http.StatusOK {
					msg := fmt.Sprintf("client %d, generation %d: %v %v", i, g, r, err)
					failure.CompareAndSwap(nil, &msg)
					return
				}
				requests.Add(1)
				seen[i].Store(g)
			}
		})
	}
	ghost := authtest.New(t)
	ghost.AddKey(t, "ghost", "EdDSA")
	old := "rsa-1"
	for step, alg := range []string{"ES256", "EdDSA", "RS256", "ES256", "EdDSA", "RS256"} {
		kid := fmt.Sprintf("%s-%d", strings.ToLower(alg), step+2)
		p.AddKey(t, kid, alg) // the provider publishes the new key, then signs with it
		sign(kid)
		g := gen.Load()
		waitFor(t, 30*time.Second, "every client on the new key", func() bool {
			for i := range seen {
				if seen[i].Load() < g && failure.Load() == nil {
					return false
				}
			}
			return true
		})
		require.Nil(t, failure.Load())
		oldTok := p.Sign(t, old, idpClaims(1))
		p.Remove(old)
		// An unknown kid makes a fetch that starts after the removal.
		r := (&user{tg: tg, token: ghost.Sign(t, "ghost", idpClaims(1))}).do(t, "GET", "/v1/sync", nil)
		requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, "ghost")
		r = (&user{tg: tg, token: oldTok}).do(t, "GET", "/v1/sync", nil)
		requireError(t, r, http.StatusUnauthorized, protocol.CodeUnauthorized, "token of the removed key "+old)
		old = kid
	}
	cancel()
	wg.Wait()
	require.Nil(t, failure.Load(), "a valid token failed")
	t.Logf("%d syncs of %d clients across 6 rotations, %d JWKS fetches", requests.Load(), clients, p.Fetches())
}

// TestIdentityJWKSOnly: a gateway with only a JWKS URL whose provider is
// unreachable at start serves, answers 503 to its tokens and /readyz (and
// closes a WebSocket 1013) until the first fetch, refuses HS256, and
// recovers without a restart; its fetches are in /metrics. DevMode needs
// the HS256 secret.
func TestIdentityJWKSOnly(t *testing.T) {
	p := authtest.New(t)
	p.AddKey(t, "ec-1", "ES256")
	p.SetFailing(true)
	tg := newGateway(t, func(c *Config) {
		c.AuthSecret, c.DevMode = nil, false
		c.AuthJWKSURL = p.URL()
		c.AuthJWKSMinRefresh = 50 * time.Millisecond
	})
	u := &user{tg: tg, id: 3, token: p.Sign(t, "ec-1", jwt.MapClaims{"sub": "3", "exp": time.Now().Add(time.Hour).Unix()})}
	r := u.do(t, "GET", "/v1/sync", nil)
	requireError(t, r, http.StatusServiceUnavailable, protocol.CodeUnavailable, "keys not loaded")
	require.NotEmpty(t, r.header.Get("Retry-After"))
	r = (&user{tg: tg}).do(t, "GET", "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Contains(t, string(r.body), `"jwks"`)
	ws, err := dialWSE((&wsgw{tgw: tg}).wsURL()+"?access_token="+u.token, nil, nil)
	require.NoError(t, err)
	code, frames := ws.closeCode(t)
	require.Equal(t, protocol.CloseTryAgainLater, code, "a WebSocket is told to come back, not refused")
	require.Len(t, frames, 1)
	require.Equal(t, protocol.CodeUnavailable, frames[0].Code)
	require.True(t, frames[0].Retryable)
	require.Zero(t, frames[0].RetryAfterMS, "no hint: the refused clients come back on their own jittered backoff (docs/websocket.md)")

	p.SetFailing(false)
	waitFor(t, 30*time.Second, "readiness", func() bool {
		return (&user{tg: tg}).do(t, "GET", "/readyz", nil).status == http.StatusOK
	})
	require.Equal(t, http.StatusOK, u.do(t, "GET", "/v1/sync", nil).status)
	hs := tg.user(t, 3)
	requireError(t, hs.do(t, "GET", "/v1/sync", nil), http.StatusUnauthorized, protocol.CodeUnauthorized, "HS256 without a secret")
	require.Equal(t, http.StatusNotFound, (&user{tg: tg}).do(t, "POST", "/v1/dev/token", `{"user_id":1}`).status)

	m := string((&user{tg: tg}).do(t, "GET", "/metrics", nil).body)
	require.Contains(t, m, `inboxd_gateway_jwks_fetches_total{result="error"}`)
	require.Contains(t, m, `inboxd_gateway_jwks_fetches_total{result="ok"}`)
	require.Contains(t, m, "inboxd_gateway_jwks_keys 1")

	_, err = New(Config{AuthJWKSURL: p.URL(), DevMode: true}, tg.env.Pool, tg.env.Producer)
	require.ErrorContains(t, err, "DevMode needs AuthSecret")
	_, err = New(Config{}, tg.env.Pool, tg.env.Producer)
	require.ErrorContains(t, err, "AuthSecret or AuthJWKSURL")
}
