package auth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/internal/auth/authtest"
)

var testSecret = []byte("auth-test-secret-0123456789abcdef")

// start runs a Verifier of cfg until the test ends and waits for its first
// key set when it has a JWKS URL that answers.
func start(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	v, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return v
}

func waitReady(t *testing.T, v *Verifier) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for v.Ready() != nil {
		require.True(t, time.Now().Before(deadline), "key set never fetched: %v", v.Ready())
		time.Sleep(5 * time.Millisecond)
	}
}

func claims(user string, mods ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix(), "iss": "https://idp.test/",
		"aud": "inboxd"}
	for _, m := range mods {
		m(c)
	}
	return c
}

func set(k string, v any) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c[k] = v } }

func newIdP(t *testing.T) *authtest.IdP {
	p := authtest.New(t)
	p.AddKey(t, "rsa-1", "RS256")
	p.AddKey(t, "ec-1", "ES256")
	p.AddKey(t, "ed-1", "EdDSA")
	return p
}

// TestVerifyAlgorithms: a token of each algorithm of the key set, and an
// HS256 one with the secret, verify to their user; aud may be a list.
func TestVerifyAlgorithms(t *testing.T) {
	p := newIdP(t)
	v := start(t, Config{Secret: testSecret, JWKSURL: p.URL(), Issuer: "https://idp.test/", Audience: "inboxd"})
	waitReady(t, v)
	toks := map[string]string{
		"RS256":    p.Sign(t, "rsa-1", claims("11")),
		"ES256":    p.Sign(t, "ec-1", claims("12")),
		"EdDSA":    p.Sign(t, "ed-1", claims("13")),
		"HS256":    authtest.SignWith(t, jwt.SigningMethodHS256, testSecret, "", claims("14")),
		"aud list": p.Sign(t, "ec-1", claims("15", set("aud", []string{"other", "inboxd"}))),
	}
	want := map[string]int64{"RS256": 11, "ES256": 12, "EdDSA": 13, "HS256": 14, "aud list": 15}
	for name, tok := range toks {
		tk, err := v.Verify(context.Background(), tok)
		u, exp := tk.User, tk.Expires
		require.NoError(t, err, name)
		require.Equal(t, want[name], u, name)
		require.WithinDuration(t, time.Now().Add(time.Hour), exp, time.Minute, name)
	}
}

// TestVerifyRefusals: every kind of bad token is refused, and says why.
func TestVerifyRefusals(t *testing.T) {
	p := newIdP(t)
	p.AddRawJWK(map[string]any{"kty": "oct", "kid": "oct-1", "k": "c2VjcmV0"})
	v := start(t, Config{Secret: testSecret, JWKSURL: p.URL(), Issuer: "https://idp.test/", Audience: "inboxd",
		JWKSMinRefresh: 50 * time.Millisecond})
	waitReady(t, v)
	for name, tok := range refusedTokens(t, p) {
		_, err := v.Verify(context.Background(), tok)
		require.Error(t, err, name)
		t.Logf("%s: %v", name, err)
		if name == "expired" {
			require.ErrorIs(t, err, jwt.ErrTokenExpired)
		}
		if name == "unknown kid" {
			require.ErrorIs(t, err, ErrUnknownKey)
		}
	}
}

// refusedTokens are tokens a verifier with testSecret, p's keys, issuer
// https://idp.test/ and audience inboxd must refuse.
func refusedTokens(t *testing.T, p *authtest.IdP) map[string]string {
	rsaPub, err := x509.MarshalPKIXPublicKey(p.Public("rsa-1"))
	require.NoError(t, err)
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})
	rsaJWK, err := json.Marshal(p.JWK("rsa-1"))
	require.NoError(t, err)
	other := authtest.New(t)
	other.AddKey(t, "rsa-1", "RS256") // same kid, another key
	other.AddKey(t, "ec-9", "ES256")
	hs := func(secret []byte, kid string) string {
		return authtest.SignWith(t, jwt.SigningMethodHS256, secret, kid, claims("1"))
	}
	return map[string]string{
		"unknown kid":           other.Sign(t, "ec-9", claims("1")),
		"forged with known kid": other.Sign(t, "rsa-1", claims("1")),
		"no kid":                authtest.SignWith(t, jwt.SigningMethodES256, mustKey(t, other, "ec-9"), "", claims("1")),
		"wrong aud":             p.Sign(t, "rsa-1", claims("1", set("aud", "other"))),
		"wrong aud list":        p.Sign(t, "rsa-1", claims("1", set("aud", []string{"a", "b"}))),
		"no aud":                p.Sign(t, "rsa-1", claims("1", func(c jwt.MapClaims) { delete(c, "aud") })),
		"wrong iss":             p.Sign(t, "ec-1", claims("1", set("iss", "https://evil.test/"))),
		"no iss":                p.Sign(t, "ec-1", claims("1", func(c jwt.MapClaims) { delete(c, "iss") })),
		"expired":               p.Sign(t, "ed-1", claims("1", set("exp", time.Now().Add(-time.Minute).Unix()))),
		"no exp":                p.Sign(t, "ed-1", claims("1", func(c jwt.MapClaims) { delete(c, "exp") })),
		"not yet valid":         p.Sign(t, "ed-1", claims("1", set("nbf", time.Now().Add(time.Minute).Unix()))),
		"HS256 with RSA PEM":    hs(rsaPEM, "rsa-1"),
		"HS256 with RSA JWK":    hs(rsaJWK, "rsa-1"),
		"HS256 with oct JWK":    hs([]byte("secret"), "oct-1"),
		"alg none":              authtest.SignWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa-1", claims("1")),
		"RS256 with EC kid":     authtest.SignWith(t, jwt.SigningMethodRS256, mustKey(t, p, "rsa-1"), "ec-1", claims("1")),
		"ES256 with Ed kid":     authtest.SignWith(t, jwt.SigningMethodES256, mustKey(t, p, "ec-1"), "ed-1", claims("1")),
		"RS512 with RSA kid":    authtest.SignWith(t, jwt.SigningMethodRS512, mustKey(t, p, "rsa-1"), "rsa-1", claims("1")),
		"PS256 with RSA kid":    authtest.SignWith(t, jwt.SigningMethodPS256, mustKey(t, p, "rsa-1"), "rsa-1", claims("1")),
		"sub a number":          p.Sign(t, "ec-1", claims("1", set("sub", 1))),
		"sub 042":               p.Sign(t, "ec-1", claims("042")),
		"sub 0":                 p.Sign(t, "ec-1", claims("0")),
		"sub name":              p.Sign(t, "ec-1", claims("alice")),
		"two sub":               p.Sign(t, "ec-1", claims("1", set("SUB", "2"))),
		"exp string":            p.Sign(t, "ec-1", claims("1", set("exp", "99999999999"))),
	}
}

