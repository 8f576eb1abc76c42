package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// minRSABits is the smallest RSA modulus accepted in a key set.
const minRSABits = 2048

// publicKey is one usable key of a key set: its key type decides the one
// algorithm it verifies, so that no key serves two algorithms (an RSA key
// is never an HMAC secret, an EC key never verifies RS256).
type publicKey struct {
	alg string // RS256, ES256 or EdDSA
	key crypto.PublicKey
}

// jwk is the JSON form of a key (RFC 7517, 7518, 8037): the members we use.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS decodes a key set into its usable keys by kid; skipped names
// the keys left out and why. A document that is not a key set, or that
// names a kid twice, is an error; so is one without a usable key, so that
// a provider's mistake never empties the keys held.
func parseJWKS(b []byte) (keys map[string]publicKey, skipped []string, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("decode key set: %w", err)
	}
	keys = map[string]publicKey{}
	seen := map[string]bool{}
	for i, raw := range doc.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		if k.Kid != "" && seen[k.Kid] {
			return nil, nil, fmt.Errorf("kid %q given twice", k.Kid)
		}
		seen[k.Kid] = true
		pk, err := k.publicKey()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("kid %q: %v", k.Kid, err))
			continue
		}
		keys[k.Kid] = pk
	}
	if len(keys) == 0 {
		return nil, skipped, fmt.Errorf("no usable key among %d (%v)", len(doc.Keys), skipped)
	}
	return keys, skipped, nil
}

// publicKey returns the key of k with the algorithm its type allows.
func (k jwk) publicKey() (publicKey, error) {
	if k.Kid == "" {
		return publicKey{}, errors.New("no kid")
	}
	if k.Use != "" && k.Use != "sig" {
		return publicKey{}, fmt.Errorf("use %q", k.Use)
	}
	var pk publicKey
	var err error
	switch {
	case k.Kty == "RSA":
		pk.alg = "RS256"
		pk.key, err = k.rsa()
	case k.Kty == "EC" && k.Crv == "P-256":
		pk.alg = "ES256"
		pk.key, err = k.ecP256()
	case k.Kty == "OKP" && k.Crv == "Ed25519":
		pk.alg = "EdDSA"
		pk.key, err = k.ed25519()
	default:
		return publicKey{}, fmt.Errorf("unsupported key type %q curve %q", k.Kty, k.Crv)
	}
	if err != nil {
		return publicKey{}, err
	}
	if k.Alg != "" && k.Alg != pk.alg {
		return publicKey{}, fmt.Errorf("alg %q unsupported for a %s key", k.Alg, k.Kty)
	}
	return pk, nil
}

func (k jwk) rsa() (*rsa.PublicKey, error) {
	n, err := b64int(k.N)
	if err != nil {
		return nil, fmt.Errorf("n: %w", err)
	}
	e, err := b64int(k.E)
	if err != nil {
		return nil, fmt.Errorf("e: %w", err)
	}
	if n.BitLen() < minRSABits {
		return nil, fmt.Errorf("RSA modulus of %d bits, below %d", n.BitLen(), minRSABits)
	}
	if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
		return nil, errors.New("bad RSA exponent")
	}
	return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
}

func (k jwk) ecP256() (*ecdsa.PublicKey, error) {
	x, err := b64fixed(k.X, 32)
	if err != nil {
		return nil, fmt.Errorf("x: %w", err)
	}
	y, err := b64fixed(k.Y, 32)
	if err != nil {
		return nil, fmt.Errorf("y: %w", err)
	}
	// The parse checks that the point is on the curve.
	point := append(append([]byte{4}, x...), y...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, fmt.Errorf("EC point: %w", err)
	}
	return pub, nil
}

func (k jwk) ed25519() (ed25519.PublicKey, error) {
	x, err := b64fixed(k.X, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("x: %w", err)
	}
	return ed25519.PublicKey(x), nil
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	return new(big.Int).SetBytes(b), nil
}

func b64fixed(s string, n int) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), n)
	}
	return b, nil
}
