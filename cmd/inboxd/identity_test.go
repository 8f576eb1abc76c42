package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestGatewayJWKSOnly: `inboxd gateway` configured by environment with
// only an identity provider's JWKS (no shared secret), an issuer, an
// audience and a user claim of its own accepts the provider's tokens and
// refuses HS256 ones.
func TestGatewayJWKSOnly(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pt, err := key.PublicKey.Bytes()
	require.NoError(t, err)
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, err := json.Marshal(map[string]any{"keys": []any{map[string]string{
		"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "x": b64(pt[1:33]), "y": b64(pt[33:])}}})
	require.NoError(t, err)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(jwks) }))
	t.Cleanup(idp.Close)

	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	port := testenv.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.Start(t, []string{"DATABASE_URL=" + env.DatabaseURL, "INBOXD_KAFKA_BROKERS=" + strings.Join(env.Brokers, ","),
		"INBOXD_TOPIC=" + env.Topic, fmt.Sprintf("INBOXD_HTTP_ADDR=127.0.0.1:%d", port),
		"INBOXD_AUTH_JWKS_URL=" + idp.URL, "INBOXD_AUTH_ISSUER=https://idp.test/", "INBOXD_AUTH_AUDIENCE=inboxd",
		"INBOXD_AUTH_USER_CLAIM=uid", "INBOXD_AUTH_LEEWAY=5s"}, "gateway")
	waitReady(t, base+"/readyz")

	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "alice@example.com", "uid": 42,
		"iss": "https://idp.test/", "aud": "inboxd", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(key)
	require.NoError(t, err)
	code, _, err := (&api{t: t, base: base, token: signed}).call("GET", "/v1/sync", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	code, _, err = (&api{t: t, base: base, token: token(t, 42)}).call("GET", "/v1/sync", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code, "no HS256 without a secret")
}

// Without a secret or a JWKS URL the gateway does not start.
func TestGatewayNeedsVerification(t *testing.T) {
	t.Setenv("INBOXD_AUTH_SECRET", "")
	t.Setenv("INBOXD_AUTH_JWKS_URL", "")
	err := runGateway(context.Background(), nil)
	require.ErrorContains(t, err, "--auth-jwks-url")
}