// mustKey is the private key of kid at p, for signing with another alg.
func mustKey(t *testing.T, p *authtest.IdP, kid string) any {
	t.Helper()
	k := p.Private(kid)
	require.NotNil(t, k)
	return k
}

// TestHS256OnlyAndJWKSOnly: without a key set RS256 is refused; without a
// secret HS256 is (even signed with an empty key).
func TestHS256OnlyAndJWKSOnly(t *testing.T) {
	p := newIdP(t)
	hsOnly := start(t, Config{Secret: testSecret})
	_, err := hsOnly.Verify(context.Background(), p.Sign(t, "rsa-1", claims("1")))
	require.Error(t, err)
	jwksOnly := start(t, Config{JWKSURL: p.URL()})
	waitReady(t, jwksOnly)
	for _, secret := range [][]byte{testSecret, {}} {
		_, err = jwksOnly.Verify(context.Background(), authtest.SignWith(t, jwt.SigningMethodHS256, secret, "", claims("1")))
		require.Error(t, err)
	}
	tk, err := jwksOnly.Verify(context.Background(), p.Sign(t, "ed-1", claims("5")))
	u := tk.User
	require.NoError(t, err)
	require.Equal(t, int64(5), u)
}

// TestUserClaim: a custom claim may be a decimal string or a JSON integer;
// sub is then not used.
func TestUserClaim(t *testing.T) {
	p := newIdP(t)
	v := start(t, Config{JWKSURL: p.URL(), UserClaim: "inboxd_uid"})
	waitReady(t, v)
	for name, c := range map[string]struct {
		claims jwt.MapClaims
		want   int64
	}{
		"string":     {claims("auth0|abc", set("inboxd_uid", "77")), 77},
		"number":     {claims("auth0|abc", set("inboxd_uid", 78)), 78},
		"fraction":   {claims("auth0|abc", set("inboxd_uid", 78.5)), 0},
		"exponent":   {claims("auth0|abc", set("inboxd_uid", json.Number("7e1"))), 0},
		"negative":   {claims("auth0|abc", set("inboxd_uid", -3)), 0},
		"missing":    {claims("9"), 0},
		"leading 0s": {claims("9", set("inboxd_uid", "079")), 0},
	} {
		tk, err := v.Verify(context.Background(), p.Sign(t, "rsa-1", c.claims))
		u := tk.User
		if c.want == 0 {
			require.Error(t, err, name)
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, c.want, u, name)
	}
}

// TestLeeway: an expired token within the leeway passes, beyond it not.
func TestLeeway(t *testing.T) {
	v := start(t, Config{Secret: testSecret, Leeway: time.Minute})
	sign := func(exp time.Duration) string {
		return authtest.SignWith(t, jwt.SigningMethodHS256, testSecret, "", claims("1", set("exp", time.Now().Add(exp).Unix())))
	}
	_, err := v.Verify(context.Background(), sign(-10*time.Second))
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), sign(-2*time.Minute))
	require.ErrorIs(t, err, jwt.ErrTokenExpired)
}

