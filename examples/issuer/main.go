// Command issuer is a product's own token issuer for inboxd, at its
// smallest: it holds an ES256 (ECDSA P-256) key, publishes the public half
// as a JWKS, and signs a short-lived token for a user. The gateway verifies
// those tokens with --auth-jwks-url pointing here; nothing secret is shared
// with it. See README.md.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run serves the issuer until ctx ends.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("issuer", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "address to serve the JWKS and the tokens on")
	keyFile := fs.String("key", "issuer-key.pem", "PEM file of the ES256 private key; made when missing")
	iss := fs.String("issuer", "https://issuer.example.com", "iss of the tokens (the gateway's --auth-issuer)")
	aud := fs.String("audience", "inboxd", "aud of the tokens (the gateway's --auth-audience)")
	ttl := fs.Duration("ttl", 15*time.Minute, "lifetime of a token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := loadOrMakeKey(*keyFile)
	if err != nil {
		return err
	}
	is := &Issuer{Key: key, Issuer: *iss, Audience: *aud, TTL: *ttl}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "issuer on http://%s: JWKS at /.well-known/jwks.json (kid %s), tokens at POST /token\n",
		ln.Addr(), is.KeyID())
	srv := &http.Server{Handler: is.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Issuer signs inboxd tokens with Key and publishes its public key.
type Issuer struct {
	Key      *ecdsa.PrivateKey
	Issuer   string // iss
	Audience string // aud
	TTL      time.Duration
}

// KeyID is the kid of Key: its RFC 7638 thumbprint, so that a new key
// has a new kid without anyone choosing one.
func (is *Issuer) KeyID() string {
	jwk := is.publicJWK()
	// The members in the order RFC 7638 requires, no spaces.
	canon := fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`, jwk["x"], jwk["y"])
	sum := sha256.Sum256([]byte(canon))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (is *Issuer) publicJWK() map[string]string {
	pt, err := is.Key.PublicKey.Bytes() // 0x04 || x || y
	if err != nil {
		panic(err) // a P-256 key always has its point
	}
	b64 := base64.RawURLEncoding.EncodeToString
	return map[string]string{"kty": "EC", "crv": "P-256", "x": b64(pt[1:33]), "y": b64(pt[33:65])}
}

// JWKS is the key set the gateway fetches. During a rotation a real issuer
// publishes the new key beside the old one first, then signs with it, and
// removes the old one when its last token has expired.
func (is *Issuer) JWKS() map[string]any {
	jwk := is.publicJWK()
	jwk["kid"], jwk["alg"], jwk["use"] = is.KeyID(), "ES256", "sig"
	return map[string]any{"keys": []any{jwk}}
}

// Token signs a token for an inboxd user id: sub is the id as a decimal
// string, as the gateway requires.
func (is *Issuer) Token(user int64) (string, time.Time, error) {
	now := time.Now()
	exp := now.Add(is.TTL)
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{
		Issuer:    is.Issuer,
		Audience:  jwt.ClaimStrings{is.Audience},
		Subject:   strconv.FormatInt(user, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
	})
	tok.Header["kid"] = is.KeyID()
	s, err := tok.SignedString(is.Key)
	return s, exp, err
}

// Handler serves GET /.well-known/jwks.json and POST /token.
//
// POST /token {"user_id":42} answers {"token","expires_at"}. It trusts its
// caller: in a product this is where the product's own session is checked
// (a cookie, its login) and the user's inboxd id looked up, never a user id
// taken from the request.
func (is *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_ = json.NewEncoder(w).Encode(is.JWKS())
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			UserID int64 `json:"user_id"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&req); err != nil || req.UserID <= 0 {
			http.Error(w, `{"error":"user_id must be a positive integer"}`, http.StatusBadRequest)
			return
		}
		tok, exp, err := is.Token(req.UserID)
		if err != nil {
			http.Error(w, `{"error":"sign"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339)})
	})
	return mux
}

// loadOrMakeKey reads a PKCS#8 PEM EC P-256 key, or makes one and writes
// it (mode 0600) when the file does not exist.
func loadOrMakeKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, fmt.Errorf("write key %s: %w", path, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read key %s: %w", path, err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("key %s: no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("key %s: not an EC P-256 key", path)
	}
	return key, nil
}
