// Package authtest is an identity provider for tests: it holds signing
// keys (RSA, EC P-256, Ed25519), serves their JWKS over an httptest
// server, counts the fetches, and signs tokens. Keys are added and removed
// while it serves, as a provider rotates them. Tests only.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// IdP is a test identity provider. It is safe for concurrent use.
type IdP struct {
	srv     *httptest.Server
	fetches atomic.Int64
	failing atomic.Bool

	mu        sync.Mutex
	keys      map[string]key // every key ever made, by kid
	published []string       // the kids in the JWKS, in order
	extra     []any          // raw JWKs served beside (tests of odd keys)
}

type key struct {
	method jwt.SigningMethod
	priv   crypto.Signer
	jwk    map[string]any
}

// New starts an IdP with no key; it stops when the test ends.
func New(t testing.TB) *IdP {
	t.Helper()
	p := &IdP{keys: map[string]key{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the JWKS URL.
func (p *IdP) URL() string { return p.srv.URL + "/.well-known/jwks.json" }

// Fetches is the number of JWKS requests served (failed ones included).
func (p *IdP) Fetches() int64 { return p.fetches.Load() }

// SetFailing makes the JWKS answer 500 (true) or the keys again (false).
func (p *IdP) SetFailing(f bool) { p.failing.Store(f) }

func (p *IdP) serve(w http.ResponseWriter, r *http.Request) {
	p.fetches.Add(1)
	if r.URL.Path != "/.well-known/jwks.json" || p.failing.Load() {
		http.Error(w, "unavailable", http.StatusInternalServerError)
		return
	}
	p.mu.Lock()
	set := []any{}
	for _, kid := range p.published {
		set = append(set, p.keys[kid].jwk)
	}
	set = append(set, p.extra...)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": set})
}

// AddKey makes a key for alg (RS256, ES256 or EdDSA) under kid and
// publishes it.
func (p *IdP) AddKey(t testing.TB, kid, alg string) {
	t.Helper()
	k, err := newKey(kid, alg)
	require.NoError(t, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = k
	p.published = append(p.published, kid)
}

// AddRawJWK serves jwk beside the keys (a key the gateway must skip).
func (p *IdP) AddRawJWK(jwk map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extra = append(p.extra, jwk)
}

// Remove unpublishes kid; Sign can still sign with it.
func (p *IdP) Remove(kid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range p.published {
		if k == kid {
			p.published = append(p.published[:i:i], p.published[i+1:]...)
			return
		}
	}
}

// JWK returns the public JWK of kid as served.
func (p *IdP) JWK(kid string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[kid].jwk
}

// Public returns the public key of kid.
func (p *IdP) Public(kid string) crypto.PublicKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[kid].priv.Public()
}

// Sign signs claims with kid's key and algorithm, kid in the header.
func (p *IdP) Sign(t testing.TB, kid string, claims jwt.MapClaims) string {
	t.Helper()
	p.mu.Lock()
	k, ok := p.keys[kid]
	p.mu.Unlock()
	require.True(t, ok, "no key %q", kid)
	return SignWith(t, k.method, k.priv, kid, claims)
}

// SignWith signs claims with method and key, kid in the header when set.
func SignWith(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func newKey(kid, alg string) (key, error) {
	switch alg {
	case "RS256":
		priv, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return key{}, err
		}
		return key{jwt.SigningMethodRS256, priv, map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": alg,
			"n": b64(priv.N.Bytes()), "e": b64(big.NewInt(int64(priv.E)).Bytes())}}, nil
	case "ES256":
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return key{}, err
		}
		pt, err := priv.PublicKey.Bytes()
		if err != nil {
			return key{}, err
		}
		return key{jwt.SigningMethodES256, priv, map[string]any{"kty": "EC", "kid": kid, "use": "sig", "alg": alg,
			"crv": "P-256", "x": b64(pt[1:33]), "y": b64(pt[33:])}}, nil
	case "EdDSA":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return key{}, err
		}
		return key{jwt.SigningMethodEdDSA, priv, map[string]any{"kty": "OKP", "kid": kid, "use": "sig", "alg": alg,
			"crv": "Ed25519", "x": b64(pub)}}, nil
	}
	return key{}, fmt.Errorf("authtest: no key for alg %q", alg)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// Private returns the private key of kid (nil when none).
func (p *IdP) Private(kid string) crypto.Signer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[kid].priv
}