// TestUnknownKidFloor: a storm of tokens with unknown kids makes at most
// one fetch per JWKSMinRefresh, counted at the provider; every one is
// refused, and waits at most for one fetch.
func TestUnknownKidFloor(t *testing.T) {
	p := newIdP(t)
	const floor = 200 * time.Millisecond
	v := start(t, Config{JWKSURL: p.URL(), JWKSMinRefresh: floor, JWKSRefresh: time.Hour})
	waitReady(t, v)
	other := authtest.New(t)
	other.AddKey(t, "ghost", "ES256")
	tok := other.Sign(t, "ghost", claims("1"))
	before := p.Fetches()
	began := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Since(began) < 5*floor {
				_, err := v.Verify(context.Background(), tok)
				if !errors.Is(err, ErrUnknownKey) {
					t.Errorf("want unknown key, got %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	fetched := p.Fetches() - before // before the time: every fetch counted started within it
	elapsed := time.Since(began)
	t.Logf("%d fetches in %v of a storm with a floor of %v", fetched, elapsed, floor)
	require.GreaterOrEqual(t, fetched, int64(1), "an unknown kid fetches the set again")
	require.LessOrEqual(t, fetched, int64(elapsed/floor)+1, "at most one fetch per floor")
}

// TestRotation: a key added to the set verifies at its first token, a key
// removed stops verifying after the next fetch, and KeysRemoved is told.
func TestRotation(t *testing.T) {
	p := newIdP(t)
	var removed sync.WaitGroup
	removed.Add(1)
	var once sync.Once
	v := start(t, Config{JWKSURL: p.URL(), JWKSMinRefresh: 20 * time.Millisecond, JWKSRefresh: time.Hour,
		KeysRemoved: func() { once.Do(removed.Done) }})
	waitReady(t, v)
	old := p.Sign(t, "rsa-1", claims("1"))
	_, err := v.Verify(context.Background(), old)
	require.NoError(t, err)

	p.AddKey(t, "rsa-2", "RS256")
	p.Remove("rsa-1")
	tk, err := v.Verify(context.Background(), p.Sign(t, "rsa-2", claims("2")))
	u := tk.User
	require.NoError(t, err, "a new kid is fetched at first sight")
	require.Equal(t, int64(2), u)
	removed.Wait()
	_, err = v.Verify(context.Background(), old)
	require.ErrorIs(t, err, ErrUnknownKey, "the removed key no longer verifies")
}

// TestUnreachableJWKS: before any fetch succeeds a token that needs the key
// set is ErrKeysUnavailable and Ready says why; HS256 works; once the
// provider answers, the retry (every JWKSMinRefresh) loads it; a later
// failure keeps the last good set.
func TestUnreachableJWKS(t *testing.T) {
	p := newIdP(t)
	p.SetFailing(true)
	v := start(t, Config{Secret: testSecret, JWKSURL: p.URL(), JWKSMinRefresh: 20 * time.Millisecond, JWKSRefresh: 40 * time.Millisecond})
	tok := p.Sign(t, "ec-1", claims("3"))
	_, err := v.Verify(context.Background(), tok)
	require.ErrorIs(t, err, ErrKeysUnavailable)
	require.Error(t, v.Ready())
	_, err = v.Verify(context.Background(), authtest.SignWith(t, jwt.SigningMethodHS256, testSecret, "", claims("4")))
	require.NoError(t, err)

	p.SetFailing(false)
	waitReady(t, v)
	_, err = v.Verify(context.Background(), tok)
	require.NoError(t, err)

	p.SetFailing(true)
	n := p.Fetches()
	for p.Fetches() < n+3 {
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, v.Ready())
	_, err = v.Verify(context.Background(), p.Sign(t, "rsa-1", claims("3")))
	require.NoError(t, err, "the last good set stays")
}

func TestConfigValidate(t *testing.T) {
	for name, cfg := range map[string]Config{
		"nothing":         {},
		"not http":        {JWKSURL: "file:///etc/jwks.json"},
		"no host":         {JWKSURL: "https://"},
		"negative leeway": {Secret: testSecret, Leeway: -time.Second},
		"floor above":     {JWKSURL: "https://x.test/jwks", JWKSMinRefresh: time.Hour, JWKSRefresh: time.Minute},
	} {
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}

// TestVerifyTokenIdentity: a token's jti and iat reach the caller (the
// revocations name them); a token without them has them zero.
func TestVerifyTokenIdentity(t *testing.T) {
	v := start(t, Config{Secret: testSecret})
	iat := time.Now().Add(-time.Minute).Truncate(time.Second)
	tok := authtest.SignWith(t, jwt.SigningMethodHS256, testSecret, "", jwt.MapClaims{"sub": "7",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": iat.Unix(), "jti": "tok-1"})
	got, err := v.Verify(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, int64(7), got.User)
	require.Equal(t, "tok-1", got.ID)
	require.True(t, iat.Equal(got.IssuedAt), "iat %v, want %v", got.IssuedAt, iat)
	bare := authtest.SignWith(t, jwt.SigningMethodHS256, testSecret, "", jwt.MapClaims{"sub": "7",
		"exp": time.Now().Add(time.Hour).Unix()})
	got, err = v.Verify(context.Background(), bare)
	require.NoError(t, err)
	require.Empty(t, got.ID)
	require.True(t, got.IssuedAt.IsZero())
}
