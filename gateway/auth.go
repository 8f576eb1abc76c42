package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol"
)

type ctxKey int

const userKey ctxKey = 1

// userFrom returns the authenticated user of ctx, 0 when none.
func userFrom(ctx context.Context) int64 {
	u, _ := ctx.Value(userKey).(int64)
	return u
}

// IssueToken signs an HS256 token for user with lifetime ttl, as the dev
// token endpoint does. Tools and tests use it; production tokens come from
// the deployment's identity service with the same claims (sub, exp).
func IssueToken(secret []byte, user int64, ttl time.Duration) (string, error) {
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(user, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// verifyToken returns the user id of a valid token: HS256 with our secret,
// exp required and in the future, sub a positive decimal user id.
func verifyToken(secret []byte, raw string) (int64, error) {
	u, _, err := verifyClaims(secret, raw)
	return u, err
}

// verifyClaims is verifyToken that also returns the token's expiry.
func verifyClaims(secret []byte, raw string) (user int64, exp time.Time, err error) {
	if err := checkTokenJSON(raw); err != nil {
		return 0, exp, err
	}
	var claims jwt.RegisteredClaims
	_, err = jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
	)
	if err != nil {
		return 0, exp, err
	}
	u, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || u <= 0 || strconv.FormatInt(u, 10) != claims.Subject {
		return 0, exp, errors.New("sub is not a user id")
	}
	return u, claims.ExpiresAt.Time, nil
}

// errTokenJSON is the cause of a 401 for a token whose header or claims
// are ambiguous or of the wrong type.
var errTokenJSON = errors.New("token JSON refused")

// checkTokenJSON refuses what jwt's decoding would let through silently:
// a member repeated in the header or the claims (Go's decoder keeps the
// last one, and matches names case-insensitively, so {"sub":"1","SUB":"2"}
// is a duplicate too: another verifier could read the other one), and a
// time claim (exp, nbf, iat) that is not a JSON number (jwt accepts
// "exp":"1700000000", a string). The signature is checked after this, by
// jwt; either failure is the same 401.
func checkTokenJSON(raw string) error {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil // jwt says what is wrong with it
	}
	for i, part := range parts[:2] {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
		if err != nil {
			return nil
		}
		if err := checkJSONMembers(b, i == 1); err != nil {
			return fmt.Errorf("%w: %v", errTokenJSON, err)
		}
	}
	return nil
}

// checkJSONMembers checks the members of the JSON object b: no name twice
// (compared case-insensitively) and, for claims, numeric time claims.
func checkJSONMembers(b []byte, claims bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // not an object: jwt refuses it
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		key := strings.ToLower(name)
		if seen[key] {
			return fmt.Errorf("%q given twice", name)
		}
		seen[key] = true
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if claims && (key == "exp" || key == "nbf" || key == "iat") {
			if _, ok := v.(json.Number); !ok {
				return fmt.Errorf("%s must be a number", name)
			}
		}
	}
	return nil
}

// tokenCache remembers verified tokens until their expiry, so that a
// client's token is verified (HMAC, base64, JSON claims) once rather than
// on every request. Only tokens that passed verifyToken enter it, keyed by
// the whole token; a forged or altered token never matches one. A shard
// that fills up is emptied. A nil *tokenCache remembers nothing.
type tokenCache struct {
	max       int
	shards    [16]tokenShard
	hit, miss func()
}

type tokenShard struct {
	mu sync.Mutex
	m  map[string]cachedToken
}

type cachedToken struct {
	user int64
	exp  time.Time
}

func newTokenCache(n int, hit, miss func()) *tokenCache {
	if n <= 0 {
		return nil
	}
	c := &tokenCache{max: max(n/16, 1), hit: hit, miss: miss}
	for i := range c.shards {
		c.shards[i].m = map[string]cachedToken{}
	}
	return c
}

func (c *tokenCache) shard(tok string) *tokenShard {
	// The signature ends the token: its last bytes are as good as a hash.
	var h byte
	if n := len(tok); n > 0 {
		h = tok[n-1] ^ tok[n/2]
	}
	return &c.shards[h%16]
}

func (c *tokenCache) get(tok string, now time.Time) (int64, bool) {
	if c == nil {
		return 0, false
	}
	sh := c.shard(tok)
	sh.mu.Lock()
	t, ok := sh.m[tok]
	if ok && !now.Before(t.exp) {
		delete(sh.m, tok)
		ok = false
	}
	sh.mu.Unlock()
	if ok {
		c.hit()
	} else {
		c.miss()
	}
	return t.user, ok
}

func (c *tokenCache) put(tok string, user int64, exp time.Time) {
	if c == nil {
		return
	}
	sh := c.shard(tok)
	sh.mu.Lock()
	if len(sh.m) >= c.max {
		clear(sh.m)
	}
	sh.m[tok] = cachedToken{user: user, exp: exp}
	sh.mu.Unlock()
}

// authenticator resolves bearer tokens: verified once, then remembered
// (tokenCache) until their expiry. It serves the API routes (bearer) and
// the WebSocket server (Authenticate, its ws.Authenticator).
type authenticator struct {
	secret []byte
	tokens *tokenCache // nil when disabled
}

// bearer resolves the bearer token of r's Authorization header.
func (a *authenticator) bearer(r *http.Request) (int64, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return 0, apierr.Unauthorized("missing bearer token")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return 0, apierr.Unauthorized("authorization is not a bearer token")
	}
	tok = strings.TrimSpace(tok)
	if u, ok := a.tokens.get(tok, time.Now()); ok {
		return u, nil
	}
	u, exp, err := verifyClaims(a.secret, tok)
	if err == nil {
		a.tokens.put(tok, u, exp)
	}
	if err != nil {
		msg := "invalid token"
		if errors.Is(err, jwt.ErrTokenExpired) {
			msg = "token expired"
		}
		return 0, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: msg, Err: err}
	}
	return u, nil
}

// Authenticate reads a WebSocket upgrade's token from the Authorization
// header or, for browsers, the access_token query parameter.
func (a *authenticator) Authenticate(r *http.Request) (int64, error) {
	if r.Header.Get("Authorization") != "" {
		return a.bearer(r)
	}
	tok := r.URL.Query().Get("access_token")
	if tok == "" {
		return 0, apierr.Unauthorized("missing bearer token (Authorization header or access_token parameter)")
	}
	u, err := verifyToken(a.secret, tok)
	if err != nil {
		return 0, &Error{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized, Message: "invalid token", Err: err}
	}
	return u, nil
}

// handleDevToken is POST /v1/dev/token, registered only in dev mode.
func (g *Gateway) handleDevToken(w http.ResponseWriter, r *http.Request) error {
	var req protocol.DevTokenRequest
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.UserID <= 0 {
		return apierr.BadRequest("user_id must be a positive integer")
	}
	tok, err := IssueToken(g.cfg.AuthSecret, req.UserID, g.cfg.DevTokenTTL)
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, protocol.DevToken{Token: tok, UserID: req.UserID,
		ExpiresAt: time.Now().Add(g.cfg.DevTokenTTL).UTC().Truncate(time.Second)})
	return nil
}
