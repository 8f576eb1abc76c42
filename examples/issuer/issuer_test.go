package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testworld"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestIssuerWithGateway: a gateway with only --auth-jwks-url (no shared
// secret) pointing at the issuer accepts its tokens, refuses one for
// another audience, and takes a new key of the issuer without a restart.
func TestIssuerWithGateway(t *testing.T) {
	var current atomic.Pointer[Issuer]
	current.Store(newIssuer(t, "inboxd"))
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Load().Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(idp.Close)

	env := testenv.New(t, testenv.Options{})
	env.StartFanout(t)
	gw := testworld.Serve(t, env, gateway.Config{
		AuthJWKSURL:        idp.URL + "/.well-known/jwks.json",
		AuthIssuer:         "https://issuer.example.com",
		AuthAudience:       "inboxd",
		AuthJWKSMinRefresh: 100 * time.Millisecond,
		Logger:             env.Logger,
	}, gateway.WSConfig{})

	tok := token(t, idp.URL, 42)
	require.Equal(t, http.StatusOK, get(t, gw.URL+"/v1/sync", tok))
	res := post(t, gw.URL+"/v1/conversations", tok, `{"title":"support","members":[42,43]}`)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, res)

	other := newIssuer(t, "another-app")
	bad, _, err := other.Token(42)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, get(t, gw.URL+"/v1/sync", bad), "a token for another audience")

	// A new key: its first token makes the gateway fetch the key set.
	current.Store(newIssuer(t, "inboxd"))
	require.Equal(t, http.StatusOK, get(t, gw.URL+"/v1/sync", token(t, idp.URL, 42)))
}

// TestRun: the program makes its key file, serves the JWKS, and reads the
// same key when started again.
func TestRun(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key.pem")
	kid := func() string {
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		done := make(chan error, 1)
		pr, pw := io.Pipe()
		go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-key", keyFile}, io.MultiWriter(&out, pw)) }()
		line := make([]byte, 512)
		n, err := pr.Read(line)
		require.NoError(t, err)
		cancel()
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		require.NoError(t, <-done)
		s := string(line[:n])
		require.Contains(t, s, "(kid ")
		return s[strings.Index(s, "(kid ")+5 : strings.Index(s, ")")]
	}
	first := kid()
	require.Equal(t, first, kid(), "the same key file, the same kid")
}

func newIssuer(t *testing.T, aud string) *Issuer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return &Issuer{Key: key, Issuer: "https://issuer.example.com", Audience: aud, TTL: time.Minute}
}

func token(t *testing.T, issuer string, user int64) string {
	res, err := http.Post(issuer+"/token", "application/json", strings.NewReader(fmt.Sprintf(`{"user_id":%d}`, user)))
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body struct{ Token string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return body.Token
}

func get(t *testing.T, url, tok string) int { return do(t, "GET", url, tok, "") }

func post(t *testing.T, url, tok, body string) int { return do(t, "POST", url, tok, body) }

func do(t *testing.T, method, url, tok, body string) int {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
