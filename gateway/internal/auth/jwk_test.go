package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/gateway/internal/auth/authtest"
)

// TestParseJWKS: usable keys by kid; skipped ones named; a document that
// names a kid twice or has no usable key is an error.
func TestParseJWKS(t *testing.T) {
	p := authtest.New(t)
	p.AddKey(t, "r", "RS256")
	p.AddKey(t, "e", "ES256")
	p.AddKey(t, "d", "EdDSA")
	good := []any{p.JWK("r"), p.JWK("e"), p.JWK("d")}
	with := func(k map[string]any, name string, v any) map[string]any {
		c := map[string]any{}
		for n, x := range k {
			c[n] = x
		}
		c[name] = v
		return c
	}
	// Each a key to skip, under a kid of its own.
	bad := func(k map[string]any, kid, name string, v any) map[string]any {
		return with(with(k, "kid", kid), name, v)
	}
	skipped := []any{
		map[string]any{"kty": "oct", "kid": "o", "k": "c2VjcmV0"},
		bad(p.JWK("r"), "r-enc", "use", "enc"),
		bad(p.JWK("r"), "r-512", "alg", "RS512"),
		bad(p.JWK("r"), "r-small", "n", "AQAB"), // a 17-bit modulus
		bad(p.JWK("e"), "e-384", "crv", "P-384"),
		bad(p.JWK("e"), "e-off", "y", "AAAA"),
		bad(p.JWK("d"), "d-short", "x", "AAAA"),
		with(p.JWK("d"), "kid", ""),
	}
	doc, err := json.Marshal(map[string]any{"keys": append(good, skipped...)})
	require.NoError(t, err)
	keys, why, err := parseJWKS(doc)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Len(t, why, len(skipped), "%v", why)
	require.IsType(t, &rsa.PublicKey{}, keys["r"].key)
	require.IsType(t, &ecdsa.PublicKey{}, keys["e"].key)
	require.IsType(t, ed25519.PublicKey{}, keys["d"].key)

	for name, doc := range map[string]any{
		"kid twice":     map[string]any{"keys": []any{p.JWK("r"), with(p.JWK("e"), "kid", "r")}},
		"no usable key": map[string]any{"keys": skipped},
		"empty":         map[string]any{"keys": []any{}},
		"not a set":     []any{p.JWK("r")},
	} {
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		_, _, err = parseJWKS(b)
		require.Error(t, err, name)
	}
}

// FuzzParseJWKS: any document parses without a panic, and every key kept
// has the algorithm of its type.
func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"b","x":"","y":""},{"kty":"RSA","kid":"c","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, _, err := parseJWKS(b)
		if err != nil {
			return
		}
		for kid, k := range keys {
			ok := false
			switch k.key.(type) {
			case *rsa.PublicKey:
				ok = k.alg == "RS256"
			case *ecdsa.PublicKey:
				ok = k.alg == "ES256"
			case ed25519.PublicKey:
				ok = k.alg == "EdDSA"
			}
			if !ok || kid == "" {
				t.Fatalf("kid %q: alg %s for %T", kid, k.alg, k.key)
			}
		}
	})
}
